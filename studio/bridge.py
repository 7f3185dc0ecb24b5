"""The GUI's side of the engine: start it, talk to it, watch it, restart it when it dies.

Everything runs on the Qt main thread through qasync's asyncio loop, and nothing here blocks:
the engine is an asyncio subprocess (its token goes through an inherited pipe, never the
command line), its announcement line is awaited, and every request is a coroutine. A
supervisor task owns the engine's life, like jupyter_client's restarter: it pings the engine,
notices when it exits or stops answering, fails the jobs that died with it (queued ones are
offered for resubmission) and starts a fresh one, at most ``max_restarts`` times within
``restart_window_s`` before it gives up and waits for the user.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine import protocol
from engine.client import EngineClient, EngineError, engine_command
from studio.jobs import ENGINE_DIED, JobBook

log = logging.getLogger("studio.bridge")

STARTING, READY, BUSY, RESTARTING, STOPPED = "starting", "ready", "busy", "restarting", "stopped"
ENGINE_LOG_MAX_BYTES = 5 * 1024 * 1024
EXIT_GRACE_S = 3.0  # after the connection drops, how long to wait for the exit status


class EngineUnavailable(ConnectionError):
    """The engine is not running (starting, restarting or given up); the message says which."""


class EngineBridge(QObject):
    """One engine process and one authenticated connection to it.

    Signals carry plain Python objects; slots connected to them run on the main thread.
    """

    state_changed = Signal(str)          # starting, ready, busy, restarting, stopped
    methods_changed = Signal(list)       # the engine's method descriptions
    resubmit_offered = Signal(list)      # submissions ({method, params, inputs, seed}) lost
    engine_lost = Signal(str)            # why the engine went away

    def __init__(self, workspace: str | os.PathLike | None = None, *, workers: int | None = None,
                 device: str = "auto", log_dir: str | os.PathLike | None = None,
                 ping_interval_s: float = 2.0, ping_timeout_s: float = 5.0,
                 max_missed_pings: int = 2, max_restarts: int = 5,
                 restart_window_s: float = 60.0, start_timeout_s: float = 60.0,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.workspace = str(workspace) if workspace else None
        self.workers = workers
        self.device = device
        self.log_dir = Path(log_dir) if log_dir else None
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self.max_missed_pings = max_missed_pings
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.start_timeout_s = start_timeout_s

        self.jobs = JobBook()
        self.methods: list[dict] = []
        self.welcome: dict = {}
        self.state = STOPPED
        self.restarts = 0                  # engines started after the first, this session
        self._subscribers: list[Callable[[dict], None]] = []
        self._process: asyncio.subprocess.Process | None = None
        self._client: EngineClient | None = None
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()       # a manual restart after the bridge gave up
        self._kill_requested = asyncio.Event()
        self._deaths: deque[float] = deque()
        self._supervisor: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False

    # -- life --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the supervisor (returns at once; watch ``state_changed``)."""
        if self._supervisor is None or self._supervisor.done():
            self._stopping = False
            self._supervisor = asyncio.get_event_loop().create_task(self._supervise())

    def restart(self) -> None:
        """Kill the current engine (if any) and start a fresh one; resets the restart budget."""
        self._deaths.clear()
        self._kill_requested.set()
        self._wake.set()

    def set_workspace(self, workspace: str | os.PathLike) -> None:
        """Use another workspace: the engine restarts on it."""
        self.workspace = str(workspace)
        self.restart()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def is_ready(self) -> bool:
        return self.state in (READY, BUSY)

    async def wait_ready(self, timeout_s: float | None = 60.0) -> None:
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except asyncio.TimeoutError:
            raise EngineUnavailable(f"the engine is {self.state}, not ready") from None

    def stop_now(self, timeout_s: float = 3.0) -> None:
        """Stop the engine (window close, tests): SIGTERM, which the engine handles by failing
        its jobs with "engine shut down" and stopping its workers; SIGKILL after a short wait.
        Synchronous, so it also works once the event loop has stopped."""
        self._stopping = True
        process = self._process
        if process is not None and process.returncode is None:
            _terminate(process.pid, timeout_s)
        if self._client is not None and self._client._writer is not None:
            self._client._writer.close()
        for task in [self._supervisor, *self._tasks]:
            if task is not None and not task.done():
                task.cancel()
        self._ready.clear()
        self._set_state(STOPPED)

    def kill_engine(self) -> None:
        """SIGKILL the engine (tests and "Engine > Kill"): the supervisor restarts it."""
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGKILL)

    # -- subscribers ---------------------------------------------------------------------------
    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]:
        """Every job event (protocol envelope) and the shell's own ``engine_state`` and
        ``methods`` notices; returns the function that unsubscribes."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def _publish(self, message: dict) -> None:
        for callback in list(self._subscribers):
            try:
                callback(message)
            except Exception:
                log.exception("a subscriber failed on %s", message.get("type"))

    # -- requests ------------------------------------------------------------------------------
    async def submit(self, method: str, params: dict | None = None, inputs: dict | None = None,
                     seed: int | None = 0, cluster: str = "local") -> str:
        """``cluster``: ``local`` or a Ray address; the first job on a cluster waits while
        the engine connects to it."""
        client = await self._connected()
        reply = await client.call(protocol.SUBMIT_JOB, {
            "method": method, "params": params or {}, "inputs": inputs or {}, "seed": seed,
            "cluster": cluster}, timeout_s=30.0 if cluster == "local" else 180.0)
        job_id = reply["job"]
        self.jobs.register(job_id, method, params or {}, inputs, seed or 0,
                           run_dir=reply["content"].get("run_dir", ""))
        self._update_busy()
        return job_id

    async def cancel(self, job_id: str, hard: bool = False) -> bool:
        client = await self._connected()
        return await client.cancel(job_id, hard=hard)

    async def request(self, name: str, args: dict | None = None,
                      timeout_s: float | None = 60.0) -> dict:
        client = await self._connected()
        return await client.request(name, args, timeout_s=timeout_s)

    async def list_runs(self, method: str | None = None, limit: int | None = None) -> list[dict]:
        client = await self._connected()
        reply = await client.call(protocol.LIST_RUNS, {"method": method, "limit": limit})
        return reply["content"]["runs"]

    async def _connected(self) -> EngineClient:
        if self.state == STOPPED:
            raise EngineUnavailable("the engine is stopped; restart it from the Engine menu")
        if not self._ready.is_set():
            await self.wait_ready(self.start_timeout_s)
        if self._client is None:
            raise EngineUnavailable("the engine is not running")
        return self._client

    def spawn(self, coro, on_error: Callable[[BaseException], None] | None = None
              ) -> asyncio.Task:
        """Run a coroutine in the background, keeping a reference; errors go to ``on_error``."""
        task = asyncio.get_event_loop().create_task(coro)
        self._tasks.add(task)

        def done(finished: asyncio.Task) -> None:
            self._tasks.discard(finished)
            if finished.cancelled():
                return
            error = finished.exception()
            if error is None:
                return
            if on_error is not None:
                on_error(error)
            else:
                log.error("background task failed", exc_info=error)

        task.add_done_callback(done)
        return task

    # -- supervision ---------------------------------------------------------------------------
    async def _supervise(self) -> None:
        first = True
        while not self._stopping:
            self._set_state(STARTING if first else RESTARTING)
            if not first:
                self.restarts += 1
            first = False
            self._kill_requested.clear()
            try:
                await self._launch()
                reason = await self._watch()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the engine failed to start or to shake hands
                log.error("engine start failed: %s", exc)
                reason = f"engine failed to start: {exc}"
            await self._bury(reason)
            if self._stopping:
                return
            delay_s = self._next_restart_delay_s()
            if delay_s is None:
                self._set_state(STOPPED)
                log.error("the engine died %d times in %.0f s; not restarting it again",
                          len(self._deaths), self.restart_window_s)
                self._wake.clear()
                await self._wake.wait()
                continue
            await asyncio.sleep(delay_s)

    def _next_restart_delay_s(self) -> float | None:
        """Bounded restarts: None once the engine died too often within the window."""
        now = time.monotonic()
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > self.restart_window_s:
            self._deaths.popleft()
        if len(self._deaths) > self.max_restarts:
            return None
        return min(5.0, 0.1 * 2 ** (len(self._deaths) - 1))

    async def _launch(self) -> None:
        token = secrets.token_hex(32)
        read_fd, write_fd = os.pipe()
        try:
            os.write(write_fd, token.encode())
        finally:
            os.close(write_fd)
        extra = ["--device", self.device] if self.device and self.device != "auto" else []
        command = [part.replace("{fd}", str(read_fd))
                   for part in engine_command(self.workspace, self.workers, extra)]
        stderr = self._engine_log()
        try:
            self._process = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=stderr, pass_fds=(read_fd,), env={**os.environ, "PYTHONUNBUFFERED": "1"})
        finally:
            os.close(read_fd)
            if stderr is not None:
                stderr.close()
        line = await asyncio.wait_for(self._process.stdout.readline(), self.start_timeout_s)
        if not line:
            code = await self._process.wait()
            raise RuntimeError(f"the engine exited during start-up (code {code}); see "
                               f"{self._engine_log_path() or 'its output'}")
        announcement = json.loads(line)
        self._track(asyncio.get_event_loop().create_task(self._drain_stdout(self._process)))
        client = EngineClient(self._on_engine_message)
        self.welcome = await asyncio.wait_for(
            client.connect(announcement["socket"], token, client="studio"), self.start_timeout_s)
        self._client = client
        self.methods = await client.list_methods()
        log.info("engine %s ready (pid %s, workspace %s)", self.welcome.get("engine"),
                 self._process.pid, self.welcome.get("workspace"))
        self._ready.set()
        self.methods_changed.emit(list(self.methods))
        self._publish({"type": "methods", "content": {"methods": list(self.methods)}})
        self._update_busy(force=True)

    async def _watch(self) -> str:
        """Wait until the engine exits, closes the connection or stops answering pings."""
        process, client = self._process, self._client
        watchers = {
            asyncio.ensure_future(process.wait()): "exited",
            asyncio.ensure_future(client.closed.wait()): "closed the connection",
            asyncio.ensure_future(self._ping_until_silent(client)): "stopped answering",
            asyncio.ensure_future(self._kill_requested.wait()): "restart requested",
        }
        try:
            done, _pending = await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in watchers:
                future.cancel()
        what = watchers[next(iter(done))]
        if what == "closed the connection":  # usually the process is exiting: say why
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), EXIT_GRACE_S)
        if process.returncode is not None:
            code = process.returncode
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            return f"{ENGINE_DIED} ({how})"
        return f"{ENGINE_DIED} ({what})"

    async def _ping_until_silent(self, client: EngineClient) -> None:
        missed = 0
        while missed < self.max_missed_pings:
            await asyncio.sleep(self.ping_interval_s)
            try:
                await client.ping(timeout_s=self.ping_timeout_s)
                missed = 0
            except (asyncio.TimeoutError, EngineError):
                missed += 1
                log.warning("engine missed a ping (%d of %d)", missed, self.max_missed_pings)
            except ConnectionError:
                return

    async def _bury(self, reason: str) -> None:
        """The engine is gone (or must go): kill what is left and fail its jobs."""
        self._ready.clear()
        process, client = self._process, self._client
        self._client = None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait(), 5.0)
        if self._stopping:
            return
        log.warning("%s", reason)
        self._fail_lost_jobs()
        self.engine_lost.emit(reason)

    def _fail_lost_jobs(self) -> None:
        lost = self.jobs.active()
        offered = [record.submission() for record in lost
                   if record.state == protocol.QUEUED and record.method]
        for record in lost:
            self._on_engine_message(protocol.envelope(
                protocol.JOB_STATE, {"state": protocol.FAILED, "reason": ENGINE_DIED},
                job=record.id, seq=record.last_seq + 1))
        if offered:
            self.resubmit_offered.emit(offered)

    # -- events --------------------------------------------------------------------------------
    def _on_engine_message(self, message: dict) -> None:
        if message.get("job") and self.jobs.apply(message) is None:
            return  # stale or not a job event
        self._publish(message)
        if message.get("type") == protocol.JOB_STATE:
            self._update_busy()

    def _update_busy(self, force: bool = False) -> None:
        if not self._ready.is_set():
            return
        state = BUSY if self.jobs.active() else READY
        if force or state != self.state:
            self._set_state(state)

    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        self.state = state
        log.info("engine state: %s", state)
        self.state_changed.emit(state)
        self._publish({"type": "engine_state", "content": {"state": state}})

    # -- plumbing ------------------------------------------------------------------------------
    def _track(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain_stdout(self, process: asyncio.subprocess.Process) -> None:
        """Workers share the engine's stdout: keep reading so a chatty method never blocks."""
        engine_log = logging.getLogger("studio.engine.stdout")
        while True:
            line = await process.stdout.readline()
            if not line:
                return
            engine_log.info("%s", line.decode(errors="replace").rstrip())

    def _engine_log_path(self) -> Path | None:
        return self.log_dir / "engine.log" if self.log_dir else None

    def _engine_log(self):
        """The engine's stderr goes to ``engine.log`` beside the GUI's log (rotated by size)."""
        path = self._engine_log_path()
        if path is None:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() and path.stat().st_size > ENGINE_LOG_MAX_BYTES:
                os.replace(path, path.with_name(path.name + ".1"))
            return open(path, "ab")  # noqa: SIM115 - handed to the child, closed after spawn
        except OSError as exc:
            log.warning("cannot write the engine log %s: %s", path, exc)
            return None


def _terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM, wait up to ``timeout_s`` for the process to be reaped, then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """False once the process is gone or is a zombie (exited, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().split(b") ", 1)[1][:1] != b"Z"
    except (FileNotFoundError, IndexError):
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
