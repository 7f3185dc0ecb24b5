"""Against a real engine subprocess: handshake, order, progress, cancel, crashes, intruders."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import time

import msgpack
import pytest

from engine import protocol
from engine.client import EngineClient, EngineError
from engine.server import MAX_HELLO_BYTES, MAX_UNAUTHENTICATED
from tests.engine.conftest import connect


def run(coro):
    return asyncio.run(coro)


def test_socket_is_private(engine_process):
    path = engine_process.socket_path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert engine_process.token not in " ".join(engine_process.process.args)


def test_handshake_ping_and_methods(engine_process):
    async def scenario():
        session = await connect(engine_process)
        welcome = session.client.welcome
        assert welcome["protocol"] == protocol.PROTOCOL_VERSION
        assert "cpu" in welcome["devices"] and welcome["methods_hash"]
        assert (await session.client.ping())["active_jobs"] == []
        methods = {m["id"]: m for m in await session.client.list_methods()}
        assert {"diag.echo", "diag.count", "eos.train", "eos.reproduce"} <= set(methods)
        schema = methods["diag.count"]["params_schema"]
        assert schema["properties"]["steps"]["minimum"] == 1
        await session.client.close()

    run(scenario())


def test_job_events_arrive_in_order_and_end_once(engine_process):
    async def scenario():
        session = await connect(engine_process)
        job = await session.client.submit("diag.count", {"steps": 30, "delay_s": 0.01}, seed=7)
        await session.wait_terminal(job)
        await asyncio.sleep(0.2)  # anything after the terminal state would be a bug
        events = session.for_job(job)
        seqs = [e["seq"] for e in events]
        assert seqs == list(range(1, len(seqs) + 1))
        assert session.states(job) == ["queued", "running", "succeeded"]
        kinds = [e["type"] for e in events]
        assert kinds.index("job_result") == len(kinds) - 2
        progress = [e["content"] for e in events if e["type"] == "job_progress"]
        assert progress[-1]["step"] == 30 and progress[-1]["total"] == 30
        assert all("value" in p["metrics"] for p in progress)
        artifacts = {e["content"]["name"] for e in events if e["type"] == "job_artifact"}
        assert artifacts == {"count_plot", "values"}
        await session.client.close()

    run(scenario())


def test_invalid_submission_is_an_error_reply(engine_process, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 10_000 + "]" * 10_000)

    async def scenario():
        session = await connect(engine_process)
        with pytest.raises(EngineError, match=f"^{deep}: JSON nested too deeply"):
            await session.client.submit("diag.inputs", {}, {"data": str(deep)})
        with pytest.raises(EngineError, match="seed: .* out of range"):
            await session.client.submit("diag.echo", {}, seed=2**64 - 1)
        with pytest.raises(EngineError, match="steps: unknown parameter|stepz: unknown"):
            await session.client.submit("diag.count", {"stepz": 3})
        with pytest.raises(EngineError, match="unknown method"):
            await session.client.submit("no.such", {})
        with pytest.raises(EngineError, match="no such file"):
            await session.client.submit("diag.inputs", {}, {"data": "/no/such/file.npy"})
        assert (await session.client.ping())["active_jobs"] == []
        await session.client.close()

    run(scenario())


def test_soft_cancel_stops_a_cooperative_job(engine_process):
    async def scenario():
        session = await connect(engine_process)
        job = await session.client.submit("diag.count", {"steps": 10_000, "delay_s": 0.01})
        await session.wait_state(job, {"running"})
        assert await session.client.cancel(job)
        final = await session.wait_terminal(job, timeout_s=10)
        assert final["content"]["state"] == "cancelled"
        assert session.states(job) == ["queued", "running", "cancelling", "cancelled"]
        await session.client.close()

    run(scenario())


def test_job_ignoring_cancel_is_killed_after_grace_and_engine_lives(engine_process):
    async def scenario():
        session = await connect(engine_process)
        job = await session.client.submit("diag.hang", {"seconds": 600})
        await session.wait_state(job, {"running"})
        started = time.monotonic()
        await session.client.cancel(job)
        final = await session.wait_terminal(job, timeout_s=20)
        assert final["content"]["state"] == "cancelled"
        assert "grace period" in final["content"]["reason"]
        assert time.monotonic() - started >= 0.9  # the grace period was honoured
        follow = await session.client.submit("diag.echo", {"message": "still here"})
        assert (await session.wait_terminal(follow))["content"]["state"] == "succeeded"
        await session.client.close()

    run(scenario())


def test_hard_cancel_kills_at_once(engine_process):
    async def scenario():
        session = await connect(engine_process)
        job = await session.client.submit("diag.hang", {"seconds": 600})
        await session.wait_state(job, {"running"})
        await session.client.cancel(job, hard=True)
        final = await session.wait_terminal(job, timeout_s=5)
        assert final["content"]["state"] == "cancelled"
        await session.client.close()

    run(scenario())


def test_crashing_worker_fails_one_job_and_the_queue_goes_on(engine_process):
    async def scenario():
        session = await connect(engine_process)
        crash = await session.client.submit("diag.crash", {"after_s": 0.1})
        queued = await session.client.submit("diag.echo", {"message": "after"})
        final = await session.wait_terminal(crash)
        assert final["content"]["state"] == "failed"
        assert "worker process died (exit code 13)" in final["content"]["reason"]
        assert (await session.wait_terminal(queued))["content"]["state"] == "succeeded"
        assert engine_process.process.poll() is None
        await session.client.close()

    run(scenario())


def test_failing_method_reports_traceback(engine_process):
    async def scenario():
        session = await connect(engine_process)
        job = await session.client.submit("diag.fail", {"message": "boom"})
        final = await session.wait_terminal(job)
        assert final["content"]["state"] == "failed"
        assert final["content"]["error"]["message"] == "RuntimeError: boom"
        assert "Traceback" in final["content"]["error"]["traceback"]
        await session.client.close()

    run(scenario())


def test_queued_job_can_be_cancelled(engine_process):
    async def scenario():
        session = await connect(engine_process)
        busy = await session.client.submit("diag.count", {"steps": 200, "delay_s": 0.01})
        waiting = await session.client.submit("diag.echo", {})
        await session.client.cancel(waiting)
        final = await session.wait_terminal(waiting)
        assert final["content"]["reason"] == "cancelled while queued"
        await session.client.cancel(busy, hard=True)
        await session.wait_terminal(busy)
        await session.client.close()

    run(scenario())


def test_interactive_request_is_served_while_a_job_runs(engine_process, tmp_path):
    async def scenario():
        session = await connect(engine_process)
        job = await session.client.submit("diag.count", {"steps": 200, "delay_s": 0.02})
        await session.wait_state(job, {"running"})
        reply = await session.client.request("diag.echo", {"x": 1})
        assert reply["echo"] == {"x": 1}
        spec = {"kind": "plot", "title": "t", "series": [
            {"name": "a", "x": [0, 1, 2], "y": [1, 0, 2], "style": "line"}]}
        out = tmp_path / "figure.pdf"
        reply = await session.client.request("figure.export", {"spec": spec, "path": str(out)})
        assert out.read_bytes().startswith(b"%PDF")
        with pytest.raises(EngineError, match="unknown request"):
            await session.client.request("no.such", {})
        await session.client.cancel(job, hard=True)
        await session.wait_terminal(job)
        await session.client.close()

    run(scenario())


def test_intruders_and_garbage_do_not_harm_the_engine(engine_process):
    path = engine_process.socket_path

    def raw_connection() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(5)
        sock.connect(path)
        return sock

    # wrong token: refused, then closed
    sock = raw_connection()
    protocol.send_blocking(sock, protocol.envelope("hello", {"token": "x" * 64}))
    reply = protocol.recv_blocking(sock)
    assert reply["type"] == "error" and reply["content"]["error"]["type"] == "unauthorized"
    assert protocol.recv_blocking(sock) is None
    # no hello at all: a request before authenticating is refused
    sock = raw_connection()
    protocol.send_blocking(sock, protocol.envelope("list_methods"))
    assert protocol.recv_blocking(sock)["type"] == "error"
    # garbage bytes, an oversized length, a non-map body
    for payload in (b"\xff" * 64, (2**31).to_bytes(4, "big") + b"x",
                    len(msgpack.packb([1])).to_bytes(4, "big") + msgpack.packb([1])):
        sock = raw_connection()
        sock.sendall(payload)
        assert sock.recv(1024) == b""  # the engine hung up on this connection only
        sock.close()

    async def still_serving():
        session = await connect(engine_process)
        # garbage from an authenticated client closes only that client
        session.client._writer.write(b"\x00\x00\x00\x03abc")
        await asyncio.wait_for(session.client.closed.wait(), 5)
        other = await connect(engine_process)
        job = await other.client.submit("diag.echo", {})
        assert (await other.wait_terminal(job))["content"]["state"] == "succeeded"
        await other.client.close()

    run(still_serving())
    assert engine_process.process.poll() is None


def test_non_ascii_token_and_crowds_of_strangers_are_refused_with_a_frame(engine_process):
    def raw_connection() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(5)
        sock.connect(engine_process.socket_path)
        return sock

    sock = raw_connection()
    protocol.send_blocking(sock, protocol.envelope("hello", {"token": "jeton-é-" * 4}))
    reply = protocol.recv_blocking(sock)
    assert reply["type"] == "error" and reply["content"]["error"]["type"] == "unauthorized"
    # a hello frame too large to be a hello is not buffered: the connection is dropped
    sock = raw_connection()
    sock.sendall((MAX_HELLO_BYTES + 1).to_bytes(4, "big") + b"x" * 1024)
    assert sock.recv(1024) == b""
    # strangers holding connections open: one past the cap is told so and closed
    idle = [raw_connection() for _ in range(MAX_UNAUTHENTICATED)]
    time.sleep(0.5)
    extra = raw_connection()
    reply = protocol.recv_blocking(extra)
    assert reply["type"] == "error" and reply["content"]["error"]["type"] == "busy"
    for sock in idle:
        sock.close()
    time.sleep(0.5)

    async def still_serving():  # and frames far larger than the stream buffer still pass
        session = await connect(engine_process)
        job = await session.client.submit("diag.echo", {"message": "x" * 8_000_000})
        assert (await session.wait_terminal(job))["content"]["state"] == "succeeded"
        await session.client.close()

    run(still_serving())


def test_client_without_token_cannot_connect(engine_process):
    async def scenario():
        client = EngineClient()
        with pytest.raises(EngineError):
            await client.connect(engine_process.socket_path, "wrong-token-wrong-token")

    run(scenario())
