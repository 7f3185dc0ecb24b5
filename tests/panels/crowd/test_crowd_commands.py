"""The crowd previewer's commands (issue 37): run without a window on the models and a real
undo history, refused with the reason and no change for a bad argument and for an element that
does not exist, logged as the Python line a script would write, undone through the history;
the panel's buttons and drags run them; ``view_state`` / ``restore_view_state`` round-trip as
data and as a picture (issue 39).

The files: two 6-frame clips (coarse, generated) as .npy frames, tracks in metres of people 1
and 2 over frames 0-5, and a scene with one building (at 4, 5), one group of 5 people and the
default camera keyframe at frame 1."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication

from engine.io.crowd import read_scene
from panels.crowd.commands import COMMANDS, SCOPE, CrowdState, register
from panels.crowd.model import CrowdModel
from panels.crowd.view import CrowdPanel, to_rgb
from studio.commands import CommandRefused, CommandRegistry, Invocation
from tests.panels.windowless import bind_windowless

MISSING = "/dev/null/studio-test"  # under a device: no folder can be made there
SCENE = {
    "ground": {"size": [30, 24]},
    "buildings": [{"center": [4, 5], "size": [2, 2]}],
    "groups": [{"count": 5, "spawn_center": [-11, 0], "spawn_size": [2, 2], "goal": [11, 0]}],
    "camera": [{"t_s": 0, "position": [0, -18, 8], "look_at": [0, 0, 0], "fov_deg": 45}],
    "duration_s": 6,
    "fps": 2,
}


def square_clip(frames: int, size: int, color, offset: int = 0) -> np.ndarray:
    clip = np.zeros((frames, size, size, 3), np.uint8)
    for t in range(frames):
        clip[t, 4:12, 3 * t + offset:3 * t + offset + 8] = color
    return clip


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    found = {"coarse": tmp_path / "coarse.npy", "generated": tmp_path / "generated.npy",
             "tracks": tmp_path / "walk.csv", "scene": tmp_path / "plaza.json"}
    np.save(found["coarse"], square_clip(6, 32, (255, 0, 0)))
    np.save(found["generated"], square_clip(6, 32, (0, 220, 0), offset=2))
    rows = [f"{t},1,{0.5 * t},0\n" for t in range(6)] + [f"{t},2,3,{4 - 0.5 * t}\n"
                                                        for t in range(6)]
    found["tracks"].write_text("frame,id,x,y\n" + "".join(rows))
    found["scene"].write_text(json.dumps(SCENE))
    return found


@pytest.fixture
def windowless(history_host, files) -> tuple[CommandRegistry, CrowdState, list]:
    """The crowd commands over the models and the host's real history: no panel, no view."""
    registry, state, seen = bind_windowless(register, SCOPE, CrowdState(CrowdModel(), history_host))
    registry.run("crowd.open", path=str(files["tracks"]))
    registry.run("crowd.open", path=str(files["scene"]))
    return registry, state, seen


@pytest.fixture
def shown(make_widget, history_host, files, qtbot) -> CrowdPanel:
    """The panel with both clips, the tracks and the scene open, laid out at a fixed size."""
    from engine.methods import c2r

    history_host._params.update({spec.id: spec.params for spec in c2r.SPECS})
    panel = make_widget(CrowdPanel, history_host)
    for name in ("coarse", "generated", "tracks", "scene"):
        assert panel.open_file(files[name]), history_host.errors
    panel.resize(1300, 820)
    panel.show()
    qtbot.waitExposed(panel)
    qtbot.waitUntil(lambda: panel.metrics is not None, timeout=5000)
    return panel


def test_a_person_moved_is_one_undo_step_and_one_python_line(windowless, history_host,
                                                             files) -> None:
    registry, state, seen = windowless
    before = state.model.tracks.xy.copy()
    registry.run("crowd.move_person", person=2, frame=3, to=[5.0, 1.0])
    assert seen[-1].python() == ('studio.command("crowd.move_person", person=2, frame=3, '
                                 'to=[5.0, 1.0])')
    assert state.model.waypoint(2, 3) == (5.0, 1.0)
    registry.run("crowd.set_prompt", text="dusk")
    assert history_host.history.stack.count() == 2
    history_host.undo()
    history_host.undo()
    assert np.array_equal(state.model.tracks.xy, before) and state.model.prompt == ""
    history_host.redo()
    assert state.model.waypoint(2, 3) == (5.0, 1.0)
    # the same command means the same on a copy of the file with the same people
    copy = files["tracks"].with_name("copy.csv")
    copy.write_text(files["tracks"].read_text())
    registry.run("crowd.open", path=str(copy))
    registry.run("crowd.move_person", person=2, frame=3, to=[5.0, 1.0])
    assert state.model.waypoint(2, 3) == (5.0, 1.0)
    # exported without a window: written at once, its provenance beside it
    out = files["tracks"].with_name("out.csv")
    registry.run("crowd.export_tracks", path=str(out))
    assert out.is_file() and out.with_name("out.csv.provenance.json").is_file()


def test_scene_edits_name_elements_by_their_labels_and_undo(windowless, history_host,
                                                            files) -> None:
    registry, state, seen = windowless
    registry.run("crowd.add_box", kind="obstacle", at_m=[-4, 6])
    registry.run("crowd.move_box", item="building 1", to_m=[6, 6])
    registry.run("crowd.spawn_group", count=3, at_m=[-5, -6], goal_m=[8, -6], speed_mps=1.2)
    registry.run("crowd.set_group_count", group="group 2", count=4)
    registry.run("crowd.draw_path", group="group 1", points_m=[[0, 3], [11, 3]])
    registry.run("crowd.add_camera_keyframe", frame=11, position_m=[10, -10, 12],
                 look_at_m=[0, 4, 0])
    registry.run("crowd.delete_scene_item", item="obstacle 1")
    scene = read_scene(files["scene"])
    assert scene.buildings[0].center == (6, 6) and scene.obstacles == []
    assert [g.count for g in scene.groups] == [5, 4] and scene.groups[0].waypoints == [(0, 3)]
    assert [k.t_s for k in scene.camera] == [0, 5]
    assert seen[-1].python() == ('studio.command("crowd.delete_scene_item", '
                                 'item="obstacle 1")')
    registry.run("crowd.select_scene_item", item="camera keyframe at frame 11")
    assert state.scene.selection == ("camera", 1)
    assert history_host.history.stack.count() == 7
    while history_host.history.stack.canUndo():
        history_host.undo()
    assert read_scene(files["scene"]).model_dump() == read_scene_data(SCENE)
    registry.run("crowd.simulate_scene")  # without a window: at once, the tracks' clock
    assert len(state.model.tracks.ids) == 5
    registry.run("crowd.delete_scene_item", item="group 1")
    with pytest.raises(CommandRefused, match="plaza.json has no group to walk"):
        registry.run("crowd.simulate_scene")  # empty tracks would leave the clock nothing


def read_scene_data(data: dict) -> dict:
    from engine.io.crowd import Scene

    return Scene.model_validate(data).model_dump()


def test_commands_that_draw_need_the_panel(windowless) -> None:
    registry, state, _seen = windowless
    for command_id, args in (("crowd.play", {}), ("crowd.set_mode", {"mode": "wipe"}),
                             ("crowd.export_figure", {"path": "x.png"}),
                             ("crowd.export_video", {"path": "x.mp4"}),
                             ("crowd.show_tab", {"tab": "track map"})):
        with pytest.raises(CommandRefused, match="without the panel's window"):
            registry.run(command_id, **args)
    state.model.tracks = None  # as before any tracks file is opened
    with pytest.raises(CommandRefused, match="no trajectories are open"):
        registry.run("crowd.export_tracks", path="x.csv")


# Each crowd command with a bad argument and with an element that does not exist (None: it
# names no element): (bad arguments, reason), (arguments naming nothing, reason).
CASES: dict[str, tuple[tuple[dict, str], tuple[dict, str] | None]] = {
    "crowd.open": (({"path": 5}, "path: Input should be a valid string"),
                   ({"path": MISSING + ".mp4"}, "studio-test.mp4")),
    "crowd.set_frame": (({"frame": 0}, "frame: Input should be greater than or equal to 1"),
                        ({"frame": 99}, "frame 99 is outside 1..6")),
    "crowd.step": (({"frames": "far"}, "frames: Input should be a valid integer"), None),
    "crowd.play": (({"on": "maybe"}, "on: Input should be a valid boolean"), None),
    "crowd.set_mode": (({"mode": "mosaic"}, "mode: Input should be 'side by side' or 'wipe'"),
                       None),
    "crowd.set_wipe_clips": (({"left": 1, "right": "coarse"}, "left: Input should be a valid "
                                                              "string"),
                             ({"left": "real", "right": "coarse"}, "no clip named 'real'")),
    "crowd.set_wipe_position": (({"position": 2}, "position: Input should be less than or "
                                                  "equal to 1"), None),
    "crowd.set_overlays": (({"on": "perhaps"}, "on: Input should be a valid boolean"), None),
    "crowd.show_tab": (({"tab": "lineage"}, "tab: Input should be"), None),
    "crowd.show_social_force_parameters": (({"on": []}, "on: Input should be"), None),
    "crowd.export_figure": (({"path": "x.png", "dpi": 5}, "dpi: Input should be greater"),
                            ({"path": MISSING + "/x.png"}, "/dev/null/studio-test")),
    "crowd.export_video": (({"path": "x.mp4", "first_frame": 0}, "first_frame: Input should"),
                           ({"path": "v.mp4", "first_frame": 5, "last_frame": 99},
                            "frames 5 to 99 are not a range of 1..6")),
    "crowd.export_frames": (({"folder": None}, "folder: Input should be a valid string"),
                            ({"folder": "f", "last_frame": 9}, "not a range of 1..6")),
    "crowd.export_tracks": (({"path": 1}, "path: Input should be a valid string"), None),
    "crowd.set_prompt": (({"text": None}, "text: Input should be a valid string"),
                         ({"text": ""}, "the prompt is '' already")),
    "crowd.move_person": (({"person": "Ann", "frame": 0, "to": [0, 0]},
                           "person: Input should be a valid integer"),
                          ({"person": 9, "frame": 0, "to": [0, 0]},
                           "pedestrian 9 has no sample at frame 0 in walk.csv")),
    "crowd.regenerate": (({"first_frame": 0}, "first_frame: Input should be greater"),
                         ({}, "train a renderer first (c2r.train)")),
    "crowd.simulate_demo": (({"scene": "x"}, "takes no arguments, got scene"), None),
    "crowd.open_scene": (({}, "path is required"),
                         ({"path": MISSING + ".json"}, "studio-test.json: no such scene file")),
    "crowd.new_scene": (({"path": "x"}, "takes no arguments, got path"), None),
    "crowd.save_scene_as": (({"path": 3}, "path: Input should be a valid string"),
                            ({"path": MISSING + "/s.json"}, "/dev/null/studio-test")),
    "crowd.add_box": (({"kind": "tree", "at_m": [0, 0]}, "kind: Input should be 'building' "
                                                         "or 'obstacle'"),
                      ({"kind": "building", "at_m": [-11, 0]}, "inside a building")),
    "crowd.move_box": (({"item": "building 1", "to_m": "here"}, "to_m"),
                       ({"item": "building 7", "to_m": [0, 0]},
                        "building 7 does not exist (1 buildings in plaza.json)")),
    "crowd.resize_box": (({"item": "building 1"}, "size_m is required"),
                         ({"item": "obstacle 3", "size_m": [1, 1]},
                          "obstacle 3 does not exist (0 obstacles in plaza.json)")),
    "crowd.spawn_group": (({"count": 0, "at_m": [0, 0], "goal_m": [1, 1]},
                           "count: Input should be greater than or equal to 1"), None),
    "crowd.set_group_count": (({"group": "group 1", "count": -1}, "count: Input should be"),
                              ({"group": "group 9", "count": 3}, "group 9 does not exist")),
    "crowd.set_group_speed": (({"group": "group 1", "speed_mps": -1}, "speed_mps: Input"),
                              ({"group": "building 1"}, "'building 1' names no element: give "
                                                        "'group N'")),
    "crowd.draw_path": (({"group": "group 1", "points_m": []}, "points_m: List should have at "
                                                               "least 1 item"),
                        ({"group": "group 4", "points_m": [[0, 0]]}, "group 4 does not exist")),
    "crowd.add_camera_keyframe": (({"frame": 1, "position_m": [0, 0], "look_at_m": [0, 0, 0]},
                                   "position_m"), None),
    "crowd.delete_scene_item": (({"item": 5}, "item: Input should be a valid string"),
                                ({"item": "camera keyframe at frame 99"},
                                 "camera keyframe at frame 99 does not exist (keyframes at "
                                 "frames 1 in plaza.json)")),
    "crowd.select_scene_item": (({"item": 5}, "item: Input should be a valid string"),
                                ({"item": "tree 1"}, "'tree 1' names no element")),
    "crowd.reset_social_force": (({"x": 1}, "takes no arguments, got x"),
                                 ({}, "default parameters already")),
    "crowd.fit_social_force": (({}, "recording is required"),
                               ({"recording": MISSING + ".txt"}, "no such recording")),
    "crowd.set_social_force_parameter": (({"name": "mass", "value": 1}, "name: Input should "
                                                                        "be"),
                                         ({"name": "radius_m", "value": -1}, "radius_m")),
    "crowd.simulate_scene": (({"x": 1}, "takes no arguments, got x"), None),
    "crowd.render_scene": (({"x": 1}, "takes no arguments, got x"), None),
}


def test_every_crowd_command_has_refusal_cases() -> None:
    assert set(CASES) == {command.id for command in COMMANDS}


def looks(panel: CrowdPanel, host) -> tuple:
    """Everything a crowd command may change, to compare before and after a refusal."""
    model, editor = panel.model, panel.scene_editor
    return (list(model.clips), model.frame, model.prompt, model.tracks.xy.tolist(),
            editor.model.data, editor.selection, panel.mode_box.currentText(),
            panel.wipe_left.currentText(), panel.wipe_right.currentText(), panel.wipe_position,
            panel.overlays_box.isChecked(), panel.side_tabs.currentIndex(),
            panel.timer.isActive(), editor.params_toggle.isChecked(), len(host.submitted),
            host.history.stack.count(),
            sorted(p.name for p in Path(host.run_root).parent.iterdir()))


@pytest.mark.parametrize("command_id", sorted(CASES))
def test_refusals_change_nothing(shown, history_host, command_id, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)  # relative export paths land in the test's folder
    registry = shown.commands
    before = looks(shown, history_host)
    bad, missing = CASES[command_id]
    for args, reason in [bad] + ([missing] if missing else []):
        with pytest.raises(CommandRefused) as caught:
            registry.run(command_id, **args)
        assert str(caught.value).startswith(f"{command_id}: ") and reason in str(caught.value)
        assert looks(shown, history_host) == before, args
    # from a button or key: said in the status line and an error box, never raised
    shown.commands.trigger(command_id, **bad[0])
    assert history_host.errors[-1][1].startswith(command_id)
    assert "refused" in shown.status.text()


def test_buttons_and_drags_run_commands_that_are_logged(shown, history_host, qtbot) -> None:
    seen: list[Invocation] = []
    shown.commands.listen(seen.append)
    shown.forward_button.click()
    shown.slider.setValue(3)
    shown.mode_box.setCurrentText("Wipe")
    shown.overlays_box.setChecked(False)
    assert [i.python() for i in seen] == [
        'studio.command("crowd.step")', 'studio.command("crowd.set_frame", frame=4)',
        'studio.command("crowd.set_mode", mode="wipe")',
        'studio.command("crowd.set_overlays", on=False)']
    assert all(i.source == "user" for i in seen) and shown.wipe_pair() is not None
    marker = next(m for m in shown.model.markers() if m.id == 2)
    shown._press_map(marker.x, marker.y)
    shown._drag_map(marker.x + 30, marker.y)
    shown._release_map(marker.x + 30, marker.y)
    moved = shown.model.waypoint(2, 3)
    assert seen[-1].command.id == "crowd.move_person" and seen[-1].args["person"] == 2
    assert seen[-1].args["frame"] == 3 and moved[0] > 3.0
    editor = shown.scene_editor
    editor.tool_box.setCurrentText("Select")
    editor.click(-11, 0.5)
    editor.delete_button.click()
    assert [i.python() for i in seen[-2:]] == [
        'studio.command("crowd.select_scene_item", item="group 1")',
        'studio.command("crowd.delete_scene_item", item="group 1")']
    assert editor.model.scene.groups == [] and history_host.history.stack.count() == 2
    history_host.undo()
    history_host.undo()
    assert len(editor.model.scene.groups) == 1 and shown.model.waypoint(2, 3) == (3.0, 2.5)


def _settled(panel: CrowdPanel, qtbot) -> None:
    """Metrics computed, exports written; the status lines (what the last command said,
    which differs between a panel used and one restored) emptied and laid out."""
    qtbot.waitUntil(lambda: panel.metrics is not None and not panel._tasks, timeout=5000)
    panel.status.setText("")
    panel.scene_editor.status.setText("")
    for _ in range(5):
        QApplication.processEvents()


def _pixels(panel: CrowdPanel) -> np.ndarray:
    return to_rgb(panel.grab().toImage()).astype(np.int16)


def test_view_state_round_trips_as_data_and_picture(shown, history_host, make_widget, qtbot,
                                                    files, tmp_path) -> None:
    shown.commands.run("crowd.set_frame", frame=4)
    shown.commands.run("crowd.set_mode", mode="wipe")
    shown.commands.run("crowd.set_wipe_clips", left="generated", right="coarse")
    shown.commands.run("crowd.set_wipe_position", position=0.3)
    shown.commands.run("crowd.set_overlays", on=False)
    shown.commands.run("crowd.move_person", person=1, frame=3, to=[2.0, 1.0])  # replayed
    shown.commands.run("crowd.select_scene_item", item="building 1")
    shown.commands.run("crowd.show_social_force_parameters", on=True)
    shown.range_start.setValue(2)
    shown.range_end.setValue(5)
    shown.scene_editor.tool_box.setCurrentText("Select")
    shown.scene_editor.plot.getPlotItem().vb.setRange(xRange=[-8, 9], yRange=[-6, 7],
                                                      padding=0)
    (tmp_path / "ckpt").mkdir()
    shown.checkpoint = str(tmp_path / "ckpt")
    shown.commands.run("crowd.show_tab", tab="scene editor")
    _settled(shown, qtbot)
    saved = json.loads(json.dumps(shown.view_state()))   # what a session file holds
    assert saved["clips"] == [{"name": "coarse", "path": str(files["coarse"].resolve())},
                              {"name": "generated", "path": str(files["generated"].resolve())}]
    assert saved["tracks"] == str(files["tracks"].resolve()) and saved["frame"] == 4
    assert saved["scene_selection"] == "building 1" and saved["tab"] == "scene editor"
    before = _pixels(shown)

    other = make_widget(CrowdPanel, history_host)
    other.resize(shown.size())
    other.show()
    qtbot.waitExposed(other)
    assert other.restore_view_state(saved) == []
    _settled(other, qtbot)
    again = json.loads(json.dumps(other.view_state()))
    for key in set(saved) - {"scene_zoom_m"}:
        assert again[key] == saved[key], key
    for axis in ("x", "y"):
        assert again["scene_zoom_m"][axis] == pytest.approx(saved["scene_zoom_m"][axis],
                                                            abs=1e-6)
    assert other.model.waypoint(1, 3) == (2.0, 1.0)  # the tracks' edit, from the journal
    after = _pixels(other)
    assert before.shape == after.shape
    differ = np.abs(before - after).max(axis=2) > 24
    # measured 0.37%: the scene map's locked aspect places the ground a few pixels over
    assert differ.mean() < 0.01, differ.mean()

    broken = {**saved, "wipe": ["generated", "real"], "scene_selection": "group 7",
              "clips": [{"name": "gone", "path": str(tmp_path / "gone.npy")}]}
    problems = other.restore_view_state(broken)
    assert any("no clip named 'real'" in p for p in problems)
    assert any("group 7 does not exist" in p for p in problems)
    assert any("gone.npy" in p for p in problems)


def test_an_export_announces_its_file_only_with_its_provenance(shown, qtbot, tmp_path) -> None:
    """The sidecar is written before the file appears (a reader waiting for the file finds
    both: the flaky wait of the previewer test)."""
    from engine import provenance

    for attempt in range(5):
        target = tmp_path / f"t{attempt}" / "tracks.csv"
        shown.export_tracks_csv(target)
        qtbot.waitUntil(target.exists, timeout=5000)
        assert provenance.read(target)["view"]["panel"] == "crowd"


def test_tracks_alone_export_as_their_map_not_beside_an_empty_clip(history_host, make_widget,
                                                                    files) -> None:
    """With only a tracks file open (no clip), a frame export is the track map: it was a
    black clip-sized half beside the map."""
    from panels.crowd.view import MAP_SIZE_PX, CrowdPanel

    panel = make_widget(CrowdPanel, history_host)
    assert panel.open_file(files["tracks"]) is not False and not panel.model.clips
    image = panel.export_image()
    assert (image.width(), image.height()) == (MAP_SIZE_PX, MAP_SIZE_PX)
