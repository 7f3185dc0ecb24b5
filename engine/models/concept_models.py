"""The three models concept frustration compares, and the task-aligned metric they induce.

* ``BlackBoxMLP``: x -> ReLU hidden layer -> one logit; it defines the task geometry.
* ``LinearConceptBottleneck``: c_hat = W x + b (one row of W per known concept), then a linear
  task head on c_hat. Trained jointly (task BCE + weight * concept MSE) or sequentially
  (concepts first, then the head on frozen predicted concepts).
* ``SparseAutoencoder``: s = ReLU(E x + b), x_hat = s D; the dictionary rows D[j] live in input
  space and stand for the unsupervised features of a foundation model.

``fisher_metric`` is the empirical Fisher of the black box in input space,
F = mean_i p_i (1 - p_i) g_i g_i^T with g_i = d logit / d x at x_i: directions the task's
prediction is sensitive to get a large norm, directions it ignores a small one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class ConceptModelsConfig:
    """Sizes and training settings shared by the three models (saved next to checkpoints)."""

    input_dim: int
    n_concepts: int
    hidden: int = 128
    sae_features: int = 60
    epochs: int = 30
    sae_epochs: int = 60
    batch_size: int = 512
    lr: float = 1e-3
    sae_lr: float = 2e-3
    sae_l1: float = 1e-3
    cbm_training: Literal["joint", "sequential"] = "joint"
    concept_weight: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


class BlackBoxMLP(nn.Module):
    def __init__(self, input_dim: int, hidden: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(input_dim, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.hidden(x))).squeeze(-1)


class LinearConceptBottleneck(nn.Module):
    def __init__(self, input_dim: int, n_concepts: int) -> None:
        super().__init__()
        self.concepts = nn.Linear(input_dim, n_concepts)
        self.task = nn.Linear(n_concepts, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        concepts = self.concepts(x)
        return concepts, self.task(concepts).squeeze(-1)

    @property
    def directions(self) -> np.ndarray:
        """(n_concepts, input_dim): the concept directions W."""
        return self.concepts.weight.detach().cpu().numpy().astype(np.float64)


class SparseAutoencoder(nn.Module):
    def __init__(self, input_dim: int, n_features: int) -> None:
        super().__init__()
        self.encoder = nn.Linear(input_dim, n_features)
        self.dictionary = nn.Parameter(0.02 * torch.randn(n_features, input_dim))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        codes = F.relu(self.encoder(x))
        return codes, codes @ self.dictionary

    @property
    def atoms(self) -> np.ndarray:
        """(n_features, input_dim): the dictionary D."""
        return self.dictionary.detach().cpu().numpy().astype(np.float64)


EpochHook = Callable[[str, int, int, float], None]  # (model, epoch, epochs, loss)


def _batches(n: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    return list(torch.randperm(n, generator=generator).split(batch_size))


def _loop(name: str, model: nn.Module, parameters: list[nn.Parameter], epochs: int, lr: float,
          n: int, cfg: ConceptModelsConfig, seed: int,
          loss_of: Callable[[torch.Tensor], torch.Tensor], check_cancelled: Callable[[], None],
          on_epoch: EpochHook | None) -> list[float]:
    """Adam over shuffled minibatches; returns the mean loss of each epoch."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(parameters, lr=lr)
    history = []
    model.train()
    for epoch in range(1, epochs + 1):
        check_cancelled()
        total = 0.0
        for batch in _batches(n, cfg.batch_size, generator):
            loss = loss_of(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        history.append(total / n)
        if on_epoch is not None:
            on_epoch(name, epoch, epochs, history[-1])
    model.eval()
    return history


def train_black_box(x: np.ndarray, y: np.ndarray, cfg: ConceptModelsConfig, seed: int,
                    check_cancelled: Callable[[], None] = lambda: None,
                    on_epoch: EpochHook | None = None) -> tuple[BlackBoxMLP, list[float]]:
    torch.manual_seed(seed)
    model = BlackBoxMLP(cfg.input_dim, cfg.hidden)
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)

    def loss_of(batch: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(model(xt[batch]), yt[batch])

    history = _loop("black_box", model, list(model.parameters()), cfg.epochs, cfg.lr, len(xt),
                    cfg, seed, loss_of, check_cancelled, on_epoch)
    return model, history


def train_bottleneck(x: np.ndarray, concepts: np.ndarray, y: np.ndarray,
                     cfg: ConceptModelsConfig, seed: int,
                     check_cancelled: Callable[[], None] = lambda: None,
                     on_epoch: EpochHook | None = None
                     ) -> tuple[LinearConceptBottleneck, list[float]]:
    """Joint: task BCE + concept_weight * concept MSE on all weights. Sequential: concept MSE
    on W, then the task head alone on the frozen predicted concepts."""
    torch.manual_seed(seed + 1)
    model = LinearConceptBottleneck(cfg.input_dim, cfg.n_concepts)
    xt = torch.as_tensor(x, dtype=torch.float32)
    ct = torch.as_tensor(concepts, dtype=torch.float32)
    yt = torch.as_tensor(y, dtype=torch.float32)

    def joint(batch: torch.Tensor) -> torch.Tensor:
        predicted, logit = model(xt[batch])
        return (F.binary_cross_entropy_with_logits(logit, yt[batch])
                + cfg.concept_weight * F.mse_loss(predicted, ct[batch]))

    def concepts_only(batch: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(model.concepts(xt[batch]), ct[batch])

    def head_only(batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            predicted = model.concepts(xt[batch])
        return F.binary_cross_entropy_with_logits(model.task(predicted).squeeze(-1), yt[batch])

    if cfg.cbm_training == "joint":
        history = _loop("bottleneck", model, list(model.parameters()), cfg.epochs, cfg.lr,
                        len(xt), cfg, seed + 1, joint, check_cancelled, on_epoch)
    else:
        history = _loop("bottleneck_concepts", model, list(model.concepts.parameters()),
                        cfg.epochs, cfg.lr, len(xt), cfg, seed + 1, concepts_only,
                        check_cancelled, on_epoch)
        history += _loop("bottleneck_head", model, list(model.task.parameters()), cfg.epochs,
                         cfg.lr, len(xt), cfg, seed + 2, head_only, check_cancelled, on_epoch)
    return model, history


def train_sae(x: np.ndarray, cfg: ConceptModelsConfig, seed: int,
              check_cancelled: Callable[[], None] = lambda: None,
              on_epoch: EpochHook | None = None) -> tuple[SparseAutoencoder, list[float]]:
    """Reconstruction MSE + sae_l1 * mean |codes|."""
    torch.manual_seed(seed + 3)
    model = SparseAutoencoder(cfg.input_dim, cfg.sae_features)
    xt = torch.as_tensor(x, dtype=torch.float32)

    def loss_of(batch: torch.Tensor) -> torch.Tensor:
        codes, reconstruction = model(xt[batch])
        return F.mse_loss(reconstruction, xt[batch]) + cfg.sae_l1 * codes.abs().mean()

    history = _loop("sae", model, list(model.parameters()), cfg.sae_epochs, cfg.sae_lr, len(xt),
                    cfg, seed + 3, loss_of, check_cancelled, on_epoch)
    return model, history


def predict_proba(model: BlackBoxMLP, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return torch.sigmoid(model(torch.as_tensor(x, dtype=torch.float32))).numpy()


def bottleneck_predict(model: LinearConceptBottleneck, x: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(predicted concepts, task probability)."""
    with torch.no_grad():
        concepts, logit = model(torch.as_tensor(x, dtype=torch.float32))
    return concepts.numpy(), torch.sigmoid(logit).numpy()


def fisher_metric(model: BlackBoxMLP, x: np.ndarray, ridge: float = 1e-6) -> np.ndarray:
    """(input_dim, input_dim) empirical Fisher of the logit's input gradient at the rows of x."""
    xt = torch.as_tensor(x, dtype=torch.float32).clone().requires_grad_(True)
    logits = model(xt)
    (gradients,) = torch.autograd.grad(logits.sum(), xt)  # row i depends on x_i only
    p = torch.sigmoid(logits.detach())
    weights = (p * (1 - p)).double()
    g = gradients.double()
    fisher = (g * weights[:, None]).T @ g / len(g)
    return (fisher + ridge * torch.eye(g.shape[1], dtype=torch.float64)).numpy()
