import contextlib
import json
import os

from engine.atomic import append_jsonl, read_jsonl, write_json_atomic
from engine.workspace import Workspace


def test_runs_are_indexed_and_filtered(tmp_path):
    ws = Workspace(tmp_path)
    first = ws.create_run("eos.train", {"steps": 3}, seed=1)
    second = ws.create_run("diag.echo", {}, seed=0)
    ws.set_state(first, "running")
    ws.set_state(first, "succeeded")
    ws.add_artifact(first, "loss", "plot", "artifacts/loss.json", {"n": 1})
    assert {r["id"] for r in ws.runs()} == {first, second}
    assert [r["id"] for r in ws.runs(method="eos")] == [first]
    assert [r["id"] for r in ws.runs(state="queued")] == [second]
    record = ws.run(first)
    assert record["state"] == "succeeded" and record["started"] and record["ended"]
    assert record["artifacts"] == [{"name": "loss", "kind": "plot",
                                    "path": "artifacts/loss.json", "meta": {"n": 1}}]
    params = json.loads((ws.run_dir(first) / "params.json").read_text())
    assert params["params"] == {"steps": 3} and params["seed"] == 1
    assert ws.resolve_ref(f"run:{first}/loss") == ws.run_dir(first) / "artifacts/loss.json"
    ws.set_notes(first, "looks unstable")
    assert ws.run(first)["notes"] == "looks unstable"
    ws.delete_run(second)
    assert not ws.run_dir(second).exists() and len(ws.runs()) == 1
    assert ws.integrity_ok()


def test_refs_name_a_runs_outputs_as_well_as_its_artifacts(tmp_path):
    """``run:<id>/checkpoint`` is the checkpoint the run reported as its output, wherever the
    method put it; other names stay paths inside the run folder."""
    ws = Workspace(tmp_path)
    run = ws.create_run("brainworld.train", {}, seed=0)
    assert ws.resolve_ref(f"run:{run}/checkpoint") == ws.run_dir(run) / "checkpoint"  # unfinished
    ws.write_result(run, {"state": "succeeded",
                          "outputs": {"checkpoint": "checkpoints/brainworld", "final": {"a": 1}}})
    assert ws.resolve_ref(f"run:{run}/checkpoint") == ws.run_dir(run) / "checkpoints/brainworld"
    assert ws.resolve_ref(f"run:{run}/final") == ws.run_dir(run) / "final"  # not a path
    assert ws.resolve_ref(f"run:{run}/log.txt") == ws.run_dir(run) / "log.txt"
    (ws.run_dir(run) / "result.json").write_text("{truncated")
    assert ws.resolve_ref(f"run:{run}/checkpoint") == ws.run_dir(run) / "checkpoint"


def test_orphaned_runs_fail_but_live_ones_stay(tmp_path):
    ws = Workspace(tmp_path)
    mine = ws.create_run("diag.count", {}, seed=0)
    dead = ws.create_run("diag.count", {}, seed=0)
    with ws._connect() as db:
        db.execute("UPDATE runs SET owner_pid=? WHERE id=?", (2**22 + 12345, dead))
    assert ws.fail_orphans("engine died") == [dead]
    assert ws.run(dead)["state"] == "failed" and ws.run(dead)["reason"] == "engine died"
    assert ws.run(mine)["state"] == "queued"


def test_edits_round_trip(tmp_path):
    ws = Workspace(tmp_path)
    ws.save_edits("doc", [{"op": "set", "v": 1}, {"op": "set", "v": 2}])
    ws.save_edits("doc", [{"op": "set", "v": 1}])
    assert Workspace(tmp_path).load_edits("doc") == [{"op": "set", "v": 1}]


def test_atomic_json_never_leaves_a_partial_file(tmp_path):
    target = tmp_path / "a.json"
    write_json_atomic(target, {"x": 1})
    with contextlib.suppress(TypeError):
        write_json_atomic(target, {"bad": object()})
    assert json.loads(target.read_text()) == {"x": 1}
    assert os.listdir(tmp_path) == ["a.json"]


def test_jsonl_reader_skips_a_torn_line(tmp_path):
    path = tmp_path / "m.jsonl"
    append_jsonl(path, {"step": 1})
    with open(path, "a") as handle:
        handle.write('{"step": 2, "lo')
    assert read_jsonl(path) == [{"step": 1}]


def test_start_up_cleaning_never_removes_the_temp_file_of_a_run_being_created(
        tmp_path, monkeypatch):
    """Review of issue 22: ``create_run`` writes params.json (through a temp file) before its
    run has a row; another process starting then (a server, ``studio-engine run``) removed
    that temp file as a dead write's, and the create failed."""
    import engine.atomic

    ws, starting = Workspace(tmp_path), Workspace(tmp_path)
    removed, fsync = [], os.fsync

    def another_process_starts_mid_write(fd: int) -> None:
        fsync(fd)
        removed.extend(starting.remove_dead_temp_files())

    monkeypatch.setattr(engine.atomic.os, "fsync", another_process_starts_mid_write)
    run_id = ws.create_run("diag.echo", {"x": 1}, seed=0)
    monkeypatch.setattr(engine.atomic.os, "fsync", fsync)
    assert removed == []
    assert json.loads((ws.run_dir(run_id) / "params.json").read_text())["params"] == {"x": 1}
