"""Branching Flows (arXiv 2511.09465): flow matching whose elements branch and die.

A data sample is an ordered list of elements, each with continuous coordinates (``coord_dim``
numbers, may be 0) and/or a discrete token (``n_tokens`` letters, may be 0; the mask token is
``n_tokens``). Training targets come from a forest of binary trees built backwards from the data:

1. ``Poisson(deletion_rate * N)`` duplicates of random elements are inserted beside their
   source, flagged "to be deleted".
2. ``Binomial(M - 1, merge_prob)`` merges of random adjacent pairs build the forest. A merged
   node's anchor is the weight-averaged coordinates of its children and their token when both
   agree, else the mask; its weight ``w`` is its number of leaves.
3. A node of weight ``W >= 2`` born at ``t0`` splits at ``t = 1 - (1 - t0) exp(-E / (2 (W - 1)))``
   with ``E ~ Exp(1)``: the first of ``W - 1`` splits, each drawn from H = Beta(1, 2) truncated
   to ``[t0, 1]`` (the closed form of the spec's ``F_H^{-1}(1 - S*)``).
4. From the roots (base: ``N(0, I)`` coordinates, masked tokens) every node follows a Brownian
   bridge (noise ``sigma``) to its anchor; its children start where it split. A masked node
   whose anchor is a token unmasks at a uniform time in ``[birth, 1]``; a to-be-deleted leaf
   dies at a uniform time in ``[birth, 1]``.
5. Each element alive at ``t`` gets targets: its anchor, ``w - 1`` pending splits, deleted or not.

The denoiser is a small transformer over the live elements that predicts the anchor (coordinates
and a distribution over tokens + mask), a split log-intensity and a deletion logit. Sampling runs
the same process forward with the model's predictions in place of the targets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

LOG_INTENSITY_CLAMP = (-100.0, 11.0)
TIME_FREQUENCIES = 16


@dataclass
class BranchingFlowConfig:
    coord_dim: int = 2  # continuous numbers per element (0: none)
    n_tokens: int = 0  # discrete vocabulary (0: none); token n_tokens is the mask
    max_len: int = 64  # most elements a set may hold while sampling (and index embeddings)
    positional: bool = False  # index embeddings for sequences; sets have none
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    sigma: float = 0.1  # Brownian-bridge noise of the continuous base process
    merge_prob: float = 0.9  # Binomial probability of each adjacent merge
    deletion_rate: float = 0.1  # Poisson mean of to-be-deleted duplicates per element
    branching: bool = True  # False: no splits, no deletions (fixed-length flow matching)

    @property
    def mask_token(self) -> int:
        return self.n_tokens

    def to_dict(self) -> dict:
        return asdict(self)


# -- the forward (training) process -----------------------------------------------------------

@dataclass
class Forest:
    """Nodes of a forest in arrays; ``roots`` in sequence order, children ``left``/``right``."""

    weight: list[int]
    left: list[int]
    right: list[int]
    anchor_x: list[np.ndarray]
    anchor_tok: list[int]
    deleted: list[bool]
    roots: list[int]


@dataclass
class Elements:
    """The live elements of one sample at time t, in sequence order, with their targets."""

    x: np.ndarray  # (n, coord_dim)
    tok: np.ndarray  # (n,)
    target_x: np.ndarray  # (n, coord_dim) anchors
    target_tok: np.ndarray  # (n,) anchor tokens (mask for a mixed internal node)
    splits: np.ndarray  # (n,) pending splits w - 1
    deleted: np.ndarray  # (n,) 1 for a to-be-deleted leaf

    def __len__(self) -> int:
        return len(self.tok)


def forest_sizes(length: int, rng: np.random.Generator, cfg: BranchingFlowConfig
                 ) -> tuple[int, int]:
    """(deleted duplicates, merges) for a sample of ``length`` elements (steps 1 and 2)."""
    if not cfg.branching:
        return 0, 0
    duplicates = int(rng.poisson(cfg.deletion_rate * length))
    merges = int(rng.binomial(length + duplicates - 1, cfg.merge_prob))
    return duplicates, merges


def start_sizes(lengths: np.ndarray, rng: np.random.Generator, cfg: BranchingFlowConfig,
                draws: int = 4000) -> np.ndarray:
    """Probabilities of each number of roots (elements at t = 0) over the data's lengths."""
    picks = rng.choice(np.asarray(lengths), size=draws)
    roots = []
    for n in picks:
        duplicates, merges = forest_sizes(int(n), rng, cfg)
        roots.append(int(n) + duplicates - merges)
    return np.bincount(roots, minlength=2) / draws


def build_forest(coords: np.ndarray, tokens: np.ndarray, rng: np.random.Generator,
                 cfg: BranchingFlowConfig) -> Forest:
    """Steps 1 and 2: pad with to-be-deleted duplicates, then coalesce adjacent elements."""
    n = len(tokens)
    duplicates, merges = forest_sizes(n, rng, cfg)
    sources = list(range(n))
    flags = [False] * n
    for _ in range(duplicates):
        at = int(rng.integers(len(sources)))
        sources.insert(at + 1, sources[at])
        flags.insert(at + 1, True)
    forest = Forest(weight=[1] * len(sources), left=[-1] * len(sources),
                    right=[-1] * len(sources), anchor_x=[coords[s] for s in sources],
                    anchor_tok=[int(tokens[s]) for s in sources], deleted=flags,
                    roots=list(range(len(sources))))
    for _ in range(merges):
        at = int(rng.integers(len(forest.roots) - 1))
        a, b = forest.roots[at], forest.roots[at + 1]
        wa, wb = forest.weight[a], forest.weight[b]
        forest.weight.append(wa + wb)
        forest.left.append(a)
        forest.right.append(b)
        forest.anchor_x.append((wa * forest.anchor_x[a] + wb * forest.anchor_x[b]) / (wa + wb))
        same = forest.anchor_tok[a] == forest.anchor_tok[b]
        forest.anchor_tok.append(forest.anchor_tok[a] if same else cfg.mask_token)
        forest.deleted.append(False)
        forest.roots[at:at + 2] = [len(forest.weight) - 1]
    return forest


def split_time(t0: float, weight: int, rng: np.random.Generator) -> float:
    """First of ``weight - 1`` split times drawn from Beta(1, 2) truncated to [t0, 1]."""
    return 1.0 - (1.0 - t0) * math.exp(-rng.exponential() / (2.0 * (weight - 1)))


def bridge(x0: np.ndarray, t0: float, anchor: np.ndarray, t: float, sigma: float,
           rng: np.random.Generator) -> np.ndarray:
    """A draw at time t of the Brownian bridge from (t0, x0) to (1, anchor)."""
    if t <= t0:
        return x0
    fraction = (t - t0) / (1.0 - t0)
    spread = sigma * math.sqrt(max((t - t0) * (1.0 - t) / (1.0 - t0), 0.0))
    return x0 + fraction * (anchor - x0) + spread * rng.standard_normal(x0.shape)


def state_at(forest: Forest, t: float, rng: np.random.Generator, cfg: BranchingFlowConfig
             ) -> Elements:
    """Steps 3 to 5: run the forest from its roots to time t; the live elements and targets."""
    rows: list[tuple] = []

    def visit(node: int, t0: float, x0: np.ndarray, tok0: int) -> None:
        anchor_tok = forest.anchor_tok[node]
        unmask_at = (rng.uniform(t0, 1.0) if tok0 == cfg.mask_token and anchor_tok != tok0
                     else math.inf)
        weight = forest.weight[node]
        if weight >= 2:
            ts = split_time(t0, weight, rng)
            if ts <= t:
                xs = bridge(x0, t0, forest.anchor_x[node], ts, cfg.sigma, rng)
                toks = anchor_tok if unmask_at <= ts else tok0
                visit(forest.left[node], ts, xs, toks)
                visit(forest.right[node], ts, xs, toks)
                return
        if forest.deleted[node] and rng.uniform(t0, 1.0) <= t:
            return  # died before t
        rows.append((bridge(x0, t0, forest.anchor_x[node], t, cfg.sigma, rng),
                     anchor_tok if unmask_at <= t else tok0, forest.anchor_x[node], anchor_tok,
                     weight - 1, float(forest.deleted[node])))

    for root in forest.roots:
        visit(root, 0.0, rng.standard_normal(cfg.coord_dim), cfg.mask_token)
    x, tok, target_x, target_tok, splits, deleted = zip(*rows, strict=True)
    return Elements(np.stack(x).reshape(len(rows), cfg.coord_dim), np.array(tok),
                    np.stack(target_x).reshape(len(rows), cfg.coord_dim), np.array(target_tok),
                    np.array(splits, dtype=np.float32), np.array(deleted, dtype=np.float32))


@dataclass
class Batch:
    """Padded tensors of a batch of element sets; ``valid`` marks real (unpadded) slots."""

    x: torch.Tensor
    tok: torch.Tensor
    t: torch.Tensor
    valid: torch.Tensor
    target_x: torch.Tensor | None = None
    target_tok: torch.Tensor | None = None
    splits: torch.Tensor | None = None
    deleted: torch.Tensor | None = None


def pad(sets: list[Elements], times: np.ndarray, cfg: BranchingFlowConfig) -> Batch:
    lengths = [len(s) for s in sets]
    width = max(lengths)
    valid = np.arange(width)[None, :] < np.array(lengths)[:, None]

    def stack(name: str, dtype, tail: tuple = ()) -> torch.Tensor:
        out = np.zeros((len(sets), width, *tail), dtype=dtype)
        values = np.concatenate([getattr(s, name) for s in sets])
        out[valid] = values.reshape(sum(lengths), *tail)
        return torch.from_numpy(out)

    coords = (cfg.coord_dim,)
    return Batch(stack("x", np.float32, coords), stack("tok", np.int64),
                 torch.tensor(times, dtype=torch.float32), torch.from_numpy(valid),
                 stack("target_x", np.float32, coords), stack("target_tok", np.int64),
                 stack("splits", np.float32), stack("deleted", np.float32))


def training_batch(samples: list[tuple[np.ndarray, np.ndarray]], rng: np.random.Generator,
                   cfg: BranchingFlowConfig) -> Batch:
    """One forest and one uniform time per (coords, tokens) sample, padded."""
    times = rng.uniform(0.0, 1.0, len(samples))
    sets = [state_at(build_forest(coords, tokens, rng, cfg), float(t), rng, cfg)
            for (coords, tokens), t in zip(samples, times, strict=True)]
    return pad(sets, times, cfg)


# -- the denoiser ------------------------------------------------------------------------------

def time_features(t: torch.Tensor) -> torch.Tensor:
    frequencies = torch.exp(torch.linspace(0.0, math.log(1000.0), TIME_FREQUENCIES))
    angles = t[:, None] * frequencies[None, :] * math.pi
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


class BranchingTransformer(nn.Module):
    """Elements -> (anchor coordinates, anchor token logits incl. mask, split log-intensity,
    deletion logit); attention over the live elements of a set only, plus the set's size (the
    split rate depends on how many elements there already are)."""

    def __init__(self, cfg: BranchingFlowConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.coord_in = nn.Linear(cfg.coord_dim, d) if cfg.coord_dim else None
        self.token_in = nn.Embedding(cfg.n_tokens + 1, d)
        self.index_in = nn.Embedding(cfg.max_len, d) if cfg.positional else None
        self.time_in = nn.Sequential(nn.Linear(2 * TIME_FREQUENCIES, d), nn.SiLU(),
                                     nn.Linear(d, d))
        self.size_in = nn.Linear(2, d)  # softmax attention cannot count: give it the set size
        layer = nn.TransformerEncoderLayer(d, cfg.n_heads, 4 * d, dropout=0.0,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg.coord_dim + cfg.n_tokens + 1 + 2)

    def forward(self, x: torch.Tensor, tok: torch.Tensor, t: torch.Tensor,
                valid: torch.Tensor) -> dict[str, torch.Tensor]:
        size = valid.sum(1, keepdim=True).float()
        size_features = torch.cat([size / self.cfg.max_len, torch.log(size.clamp(min=1.0))], 1)
        h = self.token_in(tok) + (self.time_in(time_features(t))
                                  + self.size_in(size_features))[:, None, :]
        if self.coord_in is not None:
            h = h + self.coord_in(x)
        if self.index_in is not None:
            index = torch.arange(tok.shape[1]).clamp(max=self.cfg.max_len - 1)
            h = h + self.index_in(index)[None]
        h = self.norm(self.encoder(h, src_key_padding_mask=~valid))
        out = self.head(h)
        d, k = self.cfg.coord_dim, self.cfg.n_tokens + 1
        return {"x1": x + out[..., :d], "logits": out[..., d:d + k],
                "log_intensity": out[..., d + k], "delete_logit": out[..., d + k + 1]}

    def loss(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Base loss (MSE on coordinates, cross-entropy on masked tokens), Poisson Bregman
        divergence on pending splits, BCE on deletion; each averaged over live elements."""
        out = self(batch.x, batch.tok, batch.t, batch.valid)
        valid = batch.valid
        parts: dict[str, torch.Tensor] = {}
        if self.cfg.coord_dim:
            squared = (out["x1"] - batch.target_x).pow(2).mean(-1)
            parts["coords"] = squared[valid].mean()
        if self.cfg.n_tokens:
            masked = valid & (batch.tok == self.cfg.mask_token)
            if masked.any():
                parts["tokens"] = F.cross_entropy(out["logits"][masked], batch.target_tok[masked])
            else:
                parts["tokens"] = out["logits"].sum() * 0.0
        if self.cfg.branching:
            mu = out["log_intensity"].clamp(*LOG_INTENSITY_CLAMP).exp()
            target = batch.splits
            # mu - s log mu, shifted by its minimum (s - s log s) so a perfect fit scores 0
            bregman = mu - target - target * (torch.log(mu) - torch.log(target.clamp(min=1e-8)))
            parts["splits"] = bregman[valid].mean()
            parts["deletion"] = F.binary_cross_entropy_with_logits(
                out["delete_logit"][valid], batch.deleted[valid])
        parts["loss"] = sum(parts.values())
        return parts


# -- sampling ----------------------------------------------------------------------------------

@dataclass
class Frame:
    """One recorded state of one sample: time, coordinates (n, d) and tokens (n,)."""

    t: float
    x: np.ndarray
    tok: np.ndarray


@dataclass
class Generated:
    sets: list[tuple[np.ndarray, np.ndarray]]  # per sample: (coords (n, d), tokens (n,))
    trajectories: list[list[Frame]]  # the first ``record`` samples, every step


def _padded(sample: np.ndarray, n_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Elements per sample, and each flat element's column in its sample's padded row (the
    flat arrays stay grouped by sample and in sequence order)."""
    counts = np.bincount(sample, minlength=n_samples)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    column = np.arange(len(sample)) - starts[sample]
    return counts, column


@torch.no_grad()
def generate(model: BranchingTransformer, n: int, start: np.ndarray, steps: int,
             rng: np.random.Generator, record: int = 0,
             check_cancelled: Callable[[], None] | None = None) -> Generated:
    """Run the process forward from ``start`` (probabilities of each initial size).

    Per step of size dt at time s: splits ~ Poisson(mu * P(a pending Beta(1, 2) split falls in
    [s, s + dt] | > s)), deletion with probability sigmoid(logit) * dt / (1 - s) (the uniform
    death law), unmasking with probability dt / (1 - s) into a token drawn from the predicted
    anchor distribution, and the exact Brownian-bridge step toward the predicted anchor.
    Deleted elements vanish and split copies are inserted next to their source."""
    cfg = model.cfg
    model.eval()
    sizes = rng.choice(len(start), size=n, p=start)
    sizes = np.maximum(sizes, 1)
    sample = np.repeat(np.arange(n), sizes)
    x = rng.standard_normal((len(sample), cfg.coord_dim)).astype(np.float32)
    tok = np.full(len(sample), cfg.mask_token, dtype=np.int64)
    trajectories: list[list[Frame]] = [[] for _ in range(min(record, n))]

    def snapshot(t: float) -> None:
        for i, frames in enumerate(trajectories):
            keep = sample == i
            frames.append(Frame(t, x[keep].copy(), tok[keep].copy()))

    snapshot(0.0)
    grid = np.linspace(0.0, 1.0, steps + 1)
    for s, s_next in zip(grid[:-1], grid[1:], strict=True):
        if check_cancelled is not None:
            check_cancelled()
        dt, remaining = s_next - s, 1.0 - s
        counts, column = _padded(sample, n)
        width = max(int(counts.max()), 1)
        valid = np.zeros((n, width), dtype=bool)
        valid[sample, column] = True
        valid[counts == 0, 0] = True  # an emptied set keeps one padding slot: no all-masked row
        x_pad = np.zeros((n, width, cfg.coord_dim), dtype=np.float32)
        x_pad[sample, column] = x
        tok_pad = np.full((n, width), cfg.mask_token, dtype=np.int64)
        tok_pad[sample, column] = tok
        out = model(torch.from_numpy(x_pad), torch.from_numpy(tok_pad),
                    torch.full((n,), float(s)), torch.from_numpy(valid))
        x1 = out["x1"].numpy()[sample, column]
        fraction = dt / remaining
        if cfg.n_tokens:
            probs = torch.softmax(out["logits"], -1).numpy()[sample, column].astype(np.float64)
            probs /= probs.sum(-1, keepdims=True)
            if s_next >= 1.0:  # nothing stays masked at the end: the likeliest real token
                probs[:, cfg.mask_token] = 0.0
                probs /= probs.sum(-1, keepdims=True).clip(min=1e-12)
            unmask = (tok == cfg.mask_token) & (rng.random(len(tok)) < fraction)
            drawn = (probs.cumsum(-1) > rng.random((len(tok), 1))).argmax(-1)
            tok = np.where(unmask, drawn, tok)
        if cfg.coord_dim:
            spread = cfg.sigma * math.sqrt(max(dt * (1.0 - s_next) / remaining, 0.0))
            x = (x + fraction * (x1 - x)
                 + spread * rng.standard_normal(x.shape)).astype(np.float32)
        if cfg.branching:
            delete_p = torch.sigmoid(out["delete_logit"]).numpy()[sample, column] * fraction
            deleted = rng.random(len(sample)) < delete_p
            mu = out["log_intensity"].clamp(*LOG_INTENSITY_CLAMP).exp().numpy()[sample, column]
            split_p = 1.0 - ((1.0 - s_next) / remaining) ** 2
            splits = np.where(deleted, 0, rng.poisson(mu * split_p))
            grown = np.bincount(sample, weights=splits + 1 - deleted, minlength=n)
            splits[grown[sample] > cfg.max_len] = 0  # a set at the cap stops growing
            copies = np.where(deleted, 0, 1 + splits)
            sample, x, tok = (np.repeat(sample, copies), np.repeat(x, copies, axis=0),
                              np.repeat(tok, copies))
        snapshot(float(s_next))
    bounds = np.searchsorted(sample, np.arange(n + 1))
    sets = [(x[a:b], tok[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return Generated(sets, trajectories)
