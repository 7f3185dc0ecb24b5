"""pita: statements with checkable proofs, DP and RT transformers; tiny runs check behaviour."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.methods import pita
from engine.models.proof_transformer import ProofTransformer, ProofTransformerConfig

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


def test_reproduce_params_forbid_unknown_fields():
    with pytest.raises(ValidationError):
        REPRODUCE.params(smoke=True, cells=4)



def test_reproduce_smoke_returns_a_claim(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    outputs = REPRODUCE.run(ctx, REPRODUCE.params(smoke=True), {})
    claim = outputs["claim"]
    assert claim["smoke"] is True and claim["paper"] == "pita" and claim["seeds"] == [0]
    assert [c["name"][:3] for c in claim["criteria"]] == ["(1)", "(2)"]
    for criterion in claim["criteria"]:
        assert math.isfinite(criterion["measured"]) and criterion["paper"]
    assert claim["passed"] == all(c["passed"] for c in claim["criteria"])
    for cell in ("broad_shallow", "broad_deep", "narrow_shallow", "narrow_deep"):
        spec = json.loads((tmp_path / outputs[f"accuracy_{cell}"]).read_text())
        assert len(spec["series"]) == 3
    json.dumps(claim)
