"""markovization_gap: couplings, bridges and the kNN gap estimator against closed forms and
torchcfm; the methods' artifacts, cancellation and parameters."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import ot  # noqa: F401  (POT must be installed: the OT coupling uses it)
import pytest
import torch
from pydantic import ValidationError
from torchcfm.conditional_flow_matching import (
    ConditionalFlowMatcher,
    SchrodingerBridgeConditionalFlowMatcher,
)
from torchcfm.optimal_transport import OTPlanSampler

from engine.context import Cancelled, JobContext
from engine.methods import markovization_gap as mg
from engine.models import bridges

SPECS = {spec.id: spec for spec in mg.SPECS}
ESTIMATE = SPECS["markovization_gap.estimate"]
TRAIN = SPECS["markovization_gap.train"]
REPRODUCE = SPECS["markovization_gap.reproduce"]
TIMES = bridges.time_grid(8, 0.05)


# -- bridges and couplings vs torchcfm -----------------------------------------------------------

def test_straight_bridge_matches_torchcfm_conditional_flow_matcher():
    rng = np.random.default_rng(0)
    x0, x1 = rng.standard_normal((50, 3)), rng.standard_normal((50, 3)) + 2
    t = rng.uniform(0, 1, 50)
    matcher = ConditionalFlowMatcher(sigma=0.0)
    x0_t, x1_t, t_t = (torch.from_numpy(a) for a in (x0, x1, t))
    expected_x = matcher.sample_xt(x0_t, x1_t, t_t, torch.zeros_like(x0_t))
    expected_u = matcher.compute_conditional_flow(x0_t, x1_t, t_t, expected_x)
    x_t, u_t = bridges.bridge_sample(x0, x1, t, "straight", 0.0)
    assert np.allclose(x_t, expected_x.numpy()) and np.allclose(u_t, expected_u.numpy())


@pytest.mark.parametrize("sigma", [0.1, 0.5])
def test_brownian_bridge_matches_torchcfm_schrodinger_bridge_paths(sigma):
    rng = np.random.default_rng(1)
    x0, x1 = rng.standard_normal((50, 2)), rng.standard_normal((50, 2)) * 0.3 + 1
    t, eps = rng.uniform(0.05, 0.95, 50), rng.standard_normal((50, 2))
    matcher = SchrodingerBridgeConditionalFlowMatcher(sigma=sigma)
    x0_t, x1_t, t_t, eps_t = (torch.from_numpy(a) for a in (x0, x1, t, eps))
    expected_x = matcher.sample_xt(x0_t, x1_t, t_t, eps_t)
    expected_u = matcher.compute_conditional_flow(x0_t, x1_t, t_t, expected_x)
    x_t, u_t = bridges.bridge_sample(x0, x1, t, "brownian", sigma, eps=eps)
    assert np.allclose(x_t, expected_x.numpy(), atol=1e-12)
    assert np.allclose(u_t, expected_u.numpy(), atol=1e-6)  # torchcfm adds 1e-8 to t(1-t)


def test_ot_pairing_is_the_support_of_torchcfm_exact_plan():
    rng = np.random.default_rng(2)
    x0, x1 = rng.standard_normal((64, 4)), rng.standard_normal((64, 4)) + 1
    plan = OTPlanSampler(method="exact").get_map(torch.from_numpy(x0), torch.from_numpy(x1))
    permutation = bridges.ot_permutation(x0, x1)
    assert np.allclose(plan * 64, np.eye(64)[permutation])


def test_minibatch_ot_coupling_permutes_each_batch_and_shortens_pairs():
    rng = np.random.default_rng(3)
    x0, x1 = rng.standard_normal((300, 2)), rng.standard_normal((300, 2)) + 3
    paired = bridges.couple(x0, x1, "ot", batch=100)
    for start in range(0, 300, 100):
        block = slice(start, start + 100)
        assert sorted(map(tuple, paired[block])) == sorted(map(tuple, x1[block]))
    assert ((paired - x0) ** 2).sum() < ((x1 - x0) ** 2).sum()
    assert bridges.couple(x0, x1, "independent", 100) is x1


# -- the gap estimator ---------------------------------------------------------------------------

def test_gap_vanishes_for_a_deterministic_bridge():
    """x1 = 2 x0 on straight paths: U = x0 = X_t / (1 + t) is a function of X_t (Markov)."""
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((1000, 2))
    estimate = bridges.knn_gap(x0, 2 * x0, "straight", 0.0, TIMES, 32, rng)
    assert estimate.gap < 0.05  # only the kNN smoothing of a linear function remains
    independent = bridges.knn_gap(x0, 2 * rng.standard_normal((1000, 2)), "straight", 0.0,
                                  TIMES, 32, rng)
    assert independent.gap > 100 * estimate.gap


def test_one_dimensional_ot_is_monotone_so_its_gap_vanishes():
    rng = np.random.default_rng(5)
    x0, x1 = rng.standard_normal((800, 1)), 0.5 * rng.standard_normal((800, 1)) + 3
    estimate = bridges.knn_gap(x0, bridges.couple(x0, x1, "ot", 800), "straight", 0.0, TIMES,
                               16, rng)
    assert estimate.gap < 0.01


@pytest.mark.parametrize("bridge,sigma", [("straight", 0.0), ("brownian", 0.5)])
def test_gap_matches_the_gaussian_closed_form(bridge, sigma):
    rng = np.random.default_rng(6)
    x0, x1 = rng.standard_normal((2000, 2)), 1.0 + 1.5 * rng.standard_normal((2000, 2))
    estimate = bridges.knn_gap(x0, x1, bridge, sigma, TIMES, 32, rng)
    exact = bridges.gaussian_gap_integrand(TIMES, 2, 1.5, bridge, sigma)
    # kNN averaging adds ~Var/k and a little smoothing: a few per cent above the floor
    assert np.all(estimate.residual / exact > 0.95) and np.all(estimate.residual / exact < 1.12)
    assert estimate.gap == pytest.approx(bridges.trapezoid(exact, TIMES), rel=0.08)


@pytest.mark.parametrize("bridge,sigma", [("straight", 0.0), ("brownian", 0.3)])
def test_gaussian_closed_form_matches_linear_regression(bridge, sigma):
    """E[U|X] is linear for Gaussians: the least-squares residual is the conditional variance."""
    rng = np.random.default_rng(7)
    x0, x1 = rng.standard_normal((200_000, 1)), 2.0 + 0.7 * rng.standard_normal((200_000, 1))
    for t in (0.2, 0.5, 0.9):
        x_t, u_t = bridges.bridge_sample(x0, x1, t, bridge, sigma, rng=rng)
        design = np.hstack([x_t, np.ones_like(x_t)])
        coef = np.linalg.lstsq(design, u_t, rcond=None)[0]
        residual = ((u_t - design @ coef) ** 2).mean()
        exact = bridges.gaussian_gap_integrand(np.array([t]), 1, 0.7, bridge, sigma)[0]
        assert residual == pytest.approx(exact, rel=0.02)


def test_gaussian_closed_form_integrates_to_pi_over_two():
    """s = 1, straight: the integrand s^2 / ((1-t)^2 + t^2 s^2) integrates to pi / 2 per
    coordinate."""
    t = np.linspace(0, 1, 20001)
    assert bridges.trapezoid(bridges.gaussian_gap_integrand(t, 3, 1.0), t) == pytest.approx(
        3 * math.pi / 2, rel=1e-6)


def test_knn_mean_leaves_the_point_itself_out():
    x = np.arange(5, dtype=float)[:, None]
    u = np.array([[0.0], [10.0], [0.0], [10.0], [0.0]])
    means = bridges.knn_conditional_mean(x, u, k=2)
    assert means[2, 0] == pytest.approx(10.0)  # neighbours 1 and 3, not itself
    with pytest.raises(ValueError):
        bridges.knn_conditional_mean(x, u, k=5)


def test_kendall_tau_b_matches_scipy_with_ties():
    from scipy import stats

    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.integers(0, 4, 6).astype(float), rng.integers(0, 4, 6).astype(float)
        expected = stats.kendalltau(x, y).statistic
        got = mg.kendall_tau_b(x, y)
        assert (math.isnan(expected) and math.isnan(got)) or got == pytest.approx(expected)
    assert mg.kendall_tau_b(np.arange(6.0), np.arange(6.0) ** 2) == pytest.approx(1.0)


def test_digits_pca_is_scaled_to_unit_mean_variance():
    data = bridges.digits_pca(32)
    assert data.shape == (1797, 32)
    assert data.var(axis=0).mean() == pytest.approx(1.0)
    assert np.all(np.diff(data.var(axis=0)) <= 1e-9)  # principal components, largest first


# -- methods -------------------------------------------------------------------------------------

def run(spec, tmp_path: Path, **params) -> tuple[dict, list[dict]]:
    events: list[dict] = []
    ctx = JobContext("job1", tmp_path, emit=events.append, seed=0)
    return spec.run(ctx, spec.params(**params), {}), events


def test_estimate_streams_the_gap_over_time(tmp_path):
    outputs, events = run(ESTIMATE, tmp_path, coupling="ot", samples=500, times=5, k=16)
    assert outputs["gap"] > 0
    spec = json.loads((tmp_path / outputs["gap_plot"]).read_text())
    assert spec["kind"] == "plot" and len(spec["series"][0]["x"]) == 5
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5] and "residual" in metrics[0]


def test_train_compares_its_final_loss_with_the_gap(tmp_path):
    outputs, _ = run(TRAIN, tmp_path, steps=20, samples=300, times=4, k=8, hidden=16,
                     sample_steps=5, pool_batches=4)
    final = outputs["final"]
    assert final["final_loss"] > 0 and final["gap"] > 0
    for name in ("loss_plot", "loss_vs_gap_plot", "samples_plot"):
        assert json.loads((tmp_path / outputs[name]).read_text())["kind"] == "plot"
    assert (tmp_path / outputs["checkpoint"] / "model.safetensors").exists()


def test_cancel_stops_estimation_and_training(tmp_path):
    ctx = JobContext("job1", tmp_path, emit=lambda event: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        ESTIMATE.run(ctx, ESTIMATE.params(samples=200, k=8), {})
    with pytest.raises(Cancelled):
        TRAIN.run(ctx, TRAIN.params(samples=200, k=8, steps=5), {})
    with pytest.raises(Cancelled):
        REPRODUCE.run(ctx, REPRODUCE.params(smoke=True), {})


@pytest.mark.parametrize("spec,bad", [
    (ESTIMATE, {"k": 500, "samples": 500}), (ESTIMATE, {"sigma": -0.1}),
    (ESTIMATE, {"coupling": "sinkhorn"}), (ESTIMATE, {"bridge": "poisson"}),
    (ESTIMATE, {"t_min": 0.5}), (ESTIMATE, {"neighbours": 32}),
    (TRAIN, {"steps": 0}), (REPRODUCE, {"seeds": 1}), (REPRODUCE, {"k": 400, "pairs": 300}),
])
def test_invalid_params_are_rejected(spec, bad):
    with pytest.raises(ValidationError):
        spec.params(**bad)



def test_reproduce_smoke_returns_the_v2_schema(tmp_path):
    outputs, _ = run(REPRODUCE, tmp_path, profile="smoke")
    claim = outputs["claim"]
    assert claim["paper"] == "markovization_gap" and claim["spec"] == "v2"
    assert claim["smoke"] is True and claim["verdict"] == "INCONCLUSIVE"  # two seeds decide nothing
    assert [c["name"][:3] for c in claim["criteria"]] == ["(1)", "(2)"]
    for item in claim["criteria"]:
        assert item["quote"] and len(item["parts"]) == 2
        assert all(math.isfinite(part["estimate"]) for part in item["parts"])
    assert [check["name"][:5] for check in claim["sanity"]] == ["floor", "exact"]
    assert claim["sanity"][1]["passed"]
    table = json.loads((tmp_path / outputs["ranking_table"]).read_text())
    assert len(table["rows"]) == 12
    json.dumps(claim)


def test_profiles_hold_the_spec_numbers():
    cpu = mg.ReproduceGapParams(profile="cpu")
    assert (cpu.proxy_seeds, cpu.train_seeds, cpu.steps, cpu.hidden) == (5, 3, 1500, 128)
    assert (cpu.pairs, cpu.k, cpu.times, cpu.eval_pairs, cpu.sample_count) == (
        2000, 32, 20, 20_000, 2000)
    assert cpu.pool_batches == 100
    gpu = mg.ReproduceGapParams(profile="gpu")
    assert (gpu.proxy_seeds, gpu.train_seeds, gpu.steps, gpu.hidden) == (5, 8, 5000, 256)
    smoke = mg.ReproduceGapParams(profile="smoke")
    assert (smoke.pairs, smoke.times, smoke.k, smoke.steps) == (300, 5, 16, 20)


def test_exact_posterior_over_training_points_is_the_bayes_formula():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(7, 3))
    x_t, t, sigma = rng.normal(size=(4, 3)), 0.3, 0.5
    spread = (1 - t) ** 2 + sigma**2 * t * (1 - t)
    slope = (-(1 - t) + sigma**2 * (1 - 2 * t) / 2) / spread
    for row in range(4):
        log_w = -((x_t[row] - t * points) ** 2).sum(1) / (2 * spread)
        w = np.exp(log_w - log_w.max())
        w /= w.sum()
        expected = sum(w[j] * (points[j] + slope * (x_t[row] - t * points[j])) for j in range(7))
        got = bridges.posterior_velocity_points(x_t[row:row + 1], t, points, "brownian", sigma)
        np.testing.assert_allclose(got[0], expected, rtol=1e-10)


def test_exact_floor_matches_the_gaussian_closed_form():
    closed, estimate = mg.gaussian_floor_check(0, pairs=4000, times=10)
    assert estimate == pytest.approx(closed, rel=0.02)


def test_mixture_posterior_floor_lies_below_the_knn_proxy():
    """The kNN average over-smooths E[U|X]: its residual exceeds the exact floor."""
    rng = np.random.default_rng(1)
    data = bridges.eight_gaussians(4000, rng)
    x0 = rng.standard_normal(data.shape)
    x_t, u_t = bridges.bridge_sample(x0, data, 0.5, "straight", 0.0)
    exact = mg.exact_velocity("eight_gaussians", data, x_t, 0.5, "straight", 0.0)
    knn = bridges.knn_conditional_mean(x_t, u_t, 32)
    assert ((u_t - exact) ** 2).sum(1).mean() < ((u_t - knn) ** 2).sum(1).mean()


def _groups(means: list[float], seeds: int, spread: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [m + spread * rng.standard_normal(seeds) for m in means]


GAPS = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_ranking_fails_when_the_proxy_ranks_against_the_loss_and_passes_when_with_it():
    proxy = _groups(GAPS, 5, 0.05, 0)
    agreeing = {"a": mg.ranking_interval(proxy, _groups([g + 1 for g in GAPS], 3, 0.05, 1)),
                "b": mg.ranking_interval(proxy, _groups([2 * g for g in GAPS], 3, 0.05, 2))}
    assert mg.criterion_ranking("(1) x", "q", agreeing).verdict == "PASS"
    reversed_loss = _groups([10 - g for g in GAPS], 3, 0.05, 3)
    against = {**agreeing, "b": mg.ranking_interval(proxy, reversed_loss)}
    assert mg.criterion_ranking("(1) x", "q", against).verdict == "FAIL"


def test_floor_sanity_check_flags_a_loss_below_the_exact_floor():
    table = {("digits_pca", c): {"final_loss": [10.0, 10.2, 10.1], "exact_gap": [10.0] * 3}
             for c in range(3)}
    assert mg.gap_sanity_checks(table, 0)[0].passed
    table["digits_pca", 1]["final_loss"] = [7.0, 7.1, 6.9]  # a "floor" above the loss
    assert not mg.gap_sanity_checks(table, 0)[0].passed
