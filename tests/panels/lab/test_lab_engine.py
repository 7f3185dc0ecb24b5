"""The lab against a real engine: the EoS method submitted from the form ends in a succeeded
run whose live plot gained points while it ran."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from panels.lab.view import LabPanel

pytest.importorskip("studio.host")
pytest.importorskip("studio.bridge")


def save_screenshot(widget, name: str) -> None:
    """With $STUDIO_SCREENSHOTS set, keep a picture of what the test saw there."""
    folder = os.environ.get("STUDIO_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        widget.grab().save(str(Path(folder) / name))


@pytest.fixture
def real_host(request, qtbot, qasync_loop, workspace_dir, studio_dirs):
    """The shell's host: from the main window when it exists, else over a bare bridge."""
    if importlib.util.find_spec("studio.main_window") is not None:
        yield request.getfixturevalue("host")
        return
    from engine.workspace import Workspace
    from studio.bridge import EngineBridge
    from studio.host import StudioHost

    bridge = EngineBridge(workspace_dir, workers=1, log_dir=studio_dirs / "logs")
    errors = []
    window = SimpleNamespace(bridge=bridge, workspace=Workspace(workspace_dir),
                             show_error=lambda title, message: errors.append((title, message)))
    bridge.start()
    qtbot.waitUntil(lambda: bridge.is_ready, timeout=60_000)
    try:
        yield StudioHost(window, window.history)
    finally:
        bridge.stop_now()
    assert errors == []


@pytest.mark.slow
def test_eos_from_the_form_succeeds_and_its_plot_grows_while_running(real_host, qtbot,
                                                                     make_widget):
    lab = make_widget(LabPanel, real_host)
    lab.resize(1200, 700)
    lab.show()
    qtbot.waitUntil(lambda: "eos.train" in lab.model.methods, timeout=30_000)
    lab.select_paper("eos")
    assert lab.model.selected == "eos.train"
    # long enough to be seen running (a second or two), small enough for CI
    lab.form.set_values({"steps": 2000, "record_every": 1})
    assert lab.form.validate() == {}

    counts_while_running: list[int] = []

    def on_progress(job, step, total, metrics):
        if job.state == "running":
            counts_while_running.append(lab.live_plot("loss").point_count("loss"))

    lab.model.events.connect("progress", on_progress)
    lab.run()
    qtbot.waitUntil(lambda: lab.model.current is not None and lab.model.current.finished,
                    timeout=120_000)
    job = lab.model.current
    assert job.state == "succeeded", job.reason
    assert len(set(counts_while_running)) >= 2, counts_while_running  # grew while running
    assert lab.live_plot("loss").point_count("loss") == 2001  # all of metrics.jsonl
    qtbot.waitUntil(lambda: lab.artifact_list.count() > 0, timeout=5000)
    shown = lab.current_plot()  # the first plot artifact, drawn from its spec
    assert shown is not lab.live_plot("loss") and shown.provenance["run_id"] == job.id
    assert sum(shown.point_count(name) for name in shown.series_names()) > 0
    save_screenshot(lab, "lab-eos-artifacts.png")
    lab.tabs.setCurrentIndex(0)
    save_screenshot(lab, "lab-eos-live.png")


@pytest.mark.slow
def test_refused_parameters_then_reproduce_claim_in_smoke_mode(real_host, qtbot, make_widget):
    lab = make_widget(LabPanel, real_host)
    lab.resize(1200, 700)
    lab.show()
    qtbot.waitUntil(lambda: "eos.reproduce" in lab.model.methods, timeout=30_000)
    lab.select_paper("eos")
    # within every bound, refused by the Params' own check: the message shows on the form
    lab.form.set_values({"loss": "logistic", "classes": 3})
    lab.run()
    qtbot.waitUntil(lambda: bool(lab.form.errors()), timeout=30_000)
    assert "logistic loss is binary" in lab.form.errors()[""]
    assert lab.run_button.isEnabled() and lab.model.current is None

    lab.profile_box.setCurrentText("smoke")
    lab.reproduce()
    qtbot.waitUntil(lambda: lab.model.current is not None and lab.model.current.finished,
                    timeout=120_000)
    assert lab.model.current.state == "succeeded", lab.model.current.reason
    assert lab.model.current.method == "eos.reproduce"
    assert lab.claim_view.verdict() in ("PASS", "FAIL", "INCONCLUSIVE")  # smoke decides nothing
    assert lab.claim_view.claim["smoke"] is True and lab.claim_view.smoke_note.text()
    assert len(lab.claim_view.row_verdicts()) == len(lab.claim_view.claim["criteria"]) > 0
    save_screenshot(lab, "lab-eos-claim.png")
