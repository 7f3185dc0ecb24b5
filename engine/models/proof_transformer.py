"""A small causal transformer over proof statements: direct prediction (DP) or proof traces (RT).

Every position holds one *structured* token ``(role, a, b, c)``: a role (fact, rule, query,
trace step) and up to three symbol slots (0 = empty). A rule ``a & b -> c`` is one position, a
fact ``c`` or a trace step ``c`` fills slot c, a query asks about slot c. The input vector is

    x_t = E_role[role_t] + R_a E[a_t] + R_b E[b_t] + R_c E[c_t]  (+ E_pos[t] if learned)

with one symbol table E and a learned linear map per slot, initialised to distinct random
rotations: matching "the rule whose premise is my atom" is then one bilinear form shared by
all symbols rather than one to learn per symbol. With ``positions="none"`` (the default) only
the causal mask orders the sequence and a trace step is found by content, which is the
mechanism by which a trace can extend to lengths never seen in training.

The head (tied to the symbol table for the symbol classes) predicts the next output class: a
symbol id 1..n_symbols (the next trace step), or ``YES`` / ``NO`` (the verdict). DP reads the
verdict at the query; RT reads each next step at the query and at every trace step until it
emits a verdict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

ROLES = ("pad", "fact", "rule", "query", "trace")
ROLE = {name: index for index, name in enumerate(ROLES)}


@dataclass
class ProofTransformerConfig:
    n_symbols: int  # symbol ids 1..n_symbols; 0 is the empty slot
    max_len: int = 96  # only used with learned positions
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    positions: Literal["none", "learned"] = "none"

    @property
    def yes(self) -> int:
        return self.n_symbols + 1

    @property
    def no(self) -> int:
        return self.n_symbols + 2

    @property
    def n_out(self) -> int:
        return self.n_symbols + 3

    def to_dict(self) -> dict:
        return asdict(self)


class Block(nn.Module):
    def __init__(self, cfg: ProofTransformerConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln_attn(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2)
                   for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln_mlp(x))


class ProofTransformer(nn.Module):
    def __init__(self, cfg: ProofTransformerConfig) -> None:
        super().__init__()
        if cfg.d_model % cfg.n_heads:
            raise ValueError(f"d_model {cfg.d_model} is not divisible by n_heads {cfg.n_heads}")
        self.cfg = cfg
        self.role = nn.Embedding(len(ROLES), cfg.d_model)
        self.symbol = nn.Embedding(cfg.n_symbols + 1, cfg.d_model)
        self.slots = nn.ModuleList(nn.Linear(cfg.d_model, cfg.d_model, bias=False)
                                   for _ in range(3))
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model) if cfg.positions == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_out)
        self.apply(_init_weights)
        for rotation in self.slots:  # distinct rotations of one symbol table (see docstring)
            nn.init.orthogonal_(rotation.weight)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` (B, T, 4) long: role, a, b, c. Returns logits (B, T, n_out)."""
        x = self.role(tokens[..., 0])
        for slot, rotation in enumerate(self.slots, start=1):
            x = x + rotation(self.symbol(tokens[..., slot]))
        if self.pos is not None:
            if tokens.shape[1] > self.cfg.max_len:
                raise ValueError(f"sequence of {tokens.shape[1]} exceeds max_len "
                                 f"{self.cfg.max_len}")
            x = x + self.pos.weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        logits = self.head(x)
        # Symbol logits also read the symbol table itself (tied), so copying an atom out of a
        # rule is one shared map rather than one output row to align per symbol.
        tied = x @ self.symbol.weight.T
        return torch.cat([logits[..., : tied.shape[-1]] + tied, logits[..., tied.shape[-1]:]],
                         dim=-1)

    @torch.no_grad()
    def generate_trace(self, context: torch.Tensor, max_steps: int
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy RT decoding from (B, T, 4) contexts of equal length.

        Returns (steps (B, max_steps) symbol ids, 0 after the verdict; verdicts (B,) with
        ``yes``, ``no`` or 0 when no verdict came within ``max_steps``).
        """
        batch = context.shape[0]
        steps = torch.zeros(batch, max_steps, dtype=torch.long)
        verdicts = torch.zeros(batch, dtype=torch.long)
        done = torch.zeros(batch, dtype=torch.bool)
        sequence = context
        for step in range(max_steps + 1):
            choice = self(sequence)[:, -1].argmax(dim=-1)
            is_verdict = (choice == self.cfg.yes) | (choice == self.cfg.no)
            newly = is_verdict & ~done
            verdicts[newly] = choice[newly]
            done |= is_verdict
            if bool(done.all()) or step == max_steps:
                break
            symbol = torch.where(done, torch.zeros_like(choice), choice)
            steps[:, step] = symbol
            token = torch.zeros(batch, 1, 4, dtype=torch.long)
            token[:, 0, 0] = ROLE["trace"]
            token[:, 0, 3] = symbol
            sequence = torch.cat([sequence, token], dim=1)
        return steps, verdicts


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
