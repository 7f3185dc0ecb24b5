"""What the routing edit tests check, computed from the design's arrays rather than through the
model's own helpers: a canonical summary of the wiring, and whether the panel's pick is live."""

from __future__ import annotations

import numpy as np

from engine.vlsi.def_ import SEG, VIA
from panels.routing.model import RouteModel


def wiring(model: RouteModel) -> list[tuple]:
    """Every net's segments and vias by names, sorted: equal for equal wiring, whatever the
    rows' order (a DEF round trip, an undone delete and a replay may order rows differently)."""
    design = model.design
    rows: list[tuple] = []
    for r in design.segments.tolist():
        rows.append(("segment", design.nets[r[SEG["net"]]].name,
                     design.layer_names[r[SEG["layer"]]], *r[SEG["x1"]:]))
    for r in design.vias_placed.tolist():
        rows.append(("via", design.nets[r[VIA["net"]]].name, design.via_names[r[VIA["via"]]],
                     r[VIA["x"]], r[VIA["y"]], r[VIA["orient"]]))
    return sorted(rows)


def _net_has(model: RouteModel, kind: str, row: list) -> bool:
    design = model.design
    segments, vias = design.net_wiring(model.selected)
    if kind == "segment":
        return any([design.layer_names[r[SEG["layer"]]], *r[SEG["x1"]:]] == list(row)
                   for r in segments.tolist())
    return any([design.layer_names[r[VIA["layer"]]], design.via_names[r[VIA["via"]]],
                r[VIA["x"]], r[VIA["y"]], r[VIA["orient"]]] == list(row) for r in vias.tolist())


def pick_problem(panel) -> str | None:
    """What is wrong with the routing panel's pick (None: nothing): it must name an element
    of the selected net that exists, highlighted where it is and described in the "Picked"
    text; without a pick, neither highlight nor text."""
    chosen = panel.canvas.drawn_points(panel.canvas.chosen)
    text = panel.check_info.text()
    if panel.element is None:
        if chosen:
            return f"a highlight of {chosen} point(s) without a pick"
        return "a 'Picked' text without a pick" if "Picked" in text else None
    kind, row = panel.element
    if panel.model.selected is None or not _net_has(panel.model, kind, row):
        return f"the pick {panel.element} is not in the selected net"
    x, y = panel.canvas.chosen.getData()
    scale = panel.model.design.dbu_per_micron
    if kind == "segment":
        expected = np.array([row[1:3], row[3:5]]) / scale
        if x is None or not np.allclose(np.c_[x, y], expected):
            return f"the highlight is not at the picked wire {row}"
    elif x is None or not np.allclose([np.mean(x), np.mean(y)], np.array(row[2:4]) / scale):
        return f"the highlight is not at the picked via {row}"
    if "Picked " + panel.describe_element(kind, row) not in text:
        return f"the 'Picked' text does not describe {panel.element}: {text!r}"
    return None
