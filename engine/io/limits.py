"""Resource budgets for readers: a hostile or huge file is refused before it is allocated.

Every budget has a default that fits normal files of the field (and all of the shipped data)
and is raised with a ``STUDIO_MAX_*`` environment variable, which the Settings dialog passes to
the engine. A file over a budget is refused with a ``FormatError`` that names the file, the
budget and how to raise it, never by running out of memory.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.io import FormatError

MB = 1024 * 1024


@dataclass(frozen=True)
class Budget:
    env: str
    default: float
    unit: str  # how a value is shown: "bytes", "levels", "atoms", "s", "pixels", "frames"
    what: str  # what it limits, for the message

    @property
    def value(self) -> float:
        """The budget now: the environment variable when set to a positive number."""
        raw = os.environ.get(self.env, "").strip()
        try:
            value = float(raw)
        except ValueError:
            return self.default
        return value if value > 0 else self.default

    def show(self, amount: float | None = None) -> str:
        amount = self.value if amount is None else amount
        if self.unit == "bytes":
            return f"{amount / MB:,.0f} MB" if amount >= MB else f"{amount:,.0f} bytes"
        return f"{amount:,.0f} {self.unit}" if self.unit != "s" else f"{amount:g} s"

    def refuse(self, path: str | os.PathLike, needed: float | None,
               detail: str = "") -> FormatError:
        """The error for a file over this budget: file, need, budget and how to raise it."""
        need = f" ({detail or 'needs'} {self.show(needed)})" if needed is not None else (
            f" ({detail})" if detail else "")
        return FormatError(path, f"over the {self.what} budget of {self.show()}{need}; raise it "
                                 f"with the environment variable {self.env} or in Settings")

    def check(self, path: str | os.PathLike, amount: float, detail: str = "") -> None:
        if amount > self.value:
            raise self.refuse(path, amount, detail)


# Defaults: the largest shipped file is far below each, and so is a typical file of the field.
DECOMPRESSED = Budget("STUDIO_MAX_DECOMPRESSED_BYTES", 1024 * MB, "bytes",
                      "decompressed size")
# Text compresses 2-20x; a gzip bomb of text 1000x. Past RATIO_FREE_BYTES, a gzip stream
# (text parsed into records, which takes several times its bytes) may not decompress to more
# than this many times its compressed size. Archive members (.npz) are judged by their size
# alone: an all-zero mask compresses 1000x and is a normal file.
RATIO = Budget("STUDIO_MAX_COMPRESSION_RATIO", 200, "x", "compression ratio")
RATIO_FREE_BYTES = 64 * MB
JSON_DEPTH = Budget("STUDIO_MAX_JSON_DEPTH", 200, "levels", "JSON nesting")
JSON_BYTES = Budget("STUDIO_MAX_JSON_BYTES", 512 * MB, "bytes", "JSON document size")
ATOMS = Budget("STUDIO_MAX_DESCRIPTOR_ATOMS", 150, "atoms", "atoms per molecule for descriptors")
DESCRIPTOR_TIME = Budget("STUDIO_MAX_DESCRIPTOR_S", 5.0, "s", "descriptor time per file")
IMAGE_PIXELS = Budget("STUDIO_MAX_IMAGE_PIXELS", 256 * 1024 * 1024, "pixels", "image size")
# One volume of a NIfTI image as float32 in memory, as the viewer holds it: a 0.4 mm
# whole-head scan is ~300 MB (inspect checks a frame in chunks and needs none of it).
FRAME_BYTES = Budget("STUDIO_MAX_FRAME_BYTES", 1024 * MB, "bytes", "image frame size")
# Records a text file declares or holds (DEF components, nets, pins; atoms of a topology;
# frames x atoms of a trajectory): the largest open benchmark chips hold a few million.
ELEMENTS = Budget("STUDIO_MAX_ELEMENTS", 50_000_000, "elements", "element count")
# A text file parsed whole (DEF, LEF, route guides, MD topologies): routed DEFs of large
# open designs are a few hundred MB.
TEXT_BYTES = Budget("STUDIO_MAX_TEXT_BYTES", 1024 * MB, "bytes", "text file size")

BUDGETS = (DECOMPRESSED, RATIO, JSON_DEPTH, JSON_BYTES, ATOMS, DESCRIPTOR_TIME, IMAGE_PIXELS,
           FRAME_BYTES, ELEMENTS, TEXT_BYTES)


def available_memory_bytes() -> int:
    """Memory this process could still take (psutil's 'available'); large when unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return 1 << 62


def check_allocation(path: str | os.PathLike, nbytes: int, what: str) -> None:
    """Refuse reading ``nbytes`` into memory when over the decompressed budget or the memory
    available now (half of it: the GUI and the engine share the machine)."""
    DECOMPRESSED.check(path, nbytes, f"{what} needs")
    spare = available_memory_bytes() // 2
    if nbytes > spare:
        raise FormatError(path, f"{what} needs {nbytes / MB:,.0f} MB but only "
                                f"{spare / MB:,.0f} MB of memory can be spared now")


def check_text_file(path: str | os.PathLike, expansion: float) -> int:
    """The size of a text file that is parsed whole, refused when over the text size budget
    or when parsing it (about ``expansion`` times its size in memory) needs more memory than
    can be spared now."""
    try:
        size = Path(path).stat().st_size
    except OSError as exc:
        raise FormatError(path, f"cannot read it ({exc.strerror})") from None
    TEXT_BYTES.check(path, size, "the file is")
    need, spare = size * expansion, available_memory_bytes() // 2
    if need > spare:
        raise FormatError(path, f"parsing its {size / MB:,.0f} MB needs about "
                                f"{need / MB:,.0f} MB of memory, but only {spare / MB:,.0f} MB "
                                "can be spared now")
    return size


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """(width, height) from an image's header, nothing decoded, refused when over the image
    size budget. Pillow's own guard (``Image.MAX_IMAGE_PIXELS``, about 179 M pixels) is set
    to our budget first, so ``STUDIO_MAX_IMAGE_PIXELS`` is the limit that decides."""
    from PIL import Image

    use_image_budget()
    try:
        with Image.open(path) as image:
            width, height = image.size
    except Image.DecompressionBombError:
        raise IMAGE_PIXELS.refuse(path, None, "its header declares more pixels") from None
    except Exception as exc:  # Pillow raises many types on a damaged file
        raise FormatError(path, f"not a readable image ({type(exc).__name__}: {exc})"
                          ) from None
    IMAGE_PIXELS.check(path, width * height, f"{width}x{height} is")
    return width, height


def use_image_budget() -> None:
    """Make Pillow refuse images at our image size budget instead of at its own default,
    for every image this process opens after it: called wherever the readers open images,
    since the budget can be raised while the process runs (Settings)."""
    import warnings

    from PIL import Image

    # Pillow raises past twice MAX_IMAGE_PIXELS (and only warns past it, for sizes within
    # our budget: that warning says nothing to a user and is silenced).
    Image.MAX_IMAGE_PIXELS = IMAGE_PIXELS.value / 2
    warnings.simplefilter("ignore", Image.DecompressionBombWarning)


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value, without recursion (a hostile file cannot
    overflow the stack here)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item
                         if isinstance(child, (list, dict)))
    return deepest


def loads_json(text: str | bytes, path: str | os.PathLike, where: str = "") -> Any:
    """``json.loads`` with a depth limit: deep nesting is a ``FormatError`` naming the file
    (and ``where``, e.g. "line 3"), never a ``RecursionError`` later."""
    at = f"{where}: " if where else ""
    limit = int(JSON_DEPTH.value)
    try:
        value = json.loads(text)
    except RecursionError:
        raise FormatError(path, f"{at}JSON nested too deeply to read (the limit is {limit} "
                                f"levels; raise it with {JSON_DEPTH.env})") from None
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"{at}not JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"{at}not UTF-8 JSON ({exc.reason} at byte {exc.start})"
                          ) from None
    depth = json_depth(value)
    if depth > limit:
        raise FormatError(path, f"{at}JSON nested {depth} levels deep; the limit is {limit} "
                                f"(raise it with the environment variable {JSON_DEPTH.env})")
    return value


def read_json(path: str | os.PathLike) -> Any:
    """A whole JSON file, within the size and depth budgets."""
    path = Path(path)
    try:
        size = path.stat().st_size
        JSON_BYTES.check(path, size, "the file is")
        text = path.read_bytes()
    except OSError as exc:
        raise FormatError(path, f"cannot read it ({exc.strerror})") from None
    return loads_json(text, path)


def decompressed_limit(compressed_bytes: int) -> int:
    """How many bytes a stream of ``compressed_bytes`` may decompress to."""
    by_ratio = max(RATIO_FREE_BYTES, int(compressed_bytes * RATIO.value))
    return int(min(DECOMPRESSED.value, by_ratio))


def check_decompressed(path: str | os.PathLike, declared: int, compressed: int,
                       what: str = "it") -> None:
    """Refuse a member or stream whose (declared or counted) decompressed size is over the
    decompressed budget, the ratio budget or the memory that can be spared."""
    if declared > DECOMPRESSED.value:
        raise DECOMPRESSED.refuse(path, declared, f"{what} decompresses to")
    if declared > max(RATIO_FREE_BYTES, compressed * RATIO.value):
        raise RATIO.refuse(path, declared / max(compressed, 1),
                           f"{what} decompresses to {declared / MB:,.0f} MB from "
                           f"{compressed / 1024:,.0f} KB, a ratio of")
    check_allocation(path, declared, what)


class _CountingReader(io.RawIOBase):
    """A decompressing stream that stops with a ``FormatError`` at its byte limit."""

    def __init__(self, inner: io.BufferedIOBase, path: str | os.PathLike, compressed: int
                 ) -> None:
        super().__init__()
        self.inner, self.path, self.compressed = inner, path, compressed
        self.limit, self.total = decompressed_limit(compressed), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self.inner.readinto(buffer)
        self.total += count
        if self.total > self.limit:
            check_decompressed(self.path, self.total, self.compressed)
            raise DECOMPRESSED.refuse(self.path, self.limit, "decompresses past")
        return count

    def close(self) -> None:
        self.inner.close()
        super().close()


def gzip_declared_size(path: str | os.PathLike) -> int:
    """The size a gzip file's trailer declares (of its last member, modulo 4 GiB)."""
    with open(path, "rb") as handle:
        handle.seek(-4, os.SEEK_END)
        return struct.unpack("<I", handle.read(4))[0]


def open_decompressed(path: str | os.PathLike) -> io.BufferedIOBase:
    """The file's bytes, gunzipped when it is gzip, within the decompression budgets: the
    trailer's declared size is checked first, the bytes actually produced as they come."""
    with open(path, "rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    if not compressed:
        return open(path, "rb")  # noqa: SIM115
    size = os.path.getsize(path)
    if size >= 18:
        check_decompressed(path, gzip_declared_size(path), size,
                           "its gzip trailer says it")  # a truncated file's says anything
    return io.BufferedReader(_CountingReader(gzip.open(path, "rb"), path, size))
