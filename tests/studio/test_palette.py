"""The command palette (issue 37): fuzzy search over every command and engine method, shortcuts
shown, a command run at once or after its arguments are asked from its schema, an engine method
submitted through ``engine.run_method``, a refusal kept on the form."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from studio.commands import Command, CommandRegistry
from studio.palette import (
    COMMAND,
    METHOD,
    PaletteEntry,
    entries_of,
    filter_entries,
    fuzzy_score,
)

ECHO = {"id": "diag.echo", "title": "Echo a message", "description": "diagnostics",
        "params_schema": {"type": "object", "properties": {
            "message": {"type": "string", "default": "hi", "description": "what to say"}}},
        "inputs": {}}


def entry(title: str, command_id: str, kind: str = COMMAND) -> PaletteEntry:
    return PaletteEntry(kind, command_id, title, "")


def test_letters_in_order_match_and_rank() -> None:
    assert fuzzy_score("mvw", "move a wire  routing.move_wire") is not None
    assert fuzzy_score("wvm", "move a wire  routing.move_wire") is None
    assert fuzzy_score("wire", "rerun with changes  runs.rerun_with_changes") is None
    # a substring beats a scattered match; an earlier word start beats a later one
    assert fuzzy_score("undo", "undo  edit.undo") > fuzzy_score("undo", "u n d o")
    assert fuzzy_score("wire", "wire it") > fuzzy_score("wire", "move a wire")
    entries = [entry("Move a wire", "routing.move_wire"), entry("Move a via", "routing.move_via"),
               entry("Delete a wire", "routing.delete_wire"), entry("Undo", "edit.undo"),
               entry("Echo a message", "diag.echo", METHOD)]
    assert [e.id for e in filter_entries(entries, "mvw")][0] == "routing.move_wire"
    assert [e.id for e in filter_entries(entries, "wire")] == [
        "routing.move_wire", "routing.delete_wire"]  # the earlier match first
    assert filter_entries(entries, "zzz") == []
    assert [e.kind for e in filter_entries(entries, "")][-1] == METHOD  # commands first
    assert [e.id for e in filter_entries(entries, "diag")] == ["diag.echo"]  # ids match too


def test_entries_are_commands_and_methods_but_not_the_method_runner() -> None:
    registry = CommandRegistry()
    registry.add(Command("engine.run_method", "Run an engine method", "", lambda t, a: None))
    registry.add(Command("edit.undo", "Undo", "Undo the last edit.", lambda t, a: None,
                         shortcut="Ctrl+Z"))
    found = entries_of(registry, [ECHO])
    assert [(e.kind, e.id, e.shortcut) for e in found] == [
        (COMMAND, "edit.undo", "Ctrl+Z"), (METHOD, "diag.echo", "")]
    assert not found[0].takes_arguments() and found[1].takes_arguments()
    assert found[1].arguments()["properties"]["message"]["default"] == "hi"


@pytest.fixture
def palette(main_window, qtbot, monkeypatch):
    submitted = []
    monkeypatch.setattr(main_window.bridge, "methods", [ECHO])
    monkeypatch.setattr(main_window, "submit", lambda *args: submitted.append(args))
    main_window.show_palette()
    shown = main_window._palette
    qtbot.waitUntil(shown.isVisible)
    shown.submitted = submitted
    return shown


def test_palette_finds_runs_and_logs(main_window, palette, qtbot) -> None:
    QTest.keyClicks(palette.search, "undo")
    first = palette.model.shown[0]
    assert first.id == "edit.undo"
    assert "Ctrl+Z" in palette.model.data(palette.model.index(0), Qt.ItemDataRole.DisplayRole)
    palette.search.clear()
    QTest.keyClicks(palette.search, "theme")
    assert palette.model.shown[0].id == "view.theme"
    QTest.keyClick(palette.search, Qt.Key.Key_Return)  # it takes an argument: the form
    assert palette.pages.currentIndex() == 1
    palette.form.set_values({"theme": "light"})
    assert palette.run_chosen()
    assert not palette.isVisible()
    assert main_window.settings.theme == "light"
    assert main_window.command_log.text().splitlines()[-1] == \
        'studio.command("view.theme", theme="light")'


def test_palette_runs_an_engine_method_with_its_form(main_window, palette) -> None:
    palette.set_query("echo")
    assert palette.model.shown[0].kind == METHOD
    palette.choose_current()
    palette.form.set_values({"message": "from the palette"})
    assert palette.run_chosen()
    assert palette.submitted == [("diag.echo", {"message": "from the palette"}, None, 0)]
    assert main_window.command_log.text().splitlines()[-1] == (
        'studio.command("engine.run_method", method="diag.echo", '
        'params={"message": "from the palette"})')


def test_a_refusal_stays_on_the_form(main_window, palette) -> None:
    palette.set_query("show a panel")
    assert palette.model.shown[0].id == "view.panel"
    palette.choose_current()
    palette.form.set_values({"panel": "nope"})
    assert not palette.run_chosen()
    assert palette.isVisible() and "no panel 'nope' is installed" in palette.form_error.text()
    assert main_window.errors == []  # said on the form, not in a message box


def test_a_command_without_arguments_runs_at_once(main_window, palette) -> None:
    main_window.open_panel("routing")
    palette.popup()
    palette.set_query("welcome")
    palette.choose_current()
    assert not palette.isVisible() and main_window.tabs.currentIndex() == 0


def test_a_panel_command_with_points_runs_from_the_form(main_window, palette, tmp_path) -> None:
    from tests.panels.routing.conftest import SMALL_DEF

    design = tmp_path / "small.def"
    design.write_text(SMALL_DEF)
    main_window.command("routing.open", path=str(design))
    palette.popup()
    palette.set_query("add a wire")
    assert palette.model.shown[0].id == "routing.add_wire"
    palette.choose_current()
    assert "[x, y] in µm" in palette.form_title.text()
    palette.form.set_values({"net": "b", "layer": "metal3", "from_um": [2, 1.4],
                             "to_um": [2, 5]})
    assert palette.run_chosen()
    assert main_window.command_log.text().splitlines()[-1] == (
        'studio.command("routing.add_wire", net="b", layer="metal3", from_um=[2.0, 1.4], '
        'to_um=[2.0, 5.0])')
    assert main_window.undo_action.text() == "&Undo Add a metal3 wire to b"


def test_ctrl_shift_p_opens_the_palette(main_window, qtbot) -> None:
    main_window.activateWindow()
    QTest.keyClick(main_window, Qt.Key.Key_P,
                   Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: main_window._palette is not None
                    and main_window._palette.isVisible(), timeout=3000)
    assert main_window._palette.count.text().endswith("commands and methods")
    main_window._palette.hide()


def test_the_palette_lists_the_commands_of_panels_not_opened_yet(main_window) -> None:
    """A user searching for an fMRI action finds it before opening the fMRI viewer; running
    it opens the panel."""
    assert "fmri" not in main_window.panel_widgets and "fmri.set_time" not in main_window.commands
    main_window.show_palette()
    listed = {entry.id for entry in main_window._palette.entries}
    assert {"fmri.set_time", "routing.move_wire"} <= listed
    assert "fmri" not in main_window.panel_widgets  # listing opens nothing
    main_window._palette.hide()


def test_an_exact_id_comes_first() -> None:
    entries = [entry("Open a scene", "crowd.open_scene"), entry("Open a clip", "crowd.open"),
               entry("Save the scene as", "crowd.save_scene_as")]
    assert [e.id for e in filter_entries(entries, "crowd.open")][0] == "crowd.open"
