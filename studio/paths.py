"""Where Studio finds its resources and writes its logs (no Qt, so ``studio.app`` stays light)."""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "studio"


def resources_dir() -> Path:
    """``resources/`` beside the ``studio`` package (``$STUDIO_RESOURCES`` overrides it)."""
    if os.environ.get("STUDIO_RESOURCES"):
        return Path(os.environ["STUDIO_RESOURCES"])
    return Path(__file__).resolve().parent.parent / "resources"


def resource(*parts: str) -> Path:
    return resources_dir().joinpath(*parts)


def log_dir() -> Path:
    """The user's log folder (``$STUDIO_LOG_DIR`` overrides it, e.g. in tests)."""
    if os.environ.get("STUDIO_LOG_DIR"):
        return Path(os.environ["STUDIO_LOG_DIR"])
    from platformdirs import user_log_dir

    return Path(user_log_dir(APP_NAME, appauthor=False))
