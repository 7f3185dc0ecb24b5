"""PITA: do proof-like reasoning traces help small transformers generalise to longer proofs?

Statements are Horn-clause problems in propositional logic: some atoms are given as facts,
rules ``p & q -> r`` (or ``p -> r``) derive new atoms, and the question is whether a query atom
follows. A proof is the list of atoms derived in order; ``check_proof`` verifies each step
(some rule with all premises known concludes it) and the verdict (YES: the query was derived;
NO: no rule can derive anything new and the query is not known).

Two generators (``Statement`` for both):

* ``logic``: a chain of ``depth`` rules each needing the previous conclusion (the other premise
  a known atom) leads from the facts to the query; ``distractors`` rules carry a premise that
  can never be derived. A false statement of depth k has a chain of k + 1 rules whose last rule
  is dropped, so its proof (the saturation) also has k steps; one distractor always concludes
  the query, so "does any rule conclude the query?" does not give the answer away. Breadth = the
  number of distinct atoms the family draws from (``atoms``).
* ``transitive``: transitive inference on a chain of ``nodes`` labelled nodes, of which a
  statement shows ``window`` consecutive ones at a random offset. Each adjacent pair is a rule
  ``x -> y``, the fact is the query's first node a, the query its second node b: "is b after
  a?". The trace walks forward from a until it reaches b (YES) or the window's end (NO), so
  depth = the number of steps walked. (The random window keeps a NO statement's depth from
  telling which node a is.) Breadth = the number of distinct labellings of the chain
  (``graphs``; 0 = a fresh random labelling for every statement).

Models (``engine.models.proof_transformer``): DP reads the statement and predicts YES/NO at the
query; RT predicts the trace step by step, then the verdict. Both are trained on depths
1..``train_depth`` and tested on every depth up to ``max_test_depth``. Accuracy = the verdict is
right (for RT, whatever the trace); the trace table marks where a generated trace first broke.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from engine import verdicts
from engine.api import (
    Claim,
    MethodParams,
    MethodSpec,
    ReproduceParams,
    Resources,
    reproduce_spec,
)
from engine.plots import plot, series

if TYPE_CHECKING:
    from engine.context import JobContext

PAPER = "pita"
ROLE_FACT, ROLE_RULE, ROLE_QUERY, ROLE_TRACE = 1, 2, 3, 4  # as in proof_transformer.ROLES
LOGIC_FACTS = 2
MODELS = ("dp", "rt")
TABLE_ROWS_PER_DEPTH = 4


# -- statements and proofs ---------------------------------------------------------------------

@dataclass(frozen=True)
class Statement:
    """A Horn problem: ``rules`` are (premise a, premise b or 0, conclusion); symbols are >= 1."""

    facts: tuple[int, ...]
    rules: tuple[tuple[int, int, int], ...]
    query: int
    proof: tuple[int, ...]  # the atoms derived, in order (for NO: the full saturation)
    answer: bool

    @property
    def depth(self) -> int:
        return len(self.proof)

    def text(self) -> str:
        rules = ", ".join(f"{_atom(a)}{' & ' + _atom(b) if b else ''} -> {_atom(c)}"
                          for a, b, c in self.rules)
        facts = ", ".join(_atom(f) for f in self.facts)
        return f"facts {facts}; rules {rules}; query {_atom(self.query)}?"


def _atom(symbol: int) -> str:
    return f"p{symbol}"


@dataclass(frozen=True)
class ProofCheck:
    valid: bool
    error_step: int | None  # index of the first bad step (len(proof) = the verdict), or None
    reason: str


def check_proof(statement: Statement, proof: list[int] | tuple[int, ...], verdict: bool | None
                ) -> ProofCheck:
    """Verify a proof step by step, then its verdict; see the module docstring."""
    known = set(statement.facts)
    for index, atom in enumerate(proof):
        if atom in known:
            return ProofCheck(False, index, f"{_atom(atom)} was already known")
        if not any(c == atom and a in known and (b == 0 or b in known)
                   for a, b, c in statement.rules):
            return ProofCheck(False, index, f"no rule with known premises derives {_atom(atom)}")
        known.add(atom)
        if atom == statement.query and index != len(proof) - 1:
            return ProofCheck(False, index + 1, "the proof continues after the query")
    end = len(proof)
    if verdict is None:
        return ProofCheck(False, end, "no verdict")
    if verdict:
        if statement.query in known:
            return ProofCheck(True, None, "query derived")
        return ProofCheck(False, end, f"YES without deriving {_atom(statement.query)}")
    if statement.query in known:
        return ProofCheck(False, end, "NO although the query was derived")
    for a, b, c in statement.rules:
        if c not in known and a in known and (b == 0 or b in known):
            return ProofCheck(False, end, f"NO although {_atom(c)} can still be derived")
    return ProofCheck(True, None, "saturated without the query")


def logic_statement(rng: np.random.Generator, depth: int, atoms: int, distractors: int,
                    answer: bool) -> Statement:
    """A logic statement whose proof has exactly ``depth`` steps (module docstring)."""
    chain_length = depth if answer else depth + 1
    needed = LOGIC_FACTS + chain_length + 1
    if atoms < needed:
        raise ValueError(f"depth {depth} needs at least {needed} atoms, the family has {atoms}")
    symbols = rng.permutation(atoms)[:atoms] + 1
    facts = [int(s) for s in symbols[:LOGIC_FACTS]]
    chain = [int(s) for s in symbols[LOGIC_FACTS:LOGIC_FACTS + chain_length]]
    dead = [int(s) for s in symbols[LOGIC_FACTS + chain_length:]]
    known, previous, rules = list(facts), facts[int(rng.integers(len(facts)))], []
    for conclusion in chain:
        other = known[int(rng.integers(len(known)))]
        second = other if (other != previous and rng.random() < 0.5) else 0
        rules.append((previous, second, conclusion))
        known.append(conclusion)
        previous = conclusion
    if not answer:
        rules.pop()  # the query's own rule is missing: the chain stops one short
    for index in range(distractors):  # the first concludes the query: no one-hop shortcut
        blocked = dead[int(rng.integers(len(dead)))]
        other = known[int(rng.integers(len(known)))]
        target = chain[-1] if index == 0 else int(symbols[int(rng.integers(atoms))])
        a, b = (blocked, other) if rng.random() < 0.5 else (other, blocked)
        rules.append((a, b if rng.random() < 0.7 else 0, target) if a == blocked
                     else (a, b, target))
    rules = [rules[i] for i in rng.permutation(len(rules))]
    proof = tuple(chain[:depth])
    return Statement(tuple(facts), tuple(rules), chain[-1], proof, answer)


def transitive_statement(rng: np.random.Generator, depth: int, labels: np.ndarray, answer: bool,
                         window: int | None = None) -> Statement:
    """A walk of exactly ``depth`` steps along ``window`` consecutive nodes (at a random offset)
    of the chain labelled ``labels`` (labels[i] is the i-th node; default: the whole chain)."""
    window = window or len(labels)
    offset = int(rng.integers(len(labels) - window + 1))
    labels = labels[offset:offset + window]
    nodes = window
    if answer:
        start = int(rng.integers(nodes - depth))
        target = start + depth
    else:
        start = nodes - 1 - depth
        if start < 1:
            raise ValueError(f"a NO statement of depth {depth} needs more than {depth + 1} nodes")
        target = int(rng.integers(start))
    rules = [(int(labels[i]), 0, int(labels[i + 1])) for i in range(nodes - 1)]
    rules = [rules[i] for i in rng.permutation(len(rules))]
    end = target if answer else nodes - 1
    proof = tuple(int(labels[i]) for i in range(start + 1, end + 1))
    return Statement((int(labels[start]),), tuple(rules), int(labels[target]), proof, answer)


# -- parameters --------------------------------------------------------------------------------

class Params(MethodParams):
    """Train DP and RT transformers on short proofs; test them on every depth."""

    task: Literal["transitive", "logic"] = Field(
        "transitive", description="transitive inference on a chain, or propositional logic")
    nodes: int = Field(24, ge=3, le=64, description="transitive: labelled nodes in the chain")
    window: int = Field(16, ge=3, le=64, description="transitive: consecutive nodes per statement")
    graphs: int = Field(0, ge=0, le=100_000, description=(
        "transitive breadth: distinct labellings of the chain (0 = fresh for every statement)"))
    atoms: int = Field(40, ge=4, le=256, description="logic breadth: distinct atoms in the family")
    distractors: int = Field(6, ge=1, le=64, description="logic: rules that can never fire")
    train_depth: int = Field(3, ge=1, le=60, description="train on proofs of 1..train_depth steps")
    max_test_depth: int = Field(12, ge=1, le=62, description="test on depths 1..max_test_depth")
    models: Literal["both", "dp", "rt"] = Field("both", description="which models to train")
    steps: int = Field(1000, ge=1, le=200_000, description="training steps per model")
    batch_size: int = Field(32, ge=2, le=4096, description="statements per step")
    lr: float = Field(3e-3, gt=0, le=1.0, description="AdamW learning rate")
    d_model: int = Field(64, ge=8, le=512, description="transformer width")
    n_heads: int = Field(4, ge=1, le=16, description="attention heads")
    n_layers: int = Field(2, ge=1, le=12, description="transformer layers")
    positions: Literal["none", "learned"] = Field(
        "none", description="no positional embedding (content lookup) or learned absolute ones")
    eval_per_depth: int = Field(128, ge=2, le=10_000, description="test statements per depth")
    eval_every: int = Field(250, ge=1, le=100_000, description="evaluate every k steps")

    @model_validator(mode="after")
    def _check_depths(self) -> Params:
        if self.max_test_depth < self.train_depth:
            raise ValueError("max_test_depth must be at least train_depth")
        if self.task == "transitive" and self.window > self.nodes:
            raise ValueError(f"window {self.window} exceeds the chain's {self.nodes} nodes")
        if self.task == "transitive" and self.max_test_depth > self.window - 2:
            raise ValueError(f"a window of {self.window} nodes allows depths up to "
                             f"{self.window - 2}: raise window or lower max_test_depth")
        if self.task == "logic" and self.atoms < LOGIC_FACTS + self.max_test_depth + 2:
            raise ValueError(f"depth {self.max_test_depth} needs at least "
                             f"{LOGIC_FACTS + self.max_test_depth + 2} atoms")
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        return self

    @property
    def n_symbols(self) -> int:
        return self.nodes if self.task == "transitive" else self.atoms


class StatementSource:
    """Draws statements of a given depth for one task family (its breadth fixed by params)."""

    def __init__(self, p: Params, seed: int) -> None:
        self.p = p
        self.rng = np.random.default_rng(seed)
        family = np.random.default_rng(seed + 7919)  # the fixed labellings, apart from sampling
        self.labellings = [family.permutation(p.nodes) + 1 for _ in range(p.graphs)]

    def draw(self, depth: int, answer: bool | None = None) -> Statement:
        answer = bool(self.rng.random() < 0.5) if answer is None else answer
        p = self.p
        if p.task == "logic":
            return logic_statement(self.rng, depth, p.atoms, p.distractors, answer)
        if self.labellings:
            labels = self.labellings[int(self.rng.integers(len(self.labellings)))]
        else:
            labels = self.rng.permutation(p.nodes) + 1
        return transitive_statement(self.rng, depth, labels, answer, p.window)


# -- encoding ----------------------------------------------------------------------------------

def encode_context(statement: Statement) -> np.ndarray:
    """(T, 4) rows (role, a, b, c): facts, rules, then the query."""
    rows = [(ROLE_FACT, 0, 0, f) for f in statement.facts]
    rows += [(ROLE_RULE, a, b, c) for a, b, c in statement.rules]
    rows.append((ROLE_QUERY, 0, 0, statement.query))
    return np.array(rows, dtype=np.int64)


def encode_batch(statements: list[Statement], model: str, n_symbols: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(tokens (B, T, 4), targets (B, T) with -100 where no loss), right-padded.

    DP: one target, the verdict at the query. RT: the next trace atom at the query and at every
    trace step, the verdict after the last step.
    """
    yes, no = n_symbols + 1, n_symbols + 2
    sequences, targets = [], []
    for s in statements:
        context = encode_context(s)
        verdict = yes if s.answer else no
        if model == "dp":
            tokens, target = context, np.full(len(context), -100)
            target[-1] = verdict
        else:
            trace = np.array([(ROLE_TRACE, 0, 0, atom) for atom in s.proof],
                             dtype=np.int64).reshape(-1, 4)
            tokens = np.concatenate([context, trace])
            target = np.full(len(tokens), -100)
            target[len(context) - 1:] = [*s.proof, verdict]
        sequences.append(tokens)
        targets.append(target)
    length = max(len(t) for t in sequences)
    batch_tokens = np.zeros((len(statements), length, 4), dtype=np.int64)
    batch_targets = np.full((len(statements), length), -100, dtype=np.int64)
    for i, (tokens, target) in enumerate(zip(sequences, targets, strict=True)):
        batch_tokens[i, :len(tokens)] = tokens
        batch_targets[i, :len(target)] = target
    return batch_tokens, batch_targets


# -- training and evaluation --------------------------------------------------------------------

@dataclass
class Evaluation:
    depths: list[int]
    accuracy: dict[str, list[float]]  # model -> accuracy per depth
    trace_valid: list[float]  # RT: fraction of generated proofs that check, per depth
    rows: list[list[Any]]  # browseable examples


@dataclass
class TrainedModels:
    models: dict[str, Any]
    losses: dict[str, list[float]]
    history: list[tuple[int, dict[str, float]]]  # (step, metrics) at each evaluation


def model_config(p: Params) -> Any:
    from engine.models.proof_transformer import ProofTransformerConfig

    longest = 1 + 2 * (p.max_test_depth + 2) + max(p.window, p.distractors + p.max_test_depth + 4)
    return ProofTransformerConfig(n_symbols=p.n_symbols, max_len=longest + 8, d_model=p.d_model,
                                  n_heads=p.n_heads, n_layers=p.n_layers, positions=p.positions)


def held_out_statements(p: Params, seed: int) -> dict[int, list[Statement]]:
    """The same held-out statements for every model: half YES, half NO at each depth."""
    source = StatementSource(p, seed)
    source.rng = np.random.default_rng(seed + 104_729)
    return {d: [source.draw(d, answer=i % 2 == 0) for i in range(p.eval_per_depth)]
            for d in range(1, p.max_test_depth + 1)}


def evaluate(models: dict[str, Any], tests: dict[int, list[Statement]], n_symbols: int,
             check_cancelled: Callable[[], None], rows_per_depth: int = 0) -> Evaluation:
    import torch

    yes = n_symbols + 1
    depths = sorted(tests)
    accuracy = {name: [] for name in models}
    trace_valid: list[float] = []
    rows: list[list[Any]] = []
    for depth in depths:
        check_cancelled()
        statements = tests[depth]
        truth = np.array([s.answer for s in statements])
        context = torch.from_numpy(np.stack([encode_context(s) for s in statements]))
        dp_verdicts = rt_steps = rt_verdicts = None
        for name, model in models.items():
            model.eval()
            with torch.no_grad():
                if name == "dp":
                    dp_verdicts = model(context)[:, -1].argmax(-1).numpy()
                    accuracy[name].append(float(np.mean((dp_verdicts == yes) == truth)))
                else:
                    steps, verdicts = model.generate_trace(context, depth + 4)
                    rt_steps, rt_verdicts = steps.numpy(), verdicts.numpy()
                    said = [None if v == 0 else bool(v == yes) for v in rt_verdicts]
                    accuracy[name].append(float(np.mean([s is not None and s == t for s, t
                                                         in zip(said, truth, strict=True)])))
            model.train()
        checks = []
        if rt_steps is not None:
            for i, s in enumerate(statements):
                proof = [int(a) for a in rt_steps[i] if a != 0]
                verdict = None if rt_verdicts[i] == 0 else bool(rt_verdicts[i] == yes)
                checks.append((proof, verdict, check_proof(s, proof, verdict)))
            trace_valid.append(float(np.mean([c[2].valid for c in checks])))
        for i in range(min(rows_per_depth, len(statements))):
            s = statements[i]
            row = [depth, s.text(), "YES" if s.answer else "NO",
                   " ".join(_atom(a) for a in s.proof)]
            row.append("" if dp_verdicts is None else ("YES" if dp_verdicts[i] == yes else "NO"))
            if checks:
                proof, verdict, check = checks[i]
                row += [" ".join(_atom(a) for a in proof),
                        "-" if verdict is None else ("YES" if verdict else "NO"),
                        check.valid, "" if check.error_step is None else check.error_step,
                        check.reason]
            else:
                row += ["", "", "", "", ""]
            rows.append(row)
    return Evaluation(depths, accuracy, trace_valid, rows)


TABLE_COLUMNS = ["depth", "statement", "answer", "proof", "DP verdict", "RT trace", "RT verdict",
                 "RT proof checks", "first wrong step", "checker says"]


def train_models(p: Params, seed: int, check_cancelled: Callable[[], None],
                 on_eval: Callable[[int, dict[str, float]], None] | None = None,
                 tests: dict[int, list[Statement]] | None = None) -> TrainedModels:
    """Train the selected models on depths 1..train_depth with identical data streams."""
    import torch

    from engine.models.proof_transformer import ProofTransformer

    names = MODELS if p.models == "both" else (p.models,)
    tests = tests if tests is not None else held_out_statements(p, seed)
    in_range = {d: tests[d] for d in tests if d <= p.train_depth}
    beyond = {d: tests[d] for d in tests if d > p.train_depth}
    models, optimizers, losses = {}, {}, {name: [] for name in names}
    for index, name in enumerate(names):
        torch.manual_seed(seed * 1000 + index)
        models[name] = ProofTransformer(model_config(p))
        optimizers[name] = torch.optim.AdamW(models[name].parameters(), lr=p.lr,
                                             weight_decay=0.01)
    source = StatementSource(p, seed)
    history = []
    for step in range(1, p.steps + 1):
        check_cancelled()
        statements = [source.draw(int(source.rng.integers(1, p.train_depth + 1)))
                      for _ in range(p.batch_size)]
        lr = p.lr * min(1.0, step / 100) * 0.5 * (1 + math.cos(math.pi * step / p.steps))
        for name in names:
            tokens, targets = encode_batch(statements, name, p.n_symbols)
            logits = models[name](torch.from_numpy(tokens))
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), torch.from_numpy(targets).reshape(-1))
            for group in optimizers[name].param_groups:
                group["lr"] = lr
            optimizers[name].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(models[name].parameters(), 1.0)
            optimizers[name].step()
            losses[name].append(loss.item())
        if step % p.eval_every == 0 or step == p.steps:
            metrics = {f"loss_{n}": float(np.mean(losses[n][-p.eval_every:])) for n in names}
            for part, subset in (("train_depths", in_range), ("longer", beyond)):
                if subset:
                    ev = evaluate(models, subset, p.n_symbols, check_cancelled)
                    metrics.update({f"acc_{n}_{part}": float(np.mean(ev.accuracy[n]))
                                    for n in names})
            history.append((step, metrics))
            if on_eval is not None:
                on_eval(step, metrics)
    return TrainedModels(models, losses, history)


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Small matrices: a second thread costs more than it saves, and the machine is shared."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def depth_plot(title: str, ev: Evaluation, train_depth: int) -> dict:
    curves = [series(name.upper(), ev.depths, ev.accuracy[name], "line") for name in ev.accuracy]
    if ev.trace_valid:
        curves.append(series("RT proof checks", ev.depths, ev.trace_valid, "scatter"))
    return plot(title, curves, xlabel="proof depth (steps)", ylabel="accuracy",
                hlines=[{"y": 0.5, "name": f"chance (trained on depth <= {train_depth})"}])


# -- pita.train --------------------------------------------------------------------------------

def run_train(ctx: JobContext, params: Params, inputs: dict) -> dict:
    """Train DP/RT on short proofs; save accuracy vs depth, loss curves and a browseable table."""
    tests = held_out_statements(params, ctx.seed)
    with _one_torch_thread():
        trained = train_models(params, ctx.seed, ctx.check_cancelled,
                               on_eval=lambda step, m: ctx.progress(step, params.steps, **m),
                               tests=tests)
        ev = evaluate(trained.models, tests, params.n_symbols, ctx.check_cancelled,
                      rows_per_depth=TABLE_ROWS_PER_DEPTH)
    breadth = (f"{params.graphs or 'fresh'} labellings of {params.nodes} nodes"
               if params.task == "transitive" else f"{params.atoms} atoms")
    outputs = {
        "accuracy_plot": ctx.save_artifact("accuracy_vs_depth", depth_plot(
            f"{params.task} ({breadth}), trained on depth <= {params.train_depth}", ev,
            params.train_depth)),
        "loss_plot": ctx.save_artifact("loss", plot("training loss", [
            series(name.upper(), np.arange(1, len(v) + 1), v) for name, v in
            trained.losses.items()], xlabel="step", ylabel="cross-entropy", logy=True)),
        "examples": ctx.save_artifact("examples", {"columns": TABLE_COLUMNS, "rows": ev.rows}),
        "accuracy": ctx.save_artifact("accuracy", np.array([ev.accuracy[n] for n in ev.accuracy])),
    }
    for name, model in trained.models.items():
        outputs[f"checkpoint_{name}"] = ctx.save_checkpoint(
            name, model, cfg={**model.cfg.to_dict(), "params": params.model_dump(),
                              "model": name, "seed": ctx.seed})
    longer = [i for i, d in enumerate(ev.depths) if d > params.train_depth]
    outputs["final"] = {
        "depths": ev.depths,
        **{f"accuracy_{n}": ev.accuracy[n] for n in ev.accuracy},
        **{f"accuracy_{n}_longer": float(np.mean([ev.accuracy[n][i] for i in longer]))
           if longer else math.nan for n in ev.accuracy},
        "rt_proof_checks": ev.trace_valid,
    }
    return outputs


# -- pita.reproduce (spec v2): the authors' star-graph transitive task -------------------------
#
# A star of B arms (breadth), each a chain of D nodes (depth). Node id = arm * D + level
# (level 0 next to the root); a seed relabels the ids at random. A query (a, b) asks whether b
# lies on a's arm k levels further out (positive) or is the node k levels out on another arm
# (negative, same k). The graph is never shown: it is learned in the weights. RT writes the
# D - 1 nodes reached by stepping from b toward the root (id - 1, wrapping modulo the node
# count: the "full trace"), then YES if a appeared; a negative's a lies below b's level on
# another arm and the wrap reaches only levels above b's, so the trace decides every query.

Cell = tuple[int, int]  # (breadth B, depth D)
QUOTE_BROAD = "RT models generalize well on relatively broad and shallow subsets"
QUOTE_NARROW = ("while deteriorating on relatively narrow and deep subsets compared to non-RT "
                "baselines")
STREAM_TRAIN, STREAM_TEST, STREAM_LABELS, STREAM_GATE = 0, 1, 2, 3


class PitaReproduceParams(ReproduceParams):
    """Spec v2: DP and RT (one block fixed in advance) on the star-graph task."""

    PROFILE_SETTINGS: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"cells": [(4, 6)], "step_cap": 50, "seeds": 2, "test_queries": 64,
                  "gate_queries": 128},
        "cpu": {"cells": [(16, 8), (2, 32)], "seeds": 5, "step_cap": 10_000, "width": 64,
                "batch_size": 64},
        "gpu": {"cells": [(2, 8), (2, 40), (16, 8), (16, 40)], "seeds": 5,
                "step_cap": 40_000, "width": 1024, "batch_size": 128},
    }

    cells: list[tuple[int, int]] = Field(
        [(16, 8), (2, 32)], min_length=1, description="(breadth B, depth D) cells")
    seeds: int = Field(5, ge=1, le=50, description="seeds (ctx.seed, ctx.seed + 1, ...)")
    step_cap: int = Field(10_000, ge=1, le=1_000_000, description="most training steps")
    width: int = Field(64, ge=8, le=4096, description="the block's width")
    batch_size: int = Field(64, ge=2, le=4096, description="queries per step")
    lr: float = Field(1e-3, gt=0, le=1.0, description="Adam learning rate (constant)")
    fallback_lr: float = Field(3e-4, gt=0, le=1.0,
                               description="declared fallback when the loss diverges")
    check_every: int = Field(500, ge=1, le=100_000,
                             description="steps between in-distribution checks")
    stop_accuracy: float = Field(0.98, gt=0, le=1, description="stop training at this accuracy")
    learned_accuracy: float = Field(0.95, gt=0, le=1,
                                    description="a seed counts when both models reach this")
    min_learned_seeds: int = Field(5, ge=2, le=50,
                                   description="fewer learned seeds: the cell is not learned")
    gate_queries: int = Field(1024, ge=8, le=100_000, description="fresh queries per check")
    test_queries: int = Field(512, ge=8, le=100_000, description="test queries per hop")
    rotary: bool = Field(False, description="the pre-declared secondary architecture: RoPE")

    @model_validator(mode="after")
    def _cells(self) -> PitaReproduceParams:
        for breadth, depth in self.cells:
            if breadth < 2 or depth < 6 or breadth * depth > 4096:
                raise ValueError(f"cell (B={breadth}, D={depth}): need B >= 2, D >= 6 and "
                                 "B * D <= 4096 nodes")
        if self.width % 2:
            raise ValueError("width must be even (rotary pairs channels)")
        return self


def train_hops(depth: int) -> list[int]:
    return list(range(1, round(depth / 4) + 1))


def test_hops(depth: int) -> list[int]:
    return list(range(round(depth / 4) + 1, depth))


def star_labels(seed: int, breadth: int, depth: int) -> np.ndarray:
    """labels[id]: this seed's random labelling of the B * D nodes."""
    return np.random.default_rng([seed, breadth, depth, STREAM_LABELS]).permutation(
        breadth * depth)


@dataclass
class Queries:
    a: np.ndarray  # node ids
    b: np.ndarray
    hop: np.ndarray
    answer: np.ndarray  # bool


def star_queries(rng: np.random.Generator, breadth: int, depth: int, hops: list[int],
                 n: int) -> Queries:
    """``n`` queries with hops drawn uniformly from ``hops``; exactly half positive."""
    answer = rng.permutation(n) < n // 2
    hop = rng.choice(np.asarray(hops), size=n)
    level = np.floor(rng.random(n) * (depth - hop)).astype(np.int64)
    arm = rng.integers(0, breadth, size=n)
    other = (arm + rng.integers(1, breadth, size=n)) % breadth
    arm_b = np.where(answer, arm, other)
    return Queries(arm * depth + level, arm_b * depth + level + hop, hop, answer)


def full_trace(b: np.ndarray, breadth: int, depth: int) -> np.ndarray:
    """(n, D - 1) node ids stepped from b toward the root, wrapping modulo the node count."""
    return (b[:, None] - np.arange(1, depth)[None, :]) % (breadth * depth)


def first_trace_error(b: np.ndarray, trace: np.ndarray, breadth: int, depth: int
                      ) -> np.ndarray:
    """Per query, the index of the first wrong trace step, or -1 when the trace is right."""
    wrong = trace != full_trace(b, breadth, depth)
    return np.where(wrong.any(axis=1), wrong.argmax(axis=1), -1)


def trace_verdict(a: np.ndarray, trace: np.ndarray) -> np.ndarray:
    """YES exactly when a appears in the trace."""
    return (trace == a[:, None]).any(axis=1)


def sequences(q: Queries, labels: np.ndarray, breadth: int, depth: int, head: str
              ) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, targets). DP: tokens (a, b), target the answer. RT: tokens (a, b, trace),
    targets the next token at each position (none for b, the verdict after the trace)."""
    n = breadth * depth
    start = np.stack([labels[q.a], labels[q.b]], axis=1)
    if head == "dp":
        return start, q.answer.astype(np.float32)
    verdict = np.where(q.answer, n, n + 1)[:, None]
    full = np.concatenate([start, labels[full_trace(q.b, breadth, depth)], verdict], axis=1)
    targets = full[:, 1:].copy()
    targets[:, 0] = -100
    return full[:, :-1], targets


def answers(model: Any, q: Queries, labels: np.ndarray, breadth: int, depth: int,
            head: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The model's verdicts (bool) and, for RT, its greedy trace as node ids."""
    import torch

    n = breadth * depth
    tokens = torch.from_numpy(np.stack([labels[q.a], labels[q.b]], axis=1))
    with torch.no_grad():
        if head == "dp":
            return (model(tokens)[:, -1] > 0).numpy(), None
        for _ in range(depth - 1):
            step = model(tokens)[:, -1, :n].argmax(-1)
            tokens = torch.cat([tokens, step[:, None]], dim=1)
        verdict = model(tokens)[:, -1, n:n + 2].argmax(-1) == 0
    inverse = np.argsort(labels)
    return verdict.numpy(), inverse[tokens[:, 2:].numpy()]


def star_unit(item: dict) -> dict:
    """Train one model (DP or RT) of one cell and seed to the in-distribution gate or the step
    cap, then score it on every test hop. Data streams depend on (seed, B, D) only, so DP and
    RT see the same labelling, training batches and test queries."""
    import torch

    from engine.models.star_block import StarBlock, StarBlockConfig

    breadth, depth, seed, head = item["breadth"], item["depth"], item["seed"], item["head"]
    labels = star_labels(seed, breadth, depth)
    with _one_torch_thread():
        for lr in (item["lr"], item["fallback_lr"]):
            torch.manual_seed(seed)
            model = StarBlock(StarBlockConfig(breadth * depth + 2, item["width"], head,
                                              item["rotary"]))
            optimizer = torch.optim.Adam(model.parameters(), lr=lr)
            train = np.random.default_rng([seed, breadth, depth, STREAM_TRAIN])
            gate = np.random.default_rng([seed, breadth, depth, STREAM_GATE])
            diverged, steps, accuracy = False, 0, 0.0
            while steps < item["step_cap"]:
                q = star_queries(train, breadth, depth, train_hops(depth), item["batch_size"])
                tokens, targets = (torch.from_numpy(t) for t in
                                   sequences(q, labels, breadth, depth, head))
                logits = model(tokens)
                loss = (torch.nn.functional.binary_cross_entropy_with_logits(
                    logits[:, -1], targets) if head == "dp" else
                    torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                      targets.reshape(-1)))
                if not torch.isfinite(loss):
                    diverged = True
                    break
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                steps += 1
                if steps % item["check_every"] == 0 or steps == item["step_cap"]:
                    q = star_queries(gate, breadth, depth, train_hops(depth),
                                     item["gate_queries"])
                    accuracy = float(np.mean(answers(model, q, labels, breadth, depth,
                                                     head)[0] == q.answer))
                    if accuracy >= item["stop_accuracy"]:
                        break
            if not diverged:
                break
        test = np.random.default_rng([seed, breadth, depth, STREAM_TEST])
        per_hop, first_errors = [], []
        for hop in test_hops(depth):
            q = star_queries(test, breadth, depth, [hop], item["test_queries"])
            said, trace = answers(model, q, labels, breadth, depth, head)
            per_hop.append(float(np.mean(said == q.answer)))
            if trace is not None:
                first_errors += first_trace_error(q.b, trace, breadth, depth).tolist()
    errors = np.asarray(first_errors, dtype=np.int64)
    return {**item, "steps_run": steps, "lr_used": lr, "diverged": diverged,
            "in_distribution": accuracy, "test_accuracy": per_hop,
            "first_error_counts": np.bincount(errors[errors >= 0], minlength=depth - 1).tolist()
            if errors.size else [], "trace_right": float(np.mean(errors < 0))
            if errors.size else math.nan}


@dataclass
class CellResult:
    """One cell's paired gaps over the seeds where both models learned."""

    cell: Cell
    learned_seeds: list[int]
    gaps: list[float]
    rt: list[float]
    dp: list[float]


def cell_results(rows: list[dict], seeds: list[int], learned_accuracy: float
                 ) -> dict[Cell, CellResult]:
    out = {}
    for cell in sorted({(r["breadth"], r["depth"]) for r in rows}):
        by = {(r["seed"], r["head"]): r for r in rows if (r["breadth"], r["depth"]) == cell}
        learned = [s for s in seeds if all(by[(s, h)]["in_distribution"] >= learned_accuracy
                                           for h in MODELS)]
        rt = [float(np.mean(by[(s, "rt")]["test_accuracy"])) for s in learned]
        dp = [float(np.mean(by[(s, "dp")]["test_accuracy"])) for s in learned]
        out[cell] = CellResult(cell, learned, [r - d for r, d in zip(rt, dp, strict=True)],
                               rt, dp)
    return out


def gap_criterion(name: str, quote: str, result: CellResult | None, rule: verdicts.Rule,
                  min_learned: int) -> verdicts.Criterion:
    """G = acc(RT) - acc(DP) over the learned seeds, gated on at least ``min_learned`` of them."""
    if result is None:
        empty = verdicts.Interval(math.nan, math.nan, math.nan, 0.95, "cell not run")
        return verdicts.gate(verdicts.criterion(name, quote, empty, rule), False,
                             "running the cell (the cpu or gpu profile)")
    measured = verdicts.t_interval(result.gaps)
    item = verdicts.criterion(f"{name} (B = {result.cell[0]}, D = {result.cell[1]})", quote,
                              measured, rule)
    return verdicts.gate(item, len(result.learned_seeds) >= min_learned,
                         f"not learned: both models reached the in-distribution gate in "
                         f"{len(result.learned_seeds)} seeds, fewer than {min_learned}; "
                         "more steps (the gpu profile's cap) or seeds")


def pita_criteria(cells: dict[Cell, CellResult], min_learned: int) -> list[verdicts.Criterion]:
    """Criterion 1 on the broadest-shallowest cell, criterion 2 on the narrowest-deepest."""
    broad = [c for c in cells if c[0] == max(b for b, _ in cells)]
    narrow = [c for c in cells if c[0] == min(b for b, _ in cells)]
    broad_shallow = min(broad, key=lambda c: c[1]) if broad else None
    narrow_deep = max(narrow, key=lambda c: c[1]) if narrow else None
    if broad_shallow == narrow_deep:  # one cell is neither broad-shallow nor narrow-deep
        broad_shallow = narrow_deep = None
    return [
        gap_criterion("(1) broad-shallow: acc(RT) - acc(DP) on longer hops > 0", QUOTE_BROAD,
                      cells.get(broad_shallow), verdicts.Rule.above(0.0), min_learned),
        gap_criterion("(2) narrow-deep: acc(RT) - acc(DP) on longer hops < 0", QUOTE_NARROW,
                      cells.get(narrow_deep), verdicts.Rule.below(0.0), min_learned),
    ]


def pita_sanity(params: PitaReproduceParams, seed: int) -> list[verdicts.SanityCheck]:
    """Balanced labels, test hops disjoint from training hops, and the trace checker on the
    ground-truth traces (no error; the trace's verdict is the answer)."""
    balanced, disjoint, traces = [], [], []
    for breadth, depth in params.cells:
        q = star_queries(np.random.default_rng([seed, breadth, depth, STREAM_TEST]), breadth,
                         depth, test_hops(depth), params.test_queries)
        balanced.append(float(np.mean(q.answer)))
        disjoint.append(not set(train_hops(depth)) & set(test_hops(depth)))
        truth = full_trace(q.b, breadth, depth)
        traces.append(bool((first_trace_error(q.b, truth, breadth, depth) < 0).all()
                           and (trace_verdict(q.a, truth) == q.answer).all()))
    return [
        verdicts.SanityCheck("balanced labels (chance = 0.5)",
                             all(abs(v - 0.5) < 0.01 for v in balanced),
                             "positive share " + ", ".join(f"{v:.3f}" for v in balanced)),
        verdicts.SanityCheck("no test query appears in training (test hops exceed training "
                             "hops)", all(disjoint), ", ".join(
                                 f"B={b} D={d}: train {train_hops(d)[-1]}, test "
                                 f"{test_hops(d)[0]}..{test_hops(d)[-1]}"
                                 for b, d in params.cells)),
        verdicts.SanityCheck("the trace checker accepts every ground-truth trace and its "
                             "verdict is the answer", all(traces)),
    ]


def run_reproduce(ctx: JobContext, params: PitaReproduceParams, inputs: dict) -> dict:
    started = time.monotonic()
    seeds = [ctx.seed + k for k in range(params.seeds)]
    settings = params.model_dump(include={"step_cap", "width", "batch_size", "lr",
                                          "fallback_lr", "check_every", "stop_accuracy",
                                          "gate_queries", "test_queries", "rotary"})
    items = [{"breadth": b, "depth": d, "seed": s, "head": h, **settings}
             for b, d in params.cells for s in seeds for h in MODELS]
    rows = ctx.map(star_unit, items)
    cells = cell_results(rows, seeds, params.learned_accuracy)
    criteria = pita_criteria(cells, params.min_learned_seeds)
    outputs = save_star_figures(ctx, rows, cells)
    lines = []
    for (b, d), result in cells.items():
        runs = [r for r in rows if (r["breadth"], r["depth"]) == (b, d)]
        lines.append(
            f"B={b} D={d}: learned seeds {result.learned_seeds} of {seeds}; in-distribution "
            + ", ".join(_run_summary(r, params.lr) for r in runs)
            + "; test accuracy RT " + ", ".join(f"{v:.3f}" for v in result.rt)
            + ", DP " + ", ".join(f"{v:.3f}" for v in result.dp)
            + "; RT traces fully right " + ", ".join(
                f"{r['trace_right']:.3f}" for r in runs if r["head"] == "rt"))
    notes = (
        "Star-graph transitive inference as the authors' code: B arms of D nodes, the graph "
        "learned in the weights, train hops 1..round(D/4), test hops beyond to D - 1 "
        f"({params.test_queries} queries per hop). One block for DP and RT (frozen random "
        "embeddings, 1 layer, 1 head, no positional embedding, no layer norm, no residual, "
        f"2-layer MLP), width {params.width}, batch {params.batch_size}, Adam "
        f"{params.lr:g} constant (fallback {params.fallback_lr:g} on divergence), stop at "
        f"{params.stop_accuracy:g} in-distribution accuracy (checked every "
        f"{params.check_every} steps on {params.gate_queries} fresh queries) or "
        f"{params.step_cap} steps; a seed counts when both models reach "
        f"{params.learned_accuracy:g}. RT is decoded greedily: D - 1 node tokens, then the "
        "larger of the YES/NO logits. " + " ".join(lines)
        + (" Rotary position embeddings in both models (the secondary architecture)."
           if params.rotary else ""))
    claim = Claim(
        paper=PAPER, spec="v2",
        statement=("Reasoning-trace models generalise to longer hops better than direct "
                   "prediction on broad, shallow star graphs and worse on narrow, deep ones."),
        criteria=criteria, seeds=seeds, wall_s=time.monotonic() - started,
        smoke=params.smoke, notes=notes, sanity=pita_sanity(params, seeds[0])).to_dict()
    ctx.save_artifact("claim", claim, kind="claim")
    return {"claim": claim, **outputs}


def _run_summary(row: dict, lr: float) -> str:
    fallback = f", lr {row['lr_used']:g}" if row["lr_used"] != lr else ""
    diverged = ", diverged" if row["diverged"] else ""
    return (f"{row['head']} s{row['seed']} {row['in_distribution']:.3f} "
            f"({row['steps_run']} steps{fallback}{diverged})")


def save_star_figures(ctx: JobContext, rows: list[dict], cells: dict[Cell, CellResult]
                      ) -> dict:
    """Accuracy vs test hop (mean over seeds) per cell, and RT's first trace error by
    position."""
    outputs, error_rows = {}, []
    for (b, d) in cells:
        runs = [r for r in rows if (r["breadth"], r["depth"]) == (b, d)]
        curves = [series(h.upper(), test_hops(d), list(np.mean(
            [r["test_accuracy"] for r in runs if r["head"] == h], axis=0))) for h in MODELS]
        name = f"accuracy_B{b}_D{d}"
        outputs[name] = ctx.save_artifact(name, plot(
            f"B = {b}, D = {d}: accuracy vs hop (trained on hops <= {train_hops(d)[-1]})",
            curves, xlabel="hop k", ylabel="accuracy", hlines=[{"y": 0.5, "name": "chance"}]))
        counts = np.sum([r["first_error_counts"] for r in runs if r["head"] == "rt"], axis=0)
        error_rows += [[f"B={b} D={d}", position + 1, int(count)]
                       for position, count in enumerate(counts)]
    outputs["rt_first_trace_error"] = ctx.save_artifact("rt_first_trace_error", {
        "columns": ["cell", "trace step", "queries whose first wrong step it is"],
        "rows": error_rows})
    return outputs


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="pita.train",
        title="Proof traces vs direct prediction: length generalisation",
        paper=PAPER,
        params=Params,
        run=run_train,
        outputs={"accuracy_plot": "plot", "loss_plot": "plot", "examples": "table",
                 "accuracy": "array", "final": "json"},
        resources=Resources(cpus=1, memory_gb=1),
        description=("Generates propositional-logic or transitive-inference statements with "
                     "checkable proofs, trains a direct-prediction and a reasoning-trace "
                     "transformer on short proofs and measures accuracy at every depth; the "
                     "examples table shows each generated trace and where it went wrong."),
    ),
    reproduce_spec(PAPER, "PITA: RT vs DP on the star-graph task (breadth x depth)", run_reproduce,
                   params=PitaReproduceParams, resources=Resources(cpus=1, memory_gb=1)),
]
