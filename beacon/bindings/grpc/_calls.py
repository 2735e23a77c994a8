"""
The reactor side of the A2A gRPC binding (A2A §10), service
C{lf.a2a.v1.A2AService}: one call, from its method, params (the request
message as ProtoJSON: camelCase names, enums by name), metadata and source,
to the dispatcher's answer, under the same policy, rate limit and
submitter credentials as the public HTTP doors; and the mapping of answers
and A2A errors to messages and C{google.rpc.Status}.

Wire contract::

    every method of A2AService, by its proto name (SendMessage, GetTask,
    ListTasks, CancelTask, the push notification configs,
    GetExtendedAgentCard), and the two server-streaming ones
    (SendStreamingMessage, SubscribeToTask: one StreamResponse per event;
    Beacon's public policy refuses both, as on JSON-RPC)

    metadata (lower case):  a2a-version     1.0 (required, as A2A-Version
                                             elsewhere; without it every
                                             method is FAILED_PRECONDITION
                                             VERSION_NOT_SUPPORTED)
                            a2a-extensions  activated ones echoed in the
                                             response headers
                            authorization   Bearer <token>   ([auth])
                            x-api-key       <key>            ([auth])
                            x-forwarded-for read from a trusted proxy only

    -> the response message; DeleteTaskPushNotificationConfig: Empty
    -> an A2A error: the status code of its table (A2A §5.4: TaskNotFound
       NOT_FOUND, validation INVALID_ARGUMENT, the other A2A errors
       FAILED_PRECONDITION, internal INTERNAL), the error's message, and in
       grpc-status-details-bin a google.rpc.Status whose details are a
       packed ErrorInfo (reason, domain a2a-protocol.org, metadata) and,
       for invalid params, a BadRequest
    -> refusals before the dispatcher, ErrorInfo in Beacon's domain:
       RESOURCE_EXHAUSTED RATE_LIMITED (+ RetryInfo) for a source over
       [limits] rate; UNAUTHENTICATED UNAUTHENTICATED without a good
       credential; RESOURCE_EXHAUSTED IN_FLIGHT_LIMIT for a source over
       [grpc] max_calls_per_source (see L{beacon.bindings.grpc._door} for
       the door's own refusals)
    -> anything unexpected: INTERNAL "Internal error", logged, nothing
       more to the peer
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.message_factory import GetMessageClass
from google.rpc import code_pb2, error_details_pb2, status_pb2
from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from beacon.bindings.admission import BEACON_DOMAIN
from beacon.bindings.admission import TransportLimits
from beacon.bindings.admission import Refusals
from beacon.bindings.grpc import _protojson as protojson
from beacon.proto import a2a_pb2
from beacon.protocol import (
    A2A_DOMAIN,
    A2AError,
    CallContext,
    Dispatcher,
    EventStream,
    InternalError,
    parse_extensions,
)

log = Logger()

#: The service's full name, as a2a.proto declares it.
SERVICE_NAME = "lf.a2a.v1.A2AService"
_SERVICE = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]
#: Each method's request and response classes, by name.
METHODS: dict[str, tuple[type[ProtoMessage], type[ProtoMessage], bool]] = {
    method.name: (
        GetMessageClass(method.input_type),
        GetMessageClass(method.output_type),
        method.server_streaming,
    )
    for method in _SERVICE.methods
}
class Refused(Exception):
    """
    A call refused before the dispatcher (rate limit, credentials, calls in
    progress): its status code, Beacon's reason and message, and when to
    retry.
    """

    def __init__(
        self, code: grpc.StatusCode, reason: str, message: str, retry_after: int = 0
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


#: The refusal of a call without a good credential (C{[auth]}).
UNAUTHENTICATED = Refused(
    grpc.StatusCode.UNAUTHENTICATED,
    "UNAUTHENTICATED",
    "this Beacon admits submitters with a credential only; see the agent card's "
    "securitySchemes (metadata authorization: Bearer <token>, or x-api-key)",
)


def params_of(request: ProtoMessage) -> dict[str, Any]:
    """
    A request message as the JSON-RPC params it stands for (ProtoJSON:
    camelCase names, enums by name, unset fields left out).
    """
    return protojson.to_json(request)


def message_of(method: str, result: Any) -> ProtoMessage:
    """
    The response message of C{method} for the dispatcher's C{result} (a
    ProtoJSON object; None for Empty).
    """
    response = METHODS[method][1]()
    return protojson.parse(result, response) if result else response


def event_of(result: Any) -> ProtoMessage:
    """One event of a stream (a ProtoJSON StreamResponse) as its message."""
    return protojson.parse(result, a2a_pb2.StreamResponse())


def _packed(detail: ProtoMessage) -> AnyMessage:
    packed = AnyMessage()
    packed.Pack(detail)
    return packed


def status_of(error: A2AError) -> status_pb2.Status:
    """
    The google.rpc.Status of an A2A error: its gRPC code (A2A §5.4), its
    message, a packed ErrorInfo and, for field violations, a BadRequest.
    """
    details = [
        _packed(
            error_details_pb2.ErrorInfo(
                reason=error.reason, domain=A2A_DOMAIN, metadata=error.metadata
            )
        )
    ]
    if error.field_violations:
        details.append(
            _packed(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=field, description=description
                        )
                        for field, description in error.field_violations
                    ]
                )
            )
        )
    return status_pb2.Status(
        code=code_pb2.Code.Value(error.grpc_status), message=error.message, details=details
    )


def refusal_status(refused: Refused) -> status_pb2.Status:
    """The google.rpc.Status of a refusal: an ErrorInfo in Beacon's domain (+ RetryInfo)."""
    details = [
        _packed(error_details_pb2.ErrorInfo(reason=refused.reason, domain=BEACON_DOMAIN))
    ]
    if refused.retry_after:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.seconds = refused.retry_after
        details.append(_packed(retry))
    return status_pb2.Status(
        code=refused.code.value[0], message=refused.message, details=details
    )


def internal_status() -> status_pb2.Status:
    """What an unexpected failure answers: INTERNAL, nothing of the failure."""
    return status_of(InternalError())


#: gRPC metadata: (key, value) pairs, keys lower case.
Metadata = Sequence[tuple[str, Any]]


def _values(metadata: Metadata, key: str) -> list[str]:
    return [value for name, value in metadata if name == key and isinstance(value, str)]


def _joined(metadata: Metadata, key: str) -> str | None:
    """
    C{key}'s values joined with C{", "}, as an HTTP header sent on several
    lines is read (so a version or a credential sent twice is read alike on
    every binding); None without one.
    """
    values = _values(metadata, key)
    return ", ".join(values) if values else None


class GRPCCalls:
    """
    The reactor side of the gRPC binding: a call's source, credential and
    context from its metadata and peer, and the call, from its method and
    params, to the dispatcher's answer. Runs on the reactor thread only.

    @ivar refusals: The refusals made here, by reason (the metrics' door
        C{grpc}).
    @ivar in_flight: Calls in progress (given to the dispatcher, not yet
        answered; a stream until it ends).
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        limits: TransportLimits,
        *,
        binding: str = "grpc",
        extensions: frozenset[str] = frozenset(),
    ) -> None:
        """
        @param dispatcher: Runs the methods against the policy.
        @param limits: The public doors' limits: their rate limiter, source
            resolver and credentials are shared (the body cap is the door's
            message cap here).
        @param binding: The binding recorded in each call's context (and a
            stored submission's door).
        @param extensions: The extension URIs this interface supports.
        """
        self._dispatcher = dispatcher
        self._limits = limits
        self._binding = binding
        self._extensions = extensions
        self.refusals = Refusals()
        self.in_flight = 0
        #: The gRPC listeners' open connections (kept by the door).
        self.connections = 0

    @property
    def open_connections(self) -> int:
        """For the metrics' door: the gRPC listeners' open connections."""
        return self.connections

    @property
    def clock(self) -> IReactorTime:
        """What times the refusals' log lines (the rate limiter's clock)."""
        return self._limits.rate.clock

    def source_of(self, address: IAddress, metadata: Metadata) -> str:
        """The caller's source: its address (a trusted proxy's x-forwarded-for)."""
        sources = self._limits.sources
        forwarded = (
            [v.encode("latin-1", "replace") for v in _values(metadata, "x-forwarded-for")]
            if sources.trusts_proxies
            else None
        )
        return sources.resolve(address, forwarded)

    def context_of(self, source: str, metadata: Metadata) -> CallContext:
        """The call's context: its version and activated extensions from metadata."""
        requested = parse_extensions(_values(metadata, "a2a-extensions"))
        return CallContext(
            binding=self._binding,
            source=source,
            version=_joined(metadata, "a2a-version"),
            extensions=requested & self._extensions,
        )

    def call(
        self, method: str, params: Any, source: str, context: CallContext
    ) -> Deferred[tuple[CallContext, Any]]:
        """
        Run one call admitted from its metadata (L{admits}): the rate
        limit, then the dispatcher.

        @param source: The caller's source (L{source_of}).
        @param context: The call's context (L{context_of}).

        @return: A Deferred firing with the call's context and the result
            (an L{EventStream} for a streaming method), or failing with an
            L{A2AError} or a L{Refused}.
        """
        limits = self._limits
        retry = limits.rate.refusal(
            source,
            self.refusals,
            log,
            "a2a.grpc.rate_limited: source {source} is over {rate}/s (burst {burst}); "
            "refusing until it slows down",
        )
        if retry is not None:
            return fail(
                Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "RATE_LIMITED",
                    f"too many requests from this source; retry after {retry} s",
                    retry,
                )
            )
        self.in_flight += 1

        def done(result: Any) -> Any:
            if isinstance(result, EventStream) and not result.finished:
                result.on_cancel(self._ended)
            else:
                self.in_flight -= 1
            return (context, result)

        def refused(reason: Failure) -> Failure:
            self.in_flight -= 1
            return reason

        return self._dispatcher.run(method, params, context).addCallbacks(done, refused)

    def _ended(self) -> None:
        self.in_flight -= 1

    def admits(self, metadata: Metadata) -> bool:
        """
        Whether the call's metadata carries a good credential (always, with
        C{[auth]} off).
        """
        auth = self._limits.auth
        return not auth.enabled or auth.admits(
            _joined(metadata, "authorization"), _joined(metadata, "x-api-key")
        )

    def unauthenticated(self, source: str) -> None:
        """Count (and log, throttled) a call refused for want of a credential."""
        self.refusals.unauthenticated(source, self._limits.rate.clock, "grpc")

    def too_many(self, source: str, cap: int) -> None:
        """Count (and log, throttled) a call refused over the calls a source may have in progress."""
        self.refusals.throttled(
            "in_flight_limit",
            source,
            self._limits.rate.clock,
            "a2a.grpc.too_many_calls: refused a call from {source}, which has {cap} in progress",
            "a2a.grpc.too_many_calls: refused {count} more calls from {source} since the last line",
            cap=cap,
        )

    def too_slow(self, source: str, seconds: float) -> None:
        """Count (and log, throttled) a call ended for want of its request message."""
        self.refusals.throttled(
            "request_timeout",
            source,
            self._limits.rate.clock,
            "a2a.grpc.request_timeout: cancelled a call from {source} whose request message "
            "did not come within {seconds} s",
            "a2a.grpc.request_timeout: cancelled {count} more calls from {source} since the "
            "last line",
            seconds=seconds,
        )


__all__ = [
    "METHODS",
    "Metadata",
    "Refused",
    "SERVICE_NAME",
    "UNAUTHENTICATED",
    "GRPCCalls",
    "event_of",
    "internal_status",
    "message_of",
    "params_of",
    "refusal_status",
    "status_of",
]
