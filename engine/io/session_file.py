"""Studio session files (``.studio``): read, check and write them without Qt.

A session is a zip holding ``manifest.json`` (what was open, each panel's view state, the dock
layout, linked runs and each document's edits) and ``thumbnail.png``. The shell writes and
restores sessions (``studio.sessions``); this module is the one place that decides whether a
file is a session Studio can read, so ``studio-engine inspect FILE.studio`` and the GUI refuse
the same files for the same reasons: a damaged or truncated zip, members that would expand
beyond the decompression budgets (``engine.io.limits``), a manifest that is not a session, or
a format version newer than this Studio reads. Entries of a readable manifest that do not have
their expected shape are left out and listed (``SessionContents.problems``), never guessed at.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from engine.atomic import write_atomic
from engine.io import Format, FormatError
from engine.io.limits import DECOMPRESSED, JSON_BYTES, check_decompressed, loads_json

FORMAT_NAME = "studio-session"
FORMAT_VERSION = 1
SUFFIX = ".studio"
MANIFEST = "manifest.json"
THUMBNAIL = "thumbnail.png"
MAX_MEMBERS = 64              # a session holds two members; a zip of thousands is not ours
ZIP_MAGIC = b"PK\x03\x04"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# What each list entry of the manifest must hold (name -> type): an entry that lacks one is
# left out and listed, so a hand-edited or damaged manifest opens as far as it can.
DOCUMENT_FIELDS = {"path": str, "fingerprint": str, "panel": str}
PANEL_FIELDS = {"id": str}


@dataclass
class SessionContents:
    """A session as read: its manifest (entries checked), thumbnail and what was left out."""

    path: Path
    manifest: dict[str, Any]
    thumbnail: bytes | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def documents(self) -> list[dict]:
        return self.manifest["documents"]

    @property
    def panels(self) -> list[dict]:
        return self.manifest["panels"]


def read_session(path: str | Path) -> SessionContents:
    """The session at ``path``; ``FormatError`` (naming the file) when it cannot be used."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise FormatError(path, f"not a readable Studio session (a damaged or truncated zip: "
                                f"{exc})") from None
    with archive:
        members = {info.filename: info for info in archive.infolist()}
        if len(members) > MAX_MEMBERS:
            raise FormatError(path, f"a zip of {len(members)} members is not a Studio session "
                                    f"(it holds {MANIFEST} and {THUMBNAIL})")
        total = sum(info.file_size for info in members.values())
        if total > DECOMPRESSED.value:
            raise DECOMPRESSED.refuse(path, total, "its members decompress to")
        if MANIFEST not in members:
            raise FormatError(path, f"not a Studio session: no {MANIFEST} in the zip")
        info = members[MANIFEST]
        JSON_BYTES.check(path, info.file_size, f"its {MANIFEST} is")
        manifest = loads_json(_member(archive, path, info), path, MANIFEST)
        contents = SessionContents(path, _checked_manifest(path, manifest))
        if THUMBNAIL in members:
            try:
                thumbnail = _member(archive, path, members[THUMBNAIL])
            except FormatError as exc:
                contents.problems.append(f"thumbnail left out: {exc.problem}")
            else:
                if thumbnail.startswith(PNG_MAGIC):
                    contents.thumbnail = thumbnail
                else:
                    contents.problems.append("thumbnail left out: not a PNG")
        contents.problems.extend(_check_entries(contents.manifest))
    return contents


def _member(archive: zipfile.ZipFile, path: Path, info: zipfile.ZipInfo) -> bytes:
    """One member's bytes within the budgets; a damaged member is a ``FormatError``."""
    check_decompressed(path, info.file_size, info.compress_size, info.filename)
    try:
        with archive.open(info) as stream:
            data = stream.read(info.file_size + 1)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise FormatError(path, f"{info.filename} is damaged ({exc})") from None
    except Exception as exc:  # zlib.error and friends from a hostile stream
        raise FormatError(path, f"{info.filename} is damaged ({type(exc).__name__}: {exc})"
                          ) from None
    if len(data) > info.file_size:
        raise FormatError(path, f"{info.filename} is larger than the zip declares")
    return data


def _checked_manifest(path: Path, manifest: Any) -> dict[str, Any]:
    """The manifest when it is a session this Studio reads; refused otherwise."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise FormatError(path, f"not a Studio session ({MANIFEST} does not say "
                                f"format: {FORMAT_NAME})")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FormatError(path, f"{MANIFEST} has no valid format_version ({version!r})")
    if version > FORMAT_VERSION:
        written_by = manifest.get("app_version") or "a newer Studio"
        raise FormatError(path, f"written by Studio {written_by} in session format {version}; "
                                f"this Studio reads format {FORMAT_VERSION} and older: "
                                "update Studio to open it")
    for key, kind in (("documents", list), ("panels", list), ("runs", list),
                      ("edits", dict), ("layout", dict)):
        value = manifest.setdefault(key, kind())
        if not isinstance(value, kind):
            raise FormatError(path, f"{MANIFEST}: {key} is a {type(value).__name__}, not a "
                                    f"{kind.__name__}")
    return manifest


def _check_entries(manifest: dict[str, Any]) -> list[str]:
    """Leave out the entries that lack what they must hold; say which."""
    problems: list[str] = []
    for key, fields in (("documents", DOCUMENT_FIELDS), ("panels", PANEL_FIELDS)):
        kept = []
        for index, entry in enumerate(manifest[key]):
            missing = [name for name, kind in fields.items()
                       if not isinstance(entry, dict) or not isinstance(entry.get(name), kind)]
            if missing:
                problems.append(f"{key} entry {index + 1} left out: it has no valid "
                                f"{', '.join(missing)}")
            else:
                kept.append(entry)
        manifest[key] = kept
    runs = [run for run in manifest["runs"] if isinstance(run, str)]
    if len(runs) != len(manifest["runs"]):
        problems.append(f"{len(manifest['runs']) - len(runs)} run id(s) left out: not text")
    manifest["runs"] = runs
    edits = {}
    for document, entry in manifest["edits"].items():
        if (isinstance(entry, dict) and isinstance(entry.get("identity"), str)
                and all(isinstance(entry.get(part, []), list)
                        and all(isinstance(c, dict) for c in entry.get(part, []))
                        for part in ("applied", "redoable"))):
            edits[document] = entry
        else:
            problems.append(f"edits of {document} left out: not a list of edit commands")
    manifest["edits"] = edits
    return problems


def write_session(path: str | Path, manifest: dict[str, Any],
                  thumbnail: bytes | None = None) -> Path:
    """Write a session zip atomically: a crash leaves the old session or the new one."""
    import json

    manifest = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **manifest}
    text = json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False).encode("utf-8")

    def write(handle: BinaryIO) -> None:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(MANIFEST, text)
            if thumbnail:
                archive.writestr(THUMBNAIL, thumbnail, compress_type=zipfile.ZIP_STORED)
        handle.write(buffer.getvalue())

    return write_atomic(path, write)


# -- the format registry --------------------------------------------------------------------

def _sniff(path: Path, head: bytes) -> int:
    if path.suffix.lower() != SUFFIX:
        return 0
    return 95 if head.startswith(ZIP_MAGIC) else 1


def _inspect(path: Path) -> dict:
    """What ``studio-engine inspect FILE.studio`` prints: what the session holds."""
    contents = read_session(path)
    manifest = contents.manifest
    edits = manifest["edits"]
    summary: dict[str, Any] = {
        "format_version": manifest["format_version"],
        "app_version": manifest.get("app_version", ""),
        "created": manifest.get("created", ""),
        "panels": ", ".join(panel["id"] for panel in contents.panels) or "none",
        "documents": len(contents.documents),
        "runs": len(manifest["runs"]),
        "edits": sum(len(entry.get("applied", [])) for entry in edits.values()),
        "redoable edits": sum(len(entry.get("redoable", [])) for entry in edits.values()),
        "thumbnail": _png_size(contents.thumbnail) if contents.thumbnail else "none",
    }
    for index, document in enumerate(contents.documents, 1):
        summary[f"document {index}"] = (f"{document['path']} ({document['panel']}, "
                                        f"{document['fingerprint'][:12]})")
    if contents.problems:
        summary["left out"] = "; ".join(contents.problems)
    return {"summary": summary, "metadata": {"manifest": manifest,
                                             "problems": contents.problems}}


def _png_size(data: bytes) -> str:
    if len(data) < 24 or data[12:16] != b"IHDR":
        return "unreadable"
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    return f"{width}x{height}"


FORMATS = [
    Format(FORMAT_NAME, "Studio session", (SUFFIX,), _sniff, _inspect, panel="",
           kinds=("session",)),
]
