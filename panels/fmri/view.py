"""The fMRI 4D viewer: three linked orthogonal slices (or a lightbox), a time axis, the voxel
and ROI time courses and the ROIs' connectivity matrix, FSLeyes-style.

Every image is computed by ``ViewerModel.render`` on the ``Slicer`` thread from a snapshot of
the cursor and time; sliders and drags only schedule a redraw (at most one per
``THROTTLE_MS``), so scrubbing never blocks the window. Images are pyqtgraph ``ImageItem``s
in plain ``ViewBox``es (not ``ImageView``: see ARCHITECTURE.md "Pitfalls").

A BrainWorld generation (``brainworld.generate``'s NIfTI) opened over a real run becomes a
generated layer: a second row of planes under the real ones, on the same cursor and the same
clock (its sidecar says which real frame it follows), its voxel time course beside the real
one, and its quality-check plots; chunks are kept or discarded and the time range cropped
through the host's undo stack (a layer replaced or closed takes its steps off it, keeping its
autosave), and a region (a sphere or box at the cursor, or an atlas's labels) masked. The
time axis exports as MP4 (imageio-ffmpeg), figures as PNG, SVG or PDF.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QGraphicsEllipseItem,
    QHBoxLayout,
    QLabel,
    QProgressBar,
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
from panels.fmri.generated import (
    CropFrames,
    GeneratedLayer,
    GeneratedLayers,
    MaskedVolume,
    MaskRegion,
    SetChunkKept,
    checked_mask,
    decode,
    is_generated,
    write_layer,
)
from panels.fmri.model import (
    OVERLAY_COLORMAPS,
    ViewerModel,
    connectivity,
    orientation_labels,
    plane_axes,
    roi_time_courses,
    sphere_section,
)
from panels.fmri.slicer import Slicer
from panels.widgets.jobs import PanelJobs
from studio.widgets.figure_export import DEFAULT_DPI, ExportChoice, ask_export, export_widget
from studio.widgets.plot_view import PlotSpecView

THROTTLE_MS = 15
SLICE_ROW_MIN_PX = 120  # a row of slices: two fit a 1280x800 window beside the runs dock
PREPARATION_POLL_MS = 250  # how often the background indexing/conversion bar is updated
BASE_COLORMAP = "CET-L1"  # linear grey
NIFTI_FILTER = "NIfTI images (*.nii *.nii.gz);;All files (*)"
GENERATED_PEN = "#D55E00"
MASK_CHOICES = {"sphere at cursor": "sphere", "box at cursor": "box",
                "label image…": "labels"}
ROI_OUTLINE_WIDTH = 2  # pixels, whatever the zoom


def roi_colour(n: int) -> QColor:
    """The n-th ROI's colour: its time course, and its outline on the slices, share it."""
    return pg.intColor(n, hues=9)


class MovieExportError(RuntimeError):
    """The MP4 could not be written (typically: imageio-ffmpeg is not installed)."""


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
        self.title = pg.TextItem("", color="#ffffff", anchor=(0, 0))  # "real"/"generated"
        for label in (*self.labels.values(), self.title):
            label.setZValue(2)
            self.box.addItem(label, ignoreBounds=True)
        self.size_mm = (1.0, 1.0)
        self.voxel_mm = (1.0, 1.0)
        self.outlines: list[QGraphicsEllipseItem] = []

    def set_geometry(self, shape: tuple[int, int], voxel_mm: tuple[float, float]) -> None:
        self.voxel_mm = voxel_mm
        self.size_mm = (shape[0] * voxel_mm[0], shape[1] * voxel_mm[1])
        rect = QRectF(0, 0, *self.size_mm)
        width, height = self.size_mm
        for edge, (x, y) in {"left": (0, height / 2), "right": (width, height / 2),
                             "bottom": (width / 2, 0), "top": (width / 2, height)}.items():
            self.labels[edge].setPos(x, y)
        self.title.setPos(0, height)
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

    def set_outlines(self, circles: list[tuple[float, float, float, QColor]]) -> None:
        """Sphere ROIs' cross-sections as circles ``(x mm, y mm, radius mm, colour)`` in the
        view's coordinates; the previous ones are removed."""
        for item in self.outlines:
            self.box.removeItem(item)
        self.outlines = []
        for x, y, radius, colour in circles:
            item = QGraphicsEllipseItem(x - radius, y - radius, 2 * radius, 2 * radius)
            item.setPen(pg.mkPen(colour, width=ROI_OUTLINE_WIDTH))  # cosmetic: zoom-proof
            item.setZValue(1.5)  # over the overlay, under the orientation letters
            self.box.addItem(item, ignoreBounds=True)
            self.outlines.append(item)


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
        self.layers = GeneratedLayers()
        self.layers.listeners.append(self._on_layers_edited)
        self.active_layer: GeneratedLayer | None = None
        self.generated_course: np.ndarray | None = None
        self.generated_voxel: np.ndarray | None = None   # where generated_course was read
        self._render_timer = QTimer(self, singleShot=True, interval=THROTTLE_MS)
        self._render_timer.timeout.connect(self._submit_render)
        self._play_timer = QTimer(self)
        self._play_timer.timeout.connect(self._advance)
        self._preparation_timer = QTimer(self, interval=PREPARATION_POLL_MS)
        self._preparation_timer.timeout.connect(self._show_preparation)
        self._slow_reported: set[Path] = set()   # files whose background pass failed
        self._build()
        self.jobs: PanelJobs | None = None   # the regenerations this panel started
        if host is not None:
            self.jobs = PanelJobs(host, self.info.setText, on_result=self._on_result)

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
        self.ortho.setMinimumHeight(SLICE_ROW_MIN_PX)
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
        self.compare_planes = [PlaneView(p, self._on_point) for p in range(3)]
        for view in self.compare_planes:
            view.box.setVisible(False)
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
        self.generated_curve = self.course_plot.plot(
            [], [], pen=pg.mkPen(GENERATED_PEN, width=2, style=Qt.PenStyle.DashLine))
        self.time_line = pg.InfiniteLine(angle=90, pen=pg.mkPen("#E69F00"))
        self.course_plot.addItem(self.time_line)
        self.roi_curves: list[pg.PlotDataItem] = []
        self.fc_view = PlotSpecView()
        self.fc_view.setVisible(False)
        self.qc_view = PlotSpecView()
        self.qc_view.setVisible(False)
        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.addWidget(self.course_plot)
        lower.addWidget(self.fc_view)
        lower.addWidget(self.qc_view)
        upper = QSplitter(Qt.Orientation.Vertical)
        upper.addWidget(self.stack)
        upper.addWidget(lower)
        upper.setSizes([600, 220])
        figure_layout.addWidget(upper)
        layout.addWidget(self.figure, 1)
        layout.addWidget(self.info)
        layout.addWidget(self._build_generated_bar())
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

    def _build_generated_bar(self) -> QWidget:
        """Layer choice, keep/discard the chunk under the clock, crop, QC plot, save; the
        masking controls on a second row, so the panel still fits a 1280-pixel screen."""
        self.generated_bar = QWidget()
        rows = QVBoxLayout(self.generated_bar)
        rows.setContentsMargins(0, 0, 0, 0)
        bar, mask_bar = QHBoxLayout(), QHBoxLayout()
        rows.addLayout(bar)
        rows.addLayout(mask_bar)
        self.layer_box = QComboBox()
        self.layer_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.layer_box.setMinimumContentsLength(28)  # run ids and BIDS names are long
        self.layer_box.currentTextChanged.connect(self.set_active_layer)
        self.chunk_button = QPushButton("Discard chunk")
        self.chunk_button.clicked.connect(self.toggle_chunk)
        self.crop_start = QSpinBox(minimum=0, maximum=0)
        self.crop_stop = QSpinBox(minimum=1, maximum=1)
        crop_button = QPushButton("Crop")
        crop_button.clicked.connect(lambda: self.crop_layer(self.crop_start.value(),
                                                            self.crop_stop.value()))
        self.mask_shape_box = QComboBox()
        self.mask_shape_box.addItems(list(MASK_CHOICES))
        self.mask_shape_box.setToolTip("Region: a sphere or a cube (half-side) of the ROI "
                                       "radius at the cursor, or the labels of an atlas")
        self.mask_clear_box = QComboBox()
        self.mask_clear_box.addItems(["clear outside", "clear inside"])
        self.mask_fill_box = QComboBox()
        self.mask_fill_box.addItems(["to 0", "to NaN"])
        mask_button = QPushButton("Mask")
        mask_button.clicked.connect(self._choose_mask)
        self.qc_box = QComboBox()
        self.qc_box.currentTextChanged.connect(self._show_qc)
        save_button = QPushButton("Save kept frames…")
        save_button.clicked.connect(self._choose_save_layer)
        regenerate_button = QPushButton("Regenerate with T1…")
        regenerate_button.setToolTip("Run brainworld.generate again from the same checkpoint "
                                     "and chunk, conditioned on another anatomy (cancel the "
                                     "file dialog: the template)")
        regenerate_button.clicked.connect(self._choose_regenerate)
        for widget in (QLabel("Generated layer"), self.layer_box, self.chunk_button,
                       QLabel("frames"), self.crop_start, QLabel("to"), self.crop_stop,
                       crop_button, save_button, regenerate_button):
            bar.addWidget(widget)
        for widget in (QLabel("Mask region"), self.mask_shape_box, self.mask_clear_box,
                       self.mask_fill_box, mask_button, QLabel("quality check"), self.qc_box):
            mask_bar.addWidget(widget)
        bar.addStretch(1)
        mask_bar.addStretch(1)
        self.generated_bar.setVisible(False)
        return self.generated_bar

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
        self.preparation_label = QLabel()
        self.preparation_bar = QProgressBar(maximumWidth=160)
        for widget in (self.play_button, self.time_slider, self.fps_box, self.time_label,
                       self.preparation_label, self.preparation_bar):
            bar.addWidget(widget, 1 if widget is self.time_slider else 0)
        self.preparation_label.setVisible(False)
        self.preparation_bar.setVisible(False)
        return bar

    def sizeHint(self) -> QSize:
        return QSize(1100, 800)

    # -- opening -----------------------------------------------------------------------------

    def open_file(self, path) -> bool:
        """A NIfTI file or a BIDS folder. A 4-D file opened over a 3-D image becomes its
        overlay (drop a bold run on a T1); anything else replaces what is shown."""
        path = Path(path)
        if path.is_file() and is_generated(path) and self.model.functional is not None:
            return self.open_generated(path)
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
        self._close_layers()
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
        self._show_preparation()
        self._preparation_timer.start()
        timed = (self.model.functional or self.model.base).tr_s is not None
        self.course_plot.setLabel("bottom", "time (s)" if timed else "frame")
        self.time_slider.blockSignals(True)
        self.time_slider.setMaximum(self.model.n_frames - 1)
        self.time_slider.setValue(self.model.t)
        self.time_slider.blockSignals(False)
        self._request_redraw()

    def _show_preparation(self) -> None:
        """A progress bar while a .nii.gz is indexed or converted into the workspace in the
        background (its late frames are slow until then); a failed pass is said once."""
        layer = None if self.active_layer is None else self.active_layer.volume
        volumes = [v for v in (self.model.base, self.model.overlay, layer) if v is not None]
        for volume in volumes:
            if volume.index_error is not None and volume.path not in self._slow_reported:
                self._slow_reported.add(volume.path)
                self._fail("Frames stay slow to reach", f"{volume.path}: preparing quick "
                           f"frame access failed ({volume.index_error}); frames are read "
                           "from the start of the gzip stream instead")
        pending = [v for v in volumes if v.preparation_progress() != 1.0]
        self.preparation_label.setVisible(bool(pending))
        self.preparation_bar.setVisible(bool(pending))
        if not pending:
            self._preparation_timer.stop()
            return
        volume = pending[0]
        progress = volume.preparation_progress()
        doing = "indexing" if volume.converting_to is None else "decompressing into the workspace"
        self.preparation_label.setText(f"{doing} {volume.path.name} for quick frames")
        self.preparation_bar.setRange(0, 0 if progress is None else 100)  # 0, 0: busy
        self.preparation_bar.setValue(0 if progress is None else round(100 * progress))

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
        if self.active_layer is not None:
            self._on_layers_edited()
        self._request_redraw(time_course=False)

    def set_radiological(self, on: bool) -> None:
        self.radiological = bool(on)
        if self.radiological_box.isChecked() != self.radiological:
            self.radiological_box.setChecked(self.radiological)
        for view in self.planes + self.compare_planes:
            view.set_labels(self.radiological)
        if self.last_result is not None:
            self._draw(self.last_result)
        elif self.model.grid is not None:  # nothing drawn yet: crosshair and ROIs still flip
            self._show_crosshair()

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
        model, style = self.model, self.style_overlay
        state = self.model.snapshot(self.lightbox, self._compare_t())
        generation = self._generation

        def render() -> dict:
            result = model.render(state)
            result["generation"] = generation
            result["overlay_rgba"] = [None if o is None else colourise(o, style)
                                      for _, o in result["planes"]]
            if result["lightbox"] is not None and result["lightbox"][1] is not None:
                result["lightbox_rgba"] = colourise(result["lightbox"][1], style)
            result["compare_rgba"] = [None if o is None else colourise(o, style)
                                      for _, o in result["compare"] or []]
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
        generation, layer = self._generation, self.active_layer
        if voxel is None:
            self._clear_time_course("no time course: the cursor is outside the functional "
                                    "run" if volume is not None else None)
            return
        self.course_plot.setTitle(None)
        world = volume.voxel_to_world(voxel)

        def course() -> tuple[int, np.ndarray, np.ndarray | None, np.ndarray | None]:
            with model.lock:
                real = volume.time_course(voxel)
                generated = ijk = None
                if layer is not None:
                    ijk = np.rint(layer.volume.world_to_voxel(world)).astype(int)
                    if ((ijk >= 0) & (ijk < np.asarray(layer.volume.spatial_shape))).all():
                        generated = layer.volume.time_course(ijk)
                return generation, real, generated, ijk

        self.slicer.submit("timecourse", course)

    def _clear_time_course(self, reason: str | None) -> None:
        """No curve rather than the previous cursor's, and the reason as the plot's title."""
        self.time_course = self.generated_course = None
        self.course_curve.setData([], [])
        self._draw_generated_course()
        self.course_plot.setTitle(reason)

    def _on_finished(self, kind: str, result, error) -> None:
        if kind == "timecourse" and error is not None:
            # said in the plot and the info line, not a message box per voxel dragged over
            self._clear_time_course(f"no time course here: {getattr(error, 'problem', error)}")
            self.info.setText(f"no time course at the cursor: {error}")  # names the file
            return
        if error is not None:
            self._fail("fMRI viewer", str(error))
            return
        if kind == "slices" and result["generation"] == self._generation:
            self.last_result = result
            self._draw(result)
        elif kind == "timecourse" and result[0] == self._generation:
            self.time_course, self.generated_course = result[1], result[2]
            self.generated_voxel = result[3]
            axis = self._time_axis()
            self.course_curve.setData(axis[:len(self.time_course)], self.time_course)
            self._draw_generated_course()
        elif kind == "volume3d" and result[0] == self._generation:
            self.volume_view.set_volume(result[1], self.model.grid.voxel_mm,
                                        self.colorbar.levels())
        elif kind == "rois" and result[0] == self._generation:
            self._show_rois(*result[1:])

    def _draw_generated_course(self) -> None:
        """The generated time course on the real clock, edited-out frames as gaps, a masked
        voxel at its fill value."""
        layer, course = self.active_layer, self.generated_course
        if layer is None or course is None:
            self.generated_curve.setData([], [])
            return
        course = layer.masked_course(self.generated_voxel, course)
        tr = self._time_axis()[1] if self.model.n_frames > 1 else 1.0
        shown = np.array([course[g] if layer.frame_at(g + layer.first_frame) is not None
                          else np.nan for g in range(len(course))], dtype=float)
        self.generated_curve.setData((np.arange(len(course)) + layer.first_frame) * tr, shown,
                                     connect="finite")

    def _draw(self, result: dict) -> None:
        levels = self.colorbar.levels()
        rows = [(self.planes, result["planes"], result["overlay_rgba"])]
        if result.get("compare"):
            rows.append((self.compare_planes, result["compare"], result["compare_rgba"]))
        for views, images, overlays in rows:
            for view, (base, _), rgba in zip(views, images, overlays, strict=True):
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
        for view in self.planes + self.compare_planes:
            h_axis, v_axis = plane_axes(view.plane)
            h = cursor[h_axis]
            if self.radiological and h_axis == 0:
                h = self.model.grid.shape[0] - 1 - h
            view.set_crosshair(h, cursor[v_axis])
        self._show_roi_outlines()

    def _show_info(self, result: dict) -> None:
        """Voxel, world mm and values where the drawn result was sliced (the cursor may have
        moved on since)."""
        cursor = np.asarray(result["state"].cursor)
        ijk, (x, y, z) = self.model.grid.to_file(cursor), self.model.grid.world(cursor)
        text = (f"voxel ({ijk[0]}, {ijk[1]}, {ijk[2]})   world ({x:.1f}, {y:.1f}, {z:.1f}) mm   "
                f"value {result['value']:.4g}")
        if result["overlay_value"] is not None:
            text += f"   overlay {result['overlay_value']:.4g}"
        elif self.model.overlay is not None:  # its grids often cover only part of the T1
            text += "   overlay: none here (outside its field of view)"
        tr = (self.model.functional or self.model.base).tr_s
        time_text = f"t = {self.model.t}" + (f" ({self.model.t * tr:.2f} s)" if tr else "")
        if self.active_layer is not None:
            frame = result["state"].compare_t
            time_text += ("   generated: none here" if frame is None
                          else f"   generated frame {frame}")
        self.time_label.setText(time_text)
        self.info.setText(f"{text}   {time_text}")

    def _time_axis(self) -> np.ndarray:
        volume = self.model.functional or self.model.base
        tr = volume.tr_s if volume is not None and volume.tr_s else 1.0
        return np.arange(self.model.n_frames) * tr

    # -- generated layers ----------------------------------------------------------------------

    def open_generated(self, path) -> bool:
        """A generated run beside the real one: second row of planes, same cursor and clock;
        its autosaved edits come back."""
        path = Path(path)
        if self.model.functional is None:
            return self._fail("Cannot compare", "open the real 4-D run first, then the "
                                                "generated one")
        try:
            volume = open_volume(path, convert_dir=conversion_cache(), nan=self._nan())
        except (FormatError, ValueError) as exc:
            return self._fail("Cannot open the generated run", str(exc))
        layer = GeneratedLayer.open(path, volume)
        replaced = [existing for existing in self.layers.layers if existing.path == path]
        for old in replaced:
            old.volume.close()
        self._forget_edits(replaced)  # its saved edits are replayed onto the new layer next
        self.layers.add(layer)
        restore = getattr(self._host, "restore_edits", None)
        if callable(restore):
            try:  # the saved edits are this file's, whatever name the layer had then
                restore(layer.document, self.layers,
                        lambda data: decode({**data, "layer": layer.name}))
            except (ValueError, KeyError, IndexError) as exc:  # e.g. a mask's atlas is gone
                self._fail("Some edits of the generated run were not replayed", str(exc))
        self.layer_box.blockSignals(True)
        self.layer_box.clear()
        self.layer_box.addItems([existing.name for existing in self.layers.layers])
        self.layer_box.blockSignals(False)
        self.set_active_layer(layer.name)
        return True

    def set_active_layer(self, name: str) -> None:
        if not name:
            return
        layer = self.layers.get(name)
        self.active_layer = layer
        if self.layer_box.currentText() != name:
            self.layer_box.setCurrentText(name)
        with self.model.lock:
            self.model.set_compare(MaskedVolume(layer))
            self.model.clock_frames = layer.first_frame + layer.volume.n_frames
        self._generation += 1
        self._show_compare_row(True)
        for spin in (self.crop_start, self.crop_stop):
            spin.setMaximum(layer.volume.n_frames)
        self.crop_start.setMaximum(layer.volume.n_frames - 1)
        self.qc_box.blockSignals(True)
        self.qc_box.clear()
        self.qc_specs = layer.qc_specs()
        self.qc_box.addItems(list(self.qc_specs))
        self.qc_box.blockSignals(False)
        self._show_qc(self.qc_box.currentText())
        self.generated_bar.setVisible(True)
        self._on_layers_edited()
        self._after_layers_changed()

    def _show_compare_row(self, shown: bool) -> None:
        """The generated row under the real one; each row is titled while both are shown.
        Each row keeps ``SLICE_ROW_MIN_PX`` of height (the runs dock gives way), so a second
        row never squeezes the slices to thumbnails under their orientation letters."""
        self.ortho.setMinimumHeight(SLICE_ROW_MIN_PX * (2 if shown else 1))
        grid = self.model.grid
        self.planes[0].title.setText("real" if shown else "")
        self.compare_planes[0].title.setText("generated" if shown else "")
        legend = self.course_plot.plotItem.legend
        legend.removeItem(self.generated_curve)  # listed only while there is a layer
        if shown:
            legend.addItem(self.generated_curve, "generated")
        for view in self.compare_planes:
            in_layout = view.box.scene() is not None
            if shown and not in_layout:
                self.ortho.addItem(view.box, row=1, col=view.plane)
            elif not shown and in_layout:
                self.ortho.removeItem(view.box)
            view.box.setVisible(shown)
            if shown and grid is not None:
                h, v = plane_axes(view.plane)
                view.set_geometry((grid.shape[h], grid.shape[v]),
                                  (grid.voxel_mm[h], grid.voxel_mm[v]))
                view.set_labels(self.radiological)

    def _show_qc(self, name: str) -> None:
        spec = getattr(self, "qc_specs", {}).get(name)
        self.qc_view.setVisible(spec is not None)
        if spec is not None:
            self.qc_view.set_spec(spec)

    def _compare_t(self) -> int | None:
        return None if self.active_layer is None else self.active_layer.frame_at(self.model.t)

    def toggle_chunk(self) -> bool:
        """Discard the chunk under the clock, or keep it again if it was discarded."""
        layer = self.active_layer
        chunk = None if layer is None else layer.chunk_of(self.model.t)
        if chunk is None:
            return self._fail("No generated chunk here", "move the clock into the generated "
                                                         "frames first")
        self._push(SetChunkKept(layer.name, chunk, chunk in layer.discarded))
        return True

    def crop_layer(self, start: int, stop: int) -> bool:
        layer = self.active_layer
        if layer is None:
            return self._fail("No generated layer", "open a generated run first")
        if not 0 <= start < stop <= layer.volume.n_frames:
            return self._fail("Cannot crop", f"frames {start} to {stop} are outside the "
                                             f"{layer.volume.n_frames} generated frames")
        self._push(CropFrames(layer.name, start, stop, layer.crop))
        return True

    def mask_layer(self, mask: dict) -> bool:
        """Clear the voxels outside (or inside) a region of the active layer, to 0 or NaN:
        an undoable edit (see ``generated.checked_mask`` for the region's form)."""
        layer = self.active_layer
        if layer is None:
            return self._fail("No generated layer", "open a generated run first")
        try:
            mask = checked_mask(mask)
            inside = layer.region(mask)
            if inside.all() if mask["clear"] == "outside" else not inside.any():
                return self._fail("Cannot mask", "the region clears no voxel of the layer")
        except ValueError as exc:  # checked before the undo stack applies it
            return self._fail("Cannot mask", str(exc))
        self._push(MaskRegion(layer.name, mask))
        return True

    def mask_at_cursor(self, shape: str, radius_mm: float, clear: str = "outside",
                       fill: str = "zero") -> bool:
        """A sphere of ``radius_mm``, or a box of that half-side, centred on the cursor."""
        if self.model.grid is None:
            return self._fail("Cannot mask", "open a run first")
        centre = self.model.cursor_world().tolist()
        region = ({"centre_mm": centre, "radius_mm": radius_mm} if shape == "sphere" else
                  {"low_mm": [c - radius_mm for c in centre],
                   "high_mm": [c + radius_mm for c in centre]})
        return self.mask_layer({"shape": shape, **region, "clear": clear, "fill": fill})

    def _choose_mask(self) -> None:
        shape = MASK_CHOICES[self.mask_shape_box.currentText()]
        clear = "outside" if self.mask_clear_box.currentIndex() == 0 else "inside"
        fill = "zero" if self.mask_fill_box.currentIndex() == 0 else "nan"
        if shape != "labels":
            self.mask_at_cursor(shape, self.radius_box.value(), clear, fill)
            return
        path, _ = QFileDialog.getOpenFileName(self, "Label image to mask with", "",
                                              NIFTI_FILTER)
        if path:
            self.mask_layer({"shape": "labels", "path": path, "clear": clear, "fill": fill})

    def _push(self, command) -> None:
        if self._host is not None:
            self._host.push_edit(self.active_layer.document, command, self.layers)
        else:
            command.apply(self.layers)

    def _on_layers_edited(self) -> None:
        """After an edit, its undo or its replay: buttons, time course and planes follow."""
        layer = self.active_layer
        if layer is None:
            return
        chunk = layer.chunk_of(self.model.t)
        self.chunk_button.setText("Keep chunk" if chunk in layer.discarded else
                                  "Discard chunk")
        for spin, value in ((self.crop_start, layer.crop[0]), (self.crop_stop, layer.crop[1])):
            spin.blockSignals(True)
            spin.setValue(value)
            spin.blockSignals(False)
        self._draw_generated_course()
        self._request_redraw(time_course=False)

    def save_layer(self, path) -> Path:
        if self.active_layer is None:
            raise ValueError("no generated layer to save")
        return write_layer(self.active_layer, Path(path))

    def regenerate(self, t1=None) -> bool:
        """Swap the conditioning anatomy and regenerate: the result opens as a new layer."""
        layer, real = self.active_layer, self.model.functional
        if layer is None or real is None or self._host is None:
            return self._fail("Cannot regenerate", "open a real run and a generated one (in "
                                                   "Studio, with the engine running)")
        try:
            params, inputs = layer.regenerate_request(real.path, None if t1 is None
                                                      else Path(t1))
        except ValueError as exc:
            return self._fail("Cannot regenerate", str(exc))
        label = f"regenerate {layer.name}" + (f" with {Path(t1).name}" if t1 else "")
        self.info.setText(f"{label}: submitted")
        self.jobs.submit("brainworld.generate", params, inputs, label=label,
                         on_error=lambda message: self._fail("Cannot regenerate", message))
        return True

    def _on_result(self, job: str, method: str, outputs: dict) -> None:
        made = outputs.get("generated")
        if made:
            self.open_generated(Path(self._host.run_dir(job)) / made)

    def _forget_edits(self, dropped: list[GeneratedLayer]) -> None:
        """Dropped layers' steps leave the window's history (their undo would find no layer);
        their autosaved edits stay, replayed when the run is opened again."""
        forget = getattr(self._host, "forget_edits", None)  # no host, or one without history
        for layer in dropped if callable(forget) else ():
            forget(layer.document)

    def _close_layers(self) -> None:
        dropped = list(self.layers.layers)
        with self.model.lock:
            self.model.set_compare(None)
            self.model.clock_frames = 0
            self.layers.close()
        self._forget_edits(dropped)
        self.active_layer = None
        self.generated_course = None
        self.generated_curve.setData([], [])
        self._show_compare_row(False)
        self.qc_view.setVisible(False)
        self.generated_bar.setVisible(False)
        self.layer_box.clear()

    # -- ROIs --------------------------------------------------------------------------------

    def add_sphere_roi(self, radius_mm: float) -> bool:
        try:
            with self.model.lock:
                self.model.add_sphere(radius_mm)
        except ValueError as exc:
            return self._fail("Cannot add the ROI", str(exc))
        self._show_roi_outlines()
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
                                                 pen=pg.mkPen(roi_colour(n), width=1))
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
        self._show_roi_outlines()

    def _show_roi_outlines(self) -> None:
        """Each sphere ROI's cross-section on every orthogonal plane the cursor's slices cut
        it, in its time course's colour and on the side the radiological flip puts it."""
        grid, cursor = self.model.grid, self.model.cursor
        for view in self.planes + self.compare_planes:
            circles = []
            for n, roi in enumerate(self.model.rois if grid is not None else []):
                section = sphere_section(grid, roi, view.plane, cursor[view.plane])
                if section is None:
                    continue
                h, v, radius = section
                if self.radiological and plane_axes(view.plane)[0] == 0:
                    h = grid.shape[0] - 1 - h
                circles.append(((h + 0.5) * view.voxel_mm[0], (v + 0.5) * view.voxel_mm[1],
                                radius, roi_colour(n)))
            view.set_outlines(circles)

    # -- export ------------------------------------------------------------------------------

    def export_figure(self, path, dpi: int = DEFAULT_DPI, caption: bool = False) -> Path:
        """The slices, time course, FC matrix and QC plot drawn for the page at ``dpi`` to
        PNG, SVG or PDF (by the suffix), the information line as an optional caption, with
        what made the picture in the file (``figure_provenance``); or the time axis as an
        MP4 movie."""
        target = Path(path)
        if target.suffix.lower() == ".mp4":
            return self.export_movie(target)
        return export_widget(self.figure, ExportChoice(target, dpi, caption),
                             self.figure_provenance(), caption=self.info.text())

    def figure_provenance(self) -> dict:
        """The files (real run, anatomy, overlay, generated layers) and the view state that
        made the figure: time point and seconds, cursor in voxels and mm, ROIs, display range
        and colour maps; a generated layer's run when it came from one."""
        from engine import provenance

        model = self.model
        sources = [volume.path for volume in (model.base, model.overlay, model.compare)
                   if volume is not None]
        view: dict = {"panel": "fmri", "time_point": model.t}
        if model.base is not None:
            tr = (model.functional or model.base).tr_s
            view["seconds"] = round(model.t * tr, 6) if tr else None
            cursor = np.asarray(model.cursor)
            view["cursor_voxel"] = [int(v) for v in model.grid.to_file(cursor)]
            view["cursor_mm"] = [round(float(v), 3) for v in model.grid.world(cursor)]
            view["display_range"] = [float(v) for v in self.colorbar.levels()]
        view["overlay"] = dict(self.style_overlay.__dict__) if model.overlay is not None else None
        view["rois"] = [{"name": roi.name, "voxels": int(len(roi.voxels)),
                         "centre_mm": roi.centre_mm, "radius_mm": roi.radius_mm}
                        for roi in model.rois]
        runs = []
        if self.active_layer is not None:
            layer = self.active_layer
            view["generated"] = {"layer": layer.name, "first_frame": layer.first_frame,
                                 "discarded_chunks": sorted(layer.discarded),
                                 "crop": list(layer.crop), "masks": len(layer.masks)}
            sources.append(layer.path)
            run_dir = provenance.run_folder(layer.path)
            if run_dir is not None:
                runs.append(provenance.run_entry(run_dir))
        return provenance.record(dict.fromkeys(sources), view=view, runs=runs)

    def export_movie(self, path, fps: int | None = None) -> Path:
        """Every frame of the time axis as drawn (both rows when a generated layer is
        shown), to an H.264 MP4 through imageio-ffmpeg. Rendering runs here, frame by frame,
        from the same model the worker uses; the clock is put back afterwards."""
        try:
            import imageio_ffmpeg
        except ImportError:
            raise MovieExportError("MP4 export needs the imageio-ffmpeg package, which is not "
                                   "installed (pip install imageio-ffmpeg); export PNG, SVG "
                                   "or PDF figures instead") from None
        if self.model.base is None:
            raise MovieExportError("nothing to export: open a run first")
        target = Path(path)
        fps = fps or self.fps_box.value()
        original = self.model.t
        writer = None
        try:
            for t in range(self.model.n_frames):
                self.model.t = t
                with self.model.lock:
                    result = self.model.render(self.model.snapshot(False, self._compare_t()))
                result["overlay_rgba"] = [None if o is None else colourise(o, self.style_overlay)
                                          for _, o in result["planes"]]
                result["compare_rgba"] = [None if o is None else colourise(o, self.style_overlay)
                                          for _, o in result["compare"] or []]
                self._draw(result)
                self.time_line.setPos(self._time_axis()[t])
                frame = _rgb_array(self.figure.grab().toImage())
                if writer is None:
                    height, width = frame.shape[:2]
                    writer = imageio_ffmpeg.write_frames(
                        str(target), (width, height), fps=fps, codec="libx264",
                        pix_fmt_out="yuv420p", macro_block_size=2)
                    writer.send(None)
                writer.send(np.ascontiguousarray(frame[:height, :width]).tobytes())
        finally:
            if writer is not None:
                writer.close()
            self.set_time(original)
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
        """The export dialog (file, DPI, caption); a name ending .mp4 writes the movie."""
        choice = ask_export(self, "Export the figure (or .mp4: the movie)", "fmri.png",
                            self.info.text())
        if choice is not None:
            try:
                self.export_figure(choice.path, choice.dpi, choice.caption)
            except (OSError, ValueError, RuntimeError) as exc:
                self._fail("Export failed", str(exc))

    def _choose_regenerate(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Anatomy (T1) to condition on", "",
                                              NIFTI_FILTER)
        self.regenerate(path or None)

    def _choose_save_layer(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the kept generated frames",
                                              "generated_kept.nii.gz", NIFTI_FILTER)
        if path:
            try:
                self.save_layer(path)
            except (OSError, ValueError) as exc:
                self._fail("Cannot save the layer", str(exc))

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        if self.jobs is not None:
            self.jobs.close()
        self._play_timer.stop()
        self._render_timer.stop()
        self._preparation_timer.stop()
        self.slicer.stop()
        dropped = list(self.layers.layers)
        with self.model.lock:
            self.layers.close()
            self.model.close()
        self._forget_edits(dropped)


def _robust_range(values: np.ndarray) -> tuple[float, float]:
    """The 2nd-98th percentile of the finite values (a sensible first contrast)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    sample = finite if finite.size <= 200_000 else finite[:: finite.size // 200_000]
    low, high = np.percentile(sample, [2, 98])
    return float(low), float(high if high > low else low + 1)


def _rgb_array(image) -> np.ndarray:
    """A QImage as ``[height, width, 3]`` uint8 with even sides (H.264 needs them)."""
    from PySide6.QtGui import QImage

    rgb = image.convertToFormat(QImage.Format.Format_RGB888)
    width, height = rgb.width(), rgb.height()
    row_bytes = rgb.bytesPerLine()
    data = np.frombuffer(rgb.constBits(), dtype=np.uint8, count=row_bytes * height)
    frame = data.reshape(height, row_bytes)[:, :width * 3].reshape(height, width, 3)
    return frame[:height - height % 2, :width - width % 2].copy()


def _flip_tiles(image: np.ndarray, columns: int, tile_width: int) -> np.ndarray:
    out = image.copy()
    for column in range(columns):
        part = slice(column * tile_width, (column + 1) * tile_width)
        out[part] = image[part][::-1]
    return out
