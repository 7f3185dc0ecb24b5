"""A small MLP velocity field v(x, t) for flow matching, its training loop and an Euler sampler.

The input is x with sin/cos features of t at ``time_frequencies`` frequencies; SiLU hidden
layers; a linear output of the same dimension as x. ``fit`` minimises the flow-matching
regression loss mean_i ||v(X_t, t) - U_t||^2 (summed over coordinates, the Markovization gap's
units) on batches that a callable draws, with Adam at a constant learning rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from engine.threads import limit_threads

Batch = tuple[np.ndarray, np.ndarray, np.ndarray]  # (t (B,), X_t (B, d), U_t (B, d))


@dataclass(frozen=True)
class MLPFlowConfig:
    dim: int
    hidden: int = 128
    layers: int = 3
    time_frequencies: int = 8


class MLPFlow(nn.Module):
    def __init__(self, cfg: MLPFlowConfig) -> None:
        super().__init__()
        self.cfg = cfg
        widths = [cfg.dim + 2 * cfg.time_frequencies] + [cfg.hidden] * cfg.layers
        blocks: list[nn.Module] = []
        for width_in, width_out in zip(widths[:-1], widths[1:], strict=True):
            blocks += [nn.Linear(width_in, width_out), nn.SiLU()]
        blocks.append(nn.Linear(widths[-1], cfg.dim))
        self.net = nn.Sequential(*blocks)
        self.register_buffer("frequencies", torch.arange(1, cfg.time_frequencies + 1) * math.pi)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        angle = t.reshape(-1, 1) * self.frequencies
        return self.net(torch.cat([x, torch.sin(angle), torch.cos(angle)], dim=1))


def fit(model: MLPFlow, draw_batch: Callable[[int], Batch], steps: int, lr: float,
        check_cancelled: Callable[[], None],
        on_step: Callable[[int, float], None] | None = None) -> np.ndarray:
    """Adam on the regression loss for ``steps`` batches; returns the per-step losses."""
    optimiser = Adam(list(model.parameters()), lr)
    losses = np.empty(steps)
    model.train()
    with limit_threads(1):
        for step in range(steps):
            check_cancelled()
            t, x_t, u_t = (torch.as_tensor(a, dtype=torch.float32) for a in draw_batch(step))
            loss = ((model(x_t, t) - u_t) ** 2).sum(dim=1).mean()
            model.zero_grad(set_to_none=False)
            loss.backward()
            optimiser.step()
            losses[step] = loss.item()
            if on_step:
                on_step(step, losses[step])
    return losses


class Adam:
    """Adam (beta 0.9 / 0.999, eps 1e-8), written out: ``torch.optim`` imports torch._dynamo on
    first use, which costs seconds in every fresh worker."""

    def __init__(self, params: list[torch.Tensor], lr: float) -> None:
        self.params, self.lr, self.steps = params, lr, 0
        self.first = [torch.zeros_like(p) for p in params]
        self.second = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        correction1, correction2 = 1 - 0.9**self.steps, 1 - 0.999**self.steps
        for p, m, v in zip(self.params, self.first, self.second, strict=True):
            m.mul_(0.9).add_(p.grad, alpha=0.1)
            v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
            p.sub_(self.lr * (m / correction1) / ((v / correction2).sqrt() + 1e-8))




@torch.no_grad()
def regression_loss(model: MLPFlow, t: float, x_t: np.ndarray, u_t: np.ndarray) -> float:
    """mean ||v(X_t, t) - U_t||^2 at one time."""
    model.eval()
    x = torch.as_tensor(x_t, dtype=torch.float32)
    with limit_threads(1):
        prediction = model(x, torch.full((len(x),), float(t)))
    return float(((prediction - torch.as_tensor(u_t, dtype=torch.float32)) ** 2).sum(1).mean())


def velocity_function(model: MLPFlow) -> Callable[[np.ndarray, float], np.ndarray]:
    """v(x, t) as a numpy function (float64 in and out) for samplers written in numpy."""

    @torch.no_grad()
    def velocity(x: np.ndarray, t: float) -> np.ndarray:
        model.eval()
        xt = torch.as_tensor(x, dtype=torch.float32)
        with limit_threads(1):
            return model(xt, torch.full((len(xt),), float(t))).double().numpy()

    return velocity


def euler_sample(velocity: Callable[[np.ndarray, float], np.ndarray], x0: np.ndarray,
                 steps: int) -> np.ndarray:
    """Integrate dx/dt = v(x, t) from t = 0 to 1 with ``steps`` Euler steps."""
    x = np.array(x0, dtype=np.float64)
    for k in range(steps):
        x = x + velocity(x, k / steps) / steps
    return x
