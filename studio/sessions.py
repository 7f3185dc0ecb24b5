"""Sessions: save what is on screen to a ``.studio`` file and bring it back exactly.

A session (``engine.io.session_file``: a zip of ``manifest.json`` and ``thumbnail.png``)
holds the open panels in tab order with each one's view state (the panel protocol:
``view_state() -> dict`` and ``restore_view_state(state) -> list[str]``, CONTRACT.md), the
documents they show (absolute path, path relative to the session file, content fingerprint,
kind and panel), the dock layout, the runs they link to, and each document's edits as the
workspace journal holds them (applied) plus the steps the user could still redo.

The workspace journal stays the one live record of edits; a session snapshots it. Opening a
session writes its edits back into the journal for the same document content, so the panels
replay them exactly as they replay autosaved edits. Where the journal holds newer, different
edits for that content, the user chooses (a non-modal question, like the saved-edits conflict
of ``studio.undo``); the edits not chosen are kept aside in the workspace, never lost.

A document that moved is found through its relative path or by its fingerprint beside the
session file; one that cannot be found is asked for (Locate… / Skip) or, in a script,
skipped; one whose content changed is reported, and the session's edits are not replayed on
it. Everything left out is listed in the ``SessionReport``: never a partial silent restore.

The window gets File > Save session… / Open session…, an autosave every few minutes and on
quit, and the offer of the last session after a crash through ``install_sessions(window)``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QBuffer,
    QByteArray,
    QCoreApplication,
    QEvent,
    QIODevice,
    QObject,
    Qt,
    QTimer,
)
from PySide6.QtGui import QActionGroup
from PySide6.QtWidgets import (
    QFileDialog,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPushButton,
    QWidget,
)

from engine.content import content_hash
from engine.io import FormatError
from engine.io.session_file import SUFFIX, SessionContents, read_session, write_session
from engine.provenance import run_folder, studio_version
from engine.workspace import _alive  # the liveness check run owners use
from studio.command_widgets import command_action
from studio.commands import PROMPTED, Command, Refusal
from studio.documents import document_file
from studio.undo import steps_of

log = logging.getLogger("studio.sessions")

AUTOSAVE_NAME = "autosave.studio"
SESSIONS_FOLDER = "sessions"
AUTOSAVE_KEY = "sessions/autosave_minutes"
DEFAULT_AUTOSAVE_MINUTES = 5
AUTOSAVE_CHOICES = (2, 5, 10, 30, 0)    # File > Autosave session; 0: only on quit
THUMBNAIL_WIDTH = 320
SEARCH_DEPTH = 4                 # how deep a moved document is looked for beside the session
SEARCH_MAX_FILES = 20_000        # files looked at before the search gives up
MAX_FOLDER_FILES = 2_000         # a folder with more files is listed, not fingerprinted
RUN_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b")
WELCOME = "welcome"

# Chooser callbacks: they may answer at once (scripts, tests) or later (a non-modal dialog).
Locate = Callable[["MissingDocument", Callable[[str | None], None]], None]
ChooseEdits = Callable[["EditsConflict", Callable[[str], None]], None]
SESSION_EDITS, JOURNAL_EDITS = "session", "journal"


# -- what opening reports -----------------------------------------------------------------------

@dataclass
class SessionReport:
    """What opening a session did, for the user, scripts and tests."""

    path: str
    opened: list[str] = field(default_factory=list)          # documents found where saved
    relocated: list[str] = field(default_factory=list)       # "old -> new (how)"
    changed: list[str] = field(default_factory=list)         # content differs: not patched
    skipped: list[str] = field(default_factory=list)         # documents, panels, states
    edits: list[str] = field(default_factory=list)           # what happened to saved edits
    panel_problems: dict[str, list[str]] = field(default_factory=dict)
    refused: str = ""                                        # the whole file, and why
    done: bool = False                                       # every question answered

    @property
    def complete(self) -> bool:
        """Everything restored: nothing skipped, changed, refused or reported by a panel."""
        return self.done and not (self.refused or self.skipped or self.changed
                                  or any(self.panel_problems.values()))

    def lines(self) -> list[str]:
        """The report as lines a user reads (what was left out first)."""
        if self.refused:
            return [f"Not opened: {self.refused}"]
        lines = [f"Changed since the session was saved: {item}" for item in self.changed]
        lines += [f"Skipped: {item}" for item in self.skipped]
        lines += [f"{panel}: {problem}" for panel, problems in self.panel_problems.items()
                  for problem in problems]
        lines += [f"Found elsewhere: {item}" for item in self.relocated]
        lines += [f"Edits: {item}" for item in self.edits]
        return lines


@dataclass
class MissingDocument:
    """A document of the session found nowhere: what ``locate`` is shown."""

    path: str
    relative: str
    panel: str
    session: Path

    def message(self) -> str:
        return (f"{self.path} ({self.panel}) is not where the session saw it, not at "
                f"{self.relative} beside {self.session.name}, and no file with its content "
                f"was found in {self.session.parent}.\n\nLocate it, or skip it (the rest of "
                "the session opens without it)?")


@dataclass
class EditsConflict:
    """The journal holds newer edits for a document's content than the session."""

    document: str
    path: str
    session_count: int
    session_saved: float
    journal_count: int
    journal_saved: float

    def message(self) -> str:
        def when(stamp: float) -> str:
            return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else "?"

        return (f"{Path(self.path).name} has {self.journal_count} edit(s) in the workspace "
                f"from {when(self.journal_saved)}, newer than the {self.session_count} edit(s) "
                f"this session saved at {when(self.session_saved)}.\n\nUse the session's "
                "edits, or keep the newer ones? The others are kept aside in the workspace.")


# -- saving -------------------------------------------------------------------------------------

def save_session(window: QMainWindow, path: str | os.PathLike) -> Path:
    """Write the window's session to ``path`` (``.studio`` added when missing), atomically.
    A panel whose view state cannot be read is saved without it and named in the manifest's
    ``problems``; the file is still written."""
    target = Path(path).expanduser()
    if target.suffix.lower() != SUFFIX:
        target = target.with_name(target.name + SUFFIX)
    target = target.resolve()
    manifest = session_manifest(window, target)
    written = write_session(target, manifest, _thumbnail(window))
    log.info("session saved to %s (%d panel(s), %d document(s))", written,
             len(manifest["panels"]), len(manifest["documents"]))
    return written


def session_manifest(window: QMainWindow, session_path: Path) -> dict[str, Any]:
    """The manifest of the window's session as it would be saved at ``session_path``."""
    workspace = window.workspace
    from engine.scrub import scrub, secret_values  # pydantic: not at start-up

    secrets = secret_values(None)   # an API key typed into a panel never reaches the file
    panels, documents, edits, problems = [], [], {}, []
    runs: dict[str, None] = {}
    for panel_id, widget in panel_tabs(window):
        entry: dict[str, Any] = {"id": panel_id, "title": _tab_title(window, widget),
                                 "view_state": None}
        state, problem = _read_view_state(panel_id, widget)
        state = scrub(state, secrets)
        if problem:
            problems.append(problem)
        entry["view_state"] = state
        panels.append(entry)
        history = window.histories.get(panel_id)
        listed: dict[str, dict] = {}
        for document in _history_documents(history):
            file = document_file(document)
            if file is not None:
                listed[str(file.path)] = {"document": document, "kind": file.kind}
        for found in _paths_in(state):
            listed.setdefault(found, {"document": None, "kind": ""})
        for resolved, known in listed.items():
            record = _document_record(workspace, session_path, panel_id, Path(resolved),
                                      known["kind"], known["document"])
            documents.append(record)
            if known["document"]:
                snapshot = _edits_snapshot(workspace, history, known["document"], record)
                if snapshot is not None:
                    edits[known["document"]] = snapshot
            folder = run_folder(resolved)
            if folder is not None and (folder / "params.json").is_file():
                runs[folder.name] = None
        for run_id in RUN_ID.findall(json.dumps(state)) if state else []:
            runs[run_id] = None
    return {
        "app_version": studio_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "created_epoch": time.time(),
        "workspace": str(workspace.root),
        "current": _current_tab_id(window),
        "documents": documents,
        "panels": panels,
        "layout": {"state": _b64(window.saveState()),
                   "size": [window.width(), window.height()],
                   "maximized": window.isMaximized()},
        "runs": list(runs),
        "edits": edits,
        "problems": problems,
    }


def panel_tabs(window: QMainWindow) -> list[tuple[str, QWidget]]:
    """The open panels as (id, widget) in tab order."""
    ids = {id(widget): panel_id for panel_id, widget in window.panel_widgets.items()}
    tabs = (window.tabs.widget(index) for index in range(window.tabs.count()))
    return [(ids[id(widget)], widget) for widget in tabs if id(widget) in ids]


def _read_view_state(panel_id: str, widget: QWidget) -> tuple[dict | None, str]:
    reader = getattr(widget, "view_state", None)
    if not callable(reader):
        return None, f"{panel_id}: the panel does not save its view state yet"
    try:
        state = reader()
        json.dumps(state, allow_nan=False)  # what cannot be written must not half-write
    except Exception as exc:
        log.exception("view state of %s", panel_id)
        return None, f"{panel_id}: its view state could not be saved ({exc})"
    if not isinstance(state, dict):
        return None, f"{panel_id}: its view state is a {type(state).__name__}, not a dict"
    return state, ""


def _tab_title(window: QMainWindow, widget: QWidget) -> str:
    return window.tabs.tabText(window.tabs.indexOf(widget))


def _current_tab_id(window: QMainWindow) -> str:
    current = window.tabs.currentWidget()
    return next((panel_id for panel_id, widget in window.panel_widgets.items()
                 if widget is current), WELCOME)


def _history_documents(history) -> list[str]:
    """The documents with steps on a tab's history (applied or redoable), in stack order."""
    if history is None:
        return []
    stack = history.stack
    found: dict[str, None] = {}
    for index in range(stack.count()):
        for step in steps_of(stack.command(index)):
            found[step.document] = None
    return list(found)


def _paths_in(value: Any) -> list[str]:
    """Absolute paths of existing files or folders named anywhere in a view state (bare, or
    as a panel's ``"<kind>:<path>"`` document string)."""
    found: dict[str, None] = {}
    for text in _strings(value):
        for candidate in (text, text.partition(":")[2]):
            if candidate.startswith(os.sep) and len(candidate) < 4096:
                try:
                    path = Path(candidate)
                    if path.exists():
                        found[str(path.resolve())] = None
                except (OSError, ValueError):
                    continue
                break
    return list(found)


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _document_record(workspace, session_path: Path, panel_id: str, path: Path, kind: str,
                     document: str | None) -> dict[str, Any]:
    if not kind:
        kind = _format_name(path)
    return {"path": str(path), "relative": _relative(path, session_path.parent),
            "fingerprint": _fingerprint(path, workspace),
            "size": path.stat().st_size if path.is_file() else None,
            "kind": kind, "panel": panel_id, "document": document}


def _format_name(path: Path) -> str:
    from engine.io import detect

    try:
        return detect(path).name
    except (FormatError, OSError):
        return "folder" if path.is_dir() else "file"


def _relative(path: Path, folder: Path) -> str:
    try:
        return Path(os.path.relpath(path, folder)).as_posix()
    except ValueError:  # another drive (Windows)
        return ""


def _journal_record(workspace, kind: str, fingerprint: str) -> dict | None:
    """The workspace's record of a document's edits for this content (as ``EditHistory``
    finds it: made on it, or on what it was before the document rewrote itself)."""
    return next((record for record in workspace.documents(kind) if not record["aside"]
                 and fingerprint in (record["opened_hash"], record["last_hash"])), None)


def _edits_snapshot(workspace, history, document: str, record: dict) -> dict | None:
    """A document's edits: applied as the journal holds them, redoable from its stack."""
    if not record["fingerprint"]:
        return None  # not fingerprinted: its edits cannot be matched to content
    journal = _journal_record(workspace, record["kind"], record["fingerprint"])
    applied = workspace.load_edits(journal["identity"]) if journal else []
    redoable = []
    if history is not None:
        stack = history.stack
        for index in range(stack.index(), stack.count()):
            redoable += [step.command.to_json() for step in steps_of(stack.command(index))
                         if step.document == document]
    if not applied and not redoable:
        return None
    return {"identity": journal["identity"] if journal else f"{record['kind']}@"
            f"{record['fingerprint']}",
            "opened_hash": journal["opened_hash"] if journal else record["fingerprint"],
            "last_hash": journal["last_hash"] if journal else record["fingerprint"],
            "saved": journal["saved"] if journal else 0.0,
            "applied": applied, "redoable": redoable}


def _thumbnail(window: QMainWindow) -> bytes:
    """The window as a small PNG (what a file browser or the crash offer can show)."""
    picture = window.grab()
    if picture.isNull():
        return b""
    picture = picture.scaledToWidth(THUMBNAIL_WIDTH,
                                    Qt.TransformationMode.SmoothTransformation)
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    picture.save(buffer, "PNG")
    return bytes(buffer.data())


def _b64(data: QByteArray) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


# -- opening ------------------------------------------------------------------------------------

def open_session(window: QMainWindow, path: str | os.PathLike, *,
                 interactive: bool | None = None, background: bool = False,
                 locate: Locate | None = None,
                 choose_edits: ChooseEdits | None = None,
                 on_done: Callable[[SessionReport], None] | None = None) -> SessionReport:
    """Open the session at ``path`` in ``window``; returns its report.

    Interactive (the default when the window is shown), a missing document is asked for and
    newer journal edits are a question; the report is then filled in as they are answered
    (``report.done``; ``on_done(report)`` is called at the end either way, by default
    ``show_report`` when interactive: the status line, or what was left out). Not interactive
    (scripts), missing documents are skipped and the session's edits win, the journal's newer
    ones kept aside; everything is done when this returns. ``background``: the file is read
    and its documents found and hashed in the window's I/O thread (the menu does this), and
    the report is filled in afterwards. A file that cannot be read is refused
    (``report.refused``) and the window is left as it was."""
    report = SessionReport(str(path))
    if interactive is None:
        interactive = window.isVisible()
    if interactive:
        locate = locate or (lambda missing, answer: ask_locate(window, missing, answer))
        choose_edits = choose_edits or (
            lambda conflict, answer: ask_edits(window, conflict, answer))
        on_done = on_done or (lambda done: show_report(window, done))
    workspace = window.workspace

    def prepare() -> tuple[SessionContents, list[Located]]:
        contents = read_session(Path(path).expanduser())
        return contents, locate_documents(contents, workspace)

    def refuse(exc: BaseException) -> None:
        report.refused = str(exc) if isinstance(exc, FormatError) else \
            f"{path}: {type(exc).__name__}: {exc}"
        report.done = True
        log.warning("session not opened: %s", report.refused)
        if on_done is not None:
            on_done(report)

    def restore(prepared: tuple[SessionContents, list[Located]]) -> None:
        contents, located = prepared
        _Opening(window, contents, report, locate, choose_edits, on_done).start(located)

    if background:
        window.run_in_thread(prepare, on_done=restore, on_error=refuse)
        return report
    try:
        prepared = prepare()
    except (FormatError, OSError) as exc:
        refuse(exc)
        return report
    restore(prepared)
    return report


class _Opening:
    """One session being opened: find documents, settle edits, then restore the screen.
    Questions are asked one at a time; each answer moves it on."""

    def __init__(self, window: QMainWindow, contents: SessionContents, report: SessionReport,
                 locate: Locate | None, choose_edits: ChooseEdits | None,
                 on_done: Callable[[SessionReport], None] | None) -> None:
        self.window, self.contents, self.report = window, contents, report
        self.locate, self.choose_edits, self.on_done = locate, choose_edits, on_done
        self.session_path = contents.path.resolve()
        self.found: dict[int, Path] = {}        # document index -> where it is now
        self.unchanged: set[int] = set()        # found with the content the session saw
        self.use_session_edits: dict[str, bool] = {}
        self.missing: set[str] = set()          # documents skipped: reported once, here
        self._pending: list[Callable[[], None]] = []

    def start(self, located: list[Located]) -> None:
        self.report.skipped += [f"(in the file) {problem}" for problem in self.contents.problems]
        self.report.skipped += [f"(when saved) {problem}" for problem in
                                self.contents.manifest.get("problems", [])
                                if isinstance(problem, str)]
        for place in located:
            entry = self.contents.documents[place.index]
            if place.path is None:
                self._pending.append(lambda i=place.index, e=entry: self._ask_locate(i, e))
            else:
                self._found(place.index, entry, place.path, place.how, place.same)
        self._pending.append(self._settle_edits)
        self._next()

    def _next(self) -> None:
        while self._pending:
            step = self._pending.pop(0)
            if step() is False:
                return  # waiting for an answer, which calls _next again
        self._restore()

    # -- documents ------------------------------------------------------------------------------
    def _ask(self, ask: Callable[[Any, Callable[[Any], None]], None], question: Any,
             settle: Callable[[Any], None]) -> bool:
        """Ask through ``ask(question, answer)``; ``settle`` takes the first answer. True when
        it was answered at once (the steps go on); otherwise the answer moves them on."""
        answered = waiting = False

        def answer(value: Any) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            settle(value)
            if waiting:
                self._next()

        ask(question, answer)
        waiting = not answered
        return answered

    def _ask_locate(self, index: int, entry: dict) -> bool:
        def settle(chosen: str | None) -> None:
            if chosen:
                path = Path(chosen).expanduser().resolve()
                same = path.exists() and (not entry["fingerprint"] or
                                          self._hash(path) == entry["fingerprint"])
                self._found(index, entry, path, "located by you", same=same)
            else:
                self.report.skipped.append(f"{entry['path']} ({entry['panel']}): not found")
                self.missing.add(entry["path"])

        if self.locate is None:
            settle(None)
            return True
        missing = MissingDocument(entry["path"], entry.get("relative") or "", entry["panel"],
                                  self.session_path)
        return self._ask(self.locate, missing, settle)

    def _found(self, index: int, entry: dict, path: Path, how: str, same: bool) -> None:
        self.found[index] = path
        if same:
            self.unchanged.add(index)
        if not same:
            edits = self.contents.manifest["edits"].get(entry.get("document") or "", {})
            count = len(edits.get("applied", []))
            self.report.changed.append(
                f"{path}: its content differs from what the session saved"
                + (f"; the session's {count} edit(s) were not replayed on it" if count else ""))
        elif how:
            self.report.relocated.append(f"{entry['path']} -> {path} ({how})")
        else:
            self.report.opened.append(str(path))

    def _hash(self, path: Path) -> str:
        try:
            return _fingerprint(path, self.window.workspace)
        except OSError:
            return ""

    # -- edits ----------------------------------------------------------------------------------
    def _settle_edits(self) -> bool:
        """Put the session's edits into the journal for each unchanged document; ask where
        the journal holds newer, different ones."""
        workspace = self.window.workspace
        created = self.contents.manifest.get("created_epoch")
        created = float(created) if isinstance(created, int | float) else 0.0
        for index in sorted(self.unchanged):
            entry = self.contents.documents[index]
            document = entry.get("document")
            edits = self.contents.manifest["edits"].get(document or "")
            if not document or edits is None:
                continue
            journal = _journal_record(workspace, entry.get("kind", ""), entry["fingerprint"])
            current = workspace.load_edits(journal["identity"]) if journal else []
            if current == edits.get("applied", []):
                self.use_session_edits[document] = True
                continue
            if journal is not None and current and journal["saved"] > created:
                conflict = EditsConflict(document, str(self.found[index]),
                                         len(edits.get("applied", [])), created, len(current),
                                         journal["saved"])
                self._pending.append(lambda c=conflict, i=index, j=journal:
                                     self._ask_edits(c, i, j))
            else:
                self._write_edits(index, journal, session=True)
        return True

    def _ask_edits(self, conflict: EditsConflict, index: int, journal: dict) -> bool:
        def settle(choice: str) -> None:
            self._write_edits(index, journal, session=choice == SESSION_EDITS)

        if self.choose_edits is None:
            settle(SESSION_EDITS)
            return True
        return self._ask(self.choose_edits, conflict, settle)

    def _write_edits(self, index: int, journal: dict | None, session: bool) -> None:
        """The chosen edits become the journal's for this content; the others are kept
        aside (the journal's) or stay in the session file (the session's)."""
        workspace = self.window.workspace
        entry = self.contents.documents[index]
        document = entry["document"]
        edits = self.contents.manifest["edits"][document]
        name = Path(self.found[index]).name
        self.use_session_edits[document] = session
        if not session:
            self.report.edits.append(f"{name}: the workspace's newer edits kept; the "
                                     f"session's {len(edits.get('applied', []))} stay in it")
            return
        key = journal["identity"] if journal else edits["identity"]
        if journal is not None and workspace.load_edits(key):
            aside = f"{key}~before-session-{time.time():.0f}"
            workspace.rename_edits(key, aside)
            workspace.put_document(aside, entry.get("kind", ""), str(self.found[index]), "", "")
            workspace.set_aside(aside)
            self.report.edits.append(f"{name}: the workspace's other edits kept aside")
        workspace.save_edits(key, list(edits.get("applied", [])))
        workspace.put_document(key, entry.get("kind", ""), str(self.found[index]),
                               str(edits.get("opened_hash") or entry["fingerprint"]),
                               str(edits.get("last_hash") or entry["fingerprint"]))
        self.report.edits.append(f"{name}: the session's {len(edits.get('applied', []))} "
                                 "edit(s) replayed")

    # -- the screen -----------------------------------------------------------------------------
    def _restore(self) -> None:
        window, manifest = self.window, self.contents.manifest
        for index in reversed(range(window.tabs.count())):
            if window.tabs.widget(index) is not window.welcome:
                window.close_tab(index)
        mapping = {entry["path"]: str(self.found[index])
                   for index, entry in enumerate(self.contents.documents)
                   if index in self.found and entry["path"] != str(self.found[index])}
        self._restore_layout(manifest["layout"])  # first: panels restore zoom at their size
        captured: dict[str, tuple[Any, Any]] = {}
        for entry in self.contents.panels:
            self._restore_panel(entry, mapping, captured)
        self._restore_redoable(captured)
        for run_id in manifest["runs"]:
            try:
                window.workspace.run(run_id)
            except KeyError:
                self.report.skipped.append(f"run {run_id}: not in this workspace "
                                           f"({window.workspace.root})")
        current = window.panel_widgets.get(manifest.get("current") or "")
        window.tabs.setCurrentWidget(current if current is not None else window.welcome)
        self.report.done = True
        log.info("session %s opened: %s", self.session_path,
                 "; ".join(self.report.lines()) or "everything restored")
        if self.on_done is not None:
            self.on_done(self.report)

    def _restore_layout(self, layout: dict) -> None:
        """The window's size (where the desktop puts it is the desktop's business) and the
        docks as they were (``QMainWindow.restoreState``)."""
        window = self.window
        size = layout.get("size")
        if layout.get("maximized") is True:
            window.showMaximized()
        elif isinstance(size, list) and len(size) == 2 and all(
                isinstance(v, int) and 0 < v < 100_000 for v in size):
            if window.isMaximized():
                window.showNormal()
            window.resize(*size)
        state = layout.get("state")
        if isinstance(state, str) and state:
            try:
                restored = window.restoreState(QByteArray(base64.b64decode(state,
                                                                           validate=True)))
            except (ValueError, TypeError):
                restored = False
            if not restored:
                self.report.skipped.append("the dock layout: not readable")
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)

    def _restore_panel(self, entry: dict, mapping: dict[str, str],
                       captured: dict[str, tuple[Any, Any]]) -> None:
        window, panel_id = self.window, entry["id"]
        errors_before = len(getattr(window, "errors", []))
        widget = window.open_panel(panel_id)
        if widget is None:
            reason = window.errors[-1][1] if len(getattr(window, "errors", [])) > \
                errors_before else "it could not be opened"
            self.report.skipped.append(f"the {panel_id} panel: {reason}")
            return
        state = entry.get("view_state")
        if state is None:
            self.report.panel_problems.setdefault(panel_id, []).append(
                "opened without its view (the session holds none)")
            return
        restore = getattr(widget, "restore_view_state", None)
        if not callable(restore):
            self.report.panel_problems.setdefault(panel_id, []).append(
                "this Studio's panel cannot restore a view state")
            return
        history = window.histories.get(panel_id)
        with _capturing_restores(history, captured):
            try:
                problems = restore(_rewrite_paths(state, mapping))
            except Exception as exc:  # a panel's bug must not stop the rest of the session
                log.exception("restore_view_state of %s", panel_id)
                problems = [f"its view could not be restored ({type(exc).__name__}: {exc})"]
        problems = [str(problem) for problem in problems or []
                    if not any(path in str(problem) for path in self.missing)]
        if problems:
            self.report.panel_problems.setdefault(panel_id, []).extend(problems)

    def _restore_redoable(self, captured: dict[str, tuple[Any, Any]]) -> None:
        """The steps the user could redo when saving are redoable again: applied through the
        history, then undone (the journal ends as it began)."""
        for index in sorted(self.unchanged):
            entry = self.contents.documents[index]
            document = entry.get("document") or ""
            edits = self.contents.manifest["edits"].get(document)
            if not edits or not edits.get("redoable") or not self.use_session_edits.get(
                    document, False):
                continue
            reopened = _document_for(captured, self.found[index], entry.get("kind", ""))
            history = self.window.histories.get(entry["panel"])
            if reopened is None or history is None:
                self.report.skipped.append(f"{len(edits['redoable'])} redoable edit(s) of "
                                           f"{Path(self.found[index]).name}: the panel did "
                                           "not reopen the document")
                continue
            name, (model, decode) = reopened
            pushed = 0
            try:
                for data in edits["redoable"]:
                    history.push(name, decode(data), model)
                    pushed += 1
            except Exception as exc:
                self.report.skipped.append(f"redoable edit {pushed + 1} of "
                                           f"{Path(self.found[index]).name}: {exc}")
            for _ in range(pushed):
                history.stack.undo()


class _capturing_restores:  # noqa: N801 - used as a context manager, named like one
    """While a panel restores its view, note (model, decode) of each document whose saved
    edits it replays, so the session's redoable steps can be pushed onto the same model."""

    def __init__(self, history, captured: dict[str, tuple[Any, Any]]) -> None:
        self.history, self.captured = history, captured

    def __enter__(self) -> None:
        if self.history is None:
            return
        original = self.history.restore

        def restore(document: str, model: Any, decode: Any) -> int:
            self.captured[document] = (model, decode)
            return original(document, model, decode)

        self.history.restore = restore

    def __exit__(self, *_exc: object) -> None:
        if self.history is not None and "restore" in vars(self.history):
            del self.history.restore


def _document_for(captured: dict[str, tuple[Any, Any]], path: Path, kind: str
                  ) -> tuple[str, tuple[Any, Any]] | None:
    for document, pair in captured.items():
        file = document_file(document)
        if file is not None and file.path == path.resolve() and (not kind or file.kind == kind):
            return document, pair
    return None


def _rewrite_paths(value: Any, mapping: dict[str, str]) -> Any:
    """The view state with each moved document's old path replaced by where it is now (bare,
    as ``"<kind>:<path>"``, or as the folder of a path beneath it)."""
    if not mapping:
        return value
    if isinstance(value, dict):
        return {key: _rewrite_paths(item, mapping) for key, item in value.items()}
    if isinstance(value, list):
        return [_rewrite_paths(item, mapping) for item in value]
    if isinstance(value, str):
        prefix, sep, rest = value.partition(":")
        for text, head in ((value, ""), (rest, prefix + sep) if sep else (None, "")):
            if not text:
                continue
            for old, new in mapping.items():
                if text == old:
                    return head + new
                if text.startswith(old + os.sep):
                    return head + new + text[len(old):]
    return value


@dataclass(frozen=True)
class Located:
    """Where one document of a session is now (``path`` None: nowhere that was looked)."""

    index: int
    path: Path | None
    how: str = ""            # "" at its saved path; else how it was found
    same: bool = True        # the content the session saw (False: it changed)


def locate_documents(contents: SessionContents, workspace) -> list[Located]:
    """Find each document of the session: at its path, at its path relative to the session
    file, or by its fingerprint beside the session; a file at either path with other
    content is found as changed. Reads and hashes files: call it off the Qt main thread."""
    session_folder = contents.path.resolve().parent

    def hash_of(path: Path) -> str:
        try:
            return _fingerprint(path, workspace)
        except OSError:
            return ""

    found = []
    for index, entry in enumerate(contents.documents):
        saved, fingerprint = Path(entry["path"]), entry["fingerprint"]
        relative = entry.get("relative")
        beside = (session_folder / relative).resolve() if isinstance(relative, str) and \
            relative else None
        candidates = [(saved, "")] + ([(beside, "by its path relative to the session")]
                                      if beside is not None and beside != saved else [])
        existing = [(path, how) for path, how in candidates if path.exists()]
        same = next(((path, how) for path, how in existing
                     if not fingerprint or hash_of(path) == fingerprint), None)
        if same is not None:
            found.append(Located(index, same[0], same[1]))
            continue
        moved = _search_by_fingerprint(session_folder, entry, hash_of) if fingerprint else None
        if moved is not None:
            found.append(Located(index, moved, "by its content, beside the session"))
        elif existing:
            found.append(Located(index, existing[0][0], existing[0][1], same=False))
        else:
            found.append(Located(index, None))
    return found


def _fingerprint(path: Path, workspace) -> str:
    """The content hash of a document; "" for a folder of more than ``MAX_FOLDER_FILES``
    files (a home folder named in a view state is not a document to hash)."""
    if path.is_dir():
        for count, _file in enumerate(path.rglob("*")):
            if count >= MAX_FOLDER_FILES:
                return ""
    return content_hash(path, workspace)


def _search_by_fingerprint(folder: Path, entry: dict, hash_of: Callable[[Path], str]
                           ) -> Path | None:
    """A file (or folder) with the document's content beside the session: same name first,
    files of the same size only, at most ``SEARCH_DEPTH`` folders down."""
    fingerprint, size = entry["fingerprint"], entry.get("size")
    name = Path(entry["path"]).name
    is_folder = fingerprint.startswith("d")
    candidates: list[Path] = []
    seen = 0
    for root, dirs, files in os.walk(folder):
        depth = len(Path(root).relative_to(folder).parts)
        dirs[:] = [d for d in dirs if not d.startswith(".")] if depth < SEARCH_DEPTH else []
        names = dirs if is_folder else files
        for item in names:
            seen += 1
            path = Path(root) / item
            if is_folder:
                if item == name:
                    candidates.append(path)
                continue
            try:
                if size is None or path.stat().st_size == size:
                    candidates.append(path)
            except OSError:
                continue
        if seen > SEARCH_MAX_FILES:
            break
    candidates.sort(key=lambda path: path.name != name)
    return next((path.resolve() for path in candidates if hash_of(path) == fingerprint), None)


# -- dialogs ------------------------------------------------------------------------------------

def question(window: QMainWindow, name: str, title: str, text: str, yes: str, no: str,
             then: Callable[[bool], None]) -> QMessageBox:
    """A non-modal question (``open``, not ``exec``: the engine's events keep flowing);
    ``then(True)`` for ``yes``, ``then(False)`` for ``no`` or closing the box."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text,
                      QMessageBox.StandardButton.NoButton, window)
    box.setObjectName(name)
    yes_button = box.addButton(yes, QMessageBox.ButtonRole.AcceptRole)
    box.addButton(no, QMessageBox.ButtonRole.RejectRole)
    _keep(window, box)

    def answered(_result: int) -> None:
        chosen = box.clickedButton()
        _drop(window, box)
        then(chosen is yes_button)

    box.finished.connect(answered)
    box.open()
    return box


def ask_locate(window: QMainWindow, missing: MissingDocument,
               answer: Callable[[str | None], None]) -> None:
    """Locate… / Skip; Locate opens a file dialog beside the session."""
    def then(locate: bool) -> None:
        if not locate:
            answer(None)
            return
        dialog = QFileDialog(window, f"Locate {Path(missing.path).name}",
                             str(missing.session.parent))
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(lambda path: answer(path))
        dialog.rejected.connect(lambda: answer(None))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    question(window, "sessionMissingDocument", "A document of the session is missing",
             missing.message(), "Locate…", "Skip", then)


def ask_edits(window: QMainWindow, conflict: EditsConflict,
              answer: Callable[[str], None]) -> None:
    """The session's edits or the journal's newer ones (as ``studio.undo`` asks about saved
    edits); closing the box keeps the newer ones."""
    question(window, "sessionEditsConflict", "Newer edits in the workspace", conflict.message(),
             "Use the session's edits", "Keep the newer edits",
             lambda session: answer(SESSION_EDITS if session else JOURNAL_EDITS))


def show_report(window: QMainWindow, report: SessionReport) -> None:
    """The status line when everything came back; otherwise a box listing what did not."""
    name = Path(report.path).name
    if report.refused:
        window.show_error("Cannot open the session", report.refused)
        return
    if report.complete:
        window.status(f"Session {name} opened")
        return
    box = QMessageBox(QMessageBox.Icon.Information, "Session opened with changes",
                      f"{name} was opened; not everything is as it was saved.",
                      QMessageBox.StandardButton.Ok, window)
    box.setObjectName("sessionReport")
    box.setDetailedText("\n".join(report.lines()))
    box.setInformativeText("\n".join(report.lines()[:8]))
    _keep(window, box)
    box.finished.connect(lambda _result: _drop(window, box))
    box.open()


def _keep(window: QMainWindow, box: QMessageBox) -> None:
    boxes = getattr(window, "_message_boxes", None)
    if isinstance(boxes, list):
        boxes.append(box)


def _drop(window: QMainWindow, box: QMessageBox) -> None:
    boxes = getattr(window, "_message_boxes", None)
    if isinstance(boxes, list) and box in boxes:
        boxes.remove(box)
    box.deleteLater()


# -- the window: menu, autosave, crash offer ----------------------------------------------------

class SessionsController(QObject):
    """File > Save session… / Open session…, the autosave timer and the clean-quit marker."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.autosave)
        self.offer: QMessageBox | None = None
        self._marker: Path | None = None
        self.last_path: Path | None = None

    # -- folders ---------------------------------------------------------------------------
    @property
    def folder(self) -> Path:
        return Path(self.window.workspace.root) / SESSIONS_FOLDER

    @property
    def autosave_path(self) -> Path:
        return self.folder / AUTOSAVE_NAME

    def autosave_minutes(self) -> float:
        store = self.window.settings.store
        try:
            minutes = float(store.value(AUTOSAVE_KEY, DEFAULT_AUTOSAVE_MINUTES))
        except (TypeError, ValueError):
            minutes = DEFAULT_AUTOSAVE_MINUTES
        return max(0.0, minutes)

    def set_autosave_minutes(self, minutes: float) -> None:
        """Every ``minutes`` (0: never; on quit still)."""
        self.window.settings.store.setValue(AUTOSAVE_KEY, float(minutes))
        self._start_timer()

    def _start_timer(self) -> None:
        minutes = self.autosave_minutes()
        if minutes > 0:
            self.timer.start(int(minutes * 60_000))
        else:
            self.timer.stop()

    # -- saving ----------------------------------------------------------------------------
    def autosave(self) -> Path | None:
        """The session into the workspace (nothing when no panel is open)."""
        if not self.window.panel_widgets:
            return None
        try:
            return save_session(self.window, self.autosave_path)
        except Exception as exc:  # a full disk must not stop the user working
            log.exception("session autosave failed")
            self.window.status(f"Session autosave failed: {exc}")
            return None

    def ask_save(self) -> None:
        """File > Save session…: the chosen file is saved through ``app.save_session``."""
        dialog = QFileDialog(self.window, "Save session", str(self.last_path or Path.home()),
                             f"Studio sessions (*{SUFFIX})")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setDefaultSuffix(SUFFIX.lstrip("."))
        dialog.fileSelected.connect(lambda path: self._trigger("app.save_session", path))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def save_to(self, path: str | os.PathLike) -> Path:
        """Save the session to ``path``; ``OSError`` or ``ValueError`` when it cannot be."""
        written = save_session(self.window, path)
        self.last_path = written
        self.window.status(f"Session saved to {written}")
        return written

    # -- opening ---------------------------------------------------------------------------
    def ask_open(self) -> None:
        """File > Open session…: the chosen file opens through ``app.open_session``."""
        dialog = QFileDialog(self.window, "Open session",
                             str((self.last_path or Path.home() / "x").parent),
                             f"Studio sessions (*{SUFFIX})")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(lambda path: self._trigger("app.open_session", path))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def open_from(self, path: str | os.PathLike) -> SessionReport:
        """Open a session as the user does: what is open now is autosaved first (so the
        screen being replaced can be brought back); on screen the file is read in the I/O
        thread and the report shown."""
        if Path(path).resolve() != self.autosave_path.resolve():
            self.autosave()
        self.last_path = Path(path)
        shown = self.window.isVisible()
        return open_session(self.window, path, interactive=shown, background=shown)

    def _trigger(self, command_id: str, path: str) -> None:
        registry = getattr(self.window, "commands", None)
        if registry is not None:
            registry.trigger(command_id, path=path)

    # -- quitting and crashing ---------------------------------------------------------------
    def mark_running(self) -> None:
        """A marker this process removes when it quits cleanly."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._marker = self.folder / f"running-{os.getpid()}.json"
        self._marker.write_text(json.dumps({"pid": os.getpid(), "started": time.time()}))

    def quit_cleanly(self) -> None:
        """On close: the session autosaved, the marker removed."""
        self.autosave()
        if self._marker is not None:
            self._marker.unlink(missing_ok=True)
            self._marker = None

    def crashed_markers(self) -> list[Path]:
        """Markers of Studio processes that are gone without quitting cleanly."""
        if not self.folder.is_dir():
            return []
        return [marker for marker in self.folder.glob("running-*.json")
                if marker != self._marker and not _alive(_marker_pid(marker))]

    def offer_after_crash(self) -> QMessageBox | None:
        """When an earlier Studio did not quit cleanly and left a session: offer it."""
        crashed = self.crashed_markers()
        for marker in crashed:
            marker.unlink(missing_ok=True)
        if not crashed or not self.autosave_path.is_file():
            return None
        when = time.strftime("%Y-%m-%d %H:%M",
                             time.localtime(self.autosave_path.stat().st_mtime))

        def then(reopen: bool) -> None:
            self.offer = None
            if reopen:
                self.open_from(self.autosave_path)

        self.offer = question(self.window, "sessionCrashOffer", "Studio did not quit cleanly",
                              f"Studio stopped without quitting last time. Reopen the session "
                              f"it autosaved at {when}?", "Reopen the last session", "Not now",
                              then)
        return self.offer

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.window and event.type() == QEvent.Type.Close:
            self.quit_cleanly()
        return False


def _marker_pid(marker: Path) -> int:
    try:
        return int(json.loads(marker.read_text()).get("pid", 0))
    except (OSError, ValueError, AttributeError):
        return 0


ARGS = "studio.session_command_args:"   # argument models, imported on first use


def _open_command(controller: SessionsController, args) -> Any:
    if not args.path:
        controller.ask_open()
        return PROMPTED
    report = controller.open_from(args.path)
    if report.refused:
        raise Refusal(report.refused)
    return True


def _save_command(controller: SessionsController, args) -> Any:
    if not args.path:
        controller.ask_save()
        return PROMPTED
    try:
        return str(controller.save_to(args.path))
    except (OSError, ValueError) as exc:
        raise Refusal(f"{args.path}: {exc}") from exc


def _autosave_command(controller: SessionsController, args) -> bool:
    controller.set_autosave_minutes(args.minutes)
    return True


COMMANDS = (
    Command("app.open_session", "Open a session", "Reopen a saved .studio session: its panels, "
            "documents, views, edits and layout.", _open_command, ARGS + "SessionPathArgs",
            shortcut="Ctrl+Shift+O", menu="File/Open session…", scope="sessions"),
    Command("app.save_session", "Save the session", "Save what is on screen (panels, "
            "documents, views, edits, layout) as a .studio file.", _save_command,
            ARGS + "SessionPathArgs", shortcut="Ctrl+Shift+S", menu="File/Save session…",
            scope="sessions"),
    Command("app.autosave_session", "Autosave the session", "How often the session is saved "
            "into the workspace (0: only on quit).", _autosave_command, ARGS + "AutosaveArgs",
            menu="File/Autosave session", scope="sessions"),
)


def install_sessions(window: QMainWindow) -> SessionsController:
    """File > Open session… (Ctrl+Shift+O), Save session… (Ctrl+Shift+S) and Autosave
    session, as the commands ``app.open_session``, ``app.save_session`` and
    ``app.autosave_session``; the autosave timer, the autosave on quit and the offer of the
    last session after a crash. Installed once: a second call returns the window's."""
    if getattr(window, "sessions", None) is not None:
        return window.sessions
    controller = SessionsController(window)
    registry = window.commands
    for command in COMMANDS:
        registry.add(command, replace=True)
    registry.bind("sessions", controller)
    file_menu = next(action.menu() for action in window.menuBar().actions()
                     if action.text().replace("&", "") == "File")
    anchor = window.recent_menu.menuAction() if hasattr(window, "recent_menu") else None
    actions = file_menu.actions()
    after = actions[actions.index(anchor) + 1] if anchor in actions and \
        actions.index(anchor) + 1 < len(actions) else None
    controller.open_action = command_action(window, registry, "app.open_session",
                                            "Open &session…")
    controller.save_action = command_action(window, registry, "app.save_session",
                                            "Save sessio&n…")
    controller.autosave_menu = _autosave_menu(controller, window, registry)
    for action in (controller.open_action, controller.save_action):
        file_menu.insertAction(after, action)
    file_menu.insertMenu(after, controller.autosave_menu)
    window.installEventFilter(controller)
    controller.mark_running()
    controller._start_timer()
    QTimer.singleShot(0, controller.offer_after_crash)
    window.sessions = controller
    return controller


def _autosave_menu(controller: SessionsController, window: QMainWindow, registry) -> QMenu:
    """File > Autosave session: every few minutes, or only on quit (the setting)."""
    menu = QMenu("&Autosave session", window)
    group = QActionGroup(menu)
    for minutes in AUTOSAVE_CHOICES:
        text = f"Every {minutes:g} minutes" if minutes else "Only on quit"
        action = command_action(menu, registry, "app.autosave_session", text,
                                args=lambda m=minutes: {"minutes": m})
        action.setCheckable(True)
        action.setData(minutes)
        action.setChecked(minutes == controller.autosave_minutes())
        group.addAction(action)
        menu.addAction(action)
    return menu


def _buttons(box: QMessageBox) -> dict[str, QPushButton]:
    """A box's buttons by text (tests and screenshots press them)."""
    return {button.text(): button for button in box.buttons()}
