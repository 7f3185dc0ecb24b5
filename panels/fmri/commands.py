"""The fMRI viewer's actions as commands (``studio.commands``): open images, overlays and
generated runs, move the cursor and the clock, display options, ROIs, the generated layers'
edits (keep or discard a chunk, crop, mask a region), saving, regenerating and exporting.

Elements are named as the viewer shows them: the cursor by the base image's voxel (the info
line's ``voxel (i, j, k)``) or a world point in mm, time by frame, generated layers by the
name in the layer box, chunks by number, quality-check plots and colour maps by name; so a
logged command means the same on another file with the same names. Each layer edit is one
``SetChunkKept``, ``CropFrames`` or ``MaskRegion`` pushed through ``host.push_edit`` (undo,
redo, autosave per layer). The functions act on an ``FmriState``: the model, the generated
layers, the display options and the host; it tells its listeners what changed and the view
redraws. Only exporting and the 3-D view need the panel's window: tests build a state
without one and call ``registry.run``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from engine.io import FormatError
from engine.io.nifti import Volume, bids_runs, open_volume
from panels.fmri.generated import (
    CropFrames,
    GeneratedLayer,
    GeneratedLayers,
    MaskedVolume,
    MaskRegion,
    SetChunkKept,
    checked_mask,
    decode,
    is_generated,
    write_layer,
)
from panels.fmri.model import OVERLAY_COLORMAPS, ViewerModel
from panels.widgets.panel_state import forget_edits
from studio.commands import Command, CommandArgs, CommandRegistry, Refusal

SCOPE = "fmri"
GENERATE_METHOD = "brainworld.generate"
EDIT_ERRORS = (ValueError, KeyError, IndexError)

Triple = tuple[float, float, float]
Colormap = Literal[OVERLAY_COLORMAPS]  # type: ignore[valid-type]


@dataclass(frozen=True)
class OverlayStyle:
    """How the overlay is drawn: |value| below ``threshold`` is transparent, the colour map
    spans ``threshold`` to ``vmax``, at ``opacity`` (0-1)."""

    threshold: float = 0.0
    vmax: float = 1.0
    colormap: str = "inferno"
    opacity: float = 0.7


def conversion_cache() -> Path:
    """Where large .nii.gz files are decompressed once (the workspace's cache, reused)."""
    from engine.workspace import default_workspace

    return default_workspace() / "cache" / "nifti"


def robust_range(values: np.ndarray) -> tuple[float, float]:
    """The 2nd-98th percentile of the finite values (a sensible first contrast)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    sample = finite if finite.size <= 200_000 else finite[:: finite.size // 200_000]
    low, high = np.percentile(sample, [2, 98])
    return float(low), float(high if high > low else low + 1)


class FmriState:
    """What the fMRI commands act on. ``listeners`` hear one word per change ("base",
    "overlay", "layers", "cursor", "time", "radiological", "lightbox", "style", "range",
    "rois", "qc", "playing"); a layer edit reaches ``layers.listeners``. ``view`` (the
    ``FmriPanel``) is needed only by the commands that draw; ``submit`` sends a job (the
    view's ``PanelJobs`` shows its progress; without a view, the host's)."""

    def __init__(self, host: Any = None, view: Any = None) -> None:
        self.host = host
        self.view = view
        self.model = ViewerModel()
        self.layers = GeneratedLayers()
        self.active: GeneratedLayer | None = None
        self.radiological = False
        self.lightbox = False
        self.style = OverlayStyle()
        self.display_range: tuple[float, float] = (0.0, 1.0)
        self.qc_plot = ""
        self.playing = False
        self.fps = 10
        self.opened: str | None = None          # what made the base: a file or BIDS folder
        self.overlay_opened: str | None = None  # a file added as the overlay (not by BIDS)
        self.nan_as_zero = False                # how the open files were read
        self.roi_sources: list[dict] = []       # how each ROI was added, in order
        self.listeners: list[Callable[[str], None]] = []
        self.submit: Callable[[str, dict, dict, str], None] | None = None

    def emit(self, what: str) -> None:
        for listener in list(self.listeners):
            listener(what)

    def file_name(self) -> str:
        base = self.model.base
        return Path(base.path).name if base is not None else "nothing"

    def push(self, edit: SetChunkKept | CropFrames | MaskRegion) -> None:
        """Apply a layer edit through its document's history (the window's undo, autosave);
        one that does not fit is refused and changes nothing."""
        layer = self.layers.get(edit.layer)
        try:
            if self.host is not None and callable(getattr(self.host, "push_edit", None)):
                self.host.push_edit(layer.document, edit, self.layers)
            else:
                edit.apply(self.layers)
        except EDIT_ERRORS as exc:
            raise Refusal(str(exc.args[0]) if exc.args else str(exc)) from None

    def forget(self, dropped: list[GeneratedLayer]) -> None:
        """Dropped layers' steps leave the window's history (their undo would find no layer);
        their autosaved edits stay, replayed when the run is opened again."""
        forget_edits(self.host, *(layer.document for layer in dropped))

    def close_layers(self) -> None:
        dropped = list(self.layers.layers)
        with self.model.lock:
            self.model.set_compare(None)
            self.model.clock_frames = 0
            self.layers.close()
        self.forget(dropped)
        self.active = None
        self.qc_plot = ""
        self.emit("layers")

    def shutdown(self) -> None:
        dropped = list(self.layers.layers)
        with self.model.lock:
            self.layers.close()
            self.model.close()
        self.forget(dropped)
        self.active = None

    def set_time_quietly(self, frame: int) -> None:
        """The clock moved by playback (not a user's command): clipped, told to listeners."""
        if self.model.base is None:
            return
        self.model.t = int(np.clip(frame, 0, self.model.n_frames - 1))
        self.emit("time")

    def set_cursor_quietly(self, display) -> None:
        """The crosshair followed a drag still in progress (its end runs the command)."""
        if self.model.base is None:
            return
        self.model.set_cursor(display)
        self.emit("cursor")

    def compare_frame(self) -> int | None:
        """The active generated layer's frame at the clock (None: none there)."""
        return None if self.active is None else self.active.frame_at(self.model.t)


# -- arguments ---------------------------------------------------------------------------------


class OpenArgs(CommandArgs):
    path: str = Field(description="a NIfTI file (.nii, .nii.gz) or a BIDS folder")
    nan_as_zero: bool = Field(False, description="show NaN voxels as 0 (else such a file is "
                                                 "refused)")


class PathArgs(CommandArgs):
    path: str = Field(description="the file's path")


class CursorArgs(CommandArgs):
    voxel: tuple[int, int, int] | None = Field(
        None, description="the base image's voxel (i, j, k), as the info line shows it")
    mm: Triple | None = Field(None, description="or a world point (x, y, z) in mm: the "
                                                "nearest voxel")

    @model_validator(mode="after")
    def _one_place(self) -> CursorArgs:
        if (self.voxel is None) == (self.mm is None):
            raise ValueError("give the voxel or the point in mm (one of them)")
        return self


class FrameArgs(CommandArgs):
    frame: int = Field(ge=0, description="the time point: frame number, from 0")


class SwitchArgs(CommandArgs):
    on: bool = Field(True, description="on or off")


class PlayArgs(CommandArgs):
    on: bool = Field(True, description="play (off: pause)")
    fps: int | None = Field(None, ge=1, le=60, description="frames a second (default: as set)")


class StyleArgs(CommandArgs):
    threshold: float | None = Field(None, ge=0, description="|value| below it is transparent")
    vmax: float | None = Field(None, description="the value at the top of the colour map")
    colormap: Colormap | None = Field(None, description="the overlay's colour map")
    opacity: float | None = Field(None, ge=0, le=1, description="0 (clear) to 1 (opaque)")


class RangeArgs(CommandArgs):
    low: float = Field(description="the base image's value drawn black")
    high: float = Field(description="the value drawn white")

    @model_validator(mode="after")
    def _ordered(self) -> RangeArgs:
        if not (np.isfinite(self.low) and np.isfinite(self.high) and self.high > self.low):
            raise ValueError("high must be a finite number above low")
        return self


class SphereArgs(CommandArgs):
    radius_mm: float = Field(6.0, gt=0, le=50, description="the sphere's radius in mm")
    centre_mm: Triple | None = Field(None, description="its centre (x, y, z) in world mm "
                                                       "(default: the cursor)")


class QcArgs(CommandArgs):
    name: str = Field(description="the quality-check plot, as the list names it")


class LayerArgs(CommandArgs):
    layer: str = Field(description="the generated layer's name, as the layer box shows it")


class ChunkArgs(CommandArgs):
    layer: str | None = Field(None, description="the generated layer (default: the one shown)")
    chunk: int | None = Field(None, ge=0, description="the chunk number, from 0 (default: "
                                                      "the one under the clock)")


class CropArgs(CommandArgs):
    layer: str | None = Field(None, description="the generated layer (default: the one shown)")
    start: int = Field(ge=0, description="first generated frame kept")
    stop: int = Field(ge=1, description="one past the last generated frame kept")


class MaskArgs(CommandArgs):
    layer: str | None = Field(None, description="the generated layer (default: the one shown)")
    shape: Literal["sphere", "box", "labels"] = Field(
        "sphere", description="a sphere, a box (half-side radius_mm) or an atlas's labels")
    radius_mm: float = Field(6.0, gt=0, description="sphere radius or box half-side, mm")
    centre_mm: Triple | None = Field(None, description="the region's centre in world mm "
                                                       "(default: the cursor)")
    path: str | None = Field(None, description="the label image (shape labels)")
    labels: list[int] = Field(default_factory=list, description="labels of the image "
                                                                "(default: every one)")
    clear: Literal["outside", "inside"] = Field("outside", description="which voxels clear")
    fill: Literal["zero", "nan"] = Field("zero", description="cleared voxels become 0 or NaN")


class SaveLayerArgs(CommandArgs):
    path: str = Field(description="the new NIfTI file (.nii or .nii.gz)")
    layer: str | None = Field(None, description="the generated layer (default: the one shown)")


class RegenerateArgs(CommandArgs):
    layer: str | None = Field(None, description="the generated layer (default: the one shown)")
    t1: str | None = Field(None, description="the anatomy (T1) to condition on (default: the "
                                             "template)")


class ExportArgs(CommandArgs):
    path: str = Field(description="the figure's file: .png, .svg, .pdf (or .mp4: the movie)")
    dpi: int = Field(192, ge=36, le=1200, description="resolution of a PNG")
    caption: bool = Field(False, description="the information line under the figure")


class MovieArgs(CommandArgs):
    path: str = Field(description="the movie's file (.mp4)")
    fps: int | None = Field(None, ge=1, le=60, description="frames a second (default: the "
                                                           "playback speed)")


# -- lookups: names the user sees -> the state's objects ----------------------------------------


def _base(state: FmriState) -> Volume:
    if state.model.base is None:
        raise Refusal("no image is open: open a NIfTI file or a BIDS folder first")
    return state.model.base


def _layer(state: FmriState, name: str | None) -> GeneratedLayer:
    if name is None:
        if state.active is None:
            raise Refusal("no generated layer is open: open a generated run over the real one")
        return state.active
    for layer in state.layers.layers:
        if layer.name == name:
            return layer
    names = [layer.name for layer in state.layers.layers]
    raise Refusal(f"no generated layer named {name!r}" + (
        f" (layers: {', '.join(names)})" if names else " (none is open)"))


def _existing(path: str) -> Path:
    found = Path(path).expanduser()
    if not found.exists():
        raise Refusal(f"{found}: no such file or folder")
    return found


def _voxel_display(state: FmriState, voxel: tuple[int, int, int]) -> np.ndarray:
    """A base-image voxel (file indices) as display indices, refused outside the image."""
    base = _base(state)
    shape = base.spatial_shape
    if not all(0 <= v < n for v, n in zip(voxel, shape, strict=True)):
        raise Refusal(f"voxel {tuple(voxel)} is outside {state.file_name()} (its voxels: "
                      f"0-{shape[0] - 1}, 0-{shape[1] - 1}, 0-{shape[2] - 1})")
    return state.model.grid.to_display(np.asarray(voxel, dtype=int))


def _mm_display(state: FmriState, mm: Triple) -> np.ndarray:
    _base(state)
    display = np.rint(state.model.grid.from_world(np.asarray(mm, dtype=float))).astype(int)
    if not ((display >= 0) & (display < np.asarray(state.model.grid.shape))).all():
        raise Refusal(f"({mm[0]:g}, {mm[1]:g}, {mm[2]:g}) mm is outside {state.file_name()}")
    return display


def _read(path: Path, nan_as_zero: bool) -> Volume:
    try:
        return open_volume(path, convert_dir=conversion_cache(),
                           nan="zero" if nan_as_zero else "error")
    except (FormatError, ValueError) as exc:
        raise Refusal(str(exc)) from None


def _view(state: FmriState, what: str) -> Any:
    if state.view is None:
        raise Refusal(f"cannot {what} without the panel's window")
    return state.view


# -- opening -----------------------------------------------------------------------------------


def open_image(state: FmriState, args: OpenArgs) -> str:
    """A NIfTI file or a BIDS folder. A 4-D file opened over a 3-D image becomes its overlay
    (drop a bold run on a T1); a BrainWorld generation over a real run, a generated layer;
    anything else replaces what is shown."""
    path = _existing(args.path)
    if path.is_file() and is_generated(path) and state.model.functional is not None:
        return _open_generated(state, path, args.nan_as_zero)
    if path.is_dir():
        return _open_bids(state, path, args.nan_as_zero)
    volume = _read(path, args.nan_as_zero)
    base = state.model.base
    if base is not None and base.n_frames == 1 and volume.n_frames > 1:
        _set_overlay(state, volume, str(path))
        return f"{path.name}: the overlay of {state.file_name()}"
    _set_base(state, volume, str(path), args.nan_as_zero)
    return f"Opened {path.name}"


def add_overlay(state: FmriState, args: OpenArgs) -> str:
    """A NIfTI drawn over the open image (resampled through both affines)."""
    if state.model.base is None:
        return open_image(state, args)
    path = _existing(args.path)
    if path.is_dir():
        raise Refusal(f"{path}: an overlay is one NIfTI file, not a folder")
    _set_overlay(state, _read(path, args.nan_as_zero), str(path))
    return f"{path.name}: the overlay of {state.file_name()}"


def _open_bids(state: FmriState, root: Path, nan_as_zero: bool) -> str:
    """The first subject's T1w with its first bold run over it (both read before either is
    shown, so a bad run leaves the view as it was)."""
    try:
        runs = bids_runs(root)
    except (FormatError, ValueError) as exc:
        raise Refusal(str(exc)) from None
    run = next((r for r in runs if r.anat and r.bold), runs[0])
    first = _read(run.anat[0] if run.anat else run.bold[0], nan_as_zero)
    bold = None
    if run.anat and run.bold:
        try:
            bold = _read(run.bold[0], nan_as_zero)
        except Refusal:
            first.close()
            raise
        bold.tr_s = run.tr_s[0] if run.tr_s[0] is not None else bold.tr_s
    _set_base(state, first, str(root), nan_as_zero)
    if bold is not None:
        _set_overlay(state, bold, None)
    return f"Opened the BIDS folder {root.name}"


def _set_base(state: FmriState, volume: Volume, opened: str, nan_as_zero: bool) -> None:
    state.playing = False
    state.close_layers()
    with state.model.lock:
        state.model.set_base(volume)
    state.display_range = robust_range(volume.frame(0))
    state.opened, state.overlay_opened, state.nan_as_zero = opened, None, nan_as_zero
    state.roi_sources = []
    state.emit("playing")
    state.emit("base")


def _set_overlay(state: FmriState, volume: Volume, opened: str | None) -> None:
    with state.model.lock:
        state.model.set_overlay(volume)
    magnitude = np.abs(volume.frame(0))
    low, _ = robust_range(magnitude)
    high = float(magnitude.max()) if magnitude.max() > low else low + 1.0
    state.overlay_opened = opened
    state.roi_sources = []
    state.style = replace(state.style, threshold=float(low), vmax=high)
    state.emit("overlay")
    state.emit("style")


def open_generated(state: FmriState, args: OpenArgs) -> str:
    """A generated run beside the real one: second row of planes, same cursor and clock;
    its autosaved edits come back."""
    return _open_generated(state, _existing(args.path), args.nan_as_zero)


def _open_generated(state: FmriState, path: Path, nan_as_zero: bool) -> str:
    if state.model.functional is None:
        raise Refusal("open the real 4-D run first, then the generated one")
    layer = GeneratedLayer.open(path, _read(path, nan_as_zero))
    replaced = [existing for existing in state.layers.layers if existing.path == path]
    for old in replaced:
        old.volume.close()
    state.forget(replaced)  # its saved edits are replayed onto the new layer next
    state.layers.add(layer)
    said = f"Opened the generated run {layer.name}"
    restore = getattr(state.host, "restore_edits", None)
    if callable(restore):
        try:  # the saved edits are this file's, whatever name the layer had then
            replayed = restore(layer.document, state.layers,
                               lambda data: decode({**data, "layer": layer.name}))
            said += f"; {replayed} saved edit(s) replayed" if replayed else ""
        except EDIT_ERRORS as exc:  # e.g. a mask's atlas is gone
            state.host.show_error("Some edits of the generated run were not replayed",
                                  str(exc))
    _activate(state, layer)
    return said


def _activate(state: FmriState, layer: GeneratedLayer) -> None:
    state.active = layer
    with state.model.lock:
        state.model.set_compare(MaskedVolume(layer))
        state.model.clock_frames = layer.first_frame + layer.volume.n_frames
    specs = layer.qc_specs()
    state.qc_plot = next(iter(specs), "")
    state.emit("layers")


def select_layer(state: FmriState, args: LayerArgs) -> bool:
    layer = _layer(state, args.layer)
    if layer is not state.active:
        _activate(state, layer)
    return True


# -- where and when ----------------------------------------------------------------------------


def set_cursor(state: FmriState, args: CursorArgs) -> bool:
    display = _voxel_display(state, args.voxel) if args.voxel is not None else \
        _mm_display(state, args.mm)
    state.model.set_cursor(display)
    state.emit("cursor")
    return True


def set_time(state: FmriState, args: FrameArgs) -> bool:
    _base(state)
    if args.frame >= state.model.n_frames:
        raise Refusal(f"frame {args.frame} is past the end: {state.file_name()} has frames "
                      f"0-{state.model.n_frames - 1}")
    state.model.t = args.frame
    state.emit("time")
    return True


def play(state: FmriState, args: PlayArgs) -> bool:
    _base(state)
    state.fps = args.fps or state.fps
    state.playing = args.on and state.model.n_frames > 1
    state.emit("playing")
    return True


# -- how it is shown ---------------------------------------------------------------------------


def set_radiological(state: FmriState, args: SwitchArgs) -> bool:
    state.radiological = args.on
    state.emit("radiological")
    return True


def set_lightbox(state: FmriState, args: SwitchArgs) -> bool:
    state.lightbox = args.on
    state.emit("lightbox")
    return True


def show_3d(state: FmriState, args: SwitchArgs) -> bool:
    problem = _view(state, "show the 3-D rendering").show_3d(args.on)
    if problem:
        raise Refusal(f"the 3-D view is unavailable here: {problem}")
    return True


def style_overlay(state: FmriState, args: StyleArgs) -> bool:
    changes = args.model_dump(exclude_none=True)
    if not changes:
        raise Refusal("nothing to change: give threshold, vmax, colormap or opacity")
    state.style = replace(state.style, **changes)
    state.emit("style")
    return True


def set_display_range(state: FmriState, args: RangeArgs) -> bool:
    _base(state)
    state.display_range = (args.low, args.high)
    state.emit("range")
    return True


def show_qc_plot(state: FmriState, args: QcArgs) -> bool:
    layer = _layer(state, None)
    names = list(layer.qc_specs())
    if args.name not in names:
        raise Refusal(f"{layer.name} has no quality-check plot {args.name!r}" + (
            f" (its plots: {', '.join(names)})" if names else " (its run wrote none)"))
    state.qc_plot = args.name
    state.emit("qc")
    return True


# -- ROIs --------------------------------------------------------------------------------------


def add_sphere_roi(state: FmriState, args: SphereArgs) -> str:
    _base(state)
    try:
        with state.model.lock:
            roi = state.model.add_sphere(args.radius_mm, args.centre_mm)
    except ValueError as exc:
        raise Refusal(str(exc)) from None
    state.roi_sources.append({"sphere": {"radius_mm": roi.radius_mm,
                                         "centre_mm": list(roi.centre_mm)}})
    state.emit("rois")
    return f"Added the ROI {roi.name}"


def add_label_rois(state: FmriState, args: PathArgs) -> str:
    """One ROI per label of an atlas (resampled onto the functional run)."""
    _base(state)
    path = _existing(args.path)
    try:
        labels = open_volume(path, index=False)
        try:
            with state.model.lock:
                rois = state.model.add_label_image(labels)
        finally:
            labels.close()
    except (FormatError, ValueError) as exc:
        raise Refusal(str(exc)) from None
    state.roi_sources.append({"labels": str(path)})
    state.emit("rois")
    return f"Added {len(rois)} ROI(s) from {path.name}"


# -- generated layers' edits -------------------------------------------------------------------


def _chunk(state: FmriState, args: ChunkArgs) -> tuple[GeneratedLayer, int]:
    layer = _layer(state, args.layer)
    chunk = layer.chunk_of(state.model.t) if args.chunk is None else args.chunk
    if chunk is None:
        raise Refusal(f"no generated chunk at frame {state.model.t}: move the clock into the "
                      "generated frames first")
    if not 0 <= chunk < layer.n_chunks:
        raise Refusal(f"{layer.name} has no chunk {chunk} (chunks 0-{layer.n_chunks - 1})")
    return layer, chunk


def discard_chunk(state: FmriState, args: ChunkArgs) -> bool:
    layer, chunk = _chunk(state, args)
    if chunk in layer.discarded:
        raise Refusal(f"chunk {chunk} of {layer.name} is discarded already")
    state.push(SetChunkKept(layer.name, chunk, False))
    return True


def keep_chunk(state: FmriState, args: ChunkArgs) -> bool:
    layer, chunk = _chunk(state, args)
    if chunk not in layer.discarded:
        raise Refusal(f"chunk {chunk} of {layer.name} is kept already")
    state.push(SetChunkKept(layer.name, chunk, True))
    return True


def crop_frames(state: FmriState, args: CropArgs) -> bool:
    layer = _layer(state, args.layer)
    frames = layer.volume.n_frames
    if not args.start < args.stop <= frames:
        raise Refusal(f"frames {args.start} to {args.stop} are outside the {frames} generated "
                      f"frames of {layer.name}")
    state.push(CropFrames(layer.name, args.start, args.stop, layer.crop))
    return True


def mask_region(state: FmriState, args: MaskArgs) -> bool:
    """Clear the voxels outside (or inside) a region of a layer, to 0 or NaN: a sphere or a
    box of ``radius_mm`` (centred on the cursor unless given), or labels of an atlas."""
    layer = _layer(state, args.layer)
    if args.shape == "labels":
        if not args.path:
            raise Refusal("a labels mask needs the path of its label image")
        region: dict = {"path": str(_existing(args.path)), "labels": args.labels}
    else:
        centre = list(args.centre_mm) if args.centre_mm is not None else \
            state.model.cursor_world().tolist() if state.model.grid is not None else None
        if centre is None:
            raise Refusal("no cursor to centre the region on: give centre_mm")
        r = args.radius_mm
        region = {"centre_mm": centre, "radius_mm": r} if args.shape == "sphere" else \
            {"low_mm": [c - r for c in centre], "high_mm": [c + r for c in centre]}
    try:
        mask = checked_mask({"shape": args.shape, **region, "clear": args.clear,
                             "fill": args.fill})
        inside = layer.region(mask)
    except ValueError as exc:  # checked before the undo stack applies it
        raise Refusal(str(exc)) from None
    if inside.all() if mask["clear"] == "outside" else not inside.any():
        raise Refusal("the region clears no voxel of the layer")
    state.push(MaskRegion(layer.name, mask))
    return True


def save_layer(state: FmriState, args: SaveLayerArgs) -> str:
    """The kept frames, masked, as a new NIfTI with a sidecar listing the edits."""
    layer = _layer(state, args.layer)
    try:
        written = write_layer(layer, Path(args.path))
    except (OSError, ValueError) as exc:
        raise Refusal(f"{args.path}: {exc}" if args.path not in str(exc) else str(exc)) \
            from None
    return f"Saved the kept frames of {layer.name} to {written}"


def regenerate_layer(state: FmriState, args: RegenerateArgs) -> bool:
    """Submit ``brainworld.generate`` again from the layer's checkpoint and chunk, on another
    anatomy; the result opens as a new layer."""
    layer, real = _layer(state, args.layer), state.model.functional
    if real is None:
        raise Refusal("open the real 4-D run the layer was generated from")
    t1 = None if args.t1 is None else _existing(args.t1)
    try:
        params, inputs = layer.regenerate_request(real.path, t1)
    except ValueError as exc:
        raise Refusal(str(exc)) from None
    label = f"regenerate {layer.name}" + (f" with {t1.name}" if t1 is not None else "")
    if state.submit is not None:  # the panel's job line says queued, running, done
        state.submit(GENERATE_METHOD, params, inputs, label)
    elif callable(getattr(state.host, "submit_job", None)):
        state.host.submit_job(GENERATE_METHOD, params, inputs)
    else:
        raise Refusal("regenerating needs Studio with the engine running")
    return True


# -- export ------------------------------------------------------------------------------------


def export_figure(state: FmriState, args: ExportArgs) -> str:
    _base(state)
    view = _view(state, "export the figure")
    try:
        written = view.export_figure(args.path, args.dpi, args.caption)
    except (OSError, ValueError, RuntimeError) as exc:
        raise Refusal(f"{args.path}: {exc}" if args.path not in str(exc) else str(exc)) \
            from None
    return f"Exported {written}"


def export_movie(state: FmriState, args: MovieArgs) -> str:
    _base(state)
    if Path(args.path).suffix.lower() != ".mp4":
        raise Refusal(f"{args.path}: a movie is written as .mp4")
    view = _view(state, "export the movie")
    try:
        written = view.export_movie(args.path, args.fps)
    except (OSError, ValueError, RuntimeError) as exc:
        raise Refusal(f"{args.path}: {exc}" if args.path not in str(exc) else str(exc)) \
            from None
    return f"Exported {written}"


# -- the registry ------------------------------------------------------------------------------

COMMANDS = [
    Command("fmri.open_image", "Open a NIfTI image or BIDS folder", "Show a NIfTI file or a "
            "BIDS folder (a 4-D file over a 3-D image becomes its overlay).", open_image,
            OpenArgs, menu="fMRI/Open…"),
    Command("fmri.add_overlay", "Add an overlay", "Draw a NIfTI image over the open one "
            "(resampled through both affines).", add_overlay, OpenArgs,
            menu="fMRI/Add overlay…"),
    Command("fmri.open_generated", "Open a generated run", "A BrainWorld generation beside "
            "the real run: same cursor and clock, editable.", open_generated, OpenArgs),
    Command("fmri.select_layer", "Show a generated layer", "Show another of the open "
            "generated runs in the second row.", select_layer, LayerArgs),
    Command("fmri.set_cursor", "Move the cursor", "Put the crosshair on a voxel of the base "
            "image, or the voxel nearest a point in mm.", set_cursor, CursorArgs),
    Command("fmri.set_time", "Go to a time point", "Show a frame of the time axis.",
            set_time, FrameArgs),
    Command("fmri.play", "Play or pause the time axis", "Play the frames in a loop at fps "
            "frames a second, or pause.", play, PlayArgs),
    Command("fmri.set_radiological", "Radiological orientation", "Show the subject's left on "
            "the right (off: neurological).", set_radiological, SwitchArgs),
    Command("fmri.set_lightbox", "Lightbox", "Axial slices through the volume as a mosaic in "
            "place of the three planes.", set_lightbox, SwitchArgs),
    Command("fmri.show_3d", "3-D volume rendering", "The current frame rendered in 3-D in "
            "place of the slices (needs OpenGL).", show_3d, SwitchArgs),
    Command("fmri.style_overlay", "Style the overlay", "The overlay's threshold, top of the "
            "scale, colour map and opacity.", style_overlay, StyleArgs),
    Command("fmri.set_display_range", "Set the display range", "The base image's values "
            "drawn black and white.", set_display_range, RangeArgs),
    Command("fmri.show_qc_plot", "Show a quality-check plot", "One of the generated run's "
            "quality-check plots (power spectra, FC, tSNR).", show_qc_plot, QcArgs),
    Command("fmri.add_sphere_roi", "Add a sphere ROI", "A sphere of the functional run's "
            "voxels at the cursor (or a point): its time course and connectivity.",
            add_sphere_roi, SphereArgs),
    Command("fmri.add_label_rois", "Add ROIs from a label image", "One ROI per label of an "
            "atlas, resampled onto the functional run.", add_label_rois, PathArgs,
            menu="fMRI/Label image…"),
    Command("fmri.discard_chunk", "Discard a generated chunk", "Leave a chunk of a generated "
            "layer out (the one under the clock by default).", discard_chunk, ChunkArgs,
            undoable=True),
    Command("fmri.keep_chunk", "Keep a generated chunk", "Take a discarded chunk of a "
            "generated layer back.", keep_chunk, ChunkArgs, undoable=True),
    Command("fmri.crop_frames", "Crop a generated layer", "Keep generated frames start to "
            "stop - 1 of a layer.", crop_frames, CropArgs, undoable=True),
    Command("fmri.mask_region", "Mask a region of a generated layer", "Clear the voxels "
            "outside (or inside) a sphere, box or atlas labels, to 0 or NaN.", mask_region,
            MaskArgs, undoable=True),
    Command("fmri.save_layer", "Save a generated layer's kept frames", "Write the kept, "
            "masked frames as a new NIfTI with its edits in the sidecar.", save_layer,
            SaveLayerArgs, menu="fMRI/Save kept frames…"),
    Command("fmri.regenerate_layer", "Regenerate with another anatomy", "Run "
            "brainworld.generate again from the layer's checkpoint and chunk on another T1.",
            regenerate_layer, RegenerateArgs),
    Command("fmri.export_figure", "Export the fMRI figure", "Slices, time course, FC matrix "
            "and QC plot as PNG, SVG or PDF with provenance (.mp4: the movie).",
            export_figure, ExportArgs, menu="fMRI/Export…"),
    Command("fmri.export_movie", "Export the time axis as a movie", "Every frame as drawn, "
            "to an H.264 MP4.", export_movie, MovieArgs),
]


def register(registry: CommandRegistry) -> CommandRegistry:
    """Add the fMRI commands (again, for a panel rebuilt in the same window)."""
    return registry.add_all(COMMANDS)
