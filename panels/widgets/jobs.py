"""The engine jobs one panel started: submitted through the host, followed to their end.

Every panel used to keep the same bookkeeping (job id -> method, a filter over the host's
envelopes, a one-line status). ``PanelJobs`` is that bookkeeping once, with one wording for
the status line::

    sae_pc1.train (20260101-000000-000001): queued
    sae_pc1.train (20260101-000000-000001): running, step 5 / 10 · mse 0.5, l0 4
    sae_pc1.train (20260101-000000-000001): failed: ChatError: HTTP 500
    sae_pc1.train: not started: invalid parameters for sae_pc1.train: ...

A result counts as the success: the line says ``succeeded`` when the result arrives, and the
panel's ``on_result`` may then write its own words there (what it opened), which the job's
later ``succeeded`` state leaves standing.

The host may deliver a job's first events before it answers ``job_accepted`` (the bridge
resolves the submission on a later turn of the event loop), so while a submission waits,
events of jobs not yet known are kept and replayed once their job is accepted. Qt-free: the
tests drive it with plain dicts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

EARLY_EVENTS_KEPT = 2000   # events of unknown jobs kept while a job_accepted is awaited

Handler = Callable[[str, str, dict], None]   # (job id, method, outputs or artifact)


@dataclass
class _Tracked:
    method: str
    label: str
    has_result: bool = False


class PanelJobs(Mapping[str, str]):
    """Job id -> method of the jobs this panel submitted (a read-only mapping).

    ``status(text)`` receives the status line; ``on_result(job, method, outputs)`` and
    ``on_artifact(job, method, artifact)`` receive what the panel opens. ``metrics`` names
    the progress metrics shown (``None``: every numeric one). Call ``close`` when the panel
    closes.
    """

    def __init__(self, host: Any, status: Callable[[str], None], *,
                 on_result: Handler | None = None, on_artifact: Handler | None = None,
                 metrics: Collection[str] | None = None) -> None:
        self._host = host
        self._status = status
        self._on_result = on_result
        self._on_artifact = on_artifact
        self._metrics = metrics
        self._jobs: dict[str, _Tracked] = {}
        self._waiting = 0                       # submissions not yet accepted nor refused
        self._early: deque[dict] = deque(maxlen=EARLY_EVENTS_KEPT)  # any job's, in order
        self._unsubscribe: Callable[[], None] | None = host.subscribe(self._on_event)

    # -- the mapping -----------------------------------------------------------------------
    def __getitem__(self, job: str) -> str:
        return self._jobs[job].method

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    # -- submitting and following ----------------------------------------------------------
    def submit(self, method: str, params: dict, inputs: dict | None = None, *,
               label: str | None = None,
               on_error: Callable[[str], None] | None = None) -> None:
        """Submit through the host; ``label`` (default: the method) names the job in the
        status line. A refusal is shown there, then passed to ``on_error``."""
        label = label or method
        self._waiting += 1

        def accepted(job: str) -> None:
            self.follow(job, method, label)   # before _settled forgets the early events
            self._settled()

        def refused(message: str) -> None:
            self._settled()
            self._status(f"{label}: not started: {message}")
            if on_error is not None:
                on_error(message)

        self._host.submit_job(method, params, inputs or {}, on_accepted=accepted,
                              on_error=refused)

    def follow(self, job: str, method: str, label: str | None = None) -> None:
        """Track ``job`` from now on (as ``queued``), replaying its events that came early."""
        self._jobs[job] = _Tracked(method, label or method)
        self._show(job, "queued")
        for envelope in [e for e in self._early if e.get("job") == job]:
            self._on_event(envelope)

    def close(self) -> None:
        """Stop listening to the host (the panel is closing); safe to call twice."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    # -- events ----------------------------------------------------------------------------
    def _settled(self) -> None:
        self._waiting -= 1
        if not self._waiting:
            self._early.clear()  # what is left belongs to other panels' jobs

    def _on_event(self, envelope: dict) -> None:
        job = envelope.get("job")
        tracked = self._jobs.get(job) if job else None
        if tracked is None:
            if job and self._waiting:
                self._early.append(envelope)
            return
        kind, content = envelope.get("type"), envelope.get("content") or {}
        if kind == "job_state":
            state = content.get("state", "")
            if state == "succeeded" and tracked.has_result:
                return  # the result already said so, and the panel may have said more
            error = (content.get("error") or {}).get("message", "")
            self._show(job, state, content.get("reason") or error)
        elif kind == "job_progress":
            self._show(job, "running", self._progress(content))
        elif kind == "job_artifact" and self._on_artifact is not None:
            self._on_artifact(job, tracked.method, content)
        elif kind == "job_result":
            tracked.has_result = True
            self._show(job, "succeeded")
            if self._on_result is not None:
                self._on_result(job, tracked.method, content.get("outputs") or {})

    def _show(self, job: str, state: str, detail: str = "") -> None:
        detail = "" if detail == state else detail   # "cancelled: cancelled" says nothing
        separator = ", " if state == "running" else ": "
        self._status(f"{self._jobs[job].label} ({job}): {state}"
                     + (f"{separator}{detail}" if detail else ""))

    def _progress(self, content: dict) -> str:
        total = content.get("total")
        text = f"step {content.get('step', 0)}" + (f" / {total}" if total else "")
        shown = ", ".join(
            f"{name} {value:.3g}" for name, value in (content.get("metrics") or {}).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            and (self._metrics is None or name in self._metrics))
        return text + (f" · {shown}" if shown else "")
