"""The fMRI viewer panel offscreen: opening real files, the linked crosshair, the
radiological toggle, scrubbing off the main thread, overlay, lightbox, ROIs, export."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from panels.fmri import MANIFEST
from panels.fmri.view import FmriPanel

NIBABEL_DATA = Path(nib.__file__).parent / "tests" / "data"
NITIME_FMRI = Path(__import__("nitime").__file__).parent / "data" / "fmri1.nii.gz"


def _drawn(panel: FmriPanel, qtbot, **state) -> dict:
    """Wait until the last drawn result has this cursor/t (and a time course if asked)."""
    def done() -> bool:
        result = panel.last_result
        return result is not None and all(getattr(result["state"], k) == v
                                          for k, v in state.items())
    qtbot.waitUntil(done, timeout=10_000)
    return panel.last_result


def test_manifest() -> None:
    assert MANIFEST.id == "fmri" and "nifti" in MANIFEST.formats
    assert MANIFEST.papers == ("brainworld",)


def test_opens_real_4d_file_with_values_and_world_coordinates(panel, qtbot) -> None:
    assert panel.open_file(NITIME_FMRI)
    image = nib.load(NITIME_FMRI)
    data = np.asarray(image.dataobj, dtype=np.float32)
    panel.set_cursor((2, 7, 4))
    panel.set_time(17)
    result = _drawn(panel, qtbot, cursor=(2, 7, 4), t=17)
    ijk = panel.model.cursor_voxel()
    assert result["value"] == data[tuple(ijk) + (17,)]
    np.testing.assert_allclose(panel.model.cursor_world(),
                               nib.affines.apply_affine(image.affine, ijk), atol=1e-6)
    x, y, z = nib.affines.apply_affine(image.affine, ijk)
    text = panel.info.text()
    assert f"voxel ({ijk[0]}, {ijk[1]}, {ijk[2]})" in text and f"{x:.1f}, {y:.1f}" in text
    assert "t = 17 (22.95 s)" in text
    qtbot.waitUntil(lambda: panel.time_course is not None, timeout=10_000)
    np.testing.assert_array_equal(panel.time_course, data[tuple(ijk)])


def _click(panel: FmriPanel, qtbot, plane: int, x_mm: float, y_mm: float) -> None:
    box = panel.planes[plane].box
    scene = box.mapViewToScene(QPointF(x_mm, y_mm))
    pos = panel.ortho.mapFromScene(scene)
    qtbot.mouseClick(panel.ortho.viewport(), Qt.MouseButton.LeftButton, pos=pos)


def test_click_moves_the_linked_crosshair_and_radiological_flips(panel, qtbot) -> None:
    path = NIBABEL_DATA / "anatomical.nii"   # stored L to R: the display flips it to R
    panel.open_file(path)
    first = _drawn(panel, qtbot)
    grid = panel.model.grid
    vx, vy = grid.voxel_mm[0], grid.voxel_mm[1]
    _click(panel, qtbot, 2, 5.5 * vx, 9.5 * vy)   # axial view: x = R, y = A
    qtbot.waitUntil(lambda: panel.model.cursor[:2] == (5, 9), timeout=5000)
    cursor = panel.model.cursor
    result = _drawn(panel, qtbot, cursor=cursor)
    assert panel.planes[0].lines[0].value() == pytest.approx((9 + 0.5) * vy)  # sagittal A
    canonical = np.asarray(nib.as_closest_canonical(nib.load(path)).dataobj, np.float32)
    axial = panel.planes[2].base.image
    np.testing.assert_array_equal(axial, canonical[:, :, cursor[2]])
    assert panel.planes[2].labels["left"].toPlainText() == "L"

    panel.set_radiological(True)
    assert panel.planes[2].labels["left"].toPlainText() == "R"
    assert panel.planes[1].labels["right"].toPlainText() == "L"
    assert panel.planes[0].labels["left"].toPlainText() == "P"  # sagittal: no L/R to flip
    np.testing.assert_array_equal(panel.planes[2].base.image, axial[::-1])
    np.testing.assert_array_equal(panel.planes[0].base.image, result["planes"][0][0])
    _click(panel, qtbot, 2, 5.5 * vx, 9.5 * vy)   # the same screen point: the other side
    qtbot.waitUntil(lambda: panel.model.cursor[0] == grid.shape[0] - 1 - 5, timeout=5000)
    assert first is not None


def test_scrubbing_slices_off_the_main_thread_and_drops_stale_frames(panel, qtbot,
                                                                     monkeypatch) -> None:
    panel.open_file(NITIME_FMRI)
    _drawn(panel, qtbot)
    render = panel.model.render
    threads = []

    def slow_render(state):
        threads.append(threading.get_ident())
        time.sleep(0.2)  # a slow disk: the window must not wait for it
        return render(state)

    monkeypatch.setattr(panel.model, "render", slow_render)
    start = time.perf_counter()
    for t in range(40):
        panel.time_slider.setValue(t)
    assert time.perf_counter() - start < 0.2 * 10  # 40 renders would take 8 s
    result = _drawn(panel, qtbot, t=39)
    assert result["thread"] != threading.get_ident()
    assert threads and all(ident != threading.get_ident() for ident in threads)
    assert len(threads) < 20  # throttled: most of the 40 positions were never sliced
    image = nib.load(NITIME_FMRI)
    canonical = np.asarray(nib.as_closest_canonical(image).dataobj, np.float32)
    cursor = panel.model.cursor
    np.testing.assert_array_equal(panel.planes[2].base.image, canonical[:, :, cursor[2], 39])


def test_play_advances_time(panel, qtbot) -> None:
    panel.open_file(NIBABEL_DATA / "functional.nii")
    panel.fps_box.setValue(60)
    panel.set_playing(True)
    assert panel.play_button.text() == "Pause"
    qtbot.waitUntil(lambda: panel.model.t >= 3, timeout=5000)
    panel.set_playing(False)
    stopped = panel.model.t
    qtbot.wait(100)
    assert panel.model.t == stopped


def test_overlay_on_anatomy_lightbox_rois_and_export(panel, qtbot, tmp_path) -> None:
    assert panel.open_file(NIBABEL_DATA / "anatomical.nii")
    assert panel.open_file(NIBABEL_DATA / "functional.nii")  # 4-D over 3-D: the overlay
    assert panel.model.overlay is not None and panel.time_slider.maximum() == 19
    result = _drawn(panel, qtbot)
    assert result["planes"][2][1].shape == result["planes"][2][0].shape  # on the T1 grid
    assert panel.planes[2].overlay.image is not None
    panel.set_overlay_style(threshold=1e9)  # above every value: nothing shown
    qtbot.waitUntil(lambda: panel.last_result is not result, timeout=5000)
    qtbot.waitUntil(lambda: panel.planes[2].overlay.image[..., 3].max() == 0, timeout=5000)
    panel.set_overlay_style(threshold=0.0, opacity=0.5, colormap="viridis")
    qtbot.waitUntil(lambda: panel.planes[2].overlay.image[..., 3].max() == 128, timeout=5000)

    panel.set_lightbox(True)
    assert panel.stack.currentIndex() == 1
    qtbot.waitUntil(lambda: panel.last_result["lightbox"] is not None, timeout=5000)
    grid = panel.model.grid
    assert panel.last_result["lightbox"][0].shape == (4 * grid.shape[0], 4 * grid.shape[1])
    panel.set_lightbox(False)

    for cursor in ((4, 5, 12), (20, 30, 12)):
        panel.set_cursor(cursor)
        assert panel.add_sphere_roi(8.0)
    qtbot.waitUntil(lambda: panel.fc_matrix is not None and panel.fc_matrix.shape == (2, 2),
                    timeout=10_000)
    assert panel.fc_view.spec()["kind"] == "heatmap"
    assert len(panel.roi_curves) == 2

    png, svg = panel.export_figure(tmp_path / "f.png"), panel.export_figure(tmp_path / "f.svg")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in svg.read_text()[:2000]
    from PySide6.QtGui import QImage

    from engine import provenance

    # drawn for the page (twice the screen's pixels), saying what it shows (it had no metadata
    # and its SVG/PDF named only the file's base name)
    assert QImage(str(png)).width() == 2 * panel.figure.width()
    for made in (provenance.read(png), provenance.read(svg)):
        assert any(source["path"].endswith("anatomical.nii") and Path(source["path"]).is_absolute()
                   and source["hash"] for source in made["sources"])
        view = made["view"]
        file_voxel = [int(v) for v in panel.model.grid.to_file(np.asarray((20, 30, 12)))]
        assert view["time_point"] == panel.model.t and view["cursor_voxel"] == file_voxel
        assert len(view["cursor_mm"]) == 3 and len(view["display_range"]) == 2
        assert [roi["radius_mm"] for roi in view["rois"]] == [8.0, 8.0]
    with pytest.raises(ValueError, match="png, .svg or .pdf"):
        panel.export_figure(tmp_path / "f.tiff")


def test_cursor_outside_the_overlay_says_so(panel, qtbot, tmp_path) -> None:
    """A bold run covers part of the T1: outside it the info line and the time course say
    why there is no overlay value, rather than showing nothing."""
    nib.save(nib.Nifti1Image(np.ones((20, 20, 20), np.float32), np.eye(4)), tmp_path / "t1.nii")
    slab = np.eye(4)
    slab[:3, 3] = (12, 12, 12)
    nib.save(nib.Nifti1Image(np.full((4, 4, 4, 5), 7.0, np.float32), slab), tmp_path / "f.nii")
    assert panel.open_file(tmp_path / "t1.nii") and panel.open_file(tmp_path / "f.nii")
    panel.set_cursor((13, 13, 13))
    _drawn(panel, qtbot, cursor=(13, 13, 13))
    assert "overlay 7" in panel.info.text()
    assert panel.course_plot.plotItem.titleLabel.text == ""
    panel.set_cursor((2, 2, 2))
    _drawn(panel, qtbot, cursor=(2, 2, 2))
    assert "overlay: none here (outside its field of view)" in panel.info.text()
    assert "outside the functional run" in panel.course_plot.plotItem.titleLabel.text


def test_background_indexing_shows_a_progress_bar_until_done(panel, qtbot, tmp_path,
                                                             monkeypatch) -> None:
    from engine.io.nifti import Volume

    gate, prepare = threading.Event(), Volume._prepare
    monkeypatch.setattr(Volume, "_prepare",
                        lambda self, converted: (gate.wait(), prepare(self, converted)))
    path = tmp_path / "run.nii.gz"
    nib.save(nib.Nifti1Image(np.ones((6, 6, 6, 4), np.float32), np.eye(4)), path)
    assert panel.open_file(path)
    assert panel.preparation_bar.isVisible() and panel.preparation_bar.maximum() == 0  # busy
    assert panel.preparation_label.text() == "indexing run.nii.gz for quick frames"
    gate.set()
    qtbot.waitUntil(lambda: not panel.preparation_bar.isVisible(), timeout=30_000)
    assert not panel.preparation_label.isVisible()


def test_label_image_rois_give_a_connectivity_matrix(panel, qtbot, tmp_path) -> None:
    functional = nib.load(NIBABEL_DATA / "functional.nii")
    labels = np.zeros(functional.shape[:3], np.int16)
    labels[:6, :, :], labels[6:12, :, :], labels[12:, :10, :] = 1, 2, 5
    atlas = tmp_path / "atlas.nii.gz"
    nib.save(nib.Nifti1Image(labels, functional.affine), atlas)
    panel.open_file(NIBABEL_DATA / "functional.nii")
    assert panel.load_label_image(atlas)
    qtbot.waitUntil(lambda: panel.fc_matrix is not None, timeout=10_000)
    data = np.asarray(functional.dataobj, np.float64)
    expected = np.corrcoef(np.stack([data[labels == v].mean(0) for v in (1, 2, 5)]))
    np.testing.assert_allclose(panel.fc_matrix, expected, atol=1e-4)
    assert panel.load_label_image(tmp_path / "missing.nii") is False


def test_bids_folder_opens_t1_with_bold_over_it(panel, qtbot, tmp_path) -> None:
    root = tmp_path / "ds"
    (root / "sub-01" / "anat").mkdir(parents=True)
    (root / "sub-01" / "func").mkdir()
    (root / "dataset_description.json").write_text('{"Name": "t"}')
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    nib.save(nib.Nifti1Image(np.ones((10, 12, 8), np.float32), affine),
             root / "sub-01" / "anat" / "sub-01_T1w.nii.gz")
    nib.save(nib.Nifti1Image(np.ones((5, 6, 4, 7), np.float32), affine * [2, 2, 2, 1]),
             root / "sub-01" / "func" / "sub-01_task-rest_bold.nii.gz")
    (root / "task-rest_bold.json").write_text(json.dumps({"RepetitionTime": 0.7}))
    assert panel.open_file(root)
    assert panel.model.base.n_frames == 1 and panel.model.overlay.n_frames == 7
    assert panel.model.overlay.tr_s == pytest.approx(0.7)


def test_bad_files_are_reported_and_leave_the_view_alone(panel, qtbot, fake_host,
                                                         tmp_path) -> None:
    panel.open_file(NIBABEL_DATA / "functional.nii")
    before = panel.model.base
    text = tmp_path / "scan.nii"
    text.write_text("not an image\n" * 50)
    assert panel.open_file(text) is False
    title, message = fake_host.errors[-1]
    assert str(text) in message and "not a NIfTI file" in message
    assert panel.model.base is before
    assert panel.open_file(tmp_path) is False  # an empty folder is no BIDS dataset
    assert "not a BIDS folder" in fake_host.errors[-1][1]


def test_nan_voxels_are_refused_unless_shown_as_zero(panel, qtbot, fake_host,
                                                     tmp_path) -> None:
    data = np.ones((6, 6, 6, 3), np.float32)
    data[2, 2, 2, 0] = np.nan
    path = tmp_path / "masked.nii.gz"
    nib.save(nib.Nifti1Image(data, np.eye(4)), path)
    assert panel.open_file(path) is False
    assert "NaN" in fake_host.errors[-1][1] and str(path) in fake_host.errors[-1][1]
    panel.nan_box.setChecked(True)
    assert panel.open_file(path)
    panel.set_cursor(panel.model.grid.to_display(np.array([2, 2, 2])))
    assert _drawn(panel, qtbot, cursor=(2, 2, 2))["value"] == 0.0


def test_panel_imports_no_torch() -> None:
    code = "import sys, panels.fmri.view; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"QT_QPA_PLATFORM": "offscreen", "PATH": ""}, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.gl
def test_volume_rendering_shows_the_frame(panel, qtbot, tmp_path) -> None:
    axes = np.meshgrid(*(np.linspace(-1, 1, 40),) * 3, indexing="ij")
    ball = (sum(a * a for a in axes) < 0.6).astype(np.float32) * 100
    nib.save(nib.Nifti1Image(ball, np.diag([2.0, 2.0, 2.0, 1.0])), tmp_path / "ball.nii")
    panel.open_file(tmp_path / "ball.nii")
    _drawn(panel, qtbot)
    assert panel.set_3d(True)
    assert panel.stack.currentWidget() is panel.volume_view
    qtbot.waitUntil(lambda: panel.volume_view._visual is not None, timeout=10_000)
    image = panel.volume_view.snapshot()
    assert image.shape[2] == 4 and (image[..., :3] > 20).mean() > 0.05  # a head, not black
    panel.volume_view.set_method("translucent")
    panel.set_3d(False)
    assert panel.stack.currentIndex() == 0


def test_the_shell_opens_a_nifti_in_this_panel(main_window, qtbot) -> None:
    main_window.open_paths([str(NITIME_FMRI)])
    qtbot.waitUntil(lambda: getattr(main_window.panel_widgets.get("fmri"), "last_result",
                                    None) is not None, timeout=30_000)
    panel = main_window.panel_widgets["fmri"]
    assert panel.model.base.path == NITIME_FMRI and not main_window.errors
    panel.shutdown()
