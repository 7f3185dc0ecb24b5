"""``ctx.map`` on a Ray cluster: a reproduction's units run as Ray tasks, one per seed, and the
claim equals a local run's (timing and hosts aside); progress is merged into the one job, a
cancel stops the units, a failing unit fails the job with its error.

The reproduction is defined here (``fanout.reproduce``): the Ray workers import this module by
name (``PYTHONPATH`` in the job's runtime environment) and register it in their registry
before the job's actor looks it up (``worker_process_setup_hook``).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
from pydantic import Field

from engine import registry, verdicts
from engine.api import Claim, ReproduceParams, Resources, reproduce_spec
from engine.executors import make_executor
from engine.executors.ray_cluster import _room_beside_the_job, unit_name
from engine.jobs import JobManager
from engine.worker import execute_job
from engine.workspace import Workspace
from tests.engine.executors import test_ray_cluster as ray_tests

ray = ray_tests.ray  # skips this module where the cluster extra is not installed
ray_head = ray_tests.ray_head  # the same local head fixture (started once for this module)
REPO = Path(__file__).resolve().parents[3]
SEEDS = (0, 1, 2)


# -- the reproduction the cluster runs (module level: workers import it by name) -------------

def score_unit(item: dict) -> dict:
    """One seed: the mean of a seeded normal sample. Its own generator, from the item alone."""
    rng = np.random.default_rng(item["seed"])
    if item.get("sleep_s"):
        heartbeat = Path(item["heartbeat"])
        deadline = time.monotonic() + item["sleep_s"]
        while time.monotonic() < deadline:
            with open(heartbeat, "a") as handle:
                handle.write(".")
            time.sleep(0.05)
    if item.get("fail"):
        raise RuntimeError(f"unit of seed {item['seed']} broke on purpose")
    return {"seed": item["seed"], "score": float(rng.normal(0.5, 1.0, item["samples"]).mean())}


class FanoutParams(ReproduceParams):
    PROFILE_SETTINGS = {"smoke": {"samples": 200}}

    samples: int = Field(2000, ge=2, description="draws per seed")
    sleep_s: float = Field(0.0, ge=0, description="how long each unit keeps busy (cancel test)")
    heartbeat: str = Field("", description="file each busy unit appends to")
    fail: bool = Field(False, description="every unit raises")


def reproduce_fanout(ctx, params: FanoutParams, inputs: dict) -> dict:
    start = time.perf_counter()
    items = [{"seed": seed, "samples": params.samples, "sleep_s": params.sleep_s,
              "heartbeat": params.heartbeat, "fail": params.fail} for seed in SEEDS]
    results = ctx.map(score_unit, items)
    measured = verdicts.t_interval([r["score"] for r in results])
    criterion = verdicts.criterion("mean above zero", "the mean is positive", measured,
                                   verdicts.Rule.above(0.0))
    claim = Claim(paper="fanout", statement="a seeded mean is positive", criteria=[criterion],
                  seeds=[r["seed"] for r in results], wall_s=time.perf_counter() - start,
                  smoke=params.smoke, spec="v2")
    ctx.save_artifact("claim", claim.to_dict(), kind="claim")
    return {"claim": claim.to_dict()}


SPEC = reproduce_spec("fanout", "Seeded means, fanned out", reproduce_fanout,
                      params=FanoutParams, resources=Resources(cpus=1, memory_gb=0.25))


def register_fanout() -> None:
    """Ray's worker setup hook: this module's method joins the worker's registry."""
    registry.all_methods()[SPEC.id] = SPEC


# -- without a cluster ----------------------------------------------------------------------

def test_only_module_level_functions_fan_out() -> None:
    assert unit_name(score_unit) == (__name__, "score_unit")
    with pytest.raises(ValueError, match="module-level function"):
        unit_name(lambda item: item)

    def nested(item: dict) -> dict:
        return item

    with pytest.raises(ValueError, match="workers import it by name"):
        unit_name(nested)


def test_units_wait_for_room_only_where_the_cluster_could_hold_them() -> None:
    gpu_job = Resources(cpus=1, gpus=1, memory_gb=1)
    assert not _room_beside_the_job({"CPU": 16, "GPU": 1, "memory": 64 * 2**30}, gpu_job)
    assert _room_beside_the_job({"CPU": 16, "GPU": 2, "memory": 64 * 2**30}, gpu_job)
    assert not _room_beside_the_job({"CPU": 1, "memory": 64 * 2**30}, Resources(cpus=1))
    assert _room_beside_the_job({"CPU": 4, "memory": 64 * 2**30}, Resources(cpus=1))


def _run_here(tmp_path: Path, params: dict, monkeypatch) -> tuple[dict, list[dict]]:
    """The local worker's path (``execute_job``) in this process: ``ctx.map`` in order."""
    monkeypatch.setitem(registry.all_methods(), SPEC.id, SPEC)
    events: list[dict] = []
    execute_job({"id": "local", "method": SPEC.id, "params": params, "seed": 0,
                 "output_dir": str(tmp_path / "local"), "inputs": {}}, events.append, 1)
    assert events[-1] == {"type": "done", "state": "succeeded", "reason": ""}, events[-1]
    result = next(e for e in events if e["type"] == "job_result")
    return result["outputs"]["claim"], events


# -- on a local Ray head --------------------------------------------------------------------


async def _on_ray(address: str, tmp_path: Path, body, monkeypatch) -> None:
    """Join the head with this module importable on its workers, then run ``body`` through
    the engine's JobManager and Ray executor (which keeps this connection). The grace period
    is long: a cancel must stop the units itself, not by killing the job's actor."""
    monkeypatch.setitem(registry.all_methods(), SPEC.id, SPEC)
    ray.init(address=address, namespace="studio", log_to_driver=False,
             logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)},
                          "worker_process_setup_hook": f"{__name__}.register_fanout"})
    executor = make_executor(address, cancel_grace_s=30.0)
    recorder = ray_tests.Recorder()
    workspace = Workspace(tmp_path / "ws")
    manager = JobManager(workspace, executor, recorder)
    await executor.start()
    try:
        await body(manager, recorder, workspace)
    finally:
        await executor.stop()


@pytest.mark.slow
def test_a_smoke_reproduction_on_ray_equals_the_local_one(ray_head, tmp_path, monkeypatch):
    local_claim, local_events = _run_here(tmp_path, {"profile": "smoke"}, monkeypatch)
    local_progress = [e["metrics"]["units_done"] for e in local_events
                      if e["type"] == "job_progress"]

    outcome: list = []

    async def body(manager, recorder, workspace):
        job = manager.submit(SPEC.id, {"profile": "smoke"})
        assert (await recorder.terminal(job, 240))["state"] == "succeeded"
        outcome.append(recorder.of(job, "job_result")[0]["content"]["outputs"]["claim"])
        outcome.append(json.loads((workspace.run_dir(job) / "artifacts" / "claim.json")
                                  .read_text()))
        outcome.append([m["content"] for m in recorder.of(job, "job_progress")])

    asyncio.run(_on_ray(ray_head, tmp_path, body, monkeypatch))
    remote_claim, saved, progress = outcome

    def comparable(claim: dict) -> dict:
        return {k: v for k, v in claim.items() if k not in ("wall_s", "units")}

    assert comparable(remote_claim) == comparable(local_claim)
    assert comparable(saved) == comparable(local_claim)
    assert local_claim["seeds"] == [0, 1, 2] and local_claim["profile"] == "smoke"
    assert "units" not in local_claim  # in order on this machine: nothing fanned out
    # Each seed ran as its own Ray task, on this machine's node, recorded in both claims.
    for claim in (remote_claim, saved):
        units = claim["units"]
        assert [u["host"] for u in units] == [socket.gethostname()] * 3
        assert len({u["task"] for u in units}) == 3 and all(u["task"] for u in units)
    # The units' progress reached the one job: units done out of the total.
    assert [p["total"] for p in progress] and {p["total"] for p in progress} == {3}
    assert progress[-1]["metrics"]["units_done"] == 3 == local_progress[-1]


@pytest.mark.slow
def test_cancel_stops_the_units_and_a_failing_unit_fails_the_job(ray_head, tmp_path,
                                                                  monkeypatch):
    heartbeat = tmp_path / "heartbeat"
    heartbeat.touch()
    os.chmod(tmp_path, 0o777)

    async def body(manager, recorder, workspace):
        job = manager.submit(SPEC.id, {"profile": "smoke", "sleep_s": 120,
                                       "heartbeat": str(heartbeat)})
        deadline = time.monotonic() + 120
        while heartbeat.stat().st_size < 3:  # the units are running
            assert time.monotonic() < deadline, "the units never started"
            await asyncio.sleep(0.1)
        started = time.monotonic()
        manager.cancel(job)
        state = await recorder.terminal(job, 60)
        assert state["state"] == "cancelled" and "grace" not in state["reason"]
        assert time.monotonic() - started < 10
        await asyncio.sleep(1.0)
        size = heartbeat.stat().st_size
        await asyncio.sleep(1.5)
        assert heartbeat.stat().st_size == size, "a unit kept running after the cancel"

        # A hard cancel kills the job's actor: the units it started die with it.
        killed_beat = tmp_path / "killed-heartbeat"
        killed_beat.touch()
        killed = manager.submit(SPEC.id, {"profile": "smoke", "sleep_s": 120,
                                          "heartbeat": str(killed_beat)})
        while killed_beat.stat().st_size < 3:
            assert time.monotonic() < deadline + 120, "the second job's units never started"
            await asyncio.sleep(0.1)
        manager.cancel(killed, hard=True)
        assert (await recorder.terminal(killed, 60))["state"] == "cancelled"
        await asyncio.sleep(3.0)
        size = killed_beat.stat().st_size
        await asyncio.sleep(1.5)
        assert killed_beat.stat().st_size == size, "a unit outlived its killed job"

        broken = manager.submit(SPEC.id, {"profile": "smoke", "fail": True})
        state = await recorder.terminal(broken, 120)
        assert state["state"] == "failed"
        assert "broke on purpose" in state["reason"]

    asyncio.run(_on_ray(ray_head, tmp_path, body, monkeypatch))
