"""``studio-engine serve``: the engine process the GUI talks to over a private Unix socket.

Security: the socket lives in a fresh 0700 directory and is itself 0600; a client must open
with ``hello`` carrying the token (handed over by environment or an inherited pipe, never the
command line) within ``HELLO_TIMEOUT_S``. Clients without it, and any malformed or oversized
frame, lose their connection; the engine and other clients carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import signal
import traceback
import uuid

from engine import __version__, protocol
from engine.executors.base import Executor
from engine.jobs import InvalidSubmission, JobManager
from engine.registry import UnknownMethod, describe_all, methods_hash
from engine.workspace import Workspace

log = logging.getLogger("studio.engine")

HELLO_TIMEOUT_S = 5.0
PARENT_POLL_S = 1.0
MAX_CLIENT_BACKLOG_BYTES = 64 * 1024 * 1024
# Before the token is checked a connection may hold little: a small stream buffer (frames
# after hello are read with readexactly, which is not bound by it), a small hello frame, and
# only so many such connections at once.
STREAM_BUFFER_BYTES = 64 * 1024
MAX_HELLO_BYTES = 64 * 1024
MAX_UNAUTHENTICATED = 16
REPORT_REQUEST = "report"  # served by the engine itself (engine.report), not a method module


class _Client:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.session = uuid.uuid4().hex[:12]

    def send(self, message: dict) -> None:
        """Queue a frame; a client that stops reading is disconnected, not waited for."""
        if self.writer.is_closing():
            return
        transport = self.writer.transport
        if transport.get_write_buffer_size() > MAX_CLIENT_BACKLOG_BYTES:
            log.warning("client %s is not reading; disconnecting it", self.session)
            self.writer.close()
            return
        self.writer.write(protocol.encode(message))


class EngineServer:
    def __init__(self, workspace: Workspace, executor: Executor, token: str, socket_path: str,
                 device: str = "auto", watch_parent: int | None = None) -> None:
        """``watch_parent``: exit when this pid (0: our parent now) stops being our parent."""
        self.workspace = workspace
        self.executor = executor
        self.token = token
        self.socket_path = socket_path
        self.watch_parent = watch_parent
        self._parent_pid = watch_parent or os.getppid()
        self.clients: set[_Client] = set()
        self.jobs = JobManager(workspace, executor, self._broadcast, device=device)
        self._stopped = asyncio.Event()
        self._unauthenticated = 0
        self._report_lock = asyncio.Lock()

    def _broadcast(self, message: dict) -> None:
        for client in list(self.clients):
            client.send(message)

    async def serve(self, on_listening=None) -> None:
        orphans = self.workspace.finish_orphans("engine died")
        if orphans:
            log.info("marked %d run(s) of a dead engine as failed", len(orphans))
        leftovers = self.workspace.remove_dead_temp_files()
        if leftovers:
            log.info("removed %d temp file(s) of killed writes", len(leftovers))
        await self.executor.start()
        old_umask = os.umask(0o177)
        try:
            server = await asyncio.start_unix_server(
                self._handle, path=self.socket_path, limit=STREAM_BUFFER_BYTES)
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopped.set)
        watcher = None
        if self.watch_parent is not None:
            watcher = asyncio.create_task(self._watch_parent())
        if on_listening:
            on_listening(self.socket_path)
        async with server:
            await self._stopped.wait()
            self.jobs.fail_all("engine shut down")
            for client in list(self.clients):
                client.writer.close()  # sends what is buffered; its handler then returns
        if watcher:
            watcher.cancel()
        await self.jobs.stop_clusters()
        await self.executor.stop()
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
            os.rmdir(os.path.dirname(self.socket_path))

    async def _watch_parent(self) -> None:
        """Exit when the process that started us (the GUI) is gone: nothing is orphaned."""
        while True:
            if os.getppid() != self._parent_pid:
                log.warning("parent process %d is gone; shutting down", self._parent_pid)
                self._stopped.set()
                return
            await asyncio.sleep(PARENT_POLL_S)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = _Client(writer)
        if self._unauthenticated >= MAX_UNAUTHENTICATED:
            client.send(protocol.envelope(protocol.ERROR, protocol.error_content(
                "busy", "too many connections are waiting to authenticate")))
            writer.close()
            return
        self._unauthenticated += 1
        try:
            try:
                hello = await asyncio.wait_for(_read_hello(reader), HELLO_TIMEOUT_S)
            finally:
                self._unauthenticated -= 1
            if hello["type"] != protocol.HELLO or not self._token_matches(hello["content"]):
                client.send(protocol.envelope(protocol.ERROR, protocol.error_content(
                    "unauthorized", "a valid token is required"), parent=hello.get("id")))
                return
            client.send(protocol.envelope(protocol.WELCOME, self._welcome(), parent=hello.get("id"),
                                          session=client.session))
            self.clients.add(client)
            while True:
                message = await protocol.read_message(reader)
                await self._dispatch(client, message)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
            pass
        except protocol.ProtocolError as exc:
            log.warning("dropping client %s: %s", client.session, exc)
        finally:
            self.clients.discard(client)
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()

    def _token_matches(self, content: dict) -> bool:
        """Compared as UTF-8 bytes: any token, ASCII or not, is an answer, never a crash."""
        token = content.get("token", "")
        if not isinstance(token, str):
            return False
        return hmac.compare_digest(token.encode("utf-8", "replace"), self.token.encode())

    def _welcome(self) -> dict:
        return {"protocol": protocol.PROTOCOL_VERSION, "engine": __version__,
                "devices": self.executor.devices, "executor": self.executor.describe(),
                "methods_hash": methods_hash(), "workspace": str(self.workspace.root),
                "pid": os.getpid()}

    async def _dispatch(self, client: _Client, message: dict) -> None:
        kind, content, request_id = message["type"], message["content"], message.get("id")

        def reply(type_: str, body: dict, job: str | None = None) -> None:
            client.send(protocol.envelope(type_, body, parent=request_id, job=job,
                                          session=client.session))

        try:
            if kind == protocol.PING:
                reply(protocol.PONG, {"active_jobs": self.jobs.active()})
            elif kind == protocol.LIST_METHODS:
                reply(protocol.METHODS, {"methods": describe_all(), "hash": methods_hash()})
            elif kind == protocol.SUBMIT_JOB:
                if content.get("cluster") not in (None, "", "local"):
                    asyncio.create_task(self._submit_on_cluster(reply, content))
                    return
                # inputs are read by their formats' readers: off the loop, pings go on
                submission = await asyncio.to_thread(
                    self.jobs.prepare, content["method"], content.get("params"),
                    content.get("inputs"), content.get("seed"))
                job_id = self.jobs.enqueue(submission)
                reply(protocol.JOB_ACCEPTED, {"run_dir": str(self.workspace.run_dir(job_id))},
                      job=job_id)
            elif kind == protocol.CANCEL_JOB:
                found = self.jobs.cancel(str(message.get("job") or content.get("job")),
                                         hard=bool(content.get("hard")))
                reply(protocol.REPLY, {"cancelling": found})
            elif kind == protocol.LIST_RUNS:
                reply(protocol.RUNS, {"runs": self.workspace.runs(
                    content.get("method"), content.get("state"), content.get("limit"))})
            elif kind == protocol.REQUEST:
                asyncio.create_task(self._serve_request(reply, content))
            elif kind == protocol.SHUTDOWN:
                reply(protocol.REPLY, {"shutting_down": True})
                self._stopped.set()
            # unknown types are ignored (forward compatibility)
        except (UnknownMethod, InvalidSubmission, KeyError, TypeError, ValueError) as exc:
            reply(protocol.ERROR, protocol.error_content(type(exc).__name__, str(exc).strip("'\"")))
        except Exception as exc:  # the engine answers, it does not die
            log.exception("error handling %s", kind)
            reply(protocol.ERROR, protocol.error_content(type(exc).__name__, str(exc),
                                                         traceback.format_exc()))

    async def _submit_on_cluster(self, reply, content: dict) -> None:
        """Connecting to a cluster takes seconds: done aside so pings keep being answered."""
        try:
            executor = await self.jobs.executor_for(str(content["cluster"]))
            submission = await asyncio.to_thread(
                self.jobs.prepare, content["method"], content.get("params"),
                content.get("inputs"), content.get("seed"))
            job_id = self.jobs.enqueue(submission, executor)
            reply(protocol.JOB_ACCEPTED, {"run_dir": str(self.workspace.run_dir(job_id))},
                  job=job_id)
        except Exception as exc:
            reply(protocol.ERROR, protocol.error_content(type(exc).__name__,
                                                         str(exc).strip("'\"")))

    async def _serve_request(self, reply, content: dict) -> None:
        try:
            if content["name"] == REPORT_REQUEST:  # the engine's own: no worker, no torch
                result = await self._build_report(content.get("args") or {})
            else:
                result = await self.executor.request(str(content["name"]),
                                                     content.get("args", {}))
            reply(protocol.REPLY, result)
        except Exception as exc:
            error = getattr(exc, "error", None) or {"type": type(exc).__name__,
                                                     "message": str(exc), "traceback": ""}
            reply(protocol.ERROR, {"error": error})


    async def _build_report(self, args: dict) -> dict:
        """The ``report`` request: ``{slugs, out}`` -> ``{path, pdf, json}`` (engine.report),
        drawn off the event loop, one report at a time; ``out`` defaults to the workspace's
        ``report`` folder."""
        from engine.report import ReportError, build_report

        slugs = args.get("slugs") or []
        if not isinstance(slugs, list) or not all(isinstance(s, str) for s in slugs):
            raise ValueError("report: slugs must be a list of paper slugs")
        out = args.get("out") or str(self.workspace.root / "report")
        if not isinstance(out, str):
            raise ValueError("report: out must be a folder path")
        async with self._report_lock:
            try:
                return await asyncio.to_thread(build_report, self.workspace, out, slugs)
            except ReportError as exc:
                raise ValueError(str(exc)) from None


async def _read_hello(reader: asyncio.StreamReader) -> dict:
    """The first frame, which may not exceed ``MAX_HELLO_BYTES``."""
    (length,) = protocol.HEADER.unpack(await reader.readexactly(protocol.HEADER.size))
    if length > MAX_HELLO_BYTES:
        raise protocol.ProtocolError(f"hello frame of {length} bytes exceeds {MAX_HELLO_BYTES}")
    return protocol.decode_body(await reader.readexactly(length))
