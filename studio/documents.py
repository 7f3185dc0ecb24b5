"""What a document *is*: its content, not the path the user typed. Qt-free.

Panels name an edited document ``"<kind>:<path>"`` (``molecules:data/drugs.smi``). Autosaved
edits are keyed by an identity made from the kind and the content hash of that file (or folder)
when the edits began, with the resolved absolute path kept beside it, so:

- the same file opened by another path (relative, absolute, a symbolic link, moved, copied)
  finds its edits;
- a different file at the same path, or the same file changed on disk since, never gets them
  silently: ``studio.undo.EditHistory`` asks whether to replay, discard or keep them aside.

The hash is ``engine.content.content_hash`` (BLAKE2b; cached in the workspace by size and
modification time; sampled blocks for files over 1 GiB; a folder by its files). Hashing a file
the cache does not know reads all of it (about 1.2 s per GiB): ``document_hash`` does that on a
worker thread, so the window keeps painting while a big document is first opened or saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.content import HashCache, content_hash


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


def document_hash(path: Path, cache: HashCache) -> str:
    """The content hash of a document's file or folder: from the cache when the file is
    unchanged (a stat and a lookup), else computed on a worker thread while the Qt main
    thread keeps painting (``studio.background.wait_responsively``)."""
    if path.is_file():
        stat = path.stat()
        known = cache.cached_hash(str(path), stat.st_size, stat.st_mtime_ns)
        if known:
            return known
    from studio.background import wait_responsively  # Qt only when there is work to do

    return wait_responsively(lambda: content_hash(path, cache))
