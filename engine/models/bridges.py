"""Endpoint couplings, bridge laws and the k-nearest-neighbour Markovization-gap estimator.

A bridge model pairs a source point x0 (here N(0, I)) with a data point x1 through a coupling,
joins them by a bridge X_t, and regresses the bridge velocity U_t on (X_t, t). With
mu_t = (1 - t) x0 + t x1 and eps ~ N(0, I):

    straight          X_t = mu_t,                               U_t = x1 - x0
    brownian(sigma)   X_t = mu_t + sigma sqrt(t (1 - t)) eps,    U_t = x1 - x0
                            + sigma (1 - 2 t) / (2 sqrt(t (1 - t))) eps

(the Brownian bridge's conditional velocity: d/dt of mu_t plus sigma_t'/sigma_t (X_t - mu_t)).

Couplings: ``independent`` (x0 and x1 drawn apart) and ``ot`` (minibatch optimal transport: the
exact squared-Euclidean assignment within each minibatch of ``batch`` pairs, by POT's network
simplex; with equal uniform weights the plan is a permutation).

Markovization gap G = int_0^1 E ||U_t - E[U_t | X_t]||^2 dt, the floor of the flow-matching
regression loss. ``knn_gap`` estimates E[U_t | X_t] by the mean target of the k nearest other
samples (leave-one-out), takes the mean squared residual at each t of a grid, and integrates by
the trapezoid rule. ``gaussian_gap_integrand`` is the exact integrand when x0 ~ N(0, I) and
x1 ~ N(m, s^2 I) are independent: everything is jointly Gaussian, so per coordinate

    Var(U | X) = Var U - Cov(U, X)^2 / Var X.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

COUPLINGS = ("independent", "ot")
BRIDGES = ("straight", "brownian")


# -- couplings -----------------------------------------------------------------------------------

def ot_permutation(x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """perm such that (x0[i], x1[perm[i]]) is the exact OT assignment (squared Euclidean)."""
    import ot

    if len(x0) != len(x1):
        raise ValueError(f"OT pairing needs equal batch sizes, not {len(x0)} and {len(x1)}")
    cost = (x0**2).sum(1)[:, None] + (x1**2).sum(1)[None, :] - 2.0 * x0 @ x1.T
    weights = np.full(len(x0), 1.0 / len(x0))
    plan = ot.emd(weights, weights, cost)
    return plan.argmax(axis=1)


def couple(x0: np.ndarray, x1: np.ndarray, coupling: str, batch: int) -> np.ndarray:
    """x1 reordered so that row i is the partner of x0[i]; OT within consecutive minibatches."""
    if coupling == "independent":
        return x1
    if coupling != "ot":
        raise ValueError(f"unknown coupling {coupling!r}; choose one of {COUPLINGS}")
    paired = np.empty_like(x1)
    for start in range(0, len(x0), batch):
        block = slice(start, start + batch)
        paired[block] = x1[block][ot_permutation(x0[block], x1[block])]
    return paired


# -- bridges -------------------------------------------------------------------------------------

def bridge_sample(x0: np.ndarray, x1: np.ndarray, t: np.ndarray | float, bridge: str,
                  sigma: float, eps: np.ndarray | None = None,
                  rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(X_t, U_t) for each pair; ``t`` a scalar or one time per row, strictly inside (0, 1)
    for the Brownian bridge."""
    t = np.asarray(t, dtype=float)
    t = t[:, None] if t.ndim == 1 else t
    x_t = (1 - t) * x0 + t * x1
    u_t = x1 - x0
    if bridge == "straight" or sigma == 0:
        return x_t, u_t
    if bridge != "brownian":
        raise ValueError(f"unknown bridge {bridge!r}; choose one of {BRIDGES}")
    if eps is None:
        eps = (rng or np.random.default_rng()).standard_normal(x0.shape)
    spread = np.sqrt(t * (1 - t))
    return x_t + sigma * spread * eps, u_t + sigma * (1 - 2 * t) / (2 * spread) * eps


# -- the k-nearest-neighbour gap estimator -------------------------------------------------------

def knn_conditional_mean(x: np.ndarray, u: np.ndarray, k: int, chunk: int = 1024) -> np.ndarray:
    """E[U | X = x_i] estimated by the mean of u over the k nearest other samples (Euclidean)."""
    if not 1 <= k < len(x):
        raise ValueError(f"k must be between 1 and {len(x) - 1}, not {k}")
    squared = (x**2).sum(axis=1)
    means = np.empty_like(u)
    for start in range(0, len(x), chunk):
        rows = slice(start, start + chunk)
        distance = squared[rows, None] + squared[None, :] - 2.0 * x[rows] @ x.T
        index = np.arange(start, min(start + chunk, len(x)))
        distance[index - start, index] = np.inf  # leave one out
        neighbours = np.argpartition(distance, k, axis=1)[:, :k]
        means[rows] = u[neighbours].mean(axis=1)
    return means


@dataclass
class GapEstimate:
    times: np.ndarray
    residual: np.ndarray  # E ||U_t - E[U_t | X_t]||^2 at each time
    gap: float


def knn_gap(x0: np.ndarray, x1: np.ndarray, bridge: str, sigma: float, times: np.ndarray,
            k: int, rng: np.random.Generator,
            check_cancelled: Callable[[], None] = lambda: None,
            on_time: Callable[[int, float, float], None] | None = None) -> GapEstimate:
    """The Markovization gap of already-coupled pairs (x0[i], x1[i]) on a time grid."""
    residual = np.empty(len(times))
    for index, t in enumerate(times):
        check_cancelled()
        x_t, u_t = bridge_sample(x0, x1, float(t), bridge, sigma, rng=rng)
        estimate = knn_conditional_mean(x_t, u_t, k)
        residual[index] = float(((u_t - estimate) ** 2).sum(axis=1).mean())
        if on_time:
            on_time(index, float(t), residual[index])
    return GapEstimate(times=np.asarray(times, dtype=float), residual=residual,
                       gap=trapezoid(residual, times))


def trapezoid(values: np.ndarray, times: np.ndarray) -> float:
    values, times = np.asarray(values, dtype=float), np.asarray(times, dtype=float)
    return float(np.sum((values[1:] + values[:-1]) * np.diff(times)) / 2)


def time_grid(points: int, t_min: float) -> np.ndarray:
    """``points`` equally spaced times on [t_min, 1 - t_min] (the Brownian velocity diverges at
    the ends, so the integral is taken inside them)."""
    return np.linspace(t_min, 1 - t_min, points)


def gaussian_gap_integrand(t: np.ndarray, d: int, data_std: float, bridge: str = "straight",
                           sigma: float = 0.0) -> np.ndarray:
    """Exact E ||U_t - E[U_t | X_t]||^2 for independent x0 ~ N(0, I_d), x1 ~ N(m, s^2 I_d)
    (the mean m does not matter)."""
    t = np.asarray(t, dtype=float)
    s2 = data_std**2
    noise = sigma**2 if bridge == "brownian" else 0.0
    var_x = (1 - t) ** 2 + t**2 * s2 + noise * t * (1 - t)
    cov = t * s2 - (1 - t) + noise * (1 - 2 * t) / 2
    var_u = 1 + s2 + (noise * (1 - 2 * t) ** 2 / (4 * t * (1 - t)) if noise else 0.0)
    return d * (var_u - cov**2 / var_x)


# -- data sets -----------------------------------------------------------------------------------

def eight_gaussians(count: int, rng: np.random.Generator, radius: float = 4.0,
                    std: float = 0.5) -> np.ndarray:
    """2-D mixture of eight equal Gaussians on a circle."""
    angles = 2 * math.pi * rng.integers(0, 8, size=count) / 8
    centres = radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return centres + std * rng.standard_normal((count, 2))


def digits_pca(components: int = 32) -> np.ndarray:
    """scikit-learn's 1797 8x8 digits, centred, projected on the top principal components and
    divided by one global scale so the mean variance per kept coordinate is 1."""
    return _digits_pca(components).copy()


@functools.lru_cache(maxsize=4)
def _digits_pca(components: int) -> np.ndarray:
    from sklearn.datasets import load_digits

    pixels = load_digits().data.astype(np.float64)
    centred = pixels - pixels.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    projected = centred @ vt[:components].T
    return projected / math.sqrt(projected.var(axis=0).mean())


# -- the exact posterior velocity (independent couplings) ----------------------------------------

def bridge_noise(t: float, bridge: str, sigma: float) -> tuple[float, float]:
    """(s_t^2, c_t): X_t | x1 ~ N(t x1, s_t^2 I) for x0 ~ N(0, I) drawn independently of x1, and
    E[U_t | X_t, x1] = x1 + c_t (X_t - t x1)."""
    noise = sigma**2 if bridge == "brownian" else 0.0
    spread = (1 - t) ** 2 + noise * t * (1 - t)
    return spread, (-(1 - t) + noise * (1 - 2 * t) / 2) / spread


def posterior_velocity_points(x_t: np.ndarray, t: float, points: np.ndarray, bridge: str,
                              sigma: float, chunk: int = 2048) -> np.ndarray:
    """E[U_t | X_t] when x1 is uniform over ``points`` (a finite training set) and independent
    of x0 ~ N(0, I): the posterior over the points is a softmax of -||X_t - t x_j||^2 /
    (2 s_t^2), m its mean, and E[U_t | X_t] = m + c_t (X_t - t m)."""
    spread, slope = bridge_noise(t, bridge, sigma)
    norms = (points**2).sum(axis=1)
    out = np.empty_like(x_t, dtype=np.float64)
    for start in range(0, len(x_t), chunk):
        x = x_t[start:start + chunk]
        logits = (t * x @ points.T - 0.5 * t**2 * norms[None, :]) / spread
        logits -= logits.max(axis=1, keepdims=True)
        weights = np.exp(logits)
        weights /= weights.sum(axis=1, keepdims=True)
        mean = weights @ points
        out[start:start + chunk] = mean + slope * (x - t * mean)
    return out


def posterior_velocity_mixture(x_t: np.ndarray, t: float, centres: np.ndarray, std: float,
                               bridge: str, sigma: float) -> np.ndarray:
    """E[U_t | X_t] when x1 follows an equal-weight mixture of N(centre_k, std^2 I), independent
    of x0: component posteriors from X_t | k ~ N(t mu_k, (t^2 std^2 + s_t^2) I), and
    E[x1 | X_t, k] = mu_k + (t std^2 / v_t) (X_t - t mu_k)."""
    spread, slope = bridge_noise(t, bridge, sigma)
    variance = t**2 * std**2 + spread
    offsets = x_t[:, None, :] - t * centres[None, :, :]  # (S, K, d)
    logits = -(offsets**2).sum(axis=2) / (2 * variance)
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=1, keepdims=True)
    component_means = centres[None, :, :] + (t * std**2 / variance) * offsets
    mean = (weights[:, :, None] * component_means).sum(axis=1)
    return mean + slope * (x_t - t * mean)


def eight_gaussian_centres(radius: float = 4.0) -> np.ndarray:
    """The centres ``eight_gaussians`` draws around (angle 2 pi k / 8)."""
    angles = 2 * math.pi * np.arange(8) / 8
    return radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
