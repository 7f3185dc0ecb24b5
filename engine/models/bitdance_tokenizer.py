"""BitDance's binary tokenizer: a conv autoencoder whose latent is one sign bit per channel.

Each ``patch x patch`` block of the image becomes one token of ``bits`` channels; the channels
are quantised to {-1, +1} with a straight-through estimator (lookup-free: the code is the sign
pattern, no codebook to look up). Without a push, many bits collapse to a constant sign and
carry nothing, so training adds the grouped entropy loss: bits are split into groups of
``group_bits``; each group has 2^g sub-codes with soft assignment q(c | z) ∝ exp(2 <z, c> / tau)
(that is, exp(-||z - c||^2 / tau) up to a constant), and the loss is

    mean over samples of H(q(. | z))  -  H(mean over samples of q(. | z))

per group: each latent should commit to one code (low per-sample entropy) while the batch uses
all codes evenly (high codebook entropy). Grouping keeps the 2^g enumeration small while the
codebook term still sees how the bits of a group co-occur. A commitment term pulls z toward its
sign so the straight-through gap stays small.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class BinaryTokenizerConfig:
    image_size: int = 8
    patch: int = 2  # pixels per token side
    bits: int = 8  # sign bits per token
    channels: int = 32
    group_bits: int = 4  # bits per entropy group (2^group_bits sub-codes enumerated)
    entropy_weight: float = 0.1
    commit_weight: float = 0.25
    tau: float = 1.0

    def __post_init__(self) -> None:
        if self.image_size % self.patch:
            raise ValueError(f"image_size {self.image_size} is not divisible by patch "
                             f"{self.patch}")

    @property
    def grid(self) -> int:
        return self.image_size // self.patch

    def to_dict(self) -> dict:
        return asdict(self)


def sign_quantise(z: torch.Tensor) -> torch.Tensor:
    """{-1, +1} codes (0 maps to +1) with a straight-through gradient."""
    hard = torch.where(z >= 0, 1.0, -1.0).to(z.dtype)
    return z + (hard - z).detach()


def codes_to_index(codes: torch.Tensor) -> torch.Tensor:
    """(..., b) +-1 codes -> (...,) integer index, bit j worth 2^j (for the softmax head)."""
    weights = 2 ** torch.arange(codes.shape[-1], device=codes.device)
    return ((codes > 0).long() * weights).sum(-1)


def index_to_codes(index: torch.Tensor, bits: int) -> torch.Tensor:
    """The inverse of ``codes_to_index``."""
    weights = 2 ** torch.arange(bits, device=index.device)
    return torch.where((index.unsqueeze(-1) & weights) > 0, 1.0, -1.0)


def grouped_entropy_loss(z: torch.Tensor, group_bits: int, tau: float = 1.0
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, per-sample entropy, codebook entropy) in nats, summed over groups.

    ``z`` is (N, b) continuous latents (before quantisation); b must be a multiple of
    ``group_bits`` or the last group is shorter.
    """
    per_sample, codebook = z.new_zeros(()), z.new_zeros(())
    for start in range(0, z.shape[-1], group_bits):
        part = z[:, start:start + group_bits]
        codes = torch.tensor(list(itertools.product((-1.0, 1.0), repeat=part.shape[-1])),
                             dtype=z.dtype, device=z.device)
        probs = F.softmax(2 * part @ codes.T / tau, dim=-1)
        per_sample = per_sample + _entropy(probs).mean()
        codebook = codebook + _entropy(probs.mean(0))
    return per_sample - codebook, per_sample, codebook


def _entropy(probs: torch.Tensor) -> torch.Tensor:
    return -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1)


class BinaryTokenizer(nn.Module):
    def __init__(self, cfg: BinaryTokenizerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.channels
        self.encoder = nn.Sequential(
            nn.Conv2d(1, c, 3, padding=1), nn.GELU(),
            nn.Conv2d(c, c, cfg.patch, stride=cfg.patch), nn.GELU(),
            nn.Conv2d(c, cfg.bits, 1))
        self.decoder = nn.Sequential(
            nn.Conv2d(cfg.bits, c, 1), nn.GELU(),
            nn.ConvTranspose2d(c, c, cfg.patch, stride=cfg.patch), nn.GELU(),
            nn.Conv2d(c, 1, 3, padding=1))

    def latent(self, images: torch.Tensor) -> torch.Tensor:
        """(N, H, W) in [0, 1] -> continuous latents (N, T, bits), tokens in raster order."""
        z = self.encoder(images.unsqueeze(1) * 2 - 1)
        return z.flatten(2).transpose(1, 2)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """(N, H, W) -> +-1 codes (N, T, bits)."""
        return sign_quantise(self.latent(images))

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """(N, T, bits) codes -> images (N, H, W) in [0, 1]."""
        n, grid = codes.shape[0], self.cfg.grid
        x = codes.transpose(1, 2).reshape(n, self.cfg.bits, grid, grid)
        return torch.sigmoid(self.decoder(x)).squeeze(1)

    def loss(self, images: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Reconstruction MSE + entropy loss + commitment; returns the parts as floats too."""
        z = self.latent(images)
        codes = sign_quantise(z)
        reconstruction = F.mse_loss(self.decode(codes), images)
        entropy, per_sample, codebook = grouped_entropy_loss(
            z.reshape(-1, self.cfg.bits), self.cfg.group_bits, self.cfg.tau)
        commitment = F.mse_loss(z, codes.detach())
        total = (reconstruction + self.cfg.entropy_weight * entropy
                 + self.cfg.commit_weight * commitment)
        return total, {"recon": reconstruction.item(), "sample_entropy": per_sample.item(),
                       "codebook_entropy": codebook.item()}
