"""The route canvas panel offscreen on the real gcd design: layers, search and highlight, edits
through the window's real undo history (and its autosave), live checks, DEF round trip, the
router job, predicted vs reference overlay, bad files."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt

from engine.vlsi.def_ import SEG, read_def
from engine.vlsi.lef import read_lef
from panels.routing import MANIFEST
from panels.routing.model import decode
from panels.routing.view import RoutingPanel
from tests.panels.conftest import FakeHost


@pytest.fixture
def opened(panel, gcd) -> RoutingPanel:
    lef, def_ = gcd
    assert panel.open_design(def_, lef)
    return panel


def _signal_rows(panel: RoutingPanel, layer: str) -> np.ndarray:
    design = panel.model.design
    rows = design.segments
    special = panel.model.special[rows[:, SEG["net"]]]
    return rows[~special & (rows[:, SEG["layer"]] == design.layer_names.index(layer))]


def _frame(canvas) -> np.ndarray:
    """The ARGB frame the raster draws for the canvas as it is now."""
    from PySide6.QtGui import QTransform

    view = canvas.viewport()
    item_to_view = canvas.raster.deviceTransform(canvas.viewportTransform())
    assert isinstance(item_to_view, QTransform)
    return canvas.raster.render_frame(item_to_view, view.width(), view.height()).copy()


def _layer_code(canvas, name: str) -> int:
    """The frame value of a layer's pixels (its colour)."""
    return canvas.raster.colour_of(name)


def test_manifest_names_the_view_factory() -> None:
    import importlib

    module, name = MANIFEST.factory.split(":")
    assert getattr(importlib.import_module(module), name) is RoutingPanel
    assert MANIFEST.formats == ("def", "lef", "guide") and MANIFEST.papers == ("chipstar",)
    assert MANIFEST.exports == ("png", "svg", "pdf", "def", "guide")


def test_opens_gcd_with_every_wire_batched_per_layer(opened) -> None:
    canvas, design = opened.canvas, opened.model.design
    for layer in ("metal1", "metal2", "metal3"):
        assert canvas.raster.count(layer) == len(_signal_rows(opened, layer))
    cuts = [s.name for s in opened.model.styles if s.kind == "cut"]
    assert sum(canvas.raster.count(cut) for cut in cuts) == len(design.vias_placed)
    assert canvas.raster.painted > 0
    assert canvas.drawn_points(canvas.components) == 8 * len(design.components)
    assert canvas.drawn_points(canvas.specials["metal1"]) > 0  # power rails, apart
    assert canvas.drawn_points(canvas.obstructions) > 0 and not canvas.obstructions.isVisible()
    assert {"metal1", "via1"} <= {opened.layer_tree.topLevelItem(i).text(0)
                                   for i in range(opened.layer_tree.topLevelItemCount())}
    assert "439 nets (404 routed), 2051 segments, 2358 vias" in opened.status.text()
    assert "power: 2 special nets, 65 segments, 279 vias" in opened.status.text()
    assert "Nangate45.lef" in opened.status.text()


def test_opening_the_paper_shows_the_shared_design(panel, gcd) -> None:
    panel.select_paper("chipstar")
    assert panel.model.design.name == "gcd" and panel.model.lef is not None
    assert panel.tabs.currentIndex() == 2


def test_the_host_open_path_finds_the_lef_beside_the_def(panel, gcd) -> None:
    assert panel.open_file(gcd[1])  # a DEF alone: its folder's one LEF comes with it
    assert panel.model.lef is not None
    assert panel.canvas.drawn_points(panel.canvas.components) > 0


def test_dropping_the_lef_and_def_opens_them(panel, gcd) -> None:
    from PySide6.QtCore import QMimeData, QPointF, QUrl
    from PySide6.QtGui import QDropEvent

    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(gcd[1])), QUrl.fromLocalFile(str(gcd[0]))])
    event = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, data,
                       Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    panel.dropEvent(event)
    assert panel.model.lef_path == str(gcd[0]) and panel.model.design.name == "gcd"


def test_layer_toggles_and_colours_change_what_is_drawn(opened) -> None:
    canvas = opened.canvas
    rows = _signal_rows(opened, "metal2")
    x, y = (rows[0, [SEG["x1"], SEG["y1"]]] + rows[0, [SEG["x2"], SEG["y2"]]]) / 2 / 2000
    metal2 = opened.layer_tree.topLevelItem(1)
    assert metal2.text(0) == "metal2"
    metal2.setCheckState(0, Qt.CheckState.Unchecked)  # as a click on its checkbox does
    assert not opened.model.style("metal2").visible
    assert not canvas.raster.layers["metal2"].visible and canvas.raster.layers["metal1"].visible
    frame = _frame(canvas)
    assert not (frame == _layer_code(canvas, "metal2")).any()
    opened.click(float(x), float(y), 0.01)  # a hidden wire is not picked
    assert opened.model.selected is None or opened.model.design.nets[
        opened.model.selected].name != opened.model.design.nets[rows[0, 0]].name
    opened.set_layer_visible("metal2", True)
    assert (_frame(canvas) == _layer_code(canvas, "metal2")).any()
    opened.click(float(x), float(y), 0.01)
    assert opened.model.selected == rows[0, SEG["net"]]
    opened.set_layer_colour("metal3", "#123456")
    assert canvas.raster.layers["metal3"].colour == "#123456"
    image = canvas.grab().toImage()
    assert any(image.pixelColor(i, j).name() == "#123456"
               for i in range(0, image.width(), 2) for j in range(0, image.height(), 2))
    opened.set_overlay("special nets", False)
    assert not canvas.specials["metal1"].isVisible()
    opened.set_overlay("congestion", True)
    assert canvas.heat.isVisible() and canvas.congestion_map.shape == (47, 49)
    total = canvas.congestion_map.sum()
    box = opened.overlay_boxes["congestion"]  # its label gives the colour scale's top
    assert box.text() == f"congestion (0 to {canvas.congestion_map.max():.2f} of track capacity)"
    opened.set_layer_visible("metal3", False)  # the heat map follows the visible layers
    assert canvas.congestion_map.sum() < total
    assert box.text() == f"congestion (0 to {canvas.congestion_map.max():.2f} of track capacity)"
    opened.set_overlay("congestion", False)
    assert box.text() == "congestion"


def test_search_highlights_the_net_tree_and_its_vias(opened) -> None:
    names = opened.search("_10")
    assert names and all("_10" in n for n in names)
    assert opened.net_list.count() == len(names)
    opened.net_list.setCurrentRow(names.index("_100_"))
    model = opened.model
    assert model.design.nets[model.selected].name == "_100_"
    segments, vias = model.design.net_wiring(model.selected)
    canvas = opened.canvas
    assert canvas.drawn_points(canvas.highlight) == 2 * len(segments)
    assert canvas.drawn_points(canvas.highlight_vias) == 8 * len(vias)
    assert "_100_" in opened.net_info.text() and "connected" in opened.check_info.text()
    assert canvas.drawn_points(canvas.snap_tree) > 0  # the GCell tree the tokens describe
    assert "GCell" in opened.snap_note.text()


def test_move_then_undo_restores_the_net_and_the_checks_follow(opened, host) -> None:
    model = opened.model
    opened.select_net("_100_")
    index = model.selected
    before = [a.copy() for a in model.design.net_wiring(index)]
    segment = model.segment_row(model.design.net_wiring(index)[0][0])
    x = (segment[1] + segment[3]) / 2 / 2000
    y = (segment[2] + segment[4]) / 2 / 2000
    opened.click(x, y, 0.05)
    assert opened.element == ("segment", segment)
    assert (f"Picked wire on {segment[0]} from ({segment[1] / 2000:.3f}, "
            f"{segment[2] / 2000:.3f}) to") in opened.check_info.text()  # µm, as the rulers
    assert opened.move_element(0, 2000)  # one micron up: off its vias
    assert not model.last_check.connectivity.connected
    assert "pieces" in opened.check_info.text() or "not reached" in opened.check_info.text()
    assert host.history.stack.count() == 1
    host.history.stack.undo()
    after = model.design.net_wiring(index)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    assert model.last_check.connectivity.connected
    host.history.stack.redo()
    assert not model.last_check.connectivity.connected
    host.history.stack.undo()
    from PySide6.QtGui import QKeyEvent

    opened.element = ("segment", segment)
    opened.keyPressEvent(QKeyEvent(QKeyEvent.Type.KeyPress, Qt.Key.Key_Right,
                                   Qt.KeyboardModifier.NoModifier))
    moved = opened.element[1]
    pitch = round(read_lef(opened.model.lef_path).layers[segment[0]].pitch * 2000)
    assert moved[1] - segment[1] == pitch and moved[3] - segment[3] == pitch


def test_a_wire_across_another_net_is_reported_as_a_short(opened) -> None:
    model = opened.model
    opened.select_net("_100_")
    victim = _signal_rows(opened, "metal2")
    victim = victim[victim[:, SEG["net"]] != model.selected][0]
    x, y = victim[SEG["x1"]], victim[SEG["y1"]]
    assert opened.add_segment("metal2", (x - 400, y), (x + 400, y))
    shorts = model.shorts(model.selected)
    assert model.design.nets[victim[SEG["net"]]].name in {other for other, _, _ in shorts}
    assert "short" in opened.check_info.text()
    assert len(opened.canvas.shorts.data) >= 1


def test_delete_a_via_disconnects_and_edits_autosave_and_restore(opened, host, gcd,
                                                                  make_widget) -> None:
    model = opened.model
    opened.select_net("_100_")
    _, vias = model.design.net_wiring(model.selected)
    via = model.via_row(vias[0])
    opened.element = ("via", via)
    assert opened.delete_element()
    assert not model.last_check.connectivity.connected
    saved = host.history.saved_edits(model.document)
    assert len(saved) == 1 and decode(saved[0]).remove_vias == [via]
    edited = [a.copy() for a in model.design.net_wiring(model.selected)]
    # a new panel on the same design replays the autosaved edit (crash recovery)
    again = make_widget(RoutingPanel, host)
    lef, def_ = gcd
    assert again.open_design(def_, lef)
    index = again.model.design.net_index("_100_")
    for a, b in zip(edited, again.model.design.net_wiring(index), strict=True):
        np.testing.assert_array_equal(a, b)
    assert "1 saved edit(s) restored" in again.status.text()


def test_adding_a_via_the_def_never_used_is_checked_too(opened) -> None:
    model = opened.model
    opened.select_net("_100_")
    unused = next(v for v in model.lef.vias.values()
                  if v.default and v.name not in model.design.via_names
                  and "metal1" in v.layers)
    segments, _ = model.design.net_wiring(model.selected)
    end = (int(segments[0, SEG["x1"]]), int(segments[0, SEG["y1"]]))
    assert opened.add_via(unused.name, end)
    assert model.design.via_names[-1] == unused.name
    assert model.last_check.vias == len(model.design.net_wiring(model.selected)[1])
    assert opened.check_info.text().startswith("Connectivity:")
    top = next(v for v in model.lef.vias.values() if v.default and "via9" in v.layers)
    assert opened.add_via(top.name, end)  # a cut layer gcd never used: listed and drawn
    assert "via9" in {opened.layer_tree.topLevelItem(i).text(0)
                      for i in range(opened.layer_tree.topLevelItemCount())}
    assert opened.canvas.raster.count("via9") == 1


def test_save_round_trips_through_the_engine_reader(opened, tmp_path, gcd) -> None:
    model = opened.model
    opened.select_net("_100_")
    segments, _ = model.design.net_wiring(model.selected)
    assert opened.add_segment("metal3", (segments[0, 2], segments[0, 3]),
                              (segments[0, 2], segments[0, 3] + 1400))
    target = tmp_path / "edited.def"
    assert opened.save_def(target)
    again = read_def(target, read_lef(gcd[0]))
    np.testing.assert_array_equal(again.segments, model.design.segments)
    np.testing.assert_array_equal(again.vias_placed, model.design.vias_placed)
    assert [n.name for n in again.nets] == [n.name for n in model.design.nets]


def test_a_bad_def_is_reported_with_file_and_line(panel, host, tmp_path, gcd) -> None:
    bad = tmp_path / "broken.def"
    bad.write_text("VERSION 5.8 ;\nDESIGN x ;\nUNITS DISTANCE MICRONS 1000 ;\nNETS 1 ;\n"
                   "    - n1 ( PIN a ) + ROUTED metal2 ( 0 0 ) ( 10 0 ) ;\n")
    assert panel.open_file(bad) is False
    title, message = host.errors[-1]
    assert str(bad) in message and "line 4" in message and "END NETS" in message
    unknown = tmp_path / "unknown_layer.def"
    unknown.write_text("VERSION 5.8 ;\nDESIGN x ;\nUNITS DISTANCE MICRONS 1000 ;\nNETS 1 ;\n"
                       "    - n1 ( PIN a ) + ROUTED metal99 ( 0 0 ) ( 10 0 ) ;\nEND NETS\n"
                       "END DESIGN\n")
    lef, def_ = gcd
    assert panel.open_design(unknown, lef) is False
    assert "metal99" in host.errors[-1][1] and str(unknown) in host.errors[-1][1]
    assert panel.model.design is None
    empty = tmp_path / "empty.def"
    empty.write_text("")
    assert panel.open_design(empty, lef) is False and str(empty) in host.errors[-1][1]
    assert panel.open_design(def_, lef)  # the panel still works


def test_routes_a_net_as_an_engine_job_and_overlays_the_result(opened, host, gcd) -> None:
    opened.select_net("_100_")
    assert opened.route("maze")
    sent = host.submitted[-1]
    assert sent["method"] == "chipstar.route"
    assert sent["params"] == {"router": "maze", "nets": "_100_"}
    assert sent["inputs"]["lef"] == str(gcd[0]) and Path(sent["inputs"]["def"]).is_file()
    job = next(iter(opened.jobs))
    # what chipstar.route writes: the net as a GCell-level route
    from engine.vlsi.def_ import write_def
    from engine.vlsi.grid import Snapper, snap_net, write_tree
    from engine.vlsi.router import route_net

    lef = read_lef(gcd[0])
    design = read_def(gcd[1], lef)
    snapper = Snapper(design, lef)
    index = design.net_index("_100_")
    tree = snap_net(snapper, index)
    write_tree(design, snapper, index, route_net(snapper.spec, tree.driver, tree.loads))
    write_def(design, Path(host.run_dir(job)) / "artifacts" / "routed.def")
    host.emit(job, "job_progress", step=1, total=1, metrics={})
    assert opened.route_status.text() == f"chipstar.route ({job}): running, step 1 / 1"
    host.emit(job, "job_result", outputs={"def": "artifacts/routed.def"})
    host.emit(job, "job_state", state="succeeded", reason="")
    assert opened.model.prediction is not None
    assert opened.model.differing_nets() == ["_100_"]
    assert "1 net(s) routed differently" in opened.route_status.text()
    canvas = opened.canvas
    assert canvas.drawn_points(canvas.predicted) > 0
    assert canvas.drawn_points(canvas.only_predicted) + canvas.drawn_points(
        canvas.only_reference) >= 0
    assert "leaf IoU" in opened.net_info.text()


def test_an_edited_design_goes_to_the_engine_without_writing_beside_its_def(
        panel, host, gcd, tmp_path, monkeypatch) -> None:
    import shutil
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the copy goes
    folder = tmp_path / "design"
    folder.mkdir()
    lef, def_ = (Path(shutil.copy(path, folder)) for path in gcd)
    assert panel.open_design(def_, lef)
    panel.select_net("_100_")
    _, vias = panel.model.design.net_wiring(panel.model.selected)
    panel.element = ("via", panel.model.via_row(vias[0]))
    assert panel.delete_element()
    assert panel.route("maze")
    sent = Path(host.submitted[-1]["inputs"]["def"])
    assert sent.parent == tmp_path / "studio-routing"  # the host has no workspace_path
    assert sorted(p.name for p in folder.iterdir()) == sorted([lef.name, def_.name])
    assert len(read_def(sent).net_wiring(panel.model.selected)[1]) == len(vias) - 1


def test_a_failed_route_job_says_why(opened, host) -> None:
    opened.select_net("_100_")
    opened.route("maze")
    job = next(iter(opened.jobs))
    host.emit(job, "job_state", state="failed", reason="",
              error={"message": "none of the chosen nets has a routed tree"})
    assert opened.route_status.text() == \
        f"chipstar.route ({job}): failed: none of the chosen nets has a routed tree"
    assert opened.route("learned") is False and "checkpoint" in host.errors[-1][1]


def test_statistics_table_fills_in_the_checks_off_the_main_thread(opened, qtbot) -> None:
    table = opened.nets_table
    assert table.rowCount() == 439
    qtbot.waitUntil(lambda: "checks:" in opened.status.text(), timeout=20_000)
    assert "0 routed net(s) not connected, 0 net(s) with shorts" in opened.status.text()
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == "_100_")
    assert table.item(row, 5).text() == "connected" and table.item(row, 6).text() == "0"


def check_stack(panel: RoutingPanel) -> None:
    """The 3-D stack of an opened gcd panel, on a platform with OpenGL 2.1."""
    assert panel.set_3d(True)
    stack = panel.stack_view
    assert panel.views.currentWidget() is stack
    metal2 = stack.items["metal2"].pos
    assert len(metal2) == 2 * len(_signal_rows(panel, "metal2"))
    assert np.allclose(metal2[:, 2], stack.height_of(panel.model.style("metal2").level))
    heights = np.unique(np.round(stack.items["via1"].pos[:, 2], 4))  # metal1 up to metal2
    assert np.allclose(heights, [0.0, stack.height_of(2)], atol=1e-3)
    panel.select_net("_100_")
    assert len(stack.selection.pos) == 2 * len(panel.model.design.net_wiring(
        panel.model.selected)[0])
    panel.set_layer_visible("metal2", False)
    assert not stack.items["metal2"].visible()
    image = stack.snapshot((200, 150))
    assert image.shape[2] == 4 and (image[..., :3] > 30).any()  # drawn, not a black frame
    assert panel.set_3d(False) and panel.views.currentWidget() is panel.canvas


def stack_on_a_display() -> None:
    """``check_stack`` in a process of its own (``python -c``) on the X display."""
    from PySide6.QtWidgets import QApplication

    from engine.vlsi import shared_design_paths

    app = QApplication([])
    host = FakeHost(Path(tempfile.mkdtemp()))
    panel = RoutingPanel(host)
    panel.resize(900, 600)
    panel.show()
    lef, def_ = shared_design_paths()
    assert panel.open_design(def_, lef)
    check_stack(panel)
    panel.shutdown()
    app.processEvents()
    print("3-D stack ok", flush=True)
    os._exit(0)  # GL teardown at interpreter exit can crash some drivers


@pytest.mark.gl
def test_the_3d_stack_shows_every_layer_at_its_height(opened, host, gcd) -> None:
    from PySide6.QtGui import QGuiApplication

    if QGuiApplication.platformName() != "offscreen":
        check_stack(opened)
        return
    # Qt's offscreen platform gives OpenGL 2.0 (or, without a display, none): the panel says
    # so and keeps the 2-D canvas
    assert opened.set_3d(True) is False
    title, message = host.errors[-1]
    assert title == "Cannot show the 3-D layer stack" and "3-D view is unavailable" in message
    assert "2.1" in message or "no OpenGL" in message
    assert opened.views.currentWidget() is opened.canvas and not opened.stack_box.isChecked()
    if not os.environ.get("DISPLAY"):
        pytest.skip("no X display: gl tests run under Xvfb, as `make test` does")
    done = subprocess.run(
        [sys.executable, "-c", "from tests.panels.routing.test_routing_panel import "
         "stack_on_a_display as run; run()"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "xcb"}, cwd=Path(__file__).parents[3])
    assert "3-D stack ok" in done.stdout, done.stdout + done.stderr[-3000:]


def test_the_shell_opens_a_def_here_and_undoes_its_edits(main_window, qtbot, gcd) -> None:
    main_window.open_paths([str(gcd[1])])
    qtbot.waitUntil(lambda: getattr(main_window.panel_widgets.get("routing"), "model", None)
                    is not None and main_window.panel_widgets["routing"].model.design
                    is not None, timeout=30_000)
    panel = main_window.panel_widgets["routing"]
    assert panel.model.lef is not None and not main_window.errors
    panel.select_net("_100_")
    before = [a.copy() for a in panel.model.design.net_wiring(panel.model.selected)]
    panel.element = ("via", panel.model.via_row(before[1][0]))
    assert panel.delete_element()
    assert len(main_window.history.saved_edits(panel.model.document)) == 1  # autosaved
    main_window.history.stack.undo()
    for a, b in zip(before, panel.model.design.net_wiring(panel.model.selected), strict=True):
        np.testing.assert_array_equal(a, b)
    assert main_window.history.saved_edits(panel.model.document) == []
    panel.shutdown()


def test_opening_another_design_takes_the_first_ones_steps_off_the_history(
        panel, host, small_def) -> None:
    """One Undo after opening another design reverts that design's edit (no dead press for
    the design left); the design left replays its autosaved edit when it opens again."""
    # another design, so other content: saved edits follow a file's content, not its name
    other = small_def.with_name("other.def")
    other.write_text(small_def.read_text().replace("DESIGN small", "DESIGN other"))

    def add_wire(y: int) -> None:
        panel.select_net("a", focus=False)
        assert panel.add_segment("metal2", (2000, y), (6000, y))

    def wires() -> int:
        design = panel.model.design
        return len(design.net_wiring(design.net_index("a"))[0])

    assert panel.open_design(small_def, None)
    plain = wires()
    add_wire(5000)
    add_wire(7000)
    first = panel.model.document
    assert panel.open_design(other, None)
    add_wire(5000)
    stack = host.history.stack
    assert stack.count() == 1 == len(host.history.applied(panel.model.document))
    stack.undo()
    assert wires() == plain and not stack.canUndo()
    assert len(host.history.saved_edits(first)) == 2  # kept for when it reopens
    assert panel.open_design(small_def, None)
    assert wires() == plain + 2 and "2 saved edit(s) restored" in panel.status.text()
    assert stack.count() == 2  # the replayed steps only, not the other design's
    stack.undo()
    assert wires() == plain + 1
