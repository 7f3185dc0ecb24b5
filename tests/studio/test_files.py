"""File > Open and drag and drop: through the format registry to the panel that claims it."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent


def drop(window, *paths) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    event = QDropEvent(QPointF(50, 50), Qt.DropAction.CopyAction, mime,
                       Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)


def snapshot(window) -> tuple:
    return (window.tabs.count(), window.tabs.currentIndex(), tuple(window.panel_widgets),
            tuple(window.settings.recent_files()), len(window.bridge.jobs))


@pytest.mark.parametrize("content", [b"", b"\x93NUMPY garbage that is not a header",
                                     b"certainly not numpy"], ids=["empty", "bad-header",
                                                                  "garbage"])
def test_a_broken_dropped_file_names_the_file_and_changes_nothing(main_window, qtbot,
                                                                  tmp_path, content):
    broken = tmp_path / "broken.npy"
    broken.write_bytes(content)
    before = snapshot(main_window)
    drop(main_window, broken)
    qtbot.waitUntil(lambda: bool(main_window.errors), timeout=10_000)
    title, message = main_window.errors[-1]
    assert str(broken) in message
    assert len(message) > len(str(broken)) + 2  # and says what is wrong with it
    assert snapshot(main_window) == before


def test_an_unknown_format_is_refused(main_window, qtbot, tmp_path):
    odd = tmp_path / "notes.qqz"
    odd.write_text("hello")
    before = snapshot(main_window)
    main_window.open_paths([str(odd)])
    qtbot.waitUntil(lambda: bool(main_window.errors), timeout=10_000)
    assert str(odd) in main_window.errors[-1][1]
    assert "unknown format" in main_window.errors[-1][1]
    assert snapshot(main_window) == before


def test_a_good_file_opens_in_the_panel_that_claims_it(main_window, qtbot, tmp_path,
                                                       monkeypatch):
    good = tmp_path / "weights.npy"
    np.save(good, np.arange(12, dtype=np.float32).reshape(3, 4))
    opened = []

    def fake_open_panel(panel_id):
        widget = main_window.panel_widgets.setdefault(panel_id, _Panel(opened))
        if main_window.tabs.indexOf(widget) < 0:
            main_window.tabs.addTab(widget, panel_id)
        return widget

    monkeypatch.setattr(main_window, "open_panel", fake_open_panel)
    drop(main_window, good)
    qtbot.waitUntil(lambda: bool(opened), timeout=10_000)
    assert opened == [str(good)]
    assert main_window.settings.recent_files()[0] == str(good.resolve())
    assert main_window.welcome._recent_layout.count() == 1
    assert not main_window.errors


def _Panel(opened):
    """Stands in for the lab's widget: records what the shell hands it."""
    from PySide6.QtWidgets import QWidget

    class Panel(QWidget):
        def open_file(self, path):
            opened.append(path)
            return True

    return Panel()


def test_a_dropped_array_opens_in_the_lab(main_window, qtbot, tmp_path):
    good = tmp_path / "activations.npy"
    np.save(good, np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32))
    drop(main_window, good)
    qtbot.waitUntil(lambda: "lab" in main_window.panel_widgets or bool(main_window.errors),
                    timeout=20_000)
    assert not main_window.errors, main_window.errors
    qtbot.waitUntil(lambda: bool(main_window.settings.recent_files()), timeout=10_000)
    assert main_window.tabs.currentWidget() is main_window.panel_widgets["lab"]


def test_a_chat_jsonl_with_a_bad_line_opens_in_the_dialogue_panel_listing_it(
        main_window, qtbot, tmp_path):
    """File > Open refused it ("line 9: not JSON"), or opened a valid one in the lab."""
    good = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", ' \
           '"content": "hello"}]}'
    chats = tmp_path / "chats.jsonl"
    chats.write_text("\n".join([good, good, "{not json", good, "[]", good]) + "\n")
    main_window.open_paths([str(chats)])
    qtbot.waitUntil(lambda: "dialogue" in main_window.panel_widgets, timeout=20_000)
    panel = main_window.panel_widgets["dialogue"]
    qtbot.waitUntil(lambda: "transcript" in panel.status.text(), timeout=20_000)
    assert main_window.tabs.currentWidget() is panel and not main_window.errors
    assert "4 transcript(s)" in panel.status.text()
    assert "2 malformed line(s) skipped: lines 3, 5" in panel.status.text()
