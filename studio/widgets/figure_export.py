"""Figures drawn for the page, not grabbed from the screen: a panel's view rendered at the
resolution the user chooses (192 dpi, twice the screen's, by default), optionally with its
information line as a caption, into PNG, SVG or PDF, with its provenance
(``engine.provenance``) inside the file.

``ExportDialog`` is the export dialog every panel shows (file, format, DPI, caption);
``export_widget`` writes what it chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QBuffer, QIODevice, QMarginsF, QPoint, QRect, QSize, QSizeF, Qt
from PySide6.QtGui import QColor, QFont, QImage, QPageSize, QPainter, QPdfWriter
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from engine import provenance as provenance_records
from studio.widgets.images import png_bytes

SCREEN_DPI = 96
DEFAULT_DPI = 2 * SCREEN_DPI
FORMATS = {"png": "PNG image (*.png)", "svg": "SVG drawing (*.svg)", "pdf": "PDF (*.pdf)"}
CAPTION_POINT_SIZE = 9
CAPTION_PADDING = 6


@dataclass(frozen=True)
class ExportChoice:
    path: Path
    dpi: int = DEFAULT_DPI
    caption: bool = False


def export_widget(widget: QWidget, choice: ExportChoice, provenance: dict,
                  caption: str = "") -> Path:
    """Write ``widget`` as ``choice`` asks (format from the suffix), provenance inside."""
    fmt = choice.path.suffix.lower().lstrip(".")
    text = caption if choice.caption else ""
    if fmt == "png":
        data = render_png(widget, choice.dpi, text)
    elif fmt == "svg":
        data = render_svg(widget, text)
    elif fmt == "pdf":
        data = render_pdf(widget, choice.dpi, text)
    else:
        raise ValueError(f"{choice.path}: export as .png, .svg or .pdf")
    record = {**provenance, "view": {**provenance.get("view", {}), "dpi": choice.dpi}}
    try:
        return provenance_records.write(choice.path, data, record)
    except OSError as exc:
        raise OSError(f"{choice.path}: could not write the figure ({exc.strerror or exc})"
                      ) from None


def export_image(image: QImage, choice: ExportChoice, provenance: dict,
                 caption: str = "") -> Path:
    """A picture the panel composed itself (video frames, a 3-D snapshot) exported as a
    figure: at its own pixels (scaled by dpi / 96), caption and provenance as for a widget."""
    return export_widget(_Picture(image), choice, provenance, caption)


class _Picture(QWidget):
    """An image at its own size, for ``export_widget`` to draw."""

    def __init__(self, image: QImage) -> None:
        super().__init__()
        self.image = image
        self.resize(image.width(), image.height())

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        painter.drawImage(self.rect(), self.image)
        painter.end()


def render_png(widget: QWidget, dpi: int, caption: str = "") -> bytes:
    """The widget painted at ``dpi`` (fonts, lines and legends in proportion: more pixels,
    not a bigger layout), with ``caption`` under it."""
    scale = dpi / SCREEN_DPI
    size = _figure_size(widget, caption)
    width, height = round(size.width() * scale), round(size.height() * scale)
    image = QImage(width, height, QImage.Format.Format_ARGB32)
    if image.isNull():  # Qt could not allocate it: say how big it would have been
        raise ValueError(f"a {width}x{height} px figure at {dpi} dpi is more than this "
                         "machine can draw; choose a lower resolution")
    image.setDevicePixelRatio(scale)
    image.fill(QColor("white"))
    dots_per_metre = round(dpi / 0.0254)
    image.setDotsPerMeterX(dots_per_metre)
    image.setDotsPerMeterY(dots_per_metre)
    _paint(QPainter(image), widget, caption)
    return png_bytes(image)


def render_svg(widget: QWidget, caption: str = "") -> bytes:
    from PySide6.QtSvg import QSvgGenerator

    size = _figure_size(widget, caption)
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    generator = QSvgGenerator()
    generator.setOutputDevice(buffer)
    generator.setSize(size)
    generator.setViewBox(QRect(QPoint(0, 0), size))
    generator.setTitle(widget.windowTitle() or "Studio figure")
    _paint(QPainter(generator), widget, caption)
    return bytes(buffer.data())


def render_pdf(widget: QWidget, dpi: int, caption: str = "") -> bytes:
    size = _figure_size(widget, caption)
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QPdfWriter(buffer)
    writer.setCreator("Studio")
    writer.setResolution(dpi)
    points = QSizeF(size.width() * 72 / SCREEN_DPI, size.height() * 72 / SCREEN_DPI)
    writer.setPageSize(QPageSize(points, QPageSize.Unit.Point, "figure",
                                 QPageSize.SizeMatchPolicy.ExactMatch))
    writer.setPageMargins(QMarginsF(0, 0, 0, 0))
    painter = QPainter(writer)
    painter.scale(dpi / SCREEN_DPI, dpi / SCREEN_DPI)
    _paint(painter, widget, caption)
    return bytes(buffer.data())


def _figure_size(widget: QWidget, caption: str) -> QSize:
    return QSize(widget.width(), widget.height() + _caption_height(widget, caption))


def _caption_height(widget: QWidget, caption: str) -> int:
    if not caption:
        return 0
    font = _caption_font(widget)
    from PySide6.QtGui import QFontMetrics

    metrics = QFontMetrics(font)
    lines = metrics.boundingRect(QRect(0, 0, widget.width() - 2 * CAPTION_PADDING, 10_000),
                                 int(Qt.TextFlag.TextWordWrap), caption)
    return lines.height() + 2 * CAPTION_PADDING


def _caption_font(widget: QWidget) -> QFont:
    """In logical pixels: a point size would be scaled again by the page's own resolution."""
    font = QFont(widget.font())
    font.setPixelSize(round(CAPTION_POINT_SIZE * SCREEN_DPI / 72))
    return font


def _paint(painter: QPainter, widget: QWidget, caption: str) -> None:
    """The widget and its caption through ``painter``, which this ends."""
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        QWidget.render(widget, painter, QPoint(0, 0))  # pyqtgraph views redefine render()
        if caption:
            painter.setPen(QColor("black"))
            painter.setFont(_caption_font(widget))
            area = QRect(CAPTION_PADDING, widget.height() + CAPTION_PADDING,
                         widget.width() - 2 * CAPTION_PADDING,
                         _caption_height(widget, caption) - 2 * CAPTION_PADDING)
            painter.fillRect(QRect(0, widget.height(), widget.width(),
                                   _caption_height(widget, caption)), QColor("white"))
            painter.drawText(area, int(Qt.TextFlag.TextWordWrap), caption)
    finally:
        painter.end()


class ExportDialog(QDialog):
    """Where, in which format, at which resolution, with or without the caption."""

    def __init__(self, parent: QWidget | None, title: str, default_name: str,
                 caption: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        form = QFormLayout(self)
        row = QHBoxLayout()
        self.path_edit = QLineEdit(str(Path.cwd() / default_name))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row.addWidget(self.path_edit, 1)
        row.addWidget(browse)
        form.addRow("File", row)
        self.dpi = QSpinBox()
        self.dpi.setRange(SCREEN_DPI, 1200)
        self.dpi.setSingleStep(SCREEN_DPI)
        self.dpi.setValue(DEFAULT_DPI)
        self.dpi.setSuffix(" dpi")
        self.dpi.setToolTip("PNG pixels per inch (96 is the screen's); SVG is drawn as "
                            "vectors, PDF at this resolution for images")
        form.addRow("Resolution", self.dpi)
        self.caption = QCheckBox("Add the information line as a caption")
        self.caption.setToolTip(caption or "This view has no information line")
        self.caption.setEnabled(bool(caption))
        form.addRow("", self.caption)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _browse(self) -> None:
        path, chosen = QFileDialog.getSaveFileName(self, self.windowTitle(),
                                                   self.path_edit.text(),
                                                   ";;".join(FORMATS.values()))
        if path:
            suffix = next((k for k, v in FORMATS.items() if v == chosen), "png")
            self.path_edit.setText(path if Path(path).suffix else f"{path}.{suffix}")

    def choice(self) -> ExportChoice:
        return ExportChoice(Path(self.path_edit.text()).expanduser(), self.dpi.value(),
                            self.caption.isChecked())


def ask_export(parent: QWidget | None, title: str, default_name: str,
               caption: str = "") -> ExportChoice | None:
    """The export dialog (modal: an export is a short, deliberate step); ``None`` if
    cancelled."""
    dialog = ExportDialog(parent, title, default_name, caption)
    return dialog.choice() if dialog.exec() == QDialog.DialogCode.Accepted else None
