import asyncio
import socket

import msgpack
import pytest

from engine import protocol


def test_frame_round_trip():
    message = protocol.envelope("ping", {"x": [1, 2.5, "a"]}, job="j", seq=3)
    frame = protocol.encode(message)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert protocol.decode_body(frame[4:]) == message


def test_envelope_has_every_field():
    message = protocol.envelope("pong", parent="abc")
    assert set(message) == {"v", "id", "type", "session", "job", "seq", "parent", "content"}
    assert message["v"] == protocol.PROTOCOL_VERSION and message["parent"] == "abc"


@pytest.mark.parametrize("body", [b"\xc1\xc1", msgpack.packb([1, 2]), msgpack.packb({"a": 1}),
                                  msgpack.packb({"type": "x", "content": [1]})])
def test_garbage_bodies_raise_protocol_error(body):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_body(body)


def test_oversized_frames_are_refused_both_ways():
    with pytest.raises(protocol.ProtocolError):
        protocol.encode({"type": "x", "content": {"blob": b"0" * (protocol.MAX_FRAME_BYTES + 1)}})

    async def read_oversized():
        reader = asyncio.StreamReader()
        reader.feed_data((protocol.MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
        await protocol.read_message(reader)

    with pytest.raises(protocol.ProtocolError):
        asyncio.run(read_oversized())


def test_blocking_helpers_over_a_socket_pair():
    left, right = socket.socketpair()
    protocol.send_blocking(left, {"type": "run", "content": {"n": 1}})
    assert protocol.recv_blocking(right)["content"] == {"n": 1}
    left.sendall(b"\x00\x00\x00\x10abc")
    left.close()
    with pytest.raises(protocol.ProtocolError):
        protocol.recv_blocking(right)
    assert protocol.recv_blocking(right) is None


def test_private_socket_path_is_short_and_private():
    import os
    import stat

    path = protocol.private_socket_path()
    assert len(path) < 100
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
