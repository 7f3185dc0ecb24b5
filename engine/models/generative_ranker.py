"""A generative ranking model over interleaved item/action tokens, attention split into channels.

A user's history is one token sequence ``[i_1, a_1, i_2, a_2, ..., i_T, a_T]`` (item, then the
action the user took on it). Causal self-attention over it, trained by next-token prediction:

* an item token ``i_t`` predicts its own action ``a_t`` (ranking: will the user like it?), and
* an action token ``a_t`` predicts the next item ``i_{t+1}`` over the whole catalogue
  (retrieval; the logits are dot products with the item embedding table).

Attention decomposes into four channels by (query type, key type). ``"q->k"`` names the channel
in which tokens of type q (queries) attend to tokens of type k (keys)::

    out_t = sum_{k-type} sum_{j <= t, type(j) = k-type} softmax_j(q_t . k_j / sqrt(d_h)) v_j

with one softmax over all keys, so the four channel outputs sum to the attention output
exactly. SVAN (selective value nonlinearity) replaces ``v_j`` by ``phi(v_j)`` in the
action->item channel only (action queries reading item values); ``phi`` is a SiLU MLP on the
value vector (``svan_value="mlp"``) or an elementwise SiLU (``"silu"``). With ``svan=False`` the
model is a plain causal transformer; the other three channels are identical either way.

Effective rank (Roy & Vetterli 2007) of a matrix M with singular values s:
``erank(M) = exp(H(p))``, ``p = s / sum(s)``, H the Shannon entropy (0 log 0 = 0). It is computed
on the raw, uncentred matrix.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

CHANNELS = ("item->item", "item->action", "action->item", "action->action")
SVAN_CHANNEL = "action->item"
PAD = 0  # id 0 pads both vocabularies


@dataclass
class GenerativeRankerConfig:
    n_items: int  # catalogue size; item ids run 1..n_items
    n_actions: int  # action vocabulary; action ids run 1..n_actions
    max_interactions: int = 50  # sequence length is twice this
    d_model: int = 64
    n_heads: int = 2
    n_layers: int = 2
    dropout: float = 0.1  # on embeddings and MLP outputs (none on attention weights)
    svan: bool = False
    svan_value: Literal["mlp", "silu"] = "mlp"

    def to_dict(self) -> dict:
        return asdict(self)


def channel_masks(is_action: torch.Tensor) -> dict[str, torch.Tensor]:
    """(B, T, T) boolean masks, one per channel: [b, query t, key j] is in channel 'q->k'."""
    query_action = is_action[:, :, None]
    key_action = is_action[:, None, :]
    kinds = {"item": lambda m: ~m, "action": lambda m: m}
    masks = {}
    for name in CHANNELS:
        q_kind, k_kind = name.split("->")
        masks[name] = kinds[q_kind](query_action) & kinds[k_kind](key_action)
    return masks


class ValueNonlinearity(nn.Module):
    """SVAN's phi: a SiLU MLP on the value vector, or a plain elementwise SiLU."""

    def __init__(self, d_model: int, kind: str) -> None:
        super().__init__()
        self.kind = kind
        if kind == "mlp":
            self.up = nn.Linear(d_model, d_model)
            self.down = nn.Linear(d_model, d_model)

    def reset_parameters(self) -> None:
        """Fan-in init (std 1/sqrt(d)) so phi keeps the scale of v; the model's 0.02 init would
        shrink the SVAN channel ~100-fold at the start."""
        if self.kind == "mlp":
            for layer in (self.up, self.down):
                nn.init.normal_(layer.weight, std=layer.in_features ** -0.5)
                nn.init.zeros_(layer.bias)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        if self.kind == "silu":
            return F.silu(v)
        return self.down(F.silu(self.up(v)))


class ChannelAttention(nn.Module):
    """Causal multi-head attention whose output can be returned split into the four channels."""

    def __init__(self, cfg: GenerativeRankerConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.phi = ValueNonlinearity(cfg.d_model, cfg.svan_value) if cfg.svan else None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        return x.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor, masks: dict[str, torch.Tensor],
                return_channels: bool = False
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
        """``allowed`` (B, T, T): causal and not padding. Channel outputs are (B, T, d_model),
        before the output projection; they sum to the pre-projection attention output."""
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        values = {"plain": self._heads(v)}
        if self.phi is not None:
            values["svan"] = self._heads(self.phi(v))
        q, k = self._heads(q), self._heads(k)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        attn = torch.softmax(scores.masked_fill(~allowed[:, None], float("-inf")), dim=-1)

        if self.phi is None:
            out = attn @ values["plain"]
        else:
            svan_part = attn * masks[SVAN_CHANNEL][:, None].to(attn.dtype)
            out = (attn - svan_part) @ values["plain"] + svan_part @ values["svan"]
        merged = out.transpose(1, 2).reshape(B, T, D)

        channels = None
        if return_channels:
            channels = {}
            for name, mask in masks.items():
                value = values["svan"] if (name == SVAN_CHANNEL and self.phi is not None) \
                    else values["plain"]
                part = (attn * mask[:, None].to(attn.dtype)) @ value
                channels[name] = part.transpose(1, 2).reshape(B, T, D)
        return self.proj(merged), channels


class Block(nn.Module):
    def __init__(self, cfg: GenerativeRankerConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = ChannelAttention(cfg)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model), nn.Dropout(cfg.dropout))

    def forward(self, x, allowed, masks, return_channels=False):
        attended, channels = self.attn(self.ln_attn(x), allowed, masks, return_channels)
        x = x + attended
        return x + self.mlp(self.ln_mlp(x)), channels


@dataclass
class RankerOutput:
    hidden: torch.Tensor  # (B, 2L, d) final hidden states (after the last LayerNorm)
    item_logits: torch.Tensor  # (B, L, n_items): next item (column j = item id j + 1), read at
    # the action tokens
    action_logits: torch.Tensor  # (B, L, n_actions): the item's action, read at the item tokens
    channels: list[dict[str, torch.Tensor]] | None  # per layer, channel -> (B, 2L, d)


class GenerativeRanker(nn.Module):
    def __init__(self, cfg: GenerativeRankerConfig) -> None:
        super().__init__()
        if cfg.d_model % cfg.n_heads:
            raise ValueError(f"d_model {cfg.d_model} is not divisible by n_heads {cfg.n_heads}")
        self.cfg = cfg
        self.item_emb = nn.Embedding(cfg.n_items + 1, cfg.d_model, padding_idx=PAD)
        self.action_emb = nn.Embedding(cfg.n_actions + 1, cfg.d_model, padding_idx=PAD)
        self.type_emb = nn.Embedding(2, cfg.d_model)
        self.pos_emb = nn.Embedding(2 * cfg.max_interactions, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.action_head = nn.Linear(cfg.d_model, cfg.n_actions)
        self.apply(_init_weights)
        for module in self.modules():
            if isinstance(module, ValueNonlinearity):
                module.reset_parameters()

    def forward(self, items: torch.Tensor, actions: torch.Tensor,
                return_channels: bool = False) -> RankerOutput:
        """``items``, ``actions``: (B, L) ids, left-padded with 0 (most recent interaction last)."""
        batch, length = items.shape
        if length > self.cfg.max_interactions:
            raise ValueError(f"{length} interactions exceed max_interactions "
                             f"{self.cfg.max_interactions}")
        tokens = torch.stack([self.item_emb(items), self.action_emb(actions)], dim=2)
        x = tokens.reshape(batch, 2 * length, -1)
        positions = torch.arange(2 * length, device=items.device)
        is_action = positions.remainder(2).bool().expand(batch, -1)
        is_pad = torch.stack([items == PAD, actions == PAD], dim=2).reshape(batch, 2 * length)
        x = x + self.type_emb(is_action.long()) + self.pos_emb.weight[: 2 * length]
        x = self.drop(x)

        causal = torch.ones(2 * length, 2 * length, dtype=torch.bool, device=items.device).tril()
        diagonal = torch.eye(2 * length, dtype=torch.bool, device=items.device)
        allowed = (causal & ~is_pad[:, None, :]) | diagonal  # a pad token sees only itself
        masks = channel_masks(is_action)

        channels = [] if return_channels else None
        for block in self.blocks:
            x, layer_channels = block(x, allowed, masks, return_channels)
            if channels is not None:
                channels.append(layer_channels)
        hidden = self.ln_f(x)
        at_items, at_actions = hidden[:, 0::2], hidden[:, 1::2]
        item_logits = at_actions @ self.item_emb.weight[1:].T
        return RankerOutput(hidden=hidden, item_logits=item_logits,
                            action_logits=self.action_head(at_items), channels=channels)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()


def training_loss(out: RankerOutput, items: torch.Tensor, actions: torch.Tensor
                  ) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy of next item (at action tokens) plus own action (at item tokens)."""
    next_items = items[:, 1:]
    logits = out.item_logits[:, :-1]
    keep = next_items != PAD
    keep_action = actions != PAD
    zero = out.item_logits.sum() * 0.0  # a batch of one-interaction windows has no next item
    item_loss = F.cross_entropy(logits[keep], next_items[keep] - 1) if keep.any() else zero
    action_loss = F.cross_entropy(out.action_logits[keep_action], actions[keep_action] - 1) \
        if keep_action.any() else zero
    total = item_loss + action_loss
    return total, {"loss": total.item(), "item_loss": item_loss.item(),
                   "action_loss": action_loss.item()}


# -- geometry: effective rank and spectra --------------------------------------------------------

def singular_values(matrix: np.ndarray) -> np.ndarray:
    """Singular values, largest first (float64).

    Tall matrices go through the Gram matrix (eigenvalues of M^T M, ~50x faster than an SVD of
    10^4 x 64). Its round-off floor is ~1e-8 of the largest singular value, so values below
    that are set to zero (they would add ~1e-7 to an effective rank as noise).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.size == 0:
        return np.zeros(0)
    rows, cols = matrix.shape
    if rows < 4 * cols:
        return np.linalg.svd(matrix, compute_uv=False)
    eigenvalues = np.linalg.eigvalsh(matrix.T @ matrix)[::-1]
    floor = eigenvalues[0] * cols * np.finfo(np.float64).eps * 16
    return np.sqrt(np.where(eigenvalues > floor, eigenvalues, 0.0))


def effective_rank(matrix: np.ndarray | None = None, spectrum: np.ndarray | None = None
                   ) -> float:
    """exp(entropy of s / sum(s)) for the singular values s of ``matrix`` (or a given spectrum)."""
    s = singular_values(matrix) if spectrum is None else np.asarray(spectrum, dtype=np.float64)
    total = s.sum()
    if not total > 0:
        return math.nan
    p = s[s > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


@torch.no_grad()
def representation_geometry(model: GenerativeRanker, items: torch.Tensor, actions: torch.Tensor,
                            out: RankerOutput | None = None) -> dict:
    """Effective ranks and spectra of the item representations and of every channel's output.

    "Item representations" are the final hidden states at (non-pad) item tokens, the vectors the
    ranking head reads. Channel outputs are taken at the query tokens of their channel. ``out``
    (computed with ``return_channels=True``) saves a forward pass.
    """
    if out is None or out.channels is None:
        was_training = model.training
        model.eval()
        out = model(items, actions, return_channels=True)
        model.train(was_training)
    real = torch.stack([items != PAD, actions != PAD], dim=2).reshape(items.shape[0], -1)
    is_action = torch.zeros_like(real)
    is_action[:, 1::2] = True
    item_rows = out.hidden[real & ~is_action].double().numpy()
    action_rows = out.hidden[real & is_action].double().numpy()
    spectra = {"items": singular_values(item_rows), "actions": singular_values(action_rows),
               "item_embeddings": singular_values(model.item_emb.weight[1:].double().numpy())}
    for layer, channels in enumerate(out.channels, 1):
        for name, values in channels.items():
            query_kind = name.split("->")[0]
            rows = real & (is_action if query_kind == "action" else ~is_action)
            spectra[f"L{layer} {name}"] = singular_values(values[rows].double().numpy())
    return {"erank": {key: effective_rank(spectrum=s) for key, s in spectra.items()},
            "spectra": spectra}


# -- ranking metrics -----------------------------------------------------------------------------

def target_rank_range(scores: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(best, worst) 1-based rank of each row's target; ties with other items widen the range.

    Excluded items carry score -inf and never outrank a finite target.
    """
    scores = np.asarray(scores, dtype=np.float64)
    target_scores = scores[np.arange(len(targets)), targets][:, None]
    greater = (scores > target_scores).sum(axis=1)
    ties = (scores == target_scores).sum(axis=1) - 1
    return greater + 1, greater + 1 + ties


def ndcg_recall_at_k(scores: np.ndarray, targets: np.ndarray, k: int = 10
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Per row NDCG@k and recall@k of one target item over the full ranking (no sampling).

    Ties are broken uniformly at random and the expectation is returned, so a model that scores
    every item equally gets the random-ranking value, not a perfect one.
    """
    best, worst = target_rank_range(scores, targets)
    gains = np.zeros(scores.shape[1] + 2)
    gains[1:k + 1] = 1.0 / np.log2(np.arange(1, k + 1) + 1)
    cumulative = np.cumsum(gains)  # cumulative[p] = sum of gains at ranks 1..p
    count = worst - best + 1
    ndcg = (cumulative[worst] - cumulative[best - 1]) / count
    hits = np.clip(np.minimum(worst, k) - best + 1, 0, None)
    return ndcg, hits / count


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted one half); NaN with one class only."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    ends = np.r_[starts[1:], len(scores)]
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end + 1) / 2  # average 1-based rank of the tie group
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
