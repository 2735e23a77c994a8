"""
A raw HTTP/2 client for the protocol-level tests of the gRPC door
(C{tests/test_h2*.py}): frames and header blocks built byte by byte (HPACK
literals without indexing, no Huffman, so that the client keeps no state),
and the server's bytes parsed back into frames, its header blocks decoded
with Beacon's own L{Decoder}.

L{Door} builds a L{GRPCServer} in process over a L{MemoryStore}, on one
L{Clock} that is both its reactor and its clock; L{Connection} is one
connection to it on a L{StringTransport}: what the client sends goes to
C{dataReceived}, what the server wrote is read off the transport, and a
transport the server closed is told so (C{connectionLost}), as a reactor
would.
"""

from __future__ import annotations

import base64
import ipaddress
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple
from urllib.parse import unquote_to_bytes

import pytest
from google.rpc import status_pb2
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from beacon.bindings.admission import RateLimiter, SourceResolver
from beacon.bindings.grpc import EXPIRY_INTERVAL, GRPCCalls, GRPCServer
from beacon.bindings.grpc import _h2 as h2
from beacon.bindings.grpc._h2 import frame
from beacon.bindings.grpc._hpack import Decoder, literal
from beacon.bindings.http import SubmitterAuth, TransportLimits
from beacon.intake import PublicPolicy, schema_validator
from beacon.proto import a2a_pb2
from beacon.protocol import Dispatcher, TaskNotFoundError
from beacon.testing import MemoryStore

PEER = IPv4Address("TCP", "127.0.0.1", 40000)
HOST = IPv4Address("TCP", "127.0.0.1", 50051)
SERVICE = "/lf.a2a.v1.A2AService/"
MAX_RECEIVE = 4096

# Frame types, flags and error codes (RFC 9113), as the tests name them.
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED = 0x0, 0x1, 0x3, 0x5
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x6, 0x7, 0x8, 0x9
ENHANCE_YOUR_CALM = 0xB
SETTINGS_INITIAL_WINDOW_SIZE = 0x4

# gRPC status codes.
OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 2, 3, 4, 5
RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 8, 12, 13


def block(fields: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(literal(name, value) for name, value in fields)


def list_size(fields: list[tuple[bytes, bytes]]) -> int:
    """A header list's size as SETTINGS_MAX_HEADER_LIST_SIZE counts it."""
    return sum(len(name) + len(value) + 32 for name, value in fields)


def request_fields(
    method: str = "SendMessage",
    *,
    http_method: bytes = b"POST",
    content_type: bytes = b"application/grpc",
    path: bytes | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> list[tuple[bytes, bytes]]:
    """A gRPC call's request headers, as a client sends them."""
    return [
        (b":method", http_method),
        (b":scheme", b"http"),
        (b":path", path if path is not None else (SERVICE + method).encode()),
        (b":authority", b"127.0.0.1:50051"),
        (b"content-type", content_type),
        (b"te", b"trailers"),
        (b"a2a-version", b"1.0"),
        *(extra or []),
    ]


def headers(stream: int, fields: list[tuple[bytes, bytes]] | None = None, end: bool = False) -> bytes:
    """A HEADERS frame holding a whole block (C{end}: END_STREAM too)."""
    flags = END_HEADERS | (END_STREAM if end else 0)
    return frame(HEADERS, flags, stream, block(fields if fields is not None else request_fields()))


def grpc_message(message: bytes, compressed: bool = False) -> bytes:
    """A message as gRPC frames it: its flag, its length, its bytes."""
    return bytes((int(compressed),)) + len(message).to_bytes(4, "big") + message


def data(stream: int, payload: bytes, end: bool = True) -> bytes:
    """DATA frames carrying C{payload} (split at 16 KiB), the last one ending the stream."""
    pieces = [payload[i : i + h2.MAX_FRAME] for i in range(0, len(payload), h2.MAX_FRAME)] or [b""]
    return b"".join(
        frame(DATA, END_STREAM if end and i == len(pieces) - 1 else 0, stream, piece)
        for i, piece in enumerate(pieces)
    )


def send_request(text: str = "hello over raw HTTP/2", message_id: str = "m-1") -> bytes:
    request = a2a_pb2.SendMessageRequest()
    request.message.message_id = message_id
    request.message.role = a2a_pb2.ROLE_USER
    request.message.parts.add().text = text
    return request.SerializeToString()


def sized_send_request(size: int) -> bytes:
    """A SendMessageRequest of exactly C{size} bytes (its text padded)."""
    text = "x" * size
    while len(message := send_request(text)) > size:
        text = text[: len(text) - (len(message) - size)]
    assert len(message) == size, (len(message), size)
    return message


def call(stream: int, method: str = "SendMessage", message: bytes | None = None, **options: Any) -> bytes:
    """One whole unary call: its HEADERS, then its one message ending the stream."""
    if message is None:
        message = send_request(message_id=f"m-{stream}")
    return headers(stream, request_fields(method, **options)) + data(stream, grpc_message(message))


def settings(*pairs: tuple[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HL", key, value) for key, value in pairs))


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, struct.pack(">L", increment))


def ping(opaque: bytes = b"01234567", ack: bool = False) -> bytes:
    return frame(PING, ACK if ack else 0, 0, opaque)


class Frame(NamedTuple):
    """One frame the server sent; C{fields}: a header block decoded."""

    kind: int
    flags: int
    stream: int
    payload: bytes
    fields: list[tuple[bytes, bytes]] | None = None

    @property
    def code(self) -> int:
        """An RST_STREAM's or a GOAWAY's error code."""
        if self.kind == GOAWAY:
            return int.from_bytes(self.payload[4:8], "big")
        assert self.kind == RST_STREAM, self
        return int.from_bytes(self.payload, "big")

    @property
    def last_stream(self) -> int:
        assert self.kind == GOAWAY, self
        return int.from_bytes(self.payload[:4], "big") & 0x7FFFFFFF

    @property
    def debug(self) -> bytes:
        assert self.kind == GOAWAY, self
        return self.payload[8:]

    def header(self, name: bytes) -> bytes | None:
        assert self.fields is not None, self
        values = [value for key, value in self.fields if key == name]
        return values[0] if values else None


class Answer(NamedTuple):
    """What one stream received: its header blocks, DATA, and its end."""

    blocks: list[list[tuple[bytes, bytes]]]
    data: bytes
    reset: int | None
    ended: bool

    def field(self, name: bytes) -> bytes | None:
        """A field of any of its header blocks (headers or trailers)."""
        for fields in self.blocks:
            for key, value in fields:
                if key == name:
                    return value
        return None

    @property
    def status(self) -> int | None:
        """Its grpc-status."""
        value = self.field(b"grpc-status")
        return None if value is None else int(value)

    @property
    def message(self) -> str:
        """Its grpc-message, percent-decoded."""
        return unquote_to_bytes(self.field(b"grpc-message") or b"").decode("utf-8")

    @property
    def details(self) -> status_pb2.Status:
        raw = self.field(b"grpc-status-details-bin")
        assert raw is not None, self
        return status_pb2.Status.FromString(base64.b64decode(raw + b"=" * (-len(raw) % 4)))

    def messages(self) -> list[bytes]:
        """The gRPC messages of its DATA."""
        out, position = [], 0
        while position < len(self.data):
            length = int.from_bytes(self.data[position + 1 : position + 5], "big")
            out.append(self.data[position + 5 : position + 5 + length])
            position += 5 + length
        return out


class Connection:
    """One client connection to a L{Door}, in memory."""

    def __init__(self, door: "Door", peer: IPv4Address = PEER) -> None:
        self.door = door
        self.protocol = door.server.factory.buildProtocol(peer)
        self.transport = StringTransport(peerAddress=peer, hostAddress=HOST)
        self.lost = False
        self._read = 0
        self._decoder = Decoder()
        self._pending: tuple[int, int, bytearray] | None = None
        #: Every frame read so far, in order.
        self.received: list[Frame] = []
        door.connections.append(self)
        self.protocol.makeConnection(self.transport)
        self.settle()

    def settle(self) -> None:
        """A transport the server closed is lost, as a reactor would tell it."""
        if self.transport.disconnecting and not self.lost:
            self.lost = True
            self.protocol.connectionLost(Failure(ConnectionDone()))

    def send(self, data: bytes, turns: bool = True) -> list[Frame]:
        """
        Send C{data} in one read, and (C{turns}) let the connection's later
        turns run (C{clock.advance(0)}); the frames the server wrote meanwhile.
        """
        if not self.lost:
            self.protocol.dataReceived(data)
        if turns:
            self.door.clock.advance(0)
        self.settle()
        return self.frames()

    def open(self, *pairs: tuple[int, int]) -> list[Frame]:
        """The client's preface and SETTINGS; the server's SETTINGS, window and ACK."""
        got = self.send(h2.PREFACE + settings(*pairs))
        assert [(f.kind, f.flags) for f in got] == [(SETTINGS, 0), (WINDOW_UPDATE, 0), (SETTINGS, ACK)], got
        return got

    def frames(self) -> list[Frame]:
        """The frames the server has written since the last look."""
        value = self.transport.value()
        out = []
        while len(value) - self._read >= 9:
            head = value[self._read : self._read + 9]
            length = int.from_bytes(head[:3], "big")
            end = self._read + 9 + length
            if end > len(value):
                break
            kind, flags = head[3], head[4]
            stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
            payload = value[self._read + 9 : end]
            self._read = end
            if kind in (HEADERS, CONTINUATION):
                if kind == HEADERS:
                    self._pending = (stream, flags, bytearray(payload))
                else:
                    assert self._pending is not None and self._pending[0] == stream
                    self._pending[2].extend(payload)
                if not flags & END_HEADERS:
                    continue
                assert self._pending is not None
                stream, flags, whole = self._pending
                self._pending = None
                out.append(Frame(HEADERS, flags | END_HEADERS, stream, bytes(whole), self._decoder.decode(bytes(whole))))
            else:
                out.append(Frame(kind, flags, stream, payload))
        self.received.extend(out)
        return out

    def answer(self, stream: int, frames: list[Frame] | None = None) -> Answer:
        """What C{stream} got in C{frames} (by default, all so far)."""
        self.frames()
        blocks, body, reset, ended = [], b"", None, False
        for f in self.received if frames is None else frames:
            if f.stream != stream:
                continue
            if f.kind == HEADERS:
                assert f.fields is not None
                blocks.append(f.fields)
            elif f.kind == DATA:
                body += f.payload
            elif f.kind == RST_STREAM:
                reset = f.code
            ended = ended or bool(f.kind in (HEADERS, DATA) and f.flags & END_STREAM)
        return Answer(blocks, body, reset, ended)

    def goaway(self, frames: list[Frame] | None = None) -> Frame | None:
        """The GOAWAY among C{frames} (by default, all so far), if any."""
        self.frames()
        found = [f for f in (self.received if frames is None else frames) if f.kind == GOAWAY]
        assert len(found) <= 1, found
        return found[0] if found else None


class HeldPolicy(PublicPolicy):
    """
    The public policy, whose GetTask of an id starting C{held} answers only
    when the test fires its Deferred (in C{held}), and of C{unicode} fails
    with a message that is not ASCII.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.held: list[Deferred[Any]] = []

    def get_task(self, context: Any, request: Any) -> Any:
        if request.id.startswith("held"):
            held: Deferred[Any] = Deferred()
            self.held.append(held)
            return held
        if request.id == "unicode":
            raise TaskNotFoundError("pas de tâche « unicode » (100 % sûr)")
        return super().get_task(context, request)


def get_task(task_id: str) -> bytes:
    return a2a_pb2.GetTaskRequest(id=task_id).SerializeToString()


class Door:
    """
    A L{GRPCServer} in process, started (no listener: its sweep only), over
    the public policy on a L{MemoryStore}, on C{clock}.
    """

    def __init__(self, **options: Any) -> None:
        self.clock = Clock()
        options.setdefault("max_receive", MAX_RECEIVE)
        self.grace = options.setdefault("grace", 5.0)
        self.policy = HeldPolicy(MemoryStore(), self.clock, schema_validator())
        limits = TransportLimits(
            max_body=65536,
            rate=RateLimiter(0, 1, self.clock),
            sources=SourceResolver([ipaddress.ip_network("127.0.0.1/32")]),
            auth=SubmitterAuth(),
        )
        self.calls = GRPCCalls(Dispatcher(self.policy), limits)
        self.server = GRPCServer(self.calls, self.clock, [], clock=self.clock, **options)
        self.server.start()
        self.connections: list[Connection] = []
        self.stopped: Deferred[None] | None = None

    def connect(self, peer: IPv4Address = PEER) -> Connection:
        return Connection(self, peer)

    def advance(self, seconds: float) -> None:
        """Move the clock on (the sweep runs each L{EXPIRY_INTERVAL}), then settle."""
        self.clock.advance(seconds)
        for connection in self.connections:
            connection.settle()

    def sweeps(self, count: int = 1) -> None:
        """Run C{count} sweeps, one interval apart."""
        for _ in range(count):
            self.advance(EXPIRY_INTERVAL)

    def stop(self) -> Deferred[None]:
        self.stopped = self.server.stop()
        for connection in self.connections:
            connection.settle()
        return self.stopped

    def close(self) -> None:
        """Stop the server; once its grace is over every connection is closed."""
        for held in self.policy.held:
            if not held.called:
                held.callback({"id": "held", "status": {"state": "TASK_STATE_SUBMITTED"}})
        stopped = self.stopped or self.stop()
        self.advance(self.grace if not stopped.called else 0)
        for connection in self.connections:
            connection.settle()
        assert stopped.called, [c.protocol.streams for c in self.connections]
        assert all(c.lost for c in self.connections)


@pytest.fixture
def make_door() -> Iterator[Callable[..., Door]]:
    """Doors made by the test, closed at its end (stopped, their grace run out)."""
    doors: list[Door] = []

    def make(**options: Any) -> Door:
        door = Door(**options)
        doors.append(door)
        return door

    yield make
    for door in doors:
        door.close()


@pytest.fixture
def door(make_door: Callable[..., Door]) -> Door:
    """A door with the default options."""
    return make_door()


@pytest.fixture
def conn(door: Door) -> Connection:
    """A connection to C{door}, its preface and SETTINGS sent and answered."""
    connection = door.connect()
    connection.open()
    return connection
