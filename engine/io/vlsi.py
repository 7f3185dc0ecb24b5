"""LEF and DEF in the format registry: what ``studio-engine inspect`` says about a design.

A DEF alone reports its design, components, pins, nets and their wiring (segments and vias per
layer); with a LEF (``inspect_design(def_path, lef_path)``) layer names are also checked against
the technology. A LEF reports its layers (type, direction, pitch, width), vias and cells.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from engine.io import Format, extension_of

DEF_CONTENT = re.compile(rb"^\s*(DESIGN|DIEAREA|COMPONENTS)\s", re.MULTILINE)
LEF_CONTENT = re.compile(rb"^\s*(LAYER|MACRO|VIA|SITE)\s+\S+\s*$", re.MULTILINE)


def _sniff_def(path: Path, head: bytes) -> int:
    if extension_of(path) != ".def":
        return 0
    return 2 if DEF_CONTENT.search(head) else 1


def _sniff_lef(path: Path, head: bytes) -> int:
    if extension_of(path) not in (".lef", ".tlef"):
        return 0
    return 2 if LEF_CONTENT.search(head) or b"UNITS" in head else 1


def inspect_design(def_path: str | Path, lef_path: str | Path | None = None) -> dict:
    """``{summary, metadata}`` of a DEF, its names checked against ``lef_path`` when given."""
    from engine.vlsi.def_ import SEG, VIA, read_def
    from engine.vlsi.lef import read_lef

    lef = read_lef(lef_path) if lef_path else None
    design = read_def(def_path, lef)
    special = np.array([n.special for n in design.nets], dtype=bool)
    seg_special = special[design.segments[:, SEG["net"]]] if len(design.segments) else []
    via_special = special[design.vias_placed[:, VIA["net"]]] if len(design.vias_placed) else []
    per_layer = {name: int(np.sum(design.segments[:, SEG["layer"]] == i))
                 for i, name in enumerate(design.layer_names)}
    per_via = {name: int(np.sum(design.vias_placed[:, VIA["via"]] == i))
               for i, name in enumerate(design.via_names)}
    scale = design.dbu_per_micron
    summary = {
        "design": design.name,
        "components": len(design.components),
        "pins": len(design.pins),
        "nets": int((~special).sum()),
        "special_nets": int(special.sum()),
        "routed_nets": len({int(i) for i in design.segments[:, 0]}
                           | {int(i) for i in design.vias_placed[:, 0]}),
        "segments": int(np.sum(~np.asarray(seg_special, dtype=bool))),
        "vias": int(np.sum(~np.asarray(via_special, dtype=bool))),
        "special_segments": int(np.sum(seg_special)),
        "special_vias": int(np.sum(via_special)),
        "layers": len(design.layer_names),
    }
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
]
