"""PlotSpecView: engine plot specs drawn, live curves grown cheaply, exports with provenance."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
import pytest

from engine.plots import heatmap, plot, series
from studio.widgets.plot_view import (
    ExportError,
    PlotSpecView,
    read_png_provenance,
    read_svg_provenance,
)

SPEC = {
    "kind": "plot", "title": "loss", "xlabel": "step", "ylabel": "loss", "logx": False,
    "logy": True,
    "series": [
        {"name": "train", "x": [1, 2, 3, 4, 5], "y": [1.0, 0.5, None, 0.2, 0.1],
         "style": "line"},
        {"name": "points", "x": [1, 2, 3], "y": [0.3, 0.2, 0.1], "style": "scatter"},
        {"name": "steps", "x": [1, 3, 5], "y": [0.9, 0.4, 0.2], "style": "step"},
    ],
    "hlines": [{"y": 0.25, "name": "2/eta"}],
    "provenance": {"run_id": "20260101-000000-abcdef", "params": {"steps": 5}},
}


@pytest.fixture
def view(make_widget):
    widget = make_widget(PlotSpecView)
    widget.resize(480, 320)
    return widget


def test_set_spec_draws_every_series_with_none_as_gap(view):
    view.set_spec(SPEC)
    assert view.series_names() == ["train", "points", "steps"]
    assert view.point_count("train") == 5
    assert view.point_count("missing") == 0
    x, y = view._series["train"].item.getData()
    assert math.isnan(y[2]) and y[3] == pytest.approx(math.log10(0.2))  # drawn in log y
    assert view.provenance == SPEC["provenance"]
    assert view._plot.getAxis("left").logMode  # log y from the spec


def test_append_points_grows_the_curve_and_redraws_at_most_per_frame(view, qtbot):
    view.set_spec({"title": "live", "series": []})
    for step in range(1, 501):
        view.append_points("loss", [step], [1.0 / step])
    assert view.point_count("loss") == 500
    assert view.drawn_count("loss") == 0  # nothing drawn yet: it waits for the next frame
    qtbot.waitUntil(lambda: view.drawn_count("loss") == 500, timeout=2000)
    view.append_points("loss", np.arange(501, 1001), np.ones(500))
    view.flush()
    assert view.point_count("loss") == 1000
    assert view.drawn_count("loss") == 1000


def test_spec_round_trips_what_is_shown(view):
    view.set_spec(SPEC)
    view.append_points("train", [6], [0.05])
    again = view.spec()
    assert again["series"][0]["y"] == [1.0, 0.5, None, 0.2, 0.1, 0.05]
    assert again["hlines"] == SPEC["hlines"] and again["logy"] is True
    assert again["provenance"] == SPEC["provenance"]


def test_clear_and_mismatched_lengths(view):
    view.set_spec(SPEC)
    view.clear()
    assert view.series_names() == [] and view.provenance == {}
    with pytest.raises(ValueError, match="x values"):
        view.append_points("bad", [1, 2], [1])


@pytest.mark.parametrize("suffix, read", [(".png", read_png_provenance),
                                          (".svg", read_svg_provenance)])
def test_export_carries_provenance(view, tmp_path, suffix, read):
    view.set_spec(SPEC)
    target = view.export(tmp_path / f"figure{suffix}")
    assert target.stat().st_size > 1000
    assert read(target) == SPEC["provenance"]
    assert not list(tmp_path.glob(".figure*"))  # the temporary file was replaced


def test_png_export_of_a_never_shown_view_is_laid_out(make_widget, tmp_path):
    from PySide6.QtGui import QImage

    view = make_widget(PlotSpecView, SPEC)
    image = QImage(str(view.export(tmp_path / "hidden.png")))
    assert image.width() >= 640 * 2 and image.height() >= 420 * 2
    assert not view.isVisible()


def test_svg_export_is_valid_xml_with_the_title(view, tmp_path):
    import xml.dom.minidom

    view.set_spec(SPEC)
    document = xml.dom.minidom.parse(str(view.export(tmp_path / "f.svg")))
    assert document.getElementsByTagName("title")[0].firstChild.data == "loss"
    assert document.getElementsByTagName("metadata")


def test_export_refuses_formats_it_cannot_write(view, tmp_path):
    with pytest.raises(ExportError, match="PDF is rendered by the engine"):
        view.export(tmp_path / "figure.pdf")


BARS = plot("gaps", [series("ours", [0, 1, 2], [0.1, 0.3, -0.1], "bar",
                            ([0.0, 0.2, -0.2], [0.2, 0.4, 0.0])),
                     series("paper", [0, 1, 2], [0.15, 0.25, 0.0], "bar"),
                     series("trend", [0, 1, 2], [0.0, 0.1, 0.2], "line",
                            ([-0.1, 0.0, 0.1], [0.1, 0.2, 0.3]))],
            xticks=[(0, "content"), (1, "function"), (2, "delimiters")])


def test_bars_stand_side_by_side_with_error_bars_and_named_ticks(view):
    view.set_spec(BARS)
    bars = [item for item in view._static_items if isinstance(item, pg.BarGraphItem)]
    assert [bar.opts["name"] for bar in bars] == ["ours", "paper"]
    ours, paper = (np.asarray(bar.opts["x"]) for bar in bars)
    assert np.all(ours < paper) and np.allclose(paper - ours, bars[0].opts["width"])
    errors = [item for item in view._static_items if isinstance(item, pg.ErrorBarItem)]
    assert len(errors) == 1 and np.allclose(errors[0].opts["top"], [0.1, 0.1, 0.1])
    assert any(isinstance(item, pg.FillBetweenItem) for item in view._static_items)
    assert view._plot.getAxis("bottom")._tickLevels[0][1] == (1.0, "function")
    again = view.spec()
    assert {c["name"] for c in again["series"]} == {"ours", "paper", "trend"}
    assert next(c for c in again["series"] if c["name"] == "trend")["hi"] == [0.1, 0.2, 0.3]
    assert again["xticks"][2] == [2.0, "delimiters"]
    view.clear()
    assert view._static_items == [] and view.series_names() == []


def test_heatmap_spans_its_cells_marks_them_and_draws_curves_over_it(view):
    grid = np.linspace(0.0, 2.0, 5)
    spec = heatmap("map", np.outer(grid, np.ones(3)), x=[0.0, 1.0, 2.0], y=grid,
                   marks=[(4, 2)], zlabel="rate",
                   curves=[series("boundary", [0.0, 2.0], [2.0, 0.0])])
    view.set_spec(spec)
    image = next(item for item in view._static_items if isinstance(item, pg.ImageItem))
    assert image.image.shape == (5, 3) and tuple(image.getLevels()) == (0.0, 2.0)
    rect = image.mapRectToParent(image.boundingRect())
    assert (rect.left(), rect.right()) == pytest.approx((-0.5, 2.5))
    assert (rect.top(), rect.bottom()) == pytest.approx((-0.25, 2.25))
    outline = [item for item in view._static_items if isinstance(item, pg.PlotDataItem)
               and item not in [s.item for s in view._series.values()]]
    xs = outline[-1].getData()[0]
    assert np.nanmin(xs) == pytest.approx(1.5) and np.nanmax(xs) == pytest.approx(2.5)
    assert view.series_names() == ["boundary"]
    assert view.spec()["kind"] == "heatmap" and view.spec()["marks"] == [[4, 2]]


def test_symmetric_heatmap_centres_its_colour_scale(view, tmp_path):
    view.set_spec(heatmap("signed", [[-1.0, 3.0], [0.5, None]], xlabels=["a", "b"],
                          ylabels=["u", "v"], symmetric=True, colormap="RdBu_r"))
    image = next(item for item in view._static_items if isinstance(item, pg.ImageItem))
    assert tuple(image.getLevels()) == (-3.0, 3.0)
    assert view.export(tmp_path / "map.png").stat().st_size > 1000


def test_axis_labels_keep_their_own_units_at_any_scale(view, qtbot):
    """A spectrum in Hz (values below 0.5) is labelled as the spec says, with no scale
    factor that pyqtgraph would otherwise append ("frequency (Hz) (x0.001)")."""
    view.set_spec(plot("power spectra", [series("real", [0.01, 0.1, 0.37], [3.0, 2.0, 1.0])],
                       xlabel="frequency (Hz)", ylabel="power"))
    view.show()
    qtbot.waitExposed(view)
    qtbot.waitUntil(lambda: view._plot.viewRange()[0][1] < 0.5)  # auto-ranged to the data
    for axis, label in (("bottom", "frequency (Hz)"), ("left", "power")):
        shown = view._plot.getAxis(axis).labelString()
        assert label in shown and "x0" not in shown and "(x" not in shown, shown
