"""
Drivers for the behaviour suite (C{tests/test_behaviour.py}): one per
binding Beacon serves its A2A methods on, each speaking that binding's own
wire format, byte for byte, to a Beacon wired as L{beacon.service.makeService}
wires it, in process (C{twisted.test.iosim}) on one injected L{Clock}.

  - C{jsonrpc}: JSON-RPC over HTTP, C{POST /a2a/v1} on the public
    L{BeaconSite} (the direct channel, or twisted.web with
    C{--http-path=twisted.web});
  - C{websocket}: the WebSocket binding at C{/a2a/ws} on that site;
    C{websocket-listener}: the same factory on a listener of its own
    (C{--ws});
  - C{unix}: the operator socket's HTTP (C{POST /}) behind the
    L{PeerCheckedFactory} that makeService puts on it; the peer's
    credentials are read with C{SO_PEERCRED} from a real (unbound,
    unlistening) socket pair, so the kernel names this process;
  - C{bearer}: the operator's loopback door behind its L{BearerGate}, with
    the door's token;
  - C{rest}, C{rest-unix}, C{rest-bearer}: the HTTP+JSON binding's routes
    under C{/a2a/rest} on the public site and on either operator door.
    Their driver translates each JSON-RPC request into its route (verb,
    path members percent-encoded, the rest as the JSON body or A2A 11.5
    query parameters; any method not of the core is C{POST
    extensions/<name>}) and each answer back into the JSON-RPC response it
    stands for (a google.rpc.Status naming an A2A error into that error,
    with the request's id), checking the binding's framing on the way: 200
    C{application/a2a+json}, or the error's own HTTP status (A2A 5.4) equal
    to the Status's code, with its google.rpc code. A request the binding
    cannot say (no envelope, no notification, no id to echo, a path member
    that is not text) is skipped there: L{Driver.expresses}.
  - C{grpc}: the gRPC binding's calls as makeService wires them, its
    messages and statuses read back into JSON-RPC; its driver is in
    C{tests/grpc_driver.py}. A request gRPC cannot say (bytes, an
    envelope without an id, a method the service lacks, a query
    parameter, params the proto cannot hold) is skipped there.

Every driver takes a JSON-RPC request (an object, or raw bytes) with the
service parameters (C{A2A-Version} as a header or query parameter,
C{A2A-Extensions}, other headers such as credentials) and returns an
L{Answer}: the JSON-RPC response object (None when nothing answers) and the
extensions the binding echoed; a streaming request returns a L{Stream} of
events. The HTTP drivers check the JSON-RPC over HTTP framing on every
answer (200 with a JSON body of its C{Content-Length}, never chunked; 204
and no body for a notification); the WebSocket drivers that a text frame
answers, or nothing does.

The bindings' names, L{Answer}, L{Stream} and L{Driver} are in
C{tests/driver_support.py}, which every driver stands on.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from urllib.parse import quote, urlencode

import pytest
from twisted.internet.address import IPv4Address, UNIXAddress
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase

from beacon.bindings.grpc import GRPCCalls
from beacon.bindings.http import BeaconSite, Container
from beacon.bindings.operator import BearerGate, PeerCheckedFactory, new_token
from beacon.bindings.websocket import STREAM_COMPLETE, WebSocketService
from beacon.config import Config, build_config
from beacon.intake import OperatorPolicy, PublicPolicy, schema_validator
from beacon.protocol import CallContext, Dispatcher, parse_extensions
from beacon.service import beacon_resources, operator_door
from beacon.testing import MemoryStore
from driver_support import (
    A2A_ERRORS,
    ALL_BINDINGS,
    PEER,
    PUBLIC_URL,
    SOCKET_PATH,
    START,
    Answer,
    Driver,
    Headers,
    Stream,
    body_of,
)
from grpc_driver import GRPCDriver
from websocket_support import server_frames

_sync = SynchronousTestCase()


# The world: one Beacon, every door, one clock.


class Connection:
    """One client connection pumped in memory with the server's protocol."""

    def __init__(self, world: World, client: Protocol, pump: iosim.IOPump) -> None:
        self.world = world
        self.client = client
        self.pump = pump

    def write(self, data: bytes) -> None:
        """Send C{data} and pump until nothing moves."""
        self.pump.clientIO.write(data)
        self.flush()

    def flush(self) -> None:
        self.pump.flush()

    @property
    def open(self) -> bool:
        return not self.pump.clientIO.disconnected

    def close(self) -> None:
        """The client drops the connection (no goodbye)."""
        if self.open:
            self.pump.clientIO.loseConnection()
        self.flush()
        if self in self.world.connections:
            self.world.connections.remove(self)


class _UnixServerTransport(iosim.FakeTransport):
    """
    A fake unix stream transport whose handle is one end of a real socket
    pair, so that SO_PEERCRED names this process (as the operator's own
    connection to the socket would).
    """

    handle: socket.socket

    def getHandle(self) -> socket.socket:
        return self.handle


class World:
    """
    One Beacon over a L{MemoryStore} on a L{Clock}, wired as makeService
    wires it: the public site (JSON-RPC and WebSocket, one dispatcher, the
    configuration's limits with the rate limit off), the WebSocket
    factory started by its service, and both operator doors over one
    operator policy.
    """

    def __init__(self, file_values: dict[str, Any] | None = None) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.store = MemoryStore()
        values: dict[str, Any] = {"limits": {"rate": 0}}
        values.update(file_values or {})
        self.config: Config = build_config(values, public_url=PUBLIC_URL)
        site_options = self.config.limits.site_options()
        self.resources = beacon_resources(self.config, self.store, self.clock)
        self.public_site = BeaconSite(
            self.resources.mount(Container()),
            access_log=self.config.access_log,
            direct=self.config.direct,
            clock=self.clock,
            **site_options,
        )
        self.websocket = WebSocketService(self.resources.websocket)
        self.websocket.startService()
        self.operator_policy = OperatorPolicy(self.store, self.clock)
        unix_door = operator_door(self.operator_policy, self.clock)
        self.unix_site = BeaconSite(unix_door.root, clock=self.clock, **site_options)
        self.unix_factory = PeerCheckedFactory(self.unix_site, SOCKET_PATH)
        self.token = new_token()
        bearer_door = operator_door(
            self.operator_policy, self.clock, source=lambda request: "bearer"
        )
        self.bearer_site = BeaconSite(
            BearerGate(bearer_door.root, self.token), clock=self.clock, **site_options
        )
        self.grpc = GRPCCalls(self.resources.websocket.dispatcher, self.resources.websocket.limits)
        #: Seeds the inbox without going through a binding under test.
        self.seeder = Dispatcher(PublicPolicy(self.store, self.clock, schema_validator()))
        self.connections: list[Connection] = []
        self._drivers: dict[str, Driver] = {}
        self._sockets: list[socket.socket] = []
        self._port = 40000

    def connect(self, factory: Any, client: Protocol, *, unix: bool = False) -> Connection:
        """
        Accept a connection on C{factory}, as its listener would, from the
        public peer (TCP) or the operator (unix).
        """
        server_transport: iosim.FakeTransport
        if unix:
            host: Any = UNIXAddress(SOCKET_PATH)
            peer: Any = UNIXAddress(None)
            protocol = factory.buildProtocol(peer)
            server_transport = _UnixServerTransport(protocol, True, host, peer)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sockets += [ours, theirs]
            server_transport.handle = ours
        else:
            host = IPv4Address("TCP", "127.0.0.1", 8080)
            peer = self.peer_address()
            protocol = factory.buildProtocol(peer)
            server_transport = iosim.FakeTransport(protocol, True, host, peer)
        client_transport = iosim.FakeTransport(client, False, peer, host)
        pump = iosim.connect(
            protocol, server_transport, client, client_transport, greet=False, clock=self.clock
        )
        connection = Connection(self, client, pump)
        self.connections.append(connection)
        return connection

    def peer_address(self) -> IPv4Address:
        """The address of a new connection from the public peer: its own port."""
        self._port += 1
        return IPv4Address("TCP", PEER, self._port)

    def driver(self, name: str) -> Driver:
        """The driver of the binding called C{name} (see L{ALL_BINDINGS}), one per world."""
        if name not in self._drivers:
            self._drivers[name] = _DRIVERS[name](self)
        return self._drivers[name]

    def submit(self, text: str, advance: float = 1.0) -> str:
        """
        Store a text submission through the public policy (no binding under
        test), then let the clock move on; return its task id.
        """
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": "seed", "role": "ROLE_USER", "parts": [{"text": text}]}
            },
        }
        context = CallContext("jsonrpc", PEER, "1.0")
        answer = _sync.successResultOf(self.seeder.dispatch(json.dumps(request).encode(), context))
        assert isinstance(answer, dict) and "result" in answer, answer
        self.clock.advance(advance)
        task_id: str = answer["result"]["task"]["id"]
        return task_id

    def close(self) -> None:
        """
        Close every client connection, then stop the WebSocket service and
        the sites, as their listeners stop.
        """
        for connection in list(self.connections):
            connection.close()
        self.websocket.stopService()
        for site in (self.public_site, self.unix_site, self.bearer_site):
            site.stopFactory()
        # The public doors' limits log their throttled refusals too.
        self.resources.websocket.limits.refusals.stop_logging()
        self.grpc.refusals.stop_logging()
        for end in self._sockets:
            end.close()
        self._sockets = []

    def active_calls(self) -> list[Any]:
        """The delayed calls still active on the clock."""
        return [call for call in self.clock.getDelayedCalls() if call.active()]


# HTTP.


@dataclass
class HTTPResponse:
    """One HTTP response as read so far."""

    status: int
    headers: dict[str, list[str]]
    body: bytes = b""
    complete: bool = False

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return ", ".join(values) if values else None


class HTTPClient(Protocol):
    """
    Reads HTTP/1.1 responses: framed by Content-Length, chunked, or to the
    end of the connection; the body of a chunked one grows as it arrives.
    """

    def __init__(self, method: bytes = b"POST") -> None:
        self.method = method
        self.buffer = b""
        self.responses: list[HTTPResponse] = []
        self._current: HTTPResponse | None = None
        self._left = 0
        self._mode = ""
        self.lost = False

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        while self._step():
            pass

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.lost = True
        if self._current is not None and self._mode == "close":
            self._current.complete = True
            self._current = None

    def _step(self) -> bool:
        if self._current is None:
            if self.responses and self.responses[-1].status == 101:
                return False  # the connection speaks another protocol now
            head, found, rest = self.buffer.partition(b"\r\n\r\n")
            if not found:
                return False
            self.buffer = rest
            status_line, *lines = head.decode("latin-1").split("\r\n")
            response = HTTPResponse(int(status_line.split(" ")[1]), {})
            for line in lines:
                name, _, value = line.partition(":")
                response.headers.setdefault(name.strip().lower(), []).append(value.strip())
            if 100 <= response.status < 200 and response.status != 101:
                return True  # an interim answer (100 Continue): the real one follows
            self.responses.append(response)
            length = response.header("content-length")
            if response.status in (101, 204, 304) or self.method == b"HEAD":
                response.complete = True
                return True
            self._current = response
            if (response.header("transfer-encoding") or "").lower() == "chunked":
                self._mode, self._left = "chunked", -1
            elif length is not None:
                self._mode, self._left = "length", int(length)
            else:
                self._mode = "close"
            return True
        response = self._current
        if self._mode == "length":
            taken, self.buffer = self.buffer[: self._left], self.buffer[self._left :]
            response.body += taken
            self._left -= len(taken)
            if self._left == 0:
                self._finish()
                return True
            return False
        if self._mode == "close":
            response.body += self.buffer
            self.buffer = b""
            return False
        # Chunked: a size line, its data and CRLF; a zero size, then the
        # (empty) trailer section.
        if self._left == -2:
            if len(self.buffer) < 2:
                return False
            assert self.buffer.startswith(b"\r\n"), self.buffer  # no trailers
            self.buffer = self.buffer[2:]
            self._finish()
            return True
        if self._left == -1:
            size, found, rest = self.buffer.partition(b"\r\n")
            if not found:
                return False
            self.buffer = rest
            self._left = int(size.split(b";")[0], 16) or -2
            return True
        if len(self.buffer) < self._left + 2:
            return False
        response.body += self.buffer[: self._left]
        assert self.buffer[self._left : self._left + 2] == b"\r\n"
        self.buffer = self.buffer[self._left + 2 :]
        self._left = -1
        return True

    def _finish(self) -> None:
        assert self._current is not None
        self._current.complete = True
        self._current = None
        self._mode = ""


class _SSEStream(Stream):
    """Server-Sent Events on an HTTP response."""

    def __init__(self, connection: Connection, response: HTTPResponse) -> None:
        self.connection = connection
        self.response = response
        self.echoed = parse_extensions([response.header("a2a-extensions") or ""])
        self._read = 0
        self.comments: list[bytes] = []

    def events(self) -> list[Any]:
        self.connection.flush()
        body = self.response.body
        end = body.rfind(b"\n\n") + 2
        events: list[Any] = []
        for block in body[self._read : end].split(b"\n\n"):
            for line in block.split(b"\n"):
                if line.startswith(b"data: "):
                    events.append(json.loads(line[len(b"data: ") :]))
                elif line.startswith(b":"):
                    self.comments.append(line)
        self._read = max(self._read, end)
        return events

    @property
    def ended(self) -> bool:
        self.connection.flush()
        return self.response.complete

    def close(self) -> None:
        self.connection.close()


class _HTTPDriver(Driver):
    """JSON-RPC over HTTP: one POST per request, on a connection of its own."""

    path: ClassVar[str]

    def factory(self) -> Any:
        raise NotImplementedError

    unix: ClassVar[bool] = False

    def base_headers(self) -> list[tuple[str, str]]:
        return []

    def _post(
        self,
        request: Any,
        version: str | None,
        query_version: str | None,
        extensions: Iterable[str],
        headers: Headers,
    ) -> tuple[Connection, HTTPResponse]:
        body = body_of(request)
        path = self.path
        if query_version is not None:
            path += "?A2A-Version=" + query_version
        lines = [f"POST {path} HTTP/1.1", "Host: beacon.example", "Content-Type: application/json"]
        if version is not None:
            lines.append(f"A2A-Version: {version}")
        uris = list(extensions)
        if uris:
            lines.append("A2A-Extensions: " + ", ".join(uris))
        lines += [f"{name}: {value}" for name, value in [*self.base_headers(), *headers]]
        lines.append(f"Content-Length: {len(body)}")
        client = HTTPClient()
        connection = self.world.connect(self.factory(), client, unix=self.unix)
        connection.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        assert len(client.responses) == 1, client.responses
        return connection, client.responses[0]

    def _answer(self, response: HTTPResponse) -> Answer:
        assert response.complete
        echoed = parse_extensions([response.header("a2a-extensions") or ""])
        if response.status == 204:
            assert response.body == b""
            assert response.header("content-length") in (None, "0")
            return Answer(None, echoed)
        if response.status != 200:
            return Answer(None, echoed, (response.status, json.loads(response.body)))
        # JSON-RPC over HTTP: every answer, errors included, is a 200 with
        # the JSON body in one piece, its length declared.
        assert response.header("content-type") == "application/json"
        assert response.header("transfer-encoding") is None
        assert response.header("content-length") == str(len(response.body))
        return Answer(json.loads(response.body), echoed)

    def call(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        query_version: str | None = None,
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Answer:
        connection, response = self._post(request, version, query_version, extensions, headers)
        assert response.header("content-type") != "text/event-stream", "a stream: use stream()"
        connection.close()
        return self._answer(response)

    def stream(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Stream | Answer:
        connection, response = self._post(request, version, None, extensions, headers)
        if response.header("content-type") == "text/event-stream":
            assert response.status == 200
            return _SSEStream(connection, response)
        connection.close()
        return self._answer(response)


class JSONRPCDriver(_HTTPDriver):
    """The public JSON-RPC binding: C{POST /a2a/v1}."""

    name = "jsonrpc"
    policy = "public"
    door = "jsonrpc"
    path = "/a2a/v1"

    def factory(self) -> Any:
        return self.world.public_site


class _OnUnixSocket:
    """A binding on the operator's socket, peer-checked by the kernel."""

    world: World
    policy = "operator"
    door = "operator"
    unix = True

    def factory(self) -> Any:
        return self.world.unix_factory

    @property
    def source(self) -> str:
        return f"uid:{os.getuid()}"


class _OnBearerDoor:
    """A binding on the operator's loopback door, with its bearer token."""

    world: World
    policy = "operator"
    door = "operator"

    def factory(self) -> Any:
        return self.world.bearer_site

    def base_headers(self) -> list[tuple[str, str]]:
        return [("Authorization", f"Bearer {self.world.token}")]

    @property
    def source(self) -> str:
        return "bearer"


class UnixDriver(_OnUnixSocket, _HTTPDriver):
    """The operator socket's JSON-RPC (C{POST /})."""

    name = "unix"
    path = "/"


class BearerDriver(_OnBearerDoor, _HTTPDriver):
    """The bearer door's JSON-RPC (C{POST /})."""

    name = "bearer"
    path = "/"


# HTTP+JSON.

#: Each core method's route: verb, path (C{{name}}: a member, taken out of
#: the request), and whether the other members are the body (else the
#: query). Any other method is POST extensions/<name>.
REST_ROUTES: dict[str, tuple[str, str, bool]] = {
    "SendMessage": ("POST", "message:send", True),
    "SendStreamingMessage": ("POST", "message:stream", True),
    "GetTask": ("GET", "tasks/{id}", False),
    "ListTasks": ("GET", "tasks", False),
    "CancelTask": ("POST", "tasks/{id}:cancel", True),
    "SubscribeToTask": ("POST", "tasks/{id}:subscribe", True),
    "CreateTaskPushNotificationConfig": ("POST", "tasks/{taskId}/pushNotificationConfigs", True),
    "GetTaskPushNotificationConfig": ("GET", "tasks/{taskId}/pushNotificationConfigs/{id}", False),
    "ListTaskPushNotificationConfigs": ("GET", "tasks/{taskId}/pushNotificationConfigs", False),
    "DeleteTaskPushNotificationConfig": (
        "DELETE",
        "tasks/{taskId}/pushNotificationConfigs/{id}",
        False,
    ),
    "GetExtendedAgentCard": ("GET", "extendedAgentCard", False),
}



def rest_error(response: HTTPResponse, request_id: Any) -> dict[str, Any] | None:
    """
    The JSON-RPC error response a google.rpc.Status answer stands for, after
    checking its framing; None when it names no A2A error (a transport
    refusal of Beacon's own).
    """
    assert response.header("content-type") == "application/json", response
    assert response.header("content-length") == str(len(response.body))
    status = json.loads(response.body)
    assert set(status) == {"error"}, status
    error = status["error"]
    assert set(error) == {"code", "status", "message", "details"}, error
    assert error["code"] == response.status
    info = error["details"][0]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    if info["domain"] != "a2a-protocol.org":
        return None
    code, http_status, grpc_status = A2A_ERRORS[info["reason"]]
    assert (response.status, error["status"]) == (http_status, grpc_status), error
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": error["message"], "data": error["details"]},
    }


class _RESTStream(Stream):
    """An HTTP+JSON stream: bare StreamResponses, and an C{error} event."""

    def __init__(self, connection: Connection, response: HTTPResponse, request_id: Any) -> None:
        self.connection = connection
        self.response = response
        self.id = request_id
        self.echoed = parse_extensions([response.header("a2a-extensions") or ""])
        self._read = 0

    def events(self) -> list[Any]:
        self.connection.flush()
        body = self.response.body
        end = body.rfind(b"\n\n") + 2
        events: list[Any] = []
        for block in body[self._read : end].split(b"\n\n"):
            lines = block.split(b"\n")
            data = [line[len(b"data: ") :] for line in lines if line.startswith(b"data: ")]
            if not data:
                continue  # comments
            (payload,) = data
            if b"event: error" in lines:
                error = json.loads(payload)["error"]
                code = A2A_ERRORS[error["details"][0]["reason"]][0]
                events.append(
                    {
                        "jsonrpc": "2.0",
                        "id": self.id,
                        "error": {"code": code, "message": error["message"], "data": error["details"]},
                    }
                )
            else:
                events.append({"jsonrpc": "2.0", "id": self.id, "result": json.loads(payload)})
        self._read = max(self._read, end)
        return events

    @property
    def ended(self) -> bool:
        self.connection.flush()
        return self.response.complete

    def close(self) -> None:
        self.connection.close()


class RESTDriver(Driver):
    """
    The HTTP+JSON binding: one request per route, on a connection of its
    own, translated from and back to JSON-RPC (see the module docstring).
    """

    base: ClassVar[str] = "/a2a/rest"
    unix: ClassVar[bool] = False

    def factory(self) -> Any:
        raise NotImplementedError

    def base_headers(self) -> list[tuple[str, str]]:
        return []

    def expresses(self, request: Any) -> bool:
        """
        Whether the binding can say C{request}: a body of JSON-RPC's (bytes)
        only when it is one (an empty body is no body here); an envelope
        only when it is a well-formed request with an id (there is no
        notification, and the id is only echoed back by the driver) whose
        params are an object, whose path members are strings, and whose
        query members (a GET's) are strings, numbers, booleans or lists of
        strings.
        """
        if isinstance(request, bytes):
            return request != b""
        if not (
            isinstance(request, dict)
            and request.get("jsonrpc") == "2.0"
            and isinstance(request.get("method"), str)
            and request["method"]
            and "id" in request
            and (
                request["id"] is None
                or (isinstance(request["id"], str) and len(request["id"]) <= 128)
                or (
                    isinstance(request["id"], int)
                    and not isinstance(request["id"], bool)
                    and abs(request["id"]) <= 2**53
                )
            )
            and isinstance(request.get("params", {}), (dict, type(None)))
        ):
            return False
        params = request.get("params") or {}
        route = REST_ROUTES.get(request["method"])
        if route is None:
            return True
        _, path, body = route
        members = [part.split("}")[0] for part in path.split("{")[1:]]
        if not all(isinstance(params.get(m, ""), str) for m in members):
            return False
        return body or all(
            isinstance(v, (str, int, bool, type(None)))
            or (isinstance(v, list) and all(isinstance(x, str) for x in v))
            for k, v in params.items()
            if k not in members
        )

    def _send(
        self,
        request: Any,
        version: str | None,
        query_version: str | None,
        extensions: Iterable[str],
        headers: Headers,
        base: str | None = None,
    ) -> tuple[Connection, HTTPResponse]:
        if not self.expresses(request):
            pytest.skip(
                "the HTTP+JSON binding cannot say this request (a JSON-RPC envelope, "
                "id or notification, an empty body, a path member that is not text)"
            )
        query: list[tuple[str, str]] = []
        if isinstance(request, bytes):
            verb, route, body = "POST", "message:send", request
        else:
            params = dict(request.get("params") or {})
            found = REST_ROUTES.get(request["method"])
            if found is None:
                verb, route, in_body = "POST", "extensions/" + quote(request["method"], safe=""), True
            else:
                verb, route, in_body = found
                for name in [part.split("}")[0] for part in route.split("{")[1:]]:
                    route = route.replace("{" + name + "}", quote(params.pop(name, ""), safe=""))
            body = b""
            if in_body:
                body = json.dumps(params).encode("utf-8") if params else b""
            else:
                for name, value in params.items():
                    if value is None:
                        continue
                    values = value if isinstance(value, list) else [value]
                    for item in values:
                        text = ("true" if item else "false") if isinstance(item, bool) else str(item)
                        query.append((name, text))
        if query_version is not None:
            query.append(("A2A-Version", query_version))
        path = (self.base if base is None else base) + "/" + route
        if query:
            path += "?" + urlencode(query, quote_via=quote)
        lines = [f"{verb} {path} HTTP/1.1", "Host: beacon.example"]
        if body:
            lines.append("Content-Type: application/json")
        if version is not None:
            lines.append(f"A2A-Version: {version}")
        uris = list(extensions)
        if uris:
            lines.append("A2A-Extensions: " + ", ".join(uris))
        lines += [f"{name}: {value}" for name, value in [*self.base_headers(), *headers]]
        if verb == "POST":
            lines.append(f"Content-Length: {len(body)}")
        client = HTTPClient(verb.encode("ascii"))
        connection = self.world.connect(self.factory(), client, unix=self.unix)
        connection.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        assert len(client.responses) == 1, client.responses
        return connection, client.responses[0]

    def _answer(self, response: HTTPResponse, request: Any) -> Answer:
        assert response.complete
        request_id = request.get("id") if isinstance(request, dict) else None
        echoed = parse_extensions([response.header("a2a-extensions") or ""])
        if response.status == 200:
            assert response.header("content-type") == "application/a2a+json"
            assert response.header("transfer-encoding") is None
            assert response.header("content-length") == str(len(response.body))
            return Answer({"jsonrpc": "2.0", "id": request_id, "result": json.loads(response.body)}, echoed)
        error = rest_error(response, request_id)
        if error is None:
            return Answer(None, echoed, (response.status, json.loads(response.body)))
        return Answer(error, echoed)

    def call(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        query_version: str | None = None,
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Answer:
        connection, response = self._send(request, version, query_version, extensions, headers)
        assert response.header("content-type") != "text/event-stream", "a stream: use stream()"
        connection.close()
        return self._answer(response, request)

    def stream(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Stream | Answer:
        connection, response = self._send(request, version, None, extensions, headers)
        if response.header("content-type") == "text/event-stream":
            assert response.status == 200
            return _RESTStream(connection, response, request.get("id"))
        connection.close()
        return self._answer(response, request)

    def call_at(self, base: str, request: Any) -> Answer:
        """Send C{request} with its routes under C{base} instead."""
        connection, response = self._send(request, "1.0", None, (), (), base)
        connection.close()
        return self._answer(response, request)


class PublicRESTDriver(RESTDriver):
    """The public HTTP+JSON binding: C{/a2a/rest} on the public site."""

    name = "rest"
    policy = "public"
    door = "http+json"

    def factory(self) -> Any:
        return self.world.public_site


class UnixRESTDriver(_OnUnixSocket, RESTDriver):
    """The operator socket's HTTP+JSON binding (C{/a2a/rest})."""

    name = "rest-unix"


class BearerRESTDriver(_OnBearerDoor, RESTDriver):
    """The bearer door's HTTP+JSON binding (C{/a2a/rest})."""

    name = "rest-bearer"


# WebSocket.

_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One whole masked client frame (mask key zero, as RFC 6455 allows)."""
    head = bytes([0x80 | opcode])
    length = len(payload)
    if length < 126:
        head += bytes([0x80 | length])
    elif length < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", length)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", length)
    return head + b"\x00\x00\x00\x00" + payload


class WebSocketClient(HTTPClient):
    """Reads the upgrade's answer, then the server's (unmasked) frames."""

    def __init__(self) -> None:
        super().__init__(b"GET")
        self.frames: list[tuple[int, bytes]] = []

    def dataReceived(self, data: bytes) -> None:
        if not self.responses or self.responses[0].status != 101:
            super().dataReceived(data)
            if not self.responses or self.responses[0].status != 101:
                return
            data, self.buffer = self.buffer, b""
        self.buffer += data
        frames, self.buffer = server_frames(self.buffer)
        self.frames.extend(frames)


@dataclass
class _Upgraded:
    connection: Connection
    client: WebSocketClient
    echoed: frozenset[str]
    read: int = 0

    def texts(self) -> list[Any]:
        """The text frames received since the last call, decoded."""
        self.connection.flush()
        frames = self.client.frames[self.read :]
        self.read = len(self.client.frames)
        assert all(opcode == 0x1 for opcode, _ in frames), frames
        return [json.loads(payload) for _, payload in frames]


class _FrameStream(Stream):
    """A stream's frames on a WebSocket connection, up to its end marker."""

    def __init__(self, upgraded: _Upgraded, request_id: Any, first: list[Any]) -> None:
        self.upgraded = upgraded
        self.id = request_id
        self.echoed = upgraded.echoed
        self._pending = first
        self._ended = False

    def events(self) -> list[Any]:
        events: list[Any] = []
        for answer in self._pending + self.upgraded.texts():
            assert answer.get("id") == self.id, answer
            if answer.get("result") == STREAM_COMPLETE:
                self._ended = True
            else:
                events.append(answer)
                self._ended = self._ended or "error" in answer
        self._pending = []
        return events

    @property
    def ended(self) -> bool:
        self._pending += self.upgraded.texts()
        return self._ended or any(
            a.get("result") == STREAM_COMPLETE or "error" in a for a in self._pending
        )

    def close(self) -> None:
        self.upgraded.connection.close()


class _WebSocketDriver(Driver):
    """
    The WebSocket binding: a connection per set of service parameters
    (they are the upgrade's headers, read once), kept while they do not
    change; one text frame per request.
    """

    policy = "public"
    door = "websocket"
    path: ClassVar[str]

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self._upgraded: tuple[Any, _Upgraded] | None = None

    def factory(self) -> Any:
        raise NotImplementedError

    def _open(
        self,
        version: str | None,
        query_version: str | None,
        extensions: Iterable[str],
        headers: Headers,
    ) -> _Upgraded:
        uris = tuple(extensions)
        key = (version, query_version, uris, tuple(headers))
        if self._upgraded is not None:
            # One connection at a time (a source holds at most 16): the
            # last one, if it has the same parameters.
            last_key, last = self._upgraded
            if last_key == key and last.connection.open:
                return last
            last.connection.close()
        path = self.path
        if query_version is not None:
            path += "?A2A-Version=" + query_version
        lines = [
            f"GET {path} HTTP/1.1",
            "Host: beacon.example",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {_KEY}",
            "Sec-WebSocket-Version: 13",
        ]
        if version is not None:
            lines.append(f"A2A-Version: {version}")
        if uris:
            lines.append("A2A-Extensions: " + ", ".join(uris))
        lines += [f"{name}: {value}" for name, value in headers]
        client = WebSocketClient()
        connection = self.world.connect(self.factory(), client)
        connection.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        (response,) = client.responses
        assert response.status == 101, (response, client.buffer)
        echoed = parse_extensions([response.header("a2a-extensions") or ""])
        upgraded = _Upgraded(connection, client, echoed)
        self._upgraded = (key, upgraded)
        return upgraded

    def _send(self, upgraded: _Upgraded, request: Any) -> list[Any]:
        upgraded.connection.write(client_frame(0x1, body_of(request)))
        return upgraded.texts()

    def call(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        query_version: str | None = None,
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Answer:
        upgraded = self._open(version, query_version, extensions, headers)
        answers = self._send(upgraded, request)
        assert len(answers) <= 1, answers
        return Answer(answers[0] if answers else None, upgraded.echoed)

    def stream(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Stream | Answer:
        upgraded = self._open(version, None, extensions, headers)
        answers = self._send(upgraded, request)
        if len(answers) == 1 and "error" in answers[0]:
            return Answer(answers[0], upgraded.echoed)
        request_id = request.get("id") if isinstance(request, dict) else None
        return _FrameStream(upgraded, request_id, answers)


class WebSocketDriver(_WebSocketDriver):
    """The WebSocket binding at C{/a2a/ws} on the public site."""

    name = "websocket"
    path = "/a2a/ws"

    def factory(self) -> Any:
        return self.world.public_site


class WebSocketListenerDriver(_WebSocketDriver):
    """The WebSocket binding on a listener of its own (C{--ws})."""

    name = "websocket-listener"
    path = "/"

    def factory(self) -> Any:
        return self.world.resources.websocket


_DRIVERS: dict[str, type[Driver]] = {
    driver.name: driver
    for driver in (
        JSONRPCDriver,
        PublicRESTDriver,
        WebSocketDriver,
        WebSocketListenerDriver,
        GRPCDriver,
        UnixDriver,
        BearerDriver,
        UnixRESTDriver,
        BearerRESTDriver,
    )
}
assert tuple(_DRIVERS) == ALL_BINDINGS
