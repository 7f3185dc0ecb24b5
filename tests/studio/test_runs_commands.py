"""The runs dock's commands without an engine (issue 37): each names runs by id, a refusal
(an unknown run, a run still going, a checkpoint or metric the run does not have) says why
and changes nothing, and the dock's buttons log the runs they acted on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.commands import CommandRefused

RUN = "20260101-000000-aaaaaa"
OTHER = "20260101-000001-bbbbbb"


def finished_run(window, run_id: str, metrics: list[dict] | None = None):
    """A succeeded run of this session with a checkpoint and a metrics file."""
    run_dir = Path(window.workspace.run_dir(run_id))
    (run_dir / "checkpoints" / "model").mkdir(parents=True)
    (run_dir / "checkpoints" / "model" / "cfg.json").write_text(json.dumps({"d": 4}))
    lines = metrics if metrics is not None else [{"step": i, "loss": 1 / (i + 1)}
                                                 for i in range(5)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    record = window.bridge.jobs.register(run_id, "diag.count", {"steps": 5}, run_dir=str(run_dir))
    record.state = "succeeded"
    return record


@pytest.fixture
def log(main_window):
    seen = []
    main_window.commands.listen(seen.append)
    return seen


def refused(window, match: str, command_id: str, **args) -> None:
    with pytest.raises(CommandRefused, match=match):
        window.command(command_id, **args)


def test_delete_refuses_unknown_and_running_runs_and_deletes_named_ones(main_window, qtbot,
                                                                        log) -> None:
    done = finished_run(main_window, RUN)
    running = main_window.bridge.jobs.register(OTHER, "diag.count", {})
    running.state = "running"
    refused(main_window, r"runs.delete: no run 'nope' in the workspace", "runs.delete",
            run_ids=[RUN, "nope"])
    refused(main_window, rf"{OTHER} is still queued or running: cancel first", "runs.delete",
            run_ids=[RUN, OTHER])
    refused(main_window, "select runs in the runs dock", "runs.delete")
    assert RUN in main_window.bridge.jobs and Path(done.run_dir).is_dir()  # nothing changed
    assert main_window.command("runs.delete", run_ids=[RUN]) is True
    qtbot.waitUntil(lambda: RUN not in main_window.bridge.jobs, timeout=10_000)
    assert not Path(done.run_dir).exists()
    assert log[-1].python() == f'studio.command("runs.delete", run_ids=["{RUN}"])'


def test_the_delete_button_asks_then_logs_the_runs_it_deleted(main_window, qtbot, log,
                                                              monkeypatch) -> None:
    finished_run(main_window, RUN)
    dock = main_window.runs_dock
    asked = []
    monkeypatch.setattr(dock, "confirm_delete", asked.append)
    dock.select(RUN)
    dock.delete_action.trigger()
    assert asked == [[RUN]] and RUN in main_window.bridge.jobs  # asked, nothing deleted yet
    assert not [i for i in log if i.command.id == "runs.delete"]  # a question is not logged


def test_notes_by_run_id(main_window, qtbot, log) -> None:
    finished_run(main_window, RUN)
    refused(main_window, "runs.set_notes: notes is required", "runs.set_notes", run_id=RUN)
    refused(main_window, "no run 'nope'", "runs.set_notes", run_id="nope", notes="x")
    assert main_window.bridge.jobs.get(RUN).notes == ""
    dock = main_window.runs_dock
    dock.select(RUN)
    dock.notes_edit.setPlainText("lr too high?")
    dock.save_notes_button.click()
    qtbot.waitUntil(lambda: main_window.bridge.jobs.get(RUN).notes == "lr too high?",
                    timeout=10_000)
    assert log[-1].python() == (f'studio.command("runs.set_notes", run_id="{RUN}", '
                                f'notes="lr too high?")')


def test_show_and_compare_runs_refuses_an_unknown_run_or_metric(main_window, qtbot, log
                                                                ) -> None:
    finished_run(main_window, RUN)
    finished_run(main_window, OTHER, [{"step": i, "loss": i, "acc": 0.5} for i in range(3)])
    dock = main_window.runs_dock
    refused(main_window, "no run 'nope'", "runs.show", run_ids=[RUN, "nope"])
    refused(main_window, "no run is shown", "runs.show", metric="loss")
    assert dock.selected_ids() == []
    main_window.command("runs.show", run_ids=[RUN, OTHER])
    qtbot.waitUntil(lambda: dock.curve_point_count() == 8, timeout=10_000)
    assert set(dock.selected_ids()) == {RUN, OTHER}
    assert "comparing 2 runs" in dock.compare_note.text()
    refused(main_window, r"no metric 'nope' in .* \(they report acc, loss\)", "runs.show",
            metric="nope")
    assert dock.metric_combo.currentText() == "loss"
    dock.metric_combo.textActivated.emit("acc")  # the user picks a metric
    assert dock.metric_combo.currentText() == "acc"
    assert log[-1].command.id == "runs.show" and log[-1].args["metric"] == "acc"


def test_export_plot_refusals_then_a_png_with_the_runs_provenance(main_window, qtbot,
                                                                  tmp_path) -> None:
    from studio.widgets.plot_view import read_png_provenance

    tmp_path = tmp_path / "out"
    tmp_path.mkdir()

    finished_run(main_window, RUN)
    refused(main_window, "the runs dock shows no curve", "runs.export_plot",
            path=str(tmp_path / "a.png"))
    main_window.command("runs.show", run_ids=[RUN])
    dock = main_window.runs_dock
    qtbot.waitUntil(lambda: dock.curve_point_count() == 5, timeout=10_000)
    refused(main_window, r"a.jpg: write .png, .svg or .pdf", "runs.export_plot",
            path=str(tmp_path / "a.jpg"))
    refused(main_window, "is not a folder", "runs.export_plot",
            path=str(tmp_path / "missing" / "a.png"))
    refused(main_window, "dpi", "runs.export_plot", path=str(tmp_path / "a.png"), dpi=5)
    assert list(tmp_path.iterdir()) == []
    main_window.command("runs.export_plot", path=str(tmp_path / "a.png"))
    assert read_png_provenance(tmp_path / "a.png")["run_id"] == RUN


def test_export_checkpoint_by_run_and_name(main_window, qtbot, tmp_path, log) -> None:
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    record = finished_run(main_window, RUN)
    bare = main_window.bridge.jobs.register(OTHER, "diag.count", {})
    bare.state = "succeeded"
    refused(main_window, f"run {OTHER} saved no checkpoint", "app.export_checkpoint",
            run_id=OTHER)
    refused(main_window, r"has no checkpoint 'best' \(it has model\)", "app.export_checkpoint",
            run_id=RUN, checkpoint="best", folder=str(tmp_path))
    refused(main_window, "is not a folder", "app.export_checkpoint", run_id=RUN,
            checkpoint="model", folder=str(tmp_path / "nope"))
    refused(main_window, "unknown argument 'path'", "app.export_checkpoint", path="x")
    assert list(tmp_path.iterdir()) == []
    main_window.command("app.export_checkpoint", run_id=RUN, checkpoint="model",
                        folder=str(tmp_path))
    qtbot.waitUntil(lambda: (tmp_path / "model" / "cfg.json").exists(), timeout=10_000)
    # the dock's menu lists the run's checkpoints, each running the command with its name
    dock = main_window.runs_dock
    dock.select(record.id)
    assert dock.checkpoint_button.isEnabled()
    dock.checkpoint_menu.aboutToShow.emit()
    entries = dock.checkpoint_menu.actions()
    assert [a.text() for a in entries] == ["model"]
    dock.select(bare.id)
    assert not dock.checkpoint_button.isEnabled()
    assert dock.checkpoint_button.toolTip() == "This run saved no checkpoint"


def test_rerun_cancel_and_open_folder_refusals_change_nothing(main_window, log) -> None:
    finished_run(main_window, RUN)
    finished_run(main_window, OTHER)
    count = len(main_window.bridge.jobs.records())
    refused(main_window, "choose one run to change, not 2", "runs.rerun_with_changes",
            run_ids=[RUN, OTHER], params={"steps": 3})
    refused(main_window, "the engine does not list diag.count", "runs.rerun_with_changes",
            run_ids=[RUN], seed=3)
    refused(main_window, "seed", "runs.rerun_with_changes", run_ids=[RUN], seed=-1)
    refused(main_window, "none of these runs is queued or running", "runs.cancel",
            run_ids=[RUN])
    refused(main_window, "no run 'nope'", "runs.rerun", run_ids=["nope"])
    refused(main_window, "no run 'nope'", "runs.open_folder", run_id="nope")
    refused(main_window, "select a run in the runs dock", "runs.open_folder")
    assert len(main_window.bridge.jobs.records()) == count
    assert all(i.refused for i in log)


def test_the_toolbar_names_the_selected_runs(main_window, log, monkeypatch) -> None:
    """A button acts on the selection, and the log says which runs that was."""
    finished_run(main_window, RUN)
    finished_run(main_window, OTHER)
    submitted = []
    monkeypatch.setattr(main_window, "submit", lambda *args, **kw: submitted.append(args))
    main_window.runs_dock.select(RUN, OTHER)
    main_window.runs_dock.rerun_action.trigger()
    assert [s[0] for s in submitted] == ["diag.count", "diag.count"]
    assert log[-1].python() in (f'studio.command("runs.rerun", run_ids=["{RUN}", "{OTHER}"])',
                                f'studio.command("runs.rerun", run_ids=["{OTHER}", "{RUN}"])')
