"""brainworld: synthetic subjects, the sMRI switch, training, rollouts written as NIfTI in the
source's space, bad inputs, cancel/resume, and the smoke reproduction."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from engine.context import Cancelled, JobContext
from engine.io import FormatError
from engine.methods import brainworld as bw
from engine.models.brainworld import BrainWorld, BrainWorldConfig, fc_features

SPECS = {spec.id: spec for spec in bw.SPECS}
TRAIN, GENERATE, REPRODUCE = (SPECS[f"brainworld.{verb}"]
                              for verb in ("train", "generate", "reproduce"))
NITIME_FMRI = Path(__import__("nitime").__file__).parent / "data" / "fmri1.nii.gz"
TINY = {"grid": 8, "chunk": 4, "patch": 2, "width": 32, "depth": 1, "batch_size": 4}


def _ctx(tmp_path: Path, name: str = "run", events: list | None = None) -> JobContext:
    return JobContext(name, tmp_path / name, emit=(events.append if events is not None
                                                   else lambda e: None), seed=0)


def _write(path: Path, data: np.ndarray, affine: np.ndarray, tr_s: float | None = None) -> Path:
    image = nib.Nifti1Image(data.astype(np.float32), affine)
    if tr_s is not None:
        image.header.set_zooms(image.header.get_zooms()[:3] + (tr_s,))
    nib.save(image, path)
    return path


@pytest.fixture(scope="module")
def oblique_run(tmp_path_factory) -> tuple[Path, Path, np.ndarray]:
    """A small 4D run with an oblique affine and a T1 in the same space (finer grid)."""
    folder = tmp_path_factory.mktemp("bold")
    subject = bw.synthetic_subject(7, 8, 24)
    rotation = nib.eulerangles.euler2mat(0.2, -0.1, 0.05)
    affine = np.eye(4)
    affine[:3, :3] = rotation @ np.diag([3.0, 3.5, 4.0])
    affine[:3, 3] = [-20, -15, 10]
    bold = np.moveaxis(subject.raw, 0, -1)[:, :, :7]          # 8 x 8 x 7 x 24
    fmri = _write(folder / "sub-01_bold.nii.gz", bold, affine, tr_s=2.0)
    t1_affine = affine.copy()
    t1_affine[:3, :3] /= 2
    t1 = np.kron(subject.t1[:, :, :7], np.ones((2, 2, 2))) * 500
    anat = _write(folder / "sub-01_T1w.nii.gz", t1, t1_affine)
    return fmri, anat, affine


def test_synthetic_anatomy_sets_the_coupling_and_shows_in_the_t1():
    subject = bw.synthetic_subject(3, 16, 1500)
    empirical = bw.correlation(bw.region_means(subject.raw, subject.labels))
    assert bw.upper_correlation(empirical, subject.true_fc) > 0.8
    other = bw.synthetic_subject(4, 16, 10)
    assert bw.upper_correlation(subject.true_fc, other.true_fc) < 0.9  # subjects differ
    anatomy = np.array([subject.t1[subject.labels == r + 1].mean() for r in range(8)]) - 0.6
    rows, cols = np.triu_indices(8, 1)
    np.testing.assert_array_equal(np.sign(subject.true_fc[rows, cols]),
                                  np.sign(anatomy[rows] * anatomy[cols]))  # T1 shows it
    assert subject.frames.shape == (1500, 16, 16, 16)
    assert np.allclose(subject.frames[:, subject.mask].std(0), 1, atol=1e-3)
    shorter = bw.synthetic_subject(3, 16, 20)
    np.testing.assert_array_equal(shorter.raw, subject.raw[:20])  # longer runs extend


def _perturbed(cfg: BrainWorldConfig) -> BrainWorld:
    """A model whose zero-initialised gates and output are made non-zero (as after
    training), so every condition reaches the output."""
    torch.manual_seed(0)
    model = BrainWorld(cfg)
    for name, parameter in model.denoiser.named_parameters():
        if "modulation" in name or name.startswith("out."):
            torch.nn.init.normal_(parameter, std=0.3)
    return model.eval()


def test_smri_switch_changes_the_denoisers_computation():
    cfg = BrainWorldConfig(grid=8, chunk=4, patch=2, width=32, depth=1)
    model = _perturbed(cfg)
    noisy, context = torch.randn(2, 4, 4, 2, 2, 2), torch.randn(2, 4, 4, 2, 2, 2)
    steps, fc = torch.tensor([10, 50]), fc_features(torch.randn(2, 4, 8, 8, 8), 4)
    t1_a, t1_b = torch.rand(2, 8, 8, 8), torch.rand(2, 8, 8, 8)
    with torch.no_grad():
        out_a = model.denoiser(noisy, steps, context, fc, t1_a)
        out_b = model.denoiser(noisy, steps, context, fc, t1_b)
        dropped_a = model.denoiser(noisy, steps, context, fc, t1_a, torch.tensor([False] * 2))
        dropped_b = model.denoiser(noisy, steps, context, fc, t1_b, torch.tensor([False] * 2))
    assert (out_a - out_b).abs().max() > 1e-3          # the anatomy enters the denoising
    torch.testing.assert_close(dropped_a, dropped_b)   # dropped: the null anatomy only
    assert (out_a - dropped_a).abs().max() > 1e-3
    off = _perturbed(BrainWorldConfig(grid=8, chunk=4, patch=2, width=32, depth=1,
                                      use_smri=False))
    with torch.no_grad():
        torch.testing.assert_close(off.denoiser(noisy, steps, context, fc, t1_a),
                                   off.denoiser(noisy, steps, context, fc, t1_b))
    assert not any(name.startswith("anatomy") for name, _ in off.denoiser.named_parameters())


def test_diffusion_v_parametrisation_recovers_x0():
    model = BrainWorld(BrainWorldConfig(grid=8, chunk=2, patch=2, width=16, depth=1))
    x0, eps = torch.randn(3, 2, 4, 2, 2, 2), torch.randn(3, 2, 4, 2, 2, 2)
    steps = torch.tensor([0, 40, 99])
    noisy, v = model.diffusion.noised(x0, steps, eps)
    torch.testing.assert_close(model.diffusion.x0_from_v(noisy, steps, v), x0)
    assert model.diffusion.alpha_bar[0] > 0.99 and model.diffusion.alpha_bar[-1] < 1e-3


def test_training_lowers_both_losses_in_seconds():
    subjects = [bw.synthetic_subject(s, 8, 40) for s in range(3)]
    p = TRAIN.params(**TINY, ae_steps=40, steps=60, lr=2e-3)
    trained = bw.train(p.brainworld_config(), subjects, p, 0, lambda: None)
    assert np.mean(trained.ae_losses[-10:]) < 0.9 * np.mean(trained.ae_losses[:10])
    assert np.mean(trained.losses[-15:]) < 0.85 * np.mean(trained.losses[:15])
    assert trained.cfg["steps_done"] == 60 and trained.cfg["ae_steps_done"] == 40


def test_train_generate_on_files_keeps_the_source_space(tmp_path, oblique_run):
    fmri, anat, affine = oblique_run
    events: list = []
    ctx = _ctx(tmp_path, "train", events)
    out = TRAIN.run(ctx, TRAIN.params(**TINY, ae_steps=5, steps=5),
                    {"fmri": str(fmri), "t1": str(anat)})
    checkpoint = ctx.output_dir / out["checkpoint"]
    assert json.loads((checkpoint / "cfg.json").read_text())["data"]["kind"] == "file"
    assert any(e["type"] == "job_progress" for e in events)
    gen_ctx = _ctx(tmp_path, "generate", events)
    gen = GENERATE.run(gen_ctx, GENERATE.params(start_frame=3, frames=6, sampling_steps=3),
                       {"checkpoint": str(checkpoint), "fmri": str(fmri), "t1": str(anat)})
    image = nib.load(gen_ctx.output_dir / gen["generated"])
    source = nib.load(fmri)
    assert image.shape == source.shape[:3] + (6,)
    np.testing.assert_allclose(image.affine, affine, atol=1e-5)
    assert image.header.get_zooms()[3] == pytest.approx(2.0)
    assert np.isfinite(image.get_fdata()).all()
    sidecar = json.loads((gen_ctx.output_dir / gen["sidecar"]).read_text())
    assert sidecar["BrainWorld"]["FirstGeneratedFrame"] == 7
    assert sidecar["RepetitionTime"] == 2.0 and sidecar["Sources"] == [str(fmri)]
    assert Path(gen["generated"]).name == "sub-01_desc-brainworld_bold.nii.gz"
    description = json.loads((gen_ctx.output_dir / gen["dataset_description"]).read_text())
    assert description["DatasetType"] == "derivative" and description["BIDSVersion"]
    assert description["GeneratedBy"][0]["Name"] == "Studio brainworld.generate"
    assert description["SourceDatasets"] == [{"URL": fmri.absolute().as_uri()}]
    files = [e for e in events if e["type"] == "job_artifact" and e["kind"] == "file"]
    assert {e["name"] for e in files} >= {Path(gen["generated"]).name}
    kinds = {e["name"]: e["kind"] for e in events if e["type"] == "job_artifact"}
    for name in ("tsnr_real", "tsnr_generated", "power_spectra", "fc_real", "fc_generated"):
        assert kinds[name] == "plot"
    assert set(gen["quality"]) >= {"fc_similarity", "std_ratio", "finite"}
    with pytest.raises(ValueError, match="start_frame 30"):
        GENERATE.run(_ctx(tmp_path), GENERATE.params(start_frame=30, frames=2),
                     {"checkpoint": str(checkpoint), "fmri": str(fmri)})


@pytest.mark.parametrize(("source", "stem"), [
    ("sub-01_task-rest_run-2_bold.nii.gz", "sub-01_task-rest_run-2_desc-brainworld_bold"),
    ("sub-01_space-MNI_desc-preproc_bold.nii", "sub-01_space-MNI_desc-brainworld_bold"),
    ("fmri1.nii.gz", "sub-fmri1_desc-brainworld_bold"),
])
def test_generated_file_keeps_the_sources_bids_entities(source, stem):
    assert bw._derivative_stem(Path(source), Path(source).name) == stem


def test_smri_changes_generated_frames(tmp_path):
    cfg = BrainWorldConfig(grid=8, chunk=4, patch=2, width=32, depth=1)
    model = _perturbed(cfg)
    subject = bw.synthetic_subject(1, 8, 8)
    start = subject.frames[None, :4]
    runs = {name: bw.rollout(model, start, t1[None], subject.mask, 4, use_smri=use,
                             sampling_steps=3, seed=0)
            for name, t1, use in (("a", subject.t1, True), ("b", subject.t1[::-1], True),
                                  ("off_a", subject.t1, False),
                                  ("off_b", subject.t1[::-1], False))}
    np.testing.assert_array_equal(runs["off_a"], runs["off_b"])  # switched off: T1 unused
    assert np.abs(runs["a"] - runs["b"]).max() > 1e-6          # on: another T1, other frames


def test_nitime_run_trains_on_the_mni_template(tmp_path):
    ctx = _ctx(tmp_path)
    out = TRAIN.run(ctx, TRAIN.params(**TINY, ae_steps=2, steps=2), {"fmri": str(NITIME_FMRI)})
    cfg = json.loads((ctx.output_dir / out["checkpoint"] / "cfg.json").read_text())
    assert "MNI152" in cfg["data"]["anatomy"] and cfg["tr_s"] == pytest.approx(1.35)


def test_bad_inputs_name_the_file(tmp_path, oblique_run):
    fmri, anat, affine = oblique_run
    data = np.asarray(nib.load(fmri).dataobj, dtype=np.float32)
    data[2, 2, 2, 5] = np.nan
    with_nan = _write(tmp_path / "nan_bold.nii.gz", data, affine)
    for inputs, problem in (
            ({"fmri": str(with_nan)}, "NaN"),
            ({"fmri": str(fmri), "t1": str(fmri)}, "4-D"),
            ({"fmri": str(anat)}, "3-D"),
            ({"fmri": str(fmri), "t1": str(_write(tmp_path / "far_T1w.nii.gz",
                                                  np.ones((4, 4, 4)), np.diag([1, 1, 1, 1.0])
                                                  + np.array([[0, 0, 0, 900]] * 3 + [[0] * 4])
                                                  ))}, "field of view")):
        with pytest.raises(FormatError, match=problem) as error:
            TRAIN.run(_ctx(tmp_path), TRAIN.params(**TINY, ae_steps=1, steps=1), inputs)
        named = [v for v in inputs.values() if Path(v).name in str(error.value)]
        assert named, str(error.value)
    with pytest.raises(ValueError, match="needs an fmri input"):
        TRAIN.run(_ctx(tmp_path), TRAIN.params(**TINY), {"t1": str(anat)})
    with pytest.raises(ValueError, match="checkpoint input"):
        GENERATE.run(_ctx(tmp_path), GENERATE.params(), {})
    with pytest.raises(ValueError, match="not a brainworld checkpoint"):
        GENERATE.run(_ctx(tmp_path), GENERATE.params(), {"checkpoint": str(tmp_path)})
    with pytest.raises(ValueError, match="multiple of 8"):
        TRAIN.params(grid=12)


def _cancelling(ctx: JobContext, at_call: int) -> JobContext:
    """``ctx`` whose ``at_call``-th ``check_cancelled`` asks to cancel (and so raises)."""
    calls, original = {"n": 0}, ctx.check_cancelled

    def check() -> None:
        calls["n"] += 1
        if calls["n"] == at_call:
            ctx.request_cancel()
        original()

    ctx.check_cancelled = check
    return ctx


def test_cancel_saves_a_checkpoint_and_training_resumes(tmp_path):
    ctx = _cancelling(_ctx(tmp_path, "first"), 10)
    params = TRAIN.params(**TINY, ae_steps=3, steps=40, subjects=2, frames=16)
    with pytest.raises(Cancelled):
        TRAIN.run(ctx, params, {})
    saved = ctx.output_dir / "checkpoints" / bw.CHECKPOINT
    cfg = json.loads((saved / "cfg.json").read_text())
    assert cfg["ae_steps_done"] == 3 and 0 < cfg["steps_done"] < 40
    resumed = _ctx(tmp_path, "second")
    out = TRAIN.run(resumed, params, {"checkpoint": str(saved)})
    assert out["final"]["steps_done"] == 40
    with pytest.raises(ValueError, match="same grid"):
        TRAIN.run(_ctx(tmp_path, "third"), TRAIN.params(**{**TINY, "width": 64}),
                  {"checkpoint": str(saved)})
    gen_ctx = _ctx(tmp_path, "gen")
    gen = GENERATE.run(gen_ctx, GENERATE.params(frames=5, sampling_steps=2, subject=5),
                       {"checkpoint": str(resumed.output_dir / out["checkpoint"])})
    image = nib.load(gen_ctx.output_dir / gen["generated"])
    assert image.shape == (8, 8, 8, 5)
    np.testing.assert_allclose(image.affine, bw.synthetic_affine(8))
    with gzip.open(resumed.output_dir / out["real_bold"]) as handle:
        assert handle.read(348)[344:347] == b"n+1"


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize("cancel_at", [3, 9])   # in stage 1 (2 steps done); stage 2 (4)
def test_resume_continues_exactly_as_an_uninterrupted_run(tmp_path, cancel_at):
    """Cancelled after N steps, resumed from its checkpoint == the same steps straight: the
    checkpoint holds AdamW's moments and step counts and both random generators."""
    whole = TRAIN.params(**TINY, ae_steps=4, steps=10, subjects=2, frames=16, lr=3e-3)
    straight = _ctx(tmp_path, "straight")
    done = TRAIN.run(straight, whole, {})
    part = _cancelling(_ctx(tmp_path, "part"), cancel_at)
    with pytest.raises(Cancelled):
        TRAIN.run(part, whole, {})
    saved = part.output_dir / "checkpoints" / bw.CHECKPOINT
    cfg = json.loads((saved / "cfg.json").read_text())
    assert cfg["training"]["stage"] == ("autoencoder" if cancel_at <= 4 else "diffusion")
    moments = [k for k in _weights(saved) if k.startswith("training.optimizer.")]
    assert any(k.endswith(".exp_avg_sq") for k in moments)
    assert any(k.endswith(".step") for k in moments)
    rest = _ctx(tmp_path, "rest")
    resumed = TRAIN.run(rest, whole, {"checkpoint": str(saved)})
    assert resumed["final"]["loss"] == pytest.approx(done["final"]["loss"], rel=1e-5)
    a = _weights(straight.output_dir / done["checkpoint"])
    b = _weights(rest.output_dir / resumed["checkpoint"])
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
    model, _ = bw.load_checkpoint(rest.output_dir / resumed["checkpoint"])  # weights only
    assert not any(k.startswith("training.") for k in model.state_dict())


class EchoModel:
    """A stand-in for a trained model: each patch's next chunk is its past chunk plus a
    constant of its own (``offsets``), so blending is all that shapes the frames. Its
    "latents" are the frames' 4^3 blocks stacked as channels: exact, and a latent crop at
    corner / 4 is the crop's own encoding, as with the convolutional autoencoder."""

    cfg = BrainWorldConfig(grid=8, chunk=4, patch=2, width=32, depth=1)

    def __init__(self, offsets: bool) -> None:
        self.offsets, self.seen = offsets, []

    def encode(self, frames):
        b, t, x, y, z = frames.shape
        blocks = frames.reshape(b, t, x // 4, 4, y // 4, 4, z // 4, 4)
        return blocks.permute(0, 1, 3, 5, 7, 2, 4, 6).reshape(b, t, 64, x // 4, y // 4, z // 4)

    def decode(self, latents):
        b, t, _, x, y, z = latents.shape
        blocks = latents.reshape(b, t, 4, 4, 4, x, y, z).permute(0, 1, 5, 2, 6, 3, 7, 4)
        return blocks.reshape(b, t, 4 * x, 4 * y, 4 * z)

    def sample_next(self, context, fc, t1, generator=None, **options):
        self.seen.append(context.shape[0])
        if not self.offsets:
            return context.clone()
        offsets = torch.rand(context.shape[0], generator=generator)
        return context + offsets.reshape(-1, *[1] * (context.dim() - 1))


def test_patchwise_rollout_blends_patches_without_seams():
    shape = (20, 13, 9)                     # larger than the 8^3 patch on two axes
    rng = np.random.default_rng(0)
    field = rng.standard_normal(shape).astype(np.float32)
    corners = bw.patch_corners(shape, 8, 3)
    covered = np.zeros(shape, dtype=int)
    for corner in corners:
        bw.crop(covered, corner, 8)[...] += 1
    assert covered.min() >= 1 and len(corners) == 4 * 2 * 2
    again = bw.blend_patches(shape, 8, 3, lambda group: np.stack(
        [bw.crop(field, k, 8) for k in group]))
    np.testing.assert_allclose(again, field, rtol=1e-5, atol=1e-6)   # a partition of unity
    start = np.repeat(field[None], 4, axis=0)
    mask = np.ones(shape, dtype=bool)
    echo = EchoModel(offsets=False)
    frames = bw.rollout_patches(echo, start, np.ones(shape), mask, 6, overlap=3,
                                sampling_steps=2)
    aligned = bw.patch_corners(bw.padded(field, 8).shape, 8, 3, bw.LATENT_STEP)
    assert all(v % 4 == 0 for corner in aligned for v in corner)  # on the latent grid
    assert frames.shape == (6, *shape) and sum(echo.seen) == 2 * len(aligned)
    np.testing.assert_allclose(frames, start[[0, 1, 2, 3, 0, 1]], rtol=1e-5, atol=1e-5)
    shifted = bw.rollout_patches(EchoModel(offsets=True), start, np.ones(shape), mask, 4,
                                 overlap=3)
    blended = shifted[0] - field           # the patches' constants, faded into each other
    spread = blended.max() - blended.min()
    steps = max(np.abs(np.diff(blended, axis=a)).max() for a in range(3))
    assert spread > 0.3 and steps < 0.5 * spread, (spread, steps)   # no jump from patch to patch
    small = bw.rollout_patches(echo, start[:, :5, :6, :7], np.ones((5, 6, 7)),
                               mask[:5, :6, :7], 4, overlap=3)       # smaller than a patch
    np.testing.assert_allclose(small[0], field[:5, :6, :7], rtol=1e-5, atol=1e-5)


def test_patchwise_training_and_generation_keep_the_full_resolution(tmp_path):
    subject = bw.synthetic_subject(5, 8, 24)
    bold = np.concatenate([np.moveaxis(subject.raw, 0, -1)] * 3, axis=0)[:20, :, :6]
    affine = np.array([[2.0, 0.3, 0, -20], [0, 2.5, 0, -10], [0.2, 0, 3, 5], [0, 0, 0, 1]])
    fmri = _write(tmp_path / "sub-02_bold.nii.gz", bold, affine, tr_s=1.5)   # 20 x 8 x 6 x 24
    ctx = _ctx(tmp_path, "train")
    out = TRAIN.run(ctx, TRAIN.params(**TINY, ae_steps=3, steps=3, volumes="patches"),
                    {"fmri": str(fmri)})
    checkpoint = ctx.output_dir / out["checkpoint"]
    assert json.loads((checkpoint / "cfg.json").read_text())["data"]["volumes"] == "patches"
    gen_ctx = _ctx(tmp_path, "generate")
    gen = GENERATE.run(gen_ctx, GENERATE.params(frames=5, sampling_steps=2, overlap=3),
                       {"checkpoint": str(checkpoint), "fmri": str(fmri)})
    image = nib.load(gen_ctx.output_dir / gen["generated"])
    assert image.shape == (20, 8, 6, 5)
    np.testing.assert_allclose(image.affine, affine, atol=1e-5)
    assert np.isfinite(image.get_fdata()).all() and gen["quality"]["finite"]
    with pytest.raises(ValueError, match="overlap 8"):
        GENERATE.run(_ctx(tmp_path), GENERATE.params(frames=2, overlap=8),
                     {"checkpoint": str(checkpoint), "fmri": str(fmri)})
    with pytest.raises(ValueError, match="volumes='patches'"):
        TRAIN.run(_ctx(tmp_path, "resume"), TRAIN.params(**TINY, ae_steps=3, steps=4),
                  {"checkpoint": str(checkpoint), "fmri": str(fmri)})


def test_smoke_reproduce(tmp_path):
    out = REPRODUCE.run(_ctx(tmp_path), REPRODUCE.params(smoke=True), {})
    claim = out["claim"]
    assert claim["smoke"] and claim["paper"] == "brainworld" and len(claim["criteria"]) == 4
    targets = {c["target"] for c in claim["criteria"]}
    assert targets == {1.0, 0.5, 2.0, 0.1}
    assert all(np.isfinite(c["measured"]) for c in claim["criteria"])
