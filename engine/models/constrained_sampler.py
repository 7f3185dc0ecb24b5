"""Constraint handling while sampling a flow model: CCFM and the projection baselines.

The sampler integrates dx/dt = v(x, t) from x0 ~ N(0, I) with Euler steps and, after each step
to time t, corrects the state by one of (``METHODS``):

* ``unconstrained``              nothing (a reference; not feasible in general);
* ``final_projection``           nothing until t = 1, then the projection onto the feasible set;
* ``projection_each_step``       the projection of the noisy state onto the clean feasible set;
* ``clean_estimate_projection``  project the clean estimate x1_hat = x + (1 - t) v(x, t), keep
                                 the noise estimate: x <- x + t (P(x1_hat) - x1_hat);
* ``ccfm``                       chance-constrained flow matching: on the straight path
                                 x1 = x_t / t - xi with xi = ((1 - t) / t) x0, treated as
                                 N(0, ((1 - t) / t)^2 I), the state is projected onto
                                 {x : P_xi[g(x / t - xi) <= 0] >= 1 - eps}.

For a half-space a.x1 <= b that set is the half-space a.x <= t b - kappa (1 - t) ||a|| with
kappa = Phi^{-1}(1 - eps) (the deterministic equivalent). An equality a.x1 = b is the pair of
one-sided chance constraints, i.e. the slab |a.x - t b| <= -kappa (1 - t) ||a||; for eps <= 1/2
the slab is empty and its limit, the hyperplane a.x = t b (the median of a.x1), is used. Both
margins vanish at t = 1, where every method but ``unconstrained`` projects exactly, so the
final samples are feasible. Other constraints g use the sample-average approximation
(``saa_project``): the empirical (1 - eps)-quantile of g(x / t - xi_s) over scenarios xi_s.

Fidelity: ``mmd`` (unbiased MMD^2 with a sum of Gaussian kernels) and ``energy_distance``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

METHODS = ("unconstrained", "final_projection", "projection_each_step",
           "clean_estimate_projection", "ccfm")
Velocity = Callable[[np.ndarray, float], np.ndarray]


# -- constraints ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class LinearConstraint:
    """a.x <= b, or a.x = b when ``equality``."""

    a: np.ndarray
    b: float
    equality: bool = False

    def violation(self, x: np.ndarray) -> np.ndarray:
        excess = x @ self.a - self.b
        return np.abs(excess) if self.equality else np.maximum(excess, 0.0)

    def project(self, x: np.ndarray) -> np.ndarray:
        return project_linear(x, self.a, self.b, 0.0 if self.equality else None)

    def ccfm_project(self, x: np.ndarray, t: float, kappa: float) -> np.ndarray:
        """Projection onto the deterministic equivalent of the chance constraint at time t."""
        if t >= 1.0:
            return self.project(x)
        margin = kappa * (1.0 - t) * float(np.linalg.norm(self.a))
        if self.equality:
            return project_linear(x, self.a, t * self.b, max(0.0, -margin))
        return project_linear(x, self.a, t * self.b - margin, None)

    def g(self, y: np.ndarray) -> np.ndarray:
        """Constraint function(s) with g <= 0 feasible (an equality gives |a.y - b|)."""
        excess = y @ self.a - self.b
        return np.abs(excess) if self.equality else excess


def project_linear(x: np.ndarray, a: np.ndarray, b: float, half_width: float | None
                   ) -> np.ndarray:
    """Euclidean projection onto a.x <= b (half_width None) or |a.x - b| <= half_width."""
    value = x @ a
    if half_width is None:
        excess = np.maximum(value - b, 0.0)
    else:
        excess = np.clip(value - b, -half_width, half_width)
        excess = value - b - excess
    return x - (excess / float(a @ a))[:, None] * a


@dataclass(frozen=True)
class BallConstraint:
    """||x - centre|| <= radius (a nonlinear constraint: CCFM uses the SAA)."""

    centre: np.ndarray
    radius: float
    equality: bool = field(default=False, init=False)

    def g(self, y: np.ndarray) -> np.ndarray:
        return np.linalg.norm(y - self.centre, axis=-1) - self.radius

    def violation(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(self.g(x), 0.0)

    def project(self, x: np.ndarray) -> np.ndarray:
        offset = x - self.centre
        distance = np.maximum(np.linalg.norm(offset, axis=1, keepdims=True), 1e-300)
        return self.centre + offset * np.minimum(1.0, self.radius / distance)

    def ccfm_project(self, x: np.ndarray, t: float, kappa: float, scenarios: np.ndarray
                     ) -> np.ndarray:
        if t >= 1.0:
            return self.project(x)
        return saa_project(self.g, x, t, 1.0 - NormalDist().cdf(kappa), scenarios,
                           anchor=t * self.centre)


def chance_kappa(eps: float) -> float:
    """kappa = Phi^{-1}(1 - eps)."""
    return NormalDist().inv_cdf(1.0 - eps)


def scheduled_kappa(probability: float) -> float:
    """kappa = Phi^{-1}(p) for a required probability p in [0, 1]; -inf at p = 0 (no
    constraint yet), +inf at p = 1."""
    if probability <= 0.0:
        return -math.inf
    if probability >= 1.0:
        return math.inf
    return NormalDist().inv_cdf(probability)


def saa_quantile(g: Callable[[np.ndarray], np.ndarray], x: np.ndarray, t: float, eps: float,
                 scenarios: np.ndarray) -> np.ndarray:
    """(N,): empirical (1 - eps)-quantile over scenarios of g(x / t - xi_s), xi_s =
    ((1 - t) / t) scenario_s with standard normal scenarios (S, d)."""
    xi = ((1.0 - t) / t) * scenarios
    values = g(x[:, None, :] / t - xi[None, :, :])  # (N, S)
    return np.quantile(values, 1.0 - eps, axis=1)


def saa_project(g: Callable[[np.ndarray], np.ndarray], x: np.ndarray, t: float, eps: float,
                scenarios: np.ndarray, anchor: np.ndarray, iterations: int = 30) -> np.ndarray:
    """Move each infeasible x the least distance along the segment to ``anchor`` (a point of
    the chance-constrained set's interior) that satisfies the SAA chance constraint, by
    bisection. When even the anchor fails, the chance-constrained set is empty at this t and
    x is left unchanged."""
    if saa_quantile(g, anchor[None, :], t, eps, scenarios)[0] > 0:
        return x
    out = x.copy()
    bad = np.flatnonzero(saa_quantile(g, x, t, eps, scenarios) > 0)
    if bad.size == 0:
        return out
    low, high = np.zeros(bad.size), np.ones(bad.size)
    for _ in range(iterations):
        middle = (low + high) / 2
        trial = x[bad] + middle[:, None] * (anchor - x[bad])
        ok = saa_quantile(g, trial, t, eps, scenarios) <= 0
        high = np.where(ok, middle, high)
        low = np.where(ok, low, middle)
    out[bad] = x[bad] + high[:, None] * (anchor - x[bad])
    return out


# -- the sampler ---------------------------------------------------------------------------------

@dataclass
class SampleResult:
    samples: np.ndarray  # (N, d) at t = 1
    times: np.ndarray  # (steps + 1,)
    trajectories: np.ndarray  # (steps + 1, keep, d) of the first ``keep`` samples
    feasible_over_time: np.ndarray  # fraction satisfying the clean constraint at each time


def sample(velocity: Velocity, x0: np.ndarray, steps: int, method: str, constraint,
           eps: float = 0.05, keep: int = 0, scenarios: np.ndarray | None = None,
           tol: float = 1e-6, check_cancelled: Callable[[], None] = lambda: None,
           required_probability: Callable[[float], float] | None = None) -> SampleResult:
    """Euler steps t_k = k / steps, each followed by the method's correction at t_{k+1}.

    CCFM's chance level is 1 - ``eps`` at every step, or ``required_probability(t)`` (a
    probability scheduler) when given: kappa(t) = Phi^{-1}(p(t))."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    kappa_of = (lambda t: scheduled_kappa(required_probability(t))) if required_probability \
        else (lambda t, kappa=chance_kappa(eps): kappa)
    x = np.array(x0, dtype=np.float64)
    times = np.linspace(0.0, 1.0, steps + 1)
    path = np.empty((steps + 1, keep, x.shape[1]))
    feasible = np.empty(steps + 1)
    path[0], feasible[0] = x[:keep], np.mean(constraint.violation(x) <= tol)
    for k in range(steps):
        check_cancelled()
        t, t_next = times[k], times[k + 1]
        x = x + (t_next - t) * velocity(x, t)
        x = correct(x, t_next, method, constraint, kappa_of(t_next), velocity, scenarios)
        path[k + 1], feasible[k + 1] = x[:keep], np.mean(constraint.violation(x) <= tol)
    return SampleResult(samples=x, times=times, trajectories=path, feasible_over_time=feasible)


def correct(x: np.ndarray, t: float, method: str, constraint, kappa: float, velocity: Velocity,
            scenarios: np.ndarray | None) -> np.ndarray:
    """The method's correction of the state x after a step to time t."""
    final = t >= 1.0 - 1e-12
    if method == "unconstrained" or (method == "final_projection" and not final):
        return x
    if method == "projection_each_step" or final:
        return constraint.project(x)
    if method == "clean_estimate_projection":
        clean = x + (1.0 - t) * velocity(x, t)
        return x + t * (constraint.project(clean) - clean)
    if isinstance(constraint, LinearConstraint):
        return constraint.ccfm_project(x, t, kappa)
    if scenarios is None:
        raise ValueError("CCFM with a nonlinear constraint needs SAA scenarios")
    return constraint.ccfm_project(x, t, kappa, scenarios)


# -- fidelity ------------------------------------------------------------------------------------

def squared_distances(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.maximum((x**2).sum(1)[:, None] + (y**2).sum(1)[None, :] - 2.0 * x @ y.T, 0.0)


def median_bandwidth(y: np.ndarray, limit: int = 1000) -> float:
    """Median pairwise distance of (up to ``limit`` points of) y."""
    sub = y[:limit]
    d2 = squared_distances(sub, sub)
    return float(np.sqrt(np.median(d2[np.triu_indices(len(sub), k=1)])))


def mmd(x: np.ndarray, y: np.ndarray, bandwidths: list[float]) -> float:
    """Unbiased MMD^2 between samples x and y with k = sum_h exp(-||.||^2 / (2 h^2))."""
    kxx, kyy, kxy = (sum(np.exp(-d2 / (2 * h**2)) for h in bandwidths)
                     for d2 in (squared_distances(x, x), squared_distances(y, y),
                                squared_distances(x, y)))
    n, m = len(x), len(y)
    within_x = (kxx.sum() - np.trace(kxx)) / (n * (n - 1))
    within_y = (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
    return float(within_x + within_y - 2 * kxy.mean())


def energy_distance(x: np.ndarray, y: np.ndarray) -> float:
    """2 E||X - Y|| - E||X - X'|| - E||Y - Y'|| (U-statistics within each sample)."""
    dxy = np.sqrt(squared_distances(x, y)).mean()
    dxx = np.sqrt(squared_distances(x, x)).sum() / (len(x) * (len(x) - 1))
    dyy = np.sqrt(squared_distances(y, y)).sum() / (len(y) * (len(y) - 1))
    return float(2 * dxy - dxx - dyy)
