"""PySide's lazily made types are all made on the main thread, a few per event-loop turn,
before the prewarm thread imports pyqtgraph (whose import reads every one of them): two threads
making them at once crashed the app at idle."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHECK = """
import importlib, json, sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([])
from studio.qt_types import MODULES, resolve_then

def unmade():
    modules = [importlib.import_module(name) for name in MODULES]
    return sum(name not in vars(m) for m in modules for name in dir(m))

before, turns, calls = unmade(), [], []
ticker = QTimer(interval=0)
ticker.timeout.connect(lambda: turns.append(1))
ticker.start()
resolve_then(lambda: (calls.append(unmade()), QTimer.singleShot(50, app.quit)))
app.exec()
print(json.dumps({"before": before, "calls": calls, "turns": len(turns)}))
"""


def test_every_type_is_made_on_the_main_thread_before_the_worker_starts():
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         env=env, timeout=120, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["before"] > 100           # PySide made them lazily: there was work to do
    assert report["calls"] == [0]           # then() ran once, with every type made
    assert report["turns"] > 5              # spread over turns of the event loop: no stall
