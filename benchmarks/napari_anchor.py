"""napari's cold start to its viewer window, the anchor beside Studio's cold start.

napari and its Qt binding never enter the app's environment: they live in a venv of their own
under ``.benchmarks/napari-venv`` (``python3 -m venv`` + ``pip install "napari[pyqt5]"``),
made on first use. Each start is a fresh process that makes ``napari.Viewer()`` and reports
when its window is first exposed, timed from before the process was launched, as
``bench_gui`` times Studio. When the venv cannot be made the caller gets why, never a number.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

try:
    from benchmarks import anchor_venv
except ModuleNotFoundError:  # run as a script: this folder is on the path
    import anchor_venv

VENV = anchor_venv.ROOT / ".benchmarks" / "napari-venv"
READY = VENV / ".napari-installed"  # written after a successful install: its version
REQUIREMENT = "napari[pyqt5]"
INSTALL_TIMEOUT_S = 1800
START_TIMEOUT_S = 300

# Runs inside the napari venv: argv[1] is the wall-clock time before the launch.
CHILD_SCRIPT = """
import json, sys, time
started = float(sys.argv[1])
import napari
from qtpy.QtCore import QEvent, QObject, QTimer

viewer = napari.Viewer(show=False)
window = viewer.window._qt_window
app = napari.qt.get_qapp()

class Exposed(QObject):
    def eventFilter(self, watched, event):
        if event.type() == QEvent.Type.Expose and watched.isExposed():
            watched.removeEventFilter(self)
            print(json.dumps({"shown_s": time.time() - started}), flush=True)
            QTimer.singleShot(0, app.quit)
        return False

window.winId()
watcher = Exposed()
window.windowHandle().installEventFilter(watcher)
window.show()
app.exec_()
"""


def ensure_venv() -> tuple[Path | None, str]:
    """(the venv's python, "") once napari is installed; (None, why) when it cannot be."""
    return anchor_venv.ensure_venv(VENV, REQUIREMENT, "napari", READY, INSTALL_TIMEOUT_S)


def napari_starts(repeats: int) -> tuple[list[float], str]:
    """Seconds from launch to napari's window shown, ``repeats`` times; ([], why) if not."""
    python, why = ensure_venv()
    if python is None:
        return [], why
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        env["QT_QPA_PLATFORM"] = "offscreen"
    times = []
    for _ in range(repeats):
        started = time.time()
        out = subprocess.run([str(python), "-c", CHILD_SCRIPT, str(started)], env=env,
                             capture_output=True, text=True, timeout=START_TIMEOUT_S)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode != 0 or not lines:
            return [], f"napari did not start ({out.returncode}): {out.stderr.strip()[-300:]}"
        times.append(json.loads(lines[-1])["shown_s"])
    return times, ""


def version() -> str:
    return READY.read_text().strip() if READY.exists() else "?"


if __name__ == "__main__":  # python -m benchmarks.napari_anchor: make the venv, time 5 starts
    starts, reason = napari_starts(5)
    print(f"napari {version()}: median {statistics.median(starts):.2f} s {starts}"
          if starts else reason)
