"""Atomic file writes: a crash leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

_UMASK_LOCK = threading.Lock()


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Write through ``write(fileobj)`` into a temp file beside ``path``, fsync, then rename.

    The file gets the mode a plain ``open`` would give it (0644 under umask 022), or keeps the
    mode of the file it replaces; ``mkstemp`` alone would leave every export 0600."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, _mode_for(target))
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process' umask: read where the system shows it (Linux), else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    return write_atomic(path, lambda handle: handle.write(data))


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    text = json.dumps(obj, indent=2, default=_json_default, allow_nan=True)
    return write_bytes_atomic(path, text.encode())


def _json_default(obj: Any) -> Any:
    """numpy scalars and arrays, paths and sets become plain JSON."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def to_jsonable(obj: Any) -> Any:
    """Round-trip through JSON so numpy values become plain Python."""
    return json.loads(json.dumps(obj, default=_json_default, allow_nan=True))


def strict_jsonable(obj: Any) -> Any:
    """Like ``to_jsonable``, with NaN and infinities as ``None``: output that every JSON
    parser accepts (``--json`` on the command line)."""
    return _finite(to_jsonable(obj))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one JSON line; a reader skips a torn last line (see ``read_jsonl``)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, default=_json_default, allow_nan=True) + "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """All complete records; a line torn by a crash is skipped."""
    records = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        return []
    return records
