"""The 2D layout: a pyqtgraph plot in microns (its axes are the ruler) whose items are batches,
so panning and zooming redraw a handful of items, not 100k.

Every layer's signal wires (centre lines) and vias (cut rectangles) go into one
``LayerRaster``: each frame it turns the visible wires into pixel runs with numpy and draws one
image in the layer colours (a QPainter call per wire would cap 100k wires near 10 frames/s); a
pan shifts and a zoom scales a kept image (drawn beyond the view) until the view rests, and
the ruler (``RulerAxis``) lays its ticks out at most ten times a second while the view moves.
Pins, components, obstructions and special wires are rectangle outlines in one ``RectsItem``
each; the overlays (GCell grid, congestion heat map, the selected net's tree and vias, its GCell
snapping, the predicted routes and the GCell edges where prediction and reference differ) are
``PairsItem``s of axis-parallel segments. Route guides (of the selected net, or of every net)
are translucent rectangles in their layer's colour, one ``pg.BarGraphItem``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import internals
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QTransform

from engine.vlsi.def_ import SEG, VIA
from panels.routing.geometry import (
    CellGeometry,
    cell_geometry,
    congestion,
    gcell_lines,
    io_pin_rects,
    outline_pairs,
    segment_pairs,
    special_rects,
    via_rects,
)
from panels.routing.model import SPECIAL_COLOUR, RouteModel

OVERLAYS = ("components", "pins", "special nets", "obstructions", "GCell grid", "congestion",
            "snapping", "prediction", "guides", "guides of all nets")
DEFAULT_OFF = {"GCell grid", "congestion", "obstructions", "guides of all nets"}
GUIDE_ALPHA = 70  # of 255: the wires under a guide stay readable
HIGHLIGHT = "#ffffff"
PREDICTED = "#ff9f1c"
ONLY_PREDICTED = "#ff3b3b"
ONLY_REFERENCE = "#2ec4ff"
SNAP = "#f2e94e"
MARKER = "#ff3b3b"
RULER = "#00e5ff"
MARKER_CURRENT = "#ffff00"
LEGEND_MARGIN = 8  # pixels between a figure's legend and the view's corner


class CanvasBox(pg.ViewBox):
    """Left click reports the point (selection, drawing); a left drag is offered to
    ``on_drag`` first (moving or drawing a wire) and pans when it declines; the wheel zooms."""

    def __init__(self, on_click, on_drag=None, on_right_click=None) -> None:
        super().__init__(lockAspect=True, enableMenu=False)
        self._on_click = on_click
        self._on_drag = on_drag
        self._on_right_click = on_right_click
        self._editing = False  # this drag belongs to on_drag

    def mouseClickEvent(self, ev) -> None:
        if ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            point = self.mapSceneToView(ev.scenePos())
            self._on_click(point.x(), point.y(), ev.modifiers())
        elif ev.button() == Qt.MouseButton.RightButton and self._on_right_click is not None:
            ev.accept()  # the inspector's menu holds the scene's Export… too
            point = self.mapSceneToView(ev.scenePos())
            self._on_right_click(point.x(), point.y(), ev.screenPos())
        else:
            super().mouseClickEvent(ev)

    def mouseDragEvent(self, ev, axis=None) -> None:
        """``on_drag(phase, start, end, modifiers)`` with phase "start", "move" or "finish"
        and points in microns; its answer at the start decides who owns the drag."""
        if ev.button() == Qt.MouseButton.LeftButton and axis is None and self._on_drag:
            start = self.mapSceneToView(ev.buttonDownScenePos())
            end = self.mapSceneToView(ev.scenePos())
            points = (start.x(), start.y()), (end.x(), end.y())
            if ev.isStart():
                self._editing = bool(self._on_drag("start", *points, ev.modifiers()))
            elif self._editing:
                self._on_drag("finish" if ev.isFinish() else "move", *points, ev.modifiers())
            if self._editing:
                ev.accept()
                self._editing = not ev.isFinish()
                return
        super().mouseDragEvent(ev, axis)


class RulerAxis(pg.AxisItem):
    """A micron ruler whose ticks are laid out at most every ``REFRESH_S`` while the view
    moves (laying out and lettering ~60 ticks costs a few ms a frame, as much as the wires);
    in between it repeats its last ticks, and a timer lays them out exactly once the view
    has been still for ``REFRESH_S``."""

    REFRESH_S = 0.1

    def __init__(self, orientation: str) -> None:
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)  # microns, never rescaled to mm or nm
        self._shown = None
        self._laid_out = 0.0
        self._refresh = QTimer(singleShot=True, interval=int(self.REFRESH_S * 1000))
        self._refresh.timeout.connect(self.update)

    def paint(self, p, opt, widget=None) -> None:
        now = time.perf_counter()
        if self.picture is None and self._shown is not None \
                and now - self._laid_out < self.REFRESH_S:
            self._shown.play(p)
            self._refresh.start()
            return
        super().paint(p, opt, widget)
        if self.picture is not None:
            self._shown, self._laid_out = self.picture, now


def bounds_of(points: np.ndarray) -> QRectF:
    """The rectangle around ``(n, 2)`` points (an empty one for none)."""
    if not len(points):
        return QRectF()
    lo, hi = points.min(axis=0), points.max(axis=0)
    return QRectF(lo[0], lo[1], max(hi[0] - lo[0], 1e-9), max(hi[1] - lo[1], 1e-9))


class PairsItem(pg.GraphicsObject):
    """Axis-parallel line segments (point pairs, microns) drawn in one ``drawLines`` call.

    Each paint drops the segments outside the viewport (numpy, in data coordinates), maps the
    rest to device pixels and draws them with the identity transform in one call, clamped to
    just beyond the viewport (exact for horizontal and vertical segments, the only kind a
    layout has), so zooming in draws only what is seen."""

    MARGIN = 16  # pixels drawn beyond the viewport (pen widths, clamped ends)

    def __init__(self, pen) -> None:
        super().__init__()
        self.opts = {"pen": pen}
        self._x = np.zeros((0, 2))
        self._y = np.zeros((0, 2))
        self._bounds = QRectF()
        self._lines = internals.PrimitiveArray(QLineF, 4)
        self._points = internals.PrimitiveArray(QPointF, 2)

    def setPen(self, pen) -> None:
        self.opts["pen"] = pg.mkPen(pen)
        self.update()

    def setData(self, points: np.ndarray) -> None:
        points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        self.prepareGeometryChange()
        pairs = points.reshape(-1, 4)
        self._x = np.ascontiguousarray(pairs[:, [0, 2]])
        self._y = np.ascontiguousarray(pairs[:, [1, 3]])
        self._lo = np.stack([self._x.min(axis=1), self._y.min(axis=1)]) if len(pairs) else None
        self._hi = np.stack([self._x.max(axis=1), self._y.max(axis=1)]) if len(pairs) else None
        self._bounds = bounds_of(points)
        self.informViewBoundsChanged()
        self.update()

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x.reshape(-1), self._y.reshape(-1)

    def boundingRect(self) -> QRectF:
        return QRectF(self._bounds)

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange=None):
        values = self._x if ax == 0 else self._y
        return (float(values.min()), float(values.max())) if len(values) else None

    def _visible(self, t, width: int, height: int) -> np.ndarray | None:
        """Mask of segments inside the viewport (None: all of them), in data coordinates."""
        inverse, _ = t.inverted()
        corner_a = inverse.map(QPointF(-self.MARGIN, -self.MARGIN))
        corner_b = inverse.map(QPointF(width + self.MARGIN, height + self.MARGIN))
        x0, x1 = sorted((corner_a.x(), corner_b.x()))
        y0, y1 = sorted((corner_a.y(), corner_b.y()))
        b = self._bounds
        if b.left() >= x0 and b.right() <= x1 and b.top() >= y0 and b.bottom() <= y1:
            return None
        return ((self._hi[0] >= x0) & (self._lo[0] <= x1) & (self._hi[1] >= y0)
                & (self._lo[1] <= y1))

    def paint(self, painter, option, widget=None) -> None:
        if not len(self._x):
            return
        t = painter.transform()
        device = painter.device()
        width, height = device.width(), device.height()
        mask = self._visible(t, width, height)
        x, y = (self._x, self._y) if mask is None else (self._x[mask], self._y[mask])
        if not len(x):
            return
        m = self.MARGIN
        px = np.clip(x * t.m11() + t.m31(), -m, width + m)
        py = np.clip(y * t.m22() + t.m32(), -m, height + m)
        painter.save()
        painter.resetTransform()
        painter.setRenderHint(painter.RenderHint.Antialiasing, False)
        painter.setPen(self.opts["pen"])
        self._draw(painter, px, py)
        painter.restore()

    def _draw(self, painter, px: np.ndarray, py: np.ndarray) -> None:
        self._lines.resize(len(px))
        out = self._lines.ndarray()
        out[:, 0], out[:, 2] = px[:, 0], px[:, 1]
        out[:, 1], out[:, 3] = py[:, 0], py[:, 1]
        painter.drawLines(*self._lines.drawargs())


class RectsItem(PairsItem):
    """Rectangle outlines; rectangles under ``DOT_PIXELS`` across are drawn as one point each
    (a via seen from afar), four times fewer primitives than their edges."""

    DOT_PIXELS = 3

    def set_rects(self, rects: np.ndarray) -> None:
        rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
        self.setData(rects[:, [0, 1, 2, 3]].reshape(-1, 2))  # one "pair" per rectangle

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        points = outline_pairs(np.c_[self._x[:, 0], self._y[:, 0], self._x[:, 1],
                                     self._y[:, 1]])
        return points[:, 0], points[:, 1]

    def _draw(self, painter, px: np.ndarray, py: np.ndarray) -> None:
        small = (np.abs(px[:, 1] - px[:, 0]) < self.DOT_PIXELS) & (
            np.abs(py[:, 1] - py[:, 0]) < self.DOT_PIXELS)
        if small.any():
            self._points.resize(int(small.sum()))
            out = self._points.ndarray()
            out[:, 0] = px[small].mean(axis=1)
            out[:, 1] = py[small].mean(axis=1)
            painter.drawPoints(*self._points.drawargs())
        big = ~small
        if big.any():
            x1, x2 = px[big, 0], px[big, 1]
            y1, y2 = py[big, 0], py[big, 1]
            edges_x = np.stack([x1, x2, x2, x2, x2, x1, x1, x1], axis=1).reshape(-1, 2)
            edges_y = np.stack([y1, y1, y1, y2, y2, y2, y2, y1], axis=1).reshape(-1, 2)
            super()._draw(painter, edges_x, edges_y)


@dataclass
class LayerBatch:
    """One layer's wires (segments ``(n, 4)``) or vias (rectangles ``(n, 4)``), microns."""

    shapes: np.ndarray
    rects: bool            # vias: rectangles, drawn as a pixel when under DOT_PIXELS
    colour: str
    visible: bool = True


@dataclass
class _Kind:
    """The visible layers' shapes of one kind, bottom layer first: horizontal wires
    (``a`` = y, ``b``..``c`` = x span), vertical wires (``a`` = x, ``b``..``c`` = y span) or vias
    (``a``, ``b`` = centre, ``c`` = half width, ``d`` = half height), in microns, as float64 and
    as float32 (four times faster to map, exact to a small fraction of a pixel while the
    design is under 2^20 pixels across)."""

    f64: np.ndarray        # (4, n)
    f32: np.ndarray        # (4, n)
    rank: np.ndarray       # (n,) the layer's place in the drawing order, non-decreasing

    @staticmethod
    def of(columns: list[np.ndarray], rank: np.ndarray) -> _Kind:
        f64 = np.ascontiguousarray(np.stack(columns)) if len(rank) else np.zeros((4, 0))
        return _Kind(f64, f64.astype(np.float32), rank)


class LayerRaster(pg.GraphicsObject):
    """Every layer's wires and vias drawn as one image per frame, KLayout-style.

    A QPainter line costs about a microsecond, so 100k of them cannot be drawn 30 times a
    second; instead each paint maps the visible shapes of all layers to pixel runs with numpy
    (a horizontal wire is a run along a row, a vertical one along a column, a wire under a
    pixel one pixel: the level of detail comes free), writes the layer colours straight into a
    reused 32-bit frame, bottom layer first so upper layers cover lower ones, and draws the
    frame once. Wires are split by direction and sorted by layer once per edit, so a frame is
    a few array passes plus the pixels the visible wires cover. The frame is kept while the
    view, the size and the layers stay as they are (a selection or overlay change repaints
    without rasterising). While the view pans or zooms, a frame is a kept image (the last
    exact one, or one rasterised ``PAN_MARGIN`` pixels beyond the view) shifted to the nearest
    pixel or scaled without smoothing, so only a view the kept images do not cover, or one
    they would show magnified or shrunk past ``ZOOM_LIMIT``, is rasterised; the exact frame
    follows ``SETTLE_MS`` after the view stops. Vias under ``DOT_PIXELS`` across are one
    pixel, larger ones their outlines."""

    DOT_PIXELS = 3
    MAX_PIXEL_WRITES = 30_000_000  # beyond it, the longest runs are drawn first
    PAN_MARGIN = 400  # pixels rasterised beyond each edge once a pan or zoom outgrows a frame
    ZOOM_LIMIT = 2.0  # a zoom redraws once a kept frame would be magnified (or shrunk) more
    SETTLE_MS = 150

    def __init__(self) -> None:
        super().__init__()
        self.layers: dict[str, LayerBatch] = {}
        self._bounds = QRectF()
        self._kinds: tuple[_Kind, _Kind, _Kind] | None = None
        self._colours = np.zeros(0, dtype=np.uint32)
        self._pixels = np.zeros((0, 0), dtype=np.uint32)  # reused: one allocation per size
        self._key: tuple | None = None  # (sx, sy, tx, ty, width, height) _pixels shows
        self._wide = np.zeros((0, 0), dtype=np.uint32)  # the pan frame, beyond the view
        self._wide_key: tuple | None = None
        self._last_key: tuple | None = None  # the last paint's view
        self._settle = QTimer(singleShot=True, interval=self.SETTLE_MS)
        self._settle.timeout.connect(self._settled)
        self.painted = 0  # frames drawn (the benchmark checks every frame was)
        self.rasterised = 0  # of which rasterised anew

    def set_layers(self, layers: dict[str, LayerBatch]) -> None:
        """Layers bottom-up (later ones are drawn over earlier ones)."""
        self.prepareGeometryChange()
        self.layers = layers
        shapes = [b.shapes.reshape(-1, 2) for b in layers.values() if len(b.shapes)]
        self._bounds = bounds_of(np.concatenate(shapes) if shapes else np.zeros((0, 2)))
        self._changed()
        self.informViewBoundsChanged()

    def set_style(self, name: str, visible: bool, colour: str) -> None:
        batch = self.layers.get(name)
        if batch is not None and (batch.visible, batch.colour) != (visible, colour):
            batch.visible, batch.colour = visible, colour
            self._changed()

    def _changed(self) -> None:
        self._kinds, self._key, self._wide_key = None, None, None
        self.update()

    def count(self, name: str) -> int:
        batch = self.layers.get(name)
        return 0 if batch is None else len(batch.shapes)

    def colour_of(self, name: str) -> int:
        """The 32-bit ARGB value a layer's pixels get in the frame."""
        return QColor(self.layers[name].colour).rgba()

    def boundingRect(self) -> QRectF:
        return QRectF(self._bounds)

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange=None):
        if self._bounds.isNull():
            return None
        if ax == 0:
            return self._bounds.left(), self._bounds.right()
        return self._bounds.top(), self._bounds.bottom()

    def _visible_kinds(self) -> tuple[_Kind, _Kind, _Kind]:
        """(horizontal wires, vertical wires, vias) of the visible layers, bottom-up."""
        if self._kinds is None:
            batches = [b for b in self.layers.values() if b.visible and len(b.shapes)]
            self._colours = np.array([QColor(b.colour).rgba() for b in batches],
                                     dtype=np.uint32)
            parts: list[list] = [[], [], []]
            for rank, batch in enumerate(batches):
                s = batch.shapes.reshape(-1, 4).astype(np.float64)
                x1, x2 = np.minimum(s[:, 0], s[:, 2]), np.maximum(s[:, 0], s[:, 2])
                y1, y2 = np.minimum(s[:, 1], s[:, 3]), np.maximum(s[:, 1], s[:, 3])
                if batch.rects:
                    parts[2].append((((x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2,
                                      (y2 - y1) / 2), rank))
                    continue
                flat = y1 == y2  # else vertical (a layout has no diagonal wires)
                parts[0].append(((y1[flat], x1[flat], x2[flat], y1[flat]), rank))
                parts[1].append(((x1[~flat], y1[~flat], y2[~flat], x1[~flat]), rank))
            kinds = []
            for part in parts:
                columns = [np.concatenate([c[i] for c, _ in part]) if part else np.zeros(0)
                           for i in range(4)]
                rank = np.concatenate([np.full(len(c[0]), r) for c, r in part]) if part \
                    else np.zeros(0, dtype=np.int64)
                kinds.append(_Kind.of(columns, rank))
            self._kinds = tuple(kinds)
        return self._kinds

    def render_frame(self, t, width: int, height: int) -> np.ndarray:
        """The ``(height, width)`` ARGB frame of the visible layers under the item-to-device
        transform ``t`` (scale and translation, as a ViewBox gives); 0 where nothing is."""
        key = (t.m11(), t.m22(), t.m31(), t.m32(), width, height)
        if key != self._key:
            self._pixels = self._rasterise(key, self._pixels)
            self._key = key
        return self._pixels

    def _rasterise(self, key: tuple, pixels: np.ndarray) -> np.ndarray:
        """Draw into ``pixels`` (reallocated when the size differs) for ``key``'s view."""
        sx, sy, tx, ty, width, height = key
        if pixels.shape != (height, width):
            pixels = np.zeros((height, width), dtype=np.uint32)
        frame = pixels.reshape(-1)
        frame.fill(0)
        kinds = self._visible_kinds()
        b = self._bounds
        extent = max(abs(b.left()), abs(b.right()), abs(b.top()), abs(b.bottom()))
        precise = extent * max(abs(sx), abs(sy)) > 2 ** 20
        for rank, index in _pixel_runs(kinds, len(self._colours), key, self.DOT_PIXELS,
                                       self.MAX_PIXEL_WRITES, precise):
            frame[index] = self._colours[rank]
        self.rasterised += 1
        return pixels

    def _moving(self, key: tuple) -> tuple[np.ndarray, tuple]:
        """A frame while the view pans or zooms: a kept image (the exact frame, or the one
        rasterised ``PAN_MARGIN`` pixels beyond the view) that covers the view and is
        magnified by under ``ZOOM_LIMIT`` either way, the least magnified; else one
        rasterised beyond the view now. Returns the image and its key (the view it shows);
        the exact frame follows ``SETTLE_MS`` after the view stops."""
        kept = [(abs(math.log(key[0] / source[0])), pixels, source)
                for pixels, source in ((self._pixels, self._key), (self._wide, self._wide_key))
                if source is not None and _covers(source, key, self.ZOOM_LIMIT)]
        if kept:
            _, pixels, source = min(kept, key=lambda k: k[0])
            return pixels, source
        sx, sy, tx, ty, width, height = key
        margin = self.PAN_MARGIN
        self._wide_key = (sx, sy, tx + margin, ty + margin, width + 2 * margin,
                          height + 2 * margin)
        self._wide = self._rasterise(self._wide_key, self._wide)
        return self._wide, self._wide_key

    def _settled(self) -> None:
        self._last_key = None
        self.update()

    def paint(self, painter, option, widget=None) -> None:
        device = painter.device()
        width, height = device.width(), device.height()
        self.painted += 1
        if not self.layers or width <= 0 or height <= 0:
            return
        t = painter.transform()
        key = (t.m11(), t.m22(), t.m31(), t.m32(), width, height)
        last, self._last_key = self._last_key, key
        moved = last is not None and last != key
        if key != self._key and last is not None and last[4:] == key[4:] \
                and (moved or self._settle.isActive()):  # moving, or repainted while moving
            pixels, source = self._moving(key)
            if moved:
                self._settle.start()
        else:
            pixels, source = self.render_frame(t, width, height), key
        image = QImage(pixels.data, pixels.shape[1], pixels.shape[0], 4 * pixels.shape[1],
                       QImage.Format.Format_ARGB32_Premultiplied)  # opaque colours, 0 clear
        kx, ky = key[0] / source[0], key[1] / source[1]
        dx, dy = key[2] - source[2] * kx, key[3] - source[3] * ky  # the image's corner
        painter.save()
        painter.resetTransform()
        if _same_scale(source, key):  # exact, or a pan: shifted to the nearest pixel
            painter.drawImage(round(dx), round(dy), image)
        else:  # a zoom: the kept image scaled to the nearest pixel (sharp, 2-3x cheaper)
            painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
            painter.setTransform(QTransform(kx, 0, 0, ky, dx, dy))
            painter.drawImage(0, 0, image)
        painter.restore()


def _same_scale(a: tuple, b: tuple) -> bool:
    """Whether two views' ``(sx, sy, ...)`` scales agree (a pan recomputes them, with noise)."""
    return math.isclose(a[0], b[0], rel_tol=1e-9) and math.isclose(a[1], b[1], rel_tol=1e-9)


def _covers(source: tuple, key: tuple, limit: float) -> bool:
    """Whether the image of view ``source`` holds all of view ``key`` (to half a pixel) and
    is magnified by at most ``limit`` (or shrunk by at most ``1 / limit``) to show it."""
    if not all(1 / limit <= k / s <= limit for k, s in zip(key[:2], source[:2], strict=True)):
        return False
    for scale, shift, size, s_scale, s_shift, s_size in (
            (key[0], key[2], key[4], source[0], source[2], source[4]),
            (key[1], key[3], key[5], source[1], source[3], source[5])):
        lo, hi = sorted((-shift / scale, (size - shift) / scale))  # in microns
        s_lo, s_hi = sorted((-s_shift / s_scale, (s_size - s_shift) / s_scale))
        slack = 0.5 / abs(s_scale)
        if lo < s_lo - slack or hi > s_hi + slack:
            return False
    return True


def _pixel_runs(kinds: tuple[_Kind, _Kind, _Kind], layers: int, key: tuple, dot: int,
                budget: int, precise: bool):
    """Yield ``(layer, flat frame indices)`` bottom layer first: every visible shape's pixels.

    Per kind: cull to the view in microns, map to pixels (truncating after the clip is the
    floor), then runs: a horizontal wire is a run along its row, a vertical one along its
    column; a via is its centre pixel, or close up two row and two column runs. Each run
    list stays in layer order, so a layer's pixels are one slice of each."""
    sx, sy, tx, ty, width, height = key
    x0, x1 = sorted((-tx / sx, (width - tx) / sx))  # the pixels 0 .. width, in microns
    y0, y1 = sorted((-ty / sy, (height - ty) / sy))
    horizontal, vertical, vias = kinds
    dtype = np.float64 if precise else np.float32

    def seen(kind: _Kind, near: tuple, far: tuple) -> tuple[np.ndarray, np.ndarray]:
        """The kind's coordinates (``near``/``far``: the columns of its low/high x, y) and
        ranks, of the shapes the view may show."""
        c = kind.f64 if precise else kind.f32
        lx, ly = (c[i] for i in near)
        hx, hy = (c[i] for i in far)
        mask = (hx >= x0) & (lx <= x1) & (hy >= y0) & (ly <= y1)
        if mask.all():
            return c, kind.rank
        keep = np.flatnonzero(mask)
        return c[:, keep], kind.rank[keep]

    def px(values: np.ndarray) -> np.ndarray:
        return np.clip(values * dtype(sx) + dtype(tx), 0, width - 1).astype(np.int64)

    def py(values: np.ndarray) -> np.ndarray:
        return np.clip(values * dtype(sy) + dtype(ty), 0, height - 1).astype(np.int64)

    def spans(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.minimum(a, b), np.maximum(a, b)

    rows, columns, dots = [], [], []
    c, rank = seen(horizontal, (1, 0), (2, 3))
    rows.append((rank, py(c[0]), *spans(px(c[1]), px(c[2]))))
    c, rank = seen(vertical, (0, 1), (3, 2))
    columns.append((rank, px(c[0]), *spans(py(c[1]), py(c[2]))))
    if len(vias.rank):
        c = vias.f64 if precise else vias.f32
        lo = np.stack([c[0] - c[2], c[1] - c[3]])
        hi = np.stack([c[0] + c[2], c[1] + c[3]])
        mask = (hi[0] >= x0) & (lo[0] <= x1) & (hi[1] >= y0) & (lo[1] <= y1)
        big = mask & ((2 * c[2] * abs(sx) >= dot) | (2 * c[3] * abs(sy) >= dot))
        small = mask & ~big
        dots.append((vias.rank[small], py(c[1][small]) * width + px(c[0][small])))
        if big.any():
            rank = vias.rank[big]
            xa, xb = spans(px(lo[0][big]), px(hi[0][big]))
            ya, yb = spans(py(lo[1][big]), py(hi[1][big]))
            rows += [(rank, ya, xa, xb), (rank, yb, xa, xb)]
            columns += [(rank, xa, ya, yb), (rank, xb, ya, yb)]
    lists = [(r, np.arange(len(r) + 1), i) for r, i in dots]
    for step, runs in ((1, rows), (width, columns)):
        for rank, across, start, end in runs:
            first = across * width + start if step == 1 else start * width + across
            lists.append((rank, *_runs(first, end - start + 1, step, budget)))
    cuts = [ends[np.searchsorted(rank, np.arange(layers + 1))] for rank, ends, _ in lists]
    for layer in range(layers):
        for cut, (_, _, index) in zip(cuts, lists, strict=True):
            if cut[layer + 1] > cut[layer]:
                yield layer, index[cut[layer]:cut[layer + 1]]


def _runs(first: np.ndarray, length: np.ndarray, step: int,
          budget: int) -> tuple[np.ndarray, np.ndarray]:
    """(run ends, flat indices) of runs of ``length`` pixels from ``first`` by ``step``; past
    ``budget`` pixels (absurd overlap) the shortest runs are left out (as empty runs)."""
    if length.sum() > budget:
        longest = np.argsort(-length, kind="stable")
        dropped = longest[np.searchsorted(np.cumsum(length[longest]), budget):]
        length = length.copy()
        length[dropped] = 0
    ends = np.r_[0, np.cumsum(length)]
    index = np.repeat(first - ends[:-1] * step, length)
    index += np.arange(ends[-1]) * step
    return ends, index


def nice_length(about: float) -> float:
    """The 1, 2 or 5 times a power of ten at or below ``about`` (a scale bar's length)."""
    if not math.isfinite(about) or about <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(about))
    return max(step * power for step in (1, 2, 5) if step * power <= about)


def pairs_item(colour: str, width: float = 1.0, z: float = 0.0,
               style: Qt.PenStyle = Qt.PenStyle.SolidLine) -> PairsItem:
    item = PairsItem(pg.mkPen(colour, width=width, style=style))
    item.setZValue(z)
    return item


def rects_item(colour: str, width: float = 1.0, z: float = 0.0,
               style: Qt.PenStyle = Qt.PenStyle.SolidLine) -> RectsItem:
    item = RectsItem(pg.mkPen(colour, width=width, style=style))
    item.setZValue(z)
    return item


def set_pairs(item: PairsItem, points: np.ndarray) -> None:
    item.setData(points)


class LayoutCanvas(pg.PlotWidget):
    """Draws a ``RouteModel``; ``redraw()`` after a load, ``draw_wiring()`` after an edit."""

    def __init__(self, model: RouteModel, on_click=lambda x, y, modifiers: None,
                 on_drag=None, on_right_click=None) -> None:
        self.box = CanvasBox(on_click, on_drag, on_right_click)
        super().__init__(viewBox=self.box, axisItems={side: RulerAxis(side)
                                                      for side in ("bottom", "left")})
        self.model = model
        self.setLabel("bottom", "x", units="µm")
        self.setLabel("left", "y", units="µm")
        self._fix_left_ruler_width()
        self.showGrid(False, False)
        self.overlay_on = {name: name not in DEFAULT_OFF for name in OVERLAYS}
        self.raster = LayerRaster()   # every layer's wires and vias
        self.raster.setZValue(2)
        self.addItem(self.raster)
        self.specials: dict[str, RectsItem] = {}
        self.cells = CellGeometry()
        self.die = self._add(rects_item("#666666", 1, -5))
        self.components = self._add(rects_item("#5a5a5a", 1, -4))
        self.cell_pins = self._add(rects_item("#9a9a9a", 1, -3))
        self.io_pins = self._add(rects_item("#ffffff", 2, 8))
        self.obstructions = self._add(rects_item("#a05050", 1, -3, Qt.PenStyle.DashLine))
        self.grid_lines = self._add(pairs_item("#4f9a4f", 1, 1.5))
        self.heat = pg.ImageItem()
        self.heat.setZValue(0)  # over the cells, under the wires
        self.heat.setOpacity(0.85)
        self.addItem(self.heat)
        self.highlight = self._add(pairs_item(HIGHLIGHT, 3, 20))
        self.highlight_vias = self._add(rects_item(HIGHLIGHT, 2, 21))
        self.chosen = self._add(pairs_item("#ff00ff", 4, 22))
        self.preview = self._add(pairs_item("#ff00ff", 2, 25, Qt.PenStyle.DashLine))
        self.snap_tree = self._add(pairs_item(SNAP, 2, 23, Qt.PenStyle.DashLine))
        self.snap_nodes = pg.ScatterPlotItem(size=9, pen=pg.mkPen(SNAP), brush=None)
        self.snap_nodes.setZValue(24)
        self.addItem(self.snap_nodes)
        self.predicted = self._add(pairs_item(PREDICTED, 2, 18, Qt.PenStyle.DashLine))
        self.only_predicted = self._add(pairs_item(ONLY_PREDICTED, 3, 19))
        self.only_reference = self._add(pairs_item(ONLY_REFERENCE, 3, 19))
        self.shorts = pg.ScatterPlotItem(size=16, symbol="x", pen=pg.mkPen("#ff0000", width=3),
                                         brush=pg.mkBrush("#ff0000"))
        self.shorts.setZValue(30)
        self.addItem(self.shorts)
        self.guides = pg.BarGraphItem(x0=np.zeros(0), y0=np.zeros(0), x1=np.zeros(0),
                                      y1=np.zeros(0), brushes=[], pen=None)
        self.guides.setZValue(1)  # over the heat map and the cells, under the wires
        self.addItem(self.guides)
        self.congestion_map: np.ndarray | None = None
        self.scale_bar_um: float | None = None  # of the last figure drawn
        self.ruler = self._add(pairs_item(RULER, 2, 28))
        self.ruler_label = pg.TextItem(color=RULER, anchor=(0.5, 1.2),
                                       fill=pg.mkBrush(0, 0, 0, 180))
        self.ruler_label.setZValue(29)
        self.addItem(self.ruler_label)
        self.marker_boxes = self._add(rects_item(MARKER, 1, 26))
        self.marker_current = self._add(rects_item(MARKER_CURRENT, 3, 27))

    def draw_ruler(self, start: tuple | None, end: tuple | None = None,
                   label: str = "") -> None:
        """A ruler from ``start`` to ``end`` (µm) with its measure at its middle; None
        clears it."""
        if start is None or end is None:
            set_pairs(self.ruler, [])
            self.ruler_label.setText("")
            return
        set_pairs(self.ruler, np.array([start, end], dtype=np.float64))
        self.ruler_label.setText(label)
        self.ruler_label.setPos((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)

    def draw_markers(self, boxes: np.ndarray) -> None:
        """The markers listed (µm boxes, thin)."""
        self.marker_boxes.set_rects(np.asarray(boxes, dtype=np.float64).reshape(-1, 4))

    def draw_current_marker(self, current: tuple | None) -> None:
        """The marker stepped to: thick, with a ring a few pixels out so a marker smaller
        than a pixel still shows."""
        if current is None:
            self.marker_current.set_rects([])
            return
        x1, y1, x2, y2 = current
        (x0, x1_view), _ = self.box.viewRange()  # the range set now (its matrix is lazy)
        ring = 6 * (x1_view - x0) / max(self.box.width(), 1.0)
        self.marker_current.set_rects([[x1, y1, x2, y2],
                                       [x1 - ring, y1 - ring, x2 + ring, y2 + ring]])

    def zoom_to(self, box: tuple, margin_um: float = 1.0) -> None:
        """Show ``box`` (µm) with a margin (a point: a 2 µm window around it)."""
        x1, y1, x2, y2 = box
        margin = max(margin_um, 0.5 * max(x2 - x1, y2 - y1))
        self.box.setRange(QRectF(x1 - margin, y1 - margin, x2 - x1 + 2 * margin,
                                 y2 - y1 + 2 * margin), padding=0)

    def _fix_left_ruler_width(self) -> None:
        """The y ruler as wide as its widest label ("-88888.8" µm) from the start: grown to
        fit each new label, it made the plot narrower while zooming (the view shifted under
        the mouse and every kept frame was redrawn)."""
        axis = self.getAxis("left")
        font = axis.style.get("tickFont") or self.font()
        widest = QFontMetrics(font).horizontalAdvance("-88888.8")
        axis.setWidth(widest + axis.style["tickTextOffset"][0] + 30)  # ticks and the label

    def _add(self, item):
        self.addItem(item)
        return item

    # -- whole design ------------------------------------------------------------------------

    def redraw(self) -> None:
        """Everything, after a design (or its LEF) is loaded."""
        model = self.model
        design = model.design
        scale = design.dbu_per_micron
        for item in self.specials.values():
            self.removeItem(item)
        self.specials = {style.name: self._add(rects_item(SPECIAL_COLOUR, 1, 1))
                         for style in model.styles if style.kind == "routing"}
        if design.die_area:
            x1, y1, x2, y2 = (np.asarray(design.die_area[:4]) / scale).tolist()
            self.die.set_rects([[x1, y1, x2, y2]])
        self.cells = cell_geometry(design, model.lef)
        self.components.set_rects(self.cells.outlines)
        pins = [r for r in self.cells.pins.values()]
        self.cell_pins.set_rects(np.concatenate(pins) if pins else [])
        obstructions = list(self.cells.obstructions.values())
        self.obstructions.set_rects(np.concatenate(obstructions) if obstructions else [])
        self.io_pins.set_rects(io_pin_rects(design)[0])
        set_pairs(self.grid_lines, gcell_lines(design))
        self.draw_wiring()
        self.apply_visibility()
        self.autoRange()

    def draw_wiring(self) -> None:
        """Wires, vias and special wires per layer, then the congestion map and overlays."""
        design = self.model.design
        scale = design.dbu_per_micron
        special = self.model.special
        rows = design.segments
        is_special = special[rows[:, SEG["net"]]] if len(rows) else np.zeros(0, bool)
        signal = rows[~is_special]
        index = {name: i for i, name in enumerate(design.layer_names)}
        vias = self._via_rects()
        layers = {}
        for style in sorted(self.model.styles, key=lambda s: s.level):
            if style.kind == "routing":
                chosen = signal[signal[:, SEG["layer"]] == index.get(style.name, -1)]
                shapes = segment_pairs(chosen, scale).reshape(-1, 4)
            else:
                shapes = vias.get(style.name, np.zeros((0, 4)))
            layers[style.name] = LayerBatch(shapes, style.kind != "routing", style.colour,
                                            style.visible)
        self.raster.set_layers(layers)
        boxes = special_rects(design, special)
        for name, item in self.specials.items():
            item.set_rects(boxes.get(index.get(name, -1), []))
        if self.overlay_on["congestion"]:
            self.draw_congestion()
        self.draw_selection()

    def _via_rects(self) -> dict[str, np.ndarray]:
        """Every via's cut rectangle (microns) by cut layer."""
        design, model = self.model.design, self.model
        vias = design.vias_placed
        cut_of = model.via_cut_layer()
        by_layer: dict[str, list[np.ndarray]] = {}
        for via_id in np.unique(vias[:, VIA["via"]]) if len(vias) else []:
            rows = vias[vias[:, VIA["via"]] == via_id]
            name = design.via_names[via_id]
            cut = cut_of[via_id]
            box = via_rects(design, model.lef, name, cut)[0]
            rects = np.repeat(rows[:, [VIA["x"], VIA["y"]]], 2, axis=0).reshape(-1, 4) + box
            by_layer.setdefault(cut, []).append(rects / design.dbu_per_micron)
        return {name: np.concatenate(parts) for name, parts in by_layer.items()}

    def draw_congestion(self) -> None:
        design = self.model.design
        if "X" not in design.gcell_grid or "Y" not in design.gcell_grid:
            self.heat.clear()
            self.congestion_map = None
            return
        visible = [design.layer_names.index(s.name) for s in self.model.styles
                   if s.kind == "routing" and s.visible and s.name in design.layer_names]
        self.congestion_map = congestion(design, self.model.lef, visible)
        grid, scale = design.gcell_grid, design.dbu_per_micron
        (x0, nx, sx), (y0, ny, sy) = grid["X"], grid["Y"]
        top = self.congestion_map.max()
        self.heat.setImage(self.congestion_map, autoLevels=False,
                           levels=(0, top if top > 0 else 1))
        self.heat.setColorMap(pg.colormap.get("inferno"))
        self.heat.setRect(QRectF(x0 / scale, y0 / scale, nx * sx / scale, ny * sy / scale))

    # -- the selected net and overlays ------------------------------------------------------

    def draw_selection(self, element: tuple[str, list] | None = None) -> None:
        model, design = self.model, self.model.design
        scale = design.dbu_per_micron
        index = model.selected
        if index is None:
            for item in (self.highlight, self.highlight_vias, self.snap_tree, self.chosen):
                item.setData([])
            self.snap_nodes.setData([])
            self.shorts.setData([])
        else:
            segments, vias = design.net_wiring(index)
            set_pairs(self.highlight, segment_pairs(segments, scale))
            half = 0.1
            points = vias[:, [VIA["x"], VIA["y"]]] / scale
            self.highlight_vias.set_rects(np.c_[points - half, points + half])
            self._draw_snapping(index)
            found = model.shorts(index)
            self.shorts.setData([xy[0] for _, _, xy in found], [xy[1] for _, _, xy in found])
            self.draw_element(element)
        self.draw_prediction()
        self.draw_guides()

    def draw_guides(self) -> None:
        """The guides on visible layers: the selected net's, or every net's when that
        overlay is on (nothing without a selection)."""
        model = self.model
        boxes, names = np.zeros((0, 4)), []
        if model.design is not None and model.guides is not None and self.overlay_on["guides"]:
            every = self.overlay_on["guides of all nets"]
            if every or model.selected is not None:
                net = None if every else model.design.nets[model.selected].name
                visible = {s.name for s in model.styles if s.visible}
                boxes, names = model.guide_boxes(net, visible)
        colours = {s.name: s.colour for s in model.styles}
        brushes = []
        for name in names:
            colour = QColor(colours.get(name, SPECIAL_COLOUR))
            colour.setAlpha(GUIDE_ALPHA)
            brushes.append(pg.mkBrush(colour))
        self.guides.setOpts(x0=boxes[:, 0], y0=boxes[:, 1], x1=boxes[:, 2], y1=boxes[:, 3],
                            brushes=brushes)

    def guide_count(self) -> int:
        """How many guide rectangles are drawn (tests and the status line)."""
        return len(self.guides.opts["x0"])

    def draw_element(self, element: tuple[str, list] | None) -> None:
        """The segment or via picked for editing."""
        set_pairs(self.chosen, self._element_pairs(element))

    def draw_preview(self, element: tuple[str, list] | None) -> None:
        """Where a dragged segment or via would go (or the wire being drawn), dashed."""
        set_pairs(self.preview, self._element_pairs(element))

    def _element_pairs(self, element: tuple[str, list] | None) -> np.ndarray:
        """A segment's ends or a via's square (microns) as point pairs."""
        if element is None:
            return np.zeros((0, 2))
        scale = self.model.design.dbu_per_micron
        if element[0] == "segment":
            x1, y1, x2, y2 = element[1][1:5]
            return np.array([[x1, y1], [x2, y2]]) / scale
        x, y = element[1][2:4]
        half = 0.15 * scale
        return outline_pairs([[x - half, y - half, x + half, y + half]]) / scale

    def _draw_snapping(self, index: int) -> None:
        snapped = self.model.snapped(index) if self.overlay_on["snapping"] else None
        if snapped is None:
            set_pairs(self.snap_tree, [])
            self.snap_nodes.setData([])
            return
        from engine.vlsi.grid import Snapper

        snapper = Snapper(self.model.design, self.model.lef)
        scale = self.model.design.dbu_per_micron
        planar = [(snapper.centre(a), snapper.centre(b)) for a, b in sorted(snapped.edges)
                  if a[2] == b[2]]
        set_pairs(self.snap_tree, np.asarray(planar, dtype=np.float64).reshape(-1, 2) / scale)
        spots = []
        for node, symbol, colour in ([(snapped.driver, "s", "#ffffff")]
                                     + [(load, "o", SNAP) for load in snapped.loads]
                                     + [(a, "t", "#ff66ff") for a, b in snapped.edges
                                        if a[2] != b[2]]):
            x, y = snapper.centre(node)
            spots.append({"pos": (x / scale, y / scale), "symbol": symbol,
                          "pen": pg.mkPen(colour, width=2), "brush": None})
        self.snap_nodes.setData(spots)

    def draw_prediction(self) -> None:
        model = self.model
        if model.prediction is None or not self.overlay_on["prediction"]:
            for item in (self.predicted, self.only_predicted, self.only_reference):
                set_pairs(item, [])
            return
        predicted = model.prediction
        scale = predicted.dbu_per_micron
        names = set(model.differing_nets())
        keep = np.array([n.name in names for n in predicted.nets], dtype=bool)
        rows = predicted.segments[keep[predicted.segments[:, SEG["net"]]]] \
            if len(predicted.segments) else predicted.segments
        set_pairs(self.predicted, segment_pairs(rows, scale))
        only_p, only_r = [], []
        if model.selected is not None:
            trees = model.grid_trees(model.design.nets[model.selected].name)
            if trees is not None:
                from engine.vlsi.grid import Snapper

                snapper = Snapper(model.design, model.lef)
                reference, guess = trees
                mark = 0.3 * scale  # a layer change is a square around its GCell's centre
                for edges, out in ((guess.edges - reference.edges, only_p),
                                   (reference.edges - guess.edges, only_r)):
                    for a, b in sorted(edges):
                        if a[2] == b[2]:
                            out.append((snapper.centre(a), snapper.centre(b)))
                            continue
                        x, y = snapper.centre(a)
                        square = outline_pairs([[x - mark, y - mark, x + mark, y + mark]])
                        out.extend(square.reshape(-1, 2, 2).tolist())
        set_pairs(self.only_predicted, np.asarray(only_p, dtype=np.float64).reshape(-1, 2)
                  / scale)
        set_pairs(self.only_reference, np.asarray(only_r, dtype=np.float64).reshape(-1, 2)
                  / scale)

    # -- visibility --------------------------------------------------------------------------

    def set_overlay(self, name: str, on: bool) -> None:
        self.overlay_on[name] = bool(on)
        self.apply_visibility()
        if name == "congestion" and on and self.model.design is not None:
            self.draw_congestion()
        if name == "snapping" and self.model.selected is not None:
            self._draw_snapping(self.model.selected)
        if name == "prediction":
            self.draw_prediction()
        if name.startswith("guides"):
            self.draw_guides()

    def apply_visibility(self) -> None:
        on = self.overlay_on
        for style in self.model.styles:
            self.raster.set_style(style.name, style.visible, style.colour)
            special = self.specials.get(style.name)
            if special is not None:
                special.setVisible(style.visible and on["special nets"])
        self.components.setVisible(on["components"])
        self.cell_pins.setVisible(on["pins"])
        self.io_pins.setVisible(on["pins"])
        self.obstructions.setVisible(on["obstructions"])
        self.grid_lines.setVisible(on["GCell grid"])
        self.heat.setVisible(on["congestion"])
        self.snap_tree.setVisible(on["snapping"])
        self.snap_nodes.setVisible(on["snapping"])
        for item in (self.predicted, self.only_predicted, self.only_reference):
            item.setVisible(on["prediction"])
        if self.model.guides is not None:
            self.draw_guides()  # the guides follow the layers' visibility and colours

    def drawn_points(self, item: PairsItem) -> int:
        """How many points an item holds (tests and the status line)."""
        x, _ = item.getData()
        return 0 if x is None else len(x)

    # -- figures -------------------------------------------------------------------------

    def legend_entries(self) -> list[tuple[str, str]]:
        """(name, colour) of what the view draws now: the visible layers that have wiring,
        then the overlays shown in colours a reader cannot guess."""
        model = self.model
        entries = [(style.name, style.colour) for style in model.styles
                   if style.visible and self.raster.count(style.name)]
        on = self.overlay_on
        if on["special nets"] and any(item.getData()[0].size for item in self.specials.values()):
            entries.append(("special nets", SPECIAL_COLOUR))
        if model.selected is not None:
            entries.append((f"net {model.design.nets[model.selected].name}", HIGHLIGHT))
        if on["prediction"] and model.prediction is not None:
            entries += [("predicted route", PREDICTED), ("only predicted", ONLY_PREDICTED),
                        ("only in the reference", ONLY_REFERENCE)]
        if on["snapping"] and self.snap_tree.getData()[0].size:
            entries.append(("GCell tree", SNAP))
        if self.marker_boxes.getData()[0].size:
            entries.append(("markers", MARKER))
        if self.marker_current.getData()[0].size:
            entries.append(("marker stepped to", MARKER_CURRENT))
        return entries

    @contextmanager
    def legend_shown(self) -> Iterator[list[tuple[str, str]]]:
        """A colour legend over the view's top-right corner and a scale bar (a round length
        near a fifth of the view, ``scale_bar_um``) in its bottom-right while the canvas is
        drawn for a figure (on screen the layer list and rulers do it); yields the entries."""
        entries = self.legend_entries()
        legend = pg.LegendItem(offset=None, brush=pg.mkBrush(0, 0, 0, 200),
                               pen=pg.mkPen("#888888"), labelTextColor="#ffffff")
        legend.setParentItem(self.box)  # placed once, not anchored: it lives for one drawing
        for name, colour in entries:
            legend.addItem(pg.ScatterPlotItem(symbol="s", size=10, pen=None,
                                              brush=pg.mkBrush(colour)), name)
        room = max(1.0, self.box.height() - 2 * LEGEND_MARGIN)  # rows that fit, then columns
        legend.setColumnCount(max(1, math.ceil(legend.height() / room)))
        legend.setPos(self.box.width() - legend.width() - LEGEND_MARGIN, LEGEND_MARGIN)
        (x0, x1), _ = self.box.viewRange()
        self.scale_bar_um = nice_length((x1 - x0) / 5)
        bar = pg.ScaleBar(self.scale_bar_um, width=4, brush="#ffffff", pen="#000000",
                          offset=(-3 * LEGEND_MARGIN, -3 * LEGEND_MARGIN))
        bar.text.setText(f"{self.scale_bar_um:g} µm")
        bar.setParentItem(self.box)
        try:
            yield entries
        finally:
            self.box.scene().removeItem(legend)
            self.box.scene().removeItem(bar)

    def window_um(self) -> dict[str, list[float]]:
        """The zoom window: the x and y ranges the view shows, in µm."""
        (x0, x1), (y0, y1) = self.box.viewRange()
        return {"x": [round(x0, 4), round(x1, 4)], "y": [round(y0, 4), round(y1, 4)]}

    def focus_net(self, index: int, margin_um: float = 2.0) -> None:
        segments, vias = self.model.design.net_wiring(index)
        scale = self.model.design.dbu_per_micron
        points = np.concatenate([segments[:, [SEG["x1"], SEG["y1"]]],
                                 segments[:, [SEG["x2"], SEG["y2"]]],
                                 vias[:, [VIA["x"], VIA["y"]]]]) / scale
        if not len(points):
            return
        lo, hi = points.min(0) - margin_um, points.max(0) + margin_um
        self.box.setRange(QRectF(lo[0], lo[1], hi[0] - lo[0], hi[1] - lo[1]), padding=0)
