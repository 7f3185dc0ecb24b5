"""Random edit histories of the crowd panel's tracks (hypothesis): people moved by typed
commands and by dragging on the track map, prompts, undo, redo, reopening the file and
switching to another one, through the window's real undo history and autosave. After every
step nothing has escaped to the event loop, a fresh read of the file with the applied edits
replayed is what the panel shows, the history holds the steps made, and a picked person is a
sample of the tracks shown; undoing everything gives the tracks as read."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.panels.conftest import HistoryHost, close_widget
from tests.panels.crowd.edit_checks import ExpectedHistory, escaped_exceptions

pytest.importorskip("PySide6")

FILES = {  # two walks of three people over three frames (metres)
    "a.csv": "frame,id,x,y\n" + "".join(f"{f},{p},{p + 0.5 * f},{2.0 * p}\n"
                                        for f in range(3) for p in (1, 2, 3)),
    "b.csv": "frame,id,x,y\n" + "".join(f"{f},{p},{-p},{f - 1.5 * p}\n"
                                        for f in range(3) for p in (1, 2, 3)),
}

operations = st.one_of(
    st.tuples(st.just("move"), st.integers(1, 4), st.integers(0, 3), st.integers(-5, 5),
              st.integers(-5, 5)),
    st.tuples(st.just("press"), st.integers(0, 2), st.integers(0, 2)),
    st.tuples(st.just("release"), st.integers(-30, 30), st.integers(-30, 30)),
    st.tuples(st.just("prompt"), st.sampled_from(["", "dusk", "rain on the square"])),
    st.tuples(st.just("undo")), st.tuples(st.just("redo")),
    st.tuples(st.just("undo")), st.tuples(st.just("redo")),
    st.tuples(st.just("reopen")), st.tuples(st.just("switch")),
)


def open_panel(folder: Path):
    """A crowd panel over a history host in ``folder``, showing a.csv (b.csv beside it)."""
    from engine.methods import c2r
    from panels.crowd.view import CrowdPanel

    for name, text in FILES.items():
        (folder / name).write_text(text)
    host = HistoryHost(folder / "runs", folder / "workspace")
    host._params.update({spec.id: spec.params for spec in c2r.SPECS})
    panel = CrowdPanel(host)
    panel.open_file(folder / "a.csv")
    return panel, host


def state(panel) -> tuple:
    tracks = panel.model.tracks
    return tracks.path, tracks.xy.tolist(), panel.model.prompt


def perform(panel, operation: tuple, folder: Path) -> None:
    name, *args = operation
    if name == "move":
        panel.move_waypoint(args[0], args[1], (float(args[2]), float(args[3])))
    elif name == "press":  # a person picked on the map at a frame (nobody there: no pick)
        frame, person = args
        panel.model.set_frame(frame)
        markers = panel.model.markers()
        if person < len(markers):
            panel._press_map(markers[person].x, markers[person].y)
    elif name == "release":
        start = panel._drag_start or (100.0, 100.0)
        panel._release_map(start[0] + args[0], start[1] + args[1])
    elif name == "prompt":
        panel.edit_prompt(args[0])
    elif name == "undo":
        panel.host.undo()
    elif name == "redo":
        panel.host.redo()
    elif name == "reopen":
        panel.open_file(panel.model.tracks.path)
    elif name == "switch":
        other = "b.csv" if Path(panel.model.tracks.path).name == "a.csv" else "a.csv"
        panel.open_file(folder / other)


def fresh_replayed(panel, history) -> tuple:
    """A fresh read of the open file with the applied edits of its document replayed."""
    from panels.crowd.model import CrowdModel

    fresh = CrowdModel()
    fresh.load_tracks(panel.model.tracks.path)
    for command in history.applied(panel.model.document):
        command.apply(fresh)
    return fresh.tracks.path, fresh.tracks.xy.tolist(), fresh.prompt


def check(panel, host, expected: ExpectedHistory) -> None:
    stack = host.history.stack
    assert fresh_replayed(panel, host.history) == state(panel) == expected.state
    assert (stack.index(), stack.count()) == (expected.index, len(expected.steps))
    if panel._dragging is not None:
        panel.model.waypoint(*panel._dragging)  # raises if the picked sample is gone


@given(st.lists(operations, max_size=16))
def test_random_track_edit_histories_keep_tracks_history_and_pick_true(qapp, operations):
    with tempfile.TemporaryDirectory() as tmp, escaped_exceptions() as escaped:
        folder = Path(tmp)
        panel, host = open_panel(folder)
        try:
            expected = ExpectedHistory(state(panel))
            read = {str(folder / "a.csv"): state(panel)}
            saved: dict[str, list] = {}  # each document's applied steps, as autosaved
            for operation in operations:
                index, before = host.history.stack.index(), state(panel)
                document = panel.model.document
                perform(panel, operation, folder)
                assert not escaped, (operation, escaped)
                if expected.pressed(operation[0]):
                    pass
                elif operation[0] in ("reopen", "switch"):
                    saved[document] = expected.steps[:expected.index]
                    read.setdefault(panel.model.tracks.path, state(panel))
                    expected.reopened(panel.model.document,
                                      saved.get(panel.model.document, []))
                    expected.state = state(panel)
                elif host.history.stack.index() == index + 1:
                    expected.pushed(panel.model.document, state(panel))
                else:  # refused, or nothing to do: no step, no change
                    assert host.history.stack.index() == index and state(panel) == before
                check(panel, host, expected)

            while host.history.stack.canUndo():
                host.undo()
            assert not escaped
            assert state(panel) == expected.bottom()
            if expected.steps:  # the file as read, before any edit of this document
                path, xy, _ = read[panel.model.tracks.path]
                assert state(panel) == (path, xy, "")
        finally:
            close_widget(panel)


def test_reopening_or_switching_tracks_keeps_one_step_per_edit(qapp, tmp_path):
    """Reopened, the tracks get their edits back once (not once more on top of the steps
    still there); opened instead of other tracks, they carry none of those tracks' steps;
    moving a person the tracks lack is refused with a message and no step."""
    panel, host = open_panel(tmp_path)
    try:
        panel.move_waypoint(1, 1, (9.0, 9.0))
        panel.edit_prompt("dusk")
        panel.open_file(tmp_path / "a.csv")
        assert host.history.stack.count() == 2 and panel.model.prompt == "dusk"
        assert panel.model.waypoint(1, 1) == (9.0, 9.0)
        panel.open_file(tmp_path / "b.csv")
        assert host.history.stack.count() == 0 and panel.model.prompt == ""
        assert not panel.move_waypoint(4, 0, (1.0, 1.0))
        assert "pedestrian 4" in host.errors[-1][1] and host.history.stack.count() == 0
    finally:
        close_widget(panel)
