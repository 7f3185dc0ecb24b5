"""Macros: commands recorded on one design, saved as a ``.py`` of ``studio.command`` lines and
replayed on a second design give the same edits where the names exist; lines naming a net the
second design lacks are refused and listed, the rest apply (in the window and headless)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.vlsi import shared_design_paths
from studio.macros import (
    MACRO_HEADER,
    MacroError,
    MacroRecorder,
    install_macro_controls,
    read_macro,
    recordable,
)

DESIGN = shared_design_paths()
pytestmark = pytest.mark.skipif(DESIGN is None, reason="../shared/data/vlsi is absent")


def renamed_copy(folder: Path, net: str) -> Path:
    """The gcd design (and its LEF) in ``folder``, with ``net`` renamed: a second design
    where every other name is the same."""
    folder.mkdir()
    shutil.copy(DESIGN[0], folder / DESIGN[0].name)
    text = DESIGN[1].read_text(encoding="utf-8")
    pattern = rf"(?<![\w]){re.escape(net)}(?![\w])"
    assert re.search(pattern, text)
    target = folder / "gcd_renamed.def"
    target.write_text(re.sub(pattern, f"{net}renamed", text), encoding="utf-8")
    return target


def open_design(window, qtbot, path: Path):
    window.open_paths([str(path)])
    qtbot.waitUntil(lambda: "routing" in window.panel_widgets and
                    (model := window.panel_widgets["routing"].model).design is not None
                    and Path(model.design.path).resolve() == path.resolve(), timeout=60_000)
    return window.panel_widgets["routing"].model


def wiring(model, net: str) -> np.ndarray:
    index = next(i for i, n in enumerate(model.design.nets) if n.name == net)
    segments, vias = model.design.net_wiring(index)
    return np.concatenate([np.sort(np.asarray(segments), axis=0).ravel(),
                           np.sort(np.asarray(vias), axis=0).ravel()])


def two_wires(model) -> list[tuple[str, dict]]:
    from panels.routing.commands import RoutingState, wire_args

    state = RoutingState(model, host=None)
    found = []
    for index, net in enumerate(model.design.nets):
        segments = model.design.net_wiring(index)[0]
        if len(segments) and net.name.startswith("_"):
            found.append((net.name, wire_args(state, net.name, model.segment_row(segments[0]))))
        if len(found) == 2:
            return found
    raise AssertionError("the design has fewer than two wired nets")


def test_recorded_macro_replays_the_same_edits_on_a_second_design(main_window, qtbot,
                                                                  tmp_path):
    window = main_window
    model = open_design(window, qtbot, DESIGN[1])
    (kept, kept_wire), (lost, lost_wire) = two_wires(model)
    recorder = MacroRecorder(window.commands)
    recorder.start()
    window.commands.trigger("routing.move_wire", **kept_wire, dx_um=0.38)     # as a click
    window.commands.trigger("routing.move_wire", **lost_wire, dy_um=-0.14)
    window.commands.trigger("routing.move_wire", net="no_such_net", layer="metal2",
                            from_um=[0, 0], to_um=[1, 0], dx_um=1)            # refused: not kept
    window.commands.trigger("view.runs", on=True)                            # not a document's
    lines = recorder.stop()
    assert len(lines) == 2 and all(line.startswith('studio.command("routing.move_wire"')
                                   for line in lines)
    edited = {kept: wiring(model, kept), lost: wiring(model, lost)}
    macro = recorder.save(tmp_path / "move_two")
    assert macro.suffix == ".py" and macro.read_text().startswith(MACRO_HEADER)
    assert [step.command for step in read_macro(macro)] == ["routing.move_wire"] * 2

    second = open_design(window, qtbot, renamed_copy(tmp_path / "second", lost))
    untouched = wiring(second, kept)
    assert not np.array_equal(untouched, edited[kept])
    from studio.macros import replay_in_window

    replay = replay_in_window(window, macro)
    assert [step.line for step in replay.applied] == [5]
    assert len(replay.refused) == 1
    step, reason = replay.refused[0]
    assert step.line == 6 and lost in reason
    assert np.array_equal(wiring(second, kept), edited[kept])    # the same edit, here
    assert "1 refused" in window._message_boxes[-1].text() and "line 6" in \
        window._message_boxes[-1].text()
    # one undo step per applied line, in this design's tab
    assert window.history.stack.count() == 1


def test_a_macro_replays_headless_listing_what_was_refused(tmp_path):
    from tests.studio.test_scripting import studio_script

    lost = "_002_"
    second = renamed_copy(tmp_path / "second", lost)
    macro = tmp_path / "macro.py"
    macro.write_text(f"{MACRO_HEADER}: 2 command(s)\n"
                     'studio.command("routing.select_net", net="_001_")\n'
                     f'studio.command("routing.select_net", net="{lost}")\n', encoding="utf-8")
    result = studio_script(tmp_path, macro.read_text(), str(second))
    assert result.returncode == 1
    assert "1 command(s) applied, 1 refused" in result.stderr
    assert "line 3: routing.select_net:" in result.stderr and lost in result.stderr


def test_only_plain_command_lines_are_a_macro(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(f"{MACRO_HEADER}\nimport os\n", encoding="utf-8")
    with pytest.raises(MacroError, match="line 2: a macro holds only studio.command"):
        read_macro(bad)
    bad.write_text('studio.command("x.y", path=open("f").read())\n', encoding="utf-8")
    with pytest.raises(MacroError, match="plain values"):
        read_macro(bad)
    assert not recordable("app.open") and not recordable("routing.open")
    assert not recordable("help.about") and recordable("routing.move_wire")


def test_log_dock_has_record_stop_save_and_replay(main_window, qtbot, tmp_path):
    from PySide6.QtWidgets import QPushButton

    recorder = install_macro_controls(main_window)
    assert install_macro_controls(main_window) is recorder
    buttons = {button.text(): button for button in
               main_window.command_log.findChildren(QPushButton)}
    assert {"Record", "Stop", "Save…", "Replay…"} <= set(buttons)
    assert not buttons["Stop"].isEnabled() and not buttons["Save…"].isEnabled()
    buttons["Record"].click()
    assert recorder.recording and buttons["Stop"].isEnabled()
    main_window.commands.trigger("view.theme", theme="light")
    buttons["Stop"].click()
    assert recorder.lines == ['studio.command("view.theme", theme="light")']
    assert buttons["Save…"].isEnabled()
