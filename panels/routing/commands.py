"""The route canvas's actions as commands (``studio.commands``): open, compare, save, select a
net, show and colour layers, overlays, the 3-D stack, export, route, and the wiring edits.

Elements are named as the DEF and the canvas show them: nets and layers by name, a wire by its
layer and its two ends in µm, a via by its name and place in µm; so a logged command means the
same on another file with the same names. Each wiring edit is one ``EditWiring`` pushed through
``host.push_edit`` (undo, redo, autosave). The functions act on a ``RoutingState``: the model,
the host, and the panel's view for the commands that only change what is drawn (overlays, 3-D,
export). Tests build a state without a window and call ``registry.run``.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from engine import provenance
from engine.io import FormatError
from engine.vlsi.def_ import SEG, VIA
from engine.vlsi.markers import (
    Marker,
    Report,
    check_against,
    read_report,
    sort_markers,
    write_markers,
)
from panels.routing.model import EditWaive, EditWiring, RouteModel, decode
from panels.widgets.panel_state import forget_edits
from studio.commands import Command, CommandArgs, CommandRegistry, Refusal

SCOPE = "routing"
ROUTE_METHOD = "chipstar.route"
READ_ERRORS = (FormatError, ValueError, KeyError, OSError)
COLOUR = re.compile(r"^#[0-9a-fA-F]{6}$")

Point = tuple[float, float]


@dataclass
class RoutingState:
    """What the routing commands act on. ``view`` (the ``RoutingPanel``) is needed only by
    the commands that draw (overlays, 3-D, export, focusing a net); ``submit`` sends a job
    (the view's ``PanelJobs`` shows its progress; without a view, the host's)."""

    model: RouteModel
    host: Any
    view: Any = None
    document: str | None = None            # whose steps this panel put on the history
    prediction_run: Path | None = None     # the run folder of the compared routes
    submit: Callable[[str, dict, dict], None] | None = None
    checked: list[Marker] = field(default_factory=list)    # our own checks' markers
    reports: list[Report] = field(default_factory=list)    # imported, checked against the design
    category: str = ""          # the browser shows this category only ("" = all)
    current: str | None = None  # the marker stepped to last (its name)

    _sorted: tuple[tuple, list[Marker]] = ((), [])

    def markers(self) -> list[Marker]:
        """Every marker the browser lists, sorted (category, net, layer, place); sorted again
        only when the checks or the reports changed (stepping asks on every frame)."""
        key = (id(self.checked), len(self.checked),
               *((id(r), id(r.markers), len(r.markers)) for r in self.reports))
        if self._sorted[0] != key:
            found = list(self.checked)
            for report in self.reports:
                found += report.markers
            self._sorted = (key, sort_markers(found))
        return self._sorted[1]

    def shown(self) -> list[Marker]:
        """The markers of the chosen category, waived ones included."""
        return [m for m in self.markers() if not self.category or m.category == self.category]

    _steps: tuple[tuple, list[Marker], dict[str, int]] = ((), [], {})

    def steppable(self) -> tuple[list[Marker], dict[str, int]]:
        """The markers stepping visits (shown, not waived) and each one's place by name;
        kept until the list, the category or a waiver changes."""
        markers = self.markers()
        key = (id(markers), self.category, self.model.waived_version)
        if self._steps[0] != key:
            waived = self.model.waived
            found = [m for m in self.shown() if m.name not in waived]
            self._steps = (key, found, {m.name: i for i, m in enumerate(found)})
        return self._steps[1], self._steps[2]

    def push(self, edit: EditWiring | EditWaive) -> None:
        """Apply ``edit`` through the document's history; an edit that does not fit is
        refused and changes nothing (the history applies before it records)."""
        try:
            self.host.push_edit(self.model.document, edit, self.model)
        except (ValueError, KeyError) as exc:
            raise Refusal(str(exc.args[0]) if exc.args else str(exc)) from None

    def design_opened(self) -> int:
        """The model read a design: the one before leaves the history (its autosave stays)
        and this one's saved edits are replayed; returns how many."""
        self.leave_document()
        self.document = self.model.document
        restore = getattr(self.host, "restore_edits", None)
        if not callable(restore):
            return 0
        try:
            return restore(self.model.document, self.model, decode)
        except (ValueError, KeyError) as exc:
            self.host.show_error("Saved edits do not fit this design", str(exc))
            return 0

    def leave_document(self) -> None:
        forget_edits(self.host, self.document)

    def sources(self) -> list[str]:
        """The files the view is made of: the DEF, its LEF, a compared DEF, route guides."""
        model = self.model
        found = [model.design.path] if model.design is not None else []
        found += [model.lef_path] if model.lef_path else []
        found += [model.prediction.path] if model.prediction is not None else []
        found += [model.guides.path] if model.guides is not None else []
        return found


# -- arguments ---------------------------------------------------------------------------------


class PathArgs(CommandArgs):
    path: str = Field(description="the file's path")


class OpenDesignArgs(CommandArgs):
    def_path: str = Field(description="the DEF file")
    lef_path: str | None = Field(None, description="its LEF (default: the LEF already open)")


class ExportArgs(CommandArgs):
    path: str = Field(description="the figure's file: .png, .svg or .pdf")
    dpi: int = Field(192, ge=36, le=1200, description="resolution of a PNG")
    caption: bool = Field(False, description="the information line under the figure")


class NetArgs(CommandArgs):
    net: str | None = Field(description="the net's name; none clears the selection")
    focus: bool = Field(True, description="zoom the canvas to the net")


class LayerArgs(CommandArgs):
    layer: str = Field(description="the layer's name, as the DEF and LEF name it")
    visible: bool = Field(True, description="shown on the canvas")


class ColourArgs(CommandArgs):
    layer: str = Field(description="the layer's name")
    colour: str = Field(description="#rrggbb")

    @field_validator("colour")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not COLOUR.match(value):
            raise ValueError("a colour is #rrggbb")
        return value.lower()


class OverlayArgs(CommandArgs):
    name: str = Field(description="the overlay, as its check box names it (congestion, …)")
    on: bool = Field(True, description="drawn")


class StackArgs(CommandArgs):
    on: bool = Field(True, description="the 3-D layer stack in place of the canvas")


class WireArgs(CommandArgs):
    net: str = Field(description="the net's name")
    layer: str = Field(description="the wire's layer")
    from_um: Point = Field(description="one end, [x, y] in µm")
    to_um: Point = Field(description="the other end, [x, y] in µm")


def _offset_field(direction: str) -> Any:
    return Field(0.0, description=f"move {direction} by (µm, on the manufacturing grid)")


class MoveWireArgs(WireArgs):
    dx_um: float = _offset_field("right")
    dy_um: float = _offset_field("up")


class ViaArgs(CommandArgs):
    net: str = Field(description="the net's name")
    via: str = Field(description="the via's name")
    at_um: Point = Field(description="its place, [x, y] in µm")


class MoveViaArgs(ViaArgs):
    dx_um: float = _offset_field("right")
    dy_um: float = _offset_field("up")


class RouteArgs(CommandArgs):
    nets: list[str] = Field(default_factory=list,
                            description="nets to route (default: the selected net)")
    router: Literal["maze", "learned"] = Field("maze", description="which router")
    checkpoint: str = Field("", description="checkpoint folder (the learned router)")


class MarkerArgs(CommandArgs):
    marker: str = Field(description="the marker as the browser names it: category, nets, "
                                    "layer and box in µm")


class WaiveArgs(MarkerArgs):
    waived: bool = Field(True, description="waived (hidden from stepping), or not")


class StepArgs(CommandArgs):
    step: int = Field(1, description="1: the next marker, -1: the previous one")

    @field_validator("step")
    @classmethod
    def _unit(cls, value: int) -> int:
        if value not in (1, -1):
            raise ValueError("step is 1 (next) or -1 (previous)")
        return value


class CategoryArgs(CommandArgs):
    category: str = Field("", description="the category listed (empty: all)")


class MeasureArgs(CommandArgs):
    from_um: Point = Field(description="where the ruler starts, [x, y] in µm")
    to_um: Point = Field(description="where it ends, [x, y] in µm")
    snap_layer: str = Field("", description="snap both ends to this layer's routing tracks "
                                            "(empty: no snapping)")


class InspectArgs(CommandArgs):
    at_um: Point = Field(description="the point, [x, y] in µm")
    tolerance_um: float = Field(0.2, gt=0, le=100, description="how near a wire or via must be")


class GotoArgs(CommandArgs):
    target: str = Field(description="'x, y' in µm, or a net, cell (component) or pin name")
    size_um: float = Field(0.0, ge=0, description="the window's width around a point (0: "
                                                  "keep the zoom)")


# -- lookups: names the user sees -> the model's rows ------------------------------------------


def _design(state: RoutingState):
    design = state.model.design
    if design is None:
        raise Refusal("no design is open: open a DEF first")
    return design


def _file(state: RoutingState) -> str:
    return Path(state.model.design.path).name


def _net_index(state: RoutingState, name: str) -> int:
    design = _design(state)
    for index, net in enumerate(design.nets):
        if net.name == name:
            return index
    raise Refusal(f"no net named {name!r} in {_file(state)}")


def _routing_layer(state: RoutingState, layer: str) -> str:
    names = [s.name for s in state.model.styles if s.kind == "routing"]
    if layer not in names:
        raise Refusal(f"no routing layer {layer!r} in {_file(state)} (its routing layers: "
                      f"{', '.join(names)})")
    return layer


def known_vias(model: RouteModel) -> list[str]:
    """The vias a wire can be joined with: the DEF's own, the LEF's default vias."""
    design, lef = model.design, model.lef
    vias = list(design.vias) + ([v.name for v in lef.vias.values() if v.default] if lef else [])
    return sorted(set(vias) | set(design.via_names))


def _dbu(state: RoutingState, point: Point) -> tuple[int, int]:
    scale = state.model.design.dbu_per_micron
    return int(round(point[0] * scale)), int(round(point[1] * scale))


def _um(state: RoutingState, value: int) -> float:
    return round(value / state.model.design.dbu_per_micron, 6)


def find_wire(state: RoutingState, args: WireArgs) -> list:
    """The net's wire on ``layer`` between the two ends (either way round), as a row."""
    index = _net_index(state, args.net)
    a, b = _dbu(state, args.from_um), _dbu(state, args.to_um)
    segments, _vias = state.model.design.net_wiring(index)
    for raw in segments:
        row = state.model.segment_row(raw)
        ends = ((row[1], row[2]), (row[3], row[4]))
        if row[0] == args.layer and ends in ((a, b), (b, a)):
            return row
    raise Refusal(f"net {args.net} has no {args.layer} wire from {_point(args.from_um)} to "
                  f"{_point(args.to_um)} µm in {_file(state)}")


def find_via(state: RoutingState, args: ViaArgs) -> list:
    index = _net_index(state, args.net)
    at = _dbu(state, args.at_um)
    _segments, vias = state.model.design.net_wiring(index)
    for raw in vias:
        row = state.model.via_row(raw)
        if row[1] == args.via and (row[2], row[3]) == at:
            return row
    raise Refusal(f"net {args.net} has no via {args.via} at {_point(args.at_um)} µm in "
                  f"{_file(state)}")


def wire_args(state: RoutingState, net: str, row: list) -> dict:
    """A wire row as the arguments naming it (the view turns a pick into a command)."""
    return {"net": net, "layer": row[0], "from_um": [_um(state, row[1]), _um(state, row[2])],
            "to_um": [_um(state, row[3]), _um(state, row[4])]}


def via_args(state: RoutingState, net: str, row: list) -> dict:
    return {"net": net, "via": row[1], "at_um": [_um(state, row[2]), _um(state, row[3])]}


def _point(point: Point) -> str:
    return f"({point[0]:g}, {point[1]:g})"


# -- opening and saving ------------------------------------------------------------------------


def _read(read: Callable[[], Any]) -> None:
    try:
        read()
    except READ_ERRORS as exc:
        raise Refusal(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args
                      else str(exc)) from None


def open_file(state: RoutingState, args: PathArgs) -> bool:
    """A DEF (its folder's only LEF with it when none is open yet), a LEF (an open DEF is
    re-read against it) or route guides of the open DEF."""
    path = Path(args.path)
    if path.suffix.lower() == ".guide":
        return open_guides(state, args)
    if path.suffix.lower() in (".lef", ".tlef"):
        _read(lambda: state.model.load_lef(path))
        return True
    lef = None
    if state.model.lef is None:
        found = sorted(path.parent.glob("*.lef"))
        lef = found[0] if len(found) == 1 else None
    _read(lambda: state.model.load_def(path, lef))
    return True


def open_design(state: RoutingState, args: OpenDesignArgs) -> bool:
    _read(lambda: state.model.load_def(args.def_path, args.lef_path))
    return True


def compare(state: RoutingState, args: PathArgs) -> bool:
    """Overlay a second DEF of the design (a router's output) to compare with."""
    _design(state)
    state.prediction_run = None  # set by the view when a run of this panel wrote it
    _read(lambda: state.model.load_prediction(args.path))
    return True


def open_guides(state: RoutingState, args: PathArgs) -> bool:
    _read(lambda: state.model.load_guides(args.path))
    return True


def _save(state: RoutingState, what: str, write: Callable[[str], Path], path: str) -> Path:
    """Write through ``write(path)`` with a ``.provenance.json`` sidecar (the files it was
    made from, hashed before an overwrite, and whether it holds edits)."""
    record = provenance.record(state.sources(), {"saved": what,
                                                 "edited": state.model.edited})
    try:
        written = write(path)
        provenance.write_sidecar(written, record)
    except (OSError, ValueError) as exc:
        raise Refusal(f"{path}: {exc}") from None
    return written


def save_def(state: RoutingState, args: PathArgs) -> str:
    """Write the design as DEF. Over the open file, its edits become the file's: their steps
    leave the history and later edits autosave against the new content."""
    design = _design(state)
    over = Path(args.path).resolve() == Path(design.path).resolve()
    written = _save(state, "the DEF", state.model.save, args.path)
    said = f"Saved the DEF to {written}"
    if over:
        saved = getattr(state.host, "document_saved", None)  # hosts without a history
        if state.document is not None and callable(saved):
            saved(state.document)
        state.model.edited = False
        said += "; its edits are in the file now (undo starts from here)"
    return said


def save_guides(state: RoutingState, args: PathArgs) -> str:
    _design(state)
    written = _save(state, "the route guides", state.model.save_guides, args.path)
    return f"Saved the route guides to {written}"


def export_figure(state: RoutingState, args: ExportArgs) -> str:
    _design(state)
    view = _view(state, "export the canvas")
    try:
        written = view.export_figure(args.path, args.dpi, args.caption)
    except (OSError, ValueError) as exc:
        raise Refusal(f"{args.path}: {exc}" if args.path not in str(exc) else str(exc)) \
            from None
    return f"Exported {written} ({args.dpi} dpi, provenance inside)"


def _view(state: RoutingState, what: str) -> Any:
    if state.view is None:
        raise Refusal(f"cannot {what} without the panel's window")
    return state.view


# -- what is shown -----------------------------------------------------------------------------


def select_net(state: RoutingState, args: NetArgs) -> bool:
    if args.net is None:
        _design(state)
        state.model.select(None)
        return True
    index = _net_index(state, args.net)
    state.model.select(index)
    if args.focus and state.view is not None:
        state.view.canvas.focus_net(index)
    return True


def _layer(state: RoutingState, layer: str) -> str:
    _design(state)
    names = [s.name for s in state.model.styles]
    if layer not in names:
        raise Refusal(f"no layer {layer!r} in {_file(state)} (its layers: {', '.join(names)})")
    return layer


def show_layer(state: RoutingState, args: LayerArgs) -> bool:
    state.model.set_layer(_layer(state, args.layer), visible=args.visible)
    return True


def colour_layer(state: RoutingState, args: ColourArgs) -> bool:
    state.model.set_layer(_layer(state, args.layer), colour=args.colour)
    return True


def overlay(state: RoutingState, args: OverlayArgs) -> bool:
    view = _view(state, "draw an overlay")
    names = list(view.overlay_boxes)
    if args.name not in names:
        raise Refusal(f"no overlay {args.name!r} (overlays: {', '.join(names)})")
    view.show_overlay(args.name, args.on)
    return True


def stack_3d(state: RoutingState, args: StackArgs) -> bool:
    problem = _view(state, "show the 3-D stack").show_3d(args.on)
    if problem:
        raise Refusal(f"the 3-D view is unavailable here: {problem}")
    return True


# -- wiring edits ------------------------------------------------------------------------------


def _offset(state: RoutingState, args: MoveWireArgs | MoveViaArgs) -> tuple[int, int]:
    dx, dy = state.model.snap(args.dx_um), state.model.snap(args.dy_um)
    if dx == 0 and dy == 0:
        raise Refusal("dx_um and dy_um are both 0 on the manufacturing grid: nothing to move")
    return dx, dy


def move_wire(state: RoutingState, args: MoveWireArgs) -> bool:
    row = find_wire(state, args)
    state.push(state.model.move_command("segment", row, *_offset(state, args), net=args.net))
    return True


def move_via(state: RoutingState, args: MoveViaArgs) -> bool:
    row = find_via(state, args)
    state.push(state.model.move_command("via", row, *_offset(state, args), net=args.net))
    return True


def delete_wire(state: RoutingState, args: WireArgs) -> bool:
    row = find_wire(state, args)
    state.push(state.model.delete_command("segment", row, net=args.net))
    return True


def delete_via(state: RoutingState, args: ViaArgs) -> bool:
    row = find_via(state, args)
    state.push(state.model.delete_command("via", row, net=args.net))
    return True


def add_wire(state: RoutingState, args: WireArgs) -> bool:
    """A straight wire (a diagonal becomes its longer leg) joining the net."""
    _net_index(state, args.net)
    layer = _routing_layer(state, args.layer)
    start, end = _dbu(state, args.from_um), _dbu(state, args.to_um)
    if start == end:
        raise Refusal("the wire's two ends are the same point")
    state.push(state.model.add_segment_command(layer, start, end, net=args.net))
    return True


def add_via(state: RoutingState, args: ViaArgs) -> bool:
    _net_index(state, args.net)
    vias = known_vias(state.model)
    if args.via not in vias:
        raise Refusal(f"no via {args.via!r} in {_file(state)} or its LEF (vias: "
                      f"{', '.join(vias[:12])}{'…' if len(vias) > 12 else ''})")
    state.push(state.model.add_via_command(args.via, _dbu(state, args.at_um), net=args.net))
    return True


# -- markers ---------------------------------------------------------------------------------


def check_markers(state: RoutingState, args: None = None) -> str:
    """Run our checks now (with a window: on its worker thread, the list fills when done)."""
    design = _design(state)
    if state.view is not None:
        state.view.start_checks()
        return "Checking the design: the markers list fills when the checks end"
    from panels.routing.checks import design_markers

    state.checked = design_markers(design, state.model.lef, state.model.checker)
    return f"{len(state.checked)} marker(s) from the checks"


def import_markers(state: RoutingState, args: PathArgs) -> str:
    """A ``.lyrdb`` or a TritonRoute/OpenROAD DRC report, checked against the open design:
    markers that do not fit it are listed with why and not drawn."""
    design = _design(state)
    try:
        report = read_report(args.path)
    except (FormatError, OSError, ValueError) as exc:
        raise Refusal(str(exc)) from None
    scale = design.dbu_per_micron
    die = tuple(v / scale for v in design.die_area[:4]) if len(design.die_area) >= 4 else None
    nets = {n.name for n in design.nets}
    layers = list(design.layer_names) + ([*state.model.lef.layers] if state.model.lef else [])
    check_against(report, design.name, layers, nets, die)
    state.reports = [r for r in state.reports if r.path != report.path] + [report]
    if state.view is not None:
        state.view.markers_changed()
    placed = sum(1 for m in report.markers if not m.problem)
    said = f"{Path(args.path).name}: {len(report.markers)} marker(s), {placed} placed"
    if report.mismatches:
        said += f"; {len(report.mismatches)} mismatch(es): {report.mismatches[0]}"
    return said


def export_markers(state: RoutingState, args: PathArgs) -> str:
    design = _design(state)
    markers = state.markers()
    try:
        written = write_markers(args.path, markers, design.name, state.model.waived)
    except (OSError, ValueError) as exc:
        raise Refusal(str(exc)) from None
    return f"Wrote {len(markers)} marker(s) to {written}"


def _marker(state: RoutingState, name: str) -> Marker:
    _design(state)
    for marker in state.markers():
        if marker.name == name:
            return marker
    raise Refusal(f"no marker {name!r} in {_file(state)}")


def show_marker(state: RoutingState, args: MarkerArgs) -> bool:
    """Zoom the canvas to a marker and highlight it; one that does not fit the design is
    named with why, never drawn."""
    marker = _marker(state, args.marker)
    state.current = marker.name
    if marker.problem:
        raise Refusal(f"{marker.name} is not drawn: {marker.problem}")
    if state.view is not None:
        state.view.show_marker(marker)
    return True


def step_marker(state: RoutingState, args: StepArgs) -> str:
    """The next (or previous) marker of the chosen category, waived ones skipped."""
    _design(state)
    shown, place = state.steppable()
    if not shown:
        listed = len(state.shown())
        kind = f"of category {state.category} " if state.category else ""
        raise Refusal(f"all {listed} marker(s) {kind}are waived: nothing to step through"
                      if listed else "no markers to step through (run the checks or import "
                      "a report)")
    if state.current in place:
        at = (place[state.current] + args.step) % len(shown)
    else:
        at = 0 if args.step > 0 else len(shown) - 1
    marker = shown[at]
    state.current = marker.name
    if state.view is not None:
        state.view.show_marker(marker)
    where = f"{at + 1} of {len(shown)}: {marker.name}"
    return where + (f" (not drawn: {marker.problem})" if marker.problem else
                    f" ({marker.text})" if marker.text else "")


def waive_marker(state: RoutingState, args: WaiveArgs) -> bool:
    marker = _marker(state, args.marker)
    if (marker.name in state.model.waived) == args.waived:
        raise Refusal(f"{marker.name} is {'already' if args.waived else 'not'} waived")
    state.push(EditWaive([marker.name], args.waived,
                         f"{'Waive' if args.waived else 'Unwaive'} {marker.category} "
                         f"{'/'.join(marker.nets)}"))
    return True


def marker_category(state: RoutingState, args: CategoryArgs) -> bool:
    _design(state)
    found = sorted({m.category for m in state.markers()})
    if args.category and args.category not in found:
        raise Refusal(f"no markers of category {args.category!r} (categories: "
                      f"{', '.join(found) or 'none'})")
    state.category = args.category
    if state.view is not None:
        state.view.markers_changed()
    return True


def goto(state: RoutingState, args: GotoArgs) -> str:
    """Centre the canvas on 'x, y' µm, or on a net, component or I/O pin by name."""
    design = _design(state)
    view = _view(state, "go to a place")
    scale = design.dbu_per_micron
    text = args.target.strip()
    point = re.fullmatch(r"\(?\s*(-?[\d.]+)\s*[, ]\s*(-?[\d.]+)\s*\)?", text)
    if point:
        try:
            x, y = float(point.group(1)), float(point.group(2))
        except ValueError:
            raise Refusal(f"{text!r} is not 'x, y' in µm") from None
        view.centre_on((x, y), args.size_um)
        return f"Centred on ({x:g}, {y:g}) µm"
    for index, net in enumerate(design.nets):
        if net.name == text:
            state.model.select(index)
            view.canvas.focus_net(index)
            return f"Net {text}"
    for component in design.components:
        if component.name == text:
            view.centre_on((component.x / scale, component.y / scale), args.size_um or 5.0)
            return f"Cell {text} ({component.macro}) at ({component.x / scale:g}, " \
                   f"{component.y / scale:g}) µm"
    for pin in design.pins:
        if pin.name == text and pin.ports:
            port = pin.ports[0]
            view.centre_on((port.x / scale, port.y / scale), args.size_um or 5.0)
            return f"Pin {text} at ({port.x / scale:g}, {port.y / scale:g}) µm"
    raise Refusal(f"{text!r} is neither 'x, y' µm nor a net, cell or pin of {_file(state)}")


def snap_to_tracks(design, layer: str, point: Point) -> Point:
    """``point`` (µm) moved to the nearest DEF TRACKS of ``layer`` in x and in y (an axis
    without tracks for the layer stays as given)."""
    scale = design.dbu_per_micron
    snapped = []
    for axis, value in zip("XY", point, strict=True):
        tracks = [(start, count, step) for a, start, count, step, names in design.tracks
                  if a == axis and layer in names and step > 0]
        if not tracks:
            snapped.append(float(value))
            continue
        best = None
        for start, count, step in tracks:
            k = min(max(round((value * scale - start) / step), 0), max(count - 1, 0))
            here = (start + k * step) / scale
            if best is None or abs(here - value) < abs(best - value):
                best = here
        snapped.append(round(best, 6))
    return snapped[0], snapped[1]


def measure(state: RoutingState, args: MeasureArgs) -> str:
    """A ruler between two points (µm), its ends on the layer's tracks when asked."""
    design = _design(state)
    start, end = args.from_um, args.to_um
    if args.snap_layer:
        _layer(state, args.snap_layer)
        start = snap_to_tracks(design, args.snap_layer, start)
        end = snap_to_tracks(design, args.snap_layer, end)
    dx, dy = end[0] - start[0], end[1] - start[1]
    said = (f"Ruler {_point(start)} to {_point(end)} µm: dx {dx:.4g}, dy {dy:.4g}, "
            f"length {abs(dx) + abs(dy):.4g} µm along wires, {float(np.hypot(dx, dy)):.4g} µm "
            "straight" + (f" (ends on {args.snap_layer} tracks)" if args.snap_layer else ""))
    if state.view is not None:
        state.view.canvas.draw_ruler(start, end, f"dx {dx:.4g}  dy {dy:.4g}  "
                                                 f"{abs(dx) + abs(dy):.4g} µm "
                                                 f"({float(np.hypot(dx, dy)):.4g} straight)")
    return said


def inspect(state: RoutingState, args: InspectArgs) -> str:
    """What is at a point: the nearest wire or via of any signal net (its net, layer, ends,
    width), the LEF rules of its layer, and the markers there."""
    from panels.routing.model import _point_segment_distance

    design, model = _design(state), state.model
    scale = design.dbu_per_micron
    x, y = args.at_um[0] * scale, args.at_um[1] * scale
    lines = [f"At {_point(args.at_um)} µm"]
    segments, vias = design.segments, design.vias_placed
    keep = ~model.special[segments[:, SEG["net"]]] if len(segments) else np.zeros(0, bool)
    segments = segments[keep]
    near = None
    if len(segments):
        d = _point_segment_distance(segments, x, y)
        k = int(np.argmin(d))
        near = (float(d[k]), "segment", segments[k])
    if len(vias):
        d = np.hypot(vias[:, VIA["x"]] - x, vias[:, VIA["y"]] - y)
        k = int(np.argmin(d))
        if near is None or d[k] < near[0]:
            near = (float(d[k]), "via", vias[k])
    if near is not None and near[0] <= args.tolerance_um * scale:
        _d, kind, row = near
        lef = model.lef
        if kind == "segment":
            layer = design.layer_names[int(row[SEG["layer"]])]
            rule = lef.layers.get(layer) if lef is not None else None
            width = row[SEG["width"]] / scale if row[SEG["width"]] > 0 else (
                rule.width if rule is not None else None)
            lines.append(f"net {design.nets[int(row[SEG['net']])].name}, wire on {layer} from "
                         f"({row[SEG['x1']] / scale:g}, {row[SEG['y1']] / scale:g}) to "
                         f"({row[SEG['x2']] / scale:g}, {row[SEG['y2']] / scale:g}) µm, width "
                         + (f"{width:g} µm" if width is not None else "unknown (no LEF)"))
        else:
            layer = design.layer_names[int(row[VIA["layer"]])]
            rule = lef.layers.get(layer) if lef is not None else None
            lines.append(f"net {design.nets[int(row[VIA['net']])].name}, via "
                         f"{design.via_names[int(row[VIA['via']])]} on {layer} at "
                         f"({row[VIA['x']] / scale:g}, {row[VIA['y']] / scale:g}) µm")
        if rule is not None:
            lines.append(f"LEF {layer}: WIDTH {rule.width:g}, SPACING {rule.spacing:g}, "
                         f"PITCH {rule.pitch:g} µm {rule.direction.lower()}".rstrip())
    else:
        lines.append("no wire or via within "
                     f"{args.tolerance_um:g} µm")
    for marker in state.markers():
        x1, y1, x2, y2 = marker.box
        if not marker.problem and x1 - args.tolerance_um <= args.at_um[0] <= x2 + \
                args.tolerance_um and y1 - args.tolerance_um <= args.at_um[1] <= y2 + \
                args.tolerance_um:
            lines.append(f"marker {marker.category} {'/'.join(marker.nets)}: {marker.text}"
                         + (" (waived)" if marker.name in model.waived else ""))
    return "\n".join(lines)


# -- routing jobs ------------------------------------------------------------------------------


def route(state: RoutingState, args: RouteArgs) -> bool:
    """Submit ``chipstar.route`` on the nets of this design, its edits included (an edited
    design is written to the workspace first)."""
    model = state.model
    if model.design is None or model.lef_path is None:
        raise Refusal("open a DEF and its LEF first")
    nets = list(args.nets) or ([model.design.nets[model.selected].name]
                               if model.selected is not None else [])
    if not nets:
        raise Refusal("select a net or name the nets to route")
    for name in nets:
        _net_index(state, name)
    if args.router == "learned" and not args.checkpoint.strip():
        raise Refusal("the learned router needs a checkpoint (from chipstar.train with "
                      "source=def)")
    try:
        inputs = {"def": design_for_engine(state), "lef": model.lef_path}
    except OSError as exc:
        raise Refusal(f"cannot write the edited design: {exc}") from None
    if args.router == "learned":
        inputs["checkpoint"] = args.checkpoint.strip()
    params = {"router": args.router, "nets": ",".join(nets)}
    submit = state.submit or (lambda method, p, i: state.host.submit_job(method, p, i))
    submit(ROUTE_METHOD, params, inputs)
    return True


def design_for_engine(state: RoutingState) -> str:
    """The open DEF's path, or (after edits) a copy written to the workspace (a host without
    one: the temporary folder; never beside the user's own design files)."""
    design = state.model.design
    if not state.model.edited:
        return design.path
    workspace = getattr(state.host, "workspace_path", None)
    folder = Path(workspace()) / "routing" if callable(workspace) else \
        Path(tempfile.gettempdir()) / "studio-routing"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{Path(design.path).stem}-edited.def"
    state.model.save(target)
    return str(target)


# -- the registry ------------------------------------------------------------------------------

COMMANDS = [
    Command("routing.open", "Open a design file", "Open a DEF, a LEF or route guides in the "
            "route canvas.", open_file, PathArgs, menu="Routing/Open…"),
    Command("routing.open_design", "Open a DEF with its LEF", "Read a DEF against the LEF "
            "given (default: the one open).", open_design, OpenDesignArgs),
    Command("routing.compare", "Compare with a DEF", "Overlay a second DEF of the design "
            "(a router's output) and list the nets routed differently.", compare, PathArgs),
    Command("routing.save_def", "Save the DEF", "Write the design, its edits included, as "
            "DEF (over the open file, the edits become the file's).", save_def, PathArgs),
    Command("routing.open_guides", "Open route guides", "Draw a .guide file of the open "
            "design as an overlay.", open_guides, PathArgs),
    Command("routing.save_guides", "Save route guides", "Write GCell-aligned guides covering "
            "the design's wiring (needs the LEF).", save_guides, PathArgs),
    Command("routing.export_figure", "Export the route canvas", "The canvas as PNG, SVG or "
            "PDF with its rulers, legend and provenance.", export_figure, ExportArgs),
    Command("routing.select_net", "Select a net", "Select a net by name: its statistics, "
            "checks and editing; the canvas zooms to it.", select_net, NetArgs),
    Command("routing.show_layer", "Show or hide a layer", "Draw a layer or hide it.",
            show_layer, LayerArgs),
    Command("routing.colour_layer", "Colour a layer", "Draw a layer in another colour.",
            colour_layer, ColourArgs),
    Command("routing.overlay", "Show or hide an overlay", "GCell grid, congestion, the "
            "selected net's grid tree, guides, the compared routes…", overlay, OverlayArgs),
    Command("routing.view_3d", "Show the 3-D layer stack", "The layers stacked in 3-D in "
            "place of the canvas (needs OpenGL 2.1).", stack_3d, StackArgs),
    Command("routing.move_wire", "Move a wire", "Move a wire of a net by dx, dy µm (arrow "
            "keys: one track pitch).", move_wire, MoveWireArgs, undoable=True),
    Command("routing.move_via", "Move a via", "Move a via of a net by dx, dy µm.",
            move_via, MoveViaArgs, undoable=True),
    Command("routing.delete_wire", "Delete a wire", "Remove a wire of a net (Delete key on "
            "the picked wire).", delete_wire, WireArgs, undoable=True),
    Command("routing.delete_via", "Delete a via", "Remove a via of a net.", delete_via,
            ViaArgs, undoable=True),
    Command("routing.add_wire", "Add a wire", "Add a straight wire on a routing layer to a "
            "net.", add_wire, WireArgs, undoable=True),
    Command("routing.add_via", "Add a via", "Add a via to a net.", add_via, ViaArgs,
            undoable=True),
    Command("routing.route", "Route nets", "Run chipstar.route (maze or learned router) on "
            "nets of this design and compare its routes.", route, RouteArgs),
    Command("routing.check_markers", "Check the design for markers", "Opens, shorts, "
            "unrouted multi-pin nets, off-track wires, LEF width and spacing, GCell overflow.",
            check_markers, None),
    Command("routing.import_markers", "Import a marker report", "A KLayout .lyrdb or a "
            "TritonRoute/OpenROAD DRC report; mismatches with the design are listed.",
            import_markers, PathArgs),
    Command("routing.export_markers", "Export the markers", "The markers list as .csv or as "
            "a KLayout .lyrdb report database.", export_markers, PathArgs),
    Command("routing.show_marker", "Show a marker", "Zoom the canvas to a marker and "
            "highlight it.", show_marker, MarkerArgs),
    Command("routing.step_marker", "Next or previous marker", "Step through the markers "
            "listed (waived ones skipped).", step_marker, StepArgs),
    Command("routing.waive_marker", "Waive a marker", "Waive or unwaive a marker; "
            "remembered with the design (undo, autosave).", waive_marker, WaiveArgs,
            undoable=True),
    Command("routing.marker_category", "List one marker category", "Show one category of "
            "markers in the browser (empty: all).", marker_category, CategoryArgs),
    Command("routing.measure", "Measure with the ruler", "A ruler between two points in "
            "µm, its ends snapped to a layer's tracks.", measure, MeasureArgs),
    Command("routing.inspect", "Inspect a point", "The wire or via at a point: net, layer, "
            "ends, width, its layer's LEF rules, markers there (right-click).", inspect,
            InspectArgs),
    Command("routing.goto", "Go to a place", "Centre the canvas on 'x, y' µm or on a net, "
            "cell or pin by name.", goto, GotoArgs),
]


def register(registry: CommandRegistry) -> CommandRegistry:
    """Add the routing commands (again, for a panel rebuilt in the same window)."""
    return registry.add_all(COMMANDS)
