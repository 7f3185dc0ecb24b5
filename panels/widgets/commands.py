"""The error boundary of a panel's Qt slots that are not (yet) commands.

A panel's actions are registered commands (``studio.commands``), run from widgets through
``registry.trigger``, which is the boundary for them: a refusal or a bug is logged, reported and
never raised into Qt. This decorator is the same boundary, through the same reporting
(``studio.commands.say``), for slots that only draw (a hover, a timer's redraw) and for the
panels whose actions have not moved onto commands yet: ``command(title)`` wraps a panel method
so that whatever it raises is logged (``studio.log``), said in the panel's status line and
shown by the host, and the method returns ``None``. Qt still sees the method's own signature
(``functools.wraps``), so signals pass it the arguments it takes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from studio.commands import failure_message, say

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
                report(panel, title, failure_message(exc))
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
    except Exception:
        log.exception("could not report %r", title)
    say(getattr(getattr(panel, "host", None), "show_error", None), title, message)
