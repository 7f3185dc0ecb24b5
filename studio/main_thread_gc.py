"""Python's cyclic garbage collector, run only on the Qt main thread.

Left automatic, the collector runs in whichever thread happens to allocate past its threshold:
often a panel's worker thread (molecule depictions, route checks, slicing). Garbage cycles
that hold Qt wrappers (closed widgets, menus, actions) are then destroyed on that thread.
PySide hands part of the deletion back to the main thread while the worker waits for the GIL,
and the two threads wait on each other: the window freezes, or Qt's state is torn and the
process crashes. Seen here as a test stuck in ``QObject::~QObject`` on both threads (main:
``runDeletionInMainThread``, worker: ``gc_collect_main`` under a depiction loop).

``install`` turns automatic collection off and collects on a main-thread timer instead, by
the same generation thresholds the collector itself uses (as pyqtgraph's GarbageCollector).
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

INTERVAL_MS = 500


class MainThreadCollector(QObject):
    """Collects the generations whose allocation counts passed their thresholds."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.thresholds = gc.get_threshold()
        self.timer = QTimer(self)
        self.timer.setInterval(INTERVAL_MS)
        self.timer.timeout.connect(self.collect_due)
        gc.disable()
        self.timer.start()
        self.destroyed.connect(lambda *_: gc.enable())

    def collect_due(self) -> int:
        """One pass: generation 0 when due, 1 and 2 when they are due too; returns the
        number of unreachable objects found."""
        found = 0
        counts = gc.get_count()
        for generation in range(3):
            if counts[generation] <= self.thresholds[generation]:
                break
            found += gc.collect(generation)
        return found


def install(app: QCoreApplication) -> MainThreadCollector:
    """Make ``app`` the only place garbage is collected (idempotent)."""
    existing = app.findChild(MainThreadCollector)
    return existing if existing is not None else MainThreadCollector(app)
