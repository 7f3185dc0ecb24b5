"""Offline text corpora and MiniLM embeddings that several methods build on."""

from __future__ import annotations

import numpy as np
import pytest

from engine import corpora


def test_the_three_corpora_are_real_text():
    news = corpora.load_documents("news")
    assert len(news) == 300 and all(len(doc) > 100 for doc in news)
    wiki = corpora.load_documents("wiki", max_docs=20)
    assert len(wiki) == 20
    assert not any(marker in doc for doc in wiki for marker in ("[[", "{{", "&lt;", "'''"))
    assert wiki[0].startswith("Anarchism")
    code = corpora.load_documents("code", max_docs=50)
    assert len(code) == 50 and sum("def " in doc for doc in code) > 40
    assert corpora.load_documents("code", max_docs=50) == code  # a fixed order


def test_load_text_cuts_at_max_chars_and_unknown_names_are_refused():
    assert len(corpora.load_text("news", max_chars=5000)) == 5000
    with pytest.raises(ValueError, match="unknown corpus 'poems'"):
        corpora.load_documents("poems")


def test_minilm_embeddings_are_normalised_and_meaningful():
    vectors = corpora.embed_texts(["A cat sat on the mat.", "A dog lay on the rug.",
                                   "Stock markets fell sharply on Monday."])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 2] + 0.2
    assert corpora.embed_texts([]).shape == (0, 384)
