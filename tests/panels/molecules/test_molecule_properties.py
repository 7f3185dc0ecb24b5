"""Property test of molecule sets (issue 20): hypothesis draws edit histories of the molecule
panel (select a row, accept / reject / flag / unmark, edit a SMILES (valid or not),
standardise, sort by a column, search a SMARTS, undo, redo, reopen the file, restart the app)
on a small SMILES file, through the window's real undo history and autosave, and after every
step checks that

- nothing raised and nothing was reported as an error (a bad SMILES is only refused);
- the set equals a fresh read of the file with the history's applied edits replayed (as their
  JSON, the way autosave keeps them);
- the entry being edited, the grid's and table's current rows, the display order and the
  search hits refer to entries that exist;

and at the end that undoing everything gives the file as read (reopen and restart: see
``tests.panels.edit_sessions``). The "ci" profile runs 25 derandomized examples (~5 s here)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from PySide6.QtCore import Qt

from panels.molecules.model import FLAGS, MoleculeSetModel, decode
from panels.molecules.view import MoleculesPanel
from tests.panels.edit_sessions import EditSession, check_history

SMILES = ["CCO ethanol", "c1ccccc1O phenol", "[Na+].[O-]C(=O)C acetate", "CCN ethylamine"]
REFERENCE = "c1ccccc1C(=O)O benzoic\nCCCCCC hexane\n"  # small: the default one takes seconds
EDITS = ("CCCl", "OCC", "C1CC", "c1ccccc1", "not a smiles", "[NH4+].[Cl-]")
ROWS = st.integers(0, len(SMILES) - 1)

ACTIONS = st.one_of(
    st.tuples(st.just("select"), ROWS),
    st.tuples(st.just("mark"), st.sampled_from(FLAGS)),
    st.tuples(st.just("edit"), st.sampled_from(EDITS)),
    st.tuples(st.just("standardise")),
    st.tuples(st.just("sort"), st.sampled_from(("#", "SMILES", "flag", "MolWt")), st.booleans()),
    st.tuples(st.just("search"), st.sampled_from(("", "c1ccccc1", "[OX2H]", "N"))),
    st.tuples(st.just("undo")), st.tuples(st.just("undo")),
    st.tuples(st.just("redo")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("restart")),
)


def fresh_read(path: Path, commands=()) -> list[tuple[str, str]]:
    """(SMILES, mark) of each entry of the file read anew, the commands replayed."""
    model = MoleculeSetModel()
    model.load(path)
    for command in commands:
        decode(command.to_json()).apply(model)
    return state(model)


def state(model: MoleculeSetModel) -> list[tuple[str, str]]:
    return [(entry.smiles, entry.flag) for entry in model.entries]


def selection_problem(panel: MoleculesPanel) -> str | None:
    """What the selection refers to that does not exist, or None."""
    count = len(panel.model.entries)
    if not -1 <= panel._current < count:
        return f"editing entry {panel._current} of {count}"
    if sorted(panel.model.order) != list(range(count)):
        return f"the display order {panel.model.order} is not the {count} entries"
    if any(not 0 <= index < count for index in panel.model.hits):
        return f"search hits {sorted(panel.model.hits)} beyond the {count} entries"
    for name, view in (("grid", panel.grid), ("table", panel.table)):
        row = view.currentIndex().row()
        if row >= view.model().rowCount():
            return f"the {name}'s current row {row} of {view.model().rowCount()}"
    return None


def act(panel: MoleculesPanel, action: tuple) -> None:
    """One user action, through the panel's own handlers."""
    name, *args = action
    if name == "select":
        panel.select_row(args[0])
    elif name == "mark":
        panel.set_flag(args[0])
    elif name == "edit":
        panel.apply_edit(args[0])
    elif name == "standardise":
        panel.standardise()
    elif name == "sort":  # a click on a table header
        order = Qt.SortOrder.DescendingOrder if args[1] else Qt.SortOrder.AscendingOrder
        panel.table.sortByColumn(panel.table_model.columns.index(args[0]), order)
    elif name == "search":
        panel.smarts_edit.setText(args[0])
        panel.smarts_edit.returnPressed.emit()


def open_set(panel: MoleculesPanel, path: Path) -> bool:
    return panel.load_reference(path.parent / "reference.smi") and panel.open_file(path)


@given(st.lists(ACTIONS, min_size=4, max_size=25))
def test_molecule_edit_histories_keep_the_set_and_the_selection_true(qapp, actions) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "set.smi"
        path.write_text("\n".join(SMILES) + "\n")
        (folder / "reference.smi").write_text(REFERENCE)
        session = EditSession(folder, MoleculesPanel, lambda panel: open_set(panel, path))
        check_history(session, actions, act, state,
                      lambda commands: fresh_read(path, commands), selection_problem)
