"""Violation markers of a routed design, and the report files that carry them.

A ``Marker`` is one finding (a short, an open, a spacing violation, …) with the nets and layer
it concerns and its box in µm. Our own checks (``panels.routing.checks``) make them; so do the
reports other tools write, read here: KLayout report databases (``.lyrdb``, XML: categories,
cells, items whose values are ``box: (x1,y1;x2,y2)`` in µm) and TritonRoute / OpenROAD
detailed-route DRC reports (``violation type: …`` / ``srcs: …`` / ``bbox = ( x1, y1 ) - ( x2,
y2 ) on Layer …``). ``check_against`` compares imported markers with the open design and
lists every mismatch (another design, an unknown layer, a box outside the die) so a marker is
never drawn in the wrong place silently. Written as CSV or ``.lyrdb`` (KLayout opens it).
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from engine.atomic import write_bytes_atomic
from engine.io import FormatError

Box = tuple[float, float, float, float]
CSV_COLUMNS = ["category", "nets", "layer", "x1_um", "y1_um", "x2_um", "y2_um", "text",
               "source", "waived"]
_DIGITS = re.compile(r"(\d+)")
_NUMBER = r"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
_BOX_VALUE = re.compile(r"^\s*box\s*:\s*\(\s*" + r"\s*[,;]\s*".join([_NUMBER] * 4) + r"\s*\)")
_TRITON_BOX = re.compile(r"bbox\s*=\s*\(\s*" + _NUMBER + r"\s*,\s*" + _NUMBER
                         + r"\s*\)\s*-\s*\(\s*" + _NUMBER + r"\s*,\s*" + _NUMBER
                         + r"\s*\)\s*on\s+Layer\s+(\S+)", re.IGNORECASE)


def natural_key(name: str) -> tuple:
    """Sort key reading digit runs as numbers: ``resp_msg[2]`` before ``resp_msg[15]``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part.lower())
                 for part in _DIGITS.split(name) if part)


@dataclass(frozen=True)
class Marker:
    """One finding. ``nets`` as the report names them; ``box`` in µm; ``problem``: why it is
    not drawn (empty when it fits the open design)."""

    category: str
    nets: tuple[str, ...]
    layer: str
    box: Box
    text: str = ""
    source: str = "checks"
    problem: str = ""

    @cached_property
    def name(self) -> str:
        """How the browser lists it and commands name it (stable across sessions)."""
        x1, y1, x2, y2 = self.box
        nets = "/".join(self.nets) or "-"
        return f"{self.category} {nets} {self.layer or '-'} ({x1:.3f}, {y1:.3f})-" \
               f"({x2:.3f}, {y2:.3f})"

    @property
    def centre(self) -> tuple[float, float]:
        return (self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2


@dataclass
class Report:
    """Markers read from a file and what in it does not fit the design."""

    path: str
    design: str = ""                     # the design (top cell) the file says it is for
    markers: list[Marker] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)


def sort_markers(markers: list[Marker]) -> list[Marker]:
    """By category (any case), then net (naturally), layer and place."""
    return sorted(markers, key=lambda m: (m.category.lower(), natural_key("/".join(m.nets)),
                                          m.layer, m.box))


# -- reading ---------------------------------------------------------------------------------


def read_report(path: str | Path) -> Report:
    """A ``.lyrdb`` (XML) or a TritonRoute/OpenROAD DRC report (``.rpt``, ``.drc``, text)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    if path.suffix.lower() in (".lyrdb", ".xml") or text.lstrip().startswith("<"):
        return read_lyrdb(text, str(path))
    return read_drc(text, str(path))


def read_lyrdb(text: str, path: str) -> Report:
    """KLayout's report database: each item's category path, cell and its first box value
    (µm); an item without a box is listed as a mismatch."""
    try:
        root = ElementTree.fromstring(text)  # the standard parser expands no external entities
    except ElementTree.ParseError as exc:
        raise FormatError(path, f"not a KLayout report database: {exc}") from None
    if root.tag != "report-database":
        raise FormatError(path, f"not a KLayout report database (root <{root.tag}>)")
    report = Report(path, (root.findtext("top-cell") or "").strip())
    for number, item in enumerate(root.iter("item"), start=1):
        category = (item.findtext("category") or "").strip().strip("'\"") or "uncategorised"
        box, notes = None, []
        for value in item.iter("value"):
            content = (value.text or "").strip()
            found = _BOX_VALUE.match(content)
            if found and box is None:
                x1, y1, x2, y2 = (float(v) for v in found.groups())
                box = (min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2))
            elif content.startswith("text:"):
                notes.append(_unquote(content[5:].strip()))
        if box is None:
            report.mismatches.append(f"item {number} ({category}): no box value, not drawn")
            continue
        nets, layer = _nets_and_layer(notes)
        text = "; ".join(n for n in notes if not n.startswith(("nets:", "layer:")))
        report.markers.append(Marker(category, nets, layer, box, text, Path(path).name))
    return report


def _unquote(text: str) -> str:
    """A report database's quoted string (backslash escapes) as plain text."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return re.sub(r"\\(.)", r"\1", text)


def _nets_and_layer(notes: list[str]) -> tuple[tuple[str, ...], str]:
    """Our own ``nets: a b`` / ``layer: m`` notes (files we wrote) back as fields."""
    nets: tuple[str, ...] = ()
    layer = ""
    for note in notes:
        if note.startswith("nets:"):
            nets = tuple(note[5:].split())
        elif note.startswith("layer:"):
            layer = note[6:].strip()
    return nets, layer


def read_drc(text: str, path: str) -> Report:
    """A detailed router's DRC report: ``violation type: T``, then ``srcs: …`` and
    ``bbox = ( x1, y1 ) - ( x2, y2 ) on Layer L`` lines (µm)."""
    report = Report(path)
    category, nets = "", ()
    seen_violation = False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        lowered = stripped.lower()
        if lowered.startswith("violation type:"):
            category, nets, seen_violation = stripped.split(":", 1)[1].strip(), (), True
        elif lowered.startswith("srcs:"):
            nets = tuple(word.split(":", 1)[-1] for word in stripped[5:].split()
                         if not word.lower().startswith(("blockage", "pin:")))
        elif lowered.startswith("bbox"):
            found = _TRITON_BOX.search(stripped)
            if found is None or not category:
                report.mismatches.append(f"line {number}: a bbox this reader cannot place: "
                                         f"{stripped[:80]}")
                continue
            x1, y1, x2, y2 = (float(v) for v in found.groups()[:4])
            report.markers.append(Marker(category, nets, found.group(5),
                                         (min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)),
                                         source=Path(path).name))
    if not seen_violation:
        raise FormatError(path, "not a DRC report: no 'violation type:' line")
    return report


def check_against(report: Report, design_name: str, layers: list[str], nets: set[str],
                  die_um: Box | None) -> Report:
    """The report's markers with ``problem`` set where they do not fit the design (another
    design, an unknown layer or net, outside the die), each also said in ``mismatches``."""
    checked = []
    if report.design and design_name and report.design != design_name:
        report.mismatches.insert(0, f"the report is for design {report.design!r}, the open "
                                    f"one is {design_name!r}: its markers are not drawn")
    for marker in report.markers:
        problems = []
        if report.design and design_name and report.design != design_name:
            problems.append(f"design {report.design}")
        if marker.layer and marker.layer not in layers:
            problems.append(f"unknown layer {marker.layer}")
        unknown = [n for n in marker.nets if n not in nets]
        if unknown:
            problems.append(f"unknown net {', '.join(unknown[:3])}")
        if die_um is not None and not _inside(marker.box, die_um):
            problems.append("outside the die")
        if problems:
            marker = replace(marker, problem="; ".join(problems))
            report.mismatches.append(f"{marker.name}: {marker.problem}")
        checked.append(marker)
    report.markers = checked
    return report


def _inside(box: Box, die: Box, slack: float = 1e-6) -> bool:
    return (box[0] >= die[0] - slack and box[1] >= die[1] - slack
            and box[2] <= die[2] + slack and box[3] <= die[3] + slack)


# -- writing ---------------------------------------------------------------------------------


def markers_csv(markers: list[Marker], waived: set[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for m in markers:
        writer.writerow([m.category, " ".join(m.nets), m.layer,
                         *(f"{v:.4f}" for v in m.box), m.problem or m.text, m.source,
                         "yes" if m.name in waived else ""])
    return out.getvalue()


def markers_lyrdb(markers: list[Marker], design: str, waived: set[str],
                  description: str = "") -> str:
    """A KLayout report database: one category per marker category, one cell (the design),
    each item's box in µm with its nets and layer as text values; waived items tagged."""
    root = ElementTree.Element("report-database")
    ElementTree.SubElement(root, "description").text = description or f"Markers of {design}"
    ElementTree.SubElement(root, "original-file")
    ElementTree.SubElement(root, "generator").text = "studio route canvas"
    ElementTree.SubElement(root, "top-cell").text = design
    tags = ElementTree.SubElement(root, "tags")
    tag = ElementTree.SubElement(tags, "tag")
    ElementTree.SubElement(tag, "name").text = "waived"
    ElementTree.SubElement(tag, "description").text = "waived in the route canvas"
    categories = ElementTree.SubElement(root, "categories")
    for name in sorted({m.category for m in markers}):
        category = ElementTree.SubElement(categories, "category")
        ElementTree.SubElement(category, "name").text = name
        ElementTree.SubElement(category, "description").text = name
        ElementTree.SubElement(category, "categories")
    cells = ElementTree.SubElement(root, "cells")
    cell = ElementTree.SubElement(cells, "cell")
    ElementTree.SubElement(cell, "name").text = design
    ElementTree.SubElement(cell, "variant")
    ElementTree.SubElement(cell, "references")
    items = ElementTree.SubElement(root, "items")
    for m in markers:
        item = ElementTree.SubElement(items, "item")
        ElementTree.SubElement(item, "tags").text = "waived" if m.name in waived else None
        ElementTree.SubElement(item, "category").text = f"'{m.category}'"
        ElementTree.SubElement(item, "cell").text = design
        ElementTree.SubElement(item, "visited").text = "false"
        ElementTree.SubElement(item, "multiplicity").text = "1"
        values = ElementTree.SubElement(item, "values")
        x1, y1, x2, y2 = m.box
        ElementTree.SubElement(values, "value").text = f"box: ({x1:.4f},{y1:.4f};{x2:.4f},{y2:.4f})"
        for note in (f"nets: {' '.join(m.nets)}" if m.nets else "",
                     f"layer: {m.layer}" if m.layer else "", m.text):
            if note:
                quoted = note.replace("\\", "\\\\").replace("'", "\\'")
                ElementTree.SubElement(values, "value").text = f"text: '{quoted}'"
    ElementTree.indent(root, " ")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(
        root, encoding="unicode") + "\n"


def write_markers(path: str | Path, markers: list[Marker], design: str,
                  waived: set[str]) -> Path:
    """CSV or ``.lyrdb`` by the suffix, written atomically."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        text = markers_csv(markers, waived)
    elif suffix in (".lyrdb", ".xml"):
        text = markers_lyrdb(markers, design, waived)
    else:
        raise ValueError(f"{path}: markers are written as .csv or .lyrdb")
    write_bytes_atomic(path, text.encode("utf-8"))
    return path
