"""Transformers vs hybrids at the token level: which tokens does a hybrid predict better?

The paper (arXiv 2606.20936) compares Olmo 3 with Olmo Hybrid token by token: the hybrid's
advantage (the loss gap, transformer loss minus hybrid loss) sits on open-class content words
more than on closed-class function words, shrinks on closing brackets but not on opening ones,
and vanishes on repeated n-grams. This module measures the same gaps for any two causal LMs:

* ``hybrid_tokens.train`` trains one of two matched small LMs (``engine.models.hybrid_lm``: a
  transformer, or a hybrid whose layers are mostly gated linear recurrences) on real text and
  code from ``engine.corpora``, with a byte-level BPE tokenizer trained here (or raw bytes).
* ``hybrid_tokens.compare`` scores the same text with two models (our checkpoints, or local
  Hugging Face causal-LM folders), aligns their per-token losses, classifies every token and
  reports the mean gap per category with bootstrap 95% intervals, a regression of the gap on
  the categories controlling for log token frequency, and the text coloured by the gap.
* ``hybrid_tokens.reproduce`` trains both of our models on the same data and checks the
  paper's three orderings with bootstrap intervals.

Alignment: when both models cut the text into the same tokens, the unit of analysis is the
token; otherwise (different tokenizers) it is the word or punctuation mark, and each token's
loss goes to the unit holding its last non-space character (whitespace tokens to the next
unit), so a unit's loss is its negative log-likelihood under each model.

Categories: content vs function words come from a closed-class English word list (no POS
tagger with a shipped model is installed; spaCy's and NLTK's download theirs), projected from
the word onto every token of it, in prose only. A delimiter token is made only of punctuation
and holds opening brackets ``([{`` or closing ones ``)]}`` (not both). A token is a repeated
n-gram when the n tokens ending at it already occurred within the model's context window in
the same document, else a first occurrence.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import re
import time
from collections import Counter
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
from engine.plots import plot, series

if TYPE_CHECKING:
    from engine.context import JobContext

PAPER = "hybrid_tokens"
CORPUS_CHOICES = ("mix", "news", "wiki", "code")
CODE_SUFFIXES = {".py", ".c", ".h", ".cpp", ".js", ".ts", ".java", ".rs", ".go", ".json"}
HELD_OUT_EVERY = 10  # document i is held out from training when i % 10 == 9
OPENING, CLOSING = "([{", ")]}"
_CLOSED_CLASS_WORDS = """
a an the this that these those each every either neither some any no all both half several
many much more most few fewer less least own such what which whose whatever whichever
i me my mine myself you your yours yourself yourselves he him his himself she her hers herself
it its itself we us our ours ourselves they them their theirs themselves one ones someone
somebody something anyone anybody anything everyone everybody everything nobody nothing
who whom whoever
about above across after against along amid among around as at before behind below beneath
beside besides between beyond by despite down during except for from in inside into like near
of off on onto out outside over past per since than through throughout till to toward towards
under underneath until unlike up upon via with within without
and or but nor so yet if because although though unless whereas while whether once lest
be am is are was were been being have has had having do does did doing
can could may might must shall should will would ought
not n't don't doesn't didn't isn't aren't wasn't weren't can't couldn't won't wouldn't
shouldn't haven't hasn't hadn't it's i'm i've i'd i'll you're we're they're he's she's that's
there here then when where why how whenever wherever also just only very too even
"""
CLOSED_CLASS = frozenset(_CLOSED_CLASS_WORDS.split())
WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
UNIT = re.compile(r"\w+|[^\w\s]")
# The paper's reported gaps (Olmo 3 loss minus Olmo Hybrid loss, nats), as its abstract and our
# spec state them; orderings where it gives no number.
PAPER_GAPS = {
    "all": "> 0 (hybrid better across the board)",
    "content (prose)": "~0.04",
    "function (prose)": "~0.02",
    "opening delimiter": "kept (not smaller than overall)",
    "closing delimiter": "shrinks",
    "first-occurrence n-gram": "> 0",
    "repeated n-gram": "~0 (vanishes)",
}


# -- text ------------------------------------------------------------------------------------

@dataclass
class Document:
    text: str
    domain: Literal["prose", "code"]


@functools.lru_cache(maxsize=8)
def _corpus_documents(name: str, max_docs: int | None) -> tuple[str, ...]:
    from engine.corpora import load_documents

    return tuple(load_documents(name, max_docs))


def split_corpus(corpus: str, max_chars: int, max_docs: int | None = None
                 ) -> tuple[list[Document], list[Document]]:
    """(train, held-out) documents from the first ``max_docs`` of each source: every tenth
    document is held out, so the held-out set does not depend on how much training text is
    asked for."""
    if corpus not in CORPUS_CHOICES:
        raise ValueError(f"corpus {corpus!r}: choose one of {', '.join(CORPUS_CHOICES)}")
    names = ("news", "wiki", "code") if corpus == "mix" else (corpus,)
    train, held_out = [], []
    for name in names:
        domain = "code" if name == "code" else "prose"
        used = 0
        for index, text in enumerate(_corpus_documents(name, max_docs)):
            if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1:
                held_out.append(Document(text, domain))
            elif used < max_chars:
                train.append(Document(text[: max_chars - used], domain))
                used += len(train[-1].text)
    return train, held_out


@dataclass
class EvalText:
    """Documents joined by blank lines; ``starts`` gives each one's first character."""

    text: str
    starts: list[int]
    domains: list[str]

    def document_at(self, char: int) -> int:
        return bisect.bisect_right(self.starts, char) - 1


def join_documents(documents: list[Document], chars_per_domain: int) -> EvalText:
    """Up to ``chars_per_domain`` characters of each domain, whole documents where they fit."""
    parts, starts, domains, budget = [], [], [], Counter()
    position = 0
    for doc in documents:
        room = chars_per_domain - budget[doc.domain]
        if room <= 0:
            continue
        piece = doc.text[:room]
        budget[doc.domain] += len(piece)
        starts.append(position)
        domains.append(doc.domain)
        parts.append(piece)
        position += len(piece) + 2
    return EvalText("\n\n".join(parts), starts, domains)


def read_text_file(path: str) -> EvalText:
    file = Path(path)
    if file.is_dir() or not file.exists():
        raise ValueError(f"{file}: the text input must be a UTF-8 text file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if len(text.strip()) < 2:
        raise ValueError(f"{file}: the text is empty")
    return EvalText(text, [0], ["code" if file.suffix in CODE_SUFFIXES else "prose"])


# -- tokenizers ------------------------------------------------------------------------------

class ByteTokenizer:
    """UTF-8 bytes as tokens; each byte's span is the character it belongs to."""

    vocab_size = 256

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        ids, spans = [], []
        for index, char in enumerate(text):
            data = char.encode("utf-8", errors="replace")
            ids.extend(data)
            spans.extend([(index, index + 1)] * len(data))
        return ids, spans

    def to_dict(self) -> dict:
        return {"kind": "byte"}


class BPETokenizer:
    """A byte-level BPE (GPT-2 style pre-tokenization) trained here with ``tokenizers``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.get_vocab_size()

    @classmethod
    def train(cls, texts: list[str], vocab_size: int) -> BPETokenizer:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator(texts, trainer)
        return cls(tokenizer)

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoding = self.tokenizer.encode(text)
        return list(encoding.ids), [tuple(span) for span in encoding.offsets]

    def to_dict(self) -> dict:
        return {"kind": "bpe", "json": self.tokenizer.to_str()}


def tokenizer_from_dict(data: dict) -> ByteTokenizer | BPETokenizer:
    if data.get("kind") == "byte":
        return ByteTokenizer()
    if data.get("kind") == "bpe":
        from tokenizers import Tokenizer

        return BPETokenizer(Tokenizer.from_str(data["json"]))
    raise ValueError(f"unknown tokenizer kind {data.get('kind')!r}")


# -- training ----------------------------------------------------------------------------------

class TrainParams(MethodParams):
    """Train a small transformer or a matched hybrid LM on real text and code."""

    architecture: Literal["transformer", "hybrid"] = Field(
        "hybrid", description="all attention layers, or gated linear recurrence layers with "
                              "attention every attention_every-th layer")
    attention_every: int = Field(4, ge=1, le=12, description=(
        "hybrid: every k-th layer is attention, the rest recurrence (4 = Olmo Hybrid's 3:1)"))
    corpus: Literal["mix", "news", "wiki", "code"] = Field(
        "mix", description="training text: news, Wikipedia, Python standard library, or all")
    max_chars: int = Field(800_000, ge=1_000, le=20_000_000,
                           description="training characters per source corpus")
    tokenizer: Literal["bpe", "byte"] = Field("bpe", description="byte-level BPE or raw bytes")
    vocab_size: int = Field(1024, ge=257, le=32_000, description="BPE vocabulary size")
    d_model: int = Field(128, ge=16, le=1024, description="model width")
    n_layers: int = Field(4, ge=1, le=24, description="layers")
    n_heads: int = Field(4, ge=1, le=32, description="heads per mixer")
    context: int = Field(128, ge=8, le=2048, description="training context length (tokens)")
    batch_size: int = Field(8, ge=1, le=512, description="sequences per step")
    steps: int = Field(1500, ge=1, le=1_000_000, description="training steps")
    lr: float = Field(3e-3, gt=0, le=1.0, description="peak AdamW learning rate (cosine decay)")
    eval_every: int = Field(100, ge=1, le=100_000, description="held-out loss every k steps")

    @model_validator(mode="after")
    def _check_shape(self) -> TrainParams:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        return self

    @property
    def mixers(self) -> str:
        from engine.models.hybrid_lm import hybrid_mixers

        if self.architecture == "transformer":
            return "a" * self.n_layers
        return hybrid_mixers(self.n_layers, self.attention_every)


@dataclass
class TokenData:
    tokenizer: ByteTokenizer | BPETokenizer
    train: np.ndarray  # token ids of the training documents, joined
    held_out: np.ndarray


def prepare_data(p: TrainParams, max_docs: int | None = None) -> TokenData:
    """Tokenizer trained on the training documents only; ids of both splits."""
    train_docs, held_docs = split_corpus(p.corpus, p.max_chars, max_docs)
    texts = [d.text for d in train_docs]
    tokenizer = BPETokenizer.train(texts, p.vocab_size) if p.tokenizer == "bpe" \
        else ByteTokenizer()
    train = np.asarray(tokenizer.encode("\n\n".join(texts))[0], dtype=np.int64)
    held = join_documents(held_docs, 20_000).text
    return TokenData(tokenizer, train, np.asarray(tokenizer.encode(held)[0], dtype=np.int64))


def lm_config(p: TrainParams, vocab_size: int) -> Any:
    from engine.models.hybrid_lm import HybridLMConfig

    return HybridLMConfig(vocab_size=vocab_size, mixers=p.mixers, d_model=p.d_model,
                          n_heads=p.n_heads, max_len=p.context)


def train_lm(p: TrainParams, data: TokenData, seed: int, check_cancelled: Callable[[], None],
             on_progress: Callable[[int, dict[str, float]], None]) -> tuple[Any, list[float]]:
    """AdamW on random windows of the training ids; the batch stream depends on the seed only,
    so a transformer and a hybrid trained with one seed see the same data in the same order."""
    import torch
    from torch.nn import functional as F

    from engine.models.hybrid_lm import HybridLM

    if len(data.train) <= p.context + 1:
        raise ValueError(f"only {len(data.train)} training tokens for a context of {p.context}: "
                         "raise max_chars")
    torch.manual_seed(seed)
    model = HybridLM(lm_config(p, data.tokenizer.vocab_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=0.1,
                                  betas=(0.9, 0.95))
    rng = np.random.default_rng(seed)
    train = torch.from_numpy(data.train)
    losses, warmup = [], max(1, min(100, p.steps // 10))
    for step in range(1, p.steps + 1):
        check_cancelled()
        starts = torch.from_numpy(rng.integers(0, len(train) - p.context - 1, p.batch_size))
        window = torch.stack([train[s: s + p.context + 1] for s in starts.tolist()])
        lr = p.lr * min(1.0, step / warmup) * 0.5 * (1 + math.cos(math.pi * step / p.steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        metrics = {"loss": float(np.mean(losses[-10:]))}
        if step % p.eval_every == 0 or step == p.steps:
            metrics["held_out_loss"] = held_out_loss(model, data.held_out, p.context)
        if step % 10 == 0 or "held_out_loss" in metrics:
            on_progress(step, metrics)
    return model, losses


def held_out_loss(model: Any, ids: np.ndarray, context: int, max_windows: int = 32) -> float:
    """Mean next-token loss over up to ``max_windows`` consecutive held-out windows."""
    import torch
    from torch.nn import functional as F

    count = min(max_windows, (len(ids) - 1) // context)
    if count < 1:
        return math.nan
    chunk = torch.from_numpy(ids[: count * context + 1])
    inputs = chunk[:-1].view(count, context)
    targets = chunk[1:].view(count, context)
    model.eval()
    with torch.no_grad():
        logits = model(inputs)
    model.train()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item()


def run_train(ctx: JobContext, params: TrainParams, inputs: dict) -> dict:
    ctx.log(f"loading {params.corpus} text and training the {params.tokenizer} tokenizer")
    data = prepare_data(params)
    ctx.log(f"{len(data.train):,} training tokens, {len(data.held_out):,} held-out tokens, "
            f"vocabulary {data.tokenizer.vocab_size}, mixers {params.mixers}")
    model, losses = train_lm(params, data, ctx.seed, ctx.check_cancelled,
                             lambda step, m: ctx.progress(step, params.steps, **m))
    final = held_out_loss(model, data.held_out, params.context)
    ctx.log(f"{model.n_params():,} parameters; held-out loss {final:.3f} nats/token")
    checkpoint = ctx.save_checkpoint(params.architecture, model,
                                     cfg=checkpoint_cfg(model, data, params, ctx.seed))
    curve = plot("training loss", [series(f"{params.architecture} ({params.mixers})",
                                          np.arange(1, len(losses) + 1), losses)],
                 xlabel="step", ylabel="cross-entropy (nats/token)", logy=True)
    return {"checkpoint": checkpoint, "loss_plot": ctx.save_artifact("loss", curve),
            "final": {"held_out_loss": final, "train_loss": float(np.mean(losses[-50:])),
                      "n_params": model.n_params(), "mixers": params.mixers,
                      "train_tokens": int(len(data.train))}}


def checkpoint_cfg(model: Any, data: TokenData, params: TrainParams, seed: int) -> dict:
    return {"model": "hybrid_lm", "config": model.cfg.to_dict(),
            "architecture": params.architecture, "tokenizer": data.tokenizer.to_dict(),
            "params": params.model_dump(), "seed": seed, "n_params": model.n_params()}


# -- scoring: per-token losses -------------------------------------------------------------------

@dataclass
class Scorer:
    """One model ready to score text: its name, tokenizer and a logits function."""

    name: str
    encode: Callable[[str], tuple[list[int], list[tuple[int, int]]]]
    logits: Callable[[Any], Any]  # (B, T) long tensor -> (B, T, V) logits
    max_window: int


def load_scorer(path: str) -> Scorer:
    """Our checkpoint folder (cfg.json + model.safetensors) or a local Hugging Face folder."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder; give a hybrid_tokens checkpoint folder or a "
                         "Hugging Face model folder")
    if (folder / "cfg.json").is_file():
        return _our_scorer(folder)
    if (folder / "config.json").is_file():
        return _hf_scorer(folder)
    raise ValueError(f"{folder}: neither cfg.json (a hybrid_tokens checkpoint) nor config.json "
                     "(a Hugging Face model) is in it")


def _our_scorer(folder: Path) -> Scorer:
    from safetensors.torch import load_file

    from engine.models.hybrid_lm import HybridLM, HybridLMConfig

    try:
        cfg = json.loads((folder / "cfg.json").read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{folder / 'cfg.json'}: not valid JSON ({exc.msg})") from None
    if cfg.get("model") != "hybrid_lm":
        raise ValueError(f"{folder / 'cfg.json'}: not a hybrid_tokens checkpoint "
                         f"(model {cfg.get('model')!r})")
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise ValueError(f"{weights}: missing")
    model = HybridLM(HybridLMConfig(**cfg["config"]))
    try:
        model.load_state_dict(load_file(str(weights)))
    except Exception as exc:  # safetensors and torch raise several types for a bad file
        raise ValueError(f"{weights}: cannot load the weights ({exc})") from None
    model.eval()
    tokenizer = tokenizer_from_dict(cfg["tokenizer"])
    name = f"{cfg.get('architecture', 'model')} ({model.cfg.mixers})"
    return Scorer(name, tokenizer.encode, model, model.cfg.max_len)


def _hf_scorer(folder: Path) -> Scorer:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True).eval()
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{folder}: cannot load a causal LM with transformers ({exc})") from None
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{folder}: its tokenizer is not a fast tokenizer, so token character "
                         "offsets (needed to align two models) are unavailable")

    def encode(text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(encoding["input_ids"]), [tuple(s) for s in encoding["offset_mapping"]]

    config = model.config
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions",
                                                                        1024)
    return Scorer(folder.name, encode, lambda ids: model(input_ids=ids).logits, int(limit))


def token_losses(scorer: Scorer, ids: list[int], window: int,
                 check_cancelled: Callable[[], None] = lambda: None,
                 batch_size: int = 16) -> np.ndarray:
    """Next-token loss of every token (NaN for the first), scored in windows of ``window``
    tokens overlapping by half, each token scored in the window where it has the most context
    (at least ``window - window // 2`` tokens of it, except at the start)."""
    import torch

    window = max(2, min(window, scorer.max_window))
    stride = max(1, window // 2)
    ids_tensor = torch.as_tensor(ids, dtype=torch.long)
    n = len(ids)
    losses = np.full(n, np.nan)
    starts = [0]
    while starts[-1] + window < n:
        starts.append(starts[-1] + stride)
    for first in range(0, len(starts), batch_size):
        check_cancelled()
        group = starts[first: first + batch_size]
        for length in sorted({min(window, n - s) for s in group}):
            batch = [s for s in group if min(window, n - s) == length]
            if length < 2:
                continue
            inputs = torch.stack([ids_tensor[s: s + length] for s in batch])
            with torch.no_grad():
                logp = torch.log_softmax(scorer.logits(inputs).float(), dim=-1)
            nll = -logp[:, :-1].gather(-1, inputs[:, 1:, None])[..., 0].numpy()
            for row, s in enumerate(batch):
                keep_from = 1 if s == 0 else window - stride
                losses[s + keep_from: s + length] = nll[row, keep_from - 1:]
    return losses


# -- alignment and categories -------------------------------------------------------------------

@dataclass
class Aligned:
    """Units of analysis (tokens or words) with both models' losses, shape (2, N)."""

    kind: Literal["token", "word"]
    spans: list[tuple[int, int]]
    losses: np.ndarray

    @property
    def gap(self) -> np.ndarray:
        return self.losses[0] - self.losses[1]


def align(text: str, spans_a: list, losses_a: np.ndarray, spans_b: list,
          losses_b: np.ndarray) -> Aligned:
    """Token units when both tokenizations agree, else words/punctuation (module docstring)."""
    if list(spans_a) == list(spans_b):
        return Aligned("token", [tuple(s) for s in spans_a], np.vstack([losses_a, losses_b]))
    ends = [m.end() for m in UNIT.finditer(text)]
    units = list(zip([0, *ends[:-1]], ends, strict=True))  # a unit keeps the space before it
    losses = np.zeros((2, len(units)))
    filled = np.zeros((2, len(units)), dtype=bool)
    for row, (spans, values) in enumerate(((spans_a, losses_a), (spans_b, losses_b))):
        for (start, end), value in zip(spans, values, strict=True):
            if end <= start:
                continue
            unit = bisect.bisect_right(ends, end - 1)
            if unit < len(units):
                losses[row, unit] += value  # NaN (the first token) makes the unit NaN
                filled[row, unit] = True
    losses[~filled] = np.nan
    return Aligned("word", units, losses)


@dataclass
class Categories:
    """Per unit: its text, domain and category labels (None = not in that grouping)."""

    texts: list[str]
    domain: list[str]
    word_class: list[str | None]  # "content" | "function" (prose words only)
    delimiter: list[str | None]  # "opening" | "closing"
    repeated: list[bool | None]  # n-gram ending here seen before in context
    log_frequency: np.ndarray = field(default_factory=lambda: np.zeros(0))


def word_class(word: str) -> str:
    return "function" if word.lower() in CLOSED_CLASS else "content"


def delimiter_kind(token: str) -> str | None:
    """"opening" / "closing" for a punctuation-only token with brackets of one kind only."""
    core = token.strip()
    if not core or any(ch.isalnum() or ch == "_" for ch in core):
        return None
    opens, closes = any(ch in OPENING for ch in core), any(ch in CLOSING for ch in core)
    if opens == closes:
        return None
    return "opening" if opens else "closing"


def categorise(eval_text: EvalText, spans: list[tuple[int, int]], ngram: int, context: int
               ) -> Categories:
    text = eval_text.text
    word_of_char = np.full(len(text) + 1, -1, dtype=np.int64)
    words = list(WORD.finditer(text))
    for index, match in enumerate(words):
        word_of_char[match.start(): match.end()] = index
    texts, domains, classes, delimiters, repeated = [], [], [], [], []
    seen: dict[tuple[int, tuple[str, ...]], int] = {}
    previous_doc = -1
    history: list[str] = []
    for position, (start, end) in enumerate(spans):
        piece = text[start:end]
        doc = eval_text.document_at(start)
        if doc != previous_doc:
            history, previous_doc = [], doc
        domain = eval_text.domains[doc]
        last_char = start + len(piece.rstrip()) - 1
        word = word_of_char[last_char] if piece.strip() else -1
        texts.append(piece)
        domains.append(domain)
        classes.append(word_class(words[word].group()) if word >= 0 and domain == "prose"
                       else None)
        delimiters.append(delimiter_kind(piece))
        history.append(piece)
        if len(history) >= ngram:
            key = (doc, tuple(history[-ngram:]))
            earlier = seen.get(key)
            repeated.append(earlier is not None and position - earlier < context)
            seen[key] = position
        else:
            repeated.append(None)
    counts = Counter(texts)
    log_frequency = np.log(np.array([counts[t] for t in texts], dtype=float))
    return Categories(texts, domains, classes, delimiters, repeated, log_frequency)


def category_masks(cats: Categories) -> dict[str, np.ndarray]:
    """The groups the paper compares, as boolean masks over units."""
    cls = np.array([c or "" for c in cats.word_class])
    delim = np.array([d or "" for d in cats.delimiter])
    domain = np.array(cats.domain)
    rep = np.array([-1 if r is None else int(r) for r in cats.repeated])
    return {
        "all": np.ones(len(cls), dtype=bool),
        "content (prose)": cls == "content",
        "function (prose)": cls == "function",
        "opening delimiter": delim == "opening",
        "closing delimiter": delim == "closing",
        "opening (prose)": (delim == "opening") & (domain == "prose"),
        "closing (prose)": (delim == "closing") & (domain == "prose"),
        "opening (code)": (delim == "opening") & (domain == "code"),
        "closing (code)": (delim == "closing") & (domain == "code"),
        "first-occurrence n-gram": rep == 0,
        "repeated n-gram": rep == 1,
    }


# -- statistics ------------------------------------------------------------------------------

def _resample_means(values: np.ndarray, n_boot: int, rng: np.random.Generator,
                    chunk: int = 64) -> np.ndarray:
    means = np.empty(n_boot)
    for first in range(0, n_boot, chunk):
        count = min(chunk, n_boot - first)
        means[first: first + count] = values[rng.integers(0, len(values),
                                                          (count, len(values)))].mean(1)
    return means


def bootstrap_mean(values: np.ndarray, n_boot: int, rng: np.random.Generator,
                   level: float = 0.95) -> tuple[float, float, float]:
    """(mean, lower, upper): percentile bootstrap interval of the mean (units resampled)."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return math.nan, math.nan, math.nan
    means = _resample_means(values, n_boot, rng)
    tail = (1 - level) / 2
    return float(values.mean()), float(np.quantile(means, tail)), float(np.quantile(means,
                                                                                    1 - tail))


def bootstrap_difference(a: np.ndarray, b: np.ndarray, n_boot: int, rng: np.random.Generator,
                         level: float = 0.95) -> tuple[float, float, float]:
    """(mean(a) - mean(b), lower, upper), the two groups resampled independently."""
    if len(a) == 0 or len(b) == 0:
        return math.nan, math.nan, math.nan
    diffs = _resample_means(np.asarray(a, float), n_boot, rng) - _resample_means(
        np.asarray(b, float), n_boot, rng)
    tail = (1 - level) / 2
    return (float(np.mean(a) - np.mean(b)), float(np.quantile(diffs, tail)),
            float(np.quantile(diffs, 1 - tail)))


REGRESSORS = ("content", "function", "opening", "closing", "repeated n-gram", "code",
              "log frequency")


def gap_regression(gap: np.ndarray, cats: Categories) -> list[list[Any]]:
    """OLS of the gap on category indicators and log frequency, HC1 robust standard errors.
    Rows: [term, coefficient, standard error, lower 95%, upper 95%]."""
    masks = category_masks(cats)
    columns = [np.ones(len(gap)), masks["content (prose)"], masks["function (prose)"],
               masks["opening delimiter"], masks["closing delimiter"],
               masks["repeated n-gram"], np.array(cats.domain) == "code", cats.log_frequency]
    X = np.column_stack(columns).astype(float)
    keep = np.isfinite(gap)
    X, y = X[keep], gap[keep]
    used = X.any(axis=0)  # drop a category that never occurs
    coef = np.full(X.shape[1], np.nan)
    se = np.full(X.shape[1], np.nan)
    if len(y) > used.sum():
        Xu = X[:, used]
        beta, *_ = np.linalg.lstsq(Xu, y, rcond=None)
        residual = y - Xu @ beta
        bread = np.linalg.pinv(Xu.T @ Xu)
        meat = (Xu * residual[:, None] ** 2).T @ Xu
        cov = bread @ meat @ bread * len(y) / (len(y) - Xu.shape[1])
        coef[used], se[used] = beta, np.sqrt(np.maximum(np.diag(cov), 0))
    return [[term, coef[i], se[i], coef[i] - 1.96 * se[i], coef[i] + 1.96 * se[i]]
            for i, term in enumerate(("intercept", *REGRESSORS))]


# -- comparison ------------------------------------------------------------------------------

class CompareParams(MethodParams):
    """Per-token losses of two causal LMs on one text, stratified like the paper."""

    corpus: Literal["mix", "news", "wiki", "code"] = Field(
        "mix", description="held-out documents to score when no text input is given")
    eval_chars: int = Field(40_000, ge=200, le=5_000_000,
                            description="characters of held-out text per domain")
    window: int = Field(128, ge=4, le=8192, description="scoring context window (tokens)")
    ngram: int = Field(4, ge=1, le=16, description="n of the repeated n-gram test")
    n_boot: int = Field(1000, ge=50, le=100_000, description="bootstrap resamples")
    heat_units: int = Field(4000, ge=10, le=20_000, description="units in the coloured text")
    seed_bootstrap: int = Field(0, ge=0, description="seed of the bootstrap resampling")


@dataclass
class Comparison:
    names: tuple[str, str]
    aligned: Aligned
    cats: Categories
    groups: dict[str, tuple[int, float, float, float]]  # name -> (n, mean, lo, hi)
    contrasts: dict[str, tuple[float, float, float]]
    regression: list[list[Any]]


def compare_models(scorers: tuple[Scorer, Scorer], eval_text: EvalText, p: CompareParams,
                   check_cancelled: Callable[[], None] = lambda: None,
                   log: Callable[[str], None] = lambda message: None) -> Comparison:
    per_model = []
    for scorer in scorers:
        ids, spans = scorer.encode(eval_text.text)
        if len(ids) < 2:
            raise ValueError(f"{scorer.name}: the text holds fewer than two tokens")
        per_model.append((spans, token_losses(scorer, ids, p.window, check_cancelled)))
        log(f"{scorer.name}: {len(ids):,} tokens, mean loss {np.nanmean(per_model[-1][1]):.3f}")
    aligned = align(eval_text.text, per_model[0][0], per_model[0][1], per_model[1][0],
                    per_model[1][1])
    keep = np.isfinite(aligned.losses).all(axis=0)
    aligned = Aligned(aligned.kind, [s for s, k in zip(aligned.spans, keep, strict=True) if k],
                      aligned.losses[:, keep])
    window = min(p.window, *(s.max_window for s in scorers))
    cats = categorise(eval_text, aligned.spans, p.ngram, window)
    rng = np.random.default_rng(p.seed_bootstrap)
    gap = aligned.gap
    masks = category_masks(cats)
    groups = {name: (int(mask.sum()), *bootstrap_mean(gap[mask], p.n_boot, rng))
              for name, mask in masks.items()}
    contrasts = {
        "content - function": bootstrap_difference(
            gap[masks["content (prose)"]], gap[masks["function (prose)"]], p.n_boot, rng),
        "opening - closing": bootstrap_difference(
            gap[masks["opening delimiter"]], gap[masks["closing delimiter"]], p.n_boot, rng),
        "repeated - first": bootstrap_difference(
            gap[masks["repeated n-gram"]], gap[masks["first-occurrence n-gram"]], p.n_boot,
            rng),
    }
    return Comparison((scorers[0].name, scorers[1].name), aligned, cats, groups, contrasts,
                      gap_regression(gap, cats))


def save_comparison(ctx: JobContext, result: Comparison, p: CompareParams) -> dict:
    """The coloured text, the category bars, the tables and the per-unit arrays."""
    name_a, name_b = result.names
    gap = result.aligned.gap
    labels = [name for name in result.groups if name != "all"]
    positions = np.arange(len(labels))
    stats = np.array([result.groups[name][1:] for name in labels])
    reported = [(labels.index(name), float(value.lstrip("~")))
                for name, value in PAPER_GAPS.items() if value.startswith("~0.")]
    bars = plot("loss gap by category (95% bootstrap intervals)",
                [series("ours", positions, stats[:, 0], style="bar",
                        interval=(stats[:, 1], stats[:, 2])),
                 series("paper: Olmo 3 - Olmo Hybrid", [x for x, _ in reported],
                        [y for _, y in reported], style="scatter")],
                ylabel=f"{name_a} - {name_b} (nats per {result.aligned.kind})",
                hlines=[{"y": result.groups["all"][1], "name": "all units"}],
                xticks=list(zip(positions, labels, strict=True)))
    rows = [[name, n, mean, lo, hi, PAPER_GAPS.get(name, "")]
            for name, (n, mean, lo, hi) in result.groups.items()]
    rows += [[f"contrast: {name}", "", diff, lo, hi, ""] for name, (diff, lo, hi)
             in result.contrasts.items()]
    heat = heat_artifact(result, p.heat_units)
    return {
        "gap_text": ctx.save_artifact("gap_text", heat, kind="json"),
        "category_plot": ctx.save_artifact("gap_by_category", bars),
        "categories": ctx.save_artifact("categories", {
            "columns": ["category", "units", "mean gap (ours)", "lower 95%", "upper 95%",
                        "paper (Olmo 3 - Olmo Hybrid)"], "rows": rows}),
        "regression": ctx.save_artifact("regression", {
            "columns": ["term", "coefficient", "std. error (HC1)", "lower 95%", "upper 95%"],
            "rows": result.regression}),
        "losses": ctx.save_artifact("unit_losses", result.aligned.losses.astype(np.float32)),
        "summary": {"unit": result.aligned.kind, "units": int(len(gap)),
                    "model_a": name_a, "model_b": name_b,
                    "mean_loss_a": float(result.aligned.losses[0].mean()),
                    "mean_loss_b": float(result.aligned.losses[1].mean()),
                    "gaps": {k: v[1] for k, v in result.groups.items()},
                    "contrasts": {k: list(v) for k, v in result.contrasts.items()}},
    }


def heat_artifact(result: Comparison, limit: int) -> dict:
    """The first units of each domain (prose, then code), ``limit`` in all, as coloured text."""
    name_a, name_b = result.names
    cats, losses, gap = result.cats, result.aligned.losses, result.aligned.gap
    domains = list(dict.fromkeys(cats.domain))
    tokens, values, details = [], [], []
    for domain in domains:
        if tokens:
            tokens.append("\n\n[...]\n\n")
            values.append(0.0)
            details.append(f"{domain} text follows")
        shown = [i for i, d in enumerate(cats.domain) if d == domain][: limit // len(domains)]
        for i in shown:
            labels = [domain, cats.word_class[i], cats.delimiter[i] and
                      f"{cats.delimiter[i]} delimiter",
                      None if cats.repeated[i] is None else
                      ("repeated n-gram" if cats.repeated[i] else "first n-gram")]
            tokens.append(cats.texts[i])
            values.append(float(gap[i]))
            details.append(f"{name_a}: {losses[0, i]:.3f} nats; {name_b}: {losses[1, i]:.3f} "
                           "nats; " + ", ".join(label for label in labels if label))
    return {"view": "token_heat", "label": f"loss gap ({name_a} - {name_b}, nats)",
            "symmetric": True, "title": f"where {name_b} beats {name_a} (red) and loses (blue)",
            "tokens": tokens, "values": values, "details": details}


def run_compare(ctx: JobContext, params: CompareParams, inputs: dict) -> dict:
    for name in ("model_a", "model_b"):
        if name not in inputs:
            raise ValueError(f"input {name} is missing: give a hybrid_tokens checkpoint folder "
                             "or a local Hugging Face causal-LM folder")
    eval_text = (read_text_file(inputs["text"]) if "text" in inputs else
                 join_documents(split_corpus(params.corpus, 0)[1], params.eval_chars))
    scorers = (load_scorer(inputs["model_a"]), load_scorer(inputs["model_b"]))
    ctx.progress(0, 2)
    result = compare_models(scorers, eval_text, params, ctx.check_cancelled, ctx.log)
    ctx.progress(2, 2, units=len(result.aligned.spans),
                 mean_gap=result.groups["all"][1])
    return save_comparison(ctx, result, params)


# -- reproduce ---------------------------------------------------------------------------------

SMOKE_DOCS = 30  # documents read per source in smoke mode


class HybridReproduceParams(ReproduceParams):
    steps: int = Field(1000, ge=1, le=100_000, description="training steps per model")


def reproduce_train_params(smoke: bool, steps: int, architecture: str) -> TrainParams:
    if smoke:
        return TrainParams(architecture=architecture, max_chars=20_000, vocab_size=300,
                           d_model=32, n_layers=2, attention_every=2, n_heads=2, context=32,
                           batch_size=4, steps=15, eval_every=15)
    return TrainParams(architecture=architecture, steps=steps)


def run_reproduce(ctx: JobContext, params: HybridReproduceParams, inputs: dict) -> dict:
    started = time.monotonic()
    base = reproduce_train_params(params.smoke, params.steps, "transformer")
    max_docs = SMOKE_DOCS if params.smoke else None
    data = prepare_data(base, max_docs)
    ctx.log(f"{len(data.train):,} training tokens (news + wiki + code), vocabulary "
            f"{data.tokenizer.vocab_size}")
    models, outputs, finals = {}, {}, {}
    for index, architecture in enumerate(("transformer", "hybrid")):
        p = reproduce_train_params(params.smoke, params.steps, architecture)
        offset, total = index * p.steps, 2 * p.steps + 1
        model, _ = train_lm(p, data, ctx.seed, ctx.check_cancelled, lambda step, m, a=(
            architecture), o=offset, t=total: ctx.progress(
                o + step, t, **{f"{a}_{k}": v for k, v in m.items()}))
        models[architecture] = model
        finals[architecture] = held_out_loss(model, data.held_out, p.context)
        ctx.log(f"{architecture} ({p.mixers}): {model.n_params():,} parameters, held-out loss "
                f"{finals[architecture]:.3f}")
        outputs[f"checkpoint_{architecture}"] = ctx.save_checkpoint(
            architecture, model, cfg=checkpoint_cfg(model, data, p, ctx.seed))
    compare = CompareParams(eval_chars=2_000 if params.smoke else 40_000,
                            window=base.context, n_boot=200 if params.smoke else 1000)
    scorers = tuple(Scorer(f"{a} ({m.cfg.mixers})", data.tokenizer.encode, m.eval(),
                           m.cfg.max_len) for a, m in models.items())
    result = compare_models(scorers, join_documents(split_corpus(base.corpus, 0, max_docs)[1],
                                                    compare.eval_chars),
                            compare, ctx.check_cancelled, ctx.log)
    ctx.progress(2 * base.steps + 1, 2 * base.steps + 1, mean_gap=result.groups["all"][1])
    outputs.update(save_comparison(ctx, result, compare))
    claim = reproduce_claim(result, finals, params, time.monotonic() - started, ctx.seed)
    claim_dict = claim.to_dict()
    ctx.save_artifact("claim", claim_dict, kind="claim")
    return {"claim": claim_dict, **outputs}


def reproduce_claim(result: Comparison, finals: dict[str, float],
                    params: HybridReproduceParams, wall_s: float, seed: int) -> Claim:
    g, c = result.groups, result.contrasts

    def described(name: str) -> str:
        n, mean, lo, hi = g[name]
        return f"{name}: {mean:+.4f} [{lo:+.4f}, {hi:+.4f}] (n={n})"

    cf, oc, rf = c["content - function"], c["opening - closing"], c["repeated - first"]
    criteria = [
        Criterion("gap(content) > gap(function): lower 95% bound of the difference", cf[1], 0.0,
                  ">", paper="content ~0.04 nats vs function ~0.02 nats (difference ~0.02)",
                  note=f"difference {cf[0]:+.4f}; " + described("content (prose)") + "; "
                       + described("function (prose)")),
        Criterion("gap(opening) > gap(closing): lower 95% bound of the difference", oc[1], 0.0,
                  ">", paper="the gap shrinks on closing brackets but not opening ones",
                  note=f"difference {oc[0]:+.4f}; " + described("opening delimiter") + "; "
                       + described("closing delimiter")),
        Criterion("gap(repeated n-gram) < gap(first occurrence): upper 95% bound of the "
                  "difference", rf[2], 0.0, "<",
                  paper="the hybrid advantage vanishes on repeated n-grams",
                  note=f"difference {rf[0]:+.4f}; " + described("repeated n-gram") + "; "
                       + described("first-occurrence n-gram")),
    ]
    t, h = (reproduce_train_params(params.smoke, params.steps, a) for a in ("transformer",
                                                                            "hybrid"))
    notes = (
        f"Both models trained from scratch with seed {seed} on the same batches: up to "
        f"{t.max_chars:,} characters each of gensim's Lee news corpus, its shortened Wikipedia "
        "dump and the Python standard library (every tenth document held out), byte-level BPE "
        f"with {t.vocab_size} tokens, width {t.d_model}, {t.n_layers} layers, context "
        f"{t.context}, {t.steps} AdamW steps of {t.batch_size} sequences. Transformer = "
        f"'{t.mixers}', hybrid = '{h.mixers}' (a = attention, r = gated linear recurrence). "
        "Held-out loss: transformer "
        f"{finals['transformer']:.3f}, hybrid {finals['hybrid']:.3f} nats/token. Gap = "
        f"transformer loss - hybrid loss on held-out text, per token; overall "
        f"{g['all'][1]:+.4f}. Content/function from a closed-class word list (no offline POS "
        "tagger installed); n-gram n = 4; intervals: percentile bootstrap over tokens "
        "(tokens treated as independent, so intervals are narrower than a by-document "
        "bootstrap would give). Prose/code delimiter gaps: "
        + "; ".join(described(n) for n in ("opening (prose)", "closing (prose)",
                                           "opening (code)", "closing (code)")) + ".")
    return Claim(paper=PAPER, statement=(
        "A hybrid's per-token advantage over a transformer is larger on content words than "
        "function words, larger on opening than closing delimiters, and smaller on repeated "
        "n-grams than on first occurrences."), criteria=criteria, seeds=[seed], wall_s=wall_s,
        smoke=params.smoke, notes=notes)


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="hybrid_tokens.train",
        title="Train a small transformer or matched hybrid LM on real text",
        paper=PAPER,
        params=TrainParams,
        run=run_train,
        outputs={"checkpoint": "checkpoint", "loss_plot": "plot", "final": "json"},
        resources=Resources(cpus=1, memory_gb=2),
        description=("Trains a byte-level BPE tokenizer and a small causal LM (all attention, "
                     "or gated linear recurrence with periodic attention) on news, Wikipedia "
                     "and Python code shipped with installed packages."),
    ),
    MethodSpec(
        id="hybrid_tokens.compare",
        title="Token-level loss gap between two language models",
        paper=PAPER,
        params=CompareParams,
        run=run_compare,
        inputs={"model_a": "checkpoint", "model_b": "checkpoint", "text": "text"},
        outputs={"gap_text": "json", "category_plot": "plot", "categories": "table",
                 "regression": "table", "losses": "array", "summary": "json"},
        resources=Resources(cpus=1, memory_gb=2),
        description=("Scores the same text with two causal LMs (hybrid_tokens checkpoints or "
                     "local Hugging Face folders), aligns their per-token losses and reports "
                     "the gap (model_a minus model_b) on content vs function words, opening "
                     "vs closing delimiters and first vs repeated n-grams, with bootstrap "
                     "intervals, a frequency-controlled regression and the coloured text."),
    ),
    reproduce_spec(PAPER, "Hybrid vs transformer: where the token-level gains sit",
                   run_reproduce, params=HybridReproduceParams,
                   resources=Resources(cpus=1, memory_gb=2)),
]
