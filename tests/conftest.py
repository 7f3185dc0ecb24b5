"""Fixtures shared by every test package: offscreen Qt, a private workspace, a real engine.

Qt is imported only inside the fixtures that need it, so engine tests run without it. Qt tests
get an asyncio loop running on Qt's (qasync, the way the app runs), so coroutines advance while
``qtbot.waitUntil`` spins the Qt event loop. Every window a test leaves open is closed and
deleted after it (see "Pitfalls already known" in ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

import pytest

# Before anything imports Qt: no display needed, and nothing written to the user's folders.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

# Property tests (edit histories): derandomized with a bounded example count under CI, so the
# suite is repeatable and fast; locally they explore fresh examples each run.
with contextlib.suppress(ImportError):
    from hypothesis import HealthCheck, settings

    _quiet = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
    settings.register_profile("ci", derandomize=True, max_examples=25, deadline=None,
                              suppress_health_check=_quiet, print_blob=True)
    settings.register_profile("dev", max_examples=40, deadline=None,
                              suppress_health_check=_quiet)
    settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """Once a test has made the QApplication, garbage is collected on its main thread only,
    as in the app (studio.main_thread_gc): a collection on a panel's worker thread that meets
    a closed widget of an earlier test deadlocks or crashes the process."""
    yield
    if "PySide6.QtWidgets" in sys.modules:
        from PySide6.QtWidgets import QApplication

        app = QApplication.instance()
        if app is not None:
            from studio import main_thread_gc

            main_thread_gc.install(app)


@pytest.fixture
def workspace_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty workspace folder, also set as ``$STUDIO_WORKSPACE`` for code that asks."""
    folder = tmp_path / "workspace"
    folder.mkdir()
    monkeypatch.setenv("STUDIO_WORKSPACE", str(folder))
    return folder


@pytest.fixture
def workspace(workspace_dir: Path):
    """The ``engine.workspace.Workspace`` over ``workspace_dir`` (torch-free)."""
    from engine.workspace import Workspace

    return Workspace(workspace_dir)


@pytest.fixture
def engine(workspace_dir: Path):
    """A real engine (``studio-engine serve``, one worker) on the test workspace.

    Yields an ``engine.client.EngineProcess`` (``socket_path``, ``token``, ``process``);
    connect with ``engine.client.EngineClient``. Killed after the test.
    """
    from engine.client import launch_engine

    process = launch_engine(workspace=str(workspace_dir), workers=1)
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def studio_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Logs and settings of the shell go to the test's folder, never the user's."""
    folder = tmp_path / "studio-home"
    folder.mkdir()
    monkeypatch.setenv("STUDIO_LOG_DIR", str(folder / "logs"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder / "config"))
    return folder


@pytest.fixture
def qasync_loop(qapp):
    """An asyncio loop on Qt's event loop, running for the whole test (as in the app).

    Tasks advance whenever Qt processes events (``qtbot.waitUntil``, ``qtbot.wait``). After
    the test, leftover tasks are cancelled and the loop is closed, so later tests (engine
    tests with ``asyncio.run``) see no running loop.
    """
    with qt_asyncio_loop(qapp) as loop:
        yield loop


@contextlib.contextmanager
def qt_asyncio_loop(qapp):
    """The loop behind ``qasync_loop``, for fixtures of a wider scope."""
    import qasync

    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        _close_windows(qapp)
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        from PySide6.QtCore import QDeadlineTimer, QEventLoop

        deadline = QDeadlineTimer(2000)
        while any(not task.done() for task in pending) and not deadline.hasExpired():
            qapp.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        # Not loop.stop(): it calls QApplication.exit(), which outside exec() leaves Qt's
        # quit flag set, so every later nested event loop (qtbot.wait) returns at once.
        loop._QEventLoop__is_running = False
        loop.close()
        asyncio.events._set_running_loop(None)
        asyncio.set_event_loop(None)


@pytest.fixture(autouse=True)
def _close_qt_windows_after_test():
    """Close and delete every top-level widget a test left (only when Qt is loaded)."""
    yield
    if "PySide6.QtWidgets" in sys.modules:
        from PySide6.QtWidgets import QApplication

        app = QApplication.instance()
        if app is not None:
            _close_windows(app)


def _close_windows(app, keep_shared: bool = True) -> None:
    """Close and delete the windows a test left: visible top-level widgets, main windows and
    dialogs. Hidden parentless helpers are left alone: pyqtgraph's plot menus own widgets
    that must not be deleted twice. A window marked ``studioShared`` (a fixture wider than one
    test) and what belongs to it are kept unless ``keep_shared`` is false."""
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QDialog, QMainWindow

    for widget in app.topLevelWidgets():
        if not (widget.isVisible() or isinstance(widget, (QMainWindow, QDialog))):
            continue
        if keep_shared and _under_shared(widget):
            if isinstance(widget, QDialog) and widget.isVisible():
                widget.close()  # a test's message box over the shared window
            continue
        widget.close()
        widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    app.processEvents()


def _under_shared(widget) -> bool:
    while widget is not None:
        if widget.property("studioShared"):
            return True
        widget = widget.parentWidget()
    return False


@pytest.fixture
def studio_settings(studio_dirs: Path):
    """A QSettings in an ini file of the test's own (the shell reads and writes only it)."""
    from PySide6.QtCore import QSettings

    return QSettings(str(studio_dirs / "studio.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def main_window(qtbot, qasync_loop, workspace_dir, studio_settings, studio_dirs):
    """The Studio main window on the test workspace, shown, its engine not started."""
    from studio.main_window import MainWindow

    window = MainWindow(settings=studio_settings, workspace=workspace_dir,
                        log_dir=studio_dirs / "logs")
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    yield window
    window.shutdown()


@pytest.fixture
def ready_window(main_window, qtbot):
    """``main_window`` with its engine started and ready (the bridge's state is "ready")."""
    main_window.start_engine()
    qtbot.waitUntil(lambda: main_window.bridge.is_ready, timeout=60_000)
    return main_window


@pytest.fixture
def host(ready_window):
    """The ``panels.api.PanelHost`` the shell gives panels, over a ready engine."""
    return ready_window.host


def close_widget(widget) -> None:
    """Close and delete now (see "Pitfalls already known" in ARCHITECTURE.md)."""
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication

    widget.close()
    widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    QApplication.processEvents()


@pytest.fixture
def make_widget(qtbot):
    """``make_widget(cls, *args)``: a widget that is closed and deleted after the test."""
    made = []

    def make(factory, *args, **kwargs):
        widget = factory(*args, **kwargs)
        made.append(widget)
        return widget

    yield make
    for widget in reversed(made):
        with contextlib.suppress(RuntimeError):  # already deleted with its parent
            close_widget(widget)

