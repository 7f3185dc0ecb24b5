"""Crowd engine speed: the social force for 500 agents x 600 frames, coarse render frames per
second at the previewer's sizes, and the previewer's playback rate with three 256x256 clips
side by side (offscreen Qt: one timer tick = step the clock and redraw, synchronously).

The simulation runs at 10 frames a second (one Euler step per frame) with 500 walkers crossing
a 40 m square in four streams, so every pair interacts every step. The renderer ray-casts the
demo scene (two buildings, an obstacle, 24 walkers) at 160x120 and 256x256 along its camera
path; at 256x256 open3d's offscreen rasteriser (Filament; an id pass and a depth pass, then
the same flat shading) renders it too. The simulation and the ray caster are single-threaded
NumPy (the GUI's cores are not theirs to take); open3d's software Vulkan (llvmpipe) on a
machine without a GPU draws on its own threads.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

AGENTS = 500
FRAMES = 600
FPS = 10.0
RENDER_FRAMES = 12
PLAYBACK_FRAMES = 60


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


def bench_render(width: int, height: int, backend: str = "raycast") -> dict:
    from engine.crowd import render as R
    from engine.crowd import render_open3d
    from engine.crowd import social_force as sf
    from engine.io.crowd import Scene
    from engine.methods.c2r import DEMO_SCENE

    scene = Scene.model_validate(DEMO_SCENE)
    sim, groups = sf.simulate_scene(scene, sf.SocialForceParams(), 0)
    colors = R.flat_colors(len(groups))
    name = f"coarse render {width}x{height} ({len(groups)} people)"
    render = R.render
    if backend == "open3d":
        name += ", open3d"
        try:
            render_open3d.renderer(width, height)
            render = render_open3d.render
        except render_open3d.Open3DUnavailable as error:
            return {"name": name, "value": float("nan"), "unit": "frames/s", "target": ">= 5",
                    "reference": f"open3d cannot start: {error}"}
    times = []
    for t in range(-1, RENDER_FRAMES):  # frame -1 (untimed) uploads open3d's meshes
        camera = R.camera_at(scene.camera, max(t, 0) / scene.fps, width, height)
        geometry = R.scene_geometry(scene, sim.positions[max(t, 0)], colors,
                                    sim.alive[max(t, 0)])
        start = time.perf_counter()
        render(camera, geometry)
        if t >= 0:
            times.append(time.perf_counter() - start)
    return {"name": name, "value": 1 / statistics.median(times), "unit": "frames/s",
            "target": ">= 5"}


class _Host:
    def subscribe(self, callback):
        return lambda: None


def bench_playback(size: int = 256) -> dict:
    """Frames a second of the panel's playback: coarse, generated and real clips of ``size``
    pixels side by side with 24 pixel tracks (ids and trails) drawn over the first."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from engine.io.crowd import tracks_from_array
    from panels.crowd.view import CrowdPanel
    from studio import main_thread_gc

    app = QApplication.instance() or QApplication([])
    main_thread_gc.install(app)  # as the app does: no collection on worker threads
    rng = np.random.default_rng(0)
    panel = CrowdPanel(_Host())
    panel.resize(1400, 800)
    panel.show()
    for name in ("coarse", "generated", "real"):
        panel.model.add_clip(name, rng.integers(0, 255, (PLAYBACK_FRAMES, size, size, 3),
                                                np.uint8))
    walk = rng.uniform(0, size, (1, 24, 2)) + np.arange(PLAYBACK_FRAMES)[:, None, None]
    panel.model.set_tracks(tracks_from_array(np.clip(walk, 0, size - 1), 10.0, units="px"))
    app.processEvents()
    times = []
    for _ in range(PLAYBACK_FRAMES):
        start = time.perf_counter()
        panel.model.step(1, wrap=True)
        panel.clips_label.repaint()
        times.append(time.perf_counter() - start)
    panel.pool.waitForDone()  # the clip metrics started when the clips opened
    app.processEvents()
    panel.close()
    return {"name": f"playback 3 x {size}x{size} side by side + tracks",
            "value": 1 / statistics.median(times), "unit": "frames/s", "target": ">= 5"}


def run() -> list[dict]:
    from engine.threads import limit_threads

    with limit_threads(1):
        return [bench_simulation(), bench_render(160, 120), bench_render(256, 256),
                bench_render(256, 256, "open3d"), bench_playback()]


if __name__ == "__main__":
    for row in run():
        print(row)
