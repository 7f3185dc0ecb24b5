"""A job's output beside the user's data: it never replaces what the user has open unasked.

When a run finishes with something to show (a simulated transcript, generated molecules, a
trained SAE) and the panel shows nothing, the output opens at once. When the user has a file
open (transcripts they are labelling, a set they are triaging), ``RunOutputs.offer`` asks:
"Open the run's output" or "Keep <file>". A kept output stays reachable: the status line says
where it is and the "Open run output" button (a menu once several are waiting) opens it later.
Opening one leaves the previous document the panel's normal way (its edits stay autosaved).

The question is a non-modal ``QMessageBox`` opened with ``open()`` (a modal ``exec()`` inside
the bridge's callback would stall the event loop's other tasks). Tests replace ``ask``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QMenu, QMessageBox, QToolButton, QWidget

OPEN_TEXT = "Open the run's output"
BUTTON_TEXT = "Open run output"


@dataclass(frozen=True)
class RunOutput:
    """What a run made and which run made it."""

    path: Path      # the file or folder the panel opens
    label: str      # the run, as the status line names it: "scicl.simulate (2026...)"


# ask(output, what is open now, answer): answer(True) opens the output, answer(False) keeps
# what is open. It may answer at once (tests) or later (the dialog).
Ask = Callable[[RunOutput, str, Callable[[bool], None]], None]


class RunOutputs:
    """The runs' outputs of one panel: opened, asked about, or waiting to be opened.

    ``open_output(path)`` opens one in the panel (True when it did); ``current()`` names what
    the panel shows now, ``None`` when nothing; ``status(text)`` is the panel's status line.
    Put ``button`` where the user looks for it (beside the status line).
    """

    def __init__(self, parent: QWidget, open_output: Callable[[Path], Any],
                 current: Callable[[], str | None], status: Callable[[str], None]) -> None:
        self._parent = parent
        self._open = open_output
        self._current = current
        self._status = status
        self.waiting: list[RunOutput] = []      # kept aside by the user, newest first
        self.ask: Ask = self._ask_in_a_box
        self.button = QToolButton(parent)
        self.button.setText(BUTTON_TEXT)
        self.button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        self.button.setMenu(QMenu(self.button))
        self.button.clicked.connect(lambda: self.open_waiting())
        self.button.hide()

    def offer(self, path: str | Path, label: str) -> None:
        """A run made ``path``: open it when nothing is open, else ask first."""
        output = RunOutput(Path(path), label)
        current = self._current()
        if current is None:
            self._open(output.path)
            return
        self.ask(output, current, lambda open_it: self._answered(output, current, open_it))

    def open_waiting(self, output: RunOutput | None = None) -> bool:
        """Open a kept output (default: the newest); it stops waiting once it opened."""
        output = output or (self.waiting[0] if self.waiting else None)
        if output is None:
            return False
        opened = bool(self._open(output.path))
        if opened and output in self.waiting:
            self.waiting.remove(output)
            self._show_waiting()
        return opened

    def _answered(self, output: RunOutput, current: str, open_it: bool) -> None:
        if open_it:
            self._open(output.path)
            return
        self.waiting.insert(0, output)
        self._show_waiting()
        self._status(f"Kept {current} open. {output.label} made {output.path.name}: it is at "
                     f"{output.path} ('{BUTTON_TEXT}' opens it).")

    def _show_waiting(self) -> None:
        menu = self.button.menu()
        menu.clear()
        for output in self.waiting:
            action = menu.addAction(f"{output.path.name}  ({output.label})")
            action.setToolTip(str(output.path))
            action.triggered.connect(lambda _=False, chosen=output: self.open_waiting(chosen))
        self.button.setVisible(bool(self.waiting))
        if self.waiting:
            self.button.setToolTip(f"open {self.waiting[0].path}")

    def _ask_in_a_box(self, output: RunOutput, current: str,
                      answer: Callable[[bool], None]) -> None:
        box = QMessageBox(self._parent)
        box.setWindowTitle("A run finished")
        box.setIcon(QMessageBox.Icon.Question)
        box.setText(f"{output.label} made {output.path.name}\n({output.path}).")
        box.setInformativeText(
            f"{current} is open here. Open the run's output in its place (the edits you made "
            f"to {current} stay saved), or keep {current} and open the output later with "
            f"'{BUTTON_TEXT}'?")
        open_button = box.addButton(OPEN_TEXT, QMessageBox.ButtonRole.AcceptRole)
        keep_button = box.addButton(f"Keep {current}", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(keep_button)
        box.setEscapeButton(keep_button)

        def finished(_result: int) -> None:
            box.deleteLater()
            answer(box.clickedButton() is open_button)

        box.finished.connect(finished)
        box.open()
