"""The driver of the molecule, transcript and SAE-label property tests: a panel on the window's
real undo history and autosave, the history steps every panel shares (undo, redo, reopen,
restart), and the checks made after every step of a drawn history.

"Reopen" opens the same file again in the panel (a fresh read whose autosaved edits are
replayed through ``host.restore_edits``); "restart" does it in a new panel on a new history
over the same workspace, as after quitting the app.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.panels.conftest import HistoryHost, close_widget
from tests.panels.crowd.edit_checks import escaped_exceptions

SHARED_ACTIONS = ("undo", "redo", "reopen", "restart")


class EditSession:
    """``make_panel(host)`` builds the panel and ``open_document(panel)`` opens the file in it
    (True when it did); ``restart`` replaces both panel and host."""

    def __init__(self, folder: Path, make_panel: Callable[[HistoryHost], Any],
                 open_document: Callable[[Any], bool]) -> None:
        self.folder = folder
        self._make_panel = make_panel
        self._open_document = open_document
        self.host: HistoryHost
        self.panel: Any
        self._start()

    def _start(self) -> None:
        self.host = HistoryHost(self.folder / "runs", self.folder / "workspace")
        self.host.history.on_error = lambda title, message: self.host.errors.append(
            (title, message))
        self.panel = self._make_panel(self.host)
        assert self._open_document(self.panel), f"not opened: {self.host.errors}"

    def close(self) -> None:
        close_widget(self.panel)

    def shared_step(self, name: str) -> None:
        if name == "undo":
            self.host.undo()
        elif name == "redo":
            self.host.redo()
        elif name == "reopen":
            assert self._open_document(self.panel), f"not reopened: {self.host.errors}"
        elif name == "restart":
            self.close()
            self._start()


def check_history(session: EditSession, actions: Sequence[tuple],
                  act: Callable[[Any, tuple], None], state: Callable[[Any], Any],
                  fresh_read: Callable[[Sequence[Any]], Any],
                  problem: Callable[[Any], str | None]) -> None:
    """Play ``actions`` (the panel's own through ``act(panel, action)``), checking after each
    that nothing escaped or was reported, that ``problem(panel)`` finds nothing, and that
    ``state(panel.model)`` equals ``fresh_read(the document's applied commands)``; then that
    undoing everything gives ``fresh_read(())``."""
    with escaped_exceptions() as escaped:
        try:
            for step, action in enumerate(actions):
                if action[0] in SHARED_ACTIONS:
                    session.shared_step(action[0])
                else:
                    act(session.panel, action)
                where = f"after step {step} {action}"
                host, panel = session.host, session.panel
                assert escaped == [] and host.errors == [], f"{where}: {escaped} {host.errors}"
                assert problem(panel) is None, f"{where}: {problem(panel)}"
                applied = host.history.applied(panel.model.document)
                assert state(panel.model) == fresh_read(applied), where
            while session.host.history.stack.canUndo():
                session.host.undo()
            assert state(session.panel.model) == fresh_read(())
            assert problem(session.panel) is None and escaped == []
        finally:
            session.close()
