"""A parameter form built from a method's JSON Schema, and a picker for the method's inputs.

``SchemaForm(schema, values)`` lays out one editor per field (``studio.widgets.schema``
decides which): a check box for a bool, a drop-down for an enum, a text box for a number (so
``3e-4`` can be typed; the range is its placeholder), a text box with a browse button for a
path, JSON for anything else. Descriptions are tooltips. ``validate()`` checks bounds before
the engine does; ``set_errors`` shows the engine's messages under the fields they concern.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QToolButton,
    QWidget,
)

from studio.widgets import schema as sch

ERROR_STYLE = "color: #c0392b;"
INVALID_STYLE = "border: 1px solid #c0392b; border-radius: 2px;"
NONE_LABEL = "(none)"


class _Editor:
    """One field's widget, reading and writing Python values."""

    def __init__(self, spec: sch.FieldSpec, on_change: Callable[[], None]) -> None:
        self.spec = spec
        self.widget, self.focus = self._build(on_change)
        tooltip = spec.description
        if spec.bounds_text():
            tooltip = f"{tooltip}\n({spec.bounds_text()})" if tooltip else spec.bounds_text()
        self.widget.setToolTip(tooltip)

    def _build(self, on_change: Callable[[], None]) -> tuple[QWidget, QWidget]:
        spec = self.spec
        if spec.kind == sch.BOOL and not spec.optional:
            box = QCheckBox()
            box.toggled.connect(on_change)
            return box, box
        if spec.kind in (sch.CHOICE, sch.BOOL):
            combo = QComboBox()
            choices = spec.choices if spec.kind == sch.CHOICE else (True, False)
            if spec.optional:
                combo.addItem(NONE_LABEL, None)
            for choice in choices:
                combo.addItem(str(choice), choice)
            combo.currentIndexChanged.connect(on_change)
            return combo, combo
        line = QLineEdit()
        line.textChanged.connect(on_change)
        if spec.kind == sch.SECRET:
            line.setEchoMode(QLineEdit.EchoMode.Password)
        placeholder = spec.bounds_text() or ("JSON" if spec.kind == sch.JSON else "")
        if spec.optional:
            placeholder = f"none{f' or {placeholder}' if placeholder else ''}"
        line.setPlaceholderText(placeholder)
        if spec.kind != sch.PATH:
            return line, line
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(line, 1)
        browse = QToolButton()
        browse.setText("…")
        browse.setToolTip("choose a folder" if spec.path_mode == "dir" else "choose a file")
        browse.clicked.connect(lambda: _browse(row, line, spec.path_mode))
        layout.addWidget(browse)
        row.browse_button = browse  # found by tests and by keyboard users (Tab)
        return row, line

    def get(self) -> Any:
        """The value shown; raises ``ValueError`` for text that does not parse."""
        if isinstance(self.focus, QCheckBox):
            return self.focus.isChecked()
        if isinstance(self.focus, QComboBox):
            return self.focus.currentData()
        return self.spec.parse(self.focus.text())

    def raw(self) -> Any:
        try:
            return self.get()
        except ValueError:
            return self.focus.text()

    def set(self, value: Any) -> None:
        if isinstance(self.focus, QCheckBox):
            self.focus.setChecked(bool(value))
        elif isinstance(self.focus, QComboBox):
            index = self.focus.findData(value)
            if index < 0 and value is not None:  # a value the schema does not list: show it
                self.focus.addItem(str(value), value)
                index = self.focus.count() - 1
            self.focus.setCurrentIndex(max(index, 0))
        else:
            self.focus.setText(self.spec.to_text(value))


def _browse(parent: QWidget, line: QLineEdit, mode: str) -> None:
    """A non-modal file dialog (``open``, never ``exec`` inside the async loop)."""
    dialog = QFileDialog(parent, "Choose a folder" if mode == "dir" else "Choose a file",
                         line.text())
    dialog.setFileMode(QFileDialog.FileMode.Directory if mode == "dir"
                       else QFileDialog.FileMode.AnyFile)
    dialog.fileSelected.connect(line.setText)
    dialog.finished.connect(dialog.deleteLater)
    dialog.open()


class SchemaForm(QWidget):
    """The parameters of one method. ``changed`` fires on every edit (and ``set_values``)."""

    changed = Signal()

    def __init__(self, schema: dict, values: dict | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.schema = schema
        self.fields = sch.parse_schema(schema)
        self._editors: dict[str, _Editor] = {}
        self._error_labels: dict[str, QLabel] = {}
        self._updating = False
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setColumnStretch(1, 1)
        grid.setVerticalSpacing(3)
        self._general_error = _error_label()
        grid.addWidget(self._general_error, 0, 0, 1, 2)
        for index, spec in enumerate(self.fields):
            row = 1 + 2 * index  # the field, then its (usually hidden) message below it
            editor = _Editor(spec, self._on_edit)
            label = QLabel(spec.label + (" *" if spec.required else ""))
            label.setToolTip(editor.widget.toolTip())
            label.setBuddy(editor.focus)
            error = _error_label()
            grid.addWidget(label, row, 0)
            grid.addWidget(editor.widget, row, 1)
            grid.addWidget(error, row + 1, 1)
            self._editors[spec.name] = editor
            self._error_labels[spec.name] = error
        if not self.fields:
            grid.addWidget(QLabel("This method takes no parameters."), 1, 0, 1, 2)
        grid.setRowStretch(max(2 * len(self.fields) + 1, 2), 1)
        self.set_values({spec.name: spec.default for spec in self.fields} | (values or {}))

    # -- values --------------------------------------------------------------------------

    def values(self) -> dict:
        """The parameters as the engine takes them (text that does not parse is kept as
        text, so the engine names the problem if ``validate`` was skipped)."""
        return {name: editor.raw() for name, editor in self._editors.items()}

    def set_values(self, values: dict) -> None:
        """Fill the named fields (unknown names are ignored); clears shown errors."""
        self._updating = True
        try:
            for name, value in values.items():
                if name in self._editors:
                    self._editors[name].set(value)
        finally:
            self._updating = False
        self.set_errors({})
        self.changed.emit()

    def editor(self, name: str) -> QWidget:
        """The input widget of a field (a check box, combo box or line edit)."""
        return self._editors[name].focus

    # -- errors --------------------------------------------------------------------------

    def validate(self) -> dict[str, str]:
        """Check every field against the schema; shows and returns ``{field: message}``."""
        errors = {}
        for name, editor in self._editors.items():
            try:
                message = editor.spec.check(editor.get())
            except ValueError as exc:
                message = str(exc)
            if message:
                errors[name] = message
        self.set_errors(errors)
        return errors

    def submittable(self) -> dict | None:
        """The parameters set (empty fields left to the method's defaults) when every field
        checks out; None, with the messages shown, when one does not."""
        if self.validate():
            return None
        return {name: value for name, value in self.values().items() if value is not None}

    def set_errors(self, errors: dict[str, str]) -> None:
        """Show messages under their fields; names the form lacks go to the top line."""
        general = []
        for name, message in errors.items():
            if name not in self._editors:
                general.append(f"{name}: {message}" if name else message)
        for name, label in self._error_labels.items():
            message = errors.get(name, "")
            label.setText(message)
            label.setVisible(bool(message))
            self._editors[name].focus.setStyleSheet(INVALID_STYLE if message else "")
        self._general_error.setText("\n".join(general))
        self._general_error.setVisible(bool(general))

    def errors(self) -> dict[str, str]:
        """What is shown now (field name -> message)."""
        shown = {name: label.text() for name, label in self._error_labels.items()
                 if label.text()}
        if self._general_error.text():
            shown[""] = self._general_error.text()
        return shown

    def _on_edit(self, *_args) -> None:
        if self._updating:
            return
        self._clear_error_of_sender()
        self.changed.emit()

    def _clear_error_of_sender(self) -> None:
        """Editing a field takes its stale message away (the next validate shows new ones)."""
        sender = self.sender()
        for name, editor in self._editors.items():
            if editor.focus is sender or sender is None:
                self._error_labels[name].setVisible(False)
                self._error_labels[name].setText("")
                editor.focus.setStyleSheet("")


def _error_label() -> QLabel:
    label = QLabel()
    label.setStyleSheet(ERROR_STYLE)
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    label.setVisible(False)
    return label


class InputPicker(QWidget):
    """The inputs of a method (name -> kind): each a path or an earlier run's artifact.

    ``values()`` gives refs the engine resolves: a file path or ``run:<id>/<artifact>``.
    ``add_candidate`` offers an artifact (the lab adds those it has seen runs produce).
    """

    changed = Signal()

    def __init__(self, inputs: dict[str, str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.inputs = dict(inputs)
        self._combos: dict[str, QComboBox] = {}
        self._error_labels: dict[str, QLabel] = {}
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setColumnStretch(1, 1)
        for row, (name, kind) in enumerate(self.inputs.items()):
            combo = QComboBox()
            combo.setEditable(True)
            combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
            combo.lineEdit().setPlaceholderText(f"{kind}: a file or run:<id>/<artifact>")
            combo.setToolTip(f"{name} ({kind}): a file, or an artifact of an earlier run")
            combo.currentTextChanged.connect(lambda _text, n=name: self._on_edit(n))
            browse = QToolButton()
            browse.setText("…")
            browse.setToolTip("choose a file")
            browse.clicked.connect(
                lambda _checked=False, c=combo: _browse(self, c.lineEdit(), "file"))
            error = _error_label()
            label = QLabel(name)
            label.setBuddy(combo)
            grid.addWidget(label, 2 * row, 0)
            grid.addWidget(combo, 2 * row, 1)
            grid.addWidget(browse, 2 * row, 2)
            grid.addWidget(error, 2 * row + 1, 1, 1, 2)
            self._combos[name] = combo
            self._error_labels[name] = error

    def add_candidate(self, ref: str, label: str = "") -> None:
        """Offer ``ref`` (``run:<id>/<artifact>`` or a path) in every input's list."""
        for combo in self._combos.values():
            if combo.findData(ref) < 0:
                text = combo.currentText()
                combo.addItem(label or ref, ref)
                combo.setEditText(text)

    def values(self) -> dict[str, str]:
        refs = {}
        for name, combo in self._combos.items():
            index = combo.findText(combo.currentText())
            ref = combo.itemData(index) if index >= 0 else None
            ref = ref or combo.currentText().strip()
            if ref:
                refs[name] = ref
        return refs

    def set_values(self, refs: dict[str, str]) -> None:
        for name, ref in refs.items():
            if name in self._combos:
                self._combos[name].setEditText(ref)

    def set_errors(self, errors: dict[str, str]) -> None:
        for name, label in self._error_labels.items():
            label.setText(errors.get(name, ""))
            label.setVisible(bool(errors.get(name)))

    def _on_edit(self, name: str) -> None:
        self._error_labels[name].setVisible(False)
        self.changed.emit()
