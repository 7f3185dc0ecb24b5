"""An undo history per tab, over the panels' edit commands, autosaved by document identity.

A panel's edit is a plain object (``panels.api.EditCommand``: ``label``, ``apply(model)``,
``revert(model)``, ``to_json()``). ``EditHistory.push`` wraps it in a ``QUndoCommand`` on its
``QUndoStack`` (the window gives each tab its own, in one ``QUndoGroup``, so Ctrl+Z touches only
the tab in front) and, after every push, undo and redo, writes the applied commands of each
touched document to the workspace (``Workspace.save_edits``) in one transaction.

Saved edits are keyed by the document's identity (``studio.documents``): its kind and the hash
of its content when the edits began, not the path as typed. ``restore`` replays them onto a
fresh model when the same content is opened again, by any path; when the file at a path that
has saved edits now holds other content, it asks (``ask``) whether to replay, discard or keep
them aside, and never replays silently. When a panel leaves a document (opens another scene,
drops a layer), ``forget`` takes that document's steps off the stack, changing no model and no
autosave, so Undo never spends a press on a document nobody shows and reopening it still
replays its saved edits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QUndoCommand, QUndoStack

from studio.documents import document_file, document_hash, identity

log = logging.getLogger("studio.undo")

Decode = Callable[[dict], Any]  # a command's JSON form -> the command

REPLAY, DISCARD, KEEP_ASIDE = "replay", "discard", "keep aside"


@dataclass(frozen=True)
class SavedEditsConflict:
    """Saved edits whose file now holds other content: what ``EditHistory.ask`` is shown."""

    document: str        # the panel's document string
    path: Path           # the file as opened now (resolved)
    count: int           # saved edits
    saved: float         # when they were last saved (epoch seconds)
    was: str             # where they were made (resolved path)

    def message(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.saved))
        where = ("" if self.was == str(self.path) else f" (made on {self.was})")
        return (f"{self.path} has {self.count} saved edit(s) from {when}{where}, made when the "
                "file had other content: it was replaced or changed on disk since.\n\n"
                "Replay them onto the file as it is now, discard them, or keep them aside "
                "(not applied; they stay in the workspace)?")


@dataclass
class _Identity:
    """Where a document's edits are saved: ``key`` in the workspace; for a file, what it was."""

    key: str
    kind: str = ""
    path: Path | None = None
    opened_hash: str = ""


class _EditStep(QUndoCommand):
    """A panel's command on the Qt stack.

    ``applied``: the model already holds it (restored, or rebuilt by ``forget``), so the push's
    redo does nothing. ``undone``: rebuilt past the stack's index (redo-able); it is pushed as
    applied and the index move that puts it back past the index skips its undo as well.
    """

    def __init__(self, history: EditHistory, document: str, command: Any, model: Any,
                 applied: bool = False, undone: bool = False) -> None:
        super().__init__(str(getattr(command, "label", "Edit")))
        self.history = history
        self.document = document
        self.command = command
        self.model = model
        self._skip_redo = applied or undone
        self._skip_undo = undone

    def redo(self) -> None:
        if self._skip_redo:
            self._skip_redo = False
            return
        self._run("Redo", self.command.apply)

    def undo(self) -> None:
        if self._skip_undo:
            self._skip_undo = False
            return
        self._run("Undo", self.command.revert)

    def _run(self, what: str, change: Callable[[Any], None]) -> None:
        """An exception raised here would be printed by Qt and lost: it is logged and shown."""
        try:
            change(self.model)
        except Exception as exc:
            log.exception("%s of %r on %s failed", what, self.text(), self.document)
            if self.history.on_error is not None:
                self.history.on_error(f"{what} failed", f"{self.text()}: {exc}")


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
        # Saved edits that do not match the file's content: the user chooses (REPLAY, DISCARD
        # or KEEP_ASIDE). Without a chooser they are kept aside: never replayed silently.
        self.ask: Callable[[SavedEditsConflict, Callable[[str], None]], None] | None = None
        # Where an undo or redo that fails inside Qt's stack is reported (title, message).
        self.on_error: Callable[[str, str], None] | None = None
        self._identities: dict[str, _Identity] = {}
        self._index = self.stack.index()
        self._quiet = False
        self._open_groups = 0
        self.stack.indexChanged.connect(self._on_index_changed)

    # -- what panels call ----------------------------------------------------------------------
    def push(self, document: str, command: Any, model: Any) -> None:
        """Apply ``command`` to ``model`` and put it on the stack (so it can be undone).

        The command is applied before it is pushed: one that raises propagates to the panel
        and leaves no step behind (Qt would swallow an exception raised inside its push)."""
        command.apply(model)
        self.stack.push(_EditStep(self, document, command, model, applied=True))  # owned by it

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
        """Replay the autosaved commands of the document's content onto ``model``; returns
        how many. Saved edits made at the same path on other content are offered through
        ``ask`` (see ``_settle``). Raises ``ValueError`` when the saved edits do not fit: the
        model is left as read and the edits are kept aside in the workspace."""
        if self.workspace is None:
            return 0
        self._identities.pop(document, None)
        found, fresh = self._identify(document)
        saved = self.workspace.load_edits(found.key)
        try:
            commands = _apply_all(saved, model, decode)
        except _DoesNotFit as failure:
            aside = f"{found.key}~unreplayed-{time.time():.0f}"
            self.workspace.rename_edits(found.key, aside)
            self._keep_aside(aside, found)
            raise ValueError(f"{len(saved)} saved edit(s) of {document.partition(':')[2]} do "
                             f"not fit the file ({failure}); they are kept aside in the "
                             "workspace") from failure
        self._quiet = True
        try:
            for command in commands:
                self.stack.push(_EditStep(self, document, command, model, applied=True))
        finally:
            self._quiet = False
            self._index = self.stack.index()
        if saved:
            log.info("restored %d edit(s) of %s", len(saved), document)
        replayed = self._settle(document, found, model, decode) if fresh else 0
        return len(saved) + replayed

    def document_saved(self, document: str) -> None:
        """The panel wrote ``document``'s file with its edits in it (Save over the opened
        file): the edits are the file's now, so their steps leave the history and their
        autosave is dropped; later edits are keyed by the new content. Without this, reopening
        the file would offer (or replay) edits it already holds."""
        if self.workspace is None:
            self.forget(document)
            return
        found, _fresh = self._identify(document)
        self.forget(document)
        self.workspace.drop_document(found.key)
        log.info("%s saved with its edits: autosave %s dropped", document, found.key)

    def saved_edits(self, document: str) -> list[dict]:
        """The document's autosaved commands (JSON), as ``restore`` would replay them."""
        if self.workspace is None:
            return []
        return self.workspace.load_edits(self._identify(document)[0].key)

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
        self._identities.pop(document, None)
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
        self._identities.clear()
        self.workspace = workspace

    # -- document identity ---------------------------------------------------------------------
    def _identify(self, document: str) -> tuple[_Identity, bool]:
        """Where ``document``'s edits are saved (see the module docstring), and whether that
        is a fresh identity (no saved edits matched the content)."""
        known = self._identities.get(document)
        if known is not None:
            return known, False
        file = document_file(document)
        fresh = False
        if file is None:  # nothing on disk (yet): keyed as typed
            found = _Identity(document)
        else:
            digest = document_hash(file.path, self.workspace)
            records = [r for r in self.workspace.documents(file.kind) if not r["aside"]]
            match = next((r for r in records
                          if digest in (r["opened_hash"], r["last_hash"])), None)
            if match is not None:
                found = _Identity(match["identity"], file.kind, file.path, match["opened_hash"])
            else:
                found = _Identity(identity(file.kind, digest), file.kind, file.path, digest)
                fresh = True
        self._identities[document] = found
        return found, fresh

    def _settle(self, document: str, opened: _Identity, model: Any, decode: Decode) -> int:
        """Offer saved edits made at this path on other content (or saved by an older Studio
        under the path as typed): replay them as new steps, discard them, or keep them aside.
        ``ask(conflict, answer)`` may answer at once or later (a non-modal dialog); until it
        answers, the edits stay where they are. Returns how many were replayed at once."""
        path = str(opened.path)
        stale = [(r["identity"], r["path"], r["saved"]) for r in
                 self.workspace.documents(opened.kind) if not r["aside"] and r["path"] == path]
        for legacy in dict.fromkeys([document, f"{opened.kind}:{path}"]):
            if self.workspace.load_edits(legacy):
                stale.append((legacy, path, 0.0))
        replayed = 0
        for key, was, saved in stale:
            count = len(self.workspace.load_edits(key))
            conflict = SavedEditsConflict(document, opened.path, count, saved, was)

            def answer(choice: str, key: str = key, was: str = was) -> None:
                nonlocal replayed
                log.info("saved edits of %s (%s) on other content: %s", path, key, choice)
                if choice == REPLAY and self._identities.get(document) is opened:
                    replayed += self._replay_onto(document, key, model, decode)
                elif choice == DISCARD:
                    self.workspace.drop_document(key)
                elif choice in (REPLAY, KEEP_ASIDE):  # a replay after the document was left
                    self._keep_aside(key, _Identity(key, opened.kind, Path(was)))

            if self.ask is None:
                answer(KEEP_ASIDE)
            else:
                self.ask(conflict, answer)
        return replayed

    def _replay_onto(self, document: str, key: str, model: Any, decode: Decode) -> int:
        """Saved edits of other content applied now, as one undoable step of ``document``;
        they leave their old key once saved under the new one. Edits that do not fit change
        nothing and are kept aside."""
        saved = self.workspace.load_edits(key)
        try:
            commands = _apply_all(saved, model, decode)
        except _DoesNotFit as exc:
            log.warning("saved edits %s do not fit %s: %s", key, document, exc)
            self._keep_aside(key, _Identity(key))
            if self.on_error is not None:
                self.on_error("Saved edits do not fit", f"{len(saved)} saved edit(s) do not "
                              f"fit {document.partition(':')[2]} ({exc}); kept aside")
            return 0
        with self.group(f"Replay {len(commands)} saved edit(s)"):
            for command in commands:
                self.stack.push(_EditStep(self, document, command, model, applied=True))
        self.workspace.drop_document(key)
        return len(commands)

    def _keep_aside(self, key: str, found: _Identity) -> None:
        self.workspace.put_document(key, found.kind, str(found.path or ""), "", "")
        self.workspace.set_aside(key)

    # -- autosave ------------------------------------------------------------------------------
    def save(self, document: str) -> None:
        if self.workspace is None:
            return
        commands = [command.to_json() for command in self.applied(document)]
        try:
            found, _fresh = self._identify(document)
            self.workspace.save_edits(found.key, commands)
            if found.path is not None and found.path.exists():
                # the file as it is after this edit (a scene rewrites itself on every edit)
                self.workspace.put_document(found.key, found.kind, str(found.path),
                                            found.opened_hash,
                                            document_hash(found.path, self.workspace))
        except Exception:  # a full disk must not take the edit away from the user
            log.exception("autosave of %s failed", document)

    def _on_index_changed(self, index: int) -> None:
        if self._quiet:
            return
        low, high = sorted((self._index, index))
        self._index = index
        documents = {step.document for i in range(low, high)
                     for step in steps_of(self.stack.command(i))}
        for document in sorted(documents):
            self.save(document)

    @staticmethod
    def _entry(command: QUndoCommand) -> _Entry:
        steps = [(step.document, step.command, step.model) for step in steps_of(command)]
        return _Entry(steps, None if isinstance(command, _EditStep) else command.text())

    def _push_entry(self, entry: _Entry, undone: bool) -> None:
        """Push a rebuilt entry without touching its model (see ``_EditStep``)."""
        if entry.macro is None:
            (document, command, model), = entry.steps
            self.stack.push(_EditStep(self, document, command, model, not undone, undone))
            return
        self.stack.beginMacro(entry.macro)
        try:
            for document, command, model in entry.steps:
                self.stack.push(_EditStep(self, document, command, model, not undone, undone))
        finally:
            self.stack.endMacro()

    def _applied_steps(self) -> list[_EditStep]:
        steps: list[_EditStep] = []
        for i in range(self.stack.index()):
            steps.extend(steps_of(self.stack.command(i)))
        return steps


class _DoesNotFit(Exception):
    """A saved edit that cannot be applied to the model as read."""


def _apply_all(saved: list[dict], model: Any, decode: Decode) -> list[Any]:
    """Decode and apply saved commands in order. If one fails, those applied are reverted,
    so the model is as it was, and ``_DoesNotFit`` says which edit and why."""
    commands: list[Any] = []
    try:
        for data in saved:
            command = decode(data)
            command.apply(model)
            commands.append(command)
    except Exception as exc:
        for command in reversed(commands):
            command.revert(model)
        raise _DoesNotFit(f"edit {len(commands) + 1}: {exc}") from exc
    return commands


def steps_of(command: QUndoCommand | None) -> list[_EditStep]:
    """The edit steps (``document``, ``command``) in a stack entry: itself, or the children
    of a macro, oldest first."""
    if command is None:
        return []
    if isinstance(command, _EditStep):
        return [command]
    found: list[_EditStep] = []
    for i in range(command.childCount()):
        found.extend(steps_of(command.child(i)))
    return found
