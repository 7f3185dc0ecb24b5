"""Issue 21, molecules: every export says where it came from (the file and its hash, the run
that made it, the sort, scaffold filter and search, which molecules); the grid is drawn at
twice the screen's resolution; data exports (SMILES, CSV, SDF) get a ``.provenance.json``
sidecar, from the dialog's worker too; Ctrl+E writes the figure of the tab in front."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QItemSelectionModel
from PySide6.QtGui import QImage

from engine import provenance
from engine.content import content_hash
from panels.molecules.view import TAB_HISTOGRAMS
from studio.widgets import figure_export

SMILES = ["CCO ethanol", "c1ccccc1O phenol", "CC(=O)Oc1ccccc1C(=O)O aspirin",
          "CCCCCCCCCC decane", "c1ccccc1N aniline"]
SELECT = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows


def _set(folder: Path) -> Path:
    path = folder / "set.smi"
    path.write_text("\n".join(SMILES) + "\n")
    return path


def test_the_grid_is_drawn_at_2x_with_the_view_that_chose_its_molecules(panel, tmp_path):
    path = _set(tmp_path)
    assert panel.open_file(path)
    panel.model.sort("MolWt", descending=True)
    assert panel.search("c1ccccc1") == 3

    png = panel.export_grid(tmp_path / "grid.png")

    image = QImage(str(png))
    assert (image.width(), image.height()) == (5 * 440, 360)  # 5 cells of 2 x (220 x 180)
    assert round(image.dotsPerMeterX() * 0.0254) == 192
    record = provenance.read(png)
    assert record["sources"] == [{"path": str(path.resolve()),
                                  "hash": content_hash(path.resolve()),
                                  "size": path.stat().st_size}]
    view = record["view"]
    assert view["figure"] == "grid" and view["dpi"] == 192
    assert view["sorted by"] == "MolWt descending" and view["SMARTS"] == "c1ccccc1 (3 hits)"
    assert [m["name"] for m in view["molecules"]] == ["aspirin", "decane", "phenol",
                                                      "aniline", "ethanol"]
    assert view["molecules"][0] == {"row": 3, "name": "aspirin",
                                    "smiles": "CC(=O)Oc1ccccc1C(=O)O"}
    svg = panel.export_grid(tmp_path / "grid.svg", dpi=96)
    assert provenance.read(svg)["view"]["count"] == 5


def test_data_exports_get_a_sidecar_naming_the_rows_and_the_run(panel, tmp_path):
    run = tmp_path / "runs" / "20260101-000000-000001"
    (run / "artifacts").mkdir(parents=True)
    (run / "params.json").write_text(json.dumps({"method": "kcgm.calibrate",
                                                 "params": {"steps": 3}, "seed": 11}))
    path = _set(run / "artifacts")
    assert panel.open_file(path)
    for row in (1, 3):
        panel.grid.selectionModel().select(panel.grid_model.index(row), SELECT)

    for suffix in (".smi", ".csv", ".sdf"):
        written = panel.export_set(tmp_path / f"chosen{suffix}")
        sidecar = written.with_name(written.name + ".provenance.json")
        record = json.loads(sidecar.read_text())
        assert record == provenance.read(written)
        assert record["runs"] == [{"run_id": run.name, "method": "kcgm.calibrate",
                                   "params": {"steps": 3}, "seed": 11}]
        assert record["view"]["selection"] == "2 selected"
        assert [m["name"] for m in record["view"]["molecules"]] == ["phenol", "decane"]
        assert record["sources"][0]["path"] == str(path.resolve())


def test_the_dialogs_worker_export_writes_the_sidecar_too(panel, tmp_path, qtbot):
    assert panel.open_file(_set(tmp_path))
    assert panel.export_set(tmp_path / "bg.smi", background=True) is None
    assert panel.wait_computed()
    qtbot.waitUntil(lambda: panel.status.text().startswith("Exported"), timeout=10_000)
    record = provenance.read(tmp_path / "bg.smi")
    assert record["view"]["count"] == 5 and record["view"]["figure"] == "selection"


def test_a_refused_export_leaves_no_sidecar(panel, tmp_path):
    assert panel.open_file(_set(tmp_path))
    assert panel.export_set(tmp_path / "none.fasta") is None
    assert not (tmp_path / "none.fasta").exists()
    assert not (tmp_path / "none.fasta.provenance.json").exists()


def test_the_histogram_caption_is_the_information_line(panel, tmp_path):
    assert panel.open_file(_set(tmp_path))
    plain = QImage(str(panel.export_histogram(tmp_path / "plain.png", dpi=96)))
    captioned = QImage(str(panel.export_histogram(tmp_path / "caption.png", dpi=96,
                                                  caption=True)))
    assert captioned.height() > plain.height() and captioned.width() == plain.width()
    assert "set.smi" in panel.info_line() and "shown 5 of 5" in panel.info_line()


def test_ctrl_e_writes_the_figure_of_the_tab_in_front(main_window, qtbot, tmp_path,
                                                      monkeypatch):

    panel = main_window.open_panel("molecules")
    assert panel.open_file(_set(tmp_path))
    target = tmp_path / "ctrl-e.png"
    monkeypatch.setattr(figure_export, "ask_export",
                        lambda *args, **kwargs: figure_export.ExportChoice(target))

    main_window.export_current_plot()
    assert provenance.read(target)["view"]["figure"] == "grid"

    panel.tabs.setCurrentIndex(TAB_HISTOGRAMS)
    main_window.export_current_plot()
    assert provenance.read(target)["view"]["figure"] == "histogram"
    assert QImage(str(target)).width() == 2 * panel.histogram.width()
