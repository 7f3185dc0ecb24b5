"""The console dock: IPython on an in-process kernel with ``studio`` in its namespace, cells on
the main thread with the window live, Ctrl+C / Interrupt stopping a running cell."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("qtconsole")

from studio.console import install_console, install_scripting  # noqa: E402


def _text(console) -> str:
    return console._control.toPlainText()


def _at_prompt(console) -> bool:
    return not console._executing and _text(console).rstrip().endswith("]:")


def _run_cell(qtbot, console, source: str, expect: str, timeout_ms: int = 20_000) -> str:
    """Run a cell once the console shows its prompt (as a user can only then), wait for
    ``expect`` in the output and for the next prompt."""
    qtbot.waitUntil(lambda: _at_prompt(console), timeout=timeout_ms)
    console.execute_source(source)
    qtbot.waitUntil(lambda: expect in _text(console) and _at_prompt(console),
                    timeout=timeout_ms)
    return _text(console)


def test_console_has_studio_and_runs_cells_on_the_main_thread(main_window, qtbot):
    torch_before = "torch" in sys.modules  # an engine test in the same process may load it
    dock = install_console(main_window)
    assert install_console(main_window) is dock   # once per window
    main_window.command("console.show")
    console = dock.console
    assert dock.isVisible() and console is not None
    text = _run_cell(qtbot, console, "import threading; print('main:', "
                     "threading.current_thread() is threading.main_thread(), "
                     "type(studio).__name__)", "main: True Studio")
    assert "Error" not in text
    _run_cell(qtbot, console, "print('ids', len(studio.commands()) > 0)", "ids True")
    assert ("torch" in sys.modules) == torch_before  # the console and its cells load none


def test_ctrl_c_interrupts_a_running_cell_and_the_window_stays_live(main_window, qtbot):
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtTest import QTest

    dock = install_console(main_window)
    console = dock.show_console()
    _run_cell(qtbot, console, "print('ready')", "ready")
    enabled_while_running = []
    ticks = []
    clock = QTimer()
    clock.timeout.connect(lambda: ticks.append(1))
    clock.start(20)
    # the key press arrives while the cell loops: only a live event loop can deliver it
    QTimer.singleShot(300, lambda: enabled_while_running.append(
        dock.interrupt_action.isEnabled()))
    QTimer.singleShot(600, lambda: QTest.keyClick(console._control, Qt.Key.Key_C,
                                                  Qt.KeyboardModifier.ControlModifier))
    console.execute_source("n = 0\nwhile True:\n    n += 1")
    clock.stop()
    qtbot.waitUntil(lambda: "KeyboardInterrupt" in _text(console), timeout=10_000)
    assert len(ticks) >= 10, "the window froze while the cell ran"
    assert enabled_while_running == [True] and not dock.interrupt_action.isEnabled()
    # the console goes on: the variable the loop grew is there, a new cell runs
    _run_cell(qtbot, console, "print('after', n > 0)", "after True")


def test_interrupt_command_stops_a_cell_waiting_on_studio(main_window, qtbot):
    from PySide6.QtCore import QTimer

    dock = install_console(main_window)
    console = dock.show_console()
    _run_cell(qtbot, console, "print('ready')", "ready")
    assert main_window.command("console.interrupt") is False   # nothing runs
    QTimer.singleShot(500, lambda: main_window.command("console.interrupt"))
    console.execute_source("studio.wait(60)")
    qtbot.waitUntil(lambda: "KeyboardInterrupt" in _text(console), timeout=10_000)


def test_one_call_installs_the_console_and_the_macro_controls(main_window):
    dock = install_scripting(main_window)
    assert main_window.console_dock is dock and main_window.macro_recorder is not None
    view = next(action.menu() for action in main_window.menuBar().actions()
                if action.text().replace("&", "") == "View")
    entry = next(action for action in view.actions() if action.text() == "Console")
    assert entry.property("studioCommand") == "console.show"
    assert not dock.isVisible() and dock.console is None   # built when first shown
    entry.trigger()
    assert dock.isVisible() and dock.console is not None
