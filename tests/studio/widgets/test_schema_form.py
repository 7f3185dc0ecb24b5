"""SchemaForm: widgets from real pydantic schemas, values round-trip, bounds checked, errors
shown inline; the engine's validation message split per field."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field, SecretStr, ValidationError
from PySide6.QtWidgets import QCheckBox, QComboBox, QLineEdit

from engine.api import MethodParams
from engine.jobs import format_validation_error
from engine.methods.diagnostics import CountParams
from studio.widgets import schema as sch
from studio.widgets.schema_form import InputPicker, SchemaForm


class Colour(str, Enum):
    red = "red"
    blue = "blue"


class ManyParams(MethodParams):
    loss: Literal["logistic", "cross_entropy"] = Field("logistic", description="which loss")
    colour: Colour = Colour.red
    lr: float = Field(0.1, gt=0, lt=10, description="step size")
    batch: int | None = Field(None, ge=1, description="none = full batch")
    mode: Literal["a", "b"] | None = None
    data_path: str = ""
    out_dir: Path = Path("out")
    etas: list[float] = [0.1, 1.0]
    api_key: SecretStr = SecretStr("")
    verbose: bool = True
    name: str = Field(description="required, no default")


def test_parse_schema_reads_kinds_bounds_and_choices():
    fields = {f.name: f for f in sch.parse_schema(ManyParams.model_json_schema())}
    assert fields["loss"].kind == sch.CHOICE
    assert fields["loss"].choices == ("logistic", "cross_entropy")
    assert fields["colour"].choices == ("red", "blue")  # through $defs
    assert (fields["lr"].kind, fields["lr"].exclusive_minimum) == (sch.NUMBER, 0)
    assert fields["batch"].kind == sch.INTEGER and fields["batch"].optional
    assert fields["mode"].kind == sch.CHOICE and fields["mode"].optional
    assert (fields["data_path"].kind, fields["data_path"].path_mode) == (sch.PATH, "file")
    assert (fields["out_dir"].kind, fields["out_dir"].path_mode) == (sch.PATH, "dir")
    assert fields["etas"].kind == sch.JSON
    assert fields["api_key"].kind == sch.SECRET
    assert fields["verbose"].kind == sch.BOOL
    assert fields["name"].required and fields["name"].default is None
    assert fields["lr"].bounds_text() == "> 0, < 10"
    assert sch.label_for("delay_s") == "delay (s)"


def test_errors_from_the_engines_message_land_on_fields():
    with pytest.raises(ValidationError) as caught:
        CountParams.model_validate({"steps": 0, "delay_s": 99, "speling": 1})
    fields, general = sch.errors_from_message(format_validation_error("diag.count",
                                                                      caught.value))
    assert set(fields) == {"steps", "delay_s", "speling"}
    assert "greater than or equal to 1" in fields["steps"]
    assert fields["speling"] == "unknown parameter"
    assert general == []
    fields, general = sch.errors_from_message(
        "invalid parameters for eos.train:\n  (parameters): Value error, logistic is binary")
    assert fields == {} and general == ["Value error, logistic is binary"]
    fields, _ = sch.errors_from_message("input data: /x.npy: no such file or folder")
    assert fields == {"data": "/x.npy: no such file or folder"}


def test_form_builds_the_right_widgets_for_a_real_method(make_widget):
    form = make_widget(SchemaForm, CountParams.model_json_schema())
    assert isinstance(form.editor("steps"), QLineEdit)
    assert form.editor("steps").placeholderText() == "≥ 1, ≤ 10000000"
    assert "steps to count" in form.editor("steps").toolTip()
    assert form.values() == {"steps": 20, "delay_s": 0.05}


def test_form_widgets_for_every_kind_and_round_trip(make_widget):
    form = make_widget(SchemaForm, ManyParams.model_json_schema(), {"name": "run one"})
    assert isinstance(form.editor("loss"), QComboBox)
    assert isinstance(form.editor("verbose"), QCheckBox)
    assert isinstance(form.editor("mode"), QComboBox) and form.editor("mode").itemData(0) is None
    assert form.editor("api_key").echoMode() == QLineEdit.EchoMode.Password
    assert form._editors["data_path"].widget.browse_button.isVisible() is False  # not shown
    values = {"loss": "cross_entropy", "colour": "blue", "lr": 0.0003, "batch": 32,
              "mode": "b", "data_path": "/data/x.npy", "out_dir": "/tmp/out",
              "etas": [1, 10, 100], "api_key": "secret", "verbose": False, "name": "x"}
    form.set_values(values)
    assert form.values() == values
    assert form.editor("lr").text() == "0.0003"
    form.set_values({"batch": None, "mode": None})
    assert form.values()["batch"] is None and form.values()["mode"] is None
    ManyParams.model_validate(form.values())  # what the form gives, the engine accepts


def test_validate_rejects_out_of_bounds_and_bad_text(make_widget, qtbot):
    form = make_widget(SchemaForm, ManyParams.model_json_schema(), {"name": "n"})
    form.show()
    assert form.validate() == {}
    form.set_values({"lr": 0, "batch": 0})
    form.editor("etas").setText("[1, 2")
    errors = form.validate()
    assert errors["lr"] == "must be greater than 0"
    assert errors["batch"] == "must be at least 1"
    assert errors["etas"].startswith("not valid JSON")
    assert form._error_labels["lr"].isVisible()
    assert "border" in form.editor("lr").styleSheet()
    form.editor("lr").setText("1e-3")  # editing a field clears its message
    assert not form._error_labels["lr"].isVisible()
    form.set_values({"lr": 10})
    assert form.validate()["lr"] == "must be less than 10"
    form.set_values({"lr": 1, "batch": 2.5, "etas": [], "name": ""})
    form.editor("batch").setText("2.5")
    assert form.validate() == {"batch": "must be a whole number", "name": "a value is required"}


def test_set_errors_shows_messages_inline_and_unknown_names_on_top(make_widget):
    form = make_widget(SchemaForm, CountParams.model_json_schema())
    form.show()
    form.set_errors({"steps": "Input should be greater than or equal to 1",
                     "speling": "unknown parameter"})
    assert form.errors() == {"steps": "Input should be greater than or equal to 1",
                             "": "speling: unknown parameter"}
    assert form._general_error.isVisible()
    form.set_errors({})
    assert form.errors() == {}


def test_changed_fires_on_edits(make_widget, qtbot):
    form = make_widget(SchemaForm, CountParams.model_json_schema())
    with qtbot.waitSignal(form.changed, timeout=1000):
        form.editor("steps").setText("5")
    assert form.values()["steps"] == 5


def test_empty_schema_says_so(make_widget):
    form = make_widget(SchemaForm, MethodParams.model_json_schema())
    assert form.values() == {} and form.validate() == {}


def test_input_picker_gives_refs(make_widget):
    picker = make_widget(InputPicker, {"data": "array", "labels": "table"})
    assert picker.values() == {}
    picker.add_candidate("run:20260101-000000-000001/values", "values (array)")
    combo = picker._combos["data"]
    combo.setCurrentIndex(combo.findData("run:20260101-000000-000001/values"))
    picker.set_values({"labels": "/data/labels.csv"})
    assert picker.values() == {"data": "run:20260101-000000-000001/values",
                               "labels": "/data/labels.csv"}
    picker.set_errors({"labels": "no such file"})
    assert picker._error_labels["labels"].text() == "no such file"


def test_submittable_gives_set_parameters_only_when_every_field_checks_out(make_widget):
    form = make_widget(SchemaForm, ManyParams.model_json_schema(), {"name": "n"})
    form.show()
    params = form.submittable()
    assert params is not None and params["name"] == "n" and "batch" not in params  # left empty
    ManyParams.model_validate(params)
    form.set_values({"lr": 0})
    assert form.submittable() is None and form._error_labels["lr"].isVisible()
