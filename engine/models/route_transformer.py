"""A small encoder-decoder transformer that writes a net's routing tree token by token.

The encoder reads the source (driver, relative loads), the decoder the tree so far; every token
carries a 3D grid coordinate (the pin it names, or the cumulative position the DFS reached).
ChiP-STAR's three spatial modules (our reading of the abstract, each switchable):

* dual-frame rotary encoding (``coord_rotary``): half of each head's rotary pairs turn with the
  sequence position, the other half with the coordinate (pairs shared out over x, y, layer), so
  q.k depends on the offset in order and in space. Cross-attention turns only the coordinate
  half (source and target positions are unrelated). Off: every pair turns with the position,
  and cross-attention is not rotated at all.
* Fourier-factorised attention prior (``fourier_prior``): a bias b_ij = phi(p_i) . psi(p_j) from
  Fourier features of the coordinates, added by concatenating phi to q and psi to k, so the
  attention kernel never holds an N x N bias. ``dense_prior=True`` builds that bias as a matrix
  instead (same numbers, quadratic memory), for the memory comparison.
* cumulative coordinate noise (``coordinate_noise``): in training, the teacher-forced
  coordinates get a random walk of noise along the sequence (std grows as sigma * sqrt(t)),
  so the model learns to act from slightly wrong positions as it must at inference.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class RouteTransformerConfig:
    vocab_size: int
    d_model: int = 64
    n_heads: int = 4
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    coord_rotary: bool = True
    fourier_prior: bool = True
    prior_dim: int = 8  # per head, the width phi and psi add to q and k
    fourier_frequencies: int = 4  # per axis
    grid_extent: float = 64.0  # the largest coordinate expected (sets the lowest frequency)

    def to_dict(self) -> dict:
        return asdict(self)


def fourier_features(coords: torch.Tensor, frequencies: int, extent: float) -> torch.Tensor:
    """(..., 3) coordinates -> (..., 6 * frequencies) sines and cosines, octaves from 1/extent."""
    scales = (2 * math.pi / extent) * 2.0 ** torch.arange(frequencies, dtype=coords.dtype,
                                                          device=coords.device)
    angles = (coords[..., :, None] * scales).flatten(-2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def coordinate_noise(coords: torch.Tensor, std: float, generator: torch.Generator | None = None
                     ) -> torch.Tensor:
    """Add a random walk along the sequence (dim 1) to (B, T, 3) coordinates: std * sqrt(t)."""
    if std <= 0:
        return coords
    steps = torch.randn(coords.shape, generator=generator, dtype=coords.dtype) * std
    return coords + steps.to(coords.device).cumsum(dim=1)


class Rotary(nn.Module):
    """Rotation angles per rotary pair: position pairs and (dual-frame) coordinate pairs."""

    def __init__(self, cfg: RouteTransformerConfig) -> None:
        super().__init__()
        pairs = cfg.d_model // cfg.n_heads // 2
        self.coord_pairs = pairs // 2 if cfg.coord_rotary else 0
        position_pairs = pairs - self.coord_pairs
        self.register_buffer("position_freq", 10000.0 ** (
            -torch.arange(position_pairs, dtype=torch.float32) / max(position_pairs, 1)),
            persistent=False)
        axis = torch.arange(self.coord_pairs) % 3  # x, y, layer, x, y, layer, ...
        octave = torch.arange(self.coord_pairs) // 3
        self.register_buffer("coord_axis", axis, persistent=False)
        self.register_buffer("coord_freq", (math.pi / cfg.grid_extent) * 2.0 ** octave.float(),
                             persistent=False)

    def angles(self, length: int, coords: torch.Tensor, with_position: bool) -> torch.Tensor:
        """(B, T, pairs) angles for a sequence with (B, T, 3) coordinates."""
        batch = coords.shape[0]
        positions = torch.arange(length, dtype=torch.float32, device=coords.device)
        pos = positions[:, None] * self.position_freq
        pos = pos.expand(batch, length, -1) if with_position else torch.zeros_like(
            pos).expand(batch, length, -1)
        if not self.coord_pairs:
            return pos
        coord = coords[..., self.coord_axis] * self.coord_freq
        return torch.cat([pos, coord], dim=-1)


def rotate(x: torch.Tensor, angles: torch.Tensor | None) -> torch.Tensor:
    """Rotate (B, H, T, D) by (B, T, D/2) angles, pairwise over the last dim."""
    if angles is None:
        return x
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: RouteTransformerConfig) -> None:
        super().__init__()
        self.cfg, self.heads = cfg, cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        if cfg.fourier_prior:
            features = 6 * cfg.fourier_frequencies
            self.phi = nn.Linear(features, cfg.n_heads * cfg.prior_dim, bias=False)
            self.psi = nn.Linear(features, cfg.n_heads * cfg.prior_dim, bias=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, q_angles, k_angles,
                q_feats: torch.Tensor, k_feats: torch.Tensor, causal: bool = False,
                key_mask: torch.Tensor | None = None, dense_prior: bool = False
                ) -> torch.Tensor:
        if causal and key_mask is not None:
            raise ValueError("causal attention takes no key mask here (targets pad at the end)")
        scale = 1 / math.sqrt(self.head_dim)
        q = rotate(self._heads(self.q(x)), q_angles)
        k, v = self.kv(memory).chunk(2, dim=-1)
        k, v = rotate(self._heads(k), k_angles), self._heads(v)
        mask = None if key_mask is None else key_mask[:, None, None, :]
        if self.cfg.fourier_prior:
            phi, psi = self._heads(self.phi(q_feats)), self._heads(self.psi(k_feats))
            if dense_prior:  # the N x N bias the factorisation avoids
                bias = phi @ psi.transpose(-1, -2)
                if causal:
                    length = bias.shape[-1]
                    bias = bias.masked_fill(torch.ones(length, length, dtype=torch.bool,
                                                       device=bias.device).triu(1),
                                            float("-inf"))
                    causal = False
                if mask is not None:
                    bias = bias.masked_fill(~mask, float("-inf"))
                mask = bias * scale  # SDPA scales q.k but not the mask
            else:
                q, k = torch.cat([q, phi], dim=-1), torch.cat([k, psi], dim=-1)
                # equal q/k/v widths keep SDPA on its fused (linear-memory) kernel
                v = F.pad(v, (0, self.cfg.prior_dim))
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                  is_causal=causal and mask is None,
                                                  scale=scale)[..., :self.head_dim]
        return self.out(attended.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


class Layer(nn.Module):
    def __init__(self, cfg: RouteTransformerConfig, cross: bool) -> None:
        super().__init__()
        self.ln_self = nn.LayerNorm(cfg.d_model)
        self.self_attention = Attention(cfg)
        self.cross = cross
        if cross:
            self.ln_cross = nn.LayerNorm(cfg.d_model)
            self.cross_attention = Attention(cfg)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))


class RouteTransformer(nn.Module):
    def __init__(self, cfg: RouteTransformerConfig) -> None:
        super().__init__()
        if cfg.d_model % cfg.n_heads or (cfg.d_model // cfg.n_heads) % 4:
            raise ValueError(f"d_model {cfg.d_model} / n_heads {cfg.n_heads} must be a "
                             "multiple of 4 (two rotary frames of pairs)")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.rotary = Rotary(cfg)
        self.encoder = nn.ModuleList(Layer(cfg, cross=False) for _ in range(cfg.n_encoder_layers))
        self.decoder = nn.ModuleList(Layer(cfg, cross=True) for _ in range(cfg.n_decoder_layers))
        self.ln_encoder = nn.LayerNorm(cfg.d_model)
        self.ln_out = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.apply(_init_weights)

    def _features(self, coords: torch.Tensor) -> torch.Tensor:
        return fourier_features(coords, self.cfg.fourier_frequencies, self.cfg.grid_extent)

    def encode(self, src: torch.Tensor, src_coords: torch.Tensor, src_mask: torch.Tensor
               ) -> torch.Tensor:
        """``src`` (B, S) ids, ``src_coords`` (B, S, 3), ``src_mask`` (B, S) True = real."""
        x = self.embed(src)
        angles = self.rotary.angles(src.shape[1], src_coords, with_position=True)
        feats = self._features(src_coords)
        for layer in self.encoder:
            h = layer.ln_self(x)
            x = x + layer.self_attention(h, h, angles, angles, feats, feats, key_mask=src_mask)
            x = x + layer.mlp(layer.ln_mlp(x))
        return self.ln_encoder(x)

    def decode(self, memory: torch.Tensor, src_coords: torch.Tensor, src_mask: torch.Tensor,
               tgt: torch.Tensor, tgt_coords: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) for teacher-forced targets ``tgt`` (B, T) at ``tgt_coords``."""
        x = self.embed(tgt)
        self_angles = self.rotary.angles(tgt.shape[1], tgt_coords, with_position=True)
        coordinate_only = self.rotary.coord_pairs > 0
        q_cross = (self.rotary.angles(tgt.shape[1], tgt_coords, with_position=False)
                   if coordinate_only else None)
        k_cross = (self.rotary.angles(src_coords.shape[1], src_coords, with_position=False)
                   if coordinate_only else None)
        tgt_feats, src_feats = self._features(tgt_coords), self._features(src_coords)
        for layer in self.decoder:
            h = layer.ln_self(x)
            x = x + layer.self_attention(h, h, self_angles, self_angles, tgt_feats, tgt_feats,
                                         causal=True)
            x = x + layer.cross_attention(layer.ln_cross(x), memory, q_cross, k_cross,
                                          tgt_feats, src_feats, key_mask=src_mask)
            x = x + layer.mlp(layer.ln_mlp(x))
        return self.head(self.ln_out(x))

    def forward(self, src, src_coords, src_mask, tgt, tgt_coords) -> torch.Tensor:
        memory = self.encode(src, src_coords, src_mask)
        return self.decode(memory, src_coords, src_mask, tgt, tgt_coords)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
