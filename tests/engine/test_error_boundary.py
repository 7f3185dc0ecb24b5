"""The run path's error boundary: what a submission is refused for, and that the command line
never hangs (non-UTF-8 text, unreadable inputs, seeds, booleans, NaN, signals)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys

import pytest

from engine.atomic import strict_jsonable
from engine.executors.base import JobRequest
from engine.executors.local import LocalExecutor
from engine.jobs import InvalidSubmission, JobManager, check_seed
from engine.workspace import Workspace


def cli(*args: str | bytes, workspace, timeout: float = 120) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "engine", *args, "--workspace", str(workspace)]
    return subprocess.run(command, capture_output=True, timeout=timeout)


def test_non_utf8_input_path_and_value_exit_2_at_submit(tmp_path):
    name = os.fsencode(tmp_path) + b"/bad\xff.jsonl"
    with open(name, "wb") as handle:
        handle.write(b'{"a": 1}\n')
    out = cli("run", "diag.inputs", "--input", b"data=" + name, workspace=tmp_path / "ws")
    assert out.returncode == 2
    assert b"bad\\xff.jsonl" in out.stderr and b"not valid UTF-8" in out.stderr
    out = cli("run", "diag.count", "--set", b"delay_s=\xff", workspace=tmp_path / "ws")
    assert out.returncode == 2 and b"parameter delay_s" in out.stderr
    assert Workspace(tmp_path / "ws").runs() == []  # refused before a run was recorded


def test_unreadable_input_exits_2_naming_the_file(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    out = cli("run", "diag.inputs", "--input", f"data={deep}", workspace=tmp_path / "ws")
    assert out.returncode == 2
    assert out.stderr.decode().startswith(f"studio-engine: {deep}: JSON nested")
    assert b"STUDIO_MAX_JSON_DEPTH" in out.stderr


def test_a_file_with_some_bad_records_runs_with_them_listed(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    out = cli("run", "diag.inputs", "--input", f"data={data}", workspace=tmp_path / "ws")
    assert out.returncode == 0, out.stderr
    (run,) = Workspace(tmp_path / "ws").runs()
    folder = tmp_path / "ws" / "runs" / run["id"]
    note = f"{data}: line 2: not JSON"
    assert note in (folder / "log.txt").read_text()
    assert json.loads((folder / "result.json").read_text())["input_notes"][0].startswith(note)


def test_boolean_is_not_an_integer_and_seeds_are_bounded(tmp_path):
    out = cli("run", "diag.count", "--set", "steps=true", workspace=tmp_path)
    assert out.returncode == 2 and b"steps: expected a number" in out.stderr
    out = cli("run", "diag.count", "--seed", str(2**64 - 1), workspace=tmp_path)
    assert out.returncode == 2 and b"seed" in out.stderr
    assert not list((tmp_path / "runs").iterdir())  # no folder without a row
    for bad in (True, 1.5, -1, 2**63, "x"):
        with pytest.raises(InvalidSubmission):
            check_seed(bad)
    assert check_seed(None) == 0 and check_seed(2**63 - 1) == 2**63 - 1


def test_json_output_is_strict():
    value = strict_jsonable({"a": [math.nan, 1.0, math.inf], "b": {"c": -math.inf}})
    assert value == {"a": [None, 1.0, None], "b": {"c": None}}
    json.dumps(value, allow_nan=False)


def test_a_job_the_executor_cannot_send_fails_instead_of_hanging(tmp_path):
    """The reader task survives a job that cannot be encoded and fails only that job."""
    events: list[dict] = []

    async def go() -> None:
        executor = LocalExecutor(workers=1)
        await executor.start()
        try:
            done = asyncio.Event()

            def sink(event: dict) -> None:
                events.append(event)
                if event["type"] == "done":
                    done.set()

            bad = JobRequest(id="bad", method="diag.echo", params={"message": "\udcff"},
                             inputs={}, seed=0, output_dir=str(tmp_path / "bad"),
                             cache_root=str(tmp_path))
            executor.submit(bad, sink)
            await asyncio.wait_for(done.wait(), 120)
            done.clear()
            good = JobRequest(id="good", method="diag.echo", params={}, inputs={}, seed=0,
                              output_dir=str(tmp_path / "good"), cache_root=str(tmp_path))
            executor.submit(good, sink)
            await asyncio.wait_for(done.wait(), 120)
        finally:
            await executor.stop()

    asyncio.run(go())
    finals = [e["content"] for e in events if e["type"] == "done"]
    assert finals[0]["state"] == "failed" and "could not be sent" in finals[0]["reason"]
    assert finals[1]["state"] == "succeeded"


def test_abandon_ends_a_job_its_executor_forgot(tmp_path):
    """The CLI's last resort after a kill that is never confirmed."""
    published: list[dict] = []

    class Silent(LocalExecutor):
        def submit(self, request, on_event):  # never reports anything
            return None

    manager = JobManager(Workspace(tmp_path), Silent(workers=1), published.append)
    job_id = manager.submit("diag.echo", {})
    assert manager.abandon(job_id, "cancelled", "cancelled: no answer")
    assert not manager.abandon(job_id, "cancelled", "again")
    assert published[-1]["content"]["state"] == "cancelled"
    assert json.loads((tmp_path / "runs" / job_id / "result.json").read_text())["state"] == \
        "cancelled"
