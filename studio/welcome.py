"""The first page: the nineteen papers, each opening its panel, and the files opened lately.

Its buttons run registered commands (``studio.command_widgets``): a card's Open runs
``welcome.open_paper``, "What's coming" ``welcome.show_coming``, the filter ``welcome.filter``,
"Open a file…" and a recent file ``app.open`` (``studio.shell_commands``). The page finds the
registry of the window it is in when a button is clicked, unless it was given one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from studio.catalogue import Paper
from studio.command_widgets import connect, connect_button
from studio.commands import Command, CommandRegistry

CARD_MIN_WIDTH = 360
CARD_SPACING = 12
CONTENT_MARGINS = 2 * 28
SCROLLBAR_ALLOWANCE = 16
MAX_COLUMNS = 3
SIDE_WIDTH = 240


def _label(text: str, name: str = "", wrap: bool = False, **properties: str) -> QLabel:
    label = QLabel(text)
    if name:
        label.setObjectName(name)
    label.setWordWrap(wrap)
    for key, value in properties.items():
        label.setProperty(key, value)
    return label


class WindowCommands:
    """The command registry of the window a widget is in, looked up when a command runs: the
    page is built before it is placed in the window. Outside a window with commands (the page
    shown alone) a command is handed to ``fallback(id, args)``."""

    def __init__(self, widget: QWidget, fallback) -> None:
        self._widget = widget
        self._fallback = fallback

    def _registry(self) -> CommandRegistry | None:
        registry = getattr(self._widget.window(), "commands", None)
        return registry if isinstance(registry, CommandRegistry) else None

    def get(self, command_id: str) -> Command | None:
        registry = self._registry()
        return registry.get(command_id) if registry is not None else None

    def trigger(self, command_id: str, /, **args: Any) -> Any:
        registry = self._registry()
        if registry is None:
            return self._fallback(command_id, args)
        return registry.trigger(command_id, **args)


class PaperCard(QFrame):
    """One paper: title, one line, where it lives, and Open (or what is coming)."""

    def __init__(self, paper: Paper, commands: CommandRegistry | WindowCommands,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.paper = paper
        self.filtered_out = False
        self.setObjectName("paperCard")
        self.setProperty("status", paper.status)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.setMinimumWidth(CARD_MIN_WIDTH)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 12, 14, 12)
        layout.setSpacing(6)
        layout.addWidget(_label(paper.title, "paperTitle", wrap=True))
        line = _label(paper.one_line, "paperLine", wrap=True)
        line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(line)

        self.coming_label = _label(
            f"Coming to the {paper.panel_title}: {paper.coming}", "paperComing", wrap=True)
        self.coming_label.setVisible(False)
        layout.addWidget(self.coming_label)

        row = QHBoxLayout()
        row.setSpacing(6)
        where = paper.panel_title + (f" · {paper.area}" if paper.area else "")
        row.addWidget(_label(where, chip="area"))
        row.addWidget(_label("Available" if paper.available else "Coming",
                             chip="available" if paper.available else "coming"))
        row.addStretch(1)
        layout.addLayout(row)
        row = QHBoxLayout()  # the button on a row of its own: its whole label fits any card
        row.addStretch(1)
        if paper.available:
            self.button = QPushButton(f"Open in {paper.panel_title}")
            self.button.setProperty("primary", "true")
            connect_button(self.button, commands, "welcome.open_paper",
                           lambda: {"paper": paper.slug})
        else:
            self.button = QPushButton("What's coming")
            self.button.setCheckable(True)
            self.button.setToolTip(paper.coming)
            connect(self.button.toggled, self.button, commands, "welcome.show_coming",
                    lambda on: {"paper": paper.slug, "on": on})
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        row.addWidget(self.button)
        layout.addLayout(row)

    def show_coming(self, on: bool) -> None:
        """What the paper will offer, shown under its line (``welcome.show_coming``)."""
        self.coming_label.setVisible(on)
        self.button.blockSignals(True)  # the button shows the state; it asked for it
        self.button.setChecked(on)
        self.button.blockSignals(False)

    def matches(self, text: str) -> bool:
        text = text.strip().lower()
        if not text:
            return True
        paper = self.paper
        haystack = " ".join((paper.slug, paper.title, paper.one_line, paper.panel_title,
                             paper.area, paper.status)).lower()
        return all(word in haystack for word in text.split())


class WelcomePage(QWidget):
    """Cards grouped by panel (the lab first), a filter, and recent files on the side."""

    # what a button asks when the page is not in a window with commands (shown alone)
    paper_requested = Signal(str)       # slug of an available paper
    file_requested = Signal(str)        # a recent file to open again
    open_file_requested = Signal()      # "Open a file…"

    def __init__(self, papers: tuple[Paper, ...], parent: QWidget | None = None,
                 registry: CommandRegistry | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcomePage")
        self.commands = registry or WindowCommands(self, self._without_window)
        self.cards: list[PaperCard] = [PaperCard(paper, self.commands) for paper in papers]
        self._columns = 0
        self._filtered_by = ""

        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(0)
        outer.addWidget(self._build_side())

        scroll = QScrollArea()
        scroll.setObjectName("welcomeScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        content = QWidget()
        content.setObjectName("welcomeContent")
        self._content_layout = QVBoxLayout(content)
        self._content_layout.setContentsMargins(CONTENT_MARGINS // 2, 22, CONTENT_MARGINS // 2, 22)
        self._content_layout.setSpacing(8)
        self._content_layout.addWidget(_label("Studio", "welcomeTitle"))
        count = len(papers)
        available = sum(p.available for p in papers)
        self._content_layout.addWidget(_label(
            f"Run the methods of {_number_word(count)} NeurIPS 2026 papers on your own data, "
            f"watch them train, inspect and edit what they make. {available} available now, "
            f"the rest on their way.", "welcomeSubtitle", wrap=True))
        self.filter = QLineEdit()
        self.filter.setObjectName("paperFilter")
        self.filter.setPlaceholderText("Filter papers (title, topic, panel)…")
        self.filter.setClearButtonEnabled(True)
        connect(self.filter.textEdited, self.filter, self.commands, "welcome.filter",
                lambda text: {"text": text})
        self.filter.textChanged.connect(self._apply_filter)  # the clear button too
        self._content_layout.addWidget(self.filter)

        self._sections: list[tuple[QLabel, QWidget, QGridLayout, list[PaperCard]]] = []
        for title, cards in _group_by_panel(self.cards):
            heading = _label(title, role="section")
            grid_host = QWidget()
            grid = QGridLayout(grid_host)
            grid.setContentsMargins(0, 0, 0, 0)
            grid.setHorizontalSpacing(CARD_SPACING)
            grid.setVerticalSpacing(CARD_SPACING)
            self._content_layout.addWidget(heading)
            self._content_layout.addWidget(grid_host)
            self._sections.append((heading, grid_host, grid, cards))
        self.no_match = _label("No paper matches the filter.", "emptyNote")
        self.no_match.setVisible(False)
        self._content_layout.addWidget(self.no_match)
        self._content_layout.addStretch(1)
        scroll.setWidget(content)
        outer.addWidget(scroll, 1)
        self._reflow(2)

    # -- side column -------------------------------------------------------------------------
    def _build_side(self) -> QWidget:
        side = QFrame()
        side.setObjectName("welcomeSide")
        side.setFixedWidth(SIDE_WIDTH)
        layout = QVBoxLayout(side)
        layout.setContentsMargins(18, 24, 18, 18)
        layout.setSpacing(6)
        layout.addWidget(_label("Start", role="section"))
        open_button = QPushButton("Open a file…")
        open_button.setProperty("primary", "true")
        open_button.setToolTip("Open a data file (Ctrl+O), or drop it on the window")
        connect_button(open_button, self.commands, "app.open")
        layout.addWidget(open_button)
        layout.addWidget(_label("or drop files anywhere on the window", "emptyNote", wrap=True))
        layout.addSpacing(14)
        layout.addWidget(_label("Recent files", role="section"))
        self._recent_layout = QVBoxLayout()
        self._recent_layout.setSpacing(2)
        layout.addLayout(self._recent_layout)
        layout.addStretch(1)
        self.set_recent_files([])
        return side

    def set_recent_files(self, files: list[str]) -> None:
        while self._recent_layout.count():
            widget = self._recent_layout.takeAt(0).widget()
            if widget is not None:  # off the page now, deleted when Qt is idle
                widget.setParent(None)
                widget.deleteLater()
        if not files:
            self._recent_layout.addWidget(_label("Files you open appear here.", "emptyNote",
                                                 wrap=True))
            return
        for path in files:
            button = QToolButton()
            button.setObjectName("recentFile")
            button.setText(Path(path).name)
            button.setToolTip(path)
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            button.setEnabled(os.path.exists(path))
            connect_button(button, self.commands, "app.open", lambda p=path: {"paths": [p]})
            self._recent_layout.addWidget(button)

    # -- layout --------------------------------------------------------------------------------
    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        content = event.size().width() - SIDE_WIDTH - CONTENT_MARGINS - SCROLLBAR_ALLOWANCE
        columns = (content + CARD_SPACING) // (CARD_MIN_WIDTH + CARD_SPACING)
        self._reflow(max(1, min(MAX_COLUMNS, columns)))

    def _reflow(self, columns: int, force: bool = False) -> None:
        if columns == self._columns and not force:
            return
        self._columns = columns
        for _heading, _host, grid, cards in self._sections:
            for card in cards:
                grid.removeWidget(card)
            visible = [card for card in cards if not card.filtered_out]
            for i, card in enumerate(visible):
                grid.addWidget(card, i // columns, i % columns, Qt.AlignmentFlag.AlignTop)
            for column in range(MAX_COLUMNS):
                grid.setColumnStretch(column, 1 if column < columns else 0)

    def _apply_filter(self, text: str) -> None:
        self._filtered_by = text
        shown = 0
        for heading, host, _grid, cards in self._sections:
            any_shown = False
            for card in cards:
                visible = card.matches(text)
                card.filtered_out = not visible
                card.setVisible(visible)
                any_shown |= visible
                shown += visible
            heading.setVisible(any_shown)
            host.setVisible(any_shown)
        self.no_match.setVisible(shown == 0)
        self._reflow(self._columns, force=True)

    def visible_papers(self) -> list[str]:
        return [card.paper.slug for card in self.cards if not card.filtered_out]

    def card(self, slug: str) -> PaperCard | None:
        return next((card for card in self.cards if card.paper.slug == slug), None)

    def set_filter(self, text: str) -> None:
        """Show the cards that have every word (``welcome.filter``)."""
        if self.filter.text() != text:
            self.filter.setText(text)  # textChanged applies it
        elif self._filtered_by != text:
            self._apply_filter(text)

    def _without_window(self, command_id: str, args: dict) -> None:
        """Outside a window with commands: say what was asked by the page's signals."""
        if command_id == "app.open":
            if args.get("paths"):
                for path in args["paths"]:
                    self.file_requested.emit(path)
            else:
                self.open_file_requested.emit()
        elif command_id == "welcome.open_paper":
            self.paper_requested.emit(args["paper"])
        elif command_id == "welcome.show_coming":
            card = self.card(args["paper"])
            if card is not None:
                card.show_coming(bool(args["on"]))
        elif command_id == "welcome.filter":
            self.set_filter(args["text"])


def _group_by_panel(cards: list[PaperCard]) -> list[tuple[str, list[PaperCard]]]:
    """Sections by panel: the ones with something available first, available cards first."""
    groups: dict[str, list[PaperCard]] = {}
    for card in cards:
        groups.setdefault(card.paper.panel_title, []).append(card)
    ordered = sorted(groups.items(),
                     key=lambda item: (not any(c.paper.available for c in item[1]), ))
    return [(title, sorted(group, key=lambda c: not c.paper.available))
            for title, group in ordered]


def _number_word(n: int) -> str:
    words = {19: "nineteen", 18: "eighteen", 20: "twenty"}
    return words.get(n, str(n))
