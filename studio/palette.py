"""The command palette (Ctrl+Shift+P): find any registered command or engine method by typing
a few letters of its name, see its shortcut, and run it, its arguments asked for by a form
built from its schema.

The search is fuzzy: the typed letters must appear in order in the title or id ("mvw" finds
"Move a wire"); a run of consecutive letters, letters that start words and an early match
rank higher. Engine methods run through the ``engine.run_method`` command, so they are logged
like every other command. ``filter_entries`` is plain Python over plain entries (the
benchmark times it, and the list, without a window).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPoint, Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from studio.commands import Command, CommandRegistry

COMMAND, METHOD = "command", "method"
RUN_METHOD = "engine.run_method"
PALETTE_WIDTH = 640
MAX_SHOWN = 200            # rows in the list (the best matches)
GAP_PER_LETTER = 3         # letters a scattered match may skip between the typed ones


@dataclass(frozen=True)
class PaletteEntry:
    kind: str               # COMMAND or METHOD
    id: str
    title: str
    help: str
    shortcut: str = ""
    schema: dict | None = None   # an engine method's parameters
    inputs: dict | None = None   # an engine method's inputs (name -> kind)
    command: Command | None = None

    def arguments(self) -> dict:
        """The JSON Schema of what it takes (a command's is built only when it is chosen:
        pydantic takes a millisecond a model, too slow for every opening)."""
        if self.command is not None:
            return self.command.schema()
        return self.schema or {}

    def takes_arguments(self) -> bool:
        if self.command is not None:
            return bool(self.command.arg_names())
        return True  # a method: its parameters and inputs, or a form that says it has none

    @property
    def haystack(self) -> str:
        return f"{self.title}  {self.id}".lower()

    def label(self) -> str:
        kind = "method" if self.kind == METHOD else self.id
        return f"{self.title}  —  {kind}"


def entries_of(registry: CommandRegistry, methods: Iterable[dict] = ()) -> list[PaletteEntry]:
    """Every command (but ``engine.run_method``, which each method stands for) and every
    engine method, as the engine lists them."""
    found = [PaletteEntry(COMMAND, c.id, c.title, c.help, c.shortcut, command=c)
             for c in registry.commands() if c.id != RUN_METHOD]
    for method in methods:
        found.append(PaletteEntry(METHOD, str(method.get("id", "")),
                                  str(method.get("title") or method.get("id", "")),
                                  str(method.get("description") or method.get("paper") or ""),
                                  schema=method.get("params_schema") or {},
                                  inputs=dict(method.get("inputs") or {})))
    return found


def fuzzy_score(query: str, text: str) -> int | None:
    """How well ``query`` (lower case) matches ``text`` (lower case); ``None``: it does not.

    A substring scores highest (earlier and at a word start better); otherwise each query
    letter must follow the previous one in the text, gaps cost, consecutive letters and word
    starts earn, and more than ``GAP_PER_LETTER`` skipped letters per typed one is no match."""
    if not query:
        return 0
    at = text.find(query)
    if at >= 0:
        return 1000 - at + (100 if at == 0 or not text[at - 1].isalnum() else 0)
    score, position, previous, skipped = 0, 0, -2, 0
    for letter in query:
        if letter == " ":
            continue
        found = text.find(letter, position)
        if found < 0:
            return None
        if found == previous + 1:
            score += 15
        if found == 0 or not text[found - 1].isalnum():
            score += 10
        if previous >= 0:
            skipped += found - position
        score -= found - position
        previous, position = found, found + 1
    if skipped > GAP_PER_LETTER * len(query):
        return None  # letters strewn over the text: not what was meant
    return score


def filter_entries(entries: list[PaletteEntry], query: str,
                   limit: int = MAX_SHOWN) -> list[PaletteEntry]:
    """The entries ``query`` matches, best first: an exact id or title, then by score (ties:
    commands before methods, by title)."""
    needle = query.strip().lower()
    if not needle:
        return sorted(entries, key=lambda e: (e.kind != COMMAND, e.title.lower()))[:limit]
    scored = []
    for entry in entries:
        score = fuzzy_score(needle, entry.haystack)
        if score is not None:
            exact = entry.id.lower() == needle or entry.title.lower() == needle
            scored.append((not exact, -score, entry.kind != COMMAND, entry.title.lower(), entry))
    scored.sort(key=lambda item: item[:4])
    return [item[4] for item in scored[:limit]]


class _EntryModel(QAbstractListModel):
    def __init__(self) -> None:
        super().__init__()
        self.shown: list[PaletteEntry] = []

    def set_entries(self, entries: list[PaletteEntry]) -> None:
        self.beginResetModel()
        self.shown = entries
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.shown)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        entry = self.shown[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            keys = _keys(entry.shortcut)
            return f"{entry.label()}{'    ' + keys if keys else ''}"
        if role == Qt.ItemDataRole.ToolTipRole:
            return entry.help
        return None


class CommandPalette(QDialog):
    """A search box over every command and method; Enter runs the highlighted one (or asks
    its arguments first), Escape closes."""

    def __init__(self, registry: CommandRegistry, methods: Callable[[], list[dict]],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("commandPalette")
        self.setWindowTitle("Command palette")
        self.registry = registry
        self.methods = methods
        self.entries: list[PaletteEntry] = []
        self.chosen: PaletteEntry | None = None
        self.form = None
        self.picker = None
        self.pages = QStackedWidget()
        self.pages.addWidget(self._build_search())
        self.pages.addWidget(self._build_arguments())
        column = QVBoxLayout(self)
        column.setContentsMargins(6, 6, 6, 6)
        column.addWidget(self.pages)
        self.resize(PALETTE_WIDTH, 420)

    # -- layout ------------------------------------------------------------------------------
    def _build_search(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.setContentsMargins(0, 0, 0, 0)
        self.search = QLineEdit()
        self.search.setObjectName("paletteSearch")
        self.search.setPlaceholderText("Type a command or method (letters in order: 'mvw')…")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.set_query)
        self.search.returnPressed.connect(self.choose_current)
        self.search.installEventFilter(self)
        self.model = _EntryModel()
        self.list = QListView()
        self.list.setObjectName("paletteList")
        self.list.setModel(self.model)
        self.list.setUniformItemSizes(True)
        self.list.activated.connect(lambda index: self.choose(self.model.shown[index.row()]))
        self.count = QLabel("")
        self.count.setObjectName("emptyNote")
        column.addWidget(self.search)
        column.addWidget(self.list, 1)
        column.addWidget(self.count)
        return page

    def _build_arguments(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.setContentsMargins(0, 0, 0, 0)
        self.form_title = QLabel("")
        self.form_title.setWordWrap(True)
        self.form_holder = QScrollArea()
        self.form_holder.setWidgetResizable(True)
        self.form_error = QLabel("")
        self.form_error.setWordWrap(True)
        self.form_error.setStyleSheet("color: #c0392b;")
        back = QPushButton("Back")
        back.clicked.connect(self.back)
        self.run_button = QPushButton("Run")
        self.run_button.clicked.connect(self.run_chosen)
        for button in (back, self.run_button):  # Enter in the search box is not a click
            button.setAutoDefault(False)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(back)
        buttons.addWidget(self.run_button)
        column.addWidget(self.form_title)
        column.addWidget(self.form_holder, 1)
        column.addWidget(self.form_error)
        column.addLayout(buttons)
        return page

    # -- showing and searching ---------------------------------------------------------------
    def popup(self) -> None:
        """Show at the top of the parent window, listing what is registered now."""
        self.refresh()
        self.back()
        self.search.selectAll()
        parent = self.parentWidget()
        if parent is not None:
            top = parent.mapToGlobal(QPoint((parent.width() - self.width()) // 2, 60))
            self.move(top)
        self.show()
        self.raise_()
        self.activateWindow()
        self.search.setFocus()

    def refresh(self) -> None:
        """The commands and methods as they are now (a panel opened since adds its own)."""
        try:
            methods = list(self.methods() or [])
        except Exception:  # an engine not started yet lists no methods
            methods = []
        self.entries = entries_of(self.registry, methods)
        self.set_query(self.search.text())

    def set_query(self, text: str) -> list[PaletteEntry]:
        shown = filter_entries(self.entries, text)
        self.model.set_entries(shown)
        if shown:
            self.list.setCurrentIndex(self.model.index(0))
        total = len(self.entries)
        self.count.setText(f"{len(shown)} of {total}" if text.strip() else
                           f"{total} commands and methods")
        return shown

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
        """Up and Down in the search box move through the list."""
        from PySide6.QtCore import QEvent

        if watched is self.search and event.type() == QEvent.Type.KeyPress and \
                event.key() in (Qt.Key.Key_Up, Qt.Key.Key_Down):
            row = self.list.currentIndex().row() + (1 if event.key() == Qt.Key.Key_Down else -1)
            if 0 <= row < self.model.rowCount():
                self.list.setCurrentIndex(self.model.index(row))
            return True
        return super().eventFilter(watched, event)

    # -- running -----------------------------------------------------------------------------
    def choose_current(self) -> None:
        index = self.list.currentIndex()
        if index.isValid():
            self.choose(self.model.shown[index.row()])

    def choose(self, entry: PaletteEntry) -> None:
        """Run it now when it takes nothing; else ask its arguments."""
        self.chosen = entry
        if not entry.takes_arguments():
            self.hide()
            self.registry.trigger(entry.id)
            return
        from studio.widgets.schema_form import InputPicker, SchemaForm

        holder = QWidget()
        column = QVBoxLayout(holder)
        schema = entry.arguments()
        self.form = SchemaForm(schema)
        column.addWidget(self.form)
        self.picker = None
        if entry.kind == METHOD and entry.inputs:
            column.addWidget(QLabel("Inputs"))
            self.picker = InputPicker(entry.inputs)
            column.addWidget(self.picker)
        column.addStretch(1)
        self.form_holder.setWidget(holder)
        keys = _keys(entry.shortcut)
        fields = "".join(
            f"<br>&nbsp;&nbsp;<code>{html.escape(name)}</code>: "
            f"{html.escape(str(prop.get('description', '')))}"
            for name, prop in (schema.get("properties") or {}).items()
            if prop.get("description"))
        self.form_title.setText(f"<b>{html.escape(entry.title)}</b> <code>{entry.id}</code>"
                                f"{'  ' + keys if keys else ''}<br>{html.escape(entry.help)}"
                                f"<span style='color: #8b949e'>{fields}</span>")
        self.form_error.setText("")
        self.pages.setCurrentIndex(1)

    def run_chosen(self) -> bool:
        """Run the chosen entry with the form's values; a refusal stays on the form."""
        from studio.commands import CommandError

        entry = self.chosen
        values = self.form.submittable() if self.form is not None else {}
        if entry is None or values is None:
            return False
        if entry.kind == METHOD:
            command_id = RUN_METHOD
            args = {"method": entry.id, "params": values,
                    "inputs": {k: v for k, v in (self.picker.values() if self.picker else
                                                 {}).items() if v}}
        else:
            command_id, args = entry.id, values
        try:
            self.registry.run_as_user(command_id, **args)
        except CommandError as exc:
            self.form_error.setText(str(exc))
            return False
        self.hide()
        return True

    def back(self) -> None:
        self.pages.setCurrentIndex(0)
        self.search.setFocus()


def _keys(shortcut: str) -> str:
    return ", ".join(QKeySequence(key.strip()).toString(QKeySequence.SequenceFormat.NativeText)
                     for key in shortcut.split(";") if key.strip())
