"""BrainWorld: generate future 4D fMRI conditioned on the subject's anatomy (arXiv 2606.17742).

``brainworld.train`` fits the autoencoder and the conditional latent diffusion transformer
(``engine.models.brainworld``) on a user's 4D fMRI + T1 (NIfTI inputs ``fmri`` and ``t1``;
without a T1 the MNI152 template stands in), or on synthetic subjects whose anatomy is known.
Volumes are resampled to a ``grid``^3 model grid, z-scored per voxel inside a brain mask: at
16^3 the default 300 + 1500 training steps take about 3 CPU-minutes on one core, at 32^3 about
14 (``benchmarks/bench_fmri.py``); a 400-frame rollout at 16^3 takes under a minute. With
``volumes="patches"`` the run keeps its own resolution (held in memory, up to 1 GB): each
frame is encoded whole once (0.2 s at 91x109x91), the same model trains on random grid^3
patches of it (about the same cost per step) and generates every patch of each next chunk,
blended where neighbours overlap: a 91x109x91 chunk of 8 frames takes about 0.8
CPU-minutes with 16^3 (576 patches) or 32^3 patches (80).
``brainworld.generate`` rolls a checkpoint out from any starting chunk, writes the frames back
at the source's resolution as a 4D NIfTI with its affine and header (a BIDS derivative with a
JSON sidecar saying how it was made), and compares them with the real run: temporal SNR maps,
power spectra of time courses and FC similarity.

Synthetic subjects: R regions (spheres at fixed places, as if registered to a template) whose
signals follow a VAR(1) x_t = A x_{t-1} + e_t with A = 0.6 I + 0.3 u u^T, u = a / |a| set by
the subject's anatomy vector a; the T1 shows a as the regions' brightness. The true FC is the
stationary correlation of x (discrete Lyapunov equation). ``brainworld.reproduce`` trains with
and without the sMRI condition and checks the spec's rollout and FC claims on held-out subjects.
"""

from __future__ import annotations

import gzip
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from engine.api import (
    Claim,
    Criterion,
    MethodParams,
    MethodSpec,
    ReproduceParams,
    Resources,
    reproduce_spec,
)
from engine.plots import heatmap, plot, series

if TYPE_CHECKING:

    from engine.context import JobContext
    from engine.models.brainworld import BrainWorld, BrainWorldConfig

PAPER = "brainworld"
CHECKPOINT = "brainworld"
SYNTHETIC_TR_S = 2.0
SYNTHETIC_VOXEL_MM = 4.0
STD_FLOOR = 1e-3
MASK_FRACTION = 0.2      # voxels whose mean is below this fraction of the bright end: outside
MIN_T1_COVERAGE = 0.5    # share of the model grid a user's T1 must cover in world space
LATE_FRAMES = 100        # the rollout's "late" window for the std check
MNI152_FILE = "mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz"
MAX_NATIVE_BYTES = 1e9   # a run trained patch-wise is held in memory at its own resolution
PATCH_BATCH = 16         # patches denoised together while generating patch-wise
LATENT_STEP = 4          # voxels per latent voxel (the autoencoder's DOWNSAMPLE)


# -- synthetic subjects ------------------------------------------------------------------------

@dataclass
class Subject:
    """One run at model resolution: z-scored frames, their voxel mean/std, the anatomy."""

    name: str
    frames: np.ndarray          # [T, g, g, g] float32, z-scored per voxel (0 outside the mask)
    mean: np.ndarray            # [g, g, g]
    std: np.ndarray             # [g, g, g]
    mask: np.ndarray            # [g, g, g] bool
    t1: np.ndarray              # [g, g, g] in [0, 1]
    tr_s: float
    labels: np.ndarray | None = None     # synthetic: region of each voxel (0 = none)
    true_fc: np.ndarray | None = None    # synthetic: [R, R]
    raw: np.ndarray | None = None        # synthetic: the frames before z-scoring


def region_labels(grid: int, regions: int) -> tuple[np.ndarray, np.ndarray]:
    """(labels [g,g,g] with 1..R for spherical regions, brain mask [g,g,g]); places fixed."""
    axes = (np.arange(grid) + 0.5) / grid
    x, y, z = np.meshgrid(axes, axes, axes, indexing="ij")
    brain = ((x - 0.5) ** 2 + (y - 0.5) ** 2 + (z - 0.5) ** 2) <= 0.46 ** 2
    centres = np.random.default_rng(1234).uniform(0.27, 0.73, size=(regions, 3))
    corners = np.array([[i, j, k] for i in (0.3, 0.7) for j in (0.3, 0.7) for k in (0.3, 0.7)])
    centres[:min(regions, 8)] = corners[:min(regions, 8)]
    labels = np.zeros((grid,) * 3, dtype=np.int64)
    radius = max(0.17, 1.2 / grid)
    for r, (cx, cy, cz) in enumerate(centres):
        inside = ((x - cx) ** 2 + (y - cy) ** 2 + (z - cz) ** 2) <= radius ** 2
        labels[inside & (labels == 0)] = r + 1
    return labels, brain


def coupling_of(anatomy: np.ndarray) -> np.ndarray:
    u = anatomy / np.linalg.norm(anatomy)
    return 0.6 * np.eye(len(u)) + 0.3 * np.outer(u, u)


def stationary_fc(coupling: np.ndarray) -> np.ndarray:
    from scipy.linalg import solve_discrete_lyapunov

    covariance = solve_discrete_lyapunov(coupling, np.eye(len(coupling)))
    scale = np.sqrt(np.diag(covariance))
    return covariance / np.outer(scale, scale)


def synthetic_subject(seed: int, grid: int, frames: int, regions: int = 8,
                      noise: float = 0.6) -> Subject:
    """A subject whose anatomy vector sets both its T1 and the coupling of its dynamics.
    The first frames do not depend on ``frames`` (longer runs extend shorter ones)."""
    dynamics_rng, noise_rng, anatomy_rng = (np.random.default_rng(s) for s in
                                            np.random.SeedSequence(seed).spawn(3))
    labels, brain = region_labels(grid, regions)
    anatomy = anatomy_rng.uniform(0.3, 1.0, regions) * anatomy_rng.choice([-1.0, 1.0], regions)
    coupling = coupling_of(anatomy)
    x = np.zeros((frames, regions))
    state = dynamics_rng.standard_normal(regions) * 1.5
    for t in range(frames + 20):  # 20 frames of burn-in
        state = coupling @ state + dynamics_rng.standard_normal(regions)
        if t >= 20:
            x[t - 20] = state
    t1 = np.where(brain, 0.4, 0.0)
    for r in range(regions):
        t1[labels == r + 1] = 0.6 + 0.3 * anatomy[r]
    baseline = 100.0 * (0.5 + t1)
    signal = np.concatenate([np.zeros((frames, 1)), x], axis=1)[:, labels]
    raw = baseline + np.where(brain, 3.0 * signal + 3.0 * noise * noise_rng.standard_normal(
        (frames, *labels.shape)), 0.0)
    raw = raw.astype(np.float32)
    mean, std, z = zscore(raw, brain)
    return Subject(f"synthetic-{seed}", z, mean, std, brain, t1.astype(np.float32),
                   SYNTHETIC_TR_S, labels, stationary_fc(coupling), raw)


def synthetic_affine(grid: int) -> np.ndarray:
    affine = np.diag([SYNTHETIC_VOXEL_MM] * 3 + [1.0])
    affine[:3, 3] = -SYNTHETIC_VOXEL_MM * (grid - 1) / 2
    return affine


def zscore(raw: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mean = raw.mean(0)
    std = np.maximum(raw.std(0), STD_FLOOR * max(float(np.abs(mean).max()), 1.0))
    z = np.where(mask, (raw - mean) / std, 0.0).astype(np.float32)
    return mean.astype(np.float32), std.astype(np.float32), z


# -- user files --------------------------------------------------------------------------------

@dataclass
class Source:
    """Where a run came from, to write generated frames back in its space."""

    path: Path | None
    shape: tuple[int, int, int]
    affine: np.ndarray
    header: object | None


def _model_coordinates(shape: tuple[int, ...], out: tuple[int, int, int]) -> np.ndarray:
    """Source voxel coordinates ``[3, prod(out)]`` of the model volume's voxel centres (it
    spans the source's field of view; ``out == shape``: the source's own voxels)."""
    axes = [(np.arange(m) + 0.5) * n / m - 0.5 for n, m in zip(shape, out, strict=True)]
    return np.stack(np.meshgrid(*axes, indexing="ij")).reshape(3, -1)


def _to_grid(frame: np.ndarray, grid: int) -> np.ndarray:
    """A volume resampled to ``grid``^3: smoothed as much as it shrinks, then trilinear."""
    from scipy.ndimage import gaussian_filter, map_coordinates

    sigma = [max(0.0, 0.4 * (n / grid)) if n > grid else 0.0 for n in frame.shape]
    smooth = gaussian_filter(frame, sigma) if any(sigma) else frame
    values = map_coordinates(smooth, _model_coordinates(frame.shape, (grid,) * 3), order=1,
                             mode="nearest")
    return values.reshape((grid,) * 3).astype(np.float32)


def from_grid(volume: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """A model-grid volume back at the source's shape (trilinear)."""
    from scipy.ndimage import map_coordinates

    grid = volume.shape[0]
    axes = [(np.arange(n) + 0.5) * grid / n - 0.5 for n in shape]
    points = np.stack(np.meshgrid(*axes, indexing="ij")).reshape(3, -1)
    return map_coordinates(volume, points, order=1, mode="nearest").reshape(shape)


def load_fmri(path: str | Path, grid: int | None, check_cancelled=None
              ) -> tuple[np.ndarray, Source, float]:
    """A 4D NIfTI's frames at model resolution ``[T, g, g, g]`` (``grid`` None: at the
    source's own ``[T, x, y, z]``, for patches), its Source and TR; reads one frame at a time
    (resampled, a 1-2 GB run is never held whole). Errors name the file."""
    from engine.io import FormatError
    from engine.io.nifti import open_volume

    volume = open_volume(path, index=False)
    try:
        if volume.n_frames < 2:
            raise FormatError(volume.path, f"a 3-D image {volume.shape}; the fmri input must "
                                           "be a 4-D run (x, y, z, time)")
        shape = volume.spatial_shape if grid is None else (grid,) * 3
        if grid is None and volume.n_frames * volume.frame_voxels * 4 > MAX_NATIVE_BYTES:
            raise ValueError(f"{volume.path}: {volume.shape} is more than "
                             f"{MAX_NATIVE_BYTES / 1e9:g} GB as float32; patches train on the "
                             "run held in memory: use volumes='resampled' or a shorter run")
        frames = np.empty((volume.n_frames, *shape), dtype=np.float32)
        for t in range(volume.n_frames):
            if check_cancelled is not None:
                check_cancelled()
            frames[t] = volume.frame(t) if grid is None else _to_grid(volume.frame(t), grid)
        source = Source(volume.path, volume.spatial_shape, volume.affine, volume.header)
        return frames, source, volume.tr_s or 2.0
    finally:
        volume.close()


def _box_coordinates(data: np.ndarray, out: tuple[int, int, int]) -> np.ndarray:
    """Voxel coordinates of ``out``-shaped points evenly filling the box of ``data``'s non-zero
    voxels (a template's brain fitted onto the run's field of view)."""
    nonzero = np.argwhere(data > 0.05 * data.max())
    lo, hi = nonzero.min(0), nonzero.max(0)
    axes = [lo[a] + (np.arange(out[a]) + 0.5) * (hi[a] - lo[a] + 1) / out[a] - 0.5
            for a in range(3)]
    return np.stack(np.meshgrid(*axes, indexing="ij")).reshape(3, -1)


def load_anatomy(t1_path: str | Path | None, source: Source, out: tuple[int, int, int]
                 ) -> tuple[np.ndarray, str]:
    """The T1 on the model volume (``out``-shaped, spanning the run's field of view) in
    [0, 1] and a note of where it came from. A user's T1 is resampled through both affines;
    without one, the MNI152 template's brain is fitted to the run's field of view (it is no
    subject's anatomy, only a prior)."""
    from scipy.ndimage import map_coordinates

    from engine.io import FormatError

    if t1_path is None:
        template = mni152_template()
        values = map_coordinates(template, _box_coordinates(template, out), order=1)
        note = "MNI152 template (nilearn's) fitted to the run's field of view"
    else:
        from engine.io.nifti import open_volume

        volume = open_volume(t1_path, index=False)
        try:
            if volume.n_frames > 1:
                raise FormatError(volume.path, f"a 4-D image {volume.shape}; the t1 input "
                                               "must be a 3-D anatomical image")
            model_voxels = _model_coordinates(source.shape, out).T
            world = model_voxels @ source.affine[:3, :3].T + source.affine[:3, 3]
            ijk = volume.world_to_voxel(world).T
            inside = ((ijk > -0.5) & (ijk < np.asarray(volume.spatial_shape)[:, None] - 0.5)
                      ).all(0)
            if inside.mean() < MIN_T1_COVERAGE:
                raise FormatError(volume.path, f"covers {inside.mean():.0%} of the fMRI's "
                                               "field of view in world coordinates; the T1 and "
                                               "the fMRI must be in the same space (register "
                                               "them first)")
            values = map_coordinates(volume.frame(0), ijk, order=1, cval=0.0)
            note = f"T1 {volume.path.name} resampled through both affines"
        finally:
            volume.close()
    values = values.reshape(out)
    top = float(np.percentile(values, 99)) or 1.0
    return np.clip(values / top, 0, 1.5).astype(np.float32), note


def mni152_template() -> np.ndarray:
    """nilearn's MNI152 T1 (the 1 mm file ``load_mni152_template`` starts from), read with
    nibabel: importing ``nilearn.datasets`` and resampling to 2 mm costs seconds."""
    import importlib.util

    import nibabel as nib

    spec = importlib.util.find_spec("nilearn")
    path = Path(spec.origin).parent / "datasets" / "data" / MNI152_FILE if spec else None
    if path is not None and path.is_file():
        return np.asarray(nib.load(path).dataobj, dtype=np.float32)
    from nilearn.datasets import load_mni152_template

    return np.asarray(load_mni152_template(resolution=2).get_fdata(), dtype=np.float32)


def brain_mask(mean: np.ndarray) -> np.ndarray:
    return mean > MASK_FRACTION * float(np.percentile(mean, 98))


def subject_from_file(fmri: str | Path, t1: str | Path | None, grid: int,
                      check_cancelled=None, native: bool = False
                      ) -> tuple[Subject, Source, str]:
    """A user's run as a Subject: resampled to ``grid``^3, or (``native``) at its own
    resolution for the patch-wise mode."""
    frames, source, tr_s = load_fmri(fmri, None if native else grid, check_cancelled)
    anatomy, note = load_anatomy(t1, source, frames.shape[1:])
    mask = brain_mask(frames.mean(0))
    mean, std, z = zscore(frames, mask)
    return Subject(Path(fmri).name, z, mean, std, mask, anatomy, tr_s), source, note


# -- parameters --------------------------------------------------------------------------------

class ModelParams(MethodParams):
    """The model's size, shared by train and reproduce."""

    grid: int = Field(16, ge=8, le=48, description="model volume edge in voxels (multiple of "
                      "8); volumes are resampled to grid^3")
    chunk: int = Field(8, ge=2, le=32, description="frames per chunk (the unit of prediction)")
    patch: Literal[1, 2, 4] = Field(4, description="latent voxels per token edge (grid/4 must "
                                    "be a multiple)")
    width: int = Field(64, ge=16, le=512, description="transformer width")
    depth: int = Field(2, ge=1, le=12, description="transformer blocks")
    use_smri: bool = Field(True, description="condition the denoiser on the T1 (the paper's "
                           "switch)")
    smri_drop: float = Field(0.2, ge=0, le=1, description="probability the T1 is dropped "
                             "in training")

    @field_validator("grid")
    @classmethod
    def _grid(cls, value: int) -> int:
        if value % 8:
            raise ValueError(f"grid must be a multiple of 8, not {value}")
        return value

    @model_validator(mode="after")
    def _patch(self) -> ModelParams:
        if (self.grid // 4) % self.patch:
            raise ValueError(f"patch {self.patch} does not divide the latent grid "
                             f"{self.grid // 4} (grid / 4)")
        return self

    def brainworld_config(self) -> BrainWorldConfig:
        from engine.models.brainworld import BrainWorldConfig

        return BrainWorldConfig(grid=self.grid, chunk=self.chunk, patch=self.patch,
                                width=self.width,
                                depth=self.depth, heads=4 if self.width % 4 == 0 else 1,
                                use_smri=self.use_smri, smri_drop=self.smri_drop)


class TrainParams(ModelParams):
    ae_steps: int = Field(300, ge=0, le=100_000, description="autoencoder training steps")
    steps: int = Field(1500, ge=0, le=200_000, description="diffusion transformer steps")
    batch_size: int = Field(16, ge=1, le=512, description="chunks per step (autoencoder: "
                            "twice as many frames)")
    lr: float = Field(2e-4, gt=0, le=1, description="AdamW learning rate (paper: 2e-4)")
    subjects: int = Field(24, ge=1, le=512, description="synthetic subjects (without fmri "
                          "input)")
    frames: int = Field(160, ge=8, le=5000, description="frames per synthetic subject")
    regions: int = Field(8, ge=2, le=32, description="regions of a synthetic subject")
    synthetic_seed: int = Field(0, ge=0, description="first synthetic subject's seed")
    checkpoint_every: int = Field(500, ge=1, description="save a checkpoint every N steps")
    volumes: Literal["resampled", "patches"] = Field(
        "resampled", description="resampled: whole volumes shrunk to grid^3; patches: the run "
        "at its own resolution, the model trained on random grid^3 patches and generating "
        "every patch of the volume, blended where they overlap")


class GenerateParams(MethodParams):
    start_frame: int = Field(0, ge=0, description="first frame of the real starting chunk")
    frames: int = Field(64, ge=1, le=5000, description="future frames to generate")
    sampling_steps: int = Field(100, ge=1, le=1000, description="diffusion steps per chunk "
                                "(the schedule's 100, or fewer respaced)")
    use_smri: bool = Field(True, description="condition on the T1 (False: the null anatomy)")
    guidance: float = Field(1.0, ge=0, le=10, description="classifier-free guidance over "
                            "the anatomy (1 = none)")
    subject: int = Field(0, ge=0, description="synthetic checkpoints: the subject to start "
                         "from (0 .. subjects - 1 were trained on; larger: unseen subjects)")
    overlap: int = Field(4, ge=0, le=47, description="patch-wise checkpoints: voxels that "
                         "neighbouring patches share, where they are blended (< grid)")


# -- patches: full resolution on a small model ------------------------------------------------

def padded(volumes: np.ndarray, size: int) -> np.ndarray:
    """Zeros after the end of the last three axes, up to ``size`` (so a patch fits) and to a
    multiple of the autoencoder's ``DOWNSAMPLE`` (so a whole frame has whole latents)."""
    pad = [(0, 0)] * (volumes.ndim - 3) + [(0, max(size, -(-n // LATENT_STEP) * LATENT_STEP) - n)
                                           for n in volumes.shape[-3:]]
    return np.pad(volumes, pad) if any(after for _, after in pad) else volumes


def crop(volumes, corner, size: int):
    """The ``size``^3 patch at ``corner`` of the last three axes (numpy or torch)."""
    (i, j, k) = corner
    return volumes[..., i:i + size, j:j + size, k:k + size]


def random_corner(shape, size: int, rng: np.random.Generator, align: int = 1
                  ) -> tuple[int, int, int]:
    """A patch corner anywhere in ``shape`` (each axis >= ``size``), on multiples of
    ``align``."""
    return tuple(align * int(rng.integers(0, (n - size) // align + 1)) for n in shape[-3:])


def patch_corners(shape, size: int, overlap: int, align: int = 1
                  ) -> list[tuple[int, int, int]]:
    """Corners of ``size``^3 patches covering ``shape`` (each axis >= ``size``), evenly
    spread on multiples of ``align``, neighbours sharing about ``overlap`` voxels (or more);
    the last ends at the edge."""
    def starts(n: int) -> list[int]:
        if n <= size:
            return [0]
        count = -(-(n - size) // (size - overlap)) + 1
        return sorted({align * round(m * (n - size) / (count - 1) / align)
                       for m in range(count)})

    return list(itertools.product(*(starts(n) for n in shape)))


def encode_run(model: BrainWorld, frames: np.ndarray, batch: int = 2):
    """Latents ``[T, C, x/4, y/4, z/4]`` of a whole run ``[T, x, y, z]`` (the autoencoder is
    convolutional), a few frames at a time: a full-resolution frame's activations are large.
    A patch's latents are then a crop at ``corner / 4``: each frame is encoded once, not
    once per patch that holds it."""
    import torch

    with torch.no_grad():
        return torch.cat([model.encode(torch.from_numpy(np.ascontiguousarray(
            frames[None, first:first + batch])))[0] for first in range(0, len(frames), batch)])


def blend_window(size: int, overlap: int) -> np.ndarray:
    """A patch's weights: 1 inside, falling linearly towards each face over ``overlap``
    voxels (never to 0, so a volume edge covered by one patch keeps its values)."""
    ramp = np.minimum(1.0, (np.arange(size) + 0.5) / max(overlap, 1))
    line = np.minimum(ramp, ramp[::-1])
    return (line[:, None, None] * line[None, :, None] * line[None, None, :]).astype(np.float32)


def blend_patches(shape, size: int, overlap: int, make, align: int = 1) -> np.ndarray:
    """A volume ``[..., *shape]`` from overlapping patches: ``make(corners)`` returns the
    patches ``[len(corners), ..., size, size, size]`` of a batch of corners; each is weighted
    by ``blend_window`` and the weights normalised, so neighbours fade into each other where
    they overlap: no seams (a partition of unity: patches that agree give the volume back).
    ``align``: corners on multiples of it (``patch_corners``)."""
    corners = patch_corners(shape, size, overlap, align)
    window = blend_window(size, overlap)
    total, weight = None, np.zeros(shape, dtype=np.float32)
    for first in range(0, len(corners), PATCH_BATCH):
        group = corners[first:first + PATCH_BATCH]
        patches = np.asarray(make(group), dtype=np.float32)
        if total is None:
            total = np.zeros((*patches.shape[1:-3], *shape), dtype=np.float32)
        for corner, values in zip(group, patches, strict=True):
            crop(total, corner, size)[...] += values * window
            crop(weight, corner, size)[...] += window
    return total / weight


# -- training ----------------------------------------------------------------------------------

@dataclass
class Trained:
    model: BrainWorld
    cfg: dict                   # the checkpoint's cfg.json (steps done, training state)
    tensors: dict               # the checkpoint's tensors: weights + training state
    ae_losses: list[float]
    losses: list[float]
    wall_s: float


TRAINING_PREFIX = "training."   # checkpoint tensors that are not weights


def training_state(stage: str, optimizer, rng: np.random.Generator) -> tuple[dict, dict]:
    """What a checkpoint holds beside the weights so training resumes exactly: the active
    stage's AdamW moments and step counts (tensors, under ``training.optimizer.``), its
    hyperparameters, and both random generators (numpy's in cfg.json, torch's as a tensor)."""
    import torch

    saved = optimizer.state_dict()
    tensors = {f"{TRAINING_PREFIX}optimizer.{index}.{key}": torch.as_tensor(value)
               for index, entries in saved["state"].items() for key, value in entries.items()}
    tensors[f"{TRAINING_PREFIX}torch_rng"] = torch.get_rng_state()
    generator = rng.bit_generator.state
    cfg = {"stage": stage, "param_groups": saved["param_groups"],
           "numpy_rng": {**generator, "state": {k: hex(v) for k, v in
                                                generator["state"].items()}}}
    return tensors, cfg


def restore_training_state(tensors: dict, cfg: dict, stage: str, optimizer,
                           rng: np.random.Generator) -> bool:
    """Load ``training_state`` into the optimizer and generators when it was saved in
    ``stage``; False (nothing changed) otherwise."""
    import torch

    if cfg.get("stage") != stage:
        return False
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        if name.startswith(f"{TRAINING_PREFIX}optimizer."):
            index, key = name[len(f"{TRAINING_PREFIX}optimizer."):].split(".", 1)
            state.setdefault(int(index), {})[key] = value
    groups = [{**saved, "lr": now["lr"]}  # moments as saved, the learning rate asked for now
              for saved, now in zip(cfg["param_groups"], optimizer.param_groups, strict=True)]
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    torch.set_rng_state(tensors[f"{TRAINING_PREFIX}torch_rng"])
    generator = dict(cfg["numpy_rng"])
    generator["state"] = {k: int(v, 16) for k, v in generator["state"].items()}
    rng.bit_generator.state = generator
    return True


def _frame_batch(runs: list[np.ndarray], rng: np.random.Generator, n: int,
                 patch: int | None = None) -> np.ndarray:
    """``n`` random frames of random runs ``[T, x, y, z]``; with ``patch``, a random
    ``patch``^3 crop of each (the runs padded to fit one)."""
    picks = rng.integers(0, len(runs), n)
    frames = [runs[s][rng.integers(0, len(runs[s]))] for s in picks]
    if patch is None:
        return np.stack(frames)
    return np.stack([crop(frame, random_corner(frame.shape, patch, rng), patch)
                     for frame in frames])


def train(cfg: BrainWorldConfig, subjects: list[Subject], p: TrainParams, seed: int,
          check_cancelled, report=None, model: BrainWorld | None = None,
          done: tuple[int, int] = (0, 0), save=None,
          resume: tuple[dict, dict] | None = None) -> Trained:
    """Stage 1 (autoencoder on single frames), then stage 2 (denoiser on consecutive chunk
    pairs, autoencoder frozen). ``done`` = steps already taken by a resumed model; ``resume``
    = a checkpoint's (tensors, cfg) whose training state (optimizer, random generators) is
    restored, so the steps continue exactly as an uninterrupted run's; ``save`` (tensors,
    cfg) is called every ``checkpoint_every`` steps and when cancelled."""
    import torch
    from torch.nn import functional as F

    from engine.context import Cancelled
    from engine.models.brainworld import BrainWorld, fc_features

    usable = [s for s in subjects if len(s.frames) >= 2 * cfg.chunk]
    if not usable:
        raise ValueError(f"every run is shorter than two chunks ({2 * cfg.chunk} frames); "
                         "lower chunk")
    g = cfg.grid
    patchwise = p.volumes == "patches"
    runs = [padded(s.frames, g) if patchwise else s.frames for s in usable]
    patch = g if patchwise else None
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = (model if model is not None else BrainWorld(cfg)).train()
    ae_done, dit_done = done
    ae_losses, losses = [], []
    started = time.monotonic()
    stage = "autoencoder"
    saved_tensors, saved_cfg = resume if resume is not None else ({}, {})
    saved_training = saved_cfg.get("training", {})

    def state() -> tuple[dict, dict]:
        tensors, training = training_state(stage, optimizer, rng)
        return ({**model.state_dict(), **tensors},
                {"model": cfg.to_dict(), "ae_steps_done": ae_done, "steps_done": dit_done,
                 "latent_scale": float(model.latent_scale), "training": training})

    try:
        optimizer = torch.optim.AdamW(model.autoencoder.parameters(), lr=max(p.lr, 1e-3),
                                      weight_decay=0.01)
        restore_training_state(saved_tensors, saved_training, stage, optimizer, rng)
        while ae_done < p.ae_steps:
            check_cancelled()
            x = torch.from_numpy(_frame_batch(runs, rng, 2 * p.batch_size, patch))[:, None]
            loss = F.mse_loss(model.autoencoder(x), x)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.autoencoder.parameters(), 1.0)
            optimizer.step()
            ae_done += 1
            ae_losses.append(loss.item())
            if report:
                report("autoencoder", ae_done, p.ae_steps, ae_losses[-1])
        with torch.no_grad():
            if dit_done == 0 and saved_training.get("stage") != "diffusion":
                # latents of unit std for the diffusion (fixed once trained)
                sample = torch.from_numpy(_frame_batch(runs, rng, 64, patch))[:, None]
                model.latent_scale.fill_(float(model.autoencoder.encode(sample).std()))
            latents = ([encode_run(model, run) for run in runs] if patchwise else
                       [model.encode(torch.from_numpy(s.frames)[None])[0] for s in usable])
        frames = [torch.from_numpy(run) for run in runs]
        t1s = [torch.from_numpy(padded(s.t1, g) if patchwise else s.t1) for s in usable]
        model.autoencoder.requires_grad_(False)
        parameters = [q for q in model.denoiser.parameters() if q.requires_grad]
        optimizer = torch.optim.AdamW(parameters, lr=p.lr, weight_decay=0.01)
        stage = "diffusion"
        restore_training_state(saved_tensors, saved_training, stage, optimizer, rng)
        c = cfg.chunk
        while dit_done < p.steps:
            check_cancelled()
            picks = rng.integers(0, len(usable), p.batch_size)
            starts = [int(rng.integers(0, len(usable[s].frames) - 2 * c + 1)) for s in picks]
            if patchwise:  # the same random patch of both chunks and of the T1
                corners = [random_corner(runs[s].shape[1:], g, rng, LATENT_STEP)
                           for s in picks]
                where = list(zip(picks, starts, corners, strict=True))
                latent = [(latents[s], tuple(v // LATENT_STEP for v in k), t)
                          for s, t, k in where]
                size = g // LATENT_STEP
                context = torch.stack([crop(z[t:t + c], k, size) for z, k, t in latent])
                target = torch.stack([crop(z[t + c:t + 2 * c], k, size) for z, k, t in latent])
                past = torch.stack([crop(frames[s][t:t + c], k, g) for s, t, k in where])
                t1 = torch.stack([crop(t1s[s], k, g) for s, _, k in where])
            else:
                where = list(zip(picks, starts, strict=True))
                context = torch.stack([latents[s][t:t + c] for s, t in where])
                target = torch.stack([latents[s][t + c:t + 2 * c] for s, t in where])
                past = torch.stack([frames[s][t:t + c] for s, t in where])
                t1 = torch.stack([t1s[s] for s in picks])
            loss = model.diffusion_loss(context, target, fc_features(past, cfg.fc_parcels), t1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            dit_done += 1
            losses.append(loss.item())
            if report:
                report("diffusion", dit_done, p.steps, losses[-1])
            if save is not None and dit_done % p.checkpoint_every == 0:
                save(*state())
    except Cancelled:
        if save is not None:
            save(*state())
        raise
    finally:
        model.autoencoder.requires_grad_(True)
    tensors, final_cfg = state()
    return Trained(model, final_cfg, tensors, ae_losses, losses, time.monotonic() - started)


def load_checkpoint(folder: str | Path, with_training: bool = False):
    """(model in eval mode, cfg), and with ``with_training`` the training-state tensors
    (optimizer moments, torch generator; empty for a checkpoint saved without them)."""
    from safetensors.torch import load_file

    from engine.models.brainworld import BrainWorld, BrainWorldConfig

    path = Path(folder)
    if not (path / "cfg.json").is_file() or not (path / "model.safetensors").is_file():
        raise ValueError(f"{folder}: not a brainworld checkpoint (cfg.json and "
                         "model.safetensors)")
    cfg = json.loads((path / "cfg.json").read_text())
    if "model" not in cfg:
        raise ValueError(f"{folder}: cfg.json has no brainworld model configuration")
    model = BrainWorld(BrainWorldConfig(**cfg["model"]))
    tensors = load_file(str(path / "model.safetensors"))
    training = {k: v for k, v in tensors.items() if k.startswith(TRAINING_PREFIX)}
    model.load_state_dict({k: v for k, v in tensors.items() if k not in training})
    return (model.eval(), cfg, training) if with_training else (model.eval(), cfg)


def _training_subjects(p: TrainParams, inputs: dict, check_cancelled
                       ) -> tuple[list[Subject], dict]:
    if "fmri" in inputs:
        subject, source, note = subject_from_file(inputs["fmri"], inputs.get("t1"), p.grid,
                                                  check_cancelled, p.volumes == "patches")
        return [subject], {"kind": "file", "fmri": str(inputs["fmri"]),
                           "t1": inputs.get("t1"), "anatomy": note, "volumes": p.volumes}
    if "t1" in inputs:
        raise ValueError("the t1 input needs an fmri input (or neither, for synthetic "
                         "subjects)")
    subjects = [synthetic_subject(p.synthetic_seed + s, p.grid, p.frames, p.regions)
                for s in range(p.subjects)]
    return subjects, {"kind": "synthetic", "seed": p.synthetic_seed, "subjects": p.subjects,
                      "frames": p.frames, "regions": p.regions, "volumes": p.volumes,
                      "anatomy": "synthetic T1 (region brightness = anatomy vector)"}


def run_train(ctx: JobContext, params: TrainParams, inputs: dict) -> dict:
    cfg = params.brainworld_config()
    model, done, previous, resume = None, (0, 0), {}, None
    if "checkpoint" in inputs:
        model, previous, training = load_checkpoint(inputs["checkpoint"], with_training=True)
        if previous["model"] != {**previous["model"], **_shape_fields(cfg)}:
            raise ValueError(f"{inputs['checkpoint']}: the checkpoint was trained with "
                             f"{_shape_fields_of(previous['model'])}, not "
                             f"{_shape_fields(cfg)}; resume with the same grid, chunk, patch, "
                             "width, depth and use_smri")
        trained_on = previous.get("data", {}).get("volumes", "resampled")
        if trained_on != params.volumes:
            raise ValueError(f"{inputs['checkpoint']}: the checkpoint was trained on "
                             f"{trained_on} volumes; resume with volumes={trained_on!r}")
        cfg = model.cfg
        done = (previous["ae_steps_done"], previous["steps_done"])
        resume = (training, previous) if training and "training" in previous else None
        ctx.log(f"resuming from {inputs['checkpoint']} after {done[0]} autoencoder and "
                f"{done[1]} diffusion steps"
                + ("" if resume else " (no optimizer state saved: AdamW starts afresh)"))
    subjects, data = _training_subjects(params, inputs, ctx.check_cancelled)
    ctx.log(f"{len(subjects)} run(s) at {cfg.grid}^3 voxels, chunks of {cfg.chunk} frames; "
            f"anatomy: {data['anatomy']}")
    offset = params.ae_steps

    def report(stage: str, step: int, total: int, loss: float) -> None:
        at = step if stage == "autoencoder" else offset + step
        ctx.progress(at, params.ae_steps + params.steps,
                     **{"ae_loss" if stage == "autoencoder" else "loss": loss})

    def save(tensors: dict, state: dict) -> str:
        return ctx.save_checkpoint(CHECKPOINT, tensors, {**state, "data": data,
                                                         "tr_s": subjects[0].tr_s})

    trained = train(cfg, subjects, params, ctx.seed, ctx.check_cancelled, report, model, done,
                    save, resume)
    outputs = {"checkpoint": save(trained.tensors, trained.cfg)}
    outputs["loss_plot"] = ctx.save_artifact("loss", plot(
        "BrainWorld training loss", [series("autoencoder (MSE)",
                                            np.arange(1, len(trained.ae_losses) + 1),
                                            trained.ae_losses),
                                     series("diffusion (v + 0.05 x0)",
                                            np.arange(1, len(trained.losses) + 1) + offset,
                                            trained.losses)],
        xlabel="step", ylabel="loss", logy=True))
    if data["kind"] == "synthetic":
        outputs.update(_save_synthetic_subject(ctx, subjects[0]))
    outputs["final"] = {"ae_loss": trained.ae_losses[-1] if trained.ae_losses else None,
                        "loss": trained.losses[-1] if trained.losses else None,
                        "wall_s": trained.wall_s, "grid": cfg.grid,
                        "steps_done": trained.cfg["steps_done"]}
    return outputs


def _shape_fields(cfg: BrainWorldConfig) -> dict:
    return _shape_fields_of(cfg.to_dict())


def _shape_fields_of(model: dict) -> dict:
    return {k: model[k] for k in ("grid", "chunk", "patch", "width", "depth", "use_smri")}


def _save_synthetic_subject(ctx: JobContext, subject: Subject) -> dict:
    """The first synthetic subject's run and T1 as NIfTI, to open next to generations."""
    affine = synthetic_affine(subject.frames.shape[1])
    bold = nifti_bytes(np.moveaxis(subject.raw, 0, -1), affine, None, subject.tr_s)
    t1 = nifti_bytes(subject.t1 * 1000, affine, None, None)
    return {"real_bold": ctx.save_file(f"sub-{subject.name}_bold.nii.gz", bold),
            "real_t1": ctx.save_file(f"sub-{subject.name}_T1w.nii.gz", t1)}


# -- generation --------------------------------------------------------------------------------

def rollout(model: BrainWorld, start: np.ndarray, t1: np.ndarray, mask: np.ndarray,
            n_frames: int, use_smri: bool = True, guidance: float = 1.0,
            sampling_steps: int = 100, seed: int = 0, check_cancelled=None,
            report=None) -> np.ndarray:
    """``n_frames`` z-scored frames ``[B, n, g, g, g]`` after the real chunks ``start``
    ``[B, chunk, g, g, g]``, chunk by chunk: each next chunk is sampled given the previous
    chunk's latents and FC (of its decoded frames) and the anatomy ``t1`` ``[B, g, g, g]``."""
    import torch

    from engine.models.brainworld import fc_features

    cfg = model.cfg
    generator = torch.Generator().manual_seed(seed)
    masks = torch.from_numpy(mask.astype(np.float32))
    frames = torch.from_numpy(np.ascontiguousarray(start, dtype=np.float32)) * masks
    anatomy = torch.from_numpy(np.ascontiguousarray(t1, dtype=np.float32))
    chunks = -(-n_frames // cfg.chunk)
    out = []
    with torch.no_grad():
        context = model.encode(frames)
        for k in range(chunks):
            if check_cancelled is not None:
                check_cancelled()
            latents = model.sample_next(context, fc_features(frames, cfg.fc_parcels), anatomy,
                                        use_smri=use_smri, guidance=guidance,
                                        sampling_steps=sampling_steps, generator=generator)
            frames = model.decode(latents) * masks
            out.append(frames.numpy())
            context = latents
            if report is not None:
                report(k + 1, chunks)
    return np.concatenate(out, axis=1)[:, :n_frames].astype(np.float32)


def rollout_patches(model: BrainWorld, start: np.ndarray, t1: np.ndarray, mask: np.ndarray,
                    n_frames: int, overlap: int, use_smri: bool = True, guidance: float = 1.0,
                    sampling_steps: int = 100, seed: int = 0, check_cancelled=None,
                    report=None) -> np.ndarray:
    """``rollout`` of one run at its own resolution ``start`` ``[chunk, x, y, z]`` with a
    patch-trained model: every next chunk is sampled patch by patch (``grid``^3 patches
    sharing about ``overlap`` voxels, corners on the latent grid) from that patch of the
    previous chunk (its latents cut from the whole frames' encoding, its FC) and of ``t1``;
    the decoded patches are blended into whole frames (``blend_patches``), which are encoded
    again for the next chunk, so neighbouring patches share one past. ``[n, x, y, z]``."""
    import torch

    from engine.models.brainworld import fc_features

    cfg, size = model.cfg, model.cfg.grid
    generator = torch.Generator().manual_seed(seed)
    masks = padded(mask.astype(np.float32), size)
    frames = padded(np.asarray(start, dtype=np.float32), size) * masks
    anatomy = padded(np.asarray(t1, dtype=np.float32), size)
    chunks = -(-n_frames // cfg.chunk)

    def next_patches(corners: list) -> np.ndarray:
        past = torch.from_numpy(np.stack([crop(frames, k, size) for k in corners]))
        context = torch.stack([crop(latents, tuple(v // LATENT_STEP for v in k),
                                    size // LATENT_STEP) for k in corners])
        sampled = model.sample_next(
            context, fc_features(past, cfg.fc_parcels),
            torch.from_numpy(np.stack([crop(anatomy, k, size) for k in corners])),
            use_smri=use_smri, guidance=guidance, sampling_steps=sampling_steps,
            generator=generator)
        return model.decode(sampled).numpy()

    out = []
    with torch.no_grad():
        for k in range(chunks):
            if check_cancelled is not None:
                check_cancelled()
            latents = encode_run(model, frames)
            frames = blend_patches(masks.shape, size, overlap, next_patches,
                                   LATENT_STEP) * masks
            out.append(frames)
            if report is not None:
                report(k + 1, chunks)
    x, y, z = mask.shape
    return np.concatenate(out)[:n_frames, :x, :y, :z].astype(np.float32)


def nifti_bytes(data: np.ndarray, affine: np.ndarray, header, tr_s: float | None) -> bytes:
    """A .nii.gz in memory: ``data`` (x, y, z[, t]) float32 with ``header`` copied when given
    (the source's), its data type and scaling reset for float32."""
    import nibabel as nib

    image = nib.Nifti1Image(np.asarray(data, dtype=np.float32), affine,
                            header=None if header is None else header.copy())
    image.set_data_dtype(np.float32)
    image.header.set_slope_inter(1.0, 0.0)
    if tr_s is not None and np.asarray(data).ndim == 4:
        zooms = list(image.header.get_zooms()[:3]) + [float(tr_s)]
        image.header.set_zooms(zooms)
        image.header.set_xyzt_units("mm", "sec")
    image.header["descrip"] = b"Studio brainworld.generate"
    return gzip.compress(image.to_bytes(), compresslevel=6)


def _start_subject(cfg: dict, params: GenerateParams, inputs: dict, grid: int, needed: int
                   ) -> tuple[Subject, Source, str]:
    if "fmri" in inputs:
        return subject_from_file(inputs["fmri"], inputs.get("t1"), grid,
                                 native=cfg.get("data", {}).get("volumes") == "patches")
    data = cfg.get("data", {})
    if data.get("kind") != "synthetic":
        raise ValueError("this checkpoint was trained on a file: give the fmri input (and "
                         "t1) to start from")
    subject = synthetic_subject(data["seed"] + params.subject, grid, needed,
                                data["regions"])
    affine = synthetic_affine(grid)
    return subject, Source(None, (grid,) * 3, affine, None), data["anatomy"]


def run_generate(ctx: JobContext, params: GenerateParams, inputs: dict) -> dict:
    if "checkpoint" not in inputs:
        raise ValueError("brainworld.generate needs the checkpoint input (from "
                         "brainworld.train)")
    model, cfg = load_checkpoint(inputs["checkpoint"])
    grid, chunk = model.cfg.grid, model.cfg.chunk
    needed = params.start_frame + chunk + params.frames
    subject, source, anatomy_note = _start_subject(cfg, params, inputs, grid, needed)
    if params.start_frame + chunk > len(subject.frames):
        raise ValueError(f"start_frame {params.start_frame}: the run has "
                         f"{len(subject.frames)} frames, and the starting chunk needs "
                         f"{chunk} from there (start_frame <= {len(subject.frames) - chunk})")
    ctx.log(f"rolling out {params.frames} frames from frame {params.start_frame} of "
            f"{subject.name} ({anatomy_note})")
    start = subject.frames[params.start_frame:params.start_frame + chunk]

    def report(k: int, n: int) -> None:
        ctx.progress(k, n, frames=min(k * chunk, params.frames))

    if cfg.get("data", {}).get("volumes") == "patches":
        if params.overlap >= grid:
            raise ValueError(f"overlap {params.overlap} must be smaller than the patch "
                             f"({grid} voxels)")
        generated = rollout_patches(model, start, subject.t1, subject.mask, params.frames,
                                    params.overlap, params.use_smri, params.guidance,
                                    params.sampling_steps, ctx.seed, ctx.check_cancelled,
                                    report)
    else:
        generated = rollout(model, start[None], subject.t1[None], subject.mask,
                            params.frames, params.use_smri, params.guidance,
                            params.sampling_steps, ctx.seed, ctx.check_cancelled, report)[0]
    raw = generated * subject.std + subject.mean
    real_from = params.start_frame + chunk
    real = subject.frames[real_from:real_from + params.frames]
    if len(real) < 2 * chunk:
        real = subject.frames
    outputs = {}
    out_frames = np.stack([frame if frame.shape == source.shape else
                           from_grid(frame, source.shape) for frame in raw], axis=-1)
    name = _derivative_stem(source.path, subject.name)
    outputs["generated"] = ctx.save_file(
        f"{name}.nii.gz", nifti_bytes(out_frames, source.affine, source.header, subject.tr_s),
        start_frame=real_from, source=str(source.path) if source.path else subject.name)
    sidecar = {"Description": "Future fMRI frames generated by BrainWorld (structural-prior-"
                              "conditioned latent diffusion), written back at the source's "
                              "resolution, affine and header.",
               "RepetitionTime": subject.tr_s,
               "Sources": [str(source.path)] if source.path else [],
               "GeneratedBy": [{"Name": "Studio brainworld.generate",
                                "Description": "arXiv 2606.17742",
                                "Checkpoint": str(inputs["checkpoint"])}],
               "BrainWorld": {"StartFrame": params.start_frame, "FirstGeneratedFrame": real_from,
                              "GeneratedFrames": params.frames, "ChunkFrames": chunk,
                              "ModelGrid": grid, "SamplingSteps": params.sampling_steps,
                              "UseSMRI": params.use_smri, "Guidance": params.guidance,
                              "Anatomy": anatomy_note, "Seed": ctx.seed,
                              "TrainingData": cfg.get("data", {})}}
    outputs["sidecar"] = ctx.save_file(f"{name}.json", json.dumps(sidecar, indent=2).encode())
    outputs["dataset_description"] = ctx.save_file(
        "dataset_description.json", json.dumps(_derivative_description(sidecar), indent=2).encode())
    quality, figures = quality_checks(real, generated, subject.mask, subject.mean, subject.std,
                                      subject.tr_s, model.cfg.fc_parcels)
    outputs.update({key: ctx.save_artifact(key, spec) for key, spec in figures.items()})
    outputs["quality"] = quality
    return outputs


BIDS_BOLD_STEM = r"sub-[A-Za-z0-9]+(_[a-z]+-[A-Za-z0-9]+)*_bold"


def _derivative_stem(source: Path | None, name: str) -> str:
    """The generated file's BIDS name: a BIDS source keeps its entities, with
    ``desc-brainworld`` in place of any ``desc`` (``sub-01_task-rest_bold`` ->
    ``sub-01_task-rest_desc-brainworld_bold``), so the derivative matches its raw run;
    other names become ``sub-<label>_desc-brainworld_bold``."""
    import re

    stem = Path(source).name.split(".")[0] if source else ""
    if re.fullmatch(BIDS_BOLD_STEM, stem):
        entities = [e for e in stem.split("_")[:-1] if not e.startswith("desc-")]
        return "_".join([*entities, "desc-brainworld", "bold"])
    return "sub-" + _bids_label(name) + "_desc-brainworld_bold"


def _derivative_description(sidecar: dict) -> dict:
    """``dataset_description.json`` of the run's artifacts folder: BIDS requires it of a
    derivative dataset (``DatasetType``, ``GeneratedBy``)."""
    return {"Name": "BrainWorld generated fMRI", "BIDSVersion": "1.9.0",
            "DatasetType": "derivative", "GeneratedBy": sidecar["GeneratedBy"],
            "SourceDatasets": [{"URL": Path(source).absolute().as_uri()}
                               for source in sidecar["Sources"]]}


def _bids_label(name: str) -> str:
    """The BIDS subject label of a run's file name (``sub-01_task-rest_bold`` -> ``01``), else
    the name's letters and digits."""
    import re

    found = re.search(r"sub-([A-Za-z0-9]+)", name)
    stem = name.split(".")[0]
    return found.group(1) if found else "".join(ch for ch in stem if ch.isalnum()) or "x"


# -- quality checks ----------------------------------------------------------------------------

def tsnr(raw: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Temporal SNR per voxel: mean / std over time (0 outside the mask)."""
    std = raw.std(0)
    return np.where(mask & (std > 0), raw.mean(0) / np.maximum(std, 1e-12), 0.0)


def power_spectrum(z: np.ndarray, mask: np.ndarray, tr_s: float) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """Mean periodogram of the masked voxels' standardised time courses."""
    courses = z[:, mask]
    courses = (courses - courses.mean(0)) / np.maximum(courses.std(0), 1e-6)
    power = np.abs(np.fft.rfft(courses, axis=0)) ** 2 / len(courses)
    return np.fft.rfftfreq(len(courses), tr_s)[1:], power.mean(1)[1:]


def parcel_fc(z: np.ndarray, parcels: int) -> np.ndarray:
    """Pearson FC between block parcels (as the model's FC condition sees them)."""
    x, y, z_edges = (np.linspace(0, n, parcels + 1).round().astype(int) for n in z.shape[1:])
    means = np.stack([z[:, a:b, c:d, e:f].mean((1, 2, 3))
                      for a, b in zip(x[:-1], x[1:], strict=True)
                      for c, d in zip(y[:-1], y[1:], strict=True)
                      for e, f in zip(z_edges[:-1], z_edges[1:], strict=True)], axis=1)
    return correlation(means)


def correlation(courses: np.ndarray) -> np.ndarray:
    centred = courses - courses.mean(0)
    norms = np.linalg.norm(centred, axis=0)
    norms[norms == 0] = np.inf
    unit = centred / norms
    return np.clip(unit.T @ unit, -1, 1)


def upper_correlation(a: np.ndarray, b: np.ndarray) -> float:
    rows, cols = np.triu_indices(len(a), 1)
    x, y = a[rows, cols], b[rows, cols]
    if x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def quality_checks(real_z: np.ndarray, generated_z: np.ndarray, mask: np.ndarray,
                   mean: np.ndarray, std: np.ndarray, tr_s: float, parcels: int
                   ) -> tuple[dict, dict]:
    """Numbers and plot specs comparing a generated run with the real one (same grid)."""
    real, generated = real_z * std + mean, generated_z * std + mean
    maps = {label: tsnr(x, mask) for label, x in (("real", real), ("generated", generated))}
    middle = mask.shape[2] // 2
    figures = {f"tsnr_{label}": heatmap(f"temporal SNR, {label} (axial slice {middle})",
                                        values[:, :, middle].T, xlabel="x voxel",
                                        ylabel="y voxel", zlabel="mean / std")
               for label, values in maps.items()}
    spectra = {label: power_spectrum(x, mask, tr_s) for label, x in (("real", real_z),
                                                                    ("generated", generated_z))}
    figures["power_spectra"] = plot("power spectra of voxel time courses",
                                    [series(label, f, pw) for label, (f, pw) in spectra.items()],
                                    xlabel="frequency (Hz)", ylabel="mean power (z units)",
                                    logy=True)
    fcs = {label: parcel_fc(x, parcels) for label, x in (("real", real_z),
                                                          ("generated", generated_z))}
    similarity = upper_correlation(fcs["real"], fcs["generated"])
    for label, matrix in fcs.items():
        figures[f"fc_{label}"] = heatmap(f"FC of {parcels}^3 parcels, {label}"
                                         + (f" (r with real = {similarity:.2f})"
                                            if label == "generated" else ""),
                                         matrix, xlabel="parcel", ylabel="parcel", zlabel="r",
                                         colormap="CET-D1", symmetric=True)
    inside = maps["real"][mask], maps["generated"][mask]
    quality = {"fc_similarity": similarity,
               "tsnr_real_median": float(np.median(inside[0])),
               "tsnr_generated_median": float(np.median(inside[1])),
               "std_ratio": float(generated[:, mask].std(0).mean()
                                  / max(real[:, mask].std(0).mean(), 1e-12)),
               "finite": bool(np.isfinite(generated).all()),
               "real_frames": len(real_z), "generated_frames": len(generated_z)}
    return quality, figures


# -- reproduce ---------------------------------------------------------------------------------

SEEDS = (0, 1, 2)


class BrainWorldReproduceParams(ReproduceParams):
    rollout_frames: int = Field(400, ge=8, le=2000, description="frames per rollout (spec: 400)")


def reproduce_sizes(smoke: bool) -> dict:
    if smoke:
        return {"grid": 8, "chunk": 4, "patch": 2, "train_subjects": 4, "test_subjects": 2,
                "frames": 24, "ae_steps": 20, "steps": 20, "batch": 8, "sampling_steps": 4,
                "rollout": 16, "width": 32, "depth": 1, "lr": 1e-3}
    return {"grid": 16, "chunk": 8, "patch": 4, "train_subjects": 24, "test_subjects": 4,
            "frames": 160, "ae_steps": 300, "steps": 1500, "batch": 16, "sampling_steps": 100,
            "rollout": None, "width": 64, "depth": 2, "lr": 1e-3}


def region_means(z_or_raw: np.ndarray, labels: np.ndarray) -> np.ndarray:
    regions = int(labels.max())
    return np.stack([z_or_raw[:, labels == r + 1].mean(1) for r in range(regions)], axis=1)


def score_rollouts(model: BrainWorld, subjects: list[Subject], n_frames: int, use_smri: bool,
                   sampling_steps: int, seed: int, check_cancelled
                   ) -> list[tuple[float, float, bool]]:
    """Roll out from each subject's first real chunk; per subject: r(generated FC, true FC)
    over the region means, late-frame std / real std in region voxels, finite."""
    chunk = model.cfg.chunk
    generated = rollout(model, np.stack([s.frames[:chunk] for s in subjects]),
                        np.stack([s.t1 for s in subjects]), subjects[0].mask, n_frames,
                        use_smri=use_smri, sampling_steps=sampling_steps, seed=seed,
                        check_cancelled=check_cancelled)
    scores = []
    for subject, frames in zip(subjects, generated, strict=True):
        raw = frames * subject.std + subject.mean
        late = raw[-min(LATE_FRAMES, len(raw) // 2):][:, subject.labels > 0]
        real = subject.raw[chunk:][:, subject.labels > 0]
        scores.append((upper_correlation(correlation(region_means(raw, subject.labels)),
                                         subject.true_fc),
                       float(late.std(0).mean() / real.std(0).mean()),
                       bool(np.isfinite(frames).all())))
    return scores


def _progress_from(ctx: JobContext, offset: int, total: int):
    def report(stage: str, step: int, _stage_total: int, loss: float) -> None:
        ctx.progress(offset + step, total, loss=loss)

    return report


def run_reproduce(ctx: JobContext, params: BrainWorldReproduceParams, inputs: dict) -> dict:
    from engine.models.brainworld import BrainWorld

    started = time.monotonic()
    size = reproduce_sizes(params.smoke)
    n_rollout = size["rollout"] or params.rollout_frames
    seeds = [ctx.seed] if params.smoke else [ctx.seed + s for s in SEEDS]
    rows, gains, ratios, finite, fc = [], [], [], [], {"with": [], "without": []}
    total, done = 2 * len(seeds), 0
    for seed in seeds:
        base = 1000 * (seed + 1)
        train_set = [synthetic_subject(base + s, size["grid"], size["frames"])
                     for s in range(size["train_subjects"])]
        test_set = [synthetic_subject(base + 500 + s, size["grid"], size["chunk"] + n_rollout)
                    for s in range(size["test_subjects"])]
        per_condition = {}
        shared = dict(grid=size["grid"], chunk=size["chunk"], patch=size["patch"],
                      width=size["width"], depth=size["depth"], ae_steps=size["ae_steps"],
                      steps=size["steps"], batch_size=size["batch"], lr=size["lr"])
        stage1 = TrainParams(**shared, use_smri=False)
        autoencoder = train(stage1.brainworld_config(), train_set, stage1.model_copy(
            update={"steps": 0}), seed, ctx.check_cancelled).model.autoencoder
        for use_smri in (True, False):  # one stage 1 for both: only the denoiser differs
            p = TrainParams(**shared, use_smri=use_smri)
            model = BrainWorld(p.brainworld_config())
            model.autoencoder.load_state_dict(autoencoder.state_dict())
            trained = train(model.cfg, train_set, p, seed, ctx.check_cancelled,
                            _progress_from(ctx, done * size["steps"], total * size["steps"]),
                            model=model, done=(p.ae_steps, 0))
            scores = []
            for subject, (score, ratio, stable) in zip(test_set, score_rollouts(
                    trained.model, test_set, n_rollout, use_smri, size["sampling_steps"], seed,
                    ctx.check_cancelled), strict=True):
                finite.append(stable)
                ratios.append(ratio)
                scores.append(score)
                rows.append([seed, "with sMRI" if use_smri else "without sMRI", subject.name,
                             round(score, 4), round(ratio, 4)])
            per_condition[use_smri] = float(np.mean(scores))
            fc["with" if use_smri else "without"].append(per_condition[use_smri])
            done += 1
            ctx.progress(done * size["steps"], total * size["steps"],
                         fc_corr=per_condition[use_smri])
            ctx.log(f"seed {seed} {'with' if use_smri else 'without'} sMRI: FC r with true "
                    f"{per_condition[use_smri]:.3f}, late std ratios "
                    f"{[round(r, 2) for r in ratios[-len(test_set):]]}, train "
                    f"{trained.wall_s:.0f} s")
        gains.append(per_condition[True] - per_condition[False])
    real_fc = [upper_correlation(correlation(region_means(s.raw, s.labels)), s.true_fc)
               for s in test_set]
    criteria = [
        Criterion(f"{n_rollout}-frame rollouts that stay finite (fraction)",
                  float(np.mean(finite)), 1.0, ">=", paper="stable 4D trajectories up to 400 "
                  "frames"),
        Criterion("late-frame std / real std, smallest over rollouts", float(np.min(ratios)),
                  0.5, ">=", paper="stable to 400 frames (no collapse)",
                  note=f"std over the last {LATE_FRAMES} frames in region voxels"),
        Criterion("late-frame std / real std, largest over rollouts", float(np.max(ratios)),
                  2.0, "<=", paper="stable to 400 frames (no blow-up)"),
        Criterion("FC r(generated, true) with sMRI minus without (mean over seeds)",
                  float(np.mean(gains)), 0.1, ">=",
                  paper="sMRI conditioning improves generation (22 datasets)",
                  note=f"with {np.round(fc['with'], 3).tolist()}, without "
                       f"{np.round(fc['without'], 3).tolist()} per seed; real data's own FC "
                       f"r with the true FC: {np.mean(real_fc):.3f}"),
    ]
    notes = (f"{size['train_subjects']} training and {size['test_subjects']} held-out "
             f"synthetic subjects per seed at {size['grid']}^3 voxels, chunks of "
             f"{size['chunk']} frames, {size['ae_steps']} autoencoder + {size['steps']} "
             f"diffusion steps (batch {size['batch']}, width {size['width']}, depth "
             f"{size['depth']}, AdamW lr {size['lr']:g}; the paper's 2e-4 reached the same "
             f"diffusion loss in a probe), {size['sampling_steps']} sampling steps per chunk; "
             "rollouts start from each held-out subject's first real chunk.")
    table = {"columns": ["seed", "condition", "subject", "FC r with true FC",
                         "late std ratio"], "rows": rows}
    claim = Claim(paper=PAPER, statement=(
        "Conditioning the denoiser on the subject's anatomy (sMRI) makes generated fMRI "
        "follow the subject's own functional connectivity, and rollouts stay stable to 400 "
        "frames."), criteria=criteria, seeds=seeds, wall_s=time.monotonic() - started,
        smoke=params.smoke, notes=notes).to_dict()
    ctx.save_artifact("claim", claim, kind="claim")
    return {"claim": claim, "rollouts": ctx.save_artifact("rollouts", table)}


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="brainworld.train",
        title="BrainWorld: train the fMRI generator (autoencoder + latent diffusion)",
        paper=PAPER,
        params=TrainParams,
        run=run_train,
        panel="fmri",
        inputs={"fmri": "volume", "t1": "volume", "checkpoint": "checkpoint"},
        outputs={"checkpoint": "checkpoint", "loss_plot": "plot", "final": "json"},
        resources=Resources(cpus=1, memory_gb=2),
        description=("Trains BrainWorld on a 4D fMRI run (+ its T1; the MNI152 template "
                     "without one) or on synthetic subjects whose anatomy is known, at a "
                     "grid^3 model resolution. Give a checkpoint to resume."),
    ),
    MethodSpec(
        id="brainworld.generate",
        title="BrainWorld: generate future fMRI frames",
        paper=PAPER,
        params=GenerateParams,
        run=run_generate,
        panel="fmri",
        inputs={"checkpoint": "checkpoint", "fmri": "volume", "t1": "volume"},
        outputs={"generated": "file", "sidecar": "file", "dataset_description": "file",
                 "power_spectra": "plot",
                 "quality": "json"},
        resources=Resources(cpus=1, memory_gb=2),
        description=("Rolls a checkpoint out from any starting chunk, writes a 4D NIfTI with "
                     "the source's affine and header (BIDS derivative + JSON sidecar) and "
                     "compares it with the real run: tSNR maps, power spectra, FC."),
    ),
    reproduce_spec(PAPER, "BrainWorld: sMRI conditioning and 400-frame rollouts",
                   run_reproduce, params=BrainWorldReproduceParams, panel="fmri",
                   resources=Resources(cpus=1, memory_gb=2)),
]
