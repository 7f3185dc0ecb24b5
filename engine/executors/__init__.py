"""Where jobs run: ``make_executor("local")`` or, with the cluster extra, a Ray cluster."""

from __future__ import annotations

from engine.executors.base import Executor, JobRequest
from engine.executors.local import LocalExecutor


class ClusterUnavailable(Exception):
    """The requested cluster cannot be used here; the message says what to do."""


def make_executor(cluster: str = "local", **options) -> Executor:
    if cluster in ("", "local"):
        return LocalExecutor(**options)
    raise ClusterUnavailable(
        f"cluster {cluster!r}: running jobs on a Ray cluster is not available in this version "
        "of Studio; use --cluster local")


__all__ = ["ClusterUnavailable", "Executor", "JobRequest", "LocalExecutor", "make_executor"]
