"""
The operator policy through the dispatcher: ListTasks filters, page tokens,
the live inbox stream with several subscribers, ending every stream on
stop, and the SSE framing of streams with keepalives on an injected clock.
ListTasks ordering and keyset paging, the full GetTask, review decisions
(and what the public then sees), SubscribeToTask, a follower leaving and
the refusals are the behaviour suite's, run over both operator doors:
tests/test_behaviour.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from beacon.bindings.http import BeaconSite
from beacon.intake import (
    INBOX_EVENTS_EXTENSION,
    REVIEW_EXTENSION,
    OperatorPolicy,
    PublicPolicy,
    schema_validator,
)
from beacon.intake._operator import decode_page_token, encode_page_token
from beacon.protocol import CallContext, CollectingSink, Dispatcher, StreamAnswer
from beacon.service import operator_door
from beacon.intake import EXTENSION_METHODS
from beacon.testing import MemoryStore

_sync = SynchronousTestCase()
BOTH = frozenset({REVIEW_EXTENSION, INBOX_EVENTS_EXTENSION})


class Inbox:
    """A MemoryStore with a public and an operator dispatcher on one Clock."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_800_000_000)
        self.store = MemoryStore()
        self.public = Dispatcher(PublicPolicy(self.store, self.clock, schema_validator()))
        self.operator = Dispatcher(OperatorPolicy(self.store, self.clock), EXTENSION_METHODS)

    def call(self, dispatcher: Dispatcher, method: str, params: Any = None, extensions: frozenset[str] = BOTH) -> Any:
        """Run one request; return the response object (or StreamAnswer)."""
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            request["params"] = params
        context = CallContext("test", "tester", "1.0", extensions)
        return _sync.successResultOf(dispatcher.dispatch(json.dumps(request).encode(), context))

    def op(self, method: str, params: Any = None, **kw: Any) -> Any:
        """Call the operator policy; return the result (or fail on an error)."""
        response = self.call(self.operator, method, params, **kw)
        if isinstance(response, StreamAnswer):
            return response
        assert "error" not in response, response
        return response["result"]

    def submit(self, text: str, advance: float = 1.0) -> str:
        """Submit through the public door, then let the clock move on."""
        params = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}
        result = self.call(self.public, "SendMessage", params)["result"]
        self.clock.advance(advance)
        task_id: str = result["task"]["id"]
        return task_id

    def decide(self, task_id: str, decision: str, note: str | None = None) -> Any:
        """Decide through the review extension."""
        params: dict[str, Any] = {"id": task_id, "decision": decision}
        if note is not None:
            params["note"] = note
        return self.call(self.operator, "beacon.review.Decide", params)


@pytest.fixture
def inbox() -> Inbox:
    """An empty inbox."""
    return Inbox()


def ids(result: dict[str, Any]) -> list[str]:
    """The task ids of a ListTasks result."""
    return [t["id"] for t in result["tasks"]]


def test_list_filters(inbox: Inbox) -> None:
    """status, statusTimestampAfter and contextId filter; totalSize counts before paging."""
    a, b, c = (inbox.submit(t) for t in ("a", "b", "c"))
    inbox.decide(b, "reject")
    submitted = inbox.op("ListTasks", {"status": "TASK_STATE_SUBMITTED"})
    assert ids(submitted) == [c, a]
    assert submitted["totalSize"] == 2
    assert ids(inbox.op("ListTasks", {"status": "TASK_STATE_REJECTED"})) == [b]
    a_task = inbox.op("GetTask", {"id": a})
    after = a_task["status"]["timestamp"]
    assert set(ids(inbox.op("ListTasks", {"statusTimestampAfter": after}))) == {a, b, c}
    b_time = inbox.op("GetTask", {"id": b})["status"]["timestamp"]
    assert ids(inbox.op("ListTasks", {"statusTimestampAfter": b_time})) == [b]
    context = inbox.op("GetTask", {"id": c})["contextId"]
    assert ids(inbox.op("ListTasks", {"contextId": context})) == [c]


def test_page_token_round_trip() -> None:
    """Page tokens are opaque letters and digits that decode to the keyset position."""
    token = encode_page_token((1_800_000_000_123, 42))
    assert token.replace("-", "").replace("_", "").isalnum()
    assert decode_page_token(token) == (1_800_000_000_123, 42)


def listener_count(store: MemoryStore) -> int:
    """How many store listeners are subscribed."""
    return len(store._listeners._listeners)


def attach(answer: StreamAnswer) -> CollectingSink:
    """Collect a stream's events."""
    sink = CollectingSink()
    answer.stream.attach(sink)
    return sink


def test_follow_gives_every_subscriber_every_event_in_order(inbox: Inbox) -> None:
    """Each follower gets each submission and decision in commit order; one leaving disturbs no other."""
    first = attach(inbox.op("beacon.inbox.Follow"))
    second_answer = inbox.op("beacon.inbox.Follow")
    second = attach(second_answer)
    a = inbox.submit("a")
    b = inbox.submit("b")
    inbox.decide(a, "accept")
    second_answer.stream.cancel()
    c = inbox.submit("c")

    def describe(events: list[Any]) -> list[tuple[str, str]]:
        return [
            ("task", e["task"]["id"]) if "task" in e else ("status", e["statusUpdate"]["taskId"])
            for e in events
        ]

    assert describe(first.events) == [("task", a), ("task", b), ("status", a), ("task", c)]
    assert describe(second.events) == [("task", a), ("task", b), ("status", a)]
    assert first.events[0]["task"]["history"][0]["parts"] == [{"text": "a"}]
    assert not first.ended


# SSE framing over a real channel, keepalives on the clock.


def open_stream(inbox: Inbox, keepalive: float = 15.0) -> tuple[Any, StringTransport]:
    """POST beacon.inbox.Follow to the operator door's resource tree over a StringTransport."""
    door = operator_door(OperatorPolicy(inbox.store, inbox.clock), inbox.clock)
    site = BeaconSite(door.root, clock=inbox.clock)
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
    transport = StringTransport()
    channel.makeConnection(transport)
    body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "beacon.inbox.Follow"}).encode()
    channel.dataReceived(
        b"POST / HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        b"A2A-Extensions: " + INBOX_EVENTS_EXTENSION.encode() + b"\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    return channel, transport


def test_sse_frames_events_and_keepalives(inbox: Inbox) -> None:
    """The stream is text/event-stream: data lines holding JSON-RPC responses, keepalive comments when idle."""
    channel, transport = open_stream(inbox)
    head = transport.value()
    assert b"200 OK" in head
    assert b"text/event-stream" in head
    assert b"a2a-extensions: " + INBOX_EVENTS_EXTENSION.encode() in head.lower()
    transport.clear()
    inbox.clock.advance(15)
    assert b": keepalive\n\n" in transport.value()
    transport.clear()
    inbox.clock.advance(5)
    task_id = inbox.submit("live", advance=0)
    raw = transport.value()
    line = [l for l in raw.split(b"\r\n") if l.startswith(b"data: ")][0]
    event = json.loads(line[len(b"data: "):].split(b"\n\n")[0])
    assert event["id"] == 9
    assert event["result"]["task"]["id"] == task_id
    transport.clear()
    inbox.clock.advance(14)
    assert b"keepalive" not in transport.value()
    channel.connectionLost(Failure(ConnectionDone()))
    assert listener_count(inbox.store) == 0
    assert inbox.clock.getDelayedCalls() == []


def test_close_streams_ends_every_open_stream(inbox: Inbox) -> None:
    """Stopping ends each follower's and subscriber's stream normally and unsubscribes them."""
    policy = OperatorPolicy(inbox.store, inbox.clock)
    operator = Dispatcher(policy, EXTENSION_METHODS)
    task_id = inbox.submit("x")
    sinks = [
        attach(inbox.call(operator, "beacon.inbox.Follow")),
        attach(inbox.call(operator, "SubscribeToTask", {"id": task_id})),
    ]
    policy.close_streams()
    assert all(sink.ended and sink.error is None for sink in sinks)
    assert listener_count(inbox.store) == 0


def test_review_list_caps_its_total(inbox: Inbox) -> None:
    """
    beacon.review.List counts a total up to its cap: above it the answer
    says totalMoreThan (the cap) instead of totalSize; at the cap, totalSize.
    """
    policy = OperatorPolicy(inbox.store, inbox.clock, total_cap=3)
    operator = Dispatcher(policy, EXTENSION_METHODS)
    submitted = [inbox.submit(t) for t in ("a", "b", "c")]

    def review_list(**params: Any) -> Any:
        response = inbox.call(operator, "beacon.review.List", {"pageSize": 2, **params})
        assert "error" not in response, response
        return response["result"]

    at_cap = review_list()
    assert at_cap["totalSize"] == 3 and "totalMoreThan" not in at_cap
    inbox.submit("d")
    over = review_list()
    assert over["totalMoreThan"] == 3 and "totalSize" not in over
    assert [t["id"] for t in over["tasks"]] == [inbox.op("beacon.review.List", {"pageSize": 1})["tasks"][0]["id"], submitted[2]]
    assert review_list(status="TASK_STATE_SUBMITTED", sort="updated")["totalMoreThan"] == 3
    uncounted = review_list(includeTotal=False)
    assert "totalSize" not in uncounted and "totalMoreThan" not in uncounted
    assert inbox.op("beacon.review.List")["totalSize"] == 4
