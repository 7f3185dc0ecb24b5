"""The molecule panel: a grid of 2D depictions beside a sortable property table, property
histograms against a reference set, SMARTS search, nearest reference, SMILES edits, Murcko
scaffolds and set diversity, residue strips with antibody CDRs, a 3-D view with RMSD
superposition and a cartoon, and a trajectory player.

Left, the grid (a ``QListView`` in icon mode over ``MoleculeGridModel``): Qt asks only for the
cells on screen, and their depictions and shown property are computed on a worker thread after
the paint and cached, so 100k molecules scroll smoothly. Right, tabs: the property table (click
a header to sort; grid and table share one order; a scaffold column, CDR columns once antibody
chains are numbered, and the file's own columns), the histograms (the set vs the reference, the
features kCGM calibrates), the editor (SMILES with live validity, standardise,
accept/reject/flag, nearest reference by Tanimoto), the sequence strip (FASTA records, antibody
VH/VL, PDB chains; one letter per residue coloured by property class; CDR1-3 marked after ANARCI
numbering in IMGT, Kabat or Chothia, run on a worker thread since it calls hmmscan; a click
selects a residue), and the 3-D view (ETKDG ball-and-stick, CA trace plus atoms or a cartoon
tube; pyqtgraph.opengl, imported when the tab is first opened; pin one entry and the next is
superposed on it with its RMSD). Below the tabs, the player for trajectories: an MD run
(topology + trajectory read by MDAnalysis on a worker thread, RMSD to frame 0), a generation
trajectory whose atom count changes (multi-frame XYZ) or a sequence trajectory whose length
changes (``>t=`` FASTA). Scaffolds, diversity and conformers are computed on a worker thread.
Every edit goes through ``host.push_edit`` (undo, autosave). A finished ``kcgm.calibrate`` run
opens its generated molecules; a finished ``branching_flows.*`` run opens its samples and plays
its trajectories. Exports, each with its provenance (the file, the run that made it, the sort,
filter and search, which molecules): the grid (PNG, SVG) and a 3-D snapshot (PNG), drawn at
twice the screen's resolution by default; the histogram (PNG, SVG, PDF, drawn for the page,
with the information line as an optional caption); the selected rows of the grid or table (all
shown rows when none are selected) as SMILES, CSV, SDF, FASTA or PDB with a
``.provenance.json`` sidecar. Ctrl+E exports the figure of the tab in front (else the grid).

Every button, box, key, header click, residue click and player control runs a command of
``panels/molecules/commands.py`` through the window's registry, naming molecules as the user
sees them; this class keeps the layout and what is drawn. ``view_state`` and
``restore_view_state`` save and reopen what is shown (sessions).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import (
    QAbstractListModel,
    QAbstractTableModel,
    QItemSelection,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QRunnable,
    QSize,
    Qt,
    QThreadPool,
    QTimer,
    Signal,
)
from PySide6.QtGui import QImage, QPixmap, QVector3D
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import provenance
from engine.io import FormatError, extension_of
from engine.io.molecules import (
    DESCRIPTOR_NAMES,
    Molecule,
    Structure,
    canonical_smiles,
    descriptor,
    parse_smiles,
    read_fasta,
)
from panels.molecules.commands import (
    COMMANDS,
    RUN_METHODS,
    SCOPE,
    TABS,
    MoleculesState,
    export_parts,
    molecule_label,
    table_columns,
    view_summary,
)
from panels.molecules.depict import (
    EXPORT_LIMIT,
    MISSING,
    DepictionCache,
    export_grid,
    render_png,
)
from panels.molecules.exports import ExportRefused
from panels.molecules.geometry import (
    COLOUR_MODES,
    STYLES,
    molecule_scene,
    residue_atoms,
    structure_scene,
    superpose,
)
from panels.molecules.model import (
    FLAGS,
    PROBLEM_COLUMN,
    Entry,
    MoleculeSetModel,
    read_samples,
    smiles_problem,
)
from panels.molecules.numbering import (
    SCHEME_TITLES,
    SCHEMES,
    number_sequences,
    numbering_problem,
)
from panels.molecules.player import TrajectoryPlayer
from panels.molecules.sequence import CDR_COLOUR, CLASS_COLOUR, SequenceStrip, Track, tracks_of
from panels.molecules.trajectory import (
    TOPOLOGY_EXTENSIONS,
    TRAJECTORY_EXTENSIONS,
    Trajectory,
    read_generation,
    read_md,
    sequence_trajectory,
)
from panels.widgets.commands import command
from panels.widgets.drops import OpensDroppedFiles
from panels.widgets.job_output import RunOutputs
from panels.widgets.jobs import PanelJobs
from panels.widgets.plot_export import route_export
from studio.command_widgets import connect, connect_button, mark_argument
from studio.commands import CommandError, Invocation, Refusal, registry_for
from studio.widgets.figure_export import (
    DEFAULT_DPI,
    SCREEN_DPI,
    ExportChoice,
    ask_export,
    export_widget,
)
from studio.widgets.images import png_bytes
from studio.widgets.plot_view import PlotSpecView
from studio.widgets.schema_form import SchemaForm

CELL = QSize(150, 120)  # depiction size in the grid
GRID = QSize(170, 168)  # cell with its two lines of text
TAB_TABLE, TAB_HISTOGRAMS, TAB_EDIT, TAB_SEQUENCE, TAB_3D = range(5)
SELECTION_FILTER = ("SMILES (*.smi);;SDF (*.sdf);;FASTA (*.fasta *.fa);;PDB (*.pdb);;"
                    "CSV (*.csv)")
RUN_METHOD = "kcgm.calibrate"
SCROLL_QUIET_MS = 300  # background loops resume this long after the grid last scrolled
IDLE_WAIT_S = 5.0  # and never wait longer than this for it
NUMBERING_CHUNK = 20  # chains per hmmscan call: closing the panel waits for one chunk at most


@cache
def _import_rdkit_modules() -> None:
    """Import, on the GUI thread, the RDKit modules the worker threads use: two threads
    importing one RDKit extension module at once can each see it half made."""
    import rdkit.Chem.AllChem
    import rdkit.Chem.Draw.rdMolDraw2D
    import rdkit.Chem.rdFingerprintGenerator
    import rdkit.Chem.Scaffolds.MurckoScaffold  # noqa: F401


@cache
def _import_export_modules() -> None:
    """The same, for what the SDF and PDB writers use on the worker."""
    import gemmi  # noqa: F401
    import rdkit.Chem.rdDepictor
    import rdkit.Chem.rdDetermineBonds
    import rdkit.Geometry  # noqa: F401


def _scene_of(entry, mode: str):
    """The entry's 3-D scene: a structure coloured by ``mode``, or a molecule (the file's
    coordinates while its SMILES is unedited, else an ETKDG conformer)."""
    if isinstance(entry.record, Structure):
        return structure_scene(entry.record, mode)
    record = entry.record
    if isinstance(record, Molecule) and record.coordinates and record.smiles == entry.smiles:
        return molecule_scene(record)
    return molecule_scene(entry.smiles)


def _natural(path: Path) -> list:
    """Sort key that puts ``trajectory_2`` before ``trajectory_10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def _pixmap(depiction: bytes | QImage) -> QPixmap:
    """A depiction ready to paint: from the image a worker decoded (the grid), or from PNG
    bytes (the editor's preview, drawn on the spot)."""
    if isinstance(depiction, QImage):
        return QPixmap.fromImage(depiction)
    pixmap = QPixmap()
    pixmap.loadFromData(depiction, "PNG")
    return pixmap


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


class _Rendered(QObject):
    done = Signal(object, object, str, object, bool)  # key, QImage, property, value, drawn


class _RenderCell(QRunnable):
    """One grid cell's work on the pool's thread: the shown property's value and (unless it
    is cached) the depiction, decoded to an image; both come back as a queued signal, so the
    GUI thread only turns the image into a pixmap."""

    def __init__(self, key: tuple, shown: str, draw: bool, signals: _Rendered) -> None:
        super().__init__()
        self.key, self.shown, self.draw, self.signals = key, shown, draw, signals

    def run(self) -> None:
        mol = parse_smiles(self.key[0])
        value = None if mol is None else descriptor(mol, self.shown)
        png = render_png(*self.key) if self.draw and mol is not None else None
        self.signals.done.emit(self.key, QImage.fromData(png, "PNG") if png else None,
                               self.shown, value, self.draw)


class _Computed(QObject):
    done = Signal(str, int, object)  # what, the set's generation, result


class _Compute(QRunnable):
    """Runs ``work()`` on the pool's thread (scaffolds, diversity, conformers); the result
    comes back as a queued signal tagged with the set's generation, so a stale one is
    dropped."""

    def __init__(self, what: str, generation: int, work, signals: _Computed) -> None:
        super().__init__()
        self.what, self.generation, self.work, self.signals = what, generation, work, signals

    def run(self) -> None:
        try:
            result = self.work()
        except Exception as exc:  # noqa: BLE001 - shown in the status line, never lost
            result = exc
        self.signals.done.emit(self.what, self.generation, result)


class MoleculeGridModel(QAbstractListModel):
    """One cell per entry in display order. Qt asks only for the cells on screen; a depiction
    not yet drawn, or a property value not yet computed, is requested from a worker thread
    (once, after the paint) and the cell shows blank / ``…`` until it arrives, so a paint never
    runs RDKit and scrolling never waits for it."""

    def __init__(self, molecules: MoleculeSetModel, cache: DepictionCache) -> None:
        super().__init__()
        self.molecules = molecules
        self.cache = cache
        self.shown_property = "MolWt"
        self.blank = QPixmap(CELL)
        self.blank.fill(Qt.GlobalColor.transparent)
        self.pool = QThreadPool()
        self.pool.setMaxThreadCount(1)  # two cores: the other one is the GUI's
        self.pending: dict[tuple, set[int]] = {}  # depiction key -> grid rows waiting for it
        self.queued: dict[tuple, bool] = {}  # asked for during this paint: key -> draw it
        self.start_timer = QTimer()
        self.start_timer.setSingleShot(True)
        self.start_timer.setInterval(0)
        self.start_timer.timeout.connect(self._start_queued)
        self._rendered = _Rendered()
        self._rendered.done.connect(self._on_rendered)

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.molecules.order)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        entry_index = self.molecules.order[index.row()]
        entry = self.molecules.entries[entry_index]
        if role == Qt.ItemDataRole.DisplayRole:
            if entry.kind != "molecule":
                return f"{entry.name}\n{entry.kind}"
            known, value = entry.known_descriptor(self.shown_property)
            if not known:  # computed with the depiction, off the GUI thread
                key = self._key(entry_index, entry)
                self._request(key, index.row(), self.cache.lookup(key) is MISSING)
            shown = "invalid" if known and value is None else \
                f"{self.shown_property} {_format(value) if known else '…'}"
            return f"{entry.name or f'#{entry_index + 1}'}\n{shown}"
        if role == Qt.ItemDataRole.DecorationRole:
            if entry.kind != "molecule":
                return self.blank
            key = self._key(entry_index, entry)
            pixmap = self.cache.lookup(key)
            if pixmap is MISSING:
                self._request(key, index.row(), True)
                return self.blank
            return pixmap if pixmap is not None else self.blank
        if role == Qt.ItemDataRole.ToolTipRole:
            invalid = entry.kind == "molecule" and not entry.valid
            problem = f"\ninvalid: {smiles_problem(entry.smiles)}" if invalid else ""
            return (entry.smiles or entry.detail) + problem
        return None

    def _key(self, entry_index: int, entry) -> tuple:
        """The depiction's cache key: SMILES, size, and the search hit's atoms."""
        hit = self.molecules.hits.get(entry_index)
        return entry.smiles, CELL.width(), CELL.height(), hit.atoms if hit else ()

    def _request(self, key: tuple, row: int, draw: bool) -> None:
        """Queue a cell's work; the worker starts on it once this paint is over (RDKit holds
        the GIL while it works, so a job started mid-paint stalls every later cell)."""
        if key in self.queued:
            self.queued[key] |= draw
        elif key not in self.pending:
            self.queued[key] = draw
            if not self.start_timer.isActive():
                self.start_timer.start()
        self.pending.setdefault(key, set()).add(row)

    def _start_queued(self) -> None:
        _import_rdkit_modules()
        for key, draw in self.queued.items():
            self.pool.start(_RenderCell(key, self.shown_property, draw, self._rendered))
        self.queued = {}

    def _on_rendered(self, key: tuple, image: QImage | None, shown: str, value: Any,
                     drawn: bool) -> None:
        """Keep the depiction and the value, and repaint only the cells that asked for them
        (a change over every row makes the view walk all 100k of them, per depiction)."""
        rows = self.pending.pop(key, set())
        if drawn:
            self.cache.store(key, image)
        for row in sorted(r for r in rows if r < self.rowCount()):
            entry = self.molecules.entry_at(row)
            if entry.smiles == key[0]:  # not edited meanwhile
                entry.remember(shown, value)
            self.dataChanged.emit(self.index(row), self.index(row))

    def stop(self) -> None:
        """Drop queued depictions and wait for the one being drawn (before closing)."""
        self.start_timer.stop()
        self.queued = {}
        self.pool.clear()
        self.pool.waitForDone()

    def refresh(self) -> None:
        self.beginResetModel()
        self.endResetModel()


class MoleculeTableModel(QAbstractTableModel):
    """Entries in display order with their descriptors (computed for the rows shown)."""

    def __init__(self, molecules: MoleculeSetModel,
                 on_sort: Callable[[str, bool], Any] | None = None) -> None:
        super().__init__()
        self.molecules = molecules
        self.on_sort = on_sort  # (column, descending): a header click runs molecules.sort_by
        self.columns = table_columns(molecules)

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.molecules.order)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.columns[section]
        return None

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or role not in (Qt.ItemDataRole.DisplayRole,
                                               Qt.ItemDataRole.ToolTipRole):
            return None
        entry_index = self.molecules.order[index.row()]
        entry = self.molecules.entries[entry_index]
        column = self.columns[index.column()]
        if column == "#":
            return str(entry_index + 1)
        if column == "name":
            return entry.name
        if column == "SMILES":
            return entry.smiles or entry.detail
        if column == "flag":
            return entry.flag
        return _format(self.molecules.value(entry_index, column))

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """A header click (Qt calls this): the panel sorts through its command."""
        descending = order == Qt.SortOrder.DescendingOrder
        if self.on_sort is not None:
            self.on_sort(self.columns[column], descending)
        elif self.columns[column] == "#":
            self.molecules.unsort()
        else:
            name = self.columns[column]
            self.molecules.sort({"SMILES": "smiles"}.get(name, name), descending=descending)

    def refresh(self) -> None:
        self.beginResetModel()
        self.columns = table_columns(self.molecules)
        self.endResetModel()


class MoleculesPanel(OpensDroppedFiles, QWidget):
    def __init__(self, host: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.model = MoleculeSetModel()
        self.cache = DepictionCache(convert=_pixmap)
        self.topology_path = ""  # a topology opened (or a PDB) awaiting its MD trajectory
        self.md_trajectory_path = ""  # an MD trajectory opened before its topology
        self.trajectory_sources: dict[str, Path] = {}  # a run's trajectory files by name
        self._framed: Trajectory | None = None  # the trajectory the camera was framed on
        self._selected_in = "grid"  # the view whose selection an export takes (the latest)
        self._residue_by_command = False  # a residue chosen by its command, not a click
        self._md_paths: tuple[str, str] | None = None  # the MD run shown (topology, trajectory)
        self._md_pending: tuple[str, str] | None = None  # the MD run being read
        self._run_dir = ""  # the Branching Flows run whose samples are shown
        self._trajectory_path = ""  # the trajectory file playing beside the set
        self._pending_camera: dict | None = None  # a session's 3-D camera, for the next scene
        self.commands = registry_for(host, COMMANDS)
        self.state = MoleculesState(self.model, host, view=self)
        self.commands.bind(SCOPE, self.state)
        self._stop_listening = self.commands.listen(self._on_invocation)
        self.generation = 0  # bumped per loaded set: late background results are dropped
        self.pool = QThreadPool()
        self.pool.setMaxThreadCount(1)
        self.numbering_pool = QThreadPool()  # hmmscan takes seconds: scenes need not wait
        self.numbering_pool.setMaxThreadCount(1)
        self._numbering_progress = [0, 0]  # chains checked, chains to check
        self._computed = _Computed()
        self._computed.done.connect(self._on_computed)
        self.set_diversity: float | None = None
        self._idle = threading.Event()  # cleared while the grid scrolls: background loops wait
        self._idle.set()
        self._idle_timer = QTimer(self)
        self._idle_timer.setSingleShot(True)
        self._idle_timer.setInterval(SCROLL_QUIET_MS)
        self._idle_timer.timeout.connect(self._idle.set)
        self.model.pause = self._pause_while_scrolling
        self._build()
        self.model.events.connect("loaded", self._on_loaded)
        self.model.events.connect("order", self._on_order)
        self.model.events.connect("changed", self._on_changed)
        self.model.events.connect("search", self._on_search)
        self.jobs = PanelJobs(host, self.status.setText, on_result=self._on_result)
        self.setAcceptDrops(True)

    @property
    def _current(self) -> int:
        """The entry in the editor (-1: none); the commands' state holds it."""
        return self.state.current

    @_current.setter
    def _current(self, index: int) -> None:
        self.state.current = index

    @property
    def reference_path(self) -> str:
        return self.state.reference_path

    # -- layout --------------------------------------------------------------------------

    def _build(self) -> None:
        bar = QHBoxLayout()
        commands = self.commands
        self.open_button = QPushButton("Open molecules…")
        mark_argument(self.open_button, "molecules.open")  # asks for the file, then runs it
        self.open_button.clicked.connect(self.choose_file)
        self.reference_button = QPushButton("Reference…")
        self.reference_button.setToolTip("the reference set for histograms and nearest "
                                         "neighbours (default: GNEprop known antibiotics)")
        mark_argument(self.reference_button, "molecules.open_reference")
        self.reference_button.clicked.connect(self.choose_reference)
        self.smarts_edit = QLineEdit()
        self.smarts_edit.setPlaceholderText("SMARTS substructure, e.g. c1ccccc1 or [NX3][CX3]=O")
        connect(self.smarts_edit.returnPressed, self.smarts_edit, commands, "molecules.search",
                lambda: {"smarts": self.smarts_edit.text()})
        self.hits_label = QLabel("")
        self.property_box = QComboBox()
        self.property_box.addItems(list(DESCRIPTOR_NAMES))
        self.property_box.setToolTip("the property shown under each depiction")
        connect(self.property_box.textActivated, self.property_box, commands,
                "molecules.show_property", lambda name: {"property": name})
        self.run_box = QComboBox()
        for method, what in RUN_METHODS.items():
            self.run_box.addItem(method)
            self.run_box.setItemData(self.run_box.count() - 1, what,
                                     Qt.ItemDataRole.ToolTipRole)
        self.run_button = QPushButton("Run…")
        self.run_button.setToolTip("set the chosen method's parameters and run it; what it "
                                   "makes opens here")
        mark_argument(self.run_button, "molecules.run_method")  # asks for the parameters
        self.run_button.clicked.connect(lambda: self.choose_run(self.run_box.currentText()))
        self.export_grid_button = QPushButton("Export grid…")
        mark_argument(self.export_grid_button, "molecules.export_grid")
        self.export_grid_button.clicked.connect(self.choose_grid_path)
        self.export_set_button = QPushButton("Export selection…")
        self.export_set_button.setToolTip("the selected rows (all shown rows when none are "
                                          "selected) as SMILES, SDF, FASTA, PDB or CSV")
        mark_argument(self.export_set_button, "molecules.export_selection")
        self.export_set_button.clicked.connect(self.choose_set_path)
        self.antibodies_button = QPushButton("Jain antibodies")
        self.antibodies_button.setToolTip("the 137 clinical antibodies of Jain et al. 2017 "
                                          "(VH/VL) with their measured properties")
        connect_button(self.antibodies_button, commands, "molecules.open_antibodies")
        self.scaffold_box = QComboBox()
        self.scaffold_box.setToolTip("show one Murcko scaffold's molecules (largest groups "
                                     "first)")
        self.scaffold_box.setMinimumContentsLength(18)
        connect(self.scaffold_box.activated, self.scaffold_box, commands,
                "molecules.filter_scaffold",
                lambda item: {"scaffold": self.scaffold_box.itemData(item)})
        self.diversity_label = QLabel("")
        self.diversity_label.setToolTip("mean pairwise Tanimoto distance (Morgan r2, 2048 bits)")
        # Two rows: one would need ~1350 px and widen a 1280 px window.
        for widget in (self.open_button, self.antibodies_button, self.reference_button,
                       self.scaffold_box, self.property_box, self.run_box, self.run_button):
            bar.addWidget(widget)
        bar.addStretch(1)
        search_row = QHBoxLayout()
        search_row.addWidget(self.smarts_edit, 1)
        for widget in (self.hits_label, self.export_grid_button, self.export_set_button):
            search_row.addWidget(widget)

        self.grid_model = MoleculeGridModel(self.model, self.cache)
        self.grid = QListView()
        self.grid.setViewMode(QListView.ViewMode.IconMode)
        self.grid.setResizeMode(QListView.ResizeMode.Adjust)
        self.grid.setMovement(QListView.Movement.Static)
        self.grid.setUniformItemSizes(True)
        self.grid.setLayoutMode(QListView.LayoutMode.Batched)
        self.grid.setBatchSize(500)
        self.grid.setIconSize(CELL)
        self.grid.setGridSize(GRID)
        self.grid.setWordWrap(True)
        self.grid.setModel(self.grid_model)
        self.grid.setSelectionMode(QListView.SelectionMode.ExtendedSelection)
        self.grid.selectionModel().currentChanged.connect(
            lambda current, _: self._row_chosen(current.row()))
        self.grid.selectionModel().selectionChanged.connect(
            lambda *_: self._selection_changed("grid"))
        self.grid.verticalScrollBar().valueChanged.connect(self._scrolling)

        self.table_model = MoleculeTableModel(self.model, self._sort_chosen)
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setSortingEnabled(True)
        self.table.horizontalHeader().setSortIndicatorShown(True)
        self.table.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.table.selectionModel().currentChanged.connect(
            lambda current, _: self._row_chosen(current.row()))
        self.table.selectionModel().selectionChanged.connect(
            lambda *_: self._selection_changed("table"))

        self.histogram_box = QComboBox()
        self.histogram_box.addItems(list(DESCRIPTOR_NAMES))
        self.histogram_box.currentTextChanged.connect(lambda _: self.draw_histogram())
        connect(self.histogram_box.textActivated, self.histogram_box, commands,
                "molecules.show_histogram", lambda name: {"property": name})
        self.histogram = PlotSpecView()
        histograms = QWidget()
        histogram_layout = QVBoxLayout(histograms)
        histogram_row = QHBoxLayout()
        self.export_histogram_button = QPushButton("Export figure…")
        mark_argument(self.export_histogram_button, "molecules.export_histogram")
        self.export_histogram_button.clicked.connect(
            lambda: self.ask_figure("Export the histogram", "histogram.png",
                                    "molecules.export_histogram", captioned=True))
        histogram_row.addWidget(self.histogram_box, 1)
        histogram_row.addWidget(self.export_histogram_button)
        histogram_layout.addLayout(histogram_row)
        histogram_layout.addWidget(self.histogram, 1)

        self.tabs = QTabWidget()
        self.tabs.addTab(self.table, "Table")
        self.tabs.addTab(histograms, "Histograms")
        self.tabs.addTab(self._build_editor(), "Edit")
        self.tabs.addTab(self._build_sequence(), "Sequence")
        self.tabs.addTab(self._build_3d(), "3D")
        self.tabs.currentChanged.connect(self._on_tab)
        connect(self.tabs.tabBar().tabBarClicked, self.tabs, commands, "molecules.show_tab",
                lambda index: {"tab": TABS[index]} if 0 <= index < len(TABS) else None)

        splitter = self.splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.grid)
        self.player = TrajectoryPlayer()
        self.player.frame_changed.connect(self.show_frame)
        connect(self.player.source_chosen, self.player.source_box, commands,
                "molecules.open_trajectory", lambda name: {"path": name})
        connect(self.player.play_button.clicked, self.player.play_button, commands,
                "molecules.play_trajectory", lambda playing: {"playing": playing})
        connect(self.player.slider.sliderReleased, self.player.slider, commands,
                "molecules.show_frame", lambda: {"frame": self.player.frame + 1})
        connect(self.player.fps_box.valueChanged, self.player.fps_box, commands,
                "molecules.set_speed", lambda fps: {"fps": fps})
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.tabs, 3)
        right_layout.addWidget(self.player, 1)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        self.status = QLabel("Open molecules (SMILES, CSV/TSV with a SMILES column, SDF, XYZ; "
                             "FASTA and PDB list their records; a PSF/PDB with its DCD/XTC plays "
                             "an MD run) or drop files here.")
        self.status.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addLayout(search_row)
        layout.addWidget(splitter, 1)
        self.outputs = RunOutputs(self, self.open_output, self._open_name, self.status.setText)
        mark_argument(self.outputs.button, "molecules.open_output")  # the run's output
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.outputs.button)
        status_row.addWidget(self.diversity_label)
        layout.addLayout(status_row)
        self._route_scene_exports()

    def _route_scene_exports(self) -> None:
        """Each plot's right-click "Export..." is pyqtgraph's own exporter, which writes no
        provenance: it opens the panel's export of that plot (the histogram, or the
        trajectory's curve) as the buttons do."""
        for view in self.findChildren(pg.GraphicsView):
            histogram = view is self.histogram or self.histogram.isAncestorOf(view)
            command_id = "molecules.export_histogram" if histogram else "molecules.export_curve"
            title, name = ("Export the histogram", "histogram.png") if histogram else \
                ("Export the trajectory's curve", "curve.png")
            route_export(view, command_id, lambda t=title, n=name, c=command_id:
                         self.ask_figure(t, n, c, captioned=True))

    def _build_editor(self) -> QWidget:
        editor = QWidget()
        layout = QVBoxLayout(editor)
        self.editing_label = QLabel("Choose a molecule in the grid or the table.")
        self.smiles_edit = QLineEdit()
        self.smiles_edit.textChanged.connect(self._show_validity)
        connect(self.smiles_edit.returnPressed, self.smiles_edit, self.commands,
                "molecules.edit_smiles", lambda: self._edit_args(None))
        self.validity_label = QLabel("")
        row = QHBoxLayout()
        self.apply_button = QPushButton("Apply")
        connect_button(self.apply_button, self.commands, "molecules.edit_smiles",
                       lambda: self._edit_args(None))
        self.standardise_button = QPushButton("Standardise")
        self.standardise_button.setToolTip("largest fragment, no stereo, neutral charges")
        connect_button(self.standardise_button, self.commands, "molecules.standardise_molecule",
                       lambda: self._current_args())
        self.flag_box = QComboBox()
        self.flag_box.addItems([flag or "unmarked" for flag in FLAGS])
        connect(self.flag_box.activated, self.flag_box, self.commands, "molecules.mark_molecule",
                lambda i: self._current_args(flag=FLAGS[i] or "unmarked"))
        for widget in (self.apply_button, self.standardise_button, self.flag_box):
            row.addWidget(widget)
        self.preview = QLabel()
        self.preview.setMinimumSize(200, 160)  # more would make the panel taller than 800 px
        self.preview.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.nearest_label = QLabel("")
        self.nearest_label.setWordWrap(True)
        self.nearest_smiles = QLineEdit()  # scrolls: a long SMILES has no place to wrap
        self.nearest_smiles.setReadOnly(True)
        self.nearest_smiles.setVisible(False)
        for widget in (self.editing_label, self.smiles_edit, self.validity_label):
            layout.addWidget(widget)
        layout.addLayout(row)
        layout.addWidget(self.preview, 1)
        layout.addWidget(self.nearest_label)
        layout.addWidget(self.nearest_smiles)
        return editor

    def _build_sequence(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        self.sequence_strip = SequenceStrip()
        self.sequence_strip.residue_selected.connect(self._residue_picked)
        scroll = QScrollArea()
        scroll.setWidget(self.sequence_strip)
        self.residue_label = QLabel("Choose a protein, antibody chain or structure.")
        legend = "  ".join(f"<span style='background:{colour}'>&nbsp;{name}&nbsp;</span>"
                           for name, colour in CLASS_COLOUR.items())
        legend += "  " + "  ".join(f"<span style='color:{colour}'>&#9644; {name}</span>"
                                   for name, colour in CDR_COLOUR.items())
        numbering_row = QHBoxLayout()
        self.scheme_box = QComboBox()
        for scheme in SCHEMES:
            self.scheme_box.addItem(SCHEME_TITLES[scheme], scheme)
        self.scheme_box.setToolTip("antibody numbering scheme (ANARCI); CDRs follow it")
        self.scheme_box.currentIndexChanged.connect(lambda _: self.start_numbering())
        connect(self.scheme_box.activated, self.scheme_box, self.commands,
                "molecules.number_chains",
                lambda index: {"scheme": self.scheme_box.itemData(index)})
        self.numbering_label = QLabel("")
        self.numbering_label.setWordWrap(True)
        numbering_row.addWidget(QLabel("CDR numbering:"))
        numbering_row.addWidget(self.scheme_box)
        numbering_row.addWidget(self.numbering_label, 1)
        layout.addLayout(numbering_row)
        layout.addWidget(scroll, 1)
        layout.addWidget(QLabel(legend))
        layout.addWidget(self.residue_label)
        return page

    def _build_3d(self) -> QWidget:
        page = QWidget()
        self.layout_3d = QVBoxLayout(page)
        row = QHBoxLayout()
        self.colour_box = QComboBox()
        self.colour_box.addItems(list(COLOUR_MODES))
        self.colour_box.setCurrentText("chain")
        self.colour_box.setToolTip("protein colouring (small molecules: by element)")
        self.colour_box.currentTextChanged.connect(lambda _: self.show_3d())
        connect(self.colour_box.textActivated, self.colour_box, self.commands,
                "molecules.colour_3d", lambda mode: {"colouring": mode})
        self.style_box = QComboBox()
        self.style_box.addItems(list(STYLES))
        self.style_box.setToolTip("protein drawing: atoms with the CA trace, or a cartoon tube "
                                  "(thicker through helices and strands, found from CA "
                                  "geometry)")
        self.style_box.currentTextChanged.connect(lambda _: self.show_3d())
        connect(self.style_box.textActivated, self.style_box, self.commands,
                "molecules.style_3d", lambda style: {"style": style})
        self.pin_button = QPushButton("Pin for RMSD")
        self.pin_button.setToolTip("keep this structure; the next one shown is superposed on "
                                   "it (Kabsch) and the RMSD given")
        connect_button(self.pin_button, self.commands, "molecules.pin_structure",
                       lambda: self._current_args())
        self.export_3d_button = QPushButton("Snapshot…")
        mark_argument(self.export_3d_button, "molecules.export_3d")
        self.export_3d_button.clicked.connect(
            lambda: self.ask_figure("Export a 3-D snapshot", "structure.png",
                                    "molecules.export_3d"))
        self.rmsd_label = QLabel("")
        for widget in (self.colour_box, self.style_box, self.pin_button, self.export_3d_button,
                       self.rmsd_label):
            row.addWidget(widget)
        row.addStretch(1)
        self.placeholder_3d = QLabel("The 3-D view opens with this tab.")
        self.placeholder_3d.setWordWrap(True)
        self.layout_3d.addLayout(row)
        self.layout_3d.addWidget(self.placeholder_3d, 1)
        self.viewer_3d = None  # MoleculeView3D once the tab is opened (and OpenGL works)
        self.scene = None  # the current entry's Scene, once computed
        self.pinned = None  # (entry index, Scene, record) to superpose on
        self.highlighted: list[int] = []  # atoms of the residue chosen in the strip
        return page

    @command("Cannot show the tab")
    def _on_tab(self, index: int) -> None:
        if index == TAB_HISTOGRAMS:
            self.draw_histogram()
        elif index == TAB_3D:
            self.open_3d()
            self.show_3d()

    def open_3d(self) -> bool:
        """Create the OpenGL view (first time only); False, said in the tab, without
        OpenGL 2.1 (scenes and RMSD are still computed)."""
        if self.viewer_3d is not None:
            return True
        try:
            from panels.molecules.view3d import MoleculeView3D
            from panels.widgets.gl import gl_problem

            problem = gl_problem()
            if problem:
                raise RuntimeError(problem)
            self.viewer_3d = MoleculeView3D()
        except Exception as exc:  # no OpenGL here: the numbers still come
            self.placeholder_3d.setText(f"3-D drawing unavailable: {type(exc).__name__}: "
                                        f"{exc}")
            return False
        self.layout_3d.replaceWidget(self.placeholder_3d, self.viewer_3d)
        self.placeholder_3d.hide()
        return True

    @command("Cannot show the 3-D structure")
    def show_3d(self) -> None:
        """Build the current entry's scene off the GUI thread (an ETKDG conformer for a
        molecule), while the 3-D tab is shown."""
        if self.tabs.currentIndex() != TAB_3D or self._current < 0:
            return
        if self.player.trajectory is not None and self.player.trajectory.three_d:
            self.show_frame(self.player.frame)
            return
        entry, index, mode = self.model.entries[self._current], self._current, \
            self.colour_box.currentText()
        if entry.kind == "molecule" and not entry.valid or entry.kind in ("protein",
                                                                          "nucleotide"):
            self.scene = None
            self.rmsd_label.setText("no 3-D structure for this entry")
            return
        self.scene = None
        self.rmsd_label.setText("computing the 3-D structure…")
        self.compute("scene", lambda: (index, _scene_of(entry, mode)))

    def _on_scene(self, index: int, scene) -> None:
        if index != self._current:
            return
        self.scene = scene
        entry = self.model.entries[index]
        if scene.kind == "molecule" and entry.kind == "molecule":  # SDF/PDB exports reuse it
            self.model.conformers[entry.smiles] = (scene.elements, scene.positions)
        overlay, text = None, ""
        if self.pinned is not None and self.pinned[0] != index:
            pinned_index, pinned_scene, pinned_record = self.pinned
            try:
                rmsd, count, overlay = superpose(scene, self.model.entries[index].record,
                                                 pinned_scene, pinned_record)
                unit = "CA atoms" if scene.kind == "structure" else "heavy atoms"
                text = f"RMSD to #{pinned_index + 1}: {rmsd:.3f} Å over {count} {unit}"
            except ValueError as exc:
                text = f"no RMSD: {exc}"
        self.rmsd_label.setText(text or f"{len(scene.positions)} atoms")
        if self.viewer_3d is not None:
            self.viewer_3d.show_scene(scene, overlay, style=self.style_box.currentText())
            self._apply_camera()
            if scene.kind == "structure":
                self.viewer_3d.highlight_atoms(self.highlighted)

    def pin(self) -> bool:
        """Pin the structure in the editor (``molecules.pin_structure``)."""
        return self._run("molecules.pin_structure", **(self._current_args() or {}))

    def pin_current(self) -> str:
        """Keep the current scene as the one others are superposed on."""
        if self.scene is None:
            raise Refusal("its 3-D structure is not computed yet: show it in the 3D tab")
        self.pinned = (self._current, self.scene, self.model.entries[self._current].record)
        said = f"pinned #{self._current + 1}: choose another entry"
        self.rmsd_label.setText(said)
        return said

    def export_3d(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                  caption: bool = False) -> Path:
        """The 3-D view rendered again at ``dpi`` (PNG; needs OpenGL), provenance inside."""
        target = Path(path)
        if target.suffix.lower() != ".png":
            raise ValueError(f"{target}: a 3-D snapshot is written as .png")
        if self.viewer_3d is None:
            raise ValueError(f"{target}: the 3-D view is not drawn here (open its tab; it "
                             "needs OpenGL)")
        scale = dpi / SCREEN_DPI
        width, height = (round(self.viewer_3d.width() * scale),
                         round(self.viewer_3d.height() * scale))
        pixels = np.ascontiguousarray(self.viewer_3d.snapshot((width, height)))  # BGRA
        image = QImage(pixels.data, width, height, 4 * width, QImage.Format.Format_ARGB32)
        image.setDotsPerMeterX(round(dpi / 0.0254))
        image.setDotsPerMeterY(round(dpi / 0.0254))
        indices = [self._current] if self._current >= 0 else []
        record = self.figure_record("3d", indices, colour=self.colour_box.currentText(),
                                    style=self.style_box.currentText(), dpi=dpi,
                                    pinned=self.pinned[0] if self.pinned else None)
        return provenance.write(target, png_bytes(image), record)

    def _residue_picked(self, track: int, position: int) -> None:
        """A click on the strip runs ``molecules.select_residue`` (naming chain and number);
        the command's own choice is only shown."""
        if self._residue_by_command:
            self._on_residue(track, position)
            return
        chosen = self.sequence_strip.tracks[track]
        self.commands.trigger("molecules.select_residue", chain=chosen.label,
                              residue=chosen.numbers[position])

    def choose_residue(self, track: int, position: int) -> None:
        self._residue_by_command = True
        try:
            self.sequence_strip.select(track, position)
        finally:
            self._residue_by_command = False

    @command("Cannot show the residue")
    def _on_residue(self, track: int, position: int) -> None:
        """Name the residue; for a structure, find its atoms (highlighted in the 3-D view)."""
        chosen = self.sequence_strip.tracks[track]
        self.residue_label.setText(chosen.describe(position))
        record = self.model.entries[self._current].record if self._current >= 0 else None
        self.highlighted = residue_atoms(record, "" if chosen.label == "-" else chosen.label,
                                         chosen.numbers[position]) \
            if isinstance(record, Structure) else []
        if self.viewer_3d is not None and self.scene is not None and \
                self.scene.kind == "structure":
            self.viewer_3d.highlight_atoms(self.highlighted)

    # -- files ---------------------------------------------------------------------------

    # -- commands: the wrappers tests, drops and the window call -----------------------------

    def _run(self, command_id: str, **args: Any) -> bool:
        """Run a command as a user's action: True when it ran (and did not say it changed
        nothing); a refusal is reported."""
        return self.commands.trigger(command_id, **args) not in (None, False)

    def _on_invocation(self, invocation: Invocation) -> None:
        """A molecule command's outcome in the status line: its refusal, or what it said."""
        if invocation.command.scope != SCOPE:
            return
        if invocation.refused and invocation.command.id == "molecules.export_selection":
            self.status.setText(f"Not exported: {invocation.refused}")
        elif invocation.refused:
            self.status.setText(f"{invocation.command.title} refused: {invocation.refused}")
            if invocation.command.id == "molecules.search":
                self.hits_label.setText("bad SMARTS")
        elif isinstance(invocation.result, str):
            self.status.setText(invocation.result)
        elif " refused: " in self.status.text():  # an old refusal must not read as this one's
            self.status.setText(f"{invocation.command.title}: done")

    def label(self, index: int) -> str:
        """How a command names entry ``index`` (its name, SMILES or #record)."""
        return molecule_label(self.state, index)

    def _current_args(self, **more: Any) -> dict | None:
        """The arguments naming the molecule in the editor; ``None`` (nothing run) when no
        molecule is chosen."""
        if not 0 <= self._current < len(self.model.entries):
            return None
        return {"molecule": self.label(self._current), **more}

    def _edit_args(self, smiles: str | None) -> dict | None:
        """``molecules.edit_smiles`` for the editor's text; an invalid SMILES is said beside
        the field (the Apply button is off) and runs nothing."""
        text = smiles if smiles is not None else self.smiles_edit.text()
        if self._current < 0:
            return None
        if canonical_smiles(text.strip()) is None:
            self.validity_label.setText(f"not a valid SMILES: {text!r}")
            return None
        return self._current_args(smiles=text)

    def open_file(self, path: str | os.PathLike, inspect_invalid: bool = False) -> bool:
        """Open a molecule file (``molecules.open``); problems are reported, never raised."""
        args = {"inspect_invalid": True} if inspect_invalid else {}
        return self._run("molecules.open", path=str(path), **args)

    def load_path(self, path: str | os.PathLike, inspect_invalid: bool = False) -> bool:
        """A molecule file; a multi-frame XYZ or a ``>t=`` FASTA also plays as a trajectory;
        an MD topology waits for its trajectory, and a trajectory joins the topology opened
        before it. ``inspect_invalid`` (a run's samples): a file without one valid molecule
        opens with every sample marked invalid and why, instead of an error."""
        ext = extension_of(Path(path))
        if ext in TRAJECTORY_EXTENSIONS:  # the window opens two dropped files one by one
            if not self.topology_path:
                self.md_trajectory_path = str(path)
                self.status.setText(f"{Path(path).name}: now open or drop its topology (PSF, "
                                    "PDB, GRO, PRMTOP)")
                return True
            return self.open_md(self.topology_path, path)
        if ext in TOPOLOGY_EXTENSIONS and self.md_trajectory_path:
            return self.open_md(path, self.md_trajectory_path)
        if ext in TOPOLOGY_EXTENSIONS and ext != ".pdb":
            self.topology_path = str(path)
            self.status.setText(f"topology {Path(path).name}: now open or drop its trajectory "
                                "(DCD, XTC, TRR)")
            return True
        generation = self._read_generation(path) if ext == ".xyz" else None
        try:
            self.model.load(path)
        except Exception as exc:  # FormatError and OSError name the file
            if inspect_invalid:  # every sample, read on a worker; the set opens when read
                self._load_invalid(path, generation, str(exc))
                return True
            if generation is None:
                raise Refusal(str(exc)) from None
            self.model.load_records([], path)  # noise frames only: still a trajectory
        self.trajectory_sources = {}
        self.player.set_trajectory(None)
        self._opened(path, generation)
        return True

    def _opened(self, path: str | os.PathLike, generation: Trajectory | None,
                inspected: bool = False) -> None:
        """What follows reading a set: its trajectory plays, its saved edits come back, and
        the status says what was read (``inspected``: samples all marked invalid)."""
        self.topology_path = str(path) if extension_of(Path(path)) == ".pdb" else ""
        trajectory = generation or sequence_trajectory(
            [e.record for e in self.model.entries], Path(path).name)
        self._play(trajectory)
        restored = self.state.restore_edits()
        problems = self.model.problems
        skipped = (f"; {len(problems)} bad record(s) skipped (first: {problems[0][0]}: "
                   f"{problems[0][1]})") if problems else ""
        played = f"; {len(trajectory)} frames to play" if trajectory else ""
        invalid = ("; none is a valid molecule: each is marked invalid, with why in the "
                   f"'{PROBLEM_COLUMN}' column") if inspected else ""
        self.status.setText(f"{Path(path).name}: {len(self.model.entries)} record(s){skipped}"
                            + invalid
                            + (f"; {restored} saved edit(s) restored" if restored else "")
                            + played)

    def _load_invalid(self, path: str | os.PathLike, generation: Trajectory | None,
                      error: str) -> None:
        """Every sample of a file without a valid molecule, for inspection: parsed on a
        worker (a run's samples can be tens of MB); ``_show_invalid`` opens them."""
        self.generation += 1  # a set opened meanwhile wins
        self.status.setText(f"{Path(path).name}: no valid molecule; reading its samples…")

        def read() -> tuple:
            try:
                return path, generation, error, read_samples(path)
            except FormatError:  # not a list of samples either: the load's error stands
                return path, generation, error, None

        self.compute("samples", read)

    def _show_invalid(self, path: str | os.PathLike, generation: Trajectory | None,
                      error: str, samples: list[Entry] | None) -> None:
        if samples is None and generation is None:
            self.host.show_error("Cannot open the molecules", error)
            return
        if samples is None:
            self.model.load_records([], path)  # noise frames only: still a trajectory
        else:
            self.model.show_samples(path, samples)
            self.tabs.setCurrentIndex(TAB_TABLE)  # where the problem column is
        self._opened(path, generation, inspected=samples is not None)

    def _open_name(self) -> str | None:
        """What is open, as the keep-or-open question names it; ``None`` when nothing is."""
        if not self.model.entries and self.player.trajectory is None:
            return None
        return Path(self.model.path).name or self.model.path

    def _read_generation(self, path: str | os.PathLike) -> Trajectory | None:
        try:
            return read_generation(path)
        except (FormatError, OSError):  # the molecule reader reports it
            return None

    def _play(self, trajectory: Trajectory | None, sources: list[str] = ()) -> None:
        """Hand a trajectory (or ``None``) to the player; its first frame is shown."""
        self._framed = None
        self.player.set_trajectory(trajectory, sources)
        if trajectory is not None and trajectory.three_d and \
                self.tabs.currentIndex() != TAB_3D:
            self.tabs.setCurrentIndex(TAB_3D)
        elif trajectory is not None and not trajectory.three_d:
            self.tabs.setCurrentIndex(TAB_SEQUENCE)

    def open_md(self, topology: str | os.PathLike, trajectory: str | os.PathLike) -> bool:
        return self._run("molecules.open_md", topology=str(topology),
                         trajectory=str(trajectory))

    def start_md(self, topology: str | os.PathLike, trajectory: str | os.PathLike) -> bool:
        """An MD run (topology + trajectory) read by MDAnalysis on a worker thread; its frames
        play in the 3-D tab with the RMSD to frame 0 plotted below."""
        self.generation += 1  # whatever was being computed for the old set is stale
        self.md_trajectory_path = ""
        self._md_pending = (str(topology), str(trajectory))
        self.status.setText(f"reading {Path(trajectory).name} with {Path(topology).name}…")
        self.compute("md", lambda: read_md(topology, trajectory))
        return True

    def _on_md(self, trajectory: Trajectory) -> None:
        self.player.set_trajectory(None)
        self.model.load_records([trajectory.structure], trajectory.name)
        self._md_paths = self._md_pending
        self.topology_path = ""
        self._play(trajectory)
        strided = f" (every {trajectory.stride}th kept)" if trajectory.stride > 1 else ""
        self.status.setText(f"{trajectory.name}: {len(trajectory.structure.atoms)} atoms, "
                            f"{len(trajectory)} frames{strided}; RMSD to frame 0 up to "
                            f"{trajectory.curve[1].max():.2f} Å")

    def open_trajectory_file(self, path: str | os.PathLike) -> bool:
        return self._run("molecules.open_trajectory", path=str(path))

    def play_file(self, path: str | os.PathLike, sources: list[str] = ()) -> bool:
        """Play a generation (multi-frame XYZ) or sequence (``>t=`` FASTA) trajectory without
        changing the set shown."""
        try:
            trajectory = self._read_generation(path) if extension_of(Path(path)) == ".xyz" \
                else sequence_trajectory(read_fasta(path).records, Path(path).name)
        except (FormatError, OSError) as exc:
            raise Refusal(str(exc)) from None
        if trajectory is None:
            raise Refusal(f"{path}: not a trajectory (one frame, or FASTA headers without "
                          "t=<time>)")
        self._play(trajectory, sources or list(self.trajectory_sources))
        self._trajectory_path = str(path)
        return True

    @command("Cannot show the frame")
    def show_frame(self, index: int) -> None:
        """Draw the player's frame: in 3-D (MD, generation) or as the strip (sequences)."""
        trajectory = self.player.trajectory
        if trajectory is None or not 0 <= index < len(trajectory):
            return
        if not trajectory.three_d:
            sequence = trajectory.sequences[index]
            self.sequence_strip.set_tracks([Track(trajectory.describe(index).split(" · ")[1]
                                                  if trajectory.times[index] is not None
                                                  else f"frame {index + 1}", sequence,
                                                  list(range(1, len(sequence) + 1)))])
            self.residue_label.setText(trajectory.describe(index))
            return
        self.scene = trajectory.scene(index, self.colour_box.currentText())
        self.rmsd_label.setText(trajectory.describe(index))
        if self.viewer_3d is not None:
            self.viewer_3d.show_scene(self.scene, keep_camera=self._framed is trajectory,
                                      style=self.style_box.currentText())
            self._apply_camera()
            self._framed = trajectory
            if trajectory.kind == "md":
                self.viewer_3d.highlight_atoms(self.highlighted)  # a residue chosen in the strip

    def open_antibodies(self, directory: str | os.PathLike | None = None) -> bool:
        """The Jain et al. 2017 antibodies (VH and VL per antibody, measured properties as
        table columns), from ``../shared/data/antibodies`` by default."""
        args = {"directory": str(directory)} if directory else {}
        return self._run("molecules.open_antibodies", **args)

    # -- antibody numbering --------------------------------------------------------------

    @command("Cannot number the antibody chains")
    def start_numbering(self) -> bool:
        """Number the set's protein chains with ANARCI (hmmscan) off the GUI thread, in the
        chosen scheme; without hmmscan the tab says what to install."""
        targets = self.model.numbering_targets()
        if not targets:
            self.numbering_label.setText("")
            return False
        problem = numbering_problem()
        if problem:
            self.numbering_label.setText(problem)
            return False
        scheme = self.scheme_box.currentData()
        self.numbering_pool.clear()  # chunks of another scheme still queued
        self.model.numbering = {}
        self._numbering_progress = [0, len(targets)]
        self.numbering_label.setText(f"numbering {len(targets)} chain(s) "
                                     f"({SCHEME_TITLES[scheme]})…")
        for start in range(0, len(targets), NUMBERING_CHUNK):
            chunk = targets[start:start + NUMBERING_CHUNK]
            self.compute("numbering", lambda chunk=chunk: (
                scheme, [i for i, _, _ in chunk],
                number_sequences([(name, sequence) for _, name, sequence in chunk], scheme)),
                self.numbering_pool)
        return True

    def number_in(self, scheme: str) -> bool:
        """``molecules.number_chains``: choose the scheme; the chains are numbered in it (a
        scheme chosen again keeps its numbering)."""
        index = self.scheme_box.findData(scheme)
        if index == self.scheme_box.currentIndex():
            return bool(self.model.numbering) or self.start_numbering()
        self.scheme_box.setCurrentIndex(index)  # renumbers (currentIndexChanged)
        return True

    def wait_numbered(self, timeout_ms: int = 60_000) -> bool:
        return self.numbering_pool.waitForDone(timeout_ms)

    def _on_numbering(self, scheme: str, indices: list[int], results: list) -> None:
        if scheme != self.scheme_box.currentData():
            return  # a scheme chosen since: its own numbering follows
        count = self.model.add_numbering(indices, results)
        self._numbering_progress[0] += len(indices)
        done, total = self._numbering_progress
        self.numbering_label.setText(
            f"{SCHEME_TITLES[scheme]}: {count} of {done} chain(s) numbered as antibody "
            "variable domains" + (f" ({total - done} to go…)" if done < total else ""))
        self.table_model.refresh()
        if self._current >= 0:
            self._show_entry()

    def choose_file(self) -> None:
        self._open_dialog("Open molecules", self.open_file)

    def choose_reference(self) -> None:
        self._open_dialog("Choose the reference set", lambda path: self.load_reference(path))

    def _open_dialog(self, title: str, then) -> None:
        dialog = QFileDialog(self, title)
        dialog.setNameFilters(["Molecules (*.smi *.csv *.tsv *.sdf *.mol *.xyz *.fasta *.fa "
                               "*.pdb *.cif)", "All files (*)"])
        dialog.fileSelected.connect(then)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def load_reference(self, path: str | os.PathLike | None = None) -> bool:
        args = {"path": str(path)} if path else {}
        return self._run("molecules.open_reference", **args)

    def reference_changed(self) -> None:
        """A reference set was read: the histogram and the nearest neighbour follow it."""
        self.draw_histogram()
        self._show_nearest()

    def _ensure_reference(self) -> None:
        if not self.model.reference:
            try:
                self.model.load_reference()
            except Exception:  # no shared data: histograms show the set alone
                return

    # -- views ---------------------------------------------------------------------------

    def _on_loaded(self) -> None:
        self._md_paths, self._run_dir, self._trajectory_path = None, "", ""
        self.generation += 1
        self.smarts_edit.clear()  # the search starts over on the new set
        self.hits_label.setText("")
        self.set_diversity = None
        self.diversity_label.setText("")
        self.scaffold_box.clear()
        self.scaffold_box.setEnabled(False)
        if self.model.has_molecules():
            self.compute("scaffolds", self.model.scaffold_groups)
            self.compute("diversity", self.model.diversity)
        self.start_numbering()
        self._refresh_views()
        self.draw_histogram()
        if self.model.entries:
            self.show_entry(self.model.order[0])

    def _on_order(self) -> None:
        self._refresh_views()
        self._show_sort()
        if self._current in self.model.order:
            self._make_current(self.model.order.index(self._current))

    def _show_sort(self) -> None:
        """The header's sort arrow as the model's order (a sort by command sets it too);
        blocked, or the table would sort again."""
        header = self.table.horizontalHeader()
        sort = self.model.sort_key
        column = self.table_model.columns.index({"smiles": "SMILES"}.get(sort[0], sort[0])) \
            if sort and {"smiles": "SMILES"}.get(sort[0], sort[0]) in self.table_model.columns \
            else 0
        order = Qt.SortOrder.DescendingOrder if sort and sort[1] else \
            Qt.SortOrder.AscendingOrder
        header.blockSignals(True)
        header.setSortIndicator(column, order)
        header.blockSignals(False)
        header.viewport().update()

    def _sort_chosen(self, column: str, descending: bool) -> None:
        """A header click: ``molecules.sort_by`` (Qt also sorts when sorting is switched on,
        with nothing open: nothing to run)."""
        key = {"SMILES": "smiles"}.get(column, column)
        if not self.model.entries or self.model.sort_key == (key, descending) or \
                (column == "#" and self.model.sort_key is None):
            return  # sorted so already (``sortByColumn`` asks the model twice)
        args = {"descending": True} if descending else {}
        self.commands.trigger("molecules.sort_by", column=column, **args)

    def _on_search(self, hits: dict) -> None:
        """The hits are drawn; the first one shown becomes the grid's current cell (without
        selecting it: an export takes the selection)."""
        self._refresh_views()
        self.hits_label.setText(f"{len(hits)} hit(s)" if self.model.query else "")
        shown = [self.model.order.index(i) for i in hits if i in self.model.order]
        if shown:
            self._make_current(min(shown))
            self.grid.scrollTo(self.grid_model.index(min(shown)))

    def _make_current(self, row: int) -> None:
        """Move the grid's current cell without selecting it (an export takes the selection)."""
        self.grid.selectionModel().setCurrentIndex(self.grid_model.index(row),
                                                   QItemSelectionModel.SelectionFlag.NoUpdate)

    def _refresh_views(self) -> None:
        self.grid_model.refresh()
        self.table_model.refresh()
        if self.model.inspecting:  # the reasons are the point: whole, not elided
            self.table.resizeColumnToContents(self.table_model.columns.index(PROBLEM_COLUMN))

    def _on_changed(self, index: int) -> None:
        if index not in self.model.order:
            return
        row = self.model.order.index(index)
        self.grid_model.dataChanged.emit(self.grid_model.index(row), self.grid_model.index(row))
        self.table_model.dataChanged.emit(
            self.table_model.index(row, 0),
            self.table_model.index(row, self.table_model.columnCount() - 1))
        if index == self._current:
            self._show_entry()
        self.draw_histogram()

    # -- background work: scaffolds, diversity -------------------------------------------

    def compute(self, what: str, work, pool: QThreadPool | None = None) -> None:
        """Run ``work`` off the GUI thread; ``_on_computed`` gets its result."""
        _import_rdkit_modules()
        (pool or self.pool).start(_Compute(what, self.generation, work, self._computed))

    def _scrolling(self) -> None:
        self._idle.clear()
        self._idle_timer.start()  # idle again once the scrolling has stopped a while

    def _pause_while_scrolling(self) -> None:
        """Called by the scaffold and fingerprint loops between molecules: on a worker, wait
        (without the GIL) while the grid scrolls, so its paints never queue behind RDKit."""
        if threading.current_thread() is not threading.main_thread():
            self._idle.wait(timeout=IDLE_WAIT_S)

    def wait_computed(self, timeout_ms: int = 30_000) -> bool:
        """Block until the queued background work is done (tests, closing). A blocked main
        thread cannot be scrolling, and its idle timer cannot fire: resume paused loops now."""
        self._idle_timer.stop()
        self._idle.set()
        return self.pool.waitForDone(timeout_ms)

    @command("Cannot show the result")
    def _on_computed(self, what: str, generation: int, result: Any) -> None:
        if what == "export":  # the file is written even if another set was opened since
            path, which, outcome = result
            if isinstance(outcome, Exception):
                self._export_failed(path, outcome)
            else:
                self._exported(which, outcome)
            return
        if generation != self.generation:
            return
        if what == "samples":
            self._show_invalid(*result)
            return
        if isinstance(result, Exception):
            self.status.setText(f"{what} failed: {result}")
            if what == "md":
                self.host.show_error("Cannot open the trajectory", str(result))
            return
        if what == "scaffolds":
            self.scaffold_box.clear()
            self.scaffold_box.addItem(f"all scaffolds ({len(result)})", None)
            for scaffold, count in result:
                self.scaffold_box.addItem(f"{scaffold or 'acyclic'} ({count})", scaffold)
            self.scaffold_box.setEnabled(True)
        elif what == "diversity":
            self.set_diversity = result
            self._show_diversity(None)
        elif what == "selection":
            self._show_diversity(result)
        elif what == "scene":
            self._on_scene(*result)
        elif what == "numbering":
            self._on_numbering(*result)
        elif what == "md":
            self._on_md(result)

    def filter_scaffold(self, scaffold: str | None) -> bool:
        """Show only one scaffold's molecules (``None``: all of them)."""
        args = {"scaffold": scaffold} if scaffold is not None else {}
        return self._run("molecules.filter_scaffold", **args)

    def select_entries(self, indices: list[int]) -> None:
        """``molecules.select_molecules``: select these entries' cells in the grid."""
        selection = QItemSelection()
        for index in indices:
            if index in self.model.order:
                cell = self.grid_model.index(self.model.order.index(index))
                selection.select(cell, cell)
        self.grid.selectionModel().select(
            selection, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        self._selection_changed("grid")

    def selected_entries(self) -> list[int]:
        """Entry indices of the grid's selection."""
        return sorted(self.model.order[index.row()]
                      for index in self.grid.selectionModel().selectedIndexes())

    def _selection_changed(self, view: str) -> None:
        self._selected_in = view
        if view == "grid":
            self.measure_selection()

    def selected_labels(self) -> list[str]:
        """The molecules selected in the grid or table (the latest), as commands name them."""
        indices, which = self.export_rows()
        return [self.label(i) for i in indices] if "selected" in which and \
            "none selected" not in which else []

    def export_rows(self) -> tuple[list[int], str]:
        """Entry indices to export, in display order: the rows selected in the grid or the
        table (whichever was selected in last), else every row shown; and which it was."""
        view = self.table if self._selected_in == "table" else self.grid
        rows = sorted({index.row() for index in view.selectionModel().selectedIndexes()
                       if index.row() < len(self.model.order)})
        if rows:
            return [self.model.order[row] for row in rows], f"{len(rows)} selected"
        return list(self.model.order), f"all {len(self.model.order)} shown (none selected)"

    @command("Cannot measure the selection")
    def measure_selection(self) -> None:
        """The selection's diversity (two or more molecules), computed off the GUI thread."""
        chosen = self.selected_entries()
        if len(chosen) >= 2:
            self.compute("selection", lambda: self.model.diversity(chosen))
        else:
            self._show_diversity(None)

    def _show_diversity(self, selection: float | None) -> None:
        text = "" if self.set_diversity is None else f"diversity: set {self.set_diversity:.3f}"
        if selection is not None:
            text += f", selection {selection:.3f}"
        self.diversity_label.setText(text)

    def show_property(self, name: str) -> bool:
        return self._run("molecules.show_property", property=name)

    def show_grid_property(self, name: str) -> None:
        """The descriptor under each depiction (and in the box)."""
        self.property_box.setCurrentText(name)
        self.grid_model.shown_property = name
        self.grid_model.refresh()

    def show_histogram_of(self, name: str) -> None:
        """The histogram tab, drawing ``name``."""
        self.histogram_box.setCurrentText(name)
        self.tabs.setCurrentIndex(TAB_HISTOGRAMS)
        self.draw_histogram()

    def select_row(self, row: int) -> bool:
        """Show the entry at display position ``row`` (``molecules.select_molecule``)."""
        if not 0 <= row < len(self.model.order):
            return False
        return self._run("molecules.select_molecule", molecule=self.label(self.model.order[row]))

    def _row_chosen(self, row: int) -> None:
        """The grid's or table's current cell moved: a click runs the command; a move the
        panel made for the entry already shown runs nothing."""
        if 0 <= row < len(self.model.order) and self.model.order[row] != self._current:
            self.commands.trigger("molecules.select_molecule",
                                  molecule=self.label(self.model.order[row]))

    @command("Cannot show the molecule")
    def show_entry(self, index: int) -> None:
        """Show entry ``index`` in the editor, the strip and the 3-D view; the grid's current
        cell follows it."""
        self._current = index
        if index in self.model.order:
            self._make_current(self.model.order.index(index))
        self._show_entry()

    def _show_entry(self) -> None:
        entry = self.model.entries[self._current]
        self.editing_label.setText(f"#{self._current + 1} {entry.name} ({entry.location})")
        self.smiles_edit.blockSignals(True)
        self.smiles_edit.setText(entry.smiles or entry.detail)
        self.smiles_edit.blockSignals(False)
        self._show_validity(entry.smiles)
        self.flag_box.setCurrentIndex(FLAGS.index(entry.flag))
        pixmap = self.cache.get(entry.smiles, 300, 240) if entry.kind == "molecule" else None
        self.preview.setPixmap(pixmap if pixmap is not None else QPixmap())
        self._show_nearest()
        self.highlighted = []
        self.show_3d()
        self._follow_entry(entry)
        tracks = tracks_of(entry.record)
        numbering = self.model.numbering.get(self._current)
        if numbering is not None and len(tracks) == 1:
            tracks[0].labels, tracks[0].regions = numbering.labels, numbering.regions
            tracks[0].scheme = SCHEME_TITLES[numbering.scheme]
        self.sequence_strip.set_tracks(tracks)
        self.residue_label.setText(
            f"{sum(len(t.sequence) for t in tracks)} residues in {len(tracks)} chain(s); click "
            "a residue" if tracks else "no sequence: a small molecule")

    def _follow_entry(self, entry) -> None:
        """An entry that is a trajectory's frame (an XYZ frame, a ``>t=`` record) moves the
        player there."""
        trajectory = self.player.trajectory
        if trajectory is None:
            return
        frame = entry.props.get("frame") if trajectory.kind == "generation" else \
            self._current + 1 if trajectory.kind == "sequence" and \
            len(self.model.entries) == len(trajectory) else None
        if isinstance(frame, (int, float)) and 1 <= frame <= len(trajectory):
            self.player.set_frame(int(frame) - 1)

    def _show_validity(self, text: str) -> None:
        valid = canonical_smiles(text.strip()) is not None
        self.validity_label.setText("valid SMILES" if valid else "not a valid SMILES")
        self.apply_button.setEnabled(valid)

    def _show_nearest(self) -> None:
        if self._current < 0:
            return
        self._ensure_reference()
        nearest = self.model.nearest_reference(self._current)
        self.nearest_label.setText(
            f"nearest reference: {nearest[0]} (Tanimoto {nearest[2]:.2f})" if nearest else "")
        self.nearest_smiles.setText(nearest[1] if nearest else "")
        self.nearest_smiles.setCursorPosition(0)
        self.nearest_smiles.setVisible(bool(nearest))

    @command("Cannot draw the histogram")
    def draw_histogram(self) -> None:
        """Only while the Histograms tab is shown (it computes a descriptor per molecule)."""
        if self.tabs.currentIndex() != TAB_HISTOGRAMS:
            return
        self._ensure_reference()
        self.histogram.set_spec(self.model.histogram_spec(self.histogram_box.currentText()))

    # -- search and edits ----------------------------------------------------------------

    def search(self, smarts: str) -> int:
        """SMARTS search (``molecules.search``): how many hits (0 when refused)."""
        found = self.commands.trigger("molecules.search", smarts=smarts)
        return found or 0

    def apply_edit(self, smiles: str | None = None) -> bool:
        """The editor's SMILES (or ``smiles``) for the molecule in it (``edit_smiles``)."""
        args = self._edit_args(smiles)
        return args is not None and \
            self.commands.trigger("molecules.edit_smiles", **args) is not None

    def standardise(self) -> bool:
        args = self._current_args()
        return args is not None and \
            self.commands.trigger("molecules.standardise_molecule", **args) is True

    def set_flag(self, flag: str) -> bool:
        """Mark the molecule in the editor (``"``: unmarked)."""
        args = self._current_args(flag=flag or "unmarked")
        return args is not None and self._run("molecules.mark_molecule", **args)

    # -- engine --------------------------------------------------------------------------

    def run_kcgm(self, params: dict | None = None) -> None:
        self.run_method(RUN_METHOD, params or {})

    def method_form(self, method: str) -> SchemaForm | None:
        """A parameter form from the method's schema as the engine lists it (``None`` when
        the engine does not list the method)."""
        schema = next((m.get("params_schema") for m in self.host.methods()
                       if m.get("id") == method), None)
        return None if schema is None else SchemaForm(schema)

    @command("Cannot run")
    def choose_run(self, method: str) -> None:
        """Ask for the method's parameters in a dialog, then run it (``run_method``)."""
        form = self.method_form(method)
        if form is None:
            self.status.setText(f"Not started: the engine does not list {method}")
            return
        dialog = QDialog(self)
        dialog.setWindowTitle(f"Run {method}")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok |
                                   QDialogButtonBox.StandardButton.Cancel)
        layout = QVBoxLayout(dialog)
        layout.addWidget(QLabel(RUN_METHODS.get(method, "")))
        layout.addWidget(form)
        layout.addWidget(buttons)
        buttons.rejected.connect(dialog.reject)

        def submit() -> None:
            params = form.submittable()
            if params is not None:
                dialog.accept()
                self.run_method(method, params)

        buttons.accepted.connect(submit)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def run_method(self, method: str, params: dict) -> bool:
        """Submit a job (``molecules.run_method``); kCGM gets the chosen reference set."""
        return self._run("molecules.run_method", method=method, params=params)

    @command("Cannot show the run's samples")
    def _on_result(self, job: str, method: str, outputs: dict) -> None:
        """kCGM's generated set, or another run's folder (``open_run``), opens when nothing is
        open, else after asking (``outputs``): never in place of the set being triaged."""
        made = Path(self.host.run_dir(job))
        if method == RUN_METHOD:
            if not outputs.get("generated_csv"):
                return
            made = made / outputs["generated_csv"]
        self.outputs.offer(made, f"{method} ({job})")

    def open_output(self, path: str | os.PathLike) -> bool:
        """What a run made (``molecules.open_output``): a run folder (Branching Flows samples
        and trajectories) or a generated set (kCGM), whose samples open even when none of
        them is valid."""
        return self._run("molecules.open_output", path=str(path))

    def open_run(self, run_dir: str | os.PathLike) -> bool:
        return self._run("molecules.open_run", path=str(run_dir))

    def load_run(self, run_dir: str | os.PathLike) -> bool:
        """A Branching Flows run: its samples (``samples.xyz`` or ``samples.fasta``) as the set
        and its first trajectory playing; the others are a choice in the player."""
        found = sorted(Path(run_dir).rglob("*"), key=_natural)
        samples = [p for p in found if p.name in ("samples.xyz", "samples.fasta")]
        trajectories = [p for p in found if p.suffix in (".xyz", ".fasta") and
                        p.name.startswith(("trajectory_", "sequence_trajectory_"))]
        if samples:
            self.load_path(samples[0])
        if not samples and not trajectories:
            raise Refusal(f"{run_dir}: no samples or trajectories in this run")
        self.trajectory_sources = {p.name: p for p in trajectories}
        self._run_dir = str(run_dir)
        if trajectories:
            self.play_file(trajectories[0], list(self.trajectory_sources))
            self._trajectory_path = ""  # the run's own: opening the run plays it again
        return True

    # -- export --------------------------------------------------------------------------

    def export_figure(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                      caption: bool = False) -> Path:
        """Ctrl+E: the figure of the tab in front (the histogram, the 3-D view), else the
        grid. Raises with the file's name when it cannot be written."""
        tab = self.tabs.currentIndex()
        if tab == TAB_HISTOGRAMS:
            return self.export_histogram(path, dpi, caption)
        if tab == TAB_3D and self.viewer_3d is not None:
            return self.export_3d(path, dpi)
        return self.export_grid(path, dpi)

    @command("Export failed")
    def ask_figure(self, title: str, name: str, command_id: str, captioned: bool = False
                   ) -> None:
        """The export dialog (file, resolution, caption), then the export command."""
        choice = ask_export(self, title, name, self.info_line() if captioned else "")
        if choice is not None:
            args = {"path": str(choice.path), "dpi": choice.dpi}
            if captioned:
                args["caption"] = choice.caption
            self.commands.trigger(command_id, **args)

    def export_grid(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                    caption: bool = False) -> Path:
        """The grid in display order (the first 60 valid molecules), hits highlighted, drawn
        at ``dpi``; PNG or SVG with its provenance inside."""
        shown = [self.model.entries[i] for i in self.model.order]
        legends = [f"{e.name} {self.grid_model.shown_property} "
                   f"{_format(self.model.value(i, self.grid_model.shown_property))}".strip()
                   for i, e in zip(self.model.order, shown, strict=True)]
        highlights = [self.model.hits[i].atoms if i in self.model.hits else ()
                      for i in self.model.order]
        drawn = [i for i in self.model.order if self.model.entries[i].valid][:EXPORT_LIMIT]
        record = self.figure_record("grid", drawn, dpi=dpi)
        return export_grid(path, [e.smiles for e in shown], legends, highlights, record,
                           dpi / SCREEN_DPI)

    def export_histogram(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                         caption: bool = False) -> Path:
        """The histogram as shown (set vs reference, its legend and axis names) drawn for the
        page at ``dpi``: PNG, SVG or PDF with its provenance inside."""
        self.tabs.setCurrentIndex(TAB_HISTOGRAMS)  # drawn (and laid out) only when shown
        self.draw_histogram()
        QApplication.sendPostedEvents()  # the page's layout, so the plot has its size
        record = self.figure_record("histogram", list(self.model.order),
                                    property=self.histogram_box.currentText(),
                                    reference=str(self.model.reference_path))
        record["sources"] += provenance.record([self.model.reference_path])["sources"]
        return export_widget(self.histogram, ExportChoice(Path(path), dpi, caption), record,
                             self.info_line())

    def export_curve(self, path: str | os.PathLike, dpi: int = DEFAULT_DPI,
                     caption: bool = False) -> Path:
        """The trajectory's curve (RMSD to frame 0, atoms or length per frame) as shown: PNG,
        SVG or PDF with its provenance inside (the trajectory file and the frame)."""
        trajectory = self.player.trajectory
        if trajectory is None:
            raise ValueError(f"{Path(path).name}: no trajectory is playing")
        record = self.figure_record("trajectory curve", [], trajectory=trajectory.name,
                                    frame=self.player.frame + 1)
        files = [p for p in (self._trajectory_path, *(self._md_paths or ())) if p]
        record["sources"] += provenance.record(files)["sources"] if files else []
        line = f"{trajectory.name}; frame {self.player.frame + 1} of {len(trajectory)}"
        return export_widget(self.player.curve, ExportChoice(Path(path), dpi, caption), record,
                             line)

    def info_line(self) -> str:
        """The information line under the histogram: its property, the file and how the
        rows were chosen."""
        state = {**view_summary(self.model, self.grid_model.shown_property),
                 "property": self.histogram_box.currentText()}
        return "; ".join(f"{key} {value}" for key, value in state.items()
                         if value not in (None, "", [])) or "no molecules open"

    def figure_record(self, figure: str, indices: list[int], **view: Any) -> dict:
        """Provenance of an export: the open file and the run that made it, the view that
        chose and ordered the molecules, and which molecules (rows of the file)."""
        return provenance.record(*export_parts(self.state, figure, indices,
                                               self.grid_model.shown_property, **view))

    def export_set(self, path: str | os.PathLike, background: bool = False) -> Path | None:
        """The selected rows (all shown when none are) as SMILES, CSV, SDF, FASTA or PDB
        (``molecules.export_selection``, naming the selected molecules); the file, or ``None``
        when refused or written in the ``background``."""
        args = {"background": True} if background else {}
        names = self.selected_labels()
        if names:
            args["molecules"] = names
        said = self.commands.trigger("molecules.export_selection", path=str(path), **args)
        return Path(path) if isinstance(said, str) and said.startswith("Exported") else None

    def write_set(self, path: str | os.PathLike, indices: list[int], which: str,
                  background: bool) -> str | None:
        """Write the entries with a ``.provenance.json`` sidecar; a format that fits none of
        them is refused with the reason. In the ``background`` (the dialog's way: ETKDG over a
        big selection takes a while) the file is written on the worker and the status line
        reports it."""
        parts = export_parts(self.state, "selection", indices,
                             self.grid_model.shown_property, selection=which)
        if background:
            _import_export_modules()
            self.compute("export", lambda: (path, which,
                                            self._export_outcome(path, indices, parts)))
            said = f"exporting {which} to {Path(path).name}…"
            self.status.setText(said)
            return said
        outcome = self._export_outcome(path, indices, parts)
        if isinstance(outcome, ExportRefused):
            self.status.setText(f"Not exported: {outcome}")
            raise Refusal(str(outcome))
        if isinstance(outcome, Exception):  # disk, RDKit and gemmi errors
            raise Refusal(f"{path}: {outcome}")
        return self._exported(which, outcome)

    def _export_outcome(self, path: str | os.PathLike, indices: list[int], parts: tuple):
        """What was written (with its sidecar), or why not (on the worker)."""
        try:
            written = self.model.export(path, indices)
            provenance.write_sidecar(written.path, provenance.record(*parts))
            return written
        except Exception as exc:  # noqa: BLE001 - reported on the GUI thread
            return exc

    def _exported(self, which: str, written) -> str:
        skipped = f"; {written.skipped} skipped (not held by this format)" \
            if written.skipped else ""
        said = (f"Exported {written.records} record(s) of {which} to "
                f"{written.path.name}{skipped}")
        self.status.setText(said)
        return said

    def _export_failed(self, path: str | os.PathLike, exc: Exception) -> None:
        """A background export that failed (its command has returned: said here)."""
        if isinstance(exc, ExportRefused):
            self.status.setText(f"Not exported: {exc}")
            self.host.show_error("Cannot export this selection", str(exc))
        else:
            self.status.setText(f"Export failed: {exc}")
            self.host.show_error("Export failed", f"{path}: {exc}")

    def choose_grid_path(self) -> None:
        self.ask_figure("Export the grid", "molecules.png", "molecules.export_grid")

    def choose_set_path(self) -> None:
        self._save_dialog("Export selection", SELECTION_FILTER, ".smi",
                          lambda path: self.export_set(path, background=True))

    def _save_dialog(self, title: str, name_filter: str, suffix: str, then) -> None:
        dialog = QFileDialog(self, title)
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setNameFilter(name_filter)
        dialog.setDefaultSuffix(suffix.lstrip("."))
        dialog.filterSelected.connect(  # a name typed without suffix gets the chosen format's
            lambda chosen: dialog.setDefaultSuffix(re.search(r"\*\.(\w+)", chosen).group(1)))
        dialog.fileSelected.connect(then)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    # -- sessions (issue 39): what is open and how it is shown -----------------------------

    def view_state(self) -> dict:
        """The view as JSON: what is open (by path), the molecule in the editor and the
        selection (named as commands name them), sort, scaffold filter and search, the
        shown property and histogram, the tab, 3-D colouring and style, the numbering scheme,
        the trajectory and its frame, the chosen residue, the grid's scroll and the split."""
        model = self.model
        state: dict = {
            "tab": TABS[self.tabs.currentIndex()],
            "property": self.grid_model.shown_property,
            "histogram": self.histogram_box.currentText(),
            "colouring": self.colour_box.currentText(),
            "style": self.style_box.currentText(),
            "scheme": self.scheme_box.currentData(),
            "reference": _absolute(self.state.reference_path) or None,
            "splitter": self.splitter.sizes(),
            "run_box": self.run_box.currentText(),
            "fps": self.player.fps_box.value()}
        opened = self._opened_as()
        if opened:
            state["open"] = opened
        if model.entries:
            sort = model.sort_key
            state.update({
                "current": self.label(self._current) if self._current >= 0 else None,
                "selection": self.selected_labels(),
                "sort": {"column": {"smiles": "SMILES"}.get(sort[0], sort[0]),
                         "descending": sort[1]} if sort else None,
                "scaffold": model.scaffold_filter,
                "search": model.query,
                "scroll": self.grid.verticalScrollBar().value()})
        if self.player.trajectory is not None:
            state["frame"] = self.player.frame + 1
            if self._trajectory_path:
                state["trajectory"] = _absolute(self._trajectory_path)
        if self.viewer_3d is not None and self.scene is not None:
            opts = self.viewer_3d.opts
            centre = opts["center"]
            state["camera"] = {"distance": float(opts["distance"]),
                               "elevation": float(opts["elevation"]),
                               "azimuth": float(opts["azimuth"]),
                               "center": [float(centre.x()), float(centre.y()),
                                          float(centre.z())]}
        chosen = self.sequence_strip.selected
        if chosen is not None and chosen[0] < len(self.sequence_strip.tracks):
            track = self.sequence_strip.tracks[chosen[0]]
            state["residue"] = {"chain": track.label, "residue": track.numbers[chosen[1]]}
        return state

    def _opened_as(self) -> dict:
        """How the shown set was opened, so a session opens it the same way."""
        if self._md_paths:
            return {"md": [_absolute(path) for path in self._md_paths]}
        if self._run_dir:
            return {"run": _absolute(self._run_dir)}
        path = self.model.path
        if not path or not Path(path).exists():
            return {}
        if Path(path).is_dir():
            return {"antibodies": _absolute(path)}
        return {"file": _absolute(path),
                **({"inspect_invalid": True} if self.model.inspecting else {})}

    def restore_view_state(self, state: dict) -> list[str]:
        """Open what ``view_state`` named and show it the same way, through the panel's
        commands; a sentence for each part that could not be restored (a file gone, a
        molecule or column this set lacks)."""
        problems: list[str] = []

        def run(command_id: str, **args: Any) -> bool:
            try:
                with self.commands.nested():  # restoring a session is not the user's command
                    self.commands.run(command_id, **args)
            except CommandError as exc:
                problems.append(str(exc))
                return False
            return True

        opened = state.get("open") or {}
        if opened.get("md"):
            run("molecules.open_md", topology=str(opened["md"][0]),
                trajectory=str(opened["md"][1]))
        elif opened.get("run"):
            run("molecules.open_run", path=str(opened["run"]))
        elif opened.get("antibodies"):
            run("molecules.open_antibodies", directory=str(opened["antibodies"]))
        elif opened.get("file"):
            args = {"inspect_invalid": True} if opened.get("inspect_invalid") else {}
            run("molecules.open", path=str(opened["file"]), **args)
        if state.get("reference"):
            run("molecules.open_reference", path=str(state["reference"]))
        for key, command_id, argument in (("property", "molecules.show_property", "property"),
                                          ("colouring", "molecules.colour_3d", "colouring"),
                                          ("style", "molecules.style_3d", "style")):
            if state.get(key):
                run(command_id, **{argument: state[key]})
        if state.get("histogram") in DESCRIPTOR_NAMES:
            self.histogram_box.setCurrentText(state["histogram"])
        if state.get("scheme") and state["scheme"] != self.scheme_box.currentData():
            if self.model.numbering_targets():
                run("molecules.number_chains", scheme=str(state["scheme"]))
            else:
                self.scheme_box.setCurrentIndex(max(0, self.scheme_box.findData(
                    state["scheme"])))
        if self.model.entries:
            self._restore_rows(state, run)
        if state.get("trajectory"):
            run("molecules.open_trajectory", path=str(state["trajectory"]))
        if state.get("frame") and self.player.trajectory is not None:
            run("molecules.show_frame", frame=int(state["frame"]))
        if state.get("tab"):
            run("molecules.show_tab", tab=str(state["tab"]))
        residue = state.get("residue")
        if isinstance(residue, dict) and self.sequence_strip.tracks:
            run("molecules.select_residue", chain=str(residue.get("chain")),
                residue=residue.get("residue"))
        if isinstance(state.get("fps"), int) and state["fps"] != self.player.fps_box.value():
            run("molecules.set_speed", fps=state["fps"])
        if state.get("run_box") in RUN_METHODS:
            self.run_box.setCurrentText(state["run_box"])
        sizes = state.get("splitter")
        if isinstance(sizes, list) and len(sizes) == 2 and all(isinstance(v, int)
                                                               for v in sizes):
            self.splitter.setSizes(sizes)
        if isinstance(state.get("scroll"), int):
            self._restore_scroll(state["scroll"])
        camera = state.get("camera")
        if camera is not None and not _is_camera(camera):
            problems.append(f"molecules: the 3-D camera {camera!r} is not distance, elevation, "
                            "azimuth and center")
        elif camera is not None:
            self._pending_camera = camera
            if self.viewer_3d is not None and self.scene is not None:
                self._apply_camera()
        return problems

    def _apply_camera(self) -> None:
        """A session's 3-D camera, once its scene is drawn (drawing frames the scene)."""
        camera, self._pending_camera = self._pending_camera, None
        if camera is None or self.viewer_3d is None:
            return
        try:
            self.viewer_3d.setCameraPosition(
                pos=QVector3D(*map(float, camera["center"])),
                distance=float(camera["distance"]), elevation=float(camera["elevation"]),
                azimuth=float(camera["azimuth"]))
        except (KeyError, TypeError, ValueError):  # checked in restore: not reached
            self.status.setText(f"the saved 3-D camera {camera!r} is not a camera")

    def _restore_rows(self, state: dict, run: Callable[..., bool]) -> None:
        """Filter, sort, search, the molecule in the editor and the selection."""
        if state.get("scaffold") is not None:
            run("molecules.filter_scaffold", scaffold=str(state["scaffold"]))
        sort = state.get("sort")
        if isinstance(sort, dict) and sort.get("column"):
            run("molecules.sort_by", column=str(sort["column"]),
                descending=bool(sort.get("descending")))
        if state.get("search"):
            run("molecules.search", smarts=str(state["search"]))
        if state.get("current"):
            run("molecules.select_molecule", molecule=str(state["current"]))
        if state.get("selection"):
            run("molecules.select_molecules", molecules=[str(n) for n in state["selection"]])

    def _restore_scroll(self, value: int) -> None:
        """The grid's scroll, now and once its batched layout has caught up."""
        bar = self.grid.verticalScrollBar()
        bar.setValue(value)
        QTimer.singleShot(0, lambda: bar.setValue(value))

    # -- drag and drop -------------------------------------------------------------------

    @command("Cannot open the dropped files")
    def open_dropped(self, paths: list[str]) -> None:
        """One set at a time: the first file dropped; a topology and a trajectory dropped
        together open as an MD run."""
        trajectories = [p for p in paths if extension_of(Path(p)) in TRAJECTORY_EXTENSIONS]
        topologies = [p for p in paths if extension_of(Path(p)) in TOPOLOGY_EXTENSIONS]
        if trajectories and topologies:
            self.open_md(topologies[0], trajectories[0])
        elif paths:
            self.open_file(paths[0])

    def closeEvent(self, event) -> None:  # noqa: N802
        self._idle_timer.stop()
        self._idle.set()  # a paused loop finishes now
        for pool in (self.pool, self.numbering_pool):
            pool.clear()
            pool.waitForDone()
        self.grid_model.stop()
        self.jobs.close()
        self.commands.unbind(SCOPE, self.state)
        self._stop_listening()
        super().closeEvent(event)


def _absolute(path: str) -> str:
    """A path as a session names documents: absolute ("" stays "")."""
    return str(Path(path).absolute()) if path else ""


def _is_camera(camera: Any) -> bool:
    """A saved 3-D camera: three numbers and a centre of three."""
    try:
        numbers = [float(camera[key]) for key in ("distance", "elevation", "azimuth")]
        centre = [float(value) for value in camera["center"]]
    except (KeyError, TypeError, ValueError):
        return False
    return len(numbers) == 3 and len(centre) == 3
