"""Slicing off the main thread: one worker thread, the newest request of each kind wins.

Scrubbing a slider asks for a redraw per pixel of travel; only the latest matters, so a
request replaces any still waiting of its kind and stale ones are never computed (napari's
request/response slicing, in a few lines). Results come back to the Qt thread as a signal.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

PRIORITY = ("slices", "timecourse", "volume3d", "rois")  # a redraw goes before slower analyses


class Slicer(QObject):
    """``submit(kind, job)`` runs ``job()`` on the worker; ``finished(kind, result, error)``
    arrives on the thread that made the Slicer (the main thread)."""

    finished = Signal(str, object, object)
    _computed = Signal(str, object, object)  # worker -> main thread, checked there

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pending: dict[str, Callable[[], Any]] = {}
        self._wake = threading.Condition()
        self._stopped = False
        self.computed = 0      # jobs run (tests compare it with the requests made)
        self.busy = False
        self._computed.connect(self._deliver)
        self._thread = threading.Thread(target=self._loop, daemon=True, name="fmri slicer")
        self._thread.start()

    def submit(self, kind: str, job: Callable[[], Any]) -> None:
        with self._wake:
            self._pending[kind] = job
            self._wake.notify()

    def idle(self) -> bool:
        with self._wake:
            return not self._pending and not self.busy

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return
                kind = next(k for k in (*PRIORITY, *self._pending) if k in self._pending)
                job = self._pending.pop(kind)
                self.busy = True
            try:
                result, error = job(), None
            except Exception as exc:  # reported on the main thread, never lost
                result, error = None, exc
            self.computed += 1
            with self._wake:
                self.busy = False
            if not self._stopped:
                self._computed.emit(kind, result, error)

    def _deliver(self, kind: str, result: Any, error: Any) -> None:
        """On the main thread: a result queued before ``stop`` never reaches a closed view."""
        if not self._stopped:
            self.finished.emit(kind, result, error)

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._pending.clear()
            self._wake.notify()
        self._thread.join(timeout=10)
