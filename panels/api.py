"""What a panel declares and what the shell offers it. Qt-free, so manifests load fast.

A panel package (``panels/<domain>/``, or a third party's) exposes ``MANIFEST: PanelManifest``
and is registered in the ``studio.panels`` entry-point group. The shell imports the widget
factory only when the panel is first opened (fast start-up).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class PanelManifest:
    id: str
    title: str
    factory: str                    # "package.module:callable", called as factory(host) -> QWidget
    formats: tuple[str, ...] = ()   # format names (engine.io registry) this panel opens
    methods: tuple[str, ...] = ()   # method-id prefixes it launches ("eos.", "sae_pc1.")
    exports: tuple[str, ...] = ()   # what it can export ("png", "svg", "pdf", "checkpoint")
    papers: tuple[str, ...] = field(default_factory=tuple)


class EditCommand(Protocol):
    """A panel's undoable edit: plain object, JSON form reused by autosave and replay."""

    label: str

    def apply(self, model: Any) -> None: ...

    def revert(self, model: Any) -> None: ...

    def to_json(self) -> dict: ...


class PanelHost(Protocol):
    """What the shell gives every panel (``factory(host)``); implemented in ``studio/``.

    Job events arrive through ``subscribe(callback)`` as protocol envelopes (dicts with
    ``type``, ``job``, ``seq``, ``content``); callbacks run on the Qt main thread.
    """

    def methods(self) -> list[dict]: ...

    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]: ...

    def submit_job(self, method: str, params: dict, inputs: dict | None = None,
                   seed: int = 0, on_accepted: Callable[[str], None] | None = None,
                   on_error: Callable[[str], None] | None = None,
                   cluster: str | None = None) -> None:
        """``cluster``: ``local`` or a Ray address; ``None`` = the default from Settings."""

    def cancel_job(self, job_id: str, hard: bool = False) -> None: ...

    def request(self, name: str, args: dict, on_reply: Callable[[dict], None],
                on_error: Callable[[str], None] | None = None) -> None: ...

    def run_dir(self, run_id: str) -> str: ...

    def push_edit(self, document: str, command: EditCommand, model: Any) -> None: ...

    def forget_edits(self, document: str) -> None:
        """The panel left ``document`` (opened another, closed it): its steps leave the undo
        history, nothing is reverted, and its autosaved edits stay for when it is reopened."""

    def document_saved(self, document: str) -> None:
        """The panel wrote ``document``'s file with its edits in it (saved over the file it
        opened): the steps leave the history and the autosave is dropped, so reopening the
        file never offers or replays edits it already holds."""

    def show_error(self, title: str, message: str) -> None: ...
