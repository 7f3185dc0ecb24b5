"""The runs table: a Qt item model over the ``JobBook``, repainted a few times a second.

Engine events can arrive ~60 times a second per job; the model only marks rows dirty and a
timer repaints them (and the elapsed time of running jobs) at ``REFRESH_HZ``, so a chatty job
costs the main thread a handful of repaints, not one per event.
"""

from __future__ import annotations

import time

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QRectF,
    Qt,
    QTimer,
)
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate

from studio.jobs import ADDED, REMOVED, JobBook, JobRecord
from studio.theme import STATE_COLOURS

REFRESH_HZ = 5
COLUMNS = ("Run", "Method", "State", "Progress", "Elapsed", "Notes")
COL_RUN, COL_METHOD, COL_STATE, COL_PROGRESS, COL_ELAPSED, COL_NOTES = range(len(COLUMNS))
RECORD_ROLE = Qt.ItemDataRole.UserRole + 1
FRACTION_ROLE = Qt.ItemDataRole.UserRole + 2

Index = QModelIndex | QPersistentModelIndex


def format_elapsed(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}:{seconds:02d}"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


class RunsTableModel(QAbstractTableModel):
    def __init__(self, jobs: JobBook, parent=None) -> None:
        super().__init__(parent)
        self.jobs = jobs
        self._ids: list[str] = [record.id for record in jobs.records()]
        self._rows: dict[str, int] = {job_id: i for i, job_id in enumerate(self._ids)}
        self._dirty: set[str] = set()
        self._unlisten = jobs.listen(self._on_change)
        self._timer = QTimer(self)
        self._timer.setInterval(1000 // REFRESH_HZ)
        self._timer.timeout.connect(self._refresh)
        self._timer.start()

    def detach(self) -> None:
        self._timer.stop()
        self._unlisten()

    # -- Qt model ------------------------------------------------------------------------------
    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(self._ids)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= len(self._ids):
            return None
        record = self.jobs.get(self._ids[index.row()])
        if record is None:
            return None
        column = index.column()
        if role == RECORD_ROLE:
            return record
        if role == FRACTION_ROLE:
            return record.fraction if record.live else None
        if role == Qt.ItemDataRole.DisplayRole:
            return _display(record, column)
        if role == Qt.ItemDataRole.ToolTipRole:
            if column == COL_STATE and record.reason:
                return f"{record.state}: {record.reason}"
            if column == COL_RUN:
                return record.run_dir or record.id
            if column == COL_NOTES:
                return record.notes or None
        if role == Qt.ItemDataRole.ForegroundRole and column == COL_STATE:
            return QColor(STATE_COLOURS.get(record.state, "#8b949e"))
        if role == Qt.ItemDataRole.TextAlignmentRole and column == COL_ELAPSED:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    # -- lookups -------------------------------------------------------------------------------
    def record_at(self, row: int) -> JobRecord | None:
        return self.jobs.get(self._ids[row]) if 0 <= row < len(self._ids) else None

    def row_of(self, job_id: str) -> int:
        return self._rows.get(job_id, -1)

    # -- updates -------------------------------------------------------------------------------
    def _on_change(self, record: JobRecord, what: str) -> None:
        if what == ADDED and record.id not in self._rows:
            position = self._insert_position(record)
            self.beginInsertRows(QModelIndex(), position, position)
            self._ids.insert(position, record.id)
            self._reindex()
            self.endInsertRows()
        elif what == REMOVED and record.id in self._rows:
            row = self._rows[record.id]
            self.beginRemoveRows(QModelIndex(), row, row)
            del self._ids[row]
            self._reindex()
            self.endRemoveRows()
            self._dirty.discard(record.id)
        else:
            self._dirty.add(record.id)

    def _insert_position(self, record: JobRecord) -> int:
        """Newest first: live jobs go on top, history is appended in its own order."""
        key = (record.created, record.id)
        for i, job_id in enumerate(self._ids):
            other = self.jobs.get(job_id)
            if other is not None and (other.created, other.id) < key:
                return i
        return len(self._ids)

    def _reindex(self) -> None:
        self._rows = {job_id: i for i, job_id in enumerate(self._ids)}

    def _refresh(self) -> None:
        rows = {self._rows[job_id] for job_id in self._dirty if job_id in self._rows}
        self._dirty.clear()
        running = [self._rows[r.id] for r in self.jobs.active() if r.id in self._rows]
        for row in rows:
            self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))
        for row in running:
            if row not in rows:
                self.dataChanged.emit(self.index(row, COL_ELAPSED), self.index(row, COL_ELAPSED))


def _display(record: JobRecord, column: int):
    if column == COL_RUN:
        return record.id
    if column == COL_METHOD:
        return record.method or "…"
    if column == COL_STATE:
        return record.state
    if column == COL_PROGRESS:
        if not record.live:
            return ""
        if record.total:
            return f"{record.step}/{record.total}"
        return "" if record.step == 0 else str(record.step)
    if column == COL_ELAPSED:
        return format_elapsed(record.elapsed(time.time()))
    if column == COL_NOTES:
        return record.notes.splitlines()[0] if record.notes else ""
    return None


class ProgressDelegate(QStyledItemDelegate):
    """The progress column: a slim bar in the job's state colour, ``step/total`` beside it."""

    def paint(self, painter, option, index) -> None:
        fraction = index.data(FRACTION_ROLE)
        if fraction is None:
            super().paint(painter, option, index)
            return
        widget = option.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewItem, option, painter, widget)
        record = index.data(RECORD_ROLE)
        colour = QColor(STATE_COLOURS.get(record.state if record else "", "#3d8bfd"))
        rect = option.rect.adjusted(4, 0, -4, 0)
        text = index.data(Qt.ItemDataRole.DisplayRole) or ""
        text_width = option.fontMetrics.horizontalAdvance("0000/0000")
        bar = QRectF(rect.left(), rect.center().y() - 3, max(10, rect.width() - text_width - 8), 6)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setPen(Qt.PenStyle.NoPen)
        track = QColor(option.palette.color(QPalette.ColorRole.Mid))
        painter.setBrush(track)
        painter.drawRoundedRect(bar, 3, 3)
        if fraction > 0:
            filled = QRectF(bar)
            filled.setWidth(max(6.0, bar.width() * fraction))
            painter.setBrush(colour)
            painter.drawRoundedRect(filled, 3, 3)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        painter.setPen(option.palette.color(QPalette.ColorRole.HighlightedText if selected
                                            else QPalette.ColorRole.Text))
        text_rect = QRectF(bar.right() + 6, rect.top(), rect.right() - bar.right() - 6,
                           rect.height())
        painter.drawText(text_rect, int(Qt.AlignmentFlag.AlignVCenter
                                        | Qt.AlignmentFlag.AlignRight), text)
        painter.restore()
