"""A small autoregressive generative model of a discrete table: one MLP per column.

Columns are category codes (continuous columns binned first). In ``order``, column t is drawn
from softmax(MLP_t(one-hot of the columns before it)); the first column has free logits. The
model defines a full joint distribution, hence its own mechanisms for every variable of the
fairness model whatever its column order; ``order`` different from the causal one shows how a
generative model can build mechanisms unlike the world's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class TabularGeneratorConfig:
    cards: list[int]  # categories per column, in the table's column order
    order: list[int]  # the generation order (a permutation of the columns)
    hidden: int = 64

    def to_dict(self) -> dict:
        return asdict(self)


class TabularGenerator(nn.Module):
    def __init__(self, cfg: TabularGeneratorConfig) -> None:
        super().__init__()
        if sorted(cfg.order) != list(range(len(cfg.cards))):
            raise ValueError(f"order {cfg.order} is not a permutation of the columns")
        self.cfg = cfg
        self.first = nn.Parameter(torch.zeros(cfg.cards[cfg.order[0]]))
        self.heads = nn.ModuleList()
        width = cfg.cards[cfg.order[0]]
        for column in cfg.order[1:]:
            self.heads.append(nn.Sequential(nn.Linear(width, cfg.hidden), nn.ReLU(),
                                            nn.Linear(cfg.hidden, cfg.cards[column])))
            width += cfg.cards[column]

    def _one_hot(self, codes: torch.Tensor, upto: int) -> torch.Tensor:
        parts = [F.one_hot(codes[:, c], self.cfg.cards[c]).float() for c in self.cfg.order[:upto]]
        return torch.cat(parts, dim=1)

    def log_prob(self, codes: torch.Tensor) -> torch.Tensor:
        """(n,) log-likelihood of rows of codes (n, columns)."""
        first = self.cfg.order[0]
        total = F.log_softmax(self.first, dim=0)[codes[:, first]]
        for t, head in enumerate(self.heads, 1):
            logits = head(self._one_hot(codes, t))
            column = self.cfg.order[t]
            chosen = codes[:, column:column + 1]
            total = total + F.log_softmax(logits, dim=1).gather(1, chosen)[:, 0]
        return total

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator) -> np.ndarray:
        codes = torch.zeros(n, len(self.cfg.cards), dtype=torch.long)
        first = self.cfg.order[0]
        codes[:, first] = torch.multinomial(torch.softmax(self.first, 0).expand(n, -1), 1,
                                            generator=generator)[:, 0]
        for t, head in enumerate(self.heads, 1):
            probs = torch.softmax(head(self._one_hot(codes, t)), dim=1)
            codes[:, self.cfg.order[t]] = torch.multinomial(probs, 1, generator=generator)[:, 0]
        return codes.numpy()


def train_generator(codes: np.ndarray, cfg: TabularGeneratorConfig, epochs: int, lr: float,
                    batch_size: int, seed: int, check_cancelled: Callable[[], None],
                    on_epoch: Callable[[int, float], None] | None = None) -> TabularGenerator:
    """Maximum likelihood with Adam over shuffled mini-batches; ``on_epoch(epoch, nll)``."""
    torch.manual_seed(seed)
    model = TabularGenerator(cfg)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    data = torch.from_numpy(np.asarray(codes, dtype=np.int64))
    generator = torch.Generator().manual_seed(seed)
    for epoch in range(1, epochs + 1):
        total = 0.0
        for batch in torch.randperm(len(data), generator=generator).split(batch_size):
            check_cancelled()
            loss = -model.log_prob(data[batch]).mean()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            total += loss.item() * len(batch)
        if on_epoch is not None:
            on_epoch(epoch, total / len(data))
    return model
