"""c2r: toy crowds in two looks, the renderer's two-stage switch, training, generation,
simulation vs real tracks, and the smoke reproduction. MiniLM is replaced by a fixed random
table here (it takes seconds to load); ``test_prompt_embeddings_are_cached`` covers the cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.io.crowd import read_tracks, read_video
from engine.methods import c2r
from engine.models.video_denoiser import VideoDenoiserConfig

SPECS = {spec.id: spec for spec in c2r.SPECS}
CACHED_MINILM = c2r.embed_prompts  # before the fixture swaps it out
ZARA1 = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "crowd" / \
    "zara1_crowds_zara01.txt"
TINY = VideoDenoiserConfig(image_size=16, frames=2, channels=8)
SMALL_SCENE = {
    "ground": {"size": [16, 16]},
    "buildings": [{"center": [0, 6], "size": [4, 2], "height": 5}],
    "groups": [{"count": 4, "spawn_center": [-5, -3], "goal": [5, 2]}],
    "camera": [{"t_s": 0, "position": [0, -10, 5], "look_at": [0, 0, 0]}],
    "prompt": "people crossing a square", "duration_s": 2, "fps": 2,
}


def fake_embed(texts, cache=None):
    table = {}
    for text in texts:
        table[text] = np.random.default_rng(abs(hash(text)) % 2**32).normal(
            size=384).astype(np.float32)
    return np.stack([table[t] for t in texts])


@pytest.fixture(autouse=True)
def no_minilm(monkeypatch):
    monkeypatch.setattr(c2r, "embed_prompts", fake_embed)


@pytest.fixture(scope="module")
def clips():
    return c2r.toy_clips(6, 2, 16, seed=0)


def context(tmp_path, events=None):
    return JobContext("j", tmp_path, emit=(events.append if events is not None
                                           else lambda e: None), seed=0)


# -- toy data and controls -----------------------------------------------------------------------

def test_toy_clips_share_geometry_across_looks(clips):
    assert clips.real.shape == clips.synthetic.shape == (6, 2, 16, 16, 3)
    assert clips.silhouette.any(axis=(1, 2, 3)).all()  # everyone is in view somewhere
    assert np.abs(clips.real - clips.synthetic).mean() > 0.05
    sky = clips.disparity == 0
    assert np.allclose(clips.synthetic[sky], clips.synthetic[sky][0], atol=1e-6)
    assert (clips.disparity[clips.silhouette] > 0).all()


def test_coarsening_levels(clips):
    exact = c2r.coarsen(clips.silhouette, clips.disparity, 0)
    assert exact.shape == (6, 2, 2, 16, 16)
    assert np.array_equal(exact[:, :, 0] > 0, clips.silhouette)
    coarse = c2r.coarsen(clips.silhouette, clips.disparity, 2)
    assert ((coarse[:, :, 0] > 0) >= clips.silhouette).all()
    assert (coarse[:, :, 0] > 0).sum() > clips.silhouette.sum()
    block = coarse[0, 0, 1, :4, :4]
    assert np.allclose(block, block[0, 0])


# -- the renderer ---------------------------------------------------------------------------------

def test_two_stage_switch_changes_the_computation(clips, monkeypatch):
    plan_b = c2r.training_plan(True, 3, 2)
    plan_a = c2r.training_plan(False, 3, 2)
    assert [s.real_share for s in plan_b] == [1.0, 0.5] and [s.steps for s in plan_b] == [3, 2]
    assert [(s.real_share, s.steps) for s in plan_a] == [(0.0, 5)]
    drawn = []
    original = c2r.draw_batch

    def recording(*args, **kwargs):
        batch = original(*args, **kwargs)
        drawn.append(batch.domain.copy())
        return batch

    monkeypatch.setattr(c2r, "draw_batch", recording)
    vectors = fake_embed([p for p, _ in c2r.PROMPTS])
    trained = {}
    for name, plan in (("A", plan_a), ("B", plan_b)):
        drawn.clear()
        trained[name] = c2r.train_renderer(clips, clips, vectors, TINY, plan, 4, 1e-3, 0,
                                           lambda: None)
        trained[name].domains = [d.tolist() for d in drawn]
    assert trained["A"].domains == [[c2r.SYNTHETIC] * 4] * 5
    assert trained["B"].domains[:3] == [[c2r.REAL] * 4] * 3
    assert trained["B"].domains[3:] == [[c2r.REAL] * 2 + [c2r.SYNTHETIC] * 2] * 2
    assert {n for n, _ in trained["B"].losses} == {s.name for s in plan_b}
    a, b = (trained[n].model.state_dict() for n in ("A", "B"))
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_training_lowers_the_loss(clips):
    vectors = fake_embed([p for p, _ in c2r.PROMPTS])
    trained = c2r.train_renderer(clips, clips, vectors, TINY, c2r.training_plan(True, 40, 40),
                                 8, 3e-3, 0, lambda: None)
    losses = np.array([v for _, v in trained.losses])
    assert losses[-15:].mean() < 0.6 * losses[:5].mean()
    control = c2r.coarsen(clips.silhouette[:2], clips.disparity[:2], 0)
    first = c2r.generate_clips(trained.model, control, vectors[:2], c2r.REAL, 3, seed=1)
    again = c2r.generate_clips(trained.model, control, vectors[:2], c2r.REAL, 3, seed=1)
    assert first.shape == (2, 2, 16, 16, 3) and np.array_equal(first, again)
    assert first.min() >= 0 and first.max() <= 1


def test_probes_tell_the_looks_apart(clips):
    probes = c2r.train_probes(clips, 150, 0, lambda: None)
    real = c2r.judge(probes, clips.real, clips.silhouette)
    flat = c2r.judge(probes, clips.synthetic, clips.silhouette)
    assert real.called_real > flat.called_real
    assert flat.silhouette_iou > 0.4 and real.silhouette_iou > 0.4


def test_prompt_embeddings_are_cached(tmp_path, monkeypatch):
    import engine.corpora

    calls = []

    def counting(texts):
        calls.append(list(texts))
        return fake_embed(list(texts))

    monkeypatch.setattr(engine.corpora, "embed_texts", counting)
    first = CACHED_MINILM(["a", "b"], tmp_path)
    second = CACHED_MINILM(["b", "a"], tmp_path)
    assert calls == [["a", "b"]]
    assert np.array_equal(first[::-1], second) and first.shape == (2, 384)


# -- the methods ----------------------------------------------------------------------------------

def test_train_then_generate_from_a_scene(tmp_path):
    params = c2r.TrainParams(steps_stage1=2, steps_stage2=2, real_clips=3, synthetic_clips=2,
                             image_size=16, frames=2, channels=8, batch_size=2, sample_steps=2)
    events = []
    out = SPECS["c2r.train"].run(context(tmp_path / "train", events), params, {})
    assert (tmp_path / "train" / out["checkpoint"] / "model.safetensors").is_file()
    assert any(e["type"] == "job_progress" for e in events)
    previews = np.load(tmp_path / "train" / out["previews"])
    assert previews.shape == (4, 2, 16, 48, 3)
    scene = tmp_path / "scene.json"
    scene.write_text(json.dumps(SMALL_SCENE))
    result = SPECS["c2r.generate"].run(
        context(tmp_path / "gen"), c2r.GenerateParams(sample_steps=2),
        {"checkpoint": str(tmp_path / "train" / out["checkpoint"]), "scene": str(scene)})
    frames = np.load(tmp_path / "gen" / result["frames"])
    assert frames.shape == (4, 16, 16, 3) and frames.dtype == np.uint8
    video, info = read_video(tmp_path / "gen" / result["video"])
    assert info.frames == 4 and (info.width, info.height) == (16, 16)
    assert result["summary"]["prompt"] == "people crossing a square"


def test_simulate_a_scene_fitted_to_real_tracks(tmp_path):
    if not ZARA1.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{ZARA1} is missing")
        pytest.skip("../shared/data/crowd is not here")
    scene = tmp_path / "scene.json"
    scene.write_text(json.dumps(SMALL_SCENE))
    params = c2r.SimulateParams(width=32, height=24, max_frames=3, fit_iterations=20)
    out = SPECS["c2r.simulate"].run(context(tmp_path / "run"), params,
                                    {"scene": str(scene), "tracks": str(ZARA1)})
    rows = {row[0]: row for row in json.loads(
        (tmp_path / "run" / out["statistics"]).read_text())["rows"]}
    gap = {name: rows[name][-1] for name in rows if name.startswith("replay")}
    assert gap["replay, fitted parameters"] < gap["replay, default parameters"]
    assert out["summary"]["fitted"] and out["summary"]["agents"] == 4
    tracks = read_tracks(tmp_path / "run" / out["trajectories"])
    assert len(tracks.ids) == 4 and tracks.frame_rate_hz == pytest.approx(2.0)
    assert np.load(tmp_path / "run" / out["coarse_depth"]).shape == (3, 24, 32)
    assert (np.load(tmp_path / "run" / out["coarse_person_ids"]) >= 0).any()


def test_bad_parameters_and_inputs(tmp_path):
    with pytest.raises(ValidationError, match="multiple of 4"):
        c2r.TrainParams(image_size=30)
    with pytest.raises(ValidationError, match="unknown|extra"):
        c2r.GenerateParams(temperature=1.0)
    with pytest.raises(ValueError, match="'checkpoint' input"):
        SPECS["c2r.generate"].run(context(tmp_path / "g"), c2r.GenerateParams(), {})
    with pytest.raises(ValueError, match="not a c2r renderer checkpoint"):
        c2r.load_renderer(tmp_path)
    mot = tmp_path / "gt.txt"
    mot.write_text("1,1,10,20,4,30,1,-1,-1,-1\n2,1,12,20,4,30,1,-1,-1,-1\n")
    with pytest.raises(ValueError, match="in px"):
        SPECS["c2r.simulate"].run(context(tmp_path / "s"), c2r.SimulateParams(),
                                  {"tracks": str(mot)})


def test_cancel_stops_training(tmp_path):
    ctx = context(tmp_path)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        SPECS["c2r.train"].run(ctx, c2r.TrainParams(real_clips=2, synthetic_clips=2), {})


def test_smoke_reproduce(tmp_path):
    out = SPECS["c2r.reproduce"].run(context(tmp_path), c2r.C2RReproduceParams(smoke=True), {})
    claim = out["claim"]
    assert claim["smoke"] and claim["paper"] == "c2r" and len(claim["criteria"]) == 4
    targets = [(c["target"], c["op"]) for c in claim["criteria"]]
    assert targets == [(0.7, ">="), (0.7, ">="), (0.7, ">="), (0.3, "<=")]
    assert all(0 <= c["measured"] <= 1 for c in claim["criteria"])
    assert (tmp_path / out["sample_video"]).is_file()


# -- training on the user's footage --------------------------------------------------------------

def street_footage(frames: int = 12, size: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """A fixed camera's clip: a textured street and two people (bright blocks) walking across,
    one near (low in the frame), one far. Returns (video uint8, the people's masks)."""
    rng = np.random.default_rng(0)
    street = np.repeat(rng.integers(60, 110, (size, size, 1)), 3, axis=2).astype(np.uint8)
    video = np.repeat(street[None], frames, axis=0)
    masks = np.zeros((frames, size, size), bool)
    for t in range(frames):
        masks[t, 30:42, 2 + 3 * t:8 + 3 * t] = True   # near: feet at row 41
        masks[t, 10:16, 44 - 3 * t:47 - 3 * t] = True  # far: feet at row 15
    video[masks] = (235, 220, 60)
    return video, masks


def test_footage_controls_mark_the_moving_blobs():
    video, masks = street_footage()
    rgb = c2r.square_frames(video, 48)
    silhouettes = c2r.background_silhouettes(rgb)
    iou = (silhouettes & masks).sum((1, 2)) / (silhouettes | masks).sum((1, 2))
    assert iou.min() > 0.9
    disparity = c2r.ground_disparity(silhouettes)
    near, far = disparity[0][masks[0] & (np.arange(48)[None, :] < 20)], \
        disparity[0][masks[0] & (np.arange(48)[None, :] > 30)]
    assert np.allclose(near, 41.5 / 48) and np.allclose(far, 15.5 / 48)  # ground at the feet
    assert disparity[0, 47, 20] > disparity[0, 0, 20]  # nearer ground is lower in the frame


def test_stage_one_trains_on_user_footage(tmp_path, monkeypatch):
    from engine.io.crowd import write_video

    video, masks = street_footage()
    path = write_video(tmp_path / "street.mp4", video, fps=10)  # H.264 via imageio-ffmpeg
    seen = []
    original = c2r.draw_batch
    monkeypatch.setattr(c2r, "draw_batch", lambda rng, real, *rest: (
        seen.append(real.prompt[0]), original(rng, real, *rest))[1])
    params = c2r.TrainParams(steps_stage1=2, steps_stage2=1, synthetic_clips=2, image_size=16,
                             frames=4, channels=8, batch_size=2, sample_steps=1,
                             footage_prompt="a sunny street")
    out = SPECS["c2r.train"].run(context(tmp_path / "train"), params, {"footage": str(path)})
    assert out["footage"]["clips"] == 5  # windows of 4 frames every 2 of 12
    assert seen and set(seen) == {len(c2r.PROMPTS)}  # every batch's real clips: the footage
    controls = np.load(tmp_path / "train" / out["footage_controls"])
    small = masks[:4].reshape(4, 16, 3, 16, 3).mean((2, 4)) > 0.5
    silhouettes = controls[..., :16] > 0.5
    assert (silhouettes & small).sum() / small.sum() > 0.8 and silhouettes[~small].mean() < 0.05
    cfg = json.loads((tmp_path / "train" / out["checkpoint"] / "cfg.json").read_text())
    assert cfg["prompts"][-1] == "a sunny street"
    with pytest.raises(ValueError, match="footage.*two_stage"):
        SPECS["c2r.train"].run(context(tmp_path / "a"), params.model_copy(
            update={"two_stage": False}), {"footage": str(path)})
    with pytest.raises(ValueError, match="at least `frames`"):
        SPECS["c2r.train"].run(context(tmp_path / "b"), params.model_copy(
            update={"frames": 8}), {"footage": str(write_video(tmp_path / "short.mp4",
                                                               video[:5], fps=10))})


def test_simulate_walks_a_scene_with_its_own_parameters(tmp_path):
    """A scene that carries social-force parameters (the scene editor's fit or hand edits) is
    walked with them, so "Render coarse" shows what the editor simulated."""
    from engine.crowd import social_force as sf
    from engine.io.crowd import tracks_from_array

    slow = {**sf.SocialForceParams().to_dict(), "desired_speed_mps": 0.6, "fitted_to": ""}
    params = c2r.SimulateParams(fit=False, width=32, height=24, max_frames=2)
    walks = {}
    for name, data in (("plain", SMALL_SCENE), ("slow", {**SMALL_SCENE, "social_force": slow})):
        scene = tmp_path / f"{name}.json"
        scene.write_text(json.dumps(data))
        out = SPECS["c2r.simulate"].run(context(tmp_path / name), params, {"scene": str(scene)})
        walks[name] = read_tracks(tmp_path / name / out["trajectories"])
        parsed = c2r.read_scene(scene)
        sim, _ = sf.simulate_scene(parsed, sf.scene_params(parsed), seed=0)
        same = tracks_from_array(sim.positions, parsed.fps, alive=sim.alive)
        assert np.allclose(walks[name].xy, same.xy, atol=1e-3)  # as the scene editor walks it
    assert not np.allclose(walks["plain"].xy, walks["slow"].xy, atol=1e-3)
