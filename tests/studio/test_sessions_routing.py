"""A session with the VLSI route canvas (and the sketch test panel) open round-trips: the same
view state as data and the same pictures, the design's edit replayed, from a copied folder."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtWidgets import QApplication

from studio.sessions import open_session, panel_tabs, save_session
from tests.panels.routing.conftest import SMALL_DEF
from tests.studio.test_sessions import _difference, _picture
from tests.studio.test_sessions_panel import PANEL_ID, add_sketch_panel, write_points

PICTURE_TOLERANCE = 0.02   # share of pixels that may differ (anti-aliasing, text caret)


def _same(a, b) -> bool:
    """Equal as data; numbers within 1% (a canvas whose aspect is locked shows a zoom window
    a pixel wider or narrower when its height differs by a pixel)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return abs(a - b) <= 0.01 * max(1.0, abs(a), abs(b))
    return a == b


def _screen(window) -> tuple[dict, dict]:
    """Each open panel's view state and picture (its tab brought to the front to draw)."""
    current = window.tabs.currentWidget()
    states, pictures = {}, {}
    for panel_id, widget in panel_tabs(window):
        window.tabs.setCurrentWidget(widget)
        QApplication.processEvents()
        states[panel_id] = widget.view_state()
        pictures[panel_id] = _picture(widget)
    window.tabs.setCurrentWidget(current)
    QApplication.processEvents()
    return states, pictures


@pytest.fixture
def screen(main_window, tmp_path):
    window = main_window
    add_sketch_panel(window)
    window.resize(1800, 900)   # wide enough that the status line never wraps
    project = tmp_path / "project"
    design = project / "chip" / "small.def"
    design.parent.mkdir(parents=True)
    design.write_text(SMALL_DEF)
    routing = window.open_panel("routing")
    if not callable(getattr(routing, "view_state", None)):
        pytest.fail("the routing panel does not implement the session protocol")
    window.command("routing.open_design", def_path=str(design))
    window.command("routing.move_wire", net="b", layer="metal2", from_um=[1.0, 1.4],
                   to_um=[8.0, 1.4], dy_um=0.4)
    window.command("routing.colour_layer", layer="metal3", colour="#ff00ff")
    window.command("routing.select_net", net="a", focus=True)
    sketch = window.open_panel(PANEL_ID)
    sketch.open_file(str(write_points(project / "points.txt", [(1, 2), (3, 4), (9, 1)])))
    sketch.zoom, sketch.selected = 15.0, 1
    window.tabs.setCurrentWidget(routing)
    return window, project, routing


def test_routing_and_a_second_panel_round_trip(screen, tmp_path):
    window, project, routing = screen
    before_states, before_pictures = _screen(window)
    assert before_states["routing"]["net"] == "a"
    session = save_session(window, project / "chip.studio")
    for index in reversed(range(1, window.tabs.count())):
        window.close_tab(index)
    assert not window.panel_widgets

    report = open_session(window, session)
    assert report.done and report.complete, report.lines()
    assert window.tabs.currentWidget() is window.panel_widgets["routing"]
    after_states, after_pictures = _screen(window)
    assert _same(after_states, before_states), (after_states, before_states)
    for panel_id, picture in before_pictures.items():
        assert _difference(after_pictures[panel_id], picture) < PICTURE_TOLERANCE, panel_id
    restored = window.panel_widgets["routing"]
    stack = window.history.stack                         # the design's edit was replayed
    assert stack.count() == 1 and stack.canUndo() and "Move" in stack.undoText()
    stack.undo()                                         # and undoes: the wire moves back
    assert _difference(_picture(restored), after_pictures["routing"]) > 0.0001


def test_routing_session_from_a_copied_folder(screen, tmp_path):
    window, project, _routing = screen
    before_states, _pictures = _screen(window)
    save_session(window, project / "chip.studio")
    copy = tmp_path / "moved" / "project-copy"
    shutil.copytree(project, copy)
    shutil.rmtree(project)
    report = open_session(window, copy / "chip.studio")
    assert report.done and not report.skipped and not report.changed, report.lines()
    assert len(report.relocated) == 2
    after = _screen(window)[0]["routing"]
    assert after["def"] == str((copy / "chip" / "small.def").resolve())
    assert _same({k: v for k, v in after.items() if k != "def"},
                 {k: v for k, v in before_states["routing"].items() if k != "def"})
    assert window.panel_widgets["routing"].model.edited
