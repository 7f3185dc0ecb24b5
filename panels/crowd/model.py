"""The crowd previewer's state without Qt: named clips played in step, one frame index for all,
and trajectories to overlay.

Clips (coarse render, generated, real footage; any number) are (T, H, W, 3) uint8 arrays read
through ``engine.io.crowd`` (videos, frame folders, ``.npy`` frame stacks from runs). Playback
runs on the longest clip; a shorter clip holds its last frame. ``composite`` lays the current
frames side by side at one height, which is what the view shows and exports. Trajectories
(``Tracks``) are drawn over a clip when they are in its pixels (MOT), and otherwise in a
top-down map of their own extent, each with its id and a trail of the last few samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.io.crowd import Tracks, read_clip, read_tracks
from panels.lab.model import Events

TRAIL_SAMPLES = 8
MAP_SIZE_PX = 256
MAP_MARGIN_PX = 12


@dataclass
class Marker:
    """One pedestrian to draw: its id, position (x, y pixels in the view) and its trail."""

    id: int
    x: float
    y: float
    trail: np.ndarray  # (K, 2) pixels, oldest first


class CrowdModel:
    def __init__(self) -> None:
        self.clips: dict[str, np.ndarray] = {}
        self.fps = 10.0
        self.frame = 0
        self.tracks: Tracks | None = None
        self.events = Events("clips", "frame", "tracks")

    # -- loading ---------------------------------------------------------------------------

    def load_clip(self, name: str, path: str | Path) -> None:
        path = Path(path)
        if path.suffix.lower() == ".npy":
            frames = np.load(path, mmap_mode="r")
            if frames.ndim != 4 or frames.shape[-1] != 3:
                raise ValueError(f"{path}: expected frames (T, H, W, 3), found "
                                 f"{tuple(frames.shape)}")
            self.add_clip(name, np.asarray(frames, dtype=np.uint8))
            return
        frames, info = read_clip(path)
        if info.fps:
            self.fps = info.fps
        self.add_clip(name, frames)

    def add_clip(self, name: str, frames: np.ndarray) -> None:
        self.clips[name] = np.asarray(frames, dtype=np.uint8)
        self.frame = min(self.frame, self.frame_count - 1)
        self.events.emit("clips", names=list(self.clips))

    def remove_clip(self, name: str) -> None:
        self.clips.pop(name, None)
        self.frame = max(0, min(self.frame, self.frame_count - 1))
        self.events.emit("clips", names=list(self.clips))

    def load_tracks(self, path: str | Path) -> None:
        self.tracks = read_tracks(path)
        self.events.emit("tracks", count=len(self.tracks.ids))

    # -- playback --------------------------------------------------------------------------

    @property
    def frame_count(self) -> int:
        lengths = [len(c) for c in self.clips.values()]
        if self.tracks is not None:
            lengths.append(len(self.tracks.frames))
        return max(lengths, default=1)

    def set_frame(self, index: int) -> None:
        index = int(np.clip(index, 0, self.frame_count - 1))
        if index != self.frame:
            self.frame = index
            self.events.emit("frame", index=index)

    def step(self, delta: int = 1, wrap: bool = False) -> None:
        target = self.frame + delta
        if wrap:
            target %= self.frame_count
        self.set_frame(target)

    def frame_of(self, name: str) -> np.ndarray:
        clip = self.clips[name]
        return clip[min(self.frame, len(clip) - 1)]

    def composite(self, height: int | None = None) -> np.ndarray:
        """The current frames side by side at one height (nearest-neighbour scaling)."""
        if not self.clips:
            return np.zeros((height or 64, height or 64, 3), np.uint8)
        frames = [self.frame_of(name) for name in self.clips]
        height = height or max(f.shape[0] for f in frames)
        return np.concatenate([_resize_height(f, height) for f in frames], axis=1)

    # -- trajectories ----------------------------------------------------------------------

    def markers(self, width: int = MAP_SIZE_PX, height: int = MAP_SIZE_PX) -> list[Marker]:
        """The pedestrians at the current frame, in the pixels of a (width, height) view: the
        tracks' own pixels for MOT, else a top-down map fitted to the tracks' extent."""
        if self.tracks is None:
            return []
        frames = self.tracks.frames
        frame_id = frames[min(self.frame, len(frames) - 1)]
        to_view = self._to_view(width, height)
        out = []
        for ped, (ids, xy) in self.tracks.per_pedestrian().items():
            seen = np.flatnonzero(ids <= frame_id)
            if not len(seen) or ids[seen[-1]] != frame_id:
                continue
            trail = to_view(xy[seen[-TRAIL_SAMPLES:]])
            out.append(Marker(ped, float(trail[-1, 0]), float(trail[-1, 1]), trail))
        return out

    def _to_view(self, width: int, height: int):
        if self.tracks.units == "px":
            return lambda xy: np.asarray(xy, float)
        lo, hi = self.tracks.xy.min(0), self.tracks.xy.max(0)
        span = np.maximum(hi - lo, 1e-6)
        scale = min((width - 2 * MAP_MARGIN_PX) / span[0], (height - 2 * MAP_MARGIN_PX) / span[1])

        def to_view(xy: np.ndarray) -> np.ndarray:
            xy = np.asarray(xy, float)
            col = MAP_MARGIN_PX + (xy[:, 0] - lo[0]) * scale
            row = height - MAP_MARGIN_PX - (xy[:, 1] - lo[1]) * scale  # north is up
            return np.stack([col, row], axis=1)

        return to_view


def _resize_height(frame: np.ndarray, height: int) -> np.ndarray:
    if frame.shape[0] == height:
        return frame
    width = max(1, round(frame.shape[1] * height / frame.shape[0]))
    rows = (np.arange(height) * frame.shape[0] / height).astype(int)
    cols = (np.arange(width) * frame.shape[1] / width).astype(int)
    return frame[rows][:, cols]
