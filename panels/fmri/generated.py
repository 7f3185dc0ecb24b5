"""Generated runs as layers, without Qt: a BrainWorld rollout opened next to the real run.

A generated NIfTI (``brainworld.generate``) carries a BIDS-derivative JSON sidecar saying which
real frame its first frame follows; the viewer uses it to put both runs on one clock. The user
keeps or discards whole chunks and crops the time range; each edit is a command object
(``panels.api.EditCommand``) pushed through the host's undo stack and autosaved per layer
(document ``fmri-generated:<path>``). A mask clears the voxels outside (or inside) a region,
a sphere or box in world mm or labels of an atlas file, to 0 or NaN; the view reads the layer
through ``MaskedVolume`` so the planes and the time course show it. ``write_layer`` saves
what was kept, masked, as a new NIfTI whose sidecar lists the edits.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.io import FormatError, extension_of
from engine.io.nifti import Volume
from panels.fmri.model import grid_voxels, labels_on

QC_SPECS = ("power_spectra", "fc_real", "fc_generated", "tsnr_real", "tsnr_generated")
MASK_FILLS = {"zero": 0.0, "nan": float("nan")}
MASK_CLEARS = ("outside", "inside")


def sidecar_of(path: Path) -> dict:
    """The JSON next to a NIfTI (same name, ``.json``), or {} when there is none/unreadable."""
    stem = path.name[:-len(extension_of(path))] if extension_of(path) else path.stem
    sidecar = path.with_name(stem + ".json")
    try:
        return json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return {}


def is_generated(path: Path) -> bool:
    """A BrainWorld generation (its sidecar names the generator)."""
    made_by = sidecar_of(Path(path)).get("GeneratedBy") or []
    return any("brainworld" in str(entry.get("Name", "")) for entry in made_by)


@dataclass
class GeneratedLayer:
    """One generated run: its volume, where it sits on the real run's clock, and the edits."""

    name: str
    path: Path
    volume: Volume
    first_frame: int = 0            # real frame index of generated frame 0
    chunk: int = 1                  # frames per chunk (the unit of keep/discard)
    sidecar: dict = field(default_factory=dict)
    discarded: set[int] = field(default_factory=set)
    crop: tuple[int, int] = (0, 0)  # generated frames [start, stop) kept
    masks: list[dict] = field(default_factory=list)  # ``checked_mask`` dicts, applied in order
    clearing: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    # ^ (voxels cleared by the masks, their fill values), both spatial_shape; None: no mask
    _regions: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, path: Path, volume: Volume) -> GeneratedLayer:
        sidecar = sidecar_of(path)
        details = sidecar.get("BrainWorld", {})
        name = f"{path.parent.parent.name}: {path.name}" if path.parent.name == "artifacts" \
            else path.name  # a run's artifact: several generations share a file name
        return cls(name=name, path=path, volume=volume,
                   first_frame=int(details.get("FirstGeneratedFrame", 0)),
                   chunk=max(1, int(details.get("ChunkFrames", 1))), sidecar=sidecar,
                   crop=(0, volume.n_frames))

    @property
    def document(self) -> str:
        return f"fmri-generated:{self.path}"

    @property
    def n_chunks(self) -> int:
        return -(-self.volume.n_frames // self.chunk)

    def chunk_of(self, real_t: int) -> int | None:
        g = real_t - self.first_frame
        return g // self.chunk if 0 <= g < self.volume.n_frames else None

    def frame_at(self, real_t: int) -> int | None:
        """The generated frame shown at real time ``real_t`` (None: none, or edited out)."""
        g = real_t - self.first_frame
        if not self.crop[0] <= g < self.crop[1] or g // self.chunk in self.discarded:
            return None
        return g

    def kept_frames(self) -> list[int]:
        return [g for g in range(self.volume.n_frames) if self.frame_at(g + self.first_frame)
                is not None]

    def set_masks(self, masks: list[dict]) -> None:
        """Replace the masks; the cleared voxels are worked out first, so a mask whose atlas
        cannot be read changes nothing."""
        clearing = None
        if masks:
            cleared = np.zeros(self.volume.spatial_shape, dtype=bool)
            fill = np.zeros(self.volume.spatial_shape, dtype=np.float32)
            for mask in masks:
                inside = self.region(mask)
                hit = ~inside if mask["clear"] == "outside" else inside
                cleared |= hit
                fill[hit] = MASK_FILLS[mask["fill"]]
            clearing = (cleared, fill)
        self.masks, self.clearing = list(masks), clearing

    def region(self, mask: dict) -> np.ndarray:
        """``region_inside`` of a mask, worked out once per mask (undo/redo reuse it)."""
        key = json.dumps(mask, sort_keys=True)
        if key not in self._regions:
            self._regions[key] = region_inside(self.volume, mask)
        return self._regions[key]

    def masked_frame(self, g: int) -> np.ndarray:
        """Generated frame ``g`` with the masks applied."""
        frame, clearing = self.volume.frame(g), self.clearing
        return frame if clearing is None else np.where(clearing[0], clearing[1], frame)

    def masked_course(self, ijk, course: np.ndarray) -> np.ndarray:
        """A voxel's generated time course as shown: its fill value where a mask clears it."""
        clearing = self.clearing
        if clearing is None or not clearing[0][tuple(int(v) for v in ijk)]:
            return course
        return np.full_like(course, clearing[1][tuple(int(v) for v in ijk)])

    def regenerate_request(self, real_run: Path, t1: Path | None) -> tuple[dict, dict]:
        """(params, inputs) of a ``brainworld.generate`` job that redoes this generation from
        the same checkpoint and starting chunk, conditioned on ``t1`` (None: the template)."""
        details = self.sidecar.get("BrainWorld", {})
        made_by = (self.sidecar.get("GeneratedBy") or [{}])[0]
        if "Checkpoint" not in made_by:
            raise ValueError(f"{self.name}: its sidecar names no checkpoint to regenerate from")
        params = {"start_frame": int(details.get("StartFrame", 0)),
                  "frames": int(details.get("GeneratedFrames", self.volume.n_frames)),
                  "sampling_steps": int(details.get("SamplingSteps", 100)),
                  "use_smri": bool(details.get("UseSMRI", True)),
                  "guidance": float(details.get("Guidance", 1.0))}
        inputs = {"checkpoint": str(made_by["Checkpoint"]), "fmri": str(real_run)}
        if t1 is not None:
            inputs["t1"] = str(t1)
        return params, inputs

    def qc_specs(self) -> dict[str, dict]:
        """The quality-check plots written next to the NIfTI by the generate run."""
        specs = {}
        for name in QC_SPECS:
            try:
                specs[name] = json.loads((self.path.parent / f"{name}.json").read_text())
            except (OSError, ValueError):
                continue
        return specs


class GeneratedLayers:
    """The generated layers of one viewer; ``listeners`` are called after every change."""

    def __init__(self) -> None:
        self.layers: list[GeneratedLayer] = []
        self.listeners: list[Callable[[], None]] = []

    def add(self, layer: GeneratedLayer) -> None:
        """Add ``layer`` in place of one of the same file. Edits name their layer, so a layer
        named like another (same file name, other folder) is numbered: an edit of one must
        never land on the other."""
        self.layers = [existing for existing in self.layers if existing.path != layer.path]
        taken, base, number = {existing.name for existing in self.layers}, layer.name, 2
        while layer.name in taken:
            layer.name, number = f"{base} ({number})", number + 1
        self.layers.append(layer)
        self._changed()

    def get(self, name: str) -> GeneratedLayer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(f"no generated layer {name!r}")

    def set_chunk_kept(self, name: str, chunk: int, kept: bool) -> None:
        layer = self.get(name)
        if not 0 <= chunk < layer.n_chunks:
            raise IndexError(f"{name}: chunk {chunk} outside 0..{layer.n_chunks - 1}")
        (layer.discarded.discard if kept else layer.discarded.add)(chunk)
        self._changed()

    def set_crop(self, name: str, start: int, stop: int) -> None:
        layer = self.get(name)
        if not 0 <= start < stop <= layer.volume.n_frames:
            raise ValueError(f"{name}: crop [{start}, {stop}) outside its "
                             f"{layer.volume.n_frames} frames")
        layer.crop = (start, stop)
        self._changed()

    def add_mask(self, name: str, mask: dict) -> None:
        layer = self.get(name)
        layer.set_masks([*layer.masks, checked_mask(mask)])
        self._changed()

    def remove_mask(self, name: str, mask: dict) -> None:
        """Take the last mask equal to ``mask`` off (the undo of ``add_mask``)."""
        layer = self.get(name)
        mask = checked_mask(mask)
        last = max((n for n, m in enumerate(layer.masks) if m == mask), default=None)
        if last is None:
            raise ValueError(f"{name}: no such mask to remove")
        layer.set_masks(layer.masks[:last] + layer.masks[last + 1:])
        self._changed()

    def close(self) -> None:
        for layer in self.layers:
            layer.volume.close()
        self.layers = []

    def _changed(self) -> None:
        for listener in list(self.listeners):
            listener()


# -- edit commands -----------------------------------------------------------------------------

@dataclass
class SetChunkKept:
    layer: str
    chunk: int
    kept: bool

    @property
    def label(self) -> str:
        return f"{'Keep' if self.kept else 'Discard'} chunk {self.chunk} of {self.layer}"

    def apply(self, model: GeneratedLayers) -> None:
        model.set_chunk_kept(self.layer, self.chunk, self.kept)

    def revert(self, model: GeneratedLayers) -> None:
        model.set_chunk_kept(self.layer, self.chunk, not self.kept)

    def to_json(self) -> dict:
        return {"type": "set_chunk_kept", "layer": self.layer, "chunk": self.chunk,
                "kept": self.kept}


@dataclass
class CropFrames:
    layer: str
    start: int
    stop: int
    previous: tuple[int, int]

    @property
    def label(self) -> str:
        return f"Crop {self.layer} to frames {self.start}-{self.stop - 1}"

    def apply(self, model: GeneratedLayers) -> None:
        model.set_crop(self.layer, self.start, self.stop)

    def revert(self, model: GeneratedLayers) -> None:
        model.set_crop(self.layer, *self.previous)

    def to_json(self) -> dict:
        return {"type": "crop_frames", "layer": self.layer, "start": self.start,
                "stop": self.stop, "previous": list(self.previous)}


@dataclass
class MaskRegion:
    layer: str
    mask: dict   # a ``checked_mask`` dict

    @property
    def label(self) -> str:
        return f"Mask {self.layer}: clear {self.mask['clear']} the {self.mask['shape']}"

    def apply(self, model: GeneratedLayers) -> None:
        model.add_mask(self.layer, self.mask)

    def revert(self, model: GeneratedLayers) -> None:
        model.remove_mask(self.layer, self.mask)

    def to_json(self) -> dict:
        return {"type": "mask_region", "layer": self.layer, "mask": self.mask}


def decode(data: dict) -> SetChunkKept | CropFrames | MaskRegion:
    """A saved edit back as a command (``host.restore_edits``)."""
    if data.get("type") == "mask_region":
        return MaskRegion(str(data["layer"]), checked_mask(data["mask"]))
    if data.get("type") == "set_chunk_kept":
        return SetChunkKept(str(data["layer"]), int(data["chunk"]), bool(data["kept"]))
    if data.get("type") == "crop_frames":
        start, stop = data["previous"]
        return CropFrames(str(data["layer"]), int(data["start"]), int(data["stop"]),
                          (int(start), int(stop)))
    raise ValueError(f"not an fMRI layer edit: {data.get('type')!r}")


# -- masks -------------------------------------------------------------------------------------

def checked_mask(mask: dict) -> dict:
    """A mask in its saved form, or a ValueError saying what is wrong with it:
    ``{"shape": "sphere", "centre_mm": [x, y, z], "radius_mm": r}``,
    ``{"shape": "box", "low_mm": [x, y, z], "high_mm": [x, y, z]}`` or
    ``{"shape": "labels", "path": atlas, "labels": [1, 4]}`` (none listed: every non-zero
    label), each with ``"clear"`` ("outside" or "inside" the region) and ``"fill"`` ("zero"
    or "nan")."""
    def point(key: str) -> list[float]:
        values = [float(v) for v in mask.get(key, ())]
        if len(values) != 3 or not np.isfinite(values).all():
            raise ValueError(f"mask {key} must be three finite numbers (mm)")
        return values

    shape, clear, fill = mask.get("shape"), mask.get("clear", "outside"), mask.get("fill", "zero")
    if clear not in MASK_CLEARS:
        raise ValueError(f"mask clear must be 'outside' or 'inside', not {clear!r}")
    if fill not in MASK_FILLS:
        raise ValueError(f"mask fill must be 'zero' or 'nan', not {fill!r}")
    if shape == "sphere":
        radius = float(mask.get("radius_mm", 0))
        if not radius > 0:
            raise ValueError(f"mask radius_mm must be > 0, not {radius}")
        region = {"centre_mm": point("centre_mm"), "radius_mm": radius}
    elif shape == "box":
        region = {"low_mm": point("low_mm"), "high_mm": point("high_mm")}
    elif shape == "labels":
        if not mask.get("path"):
            raise ValueError("a labels mask needs the path of its label image")
        region = {"path": str(mask["path"]),
                  "labels": sorted(int(v) for v in mask.get("labels") or ())}
    else:
        raise ValueError(f"mask shape must be 'sphere', 'box' or 'labels', not {shape!r}")
    return {"shape": shape, **region, "clear": clear, "fill": fill}


def region_inside(volume: Volume, mask: dict) -> np.ndarray:
    """Which voxels of ``volume`` lie in a mask's region (bool, ``spatial_shape``): voxel
    centres in world mm for a sphere or a box, nearest atlas labels for a label image."""
    if mask["shape"] == "labels":
        from engine.io.nifti import open_volume

        try:
            atlas = open_volume(mask["path"], index=False)
        except FormatError as exc:
            raise ValueError(f"the mask's label image: {exc}") from None
        try:
            values = labels_on(volume, atlas)
        finally:
            atlas.close()
        return np.isin(values, mask["labels"]) if mask["labels"] else values != 0
    world = volume.voxel_to_world(grid_voxels(volume.spatial_shape))
    if mask["shape"] == "sphere":
        inside = (np.linalg.norm(world - np.asarray(mask["centre_mm"]), axis=1)
                  <= mask["radius_mm"])
    else:
        corners = np.asarray([mask["low_mm"], mask["high_mm"]])
        inside = ((world >= corners.min(0)) & (world <= corners.max(0))).all(1)
    return inside.reshape(volume.spatial_shape)


class MaskedVolume:
    """A layer's volume as the viewer shows it: frames and slices come through the layer's
    masks (read at each call, so an edit shows on the next redraw); the rest is the
    volume's own."""

    def __init__(self, layer: GeneratedLayer) -> None:
        self.layer = layer

    def __getattr__(self, name: str):
        return getattr(self.layer.volume, name)

    def frame(self, t: int = 0) -> np.ndarray:
        return self.layer.masked_frame(t)

    def slice(self, axis: int, index: int, t: int = 0) -> np.ndarray:
        image, clearing = self.layer.volume.slice(axis, index, t), self.layer.clearing
        if clearing is None:
            return image
        where = tuple(index if a == axis else slice(None) for a in range(3))
        return np.where(clearing[0][where], clearing[1][where], image).astype(np.float32)


def write_layer(layer: GeneratedLayer, target: Path) -> Path:
    """The kept frames, masked, as a 4D NIfTI in the layer's space, with a sidecar recording
    the edits (which generated frames were kept, which masks were applied)."""
    import gzip

    import nibabel as nib

    from engine.atomic import write_atomic

    kept = layer.kept_frames()
    if not kept:
        raise ValueError(f"{layer.name}: every frame is discarded or cropped away")
    data = np.stack([layer.masked_frame(g) for g in kept], axis=-1)
    image = nib.Nifti1Image(data, layer.volume.affine, header=layer.volume.header.copy())
    image.set_data_dtype(np.float32)
    image.header.set_slope_inter(1.0, 0.0)
    payload = image.to_bytes()
    target = Path(target)
    if extension_of(target) == ".nii.gz":
        payload = gzip.compress(payload, compresslevel=6)
    elif extension_of(target) != ".nii":
        raise ValueError(f"{target}: save as .nii or .nii.gz")
    write_atomic(target, lambda handle: handle.write(payload))
    sidecar = dict(layer.sidecar)
    sidecar["Edits"] = {"KeptGeneratedFrames": kept, "Masks": layer.masks,
                        "Source": str(layer.path)}
    stem = target.name[:-len(extension_of(target))]
    text = json.dumps(sidecar, indent=2).encode()
    write_atomic(target.with_name(stem + ".json"), lambda handle: handle.write(text))
    return target
