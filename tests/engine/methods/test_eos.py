"""eos: GD at the edge of stability on linear classifiers. Tiny runs that check behaviour."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.methods import eos
from engine.models import linear_classifier as lc

SPECS = {spec.id: spec for spec in eos.SPECS}
TRAIN = SPECS["eos.train"]
REPRODUCE = SPECS["eos.reproduce"]


def run_train(tmp_path: Path, **params) -> tuple[dict, list[dict], Path]:
    events: list[dict] = []
    ctx = JobContext("job1", tmp_path, emit=events.append, seed=0)
    outputs = TRAIN.run(ctx, TRAIN.params(**params), {})
    return outputs, events, tmp_path


def load(run_dir: Path, name: str) -> np.ndarray:
    return np.load(run_dir / "artifacts" / f"{name}.npy")


# -- the dynamics ---------------------------------------------------------------------------------

@pytest.mark.parametrize("loss,classes", [("logistic", 2), ("cross_entropy", 3)])
def test_large_step_loss_rises_early_then_converges_below_two_over_eta(tmp_path, loss, classes):
    outputs, _, run_dir = run_train(tmp_path, loss=loss, classes=classes, eta_times_inv_L=10,
                                    steps=300, record_every=5)
    losses, sharp = load(run_dir, "loss"), load(run_dir, "sharpness")
    final = outputs["final"]

    assert final["loss_rises_first_200"] >= 3
    assert np.any(np.diff(losses[:50]) > 0)
    assert losses[-1] < losses[100]
    # eta = 10 / L: unstable at the start (eta * sharpness = 10), stable at the end.
    assert sharp[0] * final["eta"] == pytest.approx(10.0)
    assert sharp[-1] < final["two_over_eta"]
    assert final["unstable_steps"] < 300  # eta x sharpness fell below 2 during the run


def test_small_step_loss_decreases_monotonically_and_stays_stable(tmp_path):
    outputs, _, run_dir = run_train(tmp_path, eta_times_inv_L=0.5, steps=300, record_every=5)
    losses, sharp = load(run_dir, "loss"), load(run_dir, "sharpness")

    assert np.all(np.diff(losses) < 0)
    assert np.all(sharp < outputs["final"]["two_over_eta"])
    assert outputs["final"]["loss_rises_first_200"] == 0


def test_oscillation_amplitude_shrinks_while_w_par_grows(tmp_path):
    params = eos.Params(eta_times_inv_L=10, steps=600)
    cfg, X, y, w_svm = eos.setup_problem(params, seed=0)
    traj = eos.train_gd(cfg, X, y, w_svm, 10, 600, 10, lambda: None)
    _, amplitude, par = eos.oscillation_amplitude(traj)

    assert amplitude.shape == (3,)
    assert amplitude[0] > 100 * amplitude[-1]
    assert par[-1] > par[0] > 0


def test_cos_to_max_margin_increases(tmp_path):
    params = eos.Params(eta_times_inv_L=1, steps=2000)
    cfg, X, y, w_svm = eos.setup_problem(params, seed=0)
    traj = eos.train_gd(cfg, X, y, w_svm, 1, 2000, 100, lambda: None)
    checkpoints = traj.cos_svm[[10, 100, 1000, 2000]]

    assert np.all(np.diff(checkpoints) > 0)
    assert checkpoints[-1] > 0.99
    norm = np.hypot(traj.w_par, traj.w_perp)  # w_par and w_perp are orthogonal parts of w
    assert np.allclose(traj.cos_svm[1:], traj.w_par[1:] / norm[1:])
    assert np.linalg.norm(traj.w_final) == pytest.approx(norm[-1])


# -- exact curvature and the power iteration ------------------------------------------------------

@pytest.mark.parametrize("loss,classes", [("logistic", 2), ("cross_entropy", 3)])
def test_gradient_and_hessian_match_autograd(loss, classes):
    cfg = lc.LinearClassifierConfig(loss=loss, d=4, classes=classes)
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(30, 4, dtype=torch.float64, generator=gen)
    y = torch.randint(0, classes, (30,), generator=gen)
    w = torch.randn(cfg.weight_shape, dtype=torch.float64, generator=gen)

    param = w.clone().requires_grad_(True)
    auto_grad = torch.autograd.grad(lc.loss(cfg, param, X, y), param)[0]
    auto_hess = torch.autograd.functional.hessian(lambda v: lc.loss(cfg, v, X, y), w)

    value, grad = lc.loss_and_gradient(cfg, w, X, y)
    assert value == pytest.approx(lc.loss(cfg, w, X, y).item())
    assert torch.allclose(grad, auto_grad, atol=1e-12)
    assert torch.allclose(lc.gradient(cfg, w, X, y), auto_grad, atol=1e-12)
    assert torch.allclose(lc.hessian(cfg, w, X, y),
                          auto_hess.reshape(cfg.n_params, cfg.n_params), atol=1e-12)


@pytest.mark.parametrize("loss,classes", [("logistic", 2), ("cross_entropy", 3)])
def test_exact_sharpness_matches_power_iteration(loss, classes):
    cfg = lc.LinearClassifierConfig(loss=loss, d=10, classes=classes)
    X, y = eos.make_data(eos.Params(loss=loss, classes=classes, n=60), seed=3)
    X, y = torch.from_numpy(X), torch.from_numpy(y)
    w = 0.05 * torch.randn(cfg.weight_shape, dtype=torch.float64,
                           generator=torch.Generator().manual_seed(0))

    exact = lc.sharpness(cfg, w, X, y)
    assert lc.linear_power_sharpness(cfg, w, X, y) == pytest.approx(exact, rel=1e-6)


def test_power_iteration_finds_the_dominant_eigenvalue_of_a_tiny_mlp():
    model = lc.TinyMLP(d=3, hidden=4, classes=2, seed=0)
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(20, 3, dtype=torch.float64, generator=gen)
    y = torch.randint(0, 2, (20,), generator=gen)
    params = list(model.parameters())
    loss_fn = lambda: torch.nn.functional.cross_entropy(model(X), y)

    flat = torch.cat([p.detach().reshape(-1) for p in params])
    shapes = [p.shape for p in params]

    def loss_of(vector: torch.Tensor) -> torch.Tensor:
        pieces = torch.split(vector, [math.prod(s) for s in shapes])
        hidden, out = (piece.reshape(s) for piece, s in zip(pieces, shapes, strict=True))
        return torch.nn.functional.cross_entropy(torch.tanh(X @ hidden.T) @ out.T, y)

    eigenvalues = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss_of, flat))
    dominant = eigenvalues[eigenvalues.abs().argmax()].item()
    estimate = lc.power_iteration_sharpness(loss_fn, params, iters=5000, tol=1e-13)
    assert estimate == pytest.approx(dominant, rel=1e-4)


# -- the max-margin solver ------------------------------------------------------------------------

def brute_force_max_margin(A: torch.Tensor) -> torch.Tensor:
    """Slow but sure: the optimum is the least-norm solution of A_S w = 1 for some set S of at
    most dim(w) constraints; try them all and keep the shortest feasible one."""
    m, p = A.shape
    best = None
    for size in range(1, p + 1):
        for subset in itertools.combinations(range(m), size):
            w = torch.linalg.pinv(A[list(subset)]) @ torch.ones(size, dtype=A.dtype)
            if bool((A @ w >= 1 - 1e-9).all()) and (best is None or w.norm() < best.norm()):
                best = w
    return best


def test_max_margin_two_symmetric_points():
    cfg = lc.LinearClassifierConfig("logistic", d=2)
    X = torch.tensor([[2.0, 1.0], [-2.0, -1.0]], dtype=torch.float64)
    y = torch.tensor([1, 0])
    w = lc.max_margin(cfg, X, y)
    assert torch.allclose(w, torch.tensor([0.4, 0.2], dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("loss,classes", [("logistic", 2), ("cross_entropy", 3)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_max_margin_matches_brute_force(loss, classes, seed):
    cfg = lc.LinearClassifierConfig(loss=loss, d=2, classes=classes)
    X, y = eos.make_data(eos.Params(loss=loss, classes=classes, d=3, n=2 * classes,
                                    anisotropy=2.0, gap=0.2), seed=seed)
    X, y = torch.from_numpy(X[:, :2]).contiguous(), torch.from_numpy(y)
    A = lc.margin_constraints(cfg, X, y)

    w = lc.max_margin(cfg, X, y).reshape(-1)
    margins = A @ w
    assert margins.min().item() == pytest.approx(1.0, abs=1e-9)
    assert torch.allclose(w, brute_force_max_margin(A), atol=1e-8)


def test_max_margin_on_the_spec_data_satisfies_kkt():
    params = eos.Params(loss="cross_entropy", classes=3)
    cfg, X, y, w_svm = eos.setup_problem(params, seed=0)
    margins = lc.margin_constraints(cfg, X, y) @ w_svm.reshape(-1)
    assert margins.min().item() == pytest.approx(1.0, abs=1e-9)
    assert torch.allclose(w_svm.sum(dim=1), torch.zeros(10, dtype=torch.float64), atol=1e-10)


def test_max_margin_rejects_non_separable_data():
    cfg = lc.LinearClassifierConfig("logistic", d=2)
    X = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="not linearly separable"):
        lc.max_margin(cfg, X, torch.tensor([1, 0]))


def test_unreachable_gap_is_an_error_not_a_hang():
    with pytest.raises(ValueError, match="gap"):
        eos.make_data(eos.Params(separation=0.1, gap=10), seed=0)


def test_data_are_balanced_and_clear_the_bayes_boundaries():
    params = eos.Params(loss="cross_entropy", classes=3, n=90, gap=0.5)
    X, y = eos.make_data(params, seed=4)
    means = eos.class_means(3, params.separation)
    assert np.bincount(y).tolist() == [30, 30, 30]
    assert all(eos._clearance(x[:2], label, means) >= 0.5 for x, label in zip(X, y, strict=True))
    X_again, _ = eos.make_data(params, seed=4)
    assert np.array_equal(X, X_again)


# -- the job: artifacts, cancellation, parameters -------------------------------------------------

def test_train_saves_plot_specs_arrays_checkpoint_and_streams_metrics(tmp_path):
    outputs, events, run_dir = run_train(tmp_path, eta_times_inv_L=10, steps=250,
                                         record_every=50)
    for name in ("loss_plot", "sharpness_plot", "decomposition_plot", "cos_plot",
                 "amplitude_plot"):
        spec = json.loads((run_dir / outputs[name]).read_text())
        assert spec["kind"] == "plot"
        assert spec["series"] and all(len(s["x"]) == len(s["y"]) > 0 for s in spec["series"])
    sharpness_spec = json.loads((run_dir / outputs["sharpness_plot"]).read_text())
    assert sharpness_spec["hlines"][0]["y"] == pytest.approx(outputs["final"]["two_over_eta"])

    assert load(run_dir, "loss").shape == (251,)
    checkpoint = run_dir / outputs["checkpoint"]
    assert (checkpoint / "model.safetensors").exists() and (checkpoint / "cfg.json").exists()
    kinds = {e["kind"] for e in events if e["type"] == "job_artifact"}
    assert {"plot", "array", "checkpoint"} <= kinds

    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 50, 100, 150, 200, 250]
    assert {"loss", "sharpness", "w_par", "w_perp", "cos_svm", "two_over_eta"} <= set(metrics[0])
    assert json.dumps(outputs["final"])  # plain numbers


def test_power_sharpness_option_agrees_with_exact(tmp_path):
    exact, _, _ = run_train(tmp_path / "a", steps=20, record_every=10)
    power, _, _ = run_train(tmp_path / "b", steps=20, record_every=10, sharpness_method="power")
    assert power["final"]["sharpness"] == pytest.approx(exact["final"]["sharpness"], rel=1e-6)


def test_cancel_stops_training(tmp_path):
    events: list[dict] = []

    def emit(event: dict) -> None:
        events.append(event)
        if event["type"] == "job_progress" and event["step"] >= 10:
            ctx.request_cancel()

    ctx = JobContext("job1", tmp_path, emit=emit, seed=0)
    with pytest.raises(Cancelled):
        TRAIN.run(ctx, TRAIN.params(steps=100_000, record_every=10), {})
    assert max(e["step"] for e in events if e["type"] == "job_progress") < 10_000


def test_cancel_before_start(tmp_path):
    ctx = JobContext("job1", tmp_path, emit=lambda event: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        REPRODUCE.run(ctx, REPRODUCE.params(smoke=True), {})


@pytest.mark.parametrize("bad", [
    {"eta_times_inv_L": 0}, {"eta_times_inv_L": -1.0}, {"learning_rate": 0.1},
    {"loss": "hinge"}, {"loss": "logistic", "classes": 3}, {"classes": 3, "d": 2,
                                                            "loss": "cross_entropy"},
    {"steps": 0}, {"n": 3},
])
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        TRAIN.params(**bad)


def test_reproduce_params_forbid_unknown_fields():
    with pytest.raises(ValidationError):
        REPRODUCE.params(smoke=True, steps=100)
    with pytest.raises(ValidationError):
        REPRODUCE.params(geometries=["spherical"])



# -- the reproduction -----------------------------------------------------------------------------

def test_reproduce_smoke_returns_the_v2_schema(tmp_path):
    events: list[dict] = []
    ctx = JobContext("job1", tmp_path, emit=events.append, seed=0)
    outputs = REPRODUCE.run(ctx, REPRODUCE.params(profile="smoke"), {})
    claim = outputs["claim"]

    assert claim["spec"] == "v2" and claim["smoke"] is True and claim["seeds"] == [0]
    assert [c["name"][:3] for c in claim["criteria"]] == ["(1)", "(2)", "(3)", "(4)"]
    # one seed decides nothing; smoke lacks the step sizes of (4)
    assert claim["verdict"] == "INCONCLUSIVE"
    for item in claim["criteria"]:
        assert item["quote"] and item["verdict"] == "INCONCLUSIVE" and item["decides_with"]
    assert all(check["passed"] for check in claim["sanity"]), claim["sanity"]
    damping = claim["criteria"][0]["parts"][0]
    assert damping["estimate"] > 1 and damping["method"].startswith("t-interval")
    gap = json.loads((tmp_path / outputs["anisotropic_binary_logistic_gap_plot"]).read_text())
    assert gap["kind"] == "plot" and len(gap["series"]) == 2
    json.dumps(claim)


def test_profiles_hold_the_spec_numbers():
    settings = {profile: eos.ReproduceEosParams(profile=profile) for profile in
                ("smoke", "cpu", "gpu")}
    cpu, gpu, smoke = settings["cpu"], settings["gpu"], settings["smoke"]
    assert (cpu.seeds, cpu.horizon, cpu.frozen_steps) == (5, 1_000_000, 2000)
    assert (gpu.seeds, gpu.horizon, gpu.frozen_steps) == (20, 10_000_000, 2000)
    assert (smoke.seeds, smoke.horizon) == (1, 2000)
    assert smoke.tasks == ["binary logistic"] and smoke.geometries == ["anisotropic"]
    assert smoke.step_sizes == [0.1, 100.0]
    for full in (cpu, gpu):
        assert full.tasks == ["binary logistic", "3-class cross-entropy"]
        assert full.geometries == ["isotropic", "anisotropic", "strongly anisotropic"]
        assert full.step_sizes == [0.1, 1.0, 10.0, 100.0]


def test_log_time_checkpoints_are_quarter_decades_with_the_horizon():
    grid = eos.log_time_checkpoints(1000)
    assert grid.tolist() == [0, 1, 2, 3, 6, 10, 18, 32, 56, 100, 178, 316, 562, 1000]
    assert eos.log_time_checkpoints(2000)[-1] == 2000


@pytest.mark.parametrize("task", ["binary logistic", "3-class cross-entropy"])
def test_batched_gd_follows_the_reference_gd(task):
    """Two data draws in one batch take the same steps as linear_classifier's one-run GD."""
    p = eos.Params(**eos.TASKS[task], eta_times_inv_L=10.0, steps=30)
    problems = [eos.setup_problem(p, seed) for seed in (0, 1)]
    X = np.stack([prob[1].numpy() for prob in problems])
    y = np.stack([prob[2].numpy() for prob in problems])
    u = np.stack([eos.to_batched_layout(task, prob[3].numpy()) for prob in problems])
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    references = [eos.train_gd(cfg, Xs, ys, w_svm, 10.0, 30, 10, lambda: None)
                  for cfg, Xs, ys, w_svm in problems]
    eta = np.array([ref.eta for ref in references])
    out = eos.run_batched_gd(eos.BatchedLinearGD(task, X, y), eta, u, 30, np.array([30]), 30)
    for b, ref in enumerate(references):
        expected = eos.to_batched_layout(task, ref.w_final.numpy())
        np.testing.assert_allclose(out["checkpoints"][-1, b], expected, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(out["early_loss"][:, b], ref.loss, rtol=1e-9)


def test_frozen_control_never_moves_along_the_max_margin_direction():
    task = "binary logistic"
    cfg, X, y, w_svm = eos.setup_problem(eos.Params(eta_times_inv_L=100.0), 0)
    u = eos.to_batched_layout(task, w_svm.numpy())[None]
    u = u / np.linalg.norm(u)
    eta = np.array([100.0 / lc.sharpness(cfg, lc.init_weights(cfg), X, y)])
    gd = eos.BatchedLinearGD(task, X.numpy()[None], y.numpy()[None])
    out = eos.run_batched_gd(gd, eta, u, 200, np.array([0]), 200, frozen=True)
    assert np.abs(out["dense"][:, 0] @ u[0]).max() < 1e-9


def _oscillation(decay: float, steps: int = 2000) -> np.ndarray:
    """w_perp(t) = (-1)^t a(t) e_1 with a(t) = exp(-decay t): a period-two oscillation."""
    t = np.arange(steps + 1)
    w = np.zeros((steps + 1, 3))
    w[:, 0] = (-1.0) ** t * np.exp(-decay * t)
    return w


def test_amplitude_of_a_period_two_oscillation_is_its_size():
    amplitudes = eos.window_amplitudes(_oscillation(0.0))
    assert amplitudes.shape == (100,) and np.allclose(amplitudes, 1.0)
    assert eos.damping_decades(amplitudes) == pytest.approx(0.0)
    assert eos.damping_decades(eos.window_amplitudes(_oscillation(0.005))) > 3


KEY = ("binary logistic", "anisotropic", 100.0)


def test_damping_fails_for_a_run_without_damping_and_passes_when_parallel_progress_damps():
    undamped = np.array([eos.damping_decades(eos.window_amplitudes(_oscillation(0.0)))] * 5)
    damped = np.array([eos.damping_decades(eos.window_amplitudes(_oscillation(d)))
                       for d in (0.004, 0.005, 0.006, 0.0045, 0.0055)])
    frozen = undamped + np.array([0.01, -0.02, 0.0, 0.015, -0.01])
    assert eos.criterion_damping({KEY: undamped}, {KEY: frozen}).verdict == "FAIL"
    assert eos.criterion_damping({KEY: damped}, {KEY: frozen}).verdict == "PASS"


def test_direction_fails_when_1_minus_cos_grows_or_a_stable_run_stays_below_0_99():
    falling = {KEY: np.array([-0.3, -0.25, -0.35, -0.28, -0.31])}
    stable = {("binary logistic", "anisotropic", 0.1): np.array([0.995, 0.996, 0.997, 0.995,
                                                                 0.996])}
    assert eos.criterion_direction(falling, stable).verdict == "PASS"
    rising = {KEY: np.array([0.2, 0.25, 0.3, 0.22, 0.27])}
    assert eos.criterion_direction(rising, stable).verdict == "FAIL"
    short = {key: values - 0.02 for key, values in stable.items()}
    assert eos.criterion_direction(falling, short).verdict == "FAIL"


CASES = [("binary logistic", "anisotropic"), ("3-class cross-entropy", "strongly anisotropic")]


def test_residuals_need_a_large_and_persistent_gap_in_at_least_one_geometry():
    big = np.array([1.2, 1.1, 1.3, 1.25, 1.15])  # 10^1.2 times the small-step residual
    none = np.array([0.01, -0.02, 0.0, 0.02, -0.01])  # the same residual at both step sizes
    settled = np.array([0.001, 0.002, 0.0015, 0.001, 0.0012])
    drifting = np.array([0.1, 0.12, 0.09, 0.11, 0.1])
    one = eos.criterion_residuals(dict(zip(CASES, [big, none], strict=True)),
                                  dict(zip(CASES, [settled, settled], strict=True)))
    assert one.verdict == "PASS"  # existential: one geometry suffices
    assert eos.criterion_residuals(dict(zip(CASES, [none, none], strict=True)),
                                   dict(zip(CASES, [settled, settled], strict=True))
                                   ).verdict == "FAIL"
    assert eos.criterion_residuals(dict(zip(CASES, [big, big], strict=True)),
                                   dict(zip(CASES, [drifting, drifting], strict=True))
                                   ).verdict == "FAIL"


def test_amplification_fails_when_every_geometry_shrinks_the_residual_with_eta():
    shrinking = np.array([-0.2, -0.25, -0.3, -0.22, -0.27])
    growing = -shrinking
    assert eos.criterion_amplification(dict(zip(CASES, [shrinking, shrinking], strict=True))
                                       ).verdict == "FAIL"
    assert eos.criterion_amplification(dict(zip(CASES, [shrinking, growing], strict=True))
                                       ).verdict == "PASS"


def test_persistence_is_the_largest_decade_change_over_w_par():
    row = {"t": [0, 1000, 10_000, 100_000, 1_000_000], "w_perp": [0, 4.0, 3.9, 3.85, 3.84],
           "w_par": [0, 20, 22, 24, 25.0]}
    assert eos.persistence_of(row, 1_000_000) == pytest.approx(0.1 / 25)


def test_a_run_stalled_by_float64_underflow_is_undecided_not_failed():
    row = {"w_par": [1.0, 5.0, 5.0, 5.0], "w_perp": [2.0, 3.0, 3.0, 3.0]}
    late = np.array([False, True, True, True])
    assert eos.stalled(row, late) and not eos.stalled({**row, "w_par": [1, 4, 5, 6]}, late)
    flat = {KEY: np.array([1e-17, 2e-17, 3e-17, 1e-17, 2e-17])}  # round-off, not a trend
    assert eos.criterion_direction(flat, {}).verdict == "FAIL"
    assert eos.criterion_direction(flat, {}, {KEY}).verdict == "INCONCLUSIVE"
