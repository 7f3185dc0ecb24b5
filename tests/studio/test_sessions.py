"""Sessions: a saved screen comes back as data and as pictures; moved, changed, missing and
edited documents are found, reported, asked for or chosen, never silently patched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from engine.io.session_file import read_session
from studio import sessions
from studio.sessions import (
    JOURNAL_EDITS,
    SESSION_EDITS,
    install_sessions,
    open_session,
    save_session,
)
from tests.studio.test_sessions_panel import PANEL_ID, add_sketch_panel, write_points

POINTS = [(1, 1), (5, 3), (8, 9), (12, 4)]


def _picture(widget) -> np.ndarray:
    QApplication.processEvents()
    image = widget.grab().toImage().convertToFormat(widget.grab().toImage().Format.Format_RGB32)
    width, height = image.width(), image.height()
    data = np.frombuffer(bytes(image.constBits()), np.uint8)[:width * height * 4]
    return data.reshape(height, width, 4)[..., :3].astype(int)


def _difference(a: np.ndarray, b: np.ndarray) -> float:
    """The share of pixels that differ (pictures of different sizes differ entirely)."""
    if a.shape != b.shape:
        return 1.0
    return float(np.mean(np.any(np.abs(a - b) > 16, axis=-1)))


@pytest.fixture
def sketch_window(main_window):
    add_sketch_panel(main_window)
    return main_window


def _open_sketch(window, path: Path, zoom: float = 14.0, selected: int = 2):
    panel = window.open_panel(PANEL_ID)
    assert panel.open_file(str(path))
    panel.zoom, panel.selected, panel.colour = zoom, selected, "#2ca02c"
    panel.update()
    return panel


def test_a_session_round_trips_to_the_same_view_state_and_pictures(sketch_window, tmp_path):
    window = sketch_window
    data = write_points(tmp_path / "data" / "points.txt", POINTS)
    panel = _open_sketch(window, data)
    panel.move_point(1, 3, 0)
    panel.move_point(2, 0, -2)
    window.history.stack.undo()                    # one edit applied, one redoable
    window.resize(1000, 700)
    QApplication.processEvents()
    state, before = panel.view_state(), _picture(panel)
    points = list(panel.model.points)

    session = save_session(window, tmp_path / "work")
    assert session.name == "work.studio"
    contents = read_session(session)
    assert contents.thumbnail and contents.thumbnail.startswith(b"\x89PNG")
    [document] = contents.documents
    assert document["path"] == str(data.resolve()) and document["panel"] == PANEL_ID
    assert document["relative"] == "data/points.txt" and document["kind"] == "sketch"
    edits = contents.manifest["edits"][f"sketch:{data.resolve()}"]
    assert len(edits["applied"]) == 1 and len(edits["redoable"]) == 1

    window.close_tab(window.tabs.indexOf(panel))
    report = open_session(window, session)
    assert report.done and report.complete, report.lines()
    restored = window.panel_widgets[PANEL_ID]
    assert window.tabs.currentWidget() is restored
    assert restored.view_state() == state
    assert restored.model.points == points
    assert _difference(_picture(restored), before) < 0.01
    assert window.history.stack.canRedo()          # the redoable step came back
    window.history.stack.redo()
    assert restored.model.points[2] == (8.0, 7.0)


def test_a_session_opens_from_a_copied_folder_at_another_path(sketch_window, tmp_path):
    window = sketch_window
    project = tmp_path / "project"
    data = write_points(project / "inputs" / "points.txt", POINTS)
    panel = _open_sketch(window, data)
    panel.move_point(0, 1, 1)
    save_session(window, project / "analysis.studio")
    state = panel.view_state()

    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(project, moved)
    shutil.rmtree(project)
    report = open_session(window, moved / "analysis.studio")
    assert report.done and not report.skipped and not report.changed, report.lines()
    assert any("relative to the session" in line for line in report.relocated)
    restored = window.panel_widgets[PANEL_ID]
    new_path = str((moved / "inputs" / "points.txt").resolve())
    assert restored.view_state() == {**state, "documents": [new_path]}
    assert restored.model.points[0] == (2.0, 2.0)   # its edit replayed on the copy


def test_a_moved_document_is_found_by_its_content(sketch_window, tmp_path):
    window = sketch_window
    data = write_points(tmp_path / "a" / "points.txt", POINTS)
    _open_sketch(window, data)
    session = save_session(window, tmp_path / "s.studio")
    renamed = tmp_path / "b" / "deeper" / "renamed.txt"
    renamed.parent.mkdir(parents=True)
    data.rename(renamed)
    report = open_session(window, session)
    assert any("by its content" in line for line in report.relocated), report.lines()
    assert window.panel_widgets[PANEL_ID].model.path == renamed.resolve()


def test_a_changed_file_is_reported_and_not_patched(sketch_window, tmp_path):
    window = sketch_window
    data = write_points(tmp_path / "points.txt", POINTS)
    panel = _open_sketch(window, data)
    panel.move_point(0, 5, 5)
    session = save_session(window, tmp_path / "s.studio")
    window.close_tab(window.tabs.indexOf(panel))
    write_points(data, [(0, 0), (1, 1), (2, 2), (3, 3)])   # changed on disk
    report = open_session(window, session)
    assert report.changed and "differs" in report.changed[0], report.lines()
    assert "1 edit(s) were not replayed" in report.changed[0]
    restored = window.panel_widgets[PANEL_ID]
    assert restored.model.points[0] == (0.0, 0.0)           # the session's edit not applied
    assert not report.complete


def test_a_missing_document_is_skipped_in_scripts_and_located_when_asked(sketch_window,
                                                                          tmp_path):
    window = sketch_window
    data = write_points(tmp_path / "here" / "points.txt", POINTS)
    _open_sketch(window, data)
    session = save_session(window, tmp_path / "s.studio")
    hidden = tmp_path.parent / f"{tmp_path.name}-hidden" / "kept.txt"
    hidden.parent.mkdir()
    shutil.move(data, hidden)
    try:
        report = open_session(window, session, interactive=False)
        assert report.done and any("not found" in line for line in report.skipped)
        assert not any("not found" in p for p in report.panel_problems.get(PANEL_ID, []))

        asked = []
        report = open_session(window, session, interactive=True,
                              locate=lambda missing, answer: asked.append((missing, answer)))
        assert not report.done and len(asked) == 1
        assert "kept" not in asked[0][0].message() and "points.txt" in asked[0][0].message()
        asked[0][1](str(hidden))                               # the user located it later
        assert report.done and any("located by you" in line for line in report.relocated)
        assert window.panel_widgets[PANEL_ID].model.path == hidden.resolve()
    finally:
        shutil.rmtree(hidden.parent)


def test_the_missing_document_dialog_is_non_modal_and_can_skip(sketch_window, tmp_path, qtbot):
    window = sketch_window
    data = write_points(tmp_path / "points.txt", POINTS)
    _open_sketch(window, data)
    session = save_session(window, tmp_path / "s.studio")
    data.unlink()
    report = open_session(window, session)                     # shown: interactive
    box = window.findChild(QMessageBox, "sessionMissingDocument")
    assert box is not None and box.isVisible()                # opened, not exec()'d
    assert not report.done
    sessions._buttons(box)["Skip"].click()
    qtbot.waitUntil(lambda: report.done)
    assert any("not found" in line for line in report.skipped)
    shown = window.findChild(QMessageBox, "sessionReport")   # what was left out, shown
    assert shown is not None and "not found" in shown.detailedText()


def test_newer_journal_edits_are_a_choice_and_the_other_edits_are_kept_aside(sketch_window,
                                                                            tmp_path):
    window = sketch_window
    data = write_points(tmp_path / "points.txt", POINTS)
    panel = _open_sketch(window, data)
    panel.move_point(0, 1, 0)
    session = save_session(window, tmp_path / "s.studio")
    time.sleep(0.01)
    panel.move_point(1, 0, 4)                                  # newer, in the journal only
    questions = []

    def choose(conflict, answer):
        questions.append(conflict)
        answer(JOURNAL_EDITS)

    report = open_session(window, session, choose_edits=choose)
    assert len(questions) == 1 and questions[0].journal_count == 2
    assert window.panel_widgets[PANEL_ID].model.points[1] == (5.0, 7.0)   # newer kept

    report = open_session(window, session, choose_edits=lambda c, answer: answer(SESSION_EDITS))
    restored = window.panel_widgets[PANEL_ID]
    assert restored.model.points[1] == (5.0, 3.0) and restored.model.points[0] == (2.0, 1.0)
    assert any("kept aside" in line for line in report.edits)
    aside = [r for r in window.workspace.documents("sketch") if r["aside"]]
    assert aside and len(window.workspace.load_edits(aside[0]["identity"])) == 2


def test_a_refused_session_leaves_the_window_as_it_was(sketch_window, tmp_path):
    window = sketch_window
    data = write_points(tmp_path / "points.txt", POINTS)
    panel = _open_sketch(window, data)
    bad = tmp_path / "bad.studio"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    report = open_session(window, bad)
    assert report.refused.startswith(str(bad)) and report.done
    assert window.panel_widgets[PANEL_ID] is panel


def test_a_panel_that_is_not_installed_is_skipped_and_the_rest_opens(sketch_window, tmp_path):
    window = sketch_window
    data = write_points(tmp_path / "points.txt", POINTS)
    _open_sketch(window, data)
    session = save_session(window, tmp_path / "s.studio")
    contents = read_session(session)
    manifest = contents.manifest
    manifest["panels"].insert(0, {"id": "no_such_panel", "view_state": {}})
    manifest["runs"] = ["20200101-000000-abcdef"]
    with zipfile.ZipFile(session, "w") as archive:
        archive.writestr("manifest.json", json.dumps(manifest))
    report = open_session(window, session)
    assert any("no_such_panel" in line for line in report.skipped), report.lines()
    assert any("run 20200101-000000-abcdef: not in this workspace" in line
               for line in report.skipped)
    assert PANEL_ID in window.panel_widgets


def test_file_menu_autosave_and_the_crash_offer(sketch_window, tmp_path, qtbot):
    window = sketch_window
    controller = install_sessions(window)
    texts = [a.text() for a in window.menuBar().actions()[0].menu().actions()]
    assert "Save sessio&n…" in texts and "Open &session…" in texts
    assert controller.timer.isActive() and controller.timer.interval() == 5 * 60_000
    choices = {a.text(): a for a in controller.autosave_menu.actions()}
    assert choices["Every 5 minutes"].isChecked()
    choices["Only on quit"].trigger()
    assert not controller.timer.isActive() and controller.autosave_minutes() == 0
    choices["Every 10 minutes"].trigger()
    assert controller.timer.interval() == 10 * 60_000
    controller.set_autosave_minutes(0.5)
    assert controller.timer.interval() == 30_000
    assert controller.autosave() is None                       # nothing open: nothing saved
    data = write_points(tmp_path / "points.txt", POINTS)
    _open_sketch(window, data, zoom=9.0)
    controller.timer.timeout.emit()                            # the timer fires
    assert read_session(controller.autosave_path).panels[0]["view_state"]["zoom"] == 9.0
    marker = controller._marker
    assert marker.is_file()

    # a Studio that died: its marker stays, its pid is gone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (controller.folder / f"running-{dead.pid}.json").write_text(json.dumps({"pid": dead.pid}))
    assert controller.crashed_markers()
    window.close_tab(window.tabs.indexOf(window.panel_widgets[PANEL_ID]))
    box = controller.offer_after_crash()
    assert box is not None and "did not quit" in box.windowTitle()
    assert not controller.crashed_markers()
    sessions._buttons(box)["Reopen the last session"].click()
    qtbot.waitUntil(lambda: PANEL_ID in window.panel_widgets)
    assert window.panel_widgets[PANEL_ID].zoom == 9.0

    window.close()                                             # a clean quit
    assert not marker.exists()
    assert controller.autosave_path.is_file()
    assert os.path.getsize(controller.autosave_path) > 0


def test_opening_in_the_background_reads_and_hashes_off_the_main_thread(sketch_window,
                                                                       tmp_path, qtbot,
                                                                       monkeypatch):
    import threading

    window = sketch_window
    data = write_points(tmp_path / "points.txt", POINTS)
    _open_sketch(window, data, zoom=7.0)
    session = save_session(window, tmp_path / "s.studio")
    threads = []
    original = sessions.locate_documents
    monkeypatch.setattr(sessions, "locate_documents", lambda *args: (
        threads.append(threading.current_thread()), original(*args))[1])
    done = []
    report = open_session(window, session, background=True, on_done=done.append)
    assert not report.done                                   # the window stays live
    qtbot.waitUntil(lambda: bool(done), timeout=10_000)
    assert threads and threads[0] is not threading.main_thread()
    assert report.complete and window.panel_widgets[PANEL_ID].zoom == 7.0
    bad = tmp_path / "bad.studio"
    bad.write_bytes(b"nothing")
    report = open_session(window, bad, background=True, on_done=done.append)
    qtbot.waitUntil(lambda: report.done, timeout=10_000)
    assert report.refused.startswith(str(bad))


def test_a_big_folder_named_in_a_view_state_is_listed_not_hashed(sketch_window, tmp_path,
                                                                monkeypatch):
    window = sketch_window
    monkeypatch.setattr(sessions, "MAX_FOLDER_FILES", 5)
    big = tmp_path / "home"
    for i in range(8):
        write_points(big / f"f{i}.txt", [(i, i)])
    small = tmp_path / "results"
    write_points(small / "a.txt", [(1, 1)])
    panel = _open_sketch(window, write_points(tmp_path / "points.txt", POINTS))
    monkeypatch.setattr(panel, "view_state", lambda: {"documents": [], "folder": str(big),
                                                      "results": str(small)})
    manifest = sessions.session_manifest(window, tmp_path / "s.studio")
    fingerprints = {Path(d["path"]).name: d["fingerprint"] for d in manifest["documents"]}
    assert fingerprints["home"] == "" and fingerprints["results"].startswith("d")


def test_an_api_key_in_a_view_state_is_masked_in_the_file(sketch_window, tmp_path,
                                                          monkeypatch):
    window = sketch_window
    key = "sk-test-0123456789abcdef"
    monkeypatch.setenv("STUDIO_CHAT_API_KEY", key)
    panel = _open_sketch(window, write_points(tmp_path / "points.txt", POINTS))
    monkeypatch.setattr(panel, "view_state", lambda: {"documents": [], "endpoint": key})
    session = save_session(window, tmp_path / "s.studio")
    assert key.encode() not in zipfile.ZipFile(session).read("manifest.json")
    assert read_session(session).panels[0]["view_state"]["endpoint"] == "**********"


def test_sessions_are_commands_scripts_and_menus_share(sketch_window, tmp_path, qtbot):
    from studio.commands import CommandRefused
    from studio.lineage import install_lineage_dock
    from tests.studio.test_commands_map import (
        test_no_two_window_actions_share_a_shortcut,
        unmapped,
        window_actions,
    )

    window = sketch_window
    install_sessions(window)
    install_lineage_dock(window)
    assert unmapped(window_actions(window), window.commands) == []   # every menu entry
    test_no_two_window_actions_share_a_shortcut(window)
    _open_sketch(window, write_points(tmp_path / "points.txt", POINTS), zoom=6.0)
    written = window.command("app.save_session", path=str(tmp_path / "by-command"))
    assert written == str((tmp_path / "by-command.studio").resolve())
    window.close_tab(window.tabs.indexOf(window.panel_widgets[PANEL_ID]))
    assert window.command("app.open_session", path=written) is True   # read in a thread
    qtbot.waitUntil(lambda: PANEL_ID in window.panel_widgets, timeout=10_000)
    assert window.panel_widgets[PANEL_ID].zoom == 6.0
    window.hide()                                   # as in a script: done when it returns
    bad = tmp_path / "bad.studio"
    bad.write_bytes(b"PK\x03\x04junk")
    with pytest.raises(CommandRefused, match=str(bad)):
        window.command("app.open_session", path=str(bad))
    with pytest.raises(CommandRefused, match="minutes"):
        window.command("app.autosave_session", minutes=-1)
    with pytest.raises(CommandRefused):
        window.command("app.save_session", path=str(tmp_path / "no" / "\0bad"))


def test_installing_sessions_and_lineage_costs_no_pydantic_or_torch(tmp_path):
    code = f"""
import sys, json
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
app = QApplication([])
from studio.main_window import MainWindow
from studio.sessions import install_sessions
from studio.lineage import install_lineage_dock
window = MainWindow(settings=QSettings({str(tmp_path / 's.ini')!r}, QSettings.Format.IniFormat),
                    workspace={str(tmp_path / 'ws')!r}, log_dir={str(tmp_path / 'logs')!r})
install_sessions(window)
install_lineage_dock(window)
print(json.dumps(["pydantic" in sys.modules, "torch" in sys.modules]))
window.shutdown()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "QT_QPA_PLATFORM": "offscreen"}, timeout=120,
                         check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, False]
