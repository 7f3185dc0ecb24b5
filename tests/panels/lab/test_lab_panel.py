"""The lab panel end to end against an in-process PanelHost (no engine)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QPushButton

from panels.lab import MANIFEST
from panels.lab.view import TAB_ARTIFACTS, TAB_CLAIM, LabPanel
from panels.widgets.artifact_views import ArrayView
from studio.widgets.plot_view import PlotSpecView, read_png_provenance, read_svg_provenance
from studio.widgets.schema_form import InputPicker

PLOT = {"kind": "plot", "title": "loss", "xlabel": "step", "ylabel": "loss", "logx": False,
        "logy": False, "series": [{"name": "loss", "x": [0, 1, 2], "y": [1.0, 0.5, 0.25],
                                   "style": "line"}], "hlines": []}

pytestmark = pytest.mark.usefixtures("developer_mode")  # its tests drive diag.*


@pytest.fixture
def lab(fake_host, make_widget):
    panel = make_widget(LabPanel, fake_host)
    panel.resize(1200, 700)
    panel.show()
    return panel


def submit(lab, host, method="toy.train", **values) -> str:
    lab.select_method(method)
    lab.form.set_values(values)
    lab.run()
    return list(lab.model.jobs)[-1]


def test_manifest_names_the_view_factory():
    import importlib

    module, name = MANIFEST.factory.split(":")
    assert getattr(importlib.import_module(module), name) is LabPanel
    assert MANIFEST.methods == ("",) and "eos" in MANIFEST.papers
    assert {"npy", "csv"} <= set(MANIFEST.formats)


def test_methods_grouped_by_paper_and_select_paper(lab):
    papers = [lab.method_tree.topLevelItem(i).text(0)
              for i in range(lab.method_tree.topLevelItemCount())]
    assert papers == ["toy", "diagnostics"]
    lab.select_paper("diagnostics")
    assert lab.model.selected == "diag.chatty"
    assert lab.method_tree.currentItem().text(0) == "Flood the event pipeline"
    assert not lab.reproduce_button.isEnabled()  # diagnostics has no reproduce
    lab.method_tree.setCurrentItem(lab.method_tree.topLevelItem(0).child(1))
    assert lab.model.selected == "toy.train" and lab.reproduce_button.isEnabled()
    assert set(lab.form.values()) == {"steps", "lr", "loss", "verbose"}


def test_run_submits_the_form_and_follows_the_job_live(lab, fake_host, tmp_path):
    lab.seed_box.setValue(7)
    lab.cluster_edit.setText("ray://head:10001")
    job = submit(lab, fake_host, steps=300, lr=0.5)
    assert fake_host.submitted[-1] == {"method": "toy.train", "inputs": {}, "seed": 7,
                                       "params": {"steps": 300, "lr": 0.5, "loss": "logistic",
                                                  "verbose": False},
                                       "cluster": "ray://head:10001"}
    assert not lab.run_button.isEnabled() and lab.cancel_button.isEnabled()
    fake_host.emit(job, "job_state", state="running", reason="")
    counts = []
    for step in range(0, 300, 10):
        fake_host.emit(job, "job_progress", step=step, total=300,
                       metrics={"loss": 1.0 / (step + 1), "sharpness": 2.0, "note": "text"})
        counts.append(lab.live_plot("loss").point_count("loss"))
    assert counts == list(range(1, 31))  # grew with each event
    assert set(lab.live_plots) == {"loss", "sharpness"}  # only numeric metrics are drawn
    assert lab.progress.value() == 290 and lab.progress.maximum() == 300
    assert "Running" in lab.status.text()

    run_dir = Path(fake_host.run_dir(job))
    (run_dir / "artifacts" / "loss_plot.json").write_text(json.dumps(PLOT))
    np.save(run_dir / "artifacts" / "w.npy", np.arange(6.0).reshape(2, 3))
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "t": 0.0, "loss": 1.0 / (s + 1)}) + "\n"
                for s in range(300)) + '{"step": 300, "lo')  # a torn last line
    fake_host.emit(job, "job_artifact", name="loss_plot", kind="plot",
                   path="artifacts/loss_plot.json", meta={})
    fake_host.emit(job, "job_artifact", name="w", kind="array", path="artifacts/w.npy",
                   meta={})
    fake_host.emit(job, "job_log", lines=["one", "two"])
    fake_host.emit(job, "job_result", outputs={"loss_plot": "artifacts/loss_plot.json"})
    fake_host.emit(job, "job_state", state="succeeded", reason="", elapsed_s=2.0)

    assert "Succeeded in 2.0 s" in lab.status.text()
    assert lab.run_button.isEnabled() and not lab.cancel_button.isEnabled()
    assert lab.live_plot("loss").point_count("loss") == 300  # completed from metrics.jsonl
    assert lab.tabs.currentIndex() == TAB_ARTIFACTS
    shown = lab.artifact_stack.currentWidget()
    assert isinstance(shown, PlotSpecView) and shown.point_count("loss") == 3
    assert shown.provenance["run_id"] == job and shown.provenance["artifact"] == "loss_plot"
    lab.artifact_list.setCurrentRow(1)
    assert isinstance(lab.artifact_stack.currentWidget(), ArrayView)
    assert lab.log_view.toPlainText() == "one\ntwo"


def test_events_before_job_accepted_are_not_lost(lab, fake_host):
    fake_host.early_events = True
    job = submit(lab, fake_host, steps=5)
    assert lab.model.current.id == job and lab.model.current.state == "queued"
    fake_host.emit(job, "job_progress", step=1, total=5, metrics={"loss": 1.0})
    assert lab.live_plot("loss").point_count("loss") == 1


def test_events_of_other_jobs_do_not_touch_the_panel(lab, fake_host):
    submit(lab, fake_host, steps=5)
    fake_host.emit("someone-else", "job_progress", step=1, total=5, metrics={"loss": 1.0})
    fake_host.emit("someone-else", "job_artifact", name="values", kind="array",
                   path="artifacts/values.npy", meta={})
    assert lab.live_plots == {} and lab.artifact_list.count() == 0
    lab.select_method("toy.embed")  # ... but their artifacts are offered as inputs
    lab.select_method("toy.train")
    lab.select_method("toy.embed")
    assert len(lab.inputs_box.findChildren(InputPicker)) == 1  # the earlier ones are gone
    combo = lab.inputs._combos["data"]
    assert combo.findData("run:someone-else/values") >= 0


def test_engine_validation_errors_show_on_the_fields(lab, fake_host):
    lab.select_method("toy.train")
    lab.form.set_values({"steps": 0})
    lab.run()  # the form's own check stops it before the engine
    assert fake_host.submitted == [] and "steps" in lab.form.errors()
    lab.form.set_values({"steps": 5})
    lab.model.set_params({"steps": 5, "lr": 0.1, "bogus": 1})  # as if the form were stale
    method, params, seed = lab.model.submission()
    lab._submit(method, params, {}, seed)
    assert lab.form.errors() == {"": "bogus: unknown parameter"}
    assert "refused" in lab.status.text() and lab.run_button.isEnabled()


def test_cancel_then_kill(lab, fake_host):
    job = submit(lab, fake_host, steps=5)
    fake_host.emit(job, "job_state", state="running", reason="")
    lab.cancel()
    fake_host.emit(job, "job_state", state="cancelling", reason="")
    assert lab.cancel_button.text() == "Kill"
    lab.cancel()
    assert fake_host.cancelled == [(job, False), (job, True)]
    fake_host.emit(job, "job_state", state="cancelled", reason="cancelled by the user")
    assert "Cancelled" in lab.status.text() and lab.run_button.isEnabled()


def test_reproduce_claim_shows_pass_fail(lab, fake_host):
    lab.select_method("toy.train")
    lab.profile_box.setCurrentText("gpu")
    lab.reproduce()
    job = list(lab.model.jobs)[-1]
    assert fake_host.submitted[-1]["method"] == "toy.reproduce"
    assert fake_host.submitted[-1]["params"] == {"profile": "gpu"}
    claim = {"paper": "toy", "statement": "s", "seeds": [0], "wall_s": 1.0, "smoke": True,
             "notes": "", "passed": True,
             "criteria": [{"name": "c", "measured": 1.0, "target": 0.5, "op": ">=",
                           "paper": "0.9", "note": "", "passed": True}]}
    fake_host.emit(job, "job_state", state="running", reason="")
    fake_host.emit(job, "job_result", outputs={"claim": claim})
    fake_host.emit(job, "job_state", state="succeeded", reason="", elapsed_s=1.0)
    assert lab.claim_view.verdict() == "PASS" and lab.tabs.currentIndex() == TAB_CLAIM


def test_export_png_svg_here_and_pdf_through_the_engine(lab, fake_host, tmp_path):
    lab.export_plot(tmp_path / "nothing.png")
    assert fake_host.errors and "lab.export_figure: nothing to export" in fake_host.errors[-1][1]
    job = submit(lab, fake_host, steps=3)
    for step in range(3):
        fake_host.emit(job, "job_progress", step=step, total=3, metrics={"loss": 1.0 - step / 4})
    lab.export_plot(tmp_path / "live.png")
    lab.export_plot(tmp_path / "live.svg")
    assert read_png_provenance(tmp_path / "live.png")["run_id"] == job
    assert read_svg_provenance(tmp_path / "live.svg")["artifact"] == "live:loss"
    lab.export_plot(tmp_path / "live.pdf")
    name, args = fake_host.requests[-1]
    assert name == "figure.export" and args["provenance"]["run_id"] == job
    assert args["spec"]["series"][0]["y"] == [1.0, 0.75, 0.5]
    assert (tmp_path / "live.pdf").read_bytes().startswith(b"%PDF")
    assert "Exported" in lab.status.text()


def test_open_files_show_in_the_artifact_views(lab, fake_host, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((4, 5)))
    assert lab.open_file(tmp_path / "a.npy")
    assert lab.tabs.currentIndex() == TAB_ARTIFACTS
    assert isinstance(lab.artifact_stack.currentWidget(), ArrayView)
    (tmp_path / "bad.npy").write_bytes(b"not numpy at all")
    assert not lab.open_file(tmp_path / "bad.npy")
    assert fake_host.errors[-1][0] == "Cannot open a file in the lab" and "bad.npy" in \
        fake_host.errors[-1][1]
    submit(lab, fake_host, steps=3)  # a new run keeps the opened files
    assert lab.artifact_list.count() == 1


def test_methods_arriving_late_and_unsubscribe_on_close(fake_host, make_widget, qtbot):
    from tests.panels.conftest import described_methods

    fake_host.set_methods([])
    panel = make_widget(LabPanel, fake_host)
    assert panel.model.methods == {} and panel._methods_retry.isActive()
    panel._methods_retry.setInterval(20)
    panel.select_paper("toy")
    fake_host.set_methods(described_methods())
    qtbot.waitUntil(lambda: panel.model.selected == "toy.embed", timeout=3000)
    assert fake_host.subscriber_count == 1
    panel.close()
    assert fake_host.subscriber_count == 0


def test_export_button_asks_where_then_runs_the_export_command(lab, fake_host, tmp_path):
    from PySide6.QtWidgets import QFileDialog

    job = submit(lab, fake_host, steps=3)
    fake_host.emit(job, "job_progress", step=1, total=3, metrics={"loss": 0.5})
    lab.export_button.click()
    dialog = lab.findChild(QFileDialog)
    assert dialog is not None and dialog.isVisible()
    dialog.fileSelected.emit(str(tmp_path / "chosen.svg"))
    dialog.reject()
    assert read_svg_provenance(tmp_path / "chosen.svg")["run_id"] == job
    seen = []
    lab.commands.listen(seen.append)
    fake_host.export_plot = seen.append  # the shell's dialog would write no logged command
    lab.export_button.click()
    dialog = lab.findChild(QFileDialog)
    dialog.fileSelected.emit(str(tmp_path / "again.png"))
    dialog.reject()
    assert [i.python() for i in seen] == [
        f'studio.command("lab.export_figure", path="{tmp_path / "again.png"}")']


def test_engine_restart_keeps_the_choice_and_the_values(lab, fake_host):
    lab.select_method("toy.train")
    lab.form.set_values({"steps": 42})
    form = lab.form
    fake_host.emit("", "methods", methods=fake_host.methods())  # the shell's notice
    assert lab.model.selected == "toy.train" and lab.form is form
    assert lab.method_tree.currentItem().text(0) == "Train the toy"
    changed = [dict(m) for m in fake_host.methods()]
    train = next(m for m in changed if m["id"] == "toy.train")
    train["params_schema"] = {"properties": {"steps": {"type": "integer", "default": 1}}}
    fake_host.emit("", "methods", methods=changed)
    assert lab.form is not form and lab.form.values() == {"steps": 42}


def test_an_artifact_another_panel_opens_offers_that_panel(lab, fake_host):
    """"the lab has no viewer for nifti files": a generated NIfTI now says where it opens."""
    import nibabel as nib

    job = submit(lab, fake_host, steps=5)
    path = Path(fake_host.run_dir(job)) / "artifacts" / "generated.nii.gz"
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4, 3), np.float32), np.eye(4)), path)
    fake_host.emit(job, "job_artifact", name="generated", kind="file",
                   path="artifacts/generated.nii.gz", meta={})
    lab.artifact_list.setCurrentRow(lab.artifact_list.count() - 1)
    shown = lab.artifact_stack.currentWidget()
    button = next(b for b in shown.findChildren(QPushButton) if b.text().startswith("Open in"))
    assert button.text() == "Open in fMRI 4D viewer"
    button.click()
    assert fake_host.opened_elsewhere == [str(path)]


def test_an_exported_figure_opens_with_where_it_came_from(lab, tmp_path):
    from engine import provenance
    from panels.widgets.artifact_views import FigureView

    plot = PlotSpecView()
    plot.set_spec(PLOT, provenance=provenance.record(view={"metric": "loss"}))
    plot.export(tmp_path / "loss.png")
    assert lab.open_file(tmp_path / "loss.png")
    shown = lab.artifact_stack.currentWidget()
    assert isinstance(shown, FigureView) and not shown.picture.pixmap().isNull()
    assert shown.provenance["view"] == {"metric": "loss"}
    (tmp_path / "other.png").write_bytes((tmp_path / "loss.png").read_bytes()[:8] + b"\0" * 40)
    assert not lab.open_file(tmp_path / "other.png")  # a broken PNG: refused, named


def test_a_reproduce_form_off_its_profile_is_marked_exploratory(lab, fake_host):
    lab.select_method("diag.reproduce")
    assert lab.exploratory_label.isHidden()  # the form starts at the cpu profile's settings
    lab.form.set_values({"margin": 2.5})
    assert not lab.exploratory_label.isHidden()
    assert "margin changed (2.5; the cpu profile has 1)" in lab.exploratory_label.text()
    lab.form.set_values({"margin": 1.0, "profile": "gpu"})
    assert lab.exploratory_label.isHidden()
    lab.select_method("toy.train")  # not a reproduction: never exploratory
    lab.form.set_values({"steps": 7})
    assert lab.exploratory_label.isHidden()
    lab.select_method("diag.reproduce")
    lab.form.set_values({"margin": 3.0})
    lab.run()
    job = list(lab.model.jobs)[-1]
    assert fake_host.submitted[-1]["params"]["margin"] == 3.0
    claim = {"paper": "diag", "statement": "s", "spec": "v2", "verdict": "PASS", "passed": True,
             "seeds": [0], "wall_s": 0.1, "profile": "cpu", "exploratory": True,
             "overrides": {"margin": 3.0}, "criteria": [], "sanity": []}
    fake_host.emit(job, "job_result", outputs={"claim": claim})
    assert "EXPLORATORY" in lab.claim_view.marks.text()
    assert "margin = 3" in lab.claim_view.exploratory_note.text()
