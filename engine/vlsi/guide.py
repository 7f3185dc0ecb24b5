"""Route guides: the OpenROAD/TritonRoute ``.guide`` text format (global routes per net).

Each net is a block::

    net_name
    (
    x1 y1 x2 y2 layer
    ...
    )

with rectangles in DEF database units. ``read_guides`` keeps them as one flat array (as the
DEF wiring is kept, so the canvas draws a layer in one batch); ``write_guides`` writes them
back and reading what it wrote gives the same rectangles. ``guides_from_design`` derives the
guides of a routed DEF: every wire is covered by the run of GCells it crosses on its layer and
every via by its GCell on each routing layer it joins, the way a global router hands its result
to a detailed router.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.vlsi import VlsiError, read_text

if TYPE_CHECKING:
    from engine.vlsi.def_ import Design
    from engine.vlsi.lef import Lef

RECT = {name: i for i, name in enumerate(("net", "layer", "x1", "y1", "x2", "y2"))}


@dataclass
class Guides:
    """Guide rectangles: ``rects`` (R, 6) int64 with ``RECT`` columns net (index into
    ``nets``), layer (index into ``layer_names``), x1, y1, x2, y2 (x1 <= x2, y1 <= y2)."""

    path: str
    nets: list[str] = field(default_factory=list)
    layer_names: list[str] = field(default_factory=list)
    rects: np.ndarray = field(default_factory=lambda: np.zeros((0, len(RECT)), np.int64))

    def net_rects(self, name: str) -> np.ndarray:
        """The rectangles of net ``name`` (none when the guides do not name it)."""
        if name not in self.nets:
            return self.rects[:0]
        return self.rects[self.rects[:, RECT["net"]] == self.nets.index(name)]

    def summary(self) -> dict:
        per_layer = {name: int(np.sum(self.rects[:, RECT["layer"]] == k))
                     for k, name in enumerate(self.layer_names)}
        nets_per_layer = {name: len(set(self.rects[self.rects[:, RECT["layer"]] == k,
                                                   RECT["net"]].tolist()))
                          for k, name in enumerate(self.layer_names)}
        return {"nets": len(self.nets), "rectangles": len(self.rects),
                "layers": len(self.layer_names), "rectangles_per_layer": per_layer,
                "nets_per_layer": nets_per_layer}


# -- reading -----------------------------------------------------------------------------------

def read_guides(path: str | Path, lef: Lef | None = None) -> Guides:
    """Read a guide file; with ``lef``, every layer must be one the LEF defines."""
    path = Path(path)
    text = read_text(path)
    return parse_guides(text, str(path), lef)


def parse_guides(text: str, path: str = "<guide>", lef: Lef | None = None) -> Guides:
    guides = Guides(path=path)
    net_ids: dict[str, int] = {}
    layer_ids: dict[str, int] = {}
    rows: list[tuple[int, ...]] = []
    net, opened, state = "", 0, "name"  # name -> open ("(" next) -> rects (until ")")
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        if state == "name":
            if len(tokens) != 1 or tokens[0] in ("(", ")"):
                raise VlsiError(path, f"expected a net name, found {line.strip()!r}", number)
            net, state = tokens[0], "open"
        elif state == "open":
            if tokens != ["("]:
                raise VlsiError(path, f"net {net}: expected '(' after the net name, found "
                                      f"{line.strip()!r}", number)
            opened, state = number, "rects"
            net_ids.setdefault(net, len(net_ids))  # an empty block still names a net
        elif tokens == [")"]:
            state = "name"
        elif len(tokens) == 1:  # a name: the previous block was never closed
            raise VlsiError(path, f"net {net}: no ')' closing the guides opened at line "
                                  f"{opened}", number)
        else:
            rows.append(_rect(tokens, net, path, number, lef, net_ids, layer_ids))
    if state == "open":
        raise VlsiError(path, f"net {net}: expected '(' after the net name, found the end of "
                              "the file")
    if state == "rects":
        raise VlsiError(path, f"net {net}: no ')' closing the guides opened at line {opened} "
                              "(the file ends)")
    if not net_ids:
        raise VlsiError(path, "the file is empty (no net guides)")
    guides.nets, guides.layer_names = list(net_ids), list(layer_ids)
    guides.rects = np.array(rows, dtype=np.int64).reshape(-1, len(RECT))
    return guides


def _rect(tokens: list[str], net: str, path: str, number: int, lef: Lef | None,
          net_ids: dict[str, int], layer_ids: dict[str, int]) -> tuple[int, ...]:
    """One ``x1 y1 x2 y2 layer`` line as a ``RECT`` row (corners ordered)."""
    if len(tokens) != 5:
        raise VlsiError(path, f"net {net}: expected 'x1 y1 x2 y2 layer', found "
                              f"{' '.join(tokens)!r}", number)
    values = []
    for token in tokens[:4]:
        try:
            values.append(int(token))
        except ValueError:
            raise VlsiError(path, f"net {net}: expected an integer coordinate, found "
                                  f"{token!r}", number) from None
    x1, y1, x2, y2 = values
    layer = tokens[4]
    if lef is not None and layer not in lef.layers:
        raise VlsiError(path, f"net {net}: layer {layer} is not defined in {lef.path}", number)
    return (net_ids[net], layer_ids.setdefault(layer, len(layer_ids)),
            min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2))


# -- writing -----------------------------------------------------------------------------------

def guide_text(guides: Guides) -> str:
    out = []
    order = np.argsort(guides.rects[:, RECT["net"]], kind="stable")
    rects = guides.rects[order]
    starts = np.searchsorted(rects[:, RECT["net"]], np.arange(len(guides.nets) + 1))
    for k, name in enumerate(guides.nets):
        out += [name, "("]
        out += [f"{x1} {y1} {x2} {y2} {guides.layer_names[layer]}"
                for _, layer, x1, y1, x2, y2 in rects[starts[k]:starts[k + 1]].tolist()]
        out.append(")")
    return "\n".join(out) + "\n"


def write_guides(guides: Guides, path: str | Path) -> Path:
    """Write ``guides`` as a ``.guide`` file (atomically)."""
    from engine.atomic import write_bytes_atomic

    return write_bytes_atomic(Path(path), guide_text(guides).encode())


# -- deriving guides from routed wiring --------------------------------------------------------

def guides_from_design(design: Design, lef: Lef, path: str = "<derived>") -> Guides:
    """GCell-aligned guides covering the wiring of every routed signal net of ``design``."""
    from engine.vlsi.def_ import SEG, VIA
    from engine.vlsi.grid import Snapper

    snapper = Snapper(design, lef)  # needs the DEF's GCELLGRID
    routing = [layer.name for layer in lef.routing_layers]
    guides = Guides(path=path, layer_names=list(routing))
    rows: set[tuple[int, ...]] = set()
    for index, net in enumerate(design.nets):
        segments, vias = design.net_wiring(index)
        if net.special or (not len(segments) and not len(vias)):
            continue
        k = len(guides.nets)
        guides.nets.append(net.name)
        for row in segments.tolist():
            layer = snapper.def_layer[row[SEG["layer"]]]
            if layer >= 0:
                xs = sorted(snapper.cell(v, "X") for v in (row[SEG["x1"]], row[SEG["x2"]]))
                ys = sorted(snapper.cell(v, "Y") for v in (row[SEG["y1"]], row[SEG["y2"]]))
                rows.add((k, layer, *_cells_box(design, xs, ys)))
        for row in vias.tolist():
            low, high = snapper.via_span[row[VIA["via"]]]
            x, y = snapper.cell(row[VIA["x"]], "X"), snapper.cell(row[VIA["y"]], "Y")
            for layer in range(low, high + 1) if low >= 0 else ():
                rows.add((k, layer, *_cells_box(design, [x, x], [y, y])))
    guides.rects = np.array(sorted(rows), dtype=np.int64).reshape(-1, len(RECT))
    return guides


def _cells_box(design: Design, xs: list[int], ys: list[int]) -> tuple[int, int, int, int]:
    """DEF box of GCell columns xs[0]..xs[1] and rows ys[0]..ys[1]; the first and last cells
    reach the die edge (points beyond the grid snap into them)."""
    box = []
    for axis, (first, last) in (("X", xs), ("Y", ys)):
        start, count, step = design.gcell_grid[axis]
        lo, hi = start + first * step, start + (last + 1) * step
        if design.die_area:
            coords = design.die_area[0 if axis == "X" else 1::2]
            edge_lo, edge_hi = min(coords), max(coords)
            lo = min(lo, edge_lo) if first == 0 else lo
            hi = max(hi, edge_hi) if last == count - 1 else hi
        box.append((lo, hi))
    return box[0][0], box[1][0], box[0][1], box[1][1]
