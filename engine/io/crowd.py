"""Crowd data: pedestrian trajectories, videos, frame folders and Studio's crowd-scene JSON.

The crowd previewer and the C2R renderer read four kinds of input, all torch-free:

* trajectories: the ETH/UCY benchmark layout (whitespace-separated ``frame id x y``, metres,
  frame ids at 25 Hz sampled every 10th frame = 2.5 Hz), CSV with named columns (``frame``/
  ``t``, ``id``, ``x``, ``y``) and MOTChallenge ``.txt`` (``frame,id,left,top,w,h,...``;
  positions are the boxes' foot points, pixels), read into one ``Tracks``;
* videos (MP4, MOV, AVI, MKV, WebM) decoded by imageio-ffmpeg's bundled ffmpeg;
* frame folders: numbered PNG/JPEG images of one size;
* scene files: JSON with a ground, buildings and obstacles as axis-aligned boxes, groups of
  pedestrians (spawn area, goal, speed), camera keyframes and a prompt, validated by pydantic
  (``Scene``); every geometry error names the file and the line of the offending object.

Every failure is a ``FormatError`` whose message starts with the path and, for text files,
names the line.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from json import scanner
from json.decoder import JSONArray, JSONObject
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.crowd.params import scene_params
from engine.io import Format, FormatError, extension_of
from engine.io.limits import (
    JSON_DEPTH,
    check_allocation,
    image_size,
    json_depth,
    loads_json,
    use_image_budget,
)

ETH_FRAME_RATE_HZ = 25.0  # ETH/UCY frame ids count video frames; a sample every 10 = 2.5 Hz
MOT_FRAME_RATE_HZ = 30.0  # MOTChallenge sequences differ (14-30 Hz); assumed when unknown
FOLDER_FRAME_RATE_HZ = 25.0  # a frame folder carries no rate
VIDEO_EXTENSIONS = (".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp")
COLUMN_ALIASES = {
    "frame": ("frame", "frame_id", "frame_idx"),
    "time": ("t", "t_s", "time", "time_s", "timestamp"),
    "id": ("id", "ped_id", "pedestrian_id", "agent_id", "track_id", "person_id"),
    "x": ("x", "pos_x", "x_m"),
    "y": ("y", "pos_y", "y_m"),
}
ETH_COLUMNS = ("frame", "id", "x", "y")


# -- trajectories ------------------------------------------------------------------------------

@dataclass
class Tracks:
    """Observations sorted by (pedestrian, frame): ``frame`` and ``ped`` (N,), ``xy`` (N, 2)."""

    frame: np.ndarray
    ped: np.ndarray
    xy: np.ndarray
    frame_rate_hz: float  # frame ids per second
    units: str  # "m" or "px"
    layout: str  # "eth-ucy", "csv", "mot", "simulated"
    path: str = ""

    def __post_init__(self) -> None:
        order = np.lexsort((self.frame, self.ped))
        self.frame = np.asarray(self.frame, dtype=np.int64)[order]
        self.ped = np.asarray(self.ped, dtype=np.int64)[order]
        self.xy = np.asarray(self.xy, dtype=np.float64).reshape(-1, 2)[order]

    @property
    def ids(self) -> np.ndarray:
        return np.unique(self.ped)

    @property
    def frames(self) -> np.ndarray:
        return np.unique(self.frame)

    @property
    def frame_step(self) -> int:
        """The most common gap between a pedestrian's consecutive frame ids (10 for ETH/UCY)."""
        same = self.ped[1:] == self.ped[:-1]
        gaps = np.diff(self.frame)[same]
        gaps = gaps[gaps > 0]
        if not len(gaps):
            return 1
        values, counts = np.unique(gaps, return_counts=True)
        return int(values[np.argmax(counts)])

    @property
    def sample_dt_s(self) -> float:
        return self.frame_step / self.frame_rate_hz

    @property
    def duration_s(self) -> float:
        if not len(self.frame):
            return 0.0
        return float(self.frame.max() - self.frame.min() + self.frame_step) / self.frame_rate_hz

    def step_velocities(self) -> np.ndarray:
        """(M, 2) velocities between consecutive samples of one pedestrian one step apart."""
        same = (self.ped[1:] == self.ped[:-1]) & (np.diff(self.frame) == self.frame_step)
        return (self.xy[1:] - self.xy[:-1])[same] / self.sample_dt_s

    def per_pedestrian(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """id -> (frame ids, positions), each in time order."""
        starts = np.flatnonzero(np.r_[True, self.ped[1:] != self.ped[:-1]])
        ends = np.r_[starts[1:], len(self.ped)]
        return {int(self.ped[s]): (self.frame[s:e], self.xy[s:e])
                for s, e in zip(starts, ends, strict=True)}

    def positions_at(self, frame: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, positions) of the pedestrians observed at one frame id."""
        mask = self.frame == frame
        return self.ped[mask], self.xy[mask]

    def to_csv(self) -> str:
        """A CSV with named columns (``frame,id,x,y,t_s``), read back by ``read_tracks``."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["frame", "id", "x", "y", "t_s"])
        times = self.frame / self.frame_rate_hz
        for f, p, (x, y), t in zip(self.frame, self.ped, self.xy, times, strict=True):
            writer.writerow([int(f), int(p), f"{x:.4f}", f"{y:.4f}", f"{t:.4f}"])
        return buffer.getvalue()


def tracks_from_array(positions: np.ndarray, frame_rate_hz: float, units: str = "m",
                      layout: str = "simulated", alive: np.ndarray | None = None) -> Tracks:
    """``Tracks`` from a (T, N, 2) array (frame index = row), keeping ``alive[t, n]`` entries."""
    steps, agents = positions.shape[:2]
    alive = np.ones((steps, agents), bool) if alive is None else alive
    frame, ped = np.nonzero(alive)
    return Tracks(frame, ped, positions[frame, ped], frame_rate_hz, units, layout)


def read_tracks(path: str | Path) -> Tracks:
    """Trajectories of any supported layout; ``FormatError`` names the file and line."""
    path = Path(path)
    text = _read_text(path)
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first:
        raise FormatError(path, "no trajectory rows in it")
    if extension_of(path) in (".csv", ".tsv") or _has_header(first):
        return _read_named_csv(path, text)
    if "," in first:
        return _read_mot(path, text)
    return _read_eth(path, text)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise FormatError(path, f"cannot read it ({exc.strerror})") from None


def _has_header(line: str) -> bool:
    cells = [c.strip().lower() for c in line.replace("\t", ",").split(",")]
    return any(c in names for names in COLUMN_ALIASES.values() for c in cells)


def _number(path: Path, line_number: int, column: str, cell: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise FormatError(path, f"line {line_number}: {column} {cell!r} is not a number") from None
    if not math.isfinite(value):
        raise FormatError(path, f"line {line_number}: {column} {cell!r} is not finite")
    return value


def _integer(path: Path, line_number: int, column: str, cell: str) -> int:
    value = _number(path, line_number, column, cell)
    if value != round(value):
        raise FormatError(path, f"line {line_number}: {column} {cell!r} is not a whole number")
    return int(round(value))


def _rows_to_tracks(path: Path, rows: list[tuple[int, int, float, float]], rate_hz: float,
                    units: str, layout: str) -> Tracks:
    if not rows:
        raise FormatError(path, "no trajectory rows in it")
    array = np.array(rows, dtype=np.float64)
    keys = array[:, 0] * 1e9 + array[:, 1]
    if len(np.unique(keys)) != len(keys):
        _, first_index = np.unique(keys, return_index=True)
        duplicate = sorted(set(range(len(keys))) - set(first_index.tolist()))[0]
        raise FormatError(path, f"row {duplicate + 1}: pedestrian {int(array[duplicate, 1])} "
                                f"appears twice in frame {int(array[duplicate, 0])}")
    return Tracks(array[:, 0], array[:, 1], array[:, 2:4], rate_hz, units, layout, str(path))


def _read_eth(path: Path, text: str) -> Tracks:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        cells = line.split()
        if not cells:
            continue
        if len(cells) < 4:
            raise FormatError(path, f"line {number}: expected 4 columns (frame id x y), found "
                                    f"{len(cells)}")
        rows.append((_integer(path, number, "frame", cells[0]),
                     _integer(path, number, "id", cells[1]),
                     _number(path, number, "x", cells[2]), _number(path, number, "y", cells[3])))
    return _rows_to_tracks(path, rows, ETH_FRAME_RATE_HZ, "m", "eth-ucy")


def _read_mot(path: Path, text: str) -> Tracks:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 6:
            raise FormatError(path, f"line {number}: expected MOT columns frame,id,left,top,"
                                    f"width,height[,...], found {len(cells)}")
        left, top, width, height = (_number(path, number, name, cell) for name, cell in
                                    zip(("left", "top", "width", "height"), cells[2:6],
                                        strict=True))
        if width <= 0 or height <= 0:
            raise FormatError(path, f"line {number}: box width and height must be positive")
        rows.append((_integer(path, number, "frame", cells[0]),
                     _integer(path, number, "id", cells[1]), left + width / 2, top + height))
    return _rows_to_tracks(path, rows, MOT_FRAME_RATE_HZ, "px", "mot")


def _read_named_csv(path: Path, text: str) -> Tracks:
    delimiter = "\t" if extension_of(path) == ".tsv" or "\t" in text.split("\n", 1)[0] else ","
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = [c.strip().lower() for c in next(reader)]
    where = {role: next((header.index(a) for a in aliases if a in header), None)
             for role, aliases in COLUMN_ALIASES.items()}
    missing = [role for role in ("id", "x", "y") if where[role] is None]
    if where["frame"] is None and where["time"] is None:
        missing.insert(0, "frame (or t)")
    if missing:
        raise FormatError(path, f"line 1: missing column(s) {', '.join(missing)}; found "
                                f"{', '.join(header)}")
    rows, times = [], []
    for cells in reader:
        number = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        if len(cells) < len(header):
            raise FormatError(path, f"line {number}: {len(cells)} cells, the header has "
                                    f"{len(header)}")
        pick = {role: cells[index].strip() for role, index in where.items() if index is not None}
        if "time" in pick:
            times.append(_number(path, number, "t", pick["time"]))
        frame = _integer(path, number, "frame", pick["frame"]) if "frame" in pick else 0
        rows.append((frame, _integer(path, number, "id", pick["id"]),
                     _number(path, number, "x", pick["x"]), _number(path, number, "y", pick["y"])))
    return _rows_to_tracks(path, *_frames_and_rate(rows, times), "m", "csv")


def _frames_and_rate(rows: list[tuple], times: list[float]) -> tuple[list[tuple], float]:
    """Frame ids and their rate: from the frame column (rate from the time column when both
    are there, else ETH/UCY's 25 Hz), or made from the times alone."""
    if not times or not rows:
        return rows, ETH_FRAME_RATE_HZ
    t = np.array(times)
    frames = np.array([row[0] for row in rows], dtype=np.float64)
    if np.ptp(frames) > 0 and np.ptp(t) > 0:
        return rows, float(np.ptp(frames) / np.ptp(t))
    if np.ptp(frames) > 0:
        return rows, ETH_FRAME_RATE_HZ
    gaps = np.diff(np.unique(t))
    rate_hz = float(1.0 / np.median(gaps)) if len(gaps) else 1.0
    return [(int(round(ti * rate_hz)), *row[1:]) for ti, row in zip(t, rows, strict=True)], rate_hz


# -- videos and frame folders ------------------------------------------------------------------

@dataclass
class VideoInfo:
    frames: int
    width: int
    height: int
    fps: float
    codec: str = ""

    @property
    def duration_s(self) -> float:
        return self.frames / self.fps if self.fps else 0.0


def _ffmpeg():
    try:
        import imageio_ffmpeg
    except ImportError:
        raise RuntimeError("reading and writing videos needs imageio-ffmpeg "
                           "(pip install imageio-ffmpeg)") from None
    return imageio_ffmpeg


def read_video(path: str | Path, max_frames: int | None = None) -> tuple[np.ndarray, VideoInfo]:
    """(frames (T, H, W, 3) uint8, info); a corrupt or truncated file is a ``FormatError``.
    The decoded size is checked against the budgets first (``engine.io.limits``): for a long
    clip use ``iter_video_frames`` or ``video_frame``, which decode on demand."""
    path = Path(path)
    info = video_info(path)
    count = info.frames if max_frames is None else min(info.frames, max_frames)
    check_allocation(path, count * info.width * info.height * 3, f"decoding {count} frames")
    frames = list(iter_video_frames(path, stop=max_frames))
    return np.stack(frames), VideoInfo(len(frames), info.width, info.height, info.fps,
                                       info.codec)


def iter_video_frames(path: str | Path, start: int = 0, stop: int | None = None
                      ) -> Iterator[np.ndarray]:
    """Frames ``start`` (seeked to by time) up to ``stop``, decoded one at a time."""
    path = Path(path)
    ffmpeg = _ffmpeg()
    seek = []
    if start > 0:
        fps = video_info(path).fps or FOLDER_FRAME_RATE_HZ
        seek = ["-ss", f"{start / fps:.6f}"]
    reader = None
    index = start
    try:
        reader = ffmpeg.read_frames(str(path), input_params=seek)
        meta = next(reader)
        width, height = meta["size"]
        for raw in reader:
            if stop is not None and index >= stop:
                break
            yield np.frombuffer(raw, np.uint8).reshape(height, width, 3)
            index += 1
    except (RuntimeError, OSError, StopIteration, KeyError, ValueError) as exc:
        raise _unreadable_video(path, exc) from None
    finally:
        if reader is not None:
            reader.close()
    if index == start:
        raise FormatError(path, "not a readable video (no frame could be decoded)")


def video_frame(path: str | Path, index: int) -> np.ndarray:
    """One frame, decoded on demand (for scrubbing a clip too long to hold in memory)."""
    for frame in iter_video_frames(path, start=index, stop=index + 1):
        return frame
    raise FormatError(path, f"frame {index} is past the end of the video")


def _unreadable_video(path: Path, exc: Exception) -> FormatError:
    problem = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return FormatError(path, f"not a readable video ({problem[:200]})")


def video_info(path: str | Path) -> VideoInfo:
    """Frame count (from the container's duration and rate), size, rate and codec; the first
    frame is decoded to prove the stream is readable, no more (a 1080p clip of any length
    costs one frame of memory)."""
    path = Path(path)
    ffmpeg = _ffmpeg()
    reader = None
    try:
        reader = ffmpeg.read_frames(str(path))
        meta = next(reader)
        width, height = meta["size"]
        first = next(reader, None)
        fps = float(meta.get("fps") or 0.0)
        frames = round(float(meta.get("duration") or 0.0) * fps)
        if first is not None and frames <= 0:  # no duration in the container: count them,
            frames = 1 + sum(1 for _ in reader)  # one frame in memory at a time
    except (RuntimeError, OSError, StopIteration, KeyError, ValueError) as exc:
        raise _unreadable_video(path, exc) from None
    finally:
        if reader is not None:
            reader.close()
    if first is None:
        raise FormatError(path, "not a readable video (no frame could be decoded)")
    return VideoInfo(frames, int(width), int(height), fps, str(meta.get("codec", "")))


def write_video(path: str | Path, frames: np.ndarray, fps: float) -> Path:
    """H.264 MP4 of (T, H, W, 3) uint8 frames (H and W are padded to even numbers)."""
    path = Path(path)
    frames = np.asarray(frames, dtype=np.uint8)
    pad_h, pad_w = frames.shape[1] % 2, frames.shape[2] % 2
    if pad_h or pad_w:
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    writer = _ffmpeg().write_frames(str(path), (frames.shape[2], frames.shape[1]), fps=fps,
                                    codec="libx264", pix_fmt_out="yuv420p", quality=8,
                                    macro_block_size=1, ffmpeg_log_level="error")
    writer.send(None)
    for frame in frames:
        writer.send(np.ascontiguousarray(frame))
    writer.close()
    return path


def encode_mp4(frames: np.ndarray, fps: float) -> bytes:
    """The bytes of an MP4 of ``frames`` (for ``JobContext.save_file``)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "clip.mp4"
        write_video(target, frames, fps)
        return target.read_bytes()


def folder_images(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir()
                  if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
                  and not p.name.startswith("."))


def read_frame_folder(path: str | Path, max_frames: int | None = None
                      ) -> tuple[np.ndarray, VideoInfo]:
    """(frames (T, H, W, 3) uint8, info) from numbered images; all must share one size."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    info = frame_folder_info(path)
    images = folder_images(path)[:max_frames]
    check_allocation(path, len(images) * info.width * info.height * 3,
                     f"decoding {len(images)} images")
    use_image_budget()
    frames = []
    for image_path in images:
        try:
            with Image.open(image_path) as image:
                if image.size != (info.width, info.height):  # before decoding it
                    raise FormatError(image_path, f"{image.size[0]}x{image.size[1]} differs "
                                                  f"from the first frame's {info.width}x"
                                                  f"{info.height}")
                frame = np.asarray(image.convert("RGB"))
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
            raise FormatError(image_path, f"not a readable image ({exc})") from None
        frames.append(frame)
    height, width = frames[0].shape[:2]
    return np.stack(frames), VideoInfo(len(frames), width, height, FOLDER_FRAME_RATE_HZ)


def frame_folder_info(path: str | Path) -> VideoInfo:
    """A frame folder's count and size from the first image's header (nothing decoded)."""
    path = Path(path)
    images = folder_images(path)
    if not images:
        raise FormatError(path, f"no {'/'.join(IMAGE_EXTENSIONS)} images in the folder")
    width, height = image_size(images[0])
    return VideoInfo(len(images), width, height, FOLDER_FRAME_RATE_HZ)


def read_clip(path: str | Path, max_frames: int | None = None) -> tuple[np.ndarray, VideoInfo]:
    """A video file or a frame folder, whichever ``path`` is."""
    path = Path(path)
    return read_frame_folder(path, max_frames) if path.is_dir() else read_video(path, max_frames)


# -- scene files -------------------------------------------------------------------------------

Color = tuple[float, float, float]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Ground(_Strict):
    size: tuple[float, float] = Field((40.0, 40.0), description="width (x) and depth (y), "
                                      "metres, centred on the origin")
    color: Color = (0.45, 0.45, 0.42)

    @model_validator(mode="after")
    def _positive(self) -> Ground:
        if min(self.size) <= 0:
            raise ValueError(f"ground size {list(self.size)} must be positive")
        return self


class Box(_Strict):
    """An axis-aligned box standing on the ground (a building or an obstacle)."""

    center: tuple[float, float]
    size: tuple[float, float]
    height: float = 3.0
    color: Color = (0.6, 0.55, 0.5)

    @model_validator(mode="after")
    def _positive(self) -> Box:
        if min(self.size) <= 0 or self.height <= 0:
            raise ValueError(f"box size {list(self.size)} and height {self.height} must be "
                             "positive")
        return self

    def bounds(self) -> tuple[float, float, float, float]:
        """(x0, y0, x1, y1)."""
        (cx, cy), (w, d) = self.center, self.size
        return cx - w / 2, cy - d / 2, cx + w / 2, cy + d / 2


class Group(_Strict):
    """Pedestrians spawned uniformly in a rectangle who walk to a goal."""

    count: int = Field(ge=1, le=5000)
    spawn_center: tuple[float, float]
    spawn_size: tuple[float, float] = (4.0, 4.0)
    goal: tuple[float, float]
    waypoints: list[tuple[float, float]] = Field([], description="points visited before the "
                                                 "goal, in order")
    speed_mps: float | None = Field(None, gt=0, le=4, description="the group's mean desired "
                                    "walking speed (absent: the scene's social-force one)")
    color: Color = (0.8, 0.3, 0.25)


class SocialForce(_Strict):
    """The social-force parameters a scene is walked with (``engine.crowd.social_force``'s
    ``SocialForceParams``, every field given); ``fitted_to`` names the recording they were
    fitted to (empty: the model's defaults or values set by hand)."""

    fitted_to: str = ""
    desired_speed_mps: float = Field(gt=0, le=4)
    desired_speed_std_mps: float = Field(ge=0, le=2)
    relaxation_s: float = Field(ge=0.05, le=10)
    agent_strength: float = Field(ge=0, le=100)
    agent_range_m: float = Field(ge=0.02, le=5)
    radius_m: float = Field(gt=0, le=1)
    obstacle_strength: float = Field(ge=0, le=200)
    obstacle_range_m: float = Field(ge=0.02, le=5)
    anisotropy: float = Field(ge=0, le=1)
    max_speed_factor: float = Field(ge=1, le=3)


class CameraKeyframe(_Strict):
    t_s: float = Field(ge=0)
    position: tuple[float, float, float]
    look_at: tuple[float, float, float]
    fov_deg: float = Field(50.0, gt=5, lt=150)

    @model_validator(mode="after")
    def _looks_somewhere(self) -> CameraKeyframe:
        if np.allclose(self.position, self.look_at):
            raise ValueError("camera position and look_at coincide")
        if self.position[2] <= 0:
            raise ValueError(f"camera height {self.position[2]} must be above the ground (> 0)")
        return self


class Scene(_Strict):
    """A crowd scene: x/y on the ground (metres), z up."""

    ground: Ground = Ground()
    buildings: list[Box] = []
    obstacles: list[Box] = []
    groups: list[Group] = []
    camera: list[CameraKeyframe] = Field(min_length=1)
    prompt: str = ""
    duration_s: float = Field(8.0, gt=0, le=600)
    fps: float = Field(10.0, gt=0, le=60)
    social_force: SocialForce | None = Field(None, description="the simulation's parameters "
                                             "(absent: the model's defaults)")

    @model_validator(mode="after")
    def _geometry(self) -> Scene:
        times = [k.t_s for k in self.camera]
        if any(b <= a for a, b in zip(times, times[1:], strict=False)):
            raise ValueError(f"camera keyframe times {times} must increase strictly")
        half_w, half_d = self.ground.size[0] / 2, self.ground.size[1] / 2
        for kind in ("buildings", "obstacles"):
            for index, box in enumerate(getattr(self, kind)):
                x0, y0, x1, y1 = box.bounds()
                if x0 < -half_w or x1 > half_w or y0 < -half_d or y1 > half_d:
                    raise ValueError(f"{kind}[{index}] ({x0:g}..{x1:g}, {y0:g}..{y1:g}) reaches "
                                     f"outside the {self.ground.size[0]:g} x "
                                     f"{self.ground.size[1]:g} m ground")
        for index, group in enumerate(self.groups):
            points = [("spawn_center", group.spawn_center), ("goal", group.goal),
                      *((f"waypoints[{k}]", w) for k, w in enumerate(group.waypoints))]
            for name, (x, y) in points:
                if abs(x) > half_w or abs(y) > half_d:
                    raise ValueError(f"groups[{index}].{name} ({x:g}, {y:g}) is off the ground")
                if any(_inside(box, x, y) for box in self.buildings + self.obstacles):
                    raise ValueError(f"groups[{index}].{name} ({x:g}, {y:g}) is inside a "
                                     "building or obstacle")
        return self

    @property
    def frames(self) -> int:
        return max(1, int(round(self.duration_s * self.fps)))

    @property
    def agents(self) -> int:
        return sum(g.count for g in self.groups)


def _inside(box: Box, x: float, y: float) -> bool:
    x0, y0, x1, y1 = box.bounds()
    return x0 < x < x1 and y0 < y < y1


class _PositionDecoder(json.JSONDecoder):
    """A JSON decoder that remembers where each object and array starts (for error lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: dict[int, int] = {}

        def parse_object(state, *args):
            value, end = JSONObject(state, *args)
            self.starts[id(value)] = state[1] - 1
            return value, end

        def parse_array(state, scan_once):
            value, end = JSONArray(state, scan_once)
            self.starts[id(value)] = state[1] - 1
            return value, end

        self.parse_object = parse_object
        self.parse_array = parse_array
        self.scan_once = scanner.py_make_scanner(self)


def _line_of(text: str, data: Any, starts: dict[int, int], loc: tuple) -> int:
    """The line where the innermost object or array on the error's path starts."""
    position, node = starts.get(id(data), 0), data
    for key in loc:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            break
        position = starts.get(id(node), position)
    return text.count("\n", 0, position) + 1


def read_scene(path: str | Path) -> Scene:
    """A validated ``Scene``; errors name the file, the line and the field."""
    path = Path(path)
    text = _read_text(path)
    decoder = _PositionDecoder()
    try:
        data = decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"line {exc.lineno}: not JSON ({exc.msg})") from None
    except RecursionError:
        data = None  # the position-keeping decoder recurses in Python; let the limit speak
    if data is None or json_depth(data) > JSON_DEPTH.value:
        loads_json(text, path)  # raises the depth error naming the file and the budget
    try:
        return Scene.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        field = ".".join(str(part) for part in loc) or "scene"
        line = _line_of(text, data, decoder.starts, loc)
        message = error["msg"].removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise FormatError(path, f"line {line}: {field}: {message}{more}") from None


def scene_to_json(scene: Scene) -> str:
    return scene.model_dump_json(indent=2)


# -- the registry ------------------------------------------------------------------------------

def _numeric_row(line: str, separator: str | None, minimum: int) -> bool:
    cells = line.split(separator)
    if len(cells) < minimum:
        return False
    try:
        [float(c) for c in cells[:minimum]]
    except ValueError:
        return False
    return True


def _first_lines(head: bytes, count: int = 3) -> list[str]:
    text = head.decode("utf-8", "replace")
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[:count] if len(head) < 4096 else lines[:min(count, max(len(lines) - 1, 1))]


def _sniff_tracks(path: Path, head: bytes) -> int:
    ext = extension_of(path)
    if path.is_dir() or ext not in (".txt", ".csv", ".tsv", ".dat"):
        return 0
    lines = _first_lines(head)
    if not lines:
        return 0
    if ext in (".csv", ".tsv"):
        header = [c.strip().lower() for c in lines[0].replace("\t", ",").split(",")]
        has = {role for role, aliases in COLUMN_ALIASES.items() if set(aliases) & set(header)}
        return 2 if {"id", "x", "y"} <= has and has & {"frame", "time"} else 0
    if all(_numeric_row(line, None, 4) and len(line.split()) <= 8 for line in lines):
        return 2
    if all(_numeric_row(line, ",", 6) for line in lines):
        return 2
    return 1 if ext == ".txt" and path.name.lower() in ("gt.txt", "det.txt") else 0


def _inspect_tracks(path: Path) -> dict:
    tracks = read_tracks(path)
    speeds = np.linalg.norm(tracks.step_velocities(), axis=1)
    lo, hi = tracks.xy.min(0), tracks.xy.max(0)
    counts = np.unique(tracks.frame, return_counts=True)[1]
    return {"summary": {"tracks": len(tracks.ids), "frames": len(tracks.frames),
                        "observations": len(tracks.frame),
                        "duration_s": round(tracks.duration_s, 2)},
            "metadata": {"layout": tracks.layout, "units": tracks.units,
                         "frame_rate_hz": tracks.frame_rate_hz,
                         "sample_rate_hz": round(1 / tracks.sample_dt_s, 3),
                         "extent": [[float(lo[0]), float(hi[0])], [float(lo[1]), float(hi[1])]],
                         "mean_speed": float(speeds.mean()) if len(speeds) else math.nan,
                         "max_per_frame": int(counts.max())}}


def _sniff_video(path: Path, head: bytes) -> int:
    if path.is_dir():
        return 0
    if head[4:8] == b"ftyp" or head.startswith(b"\x1aE\xdf\xa3") or (
            head.startswith(b"RIFF") and head[8:12] == b"AVI "):
        return 2
    return 1 if extension_of(path) in VIDEO_EXTENSIONS else 0


def _inspect_clip(path: Path) -> dict:
    info = frame_folder_info(path) if path.is_dir() else video_info(path)
    metadata = {"fps": info.fps, "codec": info.codec}
    if path.is_dir():
        metadata["fps_note"] = f"a frame folder has no rate; {FOLDER_FRAME_RATE_HZ:g} assumed"
    return {"summary": {"frames": info.frames, "resolution": f"{info.width}x{info.height}",
                        "duration_s": round(info.duration_s, 3)},
            "metadata": metadata}


def _sniff_folder(path: Path, head: bytes) -> int:
    if not path.is_dir():
        return 0
    entries = [p for p in path.iterdir() if not p.name.startswith(".")]
    images = [p for p in entries if p.suffix.lower() in IMAGE_EXTENSIONS]
    return 2 if images and len(images) * 2 >= len(entries) else 0


def _sniff_scene(path: Path, head: bytes) -> int:
    if path.is_dir() or extension_of(path) != ".json":
        return 0
    return 2 if b'"camera"' in head and (b'"ground"' in head or b'"groups"' in head) else 0


def _inspect_scene(path: Path) -> dict:
    scene = read_scene(path)
    params = scene_params(scene)
    return {"summary": {"buildings": len(scene.buildings), "obstacles": len(scene.obstacles),
                        "groups": len(scene.groups), "agents": scene.agents,
                        "frames": scene.frames, "duration_s": scene.duration_s,
                        "social_force": _social_force_source(scene.social_force),
                        "desired_speed_mps": params.desired_speed_mps},
            "metadata": {"ground_m": list(scene.ground.size),
                         "camera_keyframes": len(scene.camera), "fps": scene.fps,
                         "prompt": scene.prompt, "social_force": params.to_dict()}}


def _social_force_source(block: SocialForce | None) -> str:
    """Where a scene's social-force parameters come from, in the editor's words."""
    if block is None:
        return "model defaults"
    return f"fitted to {block.fitted_to}" if block.fitted_to else "set by hand"


FORMATS = [
    Format("trajectories", "pedestrian trajectories (ETH/UCY frame id x y, CSV, MOT)",
           (".txt", ".csv", ".tsv"), _sniff_tracks, _inspect_tracks, panel="crowd",
           kinds=("trajectories",)),
    Format("video", "video (MP4, MOV, AVI, MKV, WebM)", VIDEO_EXTENSIONS, _sniff_video,
           _inspect_clip, panel="crowd", kinds=("video",)),
    Format("frames", "frame folder (PNG/JPEG images)", (), _sniff_folder, _inspect_clip,
           panel="crowd", kinds=("video",)),
    Format("crowd-scene", "crowd scene (JSON: ground, buildings, groups, camera)", (".json",),
           _sniff_scene, _inspect_scene, panel="crowd", kinds=("scene",)),
]

__all__ = ["Box", "CameraKeyframe", "Ground", "Group", "Scene", "SocialForce", "Tracks",
           "VideoInfo",
           "encode_mp4", "read_clip", "read_frame_folder", "read_scene",
           "read_tracks", "read_video", "scene_to_json", "tracks_from_array", "video_info",
           "iter_video_frames", "video_frame", "frame_folder_info",
           "write_video"]
