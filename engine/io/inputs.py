"""Method inputs through the format registry: one error boundary before a job starts.

``validate_input(kind, path)`` is called by the job manager (CLI and server alike) for every
input of a submission, before a run is recorded and before any worker imports torch. A file
that cannot be used raises the same ``FormatError`` that ``inspect`` gives (its message starts
with the path), so ``studio-engine run`` exits 2 and the GUI shows the reason. Kinds without a
format of their own (checkpoints, text, folders of images, net datasets) are checked here.
"""

from __future__ import annotations

import codecs
from pathlib import Path

from engine.io import FormatError, all_formats, detect, extension_of, inspect_file
from engine.io.arrays import CHECKPOINT_CONFIGS, npz_members
from engine.io.limits import TEXT_BYTES, image_size, read_json

# An input kind named by a method -> the kind its formats declare.
KIND_ALIASES = {"transcripts": "transcript"}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
TEXT_CHUNK_BYTES = 1 << 20


def validate_input(kind: str, path: str | Path) -> list[str]:
    """Raise ``FormatError`` when ``path`` cannot serve as a ``kind`` input; otherwise return
    notes for the job's log (records the reader skipped)."""
    path = Path(path)
    if not path.exists():
        raise FormatError(path, "no such file or folder")
    checker = _CHECKERS.get(kind)
    if checker is not None:
        return checker(path)
    return _check_registered(KIND_ALIASES.get(kind, kind), path)


def _check_registered(kind: str, path: Path) -> list[str]:
    """A kind with formats: the file must be one of them and its reader must accept it."""
    fmt = detect(path)
    if kind not in fmt.kinds:
        wanted = sorted({ext for f in all_formats() if kind in f.kinds for ext in f.extensions})
        raise FormatError(path, f"this is a {fmt.description} file, not a {kind} input; "
                                f"give one of {', '.join(wanted) or 'its formats'}")
    return _notes(inspect_file(path))


def _notes(report: dict) -> list[str]:
    """What a reader skipped, as it reported it (``skipped`` or ``problems`` entries)."""
    notes = []
    for section in (report.get("summary", {}), report.get("metadata", {})):
        for key in ("skipped", "problems"):
            value = section.get(key)
            if isinstance(value, list):
                notes.extend(f"{report['path']}: {item}" for item in value)
    return notes


def _check_any(path: Path) -> list[str]:
    """Anything a format claims is read by it; other JSON within the JSON budgets; an
    unknown file is passed as it is."""
    try:
        detect(path)
    except FormatError:
        if path.is_file() and extension_of(path) == ".json":
            read_json(path)
        return []
    return _notes(inspect_file(path))


def _check_file(path: Path) -> list[str]:
    """A token list or a text: JSON within budgets, arrays by their reader, else UTF-8 text."""
    if path.is_dir():
        raise FormatError(path, "a folder; this input is a file")
    ext = extension_of(path)
    if ext == ".json":
        read_json(path)
        return []
    if ext in (".npy", ".npz", ".safetensors"):
        return _notes(inspect_file(path))
    return _check_text(path)


def _check_text(path: Path) -> list[str]:
    """UTF-8 text, decoded in chunks (no whole-file copy), and not empty."""
    if path.is_dir():
        raise FormatError(path, "a folder; this input is a UTF-8 text file")
    TEXT_BYTES.check(path, path.stat().st_size, "the file is")
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, visible = 0, False
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(TEXT_CHUNK_BYTES):
                visible = visible or bool(decoder.decode(chunk).strip())
                offset += len(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"not UTF-8 text ({exc.reason} near byte "
                                f"{offset + exc.start})") from None
    except OSError as exc:
        raise FormatError(path, f"cannot read it ({exc.strerror})") from None
    if not visible:
        raise FormatError(path, "the text is empty")
    return []


def _check_checkpoint(path: Path) -> list[str]:
    """A checkpoint folder (cfg.json or a Hugging Face config.json, safetensors weights: the
    ``checkpoint`` or ``sae`` format) or a single .safetensors file."""
    if path.is_dir() and not any((path / name).is_file() for name in CHECKPOINT_CONFIGS):
        raise FormatError(path, "not a checkpoint folder (no cfg.json or config.json in it)")
    return _check_registered("checkpoint", path)


def _check_image_folder(path: Path) -> list[str]:
    """A folder of images whose headers open and whose sizes are within the pixel budget
    (no image is decoded here: a decompression bomb is refused before it is)."""
    if not path.is_dir():
        raise FormatError(path, "not a folder; this input is a folder of images")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise FormatError(path, f"no images in the folder ({', '.join(IMAGE_SUFFIXES)})")
    for file in files:
        image_size(file)
    return []


def _check_net_dataset(path: Path) -> list[str]:
    """A net dataset written by ``chipstar.export_dataset``: its reader must find nets."""
    from engine.vlsi import VlsiError
    from engine.vlsi.netdata import read_net_dataset

    npz_members(path)  # the archive's budgets and honest headers before anything is loaded
    try:
        records, _spec = read_net_dataset(path)
    except VlsiError as exc:
        raise FormatError(path, str(exc).removeprefix(f"{path}: ")) from None
    except (OSError, ValueError) as exc:
        raise FormatError(path, f"not a readable net dataset ({exc})") from None
    if not records:
        raise FormatError(path, "the dataset holds no nets")
    return []


_CHECKERS = {
    "any": _check_any,
    "file": _check_file,
    "text": _check_text,
    "checkpoint": _check_checkpoint,
    "folder": _check_image_folder,
    "dataset": _check_net_dataset,
}
