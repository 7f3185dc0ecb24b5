"""LEF/DEF reading and writing: the real gcd design, hand-written corner cases, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from engine.vlsi import VlsiError
from engine.vlsi.def_ import SEG, VIA, def_text, parse_def, read_def, write_def
from engine.vlsi.lef import parse_lef, read_lef

TECH = """VERSION 5.8 ;
UNITS
  DATABASE MICRONS 1000 ;
END UNITS
LAYER m1
  TYPE ROUTING ;
  DIRECTION HORIZONTAL ;
  PITCH 0.2 ;
  WIDTH 0.1 ;
END m1
LAYER v1
  TYPE CUT ;
END v1
LAYER m2
  TYPE ROUTING ;
  DIRECTION VERTICAL ;
  PITCH 0.2 0.2 ;
  WIDTH 0.1 ;
END m2
VIA v12 DEFAULT
  LAYER m1 ;
    RECT -0.05 -0.05 0.05 0.05 ;
  LAYER v1 ;
    RECT -0.05 -0.05 0.05 0.05 ;
  LAYER m2 ;
    RECT -0.05 -0.05 0.05 0.05 ;
END v12
MACRO BUF
  CLASS CORE ;
  SIZE 1 BY 2 ;
  PIN A
    DIRECTION INPUT ;
    PORT
      LAYER m1 ;
        RECT 0.1 0.1 0.2 0.2 ;
    END
  END A
  PIN Z
    DIRECTION OUTPUT ;
    PORT
      LAYER m1 ;
        RECT 0.8 0.1 0.9 0.2 ;
    END
  END Z
  OBS
    LAYER m1 ;
      RECT 0.3 0.3 0.6 0.6 ;
  END
END BUF
END LIBRARY
"""

DESIGN = """VERSION 5.8 ;
DESIGN tiny ;
UNITS DISTANCE MICRONS 1000 ;
DIEAREA ( 0 0 ) ( 10000 10000 ) ;
GCELLGRID X 0 DO 11 STEP 1000 ;
GCELLGRID Y 0 DO 11 STEP 1000 ;
COMPONENTS 2 ;
    - u1 BUF + PLACED ( 1000 1000 ) N ;
    - u2 BUF + FIXED ( 5000 1000 ) FS + SOURCE DIST ;
END COMPONENTS
PINS 1 ;
    - in + NET a + DIRECTION INPUT + USE SIGNAL
      + LAYER m2 ( -50 -50 ) ( 50 50 ) + PLACED ( 100 0 ) N ;
END PINS
SPECIALNETS 1 ;
    - VDD ( * VDD ) + USE POWER
      + ROUTED m1 200 + SHAPE STRIPE ( 0 500 ) ( 10000 500 )
      NEW m2 200 + SHAPE STRIPE ( 500 0 ) ( 500 * ) v12 DO 2 BY 1 STEP 1000 0 ;
END SPECIALNETS
NETS 2 ;
    - a ( PIN in ) ( u1 A ) + USE SIGNAL
      + ROUTED m1 ( 100 0 50 ) ( * 1100 ) ( 1100 * ) v12 ( * 3000 )
      NEW m2 ( 1100 3000 ) RECT ( -50 -50 50 50 ) ;
    - b ( u1 Z ) ( u2 A )
      + ROUTED m1 ( 1800 1100 ) ( 5100 * 0 ) + USE CLOCK ;
END NETS
END DESIGN
"""


def tiny(lef=True):
    return parse_def(DESIGN, "tiny.def", parse_lef(TECH, "tech.lef") if lef else None)


# -- LEF ------------------------------------------------------------------------------------------

def test_lef_tech_and_lazy_macros():
    lef = parse_lef(TECH, "tech.lef")
    assert lef.dbu_per_micron == 1000
    assert [layer.name for layer in lef.routing_layers] == ["m1", "m2"]
    assert lef.layers["m2"].direction == "VERTICAL" and lef.layers["m2"].pitch == 0.2
    assert lef.vias["v12"].layers == ["m1", "v1", "m2"] and lef.vias["v12"].default
    assert lef.macro_names == ["BUF"] and not lef._macros  # located, not parsed yet
    buf = lef.macro("BUF")
    assert buf.size == (1.0, 2.0) and buf.pins["Z"].direction == "OUTPUT"
    assert buf.pins["A"].shapes == [("m1", (0.1, 0.1, 0.2, 0.2))]
    assert buf.obstructions == [("m1", (0.3, 0.3, 0.6, 0.6))]
    with pytest.raises(KeyError, match="no MACRO INV"):
        lef.macro("INV")


def test_lef_missing_end_names_file_and_line():
    broken = TECH.replace("END m1\n", "")
    with pytest.raises(VlsiError, match=r"^tech.lef: line 10: LAYER m1 \(line 5\) has no "
                                         "END m1 before LAYER"):
        parse_lef(broken, "tech.lef")
    line = _line_of(TECH, "MACRO BUF")
    with pytest.raises(VlsiError, match=rf"tech.lef: line {line}: MACRO BUF has no END BUF"):
        parse_lef(TECH.replace("END BUF", "END BUFX"), "tech.lef")
    with pytest.raises(VlsiError, match="VIA v12 uses layer m3, which no LAYER defines"):
        parse_lef(TECH.replace("LAYER m2 ;", "LAYER m3 ;"), "tech.lef")


def test_real_nangate45_lef(gcd_lef):
    assert gcd_lef.dbu_per_micron == 2000 and len(gcd_lef.layers) == 22
    assert len(gcd_lef.vias) == 27 and len(gcd_lef.via_rules) == 19
    assert len(gcd_lef.macro_names) == 135 and len(gcd_lef.routing_layers) == 10
    metal1 = gcd_lef.layers["metal1"]
    assert (metal1.direction, metal1.pitch, metal1.width) == ("HORIZONTAL", 0.14, 0.07)
    assert gcd_lef.macro("AND2_X1").pins["ZN"].direction == "OUTPUT"
    assert gcd_lef.macro("AND2_X1").obstructions


# -- DEF ------------------------------------------------------------------------------------------

def test_def_sections_and_wiring():
    d = tiny()
    assert (d.name, d.dbu_per_micron, d.die_area) == ("tiny", 1000, (0, 0, 10000, 10000))
    assert d.gcell_grid == {"X": (0, 11, 1000), "Y": (0, 11, 1000)}
    assert [(c.name, c.status, c.x, c.orient, c.options) for c in d.components] == [
        ("u1", "PLACED", 1000, "N", []), ("u2", "FIXED", 5000, "FS", ["SOURCE DIST"])]
    pin = d.pins[0]
    assert (pin.net, pin.direction, pin.ports[0].shapes) == ("a", "INPUT",
                                                              [("m2", (-50, -50, 50, 50))])
    vdd, a, b = d.nets
    assert vdd.special and vdd.use == "POWER" and not a.special
    assert a.pins == [("PIN", "in"), ("u1", "A")] and b.use == "CLOCK"
    segments, vias = d.net_wiring(1)
    m1, m2 = d.layer_names.index("m1"), d.layer_names.index("m2")
    # '*' repeats the previous coordinate; after the via the wire continues on m2; the first
    # point's extension (50) is kept on the segment that starts there
    assert segments[:, [1, 2, 3, 4, 5, 7]].tolist() == [
        [m1, 100, 0, 100, 1100, 50], [m1, 100, 1100, 1100, 1100, -1],
        [m2, 1100, 1100, 1100, 3000, -1]]
    assert vias[:, [VIA["layer"], VIA["x"], VIA["y"]]].tolist() == [[m1, 1100, 1100]]
    assert d.patches.tolist() == [[1, m2, 1050, 2950, 1150, 3050]]
    vdd_segments, vdd_vias = d.net_wiring(0)
    assert vdd_segments[:, SEG["width"]].tolist() == [200, 200]
    assert vdd_vias[:, VIA["x"]].tolist() == [500, 1500]  # DO 2 BY 1 STEP 1000 0
    assert d.net_wiring(2)[0][0, SEG["ext2"]] == 0


def test_def_round_trip_preserves_everything(tmp_path):
    d = tiny()
    again = read_def(write_def(d, tmp_path / "out.def"), parse_lef(TECH, "tech.lef"))
    assert again.summary() == d.summary()
    for name in ("segments", "vias_placed", "patches"):
        assert np.array_equal(getattr(again, name), getattr(d, name)), name
    assert again.nets == d.nets and again.components == d.components and again.pins == d.pins


def test_summary_counts_signal_wiring_apart_from_power():
    """The panel's status line reads this: "nets" are signal nets, so are the routed nets,
    segments and vias counted with them; the power grid is counted on its own."""
    summary = tiny().summary()
    assert (summary["nets"], summary["routed_nets"], summary["segments"], summary["vias"]) == (
        2, 2, 4, 1)
    assert (summary["special_nets"], summary["special_segments"],
            summary["special_vias"]) == (1, 2, 2)


def _wiring_by_net(d):
    out = {}
    for row in d.segments.tolist():
        out.setdefault(d.nets[row[0]].name, []).append(
            ("wire", d.layer_names[row[1]], *row[2:]))
    for row in d.vias_placed.tolist():
        out.setdefault(d.nets[row[0]].name, []).append(
            ("via", d.layer_names[row[1]], d.via_names[row[2]], *row[3:]))
    return {name: sorted(items, key=str) for name, items in out.items()}


def test_real_gcd_counts_and_round_trip(gcd_design, gcd_lef, gcd_paths, tmp_path):
    d = gcd_design
    signal = np.array([not n.special for n in d.nets])
    assert len(d.nets) - signal.sum() == 2 and signal.sum() == 439
    assert len(d.components) == 1877 and len(d.pins) == 54 and len(d.vias) == 6
    assert signal[d.segments[:, 0]].sum() == 2051
    assert signal[d.vias_placed[:, 0]].sum() == 2358
    routed = {d.nets[i].name for i in d.segments[:, 0]} | {d.nets[i].name
                                                          for i in d.vias_placed[:, 0]}
    assert sum(not d.nets[d.net_index(n)].special for n in routed) == 404
    assert (d.summary()["routed_nets"], d.summary()["segments"], d.summary()["vias"]) == (
        404, 2051, 2358)
    used = {d.via_names[v] for v in d.vias_placed[signal[d.vias_placed[:, 0]], VIA["via"]]}
    assert used == {"via1_4", "via1_7", "via2_5", "via3_2", "via4_0", "via5_0", "via6_0"}
    assert d.gcell_grid == {"X": (0, 47, 4200), "Y": (0, 49, 4200)}
    again = read_def(write_def(d, tmp_path / "gcd.def"), gcd_lef)
    assert _wiring_by_net(again) == _wiring_by_net(d)
    assert [(n.name, n.pins) for n in again.nets] == [(n.name, n.pins) for n in d.nets]
    assert again.components == d.components and again.pins == d.pins
    assert def_text(again) == def_text(d)


# -- errors name the file and the line ------------------------------------------------------------

def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_undefined_layer_and_via_are_errors_with_the_line():
    lef = parse_lef(TECH, "tech.lef")
    bad = DESIGN.replace("NEW m2 ( 1100 3000 )", "NEW m7 ( 1100 3000 )")
    line = _line_of(bad, "NEW m7")
    with pytest.raises(VlsiError, match=rf"^x.def: line {line}: layer m7 is not defined in "
                                         "tech.lef"):
        parse_def(bad, "x.def", lef)
    parse_def(bad, "x.def")  # without a LEF any name goes
    bad_via = DESIGN.replace("( 1100 * ) v12", "( 1100 * ) v99")
    with pytest.raises(VlsiError, match=rf"line {_line_of(bad_via, 'v99')}: via v99"):
        parse_def(bad_via, "x.def", lef)
    with pytest.raises(VlsiError, match="cell NAND is not defined"):
        parse_def(DESIGN.replace("u2 BUF", "u2 NAND"), "x.def", lef)


@pytest.mark.parametrize("section", ["COMPONENTS", "PINS", "SPECIALNETS", "NETS"])
def test_missing_end_names_the_section_and_its_line(section):
    bad = DESIGN.replace(f"END {section}\n", "")
    line = _line_of(bad, f"\n{section} ") + 1
    with pytest.raises(VlsiError, match=rf"^x.def: line {line}: {section} section has no "
                                         f"END {section}"):
        parse_def(bad, "x.def")


@pytest.mark.parametrize("change, message", [
    (("UNITS DISTANCE MICRONS 1000", "UNITS DISTANCE 1000"), "expected UNITS DISTANCE MICRONS"),
    (("( 1800 1100 ) ( 5100 * 0 )", "( 1800 1100 ) ( 5100 * 0"), "malformed point"),
    (("( 1800 1100 )", "( 18x0 1100 )"), "expected a number, found '18x0'"),
    (("- b ( u1 Z )", "b ( u1 Z )"), "expected '- name ...' in NETS"),
    (("+ USE CLOCK", "USE CLOCK"), "unexpected 'CLOCK' after via USE"),
    (("( u2 A )\n", "( u2 A ) USE\n"), "expected '\\+ option', found 'USE'"),
    (("END NETS", "END NETZ"), "NETS section has no END NETS"),
    (("( 10000 10000 ) ;\nGCELL", "( 10000 ;\nGCELL"), "expected DIEAREA"),
    (("( 10000 10000 ) ;\nGCELL", "( 10000 10000 ;\nGCELL"), "expected DIEAREA"),
    (("DIEAREA ( 0 0 ) ( 10000 10000 )", "DIEAREA ( 0 0 )"), "expected DIEAREA"),
])
def test_malformed_def_errors(change, message):
    bad = DESIGN.replace(*change)
    with pytest.raises(VlsiError, match=rf"^x.def: line \d+: .*{message}"):
        parse_def(bad, "x.def")


@pytest.mark.parametrize("text", ["", "  \n", "# only a comment\n"])
def test_an_empty_def_or_lef_is_an_error(text, tmp_path):
    for suffix, read in ((".def", read_def), (".lef", read_lef)):
        path = tmp_path / f"empty{suffix}"
        path.write_text(text)
        with pytest.raises(VlsiError, match=rf"empty{suffix}: the file is empty"):
            read(path)


def test_real_design_with_an_undefined_layer(gcd_paths, gcd_lef, tmp_path):
    text = gcd_paths[1].read_text()
    target = "NEW metal3 ( 46550 93940 ) ( 51490 * )"
    bad = tmp_path / "bad.def"
    bad.write_text(text.replace(target, target.replace("metal3", "metal33")))
    with pytest.raises(VlsiError, match=rf"bad.def: line {_line_of(text, target)}: layer "
                                         "metal33 is not defined in .*Nangate45.lef"):
        read_def(bad, gcd_lef)
    with pytest.raises(VlsiError, match="no such file|cannot read"):
        read_lef(tmp_path / "missing.lef")


@pytest.mark.parametrize("old, new, problem", [
    ("PITCH 0.2 ;", "PITCH 0 ;", "LAYER m1 PITCH must be positive, found 0"),
    ("WIDTH 0.1 ;\nEND m1", "WIDTH -0.1 ;\nEND m1", "LAYER m1 WIDTH must be positive"),
    ("PITCH 0.2 ;", "PITCH nan ;", "expected a finite number, found 'nan'"),
])
def test_lef_values_that_parse_but_describe_no_layer_are_refused_with_the_line(old, new,
                                                                                problem):
    broken = TECH.replace(old, new, 1)
    line = _line_of(broken, new.split("\n")[0])
    with pytest.raises(VlsiError, match=rf"^tech.lef: line {line}: {problem}"):
        parse_lef(broken, "tech.lef")


def test_a_def_declaring_more_items_than_the_element_budget_is_refused_with_the_line(
        monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_ELEMENTS", "1")
    with pytest.raises(VlsiError, match="tiny.def: line 7: over the element count budget of "
                                        "1 elements .COMPONENTS declares 2") as refused:
        tiny()
    assert "STUDIO_MAX_ELEMENTS" in str(refused.value)
    monkeypatch.setenv("STUDIO_MAX_ELEMENTS", "2")
    assert len(tiny().components) == 2


@pytest.mark.parametrize("reader, name", [(read_def, "big.def"), (read_lef, "big.lef")])
def test_a_text_file_over_the_size_budget_is_refused_before_it_is_read(tmp_path, monkeypatch,
                                                                      reader, name):
    path = tmp_path / name
    path.write_text(DESIGN if name.endswith(".def") else TECH)
    monkeypatch.setenv("STUDIO_MAX_TEXT_BYTES", str(path.stat().st_size - 1))
    with pytest.raises(VlsiError, match="text file size budget.*STUDIO_MAX_TEXT_BYTES"):
        reader(path)
    monkeypatch.setenv("STUDIO_MAX_TEXT_BYTES", str(path.stat().st_size))
    assert reader(path) is not None


def test_a_text_file_whose_parse_would_not_fit_in_memory_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "tiny.def"
    path.write_text(DESIGN)
    monkeypatch.setattr("engine.io.limits.available_memory_bytes", lambda: len(DESIGN) * 4)
    with pytest.raises(VlsiError, match="tiny.def: parsing its 0 MB needs about"):
        read_def(path)
