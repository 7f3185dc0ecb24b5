"""The molecule panel against an in-process host: load SMILES (bad lines reported), sort,
SMARTS search, edit and undo through the window's real undo history, export the grid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt

from engine.methods import kcgm
from panels.molecules import MANIFEST
from panels.molecules.model import ANTIBODIES, EditSmiles, MoleculeSetModel, SetFlag, decode
from panels.molecules.view import TAB_HISTOGRAMS, TAB_SEQUENCE, MoleculesPanel
from tests.panels.conftest import FakeHost

SMILES = ["CCO ethanol", "c1ccccc1O phenol", "C1CC broken", "CC(=O)Oc1ccccc1C(=O)O aspirin",
          "CCCCCCCCCC decane", "[Na+].[O-]C(=O)c1ccccc1 benzoate"]
REFERENCE = ["c1ccccc1C(=O)O benzoic", "CC(=O)Nc1ccc(O)cc1 paracetamol", "CCCCCC hexane"]


class UndoHost(FakeHost):
    """A FakeHost whose edits go through the shell's own undo adapter (studio.undo)."""

    def __init__(self, run_root: Path) -> None:
        from studio.undo import EditHistory

        super().__init__(run_root, methods=[spec.describe() for spec in kcgm.SPECS])
        self._params.update({spec.id: spec.params for spec in kcgm.SPECS})
        self.history = EditHistory()

    def push_edit(self, document, command, model) -> None:
        self.history.push(document, command, model)

    def forget_edits(self, document) -> None:
        self.history.forget(document)


@pytest.fixture
def files(tmp_path) -> tuple[Path, Path]:
    molecules, reference = tmp_path / "set.smi", tmp_path / "ref.smi"
    molecules.write_text("\n".join(SMILES) + "\n")
    reference.write_text("\n".join(REFERENCE) + "\n")
    return molecules, reference


@pytest.fixture
def panel(tmp_path, qapp, make_widget, files):
    host = UndoHost(tmp_path / "runs")
    widget = make_widget(MoleculesPanel, host)
    widget.resize(1200, 700)
    widget.show()
    widget.load_reference(files[1])
    return widget


def rows(panel) -> list[str]:
    table = panel.table_model
    return [table.data(table.index(r, 1)) for r in range(table.rowCount())]


def test_manifest_names_the_view_factory():
    import importlib

    module, name = MANIFEST.factory.split(":")
    assert getattr(importlib.import_module(module), name) is MoleculesPanel
    assert MANIFEST.id == "molecules" and "smiles" in MANIFEST.formats


def test_loads_smiles_and_reports_the_bad_line(panel, files, qtbot):
    assert panel.open_file(files[0])
    assert panel.grid_model.rowCount() == 5 and panel.table_model.rowCount() == 5
    assert "1 bad record(s) skipped (first: line 3" in panel.status.text()
    grid = panel.grid_model
    grid.data(grid.index(0))  # the value under the cell comes from the worker thread
    grid.data(grid.index(0), Qt.ItemDataRole.DecorationRole)  # and so does the depiction
    qtbot.waitUntil(lambda: not grid.pending and panel.cache.rendered >= 1, timeout=10_000)
    assert grid.data(grid.index(0)).startswith("ethanol\nMolWt 46")
    pixmap = grid.data(grid.index(0), Qt.ItemDataRole.DecorationRole)
    assert pixmap is not grid.blank and not pixmap.isNull()


def test_a_grid_paint_computes_nothing_and_starts_its_work_after(qapp, qtbot):
    from panels.molecules.depict import DepictionCache
    from panels.molecules.view import MoleculeGridModel, _pixmap

    molecules = MoleculeSetModel()
    molecules.load_smiles(["CCO", "C1CC", "c1ccccc1"])
    grid = MoleculeGridModel(molecules, DepictionCache(convert=_pixmap))
    entry = molecules.entries[0]
    assert grid.data(grid.index(0)) == "#1\nMolWt …"
    assert grid.data(grid.index(0), Qt.ItemDataRole.DecorationRole) is grid.blank
    grid.data(grid.index(1))  # invalid, but nobody knows yet
    assert entry._valid is None and not entry._values  # no RDKit on the GUI thread
    assert grid.queued == {("CCO", 150, 120, ()): True, ("C1CC", 150, 120, ()): True}
    assert grid.pool.activeThreadCount() == 0  # started once the paint is over
    qtbot.waitUntil(lambda: not grid.pending, timeout=10_000)
    assert grid.data(grid.index(0)) == "#1\nMolWt 46.1" and grid.data(grid.index(1)) == \
        "#2\ninvalid"
    drawn = grid.cache.rendered
    grid.shown_property = "HeavyAtoms"  # another value; the depiction is kept, not redrawn
    assert grid.data(grid.index(0)) == "#1\nHeavyAtoms …"
    assert grid.queued == {("CCO", 150, 120, ()): False}
    qtbot.waitUntil(lambda: grid.data(grid.index(0)) == "#1\nHeavyAtoms 3", timeout=10_000)
    assert grid.cache.rendered == drawn
    grid.stop()


def test_a_bad_file_is_reported_not_raised(panel, tmp_path):
    bad = tmp_path / "bad.sdf"
    bad.write_bytes(b"\x00\x01binary")
    assert not panel.open_file(bad)
    assert panel.host.errors and str(bad) in panel.host.errors[0][1]


def test_header_click_sorts_grid_and_table_together(panel, files):
    panel.open_file(files[0])
    column = panel.table_model.columns.index("MolWt")
    panel.table.sortByColumn(column, Qt.SortOrder.DescendingOrder)
    assert rows(panel) == ["aspirin", "benzoate", "decane", "phenol", "ethanol"]
    assert panel.grid_model.data(panel.grid_model.index(0)).startswith("aspirin")
    panel.table.sortByColumn(column, Qt.SortOrder.AscendingOrder)
    assert rows(panel)[0] == "ethanol"


def test_smarts_search_counts_hits_and_highlights(panel, files):
    panel.open_file(files[0])
    assert panel.search("c1ccccc1") == 3 and panel.hits_label.text() == "3 hit(s)"
    assert set(panel.model.hits) == {1, 2, 4}  # entry indices: phenol, aspirin, benzoate
    assert len(panel.model.hits[1].atoms) == 6
    assert panel.search("[C;X4") == 0 and panel.host.errors[-1][0] == "Cannot search"
    assert panel.search("") == 0 and not panel.model.hits


def test_edit_and_standardise_are_undoable(panel, files, qtbot):
    panel.open_file(files[0])
    history = panel.host.history
    panel.select_row(0)
    panel.smiles_edit.setText("CCN")
    assert panel.validity_label.text() == "valid SMILES"
    assert panel.apply_edit()
    assert panel.model.entries[0].smiles == "CCN"
    grid = panel.grid_model
    assert grid.data(grid.index(0)) == "ethanol\nMolWt …"  # the edit dropped the old value
    qtbot.waitUntil(lambda: grid.data(grid.index(0)).startswith("ethanol\nMolWt 45"),
                    timeout=10_000)
    panel.smiles_edit.setText("C1CC")
    assert panel.validity_label.text() == "not a valid SMILES" and not panel.apply_edit()
    panel.select_row(4)
    assert panel.standardise() and panel.model.entries[4].smiles == "O=C(O)c1ccccc1"
    panel.set_flag("accepted")
    assert history.stack.count() == 3
    history.stack.undo()
    history.stack.undo()
    assert panel.model.entries[4].smiles == "O=C([O-])c1ccccc1.[Na+]" and not \
        panel.model.entries[4].flag
    history.stack.undo()
    assert panel.model.entries[0].smiles == "CCO"
    history.stack.redo()
    assert panel.model.entries[0].smiles == "CCN" and panel.smiles_edit.text() != ""


def test_edits_survive_as_json():
    model = MoleculeSetModel()
    model.load_smiles(["CCO", "c1ccccc1"])
    for command in (model.edit(0, "OC(C)C"), model.flagging(1, "flagged")):
        again = decode(json.loads(json.dumps(command.to_json())))
        assert again == command and isinstance(again, (EditSmiles, SetFlag))
        again.apply(model)
    assert model.entries[0].smiles == "CC(C)O" and model.entries[1].flag == "flagged"
    with pytest.raises(ValueError):
        model.edit(0, "C1CC")


def test_nearest_reference_and_histogram(panel, files):
    panel.open_file(files[0])
    panel.select_row(4)  # benzoate: the reference's benzoic acid after cleaning
    assert panel.nearest_label.text().startswith("nearest reference: benzoic (Tanimoto 1.00)")
    assert panel.histogram.series_names() == []  # drawn when its tab is shown
    panel.tabs.setCurrentIndex(TAB_HISTOGRAMS)
    panel.histogram_box.setCurrentText("HeavyAtoms")
    assert panel.histogram.series_names() == ["set.smi", "reference"]


def test_exports_grid_png_svg_and_the_set(panel, files, tmp_path):
    panel.open_file(files[0])
    panel.search("c1ccccc1")
    assert panel.export_grid(tmp_path / "grid.png").read_bytes()[:4] == b"\x89PNG"
    svg = panel.export_grid(tmp_path / "grid.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and svg.count("class='bond-0 ") >= 5
    assert panel.export_set(tmp_path / "out.smi").read_text().splitlines()[0] == "CCO ethanol"
    header = panel.export_set(tmp_path / "out.csv").read_text().splitlines()[0]
    assert header.startswith("smiles,name,flag,MolWt")


def test_run_kcgm_opens_the_generated_molecules(panel, files):
    panel.run_kcgm({"steps": 5})
    (submitted,) = panel.host.submitted
    assert submitted["method"] == "kcgm.calibrate" and submitted["inputs"] == {
        "reference": str(files[1])}
    job = next(iter(panel.jobs))
    made = Path(panel.host.run_dir(job)) / "artifacts" / "generated.csv"
    made.write_text("model,smiles,valid\nkcgm,CCO,True\nkcgm,C1CC,False\n")
    panel.host.emit(job, "job_progress", step=3, total=5, metrics={"mmd2": 0.2})
    assert panel.status.text() == f"kcgm.calibrate ({job}): running, step 3 / 5 · mmd2 0.2"
    panel.host.emit(job, "job_result", outputs={"generated_csv": "artifacts/generated.csv"})
    assert [e.smiles for e in panel.model.entries] == ["CCO"]


def test_diversity_is_zero_for_identical_molecules_and_grows_with_difference():
    model = MoleculeSetModel()
    model.load_smiles(["CCO", "OCC", "CCO", "c1ccccc1", "C1CC"])
    assert model.diversity([0, 1, 2]) == 0.0  # one molecule written three ways
    assert model.diversity([0]) is None and model.diversity([0, 4]) is None  # 4 is invalid
    assert model.diversity([0, 3]) == 1.0  # no shared Morgan bit
    whole = model.diversity()
    assert 0.0 < whole < 1.0 and abs(whole - 3 / 6) < 1e-6  # 3 of 6 pairs share nothing
    assert len(model._fingerprints) == 3  # cached per SMILES (CCO, c1ccccc1, C1CC)


def test_scaffold_column_groups_and_filter(panel, files, qtbot):
    panel.open_file(files[0])
    assert panel.wait_computed()
    qtbot.waitUntil(lambda: panel.scaffold_box.isEnabled(), timeout=10_000)
    assert panel.scaffold_box.itemText(1) == "c1ccccc1 (3)"
    assert panel.scaffold_box.itemText(2) == "acyclic (2)"
    column = panel.table_model.columns.index("scaffold")
    assert panel.table_model.data(panel.table_model.index(1, column)) == "c1ccccc1"
    panel.filter_scaffold("c1ccccc1")
    assert rows(panel) == ["phenol", "aspirin", "benzoate"]
    panel.table.sortByColumn(panel.table_model.columns.index("MolWt"),
                             Qt.SortOrder.DescendingOrder)
    assert rows(panel) == ["aspirin", "benzoate", "phenol"]  # sorted within the group
    panel.model.edit(0, "CCN").apply(panel.model)  # an edit outside the group is harmless
    panel.filter_scaffold(None)
    assert len(rows(panel)) == 5 and rows(panel)[0] == "aspirin"


def test_set_and_selection_diversity_are_shown(panel, files, qtbot):
    from PySide6.QtCore import QItemSelectionModel

    panel.open_file(files[0])
    qtbot.waitUntil(lambda: panel.set_diversity is not None, timeout=10_000)
    assert panel.diversity_label.text() == f"diversity: set {panel.model.diversity():.3f}"
    selection = panel.grid.selectionModel()
    flags = QItemSelectionModel.SelectionFlag.Select
    selection.select(panel.grid_model.index(0), flags)
    selection.select(panel.grid_model.index(3), flags)  # ethanol and decane
    assert panel.selected_entries() == [0, 3]
    expected = panel.model.diversity([0, 3])
    qtbot.waitUntil(lambda: "selection" in panel.diversity_label.text(), timeout=10_000)
    assert panel.diversity_label.text().endswith(f"selection {expected:.3f}")


def test_jain_antibodies_open_with_their_measured_properties(panel):
    if not ANTIBODIES.is_dir():
        pytest.skip("../shared/data/antibodies is absent")
    assert panel.open_antibodies()
    assert panel.table_model.rowCount() == 274
    columns = panel.table_model.columns
    assert "scaffold" not in columns and "Fab Tm by DSF" in columns
    row = rows(panel).index("abituzumab VH")
    assert panel.table_model.data(panel.table_model.index(row, columns.index(
        "Fab Tm by DSF"))) == "75.5"
    assert not panel.scaffold_box.isEnabled() and panel.diversity_label.text() == ""
    assert not panel.open_antibodies(ANTIBODIES.parent) and panel.host.errors


def test_sequence_tab_shows_a_strip_and_a_click_selects_a_residue(panel, tmp_path, qtbot):
    from panels.molecules.sequence import CELL_WIDTH, LABEL_WIDTH, ROW_HEIGHT

    fasta = tmp_path / "chains.fasta"
    fasta.write_text(">heavy\nEVQLVESGG\n>light\nDIQMTQ\n")
    assert panel.open_file(fasta)
    panel.tabs.setCurrentIndex(TAB_SEQUENCE)
    panel.select_row(1)
    strip = panel.sequence_strip
    assert [t.sequence for t in strip.tracks] == ["DIQMTQ"]
    assert panel.residue_label.text().startswith("6 residues in 1 chain(s)")
    point = QPoint(LABEL_WIDTH + 3 * CELL_WIDTH + 5, 4 + ROW_HEIGHT // 2)
    qtbot.mouseClick(strip, Qt.MouseButton.LeftButton, pos=point)
    assert strip.selected == (0, 3) and panel.residue_label.text() == "light 4 MET (hydrophobic)"
    panel.open_file(files_smiles(tmp_path))
    panel.select_row(0)
    assert strip.tracks == [] and panel.residue_label.text().startswith("no sequence")


def files_smiles(tmp_path: Path) -> Path:
    path = tmp_path / "one.smi"
    path.write_text("CCO ethanol\n")
    return path


def test_background_loops_wait_while_the_grid_scrolls(panel, files, qtbot):
    import threading

    panel.open_file(files[0])
    panel.grid.verticalScrollBar().valueChanged.emit(1)  # the user scrolls the grid
    waiting = threading.Thread(target=panel.model.pause)  # a scaffold loop between molecules
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive()  # it yields the GIL to the paints
    panel.model.pause()  # never on the GUI thread, which would wait for itself
    qtbot.waitUntil(lambda: not waiting.is_alive(), timeout=5000)  # scrolling stopped: go on
    assert panel.wait_computed()
    qtbot.waitUntil(lambda: panel.set_diversity is not None, timeout=10_000)


def finish_kcgm(panel: MoleculesPanel, csv_text: str) -> tuple[str, Path]:
    """Run kCGM and finish it with a generated.csv of our own."""
    panel.run_kcgm({"steps": 5})
    job = list(panel.jobs)[-1]
    made = Path(panel.host.run_dir(job)) / "artifacts" / "generated.csv"
    made.write_text(csv_text)
    panel.host.emit(job, "job_result", outputs={"generated_csv": "artifacts/generated.csv"})
    return job, made


def test_a_kcgm_run_never_replaces_the_set_being_triaged_unasked(panel, files):
    """Issue 20, finding 6: a kCGM run replaced the molecule set the user was triaging."""
    asked = []
    panel.outputs.ask = lambda output, current, answer: asked.append((output, current, answer))
    panel.open_file(files[0])
    panel.select_row(0)
    panel.set_flag("accepted")
    panel.smarts_edit.setText("c1ccccc1")
    panel.search("c1ccccc1")
    job, made = finish_kcgm(panel, "model,smiles,valid\nkcgm,CCN,True\n")
    ((output, current, answer),) = asked
    assert current == "set.smi" and output.path == made and job in output.label
    answer(False)  # "Keep set.smi"
    assert panel.model.path == str(files[0]) and panel.model.entries[0].flag == "accepted"
    assert str(made) in panel.status.text() and panel.outputs.button.isVisibleTo(panel)
    assert panel.hits_label.text() == "3 hit(s)"
    assert panel.outputs.open_waiting()
    assert [e.smiles for e in panel.model.entries] == ["CCN"]
    assert panel.host.history.stack.count() == 0  # the triaged set left the history
    assert panel.smarts_edit.text() == "" and panel.hits_label.text() == ""


def test_a_run_without_one_valid_molecule_opens_its_samples_marked_invalid(panel, qtbot):
    """Issue 20, finding 6: zero valid samples raised a modal error instead."""
    _job, made = finish_kcgm(panel, "model,smiles,valid\nkcgm,C1CC,False\n"
                                    "kcgm,CN(C)(C)(C)C,False\nkcgm,c1cccc1,False\n")
    qtbot.waitUntil(lambda: panel.model.inspecting, timeout=10_000)  # read on a worker
    assert panel.host.errors == []
    assert panel.model.path == str(made) and len(panel.model.entries) == 3
    assert not any(entry.valid for entry in panel.model.entries)
    table = panel.table_model
    problem = table.columns.index("problem")
    assert [table.data(table.index(row, problem)) for row in range(3)] == [
        "SMILES syntax: ring bond 1 is never closed",
        "Explicit valence for atom # 1 N, 5, is greater than permitted",
        "Can't kekulize mol.  Unkekulized atoms: 0 1 2 3 4"]
    assert "none is a valid molecule" in panel.status.text()
    assert panel.grid_model.data(panel.grid_model.index(0), Qt.ItemDataRole.ToolTipRole) == \
        "C1CC\ninvalid: SMILES syntax: ring bond 1 is never closed"
    panel.select_row(0)
    assert panel.apply_edit("C1CC1")  # mended: a valid molecule now, undoably
    assert panel.model.entries[0].valid and table.data(table.index(0, problem)) == ""
    panel.host.history.stack.undo()
    assert table.data(table.index(0, problem)).startswith("SMILES syntax")


def test_a_failing_command_is_reported_not_raised_to_the_event_loop(panel, files, monkeypatch):
    panel.open_file(files[0])
    panel.select_row(0)

    def broken(*_args):
        raise RuntimeError("stale index")

    monkeypatch.setattr(panel.model, "flagging", broken)
    panel.flag_box.activated.emit(1)  # "accepted", as a click would
    assert panel.host.errors[-1] == ("Cannot mark the molecule",
                                     "molecules.mark_molecule: RuntimeError: stale index")
    assert panel.host.history.stack.count() == 0 and panel.model.entries[0].flag == ""


def test_opening_a_runs_samples_keeps_the_triaged_sets_edits_saved(history_host, make_widget,
                                                                  files):
    panel = make_widget(MoleculesPanel, history_host)
    panel.load_reference(files[1])
    panel.outputs.ask = lambda output, current, answer: answer(True)  # "Open the run's output"
    panel.open_file(files[0])
    panel.select_row(1)
    panel.set_flag("rejected")
    job = "20260101-000000-0000ff"
    made = Path(history_host.run_dir(job)) / "generated.csv"
    made.parent.mkdir(parents=True)
    made.write_text("model,smiles\nkcgm,CCN\n")
    panel.jobs.follow(job, "kcgm.calibrate")
    history_host.emit(job, "job_result", outputs={"generated_csv": "generated.csv"})
    assert panel.model.path == str(made) and history_host.forgotten == [f"molecules:{files[0]}"]
    assert history_host.history.stack.count() == 0
    panel.open_file(files[0])
    assert panel.model.entries[1].flag == "rejected" and "1 saved edit(s) restored" in \
        panel.status.text()
