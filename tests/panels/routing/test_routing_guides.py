"""Route guides in the routing panel: save the design's guides, open them as a translucent
overlay of the selected net (or every net) that follows the layers, and bad guide files."""

from __future__ import annotations

import pytest

from engine.vlsi.guide import RECT, read_guides
from panels.routing.canvas import GUIDE_ALPHA
from panels.routing.view import RoutingPanel


@pytest.fixture
def opened(panel, gcd) -> RoutingPanel:
    lef, def_ = gcd
    assert panel.open_design(def_, lef)
    return panel


def test_saved_guides_open_as_an_overlay_of_the_selected_net(opened, tmp_path) -> None:
    canvas, model = opened.canvas, opened.model
    path = tmp_path / "gcd.guide"
    assert opened.save_guides(path) and path.is_file()
    assert opened.open_file(path)
    guides = model.guides
    assert len(guides.nets) == 404 and str(len(guides.rects)) in opened.status.text()
    assert canvas.guide_count() == 0  # nothing selected: nothing drawn
    opened.select_net("_000_")
    mine = read_guides(path).net_rects("_000_")
    assert canvas.guide_count() == len(mine) > 0
    metal2 = guides.layer_names.index("metal2")
    brushes = canvas.guides.opts["brushes"]
    colour = brushes[0].color()
    assert colour.alpha() == GUIDE_ALPHA
    layer_colours = {s.name: s.colour for s in model.styles}
    assert {b.color().name() for b in brushes} <= set(layer_colours.values())
    opened.set_layer_visible("metal2", False)  # the guides follow the visible layers
    assert canvas.guide_count() == int((mine[:, RECT["layer"]] != metal2).sum())
    opened.set_layer_visible("metal2", True)
    opened.set_overlay("guides of all nets", True)
    assert canvas.guide_count() == len(guides.rects)
    xs = canvas.guides.opts["x0"]
    assert xs.min() >= 0 and xs.max() <= model.design.die_area[2] / 1000
    opened.set_overlay("guides", False)
    assert canvas.guide_count() == 0
    opened.set_overlay("guides", True)
    model.clear_guides()
    assert canvas.guide_count() == 0


def test_bad_guide_files_are_reported_and_change_nothing(opened, host, tmp_path) -> None:
    bad = tmp_path / "bad.guide"
    bad.write_text("_000_\n(\n42000 71400 46200 75600 metal1\n42000 x 46200 96600 metal2\n)\n")
    assert not opened.open_file(bad)
    assert "bad.guide: line 4: net _000_: expected an integer coordinate, found 'x'" in \
        host.errors[-1][1]
    other = tmp_path / "other.guide"
    other.write_text("nobody\n(\n0 0 10 10 metal1\n)\n")
    assert not opened.open_file(other)
    assert "none of its 1 nets is a net of design gcd" in host.errors[-1][1]
    unknown = tmp_path / "layer.guide"
    unknown.write_text("_000_\n(\n0 0 10 10 metal99\n)\n")
    assert not opened.open_file(unknown)
    assert "line 3: net _000_: layer metal99 is not defined" in host.errors[-1][1]
    assert opened.model.guides is None and opened.canvas.guide_count() == 0


def test_guides_need_an_open_design_and_saving_needs_a_lef(host, make_widget, tmp_path,
                                                          small_def) -> None:
    fresh = make_widget(RoutingPanel, host)
    good = tmp_path / "a.guide"
    good.write_text("a\n(\n0 0 2000 2000 metal2\n)\n")
    assert not fresh.open_file(good)
    assert "open the DEF the guides belong to first" in host.errors[-1][1]
    assert fresh.open_file(small_def)  # no LEF beside it
    assert fresh.open_file(good)  # without a LEF the layer names are not checked
    fresh.select_net("a")
    assert fresh.canvas.guide_count() == 1
    assert not fresh.save_guides(tmp_path / "out.guide")
    assert "need the DEF and its LEF" in host.errors[-1][1]
