"""Our own design-wide checks as markers (``engine.vlsi.markers.Marker``), without Qt.

Opens (a routed net in pieces or missing pins), shorts (same-layer overlap of two nets),
unrouted multi-pin nets (pins to join, no wiring; a one-pin net needs none and is no marker),
off-track wires (a wire's fixed coordinate not on its layer's DEF TRACKS), width (a wire
narrower than the LEF's WIDTH), spacing (two nets' metal on a layer closer than the LEF's
SPACING without touching) and GCell overflow (demand over the GCell's track capacity). Runs on
the panel's worker thread after every load and edit.
"""

from __future__ import annotations

import numpy as np

from engine.vlsi.def_ import SEG, Design
from engine.vlsi.lef import Lef
from engine.vlsi.markers import Marker
from panels.routing.geometry import Checker, congestion, net_lengths

SPACING_LIMIT = 20000  # spacing pairs reported at most (a broken LEF must not flood the list)


def unrouted_multi_pin(design: Design) -> tuple[list[int], list[int]]:
    """(signal nets with two or more pins and no wiring, signal nets with one pin and none)."""
    _length, segments, vias = net_lengths(design)
    empty = [i for i, net in enumerate(design.nets)
             if not net.special and segments[i] == 0 and vias[i] == 0]
    return ([i for i in empty if len(design.nets[i].pins) >= 2],
            [i for i in empty if len(design.nets[i].pins) < 2])


def design_markers(design: Design, lef: Lef | None, checker: Checker | None = None,
                   stopped=lambda: False) -> list[Marker]:
    """Every marker of our checks (``stopped()`` True: give up early, return what is found)."""
    checker = checker or Checker(design, lef)
    scale = design.dbu_per_micron
    markers: list[Marker] = []
    markers += _shorts(design, checker)
    if stopped():
        return markers
    markers += _opens(design, checker, stopped)
    markers += _unrouted(design, checker)
    markers += _off_track(design)
    if lef is not None:
        markers += _width(design, lef)
        markers += _spacing(design, lef, checker)
        markers += _overflow(design, lef, scale)
    return markers


def _box(rects: np.ndarray, scale: float) -> tuple[float, float, float, float]:
    lo, hi = rects[:, :2].min(0) / scale, rects[:, 2:].max(0) / scale
    return (float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1]))


def _shorts(design: Design, checker: Checker) -> list[Marker]:
    found = []
    seen: set[tuple[str, str, str]] = set()
    for index in sorted(checker.all_shorts()):
        mine = design.nets[index].name
        for other, layer, (x, y) in checker.shorts(index):
            key = (min(mine, other), max(mine, other), layer)
            if key in seen:
                continue
            seen.add(key)
            found.append(Marker("short", key[:2], layer, (x - 0.05, y - 0.05, x + 0.05, y + 0.05),
                                f"{mine} and {other} overlap on {layer}"))
    return found


def _opens(design: Design, checker: Checker, stopped) -> list[Marker]:
    """A routed net that is not one connected tree reaching all its pins."""
    _length, segments, _vias = net_lengths(design)
    scale = design.dbu_per_micron
    found = []
    for index, net in enumerate(design.nets):
        if net.special or segments[index] == 0:
            continue
        if stopped():
            break
        state = checker.connectivity(index)
        if state.connected:
            continue
        rows, vias = design.net_wiring(index)
        rects, layers, _, _ = checker.metal(rows, vias)
        pins = {label: shapes for label, _layer, shapes in checker.pin_shapes(index)}
        shown = [pins[label] for label in state.unreached if label in pins]
        box = _box(np.concatenate(shown) if shown else rects, scale)
        layer = design.layer_names[int(layers[0])] if len(layers) else ""
        found.append(Marker("open", (net.name,), layer, box, state.describe()))
    return found


def _unrouted(design: Design, checker: Checker) -> list[Marker]:
    scale = design.dbu_per_micron
    multi, _single = unrouted_multi_pin(design)
    found = []
    for index in multi:
        net = design.nets[index]
        shapes = checker.pin_shapes(index)
        if shapes:
            box = _box(np.concatenate([s for _label, _layer, s in shapes]), scale)
        else:  # no pin geometry (no LEF): the placed components' origins
            places = {c.name: (c.x, c.y) for c in design.components}
            points = np.array([places[c] for c, _pin in net.pins if c in places] or [[0, 0]],
                              dtype=np.float64)
            box = _box(np.c_[points, points], scale)
        found.append(Marker("unrouted", (net.name,), "", box,
                            f"{len(net.pins)} pins, no wiring"))
    return found


def _off_track(design: Design) -> list[Marker]:
    """Wires whose fixed coordinate (y of a horizontal wire, x of a vertical one) is off
    every track of its layer in that axis (layers without TRACKS are not checked)."""
    scale = design.dbu_per_micron
    rows = design.segments
    special = np.array([n.special for n in design.nets], dtype=bool)
    rows = rows[~special[rows[:, SEG["net"]]]] if len(rows) else rows
    found = []
    for layer_id, layer in enumerate(design.layer_names):
        on_layer = rows[rows[:, SEG["layer"]] == layer_id]
        for axis, fixed, other in (("Y", "y1", "y2"), ("X", "x1", "x2")):
            tracks = [(start, count, step) for a, start, count, step, names in design.tracks
                      if a == axis and layer in names and step > 0]
            if not tracks or not len(on_layer):
                continue
            # horizontal wires (y fixed) sit on Y tracks; vertical ones (x fixed) on X tracks
            along = on_layer[(on_layer[:, SEG[fixed]] == on_layer[:, SEG[other]])
                             & ((on_layer[:, SEG["x1"]] != on_layer[:, SEG["x2"]])
                                | (on_layer[:, SEG["y1"]] != on_layer[:, SEG["y2"]]))]
            value = along[:, SEG[fixed]]
            on = np.zeros(len(value), bool)
            for start, count, step in tracks:
                offset = value - start
                on |= (offset % step == 0) & (offset >= 0) & (offset < count * step)
            for row in along[~on]:
                x1, x2 = sorted((row[SEG["x1"]], row[SEG["x2"]]))
                y1, y2 = sorted((row[SEG["y1"]], row[SEG["y2"]]))
                found.append(Marker(
                    "off-track", (design.nets[int(row[SEG["net"]])].name,), layer,
                    (x1 / scale, y1 / scale, x2 / scale, y2 / scale),
                    f"{'y' if axis == 'Y' else 'x'} = {row[SEG[fixed]] / scale:.3f} µm is on "
                    f"no {layer} track"))
    return found


def _width(design: Design, lef: Lef) -> list[Marker]:
    """Wires given an explicit width under the LEF's minimum WIDTH of their layer."""
    scale = design.dbu_per_micron
    rows = design.segments
    found = []
    for row in rows[rows[:, SEG["width"]] > 0] if len(rows) else rows:
        layer = design.layer_names[int(row[SEG["layer"]])]
        rule = lef.layers.get(layer)
        if rule is None or rule.width <= 0 or row[SEG["width"]] >= round(rule.width * scale):
            continue
        x1, x2 = sorted((row[SEG["x1"]], row[SEG["x2"]]))
        y1, y2 = sorted((row[SEG["y1"]], row[SEG["y2"]]))
        found.append(Marker("width", (design.nets[int(row[SEG["net"]])].name,), layer,
                            (x1 / scale, y1 / scale, x2 / scale, y2 / scale),
                            f"width {row[SEG['width']] / scale:.3f} µm < LEF WIDTH "
                            f"{rule.width:.3f} µm"))
    return found


def _spacing(design: Design, lef: Lef, checker: Checker) -> list[Marker]:
    """Two nets' metal on one layer apart by less than the LEF's SPACING (touching or
    overlapping metal is a short, not a spacing violation)."""
    scale = design.dbu_per_micron
    rects, layers, nets, _ = checker.all_metal()
    special = np.array([n.special for n in design.nets], dtype=bool)
    found: list[Marker] = []
    for layer_id in np.unique(layers):
        name = design.layer_names[int(layer_id)]
        rule = lef.layers.get(name)
        if rule is None or rule.spacing <= 0:
            continue
        gap = rule.spacing * scale
        here = np.nonzero((layers == layer_id) & ~special[nets])[0]
        order = here[np.argsort(rects[here, 0], kind="stable")]
        boxes, owner = rects[order], nets[order]
        reach = np.searchsorted(boxes[:, 0], boxes[:, 2] + gap, side="left")
        counts = np.maximum(reach - np.arange(len(boxes)) - 1, 0)
        if not counts.sum():
            continue
        a = np.repeat(np.arange(len(boxes)), counts)
        b = a + 1 + np.arange(len(a)) - np.repeat(np.cumsum(counts) - counts, counts)
        dx = np.maximum(0, np.maximum(boxes[a, 0], boxes[b, 0]) - np.minimum(boxes[a, 2],
                                                                             boxes[b, 2]))
        dy = np.maximum(0, np.maximum(boxes[a, 1], boxes[b, 1]) - np.minimum(boxes[a, 3],
                                                                             boxes[b, 3]))
        distance = np.hypot(dx, dy)
        bad = (owner[a] != owner[b]) & (distance > 0) & (distance < gap - 0.5)
        seen: set[tuple[int, int]] = set()
        for i, j, d in zip(a[bad].tolist(), b[bad].tolist(), distance[bad].tolist(),
                           strict=True):
            pair = (min(int(owner[i]), int(owner[j])), max(int(owner[i]), int(owner[j])))
            if pair in seen:
                continue
            seen.add(pair)
            box = np.r_[np.minimum(boxes[i, :2], boxes[j, :2]),
                        np.maximum(boxes[i, 2:], boxes[j, 2:])]
            found.append(Marker("spacing", tuple(design.nets[n].name for n in pair), name,
                                tuple(float(v) for v in box / scale),
                                f"{d / scale:.3f} µm apart < LEF SPACING {rule.spacing:.3f} µm"))
            if len(found) >= SPACING_LIMIT:
                return found
    return found


def _overflow(design: Design, lef: Lef, scale: float) -> list[Marker]:
    """GCells whose demand exceeds their track capacity (congestion > 1)."""
    if "X" not in design.gcell_grid or "Y" not in design.gcell_grid:
        return []
    demand = congestion(design, lef)
    (x0, _nx, sx), (y0, _ny, sy) = design.gcell_grid["X"], design.gcell_grid["Y"]
    found = []
    for i, j in zip(*np.nonzero(demand > 1.0), strict=True):
        box = ((x0 + i * sx) / scale, (y0 + j * sy) / scale, (x0 + (i + 1) * sx) / scale,
               (y0 + (j + 1) * sy) / scale)
        found.append(Marker("gcell overflow", (), "", box,
                            f"demand {demand[i, j]:.2f} of the GCell's track capacity"))
    return found
