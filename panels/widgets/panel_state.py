"""What the panels' command states share with the window: their edits leave its undo history,
and their jobs go through the view (which follows them) or the host.

No Qt here: a panel's commands module imports this and stays importable without a window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# submit(method, params, inputs): the view's job lines follow the job; without a view the
# host's ``submit_job`` is called and a refusal reported through ``host.show_error``
Submit = Callable[[str, dict, dict], None]


def forget_edits(host: Any, *documents: str | None) -> None:
    """Take ``documents``' steps off the window's undo history (their autosaved edits stay);
    nothing for a host without a history, or for a document that is ``None``."""
    forget = getattr(host, "forget_edits", None)  # hosts without an undo history
    if not callable(forget):
        return
    for document in documents:
        if document is not None:
            forget(document)


def submit_job(host: Any, submit: Submit | None, method: str, params: dict,
               inputs: dict) -> None:
    """Start ``method``: through ``submit`` (the view's, which follows the job) when there is
    one, else through ``host.submit_job``, whose refusal ``host.show_error`` reports as
    '<method> not started'."""
    if submit is not None:
        submit(method, params, inputs)
        return
    say = getattr(host, "show_error", None)
    host.submit_job(method, params, inputs,
                    on_error=(lambda message: say(f"{method} not started", message))
                    if callable(say) else None)


class DocumentState:
    """For a panel state (a dataclass) with ``host``, ``document`` (whose edits it put on the
    history) and ``submit``: leaving the document and sending jobs, as every such panel
    does."""

    host: Any
    document: str | None
    submit: Submit | None

    def leave_document(self) -> None:
        """What is shown leaves the undo history (its autosaved edits stay)."""
        forget_edits(self.host, self.document)
        self.document = None

    def send(self, method: str, params: dict, inputs: dict) -> None:
        """Submit a job (see ``submit_job``)."""
        submit_job(self.host, self.submit, method, params, inputs)
