"""
The gRPC door: gRPC's unary and server-streaming calls (the gRPC over
HTTP/2 protocol) on L{beacon.bindings.grpc._h2}'s streams, answered on the
reactor thread by L{GRPCCalls}, with no thread between the peer and the
policy.

A call, as it comes:

    1. its request headers: POST, C{content-type: application/grpc...},
       C{:path /lf.a2a.v1.A2AService/Method}; then its admission, before
       anything more is read: the credential (UNAUTHENTICATED), the calls
       in progress at this server (RESOURCE_EXHAUSTED) and from its source
       (RESOURCE_EXHAUSTED IN_FLIGHT_LIMIT);
    2. its one request message, within C{message_timeout} seconds of its
       headers (else the call is cancelled, C{a2a.grpc.request_timeout}),
       over C{max_receive} bytes refused from its length prefix, unread;
    3. the dispatcher's answer: the response message and C{grpc-status}
       0, or a status with its C{google.rpc.Status} in
       C{grpc-status-details-bin}; a stream's events, one message each.

A call whose peer resets it, or whose deadline (C{grpc-timeout}) passes,
is answered on the reactor side all the same, as an HTTP request whose
connection closed, and its answer dropped; it stops counting against its
source at once. Deadlines and every other wait are looked at by one sweep
a second (L{EXPIRY_INTERVAL}), which also pings silent connections
(C{keepalive}), closes idle ones (C{idle_timeout}) and ages them out
(C{max_connection_age}, then C{grace}).
"""

from __future__ import annotations

import base64
import re
import zlib
from collections.abc import Sequence
from typing import Any, Callable

from google.protobuf.message import DecodeError
from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.bindings.admission import Ledger
from beacon.bindings.grpc import _h2 as h2
from beacon.bindings.grpc._hpack import indexed, literal
from beacon.bindings.grpc._calls import (
    METHODS,
    SERVICE_NAME,
    UNAUTHENTICATED,
    GRPCCalls,
    Metadata,
    Refused,
    event_of,
    internal_status,
    message_of,
    params_of,
    refusal_status,
    status_of,
)
from beacon.protocol import A2AError, CallContext, EventStream, InternalError, IStreamSink

import grpc

log = Logger()

#: Calls a server holds in progress per unit of C{[grpc] workers}, those
#: waiting for their request message included: a bound on what waits.
CALLS_PER_WORKER = 8
#: Seconds between two sweeps (deadlines, message waits, keepalive, idle
#: and aged connections): each such limit is kept to within this.
EXPIRY_INTERVAL = 1.0
#: Seconds a keepalive ping may go unanswered before the connection is closed.
KEEPALIVE_TIMEOUT = 20.0
#: Seconds an answer may wait for the peer's window, when no message
#: timeout is set (else that timeout's).
DEFAULT_STALL = 30.0
#: Streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
MAX_STREAMS = 100
#: Header blocks read once and kept for the calls that send them again
#: (as a decoder remembers them), and sources kept per head: at most.
MAX_HEADS = 256
#: A stream's answers waiting for the peer's window, in bytes, beyond
#: which the stream is ended (its consumer fell too far behind).
MAX_PENDING = 1 << 20

_PREFIX = b"/" + SERVICE_NAME.encode("ascii") + b"/"
_TIMEOUT = re.compile(rb"([0-9]{1,8})([HMSmun])")
_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
#: Request headers that are not the call's metadata.
_TRANSPORT_HEADERS = frozenset(
    (b"content-type", b"te", b"grpc-timeout", b"grpc-encoding", b"grpc-accept-encoding")
)
#: The message encodings read (grpc-encoding): gzip, and deflate's zlib format.
_ENCODINGS = frozenset((b"identity", b"gzip", b"deflate"))
#: Headers HTTP/2 forbids (RFC 9113 §8.2.2).
_CONNECTION_HEADERS = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade")
)

_STATUS_200 = indexed(8)
_GRPC = literal(b"content-type", b"application/grpc")
#: The response headers of an answer.
RESPONSE_HEADERS = _STATUS_200 + _GRPC
#: The trailers of a call that went well.
TRAILERS_OK = literal(b"grpc-status", b"0")
_OK = grpc.StatusCode.OK.value[0]
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
_INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
_RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
_DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
_CANCELLED = grpc.StatusCode.CANCELLED.value[0]
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]
_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
#: Bytes a grpc-message may carry as they are (RFC 3986's unreserved and
#: printable ASCII but C{%}); any other is percent-encoded.
_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("%")}


def grpc_message(text: str) -> bytes:
    """C{text} as a C{grpc-message} value: UTF-8, percent-encoded (gRPC over HTTP/2)."""
    raw = text.encode("utf-8")
    if all(b in _PLAIN for b in raw):
        return raw
    return b"".join(bytes((b,)) if b in _PLAIN else b"%%%02X" % b for b in raw)


def status_trailers(code: int, message: str, details: bytes = b"") -> bytes:
    """The trailer fields of a call ended with C{code}."""
    block = literal(b"grpc-status", str(code).encode("ascii"))
    if message:
        block += literal(b"grpc-message", grpc_message(message))
    if details:
        block += literal(b"grpc-status-details-bin", base64.b64encode(details).rstrip(b"="))
    return block


def _status_block(status: Any) -> bytes:
    """A google.rpc.Status as trailer fields, its details included."""
    return status_trailers(status.code, status.message, status.SerializeToString())


def framed(message: bytes) -> bytes:
    """One gRPC message: uncompressed, its length, its bytes."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


class _Head:
    """
    What a call's request headers say, read once for every call whose
    header block is the same (see L{GRPCDoor.begin}).

    @ivar method: The method called.
    @ivar refusal: Why the call is refused from its headers alone: a gRPC
        status code (negative: the stream is reset PROTOCOL_ERROR), its
        message, the HTTP status and more trailer fields; None: it is not.
    @ivar timeout: Its C{grpc-timeout}, in seconds.
    @ivar encoding: Its C{grpc-encoding} when it compresses (C{gzip} or
        C{deflate}); None: identity.
    @ivar metadata: Its metadata: (key, value) pairs, keys lower case; the
        values of C{-bin} keys are bytes.
    @ivar admitted: Whether its credential is good, once asked.
    @ivar sources: The source of a call from each peer host, once asked.
    @ivar contexts: The context of a call from each source, once made (a
        context is never changed once made).
    """

    __slots__ = (
        "method", "refusal", "timeout", "encoding", "metadata", "admitted", "sources", "contexts"
    )

    def __init__(self) -> None:
        self.method = ""
        self.refusal: tuple[int, str, bytes, bytes] | None = None
        self.timeout: float | None = None
        self.encoding: bytes | None = None
        self.metadata: Metadata = ()
        self.admitted: bool | None = None
        self.sources: dict[str, str] = {}
        self.contexts: dict[str, CallContext] = {}


def _read_head(headers: Sequence[tuple[bytes, bytes]]) -> _Head:
    """A call's request headers, read (see L{_Head})."""
    head = _Head()
    method = path = content_type = timeout = encoding = None
    metadata: list[tuple[str, Any]] = []
    for name, value in headers:
        if name[:1] == b":":
            if name == b":path":
                path = value
            elif name == b":method":
                method = value
            continue
        if name in _TRANSPORT_HEADERS:
            if name == b"content-type":
                content_type = value
            elif name == b"grpc-timeout":
                timeout = value
            elif name == b"grpc-encoding":
                encoding = value
            continue
        if name in _CONNECTION_HEADERS or name.lower() != name:
            head.refusal = (-1, "", b"", b"")
            return head
        key = name.decode("latin-1")
        if key.endswith("-bin"):
            try:
                metadata.append((key, base64.b64decode(value + b"==")))
            except ValueError:
                continue
        else:
            metadata.append((key, value.decode("latin-1")))
    head.metadata = tuple(metadata)
    if method != b"POST":
        head.refusal = (_UNIMPLEMENTED, "gRPC calls are POST requests", b"405", b"")
    elif content_type is None or not content_type.startswith(b"application/grpc"):
        head.refusal = (_UNKNOWN, "gRPC calls are of content-type application/grpc", b"415", b"")
    else:
        called = path[len(_PREFIX) :].decode("latin-1") if path and path.startswith(_PREFIX) else ""
        if called not in METHODS:
            head.refusal = (
                _UNIMPLEMENTED,
                f"Method not found: {(path or b'').decode('latin-1')[:200]}",
                b"200",
                b"",
            )
        elif encoding is not None and encoding not in _ENCODINGS:
            head.refusal = (
                _UNIMPLEMENTED,
                "this server reads messages uncompressed, or compressed with gzip or deflate",
                b"200",
                literal(b"grpc-accept-encoding", b"identity, deflate, gzip"),
            )
        elif encoding is not None and encoding != b"identity":
            head.encoding = encoding
        head.method = called
    if timeout is not None:
        match = _TIMEOUT.fullmatch(timeout)
        if match is not None:
            head.timeout = int(match[1]) * _UNITS[match[2]]
    return head


class Call:
    """
    The door's state of one call (on its stream's C{call}).

    @ivar method: The method's name.
    @ivar source: Its source (counted against the source's cap until
        L{GRPCDoor._release}).
    @ivar context: Its context (source, version, extensions).
    @ivar encoding: How its message may be compressed (C{grpc-encoding}),
        None for identity.
    @ivar body: What has come of its request message, when it came in pieces.
    @ivar due: When its request message must have come by (0: no bound).
    @ivar deadline: When its answer is of no use any more (0: no deadline).
    @ivar held: Still counted in progress.
    @ivar events: Its stream of events, once one is attached.
    """

    __slots__ = (
        "method",
        "source",
        "context",
        "encoding",
        "body",
        "due",
        "deadline",
        "held",
        "events",
    )

    def __init__(
        self, method: str, source: str, context: CallContext, encoding: bytes | None
    ) -> None:
        self.method = method
        self.source = source
        self.context = context
        self.encoding = encoding
        self.body: bytearray | None = None
        self.due = 0.0
        self.deadline = 0.0
        self.held = True
        self.events: EventStream | None = None


@implementer(IStreamSink)
class _Sink:
    """A stream's events, each sent as it comes (the peer's window allowing)."""

    def __init__(
        self, connection: h2.H2Connection, stream: h2.Stream, events: EventStream, method: str
    ) -> None:
        self._connection = connection
        self._stream = stream
        self._events = events
        self._method = method

    def event(self, result: Any) -> None:
        stream = self._stream
        if stream.closed:
            return
        try:
            message = event_of(result).SerializeToString()
        except Exception:
            log.failure(
                "a2a.grpc.internal_error: {method}'s event is not a StreamResponse",
                method=self._method,
            )
            self._events.cancel()
            self._connection.send(stream, None, b"", _status_block(internal_status()))
            return
        if stream.pending_bytes > MAX_PENDING:
            self._events.cancel()
            self.fail(InternalError("the stream's consumer fell too far behind"))
            return
        self._connection.send(stream, None, framed(message), None)

    def end(self) -> None:
        self._connection.send(self._stream, None, b"", TRAILERS_OK)

    def fail(self, error: A2AError) -> None:
        self._connection.send(self._stream, None, b"", _status_block(status_of(error)))


class GRPCDoor:
    """
    The streams of every connection of one gRPC server (L{h2.IStreams}):
    the calls' admission, their request messages, their answers, and the
    sweep.

    @ivar connections: The open connections.
    @ivar in_progress: Calls in progress at this server.
    @ivar pings: Keepalive pings sent so far.
    """

    def __init__(
        self,
        calls: GRPCCalls,
        clock: IReactorTime,
        *,
        max_receive: int,
        max_calls: int,
        max_calls_per_source: int,
        message_timeout: float | None,
        idle_timeout: float | None,
        max_connection_age: float | None,
        keepalive: float | None,
        grace: float,
        max_connections: int = 0,
        max_connections_per_source: int = 0,
    ) -> None:
        self._calls = calls
        self._clock = clock
        self.max_receive = max_receive
        self.max_calls = max_calls
        self.max_per_source = max_calls_per_source
        self.message_timeout = message_timeout
        self.idle_timeout = idle_timeout
        self.max_connection_age = max_connection_age
        self.keepalive = keepalive
        self._stall = message_timeout or DEFAULT_STALL
        self._grace = grace
        self.max_connections = max_connections
        self.max_connections_per_source = max_connections_per_source
        self.connections: dict[h2.H2Connection, _Life] = {}
        self._by_source: dict[str, int] = {}
        self.in_progress = 0
        self._held: dict[str, int] = {}
        #: Calls waiting for their request message or their answer within a
        #: deadline: their stream and connection.
        self._timed: dict[h2.Stream, h2.H2Connection] = {}
        #: Heads read, by the identity of the remembered header block.
        self._heads: dict[int, tuple[Sequence[tuple[bytes, bytes]], _Head]] = {}
        self.pings = 0
        self.stopping = False
        #: Called once every connection has closed after L{stop}.
        self.all_closed: Callable[[], None] = lambda: None

    # Connections.

    def opened(self, connection: h2.H2Connection) -> bool:
        peer = connection.peer
        source = str(getattr(peer, "host", "unix"))
        held = self._by_source.get(source, 0)
        if (
            self.stopping
            or (self.max_connections and len(self.connections) >= self.max_connections)
            or (self.max_connections_per_source and held >= self.max_connections_per_source)
        ):
            self._calls.refusals.throttled(
                "too_many_connections",
                source,
                self._calls.clock,
                "a2a.grpc.connection_refused: {source} holds {held} connections (caps "
                "{per_source} a source, {total} in all)",
                "a2a.grpc.connection_refused: refused {count} more connections from {source} "
                "since the last line",
                held=held,
                per_source=self.max_connections_per_source,
                total=self.max_connections,
            )
            return False
        self._by_source[source] = held + 1
        self.connections[connection] = _Life(self._clock.seconds(), source, peer)
        self._calls.connections = len(self.connections)
        return True

    def closed(self, connection: h2.H2Connection) -> None:
        life = self.connections.pop(connection, None)
        if life is None:
            return
        self._calls.connections = len(self.connections)
        left = self._by_source[life.source] - 1
        if left:
            self._by_source[life.source] = left
        else:
            del self._by_source[life.source]
        if self.stopping and not self.connections:
            self.all_closed()

    def broken(self, connection: h2.H2Connection, code: int, why: str) -> None:
        """
        Count (as C{invalid}, as HTTP's framing errors are) and log,
        throttled per source, a connection ended for breaking HTTP/2.
        """
        life = self.connections.get(connection)
        self._calls.refusals.throttled(
            "invalid",
            life.source if life is not None else "unknown",
            self._calls.clock,
            "a2a.grpc.protocol_error: ended a connection from {source}: {why} "
            "(HTTP/2 error {code})",
            "a2a.grpc.protocol_error: ended {count} more connections from {source} since "
            "the last line",
            why=why,
            code=code,
        )

    # Streams.

    def begin(self, connection: h2.H2Connection, stream: h2.Stream, too_large: bool) -> None:
        if too_large:
            self._refuse(
                connection,
                stream,
                _RESOURCE_EXHAUSTED,
                f"the call's metadata is over {h2.MAX_HEADER_LIST} bytes",
            )
            return
        headers = stream.headers
        head: _Head | None = None
        if type(headers) is tuple:
            # A block the decoder remembered: the same fields, the same head.
            known = self._heads.get(id(headers))
            if known is not None and known[0] is headers:
                head = known[1]
        if head is None:
            head = _read_head(headers)
            if type(headers) is tuple:
                if len(self._heads) >= MAX_HEADS:
                    self._heads.clear()
                self._heads[id(headers)] = (headers, head)
        if head.refusal is not None:
            code, message, http_status, extra = head.refusal
            if code < 0:
                connection.reset(stream, h2.PROTOCOL_ERROR)
            else:
                self._refuse(connection, stream, code, message, http_status, extra)
            return
        called = head.method
        metadata = head.metadata
        timeout = head.timeout
        calls = self._calls
        peer = connection.peer
        host = getattr(peer, "host", None)
        source = head.sources.get(host) if host is not None else None
        if source is None:
            source = calls.source_of(peer, metadata)
            if host is not None:
                if len(head.sources) >= MAX_HEADS:
                    head.sources.clear()
                head.sources[host] = source
        if head.admitted is None:
            head.admitted = calls.admits(metadata)
        if not head.admitted:
            calls.unauthenticated(source)
            self._refusal(connection, stream, UNAUTHENTICATED)
            return
        if self.in_progress >= self.max_calls:
            calls.refusals["in_flight_limit"] += 1
            self._refuse(
                connection, stream, _RESOURCE_EXHAUSTED,
                f"this server has {self.max_calls} calls in progress; try again later",
            )
            return
        cap = self.max_per_source
        held = self._held.get(source, 0)
        if cap and held >= cap:
            calls.too_many(source, cap)
            self._refusal(
                connection,
                stream,
                Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "IN_FLIGHT_LIMIT",
                    f"{cap} calls from this source are in progress; wait for an answer",
                ),
            )
            return
        self._held[source] = held + 1
        self.in_progress += 1
        wait = self.message_timeout
        context = head.contexts.get(source)
        if context is None:
            if len(head.contexts) >= MAX_HEADS:
                head.contexts.clear()
            context = head.contexts[source] = calls.context_of(source, metadata)
        call = Call(called, source, context, head.encoding)
        if wait or timeout is not None:
            now = self._clock.seconds()
            if wait:
                call.due = now + wait
            if timeout is not None:
                call.deadline = now + timeout
        stream.call = call
        if call.due or call.deadline:
            self._timed[stream] = connection

    def data(self, connection: h2.H2Connection, stream: h2.Stream, data: bytes, end: bool) -> None:
        call: Call | None = stream.call
        if call is None:
            return
        body = call.body
        if end and body is None and len(data) >= 5 and len(data) == 5 + int.from_bytes(data[1:5], "big"):
            # The whole message in one frame, as gRPC clients send a small one.
            if data[0] and not self._compressed(connection, stream, call, data[0]):
                return
            if len(data) - 5 > self.max_receive:
                self._calls.refusals["too_large"] += 1
                self._refuse(
                    connection, stream, _RESOURCE_EXHAUSTED,
                    f"Received message larger than max ({len(data) - 5} vs. {self.max_receive})",
                )
                return
            self._dispatch(connection, stream, call, data[5:], data[0] == 1)
            return
        if data:
            if body is None:
                body = call.body = bytearray()
            body += data
            if len(body) >= 5:
                length = int.from_bytes(body[1:5], "big")
                if body[0] and not self._compressed(connection, stream, call, body[0]):
                    return
                if length > self.max_receive:
                    self._calls.refusals["too_large"] += 1
                    self._refuse(
                        connection, stream, _RESOURCE_EXHAUSTED,
                        # grpcio's words, which gRPC clients know.
                        f"Received message larger than max ({length} vs. {self.max_receive})",
                    )
                    return
                if len(body) > 5 + length:
                    self._one_message(connection, stream, call)
                    return
        if not end:
            return
        if body is None or len(body) < 5 or len(body) != 5 + int.from_bytes(body[1:5], "big"):
            self._one_message(connection, stream, call)
            return
        self._dispatch(connection, stream, call, bytes(body[5:]), body[0] == 1)

    def _compressed(
        self, connection: h2.H2Connection, stream: h2.Stream, call: Call, flag: int
    ) -> bool:
        """
        Whether a message whose flag byte is C{flag} (not 0) may be read:
        compressed (1) under the call's C{grpc-encoding}. Else it is
        refused INTERNAL, as gRPC over HTTP/2 says.
        """
        if flag == 1 and call.encoding is not None:
            return True
        self._refuse(
            connection,
            stream,
            _INTERNAL,
            "a compressed message without grpc-encoding"
            if flag == 1
            else f"a message whose flag byte is {flag} (0 or 1)",
        )
        return False

    def _inflate(
        self, connection: h2.H2Connection, stream: h2.Stream, call: Call, message: bytes
    ) -> bytes | None:
        """
        C{message} inflated (gzip, or deflate's zlib format), at most
        C{max_receive} bytes of it: a larger one is refused from what it
        inflates to, unread beyond, as one that came that large.
        """
        inflater = zlib.decompressobj(31 if call.encoding == b"gzip" else 15)
        encoding = (call.encoding or b"").decode("ascii")
        try:
            inflated = inflater.decompress(message, self.max_receive + 1)
        except zlib.error:
            inflated = None
        if inflated is not None and len(inflated) > self.max_receive:
            self._calls.refusals["too_large"] += 1
            self._refuse(
                connection, stream, _RESOURCE_EXHAUSTED,
                f"Received message larger than max (over {self.max_receive} inflated)",
            )
            return None
        if inflated is None or not inflater.eof or inflater.unused_data:
            self._refuse(
                connection, stream, _INTERNAL, f"the message is not one whole {encoding} stream"
            )
            return None
        return inflated

    def _dispatch(
        self,
        connection: h2.H2Connection,
        stream: h2.Stream,
        call: Call,
        message: bytes,
        compressed: bool = False,
    ) -> None:
        """The call's request message has come whole: the dispatcher's turn."""
        if compressed:
            inflated = self._inflate(connection, stream, call, message)
            if inflated is None:
                return
            message = inflated
        if call.due:
            call.due = 0.0
            if not call.deadline:
                self._timed.pop(stream, None)
        connection.give_back(stream.consumed)
        stream.consumed = 0
        request_class = METHODS[call.method][0]
        try:
            request = request_class.FromString(message)
            params = params_of(request)
        except DecodeError:
            self._refuse(
                connection, stream, _INVALID_ARGUMENT,
                f"the request message is not a {request_class.DESCRIPTOR.full_name}",
            )
            return
        except Exception:
            log.failure("a2a.grpc.internal_error: {method}'s request is unreadable", method=call.method)
            self._refusal_status(connection, stream, internal_status())
            return
        call.body = None
        self._calls.call(call.method, params, call.source, call.context).addCallbacks(
            self._answered,
            self._failed,
            callbackArgs=(connection, stream),
            errbackArgs=(connection, stream),
        )

    def _one_message(self, connection: h2.H2Connection, stream: h2.Stream, call: Call) -> None:
        self._refuse(
            connection, stream, _UNIMPLEMENTED,
            f'"{call.method}" requires exactly one request message.',
        )

    def _answered(
        self, answer: tuple[Any, Any], connection: h2.H2Connection, stream: h2.Stream
    ) -> None:
        context, result = answer
        call: Call = stream.call
        if stream.closed:
            if isinstance(result, EventStream) and not result.finished:
                result.cancel()
            return
        headers = RESPONSE_HEADERS
        if context.extensions:
            headers += literal(
                b"a2a-extensions", ", ".join(sorted(context.extensions)).encode("latin-1")
            )
        if METHODS[call.method][2]:
            if not isinstance(result, EventStream):
                # Not a stream (a policy's plain answer): one event of it.
                data = framed(event_of(result).SerializeToString()) if result is not None else b""
                self._release(stream)
                connection.send(stream, headers, data, TRAILERS_OK)
                return
            call.events = result
            connection.send(stream, headers, b"", None)
            result.attach(_Sink(connection, stream, result, call.method))
            return
        try:
            message = message_of(call.method, result).SerializeToString()
        except Exception:
            log.failure(
                "a2a.grpc.internal_error: {method}'s answer is not its message", method=call.method
            )
            self._refusal_status(connection, stream, internal_status())
            return
        self._release(stream)
        connection.send(stream, headers, framed(message), TRAILERS_OK)

    def _failed(self, reason: Failure, connection: h2.H2Connection, stream: h2.Stream) -> None:
        error = reason.value
        if isinstance(error, A2AError):
            status = status_of(error)
        elif isinstance(error, Refused):
            status = refusal_status(error)
        else:
            log.failure(
                "a2a.grpc.internal_error: {method} failed", reason, method=stream.call.method
            )
            status = internal_status()
        self._refusal_status(connection, stream, status)

    def ended(self, connection: h2.H2Connection, stream: h2.Stream) -> None:
        call: Call | None = stream.call
        if call is None:
            return
        self._timed.pop(stream, None)
        self._release(stream)
        events = call.events
        if events is not None and not events.finished:
            events.cancel()

    def _release(self, stream: h2.Stream) -> None:
        """The call on C{stream} no longer counts in progress."""
        call: Call | None = stream.call
        if call is None or not call.held:
            return
        call.held = False
        self.in_progress -= 1
        held = self._held[call.source] - 1
        if held:
            self._held[call.source] = held
        else:
            del self._held[call.source]

    # Refusals and errors: trailers only, or trailers after the headers.

    def _refuse(
        self,
        connection: h2.H2Connection,
        stream: h2.Stream,
        code: int,
        message: str,
        http_status: bytes = b"200",
        extra: bytes = b"",
    ) -> None:
        self._end(connection, stream, status_trailers(code, message) + extra, http_status)

    def _refusal(self, connection: h2.H2Connection, stream: h2.Stream, refused: Refused) -> None:
        self._refusal_status(connection, stream, refusal_status(refused))

    def _refusal_status(self, connection: h2.H2Connection, stream: h2.Stream, status: Any) -> None:
        self._end(connection, stream, _status_block(status))

    def _end(
        self, connection: h2.H2Connection, stream: h2.Stream, trailers: bytes, http_status: bytes = b"200"
    ) -> None:
        self._release(stream)
        if stream.headers_sent:
            connection.send(stream, None, b"", trailers)
            return
        headers = _STATUS_200 if http_status == b"200" else literal(b":status", http_status)
        connection.send(stream, headers + _GRPC, b"", trailers)

    # The sweep.

    def sweep(self) -> None:
        """
        Once a second: calls past their message wait or their deadline,
        then each connection's keepalive, idleness and age.
        """
        now = self._clock.seconds()
        if self._timed:
            for stream, connection in list(self._timed.items()):
                call: Call = stream.call
                if call.due and call.due <= now:
                    self._timed.pop(stream, None)
                    self._calls.too_slow(call.source, self.message_timeout or 0.0)
                    connection.reset(stream, h2.CANCEL)
                elif call.deadline and call.deadline <= now:
                    self._timed.pop(stream, None)
                    self._refuse(connection, stream, _DEADLINE_EXCEEDED, "Deadline Exceeded")
        for connection, life in list(self.connections.items()):
            connection.control = 0
            if connection.heard:
                connection.heard = False
                life.heard = now
            if connection.ping_pending is not None:
                if now - life.pinged >= KEEPALIVE_TIMEOUT:
                    connection.abort()
                    continue
            elif self.keepalive and now - life.heard >= self.keepalive:
                life.pinged = now
                self.pings += 1
                connection.ping(self.pings.to_bytes(8, "big"))
            if connection.began:
                # Calls begun and answered between two sweeps count too.
                connection.began = False
                life.busy = now
            if connection.streams:
                life.busy = now
                if connection.blocked:
                    # Answers waiting for a window the peer does not open:
                    # given up after the message wait's bound.
                    for stream in list(connection.blocked.values()):
                        if not stream.stalled:
                            stream.stalled = now
                        elif now - stream.stalled >= self._stall:
                            connection.reset(stream, h2.CANCEL)
            elif self.idle_timeout and now - life.busy >= self.idle_timeout:
                connection.goaway(h2.NO_ERROR)
                continue
            if life.draining is None:
                if self.max_connection_age and now - life.born >= self.max_connection_age:
                    life.draining = now
                    connection.goaway(h2.NO_ERROR)
            elif now - life.draining >= self._grace:
                connection.abort()

    def stop(self) -> None:
        """Going away: every connection is sent GOAWAY (its open calls still answered)."""
        self.stopping = True
        for connection in list(self.connections):
            connection.goaway(h2.NO_ERROR)

    def abort(self) -> None:
        """Past the grace: every connection is closed now."""
        for connection in list(self.connections):
            connection.abort()

    @property
    def waiting(self) -> int:
        """How many calls wait for their request message."""
        return sum(1 for stream in self._timed if stream.call.due)


class _Life:
    """A connection's times: opened, last heard from, last busy, last pinged, draining since."""

    __slots__ = ("born", "heard", "busy", "pinged", "draining", "source", "peer")

    def __init__(self, now: float, source: str, peer: IAddress) -> None:
        self.born = now
        self.heard = now
        self.busy = now
        self.pinged = now
        self.draining: float | None = None
        self.source = source
        self.peer = peer


class _Factory(Factory):
    """A listener's HTTP/2 connections, each with its turns."""

    def __init__(self, door: GRPCDoor, clock: IReactorTime, ledger: Ledger, stream_window: int) -> None:
        self._door = door
        self._clock = clock
        self._ledger = ledger
        self._window = stream_window

    def buildProtocol(self, addr: IAddress | None) -> h2.H2Connection:
        return h2.H2Connection(
            self._door,
            max_streams=MAX_STREAMS,
            stream_window=self._window,
            clock=self._clock,
            ledger=self._ledger,
        )
