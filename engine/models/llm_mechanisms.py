"""Mechanisms elicited from a language model behind an OpenAI-compatible endpoint.

For each variable of the fairness model after X, and each configuration of the variables before
it (X, then Z, then W, then Y), the model is asked for the distribution of the variable given
that configuration, as a JSON object; the answers form the conditional probability tables of a
``DiscreteModel``. The client speaks ``POST {base_url}/chat/completions`` with urllib; the API
key goes only into the Authorization header, never into errors, logs or files.

Local generators need nothing else: llama.cpp's ``llama-server`` (``http://127.0.0.1:8080/v1``),
vLLM (``http://127.0.0.1:8000/v1``) and Ollama (``http://127.0.0.1:11434/v1``) serve the same
OpenAI-compatible API, so the same client talks to a hosted model or one on this machine. There
is no default URL; an endpoint that cannot be reached raises ``EndpointError`` naming the URL.
"""

from __future__ import annotations

import itertools
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.models.fairness_scm import DiscreteModel

SYSTEM_PROMPT = ("You answer questions about a population with a probability distribution. "
                 "Reply with one JSON object mapping each listed value to its probability, and "
                 "nothing else.")


class EndpointError(RuntimeError):
    """The endpoint failed or answered something that is not a distribution."""


@dataclass
class ChatClient:
    base_url: str  # e.g. http://127.0.0.1:11434/v1 (Ollama), :8080/v1 (llama.cpp), :8000/v1 (vLLM)
    model: str
    api_key: str = ""
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise EndpointError(f"base_url {self.base_url!r} is not an http(s) URL of an "
                                "OpenAI-compatible endpoint")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def chat(self, messages: list[dict], temperature: float = 0.0) -> str:
        """The first choice's message content."""
        body = json.dumps({"model": self.model, "messages": messages,
                           "temperature": temperature}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:200]
            raise EndpointError(f"{self.url}: HTTP {exc.code} {exc.reason}: {detail}") from None
        except urllib.error.URLError as exc:
            raise EndpointError(f"{self.url}: cannot connect ({exc.reason}); is the server "
                                "running and is base_url right (e.g. http://127.0.0.1:11434/v1 "
                                "for Ollama)?") from None
        except TimeoutError:
            raise EndpointError(f"{self.url}: no answer within {self.timeout_s:g} s") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise EndpointError(f"{self.url}: bad response ({type(exc).__name__})") from None
        try:
            return str(payload["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError):
            raise EndpointError(f"{self.url}: no choices[0].message.content in the reply"
                                ) from None


def question(description: str, variable: str, values: list[str],
             given: list[tuple[str, str]]) -> str:
    """The user prompt asking for P(variable | given)."""
    condition = "; ".join(f"{name} = {value}" for name, value in given)
    example = json.dumps({value: round(1 / len(values), 3) for value in values})
    return (f"Population: {description}.\n"
            f"Consider a person from this population with: {condition}.\n"
            f"Variable: {variable}\n"
            f"Values: {json.dumps(values)}\n"
            f"What is the probability distribution of {variable} for such a person? Reply with "
            f"one JSON object mapping each value to its probability, like {example}.")


def parse_distribution(text: str, values: list[str]) -> np.ndarray:
    """Probabilities over ``values`` from a reply; missing values get 0; normalised."""
    match = re.search(r"\{.*\}", text, flags=re.DOTALL)
    if match is None:
        raise ValueError("no JSON object in the reply")
    answer = json.loads(match.group(0))
    if not isinstance(answer, dict):
        raise ValueError("the JSON is not an object")
    lookup = {str(key).strip().lower(): value for key, value in answer.items()}
    probs = np.array([float(lookup.get(v.strip().lower(), 0.0)) for v in values])
    if not np.all(np.isfinite(probs)) or (probs < 0).any() or probs.sum() <= 0:
        raise ValueError("the values are not non-negative numbers with a positive sum")
    return probs / probs.sum()


def elicit_model(client: ChatClient, names: list[str], roles: list[str],
                 labels: list[list[str]], p_x: np.ndarray, description: str,
                 answers_per_query: int = 1, temperature: float = 0.0, retries: int = 2,
                 max_queries: int = 400, check_cancelled: Callable[[], None] = lambda: None,
                 on_query: Callable[[int, int], None] | None = None) -> DiscreteModel:
    """CPTs of every variable after X from the endpoint; X's own distribution is ``p_x``.

    ``labels[j]`` are the human-readable values of variable j (X: [x0, x1]; Y: [not, positive]).
    ``answers_per_query`` answers are averaged (sample them with temperature > 0).
    """
    cards = [len(v) for v in labels]
    queries = sum(int(np.prod(cards[:j])) for j in range(1, len(cards)))
    if queries > max_queries:
        raise ValueError(f"eliciting every conditional needs {queries} queries (> max_queries "
                         f"{max_queries}); use fewer or coarser z/w columns, fewer bins, or "
                         "raise max_queries")
    cpts = [np.asarray(p_x, dtype=np.float64)]
    done = 0
    for j in range(1, len(cards)):
        table = np.zeros(tuple(cards[: j + 1]))
        for parents in itertools.product(*[range(c) for c in cards[:j]]):
            check_cancelled()
            given = [(names[k], labels[k][code]) for k, code in enumerate(parents)]
            prompt = question(description, names[j], labels[j], given)
            answers = [_ask(client, prompt, names[j], labels[j], temperature, retries)
                       for _ in range(answers_per_query)]
            table[parents] = np.mean(answers, axis=0)
            done += 1
            if on_query is not None:
                on_query(done, queries)
        cpts.append(table)
    return DiscreteModel(list(names), list(roles), cards, cpts)


def _ask(client: ChatClient, prompt: str, variable: str, values: list[str], temperature: float,
         retries: int) -> np.ndarray:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
    problem = ""
    for _ in range(retries + 1):
        reply = client.chat(messages, temperature)
        try:
            return parse_distribution(reply, values)
        except (ValueError, json.JSONDecodeError) as exc:
            problem = f"{exc}; reply began {reply[:120]!r}"
    raise EndpointError(f"{client.url}: no usable distribution of {variable!r} after "
                        f"{retries + 1} tries ({problem})")
