"""Secrets never leave a job: the values of its secret parameters (and the chat API keys in
the environment) are replaced wherever they appear, in every reason, traceback, log line,
event, artifact and result, before anything is stored or sent.

A chat endpoint that echoes the key in its error body would otherwise put the key into
``result.json``, the runs table, broadcast events and ``list_runs``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, SecretStr

MASK = "**********"  # what pydantic shows for a SecretStr
MIN_SECRET_CHARS = 4  # a shorter value would mask ordinary text, and guards nothing


def secret_values(params: BaseModel | None) -> list[str]:
    """The clear values of ``params``' secret fields (nested models too) and of the chat key
    variables of the environment, longest first (so a key containing another is masked
    whole)."""
    from engine.chat_endpoint import KEY_VARIABLES

    found = {os.environ.get(name, "") for name in KEY_VARIABLES}
    if params is not None:
        found.update(_secrets_of(params))
    return sorted((v for v in found if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True)


def _secrets_of(value: Any) -> Iterable[str]:
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _secrets_of(getattr(value, name))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _secrets_of(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _secrets_of(item)


def scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` (strings, and dicts and lists of them) with every secret masked."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(item, secrets) for item in value]
    return value


def scrubbing(emit: Callable[[dict], None], secrets: list[str]) -> Callable[[dict], None]:
    """``emit`` with every event scrubbed first."""
    if not secrets:
        return emit
    return lambda event: emit(scrub(event, secrets))
