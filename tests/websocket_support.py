"""
What the WebSocket binding's tests share: a raw RFC 6455 client written
from the binding's specification alone
(https://a2a-rust.com/bindings/websocket/v1), connected to Beacon over
Twisted's in-memory transports (C{twisted.test.iosim}, what autobahn's
memory agent uses) on one injected L{Clock}, with the binding mounted in a L{BeaconSite} at
C{/a2a/ws} or on a listener of its own; the requests they send; a policy
whose answers and streams the test drives.

Its fixtures, imported by each test module: L{frame_path} runs every test
twice, with the binding's plain-frame shortcut on (as Beacon runs) and off
(autobahn reads and writes every frame); L{close_servers} closes what each
test opened, as its peers would, so that the clock check of conftest.py
sees what Beacon leaves after a close.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from treq.testing import StubTreq
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from zope.interface import implementer

from beacon.bindings.admission._auth import SubmitterAuth, credential_digest
from beacon.bindings.http import BeaconSite, TransportLimits, public_resources
from beacon.bindings.admission import RateLimiter, SourceResolver
from beacon.bindings.websocket import (
    WebSocketA2AProtocol,
    WebSocketFactory,
    WebSocketOptions,
    WebSocketResource,
)
from beacon.intake import PublicPolicy, schema_validator
from beacon.protocol import Dispatcher, EventStream, IA2AHandler, UnsupportedOperationError
from beacon.testing import MemoryStore

_sync = SynchronousTestCase()
CAP = 65536
KEY = "dGhlIHNhbXBsZSBub25jZQ=="
VERSION = [("A2A-Version", "1.0")]
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
TOKEN = "s3cret-submitter-token"
API_KEY = "an-api-key"


def auth_server(**kw: Any) -> Server:
    """A Server that requires a bearer token or an API key."""
    return Server(
        auth=SubmitterAuth(
            bearer_tokens=(credential_digest(TOKEN),), api_keys=(credential_digest(API_KEY),)
        ),
        **kw,
    )


def send_message(text: str = "hello", request_id: Any = 1) -> dict[str, Any]:
    """A SendMessage request carrying one text part."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]}
        },
    }


def call(method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    """A JSON-RPC request (a notification when C{request_id} is ...)."""
    request: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if request_id is not ...:
        request["id"] = request_id
    if params is not None:
        request["params"] = params
    return request


def get(task_id: str, request_id: Any = None) -> dict[str, Any]:
    """A GetTask request (its id is the task id unless given)."""
    return call("GetTask", {"id": task_id}, task_id if request_id is None else request_id)


def stream_request(name: str, request_id: Any = None) -> dict[str, Any]:
    """A SendStreamingMessage whose messageId names the stream."""
    return call(
        "SendStreamingMessage",
        {"message": {"messageId": name, "role": "ROLE_USER", "parts": [{"text": "s"}]}},
        name if request_id is None else request_id,
    )



# A client written from the binding's specification and RFC 6455 alone.


def upgrade_request(
    path: str = "/a2a/ws",
    headers: Sequence[tuple[str, str | bytes]] | None = None,
    *,
    version: str = "13",
) -> bytes:
    """The bytes of an RFC 6455 upgrade request with C{headers} added."""
    lines = [
        f"GET {path} HTTP/1.1".encode(),
        b"Host: beacon.example",
        b"Upgrade: websocket",
        b"Connection: Upgrade",
        f"Sec-WebSocket-Key: {KEY}".encode(),
        f"Sec-WebSocket-Version: {version}".encode(),
    ]
    for name, value in VERSION if headers is None else headers:
        raw = value if isinstance(value, bytes) else value.encode("ascii")
        lines.append(name.encode("ascii") + b": " + raw)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """One masked client frame (the mask key is zero, which RFC 6455 allows)."""
    head = bytes([(0x80 if fin else 0) | opcode])
    length = len(payload)
    if length < 126:
        head += bytes([0x80 | length])
    elif length < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", length)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", length)
    return head + b"\x00\x00\x00\x00" + payload



def server_frames(buffer: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """
    The whole unmasked frames at the front of C{buffer}, as C{(opcode,
    payload)}, and the bytes after them (a frame still arriving).
    """
    frames: list[tuple[int, bytes]] = []
    while len(buffer) >= 2:
        length = buffer[1] & 0x7F
        offset = 2
        if length == 126:
            if len(buffer) < 4:
                break
            (length,) = struct.unpack("!H", buffer[2:4])
            offset = 4
        elif length == 127:
            if len(buffer) < 10:
                break
            (length,) = struct.unpack("!Q", buffer[2:10])
            offset = 10
        if len(buffer) < offset + length:
            break
        frames.append((buffer[0] & 0x0F, buffer[offset : offset + length]))
        buffer = buffer[offset + length :]
    return frames, buffer

class RawClient(Protocol):
    """
    Reads the upgrade's answer, then the server's frames.

    @ivar status: The upgrade answer's status, once read.
    @ivar headers: Its header lines, names lower-cased.
    @ivar body: The body of a refused upgrade.
    @ivar frames: C{(opcode, payload)} of every frame received.
    """

    def __init__(self) -> None:
        self.buffer = b""
        self.status: int | None = None
        self.headers: dict[str, list[str]] = {}
        self.body = b""
        self.frames: list[tuple[int, bytes]] = []
        self.lost = False

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.lost = True

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        if self.status is None:
            head, found, rest = self.buffer.partition(b"\r\n\r\n")
            if not found:
                return
            status_line, *lines = head.decode("latin-1").split("\r\n")
            self.status = int(status_line.split()[1])
            for line in lines:
                name, _, value = line.partition(":")
                self.headers.setdefault(name.strip().lower(), []).append(value.strip())
            self.buffer = rest
        if self.status != 101:
            self.body += self.buffer
            self.buffer = b""
            return
        frames, self.buffer = server_frames(self.buffer)
        self.frames.extend(frames)

    def refusal(self) -> dict[str, Any]:
        """The JSON body of a refused upgrade."""
        assert self.status != 101
        decoded: dict[str, Any] = json.loads(self.body)
        return decoded


class Connection:
    """One client connection pumped in memory."""

    def __init__(self, client: RawClient, pump: iosim.IOPump, transport: iosim.FakeTransport) -> None:
        self.client = client
        self.pump = pump
        self.transport = transport
        self.read = 0

    @property
    def server(self) -> WebSocketA2AProtocol:
        """The server side's WebSocket protocol (after the takeover, if mounted)."""
        protocol = self.pump.serverIO.protocol
        assert isinstance(protocol, WebSocketA2AProtocol)
        return protocol

    def write(self, data: bytes) -> None:
        """Send raw bytes and pump."""
        self.pump.clientIO.write(data)
        self.pump.flush()

    def send(self, message: Any) -> None:
        """Send one text frame: a JSON value, or text as it is."""
        text = message if isinstance(message, (str, bytes)) else json.dumps(message)
        payload = text.encode("utf-8") if isinstance(text, str) else text
        self.write(frame(0x1, payload))

    def responses(self) -> list[dict[str, Any]]:
        """The text frames received since the last call, decoded."""
        self.pump.flush()
        frames = self.client.frames[self.read :]
        self.read = len(self.client.frames)
        return [json.loads(payload) for opcode, payload in frames if opcode == 0x1]

    def rpc(self, message: Any) -> dict[str, Any]:
        """Send one request and return the one answer it got."""
        self.send(message)
        answers = self.responses()
        assert len(answers) == 1, answers
        return answers[0]

    def closes(self) -> list[int]:
        """The close codes the server sent."""
        self.pump.flush()
        return [struct.unpack("!H", p[:2])[0] for op, p in self.client.frames if op == 0x8 and p]


class Server:
    """
    A Beacon WebSocket binding over a MemoryStore on a Clock: mounted in a
    BeaconSite at /a2a/ws, or as a listener of its own.
    """

    def __init__(
        self,
        handler: Any = None,
        *,
        mounted: bool = True,
        options: WebSocketOptions = WebSocketOptions(),
        rate: float = 0.0,
        burst: int = 1,
        max_body: int = CAP,
        auth: SubmitterAuth = SubmitterAuth(),
        direct: bool | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.clock = clock if clock is not None else Clock()
        self.clock.advance(1_800_000_000)
        self.store = MemoryStore()
        self.handler = handler or PublicPolicy(self.store, self.clock, schema_validator())
        self.limits = TransportLimits(
            max_body=max_body,
            rate=RateLimiter(rate, burst, self.clock),
            sources=SourceResolver(),
            auth=auth,
        )
        self.dispatcher = Dispatcher(self.handler)
        self.factory = WebSocketFactory(
            self.dispatcher, self.limits, self.clock, options, direct=direct
        )
        self.factory.doStart()
        self.mounted = mounted
        resources = public_resources(self.dispatcher, self.limits)
        root = resources.mount(Resource())
        root.children[b"a2a"].putChild(b"ws", WebSocketResource(self.factory))
        self.site = BeaconSite(root, max_body=max_body, clock=self.clock)
        self.treq = StubTreq(root)
        self._port = 40000
        self.connections: list[Connection] = []
        self.closing: list[Callable[[], object]] = []
        SERVERS.append(self)

    def connect(self, peer: str = "127.0.0.1") -> Connection:
        """Open a TCP-like connection, without sending anything."""
        self._port += 1
        client = RawClient()
        host = IPv4Address("TCP", "127.0.0.1", 8080)
        address = IPv4Address("TCP", peer, self._port)
        protocol = (self.site if self.mounted else self.factory).buildProtocol(address)
        server_transport = iosim.FakeTransport(protocol, True, host, address)
        client_transport = iosim.FakeTransport(client, False, address, host)
        pump = iosim.connect(
            protocol, server_transport, client, client_transport, greet=False, clock=self.clock
        )
        connection = Connection(client, pump, server_transport)
        self.connections.append(connection)
        return connection

    def open(
        self,
        headers: Sequence[tuple[str, str | bytes]] | None = None,
        *,
        path: str | None = None,
        version: str = "13",
        peer: str = "127.0.0.1",
    ) -> Connection:
        """Connect and send the upgrade request."""
        connection = self.connect(peer)
        where = path if path is not None else ("/a2a/ws" if self.mounted else "/")
        connection.write(upgrade_request(where, headers, version=version))
        return connection

    def close(self) -> None:
        """
        Every connection the test opened goes, as its peer would leave
        (those it made itself through L{closing}), and the factory stops
        (its log summary with it).
        """
        for connection in self.connections:
            connection.pump.clientIO.loseConnection()
            connection.pump.flush()
        for close in self.closing:
            close()
        self.factory.doStop()


#: The servers made during the test that runs now.
def opened_on(server: Server, transport: Any, peer: str = "192.0.2.9") -> Any:
    """
    A connection of the binding's own listener from C{peer}, over
    C{transport} (a StringTransport), upgraded; closed when the test ends.
    """
    protocol = server.factory.buildProtocol(IPv4Address("TCP", peer, 40000))
    protocol.makeConnection(transport)
    server.closing.append(lambda: protocol.connectionLost(Failure(ConnectionDone())))
    protocol.dataReceived(upgrade_request("/", VERSION))
    assert transport.value().startswith(b"HTTP/1.1 101")
    transport.clear()
    return protocol


SERVERS: list[Server] = []


@pytest.fixture(autouse=True)
def close_servers() -> Iterator[None]:
    """At the end of each test, close every L{Server} it made (see L{Server.close})."""
    SERVERS.clear()
    yield
    while SERVERS:
        SERVERS.pop().close()


FRAME_PATHS = ("plain frames", "autobahn frames")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """
    Every test runs twice (see L{frame_path}); a Hypothesis test, which
    draws its own examples and cannot run twice under pytest-twisted, runs
    once, as Beacon runs.
    """
    if "frame_path" in metafunc.fixturenames and not hasattr(metafunc.function, "hypothesis"):
        metafunc.parametrize("frame_path", FRAME_PATHS, indirect=True)


@pytest.fixture(autouse=True)
def frame_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """
    The binding reading and writing plain frames itself (as Beacon runs),
    or autobahn reading and writing every frame (the shortcut's off
    switch): every test runs both ways.
    """
    path: str = getattr(request, "param", FRAME_PATHS[0])
    monkeypatch.setattr(WebSocketFactory, "direct_default", path == FRAME_PATHS[0])
    return path


@pytest.fixture(params=["mounted", "listener"])
def server(request: pytest.FixtureRequest) -> Server:
    """The binding mounted in the Site, and on a listener of its own."""
    return Server(mounted=request.param == "mounted")


@implementer(IA2AHandler)
class HeldHandler:
    """
    A policy whose GetTask answers only when the test says, and whose
    streaming methods answer with streams the test drives.
    """

    def __init__(self) -> None:
        self.held: dict[str, Deferred[Any]] = {}
        self.streams: dict[str, EventStream] = {}
        self.calls: list[str] = []

    def get_task(self, context: Any, request: Any) -> Deferred[Any]:
        self.calls.append("get_task")
        d: Deferred[Any] = Deferred()
        self.held[request.id] = d
        return d

    def send_streaming_message(self, context: Any, request: Any) -> EventStream:
        self.calls.append("send_streaming_message")
        stream = EventStream()
        self.streams[request.message.message_id] = stream
        return stream

    def subscribe_to_task(self, context: Any, request: Any) -> EventStream:
        self.calls.append("subscribe_to_task")
        stream = EventStream()
        self.streams[request.id] = stream
        return stream

    def send_message(self, context: Any, request: Any) -> Any:
        self.calls.append("send_message")
        return {"message": {"messageId": "r", "role": "ROLE_AGENT", "parts": [{"text": "ok"}]}}

    def __getattr__(self, name: str) -> Any:
        def refused(context: Any, request: Any) -> Any:
            raise UnsupportedOperationError()

        return refused

    def release(self, task_id: str) -> None:
        """Answer the held GetTask for C{task_id}."""
        self.held.pop(task_id).callback({"id": task_id, "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}})


def status_event(n: int) -> dict[str, Any]:
    """One StreamResponse."""
    return {"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}, "metadata": {"n": n}}}


def wss_send(
    port: int, context: ssl.SSLContext, text: bytes, *, path: str = "/a2a/ws", timeout: float = 60.0
) -> tuple[int, bytes]:
    """
    Upgrade a new TLS connection to C{path}, send C{text} as one text
    frame, read the first text frame back, then close (RFC 6455). Each
    socket operation is bounded by C{timeout}, a safety net.

    One thread owns the SSL socket: websockets' threaded client reads in a
    thread of its own while the caller writes, and an SSL object used from
    two threads at once (TLS 1.3: the server's session tickets are read
    while the upgrade is written) can lose what was written, so that the
    upgrade is never answered. websockets' protocol without I/O
    (C{ClientProtocol}) does the framing here.

    @return: The upgrade's status and the first text frame's payload.
    """
    from websockets.client import ClientProtocol
    from websockets.frames import Frame, Opcode
    from websockets.http11 import Response
    from websockets.uri import parse_uri

    protocol = ClientProtocol(parse_uri(f"wss://127.0.0.1:{port}{path}"))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:

            def flush() -> None:
                for data in protocol.data_to_send():
                    if data:
                        sock.sendall(data)

            def receive() -> Response | Frame | None:
                """The next event; None once the server has closed."""
                while True:
                    events = protocol.events_received()
                    if events:
                        assert len(events) == 1, events
                        event = events[0]
                        assert isinstance(event, (Response, Frame)), event
                        return event
                    data = sock.recv(65536)
                    if not data:
                        protocol.receive_eof()
                        return None
                    protocol.receive_data(data)

            request = protocol.connect()
            request.headers["A2A-Version"] = "1.0"
            protocol.send_request(request)
            flush()
            response = receive()
            assert isinstance(response, Response), response
            assert protocol.handshake_exc is None, protocol.handshake_exc
            protocol.send_text(text)
            flush()
            frame = receive()
            assert isinstance(frame, Frame) and frame.opcode is Opcode.TEXT, frame
            # The closing handshake: the server answers close and ends TCP.
            protocol.send_close(1000)
            flush()
            while (closing := receive()) is not None:
                assert isinstance(closing, Frame) and closing.opcode is Opcode.CLOSE, closing
    return response.status_code, bytes(frame.data)
