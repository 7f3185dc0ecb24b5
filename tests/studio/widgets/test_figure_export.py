"""Figures drawn for the page at the chosen resolution, caption optional, provenance inside."""

from __future__ import annotations

import re

import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from engine import provenance
from studio.widgets.figure_export import ExportChoice, export_widget, render_png


@pytest.fixture
def view(qapp):
    widget = QWidget()
    widget.setStyleSheet("background: white; color: black;")
    QVBoxLayout(widget).addWidget(QLabel("slice z=12 · t=24.0 s"))
    widget.resize(300, 150)
    yield widget
    widget.deleteLater()


def test_png_is_drawn_at_the_chosen_resolution_with_its_caption(view, tmp_path) -> None:
    plain = QImage.fromData(render_png(view, 192))
    assert (plain.width(), plain.height()) == (600, 300)  # twice the screen's pixels
    captioned = QImage.fromData(render_png(view, 288, "cursor (10, 20, 30) voxels"))
    assert captioned.width() == 900 and captioned.height() > 450
    assert round(captioned.dotsPerMeterX() * 0.0254) == 288


@pytest.mark.parametrize("suffix", ["png", "svg", "pdf"])
def test_every_format_carries_its_provenance(view, tmp_path, suffix) -> None:
    made = provenance.record(view={"time_point": 12})
    path = export_widget(view, ExportChoice(tmp_path / f"figure.{suffix}", dpi=192,
                                            caption=True), made, caption="t = 24.0 s")
    found = provenance.read(path)
    assert found["view"] == {"time_point": 12, "dpi": 192} and found["studio"] == made["studio"]
    assert not (tmp_path / f"figure.{suffix}.provenance.json").exists()  # inside the file
    if suffix == "pdf":  # a valid incremental update: the last startxref points at an xref
        data = path.read_bytes()
        offset = int(re.findall(rb"startxref\s+(\d+)", data)[-1])
        assert data[offset:offset + 4] == b"xref" and data.rstrip().endswith(b"%%EOF")


def test_an_unwritable_place_is_named(view, tmp_path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match="figure.png"):
        export_widget(view, ExportChoice(tmp_path / "file" / "figure.png"), {})
    with pytest.raises(ValueError, match="figure.tiff"):
        export_widget(view, ExportChoice(tmp_path / "figure.tiff"), {})


def test_a_pyqtgraph_view_is_drawn_too(qapp, tmp_path) -> None:
    """pyqtgraph's views replace ``render`` with one of another signature."""
    import pyqtgraph as pg

    plot = pg.PlotWidget()
    plot.plot([0, 1, 2], [2, 0, 1])
    plot.resize(200, 120)
    try:
        path = export_widget(plot, ExportChoice(tmp_path / "curve.png", dpi=192), {"studio": "x"})
        assert QImage(str(path)).width() == 400
    finally:
        plot.deleteLater()
