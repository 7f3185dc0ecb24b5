"""Issue 21, route canvas: a figure is drawn for the page (twice the screen's pixels by
default) with a legend of the colours it shows and the µm rulers, and says where it came
from (DEF, LEF, net, layers, zoom window, the run that routed it); saved DEFs and guides get a
provenance sidecar; Ctrl+E writes the canvas."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QColor, QImage

from engine import provenance
from engine.content import content_hash
from panels.routing.view import RoutingPanel
from studio.widgets import figure_export


@pytest.fixture
def opened(panel, gcd) -> RoutingPanel:
    lef, def_ = gcd
    assert panel.open_design(def_, lef)
    return panel


def _pixels(image: QImage) -> np.ndarray:
    """(H, W) ARGB values of an image."""
    image = image.convertToFormat(QImage.Format.Format_ARGB32)
    data = np.frombuffer(image.constBits(), dtype=np.uint32,
                         count=image.bytesPerLine() * image.height() // 4).copy()
    return data.reshape(image.height(), image.bytesPerLine() // 4)[:, :image.width()]


def _count(image: QImage, colour: str) -> int:
    return int((_pixels(image) == QColor(colour).rgba()).sum())


def _away_from_the_wires(panel: RoutingPanel) -> None:
    """A view beside the die: nothing of the design is drawn there."""
    panel.canvas.box.setRange(xRange=(500, 520), yRange=(500, 520), padding=0)


def test_the_figure_has_twice_the_pixels_a_legend_of_the_visible_layers_and_provenance(
        opened, gcd, tmp_path) -> None:
    lef, def_ = gcd
    opened.select_net("_100_")
    opened.set_layer_visible("metal1", False)
    _away_from_the_wires(opened)
    metal2 = opened.model.style("metal2").colour
    metal1 = opened.model.style("metal1").colour
    screen = opened.canvas.grab().toImage()
    assert _count(screen, metal2) == 0  # on screen the layer list is the legend

    written = opened.export_figure(tmp_path / "routes.png")

    image = QImage(str(written))
    assert (image.width(), image.height()) == (2 * opened.canvas.width(),
                                               2 * opened.canvas.height())
    assert _count(image, metal2) >= 100  # the legend's swatch, 2x: about 20 x 20 pixels
    assert _count(image, metal1) == 0  # a hidden layer is not in the legend
    record = provenance.read(written)
    sources = {entry["path"]: entry["hash"] for entry in record["sources"]}
    assert sources == {str(def_.resolve()): content_hash(def_.resolve()),
                       str(lef.resolve()): content_hash(lef.resolve())}
    view = record["view"]
    assert view["net"] == "_100_" and view["dpi"] == 192
    assert "metal1" in view["hidden_layers"] and "metal2" in view["layers"]
    assert "metal2" in view["legend"] and "metal1" not in view["legend"]
    (x0, x1), (y0, y1) = opened.canvas.box.viewRange()  # the aspect lock widens one axis
    assert view["window_um"] == {"x": [round(x0, 4), round(x1, 4)],
                                 "y": [round(y0, 4), round(y1, 4)]}
    assert x0 <= 500 and x1 >= 520 and y0 <= 500 and y1 >= 520
    assert view["def"] == str(def_) and view["lef"] == str(lef)
    assert opened.canvas.getPlotItem().getAxis("bottom").labelUnits == "µm"
    assert not [item for item in opened.canvas.box.childItems()
                if type(item).__name__ == "LegendItem"]  # gone from the screen again


def test_svg_and_pdf_carry_the_record_and_the_caption_is_under_the_figure(opened,
                                                                         tmp_path) -> None:
    opened.select_net("_100_")
    for suffix in ("svg", "pdf"):
        written = opened.export_figure(tmp_path / f"routes.{suffix}")
        assert provenance.read(written)["view"]["net"] == "_100_", suffix
    plain = QImage(str(opened.export_figure(tmp_path / "plain.png", dpi=96)))
    captioned = QImage(str(opened.export_figure(tmp_path / "caption.png", dpi=96,
                                                caption=True)))
    assert plain.width() == opened.canvas.width()
    assert captioned.height() > plain.height()
    assert "net _100_" in opened.info_line() and "µm" in opened.info_line()


def test_exporting_without_a_design_names_the_file(panel, tmp_path) -> None:
    with pytest.raises(ValueError, match="routes.png: open a DEF first"):
        panel.export_figure(tmp_path / "routes.png")
    assert not (tmp_path / "routes.png").exists()


def test_a_figure_of_routes_from_a_run_names_the_run(opened, host, gcd, tmp_path) -> None:
    opened.select_net("_100_")
    assert opened.route("maze")
    job = next(iter(opened.jobs))
    run_dir = Path(host.run_dir(job))
    (run_dir / "params.json").write_text(json.dumps(
        {"method": "chipstar.route", "params": {"router": "maze", "nets": "_100_"},
         "seed": 7}))
    (run_dir / "artifacts" / "routed.def").write_bytes(gcd[1].read_bytes())
    host.emit(job, "job_result", outputs={"def": "artifacts/routed.def"})
    host.emit(job, "job_state", state="succeeded", reason="")
    assert opened.model.prediction is not None

    record = provenance.read(opened.export_figure(tmp_path / "compared.png"))

    assert record["runs"] == [{"run_id": job, "method": "chipstar.route",
                               "params": {"router": "maze", "nets": "_100_"}, "seed": 7}]
    assert str((run_dir / "artifacts" / "routed.def").resolve()) in [
        entry["path"] for entry in record["sources"]]
    assert "predicted route" in record["view"]["legend"]


def test_saved_def_and_guides_get_a_provenance_sidecar(opened, gcd, tmp_path) -> None:
    lef, def_ = gcd
    opened.select_net("_100_")
    segments, _ = opened.model.design.net_wiring(opened.model.selected)
    assert opened.add_segment("metal3", (segments[0, 2], segments[0, 3]),
                              (segments[0, 2], segments[0, 3] + 1400))
    assert opened.save_def(tmp_path / "edited.def")
    record = provenance.read(tmp_path / "edited.def")
    assert record is not None and record["view"] == {"saved": "the DEF", "edited": True}
    assert [entry["path"] for entry in record["sources"]] == [str(def_.resolve()),
                                                              str(lef.resolve())]
    assert opened.save_guides(tmp_path / "gcd.guide")
    assert provenance.read(tmp_path / "gcd.guide")["view"]["saved"] == "the route guides"


def test_ctrl_e_writes_the_route_canvas(main_window, qtbot, gcd, tmp_path,
                                        monkeypatch) -> None:

    lef, def_ = gcd
    panel = main_window.open_panel("routing")
    assert panel.open_design(def_, lef)
    target = tmp_path / "ctrl-e.png"
    monkeypatch.setattr(figure_export, "ask_export",
                        lambda *args, **kwargs: figure_export.ExportChoice(target))

    main_window.export_current_plot()

    record = provenance.read(target)
    assert record["view"]["panel"] == "routing" and record["view"]["dpi"] == 192
    assert QImage(str(target)).width() == 2 * panel.canvas.width()
