"""Crowd previewer: clips in sync, stepping, track markers with ids, export, finished jobs'
frames opening by themselves; the panel never imports torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.io.crowd import write_video
from panels.crowd.model import CrowdModel

pytest.importorskip("PySide6")


def moving_square(frames: int, size: int, color) -> np.ndarray:
    clip = np.zeros((frames, size, size, 3), np.uint8)
    for t in range(frames):
        clip[t, 2:6, t:t + 4] = color
    return clip


def test_clips_play_in_step_and_hold_their_last_frame():
    model = CrowdModel()
    model.add_clip("coarse", moving_square(6, 16, (255, 0, 0)))
    model.add_clip("generated", moving_square(4, 32, (0, 255, 0)))
    assert model.frame_count == 6
    seen = []
    model.events.connect("frame", lambda index: seen.append(index))
    model.step(5)
    assert model.frame == 5 and seen == [5]
    assert np.array_equal(model.frame_of("generated"), model.clips["generated"][3])
    composite = model.composite(32)
    assert composite.shape == (32, 64, 3)
    assert np.array_equal(composite[:, 32:], model.clips["generated"][3])
    model.step(1, wrap=True)
    assert model.frame == 0
    model.set_frame(99)
    assert model.frame == 5


def test_markers_follow_metric_tracks(tmp_path):
    path = tmp_path / "tracks.txt"
    path.write_text("0 1 0.0 0.0\n10 1 1.0 0.0\n20 1 2.0 0.0\n0 2 0.0 4.0\n10 2 0.0 3.0\n")
    model = CrowdModel()
    model.load_tracks(path)
    assert model.frame_count == 3
    first = {m.id: m for m in model.markers(100, 100)}
    assert set(first) == {1, 2}
    assert first[2].y < first[1].y  # north is up
    model.set_frame(2)
    last = {m.id: m for m in model.markers(100, 100)}
    assert set(last) == {1} and len(last[1].trail) == 3
    assert last[1].x > first[1].x


def test_panel_plays_steps_and_exports(make_widget, fake_host, tmp_path, qtbot):
    from PySide6.QtGui import QImage

    from panels.crowd.view import CrowdPanel

    video = write_video(tmp_path / "real.mp4", moving_square(5, 32, (200, 200, 0)), fps=5)
    tracks = tmp_path / "sim.csv"
    tracks.write_text("frame,id,x,y\n0,7,0,0\n1,7,1,0\n2,7,2,1\n")
    panel = make_widget(CrowdPanel, fake_host)
    panel.open_file(video)
    np.save(tmp_path / "coarse.npy", moving_square(5, 32, (255, 0, 0)))
    panel.open_file(tmp_path / "coarse.npy")
    panel.open_file(tracks)
    assert list(panel.model.clips) == ["real", "coarse"] and panel.model.tracks is not None
    assert panel.slider.maximum() == 4
    panel.forward_button.click()
    assert panel.model.frame == 1 and panel.frame_label.text() == "2 / 5"
    panel.slider.setValue(3)
    assert panel.model.frame == 3
    panel.play_button.setChecked(True)
    qtbot.waitUntil(lambda: panel.model.frame != 3, timeout=2000)
    panel.play_button.setChecked(False)
    out = tmp_path / "frame.png"
    panel.export_png(out)
    image = QImage(str(out))
    assert image.width() == 2 * 256 + 256 and image.height() == 256
    from engine import provenance

    made = provenance.read(out)  # which clips and tracks, which frame (it said nothing)
    assert {Path(s["path"]).name for s in made["sources"]} == {"real.mp4", "coarse.npy",
                                                                 tracks.name}
    assert made["view"]["frame"] == panel.model.frame + 1
    assert made["view"]["clips"] == ["real", "coarse"]
    figure = panel.export_figure(tmp_path / "frame-figure.png")  # Ctrl+E: 192 dpi
    assert QImage(str(figure)).width() == 2 * image.width()
    assert provenance.read(figure)["view"]["dpi"] == 192
    panel.open_file(tmp_path / "missing.mp4")
    assert fake_host.errors and "missing.mp4" in fake_host.errors[-1][1]


def test_a_finished_job_opens_its_frames(make_widget, fake_host, tmp_path):
    from panels.crowd.view import CrowdPanel

    panel = make_widget(CrowdPanel, fake_host)
    job = "20260101-000000-00000a"
    panel.jobs.follow(job, "c2r.generate")
    folder = tmp_path / "runs" / job / "artifacts"
    folder.mkdir(parents=True)
    np.save(folder / "generated_frames.npy", moving_square(3, 16, (0, 0, 255)))
    np.save(folder / "coarse_frames.npy", moving_square(3, 16, (255, 0, 0)))
    fake_host.emit(job, "job_result", outputs={"frames": "artifacts/generated_frames.npy",
                                               "coarse_frames": "artifacts/coarse_frames.npy"})
    assert set(panel.model.clips) == {"coarse", "generated"}


def test_the_panel_does_not_import_torch():
    code = "import sys, panels.crowd.view; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env={"QT_QPA_PLATFORM": "offscreen", "PATH": ""})


def test_a_runs_tracks_never_replace_the_open_ones_unasked(make_widget, fake_host, tmp_path):
    """c2r.simulate's trajectories replaced the tracks the user was editing."""
    from panels.crowd.view import CrowdPanel

    panel = make_widget(CrowdPanel, fake_host)
    mine = tmp_path / "mine.csv"
    mine.write_text("frame,id,x,y\n0,1,0,0\n1,1,1,0\n")
    asked = []
    panel.outputs.ask = lambda output, current, answer: (asked.append(current), answer(False))

    def finish(job: str) -> Path:
        panel.jobs.follow(job, "c2r.simulate")
        folder = tmp_path / "runs" / job / "artifacts"
        folder.mkdir(parents=True)
        (folder / "tracks.csv").write_text("frame,id,x,y\n0,7,0,0\n1,7,2,0\n")
        fake_host.emit(job, "job_result", outputs={"trajectories": "artifacts/tracks.csv"})
        return folder / "tracks.csv"

    first = finish("20260101-000000-00000b")  # nothing open: opens at once
    assert Path(panel.model.tracks.path) == first
    panel.open_file(mine)
    second = finish("20260101-000000-00000c")
    assert asked == ["mine.csv"] and Path(panel.model.tracks.path) == mine  # kept
    assert [output.path for output in panel.outputs.waiting] == [second]
    assert panel.outputs.open_waiting() and Path(panel.model.tracks.path) == second
