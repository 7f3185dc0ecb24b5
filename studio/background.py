"""Work kept off the Qt main thread, for the shell and the panels alike.

Reading a big file (hashing a document, copying a checkpoint's weights) on the main thread
freezes the window for seconds. ``run_in_background`` runs such work on a pool thread and
hands its result (or its exception) back on the main thread. ``wait_responsively`` serves a
caller that needs the answer before it can go on (the undo history asking which saved edits
belong to a file): the work runs on a pool thread while the main thread keeps painting and
firing its timers; user input waits until the answer is there, so nothing the user does can
run in the middle of the caller.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from PySide6.QtCore import QCoreApplication, QEventLoop, QObject, QRunnable, QThreadPool, Signal

T = TypeVar("T")


class _Finished(QObject):
    """Lives on the main thread: its signal, emitted on a pool thread, is delivered there."""

    finished = Signal(object, object)  # result, exception (one of them is None)


class _Call(QRunnable):
    def __init__(self, work: Callable[[], Any], finished: _Finished) -> None:
        super().__init__()
        self.work, self.signals = work, finished

    def run(self) -> None:
        try:
            result = self.work()
        except Exception as exc:  # handed to the caller on the main thread, never lost here
            self.signals.finished.emit(None, exc)
            return
        self.signals.finished.emit(result, None)


_PENDING: set[_Finished] = set()  # alive until their result is delivered


def run_in_background(work: Callable[[], T], done: Callable[[T], None],
                      failed: Callable[[Exception], None],
                      pool: QThreadPool | None = None) -> None:
    """``work()`` on a pool thread; then ``done(result)`` or ``failed(exception)`` on the
    main thread (call this from the main thread)."""
    signals = _Finished()
    _PENDING.add(signals)

    def deliver(result: Any, error: Exception | None) -> None:
        _PENDING.discard(signals)
        if error is not None:
            failed(error)
        else:
            done(result)

    signals.finished.connect(deliver)
    (pool or QThreadPool.globalInstance()).start(_Call(work, signals))


@cache
def _waited_pool() -> QThreadPool:
    """The pool of work someone waits for: never queued behind the global pool's tasks."""
    return QThreadPool()


def on_main_thread() -> bool:
    """Whether this is the Qt main thread of a running application."""
    app = QCoreApplication.instance()
    return app is not None and threading.current_thread() is threading.main_thread()


def _inside_an_asyncio_task() -> bool:
    """Whether a coroutine (qasync runs them on the Qt thread) is being stepped: a local
    event loop there would let the asyncio loop try to step other tasks inside this one,
    which it refuses ("Cannot enter into task"), losing their wakeups."""
    try:
        return asyncio.current_task() is not None
    except RuntimeError:  # no running asyncio loop
        return False


def wait_responsively(work: Callable[[], T]) -> T:
    """``work()``'s result (or its exception, raised here). On the Qt main thread the work
    runs on a pool thread while a local event loop keeps painting and timers going (user
    input is held until it is done); elsewhere, and inside a coroutine's step, it simply runs
    here."""
    if not on_main_thread() or _inside_an_asyncio_task():
        return work()
    outcome: list[tuple[Any, Exception | None]] = []
    loop = QEventLoop()

    def finish(result: Any, error: Exception | None = None) -> None:
        outcome.append((result, error))
        loop.quit()

    run_in_background(work, finish, lambda error: finish(None, error), _waited_pool())
    while not outcome:
        loop.exec(QEventLoop.ProcessEventsFlag.ExcludeUserInputEvents)
    result, error = outcome[0]
    if error is not None:
        raise error
    return result
