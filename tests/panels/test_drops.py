"""Dropped files reach a panel through Qt's own event dispatch, local files only."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget

from panels.widgets.drops import OpensDroppedFiles


class Probe(OpensDroppedFiles, QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.setAcceptDrops(True)
        self.opened: list[str] = []

    def open_file(self, path: str) -> None:
        self.opened.append(path)


def _send(widget: QWidget, kind, urls: list[QUrl]):
    mime = QMimeData()
    mime.setUrls(urls)
    event = kind(QPointF(5, 5).toPoint() if kind is QDragEnterEvent else QPointF(5, 5),
                 Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                 Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, event)
    return event


def test_local_files_are_opened_in_order_and_remote_ones_ignored(qtbot, tmp_path):
    probe = Probe()
    qtbot.addWidget(probe)
    a, b = tmp_path / "a.nii", tmp_path / "b.def"
    local = [QUrl.fromLocalFile(str(a)), QUrl.fromLocalFile(str(b))]
    assert _send(probe, QDragEnterEvent, local).isAccepted()
    assert not _send(probe, QDragEnterEvent, [QUrl("https://example.org/x.nii")]).isAccepted()
    _send(probe, QDropEvent, [*local, QUrl("https://example.org/x.nii")])
    assert probe.opened == [str(a), str(b)]
