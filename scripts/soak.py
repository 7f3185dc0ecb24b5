"""``make soak``: the real app started and stopped many times, and killed mid-edit, to catch the
rare crashes and lost edits a test run never meets.

1. Start Studio (``studio.app.run``, as the ``studio`` command does), open one file of each
   panel that opens files (crowd tracks, molecules, an fMRI run, transcripts, a routed design,
   a figure; the SAE panel opens none), idle, quit: ``SOAK_OFFSCREEN`` times offscreen and
   ``SOAK_XVFB`` times under Xvfb.
2. ``SOAK_KILLS`` times: start it on a crowd file, make edits through the panel's own command
   path (moves of people on the track map, or obstacles clicked into a scene) and SIGKILL it
   mid-edit; start it again on the file and count the edits restored against those the
   killed app had reported made (each is autosaved before it is reported).

Prints the runs, the crashes (a run ended by a signal), failures, hangs, the edits restored,
and every faulthandler trace the app wrote (``faulthandler.log`` in its log folder). Exit code
1 when anything crashed, hung or lost an edit. ``SOAK_IDLE_S`` (default 5) sets the idle time;
``python scripts/soak.py --offscreen 5 --xvfb 3 --kills 3`` is a short run.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
RUN_TIMEOUT_S = 240.0
OPEN_TIMEOUT_S = 120.0
EDIT_INTERVAL_S = 0.03
ENGINE_EXIT_WAIT_S = 15.0
SCENE = {"ground": {"size": [30, 24]}, "duration_s": 6, "fps": 5,
         "camera": [{"t_s": 0, "position": [0, -18, 8], "look_at": [0, 0, 0]}]}


# -- the files the app opens -----------------------------------------------------------------
def make_files(folder: Path) -> dict[str, Path]:
    """One small file per panel (the routed design comes from ../shared/data when present)."""
    import nibabel as nib
    import numpy as np

    files = {"crowd": folder / "tracks.csv", "molecules": folder / "molecules.smi",
             "fmri": folder / "bold.nii", "dialogue": folder / "chats.jsonl.gz",
             "lab": folder / "figure.png"}
    files["crowd"].write_text(tracks_text())
    files["molecules"].write_text("CCO ethanol\nc1ccccc1O phenol\n"
                                  "CC(=O)Oc1ccccc1C(=O)O aspirin\n")
    rng = np.random.default_rng(0)
    nib.save(nib.Nifti1Image((100 + rng.standard_normal((8, 9, 6, 12))).astype(np.float32),
                             np.diag([3.0, 3.0, 3.0, 1.0])), files["fmri"])
    chats = [{"messages": [{"role": "user", "content": f"Question {n}?"},
                           {"role": "assistant", "content": f"Answer {n}."}]} for n in range(3)]
    files["dialogue"].write_bytes(gzip.compress("".join(json.dumps(c) + "\n"
                                                        for c in chats).encode()))
    files["lab"].write_bytes(tiny_png())
    design = SHARED_DATA / "vlsi" / "gcd_nangate45_route.def"
    if design.is_file():
        files["routing"] = design
    return files


def tracks_text() -> str:
    """Three people walking over three frames (ETH/UCY-like metres, a CSV with a header)."""
    return "frame,id,x,y\n" + "".join(f"{f},{p},{p + 0.5 * f},{2.0 * p}\n"
                                      for f in range(3) for p in (1, 2, 3))


def tiny_png(width: int = 8, height: int = 8) -> bytes:
    """A grey gradient PNG, written by hand (no imaging library needed)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    rows = b"".join(b"\x00" + bytes(16 * x for x in range(width)) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


# -- the parent: runs and counts --------------------------------------------------------------
@dataclass
class Tally:
    runs: int = 0
    crashes: int = 0
    failures: int = 0
    hangs: int = 0
    made: int = 0          # edits the killed apps reported made (autosaved)
    restored: int = 0      # edits the restarted apps restored of those
    in_flight: int = 0     # restored beyond those reported: made, saved, killed before the print
    engines_left: int = 0  # engine processes still alive after their GUI was killed
    notes: list[str] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)


def child_env(home: Path, display: str | None) -> dict[str, str]:
    env = {**os.environ, "STUDIO_WORKSPACE": str(home / "workspace"),
           "STUDIO_LOG_DIR": str(home / "logs"), "XDG_CONFIG_HOME": str(home / "config"),
           "PYTHONUNBUFFERED": "1"}
    if display is None:
        env["QT_QPA_PLATFORM"] = "offscreen"
    else:
        env.pop("QT_QPA_PLATFORM", None)
        env["DISPLAY"] = display
    return env


def start_child(mode: str, files: list[Path], home: Path, display: str | None,
                expect: list[str] = ()) -> subprocess.Popen:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", mode,
               "--expect", ",".join(expect), *map(str, files)]
    return subprocess.Popen(command, env=child_env(home, display), cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen, label: str, home: Path, tally: Tally,
           timeout_s: float = RUN_TIMEOUT_S) -> dict:
    """Wait for a child; count how it ended; return its last JSON report."""
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        tally.hangs += 1
        tally.notes.append(f"{label}: hung (killed after {timeout_s:.0f} s)")
    tally.runs += 1
    code = process.returncode
    if code is not None and code < 0 and code != -signal.SIGKILL:
        tally.crashes += 1
        tally.notes.append(f"{label}: ended by signal {signal.Signals(-code).name}")
    elif code not in (0, None, -signal.SIGKILL):
        tally.failures += 1
        tally.notes.append(f"{label}: exit code {code}: {err.strip()[-600:]}")
    collect_traces(home, label, tally)
    reports = [line for line in out.splitlines() if line.startswith("{")]
    return json.loads(reports[-1]) if reports else {}


def collect_traces(home: Path, label: str, tally: Tally) -> None:
    """What faulthandler wrote beyond its start headers (a crash, or a hang's dump)."""
    path = home / "logs" / "faulthandler.log"
    if not path.is_file():
        return
    body = [line for line in path.read_text(errors="replace").splitlines()
            if line.strip() and not line.startswith("--- studio pid")]
    if body:
        tally.traces.append(f"{label} ({path}):\n" + "\n".join(body))


def idle_runs(count: int, display: str | None, files: dict[str, Path], tally: Tally,
              where: str) -> None:
    for number in range(1, count + 1):
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            label = f"{where} run {number}"
            started = time.monotonic()
            process = start_child("idle", list(files.values()), Path(tmp), display,
                                  expect=sorted(files))
            report = finish(process, label, Path(tmp), tally)
            missing = sorted(set(files) - set(report.get("opened", [])))
            if report and (missing or report.get("errors")):
                tally.notes.append(f"{label}: panels not opened {missing}, errors "
                                   f"{report.get('errors')}")
            print(f"{label}: exit {process.returncode}, {time.monotonic() - started:.1f} s, "
                  f"{len(report.get('opened', []))} panels", flush=True)


def kill_runs(count: int, folder: Path, tally: Tally, seed: int) -> None:
    """Edits through the panel, SIGKILL mid-edit, reopen, count what came back."""
    chooser = random.Random(seed)
    for number in range(1, count + 1):
        kind = ("tracks", "scene")[number % 2]
        with tempfile.TemporaryDirectory(prefix="soak-kill-") as tmp:
            home = Path(tmp)
            target = home / ("tracks.csv" if kind == "tracks" else "scene.json")
            target.write_text(tracks_text() if kind == "tracks" else json.dumps(SCENE))
            label = f"kill {number} ({kind})"
            process = start_child("edit", [target], home, None)
            engines = engine_pids(process.pid)
            made = wait_for_edits(process, chooser.randint(2, 20))
            engines = engines or engine_pids(process.pid)
            time.sleep(chooser.uniform(0, EDIT_INTERVAL_S))  # land between two prints
            process.send_signal(signal.SIGKILL)
            made = max(made, read_edits(process))
            finish(process, f"{label}, killed", home, tally)
            tally.engines_left += wait_engines_gone(engines)
            reopened = start_child("reopen", [target], home, None)
            report = finish(reopened, f"{label}, reopened", home, tally)
            restored = int(report.get("restored", -1))
            tally.made += made
            tally.restored += min(restored, made) if restored >= 0 else 0
            tally.in_flight += max(0, restored - made)
            if restored < made or restored > made + 1 or report.get("errors") \
                    or report.get("asked"):
                tally.notes.append(f"{label}: {made} edit(s) made, {restored} restored; "
                                   f"{report}")
            print(f"{label}: {made} made, {restored} restored", flush=True)


def wait_for_edits(process: subprocess.Popen, wanted: int) -> int:
    """Read "edit N" lines until ``wanted`` edits are made (or the child ended)."""
    made, deadline = 0, time.monotonic() + OPEN_TIMEOUT_S
    while made < wanted and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith("edit "):
            made = int(line.split()[1])
    return made


def read_edits(process: subprocess.Popen) -> int:
    """The last "edit N" line the killed child printed (its pipe is closed now)."""
    process.wait()
    lines = [line for line in process.stdout.read().splitlines() if line.startswith("edit ")]
    return int(lines[-1].split()[1]) if lines else 0


def engine_pids(pid: int) -> list[int]:
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def wait_engines_gone(pids: list[int]) -> int:
    """How many of the killed GUI's engine processes outlived it (they are killed then)."""
    import psutil

    deadline, alive = time.monotonic() + ENGINE_EXIT_WAIT_S, []
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid)
                 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return 0
        time.sleep(0.2)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    return len(alive)


def start_xvfb() -> tuple[subprocess.Popen, str]:
    read, write = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0",
                               "1600x1000x24", "-nolisten", "tcp"], pass_fds=(write,),
                              stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as pipe:
        number = pipe.readline().strip()
    if not number:
        server.kill()
        raise RuntimeError("Xvfb did not start (is it installed?)")
    return server, f":{number}"


def parent(args: argparse.Namespace) -> int:
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="soak-files-") as tmp:
        files = make_files(Path(tmp))
        print(f"soak: files {', '.join(f'{k}={v.name}' for k, v in files.items())}; "
              f"{args.offscreen} offscreen, {args.xvfb} under Xvfb, {args.kills} kills, "
              f"idle {args.idle_s:g} s", flush=True)
        os.environ["SOAK_IDLE_S"] = str(args.idle_s)
        idle_runs(args.offscreen, None, files, tally, "offscreen")
        if args.xvfb:
            server, display = start_xvfb()
            try:
                idle_runs(args.xvfb, display, files, tally, "xvfb")
            finally:
                server.terminate()
                server.wait()
        kill_runs(args.kills, Path(tmp), tally, args.seed)
    print("\n== soak ==")
    print(f"runs {tally.runs}, crashes {tally.crashes}, failures {tally.failures}, "
          f"hangs {tally.hangs}")
    print(f"kills {args.kills}: restored {tally.restored} of {tally.made} edits made "
          f"(+{tally.in_flight} made but not yet reported when killed); engines outliving "
          f"their GUI {tally.engines_left}")
    for note in tally.notes:
        print(f"  {note}")
    print("faulthandler traces:" + ("" if tally.traces else " none"))
    for trace in tally.traces:
        print(trace)
    lost = tally.restored < tally.made
    return 1 if tally.crashes or tally.hangs or tally.failures or lost else 0


# -- the child: the real app, driven through the panels' own methods ---------------------------
def child(mode: str, files: list[str], expect: list[str]) -> int:
    from studio.app import run

    def shown(window) -> None:
        import asyncio

        scenario = {"idle": idle_scenario, "edit": edit_scenario,
                    "reopen": reopen_scenario}[mode]
        task = asyncio.ensure_future(scenario(window, files, expect))

        def done(finished) -> None:
            if not finished.cancelled() and finished.exception() is not None:
                report({"error": repr(finished.exception())})
            window.close()

        task.add_done_callback(done)

    return run(files, on_shown=shown)


def report(values: dict) -> None:
    print(json.dumps(values), flush=True)


async def until(condition, timeout_s: float = OPEN_TIMEOUT_S) -> None:
    import asyncio

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the app did not get there in time")
        await asyncio.sleep(0.05)


async def idle_scenario(window, files: list[str], expect: list[str]) -> None:
    import asyncio

    with contextlib.suppress(TimeoutError):  # reported below as panels not opened
        await until(lambda: set(expect) <= set(window.panel_widgets) or window.errors)
    await asyncio.sleep(float(os.environ.get("SOAK_IDLE_S", "5")))
    report({"opened": sorted(window.panel_widgets), "errors": window.errors})


def crowd_panel(window):
    panel = window.panel_widgets.get("crowd")
    if panel is None or (panel.model.tracks is None and panel.scene_editor.model.path is None):
        return None
    return panel


async def edit_scenario(window, files: list[str], expect: list[str]) -> None:
    """Edits through the panel's own command path, one every ``EDIT_INTERVAL_S``, each
    reported once made (and so autosaved); the parent kills the app meanwhile."""
    import asyncio

    await until(lambda: crowd_panel(window) is not None)
    panel = crowd_panel(window)
    editor = panel.scene_editor
    editor.tool_box.setCurrentText("Obstacle")
    for number in range(1, 10_000):
        if panel.model.tracks is not None:
            person, frame = 1 + number % 3, (number // 3) % 3
            if not panel.move_waypoint(person, frame, (float(number), -float(number))):
                raise RuntimeError(f"edit {number} refused: {panel.status.text()}")
        else:  # obstacles on a grid, none on another
            x, y = -13 + 2 * (number % 14), -10 + 2 * ((number // 14) % 11)
            count = len(editor.model.scene.obstacles)
            editor.click(float(x), float(y))
            if len(editor.model.scene.obstacles) != count + 1:
                raise RuntimeError(f"edit {number} refused: {editor.status.text()}")
        print(f"edit {number}", flush=True)
        await asyncio.sleep(EDIT_INTERVAL_S)


async def reopen_scenario(window, files: list[str], expect: list[str]) -> None:
    """The restarted app opened the file: how many of its edits came back."""
    import asyncio

    await until(lambda: crowd_panel(window) is not None)
    await asyncio.sleep(0.5)  # a question about the saved edits would be open by now
    panel = crowd_panel(window)
    history = window.histories["crowd"]
    if panel.model.tracks is not None:
        restored = len(history.applied(panel.model.document))
    else:
        editor = panel.scene_editor
        restored = len(history.applied(editor.model.document))
        from engine.io.crowd import read_scene

        on_disk = len(read_scene(editor.model.path).obstacles)
        if on_disk != len(editor.model.scene.obstacles):
            window.errors.append(("scene", f"{on_disk} obstacles in the file, "
                                           f"{len(editor.model.scene.obstacles)} shown"))
    report({"restored": restored, "errors": window.errors, "asked": open_questions()})


def open_questions() -> list[str]:
    """The message boxes the app is showing (a question about saved edits, say)."""
    from PySide6.QtWidgets import QApplication, QMessageBox

    return [f"{box.windowTitle()}: {box.text()}" for box in QApplication.topLevelWidgets()
            if isinstance(box, QMessageBox) and box.isVisible()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    env = os.environ.get
    parser.add_argument("--offscreen", type=int, default=int(env("SOAK_OFFSCREEN", "50")))
    parser.add_argument("--xvfb", type=int, default=int(env("SOAK_XVFB", "20")))
    parser.add_argument("--kills", type=int, default=int(env("SOAK_KILLS", "20")))
    parser.add_argument("--idle-s", type=float, default=float(env("SOAK_IDLE_S", "5")))
    parser.add_argument("--seed", type=int, default=int(env("SOAK_SEED", "0")))
    parser.add_argument("--child", choices=("idle", "edit", "reopen"), help=argparse.SUPPRESS)
    parser.add_argument("--expect", default="", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.files, [p for p in args.expect.split(",") if p])
    return parent(args)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
