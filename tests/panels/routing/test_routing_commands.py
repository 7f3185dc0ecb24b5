"""The routing panel's commands (issue 37): run without a window on the model and a real undo
history, refused with the reason and no change for a bad argument and for an element that does
not exist, logged as the Python line a script would write, undone through the history; the
panel's buttons run them; ``view_state`` / ``restore_view_state`` round-trip.

The small two-net design (no LEF; 1000 dbu per µm): net a runs on metal2 from (1, 1) to
(8, 1) µm and climbs through via v23 at (8, 1) to metal3; net b runs on metal2 from (1, 1.4)
to (8, 1.4) µm."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QRectF, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from panels.routing.commands import COMMANDS, SCOPE, RoutingState, register
from panels.routing.model import RouteModel
from panels.routing.view import RoutingPanel
from studio.commands import CommandRefused, CommandRegistry, Invocation
from tests.panels.routing.picks import wiring
from tests.panels.windowless import bind_windowless

B_WIRE = {"net": "b", "layer": "metal2", "from_um": [1.0, 1.4], "to_um": [8.0, 1.4]}
A_VIA = {"net": "a", "via": "v23", "at_um": [8.0, 1.0]}
MISSING = "/dev/null/studio-test"  # under a device: no folder can be made there


@pytest.fixture
def windowless(history_host, small_def) -> tuple[CommandRegistry, RoutingState, list]:
    """The routing commands over a model and the host's real history: no panel, no view."""
    state = RoutingState(RouteModel(), history_host)
    registry, state, seen = bind_windowless(register, SCOPE, state)
    registry.run("routing.open", path=str(small_def))
    state.design_opened()
    return registry, state, seen


def test_a_move_is_one_undo_step_and_one_python_line(windowless, history_host) -> None:
    registry, state, seen = windowless
    before = wiring(state.model)
    registry.run("routing.move_wire", **B_WIRE, dy_um=-0.4)
    assert seen[-1].python() == ('studio.command("routing.move_wire", net="b", layer="metal2", '
                                 'from_um=[1.0, 1.4], to_um=[8.0, 1.4], dy_um=-0.4)')
    moved = wiring(state.model)
    assert ("segment", "b", "metal2", 1000, 1000, 8000, 1000, 0, -1, -1, 0) in moved
    assert history_host.history.stack.count() == 1
    history_host.history.stack.undo()
    assert wiring(state.model) == before
    history_host.history.stack.redo()
    assert wiring(state.model) == moved
    # the moved wire is named where it is now; the old place names nothing
    registry.run("routing.delete_wire", net="b", layer="metal2", from_um=[8, 1], to_um=[1, 1])
    with pytest.raises(CommandRefused, match="net b has no metal2 wire from"):
        registry.run("routing.delete_wire", **B_WIRE)
    assert history_host.history.stack.count() == 2


def test_vias_wires_and_selection_by_name(windowless, history_host) -> None:
    registry, state, _seen = windowless
    registry.run("routing.move_via", **A_VIA, dx_um=0.1)
    registry.run("routing.add_via", net="b", via="v23", at_um=[2.0, 1.4])
    registry.run("routing.add_wire", net="b", layer="metal3", from_um=[2, 1.4], to_um=[2, 5])
    registry.run("routing.select_net", net="b")
    rows = wiring(state.model)
    assert ("via", "a", "v23", 8100, 1000, 0) in rows
    assert ("via", "b", "v23", 2000, 1400, 0) in rows
    assert ("segment", "b", "metal3", 2000, 1400, 2000, 5000, 0, -1, -1, 0) in rows
    assert state.model.selected == 1 and history_host.history.stack.count() == 3
    registry.run("routing.show_layer", layer="metal3", visible=False)
    registry.run("routing.colour_layer", layer="metal3", colour="#00FF00")
    assert not state.model.style("metal3").visible
    assert state.model.style("metal3").colour == "#00ff00"


def test_commands_that_draw_need_the_panel(windowless) -> None:
    registry, _state, _seen = windowless
    for command_id, args in (("routing.overlay", {"name": "congestion"}),
                             ("routing.view_3d", {}),
                             ("routing.export_figure", {"path": "x.png"})):
        with pytest.raises(CommandRefused, match="without the panel's window"):
            registry.run(command_id, **args)


# Each routing command with a bad argument and with an element that does not exist (None:
# it names no element): (bad arguments, reason), (arguments naming nothing, reason).
CASES: dict[str, tuple[tuple[dict, str], tuple[dict, str] | None]] = {
    "routing.open": (({"path": 5}, "path: Input should be a valid string"),
                     ({"path": MISSING + ".def"}, "studio-test.def")),
    "routing.open_design": (({"def_path": "x.def", "lef": "y"}, "unknown argument 'lef'"),
                            ({"def_path": MISSING + ".def"}, "studio-test.def")),
    "routing.compare": (({}, "path is required"), ({"path": MISSING + ".def"}, "studio-test.def")),
    "routing.save_def": (({"path": ["a"]}, "path: Input should be a valid string"),
                         ({"path": MISSING + "/x.def"}, "/dev/null/studio-test")),
    "routing.open_guides": (({"path": None}, "path: Input should be a valid string"),
                            ({"path": MISSING + ".guide"}, "studio-test.guide")),
    "routing.save_guides": (({"path": 1.5}, "path: Input should be a valid string"),
                            ({"path": MISSING + ".guide"}, "need the DEF and its LEF")),
    "routing.export_figure": (({"path": "x.png", "dpi": 5}, "dpi: Input should be greater"),
                              ({"path": MISSING + "/x.png"}, "/dev/null/studio-test")),
    "routing.select_net": (({"net": 3}, "net: Input should be a valid string"),
                           ({"net": "_009_"}, "no net named '_009_' in small.def")),
    "routing.show_layer": (({"layer": "metal2", "visible": "maybe"}, "visible: Input should "
                                                                     "be a valid boolean"),
                           ({"layer": "metal99"}, "no layer 'metal99' in small.def")),
    "routing.colour_layer": (({"layer": "metal2", "colour": "red"}, "a colour is #rrggbb"),
                             ({"layer": "metal99", "colour": "#ff0000"}, "no layer 'metal99'")),
    "routing.overlay": (({"name": "congestion", "on": "perhaps"}, "on: Input should be"),
                        ({"name": "heat"}, "no overlay 'heat'")),
    "routing.view_3d": (({"on": "sideways"}, "on: Input should be a valid boolean"), None),
    "routing.move_wire": (({**B_WIRE, "dx_um": "far"}, "dx_um: Input should be a valid number"),
                          ({**B_WIRE, "layer": "metal3", "dx_um": 0.1},
                           "net b has no metal3 wire from (1, 1.4) to (8, 1.4) µm in small.def")),
    "routing.move_via": (({**A_VIA, "at_um": [8.0]}, "at_um"),
                         ({**A_VIA, "at_um": [7.0, 1.0], "dx_um": 0.1},
                          "net a has no via v23 at (7, 1) µm in small.def")),
    "routing.delete_wire": (({**B_WIRE, "from_um": "here"}, "from_um"),
                            ({**B_WIRE, "net": "zz"}, "no net named 'zz' in small.def")),
    "routing.delete_via": (({**A_VIA, "via": None}, "via: Input should be a valid string"),
                           ({**A_VIA, "via": "v99"}, "net a has no via v99 at (8, 1) µm")),
    "routing.add_wire": (({**B_WIRE, "layer": 7}, "layer: Input should be a valid string"),
                         ({**B_WIRE, "layer": "metal99"}, "no routing layer 'metal99'")),
    "routing.add_via": (({**A_VIA, "wire": 1}, "unknown argument 'wire'"),
                        ({**A_VIA, "via": "v99"}, "no via 'v99' in small.def or its LEF")),
    "routing.route": (({"router": "magic"}, "router: Input should be 'maze' or 'learned'"),
                      ({"nets": ["zz"]}, "open a DEF and its LEF first")),
    "routing.check_markers": (({"x": 1}, "takes no arguments, got x"), None),
    "routing.import_markers": (({"path": 3}, "path: Input should be a valid string"),
                               ({"path": MISSING + ".lyrdb"}, "studio-test.lyrdb")),
    "routing.export_markers": (({}, "path is required"),
                               ({"path": MISSING + "/x.csv"}, "/dev/null/studio-test")),
    "routing.show_marker": (({"marker": 1}, "marker: Input should be a valid string"),
                            ({"marker": "short x"}, "no marker 'short x' in small.def")),
    "routing.step_marker": (({"step": 2}, "step is 1 (next) or -1 (previous)"),
                            ({"step": 1}, "no markers to step through")),
    "routing.waive_marker": (({"marker": "x", "waived": "maybe"}, "waived: Input should be"),
                             ({"marker": "open a"}, "no marker 'open a' in small.def")),
    "routing.marker_category": (({"category": 5}, "category: Input should be a valid string"),
                                ({"category": "short"}, "no markers of category 'short'")),
    "routing.measure": (({"from_um": [1, 1], "to_um": "there"}, "to_um"),
                        ({"from_um": [1, 1], "to_um": [2, 2], "snap_layer": "metal99"},
                         "no layer 'metal99' in small.def")),
    "routing.inspect": (({"at_um": [1, 1], "tolerance_um": 0}, "tolerance_um: Input should "
                                                               "be greater than 0"), None),
    "routing.goto": (({"target": "1, 2", "size_um": -1}, "size_um: Input should be greater"),
                     ({"target": "nowhere"}, "'nowhere' is neither 'x, y' µm nor a net")),
}


def test_every_routing_command_has_refusal_cases() -> None:
    assert set(CASES) == {command.id for command in COMMANDS}


@pytest.mark.parametrize("command_id", sorted(CASES))
def test_refusals_change_nothing(small, history_host, command_id) -> None:
    registry = small.commands
    before = (wiring(small.model), [(s.name, s.visible, s.colour) for s in small.model.styles],
              small.model.selected, dict(small.canvas.overlay_on), small.model.design.path)
    steps = history_host.history.stack.count()
    bad, missing = CASES[command_id]
    for args, reason in [bad] + ([missing] if missing else []):
        with pytest.raises(CommandRefused) as caught:
            registry.run(command_id, **args)
        assert str(caught.value).startswith(f"{command_id}: ") and reason in str(caught.value)
        after = (wiring(small.model), [(s.name, s.visible, s.colour)
                                       for s in small.model.styles],
                 small.model.selected, dict(small.canvas.overlay_on), small.model.design.path)
        assert after == before, args
        assert history_host.history.stack.count() == steps
    # from a button or key: said in the status line and an error box, never raised
    small.commands.trigger(command_id, **bad[0])
    assert history_host.errors[-1][1].startswith(command_id)
    assert "refused" in small.status.text()


def test_buttons_run_commands_that_are_logged(small, history_host) -> None:
    seen: list[Invocation] = []
    small.commands.listen(seen.append)
    small.select_net("b", focus=False)
    small.click(4.0, 1.4, 0.2)
    small.dy_box.setValue(-0.4)
    QTest.mouseClick(small.move_button, Qt.MouseButton.LeftButton)
    assert [i.python() for i in seen[-2:]] == [
        'studio.command("routing.select_net", net="b", focus=False)',
        'studio.command("routing.move_wire", net="b", layer="metal2", from_um=[1.0, 1.4], '
        'to_um=[8.0, 1.4], dy_um=-0.4)']
    assert all(i.source == "user" for i in seen)
    QTest.mouseClick(small.delete_button, Qt.MouseButton.LeftButton)
    assert seen[-1].python() == ('studio.command("routing.delete_wire", net="b", '
                                 'layer="metal2", from_um=[1.0, 1.0], to_um=[8.0, 1.0])')
    assert history_host.history.stack.count() == 2
    history_host.undo()
    history_host.undo()
    assert ("segment", "b", "metal2", 1000, 1400, 8000, 1400, 0, -1, -1, 0) in \
        wiring(small.model)


def test_view_state_round_trips(small, history_host, make_widget, small_def) -> None:
    small.select_net("a", focus=False)
    small.set_layer_visible("metal3", False)
    small.set_layer_colour("metal2", "#123456")
    small.set_overlay("congestion", True)
    small.canvas.box.setRange(QRectF(1, 2, 4, 3), padding=0)
    small.mode_box.setCurrentText("Add via")
    small.tabs.setCurrentIndex(2)
    small.search_edit.setText("a")
    saved = small.view_state()
    assert saved["def"] == str(small_def) and saved["net"] == "a"
    assert saved["layers"]["metal3"]["visible"] is False
    other = make_widget(RoutingPanel, history_host)
    other.resize(1300, 800)
    other.show()
    QApplication.processEvents()
    assert other.restore_view_state(saved) == []
    QApplication.processEvents()
    again = other.view_state()
    for key in ("def", "net", "layers", "overlays", "mode", "tab", "search", "route"):
        assert again[key] == saved[key], key
    assert again["window_um"]["x"] == pytest.approx(saved["window_um"]["x"], abs=1e-3)
    broken = {**saved, "net": "_009_", "overlays": ["congestion", "heat"]}
    problems = other.restore_view_state(broken)
    assert any("no net named '_009_'" in p for p in problems)
    assert any("no overlay 'heat'" in p for p in problems)
    gone = other.restore_view_state({**saved, "def": str(Path(MISSING) / "gone.def")})
    assert any("gone.def" in p for p in gone)
