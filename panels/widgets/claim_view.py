"""The verdict of a reproduction (a Claim, ``engine/api.py``): our numbers, the targets, the
paper's numbers, PASS or FAIL per criterion and overall.

A smoke run computes the numbers on tiny sizes; its verdict is shown but marked as not
required, so nobody mistakes a CI check for a reproduction.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

PASS_COLOUR = QColor("#1e8449")
FAIL_COLOUR = QColor("#c0392b")
OP_SYMBOLS = {">=": "≥", ">": ">", "<=": "≤", "<": "<", "==": "="}
COLUMNS = ("criterion", "measured", "target", "verdict", "paper")
PAPER_COLUMN_PX = 220


def format_value(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            return "NaN"
        return f"{value:.4g}"
    return str(value)


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s"


class ClaimView(QWidget):
    """``set_claim(claim)`` shows a Claim dict; ``verdict()`` reads back PASS or FAIL."""

    def __init__(self, claim: dict | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.verdict_label = QLabel()
        font = QFont(self.verdict_label.font())
        font.setPointSizeF(font.pointSizeF() * 1.5)
        font.setBold(True)
        self.verdict_label.setFont(font)
        self.statement = QLabel()
        self.statement.setWordWrap(True)
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.smoke_note = QLabel()
        self.smoke_note.setWordWrap(True)
        self.smoke_note.setStyleSheet("color: #b9770e;")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in (1, 2, 3):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(4, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(4, PAPER_COLUMN_PX)
        header.sectionResized.connect(lambda *_args: self.table.resizeRowsToContents())
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.currentCellChanged.connect(self._show_note)
        self.criterion_note = QLabel()
        self.criterion_note.setWordWrap(True)
        self.criterion_note.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notes = QLabel()
        self.notes.setWordWrap(True)
        for widget in (self.verdict_label, self.statement, self.smoke_note, self.details):
            layout.addWidget(widget)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.criterion_note)
        layout.addWidget(self.notes)
        self.claim: dict | None = None
        self.clear()
        if claim is not None:
            self.set_claim(claim)

    def clear(self) -> None:
        self.claim = None
        self.verdict_label.setText("No claim checked yet")
        self.verdict_label.setStyleSheet("")
        for label in (self.statement, self.details, self.smoke_note, self.notes,
                      self.criterion_note):
            label.clear()
            label.setVisible(False)
        self.table.setRowCount(0)

    def set_claim(self, claim: dict) -> None:
        self.claim = claim
        criteria = claim.get("criteria", [])
        passed = bool(claim.get("passed", all(c.get("passed") for c in criteria)))
        paper = claim.get("paper", "")
        verdict = "PASS" if passed else "FAIL"
        self.verdict_label.setText(f"{verdict}  {paper}".strip())
        colour = PASS_COLOUR if passed else FAIL_COLOUR
        self.verdict_label.setStyleSheet(f"color: {colour.name()};")
        self._show(self.statement, claim.get("statement", ""))
        seeds = ", ".join(str(s) for s in claim.get("seeds", [])) or "—"
        held = sum(1 for c in criteria if c.get("passed"))
        self._show(self.details, f"{held} of {len(criteria)} criteria hold · seeds {seeds} · "
                                 f"wall time {format_seconds(claim.get('wall_s'))}")
        self._show(self.smoke_note, "Smoke run: tiny sizes for CI. The numbers are computed, "
                                    "but the verdict is not required to hold; run without "
                                    "smoke for the reproduction." if claim.get("smoke") else "")
        self._show(self.notes, f"Notes: {claim['notes']}" if claim.get("notes") else "")
        self.table.setRowCount(len(criteria))
        for row, criterion in enumerate(criteria):
            self._fill_row(row, criterion)
        self.table.resizeRowsToContents()
        if criteria:
            self.table.setCurrentCell(0, 0)

    def _fill_row(self, row: int, criterion: dict) -> None:
        ok = bool(criterion.get("passed"))
        op = OP_SYMBOLS.get(criterion.get("op", ""), criterion.get("op", ""))
        note = str(criterion.get("note", "") or "")
        cells = (criterion.get("name", ""), format_value(criterion.get("measured")),
                 f"{op} {format_value(criterion.get('target'))}", "PASS" if ok else "FAIL",
                 str(criterion.get("paper", "") or ""))
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            item.setToolTip(f"{text}\n\nnote: {note}" if note and column == 0 else text)
            if column in (1, 2):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if column == 3:
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setForeground(QBrush(QColor("white")))
                item.setBackground(QBrush(PASS_COLOUR if ok else FAIL_COLOUR))
                bold = QFont(item.font())
                bold.setBold(True)
                item.setFont(bold)
            self.table.setItem(row, column, item)

    def _show_note(self, row: int, *_args) -> None:
        criteria = (self.claim or {}).get("criteria", [])
        note = criteria[row].get("note", "") if 0 <= row < len(criteria) else ""
        name = criteria[row].get("name", "") if note else ""
        self._show(self.criterion_note, f"<b>{name}</b>: {note}" if note else "")

    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``""`` when no claim is shown."""
        if self.claim is None:
            return ""
        return self.verdict_label.text().split()[0]

    def row_verdicts(self) -> list[str]:
        return [self.table.item(row, 3).text() for row in range(self.table.rowCount())]

    @staticmethod
    def _show(label: QLabel, text: str) -> None:
        label.setText(text)
        label.setVisible(bool(text))
