"""1-D heat-equation fields with insulated ends: a data set whose total heat is conserved.

u_t = kappa u_xx on [0, 1] with u_x = 0 at both ends, from the initial condition

    u(x, 0) = m (1 + sum_{k=1}^{K} a_k cos(k pi x)),   a_k ~ N(0, (amplitude / k)^2),

has the exact solution u(x, T) = m (1 + sum_k a_k exp(-(k pi)^2 kappa T) cos(k pi x)). On the
cell-centred grid x_j = (j + 1/2) / L every cosine sums to zero, so the grid mean of u is m
exactly at all times: the conserved quantity. The fluctuations scale with m, so fixing the
mean (the conservation constraint) changes the whole field's law, not just its offset.
"""

from __future__ import annotations

import numpy as np


def grid(points: int) -> np.ndarray:
    return (np.arange(points) + 0.5) / points


def heat_fields(count: int, rng: np.random.Generator, points: int = 32, modes: int = 8,
                kappa_time: float = 0.01, amplitude: float = 0.5,
                mass: float | None = None, mass_range: tuple[float, float] = (0.5, 1.5)
                ) -> np.ndarray:
    """(count, points) solutions at time T; the grid mean of row i is its mass m_i (uniform on
    ``mass_range`` unless ``mass`` fixes it)."""
    m = (np.full(count, float(mass)) if mass is not None
         else rng.uniform(*mass_range, size=count))
    k = np.arange(1, modes + 1)
    coefficients = rng.standard_normal((count, modes)) * amplitude / k
    decay = np.exp(-((k * np.pi) ** 2) * kappa_time)
    basis = np.cos(np.pi * k[:, None] * grid(points)[None, :])  # (modes, points)
    return m[:, None] * (1.0 + (coefficients * decay) @ basis)
