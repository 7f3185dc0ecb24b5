"""The route canvas's Qt-free parts: geometry batches, congestion, the connectivity and short
checks on the real gcd design, edit commands and their JSON form, predicted vs reference."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from engine.vlsi.def_ import SEG, VIA, read_def
from engine.vlsi.grid import Snapper, snap_net, write_tree
from engine.vlsi.lef import read_lef
from engine.vlsi.router import route_net
from panels.routing.geometry import Checker, congestion, outline_pairs
from panels.routing.model import EditWiring, RouteModel, decode


def test_outline_pairs_draws_four_edges_per_rectangle() -> None:
    pairs = outline_pairs([[0, 0, 2, 1]])
    edges = {tuple(map(tuple, pairs[i:i + 2])) for i in range(0, 8, 2)}
    assert edges == {((0, 0), (2, 0)), ((2, 0), (2, 1)), ((2, 1), (0, 1)), ((0, 1), (0, 0))}


def test_congestion_counts_each_gcell_a_wire_crosses(small_def) -> None:
    design = read_def(small_def)
    demand = congestion(design, None)
    # a: metal2 across columns 0..4 of row 0, metal3 up column 4 rows 0..3; b: row 0 too
    expected = np.zeros((5, 5))
    expected[0:5, 0] += 2
    expected[4, 0:4] += 1
    np.testing.assert_array_equal(demand, expected)
    only_metal3 = congestion(design, None, [design.layer_names.index("metal3")])
    assert only_metal3.sum() == 4


def test_every_routed_gcd_net_is_connected_and_nothing_is_shorted(gcd) -> None:
    lef_path, def_path = gcd
    lef = read_lef(lef_path)
    design = read_def(def_path, lef)
    checker = Checker(design, lef)
    routed = {int(n) for n in design.segments[:, SEG["net"]]} | {
        int(n) for n in design.vias_placed[:, VIA["net"]]}
    signal = [i for i in sorted(routed) if not design.nets[i].special]
    assert len(signal) > 350
    reports = {i: checker.connectivity(i) for i in signal}
    assert [design.nets[i].name for i, r in reports.items() if not r.connected] == []
    assert all(r.pins == len(design.nets[i].pins) for i, r in reports.items())
    assert checker.all_shorts() == {}
    assert [design.nets[i].name for i in signal[:20] if checker.shorts(i)] == []


def test_checks_find_a_disconnect_and_a_short(small_def) -> None:
    model = RouteModel()
    model.load_def(small_def)
    a = model.design.net_index("a")
    assert model.check(a).connectivity.connected
    assert model.check(a).shorts == 0
    segments, _ = model.design.net_wiring(a)
    metal3 = model.segment_row(segments[1])
    model.select(a)
    model.change_wiring("a", [metal3], [], [], [])  # the via now leads nowhere: still one piece
    model.change_wiring("a", [], [metal3], [], [])
    # move a's metal2 wire onto b's track: a short with b, and the via is left hanging
    metal2 = model.segment_row(model.design.net_wiring(a)[0][0])
    command = model.move_command("segment", metal2, 0, 400)
    command.apply(model)
    stats = model.last_check
    assert stats.shorts == 1 and model.shorts(a)[0][:2] == ("b", "metal2")
    assert stats.connectivity.pieces == 2 and not stats.connectivity.connected
    b = model.design.net_index("b")
    assert model.checker.all_shorts() == {a: 1, b: 1}
    command.revert(model)
    assert model.checker.all_shorts() == {}
    assert model.last_check.shorts == 0 and model.last_check.connectivity.connected


def test_edit_commands_round_trip_through_json(small_def) -> None:
    model = RouteModel()
    model.load_def(small_def)
    model.select(model.design.net_index("b"))
    before = model.design.segments.copy()
    command = model.add_segment_command("metal2", (8000, 1400), (8000, 5000))
    again = decode(command.to_json())
    assert again == command
    again.apply(model)
    assert len(model.design.segments) == len(before) + 1
    again.revert(model)
    np.testing.assert_array_equal(model.design.segments, before)
    with pytest.raises(ValueError, match="not a routing edit"):
        decode({"type": "set_turn_field"})
    with pytest.raises(ValueError, match="net b has no"):
        EditWiring("b", remove_segments=[["metal2", 1, 2, 3, 4, 0, -1, -1, 0]]).apply(model)


def test_a_via_edit_changes_the_vias(small_def) -> None:
    model = RouteModel()
    model.load_def(small_def)
    model.select(model.design.net_index("a"))
    kind, row = model.element_at(8.0, 1.0, 0.1)
    assert kind == "via" and row[1] == "v23"
    model.delete_command(kind, row).apply(model)
    assert len(model.design.vias_placed) == 0
    assert model.last_check.connectivity.pieces == 2


def test_prediction_differences_and_leaf_iou(gcd, tmp_path) -> None:
    lef_path, def_path = gcd
    lef = read_lef(lef_path)
    design = read_def(def_path, lef)
    snapper = Snapper(design, lef)
    index = next(i for i, n in enumerate(design.nets)
                 if not n.special and len(n.pins) >= 3 and snap_net(snapper, i) is not None)
    snapped = snap_net(snapper, index)
    write_tree(design, snapper, index, route_net(snapper.spec, snapped.driver, snapped.loads))
    from engine.vlsi.def_ import write_def

    predicted = write_def(design, tmp_path / "routed.def")
    model = RouteModel()
    model.load_def(def_path, lef_path)
    model.load_prediction(predicted)
    name = design.nets[index].name
    assert model.differing_nets() == [name]
    iou = model.leaf_iou(name)
    assert iou is not None and 0.0 <= iou <= 1.0
    reference, guess = model.grid_trees(name)
    assert guess.edges != reference.edges or iou == 1.0


def test_the_panel_modules_never_import_torch() -> None:
    code = ("import sys; import panels.routing.view, panels.routing.canvas; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
