"""Studio from Python: the ``studio`` object that scripts, the console dock and recorded macros
drive, and ``studio --script FILE.py [FILES...]``, which runs a script with no window on screen.

A script runs on the Qt main thread, like a click, so it may touch what the window touches.
The window does not freeze meanwhile: while the script's own code runs, the event loop is
turned every few hundredths of a second (``ScriptGuard``: an interval timer's signal handled
when it lands in the script's code), and every call that waits on Studio (opening a file, a
run, an export) turns a local event loop until it is done, so engine events, the console and
its Interrupt action stay live. The same guard stops a script: Ctrl+C in the console, the
Interrupt action, or ``--timeout``.

Whatever Studio refuses (a file it cannot read, an unknown command, bad arguments, an element
that does not exist) raises ``StudioRefused`` in the script with the window's own message;
nothing is half-saved, since every write in Studio is atomic.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

PUMP_INTERVAL_S = 0.03         # how often the event loop turns while script code runs
WAIT_TICK_MS = 50              # how often a wait looks for an interrupt or a deadline
TIMEOUT_GRACE_S = 5.0          # after --timeout, how long before the process is ended
EXIT_RAISED = 1                # the script raised (or Studio refused one of its calls)
EXIT_USAGE = 2                 # the script file cannot be read or compiled
EXIT_TIMED_OUT = 124           # --timeout ran out (as coreutils' timeout says it)
DEFAULT_EXPORT_DPI = 192
EXPORT_TIMEOUT_S = 120.0       # an engine-rendered PDF
SETTLE_TIMEOUT_S = 60.0        # a panel's background work after an open or a command
SETTLE_POLL_S = 0.02


class StudioRefused(Exception):
    """Studio refused a script's call; the message is the one the window would show."""


class ScriptTimedOut(BaseException):
    """``--timeout`` ran out. A BaseException, so ``except Exception`` does not swallow it."""


class ScriptGuard:
    """Keeps the Qt event loop turning while script code runs on the main thread, and stops
    that code when asked (``interrupt``) or when its deadline passes.

    ``is_script_code(code)`` says which frames are the script's own. Every 30 ms an interval
    timer's signal (SIGALRM) is handled on the main thread; when it lands in the script's own
    code, the event loop turns there and a pending interrupt or timeout is raised, so library
    code runs at full speed and is never re-entered. Where there is no such timer (Windows,
    another thread) the script's frames are traced line by line instead (slower).
    """

    def __init__(self, is_script_code: Callable[[types.CodeType], bool]) -> None:
        self.is_script_code = is_script_code
        self.deadline: float | None = None
        self.timeout_s: float | None = None
        self._pending: BaseException | None = None
        self._last_pump = 0.0
        self._depth = 0
        self._pumping = False
        self.on_running: Callable[[bool], None] | None = None   # told when code starts, ends

    @property
    def running(self) -> bool:
        return self._depth > 0

    def interrupt(self, error: BaseException | None = None) -> None:
        """Stop the running code at its next line (or its current wait)."""
        if self.running:
            self._pending = error or KeyboardInterrupt("interrupted")

    def should_stop(self) -> bool:
        return self._pending is not None or (
            self.deadline is not None and time.monotonic() > self.deadline)

    def check(self) -> None:
        """Raise the pending interrupt, or ``ScriptTimedOut`` once the deadline has passed."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            raise pending
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.deadline = None  # raised once; the watchdog ends what ignores it
            raise ScriptTimedOut(f"the script ran longer than {self.timeout_s:g} s (--timeout)")

    @contextmanager
    def guarding(self, timeout_s: float | None = None) -> Iterator[None]:
        """Keep the loop turning and watch for stops while the body runs (nested uses share
        the outer one)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._pending = None
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s if timeout_s else None
        self._depth = 1
        self._tell(True)
        watch = self._alarms if _alarms_available() else self._tracing
        try:
            with watch():
                yield
        finally:
            self._depth = 0
            self.deadline = None
            self._pending = None
            self._tell(False)

    def _tell(self, running: bool) -> None:
        if self.on_running is not None:
            self.on_running(running)

    @contextmanager
    def _alarms(self) -> Iterator[None]:
        """SIGALRM every ``PUMP_INTERVAL_S`` (system calls restart); the handler and timer
        that were there (pytest-timeout's, say) are put back, with the time they had left."""
        started = time.monotonic()
        handler = signal.signal(signal.SIGALRM, self._on_alarm)
        signal.siginterrupt(signal.SIGALRM, False)
        delay, interval = signal.setitimer(signal.ITIMER_REAL, PUMP_INTERVAL_S,
                                           PUMP_INTERVAL_S)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, handler)
            if delay > 0:
                left = max(delay - (time.monotonic() - started), 0.001)
                signal.setitimer(signal.ITIMER_REAL, left, interval)

    def _on_alarm(self, _signum: int, frame: types.FrameType | None) -> None:
        if frame is None or self._pumping or not self.is_script_code(frame.f_code):
            return  # in library or Qt code: never re-entered; the next tick will do
        self._pumping = True
        try:
            _process_events()
        finally:
            self._pumping = False
        if self.should_stop():
            self.check()

    @contextmanager
    def _tracing(self) -> Iterator[None]:
        previous = sys.gettrace()
        sys.settrace(self._on_call)
        try:
            yield
        finally:
            sys.settrace(previous)

    def _on_call(self, frame: types.FrameType, event: str, _arg: Any):
        if event == "call" and self.is_script_code(frame.f_code):
            return self._on_line
        return None

    def _on_line(self, _frame: types.FrameType, event: str, _arg: Any):
        if event == "line":
            now = time.monotonic()
            if now - self._last_pump >= PUMP_INTERVAL_S:
                self._last_pump = now
                _process_events()
            if self.should_stop():
                self.check()  # raising here ends the trace; ``_tracing`` restores it after
        return self._on_line


def _alarms_available() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _workers_of(widget: Any) -> list[Any]:
    """A panel's background workers: its attributes that have an ``idle()`` method."""
    fields = getattr(widget, "__dict__", {})
    return [value for value in fields.values()
            if not isinstance(value, type) and callable(getattr(value, "idle", None))]


def _pending_timers(widget: Any) -> list[Any]:
    """A panel's single-shot timers still to fire (repeating ones, a player's clock, never
    settle and are not waited for)."""
    from PySide6.QtCore import QTimer

    finder = getattr(widget, "findChildren", None)
    if finder is None:
        return []
    return [timer for timer in finder(QTimer) if timer.isActive() and timer.isSingleShot()]


def _settle_layout(rounds: int = 3) -> None:
    """Deliver the posted layout and resize events of widgets just shown (a panel's tab)."""
    from PySide6.QtCore import QCoreApplication

    for _ in range(rounds):
        QCoreApplication.sendPostedEvents()
        _process_events()


def _process_events() -> None:
    from PySide6.QtCore import QCoreApplication

    app = QCoreApplication.instance()
    if app is not None:
        app.processEvents()


class Studio:
    """The application as a script sees it (``studio`` in a script, the console, a macro).

    Every method returns plain data (dicts, lists, numpy arrays) and raises ``StudioRefused``
    with the window's message when Studio refuses.
    """

    def __init__(self, window: Any, guard: ScriptGuard | None = None) -> None:
        self.window = window
        self.guard = guard or ScriptGuard(lambda code: False)

    def __repr__(self) -> str:
        return (f"<Studio workspace={str(self.window.workspace.root)!r}: open(path), "
                f"command(id, **args), commands(), panel(name), run(method, params, inputs), "
                f"export(path), data(name), save_session(path), open_session(path)>")

    # -- files ---------------------------------------------------------------------------------
    def open(self, path: str | os.PathLike) -> str:
        """Open a data file in the panel that reads it (as File > Open does); returns that
        panel's id once the file is open."""
        target = Path(path).expanduser()
        if not target.exists():
            raise StudioRefused(f"{target}: no such file")
        with self._refusals():
            # File > Open's own coroutine (``open_paths`` starts it and returns at once)
            self._wait(self.window._open_path(str(target.resolve())))
        self._settle()  # a panel's first layout and background work on the file
        for panel_id, widget in self.window.panel_widgets.items():
            if widget is self.window.tabs.currentWidget():
                return panel_id
        raise StudioRefused(f"{target}: no panel opened it")

    # -- commands ------------------------------------------------------------------------------
    def command(self, command_id: str, /, **args: Any) -> Any:
        """Run a registered command (``studio.commands()`` lists them) and return its result;
        ``CommandRefused`` says why one was refused (it then changed nothing)."""
        with self._refusals():
            result = self.window.command(command_id, **args)
        self._settle()
        return result

    def commands(self) -> list[dict]:
        """Every registered command: ``{id, title, help, args, shortcut, menu, undoable}``
        (``args``: the JSON Schema of its arguments)."""
        return [{"id": command.id, "title": command.title, "help": command.help,
                 "args": command.schema(), "shortcut": command.shortcut, "menu": command.menu,
                 "undoable": command.undoable} for command in self.window.commands.commands()]

    # -- panels --------------------------------------------------------------------------------
    def panel(self, name: str) -> dict:
        """A panel's documents and view state as plain data. ``missing`` names what the panel
        does not offer yet."""
        entries = self.window.panels.entries()
        if name not in entries:
            raise StudioRefused(f"no panel {name!r}; panels: {', '.join(sorted(entries))}")
        widget = self.window.panel_widgets.get(name)
        described: dict[str, Any] = {"id": name, "title": entries[name].title,
                                     "open": widget is not None, "in_front": False,
                                     "documents": [], "view_state": None, "missing": []}
        if widget is None:
            return described
        described["in_front"] = self.window.tabs.currentWidget() is widget
        described["documents"] = self._documents(name, widget)
        view_state = _view_state_of(widget)
        if view_state is None:
            described["missing"].append(
                f"view_state: the {entries[name].title} panel does not offer its view state "
                "yet (no view_state())")
        described["view_state"] = view_state
        if not self.data(name):
            described["missing"].append(
                f"data: the {entries[name].title} panel holds no numpy arrays for "
                "studio.data (no data_arrays(), none in its model)")
        return described

    def _documents(self, name: str, widget: Any) -> list[dict]:
        from studio.documents import document_file

        model = getattr(widget, "model", None)
        document = getattr(model, "document", None) if model is not None else None
        if not isinstance(document, str) or document.endswith(":"):
            return []
        history = self.window.histories.get(name)
        applied = history.applied(document) if history is not None else []
        found = document_file(document)
        return [{"document": document, "path": str(found.path) if found else None,
                 "edits": [getattr(command, "label", type(command).__name__)
                           for command in applied]}]

    def data(self, name: str) -> dict[str, Any]:
        """The numpy arrays of what a panel has open, by attribute path ("design.segments"),
        for a quick look: the panel's own ``data_arrays()`` where it has one, else every array
        its model holds (two levels deep). Views of the panel's data: copy before changing."""
        widget = self.window.panel_widgets.get(name)
        if widget is None:
            open_ = ", ".join(sorted(self.window.panel_widgets)) or "none"
            raise StudioRefused(f"the {name!r} panel is not open (open panels: {open_})")
        offered = getattr(widget, "data_arrays", None)
        if callable(offered):
            return dict(offered())
        model = getattr(widget, "model", None)
        return _arrays_in(model, depth=2) if model is not None else {}

    # -- runs ----------------------------------------------------------------------------------
    def run(self, method: str, params: dict | None = None, inputs: dict | None = None,
            seed: int = 0, timeout_s: float | None = None) -> dict:
        """Run an engine method and wait for it to end (the window stays live meanwhile);
        returns ``{id, method, state, reason, outputs, claim, run_dir}``. Interrupting the
        wait cancels the job."""
        bridge = self.window.bridge
        self._ensure_engine()
        try:
            job_id = self._wait(bridge.submit(method, params or {}, inputs or {}, seed,
                                              self.window.settings.cluster or "local"),
                                what=f"submitting {method}")
        except Exception as exc:  # the engine's refusal: unknown method, bad parameters...
            from studio.host import error_message

            raise StudioRefused(f"{method}: {error_message(exc)}") from exc
        self.window.runs_dock.select(job_id)
        try:
            self._wait(_job_ended(bridge, job_id), timeout_s=timeout_s,
                       what=f"the run {job_id} of {method}")
        except BaseException:
            self.window.host.cancel_job(job_id)
            raise
        record = bridge.jobs.get(job_id)
        outputs = dict(record.outputs) if record is not None else {}
        claim = outputs.get("claim")
        if claim is None and record is not None and record.run_dir:
            claim = _claim_artifact(Path(record.run_dir), record.artifacts)
        return {"id": job_id, "method": method, "state": record.state if record else "unknown",
                "reason": record.reason if record else "", "outputs": outputs, "claim": claim,
                "run_dir": record.run_dir if record else ""}

    def _ensure_engine(self) -> None:
        bridge = self.window.bridge
        if not bridge.is_ready:
            if bridge.state == "stopped":
                self.window.start_engine()
            self._wait(bridge.wait_ready(bridge.start_timeout_s), what="the engine to start")

    # -- figures -------------------------------------------------------------------------------
    def export(self, path: str | os.PathLike, dpi: int = DEFAULT_EXPORT_DPI,
               caption: bool = False) -> str:
        """The figure of the tab in front, as Ctrl+E writes it (the ``app.export_figure``
        command: PNG, SVG or PDF by the suffix, provenance inside); returns the path written
        once it is there (a plot's PDF is rendered by the engine, which is started for it)."""
        target = Path(path).expanduser().resolve()
        engine_pdf = target.suffix.lower() == ".pdf" and self.window.current_plot() is not None
        if engine_pdf:
            self._ensure_engine()
        before = target.stat().st_mtime_ns if target.exists() else None
        self.command("app.export_figure", path=str(target), dpi=dpi, caption=caption)
        if engine_pdf:
            errors = self.window.errors
            seen = len(errors)
            with self._refusals():   # the engine's refusal ends the wait and is raised
                self._wait(_rewritten(target, before, lambda: len(errors) > seen),
                           timeout_s=EXPORT_TIMEOUT_S, what=f"the engine's PDF {target.name}")
        if not target.exists():
            raise StudioRefused(f"{target}: the export wrote nothing")
        return str(target)

    # -- sessions ------------------------------------------------------------------------------
    def save_session(self, path: str | os.PathLike) -> str:
        """Save the window's documents, views and runs as a ``.studio`` session file."""
        sessions = _sessions_module("save_session")
        with self._refusals():
            return str(sessions.save_session(self.window, Path(path).expanduser()))

    def open_session(self, path: str | os.PathLike) -> dict:
        """Open a ``.studio`` session file (documents, views, runs) without asking: missing
        documents are skipped, the session's edits win. Returns the report as plain data
        (``opened``, ``relocated``, ``changed``, ``skipped``, ``edits``, ``panel_problems``);
        a file that cannot be read is refused."""
        import dataclasses

        sessions = _sessions_module("open_session")
        with self._refusals():
            report = sessions.open_session(self.window, Path(path).expanduser(),
                                           interactive=False)
        if report.refused:
            raise StudioRefused(f"{path}: {report.refused}")
        self._settle()
        return dataclasses.asdict(report)

    # -- waiting -------------------------------------------------------------------------------
    def _settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Return when what a click would leave to the event loop is done: posted layout
        events, the panels' pending single-shot timers (a throttled redraw) and the work of
        their background workers (any attribute of a panel with ``idle()``: the route
        checks, the fMRI slicer) with its results delivered. A figure exported next is then
        the one the window would show."""
        ends = time.monotonic() + timeout_s
        # A worker is idle a moment before its result is posted to this thread: only idle
        # twice in a row, a poll apart with the events between delivered, counts as done.
        quiet = 0
        while quiet < 2 and time.monotonic() < ends:
            _settle_layout()
            quiet = 0 if self._busy() else quiet + 1
            if quiet < 2:
                self.wait(SETTLE_POLL_S)

    def _busy(self) -> list[Any]:
        """The panels' workers still working and single-shot timers still to fire."""
        widgets = list(self.window.panel_widgets.values())
        return ([worker for widget in widgets for worker in _workers_of(widget)
                 if not worker.idle()]
                + [timer for widget in widgets for timer in _pending_timers(widget)])

    def wait(self, seconds: float) -> None:
        """Pause the script while the window keeps running."""
        self._wait(asyncio.sleep(seconds), what=f"waiting {seconds:g} s")

    def _wait(self, awaitable: Awaitable, timeout_s: float | None = None,
              what: str = "Studio") -> Any:
        """Turn a local Qt event loop (qasync: asyncio tasks advance too) until ``awaitable``
        is done; an interrupt or the script's deadline cancels it and raises."""
        from PySide6.QtCore import QEventLoop, QTimer

        if asyncio.current_task() is not None:
            raise StudioRefused("a coroutine cannot wait on Studio this way: call it from "
                                "plain (not async) code")
        future = asyncio.ensure_future(awaitable)
        local = QEventLoop()
        future.add_done_callback(lambda _done: local.quit())
        ends = time.monotonic() + timeout_s if timeout_s else None

        def tick() -> None:
            if self.guard.should_stop() or (ends is not None and time.monotonic() > ends):
                local.quit()

        ticker = QTimer()
        ticker.setInterval(WAIT_TICK_MS)
        ticker.timeout.connect(tick)
        ticker.start()
        try:
            while not future.done():
                local.exec()
                if future.done():
                    break
                self.guard.check()
                if ends is not None and time.monotonic() > ends:
                    raise TimeoutError(f"{what} did not end within {timeout_s:g} s")
        except BaseException:
            future.cancel()
            raise
        finally:
            ticker.stop()
        return future.result()

    @contextmanager
    def _refusals(self) -> Iterator[None]:
        """What the window reports while the body runs (its error boxes) is raised as
        ``StudioRefused`` instead, and the boxes the script caused are closed (others stay).
        An interrupt or a timeout in flight is kept."""
        seen = len(self.window.errors)
        boxes = list(getattr(self.window, "_message_boxes", []))
        try:
            yield
        except Exception as exc:
            self._raise_reported(seen, boxes, exc)
            raise
        self._raise_reported(seen, boxes, None)

    def _raise_reported(self, seen: int, boxes: list, cause: BaseException | None) -> None:
        reported = self.window.errors[seen:]
        if reported:
            _close_message_boxes(self.window, keep=boxes)
            lines = [message if message.startswith(f"{what}:") else f"{what}: {message}"
                     for what, message in reported]
            raise StudioRefused("\n".join(lines)) from cause


def _close_message_boxes(window: Any, keep: list) -> None:
    for box in list(getattr(window, "_message_boxes", [])):
        if not any(box is kept for kept in keep):
            box.close()


async def _rewritten(target: Path, before: int | None, failed: Callable[[], bool],
                     poll_s: float = 0.05) -> None:
    """Until ``target`` is (re)written, or ``failed()``."""
    while not failed() and (not target.exists() or target.stat().st_mtime_ns == before):
        await asyncio.sleep(poll_s)


async def _job_ended(bridge: Any, job_id: str, poll_s: float = 0.05) -> None:
    while (record := bridge.jobs.get(job_id)) is None or record.active:
        await asyncio.sleep(poll_s)


def _claim_artifact(run_dir: Path, artifacts: list[dict]) -> dict | None:
    import json

    for artifact in artifacts:
        if artifact.get("kind") == "claim" and artifact.get("path"):
            try:
                return json.loads((run_dir / artifact["path"]).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
    return None


def _view_state_of(widget: Any) -> dict | None:
    finder = getattr(widget, "view_state", None)
    if callable(finder):
        state = finder()
        return dict(state) if isinstance(state, dict) else {"value": state}
    return None


def _arrays_in(holder: Any, depth: int, prefix: str = "") -> dict[str, Any]:
    """The numpy arrays among ``holder``'s attributes, and theirs, ``depth`` levels down."""
    import numpy as np

    found: dict[str, Any] = {}
    fields = getattr(holder, "__dict__", None)
    if not isinstance(fields, dict):
        return found
    for name, value in fields.items():
        if name.startswith("_"):
            continue
        key = f"{prefix}{name}"
        if isinstance(value, np.ndarray):
            found[key] = value
        elif depth > 1 and hasattr(value, "__dict__") and not isinstance(value, type):
            found.update(_arrays_in(value, depth - 1, f"{key}."))
    return found


def _sessions_module(feature: str) -> Any:
    try:
        import studio.sessions as sessions
    except ImportError:
        sessions = None
    if sessions is None or not callable(getattr(sessions, feature, None)):
        raise StudioRefused(f"{feature}: saved sessions are not in this build of Studio yet "
                            "(studio.sessions is missing)")
    return sessions


# -- ``studio --script`` ---------------------------------------------------------------------

OFFSCREEN_NOTICES = ("This plugin does not support",)   # the offscreen platform's, per window


def quiet_offscreen_notices() -> None:
    """Keep the offscreen platform's notices about what it cannot do with windows off a
    script's stderr (which is the script's to use); every other Qt message goes on."""
    from PySide6.QtCore import qInstallMessageHandler

    previous: Any = None

    def handler(mode: Any, context: Any, message: str) -> None:
        if message.startswith(OFFSCREEN_NOTICES):
            return
        if previous is not None:
            previous(mode, context, message)
        else:
            print(message, file=sys.stderr)

    previous = qInstallMessageHandler(handler)


def run_script(window: Any, script: str | os.PathLike, files: list[str],
               timeout_s: float | None = None, session: str | None = None,
               out: TextIO | None = None) -> int:
    """Open ``session`` and ``files``, run ``script`` against a ``Studio`` of ``window``;
    returns the exit code: 0, the script's ``SystemExit`` code, 1 when it raised (its line
    printed), 2 when it cannot be read, 124 when ``timeout_s`` ran out."""
    from studio.macros import is_macro

    err = out or sys.stderr
    path = Path(script).expanduser().resolve()
    try:
        source = path.read_text(encoding="utf-8")
        code = compile(source, str(path), "exec")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"studio --script: {path}: cannot read the script ({exc})", file=err)
        return EXIT_USAGE
    except SyntaxError as exc:
        print(f"studio --script: {path}, line {exc.lineno}: {exc.msg}", file=err)
        return EXIT_USAGE
    guard = ScriptGuard(lambda frame_code: frame_code.co_filename == str(path))
    studio = Studio(window, guard)
    namespace = {"__name__": "__main__", "__file__": str(path), "studio": studio}
    watchdog = _Watchdog(timeout_s, str(path), err) if timeout_s else None
    saved_argv = sys.argv
    sys.argv = [str(path), *files]
    try:
        with guard.guarding(timeout_s):
            if watchdog is not None:
                watchdog.start()
            if session:
                studio.open_session(session)
            for name in files:
                studio.open(name)
            if is_macro(source):
                return _replay(studio, path, err)
            exec(code, namespace)  # noqa: S102 - running the user's script is the point
        return 0
    except SystemExit as exc:
        return _system_exit_code(exc, err)
    except ScriptTimedOut as exc:
        _print_error(exc, str(path), err)
        return EXIT_TIMED_OUT
    except BaseException as exc:  # the script's own error, KeyboardInterrupt included
        _print_error(exc, str(path), err)
        return EXIT_RAISED
    finally:
        sys.argv = saved_argv
        if watchdog is not None:
            watchdog.cancel()


def _replay(studio: Studio, path: Path, err: TextIO) -> int:
    """A recorded macro: every line is tried, the refused ones listed (exit 1 if any)."""
    from studio.macros import replay_macro

    replay = replay_macro(studio.command, path)
    print(replay.summary(), file=err)
    return 0 if replay.complete else EXIT_RAISED


def _system_exit_code(exc: SystemExit, err: TextIO) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=err)
    return EXIT_RAISED


def _print_error(exc: BaseException, script: str, err: TextIO) -> None:
    """The script's own frames of the traceback (file, line, source), then the error."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if frame.filename == script]
    if frames:
        print("Traceback (the script's lines):", file=err)
        print("".join(traceback.format_list(frames)), end="", file=err)
    where = f" (line {frames[-1].lineno})" if frames else ""
    print(f"studio --script: {Path(script).name}{where}: {type(exc).__name__}: {exc}", file=err)


class _Watchdog:
    """Ends the process when a timed-out script does not stop (stuck in C code, or it caught
    ``ScriptTimedOut``): the line it was on is printed, then exit 124. Writes are atomic, so
    nothing is left half-saved."""

    def __init__(self, timeout_s: float, script: str, err: TextIO) -> None:
        self.script, self.err = script, err
        self.main = threading.main_thread().ident
        self.timer = threading.Timer(timeout_s + TIMEOUT_GRACE_S, self._expire)
        self.timer.daemon = True

    def start(self) -> None:
        self.timer.start()

    def cancel(self) -> None:
        self.timer.cancel()

    def _expire(self) -> None:
        frame = sys._current_frames().get(self.main)
        line = None
        while frame is not None:
            if frame.f_code.co_filename == self.script:
                line = frame.f_lineno
                break
            frame = frame.f_back
        where = f" (line {line})" if line else ""
        print(f"studio --script: {Path(self.script).name}{where}: did not stop after its "
              f"timeout; ended", file=self.err, flush=True)
        os._exit(EXIT_TIMED_OUT)
