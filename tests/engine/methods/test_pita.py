"""pita: statements with checkable proofs, DP and RT transformers; tiny runs check behaviour."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.methods import pita
from engine.models.proof_transformer import ProofTransformer, ProofTransformerConfig
from engine.models.star_block import StarBlock, StarBlockConfig

SPECS = {spec.id: spec for spec in pita.SPECS}
TRAIN = SPECS["pita.train"]
REPRODUCE = SPECS["pita.reproduce"]


def statements(task: str, depth: int, count: int = 20, **params) -> list[pita.Statement]:
    source = pita.StatementSource(pita.Params(task=task, **params), seed=3)
    return [source.draw(depth) for _ in range(count)]


# -- generators and the proof checker ----------------------------------------------------------

@pytest.mark.parametrize("task", ["logic", "transitive"])
@pytest.mark.parametrize("depth", [1, 4, 9])
def test_generated_proofs_have_the_asked_depth_and_check(task, depth):
    for s in statements(task, depth, max_test_depth=10):
        assert s.depth == depth
        assert pita.check_proof(s, s.proof, s.answer).valid, s.text()
        assert not pita.check_proof(s, s.proof, not s.answer).valid


def test_both_answers_occur_and_logic_statements_have_a_fixed_size():
    logic = statements("logic", 5, count=40, distractors=4)
    assert {s.answer for s in logic} == {True, False}
    assert {len(s.rules) for s in logic} == {5 + 4}  # a false chain swaps its last rule
    assert all(len(set(s.facts)) == pita.LOGIC_FACTS for s in logic)


def test_logic_breadth_bounds_the_atoms_used():
    used = {a for s in statements("logic", 3, count=50, atoms=9, max_test_depth=5)
            for rule in s.rules for a in rule if a}
    assert used <= set(range(1, 10)) and len(used) == 9


def test_transitive_breadth_is_the_number_of_labellings():
    narrow = statements("transitive", 2, count=60, graphs=1, nodes=10, window=10,
                        max_test_depth=5)
    assert len({tuple(sorted(s.rules)) for s in narrow}) == 1
    broad = statements("transitive", 2, count=60, graphs=0, nodes=10, window=10,
                       max_test_depth=5)
    assert len({tuple(sorted(s.rules)) for s in broad}) > 50
    window = statements("transitive", 2, count=30, nodes=12, window=6, max_test_depth=4)
    assert {len(s.rules) for s in window} == {5}


def test_checker_rejects_corrupted_proofs():
    s = next(s for s in statements("logic", 4, count=40) if s.answer)
    proof = list(s.proof)
    assert pita.check_proof(s, proof, True).valid
    swapped = [proof[1], proof[0], *proof[2:]]
    check = pita.check_proof(s, swapped, True)
    assert not check.valid and check.error_step == 0
    bogus = proof[:2] + [s.facts[0]] + proof[3:]
    assert pita.check_proof(s, bogus, True).error_step == 2
    truncated = pita.check_proof(s, proof[:-1], True)
    assert not truncated.valid and truncated.error_step == 3 and "YES" in truncated.reason
    stopped_early = pita.check_proof(s, proof[:-1], False)
    assert not stopped_early.valid and "can still be derived" in stopped_early.reason
    assert not pita.check_proof(s, proof, None).valid


def test_checker_on_a_hand_written_statement():
    s = pita.Statement(facts=(1, 2), rules=((1, 2, 3), (3, 0, 4), (5, 1, 6)), query=4,
                       proof=(3, 4), answer=True)
    assert pita.check_proof(s, [3, 4], True).valid
    assert pita.check_proof(s, [4, 3], True).reason == "no rule with known premises derives p4"
    no = pita.Statement(facts=(1, 2), rules=((1, 2, 3), (5, 1, 6)), query=6, proof=(3,),
                        answer=False)
    assert pita.check_proof(no, [3], False).valid
    assert not pita.check_proof(no, [], False).valid


def test_encoding_targets_dp_verdict_and_rt_trace():
    s = statements("transitive", 3, count=1, nodes=8, window=8, max_test_depth=4)[0]
    n = 8
    tokens, targets = pita.encode_batch([s], "dp", n)
    assert tokens.shape == (1, 1 + 7 + 1, 4)
    assert targets[0, -1] == (n + 1 if s.answer else n + 2)
    assert (targets[0, :-1] == -100).all()
    tokens, targets = pita.encode_batch([s], "rt", n)
    assert tokens.shape[1] == 9 + 3
    assert list(targets[0, 8:]) == [*s.proof, n + 1 if s.answer else n + 2]
    assert list(tokens[0, 9:, 3]) == list(s.proof)


# -- the model ------------------------------------------------------------------------------------

def test_rule_order_does_not_matter_without_positions():
    # One layer: the query reads every token's own embedding, so order cannot enter (deeper
    # layers see causal prefixes, which do depend on the order).
    cfg = ProofTransformerConfig(n_symbols=8, d_model=16, n_heads=2, n_layers=1)
    torch.manual_seed(0)
    model = ProofTransformer(cfg).eval()
    s = statements("transitive", 2, count=1, nodes=8, window=8, max_test_depth=4)[0]
    context = torch.from_numpy(pita.encode_context(s))[None]
    shuffled = torch.cat([context[:, :1], context[:, 1:-1].flip(1), context[:, -1:]], dim=1)
    assert torch.allclose(model(context)[:, -1], model(shuffled)[:, -1], atol=1e-5)
    learned = ProofTransformer(ProofTransformerConfig(n_symbols=8, d_model=16, n_heads=2,
                                                      n_layers=1, positions="learned")).eval()
    assert not torch.allclose(learned(context)[:, -1], learned(shuffled)[:, -1], atol=1e-5)


def test_generate_trace_stops_at_the_verdict():
    cfg = ProofTransformerConfig(n_symbols=4, d_model=8, n_heads=1, n_layers=1)
    model = ProofTransformer(cfg)
    with torch.no_grad():
        model.head.bias.copy_(torch.tensor([0, 0, 0, 0, 0, 10.0, 0]))  # always YES
    steps, verdicts = model.generate_trace(torch.zeros(3, 5, 4, dtype=torch.long), 4)
    assert verdicts.tolist() == [cfg.yes] * 3 and (steps == 0).all()


def test_tiny_models_learn_depth_one_above_chance():
    p = pita.Params(task="transitive", nodes=6, window=6, graphs=1, train_depth=1,
                    max_test_depth=1, steps=150, batch_size=32, d_model=32, lr=3e-3,
                    eval_per_depth=64, eval_every=150)
    tests = pita.held_out_statements(p, seed=0)
    trained = pita.train_models(p, 0, lambda: None, tests=tests)
    ev = pita.evaluate(trained.models, tests, p.n_symbols, lambda: None)
    assert ev.accuracy["dp"][0] > 0.8 and ev.accuracy["rt"][0] > 0.8


# -- the job --------------------------------------------------------------------------------------

def test_train_saves_curves_table_checkpoints_and_streams_metrics(tmp_path):
    events: list[dict] = []
    ctx = JobContext("j", tmp_path, emit=events.append, seed=0)
    params = TRAIN.params(task="logic", atoms=12, distractors=2, train_depth=2, max_test_depth=4,
                          steps=6, batch_size=8, d_model=16, eval_per_depth=4, eval_every=3)
    outputs = TRAIN.run(ctx, params, {})
    spec = json.loads((tmp_path / outputs["accuracy_plot"]).read_text())
    assert spec["kind"] == "plot" and [c["name"] for c in spec["series"]][:2] == ["DP", "RT"]
    assert spec["series"][0]["x"] == [1, 2, 3, 4]
    table = json.loads((tmp_path / outputs["examples"]).read_text())
    assert table["columns"] == pita.TABLE_COLUMNS
    assert len(table["rows"]) == 4 * pita.TABLE_ROWS_PER_DEPTH
    assert all(len(row) == len(table["columns"]) for row in table["rows"])
    for name in ("dp", "rt"):
        assert (tmp_path / outputs[f"checkpoint_{name}"] / "model.safetensors").exists()
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [3, 6]
    assert {"loss_dp", "loss_rt", "acc_rt_train_depths", "acc_dp_longer"} <= set(metrics[0])
    assert np.load(tmp_path / outputs["accuracy"]).shape == (2, 4)
    json.dumps(outputs["final"])


def test_cancel_stops_training(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        TRAIN.run(ctx, TRAIN.params(steps=10_000), {})


@pytest.mark.parametrize("bad", [
    {"steps": 0}, {"task": "sudoku"}, {"max_test_depth": 20},  # > window - 2
    {"train_depth": 5, "max_test_depth": 4}, {"task": "logic", "atoms": 8},
    {"window": 30}, {"d_model": 30, "n_heads": 4}, {"lr": 0}, {"depth": 3},
])
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        TRAIN.params(**bad)


def test_reproduce_params_forbid_unknown_fields_and_bad_cells():
    with pytest.raises(ValidationError):
        REPRODUCE.params(smoke=True, graphs=4)
    with pytest.raises(ValidationError):
        REPRODUCE.params(cells=[(1, 8)])


# -- reproduce (spec v2): the star-graph task --------------------------------------------------

V2 = pita.PitaReproduceParams


def test_profiles_hold_the_spec_numbers():
    smoke, cpu, gpu = (V2(profile=p) for p in ("smoke", "cpu", "gpu"))
    assert (cpu.cells, cpu.seeds, cpu.step_cap, cpu.width, cpu.batch_size) == (
        [(16, 8), (2, 32)], 5, 10_000, 64, 64)
    assert (gpu.cells, gpu.seeds, gpu.step_cap, gpu.width, gpu.batch_size) == (
        [(2, 8), (2, 40), (16, 8), (16, 40)], 5, 40_000, 1024, 128)
    assert (smoke.cells, smoke.step_cap) == ([(4, 6)], 50)
    for profile in (smoke, cpu, gpu):
        assert (profile.lr, profile.fallback_lr, profile.check_every) == (1e-3, 3e-4, 500)
        assert (profile.stop_accuracy, profile.learned_accuracy) == (0.98, 0.95)
        assert profile.min_learned_seeds == 5 and not profile.rotary
    assert (cpu.gate_queries, cpu.test_queries, gpu.gate_queries, gpu.test_queries) == (
        1024, 512, 1024, 512)
    assert pita.train_hops(32) == list(range(1, 9)) and pita.test_hops(32) == list(range(9, 32))
    assert pita.train_hops(8) == [1, 2] and pita.test_hops(40)[-1] == 39


def test_star_queries_are_balanced_and_the_full_trace_decides_them():
    breadth, depth = 3, 10
    q = pita.star_queries(np.random.default_rng(0), breadth, depth, [2, 5, 9], 400)
    assert q.answer.mean() == 0.5 and set(q.hop.tolist()) == {2, 5, 9}
    arm_a, arm_b = q.a // depth, q.b // depth
    assert ((q.b % depth) - (q.a % depth) == q.hop).all()
    assert (arm_a[q.answer] == arm_b[q.answer]).all()
    assert (arm_a[~q.answer] != arm_b[~q.answer]).all()
    trace = pita.full_trace(q.b, breadth, depth)
    assert trace.shape == (400, depth - 1)
    assert (pita.trace_verdict(q.a, trace) == q.answer).all()
    assert (pita.first_trace_error(q.b, trace, breadth, depth) == -1).all()
    broken = trace.copy()
    broken[:, 4] = (broken[:, 4] + 1) % (breadth * depth)
    assert (pita.first_trace_error(q.b, broken, breadth, depth) == 4).all()


def test_rt_targets_are_the_trace_then_the_verdict():
    breadth, depth = 2, 6
    labels = pita.star_labels(0, breadth, depth)
    q = pita.Queries(np.array([0]), np.array([3]), np.array([3]), np.array([True]))
    tokens, targets = pita.sequences(q, labels, breadth, depth, "rt")
    trace = labels[[2, 1, 0, 11, 10]]  # stepping toward the root, wrapping to the last node
    assert tokens.tolist() == [[labels[0], labels[3], *trace]]
    assert targets.tolist() == [[-100, *trace, breadth * depth]]  # YES = the node count
    tokens, targets = pita.sequences(q, labels, breadth, depth, "dp")
    assert tokens.shape == (1, 2) and targets.tolist() == [1.0]


def test_the_block_has_frozen_embeddings_and_rotary_switches_position_on():
    plain = StarBlock(StarBlockConfig(vocab=10, width=16, head="rt"))
    assert "embedding" not in dict(plain.named_parameters())
    swapped = torch.tensor([[1, 2, 3], [2, 1, 3]])  # the same tokens before the last, reordered
    out = plain(swapped)[:, -1]
    assert torch.allclose(out[0], out[1], rtol=0, atol=1e-7)  # no positions: order unseen
    rotary = StarBlock(StarBlockConfig(vocab=10, width=16, head="rt", rotary=True))
    rotary.load_state_dict(plain.state_dict())
    out = rotary(swapped)[:, -1]
    assert (out[0] - out[1]).abs().max() > 1e-5  # small at initialisation, but there
    dp = StarBlock(StarBlockConfig(vocab=10, width=16, head="dp"))
    assert dp(swapped).shape == (2, 3)


def _rows(cell, rt_accuracy, dp_accuracy, learned=(0.99, 0.99)):
    """Planted unit results for one cell: five seeds, per-seed test accuracies."""
    breadth, depth = cell
    rows = []
    for seed, (rt, dp) in enumerate(zip(rt_accuracy, dp_accuracy, strict=True)):
        for head, value, gate in (("rt", rt, learned[0]), ("dp", dp, learned[1])):
            rows.append({"breadth": breadth, "depth": depth, "seed": seed, "head": head,
                         "in_distribution": gate, "test_accuracy": [value, value]})
    return rows


SEEDS = [0, 1, 2, 3, 4]
HIGH, LOW = [0.90, 0.92, 0.88, 0.91, 0.93], [0.60, 0.62, 0.58, 0.61, 0.63]


def _criteria(rows):
    return pita.pita_criteria(pita.cell_results(rows, SEEDS, 0.95), 5)


def test_planted_support_passes_both_criteria():
    first, second = _criteria(_rows((16, 8), HIGH, LOW) + _rows((2, 32), LOW, HIGH))
    assert (first.verdict, second.verdict) == ("PASS", "PASS")
    assert first.quote == pita.QUOTE_BROAD and "B = 16, D = 8" in first.name
    assert "B = 2, D = 32" in second.name and second.estimate == pytest.approx(-0.3)


def test_planted_violations_fail_each_criterion():
    first, second = _criteria(_rows((16, 8), LOW, HIGH) + _rows((2, 32), HIGH, LOW))
    assert (first.verdict, second.verdict) == ("FAIL", "FAIL")


def test_the_training_gate_refuses_an_unlearned_cell():
    unlearned = _rows((16, 8), HIGH, LOW, learned=(0.99, 0.80)) + _rows((2, 32), LOW, HIGH)
    results = pita.cell_results(unlearned, SEEDS, 0.95)
    assert results[(16, 8)].learned_seeds == [] and results[(2, 32)].learned_seeds == SEEDS
    first, second = pita.pita_criteria(results, 5)
    assert first.verdict == "INCONCLUSIVE" and "not learned" in first.decides_with
    assert second.verdict == "PASS"
    one_short = [r for r in _rows((16, 8), HIGH, LOW) if r["seed"] != 4 or r["head"] == "rt"]
    one_short += [{**r, "in_distribution": 0.5} for r in _rows((16, 8), HIGH, LOW)
                  if r["seed"] == 4 and r["head"] == "dp"]
    first, _ = _criteria(one_short + _rows((2, 32), LOW, HIGH))
    assert first.verdict == "INCONCLUSIVE" and first.computed_verdict() == "PASS"


def test_reproduce_smoke_returns_the_v2_schema(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    outputs = REPRODUCE.run(ctx, REPRODUCE.params(profile="smoke"), {})
    claim = outputs["claim"]
    assert claim["spec"] == "v2" and claim["smoke"] is True and claim["seeds"] == [0, 1]
    assert [c["name"][:3] for c in claim["criteria"]] == ["(1)", "(2)"]
    assert all(c["verdict"] == "INCONCLUSIVE" and c["quote"] for c in claim["criteria"])
    assert [check["passed"] for check in claim["sanity"]] == [True, True, True]
    spec = json.loads((tmp_path / outputs["accuracy_B4_D6"]).read_text())
    assert [s["name"] for s in spec["series"]] == ["DP", "RT"]
    json.dumps(claim)
