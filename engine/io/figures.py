"""Exported figures (PNG, SVG, PDF): ``studio-engine inspect FIGURE`` prints where one came
from (``engine.provenance``): its source files, the view that made it, runs and versions."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from engine import provenance
from engine.io import Format, FormatError


def _sniff_png(path: Path, head: bytes) -> int:
    return 90 if head.startswith(provenance.PNG_SIGNATURE) else 0


def _sniff_svg(path: Path, head: bytes) -> int:
    return 80 if b"<svg" in head[:4096] and path.suffix.lower() == ".svg" else 0


def _sniff_pdf(path: Path, head: bytes) -> int:
    return 90 if head.startswith(b"%PDF-") else 0


def _inspect_png(path: Path) -> dict:
    with open(path, "rb") as stream:
        head = stream.read(24)
    if len(head) < 24 or head[12:16] != b"IHDR":
        raise FormatError(path, "a PNG without its header chunk")
    width, height = struct.unpack(">II", head[16:24])
    return _report(path, {"width": width, "height": height})


def _inspect_svg(path: Path) -> dict:
    return _report(path, {})


def _inspect_pdf(path: Path) -> dict:
    return _report(path, {})


def _report(path: Path, summary: dict) -> dict:
    """The figure's summary with its provenance, each part on a line of its own."""
    found = provenance.read(path)
    if found is None:
        summary["provenance"] = "none (not exported by Studio, or written before it said)"
        return {"summary": summary, "metadata": {}}
    for key, value in found.items():
        summary[key] = value if isinstance(value, str | int | float) or value is None \
            else json.dumps(value, sort_keys=True, default=str)
    return {"summary": summary, "metadata": {"provenance": found}}


FORMATS = [
    Format("png", "PNG image", (".png",), _sniff_png, _inspect_png, panel="lab",
           kinds=("figure",)),
    Format("svg", "SVG drawing", (".svg",), _sniff_svg, _inspect_svg, panel="lab",
           kinds=("figure",)),
    Format("pdf", "PDF document", (".pdf",), _sniff_pdf, _inspect_pdf, panel="lab",
           kinds=("figure",)),
]
