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
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from engine.api import (
    Claim,
    Criterion,
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


# -- pita.reproduce ----------------------------------------------------------------------------

BREADTHS = {"broad": 0, "narrow": 1}  # labellings of the chain: fresh per statement vs one
DEPTHS = {"shallow": 3, "deep": 8}  # the spec's train paths <= 3 vs <= 8
SEEDS = (0, 1, 2)


class PitaReproduceParams(ReproduceParams):
    steps: int = Field(1000, ge=1, le=100_000, description="training steps per model and cell")


def reproduce_params(smoke: bool, steps: int, breadth: int, depth: int) -> Params:
    if smoke:
        return Params(task="transitive", nodes=10, window=8, graphs=breadth,
                      train_depth=min(depth, 3), max_test_depth=5, steps=20, batch_size=16,
                      d_model=32, eval_per_depth=8, eval_every=10)
    return Params(task="transitive", nodes=24, window=16, graphs=breadth, train_depth=depth,
                  max_test_depth=14, steps=steps, batch_size=32, eval_per_depth=128,
                  eval_every=steps)


def run_reproduce(ctx: JobContext, params: PitaReproduceParams, inputs: dict) -> dict:
    started = time.monotonic()
    seeds = [ctx.seed] if params.smoke else [ctx.seed + s for s in SEEDS]
    cells = [(b, d) for b in BREADTHS for d in DEPTHS]
    gaps: dict[tuple[str, str], list[float]] = {cell: [] for cell in cells}
    curves: dict[tuple[str, str], list[Evaluation]] = {cell: [] for cell in cells}
    done, total = 0, len(cells) * len(seeds)
    with _one_torch_thread():
        for seed in seeds:
            for breadth, depth in cells:
                ctx.check_cancelled()
                p = reproduce_params(params.smoke, params.steps, BREADTHS[breadth], DEPTHS[depth])
                tests = held_out_statements(p, seed)
                trained = train_models(p, seed, ctx.check_cancelled, tests=tests)
                ev = evaluate(trained.models, tests, p.n_symbols, ctx.check_cancelled,
                              rows_per_depth=2 if seed == seeds[0] else 0)
                longer = [i for i, d in enumerate(ev.depths) if d > p.train_depth]
                rt = float(np.mean([ev.accuracy["rt"][i] for i in longer]))
                dp = float(np.mean([ev.accuracy["dp"][i] for i in longer]))
                gaps[(breadth, depth)].append(rt - dp)
                curves[(breadth, depth)].append(ev)
                done += 1
                ctx.progress(done, total, acc_rt_longer=rt, acc_dp_longer=dp, gap=rt - dp)
                ctx.log(f"seed {seed} {breadth}-{depth}: RT {rt:.3f} DP {dp:.3f} on depths "
                        f"{p.train_depth + 1}..{p.max_test_depth}")
    outputs = save_grid(ctx, curves, params)
    mean_gap = {cell: float(np.mean(v)) for cell, v in gaps.items()}
    bs, nd = mean_gap[("broad", "shallow")], mean_gap[("narrow", "deep")]
    criteria = [
        Criterion("(1) broad-shallow: acc(RT) - acc(DP) on longer paths", bs, 0.0, ">",
                  paper="RT generalises well on broad and shallow families (gap > 0)",
                  note="per seed " + ", ".join(f"{g:+.3f}" for g in gaps[("broad", "shallow")])),
        Criterion("(2) narrow-deep gap minus broad-shallow gap", nd - bs, 0.0, "<",
                  paper="RT deteriorates relative to DP on narrow and deep families "
                        "(gap smaller or negative)",
                  note=f"narrow-deep gap {nd:+.3f}; per seed "
                       + ", ".join(f"{g:+.3f}" for g in gaps[("narrow", "deep")])),
    ]
    notes = (
        "Transitive inference: a 24-node labelled chain, each statement shows 16 consecutive "
        "nodes (smoke: 8 of 10) as rules x -> y in context; query (a, b): is b after a; the RT "
        "trace walks forward from a. Breadth: broad = a fresh random labelling per statement, "
        "narrow = one fixed labelling. Depth: train on walks of 1..3 vs 1..8 steps, test on "
        "every depth up to 14; accuracy (verdict right) is averaged over the depths beyond the "
        "training range, then over seeds. 2-layer, 64-wide transformers without positional "
        f"embeddings, {params.steps if not params.smoke else 20} AdamW steps of 32 statements "
        "per model and cell. Gaps per cell (RT - DP): "
        + ", ".join(f"{b}-{d} {mean_gap[(b, d)]:+.3f}" for b, d in cells) + ". "
        "Design changes made after seeing results: (a) statements show a random window of the "
        "chain, because with the whole chain a NO statement's depth revealed which node a was "
        "and narrow DP learned that shortcut; (b) slot embeddings became rotations of one "
        "symbol table and the symbol logits were tied to it, after broad RT failed to learn the "
        "lookup in 1000 steps (it still did not in our probes: broad training stays near chance "
        "at this budget, so the broad cells measure little).")
    claim = Claim(paper=PAPER, statement=(
        "Reasoning-trace models generalise to longer proofs better than direct prediction on "
        "broad and shallow task families, and lose that advantage on narrow and deep ones."),
        criteria=criteria, seeds=seeds, wall_s=time.monotonic() - started,
        smoke=params.smoke, notes=notes)
    claim_dict = claim.to_dict()
    ctx.save_artifact("claim", claim_dict, kind="claim")
    return {"claim": claim_dict, **outputs}


def save_grid(ctx: JobContext, curves: dict[tuple[str, str], list[Evaluation]],
              params: PitaReproduceParams) -> dict:
    """Accuracy vs depth for RT and DP per cell (mean over seeds), plus example rows."""
    outputs, rows = {}, []
    for (breadth, depth), evs in curves.items():
        depths = evs[0].depths
        mean = Evaluation(depths, {n: list(np.mean([e.accuracy[n] for e in evs], axis=0))
                                   for n in MODELS},
                          list(np.mean([e.trace_valid for e in evs], axis=0)), [])
        name = f"accuracy_{breadth}_{depth}"
        train_depth = min(DEPTHS[depth], 3) if params.smoke else DEPTHS[depth]
        outputs[name] = ctx.save_artifact(name, depth_plot(
            f"{breadth} breadth, {depth} (train depth <= {train_depth})", mean, train_depth))
        rows += [[f"{breadth}-{depth}", *row] for row in evs[0].rows]
    outputs["examples"] = ctx.save_artifact("examples", {"columns": ["cell", *TABLE_COLUMNS],
                                                         "rows": rows})
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
    reproduce_spec(PAPER, "PITA: RT vs DP across breadth and depth", run_reproduce,
                   params=PitaReproduceParams, resources=Resources(cpus=1, memory_gb=1)),
]
