"""The lab's Qt-free model: selection by paper, parameters, job events (no window)."""

from __future__ import annotations

import pytest

from panels.lab.model import REPRODUCE, RUN, LabModel
from tests.panels.conftest import described_methods

pytestmark = pytest.mark.usefixtures("developer_mode")  # its tests drive diag.*


def envelope(job, type_, **content):
    return {"type": type_, "job": job, "seq": 1, "content": content}


@pytest.fixture
def model():
    lab = LabModel()
    lab.set_methods(described_methods())
    return lab


def test_methods_grouped_by_paper_reproduce_last_diagnostics_last(model):
    groups = model.by_paper()
    assert list(groups) == ["toy", "diagnostics"]
    assert [m["id"] for m in groups["toy"]] == ["toy.embed", "toy.train", "toy.reproduce"]
    assert model.selected == "toy.embed"  # the first method is chosen


def test_select_paper_waits_for_methods():
    lab = LabModel()
    chosen = []
    lab.events.connect("selected", lambda method: chosen.append(method["id"]))
    assert lab.select_paper("diagnostics") is False
    lab.set_methods(described_methods())
    assert chosen == ["diag.chatty"] and lab.reproduce_method() is None
    lab.select("toy.train")
    assert lab.reproduce_method() == "toy.reproduce"
    with pytest.raises(KeyError):
        lab.select("nope.train")


def test_submission_and_events_of_its_job_only(model):
    seen = []
    for name in ("job", "progress", "artifact", "result", "log"):
        model.events.connect(name, lambda name=name, **payload: seen.append(name))
    model.select("toy.train")
    model.set_params({"steps": 5})
    model.seed = 3
    assert model.submission(RUN) == ("toy.train", {"steps": 5}, 3)
    assert model.busy
    model.on_event(envelope("j1", "job_state", state="queued"))   # before job_accepted
    model.on_event(envelope("other", "job_artifact", name="a", kind="array", path="a.npy"))
    job = model.accepted("j1")
    assert job.state == "queued" and seen == ["job", "job"]
    model.on_event(envelope("j1", "job_progress", step=2, total=5, metrics={"loss": 0.5}))
    model.on_event(envelope("j1", "job_artifact", name="p", kind="plot", path="p.json"))
    model.on_event(envelope("j1", "job_log", lines=["hello"]))
    model.on_event(envelope("j1", "job_result", outputs={"x": 1}))
    model.on_event(envelope("j1", "job_state", state="succeeded", elapsed_s=1.5))
    assert seen[2:] == ["progress", "artifact", "log", "result", "job"]
    assert (job.step, job.total, job.outputs, job.elapsed_s) == (2, 5, {"x": 1}, 1.5)
    assert not model.busy
    assert [j for j, _a in model.seen_artifacts] == ["other", "j1"]


def test_reproduce_submission_and_rejection(model):
    messages = []
    model.events.connect("submit_error", lambda message: messages.append(message))
    model.select("toy.train")
    model.profile = "cpu"
    assert model.submission(REPRODUCE) == ("toy.reproduce", {"profile": "cpu"}, 0)
    model.rejected("invalid parameters")
    assert messages == ["invalid parameters"] and not model.busy
    model.select("diag.echo")
    with pytest.raises(KeyError):
        model.submission(REPRODUCE)


def test_params_remembered_per_method_and_saved(model):
    model.select("toy.train")
    model.set_params({"steps": 7})
    model.select("diag.count")
    model.set_params({"steps": 1})
    saved = model.to_json()
    again = LabModel()
    again.set_methods(described_methods())
    again.restore(saved)
    assert again.selected == "diag.count"
    assert again.params_for("toy.train") == {"steps": 7}


def test_manifest_model_and_schema_load_without_qt():
    import subprocess
    import sys

    code = ("import sys, panels.lab, panels.lab.model, studio.widgets.schema; "
            "assert not [m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph'))]")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_diagnostics_are_listed_to_developers_only(monkeypatch) -> None:
    monkeypatch.delenv("STUDIO_DEV")
    lab = LabModel()
    lab.set_methods(described_methods())
    assert "diagnostics" not in lab.by_paper() and "toy.train" in lab.methods
    monkeypatch.setenv("STUDIO_DEV", "1")
    lab.set_methods(described_methods())
    assert "diag.crash" in lab.methods and list(lab.by_paper())[-1] == "diagnostics"
