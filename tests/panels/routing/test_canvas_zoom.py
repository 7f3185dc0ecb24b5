"""Zooming the route canvas (the small two-net design): zoom frames scale a kept image instead
of rasterising the wires, a zoom past ``ZOOM_LIMIT`` rasterises once, and when the view rests
the frame is exact again (the pixels of a fresh draw)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRectF
from PySide6.QtWidgets import QApplication

from panels.routing.canvas import LayerRaster, LayoutCanvas
from panels.routing.view import RoutingPanel
from tests.panels.routing.test_routing_mouse import _at


@pytest.fixture
def small(request, monkeypatch, small_def) -> RoutingPanel:
    """The design shown whole, at rest; the view rests a second after it stops (not 150 ms),
    so a loaded machine cannot settle it between two steps of a test."""
    monkeypatch.setattr(LayerRaster, "SETTLE_MS", 1000)
    panel = request.getfixturevalue("panel")
    assert panel.open_design(small_def, None)
    _show(panel.canvas, 5.0, 5.0, 10.0)
    qtbot = request.getfixturevalue("qtbot")
    qtbot.waitUntil(lambda: not panel.canvas.raster._settle.isActive(), timeout=3000)
    QApplication.processEvents()  # the exact frame of the rested view
    return panel


def _show(canvas: LayoutCanvas, x: float, y: float, size: float) -> None:
    """A ``size`` µm square view centred on (x, y), painted."""
    canvas.box.setRange(QRectF(x - size / 2, y - size / 2, size, size), padding=0)
    QApplication.processEvents()


def test_zoom_frames_scale_the_exact_image_until_the_view_rests(small, qtbot) -> None:
    canvas, raster = small.canvas, small.canvas.raster
    drawn, painted = raster.rasterised, raster.painted
    for k in range(1, 5):  # four steps in, 1.75x in all (under ZOOM_LIMIT), the view inside
        _show(canvas, 5.0 - k / 4, 5.0 - 1.5 * k / 4, 10.0 / 1.15 ** k)  # the first one's
    zooming = canvas.grab().toImage()  # a repaint while moving shows the same zoom frame
    assert raster.painted - painted >= 5 and raster.rasterised == drawn  # nothing rasterised
    point = _at(small, 4.0, 1.4)  # net b's wire is where the zoomed view puts it
    colours = {zooming.pixelColor(point.x(), point.y() + dy).name() for dy in (-1, 0, 1)}
    assert small.model.style("metal2").colour in colours
    qtbot.waitUntil(lambda: raster.rasterised - drawn == 1, timeout=5000)  # rested: exact
    exact = canvas.grab().toImage()
    assert exact != zooming  # the zoom frame was the old image magnified (2-pixel wires)
    raster.set_layers(raster.layers)  # forget every kept image: the next paint is fresh
    QApplication.processEvents()
    fresh = canvas.grab().toImage()
    assert raster.rasterised - drawn == 2 and fresh == exact


def test_a_zoom_past_the_limit_rasterises_once_and_zooming_back_reuses(small) -> None:
    canvas, raster = small.canvas, small.canvas.raster
    drawn = raster.rasterised
    _show(canvas, 5.0, 5.0, 10.0 / 3)  # 3x in: past ZOOM_LIMIT, drawn beyond the view
    assert raster.rasterised - drawn == 1
    _show(canvas, 5.0, 5.0, 10.0 / 3.3)  # a little further in
    _show(canvas, 5.0, 5.0, 5.0)  # 1.5x out: inside the image drawn beyond the view
    _show(canvas, 5.0, 5.0, 10.0)  # back to the start: its exact image is still kept
    assert raster.rasterised - drawn == 1
