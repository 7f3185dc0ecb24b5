"""What the previewer's "Regenerate frames" asks of the engine: ``c2r.generate`` walks the
edited tracks (not a fresh simulation) and renders only the chosen frame range."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.context import JobContext
from engine.io.crowd import tracks_from_array
from engine.methods import c2r

torch = pytest.importorskip("torch")

SCENE = {
    "ground": {"size": [16, 16]},
    "camera": [{"t_s": 0, "position": [0, -10, 5], "look_at": [0, 0, 0]}],
    "prompt": "people crossing a square", "duration_s": 3, "fps": 2,
}


def untrained_checkpoint(folder):
    from safetensors.torch import save_file

    from engine.models.video_denoiser import VideoDenoiser, VideoDenoiserConfig

    torch.manual_seed(0)
    cfg = VideoDenoiserConfig(image_size=16, frames=2, channels=8)
    folder.mkdir(parents=True)
    save_file(VideoDenoiser(cfg).state_dict(), str(folder / "model.safetensors"))
    (folder / "cfg.json").write_text(json.dumps(cfg.__dict__))
    return folder


def generate(tmp_path, name, tracks, start_frame, monkeypatch):
    monkeypatch.setattr(c2r, "embed_prompts",
                        lambda texts, cache=None: np.zeros((len(texts), 384), np.float32))
    path = tmp_path / f"{name}.csv"
    path.write_text(tracks.to_csv())
    scene = tmp_path / "scene.json"
    scene.write_text(json.dumps(SCENE))
    ctx = JobContext("j", tmp_path / name, emit=lambda e: None, seed=0)
    out = c2r.run_generate(ctx, c2r.GenerateParams(start_frame=start_frame, max_frames=2,
                                                   sample_steps=1),
                           {"checkpoint": str(untrained_checkpoint(tmp_path / f"ck-{name}")),
                            "scene": str(scene), "tracks": str(path)})
    return (np.load(tmp_path / name / out["coarse_frames"]),
            np.load(tmp_path / name / out["silhouettes"]), out["summary"])


def test_generate_walks_the_edited_tracks_over_the_frame_range(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    positions = np.zeros((6, 2, 2))
    positions[:, 0] = np.c_[np.linspace(-3, 3, 6), np.zeros(6)]
    positions[:, 1] = [2.0, 2.0]
    original = tracks_from_array(positions, 2.0)
    edited_positions = positions.copy()
    edited_positions[4, 1] = [-2.0, -2.0]           # person 1 dragged at frame 4
    edited = tracks_from_array(edited_positions, 2.0)
    coarse, silhouettes, summary = generate(tmp_path, "original", original, 4, monkeypatch)
    moved, moved_silhouettes, _ = generate(tmp_path, "edited", edited, 4, monkeypatch)
    assert coarse.shape == (2, 16, 16, 3) and summary["start_frame"] == 4
    assert silhouettes[0].any()
    assert not np.array_equal(silhouettes[0], moved_silhouettes[0])  # the moved frame
    assert np.array_equal(silhouettes[1], moved_silhouettes[1])      # the frame after it
    full, full_silhouettes, _ = generate(tmp_path, "from-start", original, 0, monkeypatch)
    assert not np.array_equal(full_silhouettes[0], silhouettes[0])
