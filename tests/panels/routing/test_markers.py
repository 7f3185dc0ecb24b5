"""The route canvas's markers (issue 30): our checks find each planted fault of a small design
(with a LEF: width, spacing, pitch) and nothing on its clean nets; net tables sort naturally;
unrouted multi-pin nets are told apart from one-pin nets; markers step, zoom and highlight,
are waived through the undo history (autosaved, replayed on reopening); exported as CSV and a
KLayout ``.lyrdb`` that reads back; imported reports (``.lyrdb``, TritonRoute DRC) for another
design, with unknown layers or outside the die are listed as mismatches and never drawn; go to
coordinates or a name."""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from engine.vlsi.def_ import read_def
from engine.vlsi.lef import read_lef
from engine.vlsi.markers import Marker, natural_key, read_report, write_markers
from panels.routing.checks import design_markers, unrouted_multi_pin
from panels.routing.commands import SCOPE, RoutingState, register
from panels.routing.model import RouteModel
from panels.routing.view import RoutingPanel
from studio.commands import CommandRefused, CommandRegistry

LEF = """VERSION 5.8 ;
UNITS
  DATABASE MICRONS 1000 ;
END UNITS
LAYER metal2
  TYPE ROUTING ;
  DIRECTION VERTICAL ;
  PITCH 0.1 ;
  WIDTH 0.07 ;
  SPACING 0.07 ;
END metal2
END LIBRARY
"""


def _pin(name: str, net: str, x: int, y: int) -> str:
    return (f"    - {name} + NET {net} + DIRECTION INPUT + USE SIGNAL\n"
            f"        + LAYER metal2 ( -35 -35 ) ( 35 35 ) + PLACED ( {x} {y} ) N ;\n")


# resp_msg[15] and resp_msg[2] overlap (a short; [2] is also off the metal2 tracks every
# 0.1 µm); resp_msg[1] is in two pieces (an open) and 0.03 µm from sp (spacing < 0.07 µm);
# o's wire misses its pin (an open); c has two pins and no wiring; d has one pin.
PINS = [("p15", "resp_msg[15]", 1100, 1100), ("p2", "resp_msg[2]", 1150, 5100),
        ("p1", "resp_msg[1]", 1300, 1100), ("ps", "sp", 1400, 1100),
        ("pc1", "c", 15000, 15000), ("pc2", "c", 17000, 15000), ("pd", "d", 3000, 15000),
        ("po", "o", 5000, 5000)]
DEF = ("VERSION 5.8 ;\nDIVIDERCHAR \"/\" ;\nBUSBITCHARS \"[]\" ;\nDESIGN marks ;\n"
       "UNITS DISTANCE MICRONS 1000 ;\nDIEAREA ( 0 0 ) ( 20000 20000 ) ;\n"
       "TRACKS X 100 DO 199 STEP 100 LAYER metal2 ;\nCOMPONENTS 0 ;\nEND COMPONENTS\n"
       f"PINS {len(PINS)} ;\n" + "".join(_pin(*p) for p in PINS) + "END PINS\nNETS 7 ;\n"
       "    - resp_msg[15] ( PIN p15 ) + ROUTED metal2 ( 1100 1100 ) ( 1100 5100 ) ;\n"
       "    - resp_msg[2] ( PIN p2 ) + ROUTED metal2 ( 1150 1100 ) ( 1150 5100 ) ;\n"
       "    - resp_msg[1] ( PIN p1 ) + ROUTED metal2 ( 1300 1100 ) ( 1300 5100 )\n"
       "      NEW metal2 ( 1300 6000 ) ( 1300 8000 ) ;\n"
       "    - sp ( PIN ps ) + ROUTED metal2 ( 1400 1100 ) ( 1400 5100 ) ;\n"
       "    - c ( PIN pc1 ) ( PIN pc2 ) ;\n    - d ( PIN pd ) ;\n"
       "    - o ( PIN po ) + ROUTED metal2 ( 10000 1100 ) ( 10000 3000 ) ;\n"
       "END NETS\nEND DESIGN\n")

EXPECTED = {("short", ("resp_msg[15]", "resp_msg[2]")), ("open", ("resp_msg[1]",)),
            ("open", ("o",)), ("unrouted", ("c",)), ("off-track", ("resp_msg[2]",)),
            ("spacing", ("resp_msg[1]", "sp"))}

DRC = """[INFO] TritonRoute DRC report
  violation type: Short
    srcs: net:resp_msg[15] net:resp_msg[2]
    bbox = ( 1.065, 3.0 ) - ( 1.185, 3.2 ) on Layer metal2
  violation type: MetSpc
    srcs: sp resp_msg[1]
    bbox = ( 1.33, 2.0 ) - ( 1.37, 2.1 ) on Layer metal9
  violation type: MetSpc
    srcs: sp
    bbox = ( 31.0, 2.0 ) - ( 31.1, 2.1 ) on Layer metal2
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "marks.lef").write_text(LEF)
    (tmp_path / "marks.def").write_text(DEF)
    return tmp_path / "marks.lef", tmp_path / "marks.def"


@pytest.fixture
def windowless(history_host, files) -> tuple[CommandRegistry, RoutingState]:
    registry = register(CommandRegistry())
    state = RoutingState(RouteModel(), history_host)
    registry.bind(SCOPE, state)
    registry.run("routing.open_design", def_path=str(files[1]), lef_path=str(files[0]))
    state.design_opened()
    registry.run("routing.check_markers")
    return registry, state


def test_natural_order_reads_numbers() -> None:
    names = ["resp_msg[15]", "resp_msg[2]", "resp_msg[1]", "_10_", "_9_", "a"]
    assert sorted(names, key=natural_key) == ["_9_", "_10_", "a", "resp_msg[1]",
                                              "resp_msg[2]", "resp_msg[15]"]


def test_checks_find_each_planted_fault_and_nothing_else(files) -> None:
    lef = read_lef(files[0])
    design = read_def(files[1], lef)
    found = design_markers(design, lef)
    assert {(m.category, m.nets) for m in found} == EXPECTED
    spacing = next(m for m in found if m.category == "spacing")
    assert "0.030 µm apart < LEF SPACING 0.070" in spacing.text
    multi, single = unrouted_multi_pin(design)
    assert [design.nets[i].name for i in multi] == ["c"]
    assert [design.nets[i].name for i in single] == ["d"]
    # without the LEF there is no rule to check spacing against
    assert "spacing" not in {m.category for m in design_markers(read_def(files[1]), None)}


def test_gcell_overflow_marks_a_full_gcell(files) -> None:
    lef = read_lef(files[0])
    text = DEF.replace("TRACKS X", "GCELLGRID X 0 DO 10 STEP 2000 ;\n"
                       "GCELLGRID Y 0 DO 10 STEP 2000 ;\nTRACKS X")
    path = files[1].with_name("grid.def")
    path.write_text(text)
    found = [m for m in design_markers(read_def(path, lef), lef)
             if m.category == "gcell overflow"]
    # 2 µm GCells hold 20 metal2 tracks: the four wires in x 0-2 fill none
    assert found == []
    crowded = text.replace("NETS 7 ;", "NETS 30 ;").replace("END NETS", "".join(
        f"    - w{i} + ROUTED metal2 ( {300 + 60 * i} 12100 ) ( {300 + 60 * i} 13900 ) ;\n"
        for i in range(23)) + "END NETS")
    path.write_text(crowded)
    found = [m for m in design_markers(read_def(path, lef), lef)
             if m.category == "gcell overflow"]
    assert [m.box for m in found] == [(0.0, 12.0, 2.0, 14.0)]
    assert "demand 1.15" in found[0].text


def test_step_waive_undo_and_replay(windowless, history_host) -> None:
    registry, state = windowless
    names = [m.name for m in state.markers()]
    assert len(names) == len(EXPECTED)
    first = registry.run("routing.step_marker", step=1)
    assert first.startswith(f"1 of {len(names)}: {names[0]}")
    assert registry.run("routing.step_marker", step=-1).startswith(f"{len(names)} of")
    registry.run("routing.waive_marker", marker=names[0])
    assert state.model.waived == {names[0]}
    assert history_host.history.stack.count() == 1
    with pytest.raises(CommandRefused, match="already waived"):
        registry.run("routing.waive_marker", marker=names[0])
    state.current = None
    assert registry.run("routing.step_marker", step=1).startswith(
        f"1 of {len(names) - 1}: {names[1]}")  # a waived marker is skipped
    registry.run("routing.marker_category", category=state.markers()[0].category)
    with pytest.raises(CommandRefused, match="all 1 marker.s. of category off-track are "
                                             "waived"):
        registry.run("routing.step_marker", step=1)
    registry.run("routing.marker_category", category="")
    history_host.history.stack.undo()
    assert state.model.waived == set()
    history_host.history.stack.redo()
    # reopened, the autosaved waiver comes back with the design
    registry.run("routing.open_design", def_path=state.model.design.path)
    assert state.model.waived == set()
    assert state.design_opened() == 1
    assert state.model.waived == {names[0]}


def test_export_csv_and_lyrdb_read_back(windowless, tmp_path) -> None:
    registry, state = windowless
    names = [m.name for m in state.markers()]
    registry.run("routing.waive_marker", marker=names[1])
    registry.run("routing.export_markers", path=str(tmp_path / "m.csv"))
    with open(tmp_path / "m.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["category"] for r in rows] == [m.category for m in state.markers()]
    assert [r["waived"] for r in rows].count("yes") == 1
    registry.run("routing.export_markers", path=str(tmp_path / "m.lyrdb"))
    root = ElementTree.parse(tmp_path / "m.lyrdb").getroot()
    assert root.tag == "report-database" and root.findtext("top-cell") == "marks"
    categories = {c.findtext("name") for c in root.findall("categories/category")}
    assert categories == {c for c, _ in EXPECTED}
    assert root.find("items/item/values/value").text.startswith("box: (")
    back = read_report(tmp_path / "m.lyrdb")
    assert [m.name for m in back.markers] == names and back.mismatches == []
    assert [m.text for m in back.markers] == [m.text for m in state.markers()]
    # quotes and backslashes survive (KLayout escapes them in text values the same way)
    odd = Marker("short", ("a'b",), "metal2", (0, 0, 1, 1), "it's \\ here")
    write_markers(tmp_path / "odd.lyrdb", [odd], "marks", set())
    assert read_report(tmp_path / "odd.lyrdb").markers[0].text == "it's \\ here"
    with pytest.raises(CommandRefused, match=r"\.csv or \.lyrdb"):
        registry.run("routing.export_markers", path=str(tmp_path / "m.txt"))


def test_imports_list_mismatches_and_never_draw_them(windowless, tmp_path) -> None:
    registry, state = windowless
    drc = tmp_path / "route.drc"
    drc.write_text(DRC)
    said = registry.run("routing.import_markers", path=str(drc))
    assert "3 marker(s), 1 placed; 2 mismatch(es)" in said
    imported = [m for m in state.markers() if m.source == "route.drc"]
    assert sorted(m.category for m in imported) == ["MetSpc", "MetSpc", "Short"]
    problems = sorted(m.problem for m in imported if m.problem)
    assert problems == ["outside the die", "unknown layer metal9"]
    placed = next(m for m in imported if not m.problem)
    assert placed.nets == ("resp_msg[15]", "resp_msg[2]") and placed.layer == "metal2"
    with pytest.raises(CommandRefused, match="is not drawn: unknown layer metal9"):
        registry.run("routing.show_marker",
                     marker=next(m.name for m in imported if "metal9" in m.problem))
    # a report database of another design: every marker listed, none drawn
    other = tmp_path / "other.lyrdb"
    write_markers(other, [Marker("short", ("resp_msg[1]",), "metal2", (1, 1, 2, 2))], "gcd",
                  set())
    said = registry.run("routing.import_markers", path=str(other))
    report = state.reports[-1]
    assert "is for design 'gcd', the open one is 'marks'" in report.mismatches[0]
    assert all("design gcd" in m.problem for m in report.markers)
    # not a report: refused with the file's name, nothing changed
    junk = tmp_path / "junk.rpt"
    junk.write_text("hello\n")
    before = len(state.markers())
    with pytest.raises(CommandRefused, match="junk.rpt: not a DRC report"):
        registry.run("routing.import_markers", path=str(junk))
    broken = tmp_path / "broken.lyrdb"
    broken.write_text("<report-database><items>")
    with pytest.raises(CommandRefused, match="broken.lyrdb: not a KLayout report database"):
        registry.run("routing.import_markers", path=str(broken))
    assert len(state.markers()) == before


def _wait_for_markers(panel: RoutingPanel, qtbot) -> None:
    qtbot.waitUntil(lambda: panel.worker.idle() and bool(panel.state.checked), timeout=20000)
    QApplication.processEvents()


def test_panel_tables_browser_stepping_and_view_state(history_host, make_widget, qtbot,
                                                      files) -> None:
    panel = make_widget(RoutingPanel, history_host)
    panel.resize(1300, 800)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.open_design(files[1], files[0])
    _wait_for_markers(panel, qtbot)
    panel.nets_table.sortItems(0, Qt.SortOrder.AscendingOrder)
    names = [panel.nets_table.item(r, 0).text() for r in range(panel.nets_table.rowCount())]
    assert names.index("resp_msg[1]") < names.index("resp_msg[2]") < names.index(
        "resp_msg[15]")
    column = 5  # connectivity
    text = {panel.nets_table.item(r, 0).text(): panel.nets_table.item(r, column).text()
            for r in range(panel.nets_table.rowCount())}
    assert text["c"] == "unrouted (2 pins)" and text["d"] == "one pin: nothing to route"
    assert "1 unrouted multi-pin net(s), 1 one-pin net(s)" in panel.status.text()
    tab = panel.markers_tab
    assert tab.table.rowCount() == len(EXPECTED)
    assert "spacing 1" in tab.counts.text()
    QApplication.processEvents()
    tab.next_button.click()
    first = panel.state.markers()[0]
    assert panel.state.current == first.name
    (x0, x1), (y0, y1) = panel.canvas.box.viewRange()
    assert x0 <= first.box[0] and first.box[2] <= x1 and x1 - x0 < 10
    assert tab.view.selectionModel().selectedRows()[0].row() == 0
    assert panel.canvas.drawn_points(panel.canvas.marker_current) > 0
    tab.waive_button.click()
    assert first.name in panel.model.waived
    assert tab.table.data(tab.table.index(0, 5)) == "yes"
    drawn = panel.canvas.marker_boxes.getData()[0]
    assert len(drawn) == 8 * (len(EXPECTED) - 1)  # the waived one is no longer drawn
    panel.commands.run("routing.marker_category", category="open")
    assert tab.table.rowCount() == 2 and tab.category_box.currentText() == "open"
    state = panel.view_state()
    assert state["markers"]["waived"] == [first.name]
    again = make_widget(RoutingPanel, history_host)
    assert again.restore_view_state(state) == []
    _wait_for_markers(again, qtbot)
    assert again.state.category == "open" and again.state.current == first.name
    assert again.model.waived == {first.name}


def test_goto_coordinates_names_and_bad_targets(small, qtbot) -> None:
    small.commands.run("routing.goto", target="5, 6", size_um=2)
    (x0, x1), (y0, y1) = small.canvas.box.viewRange()
    # centred, at least 2 µm each way (the canvas keeps µm square)
    assert np.allclose([(x0 + x1) / 2, (y0 + y1) / 2], [5, 6], atol=0.05)
    assert min(x1 - x0, y1 - y0) == pytest.approx(2, abs=0.05)
    small.goto_edit.setText("(1.5 2.5)")
    small.goto_edit.returnPressed.emit()
    (x0, x1), _ = small.canvas.box.viewRange()
    assert abs((x0 + x1) / 2 - 1.5) < 0.05
    assert small.commands.run("routing.goto", target="pb") == "Pin pb at (1, 1.4) µm"
    assert small.commands.run("routing.goto", target="a") == "Net a"
    assert small.model.design.nets[small.model.selected].name == "a"
    with pytest.raises(CommandRefused, match="'1, two' is neither"):
        small.commands.run("routing.goto", target="1, two")


def test_export_has_a_scale_bar_and_markers_in_legend_and_provenance(history_host, make_widget,
                                                                      qtbot, files,
                                                                      tmp_path) -> None:
    from engine import provenance
    from panels.routing.canvas import nice_length

    assert [nice_length(v) for v in (0.3, 1, 4.9, 17, 0)] == [0.2, 1, 2, 10, 1.0]
    panel = make_widget(RoutingPanel, history_host)
    panel.resize(1300, 800)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.open_design(files[1], files[0])
    _wait_for_markers(panel, qtbot)
    panel.commands.run("routing.step_marker", step=1)
    legend = [name for name, _ in panel.canvas.legend_entries()]
    assert "markers" in legend and "marker stepped to" in legend
    panel.commands.run("routing.goto", target="6, 6", size_um=12)
    QApplication.processEvents()
    (x0, x1), _ = panel.canvas.box.viewRange()
    said = panel.commands.run("routing.export_figure", path=str(tmp_path / "f.png"), dpi=96)
    assert "provenance inside" in said
    view = provenance.read(tmp_path / "f.png")["view"]
    assert view["scale_bar_um"] == nice_length((x1 - x0) / 5)
    assert view["markers"] == {"listed": len(EXPECTED), "waived": 0, "reports": []}
    assert "marker stepped to" in view["legend"]
    # the bar and the legend are drawn for the figure only
    assert not [i for i in panel.canvas.box.childItems() if type(i).__name__ == "ScaleBar"]


def test_ruler_snaps_to_tracks_and_inspector_names_net_rule_and_marker(
        history_host, make_widget, qtbot, files) -> None:
    from PySide6.QtCore import QRectF
    from PySide6.QtTest import QTest

    from tests.panels.routing.test_routing_mouse import _at

    panel = make_widget(RoutingPanel, history_host)
    panel.resize(1300, 800)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.open_design(files[1], files[0])
    _wait_for_markers(panel, qtbot)
    said = panel.commands.run("routing.measure", from_um=[1.13, 2], to_um=[1.36, 5],
                              snap_layer="metal2")
    assert said.startswith("Ruler (1.1, 2) to (1.4, 5) µm: dx 0.3, dy 3, length 3.3 µm")
    assert panel.canvas.drawn_points(panel.canvas.ruler) == 2
    unsnapped = panel.commands.run("routing.measure", from_um=[1.13, 2], to_um=[1.36, 5])
    assert "dx 0.23" in unsnapped
    # Measure mode: two clicks make a ruler on the wire layer's tracks
    panel.canvas.box.setRange(QRectF(0, 0, 10, 10), padding=0)
    QApplication.processEvents()
    panel.mode_box.setCurrentText("Measure")
    panel.layer_box.setCurrentText("metal2")
    panel.click(2.04, 1.0)
    panel.click(2.96, 1.0)
    assert panel.status.text().startswith("Ruler (2, 1) to (3, 1) µm: dx 1, dy 0")
    text = panel.commands.run("routing.inspect", at_um=[1.1, 3.1], tolerance_um=0.05)
    assert "net resp_msg[15], wire on metal2 from (1.1, 1.1) to (1.1, 5.1) µm, width 0.07 µm" \
        in text
    assert "LEF metal2: WIDTH 0.07, SPACING 0.07, PITCH 0.1 µm vertical" in text
    assert "marker short resp_msg[15]/resp_msg[2]" in text
    assert "no wire or via within" in panel.commands.run("routing.inspect", at_um=[18, 2])
    # a right click on the canvas inspects what is under it
    QTest.mouseClick(panel.canvas.viewport(), Qt.MouseButton.RightButton,
                     Qt.KeyboardModifier.NoModifier, _at(panel, 1.1, 3.0))
    QApplication.processEvents()
    assert "net resp_msg[15]" in panel.status.text()
    menu = panel._inspector_menu
    assert [a.text() for a in menu.actions() if a.text()][-1].startswith("Export")
    menu.close()


def test_a_wire_narrower_than_the_lef_width_is_marked(files) -> None:
    lef = read_lef(files[0])
    text = DEF.replace("END NETS\n", "END NETS\nSPECIALNETS 1 ;\n    - VDD + USE POWER\n"
                       "      + ROUTED metal2 40 ( 18000 1000 ) ( 18000 9000 ) ;\n"
                       "END SPECIALNETS\n")
    path = files[1].with_name("narrow.def")
    path.write_text(text)
    found = [m for m in design_markers(read_def(path, lef), lef) if m.category == "width"]
    assert [(m.nets, m.layer, m.box) for m in found] == [(("VDD",), "metal2",
                                                         (18.0, 1.0, 18.0, 9.0))]
    assert "width 0.040 µm < LEF WIDTH 0.070 µm" in found[0].text
