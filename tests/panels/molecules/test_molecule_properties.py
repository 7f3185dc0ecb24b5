"""Property test of molecule sets (issue 20): hypothesis draws edit histories of the molecule
panel (select a row, accept / reject / flag / unmark, edit a SMILES (valid or not),
standardise, undo, redo, reopen the file, restart the app) on a small SMILES file, through the
window's real undo history and autosave, and after every step checks that

- nothing raised and nothing was reported as an error (a bad SMILES is only refused);
- the set equals a fresh read of the file with the history's applied edits replayed (as their
  JSON, the way autosave keeps them);
- the entry being edited, and the grid's and table's current rows, exist;

and at the end that undoing everything gives the file as read. "Reopen" opens the same file
again in the panel (a fresh read; the autosaved edits are replayed through
``host.restore_edits``); "restart" does it in a new panel on a new history over the same
workspace, as after quitting. The "ci" profile runs 25 derandomized examples (~10 s here)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from panels.molecules.model import FLAGS, MoleculeSetModel, decode
from panels.molecules.view import MoleculesPanel
from tests.panels.conftest import HistoryHost, close_widget

SMILES = ["CCO ethanol", "c1ccccc1O phenol", "[Na+].[O-]C(=O)C acetate", "CCN ethylamine"]
REFERENCE = "c1ccccc1C(=O)O benzoic\nCCCCCC hexane\n"  # small: the default one takes seconds
EDITS = ("CCCl", "OCC", "C1CC", "c1ccccc1", "not a smiles", "[NH4+].[Cl-]")
ROWS = st.integers(0, len(SMILES) - 1)

ACTIONS = st.one_of(
    st.tuples(st.just("select"), ROWS),
    st.tuples(st.just("mark"), st.sampled_from(FLAGS)),
    st.tuples(st.just("edit"), st.sampled_from(EDITS)),
    st.tuples(st.just("standardise")),
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
    for name, view in (("grid", panel.grid), ("table", panel.table)):
        row = view.currentIndex().row()
        if row >= view.model().rowCount():
            return f"the {name}'s current row {row} of {view.model().rowCount()}"
    return None


class Session:
    """The panel and host a history runs in; ``restart`` replaces both."""

    def __init__(self, folder: Path, path: Path) -> None:
        self.folder, self.path = folder, path
        self.host: HistoryHost
        self.panel: MoleculesPanel
        self._start()

    def _start(self) -> None:
        self.host = HistoryHost(self.folder / "runs", self.folder / "workspace")
        self.host.history.on_error = lambda title, message: self.host.errors.append(
            (title, message))
        self.panel = MoleculesPanel(self.host)
        assert self.panel.load_reference(self.folder / "reference.smi")
        assert self.panel.open_file(self.path)

    def close(self) -> None:
        close_widget(self.panel)

    def act(self, action: tuple) -> None:
        """One user action, through the panel's own handlers."""
        name, *args = action
        panel = self.panel
        if name == "select":
            panel.select_row(args[0])
        elif name == "mark":
            panel.set_flag(args[0])
        elif name == "edit":
            panel.apply_edit(args[0])
        elif name == "standardise":
            panel.standardise()
        elif name == "undo":
            self.host.undo()
        elif name == "redo":
            self.host.redo()
        elif name == "reopen":
            assert panel.open_file(self.path)
        elif name == "restart":
            self.close()
            self._start()


@given(st.lists(ACTIONS, min_size=4, max_size=25))
def test_molecule_edit_histories_keep_the_set_and_the_selection_true(qapp, actions) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "set.smi"
        path.write_text("\n".join(SMILES) + "\n")
        (folder / "reference.smi").write_text(REFERENCE)
        session = Session(folder, path)
        try:
            for step, action in enumerate(actions):
                session.act(action)
                where = f"after step {step} {action}"
                host, panel = session.host, session.panel
                assert host.errors == [], f"{where}: {host.errors}"
                assert selection_problem(panel) is None, f"{where}: {selection_problem(panel)}"
                applied = host.history.applied(panel.model.document)
                assert state(panel.model) == fresh_read(path, applied), where
            while session.host.history.stack.canUndo():
                session.host.undo()
            assert state(session.panel.model) == fresh_read(path)
            assert selection_problem(session.panel) is None
        finally:
            session.close()
