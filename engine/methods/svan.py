"""SVAN: selective value nonlinearity against dimensional collapse in generative ranking models.

A generative ranking model reads a user's history as interleaved item and action tokens and
predicts the next token (``engine.models.generative_ranker``). Its attention splits into four
channels by (query type, key type); SVAN applies a nonlinearity to the value vectors only where
action tokens attend to item tokens (the action->item channel), the channel the paper finds
collapsed. ``svan.train`` trains the baseline and the SVAN model in lockstep (same initial
weights, same batches, same steps) and reports ranking quality and geometry side by side.

Data. MovieLens-100k (shipped by the ``recbole`` package, read by path) with actions from the
ratings: "like/skip" (rating >= 4 is a like) or the five rating levels; or the user's own
interaction log (CSV/Parquet/JSONL: user, item, action, timestamp). Each user's interactions are
sorted by time (ties keep file order); the last ``holdout`` are the test set and are never
trained on.

Metrics, on every held-out interaction t of every user with at least ``holdout + 2``
interactions, the model reading the true history before t:

* NDCG@k and recall@k of item t among ALL catalogue items (no sampled negatives), read at the
  action token before it; items the user met before t are excluded from the ranking (never the
  target itself). Ties are broken at random in expectation.
* AUC of P(positive action | item t, history) over all held-out interactions; positive actions
  are likes (ratings >= 4 with rating levels) or ``positive_action`` for a log.
* Effective rank (exp of the entropy of the normalised singular values) of the item
  representations -- the final hidden states at item tokens of the first 256 evaluation
  sequences -- and of each channel's attention output per layer, with the singular-value
  spectra.

During training the curves (geometry, NDCG, AUC) are measured on the first 256 test users every
``eval_every`` steps; the final numbers use every test user. Nothing is selected on them.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
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
from engine.io import FormatError
from engine.plots import plot, series
from engine.threads import limit_threads

if TYPE_CHECKING:
    from engine.context import JobContext

PAPER = "svan"
CHANNELS = ("item->item", "item->action", "action->item", "action->action")
VARIANTS = ("baseline", "svan")
MAX_ACTIONS = 64  # an action column with more distinct values is not a set of action types
EVAL_CHUNK = 256  # users per forward pass during evaluation
GEOMETRY_USERS = 256  # evaluation sequences whose representations give the effective ranks
MONITOR_USERS = 256  # during training, NDCG/AUC curves use these users' held-out interactions
LIKE_RATING = 4  # MovieLens: a rating of 4 or 5 is a like (a positive action)


class Params(MethodParams):
    """Train the baseline and/or SVAN generative ranker on MovieLens-100k or an interaction log."""

    data: Literal["movielens-100k", "logs"] = Field(
        "movielens-100k", description="MovieLens-100k (shipped in recbole) or the `logs` input")
    movielens_actions: Literal["like/skip", "rating"] = Field(
        "like/skip", description="MovieLens actions: like (rating >= 4) / skip, or the 5 ratings")
    user_column: str = Field("user", description="log column naming the user")
    item_column: str = Field("item", description="log column naming the item")
    action_column: str = Field("action", description="log column naming the action type")
    timestamp_column: str = Field("timestamp", description="log column with the time")
    positive_action: str | None = Field(None, description=(
        "log action counted as positive for AUC; default: the last in sorted order"))
    max_users: int | None = Field(None, ge=10, description="use only the first N users (by id)")
    variant: Literal["both", "baseline", "svan"] = Field(
        "both", description="train both in lockstep (same weights, batches, steps) or one")
    max_interactions: int = Field(32, ge=4, le=512,
                                  description="interactions per sequence (tokens = 2x)")
    holdout: int = Field(5, ge=1, le=50, description="last interactions per user kept for test")
    d_model: int = Field(64, ge=8, le=1024, description="width of the token representations")
    n_heads: int = Field(2, ge=1, le=16, description="attention heads")
    n_layers: int = Field(2, ge=1, le=12, description="transformer blocks")
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout on embeddings, attention, MLPs")
    svan_value: Literal["mlp", "silu"] = Field(
        "mlp", description="SVAN's value nonlinearity: SiLU MLP or elementwise SiLU")
    steps: int = Field(300, ge=1, le=1_000_000, description="optimiser steps (each variant)")
    batch_size: int = Field(64, ge=1, le=4096, description="sequences per step")
    lr: float = Field(1e-3, gt=0, le=1, description="AdamW learning rate")
    weight_decay: float = Field(0.01, ge=0, le=1, description="AdamW weight decay")
    eval_every: int = Field(100, ge=1, description=(
        "measure geometry and NDCG/AUC (first 256 test users) every k steps; all users at the end"))
    k: int = Field(10, ge=1, le=1000, description="cut-off of NDCG@k and recall@k")
    exclude_seen: bool = Field(True, description="drop items met before from the ranking")

    @model_validator(mode="after")
    def _check(self) -> Params:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads "
                             f"({self.n_heads})")
        if self.holdout >= self.max_interactions:
            raise ValueError("holdout must be smaller than max_interactions")
        return self


# -- data ------------------------------------------------------------------------------------------

@dataclass
class Interactions:
    """Per user, item ids (1..n_items) and action ids (1..n_actions) in time order."""

    items: list[np.ndarray]
    actions: list[np.ndarray]
    n_items: int
    action_names: list[str]
    positive: np.ndarray  # (n_actions,) bool: which actions count as positive for AUC
    source: str

    @property
    def n_actions(self) -> int:
        return len(self.action_names)

    @property
    def n_interactions(self) -> int:
        return int(sum(len(items) for items in self.items))


def movielens_path() -> Path:
    """``ml-100k.inter`` inside the installed recbole package (found without importing it)."""
    spec = importlib.util.find_spec("recbole")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("MovieLens-100k ships in the recbole package: "
                                "pip install --no-deps recbole")
    for location in spec.submodule_search_locations:
        path = Path(location) / "dataset_example" / "ml-100k" / "ml-100k.inter"
        if path.exists():
            return path
    raise FileNotFoundError("recbole is installed but has no dataset_example/ml-100k/")


def load_movielens(actions: str = "like/skip", max_users: int | None = None) -> Interactions:
    """MovieLens-100k ratings as interactions; actions from the rating (see ``Params``)."""
    import pyarrow.csv as pacsv

    path = movielens_path()
    table = pacsv.read_csv(path, read_options=pacsv.ReadOptions(
        column_names=["user", "item", "rating", "timestamp"], skip_rows=1),
        parse_options=pacsv.ParseOptions(delimiter="\t"))
    columns = {name: table[name].to_numpy() for name in table.column_names}
    rating = columns["rating"].astype(np.int64)
    if actions == "like/skip":
        action_ids = np.where(rating >= LIKE_RATING, 2, 1)
        names, positive = ["skip", "like"], np.array([False, True])
    else:
        action_ids = rating
        names = [str(r) for r in range(1, 6)]
        positive = np.arange(1, 6) >= LIKE_RATING
    return build_interactions(columns["user"], columns["item"], action_ids, columns["timestamp"],
                              names, positive, f"MovieLens-100k ({path})", max_users)


def load_logs(path: str | Path, p: Params) -> Interactions:
    """A user's log through the format registry's table reader; malformed columns are named."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from engine.io.tables import read_table

    table = read_table(path)
    wanted = {"user": p.user_column, "item": p.item_column, "action": p.action_column,
              "timestamp": p.timestamp_column}
    for role, name in wanted.items():
        if name not in table.column_names:
            raise FormatError(path, f"no {role} column {name!r}; the table has "
                                    f"{', '.join(table.column_names) or 'no columns'} "
                                    f"(set {role}_column)")
        nulls = table[name].null_count
        if nulls:
            raise FormatError(path, f"column {name!r} has {nulls} empty values")
    if table.num_rows == 0:
        raise FormatError(path, "the table has no rows")
    time_column = table[p.timestamp_column]
    kind = time_column.type
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        times = pc.cast(time_column, pa.int64()).to_numpy()
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind):
        times = time_column.to_numpy().astype(np.float64)
    else:
        raise FormatError(path, f"column {p.timestamp_column!r} must hold numbers or timestamps, "
                                f"not {kind}")
    users = _codes(table[p.user_column])
    items = _codes(table[p.item_column])
    action_values = [str(v) for v in table[p.action_column].to_pylist()]
    names = sorted(set(action_values), key=_natural_key)
    if len(names) > MAX_ACTIONS:
        raise FormatError(path, f"column {p.action_column!r} has {len(names)} distinct values; "
                                f"actions must be a few types (at most {MAX_ACTIONS})")
    if len(names) < 2:
        raise FormatError(path, f"column {p.action_column!r} needs at least two action types")
    lookup = {name: index + 1 for index, name in enumerate(names)}
    action_ids = np.array([lookup[v] for v in action_values], dtype=np.int64)
    positive_name = p.positive_action if p.positive_action is not None else names[-1]
    if positive_name not in lookup:
        raise ValueError(f"positive_action {positive_name!r} is not an action in "
                         f"{p.action_column!r} (actions: {', '.join(names)})")
    positive = np.array([name == positive_name for name in names])
    return build_interactions(users, items, action_ids, times, names, positive,
                              f"log {Path(path).name}", p.max_users)


def _codes(column: Any) -> np.ndarray:
    """Dense 0-based codes for any column of ids (numbers or strings)."""
    values = column.to_numpy(zero_copy_only=False)
    return np.unique(values.astype(str) if values.dtype == object else values,
                     return_inverse=True)[1].reshape(-1)


def _natural_key(text: str) -> tuple:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def build_interactions(users: np.ndarray, items: np.ndarray, actions: np.ndarray,
                       times: np.ndarray, action_names: list[str], positive: np.ndarray,
                       source: str, max_users: int | None = None) -> Interactions:
    """Group by user, sort by time (stable), re-index items densely from 1."""
    user_codes = np.unique(users, return_inverse=True)[1].reshape(-1)
    if max_users is not None:
        keep = user_codes < max_users
        user_codes, items, actions, times = (a[keep] for a in (user_codes, items, actions, times))
    item_ids = np.unique(items, return_inverse=True)[1].reshape(-1) + 1
    order = np.lexsort((np.arange(len(times)), times, user_codes))
    user_sorted = user_codes[order]
    bounds = np.flatnonzero(np.diff(user_sorted)) + 1
    item_lists = np.split(item_ids[order].astype(np.int64), bounds)
    action_lists = np.split(np.asarray(actions)[order].astype(np.int64), bounds)
    return Interactions(items=item_lists, actions=action_lists, n_items=int(item_ids.max()),
                        action_names=list(action_names), positive=np.asarray(positive, bool),
                        source=source)


@dataclass
class Split:
    """Training prefixes, and the evaluation windows with their held-out positions."""

    train_items: list[np.ndarray]
    train_actions: list[np.ndarray]
    eval_items: np.ndarray  # (U, L) left-padded windows ending at each user's last interaction
    eval_actions: np.ndarray
    eval_rows: np.ndarray  # (N, 2): (user row, position in window) of each held-out interaction
    eval_seen: list[np.ndarray] = field(default_factory=list)  # per held-out interaction


def split_data(data: Interactions, holdout: int, max_interactions: int) -> Split:
    """The last ``holdout`` interactions of each user with enough history are the test set."""
    train_items, train_actions, windows_i, windows_a, rows, seen = [], [], [], [], [], []
    for items, actions in zip(data.items, data.actions, strict=True):
        n = len(items)
        if n < holdout + 2:  # too short to test: all of it trains
            train_items.append(items)
            train_actions.append(actions)
            continue
        train_items.append(items[: n - holdout])
        train_actions.append(actions[: n - holdout])
        start = max(0, n - max_interactions)
        row = len(windows_i)
        windows_i.append(_left_pad(items[start:], max_interactions))
        windows_a.append(_left_pad(actions[start:], max_interactions))
        for t in range(n - holdout, n):
            rows.append((row, max_interactions - (n - t)))
            seen.append(items[:t])
    return Split(train_items, train_actions, np.array(windows_i).reshape(-1, max_interactions),
                 np.array(windows_a).reshape(-1, max_interactions),
                 np.array(rows, dtype=np.int64).reshape(-1, 2), seen)


def _left_pad(values: np.ndarray, length: int) -> np.ndarray:
    out = np.zeros(length, dtype=np.int64)
    out[length - len(values):] = values[-length:]
    return out


def sample_batch(split: Split, batch_size: int, length: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Random users, each a random window of up to ``length`` interactions of its prefix."""
    users = rng.integers(0, len(split.train_items), size=batch_size)
    items = np.zeros((batch_size, length), dtype=np.int64)
    actions = np.zeros((batch_size, length), dtype=np.int64)
    for row, user in enumerate(users):
        seq_i, seq_a = split.train_items[user], split.train_actions[user]
        end = int(rng.integers(min(len(seq_i), length), len(seq_i) + 1))
        start = max(0, end - length)
        items[row] = _left_pad(seq_i[start:end], length)
        actions[row] = _left_pad(seq_a[start:end], length)
    return items, actions


# -- training and evaluation (torch inside) --------------------------------------------------------

@dataclass
class Evaluation:
    ndcg: float
    recall: float
    auc: float
    erank: dict[str, float]
    spectra: dict[str, np.ndarray]


@dataclass
class VariantRun:
    """One trained variant: its evaluations over training and the final model."""

    name: str
    steps: list[int] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    model: Any = None

    @property
    def final(self) -> Evaluation:
        return self.evaluations[-1]

    def erank_curve(self, key: str) -> np.ndarray:
        return np.array([e.erank[key] for e in self.evaluations])


def model_config(p: Params, data: Interactions, svan: bool) -> Any:
    from engine.models.generative_ranker import GenerativeRankerConfig

    return GenerativeRankerConfig(
        n_items=data.n_items, n_actions=data.n_actions, max_interactions=p.max_interactions,
        d_model=p.d_model, n_heads=p.n_heads, n_layers=p.n_layers, dropout=p.dropout, svan=svan,
        svan_value=p.svan_value)


def evaluate(model: Any, data: Interactions, split: Split, k: int, exclude_seen: bool,
             check_cancelled: Callable[[], None] = lambda: None, users: int | None = None
             ) -> Evaluation:
    """NDCG@k, recall@k (full ranking) and AUC on the held-out interactions of the first
    ``users`` evaluation users (all by default); geometry on the first ``GEOMETRY_USERS``."""
    import torch

    from engine.models import generative_ranker as gr

    was_training = model.training
    model.eval()
    n_users = len(split.eval_items) if users is None else min(users, len(split.eval_items))
    ndcg, recall, scores, labels, geometry = [], [], [], [], None
    with torch.no_grad():
        for start in range(0, n_users, EVAL_CHUNK):
            check_cancelled()
            stop = min(start + EVAL_CHUNK, n_users)
            items = torch.from_numpy(split.eval_items[start:stop])
            actions = torch.from_numpy(split.eval_actions[start:stop])
            out = model(items, actions, return_channels=start == 0)
            if start == 0:
                geometry = gr.representation_geometry(
                    model, items[:GEOMETRY_USERS], actions[:GEOMETRY_USERS],
                    out if stop <= GEOMETRY_USERS else None)
            chunk = np.flatnonzero((split.eval_rows[:, 0] >= start)
                                   & (split.eval_rows[:, 0] < stop))
            user, pos = split.eval_rows[chunk, 0] - start, split.eval_rows[chunk, 1]
            item_scores = out.item_logits[user, pos - 1].double().numpy()
            targets = split.eval_items[start:stop][user, pos] - 1  # column of each item id
            if exclude_seen:
                for row, index in enumerate(chunk):
                    seen = split.eval_seen[index] - 1
                    item_scores[row, seen[seen != targets[row]]] = -np.inf
            n, r = gr.ndcg_recall_at_k(item_scores, targets, k)
            ndcg.append(n)
            recall.append(r)
            probs = torch.softmax(out.action_logits[user, pos].double(), dim=-1).numpy()
            scores.append(probs[:, data.positive].sum(axis=1))
            labels.append(data.positive[split.eval_actions[start:stop][user, pos] - 1])
    model.train(was_training)
    return Evaluation(ndcg=float(np.concatenate(ndcg).mean()),
                      recall=float(np.concatenate(recall).mean()),
                      auc=gr.auc(np.concatenate(scores), np.concatenate(labels)),
                      erank=geometry["erank"], spectra=geometry["spectra"])


def train_variants(data: Interactions, split: Split, p: Params, seed: int,
                   variants: tuple[str, ...], check_cancelled: Callable[[], None],
                   on_eval: Callable[[int, dict[str, VariantRun]], None] | None = None
                   ) -> dict[str, VariantRun]:
    """Train the variants in lockstep: same initial shared weights, same batches, same steps."""
    import torch

    from engine.models import generative_ranker as gr

    torch.manual_seed(seed)
    reference = gr.GenerativeRanker(model_config(p, data, svan=False))
    runs, optimisers = {}, {}
    for name in variants:
        torch.manual_seed(seed)
        model = gr.GenerativeRanker(model_config(p, data, svan=name == "svan"))
        model.load_state_dict(reference.state_dict(), strict=False)  # SVAN keeps its own phi
        runs[name] = VariantRun(name, model=model)
        optimisers[name] = torch.optim.AdamW(model.parameters(), lr=p.lr,
                                             weight_decay=p.weight_decay)
    rng = np.random.default_rng(seed)

    def record(step: int) -> None:
        users = None if step == p.steps else MONITOR_USERS  # full test set at the end only
        for run in runs.values():
            run.steps.append(step)
            run.evaluations.append(evaluate(run.model, data, split, p.k, p.exclude_seen,
                                            check_cancelled, users))
        if on_eval is not None:
            on_eval(step, runs)

    record(0)
    for step in range(1, p.steps + 1):
        check_cancelled()
        items, actions = (torch.from_numpy(a) for a in
                          sample_batch(split, p.batch_size, p.max_interactions, rng))
        for name, run in runs.items():
            loss, _ = gr.training_loss(run.model(items, actions), items, actions)
            optimisers[name].zero_grad(set_to_none=True)
            loss.backward()
            optimisers[name].step()
            run.losses.append(loss.item())
        if step % p.eval_every == 0 or step == p.steps:
            record(step)
    return runs


def progress_metrics(runs: dict[str, VariantRun]) -> dict[str, float]:
    """The live curves: loss, NDCG, AUC and effective ranks per variant, last layer's channels."""
    metrics = {}
    for name, run in runs.items():
        e = run.final
        if run.losses:
            metrics[f"loss_{name}"] = float(np.mean(run.losses[-20:]))
        metrics[f"ndcg_{name}"] = e.ndcg
        metrics[f"auc_{name}"] = e.auc
        metrics[f"erank_items_{name}"] = e.erank["items"]
        layer = max(int(key.split()[0][1:]) for key in e.erank if key.startswith("L"))
        for channel in CHANNELS:
            slug = channel.replace("->", "_")
            metrics[f"erank_{slug}_{name}"] = e.erank[f"L{layer} {channel}"]
    return metrics


def load_data(p: Params, inputs: dict[str, str]) -> Interactions:
    if p.data == "logs":
        if "logs" not in inputs:
            raise ValueError("data='logs' needs the `logs` input: a CSV/Parquet table with "
                             "user, item, action and timestamp columns")
        return load_logs(inputs["logs"], p)
    return load_movielens(p.movielens_actions, p.max_users)


# -- svan.train ------------------------------------------------------------------------------------

def run_train(ctx: JobContext, params: Params, inputs: dict) -> dict:
    """Train, stream the curves, save plots, tables, spectra and checkpoints."""
    data = load_data(params, inputs)
    split = split_data(data, params.holdout, params.max_interactions)
    if not len(split.eval_rows):
        raise ValueError(f"no user has {params.holdout + 2} interactions: nothing to test on")
    ctx.log(f"{data.source}: {len(data.items)} users, {data.n_items} items, "
            f"{data.n_interactions} interactions, actions {data.action_names}; "
            f"{len(split.eval_rows)} held-out interactions")
    variants = VARIANTS if params.variant == "both" else (params.variant,)
    with limit_threads(1):
        runs = train_variants(
            data, split, params, ctx.seed, variants, ctx.check_cancelled,
            on_eval=lambda step, runs: ctx.progress(step, params.steps, **progress_metrics(runs)))
    outputs = save_figures(ctx, runs, params.k)
    for name, run in runs.items():
        outputs[f"checkpoint_{name}"] = ctx.save_checkpoint(
            name, run.model, cfg={**run.model.cfg.to_dict(), "seed": ctx.seed,
                                  "steps": params.steps, "source": data.source})
        for key, spectrum in run.final.spectra.items():
            if key in ("items", f"L{params.n_layers} action->item"):
                slug = "items" if key == "items" else "action_item"
                ctx.save_artifact(f"spectrum_{slug}_{name}", spectrum)
    outputs["final"] = {name: final_summary(run) for name, run in runs.items()}
    if len(runs) == 2:
        outputs["final"]["erank_gain_percent"] = erank_gain(runs)
    return outputs




def final_summary(run: VariantRun) -> dict:
    e = run.final
    return {"ndcg": e.ndcg, "recall": e.recall, "auc": e.auc, "erank_items": e.erank["items"],
            "erank_item_embeddings": e.erank["item_embeddings"],
            "erank_channels": {key: value for key, value in e.erank.items()
                               if key.startswith("L")}}


def erank_gain(runs: dict[str, VariantRun]) -> float:
    """Relative effective-rank gain of SVAN's item representations, in percent."""
    base, svan = runs["baseline"].final.erank["items"], runs["svan"].final.erank["items"]
    return 100.0 * (svan / base - 1.0)


def save_figures(ctx: JobContext, runs: dict[str, VariantRun], k: int, prefix: str = ""
                 ) -> dict[str, str]:
    """Effective-rank curves, channel curves, spectra, NDCG curves and the two tables."""
    figures, outputs = _figures(runs, k), {}
    for name, value in figures.items():
        outputs[prefix + name] = ctx.save_artifact(prefix + name, value)
    return outputs


def _figures(runs: dict[str, VariantRun], k: int) -> dict[str, dict]:
    any_run = next(iter(runs.values()))
    layers = sorted({key.split()[0] for key in any_run.final.erank if key.startswith("L")})
    last = layers[-1]
    erank_curves = [series(name, run.steps, run.erank_curve("items")) for name, run in
                    runs.items()]
    channel_curves = [series(f"{channel}, {name}", run.steps,
                             run.erank_curve(f"{last} {channel}"))
                      for name, run in runs.items() for channel in CHANNELS]
    spectra = []
    for name, run in runs.items():
        s = run.final.spectra["items"]
        spectra.append(series(f"item representations, {name}", np.arange(1, len(s) + 1),
                              s / s.sum()))
        s = run.final.spectra[f"{last} action->item"]
        spectra.append(series(f"{last} action->item output, {name}", np.arange(1, len(s) + 1),
                              s / max(s.sum(), 1e-300)))
    quality = [series(f"NDCG@{k}, {name}", run.steps, [e.ndcg for e in run.evaluations])
               for name, run in runs.items()]
    quality += [series(f"AUC, {name}", run.steps, [e.auc for e in run.evaluations])
                for name, run in runs.items()]
    channel_rows = [[name, key.split()[0], key.split()[1], value]
                    for name, run in runs.items() for key, value in run.final.erank.items()
                    if key.startswith("L")]
    metric_rows = [[name, e.ndcg, e.recall, e.auc, e.erank["items"], e.erank["item_embeddings"]]
                   for name, run in runs.items() for e in [run.final]]
    return {
        "erank_plot": plot("Effective rank of item representations", erank_curves, "step",
                           "effective rank"),
        "channel_erank_plot": plot(f"Effective rank per attention channel ({last})",
                                   channel_curves, "step", "effective rank"),
        "spectra_plot": plot("Singular-value spectra (normalised), end of training", spectra,
                             "index", "s_i / sum(s)", logy=True),
        "quality_plot": plot(f"Held-out NDCG@{k} and AUC", quality, "step", "metric"),
        "channel_erank_table": {"columns": ["variant", "layer", "channel", "effective rank"],
                                "rows": channel_rows},
        "metrics_table": {"columns": ["variant", f"NDCG@{k}", f"recall@{k}", "AUC",
                                      "erank items", "erank item embeddings"],
                          "rows": metric_rows},
    }


# -- svan.reproduce --------------------------------------------------------------------------------

SEEDS = 3
ERANK_GAIN_TARGET_PERCENT = 5.0  # spec: effective rank of item representations up by >= 5%
FULL: dict[str, Any] = dict(steps=300, eval_every=100, batch_size=64, max_interactions=32,
                            d_model=64, n_heads=2, n_layers=2, dropout=0.1, lr=1e-3,
                            svan_value="mlp")  # ~10 min for 3 seeds x 2 variants on 2 cores
SMOKE: dict[str, Any] = dict(steps=20, eval_every=10, max_users=100, max_interactions=16,
                             d_model=32, batch_size=32)


def run_reproduce(ctx: JobContext, params: ReproduceParams, inputs: dict) -> dict:
    """Baseline vs SVAN on MovieLens-100k (like/skip), same budget, 3 seeds (1 in smoke)."""
    started = time.monotonic()
    p = Params(**(SMOKE if params.smoke else FULL))
    seeds = [ctx.seed] if params.smoke else [ctx.seed + i for i in range(SEEDS)]
    data = load_movielens(p.movielens_actions, p.max_users)
    split = split_data(data, p.holdout, p.max_interactions)
    results: dict[int, dict[str, VariantRun]] = {}
    for index, seed in enumerate(seeds):
        def report(step: int, runs: dict[str, VariantRun], index: int = index) -> None:
            ctx.progress(index * (p.steps + 1) + step, len(seeds) * (p.steps + 1),
                         **progress_metrics(runs))
        with limit_threads(1):
            results[seed] = train_variants(data, split, p, seed, VARIANTS, ctx.check_cancelled,
                                           report)
        ctx.log(f"seed {seed}: " + "; ".join(
            f"{name} NDCG@10 {run.final.ndcg:.4f} AUC {run.final.auc:.4f} "
            f"erank {run.final.erank['items']:.2f}" for name, run in results[seed].items()))
    outputs = save_figures(ctx, results[seeds[0]], p.k)
    criteria = reproduce_criteria(results)
    claim = Claim(
        paper=PAPER,
        statement=("A selective value nonlinearity in the action-attending-item attention "
                   "channel raises the effective rank of item representations (up to 12.58%) "
                   "and does not hurt ranking quality."),
        criteria=criteria, seeds=seeds, wall_s=time.monotonic() - started, smoke=params.smoke,
        notes=reproduce_notes(results, p, data, criteria))
    return {"claim": claim.to_dict(), **outputs}


def reproduce_criteria(results: dict[int, dict[str, VariantRun]]) -> list[Criterion]:
    per_seed = results
    gains = {seed: erank_gain(runs) for seed, runs in per_seed.items()}

    def diffs(metric: str) -> dict[int, float]:
        return {seed: getattr(runs["svan"].final, metric) - getattr(runs["baseline"].final,
                                                                     metric)
                for seed, runs in per_seed.items()}

    ndcg, auc = diffs("ndcg"), diffs("auc")
    layer_names = sorted({key.split()[0] for runs in per_seed.values() for v in VARIANTS
                          for key in runs[v].final.erank if key.startswith("L")})
    layers = sum(all(np.isfinite(runs[v].final.erank.get(f"{layer} {channel}", math.nan))
                     for runs in per_seed.values() for v in VARIANTS for channel in CHANNELS)
                 for layer in layer_names)

    def line(values: dict[int, float], fmt: str = ".4f") -> str:
        return "; ".join(f"seed {seed}: {value:{fmt}}" for seed, value in values.items())

    def level(metric: str) -> str:
        return "; ".join(
            f"seed {seed}: baseline {getattr(runs['baseline'].final, metric):.4f}, "
            f"SVAN {getattr(runs['svan'].final, metric):.4f}" for seed, runs in per_seed.items())

    return [
        Criterion("effective-rank gain of item representations, SVAN vs baseline (%, mean "
                  "over seeds)", float(np.mean(list(gains.values()))),
                  ERANK_GAIN_TARGET_PERCENT, ">=",
                  paper="up to 12.58% effective-rank gain", note=line(gains, ".2f")),
        Criterion("NDCG@10 (full ranking) of SVAN minus baseline (mean over seeds)",
                  float(np.mean(list(ndcg.values()))), 0.0, ">=",
                  paper="SVAN consistently improves ranking quality over strong baselines",
                  note=f"{line(ndcg)}. Levels: {level('ndcg')}"),
        Criterion("AUC of SVAN minus baseline (mean over seeds)",
                  float(np.mean(list(auc.values()))), 0.0, ">=",
                  paper="SVAN consistently improves ranking quality over strong baselines",
                  note=f"{line(auc)}. Levels: {level('auc')}"),
        Criterion("attention layers whose four channel effective ranks are reported for both "
                  "variants (channel-wise diagnostics shown)", layers, 1, ">=",
                  paper="collapse concentrates in the action-attending-item channel",
                  note="see channel_erank_table, channel_erank_plot and spectra_plot"),
    ]


def reproduce_notes(results: dict[int, dict[str, VariantRun]], p: Params, data: Interactions,
                    criteria: list[Criterion]) -> str:
    first = next(iter(results.values()))
    last = f"L{p.n_layers}"
    channel_text = "; ".join(
        f"{channel}: baseline {first['baseline'].final.erank[f'{last} {channel}']:.2f}, "
        f"SVAN {first['svan'].final.erank[f'{last} {channel}']:.2f}" for channel in CHANNELS)
    notes = [
        "The paper text was unavailable; the spec follows the abstract, so the comparison model "
        "is our own small generative ranker, not the paper's architecture or data scale.",
        f"Data: {data.source}, {len(data.items)} users, {data.n_items} items, actions "
        f"{data.action_names}; last {p.holdout} interactions per user held out; NDCG@10 and "
        "recall@10 over all items (seen items excluded), AUC of P(like).",
        f"Budget per variant and seed: {p.steps} AdamW steps of {p.batch_size} sequences of "
        f"{p.max_interactions} interactions, d_model {p.d_model}, {p.n_layers} layers, "
        f"{p.n_heads} heads; baseline and SVAN trained in lockstep from the same shared "
        "initial weights on the same batches (SVAN adds its value MLP).",
        f"Channel effective ranks, {last}, first seed (action->item is SVAN's channel): "
        f"{channel_text}.",
        "Effective rank = exp(entropy of normalised singular values) of final hidden states at "
        f"item tokens of the first {GEOMETRY_USERS} evaluation sequences.",
    ]
    failed = [c.name for c in criteria if not c.passed]
    if failed:
        notes.append("Not reproduced: " + "; ".join(failed) + ".")
    return " ".join(notes)


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="svan.train",
        title="SVAN vs baseline generative ranker (MovieLens-100k or your log)",
        paper=PAPER,
        params=Params,
        run=run_train,
        inputs={"logs": "table"},
        outputs={"erank_plot": "plot", "channel_erank_plot": "plot", "spectra_plot": "plot",
                 "quality_plot": "plot", "channel_erank_table": "table",
                 "metrics_table": "table", "final": "json"},
        resources=Resources(cpus=2, memory_gb=2),
        description=("A causal transformer over interleaved item/action tokens; SVAN applies a "
                     "value nonlinearity in the action->item attention channel. Reports "
                     "NDCG@k, recall@k (full ranking), AUC, and effective ranks overall and "
                     "per channel."),
    ),
    reproduce_spec(PAPER, "SVAN: effective-rank gain without losing ranking quality",
                   run_reproduce, resources=Resources(cpus=2, memory_gb=2)),
]
