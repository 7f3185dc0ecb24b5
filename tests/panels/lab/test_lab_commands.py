"""The lab's commands (issue 37): run without a window over the model and a real undo history,
refused with the reason and no change for a bad argument and for an element that does not
exist, logged as the Python line a script would write, undone through the lab tab's history;
every control of the panel runs one; ``view_state`` / ``restore_view_state`` round-trip as
data and as a picture (issue 39).

The methods are the fake host's: ``toy.train`` (steps, lr, loss, verbose), ``toy.embed`` (an
input ``data``) and ``toy.reproduce``; a finished ``toy.train`` run writes a loss curve, a plot
artifact, an array and a NIfTI another panel opens."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtWidgets import QApplication, QFileDialog

from panels.lab.commands import COMMANDS, SCOPE, LabState, register
from panels.lab.model import PARAMETERS_DOCUMENT, LabModel
from panels.lab.view import TAB_ARTIFACTS, LabPanel
from studio.commands import CommandRefused, CommandRegistry, Invocation
from studio.widgets.plot_view import read_svg_provenance
from tests.panels.conftest import described_methods
from tests.studio.test_commands_map import panel_controls, unmapped
from tests.studio.test_sessions import _difference, _picture
from tests.studio.test_sessions_routing import PICTURE_TOLERANCE

PLOT = {"kind": "plot", "title": "loss", "xlabel": "step", "ylabel": "loss", "logx": False,
        "logy": False, "series": [{"name": "loss", "x": [0, 1, 2], "y": [1.0, 0.5, 0.25],
                                   "style": "line"}], "hlines": []}
MISSING = "/dev/null/studio-test"  # under a device: no file or folder can be made there


@pytest.fixture
def windowless(history_host) -> tuple[CommandRegistry, LabState, list[Invocation]]:
    """The lab's commands over the model and the host's real history: no panel."""
    registry = register(CommandRegistry())
    model = LabModel()
    model.set_methods(history_host.methods())
    state = LabState(model, history_host)
    registry.bind(SCOPE, state)
    seen: list[Invocation] = []
    registry.listen(seen.append)
    return registry, state, seen


@pytest.fixture
def lab(history_host, make_widget):
    panel = make_widget(LabPanel, history_host)
    panel.resize(1200, 700)
    panel.show()
    return panel


def finish_a_run(lab: LabPanel, host, steps: int = 4) -> str:
    """Run toy.train from the panel and play the engine's events of a finished run."""
    lab.select_method("toy.train")
    lab.run()
    job = lab.model.current.id
    run_dir = Path(host.run_dir(job))
    (run_dir / "artifacts" / "loss_plot.json").write_text(json.dumps(PLOT))
    np.save(run_dir / "artifacts" / "w.npy", np.arange(6.0).reshape(2, 3))
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "t": 0.0, "loss": 1.0 / (s + 1)}) + "\n" for s in range(steps)))
    host.emit(job, "job_state", state="running", reason="")
    for step in range(steps):
        host.emit(job, "job_progress", step=step, total=steps, metrics={"loss": 1.0 / (step + 1)})
    for name, kind, path in (("loss_plot", "plot", "artifacts/loss_plot.json"),
                             ("w", "array", "artifacts/w.npy")):
        host.emit(job, "job_artifact", name=name, kind=kind, path=path, meta={})
    host.emit(job, "job_log", lines=["trained"])
    host.emit(job, "job_result", outputs={"loss_plot": "artifacts/loss_plot.json"})
    host.emit(job, "job_state", state="succeeded", reason="", elapsed_s=1.5)
    return job


# -- without a window --------------------------------------------------------------------------


def test_commands_run_without_a_window_and_edits_are_undone_through_the_history(windowless):
    registry, state, seen = windowless
    host, model = state.host, state.model
    assert model.selected == "toy.embed"  # the first method of the first paper
    registry.run("lab.choose_method", method="toy.train")
    registry.run("lab.set_params", params={"steps": 300, "loss": "cross_entropy"})
    registry.run("lab.set_seed", seed=7)
    assert model.params_for("toy.train") == {"steps": 300, "lr": 0.1,
                                             "loss": "cross_entropy", "verbose": False}
    assert host.history.stack.undoText() == "Set the seed to 7"
    host.undo()
    assert model.seed == 0
    assert host.history.stack.undoText() == "Set loss, steps of toy.train"
    host.undo()
    assert "toy.train" not in model.params  # back to the form's defaults
    host.redo()
    assert model.params_for("toy.train")["steps"] == 300
    saved = host.history.saved_edits(PARAMETERS_DOCUMENT)  # autosaved in the workspace
    assert [edit["kind"] for edit in saved] == ["set_params"]
    registry.run("lab.run", params={"lr": 0.5})
    assert host.submitted[-1] == {"method": "toy.train", "seed": 0, "inputs": {},
                                  "cluster": "", "params": {"steps": 100, "lr": 0.5,
                                                            "loss": "logistic",
                                                            "verbose": False}}
    assert model.current.method == "toy.train" and model.busy
    assert [i.python() for i in seen][-1] == \
        'studio.command("lab.run", params={"lr": 0.5})'


def test_the_profile_is_one_step_that_gives_the_reproduce_form_back(windowless):
    registry, state, _seen = windowless
    model = state.model
    registry.run("lab.choose_method", method="toy.reproduce")
    model.params["toy.reproduce"] = {"profile": "cpu", "seeds": 3}
    registry.run("lab.choose_profile", profile="gpu")
    assert model.profile == "gpu" and model.params["toy.reproduce"]["profile"] == "gpu"
    state.host.undo()
    assert model.profile == "cpu" and model.params["toy.reproduce"] == {"profile": "cpu",
                                                                        "seeds": 3}
    registry.run("lab.reproduce", profile="smoke")
    assert state.host.submitted[-1]["params"] == {"profile": "smoke"}


def _snapshot(state: LabState) -> dict:
    model = state.model
    return copy.deepcopy({"selected": model.selected, "params": model.params, "seed": model.seed,
                          "profile": model.profile, "jobs": list(model.jobs),
                          "pending": model.pending, "steps": state.host.history.stack.count(),
                          "submitted": len(state.host.submitted),
                          "cancelled": len(state.host.cancelled)})


# (command, a bad argument, an element that does not exist): each refused, nothing changed
REFUSALS = [
    ("lab.choose_paper", {"paper": 3}, {"paper": "nope"}, "no method of the paper 'nope'"),
    ("lab.choose_method", {"method": None}, {"method": "toy.fly"},
     "no method 'toy.fly' (methods of toy: toy.embed, toy.reproduce, toy.train)"),
    ("lab.set_params", {"params": "steps=3"}, {"params": {"epochs": 3}},
     "toy.train has no parameter 'epochs'"),
    ("lab.set_seed", {"seed": -1}, {"seed": 0}, "the seed is 0 already"),
    ("lab.choose_profile", {"profile": "tpu"}, {"profile": "cpu"},
     "the cpu profile is chosen already"),
    ("lab.run", {"seed": "seven"}, {"method": "toy.fly"}, "no method 'toy.fly'"),
    ("lab.reproduce", {"profile": "tpu"}, {"paper": "nope"}, "no method of the paper 'nope'"),
    ("lab.cancel", {"hard": "very"}, {}, "no job of the lab is running"),
    ("lab.open_report", {"paper": 1}, {"paper": "nope"}, "no method of the paper 'nope'"),
    ("lab.open", {"path": None}, {"path": MISSING}, "no such file"),
    ("lab.show_artifact", {"artifact": 1}, {"artifact": "nope"}, "no artifact 'nope'"),
    ("lab.open_elsewhere", {"artifacts": "w"}, {"artifact": "nope"}, "no artifact 'nope'"),
    ("lab.show_tab", {"tab": "plots"}, None, ""),
    ("lab.export_figure", {"path": 3}, {"path": "loss.png", "metric": "accuracy"},
     "no live curve of 'accuracy' (curves: 'loss')"),
]


def test_every_command_is_listed_here():
    assert {command for command, *_rest in REFUSALS} == {c.id for c in COMMANDS}


@pytest.mark.parametrize(("command", "bad", "missing", "reason"), REFUSALS,
                         ids=[r[0] for r in REFUSALS])
def test_refused_with_the_reason_and_nothing_changed(lab, command, bad, missing, reason):
    finish_a_run(lab, lab.host)
    lab.select_method("toy.train")
    before, state = _snapshot(lab.state), lab.view_state()
    with pytest.raises(CommandRefused, match=f"^{command}: "):
        lab.commands.run(command, **bad)
    if missing is not None:
        with pytest.raises(CommandRefused) as refused:
            lab.commands.run(command, **missing)
        assert reason in str(refused.value)
    assert _snapshot(lab.state) == before and lab.view_state() == state


def test_a_bad_value_is_refused_naming_the_parameter(windowless):
    registry, state, _seen = windowless
    with pytest.raises(CommandRefused, match=r"toy.train: steps: must be at least 1"):
        registry.run("lab.set_params", method="toy.train", params={"steps": 0})
    with pytest.raises(CommandRefused, match=r"loss: must be one of logistic, cross_entropy"):
        registry.run("lab.run", method="toy.train", params={"loss": "hinge"})
    with pytest.raises(CommandRefused, match="toy.embed has no input 'labels'"):
        registry.run("lab.run", method="toy.embed", inputs={"labels": "x.npy"})
    assert state.host.submitted == [] and state.host.history.stack.count() == 0


def test_commands_that_show_something_need_the_window(windowless):
    registry, _state, _seen = windowless
    with pytest.raises(CommandRefused, match="lab.show_tab: cannot show a tab without the "
                                             "panel's window"):
        registry.run("lab.show_tab", tab="log")


# -- the panel's widgets run them --------------------------------------------------------------


def test_every_control_of_a_busy_lab_runs_a_command(lab, tmp_path):
    """With a form of every kind of field, inputs, a finished run's curves and artifacts, and
    an artifact another panel opens: each button, box and action maps to a lab command."""
    import nibabel as nib

    job = finish_a_run(lab, lab.host)
    path = Path(lab.host.run_dir(job)) / "artifacts" / "generated.nii.gz"
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4, 3), np.float32), np.eye(4)), path)
    lab.host.emit(job, "job_artifact", name="generated", kind="file",
                  path="artifacts/generated.nii.gz", meta={})
    lab.commands.run("lab.show_artifact", artifact="generated")
    lab.commands.run("lab.show_tab", tab="artifacts")
    lab.select_method("toy.embed")  # its input picker and browse button are built too
    controls = panel_controls(lab)
    names = {where for where, _control in controls}
    assert {"button 'Run'", "button 'Cancel'", "button 'Reproduce claim'",
            "button 'Open report'", "button 'Export figure…'",
            "button 'Open in fMRI 4D viewer'"} <= names
    assert unmapped(controls, lab.commands) == []
    lab.select_method("toy.train")  # the verbose check box
    assert unmapped(panel_controls(lab), lab.commands) == []


def test_clicks_and_typing_are_logged_as_python_lines(lab, qtbot):
    seen: list[Invocation] = []
    lab.commands.listen(seen.append)
    item = lab.method_tree.topLevelItem(0).child(1)  # toy / Train the toy
    lab.method_tree.setCurrentItem(item)
    editor = lab.form.editor("steps")
    editor.setText("3")
    editor.setText("30")
    editor.setText("300")  # typing: one step once it pauses
    lab.seed_box.setValue(7)
    qtbot.waitUntil(lambda: len(seen) == 3, timeout=3000)
    lab.run_button.click()
    lab.tabs.setCurrentIndex(3)
    assert [i.python() for i in seen] == [
        'studio.command("lab.choose_method", method="toy.train")',
        'studio.command("lab.set_params", params={"steps": 300}, method="toy.train")',
        'studio.command("lab.set_seed", seed=7)',
        'studio.command("lab.run", method="toy.train", params={"steps": 300}, seed=7)',
        'studio.command("lab.show_tab", tab="log")']
    assert lab.host.history.stack.count() == 2
    lab.host.undo()  # the seed, then the steps: the form and the box follow
    lab.host.undo()
    assert lab.seed_box.value() == 0 and lab.form.values()["steps"] == 100


def test_a_refused_click_is_said_in_the_status_line(lab):
    lab.select_method("toy.train")
    lab.run()
    lab.commands.trigger("lab.run")  # a job is queued already
    assert lab.status.text().startswith("Run a method refused: toy.train (")
    assert "wait for it or cancel it first" in lab.status.text()


# -- sessions: view_state / restore_view_state -------------------------------------------------


def test_view_state_round_trips_to_the_same_state_and_picture(lab, history_host, make_widget,
                                                             tmp_path):
    np.save(tmp_path / "a.npy", np.arange(12.0).reshape(3, 4))
    assert lab.open_file(tmp_path / "a.npy")
    job = finish_a_run(lab, history_host)
    lab.commands.run("lab.set_params", params={"lr": 0.25})
    lab.commands.run("lab.set_seed", seed=11)
    lab.commands.run("lab.choose_profile", profile="smoke")
    lab.cluster_edit.setText("local")
    lab.commands.run("lab.show_artifact", artifact="loss_plot")
    lab.commands.run("lab.show_tab", tab="artifacts")
    state = lab.view_state()
    assert state["method"] == "toy.train" and state["job"]["id"] == job
    assert state["files"] == [str((tmp_path / "a.npy").resolve())]
    assert json.loads(json.dumps(state)) == state
    before = _picture(lab)

    again = make_widget(LabPanel, history_host)
    again.resize(1200, 700)
    again.show()
    assert again.restore_view_state(state) == []
    assert again.view_state() == state
    assert again.tabs.currentIndex() == TAB_ARTIFACTS
    assert again.live_plot("loss").point_count("loss") == 4
    assert _difference(_picture(again), before) < PICTURE_TOLERANCE


def test_what_cannot_be_restored_is_named(lab, history_host, tmp_path):
    job = finish_a_run(lab, history_host)
    state = lab.view_state()
    state["files"] = [str(tmp_path / "gone.npy")]
    state["method"] = "toy.fly"
    state["job"] = {**state["job"], "id": "20200101-000000-dead"}
    problems = lab.restore_view_state(state)
    assert any("gone.npy: no such file" in p for p in problems)
    assert any("no method 'toy.fly'" in p for p in problems)
    assert any("the run 20200101-000000-dead (toy.train) is gone" in p for p in problems)
    assert lab.model.current.id == job  # what was shown stays


def test_a_session_restored_before_the_engine_lists_methods_chooses_later(
        lab, history_host, make_widget):
    lab.commands.run("lab.choose_method", method="toy.reproduce")
    state = lab.view_state()
    history_host.set_methods([])
    waiting = make_widget(LabPanel, history_host)
    assert waiting.restore_view_state(state) == []
    history_host.set_methods(described_methods())
    history_host.emit("", "methods", methods=history_host.methods())
    assert waiting.model.selected == "toy.reproduce"


def test_the_export_dialog_runs_the_export_command(lab, tmp_path):
    finish_a_run(lab, lab.host)
    lab.export_button.click()
    dialog = lab.findChild(QFileDialog)
    dialog.fileSelected.emit(str(tmp_path / "loss.png"))
    dialog.reject()
    QApplication.processEvents()
    assert (tmp_path / "loss.png").is_file() and "Exported" in lab.status.text()
    seen: list[Invocation] = []
    lab.commands.listen(seen.append)
    live = lab.live_plot("loss")  # right-click > Export... on a live curve: that curve
    export = next(a for a in live.findChild(pg.GraphicsView).scene().contextMenu
                  if a.text().startswith("Export"))
    export.trigger()
    dialog = [d for d in lab.findChildren(QFileDialog) if d.isVisible()][-1]
    dialog.fileSelected.emit(str(tmp_path / "curve.svg"))
    dialog.reject()
    assert seen[-1].python() == (f'studio.command("lab.export_figure", '
                                 f'path="{tmp_path / "curve.svg"}", metric="loss")')
    assert read_svg_provenance(tmp_path / "curve.svg")["artifact"] == "live:loss"
    with pytest.raises(CommandRefused, match=r"\.gif: choose \.png, \.svg or \.pdf"):
        lab.commands.run("lab.export_figure", path=str(tmp_path / "plot.gif"))


def test_in_the_window_a_script_opens_the_lab_and_edit_undo_takes_the_step_back(main_window):
    """The lab tab's own history: ``edit.undo`` on the lab undoes the lab's step."""
    main_window.command("lab.set_seed", seed=5)  # the lab is not open: the command opens it
    lab = main_window.panel_widgets["lab"]
    assert main_window.tabs.currentWidget() is lab and lab.seed_box.value() == 5
    assert main_window.undo_action.text() == "&Undo Set the seed to 5"
    assert main_window.command("edit.undo") == "Undid Set the seed to 5"
    assert lab.model.seed == 0 and lab.seed_box.value() == 0
    with pytest.raises(CommandRefused, match="lab.run: the engine has listed no methods yet"):
        main_window.command("lab.run")


def test_the_commands_and_the_model_import_no_qt():
    """Scripts and tests use the lab's commands without a display (CONTRACT: no Qt in it)."""
    import subprocess
    import sys

    code = ("import sys, panels.lab.commands, panels.lab.model; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'PySide6', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
