"""The dialogue panel: read transcripts beside their per-turn beliefs, relabel and annotate
turns (undoable), and run the SC-ICL simulator and gain maps from a form.

Left, the transcripts of the open file. Middle, the chosen transcript's turns with search;
label, note and text cells are editable. Right, tabs: the per-turn belief plot (the chosen turn
is marked on it), the method form (the engine's ``scicl.*`` methods), and the figures the runs
made. Exports: the figure shown (PNG, SVG, PDF drawn for the page at the chosen resolution),
the transcripts (JSONL) and the per-turn metrics (CSV), each with its provenance.

Every action runs a ``dialogue.*`` command (``panels/dialogue/commands.py``) through the
window's registry, naming transcripts by id and turns by their number; this class lays the
panel out, turns what the user clicked or typed into a command's arguments, and redraws from
the model's events.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import provenance
from engine.io.transcripts import Turn
from panels.dialogue.commands import (
    COMMANDS,
    FORM_METHODS,
    RERUN_METHOD,
    SCOPE,
    TABS,
    DialogueState,
    data_provenance,
)
from panels.dialogue.model import DialogueModel, turn_belief
from panels.widgets.command_status import show_outcome
from panels.widgets.commands import command
from panels.widgets.drops import OpensDroppedFiles
from panels.widgets.job_output import RunOutputs
from panels.widgets.jobs import PanelJobs
from panels.widgets.plot_export import route_export
from panels.widgets.quiet import SetsWidgetsQuietly
from studio.command_widgets import connect, connect_button, mark_argument
from studio.commands import Invocation, registry_for
from studio.widgets.figure_export import DEFAULT_DPI, ExportChoice, ask_export, export_widget
from studio.widgets.plot_view import PlotSpecView
from studio.widgets.schema import errors_from_message
from studio.widgets.schema_form import SchemaForm

COLUMNS = ["turn", "role", "content", "belief", "label", "note"]
COL_CONTENT, COL_BELIEF, COL_LABEL, COL_NOTE = 2, 3, 4, 5
EDIT_COLUMNS = {COL_CONTENT: "content", COL_LABEL: "label", COL_NOTE: "note"}
# a cell's field -> the command that edits it and the command's argument
EDIT_COMMANDS = {"content": ("dialogue.rewrite_turn", "text"),
                 "label": ("dialogue.label_turn", "label"),
                 "note": ("dialogue.annotate_turn", "note")}
TAB_BELIEFS, TAB_RUN, TAB_FIGURES = range(3)
SELECTED_SERIES = "selected turn"


class DialoguePanel(OpensDroppedFiles, SetsWidgetsQuietly, QWidget):
    def __init__(self, host: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.model = DialogueModel()
        self.form: SchemaForm | None = None
        self._filling = False      # the table is being filled: its signals are not the user's
        self._quiet = False        # a widget set to show the state: not the user's action
        self._schemas: dict[str, dict] = {}
        # a restored method and form values, shown when the engine lists the method
        self._pending_form: tuple[str, dict] | None = None
        self._form_method = ""     # whose form is shown
        self.commands = registry_for(host, COMMANDS)
        self.state = DialogueState(self.model, host, view=self, submit=self._submit)
        self.commands.bind(SCOPE, self.state)
        self._stop_listening = self.commands.listen(self._on_invocation)
        self._build()
        self.model.events.connect("loaded", self._on_loaded)
        self.model.events.connect("selected", self._on_selected)
        self.model.events.connect("turn_selected", self._on_turn_selected)
        self.model.events.connect("turn_changed", self._on_turn_changed)
        self.model.events.connect("search", self._on_search)
        self.jobs = PanelJobs(host, self.run_status.setText, on_result=self._on_result,
                              on_artifact=self._on_artifact)
        self._unsubscribe = host.subscribe(self._on_host_event)
        self.refresh_methods()
        self.setAcceptDrops(True)

    # -- layout --------------------------------------------------------------------------

    def _build(self) -> None:
        commands = self.commands
        bar = QHBoxLayout()
        self.open_button = QPushButton("Open transcripts…")
        mark_argument(self.open_button, "dialogue.open")  # asks for the file, then opens it
        self.open_button.clicked.connect(self.choose_file)
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search turns, labels and notes")
        connect(self.search_edit.textChanged, self.search_edit, commands, "dialogue.search",
                self._search_args)
        connect(self.search_edit.returnPressed, self.search_edit, commands, "dialogue.next_hit",
                lambda: {} if self.model.hits else None)
        self.hits_label = QLabel("")
        self.export_transcripts_button = QPushButton("Export JSONL…")
        mark_argument(self.export_transcripts_button, "dialogue.export_transcripts")
        self.export_transcripts_button.clicked.connect(
            lambda: self._ask_path("Export transcripts", "JSON Lines (*.jsonl)", "jsonl",
                                   self.export_transcripts))
        self.export_metrics_button = QPushButton("Export CSV…")
        mark_argument(self.export_metrics_button, "dialogue.export_metrics")
        self.export_metrics_button.clicked.connect(
            lambda: self._ask_path("Export per-turn metrics", "CSV (*.csv)", "csv",
                                   self.export_metrics))
        self.rerun_button = QPushButton("Continue from turn")
        self.rerun_button.setToolTip("rerun the dialogue with the language models from the "
                                     "selected (edited) turn: scicl.llm_dialogue")
        connect_button(self.rerun_button, commands, "dialogue.continue_from_turn",
                       self._continue_args)
        self.export_figure_button = QPushButton("Export figure…")
        mark_argument(self.export_figure_button, "dialogue.export_figure")
        self.export_figure_button.clicked.connect(self.choose_figure_path)
        for widget in (self.open_button, self.search_edit, self.hits_label, self.rerun_button,
                       self.export_transcripts_button, self.export_metrics_button,
                       self.export_figure_button):
            bar.addWidget(widget)

        self.transcript_list = QListWidget()
        self.transcript_list.currentRowChanged.connect(self._on_transcript_row)
        self.turns_table = QTableWidget(0, len(COLUMNS))
        self.turns_table.setHorizontalHeaderLabels(COLUMNS)
        header = self.turns_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COL_CONTENT, QHeaderView.ResizeMode.Stretch)
        self.turns_table.setWordWrap(True)
        # the turn column numbers the turns as commands name them (from 0): no second,
        # 1-based row number beside it
        self.turns_table.verticalHeader().hide()
        self.turns_table.itemChanged.connect(self._on_item_changed)
        self.turns_table.currentCellChanged.connect(lambda row, *_: self._on_turn_row(row))

        self.belief_plot = PlotSpecView()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.belief_plot, "Beliefs")
        self.tabs.addTab(self._build_run_tab(), "Run")
        self.tabs.addTab(self._build_figures_tab(), "Figures")
        connect(self.tabs.currentChanged, self.tabs, commands, "dialogue.show_tab",
                lambda index: None if self._quiet else {"tab": TABS[index]})

        splitter = QSplitter(Qt.Orientation.Horizontal)
        for widget, share in ((self.transcript_list, 2), (self.turns_table, 9),
                              (self.tabs, 6)):  # the turns wide enough for label and note
            splitter.addWidget(widget)
            splitter.setStretchFactor(splitter.count() - 1, share)
        splitter.setSizes([200, 900, 600])  # proportions until the window is laid out
        self.status = QLabel("Open a transcript file (JSONL chats, HH-RLHF pairs, per-turn CSV) "
                             "or run a simulation.")
        self.status.setWordWrap(True)
        self.outputs = RunOutputs(self, self.open_file, self._open_name, self.status.setText)
        mark_argument(self.outputs.button, "dialogue.open")  # opens the run's transcript
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.outputs.button)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(splitter, 1)
        layout.addLayout(status_row)
        self._route_plot_exports()

    def _route_plot_exports(self) -> None:
        """pyqtgraph's right-click "Export..." writes no provenance: on either plot it opens
        the panel's export dialog (``dialogue.export_figure``), which writes the plot shown."""
        for plot in (self.belief_plot, self.figure_plot):
            route_export(plot.findChild(pg.GraphicsView), "dialogue.export_figure",
                         lambda: self.choose_figure_path())

    def _build_run_tab(self) -> QWidget:
        tab = QWidget()
        layout = QVBoxLayout(tab)
        self.method_box = QComboBox()
        connect(self.method_box.currentTextChanged, self.method_box, self.commands,
                "dialogue.choose_method",
                lambda method: None if self._quiet or not method else {"method": method})
        self.form_area = QScrollArea()
        self.form_area.setWidgetResizable(True)
        self.run_button = QPushButton("Run")
        connect_button(self.run_button, self.commands, "dialogue.run_method", self._run_args)
        self.run_status = QLabel("")
        self.run_status.setWordWrap(True)
        layout.addWidget(self.method_box)
        layout.addWidget(self.form_area, 1)
        layout.addWidget(self.run_button)
        layout.addWidget(self.run_status)
        return tab

    def _build_figures_tab(self) -> QWidget:
        tab = QWidget()
        layout = QVBoxLayout(tab)
        self.figure_list = QListWidget()
        connect(self.figure_list.currentTextChanged, self.figure_list, self.commands,
                "dialogue.show_figure",
                lambda label: None if self._quiet or not label else {"figure": label})
        self.figure_plot = PlotSpecView()
        layout.addWidget(self.figure_list, 1)
        layout.addWidget(self.figure_plot, 3)
        return tab

    # -- commands: the wrappers tests, drops and the window call -------------------------

    def _on_invocation(self, invocation: Invocation) -> None:
        """A dialogue command's outcome in the status line: its refusal, or what it said."""
        show_outcome(self.status, invocation, SCOPE, exports=True)

    def open_file(self, path: str | os.PathLike) -> bool:
        """Open a transcript file (``dialogue.open``); a problem is reported, never raised."""
        return self.commands.trigger("dialogue.open", path=str(path)) is not None

    def search(self, query: str) -> None:
        self.commands.trigger("dialogue.search", query=query)

    def next_hit(self) -> None:
        if self.model.hits:
            self.commands.trigger("dialogue.next_hit")

    def select_method(self, method: str) -> None:
        self.commands.trigger("dialogue.choose_method", method=method)

    def run(self) -> None:
        """Run the method chosen with the form's values (the Run button)."""
        args = self._run_args()
        if args is not None:
            self.commands.trigger("dialogue.run_method", **args)

    def rerun_from_turn(self, turn: int | None = None) -> None:
        """Continue the current transcript after ``turn`` (default: the chosen one)."""
        args = self._continue_args()
        if turn is not None:
            args["turn"] = turn
        self.commands.trigger("dialogue.continue_from_turn", **args)

    def export_figure(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                      caption: bool = False) -> Path | None:
        """The plot in front as PNG, SVG or PDF (``dialogue.export_figure``); the file
        written, or ``None`` when it was refused (and said why)."""
        return self.commands.trigger("dialogue.export_figure", path=str(path), dpi=dpi,
                                     caption=caption)

    def export_transcripts(self, path: str | os.PathLike) -> None:
        self.commands.trigger("dialogue.export_transcripts", path=str(path))

    def export_metrics(self, path: str | os.PathLike) -> None:
        self.commands.trigger("dialogue.export_metrics", path=str(path))

    def _search_args(self, text: str) -> dict | None:
        """Search as the user types; nothing to search before a file is open."""
        return None if self._quiet or self.model.file is None else {"query": text}

    def _run_args(self) -> dict | None:
        """The method chosen and the form's values; ``None`` when the form shows why not."""
        method = self.method_box.currentText()
        params = self.form.submittable() if self.form is not None and method else None
        return None if params is None else {"method": method, "params": params}

    def _continue_args(self) -> dict:
        """The transcript shown, its chosen turn, and the form's values when the form is
        scicl.llm_dialogue's."""
        args: dict = {}
        if self.model.transcript is not None:
            args = {"transcript": self.model.transcript.id, "turn": self.model.turn}
        if self.method_box.currentText() == RERUN_METHOD and self.form is not None:
            args["params"] = {k: v for k, v in self.form.values().items() if v is not None}
        return args

    # -- transcripts ---------------------------------------------------------------------

    def _open_name(self) -> str | None:
        """What is open, as the keep-or-open question names it; ``None`` when nothing is."""
        return Path(self.model.file.path).name if self.model.file is not None else None

    def choose_file(self) -> None:
        dialog = QFileDialog(self, "Open transcripts")
        dialog.setNameFilters(["Transcripts (*.jsonl *.jsonl.gz *.csv)", "All files (*)"])
        dialog.fileSelected.connect(self.open_file)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def _on_loaded(self) -> None:
        """A file opened: its transcripts listed; the search starts over on it."""
        self.transcript_list.blockSignals(True)
        self.transcript_list.clear()
        for transcript in self.model.transcripts:
            self.transcript_list.addItem(f"{transcript.id}  ({len(transcript.turns)} turns)")
        self.transcript_list.setCurrentRow(self.model.current)
        self.transcript_list.blockSignals(False)
        with self.quietly():
            self.search_edit.clear()
        self.hits_label.setText("")

    @command("Cannot show the transcript")
    def _on_selected(self, index: int) -> None:
        """The chosen transcript: marked in the list (also when the model chose it: a file
        opened, a search hit) and its turns in the table."""
        self.transcript_list.blockSignals(True)
        self.transcript_list.setCurrentRow(index)
        self.transcript_list.blockSignals(False)
        self._show_turns()

    def _on_transcript_row(self, row: int) -> None:
        if 0 <= row < len(self.model.transcripts) and row != self.model.current:
            self.commands.trigger("dialogue.select_transcript",
                                  transcript=self.model.transcripts[row].id)

    def _on_turn_row(self, row: int) -> None:
        """A turn clicked or reached by the keys: chosen (``dialogue.select_turn``)."""
        transcript = self.model.transcript
        if self._filling or self._quiet or transcript is None or row == self.model.turn \
                or not 0 <= row < len(transcript.turns):
            return
        self.commands.trigger("dialogue.select_turn", transcript=transcript.id, turn=row)

    def _show_turns(self) -> None:
        transcript = self.model.transcript
        self._filling = True
        try:
            self.turns_table.setRowCount(0)
            if transcript is not None:
                self.turns_table.setRowCount(len(transcript.turns))
                for row, turn in enumerate(transcript.turns):
                    self._fill_row(row, turn)
            turn = self.model.turn
            self.turns_table.setCurrentCell(-1 if turn is None else turn,
                                            -1 if turn is None else COL_CONTENT)
        finally:
            self._filling = False
        self._draw_beliefs()
        self._mark_turn(self.model.turn)

    def _fill_row(self, row: int, turn: Turn) -> None:
        belief = turn_belief(turn.meta)
        cells = [str(row), turn.role, _cell_text(turn, COL_CONTENT),
                 "" if belief is None else f"{belief:.3f}",
                 _cell_text(turn, COL_LABEL), _cell_text(turn, COL_NOTE)]
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if column not in EDIT_COLUMNS:
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
            if column == COL_CONTENT:
                item.setToolTip(turn.content)
            self.turns_table.setItem(row, column, item)

    def _draw_beliefs(self) -> None:
        transcript = self.model.transcript
        curves = [{"name": role, "x": xs, "y": ys, "style": "line"}
                  for role, (xs, ys) in self.model.belief_series().items()]
        title = f"per-turn belief: {transcript.id}" if transcript else "per-turn belief"
        if transcript and not curves:
            title += " (no scores yet: run scicl.score_transcripts)"
        self.belief_plot.set_spec({"kind": "plot", "title": title, "xlabel": "turn",
                                   "ylabel": "belief / score", "series": curves,
                                   "hlines": []})

    @command("Cannot show the turn")
    def _on_turn_selected(self, turn: int | None) -> None:
        """The chosen turn: current in the table (scrolled to) and marked on the plot."""
        if turn is not None and self.turns_table.currentRow() != turn:
            with self.quietly():
                self.turns_table.setCurrentCell(turn, COL_CONTENT)
        self._mark_turn(turn)

    def _mark_turn(self, row: int | None) -> None:
        """The chosen turn, marked on the belief plot (transcript and plot aligned)."""
        transcript = self.model.transcript
        if transcript is None or row is None or not 0 <= row < len(transcript.turns):
            self.belief_plot.set_series(SELECTED_SERIES, [], [], style="scatter")
            return
        belief = turn_belief(transcript.turns[row].meta)
        self.belief_plot.set_series(SELECTED_SERIES, [row], [0.0 if belief is None else belief],
                                    style="scatter")

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        """A cell typed into: the turn relabelled, annotated or rewritten by its command;
        refused or not, the cells show what the turn holds afterwards."""
        if self._filling or item.column() not in EDIT_COLUMNS:
            return
        row, transcript = item.row(), self.model.transcript
        try:
            if transcript is not None and 0 <= row < len(transcript.turns) \
                    and item.text() != _cell_text(transcript.turns[row], item.column()):
                command_id, argument = EDIT_COMMANDS[EDIT_COLUMNS[item.column()]]
                self.commands.trigger(command_id, transcript=transcript.id, turn=row,
                                      **{argument: item.text()})
        finally:
            self._show_turn_cells(row)

    def _on_turn_changed(self, transcript: str, turn: int) -> None:
        current = self.model.transcript
        if current is not None and current.id == transcript:
            self._show_turn_cells(turn)

    def _show_turn_cells(self, turn: int) -> None:
        """Refill a turn's editable cells (text, label, note) from the current transcript."""
        current = self.model.transcript
        if current is None or not 0 <= turn < len(current.turns):
            return
        changed = current.turns[turn]
        self._filling = True
        try:
            for column in EDIT_COLUMNS:
                item = self.turns_table.item(turn, column)
                if item is not None:
                    item.setText(_cell_text(changed, column))
                    if column == COL_CONTENT:
                        item.setToolTip(changed.content)
        finally:
            self._filling = False

    # -- search --------------------------------------------------------------------------

    def _on_search(self, hits: list) -> None:
        """The query in the box (also when a script searched) and its hit count."""
        if self.search_edit.text() != self.model.query:
            with self.quietly():
                self.search_edit.setText(self.model.query)
        self.hits_label.setText(f"{len(hits)} hit(s)" if self.model.query.strip() else "")

    # -- runs ----------------------------------------------------------------------------

    @command("Cannot list the methods")
    def refresh_methods(self) -> None:
        available = [m for m in self.host.methods() if m["id"] in FORM_METHODS]
        self._schemas = {m["id"]: m.get("params_schema") or {} for m in available}
        with self.quietly():
            self.method_box.clear()
            self.method_box.addItems(sorted(self._schemas, key=FORM_METHODS.index))
        self._show_form(self.method_box.currentText())
        pending = self._pending_form
        if pending is not None and pending[0] in self._schemas:  # a restored session's form
            self._pending_form = None
            self.show_method(pending[0])
            if self.form is not None:
                self.form.set_values(pending[1])

    def show_method(self, method: str) -> None:
        """The method in the box and its form below (``dialogue.choose_method``)."""
        if self.method_box.currentText() != method:
            with self.quietly():
                self.method_box.setCurrentText(method)
        if self.form is None or self._form_method != method:
            self._show_form(method)

    @command("Cannot show the method's form")
    def _show_form(self, method: str) -> None:
        schema = self._schemas.get(method)
        self.run_button.setEnabled(schema is not None)
        self._form_method = method
        if schema is None:
            self.form_area.setWidget(QLabel("The engine lists no scicl methods yet."))
            self.form = None
            return
        self.form = SchemaForm(schema)
        self.form_area.setWidget(self.form)

    def show_tab(self, tab: str) -> None:
        """Beliefs, Run or Figures in front (``dialogue.show_tab``)."""
        with self.quietly():
            self.tabs.setCurrentIndex(TABS.index(tab))

    def _submit(self, method: str, params: dict, inputs: dict) -> None:
        """A command's job, followed in the Run tab's status line."""
        self.run_status.setText(f"Submitting {method}…")
        self.jobs.submit(method, params, inputs, on_error=self._rejected)

    def _rejected(self, message: str) -> None:
        if self.form is not None:
            self.form.set_errors(errors_from_message(message))

    def _on_host_event(self, envelope: dict) -> None:
        if envelope.get("type") == "methods":
            self.refresh_methods()

    @command("Cannot show the run's transcript")
    def _on_result(self, job: str, method: str, outputs: dict) -> None:
        """A run's transcript opens when nothing is open, else after asking (``outputs``)."""
        made = outputs.get("transcript") or outputs.get("turns_csv")
        if made:
            self.outputs.offer(Path(self.host.run_dir(job)) / made, f"{method} ({job})")

    @command("Cannot show the run's figure")
    def _on_artifact(self, job: str, method: str, artifact: dict) -> None:
        if artifact.get("kind") == "plot":
            self._add_figure(job, method, artifact)

    def _add_figure(self, job: str, method: str, artifact: dict) -> str:
        """A run's figure offered in the Figures list (the first one shown at once)."""
        label = f"{method} / {artifact.get('name', '?')}  ({job})"
        self.state.figures[label] = (job, method, artifact)
        with self.quietly():
            self.figure_list.addItem(label)
            if self.figure_list.currentRow() < 0:
                self.figure_list.setCurrentRow(0)
                self.show_figure(label)
                self.tabs.setCurrentIndex(TAB_FIGURES)
        return label

    def show_figure(self, label: str) -> str | None:
        """Draw a run's figure (``dialogue.show_figure``); what went wrong, if anything."""
        job, method, artifact = self.state.figures[label]
        path = Path(self.host.run_dir(job)) / artifact.get("path", "")
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return f"{path}: not a readable figure ({exc})"
        items = self.figure_list.findItems(label, Qt.MatchFlag.MatchExactly)
        if items and self.figure_list.currentItem() is not items[0]:
            with self.quietly():
                self.figure_list.setCurrentItem(items[0])
        self.figure_plot.set_spec(spec, {"run_id": job, "artifact": artifact.get("name"),
                                         "method": method})
        return None

    # -- export --------------------------------------------------------------------------

    def current_plot(self) -> PlotSpecView:
        """The plot in front (Ctrl+E writes it), its provenance brought up to what it shows."""
        plot = self.figure_plot if self.tabs.currentIndex() == TAB_FIGURES else self.belief_plot
        plot.provenance = self.figure_provenance()
        return plot

    def figure_provenance(self) -> dict:
        """Where the figure in front came from: a run's figure names the run and its spec
        file; the belief plot names the transcript file (path, hash), the transcript and
        turn selected and the metric drawn."""
        label = self.figure_list.currentItem().text() if self.figure_list.currentItem() \
            else ""
        if self.tabs.currentIndex() == TAB_FIGURES and label in self.state.figures:
            job, method, artifact = self.state.figures[label]
            run_dir = Path(self.host.run_dir(job))
            run = provenance.run_entry(run_dir)
            run.update(run_id=job, method=run["method"] or method)
            return provenance.record([run_dir / artifact.get("path", "")],
                                     {"panel": "dialogue", "figure": label,
                                      "artifact": artifact.get("name")}, [run])
        rows = sorted({index.row() for index in self.turns_table.selectedIndexes()})
        return data_provenance(self.model, {"panel": "dialogue", "figure": "per-turn belief",
                                            **self.model.view_state(self.model.turn),
                                            "selected_turns": rows})

    def info_line(self) -> str:
        """The line a figure's caption repeats: file, transcript, selected turn, metric."""
        state = self.model.view_state(self.model.turn)
        if not state:
            return ""
        parts = [Path(self.model.file.path).name]
        if "transcript" in state:
            parts.append(f"transcript {state['transcript']} ({state['turns']} turns)")
        if "selected_turn" in state:
            belief = state["selected_belief"]
            parts.append(f"turn {state['selected_turn']} ({state['selected_role']}"
                         + (f", {belief:.3f})" if belief is not None else ")"))
        if state["metric"]:
            parts.append("metric " + ", ".join(state["metric"]))
        return " · ".join(parts)

    def write_figure(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                     caption: bool = False) -> Path:
        """The plot in front, drawn for the page at ``dpi`` as PNG, SVG or PDF, with its
        provenance inside and, when asked, the information line as its caption."""
        plot = self.current_plot()
        plot.flush()  # points still waiting for the next frame (the selected turn) drawn too
        return export_widget(plot, ExportChoice(Path(path), dpi, caption), plot.provenance,
                             self.info_line())

    def choose_figure_path(self) -> None:
        """The export dialog (file, resolution, caption), then ``dialogue.export_figure``."""
        choice = ask_export(self, "Export figure", "beliefs.png", self.info_line())
        if choice is not None:
            self.export_figure(choice.path, choice.dpi, choice.caption)

    def _ask_path(self, title: str, name_filter: str, suffix: str, then) -> None:
        dialog = QFileDialog(self, title)
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setNameFilters([name_filter])
        dialog.setDefaultSuffix(suffix)
        dialog.fileSelected.connect(then)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    # -- sessions (issue 39): what is open and how it is shown ---------------------------

    def _belief_box(self) -> pg.ViewBox:
        return self.belief_plot.findChild(pg.PlotWidget).getPlotItem().getViewBox()

    def view_state(self) -> dict:
        """The view as JSON: the file by path, the transcript and turn chosen, the search and
        its hit, the tab, the method and its form, the runs' figures and the one shown, and
        the belief plot's zoom when the user zoomed (``restore_view_state`` reads it)."""
        model = self.model
        box = self._belief_box()
        zoomed = not all(box.autoRangeEnabled())
        figure = self.figure_list.currentItem()
        state: dict = {
            "tab": TABS[self.tabs.currentIndex()],
            "method": self.method_box.currentText() or None,
            "form": self.form.values() if self.form is not None else {},
            "figures": [{"label": label, "run": job, "method": method, "artifact": artifact}
                        for label, (job, method, artifact) in self.state.figures.items()],
            "figure": figure.text() if figure is not None else None,
            "belief_zoom": {"x": [float(v) for v in box.viewRange()[0]],
                            "y": [float(v) for v in box.viewRange()[1]]} if zoomed else None}
        if model.file is not None:
            state.update({
                "path": str(Path(model.file.path).resolve()),
                "transcript": model.transcript.id if model.transcript is not None else None,
                "turn": model.turn, "search": model.query, "hit": model.hit_index})
        return json.loads(json.dumps(state))  # plain JSON: what a session file holds

    def restore_view_state(self, state: dict) -> list[str]:
        """Open what ``view_state`` named and show it the same way; a sentence for each part
        that could not be restored (a file gone, a transcript or turn the file lacks, a run's
        figure whose folder is gone)."""
        problems: list[str] = []

        def run(command_id: str, **args) -> bool:
            return self.commands.run_restoring(problems, command_id, **args)

        opened = bool(state.get("path")) and run("dialogue.open", path=str(state["path"]))
        if opened:
            if state.get("search"):
                run("dialogue.search", query=str(state["search"]))
            if state.get("transcript") is not None:
                run("dialogue.select_transcript", transcript=str(state["transcript"]))
            turn = state.get("turn")
            if turn is not None and self.model.transcript is not None:
                run("dialogue.select_turn", transcript=self.model.transcript.id, turn=turn)
            hit = state.get("hit")
            if isinstance(hit, int) and -1 <= hit < len(self.model.hits):
                self.model.hit_index = hit
            self.status.setText(self.info_line())  # not the hint of an empty panel
        self._restore_figures(state, problems)
        self._restore_form(state, problems)
        if state.get("tab") in TABS:
            run("dialogue.show_tab", tab=state["tab"])
        zoom = state.get("belief_zoom")
        if isinstance(zoom, dict):
            try:
                self._belief_box().setRange(xRange=[float(v) for v in zoom["x"]],
                                            yRange=[float(v) for v in zoom["y"]], padding=0)
            except (KeyError, TypeError, ValueError):
                problems.append(f"dialogue: the plot's zoom {zoom!r} is not x/y ranges")
        return problems

    def _restore_form(self, state: dict, problems: list[str]) -> None:
        """The method chosen and its form's values; when the engine does not list the method
        yet (a session opened while it starts), they are shown once it does."""
        method = state.get("method")
        values = state.get("form") if isinstance(state.get("form"), dict) else {}
        if not method:
            return
        if method not in FORM_METHODS:
            problems.append(f"dialogue: no method {method!r} to show the form of")
        elif method not in self._schemas:
            self._pending_form = (str(method), values)
        else:
            self._pending_form = None
            if method != self.method_box.currentText():
                self.commands.run_restoring(problems, "dialogue.choose_method", method=method)
            if self.form is not None:
                self.form.set_values(values)

    def _restore_figures(self, state: dict, problems: list[str]) -> None:
        """The runs' figures offered again where their run folders still hold them."""
        for entry in state.get("figures") or []:
            try:
                job, method, artifact = str(entry["run"]), str(entry["method"]), \
                    dict(entry["artifact"])
            except (KeyError, TypeError, ValueError):
                problems.append(f"dialogue: a run figure {entry!r} names no run")
                continue
            spec = Path(self.host.run_dir(job)) / artifact.get("path", "")
            if not spec.is_file():
                problems.append(f"dialogue: the figure {entry.get('label')!r} is gone "
                                f"({spec} does not exist)")
                continue
            if f"{method} / {artifact.get('name', '?')}  ({job})" not in self.state.figures:
                self._add_figure(job, method, artifact)
        wanted = state.get("figure")
        if wanted and wanted in self.state.figures:
            self.commands.run_restoring(problems, "dialogue.show_figure", figure=wanted)

    # -- lifetime ------------------------------------------------------------------------

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop following jobs and leave the registry (idempotent)."""
        if self.state.view is None:
            return
        self.jobs.close()
        self._unsubscribe()
        self.commands.unbind(SCOPE, self.state)
        self._stop_listening()
        self.state.view = None


def _cell_text(turn: Turn, column: int) -> str:
    """What an editable cell shows: the turn's text (``content``), or its label or note (the
    turn's metadata); one rule for filling the table and for refreshing it after an edit."""
    if column == COL_CONTENT:
        return turn.content
    return str(turn.meta.get(EDIT_COLUMNS[column], ""))
