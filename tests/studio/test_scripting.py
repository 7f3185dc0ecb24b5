"""``studio --script`` and the ``studio`` object: the route canvas's workflow (open, a command
edit, undo, export) run headless in a subprocess writes the figure the window's own path
writes; a script that raises, calls an unknown command, exits, or loops past ``--timeout``
exits non-zero naming its line; the window stays live while a script waits on a run."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine import provenance
from engine.vlsi import shared_design_paths
from studio.scripting import EXIT_RAISED, EXIT_TIMED_OUT, Studio, StudioRefused, run_script

ROOT = Path(__file__).resolve().parents[2]
DESIGN = shared_design_paths()
needs_design = pytest.mark.skipif(DESIGN is None, reason="../shared/data/vlsi is absent")


def studio_script(tmp_path: Path, source: str, *files: str, timeout_s: float | None = None,
                  wait_s: float = 180) -> subprocess.CompletedProcess:
    """``studio --script`` in a subprocess, on a workspace, settings and logs of its own."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    home = tmp_path / "home"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(home / "config"),
           "STUDIO_LOG_DIR": str(home / "logs"), "PYTHONPATH": str(ROOT)}
    # a workspace of its own: a window test on tmp_path's would replay the script's edits
    command = [sys.executable, "-m", "studio.app", "--workspace", str(home / "workspace"),
               "--script", str(script), *files]
    if timeout_s is not None:
        command += ["--timeout", str(timeout_s)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=wait_s)


def first_wire() -> tuple[dict, float]:
    """A wire of the gcd design named as the routing commands name it, and a move."""
    from panels.routing.commands import RoutingState, wire_args
    from panels.routing.model import RouteModel

    model = RouteModel()
    model.load_def(DESIGN[1], DESIGN[0])
    index = next(i for i, net in enumerate(model.design.nets)
                 if net.name.startswith("_") and len(model.design.net_wiring(i)[0]))
    raw = model.design.net_wiring(index)[0][0]
    net = model.design.nets[index].name
    return wire_args(RoutingState(model, host=None), net, model.segment_row(raw)), 0.38


def image_pixels(path: Path):
    from PySide6.QtGui import QImage

    image = QImage(str(path))
    assert not image.isNull(), path
    return image.width(), image.height(), bytes(image.constBits())


def comparable(record: dict) -> dict:
    """A provenance record without what differs between two writes of the same figure (the
    time; the checkout's commit, which others' commits move between the two; the versions of
    the packages each process had imported, compared apart)."""
    return {key: value for key, value in record.items()
            if key not in ("written", "commit", "versions")}


UNDO = ("edit.undo", {})


def headless_matches_window(tmp_path: Path, window, qtbot, data: Path, panel: str,
                            steps: list[tuple[str, dict]], loaded) -> dict:
    """Run ``steps`` (commands; ``UNDO`` is Edit > Undo) on ``data`` through ``studio
    --script`` and through the window (a click's ``trigger``, the Undo action, Ctrl+E's
    command); both figures must have the same pixels and provenance. Returns the record."""
    headless_png = tmp_path / "headless.png"
    lines = "\n".join(f"studio.command({command!r}, **{args!r})" for command, args in steps)
    result = studio_script(tmp_path, f"""
import json
{lines}
written = studio.export({str(headless_png)!r})
state = studio.panel({panel!r})
print(json.dumps({{"written": written, "documents": state["documents"],
                  "arrays": sorted(studio.data({panel!r}))}}))
""", str(data))
    assert result.returncode == 0, result.stderr
    assert "does not support" not in result.stderr   # offscreen notices stay off stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["written"] == str(headless_png)

    window.open_paths([str(data)])
    qtbot.waitUntil(lambda: panel in window.panel_widgets and
                    loaded(window.panel_widgets[panel]), timeout=60_000)
    settle = Studio(window)._settle   # as a user waits for the status line before clicking
    settle()
    for command, args in steps:
        if (command, args) == UNDO:
            window.undo_action.trigger()
        else:
            window.commands.trigger(command, **args)
        settle()
    assert not window.errors, window.errors
    window_png = tmp_path / "window.png"
    assert window.command("app.export_figure", path=str(window_png))
    assert image_pixels(headless_png) == image_pixels(window_png)
    headless, shown = provenance.read(headless_png), provenance.read(window_png)
    assert comparable(headless) == comparable(shown)
    assert headless["versions"].items() <= shown["versions"].items()
    return {**headless, "report": report}


@needs_design
def test_route_workflow_headless_matches_the_window(tmp_path, main_window, qtbot):
    wire, dx_um = first_wire()
    moved = ("routing.move_wire", {**wire, "dx_um": dx_um})
    record = headless_matches_window(
        tmp_path, main_window, qtbot, DESIGN[1], "routing",
        [moved, ("routing.select_net", {"net": wire["net"]}), UNDO, moved],
        lambda panel: panel.model.design is not None)
    assert record["view"]["edited"] is True and record["view"]["net"] == wire["net"]
    assert len(record["report"]["documents"][0]["edits"]) == 1   # moved, undone, moved
    assert "design.segments" in record["report"]["arrays"]


def test_fmri_workflow_headless_matches_the_window(tmp_path, main_window, qtbot):
    """fMRI's undoable edits act on a generated run (a BrainWorld job): the script covers
    opening, the cursor, the clock, an ROI and the export."""
    import nibabel as nib
    import numpy as np

    rng = np.random.default_rng(3)
    bold = tmp_path / "bold.nii.gz"
    nib.save(nib.Nifti1Image(rng.normal(100, 5, (14, 16, 12, 8)).astype(np.float32),
                             np.diag([3.0, 3.0, 3.0, 1.0])), bold)
    record = headless_matches_window(
        tmp_path, main_window, qtbot, bold, "fmri",
        [("fmri.set_cursor", {"voxel": [7, 8, 6]}), ("fmri.set_time", {"frame": 5}),
         ("fmri.add_sphere_roi", {"radius_mm": 6.0})],
        lambda panel: panel.model.base is not None)
    assert record["sources"][0]["path"] == str(bold.resolve())


SHARED_DATA = ROOT.parent / "shared" / "data"
MOLECULES = SHARED_DATA / "molecules" / "GNEprop_known_abx.tsv"
TRACKS = SHARED_DATA / "crowd" / "eth_biwi_eth.txt"


@pytest.mark.skipif(not MOLECULES.is_file(), reason="../shared/data/molecules is absent")
def test_molecules_workflow_headless_matches_the_window(tmp_path, main_window, qtbot):
    mark = ("molecules.mark_molecule", {"molecule": "Alafosfalin", "flag": "accepted"})
    record = headless_matches_window(
        tmp_path, main_window, qtbot, MOLECULES, "molecules",
        [mark, ("molecules.select_molecule", {"molecule": "Alafosfalin"}), UNDO,
         ("molecules.mark_molecule", {"molecule": "Alafosfalin", "flag": "flagged"})],
        lambda panel: bool(getattr(panel.model, "entries", None)))
    assert record["report"]["documents"][0]["edits"]   # the second mark, the first undone
    described = Studio(main_window).panel("molecules")
    assert any(item.startswith("data: the ") for item in described["missing"])


@pytest.mark.skipif(not TRACKS.is_file(), reason="../shared/data/crowd is absent")
def test_crowd_workflow_headless_matches_the_window(tmp_path, main_window, qtbot):
    move = ("crowd.move_person", {"person": 1, "frame": 780, "to": [8.0, 3.0]})
    headless_matches_window(
        tmp_path, main_window, qtbot, TRACKS, "crowd",
        [move, ("crowd.set_frame", {"frame": 2}), UNDO, move],
        lambda panel: panel.model.document.partition(":")[2] != "")


TRANSCRIPTS = SHARED_DATA / "dialogue" / "hh-rlhf_harmless-base_test.jsonl.gz"


@pytest.mark.skipif(not TRANSCRIPTS.is_file(), reason="../shared/data/dialogue is absent")
def test_dialogue_workflow_headless_matches_the_window(tmp_path, main_window, qtbot):
    label = ("dialogue.label_turn", {"transcript": "1/chosen", "turn": 1,
                                     "label": "sycophantic"})
    record = headless_matches_window(
        tmp_path, main_window, qtbot, TRANSCRIPTS, "dialogue",
        [label, ("dialogue.select_turn", {"transcript": "1/chosen", "turn": 1}), UNDO,
         ("dialogue.annotate_turn", {"transcript": "1/chosen", "turn": 1, "note": "checked"})],
        lambda panel: panel.model.transcript is not None)
    assert len(record["report"]["documents"][0]["edits"]) == 1   # the note; the label undone


def test_a_script_that_loops_is_stopped_by_its_timeout_at_its_line(tmp_path):
    started = time.monotonic()
    result = studio_script(tmp_path, """
        n = 0
        while True:
            n += 1
        """, timeout_s=1)
    assert result.returncode == EXIT_TIMED_OUT, result.stderr
    assert "script.py (line 3" in result.stderr or "script.py (line 4" in result.stderr
    assert "ScriptTimedOut" in result.stderr
    assert time.monotonic() - started < 60


def test_a_script_asleep_is_stopped_by_its_timeout(tmp_path):
    result = studio_script(tmp_path, """
        import time
        time.sleep(120)
        """, timeout_s=1)
    assert result.returncode == EXIT_TIMED_OUT
    assert "script.py (line 3): ScriptTimedOut" in result.stderr


def test_a_script_that_ignores_its_timeout_is_ended(tmp_path):
    result = studio_script(tmp_path, """
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
        """, timeout_s=1)
    assert result.returncode == EXIT_TIMED_OUT
    assert "did not stop after its timeout; ended" in result.stderr
    assert "script.py (line " in result.stderr


def test_library_code_runs_at_full_speed_under_the_guard():
    """The guard costs the script's callees nothing (a line tracer made them 5x slower)."""
    from studio.scripting import ScriptGuard

    def calls(count: int = 200_000) -> int:
        def step(value: int) -> int:
            return value + 1

        total = 0
        for _ in range(count):
            total = step(total)
        return total

    code = compile("started = time.perf_counter(); calls(); took = time.perf_counter() - "
                   "started", "<guarded>", "exec")
    plain: dict = {"calls": calls, "time": time}
    exec(code, plain)
    guarded = dict(plain)
    with ScriptGuard(lambda frame_code: frame_code.co_filename == "<guarded>").guarding():
        exec(code, guarded)
    assert guarded["took"] < 2.5 * plain["took"] + 0.05


def run_in_window(window, tmp_path: Path, source: str, *files: str) -> tuple[int, str]:
    script = tmp_path / "inline.py"
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    err = io.StringIO()
    return run_script(window, script, list(files), out=err), err.getvalue()


def test_errors_exit_non_zero_with_the_scripts_line(main_window, tmp_path):
    code, err = run_in_window(main_window, tmp_path, """
        x = 1
        raise ValueError("boom")
        """)
    assert code == EXIT_RAISED
    assert "inline.py (line 3): ValueError: boom" in err and 'raise ValueError("boom")' in err

    code, err = run_in_window(main_window, tmp_path, """
        studio.command("routing.no_such_thing", net="_001_")
        """)
    assert code == EXIT_RAISED
    assert "line 2" in err and "routing.no_such_thing: no such command" in err

    code, err = run_in_window(main_window, tmp_path, 'studio.command("view.theme", theme="x")')
    assert code == EXIT_RAISED and "view.theme: theme" in err

    code, _err = run_in_window(main_window, tmp_path, "raise SystemExit(3)")
    assert code == 3
    code, _err = run_in_window(main_window, tmp_path, "import sys\nsys.exit()")
    assert code == 0

    code, err = run_in_window(main_window, tmp_path, "def broken(:\n    pass")
    assert code == 2 and "inline.py, line 1" in err

    code, err = run_in_window(main_window, tmp_path, "print(1)", str(tmp_path / "nope.def"))
    assert code == EXIT_RAISED and "nope.def: no such file" in err


def test_unreadable_file_is_refused_with_the_windows_message(main_window, tmp_path):
    bad = tmp_path / "broken.def"
    bad.write_text("VERSION 5.8 ;\nDESIGN broken ;\nUNITS DISTANCE MICRONS", encoding="utf-8")
    studio = Studio(main_window)
    main_window.show_error("Earlier", "a box the user has not closed yet")
    earlier = list(main_window._message_boxes)
    with pytest.raises(StudioRefused, match="broken.def"):
        studio.open(bad)
    # the script's refusal is the exception, not a box left open; the user's box stays
    assert main_window._message_boxes == earlier and earlier[0].isVisible()


def test_panel_and_data_describe_what_is_open(main_window):
    studio = Studio(main_window)
    closed = studio.panel("routing")
    assert closed["open"] is False and closed["documents"] == []
    with pytest.raises(StudioRefused, match="no panel 'nope'"):
        studio.panel("nope")
    with pytest.raises(StudioRefused, match="not open"):
        studio.data("routing")
    assert any(command["id"] == "edit.undo" for command in studio.commands())
    if DESIGN is not None:
        assert studio.open(DESIGN[1]) == "routing"
        described = studio.panel("routing")
        assert described["open"] and described["in_front"]
        assert described["documents"][0]["path"] == str(DESIGN[1].resolve())
        assert described["view_state"] is not None and not described["missing"]
        arrays = studio.data("routing")
        assert arrays["design.segments"].ndim == 2


def test_run_waits_for_the_job_while_the_window_stays_live(main_window, qtbot):
    from PySide6.QtCore import QTimer

    studio = Studio(main_window)
    ticks: list[int] = []
    clock = QTimer()
    clock.timeout.connect(lambda: ticks.append(1))
    clock.start(20)
    started = time.monotonic()
    run = studio.run("diag.echo", {"message": "from a script"})
    clock.stop()
    assert run["state"] == "succeeded", run
    assert run["id"] and Path(run["run_dir"]).is_dir()
    assert len(ticks) >= (time.monotonic() - started) / 0.02 * 0.3   # the loop kept turning
    with pytest.raises(StudioRefused):
        studio.run("diag.no_such_method")


def route_session(window, path: Path, net: str) -> tuple[Studio, Path]:
    """The gcd design open with ``net`` selected, saved as a session at ``path``."""
    studio = Studio(window)
    studio.open(DESIGN[1])
    studio.command("routing.select_net", net=net)
    return studio, Path(studio.save_session(path))


@needs_design
def test_sessions_from_a_script(main_window, tmp_path):
    studio, saved = route_session(main_window, tmp_path / "route", "_001_")
    assert saved.suffix == ".studio" and saved.is_file()
    studio.command("routing.select_net", net="_002_")
    report = studio.open_session(saved)
    assert str(DESIGN[1].resolve()) in " ".join(report["opened"]) and not report["refused"]
    assert studio.panel("routing")["view_state"]["net"] == "_001_"
    (tmp_path / "bad.studio").write_bytes(b"not a zip")
    with pytest.raises(StudioRefused, match="bad.studio"):
        studio.open_session(tmp_path / "bad.studio")


@needs_design
def test_session_flag_opens_the_session_before_the_script(main_window, tmp_path):
    _studio, session = route_session(main_window, tmp_path / "saved.studio", "_003_")
    result = studio_script(tmp_path, """
        print("net", studio.panel("routing")["view_state"]["net"])
        """, "--session", str(session))
    assert result.returncode == 0, result.stderr
    assert "net _003_" in result.stdout


def test_timeout_needs_a_script():
    from studio.app import run

    with pytest.raises(SystemExit) as exited:
        run(["--timeout", "3"])
    assert exited.value.code == 2


def test_a_script_runs_a_method_and_exports_its_curve(tmp_path):
    """The batch-figure path: a run from a script, its curve (the runs dock's plot, which
    Ctrl+E writes from the Welcome tab) exported with the run inside the file."""
    figure = tmp_path / "curve.png"
    result = studio_script(tmp_path, f"""
        run = studio.run("diag.count", {{"steps": 20, "delay_s": 0.0}})
        assert run["state"] == "succeeded", run
        studio.command("view.welcome")
        print(run["id"], studio.export({str(figure)!r}))
        """)
    assert result.returncode == 0, result.stderr
    run_id, written = result.stdout.split()[-2:]
    assert written == str(figure)
    record = provenance.read(figure)
    assert [entry["run_id"] for entry in record["runs"]] == [run_id]
    assert record["runs"][0]["params"]["steps"] == 20
