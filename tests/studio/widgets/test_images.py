"""Widget snapshots are written whole or not at all, and a failure names the file."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QLabel

from studio.widgets.images import save_widget_png


def test_a_widget_snapshot_is_a_png_of_its_size(make_widget, tmp_path):
    label = make_widget(QLabel, "snapshot")
    label.resize(120, 40)
    target = save_widget_png(label, tmp_path / "shot.png")
    image = QImage(str(target))
    assert target.read_bytes()[:4] == b"\x89PNG" and (image.width(), image.height()) == (120, 40)
    assert [p.name for p in tmp_path.iterdir()] == ["shot.png"]  # no temporary left behind


def test_a_failed_write_names_the_file_and_keeps_the_old_one(make_widget, tmp_path):
    label = make_widget(QLabel, "snapshot")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where a folder is expected")
    with pytest.raises(OSError, match="not-a-folder/shot.png"):
        save_widget_png(label, blocked / "shot.png")
    assert blocked.read_text() == "a file where a folder is expected"
