"""Geometry of a design for drawing and checking, without Qt: numpy over the DEF's arrays.

Everything here takes an ``engine.vlsi`` design (database units) and returns flat arrays the
canvas draws in one batch per layer: ``outline_pairs`` turns rectangles into the point pairs of
their four edges (``connect="pairs"``). The checks are the ones the editor reruns after every
edit: ``net_connectivity`` (union-find over a net's wires, vias and pin shapes) and
``net_shorts`` (same-layer overlaps of a net's metal with other nets' metal, wires widened by
half their width as fabricated).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.vlsi.def_ import SEG, VIA, Design
from engine.vlsi.lef import Lef

EMPTY_RECTS = np.zeros((0, 4), dtype=np.float64)


# -- drawing -------------------------------------------------------------------------------------

def outline_pairs(rects: np.ndarray) -> np.ndarray:
    """``(n, 4)`` rectangles (x1, y1, x2, y2) -> ``(8n, 2)`` point pairs of their edges."""
    r = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    x1, y1, x2, y2 = r.T
    corners = [(x1, y1), (x2, y1), (x2, y1), (x2, y2), (x2, y2), (x1, y2), (x1, y2), (x1, y1)]
    return np.stack([np.stack(c, axis=1) for c in corners], axis=1).reshape(-1, 2)


def segment_pairs(segments: np.ndarray, scale: float) -> np.ndarray:
    """Wire centre lines as ``(2n, 2)`` point pairs in microns."""
    points = segments[:, [SEG["x1"], SEG["y1"], SEG["x2"], SEG["y2"]]].astype(np.float64)
    return (points / scale).reshape(-1, 2)


def routing_layer_names(design: Design, lef: Lef | None) -> list[str]:
    """The design's wire layers bottom-up: the LEF's routing layers, else the DEF's names
    that carry wires or via statements, in the order the DEF first used them."""
    if lef is not None and lef.routing_layers:
        return [layer.name for layer in lef.routing_layers]
    used = set(design.segments[:, SEG["layer"]].tolist()) | set(
        design.vias_placed[:, VIA["layer"]].tolist())
    return [name for i, name in enumerate(design.layer_names) if i in used]


def via_layers(design: Design, lef: Lef | None, name: str,
               routing: list[str] | None = None) -> tuple[list[str], str]:
    """(routing layers a via joins, its cut layer) from the DEF's VIAS or the LEF;
    ``routing``: the design's routing layers when the caller has them already."""
    if name in design.vias:
        names = design.vias[name].layers
    elif lef is not None and name in lef.vias:
        names = lef.vias[name].layers
    else:
        names = []
    routing = set(routing if routing is not None else routing_layer_names(design, lef))
    metals = [n for n in names if n in routing]
    cuts = [n for n in names if n not in routing]
    return metals, (cuts[0] if cuts else f"{name} (cut)")


def via_rects(design: Design, lef: Lef | None, name: str, layer: str) -> np.ndarray:
    """A via's rectangles on ``layer`` (dbu, relative to its origin); a small square when the
    via's geometry is unknown (a DEF via rule, no LEF)."""
    scale = design.dbu_per_micron
    if lef is not None and name in lef.vias and layer in lef.vias[name].rects:
        return np.asarray(lef.vias[name].rects[layer], dtype=np.float64).reshape(-1, 4) * scale
    half = 0.035 * scale
    return np.array([[-half, -half, half, half]])


def placed_rect(component, macro, rect, scale: float) -> tuple[float, float, float, float]:
    """A macro-local rectangle (microns) placed by a DEF component, in microns."""
    placed = place_rects(np.asarray([rect], dtype=np.float64), np.array([macro.size]),
                         [component.orient], np.array([[component.x, component.y]]) / scale)
    return tuple(placed[0].tolist())


def place_rects(rects: np.ndarray, sizes: np.ndarray, orients: list[str], origins: np.ndarray
                ) -> np.ndarray:
    """Macro-local rectangles (n, 4) placed with their cells' sizes (n, 2), DEF orientations
    and placed lower-left corners (n, 2), all microns (``grid.orient_point``, vectorised)."""
    w, h = sizes[:, 0], sizes[:, 1]
    out = np.empty_like(rects)
    orients = np.asarray(orients)
    for orient in np.unique(orients):
        m = orients == orient
        corners = []
        for px, py in ((rects[m, 0], rects[m, 1]), (rects[m, 2], rects[m, 3])):
            corners.append(_oriented(px, py, w[m], h[m], str(orient)))
        (ax, ay), (bx, by) = corners
        out[m] = np.stack([np.minimum(ax, bx), np.minimum(ay, by), np.maximum(ax, bx),
                           np.maximum(ay, by)], axis=1)
    out[:, [0, 2]] += origins[:, [0]]
    out[:, [1, 3]] += origins[:, [1]]
    return out


def _oriented(px, py, w, h, orient: str):
    return {"N": (px, py), "S": (w - px, h - py), "W": (h - py, px), "E": (py, w - px),
            "FN": (w - px, py), "FS": (px, h - py), "FW": (py, px),
            "FE": (h - py, w - px)}[orient]


def port_rect(port, rect) -> tuple[float, float, float, float]:
    """An I/O pin port's shape (dbu, relative to the port) placed and oriented, in dbu."""
    x1, y1, x2, y2 = rect
    turn = {"N": lambda x, y: (x, y), "S": lambda x, y: (-x, -y), "W": lambda x, y: (-y, x),
            "E": lambda x, y: (y, -x), "FN": lambda x, y: (-x, y), "FS": lambda x, y: (x, -y),
            "FW": lambda x, y: (-y, -x), "FE": lambda x, y: (y, x)}.get(port.orient or "N")
    ax, ay = turn(x1, y1)
    bx, by = turn(x2, y2)
    return (port.x + min(ax, bx), port.y + min(ay, by), port.x + max(ax, bx),
            port.y + max(ay, by))


@dataclass
class CellGeometry:
    """Component outlines, cell pin shapes and LEF obstructions in microns (per layer)."""

    outlines: np.ndarray = field(default_factory=lambda: EMPTY_RECTS)
    names: list[str] = field(default_factory=list)
    pins: dict[str, np.ndarray] = field(default_factory=dict)
    obstructions: dict[str, np.ndarray] = field(default_factory=dict)


def cell_geometry(design: Design, lef: Lef | None) -> CellGeometry:
    """Needs the LEF for sizes and shapes; without it, nothing (the DEF knows no geometry)."""
    if lef is None:
        return CellGeometry()
    scale = design.dbu_per_micron
    names: list[str] = []
    shapes: dict[tuple[str, str], list] = {}  # (kind, layer) -> [(rect, size, orient, origin)]
    for component in design.components:
        if component.status == "UNPLACED":
            continue
        try:
            macro = lef.macro(component.macro)
        except KeyError:
            continue
        origin = (component.x / scale, component.y / scale)
        entry = (macro.size, component.orient, origin)
        shapes.setdefault(("outline", ""), []).append(((0, 0, *macro.size), *entry))
        names.append(component.name)
        for pin in macro.pins.values():
            if pin.use not in ("POWER", "GROUND"):
                for layer, rect in pin.shapes:
                    shapes.setdefault(("pin", layer), []).append((rect, *entry))
        for layer, rect in macro.obstructions:
            shapes.setdefault(("obs", layer), []).append((rect, *entry))
    placed = {}
    for key, rows in shapes.items():
        rects, sizes, orients, origins = zip(*rows, strict=True)
        placed[key] = place_rects(np.asarray(rects, dtype=np.float64), np.asarray(sizes),
                                  list(orients), np.asarray(origins))
    return CellGeometry(placed.get(("outline", ""), EMPTY_RECTS), names,
                        {layer: r for (kind, layer), r in placed.items() if kind == "pin"},
                        {layer: r for (kind, layer), r in placed.items() if kind == "obs"})


def io_pin_rects(design: Design) -> tuple[np.ndarray, list[str]]:
    """The I/O pins' first shapes in microns, and their names."""
    rects, names = [], []
    for pin in design.pins:
        for port in pin.ports:
            for _, rect in port.shapes[:1]:
                rects.append(port_rect(port, rect))
                names.append(pin.name)
    return np.asarray(rects, dtype=np.float64).reshape(-1, 4) / design.dbu_per_micron, names


def special_rects(design: Design, special: np.ndarray) -> dict[int, np.ndarray]:
    """Special-net wires as rectangles of their width, per DEF layer index, microns."""
    rows = design.segments[special[design.segments[:, SEG["net"]]]]
    out = {}
    for layer in np.unique(rows[:, SEG["layer"]]):
        chosen = rows[rows[:, SEG["layer"]] == layer]
        out[int(layer)] = wire_rects(chosen, chosen[:, SEG["width"]] / 2) / design.dbu_per_micron
    return out


def wire_rects(rows: np.ndarray, half_width: np.ndarray | float) -> np.ndarray:
    """Segments widened by ``half_width`` on every side (ends extended as DEF's default)."""
    x = np.sort(rows[:, [SEG["x1"], SEG["x2"]]].astype(np.float64), axis=1)
    y = np.sort(rows[:, [SEG["y1"], SEG["y2"]]].astype(np.float64), axis=1)
    hw = np.broadcast_to(np.asarray(half_width, dtype=np.float64), (len(rows),))
    return np.stack([x[:, 0] - hw, y[:, 0] - hw, x[:, 1] + hw, y[:, 1] + hw], axis=1)


# -- GCell grid and congestion -------------------------------------------------------------------

def gcell_lines(design: Design) -> np.ndarray:
    """The GCELLGRID lines as ``(2n, 2)`` point pairs in microns (empty without a grid)."""
    grid, scale = design.gcell_grid, design.dbu_per_micron
    if "X" not in grid or "Y" not in grid:
        return np.zeros((0, 2))
    xs = grid["X"][0] + grid["X"][2] * np.arange(grid["X"][1] + 1)
    ys = grid["Y"][0] + grid["Y"][2] * np.arange(grid["Y"][1] + 1)
    top, right = ys[-1], xs[-1]
    if design.die_area:
        right, top = max(right, design.die_area[2]), max(top, design.die_area[3])
        xs, ys = np.minimum(xs, right), np.minimum(ys, top)
    vertical = np.stack([np.c_[xs, np.full_like(xs, ys[0])], np.c_[xs, np.full_like(xs, top)]],
                        axis=1)
    horizontal = np.stack([np.c_[np.full_like(ys, xs[0]), ys],
                           np.c_[np.full_like(ys, right), ys]], axis=1)
    return np.concatenate([vertical, horizontal]).reshape(-1, 2) / scale


def cells_of(values: np.ndarray, start: int, count: int, step: int) -> np.ndarray:
    """GCell indices of coordinates (the last cell takes what lies beyond it)."""
    return np.clip((values - start) // step, 0, count - 1).astype(np.int64)


def congestion(design: Design, lef: Lef | None, layers: list[int] | None = None
               ) -> np.ndarray:
    """``(nx, ny)`` routing demand per GCell: the signal wires crossing it (each GCell a wire
    passes through counts once per wire), over the DEF layers given (default all); divided by
    the GCell's track capacity on those layers when the LEF gives pitches (1.0 = full)."""
    grid = design.gcell_grid
    (x0, nx, sx), (y0, ny, sy) = grid["X"], grid["Y"]
    special = np.array([n.special for n in design.nets], dtype=bool)
    rows = design.segments
    keep = ~special[rows[:, SEG["net"]]] if len(rows) else np.zeros(0, bool)
    if layers is not None:
        keep &= np.isin(rows[:, SEG["layer"]], layers)
    rows = rows[keep]
    cx1, cx2 = (np.sort(cells_of(rows[:, [SEG["x1"], SEG["x2"]]], x0, nx, sx), axis=1).T
                if len(rows) else (np.zeros(0, int),) * 2)
    cy1, cy2 = (np.sort(cells_of(rows[:, [SEG["y1"], SEG["y2"]]], y0, ny, sy), axis=1).T
                if len(rows) else (np.zeros(0, int),) * 2)
    flat = cy1 == cy2  # horizontal (or a point): spans columns on one row

    def starts_and_ends(start: tuple, end: tuple) -> np.ndarray:
        """+1 where runs start, -1 past where they end, on an (nx + 1, ny + 1) grid."""
        cells = (nx + 1) * (ny + 1)
        return (np.bincount(np.ravel_multi_index(start, (nx + 1, ny + 1)), minlength=cells)
                - np.bincount(np.ravel_multi_index(end, (nx + 1, ny + 1)), minlength=cells)
                ).reshape(nx + 1, ny + 1)

    by_column = np.cumsum(starts_and_ends((cx1[flat], cy1[flat]), (cx2[flat] + 1, cy1[flat])),
                          axis=0)[:nx, :ny]
    by_row = np.cumsum(starts_and_ends((cx1[~flat], cy1[~flat]), (cx1[~flat], cy2[~flat] + 1)),
                       axis=1)[:nx, :ny]
    usage = by_column + by_row
    capacity = track_capacity(design, lef, layers)
    return usage / capacity if capacity > 0 else usage


def track_capacity(design: Design, lef: Lef | None, layers: list[int] | None) -> float:
    """Tracks through one GCell summed over the chosen routing layers (0 without a LEF)."""
    if lef is None:
        return 0.0
    step = design.gcell_grid["X"][2] / design.dbu_per_micron
    total = 0.0
    for index, name in enumerate(design.layer_names):
        layer = lef.layers.get(name)
        if layer is None or layer.type != "ROUTING" or layer.pitch <= 0:
            continue
        if layers is None or index in layers:
            total += step / layer.pitch
    return total


# -- checks ---------------------------------------------------------------------------------------

@dataclass
class Connectivity:
    pieces: int                 # connected pieces of the net's wiring (1 = one tree)
    pins: int                   # pins with known geometry
    reached: int                # of those, pins the wiring touches
    unreached: list[str] = field(default_factory=list)

    @property
    def connected(self) -> bool:
        return self.pieces <= 1 and self.reached == self.pins

    def describe(self) -> str:
        if self.pieces == 0:
            return "no wiring"
        text = "connected" if self.connected else (
            f"{self.pieces} pieces" if self.pieces > 1 else "open")
        if self.unreached:
            text += f"; pins not reached: {', '.join(self.unreached[:4])}" + (
                "…" if len(self.unreached) > 4 else "")
        return text


class Checker:
    """Connectivity and same-layer shorts of a design; built once per wiring change (the
    per-layer shape index is reused for every net checked)."""

    def __init__(self, design: Design, lef: Lef | None) -> None:
        self.design, self.lef = design, lef
        self.routing = routing_layer_names(design, lef)
        # without a LEF width, a wire is a centre line one dbu either side (so two wires on
        # one track overlap and a short shows)
        self.half_width = np.ones(0)
        self.via_metals: list[list[int]] = []
        self._learn_names()
        self.components = {c.name: c for c in design.components}
        self._shapes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._by_layer: dict[int, tuple[np.ndarray, np.ndarray]] | None = None

    def _learn_names(self) -> None:
        """Half widths and via layers for layer and via names the design has gained (an
        edit may bring a LEF via the DEF had not used)."""
        design, lef = self.design, self.lef
        for name in design.layer_names[len(self.half_width):]:
            width = lef.layers[name].width * design.dbu_per_micron / 2 \
                if lef is not None and name in lef.layers else 1.0
            self.half_width = np.append(self.half_width, width)
        for name in design.via_names[len(self.via_metals):]:
            metals, _ = via_layers(design, lef, name, self.routing)
            self.via_metals.append([design.layer_names.index(m) for m in metals
                                    if m in design.layer_names])

    # a net's metal as rectangles (dbu): wires widened, vias' enclosures on both layers
    def metal(self, segments: np.ndarray, vias: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(rects (n, 4), DEF layer, net, item per rect); items number the segments, then
        the vias (a via has a rect on each layer it joins)."""
        widths = np.where(segments[:, SEG["width"]] > 0, segments[:, SEG["width"]] / 2,
                          self.half_width[segments[:, SEG["layer"]]])
        rects = [wire_rects(segments, widths)]
        layers = [segments[:, SEG["layer"]]]
        nets = [segments[:, SEG["net"]]]
        items = [np.arange(len(segments))]
        for via_id in np.unique(vias[:, VIA["via"]]) if len(vias) else []:
            where = np.nonzero(vias[:, VIA["via"]] == via_id)[0]
            chosen = vias[where]
            for layer in self.via_layer_ids(int(via_id), chosen):
                shapes = via_rects(self.design, self.lef, self.design.via_names[via_id],
                                   self.design.layer_names[layer])
                box = np.r_[shapes[:, :2].min(0), shapes[:, 2:].max(0)]
                offset = np.repeat(chosen[:, [VIA["x"], VIA["y"]]], 2, axis=0).reshape(-1, 4)
                rects.append(offset + box)
                layers.append(np.full(len(chosen), layer))
                nets.append(chosen[:, VIA["net"]])
                items.append(len(segments) + where)
        return (np.concatenate(rects).reshape(-1, 4), np.concatenate(layers).astype(np.int64),
                np.concatenate(nets).astype(np.int64), np.concatenate(items).astype(np.int64))

    def via_layer_ids(self, via_id: int, rows: np.ndarray) -> list[int]:
        """The DEF layers a via joins; unknown vias join their statement layer and the next
        routing layer up."""
        known = self.via_metals[via_id]
        if len(known) >= 2:
            return known
        statement = self.design.layer_names[int(rows[0, VIA["layer"]])]
        names = [statement]
        if statement in self.routing and self.routing.index(statement) + 1 < len(self.routing):
            names.append(self.routing[self.routing.index(statement) + 1])
        return [self.design.layer_names.index(n) for n in names if n in self.design.layer_names]

    def all_metal(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._shapes is None:
            self._shapes = self.metal(self.design.segments, self.design.vias_placed)
        return self._shapes

    def net_changed(self, index: int) -> None:
        """Net ``index``'s wiring changed: swap its metal in the per-layer index (the rest of
        the design is not recomputed; the design-wide arrays are rebuilt when next asked)."""
        self._shapes = None
        self._learn_names()
        if self._by_layer is None:
            return
        segments, vias = self.design.net_wiring(index)
        rects, layers, nets, _ = self.metal(segments, vias)
        updated = {}
        for layer in set(self._by_layer) | {int(m) for m in np.unique(layers)}:
            old_rects, old_nets = self._by_layer.get(layer, (EMPTY_RECTS, np.zeros(0, np.int64)))
            keep = old_nets != index
            mine = layers == layer
            updated[layer] = (np.concatenate([old_rects[keep], rects[mine]]),
                              np.concatenate([old_nets[keep], nets[mine]]))
        self._by_layer = updated

    def metal_by_layer(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Every net's metal grouped by DEF layer: layer -> (rects, net per rect)."""
        if self._by_layer is None:
            rects, layers, nets, _ = self.all_metal()
            order = np.argsort(layers, kind="stable")
            bounds = np.searchsorted(layers[order], np.unique(layers), side="left")
            groups = np.split(order, bounds[1:])
            self._by_layer = {int(layers[g[0]]): (rects[g], nets[g]) for g in groups if len(g)}
        return self._by_layer

    def shorts(self, index: int) -> list[tuple[str, str, tuple[float, float]]]:
        """Same-layer overlaps of net ``index``'s metal with other nets' metal:
        ``(other net, layer, (x, y) µm of the overlap's centre)``, one per pair and layer."""
        segments, vias = self.design.net_wiring(index)
        mine, my_layers, _, _ = self.metal(segments, vias)
        by_layer = self.metal_by_layer()
        found: dict[tuple[int, int], tuple[float, float]] = {}
        for layer in np.unique(my_layers):
            here = mine[my_layers == layer]
            theirs, owner = by_layer.get(int(layer), (EMPTY_RECTS, np.zeros(0, np.int64)))
            others = owner != index
            theirs, owner = theirs[others], owner[others]
            if not len(theirs):
                continue
            lo = np.maximum(here[:, None, :2], theirs[None, :, :2])
            hi = np.minimum(here[:, None, 2:], theirs[None, :, 2:])
            overlap = (hi > lo).all(axis=2)
            for a, b in zip(*np.nonzero(overlap), strict=True):
                key = (int(owner[b]), int(layer))
                if key not in found:
                    centre = (lo[a, b] + hi[a, b]) / 2 / self.design.dbu_per_micron
                    found[key] = (float(centre[0]), float(centre[1]))
        return [(self.design.nets[n].name, self.design.layer_names[m], xy)
                for (n, m), xy in sorted(found.items())]

    def all_shorts(self) -> dict[int, int]:
        """Every net with same-layer overlaps: net -> how many other nets it touches (a
        sweep along x per layer: only rectangles whose x ranges overlap are compared)."""
        rects, layers, nets, _ = self.all_metal()
        pairs: set[tuple[int, int]] = set()
        for layer in np.unique(layers):
            here = np.nonzero(layers == layer)[0]
            order = here[np.argsort(rects[here, 0], kind="stable")]
            boxes, owner = rects[order], nets[order]
            reach = np.searchsorted(boxes[:, 0], boxes[:, 2], side="left")  # x1_j < x2_i
            counts = np.maximum(reach - np.arange(len(boxes)) - 1, 0)
            if not counts.sum():
                continue
            a = np.repeat(np.arange(len(boxes)), counts)
            offsets = np.arange(len(a)) - np.repeat(np.cumsum(counts) - counts, counts)
            b = a + 1 + offsets
            hit = ((np.minimum(boxes[a, 3], boxes[b, 3]) > np.maximum(boxes[a, 1], boxes[b, 1]))
                   & (boxes[b, 0] < boxes[a, 2]) & (owner[a] != owner[b]))
            for x, y in zip(owner[a[hit]].tolist(), owner[b[hit]].tolist(), strict=True):
                pairs.update(((x, y), (y, x)))
        count: dict[int, set[int]] = {}
        for a_net, b_net in pairs:
            count.setdefault(a_net, set()).add(b_net)
        return {net: len(others) for net, others in count.items()}

    def pin_shapes(self, index: int) -> list[tuple[str, int, np.ndarray]]:
        """(pin label, DEF layer, rects in dbu) of net ``index``'s pins with geometry."""
        design, lef, scale = self.design, self.lef, self.design.dbu_per_micron
        out = []
        io_pins = {p.name: p for p in design.pins}
        for component, pin in design.nets[index].pins:
            if component == "PIN":
                io = io_pins.get(pin)
                if io is None or not io.ports:
                    continue
                port = io.ports[0]
                for layer, rect in port.shapes[:1]:
                    out.append((pin, design.layer_index(layer),
                                np.asarray([port_rect(port, rect)], dtype=np.float64)))
                continue
            placed = self.components.get(component)
            if lef is None or placed is None:
                continue
            try:
                macro = lef.macro(placed.macro)
            except KeyError:
                continue
            shapes = macro.pins.get(pin)
            if shapes is None or not shapes.shapes:
                continue
            by_layer: dict[str, list] = {}
            for layer, rect in shapes.shapes:
                by_layer.setdefault(layer, []).append(placed_rect(placed, macro, rect, scale))
            for layer, rects in by_layer.items():
                out.append((f"{component}/{pin}", design.layer_index(layer),
                            np.asarray(rects, dtype=np.float64) * scale))
        return out

    def connectivity(self, index: int) -> Connectivity:
        """Pieces of the net's metal (touching shapes on a layer join; a via joins its
        layers) and which pins the metal touches."""
        segments, vias = self.design.net_wiring(index)
        rects, layers, _, owner = self.metal(segments, vias)
        parent = list(range(len(segments) + len(vias)))

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        touch = _touching(rects, layers)
        for a, b in zip(*np.nonzero(np.triu(touch, 1)), strict=True):
            ra, rb = find(int(owner[a])), find(int(owner[b]))
            if ra != rb:
                parent[ra] = rb
        pieces = len({find(i) for i in range(len(parent))})
        pins = self.pin_shapes(index)
        unreached = []
        for label, layer, pin_rects in pins:
            mine = rects[layers == layer]
            lo = np.maximum(mine[:, None, :2], pin_rects[None, :, :2])
            hi = np.minimum(mine[:, None, 2:], pin_rects[None, :, 2:])
            if not (hi >= lo).all(axis=2).any():
                unreached.append(label)
        reached_labels = {label for label, _, _ in pins} - set(unreached)
        labels = {label for label, _, _ in pins}
        return Connectivity(pieces, len(labels), len(reached_labels),
                            sorted(set(unreached) - reached_labels))


def _touching(rects: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """``(n, n)`` rectangles on the same layer that overlap or abut."""
    lo = np.maximum(rects[:, None, :2], rects[None, :, :2])
    hi = np.minimum(rects[:, None, 2:], rects[None, :, 2:])
    return (hi >= lo).all(axis=2) & (layers[:, None] == layers[None, :])


def net_lengths(design: Design) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per net: wirelength (µm), segments, vias (vectorised over the whole design)."""
    n = len(design.nets)
    rows = design.segments
    length = (np.abs(rows[:, SEG["x2"]] - rows[:, SEG["x1"]])
              + np.abs(rows[:, SEG["y2"]] - rows[:, SEG["y1"]])) / design.dbu_per_micron
    return (np.bincount(rows[:, SEG["net"]], weights=length, minlength=n),
            np.bincount(rows[:, SEG["net"]], minlength=n),
            np.bincount(design.vias_placed[:, VIA["net"]], minlength=n))
