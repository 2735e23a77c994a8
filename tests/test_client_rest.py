"""
The client's HTTP+JSON binding (C{beacon.client}, C{http+json}) against a
small twisted.web agent in the test that speaks its routes: the paths and
queries it sends, its headers and bodies, how errors are read (a
google.rpc.Status naming an A2A error is the same RPCError JSON-RPC
raises), its timeouts on an injected Clock and its caps on what it reads.

Network tests run on the real reactor with real loopback sockets; every
timeout under test runs on a L{Clock} that the test advances.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from beacon.client import (
    HTTP_JSON,
    A2AClient,
    ClientError,
    EventTooLarge,
    HTTPStatusError,
    RequestTooLarge,
    InvalidResponse,
    Limits,
    RPCError,
    Timeout,
    Timeouts,
    parse_card,
    text_message,
)
from beacon.client._rest import join_url, query_string

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
TASK = {"id": "t-1", "status": {"state": "TASK_STATE_SUBMITTED"}}


def a_card(url: str, **interface: Any) -> dict[str, Any]:
    return {
        "name": "REST agent",
        "supportedInterfaces": [
            {"url": url, "protocolBinding": HTTP_JSON, "protocolVersion": "1.0", **interface}
        ],
        "capabilities": {"streaming": True},
    }


def rest_client(url: str, **kwargs: Any) -> A2AClient:
    tenant = kwargs.pop("tenant", None)
    card = parse_card(a_card(url, **({"tenant": tenant} if tenant else {})))
    client = A2AClient.for_card(reactor, card, **kwargs)
    assert client.selected.kind == "http+json"
    return client


def status(code: int, name: str, message: str, reason: str | None = None, domain: str = "a2a-protocol.org", **more: Any) -> dict[str, Any]:
    """A google.rpc.Status body."""
    details: list[dict[str, Any]] = []
    if reason is not None:
        details.append({"@type": ERROR_INFO, "reason": reason, "domain": domain, **more})
    error: dict[str, Any] = {"code": code, "status": name, "message": message}
    if details:
        error["details"] = details
    return {"error": error}


class Agent(Resource):
    """
    Answers every request with C{answer(request, body)}; remembers each
    request (verb, raw target, headers, body) as it came.
    """

    isLeaf = True

    def __init__(self, answer: Any = None) -> None:
        super().__init__()
        self.answer = answer or default_answer
        self.requests: list[dict[str, Any]] = []
        self.arrived: Deferred[Any] = Deferred()
        self.lost: Deferred[None] = Deferred()

    def render(self, request: Any) -> Any:
        raw = request.content.read()
        self.requests.append(
            {
                "verb": request.method.decode(),
                "target": request.uri.decode(),
                "headers": {k.decode().lower(): [v.decode() for v in vs] for k, vs in request.requestHeaders.getAllRawHeaders()},
                "body": json.loads(raw) if raw else None,
            }
        )
        request.notifyFinish().addErrback(lambda _: self.lost.called or self.lost.callback(None))
        if not self.arrived.called:
            self.arrived.callback(request)
        return self.answer(request, raw)


def default_answer(request: Any, body: bytes) -> bytes:
    """A Task (in a SendMessageResponse for message:send)."""
    return json_answer(request, {"task": TASK} if b"message:send" in request.uri else TASK)


def json_answer(request: Any, document: Any, code: int = 200, media: bytes = b"application/a2a+json") -> bytes:
    request.setResponseCode(code)
    request.setHeader(b"content-type", media)
    return json.dumps(document).encode()


def sse_answer(*events: Any, end: bool = True, error: Any = None) -> Any:
    def answer(request: Any, body: bytes) -> Any:
        request.setHeader(b"content-type", b"text/event-stream")
        for event in events:
            request.write(b"data: " + json.dumps(event).encode() + b"\r\n\r\n")
        if error is not None:
            request.write(b"event: error\r\ndata: " + json.dumps(error).encode() + b"\r\n\r\n")
        if end:
            request.finish()
        return NOT_DONE_YET

    return answer


@pytest_twisted.async_yield_fixture
async def serve() -> AsyncIterator[Any]:
    """Serve a resource (or a protocol factory) on loopback; its base URL (ending in /)."""
    ports: list[Any] = []

    def start(thing: Any) -> str:
        factory = Site(thing) if isinstance(thing, Resource) else thing
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        ports.append(port)
        return f"http://127.0.0.1:{port.getHost().port}/"

    yield start
    for port in ports:
        await port.stopListening()


# 1. Routes, queries, headers and bodies.


def test_join_url() -> None:
    """Routes are relative to the interface URL, with or without its trailing slash; its own query is kept."""
    assert join_url("http://a/a2a/rest", "tasks/x") == "http://a/a2a/rest/tasks/x"
    assert join_url("http://a/a2a/rest/", "tasks/x") == "http://a/a2a/rest/tasks/x"
    assert join_url("http://a", "message:send") == "http://a/message:send"
    assert join_url("http://a/", "message:send") == "http://a/message:send"
    assert join_url("http://a/r?k=v", "tasks", "pageSize=2") == "http://a/r/tasks?k=v&pageSize=2"


def test_query_string() -> None:
    """§11.5: camelCase names as given, true/false, decimal numbers, strings percent-encoded, lists as repeated names, None left out; an object is refused."""
    assert query_string(
        {"includeArtifacts": True, "pageSize": 5, "historyLength": 0, "pageToken": None,
         "contextId": "a b&c=d/+é", "statusTimestampAfter": "2025-11-09T10:30:00Z", "tags": ["x", "y"]}
    ) == (
        "includeArtifacts=true&pageSize=5&historyLength=0&contextId=a%20b%26c%3Dd%2F%2B%C3%A9"
        "&statusTimestampAfter=2025-11-09T10%3A30%3A00Z&tags=x&tags=y"
    )
    assert query_string({"includeArtifacts": False}) == "includeArtifacts=false"
    with pytest.raises(ClientError, match="cannot be sent in a query"):
        query_string({"filter": {"a": 1}})


@pytest.mark.parametrize("suffix", ["a2a/rest", "a2a/rest/"])
@pytest_twisted.ensureDeferred
async def test_every_route(serve: Any, suffix: str) -> None:
    """Each of the eleven methods goes to its route below the interface URL (trailing slash or not), with its path parameters encoded whole."""

    def answer(request: Any, body: bytes) -> Any:
        if request.method == b"DELETE":
            request.setResponseCode(204)
            return b""
        if b":subscribe" in request.uri or b"message:stream" in request.uri:
            return sse_answer({"task": TASK})(request, body)
        if request.uri.endswith(b"/extendedAgentCard"):
            return json_answer(request, a_card("http://x/"))
        if b"pushNotificationConfigs" in request.uri:
            return json_answer(request, {"configs": []} if request.method == b"GET" and request.uri.endswith(b"Configs") else {"id": "c"})
        if request.uri.split(b"?")[0].endswith(b"/tasks"):
            return json_answer(request, {"tasks": [], "nextPageToken": ""})
        if b"message:send" in request.uri:
            return json_answer(request, {"task": TASK})
        return json_answer(request, TASK)

    agent = Agent(answer)
    base = serve(agent)
    client = rest_client(base + suffix)
    odd = "a/b:c d%"
    await client.send_message(text_message("hi"))
    await client.send_streaming_message(text_message("hi")).collect()
    await client.get_task(odd, history_length=3)
    await client.get_task("plain")
    await client.list_tasks(contextId="ctx", status="TASK_STATE_WORKING", pageSize=10, includeArtifacts=True)
    await client.cancel_task(odd, metadata={"why": "test"})
    await client.subscribe_to_task(odd).collect()
    await client.create_task_push_notification_config({"taskId": odd, "id": "c", "url": "https://hook.example/"})
    await client.get_task_push_notification_config(odd, "c/1")
    await client.list_task_push_notification_configs(odd, page_size=2, page_token="p q")
    assert await client.delete_task_push_notification_config(odd, "c/1") is None
    card = await client.get_extended_agent_card()
    assert card.name == "REST agent"
    enc = "a%2Fb%3Ac%20d%25"
    assert [(r["verb"], r["target"]) for r in agent.requests] == [
        ("POST", "/a2a/rest/message:send"),
        ("POST", "/a2a/rest/message:stream"),
        ("GET", f"/a2a/rest/tasks/{enc}?historyLength=3"),
        ("GET", "/a2a/rest/tasks/plain"),
        ("GET", "/a2a/rest/tasks?contextId=ctx&status=TASK_STATE_WORKING&pageSize=10&includeArtifacts=true"),
        ("POST", f"/a2a/rest/tasks/{enc}:cancel"),
        ("POST", f"/a2a/rest/tasks/{enc}:subscribe"),
        ("POST", f"/a2a/rest/tasks/{enc}/pushNotificationConfigs"),
        ("GET", f"/a2a/rest/tasks/{enc}/pushNotificationConfigs/c%2F1"),
        ("GET", f"/a2a/rest/tasks/{enc}/pushNotificationConfigs?pageSize=2&pageToken=p%20q"),
        ("DELETE", f"/a2a/rest/tasks/{enc}/pushNotificationConfigs/c%2F1"),
        ("GET", "/a2a/rest/extendedAgentCard"),
    ]
    bodies = [r["body"] for r in agent.requests]
    assert bodies[0]["message"]["parts"] == [{"text": "hi"}]
    # What the path carries is not repeated in the body.
    assert bodies[5] == {"metadata": {"why": "test"}}
    assert bodies[7] == {"id": "c", "url": "https://hook.example/"}
    assert [i for i, b in enumerate(bodies) if b is None] == [2, 3, 4, 6, 8, 9, 10, 11]


@pytest_twisted.ensureDeferred
async def test_headers_and_tenant(serve: Any) -> None:
    """Every request carries A2A-Version 1.0 and A2A-Extensions when asked; a body is application/a2a+json; a GET has no Content-Type; the interface's tenant is the first path segment, never in the body."""
    agent = Agent()
    client = rest_client(serve(agent) + "rest", tenant="acme/eu", extensions=["https://x/e1"], headers={"Authorization": "Bearer t"})
    await client.send_message(text_message("hi"))
    await client.get_task("t-1", extensions=["https://x/e2"])
    send, get = agent.requests
    assert send["target"] == "/rest/acme%2Feu/message:send"
    assert "tenant" not in send["body"]
    assert get["target"] == "/rest/acme%2Feu/tasks/t-1"
    for request in agent.requests:
        assert request["headers"]["a2a-version"] == ["1.0"]
        assert request["headers"]["authorization"] == ["Bearer t"]
    assert send["headers"]["content-type"] == ["application/a2a+json"]
    assert send["headers"]["accept"] == ["application/a2a+json, application/json"]
    assert "content-type" not in get["headers"]
    assert send["headers"]["a2a-extensions"] == ["https://x/e1"]
    assert get["headers"]["a2a-extensions"] == ["https://x/e1, https://x/e2"]


@pytest_twisted.ensureDeferred
async def test_stream_headers(serve: Any) -> None:
    """A stream asks for text/event-stream; SubscribeToTask is a POST without a body."""
    agent = Agent(sse_answer({"task": TASK}))
    client = rest_client(serve(agent))
    await client.subscribe_to_task("t-1").collect()
    (request,) = agent.requests
    assert request["headers"]["accept"] == ["text/event-stream"]
    assert "content-type" not in request["headers"]
    assert request["headers"].get("content-length", ["0"]) == ["0"]


@pytest_twisted.ensureDeferred
async def test_no_route_and_bad_parameters(serve: Any) -> None:
    """A method without an HTTP+JSON route, an empty id or an object in a query fails with a ClientError, and nothing is sent."""
    agent = Agent()
    client = rest_client(serve(agent))
    with pytest.raises(ClientError, match="has no route on the HTTP\\+JSON binding"):
        await client.call("example/Extension", {"a": 1})
    with pytest.raises(ClientError, match="needs id"):
        await client.get_task("")
    with pytest.raises(ClientError, match="cannot be sent in a query"):
        await client.list_tasks(contextId={"nested": True})
    assert agent.requests == []


# 2. Answers and errors.


@pytest_twisted.ensureDeferred
async def test_any_2xx_is_a_result(serve: Any) -> None:
    """201 and 202 answers (some servers send them) are results; so is an application/json one; an empty 2xx body is None."""
    codes = iter([(201, b"application/json"), (202, b"application/a2a+json; charset=utf-8")])

    def answer(request: Any, body: bytes) -> bytes:
        code, media = next(codes)
        return json_answer(request, {"task": TASK} if code == 201 else TASK, code, media)

    client = rest_client(serve(Agent(answer)))
    assert (await client.send_message(text_message("hi")))["task"]["id"] == "t-1"
    assert (await client.cancel_task("t-1"))["id"] == "t-1"


@pytest.mark.parametrize(
    "code, body, expected",
    [
        (404, status(404, "NOT_FOUND", "Task not found", "TASK_NOT_FOUND", metadata={"taskId": "t-9"}), (-32001, "TASK_NOT_FOUND")),
        (400, status(400, "FAILED_PRECONDITION", "no", "TASK_NOT_CANCELABLE"), (-32002, "TASK_NOT_CANCELABLE")),
        (400, status(400, "FAILED_PRECONDITION", "no", "UNSUPPORTED_OPERATION"), (-32004, "UNSUPPORTED_OPERATION")),
        (400, status(400, "FAILED_PRECONDITION", "1.0 only", "VERSION_NOT_SUPPORTED"), (-32009, "VERSION_NOT_SUPPORTED")),
        (400, status(400, "INVALID_ARGUMENT", "bad", "INVALID_PARAMS"), (-32602, "INVALID_PARAMS")),
        (500, status(500, "INTERNAL", "oops", "INTERNAL_ERROR"), (-32603, "INTERNAL_ERROR")),
        # A JSON-RPC error object where the Status should be: its code says which.
        (404, {"error": {"code": -32001, "message": "Task not found"}}, (-32001, None)),
        (404, {"code": -32001, "message": "Task not found"}, (-32001, None)),
        (200, {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Task not found"}}, (-32001, None)),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a2a_errors_are_rpc_errors(serve: Any, code: int, body: Any, expected: tuple[int, str | None]) -> None:
    """A Status whose ErrorInfo names an A2A error is the RPCError JSON-RPC would raise (code, reason, metadata), with the HTTP status kept."""
    client = rest_client(serve(Agent(lambda request, raw: json_answer(request, body, code, b"application/json"))))
    with pytest.raises(RPCError) as caught:
        await client.get_task("t-9")
    assert (caught.value.code, caught.value.reason) == expected
    assert caught.value.http_status == code
    if expected[1] == "TASK_NOT_FOUND":
        assert caught.value.metadata == {"taskId": "t-9"}
        assert caught.value.message == "Task not found"
        assert caught.value.status_name == "NOT_FOUND"


@pytest_twisted.ensureDeferred
async def test_other_errors_are_http_status_errors(serve: Any) -> None:
    """A Status naming no A2A error (another domain's reason, none) is an HTTPStatusError carrying its fields; a body that is no Status is a plain HTTPStatusError."""
    answers = iter(
        [
            (429, status(429, "RESOURCE_EXHAUSTED", "slow down", "RATE_LIMITED", domain="beacon.example")),
            (404, status(404, "NOT_FOUND", "no", "TASK_NOT_FOUND", domain="other.example")),
            (401, status(401, "UNAUTHENTICATED", "who are you")),
            (502, None),
        ]
    )

    def answer(request: Any, raw: bytes) -> bytes:
        code, body = next(answers)
        if body is None:
            request.setResponseCode(code)
            request.setHeader(b"content-type", b"text/html")
            return b"<html>Bad Gateway</html>"
        return json_answer(request, body, code, b"application/json")

    client = rest_client(serve(Agent(answer)))
    with pytest.raises(HTTPStatusError) as limited:
        await client.get_task("t")
    assert (limited.value.status, limited.value.status_name, limited.value.reason) == (429, "RESOURCE_EXHAUSTED", "RATE_LIMITED")
    assert limited.value.message == "slow down"
    assert "HTTP 429" in str(limited.value) and "slow down" in str(limited.value)
    with pytest.raises(HTTPStatusError) as foreign:
        await client.get_task("t")
    assert (foreign.value.status, foreign.value.reason) == (404, "TASK_NOT_FOUND")
    with pytest.raises(HTTPStatusError) as unauthenticated:
        await client.get_task("t")
    assert (unauthenticated.value.status, unauthenticated.value.status_name) == (401, "UNAUTHENTICATED")
    with pytest.raises(HTTPStatusError) as bare:
        await client.get_task("t")
    assert bare.value.status == 502 and bare.value.status_name is None
    assert str(bare.value).endswith("without an HTTP+JSON answer")


@pytest_twisted.ensureDeferred
async def test_too_large_is_request_too_large(serve: Any) -> None:
    """A 413 Status is a RequestTooLarge, with the limit when the message names it (Beacon's does)."""
    answers = iter(
        [
            status(413, "INVALID_ARGUMENT", "the request body exceeds 65536 bytes", "TOO_LARGE", domain="beacon.example"),
            status(413, "INVALID_ARGUMENT", "too big"),
        ]
    )
    client = rest_client(
        serve(Agent(lambda request, raw: json_answer(request, next(answers), 413, b"application/json")))
    )
    named = (await client.send_text("x")).error
    assert isinstance(named, RequestTooLarge)
    assert (named.status, named.limit) == (413, 65536)
    unnamed = (await client.send_text("x")).error
    assert isinstance(unnamed, RequestTooLarge) and unnamed.limit is None


@pytest_twisted.ensureDeferred
async def test_garbage_and_wrong_shapes(serve: Any) -> None:
    """A 2xx body that is not JSON, or not what the method answers, is an InvalidResponse."""
    answers = iter([b"\x00garbage{", json.dumps({"nope": 1}).encode()])
    client = rest_client(serve(Agent(lambda request, raw: next(answers))))
    with pytest.raises(InvalidResponse, match="not valid JSON"):
        await client.get_task("t")
    with pytest.raises(InvalidResponse, match="not what the method answers"):
        await client.get_task("t")


# 3. Streams.


@pytest_twisted.ensureDeferred
async def test_stream_events(serve: Any) -> None:
    """Each event's data is a bare StreamResponse; the end of the body ends the stream."""
    events = [{"task": TASK}, {"statusUpdate": {"taskId": "t-1", "status": {"state": "TASK_STATE_COMPLETED"}}}]
    client = rest_client(serve(Agent(sse_answer(*events))))
    assert await client.send_streaming_message(text_message("hi")).collect() == events


@pytest_twisted.ensureDeferred
async def test_stream_errors(serve: Any) -> None:
    """An error before the stream is the Status's RPCError; an error event mid-stream fails it after the events before; a JSON answer instead of a stream is an InvalidResponse."""
    not_found = status(404, "NOT_FOUND", "Task not found", "TASK_NOT_FOUND")
    answers = iter(
        [
            lambda request, raw: json_answer(request, not_found, 404, b"application/json"),
            sse_answer({"task": TASK}, error=status(500, "INTERNAL", "broke", "INTERNAL_ERROR")),
            lambda request, raw: json_answer(request, {"task": TASK}),
        ]
    )
    client = rest_client(serve(Agent(lambda request, raw: next(answers)(request, raw))))
    with pytest.raises(RPCError) as before:
        await client.subscribe_to_task("t-9").collect()
    assert (before.value.code, before.value.http_status) == (-32001, 404)
    stream = client.subscribe_to_task("t-1")
    assert await stream.__anext__() == {"task": TASK}
    with pytest.raises(RPCError) as during:
        await stream.__anext__()
    assert (during.value.code, during.value.reason, during.value.http_status) == (-32603, "INTERNAL_ERROR", 500)
    with pytest.raises(InvalidResponse, match="without a stream"):
        await client.subscribe_to_task("t-1").collect()


# 4. Time and size bounds.


@pytest_twisted.ensureDeferred
async def test_silent_agent_times_out_on_the_clock(serve: Any) -> None:
    """An agent that never answers: the response timeout fires on the Clock and the request is aborted."""
    agent = Agent(lambda request, raw: NOT_DONE_YET)
    clock = Clock()
    client = rest_client(serve(agent), clock=clock, timeouts=Timeouts(response=5))
    d = client.get_task("t")
    await agent.arrived
    clock.advance(4.9)
    assert not d.called
    clock.advance(0.1)
    with pytest.raises(Timeout) as caught:
        await d
    assert caught.value.phase == "answer"
    await agent.lost


@pytest_twisted.ensureDeferred
async def test_stream_first_event_and_idle_timeouts(serve: Any) -> None:
    """A stream without a first event fails when the first-event bound passes; after an event, a silence longer than the idle bound fails it (phase idle)."""

    def headers_only(request: Any, raw: bytes) -> Any:
        request.setHeader(b"content-type", b"text/event-stream")
        request.write(b": keepalive\r\n\r\n")
        return NOT_DONE_YET

    silent = Agent(headers_only)
    clock = Clock()
    client = rest_client(serve(silent), clock=clock, timeouts=Timeouts(response=3, idle=7))
    stream = client.subscribe_to_task("t")
    await silent.arrived
    clock.advance(3)
    with pytest.raises(Timeout) as first:
        await stream.collect()
    assert first.value.phase == "answer"
    await silent.lost

    one = Agent(sse_answer({"task": TASK}, end=False))
    client = rest_client(serve(one), clock=clock, timeouts=Timeouts(response=3, idle=7))
    stream = client.subscribe_to_task("t")
    assert await stream.__anext__() == {"task": TASK}
    clock.advance(6)
    waiting = Deferred.fromCoroutine(stream.__anext__())
    assert not waiting.called
    clock.advance(1)
    with pytest.raises(Timeout) as idle:
        await waiting
    assert idle.value.phase == "idle"
    await one.lost


@pytest_twisted.ensureDeferred
async def test_cancelling_aborts_the_request(serve: Any) -> None:
    """Cancelling a call's Deferred closes its connection."""
    agent = Agent(lambda request, raw: NOT_DONE_YET)
    client = rest_client(serve(agent), clock=Clock())
    d = client.send_message(text_message("x"))
    await agent.arrived
    d.cancel()
    with pytest.raises(CancelledError):
        await d
    await agent.lost


class Endless(Protocol):
    """Answers any request with C{head}, then C{chunk} over and over (never an end)."""

    def __init__(self, head: bytes, chunk: bytes) -> None:
        self.head = head
        self.chunk = chunk
        self.started = False

    def dataReceived(self, data: bytes) -> None:
        if not self.started:
            self.started = True
            self.transport.write(self.head)
            self.more()

    def more(self) -> None:
        if self.transport.connected and not self.transport.disconnecting:
            self.transport.write(self.chunk)
            reactor.callLater(0, self.more)


def endless(head: bytes, chunk: bytes) -> Factory:
    return Factory.forProtocol(lambda: Endless(head, chunk))


@pytest_twisted.ensureDeferred
async def test_oversize_bodies_are_refused(serve: Any) -> None:
    """An answer that never ends is cut at the body cap, an error answer too, and an SSE event at the event cap."""
    ok = serve(endless(b"HTTP/1.1 200 OK\r\nContent-Type: application/a2a+json\r\n\r\n", b" " * 65536))
    with pytest.raises(InvalidResponse, match="larger than 262144 bytes"):
        await rest_client(ok, limits=Limits(body=256 * 1024)).get_task("t")
    failing = serve(endless(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n", b" " * 65536))
    with pytest.raises(InvalidResponse, match="larger than"):
        await rest_client(failing, limits=Limits(body=256 * 1024)).get_task("t")
    events = serve(endless(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ", b"x" * 65536))
    with pytest.raises(EventTooLarge):
        await rest_client(events, limits=Limits(event=128 * 1024)).subscribe_to_task("t").collect()


@pytest_twisted.ensureDeferred
async def test_send_text_over_rest(serve: Any) -> None:
    """send_text works over HTTP+JSON and never fails: a refusal is a not-ok Outcome with the RPCError."""
    answers = iter(
        [
            lambda request, raw: json_answer(request, {"task": {**TASK, "artifacts": [{"parts": [{"text": "ok"}]}]}}),
            lambda request, raw: json_answer(request, status(400, "INVALID_ARGUMENT", "bad", "INVALID_PARAMS"), 400),
        ]
    )
    client = rest_client(serve(Agent(lambda request, raw: next(answers)(request, raw))))
    outcome = await client.send_text("hello")
    assert outcome.ok and outcome.text == "ok"
    refused = await client.send_text("hello")
    assert not refused.ok and isinstance(refused.error, RPCError) and refused.error.code == -32602
