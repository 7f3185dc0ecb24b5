"""The crowd panel's scene editor: the scene seen from above, edited with the mouse.

Tools: Select (click a box, a group's spawn area or a camera keyframe; drag a box to move it
or its corner handle to resize it; Delete removes the selection), Building and Obstacle
(click places a box), Group (click the spawn point, then the goal), Path (click points, then
"Finish path": the selected group walks through them, the last is its goal) and Camera
(click the camera's position, then the point it looks at: a keyframe at the clock's current
frame, at the height chosen). Every change is one ``SceneEdit`` through ``host.push_edit``
(undoable, autosaved) and is written to the scene JSON; an edit that would make the scene
invalid is refused with the reason. "Save scene as…" keeps the scene's history (its edits now
write the new file); opening another scene or a new one, or closing the editor, closes the scene
before and takes its steps off the window's history (``host.forget_edits``; its autosaved edits
stay, replayed when it is opened again), so Undo never changes, nor spends a press on, a scene
the editor no longer shows.

With the Select tool, the "people" and "speed" boxes edit the selected group (otherwise they
set the next group spawned; a speed of "scene's" walks at the social force's desired speed).
"Social force" chooses the parameters the groups walk with: the model's defaults, a fit to a
real ETH/UCY recording (on the thread pool: NumPy and SciPy, no torch) or values typed in the
parameter boxes; the choice is an edit too, stored in the scene JSON.

"Simulate" walks the scene's groups with the social force on the panel's thread pool and
draws the tracks (which also become the panel's tracks, so they play on the clock);
"Render coarse" submits ``c2r.simulate`` with the scene file, whose coarse clip and
trajectories open in the panel when the job ends.

Every action is a command of ``panels.crowd.commands`` (``crowd.add_box``, ``crowd.move_box``,
``crowd.spawn_group``…): a click or a drag is turned into the command naming the element by
its label ("building 2") and places in metres, and run through the registry, which reports a
refusal (the editor's status line says it). The scene, its documents and the selection live
in the commands' ``SceneSlot``; the editor draws them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.crowd.social_force import FitResult, fit_to_file, shared_recordings
from engine.io.crowd import SocialForce, Tracks
from panels.crowd.commands import (
    SCENE_COMMANDS,
    SCOPE,
    CrowdState,
    SceneSlot,
    item_name,
    own_registry,
)
from panels.crowd.model import CrowdModel
from panels.crowd.scene import (
    BOX_KINDS,
    PARAMETERS,
    SceneEdit,
    SceneModel,
    simulate,
)
from studio.command_widgets import connect, connect_button, mark_argument
from studio.commands import CommandRegistry, Invocation, Refusal

TOOLS = ("Select", "Building", "Obstacle", "Group", "Path", "Camera")
BOX_PENS = {"buildings": (200, 170, 140), "obstacles": (150, 150, 220)}
SELECTED_PEN = (255, 220, 60)
KEYFRAME_PICK_M = 1.0
PARAMETER_COLUMNS = 3  # label and box pairs per row of the social-force grid
FIT_FILE = "fit to a tracks file…"
MIN_MAP_HEIGHT_PX = 110


class FitCancelled(Exception):
    """A fit nobody waits for any more (another choice, another scene, the editor closed)."""


class SceneEditor(QWidget):
    """``run_in_pool(work, done, failed)`` runs NumPy work off the main thread;
    ``current_frame()`` is the panel's clock; ``show_tracks(tracks)`` hands a simulation to the
    panel; ``render(scene_path)`` submits the coarse render when the editor is shown alone
    (in the panel, ``state.submit`` does). ``commands`` and ``state`` are the panel's registry
    and command target; alone, the editor makes its own. ``changed`` fires after every
    redraw (a new scene, an edit, a simulation)."""

    changed = Signal()

    def __init__(self, host: Any, run_in_pool: Callable, current_frame: Callable[[], int],
                 show_tracks: Callable[[Tracks], None], render: Callable[[Path], None],
                 parent: QWidget | None = None, commands: CommandRegistry | None = None,
                 state: CrowdState | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.run_in_pool = run_in_pool
        self.current_frame = current_frame
        self.show_tracks = show_tracks
        self.commands = commands if commands is not None else own_registry(host)
        self._alone = state is None
        if state is None:  # shown alone: the commands act on this editor's scene
            state = CrowdState(CrowdModel(), host, scene=SceneSlot(host),
                               submit=lambda method, params, inputs: render(
                                   Path(inputs["scene"])))
            self.commands.bind(SCOPE, state)
        self.state = state
        state.editor = self
        self.slot = state.scene
        self.slot.taken = self._on_taken
        self._unsubscribe_scene = self.model.events.connect("scene", self._on_scene)
        self._scene_shown = self.model.scene  # what the selection's index refers to
        self._stop_listening = self.commands.listen(self._on_invocation)
        self.pending: list[tuple[float, float]] = []  # clicks of a group, path or camera
        self.tracks: Tracks | None = None
        self._items: list[Any] = []
        self._simulation = 0
        self._fit = 0
        self._fitting = (-1, "")  # (the fit's number, its recording) while one runs
        self._fit_note = ("", "")  # (recording, how well the fit to it predicts)
        self.recordings = shared_recordings()  # real tracks the social force can be fitted to
        self._build()
        self.redraw()

    @property
    def model(self) -> SceneModel:
        """The scene edited (the commands' ``SceneSlot`` holds it)."""
        return self.slot.model

    @property
    def selection(self) -> tuple[str, int] | None:
        return self.slot.selection

    @selection.setter
    def selection(self, value: tuple[str, int] | None) -> None:
        self.slot.selection = value

    # -- layout ----------------------------------------------------------------------------

    def _build(self) -> None:
        files = QHBoxLayout()
        new_button = QPushButton("New scene")
        connect_button(new_button, self.commands, "crowd.new_scene")
        files.addWidget(new_button)
        for text, command_id, ask in (("Open scene…", "crowd.open_scene", self.choose_scene),
                                      ("Save scene as…", "crowd.save_scene_as",
                                       self.choose_save_path)):
            button = QPushButton(text)
            mark_argument(button, command_id)  # asks for the file, then runs the command
            button.clicked.connect(ask)
            files.addWidget(button)
        self.simulate_button = QPushButton("Simulate")
        self.simulate_button.setToolTip("the social force on this scene, with its parameters "
                                        "(Social force)")
        connect_button(self.simulate_button, self.commands, "crowd.simulate_scene")
        self.render_button = QPushButton("Render coarse")
        self.render_button.setToolTip("c2r.simulate with this scene: coarse RGB, depth and "
                                      "silhouettes along the camera path")
        connect_button(self.render_button, self.commands, "crowd.render_scene")
        files.addWidget(self.simulate_button)
        files.addWidget(self.render_button)
        files.addStretch(1)
        tools = QHBoxLayout()
        self.tool_box = QComboBox()
        self.tool_box.addItems(TOOLS)
        self.tool_box.currentTextChanged.connect(lambda _: self.cancel_pending())
        self.count_box = QSpinBox()
        self.count_box.setRange(1, 5000)
        self.count_box.setValue(10)
        self.count_box.setKeyboardTracking(False)  # one edit when typing ends, not per digit
        self.count_box.setToolTip("people in the selected group (Select tool), else in the "
                                  "next group spawned")
        self.count_box.valueChanged.connect(self._count_changed)
        self.speed_box = QDoubleSpinBox()
        self.speed_box.setRange(0.0, 4.0)
        self.speed_box.setSingleStep(0.1)
        self.speed_box.setSuffix(" m/s")
        self.speed_box.setKeyboardTracking(False)
        self.speed_box.setToolTip("walking speed of the selected group (Select tool), else of "
                                  "the next group spawned; lowest: the scene's desired speed")
        self.speed_box.valueChanged.connect(self._speed_changed)
        self.group_box = QSpinBox()
        self.group_box.setRange(1, 1)
        self.group_box.setToolTip("the group a drawn path belongs to")
        self.height_box = QDoubleSpinBox()
        self.height_box.setRange(0.5, 200)
        self.height_box.setValue(8.0)
        self.height_box.setSuffix(" m")
        self.height_box.setToolTip("camera height of a new keyframe")
        self.finish_button = QPushButton("Finish path")
        connect_button(self.finish_button, self.commands, "crowd.draw_path", self._path_args)
        self.delete_button = QPushButton("Delete")
        connect_button(self.delete_button, self.commands, "crowd.delete_scene_item",
                       self._delete_args)
        for label, widget in (("tool", self.tool_box), ("people", self.count_box),
                              ("speed", self.speed_box), ("group", self.group_box),
                              ("camera height", self.height_box)):
            tools.addWidget(QLabel(label))
            tools.addWidget(widget)
        tools.addWidget(self.finish_button)
        tools.addWidget(self.delete_button)
        tools.addStretch(1)
        self.plot = pg.PlotWidget()
        self.plot.setAspectLocked(True)
        self.plot.setMinimumHeight(MIN_MAP_HEIGHT_PX)  # the locked aspect needs some height
        self.plot.setLabel("bottom", "x (m)")
        self.plot.setLabel("left", "y (m)")
        self.plot.scene().sigMouseClicked.connect(self._on_click)
        self.track_lines = pg.PlotDataItem([], [], pen=pg.mkPen((120, 200, 140, 120), width=1),
                                           connect="finite")
        self.people = pg.ScatterPlotItem(size=6, brush=pg.mkBrush(90, 220, 120))
        self.plot.addItem(self.track_lines)
        self.plot.addItem(self.people)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addLayout(files)
        layout.addLayout(tools)
        layout.addLayout(self._build_social_force())
        layout.addWidget(self.parameters)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.status)

    def _build_social_force(self) -> QHBoxLayout:
        """The source of the parameters (a combo box) and, folded, one box per parameter."""
        self.params_box = QComboBox()
        self.params_box.setToolTip("the social-force parameters this scene walks with")
        self.params_box.activated.connect(self._params_chosen)
        self.params_toggle = QToolButton()
        self.params_toggle.setText("parameters")
        self.params_toggle.setCheckable(True)
        self.params_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.params_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        connect(self.params_toggle.toggled, self.params_toggle, self.commands,
                "crowd.show_social_force_parameters", lambda on: {"on": on})
        self.params_toggle.toggled.connect(self._show_parameters)
        self.params_status = QLabel("")
        self.params_status.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(QLabel("social force"))
        row.addWidget(self.params_box)
        row.addWidget(self.params_toggle)
        row.addWidget(self.params_status, 1)
        self.parameters = QWidget()
        grid = QGridLayout(self.parameters)
        grid.setContentsMargins(0, 0, 0, 0)
        self.param_spins: dict[str, QDoubleSpinBox] = {}
        for index, (name, (label, unit)) in enumerate(PARAMETERS.items()):
            spin = QDoubleSpinBox()
            spin.setDecimals(4 if name == "agent_strength" else 3)
            spin.setRange(*_bounds(name, spin.decimals()))
            spin.setStepType(QAbstractSpinBox.StepType.AdaptiveDecimalStepType)
            spin.setSuffix(f" {unit}")
            spin.setKeyboardTracking(False)
            spin.valueChanged.connect(lambda value, n=name: self.set_parameter(n, value))
            row_index, column = divmod(index, PARAMETER_COLUMNS)
            grid.addWidget(QLabel(label), row_index, 2 * column)
            grid.addWidget(spin, row_index, 2 * column + 1)
            self.param_spins[name] = spin
        self.parameters.setVisible(False)
        return row

    def _show_parameters(self, shown: bool) -> None:
        self.parameters.setVisible(shown)
        self.params_toggle.setArrowType(Qt.ArrowType.DownArrow if shown
                                        else Qt.ArrowType.RightArrow)

    # -- files -----------------------------------------------------------------------------

    def _run(self, command_id: str, **args: Any) -> bool:
        """Run a command as the user's action: True when it ran; a refusal is reported."""
        return self.commands.trigger(command_id, **args) is not None

    def _on_invocation(self, invocation: Invocation) -> None:
        """A scene command's outcome in the editor's status line: its refusal (a dragged box
        snaps back), or what it did."""
        if invocation.command.id not in SCENE_COMMANDS:
            return
        if invocation.refused:
            self.status.setText(f"refused: {invocation.refused}")
            self.redraw()
        elif isinstance(invocation.result, str):
            self.status.setText(invocation.result)

    def open_scene(self, path: str | os.PathLike) -> bool:
        """Edit the scene in ``path`` (``crowd.open_scene``); its autosaved edits, if any, are
        restored. A file that cannot be read is reported and the scene shown stays."""
        return self._run("crowd.open_scene", path=str(path))

    def new_scene(self) -> bool:
        """An empty scene, saved in the workspace (``crowd.new_scene``)."""
        return self._run("crowd.new_scene")

    def save_as(self, path: str | os.PathLike) -> bool:
        return self._run("crowd.save_scene_as", path=str(path))

    def _on_taken(self, model: SceneModel) -> None:
        """The slot took another scene: follow its events, drop what was for the one before
        (a fit or a simulation still running, clicks of a group or path, tracks)."""
        self._unsubscribe_scene()
        self._fit += 1
        self._simulation += 1
        self._unsubscribe_scene = model.events.connect("scene", self._on_scene)
        self._scene_shown = model.scene
        self.pending, self.tracks = [], None
        self.redraw()
        self.plot.autoRange()

    def choose_scene(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open crowd scene", "", "Scenes (*.json)")
        if path:
            self.open_scene(path)

    def choose_save_path(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the scene", "scene.json",
                                              "Scenes (*.json)")
        if path:
            self.save_as(path)

    # -- edits -----------------------------------------------------------------------------

    def push(self, propose: Callable[[], SceneEdit]) -> bool:
        """Validate and push one edit (a fit's result, tests); a refused edit is reported and
        changes nothing."""
        try:
            label = self.slot.push(propose)
        except Refusal as exc:
            self.status.setText(f"refused: {exc}")
            self.host.show_error("Invalid scene edit", str(exc))
            self.redraw()  # a dragged box snaps back
            return False
        self.status.setText(label)
        return True

    def click(self, x: float, y: float) -> None:
        """A click at ground point (x, y) with the current tool, run as its command."""
        tool = self.tool_box.currentText()
        if tool in ("Building", "Obstacle"):
            self._run("crowd.add_box", kind=tool.lower(), at_m=[x, y])
        elif tool == "Select":
            self.select_at(x, y)
        elif tool == "Path":
            self.pending.append((x, y))
            self.status.setText(f"path: {len(self.pending)} point(s); Finish path when done")
            self.redraw()
        elif not self.pending:  # Group or Camera: the first of two clicks
            self.pending = [(x, y)]
            self.status.setText("now click the goal" if tool == "Group"
                                else "now click where the camera looks")
            self.redraw()
        else:
            first, self.pending = self.pending[0], []
            if tool == "Group":
                self._run("crowd.spawn_group", count=self.count_box.value(), at_m=list(first),
                          goal_m=[x, y], speed_mps=self._chosen_speed())
            else:
                self._run("crowd.add_camera_keyframe", frame=self.current_frame() + 1,
                          position_m=[*first, self.height_box.value()], look_at_m=[x, y, 0.0])

    def _path_args(self) -> dict | None:
        """The clicked points as ``crowd.draw_path``'s; None (said why) without any."""
        points, self.pending = self.pending, []
        if not points:
            self.status.setText("click the path's points with the Path tool first")
            self.redraw()
            return None
        return {"group": f"group {self.group_box.value()}",
                "points_m": [list(point) for point in points]}

    def finish_path(self) -> bool:
        args = self._path_args()
        return args is not None and self._run("crowd.draw_path", **args)

    def cancel_pending(self) -> None:
        self.pending = []
        self.redraw()

    def select_at(self, x: float, y: float) -> bool:
        """Select what a click at (x, y) picks (``crowd.select_scene_item`` by its label)."""
        picked = self.model.item_at(x, y, KEYFRAME_PICK_M)
        return self._run("crowd.select_scene_item",
                         item=item_name(self.model.scene, *picked) if picked else None)

    def selected_name(self) -> str | None:
        """The selection as the editor labels it ('building 2'), or None."""
        if self.selection is None:
            return None
        return item_name(self.model.scene, *self.selection)

    def _on_scene(self, scene) -> None:
        """An edit, its undo or its redo changed the scene: the selection follows its
        element, or is cleared when that element is gone, before anything is drawn."""
        before, self._scene_shown = self._scene_shown, scene
        self.selection = followed(self.selection, before, scene)
        self.redraw()

    def _delete_args(self) -> dict | None:
        name = self.selected_name()
        if name is None:
            self.status.setText("select a building, obstacle, group or keyframe first")
            return None
        return {"item": name}

    def delete_selection(self) -> bool:
        args = self._delete_args()
        return args is not None and self._run("crowd.delete_scene_item", **args)

    def selected_group(self) -> int | None:
        """The group the people and speed boxes edit: the selection, with the Select tool."""
        if self.tool_box.currentText() != "Select" or self.selection is None:
            return None
        kind, index = self.selection
        return index if kind == "groups" and index < len(self.model.scene.groups) else None

    def _count_changed(self, count: int) -> None:
        group = self.selected_group()
        if group is not None and count != self.model.scene.groups[group].count:
            self._run("crowd.set_group_count", group=f"group {group + 1}", count=count)

    def _speed_changed(self) -> None:
        group = self.selected_group()
        if group is not None and self._chosen_speed() != self.model.scene.groups[group].speed_mps:
            self._run("crowd.set_group_speed", group=f"group {group + 1}",
                      speed_mps=self._chosen_speed())

    def _chosen_speed(self) -> float | None:
        """The speed box's value; None at its lowest ("scene's")."""
        value = self.speed_box.value()
        return None if value <= self.speed_box.minimum() else round(value, 2)

    # -- the social force ------------------------------------------------------------------

    def _params_chosen(self, index: int) -> None:
        """The user chose in the combo box: a fit still running is not wanted any more."""
        self.cancel_fit()
        choice = self.params_box.itemData(index)
        if choice == FIT_FILE:
            path, _ = QFileDialog.getOpenFileName(self, "Fit the social force to tracks", "",
                                                  "Trajectories (*.txt *.csv *.tsv)")
            if path:
                self._run("crowd.fit_social_force", recording=path)
            else:
                self._sync_params()
        elif getattr(choice, "name", choice) == self.model.params_source:
            self._sync_params()  # what the scene has already
        elif choice == "default":
            self._run("crowd.reset_social_force")
        else:  # a shared recording
            self._run("crowd.fit_social_force", recording=str(choice))

    def cancel_fit(self) -> None:
        """A fit still running is not wanted any more (it stops at its next step)."""
        self._fit += 1

    def fit_to(self, path: Path) -> None:
        """Fit the parameters to the recording ``path`` on the thread pool; the fit becomes
        one edit of the scene open when it was asked for."""
        self._fit += 1
        generation, model = self._fit, self.model
        self._fitting = (generation, path.name)
        self.params_status.setText(f"fitting to {path.name}…")

        def check_cancelled() -> None:
            if generation != self._fit:
                raise FitCancelled

        def done(fit: FitResult) -> None:
            if generation != self._fit:
                return
            self._fitting = (-1, "")
            self._fit_note = (path.name, f"fitted on {fit.samples} one-step samples: velocity "
                              f"error {fit.loss_default:.3f} (defaults) → "
                              f"{fit.loss_fitted:.3f} (m/s)²")
            self.push(lambda: model.propose_social_force(fit.params.to_dict(), path.name))

        def failed(message: str) -> None:
            if generation == self._fit:
                self._fitting = (-1, "")
                self.host.show_error("Cannot fit the social force", message)
                self._sync_params()

        self.run_in_pool(lambda: fit_to_file(path, check_cancelled=check_cancelled), done,
                         failed)

    def set_parameter(self, name: str, value: float) -> None:
        """A parameter typed in its box (one edit; the parameters become "set by hand")."""
        if not np.isclose(value, getattr(self.model.params, name),
                          atol=0.5 * 10 ** -self.param_spins[name].decimals()):
            self._run("crowd.set_social_force_parameter", name=name, value=value)

    def _sync_params(self) -> None:
        """The combo box, the parameter boxes and the speed box's "scene's" say what the
        scene has now (after an edit, an undo, another scene)."""
        source, params = self.model.params_source, self.model.params
        if self._fitting[0] == self._fit:
            self.params_status.setText(f"fitting to {self._fitting[1]}…")
        else:
            self.params_status.setText(self._fit_note[1] if self._fit_note[0] == source else "")
        choices = [("model defaults", "default")]
        choices += [(f"fitted to {path.name}", path) for path in self.recordings]
        if source not in ("default", "manual") and source not in [
                getattr(data, "name", None) for _, data in choices]:
            choices.append((f"fitted to {source}", source))
        if source == "manual":
            choices.append(("set by hand", "manual"))
        choices.append((FIT_FILE, FIT_FILE))
        current = next(i for i, (_, data) in enumerate(choices)
                       if data == source or getattr(data, "name", None) == source)
        self.params_box.blockSignals(True)
        self.params_box.clear()
        for text, data in choices:
            self.params_box.addItem(text, data)
        self.params_box.setCurrentIndex(current)
        self.params_box.blockSignals(False)
        for name, spin in self.param_spins.items():
            spin.blockSignals(True)
            spin.setValue(getattr(params, name))
            spin.blockSignals(False)
        self.speed_box.setSpecialValueText(f"scene's ({params.desired_speed_mps:.2f})")

    def _sync_group_boxes(self) -> None:
        """The people and speed boxes show the selected group."""
        group = self.selected_group()
        if group is None:
            return
        chosen = self.model.scene.groups[group]
        for box, value in ((self.count_box, chosen.count),
                           (self.speed_box, chosen.speed_mps or self.speed_box.minimum())):
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)

    def drag_box(self, kind: str, index: int, center: tuple[float, float],
                 size: tuple[float, float]) -> bool:
        """A box dragged (moved) or its handle pulled (resized) to ``center`` and ``size``:
        ``crowd.move_box`` or ``crowd.resize_box`` naming it by its label. A box that no longer
        exists is refused (no edit), the selection cleared."""
        boxes = getattr(self.model.scene, kind, None) if kind in BOX_KINDS else None
        name = item_name(self.model.scene, kind, index) if kind in BOX_KINDS else \
            f"{kind} {index + 1}"
        if boxes is None or not 0 <= index < len(boxes):
            self.selection = None
            return self._run("crowd.move_box", item=name, to_m=list(center))
        self.selection = (kind, index)
        if np.allclose(size, boxes[index].size):
            return self._run("crowd.move_box", item=name, to_m=list(center))
        return self._run("crowd.resize_box", item=name, size_m=list(size), at_m=list(center))

    def _box_dragged(self, kind: str, index: int, roi: pg.RectROI) -> None:
        (x0, y0), (w, d) = roi.pos(), roi.size()
        # after the ROI's own signal handling: the redraw replaces the ROI
        QTimer.singleShot(0, self, lambda: self.drag_box(kind, index,
                                                         (x0 + w / 2, y0 + d / 2), (w, d)))

    def _on_click(self, event) -> None:
        """Every left click on the map, also one that a marker under it accepted."""
        if event.button() != Qt.MouseButton.LeftButton:
            return
        point = self.plot.getPlotItem().vb.mapSceneToView(event.scenePos())
        self.click(point.x(), point.y())

    # -- simulation ------------------------------------------------------------------------

    def simulate(self) -> bool:
        """The social force on the scene as it is now (``crowd.simulate_scene``)."""
        return self._run("crowd.simulate_scene")

    def start_simulation(self) -> str:
        """Simulate on the thread pool; the tracks, once walked, are drawn and handed to the
        panel (a scene changed in the meantime drops them)."""
        self._simulation += 1
        generation, scene = self._simulation, self.model.scene

        def done(tracks: Tracks) -> None:
            if generation == self._simulation:
                self.tracks = tracks
                self.status.setText(f"simulated {len(tracks.ids)} people")
                self.show_tracks(tracks)
                self.redraw()

        def failed(message: str) -> None:
            if generation == self._simulation:
                self.status.setText(f"simulation failed: {message}")

        self.run_in_pool(lambda: simulate(scene), done, failed)
        return f"simulating {scene.agents} people for {scene.frames} frames…"

    def render(self) -> bool:
        """``crowd.render_scene``: the coarse render of the scene, saved first if new."""
        return self._run("crowd.render_scene")

    # -- drawing ---------------------------------------------------------------------------

    def redraw(self) -> None:
        for item in self._items:
            self.plot.removeItem(item)
            item.deleteLater()  # now, on this thread: never later by the GC on a worker's
        self._items = []
        scene = self.model.scene
        self.group_box.setMaximum(max(1, len(scene.groups)))
        self._sync_params()
        self._sync_group_boxes()
        width, depth = scene.ground.size
        self._add(pg.PlotDataItem(*_rect_outline(-width / 2, -depth / 2, width, depth),
                                  pen=pg.mkPen((160, 160, 160), style=Qt.PenStyle.DashLine)))
        for kind in BOX_KINDS:
            for index, box in enumerate(getattr(scene, kind)):
                x0, y0, x1, y1 = box.bounds()
                chosen = self.selection == (kind, index)
                roi = pg.RectROI((x0, y0), (x1 - x0, y1 - y0), movable=True, removable=False,
                                 pen=pg.mkPen(SELECTED_PEN if chosen else BOX_PENS[kind],
                                              width=2))
                roi.sigRegionChangeFinished.connect(
                    lambda r, k=kind, i=index: self._box_dragged(k, i, r))
                self._add(roi)
        for index, group in enumerate(scene.groups):
            (cx, cy), (sw, sd) = group.spawn_center, group.spawn_size
            color = tuple(int(255 * c) for c in group.color)
            area = SELECTED_PEN if self.selection == ("groups", index) else color
            self._add(pg.PlotDataItem(*_rect_outline(cx - sw / 2, cy - sd / 2, sw, sd),
                                      pen=pg.mkPen(area, style=Qt.PenStyle.DotLine)))
            route = np.array([group.spawn_center, *group.waypoints, group.goal])
            self._add(pg.PlotDataItem(route[:, 0], route[:, 1], pen=pg.mkPen(color, width=2),
                                      symbol="o", symbolSize=5, symbolBrush=color))
            speed = "" if group.speed_mps is None else f", {group.speed_mps:g} m/s"
            label = pg.TextItem(f"group {index + 1} ({group.count}{speed})", color=color)
            label.setPos(cx, cy)
            self._add(label)
        self._draw_camera()
        if self.pending:
            points = np.array(self.pending)
            self._add(pg.PlotDataItem(points[:, 0], points[:, 1], symbol="x",
                                      pen=pg.mkPen((255, 255, 255), style=Qt.PenStyle.DashLine)))
        self._draw_tracks()
        self.changed.emit()

    def _draw_camera(self) -> None:
        path = self.model.camera_path()
        self._add(pg.PlotDataItem(path[:, 0], path[:, 1], pen=pg.mkPen((240, 120, 200))))
        for index, key in enumerate(self.model.scene.camera):
            chosen = self.selection == ("camera", index)
            color = SELECTED_PEN if chosen else (240, 120, 200)
            self._add(pg.PlotDataItem([key.position[0], key.look_at[0]],
                                      [key.position[1], key.look_at[1]],
                                      pen=pg.mkPen(color, style=Qt.PenStyle.DashLine)))
            self._add(pg.ScatterPlotItem([key.position[0]], [key.position[1]], symbol="t",
                                         size=12, brush=pg.mkBrush(color)))

    def _draw_tracks(self) -> None:
        if self.tracks is None:
            self.track_lines.setData([], [])
            self.people.setData([], [])
            return
        pieces = [np.vstack([xy, [np.nan, np.nan]])
                  for _, xy in self.tracks.per_pedestrian().values()]
        lines = np.vstack(pieces)
        self.track_lines.setData(lines[:, 0], lines[:, 1])
        self.show_frame(self.current_frame())

    def show_frame(self, index: int) -> None:
        """The simulated people at frame ``index`` (the clock's)."""
        if self.tracks is None:
            return
        frames = self.tracks.frames
        _, xy = self.tracks.positions_at(int(frames[min(index, len(frames) - 1)]))
        self.people.setData(xy[:, 0], xy[:, 1])

    def _add(self, item: Any) -> None:
        self.plot.addItem(item)
        self._items.append(item)

    def _leave_scene(self) -> None:
        """The scene stops changing and its steps leave the window's history (the slot's
        ``leave``); the editor stops following it."""
        self._unsubscribe_scene()
        self._unsubscribe_scene = lambda: None  # closing twice leaves nothing more
        self.slot.leave()

    def closeEvent(self, event) -> None:
        self._leave_scene()
        self._stop_listening()
        if self._alone:
            self.commands.unbind(SCOPE, self.state)
        self._fit += 1  # a running fit stops at its next step
        super().closeEvent(event)


def followed(selection: tuple[str, int] | None, before, after) -> tuple[str, int] | None:
    """Where ``selection`` (kind, index into scene ``before``) is in scene ``after``: the same
    index while that list kept its length (the element moved, resized or was renamed), else
    the index of an element equal to it (one before it was added or removed), else None."""
    if selection is None:
        return None
    kind, index = selection
    old, new = getattr(before, kind), getattr(after, kind)
    if len(old) == len(new):
        return selection if index < len(new) else None
    if index >= len(old):
        return None
    return next(((kind, i) for i, item in enumerate(new) if item == old[index]), None)


def _rect_outline(x0: float, y0: float, width: float, depth: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    xs = np.array([x0, x0 + width, x0 + width, x0, x0])
    ys = np.array([y0, y0, y0 + depth, y0 + depth, y0])
    return xs, ys


def _bounds(name: str, decimals: int) -> tuple[float, float]:
    """The range the scene file allows a parameter (``SocialForce``'s own limits)."""
    low, high = 0.0, 1e6
    for rule in SocialForce.model_fields[name].metadata:
        if hasattr(rule, "ge"):
            low = rule.ge
        elif hasattr(rule, "gt"):
            low = rule.gt + 10 ** -decimals
        elif hasattr(rule, "le"):
            high = rule.le
    return low, high
