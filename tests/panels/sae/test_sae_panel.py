"""The SAE browser against an in-process host: open a real sae_pc1.train run, sort, open a
feature page, search, label through the window's undo history, export, train from the form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.context import JobContext
from engine.methods import sae_pc1
from panels.sae import MANIFEST
from panels.sae.model import FeatureTable, SAEBrowserModel, SetFeatureNote, decode
from panels.sae.view import COL_LABEL, COLUMNS, SAEPanel
from tests.panels.conftest import FakeHost
from tests.panels.sae.runs import make_sae_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A small real run: synthetic activations with word tokens, 2 seeds x raw/bypass."""
    return make_sae_run(tmp_path_factory.mktemp("sae_run"))


class UndoHost(FakeHost):
    """A FakeHost whose edits go through the shell's own undo adapter (studio.undo)."""

    def __init__(self, run_root: Path) -> None:
        from studio.undo import EditHistory

        super().__init__(run_root, methods=[spec.describe() for spec in sae_pc1.SPECS])
        self._params.update({spec.id: spec.params for spec in sae_pc1.SPECS})
        self.history = EditHistory()

    def push_edit(self, document, command, model) -> None:
        self.history.push(document, command, model)

    def forget_edits(self, document) -> None:
        self.history.forget(document)


@pytest.fixture
def host(tmp_path, qapp):
    return UndoHost(tmp_path / "runs")


@pytest.fixture
def panel(host, make_widget):
    widget = make_widget(SAEPanel, host)
    widget.resize(1300, 800)
    widget.show()
    return widget


def cell(panel: SAEPanel, row: int, column: str, role=None):
    """What the feature table shows in a cell (its value with ``Qt.UserRole``)."""
    from PySide6.QtCore import Qt

    index = panel.features.index(row, COLUMNS.index(column))
    return panel.features.data(index, Qt.ItemDataRole.DisplayRole if role is None else role)


def value(panel: SAEPanel, row: int, column: str):
    from PySide6.QtCore import Qt

    return cell(panel, row, column, Qt.ItemDataRole.UserRole)


def show_synthetic(panel: SAEPanel, table: FeatureTable) -> None:
    """Load a feature table without a run, as select_sae does after reading one."""
    panel.model.table, panel.model.current_sae = table, "synthetic"
    panel.model.events.emit("loaded")


def test_manifest_names_the_view_factory():
    import importlib

    module, name = MANIFEST.factory.split(":")
    assert getattr(importlib.import_module(module), name) is SAEPanel
    assert MANIFEST.formats == ("sae",) and MANIFEST.methods == ("sae_pc1.",)


def test_opens_a_run_and_sorts_by_each_measure(panel, run_dir):
    assert panel.open_path(run_dir)
    assert panel.sae_box.count() == 2 and panel.model.current_sae == "L0-bypass-s0"
    assert panel.table.rowCount() == 48
    for column in ("importance", "density", "reproducibility"):
        panel.sort_by(column, descending=True)
        shown = [value(panel, r, column) for r in range(48)]
        finite = [v for v in shown if np.isfinite(v)]
        assert finite == sorted(finite, reverse=True)
        ids = [panel.feature_at_row(r) for r in range(48)]
        expected = panel.model.sorted_features(column)
        assert getattr(panel.model.table, column)[ids[0]] == pytest.approx(
            getattr(panel.model.table, column)[expected[0]])
    panel.sae_box.setCurrentText("L0-raw-s0")
    assert panel.model.current_sae == "L0-raw-s0"
    assert panel.title_label.text().startswith("L0-raw-s0 · feature ")  # its first row opened
    assert panel.page.feature == panel.feature_at_row(0)
    assert panel.density_plot.series_names() == ["features"]


def test_a_16k_feature_table_is_virtual_and_sorts_in_the_model(panel):
    from PySide6.QtWidgets import QTableView, QTableWidget

    n = 16384
    rng = np.random.default_rng(0)
    density = rng.random(n)
    show_synthetic(panel, FeatureTable(np.arange(n), density, rng.random(n), rng.random(n),
                                       rng.random(n), [f"tok{i}" for i in range(n)]))
    assert isinstance(panel.table, QTableView) and not isinstance(panel.table, QTableWidget)
    assert panel.table.model() is panel.features  # cells come from the arrays, no items
    assert panel.features.rowCount() == n and panel.table.rowCount() == n
    panel.sort_by("density", descending=False)
    expected = int(np.argsort(density)[16000])
    assert panel.feature_at_row(16000) == expected
    assert value(panel, 16000, "density") == density[expected]
    assert cell(panel, 16000, "feature") == str(expected)
    assert cell(panel, 16000, "top tokens") == f"tok{expected}"
    assert panel.features.data(panel.features.index(n, 0)) is None  # past the end


def test_sorting_a_column_is_numeric_not_textual(panel):
    density = np.array([0.5, 10.0, 2.0, 100.0, np.nan, 1e-5, 9.0])
    n = len(density)
    nan = np.full(n, np.nan)
    show_synthetic(panel, FeatureTable(np.arange(n), density, nan.copy(), nan.copy(),
                                       nan.copy(), ["b", "A", "c", "", "a", "B", "C"]))
    panel.sort_by("density", descending=False)
    assert [value(panel, r, "density") for r in range(n - 1)] == [1e-5, 0.5, 2.0, 9.0, 10.0,
                                                                  100.0]
    assert [panel.feature_at_row(r) for r in range(n)] == [5, 0, 2, 6, 1, 3, 4]  # NaN last
    assert cell(panel, n - 1, "density") == "—"
    panel.sort_by("density", descending=True)
    assert [panel.feature_at_row(r) for r in range(n)] == [3, 1, 6, 2, 0, 5, 4]  # NaN last
    panel.sort_by("feature", descending=True)
    assert [value(panel, r, "feature") for r in range(n)] == list(range(n))[::-1]
    panel.sort_by("top tokens", descending=False)  # text: case-folded, empty last
    assert [cell(panel, r, "top tokens").casefold() for r in range(n)] == \
        ["a", "a", "b", "b", "c", "c", ""]


def test_sorting_keeps_the_chosen_feature_selected(panel, run_dir):
    assert panel.open_path(run_dir)
    panel.table.selectRow(7)
    feature = panel.feature_at_row(7)
    assert panel.page.feature == feature
    panel.sort_by("density", descending=False)
    assert panel.feature_at_row(panel.table.currentIndex().row()) == feature
    assert panel.page.feature == feature


def test_opens_most_important_first_with_the_sae_name_readable(panel, run_dir, tmp_path):
    assert panel.open_path(run_dir)
    shown = [panel.feature_at_row(r) for r in range(5)]
    assert shown == [int(i) for i in panel.model.sorted_features("importance")[:5]]
    assert panel.page.feature == shown[0]
    name_width = panel.sae_box.fontMetrics().horizontalAdvance(panel.model.current_sae)
    assert panel.sae_box.width() > name_width
    from engine.io.sae import read_sae, write_sae

    sae = read_sae(run_dir / "checkpoints" / "L0-raw-s1")
    write_sae(tmp_path / "bare", sae.weights, sae.cfg)
    assert panel.open_path(tmp_path / "bare")  # nothing measured: by feature id
    assert [panel.feature_at_row(r) for r in range(3)] == [0, 1, 2]


def test_feature_page_shows_contexts_histogram_neighbours_and_matches(panel, run_dir):
    panel.open_path(run_dir)
    feature = int(panel.model.sorted_features("density")[0])
    panel.show_feature(feature)  # how fast: benchmarks/bench_sae.py
    page = panel.page
    assert page.contexts["view"] == "token_heat" and page.contexts["tokens"]
    assert page.activations.size == round(page.density * 1200)
    assert panel.neighbour_list.count() == 10 and panel.match_list.count() == 1
    assert page.matches[0][0] == "L0-bypass-s1" and -1 <= page.matches[0][2] <= 1
    assert str(feature) in panel.title_label.text()
    neighbour = panel.neighbour_list.item(0)
    panel._open_listed(neighbour)
    assert panel.page.feature == page.neighbours[0][0]


def test_search_lists_the_features_that_fire_on_a_word(panel, run_dir):
    panel.open_path(run_dir)
    hits = panel.search("river")
    assert hits and panel.search_list.count() == len(hits)
    rows = [i for i, token in enumerate(panel.model.tokens) if token == "river"]
    top = hits[0][0]
    expected = float(np.asarray(panel.model.code_values)[rows][
        np.asarray(panel.model.code_indices)[rows] == top].sum())
    assert hits[0][1] == pytest.approx(expected, rel=1e-5)
    assert panel.search("no-such-word") == []


def test_labels_are_undoable_through_the_window_history(panel, host, run_dir):
    panel.open_path(run_dir)
    panel.sort_by("feature", descending=False)
    panel.show_feature(3)
    panel.label_edit.setText("rivers")
    panel.label_edit.editingFinished.emit()
    panel.set_label(3, "seen near water", field_name="note")
    assert panel.model.label_of(3) == "rivers"
    assert cell(panel, 3, "label") == "rivers"
    changed = []
    panel.features.dataChanged.connect(lambda first, last, _roles: changed.append(
        (first.row(), first.column(), last.row(), last.column())))
    assert panel.page.note == "seen near water" and host.history.stack.count() == 2
    host.history.stack.undo()
    assert panel.page.note == "" and panel.model.label_of(3) == "rivers"
    host.history.stack.undo()
    assert panel.model.label_of(3) == "" and cell(panel, 3, "label") == ""
    assert changed[-1] == (3, COL_LABEL, 3, COL_LABEL)  # the view repaints that cell
    host.history.stack.redo()
    assert panel.label_edit.text() == "rivers"


def test_edits_survive_as_json(run_dir):
    model = SAEBrowserModel()
    model.open(run_dir)
    command = model.note_command(5, "label", "greek letters")
    again = decode(json.loads(json.dumps(command.to_json())))
    assert isinstance(again, SetFeatureNote) and again == command
    again.apply(model)
    assert model.label_of(5) == "greek letters"
    again.revert(model)
    assert model.label_of(5) == ""
    with pytest.raises(ValueError):
        model.note_command(5, "density", "1")


def test_exports_the_dashboard_as_html_and_png(panel, run_dir, tmp_path):
    panel.open_path(run_dir)
    panel.show_feature(2)
    panel.set_label(2, "a <b>bold</b> name")
    page = panel.export_dashboard(tmp_path / "feature.html").read_text()
    assert "feature 2" in page and "&lt;b&gt;bold&lt;/b&gt;" in page and "<span" in page
    png = panel.export_dashboard(tmp_path / "feature.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="html, .png, .svg or .pdf"):
        panel.export_dashboard(tmp_path / "feature.txt")


@pytest.mark.parametrize("suffix", ["png", "svg", "pdf"])
def test_the_dashboard_is_drawn_for_the_page_with_every_context(panel, run_dir, tmp_path,
                                                                 suffix, monkeypatch):
    """Issue 21: the dashboard PNG was a screenshot of the widget with scroll bars and empty
    boxes, and named neither the run nor the feature."""
    from PySide6.QtWidgets import QScrollBar

    from engine import provenance
    from panels.sae import dashboard

    drawn = []
    monkeypatch.setattr(dashboard.FeatureDashboard, "close",
                        lambda self: drawn.append(self) or True)
    panel.open_path(run_dir)
    feature = next(f for f in range(48) if (panel.model.contexts(f) or {}).get("tokens"))
    panel.show_feature(feature)
    written = panel.export_dashboard(tmp_path / f"feature.{suffix}", dpi=192, caption=True)
    (figure,) = drawn
    contexts = panel.model.contexts(feature)
    shown = figure.contexts.text()
    assert all(token in shown for token in contexts["tokens"] if token.strip())
    assert shown.count("<br>") >= contexts["values"].count(None)  # every context, one a line
    assert figure.contexts.height() >= figure.contexts.heightForWidth(figure.contexts.width())
    assert not any(bar.isVisible() for bar in figure.findChildren(QScrollBar))
    assert figure.height() == figure.layout().totalHeightForWidth(figure.width())
    record = provenance.read(written)
    assert record["view"]["sae"] == "L0-bypass-s0" and record["view"]["features"] == [feature]
    assert record["view"]["dpi"] == 192
    (run,) = record["runs"]
    assert run["run_id"] == "r" and run["method"] == "sae_pc1.train" and run["seed"] == 0
    checkpoint = run_dir / "checkpoints" / "L0-bypass-s0"
    assert record["sources"][0]["path"] == str(checkpoint.resolve())
    if suffix == "png":
        from PySide6.QtGui import QImage

        image = QImage(str(written))
        assert image.width() == 2 * figure.width() and image.height() > 2 * figure.height()


def test_html_dashboard_labels_and_sae_exports_carry_provenance(panel, run_dir, tmp_path,
                                                                qtbot):
    from engine import provenance
    from engine.io.sae import read_sae

    panel.open_path(run_dir)
    panel.show_feature(3)
    panel.set_label(3, "river words")
    panel.set_label(3, "seen near water", field_name="note")
    html_record = provenance.read(panel.export_dashboard(tmp_path / "f.html"))
    assert html_record["view"]["features"] == [3] and html_record["runs"][0]["run_id"] == "r"
    labels = panel.export_labels(tmp_path / "labels.json")
    assert json.loads(labels.read_text())["features"] == [
        {"feature": 3, "label": "river words", "note": "seen near water"}]
    assert provenance.read(labels)["view"]["sae"] == "L0-bypass-s0"
    folder = panel.export_sae(tmp_path / "exported")
    qtbot.waitUntil(lambda: panel.status.text().startswith("Exported"), timeout=10_000)
    assert read_sae(folder).weights["W_dec"].shape == (48, panel.model.sae.cfg["d_in"])
    cfg = provenance.read(folder / "cfg.json")
    assert cfg["runs"][0]["run_id"] == "r" and cfg["view"]["export"] == "sae checkpoint"
    assert provenance.read(folder / "labels.json")["sources"] == cfg["sources"]


def test_the_sae_folder_export_reads_the_weights_off_the_main_thread(panel, run_dir, tmp_path,
                                                                    qtbot, monkeypatch):
    """Review of issue 22: the folder export read and wrote the weights on the Qt main
    thread. They are copied on a worker; the panel says when the export is done."""
    import threading

    from engine import atomic

    panel.open_path(run_dir)
    copied_on: list[bool] = []
    real_write = atomic.write_atomic

    def watched_write(path, write):
        copied_on.append(threading.current_thread() is threading.main_thread())
        return real_write(path, write)

    monkeypatch.setattr("panels.sae.commands.write_atomic", watched_write)
    folder = panel.export_sae(tmp_path / "exported")
    assert panel.status.text().startswith("Exporting")
    qtbot.waitUntil(lambda: panel.status.text().startswith("Exported"), timeout=10_000)
    assert copied_on and not any(copied_on)
    assert (folder / "cfg.json").is_file() and (folder / "labels.json").is_file()


def test_opens_a_checkpoint_folder_and_a_bare_saelens_folder(panel, run_dir, tmp_path):
    assert panel.open_path(run_dir / "checkpoints" / "L0-raw-s0")
    assert panel.model.current_sae == "L0-raw-s0"
    from engine.io.sae import read_sae, write_sae

    sae = read_sae(run_dir / "checkpoints" / "L0-raw-s1")
    write_sae(tmp_path / "bare", sae.weights, sae.cfg)
    assert panel.open_path(tmp_path / "bare")
    assert panel.table.rowCount() == 48
    panel.show_feature(0)
    assert panel.page.contexts is None and len(panel.page.neighbours) == 10


def test_a_bad_folder_is_reported_not_raised(panel, host, tmp_path):
    (tmp_path / "empty").mkdir()
    assert not panel.open_path(tmp_path / "empty")
    assert host.errors and str(tmp_path / "empty") in host.errors[0][1]
    (tmp_path / "empty" / "notes.txt").write_text("not an SAE")
    assert not panel.open_path(tmp_path / "empty" / "notes.txt")
    assert "notes.txt: not a file of a sae_pc1 run" in host.errors[-1][1]


def test_train_form_submits_and_opens_the_result(panel, host, run_dir):
    assert panel.run_button.isEnabled()
    panel.tabs.setCurrentIndex(panel.tabs.count() - 1)  # the Train tab, as a user would
    panel.form.set_values({"steps": 10, "d_sae": 64, "k": 4})
    panel.run()
    submitted = host.submitted[-1]
    assert submitted["method"] == "sae_pc1.train" and submitted["params"]["steps"] == 10
    job = next(iter(panel.jobs))
    host.emit(job, "job_progress", step=5, total=10, metrics={"mse": 0.5, "l0": 4.0})
    assert panel.run_status.text() == \
        f"sae_pc1.train ({job}): running, step 5 / 10 · mse 0.5, l0 4"
    host.run_dir = lambda _job: str(run_dir)
    host.emit(job, "job_result", outputs={})
    assert panel.table.rowCount() == 48 and panel.tabs.currentWidget() is panel.table
    panel.form.set_values({"k": 5000})
    panel.run()
    assert "sae_pc1.train: not started" in panel.run_status.text() or panel.form.errors()


def test_train_form_sends_its_inputs_and_shows_refusals(panel, host, tmp_path):
    assert set(panel.inputs.inputs) == {"activations", "tokens", "decoder", "text"}
    panel.form.set_values({"source": "files", "d_sae": 32, "k": 4})
    panel.inputs.set_values({"activations": str(tmp_path / "acts.npy"),
                             "tokens": str(tmp_path / "tokens.json")})
    panel.run()
    assert host.submitted[-1]["inputs"] == {"activations": str(tmp_path / "acts.npy"),
                                            "tokens": str(tmp_path / "tokens.json")}
    panel.form.set_values({"d_sae": 32, "k": 64})  # within each field's range, not together
    panel.run()
    assert "k=64 exceeds d_sae=32" in panel.form.errors()[""]


@pytest.fixture(scope="module")
def decoder_run_dir(tmp_path_factory) -> Path:
    """A tiny real run on our decoder LM: the run also holds the LM (checkpoints/decoder)."""
    root = tmp_path_factory.mktemp("sae_decoder_run")
    params = sae_pc1.Params(source="decoder", decoder_steps=20, decoder_d_model=32,
                            decoder_layers=2, decoder_vocab=300, decoder_chars=10_000,
                            max_tokens=600, max_length=32, layers=[1], d_sae=32, k=4, seeds=1,
                            bypass="off", steps=20, batch_size=128, aux_k=8, top_n=5,
                            contexts=2, context_window=2, importance_sequences=2,
                            importance_length=12)
    sae_pc1.run_train(JobContext("d", root / "run", emit=lambda e: None, seed=0,
                                 cache_root=root / "cache"), params, {})
    return root / "run"


def test_steer_box_submits_the_job_and_shows_both_continuations(panel, host, decoder_run_dir,
                                                                run_dir):
    assert panel.open_path(run_dir)
    panel.show_feature(0)
    assert not panel.steer_box.isEnabled()  # activations from files: nothing to steer
    assert panel.open_path(decoder_run_dir)
    panel.show_feature(2)
    assert panel.steer_box.isEnabled() and "promotes:" in panel.stats_label.text()
    panel.steer_prompt.setText("The city")
    panel.steer_alpha.setValue(40.0)
    panel.steer_tokens.setValue(6)
    panel.steer_button.click()
    submitted = host.submitted[-1]
    assert submitted["method"] == "sae_pc1.steer"
    assert submitted["params"] == {"feature": 2, "alpha": 40.0, "prompt": "The city",
                                   "new_tokens": 6}
    assert submitted["inputs"] == {"decoder": str(decoder_run_dir / "checkpoints" / "decoder"),
                                   "sae": str(decoder_run_dir / "checkpoints" / "L1-raw-s0")}
    (job,) = panel.steering
    assert panel.steer_result.text() == f"sae_pc1.steer ({job}): queued"
    steer = next(spec for spec in sae_pc1.SPECS if spec.id == "sae_pc1.steer")
    out_dir = Path(host.run_dir(job))  # the real method, then the host's result event
    steer.run(JobContext(job, out_dir, emit=lambda e: None, seed=0),
              steer.params(**submitted["params"]), submitted["inputs"])
    host.emit(job, "job_result", outputs={"steering": "artifacts/steering.json"})
    rows = json.loads((out_dir / "artifacts" / "steering.json").read_text())["rows"]
    shown = panel.steer_result.text()
    assert f"without: The city{rows[0][2]}" in shown and f"with alpha 40: The city{rows[1][2]}" \
        in shown
    label = panel.steer_result  # both continuations fit, none cut off
    assert label.height() >= label.heightForWidth(label.width())
    assert panel.table.rowCount() == 32  # the browser stayed on the decoder run


def test_a_training_run_never_replaces_the_open_run_unasked(panel, host, run_dir, tmp_path):
    """Issue 20, finding 6, for the SAE browser: a finished sae_pc1.train replaced the run
    the user was labelling."""
    import shutil

    asked = []
    panel.outputs.ask = lambda output, current, answer: asked.append((output, current, answer))
    panel.open_path(run_dir)
    panel.set_label(3, "rivers")
    panel.search("river")
    assert panel.search_list.count() > 0
    trained = shutil.copytree(run_dir, tmp_path / "trained")
    panel.form.set_values({"steps": 10, "d_sae": 64, "k": 4})
    panel.run()
    job = list(panel.jobs)[-1]
    host.run_dir = lambda _job: str(trained)
    host.emit(job, "job_result", outputs={})
    ((output, current, answer),) = asked
    assert current == run_dir.name and output.path == trained and job in output.label
    answer(False)  # "Keep run"
    assert panel.model.run_dir == run_dir and panel.model.label_of(3) == "rivers"
    assert str(trained) in panel.status.text() and panel.outputs.button.isVisibleTo(panel)
    assert panel.outputs.open_waiting()
    assert panel.model.run_dir == trained and panel.model.label_of(3) == ""
    assert host.history.stack.count() == 0 and panel.search_list.count() == 0
    assert panel.tabs.currentWidget() is panel.table


def test_a_failing_command_is_reported_not_raised_to_the_event_loop(panel, host, run_dir,
                                                                    monkeypatch):
    panel.open_path(run_dir)

    def broken(*_args):
        raise RuntimeError("no such SAE")

    monkeypatch.setattr(panel.model, "note_command", broken)
    panel.label_edit.setText("rivers")
    panel.label_edit.editingFinished.emit()
    assert host.errors[-1] == ("Cannot label the feature",
                               "sae.label_feature: RuntimeError: no such SAE")
    assert host.history.stack.count() == 0


def test_ctrl_e_and_the_export_dialog_write_the_dashboard(panel, run_dir, tmp_path,
                                                          monkeypatch):
    """Ctrl+E calls ``export_figure(path)`` (no plot of its own: the dashboard, at 192 dpi);
    the Export menu's dialog passes its DPI and caption choice through."""
    from engine import provenance
    from panels.sae import view
    from studio.widgets.figure_export import ExportChoice

    panel.open_path(run_dir)
    assert panel.current_plot() is None  # the feature table in front: the dashboard
    panel.show_feature(1)
    record = provenance.read(panel.export_figure(tmp_path / "ctrl-e.png"))
    assert record["view"]["dpi"] == 192 and record["view"]["features"] == [1]
    monkeypatch.setattr(view, "ask_export", lambda *args: ExportChoice(
        tmp_path / "chosen.png", 288, True))
    panel.choose_export_path()
    assert provenance.read(tmp_path / "chosen.png")["view"]["dpi"] == 288


def test_ctrl_e_on_the_density_tab_exports_that_plot_with_the_run(panel, run_dir, tmp_path):
    from engine import provenance

    panel.open_path(run_dir)
    panel.tabs.setCurrentWidget(panel.density_plot)
    plot = panel.current_plot()
    assert plot is panel.density_plot and plot.series_names() == ["features"]
    record = provenance.read(plot.export(tmp_path / "density.png"))
    assert record["view"]["figure"] == "feature density"
    assert record["view"]["sae"] == "L0-bypass-s0" and record["runs"][0]["run_id"] == "r"
