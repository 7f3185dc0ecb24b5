"""The Python console dock: IPython in the window, on an in-process kernel whose namespace
holds ``studio`` (``studio.scripting.Studio``), the same object ``studio --script`` gives a
script, so what a user tries here can be pasted into a script or a macro.

The kernel runs each cell on the Qt main thread (jupyter's in-process client would hand it to a
thread of its own while an asyncio loop runs, where touching a widget is unsafe), under a
``ScriptGuard``: between the cell's lines the event loop keeps turning, so the window stays live
and Ctrl+C (or the dock's Interrupt button, or the ``console.interrupt`` command) stops the
cell with ``KeyboardInterrupt`` at its next line or wait.

Pinned in ``pyproject.toml``: ipykernel 6 (ipykernel 7 breaks in-process Qt consoles) with
qtconsole 5. Nothing here imports torch: the GUI never does.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDockWidget, QMainWindow, QToolBar, QVBoxLayout, QWidget

from studio.commands import Command
from studio.scripting import ScriptGuard, Studio

CONSOLE_SHORTCUT = "Ctrl+Shift+C"
BANNER = ("Studio console: `studio` is the application (studio.open(path), "
          "studio.command(id, **args), studio.commands(), studio.panel(name), "
          "studio.data(name), studio.run(method, params, inputs), studio.export(path)).\n"
          "Ctrl+C interrupts a running cell.\n")


def install_console(window: QMainWindow) -> QDockWidget:
    """Add the console dock (hidden; built the first time it is shown), its View menu entry
    "Console" and the commands ``console.show`` and ``console.interrupt``."""
    existing = getattr(window, "console_dock", None)
    if existing is not None:
        return existing
    dock = ConsoleDock(window)
    window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, dock)
    runs = getattr(window, "runs_dock_widget", None)
    if runs is not None:
        window.tabifyDockWidget(runs, dock)
    dock.hide()
    window.console_dock = dock
    registry = window.commands
    registry.add(Command("console.show", "Show the Python console",
                         "The IPython console with `studio` in its namespace.",
                         lambda target, _args: target.show_console(), None,
                         shortcut=CONSOLE_SHORTCUT, menu="View/Console"), replace=True)
    registry.add(Command("console.interrupt", "Interrupt the console",
                         "Stop the cell running in the console (KeyboardInterrupt).",
                         lambda target, _args: target.interrupt(), None,
                         menu="View/Interrupt the console"), replace=True)
    registry.bind("console", dock)
    from studio.command_widgets import command_action

    dock.show_action = command_action(window, registry, "console.show", "Console")
    dock.interrupt_action.setProperty("studioCommand", "console.interrupt")
    view_menu = _menu(window, "View")
    if view_menu is not None:
        view_menu.addAction(dock.show_action)
    return dock


def install_scripting(window: QMainWindow) -> QDockWidget:
    """What the window offers scripting in one call: the console dock (``install_console``)
    and Record / Stop / Save… / Replay… under the command log (``studio.macros``)."""
    from studio.macros import install_macro_controls

    dock = install_console(window)
    if getattr(window, "command_log", None) is not None:
        install_macro_controls(window)
    return dock


def _menu(window: QMainWindow, title: str):
    for action in window.menuBar().actions():
        if action.menu() is not None and action.text().replace("&", "") == title:
            return action.menu()
    return None


class ConsoleDock(QDockWidget):
    """The dock; the console (and its kernel) is made when the dock is first shown."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__("Console", window)
        self.setObjectName("consoleDock")
        self.window_ = window
        self.console: Any = None   # the StudioConsole, once built
        holder = QWidget()
        self.column = QVBoxLayout(holder)
        self.column.setContentsMargins(0, 0, 0, 0)
        bar = QToolBar()
        self.interrupt_action = QAction("Interrupt", self)
        self.interrupt_action.setToolTip("Stop the running cell (Ctrl+C in the console)")
        self.interrupt_action.setProperty("studioCommand", "console.interrupt")
        self.interrupt_action.setEnabled(False)
        self.interrupt_action.triggered.connect(lambda _checked=False: self.interrupt())
        bar.addAction(self.interrupt_action)
        self.column.addWidget(bar)
        self.setWidget(holder)
        self.visibilityChanged.connect(lambda shown: self.build() if shown else None)

    def build(self) -> Any:
        if self.console is None:
            self.console = StudioConsole(self.window_)
            self.console.guard.on_running = self._running
            self.column.addWidget(self.console, 1)
            self.window_.destroyed.connect(self.console.shutdown_kernel)
        return self.console

    def _running(self, running: bool) -> None:
        self.interrupt_action.setEnabled(running)

    def show_console(self) -> Any:
        self.show()
        self.raise_()
        console = self.build()
        console.setFocus()
        return console

    def interrupt(self) -> bool:
        """Stop the running cell; ``False`` when none runs."""
        if self.console is None or not self.console.guard.running:
            return False
        self.console.guard.interrupt()
        return True


def _console_classes() -> tuple[type, type, type]:
    """qtconsole's classes, imported on first use (half a second of imports at start-up
    otherwise). qtpy must pick PySide6, the binding the window uses."""
    os.environ.setdefault("QT_API", "pyside6")
    from qtconsole.inprocess import (
        QtInProcessKernelClient,
        QtInProcessKernelManager,
        QtInProcessRichJupyterWidget,
    )

    return QtInProcessKernelClient, QtInProcessKernelManager, QtInProcessRichJupyterWidget


def _make_console_type() -> type:
    client_type, manager_type, widget_type = _console_classes()

    class MainThreadClient(client_type):
        """Runs each request of the console on the main thread, under the console's guard."""

        guard: ScriptGuard | None = None

        def _dispatch_to_kernel(self, msg: dict) -> None:
            kernel = self.kernel
            if kernel is None:
                raise RuntimeError("the console's kernel is not running")
            if self.guard is not None and self.guard.running:
                return  # a completion asked for while a cell runs: never inside the cell
            stream = kernel.shell_stream
            self.session.send(stream, msg)
            parts = stream.recv_multipart()
            if self.guard is not None and msg["header"]["msg_type"] == "execute_request":
                with self.guard.guarding():
                    _drive(kernel.dispatch_shell(parts))
            else:
                _drive(kernel.dispatch_shell(parts))
            _idents, reply = self.session.recv(stream, copy=False)
            self.shell_channel.call_handlers_later(reply)

    class Manager(manager_type):
        client_class = __name__ + "._ConsoleClient"

    class Console(widget_type):
        """qtconsole's rich widget on an in-process kernel, ``studio`` in its namespace."""

        def __init__(self, window: QMainWindow, parent: QWidget | None = None) -> None:
            super().__init__(parent)
            from ipykernel.compiler import get_tmp_directory

            cells = get_tmp_directory() + os.sep
            self.guard = ScriptGuard(lambda code: code.co_filename.startswith(cells))
            self.studio = Studio(window, self.guard)
            self.banner = BANNER
            from PySide6.QtWidgets import QApplication

            if QApplication.instance().property("studioTheme") == "dark":
                self.set_default_style("linux")   # qtconsole's light-on-dark colours
            self.custom_interrupt = True       # no process to signal: the guard stops cells
            self.custom_interrupt_requested.connect(self.guard.interrupt)
            manager = Manager()
            manager.start_kernel(show_banner=False)
            manager.kernel.gui = "qt"
            manager.kernel.shell.push({"studio": self.studio})
            client = manager.client()
            client.guard = self.guard
            client.start_channels()
            self.kernel_manager, self.kernel_client = manager, client
            self.setObjectName("studioConsole")

        def execute_source(self, source: str) -> None:
            """Run ``source`` as if typed at the prompt (tests, a macro's replay)."""
            self.execute(source, hidden=False)

        def shutdown_kernel(self, *_args: Any) -> None:
            client, manager = self.kernel_client, self.kernel_manager
            if client is not None:
                with contextlib.suppress(RuntimeError):  # the channels went with the widget
                    client.stop_channels()
            if manager is not None and manager.has_kernel:
                manager.shutdown_kernel()

    globals()["_ConsoleClient"] = MainThreadClient
    return Console


_CONSOLE_TYPE: type | None = None


def StudioConsole(window: QMainWindow, parent: QWidget | None = None) -> Any:  # noqa: N802
    """The console widget (its class is made on first use, after qtconsole's import)."""
    global _CONSOLE_TYPE
    if _CONSOLE_TYPE is None:
        _CONSOLE_TYPE = _make_console_type()
    return _CONSOLE_TYPE(window, parent)


def _drive(coroutine: Any) -> Any:
    """Run a coroutine to its end here, on this thread, without an asyncio task: what it
    awaits is waited for with a local Qt event loop (qasync futures advance meanwhile)."""
    from PySide6.QtCore import QEventLoop

    try:
        while True:
            awaited = coroutine.send(None)
            if awaited is None:
                continue
            local = QEventLoop()
            awaited.add_done_callback(lambda _done, loop=local: loop.quit())
            while not awaited.done():
                local.exec()
    except StopIteration as finished:
        return finished.value
