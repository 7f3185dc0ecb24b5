"""The dialogue panel: read transcripts beside their per-turn beliefs, relabel and annotate
turns (undoable), and run the SC-ICL simulator and gain maps from a form.

Left, the transcripts of the open file. Middle, the chosen transcript's turns with search;
label and note cells are editable and every change goes through ``host.push_edit``. Right,
tabs: the per-turn belief plot (the selected turn is marked on it), the method form (the
engine's ``scicl.*`` methods), and the figures the runs made. Exports: the figure shown (PNG,
SVG, PDF drawn for the page at the chosen resolution), the transcripts (JSONL) and the
per-turn metrics (CSV), each with its provenance (in the figure, beside the data files).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

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
from panels.dialogue.model import DialogueModel, decode, turn_belief
from panels.widgets.commands import command
from panels.widgets.drops import OpensDroppedFiles
from panels.widgets.job_output import RunOutputs
from panels.widgets.jobs import PanelJobs
from studio.widgets.figure_export import DEFAULT_DPI, ExportChoice, ask_export, export_widget
from studio.widgets.plot_view import PlotSpecView
from studio.widgets.schema import errors_from_message
from studio.widgets.schema_form import SchemaForm

FORM_METHODS = ("scicl.simulate", "scicl.gain_map", "scicl.llm_dialogue",
                "scicl.reproduce")
COLUMNS = ["turn", "role", "content", "belief", "label", "note"]
COL_CONTENT, COL_BELIEF, COL_LABEL, COL_NOTE = 2, 3, 4, 5
EDIT_COLUMNS = {COL_CONTENT: "content", COL_LABEL: "label", COL_NOTE: "note"}
RERUN_METHOD = "scicl.llm_dialogue"
TAB_BELIEFS, TAB_RUN, TAB_FIGURES = range(3)
SELECTED_SERIES = "selected turn"


def listed_lines(numbers: list[int], shown: int = 10) -> str:
    """"lines 6, 9 and 12" (and how many more past ``shown``)."""
    head = ", ".join(str(n) for n in numbers[:shown])
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return f"line{'s' if len(numbers) > 1 else ''} {head}{more}"


class DialoguePanel(OpensDroppedFiles, QWidget):
    def __init__(self, host: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.model = DialogueModel()
        self.figures: dict[str, tuple[str, dict]] = {}  # list label -> (job, artifact)
        self.form: SchemaForm | None = None
        self._filling = False
        self._hit_index = -1
        self._schemas: dict[str, dict] = {}
        self._document: str | None = None  # the file whose edits are on the undo history
        self._build()
        self.model.events.connect("loaded", self._show_transcripts)
        self.model.events.connect("selected", self._on_selected)
        self.model.events.connect("turn_changed", self._on_turn_changed)
        self.jobs = PanelJobs(host, self.run_status.setText, on_result=self._on_result,
                              on_artifact=self._on_artifact)
        self._unsubscribe = host.subscribe(self._on_host_event)
        self.refresh_methods()
        self.setAcceptDrops(True)

    # -- layout --------------------------------------------------------------------------

    def _build(self) -> None:
        bar = QHBoxLayout()
        self.open_button = QPushButton("Open transcripts…")
        self.open_button.clicked.connect(self.choose_file)
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search turns, labels and notes")
        self.search_edit.returnPressed.connect(self.next_hit)
        self.search_edit.textChanged.connect(self.search)
        self.hits_label = QLabel("")
        self.export_transcripts_button = QPushButton("Export JSONL…")
        self.export_transcripts_button.clicked.connect(
            lambda: self._ask_path("Export transcripts", "JSON Lines (*.jsonl)", "jsonl",
                                   self.export_transcripts))
        self.export_metrics_button = QPushButton("Export CSV…")
        self.export_metrics_button.clicked.connect(
            lambda: self._ask_path("Export per-turn metrics", "CSV (*.csv)", "csv",
                                   self.export_metrics))
        self.rerun_button = QPushButton("Continue from turn")
        self.rerun_button.setToolTip("rerun the dialogue with the language models from the "
                                     "selected (edited) turn: scicl.llm_dialogue")
        self.rerun_button.clicked.connect(lambda: self.rerun_from_turn())
        self.export_figure_button = QPushButton("Export figure…")
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
        self.turns_table.itemChanged.connect(self._on_item_changed)
        self.turns_table.currentCellChanged.connect(lambda row, *_: self._mark_turn(row))

        self.belief_plot = PlotSpecView()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.belief_plot, "Beliefs")
        self.tabs.addTab(self._build_run_tab(), "Run")
        self.tabs.addTab(self._build_figures_tab(), "Figures")

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
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.outputs.button)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(splitter, 1)
        layout.addLayout(status_row)

    def _build_run_tab(self) -> QWidget:
        tab = QWidget()
        layout = QVBoxLayout(tab)
        self.method_box = QComboBox()
        self.method_box.currentTextChanged.connect(self._show_form)
        self.form_area = QScrollArea()
        self.form_area.setWidgetResizable(True)
        self.run_button = QPushButton("Run")
        self.run_button.clicked.connect(self.run)
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
        self.figure_list.currentTextChanged.connect(self._show_figure)
        self.figure_plot = PlotSpecView()
        layout.addWidget(self.figure_list, 1)
        layout.addWidget(self.figure_plot, 3)
        return tab

    # -- transcripts ---------------------------------------------------------------------

    @command("Cannot open the transcripts")
    def open_file(self, path: str | os.PathLike) -> bool:
        """Open a transcript file in place of the one shown (which the undo history leaves;
        its autosaved edits stay), replaying the new one's saved edits; the search starts
        over on it."""
        try:
            loaded = self.model.load(path)
        except Exception as exc:  # FormatError and OSError name the file
            self.host.show_error("Cannot open the transcripts", str(exc))
            return False
        self._leave_document()
        self._document = self.model.document
        self._reset_search()
        restore = getattr(self.host, "restore_edits", None)
        restored = restore(self.model.document, self.model, decode) if callable(restore) else 0
        skipped = f"; {len(loaded.problems)} malformed line(s) skipped: " \
                  f"{listed_lines([n for n, _ in loaded.problems])} (first: " \
                  f"{loaded.problems[0][1]})" if loaded.problems else ""
        self.status.setText(f"{Path(path).name}: {len(loaded.transcripts)} transcript(s), "
                            f"{loaded.layout} layout{skipped}"
                            + (f"; {restored} saved edit(s) restored" if restored else ""))
        self._show_turns()
        return True

    def _leave_document(self) -> None:
        """The file shown before (or this one, read again: its saved edits are replayed next)
        leaves the undo history; its autosaved edits stay for when it is opened again."""
        forget = getattr(self.host, "forget_edits", None)  # hosts without an undo history
        if self._document is not None and callable(forget):
            forget(self._document)

    def _open_name(self) -> str | None:
        """What is open, as the keep-or-open question names it; ``None`` when nothing is."""
        return Path(self.model.file.path).name if self.model.file is not None else None

    def choose_file(self) -> None:
        dialog = QFileDialog(self, "Open transcripts")
        dialog.setNameFilters(["Transcripts (*.jsonl *.jsonl.gz *.csv)", "All files (*)"])
        dialog.fileSelected.connect(self.open_file)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def _show_transcripts(self) -> None:
        self.transcript_list.blockSignals(True)
        self.transcript_list.clear()
        for transcript in self.model.transcripts:
            self.transcript_list.addItem(f"{transcript.id}  ({len(transcript.turns)} turns)")
        self.transcript_list.setCurrentRow(self.model.current)
        self.transcript_list.blockSignals(False)

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
            self.model.select(row)

    def _show_turns(self) -> None:
        transcript = self.model.transcript
        self._filling = True
        try:
            self.turns_table.setRowCount(0)
            if transcript is None:
                return
            self.turns_table.setRowCount(len(transcript.turns))
            for row, turn in enumerate(transcript.turns):
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
        finally:
            self._filling = False
        self._draw_beliefs()

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

    @command("Cannot mark the turn")
    def _mark_turn(self, row: int) -> None:
        """The selected turn, marked on the belief plot (transcript and plot aligned)."""
        transcript = self.model.transcript
        if transcript is None or not 0 <= row < len(transcript.turns):
            return
        belief = turn_belief(transcript.turns[row].meta)
        self.belief_plot.set_series(SELECTED_SERIES, [row], [0.0 if belief is None else belief],
                                    style="scatter")

    @command("Cannot edit the turn")
    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() not in EDIT_COLUMNS:
            return
        try:
            edit = self.model.edit(item.row(), EDIT_COLUMNS[item.column()], item.text())
            if edit.value != edit.previous:
                self.host.push_edit(self.model.document, edit, self.model)
        finally:  # refused or not, the cells show what the turn holds
            self._show_turn_cells(item.row())

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

    @command("Cannot search")
    def search(self, query: str) -> None:
        hits = self.model.search(query)
        self.hits_label.setText(f"{len(hits)} hit(s)" if query.strip() else "")
        self._hit_index = -1
        if hits:
            self.next_hit()

    def _reset_search(self) -> None:
        """A new file: no query, no hits counted in the old one."""
        self.search_edit.blockSignals(True)
        self.search_edit.clear()
        self.search_edit.blockSignals(False)
        self.hits_label.setText("")
        self._hit_index = -1

    @command("Cannot go to the next hit")
    def next_hit(self) -> None:
        if not self.model.hits:
            return
        self._hit_index = (self._hit_index + 1) % len(self.model.hits)
        transcript, turn = self.model.hits[self._hit_index]
        if transcript != self.model.current:
            self.model.select(transcript)
        self.turns_table.setCurrentCell(turn, COL_CONTENT)

    # -- runs ----------------------------------------------------------------------------

    @command("Cannot list the methods")
    def refresh_methods(self) -> None:
        available = [m for m in self.host.methods() if m["id"] in FORM_METHODS]
        self._schemas = {m["id"]: m.get("params_schema") or {} for m in available}
        self.method_box.blockSignals(True)
        self.method_box.clear()
        self.method_box.addItems(sorted(self._schemas, key=FORM_METHODS.index))
        self.method_box.blockSignals(False)
        self._show_form(self.method_box.currentText())

    @command("Cannot show the method's form")
    def _show_form(self, method: str) -> None:
        schema = self._schemas.get(method)
        self.run_button.setEnabled(schema is not None)
        if schema is None:
            self.form_area.setWidget(QLabel("The engine lists no scicl methods yet."))
            self.form = None
            return
        self.form = SchemaForm(schema)
        self.form_area.setWidget(self.form)

    def select_method(self, method: str) -> None:
        self.method_box.setCurrentText(method)

    @command("Cannot run")
    def run(self) -> None:
        method = self.method_box.currentText()
        params = self.form.submittable() if self.form is not None and method else None
        if params is None:
            return
        self.run_status.setText(f"Submitting {method}…")
        self.jobs.submit(method, params, on_error=self._rejected)

    @command("Cannot continue the dialogue")
    def rerun_from_turn(self, turn: int | None = None) -> None:
        """Submit ``scicl.llm_dialogue`` continuing the current transcript after ``turn``
        (default: the selected one), with the form's values when that method is chosen."""
        turn = self.turns_table.currentRow() if turn is None else turn
        folder = Path(self._scratch_folder())
        name = "".join(c if c.isalnum() else "_" for c in self.model.transcript.id) \
            if self.model.transcript else "none"
        try:
            prefix = self.model.write_prefix(folder / f"prefix-{name}-{turn}.jsonl", turn)
        except (ValueError, OSError) as exc:
            self.host.show_error("Cannot rerun", str(exc))
            return
        chosen = self.method_box.currentText() == RERUN_METHOD and self.form is not None
        params = {k: v for k, v in self.form.values().items() if v is not None} if chosen \
            else {}
        params["prefix_turns"] = turn + 1
        self.run_status.setText(f"Continuing {self.model.transcript.id} after turn {turn}…")
        self.jobs.submit(RERUN_METHOD, params, {"prefix": str(prefix)}, on_error=self._rejected)

    def _scratch_folder(self) -> str:
        """Where prefixes for reruns are written: the workspace when the shell says where."""
        workspace = getattr(self.host, "workspace_path", None)
        if callable(workspace):
            folder = Path(workspace()) / "dialogue"
            folder.mkdir(parents=True, exist_ok=True)
            return str(folder)
        return tempfile.mkdtemp(prefix="studio-dialogue-")

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
        if artifact.get("kind") != "plot":
            return
        label = f"{method} / {artifact.get('name', '?')}  ({job})"
        self.figures[label] = (job, artifact)
        self.figure_list.addItem(label)
        if self.figure_list.currentRow() < 0:
            self.figure_list.setCurrentRow(0)
            self.tabs.setCurrentIndex(TAB_FIGURES)

    @command("Cannot show the figure")
    def _show_figure(self, label: str) -> None:
        if label not in self.figures:
            return
        job, artifact = self.figures[label]
        path = Path(self.host.run_dir(job)) / artifact.get("path", "")
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.run_status.setText(f"{path}: not a readable figure ({exc})")
            return
        self.figure_plot.set_spec(spec, {"run_id": job, "artifact": artifact.get("name"),
                                         "method": self.jobs[job]})

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
        if self.tabs.currentIndex() == TAB_FIGURES and label in self.figures:
            job, artifact = self.figures[label]
            run_dir = Path(self.host.run_dir(job))
            run = provenance.run_entry(run_dir)
            run.update(run_id=job, method=run["method"] or self.jobs[job])
            return provenance.record([run_dir / artifact.get("path", "")],
                                     {"panel": "dialogue", "figure": label,
                                      "artifact": artifact.get("name")}, [run])
        rows = sorted({index.row() for index in self.turns_table.selectedIndexes()})
        return self._data_provenance({"panel": "dialogue", "figure": "per-turn belief",
                                      **self.model.view_state(self.turns_table.currentRow()),
                                      "selected_turns": rows})

    def _data_provenance(self, view: dict) -> dict:
        """A record naming the open transcript file, and the run that wrote it if any."""
        path = Path(self.model.file.path) if self.model.file is not None else None
        run_dir = provenance.run_folder(path) if path is not None else None
        return provenance.record([path] if path is not None else [], view,
                                 [provenance.run_entry(run_dir)] if run_dir else [])

    def info_line(self) -> str:
        """The line a figure's caption repeats: file, transcript, selected turn, metric."""
        state = self.model.view_state(self.turns_table.currentRow())
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

    @command("Export failed")
    def export_figure(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                      caption: bool = False) -> Path:
        """The plot in front, drawn for the page at ``dpi`` as PNG, SVG or PDF, with its
        provenance inside and, when asked, the information line as its caption."""
        plot = self.current_plot()
        plot.flush()  # points still waiting for the next frame (the selected turn) drawn too
        written = export_widget(plot, ExportChoice(Path(path), dpi, caption), plot.provenance,
                                self.info_line())
        self.status.setText(f"Exported {written}")
        return written

    def export_transcripts(self, path: str | os.PathLike) -> None:
        self._export_data(lambda: self.model.export_jsonl(path), Path(path), "transcripts")

    def export_metrics(self, path: str | os.PathLike) -> None:
        self._export_data(lambda: self.model.export_metrics_csv(path), Path(path),
                          "per-turn metrics")

    def _export_data(self, write, target: Path, what: str) -> None:
        """Write a data file, then its ``.provenance.json`` sidecar: the source file and the
        edits' state (every transcript, labels and notes as edited)."""
        try:
            write()
            provenance.write_sidecar(target, self._data_provenance(
                {"panel": "dialogue", "export": what, **self.model.view_state()}))
        except Exception as exc:  # a full disk or a bad folder must not close the panel
            self.host.show_error("Export failed", f"{target}: {exc}")
            return
        self.status.setText(f"Exported {target}")

    @command("Cannot export the figure")
    def choose_figure_path(self) -> None:
        """The export dialog (file, resolution, caption), then ``export_figure``."""
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

    # -- drag and drop, lifetime ---------------------------------------------------------

    def closeEvent(self, event) -> None:
        self.jobs.close()
        self._unsubscribe()
        super().closeEvent(event)


def _cell_text(turn: Turn, column: int) -> str:
    """What an editable cell shows: the turn's text (``content``), or its label or note (the
    turn's metadata); one rule for filling the table and for refreshing it after an edit."""
    if column == COL_CONTENT:
        return turn.content
    return str(turn.meta.get(EDIT_COLUMNS[column], ""))
