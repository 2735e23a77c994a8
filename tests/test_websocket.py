"""
The A2A WebSocket binding (seed 001), section by section, through a raw
RFC 6455 client written from the seed alone and connected to Beacon over
Twisted's in-memory transports (C{twisted.test.iosim}, what autobahn's
memory agent uses) on one injected L{Clock}: the binding mounted in a
L{BeaconSite} at C{/a2a/ws} and on a listener of its own. One behaviour
suite runs over this binding and the HTTP JSON-RPC binding; wss runs over a
real loopback TLS socket with a certificate made in the test, and the
C{websockets} client from PyPI speaks to a real Beacon process.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import ssl
import struct
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from hypothesis import given, settings
from hypothesis import strategies as st
from treq.testing import StubTreq
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from zope.interface import implementer
from zope.interface.verify import verifyObject

from beacon.bindings._auth import SubmitterAuth, credential_digest
from beacon.bindings.http import BeaconSite, TransportLimits, public_resources
from beacon.bindings.limits import RateLimiter, SourceResolver
from beacon.bindings.websocket import (
    BEACON_DOMAIN,
    DEFAULT_MAX_MESSAGE,
    STREAM_COMPLETE,
    WEBSOCKET_BINDING,
    WebSocketA2AProtocol,
    WebSocketFactory,
    WebSocketOptions,
    WebSocketResource,
    WebSocketService,
    service_parameters,
    websocket_url,
)
from beacon.bindings._edge import field_lines
from beacon.bindings._ws_frames import AutobahnFrames, IFrameIO, PlainFrames, unmask
from beacon.bindings._ws_parameters import upgrade_lines
from beacon.config import build_config
from beacon.intake import CardText, PublicPolicy, schema_validator
from beacon.protocol import (
    Dispatcher,
    EventStream,
    IA2AHandler,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from beacon.service import beacon_resources, makeService
from beacon.testing import MemoryStore

_sync = SynchronousTestCase()
CAP = 65536
KEY = "dGhlIHNhbXBsZSBub25jZQ=="
VERSION = [("A2A-Version", "1.0")]
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


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



# A client written from seed 001 and RFC 6455 alone.


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
        while len(self.buffer) >= 2:
            length = self.buffer[1] & 0x7F
            offset = 2
            if length == 126:
                if len(self.buffer) < 4:
                    return
                (length,) = struct.unpack("!H", self.buffer[2:4])
                offset = 4
            elif length == 127:
                if len(self.buffer) < 10:
                    return
                (length,) = struct.unpack("!Q", self.buffer[2:10])
                offset = 10
            if len(self.buffer) < offset + length:
                return
            self.frames.append((self.buffer[0] & 0x0F, self.buffer[offset : offset + length]))
            self.buffer = self.buffer[offset + length :]

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
    ) -> None:
        self.clock = Clock()
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
        return Connection(client, pump, server_transport)

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


# One behaviour suite over both bindings: every method answers the same.


class HTTPDoor:
    """The JSON-RPC binding, through StubTreq over the same resources."""

    door = "jsonrpc"

    def __init__(self, server: Server) -> None:
        self.server = server

    def rpc(self, request: Any, version: str | None = "1.0") -> dict[str, Any] | None:
        """POST one request; None for a 204 (a notification)."""
        headers = {"Content-Type": "application/json"}
        if version is not None:
            headers["A2A-Version"] = version
        response = _sync.successResultOf(
            self.server.treq.post(
                "http://beacon.example/a2a/v1", data=json.dumps(request).encode(), headers=headers
            )
        )
        body = _sync.successResultOf(response.content())
        if response.code == 204:
            return None
        assert response.code == 200
        answer: dict[str, Any] = json.loads(body)
        return answer


class WebSocketDoor:
    """The WebSocket binding, one connection per A2A-Version value."""

    door = "websocket"

    def __init__(self, server: Server) -> None:
        self.server = server
        self.connections: dict[str | None, Connection] = {}

    def rpc(self, request: Any, version: str | None = "1.0") -> dict[str, Any] | None:
        """Send one request frame; None when no frame answers it."""
        if version not in self.connections:
            headers = [] if version is None else [("A2A-Version", version)]
            self.connections[version] = self.server.open(headers)
        connection = self.connections[version]
        connection.send(request)
        answers = connection.responses()
        assert len(answers) <= 1, answers
        return answers[0] if answers else None


@pytest.fixture(params=["http", "websocket"])
def door(request: pytest.FixtureRequest) -> HTTPDoor | WebSocketDoor:
    """Each binding in turn, over a public policy and a MemoryStore."""
    server = Server()
    return HTTPDoor(server) if request.param == "http" else WebSocketDoor(server)


def _reasons(answer: dict[str, Any]) -> tuple[int, list[str]]:
    error = answer["error"]
    return error["code"], [d.get("reason", d["@type"]) for d in error["data"]]


BAD_PARAMS = "type.googleapis.com/google.rpc.BadRequest"

#: Requests that fail, with the code and detail reasons both bindings answer.
REFUSALS: list[tuple[str, Any, tuple[int, list[str]]]] = [
    ("unknown task", get("nope"), (-32001, ["TASK_NOT_FOUND"])),
    ("cancel", call("CancelTask", {"id": "nope"}), (-32001, ["TASK_NOT_FOUND"])),
    ("streaming", stream_request("s"), (-32004, ["UNSUPPORTED_OPERATION"])),
    ("subscribe", call("SubscribeToTask", {"id": "t"}), (-32004, ["UNSUPPORTED_OPERATION"])),
    (
        "push config",
        call("CreateTaskPushNotificationConfig", {"taskId": "t", "url": "https://x.example/h"}),
        (-32003, ["PUSH_NOTIFICATION_NOT_SUPPORTED"]),
    ),
    (
        "list push configs",
        call("ListTaskPushNotificationConfigs", {"taskId": "t"}),
        (-32003, ["PUSH_NOTIFICATION_NOT_SUPPORTED"]),
    ),
    ("extended card", call("GetExtendedAgentCard", {}), (-32007, ["EXTENDED_AGENT_CARD_NOT_CONFIGURED"])),
    ("v0.3 name", call("message/send", {}), (-32601, ["METHOD_NOT_FOUND"])),
    ("unknown method", call("Nope", {}), (-32601, ["METHOD_NOT_FOUND"])),
    ("bad params", call("SendMessage", {"message": {}}), (-32602, ["INVALID_PARAMS", BAD_PARAMS])),
    ("bad envelope", {"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, (-32600, ["INVALID_REQUEST"])),
    ("batch", [get("a")], (-32600, ["INVALID_REQUEST"])),
]


@pytest.mark.parametrize("name, request_, expected", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_are_the_same_on_both_bindings(
    door: HTTPDoor | WebSocketDoor, name: str, request_: Any, expected: tuple[int, list[str]]
) -> None:
    """Each refused request gets the same JSON-RPC error code and typed details on either binding."""
    answer = door.rpc(request_)
    assert answer is not None
    assert _reasons(answer) == expected


def test_send_then_get_on_both_bindings(door: HTTPDoor | WebSocketDoor) -> None:
    """SendMessage stores a submission (recorded with its door) and GetTask then shows its status only."""
    sent = door.rpc(send_message("behaviour"))
    assert sent is not None
    task = sent["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert set(task["metadata"]["receipt"]) == {"id", "receivedAt", "sha256"}
    assert door.server.store.submissions[task["id"]].door == door.door
    got = door.rpc(get(task["id"], "g"))
    assert got == {
        "jsonrpc": "2.0",
        "id": "g",
        "result": {"id": task["id"], "contextId": task["contextId"], "status": task["status"]},
    }


def test_list_tasks_is_empty_on_both_bindings(door: HTTPDoor | WebSocketDoor) -> None:
    """ListTasks is an empty page on either binding, even after a submission."""
    door.rpc(send_message())
    answer = door.rpc(call("ListTasks", {}))
    assert answer is not None
    assert answer["result"]["tasks"] == []


@pytest.mark.parametrize("version", [None, "0.3", "2.0"])
def test_version_refusal_on_both_bindings(door: HTTPDoor | WebSocketDoor, version: str | None) -> None:
    """Without A2A-Version 1.0 every method is -32009 on either binding, and nothing is stored."""
    answer = door.rpc(send_message(), version)
    assert answer is not None
    assert _reasons(answer) == (-32009, ["VERSION_NOT_SUPPORTED"])
    assert door.server.store.submissions == {}


def test_notification_on_both_bindings(door: HTTPDoor | WebSocketDoor) -> None:
    """A notification is run and not answered on either binding."""
    request = send_message()
    del request["id"]
    assert door.rpc(request) is None
    assert len(door.server.store.submissions) == 1


def test_both_bindings_answer_identically() -> None:
    """Over one store, every request of the suite gets the same answer from both bindings (ids and times aside)."""
    server = Server()
    http_door, ws_door = HTTPDoor(server), WebSocketDoor(server)
    sent = http_door.rpc(send_message())
    assert sent is not None
    task_id = sent["result"]["task"]["id"]
    requests = [r for _, r, _ in REFUSALS] + [get(task_id), call("ListTasks", {})]
    for request in requests:
        assert http_door.rpc(request) == ws_door.rpc(request), request


# §1 Connection.


def test_upgrade_selects_no_subprotocol(server: Server) -> None:
    """The upgrade answers 101 and selects no subprotocol, even when the client offers one."""
    connection = server.open(VERSION + [("Sec-WebSocket-Protocol", "a2a, jsonrpc")])
    assert connection.client.status == 101
    assert "sec-websocket-protocol" not in connection.client.headers
    assert connection.rpc(send_message())["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_not_an_upgrade_is_refused_with_the_json_body(server: Server) -> None:
    """A plain GET is refused with 400 and the HTTP+JSON error body (code = status, FAILED_PRECONDITION, ErrorInfo)."""
    connection = server.connect()
    where = "/a2a/ws" if server.mounted else "/"
    connection.write(f"GET {where} HTTP/1.1\r\nHost: beacon.example\r\n\r\n".encode())
    assert connection.client.status == 400
    assert connection.client.headers["content-type"] == ["application/json"]
    error = connection.client.refusal()["error"]
    assert error["code"] == 400
    assert error["status"] == "FAILED_PRECONDITION"
    assert error["message"]
    assert error["details"] == [
        {"@type": ERROR_INFO, "reason": "INVALID_UPGRADE", "domain": BEACON_DOMAIN}
    ]
    assert connection.transport.disconnecting


def test_unsupported_websocket_version_is_426(server: Server) -> None:
    """A Sec-WebSocket-Version other than 13 is refused 426 naming version 13, with the §1 body."""
    connection = server.open(version="8")
    assert connection.client.status == 426
    assert connection.client.headers["sec-websocket-version"] == ["13"]
    error = connection.client.refusal()["error"]
    assert (error["code"], error["status"]) == (426, "FAILED_PRECONDITION")
    assert error["details"][0]["reason"] == "UNSUPPORTED_WEBSOCKET_VERSION"


def test_refusal_does_not_echo_the_request() -> None:
    """A refused upgrade's status line and body quote nothing the client sent."""
    server = Server(mounted=False)
    connection = server.connect()
    connection.write(
        upgrade_request("/", VERSION).replace(KEY.encode(), b"secret-looking-key-123==")
    )
    assert connection.client.status == 400
    assert b"secret" not in connection.client.body
    assert all("secret" not in v for vs in connection.client.headers.values() for v in vs)


def test_origin_refusal_is_403_without_details() -> None:
    """An Origin not in allowed_origins is refused 403 PERMISSION_DENIED with no details."""
    server = Server(options=WebSocketOptions(allowed_origins=("https://app.example",)))
    connection = server.open(VERSION + [("Origin", "https://evil.example")])
    assert connection.client.status == 403
    assert connection.client.refusal() == {
        "error": {
            "code": 403,
            "status": "PERMISSION_DENIED",
            "message": "Connections from this origin are not allowed",
        }
    }


@pytest.mark.parametrize("origin", ["https://app.example", "HTTPS://APP.Example"])
def test_allowed_origin_compared_whole_ignoring_ascii_case(origin: str) -> None:
    """An allowed origin is accepted in any ASCII case; a longer one is not."""
    server = Server(options=WebSocketOptions(allowed_origins=("https://app.example",)))
    assert server.open(VERSION + [("Origin", origin)]).client.status == 101
    longer = server.open(VERSION + [("Origin", "https://app.example.evil")])
    assert longer.client.status == 403


def test_no_origin_is_accepted_unless_required() -> None:
    """An upgrade without Origin (a non-browser client) is accepted, unless require_origin is set."""
    allowed = WebSocketOptions(allowed_origins=("https://app.example",))
    assert Server(options=allowed).open().client.status == 101
    required = Server(options=WebSocketOptions(require_origin=True))
    assert required.open().client.status == 403
    assert required.open(VERSION + [("Origin", "https://any.example")]).client.status == 101


def test_any_origin_by_default() -> None:
    """With no allowed_origins, any Origin may connect."""
    assert Server().open(VERSION + [("Origin", "https://any.example")]).client.status == 101


def test_max_connections() -> None:
    """Over max_connections an upgrade is refused 503; a closed connection frees its place."""
    server = Server(options=WebSocketOptions(max_connections=1))
    first = server.open()
    assert first.client.status == 101
    second = server.open()
    assert second.client.status == 503
    assert second.client.refusal()["error"]["status"] == "UNAVAILABLE"
    first.write(frame(0x8, struct.pack("!H", 1000)))
    assert server.factory.open_connections == 0
    assert server.open().client.status == 101


def test_handshake_timeout_on_the_clock() -> None:
    """A peer that does not finish the upgrade within handshake_timeout is dropped, on the injected clock."""
    server = Server(mounted=False, options=WebSocketOptions(handshake_timeout=5))
    connection = server.connect()
    connection.write(b"GET / HTTP/1.1\r\nHost: beacon.example\r\n")
    server.clock.advance(4.9)
    assert not connection.transport.disconnecting
    server.clock.advance(0.2)
    connection.pump.flush()
    assert connection.transport.disconnecting
    assert server.clock.getDelayedCalls() == []


@pytest.mark.parametrize("method", [b"POST", b"HEAD"])
def test_other_methods_are_refused_at_the_mount(method: bytes) -> None:
    """At /a2a/ws a request that is not a GET is refused 400 with the §1 body (none for HEAD)."""
    server = Server()
    response = _sync.successResultOf(
        server.treq.request(method.decode(), "http://beacon.example/a2a/ws")
    )
    body = _sync.successResultOf(response.content())
    assert response.code == 400
    if method == b"HEAD":
        assert body == b""
    else:
        assert json.loads(body)["error"]["status"] == "FAILED_PRECONDITION"


def test_below_the_mount_is_404() -> None:
    """A path below /a2a/ws is not the binding: 404."""
    response = _sync.successResultOf(Server().treq.get("http://beacon.example/a2a/ws/more"))
    assert response.code == 404


def test_oversized_upgrade_head_is_refused() -> None:
    """An upgrade head that grows past 16 KiB without ending is refused, not buffered."""
    server = Server(mounted=False)
    connection = server.connect()
    connection.write(b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 20_000)
    assert connection.client.status == 400


# §2 Service parameters.


def test_header_folding_and_non_ascii_drop(server: Server) -> None:
    """Names are lower-cased, repeated lines joined (", ", "; " for Cookie), non-visible-ASCII lines and Last-Event-ID dropped, and :source added."""
    connection = server.open(
        [
            ("A2A-Version", "1.0"),
            ("X-Multi", "one"),
            ("X-Multi", "two"),
            ("X-Name", "caf\u00e9".encode("utf-8")),
            ("X-Name", "plain"),
            ("X-Only-Utf8", "\u00fcber".encode("utf-8")),
            ("Cookie", "a=1"),
            ("Cookie", "b=2"),
            ("Last-Event-ID", "42"),
            ("X-Tab", "a\tb"),
        ]
    )
    assert connection.client.status == 101
    parameters = connection.server.parameters
    assert parameters["x-multi"] == "one, two"
    assert parameters["x-name"] == "plain"
    assert "x-only-utf8" not in parameters
    assert parameters["cookie"] == "a=1; b=2"
    assert parameters["x-tab"] == "a\tb"
    assert "last-event-id" not in parameters
    assert parameters[":source"] == "127.0.0.1"
    assert all(name == name.lower() for name in parameters)


def test_service_parameters_reserved_names_cannot_be_sent() -> None:
    """A header line whose name is not a token (such as one starting with a colon) is not a parameter."""
    head = b"GET / HTTP/1.1\r\n:source: forged\r\nX A: 2\r\nX-A: 1\r\n\r\n"
    assert service_parameters(upgrade_lines(head), {}) == {"x-a": "1"}


PLAIN_BLOCK = b"Host: beacon.example\r\nX-A:  one two \t\r\nX-A:\r\nX-B: caf\xc3\xa9\r\n"


def test_field_lines_of_a_plain_block() -> None:
    """A block of plain lines reads the same strictly and leniently: names as sent, values without the blanks around them."""
    expected = [(b"Host", b"beacon.example"), (b"X-A", b"one two"), (b"X-A", b""), (b"X-B", b"caf\xc3\xa9")]
    assert field_lines(PLAIN_BLOCK, strict=True) == field_lines(PLAIN_BLOCK) == expected
    assert field_lines(b"", strict=True) == []


@pytest.mark.parametrize(
    "block, lenient",
    [
        (b"X-A: 1\r\n folded\r\n", [(b"X-A", b"1 folded")]),
        (b"X-A: 1\nX-B: 2\n", [(b"X-A", b"1"), (b"X-B", b"2")]),
        (b"X A: 1\r\n:x: 2\r\nno colon\r\nX-B: 3\r\n", [(b"X-B", b"3")]),
        (b"X-A: a\x01b\r\n", [(b"X-A", b"a\x01b")]),
        (b"\tleading fold\r\nX-A: 1\r\n", [(b"X-A", b"1")]),
    ],
    ids=["obs-fold", "bare LF", "not name: value", "control character", "fold without a line"],
)
def test_field_lines_of_an_irregular_block(block: bytes, lenient: list[tuple[bytes, bytes]]) -> None:
    """The direct channel reads no irregular block (it hands it over); the upgrade reads it leniently."""
    assert field_lines(block, strict=True) is None
    assert field_lines(block) == lenient


def test_version_from_the_query(server: Server) -> None:
    """Without the header, A2A-Version comes from the upgrade URL's query."""
    where = "/a2a/ws" if server.mounted else "/"
    connection = server.open([], path=where + "?A2A-Version=1.0")
    assert "result" in connection.rpc(send_message())


def test_version_header_wins_over_query(server: Server) -> None:
    """When both are present the header decides: 0.3 in the header is refused with -32009."""
    where = "/a2a/ws" if server.mounted else "/"
    connection = server.open([("A2A-Version", "0.3")], path=where + "?A2A-Version=1.0")
    assert connection.rpc(send_message())["error"]["code"] == -32009


def test_no_other_query_fallback(server: Server) -> None:
    """Only A2A-Version has a query fallback; A2A-Extensions in the query is ignored."""
    where = "/a2a/ws" if server.mounted else "/"
    connection = server.open(VERSION, path=where + "?A2A-Extensions=urn:x")
    assert "a2a-extensions" not in connection.server.parameters


def test_missing_version_answers_every_request_with_32009(server: Server) -> None:
    """Without a version, each request is answered -32009, and the connection stays usable."""
    connection = server.open([])
    for request_id in (1, 2):
        error = connection.rpc(send_message(request_id=request_id))["error"]
        assert error["code"] == -32009
        assert error["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert server.store.submissions == {}


def test_parameters_are_captured_once(server: Server) -> None:
    """Every request on the connection sees the upgrade's parameters: the stored source is the caller."""
    connection = server.open()
    task_id = connection.rpc(send_message())["result"]["task"]["id"]
    stored = server.store.submissions[task_id]
    assert (stored.door, stored.source) == ("websocket", "127.0.0.1")


# §3 Messages.


def test_binary_frame_is_32700_with_null_id(server: Server) -> None:
    """A binary frame is answered -32700 with "id": null."""
    connection = server.open()
    connection.write(frame(0x2, json.dumps(send_message()).encode()))
    [answer] = connection.responses()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32700
    assert server.store.submissions == {}


def test_batch_is_32600(server: Server) -> None:
    """An array (a JSON-RPC batch) is answered -32600."""
    connection = server.open()
    answer = connection.rpc([send_message()])
    assert answer["id"] is None
    assert answer["error"]["code"] == -32600


def test_v03_names_are_32601(server: Server) -> None:
    """The v0.3 method names are answered -32601, as over HTTP."""
    connection = server.open()
    assert connection.rpc(call("message/send", {}, "x"))["error"]["code"] == -32601


def test_bad_json_is_32700(server: Server) -> None:
    """A text frame that is not strict JSON is -32700."""
    connection = server.open()
    assert connection.rpc('{"jsonrpc": "2.0", "id": 1,')["error"]["code"] == -32700


def test_fragmented_message_is_one_request(server: Server) -> None:
    """A message sent in several frames is read as the one request it is."""
    connection = server.open()
    payload = json.dumps(send_message()).encode()
    connection.write(frame(0x1, payload[:10], fin=False) + frame(0x0, payload[10:]))
    [answer] = connection.responses()
    assert "result" in answer


def test_notification_is_run_and_never_answered(server: Server) -> None:
    """A notification (no id) is run, and no frame answers it, success or error."""
    connection = server.open()
    request = send_message()
    del request["id"]
    connection.send(request)
    connection.send(call("GetTask", {"id": "nope"}, ...))
    assert connection.responses() == []
    assert len(server.store.submissions) == 1


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


def test_sixty_fifth_request_is_refused() -> None:
    """With 64 requests in progress the 65th is refused -32603 with its id; it is not run."""
    handler = HeldHandler()
    server = Server(handler)
    connection = server.open()
    for n in range(64):
        connection.send(get(f"t{n}"))
    assert connection.responses() == []
    answer = connection.rpc(get("t64"))
    assert answer["id"] == "t64"
    assert answer["error"]["code"] == -32603
    assert answer["error"]["data"] == [
        {"@type": ERROR_INFO, "reason": "IN_FLIGHT_LIMIT", "domain": BEACON_DOMAIN}
    ]
    assert handler.calls.count("get_task") == 64
    handler.release("t3")
    assert [a["id"] for a in connection.responses()] == ["t3"]
    connection.send(get("t65"))
    assert connection.responses() == []
    assert handler.calls.count("get_task") == 65


def test_notification_at_the_cap_is_refused_with_null_id() -> None:
    """A notification read while 64 requests are in progress is not run and is refused -32603 with a null id."""
    handler = HeldHandler()
    server = Server(handler)
    connection = server.open()
    for n in range(64):
        connection.send(get(f"t{n}"))
    connection.send(call("SendMessage", send_message()["params"], ...))
    [answer] = connection.responses()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32603
    assert "send_message" not in handler.calls


def test_answers_in_any_order_correlated_by_id() -> None:
    """Answers come as their requests finish, each with its own id."""
    handler = HeldHandler()
    connection = Server(handler).open()
    for name in ("a", "b", "c"):
        connection.send(get(name))
    for name in ("c", "a", "b"):
        handler.release(name)
    assert [a["id"] for a in connection.responses()] == ["c", "a", "b"]


def test_streaming_method_as_notification_is_not_run() -> None:
    """SendStreamingMessage and SubscribeToTask sent as notifications are not run and not answered."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(stream_request("s", ...))
    connection.send(call("SubscribeToTask", {"id": "t"}, ...))
    assert connection.responses() == []
    assert handler.calls == []
    assert connection.server._in_flight == 0


# §4 Streaming.


def test_streams_interleave_and_end_with_the_marker() -> None:
    """Events of two streams interleave on one connection, in order within each, and each ends with stream_complete."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(stream_request("one", 1))
    connection.send(stream_request("two", 2))
    one, two = handler.streams["one"], handler.streams["two"]
    for n in range(3):
        one.send(status_event(n))
        two.send(status_event(10 + n))
    one.close()
    two.send(status_event(13))
    two.close()
    frames = connection.responses()
    assert [(f["id"], f["result"]) for f in frames] == [
        (1, status_event(0)),
        (2, status_event(10)),
        (1, status_event(1)),
        (2, status_event(11)),
        (1, status_event(2)),
        (2, status_event(12)),
        (1, STREAM_COMPLETE),
        (2, status_event(13)),
        (2, STREAM_COMPLETE),
    ]
    assert frames[6] == {"jsonrpc": "2.0", "id": 1, "result": {"status": "stream_complete"}}
    assert connection.server._in_flight == 0


def test_failing_stream_ends_with_an_error_and_no_marker() -> None:
    """A stream that fails ends with an error frame for its id, keeping its code and details, and no marker."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(call("SubscribeToTask", {"id": "t"}, 7))
    stream = handler.streams["t"]
    stream.send(status_event(1))
    stream.fail(TaskNotFoundError())
    frames = connection.responses()
    assert frames[0]["result"] == status_event(1)
    assert frames[1]["id"] == 7
    assert frames[1]["error"]["code"] == -32001
    assert frames[1]["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"
    assert len(frames) == 2


def test_stream_counts_as_in_progress_until_it_ends() -> None:
    """A stream holds its place under max_in_flight until it ends."""
    handler = HeldHandler()
    connection = Server(handler, options=WebSocketOptions(max_in_flight=2)).open()
    connection.send(stream_request("one"))
    connection.send(stream_request("two"))
    assert connection.rpc(get("x"))["error"]["code"] == -32603
    handler.streams["one"].close()
    assert connection.responses()[0]["result"] == STREAM_COMPLETE
    connection.send(get("y"))
    assert connection.responses() == []
    assert "y" in handler.held


def test_slow_consumer_is_ended_with_an_error_frame() -> None:
    """A stream whose peer stops reading is held up to stream_queue frames, then ended with STREAM_LAGGED; other streams go on."""
    handler = HeldHandler()
    server = Server(handler, options=WebSocketOptions(stream_queue=3))
    connection = server.open()
    connection.send(stream_request("slow", 1))
    stream = handler.streams["slow"]
    cancelled: list[bool] = []
    stream.on_cancel(lambda: cancelled.append(True))
    connection.server.pauseProducing()  # What the transport does when full.
    for n in range(5):
        stream.send(status_event(n))
    assert cancelled == [True]
    assert connection.responses() == []
    connection.server.resumeProducing()
    frames = connection.responses()
    assert [f.get("result") for f in frames[:3]] == [status_event(n) for n in range(3)]
    lagged = frames[3]
    assert lagged["id"] == 1
    assert lagged["error"]["code"] == -32603
    assert lagged["error"]["data"] == [
        {
            "@type": ERROR_INFO,
            "reason": "STREAM_LAGGED",
            "domain": BEACON_DOMAIN,
            "metadata": {"streamLagged": "true"},
        }
    ]
    assert len(frames) == 4
    assert connection.server._in_flight == 0
    assert "result" in connection.rpc(send_message())


def test_held_frames_are_sent_in_order_when_the_transport_drains() -> None:
    """Answers held while the transport is full are sent, in order, once it drains."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(get("a"))
    connection.send(stream_request("s", "s"))
    connection.server.pauseProducing()
    handler.release("a")
    handler.streams["s"].send(status_event(0))
    handler.streams["s"].close()
    assert connection.responses() == []
    connection.server.resumeProducing()
    assert [(f["id"], "result" in f) for f in connection.responses()] == [
        ("a", True),
        ("s", True),
        ("s", True),
    ]


def test_closing_the_connection_cancels_its_streams() -> None:
    """When the peer goes, its streams are cancelled and its slot freed."""
    handler = HeldHandler()
    server = Server(handler)
    connection = server.open()
    connection.send(stream_request("s"))
    cancelled: list[bool] = []
    handler.streams["s"].on_cancel(lambda: cancelled.append(True))
    connection.pump.clientIO.loseConnection()
    connection.pump.flush()
    assert cancelled == [True]
    assert server.factory.open_connections == 0


def test_answer_after_the_peer_left_is_dropped() -> None:
    """A request that finishes after its connection closed is not written anywhere."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(get("a"))
    connection.send(stream_request("late-stream"))
    connection.pump.clientIO.loseConnection()
    connection.pump.flush()
    handler.release("a")
    assert connection.responses() == []


# Beacon's own limits per frame.


def test_frame_over_max_body_is_31413_and_the_connection_stays() -> None:
    """A frame over [limits] max_body is answered -31413 TOO_LARGE with its id; the connection stays open."""
    server = Server(max_body=1024)
    connection = server.open()
    answer = connection.rpc(send_message("x" * 2000, request_id="big"))
    assert answer["id"] == "big"
    assert answer["error"]["code"] == -31413
    assert answer["error"]["data"] == [
        {
            "@type": ERROR_INFO,
            "reason": "TOO_LARGE",
            "domain": BEACON_DOMAIN,
            "metadata": {"limit": "1024"},
        }
    ]
    assert "result" in connection.rpc(send_message("small"))


def test_message_over_4_mib_ends_the_connection(server: Server) -> None:
    """A message of exactly 4 MiB is answered -31413; one byte more ends the connection (close 1009)."""
    connection = server.open()
    request = json.dumps(send_message("", request_id="x")).encode()
    padded = request[:-1] + b" " * (4 * 1024 * 1024 - len(request)) + b"}"
    assert len(padded) == 4 * 1024 * 1024
    connection.write(frame(0x1, padded))
    [answer] = connection.responses()
    assert answer["error"]["code"] == -31413
    assert answer["id"] == "x"
    connection.write(frame(0x1, padded + b" "))
    assert connection.closes() == [1009]
    # The peer does not answer the close: it is dropped after autobahn's
    # close handshake timeout, on the injected clock.
    server.clock.advance(1)
    assert connection.transport.disconnecting


def test_every_frame_counts_against_the_rate() -> None:
    """The upgrade and every frame draw on the source's bucket; over it: -31429 with RATE_LIMITED and RetryInfo."""
    server = Server(rate=1.0, burst=3)
    connection = server.open()
    assert "result" in connection.rpc(send_message(request_id=1))
    assert "result" in connection.rpc(send_message(request_id=2))
    answer = connection.rpc(send_message(request_id=3))
    assert answer["id"] == 3
    assert answer["error"]["code"] == -31429
    assert answer["error"]["data"] == [
        {"@type": ERROR_INFO, "reason": "RATE_LIMITED", "domain": BEACON_DOMAIN},
        {"@type": RETRY_INFO, "retryDelay": "1s"},
    ]
    connection.write(frame(0x2, b"\x00"))
    assert connection.responses()[0]["error"]["code"] == -31429
    server.clock.advance(1)
    assert "result" in connection.rpc(send_message(request_id=4))
    assert len(server.store.submissions) == 3


def test_rate_is_shared_with_http() -> None:
    """A source's HTTP requests and WebSocket frames draw on one bucket."""
    server = Server(rate=1.0, burst=2)
    response = _sync.successResultOf(
        server.treq.post(
            "http://beacon.example/a2a/v1",
            data=json.dumps(send_message()).encode(),
            headers={"A2A-Version": "1.0", "Content-Type": "application/json"},
        )
    )
    assert response.code == 200
    connection = server.open()
    assert connection.client.status == 101
    assert connection.rpc(send_message())["error"]["code"] == -31429


def test_refused_upgrade_for_rate_is_429() -> None:
    """An upgrade over the source's rate is refused 429 with Retry-After and the §1 body with RetryInfo."""
    server = Server(rate=0.5, burst=1)
    assert server.open().client.status == 101
    refused = server.open()
    assert refused.client.status == 429
    assert refused.client.headers["retry-after"] == ["2"]
    error = refused.client.refusal()["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert error["details"] == [
        {"@type": ERROR_INFO, "reason": "RATE_LIMITED", "domain": BEACON_DOMAIN},
        {"@type": RETRY_INFO, "retryDelay": "2s"},
    ]


# §5 Errors.


def test_bad_params_carry_bad_request_details(server: Server) -> None:
    """Params that do not parse are -32602 with ErrorInfo then BadRequest field violations."""
    connection = server.open()
    error = connection.rpc(call("SendMessage", {"message": {"role": "ROLE_USER"}}, 1))["error"]
    assert error["code"] == -32602
    types = [detail["@type"] for detail in error["data"]]
    assert types == [ERROR_INFO, "type.googleapis.com/google.rpc.BadRequest"]


# §6 Authentication.

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


def test_unauthenticated_frame_is_exactly_as_section_6() -> None:
    """Without a credential every request is answered -32600 with the a2a-rust.com UNAUTHENTICATED ErrorInfo and the challenge."""
    server = auth_server()
    connection = server.open()
    assert connection.client.status == 101
    for request_id in ("1", "2"):
        assert connection.rpc(send_message(request_id=request_id)) == {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {
                "code": -32600,
                "message": "authentication required",
                "data": [
                    {
                        "@type": ERROR_INFO,
                        "reason": "UNAUTHENTICATED",
                        "domain": "a2a-rust.com",
                        "metadata": {
                            "www-authenticate": 'Bearer realm="beacon", ApiKey realm="beacon", header="X-API-Key"'
                        },
                    }
                ],
            },
        }
    assert server.store.submissions == {}


@pytest.mark.parametrize(
    "credential",
    [("Authorization", "Bearer " + TOKEN), ("Authorization", "bearer " + TOKEN), ("X-API-Key", API_KEY)],
)
def test_credentials_of_the_upgrade_are_checked_on_every_request(credential: tuple[str, str]) -> None:
    """A bearer token (any scheme case) or API key in the upgrade admits every request on the connection."""
    connection = auth_server().open(VERSION + [credential])
    assert "result" in connection.rpc(send_message(request_id=1))
    assert "result" in connection.rpc(send_message(request_id=2))


def test_wrong_credential_is_unauthenticated() -> None:
    """A credential that matches no digest is refused like a missing one."""
    connection = auth_server().open(VERSION + [("Authorization", "Bearer wrong")])
    assert connection.rpc(send_message())["error"]["data"][0]["reason"] == "UNAUTHENTICATED"


def test_unauthenticated_notification_is_not_run() -> None:
    """A notification without a credential is not run; its refusal carries a null id."""
    server = auth_server()
    connection = server.open()
    request = send_message()
    del request["id"]
    answer = connection.rpc(request)
    assert answer["id"] is None
    assert server.store.submissions == {}


def test_logs_carry_no_credentials_or_content(logged_events: Any) -> None:
    """What the binding logs names events and sources, never a credential or submitted text."""
    server = auth_server(rate=1, burst=2)
    connection = server.open(VERSION + [("Authorization", "Bearer " + TOKEN)])
    connection.rpc(send_message("very private words"))
    connection.rpc(send_message("more private words"))
    connection.write(frame(0x8, struct.pack("!H", 1000)))
    formatted = [json.dumps(e, default=repr) for e in logged_events.events]
    assert not any(TOKEN in text or "private words" in text for text in formatted)
    names = [str(e.get("log_format", "")).split(":")[0] for e in logged_events.named("ws.")]
    assert names == ["ws.connected", "ws.rate_limited", "ws.closed"]


# §7 Security: timers, idle, stop.


def test_idle_timeout_on_the_clock() -> None:
    """With idle_timeout, a connection without frames is closed; a frame or a request in progress keeps it."""
    handler = HeldHandler()
    server = Server(handler, options=WebSocketOptions(idle_timeout=30))
    connection = server.open()
    server.clock.advance(29)
    connection.send(get("a"))
    server.clock.advance(29)
    assert connection.closes() == []
    server.clock.advance(60)
    assert connection.closes() == []  # GetTask is still in progress.
    handler.release("a")
    server.clock.advance(30)
    connection.pump.flush()
    assert connection.closes() == [1000]


def test_no_timer_outlives_a_closed_connection() -> None:
    """Once a connection has closed no delayed call of it remains on the clock."""
    server = Server(mounted=False, options=WebSocketOptions(idle_timeout=30))
    connection = server.open()
    connection.write(frame(0x8, struct.pack("!H", 1000)))
    connection.pump.flush()
    assert connection.transport.disconnecting
    server.clock.advance(5)
    assert server.clock.getDelayedCalls() == []


def test_service_closes_connections_on_stop() -> None:
    """Stopping the WebSocketService closes every open connection with 1001 (going away)."""
    server = Server()
    service = WebSocketService(server.factory)
    service.startService()
    connection = server.open()
    service.stopService()
    connection.pump.flush()
    assert connection.closes() == [1001]


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made now."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path = tmp_path / "cert.pem"
    key_path = tmp_path / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_tls_handshake_is_bounded_by_the_handshake_timeout(tmp_path: Path) -> None:
    """On a TLS listener a peer that never completes the TLS handshake is dropped after handshake_timeout, on the clock."""
    from twisted.internet.ssl import DefaultOpenSSLContextFactory
    from twisted.protocols.tls import TLSMemoryBIOFactory

    cert_path, key_path = _certificate(tmp_path)
    options = DefaultOpenSSLContextFactory(str(key_path), str(cert_path))
    server = Server(mounted=False, options=WebSocketOptions(handshake_timeout=3))
    tls = TLSMemoryBIOFactory(options, False, server.factory)
    address = IPv4Address("TCP", "127.0.0.1", 1)
    protocol = tls.buildProtocol(address)
    transport = iosim.FakeTransport(protocol, True, address, address)
    protocol.makeConnection(transport)
    server.clock.advance(2.9)
    assert not transport.disconnecting
    server.clock.advance(0.2)
    assert transport.disconnecting or transport.disconnected


@pytest_twisted.ensureDeferred
async def test_wss_on_an_ssl_endpoint(tmp_path: Path) -> None:
    """On an ssl: endpoint the binding is wss://: a client trusting the test's self-signed certificate calls SendMessage."""
    from twisted.internet import reactor, threads
    from twisted.internet.endpoints import serverFromString

    from websockets.sync.client import connect

    cert_path, key_path = _certificate(tmp_path)
    store = MemoryStore()
    limits = TransportLimits(CAP, RateLimiter(0, 1, reactor), SourceResolver())
    factory = WebSocketFactory(
        Dispatcher(PublicPolicy(store, reactor, schema_validator())),
        limits,
        reactor,
        WebSocketOptions(handshake_timeout=10),
    )
    endpoint = serverFromString(
        reactor, f"ssl:0:interface=127.0.0.1:privateKey={key_path}:certKey={cert_path}"
    )
    port = await endpoint.listen(factory)
    try:
        url = f"wss://127.0.0.1:{port.getHost().port}/"
        context = ssl.create_default_context(cafile=str(cert_path))

        def exchange() -> dict[str, Any]:
            with connect(
                url, ssl=context, additional_headers={"A2A-Version": "1.0"}, open_timeout=10
            ) as ws:
                ws.send(json.dumps(send_message("over tls")))
                answer: dict[str, Any] = json.loads(ws.recv(timeout=10))
                return answer

        answer = await threads.deferToThread(exchange)
    finally:
        await port.stopListening()
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert len(store.submissions) == 1


# The card and the wiring.


def test_websocket_url() -> None:
    """http becomes ws and https wss."""
    assert websocket_url("http://127.0.0.1:8080") == "ws://127.0.0.1:8080"
    assert websocket_url("https://beacon.example/base") == "wss://beacon.example/base"


def test_card_lists_the_binding_after_jsonrpc(tmp_path: Path) -> None:
    """The public card lists the WebSocket interface after JSONRPC, wss:// for an https public URL."""
    config = build_config(data_dir=str(tmp_path), public_url="https://beacon.example")
    resources = beacon_resources(config, MemoryStore(), Clock())
    card = json.loads(resources.a2a.card.body)
    assert card["supportedInterfaces"] == [
        {"url": "https://beacon.example/a2a/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {
            "url": "wss://beacon.example/a2a/ws",
            "protocolBinding": WEBSOCKET_BINDING,
            "protocolVersion": "1.0",
        },
    ]
    assert "securitySchemes" not in card


def test_make_service_mounts_and_listens(tmp_path: Path) -> None:
    """makeService serves /a2a/ws on the HTTP listeners and the binding's factory on each --ws listener."""
    reactor = MemoryReactorClock()
    config = build_config(
        data_dir=str(tmp_path / "data"),
        http=["tcp:8080:interface=127.0.0.1"],
        ws=["tcp:8090:interface=127.0.0.1"],
        public_url="http://beacon.example",
        operator_socket="",
    )
    root = makeService(config, reactor)
    services = list(root)
    for service in services[1:]:
        service.privilegedStartService()
    servers = {port: factory for port, factory, _, _ in reactor.tcpServers}
    assert isinstance(servers[8090], WebSocketFactory)
    site = servers[8080]
    assert isinstance(site.resource.children[b"a2a"].children[b"ws"], WebSocketResource)
    assert site.resource.children[b"a2a"].children[b"ws"]._factory is servers[8090]
    ws_service = [s for s in services if isinstance(s, WebSocketService)]
    assert len(ws_service) == 1
    for service in services[1:]:
        service.stopService()


def test_config_reads_websocket_and_auth() -> None:
    """[websocket] and [auth] are read and checked; --ws overrides listen."""
    digest = hashlib.sha256(b"t").hexdigest()
    config = build_config(
        {
            "websocket": {
                "listen": ["tcp:9000"],
                "allowed_origins": ["https://app.example"],
                "require_origin": True,
                "max_message": 8192,
                "max_in_flight": 8,
                "handshake_timeout": 2,
                "max_connections": 10,
                "max_connections_per_source": 3,
                "idle_timeout": 60,
            },
            "auth": {"bearer_tokens": [digest.upper()]},
        }
    )
    assert config.ws == ("tcp:9000",)
    assert config.websocket == WebSocketOptions(
        allowed_origins=("https://app.example",),
        require_origin=True,
        max_message=8192,
        max_in_flight=8,
        handshake_timeout=2.0,
        max_connections=10,
        max_connections_per_source=3,
        idle_timeout=60.0,
    )
    assert config.auth.bearer_tokens == (digest,)
    assert build_config({"websocket": {"listen": ["tcp:9000"]}}, ws=["tcp:9001"]).ws == ("tcp:9001",)


@pytest.mark.parametrize(
    "section",
    [
        {"websocket": {"allowed_origins": ["https://app.example/path"]}},
        {"websocket": {"allowed_origins": "https://app.example"}},
        {"websocket": {"require_origin": "yes"}},
        {"websocket": {"max_message": 10}},
        {"websocket": {"max_in_flight": 0}},
        {"websocket": {"handshake_timeout": 0}},
        {"websocket": {"max_connections": -1}},
        {"websocket": {"max_connections_per_source": -1}},
        {"websocket": {"max_connections_per_source": 1.5}},
        {"websocket": {"idle_timeout": -1}},
        {"websocket": {"subprotocol": "x"}},
        {"auth": {"bearer_tokens": ["the-token-itself"]}},
        {"auth": {"api_keys": "x"}},
    ],
)
def test_config_refuses_bad_websocket_and_auth_values(section: dict[str, Any]) -> None:
    """Bad [websocket] and [auth] values are ConfigErrors."""
    from beacon.config import ConfigError

    with pytest.raises(ConfigError):
        build_config(section)


# Interop: a WebSocket client that is not ours, against a real Beacon.


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Any]:
    """Starts Beacons in C{tmp_path}; stops every one afterwards."""
    from peers.process import BeaconLauncher

    launcher = BeaconLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def test_websockets_client_interop(launcher: Any) -> None:
    """The websockets client from PyPI speaks raw frames to a twistd Beacon: at /a2a/ws and on a --ws listener."""
    from websockets.exceptions import ConnectionClosedError
    from websockets.sync.client import connect

    beacon = launcher.start("--ws", "tcp:0:interface=127.0.0.1")
    listener = beacon.process.wait_for(r"ws\.serving: the WebSocket binding at (\S+)", 10.0).group(1)
    with urllib.request.urlopen(beacon.public_url + "/.well-known/agent-card.json", timeout=10) as got:
        card = json.loads(got.read())
    mounted = card["supportedInterfaces"][1]["url"]
    assert mounted == beacon.public_url.replace("http://", "ws://") + "/a2a/ws"
    for url in (mounted + "?A2A-Version=1.0", listener):
        with connect(url, additional_headers={"A2A-Version": "1.0"}, open_timeout=10) as ws:
            ws.send(json.dumps(send_message("interop", request_id="s")))
            sent = json.loads(ws.recv(timeout=10))
            task_id = sent["result"]["task"]["id"]
            ws.send(json.dumps(get(task_id, "g")))
            ws.send(json.dumps(call("SendStreamingMessage", send_message()["params"], "st")))
            answers = {a["id"]: a for a in (json.loads(ws.recv(timeout=10)) for _ in range(2))}
            assert answers["g"]["result"]["status"]["state"] == "TASK_STATE_SUBMITTED"
            assert answers["st"]["error"]["code"] == -32004
            ws.send(b"\x01\x02")
            assert json.loads(ws.recv(timeout=10))["error"]["code"] == -32700
            ws.ping()
    with connect(listener, additional_headers={"A2A-Version": "1.0"}, open_timeout=10) as ws:
        ws.send("x" * (4 * 1024 * 1024 + 1))
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009



def test_upgraded_connections_leave_the_http_count() -> None:
    """A connection upgraded at /a2a/ws stops counting against the HTTP listener's caps, and its close frees no second place."""
    server = Server()
    server.site.max_connections_per_source = 1
    first = server.open()
    assert first.client.status == 101
    assert server.site.open_connections == 0
    second = server.open()
    assert second.client.status == 101
    first.write(frame(0x8, struct.pack("!H", 1000)))
    assert server.site.open_connections == 0
    assert server.factory.open_connections == 1


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
