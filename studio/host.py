"""What the shell gives every panel: ``panels.api.PanelHost``, implemented over the bridge.

Calls return at once; results come back through callbacks on the Qt main thread. Panels never
see asyncio, the socket or the engine process. Beyond the protocol, the host offers:

- ``restore_edits(document, model, decode)``: replay a document's autosaved edits (after a
  crash) onto a fresh model; ``decode(json) -> EditCommand``. Returns how many.
- ``edit_group(label)``: a context manager making the edits pushed inside one undo step.
- ``export_plot(view)``: the shell's export dialog for a ``PlotSpecView`` (PNG, SVG or PDF).
- ``commands``: the window's ``CommandRegistry``; a panel registers its commands there.
- ``workspace_path()``: the workspace folder (artifacts of earlier runs live under it).
- ``panel_for(path)`` / ``open_in_panel(path)``: which panel opens a file (a run's artifact
  the lab cannot show) and opening it there, by File > Open's rule.

Subscribers receive job events (protocol envelopes) plus two notices of the shell's own:
``{"type": "engine_state", "content": {"state"}}`` and ``{"type": "methods", "content":
{"methods"}}`` (sent whenever the engine (re)starts, so a panel opened before the engine was
ready can fill its method list).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from studio.documents import document_file

log = logging.getLogger("studio.host")


class StudioHost:
    """One per panel: the window's engine and workspace, and the panel's own undo history
    (``history``: its tab's stack in the window's undo group)."""

    def __init__(self, window, history) -> None:
        self._window = window
        self.history = history

    @property
    def commands(self):
        """The window's command registry (``studio.commands``): panels register theirs and
        bind their state to it."""
        return self._window.commands

    @property
    def _bridge(self):
        return self._window.bridge

    # -- panels.api.PanelHost ------------------------------------------------------------------
    def methods(self) -> list[dict]:
        return list(self._bridge.methods)

    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]:
        return self._bridge.subscribe(callback)

    def submit_job(self, method: str, params: dict, inputs: dict | None = None, seed: int = 0,
                   on_accepted: Callable[[str], None] | None = None,
                   on_error: Callable[[str], None] | None = None,
                   cluster: str | None = None) -> None:
        cluster = (cluster or "").strip() or self._window.settings.cluster

        async def submit() -> None:
            job_id = await self._bridge.submit(method, params, inputs, seed, cluster)
            if on_accepted is not None:
                on_accepted(job_id)

        self._bridge.spawn(submit(), on_error=self._reporter(
            f"Could not start {method}", on_error))

    def cancel_job(self, job_id: str, hard: bool = False) -> None:
        self._bridge.spawn(self._bridge.cancel(job_id, hard=hard),
                           on_error=self._reporter(f"Could not cancel {job_id}", None))

    def request(self, name: str, args: dict, on_reply: Callable[[dict], None],
                on_error: Callable[[str], None] | None = None) -> None:
        async def ask() -> None:
            on_reply(await self._bridge.request(name, args))

        self._bridge.spawn(ask(), on_error=self._reporter(f"Request {name} failed", on_error))

    def run_dir(self, run_id: str) -> str:
        return str(self._window.workspace.run_dir(run_id))

    def push_edit(self, document: str, command: Any, model: Any) -> None:
        """Applies ``command`` to ``model`` (through the undo stack) and autosaves it."""
        self.history.push(document, command, model)

    def forget_edits(self, document: str) -> None:
        """Takes the document's steps off the window's undo stack (its autosave stays)."""
        self.history.forget(document)

    def document_saved(self, document: str) -> None:
        """The panel saved ``document`` over its own file: its edits are in the file now."""
        self.history.document_saved(document)

    def show_error(self, title: str, message: str) -> None:
        self._window.show_error(title, message)

    # -- extensions ----------------------------------------------------------------------------
    def restore_edits(self, document: str, model: Any, decode: Callable[[dict], Any]) -> int:
        """Replay the document's saved edits; the panel opened it, so it joins the recent
        files whichever button opened it."""
        opened = document_file(document)
        if opened is not None:
            self._window.remember_file(opened.path)
        return self.history.restore(document, model, decode)

    def panel_for(self, path: str | os.PathLike) -> str | None:
        """The title of the panel that opens ``path`` (as File > Open would choose)."""
        entry = self._window.panel_for_file(path)
        return entry.title if entry is not None else None

    def open_in_panel(self, path: str | os.PathLike) -> None:
        """Open ``path`` in the panel that opens it, as File > Open does."""
        self._window.open_paths([str(path)])

    def edit_group(self, label: str):
        return self.history.group(label)

    def export_plot(self, view, provenance: dict | None = None) -> None:
        self._window.export_plot(view, provenance)

    def workspace_path(self) -> str:
        return str(self._window.workspace.root)

    # -- helpers -------------------------------------------------------------------------------
    def _reporter(self, title: str, on_error: Callable[[str], None] | None
                  ) -> Callable[[BaseException], None]:
        def report(exc: BaseException) -> None:
            message = error_message(exc)
            log.warning("%s: %s", title, message)
            if on_error is None:
                self.show_error(title, message)
                return
            try:
                on_error(message)
            except Exception:
                log.exception("a panel's error callback failed")

        return report


def error_message(exc: BaseException) -> str:
    """A message a user can act on, from whatever went wrong talking to the engine."""
    error = getattr(exc, "error", None)
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(exc, TimeoutError) or type(exc).__name__ == "TimeoutError":
        return "the engine did not answer in time"
    return str(exc) or type(exc).__name__
