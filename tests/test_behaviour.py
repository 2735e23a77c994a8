"""
One behaviour suite over every binding a method is served on, as the
transit relay's C{test/common.py} runs one suite over each of its
transports: each test is parametrized over the bindings of the policy it
exercises (see L{bindings}) and asserts the same outcome on each: the
result or the error's code and ErrorInfo reason, what was stored (the door
aside) and what was echoed.

  - public policy: JSON-RPC over HTTP (C{POST /a2a/v1}), the HTTP+JSON
    binding (C{/a2a/rest}), the WebSocket binding at C{/a2a/ws} and on a
    listener of its own, the gRPC binding (its calls on the clock; what
    gRPC cannot say, such as JSON-RPC envelopes and raw bodies, is
    skipped there, as on HTTP+JSON);
  - operator policy: JSON-RPC on the operator socket and the bearer-token
    door, and the HTTP+JSON binding on each;
  - what the dispatcher answers before any policy (JSON, version, unknown
    methods, params): all nine; what only JSON-RPC envelopes have (ids,
    notifications, batches): the six bindings that carry them
    (L{ENVELOPE_BINDINGS}).

What only one binding does (HTTP's 413/429/415 and its timeouts, WebSocket
frames, upgrades and close codes, the socket's peer check, the bearer
gate's 401, the HTTP+JSON binding's routes, tenants and query parameters)
stays in that binding's own tests. Every world runs on one
Clock and ends with no call left on it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from bindings import JSONRPCDriver, RESTDriver, World
from beacon.bindings.http import credential_digest
from beacon.intake import INBOX_EVENTS_EXTENSION, REVIEW_EXTENSION
from beacon.store import Submission
from driver_support import (
    ALL_BINDINGS,
    ENVELOPE_BINDINGS,
    OPERATOR_BINDINGS,
    PEER,
    PUBLIC_BINDINGS,
    START,
    Answer,
    Driver,
    Stream,
)
from websocket_support import call as rpc

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
A2A_DOMAIN = "a2a-protocol.org"
UNKNOWN_EXTENSION = "https://unknown.example/ext/v1"
BOTH_EXTENSIONS = (REVIEW_EXTENSION, INBOX_EVENTS_EXTENSION)
#: START as the RFC 3339 timestamps Beacon writes.
START_STAMP = "2027-01-15T08:00:00.000Z"

STRUCTURED = {
    "from": {"name": "Ada", "agent": "ada-assistant/2.1", "operator": "Example Lab"},
    "subject": "Dataset licence question",
    "body": "Could the maintainers confirm the licence of the 2025 snapshot?",
    "language": "en",
    "contact": [{"kind": "email", "value": "ada@example.org"}],
}


# Requests.




def message(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """SendMessage params: a user message with C{parts}."""
    return {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": list(parts), **fields}}


def send_text(text: str = "Hello, people.", request_id: Any = 1) -> dict[str, Any]:
    return rpc("SendMessage", message({"text": text}), request_id)


def decide(task_id: str, decision: str, note: str | None = None, request_id: Any = 1) -> dict[str, Any]:
    params: dict[str, Any] = {"id": task_id, "decision": decision}
    if note is not None:
        params["note"] = note
    return rpc("beacon.review.Decide", params, request_id)


# Reading answers.


def result(answer: Answer, request_id: Any = 1) -> Any:
    """The result of a successful answer (with the request's id)."""
    response = answer.response
    assert response is not None and "result" in response, answer
    assert response["jsonrpc"] == "2.0"
    assert response["id"] == request_id
    return response["result"]


def error(answer: Answer, request_id: Any = 1) -> tuple[int, str, list[str]]:
    """
    The code, ErrorInfo reason and the types of the other details of an
    error answer (with the request's id); every error carries one
    ErrorInfo of the A2A domain first.
    """
    response = answer.response
    assert response is not None and "error" in response, answer
    assert response["jsonrpc"] == "2.0"
    assert response["id"] == request_id
    assert set(response) == {"jsonrpc", "id", "error"}
    failure = response["error"]
    assert isinstance(failure["message"], str) and failure["message"]
    info, *others = failure["data"]
    assert info["@type"] == ERROR_INFO
    assert info["domain"] == A2A_DOMAIN
    return failure["code"], info["reason"], [detail["@type"] for detail in others]


def violations(answer: Answer) -> list[str]:
    """The fields a -32602 answer's BadRequest names."""
    assert answer.response is not None
    (bad,) = [d for d in answer.response["error"]["data"] if d["@type"] == BAD_REQUEST]
    return [v["field"] for v in bad["fieldViolations"]]


def canonical(document: dict[str, Any]) -> bytes:
    """The stored bytes of a content document, as the manual's receipts spell them (docs/reference/messages.rst)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decided_state(world: World, task_id: str) -> str:
    task = world.store._task(task_id)
    assert task is not None
    return task.state


def listener_count(world: World) -> int:
    """How many store listeners (open streams) are subscribed."""
    return len(world.store._listeners._listeners)


# Fixtures.


@pytest.fixture
def world() -> Iterator[World]:
    """A Beacon with every door; afterwards, every connection closed and no call left on its clock."""
    world = World()
    yield world
    world.close()
    assert world.active_calls() == []


@pytest.fixture(params=PUBLIC_BINDINGS)
def public(request: pytest.FixtureRequest, world: World) -> Driver:
    """Each binding of the public policy in turn."""
    return world.driver(request.param)


@pytest.fixture(params=OPERATOR_BINDINGS)
def operator(request: pytest.FixtureRequest, world: World) -> Driver:
    """Each binding of the operator policy in turn."""
    return world.driver(request.param)


@pytest.fixture(params=ALL_BINDINGS)
def driver(request: pytest.FixtureRequest, world: World) -> Driver:
    """Every binding in turn."""
    return world.driver(request.param)


@pytest.fixture(params=ENVELOPE_BINDINGS)
def rpc_driver(request: pytest.FixtureRequest, world: World) -> Driver:
    """Every binding of JSON-RPC envelopes in turn."""
    return world.driver(request.param)


@pytest.fixture(params=[b for b in PUBLIC_BINDINGS if b in ENVELOPE_BINDINGS])
def rpc_public(request: pytest.FixtureRequest, world: World) -> Driver:
    """Each binding of JSON-RPC envelopes of the public policy in turn."""
    return world.driver(request.param)


@pytest.fixture(params=[b for b in OPERATOR_BINDINGS if b in ENVELOPE_BINDINGS])
def rpc_operator(request: pytest.FixtureRequest, world: World) -> Driver:
    """Each binding of JSON-RPC envelopes of the operator policy in turn."""
    return world.driver(request.param)


# SendMessage (public).


@pytest.mark.parametrize(
    "parts, document",
    [
        ([{"text": "Hello, people."}], {"text": "Hello, people."}),
        ([{"text": "one"}, {"text": ""}, {"text": "two"}], {"text": "one\ntwo"}),
        ([{"data": STRUCTURED, "mediaType": "application/json"}], {"message": STRUCTURED}),
        ([{"text": "cover note"}, {"data": STRUCTURED}], {"message": STRUCTURED}),
        ([{"text": "kept"}, {"data": {"subject": "no sender"}}], {"text": "kept"}),
    ],
    ids=["text", "text parts joined", "structured", "structured beside text", "invalid data beside text"],
)
def test_send_message_stores_a_submission(
    public: Driver, world: World, parts: list[dict[str, Any]], document: dict[str, Any], logged_events: Any
) -> None:
    """
    SendMessage answers the receipt Task (submitted, its receipt in the
    metadata, nothing submitted echoed) and stores the same record through
    every binding, the door aside.
    """
    answer = result(public.call(rpc("SendMessage", message(*parts))))
    content = canonical(document)
    sha256 = hashlib.sha256(content).hexdigest()
    task = answer["task"]
    assert answer == {
        "task": {
            "id": task["id"],
            "contextId": task["contextId"],
            "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": START_STAMP},
            "metadata": {"receipt": {"id": task["id"], "receivedAt": START_STAMP, "sha256": sha256}},
        }
    }
    assert world.store.submissions == {
        task["id"]: Submission(
            id=task["id"],
            context_id=task["contextId"],
            received_at_ms=START * 1000,
            door=public.door,
            source=PEER,
            kind="structured" if "message" in document else "text",
            message_id="m-1",
            content=content,
            sha256=sha256,
        )
    }
    assert [e["door"] for e in logged_events.named("intake.stored")] == [public.door]


#: SendMessage params refused, with the code, reason and fields a BadRequest names.
SEND_REFUSALS: list[tuple[str, Any, int, str, list[str]]] = [
    ("file bytes", message({"raw": "aGk="}), -32005, "CONTENT_TYPE_NOT_SUPPORTED", []),
    ("file url", message({"url": "https://x.example/f"}), -32005, "CONTENT_TYPE_NOT_SUPPORTED", []),
    ("unknown task id", message({"text": "t"}, taskId="t-1"), -32001, "TASK_NOT_FOUND", []),
    ("context id", message({"text": "t"}, contextId="c-1"), -32004, "UNSUPPORTED_OPERATION", []),
    (
        "push config",
        {
            **message({"text": "t"}),
            "configuration": {"taskPushNotificationConfig": {"url": "https://x.example/h"}},
        },
        -32003,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
        [],
    ),
    ("NUL in text", message({"text": "a\x00b"}), -32602, "INVALID_PARAMS", ["message.parts[0].text"]),
    (
        "NUL in a structured field",
        message({"data": {**STRUCTURED, "subject": "a\x00b"}}),
        -32602,
        "INVALID_PARAMS",
        ["message.parts[0].data.subject"],
    ),
    (
        "NUL in messageId",
        {"message": {"messageId": "m\x00", "role": "ROLE_USER", "parts": [{"text": "t"}]}},
        -32602,
        "INVALID_PARAMS",
        ["message.messageId"],
    ),
    (
        "agent role",
        {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "t"}]}},
        -32602,
        "INVALID_PARAMS",
        ["message.role"],
    ),
    ("no parts", message(), -32602, "INVALID_PARAMS", ["message.parts"]),
    ("empty text", message({"text": ""}), -32602, "INVALID_PARAMS", ["message.parts"]),
    (
        "invalid data alone",
        message({"data": {"subject": "no sender"}}),
        -32602,
        "INVALID_PARAMS",
        ["message.parts[0].data"],
    ),
    ("no message", {}, -32602, "INVALID_PARAMS", ["message"]),
]


@pytest.mark.parametrize(
    "params, code, reason, fields", [r[1:] for r in SEND_REFUSALS], ids=[r[0] for r in SEND_REFUSALS]
)
def test_send_message_refusals(
    public: Driver, world: World, params: Any, code: int, reason: str, fields: list[str]
) -> None:
    """A refused SendMessage gets the same error on every binding, and nothing is stored."""
    answer = public.call(rpc("SendMessage", params))
    assert error(answer)[:2] == (code, reason)
    if fields:
        assert set(violations(answer)) == set(fields)
    assert world.store.submissions == {}


def test_send_message_continues_no_task(public: Driver, world: World) -> None:
    """
    A message whose taskId names a stored submission is refused -32004 (each
    submission opens a new task), with a contextId too; one whose taskId
    names no task is -32001 (A2A 3.4.2); nothing is stored either way.
    """
    task_id = world.submit("the first")
    before = dict(world.store.submissions)
    for fields in ({"taskId": task_id}, {"taskId": task_id, "contextId": "c-1"}):
        answer = public.call(rpc("SendMessage", message({"text": "more"}, **fields)))
        assert error(answer) == (-32004, "UNSUPPORTED_OPERATION", [])
    for fields in ({"taskId": task_id + "x"}, {"taskId": "nope", "contextId": "c-1"}):
        answer = public.call(rpc("SendMessage", message({"text": "more"}, **fields)))
        assert error(answer) == (-32001, "TASK_NOT_FOUND", [])
    assert world.store.submissions == before


def test_notification_is_run_and_never_answered(rpc_public: Driver, world: World) -> None:
    """A SendMessage notification stores its submission; nothing answers it."""
    assert rpc_public.call(rpc("SendMessage", message({"text": "quiet"}), ...)) == Answer(None)
    (stored,) = world.store.submissions.values()
    assert stored.content == canonical({"text": "quiet"})
    assert stored.door == rpc_public.door


# GetTask, CancelTask, ListTasks.


def test_get_task_shows_status_only(public: Driver, world: World) -> None:
    """GetTask answers id, contextId and status; after a decision, the new state and time, never the note."""
    task = result(public.call(send_text()))["task"]
    got = result(public.call(rpc("GetTask", {"id": task["id"]}, "g")), "g")
    assert got == {"id": task["id"], "contextId": task["contextId"], "status": task["status"]}
    world.store.append_decision(task["id"], "TASK_STATE_REJECTED", (START + 10) * 1000, "SECRET NOTE")
    got = result(public.call(rpc("GetTask", {"id": task["id"], "historyLength": 5})))
    assert got == {
        "id": task["id"],
        "contextId": task["contextId"],
        "status": {"state": "TASK_STATE_REJECTED", "timestamp": "2027-01-15T08:00:10.000Z"},
    }


def test_get_task_of_an_unknown_id(driver: Driver) -> None:
    """An unknown task is -32001 on every binding."""
    assert error(driver.call(rpc("GetTask", {"id": "nope"}))) == (-32001, "TASK_NOT_FOUND", [])


def test_cancel_task_is_refused(driver: Driver, world: World) -> None:
    """
    CancelTask is -32002 for a known task (the store is append-only) and
    -32001 for an unknown one, on every binding.
    """
    task_id = world.submit("x")
    assert error(driver.call(rpc("CancelTask", {"id": task_id}))) == (-32002, "TASK_NOT_CANCELABLE", [])
    assert error(driver.call(rpc("CancelTask", {"id": "nope"}))) == (-32001, "TASK_NOT_FOUND", [])
    assert decided_state(world, task_id) == "TASK_STATE_SUBMITTED"


@pytest.mark.parametrize("params, size", [({}, 50), ({"pageSize": 7, "status": "TASK_STATE_SUBMITTED"}, 7)])
def test_public_list_tasks_is_an_empty_page(public: Driver, world: World, params: Any, size: int) -> None:
    """The public ListTasks is always an empty page, even with tasks stored."""
    world.submit("somebody else's")
    assert result(public.call(rpc("ListTasks", params))) == {
        "tasks": [],
        "nextPageToken": "",
        "pageSize": size,
        "totalSize": 0,
    }


# Methods not offered.

#: Methods refused on both policies: (name, request, code, reason).
NOT_OFFERED: list[tuple[str, dict[str, Any], int, str]] = [
    (
        "SendStreamingMessage",
        rpc("SendStreamingMessage", message({"text": "t"})),
        -32004,
        "UNSUPPORTED_OPERATION",
    ),
    (
        "CreateTaskPushNotificationConfig",
        rpc("CreateTaskPushNotificationConfig", {"taskId": "t", "url": "https://x.example/h"}),
        -32003,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    (
        "GetTaskPushNotificationConfig",
        rpc("GetTaskPushNotificationConfig", {"taskId": "t", "id": "c"}),
        -32003,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    (
        "ListTaskPushNotificationConfigs",
        rpc("ListTaskPushNotificationConfigs", {"taskId": "t"}),
        -32003,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    (
        "DeleteTaskPushNotificationConfig",
        rpc("DeleteTaskPushNotificationConfig", {"taskId": "t", "id": "c"}),
        -32003,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    ("GetExtendedAgentCard", rpc("GetExtendedAgentCard", {}), -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
]


@pytest.mark.parametrize(
    "request_, code, reason", [r[1:] for r in NOT_OFFERED], ids=[r[0] for r in NOT_OFFERED]
)
def test_methods_not_offered(driver: Driver, world: World, request_: Any, code: int, reason: str) -> None:
    """
    Streaming a message, push notification configs and the extended card
    are refused alike on every binding; nothing is stored.
    """
    assert error(driver.call(request_)) == (code, reason, [])
    assert world.store.submissions == {}


def test_public_subscribe_is_not_offered(public: Driver, world: World) -> None:
    """The public policy does not stream: SubscribeToTask is -32004, even for a known task."""
    task_id = world.submit("x")
    answer = public.stream(rpc("SubscribeToTask", {"id": task_id}))
    assert isinstance(answer, Answer)
    assert error(answer) == (-32004, "UNSUPPORTED_OPERATION", [])
    assert listener_count(world) == 0


# Before any policy: version, method, params, envelope, JSON.


def accepted_request(driver: Driver, world: World) -> tuple[dict[str, Any], Any]:
    """
    A request that changes the store when it is served, and a check that
    it was not: a submission on the public policy, a decision on the
    operator's.
    """
    if driver.policy == "public":
        return send_text(), lambda: world.store.submissions == {}
    task_id = world.submit("x")
    return decide(task_id, "accept"), lambda: decided_state(world, task_id) == "TASK_STATE_SUBMITTED"


@pytest.mark.parametrize("version", [None, "", "0.3", "1.1", "2.0", "1", "x", "1.0-beta"])
def test_without_version_1_0_every_method_is_32009(driver: Driver, world: World, version: str | None) -> None:
    """Without A2A-Version 1.0 (none, empty, another) a method is -32009 and is not run, on every binding."""
    request, untouched = accepted_request(driver, world)
    answer = driver.call(request, version=version, extensions=BOTH_EXTENSIONS)
    assert error(answer) == (-32009, "VERSION_NOT_SUPPORTED", [])
    assert untouched()


@pytest.mark.parametrize(
    "version, query",
    [
        ("1.0", None),
        ("1.0.1", None),
        (" 1.0 ", None),
        ("1.0.7", None),
        (None, "1.0"),
        ("", "1.0"),
        ("1.0", "0.3"),
    ],
    ids=["1.0", "1.0.1", "padded", "1.0.7", "query", "empty header, query", "header wins"],
)
def test_version_1_0_is_served(driver: Driver, world: World, version: str | None, query: str | None) -> None:
    """Any 1.0 value is served, from the header or, without one, the query parameter; the header wins."""
    request, untouched = accepted_request(driver, world)
    answer = driver.call(request, version=version, query_version=query, extensions=BOTH_EXTENSIONS)
    result(answer)
    assert not untouched()


def test_header_version_wins_over_the_query(driver: Driver, world: World) -> None:
    """A header naming another version is refused, whatever the query says."""
    request, untouched = accepted_request(driver, world)
    answer = driver.call(request, version="0.3", query_version="1.0", extensions=BOTH_EXTENSIONS)
    assert error(answer) == (-32009, "VERSION_NOT_SUPPORTED", [])
    assert untouched()


@pytest.mark.parametrize("method", ["Nope", "message/send", "tasks/get", "sendMessage", "getTask"])
def test_unknown_methods_are_32601(driver: Driver, method: str) -> None:
    """An unknown method, every v0.3 name included, is -32601 on every binding."""
    assert error(driver.call(rpc(method, {}))) == (-32601, "METHOD_NOT_FOUND", [])


def test_unknown_method_is_32601_before_the_version(driver: Driver) -> None:
    """Without a version, an unknown method is still -32601 (the method is looked up first)."""
    assert error(driver.call(rpc("Nope", {}), version=None)) == (-32601, "METHOD_NOT_FOUND", [])


#: Params refused before any policy: (name, request, fields named).
BAD_PARAMS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("GetTask without id", rpc("GetTask", {}), ["id"]),
    ("GetTask id not a string", rpc("GetTask", {"id": 7}), ["id"]),
    ("GetTask id with NUL", rpc("GetTask", {"id": "abc\x00def"}), ["id"]),
    ("GetTask id too long", rpc("GetTask", {"id": "x" * 1000}), ["id"]),
    ("GetTask negative history", rpc("GetTask", {"id": "t", "historyLength": -1}), ["historyLength"]),
    ("GetTask params not an object", rpc("GetTask", ["t"]), []),
    ("CancelTask without id", rpc("CancelTask", {}), ["id"]),
    ("ListTasks page size 0", rpc("ListTasks", {"pageSize": 0}), ["pageSize"]),
    ("ListTasks page size -1", rpc("ListTasks", {"pageSize": -1}), ["pageSize"]),
    ("ListTasks page size 101", rpc("ListTasks", {"pageSize": 101}), ["pageSize"]),
    ("ListTasks unknown status", rpc("ListTasks", {"status": "TASK_STATE_NOPE"}), ["status"]),
    (
        "ListTasks bad timestamp",
        rpc("ListTasks", {"statusTimestampAfter": "yesterday"}),
        ["statusTimestampAfter"],
    ),
    ("SendMessage message not an object", rpc("SendMessage", {"message": "hi"}), ["message"]),
    (
        "SendMessage parts not a list",
        rpc("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER", "parts": {}}}),
        ["message.parts"],
    ),
]


@pytest.mark.parametrize("request_, fields", [r[1:] for r in BAD_PARAMS], ids=[r[0] for r in BAD_PARAMS])
def test_bad_params_are_32602(
    driver: Driver, world: World, request_: dict[str, Any], fields: list[str]
) -> None:
    """Params that do not validate are -32602 with a BadRequest naming the fields, on every binding."""
    answer = driver.call(request_)
    assert error(answer) == (-32602, "INVALID_PARAMS", [BAD_REQUEST])
    if fields:
        assert violations(answer) == fields
    assert world.store.submissions == {}


#: Envelopes that are not a JSON-RPC 2.0 request: (name, request, id answered).
BAD_ENVELOPES: list[tuple[str, Any, Any]] = [
    ("jsonrpc 1.0", {"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, 1),
    ("no jsonrpc", {"id": 1, "method": "GetTask"}, 1),
    ("no method", {"jsonrpc": "2.0", "id": 1}, 1),
    ("method not a string", {"jsonrpc": "2.0", "id": 1, "method": 5}, 1),
    ("empty method", {"jsonrpc": "2.0", "id": 1, "method": ""}, 1),
    ("params a string", {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": "t"}, 1),
    ("id fractional", {"jsonrpc": "2.0", "id": 1.5, "method": "GetTask"}, None),
    ("id an object", {"jsonrpc": "2.0", "id": {}, "method": "GetTask"}, None),
    ("id a boolean", {"jsonrpc": "2.0", "id": True, "method": "GetTask"}, None),
    ("id of 129 characters", {"jsonrpc": "2.0", "id": "x" * 129, "method": "GetTask"}, None),
    ("id past 2**53", {"jsonrpc": "2.0", "id": 2**53 + 1, "method": "GetTask"}, None),
    ("batch", [rpc("GetTask", {"id": "a"})], None),
    ("empty batch", [], None),
    ("a string", "GetTask", None),
    ("a number", 5, None),
    ("null", None, None),
]


@pytest.mark.parametrize(
    "request_, answered_id", [r[1:] for r in BAD_ENVELOPES], ids=[r[0] for r in BAD_ENVELOPES]
)
def test_malformed_envelopes_are_32600(rpc_driver: Driver, request_: Any, answered_id: Any) -> None:
    """
    A malformed envelope or a batch is -32600 on every binding, with the id
    when it can be echoed, else null.
    """
    answer = rpc_driver.call(request_)
    assert error(answer, answered_id) == (-32600, "INVALID_REQUEST", [])


#: Bodies that are not (strict) JSON, all valid UTF-8.
UNPARSABLE: list[tuple[str, bytes]] = [
    ("garbage", b"{not json"),
    ("empty", b""),
    ("truncated", b'{"jsonrpc":"2.0","id":1,"method":"GetTask"'),
    ("NaN", b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"x":NaN}}'),
    ("Infinity", b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"x":-Infinity}}'),
    ("duplicate keys", b'{"jsonrpc":"2.0","id":1,"id":2,"method":"GetTask"}'),
    ("long number", b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"x":' + b"1" * 65 + b"}}"),
    ("lone surrogate", b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"\\ud800"}}'),
    ("trailing data", b'{"jsonrpc":"2.0","id":1,"method":"GetTask"} {}'),
]


@pytest.mark.parametrize("body", [r[1] for r in UNPARSABLE], ids=[r[0] for r in UNPARSABLE])
def test_unparsable_json_is_32700(driver: Driver, body: bytes) -> None:
    """A body that is not strict JSON is -32700 with a null id on every binding."""
    assert error(driver.call(body), None) == (-32700, "PARSE_ERROR", [])


@pytest.mark.parametrize(
    "request_, service",
    [
        (rpc("GetTask", {"id": "nope"}, ...), {}),
        (rpc("Nope", {}, ...), {}),
        (rpc("GetTask", {}, ...), {}),
        (rpc("GetTask", {"id": "nope"}, ...), {"version": None}),
        (rpc("CreateTaskPushNotificationConfig", {"taskId": "t", "url": "https://x.example/h"}, ...), {}),
    ],
    ids=["unknown task", "unknown method", "bad params", "no version", "not offered"],
)
def test_a_refused_notification_is_not_answered(
    rpc_driver: Driver, request_: Any, service: dict[str, Any]
) -> None:
    """A notification is never answered, not even with an error, on every binding."""
    assert rpc_driver.call(request_, **service) == Answer(None)


def test_null_id_is_a_request(rpc_driver: Driver) -> None:
    """An id of null is answered (it is not a notification), with null."""
    assert error(rpc_driver.call(rpc("GetTask", {"id": "nope"}, None)), None)[0] == -32001


@pytest.mark.parametrize("request_id", [0, -7, 2**53, "", "x" * 128, "é\u2028"])
def test_request_ids_are_echoed(rpc_driver: Driver, request_id: Any) -> None:
    """Any string id up to 128 characters or integer within 2**53 is echoed as sent."""
    assert error(rpc_driver.call(rpc("GetTask", {"id": "nope"}, request_id)), request_id)[0] == -32001


# The interface URL with a slash after it (found by the official TCK, whose
# clients join paths to it).


@pytest.mark.parametrize("name", ["jsonrpc", "rest", "rest-unix", "rest-bearer"])
def test_the_interface_url_with_a_slash_after_it(world: World, name: str) -> None:
    """
    A request to the interface URL with a slash after it (/a2a/v1/; on
    HTTP+JSON /a2a/rest/ joined with /<route>) is served as at the URL:
    the same answers, and a submission stored.
    """
    task_id = world.submit("x")
    requests = [rpc("GetTask", {"id": task_id}), rpc("GetTask", {"id": "nope"}), rpc("Nope", {})]
    if name == "jsonrpc":
        plain = world.driver(name)
        slashed = JSONRPCDriver(world)
        slashed.path = "/a2a/v1/"
        answers = [(slashed.call(r), plain.call(r)) for r in requests]
        sent = slashed.call(send_text())
    else:
        rest = world.driver(name)
        assert isinstance(rest, RESTDriver)
        answers = [(rest.call_at(rest.base + "/", r), rest.call(r)) for r in requests]
        sent = rest.call_at(rest.base + "/", send_text())
    assert all(a == b for a, b in answers), answers
    assert result(answers[0][0])["id"] == task_id
    if world.driver(name).policy == "public":
        assert result(sent)["task"]["id"] in world.store.submissions
    else:
        assert error(sent) == (-32004, "UNSUPPORTED_OPERATION", [])


# Extensions.


@pytest.mark.parametrize(
    "requested", [(UNKNOWN_EXTENSION,), BOTH_EXTENSIONS], ids=["unknown", "operator's"]
)
def test_public_bindings_echo_no_extension(public: Driver, world: World, requested: tuple[str, ...]) -> None:
    """
    The public bindings support no extension: one asked for is ignored,
    never echoed, and its methods do not exist.
    """
    task_id = world.submit("x")
    got = public.call(rpc("GetTask", {"id": task_id}), extensions=requested)
    assert result(got)["id"] == task_id
    assert got.echoed == frozenset()
    refused = public.call(decide(task_id, "accept"), extensions=requested)
    assert error(refused) == (-32601, "METHOD_NOT_FOUND", [])
    assert refused.echoed == frozenset()
    assert decided_state(world, task_id) == "TASK_STATE_SUBMITTED"


@pytest.mark.parametrize(
    "requested, echoed",
    [
        ((), ()),
        ((UNKNOWN_EXTENSION,), ()),
        ((REVIEW_EXTENSION,), (REVIEW_EXTENSION,)),
        ((INBOX_EVENTS_EXTENSION, UNKNOWN_EXTENSION), (INBOX_EVENTS_EXTENSION,)),
        (BOTH_EXTENSIONS, BOTH_EXTENSIONS),
    ],
    ids=["none", "unknown", "review", "inbox and unknown", "both"],
)
def test_operator_echoes_the_extensions_it_activated(
    operator: Driver, world: World, requested: tuple[str, ...], echoed: tuple[str, ...]
) -> None:
    """
    The operator bindings echo exactly the supported extensions a caller
    activated, on answers and errors alike.
    """
    task_id = world.submit("x")
    assert operator.call(rpc("GetTask", {"id": task_id}), extensions=requested).echoed == frozenset(echoed)
    assert operator.call(rpc("GetTask", {"id": "nope"}), extensions=requested).echoed == frozenset(echoed)


def test_extension_method_needs_activation(operator: Driver, world: World) -> None:
    """
    Without its extension activated, Decide does not exist (-32601, naming
    the extension); nothing is decided.
    """
    task_id = world.submit("x")
    answer = operator.call(decide(task_id, "accept"), extensions=(INBOX_EVENTS_EXTENSION,))
    assert error(answer) == (-32601, "METHOD_NOT_FOUND", [])
    assert REVIEW_EXTENSION in answer.response["error"]["message"]
    assert decided_state(world, task_id) == "TASK_STATE_SUBMITTED"


# Credentials (public).


@pytest.mark.parametrize("binding", PUBLIC_BINDINGS)
def test_submitter_credentials(binding: str) -> None:
    """
    With [auth] configured, a good bearer token or API key is served alike
    on every public binding; a wrong one is refused and nothing is stored
    (how it is refused is the binding's own: HTTP 401, a WebSocket error
    frame).
    """
    world = World(
        {"auth": {"bearer_tokens": [credential_digest("tok-1")], "api_keys": [credential_digest("key-1")]}}
    )
    try:
        driver = world.driver(binding)
        for headers in ([("Authorization", "Bearer tok-1")], [("X-API-Key", "key-1")]):
            result(driver.call(send_text(), headers=headers))
        assert len(world.store.submissions) == 2
        for headers in ([("Authorization", "Bearer tok-2")], [("X-API-Key", "key-2")], []):
            refused = driver.call(send_text(), headers=headers)
            assert refused.response is None or "result" not in refused.response, refused
        assert len(world.store.submissions) == 2
    finally:
        world.close()
    assert world.active_calls() == []


@pytest.mark.parametrize(
    "forwarded, source",
    [
        ("203.0.113.9", "203.0.113.9"),
        ("198.51.100.1, 203.0.113.9", "203.0.113.9"),
        (f"203.0.113.9, {PEER}", "203.0.113.9"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("garbage", PEER),
    ],
    ids=["one", "rightmost", "proxy skipped", "IPv6", "garbage"],
)
def test_submitter_behind_a_trusted_proxy(forwarded: str, source: str) -> None:
    """
    Behind a trusted proxy, every public binding stores the same source:
    the rightmost untrusted X-Forwarded-For address.
    """
    world = World({"limits": {"rate": 0, "trusted_proxies": [PEER]}})
    try:
        for binding in PUBLIC_BINDINGS:
            answer = world.driver(binding).call(
                send_text(), headers=[("X-Forwarded-For", forwarded)]
            )
            task = result(answer)["task"]
            assert world.store.submissions[task["id"]].source == source, binding
    finally:
        world.close()
    assert world.active_calls() == []


def test_service_parameter_names_ignore_case(driver: Driver, world: World) -> None:
    """a2a-version and a2a-extensions are read whatever the case of their names."""
    task_id = world.submit("x")
    answer = driver.call(
        rpc("GetTask", {"id": task_id}),
        version=None,
        headers=[("a2a-version", "1.0"), ("a2A-eXtensions", REVIEW_EXTENSION)],
    )
    assert result(answer)["id"] == task_id
    assert answer.echoed == ({REVIEW_EXTENSION} if driver.policy == "operator" else set())


# A header sent on two lines is read as its lines joined with ", " on every
# binding (RFC 9110 5.3; the WebSocket binding's service parameters): a
# version or a credential on two lines is no version and no credential. The
# suite found the HTTP bindings taking the last line instead.


def outcome(answer: Answer) -> Any:
    """What a request came to, in words every binding shares: its error code, or served."""
    if answer.response is not None and "result" in answer.response:
        return "served"
    if answer.response is not None:
        return answer.response["error"]["code"]
    return "refused" if answer.refusal is not None else None


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(("1.0", "0.3"), id="1.0 then 0.3"),
        pytest.param(("1.0", "1.0"), id="1.0 twice"),
        pytest.param(("0.3", "1.0"), id="0.3 then 1.0"),
    ],
)
def test_a2a_version_on_two_lines_is_read_alike(world: World, lines: tuple[str, str]) -> None:
    """A2A-Version sent on two header lines comes to the same outcome on every binding."""
    outcomes = {
        name: outcome(
            world.driver(name).call(
                rpc("GetTask", {"id": "nope"}), version=None, headers=[("A2A-Version", v) for v in lines]
            )
        )
        for name in ALL_BINDINGS
    }
    assert len(set(outcomes.values())) == 1, outcomes


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(
            [("Authorization", "Bearer tok-1"), ("Authorization", "Bearer nope")],
            id="good then bad token",
        ),
        pytest.param(
            [("Authorization", "Bearer tok-1"), ("Authorization", "Bearer tok-1")],
            id="good token twice",
        ),
        pytest.param(
            [("Authorization", "Bearer nope"), ("Authorization", "Bearer tok-1")],
            id="bad then good token",
        ),
        pytest.param(
            [("X-API-Key", "nope"), ("X-API-Key", "key-1")], id="bad then good key",
        ),
    ],
)
def test_a_credential_on_two_lines_is_read_alike(headers: list[tuple[str, str]]) -> None:
    """A credential header sent on two lines is admitted, or refused, alike on every public binding."""
    world = World(
        {"auth": {"bearer_tokens": [credential_digest("tok-1")], "api_keys": [credential_digest("key-1")]}}
    )
    try:
        outcomes = {
            name: outcome(world.driver(name).call(send_text(), headers=headers)) == "served"
            for name in PUBLIC_BINDINGS
        }
    finally:
        world.close()
    assert len(set(outcomes.values())) == 1, outcomes


# The operator policy.


def task_ids(page: dict[str, Any]) -> list[str]:
    return [task["id"] for task in page["tasks"]]


def test_operator_lists_every_task(operator: Driver, world: World) -> None:
    """ListTasks shows every submission, newest first, whole, with totals and an empty last token."""
    first, second, third = (world.submit(t) for t in ("one", "two", "three"))
    page = result(operator.call(rpc("ListTasks", {})))
    assert task_ids(page) == [third, second, first]
    assert (page["totalSize"], page["pageSize"], page["nextPageToken"]) == (3, 50, "")
    task = page["tasks"][2]
    assert task["history"][0]["parts"] == [{"text": "one"}]
    assert task["metadata"]["door"] == "jsonrpc"
    assert task["metadata"]["source"] == PEER
    assert task["metadata"]["kind"] == "text"
    assert task["metadata"]["receipt"]["id"] == first
    assert "artifacts" not in task
    world.store.append_decision(first, "TASK_STATE_COMPLETED", int(world.clock.seconds() * 1000), None)
    assert task_ids(result(operator.call(rpc("ListTasks", {})))) == [first, third, second]
    rejected = result(operator.call(rpc("ListTasks", {"status": "TASK_STATE_SUBMITTED", "historyLength": 0})))
    assert task_ids(rejected) == [third, second]
    assert rejected["totalSize"] == 2
    assert all("history" not in t for t in rejected["tasks"])


def test_operator_pages_through_the_inbox(operator: Driver, world: World) -> None:
    """Keyset paging returns every task once, whatever arrives between pages."""
    original = [world.submit(f"task {n}", advance=0) for n in range(5)]
    seen: list[str] = []
    params: dict[str, Any] = {"pageSize": 2}
    pages = 0
    while True:
        page = result(operator.call(rpc("ListTasks", params)))
        seen += task_ids(page)
        pages += 1
        world.submit(f"arrived after page {pages}", advance=0)
        if not page["nextPageToken"]:
            break
        params = {"pageSize": 2, "pageToken": page["nextPageToken"]}
    assert pages == 3
    assert sorted(seen) == sorted(original)
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize(
    "token",
    # Not a token's alphabet; too long; ours (1, 2) with its last letter
    # changed; well formed base64 of something else.
    ["nonsense!", "x" * 100, "MS4*", "bm90LWEtdG9rZW4"],
)
def test_operator_refuses_a_page_token_not_its_own(operator: Driver, token: str) -> None:
    """A page token Beacon did not make is -32602."""
    answer = operator.call(rpc("ListTasks", {"pageToken": token}))
    assert error(answer) == (-32602, "INVALID_PARAMS", [BAD_REQUEST])
    assert violations(answer) == ["pageToken"]


def test_operator_get_task_is_whole(operator: Driver, world: World) -> None:
    """GetTask shows the submitted message, the status, the receipt, the door and the source."""
    task_id = world.submit("the whole thing")
    submission = world.store.submissions[task_id]
    assert result(operator.call(rpc("GetTask", {"id": task_id}))) == {
        "id": task_id,
        "contextId": submission.context_id,
        "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": START_STAMP},
        "metadata": {
            "receipt": {"id": task_id, "receivedAt": START_STAMP, "sha256": submission.sha256},
            "door": "jsonrpc",
            "source": PEER,
            "kind": "text",
            "size": len(submission.content),
        },
        "history": [
            {
                "messageId": "seed",
                "role": "ROLE_USER",
                "contextId": submission.context_id,
                "taskId": task_id,
                "parts": [{"text": "the whole thing"}],
            }
        ],
    }


def test_operator_refuses_submissions(operator: Driver, world: World) -> None:
    """The operator bindings take no submissions (-32004)."""
    assert error(operator.call(send_text())) == (-32004, "UNSUPPORTED_OPERATION", [])
    assert world.store.submissions == {}


@pytest.mark.parametrize(
    "decision, note, state, text",
    [
        ("accept", None, "TASK_STATE_COMPLETED", "accepted"),
        ("reject", None, "TASK_STATE_REJECTED", "rejected"),
        ("reject", "not for us", "TASK_STATE_REJECTED", "not for us"),
        ("accept", "n" * 4000, "TASK_STATE_COMPLETED", "n" * 4000),
    ],
    ids=["accept", "reject", "reject with a note", "accept with the longest note"],
)
def test_decide(
    operator: Driver,
    world: World,
    logged_events: Any,
    decision: str,
    note: str | None,
    state: str,
    text: str,
) -> None:
    """
    Decide appends the decision (its state, time and note stored) and
    answers the whole task, the note as the status message; the public
    GetTask then shows the state only.
    """
    task_id = world.submit("please review", advance=5)
    answer = operator.call(decide(task_id, decision, note), extensions=(REVIEW_EXTENSION,))
    assert answer.echoed == {REVIEW_EXTENSION}
    task = result(answer)
    assert task["status"] == {
        "state": state,
        "timestamp": "2027-01-15T08:00:05.000Z",
        "message": {
            "messageId": f"{task_id}-decision",
            "role": "ROLE_AGENT",
            "contextId": task["contextId"],
            "taskId": task_id,
            "parts": [{"text": text}],
            "metadata": {REVIEW_EXTENSION: {"decision": decision, "hasNote": note is not None}},
            "extensions": [REVIEW_EXTENSION],
        },
    }
    assert task["history"][0]["parts"] == [{"text": "please review"}]
    stored = world.store._task(task_id)
    assert stored is not None
    assert (stored.state, stored.updated_at_ms, stored.note) == (state, (START + 5) * 1000, note)
    assert [(e["task_id"], e["decision"], e["operator"]) for e in logged_events.named("review.decided")] == [
        (task_id, decision, operator.source)
    ]
    public = world.driver("jsonrpc")
    assert result(public.call(rpc("GetTask", {"id": task_id})))["status"] == {
        "state": state,
        "timestamp": "2027-01-15T08:00:05.000Z",
    }


def test_deciding_twice_is_refused(operator: Driver, world: World) -> None:
    """A second decision is -32004 naming the current state; the first stands."""
    task_id = world.submit("x")
    result(operator.call(decide(task_id, "accept"), extensions=(REVIEW_EXTENSION,)))
    answer = operator.call(decide(task_id, "reject", "changed my mind"), extensions=(REVIEW_EXTENSION,))
    assert error(answer) == (-32004, "UNSUPPORTED_OPERATION", [])
    assert answer.response["error"]["data"][0]["metadata"] == {"state": "TASK_STATE_COMPLETED"}
    stored = world.store._task(task_id)
    assert stored is not None and (stored.state, stored.note) == ("TASK_STATE_COMPLETED", None)


def test_review_list_finds(operator: Driver, world: World) -> None:
    """
    beacon.review.List: newest received first whatever was decided, with
    full-text search, state and id-prefix filters, and keyset pages.
    """
    first = world.submit("buy now, cheap", advance=1)
    second = world.submit("a real question", advance=1)
    third = world.submit("BUY it NOW", advance=1)
    result(operator.call(decide(first, "reject"), extensions=(REVIEW_EXTENSION,)))

    def listed(**params: Any) -> Any:
        return result(operator.call(rpc("beacon.review.List", params), extensions=(REVIEW_EXTENSION,)))

    assert [t["id"] for t in listed()["tasks"]] == [third, second, first]
    assert [t["id"] for t in listed(sort="updated")["tasks"]] == [first, third, second]
    found = listed(search="buy now")
    assert [t["id"] for t in found["tasks"]] == [third, first] and found["totalSize"] == 2
    assert [t["id"] for t in listed(search="buy now", status="TASK_STATE_SUBMITTED")["tasks"]] == [third]
    assert [t["id"] for t in listed(idPrefix=second[:12])["tasks"]] == [second]
    page = listed(pageSize=2, includeTotal=False)
    assert [t["id"] for t in page["tasks"]] == [third, second] and "totalSize" not in page
    rest = listed(pageSize=2, pageToken=page["nextPageToken"])
    assert [t["id"] for t in rest["tasks"]] == [first] and rest["nextPageToken"] == ""
    assert "history" not in listed(historyLength=0)["tasks"][0]


def test_decide_many(operator: Driver, world: World, logged_events: Any) -> None:
    """
    beacon.review.DecideMany decides each id with one note, says which were
    already decided and which name nothing, and logs each decision.
    """
    ids = [world.submit(f"junk {n}") for n in range(3)]
    result(operator.call(decide(ids[0], "accept"), extensions=(REVIEW_EXTENSION,)))
    params = {"ids": [*ids, "unknown"], "decision": "reject", "note": "flood"}
    answer = result(operator.call(rpc("beacon.review.DecideMany", params), extensions=(REVIEW_EXTENSION,)))
    assert answer == {
        "decision": "reject",
        "decided": ids[1:],
        "alreadyDecided": [{"id": ids[0], "state": "TASK_STATE_COMPLETED"}],
        "notFound": ["unknown"],
        "failed": [],
    }
    for task_id in ids[1:]:
        stored = world.store._task(task_id)
        assert stored is not None and (stored.state, stored.note) == ("TASK_STATE_REJECTED", "flood")
    assert [e["task_id"] for e in logged_events.named("review.decided")] == ids


def test_purge(operator: Driver, world: World, logged_events: Any) -> None:
    """
    beacon.review.Purge erases decided content and notes (a dry run only
    counts), logs the count only; the task keeps its receipt and state, and
    the public GetTask still answers.
    """
    task_id = world.submit("private words", advance=1)
    kept = world.submit("undecided words", advance=1)
    result(operator.call(decide(task_id, "reject", "a private note"), extensions=(REVIEW_EXTENSION,)))
    world.clock.advance(10)

    def purge(**params: Any) -> Any:
        return result(operator.call(rpc("beacon.review.Purge", params), extensions=(REVIEW_EXTENSION,)))

    assert purge(decidedBefore="2030-01-01T00:00:00Z", dryRun=True) == {"purged": 1, "dryRun": True}
    assert logged_events.named("review.purged") == []
    assert purge(decidedBefore="2027-01-15T08:00:00.000Z") == {"purged": 0, "dryRun": False}
    assert purge(decidedBefore="2030-01-01T00:00:00Z") == {"purged": 1, "dryRun": False}
    assert [e["count"] for e in logged_events.named("review.purged")] == [0, 1]
    assert "private" not in repr(logged_events.named("review.purged"))
    task = result(operator.call(rpc("GetTask", {"id": task_id})))
    assert "history" not in task and task["metadata"]["purgedAt"].endswith("Z")
    assert task["metadata"]["receipt"]["id"] == task_id and task["metadata"]["size"] == 0
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert "a private note" not in json.dumps(task)
    assert result(operator.call(rpc("GetTask", {"id": kept})))["history"][0]["parts"] == [
        {"text": "undecided words"}
    ]
    public = world.driver("jsonrpc")
    assert result(public.call(rpc("GetTask", {"id": task_id})))["status"]["state"] == "TASK_STATE_REJECTED"


@pytest.mark.parametrize(
    "params, code, reason",
    [
        ({"id": "unknown", "decision": "accept"}, -32001, "TASK_NOT_FOUND"),
        ({"decision": "accept"}, -32602, "INVALID_PARAMS"),
        ({"id": "x", "decision": "maybe"}, -32602, "INVALID_PARAMS"),
        ({"id": "x"}, -32602, "INVALID_PARAMS"),
        ({"id": "x", "decision": "accept", "note": "n" * 4001}, -32602, "INVALID_PARAMS"),
        ({"id": "x", "decision": "accept", "note": "a\x00b"}, -32602, "INVALID_PARAMS"),
    ],
    ids=["unknown id", "no id", "unknown decision", "no decision", "note too long", "NUL in note"],
)
def test_bad_decisions(
    operator: Driver, world: World, params: dict[str, Any], code: int, reason: str
) -> None:
    """Unknown ids and bad params are refused alike; nothing is decided."""
    task_id = world.submit("x")
    answer = operator.call(rpc("beacon.review.Decide", params), extensions=(REVIEW_EXTENSION,))
    assert error(answer)[:2] == (code, reason)
    assert decided_state(world, task_id) == "TASK_STATE_SUBMITTED"


def test_decide_as_a_notification_is_run(rpc_operator: Driver, world: World) -> None:
    """A Decide notification decides; nothing answers it."""
    task_id = world.submit("x")
    request = decide(task_id, "reject", request_id=...)
    answer = rpc_operator.call(request, extensions=(REVIEW_EXTENSION,))
    assert answer == Answer(None, frozenset({REVIEW_EXTENSION}))
    assert decided_state(world, task_id) == "TASK_STATE_REJECTED"


# Streams (the operator policy streams; the public one does not).


def open_stream(driver: Driver, request: dict[str, Any], extensions: tuple[str, ...] = ()) -> Stream:
    stream = driver.stream(request, extensions=extensions)
    assert isinstance(stream, Stream), stream
    return stream


def test_subscribe_streams_the_task_until_its_decision(operator: Driver, world: World) -> None:
    """
    SubscribeToTask sends the current task, then its decision, then ends;
    other tasks' changes are not sent.
    """
    task_id = world.submit("watch me")
    other = world.submit("not me")
    stream = open_stream(operator, rpc("SubscribeToTask", {"id": task_id}, "sub"))
    (snapshot,) = stream.events()
    assert snapshot["id"] == "sub"
    assert snapshot["result"]["task"]["id"] == task_id
    assert snapshot["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    result(operator.call(decide(other, "accept"), extensions=(REVIEW_EXTENSION,)))
    assert stream.events() == []
    assert not stream.ended
    result(operator.call(decide(task_id, "reject", "no"), extensions=(REVIEW_EXTENSION,)))
    (update,) = stream.events()
    assert update == {
        "jsonrpc": "2.0",
        "id": "sub",
        "result": {
            "statusUpdate": {
                "taskId": task_id,
                "contextId": snapshot["result"]["task"]["contextId"],
                "status": result(operator.call(rpc("GetTask", {"id": task_id})))["status"],
            }
        },
    }
    assert stream.ended
    assert listener_count(world) == 0


def test_subscribe_refusals(operator: Driver, world: World) -> None:
    """SubscribeToTask on a decided task is -32004, on an unknown one -32001; no stream is left open."""
    task_id = world.submit("x")
    world.store.append_decision(task_id, "TASK_STATE_COMPLETED", START * 1000, None)
    refusals: list[tuple[dict[str, Any], tuple[int, str, list[str]]]] = [
        ({"id": task_id}, (-32004, "UNSUPPORTED_OPERATION", [])),
        ({"id": "nope"}, (-32001, "TASK_NOT_FOUND", [])),
    ]
    for params, expected in refusals:
        answer = operator.stream(rpc("SubscribeToTask", params))
        assert isinstance(answer, Answer)
        assert error(answer) == expected
    assert listener_count(world) == 0


def test_follow_streams_the_inbox(operator: Driver, world: World) -> None:
    """
    beacon.inbox.Follow streams each new submission (the whole task) and
    each decision, in commit order, until the follower leaves; it keeps no
    listener behind.
    """
    stream = open_stream(operator, rpc("beacon.inbox.Follow", None, 9), BOTH_EXTENSIONS)
    assert stream.echoed == set(BOTH_EXTENSIONS)
    assert stream.events() == []
    world.clock.advance(60)  # quiet: keepalives only, never an event
    a = world.submit("a")
    b = world.submit("b")
    result(operator.call(decide(a, "accept"), extensions=(REVIEW_EXTENSION,)))
    events = stream.events()
    assert [e["id"] for e in events] == [9, 9, 9]
    assert [
        ("task", e["result"]["task"]["id"])
        if "task" in e["result"]
        else ("status", e["result"]["statusUpdate"]["taskId"])
        for e in events
    ] == [("task", a), ("task", b), ("status", a)]
    assert events[0]["result"]["task"]["history"][0]["parts"] == [{"text": "a"}]
    assert events[2]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert not stream.ended
    stream.close()
    world.submit("after")
    assert listener_count(world) == 0


def test_follow_needs_its_extension(operator: Driver, world: World) -> None:
    """Without the inbox-events extension, Follow does not exist; no stream starts."""
    answer = operator.stream(rpc("beacon.inbox.Follow"), extensions=(REVIEW_EXTENSION,))
    assert isinstance(answer, Answer)
    assert error(answer) == (-32601, "METHOD_NOT_FOUND", [])
    assert listener_count(world) == 0


def test_streaming_notification_is_not_run(rpc_operator: Driver, world: World) -> None:
    """A streaming method sent without an id starts no stream and gets no answer."""
    answer = rpc_operator.call(rpc("beacon.inbox.Follow", None, ...), extensions=BOTH_EXTENSIONS)
    assert answer.response is None
    assert listener_count(world) == 0


# Every binding of a policy answers alike, byte for byte (ids and times aside).

#: Requests whose whole answer must be the same on every binding of a policy.
ALIKE: list[tuple[str, Any, dict[str, Any]]] = [
    *((name, request_, {}) for name, request_, _, _ in NOT_OFFERED),
    *((name, rpc("SendMessage", params), {}) for name, params, _, _, _ in SEND_REFUSALS),
    *((name, request_, {}) for name, request_, _ in BAD_PARAMS),
    *((name, request_, {}) for name, request_, _ in BAD_ENVELOPES),
    *((name, body, {}) for name, body in UNPARSABLE),
    ("unknown method", rpc("Nope", {}), {}),
    ("unknown task", rpc("GetTask", {"id": "nope"}), {}),
    ("cancel unknown", rpc("CancelTask", {"id": "nope"}), {}),
    ("no version", rpc("GetTask", {"id": "nope"}), {"version": None}),
    ("old version", rpc("GetTask", {"id": "nope"}), {"version": "0.3"}),
    ("list", rpc("ListTasks", {"pageSize": 3}), {}),
    ("unknown decision", decide("nope", "accept"), {"extensions": BOTH_EXTENSIONS}),
    ("decide not activated", decide("nope", "accept"), {}),
]


@pytest.mark.parametrize("policy", ["public", "operator"])
def test_every_binding_of_a_policy_answers_alike(world: World, policy: str) -> None:
    """
    Each request of the suite gets the very same answer (messages and
    details included) from every binding of its policy.
    """
    drivers = [world.driver(name) for name in ALL_BINDINGS if world.driver(name).policy == policy]
    for name, request_, service in ALIKE:
        answers = [d.call(request_, **service) for d in drivers if d.expresses(request_)]
        assert all(a == answers[0] for a in answers), (name, answers)


def test_send_message_answers_and_stores_alike(world: World) -> None:
    """
    The same SendMessage through each public binding gets the same answer
    and record, but for the ids and the door.
    """
    request = rpc("SendMessage", message({"text": "t"}, metadata={"k": "v"}))
    answers: list[Any] = []
    records: list[Submission] = []
    for name in PUBLIC_BINDINGS:
        task = result(world.driver(name).call(request))["task"]
        submission = world.store.submissions[task["id"]]
        text = json.dumps(task).replace(task["id"], "ID").replace(task["contextId"], "CONTEXT")
        answers.append(json.loads(text))
        records.append(replace(submission, id="ID", context_id="CONTEXT", door="DOOR"))
    assert answers == [answers[0]] * len(PUBLIC_BINDINGS)
    assert records == [records[0]] * len(PUBLIC_BINDINGS)
    assert sorted(s.door for s in world.store.submissions.values()) == [
        "grpc",
        "http+json",
        "jsonrpc",
        "websocket",
        "websocket",
    ]
