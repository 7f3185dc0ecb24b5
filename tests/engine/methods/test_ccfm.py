"""ccfm: the chance constraint's deterministic equivalent, exact Gaussian-mixture velocities,
feasibility of every sampler, heat fields; the methods' artifacts, cancellation, parameters."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torchcfm.conditional_flow_matching import ConditionalFlowMatcher

from engine.context import Cancelled, JobContext
from engine.methods import ccfm
from engine.models import bridges
from engine.models import constrained_sampler as cs
from engine.models import gaussian_mixture_flow as gmf
from engine.models import heat_equation as heat

SPECS = {spec.id: spec for spec in ccfm.SPECS}
SAMPLE = SPECS["ccfm.sample"]
HEAT = SPECS["ccfm.train_heat"]
REPRODUCE = SPECS["ccfm.reproduce"]


# -- the chance constraint -----------------------------------------------------------------------

@pytest.mark.parametrize("eps", [0.05, 0.5, 0.9])
@pytest.mark.parametrize("t", [0.2, 0.7])
def test_deterministic_equivalent_half_space_holds_the_chance_level(eps, t):
    """On the boundary of the CCFM half-space, P_xi[a.(x/t - xi) <= b] = 1 - eps exactly."""
    rng = np.random.default_rng(0)
    a, b = np.array([3.0, -4.0]), 0.7
    constraint = cs.LinearConstraint(a, b)
    far = rng.normal(size=(5, 2)) * 5 + 20 * a  # well outside: the projection lands on the edge
    projected = constraint.ccfm_project(far, t, cs.chance_kappa(eps))
    xi = ((1 - t) / t) * rng.standard_normal((200_000, 2))
    for x in projected:
        probability = np.mean((x / t - xi) @ a <= b)
        assert probability == pytest.approx(1 - eps, abs=0.005)
    # the sample-average approximation finds the same boundary (quantile of g = 0)
    quantile = cs.saa_quantile(constraint.g, projected, t, eps, rng.standard_normal((50_000, 2)))
    assert np.allclose(quantile, 0, atol=0.05 * (1 - t) / t * np.linalg.norm(a))


def test_chance_margin_vanishes_at_t_one_and_keeps_feasible_points():
    constraint = cs.LinearConstraint(np.array([1.0, 1.0]), 1.0)
    x = np.random.default_rng(1).normal(size=(50, 2)) * 3
    assert np.allclose(constraint.ccfm_project(x, 1.0, 1.64), constraint.project(x))
    inside = x[constraint.violation(x) <= 0]
    assert np.allclose(constraint.ccfm_project(inside - 10, 0.5, 0.0), inside - 10)


def test_equality_becomes_a_slab_for_eps_above_one_half_and_a_hyperplane_below():
    a = np.array([0.6, 0.8])
    constraint = cs.LinearConstraint(a, 2.0, equality=True)
    x = np.random.default_rng(2).normal(size=(100, 2)) * 4
    t = 0.4
    slab = constraint.ccfm_project(x, t, cs.chance_kappa(0.9))
    half_width = -cs.chance_kappa(0.9) * (1 - t)
    assert np.all(np.abs(slab @ a - t * 2.0) <= half_width + 1e-12)
    assert np.any(np.abs(slab @ a - t * 2.0) < half_width - 1e-3)  # interior points unmoved
    plane = constraint.ccfm_project(x, t, cs.chance_kappa(0.05))
    assert np.allclose(plane @ a, t * 2.0)


def test_projections_are_euclidean():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 3)) * 3
    a = np.array([1.0, -2.0, 0.5])
    for projected in (cs.project_linear(x, a, 1.0, None), cs.project_linear(x, a, 1.0, 0.0)):
        moved = projected - x
        # moves are along a (normal to the boundary), and only as far as needed
        assert np.allclose(np.cross(moved, a), 0, atol=1e-12)
    assert np.all(cs.project_linear(x, a, 1.0, None) @ a <= 1.0 + 1e-12)
    ball = cs.BallConstraint(np.array([1.0, 0.0, 0.0]), 2.0)
    inside = ball.project(x)
    assert np.all(np.linalg.norm(inside - ball.centre, axis=1) <= 2.0 + 1e-12)


# -- exact Gaussian-mixture velocity -------------------------------------------------------------

def mixture() -> gmf.GaussianMixture:
    return gmf.GaussianMixture(np.array([0.3, 0.7]), np.array([[-1.0, 2.0], [2.0, -0.5]]),
                               np.array([[0.5, 0.8], [0.7, 0.4]]))


@pytest.mark.parametrize("t", [0.1, 0.5, 0.85])
def test_mixture_velocity_satisfies_the_continuity_equation(t):
    """d p_t / dt + div(p_t v_t) = 0, by central finite differences."""
    mix = mixture()
    points = np.random.default_rng(4).normal(size=(20, 2)) * 1.5
    density = lambda x, s: np.exp(mix.log_density(x, s))
    h, dt = 1e-4, 1e-5
    dp_dt = (density(points, t + dt) - density(points, t - dt)) / (2 * dt)
    divergence = np.zeros(len(points))
    for axis in range(2):
        step = h * np.eye(2)[axis]
        flux_plus = density(points + step, t) * mix.velocity(points + step, t)[:, axis]
        flux_minus = density(points - step, t) * mix.velocity(points - step, t)[:, axis]
        divergence += (flux_plus - flux_minus) / (2 * h)
    assert np.allclose(dp_dt + divergence, 0, atol=1e-5 * max(1.0, np.abs(dp_dt).max()))


def test_single_gaussian_velocity_is_the_analytic_linear_field():
    mean, std = np.array([1.0, -2.0]), np.array([0.5, 2.0])
    mix = gmf.GaussianMixture(np.array([1.0]), mean[None], std[None])
    x = np.random.default_rng(5).normal(size=(10, 2))
    t = 0.3
    expected = mean + (t * std**2 - (1 - t)) / ((1 - t) ** 2 + t**2 * std**2) * (x - t * mean)
    assert np.allclose(mix.velocity(x, t), expected)
    assert np.allclose(mix.denoise(x, t), x + (1 - t) * mix.velocity(x, t))


def test_integrating_the_exact_velocity_reaches_the_mixture():
    mix = mixture()
    rng = np.random.default_rng(6)
    pushed = cs.sample(mix.velocity, rng.standard_normal((1500, 2)), 200, "unconstrained",
                       cs.LinearConstraint(np.ones(2), 1e9)).samples
    target, other = mix.sample(1500, rng), mix.sample(1500, rng)
    bandwidths = [0.5, 1.0, 2.0]
    assert cs.mmd(pushed, target, bandwidths) < 3 * abs(cs.mmd(other, target, bandwidths)) + 2e-3


def test_hyperplane_conditioning_matches_a_thin_slab_of_samples():
    mix = mixture()
    a, b = np.array([1.0, 1.0]) / math.sqrt(2), 0.8
    rng = np.random.default_rng(7)
    exact = mix.condition_on_hyperplane(a, b, 1500, rng)
    assert np.allclose(exact @ a, b)
    draws = mix.sample(400_000, rng)
    slab = draws[np.abs(draws @ a - b) < 0.01][:1500]
    assert cs.mmd(exact, slab, [0.5, 1.0]) < 5e-3
    assert exact.mean(axis=0) == pytest.approx(slab.mean(axis=0), abs=0.1)


def test_fidelity_metrics():
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=(400, 2)), rng.normal(size=(400, 2))
    assert abs(cs.mmd(x, y, [1.0])) < 0.01
    assert cs.mmd(x, y + 2, [1.0]) > 0.3
    small_x, small_y = x[:5], y[:6]
    direct = (2 * np.mean([np.linalg.norm(p - q) for p in small_x for q in small_y])
              - np.sum([np.linalg.norm(p - q) for p in small_x for q in small_x]) / 20
              - np.sum([np.linalg.norm(p - q) for p in small_y for q in small_y]) / 30)
    assert cs.energy_distance(small_x, small_y) == pytest.approx(direct)


# -- samplers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("problem", ["mixture_2d_halfspace", "mixture_2d_equality",
                                     "mixture_10d_halfspace", "mixture_2d_disk"])
def test_every_constrained_method_ends_100_percent_feasible(problem):
    p = ccfm.mixture_problem(problem)
    rng = np.random.default_rng(9)
    truth = p.ground_truth(200, rng)
    assert np.all(p.constraint.violation(truth) <= 1e-9)
    runs = ccfm.run_methods(p, list(ccfm.METHODS), 0.5, 200, 20, rng, truth, lambda: None)
    for r in runs:
        if r.method != "unconstrained":
            assert r.feasible == 1.0, r.method
    assert min(r.feasible for r in runs if r.method == "unconstrained") < 1.0


def test_ccfm_leaves_early_states_alone_when_the_disk_chance_constraint_is_empty():
    ball = cs.BallConstraint(np.array([0.0, 2.5]), 1.5)
    x = np.random.default_rng(10).normal(size=(50, 2))
    scenarios = np.random.default_rng(11).standard_normal((256, 2))
    assert np.array_equal(ball.ccfm_project(x, 0.1, cs.chance_kappa(0.1), scenarios), x)
    late = ball.ccfm_project(x * 0.1 + np.array([0, 2.3]), 0.95, cs.chance_kappa(0.1), scenarios)
    assert np.all(cs.saa_quantile(ball.g, late, 0.95, 0.1, scenarios) <= 1e-6)


def test_straight_training_targets_match_torchcfm():
    rng = np.random.default_rng(12)
    fields = heat.heat_fields(64, rng, points=16)
    x0, t = rng.standard_normal(fields.shape), rng.uniform(0, 1, 64)
    t_, xt, ut = ConditionalFlowMatcher(sigma=0.0).sample_location_and_conditional_flow(
        torch.from_numpy(x0), torch.from_numpy(fields), torch.from_numpy(t))
    x_t, u_t = bridges.bridge_sample(x0, fields, t, "straight", 0.0)
    assert np.allclose(x_t, xt.numpy()) and np.allclose(u_t, ut.numpy())


# -- heat fields ---------------------------------------------------------------------------------

def test_heat_fields_conserve_their_mean_and_solve_the_heat_equation():
    fields = heat.heat_fields(50, np.random.default_rng(13), points=64)
    masses = heat.heat_fields(50, np.random.default_rng(13), points=64, mass=1.3).mean(axis=1)
    assert np.allclose(masses, 1.3)
    assert np.all((fields.mean(axis=1) >= 0.5) & (fields.mean(axis=1) <= 1.5))
    # d u / d(kappa T) = u_xx: compare two times with the same draws
    points, tau, d_tau = 400, 0.01, 1e-6
    now = heat.heat_fields(3, np.random.default_rng(14), points=points, kappa_time=tau)
    later = heat.heat_fields(3, np.random.default_rng(14), points=points, kappa_time=tau + d_tau)
    dx = 1.0 / points
    u_xx = (now[:, 2:] - 2 * now[:, 1:-1] + now[:, :-2]) / dx**2
    assert np.allclose((later - now)[:, 1:-1] / d_tau, u_xx, rtol=2e-3, atol=2e-2)


# -- methods -------------------------------------------------------------------------------------

def run(spec, tmp_path: Path, **params) -> tuple[dict, list[dict]]:
    events: list[dict] = []
    ctx = JobContext("job1", tmp_path, emit=events.append, seed=0)
    return spec.run(ctx, spec.params(**params), {}), events


def test_sample_saves_clouds_trajectories_and_the_table(tmp_path):
    outputs, events = run(SAMPLE, tmp_path, samples=200, steps=10, trajectories=5)
    for method in ccfm.METHODS:
        cloud = json.loads((tmp_path / outputs[f"cloud_{method}"]).read_text())
        assert [s["style"] for s in cloud["series"]] == ["scatter", "scatter", "line"]
        paths = json.loads((tmp_path / outputs[f"trajectories_{method}"]).read_text())
        assert len(paths["series"]) == 5 and len(paths["series"][0]["x"]) == 11
    table = json.loads((tmp_path / outputs["table"]).read_text())
    assert len(table["rows"]) == 5 and "MMD^2" in table["columns"]
    assert outputs["summary"]["ccfm"]["feasible"] == 1.0
    assert [e["step"] for e in events if e["type"] == "job_progress"][-1] == 5


def test_train_heat_runs_a_tiny_model(tmp_path):
    outputs, _ = run(HEAT, tmp_path, points=16, train_fields=500, steps=10, hidden=16,
                     samples=50, sample_steps=5, methods=["final_projection", "ccfm"])
    assert outputs["summary"]["ccfm"]["feasible"] == 1.0
    assert (tmp_path / outputs["checkpoint"] / "model.safetensors").exists()
    fields = json.loads((tmp_path / outputs["fields_ccfm"]).read_text())
    assert len(fields["series"]) == 6


def test_cancel_stops_sampling_and_training(tmp_path):
    ctx = JobContext("job1", tmp_path, emit=lambda event: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        SAMPLE.run(ctx, SAMPLE.params(samples=50, steps=5), {})
    with pytest.raises(Cancelled):
        HEAT.run(ctx, HEAT.params(steps=5, train_fields=200), {})


@pytest.mark.parametrize("spec,bad", [
    (SAMPLE, {"eps": 0.0}), (SAMPLE, {"eps": 1.0}), (SAMPLE, {"problem": "mixture_3d"}),
    (SAMPLE, {"methods": ["dps"]}), (SAMPLE, {"methods": []}), (SAMPLE, {"stepz": 10}),
    (HEAT, {"target_mass": -1.0}), (HEAT, {"points": 4}), (REPRODUCE, {"seeds": 3}),
    (REPRODUCE, {"mixture_seeds": 0}), (REPRODUCE, {"eps": 0.5}),
])
def test_invalid_params_are_rejected(spec, bad):
    with pytest.raises(ValidationError):
        spec.params(**bad)



def test_reproduce_smoke_returns_the_v2_schema(tmp_path):
    outputs, _ = run(REPRODUCE, tmp_path, profile="smoke")
    claim = outputs["claim"]
    assert claim["paper"] == "ccfm" and claim["spec"] == "v2" and claim["smoke"] is True
    assert [c["name"][:3] for c in claim["criteria"]] == ["(1)", "(2)"]
    assert len(claim["criteria"][0]["parts"]) == 4 and len(claim["criteria"][1]["parts"]) == 3
    for item in claim["criteria"]:
        assert item["quote"] and all(p["method"].startswith("t-interval") for p in item["parts"])
    feasible = claim["sanity"][0]
    assert feasible["passed"], feasible  # a guarantee of every constrained method
    table = json.loads((tmp_path / outputs["fidelity_table"]).read_text())
    names = {row[1] for row in table["rows"]}
    assert {"ccfm", "ccfm (n = 2)", "ccfm (constant 0.95)"} <= names
    json.dumps(claim)


def test_profiles_hold_the_spec_numbers():
    cpu = ccfm.ReproduceCcfmParams(profile="cpu")
    assert (cpu.mixture_seeds, cpu.samples, cpu.steps) == (10, 2000, 100)
    assert (cpu.heat_seeds, cpu.heat_train_steps, cpu.heat_samples) == (5, 2000, 1000)
    gpu = ccfm.ReproduceCcfmParams(profile="gpu")
    assert (gpu.mixture_seeds, gpu.heat_seeds, gpu.heat_train_steps) == (30, 10, 5000)
    smoke = ccfm.ReproduceCcfmParams(profile="smoke")
    assert (smoke.samples, smoke.steps) == (200, 10)


def test_the_scheduled_chance_set_relaxes_early_and_closes_at_t_one():
    constraint = cs.LinearConstraint(np.array([1.0, 0.0]), 1.0)
    schedule = ccfm.required_probability("power", 1.0)
    assert schedule(0.5) == pytest.approx(0.25) and schedule(1.0) == pytest.approx(0.5)
    x = np.array([[0.8, 0.0], [2.0, 0.0]])
    kappa = cs.scheduled_kappa(schedule(0.5))  # Phi^-1(0.25) < 0: a relaxation
    moved = constraint.ccfm_project(x, 0.5, kappa)
    assert moved[0, 0] == pytest.approx(0.8)  # inside t b - kappa (1 - t) = 0.84: untouched
    assert moved[1, 0] == pytest.approx(0.5 - kappa * 0.5)
    assert cs.scheduled_kappa(0.0) == -math.inf
    band = cs.LinearConstraint(np.array([1.0, 0.0]), 1.0, equality=True)
    assert band.ccfm_project(x, 0.5, kappa)[0, 0] == pytest.approx(0.8)  # within the band


def test_sampler_uses_the_scheduled_probability_not_eps():
    problem = ccfm.mixture_problem("mixture_2d_halfspace")
    x0 = np.random.default_rng(0).standard_normal((300, 2))
    scheduled = cs.sample(problem.velocity, x0, 20, "ccfm", problem.constraint, eps=0.05,
                          required_probability=lambda t: t / 2)
    fixed = cs.sample(problem.velocity, x0, 20, "ccfm", problem.constraint, eps=0.05)
    assert not np.allclose(scheduled.samples, fixed.samples)
    assert problem.constraint.violation(scheduled.samples).max() <= 1e-12


def _units(differences: list[float], baseline: str = "projection_each_step") -> list[dict]:
    return [{"seed": s, "methods": {baseline: {"mmd2": 0.05 + d}, "ccfm": {"mmd2": 0.05}}}
            for s, d in enumerate(differences)]


def test_mixture_criterion_fails_when_ccfm_distorts_more_than_projection():
    better = [0.010, 0.012, 0.009, 0.011, 0.010]
    worse = [-0.010, -0.012, -0.009, -0.011, -0.010]
    cases = {case: ccfm.paired_differences(_units(better), "projection_each_step")
             for case in ccfm.CASES}
    assert ccfm.criterion_mixtures(cases).verdict == "PASS"
    cases["mixture_2d_equality"] = ccfm.paired_differences(_units(worse), "projection_each_step")
    assert ccfm.criterion_mixtures(cases).verdict == "FAIL"


def test_heat_criterion_needs_every_baseline_beaten():
    better = np.array([0.010, 0.012, 0.009, 0.011, 0.010])
    differences = {b: better for b in ccfm.BASELINES}
    assert ccfm.criterion_heat(differences).verdict == "PASS"
    assert ccfm.criterion_heat({**differences, "final_projection": -better}).verdict == "FAIL"


def test_averaged_mmd_is_near_zero_for_one_distribution_and_positive_for_two():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((400, 2)), rng.standard_normal((400, 2))
    assert abs(ccfm.averaged_mmd(x, y, 1.0)) < 0.01
    assert ccfm.averaged_mmd(x, y + 1.0, 1.0) > 0.05


def test_the_three_papers_are_registered_through_entry_points():
    from engine import registry

    for module in ("engine.methods.ccfm", "engine.methods.markovization_gap",
                   "engine.methods.iqp_qcbm"):
        assert module in registry.method_modules()
    for method_id in ("ccfm.sample", "ccfm.train_heat", "ccfm.reproduce",
                      "markovization_gap.estimate", "markovization_gap.train",
                      "markovization_gap.reproduce", "iqp_qcbm.expectations", "iqp_qcbm.train",
                      "iqp_qcbm.variance_study", "iqp_qcbm.reproduce"):
        assert json.dumps(registry.get_method(method_id).describe())
