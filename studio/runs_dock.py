"""The runs dock: every job of this session and of earlier ones, live.

A table (method, state, progress bar, elapsed time) above three tabs for the selected runs:
their metric curves (several runs selected = overlaid on one plot, TensorBoard-style; a live
run's curve gains points as progress arrives), the log, and the details (parameters, outputs,
notes). The toolbar cancels, reruns (as it was, or with edited parameters), deletes, exports a
checkpoint or the plot, and opens the run folder.

Every button, menu entry and the metric chooser runs a registered command (``runs.*``,
``app.export_checkpoint``, ``app.open``: ``studio.shell_commands``) naming the runs by id, so
what the user does here is in the command log and a script can do it; this module keeps the
layout, the display and the dialogs those commands open.

The plot widget (pyqtgraph) is imported only when a run is first shown: start-up stays fast.
"""

from __future__ import annotations

import html
import json
import logging
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTableView,
    QTabWidget,
    QToolBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.atomic import read_jsonl
from studio.command_widgets import command_action, connect, connect_button, mark_argument
from studio.commands import CommandError
from studio.jobs import LOG, NOTES, PROGRESS, REMOVED, STATE, JobRecord
from studio.runs_model import (
    COL_ELAPSED,
    COL_METHOD,
    COL_NOTES,
    COL_PROGRESS,
    COL_RUN,
    COL_STATE,
    ProgressDelegate,
    RunsTableModel,
)

log = logging.getLogger("studio.runs")

HISTORY_LIMIT = 500
LOG_TAIL_LINES = 5000
LOG_REFRESH_HZ = 5
CURVE_REFRESH_HZ = 5
LOG_FLUSH_MAX_LINES = 300
TAB_METRICS, TAB_LOG, TAB_DETAILS = range(3)
NO_SELECTION_TEXT = "Select a run to see its metrics; select several to compare them."


class RunsDock(QWidget):
    """The dock's content. ``shell`` is the main window (bridge, workspace, threads, dialogs)."""

    def __init__(self, shell, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("runsDock")
        self.shell = shell
        self.commands = shell.commands
        self.jobs = shell.bridge.jobs
        self.model = RunsTableModel(self.jobs, self)
        self.plot = None                                  # PlotSpecView, made on first use
        self._shown: list[str] = []                       # run ids on the plot
        self._plotted: dict[str, int] = {}                # run id -> points drawn
        self._series_names: dict[str, str] = {}
        self._metric = ""
        self._file_metrics: dict[str, dict[str, tuple[list, list]]] = {}
        self._versions: dict[str, dict] = {}              # run id -> code version (params.json)
        self._log_job = ""
        self._log_seen = 0
        self._curves_due: set[str] = set()
        self._curve_timer = QTimer(self)
        self._curve_timer.setSingleShot(True)
        self._curve_timer.setInterval(1000 // CURVE_REFRESH_HZ)
        self._curve_timer.timeout.connect(self._flush_curves)
        self._log_timer = QTimer(self)
        self._log_timer.setSingleShot(True)
        self._log_timer.setInterval(1000 // LOG_REFRESH_HZ)
        self._log_timer.timeout.connect(self._flush_log)
        self._building_combo = False
        self._replies: tuple[Callable | None, Callable | None] = (None, None)
        self._build()
        self._unlisten = self.jobs.listen(self._on_job_change)
        self.destroyed.connect(lambda *_: self._unlisten())

    # -- layout --------------------------------------------------------------------------------
    def _build(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self._build_toolbar())

        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(24)
        self.table.setItemDelegateForColumn(COL_PROGRESS, ProgressDelegate(self.table))
        header = self.table.horizontalHeader()
        header.setHighlightSections(False)
        for column, width in ((COL_RUN, 168), (COL_METHOD, 120), (COL_STATE, 80),
                              (COL_PROGRESS, 140), (COL_ELAPSED, 60)):
            self.table.setColumnWidth(column, width)
        header.setSectionResizeMode(COL_NOTES, QHeaderView.ResizeMode.Stretch)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.table.selectionModel().selectionChanged.connect(self._on_selection)
        self.table.doubleClicked.connect(lambda _index: self.tabs.setCurrentIndex(TAB_DETAILS))
        self.table.addAction(self.delete_action)  # the Delete key works in the table too

        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self._build_metrics_tab(), "Metrics")
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(LOG_TAIL_LINES)
        self.log_view.setPlaceholderText("The selected run's log appears here.")
        self.log_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.tabs.addTab(self.log_view, "Log")
        self.tabs.addTab(self._build_details_tab(), "Details")

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 5)
        self.splitter.setStretchFactor(1, 4)
        self.splitter.setSizes([720, 560])
        splitter = self.splitter
        splitter.setChildrenCollapsible(False)
        layout.addWidget(splitter, 1)
        self._update_actions()

    def _build_toolbar(self) -> QToolBar:
        bar = QToolBar()
        bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)

        def selection() -> dict:
            return {"run_ids": self.selected_ids()}

        def action(command_id: str, text: str, tip: str, shortcut=None, args=selection
                   ) -> QAction:
            act = command_action(self, self.commands, command_id, text, args)
            act.setShortcuts([])  # the Runs menu holds the command's own key
            if shortcut is not None:
                act.setShortcut(shortcut)
                act.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            act.setToolTip(tip + (f" ({QKeySequence(shortcut).toString()})" if shortcut else ""))
            bar.addAction(act)
            return act

        self.cancel_action = action("runs.cancel", "Cancel", "Cancel the selected jobs (a "
                                    "second cancel kills them)")
        self.rerun_action = action("runs.rerun", "Rerun", "Run the selected run again with "
                                   "the same parameters")
        self.edit_rerun_action = action("runs.rerun_with_changes", "Rerun with changes…",
                                        "Edit the parameters and run again")
        bar.addSeparator()
        # no run_ids: the command asks before deleting the selection
        self.delete_action = action("runs.delete", "Delete", "Delete the selected runs and "
                                    "their folders", QKeySequence.StandardKey.Delete, dict)
        self.checkpoint_button = QToolButton()
        self.checkpoint_button.setText("Export checkpoint")
        self.checkpoint_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.checkpoint_menu = QMenu(self.checkpoint_button)
        self.checkpoint_menu.aboutToShow.connect(self._fill_checkpoint_menu)
        self.checkpoint_button.setMenu(self.checkpoint_menu)
        mark_argument(self.checkpoint_button, "app.export_checkpoint")  # it asks which one
        bar.addWidget(self.checkpoint_button)
        self.export_plot_action = command_action(self, self.commands, "runs.export_plot",
                                                 "Export plot…")
        self.export_plot_action.setToolTip("Save the metrics plot as PNG, SVG or PDF")
        bar.addAction(self.export_plot_action)
        self.folder_action = command_action(self, self.commands, "runs.open_folder",
                                            "Open folder",
                                            lambda: {"run_id": self.current_id()})
        self.folder_action.setToolTip("Open the run folder in the file manager")
        bar.addAction(self.folder_action)
        return bar

    def _build_metrics_tab(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(6, 6, 6, 6)
        row = QHBoxLayout()
        row.addWidget(QLabel("Metric"))
        self.metric_combo = QComboBox()
        self.metric_combo.setMinimumWidth(140)
        connect(self.metric_combo.textActivated, self.metric_combo, self.commands, "runs.show",
                lambda name: {"run_ids": list(self._shown), "metric": name})
        row.addWidget(self.metric_combo)
        self.compare_note = QLabel("")
        self.compare_note.setObjectName("emptyNote")
        row.addWidget(self.compare_note, 1)
        layout.addLayout(row)
        self.plot_stack = QStackedWidget()
        self.plot_placeholder = QLabel(NO_SELECTION_TEXT)
        self.plot_placeholder.setObjectName("emptyNote")
        self.plot_placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.plot_placeholder.setWordWrap(True)
        self.plot_stack.addWidget(self.plot_placeholder)
        layout.addWidget(self.plot_stack, 1)
        return page

    def _build_details_tab(self) -> QWidget:
        """Left: what the run is and its parameters; right: the user's notes on it."""
        page = QWidget()
        layout = QHBoxLayout(page)
        layout.setContentsMargins(8, 6, 8, 6)
        left = QVBoxLayout()
        self.summary_label = QLabel("Select a run.")
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        left.addWidget(self.summary_label)
        self.params_view = QPlainTextEdit()
        self.params_view.setReadOnly(True)
        self.params_view.setPlaceholderText("parameters")
        left.addWidget(self.params_view, 1)
        right = QVBoxLayout()
        right.addWidget(QLabel("Notes"))
        self.notes_edit = QPlainTextEdit()
        self.notes_edit.setPlaceholderText("What you tried, what you saw (kept in the "
                                           "workspace)")
        right.addWidget(self.notes_edit, 1)
        self.save_notes_button = QPushButton("Save notes")
        connect_button(self.save_notes_button, self.commands, "runs.set_notes",
                       lambda: {"run_id": self.current_id(),
                                "notes": self.notes_edit.toPlainText()})
        right.addWidget(self.save_notes_button, 0, Qt.AlignmentFlag.AlignRight)
        layout.addLayout(left, 3)
        layout.addLayout(right, 2)
        return page

    # -- history -------------------------------------------------------------------------------
    def load_history(self) -> None:
        """Runs of earlier sessions from the workspace index (read in a worker thread)."""
        workspace = self.shell.workspace
        self.shell.run_in_thread(lambda: workspace.runs(limit=HISTORY_LIMIT),
                                 on_done=self.jobs.add_history)

    def reset(self) -> None:
        """A new workspace: forget what was shown."""
        for record in list(self.jobs.records()):
            self.jobs.remove(record.id)
        self._file_metrics.clear()
        self._show([])

    # -- selection -----------------------------------------------------------------------------
    def selected_records(self) -> list[JobRecord]:
        rows = sorted({index.row() for index in self.table.selectionModel().selectedRows()})
        return [r for r in (self.model.record_at(row) for row in rows) if r is not None]

    def current_record(self) -> JobRecord | None:
        records = self.selected_records()
        return records[0] if records else None

    def selected_ids(self) -> list[str]:
        return [record.id for record in self.selected_records()]

    def current_id(self) -> str:
        record = self.current_record()
        return record.id if record is not None else ""

    def shown_records(self) -> list[JobRecord]:
        """The runs on the plot and in the tabs (the selection, once shown)."""
        return [r for r in (self.jobs.get(job_id) for job_id in self._shown) if r is not None]

    def select(self, *job_ids: str) -> None:
        selection = self.table.selectionModel()
        selection.clearSelection()
        flags = (QItemSelectionModel.SelectionFlag.Select
                 | QItemSelectionModel.SelectionFlag.Rows)
        for job_id in job_ids:
            row = self.model.row_of(job_id)
            if row >= 0:
                selection.select(self.model.index(row, 0), flags)
        if job_ids and self.model.row_of(job_ids[0]) >= 0:
            self.table.scrollTo(self.model.index(self.model.row_of(job_ids[0]), 0))

    def _on_selection(self, *_args) -> None:
        records = self.selected_records()
        self._show([r.id for r in records])
        self._update_actions()

    def _update_actions(self) -> None:
        records = self.selected_records()
        one = len(records) == 1
        checkpoints = self.checkpoints_of(records[0]) if one else []
        self.cancel_action.setEnabled(any(r.active and r.live for r in records))
        self.rerun_action.setEnabled(bool(records) and all(r.method for r in records))
        self.edit_rerun_action.setEnabled(one and bool(records[0].method))
        self.delete_action.setEnabled(bool(records))
        self.checkpoint_button.setEnabled(bool(checkpoints))
        self.checkpoint_button.setToolTip(
            "Copy a checkpoint of the run into a folder" if checkpoints
            else "This run saved no checkpoint" if one else "Select one run")
        self.folder_action.setEnabled(one)
        self.export_plot_action.setEnabled(bool(records))
        self.save_notes_button.setEnabled(one)
        self.notes_edit.setEnabled(one)

    # -- showing runs --------------------------------------------------------------------------
    def _show(self, job_ids: list[str]) -> None:
        self._shown = job_ids
        records = [r for r in (self.jobs.get(j) for j in job_ids) if r is not None]
        self._show_details(records[0] if len(records) == 1 else None, len(records))
        self._show_log(records[0] if len(records) == 1 else None)
        if not records:
            self.plot_placeholder.setText(NO_SELECTION_TEXT)
            self.plot_stack.setCurrentWidget(self.plot_placeholder)
            self.metric_combo.clear()
            self.compare_note.setText("")
            return
        # finished runs are drawn from metrics.jsonl (every step; live events were coalesced)
        missing = [r.id for r in records if not r.active and r.id not in self._file_metrics]
        if missing:
            self.shell.run_in_thread(self._read_metrics, missing, on_done=self._metrics_loaded)
        self._redraw()

    def _read_metrics(self, job_ids: list[str]) -> dict[str, dict]:
        """Worker thread: metrics.jsonl of finished runs, as ``{run: {metric: (xs, ys)}}``."""
        workspace = self.shell.workspace
        return {job_id: _as_arrays(metrics_from_records(
                    read_jsonl(workspace.run_dir(job_id) / "metrics.jsonl")))
                for job_id in job_ids}

    def _metrics_loaded(self, loaded: dict[str, dict]) -> None:
        changed = [job_id for job_id in set(loaded) & set(self._shown)
                   if _point_counts(loaded[job_id]) != _point_counts(self._metrics_of_id(job_id))]
        self._file_metrics.update(loaded)
        if changed or (set(loaded) & set(self._shown) and self.plot_stack.currentWidget()
                       is self.plot_placeholder):
            self._redraw()

    def _metrics_of_id(self, job_id: str) -> dict[str, tuple[list, list]]:
        record = self.jobs.get(job_id)
        return self._metrics_of(record) if record is not None else {}

    def _metrics_of(self, record: JobRecord) -> dict[str, tuple[list, list]]:
        if record.id in self._file_metrics:
            return self._file_metrics[record.id]
        return record.metrics

    def _redraw(self) -> None:
        records = [r for r in (self.jobs.get(j) for j in self._shown) if r is not None]
        if not records:
            return
        names: list[str] = []
        for record in records:
            names.extend(n for n in self._metrics_of(record) if n not in names)
        self._building_combo = True
        try:
            self.metric_combo.clear()
            self.metric_combo.addItems(names)
            if self._metric in names:
                self.metric_combo.setCurrentText(self._metric)
            elif names:
                self._metric = names[0]
        finally:
            self._building_combo = False
        several = len(records) > 1
        if not names:
            self.plot_placeholder.setText(
                "No metrics reported yet." if any(r.active for r in records)
                else "These runs reported no metrics." if several
                else "This run reported no metrics.")
            self.plot_stack.setCurrentWidget(self.plot_placeholder)
            return
        plot = self._ensure_plot()
        self.compare_note.setText(f"comparing {len(records)} runs" if several else "")
        series, self._plotted, self._series_names = [], {}, {}
        for record in records:
            xs, ys = self._metrics_of(record).get(self._metric, ([], []))
            name = f"{record.id[-6:]} {record.method}" if several else (self._metric or "value")
            self._series_names[record.id] = name
            self._plotted[record.id] = len(xs)
            series.append({"name": name, "x": xs, "y": ys, "style": "line"})
        title = (f"{self._metric} across {len(records)} runs" if several
                 else f"{records[0].method} · {records[0].id}")
        plot.set_spec({"kind": "plot", "title": title, "xlabel": "step",
                       "ylabel": self._metric, "series": series},
                      provenance=self._provenance(records))
        self.plot_stack.setCurrentWidget(plot)

    def show_runs(self, job_ids: list[str], metric: str = "") -> None:
        """Select these runs (``runs.show``), plotting ``metric`` once they report it."""
        if metric:
            self._metric = metric
        if job_ids == self._shown:
            self._redraw()
        self.select(*job_ids)

    def known_metrics(self, records: list[JobRecord]) -> set[str] | None:
        """The metrics these runs reported, or ``None`` while that is not known yet (a run
        still going, or a finished run's metrics.jsonl not read yet)."""
        names: set[str] = set()
        for record in records:
            if record.active or record.id not in self._file_metrics:
                return None
            names.update(self._file_metrics[record.id])
        return names

    def prepare_plot(self) -> None:
        """Build the (hidden) plot now, so the first run shown does not wait for it."""
        self._ensure_plot()

    def _ensure_plot(self):
        if self.plot is None:
            from studio.widgets.plot_view import PlotSpecView

            self.plot = PlotSpecView()
            self.plot_stack.addWidget(self.plot)
        return self.plot

    def _append_live(self, record: JobRecord) -> None:
        """A shown job made progress: its curve is extended CURVE_REFRESH_HZ times a second
        (each extension repaints the plot; progress may arrive 30 times a second)."""
        if record.id in self._shown and record.id not in self._file_metrics:
            self._curves_due.add(record.id)
            if not self._curve_timer.isActive():
                self._curve_timer.start()

    def _flush_curves(self) -> None:
        due, self._curves_due = self._curves_due, set()
        for record in (self.jobs.get(job_id) for job_id in due):
            if record is None or record.id not in self._shown:
                continue
            if (self._metric not in record.metrics or record.id not in self._series_names
                    or self.plot_stack.currentWidget() is not self.plot):
                if record.metrics:
                    self._redraw()  # the first metric arrived: build the plot's curves
                continue
            xs, ys = record.metrics[self._metric]
            drawn = self._plotted.get(record.id, 0)
            if len(xs) > drawn and self.plot is not None:
                self.plot.append_points(self._series_names[record.id], xs[drawn:], ys[drawn:])
                self._plotted[record.id] = len(xs)

    def curve_point_count(self) -> int:
        """Points on the metrics plot (drawn or queued), over every curve."""
        if self.plot is None:
            return 0
        return sum(self.plot.point_count(name) for name in self.plot.series_names())

    def _show_log(self, record: JobRecord | None) -> None:
        self.log_view.clear()
        self._log_job = record.id if record is not None else ""
        self._log_seen = 0
        if record is None:
            return
        if record.live and record.active:
            self._flush_log()
            return
        path = Path(record.run_dir or self.shell.workspace.run_dir(record.id)) / "log.txt"
        self.shell.run_in_thread(_tail, path, LOG_TAIL_LINES,
                                 on_done=lambda text, job=record.id: self._set_log(job, text))

    def _set_log(self, job_id: str, text: str) -> None:
        record = self.jobs.get(job_id)
        if job_id != self._log_job or record is None:
            return
        if record.error and record.error.get("traceback"):
            text = (text + "\n" if text else "") + record.error["traceback"].rstrip()
        self.log_view.setPlainText(text)
        self._log_seen = record.log_total

    def _append_log(self, record: JobRecord) -> None:
        """Schedule the shown log's update: at most LOG_REFRESH_HZ repaints a second."""
        if record.id == self._log_job and not self._log_timer.isActive():
            self._log_timer.start()

    def _flush_log(self) -> None:
        """New lines of the shown job; a flood is cut to its last lines (log.txt has all)."""
        record = self.jobs.get(self._log_job)
        if record is None:
            return
        new = record.log_total - self._log_seen
        if new <= 0:
            return
        lines = list(record.log)[-min(new, len(record.log), LOG_FLUSH_MAX_LINES):]
        if new > len(lines):
            lines.insert(0, f"[… {new - len(lines)} more lines; the run's log.txt has them]")
        self.log_view.appendPlainText("\n".join(lines))
        self._log_seen = record.log_total

    def _show_details(self, record: JobRecord | None, count: int) -> None:
        if record is None:
            self.summary_label.setText(f"{count} runs selected." if count else "Select a run.")
            self.params_view.clear()
            self.notes_edit.clear()
            return
        reason = f" ({record.reason})" if record.reason else ""
        seen = "" if record.live else " · from an earlier session"
        outputs = ", ".join(f"{k}: {v}" for k, v in record.outputs.items())
        checkpoints = ", ".join(checkpoint_names(self.run_dir(record))) or "none"
        self.summary_label.setText(
            f"<b>{html.escape(record.method or '?')}</b> · run {record.id}{seen}<br>"
            f"{record.state}{html.escape(reason)} · seed {record.seed} · "
            f"checkpoints: {html.escape(checkpoints)}<br>"
            f"<span style='color:gray'>{html.escape(str(self.run_dir(record)))}</span>"
            + (f"<br>outputs: {html.escape(outputs)}" if outputs else ""))
        self.params_view.setPlainText(json.dumps(record.params, indent=2, sort_keys=True))
        self.notes_edit.setPlainText(record.notes)

    def run_dir(self, record: JobRecord) -> Path:
        return Path(record.run_dir) if record.run_dir else self.shell.workspace.run_dir(record.id)

    def _provenance(self, records: list[JobRecord]) -> dict:
        for r in records:
            if r.id not in self._versions:
                self._versions[r.id] = _code_version(self.run_dir(r))
        runs = [{"run_id": r.id, "method": r.method, "params": r.params, "seed": r.seed,
                 **self._versions[r.id]} for r in records]
        if len(runs) == 1:
            return {**runs[0], "metric": self._metric}
        return {"runs": runs, "metric": self._metric}

    # -- live updates --------------------------------------------------------------------------
    def _on_job_change(self, record: JobRecord, what: str) -> None:
        if what == PROGRESS:
            self._append_live(record)
        elif what == LOG:
            self._append_log(record)
        elif what == STATE:
            if record.id in self._shown:
                if not record.active and record.live:
                    # the events were coalesced: the run folder has every point and line
                    self.shell.run_in_thread(self._read_metrics, [record.id],
                                             on_done=self._metrics_loaded)
                    if record.id == self._log_job:
                        self._show_log(record)
                if len(self._shown) == 1:
                    self._show_details(record, 1)
            self._update_actions()
        elif what == NOTES and self._shown == [record.id]:
            self.notes_edit.setPlainText(record.notes)
        elif what == REMOVED and record.id in self._shown:
            self._show([j for j in self._shown if j != record.id])

    # -- what the commands open or do (studio.shell_commands) ----------------------------------
    def ask_changes(self, record: JobRecord, method: dict) -> None:
        """The run's parameters in the method's form (``runs.rerun_with_changes``)."""
        RerunDialog(self.shell, record, method, self).open()

    @contextmanager
    def replying(self, on_accepted: Callable | None, on_error: Callable | None
                 ) -> Iterator[None]:
        """The engine's answer to a run submitted inside goes to these (the rerun form shows
        a rejected parameter on its field)."""
        self._replies = (on_accepted, on_error)
        try:
            yield
        finally:
            self._replies = (None, None)

    def submit_changed(self, record: JobRecord, params: dict, seed: int) -> None:
        on_accepted, on_error = self._replies
        self._replies = (None, None)
        self.shell.submit(record.method, params, record.inputs, seed, on_accepted=on_accepted,
                          on_error=on_error)

    def confirm_delete(self, job_ids: list[str]) -> None:
        """Ask, then run ``runs.delete`` naming the runs (that is the line logged)."""
        box = QMessageBox(QMessageBox.Icon.Question, "Delete runs",
                          f"Delete {len(job_ids)} run(s) and their folders? This cannot be "
                          f"undone.", QMessageBox.StandardButton.Yes
                          | QMessageBox.StandardButton.Cancel, self)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.finished.connect(lambda result: self.commands.trigger("runs.delete",
                                                                  run_ids=job_ids)
                             if result == QMessageBox.StandardButton.Yes else None)
        box.finished.connect(box.deleteLater)
        box.open()

    def delete_runs(self, job_ids: list[str]) -> None:
        """Remove runs from the index and the disk (in a worker thread), then from the table."""
        workspace = self.shell.workspace

        def delete() -> list[str]:
            for job_id in job_ids:
                workspace.delete_run(job_id)
            return job_ids

        def deleted(done: list[str]) -> None:
            for job_id in done:
                self._file_metrics.pop(job_id, None)
                self.jobs.remove(job_id)
            self.shell.status(f"Deleted {len(done)} run(s)")

        self.shell.run_in_thread(delete, on_done=deleted)

    def save_notes_of(self, job_id: str, notes: str) -> None:
        workspace = self.shell.workspace
        self.shell.run_in_thread(workspace.set_notes, job_id, notes,
                                 on_done=lambda _: self.jobs.set_notes(job_id, notes))

    def ask_plot_path(self) -> None:
        """The export dialog, once the command that asked has returned (the dialog is modal;
        the ``runs.export_plot`` it runs is then the user's, and logged)."""
        from studio.widgets.figure_export import ask_export

        def ask() -> None:
            choice = ask_export(self.shell, "Export plot", "plot.png")
            if choice is not None:
                self.commands.trigger("runs.export_plot", path=str(choice.path),
                                      dpi=choice.dpi)

        QTimer.singleShot(0, ask)

    def checkpoints_of(self, record: JobRecord) -> list[str]:
        return checkpoint_names(self.run_dir(record))

    def ask_checkpoint_folder(self, job_id: str, checkpoint: str) -> None:
        dialog = QFileDialog(self, f"Export checkpoint {checkpoint} into a folder")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        dialog.fileSelected.connect(lambda folder: self.commands.trigger(
            "app.export_checkpoint", run_id=job_id, checkpoint=checkpoint, folder=folder))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def _fill_checkpoint_menu(self) -> None:
        self.checkpoint_menu.clear()
        record = self.current_record()
        for name in self.checkpoints_of(record) if record is not None else []:
            self.checkpoint_menu.addAction(command_action(
                self.checkpoint_menu, self.commands, "app.export_checkpoint", name,
                lambda n=name, r=record.id: {"run_id": r, "checkpoint": n}))

    def context_menu(self) -> QMenu:
        """The table's right-click menu for the selected runs."""
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        for act in (self.cancel_action, self.rerun_action, self.edit_rerun_action,
                    self.delete_action, self.export_plot_action, self.folder_action):
            menu.addAction(act)
        self.add_open_actions(menu)
        return menu

    def _context_menu(self, position) -> None:
        self.context_menu().popup(self.table.viewport().mapToGlobal(position))

    def add_open_actions(self, menu: QMenu) -> None:
        """"Open <output> in <panel>" for each output of the selected run that a panel
        opens (a NIfTI in the fMRI viewer, samples in the molecule inspector, …): ``app.open``
        with the output's path."""
        record = self.current_record()
        if record is None:
            return
        entries = []
        for name, path in self.shell.run_outputs(self.run_dir(record), record.outputs):
            entry = self.shell.panel_for_file(path)
            if entry is not None:
                entries.append((f"Open {name} in {entry.title}", path))
        if entries:
            menu.addSeparator()
        for text, path in entries:
            action = command_action(menu, self.commands, "app.open", text,
                                    lambda p=path: {"paths": [str(p)]})
            action.setShortcuts([])  # Ctrl+O is File > Open's
            action.setToolTip(str(path))
            menu.addAction(action)


class RerunDialog(QDialog):
    """The run's parameters in the method's form; Run submits, engine errors show inline."""

    def __init__(self, shell, record: JobRecord, method: dict, parent: QWidget | None = None
                 ) -> None:
        super().__init__(parent)
        from studio.widgets.schema_form import SchemaForm

        self.shell, self.record = shell, record
        self.setWindowTitle(f"Rerun {record.method}")
        self.setMinimumWidth(420)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"<b>{method.get('title') or record.method}</b><br>"
                                f"edited from run {record.id}"))
        self.form = SchemaForm(method.get("params_schema") or {}, values=record.params)
        layout.addWidget(self.form)
        seed_row = QHBoxLayout()
        seed_row.addWidget(QLabel("Seed"))
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setValue(int(record.seed or 0))
        seed_row.addWidget(self.seed)
        seed_row.addStretch(1)
        layout.addLayout(seed_row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.run_button = buttons.addButton("Run", QDialogButtonBox.ButtonRole.AcceptRole)
        self.run_button.setProperty("primary", "true")
        buttons.accepted.connect(self.submit)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def submit(self) -> None:
        """Run ``runs.rerun_with_changes`` with the form's values (logged as the user's);
        the engine's rejection comes back onto the fields."""
        if self.form.validate():
            return
        self.run_button.setEnabled(False)
        try:
            with self.shell.runs_dock.replying(lambda _job: self.accept(), self._show_error):
                self.shell.commands.run_as_user(
                    "runs.rerun_with_changes", run_ids=[self.record.id],
                    params=self.form.values(), seed=self.seed.value())
        except CommandError as exc:
            self._show_error(str(exc))

    def _show_error(self, message: str) -> None:
        from studio.widgets.schema import errors_from_message

        fields, general = errors_from_message(message)
        self.form.set_errors({**fields, **({"": "\n".join(general)} if general else {})})
        self.run_button.setEnabled(True)


def metrics_from_records(records: list[dict]) -> dict[str, tuple[list, list]]:
    """metrics.jsonl lines ``{step, t, **metrics}`` -> ``{metric: (steps, values)}``."""
    series: dict[str, tuple[list, list]] = {}
    for i, line in enumerate(records):
        step = line.get("step", i)
        for name, value in line.items():
            if name in ("step", "t") or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)) or value is None:
                xs, ys = series.setdefault(name, ([], []))
                xs.append(step)
                ys.append(value)
    return series


def _as_arrays(series: dict[str, tuple[list, list]]) -> dict[str, tuple]:
    """Worker thread: float arrays (None -> NaN), so drawing a long run costs the main
    thread no per-point Python work."""
    import numpy as np

    return {name: (np.asarray(xs, dtype=float),
                   np.array([np.nan if v is None else v for v in ys], dtype=float))
            for name, (xs, ys) in series.items()}


def _point_counts(metrics: dict[str, tuple[list, list]]) -> dict[str, int]:
    return {name: len(xs) for name, (xs, _ys) in metrics.items()}


def checkpoint_names(run_dir: Path) -> list[str]:
    folder = run_dir / "checkpoints"
    try:
        return sorted(p.name for p in folder.iterdir() if p.is_dir())
    except OSError:
        return []


def copy_checkpoint(source: Path, destination_folder: Path) -> Path:
    """Copy ``checkpoints/<name>/`` into a folder, never over an existing one."""
    target = destination_folder / source.name
    suffix = 1
    while target.exists():
        suffix += 1
        target = destination_folder / f"{source.name}-{suffix}"
    shutil.copytree(source, target)
    return target


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(list(handle)[-lines:]).rstrip("\n")
    except OSError:
        return ""


def _code_version(run_dir: Path) -> dict:
    """The code and package versions a run recorded in its params.json."""
    try:
        record = json.loads((run_dir / "params.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {key: record[key] for key in ("code_version", "git", "packages") if key in record}
