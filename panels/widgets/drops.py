"""Files dropped on a panel: one behaviour for every panel (accept local files, open each)."""

from __future__ import annotations


class OpensDroppedFiles:
    """Mixin for a panel QWidget (list it before QWidget): dropped local files go to
    ``open_dropped``, which opens each with ``open_file`` unless the panel says otherwise."""

    def dragEnterEvent(self, event) -> None:
        if any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        self.open_dropped([url.toLocalFile() for url in event.mimeData().urls()
                           if url.isLocalFile()])
        event.acceptProposedAction()

    def open_dropped(self, paths: list[str]) -> None:
        for path in paths:
            self.open_file(path)
