"""open3d's coarse render against the ray caster: the same silhouettes, depth, labels and flat
look of a small scene; people moved and hidden between frames; the id colours decoded exactly;
and c2r.simulate's renderer switch (and its fallback when open3d cannot start)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.context import JobContext
from engine.crowd import render as R
from engine.crowd import render_open3d as O
from engine.io.crowd import Scene
from engine.methods import c2r

WIDTH, HEIGHT = 96, 72
PEOPLE = np.array([[-4.0, 0.0], [0.0, 2.0], [3.0, -1.0], [5.0, 4.0]])
SCENE = Scene.model_validate({
    "ground": {"size": [30, 30]},
    "buildings": [{"center": [0.0, 10.0], "size": [6, 2], "height": 6}],
    "obstacles": [{"center": [-1.5, -2.0], "size": [1, 1], "height": 1}],
    "camera": [{"t_s": 0, "position": [0, -14, 6], "look_at": [0, 2, 0], "fov_deg": 50},
               {"t_s": 2, "position": [4, -12, 4], "look_at": [1, 2, 1], "fov_deg": 35}],
})


def both(t_s: float, people: np.ndarray, present=None) -> tuple[R.Frame, R.Frame]:
    camera = R.camera_at(SCENE.camera, t_s, WIDTH, HEIGHT)
    geometry = R.scene_geometry(SCENE, people, R.flat_colors(len(people)), present)
    return R.render(camera, geometry), O.render(camera, geometry)


@pytest.fixture(scope="module")
def frames() -> tuple[R.Frame, R.Frame]:
    return both(0.0, PEOPLE)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max((a | b).sum(), 1))


def test_silhouettes_depth_and_labels_agree_with_the_ray_caster(frames):
    ray, raster = frames
    for index in range(len(PEOPLE)):
        assert (ray.person == index).sum() > 10
        assert iou(ray.person == index, raster.person == index) > 0.8
    assert (ray.label == raster.label).mean() > 0.98
    assert set(np.unique(raster.label)) == {R.SKY, R.GROUND, R.BOX, R.PERSON}
    same = (ray.label == raster.label) & (ray.person == raster.person) & (ray.label != R.SKY)
    gap = np.abs(ray.depth[same] - raster.depth[same])  # metres; the scene is 8-25 m away
    assert gap.max() < 0.05 and np.median(gap) < 0.001
    assert np.isinf(raster.depth[raster.label == R.SKY]).all()
    assert np.abs(raster.point[raster.label == R.GROUND][:, 2]).max() < 0.01
    assert (raster.silhouette == (raster.person >= 0)).all()
    assert np.abs(ray.rgb - raster.rgb)[same].mean() < 0.01  # the same flat look
    assert raster.rgb.shape == (HEIGHT, WIDTH, 3) and raster.label.dtype == np.uint8


def test_people_move_and_hide_between_frames_like_the_ray_caster(frames):
    moved = PEOPLE + np.array([1.0, -0.5])
    ray, raster = both(1.3, moved, present=np.array([True, False, True, True]))
    assert 1 not in np.unique(raster.person)
    for index in (0, 2, 3):
        assert iou(ray.person == index, raster.person == index) > 0.8
    assert (ray.label == raster.label).mean() > 0.98
    assert iou(frames[1].person == 0, raster.person == 0) < 0.5  # it did move
    ray, raster = both(0.0, PEOPLE[:2])  # fewer people than the renderer holds
    assert set(np.unique(raster.person)) == {-1, 0, 1}
    assert O.renderer(WIDTH, HEIGHT) is O.renderer(WIDTH, HEIGHT)  # kept while the size holds
    camera = R.camera_at(SCENE.camera, 0.0, 32, 24)  # another size replaces it
    geometry = R.scene_geometry(SCENE, PEOPLE, R.flat_colors(len(PEOPLE)))
    assert (R.render(camera, geometry).label == O.render(camera, geometry).label).mean() > 0.95


def test_id_colours_round_trip_through_the_renderer():
    renderer = O.renderer(WIDTH, HEIGHT)
    codes = [O.GROUND_CODE, O.BOX_CODE + 5, O.PERSON_CODE, O.PERSON_CODE + 777, 4095]
    for code in codes:
        colour = np.array(O.code_color(code)[:3])
        assert (colour >= 0).all() and (colour <= 1).all()
    levels = renderer._decode[np.arange(256)]  # byte -> level, per channel, monotone
    assert (np.diff(levels, axis=0) >= 0).all() and (levels[-1] == O.LEVELS - 1).all()
    with pytest.raises(ValueError, match="colours"):
        O.code_color(O.LEVELS ** 3)


SMALL_SCENE = {
    "ground": {"size": [16, 16]},
    "buildings": [{"center": [0, 6], "size": [4, 2], "height": 5}],
    "groups": [{"count": 4, "spawn_center": [-3, -2], "goal": [3, 2]}],
    "camera": [{"t_s": 0, "position": [0, -10, 5], "look_at": [0, 0, 0]}],
    "duration_s": 2, "fps": 2,
}


def simulate(tmp_path, renderer: str, events: list | None = None) -> tuple[dict, dict]:
    scene = tmp_path / "scene.json"
    scene.write_text(json.dumps(SMALL_SCENE))
    folder = tmp_path / renderer
    ctx = JobContext("j", folder, seed=0,
                     emit=events.append if events is not None else lambda event: None)
    params = c2r.SimulateParams(fit=False, width=WIDTH, height=HEIGHT, max_frames=2,
                                renderer=renderer)
    out = next(s for s in c2r.SPECS if s.id == "c2r.simulate").run(ctx, params,
                                                                   {"scene": str(scene)})
    ctx.flush()
    arrays = {name: np.load(folder / out[name]) for name in ("coarse_depth",
                                                              "coarse_person_ids")}
    return out, arrays


def test_simulate_switches_the_coarse_backend(tmp_path):
    open3d_out, open3d_arrays = simulate(tmp_path, "open3d")
    ray_out, ray_arrays = simulate(tmp_path, "raycast")
    assert open3d_out["summary"]["renderer"] == "open3d"
    assert ray_out["summary"]["renderer"] == "raycast"
    ids_a, ids_b = open3d_arrays["coarse_person_ids"], ray_arrays["coarse_person_ids"]
    assert (ids_a >= 0).any() and (ids_a == ids_b).mean() > 0.98  # close ...
    depth_a, depth_b = open3d_arrays["coarse_depth"], ray_arrays["coarse_depth"]
    assert not np.array_equal(depth_a, depth_b)  # ... but drawn by a different backend
    finite = np.isfinite(depth_a) & np.isfinite(depth_b)
    assert np.median(np.abs(depth_a[finite] - depth_b[finite])) < 0.001


def test_simulate_falls_back_to_the_ray_caster_with_a_warning(tmp_path, monkeypatch):
    def no_device(width, height):
        raise O.Open3DUnavailable("RuntimeError: no Vulkan device")

    monkeypatch.setattr(O, "renderer", no_device)
    events: list = []
    out, _ = simulate(tmp_path, "open3d", events)
    assert out["summary"]["renderer"] == "raycast"
    assert "no Vulkan device" in json.dumps(events) and "falls back" in json.dumps(events)
