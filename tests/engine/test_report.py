"""``studio-engine report`` from real reproductions: what it reports, what it never reports as
the verdict, and that the HTML, PDF, JSON and Markdown forms all say it."""

from __future__ import annotations

import asyncio
import html
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.client import launch_engine
from engine.workspace import Workspace
from tests.engine.conftest import connect

pytestmark = pytest.mark.slow


def cli(*args: str, workspace: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "engine", *args, "--workspace", str(workspace)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def reproduce(workspace: Path, *args: str) -> dict:
    """A real reproduction through the CLI; its claim and run id."""
    out = cli("reproduce", *args, "--json", workspace=workspace)
    assert out.returncode in (0, 3, 4), out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """A workspace with: a real smoke run of causal_fairness (its only run, on one thread);
    for diag, a smoke run, then a cpu run (FAIL, seed 1), then a newer exploratory one (PASS)."""
    workspace = tmp_path_factory.mktemp("reproductions")
    made = {"workspace": workspace}
    made["fairness"] = reproduce(workspace, "causal_fairness", "--profile", "smoke",
                                 "--threads", "1")
    made["diag_smoke"] = reproduce(workspace, "diag", "--profile", "smoke")
    made["diag_cpu"] = reproduce(workspace, "diag", "--profile", "cpu", "--seed", "1")
    made["diag_exploratory"] = reproduce(workspace, "diag", "--profile", "cpu",
                                         "--set", "margin=3")
    return made


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("report") / "site"
    markdown = out.parent / "reproductions.md"
    done = cli("report", "causal_fairness", "diag", "pita", "--out", str(out), "--markdown",
               str(markdown), "--json", workspace=runs["workspace"])
    assert done.returncode == 0, done.stderr
    paths = json.loads(done.stdout)
    return {"out": out, "paths": paths, "json": json.loads((out / "report.json").read_text()),
            "html": (out / "index.html").read_text(), "markdown": markdown.read_text()}


def papers(report: dict) -> dict:
    return {p["slug"]: p for p in report["json"]["papers"]}


def test_html_has_every_criterion_with_its_quote_and_the_claim(runs, report):
    page = report["html"]
    claim = runs["fairness"]
    assert html.escape(claim["statement"]) in page
    for criterion in claim["criteria"]:
        assert html.escape(criterion["name"]) in page
        assert html.escape(criterion["quote"]) in page
    assert "<script" not in page and "http://" not in page and "https://" not in page
    for name in papers(report)["causal_fairness"]["figures"] + ["causal_fairness-forest.png"]:
        assert f'src="{name}"' in page and (report["out"] / name).stat().st_size > 1000


def test_exploratory_runs_are_never_the_verdict_and_smoke_only_when_alone(runs, report):
    diag = papers(report)["diag"]
    assert diag["run_id"] == runs["diag_cpu"]["run_id"]  # not the newer exploratory PASS
    assert diag["verdict"] == "FAIL" and diag["profile"] == "cpu" and not diag["smoke"]
    assert diag["exploratory_runs"] == [runs["diag_exploratory"]["run_id"]]
    assert runs["diag_smoke"]["run_id"] not in json.dumps(diag)
    fairness = papers(report)["causal_fairness"]
    assert fairness["smoke"] and fairness["run_id"] == runs["fairness"]["run_id"]
    assert "SMOKE" in report["html"] and "SMOKE" in report["markdown"]
    section = report["html"].split('id="diag"')[1]
    assert runs["diag_exploratory"]["run_id"] in section and "Exploratory runs" in section


def test_json_records_what_a_rerun_needs(runs, report):
    fairness = papers(report)["causal_fairness"]
    assert fairness["threads"] == 1 and fairness["deterministic"] is True
    assert fairness["seed"] == 0 and fairness["settings"] == runs["fairness"]["settings"]
    assert fairness["command"].startswith("studio-engine reproduce causal_fairness --profile "
                                          "smoke --seed 0 --threads 1")
    estimates = [c["estimate"] for c in fairness["criteria"]]
    assert estimates == [c["estimate"] for c in runs["fairness"]["criteria"]]
    assert fairness["provenance"]["git"] and fairness["provenance"]["packages"]["numpy"]
    diag = papers(report)["diag"]
    assert diag["deterministic"] is False  # more than one thread
    assert diag["criteria"][0]["interval"] == runs["diag_cpu"]["criteria"][0]["interval"]
    assert diag["sanity"][0]["name"] == "never counted"
    assert papers(report)["pita"]["status"] == "not run"
    assert set(report["paths"]) == {"path", "pdf", "json", "markdown"}


def test_not_run_papers_are_listed(report):
    assert "<b>not run</b>" in report["html"].split('id="pita"')[1]
    assert "| [pita](#pita) | not run |" in report["markdown"]


def test_pdf_opens_and_holds_the_pages(runs, report):
    pdf = report["out"] / "report.pdf"
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True)
    pages = int(next(line.split()[-1] for line in info.stdout.splitlines()
                     if line.startswith("Pages:")))
    # summary, then per paper: text, forest, figures (causal_fairness has 6: one page)
    assert pages >= 1 + 3 + 2
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True,
                          text=True, check=True).stdout
    assert "pita: not run" in text and "diag: FAIL" in text
    flat = " ".join(text.split())
    for criterion in runs["fairness"]["criteria"]:
        assert criterion["name"][:40] in flat
    assert "Sanity checks (never counted)" in flat and "studio-engine reproduce diag" in flat


def test_markdown_links_pictures_relative_to_itself(report):
    markdown = report["markdown"]
    assert "](site/causal_fairness-forest.png)" in markdown
    assert "| **FAIL** |" in markdown


def test_findings_written_by_hand_are_included(runs, tmp_path):
    from engine.report import build_report

    findings = tmp_path / "findings"
    findings.mkdir()
    (findings / "diag.md").write_text("A *finding* <script>alert(1)</script>\n\n| a | b |\n"
                                      "|---|---|\n| 1 | 2 |\n")
    paths = build_report(Workspace(runs["workspace"]), tmp_path / "out", ["diag"],
                         markdown=tmp_path / "out.md", findings_dir=findings)
    page = Path(paths["path"]).read_text()
    assert "<em>finding</em>" in page and "<td>1</td>" in page
    assert "<script>" not in page  # raw HTML in a findings file is shown, never run
    assert "A *finding*" in Path(paths["markdown"]).read_text()


def test_unknown_paper_is_a_usage_error(runs, tmp_path):
    done = cli("report", "no_such_paper", "--out", str(tmp_path), workspace=runs["workspace"])
    assert done.returncode == 2 and "unknown paper 'no_such_paper'" in done.stderr


def test_report_imports_no_torch(runs, tmp_path):
    code = ("import sys; from engine.cli import main; "
            f"code = main(['report', 'diag', '--out', {str(tmp_path)!r}, '--workspace', "
            f"{str(runs['workspace'])!r}]); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_engine_builds_the_report_on_request(runs, tmp_path):
    """The lab's "Open report" calls ``request report {slugs, out}`` and opens ``path``."""
    engine = launch_engine(str(runs["workspace"]), workers=1)
    try:
        async def scenario() -> dict:
            session = await connect(engine)
            try:
                return await session.client.request(
                    "report", {"slugs": ["diag"], "out": str(tmp_path / "from-gui")})
            finally:
                await session.client.close()

        reply = asyncio.run(scenario())
        assert Path(reply["path"]) == tmp_path / "from-gui" / "index.html"
        assert Path(reply["path"]).is_file() and Path(reply["pdf"]).is_file()
        maps = Path(f"/proc/{engine.process.pid}/maps")
        if maps.exists():  # the engine process itself drew it, without loading torch
            assert "libtorch" not in maps.read_text()
    finally:
        engine.kill()


def test_forest_plot_draws_each_verdict_in_its_colour(tmp_path):
    """Pixels: a PASS row is green and a FAIL row red (the colours the claim view uses)."""
    import numpy as np
    from matplotlib.image import imread

    from engine import verdicts
    from engine.report_draw import forest_figure

    passed = verdicts.criterion("a", "q", verdicts.Interval(2.0, 1.5, 2.5, 0.95, "t"),
                                verdicts.Rule.above(0.0)).to_dict()
    failed = verdicts.criterion("b", "q", verdicts.Interval(-2.0, -2.5, -1.5, 0.95, "t"),
                                verdicts.Rule.above(0.0)).to_dict()
    figure = forest_figure([passed, failed])
    figure.savefig(tmp_path / "forest.png")
    pixels = (imread(tmp_path / "forest.png")[..., :3] * 255).astype(int)
    top, bottom = np.array_split(pixels, 2, axis=0)
    green, red = np.array([0x1E, 0x84, 0x49]), np.array([0xC0, 0x39, 0x2B])

    def count(part: np.ndarray, colour: np.ndarray) -> int:
        return int((np.abs(part - colour).sum(axis=-1) < 30).sum())

    assert count(top, green) > 50 and count(top, red) == 0
    assert count(bottom, red) > 50 and count(bottom, green) == 0
