"""The route canvas's markers browser: our checks' markers and imported reports' listed by
category, nets and layer with counts; a row clicked, Next/Previous (F4 / Shift+F4) zoom the
canvas to it and highlight it; waive/unwaive (an undoable edit kept with the design); import a
``.lyrdb`` or DRC report (mismatches with the design listed below, never drawn); export as CSV
or ``.lyrdb``. Every control runs a ``routing.*`` command.

The list is a ``QAbstractTableModel`` over the markers (10,000 rows list in milliseconds).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine.vlsi.markers import Marker
from studio.command_widgets import command_action, connect, connect_button, mark_argument

COLUMNS = ("category", "nets", "layer", "x (µm)", "y (µm)", "waived", "note")
ALL = "all categories"
Index = QModelIndex | QPersistentModelIndex


class MarkerTable(QAbstractTableModel):
    """The markers shown, one row each; waived rows greyed, undrawable ones in red."""

    def __init__(self) -> None:
        super().__init__()
        self.markers: list[Marker] = []
        self.waived: set[str] = set()
        self._rows: dict[str, int] | None = None   # row by marker name, built when asked

    def set_markers(self, markers: list[Marker], waived: set[str]) -> None:
        self.beginResetModel()
        self.markers, self.waived = markers, set(waived)
        self._rows = None
        self.endResetModel()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self.markers)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        marker = self.markers[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            x, y = marker.centre
            return (marker.category, " ".join(marker.nets), marker.layer, f"{x:.3f}",
                    f"{y:.3f}", "yes" if marker.name in self.waived else "",
                    marker.problem and f"not drawn: {marker.problem}" or marker.text
                    )[index.column()]
        if role == Qt.ItemDataRole.ForegroundRole:
            if marker.problem:
                return QColor("#ff6b6b")
            if marker.name in self.waived:
                return QColor("#888888")
        if role == Qt.ItemDataRole.ToolTipRole:
            return marker.name
        return None

    def row_of(self, name: str | None) -> int:
        if self._rows is None:
            self._rows = {m.name: row for row, m in enumerate(self.markers)}
        return self._rows.get(name, -1) if name is not None else -1


class MarkersTab(QWidget):
    """The browser's widgets; ``panel`` is the ``RoutingPanel`` (its state and commands)."""

    def __init__(self, panel: Any) -> None:
        super().__init__()
        self.panel = panel
        registry = panel.commands
        column = QVBoxLayout(self)
        bar = QHBoxLayout()
        self.check_button = QPushButton("Check")
        self.check_button.setToolTip("Run our checks: opens, shorts, unrouted multi-pin nets, "
                                     "off-track wires, LEF width and spacing, GCell overflow.")
        connect_button(self.check_button, registry, "routing.check_markers")
        self.previous_button = QPushButton("◀ Previous")
        connect_button(self.previous_button, registry, "routing.step_marker",
                       lambda: {"step": -1})
        self.next_button = QPushButton("Next ▶")
        connect_button(self.next_button, registry, "routing.step_marker", lambda: {"step": 1})
        self.waive_button = QPushButton("Waive")
        connect_button(self.waive_button, registry, "routing.waive_marker", self._waive_args)
        for button in (self.check_button, self.previous_button, self.next_button,
                       self.waive_button):
            bar.addWidget(button)
        column.addLayout(bar)
        files = QHBoxLayout()
        self.import_button = QPushButton("Import report…")
        mark_argument(self.import_button, "routing.import_markers")
        self.import_button.clicked.connect(panel.choose_marker_report)
        self.export_button = QPushButton("Export list…")
        mark_argument(self.export_button, "routing.export_markers")
        self.export_button.clicked.connect(panel.choose_marker_export)
        self.category_box = QComboBox()
        self.category_box.addItem(ALL)
        connect(self.category_box.textActivated, self.category_box, registry,
                "routing.marker_category",
                lambda text: {"category": "" if text == ALL else text})
        for widget in (self.import_button, self.export_button, self.category_box):
            files.addWidget(widget)
        column.addLayout(files)
        self.counts = QLabel("No markers yet: they come with the checks after a design opens.")
        self.counts.setWordWrap(True)
        self.counts.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.counts)
        self.table = MarkerTable()
        self.view = QTableView()
        self.view.setModel(self.table)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.verticalHeader().setVisible(False)
        self.view.verticalHeader().setDefaultSectionSize(20)
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.view.horizontalHeader().setStretchLastSection(True)
        for number, width in enumerate((92, 96, 58, 62, 62, 50)):
            self.view.setColumnWidth(number, width)
        connect(self.view.clicked, self.view, registry, "routing.show_marker",
                lambda index: {"marker": self.table.markers[index.row()].name})
        column.addWidget(self.view, 1)
        self.mismatches = QLabel("")
        self.mismatches.setWordWrap(True)
        self.mismatches.setStyleSheet("color: #ff6b6b;")
        self.mismatches.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.mismatches)
        self.keys = []
        for text, step, key in (("Next marker", 1, "F4"), ("Previous marker", -1, "Shift+F4")):
            action = command_action(panel, registry, "routing.step_marker", text,
                                    lambda s=step: {"step": s})
            action.setShortcut(key)
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            panel.addAction(action)
            self.keys.append(action)

    def _waive_args(self) -> dict | None:
        """The selected (else the current) marker, waived or unwaived by its state."""
        state = self.panel.state
        rows = self.view.selectionModel().selectedRows()
        name = self.table.markers[rows[0].row()].name if rows else state.current
        if name is None:
            self.panel.status.setText("Choose a marker first (click it or press F4).")
            return None
        return {"marker": name, "waived": name not in self.panel.model.waived}

    def refresh(self) -> None:
        """The list, counts, categories and mismatches from the panel's state."""
        state, waived = self.panel.state, self.panel.model.waived
        every = state.markers()
        shown = [m for m in every if not state.category or m.category == state.category]
        self.table.set_markers(shown, waived)
        categories = sorted({m.category for m in every})
        self.category_box.blockSignals(True)
        self.category_box.clear()
        self.category_box.addItems([ALL, *categories])
        self.category_box.setCurrentText(state.category or ALL)
        self.category_box.blockSignals(False)
        self.counts.setText(describe_counts(every, waived))
        lines = [f"{r.path.rsplit('/', 1)[-1]}: {m}" for r in state.reports
                 for m in r.mismatches]
        self.mismatches.setText("Mismatches (not drawn):<br>" + "<br>".join(lines[:12])
                                + (f"<br>… {len(lines) - 12} more" if len(lines) > 12 else "")
                                if lines else "")
        self.select(state.current)

    def select(self, name: str | None) -> None:
        row = self.table.row_of(name)
        if row < 0:
            self.view.clearSelection()
            return
        self.view.selectRow(row)
        self.view.scrollTo(self.table.index(row, 0))
        waived = name in self.panel.model.waived
        self.waive_button.setText("Unwaive" if waived else "Waive")


def describe_counts(markers: list[Marker], waived: set[str]) -> str:
    """'N markers (W waived): by category …; by layer …; nets with most …'."""
    if not markers:
        return "No markers."
    categories = Counter(m.category for m in markers)
    layers = Counter(m.layer or "-" for m in markers)
    nets = Counter(n for m in markers for n in m.nets)
    done = sum(1 for m in markers if m.name in waived)
    text = f"<b>{len(markers)} marker(s)</b>" + (f" ({done} waived)" if done else "") + ": "
    text += ", ".join(f"{name} {count}" for name, count in sorted(categories.items()))
    text += "<br>by layer: " + ", ".join(f"{n} {c}" for n, c in layers.most_common(6))
    if nets:
        text += "<br>nets with most: " + ", ".join(f"{n} {c}" for n, c in nets.most_common(5))
    return text
