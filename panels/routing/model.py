"""The route canvas's state without Qt: the design, its layers' styles, the selected net, a
predicted design to compare with, route guides shown over it, and the undoable wiring edits.

An edit is a plain command (``panels.api.EditCommand``): ``EditWiring`` removes and adds
segments and vias of one net, named by layer and via names so its JSON form (the autosave the
shell keeps) stays valid across sessions. The view pushes commands through ``host.push_edit``;
``decode`` turns their JSON back into commands (crash recovery). After every change of wiring
the model rebuilds its ``Checker`` and reruns the connectivity and short checks of the edited
net (numpy; a few milliseconds on gcd).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.vlsi.def_ import SEG, VIA, Design, read_def, write_def
from engine.vlsi.guide import RECT, Guides, guides_from_design, read_guides, write_guides
from engine.vlsi.lef import Lef, read_lef
from engine.vlsi.markers import natural_key
from panels.lab.model import Events
from panels.routing.geometry import (
    Checker,
    Connectivity,
    net_lengths,
    routing_layer_names,
    via_layers,
)

# KLayout-like metal colours, bottom-up; cut layers get a lighter shade of the metal below
METAL_COLOURS = ("#4f8fff", "#ff4d4d", "#3ccf4e", "#ffb000", "#d65cff", "#25d9d9", "#ff7ac6",
                 "#b8e04a", "#a98bff", "#ff9966")
SPECIAL_COLOUR = "#8c8c8c"


@dataclass
class LayerStyle:
    name: str
    kind: str               # "routing" (wires) or "cut" (vias)
    colour: str
    visible: bool = True
    level: int = 0          # height in the stack: metal k at 2k, its vias at 2k + 1


@dataclass
class NetStats:
    name: str
    segments: int
    vias: int
    wirelength_um: float
    pins: int
    connectivity: Connectivity | None = None
    shorts: int | None = None
    leaf_iou: float | None = None


class EditDoesNotFit(ValueError):
    """An edit names wiring the design does not have (any more)."""


@dataclass
class EditWiring:
    """Remove and add wiring of one net. Segments: ``[layer, x1, y1, x2, y2, width, ext1,
    ext2, shape]``; vias: ``[layer, via, x, y, orient]`` (names, dbu)."""

    net: str
    label: str = "Edit wiring"
    remove_segments: list[list] = field(default_factory=list)
    add_segments: list[list] = field(default_factory=list)
    remove_vias: list[list] = field(default_factory=list)
    add_vias: list[list] = field(default_factory=list)

    def apply(self, model: RouteModel) -> None:
        self._places = model.change_wiring(self.net, self.remove_segments, self.add_segments,
                                           self.remove_vias, self.add_vias)

    def revert(self, model: RouteModel) -> None:
        segments_at, vias_at = getattr(self, "_places", (None, None))
        model.change_wiring(self.net, self.add_segments, self.remove_segments,
                            self.add_vias, self.remove_vias, segments_at, vias_at)

    def to_json(self) -> dict:
        return {"type": "routing_edit", "net": self.net, "label": self.label,
                "remove_segments": self.remove_segments, "add_segments": self.add_segments,
                "remove_vias": self.remove_vias, "add_vias": self.add_vias}


@dataclass
class EditWaive:
    """Waive (or unwaive) markers by their names: remembered with the design as an edit (undo,
    autosave, replayed when the design is opened again)."""

    markers: list[str]
    waived: bool = True
    label: str = "Waive marker"

    def apply(self, model: RouteModel) -> None:
        self._before = {name for name in self.markers if name in model.waived}
        model.set_waived(self.markers, self.waived)

    def revert(self, model: RouteModel) -> None:
        before = getattr(self, "_before", set() if self.waived else set(self.markers))
        model.set_waived([n for n in self.markers if n not in before], False)
        model.set_waived([n for n in self.markers if n in before], True)

    def to_json(self) -> dict:
        return {"type": "routing_waive", "markers": list(self.markers), "waived": self.waived,
                "label": self.label}


def decode(data: dict) -> EditWiring | EditWaive:
    """A saved edit back as a command (``host.restore_edits``)."""
    if data.get("type") == "routing_waive":
        return EditWaive([str(n) for n in data.get("markers", [])], bool(data.get("waived")),
                         str(data.get("label", "Waive marker")))
    if data.get("type") != "routing_edit":
        raise ValueError(f"not a routing edit: {data.get('type')!r}")
    return EditWiring(str(data["net"]), str(data.get("label", "Edit wiring")),
                      *(list(data.get(k, [])) for k in ("remove_segments", "add_segments",
                                                        "remove_vias", "add_vias")))


class RouteModel:
    """Events: ``loaded`` (), ``layers`` (), ``selected`` (index), ``wiring`` (net, moved),
    ``prediction`` (), ``guides`` (), ``waived`` ()."""

    def __init__(self) -> None:
        self.design: Design | None = None
        self.lef: Lef | None = None
        self.lef_path: str | None = None
        self.prediction: Design | None = None
        self.guides: Guides | None = None
        self.styles: list[LayerStyle] = []
        self.selected: int | None = None
        self.checker: Checker | None = None
        self.last_check: NetStats | None = None    # of the selected net
        self.edit_check: NetStats | None = None    # of the net edited last
        self.version = 0        # grows with every change of wiring (caches key on it)
        self._shorts: tuple[tuple[int, int] | None, list] = (None, [])
        self.edited = False     # the wiring differs from the file's (an edit, even undone)
        self.waived: set[str] = set()   # marker names waived (``EditWaive``)
        self.waived_version = 0         # grows with every waive and unwaive
        self.events = Events("loaded", "layers", "selected", "wiring", "prediction", "guides",
                             "waived")

    # -- opening ---------------------------------------------------------------------------

    @property
    def document(self) -> str:
        """The id of the edit history (one per opened DEF)."""
        return f"routing:{self.design.path}" if self.design else "routing:"

    def load_lef(self, path: str | os.PathLike) -> Lef:
        """Read a LEF (``VlsiError`` names file and line); an open DEF is checked against
        it and re-read so its layers and vias resolve."""
        lef = read_lef(path)
        if self.design is not None:
            design = read_def(self.design.path, lef)
            self.lef, self.lef_path = lef, str(path)
            self._set_design(design)
        else:
            self.lef, self.lef_path = lef, str(path)
        return lef

    def load_def(self, path: str | os.PathLike, lef_path: str | os.PathLike | None = None
                 ) -> Design:
        """Read a DEF (with its LEF when given, else the LEF already open); nothing changes
        when either is unreadable."""
        lef = read_lef(lef_path) if lef_path else self.lef
        design = read_def(path, lef)
        if lef_path:
            self.lef, self.lef_path = lef, str(lef_path)
        self.prediction = None
        self.guides = None
        self._set_design(design)
        return design

    def set_waived(self, names: list[str], waived: bool) -> None:
        if waived:
            self.waived.update(names)
        else:
            self.waived.difference_update(names)
        self.waived_version += 1
        self.events.emit("waived")

    def _set_design(self, design: Design) -> None:
        self.waived = set()
        self.waived_version += 1
        self.design = design
        self.edited = False
        self.selected = None
        self.last_check = None
        self.styles = self._layer_styles(design)
        self.checker = Checker(design, self.lef)
        self.version += 1
        self.events.emit("loaded")

    def _layer_styles(self, design: Design) -> list[LayerStyle]:
        previous = {s.name: s for s in self.styles}
        routing = routing_layer_names(design, self.lef)
        styles = []
        for k, name in enumerate(routing):
            styles.append(LayerStyle(name, "routing", METAL_COLOURS[k % len(METAL_COLOURS)],
                                     level=2 * k))
        cuts: dict[str, int] = {}
        for via in design.via_names:
            metals, cut = via_layers(design, self.lef, via, routing)
            low = min((routing.index(m) for m in metals if m in routing), default=len(routing))
            cuts.setdefault(cut, low)
        for cut, low in sorted(cuts.items(), key=lambda item: item[1]):
            colour = METAL_COLOURS[low % len(METAL_COLOURS)] if low < len(routing) else "#cccccc"
            styles.append(LayerStyle(cut, "cut", _lighter(colour), level=2 * low + 1))
        for style in styles:  # a reopened design keeps the user's choices
            if style.name in previous:
                style.visible, style.colour = previous[style.name].visible, \
                    previous[style.name].colour
        return styles

    def style(self, name: str) -> LayerStyle:
        for style in self.styles:
            if style.name == name:
                return style
        raise KeyError(f"no layer {name}")

    def set_layer(self, name: str, visible: bool | None = None, colour: str | None = None
                  ) -> None:
        style = self.style(name)
        if visible is not None:
            style.visible = bool(visible)
        if colour is not None:
            style.colour = colour
        self.events.emit("layers")

    def via_cut_layer(self) -> list[str]:
        """The cut layer of each of the design's vias (by via id)."""
        routing = routing_layer_names(self.design, self.lef)
        return [via_layers(self.design, self.lef, name, routing)[1]
                for name in self.design.via_names]

    # -- nets ------------------------------------------------------------------------------

    @property
    def special(self) -> np.ndarray:
        return np.array([n.special for n in self.design.nets], dtype=bool)

    def search(self, text: str, limit: int = 5000) -> list[int]:
        """Signal nets whose name contains ``text`` (case-insensitive), exact match first."""
        if self.design is None:
            return []
        needle = text.strip().lower()
        found = [i for i, n in enumerate(self.design.nets)
                 if not n.special and needle in n.name.lower()]
        found.sort(key=lambda i: (self.design.nets[i].name.lower() != needle,
                                  natural_key(self.design.nets[i].name)))
        return found[:limit]

    def select(self, index: int | None) -> None:
        if index is not None and not 0 <= index < len(self.design.nets):
            raise IndexError(f"no net {index}")
        self.selected = index
        self.last_check = None if index is None else self.check(index)
        self.events.emit("selected", index=index)

    def select_name(self, name: str) -> int:
        index = self.design.net_index(name)
        self.select(index)
        return index

    def net_at(self, x_um: float, y_um: float, tolerance_um: float,
               layers: set[int] | None = None) -> int | None:
        """The signal net whose wire passes nearest a point (within the tolerance)."""
        rows = self.design.segments
        keep = ~self.special[rows[:, SEG["net"]]]
        if layers is not None:
            keep &= np.isin(rows[:, SEG["layer"]], list(layers))
        rows = rows[keep]
        if not len(rows):
            return None
        distance = _point_segment_distance(rows, x_um * self.design.dbu_per_micron,
                                           y_um * self.design.dbu_per_micron)
        best = int(np.argmin(distance))
        if distance[best] > tolerance_um * self.design.dbu_per_micron:
            return None
        return int(rows[best, SEG["net"]])

    def element_at(self, x_um: float, y_um: float, tolerance_um: float
                   ) -> tuple[str, list] | None:
        """The selected net's segment or via nearest a point: ``("segment"|"via", row)``
        in the names-and-dbu form ``EditWiring`` takes."""
        if self.selected is None:
            return None
        segments, vias = self.design.net_wiring(self.selected)
        scale = self.design.dbu_per_micron
        x, y = x_um * scale, y_um * scale
        best: tuple[float, str, list] | None = None
        if len(vias):
            d = np.hypot(vias[:, VIA["x"]] - x, vias[:, VIA["y"]] - y)
            k = int(np.argmin(d))
            best = (float(d[k]), "via", self.via_row(vias[k]))
        if len(segments):
            d = _point_segment_distance(segments, x, y)
            k = int(np.argmin(d))
            if best is None or d[k] < best[0]:
                best = (float(d[k]), "segment", self.segment_row(segments[k]))
        if best is None or best[0] > tolerance_um * scale:
            return None
        return best[1], best[2]

    def segment_row(self, row: np.ndarray) -> list:
        r = [int(v) for v in row]
        return [self.design.layer_names[r[SEG["layer"]]], *r[SEG["x1"]:]]

    def via_row(self, row: np.ndarray) -> list:
        r = [int(v) for v in row]
        return [self.design.layer_names[r[VIA["layer"]]], self.design.via_names[r[VIA["via"]]],
                r[VIA["x"]], r[VIA["y"]], r[VIA["orient"]]]

    # -- statistics and checks -----------------------------------------------------------

    def stats(self) -> list[NetStats]:
        """Per signal net: wirelength, segments, vias, pins (vectorised; checks on demand)."""
        length, segments, vias = net_lengths(self.design)
        return [NetStats(net.name, int(segments[i]), int(vias[i]), float(length[i]),
                         len(net.pins)) for i, net in enumerate(self.design.nets)
                if not net.special]

    def check(self, index: int) -> NetStats:
        """The net's statistics with its connectivity, shorts and (given a prediction)
        leaf IoU against it."""
        segments, vias = self.design.net_wiring(index)
        net = self.design.nets[index]
        scale = self.design.dbu_per_micron
        length = float((np.abs(segments[:, SEG["x2"]] - segments[:, SEG["x1"]])
                        + np.abs(segments[:, SEG["y2"]] - segments[:, SEG["y1"]])).sum() / scale)
        stats = NetStats(net.name, len(segments), len(vias), length, len(net.pins),
                         self.checker.connectivity(index), len(self.shorts(index)))
        stats.leaf_iou = self.leaf_iou(net.name)
        return stats

    def shorts(self, index: int) -> list[tuple[str, str, tuple[float, float]]]:
        """The net's shorts, computed once per state of the wiring."""
        key = (self.version, index)
        if self._shorts[0] != key:
            self._shorts = (key, self.checker.shorts(index))
        return self._shorts[1]

    # -- edits -----------------------------------------------------------------------------

    def change_wiring(self, net_name: str, remove_segments: list[list],
                      add_segments: list[list], remove_vias: list[list],
                      add_vias: list[list], segments_at: list[int] | None = None,
                      vias_at: list[int] | None = None) -> tuple[list[int], list[int]]:
        """Remove then add rows of one net; returns where the removed rows sat in the net.

        Each removal takes one matching row; a row that is not there (the edit does not fit
        this design, or what it names was undone or changed since) raises ``EditDoesNotFit``
        and changes nothing. Added rows take the removed rows' places when there are as many
        (a move stays in place), else go to the given places (an undone delete comes back
        where it was), else after the net's other rows. The ``wiring`` event carries
        ``moved``: (kind, old row, new row) for each row a move replaced in place, so a pick
        can follow its element through an edit, an undo or a redo."""
        d = self.design
        index = d.net_index(net_name)
        segments, segment_places = _replace(
            d.segments, SEG["net"], index, [self._segment(index, r) for r in remove_segments],
            [self._segment(index, r) for r in add_segments], segments_at, net_name)
        vias, via_places = _replace(
            d.vias_placed, VIA["net"], index, [self._via(index, r) for r in remove_vias],
            [self._via(index, r) for r in add_vias], vias_at, net_name)
        d.segments, d.vias_placed = segments, vias  # both fit: only now is anything changed
        self.checker.net_changed(index)
        known = {style.name for style in self.styles}
        routing = self.checker.routing
        if any(via_layers(d, self.lef, v, routing)[1] not in known for v in d.via_names):
            self.styles = self._layer_styles(d)  # a via on a cut layer the file never used
        self.version += 1
        self.edited = True
        self.edit_check = self.check(index)
        if self.selected == index:
            self.last_check = self.edit_check
        moved = [("segment", a, b) for a, b in _pairs(remove_segments, add_segments)] + \
            [("via", a, b) for a, b in _pairs(remove_vias, add_vias)]
        self.events.emit("wiring", net=index, moved=moved)
        return segment_places, via_places

    def has_element(self, kind: str, row: list) -> bool:
        """Whether the selected net has this segment or via (names-and-dbu form)."""
        if self.design is None or self.selected is None:
            return False
        segments, vias = self.design.net_wiring(self.selected)
        if kind == "segment":
            return any(self.segment_row(r) == list(row) for r in segments)
        return any(self.via_row(r) == list(row) for r in vias)

    def live_element(self, element: tuple[str, list] | None,
                     moved: list[tuple[str, list, list]] = ()) -> tuple[str, list] | None:
        """A pick after a change of wiring: where a move took it, itself while it exists,
        else None."""
        if element is None:
            return None
        kind, row = element
        for moved_kind, old, new in moved:
            if moved_kind == kind and list(old) == list(row) and self.has_element(kind, new):
                return kind, list(new)
        return element if self.has_element(kind, row) else None

    def _segment(self, index: int, row: list) -> list[int]:
        layer, *rest = row
        if len(rest) != 8:
            raise ValueError(f"a segment is [layer, x1, y1, x2, y2, width, ext1, ext2, shape], "
                             f"not {row}")
        return [index, self.design.layer_index(str(layer)), *(int(v) for v in rest)]

    def _via(self, index: int, row: list) -> list[int]:
        layer, via, x, y, orient = row
        return [index, self.design.layer_index(str(layer)), self.design.via_index(str(via)),
                int(x), int(y), int(orient)]

    def move_command(self, kind: str, row: list, dx: int, dy: int, net: str | None = None
                     ) -> EditWiring:
        """Move a segment or via of ``net`` (default: the selected net) by (dx, dy) dbu."""
        net = net or self.design.nets[self.selected].name
        moved = list(row)
        if kind == "segment":
            moved[1:5] = [row[1] + dx, row[2] + dy, row[3] + dx, row[4] + dy]
            return EditWiring(net, f"Move a {row[0]} wire of {net}",
                              remove_segments=[row], add_segments=[moved])
        moved[2:4] = [row[2] + dx, row[3] + dy]
        return EditWiring(net, f"Move via {row[1]} of {net}", remove_vias=[row],
                          add_vias=[moved])

    def delete_command(self, kind: str, row: list, net: str | None = None) -> EditWiring:
        net = net or self.design.nets[self.selected].name
        if kind == "segment":
            return EditWiring(net, f"Delete a {row[0]} wire of {net}", remove_segments=[row])
        return EditWiring(net, f"Delete via {row[1]} of {net}", remove_vias=[row])

    def add_segment_command(self, layer: str, start: tuple[int, int], end: tuple[int, int],
                            net: str | None = None) -> EditWiring:
        """A wire of ``net`` (default: the selected net); a diagonal drag becomes its longer
        straight leg."""
        net = net or self.design.nets[self.selected].name
        (x1, y1), (x2, y2) = start, end
        if abs(x2 - x1) >= abs(y2 - y1):
            y2 = y1
        else:
            x2 = x1
        return EditWiring(net, f"Add a {layer} wire to {net}",
                          add_segments=[[layer, x1, y1, x2, y2, 0, -1, -1, 0]])

    def add_via_command(self, via: str, at: tuple[int, int], net: str | None = None
                        ) -> EditWiring:
        net = net or self.design.nets[self.selected].name
        metals, _ = via_layers(self.design, self.lef, via)
        layer = metals[0] if metals else routing_layer_names(self.design, self.lef)[0]
        return EditWiring(net, f"Add via {via} to {net}", add_vias=[[layer, via, *at, 0]])

    def snap(self, value_um: float) -> int:
        """Microns -> dbu on the manufacturing grid (the LEF's, else one dbu)."""
        scale = self.design.dbu_per_micron
        grid = max(int(round((self.lef.manufacturing_grid if self.lef else 0) * scale)), 1)
        return int(round(value_um * scale / grid) * grid)

    def save(self, path: str | os.PathLike) -> Path:
        """The edited design as DEF (atomic: temp file, fsync, rename)."""
        return write_def(self.design, path)

    # -- predicted vs reference ------------------------------------------------------------

    def load_prediction(self, path: str | os.PathLike) -> Design:
        """A second DEF of the same design (e.g. ``chipstar.route``'s output) to overlay."""
        if self.design is None:
            raise ValueError("open the reference DEF first")
        predicted = read_def(path, self.lef)
        if predicted.name and self.design.name and predicted.name != self.design.name:
            raise ValueError(f"{path}: design {predicted.name}, not {self.design.name}")
        self.prediction = predicted
        if self.selected is not None:
            self.last_check = self.check(self.selected)
        self.events.emit("prediction")
        return predicted

    # -- route guides ----------------------------------------------------------------------

    def load_guides(self, path: str | os.PathLike) -> Guides:
        """Guides of the open design (layers checked against its LEF when one is open)."""
        if self.design is None:
            raise ValueError("open the DEF the guides belong to first")
        guides = read_guides(path, self.lef)
        names = {net.name for net in self.design.nets}
        if not names & set(guides.nets):
            raise ValueError(f"{path}: none of its {len(guides.nets)} nets is a net of design "
                             f"{self.design.name}")
        self.guides = guides
        self.events.emit("guides")
        return guides

    def clear_guides(self) -> None:
        self.guides = None
        self.events.emit("guides")

    def guide_boxes(self, net: str | None, layers: set[str] | None = None
                    ) -> tuple[np.ndarray, list[str]]:
        """(rectangles (n, 4) in microns, their layer names) of one net's guides or, with
        ``net`` None, of every net; only on ``layers`` when given."""
        if self.guides is None or self.design is None:
            return np.zeros((0, 4)), []
        rects = self.guides.rects if net is None else self.guides.net_rects(net)
        names = [self.guides.layer_names[k] for k in rects[:, RECT["layer"]].tolist()]
        if layers is not None:
            keep = np.array([name in layers for name in names], dtype=bool)
            rects, names = rects[keep], [n for n, k in zip(names, keep, strict=True) if k]
        boxes = rects[:, [RECT["x1"], RECT["y1"], RECT["x2"], RECT["y2"]]]
        return boxes / self.design.dbu_per_micron, names

    def save_guides(self, path: str | os.PathLike) -> Path:
        """GCell-aligned guides covering the (edited) design's wiring, as a ``.guide`` file."""
        if self.design is None or self.lef is None:
            raise ValueError("route guides need the DEF and its LEF (routing layers, vias)")
        return write_guides(guides_from_design(self.design, self.lef, str(path)), path)

    def clear_prediction(self) -> None:
        self.prediction = None
        self.events.emit("prediction")

    def differing_nets(self) -> list[str]:
        """Nets whose predicted wiring differs from the reference's."""
        if self.prediction is None:
            return []
        out = []
        for index, net in enumerate(self.design.nets):
            if net.special:
                continue
            try:
                other = self.prediction.net_index(net.name)
            except KeyError:
                continue
            if not _same_wiring(self.design, index, self.prediction, other):
                out.append(net.name)
        return out

    def grid_trees(self, name: str) -> tuple[object, object] | None:
        """(reference, predicted) GCell trees of a net (``engine.vlsi.grid.GridNet``), or
        None without a LEF, a grid, a prediction, or a tree on either side."""
        if self.prediction is None or self.lef is None or "X" not in self.design.gcell_grid:
            return None
        from engine.vlsi.grid import Snapper, snap_net

        try:
            reference = snap_net(Snapper(self.design, self.lef), self.design.net_index(name))
            predicted = snap_net(Snapper(self.prediction, self.lef),
                                 self.prediction.net_index(name))
        except KeyError:
            return None
        if reference is None or predicted is None:
            return None
        return reference, predicted

    def leaf_iou(self, name: str) -> float | None:
        """Branch ends of the predicted tree vs the reference's, on the GCell grid."""
        from engine.vlsi.tokens import tree_leaves

        trees = self.grid_trees(name)
        if trees is None:
            return None
        reference, predicted = trees
        a = tree_leaves(reference.driver, reference.edges)
        b = tree_leaves(predicted.driver, predicted.edges)
        return len(a & b) / len(a | b) if a | b else 1.0

    def snapped(self, index: int):
        """The selected net on the GCell grid (``GridNet``) or None (no LEF, grid or tree)."""
        if self.lef is None or "X" not in self.design.gcell_grid:
            return None
        from engine.vlsi.grid import Snapper, snap_net

        return snap_net(Snapper(self.design, self.lef), index)


def _pairs(removed: list[list], added: list[list]) -> list[tuple[list, list]]:
    """The rows a move replaced in place (as ``_replace`` puts them): none unless as many
    rows were added as removed."""
    return list(zip(removed, added, strict=True)) if removed and len(removed) == len(added) \
        else []


def _replace(rows: np.ndarray, column: int, index: int, removed: list[list[int]],
             added: list[list[int]], places: list[int] | None, net: str
             ) -> tuple[np.ndarray, list[int]]:
    """``rows`` (sorted by ``column``) with net ``index``'s block edited; see
    ``RouteModel.change_wiring``. Returns the new rows and the removed rows' places."""
    start, end = np.searchsorted(rows[:, column], [index, index + 1])
    block = [list(r) for r in rows[start:end].tolist()]
    taken: list[int] = []
    for row in removed:
        found = next((k for k, r in enumerate(block) if r == row and k not in taken), None)
        if found is None:
            raise EditDoesNotFit(f"net {net} has no {row[1:]} to remove: it is no longer "
                                 "there (undone, moved or deleted since)")
        taken.append(found)
    kept = [r for k, r in enumerate(block) if k not in taken]
    if added and len(added) == len(taken):
        block = [list(r) for r in block]
        for k, row in zip(taken, added, strict=True):
            block[k] = row
    elif added and places is not None and len(places) == len(added):
        block = kept
        for k, row in sorted(zip(places, added, strict=True)):
            block.insert(min(k, len(block)), row)
    else:
        block = kept + added
    middle = np.array(block, dtype=np.int64).reshape(-1, rows.shape[1])
    return np.concatenate([rows[:start], middle, rows[end:]]), taken


def _same_wiring(a: Design, i: int, b: Design, j: int) -> bool:
    def canonical(design: Design, index: int) -> tuple[list, list]:
        segments, vias = design.net_wiring(index)
        segs = sorted((design.layer_names[r[1]], *r[2:6]) for r in segments.tolist())
        placed = sorted((design.via_names[r[2]], *r[3:5]) for r in vias.tolist())
        return segs, placed

    return canonical(a, i) == canonical(b, j)


def _point_segment_distance(rows: np.ndarray, x: float, y: float) -> np.ndarray:
    a = rows[:, [SEG["x1"], SEG["y1"]]].astype(np.float64)
    b = rows[:, [SEG["x2"], SEG["y2"]]].astype(np.float64)
    ab = b - a
    length2 = (ab ** 2).sum(axis=1)
    t = np.clip(((np.array([x, y]) - a) * ab).sum(axis=1) / np.where(length2 > 0, length2, 1),
                0, 1)
    nearest = a + ab * t[:, None]
    return np.hypot(nearest[:, 0] - x, nearest[:, 1] - y)


def _lighter(colour: str, amount: float = 0.45) -> str:
    value = int(colour[1:], 16)
    channels = [(value >> s) & 255 for s in (16, 8, 0)]
    return "#" + "".join(f"{int(c + (255 - c) * amount):02x}" for c in channels)
