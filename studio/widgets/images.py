"""PNG snapshots of widgets and images, written atomically (a failed or interrupted export
never leaves half a file where the user's last good one was)."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QBuffer, QIODevice
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QWidget

from engine.atomic import write_bytes_atomic


def png_bytes(picture: QImage | QPixmap) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not picture.save(buffer, "PNG"):
        raise OSError("could not encode the PNG")
    return bytes(buffer.data())


def save_widget_png(widget: QWidget, path: str | os.PathLike) -> Path:
    """The widget as shown on screen, as a PNG at ``path``."""
    target = Path(path)
    try:
        return write_bytes_atomic(target, png_bytes(widget.grab()))
    except OSError as exc:
        raise OSError(f"{target}: could not write the PNG ({exc})") from None
