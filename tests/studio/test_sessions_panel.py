"""A small panel that implements the session protocol, for the sessions and lineage tests.

"Sketch" opens a text file of points (``x y`` per line), draws them at a zoom in a colour with
one point selected, and moves points as undoable edits (``sketch:<path>`` documents, replayed
from the workspace journal like every panel's). Its ``view_state`` / ``restore_view_state``
follow CONTRACT.md's panel protocol; ``compare(a, b)`` is the lineage dock's comparison hook.
The tests at the end check the panel itself, so a failing session test is about sessions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QWidget

from panels.api import PanelManifest

PANEL_ID = "sketch"
MANIFEST = PanelManifest(id=PANEL_ID, title="Sketch",
                         factory="tests.studio.test_sessions_panel:SketchPanel")


class SketchModel:
    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        self.points = [tuple(float(v) for v in line.split()[:2])
                       for line in path.read_text().splitlines() if line.strip()]

    @property
    def document(self) -> str:
        return f"sketch:{self.path}"


class MovePoint:
    """Move one point by (dx, dy): an ``EditCommand`` with a JSON form."""

    def __init__(self, index: int, dx: float, dy: float) -> None:
        self.index, self.dx, self.dy = index, dx, dy
        self.label = f"Move point {index}"

    def apply(self, model: SketchModel) -> None:
        if not 0 <= self.index < len(model.points):
            raise IndexError(f"no point {self.index}")
        x, y = model.points[self.index]
        model.points[self.index] = (x + self.dx, y + self.dy)

    def revert(self, model: SketchModel) -> None:
        x, y = model.points[self.index]
        model.points[self.index] = (x - self.dx, y - self.dy)

    def to_json(self) -> dict:
        return {"type": "move", "index": self.index, "dx": self.dx, "dy": self.dy}


def decode(data: dict) -> MovePoint:
    return MovePoint(int(data["index"]), float(data["dx"]), float(data["dy"]))


class SketchPanel(QWidget):
    def __init__(self, host: Any) -> None:
        super().__init__()
        self.host = host
        self.model: SketchModel | None = None
        self.zoom = 10.0
        self.colour = "#1f77b4"
        self.selected: int | None = None
        self.compared: list[tuple[str, str]] = []
        self.setMinimumSize(200, 150)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(320, 240)

    def open_file(self, path: str) -> bool:
        if self.model is not None:
            self.host.forget_edits(self.model.document)
        try:
            self.model = SketchModel(Path(path))
        except (OSError, ValueError) as exc:
            self.host.show_error("Cannot open the sketch", f"{path}: {exc}")
            return False
        self.host.restore_edits(self.model.document, self.model, decode)
        self.update()
        return True

    def move_point(self, index: int, dx: float, dy: float) -> None:
        self.host.push_edit(self.model.document, MovePoint(index, dx, dy), self.model)
        self.update()

    # -- the panel protocol --------------------------------------------------------------------
    def view_state(self) -> dict:
        return {"documents": [str(self.model.path)] if self.model else [],
                "zoom": self.zoom, "colour": self.colour, "selected": self.selected}

    def restore_view_state(self, state: dict) -> list[str]:
        problems = []
        for path in state.get("documents", []):
            if not Path(path).exists():
                problems.append(f"{path}: not found")
            elif not self.open_file(path):
                problems.append(f"{path}: not readable")
        self.zoom = float(state.get("zoom", self.zoom))
        self.colour = str(state.get("colour", self.colour))
        selected = state.get("selected")
        if self.model is not None and isinstance(selected, int) and \
                0 <= selected < len(self.model.points):
            self.selected = selected
        elif selected is not None:
            problems.append(f"point {selected}: not in the sketch")
        self.update()
        return problems

    def compare(self, a: str, b: str) -> None:
        self.compared.append((a, b))

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("white"))
        if self.model is not None:
            for index, (x, y) in enumerate(self.model.points):
                chosen = index == self.selected
                painter.setPen(QPen(QColor("red" if chosen else self.colour), 3))
                painter.setBrush(QColor("red" if chosen else self.colour))
                size = 6 if chosen else 4
                painter.drawEllipse(QPointF(20 + x * self.zoom, 20 + y * self.zoom), size, size)
        painter.setPen(QColor("black"))
        painter.drawText(self.rect().adjusted(4, 4, -4, -4),
                         Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom,
                         f"zoom {self.zoom:g}")
        painter.end()


def write_points(path: Path, points: list[tuple[float, float]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{x} {y}\n" for x, y in points))
    return path


def add_sketch_panel(window) -> None:
    """Register the sketch panel with a window's panel registry."""
    window.panels.add(PANEL_ID, MANIFEST, "tests.studio.test_sessions_panel")


def test_sketch_view_state_round_trips(main_window, tmp_path):
    add_sketch_panel(main_window)
    data = write_points(tmp_path / "points.txt", [(1, 1), (5, 3), (8, 9)])
    panel = main_window.open_panel(PANEL_ID)
    assert panel.open_file(str(data))
    panel.zoom, panel.selected = 12.0, 1
    panel.move_point(0, 2, 0)
    state = panel.view_state()
    main_window.close_tab(main_window.tabs.indexOf(panel))
    again = main_window.open_panel(PANEL_ID)
    assert again.restore_view_state(state) == []
    assert again.view_state() == state
    assert again.model.points[0] == (3.0, 1.0)  # the journal's edit replayed
