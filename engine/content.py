"""The hash of a file's or folder's content: what documents are keyed by and what exports
name their sources with. BLAKE2b; an unchanged file (same size and modification time) is not
hashed again when a cache is given; a file over ``SAMPLED_OVER`` bytes hashes its size and
sampled blocks, so a 1.4 GB run is named without reading it all; a folder hashes its files'
names and hashes (hidden files left out)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

SAMPLED_OVER = 1 << 30           # files larger than this hash sampled blocks
SAMPLE_BLOCKS = 64
SAMPLE_SIZE = 1 << 16
CHUNK = 1 << 20


class HashCache(Protocol):
    def cached_hash(self, path: str, size: int, mtime_ns: int) -> str | None: ...

    def cache_hash(self, path: str, size: int, mtime_ns: int, digest: str) -> None: ...


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

