"""Artifact viewers (arrays, tables, JSON) and the claim view."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PySide6.QtCore import Qt

from panels.widgets.artifact_views import (
    ArrayCollectionView,
    ArrayView,
    JsonView,
    TableView,
    describe_array,
    view_for_artifact,
    view_for_file,
)
from studio.widgets.claim_view import QUOTE, RULE, VERDICT, ClaimView
from studio.widgets.plot_view import PlotSpecView


def test_describe_array_counts_non_finite():
    text = describe_array(np.array([1.0, np.nan, 3.0], dtype=np.float32))
    assert text == "shape 3 · float32 · min 1 · max 3 · mean 2 · 1 non-finite"


def test_array_view_draws_1d_as_a_line_and_2d_as_an_image(make_widget):
    line = make_widget(ArrayView, np.sin(np.arange(50) / 5.0), "wave")
    assert not line.line.isHidden() and line.image.isHidden()
    assert line.line.point_count("wave") == 50
    cube = make_widget(ArrayView, np.arange(24, dtype=np.int16).reshape(2, 3, 4), "cube")
    assert cube.line.isHidden() and not cube.image.isHidden()
    assert "shape 2 × 3 × 4 · int16" in cube.summary.text()
    assert cube.current_slice().tolist() == np.arange(12).reshape(3, 4).tolist()
    cube._index_boxes[0].setValue(1)
    assert cube.current_slice()[0, 0] == 12
    scalar = make_widget(ArrayView, np.array(3.5))
    assert scalar.scalar.text() == "3.5"


def test_table_view_over_rows_dicts_and_arrow(make_widget):
    import pyarrow as pa

    table = make_widget(TableView, {"columns": ["eta", "loss"], "rows": [[0.1, 0.5], [1, 0.25]]})
    model = table.model
    assert (model.rowCount(), model.columnCount()) == (2, 2)
    assert model.headerData(1, Qt.Orientation.Horizontal) == "loss"
    assert model.data(model.index(1, 1)) == "0.25"
    table.set_table({"rows": [{"a": 1, "b": None}, {"a": 2, "b": "x"}]})
    assert table.model.columns == ["a", "b"] and table.model.data(table.model.index(0, 1)) == ""
    table.set_table(pa.table({"x": [1, 2, 3]}))
    assert table.model.rowCount() == 3 and table.model.data(table.model.index(2, 0)) == "3"


def test_json_view_tree(make_widget):
    view = make_widget(JsonView, {"a": 1, "b": [1, 2, {"c": "x"}]})
    assert view.topLevelItemCount() == 2
    assert view.topLevelItem(1).text(1) == "3 items"


def test_views_for_artifacts_and_files(make_widget, tmp_path):
    np.save(tmp_path / "values.npy", np.arange(10.0))
    (tmp_path / "plot.json").write_text(json.dumps(
        {"kind": "plot", "title": "t", "series": [{"name": "s", "x": [1, 2], "y": [3, 4]}]}))
    (tmp_path / "table.json").write_text(json.dumps({"columns": ["a"], "rows": [[1]]}))
    (tmp_path / "other.json").write_text(json.dumps({"k": "v"}))
    assert isinstance(make_widget(view_for_artifact, "array", tmp_path / "values.npy"),
                      ArrayView)
    assert isinstance(make_widget(view_for_artifact, "plot", tmp_path / "plot.json"),
                      PlotSpecView)
    assert isinstance(make_widget(view_for_artifact, "table", tmp_path / "table.json"),
                      TableView)
    assert isinstance(make_widget(view_for_artifact, "json", tmp_path / "other.json"), JsonView)
    np.savez(tmp_path / "many.npz", a=np.zeros(3), b=np.ones((2, 2)))
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    assert isinstance(make_widget(view_for_file, tmp_path / "values.npy"), ArrayView)
    many = make_widget(view_for_file, tmp_path / "many.npz")
    assert isinstance(many, ArrayCollectionView) and many.chooser.count() == 2
    many.chooser.setCurrentIndex(1)
    assert many.view.array.shape == (2, 2)
    assert make_widget(view_for_file, tmp_path / "t.csv").model.rowCount() == 1


def test_broken_files_raise_errors_that_name_them(tmp_path):
    from engine.io import FormatError

    (tmp_path / "broken.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(FormatError, match="broken.npy"):
        view_for_file(tmp_path / "broken.npy")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json"):
        view_for_artifact("json", tmp_path / "bad.json")


CLAIM = {
    "paper": "toy", "statement": "the toy converges",
    "criteria": [
        {"name": "loss rises", "measured": 5, "target": 3, "op": ">=", "paper": "yes",
         "note": "", "passed": True},
        {"name": "cosine", "measured": 0.97, "target": 0.99, "op": ">=", "paper": "→ 1",
         "note": "slow", "passed": False},
    ],
    "seeds": [0, 1], "wall_s": 84.2, "smoke": False, "notes": "small d", "passed": False,
}


def test_claim_view_shows_pass_and_fail(make_widget):
    view = make_widget(ClaimView)
    assert view.verdict() == ""
    view.set_claim(CLAIM)
    assert view.verdict() == "FAIL"
    assert view.row_verdicts() == ["PASS", "FAIL"]
    assert view.table.item(1, RULE).text() == "≥ 0.99"
    assert view.table.item(1, QUOTE).text() == "→ 1"
    assert view.table.item(0, VERDICT).background().color().name() == "#1e8449"
    assert view.details.text() == "1 of 2 criteria hold · seeds 0, 1 · wall time 1 min 24 s"
    assert view.smoke_note.isHidden()
    passing = dict(CLAIM, smoke=True, criteria=CLAIM["criteria"][:1], passed=True)
    view.set_claim(passing)
    assert view.verdict() == "PASS" and view.smoke_note.text().startswith("Smoke run")


def test_a_file_artifact_opens_through_the_format_registry(qtbot, tmp_path):
    from panels.widgets.artifact_views import TableView

    path = tmp_path / "turns.csv"
    path.write_text("turn,belief\n1,0.5\n2,0.7\n")
    widget = view_for_artifact("file", path)
    qtbot.addWidget(widget)
    assert isinstance(widget, TableView)
