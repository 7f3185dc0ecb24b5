"""Sphere ROIs drawn on the orthogonal slices, and a time course that cannot be read: the
viewer offscreen on small volumes written here."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from PySide6.QtCore import QPointF

from panels.fmri.model import sphere_section
from panels.fmri.view import FmriPanel, roi_colour

SHAPE = (20, 16, 12, 4)
VOXEL_MM = (2.0, 2.0, 3.0)


def _dark_run(tmp_path: Path, name: str = "dark.nii") -> Path:
    """A black 4-D run stored left to right (x flipped on display), anisotropic voxels.
    Another run gets another ``name``: the panel memory-maps the open one, and rewriting a
    mapped file under a reader ends the process (SIGBUS)."""
    affine = np.diag([-VOXEL_MM[0], VOXEL_MM[1], VOXEL_MM[2], 1.0])
    affine[:3, 3] = (20.0, -16.0, -18.0)
    path = tmp_path / name
    nib.save(nib.Nifti1Image(np.zeros(SHAPE, np.float32), affine), path)
    return path


def _circles(panel: FmriPanel, plane: int) -> list[tuple[float, float, float]]:
    """Centre x, centre y and radius (mm, view coordinates) of each outline on a plane."""
    out = []
    for item in panel.planes[plane].outlines:
        rect = item.rect()
        out.append((rect.center().x(), rect.center().y(), rect.width() / 2))
        assert rect.width() == pytest.approx(rect.height())
    return out


def _colour_near(panel: FmriPanel, plane: int, x_mm: float, y_mm: float, colour) -> bool:
    """Whether a pixel within 2 of the view point (x, y mm) has this colour in a grab."""
    image = panel.ortho.viewport().grab().toImage()
    point = panel.ortho.mapFromScene(panel.planes[plane].box.mapViewToScene(QPointF(x_mm, y_mm)))
    want = np.array([colour.red(), colour.green(), colour.blue()])
    for dx in range(-2, 3):
        for dy in range(-2, 3):
            pixel = image.pixelColor(point.x() + dx, point.y() + dy)
            if np.abs(np.array([pixel.red(), pixel.green(), pixel.blue()]) - want).max() < 40:
                return True
    return False


def test_sphere_rois_are_outlined_where_the_slices_cut_them(panel, qtbot, tmp_path) -> None:
    assert panel.open_file(_dark_run(tmp_path))
    grid = panel.model.grid
    assert grid.flipped[0]  # stored L to R: display index 12 is file index 7
    panel.set_cursor((12, 8, 6))
    assert panel.add_sphere_roi(7.0)
    roi = panel.model.rois[0]
    np.testing.assert_allclose(roi.centre_mm, grid.world(np.array([12, 8, 6])))

    # every plane goes through the centre: circles of the full radius at the cursor
    assert _circles(panel, 2) == [pytest.approx((12.5 * 2, 8.5 * 2, 7.0))]   # axial R-A
    assert _circles(panel, 1) == [pytest.approx((12.5 * 2, 6.5 * 3, 7.0))]   # coronal R-S
    assert _circles(panel, 0) == [pytest.approx((8.5 * 2, 6.5 * 3, 7.0))]    # sagittal A-S
    qtbot.waitUntil(lambda: len(panel.roi_curves) == 1, timeout=10_000)
    colour = roi_colour(0)
    assert panel.planes[2].outlines[0].pen().color() == colour
    assert panel.roi_curves[0].opts["pen"].color() == colour
    diagonal = 7.0 / np.sqrt(2)  # off the crosshair lines
    assert _colour_near(panel, 2, 25 + diagonal, 17 + diagonal, colour)

    # two axial slices up (6 mm): a smaller circle there, sagittal and coronal unchanged
    panel.set_cursor((12, 8, 8))
    assert _circles(panel, 2) == [pytest.approx((25, 17, np.sqrt(7.0**2 - 6.0**2)))]
    assert _circles(panel, 0) == [pytest.approx((17, 19.5, 7.0))]
    # three up (9 mm): the axial slice misses the sphere
    panel.set_cursor((12, 8, 9))
    assert _circles(panel, 2) == [] and len(_circles(panel, 0)) == 1
    assert not _colour_near(panel, 2, 25 + diagonal, 17 + diagonal, colour)
    # a sagittal slice 4 voxels (8 mm) to the side misses it too
    panel.set_cursor((16, 8, 6))
    assert _circles(panel, 0) == [] and len(_circles(panel, 2)) == 1

    # radiological: the circle moves to the mirrored side of the axial and coronal views
    panel.set_cursor((12, 8, 6))
    panel.set_radiological(True)
    mirrored = (grid.shape[0] - 1 - 12 + 0.5) * 2
    assert _circles(panel, 2) == [pytest.approx((mirrored, 17, 7.0))]
    assert _circles(panel, 1) == [pytest.approx((mirrored, 19.5, 7.0))]
    assert _circles(panel, 0) == [pytest.approx((17, 19.5, 7.0))]
    assert _colour_near(panel, 2, mirrored + diagonal, 17 + diagonal, colour)
    assert not _colour_near(panel, 2, 25 + diagonal, 17 + diagonal, colour)

    # a second ROI in its own colour; opening another run clears both outlines
    panel.set_radiological(False)
    panel.set_cursor((4, 4, 6))
    assert panel.add_sphere_roi(3.0)
    assert [item.pen().color() for item in panel.planes[2].outlines] == [colour, roi_colour(1)]
    assert panel.open_file(_dark_run(tmp_path, "another.nii"))
    assert all(view.outlines == [] for view in panel.planes)


def test_sphere_section_on_an_oblique_grid(tmp_path) -> None:
    """A rotated grid: the plane's distance to the centre is measured along its normal."""
    from engine.io.nifti import open_volume
    from panels.fmri.model import DisplayGrid, Roi

    angle = np.deg2rad(20)
    rotation = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0],
                         [0, 0, 1]])
    affine = np.eye(4)
    affine[:3, :3] = rotation * 2.0
    nib.save(nib.Nifti1Image(np.zeros((10, 10, 10), np.float32), affine), tmp_path / "o.nii")
    volume = open_volume(tmp_path / "o.nii")
    try:
        grid = DisplayGrid(volume)
        centre = grid.world(np.array([5, 5, 5]))
        np.testing.assert_allclose(grid.from_world(centre), [5, 5, 5], atol=1e-9)
        roi = Roi("s", np.zeros((1, 3), int), centre_mm=tuple(centre), radius_mm=5.0)
        h, v, radius = sphere_section(grid, roi, 2, 6)   # 2 mm from the centre
        assert (h, v) == pytest.approx((5, 5)) and radius == pytest.approx(np.sqrt(21))
        assert sphere_section(grid, roi, 0, 8) is None   # 6 mm away
        assert sphere_section(grid, Roi("label 1", np.zeros((1, 3), int)), 2, 5) is None
    finally:
        volume.close()


def test_unreadable_time_course_is_cleared_and_explained(panel, qtbot, fake_host,
                                                         tmp_path) -> None:
    """A later frame with NaNs at the cursor: the reader refuses the time course, and the
    previous cursor's curve must not stay on screen as if it were this one's."""
    data = np.broadcast_to(np.arange(5, dtype=np.float32), (6, 6, 6, 5)).copy()
    data[4, 4, 4, 3] = np.nan
    path = tmp_path / "late_nan.nii.gz"
    nib.save(nib.Nifti1Image(data, np.eye(4)), path)
    assert panel.open_file(path)   # frame 0 is clean: the run opens
    title = panel.course_plot.plotItem.titleLabel

    panel.set_cursor((2, 2, 2))
    qtbot.waitUntil(lambda: panel.time_course is not None, timeout=10_000)
    np.testing.assert_array_equal(panel.course_curve.getData()[1], np.arange(5))
    errors = len(fake_host.errors)

    panel.set_cursor((4, 4, 4))
    qtbot.waitUntil(lambda: "NaN" in title.text, timeout=10_000)
    assert title.isVisible() and title.text.startswith("no time course here:")
    assert panel.time_course is None
    x, y = panel.course_curve.getData()
    assert x is None or len(x) == 0
    assert "no time course at the cursor" in panel.info.text()
    assert str(path) in panel.info.text()
    assert len(fake_host.errors) == errors   # no message box per voxel dragged over

    panel.set_cursor((2, 2, 3))
    qtbot.waitUntil(lambda: panel.time_course is not None, timeout=10_000)
    assert not title.isVisible()   # the explanation goes with the curve it explained
    np.testing.assert_array_equal(panel.course_curve.getData()[1], np.arange(5))
