"""kCGM: calibrate a generative model so its samples' features match a reference set (MMD).

The objective (spec ``kcgm.md``) is ``MMD^2_k(h # p_theta, target) + lambda KL(p_theta||p_base)``
over the model's parameters. Samples are discrete SMILES, so the gradient is a score-function
estimate: every sample's ``log p_theta(x_i)`` is weighted by a detached coefficient built from
kernel evaluations (``kcgm_coefficients``), and only ``log p_theta`` needs gradients, which an
autoregressive SMILES model gives exactly (``engine.models.smiles_lm``).

Pipeline: pretrain a GRU SMILES model on MOSES (cached per configuration), then either
calibrate it with kCGM toward the reference set's features, or (the baseline) finetune it by
maximum likelihood on the reference molecules themselves. Features ``h``: Morgan fingerprints
(radius 2, 256 bits) for the Tanimoto kernel, or the spec's 11 descriptors scaled by the
reference's standard deviations for the RBF-mixture and dot kernels; an invalid SMILES maps to
zeros. The reference defaults to the GNEprop known antibiotics, cleaned as the spec says.
"""

from __future__ import annotations

import copy
import csv
import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import Field

from engine.api import (
    Claim,
    Criterion,
    MethodParams,
    MethodSpec,
    ReproduceParams,
    Resources,
    reproduce_spec,
)
from engine.io.molecules import (
    DESCRIPTOR_NAMES,
    FormatError,
    descriptors,
    load_moses,
    parse_smiles,
    read_molecules,
    standardise,
)
from engine.plots import plot, series

if TYPE_CHECKING:
    from engine.context import JobContext

PAPER = "kcgm"
FINGERPRINT_RADIUS, FINGERPRINT_BITS = 2, 256
RBF_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)
HISTOGRAM_BINS = 24
TABLE_ROWS = 200
SAMPLE_CHUNK = 128
ANTIBIOTICS = (Path(__file__).resolve().parents[2].parent / "shared" / "data" / "molecules"
               / "GNEprop_known_abx.tsv")


# -- data --------------------------------------------------------------------------------------

def load_reference(path: str | Path | None = None) -> list[str]:
    """A reference set cleaned as the spec says: the largest fragment of a salt, no
    stereochemistry, neutral charges, duplicates merged (canonical SMILES, file order)."""
    path = Path(path) if path else ANTIBIOTICS
    if not path.exists():
        raise FormatError(path, "reference molecules not found (pass a reference input)")
    cleaned = [standardise(m.smiles) for m in read_molecules(path).molecules]
    return list(dict.fromkeys(s for s in cleaned if s))


# -- features and kernels ----------------------------------------------------------------------

def fingerprints(smiles: list[str]) -> np.ndarray:
    """(n, 256) Morgan bits (radius 2); zeros for an invalid SMILES."""
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=FINGERPRINT_RADIUS,
                                                          fpSize=FINGERPRINT_BITS)
    out = np.zeros((len(smiles), FINGERPRINT_BITS), dtype=np.float32)
    for i, text in enumerate(smiles):
        mol = parse_smiles(text)
        if mol is not None:
            out[i] = generator.GetFingerprintAsNumPy(mol)
    return out


def descriptor_matrix(smiles: list[str]) -> np.ndarray:
    """(n, 11) descriptors in ``DESCRIPTOR_NAMES`` order; zeros for an invalid SMILES."""
    rows = [descriptors(parse_smiles(s)) for s in smiles]
    return np.array([[row[name] for name in DESCRIPTOR_NAMES] for row in rows], dtype=np.float64)


def tanimoto(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Tanimoto similarity of bit vectors. Two empty vectors (two invalid molecules) are
    identical, similarity 1, as two zero vectors are under the RBF kernel: invalid samples
    then form one cluster far from the reference, which MMD penalises. (With 0 there, a model
    lowers MMD^2 by emitting only invalid SMILES: we saw validity collapse to 0.)"""
    shared = a @ b.T
    union = a.sum(1)[:, None] + b.sum(1)[None, :] - shared
    return np.divide(shared, union, out=np.ones_like(shared, dtype=np.float64),
                     where=union > 0)


@dataclass
class Featurizer:
    """``h`` and ``k`` of the objective, fitted to the reference set (scales, bandwidths)."""

    kernel: Literal["tanimoto", "rbf", "dot"]
    scale: np.ndarray | None = None  # the reference's descriptor std (rbf, dot)
    bandwidths: tuple[float, ...] = ()  # rbf: median heuristic x RBF_SCALES

    @classmethod
    def fit(cls, kernel: str, reference: list[str]) -> Featurizer:
        featurizer = cls(kernel)  # type: ignore[arg-type]
        if kernel != "tanimoto":
            raw = descriptor_matrix(reference)
            featurizer.scale = np.where(raw.std(0) > 0, raw.std(0), 1.0)
            if kernel == "rbf":
                scaled = raw / featurizer.scale
                distances = np.sqrt(((scaled[:, None] - scaled[None]) ** 2).sum(-1))
                median = float(np.median(distances[np.triu_indices(len(scaled), 1)]))
                featurizer.bandwidths = tuple(median * s for s in RBF_SCALES)
        return featurizer

    def __call__(self, smiles: list[str]) -> np.ndarray:
        if self.kernel == "tanimoto":
            return fingerprints(smiles)
        return descriptor_matrix(smiles) / self.scale

    def k(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.kernel == "tanimoto":
            return tanimoto(a, b)
        if self.kernel == "dot":
            return a @ b.T
        squared = ((a[:, None] - b[None]) ** 2).sum(-1)
        return sum(np.exp(-squared / (2 * h * h)) for h in self.bandwidths) / len(self.bandwidths)


def mmd2(k_xx: np.ndarray, k_xy: np.ndarray, k_yy: np.ndarray) -> float:
    """Unbiased MMD^2 from the three kernel matrices (diagonals of k_xx, k_yy left out)."""
    n, m = len(k_xx), len(k_yy)
    within_x = (k_xx.sum() - np.trace(k_xx)) / (n * (n - 1))
    within_y = (k_yy.sum() - np.trace(k_yy)) / (m * (m - 1))
    return float(within_x + within_y - 2 * k_xy.mean())


# -- the estimator -----------------------------------------------------------------------------

def leave_one_out(values: np.ndarray) -> np.ndarray:
    """Each value minus the mean of the others (a baseline independent of its own sample)."""
    n = len(values)
    return values - (values.sum() - values) / (n - 1)


def kcgm_coefficients(k_ff: np.ndarray, k_fy: np.ndarray, log_p: np.ndarray,
                      log_p_base: np.ndarray, lam: float, calibrate: bool = True) -> np.ndarray:
    """Per-sample weights c_i of the surrogate ``sum_i c_i log p_theta(x_i)`` (spec, Objective).

    ``calibrate=False`` drops the MMD term and leaves the KL pull to the base alone (the
    switch that shows the MMD term is what moves the model)."""
    n = len(k_ff)
    cross = k_fy.mean(axis=1)
    self_similarity = (k_ff.sum(axis=1) - np.diag(k_ff)) / (n - 1)
    c_mmd = leave_one_out(2.0 * (self_similarity - cross)) / n
    c_kl = leave_one_out(log_p - log_p_base) / n
    w_kl, w_mmd = lam / (1.0 + lam), 1.0 / (1.0 + lam)
    return w_kl * c_kl + (w_mmd * c_mmd if calibrate else 0.0)


def gradient_check(features: np.ndarray, reference: np.ndarray, kernel: Callable,
                   batches: int, batch_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(estimator's mean gradient, central finite-difference gradient) of MMD^2 for a tiny
    model: a categorical distribution over the rows of ``features`` with logits theta."""
    import torch

    rng = np.random.default_rng(seed)
    k_items, k_items_ref = kernel(features, features), kernel(features, reference)
    k_ref = kernel(reference, reference)
    theta = rng.normal(0, 0.5, len(features))

    def exact_mmd2(logits: np.ndarray) -> float:
        p = np.exp(logits - logits.max())
        p /= p.sum()
        m = len(reference)
        within_y = (k_ref.sum() - np.trace(k_ref)) / (m * (m - 1))
        return float(p @ k_items @ p - 2 * p @ k_items_ref.mean(1) + within_y)

    eps = 1e-5
    finite = np.array([(exact_mmd2(theta + eps * e) - exact_mmd2(theta - eps * e)) / (2 * eps)
                       for e in np.eye(len(theta))])
    logits = torch.tensor(theta, requires_grad=True)
    probs = torch.softmax(logits.detach(), 0).numpy()
    draws = rng.choice(len(features), size=(batches, batch_size), p=probs)
    coefficients = np.stack([
        kcgm_coefficients(k_items[np.ix_(x, x)], k_items_ref[x], np.zeros(batch_size),
                          np.zeros(batch_size), lam=0.0) for x in draws])
    log_p = torch.log_softmax(logits, 0)[torch.from_numpy(draws)]
    (torch.from_numpy(coefficients) * log_p).sum().div(batches).backward()
    return logits.grad.numpy(), finite


# -- parameters --------------------------------------------------------------------------------

class Params(MethodParams):
    """Pretrain a SMILES model on MOSES, then calibrate it to a reference set."""

    objective: Literal["kcgm", "mle", "none"] = Field(
        "kcgm", description="kCGM calibration, maximum-likelihood finetuning on the reference "
                            "(the baseline), or none (the pretrained base as it is)")
    kernel: Literal["tanimoto", "rbf", "dot"] = Field(
        "tanimoto", description="Tanimoto on Morgan bits, RBF mixture or dot on descriptors")
    lam: float = Field(0.1, ge=0, le=1000, description="lambda: weight of KL(p_theta || p_base)")
    calibrate: bool = Field(True, description="keep the MMD term (off: only the KL term acts)")
    steps: int = Field(150, ge=1, le=100_000, description="calibration or finetuning steps")
    batch_size: int = Field(64, ge=4, le=1024, description="samples (or reference molecules) "
                                                           "per step")
    lr: float = Field(1e-3, gt=0, le=1.0, description="Adam learning rate of calibration")
    train_molecules: int = Field(50_000, ge=100, le=1_584_663,
                                 description="MOSES training SMILES for the base model")
    pretrain_steps: int = Field(2500, ge=1, le=200_000, description="base model training steps")
    pretrain_batch: int = Field(128, ge=4, le=2048, description="SMILES per pretraining step")
    pretrain_lr: float = Field(2e-3, gt=0, le=1.0, description="Adam learning rate, pretraining")
    d_hidden: int = Field(192, ge=8, le=2048, description="GRU width")
    n_layers: int = Field(1, ge=1, le=6, description="GRU layers")
    max_len: int = Field(100, ge=8, le=512, description="most tokens per sampled SMILES")
    eval_samples: int = Field(512, ge=8, le=100_000, description="samples for the final metrics")
    eval_every: int = Field(25, ge=1, le=100_000, description="log batch metrics every k steps")


def model_config(p: Params, tokens: list[str]) -> Any:
    from engine.models.smiles_lm import SmilesLMConfig

    return SmilesLMConfig(tokens=tokens, d_hidden=p.d_hidden, n_layers=p.n_layers,
                          max_len=p.max_len)


# -- training ----------------------------------------------------------------------------------

@dataclass
class Base:
    model: Any
    train_smiles: list[str]
    losses: list[float]


def pretrain(p: Params, seed: int, reference: list[str], check_cancelled: Callable[[], None],
             cache: Path | None = None,
             on_step: Callable[[int, dict], None] | None = None) -> Base:
    """The MOSES base model; loaded from ``cache`` when a run with this config made it."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from engine.models.smiles_lm import SmilesLM, build_vocabulary

    train = load_moses(p.train_molecules, seed)
    if cache is not None and (cache / "model.safetensors").exists():
        cfg = model_config(p, json.loads((cache / "cfg.json").read_text())["tokens"])
        model = SmilesLM(cfg)
        model.load_state_dict(load_file(cache / "model.safetensors"))
        losses = json.loads((cache / "losses.json").read_text())
        return Base(model, train, losses)
    torch.manual_seed(seed)
    model = SmilesLM(model_config(p, build_vocabulary(train + reference)))
    optimizer = torch.optim.Adam(model.parameters(), lr=p.pretrain_lr)
    rng = np.random.default_rng(seed + 1)
    losses = []
    for step in range(1, p.pretrain_steps + 1):
        check_cancelled()
        lr = p.pretrain_lr * 0.5 * (1 + math.cos(math.pi * (step - 1) / p.pretrain_steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = [train[i] for i in rng.integers(len(train), size=p.pretrain_batch)]
        loss = model.loss(model.encode(batch))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if on_step is not None and (step % p.eval_every == 0 or step == p.pretrain_steps):
            on_step(step, {"pretrain_loss": float(np.mean(losses[-p.eval_every:]))})
    if cache is not None:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  cache / "model.safetensors")
        (cache / "losses.json").write_text(json.dumps(losses))
        (cache / "cfg.json").write_text(json.dumps(model.cfg.to_dict()))
    return Base(model, train, losses)


@dataclass
class Batch:
    smiles: list[str]
    features: np.ndarray


def sample_batch(model: Any, n: int, featurizer: Featurizer,
                 generator: Any = None) -> tuple[Any, Batch]:
    tokens = model.sample(n, generator=generator)
    smiles = model.decode(tokens)
    return tokens, Batch(smiles, featurizer(smiles))


def calibrate(model: Any, base: Any, featurizer: Featurizer, reference_features: np.ndarray,
              p: Params, check_cancelled: Callable[[], None],
              on_step: Callable[[int, dict], None] | None = None) -> list[dict]:
    """kCGM: ``p.steps`` Adam steps on the score-function surrogate (module docstring)."""
    import torch

    optimizer = torch.optim.Adam(model.parameters(), lr=p.lr)
    k_yy = featurizer.k(reference_features, reference_features)
    history = []
    for step in range(1, p.steps + 1):
        check_cancelled()
        tokens, batch = sample_batch(model, p.batch_size, featurizer)
        k_ff = featurizer.k(batch.features, batch.features)
        k_fy = featurizer.k(batch.features, reference_features)
        log_p = model.sequence_log_prob(tokens)
        with torch.no_grad():
            log_p_base = base.sequence_log_prob(tokens)
        coefficients = kcgm_coefficients(k_ff, k_fy, log_p.detach().double().numpy(),
                                         log_p_base.double().numpy(), p.lam, p.calibrate)
        surrogate = (torch.from_numpy(coefficients).float() * log_p).sum()
        optimizer.zero_grad(set_to_none=True)
        surrogate.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        metrics = {"mmd2": mmd2(k_ff, k_fy, k_yy),
                   "validity": float(np.mean([parse_smiles(s) is not None for s in batch.smiles])),
                   "kl": float((log_p.detach() - log_p_base).mean())}
        history.append(metrics)
        if on_step is not None and (step % p.eval_every == 0 or step == p.steps):
            on_step(step, {k: float(np.mean([h[k] for h in history[-p.eval_every:]]))
                           for k in metrics})
    return history


def mle_finetune(model: Any, reference: list[str], p: Params, seed: int,
                 check_cancelled: Callable[[], None],
                 on_step: Callable[[int, dict], None] | None = None) -> list[dict]:
    """The baseline: maximum likelihood on the reference molecules themselves."""
    import torch

    optimizer = torch.optim.Adam(model.parameters(), lr=p.lr)
    rng = np.random.default_rng(seed + 2)
    history = []
    for step in range(1, p.steps + 1):
        check_cancelled()
        batch = [reference[i] for i in rng.integers(len(reference), size=p.batch_size)]
        loss = model.loss(model.encode(batch))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        history.append({"finetune_loss": loss.item()})
        if on_step is not None and (step % p.eval_every == 0 or step == p.steps):
            on_step(step, {"finetune_loss": float(np.mean(
                [h["finetune_loss"] for h in history[-p.eval_every:]]))})
    return history


@dataclass
class Evaluation:
    smiles: list[str]
    canonical: list[str | None]
    mmd2: float
    mmd2_valid: float  # among valid samples only: how far the molecules themselves are
    validity: float
    uniqueness: float
    novelty: float
    reference_copied: float  # fraction of the reference set generated verbatim
    descriptors: np.ndarray  # (valid samples, 11)
    nearest: list[tuple[int, float]] = field(default_factory=list)  # (reference index, Tanimoto)

    def summary(self) -> dict:
        return {"mmd2": self.mmd2, "mmd2_valid": self.mmd2_valid, "validity": self.validity,
                "uniqueness": self.uniqueness,
                "novelty": self.novelty, "reference_copied": self.reference_copied}


def evaluate(model: Any, featurizer: Featurizer, reference: list[str],
             reference_features: np.ndarray, train_smiles: set[str], n: int, seed: int,
             check_cancelled: Callable[[], None]) -> Evaluation:
    """Validity, uniqueness, novelty (vs the training SMILES), MMD^2 to the reference, copies."""
    import torch

    from engine.io.molecules import canonical_smiles

    generator = torch.Generator().manual_seed(seed)
    smiles: list[str] = []
    while len(smiles) < n:
        check_cancelled()
        tokens = model.sample(min(SAMPLE_CHUNK, n - len(smiles)), generator=generator)
        smiles += model.decode(tokens)
    features = featurizer(smiles)
    value = mmd2(featurizer.k(features, features), featurizer.k(features, reference_features),
                 featurizer.k(reference_features, reference_features))
    canonical = [canonical_smiles(s) for s in smiles]
    valid = [c for c in canonical if c]
    kept = features[[c is not None for c in canonical]]
    value_valid = mmd2(featurizer.k(kept, kept), featurizer.k(kept, reference_features),
                       featurizer.k(reference_features, reference_features)) \
        if len(kept) > 1 else math.nan
    unique = set(valid)
    cleaned = {standardise(c) for c in unique}
    fp_generated, fp_reference = fingerprints(smiles), fingerprints(reference)
    similarity = tanimoto(fp_generated, fp_reference)
    nearest = [(int(row.argmax()), float(row.max())) for row in similarity]
    return Evaluation(
        smiles, canonical, value, value_valid, len(valid) / n, len(unique) / max(len(valid), 1),
        len(unique - train_smiles) / max(len(unique), 1),
        len(cleaned & set(reference)) / len(reference),
        descriptor_matrix(valid) if valid else np.zeros((0, len(DESCRIPTOR_NAMES))), nearest)


# -- artifacts ---------------------------------------------------------------------------------

def histogram_plots(evaluations: dict[str, Evaluation], reference: np.ndarray) -> dict[str, dict]:
    """One density plot per descriptor: each model's valid samples against the reference."""
    plots = {}
    for column, name in enumerate(DESCRIPTOR_NAMES):
        pooled = np.concatenate([reference[:, column]] + [e.descriptors[:, column]
                                                          for e in evaluations.values()])
        edges = np.histogram_bin_edges(pooled, bins=HISTOGRAM_BINS)
        centres = (edges[:-1] + edges[1:]) / 2
        curves = [series("reference", centres,
                         np.histogram(reference[:, column], edges, density=True)[0], "step")]
        for label, e in evaluations.items():
            if len(e.descriptors):
                density = np.histogram(e.descriptors[:, column], edges, density=True)[0]
                curves.append(series(label, centres, density, "step"))
        plots[f"hist_{name}"] = plot(f"{name}: generated vs reference", curves, xlabel=name,
                                     ylabel="density")
    return plots


TABLE_COLUMNS = ["model", "smiles", "valid", "novel", "in_reference", "nearest_reference",
                 "tanimoto_nearest", *DESCRIPTOR_NAMES]


def generated_rows(label: str, e: Evaluation, reference: list[str], train: set[str],
                   limit: int) -> list[list]:
    rows, reference_set = [], set(reference)
    for text, canonical, (index, similarity) in zip(e.smiles, e.canonical, e.nearest,
                                                    strict=True):
        values = descriptors(parse_smiles(canonical)) if canonical else {}
        rows.append([label, canonical or text, bool(canonical),
                     bool(canonical) and canonical not in train,
                     bool(canonical) and standardise(canonical) in reference_set,
                     reference[index], round(similarity, 4),
                     *(round(values[n], 4) if values else None for n in DESCRIPTOR_NAMES)])
        if len(rows) >= limit:
            break
    return rows


def rows_as_csv(rows: list[list]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(TABLE_COLUMNS)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return buffer.getvalue().encode()


# -- kcgm.calibrate ----------------------------------------------------------------------------

@dataclass
class Outcome:
    base: Evaluation
    tuned: Evaluation | None
    history: list[dict]
    model: Any
    pretrain_losses: list[float]
    train_smiles: set[str]


def run_pipeline(p: Params, seed: int, reference: list[str], check_cancelled: Callable,
                 cache: Path | None, progress: Callable[[int, int, dict], None] | None = None,
                 base_model: Any = None, train_smiles: list[str] | None = None) -> Outcome:
    """Pretrain (or reuse ``base_model``), evaluate the base, then calibrate or finetune."""
    import torch

    total = p.pretrain_steps + (p.steps if p.objective != "none" else 0)
    losses: list[float] = []
    if base_model is None:
        base = pretrain(p, seed, reference, check_cancelled, cache,
                        on_step=lambda s, m: progress and progress(s, total, m))
        base_model, train_smiles, losses = base.model, base.train_smiles, base.losses
    featurizer = Featurizer.fit(p.kernel, reference)
    reference_features = featurizer(reference)
    train = set(train_smiles or [])
    base_eval = evaluate(base_model, featurizer, reference, reference_features, train,
                         p.eval_samples, seed + 10, check_cancelled)
    if p.objective == "none":
        return Outcome(base_eval, None, [], base_model, losses, train)
    model = copy.deepcopy(base_model)
    base_model.requires_grad_(False)
    torch.manual_seed(seed + 3)

    def on_step(step: int, metrics: dict) -> None:
        if progress is not None:
            progress(p.pretrain_steps + step, total, metrics)

    if p.objective == "kcgm":
        history = calibrate(model, base_model, featurizer, reference_features, p,
                            check_cancelled, on_step)
    else:
        history = mle_finetune(model, reference, p, seed, check_cancelled, on_step)
    tuned = evaluate(model, featurizer, reference, reference_features, train, p.eval_samples,
                     seed + 10, check_cancelled)
    return Outcome(base_eval, tuned, history, model, losses, train)


def run_calibrate(ctx: JobContext, params: Params, inputs: dict) -> dict:
    """Base model, then kCGM (or the MLE baseline); histograms, a table and metrics."""
    reference = load_reference(inputs.get("reference"))
    ctx.log(f"reference: {len(reference)} molecules after cleaning")
    cache = ctx.cache_dir(pretrain_key(params, ctx.seed))
    outcome = run_pipeline(params, ctx.seed, reference, ctx.check_cancelled, cache,
                           lambda s, t, m: ctx.progress(s, t, **m))
    evaluations = {"base": outcome.base}
    if outcome.tuned is not None:
        evaluations[params.objective] = outcome.tuned
    metrics = {label: e.summary() for label, e in evaluations.items()}
    ctx.log("; ".join(f"{label}: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items())
                      for label, m in metrics.items()))
    outputs: dict[str, Any] = {"metrics": ctx.save_artifact("metrics", metrics, kind="json")}
    reference_descriptors = descriptor_matrix(reference)
    for name, spec in histogram_plots(evaluations, reference_descriptors).items():
        outputs[name] = ctx.save_artifact(name, spec)
    if outcome.history and "mmd2" in outcome.history[0]:
        steps = np.arange(1, len(outcome.history) + 1)
        outputs["mmd_curve"] = ctx.save_artifact("mmd_curve", plot(
            f"kCGM ({params.kernel}, lambda {params.lam})",
            [series("batch MMD^2", steps, [h["mmd2"] for h in outcome.history]),
             series("batch validity", steps, [h["validity"] for h in outcome.history])],
            xlabel="step", ylabel="MMD^2 / validity",
            hlines=[{"y": outcome.base.mmd2, "name": "base MMD^2"}]))
    if outcome.pretrain_losses:
        losses = outcome.pretrain_losses
        outputs["pretrain_loss"] = ctx.save_artifact("pretrain_loss", plot(
            "base model pretraining on MOSES", [series("cross-entropy", np.arange(1, len(
                losses) + 1), losses)], xlabel="step", ylabel="nats per token", logy=True))
    rows = [row for label, e in evaluations.items()
            for row in generated_rows(label, e, reference, outcome.train_smiles,
                                      params.eval_samples)]
    outputs["generated"] = ctx.save_artifact(
        "generated", {"columns": TABLE_COLUMNS, "rows": rows[:TABLE_ROWS * len(evaluations)]})
    outputs["generated_csv"] = ctx.save_file("generated.csv", rows_as_csv(rows))
    outputs["checkpoint"] = ctx.save_checkpoint(
        params.objective if outcome.tuned is not None else "base", outcome.model,
        cfg={**outcome.model.cfg.to_dict(), "params": params.model_dump(), "seed": ctx.seed})
    outputs["final"] = metrics
    return outputs


def pretrain_key(p: Params, seed: int) -> dict:
    """What the cached base model depends on (not the calibration settings)."""
    return {"kind": "kcgm-smiles-gru", "version": 1, "seed": seed,
            **p.model_dump(include={"train_molecules", "pretrain_steps", "pretrain_batch",
                                    "pretrain_lr", "d_hidden", "n_layers", "max_len"})}


# -- kcgm.sweep --------------------------------------------------------------------------------

class SweepParams(Params):
    """kCGM from one base model at several KL weights: the MMD / validity trade-off."""

    lambdas: list[Annotated[float, Field(ge=0, le=1000)]] = Field(
        [0.0, 0.1, 1.0, 10.0], min_length=1, max_length=12,
        description="the KL weights lambda to calibrate with")


def run_sweep(ctx: JobContext, params: SweepParams, inputs: dict) -> dict:
    reference = load_reference(inputs.get("reference"))
    cache = ctx.cache_dir(pretrain_key(params, ctx.seed))
    total = params.pretrain_steps + params.steps * len(params.lambdas)
    base = pretrain(params, ctx.seed, reference, ctx.check_cancelled, cache,
                    on_step=lambda s, m: ctx.progress(s, total, **m))
    results: list[Evaluation] = []
    base_eval = None
    for number, lam in enumerate(params.lambdas):
        offset = params.pretrain_steps + number * params.steps
        outcome = run_pipeline(
            params.model_copy(update={"lam": lam, "objective": "kcgm"}), ctx.seed, reference,
            ctx.check_cancelled, cache,
            lambda s, t, m, offset=offset, lam=lam: ctx.progress(
                offset + s - params.pretrain_steps, total, lam=lam, **m),
            base_model=copy.deepcopy(base.model), train_smiles=base.train_smiles)
        base_eval = outcome.base
        results.append(outcome.tuned)
        ctx.log(f"lambda {lam}: {_fmt(outcome.tuned)}")
    positions = list(range(len(params.lambdas)))
    ticks = [(i, f"{lam:g}") for i, lam in enumerate(params.lambdas)]
    rows = [[lam, *e.summary().values()] for lam, e in zip(params.lambdas, results, strict=True)]
    return {
        "mmd_vs_lambda": ctx.save_artifact("mmd_vs_lambda", plot(
            f"kCGM ({params.kernel}): MMD^2 to the reference", [series(
                "kCGM", positions, [e.mmd2 for e in results], "scatter")],
            xlabel="lambda (KL weight)", ylabel="MMD^2", xticks=ticks,
            hlines=[{"y": base_eval.mmd2, "name": "base"}])),
        "validity_vs_lambda": ctx.save_artifact("validity_vs_lambda", plot(
            "validity", [series("kCGM", positions, [e.validity for e in results], "scatter")],
            xlabel="lambda (KL weight)", ylabel="valid fraction", xticks=ticks,
            hlines=[{"y": base_eval.validity, "name": "base"}])),
        "sweep": ctx.save_artifact("sweep", {"columns": ["lambda", *base_eval.summary()],
                                             "rows": rows}),
        "base": base_eval.summary(),
    }


# -- kcgm.reproduce ----------------------------------------------------------------------------

class KcgmReproduceParams(ReproduceParams):
    pretrain_steps: int = Field(2500, ge=1, le=100_000, description="base model training steps")
    steps: int = Field(150, ge=1, le=10_000, description="kCGM and MLE finetuning steps")
    lam: float = Field(0.1, ge=0, le=1000, description="kCGM's KL weight lambda")


def reproduce_params(rp: KcgmReproduceParams, objective: str) -> Params:
    if rp.smoke:
        return Params(objective=objective, train_molecules=400, pretrain_steps=20,
                      pretrain_batch=32, d_hidden=32, max_len=40, steps=4, batch_size=16,
                      eval_samples=24, eval_every=2, lam=rp.lam)
    return Params(objective=objective, pretrain_steps=rp.pretrain_steps, steps=rp.steps,
                  lam=rp.lam, eval_samples=512)


def run_reproduce(ctx: JobContext, params: KcgmReproduceParams, inputs: dict) -> dict:
    started = time.monotonic()
    reference = load_reference()
    kcgm_params = reproduce_params(params, "kcgm")
    cache = ctx.cache_dir(pretrain_key(kcgm_params, ctx.seed))
    total = kcgm_params.pretrain_steps + 2 * kcgm_params.steps
    kcgm_run = run_pipeline(kcgm_params, ctx.seed, reference, ctx.check_cancelled, cache,
                            lambda s, t, m: ctx.progress(s, total, **m))
    mle_params = reproduce_params(params, "mle")
    mle_run = run_pipeline(
        mle_params, ctx.seed, reference, ctx.check_cancelled, cache,
        lambda s, t, m: ctx.progress(s + mle_params.steps, total, **m),
        base_model=pretrain(kcgm_params, ctx.seed, reference, ctx.check_cancelled,
                            cache).model,  # the cached base again: kCGM's copy moved
        train_smiles=list(kcgm_run.train_smiles))
    featurizer = Featurizer.fit("tanimoto", reference)
    sample_pool = fingerprints(load_moses(8 if params.smoke else 12, ctx.seed + 5) + ["C1CC"])
    batches, batch_size = (200, 16) if params.smoke else (40_000, 64)
    estimate, finite = gradient_check(sample_pool, featurizer(reference), tanimoto, batches,
                                      batch_size, seed=ctx.seed)
    base, tuned, mle = kcgm_run.base, kcgm_run.tuned, mle_run.tuned
    gradient_error = float(np.linalg.norm(estimate - finite) / np.linalg.norm(finite))
    mmd_cut = 1 - tuned.mmd2 / base.mmd2
    mle_validity_loss = base.validity - mle.validity
    mle_score = max(mle_validity_loss / 0.05, mle.reference_copied / 0.20)
    criteria = [
        Criterion("kCGM: fraction of MMD^2 to the reference removed", mmd_cut, 0.5, ">=",
                  paper="kCGM cuts MMD^2 by >= 50%",
                  note=f"Tanimoto MMD^2 base {base.mmd2:.4f} -> kCGM {tuned.mmd2:.4f}; among "
                       f"valid samples only {base.mmd2_valid:.4f} -> {tuned.mmd2_valid:.4f}"),
        Criterion("kCGM: validity change (calibrated - base)", tuned.validity - base.validity,
                  -0.01, ">=", paper="validity stays >= base - 1 pp",
                  note=f"validity base {base.validity:.3f}, kCGM {tuned.validity:.3f}"),
        Criterion("MLE finetune: max(validity loss / 5 pp, reference copied / 20%)", mle_score,
                  1.0, ">", paper="maximum-likelihood finetuning loses > 5 pp validity or "
                                  "copies > 20% of the reference set verbatim",
                  note=f"validity {base.validity:.3f} -> {mle.validity:.3f}, reference copied "
                       f"{mle.reference_copied:.3f}, MMD^2 {mle.mmd2:.4f}"),
        Criterion("estimator vs finite-difference MMD^2 gradient: relative error",
                  gradient_error, 0.05, "<=",
                  paper="the estimator's mean gradient matches a finite-difference MMD^2 "
                        "gradient on a tiny model within 5%",
                  note=f"categorical model over {len(sample_pool)} molecules (one invalid), "
                       f"Tanimoto kernel, lambda 0, {batches} batches of {batch_size}; "
                       f"the leave-one-out baseline biases it by about 1/(n-1)"),
    ]
    notes = (
        f"Base: a {kcgm_params.n_layers}-layer GRU ({kcgm_params.d_hidden} wide) trained "
        f"{kcgm_params.pretrain_steps} steps on {kcgm_params.train_molecules} MOSES SMILES. "
        f"Reference: the GNEprop known antibiotics, {len(reference)} after cleaning (largest "
        "fragment, no stereo, neutralised, deduplicated; the spec counts 174). kCGM: Tanimoto "
        f"kernel on Morgan r2/256 bits, lambda {kcgm_params.lam}, {kcgm_params.steps} steps of "
        f"{kcgm_params.batch_size} samples; MLE: the same steps of {kcgm_params.batch_size} "
        f"reference molecules. Metrics on {kcgm_params.eval_samples} samples per model. "
        f"Base: {_fmt(base)}. kCGM: {_fmt(tuned)}. MLE: {_fmt(mle)}.")
    claim = Claim(paper=PAPER, statement=(
        "Calibrating a pretrained SMILES model with kCGM moves its feature distribution toward "
        "a reference set (MMD^2 halved) without hurting validity, whereas maximum-likelihood "
        "finetuning on the reference damages validity or memorises it."),
        criteria=criteria, seeds=[ctx.seed], wall_s=time.monotonic() - started,
        smoke=params.smoke, notes=notes)
    claim_dict = claim.to_dict()
    ctx.save_artifact("claim", claim_dict, kind="claim")
    histograms = histogram_plots({"base": base, "kcgm": tuned, "mle": mle},
                                 descriptor_matrix(reference))
    outputs = {name: ctx.save_artifact(name, spec) for name, spec in histograms.items()}
    return {"claim": claim_dict, **outputs}


def _fmt(e: Evaluation) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in e.summary().items())


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="kcgm.calibrate",
        title="kCGM: calibrate a SMILES model to a reference set's features",
        paper=PAPER,
        params=Params,
        run=run_calibrate,
        panel="molecules",
        inputs={"reference": "molecules"},
        outputs={"metrics": "json", "generated": "table", "generated_csv": "file",
                 "mmd_curve": "plot", "pretrain_loss": "plot", "checkpoint": "checkpoint",
                 **{f"hist_{name}": "plot" for name in DESCRIPTOR_NAMES}},
        resources=Resources(cpus=1, memory_gb=2),
        description=("Pretrains (or reuses) a GRU SMILES model on MOSES, then calibrates it "
                     "with kCGM (MMD to the reference features plus a KL leash to the base) or "
                     "finetunes it by maximum likelihood; reports validity, uniqueness, "
                     "novelty, MMD^2 and property histograms against the reference (default: "
                     "the GNEprop known antibiotics)."),
    ),
    MethodSpec(
        id="kcgm.sweep",
        title="kCGM: MMD and validity across the KL weight lambda",
        paper=PAPER,
        params=SweepParams,
        run=run_sweep,
        panel="molecules",
        inputs={"reference": "molecules"},
        outputs={"mmd_vs_lambda": "plot", "validity_vs_lambda": "plot", "sweep": "table",
                 "base": "json"},
        resources=Resources(cpus=1, memory_gb=2),
        description=("Calibrates copies of one pretrained base with kCGM at each lambda and "
                     "reports MMD^2 to the reference and validity against lambda."),
    ),
    reproduce_spec(PAPER, "kCGM: MMD calibration vs maximum-likelihood finetuning",
                   run_reproduce, params=KcgmReproduceParams,
                   resources=Resources(cpus=1, memory_gb=2)),
]
