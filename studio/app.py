"""``studio [FILES...]``: the desktop application's entry point.

Importing this module is cheap and pulls in neither Qt nor the engine (nor torch, open3d or
ray, ever): everything heavy is imported inside ``run``, after the log is set up, and the
engine starts only once the window is on screen.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

LOG_MAX_BYTES = 2 * 1024 * 1024
LOG_BACKUPS = 3

log = logging.getLogger("studio")
FAULT_LOG = "faulthandler.log"
_fault_file: TextIO | None = None  # open for the process' life: a crash writes to it
_window = None  # the running MainWindow: ``command`` acts on it


def command(command_id: str, /, **args):
    """Run a registered command in the running window, as a script or the console does:
    ``command("routing.move_wire", net="_001_", layer="metal2", ...)``. Returns the
    command's result; raises ``studio.commands.CommandRefused`` with the reason (nothing
    changed) or ``CommandFailed``. The command log shows it as the line a script writes."""
    if _window is None:
        raise RuntimeError("Studio's window is not running: start it with studio.app.run")
    return _window.command(command_id, **args)


def main() -> None:
    """The ``studio`` gui-script."""
    raise SystemExit(run(sys.argv[1:]))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="studio", description="Run, inspect and export the methods of nineteen NeurIPS "
                                   "2026 papers on your own data.")
    parser.add_argument("files", nargs="*", metavar="FILE", help="data files to open")
    parser.add_argument("--workspace", help="workspace folder (default: the one in Settings)")
    parser.add_argument("--theme", choices=("dark", "light"), help="override the theme")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--self-test", action="store_true",
                        help="start, run a tiny job through the engine, print a JSON report "
                             "and exit (0 when it all worked): checks an installation")
    parser.add_argument("--script", metavar="FILE.py",
                        help="run a Python script against the `studio` object with no window "
                             "on screen (FILES are opened first), then exit with its status: "
                             "0, its SystemExit code, 1 when it raised (its line is printed), "
                             "124 when --timeout ran out")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="with --script: stop the script after S seconds")
    parser.add_argument("--session", metavar="FILE.studio",
                        help="open a saved session (its documents, views and runs)")
    return parser


def setup_logging(level: int = logging.INFO) -> str:
    """A rotating log file in the user's log folder (a gui-script may have no console)."""
    from logging.handlers import RotatingFileHandler

    from studio.paths import log_dir

    folder = log_dir()
    root = logging.getLogger()
    root.setLevel(level)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = RotatingFileHandler(
            folder / "studio.log", maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS,
            encoding="utf-8")
    except OSError as exc:
        handler = logging.StreamHandler(sys.stderr)
        print(f"studio: cannot write logs to {folder} ({exc}); logging to stderr",
              file=sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root.addHandler(handler)
    sys.excepthook = _log_uncaught
    return str(folder)


def enable_faulthandler(folder: str) -> str | None:
    """Python's stacks of every thread go to ``faulthandler.log`` in the log folder on a
    crash (SIGSEGV, SIGBUS, SIGABRT...), so a crash with no Python exception still says where
    it happened. Each start writes a header with its pid. faulthandler writes to one file
    only: where the log folder cannot be written it writes to stderr instead."""
    global _fault_file
    path = os.path.join(folder, FAULT_LOG)
    try:
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open until the process ends
    except OSError:
        faulthandler.enable(file=sys.stderr, all_threads=True)
        return None
    handle.write(f"--- studio pid {os.getpid()} started "
                 f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
    handle.flush()
    faulthandler.enable(file=handle, all_threads=True)
    if _fault_file is not None:
        _fault_file.close()
    _fault_file = handle
    return path


def _log_uncaught(kind, value, traceback) -> None:
    """An exception escaping a Qt slot is logged, and the window carries on."""
    log.critical("uncaught exception", exc_info=(kind, value, traceback))
    sys.__excepthook__(kind, value, traceback)


def run(argv: list[str], on_shown: Callable[[object], None] | None = None) -> int:
    """Build the application, show the window, run until it closes; returns the exit code.

    ``on_shown(window)`` is called once the window is first exposed (benchmarks use it).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.timeout is not None and (args.script is None or args.timeout <= 0):
        parser.error("--timeout S needs --script and S > 0")
    if args.version:
        from engine import __version__

        print(f"studio {__version__}")
        return 0
    folder = setup_logging()
    fault_log = enable_faulthandler(folder)
    if args.script:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # laid out as on screen, never shown
    elif fault_log is not None and sys.stderr is not None:
        print(f"studio: crash traces go to {fault_log}", file=sys.stderr)

    import asyncio

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from studio import main_thread_gc

    main_thread_gc.install(app)  # worker threads must never collect Qt wrappers
    app.setApplicationName("Studio")
    app.setOrganizationName("Studio")
    app.setApplicationDisplayName("Studio")
    app.setDesktopFileName("studio")

    import qasync

    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)

    from studio.main_window import MainWindow
    from studio.settings import Settings
    from studio.theme import apply_theme

    # Style and style sheet before any widget exists: applied later, they re-polish them all.
    theme = args.theme or Settings().theme
    apply_theme(app, theme)
    global _window
    window = MainWindow(workspace=args.workspace, log_dir=folder)
    _window = window
    if args.theme:
        window.set_theme(args.theme)
    if args.self_test:
        on_shown = _self_test
    _watch_exposed(window, on_shown)
    if args.script:
        from studio.scripting import quiet_offscreen_notices

        quiet_offscreen_notices()
    window.show()
    if args.script:  # the engine starts only if the script needs it
        QTimer.singleShot(0, lambda: _run_script_then_close(window, args))
    else:
        QTimer.singleShot(0, lambda: window.start(args.files))
        if args.session:
            QTimer.singleShot(0, lambda: _open_session(window, args.session))
    log.info("studio started (workspace %s)", window.workspace.root)
    try:
        with loop:
            loop.run_forever()
            _finish_tasks(loop)
    finally:
        _window = None
        window.shutdown()
        window.deleteLater()
        app.processEvents()
    log.info("studio closed")
    return getattr(window, "exit_code", 0)


SELF_TEST_TIMEOUT_S = 300.0


def _run_script_then_close(window, args: argparse.Namespace) -> None:
    """``--script``: run the script (after the session and FILES), close with its status."""
    from studio.scripting import run_script

    window.exit_code = run_script(window, args.script, list(args.files),
                                  timeout_s=args.timeout, session=args.session)
    window.close()


def _open_session(window, path: str) -> None:
    """``--session FILE.studio`` in the window: ``studio.sessions.open_session``, or why
    this build cannot."""
    try:
        from studio.sessions import open_session
    except ImportError:
        window.show_error("Cannot open the session", f"{path}: saved sessions are not in "
                          "this build of Studio (studio.sessions is missing)")
        return
    open_session(window, path)


def _self_test(window) -> None:
    """``--self-test``: the window is up; handshake with the engine, run ``diag.echo``."""
    import asyncio
    import json
    import time

    started = time.monotonic()
    report: dict = {"window_shown": True}

    async def check() -> None:
        await window.bridge.wait_ready(SELF_TEST_TIMEOUT_S)
        report["engine"] = window.bridge.welcome.get("engine")
        report["handshake_s"] = round(time.monotonic() - started, 2)
        job = await window.bridge.submit("diag.echo", {"message": "self-test"})
        while (record := window.bridge.jobs.get(job)) is None or record.active:
            await asyncio.sleep(0.05)
        report["job"] = {"id": job, "state": record.state, "reason": record.reason}
        report["job_s"] = round(time.monotonic() - started, 2)

    async def run_and_quit() -> None:
        try:
            await asyncio.wait_for(check(), SELF_TEST_TIMEOUT_S)
        except Exception as exc:  # the report says what failed; the exit code says that it did
            report["error"] = f"{type(exc).__name__}: {exc}"
        passed = report.get("job", {}).get("state") == "succeeded"
        report["passed"] = passed
        print(json.dumps(report), flush=True)
        window.exit_code = 0 if passed else 1
        window.close()

    asyncio.ensure_future(run_and_quit())


def _finish_tasks(loop) -> None:
    import asyncio

    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def _watch_exposed(window, on_shown: Callable[[object], None] | None) -> None:
    """Call ``on_shown(window)`` at the first Expose event of the window's native window."""
    if on_shown is None:
        return
    from PySide6.QtCore import QEvent, QObject

    class _Exposed(QObject):
        def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
            if event.type() == QEvent.Type.Expose and watched.isExposed():
                watched.removeEventFilter(self)
                on_shown(window)
            return False

    window.winId()  # creates the native window so its events can be watched
    watcher = _Exposed(window)
    window.windowHandle().installEventFilter(watcher)


if __name__ == "__main__":
    main()
