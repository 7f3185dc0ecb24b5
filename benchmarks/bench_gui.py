"""GUI: cold start to the window shown, idle memory, and the longest main-thread stall while a
chatty job streams events.

Each measurement runs the real application (``studio.app.run``) in a fresh process on a
throwaway workspace: ``python benchmarks/bench_gui.py --child cold|idle|stall`` is that
process; it prints one JSON line. ``python -m benchmarks gui`` (or this file alone) prints the
table. Offscreen Qt unless a display is set. No assertions: numbers only. napari's cold start,
the anchor, is measured in the same run in a venv of its own (``napari_anchor``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COLD_STARTS = 5
CHATTY_EVENTS = 200_000
CURVE_STEPS = 20_000
STALL_TIMER_MS = 10
IDLE_SETTLE_S = 3.0


def run() -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="studio-bench-") as home:
        cold = [_child("cold", home)["shown_s"] for _ in range(COLD_STARTS)]
        bare = [_child("bare", home)["shown_s"] for _ in range(COLD_STARTS)]
        idle = _child("idle", home)
        stall = _child("stall", home)
    try:  # here, not at the top: the timed child processes do not import it
        from benchmarks.napari_anchor import napari_starts
    except ModuleNotFoundError:  # run as a script: this folder is on the path
        from napari_anchor import napari_starts
    napari, why_not = napari_starts(COLD_STARTS)
    anchor = (f"napari {statistics.median(napari):.2f} s (median of {COLD_STARTS}, this run, "
              f"its own venv)" if napari else f"napari not measured: {why_not}")
    return [
        {"name": f"cold start to window shown (median of {COLD_STARTS})",
         "value": statistics.median(cold), "unit": "s", "target": "<= 1.0",
         "reference": f"min {min(cold):.2f}, max {max(cold):.2f}; {anchor}"},
        {"name": f"cold start of a bare PySide6 window (median of {COLD_STARTS})",
         "value": statistics.median(bare), "unit": "s",
         "reference": "the floor on this machine now (its load varies)"},
        {"name": "GUI memory when idle (RSS, engine ready)", "value": idle["gui_rss_mb"],
         "unit": "MiB", "target": "<= 200",
         "reference": f"engine + workers {idle['engine_rss_mb']:.0f} MiB; engine ready "
                      f"{idle['engine_ready_s']:.1f} s after launch"},
        {"name": f"longest main-thread stall, diag.chatty {CHATTY_EVENTS} events",
         "value": stall["max_stall_ms"], "unit": "ms", "target": "< 50",
         "reference": f"p99 {stall['p99_stall_ms']:.1f} ms over {stall['ticks']} ticks; "
                      f"job offered {stall['offered_per_s']:.0f} events/s, "
                      f"{stall['events_seen']} reached the GUI"},
        {"name": f"longest stall, live curve (diag.count {CURVE_STEPS} steps)",
         "value": stall["curve_max_stall_ms"], "unit": "ms", "target": "< 50",
         "reference": f"p99 {stall['curve_p99_stall_ms']:.1f} ms; {stall['curve_points']} "
                      f"points drawn"},
        {"name": "GUI memory after both jobs (RSS)", "value": stall["gui_rss_mb"],
         "unit": "MiB"},
    ]


def _child(mode: str, home: str) -> dict:
    env = {**os.environ, "STUDIO_WORKSPACE": str(Path(home) / "workspace"),
           "STUDIO_LOG_DIR": str(Path(home) / "logs"),
           "XDG_CONFIG_HOME": str(Path(home) / "config")}
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        env["QT_QPA_PLATFORM"] = "offscreen"
    started = time.time()
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(started)],
                         capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"benchmark child {mode} failed ({out.returncode}):\n"
                           f"{out.stdout}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


# -- the child process ------------------------------------------------------------------------
def _child_main(mode: str, started: float) -> int:
    if mode == "bare":
        return _bare_window(started)
    from studio.app import run as run_app

    def shown(window) -> None:
        shown_s = time.time() - started
        if mode == "cold":
            _report({"shown_s": shown_s})
            from PySide6.QtCore import QTimer

            QTimer.singleShot(0, window.close)
            return
        import asyncio

        scenario = _idle if mode == "idle" else _stall
        task = asyncio.ensure_future(scenario(window, started))
        task.add_done_callback(lambda t: (t.exception() and _report(
            {"error": repr(t.exception())}), window.close()))

    return run_app([], on_shown=shown)


def _bare_window(started: float) -> int:
    """The floor: an empty PySide6 main window, shown the same way."""
    from PySide6.QtCore import QEvent, QObject, QTimer
    from PySide6.QtWidgets import QApplication, QLabel, QMainWindow

    from studio import main_thread_gc

    app = QApplication(sys.argv[:1])
    main_thread_gc.install(app)  # as the app does: no collection on worker threads
    window = QMainWindow()
    window.setCentralWidget(QLabel("bare"))

    class Exposed(QObject):
        def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
            if event.type() == QEvent.Type.Expose and watched.isExposed():
                watched.removeEventFilter(self)
                _report({"shown_s": time.time() - started})
                QTimer.singleShot(0, app.quit)
            return False

    window.winId()
    watcher = Exposed()
    window.windowHandle().installEventFilter(watcher)
    window.show()
    return app.exec()


async def _until(condition, timeout_s: float = 120.0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not met")
        await asyncio.sleep(0.02)


def _rss_mb(pid: int | None = None, children: bool = False) -> float:
    import psutil

    process = psutil.Process(pid)
    processes = [process, *process.children(recursive=True)] if children else [process]
    return sum(p.memory_info().rss for p in processes) / 2**20


async def _idle(window, started: float) -> None:
    import asyncio

    await _until(lambda: window.bridge.is_ready)
    ready_s = time.time() - started
    await asyncio.sleep(IDLE_SETTLE_S)
    _report({"gui_rss_mb": _rss_mb(), "engine_rss_mb": _rss_mb(window.bridge.pid, True),
             "engine_ready_s": ready_s})


async def _stall(window, started: float) -> None:
    """The chatty job (events and log lines, no metrics), then a job drawing a live curve."""
    await _until(lambda: window.bridge.is_ready)
    chatty = await _measure_stall(window, "diag.chatty", {"events": CHATTY_EVENTS})
    curve = await _measure_stall(window, "diag.count", {"steps": CURVE_STEPS, "delay_s": 0.0})
    _report({**chatty, "curve_max_stall_ms": curve["max_stall_ms"],
             "curve_p99_stall_ms": curve["p99_stall_ms"], "curve_points":
                 window.runs_dock.curve_point_count(), "gui_rss_mb": _rss_mb()})


async def _measure_stall(window, method: str, params: dict) -> dict:
    from PySide6.QtCore import QTimer

    # a first job warms the worker, so the measured one streams from its first step
    warm = []
    window.submit("diag.echo", {"message": "warm"}, on_accepted=warm.append)
    await _until(lambda: warm and not window.bridge.jobs.get(warm[0]).active)
    seen = {"events": 0}
    unsubscribe = window.bridge.subscribe(
        lambda message: seen.__setitem__("events", seen["events"] + 1))
    lateness: list[float] = []
    expected = {"at": time.perf_counter() + STALL_TIMER_MS / 1000}

    def tick() -> None:
        now = time.perf_counter()
        lateness.append(max(0.0, now - expected["at"]) * 1000)
        expected["at"] = now + STALL_TIMER_MS / 1000

    timer = QTimer()
    timer.setInterval(STALL_TIMER_MS)
    timer.timeout.connect(tick)
    accepted: list[str] = []
    window.submit(method, params, on_accepted=accepted.append)
    timer.start()
    expected["at"] = time.perf_counter() + STALL_TIMER_MS / 1000
    await _until(lambda: accepted and not window.bridge.jobs.get(accepted[0]).active)
    timer.stop()
    record = window.bridge.jobs.get(accepted[0])
    unsubscribe()
    ordered = sorted(lateness) or [0.0]
    return {"max_stall_ms": ordered[-1], "p99_stall_ms": ordered[int(0.99 * (len(ordered) - 1))],
            "ticks": len(lateness), "state": record.state,
            "offered_per_s": float(record.outputs.get("offered_per_s", 0.0)),
            "events_seen": seen["events"]}


def _report(values: dict) -> None:
    print(json.dumps(values), flush=True)


def _print_table(rows: list[dict]) -> None:
    print(f"{'benchmark':<60} {'value':>10} {'unit':<5} {'target':<8} reference")
    for row in rows:
        print(f"{row['name']:<60} {row['value']:>10.3g} {row['unit']:<5} "
              f"{row.get('target', ''):<8} {row.get('reference', '')}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        raise SystemExit(_child_main(sys.argv[2], float(sys.argv[3])))
    _print_table(run())
