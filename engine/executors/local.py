"""The default executor: a pool of warm worker processes on this machine.

One worker per spare core (one on two cores). A crash, an out-of-memory kill or a hard cancel
takes down one worker and fails (or cancels) one job; a fresh worker replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import traceback
from collections import deque
from dataclasses import dataclass, field

from engine import protocol
from engine.commands import python_module
from engine.executors.base import (
    KILLED_AFTER_GRACE,
    EventSink,
    Executor,
    JobRequest,
    done_event,
)

log = logging.getLogger("studio.engine")

DEFAULT_CANCEL_GRACE_S = 5.0
WORKER_START_TIMEOUT_S = 120.0
# A job accepted before a worker can take it says why it is queued (the engine answers and
# accepts jobs while its warm workers are still importing torch).
WAITING_FOR_START = "waiting for a worker: starting up"
WAITING_FOR_FREE = "waiting for a worker: all are busy"


def default_worker_count() -> int:
    return max(1, (os.cpu_count() or 2) - 1)


@dataclass
class _Worker:
    process: subprocess.Popen
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    job: JobRequest | None = None
    sink: EventSink | None = None
    cancel_deadline: asyncio.TimerHandle | None = None
    killed_for_cancel: bool = False
    replies: dict[str, asyncio.Future] = field(default_factory=dict)


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, workers: int | None = None, threads_per_worker: int | None = None,
                 cancel_grace_s: float = DEFAULT_CANCEL_GRACE_S, warm: bool = False) -> None:
        self.worker_count = workers or default_worker_count()
        self.threads = threads_per_worker or max(1, (os.cpu_count() or 2) - 1)
        self.cancel_grace_s = cancel_grace_s
        self.warm = warm
        self._workers: list[_Worker] = []
        self._queue: deque[tuple[JobRequest, EventSink]] = deque()
        self._interactive: _Worker | None = None
        self._stopping = False
        self._tasks: set[asyncio.Task] = set()

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        for _ in range(self.worker_count):
            self._workers.append(await self._spawn())

    async def stop(self) -> None:
        self._stopping = True
        everyone = [*self._workers, *([self._interactive] if self._interactive else [])]
        for worker in everyone:
            if worker.job is not None and worker.sink is not None:
                _deliver(worker.sink, done_event("failed", "engine shut down"))
                worker.job = None
            with contextlib.suppress(Exception):
                worker.writer.close()
            _kill(worker.process)
        for worker in everyone:
            await asyncio.get_running_loop().run_in_executor(None, worker.process.wait)
        for _request, sink in self._queue:
            _deliver(sink, done_event("failed", "engine shut down"))
        self._queue.clear()
        for task in list(self._tasks):
            task.cancel()

    @property
    def devices(self) -> list[str]:
        return self._workers[0].devices if self._workers else ["cpu"]

    def describe(self) -> str:
        return f"local ({self.worker_count} worker(s), {self.threads} thread(s) each)"

    async def wait_ready(self, timeout_s: float = WORKER_START_TIMEOUT_S) -> None:
        await asyncio.wait_for(asyncio.gather(*(w.ready.wait() for w in self._workers)), timeout_s)

    async def _spawn(self) -> _Worker:
        parent_sock, child_sock = socket.socketpair()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            [*python_module("engine.worker"), "--fd", str(child_sock.fileno()),
             "--threads", str(self.threads), *(["--warm"] if self.warm else [])],
            pass_fds=(child_sock.fileno(),), env=env, stdin=subprocess.DEVNULL)
        child_sock.close()
        reader, writer = await asyncio.open_unix_connection(
            sock=parent_sock, limit=protocol.MAX_FRAME_BYTES + 16)
        worker = _Worker(process, reader, writer)
        self._track(asyncio.create_task(self._read_worker(worker)))
        return worker

    def _track(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_task_failure)

    # -- jobs ------------------------------------------------------------------------------
    def submit(self, request: JobRequest, on_event: EventSink) -> None:
        """Queue a job. It waits as long as it takes: a worker that dies while starting is
        replaced and the job stays queued."""
        self._queue.append((request, on_event))
        self._dispatch()

    def wait_reason(self) -> str:
        """Why a job submitted now would wait in the queue; "" when a worker takes it at once."""
        ready = [worker for worker in self._workers if worker.ready.is_set()]
        if not ready:
            return WAITING_FOR_START
        if self._queue or all(worker.job is not None for worker in ready):
            return WAITING_FOR_FREE
        return ""

    def _dispatch(self) -> None:
        """Hand queued jobs to idle workers; a job that cannot be sent fails, alone."""
        for worker in self._workers:
            while self._queue and worker.job is None and worker.ready.is_set():
                request, sink = self._queue.popleft()
                try:
                    frame = protocol.encode({"type": "run", "job": request.to_message()})
                except Exception as exc:  # e.g. text that is not UTF-8, an oversized job
                    _deliver(sink, done_event(
                        "failed", f"the job could not be sent to a worker "
                                  f"({type(exc).__name__}: {exc})"))
                    continue
                worker.job, worker.sink, worker.killed_for_cancel = request, sink, False
                worker.writer.write(frame)

    def cancel(self, job_id: str, hard: bool = False) -> bool:
        for index, (request, sink) in enumerate(self._queue):
            if request.id == job_id:
                del self._queue[index]
                _deliver(sink, done_event("cancelled", "cancelled while queued"))
                return True
        worker = next((w for w in self._workers if w.job and w.job.id == job_id), None)
        if worker is None:
            return False
        if hard:
            self._kill_for_cancel(worker)
            return True
        worker.writer.write(protocol.encode({"type": "cancel", "job": job_id}))
        if worker.cancel_deadline is None:
            loop = asyncio.get_running_loop()
            worker.cancel_deadline = loop.call_later(
                self.cancel_grace_s, self._kill_for_cancel, worker, job_id)
        return True

    def _kill_for_cancel(self, worker: _Worker, job_id: str | None = None) -> None:
        if worker.job is None or (job_id is not None and worker.job.id != job_id):
            return
        worker.killed_for_cancel = True
        _kill(worker.process)

    async def _read_worker(self, worker: _Worker) -> None:
        """Relay a worker's events until it exits. Never dies silently: an error handling a
        message fails that worker's job and replaces the worker, so no caller waits forever."""
        try:
            while True:
                message = await protocol.read_message(worker.reader)
                try:
                    self._on_worker_message(worker, message)
                except Exception as exc:
                    log.exception("error handling a message of worker %d", worker.process.pid)
                    self._fail_job(worker, f"engine error while running the job "
                                           f"({type(exc).__name__}: {exc})",
                                   traceback.format_exc())
                    _kill(worker.process)
                    break
        except (asyncio.IncompleteReadError, ConnectionError, protocol.ProtocolError):
            pass
        try:
            await self._on_worker_exit(worker)
        except Exception as exc:  # e.g. no replacement worker could be started
            log.exception("worker %d exited and could not be replaced", worker.process.pid)
            self._fail_job(worker, f"worker could not be replaced ({type(exc).__name__}: {exc})")

    def _fail_job(self, worker: _Worker, reason: str, trace: str = "") -> None:
        """End the worker's job (if any) as failed with ``reason``."""
        if worker.job is not None and worker.sink is not None:
            event = done_event("failed", reason)
            if trace:
                event["content"]["traceback"] = trace
            _deliver(worker.sink, event)
        self._finish(worker)

    def _on_worker_message(self, worker: _Worker, message: dict) -> None:
        kind = message["type"]
        if kind == "ready":
            worker.devices = message.get("devices", ["cpu"])
            worker.ready.set()
            self._dispatch()
            return
        if kind == "reply":
            future = worker.replies.pop(message.get("id", ""), None)
            if future and not future.done():
                future.set_result(message)
            return
        if worker.job is None or message.get("job") != worker.job.id or worker.sink is None:
            return  # a late event from a job that already ended
        worker.sink(message)
        if kind == "done":
            self._finish(worker)
            self._dispatch()

    def _finish(self, worker: _Worker) -> None:
        if worker.cancel_deadline is not None:
            worker.cancel_deadline.cancel()
            worker.cancel_deadline = None
        worker.job, worker.sink = None, None

    async def _on_worker_exit(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        code = await loop.run_in_executor(None, worker.process.wait)
        for future in worker.replies.values():
            if not future.done():
                future.set_exception(RuntimeError(f"worker exited ({_describe_exit(code)})"))
        if worker.job is not None and worker.sink is not None:
            if worker.killed_for_cancel:
                event = done_event("cancelled", KILLED_AFTER_GRACE)
            else:
                event = done_event("failed", f"worker process died ({_describe_exit(code)})")
            _deliver(worker.sink, event)
        self._finish(worker)
        if self._stopping:
            return
        if worker is self._interactive:
            self._interactive = None
            return
        index = self._workers.index(worker)
        self._workers[index] = await self._spawn()

    # -- interactive requests ----------------------------------------------------------------
    async def request(self, name: str, args: dict) -> dict:
        """Served by a separate warm worker, so a long job does not block interactive calls."""
        if self._interactive is None:
            self._interactive = await self._spawn()
        worker = self._interactive
        await asyncio.wait_for(worker.ready.wait(), WORKER_START_TIMEOUT_S)
        request_id = protocol.new_id()
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        worker.replies[request_id] = future
        worker.writer.write(protocol.encode(
            {"type": "request", "id": request_id, "name": name, "args": args}))
        reply = await future
        if "error" in reply:
            raise RequestFailed(reply["error"])
        return reply.get("content", {})


class RequestFailed(Exception):
    def __init__(self, error: dict) -> None:
        super().__init__(error.get("message", "request failed"))
        self.error = error


def _deliver(sink: EventSink, event: dict) -> None:
    """Give a terminal event to a job's sink; a sink that fails is logged, never propagated
    (the caller is ending a job and must go on)."""
    try:
        sink(event)
    except Exception:
        log.exception("a job's event handler failed on its final event")


def _log_task_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("executor task failed", exc_info=task.exception())


def _kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
