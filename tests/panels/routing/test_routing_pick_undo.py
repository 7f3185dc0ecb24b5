"""Issue 20, finding 2: undo and redo keep the routing panel's pick true. After any undo or redo
the picked wire or via still exists (it moved with the edit) or the pick is cleared, highlight
and "Picked …" text included; a command on an element that is gone is refused in the status
line, pushes no undo step and changes nothing; no button, key or canvas handler raises out to
the Qt event loop (pytest-qt fails a test on an exception raised in a slot or event handler).

The small two-net design (no LEF: the track pitch is 0.1 µm), edited through the window's real
undo history (``history_host``)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from panels.routing.model import RouteModel
from panels.routing.view import RoutingPanel
from tests.panels.routing.picks import pick_problem, wiring
from tests.panels.routing.test_routing_mouse import LEFT, _drag

B_WIRE = ["metal2", 1000, 1400, 8000, 1400]       # net b's only wire (layer, ends in dbu)
B_DOWN = ["metal2", 1000, 1000, 8000, 1000]       # it, dragged 0.4 µm down


def assert_pick_is_live(panel: RoutingPanel) -> None:
    problem = pick_problem(panel)
    assert problem is None, problem


def pick_and_drag_b_down(panel: RoutingPanel) -> None:
    panel.select_net("b", focus=False)
    _drag(panel, (4.0, 1.4), (4.0, 1.03))
    assert panel.element[1][:5] == B_DOWN
    assert_pick_is_live(panel)


def test_undo_of_a_drag_takes_the_pick_back_with_the_wire(small, history_host) -> None:
    pick_and_drag_b_down(small)
    history_host.undo()
    assert small.element is not None and small.element[1][:5] == B_WIRE  # moved with it
    assert_pick_is_live(small)
    history_host.redo()
    assert small.element[1][:5] == B_DOWN
    assert_pick_is_live(small)


def test_delete_picked_after_undo_deletes_the_wire_that_is_there(small, history_host,
                                                                 tmp_path) -> None:
    """The issue's sequence: pick, drag, undo, Delete picked, undo, Save DEF: the saved
    wiring is the file's own (the ghost pick's delete used to fail, push a step anyway, and
    its undo added a third wire)."""
    original = wiring(small.model)
    pick_and_drag_b_down(small)
    history_host.undo()
    QTest.mouseClick(small.delete_button, LEFT)
    b = small.model.design.net_index("b")
    assert len(small.model.design.net_wiring(b)[0]) == 0
    assert history_host.history.stack.index() == 1 and history_host.history.stack.count() == 1
    assert_pick_is_live(small)
    history_host.undo()
    assert_pick_is_live(small)
    assert wiring(small.model) == original
    assert small.save_def(tmp_path / "saved.def")
    again = RouteModel()
    again.load_def(tmp_path / "saved.def")
    assert wiring(again) == original


def test_undo_of_an_added_wire_clears_its_pick(small, history_host) -> None:
    small.select_net("a", focus=False)
    small.layer_box.setCurrentText("metal3")
    assert small.add_segment("metal3", (2000, 5000), (6000, 5000))
    small.click(4.0, 5.0, 0.2)
    assert small.element[1][:5] == ["metal3", 2000, 5000, 6000, 5000]
    before = wiring(small.model)
    history_host.undo()  # the wire is gone, so is its pick
    assert small.element is None
    assert_pick_is_live(small)
    after_undo = wiring(small.model)
    steps = history_host.history.stack.count()
    for press in (small.delete_button, small.move_button):
        small.status.setText("")
        QTest.mouseClick(press, LEFT)
        assert "Pick a wire or via" in small.status.text()
    assert wiring(small.model) == after_undo != before
    assert history_host.history.stack.count() == steps and history_host.history.stack.index() == 0


def test_a_command_on_an_element_that_is_gone_is_refused(small, history_host) -> None:
    """A pick that no longer exists (as a stale pick would be) is refused with a message,
    pushes no step and changes nothing: delete, move, Delete key, arrow key."""
    small.select_net("b", focus=False)
    original = wiring(small.model)
    gone = ("segment", [*B_DOWN, 0, -1, -1, 0])
    small.dx_box.setValue(0.1)
    actions = (lambda: QTest.mouseClick(small.delete_button, LEFT),
               lambda: QTest.mouseClick(small.move_button, LEFT),
               lambda: small.keyPressEvent(QKeyEvent(QKeyEvent.Type.KeyPress, Qt.Key.Key_Delete,
                                                     Qt.KeyboardModifier.NoModifier)),
               lambda: small.keyPressEvent(QKeyEvent(QKeyEvent.Type.KeyPress, Qt.Key.Key_Up,
                                                     Qt.KeyboardModifier.NoModifier)))
    for act in actions:
        small.element = gone
        small.status.setText("")
        act()
        assert "no longer" in small.status.text()
        assert small.element is None
        assert_pick_is_live(small)
        assert wiring(small.model) == original
        assert history_host.history.stack.count() == 0
    assert history_host.errors == []  # refused in the status line, not in an error box


def test_move_picked_after_undo_moves_the_wire_that_is_there(small, history_host) -> None:
    pick_and_drag_b_down(small)
    history_host.undo()
    small.dy_box.setValue(0.2)
    QTest.mouseClick(small.move_button, LEFT)
    b = small.model.design.net_index("b")
    assert [small.model.segment_row(r)[:5] for r in small.model.design.net_wiring(b)[0]] == \
        [["metal2", 1000, 1600, 8000, 1600]]
    assert history_host.history.stack.count() == 1  # the undone drag's redo is replaced
    assert_pick_is_live(small)
    history_host.undo()
    assert small.element[1][:5] == B_WIRE
    assert_pick_is_live(small)


def test_an_undo_in_the_middle_of_a_drag_ends_it_changing_nothing(small, history_host) -> None:
    """Ctrl+Z pressed while a drag moves a wire that the undo takes away: the drag ends there,
    pushes nothing and reports no error."""
    small.select_net("a", focus=False)
    assert small.add_segment("metal3", (2000, 5000), (6000, 5000))
    start, end = (4.0, 5.0), (4.0, 5.3)
    assert small._on_canvas_drag("start", start, start, None)
    assert small.element[1][:5] == ["metal3", 2000, 5000, 6000, 5000]
    small._on_canvas_drag("move", start, end, None)
    history_host.undo()
    after_undo = wiring(small.model)
    small._on_canvas_drag("move", start, end, None)
    small._on_canvas_drag("finish", start, end, None)
    assert wiring(small.model) == after_undo and history_host.errors == []
    assert history_host.history.stack.index() == 0 and "nothing was changed" in \
        small.status.text()
    assert small.canvas.drawn_points(small.canvas.preview) == 0
    assert_pick_is_live(small)


def test_no_button_key_or_click_raises_without_a_design(history_host, make_widget,
                                                        qtbot) -> None:
    """Every editing control pressed before a DEF is open says what to do instead."""
    panel = make_widget(RoutingPanel, history_host)
    panel.show()
    qtbot.waitExposed(panel)
    panel.dx_box.setValue(0.1)
    for button in (panel.move_button, panel.delete_button, panel.route_button):
        QTest.mouseClick(button, LEFT)
    for key in (Qt.Key.Key_Delete, Qt.Key.Key_Left):
        panel.keyPressEvent(QKeyEvent(QKeyEvent.Type.KeyPress, key,
                                      Qt.KeyboardModifier.NoModifier))
    QTest.mouseClick(panel.canvas.viewport(), LEFT, Qt.KeyboardModifier.NoModifier,
                     panel.canvas.viewport().rect().center())
    assert panel.add_segment("metal2", (0, 0), (1000, 0)) is False
    assert panel.add_via("v23", (0, 0)) is False
    assert history_host.history.stack.count() == 0


def test_an_unexpected_error_in_a_command_is_reported_not_raised(small, history_host,
                                                                 monkeypatch, caplog) -> None:
    """A bug in a command's code reaches the user as a message (and studio.log), never the
    event loop; nothing is pushed."""
    small.select_net("b", focus=False)
    small.click(4.0, 1.4, 0.2)
    assert small.element is not None

    def broken(*_args, **_kwargs):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(small.model, "delete_command", broken)
    QTest.mouseClick(small.delete_button, LEFT)
    assert history_host.errors and "broken on purpose" in history_host.errors[-1][1]
    assert "broken on purpose" in small.status.text()
    assert any(r.name == "studio.commands" and r.exc_info  # the registry's boundary
               and "routing.delete_wire failed" in r.getMessage() for r in caplog.records)
    assert history_host.history.stack.count() == 0


def test_an_edit_that_does_not_fit_changes_nothing(small_def) -> None:
    """A model edit whose vias do not fit leaves the segments as they were too (it used to
    remove them first and raise after)."""
    from panels.routing.model import EditWiring

    model = RouteModel()
    model.load_def(small_def)
    before = wiring(model)
    version = model.version
    bad = EditWiring("a", remove_segments=[["metal2", 1000, 1000, 8000, 1000, 0, -1, -1, 0]],
                     remove_vias=[["metal2", "v23", 1, 2, 0]])
    with pytest.raises(ValueError):
        bad.apply(model)
    assert wiring(model) == before and model.version == version and not model.edited


def test_saving_over_the_open_def_then_editing_reopens_without_doubling(
        small, history_host, small_def, make_widget) -> None:
    """Save DEF over the open file, add another wire, reopen: the file holds the first wire
    and the autosave replays only the second (it used to replay both: the first twice)."""
    small.select_net("a", focus=False)
    assert small.add_segment("metal3", (2000, 5000), (6000, 5000))
    assert small.save_def(small_def)
    assert "undo starts" in small.status.text()
    assert not history_host.history.stack.canUndo()  # the saved edit is the file's now
    small.select_net("a", focus=False)
    assert small.add_segment("metal3", (2000, 7000), (6000, 7000))
    edited = wiring(small.model)
    again = make_widget(RoutingPanel, history_host)
    assert again.open_design(small_def, None)
    assert wiring(again.model) == edited and history_host.errors == []
    assert "1 saved edit(s) restored" in again.status.text()


def test_the_issue_sequence_in_the_window_with_ctrl_z(main_window, qtbot, small_def,
                                                      tmp_path) -> None:
    """As reported, in the whole window: pick a wire, drag it, Ctrl+Z, Delete picked, Ctrl+Z,
    Save DEF: no error, and the saved DEF's wiring is the file's own."""
    main_window.open_paths([str(small_def)])
    qtbot.waitUntil(lambda: getattr(main_window.panel_widgets.get("routing"), "model", None)
                    is not None and main_window.panel_widgets["routing"].model.design
                    is not None, timeout=30_000)
    panel = main_window.panel_widgets["routing"]
    original = wiring(panel.model)
    panel.canvas.box.setRange(QRectF(0, 0, 10, 10), padding=0)
    QApplication.processEvents()
    pick_and_drag_b_down(panel)
    main_window.activateWindow()
    panel.canvas.setFocus()

    def ctrl_z() -> None:
        QTest.keyClick(main_window.focusWidget() or main_window, Qt.Key.Key_Z,
                       Qt.KeyboardModifier.ControlModifier)

    ctrl_z()
    assert panel.element[1][:5] == B_WIRE
    assert_pick_is_live(panel)
    QTest.mouseClick(panel.delete_button, LEFT)
    assert_pick_is_live(panel)
    ctrl_z()
    assert_pick_is_live(panel)
    assert panel.save_def(tmp_path / "saved.def")
    again = RouteModel()
    again.load_def(tmp_path / "saved.def")
    assert wiring(again) == original and not main_window.errors
    panel.shutdown()
