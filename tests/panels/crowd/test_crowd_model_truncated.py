"""A truncated video says so (review of issue 22): when frames past a point cannot be decoded,
the clip's frame count becomes what decodes and the model reports the file and the frame where
decoding stopped, instead of playing a silently shorter clip."""

from __future__ import annotations

import imageio_ffmpeg
import numpy as np
import pytest

from panels.crowd import model as crowd_model
from panels.crowd.model import CrowdModel, VideoClip

FRAMES = 60


@pytest.fixture
def cut_clip(tmp_path):
    """An MP4 whose index (moov, at the front) declares 60 frames, cut half-way through its
    frame data: about the first 29 frames decode."""
    whole = tmp_path / "whole.mp4"
    writer = imageio_ffmpeg.write_frames(
        str(whole), (64, 48), fps=10, codec="libx264", pix_fmt_out="yuv420p",
        macro_block_size=1, ffmpeg_log_level="error",
        output_params=["-movflags", "+faststart", "-g", "10"])
    writer.send(None)
    for t in range(FRAMES):  # noise: every frame holds data, so the cut loses frames
        writer.send(np.random.default_rng(t).integers(0, 255, (48, 64, 3), dtype=np.uint8))
    writer.close()
    cut = tmp_path / "cut.mp4"
    data = whole.read_bytes()
    cut.write_bytes(data[:len(data) // 2])
    return cut


def _decodable(path) -> int:
    return sum(1 for _ in crowd_model.iter_video_frames(path))


def test_playback_past_the_cut_shortens_the_clip_and_says_where(cut_clip, monkeypatch):
    monkeypatch.setattr(crowd_model, "IN_MEMORY_CLIP_BYTES", 1000)
    decodable = _decodable(cut_clip)
    assert 5 < decodable < FRAMES - 5
    model = CrowdModel()
    said: list[str] = []
    model.events.connect("problem", lambda message: said.append(message))
    model.load_clip("real", cut_clip)
    clip = model.clips["real"]
    assert isinstance(clip, VideoClip) and model.frame_count == FRAMES  # as declared
    for t in range(decodable + 3):  # playback through the cut
        model.set_frame(t)
        model.frame_of("real")
    assert len(clip) == model.frame_count == decodable
    assert model.frame == decodable - 1
    expected = (f"{cut_clip}: decoding stopped at frame {decodable + 1} of the {FRAMES} its "
                f"container declares")
    assert said and said[0].startswith(expected), said
    assert model.problems["real"] == said[0] and clip.problem == said[0]


def test_a_seek_past_the_cut_finds_the_last_frame_that_decodes(cut_clip):
    decodable = _decodable(cut_clip)
    clip = VideoClip(cut_clip, crowd_model.video_info(cut_clip))
    said: list[str] = []
    clip.on_shortened = said.append
    last = clip[50]  # far past the cut: one seek fails, bisection finds where it stops
    assert len(clip) == decodable and np.array_equal(last, clip[decodable - 1])
    assert f"decoding stopped at frame {decodable + 1}" in said[0]
    clip.close()


def test_a_whole_clip_with_a_rounded_duration_says_nothing(tmp_path):
    frames = np.zeros((30, 48, 64, 3), np.uint8)
    from engine.io.crowd import write_video

    path = write_video(tmp_path / "ok.mp4", frames, fps=10)
    info = crowd_model.video_info(path)
    info.frames += 1  # a container duration rounded up by one frame
    clip = VideoClip(path, info)
    said: list[str] = []
    clip.on_shortened = said.append
    clip[30]
    assert len(clip) == 30 and said == [] and clip.problem == ""
    clip.close()
