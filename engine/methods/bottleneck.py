"""The Bottleneck Benchmark: how much of a token sequence survives a fixed-size latent?

A generator draws token sequences of length L over a vocabulary of V; a task turns each clean
sequence into a target (copy: itself; sort: its tokens in ascending order; set: which of the V
tokens occur); the encoder sees the sequence with input noise (each token replaced by a
uniformly random one with probability ``noise``) and must pass everything through z in R^d
(``engine.models.bottleneck_autoencoder``). Metrics on held-out sequences: exact match (the
whole target right) and token accuracy (per position, or per vocabulary bit for sets).

Information a target carries (the bits z must hold): copy L log2 V, sort log2 C(L + V - 1, L)
(multisets of size L), set at most V (and at most log2 sum_{k<=L} C(V, k)); reported divided by d
as bits per latent dimension.

Generators are plug-ins: ``register_generator(name, fn)`` with ``fn(rng, n, length, vocab) ->
(n, length) int array in [0, vocab)``; the built-ins are ``iid`` (uniform), ``markov`` (a random
sparse transition matrix, 3 likely successors per token) and ``motif`` (sequences stitched from
4 fixed random motifs of length 4).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

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

PAPER = "bottleneck"
TASKS = ("copy", "sort", "set")
ENCODERS = ("bilstm", "transformer", "ssm")
Generator = Callable[[np.random.Generator, int, int, int], np.ndarray]


# -- generators (plug-in interface) ------------------------------------------------------------

def iid_generator(rng: np.random.Generator, n: int, length: int, vocab: int) -> np.ndarray:
    return rng.integers(0, vocab, size=(n, length))


def markov_generator(rng: np.random.Generator, n: int, length: int, vocab: int) -> np.ndarray:
    """A fixed (seed 0) sparse chain: each token has 3 likely successors (90%), else uniform."""
    table = np.random.default_rng(0).integers(0, vocab, size=(vocab, 3))
    out = np.empty((n, length), dtype=np.int64)
    out[:, 0] = rng.integers(0, vocab, size=n)
    for t in range(1, length):
        likely = table[out[:, t - 1], rng.integers(0, 3, size=n)]
        out[:, t] = np.where(rng.random(n) < 0.9, likely, rng.integers(0, vocab, size=n))
    return out


def motif_generator(rng: np.random.Generator, n: int, length: int, vocab: int) -> np.ndarray:
    """Sequences stitched from 4 fixed (seed 0) motifs of 4 tokens, cut to ``length``."""
    motifs = np.random.default_rng(0).integers(0, vocab, size=(4, 4))
    pieces = motifs[rng.integers(0, 4, size=(n, -(-length // 4)))]
    return pieces.reshape(n, -1)[:, :length]


GENERATORS: dict[str, Generator] = {"iid": iid_generator, "markov": markov_generator,
                                    "motif": motif_generator}


class GeneratorError(ValueError):
    """A plug-in generator returned something the benchmark cannot use."""


def register_generator(name: str, generator: Generator) -> None:
    """Make ``generator`` available as ``structure=name`` (see the module docstring)."""
    if not callable(generator):
        raise TypeError(f"generator {name!r} is not callable")
    GENERATORS[name] = generator


def draw(structure: str, rng: np.random.Generator, n: int, length: int, vocab: int
         ) -> np.ndarray:
    if structure not in GENERATORS:
        raise GeneratorError(f"unknown generator {structure!r}; registered: "
                             f"{sorted(GENERATORS)}")
    x = np.asarray(GENERATORS[structure](rng, n, length, vocab))
    if x.shape != (n, length) or not np.issubdtype(x.dtype, np.integer):
        raise GeneratorError(f"generator {structure!r} returned {x.dtype} {x.shape}, expected "
                             f"integers of shape {(n, length)}")
    if x.size and (x.min() < 0 or x.max() >= vocab):
        raise GeneratorError(f"generator {structure!r} returned tokens outside [0, {vocab})")
    return x.astype(np.int64)


def add_noise(rng: np.random.Generator, x: np.ndarray, noise: float, vocab: int) -> np.ndarray:
    flip = rng.random(x.shape) < noise
    return np.where(flip, rng.integers(0, vocab, size=x.shape), x)


def target(task: str, x: np.ndarray, vocab: int) -> np.ndarray:
    if task == "copy":
        return x
    if task == "sort":
        return np.sort(x, axis=1)
    presence = np.zeros((len(x), vocab), dtype=np.int64)
    np.put_along_axis(presence, x, 1, axis=1)
    return presence


def information_bits(task: str, length: int, vocab: int) -> float:
    if task == "copy":
        return length * math.log2(vocab)
    if task == "sort":
        return math.log2(math.comb(length + vocab - 1, length))
    return min(vocab, math.log2(sum(math.comb(vocab, k) for k in range(1, min(length, vocab) + 1))))


# -- parameters --------------------------------------------------------------------------------

class Params(MethodParams):
    """A sweep over lengths and noise levels for each encoder and task, in one job."""

    encoders: list[Literal["bilstm", "transformer", "ssm"]] = Field(
        ["bilstm", "transformer", "ssm"], min_length=1, description="encoders to compare")
    tasks: list[Literal["copy", "sort", "set"]] = Field(
        ["copy", "sort", "set"], min_length=1, description="copy, sort and/or set")
    lengths: list[int] = Field([4, 8, 16, 32], min_length=1, description="sequence lengths L")
    noise: list[float] = Field([0.0], min_length=1, description="input noise levels p")
    vocab: int = Field(8, ge=2, le=256, description="vocabulary size V")
    structure: str = Field("iid", description="generator: iid, markov, motif or a registered one")
    latent: int = Field(16, ge=1, le=1024, description="latent size d (the bottleneck)")
    width: int = Field(64, ge=8, le=512, description="encoder/decoder width")
    steps: int = Field(400, ge=1, le=100_000, description="training steps per configuration")
    batch_size: int = Field(64, ge=2, le=4096, description="sequences per step")
    lr: float = Field(3e-3, gt=0, le=1.0, description="AdamW learning rate")
    eval_size: int = Field(512, ge=8, le=100_000, description="held-out sequences")
    ssm_gate: bool = Field(False, description="input gate in the diagonal SSM")

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, values: list[int]) -> list[int]:
        if any(v < 1 or v > 256 for v in values):
            raise ValueError("lengths must lie in 1..256")
        return sorted(set(values))

    @field_validator("noise")
    @classmethod
    def _noise(cls, values: list[float]) -> list[float]:
        if any(not 0 <= v < 1 for v in values):
            raise ValueError("noise levels must lie in [0, 1)")
        return sorted(set(values))

    @model_validator(mode="after")
    def _structure(self) -> Params:
        if self.structure not in GENERATORS:
            raise ValueError(f"unknown structure {self.structure!r}; registered: "
                             f"{sorted(GENERATORS)}")
        return self


@dataclass
class Result:
    encoder: str
    task: str
    length: int
    noise: float
    exact: float
    token: float
    bits_per_dim: float
    example_input: np.ndarray
    example_target: np.ndarray
    example_output: np.ndarray


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_one(p: Params, encoder: str, task: str, length: int, noise: float, seed: int,
              check_cancelled: Callable[[], None]) -> Result:
    """Train one autoencoder and evaluate it on held-out sequences of the same configuration."""
    import torch
    from torch.nn import functional as F

    from engine.models.bottleneck_autoencoder import AutoencoderConfig, BottleneckAutoencoder

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    cfg = AutoencoderConfig(encoder=encoder, vocab=p.vocab, max_len=max(p.lengths),
                            latent=p.latent, width=p.width,
                            output="set" if task == "set" else "sequence", ssm_gate=p.ssm_gate)
    model = BottleneckAutoencoder(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=p.lr)

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        clean = draw(p.structure, rng, n, length, p.vocab)
        noisy = add_noise(rng, clean, noise, p.vocab)
        return torch.from_numpy(noisy), torch.from_numpy(target(task, clean, p.vocab))

    def loss_of(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if task == "set":
            return F.binary_cross_entropy_with_logits(logits, y.float())
        return F.cross_entropy(logits.reshape(-1, p.vocab), y.reshape(-1))

    for step in range(p.steps):
        check_cancelled()
        x, y = batch(p.batch_size)
        for group in optimizer.param_groups:
            group["lr"] = p.lr * 0.5 * (1 + math.cos(math.pi * step / p.steps))
        loss = loss_of(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    x, y = batch(p.eval_size)
    with torch.no_grad():
        logits = model(x)
    guess = (logits > 0).long() if task == "set" else logits.argmax(-1)
    right = (guess == y).numpy()
    return Result(encoder, task, length, noise, float(right.all(axis=1).mean()),
                  float(right.mean()), information_bits(task, length, p.vocab) / p.latent,
                  x[:8].numpy(), y[:8].numpy(), guess[:8].numpy())


def run_sweep_results(p: Params, seed: int, check_cancelled: Callable[[], None],
                      report: Callable[[int, int, Result], None] | None = None) -> list[Result]:
    configs = [(e, t, L, q) for e in p.encoders for t in p.tasks for L in p.lengths
               for q in p.noise]
    results = []
    with _one_torch_thread():
        for index, (encoder, task, length, noise) in enumerate(configs):
            result = train_one(p, encoder, task, length, noise, seed, check_cancelled)
            results.append(result)
            if report is not None:
                report(index + 1, len(configs), result)
    return results


def sweep_figures(results: list[Result], p: Params) -> dict[str, dict]:
    figures = {}
    for task in p.tasks:
        curves = []
        for encoder in p.encoders:
            for noise in p.noise:
                rs = [r for r in results if r.encoder == encoder and r.task == task
                      and r.noise == noise]
                label = encoder if len(p.noise) == 1 else f"{encoder} p={noise:g}"
                curves.append(series(label, [r.length for r in rs], [r.exact for r in rs]))
        figures[f"{task}_accuracy_vs_length"] = plot(
            f"{task}: exact match vs length (d = {p.latent})", curves, xlabel="length L",
            ylabel="exact match", logx=True, hlines=[{"y": 0.5, "name": "L* threshold"}])
        if len(p.noise) > 1:
            curves = []
            for encoder in p.encoders:
                for length in p.lengths:
                    rs = [r for r in results if r.encoder == encoder and r.task == task
                          and r.length == length]
                    curves.append(series(f"{encoder} L={length}", [r.noise for r in rs],
                                         [r.token for r in rs]))
            figures[f"{task}_accuracy_vs_noise"] = plot(
                f"{task}: token accuracy vs noise", curves, xlabel="noise p",
                ylabel="token accuracy")
    bits = [series(task, p.lengths, [information_bits(task, L, p.vocab) / p.latent
                                     for L in p.lengths]) for task in p.tasks]
    figures["bits_per_latent_dim"] = plot(
        f"information per latent dimension (V = {p.vocab}, d = {p.latent})", bits,
        xlabel="length L", ylabel="bits / latent dim", logx=True)
    return figures


def reconstructions_table(results: list[Result]) -> dict:
    rows = []
    for r in results:
        for x, y, g in zip(r.example_input[:3], r.example_target[:3], r.example_output[:3],
                           strict=True):
            rows.append([r.encoder, r.task, r.length, r.noise, " ".join(map(str, x)),
                         " ".join(map(str, y)), " ".join(map(str, g)), bool((y == g).all())])
    return {"columns": ["encoder", "task", "L", "noise", "input (noisy)", "target",
                        "reconstruction", "exact"], "rows": rows}


# -- bottleneck.sweep --------------------------------------------------------------------------

def run_sweep(ctx: JobContext, params: Params, inputs: dict) -> dict:
    def report(done: int, total: int, r: Result) -> None:
        ctx.progress(done, total, exact=r.exact, token=r.token, bits_per_dim=r.bits_per_dim)
        ctx.log(f"{r.encoder} {r.task} L={r.length} p={r.noise:g}: exact {r.exact:.3f} "
                f"token {r.token:.3f}")

    results = run_sweep_results(params, ctx.seed, ctx.check_cancelled, report)
    outputs = {name: ctx.save_artifact(name, spec)
               for name, spec in sweep_figures(results, params).items()}
    outputs["reconstructions"] = ctx.save_artifact("reconstructions",
                                                   reconstructions_table(results))
    for r in results[:1] + [r for r in results if r.task != "set"][:1]:
        name = f"reconstruction_{r.encoder}_{r.task}_L{r.length}"
        outputs[name] = ctx.save_artifact(
            name, np.concatenate([r.example_input, r.example_target, r.example_output]))
    outputs["results"] = [{"encoder": r.encoder, "task": r.task, "length": r.length,
                           "noise": r.noise, "exact": r.exact, "token": r.token,
                           "bits_per_dim": r.bits_per_dim} for r in results]
    return outputs


# -- bottleneck.reproduce ----------------------------------------------------------------------

SEEDS = (0, 1, 2)


class BottleneckReproduceParams(ReproduceParams):
    steps: int = Field(200, ge=1, le=100_000, description="training steps per configuration")


def breakpoint_length(lengths: list[int], exact: list[float]) -> float:
    """The first L where exact match drops below 50% (the largest L + 1 doubled if never)."""
    for length, value in zip(lengths, exact, strict=True):
        if value < 0.5:
            return float(length)
    return float(2 * lengths[-1])


def run_reproduce(ctx: JobContext, params: BottleneckReproduceParams, inputs: dict) -> dict:
    started = time.monotonic()
    seeds = [ctx.seed] if params.smoke else [ctx.seed + s for s in SEEDS]
    if params.smoke:
        p = Params(lengths=[2, 6], steps=5, width=16, latent=8, eval_size=16, batch_size=16,
                   noise=[0.0, 0.2])
    else:
        p = Params(lengths=[4, 8, 16, 32], steps=params.steps, width=32, latent=12,
                   noise=[0.0, 0.2], eval_size=512, batch_size=64)
    per_seed: dict[int, list[Result]] = {}
    total = len(seeds) * len(ENCODERS) * len(TASKS) * len(p.lengths) * len(p.noise)
    for index, seed in enumerate(seeds):
        def report(done: int, _: int, r: Result, index: int = index) -> None:
            ctx.progress(index * total // len(seeds) + done, total, exact=r.exact)
        per_seed[seed] = run_sweep_results(p, seed, ctx.check_cancelled, report)

    def exact(seed: int, encoder: str, task: str, noise: float = 0.0) -> list[float]:
        return [r.exact for r in per_seed[seed] if r.encoder == encoder and r.task == task
                and r.noise == noise]

    falls, ordered, lines = [], [], []
    for seed in seeds:
        for encoder in ENCODERS:
            for task in TASKS:
                curve = exact(seed, encoder, task)
                falls.append(curve[-1] < curve[0] or (curve[0] < 0.5 and curve[-1] <= curve[0]))
            star = {t: breakpoint_length(p.lengths, exact(seed, encoder, t)) for t in TASKS}
            ordered.append(star["set"] > star["sort"] > star["copy"])
            lines.append(f"seed {seed} {encoder}: L* set {star['set']:g}, sort "
                         f"{star['sort']:g}, copy {star['copy']:g}")
    rankings = {seed: _ranking(per_seed[seed], 0.0) for seed in seeds}
    agree = [rankings[s] == rankings[seeds[0]] for s in seeds[1:]] or [True]
    noisy = {e: float(np.mean([r.token for s in seeds for r in per_seed[s]
                               if r.encoder == e and r.noise == max(p.noise)]))
             for e in ENCODERS}
    winner = max(noisy, key=noisy.get)
    criteria = [
        Criterion("(1) accuracy falls with L (fraction of encoder x task x seed curves)",
                  float(np.mean(falls)), 1.0, ">=", paper="accuracy falls with L",
                  note="a curve falls when exact match at the longest L is below that at the "
                       "shortest, or is below 50% at the shortest L and does not rise"),
        Criterion("(2) breakpoints order set > sort > copy (fraction of encoder x seed)",
                  float(np.mean(ordered)), 1.0, ">=",
                  paper="L* orders set > sort > copy for each encoder",
                  note="; ".join(lines)),
        Criterion("(3) encoder ranking by mean exact match agrees across seeds (fraction)",
                  float(np.mean(agree)), 1.0, ">=", paper="encoder rankings agree across seeds",
                  note="; ".join(f"seed {s}: {' > '.join(r)}" for s, r in rankings.items())),
    ]
    notes = (f"iid tokens, V = {p.vocab}, d = {p.latent}, L in {p.lengths}, noise "
             f"{p.noise}; {p.steps} AdamW steps of {p.batch_size} per configuration, width "
             f"{p.width}. Under noise p = {max(p.noise):g} the mean token accuracy is "
             + ", ".join(f"{e} {v:.3f}" for e, v in noisy.items())
             + f": {winner} wins. The paper text was unavailable; the spec follows the abstract.")
    outputs = {name: ctx.save_artifact(name, spec)
               for name, spec in sweep_figures(per_seed[seeds[0]], p).items()}
    outputs["reconstructions"] = ctx.save_artifact("reconstructions",
                                                   reconstructions_table(per_seed[seeds[0]]))
    claim = Claim(paper=PAPER, statement=(
        "Through a fixed latent, autoencoder accuracy falls with sequence length, tasks break "
        "in the order copy, sort, set, and encoder differences come from inductive biases "
        "under noise and length."), criteria=criteria, seeds=seeds,
        wall_s=time.monotonic() - started, smoke=params.smoke, notes=notes).to_dict()
    ctx.save_artifact("claim", claim, kind="claim")
    return {"claim": claim, **outputs}


def _ranking(results: list[Result], noise: float) -> list[str]:
    score = {e: np.mean([r.exact for r in results if r.encoder == e and r.noise == noise])
             for e in ENCODERS}
    return sorted(ENCODERS, key=lambda e: -score[e])


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="bottleneck.sweep",
        title="Bottleneck Benchmark sweep (length x noise x encoder x task)",
        paper=PAPER,
        params=Params,
        run=run_sweep,
        outputs={"bits_per_latent_dim": "plot", "reconstructions": "table", "results": "json"},
        resources=Resources(cpus=1, memory_gb=1),
        description=("Trains sequence autoencoders through a fixed-size latent on copy, sort "
                     "and set tasks for every length and noise level; plots exact match vs "
                     "length and noise, bits per latent dimension, and reconstructions."),
    ),
    reproduce_spec(PAPER, "Bottleneck Benchmark: length breakpoints", run_reproduce,
                   params=BottleneckReproduceParams, resources=Resources(cpus=1, memory_gb=1)),
]
