"""A small causal language model whose token mixer is chosen per layer: attention or recurrence.

One class serves both sides of the transformer-vs-hybrid comparison. ``HybridLMConfig.mixers``
is a string with one letter per layer: ``a`` = causal multi-head self-attention, ``r`` = a
gated linear recurrence. ``"aaaa"`` is a plain transformer; ``"rrra"`` is a hybrid in the
3:1 recurrence:attention ratio of Olmo Hybrid. Everything else (embeddings, MLPs, norms, the
tied head) is shared, and the two mixers have the same projections (q, k, v, out: 4 d^2), so a
transformer and a hybrid of one width have the same parameter budget up to the recurrence's
tiny decay gate and short convolution (about d * (heads + conv_width + 2) weights per layer).

The recurrence, per head with key/value width h, is

    S_t = a_t S_{t-1} + k_t v_t^T        (S: h x h state, a_t in (0, 1) a learned forget gate)
    o_t = RMSNorm(S_t^T q_t)

with a_t = sigmoid(w . x_t + b) computed from the current input (data-dependent decay, as in
Mamba-2 and gated linear attention), and q, k, v read from u_t = SiLU(short causal depthwise
convolution of x over the last ``conv_width`` tokens), as Mamba, GLA and GatedDeltaNet do: a
recurrence alone mixes neighbouring tokens poorly, and without it our small hybrid trailed the
transformer by 0.5 nats at equal steps. It is evaluated in its exact parallel form
o = ((Q K^T) * D) V with D[t, s] = prod_{s < u <= t} a_u for s <= t and 0 above the diagonal,
computed as exp(cumsum(log a)_t - cumsum(log a)_s) on the causal triangle only, which is cheap
at the context lengths trained here and is causal by construction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

MIXERS = {"a": "attention", "r": "recurrence"}


@dataclass
class HybridLMConfig:
    vocab_size: int
    mixers: str = "aaaa"  # one letter per layer: a = attention, r = gated linear recurrence
    d_model: int = 128
    n_heads: int = 4
    max_len: int = 256
    decay_bias: float = 3.0  # initial forget gate sigmoid(3) ~ 0.95: a memory of ~20 tokens
    conv_width: int = 4  # recurrence layers: tokens seen by the short convolution before q, k, v

    def __post_init__(self) -> None:
        unknown = set(self.mixers) - set(MIXERS)
        if not self.mixers or unknown:
            raise ValueError(f"mixers {self.mixers!r}: use one letter per layer, 'a' "
                             f"(attention) or 'r' (recurrence)")
        if self.conv_width < 1:
            raise ValueError(f"conv_width must be at least 1, got {self.conv_width}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")

    @property
    def n_layers(self) -> int:
        return len(self.mixers)

    def to_dict(self) -> dict:
        return asdict(self)


def hybrid_mixers(n_layers: int, attention_every: int) -> str:
    """Every ``attention_every``-th layer attention, the rest recurrence (``"rrra"`` for 4, 4)."""
    return "".join("a" if (i + 1) % attention_every == 0 else "r" for i in range(n_layers))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: HybridLMConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = _heads(self.qkv(x), self.n_heads)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(x.shape))


class GatedLinearRecurrence(nn.Module):
    """S_t = a_t S_{t-1} + k_t v_t^T, o_t = S_t^T q_t (see the module docstring)."""

    def __init__(self, cfg: HybridLMConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.conv = nn.Conv1d(cfg.d_model, cfg.d_model, cfg.conv_width, groups=cfg.d_model,
                              padding=cfg.conv_width - 1)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.decay = nn.Linear(cfg.d_model, cfg.n_heads)
        self.norm = nn.RMSNorm(cfg.d_model // cfg.n_heads)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.decay_bias = cfg.decay_bias

    def short_conv(self, x: torch.Tensor) -> torch.Tensor:
        """SiLU of a causal depthwise convolution: position t sees tokens t - width + 1 .. t."""
        return F.silu(self.conv(x.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = _heads(self.qkv(self.short_conv(x)), self.n_heads)  # (B, H, T, h)
        k = k * k.shape[-1] ** -0.5
        log_a = F.logsigmoid(self.decay(x) + self.decay_bias).transpose(1, 2)  # (B, H, T)
        cumulative = log_a.cumsum(-1)
        T = x.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        exponent = (cumulative[..., :, None] - cumulative[..., None, :]).masked_fill(
            ~causal, float("-inf"))
        out = ((q @ k.transpose(-1, -2)) * exponent.exp()) @ v
        return self.proj(self.norm(out).transpose(1, 2).reshape(x.shape))


def _heads(qkv: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, ...]:
    B, T, D3 = qkv.shape
    return tuple(t.view(B, T, n_heads, D3 // 3 // n_heads).transpose(1, 2)
                 for t in qkv.split(D3 // 3, dim=2))


class Block(nn.Module):
    def __init__(self, cfg: HybridLMConfig, mixer: str) -> None:
        super().__init__()
        self.ln_mix = nn.LayerNorm(cfg.d_model)
        self.mix = CausalSelfAttention(cfg) if mixer == "a" else GatedLinearRecurrence(cfg)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mix(self.ln_mix(x))
        return x + self.mlp(self.ln_mlp(x))


class HybridLM(nn.Module):
    def __init__(self, cfg: HybridLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, mixer) for mixer in cfg.mixers)
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.apply(_init_weights)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids`` (B, T) long -> next-token logits (B, T, vocab_size); head tied to ``embed``."""
        if ids.shape[1] > self.cfg.max_len:
            raise ValueError(f"sequence of {ids.shape[1]} tokens exceeds max_len "
                             f"{self.cfg.max_len}")
        x = self.embed(ids) + self.pos.weight[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.embed.weight.T

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
