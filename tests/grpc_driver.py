"""
The behaviour suite's gRPC driver (see C{tests/bindings.py}): the gRPC
binding's L{GRPCCalls} as makeService wires them, over the public
dispatcher and limits, on the world's clock, without grpcio's server and
threads (C{tests/test_grpc.py} runs those).

Each JSON-RPC request becomes its method's request message (ProtoJSON,
strict: a member the proto lacks cannot be said), serialised and read
back as grpcio's handler reads it, its service parameters lower-case
metadata; the answer is serialised as its response message, or the
google.rpc.Status of the error (its gRPC code checked against the
error's), and read back into the JSON-RPC response it stands for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pytest
from google.api import field_behavior_pb2
from google.protobuf import json_format
from google.rpc import code_pb2
from twisted.python.failure import Failure

from beacon.bindings.grpc import (
    METHODS as GRPC_METHODS,
    UNAUTHENTICATED,
    Refused,
    event_of,
    message_of,
    params_of,
    refusal_status,
    status_of,
)
from beacon.protocol import CollectingSink, format_timestamp, parse_timestamp
from driver_support import A2A_ERRORS, Answer, Driver, Headers, Stream

if TYPE_CHECKING:
    from bindings import World


def _required(message: Any, document: dict[str, Any]) -> dict[str, Any]:
    """
    C{document} (C{message} in ProtoJSON) with the fields the proto marks
    REQUIRED (C{google.api.field_behavior}) that hold their default: on
    the wire an empty string, zero or empty list is no field at all, and
    a writer that follows the proto prints them (as Beacon's JSON does).
    """
    for field in message.DESCRIPTOR.fields:
        name = field.json_name
        required = field_behavior_pb2.REQUIRED in field.GetOptions().Extensions[
            field_behavior_pb2.field_behavior
        ]
        value = getattr(message, field.name)
        nested = field.message_type is not None and not field.message_type.full_name.startswith(
            "google.protobuf."
        )
        if field.is_repeated:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                continue
            if not value:
                if required:
                    document.setdefault(name, [])
            elif nested:
                document[name] = [_required(item, doc) for item, doc in zip(value, document[name])]
        elif nested:
            if message.HasField(field.name):
                document[name] = _required(value, document[name])
        elif required and name not in document and not field.has_presence:
            document[name] = (
                field.enum_type.values_by_number[0].name if field.enum_type is not None else value
            )
    return document


def _proto_json(message: Any) -> Any:
    """
    A response message as ProtoJSON (its REQUIRED fields always, see
    L{_required}), its timestamps written as Beacon writes them
    (milliseconds always: protobuf's writer leaves out a zero fraction,
    the same instant).
    """

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            stamp = parse_timestamp(value)
            if stamp is not None:
                return format_timestamp(
                    int(stamp.timestamp()) * 1000 + stamp.microsecond // 1000
                )
        return value

    return walk(_required(message, json_format.MessageToDict(message)))


def _grpc_error(status: Any, request_id: Any) -> dict[str, Any]:
    """The JSON-RPC error response a google.rpc.Status of an A2A error stands for."""
    details = [json_format.MessageToDict(detail) for detail in status.details]
    info = details[0]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["domain"] == "a2a-protocol.org"
    code, _, grpc_status = A2A_ERRORS[info["reason"]]
    assert code_pb2.Code.Name(status.code) == grpc_status, (status, grpc_status)
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": status.message, "data": details},
    }


class _GRPCStream(Stream):
    """A server-streaming call's events, each a StreamResponse read back."""

    def __init__(self, world: World, stream: Any, request_id: Any, echoed: frozenset[str]) -> None:
        self.world = world
        self.id = request_id
        self.echoed = echoed
        self.sink = CollectingSink()
        self._stream = stream
        self._read = 0
        self._closed = False
        stream.attach(self.sink)

    def events(self) -> list[Any]:
        self.world.clock.advance(0)
        events: list[Any] = []
        for result in self.sink.events[self._read :]:
            message = type(event_of(result)).FromString(event_of(result).SerializeToString())
            events.append({"jsonrpc": "2.0", "id": self.id, "result": _proto_json(message)})
        self._read = len(self.sink.events)
        if self.sink.error is not None and not self._closed:
            self._closed = True
            events.append(_grpc_error(status_of(self.sink.error), self.id))
        return events

    @property
    def ended(self) -> bool:
        return self.sink.ended or self.sink.error is not None or self._stream.finished

    def close(self) -> None:
        self._stream.cancel()


class GRPCDriver(Driver):
    """The gRPC binding's calls, as its handlers make them (see the module docstring)."""

    name = "grpc"
    policy = "public"
    door = "grpc"

    def expresses(self, request: Any) -> bool:
        """
        Whether gRPC can say C{request}: a well-formed envelope with an id,
        of a method of the service, whose params its request message holds.
        """
        if not (
            isinstance(request, dict)
            and request.get("jsonrpc") == "2.0"
            and request.get("method") in GRPC_METHODS
            and "id" in request
            and isinstance(request.get("params", {}), (dict, type(None)))
            # Only an id a JSON-RPC binding would echo: the driver echoes it.
            and (
                request["id"] is None
                or (isinstance(request["id"], str) and len(request["id"]) <= 128)
                or (
                    isinstance(request["id"], int)
                    and not isinstance(request["id"], bool)
                    and abs(request["id"]) <= 2**53
                )
            )
        ):
            return False
        try:
            json_format.ParseDict(request.get("params") or {}, GRPC_METHODS[request["method"]][0]())
        except (json_format.ParseError, TypeError, ValueError):
            return False
        return True

    def _run(
        self, request: Any, version: str | None, query_version: str | None, extensions: Iterable[str], headers: Headers
    ) -> tuple[Any, Any]:
        if query_version is not None or not self.expresses(request):
            pytest.skip(
                "the gRPC binding cannot say this request (raw bytes, a JSON-RPC envelope, id or "
                "notification, a method the service lacks, a query parameter, params its request "
                "message cannot hold)"
            )
        method = request["method"]
        request_class = GRPC_METHODS[method][0]
        message = json_format.ParseDict(request.get("params") or {}, request_class())
        params = params_of(request_class.FromString(message.SerializeToString()))
        metadata: list[tuple[str, str]] = []
        if version is not None:
            metadata.append(("a2a-version", version))
        uris = list(extensions)
        if uris:
            metadata.append(("a2a-extensions", ", ".join(uris)))
        metadata += [(name.lower(), value) for name, value in headers]
        peer = self.world.peer_address()
        calls = self.world.grpc
        source = calls.source_of(peer, tuple(metadata))
        if not calls.admits(tuple(metadata)):
            # As the door refuses it, from its metadata, before its message is read.
            calls.unauthenticated(source)
            return method, Failure(UNAUTHENTICATED)
        called = calls.call(method, params, source, calls.context_of(source, tuple(metadata)))
        self.world.clock.advance(0)
        outcome: list[Any] = []
        called.addBoth(outcome.append)
        assert outcome, "the call was not answered on the clock"
        return method, outcome[0]

    def _answer(self, request: Any, method: str, outcome: Any) -> Answer | tuple[Any, Any]:
        request_id = request.get("id")
        if isinstance(outcome, Failure):
            if isinstance(outcome.value, Refused):
                status = refusal_status(outcome.value)
                return Answer(None, refusal=(status.code, json_format.MessageToDict(status)))
            return Answer(_grpc_error(status_of(outcome.value), request_id))
        context, result = outcome
        return context, result

    def call(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        query_version: str | None = None,
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Answer:
        method, outcome = self._run(request, version, query_version, extensions, headers)
        answered = self._answer(request, method, outcome)
        if isinstance(answered, Answer):
            return answered
        context, result = answered
        assert not GRPC_METHODS[method][2], "a stream: use stream()"
        response = message_of(method, result)
        response = type(response).FromString(response.SerializeToString())
        return Answer(
            {"jsonrpc": "2.0", "id": request.get("id"), "result": _proto_json(response)},
            context.extensions,
        )

    def stream(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Stream | Answer:
        method, outcome = self._run(request, version, None, extensions, headers)
        answered = self._answer(request, method, outcome)
        if isinstance(answered, Answer):
            return answered
        context, result = answered
        return _GRPCStream(self.world, result, request.get("id"), context.extensions)
