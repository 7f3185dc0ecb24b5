"""The engine answers and accepts jobs before its warm worker has imported torch: the first job
waits for the worker, says so in its state, and is not failed by the wait."""

from __future__ import annotations

import asyncio
import time

import pytest

from engine.executors.base import JobRequest
from engine.executors.local import WAITING_FOR_FREE, WAITING_FOR_START, LocalExecutor
from tests.engine.conftest import connect

TERMINAL = {"succeeded", "failed", "cancelled"}


def _request(tmp_path, job_id: str, method: str = "diag.echo", params: dict | None = None
             ) -> JobRequest:
    return JobRequest(id=job_id, method=method, params=params or {}, inputs={}, seed=0,
                      output_dir=str(tmp_path / job_id), cache_root=str(tmp_path / "cache"))


class _Recorder:
    """A job's events, and an awaitable for its end."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.done = asyncio.Event()

    def __call__(self, event: dict) -> None:
        self.events.append(event)
        if event["type"] == "done":
            self.done.set()

    def final_state(self) -> str:
        return next(e["content"]["state"] for e in self.events if e["type"] == "done")


def test_a_job_submitted_while_the_worker_starts_waits_and_survives_its_death(tmp_path):
    asyncio.run(_a_job_submitted_while_the_worker_starts_waits_and_survives_its_death(tmp_path))


async def _a_job_submitted_while_the_worker_starts_waits_and_survives_its_death(tmp_path) -> None:
    """The worker dies while starting (e.g. killed during its torch import): the job waits for
    its replacement and succeeds."""
    executor = LocalExecutor(workers=1, warm=True)
    await executor.start()
    try:
        recorder = _Recorder()
        assert executor.wait_reason() == WAITING_FOR_START
        executor.submit(_request(tmp_path, "first"), recorder)
        first_worker = executor._workers[0].process
        first_worker.kill()
        await asyncio.wait_for(recorder.done.wait(), 120)
        assert recorder.final_state() == "succeeded"
        assert executor._workers[0].process.pid != first_worker.pid
    finally:
        await executor.stop()


def test_a_job_behind_a_busy_worker_says_the_workers_are_busy(tmp_path):
    asyncio.run(_a_job_behind_a_busy_worker_says_the_workers_are_busy(tmp_path))


async def _a_job_behind_a_busy_worker_says_the_workers_are_busy(tmp_path) -> None:
    executor = LocalExecutor(workers=1)
    await executor.start()
    try:
        await executor.wait_ready()
        busy, queued = _Recorder(), _Recorder()
        assert executor.wait_reason() == ""
        slow = _request(tmp_path, "busy", "diag.count", {"steps": 3, "delay_s": 0.2})
        executor.submit(slow, busy)
        assert executor.wait_reason() == WAITING_FOR_FREE
        executor.submit(_request(tmp_path, "queued"), queued)
        await asyncio.wait_for(queued.done.wait(), 60)
        assert busy.final_state() == queued.final_state() == "succeeded"
    finally:
        await executor.stop()


@pytest.fixture
def fresh_engine(tmp_path):
    from engine.client import launch_engine

    process = launch_engine(str(tmp_path / "workspace"), workers=1)
    yield process
    process.kill()


def test_the_engine_accepts_a_job_before_its_worker_is_ready(fresh_engine):
    asyncio.run(_the_engine_accepts_a_job_before_its_worker_is_ready(fresh_engine))


async def _the_engine_accepts_a_job_before_its_worker_is_ready(fresh_engine) -> None:
    """Connected and submitted at once: the run is accepted, queued "waiting for a worker",
    then runs and succeeds."""
    started = time.perf_counter()
    session = await connect(fresh_engine)
    try:
        job_id = await session.client.submit("diag.echo", {"message": "first"})
        accepted_s = time.perf_counter() - started
        end = await session.wait_terminal(job_id, timeout_s=120)
        assert end["content"]["state"] == "succeeded"
        queued = next(e["content"] for e in session.for_job(job_id) if e["type"] == "job_state")
        assert queued == {"state": "queued", "reason": WAITING_FOR_START}, accepted_s
        assert session.states(job_id) == ["queued", "running", "succeeded"]
    finally:
        await session.client.close()


def test_a_warm_worker_whose_engine_is_gone_exits_without_finishing_its_torch_import():
    """The engine closes its end while the worker imports torch: the worker exits at once
    (import timing shows torch's import never completed), it does not import for nobody."""
    import os
    import socket
    import subprocess
    import sys

    ours, theirs = socket.socketpair()
    worker = subprocess.Popen(
        [sys.executable, "-m", "engine.worker", "--fd", str(theirs.fileno()), "--warm"],
        pass_fds=(theirs.fileno(),), stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    theirs.close()
    while True:  # wait until the worker has started its import of torch
        line = worker.stderr.readline()
        assert line, "the worker exited before importing anything"
        if line.rstrip().endswith("| engine.protocol"):
            break
    ours.close()
    assert worker.wait(timeout=60) == 0
    finished = [ln for ln in worker.stderr.read().splitlines() if ln.rstrip().endswith("| torch")]
    assert finished == [], "torch was imported to the end although the engine was gone"
