"""The scene editor's state without Qt: a crowd scene (``engine.io.crowd.Scene``) being edited,
the JSON file it lives in, and the edits as undoable commands.

Every edit builds the whole next scene as plain data and validates it with the same pydantic
model that ``engine.io.crowd.read_scene`` uses, so what the editor accepts the engine can read
and a building over a group's spawn point, a box off the ground or two camera keyframes at one
time are refused (``SceneError``, with the field and the reason). An accepted edit is one
``SceneEdit`` (the scene before and after, as JSON). An edit changes only the scene it was made
on: applied, it takes the scene from its "before" to its "after" and reverted back, and on any
other scene (another file, one changed since, one the editor has left) it does nothing. So the
autosaved history replays safely onto a file that already holds it, or holds more, and an
undo on the window's one history, pressed after the editor moved to another scene, leaves both
scenes as they are. Each change is written back to the scene file atomically.

The scene also carries the social-force parameters its groups walk with (``social_force``:
absent for the model's defaults, else every parameter, fitted to a real recording or set by
hand), and each group may walk at a speed of its own; these are edits like any other, so a
saved scene simulates the same way in the editor (``simulate``) and in ``c2r``. The simulation
is NumPy, so the panel runs it, and the fit, on its thread pool.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from engine.atomic import write_bytes_atomic
from engine.crowd.social_force import SocialForceParams, scene_params, simulate_scene
from engine.io.crowd import Scene, Tracks, read_scene, scene_to_json, tracks_from_array
from panels.lab.model import Events

BOX_KINDS = ("buildings", "obstacles")
ITEM_NAMES = {"buildings": "building", "obstacles": "obstacle", "groups": "group",
              "camera": "camera keyframe"}
DEFAULT_BOX_SIZE_M = {"buildings": (4.0, 4.0), "obstacles": (1.0, 1.0)}
DEFAULT_BOX_HEIGHT_M = {"buildings": 8.0, "obstacles": 1.0}
DEFAULT_SCENE = {
    "ground": {"size": [30, 24]},
    "camera": [{"t_s": 0, "position": [0, -18, 8], "look_at": [0, 0, 0], "fov_deg": 45}],
    "duration_s": 12,
    "fps": 5,
}

# the social force's parameters as the editor shows them: name -> (label, unit)
PARAMETERS = {
    "desired_speed_mps": ("desired speed", "m/s"),
    "desired_speed_std_mps": ("speed spread", "m/s"),
    "relaxation_s": ("relaxation time", "s"),
    "agent_strength": ("interaction strength", "m/s²"),
    "agent_range_m": ("interaction range", "m"),
    "radius_m": ("body radius", "m"),
    "obstacle_strength": ("wall strength", "m/s²"),
    "obstacle_range_m": ("wall range", "m"),
    "anisotropy": ("push from behind", "×"),
    "max_speed_factor": ("top speed", "× desired"),
}


class SceneError(ValueError):
    """An edit that would make the scene invalid; the message names the field and why."""


def validated(data: dict) -> Scene:
    try:
        return Scene.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "scene"
        raise SceneError(f"{field}: {error['msg'].removeprefix('Value error, ')}") from None


@dataclass
class SceneEdit:
    """One edit of the scene: the whole scene before and after (scenes are small)."""

    label: str
    before: dict
    after: dict

    def apply(self, model: SceneModel) -> None:
        model.change(self.before, self.after)

    def revert(self, model: SceneModel) -> None:
        model.change(self.after, self.before)

    def to_json(self) -> dict:
        return {"type": "scene_edit", "label": self.label, "before": self.before,
                "after": self.after}


def decode(data: dict) -> SceneEdit:
    if data.get("type") != "scene_edit":
        raise ValueError(f"not a scene edit: {data.get('type')!r}")
    return SceneEdit(data["label"], data["before"], data["after"])


class SceneModel:
    """The edited scene and its file. ``propose_*`` return a ``SceneEdit`` (validated, not
    applied); the panel pushes it through the host's undo stack, which calls ``apply``."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.scene = read_scene(self.path) if self.path is not None and self.path.is_file() \
            else validated(DEFAULT_SCENE)
        self.events = Events("scene")
        self.closed = False

    def close(self) -> None:
        """The editor left this scene: its edits, still on the window's history, no longer
        change it (an undo must not rewrite a file the user no longer sees)."""
        self.closed = True

    @property
    def document(self) -> str:
        return f"crowd-scene:{self.path or ''}"

    @property
    def data(self) -> dict:
        return self.scene.model_dump(mode="json")

    def change(self, made_on: dict, data: dict) -> None:
        """Take ``data`` if the scene is ``made_on`` (an edit's one side); a closed model, a
        scene that already is ``data`` or another scene stay as they are."""
        if self.closed:
            return
        current = self.data
        if current != _normal(data) and current == _normal(made_on):
            self.set_data(data)

    def set_data(self, data: dict) -> None:
        """Take a scene (already validated by the edit that carries it) and save it. The file
        is written last, just before the history autosaves the edit: a crash between the two
        leaves a file the saved edits do not lead to (reopened, it asks about them), so the
        redraw must not sit in that gap (the soak's kills met it once in ten)."""
        self.scene = validated(data)
        self.events.emit("scene", scene=self.scene)
        self.save()

    def save(self, path: str | Path | None = None) -> Path | None:
        """Write the scene JSON atomically (to ``path``, which becomes the scene's file)."""
        if path is not None:
            self.path = Path(path)
        if self.path is None:
            return None
        return write_bytes_atomic(self.path, scene_to_json(self.scene).encode())

    # -- edits -----------------------------------------------------------------------------

    def _edit(self, label: str, change) -> SceneEdit:
        before = self.data
        after = copy.deepcopy(before)
        change(after)
        validated(after)
        return SceneEdit(label, before, after)

    def propose_add_box(self, kind: str, center: tuple[float, float],
                        size: tuple[float, float] | None = None,
                        height: float | None = None) -> SceneEdit:
        _check_kind(kind)
        box = {"center": _xy(center), "size": list(size or DEFAULT_BOX_SIZE_M[kind]),
               "height": float(height or DEFAULT_BOX_HEIGHT_M[kind])}
        return self._edit(f"Add {kind[:-1]}", lambda d: d[kind].append(box))

    def propose_move_box(self, kind: str, index: int, center: tuple[float, float]
                         ) -> SceneEdit:
        return self._edit(f"Move {kind[:-1]} {index + 1}",
                          lambda d: _box(d, kind, index).update(center=_xy(center)))

    def propose_resize_box(self, kind: str, index: int, size: tuple[float, float],
                           center: tuple[float, float] | None = None) -> SceneEdit:
        def change(d: dict) -> None:
            box = _box(d, kind, index)
            box["size"] = _xy(size)
            if center is not None:
                box["center"] = _xy(center)

        return self._edit(f"Resize {kind[:-1]} {index + 1}", change)

    def propose_spawn_group(self, count: int, center: tuple[float, float],
                            goal: tuple[float, float], size: tuple[float, float] = (4.0, 4.0),
                            speed_mps: float | None = None) -> SceneEdit:
        """A group of ``count`` people; without ``speed_mps`` it walks at the scene's
        desired speed."""
        group = {"count": int(count), "spawn_center": _xy(center), "spawn_size": _xy(size),
                 "goal": _xy(goal), "speed_mps": _speed(speed_mps)}
        return self._edit(f"Spawn a group of {count}", lambda d: d["groups"].append(group))

    def propose_group_count(self, group: int, count: int) -> SceneEdit:
        def change(d: dict) -> None:
            d["groups"][_index(d["groups"], group, "groups")]["count"] = int(count)

        return self._edit(f"Group {group + 1}: {count} people", change)

    def propose_group_speed(self, group: int, speed_mps: float | None) -> SceneEdit:
        """A group's own walking speed, or None: the scene's desired speed."""
        def change(d: dict) -> None:
            d["groups"][_index(d["groups"], group, "groups")]["speed_mps"] = _speed(speed_mps)

        words = "the scene's speed" if speed_mps is None else f"{speed_mps:g} m/s"
        return self._edit(f"Group {group + 1}: walk at {words}", change)

    def propose_social_force(self, values: dict[str, float] | None, fitted_to: str = ""
                             ) -> SceneEdit:
        """Walk the scene with these parameters (every one of ``PARAMETERS``), fitted to the
        recording ``fitted_to`` or set by hand; None: the model's defaults."""
        if values is None:
            return self._set_social_force(None, "", "Social force: default parameters")
        return self._set_social_force(values, fitted_to, f"Social force: fitted to {fitted_to}"
                                      if fitted_to else "Social force: parameters set by hand")

    def propose_parameter(self, name: str, value: float) -> SceneEdit:
        """One social-force parameter set by hand (the others kept as they are)."""
        if name not in PARAMETERS:
            raise SceneError(f"unknown social-force parameter {name!r}: choose one of "
                             f"{', '.join(PARAMETERS)}")
        label, unit = PARAMETERS[name]
        return self._set_social_force({**self.params.to_dict(), name: value}, "",
                                      f"Social force: {label} {value:g} {unit}")

    def _set_social_force(self, values: dict[str, float] | None, fitted_to: str, label: str
                          ) -> SceneEdit:
        block = None if values is None else {
            "fitted_to": fitted_to, **{name: float(values[name]) for name in PARAMETERS}}
        return self._edit(label, lambda d: d.update(social_force=block))

    def propose_path(self, group: int, points: list[tuple[float, float]]) -> SceneEdit:
        """A drawn path for a group: the clicked points in order, the last one its goal."""
        if not points:
            raise SceneError("a path needs at least one point (its goal)")

        def change(d: dict) -> None:
            target = d["groups"][_index(d["groups"], group, "groups")]
            target["waypoints"] = [_xy(p) for p in points[:-1]]
            target["goal"] = _xy(points[-1])

        return self._edit(f"Draw the path of group {group + 1}", change)

    def propose_camera_keyframe(self, frame: int, position: tuple[float, float, float],
                                look_at: tuple[float, float, float]) -> SceneEdit:
        """A camera keyframe at ``frame`` (replacing one at the same time), kept in time order."""
        t_s = round(frame / self.scene.fps, 6)
        key = {"t_s": t_s, "position": [float(v) for v in position],
               "look_at": [float(v) for v in look_at]}

        def change(d: dict) -> None:
            others = [k for k in d["camera"] if abs(k["t_s"] - t_s) > 1e-9]
            old = next((k for k in d["camera"] if abs(k["t_s"] - t_s) <= 1e-9), None)
            if old is not None:
                key["fov_deg"] = old["fov_deg"]
            d["camera"] = sorted([*others, key], key=lambda k: k["t_s"])

        return self._edit(f"Camera keyframe at frame {frame + 1}", change)

    def propose_delete(self, kind: str, index: int) -> SceneEdit:
        """Remove a building, obstacle, group or camera keyframe (a scene keeps one keyframe)."""
        if kind not in ITEM_NAMES:
            raise SceneError(f"unknown kind {kind!r}: choose one of {', '.join(ITEM_NAMES)}")
        return self._edit(f"Delete {ITEM_NAMES[kind]} {index + 1}",
                          lambda d: d[kind].pop(_index(d[kind], index, kind)))

    # -- queries ---------------------------------------------------------------------------

    @property
    def params(self) -> SocialForceParams:
        """The parameters the scene's groups walk with."""
        return scene_params(self.scene)

    @property
    def params_source(self) -> str:
        """Where the parameters come from: "default", "manual" or the recording's name."""
        block = self.scene.social_force
        return "default" if block is None else block.fitted_to or "manual"

    def item_at(self, x: float, y: float, pick_m: float = 1.0) -> tuple[str, int] | None:
        """(kind, index) of what a click at ground point (x, y) means: a camera keyframe within
        ``pick_m``, else the topmost box (obstacles over buildings), else a group's spawn
        area."""
        keys = np.array([k.position[:2] for k in self.scene.camera])
        near = np.hypot(*(keys - (x, y)).T)
        if near.min() <= pick_m:
            return "camera", int(near.argmin())
        for kind in reversed(BOX_KINDS):
            for index in reversed(range(len(getattr(self.scene, kind)))):
                x0, y0, x1, y1 = getattr(self.scene, kind)[index].bounds()
                if x0 <= x <= x1 and y0 <= y <= y1:
                    return kind, index
        for index, group in enumerate(self.scene.groups):
            (cx, cy), (w, d) = group.spawn_center, group.spawn_size
            if abs(x - cx) <= w / 2 and abs(y - cy) <= d / 2:
                return "groups", index
        return None

    def camera_path(self, samples_per_second: float = 4.0) -> np.ndarray:
        """(S, 3) camera positions along the interpolated path over the scene's duration."""
        times = np.linspace(0, self.scene.duration_s,
                            max(2, int(self.scene.duration_s * samples_per_second) + 1))
        return np.stack([self.camera_at(t)[0] for t in times])

    def camera_at_frame(self, frame: int) -> tuple[np.ndarray, np.ndarray]:
        """(position, look_at) of the camera at frame ``frame`` (the renderer's interpolation)."""
        return self.camera_at(frame / self.scene.fps)

    def camera_at(self, t_s: float) -> tuple[np.ndarray, np.ndarray]:
        from engine.crowd.render import camera_at

        camera = camera_at(self.scene.camera, t_s, 2, 2)
        return camera.position, camera.look_at


def simulate(scene: Scene, seed: int = 0) -> Tracks:
    """The scene's groups walked by the social force with the scene's parameters."""
    sim, _ = simulate_scene(scene, scene_params(scene), seed)
    return tracks_from_array(sim.positions, scene.fps, alive=sim.alive)


def _normal(data: dict) -> dict:
    """A scene's JSON as ``SceneModel.data`` has it (defaults filled in, tuples as lists)."""
    return validated(data).model_dump(mode="json")


def _check_kind(kind: str) -> None:
    if kind not in BOX_KINDS:
        raise SceneError(f"unknown box kind {kind!r}: choose {' or '.join(BOX_KINDS)}")


def _index(items: list, index: int, name: str) -> int:
    if not 0 <= index < len(items):
        raise SceneError(f"{name}[{index}] does not exist ({len(items)} in the scene)")
    return index


def _box(data: dict, kind: str, index: int) -> dict[str, Any]:
    _check_kind(kind)
    return data[kind][_index(data[kind], index, kind)]


def _xy(point) -> list[float]:
    x, y = point
    return [float(x), float(y)]


def _speed(speed_mps: float | None) -> float | None:
    return None if speed_mps is None else float(speed_mps)
