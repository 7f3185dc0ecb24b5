"""The 3-D layer stack: every metal layer's wires at its own height, vias as vertical lines
between the layers they join, the selected net in white (pyqtgraph.opengl, one
``GLLinePlotItem`` per layer).

Imported only when the user asks for it, so OpenGL stays out of start-up and a machine without
it still gets the 2-D canvas. Heights are exaggerated (``LAYER_GAP`` of the die's size per
layer) so the stack reads at a glance.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph.opengl as gl
from PySide6.QtGui import QColor, QVector3D
from PySide6.QtWidgets import QVBoxLayout, QWidget

from engine.vlsi.def_ import SEG, VIA
from panels.routing.geometry import via_layers
from panels.routing.model import RouteModel

LAYER_GAP = 0.03


def rgba(colour: str, alpha: float = 1.0) -> tuple[float, float, float, float]:
    c = QColor(colour)
    return (c.redF(), c.greenF(), c.blueF(), alpha)


class LayerStackView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = gl.GLViewWidget()
        self.view.setBackgroundColor("k")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        self.model: RouteModel | None = None
        self.items: dict[str, gl.GLLinePlotItem] = {}
        self.selection = gl.GLLinePlotItem(pos=np.zeros((0, 3)), mode="lines",
                                           color=(1, 1, 1, 1), width=3, antialias=False)
        self.view.addItem(self.selection)
        self.gap = 1.0

    def height_of(self, level: int) -> float:
        return level * self.gap

    def set_model(self, model: RouteModel) -> None:
        """(Re)build the stack from the model's design and styles."""
        self.model = model
        design = model.design
        scale = design.dbu_per_micron
        for item in self.items.values():
            self.view.removeItem(item)
        self.items = {}
        die = np.asarray(design.die_area[:4], dtype=float) / scale if design.die_area else \
            np.r_[design.segments[:, 2:4].min(0), design.segments[:, 2:4].max(0)] / scale
        size = max(die[2] - die[0], die[3] - die[1], 1e-6)
        self.gap = LAYER_GAP * size
        special = model.special
        rows = design.segments[~special[design.segments[:, SEG["net"]]]]
        level = {s.name: s.level for s in model.styles}
        for style in model.styles:
            if style.kind != "routing" or style.name not in design.layer_names:
                continue
            chosen = rows[rows[:, SEG["layer"]] == design.layer_names.index(style.name)]
            self._add_layer(style.name, self._wires(chosen, level[style.name], scale))
        for name, points in self._vias(level, scale).items():
            self._add_layer(name, points)
        self.apply_styles()
        self.draw_selection()
        centre = QVector3D(float((die[0] + die[2]) / 2), float((die[1] + die[3]) / 2),
                           float(self.gap * max(level.values(), default=0) / 2))
        self.view.setCameraPosition(pos=centre, distance=1.6 * size, elevation=35, azimuth=-60)

    def _add_layer(self, name: str, points: np.ndarray) -> None:
        item = gl.GLLinePlotItem(pos=points, mode="lines", width=1, antialias=False)
        self.items[name] = item
        self.view.addItem(item)

    def _wires(self, rows: np.ndarray, level: int, scale: float) -> np.ndarray:
        xy = rows[:, [SEG["x1"], SEG["y1"], SEG["x2"], SEG["y2"]]].reshape(-1, 2) / scale
        return np.c_[xy, np.full(len(xy), self.height_of(level))].astype(np.float32)

    def _vias(self, level: dict[str, int], scale: float) -> dict[str, np.ndarray]:
        """Per cut layer: a vertical line per via from its lowest to its highest metal."""
        design, model = self.model.design, self.model
        out: dict[str, list[np.ndarray]] = {}
        vias = design.vias_placed
        for via_id in np.unique(vias[:, VIA["via"]]) if len(vias) else []:
            metals, cut = via_layers(design, model.lef, design.via_names[via_id])
            heights = [level[m] for m in metals if m in level] or [level.get(cut, 0)]
            chosen = vias[vias[:, VIA["via"]] == via_id]
            xy = np.repeat(chosen[:, [VIA["x"], VIA["y"]]] / scale, 2, axis=0)
            z = np.tile([self.height_of(min(heights)), self.height_of(max(heights))],
                        len(chosen))
            out.setdefault(cut, []).append(np.c_[xy, z])
        return {k: np.concatenate(v).astype(np.float32) for k, v in out.items()}

    def apply_styles(self) -> None:
        for style in self.model.styles:
            item = self.items.get(style.name)
            if item is not None:
                item.setData(color=rgba(style.colour))
                item.setVisible(style.visible)

    def draw_selection(self) -> None:
        model = self.model
        if model is None or model.selected is None:
            self.selection.setData(pos=np.zeros((0, 3), dtype=np.float32))
            return
        scale = model.design.dbu_per_micron
        segments, _ = model.design.net_wiring(model.selected)
        level = {s.name: s.level for s in model.styles}
        parts = [self._wires(segments[segments[:, SEG["layer"]] == i], level[name], scale)
                 for i, name in enumerate(model.design.layer_names) if name in level]
        points = np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.float32)
        self.selection.setData(pos=points)

    def snapshot(self, size: tuple[int, int] = (400, 300)) -> np.ndarray:
        """The view rendered offscreen as an RGBA array (tests, export)."""
        return self.view.renderToArray(size)
