"""The crowd previewer's actions as commands (``studio.commands``): open a clip, tracks or a
scene; the clock, the comparison (side by side or wiped), overlays and tabs; the exports; the
undoable edits (the prompt, a person's path, every scene edit); the c2r methods.

Elements are named as the panel shows them: clips by their name over the view, people by the
id drawn beside them and a sample by the file's own frame number, frames of the clock counted
from 1 as the frame label counts them, scene elements by their label ("building 2", "group 1",
"camera keyframe at frame 11") and places in metres; so a logged command means the same on
another file with the same names. Each edit is one ``EditCommand`` pushed through
``host.push_edit`` (undo, redo, autosave). The functions act on a ``CrowdState``: the model,
the host, the scene being edited (``SceneSlot``) and, for the commands that only change what
is drawn or need the window's rendering (exports of the view), the panel's view. Tests build
a state without a window and call ``registry.run``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from engine import provenance
from engine.io import FormatError, detect
from engine.io.crowd import Tracks, read_tracks
from panels.crowd.model import CrowdModel, MoveWaypoint, SetPrompt, decode
from panels.crowd.scene import PARAMETERS, SceneEdit, SceneError, SceneModel, simulate
from panels.widgets.panel_state import forget_edits
from studio.commands import Command, CommandArgs, CommandRegistry, Refusal, registry_for

SCOPE = "crowd"
GENERATE_METHOD = "c2r.generate"
SIMULATE_METHOD = "c2r.simulate"
TRACK_FORMATS = ("trajectories",)
SCENE_FORMATS = ("crowd-scene",)
READ_ERRORS = (FormatError, ValueError, KeyError, OSError)
MODES = {"side by side": "Side by side", "wipe": "Wipe"}   # argument -> the mode box's text
TABS = {"track map": "Track map", "scene editor": "Scene editor", "camera 3d": "Camera 3D"}
BOX_KIND = {"building": "buildings", "obstacle": "obstacles"}
ITEM_KIND = {**BOX_KIND, "group": "groups"}
ITEM = re.compile(r"^(building|obstacle|group) (\d+)$")
KEYFRAME = re.compile(r"^camera keyframe at frame (\d+)$")
MAX_SIMULATED_FRAMES = 2000

Point = tuple[float, float]
Point3 = tuple[float, float, float]


def scratch_folder(host: Any) -> Path:
    """The workspace's ``crowd`` folder (or a run folder when the host has no workspace)."""
    workspace = getattr(host, "workspace_path", None)
    return Path(workspace()) / "crowd" if callable(workspace) else Path(
        host.run_dir("crowd-edits"))


class SceneSlot:
    """The scene being edited, its documents on the window's history and the selection (a
    (kind, index) pair). The scene editor draws it; without a window the commands use it
    alone. ``taken`` hears of another scene (the editor rewires its events)."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.model = SceneModel()
        self.documents = {self.model.document}  # of the scene's steps ("Save as" adds one)
        self.selection: tuple[str, int] | None = None
        self.taken: Callable[[SceneModel], None] | None = None

    def take(self, model: SceneModel) -> None:
        """Edit ``model`` from now on; the scene before leaves the history."""
        self.leave()
        self.model = model
        self.documents = {model.document}
        self.selection = None
        if self.taken is not None:
            self.taken(model)

    def leave(self) -> None:
        """The scene stops changing (a step still on the history must not rewrite its file)
        and its steps leave the window's history, so Undo reaches the edits still shown."""
        self.model.close()
        forget_edits(self.host, *sorted(self.documents))
        self.documents = set()

    def push(self, propose: Callable[[], SceneEdit]) -> str:
        """Validate and push one edit (its label returned); an edit that would make the scene
        invalid is refused with the reason and changes nothing."""
        try:
            edit = propose()
        except SceneError as exc:
            raise Refusal(str(exc)) from None
        self.save_if_new()
        self.documents.add(self.model.document)
        self.host.push_edit(self.model.document, edit, self.model)
        return edit.label

    def save_if_new(self) -> Path:
        """The scene's file, written to the workspace first when it has none yet."""
        if self.model.path is None:
            self.model.save(scratch_folder(self.host) / "scene.json")
        return self.model.path

    def open(self, path: str | Path) -> int:
        """Edit the scene in ``path``; its autosaved edits are replayed (how many)."""
        self.take(SceneModel(path))
        restore = getattr(self.host, "restore_edits", None)
        from panels.crowd.scene import decode as decode_scene

        return restore(self.model.document, self.model, decode_scene) if callable(restore) \
            else 0


@dataclass
class CrowdState:
    """What the crowd commands act on. ``view`` (the ``CrowdPanel``) is needed only by the
    commands that draw or render the view; ``editor`` (the ``SceneEditor``) runs simulations
    and fits on the panel's thread pool; ``submit`` sends a job (the view's ``PanelJobs``)."""

    model: CrowdModel
    host: Any
    view: Any = None
    editor: Any = None
    scene: SceneSlot = None  # type: ignore[assignment]  # made from the host when not given
    checkpoint: str | None = None       # the last c2r.train checkpoint folder
    submit: Callable[[str, dict, dict], None] | None = None
    opened: list[str] = field(default_factory=list)   # files opened, newest last

    def __post_init__(self) -> None:
        if self.scene is None:
            self.scene = SceneSlot(self.host)

    def push(self, edit: SetPrompt | MoveWaypoint) -> None:
        """Apply ``edit`` through the tracks' history; one that does not fit is refused."""
        try:
            self.host.push_edit(self.model.document, edit, self.model)
        except (ValueError, KeyError) as exc:
            raise Refusal(str(exc.args[0]) if exc.args else str(exc)) from None

    def take_tracks(self, tracks: Tracks) -> None:
        """Show ``tracks`` in place of the open ones. The edits of those (moved people, the
        prompt) leave the window's history, whose undo would otherwise move people of these
        tracks or fail on them; they stay autosaved, replayed when that file opens again."""
        forget_edits(self.host, self.model.document)
        if self.view is not None:
            self.view.drop_pick()
        self.model.set_prompt("")  # the prompt is an edit of the tracks' document
        self.model.set_tracks(tracks)

    def run(self, method: str, params: dict, inputs: dict) -> None:
        submit = self.submit or (lambda m, p, i: self.host.submit_job(m, p, i))
        submit(method, params, inputs)


# -- arguments ---------------------------------------------------------------------------------


class OpenArgs(CommandArgs):
    path: str = Field(description="a video, frame folder, .npy frames, trajectories or a scene")
    name: str | None = Field(None, description="the clip's name (default: the file's stem)")


class PathArgs(CommandArgs):
    path: str = Field(description="the file's path")


class FolderArgs(CommandArgs):
    folder: str = Field(description="the folder the frames are written into")
    first_frame: int | None = Field(None, ge=1, description="first frame (default: the "
                                                            "range boxes')")
    last_frame: int | None = Field(None, ge=1, description="last frame, included")


class VideoArgs(CommandArgs):
    path: str = Field(description="an .mp4 or .gif file")
    first_frame: int | None = Field(None, ge=1, description="first frame (default: the "
                                                            "range boxes')")
    last_frame: int | None = Field(None, ge=1, description="last frame, included")


class FigureArgs(CommandArgs):
    path: str = Field(description="the figure's file: .png, .svg or .pdf")
    dpi: int = Field(192, ge=36, le=1200, description="resolution of a PNG")
    caption: bool = Field(False, description="the frame's metrics line under the figure")


class FrameArgs(CommandArgs):
    frame: int = Field(ge=1, description="the frame, counted from 1 as the frame label does")


class StepArgs(CommandArgs):
    frames: int = Field(1, description="frames forward (negative: back)")


class OnArgs(CommandArgs):
    on: bool = Field(True, description="on or off")


class ModeArgs(CommandArgs):
    mode: Literal["side by side", "wipe"] = Field(description="how the clips are compared")


class WipeClipsArgs(CommandArgs):
    left: str = Field(description="the clip left of the divider, by name")
    right: str = Field(description="the clip right of the divider, by name")


class WipeArgs(CommandArgs):
    position: float = Field(ge=0.0, le=1.0, description="the divider, 0-1 of the width")


class TabArgs(CommandArgs):
    tab: Literal["track map", "scene editor", "camera 3d"] = Field(description="the tab")


class PromptArgs(CommandArgs):
    text: str = Field(description="the prompt of the next generation (empty: the scene's)")


class PersonArgs(CommandArgs):
    person: int = Field(description="the person's id, as drawn beside them")
    frame: int = Field(description="the sample's frame number, as the tracks file has it")
    to: Point = Field(description="the new place (x, y) in the tracks' units")


class RangeArgs(CommandArgs):
    first_frame: int | None = Field(None, ge=1, description="first frame (default: the "
                                                            "range boxes')")
    last_frame: int | None = Field(None, ge=1, description="last frame, included")


class AddBoxArgs(CommandArgs):
    kind: Literal["building", "obstacle"] = Field(description="what to place")
    at_m: Point = Field(description="its centre (x, y) in metres")
    size_m: Point | None = Field(None, description="width and depth (default: 4x4 m "
                                                   "building, 1x1 m obstacle)")
    height_m: float | None = Field(None, gt=0, description="its height")


class ItemArgs(CommandArgs):
    item: str = Field(description="'building 2', 'obstacle 1', 'group 3' or 'camera keyframe "
                                  "at frame 11', as the editor labels it")


class MoveBoxArgs(CommandArgs):
    item: str = Field(description="'building 2' or 'obstacle 1'")
    to_m: Point = Field(description="its new centre (x, y) in metres")


class ResizeBoxArgs(CommandArgs):
    item: str = Field(description="'building 2' or 'obstacle 1'")
    size_m: Point = Field(description="width and depth in metres")
    at_m: Point | None = Field(None, description="its new centre (default: where it is)")


class SpawnArgs(CommandArgs):
    count: int = Field(ge=1, le=5000, description="people in the group")
    at_m: Point = Field(description="the spawn area's centre (x, y) in metres")
    goal_m: Point = Field(description="where they walk to")
    speed_mps: float | None = Field(None, ge=0, description="their speed (none: the scene's)")


class GroupCountArgs(CommandArgs):
    group: str = Field(description="'group 1', as the map labels it")
    count: int = Field(ge=1, le=5000, description="people in it")


class GroupSpeedArgs(CommandArgs):
    group: str = Field(description="'group 1', as the map labels it")
    speed_mps: float | None = Field(None, ge=0, description="its speed (none: the scene's)")


class PathPointsArgs(CommandArgs):
    group: str = Field(description="'group 1', as the map labels it")
    points_m: list[Point] = Field(min_length=1, description="the points walked through, in "
                                                            "order; the last is the goal")


class KeyframeArgs(CommandArgs):
    frame: int = Field(ge=1, description="the frame of the keyframe, counted from 1")
    position_m: Point3 = Field(description="the camera (x, y, height) in metres")
    look_at_m: Point3 = Field(description="the point it looks at (x, y, z)")


class SelectArgs(CommandArgs):
    item: str | None = Field(None, description="as ItemArgs; none clears the selection")


class RecordingArgs(CommandArgs):
    recording: str = Field(description="a real recording in metres (ETH/UCY text, CSV)")


class ParameterArgs(CommandArgs):
    name: Literal[tuple(PARAMETERS)] = Field(description="the social-force parameter")  # type: ignore[valid-type]
    value: float = Field(description="its value, in the unit its box shows")


# -- lookups: names the user sees -> the model's rows ------------------------------------------


def _view(state: CrowdState, what: str) -> Any:
    if state.view is None:
        raise Refusal(f"cannot {what} without the panel's window")
    return state.view


def _tracks(state: CrowdState) -> Tracks:
    if state.model.tracks is None:
        raise Refusal("no trajectories are open: open a tracks file first")
    return state.model.tracks


def _tracks_file(state: CrowdState) -> str:
    path = state.model.tracks.path if state.model.tracks is not None else ""
    return Path(path).name if path else "the simulated tracks"


def _clip(state: CrowdState, name: str) -> str:
    if name not in state.model.clips:
        names = ", ".join(state.model.clips) or "none is open"
        raise Refusal(f"no clip named {name!r} (clips: {names})")
    return name


def _frame_index(state: CrowdState, frame: int) -> int:
    last = state.model.frame_count
    if not 1 <= frame <= last:
        raise Refusal(f"frame {frame} is outside 1..{last}")
    return frame - 1


def _range(state: CrowdState, first: int | None, last: int | None) -> tuple[int, int]:
    """(start, stop) indices of frames ``first``..``last`` (1-based, inclusive); unset ends
    are the view's range boxes (without a view: the whole clip)."""
    default = state.view.frame_range() if state.view is not None else (0, state.model.frame_count)
    start = default[0] if first is None else first - 1
    stop = default[1] if last is None else last
    count = state.model.frame_count
    if not 0 <= start < stop <= count:
        raise Refusal(f"frames {start + 1} to {stop} are not a range of 1..{count}")
    return start, stop


def _scene_file(state: CrowdState) -> str:
    path = state.scene.model.path
    return path.name if path is not None else "the new scene"


def item_name(scene: Any, kind: str, index: int) -> str:
    """How the editor labels an element: 'building 2', 'group 1', 'camera keyframe at frame
    11' (keyframes by their time, the others by their place in the scene's list)."""
    if kind == "camera":
        return f"camera keyframe at frame {round(scene.camera[index].t_s * scene.fps) + 1}"
    singular = {"buildings": "building", "obstacles": "obstacle", "groups": "group"}[kind]
    return f"{singular} {index + 1}"


def find_item(state: CrowdState, name: str, kinds: tuple[str, ...] = ("buildings", "obstacles",
                                                                       "groups", "camera")
              ) -> tuple[str, int]:
    """(kind, index) of the element labelled ``name``; refused when the scene lacks it."""
    scene = state.scene.model.scene
    found = ITEM.match(name.strip())
    keyframe = KEYFRAME.match(name.strip())
    if found and ITEM_KIND[found[1]] in kinds:
        kind, index = ITEM_KIND[found[1]], int(found[2]) - 1
        items = getattr(scene, kind)
        if not 0 <= index < len(items):
            raise Refusal(f"{name} does not exist ({len(items)} {kind} in {_scene_file(state)})")
        return kind, index
    if keyframe and "camera" in kinds:
        for index in range(len(scene.camera)):
            if item_name(scene, "camera", index) == name.strip():
                return "camera", index
        frames = ", ".join(item_name(scene, "camera", i).rsplit(" ", 1)[1]
                           for i in range(len(scene.camera)))
        raise Refusal(f"{name} does not exist (keyframes at frames {frames} in "
                      f"{_scene_file(state)})")
    wanted = " or ".join(_LABELS[kind] for kind in kinds)
    raise Refusal(f"{name!r} names no element: give {wanted}")


_LABELS = {"buildings": "'building N'", "obstacles": "'obstacle N'", "groups": "'group N'",
           "camera": "'camera keyframe at frame N'"}


def _group(state: CrowdState, name: str) -> int:
    return find_item(state, name, ("groups",))[1]


def _box(state: CrowdState, name: str) -> tuple[str, int]:
    return find_item(state, name, ("buildings", "obstacles"))


# -- opening -----------------------------------------------------------------------------------


def _read(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except READ_ERRORS as exc:
        raise Refusal(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args
                      else str(exc)) from None


def open_file(state: CrowdState, args: OpenArgs) -> str:
    """A clip (video, frame folder, .npy frames), trajectories (their autosaved edits
    replayed) or a crowd scene (the scene editor opens it)."""
    path = Path(args.path)
    kind = _read(lambda: detect(path).name) if path.suffix.lower() != ".npy" else None
    if kind in SCENE_FORMATS:
        return open_scene(state, PathArgs(path=str(path)))
    if kind in TRACK_FORMATS:
        tracks = _read(lambda: read_tracks(path))
        state.take_tracks(tracks)
        restore = getattr(state.host, "restore_edits", None)
        restored = restore(state.model.document, state.model, decode) if callable(restore) \
            else 0
        state.opened.append(str(path))
        return f"{path.name}: {restored} saved edit(s) restored" if restored else \
            f"Opened {path.name}: {len(tracks.ids)} people"
    _read(lambda: state.model.load_clip(args.name or path.stem, path))
    state.opened.append(str(path))
    return f"Opened {path.name} as the clip {args.name or path.stem}"


def open_scene(state: CrowdState, args: PathArgs) -> str:
    path = Path(args.path)
    if not path.is_file():
        raise Refusal(f"{path}: no such scene file")
    restored = _read(lambda: state.scene.open(path))  # read before the scene shown is left
    if state.view is not None:
        state.view.show_tab("scene editor")
    return f"{path.name}" + (f": {restored} saved edit(s) restored" if restored else "")


def new_scene(state: CrowdState, _args: None) -> str:
    """An empty scene, saved in the workspace (``crowd/scene-N.json``) so it can render."""
    folder = scratch_folder(state.host)
    number = 1
    while (folder / f"scene-{number}.json").exists():
        number += 1
    model = SceneModel()
    try:
        model.save(folder / f"scene-{number}.json")
    except OSError as exc:
        raise Refusal(f"{folder}: {exc}") from None
    state.scene.take(model)
    return f"new scene: {model.path}"


def save_scene_as(state: CrowdState, args: PathArgs) -> str:
    """Write the scene to another file, which its later edits change."""
    try:
        state.scene.model.save(args.path)
    except OSError as exc:
        raise Refusal(f"{args.path}: {exc}") from None
    return f"saved {args.path}"


# -- the clock and what is shown ---------------------------------------------------------------


def set_frame(state: CrowdState, args: FrameArgs) -> bool:
    state.model.set_frame(_frame_index(state, args.frame))
    return True


def step(state: CrowdState, args: StepArgs) -> bool:
    state.model.step(args.frames)
    return True


def play(state: CrowdState, args: OnArgs) -> bool:
    _view(state, "play").play(args.on)
    return True


def set_mode(state: CrowdState, args: ModeArgs) -> bool:
    _view(state, "compare the clips").set_mode(MODES[args.mode])
    return True


def set_wipe_clips(state: CrowdState, args: WipeClipsArgs) -> bool:
    view = _view(state, "wipe")
    view.set_wipe_clips(_clip(state, args.left), _clip(state, args.right))
    return True


def set_wipe_position(state: CrowdState, args: WipeArgs) -> bool:
    _view(state, "move the divider").set_wipe_position(args.position)
    return True


def set_overlays(state: CrowdState, args: OnArgs) -> bool:
    _view(state, "draw overlays").overlays_box.setChecked(args.on)
    return True


def show_tab(state: CrowdState, args: TabArgs) -> bool:
    """A side tab; where OpenGL cannot draw, the camera tab says why in itself."""
    _view(state, "show a tab").show_tab(args.tab)
    return True


def show_parameters(state: CrowdState, args: OnArgs) -> bool:
    if state.editor is None:
        raise Refusal("cannot show the parameters without the scene editor")
    state.editor.params_toggle.setChecked(args.on)
    return True


# -- exports -----------------------------------------------------------------------------------


def export_figure(state: CrowdState, args: FigureArgs) -> str:
    view = _view(state, "export the view")
    try:
        written = view.export_figure(args.path, args.dpi, args.caption)
    except (OSError, ValueError) as exc:
        raise Refusal(f"{args.path}: {exc}" if args.path not in str(exc) else str(exc)) \
            from None
    return f"Exported {written} ({args.dpi} dpi, provenance inside)"


def export_video(state: CrowdState, args: VideoArgs) -> str:
    view = _view(state, "export the view")
    if Path(args.path).suffix.lower() not in (".mp4", ".gif"):
        raise Refusal(f"{args.path}: choose .mp4 or .gif")
    if not state.model.clips and state.model.tracks is None:
        raise Refusal("nothing to export: open a clip or tracks first")
    frames = _range(state, args.first_frame, args.last_frame)
    try:
        view.write_video(args.path, frames)
    except (OSError, ValueError) as exc:
        raise Refusal(str(exc)) from None
    return f"Exporting {args.path} (frames {frames[0] + 1} to {frames[1]})…"


def export_frames(state: CrowdState, args: FolderArgs) -> str:
    view = _view(state, "export the view")
    if not state.model.clips and state.model.tracks is None:
        raise Refusal("nothing to export: open a clip or tracks first")
    folder = Path(args.folder)
    if folder.exists() and not folder.is_dir():
        raise Refusal(f"{folder}: not a folder")
    frames = _range(state, args.first_frame, args.last_frame)
    try:
        view.write_frames(folder, frames)
    except (OSError, ValueError) as exc:
        raise Refusal(str(exc)) from None
    return f"Exporting frames {frames[0] + 1} to {frames[1]} into {folder}…"


def write_tracks_csv(model: CrowdModel, path: str | Path, record: dict) -> Path:
    """The tracks as CSV with their provenance sidecar, the sidecar first: once the CSV is
    there (written atomically) its record is too."""
    target = Path(path)
    sidecar = provenance.write_sidecar(target, record)
    try:
        return model.export_tracks_csv(target)
    except BaseException:
        sidecar.unlink(missing_ok=True)
        raise


def export_tracks(state: CrowdState, args: PathArgs) -> str:
    """The (edited) trajectories as CSV, with a provenance sidecar; written on the worker
    thread when the panel is open."""
    _tracks(state)
    if state.view is not None:
        state.view.write_tracks(args.path)
        return f"Exporting {args.path}…"
    record = provenance.record([str(state.model.tracks.path)] if state.model.tracks.path
                               else [], view={"panel": SCOPE, "prompt": state.model.prompt})
    try:
        written = write_tracks_csv(state.model, args.path, record)
    except (OSError, ValueError) as exc:
        raise Refusal(f"{args.path}: {exc}") from None
    return f"Exported {written}"


# -- track edits -------------------------------------------------------------------------------


def set_prompt(state: CrowdState, args: PromptArgs) -> bool:
    if args.text == state.model.prompt:
        raise Refusal(f"the prompt is {args.text!r} already")
    state.push(SetPrompt(args.text, state.model.prompt))
    return True


def move_person(state: CrowdState, args: PersonArgs) -> bool:
    """Move a person's sample at one frame (one undoable edit)."""
    _tracks(state)
    try:
        previous = state.model.waypoint(args.person, args.frame)
    except ValueError as exc:
        raise Refusal(f"{exc} in {_tracks_file(state)}") from None
    state.push(MoveWaypoint(args.person, args.frame, (float(args.to[0]), float(args.to[1])),
                            previous))
    return True


# -- engine jobs -------------------------------------------------------------------------------


def regenerate(state: CrowdState, args: RangeArgs) -> bool:
    """``c2r.generate`` with the prompt, the (edited) tracks and the frame range."""
    if state.checkpoint is None:
        raise Refusal("train a renderer first (c2r.train): regenerating needs its checkpoint")
    start, stop = _range(state, args.first_frame, args.last_frame)
    inputs = {"checkpoint": state.checkpoint}
    tracks = state.model.tracks
    if tracks is not None and tracks.units == "m":
        try:
            inputs["tracks"] = str(state.model.export_tracks_csv(
                scratch_folder(state.host) / "edited_tracks.csv"))
        except OSError as exc:
            raise Refusal(f"cannot write the edited tracks: {exc}") from None
    state.run(GENERATE_METHOD, {"prompt": state.model.prompt, "start_frame": start,
                                "max_frames": max(1, stop - start)}, inputs)
    return True


def simulate_demo(state: CrowdState, _args: None) -> bool:
    """``c2r.simulate`` on its demo scene, fitted to ETH/UCY tracks."""
    state.run(SIMULATE_METHOD, {}, {})
    return True


def render_scene(state: CrowdState, _args: None) -> bool:
    """``c2r.simulate`` on the edited scene: its coarse clip and tracks open here."""
    try:
        path = state.scene.save_if_new()
    except OSError as exc:
        raise Refusal(f"cannot save the scene: {exc}") from None
    frames = state.scene.model.scene.frames
    state.run(SIMULATE_METHOD, {"fit": False, "max_frames": min(frames, MAX_SIMULATED_FRAMES)},
              {"scene": str(path)})
    return True


def simulate_scene(state: CrowdState, _args: None) -> str:
    """The social force on the scene as it is now (on the thread pool when the editor is
    open); its tracks become the panel's."""
    if not state.scene.model.scene.groups:
        raise Refusal(f"{_scene_file(state)} has no group to walk: spawn one first")
    if state.editor is not None:
        return state.editor.start_simulation()
    tracks = simulate(state.scene.model.scene)
    state.take_tracks(tracks)
    return f"simulated {len(tracks.ids)} people"


# -- scene edits -------------------------------------------------------------------------------


def add_box(state: CrowdState, args: AddBoxArgs) -> str:
    model = state.scene.model
    return state.scene.push(lambda: model.propose_add_box(BOX_KIND[args.kind], args.at_m,
                                                          args.size_m, args.height_m))


def move_box(state: CrowdState, args: MoveBoxArgs) -> str:
    kind, index = _box(state, args.item)
    model = state.scene.model
    return state.scene.push(lambda: model.propose_move_box(kind, index, args.to_m))


def resize_box(state: CrowdState, args: ResizeBoxArgs) -> str:
    kind, index = _box(state, args.item)
    model = state.scene.model
    return state.scene.push(lambda: model.propose_resize_box(kind, index, args.size_m,
                                                             args.at_m))


def spawn_group(state: CrowdState, args: SpawnArgs) -> str:
    model = state.scene.model
    return state.scene.push(lambda: model.propose_spawn_group(
        args.count, args.at_m, args.goal_m, speed_mps=args.speed_mps))


def set_group_count(state: CrowdState, args: GroupCountArgs) -> str:
    group = _group(state, args.group)
    model = state.scene.model
    if model.scene.groups[group].count == args.count:
        raise Refusal(f"{args.group} has {args.count} people already")
    return state.scene.push(lambda: model.propose_group_count(group, args.count))


def set_group_speed(state: CrowdState, args: GroupSpeedArgs) -> str:
    group = _group(state, args.group)
    model = state.scene.model
    return state.scene.push(lambda: model.propose_group_speed(group, args.speed_mps))


def draw_path(state: CrowdState, args: PathPointsArgs) -> str:
    group = _group(state, args.group)
    model = state.scene.model
    return state.scene.push(lambda: model.propose_path(group, list(args.points_m)))


def add_camera_keyframe(state: CrowdState, args: KeyframeArgs) -> str:
    model = state.scene.model
    return state.scene.push(lambda: model.propose_camera_keyframe(
        args.frame - 1, args.position_m, args.look_at_m))


def delete_scene_item(state: CrowdState, args: ItemArgs) -> str:
    kind, index = find_item(state, args.item)
    if state.scene.selection == (kind, index):
        state.scene.selection = None
    model = state.scene.model
    return state.scene.push(lambda: model.propose_delete(kind, index))


def select_scene_item(state: CrowdState, args: SelectArgs) -> bool:
    state.scene.selection = find_item(state, args.item) if args.item is not None else None
    if state.editor is not None:
        state.editor.redraw()
    return True


def reset_social_force(state: CrowdState, _args: None) -> str:
    model = state.scene.model
    if model.params_source == "default":
        raise Refusal("the scene walks with the model's default parameters already")
    if state.editor is not None:
        state.editor.cancel_fit()
    return state.scene.push(lambda: model.propose_social_force(None))


def fit_social_force(state: CrowdState, args: RecordingArgs) -> str:
    """Fit the parameters to a recording (on the thread pool when the editor is open); the fit
    becomes one edit of the scene open when it was asked for."""
    path = Path(args.recording)
    if not path.is_file():
        raise Refusal(f"{path}: no such recording")
    if state.editor is not None:
        state.editor.fit_to(path)
        return f"fitting to {path.name}…"
    from engine.crowd.social_force import fit_to_file

    fit = _read(lambda: fit_to_file(path))
    model = state.scene.model
    return state.scene.push(lambda: model.propose_social_force(fit.params.to_dict(), path.name))


def set_social_force_parameter(state: CrowdState, args: ParameterArgs) -> str:
    model = state.scene.model
    if state.editor is not None:
        state.editor.cancel_fit()
    return state.scene.push(lambda: model.propose_parameter(args.name, args.value))


# -- the registry ------------------------------------------------------------------------------

COMMANDS = [
    Command("crowd.open", "Open a clip, tracks or a scene", "Open a video, frame folder, .npy "
            "frames, trajectories or a crowd scene in the crowd previewer.", open_file,
            OpenArgs, menu="Crowd/Open…"),
    Command("crowd.set_frame", "Go to a frame", "Show every clip and the tracks at a frame "
            "(counted from 1).", set_frame, FrameArgs),
    Command("crowd.step", "Step frames", "Step the clock forward or back by some frames.",
            step, StepArgs),
    Command("crowd.play", "Play or pause", "Play the clips in step at their rate, or pause.",
            play, OnArgs),
    Command("crowd.set_mode", "Compare side by side or wiped", "Show the clips side by side "
            "or two of them wiped at a divider.", set_mode, ModeArgs),
    Command("crowd.set_wipe_clips", "Choose the wiped clips", "The clips left and right of "
            "the wipe's divider, by name.", set_wipe_clips, WipeClipsArgs),
    Command("crowd.set_wipe_position", "Move the wipe divider", "Put the divider at a "
            "fraction of the width.", set_wipe_position, WipeArgs),
    Command("crowd.set_overlays", "Show or hide overlays in exports", "Burn the tracks with "
            "their ids into PNG, MP4 and GIF exports.", set_overlays, OnArgs),
    Command("crowd.show_tab", "Show a side tab", "The track map, the scene editor or the "
            "camera path in 3-D.", show_tab, TabArgs),
    Command("crowd.show_social_force_parameters", "Show the social-force parameters",
            "Unfold or fold the parameter boxes of the scene editor.", show_parameters,
            OnArgs),
    Command("crowd.export_figure", "Export the frame", "The current frame as PNG, SVG or PDF, "
            "provenance inside.", export_figure, FigureArgs),
    Command("crowd.export_video", "Export the view as video", "The view over a frame range as "
            "MP4 or GIF, with a provenance sidecar.", export_video, VideoArgs),
    Command("crowd.export_frames", "Export PNG frames", "The view over a frame range as "
            "frame_0001.png…, provenance inside each.", export_frames, FolderArgs),
    Command("crowd.export_tracks", "Export tracks as CSV", "The (edited) trajectories as CSV "
            "with a provenance sidecar.", export_tracks, PathArgs),
    Command("crowd.set_prompt", "Change the prompt", "The prompt of the next generation.",
            set_prompt, PromptArgs, undoable=True),
    Command("crowd.move_person", "Move a person", "Move a person's sample at one frame of the "
            "tracks (a drag on the track map).", move_person, PersonArgs, undoable=True),
    Command("crowd.regenerate", "Regenerate frames", "c2r.generate with the prompt and the "
            "edited tracks over a frame range (needs a c2r.train checkpoint).", regenerate,
            RangeArgs),
    Command("crowd.simulate_demo", "Simulate the demo scene", "c2r.simulate on its demo "
            "scene, fitted to ETH/UCY tracks.", simulate_demo),
    Command("crowd.open_scene", "Open a crowd scene", "Edit a crowd scene JSON in the scene "
            "editor (its autosaved edits replayed).", open_scene, PathArgs),
    Command("crowd.new_scene", "New crowd scene", "An empty scene, saved in the workspace.",
            new_scene),
    Command("crowd.save_scene_as", "Save the scene as", "Write the scene to another file; "
            "later edits change that file.", save_scene_as, PathArgs),
    Command("crowd.add_box", "Place a building or obstacle", "A box at a point of the scene "
            "(metres).", add_box, AddBoxArgs, undoable=True),
    Command("crowd.move_box", "Move a building or obstacle", "Move a box to a new centre.",
            move_box, MoveBoxArgs, undoable=True),
    Command("crowd.resize_box", "Resize a building or obstacle", "Give a box another width "
            "and depth (and centre).", resize_box, ResizeBoxArgs, undoable=True),
    Command("crowd.spawn_group", "Spawn a group", "A group of people walking from a spawn "
            "area to a goal.", spawn_group, SpawnArgs, undoable=True),
    Command("crowd.set_group_count", "Set a group's size", "How many people a group has.",
            set_group_count, GroupCountArgs, undoable=True),
    Command("crowd.set_group_speed", "Set a group's speed", "A group's own walking speed, or "
            "the scene's.", set_group_speed, GroupSpeedArgs, undoable=True),
    Command("crowd.draw_path", "Draw a group's path", "The points a group walks through; the "
            "last is its goal.", draw_path, PathPointsArgs, undoable=True),
    Command("crowd.add_camera_keyframe", "Add a camera keyframe", "The camera's place and aim "
            "at a frame (replacing a keyframe at that time).", add_camera_keyframe,
            KeyframeArgs, undoable=True),
    Command("crowd.delete_scene_item", "Delete a scene element", "Remove a building, "
            "obstacle, group or camera keyframe.", delete_scene_item, ItemArgs, undoable=True),
    Command("crowd.select_scene_item", "Select a scene element", "Highlight an element of the "
            "scene by its label (none: clear).", select_scene_item, SelectArgs),
    Command("crowd.reset_social_force", "Use the default social force", "Walk the scene with "
            "the model's default parameters.", reset_social_force, undoable=True),
    Command("crowd.fit_social_force", "Fit the social force to a recording", "Fit the "
            "parameters to real tracks in metres (seconds, off the main thread).",
            fit_social_force, RecordingArgs, undoable=True),
    Command("crowd.set_social_force_parameter", "Set a social-force parameter", "One "
            "parameter by hand (the others kept).", set_social_force_parameter,
            ParameterArgs, undoable=True),
    Command("crowd.simulate_scene", "Simulate the scene", "Walk the scene's groups with the "
            "social force; the tracks play on the clock.", simulate_scene),
    Command("crowd.render_scene", "Render the scene coarsely", "c2r.simulate with this scene: "
            "coarse RGB, depth and silhouettes along the camera path.", render_scene),
]


# the commands of the scene editor (its status line says their outcome)
SCENE_COMMANDS = frozenset(command.id for command in COMMANDS if command.fn in (
    open_scene, new_scene, save_scene_as, add_box, move_box, resize_box, spawn_group,
    set_group_count, set_group_speed, draw_path, add_camera_keyframe, delete_scene_item,
    select_scene_item, reset_social_force, fit_social_force, set_social_force_parameter,
    simulate_scene, render_scene))


def register(registry: CommandRegistry) -> CommandRegistry:
    """Add the crowd commands (again, for a panel rebuilt in the same window)."""
    return registry.add_all(COMMANDS)


def own_registry(host: Any) -> CommandRegistry:
    """The window's registry with the crowd commands in it (``studio.commands.registry_for``:
    the scene editor and the panel share it)."""
    return registry_for(host, COMMANDS)
