"""bitdance: sign tokenizer, entropy loss, AR heads, patch decoding, jobs; tiny sizes only."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.io import FormatError
from engine.methods import bitdance
from engine.models.bitdance_ar import BitAR, BitARConfig
from engine.models.bitdance_tokenizer import (
    BinaryTokenizerConfig,
    codes_to_index,
    grouped_entropy_loss,
    index_to_codes,
    sign_quantise,
)

SPECS = {spec.id: spec for spec in bitdance.SPECS}
TRAIN = SPECS["bitdance.train"]
REPRODUCE = SPECS["bitdance.reproduce"]


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    return bitdance.load_digit_images(8)


def random_tokens(n: int, tokens: int, bits: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.where(torch.rand(n, tokens, bits, generator=generator) < 0.5, 1.0, -1.0)


def tiny_ar(head: str = "diffusion", patch_tokens: int = 1, tokens: int = 16, bits: int = 4,
            **overrides) -> BitAR:
    torch.manual_seed(0)
    cfg = BitARConfig(tokens=tokens, bits=bits, n_classes=3, patch_tokens=patch_tokens, head=head,
                      d_model=16, n_heads=2, n_layers=1, head_width=16, head_layers=1,
                      sample_steps=4, **overrides)
    return BitAR(cfg).eval()


# -- tokenizer ---------------------------------------------------------------------------------

def test_sign_quantiser_is_exact_idempotent_and_straight_through():
    z = torch.randn(50, 8, requires_grad=True)
    codes = sign_quantise(z)
    assert set(codes.unique().tolist()) <= {-1.0, 1.0}
    assert torch.equal(sign_quantise(codes), codes)  # codes are fixed points
    assert torch.equal(codes, torch.where(z >= 0, 1.0, -1.0))
    (codes * torch.arange(8.0)).sum().backward()
    assert torch.equal(z.grad, torch.arange(8.0).expand(50, 8))  # identity gradient


def test_code_index_round_trip_covers_every_code():
    every = torch.arange(2 ** 6)
    codes = index_to_codes(every, 6)
    assert len({tuple(c) for c in codes.tolist()}) == 64
    assert torch.equal(codes_to_index(codes), every)


def test_pixel_tokens_round_trip_exactly(digits):
    images, _ = digits
    for block in (1, 2, 4):
        tokens = bitdance.pixel_tokens(images[:20], block)
        assert tokens.shape == (20, (8 // block) ** 2, block * block)
        pixels = bitdance.pixels_from_tokens(tokens, block)
        assert np.array_equal(pixels, (images[:20] > 0.5).astype(np.float32))
        assert np.array_equal(bitdance.pixel_tokens(pixels, block), tokens)


def test_learned_tokenizer_codes_decode_and_reencode_and_training_lowers_error(digits):
    images, _ = digits
    cfg = BinaryTokenizerConfig(image_size=8, patch=2, bits=8, channels=16)
    tokenizer, reconstruction = bitdance.train_tokenizer(cfg, images, steps=120, batch_size=32,
                                                         lr=3e-3, seed=0,
                                                         check_cancelled=lambda: None)
    assert np.mean(reconstruction[-20:]) < 0.6 * np.mean(reconstruction[:20])
    with torch.no_grad():
        codes = tokenizer.encode(torch.from_numpy(images[:200]))
        assert codes.shape == (200, 16, 8) and set(codes.unique().tolist()) == {-1.0, 1.0}
        decoded = tokenizer.decode(codes)
        assert decoded.shape == (200, 8, 8) and decoded.min() >= 0 and decoded.max() <= 1
        again = tokenizer.encode(decoded)  # decode then encode: mostly the same codes
    assert (again == codes).float().mean() > 0.8


# -- grouped entropy loss ----------------------------------------------------------------------

def test_entropy_loss_prefers_confident_balanced_codes():
    balanced = 3 * index_to_codes(torch.arange(256), 8)  # every code once, far from 0
    collapsed = 3 * torch.ones(256, 8)  # one code for everything
    unsure = 0.01 * torch.randn(256, 8)  # near 0: every code equally likely per sample
    loss = {name: grouped_entropy_loss(z, group_bits=4)
            for name, z in (("balanced", balanced), ("collapsed", collapsed), ("unsure", unsure))}
    assert loss["balanced"][1] < 0.1 and math.isclose(loss["balanced"][2], 2 * math.log(16),
                                                      rel_tol=1e-3)
    assert loss["collapsed"][2] < 0.1
    assert loss["unsure"][1] > 2 * math.log(16) * 0.99
    assert loss["balanced"][0] < loss["collapsed"][0] and loss["balanced"][0] < loss["unsure"][0]


def usage_imbalance_after_descent(term: int, steps: int = 300) -> tuple[float, float]:
    """Gradient descent on free latents (most bits +1) under one output of the entropy loss:
    0 = the full loss, 2 = the codebook entropy alone (maximised). Mean |P(bit = +1) - 1/2|
    before and after."""
    torch.manual_seed(0)
    z = (torch.randn(512, 8) + 1.0).requires_grad_()
    optimizer = torch.optim.Adam([z], lr=0.05)
    before = ((z > 0).float().mean(0) - 0.5).abs().mean().item()
    for _ in range(steps):
        outputs = grouped_entropy_loss(z, group_bits=4)
        loss = outputs[0] if term == 0 else -outputs[2]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return before, ((z > 0).float().mean(0) - 0.5).abs().mean().item()


def test_entropy_loss_pushes_bit_usage_toward_balance():
    before, after = usage_imbalance_after_descent(term=0)
    assert before > 0.3 and after < before - 0.08  # full loss: balance vs per-sample confidence
    before, after = usage_imbalance_after_descent(term=2)
    assert after < 0.05  # the codebook term alone balances usage


# -- the AR model and its heads ----------------------------------------------------------------

def test_heads_change_the_computation():
    tokens, labels = random_tokens(4, 16, 4), torch.tensor([0, 1, 2, 0])
    models = {head: tiny_ar(head) for head in ("diffusion", "bernoulli", "softmax")}
    for head in ("bernoulli", "softmax"):  # zero logits: uniform over bits / over codes
        torch.nn.init.zeros_(models[head].logits.weight)
        torch.nn.init.zeros_(models[head].logits.bias)
    torch.manual_seed(1)
    losses = {head: model.loss(tokens, labels).item() for head, model in models.items()}
    assert math.isclose(losses["bernoulli"], math.log(2), rel_tol=1e-6)
    assert math.isclose(losses["softmax"], math.log(16), rel_tol=1e-6)
    assert not math.isclose(losses["diffusion"], losses["bernoulli"], rel_tol=0.01)
    assert not hasattr(tiny_ar("diffusion"), "logits")
    with pytest.raises(ValueError, match="softmax"):
        BitARConfig(tokens=4, bits=16, head="softmax")


def test_joint_patch_head_couples_tokens_and_per_token_head_does_not():
    h = torch.randn(2, 4, 16)
    z = torch.randn(2, 4, 4)
    t = torch.full((2, 1, 1), 0.5)
    moved = z.clone()
    moved[:, 1] += 1.0
    for head, coupled in (("patch_diffusion", True), ("diffusion", False)):
        denoiser = tiny_ar(head, patch_tokens=4).denoiser
        for p in denoiser.parameters():  # zero-initialised modulations would hide the effect
            torch.nn.init.normal_(p, std=0.3)
        with torch.no_grad():
            delta = (denoiser(moved, t, h)[:, 0] - denoiser(z, t, h)[:, 0]).abs().max()
        assert (delta > 1e-4) == coupled, head


def test_hidden_state_sees_earlier_patches_only():
    model = tiny_ar("bernoulli", patch_tokens=4)
    tokens, labels = random_tokens(1, 16, 4), torch.tensor([1])
    changed = tokens.clone()
    changed[:, 5] *= -1  # a token of patch 1 (tokens 4..7)
    with torch.no_grad():
        delta = (model.hidden(changed, labels) - model.hidden(tokens, labels)).abs().amax(-1)[0]
    assert (delta[:8] < 1e-6).all() and (delta[8:] > 1e-6).all()


@pytest.mark.parametrize("head", ["patch_diffusion", "softmax"])
def test_patch_decoding_makes_k_tokens_a_step(head, monkeypatch):
    model = tiny_ar(head, patch_tokens=4)
    shapes = []
    original = model.sample_head

    def counting(h, generator=None):
        out = original(h, generator)
        shapes.append(tuple(out.shape))
        return out

    monkeypatch.setattr(model, "sample_head", counting)
    tokens = model.generate(torch.tensor([0, 2]))
    assert shapes == [(2, 4, 4)] * 4
    assert tokens.shape == (2, 16, 4) and set(tokens.unique().tolist()) <= {-1.0, 1.0}


def test_patch_decoding_is_faster_per_image_than_sequential():
    cfg = tiny_ar("patch_diffusion", patch_tokens=4).cfg
    sequential = bitdance.decode_seconds_per_image(cfg, 1, 3)
    parallel = bitdance.decode_seconds_per_image(cfg, 4, 3)
    assert parallel < sequential


@pytest.mark.parametrize("head", ["diffusion", "bernoulli"])
def test_training_lowers_loss(head, digits):
    images, labels = digits
    tokens = bitdance.pixel_tokens(images[:300], 2)
    cfg = tiny_ar(head).cfg
    _, losses = bitdance.train_ar(cfg, tokens, labels[:300] % 3, steps=80, batch_size=32,
                                  lr=3e-3, seed=0, check_cancelled=lambda: None)
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])


# -- metrics -----------------------------------------------------------------------------------

def test_hamming_mmd_separates_distributions():
    rng = np.random.default_rng(0)
    a = np.where(rng.random((300, 16)) < 0.5, 1.0, -1.0)
    b = np.where(rng.random((300, 16)) < 0.5, 1.0, -1.0)
    skewed = np.where(rng.random((300, 16)) < 0.9, 1.0, -1.0)
    same, different = bitdance.hamming_mmd(a, b), bitdance.hamming_mmd(a, skewed)
    floor = math.sqrt(2 / 300 * (1 - np.mean(np.exp(-(16 - a @ b.T) / 2 / 2))))
    assert same < 1.3 * floor and different > 3 * same
    assert bitdance.hamming_mmd(a, a) == 0


def test_image_grid_places_tiles_by_row():
    tiles = np.stack([np.full((2, 2), v, dtype=np.float32) for v in range(6)])
    grid = bitdance.image_grid(tiles, rows=2)
    assert grid.shape == (5, 8)
    assert grid[0, 0] == 0 and grid[0, 3] == 1 and grid[3, 0] == 3 and grid[4, 7] == 5


# -- data and parameters -----------------------------------------------------------------------

def test_image_folder_loads_and_bad_folders_name_the_problem(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    for i in range(3):
        Image.fromarray(np.full((20, 30, 3), 80 * i, dtype=np.uint8)).save(good / f"{i}.png")
    images = bitdance.load_image_folder(good, 8)
    assert images.shape == (3, 8, 8) and np.allclose(images[2], 160 / 255, atol=0.01)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    with pytest.raises(FormatError, match=str(empty)):
        bitdance.load_image_folder(empty, 8)
    with pytest.raises(FormatError, match="no such folder"):
        bitdance.load_image_folder(tmp_path / "missing", 8)
    (good / "broken.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(FormatError, match="broken.jpg"):
        bitdance.load_image_folder(good, 8)


@pytest.mark.parametrize("bad", [
    {"steps": 0}, {"head": "mixture"}, {"image_size": 10, "block": 4},
    {"patch_tokens": 3}, {"head": "softmax", "block": 4},
    {"head": "softmax", "tokenizer": "learned", "bits": 16}, {"d_model": 30, "n_heads": 4},
    {"lr": 0}, {"codebook": 16},
])
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        TRAIN.params(**bad)


def test_reproduce_params_forbid_unknown_fields():
    with pytest.raises(ValidationError):
        REPRODUCE.params(smoke=True, heads=3)


# -- the jobs ----------------------------------------------------------------------------------

TINY = {"steps": 20, "batch_size": 32, "d_model": 16, "n_heads": 2, "n_layers": 1,
        "head_width": 16, "sample_steps": 3, "samples_per_class": 2}


def test_train_on_digits_saves_grid_metrics_timing_and_checkpoint(tmp_path):
    events: list[dict] = []
    ctx = JobContext("j", tmp_path, emit=events.append, seed=0)
    outputs = TRAIN.run(ctx, TRAIN.params(head="patch_diffusion", patch_tokens=4, **TINY), {})
    grid = np.load(tmp_path / outputs["samples"])
    assert grid.shape == (10 * 9 - 1, 2 * 9 - 1)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 21)) and "loss" in metrics[0]
    timing = json.loads((tmp_path / outputs["decode_time"]).read_text())
    assert [row[0] for row in timing["rows"]] == [1, 4] and timing["rows"][1][1] == 4
    final = outputs["final"]
    assert 0 <= final["class_accuracy"] <= 1 and final["mmd"] >= 0
    assert final["classifier_held_out_accuracy"] > 0.8
    assert (tmp_path / outputs["checkpoint"] / "model.safetensors").exists()
    json.dumps(outputs)


def test_train_on_an_image_folder_with_a_learned_tokenizer(tmp_path):
    folder = tmp_path / "pics"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(folder / f"{i}.png")
    ctx = JobContext("j", tmp_path / "run", emit=lambda event: None, seed=0)
    params = TRAIN.params(data="images", image_size=8, tokenizer="learned", bits=6, group_bits=3,
                          tokenizer_steps=10, **TINY)
    outputs = TRAIN.run(ctx, params, {"images": str(folder)})
    assert np.load(tmp_path / "run" / outputs["samples"]).shape == (8, 2 * 9 - 1)
    assert "class_accuracy" not in outputs["final"]
    assert (tmp_path / "run" / outputs["tokenizer_checkpoint"] / "cfg.json").exists()
    with pytest.raises(ValueError, match="images input"):
        TRAIN.run(ctx, params, {})


def test_cancel_stops_training(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        TRAIN.run(ctx, TRAIN.params(steps=10_000), {})


# -- reproduce (spec v2) ---------------------------------------------------------------------

V2 = bitdance.BitDanceReproduceParams


def test_profiles_hold_the_spec_numbers():
    smoke, cpu, gpu = (V2(profile=p) for p in ("smoke", "cpu", "gpu"))
    assert (cpu.grids, cpu.heads, cpu.n_layers, cpu.d_model, cpu.steps, cpu.seeds) == (
        ["wide"], ["bernoulli", "diffusion"], 2, 64, 5000, 3)
    assert (gpu.grids, gpu.n_layers, gpu.d_model, gpu.steps, gpu.seeds) == (
        ["small", "wide"], 4, 256, 10_000, 5)
    assert gpu.heads == ["softmax", "bernoulli", "diffusion", "patch", "independent"]
    assert (smoke.steps, 10 * smoke.samples_per_class) == (30, 100)
    for profile in (cpu, gpu):
        assert (profile.samples_per_class, profile.band_draws) == (200, 1000)
    for profile in (smoke, cpu, gpu):
        assert (profile.lr, profile.batch_size, profile.sample_steps) == (1e-3, 64, 20)
        assert (profile.flip_rate, profile.margin_fraction) == (0.15, 0.25)
        assert (profile.timed_batches, profile.timed_batch_size) == (20, 100)
    assert bitdance.PATCH == {"small": 4, "wide": 2} and bitdance.GRIDS == {"small": 2, "wide": 4}


def test_structure_features_are_pixels_and_adjacent_products():
    image = np.zeros((1, 8, 8))
    image[0, 0, 0] = 1
    phi = bitdance.structure_features(image)
    assert phi.shape == (1, 176)
    assert phi[0, 0] == 1 and (phi[0, 1:64] == -1).all()
    across, down = phi[0, 64:120].reshape(8, 7), phi[0, 120:].reshape(7, 8)
    assert across[0, 0] == -1 and down[0, 0] == -1 and (across[1:] == 1).all()


def test_the_power_controls_clear_the_noise_band_on_real_digits():
    ref = bitdance.reference()
    assert len(ref.train_images) == 1438 and len(ref.held_features) == 359
    band = bitdance.noise_band(ref, 40)
    top = float(np.quantile(band, 0.975))
    assert np.quantile(band, 0.025) <= 0 <= top
    per_pixel = ref.mmd2(bitdance.per_pixel_control(ref, 100, 0))
    flipped = ref.mmd2(bitdance.bit_flip_control(ref, 1000, 0.15, 0))
    assert per_pixel > top and flipped > per_pixel
    assert abs(ref.mmd2(ref.train_images[:600])) < per_pixel / 2  # real digits: near zero


SEEDS3 = [0.0, 0.001, -0.001]


def _table(values: dict[tuple[str, str], float]) -> bitdance.MmdTable:
    return {key: [v + d for d in SEEDS3] for key, v in values.items()}


DELTA = 0.01


def _criteria(values, powered=True, times=None):
    return bitdance.bitdance_criteria(_table(values), DELTA, powered, "planted", times or {})


def test_criterion_one_fails_when_per_bit_prediction_is_better():
    better = _criteria({("wide", "bernoulli"): 0.05, ("wide", "diffusion"): 0.02})
    assert better[0].verdict == "PASS" and better[0].quote == bitdance.QUOTE_1
    worse = _criteria({("wide", "bernoulli"): 0.02, ("wide", "diffusion"): 0.05})
    assert worse[0].verdict == "FAIL"
    assert [c.verdict for c in worse[1:]] == ["INCONCLUSIVE"] * 3
    assert [c.rule.kind for c in worse[1:]] == ["below", "below", "above"]  # their own rules


def test_criterion_two_is_non_inferiority_within_delta():
    close = _criteria({("small", "diffusion"): 0.025, ("small", "softmax"): 0.02})
    assert close[1].verdict == "PASS"
    far = _criteria({("small", "diffusion"): 0.05, ("small", "softmax"): 0.02})
    assert far[1].verdict == "FAIL"


def _patch_table(joint: float, independent: float) -> dict:
    values = {}
    for grid in ("small", "wide"):
        values |= {(grid, "diffusion"): 0.02, (grid, "patch"): joint,
                   (grid, "independent"): independent}
    return values


def test_criterion_three_needs_joint_as_good_and_independent_worse():
    assert _criteria(_patch_table(0.021, 0.06))[2].verdict == "PASS"
    assert _criteria(_patch_table(0.05, 0.08))[2].verdict == "FAIL"  # joint worse than delta
    assert _criteria(_patch_table(0.021, 0.0))[2].verdict == "FAIL"  # independent not worse


def test_without_power_criteria_one_to_three_are_withheld():
    planted = {("wide", "bernoulli"): 0.05, ("wide", "diffusion"): 0.02}
    result = _criteria(planted, powered=False)[0]
    assert result.verdict == "INCONCLUSIVE" and result.computed_verdict() == "PASS"
    assert "sees structure" in result.decides_with


def test_criterion_four_is_the_ratio_of_median_decode_times():
    rng = np.random.default_rng(0)
    fast = {"wide": {"sequential": list(0.02 + 0.001 * rng.random(20)),
                     "patch": list(0.01 + 0.001 * rng.random(20))}}
    assert _criteria({}, times=fast)[3].verdict == "PASS"
    slow = {"wide": {"sequential": fast["wide"]["patch"], "patch": fast["wide"]["sequential"]}}
    assert _criteria({}, times=slow)[3].verdict == "FAIL"
    assert _criteria({})[3].verdict == "INCONCLUSIVE"


def test_reproduce_smoke_returns_the_v2_schema(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    outputs = REPRODUCE.run(ctx, REPRODUCE.params(profile="smoke"), {})
    claim = outputs["claim"]
    assert claim["spec"] == "v2" and claim["smoke"] is True and claim["seeds"] == [0, 1]
    assert [c["name"][:3] for c in claim["criteria"]] == ["(1)", "(2)", "(3)", "(4)"]
    assert all(c["quote"] for c in claim["criteria"])
    assert claim["criteria"][0]["method"].startswith("t-interval over 2 seeds")
    assert [check["name"][:9] for check in claim["sanity"]] == ["the noise", "both powe"]
    table = json.loads((tmp_path / outputs["results"]).read_text())
    assert len(table["rows"]) == 4
    json.dumps(claim)
