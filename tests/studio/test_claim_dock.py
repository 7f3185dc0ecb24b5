"""The "Paper claims" dock: the panel in front's papers and their latest claims (from the
workspace), the claim view, Reproduce… with a profile, and Open report."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from studio import claim_dock
from studio.claim_dock import install_claim_dock, paper_owners
from studio.widgets import claim_view


@functools.cache
def listing() -> tuple[dict, ...]:
    """The engine's real method listing (what the bridge holds once the engine is up)."""
    from engine.registry import describe_all

    return tuple(describe_all())


def claim(paper: str, verdict: str, **extra) -> dict:
    row = {"name": f"{paper} holds", "quote": "the abstract's words", "estimate": 0.4,
           "interval": [0.2, 0.6], "level": 0.95, "method": "t-interval over 3 seeds",
           "rule": {"kind": "above", "threshold": 0.0, "band": None, "censored": False},
           "parts": [], "aggregate": "all", "verdict": verdict, "decides_with": ""}
    return {"paper": paper, "statement": f"{paper}'s claim", "spec": "v2", "verdict": verdict,
            "passed": verdict == "PASS", "criteria": [row], "sanity": [], "seeds": [0, 1, 2],
            "wall_s": 2.0, "smoke": False, "profile": "cpu", "settings": {},
            "exploratory": False, "notes": ""} | extra


def add_reproduction(workspace, paper: str, the_claim: dict | None, state="succeeded") -> str:
    """A finished reproduce run in the workspace, as the engine leaves it."""
    run_id = workspace.create_run(f"{paper}.reproduce", {"profile": "cpu"}, 0)
    workspace.set_state(run_id, state)
    if the_claim is not None:
        workspace.write_result(run_id, {"state": state, "outputs": {"claim": the_claim}})
    return run_id


def test_each_paper_has_one_owning_panel() -> None:
    from studio.panel_registry import PanelRegistry

    manifests = {k: e.manifest for k, e in PanelRegistry().entries().items()}
    owners = paper_owners(list(listing()), manifests)
    assert {paper: owners[paper] for paper in ("brainworld", "kcgm", "branching_flows",
                                               "chipstar", "c2r", "sae_pc1", "scicl")} == {
        "brainworld": "fmri", "kcgm": "molecules", "branching_flows": "molecules",
        "chipstar": "routing", "c2r": "crowd", "sae_pc1": "sae", "scicl": "dialogue"}
    assert owners["eos"] == "lab" and owners["svan"] == "lab"


@pytest.fixture
def window_with_dock(main_window, qtbot):
    main_window.bridge.methods = list(listing())
    dock = install_claim_dock(main_window)
    return main_window, dock


def test_the_dock_is_hidden_until_asked_from_the_view_menu(window_with_dock, qtbot):
    window, dock = window_with_dock
    assert dock.isHidden()
    view_menu = next(a.menu() for a in window.menuBar().actions()
                     if a.text().replace("&", "") == "View")
    entry = next(a for a in view_menu.actions() if a.text().replace("&", "") == "Paper claims")
    entry.trigger()
    assert dock.isVisible()
    assert "Open a panel" in window.claim_dock.heading.text()  # the welcome page is in front


def test_the_panel_in_front_shows_the_latest_claim_of_each_paper_it_owns(window_with_dock,
                                                                          qtbot):
    window, dock = window_with_dock
    workspace = window.workspace
    add_reproduction(workspace, "scicl", claim("scicl", "FAIL"))
    newest = add_reproduction(workspace, "scicl", claim("scicl", "INCONCLUSIVE",
                                                        exploratory=True,
                                                        overrides={"turns": 4}))
    add_reproduction(workspace, "scicl", None, state="failed")  # not a claim: passed over
    add_reproduction(workspace, "eos", claim("eos", "PASS"))
    broken = add_reproduction(workspace, "svan", None)
    (workspace.run_dir(broken) / "result.json").write_text("{not json")
    dock.show()
    content = window.claim_dock
    window.open_panel("dialogue")
    qtbot.waitUntil(lambda: content.claim_view.claim is not None, timeout=10_000)
    assert content.panel_id == "dialogue" and "Dialogue" in content.heading.text()
    assert content.claim_view.verdict() == "INCONCLUSIVE"
    assert "EXPLORATORY" in content.claim_view.marks.text()
    assert newest in content.run_label.text()
    assert content.papers.isHidden()  # one paper: no list to choose from
    window.open_panel("lab")  # the lab owns the papers without a domain panel
    qtbot.waitUntil(lambda: content.panel_id == "lab" and bool(content.claims), timeout=10_000)
    rows = {content.papers.item(i).data(claim_dock.PAPER_ROLE): content.papers.item(i).text()
            for i in range(content.papers.count())}
    assert "scicl" not in rows and "kcgm" not in rows and "chipstar" not in rows
    assert content.selected_paper() == "eos"  # the first paper with a claim to show
    assert rows["eos"] == "eos  PASS  (cpu)"
    assert rows["pita"] == "pita  — not reproduced yet"
    assert rows["svan"] == "svan  — unreadable claim"
    content.papers.setCurrentRow(list(rows).index("svan"))
    assert "result.json: not a readable claim" in content.run_label.text()
    assert content.claim_view.claim is None
    content.papers.setCurrentRow(list(rows).index("eos"))
    assert content.claim_view.verdict() == "PASS"
    window.tabs.setCurrentIndex(0)
    assert "Open a panel" in content.heading.text() and content.papers.count() == 0


def test_reproduce_with_a_profile_and_open_the_report(window_with_dock, qtbot, monkeypatch):
    window, dock = window_with_dock
    add_reproduction(window.workspace, "scicl", claim("scicl", "PASS"))
    dock.show()
    window.open_panel("dialogue")
    content = window.claim_dock
    qtbot.waitUntil(lambda: content.claim_view.claim is not None, timeout=10_000)
    submitted, asked, opened = [], [], []
    monkeypatch.setattr(window, "submit", lambda method, params, **kw: (
        submitted.append((method, params)), kw["on_accepted"]("job-1")))
    gpu = content.profile_actions["gpu"]
    assert gpu.statusTip().startswith("gpu profile:")  # the profile's settings
    gpu.trigger()
    assert submitted == [("scicl.reproduce", {"profile": "gpu"})]
    assert "job-1" in content.status.text()

    def request(name, args, on_reply, on_error=None):
        asked.append((name, args))
        on_reply({"path": str(Path(args["out"]) / "index.html")})

    monkeypatch.setattr(window.host, "request", request)
    monkeypatch.setattr(claim_view, "open_in_browser", lambda path: opened.append(path) or True)
    content.report_button.click()
    assert asked == [("report", {"slugs": ["scicl"], "out": str(
        Path(window.workspace.root) / "reports" / "scicl")})]
    assert opened == [str(Path(window.workspace.root) / "reports" / "scicl" / "index.html")]
    assert "Opened the report" in content.status.text()


def test_a_finished_reproduction_refreshes_the_dock(window_with_dock, qtbot):
    window, dock = window_with_dock
    dock.show()
    window.open_panel("dialogue")
    content = window.claim_dock
    qtbot.waitUntil(lambda: "scicl" in content.claims, timeout=10_000)
    assert content.claim_view.claim is None
    run_id = add_reproduction(window.workspace, "scicl", claim("scicl", "PASS"))
    window.bridge.jobs.register(run_id, "scicl.reproduce", {"profile": "cpu"}, {}, 0)
    window.bridge.jobs.apply({"type": "job_state", "job": run_id,
                              "content": {"state": "succeeded", "reason": ""}})
    qtbot.waitUntil(lambda: content.claim_view.verdict() == "PASS", timeout=10_000)


def test_open_report_through_the_engine_writes_and_opens_the_paper_s_page(ready_window, qtbot,
                                                                         monkeypatch):
    window = ready_window
    add_reproduction(window.workspace, "scicl", claim("scicl", "PASS"))
    install_claim_dock(window).show()
    window.open_panel("dialogue")
    content = window.claim_dock
    qtbot.waitUntil(lambda: content.claim_view.claim is not None, timeout=30_000)
    opened: list[str] = []
    monkeypatch.setattr(claim_view, "open_in_browser", lambda path: opened.append(path) or True)
    content.report_button.click()
    qtbot.waitUntil(lambda: bool(opened) or content.status.text().startswith("No report"),
                    timeout=120_000)
    assert opened, content.status.text()
    page = Path(opened[0])
    assert page == Path(window.workspace.root) / "reports" / "scicl" / "index.html"
    assert "scicl" in page.read_text(encoding="utf-8")
