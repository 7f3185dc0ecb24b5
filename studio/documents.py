"""What a document *is*: its content, not the path the user typed. Qt-free.

Panels name an edited document ``"<kind>:<path>"`` (``molecules:data/drugs.smi``). Autosaved
edits are keyed by an identity made from the kind and the content hash of that file (or folder)
when the edits began, with the resolved absolute path kept beside it, so:

- the same file opened by another path (relative, absolute, a symbolic link, moved, copied)
  finds its edits;
- a different file at the same path, or the same file changed on disk since, never gets them
  silently: ``studio.undo.EditHistory`` asks whether to replay, discard or keep them aside.

Hashing is BLAKE2b. An unchanged file (same size and modification time) is not hashed again
(``Workspace.cached_hash``); a file over ``SAMPLED_OVER`` bytes hashes its size and sampled
blocks, so a 1.4 GB run opens without reading it all. A folder hashes its files' names and
hashes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

SAMPLED_OVER = 1 << 30           # files larger than this hash sampled blocks
SAMPLE_BLOCKS = 64
SAMPLE_SIZE = 1 << 16
CHUNK = 1 << 20


class HashCache(Protocol):
    def cached_hash(self, path: str, size: int, mtime_ns: int) -> str | None: ...

    def cache_hash(self, path: str, size: int, mtime_ns: int, digest: str) -> None: ...


@dataclass(frozen=True)
class DocumentFile:
    """A panel's document string split into its kind and the file it names."""

    kind: str
    path: Path            # resolved, absolute

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)


def document_file(document: str) -> DocumentFile | None:
    """The file or folder behind ``"<kind>:<path>"``, or ``None`` when it names none that
    exists (a new, unsaved document; a test's plain key): such a document is keyed as typed."""
    kind, sep, path = document.partition(":")
    if not sep or not path:
        return None
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if not (resolved.is_file() or resolved.is_dir()):
        return None
    return DocumentFile(kind, resolved)


def identity(kind: str, digest: str) -> str:
    return f"{kind}@{digest}"


def content_hash(path: Path, cache: HashCache | None = None) -> str:
    """The hash of a file's or folder's content (see the module docstring)."""
    if path.is_dir():
        digest = hashlib.blake2b(digest_size=16)
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            relative = file.relative_to(path).as_posix()
            if any(part.startswith(".") for part in file.relative_to(path).parts):
                continue  # editor swap files, .DS_Store: not the document's content
            digest.update(f"{relative}\0{content_hash(file, cache)}\0".encode())
        return "d" + digest.hexdigest()
    stat = path.stat()
    key = str(path)
    if cache is not None:
        found = cache.cached_hash(key, stat.st_size, stat.st_mtime_ns)
        if found:
            return found
    found = _file_hash(path, stat.st_size)
    if cache is not None:
        cache.cache_hash(key, stat.st_size, stat.st_mtime_ns, found)
    return found


def _file_hash(path: Path, size: int) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(str(size).encode() + b"\0")
    with open(path, "rb") as stream:
        if size <= SAMPLED_OVER:
            while block := stream.read(CHUNK):
                digest.update(block)
            return "f" + digest.hexdigest()
        last = size - SAMPLE_SIZE
        for i in range(SAMPLE_BLOCKS):  # the first and the last block included
            stream.seek(last * i // (SAMPLE_BLOCKS - 1))
            digest.update(stream.read(SAMPLE_SIZE))
    return "s" + digest.hexdigest()

