"""
The A2A gRPC binding (A2A §10): service C{lf.a2a.v1.A2AService} over
grpcio, answered by the same dispatcher, policy, rate limit and submitter
credentials as the public HTTP doors.

Threads. grpcio serves each call on a thread of its own pool. A handler
there reads the request message into the JSON-RPC params (ProtoJSON:
camelCase names, enums by name) and crosses into the reactor (a Deferred
bridge: C{callFromThread}, the answer handed back through a queue, as
C{blockingCallFromThread} does, but the wait also ends when the RPC does);
everything else runs on the reactor thread (L{GRPCCalls.call}: the
source, the rate limit, the credentials, the dispatcher, the policy, the
store). The handler turns what comes back into the response message, or
into a C{google.rpc.Status}, on its own thread again. The worker threads
are scheduled as batch work (Linux's C{SCHED_BATCH}), as the store's are.
A call whose peer goes away is answered on the reactor side all the same
(as an HTTP request whose connection closed) and its answer dropped, the
gRPC thread free at once; a stream whose peer goes away is cancelled.

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
                                             initial metadata
                            authorization   Bearer <token>   ([auth])
                            x-api-key       <key>            ([auth])
                            x-forwarded-for read from a trusted proxy only

    -> the response message; DeleteTaskPushNotificationConfig: Empty
    -> an A2A error: the status code of its table (A2A §5.4: TaskNotFound
       and an unknown method NOT_FOUND, validation INVALID_ARGUMENT, the
       other A2A errors FAILED_PRECONDITION, internal INTERNAL), the
       error's message, and in grpc-status-details-bin a google.rpc.Status
       whose details are a packed ErrorInfo (reason, domain
       a2a-protocol.org, metadata) and, for invalid params, a BadRequest
    -> refusals before the dispatcher, ErrorInfo in Beacon's domain:
       RESOURCE_EXHAUSTED RATE_LIMITED (+ RetryInfo) for a source over
       [limits] rate; UNAUTHENTICATED UNAUTHENTICATED without a good
       credential; a request message over [limits] max_body plus 1 KiB of
       framing, and a call beyond 8 per worker thread in progress, are
       RESOURCE_EXHAUSTED from grpcio itself, unread
    -> anything unexpected: INTERNAL "Internal error", logged, nothing
       more to the peer
"""

from __future__ import annotations

import ipaddress
import queue
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, cast

import grpc
from google.protobuf import json_format
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.message_factory import GetMessageClass
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.defer import Deferred, fail, maybeDeferred
from twisted.internet.interfaces import IAddress, IReactorFromThreads, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.bindings.admission import BEACON_DOMAIN
from beacon.bindings.admission import TransportLimits
from beacon.bindings.admission import Refusals
from beacon.bindings.grpc import _protojson as protojson
from beacon.bindings.grpc._threads import as_batch_work
from beacon.errors import StartupError
from beacon.proto import a2a_pb2
from beacon.protocol import (
    A2A_DOMAIN,
    A2AError,
    CallContext,
    Dispatcher,
    EventStream,
    InternalError,
    IStreamSink,
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
#: Put in a call's answer queue when its RPC ends before the answer.
_GONE = object()
#: Calls a listener holds in progress per worker thread, those waiting
#: for a worker included: a bound on what waits, beyond which grpcio
#: refuses a call RESOURCE_EXHAUSTED.
CALLS_PER_WORKER = 8
#: How many events a stream holds for a gRPC thread that has not sent them.
MAX_QUEUED_EVENTS = 1000
#: Seconds between two looks for calls that have waited too long for their
#: request message (so one is cancelled at most this late).
EXPIRY_INTERVAL = 1.0


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
    params: dict[str, Any] = json_format.MessageToDict(request)
    return params


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


def peer_address(peer: str) -> IAddress | None:
    """
    grpcio's C{context.peer()} (C{ipv4:1.2.3.4:5}, C{ipv6:[::1]:5},
    C{unix:/path}) as a Twisted address; None for anything else.
    """
    kind, _, rest = peer.partition(":")
    if kind == "unix":
        return UNIXAddress(rest or None)
    host, _, port = rest.rpartition(":")
    try:
        number = int(port)
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if kind == "ipv4" and address.version == 4:
        return IPv4Address("TCP", str(address), number)
    if kind == "ipv6":
        if address.version == 6 and address.ipv4_mapped is not None:
            return IPv4Address("TCP", str(address.ipv4_mapped), number)
        return IPv6Address("TCP", str(address), number)
    return None


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
    The reactor side of the gRPC binding: one call, from its method, params,
    metadata and peer, to the dispatcher's answer. Runs on the reactor
    thread only.

    @ivar refusals: The refusals made here, by reason (the metrics' door
        C{grpc}).
    @ivar in_flight: Calls in progress (crossed into the reactor, not yet
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
            resolver and credentials are shared (the body cap is grpcio's
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

    @property
    def open_connections(self) -> int:
        """For the metrics' door: the calls in progress (grpcio hides its connections)."""
        return self.in_flight

    def source_of(self, peer: str, metadata: Metadata) -> str:
        """The caller's source: its address (a trusted proxy's x-forwarded-for)."""
        address = peer_address(peer)
        if address is None:
            return "unknown"
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
        self, method: str, params: Any, metadata: Metadata, peer: str, source: str | None = None
    ) -> Deferred[tuple[CallContext, Any]]:
        """
        Run one call: the rate limit, the credentials, then the dispatcher.

        @param source: The caller's source, when its admission has resolved
            it already (else from C{peer} and C{metadata}).

        @return: A Deferred firing with the call's context and the result
            (an L{EventStream} for a streaming method), or failing with an
            L{A2AError} or a L{Refused}.
        """
        if source is None:
            source = self.source_of(peer, metadata)
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
        context = self.context_of(source, metadata)
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
        C{[auth]} off). Any thread: it reads only the configuration.
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


@implementer(IStreamSink)
class _ThreadSink:
    """
    A stream's events handed from the reactor to the gRPC thread sending
    them, through a queue; at most L{MAX_QUEUED_EVENTS} wait.
    """

    def __init__(self, stream: EventStream) -> None:
        self.queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._stream = stream

    def event(self, result: Any) -> None:
        if self.queue.qsize() >= MAX_QUEUED_EVENTS:
            self.fail(InternalError("the stream's consumer fell too far behind"))
            self._stream.cancel()
            return
        self.queue.put(("event", result))

    def end(self) -> None:
        self.queue.put(("end", None))

    def fail(self, error: A2AError) -> None:
        self.queue.put(("fail", error))


class _Handlers:
    """
    The gRPC thread side: one handler per method of the service, and the
    door's admission before a worker waits for a request message.

    Every method is served as a stream of requests (grpcio calls the
    handler with the call's context at once, not once a message has
    come): the credential is checked from the metadata, the calls the
    source has in progress are counted against C{max_per_source}, and only
    then does the worker wait for the one request message, at most
    C{message_timeout} seconds (L{expire}, on the reactor, cancels a call
    that waits longer). Thread-safe: grpcio's workers share it.
    """

    def __init__(
        self,
        calls: GRPCCalls,
        reactor: IReactorFromThreads,
        clock: IReactorTime,
        *,
        max_per_source: int = 0,
        message_timeout: float | None = None,
    ) -> None:
        self._calls = calls
        self._reactor = reactor
        self._clock = clock
        self.max_per_source = max_per_source
        self.message_timeout = message_timeout
        self._lock = threading.Lock()
        #: Calls in progress, by source.
        self._held: dict[str, int] = {}
        #: The calls waiting for their request message: when each is due,
        #: its context and source.
        self._waiting: dict[object, tuple[float, grpc.ServicerContext, str]] = {}

    # Admission, on grpcio's worker threads.

    def _admit(self, context: grpc.ServicerContext) -> tuple[Metadata, str, str]:
        """
        Admit a call from its metadata and peer, before its request message
        is read: its credential, then the calls its source has in progress.
        Abort it (UNAUTHENTICATED, RESOURCE_EXHAUSTED) when refused.

        @return: Its metadata, peer and source (counted in progress until
            L{_release}).
        """
        metadata = tuple(context.invocation_metadata() or ())
        peer = context.peer()
        calls = self._calls
        source = calls.source_of(peer, metadata)
        if not calls.admits(metadata):
            self._reactor.callFromThread(calls.unauthenticated, source)
            context.abort_with_status(rpc_status.to_status(refusal_status(UNAUTHENTICATED)))
        cap = self.max_per_source
        with self._lock:
            held = self._held.get(source, 0)
            admitted = not cap or held < cap
            if admitted:
                self._held[source] = held + 1
        if not admitted:
            self._reactor.callFromThread(calls.too_many, source, cap)
            context.abort_with_status(
                rpc_status.to_status(
                    refusal_status(
                        Refused(
                            grpc.StatusCode.RESOURCE_EXHAUSTED,
                            "IN_FLIGHT_LIMIT",
                            f"{cap} calls from this source are in progress; wait for an answer",
                        )
                    )
                )
            )
        return metadata, peer, source

    def _release(self, source: str) -> None:
        """A call of C{source} is over."""
        with self._lock:
            held = self._held.get(source, 1) - 1
            if held > 0:
                self._held[source] = held
            else:
                self._held.pop(source, None)

    def _request(
        self, method: str, requests: Iterator[ProtoMessage], context: grpc.ServicerContext, source: str
    ) -> ProtoMessage:
        """
        The call's one request message, waited for at most
        C{message_timeout} seconds (then the call is cancelled, and the
        wait ends with grpcio's error).
        """
        timeout = self.message_timeout
        token = object()
        if timeout:
            with self._lock:
                self._waiting[token] = (self._clock.seconds() + timeout, context, source)
        try:
            return next(requests)
        except StopIteration:
            # As grpcio answers a unary call without a message.
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED, f'"{method}" requires exactly one request message.'
            )
            raise AssertionError("abort returns only by raising")  # pragma: no cover
        finally:
            if timeout:
                with self._lock:
                    self._waiting.pop(token, None)

    def expire(self) -> None:
        """
        On the reactor: cancel each call that has waited for its request
        message longer than C{message_timeout} (its worker is free again).
        """
        now = self._clock.seconds()
        with self._lock:
            late = [
                (token, context, source)
                for token, (due, context, source) in self._waiting.items()
                if due <= now
            ]
            for token, _, _ in late:
                del self._waiting[token]
        for _, context, source in late:
            context.cancel()
            self._calls.too_slow(source, self.message_timeout or 0.0)

    @property
    def waiting(self) -> int:
        """How many calls wait for their request message."""
        with self._lock:
            return len(self._waiting)

    # The call, once admitted.

    def _cross(
        self,
        method: str,
        request: ProtoMessage,
        context: grpc.ServicerContext,
        metadata: Metadata,
        peer: str,
        source: str,
    ) -> tuple[CallContext, Any]:
        """
        Run the call on the reactor and wait for its answer (a Deferred
        bridge: the wait ends too when the RPC ends first, its peer gone or
        the server stopped past its grace, so no gRPC thread is held by a
        call nobody waits for). Abort the RPC with its status when it is
        refused or fails.
        """
        answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        try:
            params = params_of(request)
        except Exception:
            log.failure("a2a.grpc.internal_error: {method}'s request is unreadable", method=method)
            context.abort_with_status(rpc_status.to_status(internal_status()))

        def run() -> None:
            maybeDeferred(self._calls.call, method, params, metadata, peer, source).addBoth(answers.put)

        if not context.add_callback(lambda: answers.put(_GONE)):
            answers.put(_GONE)
        self._reactor.callFromThread(run)
        answer = answers.get()
        if answer is _GONE:
            context.abort(grpc.StatusCode.CANCELLED, "the call ended before its answer")
        if not isinstance(answer, Failure):
            return cast(tuple[CallContext, Any], answer)
        error = answer.value
        if isinstance(error, A2AError):
            status = status_of(error)
        elif isinstance(error, Refused):
            status = refusal_status(error)
        else:
            log.failure("a2a.grpc.internal_error: {method} failed", answer, method=method)
            status = internal_status()
        context.abort_with_status(rpc_status.to_status(status))
        raise AssertionError("abort_with_status returns only by raising")  # pragma: no cover

    def _echo(self, call: CallContext, context: grpc.ServicerContext) -> None:
        if call.extensions:
            context.send_initial_metadata(
                (("a2a-extensions", ", ".join(sorted(call.extensions))),)
            )

    def unary(
        self, method: str
    ) -> Callable[[Iterator[ProtoMessage], grpc.ServicerContext], ProtoMessage]:
        def handle(requests: Iterator[ProtoMessage], context: grpc.ServicerContext) -> ProtoMessage:
            metadata, peer, source = self._admit(context)
            try:
                request = self._request(method, requests, context, source)
                call, result = self._cross(method, request, context, metadata, peer, source)
            finally:
                self._release(source)
            try:
                response = message_of(method, result)
            except Exception:
                log.failure(
                    "a2a.grpc.internal_error: {method}'s answer is not its message",
                    method=method,
                )
                context.abort_with_status(rpc_status.to_status(internal_status()))
            self._echo(call, context)
            return response

        return handle

    def streaming(
        self, method: str
    ) -> Callable[[Iterator[ProtoMessage], grpc.ServicerContext], Iterator[ProtoMessage]]:
        def handle(
            requests: Iterator[ProtoMessage], context: grpc.ServicerContext
        ) -> Iterator[ProtoMessage]:
            metadata, peer, source = self._admit(context)
            try:
                request = self._request(method, requests, context, source)
                call, result = self._cross(method, request, context, metadata, peer, source)
                self._echo(call, context)
                if not isinstance(result, EventStream):
                    # Not a stream (a policy's plain answer): one event of it.
                    if result is not None:
                        yield event_of(result)
                    return
                yield from self._events(method, result, context)
            finally:
                self._release(source)

        return handle

    def _events(
        self, method: str, result: EventStream, context: grpc.ServicerContext
    ) -> Iterator[ProtoMessage]:
        """A stream's events, as the reactor hands them over, until it ends."""
        sink = _ThreadSink(result)
        self._reactor.callFromThread(result.attach, sink)
        if not context.add_callback(lambda: self._reactor.callFromThread(_cancel, result, sink)):
            # The RPC ended already: its peer is gone.
            self._reactor.callFromThread(_cancel, result, sink)
        while True:
            kind, value = sink.queue.get()
            if kind == "event":
                try:
                    event = event_of(value)
                except Exception:
                    log.failure(
                        "a2a.grpc.internal_error: {method}'s event is not a StreamResponse",
                        method=method,
                    )
                    self._reactor.callFromThread(result.cancel)
                    context.abort_with_status(rpc_status.to_status(internal_status()))
                yield event
            elif kind == "fail":
                context.abort_with_status(rpc_status.to_status(status_of(value)))
            else:
                return

    def generic(self) -> grpc.GenericRpcHandler:
        """The service's handlers, for C{grpc.Server.add_generic_rpc_handlers}."""
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for name, (request_class, response_class, streaming) in METHODS.items():
            if streaming:
                handlers[name] = grpc.stream_stream_rpc_method_handler(
                    self.streaming(name),
                    request_deserializer=request_class.FromString,
                    response_serializer=response_class.SerializeToString,
                )
            else:
                handlers[name] = grpc.stream_unary_rpc_method_handler(
                    self.unary(name),
                    request_deserializer=request_class.FromString,
                    response_serializer=response_class.SerializeToString,
                )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _cancel(stream: EventStream, sink: _ThreadSink) -> None:
    """The peer went away (or the stream ended): let the producer go."""
    if not stream.finished:
        stream.cancel()
        sink.end()


def connection_options(
    *,
    idle_timeout: float | None,
    max_connection_age: float | None,
    keepalive: float | None,
    grace: float,
) -> list[tuple[str, int]]:
    """
    grpcio's channel arguments for a listener's HTTP/2 connections: how long
    one without calls is kept, how long any is kept at most (then GOAWAY,
    and C{grace} for its calls), and the keepalive pings that find a peer
    gone (unanswered for L{KEEPALIVE_TIMEOUT} s: closed). A peer's own
    pings keep grpcio's defaults (at most one in 5 minutes without calls;
    more are a strike, two strikes a GOAWAY).
    """

    def ms(seconds: float) -> int:
        return max(1, int(seconds * 1000))

    options: list[tuple[str, int]] = []
    if idle_timeout:
        options.append(("grpc.max_connection_idle_ms", ms(idle_timeout)))
    if max_connection_age:
        options.append(("grpc.max_connection_age_ms", ms(max_connection_age)))
        options.append(("grpc.max_connection_age_grace_ms", ms(grace)))
    if keepalive:
        options.append(("grpc.keepalive_time_ms", ms(keepalive)))
        options.append(("grpc.keepalive_timeout_ms", ms(KEEPALIVE_TIMEOUT)))
    return options


#: Seconds a keepalive ping may go unanswered before the connection is closed.
KEEPALIVE_TIMEOUT = 20.0


def _bound_url(address: str, port: int) -> str:
    """The C{host:port} a listener configured as C{address} is reached at."""
    host = address.rpartition(":")[0]
    return f"{host}:{port}"


class GRPCServer:
    """
    A grpcio server for one L{GRPCCalls}: bound and started by L{start},
    stopped gracefully by L{stop}.

    @ivar urls: The C{host:port} of each listener, once bound.
    """

    def __init__(
        self,
        calls: GRPCCalls,
        reactor: IReactorFromThreads,
        listen: Sequence[str],
        *,
        max_receive: int,
        workers: int = 32,
        max_calls: int | None = None,
        max_calls_per_source: int = 16,
        message_timeout: float | None = 30.0,
        idle_timeout: float | None = 60.0,
        max_connection_age: float | None = 3600.0,
        keepalive: float | None = 60.0,
        grace: float = 5.0,
        key_pem: bytes = b"",
        certificate_pem: bytes = b"",
        clock: IReactorTime | None = None,
    ) -> None:
        """
        @param listen: gRPC addresses, C{host:port} (port 0: any free one).
        @param max_receive: The largest request message, in bytes.
        @param workers: grpcio's thread pool size.
        @param max_calls: Calls in progress at once, those waiting for a
            worker included (grpcio refuses more, RESOURCE_EXHAUSTED);
            by default L{CALLS_PER_WORKER} per worker.
        @param max_calls_per_source: Calls one source may have in progress
            (RESOURCE_EXHAUSTED beyond); 0: no cap.
        @param message_timeout: Seconds a call may wait for its request
            message before it is cancelled; None: no limit.
        @param idle_timeout: Seconds a connection without calls is kept
            (then grpcio sends GOAWAY); None: no limit.
        @param max_connection_age: Seconds a connection is kept at most
            (then GOAWAY, and C{grace} seconds for its calls to end); None:
            no limit.
        @param keepalive: Seconds between the pings grpcio sends on a
            connection that is silent, to find a peer that is gone (one
            unanswered for 20 s closes it); None: no pings.
        @param grace: Seconds in-flight calls get at L{stop} (and after a
            connection's GOAWAY at its age).
        @param key_pem: With C{certificate_pem}: every listener speaks TLS.
        @param clock: Times the wait for request messages (the reactor).
        """
        self._calls = calls
        self._reactor = reactor
        self._clock: IReactorTime = clock if clock is not None else cast(IReactorTime, reactor)
        self._listen = tuple(listen)
        self._max_receive = max_receive
        self._workers = workers
        self._max_calls = max_calls if max_calls is not None else workers * CALLS_PER_WORKER
        self._grace = grace
        self._key = key_pem
        self._certificate = certificate_pem
        self._handlers = _Handlers(
            calls,
            reactor,
            self._clock,
            max_per_source=max_calls_per_source,
            message_timeout=message_timeout,
        )
        self._options = connection_options(
            idle_timeout=idle_timeout,
            max_connection_age=max_connection_age,
            keepalive=keepalive,
            grace=grace,
        )
        self._expiry: LoopingCall | None = None
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.urls: list[str] = []

    @property
    def waiting(self) -> int:
        """How many calls wait for their request message."""
        return self._handlers.waiting

    @property
    def max_calls_per_source(self) -> int:
        """Calls one source may have in progress (0: no cap)."""
        return self._handlers.max_per_source

    @property
    def message_timeout(self) -> float | None:
        """Seconds a call may wait for its request message."""
        return self._handlers.message_timeout

    @property
    def options(self) -> list[tuple[str, int]]:
        """The listeners' HTTP/2 limits, as grpcio's channel arguments."""
        return list(self._options)

    @property
    def tls(self) -> bool:
        """Whether the listeners speak TLS."""
        return bool(self._key)

    def start(self) -> None:
        """
        Bind every listener, then start serving; all or nothing.

        @raise StartupError: A listener cannot bind.
        """
        executor = ThreadPoolExecutor(
            self._workers, thread_name_prefix="beacon-grpc", initializer=as_batch_work
        )
        server = grpc.server(
            executor,
            maximum_concurrent_rpcs=self._max_calls,
            handlers=[self._handlers.generic()],
            options=[
                ("grpc.max_receive_message_length", self._max_receive),
                # One Beacon per port: a second bind fails, as a TCP listen does.
                ("grpc.so_reuseport", 0),
                *self._options,
            ],
        )
        urls = []
        for address in self._listen:
            try:
                if self._key:
                    credentials = grpc.ssl_server_credentials(
                        [(self._key, self._certificate)]
                    )
                    port = server.add_secure_port(address, credentials)
                else:
                    port = server.add_insecure_port(address)
            except RuntimeError:
                port = 0
            if not port:
                server.stop(None)
                executor.shutdown(wait=False)
                raise StartupError(
                    f"[grpc] listen {address}: cannot listen there (the address is in use,"
                    " or not this host's)"
                )
            urls.append(_bound_url(address, port))
        server.start()
        self._server = server
        self._executor = executor
        self.urls = urls
        expiry = LoopingCall(self._handlers.expire)
        expiry.clock = self._clock
        expiry.start(EXPIRY_INTERVAL, now=False)
        self._expiry = expiry
        for url in urls:
            log.info(
                "a2a.grpc.serving: the gRPC binding at {url}{tls}",
                url=url,
                tls=" (TLS)" if self._key else "",
            )

    def stop(self) -> Deferred[None]:
        """
        Stop accepting calls; those in flight have C{grace} seconds to be
        answered before they are cancelled. grpcio's wait runs on a thread
        of its own, so the reactor keeps answering them meanwhile.

        @return: A Deferred that fires once the server has stopped.
        """
        server, self._server = self._server, None
        executor, self._executor = self._executor, None
        expiry, self._expiry = self._expiry, None
        if expiry is not None and expiry.running:
            expiry.stop()
        done: Deferred[None] = Deferred()
        if server is None or executor is None:
            done.callback(None)
            return done
        stopped = server.stop(self._grace)

        def wait() -> None:
            stopped.wait()
            # Every RPC has ended, so every handler's wait has (see _cross).
            executor.shutdown(wait=True)
            self._reactor.callFromThread(done.callback, None)

        threading.Thread(target=wait, name="beacon-grpc-stop", daemon=True).start()

        def stopped_now(_: None) -> None:
            # Log what the throttled refusal lines have counted.
            self._calls.refusals.stop_logging()
            log.info("a2a.grpc.stopped: the gRPC binding stopped")

        return done.addCallback(stopped_now)


__all__ = [
    "CALLS_PER_WORKER",
    "EXPIRY_INTERVAL",
    "UNAUTHENTICATED",
    "connection_options",
    "GRPCCalls",
    "GRPCServer",
    "METHODS",
    "Refused",
    "SERVICE_NAME",
    "event_of",
    "internal_status",
    "message_of",
    "params_of",
    "peer_address",
    "refusal_status",
    "status_of",
]
