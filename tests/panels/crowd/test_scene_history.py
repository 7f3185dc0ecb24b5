"""Random edit histories of the scene editor (hypothesis): boxes added, picked, dragged,
resized and deleted, groups spawned and resized, undo, redo, "Save scene as…" and reopening,
through the window's real undo history and autosave. After every step nothing has escaped to
the event loop, the file holds the scene shown, a fresh read of the file with the applied edits
replayed is the scene shown, the history holds the steps made, and the selection is an element
that exists; undoing everything gives the scene the history started from, which saves and
reads back unchanged."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.io.crowd import read_scene
from panels.crowd.scene import SceneModel, validated
from tests.panels.conftest import HistoryHost, close_widget
from tests.panels.crowd.edit_checks import ExpectedHistory, Step, escaped_exceptions

pytest.importorskip("PySide6")

SCENE = {
    "ground": {"size": [30, 20]},
    "buildings": [{"center": [4, 5], "size": [4, 3], "height": 8}],
    "groups": [{"count": 8, "spawn_center": [-11, 0], "spawn_size": [2, 3], "goal": [11, 0]}],
    "camera": [{"t_s": 0, "position": [0, -15, 6], "look_at": [0, 0, 0]}],
    "duration_s": 12, "fps": 5,
}

x_m = st.integers(-14, 14).map(float)
y_m = st.integers(-9, 9).map(float)
operations = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(["Building", "Obstacle"]), x_m, y_m),
    st.tuples(st.just("select"), x_m, y_m),
    st.tuples(st.just("drag"), st.sampled_from(["buildings", "obstacles"]), st.integers(0, 3),
              st.integers(-3, 3), st.integers(-3, 3), st.booleans()),
    st.tuples(st.just("drag_selected"), st.integers(-3, 3), st.integers(-3, 3)),
    st.tuples(st.just("delete")),
    st.tuples(st.just("group"), x_m, y_m, x_m, y_m),
    st.tuples(st.just("count"), st.integers(1, 40)),
    st.tuples(st.just("undo")), st.tuples(st.just("redo")),
    st.tuples(st.just("undo")), st.tuples(st.just("redo")),
    st.tuples(st.just("save_as")), st.tuples(st.just("reopen")),
)


def open_editor(folder: Path):
    """A scene editor over a history host in ``folder``, editing ``SCENE`` in scene.json."""
    from panels.crowd.scene_editor import SceneEditor

    path = folder / "scene.json"
    path.write_text(json.dumps(SCENE))
    host = HistoryHost(folder / "runs", folder / "workspace")
    editor = SceneEditor(host, run_in_pool=lambda work, done, failed: done(work()),
                         current_frame=lambda: 0, show_tracks=lambda tracks: None,
                         render=lambda path: None)
    editor.open_scene(path)
    return editor, host, path


def perform(editor, operation: tuple, folder: Path) -> None:
    name, *args = operation
    tools = editor.tool_box
    if name == "add":
        tools.setCurrentText(args[0])
        editor.click(*args[1:])
    elif name == "select":
        tools.setCurrentText("Select")
        editor.click(*args)
    elif name == "drag":  # a pick the test makes up: the box may not exist
        kind, index, dx, dy, resize = args
        boxes = getattr(editor.model.scene, kind)
        box = boxes[index] if index < len(boxes) else None
        center = (box.center[0] + dx, box.center[1] + dy) if box else (float(dx), float(dy))
        size = (box.size[0] + (1 if resize else 0), box.size[1]) if box else (2.0, 2.0)
        editor.drag_box(kind, index, center, size)
    elif name == "drag_selected":  # the user drags what is highlighted
        if editor.selection and editor.selection[0] in ("buildings", "obstacles"):
            kind, index = editor.selection
            box = getattr(editor.model.scene, kind)[index]
            editor.drag_box(kind, index, (box.center[0] + args[0], box.center[1] + args[1]),
                            tuple(box.size))
    elif name == "delete":
        editor.delete_selection()
    elif name == "group":
        tools.setCurrentText("Group")
        editor.click(*args[:2])
        editor.click(*args[2:])
    elif name == "count":
        tools.setCurrentText("Select")
        editor.count_box.setValue(args[0])
    elif name == "undo":
        editor.host.undo()
    elif name == "redo":
        editor.host.redo()
    elif name == "save_as":
        editor.save_as(folder / f"saved-{len(list(folder.glob('saved-*')))}.json")
    elif name == "reopen":
        editor.open_scene(editor.model.path)


def replayed_fresh(editor, history, folder: Path) -> dict:
    """A fresh read of the scene's file with the applied edits of its document replayed."""
    copy = folder / "fresh" / editor.model.path.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(editor.model.path, copy)
    fresh = SceneModel(copy)
    for command in history.applied(editor.model.document):
        command.apply(fresh)
    return fresh.data


def restored_steps(editor, host) -> list[Step]:
    """The steps a reopened scene got back: the saved edits of whichever document its
    content is (a copy made by "Save as" finds the edits of the scene it copies). They are
    all applied and lead, edit by edit, to the scene as read."""
    history = host.history
    commands = history.applied(editor.model.document)
    assert history.stack.index() == history.stack.count() == len(commands)
    steps = [Step(editor.model.document, normal(c.before), normal(c.after)) for c in commands]
    for earlier, later in zip(steps, steps[1:], strict=False):
        assert earlier.after == later.before
    assert not steps or steps[-1].after == editor.model.data
    return steps


def normal(data: dict) -> dict:
    return validated(data).model_dump(mode="json")


def check(editor, host, expected: ExpectedHistory, folder: Path) -> None:
    model, stack = editor.model, host.history.stack
    assert model.data == read_scene(model.path).model_dump(mode="json")
    assert replayed_fresh(editor, host.history, folder) == model.data
    assert model.data == expected.state
    assert (stack.index(), stack.count()) == (expected.index, len(expected.steps))
    if editor.selection is not None:
        kind, index = editor.selection
        assert 0 <= index < len(getattr(model.scene, kind)), editor.selection


@given(st.lists(operations, max_size=14))
def test_random_scene_edit_histories_keep_file_history_and_selection_true(qapp, operations):
    with tempfile.TemporaryDirectory() as tmp, escaped_exceptions() as escaped:
        folder = Path(tmp)
        editor, host, path = open_editor(folder)
        try:
            original = editor.model.data
            expected = ExpectedHistory(original)
            for operation in operations:
                index = host.history.stack.index()
                before = editor.model.data
                perform(editor, operation, folder)
                assert not escaped, (operation, escaped)
                if expected.pressed(operation[0]):
                    pass
                elif operation[0] == "reopen":
                    assert editor.model.data == before  # the file holds every edit
                    expected.reopened(editor.model.document, restored_steps(editor, host))
                elif host.history.stack.index() == index + 1:
                    expected.pushed(editor.model.document, editor.model.data)
                else:  # refused, or nothing to do: no step, no change
                    assert host.history.stack.index() == index
                    assert editor.model.data == before
                check(editor, host, expected, folder)

            while host.history.stack.canUndo():
                host.undo()
            assert not escaped
            assert editor.model.data == expected.bottom()
            if not any(op[0] in ("save_as", "reopen") for op in operations):
                assert editor.model.data == original == read_scene(path).model_dump(mode="json")
            saved = folder / "undone.json"
            editor.save_as(saved)
            assert read_scene(saved).model_dump(mode="json") == editor.model.data
        finally:
            close_widget(editor)


def test_undo_clears_or_follows_the_selection_and_a_gone_box_is_refused(qapp, tmp_path):
    """Select an added box, undo its adding: the selection is cleared (not left on a box that
    is gone); a drag of that box is refused with a message and no undo step; undoing the
    removal of a box before the selected one keeps the selection on the same box."""
    editor, host, _ = open_editor(tmp_path)
    try:
        editor.tool_box.setCurrentText("Obstacle")
        editor.click(-4.0, -4.0)
        editor.tool_box.setCurrentText("Select")
        editor.click(-4.0, -4.0)
        assert editor.selection == ("obstacles", 0)
        host.undo()
        assert editor.selection is None
        steps = host.history.stack.count()
        assert not editor.drag_box("obstacles", 0, (0.0, 0.0), (1.0, 1.0))
        assert "does not exist" in host.errors[-1][1] and "refused" in editor.status.text()
        assert host.history.stack.count() == steps and editor.model.scene.obstacles == []

        editor.tool_box.setCurrentText("Building")
        editor.click(-4.0, 6.0)  # buildings[1], after the scene's own buildings[0]
        editor.tool_box.setCurrentText("Select")
        editor.click(4.0, 5.0)
        editor.delete_selection()  # buildings[0] goes; the new one becomes buildings[0]
        editor.click(-4.0, 6.0)
        assert editor.selection == ("buildings", 0)
        host.undo()  # buildings[0] is back: the selected building is buildings[1] again
        assert editor.selection == ("buildings", 1)
        assert editor.model.scene.buildings[1].center == (-4.0, 6.0)
    finally:
        close_widget(editor)
