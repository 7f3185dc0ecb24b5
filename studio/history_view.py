"""The edit history dock: the active tab's undo steps, grouped by the document they change.

A flat ``QUndoView`` mixes the steps of every document a tab has open; users asked which file a
step belongs to. Here each document is a branch (its file name, the full key as tooltip) with
its steps oldest first; steps past the stack's index (undone, redo-able) are greyed. Activating
a step moves the history to just after it, as ``QUndoView`` does.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QBrush, QPalette, QUndoGroup, QUndoStack
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem

from studio.undo import steps_of

EMPTY_LABEL = "(nothing edited in this tab yet)"
PREFERRED_WIDTH = 260  # a file name and a step label fit without eliding


class EditHistoryView(QTreeWidget):
    def __init__(self, group: QUndoGroup, parent=None) -> None:
        super().__init__(parent)
        self.group = group
        self.setObjectName("editHistoryView")
        self.setHeaderHidden(True)
        self.setRootIsDecorated(True)
        group.activeStackChanged.connect(lambda _stack: self.refresh())
        group.indexChanged.connect(lambda _index: self.refresh())
        self.itemActivated.connect(self._jump)
        self.refresh()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name; preferred, never forced (no minimum)
        return QSize(PREFERRED_WIDTH, super().sizeHint().height())

    @property
    def stack(self) -> QUndoStack | None:
        return self.group.activeStack()

    def refresh(self) -> None:
        self.clear()
        stack = self.stack
        if stack is None or stack.count() == 0:
            item = QTreeWidgetItem([EMPTY_LABEL])
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.addTopLevelItem(item)
            return
        branches: dict[str, QTreeWidgetItem] = {}
        undone = QBrush(self.palette().color(QPalette.ColorGroup.Disabled,
                                             QPalette.ColorRole.Text))
        for position in range(stack.count()):
            entry = stack.command(position)
            for document in dict.fromkeys(step.document for step in steps_of(entry)):
                branch = branches.get(document)
                if branch is None:
                    name = document.partition(":")[2].rstrip("/").rsplit("/", 1)[-1]
                    branch = QTreeWidgetItem([name or document])
                    branch.setToolTip(0, document)
                    branches[document] = branch
                    self.addTopLevelItem(branch)
                step = QTreeWidgetItem([entry.text()])
                step.setData(0, Qt.ItemDataRole.UserRole, position + 1)
                if position >= stack.index():
                    step.setForeground(0, undone)
                    step.setToolTip(0, "undone (Redo brings it back)")
                branch.addChild(step)
        self.expandAll()

    def _jump(self, item: QTreeWidgetItem) -> None:
        index = item.data(0, Qt.ItemDataRole.UserRole)
        if index is not None and self.stack is not None:
            self.stack.setIndex(int(index))

    def documents(self) -> list[str]:
        """The branches shown (document keys), for tests and scripts."""
        return [self.topLevelItem(i).toolTip(0) for i in range(self.topLevelItemCount())
                if self.topLevelItem(i).toolTip(0)]
