"""Where an export came from, written into the file itself and read back.

Every export (figures, dashboards, data files, checkpoints' ``cfg.json``) carries one record:

``{"studio": version, "written": ISO time (UTC), "sources": [{"path", "hash", "size"}],
"view": {...what made the picture...}, "runs": [{"run_id", "method", "params", "seed"}],
"versions": {package: version}, "commit": git commit of this checkout or null, ...extra}``

- PNG: a ``Description`` text chunk (iTXt, UTF-8; the key matplotlib's PNG writer uses too);
- SVG: ``<metadata id="studio-provenance">`` after the opening tag;
- PDF: the document information's ``Subject`` (matplotlib's ``metadata``: see ``pdf_metadata``);
- anything else (CSV, JSONL, NPY, MP4…): a ``<name>.provenance.json`` sidecar beside it.

``read(path)`` finds the record in any of these; ``studio-engine inspect FIGURE`` prints it.
Versions are those of packages already imported (asking costs no import: the GUI never
imports torch to say which torch it does not use).
"""

from __future__ import annotations

import json
import re
import struct
import sys
import time
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, unescape

from engine.atomic import write_bytes_atomic, write_json_atomic
from engine.content import content_hash

PNG_KEY = "Description"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG_ELEMENT = "studio-provenance"
SIDECAR_SUFFIX = ".provenance.json"
EMBEDDED = (".png", ".svg", ".pdf")
PACKAGES = ("numpy", "scipy", "torch", "PySide6", "pyqtgraph", "matplotlib", "nibabel",
            "rdkit", "pandas", "sae_lens", "ray")
MARK = "studio"  # the key a record always has: how a reader tells ours from other text


def record(sources: Iterable[str | Path] = (), view: dict | None = None,
           runs: Iterable[dict] = (), **extra: Any) -> dict:
    """A provenance record: the source files named by resolved path and content hash."""
    listed = []
    for source in sources:
        path = Path(source).expanduser()
        entry: dict[str, Any] = {"path": str(path.resolve())}
        if path.exists():
            entry["hash"] = content_hash(path.resolve())
            entry["size"] = path.stat().st_size if path.is_file() else None
        listed.append(entry)
    return {MARK: studio_version(), "written": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                             time.gmtime()),
            "sources": listed, "view": dict(view or {}), "runs": [dict(r) for r in runs],
            "versions": loaded_versions(), "commit": checkout_commit(), **extra}


RUN_DEPTH = 4  # how far up from a file its run folder is looked for (<run>/artifacts/x/y)


def run_folder(path: str | Path) -> Path | None:
    """The run folder a file was written in: the nearest of its ``RUN_DEPTH`` parents that
    holds a ``params.json`` (not an unrelated one far up), else ``None``."""
    for folder in list(Path(path).resolve().parents)[:RUN_DEPTH]:
        if (folder / "params.json").is_file():
            return folder
    return None


def run_entry(run_dir: str | Path) -> dict:
    """A run as provenance names it, from its ``params.json`` (id, method, params, seed)."""
    run_dir = Path(run_dir)
    try:
        params = json.loads((run_dir / "params.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        params = {}
    return {"run_id": run_dir.name, "method": params.get("method"),
            "params": params.get("params", {}), "seed": params.get("seed")}


def studio_version() -> str:
    from engine import __version__

    return __version__


def loaded_versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__version__", None):
            found[name] = str(module.__version__)
    return found


def checkout_commit() -> str | None:
    """The commit of the checkout Studio runs from (read from .git; None when installed)."""
    git = Path(__file__).resolve().parent.parent / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        if (git / ref).exists():
            return (git / ref).read_text().strip()
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0]
    except OSError:
        return None
    return None


# -- writing --------------------------------------------------------------------------------

def write(path: str | Path, data: bytes, provenance: dict) -> Path:
    """Write ``data`` atomically with ``provenance`` in it (PNG, SVG) or beside it."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix == ".png":
        return write_bytes_atomic(target, embed_png(data, provenance))
    if suffix == ".svg":
        return write_bytes_atomic(target, embed_svg(data.decode("utf-8"), provenance).encode())
    if suffix == ".pdf":
        try:
            return write_bytes_atomic(target, embed_pdf(data, provenance))
        except ValueError:  # no classic trailer to update: the record goes beside it
            pass
    written = write_bytes_atomic(target, data)
    write_sidecar(target, provenance)
    return written


def write_sidecar(path: str | Path, provenance: dict) -> Path:
    """``<name>.provenance.json`` beside a file whose format has no place for it."""
    target = Path(path)
    return write_json_atomic(target.with_name(target.name + SIDECAR_SUFFIX), provenance)


def embed_png(data: bytes, provenance: dict) -> bytes:
    """The PNG with an iTXt ``Description`` chunk (before IEND) holding the record."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG")
    text = json.dumps(provenance, sort_keys=True, default=str).encode("utf-8")
    body = PNG_KEY.encode("latin-1") + b"\0\0\0" + b"\0" + b"\0" + text
    chunk = struct.pack(">I", len(body)) + b"iTXt" + body + struct.pack(
        ">I", zlib.crc32(b"iTXt" + body) & 0xFFFFFFFF)
    end = data.rfind(b"IEND") - 4
    if end < len(PNG_SIGNATURE):
        raise ValueError("a PNG without its end chunk")
    return data[:end] + chunk + data[end:]


def embed_svg(svg: str, provenance: dict) -> str:
    found = re.search(r"<svg\b[^>]*>", svg)
    if found is None:
        raise ValueError("not an SVG")
    text = escape(json.dumps(provenance, sort_keys=True, default=str))
    element = f'\n<metadata id="{SVG_ELEMENT}">{text}</metadata>'
    return svg[:found.end()] + element + svg[found.end():]


def embed_pdf(data: bytes, provenance: dict) -> bytes:
    """The PDF with an incremental update whose document information holds the record in
    ``Subject`` (what ``pdf_metadata`` gives matplotlib), for PDFs drawn by Qt. Needs a
    classic trailer (``ValueError`` otherwise: cross-reference streams are not rewritten)."""
    trailer = data.rfind(b"trailer")
    start = data.rfind(b"startxref")
    if trailer < 0 or start < trailer:
        raise ValueError("no classic PDF trailer")
    size = re.search(rb"/Size\s+(\d+)", data[trailer:start])
    root = re.search(rb"/Root\s+(\d+\s+\d+\s+R)", data[trailer:start])
    previous = re.search(rb"startxref\s+(\d+)", data[start:])
    if not (size and root and previous):
        raise ValueError("an incomplete PDF trailer")
    number = int(size.group(1))
    text = json.dumps(provenance, sort_keys=True, default=str)
    literal = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    body = data if data.endswith(b"\n") else data + b"\n"
    info_at = len(body)
    info = (f"{number} 0 obj\n<< /Creator (Studio) /Subject ({literal}) >>\nendobj\n"
            ).encode("latin-1")
    xref_at = info_at + len(info)
    update = (f"xref\n{number} 1\n{info_at:010d} 00000 n \ntrailer\n<< /Size {number + 1} "
              f"/Root {root.group(1).decode()} /Info {number} 0 R "
              f"/Prev {previous.group(1).decode()} >>\nstartxref\n{xref_at}\n%%EOF\n")
    return body + info + update.encode("latin-1")


def pdf_metadata(provenance: dict) -> dict[str, str]:
    """The document information matplotlib writes into a PDF (``savefig(metadata=...)``)."""
    return {"Creator": "Studio", "Subject": json.dumps(provenance, sort_keys=True, default=str)}


# -- reading --------------------------------------------------------------------------------

def read(path: str | Path) -> dict | None:
    """The record an export carries (in it, or in its sidecar); ``None`` when none."""
    target = Path(path)
    suffix = target.suffix.lower()
    found: dict | None = None
    try:
        if suffix == ".png":
            found = _first_record(text for key, text in png_texts(target.read_bytes())
                                  if key == PNG_KEY)
        elif suffix == ".svg":
            found = _svg_record(target.read_text(encoding="utf-8", errors="replace"))
        elif suffix == ".pdf":
            found = _first_record(reversed(pdf_info_strings(target.read_bytes(), "Subject")))
    except OSError:
        return None
    sidecar = target.with_name(target.name + SIDECAR_SUFFIX)
    if found is None and sidecar.exists():
        found = _first_record([sidecar.read_text(encoding="utf-8", errors="replace")])
    return found


def png_texts(data: bytes) -> list[tuple[str, str]]:
    """Every text chunk (tEXt, zTXt, iTXt) of a PNG as (keyword, text)."""
    texts = []
    offset = len(PNG_SIGNATURE)
    while offset + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        offset += 12 + length
        try:
            if kind == b"tEXt":
                key, _, text = body.partition(b"\0")
                texts.append((key.decode("latin-1"), text.decode("latin-1")))
            elif kind == b"zTXt":
                key, _, rest = body.partition(b"\0")
                texts.append((key.decode("latin-1"), zlib.decompress(rest[1:]).decode("latin-1")))
            elif kind == b"iTXt":
                key, _, rest = body.partition(b"\0")
                compressed = rest[0] == 1
                _language, _, rest = rest[2:].partition(b"\0")
                _translated, _, text = rest.partition(b"\0")
                text = zlib.decompress(text) if compressed else text
                texts.append((key.decode("latin-1"), text.decode("utf-8")))
        except (zlib.error, UnicodeDecodeError, IndexError):
            continue  # a damaged chunk says nothing
        if kind == b"IEND":
            break
    return texts


def pdf_info_strings(data: bytes, key: str) -> list[str]:
    """The values of ``/<key>`` in a PDF's document information (literal or hex strings)."""
    values = []
    for found in re.finditer(rb"/" + key.encode() + rb"\s*(\(|<)", data):
        start = found.end()
        if found.group(1) == b"<":
            end = data.find(b">", start)
            try:
                raw = bytes.fromhex(data[start:end].decode("ascii", "replace"))
            except ValueError:  # odd-length or unterminated: another program's, not ours
                continue
            values.append(raw[2:].decode("utf-16-be", "replace") if raw[:2] == b"\xfe\xff"
                          else raw.decode("latin-1"))
        else:
            values.append(_pdf_literal(data, start))
    return values


def _pdf_literal(data: bytes, start: int) -> str:
    """A PDF literal string from just after its ``(``: escapes and nested parentheses."""
    out = bytearray()
    depth, i = 1, start
    escapes = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b",
               ord("f"): b"\f", ord("("): b"(", ord(")"): b")", ord("\\"): b"\\"}
    while i < len(data):
        byte = data[i]
        if byte == ord("\\") and i + 1 < len(data):
            nxt = data[i + 1]
            if nxt in escapes:
                out += escapes[nxt]
                i += 2
                continue
            octal = re.match(rb"[0-7]{1,3}", data[i + 1:i + 4])
            if octal:
                out.append(int(octal.group(), 8) & 0xFF)
                i += 1 + len(octal.group())
                continue
            i += 2  # a line continuation or an unknown escape
            continue
        if byte == ord("("):
            depth += 1
        elif byte == ord(")"):
            depth -= 1
            if depth == 0:
                break
        out.append(byte)
        i += 1
    if out[:2] == b"\xfe\xff":
        return bytes(out[2:]).decode("utf-16-be", "replace")
    return bytes(out).decode("latin-1")


def _svg_record(svg: str) -> dict | None:
    found = re.search(rf'<metadata id="{SVG_ELEMENT}">(.*?)</metadata>', svg, re.S)
    if found:
        return _first_record([unescape(found.group(1))])
    described = re.search(r"<dc:description>(.*?)</dc:description>", svg, re.S)
    return _first_record([unescape(described.group(1))]) if described else None


def _first_record(texts: Iterable[str]) -> dict | None:
    """The first text that is a provenance record (JSON with ``studio`` or the older
    ``studio_version`` key); other software's descriptions are not ours."""
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and (MARK in value or "studio_version" in value):
            return value
    return None
