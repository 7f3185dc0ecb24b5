"""The fMRI panel's commands (issue 37): run without a window on the state and a real undo
history, refused with the reason and no change for a bad argument and for an element that does
not exist, logged as the Python line a script would write, layer edits undone through the
history; every control of the panel runs one; ``view_state`` / ``restore_view_state``
round-trip to the same data and the same picture (issue 39).

The files, written here: a real 4-D run (9 x 10 x 7 voxels of 3 mm, 16 frames), a BrainWorld
generation of 9 frames following its frame 4 in chunks of 3 (layer "run: gen_bold.nii", with
a power-spectra QC plot), and an atlas with labels 1 and 2."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QAction, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
)

from engine.plots import plot, series
from panels.fmri.commands import COMMANDS, SCOPE, FmriState, register
from panels.fmri.view import FmriPanel
from studio.command_widgets import commands_of
from studio.commands import CommandRefused, CommandRegistry, Invocation
from tests.panels.windowless import bind_windowless

FIRST, CHUNK, FRAMES, REAL_FRAMES = 4, 3, 9, 16
AFFINE = np.array([[3.0, 0, 0, -12], [0, 3.0, 0, -15], [0, 0, 3.0, -9], [0, 0, 0, 1]])
LAYER = "run: gen_bold.nii"
MISSING = "/dev/null/studio-test"  # under a device: nothing can be there


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    rng = np.random.default_rng(3)
    real = tmp_path / "real_bold.nii"
    signal = np.sin(np.arange(REAL_FRAMES) / 2.0)
    data = 100 + rng.standard_normal((9, 10, 7, REAL_FRAMES)) + 5 * signal
    data[:4] += 3 * np.cos(np.arange(REAL_FRAMES))  # two regions that do not move alike
    nib.save(nib.Nifti1Image(data.astype(np.float32), AFFINE), real)
    folder = tmp_path / "run" / "artifacts"
    folder.mkdir(parents=True)
    generated = folder / "gen_bold.nii"
    nib.save(nib.Nifti1Image((200 + rng.standard_normal((9, 10, 7, FRAMES)))
                             .astype(np.float32), AFFINE), generated)
    (folder / "gen_bold.json").write_text(json.dumps({
        "GeneratedBy": [{"Name": "Studio brainworld.generate"}],
        "BrainWorld": {"FirstGeneratedFrame": FIRST, "ChunkFrames": CHUNK}}))
    (folder / "power_spectra.json").write_text(json.dumps(plot(
        "power spectra", [series("real", [0.1, 0.2], [1, 2]),
                          series("generated", [0.1, 0.2], [1, 3])])))
    labels = np.zeros((9, 10, 7), np.int16)
    labels[:4], labels[5:] = 1, 2
    atlas = tmp_path / "atlas.nii"
    nib.save(nib.Nifti1Image(labels, AFFINE), atlas)
    return {"real": real, "generated": generated, "atlas": atlas, "folder": tmp_path}


def layer_state(state: FmriState) -> list[tuple]:
    return [(layer.name, sorted(layer.discarded), layer.crop, len(layer.masks))
            for layer in state.layers.layers]


@pytest.fixture
def windowless(workspace_dir, history_host, files) -> tuple[CommandRegistry, FmriState, list]:
    """The fMRI commands over a state and the host's real history: no panel, no view."""
    registry, state, seen = bind_windowless(register, SCOPE, FmriState(history_host))
    registry.run("fmri.open_image", path=str(files["real"]))
    registry.run("fmri.open_generated", path=str(files["generated"]))
    return registry, state, seen


def test_layer_edits_are_undo_steps_and_python_lines(windowless, history_host) -> None:
    registry, state, seen = windowless
    stack = history_host.history.stack
    assert state.active.name == LAYER and state.qc_plot == "power_spectra"
    registry.run("fmri.discard_chunk", layer=LAYER, chunk=1)
    assert seen[-1].python() == f'studio.command("fmri.discard_chunk", layer="{LAYER}", chunk=1)'
    registry.run("fmri.crop_frames", layer=LAYER, start=1, stop=8)
    registry.run("fmri.mask_region", layer=LAYER, shape="box", radius_mm=4.0,
                 centre_mm=[0.0, 0.0, 0.0], fill="nan")
    assert layer_state(state) == [(LAYER, [1], (1, 8), 1)]
    assert [stack.text(i) for i in range(stack.count())] == [
        f"Discard chunk 1 of {LAYER}", f"Crop {LAYER} to frames 1-7",
        f"Mask {LAYER}: clear outside the box"]
    assert np.isnan(state.model.compare.frame(2)[0, 0, 0])          # masked to NaN
    for _ in range(3):
        history_host.undo()
    assert layer_state(state) == [(LAYER, [], (0, FRAMES), 0)]
    history_host.redo()
    assert layer_state(state) == [(LAYER, [1], (0, FRAMES), 0)]
    with pytest.raises(CommandRefused, match="chunk 1 of run: gen_bold.nii is discarded "
                                             "already"):
        registry.run("fmri.discard_chunk", layer=LAYER, chunk=1)
    registry.run("fmri.keep_chunk", layer=LAYER, chunk=1)
    assert layer_state(state) == [(LAYER, [], (0, FRAMES), 0)] and stack.count() == 2


def test_cursor_time_and_rois_by_what_the_viewer_shows(windowless, files) -> None:
    registry, state, seen = windowless
    registry.run("fmri.set_cursor", voxel=[2, 3, 4])
    assert list(state.model.cursor_voxel()) == [2, 3, 4]
    world = nib.affines.apply_affine(AFFINE, [6, 1, 0])
    registry.run("fmri.set_cursor", mm=list(world))
    assert list(state.model.cursor_voxel()) == [6, 1, 0]
    registry.run("fmri.set_time", frame=7)
    assert state.model.t == 7 and state.compare_frame() == 3
    registry.run("fmri.add_sphere_roi", radius_mm=4.0, centre_mm=[0.0, 0.0, 0.0])
    registry.run("fmri.add_label_rois", path=str(files["atlas"]))
    assert [roi.name for roi in state.model.rois] == ["sphere 4 mm at (0, 0, 0)", "label 1",
                                                      "label 2"]
    assert state.roi_sources == [{"sphere": {"radius_mm": 4.0, "centre_mm": [0.0, 0.0, 0.0]}},
                                 {"labels": str(files["atlas"])}]
    registry.run("fmri.style_overlay", threshold=2.5, colormap="viridis")
    registry.run("fmri.set_display_range", low=90, high=110)
    assert (state.style.threshold, state.style.colormap) == (2.5, "viridis")
    assert state.display_range == (90, 110)
    assert seen[-2].python() == ('studio.command("fmri.style_overlay", threshold=2.5, '
                                 'colormap="viridis")')


def test_commands_that_draw_need_the_panel(windowless) -> None:
    registry, _state, _seen = windowless
    for command_id, args in (("fmri.show_3d", {}), ("fmri.export_figure", {"path": "x.png"}),
                             ("fmri.export_movie", {"path": "x.mp4"})):
        with pytest.raises(CommandRefused, match="without the panel's window"):
            registry.run(command_id, **args)


def test_nothing_open_is_a_refusal(workspace_dir, history_host) -> None:
    registry = register(CommandRegistry())
    registry.bind(SCOPE, FmriState(history_host))
    for command_id, args in (("fmri.set_cursor", {"voxel": [0, 0, 0]}),
                             ("fmri.set_time", {"frame": 0}),
                             ("fmri.discard_chunk", {}),
                             ("fmri.open_generated", {"path": __file__})):
        with pytest.raises(CommandRefused, match="no image is open|no generated layer is "
                                                 "open|open the real 4-D run first"):
            registry.run(command_id, **args)


# Each fMRI command with a bad argument and with an element that does not exist (or a value
# that names nothing in these files): (bad arguments, reason), (arguments naming nothing,
# reason); None where it names no element.
CASES: dict[str, tuple[tuple[dict, str], tuple[dict, str] | None]] = {
    "fmri.open_image": (({"path": 5}, "path: Input should be a valid string"),
                        ({"path": MISSING + ".nii"}, "studio-test.nii: no such file")),
    "fmri.add_overlay": (({"path": "x.nii", "nan": True}, "unknown argument 'nan'"),
                         ({"path": MISSING + ".nii"}, "no such file or folder")),
    "fmri.open_generated": (({}, "path is required"),
                            ({"path": MISSING + ".nii"}, "no such file or folder")),
    "fmri.select_layer": (({"layer": 3}, "layer: Input should be a valid string"),
                          ({"layer": "nope"}, f"no generated layer named 'nope' (layers: "
                                              f"{LAYER})")),
    "fmri.set_cursor": (({"voxel": [1, 2, 3], "mm": [0, 0, 0]}, "give the voxel or the point"),
                        ({"voxel": [99, 0, 0]}, "voxel (99, 0, 0) is outside real_bold.nii "
                                                "(its voxels: 0-8, 0-9, 0-6)")),
    "fmri.set_time": (({"frame": -1}, "frame: Input should be greater than or equal to 0"),
                      ({"frame": 99}, "frame 99 is past the end: real_bold.nii has frames "
                                      "0-15")),
    "fmri.play": (({"fps": 0}, "fps: Input should be greater than or equal to 1"), None),
    "fmri.set_radiological": (({"on": "maybe"}, "on: Input should be a valid boolean"), None),
    "fmri.set_lightbox": (({"on": "perhaps"}, "on: Input should be a valid boolean"), None),
    "fmri.show_3d": (({"on": "sideways"}, "on: Input should be a valid boolean"), None),
    "fmri.style_overlay": (({"colormap": "rainbow"}, "colormap: Input should be 'inferno'"),
                           ({}, "nothing to change")),
    "fmri.set_display_range": (({"low": 5, "high": 1}, "high must be a finite number above low"),
                               None),
    "fmri.show_qc_plot": (({"name": None}, "name: Input should be a valid string"),
                          ({"name": "tsnr"}, f"{LAYER} has no quality-check plot 'tsnr' (its "
                                             "plots: power_spectra)")),
    "fmri.add_sphere_roi": (({"radius_mm": 0}, "radius_mm: Input should be greater than 0"),
                            ({"centre_mm": [900, 900, 900]}, "the sphere's centre is outside "
                                                             "the functional image")),
    "fmri.add_label_rois": (({"path": []}, "path: Input should be a valid string"),
                            ({"path": MISSING + ".nii"}, "no such file or folder")),
    "fmri.discard_chunk": (({"chunk": -1}, "chunk: Input should be greater than or equal to 0"),
                           ({"layer": LAYER, "chunk": 7}, f"{LAYER} has no chunk 7 (chunks "
                                                          "0-2)")),
    "fmri.keep_chunk": (({"chunk": "one"}, "chunk: Input should be a valid integer"),
                        ({"layer": "nope", "chunk": 0}, "no generated layer named 'nope'")),
    "fmri.crop_frames": (({"start": 0}, "stop is required"),
                         ({"start": 2, "stop": 50}, f"frames 2 to 50 are outside the 9 "
                                                    f"generated frames of {LAYER}")),
    "fmri.mask_region": (({"shape": "star"}, "shape: Input should be 'sphere', 'box' or "
                                             "'labels'"),
                         ({"shape": "labels", "path": MISSING + ".nii"}, "no such file")),
    "fmri.save_layer": (({"path": 1}, "path: Input should be a valid string"),
                        ({"path": "kept.nii", "layer": "nope"}, "no generated layer named")),
    "fmri.regenerate_layer": (({"t1": 5}, "t1: Input should be a valid string"),
                              ({"t1": MISSING + ".nii"}, "no such file or folder")),
    "fmri.export_figure": (({"path": "x.png", "dpi": 5}, "dpi: Input should be greater"),
                           ({"path": MISSING + "/x.png"}, "/dev/null/studio-test")),
    "fmri.export_movie": (({"path": "x.mp4", "fps": 100}, "fps: Input should be less than"),
                          ({"path": "x.avi"}, "x.avi: a movie is written as .mp4")),
}


def test_every_fmri_command_has_refusal_cases() -> None:
    assert set(CASES) == {command.id for command in COMMANDS}


@pytest.fixture
def shown(workspace_dir, history_host, make_widget, qtbot, files) -> FmriPanel:
    """A panel with the real run, its generated layer and two atlas ROIs, drawn."""
    panel = make_widget(FmriPanel, history_host)
    panel.resize(1100, 900)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.open_file(files["real"]) and panel.open_generated(files["generated"])
    assert panel.load_label_image(files["atlas"])
    qtbot.waitUntil(lambda: panel.fc_matrix is not None, timeout=10_000)
    return panel


def snapshot(panel: FmriPanel) -> tuple:
    state, model = panel.state, panel.model
    return (model.base.path, model.overlay, model.cursor, model.t, state.radiological,
            state.lightbox, state.style, state.display_range, state.qc_plot, state.playing,
            [roi.name for roi in model.rois], layer_state(state), state.active.name,
            panel.stack.currentIndex())


@pytest.mark.parametrize("command_id", sorted(CASES))
def test_refusals_change_nothing(shown, history_host, command_id) -> None:
    before, steps = snapshot(shown), history_host.history.stack.count()
    bad, missing = CASES[command_id]
    for args, reason in [bad] + ([missing] if missing else []):
        with pytest.raises(CommandRefused) as caught:
            shown.commands.run(command_id, **args)
        assert str(caught.value).startswith(f"{command_id}: ") and reason in str(caught.value)
        assert snapshot(shown) == before, args
        assert history_host.history.stack.count() == steps
    # from a button or key: said in the information line and an error box, never raised
    shown.commands.trigger(command_id, **bad[0])
    assert history_host.errors[-1][1].startswith(command_id)
    assert "refused" in shown.info.text()


CONTROLS = (QAbstractButton, QComboBox, QAbstractSpinBox, QAbstractSlider)


def test_every_control_runs_or_feeds_a_registered_command(shown) -> None:
    """Buttons, check boxes, lists, number boxes, sliders and actions alike (the shell's walk
    in tests/studio/test_commands_map.py checks buttons and actions)."""
    controls = [widget for kind in CONTROLS for widget in shown.findChildren(kind)
                if not isinstance(widget, QScrollBar)   # the plots' and lists' own
                and not isinstance(widget.parentWidget(), QAbstractSpinBox)]
    controls += [a for a in shown.findChildren(QAction) if a.text()]
    assert len(controls) >= 25
    unmapped = [type(c).__name__ + " " + (c.text() if hasattr(c, "text") else "")
                for c in controls if not commands_of(c)
                or any(command_id not in shown.commands for command_id in commands_of(c))]
    assert unmapped == []
    controls.append(shown.colorbar)    # its handles set the display range
    used = {command_id for control in controls for command_id in commands_of(control)}
    assert used >= {c.id for c in COMMANDS} - {"fmri.open_generated", "fmri.set_cursor",
                                               "fmri.export_movie"}  # drops, clicks, .mp4


def test_buttons_sliders_and_clicks_run_logged_commands(shown, history_host, qtbot) -> None:
    seen: list[Invocation] = []
    shown.commands.listen(seen.append)
    shown.time_slider.setValue(FIRST + 1)          # a key or a click on the groove
    QTest.mouseClick(shown.chunk_button, Qt.MouseButton.LeftButton)
    shown.crop_start.setValue(1)
    shown.crop_stop.setValue(8)
    crop = next(b for b in shown.findChildren(QAbstractButton) if b.text() == "Crop")
    QTest.mouseClick(crop, Qt.MouseButton.LeftButton)
    assert [i.python() for i in seen] == [
        'studio.command("fmri.set_time", frame=5)',
        f'studio.command("fmri.discard_chunk", layer="{LAYER}", chunk=0)',
        f'studio.command("fmri.crop_frames", layer="{LAYER}", start=1, stop=8)']
    assert all(i.source == "user" for i in seen)
    assert shown.chunk_button.text() == "Keep chunk"
    # a click on the axial plane: the voxel under it, as the info line names it
    box = shown.planes[2].box
    grid = shown.model.grid
    point = shown.ortho.mapFromScene(box.mapViewToScene(QPointF(2.5 * grid.voxel_mm[0],
                                                                7.5 * grid.voxel_mm[1])))
    QTest.mouseClick(shown.ortho.viewport(), Qt.MouseButton.LeftButton, pos=point)
    qtbot.waitUntil(lambda: shown.model.cursor[:2] == (2, 7), timeout=5000)
    voxel = [int(v) for v in grid.to_file(np.asarray(shown.model.cursor))]
    assert seen[-1].python() == f'studio.command("fmri.set_cursor", voxel={voxel})'
    assert history_host.history.stack.count() == 2
    history_host.undo()
    history_host.undo()
    assert layer_state(shown.state) == [(LAYER, [], (0, FRAMES), 0)]
    assert shown.chunk_button.text() == "Discard chunk" and shown.crop_stop.value() == FRAMES


def _settled(panel: FmriPanel, qtbot) -> None:
    """Wait until the slices, the time course and the ROI analysis match the state."""
    def done() -> bool:
        result = panel.last_result
        return (result is not None and result["state"].cursor == panel.model.cursor
                and result["state"].t == panel.model.t and panel.time_course is not None
                and (not panel.model.rois or panel.fc_matrix is not None)
                and not panel._render_timer.isActive() and panel.slicer.idle())
    try:
        qtbot.waitUntil(done, timeout=15_000)
    except Exception:
        result = panel.last_result
        print("DEBUG", result and result["state"], panel.model.cursor, panel.model.t,
              panel.time_course is None, panel.fc_matrix is None, panel._render_timer.isActive(),
              panel.slicer.idle(), panel.info.text())
        raise
    for _ in range(5):
        QApplication.processEvents()


def _pixels(panel: FmriPanel) -> np.ndarray:
    image = panel.figure.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
    data = np.frombuffer(image.constBits(), np.uint8, image.bytesPerLine() * image.height())
    return data.reshape(image.height(), image.bytesPerLine())[:, :image.width() * 3] \
        .reshape(image.height(), image.width(), 3).astype(np.int16)


def test_view_state_round_trips_as_data_and_picture(shown, history_host, make_widget, qtbot,
                                                    files) -> None:
    shown.add_sphere_roi(5.0)
    shown.set_cursor((3, 6, 2))
    shown.set_time(FIRST + 4)
    assert shown.toggle_chunk()                    # an edit: replayed from the journal
    shown.set_radiological(True)
    shown.set_overlay_style(colormap="viridis", opacity=0.4)
    shown.commands.run("fmri.set_display_range", low=95.0, high=108.0)
    shown.planes[2].box.setRange(QRectF(3, 4, 12, 14), padding=0)
    shown.radius_box.setValue(4.5)
    shown.mask_clear_box.setCurrentIndex(1)
    _settled(shown, qtbot)
    saved = json.loads(json.dumps(shown.view_state()))   # what a session file holds
    assert saved["opened"] == str(files["real"]) and saved["generated"] == [
        str(files["generated"])]
    assert saved["layer"] == LAYER and saved["qc_plot"] == "power_spectra"
    assert saved["roi_names"][-1].startswith("sphere 5 mm at")
    before = _pixels(shown)

    other = make_widget(FmriPanel, history_host)
    other.resize(shown.size())
    other.show()
    qtbot.waitExposed(other)
    assert other.restore_view_state(saved) == []
    _settled(other, qtbot)
    again = json.loads(json.dumps(other.view_state()))
    for key in set(saved) - {"zoom_mm"}:
        assert again[key] == saved[key], key
    for plane, ranges in saved["zoom_mm"].items():
        assert np.allclose(again["zoom_mm"][plane], ranges, atol=1e-3), plane
    assert other.state.active.discarded == {1}
    after = _pixels(other)
    assert before.shape == after.shape
    # the slices exactly; the plots' auto-range padding may move a curve by a pixel's part
    # (measured: 0.7% of the figure's pixels, all in the time course)
    corner = shown.ortho.mapTo(shown.figure, QPoint(0, 0))
    rows = slice(corner.y(), corner.y() + shown.ortho.height())
    cols = slice(corner.x(), corner.x() + shown.ortho.width())
    changed = np.abs(before - after).max(axis=2) > 8
    assert changed[rows, cols].mean() < 0.001, f"{changed[rows, cols].mean():.2%} of the slices"
    assert changed.mean() < 0.01, f"{changed.mean():.2%} of the pixels changed"

    broken = {**saved, "layer": "nope", "qc_plot": "tsnr", "cursor_voxel": [99, 0, 0],
              "generated": [*saved["generated"], str(files["folder"] / "gone.nii")]}
    problems = make_widget(FmriPanel, history_host).restore_view_state(broken)
    assert len(problems) == 4
    for said in ("fmri.open_generated: " + str(files["folder"] / "gone.nii") + ": no such",
                 "fmri.select_layer: no generated layer named 'nope'",
                 f"fmri.show_qc_plot: {LAYER} has no quality-check plot 'tsnr'",
                 "fmri.set_cursor: voxel (99, 0, 0) is outside real_bold.nii"):
        assert any(problem.startswith(said) for problem in problems), said
    gone = make_widget(FmriPanel, history_host).restore_view_state(
        {**saved, "opened": str(files["folder"] / "moved.nii")})
    assert len(gone) == 1 and "moved.nii: no such file or folder" in gone[0]


def _mouse(widget, kind, pos: QPointF, buttons) -> None:
    """A mouse event with the buttons held (QTest's moves carry none, so no drag)."""
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QMouseEvent

    global_pos = QPointF(widget.mapToGlobal(pos.toPoint()))
    event = QMouseEvent(kind, pos, global_pos, Qt.MouseButton.LeftButton, buttons,
                        Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, event)
    if kind != QEvent.Type.MouseButtonRelease:
        QApplication.processEvents()


def test_a_drag_moves_the_crosshair_and_logs_one_command_at_its_end(shown, qtbot) -> None:
    from PySide6.QtCore import QEvent

    seen: list[Invocation] = []
    shown.commands.listen(seen.append)
    grid, box, viewport = shown.model.grid, shown.planes[2].box, shown.ortho.viewport()

    def at(h: float, v: float) -> QPointF:
        return QPointF(shown.ortho.mapFromScene(box.mapViewToScene(
            QPointF((h + 0.5) * grid.voxel_mm[0], (v + 0.5) * grid.voxel_mm[1]))))

    held = Qt.MouseButton.LeftButton
    _mouse(viewport, QEvent.Type.MouseButtonPress, at(1, 1), held)
    for step in range(1, 6):
        qtbot.wait(40)   # pyqtgraph drops moves that come closer than its refresh interval
        _mouse(viewport, QEvent.Type.MouseMove, at(1 + step, 1 + step), held)
    assert shown.model.cursor[:2] == (6, 6) and seen == []   # followed, not logged yet
    _mouse(viewport, QEvent.Type.MouseButtonRelease, at(6, 6), Qt.MouseButton.NoButton)
    qtbot.waitUntil(lambda: len(seen) == 1, timeout=5000)
    voxel = [int(v) for v in grid.to_file(np.asarray(shown.model.cursor))]
    assert seen[0].python() == f'studio.command("fmri.set_cursor", voxel={voxel})'


def test_an_export_caption_describes_the_cursor_not_the_last_command(shown, qtbot,
                                                                     tmp_path) -> None:
    """The information label also reports what a command did ("Added the ROI…"); a figure's
    caption is what it shows at the cursor."""
    from engine import provenance

    shown.commands.run("fmri.add_sphere_roi", radius_mm=4.0, centre_mm=[0.0, 0.0, 0.0])
    qtbot.waitUntil(lambda: shown.info_line().startswith("voxel ("), timeout=10_000)
    assert "ROI" not in shown.info_line()
    written = shown.commands.run("fmri.export_figure", path=str(tmp_path / "f.png"),
                                 caption=True)
    assert "f.png" in str(written) and provenance.read(tmp_path / "f.png") is not None
