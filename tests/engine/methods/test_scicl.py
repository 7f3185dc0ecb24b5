"""scicl: the closed-loop simulator against its linear theory, controllers, replay, estimator,
and the methods run end to end on tiny grids."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.methods import scicl
from engine.models import belief_dynamics as bd

SPECS = {spec.id: spec for spec in scicl.SPECS}
RHO = 0.1


def rate(g_u: float, g_a: float, cfg: bd.DyadConfig | None = None, turns: int = 300,
         seeds: int = 40, seed: int = 0) -> float:
    result = bd.simulate(np.array(g_u), np.array(g_a), cfg or bd.DyadConfig(), turns, seeds,
                         np.random.default_rng(seed))
    return float(result.collapsed.mean())


# -- theory ------------------------------------------------------------------------------------

def test_closed_form_radius_matches_numpy_eigenvalues():
    rng = np.random.default_rng(0)
    m = rng.normal(size=(200, 2, 2))
    expected = np.abs(np.linalg.eigvals(m)).max(-1)
    assert np.allclose(bd.spectral_radius(m), expected)


def test_critical_gain_puts_the_radius_on_the_boundary():
    g_u = np.array([0.05, 0.1, 0.3])
    for rho_u, rho_a, target in ((0.1, 0.1, 1.0), (0.05, 0.2, 1.0), (0.1, 0.2, 0.95)):
        g_a = bd.critical_assistant_gain(g_u, rho_u, rho_a, radius=target)
        assert np.allclose(bd.theoretical_radius(g_u, g_a, rho_u, rho_a), target)
    assert np.allclose(bd.critical_assistant_gain(g_u, 0.1, 0.2), 0.1 * 0.2 / g_u)


# -- the simulator -----------------------------------------------------------------------------

def test_collapses_above_the_theoretical_boundary_and_not_below():
    assert rate(0.15, 0.15) > 0.8        # radius 1.05
    assert rate(0.2, 0.2) == 1.0         # radius 1.10
    assert rate(0.07, 0.07) == 0.0       # radius 0.97
    assert rate(0.2, 0.03) == 0.0        # g_u g_a = 0.006 < rho^2: a large user gain alone


def test_risk_is_dyadic_neither_side_alone_destabilises():
    assert rate(2.0, 0.0) == 0.0 and rate(0.0, 2.0) == 0.0
    assert rate(0.4, 0.4) == 1.0


def test_vectorised_grid_matches_a_loop_over_points():
    gains = np.array([0.02, 0.09, 0.12, 0.3])
    cfg = bd.DyadConfig(noise=0.0)
    grid = bd.simulate(gains[:, None], gains[None, :], cfg, 120, 1, np.random.default_rng(0),
                       record=True, initial=(0.3, -0.2))
    for i, g_u in enumerate(gains):
        for j, g_a in enumerate(gains):
            point = bd.simulate(np.array(g_u), np.array(g_a), cfg, 120, 1,
                                np.random.default_rng(5), record=True, initial=(0.3, -0.2))
            assert np.allclose(grid.beliefs[i, j], point.beliefs)
            assert grid.collapsed[i, j] == point.collapsed
            assert grid.onset[i, j] == point.onset


def test_noisy_grid_rates_match_single_point_rates():
    gains = np.array([0.08, 0.2])
    grid = bd.simulate(gains[:, None], gains[None, :], bd.DyadConfig(), 250, 60,
                       np.random.default_rng(1)).collapsed.mean(-1)
    for i, g_u in enumerate(gains):
        for j, g_a in enumerate(gains):
            assert abs(grid[i, j] - rate(g_u, g_a, turns=250, seeds=60, seed=2)) < 0.2


def test_controllers_change_the_outcome():
    assert rate(0.25, 0.25) == 1.0
    damped = bd.DyadConfig(controller="damping", damping_eps=0.05)
    assert rate(0.25, 0.25, damped) == 0.0
    effective = bd.effective_assistant_gain(0.25, 0.25, damped)
    assert math.isclose(float(bd.theoretical_radius(0.25, effective, RHO, RHO)), 0.95)
    assert bd.effective_assistant_gain(0.05, 0.03, damped) == 0.03  # already stable: untouched
    barrier = bd.DyadConfig(controller="barrier", barrier_bound=2.0)
    result = bd.simulate(np.array(0.25), np.array(0.25), barrier, 300, 20,
                         np.random.default_rng(0), record=True)
    assert not result.collapsed.any()
    assert np.abs(result.beliefs[..., 1]).max() < 2.0


def test_adaptive_damping_estimates_the_user_gain_online():
    adaptive = bd.DyadConfig(controller="adaptive", radius_window=10)
    assert rate(0.25, 0.25, adaptive, turns=200, seeds=20) == 0.0
    late = bd.DyadConfig(controller="adaptive", radius_window=60)  # too late at high gain
    assert rate(0.3, 0.3, late, turns=200, seeds=20) > 0.5


def test_radius_criterion_flags_the_unstable_loop():
    radius_only = bd.DyadConfig(criterion="radius", hold_turns=10, radius_window=60)
    assert rate(0.3, 0.3, radius_only, turns=200, seeds=40) > 0.9
    assert rate(0.03, 0.03, radius_only, turns=200, seeds=40) < 0.05
    either = bd.DyadConfig(criterion="either", hold_turns=10, radius_window=60)
    assert rate(0.3, 0.3, either, turns=200, seeds=40) == 1.0


def test_posterior_rises_in_an_s_shape_when_the_dyad_commits():
    result = bd.simulate(np.array(0.2), np.array(0.2), bd.DyadConfig(), 300, 4,
                         np.random.default_rng(3), record=True)
    for seed in range(4):
        posterior = result.posterior[seed]
        assert posterior[:5].max() < 0.5 and posterior[-20:].min() > 0.99
        onset = result.onset[seed]
        assert posterior[onset] >= 0.99 and result.entropy[seed, onset + 10] <= 0.5


def test_open_loop_replay_does_not_collapse_where_the_closed_loop_does():
    cfg, rng = bd.DyadConfig(), np.random.default_rng(4)
    recorded = bd.simulate(np.array(0.25), np.array(0.0), cfg, 250, 20, rng, record=True)
    replayed = bd.replay(recorded.evidence, 0.25, cfg, rng)
    closed = bd.simulate(np.array(0.25), np.array(0.25), cfg, 250, 20, rng, record=True)
    assert np.mean(np.abs(replayed[:, -50:]) > 2.0) < 0.1
    assert np.mean(np.abs(closed.beliefs[:, -50:, 1]) > 2.0) > 0.95


def test_gain_assay_recovers_both_gains():
    g_u, g_a = bd.gain_assay(np.array([0.1, 0.3]), np.array([0.2, 0.05]), bd.DyadConfig(),
                             np.random.default_rng(0), samples=4000)
    assert np.allclose(g_u, [0.1, 0.3], atol=0.02) and np.allclose(g_a, [0.2, 0.05], atol=0.02)


# -- the estimator -----------------------------------------------------------------------------

def test_least_squares_recovers_the_loop_matrix():
    cfg = bd.DyadConfig(saturation=1e6, criterion="radius")  # effectively linear
    result = bd.simulate(np.array(0.05), np.array(0.12), cfg, 2000, 1, np.random.default_rng(0),
                         record=True)
    m = bd.fit_transition(result.beliefs[0])
    assert np.allclose(m, bd.transition_matrix(0.05, 0.12, RHO, RHO), atol=0.03)
    draws = bd.bootstrap_radius(result.beliefs[0, :201], np.random.default_rng(1), 300)
    theory = float(bd.theoretical_radius(0.05, 0.12, RHO, RHO))
    assert np.quantile(draws, 0.01) < theory < np.quantile(draws, 0.99)


def test_rolling_radius_crosses_one_near_collapse_onset():
    result = bd.simulate(np.array(0.2), np.array(0.2), bd.DyadConfig(), 250, 1,
                         np.random.default_rng(2), record=True)
    turns, estimate, low, high = bd.rolling_radius(result.beliefs[0], 40,
                                                   np.random.default_rng(0), 100)
    assert np.all(low <= estimate + 1e-9) and np.all(estimate <= high + 1e-9)
    onset = int(result.onset[0])
    first_above = int(turns[np.argmax(estimate >= 1)])
    assert estimate.max() >= 1 and abs(first_above - onset) <= 40


# -- methods -----------------------------------------------------------------------------------

def context(tmp_path) -> tuple[JobContext, list[dict]]:
    events: list[dict] = []
    return JobContext("j", tmp_path, emit=events.append, seed=0), events


def test_simulate_writes_every_plot_and_the_turn_table(tmp_path):
    ctx, events = context(tmp_path)
    spec = SPECS["scicl.simulate"]
    outputs = spec.run(ctx, spec.params(g_user=0.25, g_assistant=0.25, turns=120, seeds=6,
                                        bootstrap=20, spectral_window=30), {})
    assert outputs["collapse_rate"] > 0.5 and outputs["collapse_rate_controlled"] == 0.0
    for name in ("trajectories", "phase_plane", "posterior", "spectral_radius", "controller",
                 "open_loop_replay"):
        figure = json.loads((tmp_path / outputs[name]).read_text())
        assert figure["kind"] == "plot" and figure["series"], name
    band = json.loads((tmp_path / outputs["spectral_radius"]).read_text())["series"][0]
    assert "lo" in band and "hi" in band
    table = json.loads((tmp_path / outputs["turns"]).read_text())
    assert table["columns"] == scicl.TURN_COLUMNS and len(table["rows"]) == 120
    assert np.load(tmp_path / outputs["beliefs"]).shape == (6, 121, 2)
    csv_lines = (tmp_path / outputs["turns_csv"]).read_text().splitlines()
    assert csv_lines[0] == ",".join(scicl.TURN_COLUMNS) and len(csv_lines) == 121
    assert any(e["type"] == "job_progress" for e in events)


def test_gain_map_draws_the_boundary_over_the_collapse_map(tmp_path):
    ctx, events = context(tmp_path)
    spec = SPECS["scicl.gain_map"]
    outputs = spec.run(ctx, spec.params(grid=7, turns=150, seeds=6), {})
    kinds = {e["name"]: e["kind"] for e in events if e["type"] == "job_artifact"}
    assert kinds["collapse_map"] == kinds["controlled_map"] == "plot"  # the panels draw them
    collapse_map = json.loads((tmp_path / outputs["collapse_map"]).read_text())
    assert collapse_map["kind"] == "heatmap" and len(collapse_map["z"]) == 7
    boundary = collapse_map["series"][0]
    assert np.allclose(np.array(boundary["x"]) * np.array(boundary["y"]), RHO * RHO)
    assert outputs["collapse_rate_supercritical"] > outputs["controlled_rate_supercritical"]
    assert outputs["collapse_rate_subcritical"] < 0.05


def test_boundary_interpolation():
    gains = np.array([0.0, 0.1, 0.2, 0.3])
    rates = np.array([[0, 0, 0, 0], [0, 0.2, 0.8, 1], [0.6, 1, 1, 1.0]])
    found = scicl.boundary_gains(rates, gains)
    assert np.isnan(found[0]) and np.isclose(found[1], 0.15) and np.isnan(found[2])


def test_bad_parameters_are_named():
    with pytest.raises(ValidationError, match="rho_user"):
        SPECS["scicl.simulate"].params(rho_user=1.5)
    with pytest.raises(ValidationError, match="controler"):
        SPECS["scicl.gain_map"].params(controler="damping")


def test_cancel_stops_the_simulation(tmp_path):
    ctx, _ = context(tmp_path)
    ctx.request_cancel()
    spec = SPECS["scicl.gain_map"]
    with pytest.raises(Cancelled):
        spec.run(ctx, spec.params(grid=4, turns=50, seeds=2), {})


def test_reproduce_smoke_returns_a_claim(tmp_path):
    ctx, _ = context(tmp_path)
    spec = SPECS["scicl.reproduce"]
    claim = spec.run(ctx, spec.params(smoke=True), {})["claim"]
    assert claim["smoke"] and claim["paper"] == "scicl"
    assert [c["name"][:4] for c in claim["criteria"]] == ["(1) ", "(2) ", "(3a)", "(3b)"]
    assert [c["target"] for c in claim["criteria"]] == [0.10, 0.05, 0.80, 0.10]
    for criterion in claim["criteria"]:
        assert math.isfinite(criterion["measured"]) and criterion["paper"]
    json.dumps(claim)


# -- language-model dialogues (a local server speaking the chat API) ---------------------------

KEY = "sk-scicl-secret-4242"


def fake_models(body: dict) -> str:
    """Scores climb with each exchange (the dyad warms up); dialogue turns are numbered."""
    system = body["messages"][0]["content"]
    if system == scicl.SCORER_PROMPT:
        number = int(body["messages"][-1]["content"].split()[-1])
        return f"{min(0.5 + 0.1 * number, 0.99):.2f}"
    said = sum(m["role"] == "assistant" for m in body["messages"])
    speaker = "user" if "susceptib" in system or "person chatting" in system else "assistant"
    return f"{speaker} says {said + 1}"


@pytest.fixture
def chat_server():
    from tests.engine.test_chat_endpoint import FakeChatServer

    with FakeChatServer(fake_models).running() as server:
        yield server


def llm_params(server, **overrides):
    values = {"base_url": server.base_url, "model": "m-test", "api_key": KEY, "turns": 3,
              "opening": "hello 0", "timeout_s": 0.5, "retries": 1, **overrides}
    return SPECS["scicl.llm_dialogue"].params(**values)


def run_folder_text(folder) -> str:
    return "".join(path.read_bytes().decode("utf-8", "replace")
                   for path in folder.rglob("*") if path.is_file())


def test_llm_dialogue_saves_a_scored_transcript_and_replays_offline(tmp_path, chat_server):
    spec = SPECS["scicl.llm_dialogue"]
    ctx, _ = context(tmp_path / "run1")
    outputs = spec.run(ctx, llm_params(chat_server, temperature=0.2), {})
    lines = [json.loads(line) for line in
             (tmp_path / "run1" / outputs["transcript"]).read_text().splitlines()]
    assert [line["role"] for line in lines] == ["user", "assistant"] * 3
    assert lines[1]["content"] == "assistant says 1" and lines[2]["content"] == "user says 2"
    assert lines[1]["score"] == 0.6 and lines[1]["belief"] == pytest.approx(math.log(1.5))
    endpoint = json.loads((tmp_path / "run1" / outputs["endpoint"]).read_text())
    assert endpoint["assistant"]["model"] == "m-test"
    assert endpoint["assistant"]["temperature"] == 0.2 and endpoint["assistant"]["seed"] == 0
    assert KEY not in run_folder_text(tmp_path / "run1")
    calls = len(chat_server.requests)
    ctx2 = JobContext("j2", tmp_path / "run2", emit=lambda e: None, seed=0,
                      cache_root=tmp_path / "run1" / "cache")
    again = spec.run(ctx2, llm_params(chat_server, temperature=0.2, offline=True,
                                      api_key=None), {})
    assert len(chat_server.requests) == calls  # re-scored from the cache, no call
    assert (tmp_path / "run2" / again["transcript"]).read_text() == \
        (tmp_path / "run1" / outputs["transcript"]).read_text()


def test_persona_only_ablation_drops_the_numeric_labels(tmp_path, chat_server):
    spec = SPECS["scicl.llm_dialogue"]
    spec.run(context(tmp_path / "a")[0], llm_params(chat_server, scorer="lexicon"), {})
    labelled = {r["messages"][0]["content"] for r in chat_server.requests}
    chat_server.requests.clear()
    spec.run(context(tmp_path / "b")[0], llm_params(chat_server, scorer="lexicon",
                                                    coupling_labels=False), {})
    plain = {r["messages"][0]["content"] for r in chat_server.requests}
    assert any("0.80 on a 0-1 scale" in s for s in labelled)
    assert not any("0-1 scale" in s for s in plain)


def test_endpoint_errors_fail_the_job_with_the_reason(tmp_path, chat_server):
    from engine.chat_endpoint import ChatError

    chat_server.script.extend(["ok"] * 3 + ["500", "500"])  # the second exchange fails
    ctx, _ = context(tmp_path)
    with pytest.raises(ChatError) as caught:
        SPECS["scicl.llm_dialogue"].run(ctx, llm_params(chat_server), {})
    message = str(caught.value)
    assert "HTTP 500" in message and "gave up after 2 attempts" in message
    assert message.startswith("turn 2:")
    assert KEY not in message and KEY not in run_folder_text(tmp_path)
    saved = (tmp_path / "artifacts" / "transcript.jsonl").read_text().splitlines()
    assert len(saved) == 2  # what was said before the failure is kept


def test_score_transcripts_on_imported_hh_pairs(tmp_path):
    path = tmp_path / "pairs.jsonl"
    good = json.dumps({"chosen": "\n\nHuman: great, yes I agree\n\nAssistant: absolutely "
                                 "right, wonderful\n\nHuman: yes love it\n\nAssistant: perfect",
                       "rejected": "\n\nHuman: hmm\n\nAssistant: no, that is wrong"})
    path.write_text(good + "\n{broken\n" + good + "\n")
    ctx, _ = context(tmp_path / "run")
    spec = SPECS["scicl.score_transcripts"]
    outputs = spec.run(ctx, spec.params(), {"transcripts": str(path)})
    assert outputs["transcripts"] == 4 and outputs["malformed_lines"] == 1
    summary = json.loads((tmp_path / "run" / outputs["summary"]).read_text())
    assert [row[0] for row in summary["rows"]] == ["1/chosen", "1/rejected", "3/chosen",
                                                   "3/rejected"]
    turns = json.loads((tmp_path / "run" / outputs["turns"]).read_text())
    chosen_reply = turns["rows"][1]
    assert chosen_reply[2] == "assistant" and chosen_reply[4] > 0.5


def test_the_key_appears_nowhere_in_the_workspace(tmp_path, chat_server):
    import subprocess
    import sys

    workspace = tmp_path / "ws"
    command = [sys.executable, "-m", "engine", "run", "scicl.llm_dialogue", "--json",
               "--workspace", str(workspace), "--set", f"base_url={chat_server.base_url}",
               "--set", f"api_key={KEY}", "--set", "turns=2", "--set", "scorer=lexicon"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert chat_server.headers[0]["Authorization"] == f"Bearer {KEY}"
    assert KEY not in run_folder_text(workspace)
    assert KEY not in done.stdout


def test_rerun_from_an_edited_turn_continues_the_dialogue(tmp_path, chat_server):
    from engine.io.transcripts import Transcript, Turn, write_jsonl

    edited = [Turn("user", "hello 0"), Turn("assistant", "assistant says 1"),
              Turn("user", "I changed my mind 7"), Turn("assistant", "dropped")]
    prefix = write_jsonl(tmp_path / "edited.jsonl", [Transcript("d", edited)])
    ctx, _ = context(tmp_path / "run")
    spec = SPECS["scicl.llm_dialogue"]
    outputs = spec.run(ctx, llm_params(chat_server, turns=3, prefix_turns=3),
                       {"prefix": str(prefix)})
    lines = [json.loads(line) for line in
             (tmp_path / "run" / outputs["transcript"]).read_text().splitlines()]
    assert [line["content"] for line in lines[:3]] == ["hello 0", "assistant says 1",
                                                       "I changed my mind 7"]
    assert len(lines) == 6 and lines[3]["role"] == "assistant"
    replies = [r for r in chat_server.requests
               if r["messages"][0]["content"] != scicl.SCORER_PROMPT]
    assert replies[0]["messages"][-1]["content"] == "I changed my mind 7"
