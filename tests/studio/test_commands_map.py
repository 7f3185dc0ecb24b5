"""Every control maps to a registered command (issue 37): each entry of the window's menus and
toolbars, and each button, check box and action of the panels listed in ``PANELS``, runs (or
asks an argument of) a command the window's registry knows. A panel moved onto commands adds
its id to ``PANELS``; its controls are then checked here as it is opened in the window.

Also: the shell's commands run from the registry as from the menus (undo of a panel's command
through the tab's history, a refusal naming what is missing), and ``studio.app.command``."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QLineEdit,
    QMenu,
    QTabBar,
    QToolBar,
    QToolButton,
    QWidget,
)

from studio.command_widgets import commands_of
from studio.commands import CommandRefused

# Panels whose every control runs a command. Add yours when it has moved onto commands.
PANELS = ["routing", "fmri", "molecules", "crowd", "dialogue", "lab", "sae"]

# Parts of Qt's own widgets that are buttons but no action of ours (a tab bar's scroll
# arrows, a spin box's steppers, a line edit's clear button).
QT_PARTS = (QTabBar, QAbstractSpinBox, QLineEdit, QAbstractItemView)


def menu_actions(menu: QMenu, path: str = "") -> list[tuple[str, QAction]]:
    """Every action of a menu and its submenus, with its menu path."""
    found = []
    menu.aboutToShow.emit()  # menus filled when first opened (panels, recent files)
    for action in menu.actions():
        if action.isSeparator():
            continue
        where = f"{path}/{action.text().replace('&', '')}"
        if action.menu() is not None:
            found += menu_actions(action.menu(), where)
        elif action.isEnabled() or commands_of(action):
            found.append((where, action))
    return found


def window_actions(window) -> list[tuple[str, QAction]]:
    found = []
    for top in window.menuBar().actions():
        found += menu_actions(top.menu(), top.text().replace("&", ""))
    # the window's own toolbars (a dock's toolbar belongs to the dock, listed like a panel)
    for bar in window.findChildren(QToolBar, options=Qt.FindChildOption.FindDirectChildrenOnly):
        found += [(f"toolbar {bar.windowTitle()}/{a.text()}", a) for a in bar.actions()
                  if not a.isSeparator()]
    return found


def panel_controls(panel: QWidget) -> list[tuple[str, object]]:
    """The panel's buttons, check boxes and actions (Qt's inner parts left out)."""
    found = []
    for button in panel.findChildren(QAbstractButton):
        parent = button.parentWidget()
        if any(isinstance(parent, part) for part in QT_PARTS):
            continue
        if isinstance(button, QToolButton) and (button.defaultAction() is not None
                                                or button.objectName() == "qt_toolbar_ext_button"):
            continue  # a toolbar's button for an action (the action is walked) or its ">>"
        found.append((f"button {button.text() or button.objectName()!r}", button))
    for action in panel.findChildren(QAction):
        if not action.isSeparator() and action.text():
            found.append((f"action {action.text()!r}", action))
    return found


def unmapped(controls, registry) -> list[str]:
    return [where for where, control in controls
            if not commands_of(control)
            or any(command_id not in registry for command_id in commands_of(control))]


def test_every_menu_and_toolbar_action_runs_a_command(main_window) -> None:
    actions = window_actions(main_window)
    assert len(actions) >= 25  # the menus are there (and were walked)
    assert unmapped(actions, main_window.commands) == []
    by_id = {commands_of(a)[0] for _where, a in actions}
    assert {"app.open", "app.export_figure", "edit.undo", "edit.redo", "view.palette",
            "view.command_log", "view.panel", "help.about"} <= by_id


@pytest.mark.parametrize("panel_id", PANELS)
def test_every_control_of_the_panel_runs_a_command(main_window, panel_id) -> None:
    panel = main_window.open_panel(panel_id)
    assert panel is not None, main_window.errors
    controls = panel_controls(panel)
    assert controls, f"the {panel_id} panel has no buttons?"
    assert unmapped(controls, main_window.commands) == []


def test_every_control_of_the_runs_dock_runs_a_command(main_window, tmp_path) -> None:
    """The toolbar, the notes, the checkpoint list and the right-click menu of a run with a
    checkpoint and an output a panel opens."""
    run_dir = tmp_path / "runs" / "20260101-000000-abcdef"
    (run_dir / "checkpoints" / "model").mkdir(parents=True)
    (run_dir / "samples.smi").write_text("CCO\n")
    record = main_window.bridge.jobs.register("20260101-000000-abcdef", "diag.count", {},
                                              run_dir=str(run_dir))
    record.state, record.outputs = "succeeded", {"samples": "samples.smi"}
    dock = main_window.runs_dock
    dock.select(record.id)
    dock.checkpoint_menu.aboutToShow.emit()
    menu = dock.context_menu()
    controls = panel_controls(dock) + [(f"context {a.text()!r}", a) for a in menu.actions()
                                       if not a.isSeparator()]
    assert unmapped(controls, main_window.commands) == []
    by_id = {command_id for _where, control in controls for command_id in commands_of(control)}
    assert by_id == {"runs.cancel", "runs.rerun", "runs.rerun_with_changes", "runs.delete",
                     "runs.export_plot", "runs.open_folder", "runs.set_notes",
                     "app.export_checkpoint", "app.open"}
    assert commands_of(dock.metric_combo) == ["runs.show"]
    opened = [a for a in menu.actions() if a.text() == "Open samples in Molecules"]
    assert len(opened) == 1 and commands_of(opened[0]) == ["app.open"]
    assert opened[0].shortcuts() == []  # Ctrl+O stays File > Open's alone


def test_every_control_of_the_welcome_page_runs_a_command(main_window, tmp_path) -> None:
    recent = tmp_path / "mine.smi"
    recent.write_text("CCO\n")
    main_window.remember_file(recent)
    welcome = main_window.welcome
    controls = panel_controls(welcome)
    assert unmapped(controls, main_window.commands) == []
    by_id = {command_id for _where, control in controls for command_id in commands_of(control)}
    available = {card.paper.available for card in welcome.cards}
    assert by_id == {"app.open", "welcome.open_paper"} | (
        {"welcome.show_coming"} if False in available else set())
    assert commands_of(welcome.filter) == ["welcome.filter"]


def test_menu_shortcuts_are_the_commands_shortcuts(main_window) -> None:
    def keys(action):
        return {s.toString() for s in action.shortcuts()}

    palette = next(a for _w, a in window_actions(main_window)
                   if commands_of(a) == ["view.palette"])
    assert keys(palette) == {"Ctrl+Shift+P"}
    assert keys(main_window.redo_action) == {"Ctrl+Shift+Z", "Ctrl+Y"}


def test_a_panel_command_from_a_script_opens_the_panel_and_undoes(main_window, tmp_path
                                                                   ) -> None:
    from tests.panels.routing.conftest import SMALL_DEF

    design = tmp_path / "small.def"
    design.write_text(SMALL_DEF)
    seen = []
    main_window.commands.listen(seen.append)
    # the routing panel is not open: the command opens it, then acts on its design
    main_window.command("routing.open", path=str(design))
    panel = main_window.panel_widgets["routing"]
    assert main_window.tabs.currentWidget() is panel and panel.model.design is not None
    main_window.command("routing.move_wire", net="b", layer="metal2", from_um=[1, 1.4],
                        to_um=[8, 1.4], dy_um=0.2)
    assert main_window.undo_action.text() == "&Undo Move a metal2 wire of b"
    main_window.undo_action.trigger()  # Edit > Undo runs edit.undo on the routing tab
    assert seen[-1].python() == 'studio.command("edit.undo")' and seen[-1].source == "user"
    rows = panel.model.design.segments.tolist()
    assert any(r[2:6] == [1000, 1400, 8000, 1400] for r in rows)
    with pytest.raises(CommandRefused, match="edit.undo: nothing to undo in the VLSI route"):
        main_window.command("edit.undo")
    with pytest.raises(CommandRefused, match="no panel 'nope' is installed"):
        main_window.command("view.panel", panel="nope")


def test_studio_app_command_reaches_the_running_window(main_window, monkeypatch) -> None:
    import studio.app

    with pytest.raises(RuntimeError, match="not running"):
        studio.app.command("view.welcome")
    monkeypatch.setattr(studio.app, "_window", main_window)
    main_window.open_panel("routing")
    assert studio.app.command("view.welcome") is True
    assert main_window.tabs.currentIndex() == 0


def test_the_window_and_its_menus_are_built_without_pydantic(tmp_path) -> None:
    """Start-up does not pay for pydantic (about 0.1-0.2 s here): the shell's argument models
    are named as "module:Class" and imported when a command first runs (or by the prewarm)."""
    import json
    import subprocess
    import sys

    code = f"""
import sys, json
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
app = QApplication([])
from studio.main_window import MainWindow
window = MainWindow(settings=QSettings({str(tmp_path / 's.ini')!r}, QSettings.Format.IniFormat),
                    workspace={str(tmp_path / 'ws')!r}, log_dir={str(tmp_path / 'logs')!r})
before = "pydantic" in sys.modules
window.command("view.theme", theme="light")
print(json.dumps([before, "pydantic" in sys.modules, len(window.commands)]))
window.shutdown()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"},
                         timeout=120, check=True)
    before, after, count = json.loads(out.stdout.strip().splitlines()[-1])
    assert (before, after) == (False, True) and count >= 25


def test_no_two_window_actions_share_a_shortcut(main_window) -> None:
    """Qt fires neither of two actions with the same key ("ambiguous shortcut")."""
    owners: dict[str, list[str]] = {}
    for action in main_window.findChildren(QAction):
        if action.shortcutContext() != Qt.ShortcutContext.WindowShortcut:
            continue
        for key in action.shortcuts():
            owners.setdefault(key.toString(), []).append(action.text())
    shared = {key: texts for key, texts in owners.items() if len(set(texts)) > 1}
    assert shared == {}
