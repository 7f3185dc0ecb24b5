"""The GUI never imports torch (nor open3d or ray): models run in the engine process."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "open3d", "ray")


def imported_after(code: str) -> set[str]:
    """Top-level package names in sys.modules after running ``code`` in a fresh process."""
    probe = (f"import sys, json\n{code}\n"
             "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env={"QT_QPA_PLATFORM": "offscreen",
                                          "PATH": "/usr/bin:/bin"}, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_studio_app_is_light():
    modules = imported_after("import studio.app")
    assert not modules & set(HEAVY)
    assert "PySide6" not in modules  # Qt too loads only when the app runs


def test_the_whole_shell_with_a_plot_does_not_import_torch(tmp_path):
    code = f"""
from PySide6.QtWidgets import QApplication
from PySide6.QtCore import QSettings
app = QApplication([])
import studio.bridge, studio.host, studio.runs_dock, studio.undo, studio.settings_dialog
from studio.main_window import MainWindow
window = MainWindow(settings=QSettings({str(tmp_path / 's.ini')!r}, QSettings.Format.IniFormat),
                    workspace={str(tmp_path / 'ws')!r}, log_dir={str(tmp_path / 'logs')!r})
window.runs_dock._ensure_plot()
window.command("console.show")  # the IPython console and its kernel
window.close()
"""
    modules = imported_after(code)
    assert {"pyqtgraph", "studio", "engine"} <= modules
    assert "panels" not in modules  # the shell reaches panels through their entry points only
    assert not modules & set(HEAVY)
