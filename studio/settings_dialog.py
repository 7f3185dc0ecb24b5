"""Settings: workspace folder, device preference, default cluster address, theme."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.settings import DEVICES, THEMES, Settings

CLUSTER_HINT = "local, auto, host:port or ray://host:port"


@dataclass(frozen=True)
class Choices:
    workspace: str
    device: str
    cluster: str
    theme: str


class SettingsDialog(QDialog):
    """Opened with ``open()`` (never ``exec()``: the asyncio loop keeps running);
    ``applied`` carries the new choices when the user presses OK."""

    applied = Signal(object)  # Choices

    def __init__(self, settings: Settings, workspace: str, parent: QWidget | None = None
                 ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setMinimumWidth(520)
        layout = QVBoxLayout(self)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)

        self.workspace_edit = QLineEdit(workspace)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.workspace_edit, 1)
        row.addWidget(browse)
        form.addRow("Workspace folder", row)
        form.addRow("", _note("Runs, checkpoints and autosaved edits live here. Changing it "
                              "restarts the engine."))

        self.device_combo = QComboBox()
        self.device_combo.addItems(DEVICES)
        self.device_combo.setCurrentText(settings.device)
        form.addRow("Device", self.device_combo)
        form.addRow("", _note("auto uses a GPU when the engine finds one."))

        self.cluster_edit = QLineEdit(settings.cluster)
        self.cluster_edit.setPlaceholderText(CLUSTER_HINT)
        form.addRow("Default cluster", self.cluster_edit)
        form.addRow("", _note(f"Stored for later versions ({CLUSTER_HINT}); jobs run on this "
                              f"machine for now."))

        self.theme_combo = QComboBox()
        self.theme_combo.addItems(THEMES)
        self.theme_combo.setCurrentText(settings.theme)
        form.addRow("Theme", self.theme_combo)
        layout.addLayout(form)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def choices(self) -> Choices:
        return Choices(workspace=self.workspace_edit.text().strip(),
                       device=self.device_combo.currentText(),
                       cluster=self.cluster_edit.text().strip() or "local",
                       theme=self.theme_combo.currentText())

    def _accept(self) -> None:
        self.applied.emit(self.choices())
        self.accept()

    def _browse(self) -> None:
        dialog = QFileDialog(self, "Workspace folder", self.workspace_edit.text())
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        dialog.fileSelected.connect(self.workspace_edit.setText)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()


def _note(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("emptyNote")
    label.setWordWrap(True)
    return label
