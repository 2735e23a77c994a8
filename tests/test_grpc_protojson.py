"""
beacon.bindings.grpc._protojson builds, from a ProtoJSON object, the
message json_format.ParseDict builds, and refuses what it refuses with its
error.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import empty_pb2, json_format
from google.protobuf.message import Message

from beacon.bindings.grpc import _protojson as protojson
from beacon.bindings.grpc import event_of, message_of
from beacon.proto import a2a_pb2

RECEIPT = {
    "receipt": {
        "id": "06h4t99obtrok080nl9pcud1md59lg2h3oak",
        "sha256": "7996dc34080703946e8345af60390612e36e8a2c8103291f46c148b569fb5806",
        "receivedAt": "2026-12-07T03:56:20.447Z",
    }
}
TASK = {
    "id": "t-1",
    "contextId": "c-1",
    "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": "2026-12-07T03:56:20.447Z"},
    "metadata": RECEIPT,
}
MESSAGE = {
    "messageId": "m-1",
    "role": "ROLE_USER",
    "parts": [
        {"text": "hello", "metadata": {}},
        {"data": {"a": [1, 2.5, None, True, "x", {"b": []}], "n": None}},
        {"url": "https://example.com/f", "filename": "f.txt", "mediaType": "text/plain"},
    ],
    "extensions": ["urn:a", "urn:b"],
    "referenceTaskIds": [],
}

#: What the fast path builds itself.
BUILT = [
    (a2a_pb2.SendMessageResponse, {"task": TASK}),
    (a2a_pb2.SendMessageResponse, {"message": MESSAGE}),
    (a2a_pb2.Task, TASK),
    (a2a_pb2.Task, {"id": "t", "status": {}, "history": [MESSAGE, {"messageId": "m-2"}], "artifacts": []}),
    (a2a_pb2.Task, {"id": "t", "metadata": {}}),
    (
        a2a_pb2.Task,
        {
            "id": "t",
            "artifacts": [{"artifactId": "a", "parts": [{"text": "é ✓ 日本"}], "metadata": {"k": {"l": [[], {}]}}}],
        },
    ),
    (a2a_pb2.ListTasksResponse, {"tasks": [TASK, TASK], "nextPageToken": "n", "pageSize": 2, "totalSize": 7}),
    (a2a_pb2.StreamResponse, {"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}}),
    (a2a_pb2.TaskStatus, {"timestamp": "1970-01-01T00:00:00Z"}),
    (a2a_pb2.TaskStatus, {"timestamp": "2026-12-07T03:56:20.123456789Z"}),
    (a2a_pb2.TaskStatus, {"timestamp": "0001-01-01T00:00:00.5Z"}),
    (a2a_pb2.TaskStatus, {"timestamp": "9999-12-31T23:59:59.999999999Z"}),
    (a2a_pb2.TaskStatus, {"timestamp": "1969-12-31T23:59:59.000001Z"}),
    # NaN in a Value: set as ParseDict sets it.
    (a2a_pb2.Task, {"metadata": {"k": float("nan")}}),
    # Another form: Timestamp.FromJsonString reads it.
    (a2a_pb2.TaskStatus, {"timestamp": "2026-12-07T03:56:20.5+01:30"}),
]

#: What it leaves to ParseDict, which builds it or refuses it.
LEFT = [
    (a2a_pb2.Task, {"id": None}),  # a null clears
    (a2a_pb2.Task, {"context_id": "c"}),  # the proto name
    (a2a_pb2.Task, {"id": "t", "notAField": 1}),
    (a2a_pb2.Task, {"id": 5}),
    (a2a_pb2.Task, {"status": {"state": 3}}),  # an enum by number
    (a2a_pb2.Task, {"status": {"state": "TASK_STATE_NOPE"}}),
    (a2a_pb2.Task, {"status": {"timestamp": "2026-02-30T00:00:00Z"}}),
    (a2a_pb2.Task, {"status": {"timestamp": "2026-12-07T03:56:60Z"}}),
    (a2a_pb2.Task, {"status": {"timestamp": "2026-12-07t03:56:20Z"}}),
    (a2a_pb2.Task, {"status": {"timestamp": "2026-12-07T03:56:20.1234567891Z"}}),
    (a2a_pb2.Task, {"status": {"timestamp": 0}}),
    (a2a_pb2.Task, {"history": {"messageId": "m"}}),
    (a2a_pb2.Task, {"history": [None]}),
    (a2a_pb2.Task, {"metadata": []}),
    (a2a_pb2.Task, {"metadata": {"k": 10**400}}),
    (a2a_pb2.Message, {"parts": [{"text": "a", "url": "b"}]}),  # two of a oneof
    (a2a_pb2.Message, {"parts": [{"raw": "aGVsbG8"}]}),  # bytes
    (a2a_pb2.Message, {"parts": [{"data": None}]}),
    (a2a_pb2.Message, {"parts": [{"text": "\ud800"}]}),
    (a2a_pb2.Message, {"extensions": ["a", 1]}),
    (a2a_pb2.Message, {"messageId": b"m"}),
    (a2a_pb2.ListTasksResponse, {"pageSize": True}),
    (a2a_pb2.ListTasksResponse, {"pageSize": 2.0}),
    (a2a_pb2.ListTasksResponse, {"pageSize": "2"}),
    (a2a_pb2.ListTasksResponse, {"pageSize": 2**40}),
    (a2a_pb2.ListTasksResponse, []),
]


def _reference(cls: type[Message], value: Any) -> Message | tuple[type[Exception], str]:
    try:
        return json_format.ParseDict(value, cls())
    except Exception as e:
        return (type(e), str(e))


def _fast(cls: type[Message], value: Any) -> Message | tuple[type[Exception], str]:
    try:
        return protojson.parse(value, cls())
    except Exception as e:
        return (type(e), str(e))


@pytest.mark.parametrize("cls, value", BUILT + LEFT)
def test_as_parse_dict_builds_or_refuses(cls: type[Message], value: Any) -> None:
    """The same message, field for field and byte for byte, or the same error."""
    built, reference = _fast(cls, value), _reference(cls, value)
    assert built == reference
    if isinstance(built, Message):
        assert isinstance(reference, Message)
        assert built.SerializeToString(deterministic=True) == reference.SerializeToString(deterministic=True)
        assert built.ListFields() == reference.ListFields()


@pytest.mark.parametrize("cls, value", BUILT)
def test_the_common_answers_are_built_here(cls: type[Message], value: Any) -> None:
    """The answers the dispatcher gives are built without ParseDict."""
    message = cls()
    protojson.fill(message, value)
    assert message == json_format.ParseDict(value, cls())


@pytest.mark.parametrize("cls, value", LEFT)
def test_the_rest_is_left_to_parse_dict(cls: type[Message], value: Any) -> None:
    """Anything else is declined (or refused by protobuf), for ParseDict to decide."""
    with pytest.raises(Exception):  # noqa: B017 (Declined, or protobuf's ValueError)
        protojson.fill(cls(), value)


def test_the_binding_maps_through_it() -> None:
    """message_of and event_of: the answer, Empty, and the stream event."""
    assert message_of("SendMessage", {"task": TASK}) == json_format.ParseDict(
        {"task": TASK}, a2a_pb2.SendMessageResponse()
    )
    assert message_of("DeleteTaskPushNotificationConfig", None) == empty_pb2.Empty()
    event = {"task": TASK}
    assert event_of(event) == json_format.ParseDict(event, a2a_pb2.StreamResponse())


# The other way: request messages read as their params.


def _send(**message: Any) -> a2a_pb2.SendMessageRequest:
    request = a2a_pb2.SendMessageRequest()
    json_format.ParseDict({"message": {"messageId": "m-1", "role": "ROLE_USER", **message}}, request)
    return request


@pytest.mark.parametrize(
    "request_",
    [
        _send(parts=[{"text": "hello"}]),
        _send(parts=[{"text": "a"}, {"url": "https://example.com/f", "mediaType": "text/plain"}]),
        _send(parts=[{"text": "x"}], extensions=["urn:a", "urn:b"], referenceTaskIds=["t-1"]),
        _send(parts=[{"data": {"a": [1, None]}}]),  # a Value: MessageToDict's
        _send(parts=[{"raw": "eHg="}]),  # bytes: MessageToDict's
        _send(parts=[{"text": "x"}], metadata={"k": "v"}),  # a Struct: MessageToDict's
        a2a_pb2.GetTaskRequest(id="t-1"),
        a2a_pb2.GetTaskRequest(id="t-1", history_length=3),
        a2a_pb2.ListTasksRequest(page_size=5, status=a2a_pb2.TASK_STATE_SUBMITTED),
        a2a_pb2.CancelTaskRequest(id="t"),
        a2a_pb2.SendMessageRequest(),
    ],
)
def test_to_json_is_message_to_dict(request_: Message) -> None:
    assert protojson.to_json(request_) == json_format.MessageToDict(request_)


def test_to_json_leaves_an_unnamed_enum_to_message_to_dict() -> None:
    request = _send(parts=[{"text": "x"}])
    request.message.role = 77  # no name: MessageToDict writes the number
    assert protojson.to_json(request) == json_format.MessageToDict(request)
    assert protojson.to_json(request)["message"]["role"] == 77

