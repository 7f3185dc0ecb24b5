"""How to start a Python module as a child process, from source or from a frozen bundle.

From source it is ``python -m module``. A PyInstaller bundle has no separate interpreter: its
own executable runs ``module`` when given ``--run-module module`` (``packaging/studio_main.py``),
so the engine and its workers start the same way inside the bundle.
"""

from __future__ import annotations

import sys

RUN_MODULE_FLAG = "--run-module"


def python_module(module: str) -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, RUN_MODULE_FLAG, module]
    return [sys.executable, "-m", module]
