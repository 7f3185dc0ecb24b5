"""A saved session with the crowd previewer open (issue 39): reopened, or opened from a copy of
its folder at another path, it shows the same view state as data and the same picture, and the
moved person (an edit of the tracks) is replayed onto the tab's history, where it undoes."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtWidgets import QApplication

from studio.sessions import open_session, save_session
from tests.panels.crowd.test_crowd_commands import files as files  # noqa: F401 (the fixture)
from tests.studio.test_sessions import _difference, _picture

PICTURE_TOLERANCE = 0.01   # share of pixels that may differ (the scene map's locked aspect)
MOVED = ("clips", "tracks", "scene")


@pytest.fixture
def screen(main_window, files, qtbot):  # noqa: F811
    window = main_window
    window.resize(1500, 1000)
    for name in ("coarse", "generated", "tracks", "scene"):
        window.command("crowd.open", path=str(files[name]))
    window.command("crowd.move_person", person=1, frame=3, to=[2.0, 1.0])
    window.command("crowd.set_frame", frame=5)
    window.command("crowd.set_mode", mode="wipe")
    window.command("crowd.set_wipe_position", position=0.4)
    window.command("crowd.select_scene_item", item="group 1")
    window.command("crowd.show_tab", tab="track map")
    return window


def _shown(window, qtbot) -> tuple[dict, object]:
    panel = window.panel_widgets["crowd"]
    window.tabs.setCurrentWidget(panel)
    qtbot.waitUntil(lambda: panel.metrics is not None and not panel._tasks, timeout=5000)
    panel.status.setText("")   # what the last command said
    panel.scene_editor.status.setText("")
    QApplication.processEvents()
    return panel.view_state(), _picture(panel)


def _reopen(window, session, before_opening=lambda: None):
    for index in reversed(range(1, window.tabs.count())):
        window.close_tab(index)
    assert not window.panel_widgets
    before_opening()
    report = open_session(window, session)
    QApplication.processEvents()
    return report


def test_a_crowd_session_reopens_the_same_screen_and_edit(screen, files, qtbot) -> None:
    window = screen
    before, picture = _shown(window, qtbot)
    session = save_session(window, files["tracks"].parent / "plaza.studio")
    report = _reopen(window, session)
    assert report.done and report.complete, report.lines()
    after, again = _shown(window, qtbot)
    assert after == before
    assert _difference(again, picture) < PICTURE_TOLERANCE
    panel = window.panel_widgets["crowd"]
    assert panel.model.waypoint(1, 3) == (2.0, 1.0)
    stack = window.history.stack
    assert stack.canUndo() and stack.undoText() == "Move person 1 at frame 3"
    stack.undo()
    assert panel.model.waypoint(1, 3) == (1.5, 0.0)


def test_a_crowd_session_from_a_copied_folder(screen, files, tmp_path, qtbot) -> None:
    window = screen
    before, _picture_before = _shown(window, qtbot)
    save_session(window, files["tracks"].parent / "plaza.studio")
    copy = tmp_path.parent / f"{tmp_path.name}-moved"
    shutil.copytree(files["tracks"].parent, copy,
                    ignore=shutil.ignore_patterns("workspace*", "runs*"))

    def move_away() -> None:   # the originals are gone: only the copy's files can be found
        for name in ("coarse", "generated", "tracks", "scene"):
            files[name].unlink()

    try:
        report = _reopen(window, copy / "plaza.studio", move_away)
        assert report.done and not report.skipped and not report.changed, report.lines()
        after, _picture_after = _shown(window, qtbot)
        assert [clip["path"] for clip in after["clips"]] == [
            str((copy / "coarse.npy").resolve()), str((copy / "generated.npy").resolve())]
        assert after["tracks"] == str((copy / "walk.csv").resolve())
        assert after["scene"] == str((copy / "plaza.json").resolve())
        assert {k: v for k, v in after.items() if k not in MOVED} == \
            {k: v for k, v in before.items() if k not in MOVED}
        assert window.panel_widgets["crowd"].model.waypoint(1, 3) == (2.0, 1.0)  # came along
    finally:
        shutil.rmtree(copy)
