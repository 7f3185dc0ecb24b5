"""LEF and DEF in the format registry: what ``studio-engine inspect`` says about a design.

A DEF alone reports its design, components, pins, nets and their wiring (segments and vias per
layer); with a LEF (``inspect_design(def_path, lef_path)``) layer names are also checked against
the technology. A LEF reports its layers (type, direction, pitch, width), vias and cells.
Route guides (``.guide``) report their nets and rectangles per layer (``inspect_guides(guide,
lef)`` also checks the layer names).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from engine.io import Format, extension_of

DEF_CONTENT = re.compile(rb"^\s*(DESIGN|DIEAREA|COMPONENTS)\s", re.MULTILINE)
LEF_CONTENT = re.compile(rb"^\s*(LAYER|MACRO|VIA|SITE)\s+\S+\s*$", re.MULTILINE)
# A net name, "(", then a rectangle "x1 y1 x2 y2 layer": the start of a guide block.
GUIDE_CONTENT = re.compile(rb"^\s*\S+\s*\n\s*\(\s*\n\s*(-?\d+\s+){4}\S+\s*$", re.MULTILINE)


def _sniff_def(path: Path, head: bytes) -> int:
    if extension_of(path) != ".def":
        return 0
    return 2 if DEF_CONTENT.search(head) else 1


def _sniff_lef(path: Path, head: bytes) -> int:
    if extension_of(path) not in (".lef", ".tlef"):
        return 0
    return 2 if LEF_CONTENT.search(head) or b"UNITS" in head else 1


def _sniff_guide(path: Path, head: bytes) -> int:
    if extension_of(path) != ".guide":
        return 0
    return 2 if GUIDE_CONTENT.search(head) else 1


def inspect_design(def_path: str | Path, lef_path: str | Path | None = None) -> dict:
    """``{summary, metadata}`` of a DEF, its names checked against ``lef_path`` when given."""
    from engine.vlsi.def_ import SEG, VIA, read_def
    from engine.vlsi.lef import read_lef

    lef = read_lef(lef_path) if lef_path else None
    design = read_def(def_path, lef)
    per_layer = {name: int(np.sum(design.segments[:, SEG["layer"]] == i))
                 for i, name in enumerate(design.layer_names)}
    per_via = {name: int(np.sum(design.vias_placed[:, VIA["via"]] == i))
               for i, name in enumerate(design.via_names)}
    scale = design.dbu_per_micron
    summary = design.summary() | {"layers": len(design.layer_names)}
    die = design.die_area
    metadata = {
        "dbu_per_micron": scale,
        "die_area_um": [v / scale for v in die] if die else [],
        "gcell_grid": {axis: list(v) for axis, v in design.gcell_grid.items()},
        "rows": len(design.rows),
        "segments_per_layer": {k: v for k, v in per_layer.items() if v},
        "vias_per_type": per_via,
        "def_vias": list(design.vias),
        "warnings": design.warnings,
        "lef": str(lef_path) if lef_path else None,
    }
    return {"summary": summary, "metadata": metadata}


def inspect_guides(guide_path: str | Path, lef_path: str | Path | None = None) -> dict:
    """``{summary, metadata}`` of a route guide file, its layers checked against ``lef_path``
    when given."""
    from engine.vlsi.guide import RECT, read_guides
    from engine.vlsi.lef import read_lef

    guides = read_guides(guide_path, read_lef(lef_path) if lef_path else None)
    counts = guides.summary()
    rects = guides.rects
    box = ([int(rects[:, RECT[c]].min()) for c in ("x1", "y1")]
           + [int(rects[:, RECT[c]].max()) for c in ("x2", "y2")]) if len(rects) else []
    summary = {k: counts[k] for k in ("nets", "rectangles", "layers", "rectangles_per_layer")}
    metadata = {"nets_per_layer": counts["nets_per_layer"],
                "nets_without_rectangles": len(guides.nets) - len(set(
                    rects[:, RECT["net"]].tolist())),
                "bounding_box_dbu": box, "lef": str(lef_path) if lef_path else None}
    return {"summary": summary, "metadata": metadata}


def inspect_with_lef(path: str | Path, lef_path: str | Path) -> dict:
    """What ``studio-engine inspect FILE --lef LEF`` prints: ``inspect_file``'s report of a
    DEF or guide file whose layer (and via) names are checked against the LEF."""
    from engine.io import FormatError, detect

    fmt = detect(path)
    readers = {"def": inspect_design, "guide": inspect_guides}
    if fmt.name not in readers:
        raise FormatError(path, f"--lef applies to DEF and route guide files, not "
                                f"{fmt.description}")
    report = readers[fmt.name](path, lef_path)
    return {"path": str(path), "format": fmt.name, "panel": fmt.panel, **report}


def _inspect_def(path: Path) -> dict:
    return inspect_design(path)


def _inspect_lef(path: Path) -> dict:
    from engine.vlsi.lef import read_lef

    lef = read_lef(path)
    layers = [{"name": layer.name, "type": layer.type, "direction": layer.direction,
               "pitch_um": layer.pitch, "width_um": layer.width} for layer in lef.layers.values()]
    summary = {"layers": len(lef.layers), "routing_layers": len(lef.routing_layers),
               "vias": len(lef.vias), "via_rules": len(lef.via_rules),
               "macros": len(lef.macro_names), "sites": len(lef.sites)}
    metadata = {"dbu_per_micron": lef.dbu_per_micron,
                "manufacturing_grid_um": lef.manufacturing_grid, "layer_stack": layers,
                "vias": list(lef.vias), "sites": {k: list(v) for k, v in lef.sites.items()},
                "macros": lef.macro_names}
    return {"summary": summary, "metadata": metadata}


FORMATS = [
    Format("def", "DEF design (placed and routed layout)", (".def",), _sniff_def, _inspect_def,
           panel="routing", kinds=("design",)),
    Format("lef", "LEF technology and cell library", (".lef", ".tlef"), _sniff_lef,
           _inspect_lef, panel="routing", kinds=("technology",)),
    Format("guide", "route guides (OpenROAD/TritonRoute global routes)", (".guide",),
           _sniff_guide, inspect_guides, panel="routing", kinds=("guides",)),
]
