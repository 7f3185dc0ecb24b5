"""BitDance's autoregressive model: a causal transformer over binary tokens with a choice of heads.

Tokens are (T, bits) sign vectors in raster order. With ``patch_tokens = k`` the model predicts
k tokens per step (next-patch decoding): the input at position i is token i - k (the first k
positions hold class-conditioned start vectors) plus an embedding saying which token i is
asked for, and attention is block-causal over blocks of k, so the hidden state h_i sees every
earlier patch and nothing of its own. k = 1 is ordinary next-token AR.

Heads map h_i to a distribution over the 2^bits codes of token i:

* ``softmax``: exact, one logit per code (only for small ``bits``);
* ``bernoulli``: one logit per bit, bits independent given h_i (the cheap baseline);
* ``diffusion``: the binary diffusion head: noise the token, z = (1 - t) eps + t x, and a
  residual SwiGLU MLP with adaLN (conditioned on t and h_i) predicts x; v = (x_hat - z) /
  max(1 - t, 0.05) is trained by MSE against the true velocity x - eps, t logit-normal;
  sampling integrates dz/dt = v with Euler steps from noise, then takes the sign. The tokens
  of a patch are sampled independently of one another given their h_i;
* ``patch_diffusion``: next-patch diffusion: the same objective, but the denoiser is a small
  bidirectional transformer over the k tokens of a patch, so they are sampled jointly.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from engine.models.bitdance_tokenizer import codes_to_index, index_to_codes

HEADS = ("diffusion", "patch_diffusion", "bernoulli", "softmax")
Head = Literal["diffusion", "patch_diffusion", "bernoulli", "softmax"]
MAX_SOFTMAX_BITS = 12
MIN_ONE_MINUS_T = 0.05


@dataclass
class BitARConfig:
    tokens: int  # T tokens per image
    bits: int  # sign bits per token
    n_classes: int = 1
    patch_tokens: int = 1  # tokens decoded per step
    head: Head = "diffusion"
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    head_width: int = 128
    head_layers: int = 2
    diffusion_repeats: int = 2  # noise draws per token per training step
    sample_steps: int = 20  # Euler steps when sampling

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"unknown head {self.head!r}; choose one of {HEADS}")
        if self.tokens % self.patch_tokens:
            raise ValueError(f"{self.tokens} tokens do not split into patches of "
                             f"{self.patch_tokens}")
        if self.head == "softmax" and self.bits > MAX_SOFTMAX_BITS:
            raise ValueError(f"the softmax head enumerates 2^bits codes: bits {self.bits} > "
                             f"{MAX_SOFTMAX_BITS}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads "
                             f"{self.n_heads}")

    def to_dict(self) -> dict:
        return asdict(self)


# -- building blocks ---------------------------------------------------------------------------

class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2)
                   for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(out.transpose(1, 2).reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    """Pre-norm transformer block; ``mask`` True where attention is allowed."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_heads)
        self.ln_mlp = nn.LayerNorm(d_model)
        self.mlp = SwiGLU(d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x), mask)
        return x + self.mlp(self.ln_mlp(x))


class AdaLNBlock(nn.Module):
    """Residual SwiGLU (plus attention over a patch when ``attend``) modulated by a condition."""

    def __init__(self, width: int, n_heads: int, attend: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width, elementwise_affine=False)
        self.attn = SelfAttention(width, n_heads) if attend else None
        self.mlp = SwiGLU(width)
        self.modulation = nn.Linear(width, (6 if attend else 3) * width)
        nn.init.zeros_(self.modulation.weight)
        nn.init.zeros_(self.modulation.bias)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        parts = self.modulation(F.silu(cond)).chunk(6 if self.attn else 3, dim=-1)
        if self.attn is not None:
            shift, scale, gate = parts[3:]
            x = x + gate * self.attn(self.norm(x) * (1 + scale) + shift)
        shift, scale, gate = parts[:3]
        return x + gate * self.mlp(self.norm(x) * (1 + scale) + shift)


def time_embedding(t: torch.Tensor, width: int) -> torch.Tensor:
    """Sinusoidal features of t in [0, 1]."""
    half = width // 2
    freqs = torch.exp(-math.log(1000.0) * torch.arange(half, device=t.device) / half)
    angles = 1000.0 * t.unsqueeze(-1) * freqs
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class DiffusionDenoiser(nn.Module):
    """x_hat(z, t | h) for (B, k, bits) noisy tokens: per token (MLP) or joint over the patch."""

    def __init__(self, cfg: BitARConfig, joint: bool) -> None:
        super().__init__()
        w = cfg.head_width
        self.joint = joint
        self.z_in = nn.Linear(cfg.bits, w)
        self.cond_in = nn.Linear(cfg.d_model, w)
        self.time_in = nn.Sequential(nn.Linear(w, w), nn.SiLU(), nn.Linear(w, w))
        self.slot = nn.Parameter(torch.zeros(cfg.patch_tokens, w)) if joint else None
        heads = max(1, w // 32)
        self.blocks = nn.ModuleList(AdaLNBlock(w, heads, attend=joint)
                                    for _ in range(cfg.head_layers))
        self.norm = nn.LayerNorm(w, elementwise_affine=False)
        self.final_modulation = nn.Linear(w, 2 * w)
        self.out = nn.Linear(w, cfg.bits)
        nn.init.zeros_(self.final_modulation.weight)
        nn.init.zeros_(self.final_modulation.bias)

    def forward(self, z: torch.Tensor, t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """z (B, k, bits), t (B, 1, 1) or (B, k, 1), h (B, k, d_model) -> x_hat (B, k, bits)."""
        cond = self.cond_in(h) + self.time_in(time_embedding(t.squeeze(-1), self.z_in.out_features))
        x = self.z_in(z)
        if self.slot is not None:
            x = x + self.slot
        for block in self.blocks:
            x = block(x, cond)
        shift, scale = self.final_modulation(F.silu(cond)).chunk(2, dim=-1)
        return self.out(self.norm(x) * (1 + scale) + shift)


# -- the model ---------------------------------------------------------------------------------

class BitAR(nn.Module):
    def __init__(self, cfg: BitARConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, k = cfg.d_model, cfg.patch_tokens
        self.token_in = nn.Linear(cfg.bits, d)
        self.source_pos = nn.Parameter(torch.randn(cfg.tokens, d) * 0.02)
        self.target_pos = nn.Parameter(torch.randn(cfg.tokens, d) * 0.02)
        self.start = nn.Parameter(torch.randn(k, d) * 0.02)
        self.class_emb = nn.Embedding(cfg.n_classes, d)
        self.blocks = nn.ModuleList(Block(d, cfg.n_heads) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(d)
        blocks = torch.arange(cfg.tokens) // k
        self.register_buffer("mask", blocks[None, :] <= blocks[:, None], persistent=False)
        if cfg.head in ("diffusion", "patch_diffusion"):
            self.denoiser = DiffusionDenoiser(cfg, joint=cfg.head == "patch_diffusion")
        else:
            self.logits = nn.Linear(d, cfg.bits if cfg.head == "bernoulli" else 2 ** cfg.bits)

    def hidden(self, tokens: torch.Tensor, labels: torch.Tensor, length: int | None = None
               ) -> torch.Tensor:
        """h (B, length, d): h_i conditions token i on the patches before i's patch.

        ``tokens`` (B, >= length - k, bits) holds the tokens known so far."""
        length = self.cfg.tokens if length is None else length
        k = self.cfg.patch_tokens
        start = self.start.unsqueeze(0) + self.class_emb(labels).unsqueeze(1)
        shifted = self.token_in(tokens[:, :length - k]) + self.source_pos[:length - k]
        x = torch.cat([start.expand(len(labels), -1, -1), shifted], dim=1)
        x = x + self.target_pos[:length]
        mask = self.mask[:length, :length]
        for block in self.blocks:
            x = block(x, mask)
        return self.ln_f(x)

    def loss(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Training loss of the head on (B, T, bits) +-1 tokens (teacher forcing)."""
        h = self.hidden(tokens, labels)
        head = self.cfg.head
        if head == "softmax":
            logits = self.logits(h)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   codes_to_index(tokens).reshape(-1))
        if head == "bernoulli":
            return F.binary_cross_entropy_with_logits(self.logits(h), (tokens > 0).float())
        return self._diffusion_loss(tokens, h)

    def _diffusion_loss(self, tokens: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        B, T, bits = tokens.shape
        k, r = self.cfg.patch_tokens, self.cfg.diffusion_repeats
        x = tokens.reshape(B * T // k, k, bits).repeat(r, 1, 1)
        cond = h.reshape(B * T // k, k, -1).repeat(r, 1, 1)
        joint = self.cfg.head == "patch_diffusion"  # one t per patch, else one per token
        t = torch.sigmoid(torch.randn(x.shape[0], 1 if joint else k, 1))
        eps = torch.randn_like(x)
        z = (1 - t) * eps + t * x
        x_hat = self.denoiser(z, t, cond)
        v_hat = (x_hat - z) / (1 - t).clamp_min(MIN_ONE_MINUS_T)
        return F.mse_loss(v_hat, x - eps)

    @torch.no_grad()
    def sample_head(self, h: torch.Tensor, generator: torch.Generator | None = None
                    ) -> torch.Tensor:
        """Sample (B, k, bits) +-1 tokens given their hidden states h (B, k, d)."""
        head, bits = self.cfg.head, self.cfg.bits
        if head == "softmax":
            probs = F.softmax(self.logits(h), dim=-1)
            index = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator)
            return index_to_codes(index.reshape(h.shape[:-1]), bits)
        if head == "bernoulli":
            probs = torch.sigmoid(self.logits(h))
            return torch.where(torch.rand(probs.shape, generator=generator) < probs, 1.0, -1.0)
        z = torch.randn(*h.shape[:-1], bits, generator=generator)
        steps = self.cfg.sample_steps
        for step in range(steps):
            t = torch.full((h.shape[0], 1, 1), step / steps)
            x_hat = self.denoiser(z, t, h)
            z = z + (x_hat - z) / (1 - t).clamp_min(MIN_ONE_MINUS_T) / steps
        return torch.where(z >= 0, 1.0, -1.0)

    @torch.no_grad()
    def generate(self, labels: torch.Tensor, generator: torch.Generator | None = None
                 ) -> torch.Tensor:
        """(B, T, bits) tokens, ``patch_tokens`` per transformer call."""
        k, T = self.cfg.patch_tokens, self.cfg.tokens
        tokens = torch.zeros(len(labels), T, self.cfg.bits)
        for start in range(0, T, k):
            h = self.hidden(tokens, labels, length=start + k)[:, start:]
            tokens[:, start:start + k] = self.sample_head(h, generator)
        return tokens
