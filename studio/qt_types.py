"""PySide6's Python types made on the main thread, before a worker thread may import Qt code.

PySide6 (6.7 on) creates the Python type of a Qt class lazily, on its first access, and that
creation is not thread-safe: two threads reaching types not made yet can crash the process
(SIGSEGV, no Python exception). The GUI benchmark's idle child died that way: pyqtgraph's
import, which reads every attribute of QtCore, QtGui and QtWidgets (``pyqtgraph.Qt._copy_attrs``),
ran on the prewarm thread while the main thread drew. ``resolve_then`` makes every type of those
modules on the main thread, a few per turn of the event loop so the window never stalls, and
then calls ``then`` (which starts the worker).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

# pyqtgraph's walk reads the first three; the rest are the Qt modules the panels' imports load
MODULES = ("PySide6.QtCore", "PySide6.QtGui", "PySide6.QtWidgets", "PySide6.QtOpenGL",
           "PySide6.QtOpenGLWidgets", "PySide6.QtSvg", "PySide6.QtTest")
NAMES_PER_TURN = 40  # a few milliseconds of the main thread per turn


def resolve_then(then: Callable[[], None]) -> None:
    """Make every type of ``MODULES`` (main thread, spread over event-loop turns), then call
    ``then``. Call it from the main thread, with the Qt event loop running."""
    from PySide6.QtCore import QTimer

    pending = [(module, name) for module in map(importlib.import_module, MODULES)
               for name in dir(module)]

    def turn() -> None:
        batch = pending[-NAMES_PER_TURN:]
        del pending[-NAMES_PER_TURN:]
        for module, name in batch:
            getattr(module, name)
        if pending:
            QTimer.singleShot(0, turn)
        else:
            then()

    turn()
