"""Sequence autoencoders whose encoder and decoder talk only through a fixed-size latent z in R^d.

Encoders map token ids (B, L) to z (B, d), whatever L is:

* ``bilstm``: a bidirectional LSTM; z = W [h_forward(L), h_backward(1)].
* ``transformer``: bidirectional self-attention with learned positions; z = W mean_t(h_t).
* ``ssm``: a bidirectional diagonal linear state-space model (LRU/S4D-style, real diagonal):
  s_t = a * s_{t-1} + B e(x_t) with a = exp(-softplus(nu)) in (0, 1) per channel, scanned
  forwards and backwards; z = W [s_forward(L), s_backward(1)]. ``ssm_gate`` switches an input
  gate s_t = a * s_{t-1} + sigmoid(G e_t) * B e_t.

Decoders read only z: for sequence outputs (copy, sort) position i's logits are
MLP([z, p_i]) with a learned position code p_i; for sets, V presence logits = MLP(z).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

ENCODERS = ("bilstm", "transformer", "ssm")


@dataclass
class AutoencoderConfig:
    encoder: Literal["bilstm", "transformer", "ssm"]
    vocab: int
    max_len: int
    latent: int = 16  # d, the bottleneck
    width: int = 64
    output: Literal["sequence", "set"] = "sequence"
    ssm_gate: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


class BiLSTMEncoder(nn.Module):
    def __init__(self, cfg: AutoencoderConfig) -> None:
        super().__init__()
        self.lstm = nn.LSTM(cfg.width, cfg.width // 2, batch_first=True, bidirectional=True)

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(e)
        return torch.cat([h[0], h[1]], dim=-1)


class TransformerEncoder(nn.Module):
    def __init__(self, cfg: AutoencoderConfig) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(cfg.max_len, cfg.width) * 0.02)
        layer = nn.TransformerEncoderLayer(cfg.width, 4, 2 * cfg.width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        return self.body(e + self.pos[: e.shape[1]]).mean(dim=1)


class DiagonalSSMEncoder(nn.Module):
    def __init__(self, cfg: AutoencoderConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.width, cfg.width) if cfg.ssm_gate else None
        self.B = nn.Linear(cfg.width, cfg.width, bias=False)
        # decay rates spread over time scales 1..max_len (LRU-style ring initialisation)
        rates = torch.linspace(1.0, 1.0 / cfg.max_len, cfg.width)
        self.nu = nn.Parameter(torch.log(torch.expm1(rates)))

    def decay(self) -> torch.Tensor:
        return torch.exp(-F.softplus(self.nu))

    def scan(self, u: torch.Tensor) -> torch.Tensor:
        a, state = self.decay(), torch.zeros_like(u[:, 0])
        for t in range(u.shape[1]):
            state = a * state + u[:, t]
        return state

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        u = self.B(e)
        if self.gate is not None:
            u = torch.sigmoid(self.gate(e)) * u
        forward, backward = self.scan(u), self.scan(u.flip(1))
        return torch.cat([forward, backward], dim=-1) / 2


class BottleneckAutoencoder(nn.Module):
    def __init__(self, cfg: AutoencoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.width)
        encoder = {"bilstm": BiLSTMEncoder, "transformer": TransformerEncoder,
                   "ssm": DiagonalSSMEncoder}[cfg.encoder]
        self.encoder = encoder(cfg)
        pooled = 2 * cfg.width if cfg.encoder == "ssm" else cfg.width
        self.to_latent = nn.Linear(pooled, cfg.latent)
        if cfg.output == "sequence":
            self.positions = nn.Parameter(torch.randn(cfg.max_len, cfg.width) * 0.5)
            self.decoder = nn.Sequential(nn.Linear(cfg.latent + cfg.width, 2 * cfg.width),
                                         nn.GELU(), nn.Linear(2 * cfg.width, 2 * cfg.width),
                                         nn.GELU(), nn.Linear(2 * cfg.width, cfg.vocab))
        else:
            self.decoder = nn.Sequential(nn.Linear(cfg.latent, 2 * cfg.width), nn.GELU(),
                                         nn.Linear(2 * cfg.width, cfg.vocab))

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, L) ids -> (B, latent)."""
        return self.to_latent(self.encoder(self.embed(tokens)))

    def decode(self, z: torch.Tensor, length: int) -> torch.Tensor:
        """(B, latent) -> (B, length, vocab) logits, or (B, vocab) presence logits for sets."""
        if self.cfg.output == "set":
            return self.decoder(z)
        pos = self.positions[:length].expand(z.shape[0], -1, -1)
        return self.decoder(torch.cat([z[:, None].expand(-1, length, -1), pos], dim=-1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(tokens), tokens.shape[1])
