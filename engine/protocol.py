"""Wire protocol v1: length-prefixed msgpack frames carrying one envelope each.

Shared by the engine server, its worker processes and every client (the GUI imports this
module; it must stay free of torch and Qt). See CONTRACT.md, "Messages".
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import struct
import uuid
from typing import Any

import msgpack

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 16 * 1024 * 1024
HEADER = struct.Struct(">I")

# Requests a client sends.
HELLO, PING, LIST_METHODS, SUBMIT_JOB, CANCEL_JOB = (
    "hello", "ping", "list_methods", "submit_job", "cancel_job")
LIST_RUNS, REQUEST, SHUTDOWN = "list_runs", "request", "shutdown"
# Replies.
WELCOME, PONG, METHODS, JOB_ACCEPTED, RUNS, REPLY, ERROR = (
    "welcome", "pong", "methods", "job_accepted", "runs", "reply", "error")
# Events about a job.
JOB_STATE, JOB_PROGRESS, JOB_LOG, JOB_ARTIFACT, JOB_RESULT = (
    "job_state", "job_progress", "job_log", "job_artifact", "job_result")

QUEUED, RUNNING, CANCELLING = "queued", "running", "cancelling"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
TERMINAL_STATES = frozenset({SUCCEEDED, FAILED, CANCELLED})
JOB_STATES = (QUEUED, RUNNING, CANCELLING, SUCCEEDED, FAILED, CANCELLED)


class ProtocolError(Exception):
    """A frame that is oversized, truncated or not a msgpack map with a type."""


_ids = itertools.count(1)
_id_prefix = uuid.uuid4().hex[:8]


def new_id() -> str:
    return f"{_id_prefix}-{next(_ids)}"


def envelope(
    type_: str,
    content: dict | None = None,
    *,
    job: str | None = None,
    seq: int | None = None,
    session: str | None = None,
    parent: str | None = None,
) -> dict:
    """``{v, id, type, session, job, seq, parent, content}``; ``parent``: the request answered."""
    return {"v": PROTOCOL_VERSION, "id": new_id(), "type": type_, "session": session,
            "job": job, "seq": seq, "parent": parent, "content": content or {}}


def error_content(kind: str, message: str, traceback: str = "") -> dict:
    return {"error": {"type": kind, "message": message, "traceback": traceback}}


def encode(message: dict) -> bytes:
    body = msgpack.packb(message, use_bin_type=True)
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict:
    try:
        message = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(f"undecodable frame: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("frame is not a message (a map with a 'type')")
    if not isinstance(message.get("content", {}), dict):
        raise ProtocolError("message content is not a map")
    message.setdefault("content", {})
    return message


def _check_length(length: int) -> None:
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES}")


async def read_message(reader: asyncio.StreamReader) -> dict:
    """The next message; ``asyncio.IncompleteReadError`` at a clean end of stream."""
    header = await reader.readexactly(HEADER.size)
    (length,) = HEADER.unpack(header)
    _check_length(length)
    return decode_body(await reader.readexactly(length))


async def write_message(writer: asyncio.StreamWriter, message: dict) -> None:
    writer.write(encode(message))
    await writer.drain()


# -- blocking sockets (worker processes) -----------------------------------------------------
def send_blocking(sock: socket.socket, message: dict) -> None:
    sock.sendall(encode(message))


def recv_blocking(sock: socket.socket) -> dict | None:
    """The next message, or None when the peer closed the connection."""
    header = _recv_exact(sock, HEADER.size)
    if header is None:
        return None
    (length,) = HEADER.unpack(header)
    _check_length(length)
    body = _recv_exact(sock, length)
    if body is None:
        raise ProtocolError("connection closed inside a frame")
    return decode_body(body)


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            if remaining == size:
                return None
            raise ProtocolError("connection closed inside a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def private_socket_path(name: str = "engine.sock") -> str:
    """A socket in a fresh 0700 directory with a short path (Unix socket paths max ~107 bytes)."""
    import tempfile

    base = "/tmp" if os.path.isdir("/tmp") else None
    directory = tempfile.mkdtemp(prefix="studio-", dir=base)
    os.chmod(directory, 0o700)
    return os.path.join(directory, name)


def plain(obj: Any) -> Any:
    """Tuples to lists etc., so a message survives msgpack unchanged."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj
