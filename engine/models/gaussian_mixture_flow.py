"""The exact flow-matching velocity of a Gaussian mixture (straight path from N(0, I)).

With x_t = (1 - t) x0 + t x1, x0 ~ N(0, I) and x1 ~ sum_k w_k N(mu_k, diag(s_k^2)), component k
gives x_t ~ N(t mu_k, S_k) with S_k = (1 - t)^2 + t^2 s_k^2 (per coordinate) and
Cov(x1 - x0, x_t) = t s_k^2 - (1 - t). So, per coordinate,

    E[x1 - x0 | x_t = x, k] = mu_k + (t s_k^2 - (1 - t)) / S_k (x - t mu_k)
    E[x1 | x_t = x, k]      = mu_k + t s_k^2 / S_k (x - t mu_k)

and the marginal velocity v(x, t) = sum_k r_k(x, t) E[x1 - x0 | x_t = x, k] with posterior
responsibilities r_k proportional to w_k N(x; t mu_k, S_k). Both formulas are finite on all
of [0, 1] (S_k > 0 when s_k > 0). The clean-sample estimate satisfies x1_hat = x + (1 - t) v.

``condition_on_hyperplane`` samples the mixture restricted to {a.x = b} exactly: each
component's conditional is y + S a (b - a.y) / (a'S a) for y ~ N(mu_k, S) (Matheron's rule), and
the components are reweighted by w_k N(b; a.mu_k, a'S_k a).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GaussianMixture:
    weights: np.ndarray  # (K,), sums to 1
    means: np.ndarray  # (K, d)
    stds: np.ndarray  # (K, d), diagonal standard deviations

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        k = rng.choice(len(self.weights), size=count, p=self.weights)
        return self.means[k] + self.stds[k] * rng.standard_normal((count, self.dim))

    def log_density(self, x: np.ndarray, t: float = 1.0) -> np.ndarray:
        """log p_t(x) of the interpolant x_t (t = 1: the mixture itself)."""
        return _logsumexp(self._component_log_terms(x, t), axis=1)

    def _component_log_terms(self, x: np.ndarray, t: float) -> np.ndarray:
        """(N, K): log w_k + log N(x; t mu_k, S_k(t))."""
        var = (1 - t) ** 2 + t**2 * self.stds**2  # (K, d)
        diff = x[:, None, :] - t * self.means[None]  # (N, K, d)
        quad = (diff**2 / var[None]).sum(-1)
        log_norm = np.log(2 * math.pi * var).sum(-1)
        return np.log(self.weights)[None] - 0.5 * (quad + log_norm[None])

    def responsibilities(self, x: np.ndarray, t: float) -> np.ndarray:
        terms = self._component_log_terms(x, t)
        return np.exp(terms - _logsumexp(terms, axis=1)[:, None])

    def velocity(self, x: np.ndarray, t: float) -> np.ndarray:
        """Exact marginal velocity v(x, t) = E[x1 - x0 | x_t = x], (N, d)."""
        var = (1 - t) ** 2 + t**2 * self.stds**2
        gain = (t * self.stds**2 - (1 - t)) / var  # (K, d)
        per_component = self.means[None] + gain[None] * (x[:, None, :] - t * self.means[None])
        return np.einsum("nk,nkd->nd", self.responsibilities(x, t), per_component)

    def denoise(self, x: np.ndarray, t: float) -> np.ndarray:
        """E[x1 | x_t = x], (N, d)."""
        var = (1 - t) ** 2 + t**2 * self.stds**2
        gain = t * self.stds**2 / var
        per_component = self.means[None] + gain[None] * (x[:, None, :] - t * self.means[None])
        return np.einsum("nk,nkd->nd", self.responsibilities(x, t), per_component)

    def condition_on_hyperplane(self, a: np.ndarray, b: float, count: int,
                                rng: np.random.Generator) -> np.ndarray:
        """Exact samples of the mixture given a.x = b."""
        var = self.stds**2  # (K, d)
        spread = (var * a**2).sum(axis=1)  # a' S_k a
        log_w = (np.log(self.weights) - 0.5 * (b - self.means @ a) ** 2 / spread
                 - 0.5 * np.log(2 * math.pi * spread))
        weights = np.exp(log_w - log_w.max())
        k = rng.choice(len(weights), size=count, p=weights / weights.sum())
        y = self.means[k] + self.stds[k] * rng.standard_normal((count, self.dim))
        return y + var[k] * a * ((b - y @ a) / spread[k])[:, None]


def _logsumexp(values: np.ndarray, axis: int) -> np.ndarray:
    top = values.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(values - top).sum(axis=axis, keepdims=True))).squeeze(axis)


def ring_mixture_2d() -> GaussianMixture:
    """Three 2-D modes: left, right and top (the reproduction's 2-D problem)."""
    means = np.array([[-2.5, 0.0], [2.5, 0.0], [0.0, 2.5]])
    return GaussianMixture(np.full(3, 1 / 3), means, np.full((3, 2), 0.6))


def random_mixture(dim: int, components: int, seed: int, spread: float = 2.5,
                   std: float = 0.6) -> GaussianMixture:
    """``components`` equal modes with N(0, spread^2 I) means (a fixed problem per seed)."""
    rng = np.random.default_rng(seed)
    means = spread * rng.standard_normal((components, dim))
    return GaussianMixture(np.full(components, 1 / components), means,
                           np.full((components, dim), std))
