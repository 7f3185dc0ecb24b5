"""Jobs on a real local Ray head (started here on loopback, torn down after): progress,
results in the local workspace, cancel, a killed Ray worker, a parallel sweep, the server."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from engine.executors import make_executor
from engine.executors.base import KILLED_AFTER_GRACE
from engine.jobs import JobManager
from engine.workspace import Workspace
from tests.engine.conftest import connect

ray = pytest.importorskip(
    "ray", reason="the cluster extra is not installed (pip install '.[cluster]')")

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head with 4 logical CPUs (the sweep runs jobs side by side), its files in a short
    temporary folder (Ray's Unix sockets live there and their paths are limited to 107 bytes).
    A head that a fresh driver cannot join fails the tests with Ray's own words and log tails."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    started = subprocess.run(
        [ray_cli, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--temp-dir={temp}", "--num-cpus=4", "--include-dashboard=false",
         "--object-store-memory=200000000", "--disable-usage-stats"],
        env=env, capture_output=True, text=True, timeout=180)
    joined = started.returncode == 0 and subprocess.run(
        [sys.executable, "-c", "import ray, sys; from engine.executors.ray_cluster import "
         "use_cluster_token; use_cluster_token(); ray.init(address=sys.argv[1]); "
         "print(ray.cluster_resources())", address],
        env=env, capture_output=True, text=True, timeout=180)
    try:
        if not joined or joined.returncode != 0:
            pytest.fail(_head_report(started, joined, temp), pytrace=False)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        subprocess.run([ray_cli, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def _head_report(started, joined, temp: Path) -> str:
    """What went wrong starting or joining the head: command output and Ray's log tails."""
    lines = [f"ray start exit {started.returncode}: {started.stderr[-1500:]}"]
    if joined:
        lines.append(f"driver exit {joined.returncode}: {joined.stderr[-2000:]}")
    logs = sorted(temp.glob("session_*/logs/*.err")) + list(temp.glob("session_*/logs/raylet.out"))
    for log in logs:
        tail = log.read_text(errors="replace")[-600:].strip()
        if tail:
            lines.append(f"{log.name}: {tail}")
    return "\n".join(lines)


class Recorder:
    """Publishes into a list; waits for a job's terminal state."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    def __call__(self, message: dict) -> None:
        self.messages.append(message)

    def of(self, job: str, kind: str | None = None) -> list[dict]:
        return [m for m in self.messages if m["job"] == job and kind in (None, m["type"])]

    async def terminal(self, job: str, timeout_s: float = 120) -> dict:
        async def wait() -> dict:
            while True:
                for m in self.of(job, "job_state"):
                    if m["content"]["state"] in ("succeeded", "failed", "cancelled"):
                        return m["content"]
                await asyncio.sleep(0.05)

        return await asyncio.wait_for(wait(), timeout_s)


async def _with_ray(address: str, tmp_path: Path, body) -> None:
    executor = make_executor(address, cancel_grace_s=1.0)
    recorder = Recorder()
    workspace = Workspace(tmp_path / "ws")
    manager = JobManager(workspace, executor, recorder)
    await executor.start()
    try:
        await body(manager, recorder, workspace, executor)
    finally:
        await executor.stop()


def test_a_job_streams_progress_and_its_files_land_in_the_local_run_folder(ray_head, tmp_path):
    async def body(manager, recorder, workspace, executor):
        data = tmp_path / "input.bin"
        data.write_bytes(os.urandom(3 * 2**20 + 17))
        echo = manager.submit("diag.inputs", {}, {"data": str(data)})
        job = manager.submit("diag.count", {"steps": 30, "delay_s": 0.05})
        while not recorder.of(job, "job_progress"):
            assert not recorder.of(job, "job_result"), "progress only arrived with the result"
            await asyncio.sleep(0.05)
        assert (await recorder.terminal(job))["state"] == "succeeded"
        for artifact in recorder.of(job, "job_artifact"):  # fetched before it was announced
            assert (workspace.run_dir(job) / artifact["content"]["path"]).is_file()
        values = np.load(workspace.run_dir(job) / "artifacts" / "values.npy")
        assert values.shape == (30,)
        assert (workspace.run_dir(job) / "metrics.jsonl").stat().st_size > 0
        run = workspace.runs(limit=5)
        assert {r["cluster"] for r in run} == {ray_head}
        assert (await recorder.terminal(echo))["state"] == "succeeded"
        outputs = recorder.of(echo, "job_result")[0]["content"]["outputs"]
        assert outputs == {"data": data.stat().st_size}  # uploaded whole, chunk by chunk

    asyncio.run(_with_ray(ray_head, tmp_path, body))


def test_soft_cancel_and_kill_after_the_grace_period(ray_head, tmp_path):
    async def body(manager, recorder, workspace, executor):
        polite = manager.submit("diag.count", {"steps": 10_000, "delay_s": 0.05})
        stubborn = manager.submit("diag.hang", {"seconds": 600})
        for job in (polite, stubborn):
            while not recorder.of(job, "job_progress"):
                await asyncio.sleep(0.05)
            manager.cancel(job)
        assert (await recorder.terminal(polite))["state"] == "cancelled"
        ended = await recorder.terminal(stubborn)
        assert ended["state"] == "cancelled" and ended["reason"] == KILLED_AFTER_GRACE

    asyncio.run(_with_ray(ray_head, tmp_path, body))


def test_a_killed_ray_worker_fails_its_job_and_the_others_run_on(ray_head, tmp_path):
    async def body(manager, recorder, workspace, executor):
        victim = manager.submit("diag.hang", {"seconds": 600})
        sweep = [manager.submit("diag.count", {"steps": 20, "delay_s": 0.05}, seed=seed)
                 for seed in range(3)]
        while not recorder.of(victim, "job_progress"):
            await asyncio.sleep(0.05)
        actor = executor._jobs[victim].actor
        pid = await asyncio.get_running_loop().run_in_executor(
            None, ray.get, actor.pid.remote())
        os.kill(pid, signal.SIGKILL)
        ended = await recorder.terminal(victim)
        assert ended["state"] == "failed" and "ray worker died" in ended["reason"]
        started = time.monotonic()
        for job in sweep:
            assert (await recorder.terminal(job))["state"] == "succeeded"
        assert time.monotonic() - started < 60

    asyncio.run(_with_ray(ray_head, tmp_path, body))


def test_the_engine_runs_a_job_on_the_cluster_chosen_per_job(ray_head, engine_process):
    async def go():
        session = await connect(engine_process)
        try:
            local = await session.client.submit("diag.echo", {"message": "here"})
            remote = await session.client.submit("diag.echo", {"message": "there"},
                                                 cluster=ray_head)
            for job in (local, remote):
                assert (await session.wait_terminal(job, 180))["content"]["state"] == \
                    "succeeded"
            reply = await session.client.call("list_runs", {"limit": 10})
            runs = {r["id"]: r for r in reply["content"]["runs"]}
            assert runs[local]["cluster"] == "local" and runs[remote]["cluster"] == ray_head
            with pytest.raises(Exception, match="already drives the Ray cluster"):
                await session.client.submit("diag.echo", {}, cluster="127.0.0.1:1")
        finally:
            await session.client.close()

    asyncio.run(go())


def test_cli_runs_on_the_cluster(ray_head, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "engine", "run", "diag.count", "--set", "steps=5", "--json",
         "--cluster", ray_head, "--workspace", str(tmp_path / "ws")],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["state"] == "succeeded"
    assert (Path(result["run_dir"]) / "artifacts" / "values.npy").is_file()
