"""Job manager: validates submissions, keeps the workspace in step, numbers and publishes events.

Shared by ``studio-engine serve`` (publishing to socket clients) and ``studio-engine run``
(publishing to the terminal). A job's id is its run id. Every job ends with exactly one
terminal ``job_state``, after its ``job_result`` if it has one.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from pydantic import ValidationError

from engine import __version__, protocol
from engine.atomic import to_jsonable
from engine.executors.base import Executor, JobRequest
from engine.registry import get_method
from engine.workspace import Workspace

Publish = Callable[[dict], None]


class InvalidSubmission(Exception):
    """Bad parameters or inputs; the message names the parameter or file."""


@dataclass
class _Job:
    id: str
    method: str
    executor: Executor
    state: str = protocol.QUEUED
    seq: int = 0
    started_s: float = field(default_factory=time.monotonic)
    outputs: dict | None = None


class JobManager:
    def __init__(self, workspace: Workspace, executor: Executor, publish: Publish,
                 device: str = "auto") -> None:
        self.workspace = workspace
        self.executor = executor
        self.publish = publish
        self.device = device
        self.jobs: dict[str, _Job] = {}
        self.clusters: dict[str, Executor] = {}  # address -> a started Ray executor

    async def executor_for(self, cluster: str | None) -> Executor:
        """The executor for a job's ``cluster`` (``local``, ``auto``, ``HOST:PORT``,
        ``ray://HOST:PORT``): connected on first use, then kept. One engine process can be
        the driver of one Ray cluster at a time."""
        from engine.executors import ClusterUnavailable, make_executor

        address = (cluster or "").strip()
        if address in ("", "local", self.executor.cluster):
            return self.executor
        if address not in self.clusters:
            if self.clusters:
                raise InvalidSubmission(
                    f"cluster {address!r}: this engine already drives the Ray cluster "
                    f"{next(iter(self.clusters))!r}; restart the engine to switch clusters")
            try:
                executor = make_executor(address)
                await executor.start()
            except (ClusterUnavailable, ConnectionError) as exc:
                raise InvalidSubmission(str(exc)) from None
            self.clusters[address] = executor
        return self.clusters[address]

    async def stop_clusters(self) -> None:
        for executor in self.clusters.values():
            await executor.stop()
        self.clusters.clear()

    def submit(self, method: str, params: dict | None = None, inputs: dict | None = None,
               seed: int | None = None, executor: Executor | None = None) -> str:
        """Validate and queue (on ``executor``, by default this manager's own); raises
        ``UnknownMethod`` or ``InvalidSubmission``."""
        executor = executor or self.executor
        spec = get_method(method)
        try:
            resolved = spec.params.model_validate(params or {})
        except ValidationError as exc:
            raise InvalidSubmission(format_validation_error(method, exc)) from None
        input_paths = self._resolve_inputs(spec.inputs, inputs or {})
        seed = int(seed if seed is not None else 0)
        run_id = self.workspace.create_run(
            method, resolved.model_dump(mode="json"), seed, cluster=executor.cluster,
            provenance=provenance(executor.describe()) | {"inputs": input_paths})
        job = _Job(run_id, method, executor)
        self.jobs[run_id] = job
        request = JobRequest(
            id=run_id, method=method, params=params or {}, inputs=input_paths, seed=seed,
            output_dir=str(self.workspace.run_dir(run_id)),
            cache_root=str(self.workspace.cache_root), resources=spec.resources,
            device=self.device)
        self._emit(job, protocol.JOB_STATE, {"state": protocol.QUEUED, "reason": ""})
        executor.submit(request, lambda event: self._on_event(job, event))
        return run_id

    def _resolve_inputs(self, declared: dict[str, str], inputs: dict) -> dict[str, str]:
        unknown = sorted(set(inputs) - set(declared))
        if unknown:
            raise InvalidSubmission(
                f"unknown input(s) {', '.join(unknown)}; this method takes "
                f"{', '.join(declared) or 'no inputs'}")
        resolved = {}
        for name, ref in inputs.items():
            try:
                path = self.workspace.resolve_ref(str(ref))
            except KeyError as exc:
                raise InvalidSubmission(f"input {name}: {exc.args[0]}") from None
            if not path.exists():
                raise InvalidSubmission(f"input {name}: {path}: no such file or folder")
            resolved[name] = str(path.resolve())
        return resolved

    def cancel(self, job_id: str, hard: bool = False) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state in protocol.TERMINAL_STATES:
            return False
        if job.state == protocol.RUNNING and not hard:
            job.state = protocol.CANCELLING
            self.workspace.set_state(job_id, protocol.CANCELLING)
            self._emit(job, protocol.JOB_STATE, {"state": protocol.CANCELLING, "reason": ""})
        return job.executor.cancel(job_id, hard=hard)

    def active(self) -> list[str]:
        return [j.id for j in self.jobs.values() if j.state not in protocol.TERMINAL_STATES]

    def _on_event(self, job: _Job, event: dict) -> None:
        if job.state in protocol.TERMINAL_STATES:
            return
        kind = event["type"]
        content = event.get("content", {})
        if kind == "done":
            self._finish(job, content)
        elif kind == protocol.JOB_STATE:
            if content.get("state") == protocol.RUNNING and job.state == protocol.QUEUED:
                job.state = protocol.RUNNING
                job.started_s = time.monotonic()
                self.workspace.set_state(job.id, protocol.RUNNING)
                self._emit(job, kind, {"reason": "", **content})
        elif kind == protocol.JOB_ARTIFACT:
            self.workspace.add_artifact(job.id, content["name"], content["kind"],
                                        content["path"], content.get("meta", {}))
            self._emit(job, kind, content)
        elif kind == protocol.JOB_LOG:
            with open(self.workspace.run_dir(job.id) / "log.txt", "a", encoding="utf-8") as log:
                log.writelines(line + "\n" for line in content.get("lines", []))
            self._emit(job, kind, content)
        elif kind == protocol.JOB_RESULT:
            job.outputs = to_jsonable(content.get("outputs", {}))
            self._emit(job, kind, {"outputs": job.outputs})
        elif kind == protocol.JOB_PROGRESS:
            self._emit(job, kind, content)

    def _finish(self, job: _Job, event: dict) -> None:
        state, reason = event["state"], event.get("reason", "")
        job.state = state
        elapsed = time.monotonic() - job.started_s
        self.workspace.write_result(job.id, {
            "run_id": job.id, "method": job.method, "state": state, "reason": reason,
            "traceback": event.get("traceback", ""), "outputs": job.outputs or {},
            "elapsed_s": elapsed})
        self.workspace.set_state(job.id, state, reason)
        content = {"state": state, "reason": reason, "elapsed_s": elapsed}
        if event.get("traceback"):
            content["error"] = {"type": reason.split(":")[0], "message": reason,
                                "traceback": event["traceback"]}
        self._emit(job, protocol.JOB_STATE, content)

    def _emit(self, job: _Job, kind: str, content: dict) -> None:
        job.seq += 1
        self.publish(protocol.envelope(kind, content, job=job.id, seq=job.seq))

    def fail_all(self, reason: str) -> None:
        """The executor is going away: every unfinished job fails with ``reason``."""
        for job in list(self.jobs.values()):
            if job.state not in protocol.TERMINAL_STATES:
                self._finish(job, {"state": protocol.FAILED, "reason": reason})


def format_validation_error(method: str, exc: ValidationError) -> str:
    lines = [f"invalid parameters for {method}:"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(parameters)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown parameter"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


def provenance(where: str) -> dict:
    """What made a run: code and package versions and the machine, kept in params.json."""
    return {"code_version": __version__, "git": _git_revision(), "packages": _package_versions(),
            "python": platform.python_version(), "host": platform.node(), "executor": where,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


@cache
def _package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    packages = {}
    for name in ("torch", "numpy", "pydantic", "safetensors"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            continue
    return packages


@cache
def _git_revision() -> str:
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return ""
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()
