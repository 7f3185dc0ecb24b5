"""Crowd engine speed: the social force for 500 agents x 600 frames, and coarse render frames
per second at the previewer's sizes.

The simulation runs at 10 frames a second (one Euler step per frame) with 500 walkers crossing
a 40 m square in four streams, so every pair interacts every step. The renderer ray-casts the
demo scene (two buildings, an obstacle, 24 walkers) at 160x120 and 256x256 along its camera
path. Both are single-threaded NumPy (the GUI's cores are not theirs to take).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

AGENTS = 500
FRAMES = 600
FPS = 10.0
RENDER_FRAMES = 12


def crossing_streams(count: int, seed: int = 0) -> np.ndarray:
    """(count, 2, 2) routes: four streams entering from the square's sides."""
    rng = np.random.default_rng(seed)
    side = rng.integers(0, 4, count)
    along = rng.uniform(-15, 15, count)
    starts = np.stack([np.choose(side, [-20 + 0 * along, 20 + 0 * along, along, along]),
                       np.choose(side, [along, along, -20 + 0 * along, 20 + 0 * along])], 1)
    return np.stack([starts, -starts + rng.normal(0, 2, starts.shape)], 1)


def bench_simulation() -> dict:
    from engine.crowd import social_force as sf

    routes = crossing_streams(AGENTS)
    speeds = np.random.default_rng(1).uniform(1.0, 1.6, AGENTS)
    start = time.perf_counter()
    sim = sf.simulate(routes, speeds, sf.SocialForceParams(), 1 / FPS, FRAMES)
    elapsed = time.perf_counter() - start
    return {"name": f"social force {AGENTS} agents x {FRAMES} frames", "value": elapsed,
            "unit": "s", "target": "< 60", "reference": f"{sim.arrived.mean():.0%} arrived"}


def bench_render(width: int, height: int) -> dict:
    from engine.crowd import render as R
    from engine.crowd import social_force as sf
    from engine.io.crowd import Scene
    from engine.methods.c2r import DEMO_SCENE

    scene = Scene.model_validate(DEMO_SCENE)
    sim, groups = sf.simulate_scene(scene, sf.SocialForceParams(), 0)
    colors = R.flat_colors(len(groups))
    times = []
    for t in range(RENDER_FRAMES):
        camera = R.camera_at(scene.camera, t / scene.fps, width, height)
        geometry = R.scene_geometry(scene, sim.positions[t], colors, sim.alive[t])
        start = time.perf_counter()
        R.render(camera, geometry)
        times.append(time.perf_counter() - start)
    return {"name": f"coarse render {width}x{height} ({len(groups)} people)",
            "value": 1 / statistics.median(times), "unit": "frames/s", "target": ">= 5"}


def run() -> list[dict]:
    from engine.threads import limit_threads

    with limit_threads(1):
        return [bench_simulation(), bench_render(160, 120), bench_render(256, 256)]


if __name__ == "__main__":
    for row in run():
        print(row)
