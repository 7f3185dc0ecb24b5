"""chipstar: the route transformer's switches, training, routing a DEF, the smoke reproduce."""

from __future__ import annotations

import json
import math

import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.methods import chipstar
from engine.models.route_transformer import (
    RouteTransformer,
    RouteTransformerConfig,
    coordinate_noise,
)
from engine.vlsi import shared_design_paths
from engine.vlsi.def_ import read_def
from engine.vlsi.lef import read_lef
from engine.vlsi.tokens import Vocab

SPECS = {spec.id: spec for spec in chipstar.SPECS}
TRAIN, ROUTE, REPRODUCE = (SPECS[f"chipstar.{v}"] for v in ("train", "route", "reproduce"))
TINY = dict(grid=8, layers=3, nets=80, max_loads=3, held_out=0.1, max_eval_nets=6,
            batch_size=8, d_model=32, n_heads=2, n_layers=1)


def _batch(seed=0):
    examples = list(chipstar.synthetic_examples(12, 8, 3, 2, 3, seed))[:4]
    return chipstar.batch_tensors(examples, Vocab(max_step=31, max_coord=8, layers=3))


def _model(**switches) -> RouteTransformer:
    torch.manual_seed(0)
    cfg = RouteTransformerConfig(vocab_size=len(Vocab(max_step=31, max_coord=8, layers=3)),
                                 d_model=32, n_heads=2, grid_extent=8.0, **switches)
    return RouteTransformer(cfg).eval()


def _logits(model, b, shift=0.0):
    return model(b["src"], b["src_coords"] + shift, b["src_mask"], b["tgt_in"],
                 b["tgt_coords"] + shift)


# -- the three modules ----------------------------------------------------------------------------

def test_coordinate_rotary_sees_relative_positions_only_when_on():
    b = _batch()
    on, off = _model(fourier_prior=False), _model(fourier_prior=False, coord_rotary=False)
    off.load_state_dict(on.state_dict())
    with torch.no_grad():
        assert not torch.allclose(_logits(on, b), _logits(off, b), atol=1e-5)
        # on: a shift of every coordinate changes nothing (only differences enter) ...
        assert torch.allclose(_logits(on, b), _logits(on, b, shift=3.0), atol=1e-4)
        moved = dict(b, src_coords=b["src_coords"].clone())
        moved["src_coords"][:, 5:9] += 2.0  # ... but moving one load does
        assert not torch.allclose(_logits(on, b), _logits(on, moved), atol=1e-4)
        # off: coordinates do not enter at all
        assert torch.allclose(_logits(off, b), _logits(off, moved), atol=1e-6)


def test_fourier_prior_adds_a_coordinate_bias_that_equals_the_dense_one():
    b = _batch()
    prior, plain = _model(coord_rotary=False), _model(coord_rotary=False, fourier_prior=False)
    plain.load_state_dict(prior.state_dict(), strict=False)
    with torch.no_grad():
        for module in prior.modules():
            if hasattr(module, "phi"):
                module.phi.weight.mul_(30)
        assert not torch.allclose(_logits(prior, b), _logits(plain, b), atol=1e-4)
        for module in prior.modules():
            if hasattr(module, "phi"):
                module.phi.weight.zero_()
        assert torch.allclose(_logits(prior, b), _logits(plain, b), atol=1e-5)
    layer = _model().decoder[0].self_attention
    with torch.no_grad():
        layer.phi.weight.normal_(std=1.0)
        x, coords = torch.randn(2, 9, 32), torch.rand(2, 9, 3) * 8
        feats = _model()._features(coords)
        angles = _model().rotary.angles(9, coords, with_position=True)
        fact = layer(x, x, angles, angles, feats, feats, causal=True)
        dense = layer(x, x, angles, angles, feats, feats, causal=True, dense_prior=True)
    assert torch.allclose(fact, dense, atol=1e-5)


def test_cumulative_noise_grows_along_the_sequence():
    coords = torch.zeros(4000, 16, 3)
    assert coordinate_noise(coords, 0.0) is coords
    noisy = coordinate_noise(coords, 0.5, torch.Generator().manual_seed(0))
    variance = noisy.var(dim=0).mean(dim=-1)
    assert abs(variance[0].item() - 0.25) < 0.03 and abs(variance[-1].item() - 4.0) < 0.4
    b_clean = chipstar.batch_tensors(list(chipstar.synthetic_examples(12, 8, 3, 2, 3, 0))[:4],
                                     Vocab(max_step=31, max_coord=8, layers=3), 0.5)
    assert not torch.allclose(b_clean["tgt_coords"], _batch()["tgt_coords"])


def test_factorised_prior_memory_is_linear_and_dense_quadratic():
    factorised = [chipstar.peak_attention_memory(n, dense=False) for n in (128, 512)]
    dense = [chipstar.peak_attention_memory(n, dense=True) for n in (128, 512)]
    assert factorised[1] / factorised[0] < 5 < dense[1] / dense[0]


# -- training and the jobs ------------------------------------------------------------------------

def test_training_lowers_the_loss():
    p = chipstar.Params(steps=60, eval_every=30, lr=3e-3, **TINY)
    trained = chipstar.train(p, 0, {}, lambda: None)
    assert trained.losses[-1] < trained.losses[0] - 0.5
    assert set(trained.final) == set(chipstar.METRICS)


def test_train_job_saves_plots_table_checkpoint_and_streams_metrics(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    outputs = TRAIN.run(ctx, TRAIN.params(steps=4, eval_every=2, **TINY), {})
    plot_spec = json.loads((tmp_path / outputs["metrics_plot"]).read_text())
    assert plot_spec["kind"] == "plot" and plot_spec["series"][0]["x"] == [2, 4]
    table = json.loads((tmp_path / outputs["routes"]).read_text())
    assert table["columns"] == chipstar.TABLE_COLUMNS and len(table["rows"]) == 6
    assert (tmp_path / outputs["checkpoint"] / "model.safetensors").exists()
    metrics = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [2, 4] and "connected" in metrics[0]
    model, vocab = chipstar.load_checkpoint(str(tmp_path / outputs["checkpoint"]))
    assert model.cfg.d_model == 32 and vocab.max_coord == 8


def test_cancel_and_bad_params(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        TRAIN.run(ctx, TRAIN.params(**TINY), {})
    for bad in ({"min_loads": 5, "max_loads": 3}, {"d_model": 36, "n_heads": 2},
                {"source": "gds"}, {"steps": 0}, {"grid": 100}, {"rotary": True}):
        with pytest.raises(ValidationError):
            TRAIN.params(**bad)
    with pytest.raises(ValueError, match="both inputs"):
        chipstar.default_design({"def": "x.def"})


@pytest.fixture(scope="module")
def gcd():
    paths = shared_design_paths()
    if paths is None:
        pytest.skip("../shared/data/vlsi (Nangate45.lef, gcd_nangate45_route.def) is absent")
    return {"lef": str(paths[0]), "def": str(paths[1])}


def test_route_with_the_maze_router_writes_a_readable_def(tmp_path, gcd):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    outputs = ROUTE.run(ctx, ROUTE.params(router="maze", nets="_003_,_000_"), dict(gcd))
    assert outputs["final"]["connected"] == 1.0 and outputs["final"]["nets"] == 2
    lef = read_lef(gcd["lef"])
    before, after = read_def(gcd["def"], lef), read_def(tmp_path / outputs["def"], lef)
    index = after.net_index("_003_")
    segments, vias = after.net_wiring(index)
    assert len(segments) and len(vias)
    assert all(x % 4200 == 2100 for x in segments[:, 2])  # GCell centres
    untouched = before.net_index("_001_")
    assert (before.net_wiring(untouched)[0] == after.net_wiring(untouched)[0]).all()
    with pytest.raises(ValueError, match="gcd_nangate45_route.def has no net named nope, "
                                         "nope2$"):
        ROUTE.run(ctx, ROUTE.params(router="maze", nets="_000_,nope2,nope"), dict(gcd))
    with pytest.raises(ValueError, match="checkpoint input"):
        ROUTE.run(ctx, ROUTE.params(router="learned", max_nets=2), dict(gcd))


def test_train_on_def_nets_then_route_with_the_model(tmp_path, gcd):
    ctx = JobContext("t", tmp_path / "train", emit=lambda event: None, seed=0)
    trained = TRAIN.run(ctx, TRAIN.params(source="def", steps=2, eval_every=2, max_eval_nets=4,
                                          batch_size=4, d_model=32, n_heads=2, n_layers=1),
                        dict(gcd))
    route_ctx = JobContext("r", tmp_path / "route", emit=lambda event: None, seed=0)
    outputs = ROUTE.run(route_ctx, ROUTE.params(router="learned", max_nets=3),
                        {**gcd, "checkpoint": str(tmp_path / "train" / trained["checkpoint"])})
    assert outputs["final"]["nets"] == 3
    assert read_def(tmp_path / "route" / outputs["def"], read_lef(gcd["lef"])).nets


def test_reproduce_smoke_returns_a_claim(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    outputs = REPRODUCE.run(ctx, REPRODUCE.params(smoke=True), {})
    claim = outputs["claim"]
    assert claim["smoke"] is True and claim["paper"] == "chipstar" and claim["seeds"] == [0]
    assert [c["name"][:4] for c in claim["criteria"]] == ["(1a)", "(1b)", "(2) "]
    assert [c["target"] for c in claim["criteria"]] == [5.0, 5.0, 5.0]
    for criterion in claim["criteria"]:
        assert math.isfinite(criterion["measured"]) and criterion["paper"]
    assert claim["criteria"][2]["passed"]  # linear memory shows even at smoke sizes
    json.dumps(claim)


# -- net datasets ---------------------------------------------------------------------------------

EXPORT = SPECS["chipstar.export_dataset"]


def test_a_dataset_from_the_def_trains_on_the_same_token_sequences(tmp_path, gcd):
    ctx = JobContext("e", tmp_path / "export", emit=lambda event: None, seed=0)
    outputs = EXPORT.run(ctx, EXPORT.params(source="def"), dict(gcd))
    path = str(tmp_path / "export" / outputs["dataset"])
    direct, direct_spec = chipstar.design_examples(gcd["def"], gcd["lef"])
    assert outputs["final"]["nets"] == len(direct) > 300
    from_file, spec = chipstar.dataset_examples(path)
    assert spec == direct_spec and spec.shape == (47, 49, 10)
    assert [ex.tokens for ex in from_file] == [ex.tokens for ex in direct]
    assert from_file == direct  # names, drivers, loads and trees too
    p_file, p_def = TRAIN.params(source="dataset"), TRAIN.params(source="def")
    split_file = chipstar.load_examples(p_file, 3, {"dataset": path})
    assert split_file == chipstar.load_examples(p_def, 3, dict(gcd))
    with pytest.raises(ValueError, match="needs the dataset input"):
        chipstar.load_examples(p_file, 3, {})
    trained = TRAIN.run(JobContext("t", tmp_path / "train", emit=lambda event: None, seed=0),
                        TRAIN.params(source="dataset", steps=2, eval_every=2, max_eval_nets=3,
                                     batch_size=4, d_model=32, n_heads=2, n_layers=1),
                        {"dataset": path})
    assert set(trained["final"]) == set(chipstar.METRICS)


def test_a_synthetic_dataset_matches_synthetic_training_data(tmp_path):
    ctx = JobContext("e", tmp_path, emit=lambda event: None, seed=5)
    outputs = EXPORT.run(ctx, EXPORT.params(grid=8, layers=3, nets=40, max_loads=3), {})
    examples, spec = chipstar.dataset_examples(str(tmp_path / outputs["dataset"]))
    assert examples == list(chipstar.synthetic_examples(40, 8, 3, 2, 3, 5))
    assert spec.shape == (8, 8, 3) and spec.directions == ("H", "V", "H")


def test_hostile_or_truncated_datasets_are_refused_clearly(tmp_path):
    import numpy as np

    from engine.vlsi import VlsiError
    from engine.vlsi.netdata import read_net_dataset, write_net_dataset
    from engine.vlsi.router import GridSpec

    good = tmp_path / "good.npz"
    spec = GridSpec(8, 8, 2)
    net = ("n0", (0, 0, 0), ((2, 0, 0),), frozenset({((0, 0, 0), (1, 0, 0)),
                                                     ((1, 0, 0), (2, 0, 0))}))
    write_net_dataset(good, [net], spec)
    assert read_net_dataset(good)[0] == [net]
    data = good.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[:len(data) // 2])
    (tmp_path / "text.npz").write_text("nets\n")
    with open(tmp_path / "pickled.npz", "wb") as handle:
        np.savez(handle, format=np.array([{"evil": 1}], dtype=object))
    arrays = dict(np.load(good, allow_pickle=False))

    def variant(name: str, **changes) -> str:
        with open(tmp_path / name, "wb") as handle:
            np.savez(handle, **{**arrays, **changes})
        return name

    cases = {
        "cut.npz": "not a readable net dataset",
        "text.npz": "not a readable net dataset",
        "pickled.npz": "holds pickled objects",
        "missing.npz": "no such file",
        variant("format.npz", format=np.array("something")): "not a net dataset",
        variant("version.npz", version=np.array(2)): "version 2; this Studio reads version 1",
        variant("floats.npz", drivers=np.zeros((1, 3))): "drivers holds float64",
        variant("offsets.npz", load_offsets=np.array([0, 5])): "load_offsets does not index",
        variant("outside.npz", loads=np.array([[9, 0, 0]])): r"node \[9, 0, 0\] outside",
        variant("jump.npz", edges=np.array([[0, 0, 0, 2, 0, 0], [1, 0, 0, 2, 0, 0]])):
            "does not join adjacent GCells",
        variant("huge.npz", grid=np.array([10**9, 8, 2])): "expected 3 sizes",
        variant("shape.npz", drivers=np.zeros((2, 3), dtype=np.int64)): "has shape",
        variant("cycle.npz", edges=np.array([[0, 0, 0, 1, 0, 0], [0, 1, 0, 1, 1, 0],
                                            [0, 0, 0, 0, 1, 0], [1, 0, 0, 1, 1, 0]]),
                edge_offsets=np.array([0, 4])): "net n0: not a routing tree",
    }
    for name, message in cases.items():
        with pytest.raises(VlsiError, match=message) as caught:
            chipstar.dataset_examples(str(tmp_path / name))
        assert str(caught.value).startswith(str(tmp_path / name)), name
