"""Start an engine process and talk to it: used by the GUI's bridge, tests and benchmarks.

Torch-free and Qt-free. ``launch_engine`` starts ``python -m engine serve`` with the token on
an inherited pipe and waits for the line announcing its socket; ``EngineClient`` is an asyncio
client that matches replies to requests and hands every event to a callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from engine import protocol
from engine.commands import python_module


class EngineError(Exception):
    """The engine answered a request with an error."""

    def __init__(self, error: dict) -> None:
        super().__init__(error.get("message", "engine error"))
        self.error = error


@dataclass
class EngineProcess:
    process: subprocess.Popen
    socket_path: str
    token: str

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()


def engine_command(workspace: str | None = None, workers: int | None = None,
                   extra: list[str] | None = None) -> list[str]:
    command = [*python_module("engine"), "serve", "--token-fd", "{fd}",
               "--watch-parent", str(os.getpid())]
    if workspace:
        command += ["--workspace", str(workspace)]
    if workers:
        command += ["--workers", str(workers)]
    return command + (extra or [])


def launch_engine(workspace: str | None = None, workers: int | None = None,
                  extra: list[str] | None = None, timeout_s: float = 120.0,
                  env: dict | None = None) -> EngineProcess:
    """Start an engine and block until it listens (used by tests and benchmarks)."""
    token = secrets.token_hex(32)
    read_fd, write_fd = os.pipe()
    os.write(write_fd, token.encode())
    os.close(write_fd)
    command = [part.replace("{fd}", str(read_fd))
               for part in engine_command(workspace, workers, extra)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, pass_fds=(read_fd,),
                               env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    os.close(read_fd)
    line = _read_line_with_timeout(process, timeout_s)
    announcement = json.loads(line)
    return EngineProcess(process, announcement["socket"], token)


def _read_line_with_timeout(process: subprocess.Popen, timeout_s: float) -> str:
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    if not selector.select(timeout_s):
        process.kill()
        raise TimeoutError(f"engine did not start within {timeout_s:.0f} s")
    line = process.stdout.readline().decode()
    if not line:
        raise RuntimeError(f"engine exited during start-up (code {process.wait()})")
    return line


class EngineClient:
    """One authenticated connection. ``on_event`` receives every message that is not a reply."""

    def __init__(self, on_event: Callable[[dict], None] | None = None) -> None:
        self.on_event = on_event or (lambda message: None)
        self.welcome: dict = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[str, asyncio.Future] = {}
        self._read_task: asyncio.Task | None = None
        self.closed = asyncio.Event()

    async def connect(self, socket_path: str, token: str, client: str = "studio") -> dict:
        self._reader, self._writer = await asyncio.open_unix_connection(
            socket_path, limit=protocol.MAX_FRAME_BYTES + 16)
        hello = protocol.envelope(protocol.HELLO, {"token": token, "client": client,
                                                   "protocol": protocol.PROTOCOL_VERSION})
        await protocol.write_message(self._writer, hello)
        reply = await protocol.read_message(self._reader)
        if reply["type"] != protocol.WELCOME:
            raise EngineError(reply["content"].get("error", {"message": "refused"}))
        self.welcome = reply["content"]
        self._read_task = asyncio.create_task(self._read_forever())
        return self.welcome

    async def _read_forever(self) -> None:
        try:
            while True:
                message = await protocol.read_message(self._reader)
                future = self._pending.pop(message.get("parent") or "", None)
                if future is not None and not future.done():
                    future.set_result(message)
                else:
                    self.on_event(message)
        except (asyncio.IncompleteReadError, ConnectionError, protocol.ProtocolError):
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("engine connection closed"))
            self._pending.clear()
            self.closed.set()

    async def call(self, type_: str, content: dict | None = None, job: str | None = None,
                   timeout_s: float | None = 30.0) -> dict:
        """Send a request and wait for the message that names it as parent."""
        if self._writer is None or self.closed.is_set():
            raise ConnectionError("not connected to the engine")
        message = protocol.envelope(type_, content, job=job)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[message["id"]] = future
        await protocol.write_message(self._writer, message)
        reply = await asyncio.wait_for(future, timeout_s)
        if reply["type"] == protocol.ERROR:
            raise EngineError(reply["content"].get("error", {}))
        return reply

    async def submit(self, method: str, params: dict | None = None, inputs: dict | None = None,
                     seed: int | None = None, cluster: str = "local") -> str:
        """Queue a job; ``cluster`` other than ``local`` runs it on that Ray cluster (the
        first job there waits for the engine to connect, hence the longer timeout)."""
        content = {"method": method, "params": params or {}, "inputs": inputs or {},
                   "seed": seed, "cluster": cluster}
        reply = await self.call(protocol.SUBMIT_JOB, content,
                                timeout_s=30.0 if cluster == "local" else 180.0)
        return reply["job"]

    async def cancel(self, job_id: str, hard: bool = False) -> bool:
        reply = await self.call(protocol.CANCEL_JOB, {"job": job_id, "hard": hard}, job=job_id)
        return bool(reply["content"].get("cancelling"))

    async def list_methods(self) -> list[dict]:
        return (await self.call(protocol.LIST_METHODS))["content"]["methods"]

    async def ping(self, timeout_s: float = 10.0) -> dict:
        return (await self.call(protocol.PING, timeout_s=timeout_s))["content"]

    async def request(self, name: str, args: dict | None = None,
                      timeout_s: float | None = 60.0) -> dict:
        reply = await self.call(protocol.REQUEST, {"name": name, "args": args or {}},
                                timeout_s=timeout_s)
        return reply["content"]

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        if self._read_task is not None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._read_task
