"""Route guides: reading, writing, errors that name the line, guides derived from DEF wiring."""

from __future__ import annotations

import numpy as np
import pytest

from engine.vlsi import VlsiError
from engine.vlsi.def_ import SEG, VIA
from engine.vlsi.guide import RECT, guides_from_design, parse_guides, read_guides, write_guides
from engine.vlsi.lef import parse_lef

SMALL = """net_a
(
0 0 4200 8400 metal1
4200 0 0 4200 metal2
)

net_b
(
)
net_a
(
100 200 300 400 metal1
)
"""


def _boxes(guides) -> set[tuple]:
    return {(guides.nets[n], guides.layer_names[layer], x1, y1, x2, y2)
            for n, layer, x1, y1, x2, y2 in guides.rects.tolist()}


def test_reads_blocks_orders_corners_and_merges_repeated_nets():
    guides = parse_guides(SMALL, "small.guide")
    assert guides.nets == ["net_a", "net_b"] and guides.layer_names == ["metal1", "metal2"]
    assert _boxes(guides) == {("net_a", "metal1", 0, 0, 4200, 8400),
                              ("net_a", "metal2", 0, 0, 4200, 4200),
                              ("net_a", "metal1", 100, 200, 300, 400)}
    assert len(guides.net_rects("net_a")) == 3 and len(guides.net_rects("net_b")) == 0
    assert guides.summary()["rectangles_per_layer"] == {"metal1": 2, "metal2": 1}


@pytest.mark.parametrize(("text", "message"), [
    ("", "the file is empty"),
    ("  \n\n", "the file is empty"),
    ("n1\n(\n0 0 1 1 metal1\n", r"net n1: no '\)' closing the guides opened at line 2 "
                                r"\(the file ends\)"),
    ("n1\n(\n0 0 1 1 metal1\nn2\n(\n)\n", r"line 4: net n1: no '\)' closing the guides opened "
                                          r"at line 2"),
    ("n1\n0 0 1 1 metal1\n)\n", r"line 2: net n1: expected '\(' after the net name"),
    ("n1\n", r"net n1: expected '\(' after the net name, found the end of the file"),
    ("n1\n(\n0 0 1.5 1 metal1\n)\n", r"line 3: net n1: expected an integer coordinate, "
                                     r"found '1.5'"),
    ("n1\n(\n0 0 1 metal1\n)\n", r"line 3: net n1: expected 'x1 y1 x2 y2 layer'"),
    ("0 0 1 1 metal1\n", r"line 1: expected a net name, found '0 0 1 1 metal1'"),
])
def test_malformed_guides_name_the_file_and_line(text, message):
    with pytest.raises(VlsiError, match=message) as caught:
        parse_guides(text, "bad.guide")
    assert str(caught.value).startswith("bad.guide: ")


def test_layers_are_checked_against_a_lef(tmp_path):
    lef = parse_lef("UNITS\n  DATABASE MICRONS 1000 ;\nEND UNITS\nLAYER metal1\n  TYPE ROUTING ;"
                    "\n  DIRECTION HORIZONTAL ;\nEND metal1\nLAYER metal2\n  TYPE ROUTING ;\n"
                    "  DIRECTION VERTICAL ;\nEND metal2\n", "tech.lef")
    path = tmp_path / "ok.guide"
    path.write_text(SMALL)
    assert len(read_guides(path, lef).rects) == 3
    path.write_text(SMALL.replace("100 200 300 400 metal1", "100 200 300 400 poly"))
    with pytest.raises(VlsiError, match=r"ok.guide: line 12: net net_a: layer poly is not "
                                        r"defined in tech.lef"):
        read_guides(path, lef)
    with pytest.raises(VlsiError, match="missing.guide: cannot read it"):
        read_guides(tmp_path / "missing.guide")


def test_gcd_guides_cover_every_wire_and_via_and_round_trip(tmp_path, gcd_design, gcd_lef):
    guides = guides_from_design(gcd_design, gcd_lef)
    assert len(guides.nets) == gcd_design.summary()["routed_nets"] == 404
    start, _, step = gcd_design.gcell_grid["X"]
    rects = guides.rects
    interior = rects[(rects[:, RECT["x1"]] > 0) & (rects[:, RECT["x2"]] < 197400)]
    assert np.all((interior[:, RECT["x1"]] - start) % step == 0)  # GCell-aligned
    assert np.all((interior[:, RECT["x2"]] - start) % step == 0)
    routing = [layer.name for layer in gcd_lef.routing_layers]
    for name in ("_000_", "clk", "resp_msg[3]"):
        index = gcd_design.net_index(name)
        mine = guides.net_rects(name)
        segments, vias = gcd_design.net_wiring(index)
        for row in segments.tolist():  # both ends of every wire lie in a guide on its layer
            layer = routing.index(gcd_design.layer_names[row[SEG["layer"]]])
            for x, y in ((row[SEG["x1"]], row[SEG["y1"]]), (row[SEG["x2"]], row[SEG["y2"]])):
                assert _inside(mine, layer, x, y), (name, row)
        for row in vias.tolist():  # a via has a guide on its statement's layer
            layer = routing.index(gcd_design.layer_names[row[VIA["layer"]]])
            assert _inside(mine, layer, row[VIA["x"]], row[VIA["y"]]), (name, row)
    path = write_guides(guides, tmp_path / "gcd.guide")
    again = read_guides(path, gcd_lef)
    assert again.nets == guides.nets and _boxes(again) == _boxes(guides)
    assert len(again.rects) == len(guides.rects)


def _inside(rects: np.ndarray, layer: int, x: int, y: int) -> bool:
    on = rects[rects[:, RECT["layer"]] == layer]
    return bool(np.any((on[:, RECT["x1"]] <= x) & (x <= on[:, RECT["x2"]])
                       & (on[:, RECT["y1"]] <= y) & (y <= on[:, RECT["y2"]])))


def test_guides_need_a_gcell_grid(gcd_design, gcd_lef):
    from dataclasses import replace

    with pytest.raises(ValueError, match="no GCELLGRID"):
        guides_from_design(replace(gcd_design, gcell_grid={}), gcd_lef)
