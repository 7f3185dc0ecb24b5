"""Engine: submit-to-accepted latency, event throughput, idle memory, CLI start time."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from engine.client import EngineClient, launch_engine


def _cli_start_s(args: list[str], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def _measure(engine) -> list[dict]:
    done = asyncio.Event()
    counts = {"events": 0}
    terminal_job: dict = {}

    def on_event(message: dict) -> None:
        counts["events"] += 1
        if (message["type"] == "job_state" and message.get("job") == terminal_job.get("id")
                and message["content"]["state"] in ("succeeded", "failed", "cancelled")):
            done.set()

    client = EngineClient(on_event)
    await client.connect(engine.socket_path, engine.token, "bench")
    await asyncio.sleep(3)  # let the warm worker finish importing torch
    rss_mb = _tree_rss_mb(engine.process.pid)
    engine_only_mb = psutil.Process(engine.process.pid).memory_info().rss / 2**20

    latencies = []
    for _ in range(50):
        start = time.perf_counter()
        job = await client.submit("diag.echo", {"message": "x"})
        latencies.append(time.perf_counter() - start)
        terminal_job["id"] = job
        done.clear()
        await done.wait()

    events_offered = 200_000
    counts["events"] = 0
    start = time.perf_counter()
    job = await client.submit("diag.chatty", {"events": events_offered, "log_every": 1})
    terminal_job["id"] = job
    done.clear()
    await done.wait()
    elapsed = time.perf_counter() - start
    delivered = counts["events"]
    await client.close()
    return [
        {"name": "submit -> job_accepted latency (median)",
         "value": statistics.median(latencies) * 1e3, "unit": "ms", "target": "< 20 ms"},
        {"name": "submit -> job_accepted latency (p95)",
         "value": sorted(latencies)[int(0.95 * len(latencies))] * 1e3, "unit": "ms"},
        {"name": "chatty job: progress+log calls handled", "value": 2 * events_offered / elapsed,
         "unit": "calls/s", "reference": f"{events_offered} progress + {events_offered} logs"},
        {"name": "chatty job: events delivered to client", "value": delivered / elapsed,
         "unit": "events/s", "reference": "coalesced to ~30/s per kind"},
        {"name": "engine process idle RSS", "value": engine_only_mb, "unit": "MiB"},
        {"name": "engine + warm worker idle RSS", "value": rss_mb, "unit": "MiB",
         "reference": "worker holds torch"},
    ]


def _tree_rss_mb(pid: int) -> float:
    process = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]) / 2**20


def run() -> list[dict]:
    rows = [{"name": "`studio-engine list` wall time (median of 5)",
             "value": _cli_start_s(["list"]) * 1e3, "unit": "ms", "target": "< 1000 ms"},
            {"name": "`studio-engine --help` wall time (median of 5)",
             "value": _cli_start_s(["--help"]) * 1e3, "unit": "ms"}]
    with tempfile.TemporaryDirectory() as workspace:
        engine = launch_engine(workspace, workers=1)
        try:
            rows += asyncio.run(_measure(engine))
        finally:
            engine.kill()
    return rows
