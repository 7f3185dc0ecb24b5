"""The one-block model of the star-graph transitive task (pita spec v2), fixed in advance.

As the authors describe their models (both the same block, only the head differs): frozen
random token embeddings, one causal self-attention layer with one head, no positional
embedding, no layer norm and no residual connections, then a 2-layer MLP. The direct (DP) head
is one yes/no logit read at the last position; the reasoning-trace (RT) head gives next-token
logits over the vocabulary (nodes, then YES and NO) at every position.

``rotary`` (a pre-declared secondary architecture, off by default) rotates queries and keys
by their positions (RoPE), the only place position would enter.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import nn


@dataclass
class StarBlockConfig:
    vocab: int  # node labels 0..n-1, then YES = n, NO = n + 1
    width: int = 64
    head: Literal["dp", "rt"] = "dp"
    rotary: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


class StarBlock(nn.Module):
    def __init__(self, cfg: StarBlockConfig) -> None:
        super().__init__()
        self.cfg = cfg
        embedding = torch.randn(cfg.vocab, cfg.width) / math.sqrt(cfg.width)
        self.register_buffer("embedding", embedding)  # frozen: never a parameter
        self.query = nn.Linear(cfg.width, cfg.width, bias=False)
        self.key = nn.Linear(cfg.width, cfg.width, bias=False)
        self.value = nn.Linear(cfg.width, cfg.width, bias=False)
        self.mlp = nn.Sequential(nn.Linear(cfg.width, cfg.width), nn.ReLU(),
                                 nn.Linear(cfg.width, cfg.width), nn.ReLU())
        self.out = nn.Linear(cfg.width, 1 if cfg.head == "dp" else cfg.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T) yes-logits (dp) or (B, T, vocab) next-token logits."""
        x = self.embedding[tokens]
        q, k, v = self.query(x), self.key(x), self.value(x)
        if self.cfg.rotary:
            q, k = rotate(q), rotate(k)
        length = tokens.shape[1]
        scores = q @ k.transpose(1, 2) / math.sqrt(self.cfg.width)
        future = torch.ones(length, length, dtype=torch.bool, device=tokens.device).triu(1)
        mixed = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
        logits = self.out(self.mlp(mixed))
        return logits[..., 0] if self.cfg.head == "dp" else logits


def rotate(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding: channel pairs turned by position-dependent angles."""
    half = x.shape[-1] // 2
    frequencies = 10_000 ** (-torch.arange(half, dtype=x.dtype, device=x.device) / half)
    angles = torch.arange(x.shape[1], dtype=x.dtype, device=x.device)[:, None] * frequencies
    cos, sin = angles.cos(), angles.sin()
    first, second = x[..., :half], x[..., half:2 * half]
    turned = torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return torch.cat([turned, x[..., 2 * half:]], dim=-1)
