"""Macros: the commands a user runs between Record and Stop, saved as a ``.py`` script of
``studio.command(...)`` lines and replayed on another file.

Commands name elements as the user sees them (nets, layers, molecules, ROIs), so a replay
means the same edits wherever those names exist; a command naming one the file lacks is
refused (it changes nothing), listed with its line and reason, and the replay goes on with the
rest. Opening files is not recorded: a macro is replayed on whatever file is open. A saved
macro is an ordinary script too (``studio --script macro.py FILE`` replays it the same
tolerant way, exiting 1 when any line was refused).

The recorder listens to the window's command registry (the same invocations the command log
shows); ``install_macro_controls`` adds Record / Stop / Save… / Replay… under the log.
"""

from __future__ import annotations

import ast
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.atomic import write_bytes_atomic
from studio.commands import CommandError, CommandRegistry, Invocation

MACRO_HEADER = "# Studio macro"
# Commands that are about the window rather than the document: never part of a macro.
NOT_RECORDED = frozenset({"app.open", "app.quit", "app.settings", "app.clear_recent",
                          "app.export_checkpoint", "view.palette", "view.command_log",
                          "view.edit_history", "view.runs", "view.reset_layout",
                          "view.close_tab", "console.show", "console.interrupt",
                          "engine.restart", "engine.show_log"})


def recordable(command_id: str) -> bool:
    """Whether a command belongs in a macro: not opening files (the replay is on the file
    the user opens), not help, nor the window's own docks and dialogs."""
    scope, _, verb = command_id.partition(".")
    return (command_id not in NOT_RECORDED and scope != "help"
            and verb not in ("open", "open_design"))


class MacroRecorder:
    """Keeps the line of every command that ran (not refused) while recording."""

    def __init__(self, registry: CommandRegistry) -> None:
        self.registry = registry
        self.lines: list[str] = []
        self.started: float | None = None
        self._unlisten: Callable[[], None] | None = None
        self.on_change: Callable[[], None] | None = None

    @property
    def recording(self) -> bool:
        return self._unlisten is not None

    def start(self) -> None:
        """Start a new recording (what an earlier one kept is dropped)."""
        if self.recording:
            return
        self.lines = []
        self.started = time.time()
        self._unlisten = self.registry.listen(self._heard)
        self._changed()

    def stop(self) -> list[str]:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
            self._changed()
        return list(self.lines)

    def _heard(self, invocation: Invocation) -> None:
        if invocation.refused or not recordable(invocation.command.id):
            return
        self.lines.append(invocation.python())
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def script(self) -> str:
        """The macro as a script a replay (or ``studio --script``) runs."""
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started or time.time()))
        header = [f"{MACRO_HEADER}: {len(self.lines)} command(s) recorded {when}.",
                  "# Replay on another file: Replay… under the command log, or",
                  "#   studio --script THIS_FILE.py OTHER_FILE",
                  "# A command naming an element that file lacks is refused and listed; the "
                  "others apply."]
        return "\n".join(header + self.lines) + "\n"

    def save(self, path: str | os.PathLike) -> Path:
        """Write the macro (atomically); a path without a suffix gets ``.py``."""
        target = Path(path).expanduser()
        if not target.suffix:
            target = target.with_suffix(".py")
        return write_bytes_atomic(target, self.script().encode("utf-8"))


class MacroError(ValueError):
    """A file that is not a macro (anything but ``studio.command`` calls with plain values)."""


@dataclass(frozen=True)
class MacroStep:
    line: int
    source: str
    command: str
    args: dict


@dataclass
class MacroReplay:
    """What a replay did: the lines applied, and each refused one with its reason."""

    path: str
    applied: list[MacroStep] = field(default_factory=list)
    refused: list[tuple[MacroStep, str]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.refused

    def summary(self) -> str:
        lines = [f"{Path(self.path).name}: {len(self.applied)} command(s) applied, "
                 f"{len(self.refused)} refused"]
        lines += [f"  line {step.line}: {reason}" for step, reason in self.refused]
        return "\n".join(lines)


def is_macro(text: str) -> bool:
    return text.lstrip().startswith(MACRO_HEADER)


def read_macro(path: str | os.PathLike) -> list[MacroStep]:
    """The steps of a macro file; ``MacroError`` (file and line) for anything else in it.
    Parsed, never executed: a macro's arguments are plain values."""
    source_path = Path(path).expanduser()
    try:
        text = source_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MacroError(f"{source_path}: cannot read the macro ({exc})") from None
    try:
        tree = ast.parse(text, filename=str(source_path))
    except SyntaxError as exc:
        raise MacroError(f"{source_path}, line {exc.lineno}: {exc.msg}") from None
    lines = text.splitlines()
    return [_step(statement, source_path, lines) for statement in tree.body]


def _step(statement: ast.stmt, path: Path, lines: list[str]) -> MacroStep:
    where = f"{path}, line {statement.lineno}"
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "command" and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "studio"):
        raise MacroError(f"{where}: a macro holds only studio.command(...) lines; run this "
                         "file as a script instead")
    try:
        if len(call.args) != 1 or any(keyword.arg is None for keyword in call.keywords):
            raise ValueError("one command id, then named arguments")
        command_id = ast.literal_eval(call.args[0])
        args = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    except ValueError as exc:
        raise MacroError(f"{where}: the command and its arguments must be plain values "
                         f"({exc})") from None
    if not isinstance(command_id, str):
        raise MacroError(f"{where}: the command id must be a string")
    return MacroStep(statement.lineno, lines[statement.lineno - 1].strip(), command_id, args)


def replay_macro(run_command: Callable[..., Any], path: str | os.PathLike) -> MacroReplay:
    """Run each step with ``run_command(id, **args)`` (``studio.command``, or the window's
    ``command``); a refused step is listed and the replay goes on."""
    steps = read_macro(path)
    replay = MacroReplay(str(path))
    for step in steps:
        try:
            run_command(step.command, **step.args)
        except CommandError as exc:
            replay.refused.append((step, str(exc)))
        else:
            replay.applied.append(step)
    return replay


def install_macro_controls(window: Any) -> MacroRecorder:
    """Record / Stop / Save… / Replay… in a row under the window's command log
    (``window.command_log``); returns the recorder (``window.macro_recorder``)."""
    from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton

    existing = getattr(window, "macro_recorder", None)
    if existing is not None:
        return existing
    recorder = MacroRecorder(window.commands)
    log = window.command_log
    row = QHBoxLayout()
    status = QLabel("")
    status.setObjectName("emptyNote")
    record = QPushButton("Record")
    stop = QPushButton("Stop")
    save = QPushButton("Save…")
    replay = QPushButton("Replay…")
    record.setToolTip("Record the commands you run from now on as a macro")
    save.setToolTip("Save the recorded commands as a .py macro")
    replay.setToolTip("Run a saved macro on what is open: commands naming elements it lacks "
                      "are refused and listed, the others apply")

    def refresh() -> None:
        record.setEnabled(not recorder.recording)
        stop.setEnabled(recorder.recording)
        save.setEnabled(not recorder.recording and bool(recorder.lines))
        count = len(recorder.lines)
        status.setText(f"Recording: {count} command(s)" if recorder.recording else
                       f"Macro: {count} command(s)" if count else "Macro: none recorded")

    def ask_save() -> None:
        dialog = QFileDialog(window, "Save the macro", "macro.py", "Python (*.py)")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.fileSelected.connect(lambda path: _saved(window, recorder, path))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def ask_replay() -> None:
        dialog = QFileDialog(window, "Replay a macro", "", "Python (*.py)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(lambda path: replay_in_window(window, path))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    record.clicked.connect(lambda: recorder.start())
    stop.clicked.connect(lambda: recorder.stop())
    save.clicked.connect(ask_save)
    replay.clicked.connect(ask_replay)
    for widget in (status, record, stop, save, replay):
        row.addWidget(widget, 1 if widget is status else 0)
    log.layout().addLayout(row)
    recorder.on_change = refresh
    refresh()
    window.macro_recorder = recorder
    return recorder


def _saved(window: Any, recorder: MacroRecorder, path: str) -> None:
    try:
        written = recorder.save(path)
    except OSError as exc:
        window.show_error("Cannot save the macro", f"{path}: {exc}")
        return
    window.status(f"Macro saved: {written}")


def replay_in_window(window: Any, path: str | os.PathLike) -> MacroReplay | None:
    """Replay a macro on what the window has open; the refused lines are shown."""
    try:
        replay = replay_macro(window.command, path)
    except MacroError as exc:
        window.show_error("Cannot replay the macro", str(exc))
        return None
    if replay.refused:
        window.show_info("Macro replayed in part", replay.summary())
    else:
        window.status(replay.summary())
    return replay
