"""Jobs on a Ray cluster: the same methods, progress, cancel and results as the local pool.

Each job becomes one Ray actor (``RemoteJob``) whose resource request is the method's
``Resources`` (CPUs, GPUs, memory). The actor runs the job with ``engine.worker.execute_job``
in a scratch folder on its node and buffers the job's events; the engine polls it a few times
a second, so progress, logs and artifacts stream back while the job runs. Files travel only
through Ray's object store, in chunks: inputs are uploaded into the scratch folder before the
job starts and every artifact is downloaded into the local run folder before its event is
published (so the GUI can open it at once); the rest (metrics, checkpoints) follows at the end.
The remote side is never given a workspace path, even when the cluster shares the disk.

Independent units (``JobContext.map``: one seed of one configuration) fan out from the actor as
Ray tasks, one per unit (``RayFanOut``): the unit's function travels by module and qualified
name and is imported on the worker, items and results are JSON-able dicts, and each unit seeds
itself from its item, so the results equal a local run's. Their progress is the job's (units
done / total), a cancel cancels them, and each unit's node is recorded (``ctx.unit_hosts`` and
the claim's ``units``).

Cancel: a soft cancel sets the job's flag through the actor; a job still running after the
grace period, or a hard cancel, kills the actor. A Ray worker that dies fails its own job with
the reason; the engine and other jobs carry on.

What crosses the wire are JSON-able dicts and raw bytes; Ray's own transport serialises them
(with pickle) between the engine and a cluster the user runs, so connect only to a cluster you
trust as you trust this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.atomic import write_atomic
from engine.executors.base import (
    KILLED_AFTER_GRACE,
    EventSink,
    Executor,
    JobRequest,
    done_event,
)

CHUNK_BYTES = 8 * 2**20
POLL_INTERVAL_S = 0.1
CONNECT_TIMEOUT_S = 120.0
NAMESPACE = "studio"


class RemoteJob:
    """Runs one job on a Ray worker (used as a threaded actor: ``run`` on one thread while
    ``poll``, ``cancel`` and ``read`` answer on others)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="studio-job-"))
        self.output = self.root / "run"
        self.output.mkdir()
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.context = None
        self.cancel_requested = False

    def pid(self) -> int:
        return os.getpid()

    def put_input(self, name: str, relative: str, offset: int, data: bytes) -> None:
        target = self._inside(self.root / "inputs" / name, relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "r+b" if offset else "wb") as handle:
            handle.seek(offset)
            handle.write(data)

    def run(self, job: dict, inputs: dict[str, str], threads: int) -> None:
        from engine.worker import execute_job

        def emit(event: dict) -> None:
            with self.lock:
                self.events.append(event)

        def started(ctx) -> None:
            self.context = ctx
            if ctx is not None:
                ctx.fan_out = RayFanOut(ctx, job["method"], threads)
                if self.cancel_requested:
                    ctx.request_cancel()

        local_inputs = {name: str(self._inside(self.root / "inputs" / name, relative))
                        for name, relative in inputs.items()}
        job = dict(job, output_dir=str(self.output), inputs=local_inputs,
                   cache_root=str(self.root / "cache"))
        execute_job(job, emit, threads, started)

    def poll(self, cursor: int) -> list[dict]:
        with self.lock:
            return self.events[cursor:]

    def cancel(self) -> None:
        self.cancel_requested = True
        if self.context is not None:
            self.context.request_cancel()

    def files(self, relative: str = "") -> list[tuple[str, int]]:
        """(path, size) of every file under ``relative`` in the job's output folder."""
        base = self._inside(self.output, relative)
        found = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        return [(str(p.relative_to(self.output)), p.stat().st_size) for p in found]

    def read(self, relative: str, offset: int, size: int) -> bytes:
        with open(self._inside(self.output, relative), "rb") as handle:
            handle.seek(offset)
            return handle.read(size)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _inside(base: Path, relative: str) -> Path:
        path = (base / relative).resolve()
        if path != base.resolve() and base.resolve() not in path.parents:
            raise ValueError(f"{relative!r} is outside the job folder")
        return path


class RayFanOut:
    """``ctx.fan_out`` inside a job's actor: ``ctx.map``'s units as Ray tasks, one per item,
    each asking for the method's resources (a unit is one training of the job's kind).

    When the cluster could never hold a unit beside the job's own actor (a one-GPU cluster
    running a GPU job), waiting would deadlock: the units then run here in order."""

    def __init__(self, ctx, method: str, threads: int) -> None:
        self.ctx = ctx
        self.method = method
        self.threads = threads

    def __call__(self, function: Callable[[dict], dict], items: list[dict]) -> list[dict]:
        import ray

        from engine.registry import get_method

        module, qualname = unit_name(function)
        resources = get_method(self.method).resources
        threads = min(self.threads, max(1, int(resources.cpus)))
        if not _room_beside_the_job(ray.cluster_resources(), resources):
            self.ctx.log(f"the cluster has no room for a unit beside this job "
                         f"({resources}): its {len(items)} units run here in order")
            return self._run_here(function, items)
        task = ray.remote(run_unit).options(
            num_cpus=resources.cpus, num_gpus=resources.gpus,
            memory=int(resources.memory_gb * 2**30) or None)
        refs = [task.remote(module, qualname, item, threads) for item in items]
        pending, done = list(refs), 0
        try:
            while pending:
                self.ctx.check_cancelled()
                ready, pending = ray.wait(pending, num_returns=len(pending),
                                          timeout=POLL_INTERVAL_S)
                for ref in ready:
                    ray.get(ref)  # a unit that failed fails the job now, with its error
                    done += 1
                    self.ctx.progress(done, len(items), units_done=done)
            outcomes = ray.get(refs)
        except BaseException:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
        self._record([{"host": o["host"], "task": o["task"]} for o in outcomes])
        return [o["result"] for o in outcomes]

    def _run_here(self, function: Callable[[dict], dict], items: list[dict]) -> list[dict]:
        results = []
        for index, item in enumerate(items):
            self.ctx.check_cancelled()
            results.append(function(item))
            self.ctx.progress(index + 1, len(items), units_done=index + 1)
        self._record([{"host": socket.gethostname(), "task": None}] * len(items))
        return results

    def _record(self, units: list[dict]) -> None:
        """Where each unit ran: ``ctx.unit_hosts``, and the claim's ``units`` through the
        reproduction's profile record (``engine.api``), which every claim it makes carries."""
        from engine import api

        self.ctx.unit_hosts.extend(unit["host"] for unit in units)
        record = api._PROFILE_RECORD.get()  # the one record Claim.to_dict merges in
        if record is not None:
            record["units"] = [*record.get("units", []), *units]


def unit_name(function: Callable[[dict], dict]) -> tuple[str, str]:
    """(module, qualified name) by which a worker imports ``function``; refuses a function it
    could not import (a lambda, a nested function, one defined in ``__main__``)."""
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", "")
    if not module or module == "__main__" or not qualname or "<" in qualname:
        raise ValueError(f"ctx.map on a cluster needs a module-level function, not "
                         f"{module}.{qualname or function!r}: workers import it by name")
    return module, qualname


def run_unit(module: str, qualname: str, item: dict, threads: int) -> dict[str, Any]:
    """One unit as a Ray task: import the function by name, run it within the job's thread
    budget, and say where it ran."""
    import ray

    from engine.threads import limit_threads

    function: Any = importlib.import_module(module)
    for part in qualname.split("."):
        function = getattr(function, part)
    with limit_threads(threads):
        result = function(item)
    return {"result": result, "host": socket.gethostname(),
            "task": ray.get_runtime_context().get_task_id()}


def _room_beside_the_job(cluster: dict[str, float], resources) -> bool:
    """Whether the cluster's totals hold the job's actor and one unit at the same time."""
    needs = {"CPU": resources.cpus, "GPU": resources.gpus,
             "memory": resources.memory_gb * 2**30}
    return all(cluster.get(name, 0.0) >= 2 * amount for name, amount in needs.items()
               if amount > 0)


class RayExecutor(Executor):
    """Runs jobs on the Ray cluster at ``address`` (``auto``, ``HOST:PORT`` or
    ``ray://HOST:PORT``); the engine process becomes that cluster's driver."""

    name = "ray"

    def __init__(self, address: str, cancel_grace_s: float = 5.0,
                 threads_per_job: int | None = None) -> None:
        self.address = self.cluster = address
        self.cancel_grace_s = cancel_grace_s
        self.threads_per_job = threads_per_job
        self._jobs: dict[str, _RayJob] = {}
        self._tasks: set[asyncio.Task] = set()
        self._actor_class = None
        self._waiting: list[tuple[JobRequest, EventSink]] = []  # submitted before start()

    async def start(self) -> None:
        import ray

        def connect() -> None:
            # Keep today's behaviour (jobs without GPUs see none) without Ray's warning.
            os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
            if not ray.is_initialized():
                use_cluster_token()
                ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False,
                         logging_level="WARNING")

        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, _probe, self.address)
            await asyncio.wait_for(loop.run_in_executor(None, connect), CONNECT_TIMEOUT_S)
        except Exception as exc:
            raise ConnectionError(f"cannot connect to the Ray cluster at {self.address}: "
                                  f"{exc}") from exc
        self._actor_class = ray.remote(max_concurrency=4)(RemoteJob)
        for request, on_event in self._waiting:
            self.submit(request, on_event)
        self._waiting.clear()

    async def stop(self) -> None:
        import ray

        for _request, on_event in self._waiting:
            on_event(done_event("failed", "engine shut down"))
        self._waiting.clear()
        for job in list(self._jobs.values()):
            job.finish(done_event("failed", "engine shut down"))
            with contextlib.suppress(Exception):
                ray.kill(job.actor)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.get_running_loop().run_in_executor(None, ray.shutdown)

    def submit(self, request: JobRequest, on_event: EventSink) -> None:
        if self._actor_class is None:
            self._waiting.append((request, on_event))
            return
        resources = request.resources
        actor = self._actor_class.options(
            num_cpus=resources.cpus, num_gpus=resources.gpus,
            memory=int(resources.memory_gb * 2**30) or None).remote()
        job = _RayJob(request, on_event, actor)
        self._jobs[request.id] = job
        task = asyncio.get_running_loop().create_task(self._drive(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self, job_id: str, hard: bool = False) -> bool:
        job = self._jobs.get(job_id)
        if job is None or job.finished:
            return False
        loop = asyncio.get_running_loop()
        if hard:
            job.killed_for_cancel = True
            self._kill(job)
        else:
            job.actor.cancel.remote()
            if job.grace_timer is None:
                job.grace_timer = loop.call_later(self.cancel_grace_s, self._cancel_hard, job)
        return True

    def describe(self) -> str:
        return f"ray {self.address}"

    @property
    def devices(self) -> list[str]:
        import ray

        gpus = int(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0
        return ["cpu"] + [f"cuda:{i}" for i in range(gpus)]

    # -- one job --------------------------------------------------------------------------------
    async def _drive(self, job: _RayJob) -> None:
        import ray

        try:
            inputs = await self._upload_inputs(job)
            threads = self.threads_per_job or max(1, int(job.request.resources.cpus))
            run_ref = job.actor.run.remote(job.request.to_message(), inputs, threads)
            cursor, held_done = 0, None
            while True:
                finished, _ = await _call(ray.wait, [run_ref], timeout=0)
                events = await _call(ray.get, job.actor.poll.remote(cursor))
                cursor += len(events)
                for event in events:
                    if event["type"] == "done":
                        held_done = event
                    else:
                        await self._forward(job, event)
                if finished:
                    break
                await asyncio.sleep(POLL_INTERVAL_S)
            await _call(ray.get, run_ref)  # raises when the actor died mid-run
            await self._download(job, "")
            content = {k: v for k, v in (held_done or {}).items() if k != "type"}
            job.finish({"type": "done", "content": content or
                        {"state": "failed", "reason": "the job ended without a result"}})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            job.finish(self._failure(job, exc))
        finally:
            self._jobs.pop(job.request.id, None)
            if job.grace_timer is not None:
                job.grace_timer.cancel()
            with contextlib.suppress(Exception):
                await _call(ray.get, job.actor.cleanup.remote(), timeout=30)
            self._kill(job)

    async def _forward(self, job: _RayJob, event: dict) -> None:
        """Pass one event on; an artifact's files are fetched before anyone hears of it."""
        if event["type"] == "job_artifact":
            await self._download(job, event["path"])
        job.sink({"type": event["type"], "content":
                  {k: v for k, v in event.items() if k != "type"}})

    async def _upload_inputs(self, job: _RayJob) -> dict[str, str]:
        """Input files and folders go into the actor's scratch folder, chunk by chunk."""
        import ray

        layout = {}
        for name, path_text in job.request.inputs.items():
            path = Path(path_text)
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*")
                                                         if p.is_file())
            root = path.parent if path.is_file() else path
            for file in files:
                relative = str(file.relative_to(root))
                with open(file, "rb") as handle:
                    offset = 0
                    while True:
                        data = handle.read(CHUNK_BYTES)
                        if not data and offset:
                            break
                        await _call(ray.get,
                                    job.actor.put_input.remote(name, relative, offset, data))
                        offset += len(data)
                        if len(data) < CHUNK_BYTES:
                            break
            layout[name] = path.name if path.is_file() else "."
        return layout

    async def _download(self, job: _RayJob, relative: str) -> None:
        import ray

        listing = await _call(ray.get, job.actor.files.remote(relative))
        target_root = Path(job.request.output_dir)
        for name, size in listing:
            target = target_root / name
            if target.exists() and name in job.fetched and job.fetched[name] == size:
                continue
            chunks = []
            for offset in range(0, max(size, 1), CHUNK_BYTES):
                chunks.append(await _call(ray.get, job.actor.read.remote(name, offset,
                                                                         CHUNK_BYTES)))
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, lambda handle, parts=chunks: handle.writelines(parts))
            job.fetched[name] = size

    def _failure(self, job: _RayJob, exc: Exception) -> dict:
        if job.killed_for_cancel:
            reason = "cancelled" if not job.grace_expired else KILLED_AFTER_GRACE
            return done_event("cancelled", reason)
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return done_event("failed", f"ray worker died ({type(exc).__name__}: {first_line})")

    def _cancel_hard(self, job: _RayJob) -> None:
        if not job.finished:
            job.killed_for_cancel = job.grace_expired = True
            self._kill(job)

    @staticmethod
    def _kill(job: _RayJob) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.kill(job.actor, no_restart=True)


class _RayJob:
    def __init__(self, request: JobRequest, sink: EventSink, actor) -> None:
        self.request = request
        self.sink = sink
        self.actor = actor
        self.finished = False
        self.killed_for_cancel = False
        self.grace_expired = False
        self.grace_timer: asyncio.TimerHandle | None = None
        self.fetched: dict[str, int] = {}

    def finish(self, event: dict) -> None:
        if not self.finished:
            self.finished = True
            self.sink(event)


def use_cluster_token() -> None:
    """Send the cluster's token when one is at hand. Since Ray 2.5x, `ray start` turns token
    authentication on and writes ~/.ray/auth_token, but a driver joining it sends the token
    (from there, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) only in token mode; an explicit
    RAY_AUTH_MODE is respected. Older Ray has no token authentication."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _probe(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast on a head that does not answer: Ray itself retries for minutes."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConnectionError(f"{address!r} is not a Ray address (HOST:PORT, ray://HOST:PORT "
                              "or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {host}:{port} ({exc.strerror or exc})"
                              ) from None


async def _call(blocking, *args, **kwargs):
    """Ray's client calls block: run them on a thread so the engine's loop keeps serving."""
    return await asyncio.get_running_loop().run_in_executor(
        None, functools.partial(blocking, *args, **kwargs))
