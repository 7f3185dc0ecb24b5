"""Garbage is collected on the Qt main thread only (studio.main_thread_gc)."""

from __future__ import annotations

import gc
import threading

from studio import main_thread_gc


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_worker_threads_never_collect_and_the_main_thread_does(qapp, qtbot) -> None:
    collector = main_thread_gc.install(qapp)
    assert main_thread_gc.install(qapp) is collector  # one per application
    assert not gc.isenabled()
    collected_on: list[str] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            collected_on.append(threading.current_thread().name)

    gc.callbacks.append(note)
    try:
        def allocate() -> None:  # far past generation 0's threshold, in a worker thread
            for _ in range(50 * collector.thresholds[0]):
                _Cycle()

        worker = threading.Thread(target=allocate, name="worker")
        worker.start()
        worker.join()
        assert "worker" not in collected_on
        assert gc.get_count()[0] > collector.thresholds[0]  # the cycles wait for the timer
        qtbot.waitUntil(lambda: threading.main_thread().name in collected_on,
                        timeout=5 * main_thread_gc.INTERVAL_MS)
        assert gc.get_count()[0] <= collector.thresholds[0]
    finally:
        gc.callbacks.remove(note)
