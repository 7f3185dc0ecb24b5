"""The lab panel: run any method the engine lists, watch it live, inspect what it made.

Left, the methods grouped by paper. Middle, the chosen method's parameter form (from its
JSON Schema), its inputs, the seed, Run / Cancel, and "Reproduce claim" with its profile
(smoke, cpu, gpu: the profile's settings shown under it; a setting changed in the reproduce
method's form makes the run exploratory, said there before the run) and "Open report". Right,
tabs: live metric curves (one plot per metric, x = step), the run's artifacts (plots, arrays,
tables, JSON; files dropped on the lab show here too), the claim (PASS, FAIL or INCONCLUSIVE)
and the log.

State lives in ``LabModel`` (Qt-free). Every action runs a ``lab.*`` command
(``panels/lab/commands.py``) through the window's registry, naming methods by id and artifacts
by name; this class lays the panel out, turns what the user clicked or typed into a command's
arguments, and redraws from the model's events. Typing in the parameter form or the seed box
updates the model at once (the notes follow) and becomes one ``lab.set_params`` /
``lab.set_seed`` step once the typing pauses, or before any other action.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QAbstractButton,
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from panels.lab import MANIFEST
from panels.lab.commands import (
    COMMANDS,
    SCOPE,
    TABS,
    LabState,
    form_defaults,
    form_schema,
)
from panels.lab.model import PARAMETERS_DOCUMENT, PROFILES, REPRODUCE, RUN, Job, LabModel
from panels.widgets.artifact_views import view_for_artifact, view_for_file
from panels.widgets.command_status import show_outcome
from panels.widgets.drops import OpensDroppedFiles
from panels.widgets.panel_state import forget_edits
from panels.widgets.plot_export import route_export
from panels.widgets.quiet import SetsWidgetsQuietly
from studio.command_widgets import connect, connect_button, mark_argument
from studio.commands import Invocation, registry_for
from studio.widgets import schema as sch
from studio.widgets.claim_view import (
    OPEN_COLOUR,
    ClaimView,
    ProfileChoice,
    exploratory_text,
    format_seconds,
    settings_text,
)
from studio.widgets.plot_view import LOCAL_EXPORT_FORMATS, PlotSpecView
from studio.widgets.schema import errors_from_message
from studio.widgets.schema_form import InputPicker, SchemaForm

METHOD_ROLE = Qt.ItemDataRole.UserRole       # tree: method id; list: (source, job, artifact)
VIEW_KEY_ROLE = Qt.ItemDataRole.UserRole + 1  # list: key of the item's viewer
LIVE_COLUMNS = 2
LOG_MAX_LINES = 5000
METHODS_RETRY_MS = 1000
EXPORT_FILTERS = {"png": "PNG image (*.png)", "svg": "SVG drawing (*.svg)",
                  "pdf": "PDF document (*.pdf)"}
TAB_LIVE, TAB_ARTIFACTS, TAB_CLAIM, TAB_LOG = range(4)
COMMIT_TYPING_MS = 600   # typing in the form or the seed box: one step once it pauses this long
_UNSET = object()


class LabPanel(OpensDroppedFiles, SetsWidgetsQuietly, QWidget):
    """``LabPanel(host)``: the lab, talking to the engine only through ``host`` (PanelHost)."""

    def __init__(self, host: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("lab-panel")
        self.host = host
        self.model = LabModel()
        self.form: SchemaForm | None = None
        self.inputs: InputPicker | None = None
        self.live_plots: dict[str, PlotSpecView] = {}
        self._artifact_views: dict[int, QWidget] = {}
        self._view_keys = itertools.count(1)
        self._syncing_tree = False
        self._wanted_method: str | None = None  # a restored choice waiting for the methods
        self._quiet = False        # widgets set to show the state: their signals are not the user's
        self._committing = False   # the typing is becoming a command: the form shows it already
        self._typing: dict[str, Any] = {}  # "params": (method, before), "seed": before
        self.commands = registry_for(host, COMMANDS)
        self.state = LabState(self.model, host, view=self, submit=self._submit)
        self.commands.bind(SCOPE, self.state)
        self._stop_listening = self.commands.listen(self._on_invocation)
        self._commit_timer = QTimer(self)
        self._commit_timer.setSingleShot(True)
        self._commit_timer.setInterval(COMMIT_TYPING_MS)
        self._commit_timer.timeout.connect(self.commit_typing)
        self.setAcceptDrops(True)
        self._build()
        for name, handler in (("methods", self._show_methods), ("selected", self._show_method),
                              ("job", self._show_job), ("progress", self._show_progress),
                              ("artifact", self._add_artifact), ("result", self._show_result),
                              ("log", self._append_log), ("profile", self._show_profile),
                              ("submit_error", self._show_submit_error),
                              ("params", self._show_params), ("seed", self._show_seed)):
            self.model.events.connect(name, handler)
        self._unsubscribe = _once(host.subscribe(self._on_host_event))
        self.destroyed.connect(lambda *_args, stop=self._unsubscribe: stop())
        self._methods_retry = QTimer(self)
        self._methods_retry.setInterval(METHODS_RETRY_MS)
        self._methods_retry.timeout.connect(self.refresh_methods)
        self.refresh_methods()

    # -- layout --------------------------------------------------------------------------

    def _build(self) -> None:
        self.method_tree = QTreeWidget()
        self.method_tree.setHeaderHidden(True)
        self.method_tree.setMinimumWidth(170)
        connect(self.method_tree.currentItemChanged, self.method_tree, self.commands,
                "lab.choose_method", self._tree_choice_args)

        controls = QWidget()
        column = QVBoxLayout(controls)
        self.method_title = QLabel("No method chosen")
        bold = QFont(self.method_title.font())
        bold.setBold(True)
        bold.setPointSizeF(bold.pointSizeF() * 1.15)
        self.method_title.setFont(bold)
        self.method_title.setWordWrap(True)
        self.method_description = QLabel()
        self.method_description.setWordWrap(True)
        self.method_description.setStyleSheet("color: #808080;")
        self.form_area = QScrollArea()
        self.form_area.setWidgetResizable(True)
        self.form_area.setFrameShape(QFrame.Shape.NoFrame)
        self.inputs_box = QWidget()
        QVBoxLayout(self.inputs_box).setContentsMargins(0, 0, 0, 0)
        for widget in (self.method_title, self.method_description):
            column.addWidget(widget)
        column.addWidget(self.form_area, 1)
        column.addWidget(self.inputs_box)
        column.addLayout(self._build_run_row())
        self.status = QLabel("Waiting for the engine's methods…")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.hide()
        column.addWidget(self.progress)
        column.addWidget(self.status)
        column.addWidget(_rule())
        column.addLayout(self._build_reproduce_section())

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.method_tree)
        splitter.addWidget(controls)
        splitter.addWidget(self._build_tabs())
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 0)
        splitter.setStretchFactor(2, 1)
        splitter.setSizes([200, 330, 640])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(splitter)

    def _build_run_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        row.addWidget(QLabel("seed"))
        self.seed_box = QSpinBox()
        self.seed_box.setRange(0, 2**31 - 1)
        self.seed_box.setToolTip("seeds Python, NumPy and torch before the method runs")
        self.seed_box.valueChanged.connect(self._seed_typed)
        mark_argument(self.seed_box, "lab.set_seed")
        row.addWidget(self.seed_box)
        row.addWidget(QLabel("run on"))
        self.cluster_edit = QLineEdit()
        self.cluster_edit.setPlaceholderText("default (Settings)")
        self.cluster_edit.setToolTip("local, auto (this machine's Ray cluster), HOST:PORT or "
                                     "ray://HOST:PORT; empty: the default cluster in Settings")
        mark_argument(self.cluster_edit, "lab.run")  # the run's ``cluster``
        self.cluster_edit.setMaximumWidth(180)
        self.cluster_edit.setMinimumWidth(110)  # "default (Settings)" was cut to "d…"
        self.seed_box.setMaximumWidth(110)
        row.addWidget(self.cluster_edit)
        row.addStretch(1)
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.run_button.setShortcut("Ctrl+Return")
        self.run_button.setToolTip("run the method with these parameters (Ctrl+Enter)")
        connect_button(self.run_button, self.commands, "lab.run", self._run_args)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("stop the running job (press again to kill it)")
        connect_button(self.cancel_button, self.commands, "lab.cancel", self._cancel_args)
        self.cancel_button.setEnabled(False)
        row.addWidget(self.run_button)
        row.addWidget(self.cancel_button)
        return row

    def _build_reproduce_section(self) -> QVBoxLayout:
        """Reproduce claim, its profile and that profile's settings, the exploratory note,
        and Open report."""
        section = QVBoxLayout()
        row = QHBoxLayout()
        self.reproduce_button = QPushButton("Reproduce claim")
        self.reproduce_button.setToolTip("run <paper>.reproduce with the profile's settings: "
                                         "PASS, FAIL or INCONCLUSIVE")
        connect_button(self.reproduce_button, self.commands, "lab.reproduce",
                       self._reproduce_args)
        self.profile_box = ProfileChoice()
        self.profile_box.setCurrentText(self.model.profile)
        connect(self.profile_box.currentTextChanged, self.profile_box, self.commands,
                "lab.choose_profile", self._profile_args)
        self.report_button = QPushButton("Open report")
        self.report_button.setToolTip("write the paper's report (its latest reproduction: "
                                      "criteria, figures, provenance) and open it")
        connect_button(self.report_button, self.commands, "lab.open_report",
                       lambda: {} if self.model.method is not None else None)
        row.addWidget(self.reproduce_button)
        row.addWidget(QLabel("profile"))
        row.addWidget(self.profile_box)
        row.addStretch(1)
        row.addWidget(self.report_button)
        section.addLayout(row)
        self.settings_label = QLabel()  # the chosen profile's settings
        self.settings_label.setWordWrap(True)
        self.settings_label.setStyleSheet("color: #808080;")
        self.settings_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse)
        self.exploratory_label = QLabel()  # the reproduce form off its profile's settings
        self.exploratory_label.setWordWrap(True)
        self.exploratory_label.setStyleSheet(f"color: {OPEN_COLOUR.name()};")
        for label in (self.settings_label, self.exploratory_label):
            label.hide()
            section.addWidget(label)
        return section

    def _build_tabs(self) -> QTabWidget:
        self.tabs = QTabWidget()
        self.live_area = QScrollArea()
        self.live_area.setWidgetResizable(True)
        live = QWidget()
        self.live_grid = QGridLayout(live)
        self.live_hint = QLabel("Metrics appear here while a job runs.")
        self.live_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.live_grid.addWidget(self.live_hint, 0, 0)
        self.live_area.setWidget(live)
        self.tabs.addTab(self.live_area, "Live")

        artifacts = QSplitter(Qt.Orientation.Horizontal)
        self.artifact_list = QListWidget()
        self.artifact_list.setMaximumWidth(260)
        self.artifact_list.currentRowChanged.connect(self._show_artifact)
        connect(self.artifact_list.currentRowChanged, self.artifact_list, self.commands,
                "lab.show_artifact", self._artifact_row_args)
        self.artifact_stack = QStackedWidget()
        self.artifact_stack.addWidget(QLabel("Artifacts of the run, and files dropped here, "
                                             "show here.", alignment=Qt.AlignmentFlag.AlignCenter))
        artifacts.addWidget(self.artifact_list)
        artifacts.addWidget(self.artifact_stack)
        artifacts.setStretchFactor(1, 1)
        artifacts.setSizes([170, 600])
        self.tabs.addTab(artifacts, "Artifacts")

        self.claim_view = ClaimView()
        self.tabs.addTab(self.claim_view, "Claim")
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(LOG_MAX_LINES)
        self.log_view.setFont(QFont("monospace"))
        self.tabs.addTab(self.log_view, "Log")

        self.export_button = QPushButton("Export figure…")
        self.export_button.setToolTip("save the plot shown as PNG, SVG or PDF, with the run's "
                                      "provenance in the file")
        mark_argument(self.export_button, "lab.export_figure")  # asks where, then exports
        self.export_button.clicked.connect(lambda _checked=False: self.choose_export_path())
        self.tabs.setCornerWidget(self.export_button)
        connect(self.tabs.currentChanged, self.tabs, self.commands, "lab.show_tab",
                lambda index: None if self._quiet or index < 0 else {"tab": TABS[index]})
        return self.tabs

    # -- methods -------------------------------------------------------------------------

    def refresh_methods(self) -> None:
        """Ask the host for the engine's methods (again): retried until there are some."""
        try:
            methods = list(self.host.methods())
        except Exception as exc:  # the engine may still be starting
            methods = []
            self.status.setText(f"The engine's methods are not available yet ({exc}).")
        if methods:
            self._methods_retry.stop()
            self.model.set_methods(methods)
        elif not self._methods_retry.isActive():
            self._methods_retry.start()

    # -- commands: the wrappers the window, drops and tests call -------------------------

    def _on_invocation(self, invocation: Invocation) -> None:
        """A lab command's outcome in the status line: its refusal, or what it said."""
        show_outcome(self.status, invocation, SCOPE)

    def select_paper(self, slug: str) -> None:
        """Show the paper's first method (the welcome page opens the lab on a paper)."""
        self.commit_typing()
        if self.model.methods and slug not in self.model.by_paper():
            self.status.setText(f"The engine lists no method of the paper {slug!r}.")
            return
        self.commands.trigger("lab.choose_paper", paper=slug)

    def select_method(self, method_id: str) -> None:
        self.commit_typing()
        self.commands.trigger("lab.choose_method", method=method_id)

    def run(self) -> None:
        """Run the chosen method with the form's values (the Run button)."""
        args = self._run_args()
        if args is not None:
            self.commands.trigger("lab.run", **args)

    def reproduce(self) -> None:
        """Run ``<paper>.reproduce`` with the chosen profile (Reproduce claim)."""
        args = self._reproduce_args()
        if args is not None:
            self.commands.trigger("lab.reproduce", **args)

    def cancel(self) -> None:
        """Soft cancel; pressed again while cancelling, it kills the job's worker."""
        if self.model.current is not None and not self.model.current.finished:
            self.commands.trigger("lab.cancel")

    def open_report(self) -> None:
        if self.model.method is not None:
            self.commands.trigger("lab.open_report")

    def open_file(self, path: str | os.PathLike) -> bool:
        """Show a data file in the Artifacts tab (``lab.open``); a file that cannot be read
        is reported, never raised."""
        return self.commands.trigger("lab.open", path=str(path)) is not None

    def export_plot(self, path: str | os.PathLike, metric: str | None = None) -> None:
        """The plot shown (or a metric's live curve) as PNG or SVG here, PDF through the
        engine (``lab.export_figure``)."""
        self.commands.trigger("lab.export_figure", path=str(path),
                              **({"metric": metric} if metric is not None else {}))

    def _tree_choice_args(self, item: QTreeWidgetItem | None, _previous=None) -> dict | None:
        if self._syncing_tree or item is None or item.data(0, METHOD_ROLE) is None:
            return None
        self.commit_typing()
        return {"method": item.data(0, METHOD_ROLE)}

    def _run_args(self) -> dict | None:
        """The chosen method, the form's values that differ from its defaults, the inputs,
        the seed and where to run; ``None`` (said in the status line) when the form is not
        ready."""
        self.commit_typing()
        method = self.model.method
        if self.model.busy or self.form is None or method is None:
            return None
        if self.form.validate():
            self.status.setText("Fix the marked parameters first.")
            return None
        defaults = form_defaults(self.model, method)
        args: dict = {"method": method["id"],
                      "params": {k: v for k, v in self.form.values().items()
                                 if defaults.get(k, _UNSET) != v}}
        inputs = self.inputs.values() if self.inputs is not None else {}
        if inputs:
            args["inputs"] = inputs
        if self.model.seed:
            args["seed"] = self.model.seed
        if self.cluster_edit.text().strip():
            args["cluster"] = self.cluster_edit.text().strip()
        return args

    def _reproduce_args(self) -> dict | None:
        self.commit_typing()
        if self.model.busy or self.model.reproduce_method() is None:
            return None
        return {}

    def _cancel_args(self) -> dict | None:
        job = self.model.current
        return {} if job is not None and not job.finished else None

    def _profile_args(self, profile: str) -> dict | None:
        if self._quiet or profile not in PROFILES or profile == self.model.profile:
            return None
        self.commit_typing()
        return {"profile": profile}

    # -- typing: the form and the seed box become commands once the typing pauses --------

    def _seed_typed(self, value: int) -> None:
        if self._quiet:
            return
        self._typing.setdefault("seed", self.model.seed)
        self.model.seed = int(value)  # runs take it at once; the step follows
        self._commit_timer.start()

    def commit_typing(self) -> None:
        """What was typed in the form and the seed box since the last step, as one
        ``lab.set_params`` and one ``lab.set_seed`` (the values that check out; a field
        still marked wrong stays typed, and Run says so)."""
        self._commit_timer.stop()
        typing, self._typing = self._typing, {}
        self._committing = True
        try:
            if "params" in typing:
                self._commit_params(*typing["params"])
            if "seed" in typing and self.model.seed != typing["seed"]:
                typed = self.model.seed
                self.model.seed = typing["seed"]
                if self.commands.trigger("lab.set_seed", seed=typed) is None:
                    self.model.seed = typed
        finally:
            self._committing = False

    def _commit_params(self, method_id: str, before: dict | None) -> None:
        method = self.model.methods.get(method_id)
        typed = self.model.params.get(method_id)
        if method is None or typed is None:
            return
        fields = {spec.name: spec for spec in sch.parse_schema(form_schema(method))}
        shown = {**form_defaults(self.model, method), **(before or {})}
        changed = {k: v for k, v in typed.items() if shown.get(k, _UNSET) != v}
        valid = {k: v for k, v in changed.items() if k in fields and not fields[k].check(v)}
        if not valid:
            return
        if before is None:
            self.model.params.pop(method_id, None)
        else:
            self.model.params[method_id] = dict(before)
        if self.commands.trigger("lab.set_params", method=method_id, params=valid) is None:
            self.model.params[method_id] = typed  # refused (said why): the form keeps it
            return
        stale = {k: v for k, v in changed.items() if k not in valid}
        self.model.params[method_id].update(stale)  # still marked wrong: typed, not a step

    def _show_methods(self) -> None:
        self._syncing_tree = True
        try:
            self.method_tree.clear()
            for slug, methods in self.model.by_paper().items():
                paper = QTreeWidgetItem([slug])
                paper.setFlags(paper.flags() & ~Qt.ItemFlag.ItemIsSelectable)
                font = QFont(paper.font(0))
                font.setBold(True)
                paper.setFont(0, font)
                for method in methods:
                    child = QTreeWidgetItem([method.get("title") or method["id"]])
                    child.setData(0, METHOD_ROLE, method["id"])
                    child.setToolTip(0, f"{method['id']}\n{method.get('description', '')}"
                                     .strip())
                    paper.addChild(child)
                self.method_tree.addTopLevelItem(paper)
            self.method_tree.expandAll()
        finally:
            self._syncing_tree = False
        if self.status.text().startswith(("Waiting for the engine", "Engine ")):
            self.status.setText("")
        wanted, self._wanted_method = self._wanted_method, None
        if wanted in self.model.methods and wanted != self.model.selected:
            self.model.select(wanted)  # a session's choice, restored before the engine was up
            return
        method = self.model.method  # still listed after an engine restart
        if method is not None:
            if self.form is None or self.form.schema != method.get("params_schema"):
                self._show_method(method)  # its parameters changed with the engine's code
            else:
                self._select_tree_item(method["id"])

    def _show_method(self, method: dict) -> None:
        self._select_tree_item(method["id"])
        self.method_title.setText(method.get("title") or method["id"])
        self.method_title.setToolTip(method["id"])
        description = method.get("description") or ""
        self.method_description.setText(f"{method['id']}" + (f" — {description}"
                                                             if description else ""))
        old = self.form_area.takeWidget()
        if old is not None:
            old.deleteLater()
        values = form_defaults(self.model, method) | self.model.params_for(method["id"])
        self.form = SchemaForm(form_schema(method), values)  # a reproduce form: no smoke box
        for button in self.form.findChildren(QAbstractButton):  # check boxes, browse buttons
            mark_argument(button, "lab.set_params")
        self.form.changed.connect(self._form_changed)
        self.form_area.setWidget(self.form)
        self.model.params[method["id"]] = self.form.values()  # what the form shows: no step
        self._show_reproduce_notes()
        self._show_inputs(method.get("inputs") or {})
        self._update_buttons()

    def _form_changed(self) -> None:
        """The user typed or chose a value: the model has it at once (the notes follow), and
        a step once the typing pauses. In the reproduce method's form, choosing another
        profile chooses that profile (``lab.choose_profile``: its settings fill the form);
        changing a setting makes the run exploratory, which the note under "Reproduce claim"
        says."""
        if self._quiet or self.form is None or self.model.selected is None:
            return
        values = self.form.values()
        profile = values.get("profile")
        if (self.model.selected == self.model.reproduce_method() and profile in PROFILES
                and profile != self.model.profile):
            self.commit_typing()
            self.commands.trigger("lab.choose_profile", profile=profile)
            return
        method = self.model.selected
        if self._typing.get("params", (None,))[0] != method:
            self.commit_typing()
            before = self.model.params.get(method)
            self._typing["params"] = (method, dict(before) if before is not None else None)
        self.model.params[method] = values
        self._show_reproduce_notes()
        self._commit_timer.start()

    def _show_params(self, method: str, values: dict) -> None:
        """A method's parameters changed (a step, its undo, a script): its form shows them."""
        if (not self._committing and self.form is not None and method == self.model.selected
                and self.model.method is not None):
            shown = form_defaults(self.model, self.model.method) | values
            if self.form.values() != shown:
                with self.quietly():
                    self.form.set_values(shown)
        self._show_reproduce_notes()

    def _show_seed(self, seed: int) -> None:
        if self.seed_box.value() != seed:
            with self.quietly():
                self.seed_box.setValue(seed)

    def _show_profile(self, profile: str) -> None:
        """The profile changed (here or in the reproduce form): the choice, the reproduce
        form's values and the notes follow."""
        if self.profile_box.currentText() != profile:
            with self.quietly():
                self.profile_box.setCurrentText(profile)
        reproduce = self.model.reproduce_method()
        if self.form is not None and self.model.selected == reproduce:
            with self.quietly():
                self.form.set_values({"profile": profile, **self.model.profile_settings()}
                                     | self.model.params_for(reproduce))
        self._show_reproduce_notes()

    def _show_reproduce_notes(self) -> None:
        """The chosen profile's settings, and what makes the reproduction exploratory."""
        settings = self.model.profile_settings()
        self.profile_box.describe(self.model.methods.get(self.model.reproduce_method() or "",
                                                         {}).get("profiles") or {})
        self.settings_label.setText(
            f"{self.model.profile} profile: {settings_text(settings)}" if settings else "")
        self.settings_label.setVisible(bool(settings))
        text = exploratory_text(self.model.reproduce_overrides(), settings,
                                self.model.profile)
        self.exploratory_label.setText(text)
        self.exploratory_label.setVisible(bool(text))

    def _show_inputs(self, declared: dict[str, str]) -> None:
        if self.inputs is not None:
            self.inputs.hide()
            self.inputs.setParent(None)  # gone now, not at the next turn of the event loop
            self.inputs.deleteLater()
            self.inputs = None
        self.inputs_box.setVisible(bool(declared))
        if not declared:
            return
        self.inputs = InputPicker(declared)
        for button in self.inputs.findChildren(QAbstractButton):  # browse: a run's input
            mark_argument(button, "lab.run")
        for job_id, artifact in self.model.seen_artifacts:
            self.inputs.add_candidate(f"run:{job_id}/{artifact.get('name')}",
                                      f"{job_id} / {artifact.get('name')} "
                                      f"({artifact.get('kind')})")
        self.inputs_box.layout().addWidget(self.inputs)

    def _select_tree_item(self, method_id: str) -> None:
        self._syncing_tree = True
        try:
            for index in range(self.method_tree.topLevelItemCount()):
                paper = self.method_tree.topLevelItem(index)
                for row in range(paper.childCount()):
                    if paper.child(row).data(0, METHOD_ROLE) == method_id:
                        self.method_tree.setCurrentItem(paper.child(row))
                        return
        finally:
            self._syncing_tree = False

    # -- running -------------------------------------------------------------------------

    def _submit(self, method: str, params: dict, inputs: dict, seed: int,
                cluster: str = "") -> None:
        """A command's submission: said here, followed once the engine accepts it."""
        self.status.setText(f"Submitting {method}…")
        self._update_buttons()
        self.host.submit_job(method, params, inputs, seed, on_accepted=self.model.accepted,
                             on_error=self.model.rejected, cluster=cluster)

    def _show_submit_error(self, message: str) -> None:
        fields, general = errors_from_message(message)
        input_names = set(self.inputs.inputs) if self.inputs is not None else set()
        if self.form is not None:  # unknown names go to the form's top line
            self.form.set_errors({k: v for k, v in fields.items() if k not in input_names}
                                 | ({"": "\n".join(general)} if general else {}))
        if self.inputs is not None:
            self.inputs.set_errors({k: v for k, v in fields.items() if k in input_names})
        summary = general[0] if general else "The engine refused the parameters (marked)."
        self.status.setText(f"Not submitted: {summary}")
        self._update_buttons()

    def _show_job(self, job: Job) -> None:
        if job is not self.model.current:
            return
        if job.state == "queued" and job.step == 0 and not job.artifacts:
            self._start_fresh(job)
        text = {"queued": "Queued", "running": "Running", "cancelling": "Cancelling…",
                "succeeded": "Succeeded", "failed": "Failed",
                "cancelled": "Cancelled"}.get(job.state, job.state)
        if job.finished and job.elapsed_s is not None:
            text += f" in {format_seconds(job.elapsed_s)}"
        if job.reason:
            text += f": {job.reason}"
        self.status.setText(f"{job.method} · {job.id}\n{text}")
        if job.finished:
            self.progress.setVisible(job.state == "succeeded" and job.total is not None)
            if job.state == "succeeded":
                if job.total:  # a method may count its last step as total - 1
                    self.progress.setValue(int(job.total))
                    self.progress.setFormat(f"step {job.total} / {job.total}")
                self._load_full_metrics(job)
                self._reveal_results(job)
        self.cancel_button.setText("Kill" if job.state == "cancelling" else "Cancel")
        self._update_buttons()

    def _start_fresh(self, job: Job) -> None:
        """A new job: empty live plots, its artifacts only (opened files stay), new log."""
        for plot in self.live_plots.values():
            self.live_grid.removeWidget(plot)
            plot.close()
            plot.deleteLater()
        self.live_plots.clear()
        self.live_hint.show()
        for row in reversed(range(self.artifact_list.count())):
            item = self.artifact_list.item(row)
            if item.data(METHOD_ROLE)[0] != "file":
                self._drop_artifact_row(row)
        self.log_view.clear()
        if self.form is not None and job.purpose == RUN:
            self.form.set_errors({})  # accepted: earlier refusals no longer apply
        self.progress.setRange(0, 0)
        self.progress.show()
        if job.purpose == REPRODUCE:
            self.claim_view.clear()

    def _show_progress(self, job: Job, step: int, total: int | None, metrics: dict) -> None:
        if job is not self.model.current:
            return
        if total:
            self.progress.setRange(0, int(total))
            self.progress.setValue(min(int(step), int(total)))
            self.progress.setFormat(f"step {step} / {total}")
        for name, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.live_plot(name).append_points(name, [step], [value])

    def live_plot(self, metric: str) -> PlotSpecView:
        """The live curve of one metric (created on its first value)."""
        plot = self.live_plots.get(metric)
        if plot is None:
            plot = PlotSpecView()
            plot.set_labels(metric, "step", "")
            plot.setMinimumHeight(190)
            self._route_plot_export(plot, metric)
            job = self.model.current
            if job is not None:
                plot.provenance = self._provenance(job, f"live:{metric}")
            index = len(self.live_plots)
            self.live_grid.addWidget(plot, index // LIVE_COLUMNS, index % LIVE_COLUMNS)
            self.live_plots[metric] = plot
            self.live_hint.hide()
        return plot

    def _load_full_metrics(self, job: Job) -> None:
        """Progress events are thinned to ~30 a second; the run's metrics.jsonl has every
        step, so the finished curves are redrawn from it."""
        for name, (xs, ys) in self._metric_columns(job).items():
            if name in self.live_plots and len(xs) >= self.live_plots[name].point_count(name):
                self.live_plots[name].set_series(name, xs, ys)

    def _metric_columns(self, job: Job) -> dict[str, tuple[list, list]]:
        """Every numeric metric of the run's metrics.jsonl as (steps, values)."""
        path = Path(self.host.run_dir(job.id)) / "metrics.jsonl"
        columns: dict[str, tuple[list, list]] = {}
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return columns
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            step = record.get("step")
            for name, value in record.items():
                if (name in ("step", "t") or not isinstance(value, (int, float))
                        or isinstance(value, bool) or step is None):
                    continue
                xs, ys = columns.setdefault(name, ([], []))
                xs.append(step)
                ys.append(value if math.isfinite(value) else None)
        return columns

    def _reveal_results(self, job: Job) -> None:
        if job.purpose == REPRODUCE and self.claim_view.claim is not None:
            self.show_tab("claim")
        elif any(a.get("kind") == "plot" for a in job.artifacts):
            self.show_tab("artifacts")

    def show_tab(self, tab: str) -> None:
        """Live, Artifacts, Claim or Log in front (``lab.show_tab``)."""
        with self.quietly():
            self.tabs.setCurrentIndex(TABS.index(tab))

    def _show_result(self, job: Job, outputs: dict) -> None:
        claim = outputs.get("claim")
        if isinstance(claim, dict) and job is self.model.current:
            self.claim_view.set_claim(claim)

    def _append_log(self, job: Job, lines: list[str]) -> None:
        if job is self.model.current:
            self.log_view.appendPlainText("\n".join(lines))

    def _update_buttons(self) -> None:
        busy = self.model.busy
        self.run_button.setEnabled(not busy and self.model.method is not None)
        self.cancel_button.setEnabled(self.model.current is not None
                                      and not self.model.current.finished)
        reproducible = self.model.reproduce_method() is not None
        self.reproduce_button.setEnabled(not busy and reproducible)
        self.profile_box.setEnabled(reproducible)
        self.report_button.setEnabled(reproducible)
        self.reproduce_button.setToolTip(
            f"run {self.model.reproduce_method()}" if reproducible
            else "this paper has no reproduce method in the engine")

    def _on_host_event(self, envelope: dict) -> None:
        kind = envelope.get("type")
        if kind == "methods":  # the shell's notice: the engine (re)started
            self.commit_typing()  # the typing so far is a step before the forms are rebuilt
            methods = (envelope.get("content") or {}).get("methods")
            if methods:
                self._methods_retry.stop()
                self.model.set_methods(list(methods))
            else:
                self.refresh_methods()
            return
        if kind == "engine_state" and not self.model.methods:
            self.status.setText(f"Engine {envelope['content'].get('state', '')}…")
        self.model.on_event(envelope)

    # -- artifacts and files -------------------------------------------------------------

    def _add_artifact(self, job: Job, artifact: dict) -> None:
        name, kind = artifact.get("name", "?"), artifact.get("kind", "")
        if self.inputs is not None:
            self.inputs.add_candidate(f"run:{job.id}/{name}", f"{job.id} / {name} ({kind})")
        if job is not self.model.current:
            return
        item = QListWidgetItem(f"{name}  ({kind})")
        item.setData(METHOD_ROLE, ("artifact", job.id, artifact))
        item.setData(VIEW_KEY_ROLE, next(self._view_keys))
        item.setToolTip(str(artifact.get("path", "")))
        self.artifact_list.addItem(item)
        if kind == "plot" and not self._showing_plot():
            with self.quietly():
                self.artifact_list.setCurrentItem(item)
        elif kind == "claim" and self.claim_view.claim is None:
            self._load_claim_artifact(job, artifact)

    def _load_claim_artifact(self, job: Job, artifact: dict) -> None:
        path = Path(self.host.run_dir(job.id)) / artifact.get("path", "")
        try:
            self.claim_view.set_claim(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return

    def show_file(self, path: Path) -> str | None:
        """Show a data file (.npy, .npz, .safetensors, .csv, .parquet, .jsonl, a figure) in
        the Artifacts tab (``lab.open``); what went wrong, naming the file, if anything."""
        try:
            view = view_for_file(path)
        except Exception as exc:  # FormatError, ValueError, OSError: all name the file
            return str(exc) if str(path) in str(exc) or path.name in str(exc) \
                else f"{path}: {exc}"
        item = QListWidgetItem(f"{path.name}  (file)")
        item.setData(METHOD_ROLE, ("file", str(path), None))
        item.setData(VIEW_KEY_ROLE, next(self._view_keys))
        item.setToolTip(str(path))
        self.artifact_list.addItem(item)
        self._artifact_views[item.data(VIEW_KEY_ROLE)] = view
        self.artifact_stack.addWidget(view)
        with self.quietly():
            self.artifact_list.setCurrentItem(item)
        self.show_tab("artifacts")
        return None

    # the Artifacts list by the names it shows -------------------------------------------

    def _item_name(self, item: QListWidgetItem) -> str:
        source, where, artifact = item.data(METHOD_ROLE)
        return Path(where).name if source == "file" else str(artifact.get("name", "?"))

    def artifact_names(self) -> list[str]:
        return [self._item_name(self.artifact_list.item(row))
                for row in range(self.artifact_list.count())]

    def _item_named(self, name: str) -> QListWidgetItem | None:
        return next((self.artifact_list.item(row) for row in range(self.artifact_list.count())
                     if self._item_name(self.artifact_list.item(row)) == name), None)

    def artifact_path(self, name: str) -> Path | None:
        """The file behind an entry of the Artifacts list, or ``None`` if none is named so."""
        item = self._item_named(name)
        if item is None:
            return None
        source, where, artifact = item.data(METHOD_ROLE)
        return Path(where) if source == "file" else \
            Path(self.host.run_dir(where)) / artifact.get("path", "")

    def show_artifact(self, name: str) -> None:
        """The entry named, shown (``lab.show_artifact``)."""
        item = self._item_named(name)
        if item is not None and self.artifact_list.currentItem() is not item:
            with self.quietly():
                self.artifact_list.setCurrentItem(item)

    def _artifact_row_args(self, row: int) -> dict | None:
        if self._quiet or row < 0:
            return None
        return {"artifact": self._item_name(self.artifact_list.item(row))}

    def _show_artifact(self, row: int) -> None:
        if row < 0:
            self.artifact_stack.setCurrentIndex(0)
            return
        item = self.artifact_list.item(row)
        view = self._artifact_views.get(item.data(VIEW_KEY_ROLE))
        if view is None:
            view = self._make_artifact_view(item)
            self._artifact_views[item.data(VIEW_KEY_ROLE)] = view
            self.artifact_stack.addWidget(view)
        self.artifact_stack.setCurrentWidget(view)

    def _make_artifact_view(self, item: QListWidgetItem) -> QWidget:
        _source, job_id, artifact = item.data(METHOD_ROLE)
        kind, name = artifact.get("kind", ""), artifact.get("name", "")
        path = Path(self.host.run_dir(job_id)) / artifact.get("path", "")
        if kind == "checkpoint":
            return _message(f"Checkpoint {name}\n{path}")
        if kind == "claim":
            try:
                return ClaimView(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as exc:
                return _message(f"{path}: not a readable claim ({exc})")
        elsewhere = self._panel_elsewhere(path)
        if elsewhere is not None:
            return self._open_elsewhere(path, elsewhere, name)
        try:
            view = view_for_artifact(kind, path, name)
        except Exception as exc:  # a damaged or missing file must not break the panel
            return _message(str(exc))
        if isinstance(view, PlotSpecView):
            self._route_plot_export(view, None)  # shown: it is the plot an export writes
            job = self.model.jobs.get(job_id)
            view.provenance = (self._provenance(job, name) if job is not None
                               else {"run_id": job_id, "artifact": name})
        return view

    def _panel_elsewhere(self, path: Path) -> str | None:
        """The title of another panel that opens this artifact (a NIfTI, a DEF, samples),
        or ``None`` when the lab shows it (or the host cannot tell)."""
        panel_for = getattr(self.host, "panel_for", None)
        if not callable(panel_for) or not path.exists():
            return None
        title = panel_for(path)
        return title if title and title != MANIFEST.title else None

    def _open_elsewhere(self, path: Path, title: str, name: str) -> QWidget:
        """What the lab shows for an artifact another panel opens: where, and a button
        (``lab.open_elsewhere``)."""
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.addStretch(1)
        layout.addWidget(_message(f"{path.name} opens in the {title}.\n{path}"))
        button = QPushButton(f"Open in {title}")
        button.setProperty("primary", "true")
        connect_button(button, self.commands, "lab.open_elsewhere", lambda: {"artifact": name})
        layout.addWidget(button, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addStretch(1)
        return box

    def _drop_artifact_row(self, row: int) -> None:
        with self.quietly():
            item = self.artifact_list.takeItem(row)
        view = self._artifact_views.pop(item.data(VIEW_KEY_ROLE), None)
        if view is not None:
            self.artifact_stack.removeWidget(view)
            view.close()
            view.deleteLater()

    def _showing_plot(self) -> bool:
        return isinstance(self.artifact_stack.currentWidget(), PlotSpecView)

    # -- export --------------------------------------------------------------------------

    def current_plot(self) -> PlotSpecView | None:
        """The plot an export writes: the artifact shown, else the first live curve."""
        if self.tabs.currentIndex() == TAB_ARTIFACTS and self._showing_plot():
            return self.artifact_stack.currentWidget()
        if self.live_plots:
            return next(iter(self.live_plots.values()))
        return self.artifact_stack.currentWidget() if self._showing_plot() else None

    def write_plot(self, path: str | os.PathLike, metric: str | None = None) -> str | None:
        """PNG/SVG here; PDF rendered by the engine (``figure.export``) with matplotlib,
        said in the status line when it answers. What went wrong, if anything."""
        plot = self.live_plots[metric] if metric is not None else self.current_plot()
        if plot is None:
            return "nothing to export: run a method or choose a plot artifact first"
        target = Path(path)
        fmt = target.suffix.lstrip(".").lower()
        if fmt in LOCAL_EXPORT_FORMATS:
            try:
                plot.export(target)
            except Exception as exc:  # ExportError, OSError: they name the file
                return str(exc)
            return None
        if fmt != "pdf":
            return f"{target}: choose .png, .svg or .pdf"
        self.status.setText(f"Exporting {target} (the engine renders PDFs)…")
        self.host.request("figure.export", {"spec": plot.spec(), "path": str(target),
                                            "provenance": plot.provenance},
                          on_reply=lambda reply: self.status.setText(
                              f"Exported {reply.get('path', target)}"),
                          on_error=lambda message: self.host.show_error("Export failed",
                                                                        message))
        return None

    def _route_plot_export(self, plot: PlotSpecView, metric: str | None) -> None:
        """pyqtgraph's right-click "Export..." writes no provenance and runs no command: on
        the lab's plots it asks where and runs ``lab.export_figure`` for that plot."""
        route_export(plot.findChild(pg.GraphicsView), "lab.export_figure",
                     lambda: self.choose_export_path(metric))

    def choose_export_path(self, metric: str | None = None) -> None:
        """Ask where, then ``lab.export_figure`` (of ``metric``'s live curve, when given)."""
        if metric is None and self.current_plot() is None:
            self.export_plot("")  # refused: says there is nothing to export
            return
        dialog = QFileDialog(self, "Export figure")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setNameFilters(list(EXPORT_FILTERS.values()))
        dialog.setDefaultSuffix("png")

        def suffix_of(name_filter: str) -> str:
            return next(k for k, v in EXPORT_FILTERS.items() if v == name_filter)

        dialog.filterSelected.connect(lambda text: dialog.setDefaultSuffix(suffix_of(text)))
        dialog.fileSelected.connect(lambda path: self.export_plot(path, metric))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def _provenance(self, job: Job, artifact: str) -> dict:
        """What made a figure: the run's params.json (parameters, seed, code and package
        versions, host) plus the run id and the artifact."""
        record: dict = {}
        try:
            path = Path(self.host.run_dir(job.id)) / "params.json"
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {"method": job.method, "params": job.params, "seed": job.seed}
        return record | {"run_id": job.id, "artifact": artifact}

    # -- sessions (issue 39): what is open and how it is shown ---------------------------

    def view_state(self) -> dict:
        """The view as JSON: the method chosen and every method's parameters, the seed, the
        profile, where runs go, the inputs, the files opened here by path, the last run (its
        curves, artifacts and claim come back from its folder), the artifact and tab shown
        (``restore_view_state`` reads it)."""
        self.commit_typing()
        job = self.model.current
        current = self.artifact_list.currentItem()
        state: dict = {
            "method": self.model.selected, "params": self.model.params,
            "seed": self.model.seed, "profile": self.model.profile,
            "cluster": self.cluster_edit.text(),
            "inputs": self.inputs.values() if self.inputs is not None else {},
            "files": [str(Path(where).resolve()) for source, where, _a in
                      (self.artifact_list.item(r).data(METHOD_ROLE)
                       for r in range(self.artifact_list.count())) if source == "file"],
            "artifact": self._item_name(current) if current is not None else None,
            "tab": TABS[self.tabs.currentIndex()],
            "job": None if job is None else {
                "id": job.id, "method": job.method, "purpose": job.purpose,
                "params": job.params, "seed": job.seed, "state": job.state,
                "reason": job.reason, "elapsed_s": job.elapsed_s, "step": job.step,
                "total": job.total, "artifacts": job.artifacts, "outputs": job.outputs},
            "claim": self.claim_view.claim if job is not None else None,
        }
        return json.loads(json.dumps(state, default=str))  # plain JSON: what a session holds

    def restore_view_state(self, state: dict) -> list[str]:
        """Show what ``view_state`` named the same way; a sentence for each part that could
        not be restored (a method the engine does not list, a file gone, a run whose folder
        is gone or that had not finished)."""
        problems: list[str] = []
        self.commit_typing()
        saved = {key: state[key] for key in ("params", "seed", "profile") if key in state}
        try:
            self.model.restore(saved)
        except (TypeError, ValueError, AttributeError) as exc:
            problems.append(f"lab: the parameters {saved!r} could not be read ({exc})")
        self._show_seed(self.model.seed)
        method = state.get("method")
        if isinstance(method, str):
            if not self.model.methods:
                self._wanted_method = method  # chosen once the engine lists its methods
            elif not self.commands.run_restoring(problems, "lab.choose_method",
                                                 method=method):
                pass
        if self.model.method is not None and self.form is not None:
            with self.quietly():
                self.form.set_values(form_defaults(self.model, self.model.method)
                                     | self.model.params_for(self.model.method["id"]))
        self._show_profile(self.model.profile)
        with self.quietly():
            self.cluster_edit.setText(str(state.get("cluster") or ""))
        if self.inputs is not None and isinstance(state.get("inputs"), dict):
            self.inputs.set_values({str(k): str(v) for k, v in state["inputs"].items()})
        for path in state.get("files") or []:
            if not self._item_named(Path(str(path)).name):
                self.commands.run_restoring(problems, "lab.open", path=str(path))
        if isinstance(state.get("job"), dict):
            self._restore_job(state["job"], state.get("claim"), problems)
        if state.get("artifact") and self._item_named(str(state["artifact"])) is not None:
            self.commands.run_restoring(problems, "lab.show_artifact",
                                        artifact=str(state["artifact"]))
        if state.get("tab") in TABS:
            self.commands.run_restoring(problems, "lab.show_tab", tab=state["tab"])
        return problems

    def _restore_job(self, saved: dict, claim: Any, problems: list[str]) -> None:
        """The last run shown again from its folder: status, curves, artifacts and claim."""
        try:
            job = Job(str(saved["id"]), str(saved["method"]), str(saved["purpose"]),
                      dict(saved.get("params") or {}), int(saved.get("seed") or 0),
                      str(saved["state"]), str(saved.get("reason") or ""),
                      saved.get("elapsed_s"), int(saved.get("step") or 0),
                      saved.get("total"), saved.get("outputs"),
                      [dict(a) for a in saved.get("artifacts") or []])
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"lab: the run {saved.get('id')!r} could not be read ({exc})")
            return
        if not job.finished:
            problems.append(f"lab: the run {job.id} ({job.method}) was {job.state} when the "
                            "session was saved; find its results in the runs dock")
            return
        if not Path(self.host.run_dir(job.id)).is_dir():
            problems.append(f"lab: the run {job.id} ({job.method}) is gone from the "
                            f"workspace ({self.host.run_dir(job.id)})")
            return
        artifacts, job.artifacts = job.artifacts, []
        self.model.jobs[job.id] = job
        self.model.current = job
        self._start_fresh(job)
        if job.total:  # the bar as the run left it, not a busy one
            self.progress.setRange(0, int(job.total))
        for artifact in artifacts:
            job.artifacts.append(artifact)
            self._add_artifact(job, artifact)
        for name, (xs, ys) in self._metric_columns(job).items():
            self.live_plot(name).set_series(name, xs, ys)
        if isinstance(claim, dict):
            self.claim_view.set_claim(claim)
        self._show_job(job)

    # -- lifetime ------------------------------------------------------------------------

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """The typing so far becomes a step; stop following the engine; leave the registry
        and the history (idempotent)."""
        if self.state.view is None:
            return
        self.commit_typing()
        self._unsubscribe()
        self._methods_retry.stop()
        self.commands.unbind(SCOPE, self.state)
        self._stop_listening()
        forget_edits(self.host, PARAMETERS_DOCUMENT)
        self.state.view = None


def _once(function):
    """``function`` callable many times, run once (unsubscribing twice is harmless)."""
    done = []

    def call() -> None:
        if not done:
            done.append(True)
            function()

    return call


def _rule() -> QFrame:
    line = QFrame()
    line.setFrameShape(QFrame.Shape.HLine)
    line.setFrameShadow(QFrame.Shadow.Sunken)
    return line


def _message(text: str) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setAlignment(Qt.AlignmentFlag.AlignCenter)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label
