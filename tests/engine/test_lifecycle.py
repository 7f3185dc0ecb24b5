"""The engine's own life: nothing outlives it, and a new engine fails the runs of a dead one."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import psutil

from engine.client import launch_engine
from engine.workspace import Workspace
from tests.engine.conftest import connect


def _wait_gone(pids: list[int], timeout_s: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    return alive


def test_killed_engine_leaves_no_workers_and_its_runs_fail_on_restart(tmp_path):
    engine = launch_engine(str(tmp_path), workers=1)

    async def start_long_job() -> str:
        session = await connect(engine)
        job = await session.client.submit("diag.count", {"steps": 10_000, "delay_s": 0.01})
        await session.wait_state(job, {"running"})
        return job

    job = asyncio.run(start_long_job())
    workers = [p.pid for p in psutil.Process(engine.process.pid).children(recursive=True)]
    assert workers
    engine.process.send_signal(signal.SIGKILL)
    engine.process.wait()
    assert _wait_gone(workers) == []
    assert Workspace(tmp_path).run(job)["state"] == "running"  # nobody has noticed yet

    second = launch_engine(str(tmp_path), workers=1)
    try:
        record = Workspace(tmp_path).run(job)
        assert record["state"] == "failed" and record["reason"] == "engine died"
    finally:
        second.kill()


def test_engine_exits_when_its_parent_dies(tmp_path):
    """A GUI killed with SIGKILL must not leave its engine behind (--watch-parent)."""
    script = (
        "import sys, time\n"
        "from engine.client import launch_engine\n"
        f"e = launch_engine({str(tmp_path)!r}, workers=1)\n"
        "print(e.process.pid, flush=True)\n"
        "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    engine_pid = int(parent.stdout.readline())
    assert psutil.pid_exists(engine_pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert _wait_gone([engine_pid]) == []


def test_shutdown_request_stops_the_engine(tmp_path):
    engine = launch_engine(str(tmp_path), workers=1)

    async def scenario():
        session = await connect(engine)
        job = await session.client.submit("diag.count", {"steps": 10_000, "delay_s": 0.01})
        await session.wait_state(job, {"running"})
        await session.client.call("shutdown")
        final = await session.wait_terminal(job, timeout_s=15)
        assert final["content"]["reason"] == "engine shut down"

    asyncio.run(scenario())
    assert engine.process.wait(timeout=15) == 0
    assert not os.path.exists(engine.socket_path)
