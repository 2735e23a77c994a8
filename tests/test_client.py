"""
The outbound A2A client (C{beacon.client}): cards, interface selection, and
calls against Beacon over each binding it serves, against an agent on the
official a2a-sdk, and against hostile fakes on loopback.

Network tests run on the real reactor with real loopback sockets; every
timeout under test runs on a L{Clock} that the test advances, so nothing
sleeps. Only the a2a-sdk agent (a subprocess) is waited for, boundedly.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_twisted
from peers.sdk_agent import sdk_agent as start_sdk_agent
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred, gatherResults
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.web.pages import notFound
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from beacon.client import (
    DEFAULT_PREFERENCE,
    HTTP_JSON,
    LEGACY_WEBSOCKET,
    UNIX_BINDING,
    WEBSOCKET_BINDING,
    A2AClient,
    ClientError,
    EventTooLarge,
    HTTPStatusError,
    InvalidCard,
    InvalidResponse,
    Limits,
    NoCompatibleInterface,
    RPCError,
    Timeout,
    Timeouts,
    TransportError,
    card_url,
    fetch_card,
    parse_card,
    select_interface,
    text_message,
)
from beacon.config import build_config
from beacon.service import makeService



def a_card(interfaces: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    """A valid 1.0 card with C{interfaces}."""
    card = {
        "name": "Test agent",
        "description": "For tests.",
        "version": "1.2.3",
        "supportedInterfaces": interfaces,
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["application/json"],
        "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}],
    }
    card.update(more)
    return card


def jsonrpc(url: str, version: str = "1.0") -> dict[str, Any]:
    return {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": version}


# 1. Cards.


def test_card_keeps_everything() -> None:
    """A parsed card keeps capabilities, extensions, skills, security schemes and unknown members."""
    card = parse_card(
        a_card(
            [dict(jsonrpc("https://a.example/rpc"), tenant="t1", futureField=1)],
            capabilities={
                "streaming": True,
                "pushNotifications": False,
                "extendedAgentCard": True,
                "extensions": [{"uri": "https://x/ext", "required": True, "params": {"a": 1}}],
                "somethingNew": "kept",
            },
            provider={"organization": "Org", "url": "https://org.example"},
            securitySchemes={"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
            securityRequirements=[{"schemes": {"bearer": {"list": []}}}],
            xVendor={"k": "v"},
        )
    )
    assert card.name == "Test agent" and card.version == "1.2.3"
    assert card.supported_interfaces[0].tenant == "t1"
    assert card.supported_interfaces[0].extra == {"futureField": 1}
    assert card.capabilities.streaming and card.capabilities.extended_agent_card
    assert card.capabilities.extensions[0].uri == "https://x/ext"
    assert card.capabilities.extensions[0].required
    assert card.capabilities.extra == {"somethingNew": "kept"}
    assert card.skills[0].tags == ("t",)
    assert card.security_schemes["bearer"].summary() == "http Bearer"
    assert card.provider is not None and card.provider.organization == "Org"
    assert card.extra == {"xVendor": {"k": "v"}}
    assert card.raw["xVendor"] == {"k": "v"}


@pytest.mark.parametrize(
    "document, problem",
    [
        ([], "the card is not a JSON object"),
        ({"description": "x"}, "name is missing"),
        (a_card([], name=""), "name is empty"),
        (a_card([]), "supportedInterfaces is missing or empty"),
        ({"name": "old", "url": "https://x", "protocolVersion": "0.3"}, "(an A2A 0.3 card?)"),
        (a_card([{"url": "https://x"}]), "supportedInterfaces[0].protocolBinding is missing"),
        (a_card([jsonrpc("https://x")], capabilities={"streaming": "yes"}), "capabilities.streaming is not a boolean"),
        (a_card([jsonrpc("https://x")], skills=[{"name": "n"}]), "skills[0].id is missing"),
        (a_card([jsonrpc("https://x")], defaultInputModes="text"), "defaultInputModes is not a list"),
    ],
)
def test_invalid_cards(document: Any, problem: str) -> None:
    """A card without what A2A 1.0 requires, or with a member of the wrong type, is an InvalidCard saying what."""
    with pytest.raises(InvalidCard) as caught:
        parse_card(document, "https://a.example/card")
    assert problem in str(caught.value)


def test_card_url() -> None:
    """A base URL gets the well-known path; a card's own URL is kept."""
    assert card_url("https://a.example") == "https://a.example/.well-known/agent-card.json"
    assert card_url("https://a.example/x/") == "https://a.example/x/.well-known/agent-card.json"
    assert card_url("https://a.example/card.json") == "https://a.example/card.json"


# 2. Interface selection.


def http_json(url: str) -> dict[str, str]:
    return {"url": url, "protocolBinding": HTTP_JSON, "protocolVersion": "1.0"}


def test_selection_follows_the_cards_order() -> None:
    """By default the card's first interface this client can use is chosen (A2A 1.0 §8.3), whichever binding it is: HTTP+JSON before JSON-RPC when the card lists it first, JSON-RPC when it comes first."""
    rest_first = parse_card(a_card([http_json("https://a.example/rest"), jsonrpc("https://a.example/rpc")]))
    chosen = select_interface(rest_first)
    assert (chosen.kind, chosen.interface.url) == ("http+json", "https://a.example/rest")
    rpc_first = parse_card(a_card([jsonrpc("https://a.example/rpc"), http_json("https://a.example/rest")]))
    chosen = select_interface(rpc_first)
    assert (chosen.kind, chosen.interface.url) == ("jsonrpc", "https://a.example/rpc")
    ws_first = parse_card(
        a_card([{"url": "wss://a.example/ws", "protocolBinding": LEGACY_WEBSOCKET, "protocolVersion": "1.0"}, jsonrpc("https://a.example/rpc")])
    )
    assert select_interface(ws_first).kind == "websocket"
    # Within a binding too: the card's first entry.
    two = parse_card(a_card([jsonrpc("https://a.example/rpc"), jsonrpc("https://a.example/rpc2")]))
    assert select_interface(two).interface.url == "https://a.example/rpc"
    # DEFAULT_PREFERENCE names every binding the client implements, ranking none.
    assert set(DEFAULT_PREFERENCE) == {"jsonrpc", "http+json", "websocket", "unix", "grpc"}


def test_selection_skips_the_entries_it_cannot_use() -> None:
    """Entries of a binding the client does not implement, of a version not 1.x, with a URL the binding cannot dial, or of the unix binding without a configured socket, are skipped: the first usable one after them is chosen."""
    card = parse_card(
        a_card(
            [
                {"url": "https://a.example/x", "protocolBinding": "https://example.com/b/v9", "protocolVersion": "1.0"},
                jsonrpc("https://a.example/old", "0.3"),
                {"url": "ws://a.example/", "protocolBinding": HTTP_JSON, "protocolVersion": "1.0"},
                {"url": "unix:///card.sock", "protocolBinding": UNIX_BINDING, "protocolVersion": "1.0"},
                http_json("https://a.example/rest"),
                jsonrpc("https://a.example/rpc"),
            ]
        )
    )
    chosen = select_interface(card)
    assert (chosen.kind, chosen.interface.url) == ("http+json", "https://a.example/rest")
    # With a socket configured, the unix entry is usable, and comes first.
    assert select_interface(card, socket_path="/mine.sock").kind == "unix"


def test_a_preference_overrides_the_cards_order() -> None:
    """The caller's bindings (--binding, preference=) are chosen in the caller's order, whatever the card's, and only they are considered."""
    card = parse_card(
        a_card(
            [
                {"url": "x:1", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "wss://a.example/ws", "protocolBinding": LEGACY_WEBSOCKET, "protocolVersion": "1.0"},
                http_json("https://a.example/rest"),
                jsonrpc("https://a.example/rpc"),
                jsonrpc("https://a.example/rpc2"),
            ]
        )
    )
    assert select_interface(card, ["jsonrpc"]).interface.url == "https://a.example/rpc"
    chosen = select_interface(card, ["jsonrpc", "http+json"])
    assert (chosen.kind, chosen.interface.url) == ("jsonrpc", "https://a.example/rpc")
    assert select_interface(card, ["http+json", "jsonrpc"]).kind == "http+json"
    assert select_interface(card, ["websocket", "jsonrpc"]).interface.url == "wss://a.example/ws"
    # The card's spellings and any case name a binding too.
    assert select_interface(card, ["HTTP+JSON"]).kind == "http+json"
    assert select_interface(card, ["WEBSOCKET"]).kind == "websocket"
    assert select_interface(card, ["grpc"]).kind == "grpc"
    with pytest.raises(NoCompatibleInterface, match="not among the bindings asked for"):
        select_interface(parse_card(a_card([http_json("https://a.example/rest")])), ["jsonrpc"])
    with pytest.raises(ValueError, match="unknown binding 'pigeon'"):
        select_interface(card, ["pigeon"])


def test_only_unknown_bindings_is_no_compatible_interface() -> None:
    """A card listing only bindings this client does not implement gives NoCompatibleInterface, saying why."""
    card = parse_card(
        a_card(
            [
                {"url": "ws://x:1", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "https://a/", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
                {"url": "https://a/", "protocolBinding": "https://example.com/b/v9", "protocolVersion": "1.0"},
                {"url": "ws://a/", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            ]
        )
    )
    with pytest.raises(NoCompatibleInterface) as caught:
        select_interface(card)
    assert len(caught.value.skipped) == 4
    assert "GRPC 1.0: not a host:port or http(s) URL" in str(caught.value)
    assert "https://example.com/b/v9 1.0: binding not implemented" in str(caught.value)
    assert "HTTP+JSON 0.3: protocolVersion is not 1.x" in str(caught.value)
    assert "HTTP+JSON 1.0: not an http(s) URL" in str(caught.value)


def test_unix_interface_needs_a_configured_socket() -> None:
    """A unix interface is usable only with a configured path, and is dialled there, not where the card says."""
    card = parse_card(a_card([{"url": "unix:///card/path.sock", "protocolBinding": UNIX_BINDING, "protocolVersion": "1.0"}]))
    with pytest.raises(NoCompatibleInterface, match="no socket path configured"):
        select_interface(card)
    selected = select_interface(card, socket_path="/mine.sock")
    assert (selected.kind, selected.address) == ("unix", "/mine.sock")


# 3. Beacon, in process, over each binding it serves.


@pytest_twisted.async_yield_fixture
async def beacon(short_dir: str, logged_events: Any) -> AsyncIterator[tuple[str, str]]:
    """
    makeService's tree on a loopback port: (public URL, operator socket
    path). No rate limit: these tests make more calls than its burst.
    """
    config = build_config({"limits": {"rate": 0}}, data_dir=short_dir, http=["tcp:0:interface=127.0.0.1"])
    service = makeService(config, reactor)
    service.startService()
    started = logged_events.named("beacon.started")
    assert started, "Beacon did not start"
    yield started[0]["public_url"], os.path.join(short_dir, "operator.sock")
    await service.stopService()


@pytest.mark.parametrize("binding", ["jsonrpc", "http+json", "websocket"])
@pytest_twisted.ensureDeferred
async def test_beacon_public_bindings(beacon: tuple[str, str], binding: str) -> None:
    """Over JSON-RPC, HTTP+JSON and WebSocket, Beacon's card is discovered, a message sent, its task read, an unknown task refused."""
    url, _ = beacon
    client = await A2AClient.discover(reactor, url, preference=[binding])
    assert client.card is not None and client.card.name
    assert client.selected.kind == binding
    try:
        answer = await client.send_message(text_message("hello from the client"))
        task = answer["task"]
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
        got = await client.get_task(task["id"])
        assert got["id"] == task["id"]
        with pytest.raises(RPCError) as caught:
            await client.get_task("no-such-task")
        assert caught.value.code == -32001 and caught.value.reason == "TASK_NOT_FOUND"
        outcome = await client.send_text("and again")
        assert outcome.ok and outcome.task is not None
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_beacon_refuses_alike_over_every_binding(beacon: tuple[str, str]) -> None:
    """Beacon's public policy answers every method the same over JSON-RPC, HTTP+JSON and WebSocket: the same results, and refusals that are the same RPCError (code and reason) on each."""
    url, _ = beacon
    clients = {
        binding: await A2AClient.discover(reactor, url, preference=[binding])
        for binding in ("jsonrpc", "http+json", "websocket")
    }
    assert clients["http+json"].selected.interface.protocol_binding == HTTP_JSON
    assert clients["http+json"].address == url + "/a2a/rest"
    try:
        sent = await clients["jsonrpc"].send_message(text_message("one for every binding"))
        task_id = sent["task"]["id"]
        outcomes: dict[str, list[Any]] = {}
        for binding, client in clients.items():
            seen: list[Any] = [(await client.get_task(task_id))["status"]["state"]]
            seen.append(await client.list_tasks(pageSize=5))
            calls = [
                lambda: client.get_task("no-such-task"),
                lambda: client.get_task(task_id + "x", history_length=2),
                lambda: client.cancel_task(task_id),
                lambda: client.cancel_task("no-such-task"),
                lambda: client.send_message(dict(text_message("t"), taskId=task_id)),
                lambda: client.get_task_push_notification_config(task_id, "c"),
                lambda: client.list_task_push_notification_configs(task_id),
                lambda: client.delete_task_push_notification_config(task_id, "c"),
                lambda: client.create_task_push_notification_config({"taskId": task_id, "url": "https://hook.example/"}),
                lambda: client.get_extended_agent_card(),
            ]
            for call in calls:
                with pytest.raises(RPCError) as caught:
                    await call()
                seen.append((caught.value.code, caught.value.reason))
            for stream in (client.subscribe_to_task(task_id), client.send_streaming_message(text_message("s"))):
                with pytest.raises(RPCError) as refused:
                    await stream.collect()
                seen.append((refused.value.code, refused.value.reason))
            outcomes[binding] = seen
        assert outcomes["http+json"] == outcomes["jsonrpc"] == outcomes["websocket"]
        assert outcomes["jsonrpc"][0] == "TASK_STATE_SUBMITTED"
        assert outcomes["jsonrpc"][2:5] == [(-32001, "TASK_NOT_FOUND"), (-32001, "TASK_NOT_FOUND"), (-32002, "TASK_NOT_CANCELABLE")]
        assert outcomes["jsonrpc"][-2:] == [(-32004, "UNSUPPORTED_OPERATION")] * 2
    finally:
        for client in clients.values():
            await client.close()


@pytest_twisted.ensureDeferred
async def test_websocket_calls_in_flight_share_one_connection(beacon: tuple[str, str]) -> None:
    """Many calls in flight over WebSocket go on one connection and are each answered by id."""
    url, _ = beacon
    client = await A2AClient.discover(reactor, url, preference=["websocket"])
    try:
        sent = await gatherResults([client.send_message(text_message(f"m{i}")) for i in range(6)])
        ids = [s["task"]["id"] for s in sent]
        got = await gatherResults([client.get_task(i) for i in ids])
        assert [g["id"] for g in got] == ids
        assert len(client._transport._connections) == 1  # type: ignore[union-attr]
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_websocket_message_cap(beacon: tuple[str, str]) -> None:
    """A WebSocket message over the client's cap fails the call with InvalidResponse."""
    url, _ = beacon
    client = await A2AClient.discover(reactor, url, preference=["websocket"], limits=Limits(message=70))
    try:
        with pytest.raises(ClientError, match="request is larger than"):
            await client.send_message(text_message("a request longer than 70 bytes"))
        with pytest.raises(InvalidResponse, match="larger than 70 bytes"):
            await client.list_tasks()
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_beacon_operator_socket(beacon: tuple[str, str]) -> None:
    """Over the operator socket: its card, ListTasks, GetTask, and a SubscribeToTask stream starting with the task."""
    url, socket_path = beacon
    public = await A2AClient.discover(reactor, url)
    sent = await public.send_message(text_message("for the operator"))
    client = await A2AClient.discover(reactor, "unix://" + socket_path)
    assert client.selected.kind == "unix" and client.address == socket_path
    page = await client.list_tasks()
    assert [t["id"] for t in page["tasks"]] == [sent["task"]["id"]]
    task = await client.get_task(sent["task"]["id"])
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    stream = client.subscribe_to_task(task["id"])
    first = await stream.__anext__()
    assert first["task"]["id"] == task["id"]
    stream.cancel()
    assert await stream.collect() == []


# 4. The a2a-sdk reference server.


@pytest.fixture
def sdk_agent() -> Iterator[str]:
    """The a2a-sdk test agent (JSON-RPC and HTTP+JSON) on loopback; its base URL."""
    with start_sdk_agent() as url:
        yield url


@pytest_twisted.ensureDeferred
async def test_a2a_sdk_agent(sdk_agent: str) -> None:
    """Against the a2a-sdk: its card lists HTTP+JSON first, so HTTP+JSON is chosen by default; over JSON-RPC (asked for) SendMessage, GetTask and SendStreamingMessage work, and send_text reads the artifact."""
    default = await A2AClient.discover(reactor, sdk_agent)
    assert default.card is not None and default.card.supported_interfaces[0].protocol_binding == HTTP_JSON
    assert default.selected.kind == "http+json" and default.address.endswith("/a2a/rest")
    client = await A2AClient.discover(reactor, sdk_agent, preference=["jsonrpc"])
    assert client.card is not None and client.card.capabilities.streaming
    assert client.selected.kind == "jsonrpc"
    answer = await client.send_message(text_message("hi"))
    task = await client.get_task(answer["task"]["id"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    events = await client.send_streaming_message(text_message("streamed")).collect()
    assert list(events[0]) == ["task"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert any("artifactUpdate" in e for e in events)
    outcome = await client.send_text("yo")
    assert outcome.ok and outcome.text == "echo: yo"


@pytest_twisted.ensureDeferred
async def test_a2a_sdk_agent_over_http_json(sdk_agent: str) -> None:
    """Against the a2a-sdk's REST routes: every method it serves answers as over JSON-RPC, and its errors are the same RPCErrors (code, reason) over both bindings."""
    rest = await A2AClient.discover(reactor, sdk_agent, preference=["http+json"])
    rpc = await A2AClient.discover(reactor, sdk_agent, preference=["jsonrpc"])
    assert rest.selected.kind == "http+json" and rest.address.endswith("/a2a/rest")
    answer = await rest.send_message(text_message("hi"))
    task_id = answer["task"]["id"]
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    task = await rest.get_task(task_id, history_length=1)
    assert task["id"] == task_id and len(task.get("history", [])) <= 1
    assert (await rpc.get_task(task_id))["id"] == task_id
    page = await rest.list_tasks(pageSize=10, includeArtifacts=True, status="TASK_STATE_COMPLETED")
    assert task_id in [t["id"] for t in page["tasks"]]
    events = await rest.send_streaming_message(text_message("streamed")).collect()
    assert list(events[0]) == ["task"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert any("artifactUpdate" in e for e in events)
    outcome = await rest.send_text("yo")
    assert outcome.ok and outcome.text == "echo: yo"
    for client in (rest, rpc):
        with pytest.raises(RPCError) as unknown:
            await client.get_task("no-such-task")
        assert (unknown.value.code, unknown.value.reason) == (-32001, "TASK_NOT_FOUND")
        with pytest.raises(RPCError) as cancel_unknown:
            await client.cancel_task("no-such:task")
        assert (cancel_unknown.value.code, cancel_unknown.value.reason) == (-32001, "TASK_NOT_FOUND")
        with pytest.raises(RPCError) as done:
            await client.cancel_task(task_id)
        assert (done.value.code, done.value.reason) == (-32002, "TASK_NOT_CANCELABLE")
        with pytest.raises(RPCError) as push:
            await client.get_task_push_notification_config(task_id, "c")
        assert push.value.code == -32003
    assert unknown.value.http_status is None
    with pytest.raises(RPCError) as over_rest:
        await rest.get_task("no-such-task")
    assert (over_rest.value.http_status, over_rest.value.status_name) == (404, "NOT_FOUND")


# 5. Hostile fakes.


class Recorded(Resource):
    """Answers each POST with C{answer(request, body)}; remembers what came."""

    isLeaf = True

    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.answer = answer
        self.requests: list[tuple[Any, dict[str, Any]]] = []
        self.arrived: Deferred[Any] = Deferred()
        self.lost: Deferred[None] = Deferred()

    def render(self, request: Any) -> Any:
        body = json.loads(request.content.read() or b"null")
        self.requests.append((request, body))
        request.notifyFinish().addErrback(lambda _: self.lost.called or self.lost.callback(None))
        if not self.arrived.called:
            self.arrived.callback(request)
        return self.answer(request, body)


def task_answer(request: Any, body: Any) -> bytes:
    request.setHeader(b"content-type", b"application/json")
    return json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": {"id": "t", "status": {}}}).encode()


@pytest_twisted.async_yield_fixture
async def serve() -> AsyncIterator[Any]:
    """Serve a resource (or a protocol factory) on loopback; its URL."""
    ports: list[Any] = []

    def start(thing: Any) -> str:
        factory = Site(thing) if isinstance(thing, Resource) else thing
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        ports.append(port)
        return f"http://127.0.0.1:{port.getHost().port}/"

    yield start
    for port in ports:
        await port.stopListening()


def rpc_client(url: str, **kwargs: Any) -> A2AClient:
    card = parse_card(a_card([jsonrpc(url)]))
    return A2AClient.for_card(reactor, card, **kwargs)


@pytest_twisted.ensureDeferred
async def test_silent_peer_times_out_on_the_clock(serve: Any) -> None:
    """A peer that accepts and never answers: the response timeout fires on the Clock and the request is aborted."""
    resource = Recorded(lambda request, body: NOT_DONE_YET)
    clock = Clock()
    client = rpc_client(serve(resource), clock=clock, timeouts=Timeouts(response=5))
    d = client.get_task("t")
    await resource.arrived
    clock.advance(5)
    with pytest.raises(Timeout) as caught:
        await d
    assert caught.value.phase == "answer"
    await resource.lost


@pytest_twisted.ensureDeferred
async def test_cancelling_aborts_the_request(serve: Any) -> None:
    """Cancelling a call's Deferred closes its connection."""
    resource = Recorded(lambda request, body: NOT_DONE_YET)
    client = rpc_client(serve(resource), clock=Clock())
    d = client.send_message(text_message("x"))
    await resource.arrived
    d.cancel()
    with pytest.raises(CancelledError):
        await d
    await resource.lost


@pytest_twisted.ensureDeferred
async def test_silent_listener_connect_is_bounded(serve: Any) -> None:
    """A stream that never sends an event after its headers fails with Timeout when the clock passes the first-event bound."""
    def headers_only(request: Any, body: Any) -> Any:
        request.setHeader(b"content-type", b"text/event-stream")
        request.write(b": hello\n\n")
        return NOT_DONE_YET

    resource = Recorded(headers_only)
    clock = Clock()
    client = rpc_client(serve(resource), clock=clock, timeouts=Timeouts(response=3, idle=7))
    stream = client.subscribe_to_task("t")
    await resource.arrived
    clock.advance(3)
    with pytest.raises(Timeout):
        await stream.collect()
    await resource.lost


@pytest_twisted.ensureDeferred
async def test_idle_stream_times_out(serve: Any) -> None:
    """After an event, a stream silent for longer than the idle bound fails with Timeout (phase idle)."""
    def one_event(request: Any, body: Any) -> Any:
        request.setHeader(b"content-type", b"text/event-stream")
        event = {"jsonrpc": "2.0", "id": body["id"], "result": {"task": {"id": "t"}}}
        request.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        return NOT_DONE_YET

    resource = Recorded(one_event)
    clock = Clock()
    client = rpc_client(serve(resource), clock=clock, timeouts=Timeouts(response=3, idle=7))
    stream = client.subscribe_to_task("t")
    assert (await stream.__anext__())["task"]["id"] == "t"
    clock.advance(6)
    waiting = Deferred.fromCoroutine(stream.__anext__())
    assert not waiting.called
    clock.advance(1)
    with pytest.raises(Timeout) as caught:
        await waiting
    assert caught.value.phase == "idle"
    await resource.lost


@pytest_twisted.ensureDeferred
async def test_garbage_answer(serve: Any) -> None:
    """An answer that is not JSON-RPC is an InvalidResponse."""
    client = rpc_client(serve(Recorded(lambda request, body: b"\x00garbage{")))
    with pytest.raises(InvalidResponse):
        await client.get_task("t")


class Endless(Protocol):
    """Answers any request with headers, then C{chunk} over and over (never an end)."""

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
async def test_endless_body_is_capped(serve: Any) -> None:
    """An answer that never ends is cut at the body cap with InvalidResponse."""
    url = serve(endless(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", b"x" * 65536))
    client = rpc_client(url, limits=Limits(body=256 * 1024))
    with pytest.raises(InvalidResponse, match="larger than"):
        await client.get_task("t")


@pytest_twisted.ensureDeferred
async def test_endless_sse_event_is_capped(serve: Any) -> None:
    """An SSE event that never ends is cut at the event cap with EventTooLarge."""
    url = serve(
        endless(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ", b"x" * 65536)
    )
    client = rpc_client(url, limits=Limits(event=128 * 1024))
    with pytest.raises(EventTooLarge):
        await client.subscribe_to_task("t").collect()


@pytest_twisted.ensureDeferred
async def test_endless_card_is_capped(serve: Any) -> None:
    """A card that never ends is cut at the card cap with InvalidCard."""
    url = serve(endless(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", b" " * 65536))
    with pytest.raises(InvalidCard, match="larger than"):
        await fetch_card(reactor, url, max_card=256 * 1024)


@pytest_twisted.ensureDeferred
async def test_401_with_and_without_a_jsonrpc_body(serve: Any) -> None:
    """A 401 carrying a JSON-RPC error is that RPCError; a bare 401 is HTTPStatusError 401."""
    def with_body(request: Any, body: Any) -> bytes:
        request.setResponseCode(401)
        return json.dumps(
            {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -31401, "message": "who are you"}}
        ).encode()

    def bare(request: Any, body: Any) -> bytes:
        request.setResponseCode(401)
        return b'{"ok": false, "error": "unauthorized"}'

    with pytest.raises(RPCError) as caught:
        await rpc_client(serve(Recorded(with_body))).get_task("t")
    assert (caught.value.code, caught.value.message) == (-31401, "who are you")
    with pytest.raises(HTTPStatusError) as status:
        await rpc_client(serve(Recorded(bare))).get_task("t")
    assert status.value.status == 401


@pytest_twisted.ensureDeferred
async def test_headers_and_unique_ids(serve: Any) -> None:
    """Every request carries A2A-Version 1.0, A2A-Extensions when asked, the tenant, and an id of its own."""
    resource = Recorded(task_answer)
    url = serve(resource)
    card = parse_card(a_card([dict(jsonrpc(url), tenant="acme")]))
    client = A2AClient.for_card(reactor, card, extensions=["https://x/e1"])
    await gatherResults([client.get_task("a"), client.get_task("b"), client.cancel_task("c")])
    await client.get_task("d", extensions=["https://x/e2"])
    ids = [body["id"] for _, body in resource.requests]
    assert len(set(ids)) == 4
    for request, body in resource.requests:
        assert request.getHeader(b"a2a-version") == b"1.0"
        assert body["params"]["tenant"] == "acme"
    assert resource.requests[0][0].getHeader(b"a2a-extensions") == b"https://x/e1"
    assert resource.requests[3][0].getHeader(b"a2a-extensions") == b"https://x/e1, https://x/e2"


@pytest_twisted.ensureDeferred
async def test_retry_is_opt_in_and_for_reads_only(serve: Any) -> None:
    """With retries=1, a read whose connection broke is tried again; a SendMessage never is."""
    def flaky(request: Any, body: Any) -> Any:
        if len(resource.requests) == 1:
            request.channel.transport.abortConnection()
            return NOT_DONE_YET
        return task_answer(request, body)

    resource = Recorded(flaky)
    client = rpc_client(serve(resource), retries=1)
    assert (await client.get_task("t"))["id"] == "t"
    assert len(resource.requests) == 2
    resource.requests.clear()
    with pytest.raises(TransportError):
        await client.send_message(text_message("once"))
    assert len(resource.requests) == 1


@pytest_twisted.ensureDeferred
async def test_send_text_never_fails(serve: Any) -> None:
    """send_text resolves to a not-ok Outcome carrying the error, for an unreachable peer too."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    listening.close()  # Nothing listens there now: refused.
    outcome = await rpc_client(f"http://127.0.0.1:{port}/").send_text("hello")
    assert not outcome.ok and isinstance(outcome.error, TransportError)
    garbage = await rpc_client(serve(Recorded(lambda r, b: b"nope"))).send_text("hello")
    assert not garbage.ok and isinstance(garbage.error, ClientError)


@pytest_twisted.ensureDeferred
async def test_card_errors(serve: Any) -> None:
    """A card answered 404 is HTTPStatusError; one that is not JSON is InvalidCard; one with only unknown bindings gives NoCompatibleInterface."""
    class Root(Resource):
        def getChild(self, path: bytes, request: Any) -> Resource:
            return notFound()

    root = Root()
    url = serve(root)
    with pytest.raises(HTTPStatusError) as caught:
        await fetch_card(reactor, url)
    assert caught.value.status == 404

    class Static(Resource):
        isLeaf = True

        def __init__(self, body: bytes) -> None:
            super().__init__()
            self.body = body

        def render_GET(self, request: Any) -> bytes:
            return self.body

    root.putChild(b"bad.json", Static(b"{not json"))
    with pytest.raises(InvalidCard, match="not valid JSON"):
        await fetch_card(reactor, url + "bad.json")
    unknown = a_card([{"url": url, "protocolBinding": "https://example.com/b/v9", "protocolVersion": "1.0"}])
    root.putChild(b"unknown.json", Static(json.dumps(unknown).encode()))
    with pytest.raises(NoCompatibleInterface):
        await A2AClient.discover(reactor, url + "unknown.json")


class Counting(Factory):
    """Counts connections, and closes each."""

    def __init__(self) -> None:
        self.connections = 0

    def buildProtocol(self, addr: Any) -> Protocol:
        self.connections += 1
        return Protocol()


@pytest_twisted.ensureDeferred
async def test_unix_path_from_the_card_is_never_dialled(serve: Any, short_dir: str) -> None:
    """A card naming another unix path: the client dials the configured socket, never the card's."""
    decoy_path = os.path.join(short_dir, "decoy.sock")
    decoy = Counting()
    decoy_port = reactor.listenUNIX(decoy_path, decoy)
    configured_path = os.path.join(short_dir, "mine.sock")
    resource = Recorded(task_answer)
    mine = reactor.listenUNIX(configured_path, Site(resource))
    try:
        card = a_card([{"url": "unix://" + decoy_path, "protocolBinding": UNIX_BINDING, "protocolVersion": "1.0"}])
        document = json.dumps(card).encode()

        class CardResource(Resource):
            isLeaf = True

            def render_GET(self, request: Any) -> bytes:
                return document

        url = serve(CardResource())
        client = await A2AClient.discover(reactor, url + "card.json", socket_path=configured_path)
        assert (await client.get_task("t"))["id"] == "t"
        assert len(resource.requests) == 1
        assert decoy.connections == 0
    finally:
        await decoy_port.stopListening()
        await mine.stopListening()


def test_websocket_binding_names() -> None:
    """The WebSocket binding is chosen by its URI and by its legacy token."""
    for name in (WEBSOCKET_BINDING, LEGACY_WEBSOCKET):
        card = parse_card(a_card([{"url": "ws://a/ws", "protocolBinding": name, "protocolVersion": "1.0"}]))
        assert select_interface(card).kind == "websocket"


def test_failures_are_typed() -> None:
    """Every error the client raises is a ClientError."""
    for error in (InvalidCard("u", "p"), NoCompatibleInterface([]), EventTooLarge("x"), Timeout("a", 1)):
        assert isinstance(error, ClientError)
    assert isinstance(Failure(Timeout("a", 1, "connect")).value, ClientError)


@pytest_twisted.ensureDeferred
async def test_websocket_upgrade_unanswered_is_timed_on_the_clock() -> None:
    """An agent that accepts the connection but never answers the upgrade: the call fails once connect_timeout passes on the client's clock, and the connection is aborted (no timer of autobahn's left on the global reactor)."""
    from beacon.client._transport import DialFactory
    from beacon.client._websocket import WebSocketTransport

    accepted: Deferred[Protocol] = Deferred()
    lost: Deferred[None] = Deferred()

    class Silent(Protocol):
        def dataReceived(self, data: bytes) -> None:
            # The upgrade request: the client is connected and waiting.
            if not accepted.called:
                accepted.callback(self)

        def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
            lost.callback(None)

    port = reactor.listenTCP(0, Factory.forProtocol(Silent), interface="127.0.0.1")
    clock = Clock()
    transport = WebSocketTransport(
        reactor,
        f"ws://127.0.0.1:{port.getHost().port}/a2a/ws",
        clock=clock,
        dial=DialFactory(reactor, clock, 5.0),
        connect_timeout=5.0,
        response_timeout=60.0,
        idle_timeout=60.0,
    )
    try:
        call = transport.call(1, "GetTask", {"id": "x"}, ())
        await accepted
        clock.advance(4.9)
        assert not call.called
        clock.advance(0.2)
        with pytest.raises(TransportError, match="did not answer the upgrade within 5.0 s"):
            await call
        await lost
        assert [c for c in clock.getDelayedCalls() if c.active()] == []
    finally:
        await transport.close()
        await port.stopListening()
