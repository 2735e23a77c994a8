"""
The transport-neutral A2A core (beacon.protocol): strict JSON, JSON-RPC 2.0
envelopes, the method table, A2A-Version, params validation and the error
objects, run through L{Dispatcher} against a recording policy.

Everything here is synchronous: the recording policy answers at once, so every
Deferred has fired by the time C{dispatch} returns.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from zope.interface import implementer
from zope.interface.verify import verifyObject

from beacon.protocol import (
    A2A_DOMAIN,
    METHODS,
    A2AError,
    CallContext,
    ContentTypeNotSupportedError,
    Dispatcher,
    ExtendedAgentCardNotConfiguredError,
    ExtensionMethod,
    ExtensionSupportRequiredError,
    IA2AHandler,
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    Method,
    MethodNotFoundError,
    ParamsReader,
    PushNotificationNotSupportedError,
    QueryText,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
    compact_encoder,
    dumps,
    error_object,
    format_timestamp,
    parse_extensions,
    parse_timestamp,
    prepared,
    status_object,
    success,
    version_supported,
)
from beacon.protocol.types import (
    _get_task,
    _plain_get_task,
    _plain_send_message,
    _send_message,
    params_parser,
    parse_list_tasks,
)

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"

#: Submitted text that must never come back in any answer.
SECRET = "zq-SECRET-4f9e1b"

#: The ErrorInfo reason of each JSON-RPC code (spec section 3).
REASONS = {
    -32700: "PARSE_ERROR",
    -32600: "INVALID_REQUEST",
    -32601: "METHOD_NOT_FOUND",
    -32602: "INVALID_PARAMS",
    -32603: "INTERNAL_ERROR",
    -32001: "TASK_NOT_FOUND",
    -32002: "TASK_NOT_CANCELABLE",
    -32003: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    -32004: "UNSUPPORTED_OPERATION",
    -32005: "CONTENT_TYPE_NOT_SUPPORTED",
    -32006: "INVALID_AGENT_RESPONSE",
    -32007: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    -32008: "EXTENSION_SUPPORT_REQUIRED",
    -32009: "VERSION_NOT_SUPPORTED",
}

MESSAGE = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}

#: Well-formed params for each of the eleven A2A 1.0 methods.
VALID_PARAMS: dict[str, dict[str, Any]] = {
    "SendMessage": {"message": MESSAGE},
    "SendStreamingMessage": {"message": MESSAGE},
    "GetTask": {"id": "t-1"},
    "ListTasks": {},
    "CancelTask": {"id": "t-1"},
    "SubscribeToTask": {"id": "t-1"},
    "CreateTaskPushNotificationConfig": {
        "taskId": "t-1",
        "url": "https://hooks.example/a2a",
    },
    "GetTaskPushNotificationConfig": {"taskId": "t-1", "id": "c-1"},
    "ListTaskPushNotificationConfigs": {"taskId": "t-1"},
    "DeleteTaskPushNotificationConfig": {"taskId": "t-1", "id": "c-1"},
    "GetExtendedAgentCard": {},
}

V03_METHODS = [
    "message/send",
    "message/stream",
    "tasks/get",
    "tasks/list",
    "tasks/cancel",
    "tasks/resubscribe",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
    "agent/getAuthenticatedExtendedCard",
]


@implementer(IA2AHandler)
class RecordingHandler:
    """
    A policy that records each call and answers C{{"handled": name}}, or
    raises C{raises} when it is set.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, CallContext, Any]] = []
        self.raises: Exception | None = None


def _recorder(name: str) -> Callable[..., Any]:
    def handle(self: RecordingHandler, context: CallContext, request: Any) -> Any:
        self.calls.append((name, context, request))
        if self.raises is not None:
            raise self.raises
        return {"handled": name}

    handle.__name__ = name
    return handle


for _name in IA2AHandler.names():
    setattr(RecordingHandler, _name, _recorder(_name))


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


def envelope(method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    """
    A JSON-RPC 2.0 request object (C{params} omitted when None).
    """
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        request["params"] = params
    return request


def encode(document: Any) -> bytes:
    return json.dumps(document).encode("utf-8")


class Harness:
    """
    A Dispatcher over a L{RecordingHandler}.
    """

    def __init__(self) -> None:
        self.handler = RecordingHandler()
        self.dispatcher = Dispatcher(self.handler)

    def dispatch(self, body: bytes, version: str | None = "1.0") -> Any:
        context = CallContext(binding="jsonrpc", source="192.0.2.7", version=version)
        response = fired(self.dispatcher.dispatch(body, context))
        if response is not None:
            # Every answer must itself be strict JSON.
            json.dumps(response, allow_nan=False)
        return response

    def call(
        self,
        method: str,
        params: Any = None,
        *,
        request_id: Any = 1,
        version: str | None = "1.0",
    ) -> Any:
        return self.dispatch(encode(envelope(method, params, request_id)), version)


@pytest.fixture
def harness() -> Harness:
    return Harness()


def assert_error(response: Any, code: int, request_id: Any = 1) -> dict[str, Any]:
    """
    Check that C{response} is a JSON-RPC error with C{code}, answered to
    C{request_id}, whose C{data} starts with an A2A ErrorInfo; return the
    error object.
    """
    assert response is not None
    assert set(response) == {"jsonrpc", "id", "error"}
    assert response["jsonrpc"] == "2.0"
    assert response["id"] == request_id
    error = response["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    data = error["data"]
    assert isinstance(data, list) and data
    assert data[0]["@type"] == ERROR_INFO
    assert data[0]["domain"] == A2A_DOMAIN == "a2a-protocol.org"
    assert data[0]["reason"] == REASONS[code]
    for detail in data:
        assert "@type" in detail
    if code == -32602:
        assert field_violations(error), "-32602 must carry a BadRequest"
    return error


def field_violations(error: dict[str, Any]) -> list[dict[str, str]]:
    """
    The fieldViolations of an error's google.rpc.BadRequest detail.
    """
    violations: list[dict[str, str]] = []
    for detail in error["data"]:
        if detail["@type"] == BAD_REQUEST:
            violations.extend(detail["fieldViolations"])
    for violation in violations:
        assert set(violation) == {"field", "description"}
    return violations


# Strict JSON: -32700, answered with id null.

ENVELOPE_PREFIX = b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":'

UNPARSABLE = {
    "empty body": b"",
    "truncated object": b'{"jsonrpc":"2.0","id":1,"method":"GetTask"',
    "trailing data": b'{"jsonrpc":"2.0","id":1,"method":"GetTask"} {}',
    "single quotes": b"{'jsonrpc':'2.0','id':1,'method':'GetTask'}",
    "invalid UTF-8 in a string": ENVELOPE_PREFIX + b'{"id":"\xff\xfe"}}',
    "UTF-16 body": '{"jsonrpc":"2.0","id":1,"method":"GetTask"}'.encode("utf-16"),
    "lone high surrogate escape": ENVELOPE_PREFIX + b'{"id":"\\ud800"}}',
    "lone low surrogate escape in a key": ENVELOPE_PREFIX + b'{"\\udc00":1}}',
    "lone surrogate after a valid pair": ENVELOPE_PREFIX + b'{"id":"\\ud83d\\ude00\\udbff"}}',
    "lone surrogate in upper case, deep": ENVELOPE_PREFIX + b'{"id":"t","metadata":{"a":[["\\uDABC"]]}}}',
    "NaN": ENVELOPE_PREFIX + b'{"historyLength":NaN}}',
    "Infinity": ENVELOPE_PREFIX + b'{"historyLength":Infinity}}',
    "-Infinity": ENVELOPE_PREFIX + b'{"historyLength":-Infinity}}',
    "duplicate envelope key": b'{"jsonrpc":"2.0","id":1,"id":2,"method":"GetTask"}',
    "duplicate params key": ENVELOPE_PREFIX + b'{"id":"a","id":"b"}}',
    "100000 nested arrays": ENVELOPE_PREFIX + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "5000-digit integer": b'{"jsonrpc":"2.0","id":' + b"7" * 5000 + b',"method":"GetTask"}',
}


@pytest.mark.parametrize("body", UNPARSABLE.values(), ids=list(UNPARSABLE))
def test_unparsable_json_is_32700_with_null_id(harness: Harness, body: bytes) -> None:
    """Anything that is not one strict JSON document is -32700 answered with id null, and no policy runs."""
    assert_error(harness.dispatch(body), -32700, request_id=None)
    assert harness.handler.calls == []


@pytest.mark.parametrize(
    "number", [b"1e400", b"-1e400", b"1" * 400 + b".0"], ids=["1e400", "-1e400", "400 digits.0"]
)
def test_numbers_overflowing_to_infinity_are_32700(harness: Harness, number: bytes) -> None:
    """A number too large for a double parses to Infinity, so it is refused like the literal Infinity."""
    assert_error(
        harness.dispatch(ENVELOPE_PREFIX + b'{"id":"t","metadata":{"n":' + number + b"}}}"),
        -32700,
        request_id=None,
    )
    assert harness.handler.calls == []


def test_surrogate_pair_escapes_are_json(harness: Harness) -> None:
    """A correctly paired surrogate escape is ordinary JSON, not a parse error."""
    response = harness.dispatch(ENVELOPE_PREFIX + b'{"id":"\\ud83d\\ude00"}}')
    assert response["result"] == {"handled": "get_task"}
    assert harness.handler.calls[0][2].id == "\N{GRINNING FACE}"


def test_escaped_backslash_before_u_is_not_a_surrogate(harness: Harness) -> None:
    """C{\\\\ud800} is a backslash followed by the letters ud800: ordinary JSON."""
    response = harness.dispatch(ENVELOPE_PREFIX + b'{"id":"\\\\ud800"}}')
    assert response["result"] == {"handled": "get_task"}
    assert harness.handler.calls[0][2].id == "\\ud800"


# Envelopes: -32600.

INVALID_ENVELOPES: dict[str, tuple[Any, Any]] = {
    "batch of one": ([envelope("GetTask", {"id": "t"})], None),
    "empty batch": ([], None),
    "string": ("GetTask", None),
    "number": (1, None),
    "null": (None, None),
    "true": (True, None),
    "missing jsonrpc": ({"id": 1, "method": "GetTask"}, 1),
    "jsonrpc 1.0": ({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, 1),
    "jsonrpc as a number": ({"jsonrpc": 2.0, "id": 1, "method": "GetTask"}, 1),
    "id true": (envelope("GetTask", request_id=True), None),
    "id false": (envelope("GetTask", request_id=False), None),
    "id float": (envelope("GetTask", request_id=1.5), None),
    "id integral float": (envelope("GetTask", request_id=1.0), None),
    "id object": (envelope("GetTask", request_id={"a": 1}), None),
    "id array": (envelope("GetTask", request_id=[1]), None),
    "id of 129 characters": (envelope("GetTask", request_id="i" * 129), None),
    "id of 16000 characters": (envelope("GetTask", request_id=SECRET * 1000), None),
    "missing method": ({"jsonrpc": "2.0", "id": 1}, 1),
    "method not a string": ({"jsonrpc": "2.0", "id": 1, "method": 7}, 1),
    "params a string": (envelope("GetTask", "t-1"), 1),
}


@pytest.mark.parametrize(
    "document, answer_id",
    INVALID_ENVELOPES.values(),
    ids=list(INVALID_ENVELOPES),
)
def test_invalid_envelope_is_32600(
    harness: Harness, document: Any, answer_id: Any
) -> None:
    """A non-object, a batch, a wrong or missing jsonrpc, a bad id or method is -32600 (id null when the id itself is unreadable), and no policy runs."""
    response = harness.dispatch(encode(document))
    assert_error(response, -32600, request_id=answer_id)
    assert SECRET not in json.dumps(response)
    assert harness.handler.calls == []


@pytest.mark.parametrize(
    "request_id",
    ["i" * 128, "", "abc", 0, -1, 7, 2**53 - 1, None],
    ids=["128 chars", "empty", "abc", "0", "-1", "7", "2**53-1", "null"],
)
def test_valid_ids_are_echoed(harness: Harness, request_id: Any) -> None:
    """Strings up to 128 characters, integers and an explicit null are valid ids, echoed unchanged in the answer."""
    response = harness.call("GetTask", {"id": "t-1"}, request_id=request_id)
    assert response == {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"handled": "get_task"},
    }


def test_unknown_envelope_members_are_ignored(harness: Harness) -> None:
    """Unknown request members, in the envelope and at every level of params, are ignored."""
    request = envelope(
        "SendMessage",
        {
            "message": {
                **MESSAGE,
                "parts": [{"text": "hello", "futurePartField": 1}],
                "futureMessageField": {"x": 1},
            },
            "futureRequestField": [1, 2],
        },
    )
    request["futureEnvelopeField"] = "ignored"
    response = harness.dispatch(encode(request))
    assert response["result"] == {"handled": "send_message"}
    (_, _, typed), = harness.handler.calls
    assert typed.message.message_id == "m-1"
    assert [(p.content, p.value) for p in typed.message.parts] == [("text", "hello")]


# Methods: exactly the eleven A2A 1.0 names, -32601 for everything else.


def test_method_table_is_the_eleven_a2a_methods() -> None:
    """The method table holds exactly the eleven A2A 1.0 JSON-RPC methods, each served by an IA2AHandler method."""
    assert set(METHODS) == set(VALID_PARAMS)
    assert {m.handler for m in METHODS.values()} == set(IA2AHandler.names())
    assert {name for name, m in METHODS.items() if m.streaming} == {
        "SendStreamingMessage",
        "SubscribeToTask",
    }


def test_recording_handler_provides_interface() -> None:
    """The test policy really implements IA2AHandler, so the tests below exercise the real contract."""
    verifyObject(IA2AHandler, RecordingHandler())


@pytest.mark.parametrize("method", sorted(VALID_PARAMS))
def test_each_method_reaches_its_handler(harness: Harness, method: str) -> None:
    """Each A2A method with valid params calls its handler once with the call context and a typed request, and answers its result."""
    response = harness.call(method, VALID_PARAMS[method])
    handler = METHODS[method].handler
    assert response == {"jsonrpc": "2.0", "id": 1, "result": {"handled": handler}}
    ((name, context, typed),) = harness.handler.calls
    assert name == handler
    assert context.source == "192.0.2.7" and context.version == "1.0"
    assert not isinstance(typed, dict)


def test_extended_card_params_may_be_omitted(harness: Harness) -> None:
    """GetExtendedAgentCard without params reaches its handler."""
    response = harness.dispatch(
        encode({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"})
    )
    assert response["result"] == {"handled": "get_extended_card"}


@pytest.mark.parametrize(
    "method",
    V03_METHODS + ["sendMessage", "send_message", "SENDMESSAGE", "SendMessage ", "Nope"],
)
def test_unknown_methods_are_32601(harness: Harness, method: str) -> None:
    """Unknown methods, every v0.3 name included, are -32601 and no policy runs."""
    response = harness.call(method, VALID_PARAMS["SendMessage"], request_id="r-1")
    assert_error(response, -32601, request_id="r-1")
    assert harness.handler.calls == []


#: What an A2A 0.3 client is told to use instead of each 0.3 name.
V03_REPLACEMENTS = dict(
    zip(
        V03_METHODS,
        [
            "SendMessage",
            "SendStreamingMessage",
            "GetTask",
            "ListTasks",
            "CancelTask",
            "SubscribeToTask",
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig",
            "GetExtendedAgentCard",
        ],
    )
)


@pytest.mark.parametrize("method", V03_METHODS)
def test_v03_methods_name_the_10_method(harness: Harness, method: str) -> None:
    """An A2A 0.3 name is -32601 whose message says the server speaks A2A 1.0 and names the 1.0 method to use; whatever the version sent."""
    for version in ("1.0", None, "0.3"):
        response = harness.call(method, {}, version=version)
        message = assert_error(response, -32601)["message"]
        assert "A2A 1.0" in message and f"use {V03_REPLACEMENTS[method]} " in message, message
        assert V03_REPLACEMENTS[method] in METHODS


def test_other_unknown_methods_get_the_plain_message(harness: Harness) -> None:
    """A method that is no 0.3 name is answered the plain 'Method not found', never echoing the name."""
    response = harness.call("message/sendX", {})
    assert assert_error(response, -32601)["message"] == "Method not found"


# A2A-Version: after envelope and method checks, before params.


@pytest.mark.parametrize("version", ["1.0", "1.0.1", "1.0.0"])
def test_version_1_0_is_accepted(harness: Harness, version: str) -> None:
    """A2A-Version 1.0, with or without a patch number, is served."""
    assert harness.call("GetTask", {"id": "t"}, version=version)["result"]
    assert version_supported(version)


@pytest.mark.parametrize("version", [None, "", "0.3", "1.1", "2.0", "1", "abc", "0.3.0"])
def test_other_versions_are_32009(harness: Harness, version: str | None) -> None:
    """Any other A2A-Version, or none (which means 0.3), is -32009 and no policy runs."""
    assert_error(harness.call("GetTask", {"id": "t"}, version=version), -32009)
    assert not version_supported(version)
    assert harness.handler.calls == []


@pytest.mark.parametrize(
    "body, code, answer_id",
    [
        (b"{", -32700, None),
        (encode([envelope("GetTask", {"id": "t"})]), -32600, None),
        (encode({"jsonrpc": "1.0", "id": 3, "method": "GetTask"}), -32600, 3),
        (encode(envelope("message/send", VALID_PARAMS["SendMessage"], 3)), -32601, 3),
        (encode(envelope("GetTask", {}, 3)), -32009, 3),
    ],
    ids=["parse", "batch", "envelope", "method", "params"],
)
def test_envelope_and_method_errors_precede_version(
    harness: Harness, body: bytes, code: int, answer_id: Any
) -> None:
    """Without a version, envelope and method errors still win; a method with bad params gets -32009, not -32602."""
    assert_error(harness.dispatch(body, version=None), code, request_id=answer_id)


# Params: -32602 naming fields, never values.

TWO_MEMBER_PART = {"text": SECRET, "url": "https://" + SECRET}

INVALID_PARAMS: dict[str, tuple[str, Any, str]] = {
    "params a list": ("GetTask", [SECRET], "params"),
    "message missing": ("SendMessage", {"metadata": {"k": SECRET}}, "message"),
    "message not an object": ("SendMessage", {"message": SECRET}, "message"),
    "parts empty": ("SendMessage", {"message": {**MESSAGE, "parts": []}}, "message.parts"),
    "parts missing": (
        "SendMessage",
        {"message": {"messageId": "m", "role": "ROLE_USER"}},
        "message.parts",
    ),
    "part with two members": (
        "SendMessage",
        {"message": {**MESSAGE, "parts": [TWO_MEMBER_PART]}},
        "message.parts[0]",
    ),
    "part with no member": (
        "SendMessage",
        {"message": {**MESSAGE, "parts": [{"mediaType": SECRET}]}},
        "message.parts[0]",
    ),
    "part not an object": (
        "SendMessage",
        {"message": {**MESSAGE, "parts": [SECRET]}},
        "message.parts[0]",
    ),
    "text not a string": (
        "SendMessage",
        {"message": {**MESSAGE, "parts": [{"text": [SECRET]}]}},
        "message.parts[0].text",
    ),
    "role missing": (
        "SendMessage",
        {"message": {"messageId": "m", "parts": [{"text": SECRET}]}},
        "message.role",
    ),
    "role unknown": (
        "SendMessage",
        {"message": {**MESSAGE, "role": SECRET}},
        "message.role",
    ),
    "role v0.3 spelling": (
        "SendMessage",
        {"message": {**MESSAGE, "role": "user"}},
        "message.role",
    ),
    "messageId missing": (
        "SendMessage",
        {"message": {"role": "ROLE_USER", "parts": [{"text": SECRET}]}},
        "message.messageId",
    ),
    "negative configuration.historyLength": (
        "SendMessage",
        {"message": MESSAGE, "configuration": {"historyLength": -1}},
        "configuration.historyLength",
    ),
    "push config without url": (
        "SendMessage",
        {"message": MESSAGE, "configuration": {"taskPushNotificationConfig": {"token": SECRET}}},
        "configuration.taskPushNotificationConfig.url",
    ),
    "GetTask id missing": ("GetTask", {"historyLength": 1}, "id"),
    "GetTask id not a string": ("GetTask", {"id": 12}, "id"),
    "GetTask negative historyLength": ("GetTask", {"id": "t", "historyLength": -1}, "historyLength"),
    "GetTask fractional historyLength": ("GetTask", {"id": "t", "historyLength": 1.5}, "historyLength"),
    "ListTasks pageSize 0": ("ListTasks", {"pageSize": 0}, "pageSize"),
    "ListTasks pageSize 101": ("ListTasks", {"pageSize": 101}, "pageSize"),
    "ListTasks pageSize -1": ("ListTasks", {"pageSize": -1}, "pageSize"),
    "ListTasks pageSize a word": ("ListTasks", {"pageSize": SECRET}, "pageSize"),
    "ListTasks negative historyLength": ("ListTasks", {"historyLength": -1}, "historyLength"),
    "ListTasks v0.3 status": ("ListTasks", {"status": "working"}, "status"),
    "ListTasks timestamp with offset": (
        "ListTasks",
        {"statusTimestampAfter": "2025-10-28T10:30:00+01:00"},
        "statusTimestampAfter",
    ),
    "CancelTask id missing": ("CancelTask", {}, "id"),
    "SubscribeToTask id missing": ("SubscribeToTask", {}, "id"),
    "CreatePushConfig url missing": (
        "CreateTaskPushNotificationConfig",
        {"taskId": "t", "token": SECRET},
        "url",
    ),
    "GetPushConfig id missing": ("GetTaskPushNotificationConfig", {"taskId": "t"}, "id"),
    "ListPushConfigs taskId missing": ("ListTaskPushNotificationConfigs", {}, "taskId"),
    "DeletePushConfig taskId missing": ("DeleteTaskPushNotificationConfig", {"id": "c"}, "taskId"),
}


@pytest.mark.parametrize(
    "method, params, field",
    INVALID_PARAMS.values(),
    ids=list(INVALID_PARAMS),
)
def test_invalid_params_are_32602_naming_the_field(
    harness: Harness, method: str, params: Any, field: str
) -> None:
    """Params that do not parse are -32602 with a BadRequest naming the failing field and never quoting a submitted value; no policy runs."""
    response = harness.call(method, params)
    error = assert_error(response, -32602)
    assert field in [v["field"] for v in field_violations(error)]
    assert SECRET not in json.dumps(response)
    assert harness.handler.calls == []


@pytest.mark.parametrize("page_size", [1, 100, 50, None])
def test_list_tasks_page_size_bounds(harness: Harness, page_size: int | None) -> None:
    """ListTasks accepts pageSize 1 and 100 (the inclusive bounds) and no pageSize at all."""
    params = {} if page_size is None else {"pageSize": page_size}
    assert harness.call("ListTasks", params)["result"]
    assert harness.handler.calls[0][2].page_size == page_size


@pytest.mark.parametrize("history_length", [0, 1, 1000])
def test_non_negative_history_length_is_accepted(
    harness: Harness, history_length: int
) -> None:
    """historyLength 0 and above is valid on GetTask."""
    harness.call("GetTask", {"id": "t", "historyLength": history_length})
    assert harness.handler.calls[0][2].history_length == history_length


def test_protojson_alternative_spellings(harness: Harness) -> None:
    """snake_case field names and enum numbers are accepted, as ProtoJSON parsers must."""
    harness.call(
        "SendMessage",
        {"message": {"message_id": "m-9", "role": 1, "parts": [{"text": "x"}]}},
    )
    typed = harness.handler.calls[0][2]
    assert (typed.message.message_id, typed.message.role) == ("m-9", "ROLE_USER")


# Notifications: run, never answered.


def test_notification_is_run_but_not_answered(harness: Harness) -> None:
    """A request without an id is run, and dispatch fires with None."""
    body = encode({"jsonrpc": "2.0", "method": "SendMessage", "params": {"message": MESSAGE}})
    assert harness.dispatch(body) is None
    assert [name for name, _, _ in harness.handler.calls] == ["send_message"]


@pytest.mark.parametrize(
    "method, params, version",
    [
        ("message/send", VALID_PARAMS["SendMessage"], "1.0"),
        ("GetTask", {}, "1.0"),
        ("GetTask", {"id": "t"}, None),
    ],
    ids=["unknown method", "invalid params", "no version"],
)
def test_refused_notification_is_not_answered(
    harness: Harness, method: str, params: Any, version: str | None
) -> None:
    """A notification that fails is not answered either."""
    body = encode({"jsonrpc": "2.0", "method": method, "params": params})
    assert harness.dispatch(body, version=version) is None


def test_policy_errors_become_their_error_objects(harness: Harness) -> None:
    """An A2AError raised by the policy is answered with its own code, message and details."""
    harness.handler.raises = TaskNotFoundError(metadata={"hint": "none"})
    error = assert_error(harness.call("GetTask", {"id": "t"}, request_id="q"), -32001, "q")
    assert error["message"] == "Task not found"
    assert error["data"][0]["metadata"] == {"hint": "none"}


def test_unexpected_failure_is_32603_and_discloses_nothing(
    harness: Harness, logged_events: Any
) -> None:
    """A policy failure that is not an A2AError is logged and answered -32603 without any detail of the failure."""
    logged_events.expect_failures()
    harness.handler.raises = RuntimeError(SECRET)
    response = harness.call("GetTask", {"id": "t"})
    error = assert_error(response, -32603)
    assert error["message"] == "Internal error"
    assert SECRET not in json.dumps(response)
    (event,) = logged_events.failures()
    assert event["log_failure"].check(RuntimeError)
    assert logged_events.named("a2a.internal_error") == [event]


# Dispatcher.run: a method by name, for bindings without envelopes.


def failed_with(d: Deferred[Any]) -> A2AError:
    """The A2AError a Deferred that must already have failed failed with."""
    results: list[Any] = []
    d.addBoth(results.append)
    assert results and isinstance(results[0], Failure), results
    error = results[0].value
    assert isinstance(error, A2AError), error
    return error


def run_context(version: str | None = "1.0", extensions: frozenset[str] = frozenset()) -> CallContext:
    return CallContext(binding="rest", source="192.0.2.7", version=version, extensions=extensions)


def test_run_serves_a_method_by_name(harness: Harness) -> None:
    """run() parses the params as call() does and answers the policy's result itself, with no envelope."""
    answer = fired(harness.dispatcher.run("GetTask", {"id": "t-1", "historyLength": "3"}, run_context()))
    assert answer == {"handled": "get_task"}
    ((name, context, request),) = harness.handler.calls
    assert (name, context.binding, request.id, request.history_length) == ("get_task", "rest", "t-1", 3)


@pytest.mark.parametrize(
    "method, params, version, expected",
    [
        ("Nope", {}, "1.0", MethodNotFoundError),
        ("GetTask", {"id": "t"}, None, VersionNotSupportedError),
        ("GetTask", {"id": "t"}, "0.3", VersionNotSupportedError),
        ("GetTask", {}, "1.0", InvalidParamsError),
        ("GetTask", ["t"], "1.0", InvalidParamsError),
    ],
    ids=["unknown method", "no version", "another version", "bad params", "params not an object"],
)
def test_run_fails_with_the_a2a_error(
    harness: Harness, method: str, params: Any, version: str | None, expected: type[A2AError]
) -> None:
    """run() fails with the very A2AError call() answers, in the same order of checks; the policy is not called."""
    assert type(failed_with(harness.dispatcher.run(method, params, run_context(version)))) is expected
    assert harness.handler.calls == []


def test_run_passes_policy_errors_and_hides_the_rest(harness: Harness, logged_events: Any) -> None:
    """A policy's A2AError comes out as it is; any other failure is logged and becomes InternalError."""
    harness.handler.raises = TaskNotFoundError(metadata={"hint": "none"})
    assert failed_with(harness.dispatcher.run("GetTask", {"id": "t"}, run_context())) is harness.handler.raises
    logged_events.expect_failures()
    harness.handler.raises = RuntimeError(SECRET)
    error = failed_with(harness.dispatcher.run("GetTask", {"id": "t"}, run_context()))
    assert type(error) is InternalError and SECRET not in error.message
    assert len(logged_events.named("a2a.internal_error")) == 1


def test_run_extension_serves_extension_methods_only() -> None:
    """
    With extension=True only an extension method is served (activated as
    on JSON-RPC); a core method's name is unknown there.
    """
    handler = RecordingHandler()
    handler.decide = lambda context, request: {"decided": request}  # type: ignore[attr-defined]
    uri = "https://example.org/ext/v1"
    dispatcher = Dispatcher(
        handler, {"x.Decide": ExtensionMethod(uri, Method(lambda params: params["id"], "decide"))}
    )
    active = run_context(extensions=frozenset({uri}))
    assert fired(dispatcher.run("x.Decide", {"id": "t"}, active, extension=True)) == {"decided": "t"}
    refused = failed_with(dispatcher.run("x.Decide", {"id": "t"}, run_context(), extension=True))
    assert type(refused) is MethodNotFoundError and uri in refused.message
    core = failed_with(dispatcher.run("GetTask", {"id": "t"}, active, extension=True))
    assert type(core) is MethodNotFoundError
    assert handler.calls == []


# Query parameters (the HTTP+JSON binding's GET requests).


def test_query_text_is_read_as_its_fields_type() -> None:
    """
    Values that came as query parameters are text, read as A2A 11.5 spells
    each type: true/false, decimal numbers, enum names, timestamps.
    """
    q = QueryText
    request = parse_list_tasks(
        {
            "pageSize": q("7"),
            "includeArtifacts": q("true"),
            "status": q("TASK_STATE_SUBMITTED"),
            "statusTimestampAfter": q("2027-01-15T08:00:00Z"),
            "context_id": q("c-1"),
        }
    )
    assert (request.page_size, request.include_artifacts, request.status, request.context_id) == (
        7,
        True,
        "TASK_STATE_SUBMITTED",
        "c-1",
    )
    assert request.status_timestamp_after == datetime(2027, 1, 15, 8, tzinfo=timezone.utc)
    assert parse_list_tasks({"includeArtifacts": q("false")}).include_artifacts is False


@pytest.mark.parametrize(
    "params, field",
    [
        ({"includeArtifacts": QueryText("yes")}, "includeArtifacts"),
        ({"includeArtifacts": "true"}, "includeArtifacts"),
        ({"pageSize": QueryText("seven")}, "pageSize"),
        ({"pageSize": [QueryText("7"), QueryText("8")]}, "pageSize"),
        ({"contextId": [QueryText("a"), QueryText("b")]}, "contextId"),
    ],
    ids=["not a boolean", "JSON text is no boolean", "not a number", "a number twice", "a string twice"],
)
def test_query_text_that_is_not_its_fields_type(params: dict[str, Any], field: str) -> None:
    """Query text that does not spell its field's type, or a single field named twice, is -32602 naming it."""
    with pytest.raises(InvalidParamsError) as raised:
        parse_list_tasks(params)
    assert [name for name, _ in raised.value.field_violations] == [field]


def test_query_text_lists() -> None:
    """A repeated field takes repeated names or comma lists, or both; JSON lists stay as they are."""
    q = QueryText
    assert ParamsReader({"tags": q("a,b")}, "").strings("tags") == ("a", "b")
    assert ParamsReader({"tags": [q("a"), q("b,c")]}, "").strings("tags") == ("a", "b", "c")
    assert ParamsReader({"tags": ["a,b"]}, "").strings("tags") == ("a,b",)


# Error objects and the small protocol helpers.


#: Each error class: its JSON-RPC code, and its HTTP status and google.rpc
#: code on the HTTP+JSON binding (A2A 3.3.2 and 5.4; the JSON-RPC codes
#: the specification does not map are answered as its generic categories:
#: validation 400 INVALID_ARGUMENT, not found 404, server fault 500).
ERROR_TABLE = [
    (JSONParseError, -32700, 400, "INVALID_ARGUMENT"),
    (InvalidRequestError, -32600, 400, "INVALID_ARGUMENT"),
    (MethodNotFoundError, -32601, 404, "NOT_FOUND"),
    (InvalidParamsError, -32602, 400, "INVALID_ARGUMENT"),
    (InternalError, -32603, 500, "INTERNAL"),
    (TaskNotFoundError, -32001, 404, "NOT_FOUND"),
    (TaskNotCancelableError, -32002, 400, "FAILED_PRECONDITION"),
    (PushNotificationNotSupportedError, -32003, 400, "FAILED_PRECONDITION"),
    (UnsupportedOperationError, -32004, 400, "FAILED_PRECONDITION"),
    (ContentTypeNotSupportedError, -32005, 400, "INVALID_ARGUMENT"),
    (InvalidAgentResponseError, -32006, 500, "INTERNAL"),
    (ExtendedAgentCardNotConfiguredError, -32007, 400, "FAILED_PRECONDITION"),
    (ExtensionSupportRequiredError, -32008, 400, "FAILED_PRECONDITION"),
    (VersionNotSupportedError, -32009, 400, "FAILED_PRECONDITION"),
]


@pytest.mark.parametrize("error_class, code, http_status, grpc_status", ERROR_TABLE)
def test_error_table(
    error_class: type[A2AError], code: int, http_status: int, grpc_status: str
) -> None:
    """
    Each A2A error has the specification's code, ErrorInfo reason, HTTP
    status and google.rpc code; its JSON-RPC data is a list starting with
    the ErrorInfo, and its HTTP+JSON body is a google.rpc.Status with the
    same details whose code is the HTTP status.
    """
    error = error_class()
    assert (error.code, error.reason, error.http_status, error.grpc_status) == (
        code,
        REASONS[code],
        http_status,
        grpc_status,
    )
    details = [{"@type": ERROR_INFO, "reason": REASONS[code], "domain": A2A_DOMAIN}]
    assert error_object(error) == {
        "code": code,
        "message": error_class.default_message,
        "data": details,
    }
    assert status_object(error) == {
        "error": {
            "code": http_status,
            "status": grpc_status,
            "message": error_class.default_message,
            "details": details,
        }
    }


def test_field_violations_become_a_bad_request_detail() -> None:
    """Field violations travel as a google.rpc.BadRequest after the ErrorInfo."""
    error = InvalidParamsError(field_violations=[("message.parts", "is required")])
    assert error_object(error)["data"][1] == {
        "@type": BAD_REQUEST,
        "fieldViolations": [{"field": "message.parts", "description": "is required"}],
    }


@pytest.mark.parametrize(
    "epoch_ms, text",
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_764_476_995_125, "2025-11-30T04:29:55.125Z"),
        (1_764_476_995_007, "2025-11-30T04:29:55.007Z"),
    ],
)
def test_timestamps_are_rfc3339_utc_with_milliseconds(epoch_ms: int, text: str) -> None:
    """format_timestamp writes RFC 3339 UTC with exactly three fraction digits and Z, and parse_timestamp reads it back."""
    assert format_timestamp(epoch_ms) == text
    parsed = parse_timestamp(text)
    assert parsed is not None
    assert parsed == datetime.fromtimestamp(epoch_ms / 1000, timezone.utc)


@pytest.mark.parametrize(
    "text",
    ["2025-11-30T04:29:55+00:00", "2025-11-30 04:29:55Z", "2025-13-01T00:00:00Z", "yesterday"],
)
def test_parse_timestamp_refuses_non_protojson(text: str) -> None:
    """Timestamps that are not UTC with Z, or not dates at all, do not parse."""
    assert parse_timestamp(text) is None


def test_parse_extensions() -> None:
    """A2A-Extensions values are comma separated, may repeat, and blanks are dropped."""
    assert parse_extensions(["https://a/1, https://b/2", " ,https://a/1"]) == {
        "https://a/1",
        "https://b/2",
    }
    assert parse_extensions(None) == frozenset()


def test_nul_in_a_string_field_is_invalid_params() -> None:
    """A NUL inside a string field (an id, say) is -32602, before any store sees it."""
    from beacon.protocol import InvalidParamsError
    from beacon.protocol.types import parse_get_task, parse_send_message

    with pytest.raises(InvalidParamsError):
        parse_get_task({"id": "abc\x00def"})
    with pytest.raises(InvalidParamsError):
        parse_send_message(
            {"message": {"messageId": "m\x00", "role": "ROLE_USER", "parts": [{"text": "t"}]}}
        )


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda children: st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8), children, max_size=4),
        max_leaves=24,
    )
)
def test_compact_encoder_writes_what_json_dumps_writes(value: Any) -> None:
    """The encoder made once writes exactly json.dumps's compact text, keys sorted or not."""
    for sort_keys in (False, True):
        assert compact_encoder(sort_keys=sort_keys)(value) == json.dumps(
            value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys
        )


@given(
    st.none() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8) | st.integers(), max_size=4),
)
def test_prepared_json_is_written_as_its_text(request_id: Any, value: dict[str, Any]) -> None:
    """A PreparedJSON is written as its own text, alone and as a success envelope's result: the bytes dumps makes of the same plain objects."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    made = prepared(value, text)
    assert made == value and dumps(made) == text.encode()
    response = success(request_id, made)
    plain = {"jsonrpc": "2.0", "id": request_id, "result": value}
    assert response == plain
    assert dumps(response) == json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode()


#: Values around the plain shapes: right, wrong in type, empty, too long,
#: with NUL, and members spelled otherwise.
_near_text = st.sampled_from(["", "hi", "a\x00b", "x" * 256, "x" * 257, "ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED"])
_near_value = _near_text | st.none() | st.integers(-1, 3) | st.booleans() | st.just([]) | st.just({})
_near_part = (
    st.fixed_dictionaries({"text": _near_text})
    | st.dictionaries(st.sampled_from(["text", "data", "mediaType", "raw"]), _near_value, max_size=2)
    | _near_value
)
_near_message = st.fixed_dictionaries(
    {"messageId": _near_text | _near_value, "role": _near_text | _near_value, "parts": st.lists(_near_part, max_size=3) | _near_value},
    optional={"contextId": _near_text, "message_id": _near_text, "metadata": st.just({})},
) | st.dictionaries(st.sampled_from(["messageId", "role", "parts"]), _near_value, max_size=3)
_id_text = st.text(min_size=1, max_size=300)
_plain_send = st.fixed_dictionaries(
    {
        "message": st.fixed_dictionaries(
            {
                "messageId": _id_text,
                "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT"]),
                "parts": st.lists(st.fixed_dictionaries({"text": st.text(max_size=8)}), min_size=1, max_size=3),
            }
        )
    }
)
_near_send = _plain_send | st.fixed_dictionaries(
    {"message": _near_message | _near_value}, optional={"configuration": st.just({}), "tenant": _near_text}
)


def _both_ways(plain: Any, build: Any, params: dict[str, Any]) -> None:
    """What plain reads, the general reader reads the same; what it leaves, it leaves."""
    general = params_parser(build)
    try:
        expected = general(params)
    except InvalidParamsError:
        expected = None
    read = plain(params)
    if read is not None:
        assert read == expected


@given(_near_send)
def test_plain_send_message_reads_what_the_reader_reads(params: dict[str, Any]) -> None:
    """SendMessage's plain reading never differs from ParamsReader's."""
    _both_ways(_plain_send_message, _send_message, params)


@given(
    st.fixed_dictionaries({"id": _id_text})
    | st.fixed_dictionaries({"id": _near_text | _near_value}, optional={"historyLength": _near_value, "tenant": _near_text})
)
def test_plain_get_task_reads_what_the_reader_reads(params: dict[str, Any]) -> None:
    """GetTask's plain reading never differs from ParamsReader's."""
    _both_ways(_plain_get_task, _get_task, params)


def test_plain_readings_take_the_usual_requests() -> None:
    """The plain readers do read the usual shapes (else they would only cost time)."""
    usual = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}, {"text": "there"}]}}
    read = _plain_send_message(usual)
    assert read is not None and read == params_parser(_send_message)(usual)
    assert _plain_get_task({"id": "t-1"}) == params_parser(_get_task)({"id": "t-1"})
