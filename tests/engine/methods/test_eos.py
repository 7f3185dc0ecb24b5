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
        REPRODUCE.params(smoke=True, step_sizes=[1.0])



# -- the reproduction -----------------------------------------------------------------------------

def test_reproduce_smoke_reports_every_criterion_with_numbers(tmp_path):
    events: list[dict] = []
    ctx = JobContext("job1", tmp_path, emit=events.append, seed=0)
    outputs = REPRODUCE.run(ctx, REPRODUCE.params(smoke=True), {})
    claim = outputs["claim"]

    assert claim["smoke"] is True and claim["paper"] == "eos" and claim["seeds"] == [0]
    names = [c["name"][:4] for c in claim["criteria"]]
    assert names == ["(1a)", "(1b)", "(2) ", "(3) ", "(4a)", "(4b)"]
    for criterion in claim["criteria"]:
        assert math.isfinite(criterion["measured"]), criterion
        assert isinstance(criterion["passed"], bool) and criterion["paper"]
    assert claim["passed"] == all(c["passed"] for c in claim["criteria"])
    assert claim["notes"] and claim["wall_s"] > 0
    # Smoke runs are far too short for a verdict, but the edge of stability shows already.
    assert claim["criteria"][0]["measured"] >= 3
    bias = json.loads((tmp_path / outputs["anisotropic_binary_logistic_bias_plot"]).read_text())
    assert bias["kind"] == "plot" and len(bias["series"]) == 2
    json.dumps(claim)
