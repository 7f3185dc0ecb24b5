"""Long videos open as ``VideoClip``s: metadata first, frames decoded on demand through one
open decoder (playback) or a seek, a few cached; short clips stay arrays as before."""

from __future__ import annotations

import numpy as np
import pytest

from engine.io import FormatError
from engine.io.crowd import read_video, write_video
from panels.crowd import model as crowd_model
from panels.crowd.model import CrowdModel, VideoClip


@pytest.fixture
def clip_path(tmp_path):
    frames = np.zeros((30, 48, 64, 3), np.uint8)
    for t in range(30):
        frames[t, :, 2 * t:2 * t + 8] = 250  # a bar moving right: every frame differs
    return write_video(tmp_path / "walk.mp4", frames, fps=10)


def test_a_large_video_plays_from_one_decoder_without_decoding_every_frame(
        clip_path, monkeypatch):
    decoded = read_video(clip_path)[0]
    monkeypatch.setattr(crowd_model, "IN_MEMORY_CLIP_BYTES", 1000)
    model = CrowdModel()
    model.load_clip("real", clip_path)
    clip = model.clips["real"]
    assert isinstance(clip, VideoClip) and clip.shape == decoded.shape and model.fps == 10
    for t in range(12):  # playback: frames in order from one decoder
        model.set_frame(t)
        assert np.array_equal(model.frame_of("real"), decoded[t])
    assert clip.decoders_opened == 1
    assert len(clip._cache) == crowd_model.CLIP_CACHE_FRAMES
    model.set_frame(25)  # a short jump forward reads on from the open decoder
    assert np.array_equal(model.composite(), decoded[25])
    model.set_frame(26)
    assert np.array_equal(model.frame_of("real"), decoded[26]) and clip.decoders_opened == 1
    model.set_frame(2)  # back to a cached-out frame: a seek opens a decoder there
    assert np.array_equal(model.frame_of("real"), decoded[2]) and clip.decoders_opened == 2
    monkeypatch.setattr(crowd_model, "SKIP_AHEAD_FRAMES", 4)
    model.set_frame(20)  # a long jump forward seeks too
    assert np.array_equal(model.frame_of("real"), decoded[20]) and clip.decoders_opened == 3
    np.testing.assert_array_equal(clip[28:30], decoded[28:30])


def test_whole_clip_access_is_within_the_memory_budget(clip_path, monkeypatch):
    clip = VideoClip(clip_path, crowd_model.video_info(clip_path))
    assert np.asarray(clip).shape == (30, 48, 64, 3)
    monkeypatch.setenv("STUDIO_MAX_DECOMPRESSED_BYTES", "100000")
    with pytest.raises(FormatError, match="walk.mp4: over the decompressed size budget"):
        np.asarray(clip)
    clip.close()


def test_a_container_promising_more_frames_than_it_holds_ends_at_the_last_one(clip_path):
    info = crowd_model.video_info(clip_path)
    info.frames += 3
    clip = VideoClip(clip_path, info)
    last = clip[31]  # past the stream's end: the clip shrinks to what decodes
    assert len(clip) < 33 and np.array_equal(last, clip[len(clip) - 1])
    clip.close()


def test_short_clips_are_still_arrays(clip_path):
    model = CrowdModel()
    model.load_clip("real", clip_path)
    assert isinstance(model.clips["real"], np.ndarray) and model.clips["real"].shape[0] == 30
