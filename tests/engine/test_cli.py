"""Every subcommand and exit code of ``studio-engine``, run as a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from engine.workspace import Workspace


def cli(*args, workspace=None, timeout=120, **kwargs) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "engine", *args]
    if workspace is not None:
        command += ["--workspace", str(workspace)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_list_json_describes_every_method():
    out = cli("list", "--json")
    assert out.returncode == 0, out.stderr
    methods = json.loads(out.stdout)
    keys = {"id", "paper", "title", "panel", "params_schema", "inputs", "outputs", "resources"}
    assert all(keys <= set(m) for m in methods)
    ids = {m["id"] for m in methods}
    assert {"eos.train", "eos.reproduce"} <= ids
    assert not any(i.startswith("diag.") for i in ids)  # developers' methods: STUDIO_DEV=1
    assert cli("list").stdout.count("\n") == len(methods)
    developer = cli("list", "--json", env={**os.environ, "STUDIO_DEV": "1"})
    assert "diag.crash" in {m["id"] for m in json.loads(developer.stdout)}
    assert cli("run", "diag.echo", "--set", "message=still runs by id").returncode == 0


def test_run_json_streams_events_and_ends_with_result(tmp_path):
    out = cli("run", "diag.count", "--set", "steps=5", "--set", "delay_s=0", "--seed", "3",
              "--json", workspace=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = json_lines(out.stdout)
    assert lines[0]["type"] == "job_state" and lines[0]["state"] == "queued"
    result = lines[-1]
    assert result["type"] == "result" and result["state"] == "succeeded"
    assert set(result) >= {"run_id", "run_dir", "state", "outputs"}
    run_dir = tmp_path / "runs" / result["run_id"]
    assert np.load(run_dir / result["outputs"]["values"]).shape == (5,)
    params = json.loads((run_dir / "params.json").read_text())
    assert params["seed"] == 3 and params["params"] == {"steps": 5, "delay_s": 0.0}
    assert params["packages"]["numpy"]


def test_params_file_and_set_override(tmp_path):
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"message": "from file"}))
    out = cli("run", "diag.echo", "--params", str(params), "--set", "message=from set",
              "--json", workspace=tmp_path)
    assert json_lines(out.stdout)[-1]["outputs"]["message"] == "from set"


def test_unknown_parameter_exits_2_and_names_it(tmp_path):
    out = cli("run", "diag.count", "--set", "stepz=3", workspace=tmp_path)
    assert out.returncode == 2
    assert "stepz: unknown parameter" in out.stderr
    out = cli("run", "diag.count", "--set", "steps=-1", workspace=tmp_path)
    assert out.returncode == 2 and "steps" in out.stderr
    out = cli("run", "no.such.method", workspace=tmp_path)
    assert out.returncode == 2 and "unknown method 'no.such.method'" in out.stderr
    out = cli("run", "diag.echo", "--params", str(tmp_path / "missing.json"), workspace=tmp_path)
    assert out.returncode == 2 and "missing.json" in out.stderr
    out = cli("run", "diag.echo", "--cluster", "ray://h:1", workspace=tmp_path)
    assert out.returncode == 2 and "ray://h:1" in out.stderr
    assert Workspace(tmp_path).runs() == []  # nothing was started


def test_failed_job_exits_1(tmp_path):
    out = cli("run", "diag.fail", "--json", workspace=tmp_path)
    assert out.returncode == 1
    result = json_lines(out.stdout)[-1]
    assert result["state"] == "failed" and "deliberate failure" in result["reason"]


def test_input_references(tmp_path):
    data = tmp_path / "data.npy"
    np.save(data, np.arange(10))
    out = cli("run", "diag.inputs", "--input", f"data={data}", "--json", workspace=tmp_path)
    assert out.returncode == 0, out.stderr
    first = json_lines(out.stdout)[-1]
    assert first["outputs"]["data"] == data.stat().st_size
    ref = f"run:{first['run_id']}/params.json"
    out = cli("run", "diag.inputs", "--input", f"data={ref}", "--json", workspace=tmp_path)
    assert out.returncode == 0, out.stderr
    out = cli("run", "diag.inputs", "--input", "data=/no/such.npy", workspace=tmp_path)
    assert out.returncode == 2 and "/no/such.npy" in out.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cancel_with_ctrl_c_or_sigterm_exits_130(tmp_path, sig):
    process = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", "diag.count", "--set", "steps=100000",
         "--set", "delay_s=0.01", "--workspace", str(tmp_path), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:
        if '"running"' in line:
            break
    process.send_signal(sig)
    assert process.wait(timeout=30) == 130
    (run,) = Workspace(tmp_path).runs()
    assert run["state"] == "cancelled"


def test_runs_lists_and_filters(tmp_path):
    cli("run", "diag.echo", workspace=tmp_path)
    cli("run", "diag.fail", workspace=tmp_path)
    runs = json.loads(cli("runs", "--json", workspace=tmp_path).stdout)
    assert sorted(r["method"] for r in runs) == ["diag.echo", "diag.fail"]
    failed = json.loads(cli("runs", "--json", "--state", "failed", workspace=tmp_path).stdout)
    assert [r["method"] for r in failed] == ["diag.fail"]
    assert "diag.echo" in cli("runs", workspace=tmp_path).stdout


def test_inspect_reports_and_refuses(tmp_path):
    good = tmp_path / "a.npy"
    np.save(good, np.zeros((3, 4), dtype=np.float32))
    report = json.loads(cli("inspect", str(good), "--json").stdout)
    assert report["format"] == "npy" and report["summary"]["shape"] == [3, 4]
    broken = tmp_path / "broken.npy"
    broken.write_bytes(good.read_bytes()[:60])
    out = cli("inspect", str(broken))
    assert out.returncode == 2 and str(broken) in out.stderr
    out = cli("inspect", str(tmp_path / "nothing.csv"))
    assert out.returncode == 2 and "no such file" in out.stderr


def test_export_renders_a_run_plot(tmp_path):
    result = json_lines(cli("run", "diag.count", "--set", "steps=3", "--set", "delay_s=0",
                            "--json", workspace=tmp_path).stdout)[-1]
    for suffix, magic in (("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF")):
        target = tmp_path / f"figure.{suffix}"
        out = cli("export", f"run:{result['run_id']}/count_plot", str(target),
                  workspace=tmp_path)
        assert out.returncode == 0, out.stderr
        assert target.read_bytes().startswith(magic)
        assert result["run_id"].encode() in target.read_bytes() or suffix == "pdf"
    out = cli("export", "run:nope/x", str(tmp_path / "f.png"), workspace=tmp_path)
    assert out.returncode == 2


def test_reproduce_smoke_prints_the_claim(tmp_path):
    out = cli("reproduce", "eos", "--smoke", "--json", workspace=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    claim = json.loads(out.stdout)
    assert claim["paper"] == "eos" and claim["smoke"] is True
    assert len(claim["criteria"]) >= 3
    assert claim["spec"] == "v2" and claim["profile"] == "smoke" and not claim["exploratory"]
    assert all({"name", "quote", "estimate", "interval", "level", "method", "rule", "verdict",
                "decides_with"} <= set(c) for c in claim["criteria"])
    out = cli("reproduce", "nosuchpaper", workspace=tmp_path)
    assert out.returncode == 2


@pytest.mark.parametrize("seed,verdict,code", [(0, "PASS", 0), (1, "FAIL", 3),
                                               (2, "INCONCLUSIVE", 4)])
def test_reproduce_exits_by_the_verdict_and_smoke_never_decides(tmp_path, seed, verdict, code):
    out = cli("reproduce", "diag", "--seed", str(seed), "--json", workspace=tmp_path)
    assert out.returncode == code, out.stderr
    claim = json.loads(out.stdout)
    assert claim["verdict"] == verdict and claim["profile"] == "cpu"
    assert claim["passed"] == (verdict == "PASS") and not claim["exploratory"]
    out = cli("reproduce", "diag", "--seed", str(seed), "--profile", "smoke", workspace=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"claim {verdict} (smoke: sizes too small for a verdict)" in out.stdout
    out = cli("reproduce", "diag", "--seed", str(seed), "--smoke", "--json", workspace=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout)["profile"] == "smoke"


def test_reproduce_marks_settings_other_than_the_profile_exploratory(tmp_path):
    out = cli("reproduce", "diag", "--profile", "gpu", "--set", "margin=1.0", "--json",
              workspace=tmp_path)
    claim = json.loads(out.stdout)  # the profile's own value is no change
    assert out.returncode == 0 and claim["profile"] == "gpu" and not claim["exploratory"]
    assert claim["settings"] == {"margin": 1.0}
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"margin": 2.0}))
    out = cli("reproduce", "diag", "--seed", "1", "--params", str(params), "--json",
              workspace=tmp_path)
    claim = json.loads(out.stdout)
    assert out.returncode == 3 and claim["exploratory"] is True
    assert claim["overrides"] == {"margin": 2.0} and claim["settings"] == {"margin": 1.0}
    stored = json.loads((tmp_path / "runs" / claim["run_id"] / "result.json").read_text())
    assert stored["outputs"]["claim"]["exploratory"] is True  # the run keeps the mark
    out = cli("reproduce", "diag", "--set", "margin=3", workspace=tmp_path)
    verdict_line = next(line for line in out.stdout.splitlines() if line.startswith("claim "))
    assert verdict_line.startswith("claim PASS EXPLORATORY") and "margin=3.0" in verdict_line
    out = cli("reproduce", "diag", "--smoke", "--profile", "gpu", workspace=tmp_path)
    assert out.returncode == 2 and "contradicts --profile gpu" in out.stderr


def test_serve_refuses_without_token():
    out = cli("serve", env={k: v for k, v in os.environ.items() if k != "STUDIO_ENGINE_TOKEN"})
    assert out.returncode == 2 and "token" in out.stderr


def test_sigkilled_cli_leaves_a_readable_workspace(tmp_path):
    """Kill the CLI and its job at random moments of the run: every file still parses.

    The moments count from when the run is recorded, not from the launch, so a slow start
    (a loaded machine importing torch) cannot turn every kill into one before the run began."""
    from safetensors.numpy import load_file

    rng = np.random.default_rng(0)
    for started, delay in enumerate(rng.uniform(0.0, 2.0, size=4), start=1):
        process = subprocess.Popen(
            [sys.executable, "-m", "engine", "run", "eos.train", "--set", "steps=400",
             "--workspace", str(tmp_path)], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while len(Workspace(tmp_path).runs()) < started and process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(Workspace(tmp_path).runs()) == started, "the run was never recorded"
        time.sleep(delay)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    ws = Workspace(tmp_path)
    assert ws.integrity_ok()
    assert len(ws.runs()) == 4
    for path in tmp_path.rglob("*.json"):
        json.loads(path.read_text())
    for path in tmp_path.rglob("*.safetensors"):
        load_file(str(path))
    for run in ws.runs():
        ws.metrics(run["id"])


def test_secrets_never_reach_the_workspace(tmp_path):
    key = "sk-very-secret-0123456789"
    out = cli("run", "diag.secret", "--set", f"api_key={key}", "--json", workspace=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json_lines(out.stdout)[-1]["outputs"] == {"key_length": len(key)}
    assert key not in out.stdout + out.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


def test_claim_table_shows_whole_criterion_names():
    from engine.cli import format_claim

    long_name = "FC r(generated, true) with sMRI minus without (mean of 3 seeds)"
    claim = {"paper": "brainworld", "statement": "sMRI helps", "passed": False, "seeds": [0],
             "wall_s": 1.0, "criteria": [
                 {"name": long_name, "measured": -0.018, "op": ">=", "target": 0.1,
                  "passed": False, "paper": "22 datasets"},
                 {"name": "finite", "measured": 1.0, "op": ">=", "target": 1.0, "passed": True}]}
    lines = format_claim(claim).splitlines()
    assert lines[2].startswith(long_name + " ") and "FAIL" in lines[2]
    column = len(long_name) + 1  # the measured column starts after the longest name
    assert lines[3][:column].rstrip() == "finite" and lines[3][column:].split()[0] == "1"
    assert lines[1][column:].split()[0] == "measured"
    assert lines[-1].startswith("claim FAIL; spec v1")  # a claim from before the schema


def test_claim_table_indents_parts_and_says_what_would_decide():
    from engine import verdicts
    from engine.cli import format_claim

    part = verdicts.criterion("held-out gain", "gains", verdicts.Interval(
        0.2, -0.1, 0.5, 0.95, "t-interval over 3 seeds"), verdicts.Rule.above(0.0))
    both = verdicts.combine("gains everywhere", "the abstract's words", [part])
    claim = {"paper": "p", "statement": "s", "spec": "v2", "verdict": "INCONCLUSIVE",
             "passed": False, "seeds": [0, 1, 2], "wall_s": 1.0, "profile": "gpu",
             "criteria": [both.to_dict()], "exploratory": True, "overrides": {"seeds": 5},
             "sanity": [{"name": "identity", "passed": True, "detail": ""}]}
    lines = format_claim(claim).splitlines()
    assert lines[2].startswith("gains everywhere ") and "INCONCLUSIVE (all)" in lines[2]
    assert lines[3].startswith("  held-out gain ") and "[-0.1, 0.5]" in lines[3]
    assert lines[3].split()[-4:] == [">", "0", "INCONCLUSIVE", "gains"]
    assert lines[4].startswith("claim INCONCLUSIVE EXPLORATORY") and "seeds=5" in lines[4]
    assert "spec v2, profile gpu" in lines[4]
    assert any("held-out gain would be decided by: a narrower interval" in x for x in lines)
    assert "sanity (never counted) ok: identity" in lines


def test_inspect_a_def_with_its_lef(tmp_path):
    import pytest

    from engine.vlsi import shared_design_paths

    found = shared_design_paths()
    if found is None:
        pytest.skip("../shared/data/vlsi (the gcd design) is absent")
    lef, def_ = (str(p) for p in found)
    out = cli("inspect", def_, "--lef", lef, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["format"] == "def" and report["metadata"]["lef"] == lef
    assert report["summary"]["routed_nets"] == 404
    bad = tmp_path / "bad.def"
    bad.write_text(found[1].read_text().replace("+ ROUTED metal2 ( 42750 74060 )",
                                                "+ ROUTED metalX ( 42750 74060 )"))
    out = cli("inspect", str(bad), "--lef", lef)
    assert out.returncode == 2 and "bad.def: line 2541: layer metalX is not defined" in out.stderr
    out = cli("inspect", lef, "--lef", lef)
    assert out.returncode == 2 and "--lef applies to DEF and route guide files" in out.stderr
