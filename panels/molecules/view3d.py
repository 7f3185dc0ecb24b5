"""The 3-D view (pyqtgraph.opengl): a ``Scene`` as spheres (``GLScatterPlotItem``, sizes in
Å) and line segments (``GLLinePlotItem``: bonds, or a protein's CA trace), plus an optional
second scene in translucent grey (the pinned structure, superposed for RMSD).

Imported only when the 3-D tab is opened, so OpenGL stays out of start-up and a machine
without OpenGL 2.1 keeps every other tab.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph.opengl as gl
from PySide6.QtGui import QVector3D
from PySide6.QtWidgets import QWidget

from panels.molecules.geometry import Scene

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
        self.scene: Scene | None = None
        self.overlay: Scene | None = None

    def show_scene(self, scene: Scene, overlay: Scene | None = None) -> None:
        """Draw ``scene`` (and ``overlay`` in grey, already moved onto it); frame the camera."""
        self.scene, self.overlay = scene, overlay
        self.highlight_atoms([])
        line_width = 4 if scene.kind == "structure" else 3
        self.atoms.setData(pos=scene.positions, color=scene.colours, size=scene.sizes)
        self.sticks.setData(pos=scene.lines, color=scene.line_colours, mode="lines",
                            width=line_width)
        empty = np.zeros((0, 3))
        self.overlay_atoms.setData(pos=overlay.positions if overlay else empty, color=OVERLAY,
                                   size=overlay.sizes if overlay else 1.0)
        self.overlay_sticks.setData(pos=overlay.lines if overlay else empty, color=OVERLAY,
                                    mode="lines", width=2)
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
