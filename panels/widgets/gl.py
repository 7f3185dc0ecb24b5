"""OpenGL shared by the panels with a 3-D view: the check that OpenGL can draw here, and the
widget around a vispy canvas that the 3-D views build on."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QWidget


def gl_problem() -> str | None:
    """Why OpenGL cannot draw a 3-D view here (pyqtgraph needs 2.1), or None when it can."""
    from PySide6.QtGui import QOffscreenSurface, QOpenGLContext

    context = QOpenGLContext()
    if not context.create():
        return "no OpenGL context can be created"
    surface = QOffscreenSurface()
    surface.setFormat(context.format())
    surface.create()
    version = context.format().version()
    context.makeCurrent(surface)
    context.doneCurrent()
    if not context.isOpenGLES() and tuple(version) < (2, 1):
        return (f"OpenGL {version[0]}.{version[1]} here; the 3-D view needs 2.1 (Qt's "
                "offscreen platform offers 2.0: run with a display)")
    return None


class VispyView(QWidget):
    """A widget holding one vispy ``SceneCanvas`` (``canvas``) with a view (``view``) under a
    turntable camera; ``_scene`` is ``vispy.scene``, imported here so that vispy and OpenGL
    load only when a 3-D view is opened. The canvas is closed with the widget."""

    def __init__(self, size: tuple[int, int], bgcolor, fov: float,
                 parent: QWidget | None = None, **camera) -> None:
        super().__init__(parent)
        from vispy import app, scene

        app.use_app("pyside6")
        self._scene = scene
        self.canvas = scene.SceneCanvas(keys=None, size=size, bgcolor=bgcolor, show=False)
        self.view = self.canvas.central_widget.add_view()
        self.view.camera = scene.TurntableCamera(fov=fov, **camera)

    def snapshot(self) -> np.ndarray:
        """The rendered image (H, W, 4) RGBA, for tests and export."""
        return self.canvas.render()

    def closeEvent(self, event) -> None:
        self.canvas.close()
        super().closeEvent(event)
