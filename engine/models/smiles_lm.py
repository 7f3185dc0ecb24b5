"""An autoregressive SMILES language model (a GRU over SMILES tokens), small enough for a CPU.

kCGM only needs ``log p_theta(x)`` of whole sequences, which an autoregressive model gives
exactly: the sum of next-token log-probabilities from BOS to EOS. Tokens are SMILES atoms
(bracket atoms, Cl, Br and ring-bond numbers ``%nn`` stay whole) and single characters.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD, BOS, EOS, UNK = range(len(SPECIALS))
TOKEN_PATTERN = re.compile(r"\[[^\]]+\]|Br|Cl|%\d{2}|.")


def tokenize(smiles: str) -> list[str]:
    return TOKEN_PATTERN.findall(smiles)


def build_vocabulary(smiles: list[str]) -> list[str]:
    """Every token seen, in a fixed (sorted) order after the specials."""
    return sorted({token for s in smiles for token in tokenize(s)})


@dataclass
class SmilesLMConfig:
    tokens: list[str] = field(default_factory=list)  # the vocabulary after SPECIALS
    d_embed: int = 64
    d_hidden: int = 256
    n_layers: int = 2
    max_len: int = 100  # sampled tokens per molecule, EOS included

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + len(self.tokens)

    def to_dict(self) -> dict:
        return asdict(self)


class SmilesLM(nn.Module):
    def __init__(self, cfg: SmilesLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.index = {token: i + len(SPECIALS) for i, token in enumerate(cfg.tokens)}
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_embed, padding_idx=PAD)
        self.rnn = nn.GRU(cfg.d_embed, cfg.d_hidden, cfg.n_layers, batch_first=True)
        self.head = nn.Linear(cfg.d_hidden, cfg.vocab_size)

    # -- text <-> tokens ---------------------------------------------------------------------
    def encode(self, smiles: list[str]) -> torch.Tensor:
        """(B, T) ``BOS tokens EOS`` right-padded with PAD; unknown tokens become UNK."""
        rows = [[BOS, *(self.index.get(t, UNK) for t in tokenize(s)), EOS] for s in smiles]
        batch = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)
        for i, row in enumerate(rows):
            batch[i, :len(row)] = torch.tensor(row)
        return batch

    def decode(self, tokens: torch.Tensor) -> list[str]:
        """Text up to the first EOS (a sequence that never ended is decoded as it stands)."""
        vocabulary = [*SPECIALS, *self.cfg.tokens]
        texts = []
        for row in tokens.tolist():
            pieces = []
            for token in row[1:]:
                if token in (EOS, PAD):
                    break
                pieces.append(vocabulary[token] if token >= len(SPECIALS) else "?")
            texts.append("".join(pieces))
        return texts

    # -- probabilities -----------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits (B, T, V) for every prefix of ``tokens``."""
        hidden, _ = self.rnn(self.embed(tokens))
        return self.head(hidden)

    def sequence_log_prob(self, tokens: torch.Tensor) -> torch.Tensor:
        """log p(x) per row (B,): next-token log-probabilities summed up to and with EOS."""
        logits = self(tokens[:, :-1])
        targets = tokens[:, 1:]
        log_probs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1))
        return (log_probs.squeeze(-1) * (targets != PAD)).sum(dim=1)

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (maximum likelihood)."""
        logits = self(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           tokens[:, 1:].reshape(-1), ignore_index=PAD)

    @torch.no_grad()
    def sample(self, n: int, temperature: float = 1.0,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """(n, <= max_len + 1) sampled sequences ``BOS ... EOS PAD...``; PAD, BOS and UNK are
        never drawn."""
        tokens = torch.full((n, 1), BOS, dtype=torch.long)
        state, finished = None, torch.zeros(n, dtype=torch.bool)
        banned = torch.tensor([PAD, BOS, UNK])
        for _ in range(self.cfg.max_len):
            hidden, state = self.rnn(self.embed(tokens[:, -1:]), state)
            logits = self.head(hidden[:, -1]) / temperature
            logits[:, banned] = -torch.inf
            step = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
            step = step.squeeze(1).masked_fill(finished, PAD)
            tokens = torch.cat([tokens, step[:, None]], dim=1)
            finished |= step == EOS
            if finished.all():
                break
        return tokens
