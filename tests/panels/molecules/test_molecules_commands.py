"""The molecule panel's commands (issue 37) and its session protocol (issue 39).

Without a window: a ``MoleculesState`` on the real edit history opens a set, names molecules
by name, SMILES or #record, edits, marks, undoes, searches, sorts, filters and exports, and the
same logged commands mean the same on another file with the same names. In the panel: every
command is refused with the reason for a bad argument and for an element that does not exist,
and nothing changes; a click runs the command the log shows; ``view_state`` round-trips to the
same state and the same picture on a new panel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from panels.molecules.commands import COMMANDS, MoleculesState, molecule_label, register
from panels.molecules.model import MoleculeSetModel
from panels.molecules.view import TAB_3D, TAB_SEQUENCE, MoleculesPanel
from studio.commands import CommandRefused, CommandRegistry
from tests.panels.molecules.test_molecules_panel import REFERENCE, SMILES, UndoHost
from tests.studio.test_sessions import _difference, _picture
from tests.studio.test_sessions_routing import PICTURE_TOLERANCE, _same

# the same molecules in another order, another file: commands name them the same way
REORDERED = ["CCCCCCCCCC decane", "c1ccccc1O phenol", "CC(=O)Oc1ccccc1C(=O)O aspirin",
             "CCO ethanol", "[Na+].[O-]C(=O)c1ccccc1 benzoate"]
TWINS = ["CCO twin", "CCN twin", "CCC", "CCC"]  # a name twice, a SMILES twice, no names


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    found = {}
    for name, lines in (("set", SMILES), ("other", REORDERED), ("ref", REFERENCE),
                        ("twins", TWINS)):
        found[name] = tmp_path / f"{name}.smi"
        found[name].write_text("\n".join(lines) + "\n")
    return found


@pytest.fixture
def headless(tmp_path, qapp):
    """A state and a registry, no window: the commands a script or test runs."""
    host = UndoHost(tmp_path / "runs")
    state = MoleculesState(MoleculeSetModel(), host)
    registry = register(CommandRegistry())
    registry.bind("molecules", state)
    return state, registry


def marks(model: MoleculeSetModel) -> dict[str, str]:
    return {entry.name: entry.flag for entry in model.entries if entry.flag}


def test_commands_have_stable_ids_help_and_argument_models():
    ids = [command.id for command in COMMANDS]
    assert len(ids) == len(set(ids)) >= 30
    for command in COMMANDS:
        assert command.id.startswith("molecules.") and command.help.strip()
        assert "\n" not in command.help and command.schema()["type"] == "object"
    undoable = {c.id for c in COMMANDS if c.undoable}
    assert undoable == {"molecules.edit_smiles", "molecules.standardise_molecule",
                        "molecules.mark_molecule"}


def test_edit_mark_and_undo_through_the_history_without_a_window(headless, files):
    state, registry = headless
    history = state.host.history
    assert registry.run("molecules.open", path=str(files["set"]))
    assert [e.name for e in state.model.entries][:2] == ["ethanol", "phenol"]
    registry.run("molecules.mark_molecule", molecule="phenol", flag="accepted")
    registry.run("molecules.edit_smiles", molecule="ethanol", smiles="CCN")
    registry.run("molecules.standardise_molecule", molecule="benzoate")
    entries = {e.name: e for e in state.model.entries}
    assert entries["phenol"].flag == "accepted" and entries["ethanol"].smiles == "CCN"
    assert entries["benzoate"].smiles == "O=C(O)c1ccccc1"
    assert history.stack.count() == 3 and history.stack.undoText() == "Standardise benzoate"
    history.stack.undo()
    history.stack.undo()
    assert entries["ethanol"].smiles == "CCO" and "." in entries["benzoate"].smiles
    assert entries["phenol"].flag == "accepted"
    history.stack.redo()
    assert entries["ethanol"].smiles == "CCN"
    # the editor's molecule is the default; marking it so again changes nothing
    registry.run("molecules.select_molecule", molecule="aspirin")
    registry.run("molecules.mark_molecule", flag="rejected")
    assert entries["aspirin"].flag == "rejected" and history.stack.count() == 3
    assert registry.run("molecules.mark_molecule", flag="rejected") is False
    assert history.stack.count() == 3


def test_search_sort_filter_and_export_without_a_window(headless, files, tmp_path):
    state, registry = headless
    registry.run("molecules.open", path=str(files["set"]))
    assert registry.run("molecules.search", smarts="c1ccccc1") == 3
    registry.run("molecules.sort_by", column="MolWt", descending=True)
    assert state.model.entry_at(0).name == "aspirin"
    registry.run("molecules.sort_by", column="#")
    assert state.model.entry_at(0).name == "ethanol"
    said = registry.run("molecules.filter_scaffold", scaffold="c1ccccc1")
    assert said == "scaffold c1ccccc1: 3 molecule(s)"
    assert registry.run("molecules.filter_scaffold", scaffold="acyclic").endswith("2 molecule(s)")
    registry.run("molecules.filter_scaffold")
    registry.run("molecules.select_molecules", molecules=["decane", "phenol"])
    target = tmp_path / "chosen.smi"
    said = registry.run("molecules.export_selection", path=str(target))
    assert said == "Exported 2 record(s) of 2 selected to chosen.smi"
    assert target.read_text().split() == ["Oc1ccccc1", "phenol", "CCCCCCCCCC", "decane"]
    sidecar = json.loads(Path(f"{target}.provenance.json").read_text())
    assert [m["name"] for m in sidecar["view"]["molecules"]] == ["phenol", "decane"]
    registry.run("molecules.run_method", method="kcgm.calibrate", params={"steps": 5})
    assert state.host.submitted[-1]["method"] == "kcgm.calibrate"


def test_a_logged_command_means_the_same_on_another_file(headless, files):
    state, registry = headless
    lines = []
    registry.listen(lambda invocation: lines.append(invocation))
    registry.run("molecules.open", path=str(files["set"]))
    registry.run("molecules.mark_molecule", molecule="aspirin", flag="flagged")
    logged = lines[-1]
    assert logged.python() == \
        'studio.command("molecules.mark_molecule", molecule="aspirin", flag="flagged")'
    registry.run("molecules.open", path=str(files["other"]))  # aspirin is record 3 here
    registry.run(logged.command.id, **logged.args)
    assert marks(state.model) == {"aspirin": "flagged"}
    assert state.model.entries[2].name == "aspirin"


def test_molecules_without_a_telling_name_are_named_by_smiles_or_record(headless, files):
    state, registry = headless
    registry.run("molecules.open", path=str(files["twins"]))
    labels = [molecule_label(state, i) for i in range(len(state.model.entries))]
    assert labels == ["CCO", "CCN", "#3", "#4"]
    with pytest.raises(CommandRefused, match="2 molecules of twins.smi are named 'twin': "
                                             r"name one by its record \(#1, #2\)"):
        registry.run("molecules.mark_molecule", molecule="twin", flag="accepted")
    for label in labels:
        registry.run("molecules.mark_molecule", molecule=label, flag="accepted")
    assert [e.flag for e in state.model.entries] == ["accepted"] * 4
    with pytest.raises(CommandRefused, match="twins.smi has no record #9"):
        registry.run("molecules.select_molecule", molecule="#9")


def test_commands_that_draw_are_refused_without_the_window(headless, files):
    state, registry = headless
    with pytest.raises(CommandRefused, match="no molecules are open"):
        registry.run("molecules.search", smarts="C")
    registry.run("molecules.open", path=str(files["set"]))
    with pytest.raises(CommandRefused, match="molecules.show_tab: cannot show a tab without "
                                             "the panel's window"):
        registry.run("molecules.show_tab", tab="3D")


# -- in the panel --------------------------------------------------------------------------


@pytest.fixture
def panel(tmp_path, qapp, make_widget, files):
    widget = make_widget(MoleculesPanel, UndoHost(tmp_path / "runs"))
    widget.resize(1200, 760)
    widget.show()
    assert widget.open_file(files["set"])
    widget.load_reference(files["ref"])
    return widget


def snapshot(panel) -> tuple:
    """Everything a refused command must leave as it was."""
    model = panel.model
    return ([e.smiles for e in model.entries], [e.flag for e in model.entries],
            list(model.order), model.sort_key, model.query, model.scaffold_filter,
            panel.host.history.stack.count(), panel._current, json.dumps(panel.view_state()))


# (command, a bad argument, an element that does not exist, what the refusal says)
REFUSALS = [
    ("molecules.open", {"path": 3}, {"path": "gone.smi"}, "no such file"),
    ("molecules.open_antibodies", {"directory": ["a"]}, {"directory": "gone"}, "gone"),
    ("molecules.open_reference", {"path": 1.5}, {"path": "gone.smi"}, "no such file"),
    ("molecules.open_md", {"topology": "a.psf"}, {"topology": "a.psf", "trajectory": "a.dcd"},
     "no such file"),
    ("molecules.open_trajectory", {}, {"path": "trajectory_9.xyz"}, "nor a trajectory"),
    ("molecules.open_run", {"folder": "x"}, {"path": "no-run"}, "not a run folder"),
    ("molecules.open_output", {"path": None}, {"path": "gone.csv"}, "no such file"),
    ("molecules.search", {"smarts": 5}, {"smarts": "[C;X4"}, "not a valid SMARTS"),
    ("molecules.sort_by", {"column": "MolWt", "descending": "very"}, {"column": "Colour"},
     "no column 'Colour'"),
    ("molecules.filter_scaffold", {"scaffold": 7}, {"scaffold": "C1CCCCCCC1"},
     "has the scaffold"),
    ("molecules.select_molecule", {}, {"molecule": "caffeine"}, "no molecule named"),
    ("molecules.select_molecules", {"molecules": "phenol"},
     {"molecules": ["phenol", "caffeine"]}, "no molecule named 'caffeine'"),
    ("molecules.edit_smiles", {"molecule": "phenol"}, {"molecule": "caffeine", "smiles": "C"},
     "no molecule named"),
    ("molecules.standardise_molecule", {"molecule": 2}, {"molecule": "caffeine"},
     "no molecule named"),
    ("molecules.mark_molecule", {"molecule": "phenol", "flag": "maybe"},
     {"molecule": "caffeine", "flag": "accepted"}, "no molecule named"),
    ("molecules.show_property", {"property": "Weight"}, None, ""),
    ("molecules.show_histogram", {"property": "Colour"}, None, ""),
    ("molecules.show_tab", {"tab": "Plot"}, None, ""),
    ("molecules.number_chains", {"scheme": "martin"}, {"scheme": "kabat"},
     "no protein chains"),
    ("molecules.select_residue", {"chain": "A", "residue": "one"},
     {"chain": "Z", "residue": 1}, "no chain 'Z'"),
    ("molecules.colour_3d", {"colouring": "rainbow"}, None, ""),
    ("molecules.style_3d", {"style": "wire"}, None, ""),
    ("molecules.pin_structure", {"molecule": []}, {"molecule": "caffeine"},
     "no molecule named"),
    ("molecules.show_frame", {"frame": 0}, {"frame": 3}, "no trajectory"),
    ("molecules.play_trajectory", {"playing": "often"}, {"playing": True}, "no trajectory"),
    ("molecules.set_speed", {"fps": 0}, None, ""),
    ("molecules.export_grid", {"path": "g.png", "dpi": 5}, {"path": "set.smi/g.png"},
     "set.smi/g.png"),
    ("molecules.export_histogram", {"path": "h.png", "caption": "yes please"},
     {"path": "set.smi/h.png"}, "set.smi/h.png"),
    ("molecules.export_curve", {"path": "c.png", "dpi": 10_000}, {"path": "c.png"},
     "no trajectory"),
    ("molecules.export_3d", {"path": "s.png", "dpi": 1}, {"path": "s.jpg"}, ".png"),
    ("molecules.export_selection", {"path": "x.smi", "molecules": "phenol"},
     {"path": "x.smi", "molecules": ["caffeine"]}, "no molecule named"),
    ("molecules.run_method", {"method": "nope.run"}, None, ""),
]


def test_every_command_has_a_refusal_case():
    assert {case[0] for case in REFUSALS} == {command.id for command in COMMANDS}


@pytest.mark.parametrize("command_id, bad, missing, said", REFUSALS,
                         ids=[case[0] for case in REFUSALS])
def test_refused_with_the_reason_and_nothing_changed(panel, tmp_path, monkeypatch,
                                                     command_id, bad, missing, said):
    monkeypatch.chdir(tmp_path)
    panel.commands.run("molecules.select_molecule", molecule="phenol")
    before = snapshot(panel)
    with pytest.raises(CommandRefused, match=f"^{command_id}: ") as refused:
        panel.commands.run(command_id, **bad)
    assert "got" in str(refused.value) or "required" in str(refused.value) or \
        "unknown argument" in str(refused.value), refused.value
    assert snapshot(panel) == before
    if missing is not None:
        with pytest.raises(CommandRefused, match=f"^{command_id}: ") as refused:
            panel.commands.run(command_id, **missing)
        assert said in str(refused.value)
        assert snapshot(panel) == before
    assert not panel.host.submitted


def test_a_click_runs_the_command_the_log_shows_and_undo_reverts_it(panel):
    lines = []
    panel.commands.listen(lambda invocation: lines.append(invocation.python()))
    phenol = next(e for e in panel.model.entries if e.name == "phenol")
    read = phenol.smiles
    panel.select_row(1)                       # a click in the grid
    panel.flag_box.activated.emit(1)          # "accepted" chosen in the editor
    panel.smiles_edit.setText("c1ccccc1N")
    panel.apply_button.click()
    panel.table.sortByColumn(panel.table_model.columns.index("MolWt"),
                             Qt.SortOrder.DescendingOrder)
    assert lines == [
        'studio.command("molecules.select_molecule", molecule="phenol")',
        'studio.command("molecules.mark_molecule", molecule="phenol", flag="accepted")',
        'studio.command("molecules.edit_smiles", molecule="phenol", smiles="c1ccccc1N")',
        'studio.command("molecules.sort_by", column="MolWt", descending=True)']
    assert phenol.smiles == "Nc1ccccc1" and phenol.flag == "accepted"
    assert panel.table.horizontalHeader().sortIndicatorSection() == \
        panel.table_model.columns.index("MolWt")
    panel.host.history.stack.undo()
    assert phenol.smiles == read and phenol.flag == "accepted"
    panel.host.history.stack.undo()
    assert phenol.flag == ""
    # a script's sort moves the header's arrow without sorting twice
    panel.commands.run("molecules.sort_by", column="name")
    assert panel.model.entry_at(0).name == "aspirin"
    assert panel.table.horizontalHeader().sortIndicatorSection() == \
        panel.table_model.columns.index("name")
    assert lines[4:] == ['studio.command("molecules.sort_by", column="name")']
    # an invalid SMILES is said beside the field and runs nothing
    panel.smiles_edit.setText("C1CC")
    panel.smiles_edit.returnPressed.emit()
    assert panel.validity_label.text().startswith("not a valid SMILES")
    assert panel.host.errors == []


def _settle(panel, seconds: float = 0.6) -> None:
    """Until the grid's depictions and the background work are in."""
    end = time.monotonic() + 20
    quiet_since = None
    while time.monotonic() < end:
        QApplication.processEvents()
        busy = panel.grid_model.pending or panel.grid_model.queued or \
            panel.pool.activeThreadCount()
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > seconds:
            return
        time.sleep(0.02)


def test_view_state_round_trips_to_the_same_state_and_picture(panel, files, tmp_path,
                                                              make_widget):
    run = panel.commands.run
    run("molecules.sort_by", column="MolWt", descending=True)
    run("molecules.search", smarts="c1ccccc1")
    run("molecules.show_property", property="TPSA")
    run("molecules.select_molecule", molecule="aspirin")
    run("molecules.select_molecules", molecules=["aspirin", "phenol"])
    run("molecules.colour_3d", colouring="element")
    run("molecules.show_histogram", property="LogP")
    run("molecules.show_tab", tab="Edit")
    panel.splitter.setSizes([500, 700])
    _settle(panel)
    state = panel.view_state()
    assert state["open"] == {"file": str(files["set"])}
    assert state["current"] == "aspirin" and state["selection"] == ["aspirin", "phenol"]
    assert state["sort"] == {"column": "MolWt", "descending": True}
    assert state["search"] == "c1ccccc1" and state["property"] == "TPSA"
    assert state["tab"] == "Edit" and state["reference"] == str(files["ref"])
    json.dumps(state)
    before = _picture(panel)

    fresh = make_widget(MoleculesPanel, UndoHost(tmp_path / "runs2"))
    fresh.resize(panel.size())
    fresh.show()
    assert fresh.restore_view_state(json.loads(json.dumps(state))) == []
    _settle(fresh)
    assert _same(fresh.view_state(), state), (fresh.view_state(), state)
    difference = _difference(_picture(fresh), before)
    assert difference < PICTURE_TOLERANCE, difference
    assert fresh.host.history.stack.count() == 0  # restoring pushed no edits


def test_restore_names_what_it_could_not_restore(panel, files, make_widget, tmp_path):
    state = panel.view_state()
    files["set"].write_text("\n".join(REORDERED) + "\n")  # the same names, another order
    state.update({"current": "caffeine", "selection": ["phenol", "caffeine"],
                  "sort": {"column": "Colour"}, "tab": "Plot", "unknown key": 1})
    fresh = make_widget(MoleculesPanel, UndoHost(tmp_path / "runs2"))
    problems = fresh.restore_view_state(state)
    assert any("no molecule named 'caffeine'" in p for p in problems)
    assert any("no column 'Colour'" in p for p in problems)
    assert any("molecules.show_tab" in p for p in problems)
    assert len(problems) == 4 and fresh.model.entries  # the rest was restored
    gone = {"open": {"file": str(tmp_path / "gone.smi")}, "tab": "Table"}
    assert ["gone.smi" in p for p in fresh.restore_view_state(gone)] == [True]


def test_residues_frames_and_3d_by_command(panel, tmp_path, qtbot):
    from tests.panels.molecules.test_geometry_and_sequence import peptide_pdb

    assert panel.open_file(peptide_pdb(tmp_path / "pep.pdb"))
    run = panel.commands.run
    run("molecules.show_tab", tab="Sequence")
    assert panel.tabs.currentIndex() == TAB_SEQUENCE
    chains = [t.label for t in panel.sequence_strip.tracks]
    said = run("molecules.select_residue", chain=chains[-1], residue=2)
    assert said == panel.residue_label.text() and said.startswith(f"{chains[-1]} 2 ")
    assert panel.view_state()["residue"] == {"chain": chains[-1], "residue": 2}
    with pytest.raises(CommandRefused, match="has no residue 99"):
        run("molecules.select_residue", chain=chains[-1], residue=99)
    run("molecules.show_tab", tab="3D")
    run("molecules.style_3d", style="cartoon")
    assert panel.tabs.currentIndex() == TAB_3D and panel.style_box.currentText() == "cartoon"
    qtbot.waitUntil(lambda: panel.scene is not None, timeout=20_000)
    assert run("molecules.pin_structure").startswith("pinned #1")


def test_the_3d_camera_round_trips_where_opengl_draws(panel, tmp_path, qtbot, make_widget):
    """Offscreen (no OpenGL 2.1) the 3-D tab says why and there is no camera to keep; on a
    display (the test below reruns this one under Xvfb's) the camera round-trips."""
    from tests.panels.molecules.test_geometry_and_sequence import peptide_pdb

    pdb = peptide_pdb(tmp_path / "pep.pdb")
    assert panel.open_file(pdb)
    panel.commands.run("molecules.show_tab", tab="3D")
    if panel.viewer_3d is None:
        assert not os.environ.get("STUDIO_REQUIRE_GL"), panel.placeholder_3d.text()
        assert "OpenGL" in panel.placeholder_3d.text()
        return
    qtbot.waitUntil(lambda: panel.scene is not None, timeout=20_000)
    panel.viewer_3d.setCameraPosition(distance=55.0, elevation=12.0, azimuth=70.0)
    state = panel.view_state()
    assert state["camera"]["distance"] == 55.0 and state["tab"] == "3D"
    fresh = make_widget(MoleculesPanel, UndoHost(tmp_path / "runs2"))
    fresh.resize(panel.size())
    fresh.show()
    assert fresh.restore_view_state(state) == []
    qtbot.waitUntil(lambda: fresh.scene is not None and fresh._pending_camera is None,
                    timeout=20_000)
    assert _same(fresh.view_state()["camera"], state["camera"])
    broken = {**state, "camera": {"distance": "far"}}
    assert any("3-D camera" in p for p in fresh.restore_view_state(broken))


def test_a_trajectory_frame_and_residue_round_trip(panel, tmp_path, make_widget):
    fasta = tmp_path / "growing.fasta"
    grown = ["MKV", "MKVLA", "MKVLADE", "MKVLADEGHW", "MKVLADEGHWKRST"]
    fasta.write_text("".join(f">t={i / 4:.2f}\n{s}\n" for i, s in enumerate(grown)))
    run = panel.commands.run
    run("molecules.open", path=str(fasta))
    run("molecules.show_frame", frame=4)
    run("molecules.set_speed", fps=4)
    chain = panel.sequence_strip.tracks[0].label
    assert chain == "t=0.750" and panel.player.frame == 3
    run("molecules.select_residue", chain=chain, residue=7)
    with pytest.raises(CommandRefused, match="growing.fasta has 5 frames, not 9"):
        run("molecules.show_frame", frame=9)
    state = panel.view_state()
    assert state["frame"] == 4 and state["fps"] == 4
    assert state["residue"] == {"chain": chain, "residue": 7}
    assert state["open"] == {"file": str(fasta)} and state["tab"] == "Sequence"
    fresh = make_widget(MoleculesPanel, UndoHost(tmp_path / "runs2"))
    fresh.resize(panel.size())
    fresh.show()
    assert fresh.restore_view_state(state) == []
    after = fresh.view_state()
    assert _same(after, state), {k: (after.get(k), v) for k, v in state.items()
                                 if after.get(k) != v}
    assert fresh.residue_label.text() == panel.residue_label.text() == "t=0.750 7 GLU (negative)"


@pytest.mark.gl
def test_the_3d_camera_round_trips_on_a_display() -> None:
    """The test above again, on Xvfb's display where OpenGL draws."""
    if not os.environ.get("DISPLAY"):
        pytest.skip("no X display: gl tests run under Xvfb, as `make test` does")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"{__file__}::test_the_3d_camera_round_trips_where_opengl_draws"],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[3],
        env={**os.environ, "QT_QPA_PLATFORM": "xcb", "STUDIO_REQUIRE_GL": "1"})
    assert "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
