"""The crowd panel's scene editor: the scene seen from above, edited with the mouse.

Tools: Select (click a box, a group's spawn area or a camera keyframe; drag a box to move it
or its corner handle to resize it; Delete removes the selection), Building and Obstacle
(click places a box), Group (click the spawn point, then the goal), Path (click points, then
"Finish path": the selected group walks through them, the last is its goal) and Camera
(click the camera's position, then the point it looks at: a keyframe at the clock's current
frame, at the height chosen). Every change is one ``SceneEdit`` through ``host.push_edit``
(undoable, autosaved) and is written to the scene JSON; an edit that would make the scene
invalid is refused with the reason.

"Simulate" walks the scene's groups with the social force on the panel's thread pool and
draws the tracks (which also become the panel's tracks, so they play on the clock);
"Render coarse" submits ``c2r.simulate`` with the scene file, whose coarse clip and
trajectories open in the panel when the job ends.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.io.crowd import Tracks
from panels.crowd.scene import BOX_KINDS, SceneEdit, SceneError, SceneModel, decode, simulate

TOOLS = ("Select", "Building", "Obstacle", "Group", "Path", "Camera")
BOX_PENS = {"buildings": (200, 170, 140), "obstacles": (150, 150, 220)}
SELECTED_PEN = (255, 220, 60)
KEYFRAME_PICK_M = 1.0


class SceneEditor(QWidget):
    """``run_in_pool(work, done, failed)`` runs NumPy work off the main thread;
    ``current_frame()`` is the panel's clock; ``show_tracks(tracks)`` hands a simulation to the
    panel; ``render(scene_path)`` submits the coarse render. ``changed`` fires after every
    redraw (a new scene, an edit, a simulation)."""

    changed = Signal()

    def __init__(self, host: Any, run_in_pool: Callable, current_frame: Callable[[], int],
                 show_tracks: Callable[[Tracks], None], render: Callable[[Path], None],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.run_in_pool = run_in_pool
        self.current_frame = current_frame
        self.show_tracks = show_tracks
        self.render_scene = render
        self.model = SceneModel()
        self._unsubscribe_scene = self.model.events.connect("scene", lambda scene: self.redraw())
        self.selection: tuple[str, int] | None = None
        self.pending: list[tuple[float, float]] = []  # clicks of a group, path or camera
        self.tracks: Tracks | None = None
        self._items: list[Any] = []
        self._simulation = 0
        self._build()
        self.redraw()

    # -- layout ----------------------------------------------------------------------------

    def _build(self) -> None:
        files = QHBoxLayout()
        for text, slot in (("New scene", self.new_scene), ("Open scene…", self.choose_scene),
                           ("Save scene as…", self.choose_save_path)):
            button = QPushButton(text)
            button.clicked.connect(slot)
            files.addWidget(button)
        self.simulate_button = QPushButton("Simulate")
        self.simulate_button.setToolTip("the social force on this scene (default parameters)")
        self.simulate_button.clicked.connect(self.simulate)
        self.render_button = QPushButton("Render coarse")
        self.render_button.setToolTip("c2r.simulate with this scene: coarse RGB, depth and "
                                      "silhouettes along the camera path")
        self.render_button.clicked.connect(self.render)
        files.addWidget(self.simulate_button)
        files.addWidget(self.render_button)
        files.addStretch(1)
        tools = QHBoxLayout()
        self.tool_box = QComboBox()
        self.tool_box.addItems(TOOLS)
        self.tool_box.currentTextChanged.connect(lambda _: self.cancel_pending())
        self.count_box = QSpinBox()
        self.count_box.setRange(1, 5000)
        self.count_box.setValue(10)
        self.count_box.setToolTip("people in a spawned group")
        self.group_box = QSpinBox()
        self.group_box.setRange(1, 1)
        self.group_box.setToolTip("the group a drawn path belongs to")
        self.height_box = QDoubleSpinBox()
        self.height_box.setRange(0.5, 200)
        self.height_box.setValue(8.0)
        self.height_box.setSuffix(" m")
        self.height_box.setToolTip("camera height of a new keyframe")
        self.finish_button = QPushButton("Finish path")
        self.finish_button.clicked.connect(self.finish_path)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(self.delete_selection)
        for label, widget in (("tool", self.tool_box), ("people", self.count_box),
                              ("group", self.group_box), ("camera height", self.height_box)):
            tools.addWidget(QLabel(label))
            tools.addWidget(widget)
        tools.addWidget(self.finish_button)
        tools.addWidget(self.delete_button)
        tools.addStretch(1)
        self.plot = pg.PlotWidget()
        self.plot.setAspectLocked(True)
        self.plot.setLabel("bottom", "x (m)")
        self.plot.setLabel("left", "y (m)")
        self.plot.scene().sigMouseClicked.connect(self._on_click)
        self.track_lines = pg.PlotDataItem([], [], pen=pg.mkPen((120, 200, 140, 120), width=1),
                                           connect="finite")
        self.people = pg.ScatterPlotItem(size=6, brush=pg.mkBrush(90, 220, 120))
        self.plot.addItem(self.track_lines)
        self.plot.addItem(self.people)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addLayout(files)
        layout.addLayout(tools)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.status)

    # -- files -----------------------------------------------------------------------------

    def open_scene(self, path: str | os.PathLike) -> None:
        """Edit the scene in ``path`` (a ``FormatError`` from the reader propagates); its
        autosaved edits, if any, are restored."""
        self._take_model(SceneModel(path))
        restore = getattr(self.host, "restore_edits", None)
        restored = restore(self.model.document, self.model, decode) if callable(restore) else 0
        self.status.setText(f"{Path(path).name}" + (f": {restored} saved edit(s) restored"
                                                    if restored else ""))

    def new_scene(self) -> None:
        """An empty scene, saved in the workspace (``crowd/scene-N.json``) so it can render."""
        folder = scratch_folder(self.host)
        number = 1
        while (folder / f"scene-{number}.json").exists():
            number += 1
        model = SceneModel()
        model.save(folder / f"scene-{number}.json")
        self._take_model(model)
        self.status.setText(f"new scene: {model.path}")

    def save_as(self, path: str | os.PathLike) -> None:
        self.model.save(path)
        self.status.setText(f"saved {path}")

    def _take_model(self, model: SceneModel) -> None:
        self._unsubscribe_scene()
        self.model = model
        self._unsubscribe_scene = model.events.connect("scene", lambda scene: self.redraw())
        self.selection, self.pending, self.tracks = None, [], None
        self.redraw()
        self.plot.autoRange()

    def choose_scene(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open crowd scene", "", "Scenes (*.json)")
        if path:
            try:
                self.open_scene(path)
            except (ValueError, OSError) as exc:
                self.host.show_error("Cannot open the scene", str(exc))

    def choose_save_path(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the scene", "scene.json",
                                              "Scenes (*.json)")
        if path:
            self.save_as(path)

    # -- edits -----------------------------------------------------------------------------

    def push(self, propose: Callable[[], SceneEdit]) -> bool:
        """Validate and push one edit; a refused edit is reported and changes nothing."""
        try:
            edit = propose()
        except SceneError as exc:
            self.status.setText(f"refused: {exc}")
            self.host.show_error("Invalid scene edit", str(exc))
            self.redraw()  # a dragged box snaps back
            return False
        if self.model.path is None:
            self.model.save(scratch_folder(self.host) / "scene.json")
        self.host.push_edit(self.model.document, edit, self.model)
        self.status.setText(edit.label)
        return True

    def click(self, x: float, y: float) -> None:
        """A click at ground point (x, y) with the current tool."""
        tool = self.tool_box.currentText()
        if tool in ("Building", "Obstacle"):
            kind = BOX_KINDS[("Building", "Obstacle").index(tool)]
            self.push(lambda: self.model.propose_add_box(kind, (x, y)))
        elif tool == "Select":
            self.select_at(x, y)
        elif tool == "Path":
            self.pending.append((x, y))
            self.status.setText(f"path: {len(self.pending)} point(s); Finish path when done")
            self.redraw()
        elif not self.pending:  # Group or Camera: the first of two clicks
            self.pending = [(x, y)]
            self.status.setText("now click the goal" if tool == "Group"
                                else "now click where the camera looks")
            self.redraw()
        else:
            first, self.pending = self.pending[0], []
            if tool == "Group":
                self.push(lambda: self.model.propose_spawn_group(self.count_box.value(),
                                                                 first, (x, y)))
            else:
                height = self.height_box.value()
                self.push(lambda: self.model.propose_camera_keyframe(
                    self.current_frame(), (*first, height), (x, y, 0.0)))

    def finish_path(self) -> None:
        points, self.pending = self.pending, []
        self.push(lambda: self.model.propose_path(self.group_box.value() - 1, points))

    def cancel_pending(self) -> None:
        self.pending = []
        self.redraw()

    def select_at(self, x: float, y: float) -> None:
        self.selection = self.model.item_at(x, y, KEYFRAME_PICK_M)
        self.redraw()

    def delete_selection(self) -> None:
        if self.selection is None:
            return
        kind, index = self.selection
        self.selection = None
        self.push(lambda: self.model.propose_delete(kind, index))

    def drag_box(self, kind: str, index: int, center: tuple[float, float],
                 size: tuple[float, float]) -> bool:
        """A box dragged (moved) or its handle pulled (resized) to ``center`` and ``size``."""
        self.selection = (kind, index)
        if np.allclose(size, getattr(self.model.scene, kind)[index].size):
            return self.push(lambda: self.model.propose_move_box(kind, index, center))
        return self.push(lambda: self.model.propose_resize_box(kind, index, size, center))

    def _box_dragged(self, kind: str, index: int, roi: pg.RectROI) -> None:
        (x0, y0), (w, d) = roi.pos(), roi.size()
        # after the ROI's own signal handling: the redraw replaces the ROI
        QTimer.singleShot(0, self, lambda: self.drag_box(kind, index,
                                                         (x0 + w / 2, y0 + d / 2), (w, d)))

    def _on_click(self, event) -> None:
        """Every left click on the map, also one that a marker under it accepted."""
        if event.button() != Qt.MouseButton.LeftButton:
            return
        point = self.plot.getPlotItem().vb.mapSceneToView(event.scenePos())
        self.click(point.x(), point.y())

    # -- simulation ------------------------------------------------------------------------

    def simulate(self) -> None:
        """The social force on the scene as it is now, off the main thread."""
        self._simulation += 1
        generation, scene = self._simulation, self.model.scene
        self.status.setText(f"simulating {scene.agents} people for {scene.frames} frames…")

        def done(tracks: Tracks) -> None:
            if generation == self._simulation:
                self.tracks = tracks
                self.status.setText(f"simulated {len(tracks.ids)} people")
                self.show_tracks(tracks)
                self.redraw()

        self.run_in_pool(lambda: simulate(scene), done,
                         lambda message: self.status.setText(f"simulation failed: {message}"))

    def render(self) -> None:
        if self.model.path is None:
            self.model.save(scratch_folder(self.host) / "scene.json")
        self.render_scene(self.model.path)

    # -- drawing ---------------------------------------------------------------------------

    def redraw(self) -> None:
        for item in self._items:
            self.plot.removeItem(item)
            item.deleteLater()  # now, on this thread: never later by the GC on a worker's
        self._items = []
        scene = self.model.scene
        self.group_box.setMaximum(max(1, len(scene.groups)))
        width, depth = scene.ground.size
        self._add(pg.PlotDataItem(*_rect_outline(-width / 2, -depth / 2, width, depth),
                                  pen=pg.mkPen((160, 160, 160), style=Qt.PenStyle.DashLine)))
        for kind in BOX_KINDS:
            for index, box in enumerate(getattr(scene, kind)):
                x0, y0, x1, y1 = box.bounds()
                chosen = self.selection == (kind, index)
                roi = pg.RectROI((x0, y0), (x1 - x0, y1 - y0), movable=True, removable=False,
                                 pen=pg.mkPen(SELECTED_PEN if chosen else BOX_PENS[kind],
                                              width=2))
                roi.sigRegionChangeFinished.connect(
                    lambda r, k=kind, i=index: self._box_dragged(k, i, r))
                self._add(roi)
        for index, group in enumerate(scene.groups):
            (cx, cy), (sw, sd) = group.spawn_center, group.spawn_size
            color = tuple(int(255 * c) for c in group.color)
            area = SELECTED_PEN if self.selection == ("groups", index) else color
            self._add(pg.PlotDataItem(*_rect_outline(cx - sw / 2, cy - sd / 2, sw, sd),
                                      pen=pg.mkPen(area, style=Qt.PenStyle.DotLine)))
            route = np.array([group.spawn_center, *group.waypoints, group.goal])
            self._add(pg.PlotDataItem(route[:, 0], route[:, 1], pen=pg.mkPen(color, width=2),
                                      symbol="o", symbolSize=5, symbolBrush=color))
            label = pg.TextItem(f"group {index + 1} ({group.count})", color=color)
            label.setPos(cx, cy)
            self._add(label)
        self._draw_camera()
        if self.pending:
            points = np.array(self.pending)
            self._add(pg.PlotDataItem(points[:, 0], points[:, 1], symbol="x",
                                      pen=pg.mkPen((255, 255, 255), style=Qt.PenStyle.DashLine)))
        self._draw_tracks()
        self.changed.emit()

    def _draw_camera(self) -> None:
        path = self.model.camera_path()
        self._add(pg.PlotDataItem(path[:, 0], path[:, 1], pen=pg.mkPen((240, 120, 200))))
        for index, key in enumerate(self.model.scene.camera):
            chosen = self.selection == ("camera", index)
            color = SELECTED_PEN if chosen else (240, 120, 200)
            self._add(pg.PlotDataItem([key.position[0], key.look_at[0]],
                                      [key.position[1], key.look_at[1]],
                                      pen=pg.mkPen(color, style=Qt.PenStyle.DashLine)))
            self._add(pg.ScatterPlotItem([key.position[0]], [key.position[1]], symbol="t",
                                         size=12, brush=pg.mkBrush(color)))

    def _draw_tracks(self) -> None:
        if self.tracks is None:
            self.track_lines.setData([], [])
            self.people.setData([], [])
            return
        pieces = [np.vstack([xy, [np.nan, np.nan]])
                  for _, xy in self.tracks.per_pedestrian().values()]
        lines = np.vstack(pieces)
        self.track_lines.setData(lines[:, 0], lines[:, 1])
        self.show_frame(self.current_frame())

    def show_frame(self, index: int) -> None:
        """The simulated people at frame ``index`` (the clock's)."""
        if self.tracks is None:
            return
        frames = self.tracks.frames
        _, xy = self.tracks.positions_at(int(frames[min(index, len(frames) - 1)]))
        self.people.setData(xy[:, 0], xy[:, 1])

    def _add(self, item: Any) -> None:
        self.plot.addItem(item)
        self._items.append(item)

    def closeEvent(self, event) -> None:
        self._unsubscribe_scene()
        super().closeEvent(event)


def _rect_outline(x0: float, y0: float, width: float, depth: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    xs = np.array([x0, x0 + width, x0 + width, x0, x0])
    ys = np.array([y0, y0, y0 + depth, y0 + depth, y0])
    return xs, ys


def scratch_folder(host: Any) -> Path:
    """The workspace's ``crowd`` folder (or a run folder when the host has no workspace)."""
    workspace = getattr(host, "workspace_path", None)
    return Path(workspace()) / "crowd" if callable(workspace) else Path(
        host.run_dir("crowd-edits"))
