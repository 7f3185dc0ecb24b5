"""Viewers for what runs produce and files hold: arrays, tables, JSON.

``ArrayView`` shows shape and dtype, then a line for 1-D data and an image for 2-D (for more
dimensions, spin boxes pick the leading indices of the 2-D slice shown). ``TableView`` shows a
``{columns, rows}`` table or a pyarrow table without copying it into Python lists.
``JsonView`` is a tree; a ``token_heat`` JSON artifact is shaded text (``token_text``).
``view_for_artifact`` and ``view_for_file`` choose the viewer.
Nothing here uses pyqtgraph's ``ImageView`` (see "Pitfalls" in ARCHITECTURE.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSpinBox,
    QSplitter,
    QTableView,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.widgets.plot_view import PlotSpecView

STATS_SAMPLE = 2_000_000  # statistics of bigger arrays come from a strided sample
JSON_TREE_MAX_CHILDREN = 1000


FIGURE_PREVIEW = 640  # px: the longest side of a figure's picture in the lab


def describe_array(array: np.ndarray) -> str:
    """``shape 200 × 10 · float32 · min -1.2 · max 3.4 · mean 0.01`` (NaNs counted)."""
    shape = " × ".join(str(n) for n in array.shape) or "scalar"
    parts = [f"shape {shape}", str(array.dtype)]
    if array.size and np.issubdtype(array.dtype, np.number) and not np.iscomplexobj(array):
        flat = array.reshape(-1)
        if flat.size > STATS_SAMPLE:
            flat = flat[:: flat.size // STATS_SAMPLE + 1]
            parts.append("sampled")
        values = np.asarray(flat, dtype=float)
        finite = values[np.isfinite(values)]
        if finite.size:
            parts += [f"min {finite.min():.4g}", f"max {finite.max():.4g}",
                      f"mean {finite.mean():.4g}"]
        if finite.size < values.size:
            parts.append(f"{values.size - finite.size} non-finite")
    return " · ".join(parts)


def _displayable(array: np.ndarray) -> np.ndarray:
    if np.iscomplexobj(array):
        return np.abs(array)
    if array.dtype == bool:
        return array.astype(np.uint8)
    return array


class ArrayView(QWidget):
    """One array: its description, then a curve (1-D) or an image (2-D and up)."""

    def __init__(self, array: np.ndarray | None = None, title: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.array: np.ndarray | None = None
        self._title = title
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.summary = QLabel()
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)
        self._index_row = QHBoxLayout()
        self._index_row.addStretch(1)
        layout.addLayout(self._index_row)
        self._index_boxes: list[QSpinBox] = []
        self.line = PlotSpecView()
        self.image = pg.PlotWidget(background=self.palette().color(self.backgroundRole()))
        self.image.setAspectLocked(False)
        self._image_item = pg.ImageItem(axisOrder="row-major")
        self._image_item.setAutoDownsample(True)
        self.image.addItem(self._image_item)
        self.image.invertY(True)
        self._colour_bar = pg.ColorBarItem(colorMap=pg.colormap.get("viridis"),
                                           interactive=False, width=12)
        self._colour_bar.setImageItem(self._image_item, insert_in=self.image.getPlotItem())
        self.scalar = QLabel()
        self.scalar.setAlignment(Qt.AlignmentFlag.AlignCenter)
        for widget in (self.line, self.image, self.scalar):
            layout.addWidget(widget, 1)
            widget.hide()
        if array is not None:
            self.set_array(array, title)

    def set_array(self, array: np.ndarray, title: str = "") -> None:
        self.array = array
        self._title = title
        self.summary.setText((f"<b>{title}</b> · " if title else "") + describe_array(array))
        for box in self._index_boxes:
            box.deleteLater()
        self._index_boxes = []
        for widget in (self.line, self.image, self.scalar):
            widget.hide()
        if array.ndim == 0 or not np.issubdtype(_displayable(array).dtype, np.number):
            self.scalar.setText(str(array if array.ndim else array[()]))
            self.scalar.show()
            return
        if array.ndim == 1:
            self.line.set_spec({"title": title, "xlabel": "index", "series": [
                {"name": title or "values", "x": np.arange(array.size),
                 "y": np.asarray(_displayable(array), dtype=float)}]})
            self.line.show()
            return
        for axis in range(array.ndim - 2):
            box = QSpinBox()
            box.setRange(0, array.shape[axis] - 1)
            box.setPrefix(f"axis {axis}: ")
            box.valueChanged.connect(self._show_slice)
            self._index_row.insertWidget(axis, box)
            self._index_boxes.append(box)
        self.image.show()
        self._show_slice()

    def current_slice(self) -> np.ndarray:
        """The 2-D plane shown (the last two axes at the chosen leading indices)."""
        assert self.array is not None
        index = tuple(box.value() for box in self._index_boxes)
        return np.asarray(_displayable(self.array[index]), dtype=float)

    def _show_slice(self) -> None:
        plane = self.current_slice()
        finite = plane[np.isfinite(plane)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        if high <= low:
            high = low + 1.0
        self._image_item.setImage(plane, autoLevels=False)
        self._colour_bar.setLevels((low, high))
        self.image.getPlotItem().setTitle(self._title)
        self.image.autoRange()


class _TableModel(QAbstractTableModel):
    """Rows as lists, as dicts, or a pyarrow table (cells converted only when shown)."""

    def __init__(self, columns: list[str], rows: Any, row_count: int) -> None:
        super().__init__()
        self.columns = columns
        self.rows = rows
        self.row_count = row_count

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else self.row_count

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.columns)

    def cell(self, row: int, column: int) -> Any:
        if hasattr(self.rows, "column_names"):  # pyarrow.Table
            return self.rows.column(column)[row].as_py()
        record = self.rows[row]
        if isinstance(record, dict):
            return record.get(self.columns[column])
        return record[column] if column < len(record) else None

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            value = self.cell(index.row(), index.column())
            if value is None:
                return ""
            if isinstance(value, float):
                return f"{value:.6g}"
            return str(value) if not isinstance(value, (dict, list)) else json.dumps(value)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            value = self.cell(index.row(), index.column())
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if orientation == Qt.Orientation.Horizontal:
            return self.columns[section] if section < len(self.columns) else None
        return str(section)


class TableView(QWidget):
    """A table artifact ``{columns, rows}`` or a pyarrow table from a file."""

    def __init__(self, table: Any = None, title: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.summary = QLabel()
        layout.addWidget(self.summary)
        self.view = QTableView()
        self.view.setAlternatingRowColors(True)
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.view.verticalHeader().setDefaultSectionSize(22)
        layout.addWidget(self.view, 1)
        self.model: _TableModel | None = None
        if table is not None:
            self.set_table(table, title)

    def set_table(self, table: Any, title: str = "") -> None:
        if hasattr(table, "column_names"):
            columns, rows, count = list(table.column_names), table, table.num_rows
        else:
            rows = list(table.get("rows", []))
            columns = [str(c) for c in table.get("columns", [])]
            if not columns and rows and isinstance(rows[0], dict):
                columns = list(rows[0])
            count = len(rows)
        self.model = _TableModel(columns, rows, count)
        self.view.setModel(self.model)
        self.summary.setText((f"<b>{title}</b> · " if title else "")
                             + f"{count} rows · {len(columns)} columns")
        self.view.resizeColumnsToContents()


class FigureView(QSplitter):
    """An exported figure: the picture (PNG, SVG) and where it came from (its provenance:
    sources, view, runs, versions), so a figure found in a paper's folder explains itself."""

    def __init__(self, path: str | os.PathLike, parent: QWidget | None = None) -> None:
        from PySide6.QtGui import QPixmap

        from engine import provenance

        super().__init__(Qt.Orientation.Vertical, parent)
        self.path = Path(path)
        self.picture = QLabel()
        self.picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        is_pdf = self.path.suffix.lower() == ".pdf"
        pixmap = QPixmap() if is_pdf else QPixmap(str(self.path))
        if pixmap.isNull() and not is_pdf:
            raise ValueError(f"{self.path}: the picture cannot be decoded")
        if is_pdf:
            self.picture.setText(f"{self.path.name}: open it in a PDF viewer to see the "
                                 "pages; where it came from is below.")
        else:
            self.picture.setPixmap(pixmap.scaled(
                FIGURE_PREVIEW, FIGURE_PREVIEW, Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.SmoothTransformation))
        self.provenance = provenance.read(self.path)
        self.details = JsonView(self.provenance if self.provenance is not None else
                                {"provenance": "none: not exported by Studio"})
        self.addWidget(self.picture)
        self.addWidget(self.details)


class JsonView(QTreeWidget):
    """Any JSON value as a tree: keys (or indices) and values."""

    def __init__(self, data: Any = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setHeaderLabels(["key", "value"])
        self.setAlternatingRowColors(True)
        if data is not None:
            self.set_data(data)

    def set_data(self, data: Any) -> None:
        self.clear()
        self._add(self.invisibleRootItem(), data)
        self.expandToDepth(1)
        self.resizeColumnToContents(0)

    def _add(self, parent: QTreeWidgetItem, value: Any) -> None:
        if isinstance(value, dict):
            entries = list(value.items())
        elif isinstance(value, list):
            entries = list(enumerate(value))
        else:
            parent.addChild(QTreeWidgetItem(["", _short(value)]))
            return
        for key, child in entries[:JSON_TREE_MAX_CHILDREN]:
            nested = isinstance(child, (dict, list))
            summary = (f"{len(child)} items" if nested else _short(child))
            item = QTreeWidgetItem([str(key), summary])
            parent.addChild(item)
            if nested:
                self._add(item, child)
        if len(entries) > JSON_TREE_MAX_CHILDREN:
            parent.addChild(QTreeWidgetItem(
                ["…", f"{len(entries) - JSON_TREE_MAX_CHILDREN} more not shown"]))


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 200 else text[:199] + "…"


class ArrayCollectionView(QWidget):
    """Named arrays (``.npz``, safetensors): pick one, see it in an ``ArrayView``."""

    def __init__(self, arrays: dict[str, np.ndarray], title: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.arrays = arrays
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.chooser = QComboBox()
        for name, array in arrays.items():
            self.chooser.addItem(f"{name}  ({' × '.join(map(str, array.shape))} "
                                 f"{array.dtype})", name)
        layout.addWidget(self.chooser)
        self.view = ArrayView()
        layout.addWidget(self.view, 1)
        self.chooser.currentIndexChanged.connect(self._show)
        if arrays:
            self._show()

    def _show(self) -> None:
        name = self.chooser.currentData()
        self.view.set_array(self.arrays[name], name)


def view_for_artifact(kind: str, path: str | os.PathLike, name: str = "") -> QWidget:
    """The viewer for one run artifact (``kind`` from ``job_artifact``), loaded from disk.

    Raises ``FormatError`` (from ``engine.io``) or ``ValueError`` naming the file.
    """
    path = Path(path)
    if kind == "array" or path.suffix == ".npy":
        from engine.io.arrays import read_npy

        return ArrayView(read_npy(path), name or path.stem)
    if kind == "plot":
        return PlotSpecView(_read_json(path))
    if kind == "file":
        return view_for_file(path)
    data = _read_json(path)
    if isinstance(data, dict) and data.get("view") == "token_heat":
        from panels.widgets.token_text import TokenHeatView

        return TokenHeatView(data)
    if kind == "table" or (isinstance(data, dict) and "columns" in data and "rows" in data):
        return TableView(data, name or path.stem)
    return JsonView(data)


def view_for_file(path: str | os.PathLike) -> QWidget:
    """The viewer for a data file opened or dropped on a panel (format found by content)."""
    from engine.io import detect

    path = Path(path)
    fmt = detect(path).name
    if fmt == "npy":
        from engine.io.arrays import read_npy

        return ArrayView(read_npy(path), path.name)
    if fmt == "npz":
        from engine.io.arrays import read_npz

        return ArrayCollectionView(read_npz(path), path.name)
    if fmt == "safetensors":
        from engine.io.arrays import read_safetensors

        return ArrayCollectionView(read_safetensors(path), path.name)
    if fmt in ("csv", "parquet", "jsonl"):
        from engine.io.tables import read_table

        return TableView(read_table(path), path.name)
    if fmt in ("png", "svg", "pdf"):
        return FigureView(path)
    raise ValueError(f"{path}: the lab has no viewer for {fmt} files")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON artifact ({exc})") from None
