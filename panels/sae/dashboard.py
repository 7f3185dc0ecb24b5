"""A feature's dashboard drawn for the page, not grabbed from the screen.

The feature page on screen scrolls its contexts, has edit boxes and the Steer box; a figure
needs none of these and all of the contexts. ``FeatureDashboard`` lays out what the page
shows (title, measures, label and note, every top context as shaded text, the activation
histogram, decoder neighbours and cross-seed matches) at a fixed page width and its full
height, so ``studio.widgets.figure_export`` draws all of it, with no scroll bars.
"""

from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import QCoreApplication, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from panels.sae.model import FeaturePage
from panels.widgets.token_text import token_colour
from studio.widgets.plot_view import PlotSpecView

PAGE_WIDTH_PX = 900
HISTOGRAM_HEIGHT_PX = 240


class FeatureDashboard(QWidget):
    """One feature of one SAE, laid out for a figure (never shown on screen)."""

    def __init__(self, sae: str, page: FeaturePage, histogram: dict, measures: str) -> None:
        super().__init__()
        self.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
        # Paper whatever the window's theme: black on white, the plot drawn on white too (it
        # takes its colours from the palette it is built with); labels' text colour set by a
        # sheet, since an application style sheet (the dark theme's) keeps them light.
        paper = self.palette()
        for role, colour in ((QPalette.ColorRole.Window, "white"),
                             (QPalette.ColorRole.Base, "white"),
                             (QPalette.ColorRole.WindowText, "black"),
                             (QPalette.ColorRole.Text, "black")):
            paper.setColor(role, QColor(colour))
        self.setPalette(paper)
        self.setAutoFillBackground(True)
        self.setStyleSheet("QLabel { color: #000000; }")
        layout = QVBoxLayout(self)
        title = page.label and f" · {page.label}"
        layout.addWidget(_text(f"<h2>{html.escape(f'{sae} · feature {page.feature}{title}')}"
                               "</h2>"))
        layout.addWidget(_text(html.escape(measures)))
        if page.note:
            layout.addWidget(_text(f"<i>{html.escape(page.note)}</i>"))
        layout.addWidget(_text("<b>Top activating contexts</b>"))
        self.contexts = _text(contexts_html(page.contexts))
        layout.addWidget(self.contexts)
        self.histogram = PlotSpecView(parent=self)
        self.histogram.set_spec(histogram)
        self.histogram.setFixedHeight(HISTOGRAM_HEIGHT_PX)
        layout.addWidget(self.histogram)
        lists = QHBoxLayout()
        lists.addWidget(_text("<b>Decoder neighbours</b><br>" + ("<br>".join(
            f"feature {other}: cosine {cosine:.3f}" for other, cosine in page.neighbours)
            or "—")), 1, Qt.AlignmentFlag.AlignTop)
        lists.addWidget(_text("<b>Best match in other seeds</b><br>" + ("<br>".join(
            f"{html.escape(name)}: feature {other} (cosine {cosine:.3f})"
            for name, other, cosine in page.matches) or "—")), 1, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(lists)

    def lay_out(self) -> None:
        """Size it to the page width and the height its content needs, then settle the
        layout (and the plot's scene) off screen so it draws as laid out."""
        self.setFixedWidth(PAGE_WIDTH_PX)
        self.resize(PAGE_WIDTH_PX, self.layout().totalHeightForWidth(PAGE_WIDTH_PX))
        self.show()
        for _round in range(3):  # nested layouts (the plot's) settle one level per round
            QCoreApplication.sendPostedEvents(None, 0)
        self.resize(PAGE_WIDTH_PX, self.layout().totalHeightForWidth(PAGE_WIDTH_PX))
        QCoreApplication.sendPostedEvents(None, 0)


def contexts_html(contexts: dict | None) -> str:
    """Every context of a ``token_heat`` view as shaded running text (a ``None`` value
    separates contexts), shaded as the page's token view shades them."""
    if not contexts or not contexts.get("tokens"):
        return "<i>no contexts stored</i>"
    values = np.asarray([np.nan if v is None else v for v in contexts["values"]], dtype=float)
    finite = np.abs(values[np.isfinite(values)])
    scale = float(np.quantile(finite, 0.98)) if finite.size else 0.0
    symmetric = bool(contexts.get("symmetric", bool(np.nanmin(values, initial=0.0) < 0)))
    parts = []
    for token, value in zip(contexts["tokens"], values, strict=True):
        if not np.isfinite(value):  # the line between two contexts
            parts.append("<br>")
            continue
        text = html.escape(str(token)).replace("\n", "<br>")
        colour = token_colour(float(value), scale, symmetric).name()
        parts.append(f'<span style="background-color:{colour}">{text}</span>')
    legend = (f"colour: {html.escape(str(contexts.get('label') or 'activation'))}, white at 0, "
              f"saturated at {'±' if symmetric else ''}{scale:.3g}")
    return ('<div style="font-family:monospace; white-space:pre-wrap; color:#000000">'
            + "".join(parts) + f'</div><div style="color:#555555">{legend}</div>')


def _text(rich: str) -> QLabel:
    label = QLabel(rich)
    label.setTextFormat(Qt.TextFormat.RichText)
    label.setWordWrap(True)
    return label
