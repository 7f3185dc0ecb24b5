"""A saved session with the fMRI viewer open (issue 39): reopened, or opened from a copy of its
folder at another path, it shows the same view state as data and the same picture, and the
generated layer's edit is replayed onto the tab's history, where it undoes."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtWidgets import QApplication

from studio.sessions import open_session, save_session
from tests.panels.fmri.test_fmri_commands import LAYER, _settled
from tests.panels.fmri.test_fmri_commands import files as files  # noqa: F401  (the fixture)
from tests.studio.test_sessions import _difference, _picture

PICTURE_TOLERANCE = 0.01   # share of pixels that may differ (a plot's auto-range padding)


@pytest.fixture
def screen(main_window, files, qtbot):  # noqa: F811
    window = main_window
    window.resize(1500, 1000)
    window.command("fmri.open_image", path=str(files["real"]))
    window.command("fmri.open_generated", path=str(files["generated"]))
    window.command("fmri.discard_chunk", layer=LAYER, chunk=2)
    window.command("fmri.add_label_rois", path=str(files["atlas"]))
    window.command("fmri.set_cursor", voxel=[6, 2, 3])
    window.command("fmri.set_time", frame=9)
    window.command("fmri.set_radiological", on=True)
    panel = window.panel_widgets["fmri"]
    _settled(panel, qtbot)
    return window, panel


def _shown(window, qtbot) -> tuple[dict, object]:
    panel = window.panel_widgets["fmri"]
    window.tabs.setCurrentWidget(panel)
    _settled(panel, qtbot)
    return panel.view_state(), _picture(panel.figure)


def _reopen(window, session, qtbot, before_opening=lambda: None):
    for index in reversed(range(1, window.tabs.count())):
        window.close_tab(index)
    assert not window.panel_widgets
    before_opening()
    report = open_session(window, session)
    QApplication.processEvents()
    return report


def test_an_fmri_session_reopens_the_same_screen_and_edit(screen, files, qtbot) -> None:
    window, _panel = screen
    before, picture = _shown(window, qtbot)
    session = save_session(window, files["folder"] / "scan.studio")
    report = _reopen(window, session, qtbot)
    assert report.done and report.complete, report.lines()
    after, again = _shown(window, qtbot)
    assert after == before
    assert _difference(again, picture) < PICTURE_TOLERANCE
    restored = window.panel_widgets["fmri"]
    assert restored.state.active.discarded == {2}
    stack = window.history.stack
    assert stack.canUndo() and stack.undoText() == f"Discard chunk 2 of {LAYER}"
    stack.undo()
    assert restored.state.active.discarded == set()


def test_an_fmri_session_from_a_copied_folder(screen, files, tmp_path, qtbot) -> None:
    window, _panel = screen
    before, _picture_before = _shown(window, qtbot)
    save_session(window, files["folder"] / "scan.studio")
    copy = tmp_path.parent / f"{tmp_path.name}-moved"
    shutil.copytree(files["folder"], copy, ignore=shutil.ignore_patterns("workspace*"))

    def move_away() -> None:   # the originals are gone: only the copy's files can be found
        for name in ("real", "atlas"):
            files[name].unlink()
        shutil.rmtree(files["folder"] / "run")

    report = _reopen(window, copy / "scan.studio", qtbot, move_away)
    assert report.done and not report.skipped and not report.changed, report.lines()
    after, _picture_after = _shown(window, qtbot)
    assert after["opened"] == str((copy / "real_bold.nii").resolve())
    assert after["generated"] == [str((copy / "run" / "artifacts" / "gen_bold.nii")
                                      .resolve())]
    assert after["rois"] == [{"labels": str((copy / "atlas.nii").resolve())}]
    moved = ("opened", "generated", "rois")
    assert {k: v for k, v in after.items() if k not in moved} == \
        {k: v for k, v in before.items() if k not in moved}
    assert window.panel_widgets["fmri"].state.active.discarded == {2}   # the edit came along
    shutil.rmtree(copy)
