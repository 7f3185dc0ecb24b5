"""A worker process: runs one job at a time for the local executor, isolated from the engine.

Started as ``python -m engine.worker --fd N`` with one end of a socket pair; speaks the
protocol's frames with the engine. Exits when the engine closes the socket (the engine died or
shut down, even in the middle of its warm import), so no worker outlives its engine. With
``--warm`` torch is imported before ``ready``; its threads are limited to ``--threads`` so
the GUI keeps a core.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import random
import signal
import socket
import threading
import traceback
from collections.abc import Callable

from engine import protocol
from engine.context import Cancelled, JobContext
from engine.threads import limit_threads


class Worker:
    def __init__(self, sock: socket.socket, threads: int = 1) -> None:
        self.sock = sock
        self.threads = threads
        self.inbox: queue.Queue[dict | None] = queue.Queue()
        self.current: JobContext | None = None
        self.current_id: str | None = None
        self._send_lock = threading.Lock()

    def send(self, message: dict) -> None:
        with self._send_lock:
            protocol.send_blocking(self.sock, protocol.plain(message))

    def read_forever(self) -> None:
        """Reader thread: cancel requests act at once; jobs go to the main thread's inbox."""
        try:
            while True:
                message = protocol.recv_blocking(self.sock)
                if message is None:
                    break
                if message["type"] == "cancel":
                    if self.current is not None and self.current_id == message.get("job"):
                        self.current.request_cancel()
                else:
                    self.inbox.put(message)
        except (OSError, protocol.ProtocolError):
            pass
        os._exit(0)  # the engine is gone: never outlive it

    def start_reader(self) -> None:
        """Started before the warm import: an engine that dies meanwhile ends us at once,
        not after seconds of importing torch for nobody."""
        threading.Thread(target=self.read_forever, daemon=True, name="worker-reader").start()

    def serve(self) -> None:
        self.send({"type": "ready", "pid": os.getpid(), "devices": available_devices()})
        while (message := self.inbox.get()) is not None:
            if message["type"] == "run":
                self.run_job(message["job"])
            elif message["type"] == "request":
                self.answer_request(message)

    def run_job(self, job: dict) -> None:
        job_id = job["id"]

        def emit(event: dict) -> None:
            content = {k: v for k, v in event.items() if k != "type"}
            self.send({"type": event["type"], "job": job_id, "content": content})

        def started(ctx: JobContext | None) -> None:
            self.current, self.current_id = ctx, (job_id if ctx is not None else None)

        execute_job(job, emit, self.threads, started)

    def answer_request(self, message: dict) -> None:
        """Short interactive calls (CONTRACT.md, "request"): a module's REQUESTS handlers."""
        from engine.registry import get_request_handler

        try:
            handler = get_request_handler(message["name"])
            reply = {"type": "reply", "id": message["id"], "content": handler(message["args"])}
        except Exception as exc:
            reply = {"type": "reply", "id": message["id"],
                     "error": {"type": type(exc).__name__, "message": str(exc),
                               "traceback": traceback.format_exc()}}
        self.send(reply)


def execute_job(job: dict, emit: Callable[[dict], None], threads: int,
                on_context: Callable[[JobContext | None], None] = lambda ctx: None) -> None:
    """Run one job message to its single ``done`` event; shared by local and Ray workers.

    ``on_context`` receives the job's context while it runs (so a cancel request can reach
    it) and ``None`` once it has ended."""
    try:
        from engine.registry import get_method
        from engine.scrub import scrubbing, secret_values

        spec = get_method(job["method"])
        params = spec.params.model_validate(job["params"])
        secrets = secret_values(params)
        emit = scrubbing(emit, secrets)  # every event, reason and traceback below
        seed_everything(job["seed"])
        ctx = JobContext(job["id"], job["output_dir"], emit, seed=job["seed"],
                         device=choose_device(job.get("device", "auto")),
                         cache_root=job.get("cache_root"), secrets=secrets)
    except Exception as exc:
        emit({"type": "done", "state": "failed", "reason": f"{type(exc).__name__}: {exc}",
              "traceback": traceback.format_exc()})
        return
    on_context(ctx)
    emit({"type": "job_state", "state": "running", "device": ctx.device})
    try:
        with limit_threads(min(threads, max(1, int(spec.resources.cpus)))):
            outputs = spec.run(ctx, params, dict(job.get("inputs", {})))
        ctx.flush()
        emit({"type": "job_result", "outputs": outputs or {}})
        emit({"type": "done", "state": "succeeded", "reason": ""})
    except Cancelled as exc:
        ctx.flush()
        emit({"type": "done", "state": "cancelled", "reason": str(exc)})
    except Exception as exc:
        ctx.flush()
        emit({"type": "done", "state": "failed", "reason": f"{type(exc).__name__}: {exc}",
              "traceback": traceback.format_exc()})
    finally:
        on_context(None)


def available_devices() -> list[str]:
    try:
        import torch
    except ImportError:
        return ["cpu"]
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return devices


def choose_device(preference: str) -> str:
    """``auto`` takes CUDA when present; ``cpu`` forces the CPU."""
    if preference == "cpu":
        return "cpu"
    devices = available_devices()
    if preference.startswith("cuda") and preference in devices:
        return preference
    return "cuda" if len(devices) > 1 else "cpu"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(seed)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="engine.worker")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warm", action="store_true", help="import torch before ready")
    args = parser.parse_args(argv)
    # Ctrl-C reaches the whole process group; cancelling is the engine's decision, not ours.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # torch reads these when it is first imported
    worker = Worker(socket.socket(fileno=args.fd), threads=args.threads)
    worker.start_reader()
    if args.warm:
        with contextlib.suppress(ImportError):
            import torch  # noqa: F401  (a warm worker starts jobs without the import delay)
    try:
        worker.serve()
    except (OSError, protocol.ProtocolError):
        os._exit(0)  # the engine closed our socket while we were talking to it


if __name__ == "__main__":
    main()
