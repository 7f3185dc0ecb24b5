"""Undo is scoped to the tab in front: one stack per tab (a ``QUndoGroup``), Ctrl+Z in a text
box undoes its typing first, the history dock groups steps by document, and saved edits of a
changed file are offered in a dialog."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLineEdit, QMessageBox

from tests.studio.test_undo import SetKey


def press(window, key: str) -> None:
    QTest.keyClick(window.focusWidget() or window, Qt.Key.Key_Z,
                   Qt.KeyboardModifier.ControlModifier
                   | (Qt.KeyboardModifier.ShiftModifier if key == "redo"
                      else Qt.KeyboardModifier.NoModifier))


def two_tabs(window) -> tuple[dict, dict]:
    """The lab and molecules tabs, each with one edit on a document of its own."""
    lab_model: dict = {}
    molecules_model: dict = {}
    window.open_panel("lab")
    window.history.push("lab-doc", SetKey("seed", 1), lab_model)
    window.open_panel("molecules")
    window.history.push("molecules-doc", SetKey("flag", "accepted"), molecules_model)
    return lab_model, molecules_model


def test_ctrl_z_touches_only_the_tab_in_front(main_window, qtbot) -> None:
    """Finding 3: in the routing tab, Edit offered the molecule tab's step."""
    lab_model, molecules_model = two_tabs(main_window)
    main_window.open_panel("lab")
    assert main_window.undo_action.text() == "&Undo set seed"
    main_window.activateWindow()
    main_window.panel_widgets["lab"].setFocus()
    press(main_window, "undo")
    assert lab_model == {} and molecules_model == {"flag": "accepted"}
    assert not main_window.undo_action.isEnabled()  # nothing left in this tab
    main_window.tabs.setCurrentIndex(0)  # Welcome: no edits there
    assert not main_window.undo_action.isEnabled()
    main_window.open_panel("molecules")
    assert main_window.undo_action.text() == "&Undo set flag"
    main_window.undo_action.trigger()
    assert molecules_model == {}
    main_window.open_panel("lab")
    main_window.redo_action.trigger()
    assert lab_model == {"seed": 1} and molecules_model == {}


def test_closing_a_tab_takes_its_history_out_of_the_group(main_window) -> None:
    two_tabs(main_window)
    index = main_window.tabs.indexOf(main_window.panel_widgets["molecules"])
    main_window.close_tab(index)
    assert main_window.undo_group.activeStack() is main_window.history.stack
    assert len(main_window.undo_group.stacks()) == 2  # the window's own and the lab's


def test_ctrl_z_in_a_text_box_undoes_its_typing_then_the_tabs_edit(main_window, qtbot) -> None:
    """Finding 4: Ctrl+Z did nothing while the focus was in a panel's text box."""
    model: dict = {}
    panel = main_window.open_panel("molecules")
    main_window.history.push("molecules-doc", SetKey("flag", "accepted"), model)
    box = panel.findChildren(QLineEdit)[0]
    main_window.activateWindow()
    box.setFocus()
    qtbot.waitUntil(box.hasFocus)
    QTest.keyClicks(box, "CCO")
    press(main_window, "undo")
    assert box.text() == "" and model == {"flag": "accepted"}  # the box's typing first
    press(main_window, "undo")
    assert model == {}  # then the tab's last edit
    press(main_window, "redo")
    assert box.text() == "CCO" and model == {}  # redo, likewise: the box's own first
    press(main_window, "redo")
    assert model == {"flag": "accepted"}


def test_the_history_dock_groups_the_active_tabs_steps_by_document(main_window) -> None:
    first: dict = {}
    second: dict = {}
    main_window.open_panel("lab")
    history = main_window.history
    history.push("lab:/data/a.csv", SetKey("x", 1), first)
    history.push("lab:/data/b.csv", SetKey("y", 2), second)
    history.push("lab:/data/a.csv", SetKey("z", 3), first)
    history.stack.undo()
    view = main_window.undo_view
    assert view.documents() == ["lab:/data/a.csv", "lab:/data/b.csv"]
    branch = view.topLevelItem(0)
    assert branch.text(0) == "a.csv" and [branch.child(i).text(0) for i in range(2)] == [
        "set x", "set z"]
    assert "undone" in branch.child(1).toolTip(0)
    main_window.tabs.setCurrentIndex(0)
    assert view.documents() == []  # the Welcome tab has no steps


def test_saved_edits_of_a_changed_file_are_offered_in_a_dialog(main_window, tmp_path,
                                                                qtbot) -> None:
    from panels.molecules.model import MoleculeSetModel, decode

    path = tmp_path / "drugs.smi"
    path.write_text("CCO ethanol\nCCN ethylamine\n")
    main_window.open_panel("molecules")
    history = main_window.history

    def reopen() -> MoleculeSetModel:
        model = MoleculeSetModel()
        model.load(path)
        history.restore(model.document, model, decode)
        return model

    model = reopen()
    history.push(model.document, model.flagging(1, "rejected"), model)
    history.forget(model.document)
    path.write_text("CCO ethanol\nCCN ethylamine\nCCCl chloroethane\n")
    model = reopen()
    assert [entry.flag for entry in model.entries] == ["", "", ""]  # nothing until answered
    qtbot.waitUntil(lambda: any(isinstance(box, QMessageBox) and "saved edit" in box.text()
                                for box in main_window._message_boxes))
    box = next(box for box in main_window._message_boxes if "saved edit" in box.text())
    assert str(path) in box.text() and "changed on disk" in box.text()
    replay = next(button for button in box.buttons() if button.text() == "Replay")
    replay.click()
    qtbot.waitUntil(lambda: model.entries[1].flag == "rejected")
    assert main_window.undo_action.text().startswith("&Undo Replay 1 saved edit")
