"""A panel that sets its widgets to show the state must not take their signals for the user's
actions (which would run commands and log lines nobody asked for)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class SetsWidgetsQuietly:
    """Mixed into a panel: its slots check ``self._quiet`` and ignore signals raised while
    the panel itself sets widgets inside ``with self.quietly():``."""

    _quiet: bool = False

    @contextmanager
    def quietly(self) -> Iterator[None]:
        """Widgets set here show the state; their signals are not the user's actions."""
        was, self._quiet = self._quiet, True
        try:
            yield
        finally:
            self._quiet = was
