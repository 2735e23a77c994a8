"""
The operator client (C{beacon.client}) and the C{beacon review} commands.

The client is tested against a real operator door served in-process (the
service tree C{makeService} builds, on the real reactor, with its unix socket
in C{tmp_path}), against small fake servers on unix sockets for what Beacon
never does (silence, oversize events, broken answers), and on a
C{MemoryReactorClock} where no socket is needed. Every timeout is driven by
a L{Clock}; every wait on the real reactor is bounded.

The commands are tested in-process through L{beacon.cli.run} and end to end:
the installed C{beacon} script run as a subprocess against a real
C{twistd -n beacon} process.
"""

from __future__ import annotations

import errno
import http.client
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from hyperlink import URL
from treq.client import HTTPClient
from twisted.application.service import MultiService
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectError
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from beacon import cli
from beacon.cli import _review, _text
from beacon.client import (
    DEFAULT_MAX_EVENT,
    REVIEW_EXTENSION,
    EventTooLarge,
    Feed,
    HTTPStatusError,
    InvalidResponse,
    OperatorClient,
    RPCError,
    SSEReader,
    Timeout,
    TransportError,
    read_discovery_file,
)
from beacon.client._transport import FixedEndpointFactory, unix_endpoint
from beacon.config import build_config
from beacon.service import Listeners, makeService
from peers.process import LOOPBACK_HTTP, Beacon, BeaconLauncher

#: The longest a test waits for something the real reactor, a socket or a
#: process does: a safety net against a hang on a loaded machine (CI may
#: run 5-10 times slower than an idle one), never what a test measures.
WAIT = 60.0

STRUCTURED = {
    "from": {"name": "Ada", "agent": "ada-assistant/2.1", "operator": "Example Lab"},
    "subject": "Dataset licence question",
    "body": "Could the maintainers confirm\nthe licence of the 2025 snapshot?",
    "language": "en",
    "contact": [
        {"kind": "email", "value": "ada@example.org"},
        {"kind": "url", "value": "https://example.org/\x1b]8;;https://evil.example\x07x"},
    ],
}


def within(d: Deferred[Any], seconds: float = WAIT) -> Deferred[Any]:
    """Bound a wait on the real reactor, so that a broken test fails, not hangs."""
    return d.addTimeout(seconds, reactor)


# Beacon, in-process.


class InProcessBeacon:
    """A started Beacon service tree, its operator socket and public port."""

    def __init__(self, service: MultiService, data: Path) -> None:
        self.service = service
        self.data = data
        self.socket = str(data / "operator.sock")
        listeners = [s for s in service if isinstance(s, Listeners)]
        self.port: int = listeners[0].ports[0].getHost().port
        self.operator_listeners = listeners[1:]
        self._http = HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))

    def client(self, **kwargs: Any) -> OperatorClient:
        """An operator client of this Beacon's socket."""
        return OperatorClient(reactor, socket_path=self.socket, **kwargs)

    async def submit(self, part: dict[str, Any]) -> str:
        """SendMessage one part through the public A2A door; return the task id."""
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [part]}
            },
        }
        response = await within(
            self._http.post(
                f"http://127.0.0.1:{self.port}/a2a/v1",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
            )
        )
        answer = json.loads(await within(response.content()))
        assert "result" in answer, answer
        task_id: str = answer["result"]["task"]["id"]
        return task_id

    async def submit_text(self, text: str) -> str:
        """Submit a text message."""
        return await self.submit({"text": text})

    async def submit_structured(self, message: dict[str, Any]) -> str:
        """Submit a structured (data part) message."""
        return await self.submit({"data": message, "mediaType": "application/json"})


@pytest_twisted.async_yield_fixture
async def start_beacon(tmp_path: Path) -> AsyncIterator[Callable[..., InProcessBeacon]]:
    """Starts Beacon service trees in C{tmp_path}; stops them all afterwards."""
    started: list[MultiService] = []

    def start(file_values: dict[str, Any] | None = None, name: str = "data") -> InProcessBeacon:
        data = tmp_path / name
        config = build_config(
            file_values,
            data_dir=str(data),
            http=[LOOPBACK_HTTP],
            public_url="http://127.0.0.1:1",
        )
        service = makeService(config, reactor)
        service.startService()
        started.append(service)
        return InProcessBeacon(service, data)

    yield start
    for service in reversed(started):
        await within(service.stopService())


@pytest.fixture
def beacon(start_beacon: Callable[..., InProcessBeacon]) -> InProcessBeacon:
    """A running in-process Beacon with an empty inbox."""
    return start_beacon()


# Fake servers on unix sockets.


@pytest_twisted.async_yield_fixture
async def listen(tmp_path: Path) -> AsyncIterator[Callable[[Factory], str]]:
    """Listens with a factory on a fresh unix socket; closes every port afterwards."""
    ports: list[IListeningPort] = []

    def start(factory: Factory) -> str:
        path = str(tmp_path / f"fake{len(ports)}.sock")
        ports.append(reactor.listenUNIX(path, factory))
        return path

    yield start
    for port in ports:
        await within(port.stopListening())


class Silent(Protocol):
    """Reads the request and never answers."""

    def __init__(self, received: Deferred[bytes], lost: Deferred[None]) -> None:
        self.received = received
        self.lost = lost

    def dataReceived(self, data: bytes) -> None:
        if not self.received.called:
            self.received.callback(data)

    def connectionLost(self, reason: Failure) -> None:
        self.lost.callback(None)


class SilentFactory(Factory):
    """Makes L{Silent} protocols; C{received} and C{lost} fire for the first."""

    def __init__(self) -> None:
        self.received: Deferred[bytes] = Deferred()
        self.lost: Deferred[None] = Deferred()

    def buildProtocol(self, addr: Any) -> Protocol:
        return Silent(self.received, self.lost)


class Closing(Protocol):
    """Closes every connection at once, as the socket does for a refused uid."""

    def connectionMade(self) -> None:
        self.transport.loseConnection()


class Scripted(Resource):
    """
    A fake operator door: answers each POST with the next scripted answer
    (status, content type, body bytes; the body may contain C{{id}}, the
    request's JSON-RPC id), or keeps an event stream open for the test to
    write to.
    """

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[tuple[int, bytes, bytes]] = []
        self.requests: list[tuple[dict[str, list[str]], Any]] = []
        self.streams: list[Request] = []
        self.stream_opened: Deferred[Request] = Deferred()
        self.stream_closed: Deferred[None] = Deferred()

    def render_GET(self, request: Request) -> bytes:
        return self.render_POST(request)

    def render_POST(self, request: Request) -> bytes | int:
        body = request.content.read()
        document = json.loads(body) if body else None
        headers = {
            k.decode().lower(): [v.decode() for v in vs]
            for k, vs in request.requestHeaders.getAllRawHeaders()
        }
        self.requests.append((headers, document))
        request_id = json.dumps(document.get("id")) if isinstance(document, dict) else "null"
        if not self.answers:
            request.setHeader(b"Content-Type", b"text/event-stream")
            request.write(b": stream open\n\n")
            self.streams.append(request)
            request.notifyFinish().addBoth(lambda _: self.stream_closed.callback(None))
            self.stream_opened.callback(request)
            return NOT_DONE_YET
        status, content_type, answer = self.answers.pop(0)
        request.setResponseCode(status)
        request.setHeader(b"Content-Type", content_type)
        return answer.replace(b"{id}", request_id.encode())


@pytest.fixture
def scripted(listen: Callable[[Factory], str]) -> tuple[Scripted, str]:
    """A L{Scripted} fake door and its socket path."""
    resource = Scripted()
    site = Site(resource)
    site.noisy = False
    return resource, listen(site)


def event(request_id: Any, result: Any) -> bytes:
    """One SSE event holding a JSON-RPC success response."""
    return b"data: " + json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n\n"


# The client against a real operator door.


@pytest_twisted.ensureDeferred
async def test_card_names_the_socket(beacon: InProcessBeacon) -> None:
    """The operator card over the socket declares the unix binding and the socket's URL."""
    card = await beacon.client().card()
    (interface,) = card["supportedInterfaces"]
    assert interface["protocolBinding"] == "https://agentd.dev/a2a/binding/jsonrpc-unix"
    assert interface["url"] == "unix://" + os.path.abspath(beacon.socket)
    assert REVIEW_EXTENSION in [e["uri"] for e in card["capabilities"]["extensions"]]


@pytest_twisted.ensureDeferred
async def test_list_empty_inbox(beacon: InProcessBeacon) -> None:
    """An empty inbox lists no tasks, on one last page."""
    page = await beacon.client().list_tasks()
    assert page["tasks"] == []
    assert page["nextPageToken"] == ""
    assert page["totalSize"] == 0


@pytest_twisted.ensureDeferred
async def test_list_and_get_show_submissions(beacon: InProcessBeacon) -> None:
    """Submissions list newest first, page by page, and GetTask shows the message in full."""
    first = await beacon.submit_text("first message")
    second = await beacon.submit_structured(STRUCTURED)
    client = beacon.client()
    page = await client.list_tasks()
    assert [t["id"] for t in page["tasks"]] == [second, first]
    one = await client.list_tasks(page_size=1)
    assert [t["id"] for t in one["tasks"]] == [second] and one["nextPageToken"]
    rest = await client.list_tasks(page_size=1, page_token=one["nextPageToken"])
    assert [t["id"] for t in rest["tasks"]] == [first] and rest["nextPageToken"] == ""
    task = await client.get_task(second)
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert task["history"][0]["parts"][0]["data"] == STRUCTURED
    assert task["metadata"]["kind"] == "structured"
    assert len(task["metadata"]["receipt"]["sha256"]) == 64
    text = await client.get_task(first, history_length=0)
    assert "history" not in text


@pytest_twisted.ensureDeferred
async def test_accept_then_reject_is_refused(beacon: InProcessBeacon) -> None:
    """A decision is final: deciding again is JSON-RPC error -32004 naming the state."""
    task_id = await beacon.submit_text("decide me")
    client = beacon.client()
    accepted = await client.decide(task_id, "accept", note="looks fine")
    assert accepted["status"]["state"] == "TASK_STATE_COMPLETED"
    assert accepted["status"]["message"]["parts"][0]["text"] == "looks fine"
    with pytest.raises(RPCError) as caught:
        await client.decide(task_id, "reject")
    assert caught.value.code == -32004
    assert caught.value.reason == "UNSUPPORTED_OPERATION"
    assert caught.value.metadata == {"state": "TASK_STATE_COMPLETED"}
    filtered = await client.list_tasks(status="TASK_STATE_COMPLETED")
    assert [t["id"] for t in filtered["tasks"]] == [task_id]
    assert (await client.list_tasks(status="TASK_STATE_REJECTED"))["tasks"] == []


@pytest_twisted.ensureDeferred
async def test_unknown_id(beacon: InProcessBeacon) -> None:
    """An id that names no submission is -32001 TASK_NOT_FOUND, for reading and deciding."""
    client = beacon.client()
    for call in (client.get_task("a" * 32), client.decide("a" * 32, "reject")):
        with pytest.raises(RPCError) as caught:
            await call
        assert (caught.value.code, caught.value.reason) == (-32001, "TASK_NOT_FOUND")


def test_decide_refuses_other_decisions(tmp_path: Path) -> None:
    """Only accept and reject are decisions; anything else is refused before sending."""
    client = OperatorClient(MemoryReactorClock(), socket_path=str(tmp_path / "s"))
    with pytest.raises(ValueError):
        client.decide("x", "maybe")


@pytest_twisted.ensureDeferred
async def test_follow_sees_submissions_and_decisions(beacon: InProcessBeacon) -> None:
    """Follow streams a new submission, then its decision; cancelling ends the iteration."""
    client = beacon.client()
    feed = await client.follow()
    task_id = await beacon.submit_text("live")
    new = await within(Deferred.fromCoroutine(feed.__anext__()))
    assert new["task"]["id"] == task_id
    assert new["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    await client.decide(task_id, "reject", note="no")
    update = await within(Deferred.fromCoroutine(feed.__anext__()))
    assert update["statusUpdate"]["taskId"] == task_id
    assert update["statusUpdate"]["status"]["state"] == "TASK_STATE_REJECTED"
    feed.cancel()
    with pytest.raises(StopAsyncIteration):
        await feed.__anext__()
    assert feed.ended


@pytest_twisted.ensureDeferred
async def test_follow_waiting_consumer_cancelled(beacon: InProcessBeacon) -> None:
    """Cancelling a wait for the next event closes the stream and fails the wait."""
    feed = await beacon.client().follow()
    waiting = Deferred.fromCoroutine(feed.__anext__())
    waiting.cancel()
    with pytest.raises(Exception) as caught:
        await waiting
    assert caught.type.__name__ == "CancelledError"
    assert feed.ended


@pytest_twisted.ensureDeferred
async def test_socket_missing(tmp_path: Path) -> None:
    """No file at the socket path is a TransportError that says so."""
    path = str(tmp_path / "operator.sock")
    with pytest.raises(TransportError) as caught:
        await OperatorClient(reactor, socket_path=path).list_tasks()
    assert caught.value.reason == "no such socket"
    assert caught.value.address == path
    assert str(caught.value) == f"cannot reach Beacon at {path}: no such socket"


@pytest_twisted.ensureDeferred
async def test_socket_with_nothing_listening(tmp_path: Path) -> None:
    """A socket file nothing listens on (a stale socket) is a refused connection."""
    path = str(tmp_path / "stale.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        stale.bind(path)
        with pytest.raises(TransportError) as caught:
            await OperatorClient(reactor, socket_path=path).list_tasks()
    finally:
        stale.close()
    assert caught.value.reason.startswith("connection refused")


@pytest_twisted.ensureDeferred
async def test_path_that_is_not_a_socket(tmp_path: Path) -> None:
    """A regular file at the socket path is named as such."""
    path = tmp_path / "file"
    path.write_text("not a socket")
    with pytest.raises(TransportError) as caught:
        await OperatorClient(reactor, socket_path=str(path)).list_tasks()
    assert caught.value.reason == "not a socket"


def test_socket_path_too_long(tmp_path: Path) -> None:
    """A path longer than a unix socket address can hold is refused at once."""
    with pytest.raises(TransportError) as caught:
        OperatorClient(MemoryReactorClock(), socket_path="/" + "x" * 200)
    assert "longer than" in caught.value.reason


def test_permission_denied_is_named(tmp_path: Path) -> None:
    """A connection failing with EACCES is reported as permission denied."""
    memory = MemoryReactorClock()
    client = OperatorClient(memory, socket_path=str(tmp_path / "s"))
    d = client.list_tasks()
    (path, factory, _, _) = memory.unixClients[0]
    factory.clientConnectionFailed(
        memory.connectors[0], Failure(ConnectError(errno.EACCES, "Permission denied"))
    )
    errors: list[Failure] = []
    d.addErrback(errors.append)
    assert errors and isinstance(errors[0].value, TransportError)
    assert errors[0].value.reason == "permission denied"
    assert memory.getDelayedCalls() == []


def test_dials_the_configured_socket_whatever_the_url(tmp_path: Path) -> None:
    """The endpoint factory ignores the request URL: every URI dials the configured socket."""
    memory = MemoryReactorClock()
    path = str(tmp_path / "operator.sock")
    factory = FixedEndpointFactory(unix_endpoint(memory, path, 5.0))
    for uri in (b"http://evil.example:8080/", b"unix:///elsewhere.sock"):
        endpoint = factory.endpointForURI(URL.from_text(uri.decode()))
        endpoint.connect(Factory.forProtocol(Protocol))
    assert [client[0] for client in memory.unixClients] == [path, path]
    assert memory.tcpClients == []


@pytest_twisted.ensureDeferred
async def test_connection_closed_before_answer(listen: Callable[[Factory], str]) -> None:
    """A socket that closes the connection unanswered (a refused uid) is a TransportError."""
    path = listen(Factory.forProtocol(Closing))
    with pytest.raises(TransportError) as caught:
        await OperatorClient(reactor, socket_path=path).get_task("x")
    assert "closed before an answer" in caught.value.reason


# Timeouts, on a Clock.


def test_connect_timeout() -> None:
    """A connection that never completes fails with Timeout after exactly the timeout."""
    memory = MemoryReactorClock()
    client = OperatorClient(memory, socket_path="/nowhere/operator.sock", timeout=5)
    errors: list[Failure] = []
    client.list_tasks().addErrback(errors.append)
    memory.advance(4.9)
    assert errors == []
    memory.advance(0.1)
    assert isinstance(errors[0].value, Timeout)
    assert errors[0].value.seconds == 5
    assert memory.getDelayedCalls() == []


@pytest_twisted.ensureDeferred
async def test_silent_server_times_out(listen: Callable[[Factory], str]) -> None:
    """A server that reads the request and never answers: Timeout on the clock, connection closed."""
    silent = SilentFactory()
    path = listen(silent)
    clock = Clock()
    call = OperatorClient(reactor, socket_path=path, timeout=7, clock=clock).get_task("x")
    request = await within(silent.received)
    assert request.startswith(b"POST / HTTP/1.1")
    clock.advance(6.9)
    assert not call.called
    clock.advance(0.1)
    with pytest.raises(Timeout):
        await call
    await within(silent.lost)


@pytest_twisted.ensureDeferred
async def test_follow_timeout_bounds_only_the_start(scripted: tuple[Scripted, str]) -> None:
    """Once the stream's headers are in, the clock no longer ends it."""
    resource, path = scripted
    clock = Clock()
    started = OperatorClient(reactor, socket_path=path, timeout=3, clock=clock).follow()
    stream = await within(resource.stream_opened)
    feed: Feed = await within(started)
    clock.advance(1000)
    assert not feed.ended
    request_id = resource.requests[0][1]["id"]
    stream.write(b": keepalive\n\n" + event(request_id, {"task": {"id": "t1"}}))
    assert (await within(Deferred.fromCoroutine(feed.__anext__()))) == {"task": {"id": "t1"}}
    feed.cancel()
    await within(resource.stream_closed)


@pytest_twisted.ensureDeferred
async def test_follow_silent_server_times_out(listen: Callable[[Factory], str]) -> None:
    """A stream whose headers never come fails with Timeout."""
    silent = SilentFactory()
    path = listen(silent)
    clock = Clock()
    started = OperatorClient(reactor, socket_path=path, timeout=2, clock=clock).follow()
    await within(silent.received)
    clock.advance(2)
    with pytest.raises(Timeout):
        await started
    await within(silent.lost)


# What the client sends, and broken answers (a scripted fake door).


@pytest_twisted.ensureDeferred
async def test_requests_carry_version_extensions_and_fresh_ids(scripted: tuple[Scripted, str]) -> None:
    """Every request says A2A-Version 1.0, extension calls activate theirs, ids never repeat."""
    resource, path = scripted
    task = b'{"jsonrpc":"2.0","id":{id},"result":{"id":"t"}}'
    resource.answers = [(200, b"application/json", task)] * 3
    client = OperatorClient(reactor, socket_path=path)
    await client.get_task("t")
    await client.decide("t", "accept")
    await client.get_task("t")
    headers = [h for h, _ in resource.requests]
    assert all(h["a2a-version"] == ["1.0"] for h in headers)
    assert "a2a-extensions" not in headers[0]
    assert headers[1]["a2a-extensions"] == [REVIEW_EXTENSION]
    ids = [document["id"] for _, document in resource.requests]
    assert len(set(ids)) == 3


@pytest_twisted.ensureDeferred
async def test_broken_answers(scripted: tuple[Scripted, str]) -> None:
    """Non-JSON-RPC answers, wrong ids and wrong shapes are InvalidResponse or HTTPStatusError."""
    resource, path = scripted
    resource.answers = [
        (500, b"text/html", b"<h1>oops</h1>"),
        (200, b"application/json", b"not json"),
        (200, b"application/json", b'{"jsonrpc":"2.0","id":999999,"result":{"id":"t"}}'),
        (200, b"application/json", b'{"jsonrpc":"2.0","id":{id},"result":[]}'),
        (404, b"application/json", b'{"jsonrpc":"2.0","id":{id},"error":{"code":-32601,"message":"Method not found"}}'),
    ]
    client = OperatorClient(reactor, socket_path=path)
    with pytest.raises(HTTPStatusError) as status:
        await client.get_task("t")
    assert status.value.status == 500
    for _ in range(3):
        with pytest.raises(InvalidResponse):
            await client.get_task("t")
    with pytest.raises(RPCError) as rpc:
        await client.get_task("t")
    assert rpc.value.code == -32601 and rpc.value.reason is None


@pytest_twisted.ensureDeferred
async def test_answer_size_cap(scripted: tuple[Scripted, str]) -> None:
    """An answer larger than max_response is refused."""
    resource, path = scripted
    big = b'{"jsonrpc":"2.0","id":{id},"result":{"id":"' + b"x" * 5000 + b'"}}'
    resource.answers = [(200, b"application/json", big)]
    with pytest.raises(InvalidResponse):
        await OperatorClient(reactor, socket_path=path, max_response=4096).get_task("t")


# Streams: events, the event size cap, errors.


@pytest_twisted.ensureDeferred
async def test_event_size_cap(scripted: tuple[Scripted, str]) -> None:
    """An event larger than max_event ends the stream with EventTooLarge and closes it."""
    resource, path = scripted
    feed = await OperatorClient(reactor, socket_path=path, max_event=4096).follow()
    stream = await within(resource.stream_opened)
    request_id = resource.requests[0][1]["id"]
    stream.write(event(request_id, {"task": {"id": "small"}}))
    stream.write(b"data: " + b"x" * 3000)
    stream.write(b"x" * 3000)
    assert (await within(Deferred.fromCoroutine(feed.__anext__())))["task"]["id"] == "small"
    with pytest.raises(EventTooLarge):
        await within(Deferred.fromCoroutine(feed.__anext__()))
    await within(resource.stream_closed)
    with pytest.raises(StopAsyncIteration):
        await feed.__anext__()


@pytest_twisted.ensureDeferred
async def test_stream_error_event(scripted: tuple[Scripted, str]) -> None:
    """A JSON-RPC error event ends the stream with RPCError."""
    resource, path = scripted
    feed = await OperatorClient(reactor, socket_path=path).follow()
    stream = await within(resource.stream_opened)
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "the stream broke"}}
    stream.write(b"data: " + json.dumps(error).encode() + b"\n\n")
    with pytest.raises(RPCError) as caught:
        await within(Deferred.fromCoroutine(feed.__anext__()))
    assert caught.value.code == -32603


@pytest_twisted.ensureDeferred
async def test_stream_ends(scripted: tuple[Scripted, str]) -> None:
    """A stream the server finishes ends the iteration after its events."""
    resource, path = scripted
    feed = await OperatorClient(reactor, socket_path=path).follow()
    stream = await within(resource.stream_opened)
    request_id = resource.requests[0][1]["id"]
    stream.write(event(request_id, {"statusUpdate": {"taskId": "a"}}))
    stream.finish()
    got = [e async for e in feed]
    assert got == [{"statusUpdate": {"taskId": "a"}}]


@pytest_twisted.ensureDeferred
async def test_follow_refused_without_stream(scripted: tuple[Scripted, str]) -> None:
    """Follow answered with a JSON-RPC error (no stream) fails with that RPCError."""
    resource, path = scripted
    resource.answers = [
        (200, b"application/json", b'{"jsonrpc":"2.0","id":{id},"error":{"code":-32601,"message":"no"}}')
    ]
    with pytest.raises(RPCError):
        await OperatorClient(reactor, socket_path=path).follow()


def test_sse_reader_framing() -> None:
    """Comments are skipped, data lines join, CR LF / LF / CR all end lines, even split across chunks."""
    got: list[bytes] = []
    reader = SSEReader(got.append)
    for chunk in (b": open\n\n", b"data: a\r", b"\ndata:b\n", b"\n", b"event: x\rdata: c\r\r", b"id: 1\n\n"):
        reader.feed(chunk)
    assert got == [b"a\nb", b"c"]


def test_sse_reader_default_cap() -> None:
    """The default cap is 1 MiB per event: just under it passes, over it raises, comments count."""
    got: list[bytes] = []
    reader = SSEReader(got.append)
    payload = b"y" * (DEFAULT_MAX_EVENT - len(b"data: \n\n"))
    for start in range(0, len(payload), 65536):
        reader.feed((b"data: " if start == 0 else b"") + payload[start : start + 65536])
    reader.feed(b"\n\n")
    assert got == [payload]
    with pytest.raises(EventTooLarge):
        for _ in range(20):
            reader.feed(b":" + b"k" * 65535 + b"\n")


# The bearer door.


@pytest_twisted.ensureDeferred
async def test_bearer_door(start_beacon: Callable[..., InProcessBeacon]) -> None:
    """Without the token the door answers 401 with -31401; with it, the same policy."""
    beacon = start_beacon({"operator": {"http": "tcp:0:interface=127.0.0.1"}})
    discovery_path = str(beacon.data / "operator-http.json")
    discovery = read_discovery_file(discovery_path)
    assert discovery.url.startswith("http://127.0.0.1:")
    for token in (None, "wrong"):
        client = OperatorClient(reactor, url=discovery.url, token=token)
        for call in (client.list_tasks, client.card):
            with pytest.raises(RPCError) as caught:
                await call()
            assert (caught.value.code, caught.value.reason) == (-31401, "UNAUTHENTICATED")
    task_id = await beacon.submit_text("over the bearer door")
    client = OperatorClient.from_discovery(reactor, discovery_path)
    assert [t["id"] for t in (await client.list_tasks())["tasks"]] == [task_id]
    card = await client.card()
    assert card["supportedInterfaces"][0]["url"] == discovery.url
    decided = await client.decide(task_id, "accept")
    assert decided["status"]["state"] == "TASK_STATE_COMPLETED"


def test_bearer_token_only_to_loopback() -> None:
    """The client refuses to send a token in clear text off the host, or over anything but http."""
    for url in ("http://192.0.2.1:8080/", "https://127.0.0.1/", "ftp://127.0.0.1/"):
        with pytest.raises(ValueError):
            OperatorClient(MemoryReactorClock(), url=url, token="t")
    OperatorClient(MemoryReactorClock(), url="http://[::1]:8080/", token="t")
    OperatorClient(MemoryReactorClock(), url="http://localhost:8080/", token="t")


def test_discovery_file_errors(tmp_path: Path) -> None:
    """A missing discovery file is a TransportError; a malformed one InvalidResponse."""
    with pytest.raises(TransportError) as missing:
        read_discovery_file(str(tmp_path / "operator-http.json"))
    assert "no such discovery file" in missing.value.reason
    bad = tmp_path / "bad.json"
    bad.write_text('{"url": 1}')
    with pytest.raises(InvalidResponse):
        read_discovery_file(str(bad))


# The commands, in-process.


class Captured:
    """What one in-process command wrote, and its exit code."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err


async def review(*argv: str, columns: int = 100) -> Captured:
    """Run C{beacon review *argv} in-process through L{cli.run}."""
    out, err = io.StringIO(), io.StringIO()
    args = cli.parse_args(["review", *argv])
    code = await within(Deferred.fromCoroutine(cli.run(reactor, args, out, err, columns)))
    return Captured(code, out.getvalue(), err.getvalue())


@pytest_twisted.ensureDeferred
async def test_cli_list_empty(beacon: InProcessBeacon) -> None:
    """An empty inbox lists as one sentence, exit 0."""
    result = await review("list", "--socket", beacon.socket)
    assert (result.code, result.out, result.err) == (0, "No submissions.\n", "")
    filtered = await review("list", "--status", "rejected", "--socket", beacon.socket)
    assert filtered.out == "No rejected submissions.\n"


@pytest_twisted.ensureDeferred
async def test_cli_list_table(beacon: InProcessBeacon) -> None:
    """The table shows id, state, time, door, kind and the subject, cut to the width."""
    text_id = await beacon.submit_text("\n  first line of text\nsecond line")
    data_id = await beacon.submit_structured(dict(STRUCTURED, subject="S" * 200))
    result = await review("--socket", beacon.socket, "list", columns=120)
    assert result.code == 0, result.err
    header, first, second = result.out.splitlines()
    assert header.split() == ["ID", "STATE", "RECEIVED", "DOOR", "KIND", "SUBJECT"]
    assert first.startswith(data_id[:12] + " ") and "structured" in first and first.endswith("\u2026")
    assert len(first) == 120
    assert second.startswith(text_id[:12] + " ") and second.endswith("first line of text")
    assert " submitted " in second


@pytest_twisted.ensureDeferred
async def test_cli_list_says_who_a_structured_one_claims_to_be(beacon: InProcessBeacon) -> None:
    """A structured row's subject is followed by its from.name and operator, as a claim; a text row has none; --json is the page unchanged."""
    text_id = await beacon.submit_text("plain words\nmore")
    ada = await beacon.submit_structured(STRUCTURED)
    crawler = await beacon.submit_structured(
        {"from": {"name": "crawler-\x1b[31m7"}, "subject": "Broken link", "body": "404"}
    )
    result = await review("--socket", beacon.socket, "list", columns=200)
    assert result.code == 0, result.err
    header, *rows = result.out.splitlines()
    assert header.split() == ["ID", "STATE", "RECEIVED", "DOOR", "KIND", "SUBJECT"]
    lines = {line.split()[0]: line for line in rows}
    assert lines[crawler[:12]].endswith("  Broken link \u2014 claims to be crawler-\\x1b[31m7")
    assert lines[ada[:12]].endswith(
        "  Dataset licence question \u2014 claims to be Ada \u00b7 Example Lab"
    )
    assert lines[text_id[:12]].endswith("  plain words")
    page = json.loads((await review("--socket", beacon.socket, "list", "--json")).out)
    assert [t["id"] for t in page["tasks"]] == [crawler, ada, text_id]
    assert "claims" not in json.dumps(page)


@pytest_twisted.ensureDeferred
async def test_cli_list_limit_pages(beacon: InProcessBeacon) -> None:
    """--limit N pages through ListTasks until N tasks are shown and says how many exist."""
    ids = [await beacon.submit_text(f"message {n}") for n in range(5)]
    result = await review("list", "--limit", "3", "--socket", beacon.socket)
    lines = result.out.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == [i[:12] for i in ids[::-1][:3]]
    assert lines[4].startswith("(3 of 5 shown; --limit N shows more, --page-token ")
    everything = await review("list", "--limit", "200", "--json", "--socket", beacon.socket)
    assert [t["id"] for t in json.loads(everything.out)["tasks"]] == ids[::-1]


@pytest_twisted.ensureDeferred
async def test_cli_list_capped_total(beacon: InProcessBeacon, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above the server's total cap, list says "of more than N" (--json: totalMoreThan)."""
    import beacon.intake._operator as operator

    monkeypatch.setattr(operator, "TOTAL_CAP", 3)
    for n in range(5):
        await beacon.submit_text(f"message {n}")
    result = await review("list", "--limit", "2", "--socket", beacon.socket)
    assert result.out.splitlines()[3].startswith("(2 of more than 3 shown; --limit N shows more")
    answer = json.loads((await review("list", "--limit", "2", "--json", "--socket", beacon.socket)).out)
    assert answer["totalMoreThan"] == 3 and "totalSize" not in answer


@pytest_twisted.ensureDeferred
async def test_cli_show_is_inert(beacon: InProcessBeacon) -> None:
    """show prints every field and the body, with terminal escapes made visible."""
    message = dict(
        STRUCTURED,
        subject="Hello \u202eevil\u202c \x1b[2J",
        body="line one\x1b[31m red\nline two\x07\u2028end",
    )
    task_id = await beacon.submit_structured(message)
    result = await review("show", task_id, "--socket", beacon.socket)
    assert result.code == 0, result.err
    for raw in ("\x1b", "\x07", "\u202e", "\u2028"):
        assert raw not in result.out
    lines = result.out.splitlines()
    assert f"id:       {task_id}" in lines
    assert "from:     Ada (agent ada-assistant/2.1, operator Example Lab)" in lines
    assert "subject:  Hello \\u202eevil\\u202c \\x1b[2J" in lines
    assert "contact:  email: ada@example.org" in lines
    assert "          url: https://example.org/\\x1b]8;;https://evil.example\\x07x" in lines
    assert lines[-2:] == ["line one\\x1b[31m red", "line two\\x07\\u2028end"]
    raw_json = await review("show", task_id, "--json", "--socket", beacon.socket)
    assert "\x1b" not in raw_json.out
    assert json.loads(raw_json.out)["history"][0]["parts"][0]["data"] == message


@pytest_twisted.ensureDeferred
async def test_cli_accept_then_reject(beacon: InProcessBeacon) -> None:
    """accept prints one line; a second decision is refused with one line and exit 1."""
    task_id = await beacon.submit_text("decide")
    accepted = await review("accept", task_id, "--note", "ok", "--socket", beacon.socket)
    assert (accepted.code, accepted.out) == (0, f"accepted {task_id}\n")
    rejected = await review("reject", task_id, "--socket", beacon.socket)
    assert rejected.code == 1 and rejected.out == ""
    assert rejected.err == (
        f"beacon: cannot reject {task_id}: this submission was already decided "
        "(TASK_STATE_COMPLETED); decisions are final\n"
    )
    shown = await review("show", task_id, "--socket", beacon.socket)
    assert "state:    accepted (TASK_STATE_COMPLETED) since " in shown.out
    assert "note:     ok" in shown.out.splitlines()


@pytest_twisted.ensureDeferred
async def test_cli_unknown_id_and_missing_socket(beacon: InProcessBeacon, tmp_path: Path) -> None:
    """An unknown id and a missing socket are each one line on stderr and exit 1."""
    unknown = await review("show", "b" * 32, "--socket", beacon.socket)
    assert (unknown.code, unknown.err) == (1, f"beacon: no submission with id {'b' * 32}\n")
    missing = await review("list", "--data", str(tmp_path / "nowhere"))
    path = tmp_path / "nowhere" / "operator.sock"
    assert (missing.code, missing.err) == (
        1,
        f"beacon: cannot reach Beacon at {path}: no such socket (is twistd beacon running?"
        " point to its socket with --socket PATH, --data DIR or BEACON_SOCKET=PATH)\n",
    )


def test_the_socket_is_the_flag_then_the_environment_then_the_default() -> None:
    """--socket, then --data, then BEACON_SOCKET (unless empty), then ./beacon-data/operator.sock; each says where it came from."""
    environ = {"BEACON_SOCKET": "/env/operator.sock"}

    def named(*argv: str, environ: dict[str, str] = environ) -> tuple[str, str]:
        return _review.socket_path(cli.parse_args(["review", *argv, "list"]), environ)

    assert named("--socket", "/flag.sock") == ("/flag.sock", "--socket")
    assert named("--data", "/data") == (os.path.join("/data", "operator.sock"), "--data")
    assert named() == ("/env/operator.sock", "from BEACON_SOCKET")
    assert named(environ={"BEACON_SOCKET": ""}) == (_review.DEFAULT_SOCKET, "the default")
    assert named(environ={}) == (os.path.join("beacon-data", "operator.sock"), "the default")


@pytest_twisted.ensureDeferred
async def test_beacon_socket_reaches_beacon_from_anywhere(
    beacon: InProcessBeacon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From another directory, BEACON_SOCKET finds Beacon; --socket and --data still win over it; a wrong one is named as such."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    default = await review("list")
    assert default.code == 1
    assert default.err == (
        f"beacon: cannot reach Beacon at {os.path.join(os.getcwd(), 'beacon-data', 'operator.sock')} (the default):"
        " no such socket (is twistd beacon running? point to its socket with --socket PATH,"
        " --data DIR or BEACON_SOCKET=PATH)\n"
    )
    monkeypatch.setenv("BEACON_SOCKET", beacon.socket)
    found = await review("list")
    assert (found.code, found.out, found.err) == (0, "No submissions.\n", "")
    monkeypatch.setenv("BEACON_SOCKET", str(tmp_path / "wrong.sock"))
    wrong = await review("list")
    assert wrong.code == 1
    assert wrong.err.startswith(
        f"beacon: cannot reach Beacon at {tmp_path / 'wrong.sock'} (from BEACON_SOCKET): no such socket"
    )
    assert (await review("list", "--socket", beacon.socket)).code == 0
    assert (await review("list", "--data", str(beacon.data))).code == 0


def test_help_says_how_to_start_beacon_and_where_the_socket_is(capsys: pytest.CaptureFixture[str]) -> None:
    """beacon --help names twistd -n beacon, make run and the manual; beacon review --help the socket's order, BEACON_SOCKET included."""
    assert cli.main(["--help"]) == 0
    top = " ".join(capsys.readouterr().out.split())
    assert "twistd -n beacon" in top
    assert "make run in a source checkout" in top
    assert "The manual is docs/ in Beacon's source (make docs builds it)." in top
    assert cli.main(["review", "--help"]) == 0
    review_help = " ".join(capsys.readouterr().out.split())
    assert (
        "The operator socket is the first of: --socket PATH; --data DIR (DIR/operator.sock);"
        " the environment variable BEACON_SOCKET; ./beacon-data/operator.sock"
    ) in review_help


@pytest.mark.parametrize(
    "argv",
    [
        ["review"],
        ["review", "show"],
        ["review", "list", "--limit", "0"],
        ["review", "list", "--status", "pending"],
        ["review", "--socket", "a", "list", "--data", "b"],
        ["review", "frobnicate"],
        ["nothing"],
    ],
)
def test_cli_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Usage errors exit 2 with argparse's message, before anything is dialled."""
    assert cli.main(argv) == 2
    assert "error:" in capsys.readouterr().err


def test_cli_options_anywhere_after_review() -> None:
    """--socket, --data and --discovery work before or after the action."""
    before = cli.parse_args(["review", "--socket", "/s", "show", "X"])
    after = cli.parse_args(["review", "show", "X", "--socket", "/s"])
    assert before.socket == after.socket == "/s"
    assert cli.parse_args(["review", "--discovery", "f", "list"]).discovery == "f"


@pytest.mark.parametrize(
    ("given", "state"),
    [
        ("submitted", "TASK_STATE_SUBMITTED"),
        ("accepted", "TASK_STATE_COMPLETED"),
        ("Completed", "TASK_STATE_COMPLETED"),
        ("rejected", "TASK_STATE_REJECTED"),
        ("TASK_STATE_REJECTED", "TASK_STATE_REJECTED"),
        ("input-required", "TASK_STATE_INPUT_REQUIRED"),
    ],
)
def test_cli_status_names(given: str, state: str) -> None:
    """--status takes short names and full TaskState names."""
    assert _review.parse_state(given) == state


def test_cli_error_lines() -> None:
    """Each kind of client error reads as one plain sentence."""
    args = cli.parse_args(["review", "reject", "X\x1b"])
    assert _review.describe(Timeout("/s", 5), args) == "no answer from Beacon at /s within 5 s"
    assert _review.describe(TransportError("/s", "permission denied"), args) == (
        "cannot reach Beacon at /s: permission denied"
    )
    refused = RPCError(-32004, "already decided\x1b[2J", [])
    assert _review.describe(refused, args) == "cannot reject X\\x1b: already decided\\x1b[2J"
    bad = RPCError(
        -32602,
        "Invalid parameters",
        [{"@type": "type.googleapis.com/google.rpc.BadRequest",
          "fieldViolations": [{"field": "note", "description": "is too long"}]}],
    )
    assert _review.describe(bad, args) == "Beacon refused the request: note is too long"
    assert _review.describe(HTTPStatusError(502, "Bad Gateway"), args).startswith("unexpected answer")


def test_inert_text() -> None:
    """Control, format and separator characters print as escapes; show's body keeps newlines."""
    assert _text.inert("a\x1b[31mb\x9bc\u200bd\U000e0041") == "a\\x1b[31mb\\x9bc\\u200bd\\U000e0041"
    assert _text.inert("one\ntwo\r", newlines=True) == "one\ntwo\\x0d"
    assert _text.inert("one\ntwo") == "one\\x0atwo"
    assert _text.json_text({"k": "\x1b\x7f\u202e"}, indent=None) == '{"k":"\\u001b\\u007f\\u202e"}'
    assert _text.truncate("\u6f22\u5b57\u6f22\u5b57", 5) == "\u6f22\u5b57\u2026"


# The command, end to end: the installed script against a real twistd.


BEACON_SCRIPT = Path(sys.executable).parent / "beacon"
#: How long one command may take before the test gives up (a safety net:
#: the script imports Twisted and Beacon, which a loaded machine does slowly).
COMMAND_TIMEOUT = 120.0


def run_beacon(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the installed C{beacon} script, bounded."""
    return subprocess.run(
        [str(BEACON_SCRIPT), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        env=dict(os.environ, COLUMNS="120"),
    )


def post_text(port: int, text: str) -> str:
    """SendMessage a text through the public door of a Beacon process."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
        },
    }
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        connection.request(
            "POST",
            "/a2a/v1",
            body=json.dumps(body),
            headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
        )
        answer = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    task_id: str = answer["result"]["task"]["id"]
    return task_id


class Lines:
    """Reads a pipe line by line in a thread, so tests can wait on a line, bounded."""

    def __init__(self, pipe: Any) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = WAIT) -> str:
        """The first line containing C{text}; fails after C{timeout} seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no line with {text!r} in {self.lines!r}")
                self._changed.wait(remaining)

    def join(self) -> str:
        """Everything read, once the pipe has closed."""
        self._thread.join(WAIT)
        return "".join(self.lines)


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[BeaconLauncher]:
    """Starts twistd Beacons in C{tmp_path}; stops every one afterwards."""
    launcher = BeaconLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def assert_one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """Exit 1, nothing on stdout, one C{beacon:} line on stderr, no traceback."""
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("beacon: "), result.stderr
    return lines[0]


def test_e2e_review(launcher: BeaconLauncher, tmp_path: Path) -> None:
    """Against twistd: empty list, show, accept, a refused second decision, unknown id, usage."""
    process: Beacon = launcher.start()
    data = str(launcher.data)

    empty = run_beacon("review", "list", "--data", data, cwd=tmp_path)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "No submissions.\n", "")

    task_id = post_text(process.port, "Hello operator\x1b[31m\nsecond line")
    listed = run_beacon("review", "--data", data, "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()
    assert rows[1].split()[:2] == [task_id[:12], "submitted"]
    assert rows[1].endswith("Hello operator\\x1b[31m")

    shown = run_beacon("review", "show", task_id, "--data", data, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout
    assert shown.stdout.endswith("\nHello operator\\x1b[31m\nsecond line\n")
    assert "kind:     text" in shown.stdout.splitlines()
    as_json = run_beacon("review", "show", task_id, "--json", "--socket", f"{data}/operator.sock", cwd=tmp_path)
    assert json.loads(as_json.stdout)["id"] == task_id

    accepted = run_beacon("review", "accept", task_id, "--note", "thanks", "--data", data, cwd=tmp_path)
    assert (accepted.returncode, accepted.stdout, accepted.stderr) == (0, f"accepted {task_id}\n", "")
    again = run_beacon("review", "reject", task_id, "--data", data, cwd=tmp_path)
    assert "already decided" in assert_one_error_line(again)

    unknown = run_beacon("review", "show", "c" * 32, "--data", data, cwd=tmp_path)
    assert assert_one_error_line(unknown) == f"beacon: no submission with id {'c' * 32}"

    usage = run_beacon("review", "accept", "--data", data, cwd=tmp_path)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    assert usage.stderr == "beacon: give the ids to accept, or --matching with filters\n"


def test_e2e_unreachable_socket(tmp_path: Path) -> None:
    """Nothing running: exit 1 and one line naming the default socket, no traceback."""
    result = run_beacon("review", "list", cwd=tmp_path)
    expected = tmp_path / "beacon-data" / "operator.sock"
    assert assert_one_error_line(result) == (
        f"beacon: cannot reach Beacon at {expected} (the default): no such socket (is twistd"
        " beacon running? point to its socket with --socket PATH, --data DIR or BEACON_SOCKET=PATH)"
    )
    stale = tmp_path / "stale.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(stale))
        refused = run_beacon("review", "show", "x" * 36, "--socket", str(stale), cwd=tmp_path)
    finally:
        listener.close()
    assert "connection refused" in assert_one_error_line(refused)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run the command as another user",
)
def test_e2e_permission_denied(launcher: BeaconLauncher, tmp_path: Path) -> None:
    """Another user cannot reach root's socket: exit 1, 'permission denied'."""
    launcher.start()
    socket_path = launcher.data / "operator.sock"
    result = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(BEACON_SCRIPT),
         "review", "list", "--socket", str(socket_path)],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    assert assert_one_error_line(result) == (
        f"beacon: cannot reach Beacon at {socket_path}: permission denied"
    )


def test_e2e_follow_until_ctrl_c(launcher: BeaconLauncher, tmp_path: Path) -> None:
    """follow prints a line per event and exits 0, quietly, on SIGINT."""
    process = launcher.start()
    follow = subprocess.Popen(
        [str(BEACON_SCRIPT), "review", "follow", "--data", str(launcher.data)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = Lines(follow.stdout), Lines(follow.stderr)
        err.wait_for("following the inbox at")
        task_id = post_text(process.port, "live \x1b]0;title\x07 one")
        line = out.wait_for(task_id)
        assert "  new  " in line and "live \\x1b]0;title\\x07 one" in line
        decided = run_beacon("review", "reject", task_id, "--note", "no", "--data", str(launcher.data), cwd=tmp_path)
        assert decided.returncode == 0, decided.stderr
        out.wait_for("rejected")
        follow.send_signal(signal.SIGINT)
        assert follow.wait(WAIT) == 0
        assert "Traceback" not in err.join()
        assert out.join().splitlines()[-1].split()[2:5] == ["rejected", task_id, "note:"]
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(WAIT)
        for pipe in (follow.stdout, follow.stderr):
            if pipe is not None:
                pipe.close()


def test_e2e_follow_when_beacon_stops(launcher: BeaconLauncher, tmp_path: Path) -> None:
    """Beacon stopping under follow ends the stream cleanly; follow exits 1 with one line, no traceback."""
    process = launcher.start()
    follow = subprocess.Popen(
        [str(BEACON_SCRIPT), "review", "follow", "--data", str(launcher.data)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        err = Lines(follow.stderr)
        err.wait_for("following the inbox at")
        process.process.stop_cleanly()
        assert follow.wait(WAIT) == 1
        lines = err.join().splitlines()
        assert lines[1:] == [
            f"beacon: Beacon at {launcher.data / 'operator.sock'} ended the stream (is it stopping?)"
        ]
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(WAIT)
        for pipe in (follow.stdout, follow.stderr):
            if pipe is not None:
                pipe.close()


def test_e2e_bearer_door(launcher: BeaconLauncher, tmp_path: Path) -> None:
    """With [operator] http set, --discovery reaches the same inbox over loopback HTTP."""
    config = tmp_path / "beacon.toml"
    config.write_text('[operator]\nhttp = "tcp:0:interface=127.0.0.1"\n')
    process = launcher.start("--config", str(config))
    task_id = post_text(process.port, "through the bearer door")
    discovery = str(launcher.data / "operator-http.json")
    listed = run_beacon("review", "--discovery", discovery, "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].startswith(task_id[:12] + " ")
    missing = run_beacon("review", "list", "--discovery", str(tmp_path / "none.json"), cwd=tmp_path)
    assert "no such discovery file" in assert_one_error_line(missing)


def test_db_status_and_upgrade(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """beacon db status says a fresh store is behind (exit 1); upgrade migrates it; status is then current (exit 0)."""
    from beacon.cli import main
    from beacon.store._sqlite import SCHEMA_VERSION

    monkeypatch.chdir(tmp_path)
    assert main(["db", "status"]) == 1
    assert "schema version 0" in capsys.readouterr().out
    assert main(["db", "upgrade", "--data", "beacon-data"]) == 0
    assert f"schema version 0 -> {SCHEMA_VERSION}" in capsys.readouterr().out
    assert main(["db", "status"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_db_errors_are_one_line_without_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unreachable database is one line on stderr, exit 1, and never shows the password."""
    from beacon.cli import main

    code = main(["db", "status", "--store", "postgresql://beacon:hunter2@127.0.0.1:1/nowhere"])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.startswith("beacon: ")
    assert len(captured.err.splitlines()) == 1
    assert "hunter2" not in captured.err + captured.out
