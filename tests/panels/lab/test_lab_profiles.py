"""The lab's reproduce form: a profile choice (default cpu) that shows each profile's settings,
the exploratory mark before the run (a setting changed in the form) and after it (the claim
view), and "Open report" (the engine's ``report`` request, opened in the browser)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field
from PySide6.QtCore import Qt

from engine.api import ReproduceParams, reproduce_spec
from panels.lab.model import LabModel
from panels.lab.view import LabPanel
from studio.widgets import claim_view
from tests.panels.conftest import described_methods


class ShapeParams(ReproduceParams):
    """Profiles whose settings differ, as a real paper's do."""

    PROFILE_SETTINGS = {"smoke": {"seeds": 2, "steps": 10}, "gpu": {"seeds": 10, "steps": 5000}}

    seeds: int = Field(5, ge=2, description="training seeds")
    steps: int = Field(1000, ge=1, description="training steps per seed")


def _never(ctx, params, inputs):
    raise AssertionError("not run in tests")


SHAPE = reproduce_spec("shape", "Reproduce the shape claim", _never, params=ShapeParams)


@pytest.fixture
def lab(fake_host, make_widget):
    fake_host.set_methods(described_methods() + [SHAPE.describe()])
    fake_host._params[SHAPE.id] = ShapeParams
    panel = make_widget(LabPanel, fake_host)
    panel.resize(1200, 700)
    panel.show()
    panel.select_method(SHAPE.id)
    return panel


def test_the_profile_defaults_to_cpu_and_old_saves_keep_their_choice() -> None:
    assert LabModel().profile == "cpu"
    for saved, profile in (({"smoke": True}, "smoke"), ({"smoke": False}, "cpu"),
                           ({"profile": "gpu", "smoke": True}, "gpu"), ({}, "cpu")):
        model = LabModel()
        model.restore(saved)
        assert model.profile == profile, saved


def test_the_profile_choice_shows_each_profile_s_settings(lab):
    assert lab.profile_box.currentText() == "cpu"
    assert "smoke" not in lab.form.values()  # the profile choice replaced the smoke box
    assert lab.form.values() == {"profile": "cpu", "seeds": 5, "steps": 1000}
    assert lab.settings_label.text() == "cpu profile: seeds 5; steps 1000"
    tips = [lab.profile_box.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(3)]
    assert "seeds 2; steps 10" in tips[0] and "seeds 10; steps 5000" in tips[2]
    lab.profile_box.setCurrentText("gpu")  # choosing a profile chooses its settings
    assert lab.form.values() == {"profile": "gpu", "seeds": 10, "steps": 5000}
    assert lab.settings_label.text() == "gpu profile: seeds 10; steps 5000"
    assert lab.exploratory_label.isHidden()
    lab.form.set_values({"profile": "smoke"})  # the form's own profile field: the same choice
    assert lab.profile_box.currentText() == "smoke" and lab.model.profile == "smoke"
    assert lab.form.values() == {"profile": "smoke", "seeds": 2, "steps": 10}
    lab.select_method("toy.train")  # another paper: its own reproduction's settings (none)
    assert lab.settings_label.isHidden() and lab.exploratory_label.isHidden()


def test_a_changed_setting_is_exploratory_before_the_run_and_in_the_claim_after(lab, fake_host):
    lab.form.set_values({"steps": 250})
    note = lab.exploratory_label
    assert not note.isHidden()
    assert note.text().startswith("Exploratory: steps changed (250; the cpu profile has 1000)")
    lab.reproduce()
    job = list(lab.model.jobs)[-1]
    assert fake_host.submitted[-1]["params"] == {"profile": "cpu", "steps": 250}
    claim = {"paper": "shape", "statement": "s", "spec": "v2", "verdict": "PASS",
             "passed": True, "seeds": [0, 1, 2, 3, 4], "wall_s": 3.0, "profile": "cpu",
             "settings": {"seeds": 5, "steps": 1000}, "exploratory": True,
             "overrides": {"steps": 250}, "criteria": [], "sanity": [],
             "units": [{"host": "node-a", "task": "t1"}, {"host": "node-b", "task": "t2"}]}
    fake_host.emit(job, "job_state", state="running", reason="")
    fake_host.emit(job, "job_result", outputs={"claim": claim})
    fake_host.emit(job, "job_state", state="succeeded", reason="", elapsed_s=3.0)
    view = lab.claim_view
    assert "EXPLORATORY" in view.marks.text() and "steps = 250" in view.exploratory_note.text()
    assert "not the paper's verdict" in view.exploratory_note.text()
    assert "2 units: 1 on node-a, 1 on node-b (Ray tasks)" in view.details.text()
    # Back to the profile's value: no longer exploratory, and only the profile is sent.
    lab.form.set_values({"steps": 1000})
    assert lab.exploratory_label.isHidden()
    lab.reproduce()
    assert fake_host.submitted[-1]["params"] == {"profile": "cpu"}


def test_a_change_made_in_the_form_goes_with_reproduce_from_another_method(lab, fake_host):
    lab.form.set_values({"seeds": 3})
    lab.select_method("toy.train")
    lab.select_method(SHAPE.id)
    assert lab.form.values()["seeds"] == 3 and not lab.exploratory_label.isHidden()
    lab.profile_box.setCurrentText("gpu")  # a new profile starts from its own settings
    assert lab.exploratory_label.isHidden() and lab.form.values()["seeds"] == 10


@pytest.mark.usefixtures("developer_mode")  # diagnostics: a paper without a reproduction
def test_open_report_asks_the_engine_and_opens_the_page(lab, fake_host, monkeypatch, tmp_path):
    opened: list[str] = []
    monkeypatch.setattr(claim_view, "open_in_browser", lambda path: opened.append(path) or True)
    replies = {}

    def request(name, args, on_reply, on_error=None):
        fake_host.requests.append((name, args))
        replies[name] = (on_reply, on_error)

    monkeypatch.setattr(fake_host, "request", request)
    monkeypatch.setattr(fake_host, "workspace_path", lambda: str(tmp_path / "ws"),
                        raising=False)
    lab.report_button.click()
    name, args = fake_host.requests[-1]
    assert name == "report" and args == {"slugs": ["shape"],
                                         "out": str(tmp_path / "ws" / "reports" / "shape")}
    assert "Writing the report of shape" in lab.status.text()
    page = Path(args["out"]) / "index.html"
    replies["report"][0]({"path": str(page)})
    assert opened == [str(page)] and str(page) in lab.status.text()
    lab.report_button.click()
    replies["report"][1]("no reproduce run of shape in the workspace")
    assert "No report: no reproduce run of shape" in lab.status.text()
    lab.select_method("diag.echo")  # a paper without a reproduction has no report
    assert not lab.report_button.isEnabled()
