"""TokenHeatView: tokens shaded by value, hover finds the token, search wraps round."""

from __future__ import annotations

import json

import pytest
from PySide6.QtGui import QColor, QPalette

from panels.widgets.artifact_views import view_for_artifact
from panels.widgets.token_text import NEUTRAL, POSITIVE, TokenHeatView, token_colour

DATA = {"view": "token_heat", "title": "loss gap", "label": "gap (nats)",
        "tokens": ["def", " f", "(x", "):\n", "  return", " x"],
        "values": [0.5, -1.0, 0.0, 2.0, None, 0.1],
        "details": ["a", "b", "c", "d", "e", "f"]}


def test_colour_blends_from_white_and_saturates():
    assert token_colour(0.0, 1.0, True) == NEUTRAL
    assert token_colour(5.0, 1.0, True) == POSITIVE
    half = token_colour(-0.5, 1.0, True)
    assert half.blue() > half.red() and half != NEUTRAL
    assert token_colour(float("nan"), 1.0, True) == QColor(NEUTRAL)


def test_text_is_the_tokens_and_positions_map_back_to_them(make_widget):
    view = make_widget(TokenHeatView, DATA)
    plain = view._text.toPlainText()
    assert plain.replace("\u2028", "\n") == "".join(DATA["tokens"])
    assert view.token_at(0) == 0 and view.token_at(4) == 1 and view.token_at(5) == 2
    assert view.token_at(len(plain)) is None
    assert "gap (nats) = 2" in view.describe(3) and view.describe(3).endswith("d")
    assert "6 tokens" in view._caption.text()


def test_search_finds_and_wraps(make_widget):
    view = make_widget(TokenHeatView, DATA)
    view._search.setText("x")
    assert view.find_next() and view.find_next()
    first = view._text.textCursor().selectionStart()
    assert view.find_next()  # wrapped round to the first match
    assert view._text.textCursor().selectionStart() < first
    view._search.setText("absent")
    assert not view.find_next()


def test_artifact_with_the_token_heat_view_opens_in_it(qtbot, tmp_path):
    path = tmp_path / "gap.json"
    path.write_text(json.dumps(DATA))
    widget = view_for_artifact("json", path)
    qtbot.addWidget(widget)
    assert isinstance(widget, TokenHeatView)
    with pytest.raises(ValueError, match="6 tokens but 2 values"):
        TokenHeatView(dict(DATA, values=[1, 2]))


def test_text_sits_on_white_paper_in_a_dark_theme(make_widget, qtbot):
    """Unshaded tokens are white: the page around them is white too, whatever the theme."""
    view = make_widget(TokenHeatView)
    dark = view.palette()
    dark.setColor(QPalette.ColorRole.Base, QColor("#202020"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e0e0e0"))
    view.setPalette(dark)
    view.set_data(DATA)
    view.resize(400, 200)
    view.show()
    qtbot.waitExposed(view)
    page = view._text.viewport().grab().toImage()
    corner = page.pixelColor(page.width() - 5, page.height() - 5)  # below the text
    assert corner == NEUTRAL, corner.name()
