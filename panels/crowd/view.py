"""The crowd previewer panel: clips side by side or wiped, in sync, frame stepping and
scrubbing, trajectories with ids, per-frame metrics, exports, edits and the C2R methods.

Left, the clips (coarse, generated, real; any video, frame folder or run's frame array) drawn
next to each other at one height, with MOT-style tracks drawn over the first clip. Right, a
top-down map of metric tracks (ETH/UCY, CSV, a simulation's trajectories) with each walker's
id and trail. A QTimer plays all of them at the clips' rate; the slider and the step buttons
move one frame index shared by everything. Files open by drag and drop or the Open buttons;
a finished c2r job's coarse and generated frames and its trajectories open by themselves.
Below, a live plot of the generated clip's per-frame silhouette IoU with the control and its
frame-to-frame difference (``panels.crowd.metrics``, computed on a worker thread), with the
current frame marked. "Wipe" shows two chosen clips in one view split at a divider that the
mouse drags. Exports: the view as MP4 or GIF and PNG frames of a range, the trajectories as
CSV (written on a worker thread, atomically). Edits: the prompt, and a person's waypoint
dragged on the track map; both undoable through ``host.push_edit``; "Regenerate" submits
``c2r.generate`` with the prompt, the edited tracks and the frame range. With "overlays" on,
exports carry the tracks with their ids (drawn over the clip for pixel tracks, the track map
beside it for metric ones).
Beside the track map, two more tabs: the scene editor (``panels.crowd.scene_editor``: a crowd
scene JSON edited from above, undoable, simulated on the thread pool, rendered coarsely by
``c2r.simulate``) and the camera path in 3-D (``panels.crowd.camera3d``, vispy; where OpenGL
cannot draw, the tab says why), whose marked camera follows the clock.
Every button, box and drag runs a command of ``panels.crowd.commands`` through the window's
registry (``crowd.open``, ``crowd.set_frame``, ``crowd.move_person``, ``crowd.export_video``…),
naming clips, people and scene elements as the panel shows them; the view keeps layout and
display. ``view_state`` / ``restore_view_state`` save and restore what is open and how it is
shown (sessions).
Nothing here imports torch: the methods run in the engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, QPointF, QRunnable, Qt, QThreadPool, QTimer, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import provenance
from engine.io.crowd import Tracks
from panels.crowd.commands import (
    MODES,
    SCENE_COMMANDS,
    SCOPE,
    TABS,
    CrowdState,
    own_registry,
    write_tracks_csv,
)
from panels.crowd.metrics import FrameMetrics, clip_metrics
from panels.crowd.model import (
    MAP_SIZE_PX,
    CrowdModel,
    Marker,
    decode,
)
from panels.crowd.scene_editor import SceneEditor
from panels.widgets.drops import OpensDroppedFiles
from panels.widgets.job_output import RunOutputs
from panels.widgets.jobs import PanelJobs
from panels.widgets.plot_export import route_exports
from studio.command_widgets import connect, connect_button, mark_argument
from studio.commands import Invocation
from studio.widgets.figure_export import DEFAULT_DPI, ExportChoice, ask_export, export_image
from studio.widgets.images import png_bytes

VIEW_HEIGHT_PX = 256
RUN_OUTPUTS = {"coarse_rgb": "coarse", "coarse_frames": "coarse", "frames": "generated"}
MODE_SIDE_BY_SIDE, MODE_WIPE = MODES["side by side"], MODES["wipe"]


class _Signals(QObject):
    finished = Signal(object)
    failed = Signal(str)


class _Task(QRunnable):
    """``work()`` on the thread pool; ``done(result)`` or ``failed(message)`` on the Qt main
    thread (the signals object lives there, so the connection is queued)."""

    def __init__(self, work: Callable[[], Any], done: Callable[[Any], None],
                 failed: Callable[[str], None]) -> None:
        super().__init__()
        self.work = work
        self.signals = _Signals()
        self.signals.finished.connect(done)
        self.signals.failed.connect(failed)

    def run(self) -> None:
        try:
            result = self.work()
        except Exception as exc:  # reported to the user, never lost on the worker thread
            self.signals.failed.emit(str(exc) or type(exc).__name__)
            return
        self.signals.finished.emit(result)


MIN_VIEW_PX = 120  # the clips and the track map shrink this far before the window grows


class PointerLabel(QLabel):
    """A QLabel showing a picture scaled down to fit (three clips side by side never widen
    the window), reporting mouse presses, drags and releases in the picture's own pixels."""

    def __init__(self, on_press: Callable[[float, float], None],
                 on_drag: Callable[[float, float], None],
                 on_release: Callable[[float, float], None]) -> None:
        super().__init__("")
        self.on_press, self.on_drag, self.on_release = on_press, on_drag, on_release
        self._picture = QPixmap()
        self._scale = 1.0
        # the layout gives the room; the picture follows (a pixmap's size would be a minimum)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
        self.setMinimumSize(MIN_VIEW_PX, MIN_VIEW_PX)

    def setPixmap(self, pixmap: QPixmap) -> None:  # noqa: N802 - Qt's name
        self._picture = QPixmap(pixmap)
        self._show_scaled()

    def pixmap(self) -> QPixmap:
        """The picture at its own resolution (what exports and tests read)."""
        return self._picture

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._show_scaled()

    def _show_scaled(self) -> None:
        if self._picture.isNull():
            self._scale = 1.0
            super().setPixmap(self._picture)
            return
        self._scale = min(1.0, self.width() / self._picture.width(),
                          self.height() / self._picture.height())
        if self._scale >= 1.0:
            super().setPixmap(self._picture)
            return
        super().setPixmap(self._picture.scaled(
            max(1, round(self._picture.width() * self._scale)),
            max(1, round(self._picture.height() * self._scale)),
            Qt.AspectRatioMode.IgnoreAspectRatio, Qt.TransformationMode.SmoothTransformation))

    def pixmap_point(self, event) -> tuple[float, float]:
        position = event.position()
        if self._picture.isNull():
            return position.x(), position.y()
        shown_w, shown_h = self._picture.width() * self._scale, \
            self._picture.height() * self._scale
        left = (self.width() - shown_w) / 2 if self.alignment() & \
            Qt.AlignmentFlag.AlignHCenter else 0
        top = (self.height() - shown_h) / 2 if self.alignment() & \
            Qt.AlignmentFlag.AlignVCenter else 0
        return (position.x() - left) / self._scale, (position.y() - top) / self._scale

    def mousePressEvent(self, event) -> None:
        self.on_press(*self.pixmap_point(event))

    def mouseMoveEvent(self, event) -> None:
        self.on_drag(*self.pixmap_point(event))

    def mouseReleaseEvent(self, event) -> None:
        self.on_release(*self.pixmap_point(event))


def with_sidecar(written: Path, record: dict) -> Path:
    """``written`` (a video, a CSV) gets ``<name>.provenance.json`` beside it."""
    provenance.write_sidecar(written, record)
    return written


def to_qimage(rgb) -> QImage:
    data = np.ascontiguousarray(rgb, dtype=np.uint8)
    height, width = data.shape[:2]
    return QImage(data.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()


def paint_markers(image: QImage, markers: list[Marker]) -> None:
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    for marker in markers:
        color = QColor.fromHsv((marker.id * 47) % 360, 200, 230)
        painter.setPen(QPen(color, 1.5))
        points = [QPointF(float(x), float(y)) for x, y in marker.trail]
        for a, b in zip(points, points[1:], strict=False):
            painter.drawLine(a, b)
        painter.setBrush(color)
        painter.drawEllipse(QPointF(marker.x, marker.y), 3.0, 3.0)
        painter.drawText(QPointF(marker.x + 4, marker.y - 4), str(marker.id))
    painter.end()


class CrowdPanel(OpensDroppedFiles, QWidget):
    def __init__(self, host: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.model = CrowdModel()
        self.commands = own_registry(host)
        self.state = CrowdState(self.model, host, view=self,
                                submit=lambda method, params, inputs: self.run_method(
                                    method, params, inputs))
        self.commands.bind(SCOPE, self.state)
        self.metrics: FrameMetrics | None = None
        self.wipe_position = 0.5
        self._metrics_generation = 0
        self._tasks: set[_Task] = set()
        self._dragging: tuple[int, int] | None = None
        self._drag_start: tuple[float, float] | None = None
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(1)
        self.timer = QTimer(self)
        self.timer.timeout.connect(lambda: self.model.step(1, wrap=True))
        self._build()
        self._stop_listening = self.commands.listen(self._on_invocation)
        self.model.events.connect("frame", lambda index: self._on_frame(index))
        self.model.events.connect("clips", lambda names: self._on_content())
        self.model.events.connect("tracks", lambda count: self._on_content())
        self.model.events.connect("prompt", self._show_prompt)
        self.model.events.connect("problem", lambda message: QTimer.singleShot(  # any thread
            0, self, lambda: (self.status.setText(message), self._on_content())))
        self.jobs = PanelJobs(host, self.status.setText, on_result=self._on_result)
        self.setAcceptDrops(True)
        self.redraw()

    @property
    def checkpoint(self) -> str | None:
        """The last c2r.train checkpoint folder (what ``crowd.regenerate`` needs)."""
        return self.state.checkpoint

    @checkpoint.setter
    def checkpoint(self, folder: str | None) -> None:
        self.state.checkpoint = folder

    # -- layout ----------------------------------------------------------------------------

    def _build(self) -> None:
        registry = self.commands
        bar = QHBoxLayout()
        self.open_clip_button = QPushButton("Open clip…")
        self.open_clip_button.clicked.connect(self.choose_clip)
        self.open_tracks_button = QPushButton("Open tracks…")
        self.open_tracks_button.clicked.connect(self.choose_tracks)
        for button in (self.open_clip_button, self.open_tracks_button):
            mark_argument(button, "crowd.open")  # asks for the file, then runs the command
        self.back_button = QPushButton("◀")
        connect_button(self.back_button, registry, "crowd.step", lambda: {"frames": -1})
        self.play_button = QPushButton("Play")
        self.play_button.setCheckable(True)
        connect(self.play_button.toggled, self.play_button, registry, "crowd.play",
                lambda on: {"on": on})
        self.forward_button = QPushButton("▶")
        connect_button(self.forward_button, registry, "crowd.step", lambda: {"frames": 1})
        self.slider = QSlider(Qt.Orientation.Horizontal)
        connect(self.slider.valueChanged, self.slider, registry, "crowd.set_frame",
                lambda value: {"frame": value + 1})
        self.frame_label = QLabel("")
        self.simulate_button = QPushButton("Simulate demo scene")
        self.simulate_button.setToolTip("c2r.simulate: the demo scene, fitted to ETH/UCY tracks")
        connect_button(self.simulate_button, registry, "crowd.simulate_demo")
        self.export_button = QPushButton("Export PNG…")
        mark_argument(self.export_button, "crowd.export_figure")
        self.export_button.clicked.connect(self.choose_export_path)
        for widget in (self.open_clip_button, self.open_tracks_button, self.back_button,
                       self.play_button, self.forward_button, self.slider, self.frame_label,
                       self.simulate_button, self.export_button):
            bar.addWidget(widget)
        self.clips_label = PointerLabel(self._wipe_to, self._wipe_to, self._wipe_released)
        self.clips_label.setText("Drop videos, frame folders or trajectory files here")
        self.clips_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.clip_names = QLabel("")
        self.map_label = PointerLabel(self._press_map, self._drag_map, self._release_map)
        self.map_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.map_label.setToolTip("drag a person to move their path at this frame (undoable)")
        self.status = QLabel("")
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.addLayout(self._build_compare_bar())
        left_layout.addWidget(self.clip_names)
        left_layout.addWidget(self.clips_label, 1)
        self.scene_editor = SceneEditor(self.host, self.run_in_pool, lambda: self.model.frame,
                                        self.show_simulation,
                                        lambda _path: None,  # the state submits renders
                                        commands=registry, state=self.state)
        self.side_tabs = QTabWidget()
        self.side_tabs.addTab(self.map_label, "Track map")
        self.side_tabs.addTab(self.scene_editor, "Scene editor")
        self.camera_view = None  # panels.crowd.camera3d.CameraPathView, made when first shown
        self.camera_tab = QWidget()
        self.camera_placeholder = QLabel("the scene's camera path in 3-D")
        self.camera_placeholder.setWordWrap(True)
        QVBoxLayout(self.camera_tab).addWidget(self.camera_placeholder)
        self.side_tabs.addTab(self.camera_tab, "Camera 3D")
        connect(self.side_tabs.currentChanged, self.side_tabs, registry, "crowd.show_tab",
                lambda index: {"tab": self.side_tabs.tabText(index).lower()})
        self.scene_editor.changed.connect(self.update_camera_view)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(self.side_tabs)
        self.metrics_plot = pg.PlotWidget()
        self.metrics_plot.setMaximumHeight(160)
        self.metrics_plot.setMinimumHeight(76)  # its axis labels overlap below about this
        self.metrics_plot.addLegend(offset=(-10, 5))
        self.metrics_plot.setLabel("bottom", "frame")
        self.metrics_plot.setYRange(0, 1)
        self.iou_curve = self.metrics_plot.plot([], [], name="silhouette IoU with control",
                                                pen=pg.mkPen((90, 200, 120), width=2))
        self.difference_curve = self.metrics_plot.plot([], [], name="frame-to-frame difference",
                                                       pen=pg.mkPen((230, 150, 60), width=2))
        self.frame_line = pg.InfiniteLine(0, angle=90, pen=pg.mkPen((200, 200, 200)))
        self.metrics_plot.addItem(self.frame_line)
        self.metrics_label = QLabel("")
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.metrics_plot)
        layout.addWidget(self.metrics_label)
        layout.addLayout(self._build_export_bar())
        layout.addLayout(self._build_edit_bar())
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        # a run's tracks never replace the open ones unasked (panels.widgets.job_output)
        self.outputs = RunOutputs(self, self._open_run_tracks, self._open_tracks_name,
                                  self.status.setText)
        mark_argument(self.outputs.button, "crowd.open")
        status_row.addWidget(self.outputs.button)
        layout.addLayout(status_row)
        self._route_scene_exports()

    def _route_scene_exports(self) -> None:
        """A plot's right-click "Export..." is pyqtgraph's own exporter, which writes no
        provenance: it opens the panel's export (``crowd.export_figure``) as the button does."""
        route_exports(self, "crowd.export_figure", lambda: self.choose_export_path())

    def _build_compare_bar(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.mode_box = QComboBox()
        self.mode_box.addItems([MODE_SIDE_BY_SIDE, MODE_WIPE])
        connect(self.mode_box.currentTextChanged, self.mode_box, self.commands, "crowd.set_mode",
                lambda text: {"mode": text.lower()})
        self.wipe_left = QComboBox()
        self.wipe_right = QComboBox()
        for box in (self.wipe_left, self.wipe_right):
            connect(box.currentTextChanged, box, self.commands, "crowd.set_wipe_clips",
                    lambda _text: {"left": self.wipe_left.currentText(),
                                   "right": self.wipe_right.currentText()})
        row.addWidget(self.mode_box)
        row.addWidget(QLabel("wipe:"))
        row.addWidget(self.wipe_left)
        row.addWidget(QLabel("|"))
        row.addWidget(self.wipe_right)
        row.addStretch(1)
        return row

    def _build_export_bar(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.range_start = QSpinBox()
        self.range_end = QSpinBox()
        for box in (self.range_start, self.range_end):
            box.setRange(1, 1)
        self.export_video_button = QPushButton("Export MP4/GIF…")
        self.export_video_button.clicked.connect(lambda: self._ask_path(
            "Export the view as video", "clip.mp4", "MP4 (*.mp4);;GIF (*.gif)",
            self.export_video))
        mark_argument(self.export_video_button, "crowd.export_video")
        self.export_frames_button = QPushButton("Export PNG frames…")
        self.export_frames_button.clicked.connect(self.choose_frames_folder)
        mark_argument(self.export_frames_button, "crowd.export_frames")
        self.overlays_box = QCheckBox("overlays")
        self.overlays_box.setChecked(True)
        self.overlays_box.setToolTip("burn the tracks with their ids into PNG, MP4 and GIF "
                                     "exports (over pixel tracks' clip, else the map beside it)")
        connect(self.overlays_box.toggled, self.overlays_box, self.commands,
                "crowd.set_overlays", lambda on: {"on": on})
        self.export_csv_button = QPushButton("Export tracks CSV…")
        self.export_csv_button.clicked.connect(lambda: self._ask_path(
            "Export trajectories", "tracks.csv", "CSV (*.csv)", self.export_tracks_csv))
        mark_argument(self.export_csv_button, "crowd.export_tracks")
        row.addWidget(QLabel("frames"))
        row.addWidget(self.range_start)
        row.addWidget(QLabel("to"))
        row.addWidget(self.range_end)
        for widget in (self.overlays_box, self.export_video_button, self.export_frames_button,
                       self.export_csv_button):
            row.addWidget(widget)
        row.addStretch(1)
        return row

    def _build_edit_bar(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.prompt_edit = QLineEdit()
        self.prompt_edit.setPlaceholderText("prompt of the next generation (empty: the scene's)")
        connect(self.prompt_edit.editingFinished, self.prompt_edit, self.commands,
                "crowd.set_prompt", lambda: self._prompt_args(self.prompt_edit.text()))
        self.regenerate_button = QPushButton("Regenerate frames")
        self.regenerate_button.setToolTip("c2r.generate with this prompt and the edited tracks, "
                                          "for the frame range (needs a c2r.train checkpoint)")
        connect_button(self.regenerate_button, self.commands, "crowd.regenerate")
        row.addWidget(QLabel("prompt"))
        row.addWidget(self.prompt_edit, 1)
        row.addWidget(self.regenerate_button)
        return row

    # -- commands: the wrappers tests, drops and the window call -----------------------------

    def _run(self, command_id: str, **args: Any) -> bool:
        """Run a command as a user's action: True when it ran; a refusal is reported."""
        return self.commands.trigger(command_id, **args) is not None

    def _on_invocation(self, invocation: Invocation) -> None:
        """A crowd command's outcome in the status line: its refusal (a dragged person goes
        back), or what it said."""
        if invocation.command.scope != SCOPE:
            return
        if invocation.refused:
            self.status.setText(f"{invocation.command.title} refused: {invocation.refused}")
            self.redraw()
        elif isinstance(invocation.result, str) and invocation.command.id not in \
                SCENE_COMMANDS:  # the scene editor's own status line says those
            self.status.setText(invocation.result)

    def open_file(self, path: str | os.PathLike, name: str | None = None) -> bool:
        """A clip, trajectories or a scene (``crowd.open``); problems are reported."""
        return self._run("crowd.open", path=str(path), name=name)

    def choose_clip(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open clip", "",
                                              "Videos and frames (*.mp4 *.mov *.avi *.mkv "
                                              "*.webm *.npy)")
        if path:
            self.open_file(path)

    def choose_tracks(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open trajectories", "",
                                              "Trajectories (*.txt *.csv *.tsv)")
        if path:
            self.open_file(path)

    # -- playback and drawing --------------------------------------------------------------

    def play(self, playing: bool) -> None:
        """Start or stop the clock (``crowd.play`` calls this); the button follows."""
        self.play_button.blockSignals(True)
        self.play_button.setChecked(playing)
        self.play_button.blockSignals(False)
        self.play_button.setText("Pause" if playing else "Play")
        if playing:
            self.timer.start(max(1, int(1000 / max(self.model.fps, 1e-3))))
        else:
            self.timer.stop()

    def show_tab(self, tab: str) -> None:
        """One of the side tabs (``crowd.show_tab``); the camera tab builds its 3-D view, or
        says in the tab why it cannot."""
        index = list(TABS).index(tab)
        if self.side_tabs.currentIndex() != index:
            self.side_tabs.blockSignals(True)
            self.side_tabs.setCurrentIndex(index)
            self.side_tabs.blockSignals(False)
        if self.side_tabs.currentWidget() is self.camera_tab:
            self.show_camera_view()

    def _on_frame(self, index: int) -> None:
        self.redraw()
        self.scene_editor.show_frame(index)
        if self.camera_view is not None:
            self.camera_view.set_camera(*self.scene_editor.model.camera_at_frame(index))

    # -- the camera path in 3-D ------------------------------------------------------------

    def show_camera_view(self) -> bool:
        """Make (once) and fill the 3-D camera view; False, with the reason shown in its tab,
        where OpenGL cannot draw it."""
        self.side_tabs.blockSignals(True)
        self.side_tabs.setCurrentWidget(self.camera_tab)
        self.side_tabs.blockSignals(False)
        if self.camera_view is None:
            from panels.widgets.gl import gl_problem

            problem = gl_problem()
            try:
                if problem:
                    raise RuntimeError(problem)
                from panels.crowd.camera3d import CameraPathView

                self.camera_view = CameraPathView()
            except Exception as exc:  # no OpenGL, no vispy backend: the 2-D views remain
                self.camera_placeholder.setText(f"3-D camera view unavailable: {exc}")
                return False
            self.camera_placeholder.hide()
            self.camera_tab.layout().addWidget(self.camera_view)
        self.update_camera_view()
        return True

    def update_camera_view(self) -> None:
        if self.camera_view is None:
            return
        scene = self.scene_editor.model
        self.camera_view.set_scene(scene.scene, scene.camera_path(), self.scene_editor.tracks)
        self.camera_view.set_camera(*scene.camera_at_frame(self.model.frame))

    def _on_content(self) -> None:
        self.slider.blockSignals(True)
        self.slider.setRange(0, self.model.frame_count - 1)
        self.slider.setValue(self.model.frame)
        self.slider.blockSignals(False)
        self.clip_names.setText("   |   ".join(self.model.clips))
        last = self.model.frame_count
        whole = self.range_end.value() == self.range_end.maximum()
        for box in (self.range_start, self.range_end):
            box.setMaximum(last)
        if whole:  # a range the user chose survives edits; the whole clip stays whole
            self.range_end.setValue(last)
        names = list(self.model.clips)
        for box, default in ((self.wipe_left, 0), (self.wipe_right, 1)):
            chosen = box.currentText()
            box.blockSignals(True)
            box.clear()
            box.addItems(names)
            if chosen in names:
                box.setCurrentText(chosen)
            elif names:
                box.setCurrentIndex(min(default, len(names) - 1))
            box.blockSignals(False)
        left = self.wipe_left.currentText()
        if len(names) > 1 and self.wipe_right.currentText() == left:
            # a second clip opened: wipe it against the first, not the first against itself
            self.wipe_right.blockSignals(True)
            self.wipe_right.setCurrentText(next(name for name in names if name != left))
            self.wipe_right.blockSignals(False)
        self.refresh_metrics()
        self.redraw()

    # -- metrics ---------------------------------------------------------------------------

    def refresh_metrics(self) -> None:
        """Recompute the per-frame metrics on the worker thread; a newer request wins."""
        self._metrics_generation += 1
        pair = self.model.clip_pair()
        if pair is None:
            self.metrics = None
            self._show_metrics()
            return
        generated = self.model.clips[pair[0]]
        control = self.model.control_silhouettes if self.model.control_silhouettes is not None \
            else self.model.clips[pair[1]]
        generation = self._metrics_generation
        self.metrics_label.setText(f"computing metrics of {pair[0]} against "
                                   f"{pair[1] or 'the control silhouettes'}…")

        def done(metrics: FrameMetrics) -> None:
            if generation == self._metrics_generation:
                self.metrics = metrics
                self._show_metrics()

        self.run_in_pool(lambda: clip_metrics(generated, control), done,
                         lambda message: self.metrics_label.setText(f"metrics failed: "
                                                                    f"{message}"))

    def _show_metrics(self) -> None:
        metrics = self.metrics
        if metrics is None:
            self.iou_curve.setData([], [])
            self.difference_curve.setData([], [])
            self.metrics_label.setText("metrics: open a generated clip and its control "
                                       "(coarse) clip")
            return
        frames = np.arange(1, len(metrics.silhouette_iou) + 1)
        self.iou_curve.setData(frames, metrics.silhouette_iou)
        self.difference_curve.setData(frames, metrics.frame_difference)
        self._show_frame_metrics()

    def _show_frame_metrics(self) -> None:
        self.frame_line.setValue(self.model.frame + 1)
        metrics = self.metrics
        if metrics is None:
            return
        index = min(self.model.frame, len(metrics.silhouette_iou) - 1)
        self.metrics_label.setText(
            f"frame {index + 1}: silhouette IoU {metrics.silhouette_iou[index]:.3f}, "
            f"frame-to-frame difference {metrics.frame_difference[index]:.3f}   (clip mean IoU "
            f"{metrics.silhouette_iou.mean():.3f})")

    def run_in_pool(self, work: Callable[[], Any], done: Callable[[Any], None],
                    failed: Callable[[str], None]) -> None:
        task = _Task(work, done, failed)
        task.setAutoDelete(False)
        self._tasks.add(task)
        task.signals.finished.connect(lambda _: self._tasks.discard(task))
        task.signals.failed.connect(lambda _: self._tasks.discard(task))
        self.pool.start(task)

    # -- wipe ------------------------------------------------------------------------------

    def set_mode(self, mode: str) -> None:
        """"Side by side" or "Wipe" (``crowd.set_mode`` calls this)."""
        self.mode_box.blockSignals(True)
        self.mode_box.setCurrentText(mode)
        self.mode_box.blockSignals(False)
        self.redraw()

    def set_wipe_clips(self, left: str, right: str) -> None:
        """The clips either side of the divider, by name (``crowd.set_wipe_clips``)."""
        for box, name in ((self.wipe_left, left), (self.wipe_right, right)):
            box.blockSignals(True)
            box.setCurrentText(name)
            box.blockSignals(False)
        self.redraw()

    def wipe_pair(self) -> tuple[str, str, float] | None:
        left, right = self.wipe_left.currentText(), self.wipe_right.currentText()
        if self.mode_box.currentText() != MODE_WIPE or left not in self.model.clips \
                or right not in self.model.clips:
            return None
        return left, right, self.wipe_position

    def set_wipe_position(self, position: float) -> None:
        self.wipe_position = float(np.clip(position, 0.0, 1.0))
        self.redraw()

    def _wipe_to(self, x: float, y: float) -> None:
        """The divider follows the mouse while it is down (drawn only)."""
        pixmap = self.clips_label.pixmap()
        if self.wipe_pair() is not None and pixmap is not None and pixmap.width():
            self.set_wipe_position(x / pixmap.width())

    def _wipe_released(self, x: float, y: float) -> None:
        """Where the mouse let the divider go is the command (``crowd.set_wipe_position``)."""
        pixmap = self.clips_label.pixmap()
        if self.wipe_pair() is not None and pixmap is not None and pixmap.width():
            self._run("crowd.set_wipe_position",
                      position=float(np.clip(x / pixmap.width(), 0.0, 1.0)))

    def current_image(self, overlays: bool = True) -> QImage:
        """The clips side by side (or wiped), tracks in pixels drawn over the first clip."""
        wipe = self.wipe_pair()
        image = to_qimage(self.model.wipe(*wipe, height=VIEW_HEIGHT_PX) if wipe
                          else self.model.composite(VIEW_HEIGHT_PX))
        tracks = self.model.tracks
        if overlays and tracks is not None and tracks.units == "px" and self.model.clips:
            first = next(iter(self.model.clips.values()))
            scale = VIEW_HEIGHT_PX / first.shape[1]
            markers = self.model.markers()
            for m in markers:
                m.x, m.y, m.trail = m.x * scale, m.y * scale, m.trail * scale
            paint_markers(image, markers)
        return image

    def map_image(self) -> QImage:
        image = QImage(MAP_SIZE_PX, MAP_SIZE_PX, QImage.Format.Format_RGB888)
        image.fill(QColor(30, 32, 36))
        if self.model.tracks is not None and self.model.tracks.units != "px":
            paint_markers(image, self.model.markers(MAP_SIZE_PX, MAP_SIZE_PX))
        return image

    def redraw(self) -> None:
        if self.model.clips:
            self.clips_label.setPixmap(QPixmap.fromImage(self.current_image()))
        self.map_label.setPixmap(QPixmap.fromImage(self.map_image()))
        if self.slider.value() != self.model.frame:
            self.slider.blockSignals(True)
            self.slider.setValue(self.model.frame)
            self.slider.blockSignals(False)
        self.frame_label.setText(f"{self.model.frame + 1} / {self.model.frame_count}")
        self._show_frame_metrics()

    # -- export ----------------------------------------------------------------------------

    def export_image(self) -> QImage:
        """What the exports show at the current frame: the clips and, with overlays on, the
        tracks with their ids over the clip (pixel tracks) or the track map beside it."""
        overlays = self.overlays_box.isChecked()
        world_tracks = self.model.tracks is not None and self.model.tracks.units != "px"
        if world_tracks and not self.model.clips:
            return self.map_image()  # tracks alone: the map, not beside an empty clip
        image = self.current_image(overlays)
        if overlays and world_tracks:
            track_map = self.map_image()
            joined = QImage(image.width() + track_map.width(),
                            max(image.height(), track_map.height()),
                            QImage.Format.Format_RGB888)
            joined.fill(QColor(30, 32, 36))
            painter = QPainter(joined)
            painter.drawImage(0, 0, image)
            painter.drawImage(image.width(), 0, track_map)
            painter.end()
            image = joined
        return image

    def export_png(self, path: str | os.PathLike) -> None:
        """The current frame as shown, at the clips' own pixels, provenance inside."""
        provenance.write(path, png_bytes(self.export_image()), self.export_provenance())

    def export_figure(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                      caption: bool = False) -> Path:
        """The current frame as a figure (PNG, SVG or PDF) at ``dpi``, the frame's metrics
        line as an optional caption, provenance inside (what Ctrl+E writes)."""
        return export_image(self.export_image(), ExportChoice(Path(path), dpi, caption),
                            self.export_provenance(), caption=self.metrics_label.text())

    def export_provenance(self, frames: tuple[int, int] | None = None) -> dict:
        """What an export shows: the clips' and tracks' files (path and hash), the runs that
        made them, the frame (or frame range), the comparison and whether tracks are drawn."""
        sources = list(self.model.clip_sources.values())
        if self.model.tracks is not None and self.model.tracks.path:
            sources.append(str(self.model.tracks.path))
        runs = [provenance.run_entry(folder) for folder in dict.fromkeys(
            provenance.run_folder(source) for source in sources) if folder is not None]
        view = {"panel": "crowd", "frame": self.model.frame + 1,
                "frames": None if frames is None else [frames[0] + 1, frames[1]],
                "clips": list(self.model.clips), "mode": self.mode_box.currentText(),
                "wipe": [self.wipe_left.currentText(), self.wipe_right.currentText()],
                "overlays": self.overlays_box.isChecked(), "prompt": self.model.prompt,
                "fps": self.model.fps}
        return provenance.record(dict.fromkeys(sources), view=view, runs=runs)

    def frame_range(self) -> tuple[int, int]:
        """(start, stop) frame indices of the range boxes (1-based, inclusive, in the UI)."""
        return self.range_start.value() - 1, self.range_end.value()

    def export_frames_rgb(self, start: int, stop: int) -> np.ndarray:
        """(stop - start, H, W, 3): ``export_image`` at each frame of the range."""
        return self.model.frames_over(start, stop, lambda: to_rgb(self.export_image()))

    def export_video(self, path: str | os.PathLike) -> bool:
        """The view over the range boxes' frames as MP4 or GIF (``crowd.export_video``)."""
        return self._run("crowd.export_video", path=str(path))

    def export_frames(self, folder: str | os.PathLike) -> bool:
        """PNG frames of the view over the range boxes' frames (``crowd.export_frames``)."""
        return self._run("crowd.export_frames", folder=str(folder))

    def export_tracks_csv(self, path: str | os.PathLike) -> bool:
        return self._run("crowd.export_tracks", path=str(path))

    def write_video(self, path: str | os.PathLike, frames: tuple[int, int]) -> None:
        """The view (side by side or wiped, with overlays when on) over ``frames`` (start,
        stop) as MP4 or GIF, encoded on the worker thread, its sidecar written first."""
        rgb = self.export_frames_rgb(*frames)
        record = self.export_provenance(frames)

        def write() -> Path:
            provenance.write_sidecar(path, record)
            return self.model.export_video(path, rgb)

        self._export(write, path)

    def write_frames(self, folder: str | os.PathLike, frames: tuple[int, int]) -> None:
        """PNG frames of the view over ``frames``: ``frame_0001.png`` ..."""
        start, stop = frames
        encoded = [rgb_png(frame) for frame in self.export_frames_rgb(start, stop)]
        target = Path(folder)
        record = self.export_provenance((start, stop))

        def write() -> Path:
            for number, data in enumerate(encoded, start=start + 1):
                provenance.write(target / f"frame_{number:04d}.png", data,
                                 {**record, "view": {**record["view"], "frame": number}})
            return target

        self._export(write, folder)

    def write_tracks(self, path: str | os.PathLike) -> None:
        record = self.export_provenance()
        model = self.model
        self._export(lambda: write_tracks_csv(model, path, record), path)

    def _export(self, write: Callable[[], Any], target: str | os.PathLike) -> None:
        self.status.setText(f"Exporting {target}…")
        self.run_in_pool(write, lambda _: self.status.setText(f"Exported {target}"),
                         lambda message: self.host.show_error("Export failed",
                                                              f"{target}: {message}"))

    def choose_frames_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Export PNG frames into")
        if folder:
            self.export_frames(folder)

    def _ask_path(self, title: str, default: str, name_filter: str,
                  then: Callable[[str], None]) -> None:
        path, _ = QFileDialog.getSaveFileName(self, title, default, name_filter)
        if path:
            then(path)

    # -- edits -----------------------------------------------------------------------------

    def _prompt_args(self, text: str) -> dict | None:
        return {"text": text} if text != self.model.prompt else None

    def edit_prompt(self, text: str) -> bool:
        """The prompt of the next generation (``crowd.set_prompt``, undoable)."""
        args = self._prompt_args(text)
        return args is not None and self._run("crowd.set_prompt", **args)

    def _show_prompt(self, text: str) -> None:
        if self.prompt_edit.text() != text:
            self.prompt_edit.setText(text)

    def _press_map(self, x: float, y: float) -> None:
        self._dragging = self.model.nearest_waypoint(x, y)
        self._drag_start = (x, y)

    def _drag_map(self, x: float, y: float) -> None:
        if self._dragging is None:
            return
        image = self.map_image()
        painter = QPainter(image)
        painter.setPen(QPen(QColor(255, 255, 255), 1.5, Qt.PenStyle.DashLine))
        painter.drawLine(QPointF(*self._drag_start), QPointF(x, y))
        painter.end()
        self.map_label.setPixmap(QPixmap.fromImage(image))

    def _release_map(self, x: float, y: float) -> None:
        """A person dragged on the map: ``crowd.move_person`` to where the mouse let go."""
        chosen, self._dragging = self._dragging, None
        if chosen is None or (x, y) == self._drag_start:
            self.redraw()
            return
        self.move_waypoint(*chosen, self.model.map_to_world(x, y))

    def move_waypoint(self, ped: int, frame_id: int, xy: tuple[float, float]) -> bool:
        """Move a person's sample (``crowd.move_person``, one undoable edit); a person or
        sample that the open tracks do not have is refused with the reason."""
        return self._run("crowd.move_person", person=int(ped), frame=int(frame_id),
                         to=[float(xy[0]), float(xy[1])])

    def drop_pick(self) -> None:
        """Other tracks open: a person picked on the map is not theirs."""
        self._dragging = None

    def _open_tracks_name(self) -> str | None:
        """The open tracks' file, as the keep-or-open question names it; None: none open."""
        tracks = self.model.tracks
        return Path(tracks.path).name if tracks is not None and tracks.path else None

    def _open_run_tracks(self, path: Path) -> bool:
        self.open_file(path)
        return self.model.tracks is not None and Path(self.model.tracks.path) == Path(path)

    def take_tracks(self, tracks: Tracks) -> None:
        """Show ``tracks`` in place of the open ones (their edits leave the history)."""
        self.state.take_tracks(tracks)

    def restore_edits(self) -> int:
        """Replay the autosaved edits of the open tracks (after a crash)."""
        restore = getattr(self.host, "restore_edits", None)
        return restore(self.model.document, self.model, decode) if callable(restore) else 0

    def regenerate(self) -> bool:
        """``crowd.regenerate``: c2r.generate with the prompt, the (edited) tracks and the
        frame range."""
        return self._run("crowd.regenerate")

    # -- the scene editor ------------------------------------------------------------------

    def show_simulation(self, tracks) -> None:
        """An edited scene's simulated tracks become the panel's tracks (map, clock)."""
        self.take_tracks(tracks)

    def choose_export_path(self) -> None:
        choice = ask_export(self, "Export the frame", "frame.png", self.metrics_label.text())
        if choice is not None:
            self._run("crowd.export_figure", path=str(choice.path), dpi=choice.dpi,
                      caption=choice.caption)

    # -- engine jobs -----------------------------------------------------------------------

    def run_method(self, method: str, params: dict, inputs: dict | None = None) -> None:
        self.jobs.submit(method, params, inputs,
                         on_error=lambda message: self.host.show_error(method, message))

    def _on_result(self, job: str, method: str, outputs: dict) -> None:
        """A run's clips, silhouettes and tracks open here (a regenerated range is spliced
        into the clips it came from)."""
        folder = Path(self.host.run_dir(job))
        if isinstance(outputs.get("checkpoint"), str):
            self.checkpoint = str(folder / outputs["checkpoint"])
        start = int((outputs.get("summary") or {}).get("start_frame") or 0)
        if isinstance(outputs.get("silhouettes"), str):
            self._take_silhouettes(np.load(folder / outputs["silhouettes"]), start)
        for key, name in RUN_OUTPUTS.items():
            if not isinstance(outputs.get(key), str):
                continue
            if start and name in self.model.clips:  # a regenerated range: splice it in
                frames = np.load(folder / outputs[key])
                self.model.add_clip(name, splice(self.model.clips[name], frames, start),
                                    self.model.clip_sources.get(name))
            else:
                with self.commands.nested():  # the run's doing, not a line of the user's
                    self.open_file(folder / outputs[key], name)
        if isinstance(outputs.get("trajectories"), str):
            self.outputs.offer(folder / outputs["trajectories"], f"{method} ({job})")

    def _take_silhouettes(self, silhouettes: np.ndarray, start: int) -> None:
        """The control silhouettes of a run (spliced in for a regenerated range); a range
        with nothing to splice into leaves the coarse clip's own silhouettes in charge."""
        current = self.model.control_silhouettes
        if not start:
            self.model.control_silhouettes = silhouettes
        elif current is not None and current.shape[1:] == silhouettes.shape[1:]:
            self.model.control_silhouettes = splice(current, silhouettes, start)
        else:
            self.model.control_silhouettes = None

    # -- sessions (issue 39): what is open and how it is shown -----------------------------

    def view_state(self) -> dict:
        """The view as JSON: clips, tracks and scene by absolute path, the frame (from 1), the
        comparison, overlays, export range, side tab, the scene editor's tool, selection (by
        label) and zoom (``restore_view_state`` reads it)."""
        model, editor = self.model, self.scene_editor
        tracks = model.tracks
        # the range asked for (the locked aspect widens one axis to the plot's shape)
        (x0, x1), (y0, y1) = editor.plot.getPlotItem().vb.targetRange()
        return {
            "clips": [{"name": name, "path": model.clip_sources.get(name)}
                      for name in model.clips],
            "tracks": str(Path(tracks.path).resolve()) if tracks is not None and tracks.path
            else None,
            "scene": str(editor.model.path.resolve()) if editor.model.path is not None
            else None,
            "frame": model.frame + 1,
            "mode": self.mode_box.currentText().lower(),
            "wipe": [self.wipe_left.currentText(), self.wipe_right.currentText()],
            "wipe_position": self.wipe_position,
            "overlays": self.overlays_box.isChecked(),
            "range": [self.range_start.value(), self.range_end.value()],
            "tab": self.side_tabs.tabText(self.side_tabs.currentIndex()).lower(),
            "scene_tool": editor.tool_box.currentText(),
            "scene_selection": editor.selected_name(),
            "scene_zoom_m": {"x": [x0, x1], "y": [y0, y1]},
            "parameters_shown": editor.params_toggle.isChecked(),
            "checkpoint": self.checkpoint,
        }

    def restore_view_state(self, state: dict) -> list[str]:
        """Open what ``view_state`` named and show it the same way; a sentence for each part
        that could not be restored (a file gone, a clip or element this data lacks)."""
        problems: list[str] = []

        def run(command_id: str, **args: Any) -> bool:
            return self.commands.run_restoring(problems, command_id, **args)

        for clip in state.get("clips") or []:
            if not isinstance(clip, dict) or not clip.get("path"):
                problems.append(f"crowd: the clip {clip!r} was not read from a file")
                continue
            run("crowd.open", path=str(clip["path"]), name=str(clip.get("name") or "") or None)
        if state.get("tracks"):
            run("crowd.open", path=str(state["tracks"]))
        if state.get("scene"):
            run("crowd.open_scene", path=str(state["scene"]))
        for key, command_id, name in (("frame", "crowd.set_frame", "frame"),
                                      ("mode", "crowd.set_mode", "mode"),
                                      ("wipe_position", "crowd.set_wipe_position", "position"),
                                      ("overlays", "crowd.set_overlays", "on"),
                                      ("parameters_shown", "crowd.show_social_force_parameters",
                                       "on")):
            if state.get(key) is not None:
                run(command_id, **{name: state[key]})
        wipe = state.get("wipe") or []
        if len(wipe) == 2 and all(wipe) and list(wipe) != [self.wipe_left.currentText(),
                                                            self.wipe_right.currentText()]:
            run("crowd.set_wipe_clips", left=str(wipe[0]), right=str(wipe[1]))
        if state.get("scene_selection"):
            run("crowd.select_scene_item", item=str(state["scene_selection"]))
        if state.get("tab"):  # before the zoom: the editor's plot is laid out when shown
            run("crowd.show_tab", tab=str(state["tab"]))
        self._restore_widgets(state, problems)
        return problems

    def _restore_widgets(self, state: dict, problems: list[str]) -> None:
        """The export range, the editor's tool, its zoom and the checkpoint folder."""
        span = state.get("range")
        if isinstance(span, list) and len(span) == 2:
            last = self.range_end.maximum()
            if all(isinstance(v, int) and 1 <= v <= last for v in span):
                self.range_start.setValue(span[0])
                self.range_end.setValue(span[1])
            else:
                problems.append(f"crowd: the frame range {span} is not within 1..{last}")
        editor = self.scene_editor
        tool = state.get("scene_tool")
        if tool and editor.tool_box.findText(str(tool)) >= 0:
            editor.tool_box.setCurrentText(str(tool))
        elif tool:
            problems.append(f"crowd: no scene tool {tool!r}")
        zoom = state.get("scene_zoom_m")
        if isinstance(zoom, dict):
            try:
                editor.plot.getPlotItem().vb.setRange(xRange=[float(v) for v in zoom["x"]],
                                                      yRange=[float(v) for v in zoom["y"]],
                                                      padding=0)
            except (KeyError, TypeError, ValueError):
                problems.append(f"crowd: the scene zoom {zoom!r} is not x/y ranges")
        checkpoint = state.get("checkpoint")
        if checkpoint and Path(str(checkpoint)).is_dir():
            self.checkpoint = str(checkpoint)
        elif checkpoint:
            problems.append(f"crowd: the checkpoint folder {checkpoint} is gone")

    def closeEvent(self, event) -> None:
        self.timer.stop()
        self.scene_editor.close()
        self.commands.unbind(SCOPE, self.state)
        self._stop_listening()
        self.jobs.close()
        self.pool.waitForDone(5000)
        super().closeEvent(event)


def splice(clip: np.ndarray | None, frames: np.ndarray, start: int) -> np.ndarray:
    """``clip`` with ``frames`` in place from ``start`` on (longer if they run past its end);
    just ``frames`` when there is no clip of the same frame size to splice into."""
    if clip is None or clip.shape[1:] != frames.shape[1:]:
        return frames
    out = np.concatenate([clip, np.repeat(clip[-1:], max(0, start + len(frames) - len(clip)),
                                          axis=0)])
    out[start:start + len(frames)] = frames
    return out


def to_rgb(image: QImage) -> np.ndarray:
    """(H, W, 3) uint8 copy of a QImage (rows may be padded in Qt's buffer)."""
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(),
                                                               image.bytesPerLine())
    return rows[:, :3 * image.width()].reshape(image.height(), image.width(), 3).copy()


def rgb_png(rgb: np.ndarray) -> bytes:
    return png_bytes(to_qimage(rgb))
