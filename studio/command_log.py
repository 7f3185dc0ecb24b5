"""The command log: every command run in this window, as the line of Python a script would
write (``studio.command("routing.move_wire", net="_001_", dx_um=0.38)``), to copy into a
script, the console or a bug report.

Lines are selectable (Ctrl+C copies the selection, "Copy all" every line); a refused command
is kept, marked with its reason as a comment, so a replayed script shows where it went wrong.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtGui import (
    QAction,
    QBrush,
    QColor,
    QFontDatabase,
    QGuiApplication,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.commands import CommandRegistry, Invocation

MAX_LINES = 10_000
REFUSED_COLOUR = "#d9822b"
COMMAND_ROLE = Qt.ItemDataRole.UserRole


class CommandLog(QWidget):
    """Listens to a registry; one list item per top-level invocation."""

    def __init__(self, registry: CommandRegistry, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("commandLog")
        self.lines = _Lines(self.copy_selected)
        self.lines.setObjectName("commandLogLines")
        self.lines.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.lines.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.lines.setUniformItemSizes(True)
        copy = QAction("Copy", self.lines)
        copy.triggered.connect(self.copy_selected)
        self.lines.addAction(copy)
        self.lines.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        self.count_label = QLabel("")
        self.count_label.setObjectName("emptyNote")
        copy_all = QPushButton("Copy all")
        copy_all.setToolTip("Copy every line: a script that replays this session")
        copy_all.clicked.connect(self.copy_all)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.clear)
        bar = QHBoxLayout()
        bar.addWidget(self.count_label, 1)
        bar.addWidget(copy_all)
        bar.addWidget(clear)
        column = QVBoxLayout(self)
        column.setContentsMargins(4, 4, 4, 4)
        column.addWidget(self.lines, 1)
        column.addLayout(bar)
        self._stop = registry.listen(self.add)
        self._update_count()

    def add(self, invocation: Invocation) -> None:
        last = self.lines.item(self.lines.count() - 1) if self.lines.count() else None
        if (invocation.command.log_last_only and last is not None
                and last.data(COMMAND_ROLE) == invocation.command.id):
            self.lines.takeItem(self.lines.count() - 1)
        item = QListWidgetItem(invocation.python())
        item.setData(COMMAND_ROLE, invocation.command.id)
        stamp = time.strftime("%H:%M:%S", time.localtime(invocation.started))
        item.setToolTip(f"{stamp}, from {'a script' if invocation.source == 'script' else 'you'}"
                        f": {invocation.command.title}. {invocation.command.help}")
        if invocation.refused:
            item.setForeground(QBrush(QColor(REFUSED_COLOUR)))
        self.lines.addItem(item)
        while self.lines.count() > MAX_LINES:
            self.lines.takeItem(0)
        self.lines.scrollToBottom()
        self._update_count()

    def text(self, selected_only: bool = False) -> str:
        """The lines (the selected ones, in order), one command a line."""
        items = [self.lines.item(row) for row in range(self.lines.count())]
        if selected_only:
            items = [item for item in items if item.isSelected()]
        return "\n".join(item.text() for item in items)

    def copy_selected(self) -> None:
        text = self.text(selected_only=True)
        if text:
            QGuiApplication.clipboard().setText(text + "\n")

    def copy_all(self) -> None:
        QGuiApplication.clipboard().setText(self.text() + "\n" if self.lines.count() else "")

    def clear(self) -> None:
        self.lines.clear()
        self._update_count()

    def _update_count(self) -> None:
        count = self.lines.count()
        self.count_label.setText(f"{count} command(s)" if count else
                                 "Commands you run appear here as Python lines.")

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self._stop()
        super().closeEvent(event)


class _Lines(QListWidget):
    """The list, whose Ctrl+C copies every selected line (a list view copies only the
    current one)."""

    def __init__(self, copy) -> None:
        super().__init__()
        self._copy = copy

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if event.matches(QKeySequence.StandardKey.Copy):
            self._copy()
            event.accept()
            return
        super().keyPressEvent(event)
