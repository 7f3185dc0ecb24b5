"""One undo history for the whole window, over the panels' edit commands, autosaved.

A panel's edit is a plain object (``panels.api.EditCommand``: ``label``, ``apply(model)``,
``revert(model)``, ``to_json()``). ``EditHistory.push`` wraps it in a ``QUndoCommand`` on the
window's one ``QUndoStack`` (global undo across panels) and, after every push, undo and redo,
writes the applied commands of each touched document to the workspace
(``Workspace.save_edits``) in one transaction. After a crash, ``restore`` replays a document's
saved commands onto a fresh model and puts them back on the stack, so they can still be undone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QUndoCommand, QUndoStack

log = logging.getLogger("studio.undo")

Decode = Callable[[dict], Any]  # a command's JSON form -> the command


class _EditStep(QUndoCommand):
    """A panel's command on the Qt stack."""

    def __init__(self, document: str, command: Any, model: Any, applied: bool = False) -> None:
        super().__init__(str(getattr(command, "label", "Edit")))
        self.document = document
        self.command = command
        self.model = model
        self._skip_redo = applied  # restored commands are already applied when pushed

    def redo(self) -> None:
        if self._skip_redo:
            self._skip_redo = False
            return
        self.command.apply(self.model)

    def undo(self) -> None:
        self.command.revert(self.model)


class EditHistory(QObject):
    """The adapter between panels' edit commands and Qt's undo stack, with autosave."""

    def __init__(self, workspace=None, stack: QUndoStack | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.workspace = workspace          # engine.workspace.Workspace, or None (no autosave)
        self.stack = stack if stack is not None else QUndoStack(self)
        self._index = self.stack.index()
        self._quiet = False
        self.stack.indexChanged.connect(self._on_index_changed)

    # -- what panels call ----------------------------------------------------------------------
    def push(self, document: str, command: Any, model: Any) -> None:
        """Apply ``command`` to ``model`` through the stack (so it can be undone)."""
        self.stack.push(_EditStep(document, command, model))  # the stack owns the step

    @contextmanager
    def group(self, label: str) -> Iterator[None]:
        """Edits pushed inside become one undo step (a brush stroke, a multi-field change)."""
        self.stack.beginMacro(label)
        try:
            yield
        finally:
            self.stack.endMacro()

    def restore(self, document: str, model: Any, decode: Decode) -> int:
        """Replay the document's autosaved commands onto ``model``; returns how many."""
        if self.workspace is None:
            return 0
        saved = self.workspace.load_edits(document)
        self._quiet = True
        try:
            for data in saved:
                command = decode(data)
                command.apply(model)
                self.stack.push(_EditStep(document, command, model, applied=True))
        finally:
            self._quiet = False
            self._index = self.stack.index()
        if saved:
            log.info("restored %d edit(s) of %s", len(saved), document)
        return len(saved)

    def applied(self, document: str) -> list[Any]:
        """The document's commands that are applied now, oldest first."""
        return [step.command for step in self._applied_steps() if step.document == document]

    def clear(self) -> None:
        """Forget the history (a new workspace); saved edits stay in the old one."""
        self._quiet = True
        try:
            self.stack.clear()
        finally:
            self._quiet = False
        self._index = self.stack.index()

    def set_workspace(self, workspace) -> None:
        self.clear()
        self.workspace = workspace

    # -- autosave ------------------------------------------------------------------------------
    def save(self, document: str) -> None:
        if self.workspace is None:
            return
        commands = [command.to_json() for command in self.applied(document)]
        try:
            self.workspace.save_edits(document, commands)
        except Exception:  # a full disk must not take the edit away from the user
            log.exception("autosave of %s failed", document)

    def _on_index_changed(self, index: int) -> None:
        if self._quiet:
            return
        low, high = sorted((self._index, index))
        self._index = index
        documents = {step.document for i in range(low, high)
                     for step in _leaves(self.stack.command(i))}
        for document in sorted(documents):
            self.save(document)

    def _applied_steps(self) -> list[_EditStep]:
        steps: list[_EditStep] = []
        for i in range(self.stack.index()):
            steps.extend(_leaves(self.stack.command(i)))
        return steps


def _leaves(command: QUndoCommand | None) -> list[_EditStep]:
    """The edit steps in a stack entry (itself, or the children of a macro)."""
    if command is None:
        return []
    if isinstance(command, _EditStep):
        return [command]
    found: list[_EditStep] = []
    for i in range(command.childCount()):
        found.extend(_leaves(command.child(i)))
    return found
