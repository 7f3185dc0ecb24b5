"""Black-box text generators for discriminative factorization: models we can only query.

Two kinds answer a query (a text prompt) with a text response:

* ``CharNGramLM``: a character n-gram language model trained here on a slice of one corpus
  (``engine.corpora``: news, wiki, code). Models trained on different corpora form the classes
  of the audit; models of one class differ in their slice, so the class is a property of the
  training data, not of a single model. Cheap on a CPU: counting and sampling, no gradients.
* ``EndpointGenerator``: a model behind an OpenAI-compatible chat endpoint, made distinct by its
  system prompt. It reuses ``engine.models.llm_mechanisms.ChatClient`` (the API key goes only
  into the Authorization header) and adds retries with back-off for transient failures.

Every generator is seeded per (model, query), so the same query gives the same response.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.models.llm_mechanisms import ChatClient, EndpointError

__all__ = ["CharNGramLM", "EndpointError", "EndpointGenerator"]


@dataclass
class CharNGramLM:
    """P(next char | previous ``order - 1`` chars) with back-off to shorter contexts."""

    order: int = 4
    name: str = ""
    tables: list[dict[str, tuple[str, np.ndarray]]] = field(default_factory=list)

    def fit(self, text: str) -> CharNGramLM:
        """Count continuations of every context of length 0..order-1 in ``text``."""
        if len(text) <= self.order:
            raise ValueError(f"{self.name or 'n-gram model'}: training text of {len(text)} "
                             f"characters is too short for order {self.order}")
        self.tables = []
        for length in range(self.order):
            counts: dict[str, Counter] = defaultdict(Counter)
            for i in range(length, len(text)):
                counts[text[i - length:i]][text[i]] += 1
            self.tables.append({context: _cumulative(counter)
                                for context, counter in counts.items()})
        return self

    def generate(self, prompt: str, n_chars: int, rng: np.random.Generator,
                 temperature: float = 1.0) -> str:
        """Continue ``prompt`` by ``n_chars`` sampled characters (temperature 0 = greedy)."""
        if not self.tables:
            raise RuntimeError(f"{self.name or 'n-gram model'} is not trained: call fit first")
        text = prompt
        out = []
        for _ in range(n_chars):
            chars, cumulative = self._distribution(text)
            if temperature == 0:
                probs = np.diff(cumulative, prepend=0.0)
                index = int(np.argmax(probs))
            elif temperature == 1:
                index = int(np.searchsorted(cumulative, rng.random() * cumulative[-1],
                                            side="right"))
            else:
                weights = np.diff(cumulative, prepend=0.0) ** (1.0 / temperature)
                index = int(rng.choice(len(chars), p=weights / weights.sum()))
            out.append(chars[min(index, len(chars) - 1)])
            text = text[-(self.order - 1):] + out[-1] if self.order > 1 else ""
        return "".join(out)

    def _distribution(self, text: str) -> tuple[str, np.ndarray]:
        for length in range(min(self.order - 1, len(text)), -1, -1):  # longest seen context
            context = text[len(text) - length:]
            if context in self.tables[length]:
                return self.tables[length][context]
        raise RuntimeError("the empty context is always in the unigram table")


def _cumulative(counter: Counter) -> tuple[str, np.ndarray]:
    chars = "".join(counter)
    return chars, np.cumsum(np.fromiter(counter.values(), dtype=float))


@dataclass
class EndpointGenerator:
    """One black-box model: an endpoint's model with its own system prompt."""

    client: ChatClient
    system_prompt: str
    temperature: float = 0.0
    retries: int = 2
    backoff_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep

    def generate(self, prompt: str) -> str:
        """The reply to ``prompt``; transient failures are retried ``retries`` times."""
        messages = [{"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": prompt}]
        for attempt in range(self.retries + 1):
            try:
                return self.client.chat(messages, temperature=self.temperature)
            except EndpointError as error:
                if attempt == self.retries:
                    raise EndpointError(f"{error} (after {self.retries + 1} attempts)") from None
                self.sleep(self.backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")
