"""The fMRI viewer's model, without Qt: layers, the cursor, the display space, slicing, ROIs.

Volumes are shown in their anatomical directions whatever the file's axis order: each voxel
axis is mapped to the nearest of R, A, S (``nibabel.orientations.io_orientation``), so an
oblique or flipped file shows upright with correct labels, and every displayed pixel still
maps to one voxel of the file. A functional overlay is resampled onto the base image's
slices through both affines (world mm in between), so grids may differ. ``render`` turns a
``ViewState`` snapshot into the images a view draws; the view calls it off the main thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from engine.io.nifti import Volume

PLANES = ("sagittal", "coronal", "axial")  # plane p holds display axis p fixed
AXIS_LETTERS = (("L", "R"), ("P", "A"), ("I", "S"))  # display axis: (low end, high end)
OVERLAY_COLORMAPS = ("inferno", "plasma", "viridis", "turbo", "CET-L4")


def plane_axes(plane: int) -> tuple[int, int]:
    """(horizontal, vertical) display axes of a plane: sagittal A-S, coronal R-S, axial R-A."""
    return {0: (1, 2), 1: (0, 2), 2: (0, 1)}[plane]


def orientation_labels(plane: int, radiological: bool) -> dict[str, str]:
    """The letters at the left, right, bottom and top edges of a plane's view."""
    horizontal, vertical = plane_axes(plane)
    left, right = AXIS_LETTERS[horizontal]
    if radiological and horizontal == 0:
        left, right = right, left  # the subject's right on the viewer's left
    bottom, top = AXIS_LETTERS[vertical]
    return {"left": left, "right": right, "bottom": bottom, "top": top}


class DisplayGrid:
    """A volume's voxel grid seen in R, A, S order: display index <-> file index."""

    def __init__(self, volume: Volume) -> None:
        import nibabel as nib

        ornt = nib.orientations.io_orientation(volume.affine)
        self.file_axis = [0, 0, 0]
        self.flipped = [False, False, False]
        for axis, (display, direction) in enumerate(ornt):
            self.file_axis[int(display)] = axis
            self.flipped[int(display)] = direction < 0
        self.file_shape = volume.spatial_shape
        self.shape = tuple(self.file_shape[self.file_axis[d]] for d in range(3))
        self.voxel_mm = tuple(volume.voxel_mm[self.file_axis[d]] for d in range(3))
        self.affine = volume.affine

    def to_file(self, display: np.ndarray) -> np.ndarray:
        """Display indices ``(..., 3)`` -> file voxel indices ``(..., 3)``."""
        display = np.asarray(display)
        out = np.empty_like(display)
        for d in range(3):
            index = display[..., d]
            out[..., self.file_axis[d]] = self.shape[d] - 1 - index if self.flipped[d] else index
        return out

    def to_display(self, ijk: np.ndarray) -> np.ndarray:
        ijk = np.asarray(ijk)
        out = np.empty_like(ijk)
        for d in range(3):
            index = ijk[..., self.file_axis[d]]
            out[..., d] = self.shape[d] - 1 - index if self.flipped[d] else index
        return out

    def world(self, display: np.ndarray) -> np.ndarray:
        ijk = self.to_file(np.asarray(display)).astype(float)
        return ijk @ self.affine[:3, :3].T + self.affine[:3, 3]

    def from_world(self, xyz) -> np.ndarray:
        """World mm ``(..., 3)`` -> fractional display indices (the inverse of ``world``)."""
        inverse = np.linalg.inv(self.affine)
        ijk = np.asarray(xyz, dtype=float) @ inverse[:3, :3].T + inverse[:3, 3]
        return self.to_display(ijk)

    def plane_slice(self, volume: Volume, plane: int, index: int, t: int) -> np.ndarray:
        """The 2-D image ``[horizontal, vertical]`` of a plane at display ``index``."""
        file_axis = self.file_axis[plane]
        file_index = self.shape[plane] - 1 - index if self.flipped[plane] else index
        image = volume.slice(file_axis, file_index, min(t, volume.n_frames - 1))
        horizontal, vertical = plane_axes(plane)
        if self.file_axis[horizontal] > self.file_axis[vertical]:
            image = image.T
        if self.flipped[horizontal]:
            image = image[::-1, :]
        if self.flipped[vertical]:
            image = image[:, ::-1]
        return np.ascontiguousarray(image)

    def display_volume(self, volume: Volume, t: int) -> np.ndarray:
        """A whole frame in display order ``[R, A, S]`` (for 3-D rendering)."""
        frame = np.transpose(volume.frame(min(t, volume.n_frames - 1)), self.file_axis)
        return frame[tuple(slice(None, None, -1) if f else slice(None) for f in self.flipped)]

    def plane_voxels(self, plane: int, index: int) -> np.ndarray:
        """Display indices ``(h, v, 3)`` of every pixel of a plane (for resampling)."""
        horizontal, vertical = plane_axes(plane)
        grid = np.zeros((self.shape[horizontal], self.shape[vertical], 3), dtype=np.int64)
        grid[..., horizontal] = np.arange(self.shape[horizontal])[:, None]
        grid[..., vertical] = np.arange(self.shape[vertical])[None, :]
        grid[..., plane] = index
        return grid


def resample_onto(overlay: Volume, frame: np.ndarray, world_mm: np.ndarray) -> np.ndarray:
    """Overlay values at world points ``(..., 3)``, trilinear, NaN outside the overlay."""
    from scipy.ndimage import map_coordinates

    ijk = overlay.world_to_voxel(world_mm.reshape(-1, 3))
    values = map_coordinates(frame, ijk.T, order=1, mode="constant", cval=np.nan)
    return values.reshape(world_mm.shape[:-1]).astype(np.float32)


@dataclass(frozen=True)
class ViewState:
    """What one redraw needs: a snapshot, so the worker never sees a half-made change."""

    cursor: tuple[int, int, int]    # display indices of the base grid
    t: int
    lightbox: bool = False
    lightbox_slices: int = 16
    compare_t: int | None = None    # the generated layer's frame at this time (None: none)


@dataclass
class Roi:
    name: str
    voxels: np.ndarray              # (n, 3) file indices in the functional volume
    centre_mm: tuple[float, float, float] | None = None  # a sphere's centre (world)
    radius_mm: float | None = None                         # and radius; None: an atlas label


def sphere_section(grid: DisplayGrid, roi: Roi, plane: int,
                   index: int) -> tuple[float, float, float] | None:
    """Where a plane at display ``index`` cuts a sphere ROI: the circle's centre as fractional
    display indices (horizontal, vertical) and its radius in mm; None when it misses the
    sphere or the ROI is no sphere. Exact for any affine with orthogonal axes (oblique too):
    the views are drawn in mm along the voxel axes."""
    if roi.centre_mm is None or roi.radius_mm is None:
        return None
    centre = grid.from_world(np.asarray(roi.centre_mm))
    distance_mm = (index - centre[plane]) * grid.voxel_mm[plane]
    if abs(distance_mm) > roi.radius_mm:
        return None
    horizontal, vertical = plane_axes(plane)
    radius = float(np.sqrt(roi.radius_mm ** 2 - distance_mm ** 2))
    return float(centre[horizontal]), float(centre[vertical]), radius


@dataclass
class ViewerModel:
    """The layers and the cursor. ``base`` fixes the display grid; ``overlay`` is drawn on it
    (resampled when the grids differ); the time axis is the 4-D layer's."""

    base: Volume | None = None
    overlay: Volume | None = None
    grid: DisplayGrid | None = None
    cursor: tuple[int, int, int] = (0, 0, 0)
    t: int = 0
    radiological: bool = False
    rois: list[Roi] = field(default_factory=list)
    compare: Volume | None = None   # a generated run drawn beside the real one, same cursor
    clock_frames: int = 0           # frames the clock must reach (a generated layer's end)
    _same_grid: bool = False
    _compare_same_grid: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)  # volumes' user

    def set_base(self, volume: Volume) -> None:
        self.close()
        self.base, self.grid = volume, DisplayGrid(volume)
        self.cursor = tuple(int(n) // 2 for n in self.grid.shape)  # type: ignore[assignment]
        self.t = 0

    def set_overlay(self, volume: Volume | None) -> None:
        if self.overlay is not None:
            self.overlay.close()
        self.overlay, self.rois = volume, []
        self._same_grid = volume is not None and self.base is not None and (
            volume.spatial_shape == self.base.spatial_shape
            and np.allclose(volume.affine, self.base.affine, atol=1e-4))

    def set_compare(self, volume: Volume | None) -> None:
        """The generated layer shown in the second row (the caller owns and closes it)."""
        self.compare = volume
        self._compare_same_grid = volume is not None and self.base is not None and (
            volume.spatial_shape == self.base.spatial_shape
            and np.allclose(volume.affine, self.base.affine, atol=1e-4))

    @property
    def functional(self) -> Volume | None:
        """The layer time courses come from: the overlay, else a 4-D base."""
        if self.overlay is not None:
            return self.overlay
        return self.base if self.base is not None and self.base.n_frames > 1 else None

    @property
    def n_frames(self) -> int:
        return max([v.n_frames for v in (self.base, self.overlay) if v is not None]
                   + [self.clock_frames, 1])

    def set_cursor(self, display) -> None:
        clipped = np.clip(np.asarray(display, dtype=int), 0, np.asarray(self.grid.shape) - 1)
        self.cursor = tuple(int(v) for v in clipped)  # type: ignore[assignment]

    def cursor_world(self) -> np.ndarray:
        return self.grid.world(np.asarray(self.cursor))

    def cursor_voxel(self) -> np.ndarray:
        return self.grid.to_file(np.asarray(self.cursor))

    def functional_voxel(self) -> np.ndarray | None:
        """The functional layer's voxel nearest the cursor, or None outside it."""
        volume = self.functional
        if volume is None:
            return None
        ijk = np.rint(volume.world_to_voxel(self.cursor_world())).astype(int)
        inside = (ijk >= 0).all() and (ijk < np.asarray(volume.spatial_shape)).all()
        return ijk if inside else None

    def snapshot(self, lightbox: bool = False, compare_t: int | None = None) -> ViewState:
        return ViewState(cursor=self.cursor, t=self.t, lightbox=lightbox, compare_t=compare_t)

    # -- rendering (runs on the slicing thread) ---------------------------------------------

    def render(self, state: ViewState) -> dict:
        """Images for every view at ``state``: ``{"planes": [(base, overlay|None) x3],
        "value", "overlay_value", "lightbox": (base, overlay|None)|None, "thread"}``."""
        with self.lock:  # the volumes' caches are touched by one thread at a time
            base, overlay, grid = self.base, self.overlay, self.grid
            planes = [self._plane(base, overlay, grid, p, state.cursor[p], state.t)
                      for p in range(3)]
            ijk = grid.to_file(np.asarray(state.cursor))
            value = base.value(ijk, min(state.t, base.n_frames - 1))
            overlay_value = None
            if overlay is not None:
                point = grid.world(np.asarray(state.cursor))[None, :]
                found = resample_onto(overlay, overlay.frame(min(state.t, overlay.n_frames - 1)),
                                      point)[0]
                overlay_value = None if np.isnan(found) else float(found)
            lightbox = (self._lightbox(base, overlay, grid, state)
                        if state.lightbox else None)
            compare = self._compare_planes(planes, grid, state)
        return {"planes": planes, "value": value, "overlay_value": overlay_value,
                "lightbox": lightbox, "compare": compare, "state": state,
                "thread": threading.get_ident()}

    def _compare_planes(self, planes: list, grid: DisplayGrid, state: ViewState) -> list | None:
        """The second row: the real rendering with the functional layer swapped for the
        generated one (NaN where it has no frame at this time)."""
        if self.compare is None:
            return None
        rows = []
        for p, (base_image, overlay_image) in enumerate(planes):
            if state.compare_t is None:
                generated = np.full_like(overlay_image if overlay_image is not None
                                         else base_image, np.nan)
            else:
                generated = self._layer_plane(self.compare, grid, p, state.cursor[p],
                                              state.compare_t)
            rows.append((base_image, generated) if self.overlay is not None
                        else (generated, None))
        return rows

    def _layer_plane(self, volume: Volume, grid: DisplayGrid, plane: int, index: int,
                     t: int) -> np.ndarray:
        if volume is self.compare and self._compare_same_grid:
            return grid.plane_slice(volume, plane, index, t)
        world = grid.world(grid.plane_voxels(plane, index))
        return resample_onto(volume, volume.frame(min(t, volume.n_frames - 1)), world)

    def _plane(self, base: Volume, overlay: Volume | None, grid: DisplayGrid, plane: int,
               index: int, t: int) -> tuple[np.ndarray, np.ndarray | None]:
        image = grid.plane_slice(base, plane, index, t)
        if overlay is None:
            return image, None
        overlay_t = min(t, overlay.n_frames - 1)
        if self._same_grid:
            return image, grid.plane_slice(overlay, plane, index, overlay_t)
        return image, self._layer_plane(overlay, grid, plane, index, overlay_t)

    def _lightbox(self, base: Volume, overlay: Volume | None, grid: DisplayGrid,
                  state: ViewState) -> tuple[np.ndarray, np.ndarray | None]:
        """Axial slices evenly through the volume as one mosaic ``[horizontal, vertical]``,
        the first slice at the top left."""
        count = min(state.lightbox_slices, grid.shape[2])
        indices = np.linspace(0, grid.shape[2] - 1, count).round().astype(int)
        slices = [self._plane(base, overlay, grid, 2, int(k), state.t) for k in indices]
        return (mosaic([s[0] for s in slices]),
                None if overlay is None else mosaic([s[1] for s in slices]))

    # -- ROIs --------------------------------------------------------------------------------

    def add_sphere(self, radius_mm: float, centre_mm=None) -> Roi:
        """A sphere ROI of the functional layer's voxels within ``radius_mm`` of the cursor
        (or of ``centre_mm``, a world point)."""
        volume = self._need_functional()
        centre = self.cursor_world() if centre_mm is None else np.asarray(centre_mm, float)
        reach = radius_mm / min(volume.voxel_mm) + 1
        middle = volume.world_to_voxel(centre)
        lo = np.maximum(np.floor(middle - reach), 0).astype(int)
        hi = np.minimum(np.ceil(middle + reach), np.asarray(volume.spatial_shape) - 1)
        axes = [np.arange(a, b + 1) for a, b in zip(lo, hi.astype(int), strict=True)]
        voxels = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
        near = np.linalg.norm(volume.voxel_to_world(voxels) - centre, axis=1) <= radius_mm
        if not near.any():  # a radius below the voxel size: the voxel at the cursor
            near = np.linalg.norm(voxels - np.rint(middle), axis=1) == 0
        if not near.any():
            raise ValueError("the sphere's centre is outside the functional image")
        x, y, z = np.round(centre).astype(int)
        roi = Roi(f"sphere {radius_mm:g} mm at ({x}, {y}, {z})", voxels[near],
                  centre_mm=tuple(float(c) for c in centre), radius_mm=float(radius_mm))
        self.rois.append(roi)
        return roi

    def add_label_image(self, labels: Volume, max_labels: int = 200) -> list[Roi]:
        """One ROI per non-zero label of an atlas, resampled (nearest) onto the functional
        grid through both affines."""
        volume = self._need_functional()
        voxels = grid_voxels(volume.spatial_shape)
        values = labels_on(volume, labels).reshape(-1)
        found = [v for v in np.unique(values) if v != 0]
        if not found:
            raise ValueError(f"{labels.path}: no labelled voxel overlaps the functional image")
        if len(found) > max_labels:
            raise ValueError(f"{labels.path}: {len(found)} labels; at most {max_labels}")
        rois = [Roi(f"label {v}", voxels[values == v]) for v in found]
        self.rois.extend(rois)
        return rois

    def _need_functional(self) -> Volume:
        if self.functional is None:
            raise ValueError("ROIs need a 4-D functional image: open one first")
        return self.functional

    def close(self) -> None:
        for volume in (self.base, self.overlay):
            if volume is not None:
                volume.close()
        self.base = self.overlay = self.grid = self.compare = None
        self.rois = []


def grid_voxels(shape: tuple[int, int, int]) -> np.ndarray:
    """Every voxel index ``(n, 3)`` of a grid, C order (matches ``array.reshape(-1)``)."""
    return np.stack(np.meshgrid(*(np.arange(n) for n in shape), indexing="ij"),
                    -1).reshape(-1, 3)


def labels_on(volume: Volume, labels: Volume) -> np.ndarray:
    """An atlas's integer labels at each voxel of ``volume`` (nearest, through both affines;
    0 where the atlas does not reach), shaped like ``volume.spatial_shape``."""
    voxels = grid_voxels(volume.spatial_shape)
    atlas_ijk = np.rint(labels.world_to_voxel(volume.voxel_to_world(voxels))).astype(int)
    inside = ((atlas_ijk >= 0) & (atlas_ijk < np.asarray(labels.spatial_shape))).all(1)
    values = np.zeros(len(voxels), dtype=np.int64)
    values[inside] = np.rint(labels.frame(0)[tuple(atlas_ijk[inside].T)]).astype(np.int64)
    return values.reshape(volume.spatial_shape)


def mosaic(images: list[np.ndarray]) -> np.ndarray:
    """Equal 2-D images ``[h, v]`` tiled row by row from the top left (vertical axis up)."""
    columns = int(np.ceil(np.sqrt(len(images))))
    rows = int(np.ceil(len(images) / columns))
    width, height = images[0].shape
    out = np.full((columns * width, rows * height), np.nan, dtype=np.float32)
    for n, image in enumerate(images):
        row, column = divmod(n, columns)
        top = (rows - 1 - row) * height
        out[column * width:(column + 1) * width, top:top + height] = image
    return out


def roi_time_courses(volume: Volume, rois: list[Roi]) -> np.ndarray:
    """``(n_frames, n_rois)`` mean time course of each ROI, one pass over the frames."""
    voxels = np.concatenate([roi.voxels for roi in rois])
    owner = np.repeat(np.arange(len(rois)), [len(roi.voxels) for roi in rois])
    values = volume.values_over_time(voxels)
    sums = np.stack([np.bincount(owner, weights=row, minlength=len(rois)) for row in values])
    return (sums / np.bincount(owner, minlength=len(rois))).astype(np.float32)


def connectivity(time_courses: np.ndarray) -> np.ndarray:
    """Pearson correlation between ROI time courses (a constant ROI correlates as 0)."""
    centred = time_courses - time_courses.mean(0)
    norms = np.linalg.norm(centred, axis=0)
    norms[norms == 0] = np.inf
    unit = centred / norms
    return np.clip(unit.T @ unit, -1.0, 1.0)
