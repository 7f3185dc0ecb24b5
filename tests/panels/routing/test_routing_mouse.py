"""Editing wires with the mouse on the canvas (the small two-net design, no LEF: the track
pitch is 0.1 µm): a drag moves the picked wire by whole pitches as one undoable edit and the
short check follows it; a drag in "Add wire" mode (or with Shift) draws a wire; Delete removes
the picked one; a drag anywhere else pans."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from engine.vlsi.def_ import SEG
from panels.routing.view import RoutingPanel

LEFT = Qt.MouseButton.LeftButton
MOVE_INTERVAL_MS = 1000 // pg.getConfigOption("mouseRateLimit") + 5


@pytest.fixture
def small(panel, small_def) -> RoutingPanel:
    assert panel.open_design(small_def, None)
    panel.canvas.box.setRange(QRectF(0, 0, 10, 10), padding=0)
    QApplication.processEvents()
    return panel


def _at(panel: RoutingPanel, x: float, y: float) -> QPoint:
    """The canvas viewport pixel of a point in microns."""
    canvas = panel.canvas
    return canvas.mapFromScene(canvas.box.mapViewToScene(QPointF(x, y)))


def _drag(panel: RoutingPanel, start: tuple[float, float], end: tuple[float, float],
          shift: bool = False, steps: int = 6) -> None:
    """Press at ``start``, move there in steps, release at ``end`` (microns)."""
    viewport = panel.canvas.viewport()
    modifier = Qt.KeyboardModifier.ShiftModifier if shift else Qt.KeyboardModifier.NoModifier
    QTest.mousePress(viewport, LEFT, modifier, _at(panel, *start))
    for k in range(1, steps + 1):
        f = k / steps
        point = _at(panel, start[0] + f * (end[0] - start[0]), start[1] + f * (end[1] - start[1]))
        if shift:  # QTest moves carry no modifiers; a held Shift is in the move events
            QApplication.sendEvent(viewport, QMouseEvent(
                QEvent.Type.MouseMove, QPointF(point), viewport.mapToGlobal(QPointF(point)),
                Qt.MouseButton.NoButton, LEFT, modifier))
        else:
            QTest.mouseMove(viewport, point)
        # pyqtgraph drops moves that come faster than its mouseRateLimit (100 Hz): a drag
        # made of such moves is only a click
        QTest.qWait(MOVE_INTERVAL_MS)
    QTest.mouseRelease(viewport, LEFT, modifier, _at(panel, *end))
    QApplication.processEvents()


def _wires(panel: RoutingPanel, name: str) -> np.ndarray:
    design = panel.model.design
    return design.net_wiring(design.net_index(name))[0][:, [SEG["x1"], SEG["y1"], SEG["x2"],
                                                            SEG["y2"]]]


def test_dragging_a_wire_moves_it_by_pitches_flags_the_short_and_undoes(small, host) -> None:
    model = small.model
    small.select_net("b", focus=False)
    before = _wires(small, "b").copy()
    assert model.shorts(model.selected) == []
    _drag(small, (4.0, 1.4), (4.0, 1.03))  # 0.37 µm down: four 0.1 µm pitches, onto net a
    moved = _wires(small, "b")
    np.testing.assert_array_equal(moved, before + [0, -400, 0, -400])
    assert host.history.stack.count() == 1  # one edit for the whole drag
    assert "a" in {other for other, _, _ in model.shorts(model.selected)}
    assert len(small.canvas.shorts.data) >= 1 and "short" in small.check_info.text()
    assert small.canvas.drawn_points(small.canvas.preview) == 0  # the preview is gone
    host.history.stack.undo()
    np.testing.assert_array_equal(_wires(small, "b"), before)
    assert model.shorts(model.selected) == []
    assert len(small.canvas.shorts.data) == 0


def test_a_drag_off_the_selected_net_pans_instead(small, host) -> None:
    small.select_net("b", focus=False)
    before = _wires(small, "b").copy()
    x_range = small.canvas.box.viewRange()[0]
    _drag(small, (5.0, 8.0), (3.0, 8.0))
    np.testing.assert_array_equal(_wires(small, "b"), before)
    assert host.history.stack.count() == 0
    assert small.canvas.box.viewRange()[0][0] > x_range[0] + 1.0  # the view moved right


def test_drawing_a_wire_by_drag_then_delete_key_and_undo(small, host) -> None:
    model = small.model
    small.select_net("a", focus=False)
    small.layer_box.setCurrentText("metal3")
    count = len(_wires(small, "a"))
    small.mode_box.setCurrentText("Add wire")
    _drag(small, (2.0, 5.0), (6.0, 5.15))  # mostly horizontal: the straight leg
    wires = _wires(small, "a")
    assert len(wires) == count + 1
    assert [2000, 5000, 6000, 5000] in wires.tolist()
    assert host.history.stack.count() == 1
    small.mode_box.setCurrentText("Select")
    QTest.mouseClick(small.canvas.viewport(), LEFT, Qt.KeyboardModifier.NoModifier,
                     _at(small, 4.0, 5.0))
    assert small.element is not None and small.element[1][1:5] == [2000, 5000, 6000, 5000]
    QTest.keyClick(small.canvas.viewport(), Qt.Key.Key_Delete)
    assert len(_wires(small, "a")) == count and host.history.stack.count() == 2
    host.history.stack.undo()
    assert [2000, 5000, 6000, 5000] in _wires(small, "a").tolist()
    _drag(small, (2.0, 7.0), (2.1, 9.0), shift=True)  # Shift draws in Select mode too
    assert [2000, 7000, 2000, 9000] in _wires(small, "a").tolist()
    assert model.last_check is not None


def test_panning_reuses_one_wide_frame_until_the_view_settles(small, qtbot) -> None:
    canvas, raster = small.canvas, small.canvas.raster
    QApplication.processEvents()
    drawn = raster.rasterised
    for k in range(1, 6):  # five pan steps at one zoom
        canvas.box.setRange(QRectF(0.2 * k, 0.1 * k, 10, 10), padding=0)
        QApplication.processEvents()
    assert raster.rasterised - drawn == 1  # the frame beyond the view, made once
    image = canvas.grab().toImage()
    point = _at(small, 4.0, 1.4)  # net b's wire is where the view now puts it
    colours = {image.pixelColor(point.x(), point.y() + dy).name() for dy in (-1, 0, 1)}
    assert small.model.style("metal2").colour in colours
    qtbot.waitUntil(lambda: raster.rasterised - drawn == 2, timeout=2000)  # then exact again
    ruler = canvas.getAxis("bottom")
    qtbot.waitUntil(lambda: ruler.picture is not None, timeout=2000)  # ticks laid out anew
    assert ruler.range[0] == pytest.approx(canvas.box.viewRange()[0][0])
