"""svan: the channel-split generative ranker, its metrics, data readers and jobs. Tiny runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.io import FormatError
from engine.methods import svan
from engine.models import generative_ranker as gr

SPECS = {spec.id: spec for spec in svan.SPECS}
TRAIN = SPECS["svan.train"]
REPRODUCE = SPECS["svan.reproduce"]
TINY = dict(max_users=40, max_interactions=8, holdout=2, d_model=16, n_heads=2, batch_size=16,
            steps=4, eval_every=2)


def tiny_models(n_layers: int = 1, svan_value: str = "mlp") -> tuple[gr.GenerativeRanker, ...]:
    """A baseline and a SVAN model sharing every weight but SVAN's value map."""
    torch.manual_seed(0)
    base_cfg = gr.GenerativeRankerConfig(n_items=20, n_actions=3, max_interactions=6, d_model=16,
                                         n_heads=2, n_layers=n_layers, dropout=0.0)
    baseline = gr.GenerativeRanker(base_cfg).eval()
    with_svan = gr.GenerativeRanker(gr.GenerativeRankerConfig(
        **{**base_cfg.to_dict(), "svan": True, "svan_value": svan_value})).eval()
    missing, unexpected = with_svan.load_state_dict(baseline.state_dict(), strict=False)
    assert not unexpected and all(".phi." in key for key in missing)
    return baseline, with_svan


def tiny_batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    items = torch.randint(1, 21, (3, 6), generator=gen)
    actions = torch.randint(1, 4, (3, 6), generator=gen)
    items[0, :2] = actions[0, :2] = 0  # left padding
    return items, actions


def run_job(tmp_path: Path, spec=TRAIN, inputs: dict | None = None, **params):
    events: list[dict] = []
    ctx = JobContext("j", tmp_path, emit=events.append, seed=0)
    return spec.run(ctx, spec.params(**params), inputs or {}), events


# -- the model: channels and the SVAN switch ----------------------------------------------------

def test_channel_masks_partition_query_key_pairs_by_token_type():
    is_action = torch.tensor([[False, True, False, True]])
    masks = gr.channel_masks(is_action)
    item, action = torch.tensor([1, 0, 1, 0]).bool(), torch.tensor([0, 1, 0, 1]).bool()
    expected = {"item->item": item[:, None] & item[None], "item->action": item[:, None] & action,
                "action->item": action[:, None] & item, "action->action": action[:, None] & action}
    for name, mask in masks.items():
        assert torch.equal(mask[0], expected[name]), name
    total = sum(mask[0].int() for mask in masks.values())
    assert torch.equal(total, torch.ones(4, 4, dtype=torch.int))  # each pair in exactly one


def test_svan_changes_only_the_action_item_channel():
    baseline, with_svan = tiny_models(n_layers=1)
    items, actions = tiny_batch()
    with torch.no_grad():
        out_base = baseline(items, actions, return_channels=True)
        out_svan = with_svan(items, actions, return_channels=True)
    for name in ("item->item", "item->action", "action->action"):
        assert torch.equal(out_base.channels[0][name], out_svan.channels[0][name]), name
    diff = (out_base.channels[0]["action->item"] - out_svan.channels[0]["action->item"]).abs()
    assert diff[:, 1::2].amax() > 1e-3  # action queries read phi(v) from items
    assert diff[:, 0::2].amax() == 0  # item queries are not in this channel
    # One layer: item tokens never see SVAN's channel, action tokens do.
    assert torch.equal(out_base.hidden[:, 0::2], out_svan.hidden[:, 0::2])
    assert not torch.allclose(out_base.hidden[:, 1::2], out_svan.hidden[:, 1::2])
    assert torch.equal(out_base.action_logits, out_svan.action_logits)


def test_svan_with_identity_value_map_is_the_baseline():
    baseline, with_svan = tiny_models(n_layers=2)
    for block in with_svan.blocks:
        block.attn.phi.forward = lambda v: v
    items, actions = tiny_batch()
    with torch.no_grad():
        assert torch.allclose(baseline(items, actions).item_logits,
                              with_svan(items, actions).item_logits, atol=1e-6)


def test_channels_sum_to_the_attention_output_and_attention_is_causal():
    _, model = tiny_models(n_layers=1, svan_value="silu")
    items, actions = tiny_batch()
    attn = model.blocks[0].attn
    captured = {}
    attn.register_forward_hook(lambda module, args, output: captured.update(
        x=args[0], allowed=args[1], masks=args[2], out=output[0]))
    with torch.no_grad():
        model(items, actions)
        out, channels = attn(captured["x"], captured["allowed"], captured["masks"], True)
        assert torch.allclose(out, attn.proj(sum(channels.values())), atol=1e-6)
        changed = items.clone()
        changed[:, -1] = (changed[:, -1] % 20) + 1  # alter the last item only
        before, after = model(items, actions).hidden, model(changed, actions).hidden
    assert torch.equal(before[:, :-2], after[:, :-2])  # earlier tokens cannot see it
    assert not torch.equal(before[:, -2], after[:, -2])


# -- effective rank and ranking metrics ---------------------------------------------------------

def test_effective_rank_matches_the_closed_form():
    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.normal(size=(300, 4)))  # tall: the Gram-matrix path
    V, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    M = U @ np.diag([3.0, 1.0, 0.0, 0.0]) @ V.T
    p = np.array([0.75, 0.25])
    assert gr.effective_rank(M) == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-9)
    assert gr.effective_rank(np.eye(5)) == pytest.approx(5.0)
    assert gr.effective_rank(np.outer(np.arange(1, 4), np.ones(6))) == pytest.approx(1.0)
    assert np.allclose(gr.singular_values(M), [3, 1, 0, 0], atol=1e-7)
    assert math.isnan(gr.effective_rank(np.zeros((3, 3))))


def test_ndcg_and_recall_on_hand_computed_rankings():
    scores = np.array([
        [0.9, 0.1, 0.2, 0.3, 0.4],  # target 0 ranked first
        [0.9, 0.8, 0.1, 0.7, 0.0],  # target 3 ranked third
        [0.5, 0.5, 0.5, 0.5, 0.5],  # all tied: expectation over random tie-breaking
        [0.1, 0.9, -np.inf, 0.2, 0.3],  # target 2 excluded-level score: ranked last
    ])
    targets = np.array([0, 3, 0, 2])
    ndcg, recall = gr.ndcg_recall_at_k(scores, targets, k=2)
    tied_ndcg = (1 + 1 / math.log2(3)) / 5
    assert ndcg == pytest.approx([1.0, 0.0, tied_ndcg, 0.0])
    assert recall == pytest.approx([1.0, 0.0, 0.4, 0.0])
    ndcg3, recall3 = gr.ndcg_recall_at_k(scores, targets, k=3)
    assert ndcg3[1] == pytest.approx(0.5) and recall3[1] == 1.0  # 1 / log2(3 + 1)


def test_auc_on_hand_computed_cases():
    assert gr.auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert gr.auc([0.5, 0.5, 0.5], [0, 1, 1]) == pytest.approx(0.5)
    assert gr.auc([0.2, 0.9], [1, 0]) == 0.0
    assert math.isnan(gr.auc([0.2, 0.9], [1, 1]))


# -- data -----------------------------------------------------------------------------------------

def test_movielens_loads_from_recbole_by_path():
    data = svan.load_movielens()
    assert len(data.items) == 943 and data.n_items == 1682 and data.n_interactions == 100_000
    assert data.action_names == ["skip", "like"] and data.positive.tolist() == [False, True]
    rated = svan.load_movielens("rating", max_users=10)
    assert len(rated.items) == 10 and rated.positive.tolist() == [False] * 3 + [True] * 2


def test_split_holds_out_the_last_interactions_and_never_trains_on_them():
    data = svan.build_interactions(
        users=np.array([0] * 6 + [1] * 2), items=np.array([5, 6, 7, 8, 9, 10, 5, 6]),
        actions=np.ones(8, dtype=int), times=np.array([6, 5, 4, 3, 2, 1, 1, 2]),
        action_names=["a"], positive=np.array([True]), source="test")
    assert data.items[0].tolist() == [6, 5, 4, 3, 2, 1]  # sorted by time, dense ids from 1
    split = svan.split_data(data, holdout=2, max_interactions=4)
    assert split.train_items[0].tolist() == [6, 5, 4, 3]
    assert split.train_items[1].tolist() == [1, 2]  # too short to test: all of it trains
    assert split.eval_items.tolist() == [[4, 3, 2, 1]]
    assert split.eval_rows.tolist() == [[0, 2], [0, 3]]
    assert split.eval_seen[1].tolist() == [6, 5, 4, 3, 2]


def write_log(path: Path, **overrides) -> Path:
    rng = np.random.default_rng(0)
    n = 240
    columns = {"user": [f"u{i % 12}" for i in range(n)],
               "item": [f"film-{v}" for v in rng.integers(0, 30, n)],
               "action": rng.choice(["click", "skip"], n).tolist(),
               "timestamp": rng.permutation(n).tolist()}
    columns.update(overrides)
    table = pa.table(columns)
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        import pyarrow.csv as pacsv
        pacsv.write_csv(table, path)
    return path


@pytest.mark.parametrize("name", ["log.csv", "log.parquet"])
def test_train_on_a_users_log(tmp_path, name):
    log = write_log(tmp_path / name)
    outputs, _ = run_job(tmp_path / "run", inputs={"logs": str(log)}, data="logs",
                         positive_action="click", variant="svan",
                         **{**TINY, "max_users": None})
    assert set(outputs["final"]) == {"svan"}
    assert 0 <= outputs["final"]["svan"]["ndcg"] <= 1


@pytest.mark.parametrize("override,column", [
    ({"timestamp": ["yesterday"] * 240}, "timestamp"),
    ({"action": [f"a{i}" for i in range(240)]}, "action"),
])
def test_malformed_logs_raise_format_error_naming_the_column(tmp_path, override, column):
    log = write_log(tmp_path / "log.csv", **override)
    with pytest.raises(FormatError, match=f"'{column}'") as info:
        svan.load_logs(log, svan.Params(data="logs"))
    assert str(log) in str(info.value)


def test_missing_log_column_is_named(tmp_path):
    log = write_log(tmp_path / "log.csv")
    with pytest.raises(FormatError, match="'when'") as info:
        svan.load_logs(log, svan.Params(data="logs", timestamp_column="when"))
    assert "timestamp" in str(info.value) and str(log) in str(info.value)


def test_logs_without_the_input_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="`logs` input"):
        run_job(tmp_path, data="logs", **TINY)


# -- training and the jobs ------------------------------------------------------------------------

def test_training_on_a_movielens_slice_beats_the_untrained_model():
    params = svan.Params(max_users=150, max_interactions=16, d_model=32, batch_size=32,
                         steps=80, eval_every=80, dropout=0.0, lr=3e-3)
    data = svan.load_movielens(max_users=params.max_users)
    split = svan.split_data(data, params.holdout, params.max_interactions)
    torch.set_num_threads(1)
    runs = svan.train_variants(data, split, params, 0, ("baseline",), lambda: None)
    untrained, trained = runs["baseline"].evaluations[0], runs["baseline"].evaluations[-1]
    assert trained.ndcg > 2 * untrained.ndcg and trained.ndcg > 0.02
    assert trained.auc > untrained.auc
    assert np.mean(runs["baseline"].losses[-10:]) < np.mean(runs["baseline"].losses[:10])


def test_train_job_streams_metrics_and_saves_plots_tables_and_checkpoints(tmp_path):
    outputs, events = run_job(tmp_path, **TINY)
    for name in ("erank_plot", "channel_erank_plot", "spectra_plot", "quality_plot"):
        spec = json.loads((tmp_path / outputs[name]).read_text())
        assert spec["kind"] == "plot" and spec["series"]
        assert {s["style"] for s in spec["series"]} == {"line"}
    curves = json.loads((tmp_path / outputs["erank_plot"]).read_text())["series"]
    assert [s["name"] for s in curves] == ["baseline", "svan"] and curves[0]["x"] == [0, 2, 4]
    table = json.loads((tmp_path / outputs["channel_erank_table"]).read_text())
    assert len(table["rows"]) == 2 * 2 * len(svan.CHANNELS)  # variants x layers x channels
    for variant in svan.VARIANTS:
        assert (tmp_path / outputs[f"checkpoint_{variant}"] / "model.safetensors").exists()
        assert np.load(tmp_path / "artifacts" / f"spectrum_items_{variant}.npy").ndim == 1
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 2, 4]
    assert {"erank_items_baseline", "erank_items_svan", "erank_action_item_svan",
            "ndcg_baseline", "auc_svan", "loss_svan"} <= set(metrics[-1])
    assert "erank_gain_percent" in outputs["final"]
    kinds = {e["kind"] for e in events if e["type"] == "job_artifact"}
    assert {"plot", "table", "array", "checkpoint"} <= kinds


def test_cancel_stops_training(tmp_path):
    def emit(event: dict) -> None:
        if event["type"] == "job_progress":
            ctx.request_cancel()

    ctx = JobContext("j", tmp_path, emit=emit, seed=0)
    with pytest.raises(Cancelled):
        TRAIN.run(ctx, TRAIN.params(**{**TINY, "steps": 10_000}), {})


@pytest.mark.parametrize("bad", [
    {"d_model": 30, "n_heads": 4}, {"holdout": 8, "max_interactions": 8}, {"steps": 0},
    {"variant": "both_please"}, {"learning_rate": 0.1}, {"dropout": 1.0},
])
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        TRAIN.params(**bad)



def test_reproduce_smoke_returns_a_claim(tmp_path):
    outputs, _ = run_job(tmp_path, REPRODUCE, smoke=True)
    claim = outputs["claim"]
    assert claim["paper"] == "svan" and claim["smoke"] is True and claim["seeds"] == [0]
    assert len(claim["criteria"]) == 4
    for criterion in claim["criteria"]:
        assert math.isfinite(criterion["measured"]) and criterion["paper"]
        assert isinstance(criterion["passed"], bool)
    assert claim["criteria"][0]["target"] == 5.0
    assert claim["passed"] == all(c["passed"] for c in claim["criteria"])
    json.dumps(claim)
