"""Methods for developers: the diagnostics (``diag.crash``, ``diag.hang``, ``diag.secret``…)
exist for the self-test, the Ray demo and the tests. Users are shown them only in developer
mode (``STUDIO_DEV=1``); they stay runnable by id either way."""

from __future__ import annotations

import os

DEVELOPER_PAPERS = frozenset({"diagnostics"})


def developer_mode() -> bool:
    return os.environ.get("STUDIO_DEV") == "1"


def listed(method: dict) -> bool:
    """Whether a method (its ``describe()`` form) is shown in lists, the lab and the palette."""
    return developer_mode() or method.get("paper") not in DEVELOPER_PAPERS
