"""Finds methods through the ``studio.methods`` entry-point group, built-ins included.

A third-party package registers ``[project.entry-points."studio.methods"] name = "pkg.module"``
where the module exposes ``SPECS: list[MethodSpec]``.

Listing methods does not import them: their descriptions (``MethodSpec.describe()`` plus the
module that holds each) are cached in ``$STUDIO_CACHE_DIR`` (default: the user cache folder)
under a key of everything they were computed from: the content hash of every project source
file loaded while importing the method modules (the method files themselves, ``engine.api``,
shared parameter models...), the entry points, the installed distributions and Python's
version. Any change rebuilds the cache, so a changed method file is never listed stale.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import sysconfig
from functools import cache
from importlib.machinery import PathFinder
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.api import MethodSpec

GROUP = "studio.methods"
LOAD_ERRORS: dict[str, str] = {}
CACHE_FORMAT = 1
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
    """Every method's spec; imports every method module (a listing needs ``describe_all``)."""
    methods: dict[str, MethodSpec] = {}
    for module in _loaded_modules():
        module_path = module.__name__
        for spec in getattr(module, "SPECS", []):
            if spec.id in methods:
                raise RuntimeError(f"method {spec.id!r} registered twice ({module_path})")
            methods[spec.id] = spec
    return methods


def get_method(method_id: str) -> MethodSpec:
    """The spec of one method, importing only its own module when the listing knows it."""
    if _loaded_modules.cache_info().currsize == 0:
        entry = next((m for m in cached_listing() or () if m["id"] == method_id), None)
        if entry is not None:
            module = importlib.import_module(entry["module"])
            for spec in getattr(module, "SPECS", []):
                if spec.id == method_id:
                    return spec
    try:
        return all_methods()[method_id]
    except KeyError:
        raise UnknownMethod(method_id) from None


def describe_all() -> list[dict]:
    """Every method's ``describe()`` form, from the cache when it is current (no import)."""
    listing = cached_listing()
    if listing is None:
        listing = _rebuild_listing()
    return [{k: v for k, v in method.items() if k != "module"} for method in listing]


def methods_hash() -> str:
    """Changes when any method's id or parameters change; clients cache listings by it."""
    text = json.dumps(describe_all(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- the listing cache ------------------------------------------------------------------------
def cache_path() -> Path:
    """One cache file per Python environment (two virtual environments do not fight)."""
    root = os.environ.get("STUDIO_CACHE_DIR")
    if not root:
        from platformdirs import user_cache_dir

        root = user_cache_dir("studio", appauthor=False)
    environment = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    return Path(root) / "methods" / f"listing-{environment}.json"


def cached_listing() -> list[dict] | None:
    """The cached descriptions (each with its ``module``), or None when absent or stale."""
    try:
        record = json.loads(cache_path().read_text(encoding="utf-8"))
        if record.get("format") != CACHE_FORMAT or record.get("context") != _context():
            return None
        if record["sources"] != _hash_files(record["sources"]):
            return None
        return list(record["methods"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _rebuild_listing() -> list[dict]:
    """Import the method modules (here when this process has not imported them, else in a
    fresh process, since ours would describe the code as it was when it was imported) and
    write the cache."""
    if not any(name in sys.modules for name in method_modules()):
        return build_cache()
    result = subprocess.run([sys.executable, "-m", "engine.registry"], capture_output=True,
                            text=True, check=False, env=os.environ.copy())
    if result.returncode == 0:
        return json.loads(result.stdout)
    log.warning("rebuilding the method listing failed: %s", result.stderr.strip()[-500:])
    return _describe_loaded()


def build_cache() -> list[dict]:
    """Import every method module, describe it, and cache that under the files it came from.
    Nothing is cached when a module failed to import (the next listing tries again) or a
    method file changed while it was being read."""
    before = _hash_files({path: "" for path in _entry_point_files()})
    listing = _describe_loaded()
    sources = _hash_files({path: "" for path in _loaded_source_files()})
    if LOAD_ERRORS or any(sources.get(path) != digest for path, digest in before.items()):
        return listing
    from engine.atomic import write_json_atomic

    record = {"format": CACHE_FORMAT, "context": _context(), "sources": sources,
              "methods": listing}
    try:
        write_json_atomic(cache_path(), record)
    except OSError as exc:  # a read-only home still lists, only more slowly
        log.warning("could not write the method listing cache %s: %s", cache_path(), exc)
    return listing


def _describe_loaded() -> list[dict]:
    """Each method's description and the module that registers it, in registry order."""
    all_methods()  # refuses a method id registered twice
    return [{**spec.describe(), "module": module.__name__}
            for module in _loaded_modules() for spec in getattr(module, "SPECS", [])]


def _context() -> dict[str, Any]:
    """What the listing depends on besides source files: the registered entry points, the
    installed distributions (pydantic shapes the schemas) and the Python version."""
    installed: list[str] = []
    for folder in sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}):
        with contextlib.suppress(OSError):
            installed += sorted(n for n in os.listdir(folder) if n.endswith(".dist-info"))
    return {"entry_points": list(method_modules()), "installed": installed,
            "python": sys.version}


def _hash_files(paths: dict[str, str]) -> dict[str, str]:
    """``path -> sha256`` of each file's bytes now (``""`` for one that cannot be read)."""
    digests = {}
    for path in paths:
        try:
            digests[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            digests[path] = ""
    return digests


def _entry_point_files() -> list[str]:
    """The method modules' files, found without importing them (or their packages)."""
    files = []
    for module_path in method_modules():
        search: list[str] | None = None
        spec = None
        for depth, part in enumerate(module_path.split(".")):
            name = ".".join(module_path.split(".")[: depth + 1])
            if depth == 0:  # a top-level name: also found by an editable install's finder
                spec = importlib.util.find_spec(name)
            else:
                spec = PathFinder.find_spec(name, search) if part else None
            if spec is None:
                break
            search = list(spec.submodule_search_locations or [])
        if spec is not None and spec.origin:
            files.append(os.path.realpath(spec.origin))
    return files


def _loaded_source_files() -> list[str]:
    """Method files plus every imported module's file outside the standard library and the
    installed packages: the project code a method's description may depend on."""
    paths = sysconfig.get_paths()
    library = tuple(os.path.join(os.path.realpath(paths[key]), "")
                    for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    files = set(_entry_point_files())
    for module in list(sys.modules.values()):
        origin = getattr(module, "__file__", None)
        if origin and origin.endswith(".py"):
            real = os.path.realpath(origin)
            if not real.startswith(library):
                files.add(real)
    return sorted(files)


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


if __name__ == "__main__":  # a fresh process rebuilding the cache for a long-running engine
    sys.stdout.write(json.dumps(build_cache()))
