"""The lab panel: run any method the engine lists, watch it live, inspect what it made.

Left, the methods grouped by paper. Middle, the chosen method's parameter form (from its
JSON Schema), its inputs, the seed, Run / Cancel, and "Reproduce claim" with its profile
(smoke, cpu, gpu: the profile's settings shown under it; a setting changed in the reproduce
method's form makes the run exploratory, said there before the run) and "Open report". Right,
tabs: live metric curves (one plot per metric, x = step), the run's artifacts (plots, arrays,
tables, JSON; files dropped on the lab show here too), the claim (PASS, FAIL or INCONCLUSIVE)
and the log.

State lives in ``LabModel`` (Qt-free); this module only draws it and forwards user actions.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
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
from panels.lab.model import PROFILES, REPRODUCE, RUN, Job, LabModel, paper_of
from panels.widgets.artifact_views import view_for_artifact, view_for_file
from panels.widgets.drops import OpensDroppedFiles
from studio.widgets.claim_view import (
    OPEN_COLOUR,
    ClaimView,
    ProfileChoice,
    exploratory_text,
    format_seconds,
    request_report,
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


class LabPanel(OpensDroppedFiles, QWidget):
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
        self.setAcceptDrops(True)
        self._build()
        for name, handler in (("methods", self._show_methods), ("selected", self._show_method),
                              ("job", self._show_job), ("progress", self._show_progress),
                              ("artifact", self._add_artifact), ("result", self._show_result),
                              ("log", self._append_log), ("profile", self._show_profile),
                              ("submit_error", self._show_submit_error)):
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
        self.method_tree.currentItemChanged.connect(self._on_tree_choice)

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
        self.seed_box.valueChanged.connect(lambda value: setattr(self.model, "seed", value))
        row.addWidget(self.seed_box)
        row.addWidget(QLabel("run on"))
        self.cluster_edit = QLineEdit()
        self.cluster_edit.setPlaceholderText("default (Settings)")
        self.cluster_edit.setToolTip("local, auto (this machine's Ray cluster), HOST:PORT or "
                                     "ray://HOST:PORT; empty: the default cluster in Settings")
        self.cluster_edit.setMaximumWidth(180)
        self.cluster_edit.setMinimumWidth(110)  # "default (Settings)" was cut to "d…"
        self.seed_box.setMaximumWidth(110)
        row.addWidget(self.cluster_edit)
        row.addStretch(1)
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.run_button.setShortcut("Ctrl+Return")
        self.run_button.setToolTip("run the method with these parameters (Ctrl+Enter)")
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("stop the running job (press again to kill it)")
        self.cancel_button.clicked.connect(self.cancel)
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
        self.reproduce_button.clicked.connect(self.reproduce)
        self.profile_box = ProfileChoice()
        self.profile_box.setCurrentText(self.model.profile)
        self.profile_box.currentTextChanged.connect(self.model.set_profile)
        self.report_button = QPushButton("Open report")
        self.report_button.setToolTip("write the paper's report (its latest reproduction: "
                                      "criteria, figures, provenance) and open it")
        self.report_button.clicked.connect(self.open_report)
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
        self.export_button.clicked.connect(self.choose_export_path)
        self.tabs.setCornerWidget(self.export_button)
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

    def select_paper(self, slug: str) -> None:
        """Show the paper's first method (the welcome page opens the lab on a paper)."""
        if not self.model.select_paper(slug) and self.model.methods:
            self.status.setText(f"The engine lists no method of the paper {slug!r}.")

    def select_method(self, method_id: str) -> None:
        self.model.select(method_id)

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
        method = self.model.method  # still listed after an engine restart
        if method is not None:
            if self.form is None or self.form.schema != method.get("params_schema"):
                self._show_method(method)  # its parameters changed with the engine's code
            else:
                self._select_tree_item(method["id"])

    def _on_tree_choice(self, item: QTreeWidgetItem | None, _previous=None) -> None:
        if self._syncing_tree or item is None or item.data(0, METHOD_ROLE) is None:
            return
        self.model.select(item.data(0, METHOD_ROLE))

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
        schema, values = method.get("params_schema") or {}, self.model.params_for(method["id"])
        if method["id"] == self.model.reproduce_method():
            schema = without_smoke_field(schema)  # the profile choice replaces the smoke box
            values = {"profile": self.model.profile, **self.model.profile_settings()} | values
        self.form = SchemaForm(schema, values)
        self.form.changed.connect(self._form_changed)
        self.form_area.setWidget(self.form)
        self._form_changed()
        self._show_inputs(method.get("inputs") or {})
        self._update_buttons()

    def _form_changed(self) -> None:
        """Remember the values. In the reproduce method's form, choosing another profile
        chooses that profile (and its settings); changing a setting makes the run
        exploratory, which the note under "Reproduce claim" says."""
        values = self.form.values()
        profile = values.get("profile")
        if (self.model.selected == self.model.reproduce_method() and profile in PROFILES
                and profile != self.model.profile):
            self.model.set_params(values)
            self.model.set_profile(profile)  # refills this form through _show_profile
            return
        self.model.set_params(values)
        self._show_reproduce_notes()

    def _show_profile(self, profile: str) -> None:
        """The profile changed (here or in the reproduce form): the choice, the reproduce
        form's values and the notes follow."""
        if self.profile_box.currentText() != profile:
            self.profile_box.blockSignals(True)
            self.profile_box.setCurrentText(profile)
            self.profile_box.blockSignals(False)
        reproduce = self.model.reproduce_method()
        if self.form is not None and self.model.selected == reproduce:
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

    def run(self) -> None:
        """Submit the chosen method with the form's parameters (after checking them)."""
        if self.model.busy or self.form is None:
            return
        errors = self.form.validate()
        if errors:
            self.status.setText("Fix the marked parameters first.")
            return
        self.model.set_params(self.form.values())
        method, params, seed = self.model.submission(RUN)
        self._submit(method, params, self.inputs.values() if self.inputs else {}, seed)

    def reproduce(self) -> None:
        """Run ``<paper>.reproduce`` with the chosen profile (and the settings changed in its
        form: exploratory); the claim shows after."""
        if self.model.busy or self.model.reproduce_method() is None:
            return
        method, params, seed = self.model.submission(REPRODUCE)
        self._submit(method, params, {}, seed)

    def _submit(self, method: str, params: dict, inputs: dict, seed: int) -> None:
        self.status.setText(f"Submitting {method}…")
        self._update_buttons()
        self.host.submit_job(method, params, inputs, seed, on_accepted=self.model.accepted,
                             on_error=self.model.rejected, cluster=self.cluster_edit.text())

    def open_report(self) -> None:
        """The engine writes the paper's report into the workspace; it opens in the browser."""
        method = self.model.method
        if method is None:
            return
        slug = paper_of(method)
        self.status.setText(f"Writing the report of {slug}…")
        request_report(self.host, [slug], on_opened=lambda path: self.status.setText(
            f"Opened the report {path}"), on_error=lambda message: self.status.setText(
            f"No report: {message}"))

    def cancel(self) -> None:
        """Soft cancel; pressed again while cancelling, it kills the job's worker."""
        job = self.model.current
        if job is None or job.finished:
            return
        self.host.cancel_job(job.id, hard=job.state == "cancelling")

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
        path = Path(self.host.run_dir(job.id)) / "metrics.jsonl"
        columns: dict[str, tuple[list, list]] = {}
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return
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
        for name, (xs, ys) in columns.items():
            if name in self.live_plots and len(xs) >= self.live_plots[name].point_count(name):
                self.live_plots[name].set_series(name, xs, ys)

    def _reveal_results(self, job: Job) -> None:
        if job.purpose == REPRODUCE and self.claim_view.claim is not None:
            self.tabs.setCurrentIndex(TAB_CLAIM)
        elif any(a.get("kind") == "plot" for a in job.artifacts):
            self.tabs.setCurrentIndex(TAB_ARTIFACTS)

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
            self.artifact_list.setCurrentItem(item)
        elif kind == "claim" and self.claim_view.claim is None:
            self._load_claim_artifact(job, artifact)

    def _load_claim_artifact(self, job: Job, artifact: dict) -> None:
        path = Path(self.host.run_dir(job.id)) / artifact.get("path", "")
        try:
            self.claim_view.set_claim(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return

    def open_file(self, path: str | os.PathLike) -> bool:
        """Show a data file (.npy, .npz, .safetensors, .csv, .parquet, .jsonl) in the
        Artifacts tab; a file that cannot be read is reported through the host."""
        try:
            view = view_for_file(path)
        except Exception as exc:  # FormatError, ValueError, OSError: all name the file
            self.host.show_error("Cannot open the file", str(exc))
            return False
        item = QListWidgetItem(f"{Path(path).name}  (file)")
        item.setData(METHOD_ROLE, ("file", str(path), None))
        item.setData(VIEW_KEY_ROLE, next(self._view_keys))
        item.setToolTip(str(path))
        self.artifact_list.addItem(item)
        row = self.artifact_list.count() - 1
        self._artifact_views[item.data(VIEW_KEY_ROLE)] = view
        self.artifact_stack.addWidget(view)
        self.artifact_list.setCurrentRow(row)
        self.tabs.setCurrentIndex(TAB_ARTIFACTS)
        return True

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
            return self._open_elsewhere(path, elsewhere)
        try:
            view = view_for_artifact(kind, path, name)
        except Exception as exc:  # a damaged or missing file must not break the panel
            return _message(str(exc))
        if isinstance(view, PlotSpecView):
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

    def _open_elsewhere(self, path: Path, title: str) -> QWidget:
        """What the lab shows for an artifact another panel opens: where, and a button."""
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.addStretch(1)
        layout.addWidget(_message(f"{path.name} opens in the {title}.\n{path}"))
        button = QPushButton(f"Open in {title}")
        button.setProperty("primary", "true")
        button.clicked.connect(lambda: self.host.open_in_panel(path))
        layout.addWidget(button, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addStretch(1)
        return box

    def _drop_artifact_row(self, row: int) -> None:
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

    def export_plot(self, path: str | os.PathLike) -> None:
        """PNG/SVG here; PDF rendered by the engine (``figure.export``) with matplotlib."""
        plot = self.current_plot()
        if plot is None:
            self.host.show_error("Nothing to export", "Show a plot first: run a method or "
                                                      "choose a plot artifact.")
            return
        target = Path(path)
        fmt = target.suffix.lstrip(".").lower()
        if fmt in LOCAL_EXPORT_FORMATS:
            try:
                plot.export(target)
            except Exception as exc:
                self.host.show_error("Export failed", str(exc))
                return
            self.status.setText(f"Exported {target}")
            return
        if fmt != "pdf":
            self.host.show_error("Export failed", f"{target}: choose .png, .svg or .pdf")
            return
        self.status.setText(f"Exporting {target} (the engine renders PDFs)…")
        self.host.request("figure.export", {"spec": plot.spec(), "path": str(target),
                                            "provenance": plot.provenance},
                          on_reply=lambda reply: self.status.setText(
                              f"Exported {reply.get('path', target)}"),
                          on_error=lambda message: self.host.show_error("Export failed",
                                                                        message))

    def choose_export_path(self) -> None:
        """Ask where (the shell's export dialog when it offers one), then export."""
        plot = self.current_plot()
        if plot is None:
            self.export_plot("")  # reports that there is nothing to export
            return
        shell_dialog = getattr(self.host, "export_plot", None)
        if callable(shell_dialog):
            shell_dialog(plot)
            return
        dialog = QFileDialog(self, "Export figure")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setNameFilters(list(EXPORT_FILTERS.values()))
        dialog.setDefaultSuffix("png")

        def suffix_of(name_filter: str) -> str:
            return next(k for k, v in EXPORT_FILTERS.items() if v == name_filter)

        dialog.filterSelected.connect(lambda text: dialog.setDefaultSuffix(suffix_of(text)))
        dialog.fileSelected.connect(self.export_plot)
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

    # -- lifetime ------------------------------------------------------------------------

    def closeEvent(self, event) -> None:
        self._unsubscribe()
        self._methods_retry.stop()
        super().closeEvent(event)


def without_smoke_field(schema: dict) -> dict:
    """A reproduce method's schema without ``smoke`` (kept by the engine for old callers;
    the lab picks the smoke profile instead)."""
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if k != "smoke"}
    return {**schema, "properties": properties,
            "required": [k for k in schema.get("required") or [] if k != "smoke"]}


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
