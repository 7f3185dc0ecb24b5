import json
import time

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from engine.context import Cancelled, JobContext


def make(tmp_path):
    events = []
    return JobContext("j1", tmp_path, events.append, seed=5), events


def test_progress_is_coalesced_but_every_metric_is_kept(tmp_path):
    ctx, events = make(tmp_path)
    for step in range(1, 1001):
        ctx.progress(step, 1000, loss=1.0 / step)
    ctx.flush()
    sent = [e for e in events if e["type"] == "job_progress"]
    assert len(sent) < 50
    assert sent[-1]["step"] == 1000 and sent[-1]["metrics"]["loss"] == pytest.approx(1e-3)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1000 and json.loads(lines[9])["step"] == 10


def test_progress_keeps_flowing_over_time(tmp_path):
    ctx, events = make(tmp_path)
    for step in range(6):
        ctx.progress(step, 100, x=step)
        time.sleep(0.05)
    assert len([e for e in events if e["type"] == "job_progress"]) == 6


def test_logs_are_batched_and_flushed(tmp_path):
    ctx, events = make(tmp_path)
    for i in range(500):
        ctx.log(f"line {i}")
    ctx.flush()
    lines = [line for e in events if e["type"] == "job_log" for line in e["lines"]]
    assert lines == [f"line {i}" for i in range(500)]
    assert len([e for e in events if e["type"] == "job_log"]) < 10


def test_artifacts_of_each_kind(tmp_path):
    ctx, events = make(tmp_path)
    assert ctx.save_artifact("arr", np.eye(3)) == "artifacts/arr.npy"
    ctx.save_artifact("tensor", torch.ones(2, 2))
    ctx.save_artifact("p", {"kind": "plot", "series": []})
    ctx.save_artifact("h", {"kind": "heatmap", "z": [[1.0]]})
    ctx.save_artifact("t", {"columns": ["a"], "rows": [[1]]})
    ctx.save_artifact("j", {"x": np.float32(1.5)})
    kinds = {e["name"]: e["kind"] for e in events if e["type"] == "job_artifact"}
    assert kinds == {"arr": "array", "tensor": "array", "p": "plot", "h": "plot", "t": "table",
                     "j": "json"}
    assert np.load(tmp_path / "artifacts/tensor.npy").sum() == 4
    assert json.loads((tmp_path / "artifacts/j.json").read_text()) == {"x": 1.5}


def test_checkpoint_is_safetensors_plus_cfg(tmp_path):
    ctx, _ = make(tmp_path)
    model = torch.nn.Linear(3, 2)
    path = ctx.save_checkpoint("model", model, {"d_in": 3, "d_out": 2})
    tensors = load_file(str(tmp_path / path / "model.safetensors"))
    assert torch.equal(tensors["weight"], model.weight.detach())
    cfg = json.loads((tmp_path / path / "cfg.json").read_text())
    assert {k: v for k, v in cfg.items() if k != "provenance"} == {"d_in": 3, "d_out": 2}


def test_a_checkpoint_names_the_data_seed_and_run_it_came_from(tmp_path):
    """The SAE's cfg.json said "dataset_path": "news" for a run on the user's own folder."""
    from engine.content import content_hash

    run_dir, texts = tmp_path / "20260101-000000-abcdef", tmp_path / "my texts"
    run_dir.mkdir()
    texts.mkdir()
    (texts / "a.txt").write_text("the user's own words")
    (run_dir / "params.json").write_text(json.dumps({
        "run_id": run_dir.name, "method": "sae_pc1.train", "params": {"steps": 3}, "seed": 5,
        "inputs": {"text": str(texts), "decoder": "run:20250101-000000-000000/decoder"}}))
    ctx = JobContext(run_dir.name, run_dir, lambda event: None, seed=5)
    path = ctx.save_checkpoint("model", torch.nn.Linear(3, 2), {"d_in": 3})
    made = json.loads((run_dir / path / "cfg.json").read_text())["provenance"]
    assert made["runs"] == [{"run_id": run_dir.name, "method": "sae_pc1.train",
                             "params": {"steps": 3}, "seed": 5}]
    assert made["sources"] == [{"path": str(texts.resolve()), "hash": content_hash(texts),
                                "size": None}]
    assert made["inputs"]["decoder"] == "run:20250101-000000-000000/decoder"
    assert "torch" in made["versions"]


def test_cancel_and_cache(tmp_path):
    ctx, _ = make(tmp_path)
    ctx.check_cancelled()
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        ctx.check_cancelled()
    a = ctx.cache_dir({"model": "x", "d": 3})
    assert a == ctx.cache_dir({"d": 3, "model": "x"}) != ctx.cache_dir({"d": 4, "model": "x"})


def test_save_file_announces_bytes_or_a_file_inside_the_run(tmp_path):
    ctx, events = make(tmp_path)
    assert ctx.save_file("turns.csv", b"turn,belief\n1,0.5\n") == "artifacts/turns.csv"
    assert (tmp_path / "artifacts/turns.csv").read_text().startswith("turn,belief")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "t.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    assert ctx.save_file("t.jsonl", "out/t.jsonl", turns=1) == "out/t.jsonl"
    announced = [e for e in events if e["type"] == "job_artifact"]
    assert [(e["kind"], e["path"]) for e in announced] == [
        ("file", "artifacts/turns.csv"), ("file", "out/t.jsonl")]
    assert announced[1]["meta"] == {"turns": 1}
    with pytest.raises(ValueError, match="inside the run folder"):
        ctx.save_file("escape", tmp_path.parent / "elsewhere.txt")
    with pytest.raises(FileNotFoundError, match="no such file"):
        ctx.save_file("missing", "out/missing.csv")


def _square(item: dict) -> dict:
    return {"seed": item["seed"], "value": item["seed"] ** 2}


def test_map_runs_units_in_order_and_a_fan_out_hook_replaces_it(tmp_path) -> None:
    events: list[dict] = []
    ctx = JobContext("job", tmp_path, events.append)
    assert ctx.map(_square, [{"seed": s} for s in (3, 1, 2)]) == [
        {"seed": 3, "value": 9}, {"seed": 1, "value": 1}, {"seed": 2, "value": 4}]
    assert ctx.unit_hosts == ["local"] * 3
    called: list[int] = []

    def remote(function, items):
        called.append(len(items))
        return [function(item) for item in reversed(items)][::-1]

    ctx.fan_out = remote
    assert ctx.map(_square, [{"seed": 5}, {"seed": 6}]) == [{"seed": 5, "value": 25},
                                                             {"seed": 6, "value": 36}]
    assert called == [2]
