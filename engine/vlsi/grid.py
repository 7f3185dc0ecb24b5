"""GCell snapping: how a routed DEF net becomes a tree on the 3D grid the tokens describe.

* Grid: the DEF's ``GCELLGRID``. Column i covers [start + i*step, start + (i+1)*step); points
  beyond the last line fall in the last cell. Layer k is the k-th LEF routing layer (metal1 = 0).
* Wires: each segment marks every GCell it crosses on its layer; a via joins its GCell on the
  statement's layer to the via's other routing layer. The result is a graph of unit edges.
* Pins: a pin sits at the centre of its first shape (cell pins: the LEF macro pin, placed and
  oriented by the component; I/O pins: the DEF port). Its GCell on its layer is its grid node;
  when the wiring does not touch that node (the pin's access point lies in the next GCell) the
  pin moves to the nearest wired node (``GridNet.moved_pins`` counts these).
* Driver: the cell pin whose LEF direction is OUTPUT, or an I/O pin of direction INPUT; loads:
  the other pins. The tree is the breadth-first tree from the driver, pruned to the paths that
  reach loads (snapping can create cycles and dead ends; both disappear).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from engine.vlsi.def_ import SEG, VIA, Design
from engine.vlsi.lef import Lef
from engine.vlsi.router import GridSpec
from engine.vlsi.tokens import Edge, Node, edge, manhattan


@dataclass
class GridNet:
    name: str
    driver: Node
    loads: list[Node]
    edges: set[Edge]
    moved_pins: int = 0


def grid_spec(design: Design, lef: Lef) -> GridSpec:
    if "X" not in design.gcell_grid or "Y" not in design.gcell_grid:
        raise ValueError(f"{design.path}: no GCELLGRID X and Y statements to snap to")
    layers = lef.routing_layers
    return GridSpec(design.gcell_grid["X"][1], design.gcell_grid["Y"][1], len(layers),
                    tuple("H" if layer.direction == "HORIZONTAL" else "V" for layer in layers))


def orient_point(px: float, py: float, w: float, h: float, orient: str) -> tuple[float, float]:
    """A macro-local point placed with a DEF orientation (origin at the placed lower left)."""
    return {"N": (px, py), "S": (w - px, h - py), "W": (h - py, px), "E": (py, w - px),
            "FN": (w - px, py), "FS": (px, h - py), "FW": (py, px),
            "FE": (h - py, w - px)}[orient]


class Snapper:
    """Maps DEF coordinates and layer names of one design to grid nodes."""

    def __init__(self, design: Design, lef: Lef) -> None:
        self.design, self.lef = design, lef
        self.spec = grid_spec(design, lef)
        self.routing = {layer.name: k for k, layer in enumerate(lef.routing_layers)}
        self.def_layer = [self.routing.get(name, -1) for name in design.layer_names]
        self.components = {c.name: c for c in design.components}
        self.io_pins = {p.name: p for p in design.pins}
        self.via_span = [self._via_span(name) for name in design.via_names]

    def _via_span(self, name: str) -> tuple[int, int]:
        names = (self.design.vias[name].layers if name in self.design.vias
                 else self.lef.vias[name].layers if name in self.lef.vias else [])
        return self._span(names)

    def centre(self, node: Node) -> tuple[int, int]:
        """DEF coordinates of a GCell's centre (the last cell's centre clipped to the die)."""
        out = []
        for axis, value in zip("XY", node[:2], strict=False):
            start, _, step = self.design.gcell_grid[axis]
            out.append(int(start + value * step + step // 2))
        if self.design.die_area:
            out = [min(v, self.design.die_area[2 + k]) for k, v in enumerate(out)]
        return out[0], out[1]

    def via_between(self, low: int) -> str:
        """The LEF via joining routing layers ``low`` and ``low + 1`` (DEFAULT ones first)."""
        candidates = [v for v in self.lef.vias.values()
                      if self._span(v.layers) == (low, low + 1)]
        if not candidates:
            raise ValueError(f"{self.lef.path}: no VIA joins routing layers {low} and {low + 1}")
        return sorted(candidates, key=lambda v: (not v.default, v.name))[0].name

    def _span(self, names: list[str]) -> tuple[int, int]:
        ks = sorted(self.routing[n] for n in names if n in self.routing)
        return (ks[0], ks[-1]) if ks else (-1, -1)

    def cell(self, value: float, axis: str) -> int:
        start, count, step = self.design.gcell_grid[axis]
        return int(min(max((value - start) // step, 0), count - 1))

    def node(self, x: float, y: float, layer: int) -> Node:
        return (self.cell(x, "X"), self.cell(y, "Y"), layer)

    def pin(self, component: str, pin: str) -> tuple[Node, bool] | None:
        """(grid node, drives the net) of a connection, or None when it has no geometry."""
        scale = self.design.dbu_per_micron
        if component == "PIN":
            io = self.io_pins.get(pin)
            if io is None or not io.ports or not io.ports[0].shapes:
                return None
            port = io.ports[0]
            layer, (x1, y1, x2, y2) = port.shapes[0]
            return (self.node(port.x + (x1 + x2) / 2, port.y + (y1 + y2) / 2,
                              self.routing.get(layer, 0)), io.direction == "INPUT")
        placed = self.components.get(component)
        if placed is None:
            return None
        macro = self.lef.macro(placed.macro)
        shape_pin = macro.pins.get(pin)
        if shape_pin is None or not shape_pin.shapes:
            return None
        layer, (x1, y1, x2, y2) = shape_pin.shapes[0]
        px, py = orient_point((x1 + x2) / 2, (y1 + y2) / 2, *macro.size, placed.orient)
        return (self.node(placed.x + px * scale, placed.y + py * scale,
                          self.routing.get(layer, 0)), shape_pin.direction == "OUTPUT")

    def wiring_edges(self, index: int) -> set[Edge]:
        segments, vias = self.design.net_wiring(index)
        edges: set[Edge] = set()
        for row in segments.tolist():
            m = self.def_layer[row[SEG["layer"]]]
            if m < 0:
                continue
            a = self.node(row[SEG["x1"]], row[SEG["y1"]], m)
            b = self.node(row[SEG["x2"]], row[SEG["y2"]], m)
            here = a
            for axis in (0, 1):  # straight in DEF; an L if snapping ever made it diagonal
                while here[axis] != b[axis]:
                    step = 1 if b[axis] > here[axis] else -1
                    nxt = tuple(v + step if k == axis else v for k, v in enumerate(here))
                    edges.add(edge(here, nxt))
                    here = nxt
        for row in vias.tolist():
            low, high = self.via_span[row[VIA["via"]]]
            if low < 0:
                continue
            x, y, _ = self.node(row[VIA["x"]], row[VIA["y"]], 0)
            for m in range(low, high):
                edges.add(edge((x, y, m), (x, y, m + 1)))
        return edges


def extract_grid_nets(design: Design, lef: Lef, names: list[str] | None = None
                      ) -> list[GridNet]:
    """Grid trees of the design's routed signal nets with a driver and at least one load."""
    snapper = Snapper(design, lef)
    wanted = set(names) if names else None
    out = []
    for index, net in enumerate(design.nets):
        if net.special or (wanted is not None and net.name not in wanted):
            continue
        grid_net = snap_net(snapper, index)
        if grid_net is not None:
            out.append(grid_net)
    return out


def snap_net(snapper: Snapper, index: int) -> GridNet | None:
    net = snapper.design.nets[index]
    pins = [p for p in (snapper.pin(c, p) for c, p in net.pins) if p is not None]
    edges = snapper.wiring_edges(index)
    if len(pins) < 2 or not edges:
        return None
    drivers = [node for node, drives in pins if drives]
    driver_pin = drivers[0] if drivers else pins[0][0]
    neighbours: dict[Node, list[Node]] = {}
    for a, b in edges:
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    wired = sorted(neighbours)
    moved = 0

    def terminal(node: Node) -> Node:
        nonlocal moved
        if node in neighbours:
            return node
        moved += 1
        return min(wired, key=lambda n: (manhattan(n, node), n))

    root = terminal(driver_pin)
    parent: dict[Node, Node | None] = {root: None}
    queue = deque([root])
    while queue:
        here = queue.popleft()
        for nxt in sorted(neighbours[here]):
            if nxt not in parent:
                parent[nxt] = here
                queue.append(nxt)
    loads, tree = [], set()
    load_pins = [node for node, _ in pins]
    load_pins.remove(driver_pin)
    for pin in load_pins:
        node = terminal(pin)
        if node not in parent:
            return None  # the wiring is in pieces: not one routed tree
        if node != root and node not in loads:
            loads.append(node)
        while parent[node] is not None:
            tree.add(edge(node, parent[node]))
            node = parent[node]
    if not loads:
        return None
    return GridNet(net.name, root, loads, tree, moved)


def write_tree(design: Design, snapper: Snapper, index: int, edges: set[Edge]) -> None:
    """Replace net ``index``'s wiring with a grid tree: a wire between GCell centres per planar
    edge, the LEF's via between the two layers per layer edge (a global route, not a
    design-rule-clean detailed one)."""
    import numpy as np

    layers = snapper.lef.routing_layers
    rows, vias = [], []
    for a, b in sorted(edges):
        ax, ay = snapper.centre(a)
        bx, by = snapper.centre(b)
        if a[2] == b[2]:
            layer = design.layer_index(layers[a[2]].name)
            rows.append((index, layer, ax, ay, bx, by, 0, -1, -1, 0))
        else:
            low = min(a[2], b[2])
            via = snapper.via_between(low)
            vias.append((index, design.layer_index(layers[low].name), design.via_index(via),
                         ax, ay, 0))
    keep = design.segments[:, SEG["net"]] != index
    segments = np.concatenate([design.segments[keep],
                               np.array(rows, dtype=np.int64).reshape(-1, len(SEG))])
    design.segments = segments[np.argsort(segments[:, SEG["net"]], kind="stable")]
    keep = design.vias_placed[:, VIA["net"]] != index
    placed = np.concatenate([design.vias_placed[keep],
                             np.array(vias, dtype=np.int64).reshape(-1, len(VIA))])
    design.vias_placed = placed[np.argsort(placed[:, VIA["net"]], kind="stable")]
