"""
The intake (beacon.intake): Beacon's public policy (docs/reference/jsonrpc.rst: "The public
policy") through the real
Dispatcher over a L{MemoryStore} and a L{Clock}, the SendMessage mapping, the
structured-message schema and the public agent card.

Everything here is synchronous: every Deferred from MemoryStore has already
fired.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel, Logger, formatEvent
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from beacon.logs import InfoLogger
from beacon.intake import (
    AUTONOMOUS_AGENT_PATH,
    CardText,
    PublicPolicy,
    load_schema,
    public_card,
    schema_validator,
)
from beacon.intake._public import receipt_task
from beacon.intake._submission import canonical_content
from beacon.protocol import A2A_DOMAIN, CallContext, Dispatcher, IA2AHandler
from beacon.testing import MemoryStore

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"

#: Submitted text that must never come back in any answer or log line.
SECRET = "zq-SECRET-4f9e1b"

#: The Clock's time for every test: 2025-11-30T04:29:55.125Z.
NOW = 1_764_476_995.125
NOW_TEXT = "2025-11-30T04:29:55.125Z"

IDENTITY_STATEMENT = (
    "Cryptographic identity does not establish autonomy, consciousness or personhood."
)

#: A structured message valid against message.schema.json.
STRUCTURED = {
    "from": {"name": "Ada " + SECRET, "agent": "ada-assistant/2.1"},
    "subject": "Subject " + SECRET,
    "body": "Body " + SECRET,
    "language": "en",
    "contact": [{"kind": "email", "value": SECRET + "@example.org"}],
}


def text(value: str) -> dict[str, Any]:
    return {"text": value}


def data(value: Any) -> dict[str, Any]:
    return {"data": value, "mediaType": "application/json"}


def message(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """
    A ROLE_USER message with C{parts}; C{fields} add or replace members.
    """
    return {"messageId": "m-" + SECRET, "role": "ROLE_USER", "parts": list(parts), **fields}


def canonical_sha256(document: dict[str, Any]) -> str:
    """
    The receipt hash recomputed from the documented canonical form.
    """
    canonical = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    return hashlib.sha256(canonical).hexdigest()


def fired(d: Deferred[Any]) -> Any:
    """
    The result of a Deferred that must already have fired successfully.
    """
    results: list[Any] = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]


class Beacon:
    """
    The public policy behind a real Dispatcher, over a MemoryStore and a
    Clock set to L{NOW}.
    """

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.clock = Clock()
        self.clock.advance(NOW)
        self.policy = PublicPolicy(self.store, self.clock, schema_validator())
        self.dispatcher = Dispatcher(self.policy)
        self.context = CallContext(binding="jsonrpc", source="198.51.100.4", version="1.0")

    def dispatch(self, request: dict[str, Any]) -> Any:
        body = json.dumps(request).encode("utf-8")
        response = fired(self.dispatcher.dispatch(body, self.context))
        if response is not None:
            json.dumps(response, allow_nan=False)
        return response

    def call(self, method: str, params: Any = None, request_id: Any = 1) -> Any:
        request = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            request["params"] = params
        return self.dispatch(request)

    def send(self, msg: dict[str, Any], **params: Any) -> Any:
        return self.call("SendMessage", {"message": msg, **params})

    def submit(self) -> dict[str, Any]:
        """Store one text submission; return its receipt task."""
        task: dict[str, Any] = self.send(message(text("hello " + SECRET)))["result"]["task"]
        return task


@pytest.fixture
def beacon() -> Beacon:
    return Beacon()


def assert_error(response: Any, code: int, reason: str, request_id: Any = 1) -> dict[str, Any]:
    """
    Check that C{response} is JSON-RPC error C{code} with an A2A ErrorInfo
    C{reason} first in its data, echoing no submitted content.
    """
    assert set(response) == {"jsonrpc", "id", "error"}
    assert response["id"] == request_id
    error = response["error"]
    assert error["code"] == code, error
    assert isinstance(error["data"], list)
    info = dict(error["data"][0])
    info.pop("metadata", None)
    assert info == {"@type": ERROR_INFO, "reason": reason, "domain": A2A_DOMAIN}
    assert SECRET not in json.dumps(response)
    return error


def field_violations(error: dict[str, Any]) -> list[dict[str, str]]:
    return [
        violation
        for detail in error["data"]
        if detail["@type"] == BAD_REQUEST
        for violation in detail["fieldViolations"]
    ]


def test_public_policy_provides_the_handler_interface(beacon: Beacon) -> None:
    """PublicPolicy implements every IA2AHandler method."""
    verifyObject(IA2AHandler, beacon.policy)


# SendMessage accepted: the receipt task and the stored content.

ACCEPTED: dict[str, tuple[list[dict[str, Any]], str, dict[str, Any]]] = {
    "one text part": ([text("hello " + SECRET)], "text", {"text": "hello " + SECRET}),
    "several text parts joined": (
        [text("one " + SECRET), text("two"), text("three")],
        "text",
        {"text": f"one {SECRET}\ntwo\nthree"},
    ),
    "non-ASCII text": (
        [text("h\u00e9llo \u2713 \u65e5\u672c " + SECRET)],
        "text",
        {"text": "h\u00e9llo \u2713 \u65e5\u672c " + SECRET},
    ),
    "one valid data part": ([data(STRUCTURED)], "structured", {"message": STRUCTURED}),
    "one valid data part beside text": (
        [text("cover note " + SECRET), data(STRUCTURED)],
        "structured",
        {"message": STRUCTURED},
    ),
    "invalid data part beside text": (
        [data({"subject": SECRET}), text("fallback " + SECRET)],
        "text",
        {"text": "fallback " + SECRET},
    ),
    "two valid data parts beside text": (
        [data(STRUCTURED), data(STRUCTURED), text("plain " + SECRET)],
        "text",
        {"text": "plain " + SECRET},
    ),
}


@pytest.mark.parametrize(
    "parts, kind, document", ACCEPTED.values(), ids=list(ACCEPTED)
)
def test_send_message_answers_a_receipt_task(
    beacon: Beacon, parts: list[dict[str, Any]], kind: str, document: dict[str, Any]
) -> None:
    """SendMessage stores the mapped content and answers a SUBMITTED task whose id is the receipt id and whose receipt hashes the canonical content, echoing nothing submitted."""
    response = beacon.send(message(*parts))
    assert SECRET not in json.dumps(response)
    assert set(response) == {"jsonrpc", "id", "result"}
    task = response["result"]["task"]
    assert set(response["result"]) == {"task"}
    sha256 = canonical_sha256(document)
    assert task == {
        "id": task["id"],
        "contextId": task["contextId"],
        "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": NOW_TEXT},
        "metadata": {
            "receipt": {"id": task["id"], "receivedAt": NOW_TEXT, "sha256": sha256}
        },
    }
    assert re.fullmatch(r"[0-9a-f]{64}", sha256)
    stored = beacon.store.submissions[task["id"]]
    assert list(beacon.store.submissions) == [task["id"]]
    assert stored.kind == kind
    assert json.loads(stored.content) == document
    assert hashlib.sha256(stored.content).hexdigest() == stored.sha256 == sha256
    assert stored.context_id == task["contextId"]
    assert stored.received_at_ms == 1_764_476_995_125
    assert stored.message_id == "m-" + SECRET
    assert (stored.door, stored.source) == ("jsonrpc", "198.51.100.4")


@pytest.mark.parametrize(
    "receipt, context_id",
    [
        ({"id": "0" * 36, "receivedAt": NOW_TEXT, "sha256": "a" * 64}, "v" * 36),
        ({"id": 'odd "id"\n', "receivedAt": "\u00e9t\u00e9", "sha256": "\\"}, "ctx\u2028"),
    ],
    ids=["plain", "escaped"],
)
def test_receipt_task_json_is_what_dumps_writes(receipt: dict[str, str], context_id: str) -> None:
    """The receipt Task's prepared text is the compact JSON of its object, whether its strings need escaping or not."""
    task = receipt_task(receipt, context_id)
    assert task == {
        "task": {
            "id": receipt["id"],
            "contextId": context_id,
            "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": receipt["receivedAt"]},
            "metadata": {"receipt": receipt},
        }
    }
    assert task.json == json.dumps(dict(task), ensure_ascii=False, separators=(",", ":"))


@given(
    st.text()
    | st.dictionaries(st.sampled_from(["text", "message", "Text"]), st.text() | st.integers(), max_size=3)
)
def test_canonical_content_is_the_documented_form(value: Any) -> None:
    """The canonical bytes of a content document (a text one written out by hand) are json.dumps's, keys sorted, compact, not ASCII-escaped."""
    document = {"text": value} if isinstance(value, str) else value
    assert canonical_content(document) == json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def test_receipt_ids_are_long_alphanumeric_and_unique(beacon: Beacon) -> None:
    """Receipt and context ids are letters and digits only, at least 32 characters (128 bits in base32), and never repeat."""
    tasks = [beacon.submit() for _ in range(200)]
    ids = [t["id"] for t in tasks] + [t["contextId"] for t in tasks]
    for value in ids:
        assert re.fullmatch(r"[A-Za-z0-9]{32,}", value), value
    assert len(set(ids)) == len(ids)


def test_stored_log_names_the_receipt_never_content(
    beacon: Beacon, logged_events: Any
) -> None:
    """Each stored submission logs intake.stored with its receipt id and never its content."""
    task = beacon.submit()
    (event,) = logged_events.named("intake.stored")
    line = formatEvent(event)
    assert task["id"] in line
    assert SECRET not in line


def test_stored_event_is_the_one_logger_emit_makes(beacon: Beacon, logged_events: Any) -> None:
    """
    intake.stored reaches a log observer as Twisted's Logger.emit makes an
    info event: its four fields, and log_logger, log_level (info),
    log_namespace, log_source, log_format and log_time, nothing else, with
    the same values Logger.info gives for the same call.
    """
    task = beacon.submit()
    (event,) = logged_events.named("intake.stored")
    assert set(event) == {
        "receipt", "size", "kind", "door",
        "log_logger", "log_level", "log_namespace", "log_source", "log_format", "log_time",
    }
    assert event["log_level"] is LogLevel.info
    assert event["receipt"] == task["id"]
    assert event["log_format"] == "intake.stored: receipt {receipt} ({size} bytes, {kind}) via {door}"
    made: list[dict[str, Any]] = []
    plain = Logger(namespace=event["log_namespace"], observer=made.append)
    fields = {name: event[name] for name in ("receipt", "size", "kind", "door")}
    plain.info(event["log_format"], **fields)
    (twisted,) = made
    assert {k: v for k, v in twisted.items() if k not in ("log_logger", "log_time")} == {
        k: v for k, v in event.items() if k not in ("log_logger", "log_time")
    }
    assert type(event["log_time"]) is float and isinstance(event["log_logger"], Logger)


def test_info_logger_follows_a_log_trace() -> None:
    """InfoLogger.info records itself in an event's log_trace, as Logger.emit does."""
    made: list[dict[str, Any]] = []
    for logger_class in (Logger, InfoLogger):
        logger = logger_class(namespace="beacon.test", observer=made.append)
        trace: list[Any] = []
        logger.info("traced", log_trace=trace)
        assert trace == [(logger, made.append)]
    assert [set(e) for e in made][0] == set(made[1])


def test_send_message_notification_stores(beacon: Beacon) -> None:
    """A SendMessage notification is not answered, but its submission is stored."""
    request = {
        "jsonrpc": "2.0",
        "method": "SendMessage",
        "params": {"message": message(text("quiet " + SECRET))},
    }
    assert beacon.dispatch(request) is None
    (stored,) = beacon.store.submissions.values()
    assert json.loads(stored.content) == {"text": "quiet " + SECRET}


# SendMessage refused.


@pytest.mark.parametrize(
    "parts",
    [
        [{"raw": "aGVsbG8=", "mediaType": "text/plain", "filename": SECRET}],
        [{"url": "https://" + SECRET + ".example/x.pdf"}],
        [text("see attachment " + SECRET), {"url": "https://example.org/" + SECRET}],
        [data(STRUCTURED), {"raw": "aGVsbG8="}],
    ],
    ids=["raw", "url", "url beside text", "raw beside valid data"],
)
def test_file_parts_are_32005(beacon: Beacon, parts: list[dict[str, Any]]) -> None:
    """A message with any file part, raw bytes or URL, is -32005 and nothing is stored."""
    response = beacon.send(message(*parts))
    assert_error(response, -32005, "CONTENT_TYPE_NOT_SUPPORTED")
    assert beacon.store.submissions == {}


def test_a_context_id_is_32004_whether_or_not_it_exists(beacon: Beacon) -> None:
    """A message naming a contextId is -32004, answered identically for an existing and an unknown context, and nothing is stored."""
    task = beacon.submit()
    answers = [
        beacon.send(message(text("more " + SECRET), contextId=ident))
        for ident in (task["contextId"], "a" * 32)
    ]
    assert_error(answers[0], -32004, "UNSUPPORTED_OPERATION")
    assert answers[0] == answers[1]
    assert list(beacon.store.submissions) == [task["id"]]


def test_a_task_id_must_name_a_task_and_continues_none(beacon: Beacon) -> None:
    """
    A message's taskId must name a task (A2A 3.4.2): an unknown one is
    -32001; a stored submission's is -32004, as its task is never
    continued. Nothing is stored, nothing submitted is echoed.
    """
    task = beacon.submit()
    known = beacon.send(message(text("more " + SECRET), taskId=task["id"]))
    assert_error(known, -32004, "UNSUPPORTED_OPERATION")
    unknown = beacon.send(message(text("more " + SECRET), taskId="a" * 32))
    assert_error(unknown, -32001, "TASK_NOT_FOUND")
    assert SECRET not in json.dumps([known, unknown])
    assert list(beacon.store.submissions) == [task["id"]]


INVALID_DATA: dict[str, tuple[Any, str, str]] = {
    "missing subject and body": (
        {"from": {"name": SECRET}},
        "message.parts[0].data",
        "#/required",
    ),
    "missing from.name": (
        {**STRUCTURED, "from": {"agent": SECRET}},
        "message.parts[0].data.from",
        "#/properties/from/required",
    ),
    "subject over 300 characters": (
        {**STRUCTURED, "subject": (SECRET * 30)[:301]},
        "message.parts[0].data.subject",
        "#/properties/subject/maxLength",
    ),
    "extra property": (
        {**STRUCTURED, SECRET: SECRET},
        "message.parts[0].data",
        "#/additionalProperties",
    ),
    "contact with unknown kind": (
        {**STRUCTURED, "contact": [{"kind": SECRET, "value": SECRET}]},
        "message.parts[0].data.contact[0].kind",
        "#/properties/contact/items/properties/kind/enum",
    ),
    "data not an object": ([SECRET], "message.parts[0].data", "#/type"),
}


@pytest.mark.parametrize(
    "document, field, location", INVALID_DATA.values(), ids=list(INVALID_DATA)
)
def test_invalid_data_without_text_is_32602_naming_schema_location(
    beacon: Beacon, document: Any, field: str, location: str
) -> None:
    """A message whose only content is a data part failing the schema is -32602 whose violations name the instance and schema locations, never submitted values; nothing is stored."""
    response = beacon.send(message(data(document)))
    error = assert_error(response, -32602, "INVALID_PARAMS")
    violations = field_violations(error)
    assert any(
        v["field"] == field and location in v["description"] for v in violations
    ), violations
    assert beacon.store.submissions == {}


@pytest.mark.parametrize(
    "parts",
    [
        [data(STRUCTURED), data(STRUCTURED)],
        [text("")],
    ],
    ids=["two valid data parts", "empty text only"],
)
def test_no_usable_content_is_32602(beacon: Beacon, parts: list[dict[str, Any]]) -> None:
    """A message with neither non-empty text nor exactly one valid data part is -32602 naming message.parts."""
    error = assert_error(beacon.send(message(*parts)), -32602, "INVALID_PARAMS")
    assert [v["field"] for v in field_violations(error)] == ["message.parts"]
    assert beacon.store.submissions == {}


@pytest.mark.parametrize("role", ["ROLE_AGENT", 2])
def test_agent_role_is_32602(beacon: Beacon, role: Any) -> None:
    """A message from ROLE_AGENT is -32602 naming message.role; nothing is stored."""
    error = assert_error(
        beacon.send(message(text("hi " + SECRET), role=role)), -32602, "INVALID_PARAMS"
    )
    assert "message.role" in [v["field"] for v in field_violations(error)]
    assert beacon.store.submissions == {}


def test_push_config_on_send_is_32003(beacon: Beacon) -> None:
    """SendMessage with configuration.taskPushNotificationConfig is -32003 and nothing is stored."""
    response = beacon.send(
        message(text("hi " + SECRET)),
        configuration={
            "taskPushNotificationConfig": {
                "url": "https://hooks.example/" + SECRET,
                "token": SECRET,
            }
        },
    )
    assert_error(response, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    assert beacon.store.submissions == {}


def test_store_failure_is_32603_without_receipt(
    beacon: Beacon, logged_events: Any
) -> None:
    """When the store fails, SendMessage is -32603 with no receipt, nothing is stored, and intake.store_failed is logged as an error (not a failure) without content."""
    beacon.store.fail_appends = True
    response = beacon.send(message(text("lost " + SECRET)))
    error = assert_error(response, -32603, "INTERNAL_ERROR")
    assert "result" not in response
    assert "receipt" not in json.dumps(error)
    assert beacon.store.submissions == {}
    (event,) = logged_events.named("intake.store_failed")
    assert event["log_level"].name == "error"
    assert SECRET not in formatEvent(event)
    assert logged_events.named("intake.stored") == []
    assert logged_events.failures() == []


# The rest of the public policy's method table.


@pytest.mark.parametrize("history_length", [None, 0, 10])
def test_get_task_is_status_only(beacon: Beacon, history_length: int | None) -> None:
    """GetTask answers id, contextId and status (state and timestamp) only, never history, artifacts or metadata."""
    task = beacon.submit()
    params: dict[str, Any] = {"id": task["id"]}
    if history_length is not None:
        params["historyLength"] = history_length
    assert beacon.call("GetTask", params)["result"] == {
        "id": task["id"],
        "contextId": task["contextId"],
        "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": NOW_TEXT},
    }


def test_get_task_shows_a_decision(beacon: Beacon) -> None:
    """After a review decision GetTask shows the decided state and its time."""
    task = beacon.submit()
    beacon.store.append_decision(task["id"], "TASK_STATE_COMPLETED", 1_764_477_000_000, SECRET)
    response = beacon.call("GetTask", {"id": task["id"]})
    assert response["result"]["status"] == {
        "state": "TASK_STATE_COMPLETED",
        "timestamp": "2025-11-30T04:30:00.000Z",
    }
    assert SECRET not in json.dumps(response)


@pytest.mark.parametrize("method", ["GetTask", "CancelTask"])
def test_unknown_task_is_32001(beacon: Beacon, method: str) -> None:
    """GetTask and CancelTask on an unknown id are -32001."""
    beacon.submit()
    assert_error(beacon.call(method, {"id": "b" * 32}), -32001, "TASK_NOT_FOUND")


def test_cancel_known_task_is_32002(beacon: Beacon) -> None:
    """CancelTask on a stored task is -32002: the store is append-only, and the task stays SUBMITTED."""
    task = beacon.submit()
    assert_error(beacon.call("CancelTask", {"id": task["id"]}), -32002, "TASK_NOT_CANCELABLE")
    status = beacon.call("GetTask", {"id": task["id"]})["result"]["status"]
    assert status["state"] == "TASK_STATE_SUBMITTED"


@pytest.mark.parametrize(
    "params, page_size",
    [(None, 50), ({}, 50), ({"pageSize": 1}, 1), ({"pageSize": 100}, 100), ("context", 50)],
    ids=["no params", "empty", "pageSize 1", "pageSize 100", "own contextId"],
)
def test_list_tasks_is_always_empty(beacon: Beacon, params: Any, page_size: int) -> None:
    """ListTasks is always an empty last page, even with stored tasks and a filter on one's own context."""
    task = beacon.submit()
    if params == "context":
        params = {"contextId": task["contextId"]}
    assert beacon.call("ListTasks", params)["result"] == {
        "tasks": [],
        "nextPageToken": "",
        "pageSize": page_size,
        "totalSize": 0,
    }


@pytest.mark.parametrize(
    "method, params, code, reason",
    [
        ("SendStreamingMessage", "message", -32004, "UNSUPPORTED_OPERATION"),
        ("SubscribeToTask", {"id": "task"}, -32004, "UNSUPPORTED_OPERATION"),
        (
            "CreateTaskPushNotificationConfig",
            {"taskId": "task", "url": "https://hooks.example/a2a"},
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "GetTaskPushNotificationConfig",
            {"taskId": "task", "id": "c-1"},
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "ListTaskPushNotificationConfigs",
            {"taskId": "task"},
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "DeleteTaskPushNotificationConfig",
            {"taskId": "task", "id": "c-1"},
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        ("GetExtendedAgentCard", None, -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        ("GetExtendedAgentCard", {}, -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    ],
    ids=[
        "SendStreamingMessage",
        "SubscribeToTask",
        "CreatePushConfig",
        "GetPushConfig",
        "ListPushConfigs",
        "DeletePushConfig",
        "GetExtendedAgentCard no params",
        "GetExtendedAgentCard empty params",
    ],
)
def test_methods_not_offered(
    beacon: Beacon, method: str, params: Any, code: int, reason: str
) -> None:
    """Streaming (-32004), push-notification configs (-32003) and the extended card (-32007) are refused for valid params, and nothing is stored."""
    task = beacon.submit()
    if params == "message":
        params = {"message": message(text("stream " + SECRET))}
    elif params is not None:
        params = {k: task["id"] if v == "task" else v for k, v in params.items()}
    assert_error(beacon.call(method, params), code, reason)
    assert list(beacon.store.submissions) == [task["id"]]


# The structured-message schema.


def valid_document() -> dict[str, Any]:
    return copy.deepcopy(STRUCTURED)


def test_schema_examples_validate() -> None:
    """The examples shipped inside message.schema.json are themselves valid."""
    schema = load_schema()
    assert schema["examples"]
    validator = schema_validator()
    for example in schema["examples"]:
        assert list(validator.iter_errors(example)) == []


def _set(path: str, value: Any) -> dict[str, Any]:
    """A valid document with the member at dotted C{path} set (or deleted when value is DELETE)."""
    document = valid_document()
    *parents, last = path.split(".")
    target: Any = document
    for step in parents:
        target = target[int(step)] if step.isdigit() else target[step]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value
    return document


DELETE = object()
CONTACT = {"kind": "url", "value": "https://example.org/"}

SCHEMA_CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "complete": (valid_document(), True),
    "minimal": ({"from": {"name": "n"}, "subject": "s", "body": "b"}, True),
    "subject exactly 300": (_set("subject", "s" * 300), True),
    "subject 301": (_set("subject", "s" * 301), False),
    "subject empty": (_set("subject", ""), False),
    "body missing": (_set("body", DELETE), False),
    "from missing": (_set("from", DELETE), False),
    "from.name missing": (_set("from.name", DELETE), False),
    "from.name empty": (_set("from.name", ""), False),
    "from with extra property": (_set("from.email", "a@example.org"), False),
    "extra property": (_set("priority", "high"), False),
    "language malformed": (_set("language", "en_GB"), False),
    "8 contacts": (_set("contact", [CONTACT] * 8), True),
    "9 contacts": (_set("contact", [CONTACT] * 9), False),
    "contact with each kind": (
        _set("contact", [{"kind": k, "value": "v"} for k in ("email", "url", "a2a", "other")]),
        True,
    ),
    "contact with unknown kind": (_set("contact", [{"kind": "phone", "value": "1"}]), False),
    "contact without value": (_set("contact", [{"kind": "email"}]), False),
    "contact with extra property": (_set("contact", [{**CONTACT, "verified": True}]), False),
}


@pytest.mark.parametrize(
    "document, valid", SCHEMA_CASES.values(), ids=list(SCHEMA_CASES)
)
def test_schema_boundaries(document: dict[str, Any], valid: bool) -> None:
    """message.schema.json accepts documents up to its limits and refuses those beyond them, missing fields and unknown members."""
    assert schema_validator().is_valid(document) is valid


# The public agent card.

PUBLIC = "https://beacon.example.org"


def test_card_has_the_required_agent_card_fields() -> None:
    """The card has every AgentCard field A2A 1.0 requires, with JSON-safe values."""
    card = public_card(CardText(), PUBLIC)
    json.dumps(card, allow_nan=False)
    for field in (
        "name",
        "description",
        "supportedInterfaces",
        "version",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
    ):
        assert card[field], field
    assert card["skills"]
    for skill in card["skills"]:
        assert all(skill[f] for f in ("id", "name", "description", "tags"))


def test_card_declares_the_jsonrpc_then_the_http_json_interface() -> None:
    """supportedInterfaces is the JSON-RPC 1.0 endpoint, then the HTTP+JSON 1.0 interface, under the configured public URL."""
    card = public_card(CardText(), PUBLIC)
    assert card["supportedInterfaces"] == [
        {"url": PUBLIC + "/a2a/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": PUBLIC + "/a2a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]


def test_card_capabilities_are_false_and_link_discovery() -> None:
    """streaming and pushNotifications are present and false, and an extension's params link the autonomous-agent document."""
    capabilities = public_card(CardText(), PUBLIC)["capabilities"]
    assert capabilities["streaming"] is False
    assert capabilities["pushNotifications"] is False
    discovery = PUBLIC + "/.well-known/autonomous-agent"
    assert AUTONOMOUS_AGENT_PATH == "/.well-known/autonomous-agent"
    assert any(
        discovery in extension.get("params", {}).values()
        for extension in capabilities["extensions"]
    )


@pytest.mark.parametrize(
    "description",
    [
        CardText().description,
        "My inbox.",
        "",
        "My inbox. " + IDENTITY_STATEMENT,
    ],
    ids=["default", "operator's own", "empty", "already stated"],
)
def test_card_states_identity_literally(description: str) -> None:
    """The card's description contains the identity statement exactly once, whatever the operator wrote."""
    card = public_card(CardText(name="Mine", description=description), PUBLIC)
    assert card["description"].count(IDENTITY_STATEMENT) == 1
    assert card["description"].startswith(description.strip())
    assert card["name"] == "Mine"


def test_card_provider_only_when_configured() -> None:
    """provider appears only when the operator configured one."""
    assert "provider" not in public_card(CardText(), PUBLIC)
    card = public_card(
        CardText(provider_organization="Example Lab", provider_url="https://lab.example"),
        PUBLIC,
    )
    assert card["provider"] == {"organization": "Example Lab", "url": "https://lab.example"}


@settings(max_examples=500)
@given(bits=st.integers(min_value=0, max_value=(1 << 180) - 1))
def test_ids_are_rfc4648_base32hex(bits: int) -> None:
    """base32hex writes what base64.b32hexencode writes, in lower case, and keeps the order of the numbers."""
    import base64

    from beacon.intake._submission import base32hex

    encoded = base64.b32hexencode((bits << 4).to_bytes(23, "big")).decode("ascii").lower()
    assert base32hex(bits, 36) == encoded[:36]
    assert (base32hex(bits, 36) < base32hex(bits + 1, 36)) or bits + 1 == 1 << 180


def test_new_ids_are_36_base32_digits_time_first_and_distinct() -> None:
    """
    An id is 36 lowercase base32hex digits: the millisecond of issue (48 bits),
    then 132 random bits; a thousand issued in one millisecond are
    distinct, and ids sort by their time of issue.
    """
    from beacon.intake._submission import ID_RANDOM_BITS, new_id

    def value(text: str) -> int:
        bits = 0
        for digit in text:
            bits = bits * 32 + "0123456789abcdefghijklmnopqrstuv".index(digit)
        return bits

    now = 1_800_000_000.123
    ids = {new_id(now) for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"[0-9a-v]{36}", i) for i in ids)
    assert {value(i) >> ID_RANDOM_BITS for i in ids} == {1_800_000_000_123}
    randoms = {value(i) & ((1 << ID_RANDOM_BITS) - 1) for i in ids}
    assert len(randoms) == 1000
    assert max(randoms).bit_length() > 128
    later = [new_id(now + step * 0.002) for step in range(1, 50)]
    assert sorted(later) == later
    assert max(ids) < later[0]
    # Every millisecond of a second (across the 256 ms steps of the first
    # eight digits, as a live clock moves) is written as itself.
    for millisecond in range(1_800_000_000_000, 1_800_000_001_000, 7):
        assert value(new_id(millisecond / 1000 + 0.0002)) >> ID_RANDOM_BITS == millisecond


def test_every_random_bit_of_an_id_is_random() -> None:
    """
    Each of the 132 random bits (the two in the tenth digit included) is set
    in about half of 2,000 ids of one millisecond (within 6.7 standard
    deviations: a false failure has odds below 1e-9), and the time bits are
    the same in all.
    """
    from beacon.intake._submission import ID_RANDOM_BITS, new_id

    values = [int.from_bytes(_base32_value(new_id(1_800_000_000.5)), "big") for _ in range(2000)]
    for bit in range(ID_RANDOM_BITS):
        ones = sum((value >> bit) & 1 for value in values)
        assert 850 <= ones <= 1150, (bit, ones)
    assert {value >> ID_RANDOM_BITS for value in values} == {1_800_000_000_500}


def _base32_value(text: str) -> bytes:
    bits = 0
    for digit in text:
        bits = bits * 32 + "0123456789abcdefghijklmnopqrstuv".index(digit)
    return bits.to_bytes(23, "big")


def test_ids_random_bytes_are_drawn_in_bulk_and_never_shared_with_a_forked_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """
    One os.urandom call serves many ids (each takes its own 27 bytes), and a
    child forked with bytes left in the pool draws its own: parent and child
    then issue different ids.
    """
    from beacon.intake._submission import _IDS_PER_DRAW, new_id

    calls: list[int] = []
    real = os.urandom

    def counting(n: int) -> bytes:
        calls.append(n)
        return real(n)

    now = 1_800_000_000.5
    monkeypatch.setattr(os, "urandom", counting)
    made = [new_id(now) for _ in range(_IDS_PER_DRAW * 2)]
    monkeypatch.undo()
    assert len(set(made)) == len(made)
    assert 2 <= len(calls) <= 3
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent, then out
        os.close(read)
        os.write(write, new_id(now).encode("ascii"))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        childs = pipe.read().decode("ascii")
    os.waitpid(pid, 0)
    assert len(childs) == 36
    assert childs != new_id(now)
