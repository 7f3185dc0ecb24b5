"""Crowd previewer, second part: per-frame metrics (against a hand computation), the wipe
view, exports read back (MP4, GIF, PNG frames, CSV), edits with undo, and regeneration."""

from __future__ import annotations

import numpy as np
import pytest

from engine.io.crowd import read_tracks
from panels.crowd.metrics import clip_metrics, foreground, frame_difference, silhouette_iou
from panels.crowd.model import CrowdModel, MoveWaypoint, SetPrompt, decode

pytest.importorskip("PySide6")


def square_clip(frames: int, size: int, color, offset: int = 0) -> np.ndarray:
    """A 4x4 square moving 5 px a frame (never on a pixel for most of the clip, so the
    temporal median is the black background)."""
    clip = np.zeros((frames, size, size, 3), np.uint8)
    for t in range(frames):
        clip[t, 2:6, 5 * t + offset:5 * t + offset + 4] = color
    return clip


def test_iou_and_difference_match_a_hand_computation():
    a = np.zeros((2, 2, 3), bool)
    b = np.zeros((2, 2, 3), bool)
    a[0, 0, :2] = True          # frame 0: a = 2 px, b = 3 px, overlap 2 -> 2 / 3
    b[0, 0, :3] = True
    a[1, 1, 0] = True           # frame 1: disjoint single pixels -> 0
    b[1, 0, 2] = True
    assert np.allclose(silhouette_iou(a, b), [2 / 3, 0.0])
    assert silhouette_iou(np.zeros((1, 2, 2)), np.zeros((1, 2, 2)))[0] == 1.0
    clip = np.zeros((3, 2, 2, 3), np.uint8)
    clip[1, 0, 0, 0] = 255      # one of 12 values changes by 255 -> 1 / 12, then back
    assert np.allclose(frame_difference(clip), [0.0, 1 / 12, 1 / 12])


def test_clip_metrics_compare_silhouettes_of_the_generated_clip_with_the_control():
    coarse = square_clip(6, 32, (255, 0, 0))
    same_place = square_clip(6, 32, (0, 200, 0))
    masks = foreground(coarse)
    assert masks[0, 2:6, 0:4].all() and masks.sum() == 6 * 16
    assert np.allclose(clip_metrics(same_place, coarse).silhouette_iou, 1.0)
    shifted = clip_metrics(square_clip(6, 32, (0, 200, 0), offset=2), coarse)
    assert np.allclose(shifted.silhouette_iou, 2 / 6)   # 4-wide squares 2 px apart
    assert shifted.frame_difference[0] == 0 and shifted.frame_difference[1] > 0
    half = clip_metrics(same_place, masks[:, ::2, ::2])  # silhouettes at another size
    assert half.silhouette_iou.mean() > 0.5


def test_wipe_splits_two_clips_at_the_divider():
    model = CrowdModel()
    model.add_clip("coarse", np.full((2, 8, 10, 3), 10, np.uint8))
    model.add_clip("generated", np.full((2, 4, 5, 3), 200, np.uint8))
    left = model.wipe("coarse", "generated", 0.3)
    right = model.wipe("coarse", "generated", 0.8)
    assert left.shape == right.shape == (8, 10, 3)
    assert (left[:, :3] == 10).all() and (left[:, 4:] == 200).all()
    assert (left[:, 3] == 255).all()                     # the divider
    assert not np.array_equal(left, right)
    model.set_frame(1)
    frames = model.frames_over(0, 2, lambda: model.wipe("coarse", "generated", 0.5, height=16))
    assert frames.shape == (2, 16, 20, 3) and model.frame == 1
    with pytest.raises(ValueError, match="empty frame range"):
        model.frames_over(2, 2, lambda: model.composite())


def test_edits_and_their_undo_restore_prompt_and_path(tmp_path):
    path = tmp_path / "tracks.csv"
    path.write_text("frame,id,x,y\n0,1,0,0\n1,1,1,0\n0,2,3,3\n1,2,3,2\n")
    model = CrowdModel()
    model.load_tracks(path)
    move = MoveWaypoint(1, 1, (5.0, 4.0), model.waypoint(1, 1))
    move.apply(model)
    assert model.waypoint(1, 1) == (5.0, 4.0)
    move.revert(model)
    assert model.waypoint(1, 1) == (1.0, 0.0)
    prompt = SetPrompt("dusk", model.prompt)
    prompt.apply(model)
    assert model.prompt == "dusk"
    prompt.revert(model)
    assert model.prompt == ""
    assert decode(move.to_json()) == move and decode(prompt.to_json()) == prompt
    with pytest.raises(ValueError, match="no sample"):
        model.waypoint(1, 7)
    col, row = model.markers(100, 100)[0].x, model.markers(100, 100)[0].y
    assert np.allclose(model.map_to_world(col, row, 100, 100), model.waypoint(1, 0))


def test_panel_metrics_wipe_exports_edits_and_regenerate(make_widget, fake_host, tmp_path,
                                                         qtbot):
    import imageio_ffmpeg
    from PySide6.QtGui import QImage

    from engine.methods import c2r
    from panels.crowd.view import MODE_WIPE, CrowdPanel

    fake_host._params.update({spec.id: spec.params for spec in c2r.SPECS})
    panel = make_widget(CrowdPanel, fake_host)
    panel.model.add_clip("coarse", square_clip(6, 32, (255, 0, 0)))
    panel.model.add_clip("generated", square_clip(6, 32, (0, 255, 0), offset=2))
    qtbot.waitUntil(lambda: panel.metrics is not None, timeout=5000)
    assert (panel.range_start.value(), panel.range_end.value()) == (1, 6)
    x, y = panel.iou_curve.getData()
    assert len(x) == 6 and np.allclose(y, 2 / 6)
    panel.model.set_frame(3)
    assert panel.frame_line.value() == 4 and "frame 4" in panel.metrics_label.text()

    side_by_side = panel.current_image()
    panel.set_mode(MODE_WIPE)
    panel.set_wipe_position(0.2)
    wiped = panel.current_image()
    panel.set_wipe_position(0.9)
    assert wiped.width() == 256 and side_by_side.width() == 512
    assert wiped != panel.current_image()

    panel.range_start.setValue(2)
    panel.range_end.setValue(5)
    panel.export_video(tmp_path / "view.mp4")
    panel.export_video(tmp_path / "view.gif")
    panel.export_frames(tmp_path / "frames")
    qtbot.waitUntil(lambda: (tmp_path / "frames" / "frame_0005.png").exists()
                    and (tmp_path / "view.gif").exists() and not panel._tasks, timeout=10000)
    reader = imageio_ffmpeg.read_frames(str(tmp_path / "view.mp4"))
    assert next(reader)["size"] == (256, 256) and sum(1 for _ in reader) == 4
    assert (tmp_path / "view.gif").read_bytes()[:6] == b"GIF89a"
    assert sorted(p.name for p in (tmp_path / "frames").iterdir()) == [
        f"frame_{n:04d}.png" for n in range(2, 6)]
    assert QImage(str(tmp_path / "frames" / "frame_0002.png")).width() == 256
    assert not fake_host.errors
    from engine import provenance

    for video in ("view.mp4", "view.gif"):  # a sidecar says which clips and frames
        assert provenance.read(tmp_path / video)["view"]["frames"] == [2, 5]
    assert provenance.read(tmp_path / "frames" / "frame_0003.png")["view"]["frame"] == 3

    tracks = tmp_path / "sim.csv"
    tracks.write_text("frame,id,x,y\n0,7,0,0\n1,7,1,0\n2,7,2,1\n3,7,3,1\n0,8,0,4\n1,8,1,4\n")
    panel.open_file(tracks)
    panel.model.set_frame(1)
    marker = next(m for m in panel.model.markers() if m.id == 7)
    panel._press_map(marker.x, marker.y)
    panel._drag_map(marker.x + 20, marker.y)
    panel._release_map(marker.x + 20, marker.y)
    moved = panel.model.waypoint(7, 1)
    assert moved[0] > 1.0
    panel.edit_prompt("a crowd at dusk")
    panel.export_tracks_csv(tmp_path / "out" / "tracks.csv")
    qtbot.waitUntil(lambda: (tmp_path / "out" / "tracks.csv").exists(), timeout=5000)
    assert np.allclose(read_tracks(tmp_path / "out" / "tracks.csv").xy[1], moved, atol=1e-3)
    assert provenance.read(tmp_path / "out" / "tracks.csv")["view"]["prompt"] == "a crowd at dusk"

    panel.regenerate()
    assert "c2r.train" in fake_host.errors[-1][1]
    panel.checkpoint = str(tmp_path / "ckpt")
    panel.regenerate()
    submitted = fake_host.submitted[-1]
    assert submitted["method"] == "c2r.generate" and panel.jobs
    assert submitted["params"] == {"prompt": "a crowd at dusk", "start_frame": 1,
                                   "max_frames": 4}
    assert np.allclose(read_tracks(submitted["inputs"]["tracks"]).xy[1], moved, atol=1e-3)


def test_a_regenerated_range_is_spliced_into_the_clips(make_widget, fake_host):
    from panels.crowd.view import CrowdPanel

    panel = make_widget(CrowdPanel, fake_host)
    panel.model.add_clip("generated", np.zeros((6, 8, 8, 3), np.uint8))
    job = "20260101-000000-0000ff"
    panel.jobs.follow(job, "c2r.generate")
    folder = fake_host.run_root / job / "artifacts"
    folder.mkdir(parents=True)
    np.save(folder / "generated_frames.npy", np.full((2, 8, 8, 3), 9, np.uint8))
    np.save(folder / "silhouettes.npy", np.ones((2, 8, 8), bool))
    fake_host.emit(job, "job_result", outputs={
        "frames": "artifacts/generated_frames.npy", "silhouettes": "artifacts/silhouettes.npy",
        "summary": {"start_frame": 3}})
    clip = panel.model.clips["generated"]
    assert len(clip) == 6 and (clip[3:5] == 9).all() and (clip[[0, 1, 2, 5]] == 0).all()
    assert panel.model.control_silhouettes is None  # nothing to splice them into


def test_dragging_the_mouse_moves_the_wipe_divider(make_widget, fake_host, qtbot):
    from PySide6.QtCore import QPoint, Qt

    from panels.crowd.view import MODE_WIPE, CrowdPanel

    panel = make_widget(CrowdPanel, fake_host)
    panel.model.add_clip("coarse", square_clip(4, 32, (255, 0, 0)))
    panel.model.add_clip("generated", square_clip(4, 32, (0, 255, 0)))
    panel.set_mode(MODE_WIPE)
    panel.resize(1000, 700)
    panel.show()
    qtbot.waitExposed(panel)
    label = panel.clips_label
    left = (label.width() - label.pixmap().width()) // 2
    qtbot.mousePress(label, Qt.MouseButton.LeftButton, pos=QPoint(left + 64, 20))
    assert panel.wipe_position == pytest.approx(0.25, abs=0.01)
