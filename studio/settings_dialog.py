"""Settings: workspace folder, device preference, default cluster address, theme, and the
readers' resource budgets."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.settings import DEVICES, SHELL_BUDGETS, THEMES, Settings

CLUSTER_HINT = "local, auto, host:port or ray://host:port"
MB = 1024 * 1024
# (environment variable, label, shown unit, stored value per shown unit)
BUDGET_FIELDS = (
    ("STUDIO_MAX_DECOMPRESSED_BYTES", "Decompressed size", " MB", MB),
    ("STUDIO_MAX_COMPRESSION_RATIO", "Compression ratio", " x", 1),
    ("STUDIO_MAX_JSON_BYTES", "JSON or text file", " MB", MB),
    ("STUDIO_MAX_JSON_DEPTH", "JSON nesting", " levels", 1),
    ("STUDIO_MAX_IMAGE_PIXELS", "Image size", " Mpixels", MB),
    ("STUDIO_MAX_DESCRIPTOR_ATOMS", "Descriptor atoms", " atoms", 1),
    ("STUDIO_MAX_DESCRIPTOR_S", "Descriptor time per file", " s", 1),
    ("STUDIO_MAX_FRAME_BYTES", "Image frame (float32)", " MB", MB),
    ("STUDIO_MAX_TEXT_BYTES", "Design or topology text", " MB", MB),
    ("STUDIO_MAX_ELEMENTS", "Declared records", " elements", 1),
)


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
        layout.addWidget(self._budget_form(settings))
        self.settings = settings

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

    def _budget_form(self, settings: Settings) -> QWidget:
        """One field per reader budget; a file over one is refused with its name, so a user
        with larger files raises it here."""
        from engine.io.limits import BUDGETS

        box = QWidget()
        form = QFormLayout(box)
        form.setContentsMargins(0, 8, 0, 0)
        form.addRow(_note("Budgets for reading files: a file over one is refused, naming "
                          "the budget, instead of exhausting memory. New values apply to "
                          "files opened from now on, and to the engine when it restarts."))
        defaults = {budget.env: budget.default for budget in BUDGETS}
        stored = settings.budgets()
        self.budget_spins: dict[str, QDoubleSpinBox] = {}
        for env, label, unit, scale in BUDGET_FIELDS:
            spin = QDoubleSpinBox()
            spin.setDecimals(1 if unit == " s" else 0)
            spin.setRange(1, 1e9)
            spin.setSuffix(unit)
            spin.setValue(stored.get(env, defaults[env]) / scale)
            spin.setToolTip(f"{env} (default {defaults[env] / scale:g}{unit})")
            if env in SHELL_BUDGETS:
                spin.setEnabled(False)
                spin.setToolTip(f"set by ${env} in the shell that started Studio")
            self.budget_spins[env] = spin
            form.addRow(label, spin)
        return box

    def budgets(self) -> dict[str, float]:
        """The budgets as entered, in the engine's units (bytes, pixels, levels...)."""
        return {env: self.budget_spins[env].value() * scale
                for env, _label, _unit, scale in BUDGET_FIELDS
                if self.budget_spins[env].isEnabled()}

    def _accept(self) -> None:
        self.settings.set_budgets(self.budgets())
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
