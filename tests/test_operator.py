"""
The operator policy through the dispatcher: ListTasks ordering, filters and
keyset paging, the full GetTask, review decisions (and what the public then
sees), SubscribeToTask and the live inbox stream with several subscribers,
and the SSE framing of streams with keepalives on an injected clock.
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

    def op_error(self, method: str, params: Any = None, **kw: Any) -> dict[str, Any]:
        """Call the operator policy; return the error object."""
        response = self.call(self.operator, method, params, **kw)
        assert "error" in response, response
        error: dict[str, Any] = response["error"]
        return error

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


def test_list_is_newest_status_first(inbox: Inbox) -> None:
    """Undecided tasks list newest arrival first; a decision moves a task to the top."""
    first, second, third = (inbox.submit(t) for t in ("one", "two", "three"))
    assert ids(inbox.op("ListTasks", {})) == [third, second, first]
    inbox.decide(first, "accept")
    assert ids(inbox.op("ListTasks", {})) == [first, third, second]


def test_list_shows_everything(inbox: Inbox) -> None:
    """The operator's ListTasks carries the whole task, totals and an empty last token."""
    task_id = inbox.submit("hello operator")
    result = inbox.op("ListTasks", {})
    assert result["totalSize"] == 1
    assert result["pageSize"] == 50
    assert result["nextPageToken"] == ""
    task = result["tasks"][0]
    assert task["history"][0]["parts"] == [{"text": "hello operator"}]
    assert task["metadata"]["door"] == "test"
    assert task["metadata"]["receipt"]["id"] == task_id
    assert "artifacts" not in task


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


def test_history_length_zero_omits_history(inbox: Inbox) -> None:
    """historyLength 0 returns tasks without history."""
    inbox.submit("x")
    assert "history" not in inbox.op("ListTasks", {"historyLength": 0})["tasks"][0]


def test_paging_never_skips_or_repeats_while_new_tasks_arrive(inbox: Inbox) -> None:
    """Keyset paging returns every unchanged task exactly once, even with inserts between pages."""
    original = [inbox.submit(f"task {n}", advance=0) for n in range(7)]
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        params: dict[str, Any] = {"pageSize": 3}
        if token:
            params["pageToken"] = token
        page = inbox.op("ListTasks", params)
        seen.extend(ids(page))
        pages += 1
        inbox.submit(f"arrived during page {pages}", advance=0)
        token = page["nextPageToken"]
        if not token:
            break
    assert pages == 3
    assert sorted(seen) == sorted(original)
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("size", [0, -1, 101])
def test_page_size_out_of_range(inbox: Inbox, size: int) -> None:
    """pageSize 0, negative or over 100 is -32602."""
    assert inbox.op_error("ListTasks", {"pageSize": size})["code"] == -32602


@pytest.mark.parametrize("token", ["nonsense!", "x" * 100, encode_page_token((1, 2))[:-1] + "*", "bm90LWEtdG9rZW4"])
def test_malformed_page_token(inbox: Inbox, token: str) -> None:
    """A page token that is not ours is -32602."""
    assert inbox.op_error("ListTasks", {"pageToken": token})["code"] == -32602


def test_unknown_status_filter(inbox: Inbox) -> None:
    """An unknown status is -32602."""
    assert inbox.op_error("ListTasks", {"status": "TASK_STATE_NOPE"})["code"] == -32602


def test_page_token_round_trip() -> None:
    """Page tokens are opaque letters and digits that decode to the keyset position."""
    token = encode_page_token((1_800_000_000_123, 42))
    assert token.replace("-", "").replace("_", "").isalnum()
    assert decode_page_token(token) == (1_800_000_000_123, 42)


def test_get_task_is_full(inbox: Inbox) -> None:
    """GetTask shows the submitted message, the status and the receipt."""
    task_id = inbox.submit("the whole thing")
    task = inbox.op("GetTask", {"id": task_id})
    assert task["history"] == [
        {
            "messageId": "m",
            "role": "ROLE_USER",
            "contextId": task["contextId"],
            "taskId": task_id,
            "parts": [{"text": "the whole thing"}],
        }
    ]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert inbox.op_error("GetTask", {"id": "unknown"})["code"] == -32001


def test_decision_is_visible_to_the_operator_with_its_note(inbox: Inbox) -> None:
    """A decision moves the task to its terminal state with the note as status message."""
    task_id = inbox.submit("please review")
    result = inbox.decide(task_id, "reject", "not for us")["result"]
    assert result["status"]["state"] == "TASK_STATE_REJECTED"
    assert result["status"]["message"]["parts"] == [{"text": "not for us"}]
    assert result["status"]["message"]["role"] == "ROLE_AGENT"
    accepted = inbox.decide(inbox.submit("fine"), "accept")["result"]
    assert accepted["status"]["state"] == "TASK_STATE_COMPLETED"


def test_public_sees_the_state_only(inbox: Inbox) -> None:
    """After a decision the public GetTask shows the new state and time, never the note."""
    task_id = inbox.submit("please review")
    inbox.clock.advance(10)
    inbox.decide(task_id, "reject", "SECRET NOTE")
    response = inbox.call(inbox.public, "GetTask", {"id": task_id})
    assert response["result"]["status"] == {
        "state": "TASK_STATE_REJECTED",
        "timestamp": "2027-01-15T08:00:11.000Z",
    }
    assert "SECRET NOTE" not in json.dumps(response)


def test_deciding_twice_is_refused(inbox: Inbox) -> None:
    """A second decision is -32004 naming the current state; the first stands."""
    task_id = inbox.submit("x")
    inbox.decide(task_id, "accept")
    error = inbox.decide(task_id, "reject")["error"]
    assert error["code"] == -32004
    assert error["data"][0]["metadata"] == {"state": "TASK_STATE_COMPLETED"}
    assert inbox.op("GetTask", {"id": task_id})["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize(
    "params, code",
    [
        ({"id": "unknown", "decision": "accept"}, -32001),
        ({"decision": "accept"}, -32602),
        ({"id": "x", "decision": "maybe"}, -32602),
        ({"id": "x", "decision": "accept", "note": "n" * 4001}, -32602),
    ],
)
def test_bad_decisions(inbox: Inbox, params: dict[str, Any], code: int) -> None:
    """Unknown ids, missing or unknown decisions and overlong notes get clear errors."""
    assert inbox.call(inbox.operator, "beacon.review.Decide", params)["error"]["code"] == code


def test_extension_methods_need_activation(inbox: Inbox) -> None:
    """Without A2A-Extensions naming it, an extension method does not exist (-32601)."""
    task_id = inbox.submit("x")
    response = inbox.call(
        inbox.operator, "beacon.review.Decide", {"id": task_id, "decision": "accept"}, extensions=frozenset()
    )
    assert response["error"]["code"] == -32601
    assert REVIEW_EXTENSION in response["error"]["message"]


def test_public_policy_has_no_extension_methods(inbox: Inbox) -> None:
    """The public door knows nothing of review or inbox methods."""
    task_id = inbox.submit("x")
    response = inbox.call(inbox.public, "beacon.review.Decide", {"id": task_id, "decision": "accept"})
    assert response["error"]["code"] == -32601


def test_operator_cannot_cancel_or_submit(inbox: Inbox) -> None:
    """CancelTask is -32002 and SendMessage -32004 on the operator door."""
    task_id = inbox.submit("x")
    assert inbox.op_error("CancelTask", {"id": task_id})["code"] == -32002
    params = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "t"}]}}
    assert inbox.op_error("SendMessage", params)["code"] == -32004


def listener_count(store: MemoryStore) -> int:
    """How many store listeners are subscribed."""
    return len(store._listeners._listeners)


def attach(answer: StreamAnswer) -> CollectingSink:
    """Collect a stream's events."""
    sink = CollectingSink()
    answer.stream.attach(sink)
    return sink


def test_subscribe_streams_snapshot_then_decision(inbox: Inbox) -> None:
    """SubscribeToTask sends the current Task, then the decision, then closes."""
    task_id = inbox.submit("watch me")
    other = inbox.submit("not me")
    sink = attach(inbox.op("SubscribeToTask", {"id": task_id}))
    assert sink.events[0]["task"]["id"] == task_id
    inbox.decide(other, "accept")
    assert len(sink.events) == 1
    inbox.decide(task_id, "reject", "no")
    assert sink.events[1]["statusUpdate"]["status"]["state"] == "TASK_STATE_REJECTED"
    assert sink.ended


def test_subscribe_to_terminal_or_unknown_task(inbox: Inbox) -> None:
    """SubscribeToTask on a decided task is -32004, on an unknown one -32001."""
    task_id = inbox.submit("x")
    inbox.decide(task_id, "accept")
    assert inbox.op_error("SubscribeToTask", {"id": task_id})["code"] == -32004
    assert inbox.op_error("SubscribeToTask", {"id": "nope"})["code"] == -32001


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


def test_cancelled_follow_unsubscribes(inbox: Inbox) -> None:
    """A follower that goes away stops receiving and leaves no listener behind."""
    answer = inbox.op("beacon.inbox.Follow")
    sink = attach(answer)
    answer.stream.cancel()
    inbox.submit("after")
    assert sink.events == []
    assert listener_count(inbox.store) == 0


def test_streaming_method_as_notification_is_not_run(inbox: Inbox) -> None:
    """A streaming method sent without an id starts no stream and gets no answer."""
    request = {"jsonrpc": "2.0", "method": "beacon.inbox.Follow"}
    context = CallContext("test", "tester", "1.0", BOTH)
    answer = _sync.successResultOf(inbox.operator.dispatch(json.dumps(request).encode(), context))
    assert answer is None
    assert listener_count(inbox.store) == 0


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
