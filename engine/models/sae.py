"""Sparse autoencoders (TopK and ReLU+L1) with an optional PC1 bypass, in SAELens's layout.

Weights follow SAELens: ``W_enc`` (d_in, d_sae), ``b_enc`` (d_sae), ``W_dec`` (d_sae, d_in),
``b_dec`` (d_in); decoder rows have unit norm. Codes are ``f = act((x - b_dec) W_enc + b_enc)``
and the reconstruction is ``x_hat = f W_dec + b_dec``.

The PC1 bypass (sae_pc1 spec): with the data mean ``mu`` and first principal direction ``u1``,
``s = u1 . (x - mu)`` goes around the SAE, which sees ``x_perp = x - s u1``; the output adds
``s u1`` back. In strongly anisotropic activations PC1 carries most of the variance, and a
sparse code for a dense, continuous direction is not identifiable across seeds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn import functional as F

ARCHITECTURES = ("topk", "standard")  # SAELens's names; "standard" = ReLU + L1


@dataclass
class SAEConfig:
    d_in: int
    d_sae: int
    architecture: Literal["topk", "standard"] = "topk"
    k: int = 32                    # topk: latents kept per token
    l1_coefficient: float = 1e-3   # standard: weight of the L1 penalty on the codes
    aux_k: int = 0                 # dead latents used by the auxiliary loss (0 = off)
    aux_coefficient: float = 1 / 32
    bypass: bool = False           # route PC1 around the SAE

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture {self.architecture!r}: choose one of "
                             f"{', '.join(ARCHITECTURES)}")
        if self.architecture == "topk" and not 1 <= self.k <= self.d_sae:
            raise ValueError(f"k={self.k} must lie in 1..d_sae={self.d_sae}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SAEOutput:
    x_hat: Tensor        # reconstruction of x (PC1 added back when bypassing)
    x_sae: Tensor        # what the SAE itself encodes: x, or x_perp under the bypass
    sae_hat: Tensor      # the SAE's reconstruction of x_sae
    pre: Tensor          # pre-activations (batch, d_sae)
    codes: Tensor        # sparse codes, dense layout (batch, d_sae)


class SparseAutoencoder(nn.Module):
    def __init__(self, cfg: SAEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        decoder = F.normalize(torch.randn(cfg.d_sae, cfg.d_in), dim=1)
        self.W_dec = nn.Parameter(decoder)
        self.W_enc = nn.Parameter(decoder.T.clone())  # tied start: each latent reads its row
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae))
        self.b_dec = nn.Parameter(torch.zeros(cfg.d_in))
        self.register_buffer("bypass_mean", torch.zeros(cfg.d_in))
        self.register_buffer("bypass_pc1", torch.zeros(cfg.d_in))

    # -- the PC1 bypass ------------------------------------------------------------------------
    def set_bypass(self, mean: Tensor, pc1: Tensor) -> None:
        self.bypass_mean.copy_(mean)
        self.bypass_pc1.copy_(F.normalize(pc1, dim=0))

    def split(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        """(input of the SAE, PC1 score s or None): x_perp = x - s u1 under the bypass."""
        if not self.cfg.bypass:
            return x, None
        score = (x - self.bypass_mean) @ self.bypass_pc1
        return x - score[:, None] * self.bypass_pc1, score

    # -- encoder and decoder -------------------------------------------------------------------
    def pre_activations(self, x_sae: Tensor) -> Tensor:
        """(x - b_dec) W_enc + b_enc, written so that backward needs no (batch x d_sae x d_in)
        product for b_dec's gradient."""
        return x_sae @ self.W_enc + (self.b_enc - self.b_dec @ self.W_enc)

    def activate(self, pre: Tensor) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """(dense codes, top values, top indices); the top-k pair is None for "standard"."""
        if self.cfg.architecture == "standard":
            return F.relu(pre), None, None
        values, indices = pre.topk(self.cfg.k, dim=-1)
        values = F.relu(values)
        return torch.zeros_like(pre).scatter(-1, indices, values), values, indices

    def encode(self, x: Tensor) -> Tensor:
        return self.activate(self.pre_activations(self.split(x)[0]))[0]

    def decode(self, codes: Tensor) -> Tensor:
        """The SAE's reconstruction of x_sae from dense codes (no bypass term)."""
        return codes @ self.W_dec + self.b_dec

    def forward(self, x: Tensor) -> SAEOutput:
        x_sae, score = self.split(x)
        pre = self.pre_activations(x_sae)
        codes, values, indices = self.activate(pre)
        if indices is None:
            sae_hat = self.decode(codes)
        else:  # k nonzeros per row: sum k decoder rows instead of a dense product
            sae_hat = F.embedding_bag(indices, self.W_dec, per_sample_weights=values,
                                      mode="sum") + self.b_dec
        x_hat = sae_hat if score is None else sae_hat + score[:, None] * self.bypass_pc1
        return SAEOutput(x_hat, x_sae, sae_hat, pre, codes)

    # -- training helpers ----------------------------------------------------------------------
    def loss(self, x: Tensor, dead: Tensor | None = None) -> tuple[Tensor, SAEOutput, dict]:
        """Reconstruction MSE (+ L1 for "standard", + the auxiliary-k loss on dead latents)."""
        out = self(x)
        mse = (out.sae_hat - out.x_sae).pow(2).sum(-1).mean()
        parts = {"mse": mse.detach()}
        loss = mse
        if self.cfg.architecture == "standard":
            l1 = out.codes.sum(-1).mean()  # decoder rows have unit norm: |f_i| |d_i| = f_i
            loss = loss + self.cfg.l1_coefficient * l1
            parts["l1"] = l1.detach()
        if self.cfg.aux_k and dead is not None and bool(dead.any()):
            aux = self.aux_loss(out, dead)
            loss = loss + self.cfg.aux_coefficient * aux
            parts["aux"] = aux.detach()
        return loss, out, parts

    def aux_loss(self, out: SAEOutput, dead: Tensor) -> Tensor:
        """Dead latents learn to predict what the live ones missed (the residual), so their
        gradients are not zero forever (Gao et al.'s auxiliary-k loss)."""
        residual = (out.x_sae - out.sae_hat).detach()
        dead_ids = dead.nonzero()[:, 0]
        values, local = out.pre[:, dead_ids].topk(min(self.cfg.aux_k, len(dead_ids)), dim=-1)
        indices = dead_ids[local]
        guess = F.embedding_bag(indices, self.W_dec, per_sample_weights=F.relu(values),
                                mode="sum")
        scale = (residual - residual.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)
        return (guess - residual).pow(2).sum(-1).mean() / scale

    @torch.no_grad()
    def init_b_dec(self, sample: Tensor) -> None:
        """Start the decoder bias at the mean of (the SAE's view of) the data."""
        self.b_dec.copy_(self.split(sample)[0].mean(0))

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        """Keep decoder rows on the unit sphere: drop the gradient along each row."""
        if self.W_dec.grad is not None:
            along = (self.W_dec.grad * self.W_dec).sum(-1, keepdim=True)
            self.W_dec.grad -= along * self.W_dec

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        self.W_dec.copy_(F.normalize(self.W_dec, dim=1))

    def sae_tensors(self) -> dict[str, Tensor]:
        """The four SAELens tensors (the bypass buffers are saved apart)."""
        return {name: getattr(self, name).detach().cpu().contiguous()
                for name in ("W_enc", "b_enc", "W_dec", "b_dec")}


def sae_from_tensors(cfg: SAEConfig, tensors: dict, bypass: dict | None = None
                     ) -> SparseAutoencoder:
    """An SAE from numpy or torch tensors (SAELens names; bypass ``mean`` and ``pc1``)."""
    sae = SparseAutoencoder(cfg)
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            getattr(sae, name).copy_(torch.as_tensor(tensors[name], dtype=torch.float32))
        if cfg.bypass:
            if bypass is None:
                raise ValueError("the config asks for the PC1 bypass but no mean/pc1 was given")
            sae.set_bypass(torch.as_tensor(bypass["mean"], dtype=torch.float32),
                           torch.as_tensor(bypass["pc1"], dtype=torch.float32))
    return sae
