"""The coarse renderer: silhouettes sit where the camera projects each person, depth is the
distance along the view axis, boxes occlude, and the camera follows its keyframes."""

from __future__ import annotations

import numpy as np
import pytest

from engine.crowd import render as R
from engine.io.crowd import CameraKeyframe, Scene

PEOPLE = np.array([[-4.0, 0.0], [0.0, 2.0], [3.0, -1.0], [5.0, 4.0]])
SCENE = Scene.model_validate({
    "ground": {"size": [30, 30]},
    "buildings": [{"center": [0.0, 10.0], "size": [6, 2], "height": 6}],
    "camera": [{"t_s": 0, "position": [0, -14, 6], "look_at": [0, 2, 0], "fov_deg": 50},
               {"t_s": 2, "position": [4, -14, 6], "look_at": [0, 2, 0], "fov_deg": 30}],
})


def frame_and_camera(present=None, width=96, height=72):
    camera = R.camera_at(SCENE.camera, 0.0, width, height)
    geometry = R.scene_geometry(SCENE, PEOPLE, R.flat_colors(len(PEOPLE)), present)
    return R.render(camera, geometry), camera


def test_silhouettes_match_projected_people():
    frame, camera = frame_and_camera()
    for index, (x, y) in enumerate(PEOPLE):
        col, row, depth = camera.project(np.array([[x, y, 0.9]]))
        assert frame.person[int(row[0]), int(col[0])] == index
        mask = frame.person == index
        rows, cols = np.nonzero(mask)
        foot = camera.project(np.array([[x, y, 0.0]]))[1][0]
        top = camera.project(np.array([[x, y, R.HEAD_CENTRE_M + R.HEAD_RADIUS_M]]))[1][0]
        assert abs(rows.max() - foot) <= 2 and abs(rows.min() - top) <= 2
        expected_width = 2 * R.BODY_RADIUS_M * camera.focal_px / depth[0]
        assert abs((cols.max() - cols.min() + 1) - expected_width) <= 2
        assert frame.depth[int(row[0]), int(col[0])] == pytest.approx(
            depth[0] - R.BODY_RADIUS_M, abs=0.15)
    assert set(np.unique(frame.person)) == {-1, 0, 1, 2, 3}
    assert (frame.silhouette == (frame.person >= 0)).all()


def test_absent_people_are_not_drawn_and_labels_cover_the_image():
    frame, _ = frame_and_camera(present=np.array([True, False, True, False]))
    assert set(np.unique(frame.person)) == {-1, 0, 2}
    assert set(np.unique(frame.label)) == {R.SKY, R.GROUND, R.BOX, R.PERSON}
    assert np.isinf(frame.depth[frame.label == R.SKY]).all()
    assert np.isfinite(frame.depth[frame.label != R.SKY]).all()
    ground_points = frame.point[frame.label == R.GROUND]
    assert np.abs(ground_points[:, 2]).max() < 1e-6


def test_box_is_drawn_where_projected_and_occludes_the_ground():
    frame, camera = frame_and_camera()
    col, row, depth = camera.project(np.array([[0.0, 9.0, 3.0]]))  # the front face's middle
    r, c = int(row[0]), int(col[0])
    assert frame.label[r, c] == R.BOX
    assert frame.depth[r, c] == pytest.approx(depth[0], rel=0.02)
    assert np.allclose(frame.normal[r, c], [0, -1, 0])


def test_camera_interpolates_between_keyframes_and_holds_at_the_ends():
    middle = R.camera_at(SCENE.camera, 1.0, 8, 8)
    assert np.allclose(middle.position, [2, -14, 6]) and middle.fov_deg == pytest.approx(40)
    assert np.allclose(R.camera_at(SCENE.camera, 9.0, 8, 8).position, [4, -14, 6])
    down = R.Camera(np.array([0, 0, 10.0]), np.array([0, 0, 0.0]), 60, 8, 8)
    assert np.isfinite(down.rays()).all()  # looking straight down still has a basis
    single = [CameraKeyframe(t_s=0, position=(1, 1, 1), look_at=(0, 0, 0))]
    assert np.allclose(R.camera_at(single, 5.0, 4, 4).position, [1, 1, 1])


def test_textured_look_keeps_geometry_and_changes_appearance():
    frame, _ = frame_and_camera()
    colors = R.flat_colors(len(PEOPLE))
    real = R.textured(frame, colors, noise_seed=1)
    assert real.shape == frame.rgb.shape and real.min() >= 0 and real.max() <= 1
    ground = frame.label == R.GROUND
    assert real[ground].std(0).mean() > 3 * frame.rgb[ground].std(0).mean()  # texture
    again = R.textured(frame, colors, noise_seed=1)
    assert np.array_equal(real, again)


def test_render_clip_follows_the_simulation():
    positions = np.repeat(PEOPLE[None], 3, 0) + np.array([0.5, 0.0]) * np.arange(3)[:, None, None]
    alive = np.ones((3, len(PEOPLE)), bool)
    frames = R.render_clip(SCENE, positions, alive, R.flat_colors(len(PEOPLE)), 48, 36)
    assert len(frames) == 3
    assert not np.array_equal(frames[0].person, frames[2].person)
    assert R.to_uint8(frames[0].rgb).dtype == np.uint8


def test_culling_keeps_every_hit_of_a_close_up():
    """A person 1.2 m from the camera fills the frame's middle: every ray that meets the body
    cylinder (checked here ray by ray in closed form) is a person pixel, and a person behind
    the camera is never seen."""
    camera = R.Camera(np.array([0.0, -1.2, 1.0]), np.array([0.0, 0.0, 1.0]), 70, 64, 64)
    geometry = R.scene_geometry(SCENE, np.array([[0.0, 0.0], [0.0, -3.0]]), R.flat_colors(2))
    frame = R.render(camera, geometry)
    rays = camera.rays()
    # the body side: |o + t d - c|_xy = r has a real root with the hit height in [0, 1.45]
    o, d = camera.position, rays
    a = d[:, 0] ** 2 + d[:, 1] ** 2
    b = 2 * (o[0] * d[:, 0] + (o[1] - 0.0) * d[:, 1])
    c = o[0] ** 2 + o[1] ** 2 - R.BODY_RADIUS_M ** 2
    disc = b * b - 4 * a * c
    t = (-b - np.sqrt(np.maximum(disc, 0))) / (2 * a)
    z = o[2] + t * d[:, 2]
    body = ((disc >= 0) & (t > 0) & (z >= 0) & (z <= R.BODY_HEIGHT_M)).reshape(64, 64)
    assert body.mean() > 0.2
    assert (frame.person[body] == 0).all()
    assert not (frame.person == 1).any()
