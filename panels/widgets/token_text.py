"""Text coloured token by token: loss gaps between two models, feature activations.

An artifact ``{"view": "token_heat", "title", "tokens": [str], "values": [float],
"details": [str], "label": str, "symmetric": bool}`` becomes running text whose tokens are
shaded by value (blue below zero, red above, for signed values; white to orange otherwise),
as Neuronpedia and token-level loss viewers do. Hovering a token shows its value and details;
the search box jumps between the occurrences of a string.
"""

from __future__ import annotations

import bisect
import html
from typing import Any

import numpy as np
from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QColor, QPalette, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QTextBrowser,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

NEGATIVE, POSITIVE, NEUTRAL = QColor("#2166AC"), QColor("#B2182B"), QColor("#FFFFFF")
UNSIGNED = QColor("#E66101")
MAX_TOKENS = 20_000  # beyond this, a text view is unreadable anyway: the artifact is cut


def token_colour(value: float, scale: float, symmetric: bool) -> QColor:
    """Linear blend from white toward the end colour, by |value| / scale (clipped to 1)."""
    if not np.isfinite(value) or scale <= 0:
        return QColor(NEUTRAL)
    strength = min(abs(value) / scale, 1.0)
    end = (NEGATIVE if value < 0 else POSITIVE) if symmetric else UNSIGNED
    return QColor(*(round(a + (b - a) * strength) for a, b in zip(
        NEUTRAL.getRgb()[:3], end.getRgb()[:3], strict=True)))


class TokenHeatView(QWidget):
    """A ``token_heat`` artifact as shaded text with hover details and search."""

    def __init__(self, data: dict | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._tokens: list[str] = []
        self._values = np.empty(0)
        self._details: list[str] = []
        self._starts: list[int] = []
        self._label = "value"
        self._caption = QLabel()
        self._search = QLineEdit()
        self._search.setPlaceholderText("Find in text (Enter: next)")
        self._search.returnPressed.connect(self.find_next)
        self._text = QTextBrowser()
        # The shading blends from white, so the text sits on white paper in any theme (on a
        # dark base, unshaded tokens would be white blocks in a dark page)
        paper = self._text.palette()
        paper.setColor(QPalette.ColorRole.Base, NEUTRAL)
        paper.setColor(QPalette.ColorRole.Text, QColor("#000000"))
        self._text.setPalette(paper)
        self._text.setMouseTracking(True)
        self._text.viewport().installEventFilter(self)
        top = QHBoxLayout()
        top.addWidget(self._caption, 1)
        top.addWidget(self._search)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self._text)
        if data is not None:
            self.set_data(data)

    def set_data(self, data: dict[str, Any]) -> None:
        tokens = [str(t) for t in data.get("tokens", [])][:MAX_TOKENS]
        values = np.asarray([np.nan if v is None else v for v in data.get("values", [])],
                            dtype=float)[:MAX_TOKENS]
        if values.size != len(tokens):
            raise ValueError(f"token_heat: {len(tokens)} tokens but {values.size} values")
        details = [str(d) for d in data.get("details", [])][:MAX_TOKENS]
        self._tokens, self._values = tokens, values
        self._details = details + [""] * (len(tokens) - len(details))
        self._label = str(data.get("label") or "value")
        symmetric = bool(data.get("symmetric", bool(np.nanmin(values, initial=0.0) < 0)))
        finite = np.abs(values[np.isfinite(values)])
        scale = float(np.quantile(finite, 0.98)) if finite.size else 0.0
        self._caption.setText(f"{data.get('title', '')}  ·  {len(tokens)} tokens  ·  colour: "
                              f"{self._label}, saturated at ±{scale:.3g}")
        parts, self._starts, position = [], [], 0
        for token, value in zip(tokens, values, strict=True):
            self._starts.append(position)
            position += len(token)
            background = token_colour(float(value), scale, symmetric).name()
            text = html.escape(token).replace("\n", "<br>")
            parts.append(f'<span style="background-color:{background}">{text}</span>')
        self._text.setHtml('<div style="font-family:monospace; white-space:pre-wrap; '
                           f'color:#000000">{"".join(parts)}</div>')

    def token_at(self, character: int) -> int | None:
        """The index of the token covering plain-text position ``character``."""
        if not self._starts or character < 0:
            return None
        index = bisect.bisect_right(self._starts, character) - 1
        end = self._starts[index] + len(self._tokens[index])
        return index if character < end else None

    def describe(self, index: int) -> str:
        detail = self._details[index]
        return (f"{self._tokens[index]!r}  {self._label} = {self._values[index]:.4g}"
                + (f"\n{detail}" if detail else ""))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self._text.viewport() and event.type() == QEvent.Type.MouseMove:
            cursor = self._text.cursorForPosition(event.position().toPoint())
            index = self.token_at(cursor.position())
            if index is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPosition().toPoint(), self.describe(index),
                                  self._text)
        return super().eventFilter(watched, event)

    def find_next(self) -> bool:
        """Select the next occurrence of the search text (wrapping round); False if none."""
        needle = self._search.text()
        if not needle:
            return False
        if self._text.find(needle):
            return True
        self._text.moveCursor(QTextCursor.MoveOperation.Start)
        return self._text.find(needle, QTextDocument.FindFlag(0))
