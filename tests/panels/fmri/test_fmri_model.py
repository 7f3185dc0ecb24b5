"""The viewer's model without Qt: display space, orientation, resampling, ROIs, connectivity."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from engine.io.nifti import open_volume
from panels.fmri.model import (
    DisplayGrid,
    ViewerModel,
    ViewState,
    connectivity,
    mosaic,
    orientation_labels,
    roi_time_courses,
)


def _oblique_affine(degrees: float = 25.0) -> np.ndarray:
    angle = np.deg2rad(degrees)
    rotation = np.array([[1, 0, 0], [0, np.cos(angle), -np.sin(angle)],
                         [0, np.sin(angle), np.cos(angle)]])
    affine = np.eye(4)
    affine[:3, :3] = rotation @ np.diag([-2.0, 2.5, 3.0])  # x flipped: the file runs R to L
    affine[:3, 3] = [40.0, -30.0, -10.0]
    return affine


def _save(path: Path, data: np.ndarray, affine: np.ndarray) -> Path:
    nib.save(nib.Nifti1Image(data, affine), path)
    return path


def test_display_matches_nibabel_closest_canonical(tmp_path: Path) -> None:
    data = np.random.default_rng(0).normal(size=(7, 8, 9)).astype(np.float32)
    path = _save(tmp_path / "oblique.nii", data, _oblique_affine())
    volume = open_volume(path)
    grid = DisplayGrid(volume)
    canonical = np.asarray(nib.as_closest_canonical(nib.load(path)).dataobj)
    assert grid.shape == canonical.shape
    for plane in range(3):
        index = grid.shape[plane] // 3
        np.testing.assert_array_equal(grid.plane_slice(volume, plane, index, 0),
                                      np.take(canonical, index, axis=plane))
    display = np.array([[1, 2, 3], [6, 0, 8]])
    np.testing.assert_array_equal(grid.to_display(grid.to_file(display)), display)
    np.testing.assert_allclose(grid.world(display),
                               nib.affines.apply_affine(volume.affine, grid.to_file(display)))


def test_orientation_letters_follow_the_convention() -> None:
    assert orientation_labels(2, radiological=False) == {"left": "L", "right": "R",
                                                          "bottom": "P", "top": "A"}
    assert orientation_labels(2, radiological=True)["left"] == "R"
    assert orientation_labels(1, radiological=True) == {"left": "R", "right": "L",
                                                         "bottom": "I", "top": "S"}
    assert orientation_labels(0, radiological=True) == {"left": "P", "right": "A",
                                                        "bottom": "I", "top": "S"}


def _linear_field(shape, affine) -> np.ndarray:
    ijk = np.stack(np.meshgrid(*(np.arange(n) for n in shape), indexing="ij"), -1)
    world = nib.affines.apply_affine(affine, ijk)
    return (world @ np.array([1.0, 2.0, 3.0]) + 500).astype(np.float32)


def test_overlay_is_resampled_through_both_affines(tmp_path: Path) -> None:
    anat_affine = np.diag([2.0, 2.0, 2.0, 1.0])
    anat_affine[:3, 3] = [-20, -24, -16]
    func_affine = _oblique_affine(10)
    func_affine[:3, 3] = [20, -30, -24]
    func = np.repeat(_linear_field((14, 16, 14), func_affine)[..., None], 3, axis=3)
    model = ViewerModel()
    model.set_base(open_volume(_save(tmp_path / "t1.nii", np.ones((20, 24, 16), np.float32),
                                     anat_affine)))
    model.set_overlay(open_volume(_save(tmp_path / "bold.nii.gz", func, func_affine)))
    model.set_cursor((10, 12, 8))
    result = model.render(ViewState(cursor=model.cursor, t=2))
    x, y, z = model.cursor_world()
    assert result["overlay_value"] == pytest.approx(x + 2 * y + 3 * z + 500, abs=1e-3)
    axial = result["planes"][2][1]
    assert axial.shape == (20, 24)  # on the anatomical grid
    inside = np.isfinite(axial)
    assert inside.sum() > 50 and (~inside).sum() > 0  # NaN where the overlay does not reach
    assert model.functional_voxel() is not None
    model.close()


def test_rois_time_courses_and_connectivity(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    signals = rng.normal(size=(2, 60))
    data = rng.normal(scale=0.1, size=(12, 12, 12, 60)).astype(np.float32)
    data[1:5, 1:5, 1:5] += signals[0]
    data[7:11, 7:11, 7:11] += signals[0]   # same signal: strongly connected
    data[1:5, 7:11, 1:5] += signals[1]
    affine = np.diag([3.0, 3.0, 3.0, 1.0])
    model = ViewerModel()
    model.set_base(open_volume(_save(tmp_path / "bold.nii", data, affine)))
    for centre in ((3, 3, 3), (9, 9, 9), (3, 9, 3)):
        model.set_cursor(centre)
        roi = model.add_sphere(radius_mm=3.0)
        assert len(roi.voxels) == 7  # the centre and its six face neighbours
    courses = roi_time_courses(model.base, model.rois)
    np.testing.assert_allclose(courses[:, 0], data[tuple(model.rois[0].voxels.T)].mean(0),
                               rtol=1e-5)
    matrix = connectivity(courses)
    assert matrix.shape == (3, 3) and np.allclose(np.diag(matrix), 1, atol=1e-5)
    assert matrix[0, 1] > 0.9 and abs(matrix[0, 2]) < 0.5

    labels = np.zeros((12, 12, 12), np.uint8)
    labels[1:5, 1:5, 1:5], labels[7:11, 7:11, 7:11] = 3, 8
    model.rois.clear()
    rois = model.add_label_image(open_volume(_save(tmp_path / "atlas.nii", labels, affine)))
    assert [r.name for r in rois] == ["label 3", "label 8"] and len(rois[0].voxels) == 64
    model.close()


def test_bad_roi_requests() -> None:
    model = ViewerModel()
    with pytest.raises(ValueError, match="4-D functional"):
        model.add_sphere(5.0)


def test_mosaic_puts_the_first_slice_top_left() -> None:
    tiles = [np.full((2, 3), n, np.float32) for n in range(5)]
    out = mosaic(tiles)
    assert out.shape == (6, 6)
    assert out[0, 5] == 0 and out[2, 5] == 1 and out[0, 0] == 3 and np.isnan(out[5, 0])
