"""Linear classifiers without bias and their exact curvature, for studying GD dynamics.

Two losses share one weight tensor ``w`` (float64, no bias):

* ``logistic``       binary labels y in {0, 1}, sign s = 2y - 1, w in R^d,
                     loss(w) = mean_i log(1 + exp(-s_i <x_i, w>));
* ``cross_entropy``  labels y in {0..K-1}, W in R^{d x K}, logits Z = X W,
                     loss(W) = mean_i [logsumexp(Z_i) - Z_{i, y_i}].

For both the Hessian has a closed form, so the sharpness (top Hessian eigenvalue) is exact:
``eigvalsh`` of a (d*K) x (d*K) matrix. ``power_iteration_sharpness`` does the same for any
torch model through Hessian-vector products; ``TinyMLP`` is a small non-linear model to check it on.

``max_margin`` solves the hard-margin SVM of the same model (the direction GD converges to on
separable data) exactly, by an active-set method on the dual.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

DTYPE = torch.float64


@dataclass(frozen=True)
class LinearClassifierConfig:
    loss: str = "logistic"  # "logistic" (binary) or "cross_entropy" (multiclass)
    d: int = 10
    classes: int = 2

    def __post_init__(self) -> None:
        if self.loss not in ("logistic", "cross_entropy"):
            raise ValueError(f"loss must be 'logistic' or 'cross_entropy', not {self.loss!r}")
        if self.loss == "logistic" and self.classes != 2:
            raise ValueError(f"the logistic loss is binary: classes must be 2, not {self.classes}")
        if self.classes < 2:
            raise ValueError(f"classes must be at least 2, not {self.classes}")

    @property
    def weight_shape(self) -> tuple[int, ...]:
        return (self.d,) if self.loss == "logistic" else (self.d, self.classes)

    @property
    def n_params(self) -> int:
        return self.d if self.loss == "logistic" else self.d * self.classes


def init_weights(cfg: LinearClassifierConfig, scale: float = 0.0, seed: int = 0) -> torch.Tensor:
    """Zeros, or N(0, scale^2) entries with a centred class axis (so W 1 = 0 like GD keeps it)."""
    if scale == 0:
        return torch.zeros(cfg.weight_shape, dtype=DTYPE)
    generator = torch.Generator().manual_seed(seed)
    w = scale * torch.randn(cfg.weight_shape, dtype=DTYPE, generator=generator)
    if cfg.loss == "cross_entropy":
        w = w - w.mean(dim=1, keepdim=True)
    return w


# -- loss, gradient, Hessian -----------------------------------------------------------------

def loss(cfg: LinearClassifierConfig, w: torch.Tensor, X: torch.Tensor, y: torch.Tensor
         ) -> torch.Tensor:
    """Mean training loss (a 0-dim tensor); stable for any size of w (softplus / logsumexp)."""
    if cfg.loss == "logistic":
        return F.softplus(-_signs(y) * (X @ w)).mean()
    logits = X @ w
    return (torch.logsumexp(logits, dim=1) - logits.gather(1, y[:, None]).squeeze(1)).mean()


def gradient(cfg: LinearClassifierConfig, w: torch.Tensor, X: torch.Tensor, y: torch.Tensor
             ) -> torch.Tensor:
    """d loss / d w in closed form, same shape as w."""
    n = X.shape[0]
    if cfg.loss == "logistic":
        s = _signs(y)
        return -(X.T @ (torch.sigmoid(-s * (X @ w)) * s)) / n
    probs = torch.softmax(X @ w, dim=1)
    probs[torch.arange(n), y] -= 1.0
    return X.T @ probs / n


def loss_and_gradient(cfg: LinearClassifierConfig, w: torch.Tensor, X: torch.Tensor,
                      y: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Both at once (one forward pass): what a GD step needs."""
    n = X.shape[0]
    if cfg.loss == "logistic":
        s = _signs(y)
        margins = s * (X @ w)
        return F.softplus(-margins).mean().item(), -(X.T @ (torch.sigmoid(-margins) * s)) / n
    logits = X @ w
    lse = torch.logsumexp(logits, dim=1)
    value = (lse - logits.gather(1, y[:, None]).squeeze(1)).mean().item()
    probs = torch.exp(logits - lse[:, None])
    probs[torch.arange(n), y] -= 1.0
    return value, X.T @ probs / n


def hessian(cfg: LinearClassifierConfig, w: torch.Tensor, X: torch.Tensor, y: torch.Tensor
            ) -> torch.Tensor:
    """The exact Hessian, shape (n_params, n_params); W is flattened row-major (index j*K + k).

    logistic:       H = mean_i sigma(m_i) sigma(-m_i) x_i x_i^T
    cross-entropy:  H = mean_i (x_i x_i^T) kron (diag(p_i) - p_i p_i^T)
    """
    n, d = X.shape
    if cfg.loss == "logistic":
        margins = _signs(y) * (X @ w)
        curvature = torch.sigmoid(margins) * torch.sigmoid(-margins)
        return (X.T * curvature) @ X / n
    K = cfg.classes
    probs = torch.softmax(X @ w, dim=1)
    # kron(x x^T, diag(p)) summed over i: entry [(j,a),(l,a)] = sum_i x_ij x_il p_ia.
    diagonal_part = torch.einsum("ij,il,ia->jal", X, X, probs) / n  # (d, K, d)
    eye = torch.eye(K, dtype=X.dtype)
    first = diagonal_part[:, :, :, None] * eye[None, :, None, :]  # (d, K, d, K)
    outer = (X[:, :, None] * probs[:, None, :]).reshape(n, d * K)  # rows x_i kron p_i
    return first.reshape(d * K, d * K) - outer.T @ outer / n


def sharpness(cfg: LinearClassifierConfig, w: torch.Tensor, X: torch.Tensor, y: torch.Tensor
              ) -> float:
    """Top eigenvalue of the exact Hessian."""
    return torch.linalg.eigvalsh(hessian(cfg, w, X, y))[-1].item()


def _signs(y: torch.Tensor) -> torch.Tensor:
    return 2.0 * y.to(DTYPE) - 1.0


# -- sharpness of any torch model ------------------------------------------------------------

def power_iteration_sharpness(loss_fn: Callable[[], torch.Tensor], params: list[torch.Tensor],
                              iters: int = 200, tol: float = 1e-10, seed: int = 0) -> float:
    """Top Hessian eigenvalue by power iteration on Hessian-vector products (double backward).

    ``loss_fn()`` recomputes the loss from ``params`` (tensors with requires_grad). Power
    iteration finds the eigenvalue of largest magnitude; for the convex losses here that is the
    sharpness, for a non-convex model it could be a large negative one (the sign is returned).
    """
    loss_value = loss_fn()
    grads = torch.autograd.grad(loss_value, params, create_graph=True)
    generator = torch.Generator().manual_seed(seed)
    vector = [torch.randn(p.shape, dtype=p.dtype, generator=generator) for p in params]
    estimate = 0.0
    for _ in range(iters):
        norm = torch.sqrt(sum((v * v).sum() for v in vector))
        vector = [v / norm for v in vector]
        hvp = torch.autograd.grad(grads, params, grad_outputs=vector, retain_graph=True)
        new_estimate = sum((h * v).sum() for h, v in zip(hvp, vector, strict=True)).item()
        vector = [h.detach() for h in hvp]
        if abs(new_estimate - estimate) <= tol * max(1.0, abs(new_estimate)):
            return new_estimate
        estimate = new_estimate
    return estimate


def linear_power_sharpness(cfg: LinearClassifierConfig, w: torch.Tensor, X: torch.Tensor,
                           y: torch.Tensor, iters: int = 500, tol: float = 1e-12) -> float:
    """The linear model's sharpness the general way (a cross-check of ``sharpness``)."""
    param = w.detach().clone().requires_grad_(True)
    return power_iteration_sharpness(lambda: loss(cfg, param, X, y), [param], iters, tol)


class TinyMLP(torch.nn.Module):
    """One hidden tanh layer, no biases: the smallest non-linear model to test sharpness on."""

    def __init__(self, d: int, hidden: int, classes: int, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.hidden = torch.nn.Linear(d, hidden, bias=False, dtype=DTYPE)
        self.out = torch.nn.Linear(hidden, classes, bias=False, dtype=DTYPE)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(X)))


# -- the max-margin reference -----------------------------------------------------------------

def margin_constraints(cfg: LinearClassifierConfig, X: torch.Tensor, y: torch.Tensor
                       ) -> torch.Tensor:
    """Rows a with margin <a, vec(w)>: s_i x_i (binary), x_i kron (e_{y_i} - e_k) for k != y_i."""
    if cfg.loss == "logistic":
        return _signs(y)[:, None] * X
    K = cfg.classes
    rows = []
    for k in range(K):
        others = y != k  # constraints "class y_i beats class k" for points not in class k
        direction = torch.nn.functional.one_hot(y[others], K).to(DTYPE)
        direction[:, k] -= 1.0
        rows.append((X[others][:, :, None] * direction[:, None, :]).reshape(-1, cfg.n_params))
    return torch.cat(rows)


def max_margin(cfg: LinearClassifierConfig, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Hard-margin SVM without bias: argmin ||w|| s.t. every margin >= 1 (shape of w).

    A least-distance problem min ||w|| s.t. A w >= 1 equals a non-negative least squares
    problem min ||E u - f||, u >= 0, with E = [A^T; 1^T] and f = e_last: at its solution the
    residual r = E u - f gives w = -r[:-1] / r[-1] (r = 0 means the data are not separable).
    The NNLS is solved by the classical active-set method, exactly up to round-off.
    """
    A = margin_constraints(cfg, X, y)
    m, p = A.shape
    E = torch.cat([A.T, torch.ones(1, m, dtype=DTYPE)])
    f = torch.zeros(p + 1, dtype=DTYPE)
    f[-1] = 1.0
    u = nnls(E, f)
    residual = E @ u - f
    if abs(residual[-1].item()) < 1e-12:
        raise ValueError("the data are not linearly separable through the origin: no max margin")
    return (-residual[:-1] / residual[-1]).reshape(cfg.weight_shape)


def nnls(E: torch.Tensor, f: torch.Tensor, tol: float = 1e-12, max_iter: int | None = None
         ) -> torch.Tensor:
    """argmin_{u >= 0} ||E u - f|| by the active-set method (a passive set grows and shrinks)."""
    m = E.shape[1]
    u = torch.zeros(m, dtype=E.dtype)
    passive = torch.zeros(m, dtype=torch.bool)
    stalled = torch.zeros(m, dtype=torch.bool)  # entered and at once left (round-off): skip
    scale = tol * max(1.0, E.abs().max().item() ** 2)
    for _ in range(max_iter or 30 * m):
        descent = E.T @ (f - E @ u)  # minus the gradient of ½||E u - f||^2
        descent[passive | stalled] = -torch.inf
        j = int(torch.argmax(descent))
        if descent[j] <= scale:
            return u
        passive[j] = True
        while True:  # solve on the passive set; step back if a coefficient turns non-positive
            z = torch.zeros(m, dtype=E.dtype)
            z[passive] = torch.linalg.lstsq(E[:, passive], f[:, None]).solution[:, 0]
            if bool((z[passive] > 0).all()):
                u = z
                stalled[:] = False
                break
            if z[j] <= 0 and u[j] == 0:
                passive[j] = False
                stalled[j] = True
                break
            blocking = passive & (z <= 0)
            step = torch.min(u[blocking] / (u[blocking] - z[blocking]))
            u = u + step * (z - u)
            passive &= u > scale
            u[~passive] = 0.0
    raise RuntimeError("nnls did not converge; the problem is badly conditioned")
