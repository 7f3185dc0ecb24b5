"""Where jobs run: ``make_executor("local")`` or, with the cluster extra, a Ray cluster."""

from __future__ import annotations

from engine.executors.base import Executor, JobRequest
from engine.executors.local import LocalExecutor


class ClusterUnavailable(Exception):
    """The requested cluster cannot be used here; the message says what to do."""


def make_executor(cluster: str = "local", **options) -> Executor:
    """``local`` (the worker pool; ``options`` go to it) or a Ray address: ``auto`` (the
    cluster this machine belongs to), ``HOST:PORT`` (a head node) or ``ray://HOST:PORT``
    (Ray Client)."""
    if cluster in ("", "local"):
        return LocalExecutor(**options)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ClusterUnavailable(
            f"cluster {cluster!r}: Ray is not installed in this environment; install the "
            "cluster extra (pip install 'neurips-studio[cluster]') or use --cluster local"
        ) from None
    from engine.executors.ray_cluster import RayExecutor

    return RayExecutor(cluster, cancel_grace_s=options.get("cancel_grace_s", 5.0))


__all__ = ["ClusterUnavailable", "Executor", "JobRequest", "LocalExecutor", "make_executor"]
