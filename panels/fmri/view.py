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

Every action is an ``fmri.*`` command (``panels/fmri/commands.py``) that changes the
``FmriState``; buttons, boxes, sliders and clicks trigger them with what the user picked as
named arguments, and the panel redraws what the state says changed. ``view_state`` and
``restore_view_state`` save and reopen what is shown (issue 39).
"""

from __future__ import annotations

from dataclasses import replace
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

from engine.plots import heatmap
from panels.fmri.commands import (
    COMMANDS,
    SCOPE,
    FmriState,
    OverlayStyle,
    conversion_cache,  # noqa: F401  (where opened .nii.gz files are converted; tests patch it)
)
from panels.fmri.generated import GeneratedLayer
from panels.fmri.model import (
    OVERLAY_COLORMAPS,
    PLANES,
    connectivity,
    orientation_labels,
    plane_axes,
    roi_time_courses,
    sphere_section,
)
from panels.fmri.slicer import Slicer
from panels.widgets.command_status import show_outcome
from panels.widgets.jobs import PanelJobs
from panels.widgets.plot_export import route_exports
from studio.command_widgets import connect, connect_button, mark_argument
from studio.commands import Invocation, registry_for
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
    """A view whose left click and left drag move the crosshair (other buttons pan/zoom):
    ``on_point(pos, final)``, final for a click and a drag's end."""

    def __init__(self, on_point) -> None:
        super().__init__(lockAspect=True, invertY=False, enableMenu=False)
        self._on_point = on_point

    def mouseClickEvent(self, ev) -> None:
        if ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            self._on_point(self.mapSceneToView(ev.scenePos()), True)
        else:
            super().mouseClickEvent(ev)

    def mouseDragEvent(self, ev, axis=None) -> None:
        if ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            self._on_point(self.mapSceneToView(ev.scenePos()), ev.isFinish())
        else:
            super().mouseDragEvent(ev, axis)


class PlaneView:
    """One orthogonal plane: base and overlay images, crosshair lines, orientation letters."""

    def __init__(self, plane: int, on_point) -> None:
        self.plane = plane
        self.box = SliceViewBox(lambda pos, final: on_point(plane, pos, final))
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
    """The panel the shell opens for NIfTI files and BIDS folders (``open_file``). Its
    actions are the ``fmri.*`` commands (``panels/fmri/commands.py``): the controls turn what
    the user chose into named arguments and trigger them; the panel draws what the state
    says changed."""

    def __init__(self, host=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._host = host
        self.commands = registry_for(host, COMMANDS)
        self.state = FmriState(host, view=self)
        self.state.submit = self._submit_job
        self.model = self.state.model
        self.layers = self.state.layers
        self.slicer = Slicer(self)
        self.slicer.finished.connect(self._on_finished)
        self.last_result: dict | None = None
        self.volume_view = None
        self.time_course: np.ndarray | None = None
        self.fc_matrix: np.ndarray | None = None
        self.qc_specs: dict[str, dict] = {}
        self._want_time_course = False
        self._generation = 0
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
        self.layers.listeners.append(self._on_layers_edited)
        self.state.listeners.append(self._on_state)
        self.commands.bind(SCOPE, self.state)
        self._stop_listening = self.commands.listen(self._on_invocation)
        self.jobs: PanelJobs | None = None   # the regenerations this panel started
        if host is not None:
            self.jobs = PanelJobs(host, self.info.setText, on_result=self._on_result)

    # -- what the commands changed -----------------------------------------------------------

    @property
    def active_layer(self) -> GeneratedLayer | None:
        return self.state.active

    @property
    def radiological(self) -> bool:
        return self.state.radiological

    @property
    def lightbox(self) -> bool:
        return self.state.lightbox

    @property
    def style_overlay(self) -> OverlayStyle:
        return self.state.style

    def _on_state(self, what: str) -> None:
        """Redraw what a command (or playback) changed."""
        {"base": self._show_base, "overlay": self._show_overlay, "layers": self._show_layers,
         "cursor": self._show_cursor, "time": self._show_time,
         "radiological": self._show_radiological, "lightbox": self._show_lightbox,
         "style": self._show_style, "range": self._show_range, "rois": self._show_new_rois,
         "qc": lambda: self._show_qc(self.state.qc_plot),
         "playing": self._show_playing}[what]()

    def _on_invocation(self, invocation: Invocation) -> None:
        """An fMRI command's outcome in the information line: its refusal or what it said;
        after a refusal the check boxes show the state again (a refused toggle unticks)."""
        if show_outcome(self.info, invocation, SCOPE) and invocation.refused:
            self._sync_switches()

    def _run(self, command_id: str, **args) -> bool:
        """Run a command as a user's action: True when it ran; a refusal is reported."""
        return self.commands.trigger(command_id, **args) is not None

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
        connect(self.colorbar.sigLevelsChangeFinished, self.colorbar, self.commands,
                "fmri.set_display_range", self._range_args)
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
        self.cursor_line = ""  # the cursor's description, kept apart from command outcomes
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
        self._route_scene_exports()

    def _route_scene_exports(self) -> None:
        """Each plot's right-click "Export..." is pyqtgraph's own exporter, which writes no
        provenance: it opens the panel's export (``fmri.export_figure``) as the button does."""
        route_exports(self, "fmri.export_figure", lambda: self._choose_export())

    def _build_toolbar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        for text, command_id, ask in (
                ("Open…", "fmri.open_image", self._choose_file),
                ("Add overlay…", "fmri.add_overlay", self._choose_overlay),
                ("Label image…", "fmri.add_label_rois", self._choose_labels),
                ("Export…", "fmri.export_figure", self._choose_export)):
            button = QPushButton(text)
            mark_argument(button, command_id)  # asks for the command's file, then runs it
            button.clicked.connect(ask)
            bar.addWidget(button)
        self.radius_box = QDoubleSpinBox(minimum=0.5, maximum=50.0, value=6.0, suffix=" mm")
        mark_argument(self.radius_box, "fmri.add_sphere_roi")  # and the mask's radius
        self.sphere_button = QPushButton("Add sphere ROI")
        connect_button(self.sphere_button, self.commands, "fmri.add_sphere_roi",
                       lambda: self._sphere_args(self.radius_box.value()))
        self.radiological_box = QCheckBox("Radiological (L on the right)")
        connect(self.radiological_box.toggled, self.radiological_box, self.commands,
                "fmri.set_radiological", lambda on: {"on": on})
        self.lightbox_box = QCheckBox("Lightbox")
        connect(self.lightbox_box.toggled, self.lightbox_box, self.commands,
                "fmri.set_lightbox", lambda on: {"on": on})
        self.nan_box = QCheckBox("NaN as 0")
        self.nan_box.setToolTip("Open images with NaN voxels, showing them as 0 (otherwise "
                                "such files are refused)")
        mark_argument(self.nan_box, "fmri.open_image")
        self.render_box = QCheckBox("3-D")
        self.render_box.setToolTip("Volume rendering of the current frame (needs OpenGL)")
        connect(self.render_box.toggled, self.render_box, self.commands, "fmri.show_3d",
                lambda on: {"on": on})
        for widget in (self.radius_box, self.sphere_button, self.radiological_box,
                       self.lightbox_box, self.nan_box, self.render_box):
            bar.addWidget(widget)
        bar.addStretch(1)
        return bar

    def _build_overlay_bar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.threshold_box = QDoubleSpinBox(minimum=0.0, maximum=1e12, decimals=3)
        self.threshold_box.setKeyboardTracking(False)  # one command per value, not per key
        connect(self.threshold_box.valueChanged, self.threshold_box, self.commands,
                "fmri.style_overlay", lambda v: {"threshold": v})
        self.colormap_box = QComboBox()
        self.colormap_box.addItems(OVERLAY_COLORMAPS)
        connect(self.colormap_box.currentTextChanged, self.colormap_box, self.commands,
                "fmri.style_overlay", lambda name: {"colormap": name})
        self.opacity_slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=100,
                                      value=70)
        self._connect_slider(self.opacity_slider, "fmri.style_overlay",
                             lambda v: {"opacity": v / 100}, self._preview_opacity)
        for text, widget in (("Overlay threshold", self.threshold_box),
                             ("colour map", self.colormap_box),
                             ("opacity", self.opacity_slider)):
            bar.addWidget(QLabel(text))
            bar.addWidget(widget)
        bar.addStretch(1)
        return bar

    def _connect_slider(self, slider: QSlider, command_id: str, args, preview) -> None:
        """A slider runs its command once per step it is put on (keys, clicks) and once when
        a drag ends; while it is dragged, ``preview`` shows each value (not logged)."""
        connect(slider.valueChanged, slider, self.commands, command_id,
                lambda value: None if slider.isSliderDown() else args(value))
        slider.sliderMoved.connect(preview)
        slider.sliderReleased.connect(
            lambda: self.commands.trigger(command_id, **args(slider.value())))

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
        connect(self.layer_box.currentTextChanged, self.layer_box, self.commands,
                "fmri.select_layer", lambda name: {"layer": name} if name else None)
        self.chunk_button = QPushButton("Discard chunk")
        connect_button(self.chunk_button, self.commands,
                       ("fmri.discard_chunk", "fmri.keep_chunk"), self._chunk_args)
        self.crop_start = QSpinBox(minimum=0, maximum=0)
        self.crop_stop = QSpinBox(minimum=1, maximum=1)
        crop_button = QPushButton("Crop")
        connect_button(crop_button, self.commands, "fmri.crop_frames", self._crop_args)
        self.mask_shape_box = QComboBox()
        self.mask_shape_box.addItems(list(MASK_CHOICES))
        self.mask_shape_box.setToolTip("Region: a sphere or a cube (half-side) of the ROI "
                                       "radius at the cursor, or the labels of an atlas")
        self.mask_clear_box = QComboBox()
        self.mask_clear_box.addItems(["clear outside", "clear inside"])
        self.mask_fill_box = QComboBox()
        self.mask_fill_box.addItems(["to 0", "to NaN"])
        for widget in (self.crop_start, self.crop_stop):
            mark_argument(widget, "fmri.crop_frames")
        for widget in (self.mask_shape_box, self.mask_clear_box, self.mask_fill_box):
            mark_argument(widget, "fmri.mask_region")
        mask_button = QPushButton("Mask")
        connect_button(mask_button, self.commands, "fmri.mask_region", self._mask_args)
        self.qc_box = QComboBox()
        connect(self.qc_box.currentTextChanged, self.qc_box, self.commands,
                "fmri.show_qc_plot", lambda name: {"name": name} if name else None)
        save_button = QPushButton("Save kept frames…")
        mark_argument(save_button, "fmri.save_layer")
        save_button.clicked.connect(self._choose_save_layer)
        regenerate_button = QPushButton("Regenerate with T1…")
        regenerate_button.setToolTip("Run brainworld.generate again from the same checkpoint "
                                     "and chunk, conditioned on another anatomy (cancel the "
                                     "file dialog: the template)")
        mark_argument(regenerate_button, "fmri.regenerate_layer")
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
        connect(self.play_button.toggled, self.play_button, self.commands, "fmri.play",
                lambda on: {"on": on, "fps": self.fps_box.value()})
        self.time_slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=0)
        self._connect_slider(self.time_slider, "fmri.set_time", lambda v: {"frame": v},
                             self.state.set_time_quietly)
        self.fps_box = QSpinBox(minimum=1, maximum=60, value=10, suffix=" frames/s")
        connect(self.fps_box.valueChanged, self.fps_box, self.commands, "fmri.play",
                lambda fps: {"on": True, "fps": fps} if self.state.playing else None)
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

    # -- controls -> command arguments -------------------------------------------------------

    def _range_args(self, _bar=None) -> dict | None:
        low, high = (float(v) for v in self.colorbar.levels())
        return {"low": low, "high": high} if high > low else None

    def _chunk_args(self) -> tuple[str, dict]:
        """Discard the chunk under the clock, or keep it if it was discarded (no chunk
        there: the command says so)."""
        layer = self.state.active
        chunk = None if layer is None else layer.chunk_of(self.model.t)
        named = {} if layer is None else {"layer": layer.name}
        if chunk is None:
            return "fmri.discard_chunk", named
        kept = chunk not in layer.discarded
        return ("fmri.discard_chunk" if kept else "fmri.keep_chunk"), {**named, "chunk": chunk}

    def _crop_args(self) -> dict:
        layer = self.state.active
        return {**({"layer": layer.name} if layer is not None else {}),
                "start": self.crop_start.value(), "stop": self.crop_stop.value()}

    def _mask_args(self) -> dict | None:
        """The region the mask boxes describe, centred on the cursor; for an atlas, a file
        dialog first (then the command runs from there)."""
        shape = MASK_CHOICES[self.mask_shape_box.currentText()]
        clear = "outside" if self.mask_clear_box.currentIndex() == 0 else "inside"
        fill = "zero" if self.mask_fill_box.currentIndex() == 0 else "nan"
        if shape == "labels":
            path, _ = QFileDialog.getOpenFileName(self, "Label image to mask with", "",
                                                  NIFTI_FILTER)
            if path:
                self.mask_layer({"shape": "labels", "path": path, "clear": clear,
                                 "fill": fill})
            return None
        return self._mask_at_cursor_args(shape, self.radius_box.value(), clear, fill)

    def _mask_at_cursor_args(self, shape: str, radius_mm: float, clear: str,
                             fill: str) -> dict:
        layer = self.state.active
        args = {"shape": shape, "radius_mm": radius_mm, "clear": clear, "fill": fill}
        if layer is not None:
            args["layer"] = layer.name
        return {**args, **self._cursor_mm("centre_mm")}

    # -- the panel's actions, as the shell, drops and tests call them ------------------------

    def open_file(self, path) -> bool:
        """A NIfTI file or a BIDS folder (``fmri.open_image``); problems are reported."""
        return self._run("fmri.open_image", **self._open_args(path))

    def open_overlay(self, path) -> bool:
        return self._run("fmri.add_overlay", **self._open_args(path))

    def open_generated(self, path) -> bool:
        return self._run("fmri.open_generated", **self._open_args(path))

    def _open_args(self, path) -> dict:
        return {"path": str(path), "nan_as_zero": self.nan_box.isChecked()}

    def set_cursor(self, display) -> bool:
        """Move the crosshair to display indices (R, A, S order of the base grid), clipped
        to the image, as the voxel of the file it shows (``fmri.set_cursor``)."""
        grid = self.model.grid
        if grid is None:
            return self._run("fmri.set_cursor", voxel=(0, 0, 0))  # refused: nothing open
        clipped = np.clip(np.asarray(display, dtype=int), 0, np.asarray(grid.shape) - 1)
        voxel = [int(v) for v in grid.to_file(clipped)]
        return self._run("fmri.set_cursor", voxel=voxel)

    def set_time(self, t: int) -> bool:
        last = max(self.model.n_frames - 1, 0)
        return self._run("fmri.set_time", frame=int(np.clip(t, 0, last)))

    def set_radiological(self, on: bool) -> bool:
        return self._run("fmri.set_radiological", on=bool(on))

    def set_lightbox(self, on: bool) -> bool:
        return self._run("fmri.set_lightbox", on=bool(on))

    def set_3d(self, on: bool) -> bool:
        """Show the vispy volume rendering in place of the slices (False: no OpenGL here)."""
        return self._run("fmri.show_3d", on=bool(on))

    def set_overlay_style(self, **changes) -> bool:
        """Threshold (|value| below it is transparent), vmax, colour map, opacity (0-1)."""
        return self._run("fmri.style_overlay", **changes)

    def set_playing(self, on: bool) -> bool:
        return self._run("fmri.play", on=bool(on), fps=self.fps_box.value())

    def set_active_layer(self, name: str) -> bool:
        return bool(name) and self._run("fmri.select_layer", layer=name)

    def add_sphere_roi(self, radius_mm: float) -> bool:
        return self._run("fmri.add_sphere_roi", **self._sphere_args(radius_mm))

    def _sphere_args(self, radius_mm: float) -> dict:
        """A sphere at the cursor, named by its centre in mm (the same place on a replay)."""
        return {"radius_mm": radius_mm, **self._cursor_mm("centre_mm")}

    def _cursor_mm(self, key: str) -> dict:
        if self.model.grid is None:
            return {}
        return {key: [round(float(v), 4) for v in self.model.cursor_world()]}

    def load_label_image(self, path) -> bool:
        return self._run("fmri.add_label_rois", path=str(path))

    def toggle_chunk(self) -> bool:
        """Discard the chunk under the clock, or keep it again if it was discarded."""
        command_id, args = self._chunk_args()
        return self._run(command_id, **args)

    def crop_layer(self, start: int, stop: int) -> bool:
        layer = self.state.active
        return self._run("fmri.crop_frames", start=start, stop=stop,
                         **({"layer": layer.name} if layer is not None else {}))

    def mask_layer(self, mask: dict) -> bool:
        """Clear the voxels outside (or inside) a region of the active layer, to 0 or NaN
        (``fmri.mask_region``; ``generated.checked_mask`` describes the region)."""
        layer = self.state.active
        return self._run("fmri.mask_region", **({"layer": layer.name} if layer else {}),
                         **mask)

    def mask_at_cursor(self, shape: str, radius_mm: float, clear: str = "outside",
                       fill: str = "zero") -> bool:
        """A sphere of ``radius_mm``, or a box of that half-side, centred on the cursor."""
        return self._run("fmri.mask_region",
                         **self._mask_at_cursor_args(shape, radius_mm, clear, fill))

    def save_layer(self, path) -> bool:
        """The shown layer's kept, masked frames as a new NIfTI (``fmri.save_layer``)."""
        layer = self.state.active
        return self._run("fmri.save_layer", path=str(path),
                         **({"layer": layer.name} if layer is not None else {}))

    def regenerate(self, t1=None) -> bool:
        """Swap the conditioning anatomy and regenerate: the result opens as a new layer."""
        layer = self.state.active
        return self._run("fmri.regenerate_layer", t1=None if t1 is None else str(t1),
                         **({"layer": layer.name} if layer is not None else {}))

    def _submit_job(self, method: str, params: dict, inputs: dict, label: str) -> None:
        if self.jobs is None:
            from studio.commands import Refusal

            raise Refusal("regenerating needs Studio with the engine running")
        self.jobs.submit(method, params, inputs, label=label,
                         on_error=lambda message: self._fail("Cannot regenerate", message))

    def _on_result(self, job: str, method: str, outputs: dict) -> None:
        made = outputs.get("generated")
        if made:
            self.open_generated(Path(self._host.run_dir(job)) / made)

    # -- drawing what changed ----------------------------------------------------------------

    def _show_base(self) -> None:
        self._generation += 1
        grid = self.model.grid
        for view in self.planes:
            h, v = plane_axes(view.plane)
            view.set_geometry((grid.shape[h], grid.shape[v]),
                              (grid.voxel_mm[h], grid.voxel_mm[v]))
            view.set_labels(self.state.radiological)
            view.overlay.clear()
        self._show_range(redraw=False)
        self.colorbar.setImageItem([view.base for view in self.planes]
                                   + [self.lightbox_view.base])
        self.overlay_bar.setVisible(False)
        self._after_layers_changed()

    def _show_overlay(self) -> None:
        self._generation += 1
        self.overlay_bar.setVisible(True)
        self._after_layers_changed()

    def _show_range(self, redraw: bool = True) -> None:
        self.colorbar.blockSignals(True)
        self.colorbar.setLevels(self.state.display_range)
        self.colorbar.blockSignals(False)
        if redraw:
            self._request_redraw(time_course=False)

    def _after_layers_changed(self) -> None:
        self._clear_rois()
        if self.model.rois:  # kept over a generated layer's change: analysed again
            self._show_new_rois()
        self._show_preparation()
        self._preparation_timer.start()
        timed = (self.model.functional or self.model.base).tr_s is not None
        self.course_plot.setLabel("bottom", "time (s)" if timed else "frame")
        self.time_slider.blockSignals(True)
        self.time_slider.setMaximum(self.model.n_frames - 1)
        self.time_slider.setValue(self.model.t)
        self.time_slider.blockSignals(False)
        self._request_redraw()

    def _show_layers(self) -> None:
        """The layer box lists the open generated layers; the shown one gets the second row,
        its crop range, quality-check plots and the layer's controls."""
        layer = self.state.active
        self.layer_box.blockSignals(True)
        self.layer_box.clear()
        self.layer_box.addItems([existing.name for existing in self.layers.layers])
        if layer is not None:
            self.layer_box.setCurrentText(layer.name)
        self.layer_box.blockSignals(False)
        self._generation += 1
        if layer is None:
            self.generated_course = None
            self.generated_curve.setData([], [])
            self._show_compare_row(False)
            self.qc_view.setVisible(False)
            self.generated_bar.setVisible(False)
            return
        self._show_compare_row(True)
        for spin in (self.crop_start, self.crop_stop):
            spin.setMaximum(layer.volume.n_frames)
        self.crop_start.setMaximum(layer.volume.n_frames - 1)
        self.qc_box.blockSignals(True)
        self.qc_box.clear()
        self.qc_specs = layer.qc_specs()
        self.qc_box.addItems(list(self.qc_specs))
        self.qc_box.setCurrentText(self.state.qc_plot)
        self.qc_box.blockSignals(False)
        self._show_qc(self.state.qc_plot)
        self.generated_bar.setVisible(True)
        self._on_layers_edited()
        self._after_layers_changed()

    def _show_cursor(self) -> None:
        self._show_crosshair()
        self._request_redraw()

    def _show_time(self) -> None:
        t = self.model.t
        if self.time_slider.value() != t:
            self.time_slider.blockSignals(True)
            self.time_slider.setValue(t)
            self.time_slider.blockSignals(False)
        self.time_line.setPos(self._time_axis()[t])
        if self.state.active is not None:
            self._on_layers_edited()
        self._request_redraw(time_course=False)

    def _show_radiological(self) -> None:
        self._sync_switches()
        for view in self.planes + self.compare_planes:
            view.set_labels(self.state.radiological)
        if self.last_result is not None:
            self._draw(self.last_result)
        elif self.model.grid is not None:  # nothing drawn yet: crosshair and ROIs still flip
            self._show_crosshair()

    def _show_lightbox(self) -> None:
        self._sync_switches()
        if self.stack.currentWidget() is not self.volume_view or self.volume_view is None:
            self.stack.setCurrentIndex(1 if self.state.lightbox else 0)
        self._request_redraw(time_course=False)

    def _sync_switches(self) -> None:
        """The check boxes and the play button show the state (without running commands)."""
        showing_3d = self.volume_view is not None and \
            self.stack.currentWidget() is self.volume_view
        for box, on in ((self.radiological_box, self.state.radiological),
                        (self.lightbox_box, self.state.lightbox),
                        (self.render_box, showing_3d),
                        (self.play_button, self.state.playing)):
            if box.isChecked() != on:
                box.blockSignals(True)
                box.setChecked(on)
                box.blockSignals(False)

    def show_3d(self, on: bool) -> str:
        """The vispy volume rendering in place of the slices, or back; what is missing for it
        ("" when shown)."""
        if not on:
            self.stack.setCurrentIndex(1 if self.state.lightbox else 0)
            self._sync_switches()
            return ""
        if self.volume_view is None:
            try:
                from panels.fmri.volume3d import VolumeRenderView

                self.volume_view = VolumeRenderView()
            except Exception as exc:  # no OpenGL, no vispy backend: the 2-D views remain
                self._sync_switches()
                return f"{type(exc).__name__}: {exc}"
            self.stack.addWidget(self.volume_view)
        self.stack.setCurrentWidget(self.volume_view)
        self._sync_switches()
        self._request_redraw(time_course=False)
        return ""

    def _show_style(self) -> None:
        style = self.state.style
        for widget, value in ((self.threshold_box, style.threshold),
                              (self.opacity_slider, round(100 * style.opacity))):
            widget.blockSignals(True)
            widget.setValue(value)
            widget.blockSignals(False)
        self.colormap_box.blockSignals(True)
        self.colormap_box.setCurrentText(style.colormap)
        self.colormap_box.blockSignals(False)
        self.overlay_bar.setColorMap(pg.colormap.get(style.colormap))
        self.overlay_bar.setLevels((style.threshold, style.vmax))
        self._request_redraw(time_course=False)

    def _preview_opacity(self, value: int) -> None:
        """The overlay follows the opacity slider while it is dragged (its release runs the
        command)."""
        self.state.style = replace(self.state.style, opacity=value / 100)
        self._request_redraw(time_course=False)

    def _show_playing(self) -> None:
        self._sync_switches()
        if self.state.playing:
            self._play_timer.start(1000 // self.state.fps)
            self.play_button.setText("Pause")
        else:
            self._play_timer.stop()
            self.play_button.setText("Play")
        if self.fps_box.value() != self.state.fps:
            self.fps_box.blockSignals(True)
            self.fps_box.setValue(self.state.fps)
            self.fps_box.blockSignals(False)

    def _advance(self) -> None:
        if self.slicer.idle():  # playing never queues up frames the worker has not drawn
            self.state.set_time_quietly((self.model.t + 1) % self.model.n_frames)

    def _show_preparation(self) -> None:
        """A progress bar while a .nii.gz is indexed or converted into the workspace in the
        background (its late frames are slow until then); a failed pass is said once."""
        layer = None if self.state.active is None else self.state.active.volume
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
        """Report what is no command's refusal (a background read, a job that failed)."""
        if self._host is not None:
            self._host.show_error(title, message)
        self.info.setText(message)
        return False

    # -- pointing ----------------------------------------------------------------------------

    def _on_point(self, plane: int, pos: QPointF, final: bool = True) -> None:
        """A click (or the end of a drag) on a plane moves the cursor by command; a drag in
        progress moves the crosshair only."""
        grid = self.model.grid
        if grid is None:
            return
        view = self.planes[plane]
        h_axis, v_axis = plane_axes(plane)
        h = int(np.floor(pos.x() / view.voxel_mm[0]))
        v = int(np.floor(pos.y() / view.voxel_mm[1]))
        if self.state.radiological and h_axis == 0:
            h = grid.shape[0] - 1 - h
        cursor = list(self.model.cursor)
        cursor[h_axis], cursor[v_axis] = h, v
        self._point_at(cursor, final)

    def _point_at(self, display, final: bool) -> None:
        if final:
            self.set_cursor(display)
        else:
            self.state.set_cursor_quietly(display)

    def _on_lightbox_point(self, _plane: int, pos: QPointF, final: bool = True) -> None:
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
        if self.state.radiological:
            h = grid.shape[0] - 1 - h
        self._point_at((h, v, int(indices[n])), final)

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
        self.cursor_line = f"{text}   {time_text}"
        self.info.setText(self.cursor_line)

    def info_line(self) -> str:
        """What the figure shows at the cursor (voxel, world mm, values, time): the caption of
        an export. The information label also says what the last command did, which is no
        caption."""
        return self.cursor_line

    def _time_axis(self) -> np.ndarray:
        volume = self.model.functional or self.model.base
        tr = volume.tr_s if volume is not None and volume.tr_s else 1.0
        return np.arange(self.model.n_frames) * tr

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


    # -- ROIs --------------------------------------------------------------------------------

    def _show_new_rois(self) -> None:
        """ROIs were added: their outlines now, their time courses and connectivity from the
        slicing thread."""
        self._show_roi_outlines()
        self._submit_rois()

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
                             self.figure_provenance(), caption=self.info_line())

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
            self.state.set_time_quietly(original)
        return target

    # -- dialogs: they ask for a command's file, then run it ---------------------------------

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
                            self.info_line())
        if choice is not None:
            self._run("fmri.export_figure", path=str(choice.path), dpi=choice.dpi,
                      caption=choice.caption)

    def _choose_regenerate(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Anatomy (T1) to condition on", "",
                                              NIFTI_FILTER)
        self.regenerate(path or None)

    def _choose_save_layer(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the kept generated frames",
                                              "generated_kept.nii.gz", NIFTI_FILTER)
        if path:
            self.save_layer(path)

    # -- sessions (issue 39): what is open and how it is shown -------------------------------

    def view_state(self) -> dict:
        """The view as JSON: files by path, cursor (voxel and mm) and frame, display range,
        overlay style, orientation and layout, ROIs as they were added, generated layers by
        path with the one shown, its quality-check plot, zoom and pan of each plane and the
        controls' settings (``restore_view_state`` reads it)."""
        state, model = self.state, self.model
        saved: dict = {"radiological": state.radiological, "lightbox": state.lightbox,
                       "view_3d": self.volume_view is not None
                       and self.stack.currentWidget() is self.volume_view,
                       "fps": self.fps_box.value(), "roi_radius_mm": self.radius_box.value(),
                       "nan_as_zero": self.nan_box.isChecked(),
                       "mask": {"shape": self.mask_shape_box.currentText(),
                                "clear": self.mask_clear_box.currentText(),
                                "fill": self.mask_fill_box.currentText()}}
        if model.base is None:
            return saved
        saved.update({
            "opened": state.opened, "overlay": state.overlay_opened,
            "read_nan_as_zero": state.nan_as_zero,
            "cursor_voxel": [int(v) for v in model.cursor_voxel()],
            "cursor_mm": [round(float(v), 4) for v in model.cursor_world()],
            "frame": int(model.t),
            "display_range": [float(v) for v in state.display_range],
            "overlay_style": dict(state.style.__dict__) if model.overlay is not None else None,
            "rois": [dict(source) for source in state.roi_sources],
            "roi_names": [roi.name for roi in model.rois],
            "generated": [str(layer.path) for layer in self.layers.layers],
            "layer": state.active.name if state.active is not None else None,
            "qc_plot": state.qc_plot or None,
            "crop_form": [self.crop_start.value(), self.crop_stop.value()],
            "zoom_mm": {PLANES[view.plane]: _view_range(view.box) for view in self.planes},
            "lightbox_zoom_mm": _view_range(self.lightbox_view.box)
            if state.lightbox else None})
        return saved

    def restore_view_state(self, state: dict) -> list[str]:
        """Open what ``view_state`` named and show it the same way; a sentence for each part
        that could not be restored (a file gone, a layer, voxel or plot this data lacks)."""
        problems: list[str] = []

        def run(command_id: str, **args) -> bool:  # not the user's: not logged, refusals kept
            return self.commands.run_restoring(problems, command_id, **args)

        self._restore_controls(state, problems)
        nan = bool(state.get("read_nan_as_zero", False))
        if state.get("opened") and run("fmri.open_image", path=str(state["opened"]),
                                       nan_as_zero=nan):
            if state.get("overlay"):
                run("fmri.add_overlay", path=str(state["overlay"]), nan_as_zero=nan)
            self._restore_view(state, run, problems)
        for key, command_id in (("radiological", "fmri.set_radiological"),
                                ("lightbox", "fmri.set_lightbox")):
            if key in state and bool(state[key]) != getattr(self.state, key):
                run(command_id, on=bool(state[key]))
        if state.get("view_3d"):
            run("fmri.show_3d", on=True)
        self._restore_zoom(state, problems)
        return problems

    def _restore_view(self, state: dict, run, problems: list[str]) -> None:
        """What is shown of the open image: cursor, frame, contrast, ROIs, generated layers."""
        if isinstance(state.get("overlay_style"), dict) and self.model.overlay is not None:
            style = {key: state["overlay_style"][key] for key in OverlayStyle.__dataclass_fields__
                     if key in state["overlay_style"]}
            run("fmri.style_overlay", **style)
        if state.get("display_range"):
            low, high = state["display_range"]
            run("fmri.set_display_range", low=low, high=high)
        for source in state.get("rois") or []:
            if "sphere" in source:
                run("fmri.add_sphere_roi", **source["sphere"])
            elif "labels" in source:
                run("fmri.add_label_rois", path=str(source["labels"]))
        for path in state.get("generated") or []:
            run("fmri.open_generated", path=str(path))
        wanted = state.get("layer")
        if wanted and self.state.active is None:
            problems.append(f"fmri: the generated layer {wanted!r} is not open (its run could "
                            "not be opened)")
        elif wanted and wanted != self.state.active.name:
            run("fmri.select_layer", layer=str(wanted))
        if state.get("qc_plot") and self.state.active is not None \
                and state["qc_plot"] != self.state.qc_plot:
            run("fmri.show_qc_plot", name=str(state["qc_plot"]))
        if state.get("cursor_voxel") is not None:
            run("fmri.set_cursor", voxel=state["cursor_voxel"])
        if state.get("frame") is not None:
            run("fmri.set_time", frame=state["frame"])
        crop = state.get("crop_form")
        if isinstance(crop, list) and len(crop) == 2 and self.state.active is not None:
            self.crop_start.setValue(int(crop[0]))
            self.crop_stop.setValue(int(crop[1]))

    def _restore_controls(self, state: dict, problems: list[str]) -> None:
        """The controls that only hold a command's arguments: radius, NaN, speed, mask form."""
        for key, box in (("roi_radius_mm", self.radius_box), ("fps", self.fps_box)):
            if isinstance(state.get(key), int | float):
                box.setValue(state[key])
        self.nan_box.setChecked(bool(state.get("nan_as_zero", False)))
        mask = state.get("mask") or {}
        for key, box in (("shape", self.mask_shape_box), ("clear", self.mask_clear_box),
                         ("fill", self.mask_fill_box)):
            if key not in mask:
                continue
            if box.findText(str(mask[key])) < 0:
                problems.append(f"fmri: no mask {key} {mask[key]!r} to choose")
            else:
                box.setCurrentText(str(mask[key]))

    def _restore_zoom(self, state: dict, problems: list[str]) -> None:
        if self.model.base is None:
            return
        zoom = state.get("zoom_mm") or {}
        boxes = [(zoom.get(PLANES[view.plane]), view.box) for view in self.planes]
        boxes.append((state.get("lightbox_zoom_mm"), self.lightbox_view.box))
        for wanted, box in boxes:
            if wanted is None:
                continue
            try:
                (x0, x1), (y0, y1) = wanted
                box.setRange(QRectF(float(x0), float(y0), float(x1) - float(x0),
                                    float(y1) - float(y0)), padding=0)
            except (TypeError, ValueError):
                problems.append(f"fmri: the zoom {wanted!r} is not x and y ranges in mm")

    # -- lifetime ------------------------------------------------------------------------------

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
        self.state.shutdown()
        self.commands.unbind(SCOPE, self.state)
        self._stop_listening()


def _view_range(box: pg.ViewBox) -> list[list[float]]:
    """A view's visible x and y ranges (mm), rounded for a session file."""
    return [[round(float(v), 4) for v in axis] for axis in box.viewRange()]


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
