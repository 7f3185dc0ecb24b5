"""One undo history for the whole window, over the panels' edit commands, autosaved.

A panel's edit is a plain object (``panels.api.EditCommand``: ``label``, ``apply(model)``,
``revert(model)``, ``to_json()``). ``EditHistory.push`` wraps it in a ``QUndoCommand`` on the
window's one ``QUndoStack`` (global undo across panels) and, after every push, undo and redo,
writes the applied commands of each touched document to the workspace
(``Workspace.save_edits``) in one transaction. After a crash, ``restore`` replays a document's
saved commands onto a fresh model and puts them back on the stack, so they can still be undone.
When a panel leaves a document (opens another scene, drops a layer), ``forget`` takes that
document's steps off the stack, changing no model and no autosave, so Undo never spends a press
on a document nobody shows and reopening it still replays its saved edits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QUndoCommand, QUndoStack

log = logging.getLogger("studio.undo")

Decode = Callable[[dict], Any]  # a command's JSON form -> the command


class _EditStep(QUndoCommand):
    """A panel's command on the Qt stack.

    ``applied``: the model already holds it (restored, or rebuilt by ``forget``), so the push's
    redo does nothing. ``undone``: rebuilt past the stack's index (redo-able); it is pushed as
    applied and the index move that puts it back past the index skips its undo as well.
    """

    def __init__(self, document: str, command: Any, model: Any, applied: bool = False,
                 undone: bool = False) -> None:
        super().__init__(str(getattr(command, "label", "Edit")))
        self.document = document
        self.command = command
        self.model = model
        self._skip_redo = applied or undone
        self._skip_undo = undone

    def redo(self) -> None:
        if self._skip_redo:
            self._skip_redo = False
            return
        self.command.apply(self.model)

    def undo(self) -> None:
        if self._skip_undo:
            self._skip_undo = False
            return
        self.command.revert(self.model)


@dataclass
class _Entry:
    """One stack entry as ``forget`` rebuilds it: a step, or a macro's text and its steps."""

    steps: list[tuple[str, Any, Any]]   # (document, command, model), oldest first
    macro: str | None                   # the group's label; None for a lone step


class EditHistory(QObject):
    """The adapter between panels' edit commands and Qt's undo stack, with autosave."""

    def __init__(self, workspace=None, stack: QUndoStack | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.workspace = workspace          # engine.workspace.Workspace, or None (no autosave)
        self.stack = stack if stack is not None else QUndoStack(self)
        self._index = self.stack.index()
        self._quiet = False
        self._open_groups = 0
        self.stack.indexChanged.connect(self._on_index_changed)

    # -- what panels call ----------------------------------------------------------------------
    def push(self, document: str, command: Any, model: Any) -> None:
        """Apply ``command`` to ``model`` through the stack (so it can be undone)."""
        self.stack.push(_EditStep(document, command, model))  # the stack owns the step

    @contextmanager
    def group(self, label: str) -> Iterator[None]:
        """Edits pushed inside become one undo step (a brush stroke, a multi-field change)."""
        self.stack.beginMacro(label)
        self._open_groups += 1
        try:
            yield
        finally:
            self._open_groups -= 1
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

    def forget(self, document: str) -> int:
        """Take ``document``'s steps off the stack (the panel left it); returns how many.

        Nothing is applied or reverted and nothing is autosaved: the document's saved edits
        stay in the workspace (``restore`` replays them when it opens again). Every other step
        keeps its place, a group keeps its other documents' steps as one step, and the same
        steps stay applied (the index lands just past the last applied one left).
        """
        if self._open_groups:
            raise RuntimeError(f"cannot forget {document} while an edit group is open")
        entries = [self._entry(self.stack.command(i)) for i in range(self.stack.count())]
        forgotten = sum(1 for entry in entries for step in entry.steps if step[0] == document)
        if not forgotten:
            return 0
        index, clean = self.stack.index(), self.stack.cleanIndex()
        kept_before = [0]  # kept_before[i]: entries kept among the first i
        for entry in entries:
            entry.steps = [step for step in entry.steps if step[0] != document]
            kept_before.append(kept_before[-1] + bool(entry.steps))
        self._quiet = True
        try:
            self.stack.clear()  # deletes the old steps; the rebuilt ones carry the same commands
            for position, entry in enumerate(entries):
                if entry.steps:
                    self._push_entry(entry, undone=position >= index)
                    if clean >= 0 and self.stack.count() == kept_before[clean]:
                        self.stack.setClean()  # the saved state, less the forgotten steps
            self.stack.setIndex(kept_before[index])  # the redo-able steps skip this undo
            if clean < 0:
                self.stack.resetClean()  # no clean state before, none after
        finally:
            self._quiet = False
            self._index = self.stack.index()
        log.info("forgot %d edit(s) of %s", forgotten, document)
        return forgotten

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

    @staticmethod
    def _entry(command: QUndoCommand) -> _Entry:
        steps = [(step.document, step.command, step.model) for step in _leaves(command)]
        return _Entry(steps, None if isinstance(command, _EditStep) else command.text())

    def _push_entry(self, entry: _Entry, undone: bool) -> None:
        """Push a rebuilt entry without touching its model (see ``_EditStep``)."""
        if entry.macro is None:
            (document, command, model), = entry.steps
            self.stack.push(_EditStep(document, command, model, not undone, undone))
            return
        self.stack.beginMacro(entry.macro)
        try:
            for document, command, model in entry.steps:
                self.stack.push(_EditStep(document, command, model, not undone, undone))
        finally:
            self.stack.endMacro()

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
