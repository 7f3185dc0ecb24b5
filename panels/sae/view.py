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

Every action runs an ``sae.*`` command (``panels/sae/commands.py``) through the window's
registry, naming SAEs by name and features by id; this class lays the panel out, turns what
the user clicked or typed into a command's arguments, and redraws from the model's events.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
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

from panels.sae.commands import (
    COMMANDS,
    LEFT_TABS,
    PAGE_TABS,
    SCOPE,
    STEER_METHOD,
    SUMMARY_FIGURES,
    TRAIN_METHOD,
    SaeState,
    export_record,
    measures,
    page_title,
    write_dashboard,
    write_sae_folder,
)
from panels.sae.dashboard import FeatureDashboard
from panels.sae.model import COLUMNS, FeaturePage, SAEBrowserModel
from panels.widgets.command_status import show_outcome
from panels.widgets.commands import command
from panels.widgets.drops import OpensDroppedFiles
from panels.widgets.job_output import RunOutputs
from panels.widgets.jobs import PanelJobs
from panels.widgets.plot_export import route_export
from panels.widgets.quiet import SetsWidgetsQuietly
from panels.widgets.token_text import TokenHeatView
from studio.background import run_in_background
from studio.command_widgets import connect, connect_button, mark_argument
from studio.commands import Invocation, registry_for
from studio.widgets.figure_export import DEFAULT_DPI, ExportChoice, ask_export, export_widget
from studio.widgets.plot_view import PlotSpecView
from studio.widgets.schema import errors_from_message
from studio.widgets.schema_form import InputPicker, SchemaForm

__all__ = ["COLUMNS", "COL_LABEL", "SAEPanel", "write_sae_folder"]

TRAIN_METRICS = ("mse", "explained_variance", "l0", "dead_fraction")  # shown while it trains
NUMERIC = {"feature": "ids", "density": "density", "importance": "importance",
           "reproducibility": "reproducibility", "hungarian": "hungarian"}
COL_LABEL = COLUMNS.index("label")
HISTOGRAM_MIN_HEIGHT_PX = 120
STEER_ONLY_DECODER = "Steering needs a run on our decoder LM (Train: source 'decoder')."


class FeatureTableModel(QAbstractTableModel):
    """The feature table as a virtual model: a cell is read from the SAE's numpy columns only
    when the view paints it, so a 16k-feature SAE opens at once on the Qt main thread (one
    item per cell took seconds). Sorting is one numpy argsort (``feature_order``), numeric
    for the measures, in the browser's order (``sort_column``); a header click asks
    ``on_sort(column, descending)`` (the panel's command). ``Qt.UserRole`` answers a cell's
    value (float, int or str)."""

    def __init__(self, browser: SAEBrowserModel, parent: QObject | None = None,
                 on_sort: Callable[[str, bool], Any] | None = None) -> None:
        super().__init__(parent)
        self.browser = browser
        self.on_sort = on_sort
        self.order = np.zeros(0, dtype=int)      # row -> position in browser.table
        self.rows = np.zeros(0, dtype=int)       # position in browser.table -> row

    def reload(self) -> None:
        """The browser loaded another SAE: show its features in the current sort order."""
        self.beginResetModel()
        self._set_order()
        self.endResetModel()

    def _set_order(self) -> None:
        browser = self.browser
        self.order = (np.zeros(0, dtype=int) if browser.table is None else
                      browser.feature_order(browser.sort_column, browser.descending))
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
        """A header click (Qt calls this): the panel sorts through its command, whose event
        reorders the rows (``apply_sort``); without a panel, at once."""
        descending = order == Qt.SortOrder.DescendingOrder
        if self.on_sort is not None:
            self.on_sort(COLUMNS[column], descending)
        else:
            self.browser.set_sort(COLUMNS[column], descending)
            self.apply_sort()

    def apply_sort(self) -> None:
        """Reorder as the browser sorts; the selection and current row stay on their
        features."""
        if self.browser.table is None:
            return
        self.layoutAboutToBeChanged.emit()
        kept = self.persistentIndexList()
        positions = [int(self.order[index.row()]) for index in kept]
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


class SAEPanel(OpensDroppedFiles, SetsWidgetsQuietly, QWidget):
    """Lays the browser out and shows the model; every user action runs an ``sae.*``
    command (``panels/sae/commands.py``) through the window's registry."""

    def __init__(self, host: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.model = SAEBrowserModel()
        self.form: SchemaForm | None = None
        self.inputs: InputPicker | None = None
        self.page: FeaturePage | None = None
        self._quiet = False   # widgets set to show the state: their signals are not the user's
        self.commands = registry_for(host, COMMANDS)
        self.state = SaeState(self.model, host, view=self, submit=self._submit,
                              background=run_in_background)
        self.commands.bind(SCOPE, self.state)
        self._stop_listening = self.commands.listen(self._on_invocation)
        self.features = FeatureTableModel(self.model, self, on_sort=self._sort_chosen)
        self._build()
        self.model.events.connect("loaded", self._show_table)
        self.model.events.connect("selected", self._on_selected)
        self.model.events.connect("note_changed", self._on_note_changed)
        self.model.events.connect("sorted", self._on_sorted)
        self.model.events.connect("searched", self._on_searched)
        self.jobs = PanelJobs(host, self.run_status.setText, metrics=TRAIN_METRICS,
                              on_result=self._show_trained)
        self.steering = PanelJobs(host, self.steer_result.setText,
                                  on_result=self._show_steering)
        self._unsubscribe = host.subscribe(self._on_host_event)
        self.refresh_methods()
        self.setAcceptDrops(True)

    # -- layout --------------------------------------------------------------------------------
    def _build(self) -> None:
        commands = self.commands
        bar = QHBoxLayout()
        self.open_button = QPushButton("Open run or SAE…")
        mark_argument(self.open_button, "sae.open")  # asks for the folder, then opens it
        self.open_button.clicked.connect(self.choose_folder)
        self.sae_box = QComboBox()
        self.sae_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.sae_box.setMinimumContentsLength(len("L12-bypass-s10"))
        self.sae_box.setToolTip("the SAE shown: layer, raw or PC1 bypass, seed")
        connect(self.sae_box.currentTextChanged, self.sae_box, commands, "sae.select_sae",
                lambda name: None if self._quiet or not name else {"sae": name})
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Which features fire on… (a word)")
        connect(self.search_edit.returnPressed, self.search_edit, commands, "sae.search",
                lambda: {"text": self.search_edit.text()})
        self.export_button = QPushButton("Export")
        mark_argument(self.export_button, "sae.export_dashboard")  # its menu's entries export
        menu = QMenu(self.export_button)
        for text, command_id, ask in (
                ("Feature dashboard (figure or web page)…", "sae.export_dashboard",
                 self.choose_export_path),
                ("Labels and notes (JSON)…", "sae.export_labels", self._choose_labels_path),
                ("SAE with labels (SAELens folder)…", "sae.export_sae",
                 self._choose_sae_folder)):
            action = menu.addAction(text)
            mark_argument(action, command_id)  # asks where, then runs the command
            action.triggered.connect(lambda _checked=False, ask=ask: ask())
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
        connect(self.summary_box.currentTextChanged, self.summary_box, commands,
                "sae.show_summary",
                lambda name: None if self._quiet or not name else {"figure": name})
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
        connect(self.tabs.currentChanged, self.tabs, commands, "sae.show_tab",
                lambda index: None if self._quiet else {"tab": LEFT_TABS[index]})

        self.splitter = splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.tabs)
        splitter.addWidget(self._build_feature_page())
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        self.status = QLabel("Open a sae_pc1.train run (or an SAELens folder), or train SAEs "
                             "from the Train tab.")
        self.status.setWordWrap(True)
        self.outputs = RunOutputs(self, self.open_trained, self._open_name, self.status.setText)
        mark_argument(self.outputs.button, "sae.open")  # opens the trained run
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.outputs.button)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(splitter, 1)
        layout.addLayout(status_row)
        self._route_plot_exports()

    def _route_plot_exports(self) -> None:
        """pyqtgraph's right-click "Export..." writes no provenance: on the density and
        summary plots it opens the window's Ctrl+E (``app.export_figure``), on the
        activation histogram the dashboard's export (``sae.export_dashboard``)."""
        for plot, command_id in ((self.density_plot, "app.export_figure"),
                                 (self.summary_plot, "app.export_figure"),
                                 (self.histogram, "sae.export_dashboard")):
            view = plot.findChild(pg.GraphicsView)
            if command_id == "sae.export_dashboard" or command_id not in self.commands:
                route_export(view, "sae.export_dashboard", lambda: self.choose_export_path())
            else:
                route_export(view, command_id, lambda plot=plot: self._export_plot(plot))

    def _export_plot(self, plot: PlotSpecView) -> None:
        """The plot right-clicked, in front, then Ctrl+E's dialog (its provenance)."""
        self.tabs.setCurrentWidget(self.summary_tab if plot is self.summary_plot
                                   else self.density_plot)
        self.commands.trigger("app.export_figure")

    def _build_feature_page(self) -> QWidget:
        self.feature_page = QWidget()
        layout = QVBoxLayout(self.feature_page)
        self.title_label = QLabel("No feature chosen")
        self.title_label.setStyleSheet("font-weight: bold; font-size: 14pt")
        self.stats_label = QLabel("")
        self.stats_label.setWordWrap(True)
        self.label_edit = QLineEdit()
        self.label_edit.setPlaceholderText("a short name for this feature")
        connect(self.label_edit.editingFinished, self.label_edit, self.commands,
                "sae.label_feature", lambda: self._note_args("label"))
        self.note_edit = QLineEdit()
        self.note_edit.setPlaceholderText("notes")
        connect(self.note_edit.editingFinished, self.note_edit, self.commands,
                "sae.annotate_feature", lambda: self._note_args("note"))
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
        connect(self.page_tabs.currentChanged, self.page_tabs, self.commands, "sae.show_tab",
                lambda index: None if self._quiet else {"tab": PAGE_TABS[index]})
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
        connect_button(self.steer_button, self.commands, "sae.steer", self._steer_args)
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
        connect_button(self.run_button, self.commands, "sae.train", self._train_args)
        self.run_status = QLabel("")
        self.run_status.setWordWrap(True)
        layout.addWidget(self.form_area, 1)
        layout.addWidget(self.inputs_box)
        layout.addWidget(self.run_button)
        layout.addWidget(self.run_status)
        return tab

    # -- commands: the wrappers tests, drops, run outputs and the window call ------------------
    def _on_invocation(self, invocation: Invocation) -> None:
        """An SAE command's outcome in the status line: its refusal, or what it said."""
        show_outcome(self.status, invocation, SCOPE, exports=True)

    def open_path(self, path: str | os.PathLike) -> bool:
        """Open a run or SAE folder (``sae.open``); a problem is reported, never raised."""
        return self.commands.trigger("sae.open", path=str(path)) is not None

    def open_file(self, path: str | os.PathLike) -> bool:
        """File > Open and sessions: as ``open_path``."""
        return self.open_path(path)

    def sort_by(self, column: str, descending: bool = True) -> None:
        self.commands.trigger("sae.sort_features", column=column, descending=descending)

    def show_feature(self, feature: int) -> None:
        if feature >= 0:
            self.commands.trigger("sae.select_feature", feature=int(feature))

    def set_label(self, feature: int, text: str, field_name: str = "label") -> None:
        """Label (or annotate) a feature as the user would, through the undo stack."""
        command_id = "sae.label_feature" if field_name == "label" else "sae.annotate_feature"
        self.commands.trigger(command_id, sae=self.model.current_sae, feature=int(feature),
                              **{field_name: text})

    def search(self, text: str) -> list[tuple[int, float, int]]:
        """Which features fire on a word (``sae.search``); the hits, as the model holds
        them."""
        self.commands.trigger("sae.search", text=text)
        return list(self.model.hits)

    def run(self) -> None:
        """Train with the form's values and inputs (the Train button)."""
        args = self._train_args()
        if args is not None:
            self.commands.trigger("sae.train", **args)

    def steer(self) -> None:
        """Steer with the shown feature and the box's prompt, alpha and tokens."""
        args = self._steer_args()
        if args is not None:
            self.commands.trigger("sae.steer", **args)

    def export_labels(self, path: str | os.PathLike) -> Path | None:
        """The labels and notes as JSON (``sae.export_labels``); ``None`` when refused."""
        return self.commands.trigger("sae.export_labels", path=str(path))

    def export_sae(self, folder: str | os.PathLike) -> Path | None:
        """The SAE folder with its labels (``sae.export_sae``), written on a worker thread:
        the status says "Exporting" until it is done, then "Exported"."""
        said = self.commands.trigger("sae.export_sae", folder=str(folder))
        return Path(folder) if said is not None else None

    def _sort_chosen(self, column: str, descending: bool) -> None:
        """A header clicked: the table sorts through its command."""
        if self._quiet or self.model.table is None:  # setSortingEnabled sorts at once
            return
        self.commands.trigger("sae.sort_features", column=column, descending=descending)

    def _note_args(self, field_name: str) -> dict | None:
        """The label or note typed, when it differs from the feature's (Enter or the focus
        leaving the box without a change runs nothing)."""
        if self.page is None or self.model.current < 0:
            return None
        editor = self.label_edit if field_name == "label" else self.note_edit
        if editor.text() == self.model.note_of(self.model.current, field_name):
            return None
        return {"sae": self.model.current_sae, "feature": self.model.current,
                field_name: editor.text()}

    def _train_args(self) -> dict | None:
        """The form's values and inputs; ``None`` when the form shows why not."""
        params = self.form.submittable() if self.form is not None else None
        if params is None:
            return None
        inputs = self.inputs.values() if self.inputs is not None else {}
        return {"params": params, "inputs": inputs}

    def _steer_args(self) -> dict | None:
        if self.page is None:
            return None
        return {"feature": self.page.feature, "alpha": self.steer_alpha.value(),
                "prompt": self.steer_prompt.text(), "new_tokens": self.steer_tokens.value()}

    def _submit(self, method: str, params: dict, inputs: dict) -> None:
        """A command's job, followed in the Train tab's or the Steer box's status line."""
        if method == STEER_METHOD:
            with self.quietly():  # the box shows what was steered (a script's arguments too)
                self.steer_prompt.setText(str(params["prompt"]))
                self.steer_alpha.setValue(float(params["alpha"]))
                self.steer_tokens.setValue(int(params["new_tokens"]))
            self.steer_result.setText(f"Submitting {STEER_METHOD}…")
            self.steering.submit(STEER_METHOD, params, inputs)
            return
        self.run_status.setText(f"Submitting {method}…")
        self.jobs.submit(method, params, inputs, on_error=self._rejected)

    # -- opening -------------------------------------------------------------------------------
    def _open_name(self) -> str | None:
        """What is open, as the keep-or-open question names it; ``None`` when nothing is."""
        return self.model.run_dir.name if self.model.run_dir is not None else None

    def choose_folder(self) -> None:
        dialog = QFileDialog(self, "Open a sae_pc1 run folder or an SAELens SAE folder")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.fileSelected.connect(self.open_path)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def _show_table(self) -> None:
        """Another SAE loaded: its table, density, the SAE box, summaries and search hits."""
        self.features.reload()
        self.density_plot.set_spec(self.model.density_histogram())
        with self.quietly():
            self.sae_box.clear()
            self.sae_box.addItems(self.model.sae_names)
            self.sae_box.setCurrentText(self.model.current_sae)
            self._fill_summary()
            self.search_edit.setText(self.model.query)
        self._fill_search_list()
        self._show_sort_indicator()
        self.page = None

    def _on_sorted(self) -> None:
        self.features.apply_sort()
        self._show_sort_indicator()

    def _show_sort_indicator(self) -> None:
        """The header's arrow as the model's order; blocked, or the table would sort again."""
        header = self.table.horizontalHeader()
        header.blockSignals(True)
        header.setSortIndicator(COLUMNS.index(self.model.sort_column),
                                Qt.SortOrder.DescendingOrder if self.model.descending
                                else Qt.SortOrder.AscendingOrder)
        header.blockSignals(False)

    def feature_at_row(self, row: int) -> int:
        return self.features.feature_at(row)

    def _on_row(self, row: int) -> None:
        """A row chosen in the table opens its feature; a sort that only moves the current
        row (same feature) does not reload the page."""
        feature = self.feature_at_row(row)
        if not self._quiet and feature >= 0 and feature != self.model.current:
            self.commands.trigger("sae.select_feature", feature=feature)

    # -- the feature page ----------------------------------------------------------------------
    @command("Cannot show the feature")
    def _on_selected(self, feature: int) -> None:
        """The chosen feature: its row current in the table and its page drawn."""
        row = self.features.row_of(feature)
        if row >= 0 and self.table.currentIndex().row() != row:
            with self.quietly():
                self.table.setCurrentIndex(self.features.index(row, 0))
                self.table.selectRow(row)
        self._draw_page(feature)

    def _draw_page(self, feature: int) -> None:
        self.page = page = self.model.page(feature)
        self.title_label.setText(page_title(self.model.current_sae, page))
        self.stats_label.setText(measures(page))
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

    def _open_listed(self, item: QListWidgetItem) -> None:
        feature = item.data(Qt.ItemDataRole.UserRole)
        if feature is not None and int(feature) != self.model.current:
            self.commands.trigger("sae.select_feature", feature=int(feature))

    def _on_note_changed(self, sae: str, feature: int) -> None:
        if sae != self.model.current_sae:
            return
        self.features.label_changed(feature)
        if self.page is not None and self.page.feature == feature:
            self._draw_page(feature)

    # -- search --------------------------------------------------------------------------------
    def _on_searched(self) -> None:
        """The word in the box (also when a script searched), its features listed in front."""
        if self.search_edit.text() != self.model.query:
            with self.quietly():
                self.search_edit.setText(self.model.query)
        self._fill_search_list()
        self.show_tab("search")
        text, hits = self.model.query, self.model.hits
        self.status.setText(f"{len(hits)} feature(s) fire on {text!r}" if hits else
                            f"no stored token matches {text!r}")

    def _fill_search_list(self) -> None:
        self.search_list.clear()
        for feature, total, count in self.model.hits:
            self._add_feature_item(self.search_list, feature,
                                   f"sum {total:.3g} over {count} token(s)")

    # -- tabs and summary figures --------------------------------------------------------------
    def show_tab(self, tab: str) -> None:
        """A tab of the left side or of the feature page in front (``sae.show_tab``)."""
        with self.quietly():
            if tab in LEFT_TABS:
                self.tabs.setCurrentIndex(LEFT_TABS.index(tab))
            else:
                self.page_tabs.setCurrentIndex(PAGE_TABS.index(tab))

    def _fill_summary(self) -> None:
        self.summary_box.clear()
        self.summary_plot.set_spec({"kind": "plot", "title": "", "series": [], "hlines": []})
        if self.model.run_dir is None:
            return
        for name in SUMMARY_FIGURES:
            if (self.model.run_dir / "artifacts" / f"{name}.json").is_file():
                self.summary_box.addItem(name)
        if self.summary_box.count():
            self.show_summary(self.summary_box.currentText())

    def show_summary(self, name: str) -> str | None:
        """Draw a summary figure of the run (``sae.show_summary``); what went wrong, if
        anything."""
        path = self.model.run_dir / "artifacts" / f"{name}.json"
        try:
            spec = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return f"{path}: not a readable figure ({exc})"
        if self.summary_box.currentText() != name:
            with self.quietly():
                self.summary_box.setCurrentText(name)
        self.summary_plot.set_spec(spec, {"artifact": name})
        return None

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
        for box in (self.form, self.inputs):  # check boxes and browse buttons fill sae.train
            for button in box.findChildren(QAbstractButton):
                mark_argument(button, "sae.train")

    @command("Cannot show the trained SAEs")
    def _show_trained(self, job: str, method: str, outputs: dict) -> None:
        """The run's SAEs open when nothing is open, else after asking (``outputs``)."""
        self.outputs.offer(self.host.run_dir(job), f"{method} ({job})")

    def open_trained(self, run_dir: str | os.PathLike) -> bool:
        """A training run's SAEs, their feature table in front."""
        opened = self.open_path(run_dir)
        if opened:
            self.show_tab("features")
        return opened

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
        """A record naming the shown SAE, the run that trained it and ``view``."""
        return export_record(self.model, view)

    def info_line(self) -> str:
        """The page's title and measures: what a dashboard's caption repeats."""
        return f"{self.title_label.text()} · {self.stats_label.text()}" if self.page else ""

    def export_dashboard(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                         caption: bool = False) -> Path:
        """The current feature's dashboard: .html (self-contained, provenance beside it) or a
        figure drawn for the page (.png, .svg, .pdf at ``dpi``: every context, no scroll
        bars), provenance inside. Raises ``ValueError``/``OSError`` (Ctrl+E says them)."""
        target = write_dashboard(self.state, path, None, dpi, caption)
        self.status.setText(f"Exported {target}")
        return target

    def draw_dashboard(self, target: Path, page: FeaturePage, record: dict, dpi: int,
                       caption: bool, info: str) -> Path:
        """A feature's dashboard laid out off screen for the page, then written."""
        dashboard = FeatureDashboard(self.model.current_sae, page,
                                     self.model.activation_histogram(page.feature),
                                     measures(page))
        try:
            dashboard.lay_out()
            return export_widget(dashboard, ExportChoice(target, dpi, caption), record, info)
        finally:
            dashboard.close()
            dashboard.deleteLater()

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

    def sae_exported(self, name: str, target: Path, error: Exception | None) -> None:
        """The SAE folder's worker finished (``sae.export_sae``)."""
        if error is None:
            self.status.setText(f"Exported {name} to {target}")
            return
        self.status.setText(f"Export of {name} failed")
        self.host.show_error("Export failed", f"{target}: {error}")

    def choose_export_path(self) -> None:
        """The export dialog (file, resolution, caption), then ``sae.export_dashboard``;
        .html writes the web page."""
        if self.page is None:
            self.host.show_error("Export failed", "Choose a feature first.")
            return
        choice = ask_export(self, "Export feature dashboard (.png, .svg, .pdf or .html)",
                            f"{self.model.current_sae}-feature-{self.page.feature}.png",
                            self.info_line())
        if choice is not None:
            self.commands.trigger("sae.export_dashboard", path=str(choice.path),
                                  feature=self.page.feature, dpi=choice.dpi,
                                  caption=choice.caption)

    def _choose_labels_path(self) -> None:
        dialog = QFileDialog(self, "Export feature labels")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setNameFilters(["JSON (*.json)"])
        dialog.setDefaultSuffix("json")
        dialog.fileSelected.connect(self.export_labels)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def _choose_sae_folder(self) -> None:
        dialog = QFileDialog(self, "Export the SAE with its labels into a folder")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.fileSelected.connect(self.export_sae)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    # -- sessions (issue 39): what is open and how it is shown ---------------------------------
    def view_state(self) -> dict:
        """The view as JSON: the run or SAE folder by path, the SAE and feature shown, the
        sort, the word searched, the tabs, the summary figure, the table's first visible
        feature, the splitter, the Train form and the Steer box (``restore_view_state``)."""
        model = self.model
        state: dict = {
            "tab": LEFT_TABS[self.tabs.currentIndex()],
            "page_tab": PAGE_TABS[self.page_tabs.currentIndex()],
            "splitter": [int(size) for size in self.splitter.sizes()],
            "form": self.form.values() if self.form is not None else {},
            "inputs": self.inputs.values() if self.inputs is not None else {},
            "steer": {"prompt": self.steer_prompt.text(), "alpha": self.steer_alpha.value(),
                      "new_tokens": self.steer_tokens.value()}}
        if model.run_dir is not None and model.table is not None:
            top = self.table.rowAt(0)
            state.update({
                "path": str(Path(model.run_dir).resolve()), "sae": model.current_sae,
                "feature": model.current if model.current >= 0 else None,
                "sort": {"column": model.sort_column, "descending": model.descending},
                "search": model.query,
                "summary": self.summary_box.currentText() or None,
                "top_feature": self.features.feature_at(top) if top >= 0 else None})
        return json.loads(json.dumps(state))  # plain JSON: what a session file holds

    def restore_view_state(self, state: dict) -> list[str]:
        """Open what ``view_state`` named and show it the same way; a sentence for each part
        that could not be restored (a folder gone, an SAE or feature the run lacks, ...)."""
        problems: list[str] = []

        def run(command_id: str, **args) -> bool:
            return self.commands.run_restoring(problems, command_id, **args)

        opened = bool(state.get("path")) and run("sae.open", path=str(state["path"]))
        if opened:
            if state.get("sae") and state["sae"] != self.model.current_sae:
                run("sae.select_sae", sae=state["sae"])
            sort = state.get("sort")
            if isinstance(sort, dict) and "column" in sort:
                run("sae.sort_features", column=sort["column"],
                    descending=bool(sort.get("descending", False)))
            if state.get("search"):
                run("sae.search", text=str(state["search"]))
            if state.get("feature") is not None:
                run("sae.select_feature", feature=state["feature"])
            if state.get("summary") and state["summary"] != self.summary_box.currentText():
                run("sae.show_summary", figure=state["summary"])
        self._restore_widgets(state, problems)
        for key in ("tab", "page_tab"):
            if state.get(key) is not None:
                run("sae.show_tab", tab=state[key])
        if opened and state.get("top_feature") is not None:
            self._scroll_to(state["top_feature"], problems)
        return problems

    def _restore_widgets(self, state: dict, problems: list[str]) -> None:
        """The splitter, the Train form and inputs, and the Steer box as they were."""
        sizes = state.get("splitter")
        if isinstance(sizes, list) and len(sizes) == self.splitter.count():
            self.splitter.setSizes([int(size) for size in sizes])
        if self.form is not None and isinstance(state.get("form"), dict):
            self.form.set_values(state["form"])
        if self.inputs is not None and isinstance(state.get("inputs"), dict):
            self.inputs.set_values(state["inputs"])
        steer = state.get("steer")
        if isinstance(steer, dict):
            try:
                with self.quietly():
                    self.steer_prompt.setText(str(steer.get("prompt", "The")))
                    self.steer_alpha.setValue(float(steer.get("alpha", 8.0)))
                    self.steer_tokens.setValue(int(steer.get("new_tokens", 24)))
            except (TypeError, ValueError):
                problems.append(f"sae: the Steer box's values {steer!r} are not numbers")

    def _scroll_to(self, feature: Any, problems: list[str]) -> None:
        row = self.features.row_of(int(feature)) if isinstance(feature, int) else -1
        if row < 0:
            problems.append(f"sae: no feature {feature!r} to scroll the table to")
            return
        self.table.scrollTo(self.features.index(row, 0),
                            QAbstractItemView.ScrollHint.PositionAtTop)

    # -- drag and drop, lifetime ---------------------------------------------------------------
    def open_dropped(self, paths: list[str]) -> None:
        for path in paths:
            self.open_path(path)

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop following jobs and leave the registry (idempotent)."""
        if self.state.view is None:
            return
        self.jobs.close()
        self.steering.close()
        self._unsubscribe()
        self.commands.unbind(SCOPE, self.state)
        self._stop_listening()
        self.state.view = None


def _fmt(value: float) -> str:
    return "—" if not np.isfinite(value) else f"{value:.4g}"
