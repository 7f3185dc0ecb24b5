"""The route canvas panel: open LEF/DEF, look at the layout layer by layer, find a net, read
its statistics and checks, edit its wiring (undoable, autosaved), compare with routes a
router wrote (a second DEF, or ``chipstar.route`` run from here), save the DEF. Route guides
(``.guide``) opened over a design are a translucent overlay; "Save guides…" writes the
design's own (GCell-aligned, covering its wiring).

Left: the layers (checkbox = visible, swatch = colour; double-click the swatch to change it),
the overlays, the net search. Middle: the canvas (``LayoutCanvas``) or the 3-D layer stack.
Right: the selected net (statistics, connectivity, shorts, editing), every net's statistics,
and the router form. Design-wide checks run on a worker thread.

Every button, key, check box and canvas gesture that changes something runs a command
(``panels/routing/commands.py``) through the window's registry, naming nets, layers, wires and
vias as the user sees them; the commands push wiring edits through ``host.push_edit`` (undo,
autosave). This class keeps the layout, what is drawn, the pick, and turning a pick or a
gesture into a command's arguments.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QColorDialog,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import provenance
from engine.vlsi.markers import Marker, natural_key
from panels.routing.canvas import OVERLAYS, LayoutCanvas
from panels.routing.checks import design_markers, unrouted_multi_pin
from panels.routing.commands import (
    COMMANDS,
    ROUTE_METHOD,
    SCOPE,
    RoutingState,
    known_vias,
    via_args,
    wire_args,
)
from panels.routing.geometry import Checker
from panels.routing.markers import MarkersTab
from panels.routing.model import NetStats, RouteModel
from panels.routing.worker import Worker
from panels.widgets.command_status import show_outcome
from panels.widgets.commands import command
from panels.widgets.drops import OpensDroppedFiles
from panels.widgets.jobs import PanelJobs
from panels.widgets.plot_export import route_export
from studio.command_widgets import connect, connect_button, mark_argument
from studio.commands import Invocation, registry_for
from studio.widgets.figure_export import DEFAULT_DPI, ExportChoice, ask_export, export_widget

STATS_COLUMNS = ["net", "segments", "vias", "wirelength (µm)", "pins", "connectivity",
                 "shorts", "leaf IoU"]
MODES = ("Select", "Add wire", "Add via", "Measure")
TAB_NET, TAB_NETS, TAB_ROUTE = range(3)
CLICK_PIXELS = 6
SNAPPING_NOTE = (
    "GCell snapping (engine.vlsi.grid): each wire marks every GCell it crosses on its layer; "
    "a via joins its GCell on both layers; a pin sits at its first shape's centre; the tree "
    "is the breadth-first tree from the driver pruned to the loads. Dashed yellow: the grid "
    "tree; square: driver; circles: loads; triangles: layer changes.")
PICK_FIRST = "Pick a wire or via of the selected net first (click it)."


class NetNameItem(QTableWidgetItem):
    """A net name that sorts naturally: ``resp_msg[2]`` before ``resp_msg[15]``."""

    def __lt__(self, other: QTableWidgetItem) -> bool:
        return natural_key(self.text()) < natural_key(other.text())


class RoutingPanel(OpensDroppedFiles, QWidget):
    def __init__(self, host: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.model = RouteModel()
        self.element: tuple[str, list] | None = None   # the picked segment or via
        self.pending_start: tuple[int, int] | None = None
        self.dragging: str | None = None                 # "move" or "draw" while a drag edits
        self.all_stats: dict[str, NetStats] = {}
        self.stack_view = None
        self._generation = 0
        self._pending_markers: dict | None = None  # restored, waiting for the checks
        self.worker = Worker(self)
        self.worker.finished.connect(self._on_checks)
        self.commands = registry_for(host, COMMANDS)
        self.state = RoutingState(self.model, host, view=self, submit=self._submit_route)
        self.commands.bind(SCOPE, self.state)
        self._stop_listening = self.commands.listen(self._on_invocation)
        self._build()
        self.model.events.connect("loaded", self._on_loaded)
        self.model.events.connect("layers", self._on_layers)
        self.model.events.connect("selected", lambda index: self._on_selected())
        self.model.events.connect("wiring", self._on_wiring)
        self.model.events.connect("prediction", self._on_prediction)
        self.model.events.connect("guides", self._on_guides)
        self.model.events.connect("waived", self.markers_changed)
        self.jobs = PanelJobs(host, self.route_status.setText, on_result=self._on_result)
        self.setAcceptDrops(True)

    # -- layout ----------------------------------------------------------------------------

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        bar = QHBoxLayout()
        for text, command_id, ask in (
                ("Open DEF…", "routing.open", self._choose_def),
                ("Open LEF…", "routing.open", self._choose_lef),
                ("Compare with DEF…", "routing.compare", self._choose_prediction),
                ("Save DEF…", "routing.save_def", self._choose_save),
                ("Open guides…", "routing.open_guides", self._choose_guides),
                ("Save guides…", "routing.save_guides", self._choose_save_guides),
                ("Export figure…", "routing.export_figure", self._choose_export)):
            button = QPushButton(text)
            mark_argument(button, command_id)  # asks for the command's file, then runs it
            button.clicked.connect(ask)
            bar.addWidget(button)
        self.stack_box = QCheckBox("3-D layer stack")
        connect(self.stack_box.toggled, self.stack_box, self.commands, "routing.view_3d",
                lambda on: {"on": on})
        bar.addWidget(self.stack_box)
        bar.addStretch(1)
        layout.addLayout(bar)

        self.canvas = LayoutCanvas(self.model, self._on_canvas_click, self._on_canvas_drag,
                                   self._on_canvas_right_click)
        self.ruler_start: tuple[float, float] | None = None
        self._route_scene_export()
        self.views = QStackedWidget()
        self.views.addWidget(self.canvas)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._build_left())
        splitter.addWidget(self.views)
        splitter.addWidget(self._build_right())
        splitter.setSizes([230, 800, 360])
        layout.addWidget(splitter, 1)
        self.status = QLabel("Open a DEF (and its LEF): File > Open, the buttons above, or "
                             "drop the files here.")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)

    def _route_scene_export(self) -> None:
        """The canvas's right-click "Export..." is pyqtgraph's own exporter, which writes no
        provenance: it asks for ``routing.export_figure`` as the button does."""
        route_export(self.canvas, "routing.export_figure", lambda: self._choose_export())

    def _build_left(self) -> QWidget:
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(QLabel("Layers (double-click a swatch for its colour)"))
        self.layer_tree = QTreeWidget()
        self.layer_tree.setHeaderLabels(["layer", "colour"])
        self.layer_tree.setRootIsDecorated(False)
        connect(self.layer_tree.itemChanged, self.layer_tree, self.commands,
                "routing.show_layer", self._layer_item_args)
        self.layer_tree.itemDoubleClicked.connect(self._on_layer_double_click)
        column.addWidget(self.layer_tree, 2)
        column.addWidget(QLabel("Overlays"))
        self.overlay_boxes: dict[str, QCheckBox] = {}
        overlays = QGridLayout()  # two columns: one would make the panel taller than 800 px
        for number, name in enumerate(OVERLAYS):
            box = QCheckBox(name)
            box.setChecked(self.canvas.overlay_on[name])
            connect(box.toggled, box, self.commands, "routing.overlay",
                    lambda on, n=name: {"name": n, "on": on})
            if name == "congestion":
                box.setToolTip("Routing demand per GCell: the signal wires crossing it on the "
                               "visible routing layers, divided by its track capacity there "
                               "when the LEF gives pitches (1 = full). Colours: inferno, "
                               "black = 0 up to yellow = the largest value (in the label).")
            self.overlay_boxes[name] = box
            overlays.addWidget(box, number // 2, number % 2)
        column.addLayout(overlays)
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Find a net (name contains…)")
        self.search_edit.textChanged.connect(self.search)
        connect(self.search_edit.returnPressed, self.search_edit, self.commands,
                "routing.select_net", self._first_hit_args)
        self.net_list = QListWidget()
        connect(self.net_list.currentItemChanged, self.net_list, self.commands,
                "routing.select_net",
                lambda item, _previous: {"net": item.text()} if item is not None else None)
        column.addWidget(self.search_edit)
        column.addWidget(self.net_list, 3)
        self.goto_edit = QLineEdit()
        self.goto_edit.setPlaceholderText("Go to: x, y (µm) or a net, cell or pin name")
        connect(self.goto_edit.returnPressed, self.goto_edit, self.commands, "routing.goto",
                lambda: {"target": self.goto_edit.text()} if self.goto_edit.text().strip()
                else None)
        column.addWidget(self.goto_edit)
        return left

    def _build_right(self) -> QWidget:
        self.tabs = QTabWidget()
        self.tabs.addTab(self._build_net_tab(), "Net")
        self.nets_table = QTableWidget(0, len(STATS_COLUMNS))
        self.nets_table.setHorizontalHeaderLabels(STATS_COLUMNS)
        self.nets_table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents)
        self.nets_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.nets_table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        connect(self.nets_table.cellDoubleClicked, self.nets_table, self.commands,
                "routing.select_net",
                lambda row, _col: {"net": self.nets_table.item(row, 0).text()})
        self.tabs.addTab(self.nets_table, "All nets")
        self.tabs.addTab(self._build_route_tab(), "Route")
        self.markers_tab = MarkersTab(self)
        self.tabs.addTab(self.markers_tab, "Markers")
        return self.tabs

    def _build_net_tab(self) -> QWidget:
        tab = QWidget()
        column = QVBoxLayout(tab)
        self.net_info = QLabel("No net selected: click a wire or search by name.")
        self.net_info.setWordWrap(True)
        self.net_info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.net_info)
        self.snap_note = QLabel(SNAPPING_NOTE)
        self.snap_note.setWordWrap(True)
        self.snap_note.setStyleSheet("color: #999;")
        column.addWidget(self.snap_note)
        form = QFormLayout()
        self.mode_box = QComboBox()
        self.mode_box.addItems(MODES)
        self.mode_box.setToolTip(
            "Select: click a net, then click its wire or via to pick it and drag it to move it "
            "by whole track pitches. Add wire: click both ends, or drag (Shift-drag in any "
            "mode). Add via: click. Delete removes the picked wire or via, arrows nudge it; "
            "every edit is one undo step. Measure: click both ends of a ruler (they snap to the "
            "wire layer's tracks). Right-click anything to inspect it.")
        self.mode_box.currentTextChanged.connect(self._mode_changed)
        self.layer_box = QComboBox()
        self.via_box = QComboBox()
        form.addRow("Click to", self.mode_box)
        form.addRow("Wire layer", self.layer_box)
        form.addRow("Via", self.via_box)
        moves = QHBoxLayout()
        self.dx_box = QDoubleSpinBox(minimum=-1000, maximum=1000, decimals=3, singleStep=0.14,
                                     suffix=" µm")
        self.dy_box = QDoubleSpinBox(minimum=-1000, maximum=1000, decimals=3, singleStep=0.14,
                                     suffix=" µm")
        for widget in (QLabel("dx"), self.dx_box, QLabel("dy"), self.dy_box):
            moves.addWidget(widget)
        form.addRow("Move by", moves)
        column.addLayout(form)
        buttons = QHBoxLayout()
        self.move_button = QPushButton("Move picked")
        connect_button(self.move_button, self.commands, ("routing.move_wire", "routing.move_via"),
                       self._move_by_boxes_args)
        self.delete_button = QPushButton("Delete picked")
        connect_button(self.delete_button, self.commands,
                       ("routing.delete_wire", "routing.delete_via"), self._delete_args)
        buttons.addWidget(self.move_button)
        buttons.addWidget(self.delete_button)
        column.addLayout(buttons)
        self.check_info = QLabel("")
        self.check_info.setWordWrap(True)
        column.addWidget(self.check_info)
        column.addStretch(1)
        return tab

    def _build_route_tab(self) -> QWidget:
        tab = QWidget()
        form = QFormLayout(tab)
        self.router_box = QComboBox()
        self.router_box.addItems(["maze", "learned"])
        self.checkpoint_edit = QLineEdit()
        self.checkpoint_edit.setPlaceholderText("checkpoint folder (learned router)")
        choose = QPushButton("Checkpoint…")
        mark_argument(choose, "routing.route")  # fills the form's checkpoint
        choose.clicked.connect(self._choose_checkpoint)
        self.route_nets_edit = QLineEdit()
        self.route_nets_edit.setPlaceholderText("net names, comma-separated (default: the "
                                                "selected net)")
        self.route_button = QPushButton("Route with chipstar.route")
        connect_button(self.route_button, self.commands, "routing.route", self._route_args)
        self.route_status = QLabel("")
        self.route_status.setWordWrap(True)
        form.addRow("Router", self.router_box)
        form.addRow(self.checkpoint_edit, choose)
        form.addRow("Nets", self.route_nets_edit)
        form.addRow(self.route_button)
        form.addRow(self.route_status)
        return tab

    def sizeHint(self) -> QSize:
        return QSize(1400, 850)

    # -- opening and saving ----------------------------------------------------------------

    # -- commands: the wrappers tests, drops and the window call -----------------------------

    def _run(self, command_id: str, **args) -> bool:
        """Run a command as a user's action: True when it ran; a refusal is reported."""
        return self.commands.trigger(command_id, **args) is not None

    def _on_invocation(self, invocation: Invocation) -> None:
        """A routing command's outcome in the status line: its refusal, or what it said."""
        show_outcome(self.status, invocation, SCOPE)

    def open_file(self, path: str | os.PathLike) -> bool:
        """A DEF (with its folder's only LEF when none is open), a LEF or route guides
        (``routing.open``). Problems are reported, never raised."""
        return self._run("routing.open", path=str(path))

    def open_design(self, def_path: str | os.PathLike, lef_path: str | os.PathLike | None
                    ) -> bool:
        return self._run("routing.open_design", def_path=str(def_path),
                         lef_path=str(lef_path) if lef_path else None)

    def select_paper(self, slug: str) -> None:
        """Opened from a paper's card: show the shared gcd design when nothing is open."""
        from engine.vlsi import shared_design_paths

        found = shared_design_paths()
        if self.model.design is None and found is not None:
            self.open_design(found[1], found[0])
        self.tabs.setCurrentIndex(TAB_ROUTE)

    def save_def(self, path: str | os.PathLike) -> bool:
        return self._run("routing.save_def", path=str(path))

    def load_guides(self, path: str | os.PathLike) -> bool:
        return self._run("routing.open_guides", path=str(path))

    def save_guides(self, path: str | os.PathLike) -> bool:
        return self._run("routing.save_guides", path=str(path))

    def load_prediction(self, path: str | os.PathLike) -> bool:
        return self._run("routing.compare", path=str(path))

    @property
    def prediction_run(self) -> Path | None:
        return self.state.prediction_run

    def _on_loaded(self) -> None:
        design, model = self.model.design, self.model
        self._generation += 1
        self.element, self.pending_start, self.ruler_start = None, None, None
        self.canvas.draw_ruler(None)
        self.state.checked, self.state.reports = [], []  # another design's markers go
        self.state.current, self.state.category = None, ""
        self._fill_layers()
        self.layer_box.clear()
        self.layer_box.addItems([s.name for s in model.styles if s.kind == "routing"])
        self.via_box.clear()
        self.via_box.addItems(known_vias(model))
        self.canvas.redraw()
        self._label_congestion()
        if self.stack_view is not None:
            self.stack_view.set_model(model)
        restored = self.state.design_opened()
        summary = design.summary()
        self.status.setText(
            f"{Path(design.path).name}: design {design.name}, {summary['nets']} nets "
            f"({summary['routed_nets']} routed), {summary['segments']} segments, "
            f"{summary['vias']} vias, {summary['components']} components"
            + (f"; power: {summary['special_nets']} special nets, "
               f"{summary['special_segments']} segments, {summary['special_vias']} vias"
               if summary["special_nets"] else "")
            + (f"; LEF {Path(model.lef_path).name}" if model.lef else
               "; no LEF: open one for cells, pins, snapping and congestion capacity")
            + (f"; {restored} saved edit(s) restored" if restored else "")
            + (f"; warnings: {'; '.join(design.warnings)}" if design.warnings else ""))
        self.search(self.search_edit.text())
        self._fill_stats_table()
        self.markers_changed()
        self._start_checks()
        self._on_selected()

    def _fill_layers(self) -> None:
        self.layer_tree.blockSignals(True)
        self.layer_tree.clear()
        for style in self.model.styles:
            item = QTreeWidgetItem([style.name, ""])
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(0, Qt.CheckState.Checked if style.visible
                               else Qt.CheckState.Unchecked)
            item.setBackground(1, QBrush(QColor(style.colour)))
            item.setToolTip(0, f"{style.kind} layer")
            self.layer_tree.addTopLevelItem(item)
        self.layer_tree.blockSignals(False)

    # -- layers and overlays --------------------------------------------------------------

    def set_layer_visible(self, name: str, visible: bool) -> bool:
        return self._run("routing.show_layer", layer=name, visible=visible)

    def set_layer_colour(self, name: str, colour: str) -> bool:
        return self._run("routing.colour_layer", layer=name, colour=colour)

    def set_overlay(self, name: str, on: bool) -> bool:
        return self._run("routing.overlay", name=name, on=on)

    @command("Cannot draw the overlay")
    def show_overlay(self, name: str, on: bool) -> None:
        """Draw or hide an overlay (``routing.overlay``), its check box kept in step."""
        box = self.overlay_boxes[name]
        if box.isChecked() != bool(on):
            box.blockSignals(True)
            box.setChecked(bool(on))
            box.blockSignals(False)
        self.canvas.set_overlay(name, on)
        if name == "congestion":
            self._label_congestion()

    def _label_congestion(self) -> None:
        """The heat map's scale on its checkbox: what the brightest GCell holds."""
        demand = self.canvas.congestion_map
        text = "congestion"
        if self.canvas.overlay_on["congestion"] and demand is not None:
            unit = "of track capacity" if self.model.lef is not None else "wires"
            text += f" (0 to {demand.max():.2f} {unit})"
        self.overlay_boxes["congestion"].setText(text)

    def _layer_item_args(self, item: QTreeWidgetItem, column: int) -> dict | None:
        if column != 0:
            return None
        return {"layer": item.text(0), "visible": item.checkState(0) == Qt.CheckState.Checked}

    def _on_layer_double_click(self, item: QTreeWidgetItem, column: int) -> None:
        if column != 1:
            return
        chosen = QColorDialog.getColor(QColor(self.model.style(item.text(0)).colour), self)
        if chosen.isValid():
            self.set_layer_colour(item.text(0), chosen.name())

    def _on_layers(self) -> None:
        self.layer_tree.blockSignals(True)
        for i in range(self.layer_tree.topLevelItemCount()):
            item = self.layer_tree.topLevelItem(i)
            style = self.model.style(item.text(0))
            item.setCheckState(0, Qt.CheckState.Checked if style.visible
                               else Qt.CheckState.Unchecked)
            item.setBackground(1, QBrush(QColor(style.colour)))
        self.layer_tree.blockSignals(False)
        self.canvas.apply_visibility()
        if self.canvas.overlay_on["congestion"]:
            self.canvas.draw_congestion()
            self._label_congestion()
        if self.stack_view is not None:
            self.stack_view.apply_styles()

    # -- nets ------------------------------------------------------------------------------

    def search(self, text: str) -> list[str]:
        """Fill the list with nets whose name contains ``text``; returns their names."""
        names = [self.model.design.nets[i].name for i in self.model.search(text)] \
            if self.model.design else []
        self.net_list.blockSignals(True)
        self.net_list.clear()
        for name in names:
            self.net_list.addItem(QListWidgetItem(name))
        self.net_list.blockSignals(False)
        return names

    def _first_hit_args(self) -> dict | None:
        return {"net": self.net_list.item(0).text()} if self.net_list.count() else None

    def select_net(self, name: str | None, focus: bool = True) -> bool:
        return self._run("routing.select_net", net=name, focus=focus)

    def _on_selected(self) -> None:
        self.element, self.pending_start = None, None
        self.canvas.draw_selection()
        self._show_net_info()
        if self.stack_view is not None:
            self.stack_view.draw_selection()

    def _show_net_info(self) -> None:
        stats = self.model.last_check
        if stats is None:
            self.net_info.setText("No net selected: click a wire or search by name.")
            self.check_info.setText("")
            return
        net = self.model.design.nets[self.model.selected]
        lines = [f"<b>{stats.name}</b>: {stats.segments} segments, {stats.vias} vias, "
                 f"{stats.wirelength_um:.2f} µm of wire, {stats.pins} pins "
                 f"({', '.join(f'{c}/{p}' for c, p in net.pins[:6])}"
                 f"{'…' if len(net.pins) > 6 else ''})"]
        if stats.leaf_iou is not None:
            lines.append(f"leaf IoU vs the prediction: {stats.leaf_iou:.3f}")
        snapped = self.model.snapped(self.model.selected)
        if snapped is not None:
            lines.append(f"on the GCell grid: driver {snapped.driver}, {len(snapped.loads)} "
                         f"loads, {len(snapped.edges)} grid edges"
                         + (f", {snapped.moved_pins} pin(s) moved to the nearest wired GCell"
                            if snapped.moved_pins else ""))
        self.net_info.setText("<br>".join(lines))
        self._show_checks(stats)

    def _show_checks(self, stats: NetStats) -> None:
        shorts = self.model.shorts(self.model.selected)
        text = f"Connectivity: {stats.connectivity.describe()}. "
        text += ("No same-layer shorts." if not shorts else
                 f"<span style='color:#ff5555'>{len(shorts)} short(s)</span>: " + "; ".join(
                     f"with {other} on {layer} at ({x:.2f}, {y:.2f}) µm"
                     for other, layer, (x, y) in shorts[:5]))
        if self.element is not None:
            text += f"<br>Picked {self.describe_element(*self.element)}"
        self.check_info.setText(text)

    def describe_element(self, kind: str, row: list) -> str:
        """A picked wire or via in microns, as the canvas's rulers show it."""
        scale = self.model.design.dbu_per_micron
        if kind == "segment":
            layer, x1, y1, x2, y2 = row[:5]
            return (f"wire on {layer} from ({x1 / scale:.3f}, {y1 / scale:.3f}) to "
                    f"({x2 / scale:.3f}, {y2 / scale:.3f}) µm")
        layer, via, x, y = row[:4]
        return f"via {via} on {layer} at ({x / scale:.3f}, {y / scale:.3f}) µm"

    # -- the canvas ------------------------------------------------------------------------

    def _on_canvas_click(self, x: float, y: float, modifiers=None) -> None:
        if self.model.design is not None:
            self.click(x, y, self._click_tolerance())

    def _click_tolerance(self) -> float:
        """``CLICK_PIXELS`` in microns at the current zoom."""
        pixel = self.canvas.box.viewPixelSize()
        return CLICK_PIXELS * max(pixel[0], pixel[1])

    @command("Cannot edit the net")
    def _on_canvas_drag(self, phase: str, start: tuple[float, float],
                        end: tuple[float, float], modifiers) -> bool:
        """A left drag on the canvas (points in µm). Started on a wire or via of the selected
        net (Select mode) it moves that element by whole track pitches of its layer; in "Add
        wire" mode, or with Shift, it draws a wire on the chosen layer from press to release,
        its ends on the layer's routing tracks.
        The canvas shows a dashed preview; the release pushes one undoable edit. Anything
        else (False at the start) pans the view."""
        if phase == "start":
            self.dragging = self._drag_kind(start, modifiers)
            if self.dragging is None:
                return False
        if self.dragging is None:
            return False
        if self.model.selected is None or (self.dragging == "move" and self.element is None):
            self._end_drag()  # an undo or a reopen took away what the drag was editing
            self.status.setText("The drag's wire or net is gone (undone or reopened): "
                                "nothing was changed.")
            return True
        if self.dragging == "draw":
            layer = self.layer_box.currentText()
            a, b = self._on_tracks(layer, start), self._on_tracks(layer, end)
            if phase == "finish":
                self._end_drag()
                self.add_segment(layer, a, b)
            elif a != b:
                wire = self.model.add_segment_command(layer, a, b).add_segments[0]
                self.canvas.draw_preview(("segment", wire))
            return True
        dx, dy = self._pitch_steps(start, end)
        if phase == "finish":
            self._end_drag()
            self.move_element(dx, dy)
        else:
            command = self.model.move_command(*self.element, dx, dy)
            kind = self.element[0]
            self.canvas.draw_preview((kind, command.add_segments[0] if kind == "segment"
                                      else command.add_vias[0]))
        return True

    def _drag_kind(self, start: tuple[float, float], modifiers) -> str | None:
        """What a drag from ``start`` does: "draw", "move" (picking the element under it) or
        None (pan)."""
        if self.model.design is None:
            return None
        mode = self.mode_box.currentText()
        shift = bool(modifiers & Qt.KeyboardModifier.ShiftModifier) if modifiers else False
        if mode == "Add wire" or shift:
            if self.model.selected is None or not self.layer_box.currentText():
                self.status.setText("Select a net first: a drawn wire joins the selected net.")
                return None
            self.pending_start = None
            return "draw"
        if mode != "Select":
            return None
        element = self.model.element_at(*start, self._click_tolerance())
        if element is None:
            return None
        self._set_element(element)
        return "move"

    def _pitch_steps(self, start: tuple[float, float],
                     end: tuple[float, float]) -> tuple[int, int]:
        """The drag's offset in dbu, rounded to whole track pitches of the picked layer."""
        pitch = self._pitch(self.element[1][0])
        scale = self.model.design.dbu_per_micron
        return tuple(int(round((b - a) * scale / pitch)) * pitch
                     for a, b in zip(start, end, strict=True))

    def _on_tracks(self, layer: str, point: tuple[float, float]) -> tuple[int, int]:
        """A point (µm) in dbu on the nearest routing track of ``layer`` in x and in y: the
        DEF's TRACKS for the layer, else multiples of its pitch."""
        scale = self.model.design.dbu_per_micron
        pitch = self._pitch(layer)
        snapped = []
        for axis, value in zip("XY", point, strict=True):
            start, step = 0, pitch
            for track_axis, first, _count, track_step, layers in self.model.design.tracks:
                if track_axis == axis and layer in layers and track_step > 0:
                    start, step = first, track_step
                    break
            snapped.append(int(start + round((value * scale - start) / step) * step))
        return snapped[0], snapped[1]

    def _end_drag(self) -> None:
        self.dragging = None
        self.canvas.draw_preview(None)

    @command("Cannot pick")
    def click(self, x: float, y: float, tolerance_um: float = 0.2) -> None:
        """What a left click at (x, y) µm does in the current mode."""
        mode = self.mode_box.currentText()
        if mode == "Measure":
            self._measure_click(x, y)
            return
        if mode != "Select" and self.model.selected is None:
            self.status.setText("Select a net first: edits change the selected net.")
            return
        point = (self.model.snap(x), self.model.snap(y))
        if mode == "Add wire":
            if self.pending_start is None:
                self.pending_start = point
                self.status.setText("Click the wire's other end.")
                return
            start, self.pending_start = self.pending_start, None
            self.add_segment(self.layer_box.currentText(), start, point)
            return
        if mode == "Add via":
            self.add_via(self.via_box.currentText(), point)
            return
        element = self.model.element_at(x, y, tolerance_um)
        if element is not None:
            self._set_element(element)
            return
        visible = {self.model.design.layer_names.index(s.name) for s in self.model.styles
                   if s.kind == "routing" and s.visible and s.name in
                   self.model.design.layer_names}
        index = self.model.net_at(x, y, tolerance_um, visible)
        if index is not None:
            self.select_net(self.model.design.nets[index].name, focus=False)

    def _mode_changed(self, _mode: str) -> None:
        self.pending_start, self.ruler_start = None, None

    def _measure_click(self, x: float, y: float) -> None:
        """Measure mode: the first click starts a ruler, the second ends it
        (``routing.measure``, its ends on the wire layer's tracks)."""
        if self.ruler_start is None:
            self.ruler_start = (x, y)
            self.canvas.draw_ruler(None)
            self.status.setText("Click the ruler's other end (its ends snap to the tracks of "
                                f"{self.layer_box.currentText() or 'no layer'}).")
            return
        start, self.ruler_start = self.ruler_start, None
        self._run("routing.measure", from_um=list(start), to_um=[x, y],
                  snap_layer=self.layer_box.currentText())

    def _on_canvas_right_click(self, x: float, y: float, screen_pos) -> None:
        """The inspector: what is under the pointer (``routing.inspect``) in a menu at the
        pointer, with the canvas's Export… below it."""
        if self.model.design is None:
            return
        said = self.commands.trigger("routing.inspect", at_um=[round(x, 4), round(y, 4)],
                                     tolerance_um=round(max(self._click_tolerance(), 1e-3), 4))
        if not isinstance(said, str):
            return
        self.inspected = said
        lines = said.splitlines()
        self.status.setText(f"Inspected {lines[0][3:]}: {lines[1]}"
                            + (f" (+{len(lines) - 2} more in the menu)" if len(lines) > 2
                               else ""))
        menu = QMenu()  # no parent: it lives while shown (a child would count as a control)
        for line in said.splitlines():
            menu.addAction(line).setEnabled(False)
        menu.addSeparator()
        for action in self.canvas.scene().contextMenu:
            if action.text().startswith("Export"):
                menu.addAction(action)
        self._inspector_menu = menu
        menu.popup(screen_pos.toPoint() if hasattr(screen_pos, "toPoint") else screen_pos)

    # -- edits -----------------------------------------------------------------------------

    def _picked(self) -> tuple[str, list] | None:
        """The pick a command may act on: None (said in the status line) when there is none
        or its element is no longer in the design (the pick is then cleared)."""
        if self.element is None or self.model.design is None:
            self.status.setText(PICK_FIRST)
            return None
        if not self.model.has_element(*self.element):
            gone = self.describe_element(*self.element)
            self._set_element(None)
            self.status.setText(f"The picked {gone} is no longer there (undone or changed "
                                "since): nothing was changed; pick it again.")
            return None
        return self.element

    def _set_element(self, element: tuple[str, list] | None) -> None:
        """Pick (or, with None, unpick) a wire or via: the highlight and the "Picked" text."""
        self.element = element
        self.canvas.draw_element(element)
        if self.model.last_check is not None:
            self._show_checks(self.model.last_check)

    def _pick_args(self, verb: str, dx: int = 0, dy: int = 0) -> tuple[str, dict] | None:
        """The command on the picked wire or via (``routing.<verb>_wire|via``) and the
        arguments naming it; a move by (dx, dy) dbu."""
        picked = self._picked()
        if picked is None:
            return None
        kind, row = picked
        net = self.model.design.nets[self.model.selected].name
        if kind == "segment":
            command_id, args = f"routing.{verb}_wire", wire_args(self.state, net, row)
        else:
            command_id, args = f"routing.{verb}_via", via_args(self.state, net, row)
        if verb == "move":
            scale = self.model.design.dbu_per_micron
            args.update({k: v for k, v in (("dx_um", dx / scale), ("dy_um", dy / scale)) if v})
        return command_id, args

    def _move_by_boxes_args(self) -> tuple[str, dict] | None:
        """"Move picked": by the dx and dy boxes, on the manufacturing grid."""
        if self.model.design is None:
            self.status.setText(PICK_FIRST)
            return None
        if self._picked() is None:
            return None
        dx, dy = self.model.snap(self.dx_box.value()), self.model.snap(self.dy_box.value())
        if dx == 0 and dy == 0:
            self.status.setText("Set dx or dy (µm) first: the move is zero.")
            return None
        return self._pick_args("move", dx, dy)

    def _delete_args(self) -> tuple[str, dict] | None:
        return self._pick_args("delete")

    def _run_pick(self, found: tuple[str, dict] | None) -> bool:
        return found is not None and self._run(found[0], **found[1])

    def move_by_boxes(self) -> bool:
        return self._run_pick(self._move_by_boxes_args())

    def move_element(self, dx: int, dy: int) -> bool:
        """Move the picked segment or via by (dx, dy) dbu; the pick moves with it."""
        if dx == 0 and dy == 0:
            return False
        return self._run_pick(self._pick_args("move", dx, dy))

    def delete_element(self) -> bool:
        return self._run_pick(self._delete_args())

    def _can_add(self) -> bool:
        if self.model.design is None or self.model.selected is None:
            self.status.setText("Select a net first: edits change the selected net.")
            return False
        return True

    def add_segment(self, layer: str, start: tuple[int, int], end: tuple[int, int]) -> bool:
        """A wire of the selected net between two points in dbu (``routing.add_wire``)."""
        if start == end or not self._can_add():
            return False
        scale = self.model.design.dbu_per_micron
        return self._run("routing.add_wire", net=self.model.design.nets[self.model.selected].name,
                         layer=layer, from_um=[v / scale for v in start],
                         to_um=[v / scale for v in end])

    def add_via(self, via: str, at: tuple[int, int]) -> bool:
        if not via or not self._can_add():
            return False
        scale = self.model.design.dbu_per_micron
        return self._run("routing.add_via", net=self.model.design.nets[self.model.selected].name,
                         via=via, at_um=[v / scale for v in at])

    def _on_wiring(self, net: int, moved: list) -> None:
        """Every change of wiring, the panel's own edits and the history's undo and redo
        alike: redraw, and keep the pick on its element (moved with it) or drop it."""
        if self.layer_tree.topLevelItemCount() != len(self.model.styles):
            self._fill_layers()  # the edit brought a new cut layer
        self.canvas.draw_wiring()
        if self.model.selected == net:
            self.element = self.model.live_element(self.element, moved)
        self.canvas.draw_element(self.element)
        if self.stack_view is not None:
            self.stack_view.set_model(self.model)
        stats = self.model.edit_check
        if stats is not None:
            self.all_stats[stats.name] = stats
            self._update_stats_row(stats)
        if self.model.selected == net:
            self._show_net_info()
        elif stats is not None:
            self.status.setText(f"{stats.name}: {stats.connectivity.describe()}, "
                                f"{stats.shorts} short(s)")
        self._start_checks()

    # -- statistics ------------------------------------------------------------------------

    def _fill_stats_table(self) -> None:
        self.all_stats = {s.name: s for s in self.model.stats()}
        self.nets_table.setSortingEnabled(False)
        self.nets_table.setRowCount(len(self.all_stats))
        for row, stats in enumerate(self.all_stats.values()):
            self._set_row(row, stats)
        self.nets_table.setSortingEnabled(True)

    def _set_row(self, row: int, stats: NetStats) -> None:
        values = [stats.name, stats.segments, stats.vias, round(stats.wirelength_um, 3),
                  stats.pins, _connectivity_text(stats),
                  "…" if stats.shorts is None else stats.shorts,
                  "" if stats.leaf_iou is None else round(stats.leaf_iou, 3)]
        for column, value in enumerate(values):
            item = NetNameItem() if column == 0 else QTableWidgetItem()
            item.setData(Qt.ItemDataRole.DisplayRole, value)
            self.nets_table.setItem(row, column, item)

    def _update_stats_row(self, stats: NetStats) -> None:
        for row in range(self.nets_table.rowCount()):
            item = self.nets_table.item(row, 0)
            if item is not None and item.text() == stats.name:
                sorting = self.nets_table.isSortingEnabled()
                self.nets_table.setSortingEnabled(False)
                self._set_row(row, stats)
                self.nets_table.setSortingEnabled(sorting)
                return

    def start_checks(self) -> None:
        """Rerun the design-wide checks and markers (``routing.check_markers``)."""
        self._start_checks()

    def _start_checks(self) -> None:
        """Every net's connectivity, shorts and (with a prediction) leaf IoU, off-thread."""
        model, generation = self.model, self._generation
        design = copy.copy(model.design)  # shares the arrays: edits replace, never mutate
        lef, stats = model.lef, [copy.copy(s) for s in model.stats()]
        differing = set(model.differing_nets())

        def check_all() -> tuple[int, list[NetStats], list[Marker]]:
            checker = Checker(design, lef)
            shorted = checker.all_shorts()
            rows = {net.name: i for i, net in enumerate(design.nets)}
            for entry in stats:
                if self.worker.stopped():  # the panel is closing
                    return generation, [], []
                index = rows[entry.name]
                entry.connectivity = checker.connectivity(index)
                entry.shorts = shorted.get(index, 0)
                if entry.name in differing:
                    entry.leaf_iou = model.leaf_iou(entry.name)
            return generation, stats, design_markers(design, lef, checker,
                                                     self.worker.stopped)

        self.worker.submit(check_all)

    def _on_checks(self, result, error) -> None:
        if error is not None:
            self.status.setText(f"Checks failed: {error}")
            return
        generation, stats, markers = result
        if generation != self._generation:
            return
        self.state.checked = markers
        self.markers_changed()
        self._apply_pending_markers()
        self.all_stats = {s.name: s for s in stats}
        self.nets_table.setSortingEnabled(False)
        for row in range(self.nets_table.rowCount()):
            name = self.nets_table.item(row, 0).text()
            if name in self.all_stats:
                self._set_row(row, self.all_stats[name])
        self.nets_table.setSortingEnabled(True)
        broken = [s.name for s in stats if s.segments and not s.connectivity.connected]
        shorted = [s.name for s in stats if s.shorts]
        unrouted, one_pin = unrouted_multi_pin(self.model.design)
        self.check_summary = (f"checks: {len(broken)} routed net(s) not connected, "
                              f"{len(shorted)} net(s) with shorts"
                              + (f", {len(unrouted)} unrouted multi-pin net(s)" if unrouted
                                 else "")
                              + (f", {len(one_pin)} one-pin net(s) (nothing to route)"
                                 if one_pin else ""))
        self.status.setText(self.status.text().split(" | checks:")[0] + " | "
                            + self.check_summary)

    # -- markers ---------------------------------------------------------------------------

    def markers_changed(self) -> None:
        """The list, its counts and the canvas's marker boxes from the state (after checks,
        an import, a waive, a category chosen)."""
        self.markers_tab.refresh()
        self._draw_markers()

    def _draw_markers(self) -> None:
        """Every marker listed, not waived and placeable, as a box; the current one ringed."""
        if self.model.design is None:
            return
        waived = self.model.waived
        shown = [m.box for m in self.state.shown() if not m.problem and m.name not in waived]
        self.canvas.draw_markers(shown)
        current = next((m for m in self.state.markers() if m.name == self.state.current), None)
        self.canvas.draw_current_marker(current.box if current and not current.problem
                                        else None)

    def show_marker(self, marker: Marker) -> None:
        """Zoom to a marker, ring it and select its row (the other boxes stay drawn)."""
        self.canvas.zoom_to(marker.box)
        self.markers_tab.select(marker.name)
        self.canvas.draw_current_marker(None if marker.problem else marker.box)

    def centre_on(self, point: tuple[float, float], size_um: float = 0.0) -> None:
        """Centre the view on ``point`` µm, keeping the zoom (or ``size_um`` wide)."""
        (x0, x1), (y0, y1) = self.canvas.box.viewRange()
        width = size_um or (x1 - x0)
        height = size_um or (y1 - y0)
        self.canvas.box.setRange(QRectF(point[0] - width / 2, point[1] - height / 2,
                                        width, height), padding=0)

    def choose_marker_report(self) -> None:
        self._ask("Import a marker report", "Marker reports (*.lyrdb *.rpt *.drc *.xml)",
                  lambda path: self._run("routing.import_markers", path=path))

    def choose_marker_export(self) -> None:
        self._ask("Export the markers", "KLayout report database or CSV (*.lyrdb *.csv)",
                  lambda path: self._run("routing.export_markers", path=path), save=True,
                  suffix="lyrdb")

    # -- predicted vs reference -------------------------------------------------------------

    def _on_prediction(self) -> None:
        self.canvas.draw_prediction()
        if self.model.selected is not None:
            self._show_net_info()
        differing = self.model.differing_nets()
        if self.model.prediction is not None:
            self.route_status.setText(
                f"Comparing with {Path(self.model.prediction.path).name}: {len(differing)} "
                f"net(s) routed differently ({', '.join(differing[:8])}"
                f"{'…' if len(differing) > 8 else ''}). Orange dashed: predicted wires; red: "
                "GCell edges only the prediction uses; blue: only the reference.")
        self._start_checks()

    def _on_guides(self) -> None:
        guides = self.model.guides
        self.canvas.draw_guides()
        if guides is not None:
            known = {net.name for net in self.model.design.nets}
            missing = [name for name in guides.nets if name not in known]
            self.status.setText(
                f"Route guides {Path(guides.path).name}: {len(guides.nets)} nets, "
                f"{len(guides.rects)} rectangles on {len(guides.layer_names)} layers"
                + (f"; {len(missing)} net(s) not in this design" if missing else "")
                + ". Overlay 'guides' shows the selected net's; 'guides of all nets' every "
                  "net's.")

    def _route_args(self) -> dict:
        """The route form as ``routing.route``'s arguments (typed nets, else the selected)."""
        typed = [n.strip() for n in self.route_nets_edit.text().split(",") if n.strip()]
        return {"nets": typed, "router": self.router_box.currentText(),
                "checkpoint": self.checkpoint_edit.text().strip()}

    def route(self, router: str | None = None, nets: list[str] | None = None) -> bool:
        """Submit ``chipstar.route`` on the chosen nets (``routing.route``)."""
        args = self._route_args()
        if router is not None:
            args["router"] = router
        if nets is not None:
            args["nets"] = list(nets)
        return self._run("routing.route", **args)

    def _submit_route(self, method: str, params: dict, inputs: dict) -> None:
        self.route_status.setText(f"Submitting {ROUTE_METHOD} ({params['router']}) on "
                                  f"{len(params['nets'].split(','))} net(s)…")
        self.jobs.submit(method, params, inputs)

    def _on_result(self, job: str, method: str, outputs: dict) -> None:
        if outputs.get("def"):
            run_dir = Path(self.host.run_dir(job))
            if self.load_prediction(run_dir / outputs["def"]):
                self.state.prediction_run = run_dir

    # -- the 3-D stack and export ----------------------------------------------------------

    def set_3d(self, on: bool) -> bool:
        """The layer stack in 3-D in place of the canvas (``routing.view_3d``; False: no
        OpenGL here, said to the user)."""
        return self._run("routing.view_3d", on=on)

    def show_3d(self, on: bool) -> str:
        """Show the 3-D stack (or the canvas); the problem when there is no OpenGL, else ''."""
        if self.stack_box.isChecked() != bool(on):
            self.stack_box.blockSignals(True)
            self.stack_box.setChecked(bool(on))
            self.stack_box.blockSignals(False)
        if not on:
            self.views.setCurrentWidget(self.canvas)
            return ""
        if self.stack_view is None:
            try:
                from panels.routing.stack3d import LayerStackView
                from panels.widgets.gl import gl_problem

                problem = gl_problem()
                if problem:
                    raise RuntimeError(problem)
                self.stack_view = LayerStackView()
            except Exception as exc:  # no OpenGL here: the 2-D canvas remains
                self.stack_box.blockSignals(True)
                self.stack_box.setChecked(False)
                self.stack_box.blockSignals(False)
                return f"{type(exc).__name__}: {exc}"
            self.views.addWidget(self.stack_view)
        if self.model.design is not None:
            self.stack_view.set_model(self.model)
        self.views.setCurrentWidget(self.stack_view)
        return ""

    def export_figure(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                      caption: bool = False) -> Path:
        """The route canvas drawn for the page (PNG, SVG or PDF by the suffix) at ``dpi``,
        with its µm rulers, a legend of the colours shown and, when asked, the selected net's
        line as a caption; its provenance inside (``figure_provenance``). Raises with the
        file's name when there is nothing to draw or it cannot be written (Ctrl+E says so)."""
        if self.model.design is None:
            raise ValueError(f"{path}: open a DEF first: there is no layout to draw")
        self.show_3d(False)  # the figure is the 2-D canvas
        with self.canvas.legend_shown() as legend:
            record = self.figure_provenance(legend)
            # its holder is drawn: pyqtgraph's view replaces QWidget.render with the scene's
            return export_widget(self.views, ExportChoice(Path(path), dpi, caption), record,
                                 self.info_line())

    def figure_provenance(self, legend: list[tuple[str, str]] | None = None) -> dict:
        """What made the picture: the DEF, LEF, compared DEF and guides (path and hash), the
        selected net, the visible layers and overlays, the zoom window in µm, the run that
        wrote the compared routes."""
        model, canvas = self.model, self.canvas
        net = model.design.nets[model.selected].name if model.selected is not None else None
        view = {"panel": "routing", "design": model.design.name, "def": model.design.path,
                "lef": model.lef_path, "net": net, "window_um": canvas.window_um(),
                "layers": [s.name for s in model.styles if s.visible],
                "hidden_layers": [s.name for s in model.styles if not s.visible],
                "overlays": [name for name, on in canvas.overlay_on.items() if on],
                "edited": model.edited,
                "legend": [name for name, _colour in legend or canvas.legend_entries()],
                "scale_bar_um": canvas.scale_bar_um if legend is not None else None,
                "markers": {"listed": len(self.state.markers()),
                            "waived": len(self.model.waived),
                            "reports": [r.path for r in self.state.reports]}}
        run = self.state.prediction_run
        runs = [provenance.run_entry(run)] if run else []
        return provenance.record(self.state.sources(), view, runs)

    def info_line(self) -> str:
        """The information line under a figure: the design, the net and its statistics."""
        design, stats = self.model.design, self.model.last_check
        window = self.canvas.window_um()
        line = (f"{design.name} ({Path(design.path).name}); view x {window['x'][0]:.2f}–"
                f"{window['x'][1]:.2f} µm, y {window['y'][0]:.2f}–{window['y'][1]:.2f} µm")
        if stats is not None:
            line += (f"; net {stats.name}: {stats.segments} segments, {stats.vias} vias, "
                     f"{stats.wirelength_um:.2f} µm of wire, {stats.pins} pins")
        return line

    # -- dialogs ---------------------------------------------------------------------------

    def _ask(self, title: str, name_filter: str, then, save: bool = False,
             suffix: str = "") -> None:
        dialog = QFileDialog(self, title)
        dialog.setNameFilters([name_filter, "All files (*)"])
        if save:
            dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
            dialog.setDefaultSuffix(suffix)
        dialog.fileSelected.connect(then)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def _choose_def(self) -> None:
        self._ask("Open a DEF", "DEF designs (*.def)", self.open_file)

    def _choose_lef(self) -> None:
        self._ask("Open a LEF", "LEF libraries (*.lef *.tlef)", self.open_file)

    def _choose_prediction(self) -> None:
        self._ask("Compare with a DEF", "DEF designs (*.def)", self.load_prediction)

    def _choose_save(self) -> None:
        self._ask("Save the DEF", "DEF designs (*.def)", self.save_def, save=True,
                  suffix="def")

    def _choose_guides(self) -> None:
        self._ask("Open route guides", "Route guides (*.guide)", self.load_guides)

    def _choose_save_guides(self) -> None:
        self._ask("Save route guides", "Route guides (*.guide)", self.save_guides, save=True,
                  suffix="guide")

    def _choose_export(self) -> None:
        if self.model.design is None:
            self.status.setText("Open a DEF first: there is no layout to export.")
            return
        name = f"{self.model.design.name or 'design'}-routes.png"
        choice = ask_export(self, "Export the route canvas", name, self.info_line())
        if choice is not None:
            self._run("routing.export_figure", path=str(choice.path), dpi=choice.dpi,
                      caption=choice.caption)

    def _choose_checkpoint(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Route transformer checkpoint")
        if folder:
            self.checkpoint_edit.setText(folder)

    # -- sessions (issue 39): what is open and how it is shown -----------------------------

    def view_state(self) -> dict:
        """The view as JSON: files by path, the selected net, zoom window, layers' styles,
        overlays, the tab, click mode and form fields (``restore_view_state`` reads it)."""
        model = self.model
        state: dict = {"tab": self.tabs.tabText(self.tabs.currentIndex()),
                       "mode": self.mode_box.currentText(),
                       "search": self.search_edit.text(),
                       "overlays": [name for name, on in self.canvas.overlay_on.items() if on],
                       "view_3d": self.views.currentWidget() is not self.canvas,
                       "route": self._route_args()}
        if model.design is None:
            return state
        state.update({
            "def": model.design.path, "lef": model.lef_path,
            "compare": model.prediction.path if model.prediction is not None else None,
            "guides": model.guides.path if model.guides is not None else None,
            "net": model.design.nets[model.selected].name if model.selected is not None
            else None,
            "window_um": self.canvas.window_um(),
            "layers": {s.name: {"visible": s.visible, "colour": s.colour}
                       for s in model.styles},
            "wire_layer": self.layer_box.currentText(), "via": self.via_box.currentText(),
            "markers": {"reports": [r.path for r in self.state.reports],
                        "category": self.state.category, "current": self.state.current,
                        "waived": sorted(model.waived)}})
        return state

    def restore_view_state(self, state: dict) -> list[str]:
        """Open what ``view_state`` named and show it the same way; a sentence for each part
        that could not be restored (a file gone, a net or layer this design lacks)."""
        problems: list[str] = []

        def run(command_id: str, **args) -> bool:
            return self.commands.run_restoring(problems, command_id, **args)

        if state.get("def"):
            run("routing.open_design", def_path=str(state["def"]),
                lef_path=str(state["lef"]) if state.get("lef") else None)
        opened = self.model.design is not None and state.get("def")
        if opened:
            for key, command_id in (("compare", "routing.compare"),
                                    ("guides", "routing.open_guides")):
                if state.get(key):
                    run(command_id, path=str(state[key]))
            for layer, style in dict(state.get("layers") or {}).items():
                if run("routing.show_layer", layer=layer, visible=bool(style.get("visible"))):
                    run("routing.colour_layer", layer=layer, colour=str(style.get("colour")))
            if state.get("net"):
                run("routing.select_net", net=str(state["net"]), focus=False)
        for name in self.overlay_boxes:
            wanted = name in (state.get("overlays") or [])
            if wanted != self.canvas.overlay_on[name]:
                run("routing.overlay", name=name, on=wanted)
        unknown = set(state.get("overlays") or []) - set(self.overlay_boxes)
        problems += [f"routing: no overlay {name!r}" for name in sorted(unknown)]
        if opened:
            self._restore_markers(dict(state.get("markers") or {}), run)
        self._restore_widgets(state, problems)
        window = state.get("window_um")
        if opened and isinstance(window, dict):
            try:
                (x0, x1), (y0, y1) = window["x"], window["y"]
                self.canvas.box.setRange(QRectF(x0, y0, x1 - x0, y1 - y0), padding=0)
            except (KeyError, TypeError, ValueError):
                problems.append(f"routing: the zoom window {window!r} is not x/y ranges")
        if state.get("view_3d"):
            run("routing.view_3d", on=True)
        return problems

    def _restore_markers(self, markers: dict, run) -> None:
        """The imported reports now; the category listed, waivers the history did not bring
        back and the marker stepped to once the checks (on the worker) have listed ours."""
        for path in markers.get("reports") or []:
            run("routing.import_markers", path=str(path))
        self._pending_markers = markers

    def _apply_pending_markers(self) -> None:
        """The rest of a restored markers state; what no longer fits said in the status."""
        markers, self._pending_markers = self._pending_markers, None
        if not markers:
            return
        problems: list[str] = []

        def run(command_id: str, **args) -> bool:
            return self.commands.run_restoring(problems, command_id, **args)

        if markers.get("category"):
            run("routing.marker_category", category=str(markers["category"]))
        for name in markers.get("waived") or []:
            if name not in self.model.waived:
                run("routing.waive_marker", marker=str(name), waived=True)
        current = markers.get("current")
        if current and current in {m.name for m in self.state.markers()}:
            self.state.current = str(current)
            self.markers_changed()
        elif current:
            problems.append(f"routing: no marker {current!r} now")
        if problems:
            self.status.setText("Markers not restored: " + "; ".join(problems))

    def _restore_widgets(self, state: dict, problems: list[str]) -> None:
        """The tab, click mode, search text, route form and the edit boxes' choices."""
        for key, box in (("mode", self.mode_box), ("wire_layer", self.layer_box),
                         ("via", self.via_box), ("router", self.router_box)):
            value = state.get(key) if key != "router" else (state.get("route") or {}).get(key)
            if not value:
                continue
            if box.findText(str(value)) < 0:
                problems.append(f"routing: no {key.replace('_', ' ')} {value!r} to choose")
            else:
                box.setCurrentText(str(value))
        tabs = [self.tabs.tabText(i) for i in range(self.tabs.count())]
        if state.get("tab") in tabs:
            self.tabs.setCurrentIndex(tabs.index(state["tab"]))
        self.search_edit.setText(str(state.get("search") or ""))
        route = state.get("route") or {}
        self.route_nets_edit.setText(", ".join(route.get("nets") or []))
        self.checkpoint_edit.setText(str(route.get("checkpoint") or ""))

    # -- drag and drop, lifetime -----------------------------------------------------------

    def keyPressEvent(self, event) -> None:
        """Delete removes the picked wire or via; the arrows move it by one track pitch."""
        if not self._edit_key(event.key()):
            super().keyPressEvent(event)

    def _edit_key(self, key: int) -> bool:
        """Whether the key was an edit of the pick (done or refused)."""
        if self.element is None:
            return False
        if key in (Qt.Key.Key_Delete, Qt.Key.Key_Backspace):
            self.delete_element()
            return True
        steps = {Qt.Key.Key_Left: (-1, 0), Qt.Key.Key_Right: (1, 0), Qt.Key.Key_Up: (0, 1),
                 Qt.Key.Key_Down: (0, -1)}
        if key in steps:
            pitch = self._pitch(self.element[1][0])
            self.move_element(steps[key][0] * pitch, steps[key][1] * pitch)
            return True
        return False

    def _pitch(self, layer: str) -> int:
        """A layer's track pitch in dbu (the LEF's), else 0.1 µm."""
        lef, scale = self.model.lef, self.model.design.dbu_per_micron
        found = lef.layers.get(layer) if lef is not None else None
        return self.model.snap(found.pitch) if found is not None and found.pitch > 0 else \
            self.model.snap(0.1) or max(scale // 10, 1)

    def open_dropped(self, paths: list[str]) -> None:
        def order(path: str) -> int:  # the LEF, then the DEF read against it, then guides
            name = path.lower()
            return 0 if name.endswith((".lef", ".tlef")) else 2 if name.endswith(".guide") else 1

        for path in sorted(paths, key=order):
            self.open_file(path)

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        self.worker.stop()
        self.jobs.close()
        self.state.leave_document()  # an undo after closing must not rewrite a hidden design
        self.commands.unbind(SCOPE, self.state)
        self._stop_listening()


def _connectivity_text(stats: NetStats) -> str:
    """An unrouted net with pins to join says so; a one-pin net needs no wiring."""
    if not stats.segments and not stats.vias:
        return f"unrouted ({stats.pins} pins)" if stats.pins >= 2 else \
            "one pin: nothing to route"
    return "…" if stats.connectivity is None else stats.connectivity.describe()
