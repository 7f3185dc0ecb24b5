"""Finds methods through the ``studio.methods`` entry-point group, built-ins included.

A third-party package registers ``[project.entry-points."studio.methods"] name = "pkg.module"``
where the module exposes ``SPECS: list[MethodSpec]``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
from functools import cache
from importlib.metadata import entry_points

from engine.api import MethodSpec

GROUP = "studio.methods"
LOAD_ERRORS: dict[str, str] = {}
log = logging.getLogger("studio.engine")


class UnknownMethod(KeyError):
    def __str__(self) -> str:
        return f"unknown method {self.args[0]!r}; `studio-engine list` shows the methods"


@cache
def method_modules() -> tuple[str, ...]:
    """Module paths registered in the entry-point group, sorted by name."""
    found = sorted(entry_points(group=GROUP), key=lambda ep: ep.name)
    return tuple(ep.value for ep in found)


@cache
def _loaded_modules() -> tuple:
    """Imported method modules; one that fails to import is reported, not fatal."""
    modules = []
    for module_path in method_modules():
        try:
            modules.append(importlib.import_module(module_path))
        except Exception as exc:
            LOAD_ERRORS[module_path] = f"{type(exc).__name__}: {exc}"
            log.warning("method module %s failed to load: %s", module_path, exc)
    return tuple(modules)


@cache
def all_methods() -> dict[str, MethodSpec]:
    methods: dict[str, MethodSpec] = {}
    for module in _loaded_modules():
        module_path = module.__name__
        for spec in getattr(module, "SPECS", []):
            if spec.id in methods:
                raise RuntimeError(f"method {spec.id!r} registered twice ({module_path})")
            methods[spec.id] = spec
    return methods


def get_method(method_id: str) -> MethodSpec:
    try:
        return all_methods()[method_id]
    except KeyError:
        raise UnknownMethod(method_id) from None


def describe_all() -> list[dict]:
    return [spec.describe() for spec in all_methods().values()]


def methods_hash() -> str:
    """Changes when any method's id or parameters change; clients cache listings by it."""
    text = json.dumps(describe_all(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@cache
def _request_handlers() -> dict:
    handlers: dict = {}
    for module in _loaded_modules():
        handlers.update(getattr(module, "REQUESTS", {}))
    return handlers


def get_request_handler(name: str):
    """A method module's ``REQUESTS = {"name": fn(args) -> dict}`` entry (interactive calls)."""
    try:
        return _request_handlers()[name]
    except KeyError:
        raise KeyError(f"unknown request {name!r}") from None
