"""The crowd previewer's state without Qt: named clips played in step, one frame index for all,
and trajectories to overlay.

Clips (coarse render, generated, real footage; any number) are (T, H, W, 3) uint8 arrays read
through ``engine.io.crowd`` (videos, frame folders, ``.npy`` frame stacks from runs); a video
too large to hold decoded is a ``VideoClip``: its metadata read first, frames decoded on demand
(one decoder kept open for playback, a few frames cached). Playback
runs on the longest clip; a shorter clip holds its last frame. ``composite`` lays the current
frames side by side at one height, which is what the view shows and exports; ``wipe`` shows
two clips in one frame, split at a draggable column. Trajectories (``Tracks``) are drawn over a
clip when they are in its pixels (MOT), and otherwise in a top-down map of their own extent,
each with its id and a trail of the last few samples.

Edits (the prompt of the next generation, a waypoint of a person's path) are command objects
(``panels.api.EditCommand``) pushed through ``host.push_edit``, so they are undoable and
autosaved; ``decode`` turns their JSON back into commands. Exports (MP4, GIF, CSV) write
atomically: a crash leaves the old file or the new one.
"""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.atomic import write_bytes_atomic
from engine.io import FormatError
from engine.io.crowd import (
    Tracks,
    VideoInfo,
    encode_mp4,
    iter_video_frames,
    read_clip,
    read_tracks,
    video_frame,
    video_info,
)
from engine.io.limits import check_allocation
from panels.lab.model import Events

TRAIL_SAMPLES = 8
MAP_SIZE_PX = 256
MAP_MARGIN_PX = 12
WIPE_DIVIDER_RGB = (255, 255, 255)
IN_MEMORY_CLIP_BYTES = 256 * 1024 * 1024  # a video decoding to more is read on demand
CLIP_CACHE_FRAMES = 8                     # decoded frames a VideoClip keeps
SKIP_AHEAD_FRAMES = 48                    # a jump this far forward reads on, not seeks
DURATION_ROUNDING_FRAMES = 1              # a count from duration x rate may be this far off


class VideoClip:
    """A video's frames decoded on demand, indexable like a (T, H, W, 3) uint8 array: a long
    or large clip plays without decoding every frame into memory. The next frame in order
    comes from a decoder kept open (playback costs one frame's decoding), as does a short jump
    forward; another frame opens a decoder at its time (a seek); the last
    ``CLIP_CACHE_FRAMES`` frames are kept."""

    ndim = 4
    dtype = np.dtype(np.uint8)

    def __init__(self, path: str | Path, info: VideoInfo) -> None:
        self.path, self.info = Path(path), info
        self.shape = (max(info.frames, 1), info.height, info.width, 3)
        self.decoders_opened = 0
        self.problem = ""  # why the clip holds fewer frames than its container declares
        # told the problem when decoding stops early (the model shows it and the new count)
        self.on_shortened: Callable[[str], None] | None = None
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._reader: Iterator[np.ndarray] | None = None
        self._next = 0  # the frame the open decoder yields next
        self._opened_at = 0  # the frame the open decoder started at

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: int | slice) -> np.ndarray:
        if isinstance(index, slice):
            indices = range(*index.indices(len(self)))
            frame_bytes = int(np.prod(self.shape[1:]))
            check_allocation(self.path, len(indices) * frame_bytes,
                             f"decoding {len(indices)} frames")
            return np.stack([self[i] for i in indices]) if len(indices) else np.empty(
                (0, *self.shape[1:]), np.uint8)
        index = int(index) + (len(self) if int(index) < 0 else 0)
        if not 0 <= index < len(self):
            raise IndexError(f"{self.path}: frame {index} outside 0..{len(self) - 1}")
        frame = self._cache.get(index)
        if frame is None:
            frame = self._decode(index)
            self._cache[index] = frame
            while len(self._cache) > CLIP_CACHE_FRAMES:
                self._cache.popitem(last=False)
        self._cache.move_to_end(index)
        return frame

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """Every frame, within the memory budget (metrics over a whole clip ask for this)."""
        frames = self[:]
        return frames if dtype is None else frames.astype(dtype)

    def _decode(self, index: int) -> np.ndarray:
        ahead = index - self._next
        if self._reader is None or not 0 <= ahead <= SKIP_AHEAD_FRAMES:
            self.close()
            self._reader, self._next, ahead = iter_video_frames(self.path, start=index), index, 0
            self._opened_at = index
            self.decoders_opened += 1
        try:
            for _ in range(ahead):  # a short jump forward: cheaper than a seek, which
                next(self._reader)  # decodes from the keyframe before it
                self._next += 1
            frame = next(self._reader)
        except (StopIteration, FormatError):
            # the stream holds fewer frames than the container declares (truncated, damaged)
            failed = self._next
            decoded = failed - 1 if failed > self._opened_at else max(
                (i for i in self._cache if i < failed), default=-1)
            self.close()
            return self._end_at(self._last_decodable(decoded, failed))
        self._next += 1
        return frame

    def _last_decodable(self, good: int, bad: int) -> int:
        """The last frame that decodes, between one that did (``good``, -1 for none known)
        and one that did not (``bad``): a seek past the end only says that frames from
        there on fail, so bisect, one short decode per step."""
        while bad - good > 1:
            middle = (good + bad) // 2
            try:
                self._cache[middle] = video_frame(self.path, middle)
                good = middle
            except FormatError:
                bad = middle
        return good

    def _end_at(self, last: int) -> np.ndarray:
        """The clip shortened to end at frame ``last``, said (the file and where decoding
        stopped) when more than the container's rounding is missing; its last frame."""
        if last < 0:
            raise FormatError(self.path, "not a readable video (no frame could be decoded)")
        declared = max(self.info.frames, 1)
        self.shape = (last + 1, *self.shape[1:])
        if declared - (last + 1) > DURATION_ROUNDING_FRAMES:
            self.problem = (f"{self.path}: decoding stopped at frame {last + 2} of the "
                            f"{declared} its container declares (the file is truncated or "
                            f"damaged); the clip has {last + 1} frames")
            if self.on_shortened is not None:
                self.on_shortened(self.problem)
        return self[last]

    def close(self) -> None:
        """Stop the open decoder (its ffmpeg process); a later frame opens another."""
        if self._reader is not None:
            self._reader.close()  # type: ignore[attr-defined]
            self._reader = None


@dataclass
class Marker:
    """One pedestrian to draw: its id, position (x, y pixels in the view) and its trail."""

    id: int
    x: float
    y: float
    trail: np.ndarray  # (K, 2) pixels, oldest first


class CrowdModel:
    def __init__(self) -> None:
        self.clips: dict[str, np.ndarray | VideoClip] = {}
        self.clip_sources: dict[str, str] = {}  # clip name -> the file it was read from
        self.fps = 10.0
        self.frame = 0
        self.tracks: Tracks | None = None
        self.prompt = ""
        self.control_silhouettes: np.ndarray | None = None  # (T, H, W) bool from a c2r run
        self.problems: dict[str, str] = {}  # clip name -> why it is shorter than declared
        self._map_frames: dict[tuple[int, int], tuple[np.ndarray, float]] = {}
        # "problem" (message): a clip turned out shorter than its file declares
        self.events = Events("clips", "frame", "tracks", "prompt", "problem")

    @property
    def document(self) -> str:
        """The id of the edit history (one per opened trajectory file)."""
        return f"crowd:{self.tracks.path if self.tracks is not None else ''}"

    # -- loading ---------------------------------------------------------------------------

    def load_clip(self, name: str, path: str | Path) -> None:
        path = Path(path)
        if path.suffix.lower() == ".npy":
            frames = np.load(path, mmap_mode="r")
            if frames.ndim != 4 or frames.shape[-1] != 3:
                raise ValueError(f"{path}: expected frames (T, H, W, 3), found "
                                 f"{tuple(frames.shape)}")
            self.add_clip(name, np.asarray(frames, dtype=np.uint8), path)
            return
        if not path.is_dir():
            info = video_info(path)  # metadata and one frame: cheap for any length
            if info.frames * info.height * info.width * 3 > IN_MEMORY_CLIP_BYTES:
                if info.fps:
                    self.fps = info.fps
                self.add_clip(name, VideoClip(path, info), path)
                return
        frames, info = read_clip(path)
        if info.fps:
            self.fps = info.fps
        self.add_clip(name, frames, path)

    def add_clip(self, name: str, frames: np.ndarray | VideoClip,
                 source: str | Path | None = None) -> None:
        old = self.clips.get(name)
        if isinstance(old, VideoClip) and old is not frames:
            old.close()
        self.problems.pop(name, None)
        if isinstance(frames, VideoClip):
            frames.on_shortened = lambda message: self._clip_shortened(name, message)
        self.clips[name] = frames if isinstance(frames, VideoClip) else np.asarray(
            frames, dtype=np.uint8)
        if source is not None:
            self.clip_sources[name] = str(Path(source).resolve())
        else:
            self.clip_sources.pop(name, None)
        self.frame = min(self.frame, self.frame_count - 1)
        self.events.emit("clips", names=list(self.clips))

    def _clip_shortened(self, name: str, message: str) -> None:
        """A clip's decoding stopped early: the frame count shrinks and the problem is said."""
        self.problems[name] = message
        self.frame = max(0, min(self.frame, self.frame_count - 1))
        self.events.emit("problem", message=message)

    def remove_clip(self, name: str) -> None:
        self.problems.pop(name, None)
        clip = self.clips.pop(name, None)
        if isinstance(clip, VideoClip):
            clip.close()
        self.clip_sources.pop(name, None)
        self.frame = max(0, min(self.frame, self.frame_count - 1))
        self.events.emit("clips", names=list(self.clips))

    def load_tracks(self, path: str | Path) -> None:
        self.set_tracks(read_tracks(path))

    def set_tracks(self, tracks: Tracks) -> None:
        self.tracks = tracks
        self._map_frames = {}
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

    def wipe(self, left: str, right: str, position: float, height: int | None = None
             ) -> np.ndarray:
        """``left``'s current frame up to column ``position`` (0-1 of the width), ``right``'s
        after it, with a one-pixel divider; ``right`` is scaled to ``left``'s size."""
        a = self.frame_of(left)
        height = height or a.shape[0]
        a = _resize_height(a, height)
        b = _resize(self.frame_of(right), height, a.shape[1])
        split = int(round(np.clip(position, 0.0, 1.0) * a.shape[1]))
        out = np.concatenate([a[:, :split], b[:, split:]], axis=1)
        out[:, min(split, out.shape[1] - 1)] = WIPE_DIVIDER_RGB
        return out

    def frames_over(self, start: int, stop: int, draw: Callable[[], np.ndarray]) -> np.ndarray:
        """``draw()`` at each frame of ``start`` .. ``stop - 1``, stacked; the current frame
        is kept and no event is sent."""
        start, stop = max(0, start), min(stop, self.frame_count)
        if stop <= start:
            raise ValueError(f"empty frame range {start + 1}..{stop}")
        kept, frames = self.frame, []
        try:
            for index in range(start, stop):
                self.frame = index
                frames.append(draw())
        finally:
            self.frame = kept
        return np.stack(frames)

    def clip_pair(self) -> tuple[str, str] | None:
        """(generated, control) clip names for the metrics: ``generated`` and ``coarse`` when
        present, else the second clip against the first."""
        names = list(self.clips)
        if "generated" in self.clips:
            control = "coarse" if "coarse" in self.clips else next(
                (n for n in names if n != "generated"), None)
            return ("generated", control) if control or self.control_silhouettes is not None \
                else None
        return (names[1], names[0]) if len(names) >= 2 else None

    # -- edits -----------------------------------------------------------------------------

    def set_prompt(self, text: str) -> None:
        self.prompt = text
        self.events.emit("prompt", text=text)

    def move_waypoint(self, ped: int, frame_id: int, xy: tuple[float, float]) -> None:
        """Put pedestrian ``ped`` at ``xy`` at frame id ``frame_id`` (an existing sample)."""
        row = self._sample_row(ped, frame_id)
        self.tracks.xy[row] = xy
        self.events.emit("tracks", count=len(self.tracks.ids))

    def waypoint(self, ped: int, frame_id: int) -> tuple[float, float]:
        x, y = self.tracks.xy[self._sample_row(ped, frame_id)]
        return float(x), float(y)

    def _sample_row(self, ped: int, frame_id: int) -> int:
        if self.tracks is None:
            raise ValueError("no trajectories are open")
        rows = np.flatnonzero((self.tracks.ped == ped) & (self.tracks.frame == frame_id))
        if not len(rows):
            raise ValueError(f"pedestrian {ped} has no sample at frame {frame_id}")
        return int(rows[0])

    def nearest_waypoint(self, col: float, row: float, width: int = MAP_SIZE_PX,
                         height: int = MAP_SIZE_PX, radius_px: float = 8.0
                         ) -> tuple[int, int] | None:
        """(ped, frame id) of the current marker nearest to a map pixel, within
        ``radius_px``."""
        if self.tracks is None:
            return None
        frame_id = int(self.tracks.frames[min(self.frame, len(self.tracks.frames) - 1)])
        best, chosen = radius_px, None
        for marker in self.markers(width, height):
            distance = float(np.hypot(marker.x - col, marker.y - row))
            if distance <= best:
                best, chosen = distance, (marker.id, frame_id)
        return chosen

    def map_to_world(self, col: float, row: float, width: int = MAP_SIZE_PX,
                     height: int = MAP_SIZE_PX) -> tuple[float, float]:
        """The inverse of the map's projection (identity for pixel tracks)."""
        if self.tracks.units == "px":
            return float(col), float(row)
        lo, scale = self._map_frame(width, height)
        return (float(lo[0] + (col - MAP_MARGIN_PX) / scale),
                float(lo[1] + (height - MAP_MARGIN_PX - row) / scale))

    # -- export ----------------------------------------------------------------------------

    def export_video(self, path: str | os.PathLike, frames: np.ndarray) -> Path:
        """MP4 (H.264) or GIF of ``frames`` at the clips' rate, by the suffix of ``path``."""
        target = Path(path)
        suffix = target.suffix.lower()
        if suffix == ".mp4":
            return write_bytes_atomic(target, encode_mp4(frames, self.fps))
        if suffix == ".gif":
            return write_bytes_atomic(target, encode_gif(frames, self.fps))
        raise ValueError(f"{target}: choose .mp4 or .gif")

    def export_tracks_csv(self, path: str | os.PathLike) -> Path:
        if self.tracks is None:
            raise ValueError("no trajectories are open")
        return write_bytes_atomic(path, self.tracks.to_csv().encode())

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
        lo, scale = self._map_frame(width, height)

        def to_view(xy: np.ndarray) -> np.ndarray:
            xy = np.asarray(xy, float)
            col = MAP_MARGIN_PX + (xy[:, 0] - lo[0]) * scale
            row = height - MAP_MARGIN_PX - (xy[:, 1] - lo[1]) * scale  # north is up
            return np.stack([col, row], axis=1)

        return to_view

    def _map_frame(self, width: int, height: int) -> tuple[np.ndarray, float]:
        """The map's origin (world) and scale (pixels per unit). Fixed once tracks load, so a
        dragged waypoint does not rescale the map under the pointer."""
        if (width, height) not in self._map_frames:
            lo, hi = self.tracks.xy.min(0), self.tracks.xy.max(0)
            span = np.maximum(hi - lo, 1e-6)
            self._map_frames[width, height] = (
                lo.copy(), float(min((width - 2 * MAP_MARGIN_PX) / span[0],
                                     (height - 2 * MAP_MARGIN_PX) / span[1])))
        return self._map_frames[width, height]


def encode_gif(frames: np.ndarray, fps: float) -> bytes:
    """The bytes of a looping GIF of (T, H, W, 3) uint8 frames (ffmpeg's GIF encoder)."""
    from engine.io.crowd import _ffmpeg

    frames = np.asarray(frames, dtype=np.uint8)
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "clip.gif"
        writer = _ffmpeg().write_frames(str(target), (frames.shape[2], frames.shape[1]),
                                        fps=fps, codec="gif", pix_fmt_out="rgb8",
                                        macro_block_size=1, ffmpeg_log_level="error",
                                        output_params=["-loop", "0"])
        writer.send(None)
        for frame in frames:
            writer.send(np.ascontiguousarray(frame))
        writer.close()
        return target.read_bytes()


@dataclass
class SetPrompt:
    """The prompt of the next generation (old value kept for undo)."""

    value: str
    previous: str = ""
    label: str = "Change the prompt"

    def apply(self, model: CrowdModel) -> None:
        model.set_prompt(self.value)

    def revert(self, model: CrowdModel) -> None:
        model.set_prompt(self.previous)

    def to_json(self) -> dict:
        return {"type": "set_prompt", "value": self.value, "previous": self.previous}


@dataclass
class MoveWaypoint:
    """Move pedestrian ``ped``'s sample at ``frame_id`` from ``previous`` to ``xy``."""

    ped: int
    frame_id: int
    xy: tuple[float, float]
    previous: tuple[float, float]

    @property
    def label(self) -> str:
        return f"Move person {self.ped} at frame {self.frame_id}"

    def apply(self, model: CrowdModel) -> None:
        model.move_waypoint(self.ped, self.frame_id, self.xy)

    def revert(self, model: CrowdModel) -> None:
        model.move_waypoint(self.ped, self.frame_id, self.previous)

    def to_json(self) -> dict:
        return {"type": "move_waypoint", "ped": self.ped, "frame_id": self.frame_id,
                "xy": list(self.xy), "previous": list(self.previous)}


def decode(data: dict) -> SetPrompt | MoveWaypoint:
    """A saved edit back as a command (``host.restore_edits``)."""
    kind = data.get("type")
    if kind == "set_prompt":
        return SetPrompt(str(data["value"]), str(data.get("previous", "")))
    if kind == "move_waypoint":
        return MoveWaypoint(int(data["ped"]), int(data["frame_id"]),
                            tuple(float(v) for v in data["xy"]),
                            tuple(float(v) for v in data["previous"]))
    raise ValueError(f"not a crowd edit: {kind!r}")


def _resize(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    rows = (np.arange(height) * frame.shape[0] / height).astype(int)
    cols = (np.arange(width) * frame.shape[1] / width).astype(int)
    return frame[rows][:, cols]


def _resize_height(frame: np.ndarray, height: int) -> np.ndarray:
    if frame.shape[0] == height:
        return frame
    return _resize(frame, height, max(1, round(frame.shape[1] * height / frame.shape[0])))
