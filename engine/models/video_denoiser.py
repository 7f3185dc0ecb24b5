"""A small conditional video denoiser for C2R: a per-frame U-Net with temporal attention and a
control branch, plus the two frame probes that judge its output.

``VideoDenoiser`` predicts the clean clip x0 from a noisy clip at noise level t, given

* control frames (silhouettes and depth, several coarsening levels), stacked with the noisy
  frames at the input (a direct path from a silhouette to its pixels) and through a control
  branch whose features join the U-Net's encoder at both resolutions by zero-initialised 1x1
  convolutions (ControlNet's trick: the branch starts as a no-op and is learned in);
* a sentence embedding of the prompt (MiniLM, 384-d) and a domain token (0 = real footage,
  1 = synthetic render), which scale and shift every residual block (FiLM) with t's embedding;
* time: attention across the clip's frames at every position of the two coarse resolutions,
  so that appearance stays consistent from frame to frame.

The U-Net works on 2x2 pixel patches folded into channels (``pixel_unshuffle``) and unfolds
its output the same way: a quarter of the positions for the same information, which is what
makes training affordable on two CPU cores.

Noise follows a cosine schedule (alpha_bar(t) = cos^2(pi t / 2), t in [0, 1]); ``sample`` runs
deterministic DDIM from pure noise. ``FrameSegmenter`` (person mask per pixel) and
``DomainClassifier`` (real vs synthetic per frame) are trained apart from the generator, on
held-out clips, to measure it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

REAL, SYNTHETIC = 0, 1
PATCH = 2  # pixels folded into channels before the U-Net (4x fewer positions, no detail lost)


@dataclass
class VideoDenoiserConfig:
    image_size: int = 32
    frames: int = 4
    control_channels: int = 2  # silhouette, normalised inverse depth
    channels: int = 32
    prompt_dim: int = 384
    domains: int = 2
    heads: int = 4

    def to_dict(self) -> dict:
        return asdict(self)


def alpha_bar(t: torch.Tensor) -> torch.Tensor:
    return torch.cos(0.5 * math.pi * t).clamp(min=0.0) ** 2


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    frequencies = torch.exp(-math.log(1000.0) * torch.arange(half, device=t.device) / half)
    angles = 1000.0 * t[:, None] * frequencies[None]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class ResBlock(nn.Module):
    """Two 3x3 convolutions with a FiLM (scale, shift) from the conditioning vector."""

    def __init__(self, in_ch: int, out_ch: int, cond_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(8, in_ch)
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.film = nn.Linear(cond_dim, 2 * out_ch)
        self.norm2 = nn.GroupNorm(8, out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1)
        self.skip = nn.Conv2d(in_ch, out_ch, 1) if in_ch != out_ch else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        scale, shift = self.film(cond)[..., None, None].chunk(2, dim=1)
        h = self.norm2(h) * (1 + scale) + shift
        return self.skip(x) + self.conv2(F.silu(h))


class TemporalAttention(nn.Module):
    """Self-attention across the T frames at each spatial position (residual)."""

    def __init__(self, channels: int, frames: int, heads: int) -> None:
        super().__init__()
        self.frames = frames
        self.norm = nn.LayerNorm(channels)
        self.position = nn.Parameter(torch.zeros(frames, channels))
        self.attention = nn.MultiheadAttention(channels, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bt, c, h, w = x.shape
        b = bt // self.frames
        tokens = x.view(b, self.frames, c, h * w).permute(0, 3, 1, 2).reshape(b * h * w,
                                                                             self.frames, c)
        q = self.norm(tokens + self.position)
        mixed, _ = self.attention(q, q, q, need_weights=False)
        out = (tokens + mixed).view(b, h * w, self.frames, c).permute(0, 2, 3, 1)
        return out.reshape(bt, c, h, w)


def _zero(conv: nn.Conv2d) -> nn.Conv2d:
    nn.init.zeros_(conv.weight)
    nn.init.zeros_(conv.bias)
    return conv


class VideoDenoiser(nn.Module):
    def __init__(self, cfg: VideoDenoiserConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c, c2, cond = cfg.channels, 2 * cfg.channels, 4 * cfg.channels
        self.time = nn.Sequential(nn.Linear(c, cond), nn.SiLU(), nn.Linear(cond, cond))
        self.prompt = nn.Linear(cfg.prompt_dim, cond)
        self.domain = nn.Embedding(cfg.domains, cond)
        self.stem = nn.Conv2d((3 + cfg.control_channels) * PATCH ** 2, c, 3, padding=1)
        self.control_stem = nn.Sequential(nn.Conv2d(cfg.control_channels * PATCH ** 2, c, 3,
                                                    padding=1),
                                          nn.SiLU(), nn.Conv2d(c, c, 3, padding=1), nn.SiLU())
        self.control_down = nn.Sequential(nn.Conv2d(c, c2, 3, stride=2, padding=1), nn.SiLU())
        self.control_in = nn.ModuleList([_zero(nn.Conv2d(c, c, 1)), _zero(nn.Conv2d(c2, c2, 1))])
        self.enc1 = ResBlock(c, c, cond)
        self.down1 = nn.Conv2d(c, c2, 3, stride=2, padding=1)
        self.enc2 = ResBlock(c2, c2, cond)
        self.attn2 = TemporalAttention(c2, cfg.frames, cfg.heads)
        self.down2 = nn.Conv2d(c2, c2, 3, stride=2, padding=1)
        self.mid = ResBlock(c2, c2, cond)
        self.attn_mid = TemporalAttention(c2, cfg.frames, cfg.heads)
        self.up2 = nn.ConvTranspose2d(c2, c2, 4, stride=2, padding=1)
        self.dec2 = ResBlock(2 * c2, c2, cond)
        self.up1 = nn.ConvTranspose2d(c2, c, 4, stride=2, padding=1)
        self.dec1 = ResBlock(2 * c, c, cond)
        self.out = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(),
                                 nn.Conv2d(c, 3 * PATCH ** 2, 3, padding=1))

    def forward(self, noisy: torch.Tensor, control: torch.Tensor, t: torch.Tensor,
                prompt: torch.Tensor, domain: torch.Tensor) -> torch.Tensor:
        """x0 (B, T, 3, H, W) from noisy (B, T, 3, H, W), control (B, T, C, H, W), t (B,),
        prompt (B, prompt_dim) and domain (B,)."""
        b, frames = noisy.shape[:2]
        size = noisy.shape[-2:]
        cond = (self.time(timestep_embedding(t, self.cfg.channels)) + self.prompt(prompt)
                + self.domain(domain))
        cond = cond.repeat_interleave(frames, dim=0)
        x = F.pixel_unshuffle(noisy.reshape(b * frames, 3, *size), PATCH)
        ctrl = F.pixel_unshuffle(control.reshape(b * frames, -1, *size), PATCH)
        ctrl1 = self.control_stem(ctrl)
        ctrl2 = self.control_down(ctrl1)
        h1 = self.enc1(self.stem(torch.cat([x, ctrl], dim=1)) + self.control_in[0](ctrl1), cond)
        h2 = self.attn2(self.enc2(self.down1(h1) + self.control_in[1](ctrl2), cond))
        h3 = self.attn_mid(self.mid(self.down2(h2), cond))
        d2 = self.dec2(torch.cat([self.up2(h3), h2], dim=1), cond)
        d1 = self.dec1(torch.cat([self.up1(d2), h1], dim=1), cond)
        return F.pixel_shuffle(self.out(d1), PATCH).reshape(b, frames, 3, *size)

    def loss(self, clean: torch.Tensor, control: torch.Tensor, prompt: torch.Tensor,
             domain: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Mean squared error of the predicted clean clip at a random noise level."""
        t = torch.rand(clean.shape[0], generator=generator)
        noise = torch.randn(clean.shape, generator=generator)
        a = alpha_bar(t).view(-1, 1, 1, 1, 1)
        noisy = a.sqrt() * clean + (1 - a).sqrt() * noise
        return F.mse_loss(self(noisy, control, t, prompt, domain), clean)

    @torch.no_grad()
    def sample(self, control: torch.Tensor, prompt: torch.Tensor, domain: torch.Tensor,
               steps: int = 20, generator: torch.Generator | None = None) -> torch.Tensor:
        """Deterministic DDIM from pure noise to a clip in [-1, 1]."""
        b, frames, _, h, w = control.shape
        x = torch.randn((b, frames, 3, h, w), generator=generator)
        times = torch.linspace(1.0, 0.0, steps + 1)
        for now, later in zip(times[:-1], times[1:], strict=True):
            a_now, a_later = alpha_bar(now), alpha_bar(later)
            x0 = self(x, control, now.expand(b), prompt, domain).clamp(-1, 1)
            eps = (x - a_now.sqrt() * x0) / (1 - a_now).sqrt().clamp(min=1e-4)
            x = a_later.sqrt() * x0 + (1 - a_later).sqrt() * eps
        return x.clamp(-1, 1)


class FrameSegmenter(nn.Module):
    """Per-pixel person logits for single RGB frames in [-1, 1]: (N, 3, H, W) -> (N, H, W)."""

    def __init__(self, channels: int = 24) -> None:
        super().__init__()
        self.net = nn.Sequential(  # dilations 1, 2, 4, 1: a 17-pixel view of each pixel
            nn.Conv2d(3, channels, 3, padding=1), nn.SiLU(),
            nn.Conv2d(channels, channels, 3, padding=2, dilation=2), nn.SiLU(),
            nn.Conv2d(channels, channels, 3, padding=4, dilation=4), nn.SiLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.SiLU(),
            nn.Conv2d(channels, 1, 1))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.net(frames)[:, 0]


class DomainClassifier(nn.Module):
    """The logit of "real footage" for single RGB frames in [-1, 1]: (N, 3, H, W) -> (N,)."""

    def __init__(self, channels: int = 24) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.SiLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.SiLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * channels, 2 * channels, 3, padding=1), nn.SiLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * channels, 1))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.net(frames)[:, 0]
