"""Design-wide checks off the Qt main thread: one daemon thread, the newest request wins.

The statistics table wants every net's connectivity and shorts (about 1.5 s of numpy on gcd);
the worker computes them on a snapshot of the design (edits replace arrays, never mutate
them) and hands the result back to the main thread as a Qt signal.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal


class Worker(QObject):
    """``submit(job)`` runs ``job()`` on the thread; ``finished(result, error)`` arrives on
    the main thread. A job submitted while one waits replaces it."""

    finished = Signal(object, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pending: Callable[[], Any] | None = None
        self._wake = threading.Condition()
        self._stopped = False
        self.busy = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="routing checks")
        self._thread.start()

    def submit(self, job: Callable[[], Any]) -> None:
        with self._wake:
            self._pending = job
            self._wake.notify()

    def idle(self) -> bool:
        with self._wake:
            return self._pending is None and not self.busy

    def stopped(self) -> bool:
        """True once ``stop`` was called (long jobs check it and return early)."""
        return self._stopped

    def stop(self, wait_s: float = 2.0) -> None:
        """No more jobs; waits (a little) for the running one to end."""
        with self._wake:
            self._stopped = True
            self._pending = None
            self._wake.notify()
        self._thread.join(wait_s)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while self._pending is None and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return
                job, self._pending = self._pending, None
                self.busy = True
            try:
                result, error = job(), None
            except Exception as exc:  # reported on the main thread, never lost
                result, error = None, exc
            with self._wake:
                self.busy = False
                if self._stopped:
                    return
            try:
                self.finished.emit(result, error)
            except RuntimeError:  # the panel was deleted meanwhile
                return
