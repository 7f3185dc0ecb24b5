"""The SAE feature browser: train SAEs across seeds (with or without the PC1 bypass), then
browse their features by importance, density and cross-seed reproducibility.

Left, tabs: the sortable feature table (most important first), the feature-density histogram,
the run's summary figures, and the ``sae_pc1.train`` form with its inputs (activation and token
files, the user's own text, a decoder LM checkpoint). Right, the feature page: label and note
(undoable, autosaved through the host), the top activating contexts as a token heat map, and
in tabs under them the activation histogram, decoder neighbours and the best match in every
other seed and, for a run on the decoder LM (whose page also lists the tokens the feature
promotes, the logit lens), a Steer box that runs
``sae_pc1.steer`` through the host and shows the continuation with and without the feature
added. The search box answers "which features fire here" for a word. Exports, each with its
provenance (run, SAE, features): a feature dashboard as a figure drawn for the page (PNG, SVG,
PDF) or HTML, the labels and notes (JSON), the SAE folder with its labels.
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import provenance
from engine.atomic import write_atomic, write_json_atomic
from panels.sae.dashboard import FeatureDashboard
from panels.sae.model import FeaturePage, SAEBrowserModel, decode
from panels.widgets.commands import command
from panels.widgets.drops import OpensDroppedFiles
from panels.widgets.job_output import RunOutputs
from panels.widgets.jobs import PanelJobs
from panels.widgets.token_text import TokenHeatView
from studio.background import run_in_background
from studio.widgets.figure_export import DEFAULT_DPI, ExportChoice, ask_export, export_widget
from studio.widgets.plot_view import PlotSpecView
from studio.widgets.schema import errors_from_message
from studio.widgets.schema_form import InputPicker, SchemaForm

TRAIN_METHOD = "sae_pc1.train"
STEER_METHOD = "sae_pc1.steer"
TRAIN_METRICS = ("mse", "explained_variance", "l0", "dead_fraction")  # shown while it trains
COLUMNS = ["feature", "label", "density", "importance", "reproducibility", "hungarian",
           "top tokens"]
NUMERIC = {"feature": "ids", "density": "density", "importance": "importance",
           "reproducibility": "reproducibility", "hungarian": "hungarian"}
COL_LABEL = COLUMNS.index("label")
SUMMARY_FIGURES = ("anisotropy", "recovery", "importance_vs_reproducibility")
HISTOGRAM_MIN_HEIGHT_PX = 120
STEER_ONLY_DECODER = "Steering needs a run on our decoder LM (Train: source 'decoder')."


class FeatureTableModel(QAbstractTableModel):
    """The feature table as a virtual model: a cell is read from the SAE's numpy columns only
    when the view paints it, so a 16k-feature SAE opens at once on the Qt main thread (one
    item per cell took seconds). Sorting is one numpy argsort (``feature_order``), numeric
    for the measures. ``Qt.UserRole`` answers a cell's value (float, int or str)."""

    def __init__(self, browser: SAEBrowserModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.browser = browser
        self.order = np.zeros(0, dtype=int)      # row -> position in browser.table
        self.rows = np.zeros(0, dtype=int)       # position in browser.table -> row
        self.sort_column, self.descending = "feature", False

    def reload(self) -> None:
        """The browser loaded another SAE: show its features in the current sort order."""
        self.beginResetModel()
        self._set_order()
        self.endResetModel()

    def _set_order(self) -> None:
        table = self.browser.table
        self.order = (np.zeros(0, dtype=int) if table is None else
                      self.browser.feature_order(self.sort_column, self.descending))
        self.rows = np.empty_like(self.order)
        self.rows[self.order] = np.arange(len(self.order))

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.order)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return super().headerData(section, orientation, role)

    def data(self, index: QModelIndex | QPersistentModelIndex,
             role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        column = COLUMNS[index.column()]
        if role == Qt.ItemDataRole.TextAlignmentRole and column in NUMERIC:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role not in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.UserRole):
            return None
        value = self.value(int(self.order[index.row()]), column)
        if role == Qt.ItemDataRole.UserRole or isinstance(value, str):
            return value
        return str(value) if isinstance(value, int) else _fmt(value)

    def value(self, position: int, column: str) -> float | int | str:
        table = self.browser.table
        if column == "feature":
            return int(table.ids[position])
        if column in NUMERIC:
            return float(getattr(table, NUMERIC[column])[position])
        if column == "label":
            return self.browser.label_of(int(table.ids[position]))
        return table.top_tokens[position]

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Reorder by a column; the selection and current row stay on their features."""
        self.layoutAboutToBeChanged.emit()
        kept = self.persistentIndexList()
        positions = [int(self.order[index.row()]) for index in kept]
        self.sort_column = COLUMNS[column]
        self.descending = order == Qt.SortOrder.DescendingOrder
        self._set_order()
        self.changePersistentIndexList(
            kept, [self.index(int(self.rows[p]), index.column())
                   for p, index in zip(positions, kept, strict=True)])
        self.layoutChanged.emit()

    def feature_at(self, row: int) -> int:
        """The feature id shown in a row, -1 outside the table."""
        if not 0 <= row < len(self.order):
            return -1
        return int(self.browser.table.ids[self.order[row]])

    def row_of(self, feature: int) -> int:
        """The row showing a feature, -1 when it is not in the table."""
        if self.browser.table is None:
            return -1
        positions = np.flatnonzero(self.browser.table.ids == feature)
        return int(self.rows[positions[0]]) if positions.size else -1

    def label_changed(self, feature: int) -> None:
        row = self.row_of(feature)
        if row >= 0:
            cell = self.index(row, COL_LABEL)
            self.dataChanged.emit(cell, cell, [Qt.ItemDataRole.DisplayRole,
                                               Qt.ItemDataRole.UserRole])


class FeatureTableView(QTableView):
    """The view of ``FeatureTableModel``; ``rowCount`` as the item table had, for scripts
    (docs/screenshots.py) that wait for the table to fill."""

    def rowCount(self) -> int:
        return self.model().rowCount() if self.model() is not None else 0


class SAEPanel(OpensDroppedFiles, QWidget):
    def __init__(self, host: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.model = SAEBrowserModel()
        self.form: SchemaForm | None = None
        self.inputs: InputPicker | None = None
        self.page: FeaturePage | None = None
        self.features = FeatureTableModel(self.model, self)
        self._document: str | None = None  # the run whose labels are on the undo history
        self._build()
        self.model.events.connect("loaded", self._show_table)
        self.model.events.connect("note_changed", self._on_note_changed)
        self.jobs = PanelJobs(host, self.run_status.setText, metrics=TRAIN_METRICS,
                              on_result=self._show_trained)
        self.steering = PanelJobs(host, self.steer_result.setText,
                                  on_result=self._show_steering)
        self._unsubscribe = host.subscribe(self._on_host_event)
        self.refresh_methods()
        self.setAcceptDrops(True)

    # -- layout --------------------------------------------------------------------------------
    def _build(self) -> None:
        bar = QHBoxLayout()
        self.open_button = QPushButton("Open run or SAE…")
        self.open_button.clicked.connect(self.choose_folder)
        self.sae_box = QComboBox()
        self.sae_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.sae_box.setMinimumContentsLength(len("L12-bypass-s10"))
        self.sae_box.setToolTip("the SAE shown: layer, raw or PC1 bypass, seed")
        self.sae_box.currentTextChanged.connect(self._on_sae_chosen)
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Which features fire on… (a word)")
        self.search_edit.returnPressed.connect(lambda: self.search(self.search_edit.text()))
        self.export_button = QPushButton("Export")
        menu = QMenu(self.export_button)
        menu.addAction("Feature dashboard (figure or web page)…", self.choose_export_path)
        menu.addAction("Labels and notes (JSON)…", lambda: self._choose_save(
            "Export feature labels", "JSON (*.json)", "json", self.export_labels))
        menu.addAction("SAE with labels (SAELens folder)…", self._choose_sae_folder)
        self.export_button.setMenu(menu)
        for widget in (self.open_button, self.sae_box, self.search_edit, self.export_button):
            bar.addWidget(widget)

        self.table = FeatureTableView()
        self.table.setModel(self.features)
        self.table.setSortingEnabled(True)
        self.table.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.selectionModel().currentRowChanged.connect(
            lambda current, _previous: self._on_row(current.row()))
        self.density_plot = PlotSpecView()
        self.summary_box = QComboBox()
        self.summary_box.currentTextChanged.connect(self._show_summary)
        self.summary_plot = PlotSpecView()
        self.summary_tab = summary = QWidget()
        summary_layout = QVBoxLayout(summary)
        summary_layout.addWidget(self.summary_box)
        summary_layout.addWidget(self.summary_plot, 1)
        self.search_list = QListWidget()
        self.search_list.itemActivated.connect(self._open_listed)
        self.search_list.itemClicked.connect(self._open_listed)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.table, "Features")
        self.tabs.addTab(self.density_plot, "Density")
        self.tabs.addTab(summary, "Summary")
        self.tabs.addTab(self.search_list, "Search")
        self.tabs.addTab(self._build_train_tab(), "Train")

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.tabs)
        splitter.addWidget(self._build_feature_page())
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        self.status = QLabel("Open a sae_pc1.train run (or an SAELens folder), or train SAEs "
                             "from the Train tab.")
        self.status.setWordWrap(True)
        self.outputs = RunOutputs(self, self.open_trained, self._open_name, self.status.setText)
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.outputs.button)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(splitter, 1)
        layout.addLayout(status_row)

    def _build_feature_page(self) -> QWidget:
        self.feature_page = QWidget()
        layout = QVBoxLayout(self.feature_page)
        self.title_label = QLabel("No feature chosen")
        self.title_label.setStyleSheet("font-weight: bold; font-size: 14pt")
        self.stats_label = QLabel("")
        self.stats_label.setWordWrap(True)
        self.label_edit = QLineEdit()
        self.label_edit.setPlaceholderText("a short name for this feature")
        self.label_edit.editingFinished.connect(lambda: self._commit_note("label"))
        self.note_edit = QLineEdit()
        self.note_edit.setPlaceholderText("notes")
        self.note_edit.editingFinished.connect(lambda: self._commit_note("note"))
        form = QFormLayout()
        form.addRow("Label", self.label_edit)
        form.addRow("Note", self.note_edit)
        self.contexts_view = TokenHeatView()
        self.histogram = PlotSpecView()
        self.neighbour_list = QListWidget()
        self.neighbour_list.itemActivated.connect(self._open_listed)
        self.neighbour_list.itemDoubleClicked.connect(self._open_listed)
        self.match_list = QListWidget()
        self.histogram.setMinimumHeight(HISTOGRAM_MIN_HEIGHT_PX)
        lists = QWidget()
        lists_layout = QHBoxLayout(lists)
        lists_layout.setContentsMargins(0, 0, 0, 0)
        for title, widget in (("Decoder neighbours", self.neighbour_list),
                              ("Best match in other seeds", self.match_list)):
            column = QVBoxLayout()
            column.addWidget(QLabel(title))
            column.addWidget(widget)
            lists_layout.addLayout(column)
        # The contexts always in view; the rest in tabs, so the page fits a 1280x800 window
        self.page_tabs = QTabWidget()
        self.page_tabs.addTab(self.histogram, "Activations")
        self.page_tabs.addTab(lists, "Neighbours and seeds")
        self.page_tabs.addTab(self._build_steer_box(), "Steer")
        layout.addWidget(self.title_label)
        layout.addWidget(self.stats_label)
        layout.addLayout(form)
        layout.addWidget(self.contexts_view, 3)
        layout.addWidget(self.page_tabs, 2)
        return self.feature_page

    def _build_steer_box(self) -> QGroupBox:
        self.steer_box = QGroupBox("Steer the decoder LM with this feature")
        self.steer_prompt = QLineEdit("The")
        self.steer_prompt.setPlaceholderText("prompt to continue")
        self.steer_alpha = QDoubleSpinBox()
        self.steer_alpha.setRange(-1000, 1000)
        self.steer_alpha.setValue(8.0)
        self.steer_alpha.setToolTip("added: alpha x the feature's unit decoder direction")
        self.steer_tokens = QSpinBox()
        self.steer_tokens.setRange(1, 256)
        self.steer_tokens.setValue(24)
        self.steer_button = QPushButton("Steer")
        self.steer_button.clicked.connect(self.steer)
        self.steer_result = QLabel("")
        self.steer_result.setWordWrap(True)
        self.steer_result.setMinimumHeight(3 * self.steer_result.fontMetrics().lineSpacing())
        self.steer_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = QHBoxLayout()
        for label, widget in (("alpha", self.steer_alpha), ("tokens", self.steer_tokens)):
            row.addWidget(QLabel(label))
            row.addWidget(widget)
        row.addWidget(self.steer_button)
        form = QFormLayout(self.steer_box)
        form.addRow("Prompt", self.steer_prompt)
        form.addRow(row)
        form.addRow(self.steer_result)
        self.steer_box.setEnabled(False)
        self.steer_box.setToolTip(STEER_ONLY_DECODER)
        return self.steer_box

    def _build_train_tab(self) -> QWidget:
        tab = QWidget()
        layout = QVBoxLayout(tab)
        self.form_area = QScrollArea()
        self.form_area.setWidgetResizable(True)
        self.inputs_box = QWidget()
        QVBoxLayout(self.inputs_box).setContentsMargins(0, 0, 0, 0)
        self.run_button = QPushButton("Train SAEs")
        self.run_button.clicked.connect(self.run)
        self.run_status = QLabel("")
        self.run_status.setWordWrap(True)
        layout.addWidget(self.form_area, 1)
        layout.addWidget(self.inputs_box)
        layout.addWidget(self.run_button)
        layout.addWidget(self.run_status)
        return tab

    # -- opening -------------------------------------------------------------------------------
    @command("Cannot open the SAE")
    def open_path(self, path: str | os.PathLike) -> bool:
        """A run or SAE folder in place of the one shown (which leaves the undo history; its
        autosaved labels stay), with its saved labels replayed; the search starts over."""
        try:
            self.model.open(path)
        except Exception as exc:  # FormatError, ValueError and OSError name the folder
            self.host.show_error("Cannot open the SAE", str(exc))
            return False
        forget = getattr(self.host, "forget_edits", None)  # hosts without an undo history
        if self._document is not None and callable(forget):
            forget(self._document)
        self._document = self.model.document
        self.search_list.clear()
        self.search_edit.clear()
        restore = getattr(self.host, "restore_edits", None)
        restored = restore(self.model.document, self.model, decode) if callable(restore) else 0
        self.sae_box.blockSignals(True)
        self.sae_box.clear()
        self.sae_box.addItems(self.model.sae_names)
        self.sae_box.setCurrentText(self.model.current_sae)
        self.sae_box.blockSignals(False)
        self._fill_summary()
        self._sort_default()
        self.status.setText(f"{Path(path).name}: {len(self.model.sae_names)} SAE(s); "
                            f"{len(self.model.table)} features in {self.model.current_sae}"
                            + (f"; {restored} saved edit(s) restored" if restored else ""))
        if self.features.rowCount():
            self.table.selectRow(0)
        return True

    def _open_name(self) -> str | None:
        """What is open, as the keep-or-open question names it; ``None`` when nothing is."""
        return self.model.run_dir.name if self.model.run_dir is not None else None

    def choose_folder(self) -> None:
        dialog = QFileDialog(self, "Open a sae_pc1 run folder or an SAELens SAE folder")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.fileSelected.connect(self.open_path)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    @command("Cannot show the SAE")
    def _on_sae_chosen(self, name: str) -> None:
        if name and name != self.model.current_sae:
            self.model.select_sae(name)
            if self.features.rowCount():
                self.table.selectRow(0)

    def _show_table(self) -> None:
        self.features.reload()
        self.density_plot.set_spec(self.model.density_histogram())

    def _sort_default(self) -> None:
        """Most important first when importance was measured, else by feature id."""
        if np.isfinite(self.model.table.importance).any():
            self.sort_by("importance", descending=True)
        else:
            self.sort_by("feature", descending=False)

    @command("Cannot sort")
    def sort_by(self, column: str, descending: bool = True) -> None:
        order = Qt.SortOrder.DescendingOrder if descending else Qt.SortOrder.AscendingOrder
        self.table.sortByColumn(COLUMNS.index(column), order)

    def feature_at_row(self, row: int) -> int:
        return self.features.feature_at(row)

    @command("Cannot show the feature")
    def _on_row(self, row: int) -> None:
        """A row chosen in the table opens its feature; a sort that only moves the current
        row (same feature) does not reload the page."""
        feature = self.feature_at_row(row)
        if feature >= 0 and feature != self.model.current:
            self.show_feature(feature)

    # -- the feature page ----------------------------------------------------------------------
    @command("Cannot show the feature")
    def show_feature(self, feature: int) -> None:
        if feature < 0:
            return
        self.page = page = self.model.select(feature)
        self.title_label.setText(f"{self.model.current_sae} · feature {feature}"
                                 + (f" · {page.label}" if page.label else ""))
        self.stats_label.setText(
            f"density {_fmt(page.density)} · importance {_fmt(page.importance)} · "
            f"reproducibility {_fmt(page.reproducibility)} (Hungarian {_fmt(page.hungarian)})"
            f" · top tokens: {page.top_tokens or '—'}"
            + (f" · promotes: {page.output_tokens}" if page.output_tokens else ""))
        steerable = self.model.decoder_checkpoint is not None
        self.steer_box.setEnabled(steerable)
        self.steer_box.setToolTip("" if steerable else STEER_ONLY_DECODER)
        self.page_tabs.setTabToolTip(self.page_tabs.indexOf(self.steer_box),
                                     "" if steerable else STEER_ONLY_DECODER)
        self.label_edit.setText(page.label)
        self.note_edit.setText(page.note)
        self.contexts_view.set_data(page.contexts or {"title": "no contexts stored",
                                                      "tokens": [], "values": []})
        self.histogram.set_spec(self.model.activation_histogram(feature))
        self.neighbour_list.clear()
        for other, cosine in page.neighbours:
            self._add_feature_item(self.neighbour_list, other, f"cos {cosine:.3f}")
        self.match_list.clear()
        for name, other, cosine in page.matches:
            self.match_list.addItem(f"{name}: feature {other}  (cos {cosine:.3f})")

    def _add_feature_item(self, target: QListWidget, feature: int, detail: str) -> None:
        label = self.model.label_of(feature)
        item = QListWidgetItem(f"feature {feature}" + (f" [{label}]" if label else "")
                               + f"  {detail}")
        item.setData(Qt.ItemDataRole.UserRole, feature)
        target.addItem(item)

    @command("Cannot show the feature")
    def _open_listed(self, item: QListWidgetItem) -> None:
        feature = item.data(Qt.ItemDataRole.UserRole)
        if feature is not None:
            self.show_feature(int(feature))

    # -- labels and notes (undoable) -----------------------------------------------------------
    @command("Cannot label the feature")
    def _commit_note(self, field_name: str) -> None:
        if self.page is None:
            return
        editor = self.label_edit if field_name == "label" else self.note_edit
        command = self.model.note_command(self.page.feature, field_name, editor.text())
        if command.value != command.previous:
            self.host.push_edit(self.model.document, command, self.model)

    @command("Cannot label the feature")
    def set_label(self, feature: int, text: str, field_name: str = "label") -> None:
        """Label (or annotate) a feature as the user would, through the undo stack."""
        command = self.model.note_command(feature, field_name, text)
        self.host.push_edit(self.model.document, command, self.model)

    def _on_note_changed(self, sae: str, feature: int) -> None:
        if sae != self.model.current_sae:
            return
        self.features.label_changed(feature)
        if self.page is not None and self.page.feature == feature:
            self.show_feature(feature)

    # -- search --------------------------------------------------------------------------------
    @command("Cannot search")
    def search(self, text: str) -> list[tuple[int, float, int]]:
        hits = self.model.search(text)
        self.search_list.clear()
        for feature, total, count in hits:
            self._add_feature_item(self.search_list, feature,
                                   f"sum {total:.3g} over {count} token(s)")
        self.tabs.setCurrentWidget(self.search_list)
        self.status.setText(f"{len(hits)} feature(s) fire on {text!r}" if hits else
                            f"no stored token matches {text!r}")
        return hits

    # -- summary figures -----------------------------------------------------------------------
    def _fill_summary(self) -> None:
        self.summary_box.clear()
        if self.model.run_dir is None:
            return
        for name in SUMMARY_FIGURES:
            if (self.model.run_dir / "artifacts" / f"{name}.json").is_file():
                self.summary_box.addItem(name)

    @command("Cannot show the figure")
    def _show_summary(self, name: str) -> None:
        if not name or self.model.run_dir is None:
            return
        path = self.model.run_dir / "artifacts" / f"{name}.json"
        self.summary_plot.set_spec(json.loads(path.read_text()), {"artifact": name})

    # -- training ------------------------------------------------------------------------------
    @command("Cannot show the training form")
    def refresh_methods(self) -> None:
        method = next((m for m in self.host.methods() if m["id"] == TRAIN_METHOD), None)
        schema = None if method is None else method.get("params_schema")
        self.run_button.setEnabled(schema is not None)
        if self.inputs is not None:
            self.inputs.setParent(None)
            self.inputs.deleteLater()
            self.inputs = None
        if schema is None:
            self.form_area.setWidget(QLabel("The engine does not list sae_pc1.train yet."))
            self.form = None
            return
        self.form = SchemaForm(schema)
        self.form_area.setWidget(self.form)
        self.inputs = InputPicker(method.get("inputs") or {})
        self.inputs.setToolTip("activations + tokens: for source 'files'; text: your own text "
                               "file or folder instead of the corpus; decoder: a trained "
                               "decoder LM checkpoint for source 'decoder'")
        self.inputs_box.layout().addWidget(self.inputs)

    @command("Cannot train")
    def run(self) -> None:
        params = self.form.submittable() if self.form is not None else None
        if params is None:
            return
        inputs = self.inputs.values() if self.inputs is not None else {}
        self.run_status.setText(f"Submitting {TRAIN_METHOD}…")
        self.jobs.submit(TRAIN_METHOD, params, inputs, on_error=self._rejected)

    @command("Cannot show the trained SAEs")
    def _show_trained(self, job: str, method: str, outputs: dict) -> None:
        """The run's SAEs open when nothing is open, else after asking (``outputs``)."""
        self.outputs.offer(self.host.run_dir(job), f"{method} ({job})")

    def open_trained(self, run_dir: str | os.PathLike) -> bool:
        """A training run's SAEs, their feature table in front."""
        opened = bool(self.open_path(run_dir))
        if opened:
            self.tabs.setCurrentWidget(self.table)
        return opened

    # -- steering ------------------------------------------------------------------------------
    @command("Cannot steer")
    def steer(self) -> None:
        """Submit ``sae_pc1.steer`` for the shown feature with the box's prompt and alpha."""
        if self.page is None:
            return
        try:
            params, inputs = self.model.steer_job(self.page.feature, self.steer_alpha.value(),
                                                  self.steer_prompt.text(),
                                                  self.steer_tokens.value())
        except ValueError as exc:
            self.steer_result.setText(str(exc))
            return
        self.steer_result.setText(f"Submitting {STEER_METHOD}…")
        self.steering.submit(STEER_METHOD, params, inputs)

    @command("Cannot show the steering")
    def _show_steering(self, job: str, method: str, outputs: dict) -> None:
        if "steered" not in outputs:  # the result event names files only: read the table
            table = Path(self.host.run_dir(job)) / "artifacts" / "steering.json"
            rows = json.loads(table.read_text())["rows"] if table.is_file() else []
            outputs = {"unsteered": rows[0][2], "steered": rows[1][2],
                       "alpha": rows[1][0]} if len(rows) == 2 else {}
        if not outputs:
            self.steer_result.setText(f"{method} ({job}): gave no continuation")
            return
        self.steer_result.setText(f"without: {self.steer_prompt.text()}"
                                  f"{outputs['unsteered']}\nwith alpha {outputs['alpha']:g}: "
                                  f"{self.steer_prompt.text()}{outputs['steered']}")

    def _rejected(self, message: str) -> None:
        """Messages under the fields and inputs they name; the rest above the form."""
        fields, general = errors_from_message(message)
        names = set(self.inputs.inputs) if self.inputs is not None else set()
        if self.inputs is not None:
            self.inputs.set_errors({k: v for k, v in fields.items() if k in names})
        if self.form is not None:
            shown = {k: v for k, v in fields.items() if k not in names}
            self.form.set_errors({**shown, **({"": "; ".join(general)} if general else {})})

    def _on_host_event(self, envelope: dict) -> None:
        if envelope.get("type") == "methods":
            self.refresh_methods()

    # -- export --------------------------------------------------------------------------------
    def export_provenance(self, view: dict) -> dict:
        """A record naming the shown SAE (its checkpoint and feature table by path and hash),
        the run that trained it (id, method, params, seed) and ``view``."""
        return provenance.record(self.model.provenance_sources(),
                                 {"panel": "sae", "run_folder": str(self.model.run_dir),
                                  "sae": self.model.current_sae, **view},
                                 self.model.training_runs())

    def info_line(self) -> str:
        """The page's title and measures: what a dashboard's caption repeats."""
        return f"{self.title_label.text()} · {self.stats_label.text()}" if self.page else ""

    def export_dashboard(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                         caption: bool = False) -> Path:
        """The current feature's dashboard: .html (self-contained, provenance beside it) or a
        figure drawn for the page (.png, .svg, .pdf at ``dpi``: every context, no scroll
        bars), provenance inside."""
        target = Path(path)
        if self.page is None:
            raise ValueError("choose a feature first")
        page = self.model.page(self.page.feature)
        record = self.export_provenance({"features": [page.feature], "label": page.label,
                                         "note": page.note})
        suffix = target.suffix.lower()
        if suffix == ".html":
            provenance.write(target, self.model.dashboard_html(page.feature).encode(), record)
        elif suffix in (".png", ".svg", ".pdf"):
            dashboard = FeatureDashboard(self.model.current_sae, page,
                                         self.model.activation_histogram(page.feature),
                                         self.stats_label.text())
            try:
                dashboard.lay_out()
                export_widget(dashboard, ExportChoice(target, dpi, caption), record,
                              self.info_line())
            finally:
                dashboard.close()
                dashboard.deleteLater()
        else:
            raise ValueError(f"{target}: choose .html, .png, .svg or .pdf")
        self.status.setText(f"Exported {target}")
        return target

    def current_plot(self) -> PlotSpecView | None:
        """Ctrl+E: the density or summary plot when its tab is in front (its provenance names
        the run, the SAE and the figure); else ``None``, and the shell exports the feature
        dashboard through ``export_figure``."""
        shown = self.tabs.currentWidget()
        if shown is self.density_plot:
            plot, figure = self.density_plot, "feature density"
        elif shown is self.summary_tab:
            plot, figure = self.summary_plot, self.summary_box.currentText()
        else:
            return None
        plot.provenance = self.export_provenance({"figure": figure})
        return plot

    def export_figure(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                      caption: bool = False) -> Path:
        """Ctrl+E: the current feature's dashboard as a figure."""
        return self.export_dashboard(path, dpi, caption)

    def export_labels(self, path: str | os.PathLike) -> Path:
        """The shown SAE's feature labels and notes as JSON, with a provenance sidecar."""
        target = write_json_atomic(Path(path), self.model.labels_json())
        provenance.write_sidecar(target, self.export_provenance({"export": "labels"}))
        self.status.setText(f"Exported {target}")
        return target

    def export_sae(self, folder: str | os.PathLike) -> Path:
        """The shown SAE as an SAELens folder (its cfg.json, weights and bypass as trained)
        with ``labels.json``; cfg.json and the labels get provenance sidecars. The weights are
        copied and hashed on a worker thread (they can be gigabytes): the status says
        "Exporting" until it is done, then "Exported"; a failure is shown as an error."""
        source = self.model.sae_folder
        if source is None:
            raise ValueError("open a run or an SAE first")
        target, name = Path(folder), self.model.current_sae
        view = {"panel": "sae", "run_folder": str(self.model.run_dir), "sae": name}
        write = partial(write_sae_folder, source, target, self.model.labels_json(),
                        self.model.provenance_sources(), view, self.model.training_runs())
        self.status.setText(f"Exporting {name} to {target}…")
        run_in_background(write, lambda _: self.status.setText(f"Exported {name} to {target}"),
                          lambda exc: self._export_failed(name, exc))
        return target

    def _export_failed(self, name: str, error: Exception) -> None:
        self.status.setText(f"Export of {name} failed")
        self.host.show_error("Export failed", str(error))

    @command("Export failed")
    def choose_export_path(self) -> None:
        """The export dialog (file, resolution, caption); .html writes the web page."""
        if self.page is None:
            self.host.show_error("Export failed", "Choose a feature first.")
            return
        choice = ask_export(self, "Export feature dashboard (.png, .svg, .pdf or .html)",
                            f"{self.model.current_sae}-feature-{self.page.feature}.png",
                            self.info_line())
        if choice is not None:
            self._report(lambda: self.export_dashboard(choice.path, choice.dpi,
                                                       choice.caption))

    def _choose_save(self, title: str, name_filter: str, suffix: str, then) -> None:
        dialog = QFileDialog(self, title)
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setNameFilters([name_filter])
        dialog.setDefaultSuffix(suffix)
        dialog.fileSelected.connect(lambda path: self._report(lambda: then(path)))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def _choose_sae_folder(self) -> None:
        dialog = QFileDialog(self, "Export the SAE with its labels into a folder")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.fileSelected.connect(lambda path: self._report(lambda: self.export_sae(path)))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def _report(self, export) -> None:
        try:
            export()
        except (OSError, ValueError) as exc:  # a full disk or a bad folder: said, not raised
            self.host.show_error("Export failed", str(exc))

    # -- drag and drop, lifetime ---------------------------------------------------------------
    @command("Cannot open the dropped folders")
    def open_dropped(self, paths: list[str]) -> None:
        for path in paths:
            self.open_path(path)

    def closeEvent(self, event) -> None:
        self.jobs.close()
        self.steering.close()
        self._unsubscribe()
        super().closeEvent(event)


def write_sae_folder(source: Path, target: Path, labels: dict, sources: list[Path],
                     view: dict, runs: list[dict]) -> Path:
    """An SAE's checkpoint files copied into ``target`` (streamed, never whole in memory),
    its ``labels.json``, and provenance sidecars for both (the sources hashed once). Runs on
    a worker thread: it touches no widget."""
    for file in sorted(source.iterdir()):
        if file.is_file() and not file.name.endswith(provenance.SIDECAR_SUFFIX):
            with open(file, "rb") as stream:
                write_atomic(target / file.name, partial(shutil.copyfileobj, stream))
    record = provenance.record(sources, {**view, "export": "sae checkpoint"}, runs)
    provenance.write_sidecar(target / "cfg.json", record)
    written = write_json_atomic(target / "labels.json", labels)
    provenance.write_sidecar(written, {**record, "view": {**view, "export": "labels"}})
    return target


def _fmt(value: float) -> str:
    return "—" if not np.isfinite(value) else f"{value:.4g}"
