"""
How the WebSocket binding's messages meet the wire (L{IFrameIO}): plain
frames read and written by Beacon itself (L{PlainFrames}, as Beacon runs)
answer exactly as when autobahn reads and writes every frame
(L{AutobahnFrames}, the off switch), however the bytes are cut.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zope.interface.verify import verifyObject

from beacon.bindings.websocket._frames import AutobahnFrames, IFrameIO, PlainFrames, unmask
from beacon.bindings.websocket import DEFAULT_MAX_MESSAGE, WebSocketA2AProtocol, WebSocketOptions
from websocket_support import CAP, VERSION, Server, frame, send_message
from websocket_support import close_servers, frame_path, pytest_generate_tests  # noqa: F401 (fixtures)


# Plain frames are read and written by the binding itself (PlainFrames),
# or by autobahn (AutobahnFrames, the off switch): the same answers.


def test_both_frame_paths_provide_the_interface() -> None:
    """Both ways of meeting the wire provide IFrameIO, and the factory picks one by its flag."""
    assert verifyObject(IFrameIO, PlainFrames(1024))
    assert verifyObject(IFrameIO, AutobahnFrames())
    server = Server(direct=True)
    assert isinstance(server.factory.frames, PlainFrames)
    assert isinstance(Server(direct=False).factory.frames, AutobahnFrames)


class AutobahnMessages(WebSocketA2AProtocol):
    """The binding, counting the messages autobahn reads (its callbacks fire only for those)."""

    read: list[bool] = []

    def onMessageBegin(self, isBinary: bool) -> None:
        self.read.append(isBinary)
        super().onMessageBegin(isBinary)


def _text(request_id: int, text: str = "hello") -> bytes:
    return frame(0x1, json.dumps(send_message(text, request_id)).encode())


_FRAME_SEQUENCES = {
    "simple frames": [_text(1), _text(2), _text(3)],
    "a 16-bit length": [_text(1, "x" * 400), _text(2)],
    "a ping between": [_text(1), frame(0x9, b"hi"), _text(2)],
    "a fragmented message between": [
        _text(1),
        frame(0x1, b'{"jsonrpc":"2.0","id":9,', fin=False),
        frame(0x0, b'"method":"GetTask","params":{"id":"x"}}'),
        _text(2),
    ],
    "invalid UTF-8": [_text(1), frame(0x1, b'"\xff\xfe"'), _text(2)],
    "a truncated code point": [_text(1), frame(0x1, b'"\xe2\x82"')],
    "over max_message": [_text(1), frame(0x1, b" " * 1100), _text(2)],
    "unmasked": [_text(1), b"\x81\x02{}", _text(2)],
    "a non-minimal length": [_text(1), b"\x81\xfe\x00\x02\x00\x00\x00\x00{}", _text(2)],
    "RSV bits": [_text(1), b"\xc1\x82\x00\x00\x00\x00{}"],
    "binary": [_text(1), frame(0x2, b"{}"), _text(2)],
    "an empty text frame": [frame(0x1, b""), _text(1)],
    "a close": [_text(1), frame(0x8, b"\x03\xe8"), _text(2)],
    "a mask key": [
        b"\x81\x82\x01\x02\x03\x04" + bytes(a ^ b for a, b in zip(b"{}", b"\x01\x02")),
        _text(1),
    ],
}


def _frames_answered(
    data: bytes, *, byte_by_byte: bool, direct: bool = True, max_body: int = CAP, max_message: int = 1024
) -> tuple[list[tuple[int, bytes]], int]:
    """The frames the client gets for C{data}, and how many messages autobahn read."""
    server = Server(
        mounted=False, options=WebSocketOptions(max_message=max_message), max_body=max_body, direct=direct
    )
    server.factory.protocol = AutobahnMessages  # type: ignore[assignment]
    connection = server.open([("A2A-Version", "1.0")])
    connection.responses()
    AutobahnMessages.read = []
    if byte_by_byte:
        for index in range(len(data)):
            connection.write(data[index : index + 1])
    else:
        connection.write(data)
    connection.pump.flush()
    frames = [
        (opcode, re.sub(rb"[0-9a-v]{36}", b"<id>", payload))
        for opcode, payload in connection.client.frames[connection.read :]
    ]
    return frames, len(AutobahnMessages.read)


@pytest.mark.parametrize("frames", _FRAME_SEQUENCES.values(), ids=_FRAME_SEQUENCES.keys())
def test_plain_frames_read_directly_answer_as_autobahn_does(frames: list[bytes]) -> None:
    """The same frames read by the binding (in one read, and one byte at a time) and by autobahn alone get the same answers and closes."""
    data = b"".join(frames)
    direct, _ = _frames_answered(data, byte_by_byte=False)
    trickled, _ = _frames_answered(data, byte_by_byte=True)
    autobahn, _ = _frames_answered(data, byte_by_byte=True, direct=False)
    assert direct == trickled == autobahn
    assert direct


_LARGE = json.dumps(send_message("x" * 1500, "large")).encode()

_OVER_MAX_BODY = {
    "a text frame": [_text(1), frame(0x1, _LARGE), _text(2)],
    "a binary frame": [frame(0x2, _LARGE), _text(1)],
    "fragments": [
        frame(0x1, _LARGE[:700], fin=False),
        frame(0x9, b"ping"),
        frame(0x0, _LARGE[700:]),
        _text(1),
    ],
    "a large first fragment": [frame(0x1, _LARGE[:1200], fin=False), frame(0x0, _LARGE[1200:]), _text(1)],
    "over max_message": [_text(1), frame(0x1, b" " * 9000), _text(2)],
}


@pytest.mark.parametrize("frames", _OVER_MAX_BODY.values(), ids=_OVER_MAX_BODY.keys())
def test_messages_over_max_body_answer_as_autobahn_does(frames: list[bytes]) -> None:
    """Messages over max_body, which are dropped as they arrive, are answered the same both ways."""
    data = b"".join(frames)
    sizes = {"max_body": 1024, "max_message": 8192}
    direct, _ = _frames_answered(data, byte_by_byte=False, **sizes)
    trickled, _ = _frames_answered(data, byte_by_byte=True, **sizes)
    autobahn, _ = _frames_answered(data, byte_by_byte=True, direct=False, **sizes)
    assert direct == trickled == autobahn
    assert direct


def test_plain_frames_skip_autobahn_frame_reading() -> None:
    """Pipelined plain frames are all answered without autobahn reading a message; with the shortcut off autobahn reads each."""
    data = b"".join(_text(n) for n in range(1, 11))
    frames, autobahn_reads = _frames_answered(data, byte_by_byte=False)
    assert len(frames) == 10
    assert all(b"TASK_STATE_SUBMITTED" in payload for _, payload in frames)
    assert autobahn_reads == 0
    assert _frames_answered(data, byte_by_byte=False, direct=False)[1] == 10


@settings(max_examples=300)
@given(payload=st.binary(max_size=300), key=st.binary(min_size=4, max_size=4))
def test_unmask_is_rfc6455_masking(payload: bytes, key: bytes) -> None:
    """unmask XORs every octet with the key octet at its index modulo 4."""
    assert unmask(payload, key) == bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class AutobahnWrites(WebSocketA2AProtocol):
    """The binding, counting the frames autobahn writes."""

    written: list[int] = []

    def sendFrame(self, opcode: int, *args: Any, **kwargs: Any) -> None:
        self.written.append(opcode)
        super().sendFrame(opcode, *args, **kwargs)


def _sent(payload: bytes, frames: IFrameIO) -> tuple[bytes, int]:
    """What one text message puts on the wire, and how many frames autobahn wrote for it."""
    server = Server(mounted=False)
    server.factory.protocol = AutobahnWrites  # type: ignore[assignment]
    connection = server.open([("A2A-Version", "1.0")])
    connection.responses()
    AutobahnWrites.written = []
    server_transport = connection.pump.serverIO
    start = len(server_transport.stream)
    frames.write_text(connection.server, payload)
    return b"".join(server_transport.stream[start:]), len(AutobahnWrites.written)


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_answers_are_written_as_autobahn_writes_them(size: int) -> None:
    """Each length encoding gives autobahn's bytes, without autobahn writing the frame."""
    payload = b"x" * size
    wire, autobahn_writes = _sent(payload, PlainFrames(DEFAULT_MAX_MESSAGE))
    assert (wire, autobahn_writes) == (_sent(payload, AutobahnFrames())[0], 0)
    assert wire[:1] == b"\x81"


def test_answers_go_through_autobahn_as_plain_frames() -> None:
    """
    The factory's options leave what autobahn sends plain, as PlainFrames
    assumes: a compression offer is not taken up, and a long answer is one
    final, unmasked text frame.
    """
    server = Server(mounted=False, direct=False)
    connection = server.open(VERSION + [("Sec-WebSocket-Extensions", "permessage-deflate")])
    assert connection.client.status == 101
    assert "sec-websocket-extensions" not in connection.client.headers
    payload = b"x" * 70000
    wire, autobahn_writes = _sent(payload, AutobahnFrames())
    assert autobahn_writes == 1
    assert wire == b"\x81\x7f" + len(payload).to_bytes(8, "big") + payload


@pytest.mark.parametrize("frames", [PlainFrames(10), AutobahnFrames()], ids=["plain", "autobahn"])
def test_answer_over_max_message_is_refused_by_autobahn(frames: IFrameIO) -> None:
    """An answer over max_message goes to autobahn, which refuses it as it always has."""
    from autobahn.websocket.protocol import PayloadExceededError

    server = Server(mounted=False, options=WebSocketOptions(max_message=1024))
    connection = server.open()
    with pytest.raises(PayloadExceededError):
        (PlainFrames(1024) if isinstance(frames, PlainFrames) else frames).write_text(
            connection.server, b"x" * 2000
        )
