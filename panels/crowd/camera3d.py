"""A small 3-D view of the scene's camera path (vispy): the ground, the buildings and
obstacles, the simulated tracks, the keyframes and the interpolated path, with the camera of
the clock's frame marked (its position and its line of sight to the look-at point).

Imported only when the tab is opened and OpenGL can draw (``panels.widgets.gl.gl_problem``),
so start-up and machines without OpenGL keep every 2-D view.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QVBoxLayout, QWidget

from engine.io.crowd import Scene, Tracks
from panels.widgets.gl import VispyView

GROUND_RGBA = (0.35, 0.36, 0.34, 1.0)
BOX_RGBA = (0.75, 0.68, 0.6, 1.0)
PATH_RGBA = (0.95, 0.45, 0.8, 1.0)
TRACK_RGBA = (0.45, 0.85, 0.55, 0.8)
CURRENT_RGBA = (1.0, 0.85, 0.2, 1.0)
BOX_FACES = np.array([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4],
                      [1, 2, 6], [1, 6, 5], [2, 3, 7], [2, 7, 6], [3, 0, 4], [3, 4, 7]])


def boxes_mesh(scene: Scene) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (8K, 3), faces (12K, 3)) of the scene's buildings and obstacles."""
    vertices, faces = [], []
    for index, box in enumerate(scene.buildings + scene.obstacles):
        x0, y0, x1, y1 = box.bounds()
        corners = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]
        vertices.append([(x, y, z) for z in (0.0, box.height) for x, y in corners])
        faces.append(BOX_FACES + 8 * index)
    if not vertices:
        return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint32)
    return (np.concatenate(vertices).astype(np.float32),
            np.concatenate(faces).astype(np.uint32))


def track_segments(tracks: Tracks | None) -> tuple[np.ndarray, np.ndarray]:
    """(points (N, 3) at z = 0, index pairs (M, 2)) joining each walker's samples."""
    if tracks is None or not len(tracks.xy):
        return np.zeros((2, 3), np.float32), np.zeros((0, 2), np.uint32)
    points = np.c_[tracks.xy, np.zeros(len(tracks.xy))].astype(np.float32)
    same = np.flatnonzero(tracks.ped[1:] == tracks.ped[:-1])
    return points, np.c_[same, same + 1].astype(np.uint32)


class CameraPathView(VispyView):
    """``set_scene(scene, path, tracks)`` when the scene or the tracks change;
    ``set_camera(position, look_at)`` follows the clock."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__((420, 360), (0.1, 0.11, 0.13), 40, parent, elevation=35, azimuth=-30)
        visuals = self._scene.visuals
        self.ground = visuals.Mesh(color=GROUND_RGBA, parent=self.view.scene)
        self.boxes = visuals.Mesh(color=BOX_RGBA, shading=None, parent=self.view.scene)
        self.tracks = visuals.Line(color=TRACK_RGBA, parent=self.view.scene)
        self.path = visuals.Line(color=PATH_RGBA, width=2, parent=self.view.scene)
        self.keyframes = visuals.Markers(parent=self.view.scene)
        self.sight = visuals.Line(color=CURRENT_RGBA, width=2, parent=self.view.scene)
        self.current = visuals.Markers(parent=self.view.scene)
        self.current_position: np.ndarray | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.canvas.native, 1)

    def set_scene(self, scene: Scene, path: np.ndarray, tracks: Tracks | None) -> None:
        half_w, half_d = scene.ground.size[0] / 2, scene.ground.size[1] / 2
        ground = np.array([[-half_w, -half_d, 0], [half_w, -half_d, 0], [half_w, half_d, 0],
                           [-half_w, half_d, 0]], np.float32)
        self.ground.set_data(vertices=ground, faces=np.array([[0, 1, 2], [0, 2, 3]], np.uint32),
                             color=GROUND_RGBA)
        vertices, faces = boxes_mesh(scene)
        self.boxes.visible = bool(len(faces))
        if len(faces):
            self.boxes.set_data(vertices=vertices, faces=faces, color=BOX_RGBA)
        points, pairs = track_segments(tracks)
        self.tracks.visible = bool(len(pairs))
        if len(pairs):
            self.tracks.set_data(pos=points, connect=pairs)
        self.path.set_data(pos=path.astype(np.float32))
        keys = np.array([k.position for k in scene.camera], np.float32)
        self.keyframes.set_data(keys, face_color=PATH_RGBA, size=9, symbol="diamond")
        self.view.camera.set_range(x=(-half_w, half_w), y=(-half_d, half_d),
                                   z=(0, float(max(path[:, 2].max(), 1.0))))
        self.canvas.update()

    def set_camera(self, position: np.ndarray, look_at: np.ndarray) -> None:
        self.current_position = np.asarray(position, np.float32)
        self.current.set_data(self.current_position[None], face_color=CURRENT_RGBA, size=14)
        self.sight.set_data(pos=np.stack([position, look_at]).astype(np.float32))
        self.canvas.update()
