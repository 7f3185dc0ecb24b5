"""Optional 3-D rendering of the current frame with vispy (maximum intensity or translucent).

Imported only when the user asks for the 3-D view: vispy and OpenGL stay out of start-up, and
a machine without OpenGL still gets every 2-D view.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from panels.widgets.gl import VispyView

MAX_SIDE = 128  # voxels per side sent to the GPU (larger volumes are strided down)
METHODS = ("mip", "translucent", "attenuated_mip")


class VolumeRenderView(VispyView):
    """A vispy canvas with one ``Volume`` visual and a turntable camera."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__((480, 480), "black", 30, parent)
        self._visual = None
        self.method_box = QComboBox()
        self.method_box.addItems(METHODS)
        self.method_box.currentTextChanged.connect(self.set_method)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("rendering"))
        controls.addWidget(self.method_box)
        controls.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addWidget(self.canvas.native, 1)

    def set_volume(self, frame: np.ndarray, voxel_mm: tuple[float, float, float],
                   levels: tuple[float, float]) -> None:
        """Show a display-oriented frame ``[R, A, S]`` with the 2-D views' contrast."""
        step = max(1, int(np.ceil(max(frame.shape) / MAX_SIDE)))
        data = np.nan_to_num(frame[::step, ::step, ::step]).astype(np.float32)
        zyx = np.ascontiguousarray(data.transpose(2, 1, 0))  # vispy indexes volumes (z, y, x)
        low, high = levels
        if self._visual is None:
            self._visual = self._scene.visuals.Volume(
                zyx, clim=(low, high), method=self.method_box.currentText(),
                parent=self.view.scene, cmap="grays")
        else:
            self._visual.set_data(zyx, clim=(low, high))
        scale = [v * step for v in voxel_mm]
        self._visual.transform = self._scene.transforms.STTransform(scale=scale)
        self.view.camera.set_range()
        self.canvas.update()

    def set_method(self, method: str) -> None:
        if self._visual is not None:
            self._visual.method = method
            self.canvas.update()
