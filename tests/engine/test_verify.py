"""``studio-engine verify DIR``: an untouched report's runs rerun to the same numbers; an edited
number is named, by the rule its run was recorded under (exact or inside the interval)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def cli(*args: str, workspace: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "engine", *args, "--workspace", str(workspace)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@dataclass(frozen=True)
class ReportFolder:
    """A report folder and the workspace its runs are in."""

    folder: Path
    workspace: Path


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> ReportFolder:
    """A report of a real smoke reproduction on one thread (deterministic) and a diag run on
    two threads (nondeterministic: checked against its interval [0.5, 1.5])."""
    workspace = tmp_path_factory.mktemp("workspace")
    for args in (("causal_fairness", "--profile", "smoke", "--threads", "1"),
                 ("diag", "--profile", "cpu", "--threads", "2")):
        done = cli("reproduce", *args, workspace=workspace)
        assert done.returncode in (0, 3, 4), done.stderr
    out = tmp_path_factory.mktemp("report") / "site"
    done = cli("report", "causal_fairness", "diag", "--out", str(out), workspace=workspace)
    assert done.returncode == 0, done.stderr
    return ReportFolder(out, workspace)


def edited(report: ReportFolder, tmp_path: Path, edit) -> Path:
    """A copy of the report folder with ``edit(papers_by_slug)`` applied to report.json."""
    copy = tmp_path / "edited"
    shutil.copytree(report.folder, copy)
    data = json.loads((copy / "report.json").read_text())
    edit({p["slug"]: p for p in data["papers"]})
    (copy / "report.json").write_text(json.dumps(data))
    return copy


def test_untouched_report_verifies(report):
    recorded = json.loads((report.folder / "report.json").read_text())
    assert [p["deterministic"] for p in recorded["papers"]] == [True, False]
    done = cli("verify", str(report.folder), workspace=report.workspace)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 2 runs match" in done.stdout


def test_a_moved_estimate_of_a_deterministic_run_is_named(report, tmp_path):
    def nudge(papers: dict) -> None:
        criterion = papers["causal_fairness"]["criteria"][2]
        criterion["estimate"] *= 1 + 1e-6  # far above 1e-9 relative

    folder = edited(report, tmp_path, nudge)
    done = cli("verify", str(folder), "--only", "causal_fairness", "--json",
               workspace=report.workspace)
    assert done.returncode == 1, done.stderr
    outcome = json.loads(done.stdout)
    recorded = json.loads((report.folder / "report.json").read_text())
    name = recorded["papers"][0]["criteria"][2]["name"]
    assert not outcome["ok"] and len(outcome["moved"]) == 1
    line = outcome["moved"][0]
    assert line.startswith("causal_fairness (run ") and repr(name) in line
    assert "estimate" in line and "deterministic" in line
    assert [r["slug"] for r in outcome["runs"]] == ["causal_fairness"]  # --only


def test_a_nondeterministic_run_is_held_to_its_interval(report, tmp_path):
    def move_interval(papers: dict) -> None:
        papers["diag"]["criteria"][0]["interval"] = [2.0, 3.0]  # the rerun's 1.5 lies below

    folder = edited(report, tmp_path, move_interval)
    done = cli("verify", str(folder), "--only", "diag", workspace=report.workspace)
    assert done.returncode == 1
    assert "moved: diag (run " in done.stdout
    assert "'diagnostic estimate above 0': estimate 1.5 is outside the recorded interval " \
           "[2, 3]" in done.stdout and "1 of 1 runs moved" in done.stdout


def test_a_nondeterministic_estimate_inside_its_interval_passes(report, tmp_path):
    def shift_estimate(papers: dict) -> None:
        papers["diag"]["criteria"][0]["estimate"] = 1.2  # the rerun's 1.5 is still inside

    folder = edited(report, tmp_path, shift_estimate)
    done = cli("verify", str(folder), "--only", "diag", workspace=report.workspace)
    assert done.returncode == 0 and "all 1 runs match" in done.stdout


def test_unreadable_report_is_a_usage_error_naming_the_file(report, tmp_path):
    (tmp_path / "report.json").write_text("{not json")
    done = cli("verify", str(tmp_path), workspace=report.workspace)
    assert done.returncode == 2 and f"{tmp_path / 'report.json'}: not JSON" in done.stderr
    done = cli("verify", str(report.folder), "--only", "pita", workspace=report.workspace)
    assert done.returncode == 2 and "no reported run of pita" in done.stderr


def test_settings_the_method_no_longer_accepts_are_named(report, tmp_path):
    """A run recorded before its method's parameters changed cannot be rerun as recorded."""
    def add_setting(papers: dict) -> None:
        papers["diag"]["settings"]["retired_setting"] = 3

    folder = edited(report, tmp_path, add_setting)
    done = cli("verify", str(folder), "--only", "diag", workspace=report.workspace)
    assert done.returncode == 1
    assert "the rerun exited 2: studio-engine: invalid parameters for diag.reproduce: " \
           "retired_setting: unknown parameter" in done.stdout
