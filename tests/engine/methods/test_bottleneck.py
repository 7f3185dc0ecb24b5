"""bottleneck: generators, tasks and encoders through a fixed latent; tiny runs check behaviour."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.methods import bottleneck as bn
from engine.models.bottleneck_autoencoder import AutoencoderConfig, BottleneckAutoencoder

SPECS = {spec.id: spec for spec in bn.SPECS}
SWEEP = SPECS["bottleneck.sweep"]
REPRODUCE = SPECS["bottleneck.reproduce"]


@pytest.mark.parametrize("structure", ["iid", "markov", "motif"])
def test_built_in_generators_give_tokens_of_the_asked_shape(structure):
    x = bn.draw(structure, np.random.default_rng(0), 50, 7, 5)
    assert x.shape == (50, 7) and x.min() >= 0 and x.max() < 5


def test_structured_generators_are_more_predictable_than_iid():
    def bigram_entropy(x):
        pairs = x[:, :-1] * 10 + x[:, 1:]
        counts = np.bincount(pairs.ravel(), minlength=100) + 1e-12
        p = counts / counts.sum()
        return -(p * np.log2(p)).sum()

    rng = np.random.default_rng(0)
    iid = bigram_entropy(bn.draw("iid", rng, 500, 20, 10))
    assert bigram_entropy(bn.draw("markov", rng, 500, 20, 10)) < iid - 1
    assert bigram_entropy(bn.draw("motif", rng, 500, 20, 10)) < iid - 1


def test_plug_in_generator_is_used_and_checked(tmp_path):
    bn.register_generator("constant_test", lambda rng, n, length, vocab:
                          np.full((n, length), vocab - 1))
    try:
        params = SWEEP.params(structure="constant_test", encoders=["ssm"], tasks=["copy"],
                              lengths=[3], steps=2, width=8, latent=2, eval_size=8)
        assert (bn.draw("constant_test", np.random.default_rng(0), 2, 3, 4) == 3).all()
        ctx = JobContext("j", tmp_path, emit=lambda e: None, seed=0)
        outputs = SWEEP.run(ctx, params, {})
        assert outputs["results"][0]["length"] == 3
        bn.register_generator("bad_test", lambda rng, n, length, vocab:
                              np.full((n, length), vocab))
        with pytest.raises(bn.GeneratorError, match="outside"):
            bn.draw("bad_test", np.random.default_rng(0), 2, 3, 4)
        bn.register_generator("shape_test", lambda rng, n, length, vocab: np.zeros((n,)))
        with pytest.raises(bn.GeneratorError, match="shape"):
            bn.draw("shape_test", np.random.default_rng(0), 2, 3, 4)
    finally:
        for name in ("constant_test", "bad_test", "shape_test"):
            bn.GENERATORS.pop(name, None)
    with pytest.raises(ValidationError):
        SWEEP.params(structure="constant_test")


def test_tasks_and_information_content():
    x = np.array([[3, 1, 3, 0]])
    assert bn.target("copy", x, 5).tolist() == [[3, 1, 3, 0]]
    assert bn.target("sort", x, 5).tolist() == [[0, 1, 3, 3]]
    assert bn.target("set", x, 5).tolist() == [[1, 1, 0, 1, 0]]
    assert bn.information_bits("copy", 4, 8) == pytest.approx(12)
    assert bn.information_bits("sort", 2, 3) == pytest.approx(math.log2(6))
    assert bn.information_bits("set", 100, 8) == pytest.approx(math.log2(255))
    noisy = bn.add_noise(np.random.default_rng(0), np.zeros((200, 50), dtype=int), 0.5, 2)
    assert 0.2 < noisy.mean() < 0.3  # half replaced, half of those by a 1


@pytest.mark.parametrize("encoder", ["bilstm", "transformer", "ssm"])
def test_latent_has_the_fixed_size_whatever_the_length(encoder):
    cfg = AutoencoderConfig(encoder=encoder, vocab=6, max_len=20, latent=5, width=16)
    model = BottleneckAutoencoder(cfg)
    for length in (1, 7, 20):
        tokens = torch.randint(0, 6, (3, length))
        assert model.encode(tokens).shape == (3, 5)
        assert model(tokens).shape == (3, length, 6)
    sets = BottleneckAutoencoder(AutoencoderConfig(encoder=encoder, vocab=6, max_len=20,
                                                   latent=5, width=16, output="set"))
    assert sets(torch.randint(0, 6, (3, 9))).shape == (3, 6)


def test_decoder_sees_only_the_latent():
    cfg = AutoencoderConfig(encoder="ssm", vocab=6, max_len=8, latent=4, width=16)
    model = BottleneckAutoencoder(cfg)
    tokens = torch.randint(0, 6, (2, 8))
    z = model.encode(tokens)
    assert torch.allclose(model(tokens), model.decode(z, 8))


def test_switchable_parts_change_the_computation():
    torch.manual_seed(0)
    tokens = torch.randint(0, 6, (2, 8))
    plain = BottleneckAutoencoder(AutoencoderConfig("ssm", 6, 8, 4, 16))
    torch.manual_seed(0)
    gated = BottleneckAutoencoder(AutoencoderConfig("ssm", 6, 8, 4, 16, ssm_gate=True))
    assert gated.encoder.gate is not None and plain.encoder.gate is None
    gated.load_state_dict(plain.state_dict(), strict=False)
    assert not torch.allclose(plain.encode(tokens), gated.encode(tokens))
    decay = plain.encoder.decay()
    assert bool(((decay > 0) & (decay < 1)).all())
    # the SSM is bidirectional: reversing the input changes z
    assert not torch.allclose(plain.encode(tokens), plain.encode(tokens.flip(1)))


def test_tiny_set_autoencoder_learns_above_chance():
    p = bn.Params(encoders=["ssm"], tasks=["set"], lengths=[3], vocab=6, latent=8, width=32,
                  steps=150, eval_size=256)
    result = bn.train_one(p, "ssm", "set", 3, 0.0, 0, lambda: None)
    assert result.token > 0.85 and result.exact > 0.3


def test_sweep_saves_curves_bits_and_reconstructions(tmp_path):
    events: list[dict] = []
    ctx = JobContext("j", tmp_path, emit=events.append, seed=0)
    params = SWEEP.params(encoders=["ssm", "bilstm"], tasks=["copy", "set"], lengths=[2, 4],
                          noise=[0.0, 0.3], steps=2, width=8, latent=3, eval_size=8)
    outputs = SWEEP.run(ctx, params, {})
    spec = json.loads((tmp_path / outputs["copy_accuracy_vs_length"]).read_text())
    assert len(spec["series"]) == 4 and spec["series"][0]["x"] == [2, 4]
    assert json.loads((tmp_path / outputs["set_accuracy_vs_noise"]).read_text())["series"]
    bits = json.loads((tmp_path / outputs["bits_per_latent_dim"]).read_text())
    assert bits["series"][0]["y"] == pytest.approx([2 * math.log2(8) / 3, 4 * math.log2(8) / 3])
    table = json.loads((tmp_path / outputs["reconstructions"]).read_text())
    assert len(table["rows"]) == 2 * 2 * 2 * 2 * 3
    assert len(outputs["results"]) == 16
    steps = [e["step"] for e in events if e["type"] == "job_progress"]
    assert steps[-1] == 16


def test_cancel_stops_the_sweep(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda e: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        SWEEP.run(ctx, SWEEP.params(steps=1000), {})


@pytest.mark.parametrize("bad", [
    {"lengths": [0]}, {"noise": [1.0]}, {"encoders": ["gru"]}, {"tasks": []},
    {"latent": 0}, {"structure": "nope"}, {"steps": 0}, {"bits": 3},
])
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        SWEEP.params(**bad)




# -- reproduce (spec v2) ---------------------------------------------------------------------

V2 = bn.BottleneckReproduceParams


def test_profiles_hold_the_spec_numbers():
    smoke, cpu, gpu = (V2(profile=p) for p in ("smoke", "cpu", "gpu"))
    for profile in (smoke, cpu, gpu):
        assert (profile.latent, profile.vocab, profile.batch_size, profile.lr) == (16, 16, 64,
                                                                                   3e-3)
        assert (profile.params_1x, profile.params_4x) == (50_000, 200_000)
    assert (cpu.tasks, cpu.noise_1x, cpu.cap, cpu.steps, cpu.seeds, cpu.eval_size) == (
        ["copy"], [0.0], 16, 2000, 3, 1024)
    assert (gpu.tasks, gpu.noise_1x, gpu.cap, gpu.steps, gpu.seeds, gpu.eval_size) == (
        ["copy", "sort", "set"], [0.0, 0.2], 256, 3000, 5, 1024)
    assert (smoke.cap, smoke.steps) == (8, 30)
    assert bn.sweep_lengths(cpu.cap) == [4, 8, 16] and bn.sweep_lengths(smoke.cap) == [4, 8]
    assert bn.sweep_lengths(gpu.cap) == [4, 8, 16, 32, 64, 128, 256]


@pytest.mark.parametrize("encoder", ["bilstm", "transformer", "ssm"])
@pytest.mark.parametrize("budget", [50_000, 200_000])
def test_widths_are_matched_to_the_parameter_budget(encoder, budget):
    width, count = bn.matched_width(encoder, "copy", 16, 16, 16, budget)
    assert abs(count / budget - 1) <= 0.10
    assert count == bn.count_parameters(encoder, "copy", 16, 16, 16, width)


def test_breakpoints_interpolate_in_log2_length_and_mark_censoring():
    assert bn.breakpoint_log2([4, 8, 16], [1.0, 0.7, 0.1]) == (pytest.approx(3 + 1 / 3), False)
    assert bn.breakpoint_log2([4, 8, 16], [0.3, 0.0, 0.0]) == (2.0, True)  # broken at L = 4
    assert bn.breakpoint_log2([4, 8, 16], [1.0, 0.9, 0.6]) == (4.0, True)  # never broke
    assert bn.task_vocab("set", 64, 16) == 128 and bn.task_vocab("sort", 64, 16) == 16


def test_a_sweep_stops_after_the_length_where_every_encoder_breaks(tmp_path, monkeypatch):
    def planted(item):  # every encoder intact up to L = 8, broken from 16 on
        return {**item, "exact": 1.0 if item["length"] <= 8 else 0.0, "token": 1.0,
                "n_params": 1}

    monkeypatch.setattr(bn, "unit", planted)
    ctx = JobContext("j", tmp_path, emit=lambda e: None, seed=0)
    rows, stopped = bn.run_sweeps(ctx, V2(profile="gpu", tasks=["copy"], noise_1x=[0.0]), [0])
    assert sorted({r["length"] for r in rows}) == [4, 8, 16]
    assert stopped == {("copy", 0.0, "1x"): 16, ("copy", 0.0, "4x"): 16}
    points = bn.breakpoints_of(rows, [0])
    assert points[("copy", 0.0, "1x", "ssm")] == [(pytest.approx(3.5), False)]


def test_a_unit_is_reproducible_from_its_item():
    item = {"encoder": "ssm", "task": "copy", "length": 4, "noise": 0.0, "capacity": "1x",
            "seed": 3, "width": 8, "vocab": 4, "max_len": 8, "latent": 4, "steps": 3,
            "batch_size": 8, "lr": 3e-3, "eval_size": 16}
    first, again = bn.unit(item), bn.unit(dict(item))
    assert first == again and 0 <= first["exact"] <= first["token"] <= 1
    json.dumps(first)


def _points(values: dict[tuple[str, str], list[float]], censored=(), task="copy", noise=0.0):
    """Breakpoints (log2 L*) per (capacity, encoder), three seeds; ``censored`` keys at a cap."""
    return {(task, noise, cap, enc): [(v, (cap, enc) in censored) for v in vals]
            for (cap, enc), vals in values.items()}


SPREAD = (0.0, 0.1, -0.1)


def _at(level_1x: dict[str, float], level_4x: dict[str, float] | None = None):
    level_4x = level_4x or level_1x
    return {**{("1x", e): [v + d for d in SPREAD] for e, v in level_1x.items()},
            **{("4x", e): [v + d for d in SPREAD] for e, v in level_4x.items()}}


def test_length_criterion_fails_when_encoders_are_equivalent_and_passes_when_one_is_ahead():
    equal = bn.length_criterion(_points(_at({"bilstm": 3, "transformer": 3, "ssm": 3})),
                                ["copy"])
    assert equal.verdict == "FAIL" and equal.level == 0.95
    assert [p.level for p in equal.parts] == pytest.approx([1 - 0.05 / 3] * 3)
    apart = bn.length_criterion(_points(_at({"bilstm": 4, "transformer": 2.5, "ssm": 3})),
                                ["copy"])
    assert apart.verdict == "PASS" and apart.aggregate == "any"
    assert apart.quote.startswith("performance differences arise from inductive biases")


def test_censored_breakpoints_never_support_a_fail():
    at_cap = _points(_at({"bilstm": 4, "transformer": 4, "ssm": 4}),
                     censored={("1x", e) for e in bn.ENCODERS})
    result = bn.length_criterion(at_cap, ["copy"])
    assert result.verdict == "INCONCLUSIVE"
    assert all(p.rule.censored and p.computed_verdict() == "INCONCLUSIVE" for p in result.parts)


def test_noise_criterion_fails_for_equal_costs_and_passes_for_a_robust_encoder():
    def with_noise(cost: dict[str, float]):
        clean = _points(_at({e: 4.0 for e in bn.ENCODERS}))
        noisy = _points(_at({e: 4.0 - c for e, c in cost.items()}), noise=0.2)
        return {**clean, **noisy}

    same = bn.noise_criterion(with_noise({"bilstm": 1, "transformer": 1, "ssm": 1}), ["copy"],
                              0.2)
    assert same.verdict == "FAIL"
    robust = bn.noise_criterion(with_noise({"bilstm": 0, "transformer": 2, "ssm": 1}),
                                ["copy"], 0.2)
    assert robust.verdict == "PASS"
    unmeasured = bn.noise_criterion(with_noise({"bilstm": 0, "transformer": 2, "ssm": 1}),
                                    ["copy"], None)
    assert unmeasured.verdict == "INCONCLUSIVE" and unmeasured.rule.kind == "outside_band"


def test_capacity_criterion_fails_when_four_times_the_parameters_catch_up():
    ahead = {"bilstm": 4.5, "transformer": 2.5, "ssm": 2.6}
    caught_up = _points(_at(ahead, {"bilstm": 4.5, "transformer": 5.5, "ssm": 5.5}))
    separated = bn.length_criterion(caught_up, ["copy"])
    assert separated.verdict == "PASS"
    assert bn.capacity_criterion(caught_up, separated).verdict == "FAIL"
    stays_behind = _points(_at(ahead))
    result = bn.capacity_criterion(stays_behind, bn.length_criterion(stays_behind, ["copy"]))
    assert result.verdict == "PASS"
    assert [p.name for p in result.parts] == [
        "copy: log2 L*(bilstm, 1x) - log2 L*(transformer, 4x)",
        "copy: log2 L*(bilstm, 1x) - log2 L*(ssm, 4x)"]


def test_capacity_criterion_is_undecided_when_no_pair_was_separated():
    equal = _points(_at({"bilstm": 3, "transformer": 3, "ssm": 3}))
    result = bn.capacity_criterion(equal, bn.length_criterion(equal, ["copy"]))
    assert result.verdict == "INCONCLUSIVE" and "separated none" in result.decides_with


def test_reproduce_smoke_returns_the_v2_schema(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda e: None, seed=0)
    claim = REPRODUCE.run(ctx, REPRODUCE.params(profile="smoke"), {})["claim"]
    assert claim["spec"] == "v2" and claim["smoke"] is True and claim["profile"] == "smoke"
    assert claim["seeds"] == [0, 1] and not claim["exploratory"]
    assert [c["name"][:3] for c in claim["criteria"]] == ["(1)", "(2)", "(3)"]
    for item in claim["criteria"]:
        assert item["quote"] and item["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")
    assert len(claim["sanity"]) == 3 and "width" in claim["notes"]
    json.dumps(claim)
