"""A venv of its own for a benchmark's anchor (napari, DoWhy, KLayout): the anchor's pins never
enter the app's environment. Made on first use under ``.benchmarks/``; a marker file, written
after a successful install and import, makes later runs skip pip."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ensure_venv(venv: Path, requirement: str, module: str, ready: Path,
                install_timeout_s: float = 1800) -> tuple[Path | None, str]:
    """(the venv's python, "") once ``requirement`` is installed and ``module`` imports;
    (None, why) when that cannot be, so the caller reports why instead of a number."""
    python = venv / "bin" / "python"
    if ready.exists() and python.exists():
        return python, ""
    try:
        if not python.exists():
            subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(venv)],
                           check=True, capture_output=True, text=True, timeout=300)
        install = subprocess.run([str(python), "-m", "pip", "install", "-q", requirement],
                                 capture_output=True, text=True, timeout=install_timeout_s)
        if install.returncode != 0:
            lines = [ln for ln in install.stderr.splitlines() if not ln.startswith("WARNING")]
            return None, f"pip install {requirement} failed: " + " | ".join(lines[-3:])[-400:]
        version = subprocess.run(
            [str(python), "-c", f"import {module}; print(getattr({module}, '__version__', 'ok'))"],
            capture_output=True, text=True, timeout=300)
        if version.returncode != 0:
            return None, f"{module} installed but does not import: " + version.stderr[-400:]
        ready.write_text(version.stdout.strip())
        return python, ""
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot create {venv}: {type(exc).__name__}: {str(exc)[-300:]}"
