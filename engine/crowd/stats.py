"""Speed and density statistics of a crowd, the same for real tracks and simulations, so that a
simulation can be compared with the recording it imitates."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from engine.crowd.social_force import Simulation
from engine.io.crowd import Tracks

LOCAL_RADIUS_M = 2.0  # local density: neighbours within this radius per square metre
MOVING_MPS = 0.1  # slower steps count as standing and are left out of speed statistics


@dataclass
class CrowdStats:
    speed_mean_mps: float
    speed_std_mps: float
    speed_p10_mps: float
    speed_p50_mps: float
    speed_p90_mps: float
    people_per_frame: float
    local_density_per_m2: float
    nearest_neighbour_m: float

    def to_dict(self) -> dict:
        return asdict(self)


def _summarise(speeds: np.ndarray, frames: list[np.ndarray]) -> CrowdStats:
    moving = speeds[speeds > MOVING_MPS]
    densities, nearest = [], []
    for xy in frames:
        if len(xy) < 2:
            continue
        dist = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
        np.fill_diagonal(dist, np.inf)
        densities.append(((dist < LOCAL_RADIUS_M).sum(1) / (np.pi * LOCAL_RADIUS_M ** 2)).mean())
        nearest.append(np.median(dist.min(1)))
    p10, p50, p90 = np.percentile(moving, [10, 50, 90]) if len(moving) else (np.nan,) * 3
    return CrowdStats(float(moving.mean()) if len(moving) else np.nan,
                      float(moving.std()) if len(moving) else np.nan, float(p10), float(p50),
                      float(p90), float(np.mean([len(f) for f in frames])) if frames else 0.0,
                      float(np.mean(densities)) if densities else 0.0,
                      float(np.median(nearest)) if nearest else np.nan)


def track_speeds(tracks: Tracks) -> np.ndarray:
    return np.linalg.norm(tracks.step_velocities(), axis=1)


def simulation_speeds(sim: Simulation) -> np.ndarray:
    """Speeds between consecutive frames of pedestrians present in both (as for tracks)."""
    both = sim.alive[1:] & sim.alive[:-1]
    steps = np.linalg.norm(np.diff(sim.positions, axis=0), axis=-1) / sim.dt_s
    return steps[both]


def tracks_stats(tracks: Tracks) -> CrowdStats:
    frames = [tracks.positions_at(f)[1] for f in tracks.frames]
    return _summarise(track_speeds(tracks), frames)


def simulation_stats(sim: Simulation) -> CrowdStats:
    frames = [sim.positions[t][sim.alive[t]] for t in range(len(sim.positions))
              if sim.alive[t].any()]
    return _summarise(simulation_speeds(sim), frames)


def speed_gap(speeds_a: np.ndarray, speeds_b: np.ndarray) -> float:
    """Wasserstein-1 distance (m/s) between two speed distributions of moving pedestrians."""
    from scipy.stats import wasserstein_distance

    a, b = speeds_a[speeds_a > MOVING_MPS], speeds_b[speeds_b > MOVING_MPS]
    return float(wasserstein_distance(a, b)) if len(a) and len(b) else float("nan")
