"""OpenGL checks shared by the panels with a 3-D view (pyqtgraph.opengl needs OpenGL 2.1)."""

from __future__ import annotations


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
