"""The crowd previewer panel: clips side by side in sync, frame stepping and scrubbing,
trajectories with ids, and buttons that run the C2R methods through the host.

Left, the clips (coarse, generated, real; any video, frame folder or run's frame array) drawn
next to each other at one height, with MOT-style tracks drawn over the first clip. Right, a
top-down map of metric tracks (ETH/UCY, CSV, a simulation's trajectories) with each walker's
id and trail. A QTimer plays all of them at the clips' rate; the slider and the step buttons
move one frame index shared by everything. Files open by drag and drop or the Open buttons;
a finished c2r job's coarse and generated frames and its trajectories open by themselves.
Nothing here imports torch: the methods run in the engine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QPointF, Qt, QTimer
from PySide6.QtGui import QColor, QImage, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from engine.io import FormatError, detect
from panels.crowd.model import MAP_SIZE_PX, CrowdModel, Marker

VIEW_HEIGHT_PX = 256
TRACK_FORMATS = ("trajectories",)
RUN_OUTPUTS = {"coarse_rgb": "coarse", "coarse_frames": "coarse", "frames": "generated"}


def to_qimage(rgb) -> QImage:
    import numpy as np

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


class CrowdPanel(QWidget):
    def __init__(self, host: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.model = CrowdModel()
        self.jobs: dict[str, str] = {}
        self.timer = QTimer(self)
        self.timer.timeout.connect(lambda: self.model.step(1, wrap=True))
        self._build()
        self.model.events.connect("frame", lambda index: self.redraw())
        self.model.events.connect("clips", lambda names: self._on_content())
        self.model.events.connect("tracks", lambda count: self._on_content())
        self._unsubscribe = host.subscribe(self._on_host_event)
        self.setAcceptDrops(True)
        self.redraw()

    # -- layout ----------------------------------------------------------------------------

    def _build(self) -> None:
        bar = QHBoxLayout()
        self.open_clip_button = QPushButton("Open clip…")
        self.open_clip_button.clicked.connect(self.choose_clip)
        self.open_tracks_button = QPushButton("Open tracks…")
        self.open_tracks_button.clicked.connect(self.choose_tracks)
        self.back_button = QPushButton("◀")
        self.back_button.clicked.connect(lambda: self.model.step(-1))
        self.play_button = QPushButton("Play")
        self.play_button.setCheckable(True)
        self.play_button.toggled.connect(self.play)
        self.forward_button = QPushButton("▶")
        self.forward_button.clicked.connect(lambda: self.model.step(1))
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.valueChanged.connect(self.model.set_frame)
        self.frame_label = QLabel("")
        self.simulate_button = QPushButton("Simulate demo scene")
        self.simulate_button.setToolTip("c2r.simulate: the demo scene, fitted to ETH/UCY tracks")
        self.simulate_button.clicked.connect(lambda: self.run_method("c2r.simulate", {}))
        self.export_button = QPushButton("Export PNG…")
        self.export_button.clicked.connect(self.choose_export_path)
        for widget in (self.open_clip_button, self.open_tracks_button, self.back_button,
                       self.play_button, self.forward_button, self.slider, self.frame_label,
                       self.simulate_button, self.export_button):
            bar.addWidget(widget)
        self.clips_label = QLabel("Drop videos, frame folders or trajectory files here")
        self.clips_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.clip_names = QLabel("")
        self.map_label = QLabel("")
        self.map_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.status = QLabel("")
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.addWidget(self.clip_names)
        left_layout.addWidget(self.clips_label, 1)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(self.map_label)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.status)

    # -- opening files ---------------------------------------------------------------------

    def open_file(self, path: str | os.PathLike, name: str | None = None) -> None:
        path = Path(path)
        try:
            if path.suffix.lower() != ".npy" and detect(path).name in TRACK_FORMATS:
                self.model.load_tracks(path)
            else:
                self.model.load_clip(name or path.stem, path)
        except (FormatError, ValueError, OSError) as exc:
            self.host.show_error("Cannot open", str(exc))

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

    def dragEnterEvent(self, event) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.open_file(url.toLocalFile())
        event.acceptProposedAction()

    # -- playback and drawing --------------------------------------------------------------

    def play(self, playing: bool) -> None:
        self.play_button.setText("Pause" if playing else "Play")
        if playing:
            self.timer.start(max(1, int(1000 / max(self.model.fps, 1e-3))))
        else:
            self.timer.stop()

    def _on_content(self) -> None:
        self.slider.blockSignals(True)
        self.slider.setRange(0, self.model.frame_count - 1)
        self.slider.setValue(self.model.frame)
        self.slider.blockSignals(False)
        self.clip_names.setText("   |   ".join(self.model.clips))
        self.redraw()

    def current_image(self) -> QImage:
        """The clips side by side, tracks in pixels drawn over the first clip."""
        image = to_qimage(self.model.composite(VIEW_HEIGHT_PX))
        tracks = self.model.tracks
        if tracks is not None and tracks.units == "px" and self.model.clips:
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

    # -- export ----------------------------------------------------------------------------

    def export_png(self, path: str | os.PathLike) -> None:
        """The current clips (with pixel tracks) and, when there are metric tracks, the map."""
        image = self.current_image()
        if self.model.tracks is not None and self.model.tracks.units != "px":
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
        if not image.save(str(path), "PNG"):
            raise OSError(f"{path}: could not write the PNG")

    def choose_export_path(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export frame", "frame.png", "PNG (*.png)")
        if path:
            try:
                self.export_png(path)
            except OSError as exc:
                self.host.show_error("Export failed", str(exc))

    # -- engine jobs -----------------------------------------------------------------------

    def run_method(self, method: str, params: dict, inputs: dict | None = None) -> None:
        def accepted(job: str) -> None:
            self.jobs[job] = method
            self.status.setText(f"{method}: {job} queued")

        self.host.submit_job(method, params, inputs or {}, on_accepted=accepted,
                             on_error=lambda message: self.host.show_error(method, message))

    def _on_host_event(self, envelope: dict) -> None:
        job = envelope.get("job")
        if job not in self.jobs:
            return
        content = envelope.get("content") or {}
        kind = envelope.get("type")
        if kind == "job_state":
            self.status.setText(f"{self.jobs[job]}: {job} {content.get('state', '')} "
                                f"{content.get('reason', '')}".rstrip())
        elif kind == "job_progress" and content.get("total"):
            self.status.setText(f"{self.jobs[job]}: {content.get('step', 0)} / "
                                f"{content['total']}")
        elif kind == "job_result":
            folder = Path(self.host.run_dir(job))
            outputs = content.get("outputs") or {}
            for key, name in RUN_OUTPUTS.items():
                if isinstance(outputs.get(key), str):
                    self.open_file(folder / outputs[key], name)
            if isinstance(outputs.get("trajectories"), str):
                self.open_file(folder / outputs["trajectories"])

    def closeEvent(self, event) -> None:
        self.timer.stop()
        self._unsubscribe()
        super().closeEvent(event)
