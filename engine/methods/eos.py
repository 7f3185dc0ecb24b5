"""Edge of stability for exponential-tail losses: full-batch GD on separable data with big steps.

A linear classifier (no bias) is trained by full-batch gradient descent on the logistic loss
(binary) or the cross-entropy loss (K classes) with a step size eta given in units of 1/L, where
L is the sharpness (top Hessian eigenvalue) at initialisation. Steps above 2/L make the loss
non-monotone at first; the question is how GD still converges, and where to.

Decomposition used throughout (computed in ``train_gd``). Let u = vec(w_SVM) / ||w_SVM||, the unit
max-margin direction (hard-margin SVM without bias; for K classes the Frobenius-normalised
multiclass SVM matrix, W_SVM = argmin ||W||_F s.t. (w_y - w_k).x_i >= 1 for all i and k != y_i):

    w_par  = <vec(w), u> u        (reported signed, as the scalar <vec(w), u>)
    w_perp = vec(w) - w_par       (reported as its norm ||w_perp||)
    cos    = <vec(w), u> / ||w||

Oscillation amplitude (``oscillation_amplitude``): over consecutive windows of 200 steps,

    A_window = mean over t in the window of ||w_perp(t+1) - 2 w_perp(t) + w_perp(t-1)|| / 4,

which equals a for a period-two oscillation w_perp(t) = c + (-1)^t a v (|v| = 1) and is only the
(tiny) second difference of a smooth drift, so it measures oscillation rather than the slow
convergence of w_perp itself.

Data (``make_data``): symmetric Gaussian classes. The K class means lie on a regular simplex of
radius ``separation`` in the first m coordinates (m = 1 for two classes, K - 1 otherwise); noise
has std 1 there and, in the d - m orthogonal coordinates, stds spaced geometrically from
``anisotropy`` down to 1. Each point is redrawn until it lies at least ``gap`` beyond every
pairwise Bayes boundary, so the data are separable through the origin. With isotropic noise
the top-curvature direction at w = 0 is the mean direction itself, so one large step separates
the data and the loss never rises; with ``anisotropy`` above ~2 the top curvature lies in a noise
direction orthogonal to the means, and that is where GD oscillates (the edge of stability).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from engine import verdicts
from engine.api import (
    Claim,
    MethodParams,
    MethodSpec,
    ReproduceParams,
    Resources,
    reproduce_spec,
)
from engine.plots import plot, series
from engine.threads import limit_threads

if TYPE_CHECKING:
    from engine.context import JobContext

PAPER = "eos"
AMPLITUDE_WINDOW = 200  # steps per window of the oscillation amplitude (the spec's window)
MAX_DRAWS_PER_POINT = 10_000  # rejection sampling gives up when gap is out of reach


class Params(MethodParams):
    """One GD run of a linear classifier on separable Gaussian data."""

    loss: Literal["logistic", "cross_entropy"] = Field(
        "logistic", description="logistic (binary) or cross_entropy (multiclass softmax)")
    classes: int = Field(2, ge=2, le=10, description="number of classes; logistic needs 2")
    d: int = Field(10, ge=2, le=100, description="input dimension")
    n: int = Field(200, ge=4, le=5000, description="number of training points (balanced)")
    separation: float = Field(2.0, gt=0, le=100,
                              description="distance of each class mean from the origin")
    anisotropy: float = Field(10.0, ge=1, le=1000, description=(
        "noise std of the widest direction orthogonal to the class means (1 = isotropic); "
        "above ~2 that direction carries the top curvature and GD oscillates along it"))
    gap: float = Field(0.5, ge=0, le=10, description=(
        "every point lies at least this far beyond each pairwise Bayes boundary (separability)"))
    eta_times_inv_L: float = Field(10.0, gt=0, le=1e4, description=(
        "step size in units of 1/L, L = sharpness at initialisation; above 2 is unstable at first"))
    steps: int = Field(5000, ge=1, le=200_000, description="full-batch GD steps")
    record_every: int = Field(10, ge=1, le=10_000,
                              description="compute the sharpness and report progress every k steps")
    sharpness_method: Literal["exact", "power"] = Field(
        "exact", description="eigvalsh of the exact Hessian, or power iteration on HVPs")
    init_scale: float = Field(0.0, ge=0, le=10,
                              description="std of the initial weights (0 = start at zero)")

    @model_validator(mode="after")
    def _check_shape(self) -> Params:
        if self.loss == "logistic" and self.classes != 2:
            raise ValueError("the logistic loss is binary: set classes=2 or loss='cross_entropy'")
        if self.d <= signal_dims(self.classes):
            raise ValueError(f"d must exceed {signal_dims(self.classes)} for {self.classes} "
                             "classes (the means need that many dimensions, noise one more)")
        if self.n < 2 * self.classes:
            raise ValueError(f"n must be at least 2 points per class ({2 * self.classes})")
        return self


# -- data ------------------------------------------------------------------------------------

def signal_dims(classes: int) -> int:
    """Coordinates spanned by the class means: 1 for two classes, K - 1 otherwise."""
    return 1 if classes == 2 else classes - 1


def class_means(classes: int, separation: float) -> np.ndarray:
    """(K, m) means on a regular simplex centred at 0, each at distance ``separation``."""
    if classes == 2:
        return np.array([[-separation], [separation]])
    centred = np.eye(classes) - 1.0 / classes
    basis = np.linalg.svd(centred)[0][:, : classes - 1]  # orthonormal basis of the simplex plane
    means = centred @ basis
    return separation * means / np.linalg.norm(means, axis=1, keepdims=True)


def noise_stds(d: int, classes: int, anisotropy: float) -> np.ndarray:
    m = signal_dims(classes)
    orthogonal = anisotropy ** (1.0 - np.arange(d - m) / max(d - m - 1, 1))
    return np.concatenate([np.ones(m), orthogonal])


def make_data(p: Params, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """X (n, d) float64 and y (n,) int64 with balanced classes; see the module docstring."""
    rng = np.random.default_rng(seed)
    means = class_means(p.classes, p.separation)
    stds = noise_stds(p.d, p.classes, p.anisotropy)
    m = means.shape[1]
    y = np.arange(p.n) % p.classes
    X = np.empty((p.n, p.d))
    for i, label in enumerate(y):
        for _ in range(MAX_DRAWS_PER_POINT):
            x = rng.normal(size=p.d) * stds
            x[:m] += means[label]
            if _clearance(x[:m], label, means) >= p.gap:
                break
        else:
            raise ValueError(f"gap {p.gap:g} is too large for separation {p.separation:g}: "
                             "almost no Gaussian draw clears it; lower gap or raise separation")
        X[i] = x
    return X, y.astype(np.int64)


def _clearance(signal: np.ndarray, label: int, means: np.ndarray) -> float:
    """Distance beyond the nearest pairwise Bayes boundary (all means have equal norms)."""
    diffs = means[label] - np.delete(means, label, axis=0)
    return float(np.min(diffs @ signal / np.linalg.norm(diffs, axis=1)))


# -- gradient descent --------------------------------------------------------------------------

@dataclass
class Trajectory:
    """Per-step scalars of one GD run (index t = weights after t steps), plus recorded sharpness."""

    eta: float
    L: float
    u: np.ndarray  # unit max-margin direction, flattened
    loss: np.ndarray
    w_par: np.ndarray
    w_perp: np.ndarray
    cos_svm: np.ndarray
    perp_curvature: np.ndarray  # ||w_perp(t+1) - 2 w_perp(t) + w_perp(t-1)|| / 4, NaN at ends
    sharpness_steps: np.ndarray
    sharpness: np.ndarray
    w_final: Any  # torch tensor, shape of w
    weights: np.ndarray | None = None  # (steps + 1, n_params) when kept


def train_gd(
    cfg: Any,
    X: Any,
    y: Any,
    w_svm: Any,
    eta_times_inv_L: float,
    steps: int,
    record_every: int,
    check_cancelled: Callable[[], None],
    on_record: Callable[[int, dict], None] | None = None,
    w0: Any = None,
    sharpness_method: str = "exact",
    keep_weights: bool = False,
) -> Trajectory:
    """Full-batch GD w <- w - eta grad, eta = eta_times_inv_L / L with L the sharpness at w0.

    Every step: loss, w_par, ||w_perp||, cos(w, w_SVM) and the w_perp second difference; every
    ``record_every`` steps (and the last): the sharpness, then ``on_record(step, metrics)``.
    """

    from engine.models import linear_classifier as lc

    measure_sharpness = lc.sharpness if sharpness_method == "exact" else lc.linear_power_sharpness
    with limit_threads(1):
        w = lc.init_weights(cfg) if w0 is None else w0.clone()
        L = measure_sharpness(cfg, w, X, y)
        eta = eta_times_inv_L / L
        u = (w_svm / w_svm.norm()).reshape(-1).numpy()

        loss, w_par, w_perp, cos_svm = (np.empty(steps + 1) for _ in range(4))
        curvature = np.full(steps + 1, np.nan)
        weights = np.empty((steps + 1, cfg.n_params)) if keep_weights else None
        recorded_steps, recorded_sharpness = [], []
        perp_prev = perp_prev2 = None

        for t in range(steps + 1):
            check_cancelled()
            value, grad = lc.loss_and_gradient(cfg, w, X, y)
            flat = w.reshape(-1).numpy()  # numpy for the bookkeeping: ~10x less overhead
            par = float(flat @ u)
            perp = flat - par * u
            loss[t], w_par[t], w_perp[t] = value, par, math.sqrt(perp @ perp)
            cos_svm[t] = par / max(math.sqrt(flat @ flat), 1e-300)
            if perp_prev2 is not None:
                bend = perp - 2 * perp_prev + perp_prev2
                curvature[t - 1] = math.sqrt(bend @ bend) / 4
            perp_prev2, perp_prev = perp_prev, perp
            if weights is not None:
                weights[t] = flat
            if t % record_every == 0 or t == steps:
                sharp = measure_sharpness(cfg, w, X, y)
                recorded_steps.append(t)
                recorded_sharpness.append(sharp)
                if on_record is not None:
                    on_record(t, {"loss": value, "sharpness": sharp, "w_par": par,
                                  "w_perp": w_perp[t], "cos_svm": cos_svm[t],
                                  "two_over_eta": 2 / eta})
            if t < steps:
                w = w - eta * grad

    return Trajectory(eta=eta, L=L, u=u, loss=loss, w_par=w_par, w_perp=w_perp,
                      cos_svm=cos_svm, perp_curvature=curvature,
                      sharpness_steps=np.array(recorded_steps),
                      sharpness=np.array(recorded_sharpness), w_final=w, weights=weights)




def oscillation_amplitude(traj: Trajectory, window: int = AMPLITUDE_WINDOW
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per full window of ``window`` steps: (first step, amplitude A, mean w_par); see the
    module docstring for A."""
    starts = np.arange(len(traj.loss) // window) * window
    amplitude = np.array([np.nanmean(traj.perp_curvature[s:s + window]) for s in starts])
    par = np.array([np.mean(traj.w_par[s:s + window]) for s in starts])
    return starts, amplitude, par


def loss_rises(traj: Trajectory, first: int = 200) -> int:
    """How many of the first ``first`` steps increased the loss."""
    return int(np.sum(np.diff(traj.loss[:first + 1]) > 0))


def setup_problem(p: Params, seed: int) -> tuple[Any, Any, Any, Any]:
    """(model config, X, y, w_SVM) as float64 torch tensors."""
    import torch

    from engine.models import linear_classifier as lc

    cfg = lc.LinearClassifierConfig(loss=p.loss, d=p.d, classes=p.classes)
    X_np, y_np = make_data(p, seed)
    X, y = torch.from_numpy(X_np), torch.from_numpy(y_np)
    return cfg, X, y, lc.max_margin(cfg, X, y)


# -- eos.train ---------------------------------------------------------------------------------

def run_train(ctx: JobContext, params: Params, inputs: dict) -> dict:
    """Train once, stream the metrics, save the five figures, the arrays and the final weights."""
    from engine.models import linear_classifier as lc

    cfg, X, y, w_svm = setup_problem(params, ctx.seed)
    w0 = lc.init_weights(cfg, params.init_scale, seed=ctx.seed)
    ctx.log(f"data: n={params.n} d={params.d} classes={params.classes}, "
            f"max-margin ||w_SVM|| = {w_svm.norm().item():.4g}")

    traj = train_gd(cfg, X, y, w_svm, params.eta_times_inv_L, params.steps, params.record_every,
                    ctx.check_cancelled,
                    on_record=lambda t, metrics: ctx.progress(t, params.steps, **metrics),
                    w0=w0, sharpness_method=params.sharpness_method)
    ctx.log(f"L = {traj.L:.4g}, eta = {traj.eta:.4g} (2/eta = {2 / traj.eta:.4g})")

    label = f"eta = {params.eta_times_inv_L:g}/L"
    outputs = {name: ctx.save_artifact(name, spec)
               for name, spec in run_figures([(label, traj)]).items()}
    _, amplitude, _ = oscillation_amplitude(traj)
    for name, values in [("loss", traj.loss), ("w_par", traj.w_par), ("w_perp", traj.w_perp),
                         ("cos_svm", traj.cos_svm), ("sharpness_steps", traj.sharpness_steps),
                         ("sharpness", traj.sharpness), ("amplitude", amplitude)]:
        outputs[f"{name}_array"] = ctx.save_artifact(name, values)
    outputs["checkpoint"] = ctx.save_checkpoint(
        "final", {"w": traj.w_final, "w_svm": w_svm},
        cfg={**params.model_dump(), "L": traj.L, "eta": traj.eta, "seed": ctx.seed})
    outputs["final"] = {
        "loss": float(traj.loss[-1]), "sharpness": float(traj.sharpness[-1]),
        "two_over_eta": 2 / traj.eta, "L": traj.L, "eta": traj.eta,
        "w_par": float(traj.w_par[-1]), "w_perp": float(traj.w_perp[-1]),
        "cos_svm": float(traj.cos_svm[-1]), "loss_rises_first_200": loss_rises(traj),
        "unstable_steps": unstable_steps(traj),
        "amplitude_first_window": float(amplitude[0]) if amplitude.size else math.nan,
        "amplitude_last_window": float(amplitude[-1]) if amplitude.size else math.nan,
    }
    return outputs


def run_figures(runs: list[tuple[str, Trajectory]], title: str = "") -> dict[str, dict]:
    """Loss, sharpness vs 2/eta, ||w_par|| and ||w_perp||, cos vs log step, oscillation."""
    loss, sharp, parts, cos, amp = [], [], [], [], []
    for label, traj in runs:
        index = plot_steps(len(traj.loss))
        loss.append(series(label, index, traj.loss[index]))
        sharp.append(series(label, traj.sharpness_steps, traj.sharpness))
        parts.append(series(f"w_par, {label}", index, np.abs(traj.w_par[index])))
        parts.append(series(f"w_perp, {label}", index, traj.w_perp[index]))
        cos.append(series(label, index[1:], traj.cos_svm[index[1:]]))
        starts, amplitude, _ = oscillation_amplitude(traj)
        amp.append(series(label, starts + AMPLITUDE_WINDOW / 2, amplitude))
    prefix = f"{title}: " if title else ""
    return {
        "loss_plot": plot(prefix + "training loss", loss, "step", "loss", logy=True),
        "sharpness_plot": plot(
            prefix + "sharpness vs 2/eta (dashed)", sharp, "step", "top Hessian eigenvalue",
            logy=True, hlines=[{"y": 2 / t.eta, "name": f"2/eta, {label}"} for label, t in runs]),
        "decomposition_plot": plot(prefix + "||w_par|| (along w_SVM) and ||w_perp||", parts,
                                   "step", "norm"),
        "cos_plot": plot(prefix + "cos(w, w_SVM) vs log step", cos, "step", "cos(w, w_SVM)",
                         logx=True, hlines=[{"y": 0.99, "name": "0.99"}]),
        "amplitude_plot": plot(prefix + f"w_perp oscillation per {AMPLITUDE_WINDOW}-step window",
                               amp, "step", "amplitude A", logy=True),
    }


def plot_steps(length: int, dense: int = 500, sparse: int = 1000) -> np.ndarray:
    """Indices to plot: every one of the first ``dense`` steps, then log-spaced to the end."""
    head = np.arange(min(length, dense))
    if length <= dense:
        return head
    tail = np.geomspace(dense, length - 1, sparse).astype(int)
    return np.unique(np.concatenate([head, tail]))


def unstable_steps(traj: Trajectory) -> int:
    """First recorded step after which eta x sharpness stays below 2 (0 if it always was)."""
    above = np.nonzero(traj.eta * traj.sharpness >= 2)[0]
    if above.size == 0:
        return 0
    if above[-1] + 1 == len(traj.sharpness):  # still unstable at the end
        return len(traj.loss)
    return int(traj.sharpness_steps[above[-1] + 1])


# -- eos.reproduce (spec v2) -------------------------------------------------------------------
#
# Every run of one task (seeds x geometries x step sizes) advances together as one batched
# float64 numpy array; a unit of ``ctx.map`` is one task. Checkpoints lie on the log-time grid
# t = round(10^(k/4)); the first ``DENSE_STEPS`` steps are kept whole for the oscillation
# amplitude (windows of ``REPRODUCE_WINDOW`` steps) and for the frozen-parallel control.

STEP_SIZES = (0.1, 1.0, 10.0, 100.0)  # x 1/L
STABLE_MAX = 1.0  # eta <= 1/L: stable runs
EOS_MIN = 10.0  # eta >= 10/L in the anisotropic geometries: edge-of-stability runs
GEOMETRIES = {"isotropic": 1.0, "anisotropic": 10.0, "strongly anisotropic": 30.0}
ANISOTROPIC = ("anisotropic", "strongly anisotropic")
TASKS = {"binary logistic": {"loss": "logistic", "classes": 2},
         "3-class cross-entropy": {"loss": "cross_entropy", "classes": 3}}
REPRODUCE_WINDOW = 20  # steps per amplitude window (spec v2)
DENSE_STEPS = 2000  # amplitude windows and frozen controls cover steps 0-2000
EQUAL_LOSS = 1e-3  # criterion 4 compares w_perp at the first step with loss <= this
AMPLIFY_STEP_SIZES = (1.0, 10.0, 100.0)
RESIDUAL_LARGE, RESIDUAL_SMALL = 100.0, 0.1
LOSS_RISE_STEPS = 200
SHARPNESS_AGREEMENT = 1e-6
KKT_SLACK = 1e-8


class ReproduceEosParams(ReproduceParams):
    """The spec's experiment (v2); the profiles set its sizes."""

    PROFILE_SETTINGS: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"seeds": 1, "horizon": 2000, "tasks": ["binary logistic"],
                  "geometries": ["anisotropic"], "step_sizes": [0.1, 100.0]},
        "cpu": {"seeds": 5, "horizon": 1_000_000, "frozen_steps": 2000},
        "gpu": {"seeds": 20, "horizon": 10_000_000, "frozen_steps": 2000},
    }

    seeds: int = Field(5, ge=1, le=100, description="data draws (ctx.seed, ctx.seed + 1, ...)")
    horizon: int = Field(1_000_000, ge=10, le=100_000_000,
                         description="GD steps T; checkpoints at t = round(10^(k/4)) <= T")
    frozen_steps: int = Field(DENSE_STEPS, ge=10, le=100_000, description=(
        "steps of the frozen-parallel control (updates along w_SVM removed)"))
    tasks: list[Literal["binary logistic", "3-class cross-entropy"]] = Field(
        default_factory=lambda: list(TASKS), min_length=1)
    geometries: list[Literal["isotropic", "anisotropic", "strongly anisotropic"]] = Field(
        default_factory=lambda: list(GEOMETRIES), min_length=1)
    step_sizes: list[float] = Field(default_factory=lambda: list(STEP_SIZES), min_length=1,
                                    description="step sizes in units of 1/L")


def log_time_checkpoints(horizon: int) -> np.ndarray:
    """t = round(10^(k/4)) for k = 0, 1, ... up to the horizon, with t = 0 and t = T."""
    ks = np.arange(int(math.floor(4 * math.log10(horizon) + 1e-9)) + 1)
    grid = np.unique(np.round(10.0 ** (ks / 4)).astype(np.int64))
    return np.unique(np.concatenate([[0], grid[grid <= horizon], [horizon]]))


class BatchedLinearGD:
    """Full-batch GD of B independent linear classifiers at once (float64 numpy).

    Weights are (B, p) in a per-task layout: logistic w (B, d); cross-entropy W stored class
    by class, vec index k * d + j (the transpose of ``linear_classifier``'s row-major (d, K))."""

    def __init__(self, task: str, X: np.ndarray, y: np.ndarray) -> None:
        self.task, self.classes = task, TASKS[task]["classes"]
        self.X = np.ascontiguousarray(X)  # (B, n, d)
        self.XT = np.ascontiguousarray(X.transpose(0, 2, 1))
        self.B, self.n, self.d = X.shape
        if self.classes == 2:
            signs = (2.0 * y - 1.0)[:, :, None]
            self.Z = np.ascontiguousarray(signs * X)
            self.ZT = np.ascontiguousarray(self.Z.transpose(0, 2, 1))
        else:
            self.onehot = np.zeros((self.B, self.classes, self.n))
            np.put_along_axis(self.onehot, y[:, None, :].astype(np.int64), 1.0, axis=1)

    @property
    def n_params(self) -> int:
        return self.d if self.classes == 2 else self.d * self.classes

    def gradient(self, w: np.ndarray, with_loss: bool = False
                 ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(gradient (B, p), loss (B,) or None, a lower bound of the loss (B,)).

        The bound costs almost nothing (-log q >= 1 - q for the probability q of the true
        class), so the exact loss is needed only where the bound is already small."""
        from scipy.special import expit

        if self.classes == 2:
            margins = self.Z @ w[:, :, None]  # (B, n, 1)
            wrong = expit(-margins)  # 1 - q
            grad = -(self.ZT @ wrong)[:, :, 0] / self.n
            bound = wrong.mean(axis=(1, 2))
            loss = np.logaddexp(0.0, -margins).mean(axis=(1, 2)) if with_loss else None
            return grad, loss, bound
        W = w.reshape(self.B, self.classes, self.d)
        logits = W @ self.XT  # (B, K, n)
        top = logits.max(axis=1, keepdims=True) if self.classes > 3 else np.maximum(
            np.maximum(logits[:, :1], logits[:, 1:2]), logits[:, 2:3])
        logits -= top
        loss = None
        if with_loss:
            true_logit = (logits * self.onehot).sum(axis=1)
        np.exp(logits, out=logits)
        total = logits.sum(axis=1, keepdims=True)
        if with_loss:
            loss = (np.log(total[:, 0]) - true_logit).mean(axis=1)
        logits /= total
        logits -= self.onehot  # p - y: its entries' absolute values sum to 2 (1 - q) per point
        bound = np.abs(logits).sum(axis=(1, 2)) / (2 * self.n)
        return (logits @ self.X).reshape(self.B, -1) / self.n, loss, bound


def to_batched_layout(task: str, w_lc: np.ndarray) -> np.ndarray:
    """``linear_classifier``'s weight (d,) or (d, K) as a flat vector in BatchedLinearGD's
    layout."""
    return w_lc.reshape(-1) if TASKS[task]["classes"] == 2 else w_lc.T.reshape(-1)


def run_batched_gd(gd: BatchedLinearGD, eta: np.ndarray, u: np.ndarray, steps: int,
                   checkpoints: np.ndarray, dense_steps: int, frozen: bool = False,
                   loss_level: float = EQUAL_LOSS, loss_steps: int = LOSS_RISE_STEPS,
                   track: np.ndarray | None = None,
                   check_cancelled: Callable[[], None] = lambda: None) -> dict[str, np.ndarray]:
    """GD from w = 0 for ``steps`` steps; ``frozen`` removes each update's component along u.

    Returns the weights at ``checkpoints`` (C, B, p), every step's weights up to
    ``dense_steps`` (dense + 1, B, p), the loss of the first ``loss_steps`` steps, and per run
    the first step at which the loss is <= ``loss_level`` with its weights (-1 / NaN if never;
    followed only for the rows ``track`` marks, all by default: the loss costs a pass).
    """
    B, p = gd.B, gd.n_params
    w = np.zeros((B, p))
    wanted = set(int(t) for t in checkpoints if t <= steps)
    saved = {}
    dense = np.empty((min(dense_steps, steps) + 1, B, p))
    early_loss = np.empty((min(loss_steps, steps) + 1, B))
    crossed_at = np.full(B, -1, dtype=np.int64)
    crossed_w = np.full((B, p), np.nan)
    pending = np.ones(B, dtype=bool) if track is None else np.asarray(track, dtype=bool).copy()
    step_size = eta[:, None]
    for t in range(steps + 1):
        if t % 1000 == 0:
            check_cancelled()
        grad, loss, bound = gd.gradient(w, with_loss=t <= loss_steps)
        if loss is None and bool(np.any(pending & (bound <= loss_level))):
            _, loss, _ = gd.gradient(w, with_loss=True)
        if t in wanted:
            saved[t] = w.copy()
        if t < dense.shape[0]:
            dense[t] = w
        if loss is not None:
            if t < early_loss.shape[0]:
                early_loss[t] = loss
            newly = (crossed_at < 0) & (loss <= loss_level)
            crossed_at[newly] = t
            crossed_w[newly] = w[newly]
            pending &= ~newly
        if t == steps:
            break
        if frozen:
            grad = grad - np.sum(grad * u, axis=1, keepdims=True) * u
        w -= step_size * grad
    kept = np.array(sorted(saved))
    return {"checkpoint_steps": kept, "checkpoints": np.stack([saved[t] for t in kept]),
            "dense": dense, "early_loss": early_loss, "crossed_at": crossed_at,
            "crossed_w": crossed_w}


def window_amplitudes(w_perp: np.ndarray, window: int = REPRODUCE_WINDOW) -> np.ndarray:
    """A per window of ``window`` steps: the mean of ||w_perp(t+1) - 2 w_perp(t) +
    w_perp(t-1)|| / 4 over the window's interior steps t. ``w_perp`` is (steps + 1, ..., p);
    the result is (windows, ...)."""
    bend = np.linalg.norm(w_perp[2:] - 2 * w_perp[1:-1] + w_perp[:-2], axis=-1) / 4
    steps = w_perp.shape[0] - 1
    count = steps // window
    # interior step t = s + 1 for bend index s; window j covers t in [j w, (j + 1) w)
    per_step = np.concatenate([np.full((1, *bend.shape[1:]), np.nan), bend])
    return np.array([np.nanmean(per_step[j * window:(j + 1) * window], axis=0)
                     for j in range(count)])


def damping_decades(amplitudes: np.ndarray) -> np.ndarray:
    """D = log10(A_max / A_end) along axis 0 (A_end the last window's amplitude)."""
    return np.log10(np.max(amplitudes, axis=0) / amplitudes[-1])


def perp_part(w: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w_par scalar, w_perp vector) of w (..., B, p) relative to unit u (B, p)."""
    par = np.sum(w * u, axis=-1)
    return par, w - par[..., None] * u


def log_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y on x (NaN with fewer than two finite points)."""
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 2:
        return math.nan
    return float(np.polyfit(x[keep], y[keep], 1)[0])


def eos_unit(item: dict) -> dict:
    """One task: every (seed, geometry, step size) run to the horizon in one batch, then the
    frozen controls of the EoS runs to ``frozen_steps``; per-run summaries (JSON)."""
    import torch

    from engine.models import linear_classifier as lc

    task, horizon = item["task"], int(item["horizon"])
    runs = [(seed, geometry, c) for seed in item["seeds"] for geometry in item["geometries"]
            for c in item["step_sizes"]]
    problems: dict[tuple[int, str], dict] = {}
    for seed, geometry in {(s, g) for s, g, _ in runs}:
        p = Params(**TASKS[task], anisotropy=GEOMETRIES[geometry], eta_times_inv_L=1.0)
        cfg = lc.LinearClassifierConfig(loss=p.loss, d=p.d, classes=p.classes)
        X_np, y_np = make_data(p, seed)
        X, y = torch.from_numpy(X_np), torch.from_numpy(y_np)
        w_svm = lc.max_margin(cfg, X, y)
        w0 = lc.init_weights(cfg)
        exact = lc.sharpness(cfg, w0, X, y)
        power = lc.linear_power_sharpness(cfg, w0, X, y)
        margins = lc.margin_constraints(cfg, X, y) @ w_svm.reshape(-1)
        u = to_batched_layout(task, w_svm.numpy())
        problems[seed, geometry] = {
            "X": X_np, "y": y_np, "L": exact, "u": u / np.linalg.norm(u),
            "svm_norm": float(np.linalg.norm(u)), "sharpness_gap": abs(exact - power) / exact,
            "min_margin": float(margins.min())}

    X = np.stack([problems[s, g]["X"] for s, g, _ in runs])
    y = np.stack([problems[s, g]["y"] for s, g, _ in runs])
    u = np.stack([problems[s, g]["u"] for s, g, _ in runs])
    eta = np.array([c / problems[s, g]["L"] for s, g, c in runs])
    checkpoints = log_time_checkpoints(horizon)
    gd = BatchedLinearGD(task, X, y)
    track = np.array([c in AMPLIFY_STEP_SIZES for _, _, c in runs])
    free = run_batched_gd(gd, eta, u, horizon, checkpoints, DENSE_STEPS, track=track)

    eos_rows = [i for i, (_, g, c) in enumerate(runs) if g in ANISOTROPIC and c >= EOS_MIN]
    frozen_steps = min(int(item["frozen_steps"]), DENSE_STEPS, horizon)
    frozen_amplitude = None
    if eos_rows:
        frozen_gd = BatchedLinearGD(task, X[eos_rows], y[eos_rows])
        frozen = run_batched_gd(frozen_gd, eta[eos_rows], u[eos_rows], frozen_steps,
                                np.array([0]), frozen_steps, frozen=True, loss_steps=0,
                                track=np.zeros(len(eos_rows), dtype=bool))
        _, frozen_perp = perp_part(frozen["dense"], u[eos_rows])
        frozen_amplitude = window_amplitudes(frozen_perp)
        frozen_par = np.abs(np.sum(frozen["dense"] * u[eos_rows], axis=-1)).max(axis=0)

    par_c, perp_c = perp_part(free["checkpoints"], u)
    perp_norm_c = np.linalg.norm(perp_c, axis=-1)
    w_norm_c = np.linalg.norm(free["checkpoints"], axis=-1)
    safe_norm = np.maximum(w_norm_c, 1e-300)
    cos_c = par_c / safe_norm
    # 1 - cos without cancellation: |w_perp|^2 / (|w| (|w| + w_par)) where w_par > 0
    with np.errstate(invalid="ignore", divide="ignore"):  # t = 0: w = 0, no direction yet
        gap_c = np.where(par_c > 0, perp_norm_c**2 / (safe_norm * (safe_norm + np.abs(par_c))),
                         1.0 - cos_c)
    _, dense_perp = perp_part(free["dense"][: frozen_steps + 1], u)
    amplitude = window_amplitudes(dense_perp)
    _, crossed_perp = perp_part(free["crossed_w"], u)
    rises = np.sum(np.diff(free["early_loss"], axis=0) > 0, axis=0)

    results = []
    for i, (seed, geometry, c) in enumerate(runs):
        problem = problems[seed, geometry]
        row = {
            "seed": seed, "geometry": geometry, "task": task, "eta_L": c,
            "L": problem["L"], "eta_times_S0": float(eta[i] * problem["L"]),
            "sharpness_gap": problem["sharpness_gap"], "min_margin": problem["min_margin"],
            "svm_norm": problem["svm_norm"],
            "t": free["checkpoint_steps"].tolist(), "w_par": par_c[:, i].tolist(),
            "w_perp": perp_norm_c[:, i].tolist(), "cos": cos_c[:, i].tolist(),
            "one_minus_cos": gap_c[:, i].tolist(),
            "amplitude": amplitude[:, i].tolist(),
            "loss_rises": int(rises[i]),
            "equal_loss_step": int(free["crossed_at"][i]),
            "w_perp_at_equal_loss": float(np.linalg.norm(crossed_perp[i]))
            if free["crossed_at"][i] >= 0 else None,
        }
        if i in eos_rows:
            j = eos_rows.index(i)
            row["frozen_amplitude"] = frozen_amplitude[:, j].tolist()
            row["frozen_max_abs_w_par"] = float(frozen_par[j])
        results.append(row)
    return {"task": task, "runs": results}


ConfigKey = tuple[str, str, float]  # (task, geometry, eta x L)
CaseKey = tuple[str, str]  # (task, geometry)


def run_reproduce(ctx: JobContext, params: ReproduceEosParams, inputs: dict) -> dict:
    """Spec v2: one unit per task, criteria (1)-(4) with t-intervals over data draws."""
    started = time.monotonic()
    seeds = [ctx.seed + k for k in range(params.seeds)]
    items = [{"task": task, "seeds": seeds, "geometries": list(params.geometries),
              "step_sizes": list(params.step_sizes), "horizon": params.horizon,
              "frozen_steps": params.frozen_steps} for task in params.tasks]
    ctx.log(f"{len(items)} task(s) x {len(seeds)} seed(s) x {len(params.geometries)} "
            f"geometries x {len(params.step_sizes)} step sizes, T = {params.horizon}")
    runs = [row for result in ctx.map(eos_unit, items) for row in result["runs"]]
    for row in runs:
        ctx.log(f"seed {row['seed']}, {row['geometry']}, {row['task']}, eta = "
                f"{row['eta_L']:g}/L: cos(w(T), w_SVM) {row['cos'][-1]:.5f}, ||w_perp(T)|| "
                f"{row['w_perp'][-1]:.4g}, w_par(T) {row['w_par'][-1]:.4g}")

    summary = summarise_runs(runs, params.horizon)
    criteria = [criterion_damping(summary["damping_free"], summary["damping_frozen"]),
                criterion_direction(summary["cos_slope"], summary["final_cos_stable"],
                                    summary["stalled"]),
                criterion_residuals(summary["residual_ratio"], summary["persistence"]),
                criterion_amplification(summary["amplification"])]
    sanity = sanity_checks(runs)
    outputs = save_reproduce_figures(ctx, runs)
    claim = Claim(
        paper=PAPER,
        statement=("Full-batch GD on logistic / cross-entropy losses above 2 / sharpness: "
                   "orthogonal oscillations are damped by parallel progress, GD converges to "
                   "the max-margin direction, and large steps can leave persistent orthogonal "
                   "residuals, amplified in some geometries."),
        criteria=criteria, seeds=seeds, wall_s=time.monotonic() - started, smoke=params.smoke,
        spec="v2", sanity=sanity,
        notes=reproduce_notes(summary, params))
    result = {"claim": claim.to_dict(), **outputs}
    outputs["claim_artifact"] = ctx.save_artifact("claim", result["claim"], kind="claim")
    broken = [check.name for check in sanity if not check.passed]
    if broken:
        raise RuntimeError("sanity check failed (a bug, not a verdict): " + "; ".join(broken))
    return result


def _per_seed(runs: list[dict], key: Callable[[dict], Any]) -> dict[Any, dict[int, dict]]:
    grouped: dict[Any, dict[int, dict]] = {}
    for row in runs:
        grouped.setdefault(key(row), {})[row["seed"]] = row
    return grouped


def decade_values(t: np.ndarray, values: np.ndarray, horizon: int, decades: int = 3
                  ) -> np.ndarray:
    """values at the checkpoints nearest (in log t) to T / 10^j, j = decades .. 0."""
    targets = horizon / 10.0 ** np.arange(decades, -1, -1)
    positive = t > 0
    logs = np.log10(t[positive])
    picks = [int(np.argmin(np.abs(logs - math.log10(target)))) for target in targets]
    return values[positive][picks]


def summarise_runs(runs: list[dict], horizon: int) -> dict[str, dict]:
    """The per-seed numbers every criterion is decided from (arrays over seeds, seed order)."""
    by_config = _per_seed(runs, lambda r: (r["task"], r["geometry"], r["eta_L"]))
    damping_free, damping_frozen, cos_slope, final_cos_stable = {}, {}, {}, {}
    stalled_configs: set[ConfigKey] = set()
    for key, per_seed in by_config.items():
        rows = [per_seed[s] for s in sorted(per_seed)]
        if all("frozen_amplitude" in r for r in rows):
            damping_free[key] = np.array([damping_decades(np.array(r["amplitude"]))
                                          for r in rows])
            damping_frozen[key] = np.array([damping_decades(np.array(r["frozen_amplitude"]))
                                            for r in rows])
        slopes = []
        for r in rows:
            t, one_minus_cos = np.array(r["t"], dtype=float), np.array(r["one_minus_cos"])
            late = (t >= horizon / 1000) & (t > 0)
            if stalled(r, late):
                stalled_configs.add(key)
                slopes.append(math.nan)
                continue
            with np.errstate(divide="ignore"):
                gap = np.log10(one_minus_cos[late])
            slopes.append(log_slope(np.log10(t[late]), gap))
        cos_slope[key] = np.array(slopes)
        if key[2] <= STABLE_MAX:
            final_cos_stable[key] = np.array([r["cos"][-1] for r in rows])

    residual_ratio, persistence, amplification = {}, {}, {}
    for case in {k[:2] for k in by_config}:
        sizes = {k[2] for k in by_config if k[:2] == case}
        seeds = sorted(next(iter(by_config[(*case, c)] for c in sizes)))
        if case[1] in ANISOTROPIC and {RESIDUAL_LARGE, RESIDUAL_SMALL} <= sizes:
            large, small = by_config[(*case, RESIDUAL_LARGE)], by_config[(*case, RESIDUAL_SMALL)]
            residual_ratio[case] = np.array([math.log10(large[s]["w_perp"][-1]
                                                        / small[s]["w_perp"][-1])
                                             for s in seeds])
            persistence[case] = np.array([persistence_of(large[s], horizon) for s in seeds])
        amplify = [c for c in AMPLIFY_STEP_SIZES if c in sizes]
        if len(amplify) >= 2:
            amplification[case] = np.array([log_slope(
                np.log10(amplify),
                np.log10([_or_nan(by_config[(*case, c)][s]["w_perp_at_equal_loss"])
                          for c in amplify])) for s in seeds])
    return {"damping_free": damping_free, "damping_frozen": damping_frozen,
            "cos_slope": cos_slope, "final_cos_stable": final_cos_stable,
            "residual_ratio": residual_ratio, "persistence": persistence,
            "amplification": amplification, "stalled": stalled_configs}


def stalled(row: dict, late: np.ndarray) -> bool:
    """True when w did not move at all over the late checkpoints: every gradient entry
    underflowed to 0 in float64 (margins beyond ~745 after a huge first step), so the run has
    no measurable direction dynamics left; exact arithmetic would still move it, by e^-margin."""
    par, perp = np.array(row["w_par"])[late], np.array(row["w_perp"])[late]
    return bool(par.size >= 2 and np.ptp(par) == 0 and np.ptp(perp) == 0)


def persistence_of(row: dict, horizon: int) -> float:
    """The largest per-decade change of ||w_perp|| over the last three decades, over w_par(T)."""
    t = np.array(row["t"], dtype=float)
    perp = decade_values(t, np.array(row["w_perp"]), horizon)
    return float(np.max(np.abs(np.diff(perp))) / abs(row["w_par"][-1]))


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _config(key: ConfigKey) -> str:
    task, geometry, c = key
    return f"{task}, {geometry}, eta = {c:g}/L"


def combine_parts(name: str, quote: str, parts: list[verdicts.Criterion], aggregate: str,
                  rule: verdicts.Rule) -> verdicts.Criterion:
    """``verdicts.combine``; with no parts (the profile ran none of the configurations the
    criterion needs, e.g. smoke) an undecided leaf that says so."""
    if parts:
        return verdicts.combine(name, quote, parts, aggregate)
    return verdicts.Criterion(name, quote, math.nan, (-math.inf, math.inf), rule=rule,
                              method="not measured", verdict=verdicts.INCONCLUSIVE,
                              decides_with="the configurations this criterion needs (run the "
                                           "cpu or gpu profile)")


def criterion_damping(free: dict[ConfigKey, np.ndarray], frozen: dict[ConfigKey, np.ndarray]
                      ) -> verdicts.Criterion:
    """(1) per EoS configuration: D(free) - D(frozen) above 1 decade (all configurations)."""
    parts = [verdicts.criterion(
        f"(1) {_config(key)}: D(free) - D(frozen)",
        "damped by parallel progress",
        verdicts.t_interval(free[key] - frozen[key]), verdicts.Rule.above(1.0))
        for key in sorted(free)]
    return combine_parts(
        "(1) extra damping from parallel progress, log10(A_max / A_end) free minus frozen",
        "orthogonal oscillations are damped by parallel progress along directions of "
        "decreasing sharpness", parts, "all", verdicts.Rule.above(1.0))


def criterion_direction(cos_slope: dict[ConfigKey, np.ndarray],
                        final_cos_stable: dict[ConfigKey, np.ndarray],
                        stalled_configs: set[ConfigKey] = frozenset()) -> verdicts.Criterion:
    """(2a) slope of log10(1 - cos) on log10 t over [T/1000, T] below 0 for every run;
    (2b) stable runs' cos(w(T), w_SVM) above 0.99. A configuration whose runs stalled
    (float64 gradient underflow, ``stalled``) is undecided, never a FAIL."""
    slopes = verdicts.combine(
        "(2a) 1 - cos(w, w_SVM) falls on log time (slope over [T/1000, T] < 0)",
        "GD converges asymptotically to the max-margin direction",
        [verdicts.gate(verdicts.criterion(
            f"(2a) {_config(key)}: slope of log10(1 - cos) on log10 t",
            "converges asymptotically", verdicts.t_interval(values), verdicts.Rule.below(0.0)),
            key not in stalled_configs,
            "arithmetic beyond float64: the gradient underflowed to exactly 0 after the first "
            "steps, so w stopped moving (loss 0 in float64)")
         for key, values in sorted(cos_slope.items())], "all")
    parts = [slopes]
    if final_cos_stable:
        parts.append(verdicts.combine(
            "(2b) stable runs (eta <= 1/L): cos(w(T), w_SVM) above 0.99",
            "converges asymptotically to the max-margin direction",
            [verdicts.criterion(f"(2b) {_config(key)}: cos(w(T), w_SVM)", "max-margin direction",
                                verdicts.t_interval(values), verdicts.Rule.above(0.99))
             for key, values in sorted(final_cos_stable.items())], "all"))
    return verdicts.combine("(2) convergence to the max-margin direction",
                            "GD converges asymptotically to the max-margin direction", parts,
                            "all")


def criterion_residuals(ratio: dict[CaseKey, np.ndarray], persistence: dict[CaseKey, np.ndarray]
                        ) -> verdicts.Criterion:
    """(3) in at least one anisotropic (task, geometry): (a) ||w_perp(T)|| at 100/L over 0.1/L
    above 2x and (b) per-decade change of ||w_perp|| / w_par(T) below 0.01."""
    cases = []
    for case in sorted(ratio):
        label = f"{case[0]}, {case[1]}"
        cases.append(verdicts.combine(f"(3) {label}", "persistent orthogonal residuals", [
            verdicts.criterion(f"(3a) {label}: log10 ||w_perp(T)|| (100/L over 0.1/L)",
                               "large steps can leave ... orthogonal residuals",
                               verdicts.t_interval(ratio[case]),
                               verdicts.Rule.above(math.log10(2))),
            verdicts.criterion(f"(3b) {label}: largest per-decade change of ||w_perp|| over "
                               "the last three decades / w_par(T), eta = 100/L",
                               "persistent", verdicts.t_interval(persistence[case]),
                               verdicts.Rule.below(0.01)),
        ], "all"))
    return combine_parts("(3) persistent orthogonal residuals in some anisotropic geometry",
                         "large steps can leave persistent orthogonal residuals", cases, "any",
                         verdicts.Rule.above(math.log10(2)))


def criterion_amplification(slopes: dict[CaseKey, np.ndarray]) -> verdicts.Criterion:
    """(4) some (task, geometry) where ||w_perp|| at loss 1e-3 grows with eta (slope > 0)."""
    parts = [verdicts.criterion(
        f"(4) {case[0]}, {case[1]}: slope of log10 ||w_perp|| at loss 1e-3 on log10 eta",
        "amplify them", verdicts.t_interval(values), verdicts.Rule.above(0.0))
        for case, values in sorted(slopes.items())]
    return combine_parts("(4) residuals amplified by larger steps in some geometry",
                         "in certain geometries, amplify them", parts, "any",
                         verdicts.Rule.above(0.0))


def sanity_checks(runs: list[dict]) -> list[verdicts.SanityCheck]:
    """EoS runs start unstable and raise the loss early; exact and power-iteration sharpness
    agree; w_SVM meets the margin constraints."""
    eos_runs = [r for r in runs if r["geometry"] in ANISOTROPIC and r["eta_L"] >= EOS_MIN]
    unstable = [r for r in eos_runs if not (r["eta_times_S0"] > 2 and r["loss_rises"] >= 1)]
    worst_gap = max(r["sharpness_gap"] for r in runs)
    lowest_margin = min(r["min_margin"] for r in runs)
    return [
        verdicts.SanityCheck(
            "EoS runs: eta S(0) > 2 and the loss rises in the first 200 steps", not unstable,
            f"{len(eos_runs) - len(unstable)} of {len(eos_runs)} EoS runs; fewest rises "
            f"{min((r['loss_rises'] for r in eos_runs), default=0)}"),
        verdicts.SanityCheck("exact and power-iteration sharpness agree to 1e-6 (relative)",
                             worst_gap <= SHARPNESS_AGREEMENT, f"largest gap {worst_gap:.2e}"),
        verdicts.SanityCheck("w_SVM meets the KKT margins (all >= 1 - 1e-8)",
                             lowest_margin >= 1 - KKT_SLACK,
                             f"smallest margin {lowest_margin:.12f}"),
    ]


def reproduce_notes(summary: dict[str, dict], params: ReproduceEosParams) -> str:
    """Which geometries amplify, the frozen control's meaning, what is not tested."""
    amplifying = [f"{task}, {geometry} (mean slope {values.mean():.3g})"
                  for (task, geometry), values in sorted(summary["amplification"].items())
                  if np.isfinite(values).any() and np.nanmean(values) > 0]
    return " ".join([
        f"{params.seeds} data draw(s), horizon T = {params.horizon} steps, checkpoints "
        "t = round(10^(k/4)); amplitude windows of 20 steps over steps 0-2000; the frozen "
        f"control removes every update's component along w_SVM for {params.frozen_steps} steps.",
        "Geometries whose ||w_perp|| at loss 1e-3 grows with eta: "
        + (", ".join(amplifying) or "none") + ".",
        "Not tested: the three-phase damping of the stable regime (not defined by the "
        "abstract). The paper text was unavailable; the criteria test the abstract's words.",
    ])


def save_reproduce_figures(ctx: JobContext, runs: list[dict]) -> dict[str, str]:
    """For the first seed, per (task, geometry): cos and the w decomposition on log time, and
    the amplitude of the free runs against the frozen controls."""
    outputs = {}
    first = min(r["seed"] for r in runs)
    for task, geometry in sorted({(r["task"], r["geometry"]) for r in runs}):
        rows = sorted((r for r in runs if r["seed"] == first and r["task"] == task
                       and r["geometry"] == geometry), key=lambda r: r["eta_L"])
        slug = f"{geometry}_{task}".replace(" ", "_").replace("-", "_")
        cos, parts, amp = [], [], []
        for r in rows:
            t = np.array(r["t"], dtype=float)
            later = t > 0
            label = f"eta = {r['eta_L']:g}/L"
            cos.append(series(label, t[later], np.array(r["one_minus_cos"])[later]))
            parts.append(series(f"|w_par|, {label}", t[later], np.abs(r["w_par"])[later]))
            parts.append(series(f"||w_perp||, {label}", t[later], np.array(r["w_perp"])[later]))
            starts = np.arange(len(r["amplitude"])) * REPRODUCE_WINDOW
            amp.append(series(label, starts, r["amplitude"]))
            if "frozen_amplitude" in r:
                amp.append(series(f"frozen, {label}", starts, r["frozen_amplitude"]))
        figures = {
            "gap_plot": plot(f"{geometry}, {task}: 1 - cos(w, w_SVM) on log time", cos,
                             "step t", "1 - cos", logx=True, logy=True),
            "decomposition_plot": plot(f"{geometry}, {task}: |w_par| and ||w_perp||", parts,
                                       "step t", "norm", logx=True, logy=True),
            "amplitude_plot": plot(f"{geometry}, {task}: w_perp oscillation amplitude "
                                   "(free and frozen w_par)", amp, "step", "amplitude A",
                                   logy=True),
        }
        for name, spec in figures.items():
            outputs[f"{slug}_{name}"] = ctx.save_artifact(f"{slug}_{name}", spec)
    return outputs


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="eos.train",
        title="GD at the edge of stability (linear classifier)",
        paper=PAPER,
        params=Params,
        run=run_train,
        outputs={"loss_plot": "plot", "sharpness_plot": "plot", "decomposition_plot": "plot",
                 "cos_plot": "plot", "amplitude_plot": "plot", "checkpoint": "checkpoint",
                 "final": "json"},
        resources=Resources(cpus=1, memory_gb=1),
        description=("Full-batch GD on the logistic or cross-entropy loss with step size "
                     "eta x 1/L; tracks the loss, the exact sharpness against 2/eta, "
                     "w = w_par + w_perp along the max-margin direction, and cos(w, w_SVM)."),
    ),
    reproduce_spec(PAPER, "Edge of stability for logistic and cross-entropy losses",
                   run_reproduce, params=ReproduceEosParams,
                   resources=Resources(cpus=1, memory_gb=2)),
]
