"""Ready to work: launch to engine ready, ``studio-engine list``, and a tiny job end to end.

Whole processes, medians of ``REPEATS``, on throwaway workspaces:

- launch to engine ready: from starting ``studio-engine serve`` (as the GUI does) to its
  ``hello`` answered, the methods listed, and a first job (``diag.echo``) accepted: the engine
  accepts it while its warm worker is still importing torch (the job waits, queued "waiting
  for a worker"). The engine's own memory is read after listing, before any job.
- ``studio-engine list``: from the cached method descriptions (no method module imported),
  and once after the cache is gone (what the first listing after a method file changed pays).
- ``eos.train`` with 50 steps from ``studio-engine run`` to its result, and the share of it
  spent importing: ``PYTHONPROFILEIMPORTTIME`` in a second set of runs, summing the top-level
  imports of the CLI and its worker process, divided by those runs' own wall time.

The machine's load average is reported with the numbers (other work inflates them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 5
TINY_JOB = ["eos.train", "--set", "steps=50"]
_TOP_LEVEL_IMPORT = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| (\S.*)$")


def run() -> list[dict]:
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="studio-bench-startup-") as tmp:
        env = {**os.environ, "STUDIO_CACHE_DIR": str(Path(tmp) / "cache")}
        _engine_cli(["list"], env)  # the listing cache, as any earlier use leaves it
        ready = [asyncio.run(_launch_to_ready(Path(tmp) / f"ws{i}", env))
                 for i in range(REPEATS)]
        cpu_before = _children_cpu_s()
        listing = [_timed(["list"], env) for _ in range(REPEATS)]
        listing_cpu = (_children_cpu_s() - cpu_before) / REPEATS
        uncached = _timed(["list"], {**env, "STUDIO_CACHE_DIR": str(Path(tmp) / "empty")})
        job_args = [*TINY_JOB, "--workspace", str(Path(tmp) / "jobs"), "--json"]
        tiny = [_timed(["run", *job_args], env) for _ in range(REPEATS)]
        shares = [_import_share(["run", *job_args], env) for _ in range(REPEATS)]
    accepted = [r["accepted_s"] for r in ready]
    return [
        {"name": f"launch to engine ready: first job accepted (median of {REPEATS})",
         "value": statistics.median(accepted), "unit": "s", "target": "<= 1.5",
         "reference": f"min {min(accepted):.2f}, max {max(accepted):.2f}; hello answered "
                      f"{_median(ready, 'hello_s'):.2f} s, methods listed "
                      f"{_median(ready, 'listed_s'):.2f} s; engine CPU to accepted "
                      f"{_median(ready, 'engine_cpu_s'):.2f} s; the job's state: "
                      f"{ready[0]['queued_reason'] or 'queued'}"},
        {"name": "engine idle memory before any job (RSS)",
         "value": _median(ready, "engine_rss_mb"), "unit": "MiB", "target": "< 100",
         "reference": "the engine process alone; its warm worker holds torch"},
        {"name": f"studio-engine list (median of {REPEATS})",
         "value": statistics.median(listing), "unit": "s", "target": "<= 0.5",
         "reference": f"min {min(listing):.2f}, max {max(listing):.2f}; CPU {listing_cpu:.2f} s "
                      f"a call; cached descriptions"},
        {"name": "studio-engine list, cache rebuilt", "value": uncached, "unit": "s",
         "reference": "once after a method file changed: imports every method module"},
        {"name": f"eos.train 50 steps: studio-engine run to result (median of {REPEATS})",
         "value": statistics.median(tiny), "unit": "s",
         "reference": f"min {min(tiny):.2f}, max {max(tiny):.2f}; "
                      f"{statistics.median(shares):.0%} of it spent importing"},
        {"name": "load average while measuring (1 min)", "value": load[0], "unit": "",
         "reference": f"5 min {load[1]:.2f}, 15 min {load[2]:.2f}; {os.cpu_count()} cores"},
    ]


async def _launch_to_ready(workspace: Path, env: dict[str, str]) -> dict:
    """One engine start, timed as the GUI sees it; the engine is killed afterwards."""
    import psutil

    from engine.client import EngineClient, launch_engine

    started = time.perf_counter()
    engine = launch_engine(str(workspace), workers=1, env=env)
    try:
        events: list[dict] = []
        client = EngineClient(events.append)
        await client.connect(engine.socket_path, engine.token, "bench")
        hello_s = time.perf_counter() - started
        await client.list_methods()
        listed_s = time.perf_counter() - started
        engine_rss_mb = psutil.Process(engine.process.pid).memory_info().rss / 2**20
        job = await client.submit("diag.echo", {"message": "first"})
        accepted_s = time.perf_counter() - started
        times = psutil.Process(engine.process.pid).cpu_times()
        await client.close()
    finally:
        # its worker may still be importing torch: end it too, so it does not load the next
        # measurement
        workers = psutil.Process(engine.process.pid).children(recursive=True)
        engine.kill()
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
        psutil.wait_procs(workers, timeout=10)
    reasons = [e["content"].get("reason", "") for e in events
               if e.get("job") == job and e["type"] == "job_state"]
    return {"hello_s": hello_s, "listed_s": listed_s, "accepted_s": accepted_s,
            "engine_rss_mb": engine_rss_mb, "engine_cpu_s": times.user + times.system,
            "queued_reason": reasons[0] if reasons else ""}


def _engine_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True,
                            text=True, env=env, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"studio-engine {' '.join(args)} failed ({result.returncode}): "
                           f"{result.stderr[-2000:]}")
    return result


def _timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    _engine_cli(args, env)
    return time.perf_counter() - started


def _import_share(args: list[str], env: dict[str, str]) -> float:
    """Seconds spent in top-level imports (CLI and worker) over the run's wall time."""
    started = time.perf_counter()
    result = _engine_cli(args, {**env, "PYTHONPROFILEIMPORTTIME": "1"})
    wall_s = time.perf_counter() - started
    imports_us = sum(int(match.group(1)) for line in result.stderr.splitlines()
                     if (match := _TOP_LEVEL_IMPORT.match(line)))
    return imports_us / 1e6 / wall_s


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(row[key] for row in rows)


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<64} {row['value']:>8.3g} {row['unit']:<4} "
              f"{row.get('target', ''):<8} {row.get('reference', '')}")
