"""The runs dock against a real engine: live curves, cancel, rerun, compare, notes, delete,
export, and the engine dying under a running job.

The tests share one window and engine (a fresh engine's first job waits for its worker to
import torch, seconds on two cores); the test that kills the engine runs last.
"""

from __future__ import annotations

import json
import time

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication, QMessageBox

from engine.workspace import Workspace
from studio.commands import CommandRefused
from studio.main_window import MainWindow
from tests.conftest import qt_asyncio_loop

TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def shared_window(qapp, tmp_path_factory):
    home = tmp_path_factory.mktemp("runs-dock")
    with qt_asyncio_loop(qapp):
        settings = QSettings(str(home / "studio.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings=settings, workspace=home / "workspace",
                            log_dir=home / "logs")
        window.setProperty("studioShared", True)
        window.show()
        window.start_engine()
        _wait(qapp, lambda: window.bridge.is_ready)
        yield window
        window.setProperty("studioShared", False)
        window.close()


def _wait(qapp, condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        qapp.processEvents()
        time.sleep(0.005)


@pytest.fixture
def ready_window(shared_window, qtbot):
    """The shared window, ready, with nothing selected and no errors left from before."""
    qtbot.waitUntil(lambda: shared_window.bridge.is_ready, timeout=TIMEOUT_MS)
    shared_window.runs_dock.select()
    shared_window.errors.clear()
    return shared_window


def submit(window, qtbot, method: str, params: dict, seed: int = 0) -> str:
    accepted: list[str] = []
    errors: list[str] = []
    window.submit(method, params, seed=seed, on_accepted=accepted.append,
                  on_error=errors.append)
    qtbot.waitUntil(lambda: bool(accepted or errors), timeout=TIMEOUT_MS)
    assert not errors, errors
    return accepted[0]


def wait_state(window, qtbot, job_id: str, *states: str) -> None:
    qtbot.waitUntil(lambda: window.bridge.jobs.get(job_id).state in states, timeout=TIMEOUT_MS)


def test_live_curve_gains_points_while_the_job_runs(ready_window, qtbot):
    dock = ready_window.runs_dock
    job = submit(ready_window, qtbot, "diag.count", {"steps": 40, "delay_s": 0.05})
    assert dock.current_record().id == job  # the dock selects what was just submitted
    record = ready_window.bridge.jobs.get(job)
    qtbot.waitUntil(lambda: dock.curve_point_count() >= 3, timeout=TIMEOUT_MS)
    counts = [dock.curve_point_count()]
    while record.state == "running" and len(counts) < 4:
        qtbot.waitUntil(lambda: dock.curve_point_count() > counts[-1]
                        or record.state != "running", timeout=TIMEOUT_MS)
        if record.state == "running":
            counts.append(dock.curve_point_count())
    assert len(counts) >= 3, f"the curve did not grow while running: {counts}"
    assert counts == sorted(counts)
    wait_state(ready_window, qtbot, job, "succeeded")
    qtbot.waitUntil(lambda: dock.curve_point_count() == 40, timeout=TIMEOUT_MS)
    row = dock.model.row_of(job)
    assert dock.model.index(row, 2).data() == "succeeded"
    assert dock.model.index(row, 3).data() == "40/40"


def test_cancel_from_the_runs_dock(ready_window, qtbot):
    dock = ready_window.runs_dock
    job = submit(ready_window, qtbot, "diag.count", {"steps": 1000, "delay_s": 0.05})
    wait_state(ready_window, qtbot, job, "running")
    dock.select(job)
    assert dock.cancel_action.isEnabled()
    seen = []
    ready_window.commands.listen(seen.append)
    # a run still going is not deleted: the refusal says so and the run goes on
    with pytest.raises(CommandRefused, match=f"{job} is still queued or running"):
        ready_window.command("runs.delete", run_ids=[job])
    assert ready_window.bridge.jobs.get(job).state == "running"
    dock.cancel_action.trigger()
    assert seen[-1].python() == f'studio.command("runs.cancel", run_ids=["{job}"])'
    wait_state(ready_window, qtbot, job, "cancelled")
    assert ready_window.bridge.jobs.get(job).step < 1000
    assert Workspace(ready_window.workspace.root).run(job)["state"] == "cancelled"
    qtbot.waitUntil(lambda: ready_window.bridge.state == "ready", timeout=TIMEOUT_MS)


def test_rerun_with_edited_parameters_and_compare(ready_window, qtbot):
    from studio.runs_dock import RerunDialog

    dock = ready_window.runs_dock
    first = submit(ready_window, qtbot, "diag.count", {"steps": 6, "delay_s": 0.0})
    wait_state(ready_window, qtbot, first, "succeeded")
    record = ready_window.bridge.jobs.get(first)
    method = next(m for m in ready_window.bridge.methods if m["id"] == "diag.count")
    dialog = RerunDialog(ready_window, record, method, ready_window)
    dialog.form.set_values({"steps": 9})
    dialog.seed.setValue(3)
    known = {r.id for r in ready_window.bridge.jobs.records()}
    results = []
    dialog.finished.connect(results.append)
    seen = []
    ready_window.commands.listen(seen.append)
    dialog.submit()
    qtbot.waitUntil(lambda: bool(results), timeout=TIMEOUT_MS)
    assert results == [dialog.DialogCode.Accepted]
    # the form's Run is a command a script can repeat
    assert seen[-1].source == "user" and seen[-1].python() == (
        f'studio.command("runs.rerun_with_changes", run_ids=["{first}"], '
        f'params={{"steps": 9, "delay_s": 0.0}}, seed=3)')
    second = next(r.id for r in ready_window.bridge.jobs.records() if r.id not in known)
    wait_state(ready_window, qtbot, second, "succeeded")
    assert ready_window.bridge.jobs.get(second).params == {"steps": 9, "delay_s": 0.0}
    assert ready_window.bridge.jobs.get(second).seed == 3

    dock.select(first, second)
    qtbot.waitUntil(lambda: len(dock.plot.series_names()) == 2
                    and dock.curve_point_count() == 15, timeout=TIMEOUT_MS)
    assert "comparing 2 runs" in dock.compare_note.text()
    assert dock.plot.provenance["runs"][1]["run_id"] in (first, second)

    # rejected parameters come back inline, on the field
    dialog = RerunDialog(ready_window, record, method, ready_window)
    dialog.form.set_values({"steps": 0})
    dialog.submit()
    assert "steps" in dialog.form.errors()


def test_history_notes_delete_and_export(ready_window, qtbot, tmp_path, studio_settings,
                                         studio_dirs):
    from studio.widgets.plot_view import read_png_provenance, read_svg_provenance

    dock = ready_window.runs_dock
    job = submit(ready_window, qtbot, "diag.count", {"steps": 5, "delay_s": 0.0})
    wait_state(ready_window, qtbot, job, "succeeded")
    dock.select(job)
    qtbot.waitUntil(lambda: dock.curve_point_count() == 5, timeout=TIMEOUT_MS)

    # export: PNG and SVG here with provenance, PDF rendered by the engine
    for suffix, read in (("png", read_png_provenance), ("svg", read_svg_provenance)):
        target = tmp_path / f"curve.{suffix}"
        ready_window.export_plot_to(dock.plot, target)
        provenance = read(target)
        assert provenance["run_id"] == job
        assert provenance["params"] == {"steps": 5, "delay_s": 0.0}
        assert provenance["code_version"]
    pdf = tmp_path / "curve.pdf"
    done = []
    ready_window.export_plot_to(dock.plot, pdf, on_done=done.append)
    qtbot.waitUntil(lambda: bool(done or ready_window.errors), timeout=TIMEOUT_MS)
    assert not ready_window.errors, ready_window.errors
    assert pdf.read_bytes().startswith(b"%PDF") and job.encode() in pdf.read_bytes()

    # a checkpoint folder copied out
    checkpoint = ready_window.workspace.run_dir(job) / "checkpoints" / "model"
    checkpoint.mkdir(parents=True)
    (checkpoint / "cfg.json").write_text(json.dumps({"d": 4}))
    copied = []
    ready_window.export_checkpoint_to(checkpoint, tmp_path, on_done=copied.append)
    qtbot.waitUntil(lambda: bool(copied), timeout=TIMEOUT_MS)
    assert json.loads((copied[0] / "cfg.json").read_text()) == {"d": 4}

    # notes are kept in the workspace
    workspace_dir = ready_window.workspace.root
    dock.notes_edit.setPlainText("lr too high?")
    dock.save_notes_button.click()  # runs.set_notes
    qtbot.waitUntil(lambda: Workspace(workspace_dir).run(job)["notes"] == "lr too high?",
                    timeout=TIMEOUT_MS)

    # a later session lists the run from the workspace index, notes included
    later = MainWindow(settings=studio_settings, workspace=workspace_dir,
                       log_dir=studio_dirs / "logs")
    qtbot.addWidget(later)
    later.show()
    later.runs_dock.load_history()
    qtbot.waitUntil(lambda: job in later.bridge.jobs, timeout=TIMEOUT_MS)
    old = later.bridge.jobs.get(job)
    assert (old.state, old.notes, old.live) == ("succeeded", "lr too high?", False)
    later.runs_dock.select(job)
    qtbot.waitUntil(lambda: later.runs_dock.curve_point_count() == 5, timeout=TIMEOUT_MS)

    # delete: gone from the table, the index and the disk
    later.runs_dock.delete_runs([job])
    qtbot.waitUntil(lambda: job not in later.bridge.jobs, timeout=TIMEOUT_MS)
    assert later.runs_dock.model.row_of(job) == -1
    assert not (workspace_dir / "runs" / job).exists()
    with pytest.raises(KeyError):
        Workspace(workspace_dir).run(job)
    later.close()


def test_elapsed_time_ticks(ready_window, qtbot):
    job = submit(ready_window, qtbot, "diag.count", {"steps": 30, "delay_s": 0.05})
    wait_state(ready_window, qtbot, job, "running")
    record = ready_window.bridge.jobs.get(job)
    first = record.elapsed(time.time())
    qtbot.wait(300)
    assert record.elapsed(time.time()) > first
    wait_state(ready_window, qtbot, job, "succeeded")
    assert record.elapsed() == pytest.approx(record.elapsed(time.time() + 100))


def test_engine_killed_under_a_running_job(ready_window, qtbot):
    bridge = ready_window.bridge
    running = submit(ready_window, qtbot, "diag.count", {"steps": 1000, "delay_s": 0.05})
    wait_state(ready_window, qtbot, running, "running")
    queued = submit(ready_window, qtbot, "diag.echo", {"message": "waiting"})
    assert bridge.state == "busy"
    old_pid = bridge.pid
    bridge.kill_engine()  # SIGKILL
    wait_state(ready_window, qtbot, running, "failed")
    assert bridge.jobs.get(running).reason == "engine died"
    assert bridge.jobs.get(queued).state == "failed"
    qtbot.waitUntil(lambda: any(isinstance(w, QMessageBox) and "queued" in w.text()
                                for w in QApplication.topLevelWidgets()), timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: bridge.state == "ready" and bridge.pid != old_pid,
                    timeout=TIMEOUT_MS)
    assert ready_window.isVisible()
    assert "ready" in ready_window.engine_label.text()
    row = ready_window.runs_dock.model.row_of(running)
    assert ready_window.runs_dock.model.index(row, 2).data() == "failed"
    # the queued job offered again, and the new engine runs it
    ready_window.resubmit([bridge.jobs.get(queued).submission()])
    qtbot.waitUntil(lambda: any(r.state == "succeeded" for r in bridge.jobs.records()
                                if r.method == "diag.echo" and r.id != queued),
                    timeout=TIMEOUT_MS)
