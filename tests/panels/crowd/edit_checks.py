"""Helpers of the crowd and fMRI edit-history property tests: what escaped to the event loop,
and the steps a panel's history is expected to hold."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@contextlib.contextmanager
def escaped_exceptions() -> Iterator[list[BaseException]]:
    """Exceptions that reach ``sys.excepthook`` (raised in a Qt virtual such as an undo
    step's ``undo``, or in a slot): the event loop would only log them, so a test must look."""
    caught: list[BaseException] = []
    previous = sys.excepthook
    sys.excepthook = lambda kind, value, traceback: caught.append(value)
    try:
        yield caught
    finally:
        sys.excepthook = previous


@dataclass
class Step:
    """One edit as the test saw it made: its document and the state before and after."""

    document: str
    before: Any
    after: Any


@dataclass
class ExpectedHistory:
    """What the undo stack must hold: ``steps`` with the first ``index`` applied."""

    state: Any
    steps: list[Step] = field(default_factory=list)
    index: int = 0

    def pushed(self, document: str, after: Any) -> None:
        self.steps = [*self.steps[:self.index], Step(document, self.state, after)]
        self.index += 1
        self.state = after

    def undone(self) -> None:
        if self.index:
            self.index -= 1
            self.state = self.steps[self.index].before

    def redone(self) -> None:
        if self.index < len(self.steps):
            self.state = self.steps[self.index].after
            self.index += 1

    def pressed(self, name: str) -> bool:
        """Follow the press of "undo" or "redo"; False for an operation of another name."""
        if name == "undo":
            self.undone()
        elif name == "redo":
            self.redone()
        return name in ("undo", "redo")

    def reopened(self, document: str, steps: list[Step] | None = None) -> None:
        """The panel left its documents and opened ``document`` again: the applied steps of
        that document come back (replayed from the autosave), none of the others; or
        ``steps``, where the autosave found by the file's content decides which come back."""
        if steps is None:
            steps = [step for step in self.steps[:self.index] if step.document == document]
        self.steps = steps
        self.index = len(self.steps)

    def bottom(self) -> Any:
        """The state with every step undone."""
        return self.steps[0].before if self.steps else self.state
