"""
Several Beacon instances on one PostgreSQL database, end to end.

Two ways of running two instances:

  - two service trees in this process's reactor (L{beacon.service.makeService}
    twice, each with its own data directory, loopback port and operator
    socket, one store URL): submissions over real HTTP through both, the
    operator's views over both real unix sockets, a live follower (the
    operator policy's C{beacon.inbox.Follow} through a L{Dispatcher}) on one
    instance that sees what arrives through the other, and one instance
    stopped while the other keeps serving;
  - two real C{twistd -n beacon --store URL} processes, spoken to over
    blocking sockets (HTTP over TCP, HTTP over the operator's unix
    sockets, the live inbox stream as SSE), the way operators run them.

Each test gets a fresh schema of this run's database (see
C{peers.postgres}); every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from peers.postgres import pg_schema, pg_url, postgresql  # noqa: F401 (fixtures)
from peers.process import BeaconLauncher
from treq.client import HTTPClient
from twisted.application.service import MultiService
from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.internet.error import ConnectError
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer

from beacon.config import build_config
from beacon.intake import EXTENSION_METHODS, OperatorPolicy
from beacon.intake._operator import INBOX_EVENTS_EXTENSION, REVIEW_EXTENSION
from beacon.protocol import CallContext, CollectingSink, Dispatcher, StreamAnswer
from beacon.service import Listeners, makeService
from beacon.store import ISubmissionStore, PostgreSQLStore

#: How long a test waits for one thing to happen, in seconds: a safety net
#: for a loaded machine, never what a test measures.
WAIT = 60.0

BOTH_EXTENSIONS = frozenset({REVIEW_EXTENSION, INBOX_EVENTS_EXTENSION})
JSON_HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}


def rpc_body(method: str, params: dict[str, Any] | None = None) -> bytes:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        request["params"] = params
    return json.dumps(request).encode()


def send_params(text: str) -> dict[str, Any]:
    return {
        "message": {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
    }


# Two service trees in one reactor.


@implementer(IAgentEndpointFactory)
class _DialSocket:
    """Dials one unix socket whatever the URL says."""

    def __init__(self, path: str) -> None:
        self._path = path

    def endpointForURI(self, uri: Any) -> UNIXClientEndpoint:
        return UNIXClientEndpoint(reactor, self._path)


@dataclass
class Instance:
    """One started Beacon service tree."""

    name: str
    service: MultiService
    port: int
    socket_path: str
    store: PostgreSQLStore

    def tcp(self) -> HTTPClient:
        return HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))

    def operator(self) -> HTTPClient:
        pool = HTTPConnectionPool(reactor, persistent=False)
        return HTTPClient(
            Agent.usingEndpointFactory(reactor, _DialSocket(self.socket_path), pool=pool)
        )

    async def submit(self, text: str) -> str:
        """SendMessage through the public HTTP door; the receipt's id."""
        response = await self.tcp().post(
            f"http://127.0.0.1:{self.port}/a2a/v1",
            rpc_body("SendMessage", send_params(text)),
            headers=JSON_HEADERS,
        )
        answer = await response.json()
        assert "result" in answer, answer
        task_id: str = answer["result"]["task"]["id"]
        return task_id

    async def public_state(self, task_id: str) -> str:
        """The public GetTask's state."""
        response = await self.tcp().post(
            f"http://127.0.0.1:{self.port}/a2a/v1",
            rpc_body("GetTask", {"id": task_id}),
            headers=JSON_HEADERS,
        )
        answer = await response.json()
        state: str = answer["result"]["status"]["state"]
        return state

    async def op(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One operator call over the unix socket; its result."""
        response = await self.operator().post(
            "http://operator/",
            rpc_body(method, params),
            headers={**JSON_HEADERS, "A2A-Extensions": ", ".join(sorted(BOTH_EXTENSIONS))},
        )
        answer = await response.json()
        assert "result" in answer, answer
        return answer["result"]


def start_instance(name: str, directory: str, url: str) -> Instance:
    """makeService's tree on C{url}, started."""
    data_dir = os.path.join(directory, name)
    config = build_config(
        data_dir=data_dir,
        http=["tcp:0:interface=127.0.0.1"],
        public_url="http://127.0.0.1:1",
        store_url=url,
    )
    service = makeService(config, reactor)
    service.startService()
    children = list(service)
    [store] = [s for s in children if ISubmissionStore.providedBy(s)]
    assert isinstance(store, PostgreSQLStore)
    http = next(s for s in children if isinstance(s, Listeners))
    return Instance(
        name,
        service,
        http.ports[0].getHost().port,
        os.path.join(data_dir, "operator.sock"),
        store,
    )


class WaitingSink(CollectingSink):
    """A CollectingSink a test can wait on."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: list[tuple[Callable[[list[Any]], bool], Deferred[None]]] = []

    def event(self, result: Any) -> None:
        super().event(result)
        still = []
        for check, waiter in self._waiting:
            if check(self.events):
                waiter.callback(None)
            else:
                still.append((check, waiter))
        self._waiting = still

    def until(self, check: Callable[[list[Any]], bool]) -> Deferred[None]:
        """Fire once C{check(events)} holds (bounded)."""
        waiter: Deferred[None] = Deferred()
        if check(self.events):
            waiter.callback(None)
            return waiter
        self._waiting.append((check, waiter))
        return waiter.addTimeout(WAIT, reactor)


def described(events: list[Any]) -> list[tuple[str, str]]:
    """A follow stream's events as (kind, task id)."""
    return [
        ("task", e["task"]["id"]) if "task" in e else ("status", e["statusUpdate"]["taskId"])
        for e in events
    ]


async def follow(instance: Instance) -> tuple[WaitingSink, StreamAnswer]:
    """Follow the inbox live on C{instance}, through its operator policy."""
    dispatcher = Dispatcher(OperatorPolicy(instance.store, reactor), EXTENSION_METHODS)
    context = CallContext("test", "operator", "1.0", BOTH_EXTENSIONS)
    answer = await dispatcher.dispatch(rpc_body("beacon.inbox.Follow"), context)
    assert isinstance(answer, StreamAnswer)
    sink = WaitingSink()
    answer.stream.attach(sink)
    return sink, answer


@pytest_twisted.async_yield_fixture
async def pair(pg_url: str, short_dir: str) -> AsyncIterator[tuple[Instance, Instance]]:
    """Two instances on one database, started; stopped afterwards."""
    a = start_instance("a", short_dir, pg_url)
    try:
        b = start_instance("b", short_dir, pg_url)
    except BaseException:
        await a.service.stopService()
        raise
    yield a, b
    for instance in (b, a):
        if instance.service.running:
            await instance.service.stopService()


@pytest_twisted.ensureDeferred
async def test_two_instances_share_one_inbox(pair: tuple[Instance, Instance]) -> None:
    """
    Submissions through either instance are visible to the operator on
    both, a live follower on A sees what arrives through B (and B's
    decision), and A keeps serving once B is stopped.
    """
    a, b = pair
    sink, answer = await follow(a)

    through_a = await a.submit("first, through A")
    through_b = await b.submit("second, through B")
    at_once = await gatherResults(
        [
            Deferred.fromCoroutine((a if n % 2 else b).submit(f"concurrent {n}"))
            for n in range(10)
        ]
    )
    every = {through_a, through_b, *at_once}
    assert len(every) == 12

    for instance in (a, b):
        listed = await instance.op("ListTasks", {"pageSize": 50})
        assert {task["id"] for task in listed["tasks"]} == every
        assert listed["totalSize"] == 12
        task = await instance.op("GetTask", {"id": through_b if instance is a else through_a})
        expected = "second, through B" if instance is a else "first, through A"
        assert expected in json.dumps(task)

    await sink.until(lambda events: {i for _, i in described(events)} >= every)
    assert sorted(described(sink.events)) == sorted(("task", i) for i in every)
    assert described(sink.events)[:2] == [("task", through_a), ("task", through_b)]

    decided = await b.op("beacon.review.Decide", {"id": through_a, "decision": "accept"})
    assert decided["status"]["state"] == "TASK_STATE_COMPLETED"
    await sink.until(lambda events: ("status", through_a) in described(events))
    assert await a.public_state(through_a) == "TASK_STATE_COMPLETED"
    assert await a.public_state(through_b) == "TASK_STATE_SUBMITTED"

    await b.service.stopService()
    with pytest.raises(ConnectError):
        await b.submit("B is gone")
    after = await a.submit("after B stopped")
    await sink.until(lambda events: ("task", after) in described(events))
    listed = await a.op("ListTasks", {"pageSize": 1})
    assert [task["id"] for task in listed["tasks"]] == [after]
    assert listed["totalSize"] == 13
    answer.stream.cancel()
    # Exactly once each, across instances.
    assert len(described(sink.events)) == len(set(described(sink.events))) == 14


# Two twistd processes.


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix socket."""

    def __init__(self, path: str, timeout: float = WAIT) -> None:
        super().__init__("operator", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def blocking_rpc(connection: http.client.HTTPConnection, path: str, body: bytes) -> Any:
    """POST one JSON-RPC request; its result."""
    headers = {**JSON_HEADERS, "A2A-Extensions": ", ".join(sorted(BOTH_EXTENSIONS))}
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    assert "result" in response, response
    return response["result"]


def submit_to(port: int, text: str) -> str:
    result = blocking_rpc(
        http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT),
        "/a2a/v1",
        rpc_body("SendMessage", send_params(text)),
    )
    task_id: str = result["task"]["id"]
    return task_id


class SSEFollower:
    """beacon.inbox.Follow over an operator socket, read as raw bytes."""

    def __init__(self, path: str) -> None:
        body = rpc_body("beacon.inbox.Follow")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(WAIT)
        self.sock.connect(path)
        self.sock.sendall(
            b"POST / HTTP/1.1\r\nHost: operator\r\nA2A-Version: 1.0\r\n"
            b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            + f"A2A-Extensions: {INBOX_EVENTS_EXTENSION}\r\n".encode()
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        self.received = b""

    def wait_for(self, text: str) -> None:
        """Read until C{text} has arrived (bounded)."""
        deadline = time.monotonic() + WAIT
        while text.encode() not in self.received:
            assert time.monotonic() < deadline, f"{text} never arrived: {self.received!r}"
            chunk = self.sock.recv(65536)
            assert chunk, f"the stream ended before {text}: {self.received!r}"
            self.received += chunk

    def close(self) -> None:
        self.sock.close()


def test_two_twistd_processes(tmp_path: Path, pg_url: str) -> None:
    """
    Two `twistd -n beacon --store postgresql://...` processes on different
    ports share one inbox: each answers for submissions made through the
    other, the live inbox stream on one carries the other's submissions, and
    one keeps serving after the other is stopped.
    """
    launchers = [BeaconLauncher(tmp_path / name) for name in ("a", "b")]
    for launcher in launchers:
        launcher.cwd.mkdir()
    try:
        a, b = (launcher.start("--store", pg_url) for launcher in launchers)
        sockets = [str(launcher.data / "operator.sock") for launcher in launchers]
        follower = SSEFollower(sockets[0])
        try:
            through_a = submit_to(a.port, "through A")
            through_b = submit_to(b.port, "through B")
            follower.wait_for(through_b)
            for path in sockets:
                listed = blocking_rpc(
                    UnixHTTPConnection(path), "/", rpc_body("ListTasks", {"pageSize": 10})
                )
                assert {task["id"] for task in listed["tasks"]} == {through_a, through_b}
            assert "store.opened: submission store postgresql://" in a.log
            b.process.stop_cleanly()
            after = submit_to(a.port, "after B stopped")
            follower.wait_for(after)
        finally:
            follower.close()
        listed = blocking_rpc(
            UnixHTTPConnection(sockets[0]), "/", rpc_body("ListTasks", {"pageSize": 10})
        )
        assert listed["totalSize"] == 3
    finally:
        for launcher in launchers:
            launcher.close()
