"""A vectorised social-force crowd simulation (Helbing & Molnar 1995), fitted to real tracks.

Each pedestrian i relaxes towards its desired velocity ``v0_i e_i`` (e_i points at its next
waypoint) within ``relaxation_s``, and is pushed away from every other pedestrian j by
``A exp((2r - d_ij) / B)`` along the line between them (weaker from behind: ``anisotropy``) and
from the nearest point of every box obstacle by ``A_w exp((r - d_iw) / B_w)``. All pairs are one
NumPy expression per step, so 500 agents run at a few milliseconds a step.

``fit_to_tracks`` estimates the desired-speed distribution from real tracks and fits the
relaxation time and the repulsion (A, B) by one-step-ahead velocity prediction on them;
``replay`` re-simulates a real recording (same entry times, start and end points) so that its
speed and density statistics can be compared with the recording's (``engine.crowd.stats``).
A scene carries the parameters it is walked with (``Scene.social_force``, ``scene_params``), so
a saved scene simulates the same way in the editor and in ``c2r``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from engine.crowd.params import SocialForceParams, scene_params  # noqa: F401 (callers use sf.)
from engine.io.crowd import Scene, Tracks, read_tracks

ARRIVE_M = 0.5  # the goal counts as reached within this distance
PASS_M = 1.5  # an intermediate waypoint within this one (crowds cannot all touch it)
SPAWN_TRIES = 20
MAX_SUBSTEP_S = 0.1  # explicit Euler stays stable with the default repulsion
SHARED_RECORDINGS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "crowd"


@dataclass
class Simulation:
    positions: np.ndarray  # (T, N, 2) metres
    velocities: np.ndarray  # (T, N, 2) m/s
    alive: np.ndarray  # (T, N) bool: in the scene at that frame
    arrived: np.ndarray  # (N,) bool: reached its goal
    dt_s: float


def sample_desired_speeds(params: SocialForceParams, count: int, rng: np.random.Generator,
                          mean_mps: float | None = None) -> np.ndarray:
    mean = params.desired_speed_mps if mean_mps is None else mean_mps
    speeds = rng.normal(mean, params.desired_speed_std_mps, count)
    return np.clip(speeds, 0.3 * mean, 2.0 * mean)


def box_array(boxes) -> np.ndarray:
    """(K, 4) x0, y0, x1, y1 from ``engine.io.crowd.Box`` objects (or an empty array)."""
    return np.array([b.bounds() for b in boxes], dtype=np.float64).reshape(-1, 4)


def agent_forces(positions: np.ndarray, velocities: np.ndarray, params: SocialForceParams
                 ) -> np.ndarray:
    """(N, 2) repulsion of each pedestrian by all the others (pass only those present).

    x and y are separate (N, N) float32 arrays: half the memory traffic of (N, N, 2)."""
    x, y = positions[:, 0].astype(np.float32), positions[:, 1].astype(np.float32)
    dx, dy = x[:, None] - x[None, :], y[:, None] - y[None, :]  # i minus j
    dist = np.sqrt(dx * dx + dy * dy) + np.float32(1e-6)
    magnitude = np.float32(params.agent_strength) * np.exp(
        (np.float32(2 * params.radius_m) - dist) / np.float32(params.agent_range_m))
    np.fill_diagonal(magnitude, 0.0)
    speed = np.linalg.norm(velocities, axis=1, keepdims=True)
    heading = (velocities / np.maximum(speed, 1e-6)).astype(np.float32)
    cos_phi = -(dx * heading[:, :1] + dy * heading[:, 1:]) / dist  # 1 when j is straight ahead
    lam = np.float32(params.anisotropy)
    coefficient = magnitude * (lam + (1 - lam) * (1 + cos_phi) / 2) / dist
    return np.stack([(coefficient * dx).sum(1), (coefficient * dy).sum(1)], axis=1)


def obstacle_forces(positions: np.ndarray, headings: np.ndarray, boxes: np.ndarray,
                    params: SocialForceParams) -> np.ndarray:
    """(N, 2) push away from the nearest point of each box (out of it when inside), plus the
    same push turned along the wall towards the walker's heading, so that people walk round a
    box instead of stalling in front of it (the local minimum of the plain model)."""
    if not len(boxes):
        return np.zeros_like(positions)
    nearest = np.clip(positions[:, None, :], boxes[None, :, :2], boxes[None, :, 2:])
    diff = positions[:, None, :] - nearest
    dist = np.sqrt((diff ** 2).sum(-1))
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2
    outward = positions[:, None, :] - centres[None]
    inside = dist < 1e-6
    normal = np.where(inside[..., None], outward, diff)
    normal /= np.linalg.norm(normal, axis=-1, keepdims=True) + 1e-9
    magnitude = params.obstacle_strength * np.exp((params.radius_m - dist)
                                                  / params.obstacle_range_m)
    along = np.stack([-normal[..., 1], normal[..., 0]], -1)  # the wall's direction
    side = np.sign((along * outward).sum(-1))  # round the side the walker is already on
    side = np.where(side == 0, 1.0, side)
    facing = np.clip(-(normal * headings[:, None, :]).sum(-1), 0, 1)  # 0 when walking away
    push = normal + (facing * side)[..., None] * along
    return (magnitude[..., None] * push).sum(1)


def simulate(routes: np.ndarray, desired_speeds: np.ndarray, params: SocialForceParams,
             dt_s: float, steps: int, boxes: np.ndarray | None = None,
             start_steps: np.ndarray | None = None, remove_on_arrival: bool = False,
             substeps: int | None = None, check_cancelled: Callable[[], None] | None = None
             ) -> Simulation:
    """Walk N pedestrians along ``routes`` (N, W, 2): row 0 is the start, the last the goal
    (shorter routes repeat their goal). ``start_steps`` delays entries; an arrived pedestrian
    stands still at its goal, or leaves the scene with ``remove_on_arrival``."""
    routes = np.asarray(routes, dtype=np.float64)
    count, waypoints = routes.shape[:2]
    boxes = np.zeros((0, 4)) if boxes is None else np.asarray(boxes, dtype=np.float64)
    start_steps = np.zeros(count, int) if start_steps is None else np.asarray(start_steps)
    position = routes[:, 0].copy()
    first_leg = routes[:, min(1, waypoints - 1)] - position
    velocity = desired_speeds[:, None] * first_leg / np.maximum(
        np.linalg.norm(first_leg, axis=1, keepdims=True), 1e-9)  # people enter walking
    target = np.minimum(1, waypoints - 1) * np.ones(count, int)
    arrived = np.zeros(count, bool)
    gone = np.zeros(count, bool)
    max_speed = params.max_speed_factor * desired_speeds[:, None]
    substeps = substeps or max(1, math.ceil(dt_s / MAX_SUBSTEP_S - 1e-9))
    h = dt_s / substeps
    out_pos = np.zeros((steps, count, 2), np.float32)
    out_vel = np.zeros((steps, count, 2), np.float32)
    out_alive = np.zeros((steps, count), bool)
    for step in range(steps):
        if check_cancelled is not None and step % 50 == 0:
            check_cancelled()
        present = (start_steps <= step) & ~gone
        out_pos[step], out_vel[step], out_alive[step] = position, velocity, present
        for _ in range(substeps):
            moving = present & ~arrived
            goal = routes[np.arange(count), target]
            to_goal = goal - position
            distance = np.linalg.norm(to_goal, axis=1)
            last = target == waypoints - 1
            reached = moving & (distance < np.where(last, ARRIVE_M, PASS_M))
            target = np.where(reached & ~last, target + 1, target)
            arrived |= reached & last
            moving &= ~arrived
            heading = to_goal / np.maximum(distance, 1e-9)[:, None]
            force = (desired_speeds[:, None] * heading - velocity) / params.relaxation_s
            inside = np.flatnonzero(present)
            force[inside] += agent_forces(position[inside], velocity[inside], params)
            force += obstacle_forces(position, heading, boxes, params)
            velocity = np.where(moving[:, None], velocity + h * force,
                                np.where(arrived[:, None], 0.0, velocity))
            speed = np.linalg.norm(velocity, axis=1, keepdims=True)
            velocity *= np.minimum(1.0, max_speed / np.maximum(speed, 1e-9))
            position = position + h * velocity * moving[:, None]
        if remove_on_arrival:
            gone |= arrived
    return Simulation(out_pos, out_vel, out_alive, arrived, dt_s)


# -- scenes and recordings -----------------------------------------------------------------------

def scene_routes(scene: Scene, rng: np.random.Generator, params: SocialForceParams
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(routes (N, W, 2), desired speeds (N,), group index (N,)) for a scene's groups: starts
    drawn in each spawn rectangle away from boxes, goals jittered by up to half a metre."""
    boxes = box_array(scene.buildings + scene.obstacles)
    width = 2 + max((len(g.waypoints) for g in scene.groups), default=0)
    routes, speeds, groups = [], [], []
    for index, group in enumerate(scene.groups):
        starts = _spawn(group.spawn_center, group.spawn_size, group.count, boxes, rng)
        goals = np.asarray(group.goal) + rng.uniform(-0.5, 0.5, (group.count, 2))
        middle = [np.repeat(np.asarray(w, float)[None], group.count, 0) for w in group.waypoints]
        tail = [goals] * (width - 1 - len(middle))
        routes.append(np.stack([starts, *middle, *tail], axis=1))
        speeds.append(sample_desired_speeds(params, group.count, rng, group.speed_mps))
        groups.append(np.full(group.count, index))
    if not routes:
        return np.zeros((0, 2, 2)), np.zeros(0), np.zeros(0, int)
    return np.concatenate(routes), np.concatenate(speeds), np.concatenate(groups)


def _spawn(center, size, count: int, boxes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    points = np.asarray(center) + rng.uniform(-0.5, 0.5, (count, 2)) * np.asarray(size)
    for _ in range(SPAWN_TRIES):
        inside = _inside_any(points, boxes)
        if not inside.any():
            break
        points[inside] = (np.asarray(center)
                          + rng.uniform(-0.5, 0.5, (inside.sum(), 2)) * np.asarray(size))
    return points


def _inside_any(points: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    if not len(boxes):
        return np.zeros(len(points), bool)
    lo, hi = boxes[None, :, :2], boxes[None, :, 2:]
    return ((points[:, None] > lo) & (points[:, None] < hi)).all(-1).any(1)


def simulate_scene(scene: Scene, params: SocialForceParams, seed: int,
                   check_cancelled: Callable[[], None] | None = None
                   ) -> tuple[Simulation, np.ndarray]:
    """The scene's groups walked for ``scene.frames`` frames at ``scene.fps`` (people leave
    the scene at their goal, as they leave a camera's view); also returns each agent's group."""
    rng = np.random.default_rng(seed)
    routes, speeds, groups = scene_routes(scene, rng, params)
    sim = simulate(routes, speeds, params, 1 / scene.fps, scene.frames,
                   box_array(scene.buildings + scene.obstacles), remove_on_arrival=True,
                   check_cancelled=check_cancelled)
    return sim, groups


def replay(tracks: Tracks, params: SocialForceParams, seed: int,
           check_cancelled: Callable[[], None] | None = None) -> Simulation:
    """Re-simulate a recording: each pedestrian enters at its first frame and position and
    walks to its last position at a desired speed drawn from ``params``; leaves on arrival."""
    rng = np.random.default_rng(seed)
    per_ped = tracks.per_pedestrian()
    first_frame = tracks.frame.min()
    step = tracks.frame_step
    routes = np.stack([np.stack([xy[0], xy[-1]]) for _, xy in per_ped.values()])
    start_steps = np.array([(frames[0] - first_frame) // step for frames, _ in per_ped.values()])
    steps = int((tracks.frame.max() - first_frame) // step) + 1
    speeds = sample_desired_speeds(params, len(routes), rng)
    return simulate(routes, speeds, params, tracks.sample_dt_s, steps, start_steps=start_steps,
                    remove_on_arrival=True, check_cancelled=check_cancelled)


# -- fitting -------------------------------------------------------------------------------------

@dataclass
class FitResult:
    params: SocialForceParams
    loss_default: float  # one-step velocity prediction error (m/s)^2 with the defaults
    loss_fitted: float
    samples: int


@dataclass
class _Transitions:
    """One-step samples: velocity now and next, the walker's goal and speed, neighbours."""

    position: np.ndarray  # (S, 2)
    velocity: np.ndarray  # (S, 2)
    next_velocity: np.ndarray  # (S, 2)
    goal: np.ndarray  # (S, 2)
    speed: np.ndarray  # (S,)
    neighbours: np.ndarray  # (S, K, 2) positions (padded)
    neighbour_mask: np.ndarray  # (S, K)
    dt_s: float


def _transitions(tracks: Tracks, max_samples: int, rng: np.random.Generator) -> _Transitions:
    step, dt = tracks.frame_step, tracks.sample_dt_s
    per_ped = tracks.per_pedestrian()
    by_frame: dict[int, list[np.ndarray]] = {}
    for f, xy in zip(tracks.frame, tracks.xy, strict=True):
        by_frame.setdefault(int(f), []).append(xy)
    rows = []
    for ped, (frames, xy) in per_ped.items():
        if len(frames) < 3:
            continue
        speed = np.linalg.norm(np.diff(xy, axis=0), axis=1).mean() / dt
        for k in range(1, len(frames) - 1):
            if frames[k + 1] - frames[k] != step or frames[k] - frames[k - 1] != step:
                continue
            rows.append((ped, int(frames[k]), xy[k], (xy[k] - xy[k - 1]) / dt,
                         (xy[k + 1] - xy[k]) / dt, xy[-1], speed))
    if not rows:
        raise ValueError(f"{tracks.path}: no pedestrian has three consecutive samples to fit on")
    if len(rows) > max_samples:
        rows = [rows[i] for i in sorted(rng.choice(len(rows), max_samples, replace=False))]
    width = max(len(by_frame[r[1]]) for r in rows)
    neighbours = np.zeros((len(rows), width, 2))
    mask = np.zeros((len(rows), width), bool)
    for i, (_, frame, position, *_rest) in enumerate(rows):
        others = np.array(by_frame[frame])
        others = others[np.linalg.norm(others - position, axis=1) > 1e-9]
        neighbours[i, :len(others)] = others
        mask[i, :len(others)] = True
    column = list(zip(*rows, strict=True))
    return _Transitions(np.array(column[2]), np.array(column[3]), np.array(column[4]),
                        np.array(column[5]), np.array(column[6]), neighbours, mask, dt)


def _prediction_error(data: _Transitions, params: SocialForceParams) -> float:
    """Mean squared error of the next velocity: exact relaxation over one sample interval plus
    the repulsion held constant over it."""
    to_goal = data.goal - data.position
    heading = to_goal / np.maximum(np.linalg.norm(to_goal, axis=1, keepdims=True), 1e-9)
    desired = data.speed[:, None] * heading
    decay = math.exp(-data.dt_s / params.relaxation_s)
    diff = data.position[:, None, :] - data.neighbours
    dist = np.sqrt((diff ** 2).sum(-1)) + 1e-9
    normal = diff / dist[..., None]
    speed = np.linalg.norm(data.velocity, axis=1, keepdims=True)
    own_heading = data.velocity / np.maximum(speed, 1e-6)
    cos_phi = -(normal * own_heading[:, None, :]).sum(-1)
    weight = params.anisotropy + (1 - params.anisotropy) * (1 + cos_phi) / 2
    magnitude = params.agent_strength * np.exp((2 * params.radius_m - dist)
                                               / params.agent_range_m)
    push = ((magnitude * weight * data.neighbour_mask)[..., None] * normal).sum(1)
    push = np.clip(push, -20, 20)
    predicted = desired + (data.velocity - desired) * decay + data.dt_s * push
    return float(((predicted - data.next_velocity) ** 2).sum(1).mean())


def fit_to_tracks(tracks: list[Tracks], seed: int = 0, max_samples: int = 4000,
                  iterations: int = 120, calibration_rounds: int = 2,
                  check_cancelled: Callable[[], None] | None = None) -> FitResult:
    """Relaxation time and repulsion (A, B) by Nelder-Mead on the one-step velocity prediction
    error, in log space, with desired speeds first taken from the walkers' mean speeds; then
    the desired-speed mean and spread are calibrated by replaying the recordings until the
    simulated speeds match the real ones (slow walkers stay longer in a replay, so the
    walkers' mean alone underestimates the speeds seen per frame)."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(seed)
    parts = [_transitions(t, max_samples // len(tracks), rng) for t in tracks]
    walker_speeds = np.concatenate([p.speed for p in parts])
    walker_speeds = walker_speeds[walker_speeds > 0.1]  # people standing still set no pace
    defaults = SocialForceParams()
    base = replace(defaults, desired_speed_mps=float(np.mean(walker_speeds)),
                   desired_speed_std_mps=float(np.std(walker_speeds)))

    def with_logs(z: np.ndarray) -> SocialForceParams:
        tau, strength, reach = np.exp(z)
        return replace(base, relaxation_s=float(np.clip(tau, 0.05, 10)),
                       agent_strength=float(np.clip(strength, 1e-3, 50)),
                       agent_range_m=float(np.clip(reach, 0.02, 3)))

    def loss(z: np.ndarray, params: SocialForceParams | None = None) -> float:
        if check_cancelled is not None:
            check_cancelled()
        params = params or with_logs(z)
        return float(np.mean([_prediction_error(p, params) for p in parts]))

    start = np.log([defaults.relaxation_s, defaults.agent_strength, defaults.agent_range_m])
    best = minimize(loss, start, method="Nelder-Mead",
                    options={"maxiter": iterations, "xatol": 1e-3, "fatol": 1e-6})
    fitted = with_logs(best.x)
    for _ in range(calibration_rounds):
        fitted = _calibrate_speeds(tracks, fitted, seed, check_cancelled)
    return FitResult(fitted, loss(start, defaults), loss(best.x),
                     int(sum(len(p.speed) for p in parts)))


def _calibrate_speeds(tracks: list[Tracks], params: SocialForceParams, seed: int,
                      check_cancelled: Callable[[], None] | None) -> SocialForceParams:
    """One moment-matching step: shift the desired-speed mean by the gap between real and
    replayed mean speeds and scale the spread by the ratio of their spreads."""
    from engine.crowd.stats import MOVING_MPS, simulation_speeds, track_speeds

    real = np.concatenate([track_speeds(t) for t in tracks])
    simulated = np.concatenate([simulation_speeds(replay(t, params, seed, check_cancelled))
                                for t in tracks])
    real, simulated = real[real > MOVING_MPS], simulated[simulated > MOVING_MPS]
    mean = params.desired_speed_mps + real.mean() - simulated.mean()
    spread = params.desired_speed_std_mps * real.std() / max(simulated.std(), 1e-3)
    return replace(params, desired_speed_mps=float(np.clip(mean, 0.2, 3.0)),
                   desired_speed_std_mps=float(np.clip(spread, 0.01, 1.5)))


_FITS: dict[tuple, FitResult] = {}  # fit_to_file's, by file (path, change time, size), seed


def shared_recordings() -> list[Path]:
    """The real ETH/UCY recordings beside the project (``../shared/data/crowd``), if present."""
    return sorted(SHARED_RECORDINGS.glob("*.txt")) if SHARED_RECORDINGS.is_dir() else []


def fit_to_file(path: str | Path, seed: int = 0,
                check_cancelled: Callable[[], None] | None = None) -> FitResult:
    """``fit_to_tracks`` on one recording file, which must be in metres. A file fitted before
    (same path, size and modification time) returns its earlier fit at once: the fit is
    deterministic and takes seconds."""
    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, seed)
    if key not in _FITS:
        tracks = read_tracks(path)
        if tracks.units != "m":
            raise ValueError(f"{path}: the tracks are in {tracks.units}; fitting needs metres "
                             "(ETH/UCY or a CSV in metres)")
        _FITS[key] = fit_to_tracks([tracks], seed=seed, check_cancelled=check_cancelled)
    return _FITS[key]
