"""BrainWorld: a 3D conv autoencoder of fMRI frames + a conditional latent diffusion transformer.

Stage 1 compresses every frame of a (downsampled) volume into a small latent grid; stage 2
predicts the latents of the NEXT chunk of frames from the previous chunk. The denoiser sees the
previous chunk's tokens in self-attention, and two conditions in every block: the functional
connectivity (FC) of the previous chunk (always) and an sMRI (T1) embedding of the subject's
anatomy, both as the AdaLN vector and as cross-attention tokens: the anatomy steers the
denoising itself. In training the sMRI is replaced by learned null tokens with probability
``smri_drop`` so the same model also runs without it (classifier-free guidance). DDPM with a
cosine schedule and v-prediction plus a small x0 loss, as in the paper's spec.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

DOWNSAMPLE = 4  # the autoencoder halves each spatial axis twice


@dataclass
class BrainWorldConfig:
    grid: int = 16               # model volume edge in voxels (a multiple of 8)
    chunk: int = 8               # frames per chunk (the unit of prediction)
    latent_channels: int = 4
    ae_width: int = 8
    patch: int = 2               # latent voxels per token edge
    width: int = 96
    depth: int = 3
    heads: int = 4
    fc_parcels: int = 4          # FC over fc_parcels^3 blocks of the volume
    use_smri: bool = True        # the paper's switch: anatomy inside the denoiser
    smri_drop: float = 0.2       # probability the anatomy is replaced by null tokens
    diffusion_steps: int = 100
    x0_weight: float = 0.05
    x0_clip: float = 6.0         # |predicted x0| bound while sampling (latents have unit std)

    def __post_init__(self) -> None:
        if self.grid % (DOWNSAMPLE * self.patch):
            raise ValueError(f"grid {self.grid} must be a multiple of {DOWNSAMPLE * self.patch}")
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.heads}")

    @property
    def latent_grid(self) -> int:
        return self.grid // DOWNSAMPLE

    @property
    def tokens_per_frame(self) -> int:
        return (self.latent_grid // self.patch) ** 3

    @property
    def fc_features(self) -> int:
        n = self.fc_parcels ** 3
        return n * (n - 1) // 2

    def to_dict(self) -> dict:
        return asdict(self)


# -- stage 1: autoencoder ----------------------------------------------------------------------

class FrameAutoencoder(nn.Module):
    """One volume -> latents ``[C, g/4, g/4, g/4]`` and back; applied frame by frame."""

    def __init__(self, cfg: BrainWorldConfig) -> None:
        super().__init__()
        w, c = cfg.ae_width, cfg.latent_channels
        self.encoder = nn.Sequential(
            nn.Conv3d(1, w, 3, padding=1), nn.SiLU(),
            nn.Conv3d(w, 2 * w, 4, stride=2, padding=1), nn.SiLU(),
            nn.Conv3d(2 * w, 2 * w, 4, stride=2, padding=1), nn.SiLU(),
            nn.Conv3d(2 * w, c, 1))
        self.decoder = nn.Sequential(
            nn.Conv3d(c, 2 * w, 1), nn.SiLU(),
            nn.ConvTranspose3d(2 * w, 2 * w, 4, stride=2, padding=1), nn.SiLU(),
            nn.ConvTranspose3d(2 * w, w, 4, stride=2, padding=1), nn.SiLU(),
            nn.Conv3d(w, 1, 3, padding=1))

    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        """``[B, T, D, H, W]`` -> ``[B, T, C, d, h, w]``."""
        b, t = frames.shape[:2]
        z = self.encoder(frames.reshape(b * t, 1, *frames.shape[2:]))
        return z.reshape(b, t, *z.shape[1:])

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        b, t = latents.shape[:2]
        x = self.decoder(latents.reshape(b * t, *latents.shape[2:]))
        return x.reshape(b, t, *x.shape[2:])

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(frames))


# -- conditions --------------------------------------------------------------------------------

def parcel_series(frames: torch.Tensor, parcels: int) -> torch.Tensor:
    """``[B, T, D, H, W]`` -> ``[B, T, parcels^3]``: block means, the FC's regions."""
    b, t = frames.shape[:2]
    pooled = F.adaptive_avg_pool3d(frames.reshape(b * t, 1, *frames.shape[2:]), parcels)
    return pooled.reshape(b, t, -1)


def fc_features(frames: torch.Tensor, parcels: int) -> torch.Tensor:
    """Upper triangle of the Pearson FC between parcels over a chunk's frames ``[B, F]``."""
    series = parcel_series(frames, parcels)
    centred = series - series.mean(1, keepdim=True)
    unit = centred / centred.norm(dim=1, keepdim=True).clamp_min(1e-6)
    fc = unit.transpose(1, 2) @ unit
    rows, cols = torch.triu_indices(fc.shape[-1], fc.shape[-1], offset=1)
    return fc[:, rows, cols]


class AnatomyEncoder(nn.Module):
    """A T1 volume ``[B, D, H, W]`` -> tokens ``[B, S, width]`` and a global vector."""

    def __init__(self, cfg: BrainWorldConfig) -> None:
        super().__init__()
        w = cfg.ae_width
        self.convs = nn.Sequential(
            nn.Conv3d(1, w, 4, stride=2, padding=1), nn.SiLU(),
            nn.Conv3d(w, 2 * w, 4, stride=2, padding=1), nn.SiLU(),
            nn.Conv3d(2 * w, cfg.width, cfg.patch, stride=cfg.patch))
        self.position = nn.Parameter(torch.randn(cfg.tokens_per_frame, cfg.width) * 0.02)
        self.pool = nn.Sequential(nn.Linear(cfg.width, cfg.width), nn.SiLU(),
                                  nn.Linear(cfg.width, cfg.width))

    def forward(self, t1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.convs(t1[:, None]).flatten(2).transpose(1, 2) + self.position
        return tokens, self.pool(tokens.mean(1))


def timestep_embedding(steps: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10_000) * torch.arange(half, dtype=torch.float32) / half)
    angles = steps.float()[:, None] * freqs[None]
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


# -- stage 2: the denoiser ---------------------------------------------------------------------

class Block(nn.Module):
    """Self-attention over space-time tokens, cross-attention to the condition tokens and an
    MLP, each modulated by AdaLN (shift, scale, gate) from the condition vector; the gates
    start at zero so a fresh block is the identity."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(width, elementwise_affine=False)
                                   for _ in range(3))
        self.self_attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.cross_attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))
        self.modulation = nn.Linear(width, 9 * width)
        nn.init.zeros_(self.modulation.weight)
        nn.init.zeros_(self.modulation.bias)

    def forward(self, x: torch.Tensor, condition: torch.Tensor, memory: torch.Tensor
                ) -> torch.Tensor:
        mods = self.modulation(F.silu(condition))[:, None].chunk(9, dim=-1)
        h = self.norms[0](x) * (1 + mods[1]) + mods[0]
        x = x + mods[2] * self.self_attention(h, h, h, need_weights=False)[0]
        h = self.norms[1](x) * (1 + mods[4]) + mods[3]
        x = x + mods[5] * self.cross_attention(h, memory, memory, need_weights=False)[0]
        h = self.norms[2](x) * (1 + mods[7]) + mods[6]
        return x + mods[8] * self.mlp(h)


class Denoiser(nn.Module):
    """Predicts v for the noisy next-chunk latents given the previous chunk's latents, the
    diffusion step, the previous chunk's FC and (optionally) the anatomy."""

    def __init__(self, cfg: BrainWorldConfig) -> None:
        super().__init__()
        self.cfg = cfg
        patch_values = cfg.latent_channels * cfg.patch ** 3
        self.embed_patch = nn.Linear(patch_values, cfg.width)
        self.space = nn.Parameter(torch.randn(cfg.tokens_per_frame, cfg.width) * 0.02)
        self.time = nn.Parameter(torch.randn(cfg.chunk, cfg.width) * 0.02)
        self.is_context = nn.Parameter(torch.randn(cfg.width) * 0.02)
        self.step = nn.Sequential(nn.Linear(cfg.width, cfg.width), nn.SiLU(),
                                  nn.Linear(cfg.width, cfg.width))
        self.fc = nn.Sequential(nn.Linear(cfg.fc_features, cfg.width), nn.SiLU(),
                                nn.Linear(cfg.width, cfg.width))
        if cfg.use_smri:
            self.anatomy = AnatomyEncoder(cfg)
        self.null_tokens = nn.Parameter(torch.randn(cfg.tokens_per_frame, cfg.width) * 0.02)
        self.null_vector = nn.Parameter(torch.zeros(cfg.width))
        self.blocks = nn.ModuleList(Block(cfg.width, cfg.heads) for _ in range(cfg.depth))
        self.final_norm = nn.LayerNorm(cfg.width, elementwise_affine=False)
        self.final_modulation = nn.Linear(cfg.width, 2 * cfg.width)
        self.out = nn.Linear(cfg.width, patch_values)
        for layer in (self.final_modulation, self.out):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def tokens(self, latents: torch.Tensor) -> torch.Tensor:
        """``[B, T, C, d, h, w]`` -> ``[B, T * S, width]`` with space and time embeddings."""
        b, t, c, d, _, _ = latents.shape
        p, n = self.cfg.patch, d // self.cfg.patch
        patches = latents.reshape(b, t, c, n, p, n, p, n, p).permute(0, 1, 3, 5, 7, 2, 4, 6, 8)
        x = self.embed_patch(patches.reshape(b, t, n ** 3, c * p ** 3))
        return (x + self.space[None, None] + self.time[None, :t, None]).reshape(b, -1,
                                                                                 x.shape[-1])

    def untokens(self, x: torch.Tensor, t: int) -> torch.Tensor:
        cfg, b = self.cfg, x.shape[0]
        p, n, c = cfg.patch, cfg.latent_grid // cfg.patch, cfg.latent_channels
        x = x.reshape(b, t, n, n, n, c, p, p, p).permute(0, 1, 5, 2, 6, 3, 7, 4, 8)
        return x.reshape(b, t, c, n * p, n * p, n * p)

    def anatomy_condition(self, t1: torch.Tensor | None, keep: torch.Tensor | None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Anatomy tokens and vector; rows with ``keep`` False (or all, without a T1 or
        without the switch) get the learned null condition instead."""
        batch = keep.shape[0] if keep is not None else (1 if t1 is None else t1.shape[0])
        null_tokens = self.null_tokens.expand(batch, -1, -1)
        null_vector = self.null_vector.expand(batch, -1)
        if not self.cfg.use_smri or t1 is None:
            return null_tokens, null_vector
        tokens, vector = self.anatomy(t1)
        if keep is None:
            return tokens, vector
        mask = keep.float()
        return (mask[:, None, None] * tokens + (1 - mask[:, None, None]) * null_tokens,
                mask[:, None] * vector + (1 - mask[:, None]) * null_vector)

    def forward(self, noisy: torch.Tensor, steps: torch.Tensor, context: torch.Tensor,
                fc: torch.Tensor, t1: torch.Tensor | None = None,
                keep_smri: torch.Tensor | None = None) -> torch.Tensor:
        b, t = noisy.shape[:2]
        if keep_smri is None:
            keep_smri = torch.ones(b, dtype=torch.bool)
        anatomy_tokens, anatomy_vector = self.anatomy_condition(t1, keep_smri)
        fc_vector = self.fc(fc)
        condition = (self.step(timestep_embedding(steps, self.cfg.width)) + fc_vector
                     + anatomy_vector)
        memory = torch.cat([fc_vector[:, None], anatomy_tokens], dim=1)
        past = self.tokens(context) + self.is_context
        x = torch.cat([past, self.tokens(noisy)], dim=1)
        for block in self.blocks:
            x = block(x, condition, memory)
        shift, scale = self.final_modulation(F.silu(condition))[:, None].chunk(2, dim=-1)
        x = self.out(self.final_norm(x[:, past.shape[1]:]) * (1 + scale) + shift)
        return self.untokens(x, t)


# -- diffusion ---------------------------------------------------------------------------------

class CosineDiffusion(nn.Module):
    """DDPM with the cosine schedule; the network predicts v = sqrt(a) eps - sqrt(1 - a) x0."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        s = 0.008
        t = torch.linspace(0, steps, steps + 1, dtype=torch.float64) / steps
        f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
        betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
        alpha_bar = torch.cumprod(1 - betas, 0)
        self.steps = steps
        self.register_buffer("betas", betas.float(), persistent=False)
        self.register_buffer("alpha_bar", alpha_bar.float(), persistent=False)

    def _a(self, steps: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.alpha_bar[steps].reshape(-1, *([1] * (like.dim() - 1)))
        return a.sqrt(), (1 - a).sqrt()

    def noised(self, x0: torch.Tensor, steps: torch.Tensor, eps: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_t, the v target)."""
        sa, sb = self._a(steps, x0)
        return sa * x0 + sb * eps, sa * eps - sb * x0

    def x0_from_v(self, xt: torch.Tensor, steps: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        sa, sb = self._a(steps, xt)
        return sa * xt - sb * v

    def step_to(self, xt: torch.Tensor, step: int, previous: int, x0: torch.Tensor,
                noise: torch.Tensor) -> torch.Tensor:
        """Ancestral step x_step -> x_previous given the predicted x0 (previous = -1: the
        clean sample); the DDPM posterior when the two are adjacent, a respaced step else."""
        a = self.alpha_bar[step]
        a_prev = self.alpha_bar[previous] if previous >= 0 else torch.tensor(1.0)
        beta = 1 - a / a_prev
        mean = ((a_prev.sqrt() * beta / (1 - a)) * x0
                + ((1 - beta).sqrt() * (1 - a_prev) / (1 - a)) * xt)
        if previous < 0:
            return mean
        return mean + (beta * (1 - a_prev) / (1 - a)).sqrt() * noise


class BrainWorld(nn.Module):
    """Autoencoder + denoiser + schedule, and the buffers that undo the latent scaling."""

    def __init__(self, cfg: BrainWorldConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.autoencoder = FrameAutoencoder(cfg)
        self.denoiser = Denoiser(cfg)
        self.diffusion = CosineDiffusion(cfg.diffusion_steps)
        self.register_buffer("latent_scale", torch.ones(()))

    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        return self.autoencoder.encode(frames) / self.latent_scale

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return self.autoencoder.decode(latents * self.latent_scale)

    def diffusion_loss(self, context: torch.Tensor, target: torch.Tensor, fc: torch.Tensor,
                       t1: torch.Tensor | None) -> torch.Tensor:
        """v-prediction MSE + x0_weight * x0 MSE on one batch of (previous, next) latents;
        the anatomy is dropped per example with probability ``smri_drop``."""
        b = target.shape[0]
        steps = torch.randint(0, self.diffusion.steps, (b,))
        eps = torch.randn_like(target)
        noisy, v = self.diffusion.noised(target, steps, eps)
        keep = torch.rand(b) >= self.cfg.smri_drop
        v_hat = self.denoiser(noisy, steps, context, fc, t1, keep)
        x0_hat = self.diffusion.x0_from_v(noisy, steps, v_hat)
        return F.mse_loss(v_hat, v) + self.cfg.x0_weight * F.mse_loss(x0_hat, target)

    @torch.no_grad()
    def sample_next(self, context: torch.Tensor, fc: torch.Tensor, t1: torch.Tensor | None,
                    use_smri: bool = True, guidance: float = 1.0,
                    sampling_steps: int | None = None,
                    generator: torch.Generator | None = None) -> torch.Tensor:
        """Latents of the next chunk by ancestral sampling (every ``k``-th step of the
        schedule when ``sampling_steps`` is smaller; classifier-free guidance over the
        anatomy when ``guidance`` != 1)."""
        b = context.shape[0]
        shape = (b, self.cfg.chunk, *context.shape[2:])
        x = torch.randn(shape, generator=generator)
        keep = torch.full((b,), bool(use_smri))
        schedule = self._respaced(sampling_steps or self.diffusion.steps)
        for index, step in enumerate(schedule):
            steps = torch.full((b,), step, dtype=torch.long)
            v = self.denoiser(x, steps, context, fc, t1, keep)
            if guidance != 1.0 and use_smri:
                v_null = self.denoiser(x, steps, context, fc, t1, ~keep)
                v = v_null + guidance * (v - v_null)
            x0 = self.diffusion.x0_from_v(x, steps, v).clamp(-self.cfg.x0_clip,
                                                             self.cfg.x0_clip)
            previous = schedule[index + 1] if index + 1 < len(schedule) else -1
            x = self.diffusion.step_to(x, step, previous, x0,
                                       torch.randn(shape, generator=generator))
        return x

    def _respaced(self, count: int) -> list[int]:
        count = max(1, min(count, self.diffusion.steps))
        grid = torch.linspace(self.diffusion.steps - 1, 0, count).round().long().tolist()
        return sorted(set(grid), reverse=True)
