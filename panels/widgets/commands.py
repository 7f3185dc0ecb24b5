"""The boundary of a panel's user commands (buttons, keys, table edits, job results).

An exception raised in a Qt slot reaches the event loop, which only prints it: the user sees
nothing, the panel is left half-done, and the log has no trace. ``command(title)`` wraps a
panel method so that whatever it raises is logged (``studio.log``), said in the panel's status
line and shown by the host, and the method returns ``None``. Qt still sees the method's own
signature (``functools.wraps``), so signals pass it the arguments it takes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("studio.panels")

Method = TypeVar("Method", bound=Callable[..., Any])


def command(title: str) -> Callable[[Method], Method]:
    """Decorate a method of a panel that has ``host`` (``show_error``) and ``status`` (a
    label); ``title`` says what failed, as the user would put it ("Cannot relabel the
    turn")."""

    def wrap(method: Method) -> Method:
        @functools.wraps(method)
        def guarded(panel: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(panel, *args, **kwargs)
            except Exception as exc:
                log.exception("%s (%s.%s)", title, type(panel).__name__, method.__name__)
                report(panel, title, f"{type(exc).__name__}: {exc}")
                return None

        return guarded  # type: ignore[return-value]

    return wrap


def report(panel: Any, title: str, message: str) -> None:
    """Say it in the panel's status line and through the host; a failure to say it is only
    logged (the boundary itself must never raise)."""
    try:
        status = getattr(panel, "status", None)
        if status is not None:
            status.setText(f"{title}: {message}")
        panel.host.show_error(title, message)
    except Exception:
        log.exception("could not report %r", title)
