"""
The benchmark's WebSocket load client (bench/ws_load.py) speaks RFC 6455 by
itself; these tests hold it to the frames Beacon's binding reads and writes,
so that its counts of right and wrong answers can be trusted.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import struct
from pathlib import Path
from types import ModuleType
from typing import Any

from beacon.bindings.websocket._frames import text_frame, unmask
from scripts import load_script

WS_LOAD = Path(__file__).resolve().parent.parent / "bench" / "ws_load.py"


def load_module() -> ModuleType:
    return load_script(WS_LOAD, "ws_load")


ws_load = load_module()


class Transport(asyncio.Transport):
    """Collects what the client writes, one entry per write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True


def client_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The client's frames in C{data}: each must be final and masked."""
    frames = []
    at = 0
    while at < len(data):
        first, second = data[at], data[at + 1]
        assert first & 0x80 and second & 0x80
        size, at = second & 0x7F, at + 2
        if size == 126:
            size, at = struct.unpack_from("!H", data, at)[0], at + 2
        elif size == 127:
            size, at = struct.unpack_from("!Q", data, at)[0], at + 8
        key, at = data[at : at + 4], at + 4
        frames.append((first & 0x0F, unmask(data[at : at + size], key)))
        at += size
    return frames


def answer(request_id: int, state: str = "TASK_STATE_SUBMITTED") -> bytes:
    task = {"id": "06h" + "0" * 33, "contextId": "c", "status": {"state": state}}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"task": task}}).encode()


def opened(depth: int = 4) -> tuple[Any, Transport, Any]:
    """A client past its upgrade (checked against Sec-WebSocket-Accept), and started."""
    stats = ws_load.Stats()
    protocol = ws_load.LoadProtocol("127.0.0.1:8080", "/a2a/ws", b"t", depth, stats)
    transport = Transport()
    protocol.connection_made(transport)
    head = transport.writes[0].decode("latin-1")
    assert head.startswith("GET /a2a/ws HTTP/1.1\r\n")
    assert "\r\nA2A-Version: 1.0\r\n" in head
    key = head.split("Sec-WebSocket-Key: ")[1].split("\r\n")[0].encode()
    accept = base64.b64encode(hashlib.sha1(key + ws_load.GUID).digest())
    protocol.data_received(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )
    assert protocol.opened.done() and protocol.opened.exception() is None
    protocol.start(float("inf"))
    return protocol, transport, stats


def run(test: Any) -> None:
    async def body() -> None:
        test()

    asyncio.run(body())


def test_requests_are_masked_sendmessage_frames_sent_in_one_write() -> None:
    """The first window leaves in one write: masked text frames, each a SendMessage with its own id."""

    def test() -> None:
        _, transport, _ = opened(depth=4)
        frames = client_frames(transport.writes[1])
        assert [opcode for opcode, _ in frames] == [1, 1, 1, 1]
        requests = [json.loads(payload) for _, payload in frames]
        assert [r["id"] for r in requests] == [1, 2, 3, 4]
        assert {r["method"] for r in requests} == {"SendMessage"}
        assert requests[0]["params"]["message"]["messageId"] == "bench-t-1"
        assert requests[0]["params"]["message"]["parts"] == [{"text": ws_load.TEXT}]

    run(test)


def test_each_answer_refills_its_slot_at_once() -> None:
    """Answers read together (in any order, one fragmented, a ping between) each refill their slot as they are read."""

    def test() -> None:
        protocol, transport, stats = opened(depth=4)
        whole = answer(2)
        fragmented = bytes((0x01, 10)) + whole[:10] + bytes((0x80, 126)) + struct.pack("!H", len(whole) - 10) + whole[10:]
        data = text_frame(answer(3)) + bytes((0x89, 2)) + b"hi" + fragmented
        protocol.data_received(data)
        assert stats.requests == 2 and stats.bad == 0
        refill, pong, refill_again = transport.writes[2:]
        assert [json.loads(p)["id"] for _, p in client_frames(refill)] == [5]
        assert client_frames(pong) == [(0xA, b"hi")]
        assert [json.loads(p)["id"] for _, p in client_frames(refill_again)] == [6]
        assert sorted(protocol.pending) == [1, 4, 5, 6]

    run(test)


def test_wrong_answers_are_counted_bad() -> None:
    """An error, a task in another state, an unknown id and a binary frame are each bad."""

    def test() -> None:
        protocol, _, stats = opened(depth=4)
        error = json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x"}}).encode()
        protocol.data_received(
            text_frame(error)
            + text_frame(answer(2, "TASK_STATE_WORKING"))
            + text_frame(answer(99))
            + bytes((0x82, 2))
            + b"{}"
        )
        assert stats.bad == 4
        assert stats.requests == 2  # the error and the other state were answers to requests

    run(test)


def test_refused_upgrade_fails_the_connection() -> None:
    """An upgrade answered with anything but 101 and the right accept fails the connection."""

    def test() -> None:
        stats = ws_load.Stats()
        protocol = ws_load.LoadProtocol("127.0.0.1:8080", "/a2a/ws", b"t", 1, stats)
        transport = Transport()
        protocol.connection_made(transport)
        protocol.data_received(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        assert isinstance(protocol.opened.exception(), ws_load.LoadError)
        assert transport.aborted

    run(test)


def test_masking_is_what_the_binding_unmasks() -> None:
    """masked() with any key gives back the payload through the binding's _unmask, for every length encoding."""
    for size in (0, 1, 125, 126, 65535, 65536):
        payload = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
        frame = ws_load.masked(0x1, payload, b"\x9a\x01\xff\x33")
        assert client_frames(frame) == [(0x1, payload)]


def test_refusal_kind() -> None:
    """--expect-error: the error with that code is right; a Task was admitted; anything else is wrong."""
    refused = json.dumps({"jsonrpc": "2.0", "id": 7, "error": {
        "code": -31429, "message": "rate limited", "data": [{"reason": "RATE_LIMITED"}]}}).encode()
    other = json.dumps({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "invalid"}}).encode()
    task = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"task": {
        "id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}}}}).encode()
    assert ws_load.refusal_kind(refused, -31429) == "refused"
    assert ws_load.refusal_kind(other, -31429) == "bad"
    assert ws_load.refusal_kind(task, -31429) == "admitted"
    assert ws_load.refusal_kind(b'{"id": 7, "result": {}}', -31429) == "bad"
