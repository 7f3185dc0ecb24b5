"""Draws an engine plot spec (``engine/plots.py``) with pyqtgraph, live or finished, and exports it.

A spec is plain JSON: ``{kind, title, xlabel, ylabel, logx, logy, series: [{name, x, y,
style, lo, hi}], hlines: [{y, name}], xticks, provenance}``, or a ``heatmap`` (see
``engine/plots.py``). ``None`` values are gaps; ``lo``/``hi`` intervals become error bars or
a shaded band; bars of several series stand side by side. Live curves grow
through ``append_points``: points go into NumPy buffers at once and reach the screen at most
``REDRAW_HZ`` times a second, so a job streaming thousands of updates costs one ``setData`` per
frame. ``export`` writes PNG or SVG with the figure's provenance in the file's metadata (PDF is
rendered by the engine with matplotlib: see ``spec()``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QImage, QPainter, QPalette
from PySide6.QtWidgets import QVBoxLayout, QWidget

from engine.plots import bar_layout, heatmap_extent  # numpy only: no torch reaches the GUI

REDRAW_HZ = 30
LOCAL_EXPORT_FORMATS = ("png", "svg")
EXPORT_SCALE = 2.5  # PNG pixels per on-screen pixel
# Okabe-Ito: distinguishable for colour-blind readers, on light and dark backgrounds.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000")
PALETTE_ON_DARK = ("#56B4E9", "#E69F00", "#009E73", "#F0E442", "#CC79A7", "#D55E00",
                   "#0072B2", "#FFFFFF")
PROVENANCE_KEY = "Description"  # PNG text chunk, the key the engine's matplotlib export uses


class ExportError(Exception):
    """A figure that cannot be written; the message names the file and what to do."""


@dataclass
class _Series:
    """One curve: its buffers (capacity grows by doubling) and the item drawing it."""

    name: str
    style: str
    item: pg.PlotDataItem
    x: np.ndarray = field(default_factory=lambda: np.empty(0))
    y: np.ndarray = field(default_factory=lambda: np.empty(0))
    count: int = 0

    def extend(self, xs: np.ndarray, ys: np.ndarray) -> None:
        needed = self.count + xs.size
        if needed > self.x.size:
            capacity = max(needed, 2 * self.x.size, 256)
            self.x = np.resize(self.x, capacity)
            self.y = np.resize(self.y, capacity)
        self.x[self.count:needed] = xs
        self.y[self.count:needed] = ys
        self.count = needed

    def redraw(self) -> None:
        self.item.setData(self.x[:self.count], self.y[:self.count], connect="finite")


def _translucent(colour: QColor, alpha: int = 200) -> QColor:
    colour = QColor(colour)
    colour.setAlpha(alpha)
    return colour


def _as_floats(values) -> np.ndarray:
    """A spec's list (``None`` = gap) or any array-like, as float64 with NaN for gaps."""
    if values is None:
        return np.empty(0)
    return np.asarray([np.nan if v is None else v for v in values] if isinstance(values, list)
                      else values, dtype=float).ravel()


class PlotSpecView(QWidget):
    """One figure: ``set_spec`` for a finished plot, ``append_points`` for a live one."""

    def __init__(self, spec: dict | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.provenance: dict = {}
        self._title = ""
        self._labels = ("", "")
        self._log = (False, False)
        self._series: dict[str, _Series] = {}
        self._hlines: list[tuple[float, str, pg.InfiniteLine]] = []
        self._static_items: list = []   # bars, intervals, heat map: drawn once per spec
        self._bars: list[dict] = []
        self._intervals: dict[str, tuple[list, list]] = {}
        self._heatmap: dict | None = None
        self._xticks: list = []
        self._colorbar: pg.ColorBarItem | None = None
        self._dirty: set[str] = set()
        self._redraw_timer = QTimer(self)
        self._redraw_timer.setSingleShot(True)
        self._redraw_timer.setInterval(1000 // REDRAW_HZ)
        self._redraw_timer.timeout.connect(self.flush)

        palette = self.palette()
        self._foreground = palette.color(QPalette.ColorRole.Text)
        dark = palette.color(QPalette.ColorRole.Base).lightness() < 128
        self._colours = PALETTE_ON_DARK if dark else PALETTE
        self._plot_widget = pg.PlotWidget(background=palette.color(QPalette.ColorRole.Base))
        self._plot_widget.setMinimumSize(240, 160)
        self._plot = self._plot_widget.getPlotItem()
        for axis in ("left", "bottom"):
            self._plot.getAxis(axis).setPen(self._foreground)
            self._plot.getAxis(axis).setTextPen(self._foreground)
            # Labels carry their units as text ("frequency (Hz)"): a scale prefix beside them
            # ("frequency (Hz) (x0.001)", or "x0.001" beside ticks of 10^2) misreads the values.
            self._plot.getAxis(axis).enableAutoSIPrefix(False)
        self._plot.showGrid(x=True, y=True, alpha=0.15)
        self._legend = self._plot.addLegend(
            offset=(-10, 10), labelTextColor=self._foreground, pen=pg.mkPen(150, 150, 150),
            brush=_translucent(palette.color(QPalette.ColorRole.Base)))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self._plot_widget)
        if spec is not None:
            self.set_spec(spec)

    # -- drawing -------------------------------------------------------------------------

    def set_spec(self, spec: dict, provenance: dict | None = None) -> None:
        """Replace what is shown by ``spec`` (an engine plot spec)."""
        self.clear()
        self.provenance = dict(provenance or spec.get("provenance") or {})
        self._title = str(spec.get("title") or "")
        self._plot.setTitle(self._title, color=self._foreground)
        self._labels = (str(spec.get("xlabel") or ""), str(spec.get("ylabel") or ""))
        self._plot.setLabel("bottom", self._labels[0])
        self._plot.setLabel("left", self._labels[1])
        self.set_log(bool(spec.get("logx")), bool(spec.get("logy")))
        if spec.get("kind") == "heatmap":
            self._draw_heatmap(spec)
        bars = bar_layout(spec)
        for index, curve in enumerate(spec.get("series", [])):
            name = str(curve.get("name") or f"series {index + 1}")
            style = curve.get("style", "line")
            if style == "bar":
                self._draw_bars(name, curve, *bars[index], index)
                continue
            self._add_points(name, _as_floats(curve.get("x")), _as_floats(curve.get("y")),
                             style)
            if "lo" in curve:
                self._draw_interval(name, curve, style, index)
        if spec.get("xticks"):
            self._xticks = [[float(x), str(label)] for x, label in spec["xticks"]]
            self._plot.getAxis("bottom").setTicks([[(x, label) for x, label in self._xticks]])
        for line in spec.get("hlines", []):
            self.add_hline(float(line["y"]), str(line.get("name") or ""))
        self.flush()

    def set_labels(self, title: str = "", xlabel: str = "", ylabel: str = "") -> None:
        self._title, self._labels = title, (xlabel, ylabel)
        self._plot.setTitle(title, color=self._foreground)
        self._plot.setLabel("bottom", xlabel)
        self._plot.setLabel("left", ylabel)

    def set_log(self, logx: bool, logy: bool) -> None:
        self._log = (logx, logy)
        self._plot.setLogMode(x=logx, y=logy)
        for y, _name, line in self._hlines:  # InfiniteLine does not follow the log mode
            line.setPos(self._hline_position(y))

    def append_points(self, series_name: str, xs, ys, style: str = "line") -> None:
        """Add points to a curve (created when new); drawn at the next frame, not now."""
        self._add_points(series_name, _as_floats(xs), _as_floats(ys), style)
        if not self._redraw_timer.isActive():
            self._redraw_timer.start()

    def set_series(self, series_name: str, xs, ys, style: str = "line") -> None:
        """Replace a curve's points (creating it when new)."""
        entry = self._series.get(series_name)
        if entry is not None:
            entry.count = 0
        self.append_points(series_name, xs, ys, style)

    def add_hline(self, y: float, name: str = "") -> None:
        pen = pg.mkPen(color=(128, 128, 128), width=1, style=Qt.PenStyle.DashLine)
        line = pg.InfiniteLine(pos=self._hline_position(y), angle=0, pen=pen, movable=False,
                               label=name or None,
                               labelOpts={"position": 0.05, "color": self._foreground,
                                          "anchors": [(0, 1), (0, 1)]})
        self._plot.addItem(line)
        if name:
            self._legend.addItem(pg.PlotDataItem(pen=pen), name)
            self._legend.setVisible(len(self._legend.items) > 1)
        self._hlines.append((y, name, line))

    def clear(self) -> None:
        """Remove every curve and line; the widget stays usable."""
        self._redraw_timer.stop()
        self._dirty.clear()
        for entry in self._series.values():
            self._plot.removeItem(entry.item)
        for _y, _name, line in self._hlines:
            self._plot.removeItem(line)
        for item in self._static_items:
            self._plot.removeItem(item)
        if self._colorbar is not None:
            self._colorbar.hide()
        for axis in ("bottom", "left"):
            self._plot.getAxis(axis).setTicks(None)
        self._series.clear()
        self._hlines.clear()
        self._static_items.clear()
        self._bars.clear()
        self._intervals.clear()
        self._heatmap = None
        self._xticks = []
        self._legend.clear()
        self._legend.setVisible(False)
        self.provenance = {}
        self.set_labels()
        self.set_log(False, False)

    def flush(self) -> None:
        """Push buffered points to the screen now (the timer calls this ~30 times a second)."""
        for name in self._dirty:
            self._series[name].redraw()
        self._dirty.clear()

    def _add_points(self, name: str, xs: np.ndarray, ys: np.ndarray, style: str) -> None:
        if xs.shape != ys.shape:
            raise ValueError(f"series {name!r}: {xs.size} x values but {ys.size} y values")
        entry = self._series.get(name)
        if entry is None:
            entry = _Series(name, style, self._new_item(name, style, len(self._series)))
            self._series[name] = entry
        entry.extend(xs, ys)
        self._dirty.add(name)
        self._legend.setVisible(len(self._legend.items) > 1)  # one curve: its title says it

    def _new_item(self, name: str, style: str, index: int) -> pg.PlotDataItem:
        colour = self._colour(index + len(self._bars))
        if style == "scatter":
            item = pg.PlotDataItem(pen=None, symbol="o", symbolSize=5, symbolPen=None,
                                   symbolBrush=colour, name=name)
        else:
            item = pg.PlotDataItem(pen=pg.mkPen(colour, width=1.5), name=name,
                                   stepMode="right" if style == "step" else None)
            item.setDownsampling(auto=True, method="peak")
            item.setClipToView(True)
        self._plot.addItem(item)
        return item

    def _colour(self, index: int) -> str:
        return self._colours[index % len(self._colours)]

    def _add_static(self, item) -> None:
        self._plot.addItem(item)
        self._static_items.append(item)

    def _draw_bars(self, name: str, curve: dict, offset: float, width: float, index: int
                   ) -> None:
        x, y = _as_floats(curve.get("x")), _as_floats(curve.get("y"))
        finite = np.isfinite(x) & np.isfinite(y)
        item = pg.BarGraphItem(x=x[finite] + offset, height=y[finite], width=width,
                               brush=self._colour(index), pen=pg.mkPen(None), name=name)
        self._add_static(item)  # named: the plot adds it to the legend
        self._legend.setVisible(len(self._legend.items) > 1)
        self._bars.append(dict(curve, name=name))
        if "lo" in curve:
            self._draw_interval(name, dict(curve, x=list(x + offset)), "bar", index,
                                beam=width / 2)

    def _draw_interval(self, name: str, curve: dict, style: str, index: int,
                       beam: float = 0.0) -> None:
        """Error bars on bars and points; a translucent band around a line."""
        x, y = _as_floats(curve.get("x")), _as_floats(curve.get("y"))
        lo, hi = _as_floats(curve.get("lo")), _as_floats(curve.get("hi"))
        self._intervals[name] = (list(curve["lo"]), list(curve["hi"]))
        colour = QColor(self._colour(index))
        if style in ("bar", "scatter"):
            finite = np.isfinite(x) & np.isfinite(lo) & np.isfinite(hi) & np.isfinite(y)
            if not beam and finite.sum() > 1:
                beam = 0.3 * float(np.min(np.diff(np.unique(x[finite])), initial=1.0))
            self._add_static(pg.ErrorBarItem(
                x=x[finite], y=y[finite], top=hi[finite] - y[finite],
                bottom=y[finite] - lo[finite], beam=beam,
                pen=pg.mkPen(self._foreground if style == "bar" else colour, width=1.2)))
            return
        lower, upper = pg.PlotDataItem(x, lo, connect="finite"), pg.PlotDataItem(x, hi,
                                                                               connect="finite")
        band = pg.FillBetweenItem(lower, upper, brush=_translucent(colour, 60))
        for item in (lower, upper, band):
            self._add_static(item)
        lower.setPen(None)
        upper.setPen(None)

    def _draw_heatmap(self, spec: dict) -> None:
        z = np.array([_as_floats(row) for row in spec["z"]])
        self._heatmap = {key: value for key, value in spec.items() if key != "provenance"}
        x0, x1, y0, y1 = heatmap_extent(spec)
        image = pg.ImageItem(z, axisOrder="row-major")
        image.setRect(QRectF(x0, y0, x1 - x0, y1 - y0))
        finite = z[np.isfinite(z)]
        if finite.size == 0:
            levels = (0.0, 1.0)
        elif spec.get("symmetric"):
            bound = float(np.abs(finite).max()) or 1.0
            levels = (-bound, bound)
        else:
            low, high = float(finite.min()), float(finite.max())
            levels = (low, high if high > low else low + 1.0)
        colormap = _colormap(spec.get("colormap") or "viridis", bool(spec.get("symmetric")))
        image.setLookupTable(colormap.getLookupTable(nPts=256))
        image.setLevels(levels)
        self._add_static(image)
        if self._colorbar is None:
            self._colorbar = pg.ColorBarItem(values=levels, colorMap=colormap, interactive=False,
                                             width=14)
            self._colorbar.setImageItem(image, insert_in=self._plot)
        else:
            self._colorbar.setColorMap(colormap)
            self._colorbar.setLevels(levels)
            self._colorbar.setImageItem(image)
            self._colorbar.show()
        self._colorbar.getAxis("right").setLabel(spec.get("zlabel") or "")
        rows, cols = z.shape
        dx, dy = (x1 - x0) / max(cols, 1), (y1 - y0) / max(rows, 1)
        for axis, labels, start, step in (("bottom", spec.get("xlabels"), x0, dx),
                                          ("left", spec.get("ylabels"), y0, dy)):
            if labels:
                self._plot.getAxis(axis).setTicks(
                    [[(start + (i + 0.5) * step, str(label)) for i, label in enumerate(labels)]])
        outline_x: list[float] = []
        outline_y: list[float] = []
        for row, col in spec.get("marks", []):
            left, bottom = x0 + col * dx, y0 + row * dy
            outline_x += [left, left + dx, left + dx, left, left, np.nan]
            outline_y += [bottom, bottom, bottom + dy, bottom + dy, bottom, np.nan]
        if outline_x:
            self._add_static(pg.PlotDataItem(outline_x, outline_y, connect="finite",
                                             pen=pg.mkPen("#D55E00", width=2)))
        self._plot.setRange(xRange=(x0, x1), yRange=(y0, y1), padding=0)

    def _hline_position(self, y: float) -> float:
        if self._log[1]:
            return float(np.log10(y)) if y > 0 else float("nan")
        return y

    # -- reading back --------------------------------------------------------------------

    def series_names(self) -> list[str]:
        return list(self._series) + [bar["name"] for bar in self._bars]

    def point_count(self, series_name: str) -> int:
        """Points received for a curve (drawn or about to be); 0 for an unknown curve."""
        entry = self._series.get(series_name)
        return entry.count if entry is not None else 0

    def drawn_count(self, series_name: str) -> int:
        """Points on screen now (``point_count`` minus what waits for the next frame)."""
        entry = self._series.get(series_name)
        drawn = entry.item.getData()[0] if entry is not None else None
        return 0 if drawn is None else len(drawn)

    def spec(self) -> dict:
        """What is shown, as an engine plot spec (for a PDF rendered by the engine)."""
        def listed(values: np.ndarray) -> list:
            return [float(v) if np.isfinite(v) else None for v in values]

        curves = []
        for s in self._series.values():
            curve = {"name": s.name, "x": listed(s.x[:s.count]), "y": listed(s.y[:s.count]),
                     "style": s.style}
            if s.name in self._intervals:
                curve["lo"], curve["hi"] = self._intervals[s.name]
            curves.append(curve)
        spec = dict(self._heatmap or {"kind": "plot"})
        spec.update({"title": self._title, "xlabel": self._labels[0],
                     "ylabel": self._labels[1], "logx": self._log[0], "logy": self._log[1],
                     "series": curves + [dict(bar) for bar in self._bars],
                     "hlines": [{"y": y, "name": name} for y, name, _line in self._hlines],
                     "provenance": dict(self.provenance)})
        if self._xticks:
            spec["xticks"] = [list(tick) for tick in self._xticks]
        return spec

    # -- export --------------------------------------------------------------------------

    def export(self, path: str | os.PathLike) -> Path:
        """Write the figure as PNG or SVG (from the suffix), provenance in its metadata."""
        target = Path(path)
        fmt = target.suffix.lstrip(".").lower()
        if fmt not in LOCAL_EXPORT_FORMATS:
            raise ExportError(f"{target}: cannot export {fmt or 'without a suffix'} here; "
                              f"choose .png or .svg (PDF is rendered by the engine)")
        self.flush()
        self._ensure_laid_out()
        text = json.dumps(self.provenance, sort_keys=True, default=str)
        try:
            if fmt == "png":
                self._export_png(target, text)
            else:
                self._export_svg(target, text)
        except OSError as exc:
            raise ExportError(f"{target}: cannot write it ({exc.strerror or exc})") from None
        return target

    def _ensure_laid_out(self) -> None:
        """A never-shown widget has had no resize or layout pass: give it one, off screen."""
        if self.isVisible() or not self.isWindow():
            return  # shown, or a child that is laid out with its window
        self.resize(max(self.width(), 640), max(self.height(), 420))
        self.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
        self.show()
        for _round in range(3):  # nested graphics layouts settle one level per round
            QCoreApplication.sendPostedEvents(None, 0)
        self.hide()
        self.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, False)

    def _export_png(self, target: Path, text: str) -> None:
        """Render at EXPORT_SCALE times the on-screen size: the figure looks as it does on
        screen (fonts and legend in proportion), with more pixels."""
        from pyqtgraph.exporters import ImageExporter

        source = self._plot.sceneBoundingRect()
        image = QImage(int(source.width() * EXPORT_SCALE), int(source.height() * EXPORT_SCALE),
                       QImage.Format.Format_ARGB32)
        image.setDevicePixelRatio(EXPORT_SCALE)
        image.fill(self._plot_widget.backgroundBrush().color())
        painter = QPainter(image)
        exporter = ImageExporter(self._plot)  # only for its export mode (hides the "A" button)
        try:
            exporter.setExportMode(True, {"antialias": True, "painter": painter,
                                          "background": image.pixelColor(0, 0),
                                          "resolutionScale": 1.0})
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            self._plot.scene().render(painter, QRectF(0, 0, source.width(), source.height()),
                                      source)
        finally:
            exporter.setExportMode(False)
            painter.end()
        image.setText("Software", "Studio")
        image.setText(PROVENANCE_KEY, text)
        with _atomic_path(target) as temporary:
            if not image.save(str(temporary), "PNG"):
                raise OSError(f"Qt could not write {temporary}")

    def _export_svg(self, target: Path, text: str) -> None:
        from pyqtgraph.exporters import SVGExporter

        with _closed_paths_as_lines():
            svg = SVGExporter(self._plot).export(toBytes=True).decode("utf-8")
        svg = svg.replace("<title>pyqtgraph SVG export</title>",
                          f"<title>{escape(self._title or 'Studio figure')}</title>", 1)
        opening_end = svg.index(">", svg.index("<svg")) + 1
        metadata = f'\n<metadata id="studio-provenance">{escape(text)}</metadata>'
        svg = svg[:opening_end] + metadata + svg[opening_end:]
        with _atomic_path(target) as temporary:
            temporary.write_text(svg, encoding="utf-8")


def _colormap(name: str, symmetric: bool) -> pg.ColorMap:
    """pyqtgraph's own maps, then matplotlib's names; a diverging default for signed data."""
    for source in (None, "matplotlib"):
        try:
            found = pg.colormap.get(name, source=source)
        except Exception:  # noqa: BLE001 - unknown names raise different errors per source
            continue
        if found is not None:
            return found
    return pg.colormap.get("CET-D1" if symmetric else "viridis")


@contextmanager
def _closed_paths_as_lines() -> Iterator[None]:
    """Qt >= 6.9 ends closed SVG paths with ``Z``, which pyqtgraph 0.14's SVG exporter cannot
    parse (its coordinate fix-up expects only ``x,y`` pairs). While exporting, each ``Z`` is
    rewritten as a line back to its subpath's start, which draws the same outline."""
    import sys

    import pyqtgraph.exporters.SVGExporter  # noqa: F401 - makes sure the module is loaded

    module = sys.modules["pyqtgraph.exporters.SVGExporter"]
    original = module.correctCoordinates

    def correct_coordinates(node, defs, item, options):
        for path in node.getElementsByTagName("path"):
            path.setAttribute("d", _close_with_line(path.getAttribute("d")))
        return original(node, defs, item, options)

    module.correctCoordinates = correct_coordinates
    try:
        yield
    finally:
        module.correctCoordinates = original


def _close_with_line(d: str) -> str:
    tokens, start = [], ""
    for token in d.split():
        if token in ("Z", "z"):
            if start:
                tokens.append(f"L{start}")
            continue
        if token[0] in "Mm":
            start = token[1:]
        tokens.append(token)
    return " ".join(tokens)


@contextmanager
def _atomic_path(target: Path) -> Iterator[Path]:
    """A temporary file beside ``target`` that replaces it only when writing succeeded."""
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix,
                                    dir=target.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def read_png_provenance(path: str | os.PathLike) -> dict:
    """The provenance a PNG export carries (empty when it has none)."""
    from PySide6.QtGui import QImage

    text = QImage(str(path)).text(PROVENANCE_KEY)
    return json.loads(text) if text else {}


def read_svg_provenance(path: str | os.PathLike) -> dict:
    """The provenance an SVG export carries (empty when it has none)."""
    import re
    from xml.sax.saxutils import unescape

    found = re.search(r'<metadata id="studio-provenance">(.*?)</metadata>',
                      Path(path).read_text(encoding="utf-8"), re.S)
    return json.loads(unescape(found.group(1))) if found else {}
