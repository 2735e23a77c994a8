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
into a C{google.rpc.Status}, on its own thread again. A call whose peer
goes away is answered on the reactor side all the same (as an HTTP
request whose connection closed) and its answer dropped, the gRPC thread
free at once; a stream whose peer goes away is cancelled.

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
from twisted.internet.interfaces import IAddress, IReactorFromThreads
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.bindings._edge import BEACON_DOMAIN
from beacon.bindings._http import TransportLimits
from beacon.bindings.refusals import Refusals
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


class Refused(Exception):
    """
    A call refused before the dispatcher (rate limit, credentials): its
    status code, Beacon's reason and message, and when to retry.
    """

    def __init__(
        self, code: grpc.StatusCode, reason: str, message: str, retry_after: int = 0
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


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
    if result:
        json_format.ParseDict(result, response)
    return response


def event_of(result: Any) -> ProtoMessage:
    """One event of a stream (a ProtoJSON StreamResponse) as its message."""
    return json_format.ParseDict(result, a2a_pb2.StreamResponse())


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
        self, method: str, params: Any, metadata: Metadata, peer: str
    ) -> Deferred[tuple[CallContext, Any]]:
        """
        Run one call: the rate limit, the credentials, then the dispatcher.

        @return: A Deferred firing with the call's context and the result
            (an L{EventStream} for a streaming method), or failing with an
            L{A2AError} or a L{Refused}.
        """
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
        auth = limits.auth
        if auth.enabled:
            if not auth.admits(_joined(metadata, "authorization"), _joined(metadata, "x-api-key")):
                self.refusals.unauthenticated(source, limits.rate.clock, "grpc")
                return fail(
                    Refused(
                        grpc.StatusCode.UNAUTHENTICATED,
                        "UNAUTHENTICATED",
                        "this Beacon admits submitters with a credential only; see the "
                        "agent card's securitySchemes (metadata authorization: Bearer "
                        "<token>, or x-api-key)",
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
    """The gRPC thread side: one handler per method of the service."""

    def __init__(self, calls: GRPCCalls, reactor: IReactorFromThreads) -> None:
        self._calls = calls
        self._reactor = reactor

    def _cross(
        self, method: str, request: ProtoMessage, context: grpc.ServicerContext
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
        metadata = tuple(context.invocation_metadata() or ())
        peer = context.peer()

        def run() -> None:
            maybeDeferred(self._calls.call, method, params, metadata, peer).addBoth(answers.put)

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

    def unary(self, method: str) -> Callable[[ProtoMessage, grpc.ServicerContext], ProtoMessage]:
        def handle(request: ProtoMessage, context: grpc.ServicerContext) -> ProtoMessage:
            call, result = self._cross(method, request, context)
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
    ) -> Callable[[ProtoMessage, grpc.ServicerContext], Iterator[ProtoMessage]]:
        def handle(request: ProtoMessage, context: grpc.ServicerContext) -> Iterator[ProtoMessage]:
            call, result = self._cross(method, request, context)
            self._echo(call, context)
            if not isinstance(result, EventStream):
                # Not a stream (a policy's plain answer): one event of it.
                if result is not None:
                    yield event_of(result)
                return
            sink = _ThreadSink(result)
            self._reactor.callFromThread(result.attach, sink)
            if not context.add_callback(
                lambda: self._reactor.callFromThread(_cancel, result, sink)
            ):
                # The RPC ended already: its peer is gone.
                self._reactor.callFromThread(_cancel, result, sink)
            while True:
                kind, value = sink.queue.get()
                if kind == "event":
                    try:
                        event = event_of(value)
                    except Exception:
                        log.failure(
                            "a2a.grpc.internal_error: {method}'s event is not a"
                            " StreamResponse",
                            method=method,
                        )
                        self._reactor.callFromThread(result.cancel)
                        context.abort_with_status(rpc_status.to_status(internal_status()))
                    yield event
                elif kind == "fail":
                    context.abort_with_status(rpc_status.to_status(status_of(value)))
                else:
                    return

        return handle

    def generic(self) -> grpc.GenericRpcHandler:
        """The service's handlers, for C{grpc.Server.add_generic_rpc_handlers}."""
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for name, (request_class, response_class, streaming) in METHODS.items():
            if streaming:
                handlers[name] = grpc.unary_stream_rpc_method_handler(
                    self.streaming(name),
                    request_deserializer=request_class.FromString,
                    response_serializer=response_class.SerializeToString,
                )
            else:
                handlers[name] = grpc.unary_unary_rpc_method_handler(
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
        workers: int = 16,
        max_calls: int | None = None,
        grace: float = 5.0,
        key_pem: bytes = b"",
        certificate_pem: bytes = b"",
    ) -> None:
        """
        @param listen: gRPC addresses, C{host:port} (port 0: any free one).
        @param max_receive: The largest request message, in bytes.
        @param workers: grpcio's thread pool size.
        @param max_calls: Calls in progress at once, those waiting for a
            worker included (grpcio refuses more, RESOURCE_EXHAUSTED);
            by default L{CALLS_PER_WORKER} per worker.
        @param grace: Seconds in-flight calls get at L{stop}.
        @param key_pem: With C{certificate_pem}: every listener speaks TLS.
        """
        self._calls = calls
        self._reactor = reactor
        self._listen = tuple(listen)
        self._max_receive = max_receive
        self._workers = workers
        self._max_calls = max_calls if max_calls is not None else workers * CALLS_PER_WORKER
        self._grace = grace
        self._key = key_pem
        self._certificate = certificate_pem
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.urls: list[str] = []

    @property
    def tls(self) -> bool:
        """Whether the listeners speak TLS."""
        return bool(self._key)

    def start(self) -> None:
        """
        Bind every listener, then start serving; all or nothing.

        @raise StartupError: A listener cannot bind.
        """
        executor = ThreadPoolExecutor(self._workers, thread_name_prefix="beacon-grpc")
        server = grpc.server(
            executor,
            maximum_concurrent_rpcs=self._max_calls,
            handlers=[_Handlers(self._calls, self._reactor).generic()],
            options=[
                ("grpc.max_receive_message_length", self._max_receive),
                # One Beacon per port: a second bind fails, as a TCP listen does.
                ("grpc.so_reuseport", 0),
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
