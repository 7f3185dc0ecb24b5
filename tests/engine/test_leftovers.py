"""What dead processes leave behind is cleaned: runs of a dead engine or command end failed
with a result.json, temp files of killed writes go, and a `run` whose worker dies fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from engine.workspace import TEMP_FILE_GRACE_S, Workspace

DEAD_PID = 2**22 + 12345  # above Linux's pid_max: never a live process


def _orphan(ws: Workspace) -> str:
    run_id = ws.create_run("diag.count", {}, 0)
    ws.set_state(run_id, "running")
    with ws._connect() as db:
        db.execute("UPDATE runs SET owner_pid=? WHERE id=?", (DEAD_PID, run_id))
    return run_id


def test_runs_command_finishes_runs_whose_process_is_gone(tmp_path):
    ws = Workspace(tmp_path)
    dead, live = _orphan(ws), ws.create_run("diag.count", {}, 0)  # live: owned by this test
    out = subprocess.run([sys.executable, "-m", "engine", "runs", "--json", "--workspace",
                          str(tmp_path)], capture_output=True, text=True, timeout=60)
    states = {run["id"]: run["state"] for run in json.loads(out.stdout)}
    assert states == {dead: "failed", live: "queued"}
    result = json.loads((tmp_path / "runs" / dead / "result.json").read_text())
    assert result["state"] == "failed" and result["reason"] == "engine died"
    assert not (tmp_path / "runs" / live / "result.json").exists()


def test_temp_files_of_killed_writes_are_removed_but_not_a_live_runs(tmp_path):
    ws = Workspace(tmp_path)
    dead, live = _orphan(ws), ws.create_run("diag.count", {}, 0)
    ws.finish_orphans("engine died")
    stale = ws.run_dir(dead) / "checkpoints" / "sae" / ".model.safetensors.k2j3.tmp"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a checkpoint")
    long_ago = time.time() - 2 * TEMP_FILE_GRACE_S  # a killed write's file is not touched again
    os.utime(stale, (long_ago, long_ago))
    writing = ws.run_dir(live) / ".result.json.x1y2.tmp"
    writing.write_bytes(b"{")
    kept = ws.run_dir(dead) / "artifacts" / "curve.json"
    kept.write_text("{}")
    assert ws.remove_dead_temp_files() == [stale]
    assert writing.exists() and kept.exists()


def test_run_whose_worker_dies_exits_1_with_the_run_failed(tmp_path):
    out = subprocess.run([sys.executable, "-m", "engine", "run", "diag.crash", "--workspace",
                          str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    (run,) = Workspace(tmp_path).runs()
    assert run["state"] == "failed" and "worker process died" in run["reason"]
    assert json.loads((tmp_path / "runs" / run["id"] / "result.json").read_text())[
        "state"] == "failed"
