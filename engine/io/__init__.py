"""The format registry: every reader of the studio, found by content as well as by name.

A format module (registered in the ``studio.formats`` entry-point group) exposes
``FORMATS: list[Format]``. ``detect`` asks each format's ``sniff(path, head)`` for a score
(0 = no, 1 = the extension fits, 2 = the content fits); ``inspect_file`` answers
``{path, format, summary, metadata}`` for the CLI and the GUI's drag and drop. Readers are
torch-free: the GUI memory-maps the same files the engine trains on.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

GROUP = "studio.formats"
HEAD_BYTES = 4096
LOAD_ERRORS: dict[str, str] = {}
log = logging.getLogger("studio.engine")


class FormatError(Exception):
    """A file that cannot be read; the message names the file and the problem."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    extensions: tuple[str, ...]
    sniff: Callable[[Path, bytes], int]
    inspect: Callable[[Path], dict]
    panel: str = "lab"
    kinds: tuple[str, ...] = field(default_factory=tuple)


@cache
def all_formats() -> tuple[Format, ...]:
    """Every registered format; a plug-in that fails to import is skipped and recorded in
    ``LOAD_ERRORS`` (one broken plug-in must not stop every file from opening)."""
    found: list[Format] = []
    for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name):
        try:
            found.extend(importlib.import_module(ep.value).FORMATS)
        except Exception as exc:
            LOAD_ERRORS[ep.value] = f"{type(exc).__name__}: {exc}"
            log.warning("format module %s failed to load: %s", ep.value, exc)
    return tuple(found)


def extension_of(path: Path) -> str:
    """Lower-case suffixes that matter: ``.nii.gz`` stays whole."""
    suffixes = [s.lower() for s in path.suffixes[-2:]]
    if len(suffixes) == 2 and suffixes[1] in (".gz", ".bz2", ".xz"):
        return "".join(suffixes)
    return suffixes[-1] if suffixes else ""


def read_head(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(HEAD_BYTES)


def detect(path: str | os.PathLike) -> Format:
    """The best-scoring format for a file; ``FormatError`` when none claims it."""
    path = Path(path)
    if not path.exists():
        raise FormatError(path, "no such file or folder")
    if path.is_file() and path.stat().st_size == 0:
        raise FormatError(path, "the file is empty")
    try:
        head = read_head(path) if path.is_file() else b""
    except OSError as exc:
        raise FormatError(path, f"cannot read it ({exc.strerror})") from None
    scored = [(fmt.sniff(path, head), fmt) for fmt in all_formats()]
    best_score, best = max(scored, key=lambda pair: pair[0], default=(0, None))
    if best is None or best_score <= 0:
        known = sorted({ext for fmt in all_formats() for ext in fmt.extensions})
        raise FormatError(path, f"unknown format; Studio opens {', '.join(known)}")
    return best


def inspect_file(path: str | os.PathLike) -> dict:
    """``{path, format, panel, summary, metadata}``: what ``studio-engine inspect`` prints."""
    path = Path(path)
    fmt = detect(path)
    try:
        report = fmt.inspect(path)
    except FormatError:
        raise
    except Exception as exc:  # a reader's own library failing on a hostile file
        raise FormatError(path, f"not a readable {fmt.description} ({type(exc).__name__}: "
                                f"{exc})") from None
    summary, metadata = report.get("summary", {}), report.get("metadata", {})
    if "provenance" not in metadata:  # a data file Studio exported: its sidecar says whence
        from engine.provenance import SIDECAR_SUFFIX, read

        if path.with_name(path.name + SIDECAR_SUFFIX).exists():
            found = read(path)
            if found is not None:
                metadata["provenance"] = found
                summary["provenance"] = json.dumps(found, sort_keys=True, default=str)
    return {"path": str(path), "format": fmt.name, "panel": fmt.panel,
            "summary": summary, "metadata": metadata}


def by_extension(*extensions: str) -> Callable[[Path, bytes], int]:
    """A sniffer that only looks at the name (for formats without a magic number)."""
    wanted = tuple(e.lower() for e in extensions)

    def sniff(path: Path, head: bytes) -> int:
        return 1 if extension_of(path) in wanted else 0

    return sniff
