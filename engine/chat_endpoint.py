"""A small client for OpenAI-compatible ``/v1/chat/completions`` endpoints (a local server or
a hosted one), made for experiments that must be replayable.

* Every answer is cached on disk, keyed by the request itself (base URL, model, messages,
  temperature, seed, max tokens): a run can be re-scored without calling again, and
  ``offline=True`` refuses to call at all.
* 429, 5xx, timeouts and dropped connections are retried with exponential backoff
  (``Retry-After`` honoured, capped); other errors fail at once. ``ChatError`` says why, naming
  the endpoint, never the key.
* The key comes from the caller (an ``engine.api.Secret`` parameter) or the environment
  (``STUDIO_CHAT_API_KEY``, then ``OPENAI_API_KEY``). It goes into the Authorization header
  and nowhere else: not the cache, not errors, not ``describe()``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.atomic import write_json_atomic

KEY_VARIABLES = ("STUDIO_CHAT_API_KEY", "OPENAI_API_KEY")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0
ERROR_BODY_CHARS = 300


class ChatError(Exception):
    """The endpoint could not answer; the message says which endpoint and why."""


@dataclass(frozen=True)
class EndpointConfig:
    base_url: str                  # e.g. "http://127.0.0.1:8000/v1"
    model: str
    temperature: float = 0.7
    seed: int | None = 0
    max_tokens: int = 256
    timeout_s: float = 60.0
    retries: int = 3               # attempts after the first
    backoff_s: float = 1.0         # first wait; doubles each retry

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True)
class ChatReply:
    text: str
    cached: bool
    attempts: int                  # calls made for this reply (0 when cached)
    finish_reason: str | None = None


def key_from_environment() -> str | None:
    return next((os.environ[name] for name in KEY_VARIABLES if os.environ.get(name)), None)


class ChatClient:
    """``complete(messages) -> ChatReply``; see the module docstring."""

    def __init__(self, config: EndpointConfig, api_key: str | None = None,
                 cache_dir: str | os.PathLike | None = None, offline: bool = False,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self._api_key = api_key or key_from_environment()
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.offline = offline
        self._sleep = sleep
        self.calls = 0
        self.cache_hits = 0

    def describe(self) -> dict:
        """What a run records about its endpoint (no key)."""
        return {**asdict(self.config), "key_set": self._api_key is not None,
                "offline": self.offline}

    def request_body(self, messages: list[dict]) -> dict:
        body = {"model": self.config.model, "messages": messages,
                "temperature": self.config.temperature, "max_tokens": self.config.max_tokens}
        if self.config.seed is not None:
            body["seed"] = self.config.seed
        return body

    def cache_key(self, body: dict) -> str:
        identity = {"url": self.config.url, "body": body}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def complete(self, messages: list[dict]) -> ChatReply:
        body = self.request_body(messages)
        key = self.cache_key(body)
        cached = self._cached(key)
        if cached is not None:
            self.cache_hits += 1
            return ChatReply(cached["text"], True, 0, cached.get("finish_reason"))
        if self.offline:
            raise ChatError(f"{self.config.url}: this request is not in the cache and calls are "
                            "turned off (offline replay)")
        payload, attempts = self._post(body)
        text, finish = _reply_text(payload, self.config.url)
        if self.cache_dir is not None:
            write_json_atomic(self.cache_dir / f"{key}.json",
                              {"request": body, "text": text, "finish_reason": finish,
                               "model": payload.get("model"), "url": self.config.url})
        return ChatReply(text, False, attempts, finish)

    def _cached(self, key: str) -> dict | None:
        if self.cache_dir is None:
            return None
        path = self.cache_dir / f"{key}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None

    def _post(self, body: dict) -> tuple[dict, int]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        url = self.config.url
        last = ""
        for attempt in range(self.config.retries + 1):
            self.calls += 1
            wait = self.config.backoff_s * 2**attempt
            try:
                request = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                    return json.loads(response.read().decode("utf-8")), attempt + 1
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                last = f"HTTP {exc.code}{': ' + detail if detail else ''}"
                if exc.code not in RETRY_STATUSES:
                    raise ChatError(f"{url}: {last}") from None
                wait = max(wait, _retry_after_s(exc))
            except TimeoutError:
                last = f"no answer within {self.config.timeout_s:g} s"
            except urllib.error.URLError as exc:
                if not isinstance(exc.reason, (TimeoutError, ConnectionError)):
                    raise ChatError(f"{url}: cannot connect ({exc.reason})") from None
                last = f"connection failed ({exc.reason})"
            except (ConnectionError, json.JSONDecodeError, UnicodeDecodeError) as exc:
                last = f"bad response ({type(exc).__name__}: {exc})"
            if attempt < self.config.retries:
                self._sleep(wait)
        raise ChatError(f"{url}: {last} (gave up after {self.config.retries + 1} attempts)")


def _reply_text(payload: dict, url: str) -> tuple[str, str | None]:
    try:
        choice = payload["choices"][0]
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ChatError(f"{url}: the answer has no choices[0].message.content") from None
    if not isinstance(text, str):
        raise ChatError(f"{url}: the answer's content is not text")
    return text, choice.get("finish_reason")


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read().decode("utf-8", "replace")
    except OSError:
        return ""
    try:
        message = json.loads(raw).get("error", {}).get("message", "")
    except (json.JSONDecodeError, AttributeError):
        message = raw
    return str(message)[:ERROR_BODY_CHARS].strip()


def _retry_after_s(exc: urllib.error.HTTPError) -> float:
    try:
        return min(float(exc.headers.get("Retry-After", 0)), MAX_RETRY_AFTER_S)
    except (TypeError, ValueError):
        return 0.0
