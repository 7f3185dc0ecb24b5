"""The 3-D view (pyqtgraph.opengl): a ``Scene`` as spheres (``GLScatterPlotItem``, sizes in
Å) and line segments (``GLLinePlotItem``: bonds, or a protein's CA trace), a protein's cartoon
tube (``GLMeshItem``, shaded, coloured per vertex), plus an optional second scene in
translucent grey (the pinned structure, superposed for RMSD).

Imported only when the 3-D tab is opened, so OpenGL stays out of start-up and a machine
without OpenGL 2.1 keeps every other tab.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph.opengl as gl
from PySide6.QtGui import QVector3D
from PySide6.QtWidgets import QWidget

from panels.molecules.geometry import STYLES, Scene

OVERLAY = (0.75, 0.75, 0.75, 0.35)
HIGHLIGHT = (1.0, 1.0, 0.0, 1.0)


class MoleculeView3D(gl.GLViewWidget):
    """Drag to orbit, wheel to zoom (pyqtgraph's camera)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setBackgroundColor("k")
        self.atoms = gl.GLScatterPlotItem(pos=np.zeros((0, 3)), pxMode=False)
        self.sticks = gl.GLLinePlotItem(pos=np.zeros((0, 3)), mode="lines", width=3)
        self.overlay_atoms = gl.GLScatterPlotItem(pos=np.zeros((0, 3)), pxMode=False)
        self.overlay_sticks = gl.GLLinePlotItem(pos=np.zeros((0, 3)), mode="lines", width=2)
        for item in (self.sticks, self.atoms, self.overlay_sticks, self.overlay_atoms):
            self.addItem(item)
        self.highlight = gl.GLScatterPlotItem(pos=np.zeros((0, 3)), pxMode=False)
        self.addItem(self.highlight)
        self.cartoon = gl.GLMeshItem(smooth=True, shader="shaded", glOptions="opaque")
        self.cartoon.setVisible(False)
        self.addItem(self.cartoon)
        self.cartoon_vertices = 0  # vertices of the cartoon drawn now (tests read it)
        self.scene: Scene | None = None
        self.overlay: Scene | None = None

    def show_scene(self, scene: Scene, overlay: Scene | None = None,
                   keep_camera: bool = False, style: str = STYLES[0]) -> None:
        """Draw ``scene`` (and ``overlay`` in grey, already moved onto it) in ``style`` (for
        proteins); frame the camera unless ``keep_camera`` (a trajectory's next frame)."""
        self.scene, self.overlay = scene, overlay
        self.highlight_atoms([])
        line_width = 4 if scene.kind == "structure" else 3
        cartoon = scene.cartoon() if style != STYLES[0] else None
        atoms = cartoon is None or style == "cartoon + atoms"
        empty = np.zeros((0, 3))
        self.atoms.setData(pos=scene.positions if atoms else empty, color=scene.colours,
                           size=scene.sizes)
        self.sticks.setData(pos=scene.lines if cartoon is None else empty,
                            color=scene.line_colours, mode="lines", width=line_width)
        self.cartoon_vertices = len(cartoon.vertices) if cartoon is not None else 0
        self.cartoon.setVisible(bool(self.cartoon_vertices))
        if self.cartoon_vertices:
            self.cartoon.setMeshData(vertexes=cartoon.vertices, faces=cartoon.faces,
                                     vertexColors=cartoon.colours)
        self.overlay_atoms.setData(pos=overlay.positions if overlay else empty, color=OVERLAY,
                                   size=overlay.sizes if overlay else 1.0)
        self.overlay_sticks.setData(pos=overlay.lines if overlay else empty, color=OVERLAY,
                                    mode="lines", width=2)
        if keep_camera:
            return
        centre = scene.centre
        self.setCameraPosition(pos=QVector3D(*map(float, centre)),
                                    distance=3.0 * scene.extent + 4.0)

    def highlight_atoms(self, indices: list[int]) -> None:
        """Draw these atoms of the scene bigger, in yellow (a selected residue)."""
        if self.scene is None or not indices:
            self.highlight.setData(pos=np.zeros((0, 3)))
            return
        self.highlight.setData(pos=self.scene.positions[indices], color=HIGHLIGHT,
                               size=self.scene.sizes[indices] * 2.0)

    def snapshot(self, size: tuple[int, int] = (400, 300)) -> np.ndarray:
        """The view as an RGBA array (for tests and PNG export)."""
        return self.renderToArray(size)
