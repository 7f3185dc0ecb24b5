"""The executor interface: where jobs run: the local worker pool or a Ray cluster.

An executor receives ``JobRequest``s and reports through the job's ``on_event`` callback with
``{"type", "content"}`` events: ``job_state`` (running), ``job_progress``, ``job_log``,
``job_artifact``, ``job_result`` and finally exactly one ``done`` with content
``{"state", "reason"[, "traceback"]}``. Paths in events are
relative to the job's output folder; an executor that runs remotely brings the files back into
``output_dir`` before it reports ``done``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from engine.api import Resources

EventSink = Callable[[dict], None]
KILLED_AFTER_GRACE = "killed: it did not stop within the cancel grace period"


def done_event(state: str, reason: str) -> dict:
    return {"type": "done", "content": {"state": state, "reason": reason}}


@dataclass
class JobRequest:
    id: str
    method: str
    params: dict
    inputs: dict[str, str]
    seed: int
    output_dir: str
    cache_root: str
    resources: Resources = field(default_factory=Resources)
    device: str = "auto"

    def to_message(self) -> dict:
        data = asdict(self)
        data.pop("resources")
        return data


class Executor(ABC):
    name = "executor"
    cluster = "local"  # what a run records as the cluster that ran it

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    def submit(self, request: JobRequest, on_event: EventSink) -> None:
        """Queue a job; events for it arrive through ``on_event`` on the event loop."""

    @abstractmethod
    def cancel(self, job_id: str, hard: bool = False) -> bool:
        """Soft cancel (the method stops at its next check), hard after a grace period or now.

        Returns False when the job is unknown or already finished.
        """

    async def request(self, name: str, args: dict) -> dict:
        """A short interactive call served by a warm worker."""
        raise NotImplementedError(f"{self.name} executor does not serve requests")

    @property
    def devices(self) -> list[str]:
        return ["cpu"]

    def describe(self) -> str:
        return self.name
