"""Job manager: validates submissions, keeps the workspace in step, numbers and publishes events.

Shared by ``studio-engine serve`` (publishing to socket clients) and ``studio-engine run``
(publishing to the terminal). A job's id is its run id. Every job ends with exactly one
terminal ``job_state``, after its ``job_result`` if it has one.
"""

from __future__ import annotations

import logging
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
from engine.scrub import scrub, secret_values
from engine.workspace import Workspace

Publish = Callable[[dict], None]
log = logging.getLogger("studio.engine")


MAX_SEED = 2**63 - 1  # what the runs table (SQLite INTEGER) and torch's seeding hold


class InvalidSubmission(Exception):
    """Bad parameters or inputs; the message names the parameter or file."""


@dataclass
class Submission:
    """A submission that passed every check: parameters, seed and readable inputs."""

    method: str
    params: dict
    resolved: dict
    inputs: dict[str, str]
    seed: int
    notes: list[str]
    secrets: list[str] = field(default_factory=list, repr=False)


@dataclass
class _Job:
    id: str
    method: str
    executor: Executor
    state: str = protocol.QUEUED
    seq: int = 0
    started_s: float = field(default_factory=time.monotonic)
    outputs: dict | None = None
    notes: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list, repr=False)


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
        return self.enqueue(self.prepare(method, params, inputs, seed), executor)

    def prepare(self, method: str, params: dict | None = None, inputs: dict | None = None,
                seed: int | None = None) -> Submission:
        """Every check of a submission, before anything is recorded or started: text is
        UTF-8, the seed is in range, parameters validate, and each input is read by its
        format's reader (``FormatError`` becomes ``InvalidSubmission`` starting with the
        file). Safe to call off the event loop: it reads files but changes nothing."""
        spec = get_method(method)
        params = dict(params or {})
        inputs = dict(inputs or {})
        for key, value in params.items():
            require_utf8(f"parameter {key}", value, show=False)  # it may be a secret
        for name, ref in inputs.items():
            require_utf8(f"input {name}", ref)
        try:
            resolved = spec.params.model_validate(params)
        except ValidationError as exc:
            raise InvalidSubmission(format_validation_error(method, exc)) from None
        input_paths = self._resolve_inputs(spec.inputs, inputs)
        notes = self._read_inputs(spec.inputs, input_paths)
        return Submission(method, params, resolved.model_dump(mode="json"), input_paths,
                          check_seed(seed), notes, secret_values(resolved))

    def enqueue(self, submission: Submission, executor: Executor | None = None) -> str:
        """Record a prepared submission as a run and queue it on ``executor``."""
        executor = executor or self.executor
        spec = get_method(submission.method)
        run_id = self.workspace.create_run(
            submission.method, submission.resolved, submission.seed, cluster=executor.cluster,
            provenance=provenance(executor.describe()) | {"inputs": submission.inputs})
        job = _Job(run_id, submission.method, executor, notes=list(submission.notes),
                   secrets=submission.secrets)
        self.jobs[run_id] = job
        request = JobRequest(
            id=run_id, method=submission.method, params=submission.params,
            inputs=submission.inputs, seed=submission.seed,
            output_dir=str(self.workspace.run_dir(run_id)),
            cache_root=str(self.workspace.cache_root), resources=spec.resources,
            device=self.device)
        # why it will wait, e.g. for a worker still starting (an executor may not say)
        reason = getattr(executor, "wait_reason", lambda: "")()
        if reason:
            self.workspace.set_state(run_id, protocol.QUEUED, reason)
        self._emit(job, protocol.JOB_STATE, {"state": protocol.QUEUED, "reason": reason})
        if job.notes:
            self._on_event(job, {"type": protocol.JOB_LOG, "content": {"lines": job.notes}})
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

    @staticmethod
    def _read_inputs(declared: dict[str, str], paths: dict[str, str]) -> list[str]:
        """Each input through its kind's reader; the first unusable one is refused."""
        from engine.io import FormatError
        from engine.io.inputs import validate_input

        notes: list[str] = []
        for name, path in paths.items():
            try:
                notes += validate_input(declared[name], path)
            except FormatError as exc:
                raise InvalidSubmission(str(exc)) from None
            except RecursionError:
                raise InvalidSubmission(f"{path}: nested too deeply to read") from None
        return notes

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
        event = scrub(event, job.secrets)  # again here: a remote or older worker may not
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
        """The job's one terminal state: recorded when the disk allows, always published."""
        state, reason = event["state"], event.get("reason", "")
        job.state = state
        elapsed = time.monotonic() - job.started_s
        result = {"run_id": job.id, "method": job.method, "state": state, "reason": reason,
                  "traceback": event.get("traceback", ""), "outputs": job.outputs or {},
                  "elapsed_s": elapsed}
        if job.notes:
            result["input_notes"] = job.notes
        try:
            self.workspace.write_result(job.id, result)
            self.workspace.set_state(job.id, state, reason)
        except Exception:  # a full disk must not leave the job without its terminal event
            log.exception("could not record the end of run %s", job.id)
        content = {"state": state, "reason": reason, "elapsed_s": elapsed}
        if event.get("traceback"):
            content["error"] = {"type": reason.split(":")[0], "message": reason,
                                "traceback": event["traceback"]}
        self._emit(job, protocol.JOB_STATE, content)

    def _emit(self, job: _Job, kind: str, content: dict) -> None:
        job.seq += 1
        self.publish(protocol.envelope(kind, content, job=job.id, seq=job.seq))

    def abandon(self, job_id: str, state: str, reason: str) -> bool:
        """End a job that its executor no longer reports on (its worker did not answer a
        kill): recorded and published as ``state``, so no caller waits forever."""
        job = self.jobs.get(job_id)
        if job is None or job.state in protocol.TERMINAL_STATES:
            return False
        self._finish(job, {"state": state, "reason": reason})
        return True

    def fail_all(self, reason: str) -> None:
        """The executor is going away: every unfinished job fails with ``reason``."""
        for job in list(self.jobs.values()):
            if job.state not in protocol.TERMINAL_STATES:
                self._finish(job, {"state": protocol.FAILED, "reason": reason})


def require_utf8(where: str, value: object, show: bool = True) -> None:
    """Text that cannot travel as UTF-8 (a path or value with undecodable bytes) is refused
    here, at submit, instead of failing in the executor's reader later. ``show=False``: the
    message names where, not the value (a parameter may be a secret)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = f"{printable(value)} is" if show else "its value is"
            raise InvalidSubmission(f"{where}: {shown} not valid UTF-8; rename the file or "
                                    "give the value as UTF-8 text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            require_utf8(where, key, show)
            require_utf8(where, item, show)
    elif isinstance(value, (list, tuple)):
        for item in value:
            require_utf8(where, item, show)


def printable(text: str) -> str:
    """``text`` with undecodable bytes shown as ``\\xNN`` (safe to print and log)."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def check_seed(seed: object) -> int:
    """A seed is an integer in 0..2^63-1 (a boolean or a float is not one)."""
    if seed is None:
        return 0
    if isinstance(seed, bool) or not isinstance(seed, int):
        if isinstance(seed, str) and seed.strip().lstrip("-").isdigit():
            seed = int(seed)
        else:
            raise InvalidSubmission(f"seed: expected an integer, got {seed!r}")
    if not 0 <= seed <= MAX_SEED:
        raise InvalidSubmission(f"seed: {seed} is out of range (0 to 2^63-1)")
    return seed


def format_validation_error(method: str, exc: ValidationError) -> str:
    lines = [f"invalid parameters for {method}:"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(parameters)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown parameter"
        if not error["loc"] and error["type"] == "value_error":  # a model check naming its field
            lines.append(f"  {message.removeprefix('Value error, ')}")
            continue
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
