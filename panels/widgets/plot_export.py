"""pyqtgraph's right-click "Export..." is its own exporter: it writes no provenance and runs no
command. The panels send it to their own export instead, as their Export buttons do."""

from __future__ import annotations

from collections.abc import Callable

import pyqtgraph as pg
from PySide6.QtWidgets import QWidget

from studio.command_widgets import mark_argument


def route_export(view: pg.GraphicsView, command_id: str, ask: Callable[[], None]) -> None:
    """The "Export..." of ``view``'s context menu calls ``ask`` (which asks where, then runs
    ``command_id``) in place of pyqtgraph's exporter; the action is marked as that command's."""
    for action in view.scene().contextMenu:
        if action.text().startswith("Export"):
            action.triggered.disconnect()
            action.triggered.connect(lambda _checked=False: ask())
            mark_argument(action, command_id)


def route_exports(parent: QWidget, command_id: str, ask: Callable[[], None]) -> None:
    """``route_export`` for every plot under ``parent``."""
    for view in parent.findChildren(pg.GraphicsView):
        route_export(view, command_id, ask)
