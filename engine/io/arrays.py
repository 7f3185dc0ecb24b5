"""Arrays: NumPy ``.npy``/``.npz`` (never unpickled) and ``.safetensors`` (read without torch)."""

from __future__ import annotations

import math
import struct
import zipfile
from pathlib import Path

import numpy as np

from engine.io import Format, FormatError, extension_of
from engine.io.limits import DECOMPRESSED, check_allocation, loads_json

NPY_MAGIC = b"\x93NUMPY"
SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024
NPY_MAX_HEADER = 100_000


def read_npy(path: str | Path, mmap: bool = True) -> np.ndarray:
    """Memory-mapped by default, so a large array opens without being loaded."""
    path = Path(path)
    with open(path, "rb") as handle:
        if not handle.read(len(NPY_MAGIC)) == NPY_MAGIC:
            raise FormatError(path, "not a NumPy .npy file (it has no NPY header)")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "python objects" in str(exc).lower():
            raise FormatError(path, "holds Python objects (pickled); Studio refuses to "
                                    "unpickle files — save plain numeric arrays") from None
        raise FormatError(path, f"not a readable .npy array ({exc})") from None
    except (OSError, EOFError) as exc:
        raise FormatError(path, f"truncated or damaged .npy file ({exc})") from None


def npz_members(path: str | Path) -> dict[str, dict]:
    """Each array of an .npz from its member's .npy header, nothing decompressed past it:
    ``{name: {shape, dtype, nbytes, stored, compressed}}``. A member whose header claims
    more bytes than the member holds, or a member that decompresses to more than the
    decompressed-size budget, is a ``FormatError``.

    Members are judged by the size they decompress to, never by their compression ratio: an
    all-zero mask or a sparse label volume compresses 1000x and is a normal file, while a
    bomb is a member whose size is over the budget. The declared size bounds the memory a
    member can take: ``zipfile`` stops a stream at it (and fails its CRC when more was
    packed), and the member's ``.npy`` header must account for exactly those bytes."""
    path = Path(path)
    members = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename.removesuffix(".npy")
                DECOMPRESSED.check(path, info.file_size,
                                   f"member {info.filename!r} decompresses to")
                with archive.open(info) as member:
                    shape, fortran, dtype = _npy_header(member)
                    header_end = member.tell()
                if dtype.hasobject:
                    raise FormatError(path, f"member {info.filename!r} holds Python objects "
                                            "(pickled); Studio refuses to unpickle files")
                nbytes = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
                if nbytes != info.file_size - header_end:
                    raise FormatError(path, f"member {info.filename!r} claims shape "
                                            f"{list(shape)} of {dtype} ({nbytes:,} bytes) but "
                                            f"holds {info.file_size - header_end:,}")
                members[name] = {"shape": list(shape), "dtype": str(dtype), "nbytes": nbytes,
                                 "fortran_order": fortran, "compressed": info.compress_size}
    except FormatError:
        raise
    except Exception as exc:  # zipfile and numpy raise many types on a damaged archive
        raise FormatError(path, f"not a readable .npz archive ({type(exc).__name__}: "
                                f"{exc})") from None
    return members


def _npy_header(handle) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) from an open .npy stream, by its version's reader."""
    major, _minor = np.lib.format.read_magic(handle)
    read = np.lib.format.read_array_header_1_0 if major == 1 else \
        np.lib.format.read_array_header_2_0
    return read(handle, max_header_size=NPY_MAX_HEADER)


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Every array, loaded only after each member's declared size passed the budgets."""
    path = Path(path)
    members = npz_members(path)
    check_allocation(path, sum(m["nbytes"] for m in members.values()), "the archive")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except ValueError as exc:
        raise FormatError(path, f"holds objects Studio will not unpickle ({exc})") from None
    except Exception as exc:
        raise FormatError(path, f"not a readable .npz archive ({exc})") from None


def safetensors_header(path: str | Path) -> dict:
    """The JSON header (names, dtypes, shapes, offsets), checked against the file size."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as handle:
        raw = handle.read(8)
        if len(raw) < 8:
            raise FormatError(path, "truncated safetensors file (no header length)")
        (length,) = struct.unpack("<Q", raw)
        if length > min(SAFETENSORS_MAX_HEADER, size - 8):
            raise FormatError(path, f"safetensors header of {length} bytes does not fit in a "
                                    f"file of {size} bytes (truncated or not safetensors)")
        header = loads_json(handle.read(length), path, "safetensors header")
    if not isinstance(header, dict):
        raise FormatError(path, "safetensors header is not a JSON object")
    _check_tensors(path, header, size - 8 - length)
    return header


# Bits per element of each safetensors dtype.
SAFETENSORS_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16,
    "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64,
    "U64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


def _check_tensors(path: Path, header: dict, data_size: int) -> None:
    """Each tensor's dtype is a safetensors dtype, its shape's size matches its byte range,
    and the ranges tile the data without gaps or overlaps: a header that claims 10^12
    parameters in a 4 KB file is refused here, before anything trusts it."""
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = entry["data_offsets"]
            dtype, shape = entry["dtype"], entry["shape"]
            valid = (isinstance(start, int) and isinstance(end, int) and isinstance(shape, list)
                     and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                             for d in shape))
        except (KeyError, TypeError, ValueError):
            valid = False
        if not valid:
            raise FormatError(path, f"tensor {name!r} lacks a valid dtype, shape or "
                                    "data_offsets")
        if dtype not in SAFETENSORS_DTYPE_BITS:
            raise FormatError(path, f"tensor {name!r} has the unknown dtype {dtype!r} "
                                    f"(safetensors has {', '.join(SAFETENSORS_DTYPE_BITS)})")
        if not 0 <= start <= end <= data_size:
            raise FormatError(path, f"tensor {name!r} lies past the end of the file "
                                    "(truncated)")
        count = math.prod(shape)
        needed = -(-count * SAFETENSORS_DTYPE_BITS[dtype] // 8)
        if needed != end - start:
            raise FormatError(path, f"tensor {name!r} claims shape {shape} of {dtype} "
                                    f"({count:,} values, {needed:,} bytes) but holds "
                                    f"{end - start:,} bytes")
        spans.append((start, end, name))
    position = 0
    for start, end, name in sorted(spans):
        if start != position:
            problem = "overlaps another" if start < position else "leaves a gap before it"
            raise FormatError(path, f"tensor {name!r} {problem} (bytes {start}-{end})")
        position = end
    if position != data_size:
        raise FormatError(path, f"{data_size - position:,} bytes after the last tensor belong "
                                "to none")


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    safetensors_header(path)  # offsets, shapes and dtypes proven against the file first
    check_allocation(path, Path(path).stat().st_size, "loading its tensors")
    try:
        return load_file(str(path))
    except Exception as exc:
        raise FormatError(path, f"cannot load tensors ({exc})") from None


def _sniff_npy(path: Path, head: bytes) -> int:
    if head.startswith(NPY_MAGIC):
        return 2
    return 1 if extension_of(path) == ".npy" else 0


def _sniff_npz(path: Path, head: bytes) -> int:
    return 2 if extension_of(path) == ".npz" and head.startswith(b"PK") else 0


def _sniff_safetensors(path: Path, head: bytes) -> int:
    """2 when the head is a plausible header length followed by its JSON's ``{``."""
    if len(head) >= 9 and head[8:9] == b"{":
        (length,) = struct.unpack("<Q", head[:8])
        if 2 <= length <= SAFETENSORS_MAX_HEADER:
            return 2
    return 1 if extension_of(path) == ".safetensors" else 0


def _inspect_npy(path: Path) -> dict:
    array = read_npy(path)
    return {"summary": {"shape": list(array.shape), "dtype": str(array.dtype)},
            "metadata": {"fortran_order": bool(array.flags.f_contiguous and array.ndim > 1)}}


def _inspect_npz(path: Path) -> dict:
    members = npz_members(path)  # headers only: an archive of any size inspects in kilobytes
    return {"summary": {"arrays": len(members)},
            "metadata": {k: {"shape": v["shape"], "dtype": v["dtype"]}
                         for k, v in members.items()}}


def _inspect_safetensors(path: Path) -> dict:
    header = safetensors_header(path)
    tensors = {k: {"shape": v["shape"], "dtype": v["dtype"]}
               for k, v in header.items() if k != "__metadata__"}
    return {"summary": {"tensors": len(tensors),
                        "parameters": int(sum(np.prod(t["shape"]) for t in tensors.values()))},
            "metadata": {"tensors": tensors, "metadata": header.get("__metadata__", {})}}


CHECKPOINT_CONFIGS = ("cfg.json", "config.json")


def _sniff_checkpoint(path: Path, head: bytes) -> int:
    """1 for a folder with a cfg.json or a Hugging Face config.json (a format that knows the
    model, like ``sae``, outbids it with 2)."""
    return int(path.is_dir() and any((path / name).is_file() for name in CHECKPOINT_CONFIGS))


def _inspect_checkpoint(path: Path) -> dict:
    """The configuration (within the JSON budgets) and each weight file's tensors (headers
    proven against their files), nothing loaded."""
    from engine.io.limits import read_json

    config_path = next(path / name for name in CHECKPOINT_CONFIGS if (path / name).is_file())
    config = read_json(config_path)
    if not isinstance(config, dict):
        raise FormatError(config_path, "the checkpoint's configuration is not a JSON object")
    tensors = {}
    for weights in sorted(path.glob("*.safetensors")):
        header = safetensors_header(weights)
        tensors.update({f"{weights.name}:{k}": {"shape": v["shape"], "dtype": v["dtype"]}
                        for k, v in header.items() if k != "__metadata__"})
    model = config.get("model") or config.get("model_type") or config.get("architecture")
    return {"summary": {"model": str(model or "unknown"), "config": config_path.name,
                        "tensors": len(tensors),
                        "parameters": int(sum(math.prod(t["shape"]) for t in tensors.values()))},
            "metadata": {"tensors": tensors, "config_keys": sorted(config)[:50]}}


FORMATS = [
    Format("npy", "NumPy array", (".npy",), _sniff_npy, _inspect_npy, kinds=("array",)),
    Format("npz", "NumPy archive", (".npz",), _sniff_npz, _inspect_npz, kinds=("array",)),
    Format("safetensors", "safetensors tensors", (".safetensors",), _sniff_safetensors,
           _inspect_safetensors, kinds=("array", "checkpoint")),
    Format("checkpoint", "checkpoint folder (safetensors and a config)", (),
           _sniff_checkpoint, _inspect_checkpoint, kinds=("checkpoint",)),
]
