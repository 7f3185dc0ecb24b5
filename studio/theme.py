"""Dark and light themes: Qt's Fusion style, a palette, and a style sheet from ``resources/``."""

from __future__ import annotations

import logging

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from studio.paths import resource, resources_dir

log = logging.getLogger("studio.theme")

# role -> (dark, light)
_COLOURS = {
    QPalette.ColorRole.Window: ("#1f2024", "#f3f4f6"),
    QPalette.ColorRole.WindowText: ("#e4e6eb", "#1f2328"),
    QPalette.ColorRole.Base: ("#17181b", "#ffffff"),
    QPalette.ColorRole.AlternateBase: ("#222328", "#f6f8fa"),
    QPalette.ColorRole.ToolTipBase: ("#2b2d33", "#ffffff"),
    QPalette.ColorRole.ToolTipText: ("#e4e6eb", "#1f2328"),
    QPalette.ColorRole.PlaceholderText: ("#8b9099", "#8c959f"),
    QPalette.ColorRole.Text: ("#e4e6eb", "#1f2328"),
    QPalette.ColorRole.Button: ("#2a2c31", "#f6f8fa"),
    QPalette.ColorRole.ButtonText: ("#e4e6eb", "#1f2328"),
    QPalette.ColorRole.BrightText: ("#ff6b6b", "#cf222e"),
    QPalette.ColorRole.Highlight: ("#3d7bd9", "#0969da"),
    QPalette.ColorRole.HighlightedText: ("#ffffff", "#ffffff"),
    QPalette.ColorRole.Link: ("#6aa7ff", "#0969da"),
    QPalette.ColorRole.Mid: ("#3a3c42", "#d0d7de"),
    QPalette.ColorRole.Midlight: ("#33353b", "#e1e4e8"),
    QPalette.ColorRole.Dark: ("#121316", "#afb8c1"),
    QPalette.ColorRole.Light: ("#3f4148", "#ffffff"),
    QPalette.ColorRole.Shadow: ("#000000", "#8c959f"),
}
_DISABLED_TEXT = ("#6b7078", "#8c959f")

# Colours of job states, readable on both themes.
STATE_COLOURS = {"queued": "#8b949e", "running": "#3d8bfd", "cancelling": "#d29922",
                 "succeeded": "#2ea043", "failed": "#f85149", "cancelled": "#a371f7"}
ENGINE_COLOURS = {"starting": "#d29922", "ready": "#2ea043", "busy": "#3d8bfd",
                  "restarting": "#d29922", "stopped": "#f85149"}


def palette(theme: str) -> QPalette:
    which = 0 if theme == "dark" else 1
    result = QPalette()
    for role, colours in _COLOURS.items():
        result.setColor(role, QColor(colours[which]))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText,
                 QPalette.ColorRole.ButtonText):
        result.setColor(QPalette.ColorGroup.Disabled, role, QColor(_DISABLED_TEXT[which]))
    return result


def apply_theme(app: QApplication, theme: str) -> None:
    """Fusion + the theme's palette + ``resources/themes/<theme>.qss``."""
    app.setStyle("Fusion")
    app.setPalette(palette(theme))
    path = resource("themes", f"{theme}.qss")
    try:
        # url(@RESOURCES@/icons/x.svg) in a theme names a file under resources/
        sheet = path.read_text(encoding="utf-8").replace("@RESOURCES@", resources_dir().as_posix())
        app.setStyleSheet(sheet)
    except OSError as exc:
        log.warning("theme %s: cannot read %s (%s)", theme, path, exc)
        app.setStyleSheet("")
    app.setProperty("studioTheme", theme)
