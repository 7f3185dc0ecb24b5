"""The fMRI 4D viewer: three linked orthogonal slices (or a lightbox), a time axis, the voxel
and ROI time courses and the ROIs' connectivity matrix, FSLeyes-style.

Every image is computed by ``ViewerModel.render`` on the ``Slicer`` thread from a snapshot of
the cursor and time; sliders and drags only schedule a redraw (at most one per
``THROTTLE_MS``), so scrubbing never blocks the window. Images are pyqtgraph ``ImageItem``s
in plain ``ViewBox``es (not ``ImageView``: see ARCHITECTURE.md "Pitfalls").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from engine.io import FormatError
from engine.io.nifti import bids_runs, open_volume
from engine.plots import heatmap
from panels.fmri.model import (
    OVERLAY_COLORMAPS,
    ViewerModel,
    connectivity,
    orientation_labels,
    plane_axes,
    roi_time_courses,
)
from panels.fmri.slicer import Slicer
from panels.widgets.plot_view import PlotSpecView

THROTTLE_MS = 15
BASE_COLORMAP = "CET-L1"  # linear grey
NIFTI_FILTER = "NIfTI images (*.nii *.nii.gz);;All files (*)"


def conversion_cache() -> Path:
    """Where large .nii.gz files are decompressed once (the workspace's cache, reused)."""
    from engine.workspace import default_workspace

    return default_workspace() / "cache" / "nifti"


@dataclass(frozen=True)
class OverlayStyle:
    threshold: float = 0.0
    vmax: float = 1.0
    colormap: str = "inferno"
    opacity: float = 0.7


def colourise(values: np.ndarray, style: OverlayStyle) -> np.ndarray:
    """RGBA bytes ``[h, v, 4]``: |value| below the threshold (or NaN) is transparent."""
    span = max(style.vmax - style.threshold, 1e-12)
    magnitude = np.abs(np.nan_to_num(values, nan=0.0))
    scaled = np.clip((magnitude - style.threshold) / span, 0.0, 1.0)
    rgba = pg.colormap.get(style.colormap).map(scaled.ravel(), mode="byte")
    rgba = rgba.reshape(*values.shape, 4)
    shown = np.isfinite(values) & (magnitude >= style.threshold) & (style.threshold >= 0)
    rgba[..., 3] = np.where(shown, int(round(255 * style.opacity)), 0)
    return rgba


class SliceViewBox(pg.ViewBox):
    """A view whose left click and left drag move the crosshair (other buttons pan/zoom)."""

    def __init__(self, on_point) -> None:
        super().__init__(lockAspect=True, invertY=False, enableMenu=False)
        self._on_point = on_point

    def mouseClickEvent(self, ev) -> None:
        if ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            self._on_point(self.mapSceneToView(ev.scenePos()))
        else:
            super().mouseClickEvent(ev)

    def mouseDragEvent(self, ev, axis=None) -> None:
        if ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            self._on_point(self.mapSceneToView(ev.scenePos()))
        else:
            super().mouseDragEvent(ev, axis)


class PlaneView:
    """One orthogonal plane: base and overlay images, crosshair lines, orientation letters."""

    def __init__(self, plane: int, on_point) -> None:
        self.plane = plane
        self.box = SliceViewBox(lambda pos: on_point(plane, pos))
        self.base = pg.ImageItem()
        self.overlay = pg.ImageItem()
        self.overlay.setZValue(1)
        self.lines = (pg.InfiniteLine(angle=90, pen=pg.mkPen("#00ff00", width=1)),
                      pg.InfiniteLine(angle=0, pen=pg.mkPen("#00ff00", width=1)))
        self.labels = {edge: pg.TextItem("", color="#ffd54f", anchor=anchor) for edge, anchor in
                       (("left", (0, 0.5)), ("right", (1, 0.5)), ("bottom", (0.5, 1)),
                        ("top", (0.5, 0)))}
        for item in (self.base, self.overlay, *self.lines):
            self.box.addItem(item)
        for label in self.labels.values():
            label.setZValue(2)
            self.box.addItem(label, ignoreBounds=True)
        self.size_mm = (1.0, 1.0)
        self.voxel_mm = (1.0, 1.0)

    def set_geometry(self, shape: tuple[int, int], voxel_mm: tuple[float, float]) -> None:
        self.voxel_mm = voxel_mm
        self.size_mm = (shape[0] * voxel_mm[0], shape[1] * voxel_mm[1])
        rect = QRectF(0, 0, *self.size_mm)
        width, height = self.size_mm
        for edge, (x, y) in {"left": (0, height / 2), "right": (width, height / 2),
                             "bottom": (width / 2, 0), "top": (width / 2, height)}.items():
            self.labels[edge].setPos(x, y)
        self.box.setRange(rect, padding=0.02)

    def set_images(self, base: np.ndarray, rgba: np.ndarray | None, levels) -> None:
        """Draw a slice (and its overlay) stretched over the plane's extent in mm; the rect
        is set after the image, since pyqtgraph scales it by the current image's size."""
        rect = QRectF(0, 0, *self.size_mm)
        self.base.setImage(base, autoLevels=False, levels=levels)
        self.base.setRect(rect)
        if rgba is None:
            self.overlay.clear()
        else:
            self.overlay.setImage(rgba, autoLevels=False)
            self.overlay.setRect(rect)

    def set_labels(self, radiological: bool) -> None:
        for edge, letter in orientation_labels(self.plane, radiological).items():
            self.labels[edge].setText(letter)

    def set_crosshair(self, h: float, v: float) -> None:
        self.lines[0].setPos((h + 0.5) * self.voxel_mm[0])
        self.lines[1].setPos((v + 0.5) * self.voxel_mm[1])


class FmriPanel(QWidget):
    """The panel the shell opens for NIfTI files and BIDS folders (``open_file``)."""

    def __init__(self, host=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._host = host
        self.model = ViewerModel()
        self.slicer = Slicer(self)
        self.slicer.finished.connect(self._on_finished)
        self.style_overlay = OverlayStyle()
        self.radiological = False
        self.lightbox = False
        self.last_result: dict | None = None
        self.volume_view = None
        self.time_course: np.ndarray | None = None
        self.fc_matrix: np.ndarray | None = None
        self._want_time_course = False
        self._generation = 0
        self._render_timer = QTimer(self, singleShot=True, interval=THROTTLE_MS)
        self._render_timer.timeout.connect(self._submit_render)
        self._play_timer = QTimer(self)
        self._play_timer.timeout.connect(self._advance)
        self._build()

    # -- layout ------------------------------------------------------------------------------

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        layout.addLayout(self._build_toolbar())
        layout.addLayout(self._build_overlay_bar())
        self.figure = QWidget()
        figure_layout = QVBoxLayout(self.figure)
        figure_layout.setContentsMargins(0, 0, 0, 0)
        self.stack = QStackedWidget()
        self.ortho = pg.GraphicsLayoutWidget()
        self.planes = [PlaneView(p, self._on_point) for p in range(3)]
        for p, view in enumerate(self.planes):
            self.ortho.addItem(view.box, row=0, col=p)
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=BASE_COLORMAP, label="base")
        self.colorbar.setImageItem([view.base for view in self.planes])
        self.ortho.addItem(self.colorbar, row=0, col=3)
        self.overlay_bar = pg.ColorBarItem(values=(0, 1), colorMap="inferno",
                                           interactive=False, label="overlay")
        self.overlay_bar.setVisible(False)
        self.ortho.addItem(self.overlay_bar, row=0, col=4)
        self.lightbox_widget = pg.GraphicsLayoutWidget()
        self.lightbox_view = PlaneView(2, self._on_lightbox_point)
        self.lightbox_widget.addItem(self.lightbox_view.box)
        self.stack.addWidget(self.ortho)
        self.stack.addWidget(self.lightbox_widget)
        self.info = QLabel("Open a NIfTI file or a BIDS folder (File > Open, or drop it here).")
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.course_plot = pg.PlotWidget()
        self.course_plot.setLabel("left", "value")
        self.course_plot.setLabel("bottom", "time (s)")
        self.course_plot.addLegend(offset=(5, 5))
        self.course_curve = self.course_plot.plot([], [], pen=pg.mkPen("#56B4E9", width=2),
                                                  name="voxel")
        self.time_line = pg.InfiniteLine(angle=90, pen=pg.mkPen("#E69F00"))
        self.course_plot.addItem(self.time_line)
        self.roi_curves: list[pg.PlotDataItem] = []
        self.fc_view = PlotSpecView()
        self.fc_view.setVisible(False)
        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.addWidget(self.course_plot)
        lower.addWidget(self.fc_view)
        upper = QSplitter(Qt.Orientation.Vertical)
        upper.addWidget(self.stack)
        upper.addWidget(lower)
        upper.setSizes([600, 220])
        figure_layout.addWidget(upper)
        layout.addWidget(self.figure, 1)
        layout.addWidget(self.info)
        layout.addLayout(self._build_time_bar())

    def _build_toolbar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        for text, slot in (("Open…", self._choose_file), ("Add overlay…", self._choose_overlay),
                           ("Label image…", self._choose_labels), ("Export…", self._choose_export)):
            button = QPushButton(text)
            button.clicked.connect(slot)
            bar.addWidget(button)
        self.radius_box = QDoubleSpinBox(minimum=0.5, maximum=50.0, value=6.0, suffix=" mm")
        self.sphere_button = QPushButton("Add sphere ROI")
        self.sphere_button.clicked.connect(lambda: self.add_sphere_roi(self.radius_box.value()))
        self.radiological_box = QCheckBox("Radiological (L on the right)")
        self.radiological_box.toggled.connect(self.set_radiological)
        self.lightbox_box = QCheckBox("Lightbox")
        self.lightbox_box.toggled.connect(self.set_lightbox)
        self.nan_box = QCheckBox("NaN as 0")
        self.nan_box.setToolTip("Open images with NaN voxels, showing them as 0 (otherwise "
                                "such files are refused)")
        self.render_box = QCheckBox("3-D")
        self.render_box.setToolTip("Volume rendering of the current frame (needs OpenGL)")
        self.render_box.toggled.connect(self.set_3d)
        for widget in (self.radius_box, self.sphere_button, self.radiological_box,
                       self.lightbox_box, self.nan_box, self.render_box):
            bar.addWidget(widget)
        bar.addStretch(1)
        return bar

    def _build_overlay_bar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.threshold_box = QDoubleSpinBox(minimum=0.0, maximum=1e12, decimals=3)
        self.threshold_box.valueChanged.connect(lambda v: self.set_overlay_style(threshold=v))
        self.colormap_box = QComboBox()
        self.colormap_box.addItems(OVERLAY_COLORMAPS)
        self.colormap_box.currentTextChanged.connect(lambda n: self.set_overlay_style(colormap=n))
        self.opacity_slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=100,
                                      value=70)
        self.opacity_slider.valueChanged.connect(
            lambda v: self.set_overlay_style(opacity=v / 100))
        for text, widget in (("Overlay threshold", self.threshold_box),
                             ("colour map", self.colormap_box),
                             ("opacity", self.opacity_slider)):
            bar.addWidget(QLabel(text))
            bar.addWidget(widget)
        bar.addStretch(1)
        return bar

    def _build_time_bar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.play_button = QPushButton("Play")
        self.play_button.setCheckable(True)
        self.play_button.toggled.connect(self.set_playing)
        self.time_slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=0)
        self.time_slider.valueChanged.connect(self.set_time)
        self.fps_box = QSpinBox(minimum=1, maximum=60, value=10, suffix=" frames/s")
        self.fps_box.valueChanged.connect(self._set_fps)
        self.time_label = QLabel("t = 0")
        for widget in (self.play_button, self.time_slider, self.fps_box, self.time_label):
            bar.addWidget(widget, 1 if widget is self.time_slider else 0)
        return bar

    def sizeHint(self) -> QSize:
        return QSize(1100, 800)

    # -- opening -----------------------------------------------------------------------------

    def open_file(self, path) -> bool:
        """A NIfTI file or a BIDS folder. A 4-D file opened over a 3-D image becomes its
        overlay (drop a bold run on a T1); anything else replaces what is shown."""
        path = Path(path)
        try:
            if path.is_dir():
                return self._open_bids(path)
            volume = open_volume(path, convert_dir=conversion_cache(), nan=self._nan())
        except (FormatError, ValueError) as exc:
            return self._fail("Cannot open the file", str(exc))
        if self.model.base is not None and self.model.base.n_frames == 1 and volume.n_frames > 1:
            self._set_overlay(volume)
        else:
            self._set_base(volume)
        return True

    def open_overlay(self, path) -> bool:
        if self.model.base is None:
            return self.open_file(path)
        try:
            volume = open_volume(path, convert_dir=conversion_cache(), nan=self._nan())
        except (FormatError, ValueError) as exc:
            return self._fail("Cannot open the overlay", str(exc))
        self._set_overlay(volume)
        return True

    def _open_bids(self, root: Path) -> bool:
        """The first subject's T1w with its first bold run over it (both opened before
        either is shown, so a bad run leaves the view as it was)."""
        runs = bids_runs(root)
        run = next((r for r in runs if r.anat and r.bold), runs[0])
        first = open_volume(run.anat[0] if run.anat else run.bold[0],
                            convert_dir=conversion_cache(), nan=self._nan())
        bold = None
        if run.anat and run.bold:
            try:
                bold = open_volume(run.bold[0], convert_dir=conversion_cache(), nan=self._nan())
            except FormatError:
                first.close()
                raise
            bold.tr_s = run.tr_s[0] if run.tr_s[0] is not None else bold.tr_s
        self._set_base(first)
        if bold is not None:
            self._set_overlay(bold)
        return True

    def _nan(self) -> str:
        return "zero" if self.nan_box.isChecked() else "error"

    def _set_base(self, volume) -> None:
        self.set_playing(False)
        with self.model.lock:
            self.model.set_base(volume)
        self._generation += 1
        grid = self.model.grid
        for view in self.planes:
            h, v = plane_axes(view.plane)
            view.set_geometry((grid.shape[h], grid.shape[v]),
                              (grid.voxel_mm[h], grid.voxel_mm[v]))
            view.set_labels(self.radiological)
            view.overlay.clear()
        low, high = _robust_range(volume.frame(0))
        self.colorbar.setLevels((low, high))
        self.colorbar.setImageItem([view.base for view in self.planes]
                                   + [self.lightbox_view.base])
        self.overlay_bar.setVisible(False)
        self._after_layers_changed()

    def _set_overlay(self, volume) -> None:
        with self.model.lock:
            self.model.set_overlay(volume)
        self._generation += 1
        magnitude = np.abs(volume.frame(0))
        low, _ = _robust_range(magnitude)
        high = float(magnitude.max()) if magnitude.max() > low else low + 1.0
        self.overlay_bar.setVisible(True)
        self.set_overlay_style(threshold=float(low), vmax=high)
        self._after_layers_changed()

    def _after_layers_changed(self) -> None:
        self._clear_rois()
        timed = (self.model.functional or self.model.base).tr_s is not None
        self.course_plot.setLabel("bottom", "time (s)" if timed else "frame")
        self.time_slider.blockSignals(True)
        self.time_slider.setMaximum(self.model.n_frames - 1)
        self.time_slider.setValue(self.model.t)
        self.time_slider.blockSignals(False)
        self._request_redraw()

    def _fail(self, title: str, message: str) -> bool:
        if self._host is not None:
            self._host.show_error(title, message)
        self.info.setText(message)
        return False

    # -- interaction -------------------------------------------------------------------------

    def set_cursor(self, display) -> None:
        """Move the crosshair to display indices (R, A, S order of the base grid)."""
        if self.model.base is None:
            return
        self.model.set_cursor(display)
        self._show_crosshair()
        self._request_redraw()

    def set_time(self, t: int) -> None:
        if self.model.base is None:
            return
        self.model.t = int(np.clip(t, 0, self.model.n_frames - 1))
        if self.time_slider.value() != self.model.t:
            self.time_slider.setValue(self.model.t)  # comes back here once, unchanged
        self.time_line.setPos(self._time_axis()[self.model.t])
        self._request_redraw(time_course=False)

    def set_radiological(self, on: bool) -> None:
        self.radiological = bool(on)
        if self.radiological_box.isChecked() != self.radiological:
            self.radiological_box.setChecked(self.radiological)
        for view in self.planes:
            view.set_labels(self.radiological)
        if self.last_result is not None:
            self._draw(self.last_result)

    def set_lightbox(self, on: bool) -> None:
        self.lightbox = bool(on)
        if self.lightbox_box.isChecked() != self.lightbox:
            self.lightbox_box.setChecked(self.lightbox)
        self.stack.setCurrentIndex(1 if self.lightbox else 0)
        self._request_redraw(time_course=False)

    def set_3d(self, on: bool) -> bool:
        """Show the vispy volume rendering in place of the slices (False: no OpenGL here)."""
        if self.render_box.isChecked() != bool(on):
            self.render_box.setChecked(bool(on))
        if not on:
            self.stack.setCurrentIndex(1 if self.lightbox else 0)
            return True
        if self.volume_view is None:
            try:
                from panels.fmri.volume3d import VolumeRenderView

                self.volume_view = VolumeRenderView()
            except Exception as exc:  # no OpenGL, no vispy backend: the 2-D views remain
                self.render_box.setChecked(False)
                return self._fail("3-D view unavailable", f"{type(exc).__name__}: {exc}")
            self.stack.addWidget(self.volume_view)
        self.stack.setCurrentWidget(self.volume_view)
        self._request_redraw(time_course=False)
        return True

    def set_overlay_style(self, **changes) -> None:
        """Threshold (|value| below it is transparent), vmax, colour map, opacity (0-1)."""
        values = {**self.style_overlay.__dict__, **changes}
        self.style_overlay = OverlayStyle(**values)
        for widget, value in ((self.threshold_box, self.style_overlay.threshold),
                              (self.opacity_slider, round(100 * self.style_overlay.opacity))):
            widget.blockSignals(True)
            widget.setValue(value)
            widget.blockSignals(False)
        self.colormap_box.blockSignals(True)
        self.colormap_box.setCurrentText(self.style_overlay.colormap)
        self.colormap_box.blockSignals(False)
        self.overlay_bar.setColorMap(pg.colormap.get(self.style_overlay.colormap))
        self.overlay_bar.setLevels((self.style_overlay.threshold, self.style_overlay.vmax))
        self._request_redraw(time_course=False)

    def set_playing(self, on: bool) -> None:
        if self.play_button.isChecked() != bool(on):
            self.play_button.setChecked(bool(on))
        if on and self.model.n_frames > 1:
            self._play_timer.start(1000 // self.fps_box.value())
            self.play_button.setText("Pause")
        else:
            self._play_timer.stop()
            self.play_button.setText("Play")

    def _set_fps(self, fps: int) -> None:
        if self._play_timer.isActive():
            self._play_timer.start(1000 // fps)

    def _advance(self) -> None:
        if self.slicer.idle():  # playing never queues up frames the worker has not drawn
            self.set_time((self.model.t + 1) % self.model.n_frames)

    def _on_point(self, plane: int, pos: QPointF) -> None:
        if self.model.grid is None:
            return
        view = self.planes[plane]
        h_axis, v_axis = plane_axes(plane)
        h = int(np.floor(pos.x() / view.voxel_mm[0]))
        v = int(np.floor(pos.y() / view.voxel_mm[1]))
        if self.radiological and h_axis == 0:
            h = self.model.grid.shape[0] - 1 - h
        cursor = list(self.model.cursor)
        cursor[h_axis], cursor[v_axis] = h, v
        self.set_cursor(cursor)

    def _on_lightbox_point(self, _plane: int, pos: QPointF) -> None:
        grid = self.model.grid
        if grid is None or self.lightbox_view.size_mm == (1.0, 1.0):
            return
        tile_w, tile_h = grid.shape[0] * grid.voxel_mm[0], grid.shape[1] * grid.voxel_mm[1]
        columns, rows, indices = self._lightbox_layout()
        column, row = int(pos.x() // tile_w), rows - 1 - int(pos.y() // tile_h)
        n = row * columns + column
        if not (0 <= column < columns and 0 <= n < len(indices)):
            return
        h = int((pos.x() - column * tile_w) // grid.voxel_mm[0])
        v = int((pos.y() - (rows - 1 - row) * tile_h) // grid.voxel_mm[1])
        if self.radiological:
            h = grid.shape[0] - 1 - h
        self.set_cursor((h, v, int(indices[n])))

    def _lightbox_layout(self) -> tuple[int, int, np.ndarray]:
        count = min(16, self.model.grid.shape[2])
        indices = np.linspace(0, self.model.grid.shape[2] - 1, count).round().astype(int)
        columns = int(np.ceil(np.sqrt(count)))
        return columns, int(np.ceil(count / columns)), indices

    # -- off-thread work ---------------------------------------------------------------------

    def _request_redraw(self, time_course: bool = True) -> None:
        self._want_time_course = self._want_time_course or time_course
        if not self._render_timer.isActive():
            self._render_timer.start()

    def _submit_render(self) -> None:
        if self.model.base is None:
            return
        model, state, style = self.model, self.model.snapshot(self.lightbox), self.style_overlay
        generation = self._generation

        def render() -> dict:
            result = model.render(state)
            result["generation"] = generation
            result["overlay_rgba"] = [None if o is None else colourise(o, style)
                                      for _, o in result["planes"]]
            if result["lightbox"] is not None and result["lightbox"][1] is not None:
                result["lightbox_rgba"] = colourise(result["lightbox"][1], style)
            return result

        self.slicer.submit("slices", render)
        if self.render_box.isChecked() and self.volume_view is not None:
            grid, base = self.model.grid, self.model.base

            def whole_frame():
                with model.lock:
                    return generation, grid.display_volume(base, state.t)

            self.slicer.submit("volume3d", whole_frame)
        if self._want_time_course:
            self._want_time_course = False
            self._submit_time_course()

    def _submit_time_course(self) -> None:
        voxel, volume, model = self.model.functional_voxel(), self.model.functional, self.model
        generation = self._generation
        if voxel is None:
            self.time_course = None
            self.course_curve.setData([], [])
            return

        def course() -> tuple[int, np.ndarray]:
            with model.lock:
                return generation, volume.time_course(voxel)

        self.slicer.submit("timecourse", course)

    def _on_finished(self, kind: str, result, error) -> None:
        if error is not None:
            self._fail("fMRI viewer", str(error))
            return
        if kind == "slices" and result["generation"] == self._generation:
            self.last_result = result
            self._draw(result)
        elif kind == "timecourse" and result[0] == self._generation:
            self.time_course = result[1]
            self.course_curve.setData(self._time_axis(), self.time_course)
        elif kind == "volume3d" and result[0] == self._generation:
            self.volume_view.set_volume(result[1], self.model.grid.voxel_mm,
                                        self.colorbar.levels())
        elif kind == "rois" and result[0] == self._generation:
            self._show_rois(*result[1:])

    def _draw(self, result: dict) -> None:
        levels = self.colorbar.levels()
        for view, (base, _), rgba in zip(self.planes, result["planes"], result["overlay_rgba"],
                                         strict=True):
            if self.radiological and plane_axes(view.plane)[0] == 0:
                base, rgba = base[::-1], None if rgba is None else rgba[::-1]
            view.set_images(base, rgba, levels)
        if result["lightbox"] is not None:
            self._draw_lightbox(result, levels)
        self._show_crosshair()
        self._show_info(result)

    def _draw_lightbox(self, result: dict, levels) -> None:
        grid, view = self.model.grid, self.lightbox_view
        base, _ = result["lightbox"]
        columns, rows, _ = self._lightbox_layout()
        if view.size_mm != (base.shape[0] * grid.voxel_mm[0], base.shape[1] * grid.voxel_mm[1]):
            view.set_geometry(base.shape, grid.voxel_mm[:2])
        rgba = result.get("lightbox_rgba")
        if self.radiological:  # each tile flips on its own: tiles keep their order
            base = _flip_tiles(base, columns, grid.shape[0])
            rgba = None if rgba is None else _flip_tiles(rgba, columns, grid.shape[0])
        view.set_images(base, rgba, levels)
        for line in view.lines:
            line.setVisible(False)

    def _show_crosshair(self) -> None:
        cursor = self.model.cursor
        for view in self.planes:
            h_axis, v_axis = plane_axes(view.plane)
            h = cursor[h_axis]
            if self.radiological and h_axis == 0:
                h = self.model.grid.shape[0] - 1 - h
            view.set_crosshair(h, cursor[v_axis])

    def _show_info(self, result: dict) -> None:
        """Voxel, world mm and values where the drawn result was sliced (the cursor may have
        moved on since)."""
        cursor = np.asarray(result["state"].cursor)
        ijk, (x, y, z) = self.model.grid.to_file(cursor), self.model.grid.world(cursor)
        text = (f"voxel ({ijk[0]}, {ijk[1]}, {ijk[2]})   world ({x:.1f}, {y:.1f}, {z:.1f}) mm   "
                f"value {result['value']:.4g}")
        if result["overlay_value"] is not None:
            text += f"   overlay {result['overlay_value']:.4g}"
        tr = (self.model.functional or self.model.base).tr_s
        time_text = f"t = {self.model.t}" + (f" ({self.model.t * tr:.2f} s)" if tr else "")
        self.time_label.setText(time_text)
        self.info.setText(f"{text}   {time_text}")

    def _time_axis(self) -> np.ndarray:
        volume = self.model.functional or self.model.base
        tr = volume.tr_s if volume is not None and volume.tr_s else 1.0
        return np.arange(self.model.n_frames) * tr

    # -- ROIs --------------------------------------------------------------------------------

    def add_sphere_roi(self, radius_mm: float) -> bool:
        try:
            with self.model.lock:
                self.model.add_sphere(radius_mm)
        except ValueError as exc:
            return self._fail("Cannot add the ROI", str(exc))
        self._submit_rois()
        return True

    def load_label_image(self, path) -> bool:
        try:
            labels = open_volume(path, index=False)
            with self.model.lock:
                self.model.add_label_image(labels)
            labels.close()
        except (FormatError, ValueError) as exc:
            return self._fail("Cannot use the label image", str(exc))
        self._submit_rois()
        return True

    def _submit_rois(self) -> None:
        model, rois, generation = self.model, list(self.model.rois), self._generation

        def analyse():
            with model.lock:
                courses = roi_time_courses(model.functional, rois)
            return generation, [r.name for r in rois], courses, connectivity(courses)

        self.slicer.submit("rois", analyse)

    def _show_rois(self, names: list[str], courses: np.ndarray, matrix: np.ndarray) -> None:
        for curve in self.roi_curves:
            self.course_plot.removeItem(curve)
        axis = self._time_axis()
        self.roi_curves = [self.course_plot.plot(axis, courses[:, n], name=f"{n + 1}: {name}",
                                                 pen=pg.mkPen(pg.intColor(n, hues=9), width=1))
                           for n, name in enumerate(names[:12])]
        self.fc_matrix = matrix
        if len(names) > 1:  # ROIs by number on the axes; the legend names them
            labels = [str(n + 1) for n in range(len(names))]
            self.fc_view.set_spec(heatmap("Functional connectivity (Pearson r)", matrix,
                                          xlabels=labels, ylabels=labels, zlabel="r",
                                          colormap="CET-D1", symmetric=True))
            self.fc_view.setVisible(True)

    def _clear_rois(self) -> None:
        for curve in self.roi_curves:
            self.course_plot.removeItem(curve)
        self.roi_curves = []
        self.fc_matrix = None
        self.fc_view.setVisible(False)

    # -- export ------------------------------------------------------------------------------

    def export_figure(self, path) -> Path:
        """The slices, time course and FC matrix as shown, to PNG or SVG (by the suffix)."""
        target = Path(path)
        fmt = target.suffix.lower().lstrip(".")
        if fmt == "png":
            if not self.figure.grab().save(str(target), "PNG"):
                raise OSError(f"{target}: could not write the PNG")
            return target
        if fmt != "svg":
            raise ValueError(f"{target}: export as .png or .svg")
        from PySide6.QtSvg import QSvgGenerator

        generator = QSvgGenerator()
        generator.setFileName(str(target))
        generator.setSize(self.figure.size())
        generator.setViewBox(self.figure.rect())
        generator.setTitle("fMRI 4D viewer")
        source = self.model.base.path.name if self.model.base is not None else ""
        generator.setDescription(f"Studio fMRI viewer: {source}, t = {self.model.t}")
        painter = QPainter(generator)
        self.figure.render(painter, QPoint(0, 0))
        painter.end()
        return target

    # -- dialogs -----------------------------------------------------------------------------

    def _choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a NIfTI image", "", NIFTI_FILTER)
        if path:
            self.open_file(path)

    def _choose_overlay(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Overlay a NIfTI image", "", NIFTI_FILTER)
        if path:
            self.open_overlay(path)

    def _choose_labels(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Label image (atlas)", "", NIFTI_FILTER)
        if path:
            self.load_label_image(path)

    def _choose_export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export the figure", "fmri.png",
                                              "PNG (*.png);;SVG (*.svg)")
        if path:
            self.export_figure(path)

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        self._play_timer.stop()
        self._render_timer.stop()
        self.slicer.stop()
        with self.model.lock:
            self.model.close()


def _robust_range(values: np.ndarray) -> tuple[float, float]:
    """The 2nd-98th percentile of the finite values (a sensible first contrast)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    sample = finite if finite.size <= 200_000 else finite[:: finite.size // 200_000]
    low, high = np.percentile(sample, [2, 98])
    return float(low), float(high if high > low else low + 1)


def _flip_tiles(image: np.ndarray, columns: int, tile_width: int) -> np.ndarray:
    out = image.copy()
    for column in range(columns):
        part = slice(column * tile_width, (column + 1) * tile_width)
        out[part] = image[part][::-1]
    return out
