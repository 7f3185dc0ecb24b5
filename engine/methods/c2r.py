"""C2R: coarse crowd simulations rendered as real-looking video by a learned neural renderer.

A crowd scene (ground, boxes, groups walking to goals, a camera path) is simulated with the
social-force model (``engine.crowd.social_force``, parameters fitted to real ETH/UCY tracks) and
rendered coarsely (flat colours, depth, silhouettes: ray-cast by ``engine.crowd.render``, or
rasterised by open3d's offscreen renderer, ``engine.crowd.render_open3d``). A small
conditional video denoiser (``engine.models.video_denoiser``) turns the coarse control into a
clip in the look of real footage, guided by a MiniLM embedding of a text prompt.

Two-stage domain hedging (the paper's answer to the lack of coarse/real pairs):

1. stage 1 learns an appearance prior on *real* clips, with controls derived from those clips
   automatically (their silhouettes and depth, coarsened at several levels) and the domain
   token REAL;
2. stage 2 adds a small paired set of *synthetic* clips (control from the coarse render, target
   the clean synthetic render, token SYNTHETIC), half of every batch, while real clips keep
   coming; the control path sees the same kind of signal from both domains, so at generation
   the coarse render's control with the token REAL gives real-looking output.

Offline there is no real footage: by default the "real" domain is procedurally textured
(cobblestones, facades with windows, clothes, skin, light tinted by the prompt's time of day,
sensor noise) and its silhouettes and depth come from the renderer rather than from a
segmenter; the "synthetic" domain is flat-shaded. ``c2r.train`` with a ``footage`` input (a
fixed camera's video or frame folder) takes stage 1's real clips from the user's footage
instead, with its controls derived automatically: silhouettes by background subtraction
against the median frame, coarse depth from the ground plane's row position (each person at
the depth of the ground at its feet). ``reproduce`` always uses the textured domain.

Methods: ``c2r.simulate`` (scene or real tracks -> trajectories, coarse clip, statistics vs
real tracks), ``c2r.train`` (the renderer, one or two stages), ``c2r.generate`` (a clip from a
scene's coarse render) and ``c2r.reproduce`` (model A, synthetic pairs only, vs model B, two
stages: silhouette IoU with the control and a held-out real-vs-synthetic classifier).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from engine.api import (
    Claim,
    Criterion,
    MethodParams,
    MethodSpec,
    ReproduceParams,
    Resources,
    reproduce_spec,
)
from engine.crowd import render as R
from engine.crowd import social_force as sf
from engine.crowd import stats
from engine.io.crowd import Scene, Tracks, encode_mp4, read_clip, read_scene, read_tracks
from engine.plots import plot, series

if TYPE_CHECKING:
    from engine.context import JobContext

PAPER = "c2r"
REAL, SYNTHETIC = 0, 1  # as engine.models.video_denoiser
PROMPTS = (  # built-in prompts and the light each gives the textured "real" domain
    ("pedestrians crossing a sunny city square at noon", (1.08, 1.0, 0.9)),
    ("a crowd walking through a plaza at dusk in warm low light", (0.95, 0.72, 0.55)),
    ("people walking across a square on a grey overcast day", (0.78, 0.84, 0.9)),
)
COARSENING_LEVELS = (0, 1, 2)  # silhouettes dilated by k px, depth averaged over 2^k blocks
DISPARITY_M = 3.0  # control depth channel: min(1, DISPARITY_M / depth), 0 for sky
TOY_FPS = 2.5  # toy clips are sampled like ETH/UCY
PROBE_BATCH = 32  # frames per probe step, half real, half synthetic
FOOTAGE_MOVING = 0.1  # a pixel this far (max over RGB, 0-1) from the median frame is a person
FOOTAGE_PROMPT = "real footage of pedestrians walking"
CoarseRenderer = Literal["open3d", "raycast"]
# The ray caster is the default: on CPU-only machines it is 2-9x faster than open3d, whose
# Filament renderer runs on software Vulkan there and has stalled for minutes under load.
RENDERER_HELP = ("coarse render backend: the NumPy ray caster, or open3d's offscreen rasteriser "
                 "(falls back to the ray caster, with a warning, where it cannot start)")
DEMO_SCENE = {
    "ground": {"size": [30, 24]},
    "buildings": [{"center": [-9, 7], "size": [7, 5], "height": 9},
                  {"center": [8, 8], "size": [8, 4], "height": 12}],
    "obstacles": [{"center": [0, 1], "size": [1.5, 1.5], "height": 1}],
    "groups": [{"count": 14, "spawn_center": [-11, -5], "spawn_size": [4, 4], "goal": [11, 2]},
               {"count": 10, "spawn_center": [11, -6], "spawn_size": [4, 3], "goal": [-11, 1],
                "color": [0.25, 0.4, 0.8]}],
    "camera": [{"t_s": 0, "position": [-4, -20, 9], "look_at": [0, 0, 0], "fov_deg": 45},
               {"t_s": 24, "position": [4, -18, 8], "look_at": [0, 1, 0], "fov_deg": 45}],
    "prompt": PROMPTS[0][0],
    "duration_s": 24,
    "fps": 5,
}


# -- prompts ------------------------------------------------------------------------------------

def embed_prompts(texts: list[str], cache: Path | None = None) -> np.ndarray:
    """(len(texts), 384) MiniLM sentence embeddings, cached on disk (the model takes seconds
    to load)."""
    from engine.corpora import embed_texts

    store = cache / "prompts.json" if cache is not None else None
    known: dict[str, list[float]] = {}
    if store is not None and store.is_file():
        known = json.loads(store.read_text())
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        known.update(zip(missing, embed_texts(missing).tolist(), strict=True))
        if store is not None:
            from engine.atomic import write_json_atomic

            write_json_atomic(store, known)
    return np.array([known[t] for t in texts], dtype=np.float32)


def prompt_cache(ctx: JobContext) -> Path:
    return ctx.cache_dir({"c2r": "minilm-prompt-embeddings", "version": 1})


# -- toy crowds in two looks ----------------------------------------------------------------------

@dataclass
class ToyClips:
    real: np.ndarray  # (N, T, H, W, 3) float32 in [0, 1]: textured, lit by the prompt
    synthetic: np.ndarray  # (N, T, H, W, 3) flat-shaded (the coarse render)
    silhouette: np.ndarray  # (N, T, H, W) bool
    disparity: np.ndarray  # (N, T, H, W) float32 in [0, 1]
    prompt: np.ndarray  # (N,) index into PROMPTS

    def __len__(self) -> int:
        return len(self.prompt)


def toy_scene(rng: np.random.Generator, frames: int) -> tuple[Scene, np.ndarray, np.ndarray]:
    """A small square seen from close by: 0-2 buildings behind, 3-6 walkers, a slow pan.
    Returns the scene, positions (T, N, 2) and presence (T, N)."""
    buildings = [{"center": [float(rng.uniform(-7, 7)), float(rng.uniform(6, 9))],
                  "size": [float(rng.uniform(3, 6)), float(rng.uniform(2, 3))],
                  "height": float(rng.uniform(4, 9)),
                  "color": [float(v) for v in rng.uniform(0.45, 0.7, 3)]}
                 for _ in range(int(rng.integers(0, 3)))]
    azimuth, distance = rng.uniform(-0.4, 0.4), rng.uniform(6.5, 8.5)
    height = rng.uniform(2.5, 4.0)
    position = [distance * np.sin(azimuth), -distance * np.cos(azimuth), height]
    pan = rng.uniform(-1, 1, 2)
    scene = Scene.model_validate({
        "ground": {"size": [24, 24]}, "buildings": buildings,
        "camera": [{"t_s": 0, "position": position, "look_at": [0, 0.5, 0.6], "fov_deg": 42},
                   {"t_s": frames / TOY_FPS,
                    "position": [position[0] + pan[0], position[1], position[2]],
                    "look_at": [pan[1], 0.5, 0.6], "fov_deg": 42}],
        "duration_s": frames / TOY_FPS, "fps": TOY_FPS})
    count = int(rng.integers(3, 7))
    starts = np.c_[rng.uniform(-3.5, 3.5, count), rng.uniform(-2.5, 3.0, count)]
    goals = starts + rng.normal(0, 1, (count, 2)) * 4
    sim = sf.simulate(np.stack([starts, goals], 1), rng.uniform(0.9, 1.5, count),
                      sf.SocialForceParams(), 1 / TOY_FPS, frames)
    return scene, sim.positions, sim.alive


def toy_clips(count: int, frames: int, size: int, seed: int,
              check_cancelled: Callable[[], None] = lambda: None) -> ToyClips:
    """``count`` toy clips, each rendered in both looks from the same geometry."""
    rng = np.random.default_rng(seed)
    shape = (count, frames, size, size)
    real, synthetic = np.zeros((*shape, 3), np.float32), np.zeros((*shape, 3), np.float32)
    silhouette, disparity = np.zeros(shape, bool), np.zeros(shape, np.float32)
    prompt = rng.integers(0, len(PROMPTS), count)
    for i in range(count):
        check_cancelled()
        scene, positions, alive = toy_scene(rng, frames)
        colors = R.flat_colors(positions.shape[1], seed=int(rng.integers(1 << 30)))
        tint = np.array(PROMPTS[prompt[i]][1], np.float32)
        for t, frame in enumerate(R.render_clip(scene, positions, alive, colors, size, size)):
            synthetic[i, t] = frame.rgb
            real[i, t] = np.clip(R.textured(frame, colors, int(rng.integers(1 << 30))) * tint,
                                 0, 1)
            silhouette[i, t] = frame.silhouette
            disparity[i, t] = frame_disparity(frame.depth)
    return ToyClips(real, synthetic, silhouette, disparity, prompt)


def frame_disparity(depth: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(depth), np.minimum(1.0, DISPARITY_M / depth), 0.0)


def coarsen(silhouette: np.ndarray, disparity: np.ndarray, level: int) -> np.ndarray:
    """(..., 2, H, W) control in [-1, 1]: silhouettes dilated by ``level`` pixels and depth
    averaged over 2^level blocks (the paper's several coarsening levels)."""
    from scipy.ndimage import maximum_filter

    sil = silhouette.astype(np.float32)
    disp = disparity.astype(np.float32)
    if level > 0:
        window = (1,) * (sil.ndim - 2) + (2 * level + 1, 2 * level + 1)
        sil = maximum_filter(sil, size=window)
        block = 2 ** level
        h, w = disp.shape[-2:]
        blocks = disp.reshape(*disp.shape[:-2], h // block, block, w // block, block)
        disp = np.repeat(np.repeat(blocks.mean((-3, -1)), block, -2), block, -1)
    return np.stack([sil, disp], axis=-3) * 2 - 1


def to_model_frames(rgb: np.ndarray) -> np.ndarray:
    """(..., H, W, 3) in [0, 1] -> (..., 3, H, W) in [-1, 1]."""
    return np.moveaxis(rgb, -1, -3) * 2 - 1


def from_model_frames(x: np.ndarray) -> np.ndarray:
    return np.clip((np.moveaxis(x, -3, -1) + 1) / 2, 0, 1)


# -- the user's footage ---------------------------------------------------------------------------

def square_frames(video: np.ndarray, size: int) -> np.ndarray:
    """(T, size, size, 3) float32 in [0, 1]: the centre square of each frame, area-resampled."""
    from PIL import Image

    height, width = video.shape[1:3]
    side = min(height, width)
    top, left = (height - side) // 2, (width - side) // 2
    crop = video[:, top:top + side, left:left + side]
    return np.stack([np.asarray(Image.fromarray(f).resize((size, size), Image.Resampling.BOX))
                     for f in crop]).astype(np.float32) / 255


def background_silhouettes(frames: np.ndarray) -> np.ndarray:
    """(T, H, W) bool: pixels away from the clip's median frame (a fixed camera's background,
    as people keep moving) by more than ``FOOTAGE_MOVING``."""
    background = np.median(frames, axis=0)
    return np.abs(frames - background).max(-1) > FOOTAGE_MOVING


def ground_disparity(silhouettes: np.ndarray) -> np.ndarray:
    """(T, H, W) coarse disparity in [0, 1] from the ground plane's row position: a camera
    looking down at flat ground sees nearer ground lower in the frame, so the ground's
    disparity grows from the top row (the horizon) to the bottom one, and each person (a
    connected silhouette) takes the disparity of the ground at its feet (its lowest row)."""
    from scipy.ndimage import find_objects, label

    height, width = silhouettes.shape[1:]
    ramp = (np.arange(height, dtype=np.float32) + 0.5) / height
    disparity = np.repeat(np.repeat(ramp[None, :, None], width, 2), len(silhouettes), 0)
    for t, mask in enumerate(silhouettes):
        blobs, _ = label(mask)
        for number, box in enumerate(find_objects(blobs), start=1):
            feet = box[0].stop - 1
            disparity[t][blobs == number] = ramp[feet]
    return disparity


def footage_clips(path: str | Path, frames: int, size: int, prompt: int,
                  check_cancelled: Callable[[], None] = lambda: None) -> ToyClips:
    """Stage 1's real clips from the user's footage (a video or a frame folder, fixed camera):
    overlapping windows of ``frames`` frames, with the controls derived from the footage
    itself (``background_silhouettes``, ``ground_disparity``) and prompt index ``prompt``."""
    video, _ = read_clip(path)
    if len(video) < frames:
        raise ValueError(f"{path}: {len(video)} frame(s); the footage needs at least `frames` "
                         f"({frames})")
    check_cancelled()
    rgb = square_frames(video, size)
    silhouettes = background_silhouettes(rgb)
    disparity = ground_disparity(silhouettes)
    starts = np.arange(0, len(rgb) - frames + 1, max(1, frames // 2))
    windows = starts[:, None] + np.arange(frames)
    real = rgb[windows]
    return ToyClips(real, real, silhouettes[windows], disparity[windows],
                    np.full(len(starts), prompt))


# -- training the renderer ----------------------------------------------------------------------

@dataclass
class Stage:
    name: str
    steps: int
    real_share: float  # the fraction of each batch drawn from real clips


def training_plan(two_stage: bool, steps_stage1: int, steps_stage2: int) -> list[Stage]:
    """Model B: real clips only, then half real, half synthetic pairs. Model A: synthetic pairs
    only, for the same number of steps."""
    if two_stage:
        return [Stage("stage 1: real prior", steps_stage1, 1.0),
                Stage("stage 2: + synthetic pairs", steps_stage2, 0.5)]
    return [Stage("synthetic pairs only", steps_stage1 + steps_stage2, 0.0)]


@dataclass
class Batch:
    clean: np.ndarray  # (B, T, 3, H, W)
    control: np.ndarray  # (B, T, 2, H, W)
    prompt: np.ndarray  # (B,) prompt index
    domain: np.ndarray  # (B,)


def draw_batch(rng: np.random.Generator, real: ToyClips, synthetic: ToyClips, size: int,
               real_share: float) -> Batch:
    """Real clips with controls derived from them, synthetic clips with controls from their
    coarse render; every clip at a random coarsening level."""
    n_real = int(round(size * real_share))
    parts = []
    for clips, n, domain in ((real, n_real, REAL), (synthetic, size - n_real, SYNTHETIC)):
        if n == 0:
            continue
        index = rng.integers(0, len(clips), n)
        level = rng.choice(COARSENING_LEVELS)
        target = clips.real if domain == REAL else clips.synthetic
        parts.append(Batch(to_model_frames(target[index]),
                           coarsen(clips.silhouette[index], clips.disparity[index], level),
                           clips.prompt[index], np.full(n, domain)))
    return Batch(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                   ("clean", "control", "prompt", "domain")))


@dataclass
class TrainedRenderer:
    model: Any
    losses: list[tuple[str, float]]  # (stage name, loss) per step


def train_renderer(real: ToyClips, synthetic: ToyClips, prompt_vectors: np.ndarray, cfg: Any,
                   plan: list[Stage], batch_size: int, lr: float, seed: int,
                   check_cancelled: Callable[[], None],
                   on_step: Callable[[int, int, str, float], None] | None = None
                   ) -> TrainedRenderer:
    import torch

    from engine.models.video_denoiser import VideoDenoiser

    torch.manual_seed(seed)
    model = VideoDenoiser(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed + 1)
    generator = torch.Generator().manual_seed(seed + 2)
    vectors = torch.from_numpy(prompt_vectors)
    total, step, losses = sum(s.steps for s in plan), 0, []
    for stage in plan:
        for _ in range(stage.steps):
            check_cancelled()
            batch = draw_batch(rng, real, synthetic, batch_size, stage.real_share)
            warm = min(1.0, (step + 1) / 50)
            for group in optimizer.param_groups:
                group["lr"] = lr * warm
            loss = model.loss(torch.from_numpy(batch.clean).float(),
                              torch.from_numpy(batch.control).float(),
                              vectors[torch.from_numpy(batch.prompt)],
                              torch.from_numpy(batch.domain), generator)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            losses.append((stage.name, loss.item()))
            if on_step is not None:
                on_step(step, total, stage.name, loss.item())
    return TrainedRenderer(model, losses)


def generate_clips(model: Any, control: np.ndarray, prompt_vectors: np.ndarray, domain: int,
                   sample_steps: int, seed: int, batch: int = 8) -> np.ndarray:
    """(N, T, H, W, 3) in [0, 1] from controls (N, T, 2, H, W) and prompt vectors (N, 384)."""
    import torch

    model.eval()
    generator = torch.Generator().manual_seed(seed)
    out = []
    for start in range(0, len(control), batch):
        c = torch.from_numpy(control[start:start + batch]).float()
        p = torch.from_numpy(prompt_vectors[start:start + batch]).float()
        d = torch.full((len(c),), domain, dtype=torch.long)
        out.append(model.sample(c, p, d, sample_steps, generator).numpy())
    model.train()
    return from_model_frames(np.concatenate(out))


# -- the judges: a person segmenter and a real-vs-synthetic classifier ----------------------------

@dataclass
class Probes:
    segmenter: Any
    classifier: Any


def _blur_some(frames: Any, generator: Any) -> Any:
    """Blur a random half of the frames (so that sharpness alone cannot tell the domains)."""
    import torch
    from torch.nn import functional as F

    kernel = torch.tensor([1.0, 2.0, 1.0])
    kernel = (kernel[:, None] * kernel[None]) / 16
    weight = kernel.expand(3, 1, 3, 3)
    blurred = F.conv2d(F.pad(frames, (1, 1, 1, 1), mode="replicate"), weight, groups=3)
    pick = torch.rand(len(frames), generator=generator) < 0.5
    return torch.where(pick[:, None, None, None], blurred, frames)


def train_probes(clips: ToyClips, steps: int, seed: int, check_cancelled: Callable[[], None]
                 ) -> Probes:
    """Both probes on held-out clips (never seen by a renderer), frames of both looks."""
    import torch
    from torch.nn import functional as F

    from engine.models.video_denoiser import DomainClassifier, FrameSegmenter

    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    real = torch.from_numpy(to_model_frames(clips.real.reshape(-1, *clips.real.shape[2:])))
    synthetic = torch.from_numpy(to_model_frames(
        clips.synthetic.reshape(-1, *clips.synthetic.shape[2:])))
    masks = torch.from_numpy(clips.silhouette.reshape(-1, *clips.silhouette.shape[2:])).float()
    segmenter, classifier = FrameSegmenter(), DomainClassifier()
    optimizer = torch.optim.Adam([*segmenter.parameters(), *classifier.parameters()], lr=3e-3)
    half = PROBE_BATCH // 2
    for _ in range(steps):
        check_cancelled()
        index = torch.randint(0, len(real), (half,), generator=generator)
        frames = _blur_some(torch.cat([real[index], synthetic[index]]).float(), generator)
        target = torch.cat([masks[index], masks[index]])
        is_real = torch.cat([torch.ones(half), torch.zeros(half)])
        loss = F.binary_cross_entropy_with_logits(segmenter(frames), target)
        loss = loss + F.binary_cross_entropy_with_logits(classifier(frames), is_real)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    segmenter.eval()
    classifier.eval()
    return Probes(segmenter, classifier)


@dataclass
class Judgement:
    silhouette_iou: float  # pooled over all frames: sum of intersections / sum of unions
    called_real: float  # fraction of frames the classifier calls real


def judge(probes: Probes, clips: np.ndarray, silhouettes: np.ndarray) -> Judgement:
    import torch

    frames = torch.from_numpy(to_model_frames(clips.reshape(-1, *clips.shape[2:]))).float()
    truth = silhouettes.reshape(-1, *silhouettes.shape[2:])
    with torch.no_grad():
        person = (probes.segmenter(frames) > 0).numpy()
        real = (probes.classifier(frames) > 0).numpy()
    union = (person | truth).sum()
    return Judgement(float((person & truth).sum() / max(union, 1)), float(real.mean()))


# -- c2r.simulate -------------------------------------------------------------------------------

class SimulateParams(MethodParams):
    """Simulate a scene (or re-simulate real tracks) and render it coarsely."""

    fit: bool = Field(True, description="fit the social-force parameters to the real tracks "
                      "(the 'tracks' input, else the shared ETH/UCY zara1 file when present)")
    width: int = Field(160, ge=16, le=640, description="coarse render width, pixels")
    height: int = Field(120, ge=16, le=480, description="coarse render height, pixels")
    max_frames: int = Field(60, ge=1, le=2000, description="frames rendered (the simulation "
                            "runs the whole scene)")
    fit_iterations: int = Field(80, ge=1, le=1000, description="Nelder-Mead iterations")
    renderer: CoarseRenderer = Field("raycast", description=RENDERER_HELP)


def coarse_renderer(name: CoarseRenderer, width: int, height: int, log: Callable[[str], None]
                    ) -> tuple[str, Callable[[R.Camera, R.Geometry], R.Frame]]:
    """(backend used, render function) for the coarse look: open3d's rasteriser, or the ray
    caster when asked or when open3d cannot start (no Vulkan/EGL device, not installed)."""
    if name == "raycast":
        return "raycast", R.render
    from engine.crowd import render_open3d

    try:
        render_open3d.renderer(width, height)  # starts it, or says why it cannot
        return "open3d", render_open3d.render
    except render_open3d.Open3DUnavailable as error:
        log(f"warning: open3d's offscreen renderer cannot start ({error}); the coarse render "
            "falls back to the ray caster")
        return "raycast", R.render


def coarse_clip(render: Callable[[R.Camera, R.Geometry], R.Frame], scene: Scene,
                positions: np.ndarray, alive: np.ndarray, colors: np.ndarray, width: int,
                height: int, frames: int, check_cancelled: Callable[[], None]) -> list[R.Frame]:
    """The first ``frames`` frames of the simulation along the scene's camera path."""
    out = []
    for t in range(min(frames, len(positions))):
        check_cancelled()
        camera = R.camera_at(scene.camera, t / scene.fps, width, height)
        out.append(render(camera, R.scene_geometry(scene, positions[t], colors, alive[t])))
    return out


def shared_tracks_path() -> Path | None:
    path = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "crowd"
            / "zara1_crowds_zara01.txt")
    return path if path.is_file() else None


def run_simulate(ctx: JobContext, params: SimulateParams, inputs: dict) -> dict:
    """Scene -> social force -> trajectories, coarse clip (RGB, depth, silhouettes) and speed /
    density statistics next to the real tracks'."""
    scene = read_scene(inputs["scene"]) if inputs.get("scene") else Scene.model_validate(
        DEMO_SCENE)
    tracks_path = inputs.get("tracks") or (shared_tracks_path() if params.fit else None)
    tracks = read_tracks(tracks_path) if tracks_path else None
    if tracks is not None and tracks.units != "m":
        raise ValueError(f"{tracks_path}: the tracks are in {tracks.units}; fitting needs "
                         "metres (ETH/UCY or a CSV in metres)")
    outputs: dict[str, Any] = {}
    sim_params, rows = sf.scene_params(scene), []
    if tracks is not None:
        ctx.log(f"fitting the social force to {tracks_path} ({len(tracks.ids)} tracks)")
        real_stats = stats.tracks_stats(tracks)
        real_speeds = stats.track_speeds(tracks)
        rows.append(["real tracks", *_stat_row(real_stats), 0.0])
        fit = sf.fit_to_tracks([tracks], seed=ctx.seed, iterations=params.fit_iterations,
                               check_cancelled=ctx.check_cancelled)
        curves = [series("real", *_histogram(real_speeds))]
        for name, p in (("replay, default parameters", sf.SocialForceParams()),
                        ("replay, fitted parameters", fit.params)):
            replayed = sf.replay(tracks, p, ctx.seed, ctx.check_cancelled)
            speeds = stats.simulation_speeds(replayed)
            rows.append([name, *_stat_row(stats.simulation_stats(replayed)),
                         stats.speed_gap(real_speeds, speeds)])
            curves.append(series(name, *_histogram(speeds)))
        outputs["speed_histogram"] = ctx.save_artifact("speed_histogram", plot(
            "walking speeds: real vs replayed", curves, xlabel="speed (m/s)", ylabel="density"))
        outputs["fitted_parameters"] = ctx.save_artifact("fitted_parameters", {
            **fit.params.to_dict(), "one_step_error_default": fit.loss_default,
            "one_step_error_fitted": fit.loss_fitted, "samples": fit.samples,
            "tracks": str(tracks_path)})
        if params.fit:
            sim_params = fit.params
    ctx.progress(1, 3)
    sim, groups = sf.simulate_scene(scene, sim_params, ctx.seed, ctx.check_cancelled)
    rows.append(["this scene", *_stat_row(stats.simulation_stats(sim)), float("nan")])
    outputs["statistics"] = ctx.save_artifact("statistics", {"columns": [
        "crowd", "mean speed m/s", "speed sd", "p10", "p50", "p90", "people per frame",
        "local density /m2", "nearest neighbour m", "speed gap to real (W1, m/s)"],
        "rows": rows})
    from engine.io.crowd import tracks_from_array

    trajectories = tracks_from_array(sim.positions, scene.fps, alive=sim.alive)
    outputs["trajectories"] = ctx.save_file("trajectories.csv", trajectories.to_csv().encode())
    ctx.progress(2, 3)
    colors = np.array([scene.groups[g].color for g in groups]).reshape(-1, 3)
    colors = np.clip(colors + np.random.default_rng(ctx.seed).uniform(-0.12, 0.12, colors.shape),
                     0, 1)
    backend, render = coarse_renderer(params.renderer, params.width, params.height, ctx.log)
    frames = coarse_clip(render, scene, sim.positions, sim.alive, colors, params.width,
                         params.height, min(params.max_frames, scene.frames), ctx.check_cancelled)
    rgb = np.stack([R.to_uint8(f.rgb) for f in frames])
    outputs["coarse_video"] = ctx.save_file("coarse.mp4", encode_mp4(rgb, scene.fps))
    outputs["coarse_rgb"] = ctx.save_artifact("coarse_rgb", rgb)
    outputs["coarse_depth"] = ctx.save_artifact("coarse_depth", np.stack([f.depth
                                                                         for f in frames]))
    outputs["coarse_person_ids"] = ctx.save_artifact(
        "coarse_person_ids", np.stack([f.person for f in frames]).astype(np.int16))
    outputs["positions"] = ctx.save_artifact("positions", sim.positions)
    outputs["summary"] = {"agents": int(len(groups)), "frames": int(scene.frames),
                          "rendered": len(frames), "arrived": float(sim.arrived.mean()),
                          "fitted": bool(params.fit and tracks is not None),
                          "renderer": backend}
    ctx.progress(3, 3)
    return outputs


def _stat_row(s: stats.CrowdStats) -> list[float]:
    return [s.speed_mean_mps, s.speed_std_mps, s.speed_p10_mps, s.speed_p50_mps,
            s.speed_p90_mps, s.people_per_frame, s.local_density_per_m2, s.nearest_neighbour_m]


def _histogram(speeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    counts, edges = np.histogram(speeds[speeds > stats.MOVING_MPS], bins=30, range=(0, 3),
                                 density=True)
    return (edges[:-1] + edges[1:]) / 2, counts


# -- c2r.train ----------------------------------------------------------------------------------

class TrainParams(MethodParams):
    """Train the neural renderer on toy crowds (textured "real" and flat "synthetic")."""

    two_stage: bool = Field(True, description="domain hedging: a real-clip prior first, then "
                            "synthetic pairs mixed in; off = synthetic pairs only (model A)")
    steps_stage1: int = Field(600, ge=0, le=100_000, description="stage-1 steps (real clips; "
                              "without two_stage they become synthetic steps)")
    steps_stage2: int = Field(600, ge=1, le=100_000, description="stage-2 steps")
    real_clips: int = Field(192, ge=2, le=20_000, description="textured 'real' toy clips")
    synthetic_clips: int = Field(48, ge=2, le=20_000, description="paired synthetic clips (the "
                                 "small set)")
    image_size: int = Field(32, ge=16, le=64, description="frame side, pixels (multiple of 4)")
    frames: int = Field(4, ge=2, le=8, description="frames per clip")
    channels: int = Field(32, ge=8, le=128, description="U-Net width (multiple of 8)")
    batch_size: int = Field(8, ge=2, le=64, description="clips per step")
    lr: float = Field(2e-3, gt=0, le=0.1, description="AdamW learning rate")
    sample_steps: int = Field(16, ge=1, le=200, description="DDIM steps for the previews")
    footage_prompt: str = Field(FOOTAGE_PROMPT, min_length=1, max_length=300,
                                description="what the supplied footage shows (its prompt in "
                                "training); used only with a footage input")

    @model_validator(mode="after")
    def _shapes(self) -> TrainParams:
        if self.image_size % 4:
            raise ValueError(f"image_size {self.image_size} must be a multiple of 4")
        if self.channels % 8:
            raise ValueError(f"channels {self.channels} must be a multiple of 8")
        return self


def model_config(p: TrainParams) -> Any:
    from engine.models.video_denoiser import VideoDenoiserConfig

    return VideoDenoiserConfig(image_size=p.image_size, frames=p.frames, channels=p.channels)


def run_train(ctx: JobContext, params: TrainParams, inputs: dict) -> dict:
    """Stage 1 learns the real look from the user's footage when there is a ``footage``
    input (controls derived from it), else from the textured toy clips."""
    footage = inputs.get("footage")
    if footage and not params.two_stage:
        raise ValueError("footage: given, but two_stage is off (synthetic pairs only), so the "
                         "footage would not be used")
    prompts = [p for p, _ in PROMPTS] + ([params.footage_prompt] if footage else [])
    if footage:
        ctx.log(f"deriving silhouettes and coarse depth from {footage}")
        real = footage_clips(footage, params.frames, params.image_size, len(PROMPTS),
                             ctx.check_cancelled)
    else:
        ctx.log("rendering toy crowds in both looks")
        real = toy_clips(params.real_clips, params.frames, params.image_size, ctx.seed,
                         ctx.check_cancelled)
    synthetic = toy_clips(params.synthetic_clips, params.frames, params.image_size,
                          ctx.seed + 1, ctx.check_cancelled)
    held_out = toy_clips(4, params.frames, params.image_size, ctx.seed + 2, ctx.check_cancelled)
    vectors = embed_prompts(prompts, prompt_cache(ctx))
    plan = training_plan(params.two_stage, params.steps_stage1, params.steps_stage2)
    every = max(1, sum(s.steps for s in plan) // 200)

    def on_step(step: int, total: int, stage: str, loss: float) -> None:
        if step % every == 0 or step == total:
            ctx.progress(step, total, loss=loss)

    trained = train_renderer(real, synthetic, vectors, model_config(params), plan,
                             params.batch_size, params.lr, ctx.seed, ctx.check_cancelled,
                             on_step)
    domain = REAL if params.two_stage else SYNTHETIC
    control = coarsen(held_out.silhouette, held_out.disparity, 0)
    generated = generate_clips(trained.model, control, vectors[held_out.prompt], domain,
                               params.sample_steps, ctx.seed)
    outputs = save_training(ctx, trained, params, held_out, generated)
    if footage:
        outputs["footage_controls"] = ctx.save_artifact("footage_controls", np.concatenate(
            [real.silhouette[0], real.disparity[0]], axis=-1).astype(np.float32))
        outputs["footage"] = {"path": str(footage), "clips": len(real),
                              "moving_share": float(real.silhouette.mean())}
    outputs["checkpoint"] = ctx.save_checkpoint("renderer", trained.model, cfg={
        **trained.model.cfg.to_dict(), "params": params.model_dump(), "domain": domain,
        "prompts": prompts, "seed": ctx.seed})
    return outputs


def save_training(ctx: JobContext, trained: TrainedRenderer, params: TrainParams,
                  held_out: ToyClips, generated: np.ndarray) -> dict:
    curves = []
    for stage in dict.fromkeys(name for name, _ in trained.losses):
        steps = [i + 1 for i, (name, _) in enumerate(trained.losses) if name == stage]
        curves.append(smoothed_series(stage, steps, [trained.losses[i - 1][1] for i in steps]))
    sheet = side_by_side(held_out.synthetic, generated, held_out.real)
    return {
        "loss": ctx.save_artifact("loss", plot("denoising loss (x0 MSE, smoothed)", curves,
                                               xlabel="step", ylabel="MSE", logy=True)),
        "previews": ctx.save_artifact("previews", R.to_uint8(sheet)),
        "preview_video": ctx.save_file("previews.mp4", encode_mp4(
            R.to_uint8(np.concatenate(list(sheet), axis=1)), TOY_FPS)),
        "final_loss": float(np.mean([v for _, v in trained.losses[-20:]])),
    }


def smoothed_series(name: str, steps: list[int], values: list[float], window: int = 20
                    ) -> dict:
    """A loss curve as a running mean over ``window`` steps (x = each window's last step)."""
    window = max(1, min(window, len(values)))
    kernel = np.ones(window) / window
    return series(name, steps[window - 1:], np.convolve(values, kernel, mode="valid"))


def side_by_side(*clips: np.ndarray) -> np.ndarray:
    """(N, T, H, k*W, 3): the clips next to each other, a column per source."""
    return np.concatenate(clips, axis=3)


# -- c2r.generate -------------------------------------------------------------------------------

class GenerateParams(MethodParams):
    """Render a scene coarsely and turn it into a clip with a trained renderer."""

    prompt: str = Field("", description="text prompt (empty: the scene's, else the first "
                        "built-in one)")
    domain: Literal["real", "synthetic"] = Field("real", description="the look to generate")
    max_frames: int = Field(24, ge=1, le=1000, description="frames generated")
    start_frame: int = Field(0, ge=0, le=100_000, description="first frame generated (the "
                             "previewer regenerates a frame range)")
    sample_steps: int = Field(20, ge=1, le=200, description="DDIM steps")
    renderer: CoarseRenderer = Field("raycast", description=RENDERER_HELP)


def load_renderer(folder: str | Path) -> tuple[Any, dict]:
    from safetensors.torch import load_file

    from engine.models.video_denoiser import VideoDenoiser, VideoDenoiserConfig

    path = Path(folder)
    if not (path / "cfg.json").is_file() or not (path / "model.safetensors").is_file():
        raise ValueError(f"{path}: not a c2r renderer checkpoint (needs cfg.json and "
                         "model.safetensors)")
    cfg = json.loads((path / "cfg.json").read_text())
    fields = VideoDenoiserConfig.__dataclass_fields__
    model = VideoDenoiser(VideoDenoiserConfig(**{k: v for k, v in cfg.items() if k in fields}))
    model.load_state_dict(load_file(str(path / "model.safetensors")))
    return model, cfg


def tracks_to_arrays(tracks: Tracks) -> tuple[np.ndarray, np.ndarray]:
    """(T, N, 2) positions and (T, N) presence from tracks (row = the t-th frame id)."""
    frames, peds = tracks.frames, tracks.ids
    rows, cols = np.searchsorted(frames, tracks.frame), np.searchsorted(peds, tracks.ped)
    positions = np.zeros((len(frames), len(peds), 2))
    alive = np.zeros((len(frames), len(peds)), bool)
    positions[rows, cols], alive[rows, cols] = tracks.xy, True
    return positions, alive


def run_generate(ctx: JobContext, params: GenerateParams, inputs: dict) -> dict:
    if not inputs.get("checkpoint"):
        raise ValueError("c2r.generate needs a 'checkpoint' input (a c2r.train checkpoint)")
    model, cfg = load_renderer(inputs["checkpoint"])
    scene = read_scene(inputs["scene"]) if inputs.get("scene") else Scene.model_validate(
        DEMO_SCENE)
    prompt = params.prompt or scene.prompt or PROMPTS[0][0]
    if inputs.get("tracks"):  # the previewer's edited paths, walked as they are
        positions, alive = tracks_to_arrays(read_tracks(inputs["tracks"]))
    else:
        sim, _ = sf.simulate_scene(scene, sf.scene_params(scene), ctx.seed,
                                   ctx.check_cancelled)
        positions, alive = sim.positions, sim.alive
    size, window = cfg["image_size"], cfg["frames"]
    first = min(params.start_frame, len(positions) - 1)
    count = min(params.max_frames, len(positions) - first)
    count = max(window, count - count % window)
    colors = R.flat_colors(positions.shape[1], ctx.seed)
    backend, render = coarse_renderer(params.renderer, size, size, ctx.log)
    coarse = coarse_clip(render, scene, positions, alive, colors, size, size, first + count,
                         ctx.check_cancelled)[first:]
    while len(coarse) < count:  # a scene shorter than one window: hold its last frame
        coarse.append(coarse[-1])
    silhouette = np.stack([f.silhouette for f in coarse])
    control = coarsen(silhouette, np.stack([frame_disparity(f.depth) for f in coarse]), 0)
    control = control.reshape(-1, window, *control.shape[1:])
    vector = embed_prompts([prompt], prompt_cache(ctx))
    domain = REAL if params.domain == "real" else SYNTHETIC
    generated = []
    for start in range(len(control)):
        ctx.check_cancelled()
        generated.append(generate_clips(model, control[start:start + 1], vector, domain,
                                        params.sample_steps, ctx.seed + start)[0])
        ctx.progress(start + 1, len(control))
    frames = R.to_uint8(np.concatenate(generated))
    flat = R.to_uint8(np.stack([f.rgb for f in coarse]))
    return {
        "video": ctx.save_file("generated.mp4", encode_mp4(frames, scene.fps)),
        "coarse_video": ctx.save_file("coarse.mp4", encode_mp4(flat, scene.fps)),
        "frames": ctx.save_artifact("generated_frames", frames),
        "coarse_frames": ctx.save_artifact("coarse_frames", flat),
        "silhouettes": ctx.save_artifact("silhouettes", silhouette),
        "summary": {"prompt": prompt, "domain": params.domain, "frames": len(frames),
                    "start_frame": first, "renderer": backend,
                    "windows": len(control), "note": "frames are generated in independent "
                    f"windows of {window}; consistency holds within a window"},
    }


# -- c2r.reproduce ------------------------------------------------------------------------------

class C2RReproduceParams(ReproduceParams):
    steps_per_stage: int = Field(400, ge=1, le=50_000, description="renderer steps per stage "
                                 "(model A trains twice as many on synthetic pairs)")


@dataclass(frozen=True)
class ReproduceSizes:
    real_clips: int
    synthetic_clips: int
    probe_clips: int
    eval_clips: int
    image_size: int
    frames: int
    channels: int
    probe_steps: int
    sample_steps: int


def reproduce_sizes(smoke: bool) -> ReproduceSizes:
    if smoke:
        return ReproduceSizes(8, 4, 8, 4, 16, 2, 8, 10, 2)
    return ReproduceSizes(256, 48, 96, 32, 32, 4, 32, 400, 16)


def run_reproduce(ctx: JobContext, params: C2RReproduceParams, inputs: dict) -> dict:
    started = time.monotonic()
    size = reproduce_sizes(params.smoke)
    steps = 3 if params.smoke else params.steps_per_stage
    seed = ctx.seed
    ctx.log("rendering toy crowds: real prior, synthetic pairs, probes' and evaluation sets")
    real = toy_clips(size.real_clips, size.frames, size.image_size, seed, ctx.check_cancelled)
    synthetic = toy_clips(size.synthetic_clips, size.frames, size.image_size, seed + 1,
                          ctx.check_cancelled)
    probe_clips = toy_clips(size.probe_clips, size.frames, size.image_size, seed + 2,
                            ctx.check_cancelled)
    evaluation = toy_clips(size.eval_clips, size.frames, size.image_size, seed + 3,
                           ctx.check_cancelled)
    vectors = embed_prompts([p for p, _ in PROMPTS], prompt_cache(ctx))
    probes = train_probes(probe_clips, size.probe_steps, seed, ctx.check_cancelled)
    reference = {"real footage": judge(probes, evaluation.real, evaluation.silhouette),
                 "flat render": judge(probes, evaluation.synthetic, evaluation.silhouette)}
    for source, verdict in reference.items():
        ctx.log(f"probes on true {source}: IoU {verdict.silhouette_iou:.3f}, called real "
                f"{verdict.called_real:.0%}")
    from engine.models.video_denoiser import VideoDenoiserConfig

    cfg = VideoDenoiserConfig(image_size=size.image_size, frames=size.frames,
                              channels=size.channels)
    total = 4 * steps
    done = {"steps": 0}
    results, losses, samples = {}, {}, {}
    control = coarsen(evaluation.silhouette, evaluation.disparity, 0)
    for name, two_stage, domain in (("A", False, SYNTHETIC), ("B", True, REAL)):
        offset = done["steps"]

        def on_step(step: int, _total: int, stage: str, loss: float, offset=offset, name=name):
            done["steps"] = offset + step
            if step % 10 == 0:
                ctx.progress(offset + step, total, **{f"loss_{name}": loss})

        trained = train_renderer(real, synthetic, vectors, cfg,
                                 training_plan(two_stage, steps, steps), 8, 2e-3, seed,
                                 ctx.check_cancelled, on_step)
        generated = generate_clips(trained.model, control, vectors[evaluation.prompt], domain,
                                   size.sample_steps, seed + 5)
        results[name] = judge(probes, generated, evaluation.silhouette)
        losses[name] = trained.losses
        samples[name] = generated
        ctx.log(f"model {name}: silhouette IoU {results[name].silhouette_iou:.3f}, called real "
                f"{results[name].called_real:.0%}")
    a, b = results["A"], results["B"]
    criteria = [
        Criterion("model A (synthetic pairs only): silhouette IoU with the control",
                  a.silhouette_iou, 0.7, ">=", paper="both models follow the coarse control "
                  "(IoU >= 0.7)"),
        Criterion("model B (two-stage): silhouette IoU with the control", b.silhouette_iou,
                  0.7, ">=", paper="both models follow the coarse control (IoU >= 0.7)"),
        Criterion("held-out classifier calls model B's frames real", b.called_real, 0.7, ">=",
                  paper="B's outputs look real >= 70% of the time"),
        Criterion("held-out classifier calls model A's frames real", a.called_real, 0.3, "<=",
                  paper="A's outputs look real <= 30% of the time"),
    ]
    outputs = save_reproduction(ctx, losses, samples, evaluation, reference)
    notes = (
        f"Toy crowds: {size.real_clips} textured 'real' clips (procedural textures; offline "
        f"there is no real footage), {size.synthetic_clips} paired flat-shaded synthetic clips, "
        f"{size.frames} frames of {size.image_size}x{size.image_size}, 3-6 walkers simulated "
        "by the social force. Control = silhouettes + disparity (coarsened at levels 0-2 in "
        "training, level 0 to evaluate), derived from the renderer in both domains. Model A: "
        f"{2 * steps} steps on synthetic pairs; model B: {steps} steps on real clips, then "
        f"{steps} steps half real, half synthetic; both a {size.channels}-wide U-Net with "
        f"temporal attention, batch 8, sampled with {size.sample_steps} DDIM steps, evaluated "
        f"on {size.eval_clips} new scenes' coarse renders (B with the REAL token). Probes "
        f"(trained on {size.probe_clips} other clips, half the frames blurred): a person "
        "segmenter for the pooled IoU and a real-vs-synthetic classifier. On the true frames "
        "the probes score: " + "; ".join(
            f"{k}: IoU {v.silhouette_iou:.3f}, called real {v.called_real:.0%}"
            for k, v in reference.items()) + ". Design changes made after seeing results: "
        "(a) the control is also stacked with the noisy frames at the input, after a 150-step "
        "trial gave IoU 0.42 (A) and 0.56 (B) with the control branch alone; (b) the "
        "segmenter probe lost its positive-class weight and gained a dilation-4 layer, after "
        "the first full run showed it scoring only 0.73 IoU on the true real frames (A 0.61 "
        "then).")
    claim = Claim(paper=PAPER, statement=(
        "Two-stage domain hedging (real prior, then a few synthetic pairs) keeps the coarse "
        "control and gives real-looking output, where training on synthetic pairs alone "
        "follows the control but looks synthetic."),
        criteria=criteria, seeds=[seed], wall_s=time.monotonic() - started,
        smoke=params.smoke, notes=notes)
    claim_dict = claim.to_dict()
    ctx.save_artifact("claim", claim_dict, kind="claim")
    return {"claim": claim_dict, **outputs}


def save_reproduction(ctx: JobContext, losses: dict[str, list[tuple[str, float]]],
                      samples: dict[str, np.ndarray], evaluation: ToyClips,
                      reference: dict[str, Judgement]) -> dict:
    curves = [smoothed_series(f"model {name}", list(range(1, len(v) + 1)), [x for _, x in v])
              for name, v in losses.items()]
    shown = slice(0, 4)
    sheet = side_by_side(evaluation.synthetic[shown], samples["A"][shown],
                         samples["B"][shown], evaluation.real[shown])
    return {
        "loss": ctx.save_artifact("loss", plot("denoising loss (smoothed)", curves,
                                               xlabel="step", ylabel="x0 MSE", logy=True)),
        "samples": ctx.save_artifact("samples_coarse_A_B_real", R.to_uint8(sheet)),
        "sample_video": ctx.save_file("samples_coarse_A_B_real.mp4", encode_mp4(
            R.to_uint8(np.concatenate(list(sheet), axis=1)), TOY_FPS)),
        "probe_reference": {k: {"silhouette_iou": v.silhouette_iou,
                                "called_real": v.called_real} for k, v in reference.items()},
    }


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="c2r.simulate", title="Crowd simulation and coarse render", paper=PAPER,
        params=SimulateParams, run=run_simulate, panel="crowd",
        inputs={"scene": "scene", "tracks": "trajectories"},
        outputs={"trajectories": "file", "coarse_video": "file", "coarse_rgb": "array",
                 "coarse_depth": "array", "coarse_person_ids": "array", "statistics": "table",
                 "speed_histogram": "plot", "fitted_parameters": "json"},
        resources=Resources(cpus=1, memory_gb=1),
        description=("Simulates a crowd scene (JSON; a demo scene without one) with the social "
                     "force fitted to real ETH/UCY tracks, renders it coarsely along the camera "
                     "path (RGB, depth, silhouettes) and compares speed and density statistics "
                     "with the real tracks.")),
    MethodSpec(
        id="c2r.train", title="C2R neural renderer (two-stage domain hedging)", paper=PAPER,
        params=TrainParams, run=run_train, panel="crowd", inputs={"footage": "video"},
        outputs={"loss": "plot", "previews": "array", "preview_video": "file",
                 "footage_controls": "array", "checkpoint": "checkpoint"},
        resources=Resources(cpus=1, memory_gb=2),
        description=("Trains a small conditional video denoiser (U-Net with temporal "
                     "attention, control branch, MiniLM prompt): a prior on real clips with "
                     "controls derived from them (your footage, a fixed camera's video or frame "
                     "folder: silhouettes by background subtraction, depth from the ground "
                     "row; without footage, procedurally textured toy clips), then a few "
                     "paired synthetic clips.")),
    MethodSpec(
        id="c2r.generate", title="Coarse render to real-style clip", paper=PAPER,
        params=GenerateParams, run=run_generate, panel="crowd",
        inputs={"checkpoint": "checkpoint", "scene": "scene", "tracks": "trajectories"},
        outputs={"video": "file", "coarse_video": "file", "frames": "array"},
        resources=Resources(cpus=1, memory_gb=1),
        description="Simulates and coarsely renders a scene, then generates its clip (MP4)."),
    reproduce_spec(PAPER, "C2R: domain hedging vs synthetic-only training", run_reproduce,
                   params=C2RReproduceParams, panel="crowd",
                   resources=Resources(cpus=1, memory_gb=2)),
]

