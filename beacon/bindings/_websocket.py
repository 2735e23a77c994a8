"""
The A2A WebSocket binding (seed 001, C{https://a2a-rust.com/bindings/websocket/v1})
on autobahn's Twisted WebSocket server: the JSON-RPC binding's messages, one
JSON-RPC object per text frame, many calls in progress on one connection.

Wire contract::

    Upgrade (RFC 6455, version 13 only, no subprotocol, no compression)
      on the public HTTP listeners:  GET /a2a/ws        (ws:// or wss://)
      on a --ws listener:            GET /              (any path)
      -> 101, or a refusal with the HTTP+JSON error body (A2A §11.6):
         {"error":{"code":<status>,"status":...,"message":...,"details":[...]}}
         400 FAILED_PRECONDITION   not a valid upgrade     ErrorInfo INVALID_UPGRADE
         426 FAILED_PRECONDITION   WebSocket version != 13 ErrorInfo
             + Sec-WebSocket-Version: 13                    UNSUPPORTED_WEBSOCKET_VERSION
         403 PERMISSION_DENIED     Origin not allowed (no details)
         429 RESOURCE_EXHAUSTED    per-source rate        ErrorInfo RATE_LIMITED,
             + Retry-After                                  RetryInfo
             (checked when the head is complete, before any of it is parsed)
         503 UNAVAILABLE           [websocket] max_connections or
                                   max_connections_per_source reached
                                                            ErrorInfo TOO_MANY_CONNECTIONS
      A refusal is counted; the first of each kind a minute is logged, the
      rest summarised (ws.summary), so a flood of refusals writes a line a
      minute. Autobahn's own events are logged as ws.autobahn, summarised
      the same way, each value the peer could choose clipped to 200
      characters.

    Service parameters: the upgrade's header lines, captured once: names
      lower-cased; a line whose value is not visible ASCII (printable, SP,
      HT) left out; repeated lines joined with ", " ("; " for cookie);
      last-event-id dropped; A2A-Version from the header, else from the
      ?A2A-Version= query parameter. Beacon adds ":source" (the caller).

    Frames, client -> server: one JSON-RPC 2.0 request per text frame.
    Frames, server -> client: one JSON-RPC 2.0 response per text frame, in
      any order, correlated by id. Checks on each frame, in order:
        every frame counts against the per-source rate   -31429 RATE_LIMITED
                                                          + RetryInfo
        binary frame                                      -32700, id null
        message over [limits] max_body                    -31413 TOO_LARGE
        [auth] credential of the upgrade refused          -32600 UNAUTHENTICATED
        not one strict JSON-RPC object (batch: -32600)    -32700 / -32600
        [websocket] max_in_flight requests in progress    -32603 IN_FLIGHT_LIMIT
      then the dispatcher: the same methods, policy and errors as the HTTP
      JSON-RPC binding (-32009 on each request without A2A-Version 1.0).
      The first three refusals are made without parsing the frame: their
      id is read from the frame's first 256 bytes only (ID_PREFIX), null
      when it is not a member there or the frame is binary. A message over
      max_body is not held: past max_body its bytes are dropped as they
      arrive (a single frame over it is not even unmasked). A message over
      [websocket] max_message (4 MiB) ends the connection (close 1009). A
      notification that runs is never answered; a refused one is answered
      with a null id.

    Time and backpressure: a frame begun but not complete within
      frame_timeout ([limits] body_timeout, 30 s) ends the connection (close
      1008); a connection with no request frame and nothing in progress for
      idle_timeout (300 s) is closed (1000). While the transport's buffer is
      full (the peer does not read) no further frame is read: the rest of
      the last read is held, the socket is not read, and only the answers
      of requests already in progress are held until it drains.

    Streams: each event {"jsonrpc":"2.0","id":<id>,"result":<StreamResponse>},
      then {"jsonrpc":"2.0","id":<id>,"result":{"status":"stream_complete"}};
      a failing stream ends with an error frame and no marker; a stream whose
      consumer falls behind by more than C{stream_queue} events is ended with
      a -32603 STREAM_LAGGED error frame. A stream is in progress until it
      ends.

ErrorInfo domains: C{a2a-protocol.org} for A2A errors, C{a2a-rust.com} for
the binding's UNAUTHENTICATED refusal (exactly as seed 001 §6 shows it), and
L{BEACON_DOMAIN} for every reason Beacon itself defines here (TOO_LARGE,
RATE_LIMITED, IN_FLIGHT_LIMIT, STREAM_LAGGED and the upgrade refusals).

Every timer (handshake, frame, idle, log summaries, autobahn's own close
handshake) runs on the injected clock: the factory replaces autobahn's
batched timer, which would otherwise use the global reactor.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, deque
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, ClassVar, Iterable, Mapping, cast

from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.protocol import WebSocketProtocol
from autobahn.websocket.types import ConnectionDeny, ConnectionRequest
from twisted.application.service import Service
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IConsumer, IDelayedCall, IPushProducer, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer

from beacon.bindings._edge import MAX_HEAD, reason_phrase, refuse
from beacon.bindings._http import DEFAULT_BODY_TIMEOUT, TransportLimits
from beacon.bindings._limits import Admission
from beacon.protocol import (
    A2AError,
    CallContext,
    Dispatcher,
    InvalidRequestError,
    IStreamSink,
    JSONParseError,
    StreamAnswer,
    dumps,
    loads,
    parse_extensions,
    parse_request,
    version_supported,
)
from beacon.protocol._errors import ERROR_INFO_TYPE, RETRY_INFO_TYPE
from beacon.protocol._jsonrpc import (
    MAX_NUMERIC_ID,
    MAX_REQUEST_ID_LENGTH,
    RequestId,
    failure,
    request_id_of,
    success,
)

log = Logger()

#: The binding's URI, as the agent card declares it.
WEBSOCKET_BINDING = "https://a2a-rust.com/bindings/websocket/v1"
#: The ErrorInfo domain of the binding's own refusals (seed 001 §6).
BINDING_DOMAIN = "a2a-rust.com"
#: The ErrorInfo domain of every reason Beacon itself defines.
BEACON_DOMAIN = "beacon.unownedminds.com"
#: The JSON-RPC code of a request frame over C{[limits] max_body}.
TOO_LARGE_CODE = -31413
#: The JSON-RPC code of a request frame over the per-source rate.
RATE_LIMITED_CODE = -31429

#: Defaults of C{[websocket]} (seed 001 §7; the caps and the idle timeout
#: are Beacon's, where a2a-rust leaves them off).
DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024
DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_MAX_CONNECTIONS_PER_SOURCE = 16
DEFAULT_IDLE_TIMEOUT = 300.0
#: Seconds a frame may take from its first byte to its last: C{[limits]
#: body_timeout}.
DEFAULT_FRAME_TIMEOUT = DEFAULT_BODY_TIMEOUT
#: How many frames of one stream may wait for a consumer that does not read.
DEFAULT_STREAM_QUEUE = 256

#: How much of a frame refused unparsed is read for its id, in bytes.
ID_PREFIX = 256
#: The most characters of anything the peer chose that a log event carries.
LOG_TEXT_LIMIT = 200
#: Seconds between two lines of one kind of refusal: the rest are counted
#: and summarised.
SUMMARY_INTERVAL = 60.0

#: The only WebSocket version served (RFC 6455).
_VERSION = 13
#: The marker frame's result after a stream's last event.
STREAM_COMPLETE = {"status": "stream_complete"}

_TOKEN = re.compile(rb"\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_VISIBLE = re.compile(rb"\A[\t\x20-\x7e]*\Z")
_LINE_END = re.compile(rb"\r?\n")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """C{text} with only its ASCII letters lower-cased (origin comparison)."""
    return text.translate(_ASCII_LOWER)


@dataclass(frozen=True)
class WebSocketOptions:
    """
    C{[websocket]}: the binding's limits (seed 001 §7).

    @ivar allowed_origins: The origins a browser may connect from, compared
        whole and ASCII case-insensitively; empty: any origin.
    @ivar require_origin: Refuse upgrades without an Origin header (every
        non-browser client sends none).
    @ivar max_message: The largest incoming message, in bytes; a larger one
        ends the connection.
    @ivar max_in_flight: Requests in progress per connection (a stream
        counts until it ends).
    @ivar handshake_timeout: Seconds from connect to an upgraded connection
        (the TLS handshake included on C{ssl:} listeners).
    @ivar max_connections: Open WebSocket connections per Beacon (on a
        listener of the binding's own, counted from accept); 0: no cap.
    @ivar max_connections_per_source: Open WebSocket connections per
        source (the address L{SourceResolver} names); 0: no cap.
    @ivar idle_timeout: Seconds without a request frame, while nothing is
        in progress, before the connection is closed; 0: never.
    @ivar frame_timeout: Seconds from a frame's first byte to its last
        before the connection is ended (close 1008); C{[limits]
        body_timeout} in a configured Beacon; 0: never.
    @ivar stream_queue: Frames of one stream held for a peer that does not
        read, before the stream is ended as lagged.
    """

    allowed_origins: tuple[str, ...] = ()
    require_origin: bool = False
    max_message: int = DEFAULT_MAX_MESSAGE
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_source: int = DEFAULT_MAX_CONNECTIONS_PER_SOURCE
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    frame_timeout: float = DEFAULT_FRAME_TIMEOUT
    stream_queue: int = DEFAULT_STREAM_QUEUE


# Errors this binding answers with, beside the dispatcher's.


class _BindingError(A2AError):
    """
    An error whose ErrorInfo is not in the A2A domain, with more typed
    details after it.
    """

    domain: ClassVar[str] = BEACON_DOMAIN

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: dict[str, str] | None = None,
        extra: Iterable[dict[str, Any]] = (),
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.extra = list(extra)

    def details(self) -> list[dict[str, Any]]:
        info: dict[str, Any] = {
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason,
            "domain": self.domain,
        }
        if self.metadata:
            info["metadata"] = self.metadata
        return [info, *self.extra]


class FrameTooLargeError(_BindingError):
    """A request frame is over C{[limits] max_body}."""

    code = TOO_LARGE_CODE
    reason = "TOO_LARGE"
    http_status = 413
    default_message = "The request is too large"


class RateLimitedError(_BindingError):
    """The source sends faster than C{[limits] rate} allows."""

    code = RATE_LIMITED_CODE
    reason = "RATE_LIMITED"
    http_status = 429
    default_message = "Too many requests from this source"


class InFlightLimitError(_BindingError):
    """The connection has C{max_in_flight} requests in progress already."""

    code = -32603
    reason = "IN_FLIGHT_LIMIT"
    default_message = "Too many requests in progress on this connection"


class StreamLaggedError(_BindingError):
    """A stream's consumer fell further behind than the stream queue."""

    code = -32603
    reason = "STREAM_LAGGED"
    default_message = "The stream's consumer fell too far behind; subscribe again"


class UnauthenticatedError(_BindingError):
    """The upgrade's credentials are missing or not accepted (seed 001 §6)."""

    code = InvalidRequestError.code
    reason = "UNAUTHENTICATED"
    http_status = 401
    default_message = "authentication required"
    domain = BINDING_DOMAIN


def retry_info(seconds: float) -> dict[str, Any]:
    """A C{google.rpc.RetryInfo} detail: whole seconds, at least one."""
    return {"@type": RETRY_INFO_TYPE, "retryDelay": f"{retry_seconds(seconds)}s"}


def retry_seconds(seconds: float) -> int:
    """A retry delay in whole seconds, rounded up, at least one."""
    return max(1, math.ceil(seconds))


# Refused upgrades.

_STATUS = {
    400: "FAILED_PRECONDITION",
    403: "PERMISSION_DENIED",
    426: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}


@dataclass(frozen=True)
class Refusal:
    """
    A refused upgrade: an HTTP status with the HTTP+JSON error body of A2A
    §11.6 (seed 001 §1).
    """

    code: int
    message: str
    reason: str | None = None
    extra: tuple[dict[str, Any], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()

    def body(self) -> dict[str, Any]:
        """The C{{"error": {...}}} document (no details on a 403)."""
        error: dict[str, Any] = {
            "code": self.code,
            "status": _STATUS.get(self.code, "FAILED_PRECONDITION"),
            "message": self.message,
        }
        if self.reason is not None:
            error["details"] = [
                {"@type": ERROR_INFO_TYPE, "reason": self.reason, "domain": BEACON_DOMAIN},
                *self.extra,
            ]
        return {"error": error}

    def response(self) -> bytes:
        """The whole HTTP/1.1 response; the connection closes after it."""
        body = dumps(self.body())
        phrase = reason_phrase(self.code)
        lines = [b"HTTP/1.1 %d %s" % (self.code, phrase)]
        lines.append(b"Content-Type: application/json")
        lines.append(b"Content-Length: %d" % len(body))
        lines.append(b"Cache-Control: no-store")
        lines.append(b"Connection: close")
        for name, value in self.headers:
            lines.append(f"{name}: {value}".encode("ascii"))
        return b"\r\n".join(lines) + b"\r\n\r\n" + body


_INVALID_UPGRADE = Refusal(
    400,
    "This URL speaks the A2A WebSocket binding only: send an RFC 6455 upgrade "
    "(GET, Upgrade: websocket, Sec-WebSocket-Version: 13)",
    "INVALID_UPGRADE",
)
_UNSUPPORTED_VERSION = Refusal(
    426,
    f"Only WebSocket version {_VERSION} (RFC 6455) is served",
    "UNSUPPORTED_WEBSOCKET_VERSION",
    headers=(("Sec-WebSocket-Version", str(_VERSION)),),
)
_ORIGIN_REFUSED = Refusal(403, "Connections from this origin are not allowed")
_TOO_MANY_CONNECTIONS = Refusal(
    503, "Too many WebSocket connections are open; try again later", "TOO_MANY_CONNECTIONS"
)


def _rate_refusal(retry_after: float) -> Refusal:
    retry = retry_seconds(retry_after)
    return Refusal(
        429,
        f"Too many requests from this source; retry after {retry} s",
        "RATE_LIMITED",
        extra=(retry_info(retry_after),),
        headers=(("Retry-After", str(retry)),),
    )


# Service parameters (seed 001 §2).


def header_lines(head: bytes) -> list[tuple[bytes, bytes]]:
    """
    The C{(name, value)} header lines of a raw HTTP/1.1 request head, in
    order, the request line left out. An obsolete folded line (one starting
    with SP or HT) continues the previous value after one space; a line that
    is not C{name: value} with a token name is left out.
    """
    lines: list[tuple[bytes, bytes]] = []
    for line in _LINE_END.split(head)[1:]:
        if not line:
            continue
        if line[:1] in (b" ", b"\t"):
            if lines:
                name, value = lines[-1]
                lines[-1] = (name, value + b" " + line.strip(b" \t"))
            continue
        name, colon, value = line.partition(b":")
        if colon and _TOKEN.match(name):
            lines.append((name, value.strip(b" \t")))
    return lines


def service_parameters(
    lines: Iterable[tuple[bytes, bytes]], query: Mapping[str, list[str]]
) -> dict[str, str]:
    """
    The service parameters of an upgrade (seed 001 §2).

    @param lines: Its header lines, in order (see L{header_lines}).
    @param query: Its query parameters (only C{A2A-Version} is read).
    @return: Lower-cased names to values: lines whose value is not visible
        ASCII left out, a name's remaining lines joined with C{", "}
        (C{"; "} for C{cookie}), C{last-event-id} dropped. An
        C{a2a-version} missing or empty in the headers is taken from the
        C{A2A-Version} query parameter.
    """
    collected: dict[str, list[str]] = {}
    for name, value in lines:
        if _VISIBLE.match(value) is None:
            continue
        key = name.decode("ascii").lower()
        if key == "last-event-id":
            continue
        collected.setdefault(key, []).append(value.decode("ascii"))
    parameters = {
        key: ("; " if key == "cookie" else ", ").join(values)
        for key, values in collected.items()
    }
    if not parameters.get("a2a-version", "").strip(" \t"):
        parameters.pop("a2a-version", None)
        for given in query.get("A2A-Version", [])[:1]:
            if _VISIBLE.match(given.encode("utf-8")) is not None:
                parameters["a2a-version"] = given
    return parameters


def _network_producer(transport: Any) -> IPushProducer | None:
    """
    What reads the connection's bytes: the transport itself, or the one
    under a TLS wrapper (which does not pause reading on its own).
    """
    while transport is not None and not IPushProducer.providedBy(transport):
        transport = getattr(transport, "transport", None)
    return transport


def _peer_host(address: Any) -> str:
    if isinstance(address, (IPv4Address, IPv6Address)):
        return address.host
    return "unknown"


class _ClockTimer:
    """
    autobahn's C{IBatchedTimer} on an injected clock: one delayed call per
    timer (autobahn's own batches them on the global reactor).
    """

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock

    def call_later(self, delay: float, func: Any, *args: Any, **kwargs: Any) -> IDelayedCall:
        """Call C{func} after C{delay} seconds on the clock."""
        return self._clock.callLater(delay, func, *args, **kwargs)


# What may reach the log, and how often.


def clip(text: str, limit: int = LOG_TEXT_LIMIT) -> str:
    """
    C{text} cut to C{limit} characters, the cut marked with how much was
    left out: for anything the peer chose that goes into a log event.
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more characters]"


class LogSummary:
    """
    Logs the first event of each kind at once, then counts that kind's
    events for L{SUMMARY_INTERVAL} seconds and logs one C{ws.summary} line
    for them: a flood of refusals writes a line a minute, not a line per
    refusal. A timer runs only while something is counted.

    @ivar counts: Every event noted, by kind, since the start.
    """

    def __init__(self, clock: IReactorTime, interval: float = SUMMARY_INTERVAL) -> None:
        self._clock = clock
        self.interval = interval
        self.counts: Counter[str] = Counter()
        self._logged_at: dict[str, float] = {}
        self._held: dict[str, Counter[str]] = {}
        self._call: IDelayedCall | None = None

    def note(self, kind: str, detail: str, emit: Callable[[], None]) -> None:
        """
        One event of C{kind}: logged now by C{emit} when no line of its kind
        was logged within the interval, otherwise counted under C{detail}
        (a word from a small, fixed set) for the next summary.
        """
        self.counts[kind] += 1
        now = self._clock.seconds()
        logged_at = self._logged_at.get(kind)
        if logged_at is None or (now - logged_at >= self.interval and kind not in self._held):
            self._logged_at[kind] = now
            emit()
            return
        self._held.setdefault(kind, Counter())[detail] += 1
        if self._call is None:
            self._call = self._clock.callLater(
                max(0.0, logged_at + self.interval - now), self._summarise
            )

    def _summarise(self, final: bool = False) -> None:
        self._call = None
        now = self._clock.seconds()
        due: float | None = None
        for kind in list(self._held):
            ends = self._logged_at[kind] + self.interval
            if ends > now and not final:
                due = ends if due is None else min(due, ends)
                continue
            held = self._held.pop(kind)
            self._logged_at[kind] = now
            log.info(
                "ws.summary: {count} more {kind} events since the last line ({details})",
                kind=kind,
                count=sum(held.values()),
                details=", ".join(f"{detail or kind}: {n}" for detail, n in held.most_common()),
            )
        if due is not None:
            self._call = self._clock.callLater(due - now, self._summarise)

    def stop(self) -> None:
        """Log what is counted now, and stop the timer."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._summarise(final=True)


def _log_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return clip(value if isinstance(value, str) else str(value))


class _AutobahnLog:
    """
    What autobahn logs for one connection (its C{self.log}): debug and
    trace dropped (as autobahn's default level does), anything else a
    C{ws.autobahn} event through the factory's L{LogSummary}, every value
    clipped: autobahn quotes the peer's Host, URI and close reasons.
    """

    def __init__(self, connection: WebSocketA2AProtocol) -> None:
        self._connection = connection

    def trace(self, *args: Any, **kwargs: Any) -> None:
        """Dropped."""

    debug = trace

    def _emit(self, level: LogLevel, fmt: str, kwargs: dict[str, Any]) -> None:
        values = {name: _log_value(value) for name, value in kwargs.items()}
        try:
            message = fmt.format(**values) if len(fmt) <= LOG_TEXT_LIMIT else clip(fmt)
        except (KeyError, IndexError, ValueError, AttributeError):
            message = clip(fmt)
        factory = getattr(self._connection, "factory", None)

        def emit() -> None:
            log.emit(level, "ws.autobahn: {message}", message=clip(message, 2 * LOG_TEXT_LIMIT))

        if factory is None:
            emit()
        else:
            factory.events.note("ws.autobahn", clip(fmt, 60), emit)

    def info(self, fmt: str = "", **kwargs: Any) -> None:
        self._emit(LogLevel.info, fmt, kwargs)

    def warn(self, fmt: str = "", **kwargs: Any) -> None:
        self._emit(LogLevel.warn, fmt, kwargs)

    def error(self, fmt: str = "", **kwargs: Any) -> None:
        self._emit(LogLevel.error, fmt, kwargs)

    def critical(self, fmt: str = "", **kwargs: Any) -> None:
        self._emit(LogLevel.critical, fmt, kwargs)

    def failure(self, fmt: str = "", failure: Failure | None = None, **kwargs: Any) -> None:
        log.failure(
            "ws.autobahn: {message}",
            failure,
            message=clip(fmt),
        )


# A refused frame's id, read from its first bytes only.

_ID_READER = json.JSONDecoder(parse_constant=lambda name: None)
_SPACE = " \t\r\n"


def prefix_id(prefix: bytes) -> RequestId:
    """
    The request id of a frame refused without parsing it, read from
    C{prefix}, the frame's first bytes (at most L{ID_PREFIX}): the value of
    a top-level C{"id"} member that lies whole within them and is a request
    id JSON-RPC echoes (a string of at most 128 characters, an integer
    within 2**53); otherwise null.
    """
    prefix = prefix[:ID_PREFIX]
    try:
        text = prefix.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(prefix) - 3:
            return None  # not UTF-8 (a code point cut at the end is)
        text = prefix[: error.start].decode("utf-8")
    read = _ID_READER.raw_decode
    try:
        at = len(text) - len(text.lstrip(_SPACE))
        if text[at] != "{":
            return None
        at += 1
        while True:
            at = _skip_space(text, at)
            if text[at] != '"':
                return None
            key, at = read(text, at)
            at = _skip_space(text, at)
            if text[at] != ":":
                return None
            at = _skip_space(text, at + 1)
            value, at = read(text, at)
            if key == "id":
                if at >= len(text):
                    return None  # it may go on past the prefix
                return _echoable(value)
            at = _skip_space(text, at)
            if text[at] != ",":
                return None
            at += 1
    except (ValueError, IndexError, RecursionError):
        return None


def _skip_space(text: str, at: int) -> int:
    while text[at] in _SPACE:
        at += 1
    return at


def _echoable(value: Any) -> RequestId:
    if isinstance(value, str) and len(value) <= MAX_REQUEST_ID_LENGTH:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_NUMERIC_ID:
        return value
    return None


@implementer(IStreamSink)
class _FrameSink:
    """
    Frames one stream's events on its connection, then the
    C{stream_complete} marker, or an error frame when it fails.
    """

    def __init__(self, connection: WebSocketA2AProtocol, request_id: RequestId) -> None:
        self.connection = connection
        self.id = request_id
        self.queued = 0
        self.done = False

    def event(self, result: Any) -> None:
        if not self.done:
            self.connection.send_frame(success(self.id, result), self)

    def end(self) -> None:
        if not self.done:
            self.connection.send_frame(success(self.id, STREAM_COMPLETE), self)
            self.connection.stream_ended(self)

    def fail(self, error: A2AError) -> None:
        if not self.done:
            self.connection.send_frame(failure(self.id, error), self)
            self.connection.stream_ended(self)


def _unmask(masked: bytes, key: bytes) -> bytes:
    """C{masked} XORed with the 4-byte C{key} repeated (RFC 6455 5.3)."""
    count = len(masked)
    if not count:
        return b""
    repeated = (key * ((count >> 2) + 1))[:count]
    return (int.from_bytes(masked, "little") ^ int.from_bytes(repeated, "little")).to_bytes(
        count, "little"
    )


def _text_frame(payload: bytes) -> bytes:
    """A server's text frame (RFC 6455 5.2): final, unmasked, C{payload} whole."""
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    if size < 0x10000:
        return bytes((0x81, 126)) + size.to_bytes(2, "big") + payload
    return bytes((0x81, 127)) + size.to_bytes(8, "big") + payload


@implementer(IPushProducer)
class WebSocketA2AProtocol(WebSocketServerProtocol):
    """
    One WebSocket connection of the A2A binding: the upgrade's checks and
    service parameters, then each text frame as one JSON-RPC request.

    Once open, the connection's bytes are split into frames here, before
    autobahn sees them, so that each frame goes where it costs least and
    holds least: a whole simple frame (final, masked text within
    C{[limits] max_body}) is read here; a single frame over C{max_body} is
    dropped as it arrives, only its first L{ID_PREFIX} bytes kept, and
    refused; anything else (control frames, fragments, invalid frames)
    goes to autobahn, frame by frame, and a fragmented message is dropped
    past C{max_body}. So a connection never holds more than C{max_body}
    (and one read) of what it receives.

    It is its transport's push producer: when the transport's buffer is
    full it stops reading, holds what it had read but not yet split, and
    holds outgoing frames (each stream's up to C{stream_queue}), so a peer
    that does not read costs bounded memory.
    """

    factory: WebSocketFactory
    # Set on each connection by autobahn, from the factory's protocol options.
    maskServerFrames: bool
    autoFragmentSize: int
    maxMessagePayloadSize: int
    maxFramePayloadSize: int
    autoPingInterval: float
    logFrames: bool
    logOctets: bool
    #: Whether frames are split and simple ones read here (see the class
    #: docstring); False: every frame goes to autobahn (for comparison).
    read_frames_directly: bool = True

    def __init__(self) -> None:
        super().__init__()
        self.parameters: dict[str, str] = {}
        self.source = ""
        self._context: CallContext | None = None
        self._refusal: Refusal | None = None
        self._refused = False
        self._counted = False
        self._source_counted = False
        self._opened = False
        self._in_flight = 0
        self._streams: dict[_FrameSink, StreamAnswer] = {}
        self._paused = False
        self._pending: deque[tuple[_FrameSink | None, bytes]] = deque()
        self._idle: IDelayedCall | None = None
        self._active_at = 0.0
        # Splitting frames (see dataReceived).
        self._framing = False
        self._inbox = bytearray()
        self._want = 0
        self._in_message = False
        self._skip = 0
        self._skip_binary = False
        self._skip_key = b""
        self._skip_prefix = bytearray()
        self._feed = 0
        self._frame_cap = 0
        self._progress = False
        self._arrival: IDelayedCall | None = None
        # A message autobahn reads (fragments).
        self._parts: list[bytes] = []
        self._held = 0
        self._message_binary = False
        self._message_prefix: bytes | None = None

    @cached_property
    def log(self) -> _AutobahnLog:  # type: ignore[override]
        """What autobahn logs about this connection (see L{_AutobahnLog})."""
        return _AutobahnLog(self)

    # The upgrade.

    def processHandshake(self) -> None:
        """
        Once the upgrade's head is complete, count it against the source's
        rate and refuse it (429) before autobahn parses any of it; refuse a
        head that grows past L{MAX_HEAD} bytes without ending. Bytes after
        the head are frames, split as any others.
        """
        if self._refused:
            self.data = b""
            return
        data = self.data
        end = data.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
        if end < 0:
            if len(data) > MAX_HEAD:
                self.data = b""
                self.failHandshake("the request head is too large")
            return
        head_end = end + 4
        self.source = self._source_of(data[:head_end])
        admission = self._admit(upgrade=True)
        if not admission.admitted:
            self.data = b""
            self._refuse_upgrade(_rate_refusal(admission.retry_after))
            return
        rest = data[head_end:]
        self.data = data[:head_end]
        super().processHandshake()
        if rest and self.state == WebSocketProtocol.STATE_OPEN:
            self.dataReceived(rest)

    def _source_of(self, head: bytes) -> str:
        sources = self.factory.limits.sources
        forwarded: list[bytes] = []
        if sources.trusts_proxies:
            forwarded = [v for name, v in header_lines(head) if name.lower() == b"x-forwarded-for"]
        return sources.resolve(self._peer(), forwarded)

    def onConnect(self, request: ConnectionRequest) -> tuple[None, dict[str, str]]:
        """
        Check the upgrade (origin, connection caps) and capture its service
        parameters. (Its rate was checked before it was parsed.)

        @raise ConnectionDeny: The upgrade is refused (L{failHandshake}
            writes the refusal).
        """
        factory = self.factory
        options = factory.options
        lines = header_lines(self.http_request_data)
        origin = request.origin  # autobahn: "" when the upgrade has none
        if not origin:
            if options.require_origin:
                self._deny(_ORIGIN_REFUSED)
        elif factory.allowed_origins and ascii_lower(origin.strip()) not in factory.allowed_origins:
            self._deny(_ORIGIN_REFUSED)
        held = factory.connections_by_source.get(self.source, 0)
        if options.max_connections_per_source and held >= options.max_connections_per_source:
            self._deny(_TOO_MANY_CONNECTIONS)
        if not self._counted:
            if options.max_connections and factory.open_connections >= options.max_connections:
                self._deny(_TOO_MANY_CONNECTIONS)

        parameters = service_parameters(lines, request.params)
        parameters[":source"] = self.source
        self.parameters = parameters
        requested = parse_extensions(
            [parameters["a2a-extensions"]] if "a2a-extensions" in parameters else []
        )
        self._context = CallContext(
            binding="websocket",
            source=self.source,
            version=parameters.get("a2a-version"),
            extensions=requested & factory.extensions,
        )
        if not self._counted:
            factory.open_connections += 1
            self._counted = True
        factory.connections_by_source[self.source] = held + 1
        self._source_counted = True
        headers: dict[str, str] = {}
        if self._context.extensions:
            headers["A2A-Extensions"] = ", ".join(sorted(self._context.extensions))
        return None, headers

    def count_from_accept(self) -> None:
        """Count this connection against C{max_connections} from now on."""
        self._counted = True
        self.factory.open_connections += 1

    def _admit(self, upgrade: bool = False) -> Admission:
        """Count the upgrade or a frame against the source's rate."""
        admission = self.factory.limits.rate.admit(self.source)
        if admission.first_refusal and not upgrade:
            source = self.source
            self.factory.events.note(
                "ws.rate_limited",
                "",
                lambda: log.warn(
                    "ws.rate_limited: source {source} is over its rate; refusing "
                    "upgrades and frames until it slows down",
                    source=source,
                ),
            )
        return admission

    def _peer(self) -> Any:
        return self.transport.getPeer() if self.transport is not None else None

    def _deny(self, refusal: Refusal) -> None:
        self._refusal = refusal
        raise ConnectionDeny(refusal.code, refusal.message)

    def failHandshake(
        self, reason: str, code: int = 400, responseHeaders: Any = None
    ) -> None:
        """
        Refuse the upgrade with the HTTP+JSON error body (seed 001 §1)
        instead of autobahn's bare status line: autobahn's own refusals
        become 400 (or 426 for an unsupported version), without echoing
        anything the peer sent.
        """
        refusal, self._refusal = self._refusal, None
        if refusal is None:
            headers = dict(responseHeaders or ())
            unsupported = "Sec-WebSocket-Version" in headers
            refusal = _UNSUPPORTED_VERSION if unsupported else _INVALID_UPGRADE
        # autobahn reports it as the close reason; it may quote the peer.
        self.wasNotCleanReason = clip(reason)
        self._refuse_upgrade(refusal)

    def _refuse_upgrade(self, refusal: Refusal) -> None:
        """
        Write C{refusal} and close once it is written; the connection reads
        nothing more. Counted, and logged through the factory's summary.
        """
        self._refused = True
        self.data = b""
        self.factory.refused(refusal, self.source or _peer_host(self._peer()))
        transport = self.transport
        if transport is not None:
            transport.write(refusal.response())
            transport.loseConnection()

    def onOpen(self) -> None:
        """The upgrade succeeded: produce for the transport, start the idle timer."""
        self._opened = True
        factory = self.factory
        factory.connections.add(self)
        cast(IConsumer, self.transport).registerProducer(self, True)
        self._framing = self.read_frames_directly and not (
            self.logOctets or self.logFrames or self.trackedTimings or self.autoPingInterval
        )
        caps = [cap for cap in (self.maxFramePayloadSize, self.maxMessagePayloadSize) if cap > 0]
        self._frame_cap = min(caps) if caps else 1 << 63
        supported = version_supported(self.parameters.get("a2a-version"))
        log.info(
            "ws.connected: {source} (A2A-Version {version})",
            source=self.source,
            version="1.0" if supported else "missing or unsupported",
        )
        timeout = factory.options.idle_timeout
        if timeout:
            self._active_at = factory.clock.seconds()
            self._idle = factory.clock.callLater(timeout, self._idle_check)

    # Frames.

    def dataReceived(self, data: bytes) -> None:
        """
        Split C{data}, with what is held from earlier reads, into frames
        (see the class docstring); before the upgrade is done, and once a
        frame was passed that autobahn alone may judge, autobahn reads it.

        A frame not yet whole is held only when it is within C{max_body};
        held while the transport is full, the rest of a read waits for it to
        drain. A frame still incomplete C{frame_timeout} after a read left
        it so ends the connection.
        """
        if not self._framing:
            super().dataReceived(data)
            return
        inbox = self._inbox
        if inbox:
            inbox += data
            if self._paused or len(inbox) < self._want:
                self._time_arrival()
                return
            data = bytes(inbox)
            inbox.clear()
        self._want = 0
        self._split(data)
        self._time_arrival()

    def _split(self, data: bytes) -> None:
        """
        Route the frames of C{data}, which starts where the last frame
        routed ended; hold what cannot be routed yet.
        """
        size = len(data)
        at = 0
        max_body = self.factory.limits.max_body
        while at < size:
            if self._skip:
                at = self._skip_payload(data, at)
                continue
            if self._feed:
                take = min(self._feed, size - at)
                self._feed -= take
                super().dataReceived(data[at : at + take])
                at += take
                if not self._feed:
                    self._progress = True
                continue
            if self.state == WebSocketProtocol.STATE_CLOSED:
                return
            if self._paused or size - at < 2:
                break
            first, second = data[at], data[at + 1]
            opcode = first & 0x0F
            final = first & 0x80
            length = second & 0x7F
            if first & 0x70 or not second & 0x80:
                return self._to_autobahn(data[at:])  # RSV bits, or not masked
            if length < 126:
                start = at + 6
            elif length == 126:
                start = at + 8
            else:
                start = at + 14
            if start > size:
                break
            if length == 126:
                length = (data[at + 2] << 8) | data[at + 3]
                if length < 126:
                    return self._to_autobahn(data[at:])
            elif length == 127:
                length = int.from_bytes(data[at + 2 : at + 10], "big")
                if length < 0x10000 or length >> 63:
                    return self._to_autobahn(data[at:])
            control = opcode >= 8
            if control:
                if opcode > 10 or not final or length > 125:
                    return self._to_autobahn(data[at:])
            elif (
                opcode > 2 or (opcode == 0) != self._in_message or length > self._frame_cap
            ):
                # A frame over max_message: autobahn closes with 1009.
                return self._to_autobahn(data[at:])
            end = start + length
            if control or length <= max_body:
                if end > size:
                    self._want = end - at
                    break
                self._progress = True
                if (
                    final
                    and not control
                    and opcode
                    and self.state == WebSocketProtocol.STATE_OPEN
                    and self._read_whole(data, at, start, end, opcode == 2)
                ):
                    at = end
                    continue
                if not control:
                    self._in_message = not final
                super().dataReceived(data[at:end])
                at = end
                continue
            if final and opcode:
                # One frame over max_body: refused, so dropped unread.
                self._skip = length
                self._skip_binary = opcode == 2
                self._skip_key = data[start - 4 : start]
                if self.state == WebSocketProtocol.STATE_OPEN:
                    self.trafficStats.incomingOctetsWireLevel += start - at
                at = start
                continue
            # A fragment over max_body: autobahn reads it as it arrives;
            # onMessageFrameData keeps no more of its message than max_body.
            self._in_message = not final
            self._feed = end - at
        if at < size:
            self._inbox += data[at:] if at else data

    def _to_autobahn(self, data: bytes) -> None:
        """From here on autobahn reads the connection (it fails it)."""
        self._framing = False
        self._cancel_arrival()
        super().dataReceived(data)

    def _read_whole(self, data: bytes, at: int, start: int, end: int, binary: bool) -> bool:
        """
        Read the whole final frame C{data[at:end]} (a message of its own,
        within max_body) as autobahn would, unless it is a text frame that
        must be parsed and its payload is not valid UTF-8 (autobahn then
        fails the connection): its traffic counters move the same, and the
        checks of L{onMessage} apply. A frame refused by them (rate, binary,
        credential) is neither unmasked nor checked past its first
        L{ID_PREFIX} bytes.
        """
        key = data[start - 4 : start]
        self._active_at = self.factory.clock.seconds()
        error = self._check(self._admit(), binary, False)
        if error is None:
            payload = _unmask(data[start:end], key)
            try:
                payload.decode("utf-8")
            except UnicodeDecodeError:
                return False
        length = end - start
        stats = self.trafficStats
        stats.incomingOctetsWireLevel += end - at
        stats.incomingOctetsWebSocketLevel += length
        stats.incomingOctetsAppLevel += length
        stats.incomingWebSocketFrames += 1
        stats.incomingWebSocketMessages += 1
        if error is None:
            self._request(payload)
        else:
            request_id = None
            if not binary:
                request_id = prefix_id(_unmask(data[start : min(end, start + ID_PREFIX)], key))
            self._refuse(request_id, error)
        return True

    def _skip_payload(self, data: bytes, at: int) -> int:
        """Drop the next bytes of a frame over max_body, keeping its first ones."""
        take = min(self._skip, len(data) - at)
        wanted = ID_PREFIX - len(self._skip_prefix)
        if wanted > 0:
            self._skip_prefix += data[at : at + min(wanted, take)]
        self._skip -= take
        opened = self.state == WebSocketProtocol.STATE_OPEN
        stats = self.trafficStats
        if opened:
            stats.incomingOctetsWireLevel += take
            stats.incomingOctetsWebSocketLevel += take
            stats.incomingOctetsAppLevel += take
        if not self._skip:
            self._progress = True
            prefix = _unmask(bytes(self._skip_prefix), self._skip_key)
            self._skip_prefix = bytearray()
            if opened:
                stats.incomingWebSocketFrames += 1
                stats.incomingWebSocketMessages += 1
            self._refuse_unread(self._skip_binary, prefix)
        return at + take

    def _time_arrival(self) -> None:
        """
        Time a frame that a read left incomplete (not one held because the
        transport is full): from the first such read, reset whenever a
        frame completes.
        """
        waiting = not self._paused and (self._skip or self._feed or self._inbox)
        progress, self._progress = self._progress, False
        if not waiting:
            if self._arrival is not None:
                self._cancel_arrival()
            return
        timeout = self.factory.options.frame_timeout
        if not timeout:
            return
        if self._arrival is None:
            self._arrival = self.factory.clock.callLater(timeout, self._arrival_expired)
        elif progress:
            self._arrival.reset(timeout)

    def _cancel_arrival(self) -> None:
        if self._arrival is not None and self._arrival.active():
            self._arrival.cancel()
        self._arrival = None

    def _arrival_expired(self) -> None:
        self._arrival = None
        if self.state != WebSocketProtocol.STATE_OPEN:
            return
        seconds = self.factory.options.frame_timeout
        source = self.source
        self.factory.events.note(
            "ws.frame_timeout",
            "",
            lambda: log.info(
                "ws.frame_timeout: closed the connection of {source}: a frame "
                "took more than {seconds} s",
                source=source,
                seconds=seconds,
            ),
        )
        self.sendCloseFrame(1008, b"frame timeout")

    # Messages autobahn reads (fragmented ones, and frames it must judge).

    def onMessageBegin(self, isBinary: bool) -> None:
        super().onMessageBegin(isBinary)
        self._message_binary = isBinary
        self._parts = []
        self._held = 0
        self._message_prefix = None

    def onMessageFrameData(self, payload: bytes) -> None:
        """Keep the message up to max_body; past it, only its first bytes."""
        if self.failedByMe:
            return
        if self._message_prefix is not None:
            return
        held = self._held + len(payload)
        if held <= self.factory.limits.max_body:
            self._parts.append(payload)
            self._held = held
            return
        self._message_prefix = (b"".join(self._parts)[:ID_PREFIX] + payload[:ID_PREFIX])[
            :ID_PREFIX
        ]
        self._parts = []
        self._held = 0

    def onMessageEnd(self) -> None:
        """The whole message, or its refusal when it was over max_body."""
        if self.failedByMe:
            return
        parts, prefix = self._parts, self._message_prefix
        self._parts = []
        self._held = 0
        self._message_prefix = None
        if prefix is not None:
            self._refuse_unread(self._message_binary, prefix)
        else:
            self.onMessage(b"".join(parts), self._message_binary)

    # Requests.

    def _refuse_unread(self, binary: bool, prefix: bytes) -> None:
        """
        Answer a message over max_body, of which only C{prefix} was kept:
        rate limited, binary, or too large, as L{onMessage} would.
        """
        if self.state != WebSocketProtocol.STATE_OPEN:
            return
        self._touch()
        error = self._check(self._admit(), binary, True)
        assert error is not None
        self._refuse(None if binary else prefix_id(prefix), error)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        """
        One message: the transport limits and the credential, refused
        without parsing it (the id is read from its first L{ID_PREFIX}
        bytes); then the envelope, the in-flight cap and the dispatcher.
        """
        if self.state != WebSocketProtocol.STATE_OPEN:
            return  # Beacon is closing it: nothing more is run.
        self._touch()
        error = self._check(
            self._admit(), isBinary, len(payload) > self.factory.limits.max_body
        )
        if error is not None:
            self._refuse(None if isBinary else prefix_id(payload[:ID_PREFIX]), error)
            return
        self._request(payload)

    def _check(self, admission: Admission, binary: bool, too_large: bool) -> A2AError | None:
        """
        The refusal due before a message is parsed, in the binding's order:
        rate, binary, size, credential; None when it may be parsed.
        """
        if not admission.admitted:
            return _rate_error(admission)
        if binary:
            return _binary_error()
        if too_large:
            return self._too_large_error()
        auth = self.factory.limits.auth
        if auth.enabled and not auth.admits(
            self.parameters.get("authorization"), self.parameters.get("x-api-key")
        ):
            return UnauthenticatedError(metadata={"www-authenticate": auth.challenge()})
        return None

    def _request(self, payload: bytes) -> None:
        """A text message that passed L{_check}: parse it and run it."""
        factory = self.factory
        try:
            request = parse_request(loads(payload))
        except A2AError as error:
            self._refuse(request_id_of(error), error)
            return
        answer_id = None if request.notification else request.id
        if self._in_flight >= factory.options.max_in_flight:
            self._refuse(
                answer_id,
                InFlightLimitError(
                    f"{factory.options.max_in_flight} requests are in progress on "
                    "this connection; wait for an answer"
                ),
            )
            return
        assert self._context is not None
        self._in_flight += 1
        factory.dispatcher.call(request, self._context).addCallback(
            self._answered
        ).addErrback(self._answer_failed)

    def _too_large_error(self) -> FrameTooLargeError:
        limit = self.factory.limits.max_body
        source = self.source
        self.factory.events.note(
            "ws.too_large",
            "",
            lambda: log.warn(
                "ws.too_large: refused a frame over {limit} bytes from {source}",
                limit=limit,
                source=source,
            ),
        )
        return FrameTooLargeError(
            f"The request exceeds {limit} bytes", metadata={"limit": str(limit)}
        )

    def _refuse(self, request_id: RequestId, error: A2AError) -> None:
        self.send_frame(failure(request_id, error))

    def _answered(self, response: dict[str, Any] | StreamAnswer | None) -> None:
        if isinstance(response, StreamAnswer):
            if not self._opened or self.state != WebSocketProtocol.STATE_OPEN:
                response.stream.cancel()
                self._finished()
                return
            sink = _FrameSink(self, response.id)
            self._streams[sink] = response
            response.stream.attach(sink)
            return
        if response is not None:
            self.send_frame(response)
        self._finished()

    def _answer_failed(self, reason: Failure) -> None:
        self._finished()
        log.failure("ws.response_failed", reason)

    def _finished(self) -> None:
        self._in_flight -= 1

    # Outgoing frames and backpressure.

    def send_frame(self, response: dict[str, Any], sink: _FrameSink | None = None) -> None:
        """
        Send one JSON-RPC response, or hold it while the transport is full.
        A stream with more than C{stream_queue} held frames is ended as
        lagged.
        """
        if self.state != WebSocketProtocol.STATE_OPEN:
            return
        data = dumps(response)
        if not self._paused and not self._pending:
            self._send_text(data)
            return
        if sink is not None:
            sink.queued += 1
            if sink.queued > self.factory.options.stream_queue:
                self._lagged(sink)
                return
        self._pending.append((sink, data))

    def _send_text(self, data: bytes) -> None:
        """
        Send C{data} as one text message. When autobahn would send it as one
        plain frame (no fragmentation, masking, timings, frame or octet
        logging, queued writes, and within its message cap; Beacon never
        negotiates compression), the frame is written here, with autobahn's
        traffic counters moved as it moves them; otherwise autobahn's
        L{sendMessage} sends it. Autobahn builds debug-log arguments for
        every frame it writes, which cost more than the frame.
        """
        size = len(data)
        if (
            self.trackedTimings
            or self.maskServerFrames
            or self.logFrames
            or self.logOctets
            or self.send_queue
            or 0 < self.autoFragmentSize < size
            or 0 < self.maxMessagePayloadSize < size
        ):
            self.sendMessage(data, isBinary=False)
            return
        frame = _text_frame(data)
        transport = self.transport
        assert transport is not None
        transport.write(frame)
        stats = self.trafficStats
        stats.outgoingWebSocketMessages += 1
        stats.outgoingOctetsAppLevel += size
        stats.outgoingOctetsWebSocketLevel += size
        stats.outgoingWebSocketFrames += 1
        stats.outgoingOctetsWireLevel += len(frame)

    def _lagged(self, sink: _FrameSink) -> None:
        # The frames already held are sent; nothing more of the stream is.
        log.warn(
            "ws.stream_lagged: ended a stream of {source} that fell {queued} "
            "frames behind",
            source=self.source,
            queued=sink.queued,
        )
        error = StreamLaggedError(metadata={"streamLagged": "true"})
        self._pending.append((None, dumps(failure(sink.id, error))))
        self.stream_ended(sink)

    def stream_ended(self, sink: _FrameSink) -> None:
        """A stream is over (ended, failed, lagged): it is no longer in progress."""
        if sink.done:
            return
        sink.done = True
        answer = self._streams.pop(sink, None)
        if answer is not None:
            answer.stream.cancel()
        self._finished()

    def pauseProducing(self) -> None:
        """
        The transport is full: hold frames, stop reading the connection and
        stop splitting what was read.
        """
        self._paused = True
        self._cancel_arrival()  # What is not read now is not the peer's delay.
        producer = _network_producer(self.transport)
        if producer is not None:
            producer.pauseProducing()

    def resumeProducing(self) -> None:
        """
        The transport drained: send what was held, split what was read, and
        read again, unless it filled again meanwhile.
        """
        self._paused = False
        while self._pending and not self._paused:
            sink, data = self._pending.popleft()
            if sink is not None:
                sink.queued -= 1
            if self.state == WebSocketProtocol.STATE_OPEN:
                self._send_text(data)
        if not self._paused and self._inbox and self._framing:
            data = bytes(self._inbox)
            self._inbox.clear()
            self._want = 0
            self._split(data)
        if self._framing:
            self._time_arrival()
        if not self._paused:
            producer = _network_producer(self.transport)
            if producer is not None:
                producer.resumeProducing()

    def stopProducing(self) -> None:
        """The transport is going away; L{onClose} cleans up."""

    @property
    def held_input(self) -> int:
        """Bytes received and held, not yet answered: for the memory bound."""
        return len(self._inbox) + self._held + len(self._skip_prefix)

    @property
    def held_output(self) -> int:
        """Bytes of answers held while the transport is full."""
        return sum(len(data) for _, data in self._pending)

    # Idle timeout and the end.

    def _touch(self) -> None:
        self._active_at = self.factory.clock.seconds()

    def _idle_check(self) -> None:
        self._idle = None
        if self.state != WebSocketProtocol.STATE_OPEN:
            return
        clock = self.factory.clock
        timeout = self.factory.options.idle_timeout
        quiet = clock.seconds() - self._active_at
        if self._in_flight or quiet < timeout:
            wait = timeout if self._in_flight else timeout - quiet
            self._idle = clock.callLater(wait, self._idle_check)
            return
        log.info("ws.idle_closed: closed the idle connection of {source}", source=self.source)
        self.sendClose(1000, "idle")

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        """
        The connection is gone: cancel its streams and timers, free its
        slot.
        """
        if self._idle is not None and self._idle.active():
            self._idle.cancel()
        self._idle = None
        self._cancel_arrival()
        self._inbox.clear()
        self._parts = []
        self._held = 0
        self._skip_prefix = bytearray()
        for sink in list(self._streams):
            self.stream_ended(sink)
        self._pending.clear()
        factory = self.factory
        if self._counted:
            self._counted = False
            factory.open_connections -= 1
        if self._source_counted:
            self._source_counted = False
            held = factory.connections_by_source.get(self.source, 1) - 1
            if held:
                factory.connections_by_source[self.source] = held
            else:
                factory.connections_by_source.pop(self.source, None)
        factory.connections.discard(self)
        if self._opened:
            self._opened = False
            log.info(
                "ws.closed: {source} closed (code {code})",
                source=self.source,
                code=self.localCloseCode or self.remoteCloseCode or code or "none",
            )


def _rate_error(admission: Admission) -> RateLimitedError:
    return RateLimitedError(
        f"Too many requests from this source; retry after "
        f"{retry_seconds(admission.retry_after)} s",
        extra=[retry_info(admission.retry_after)],
    )


def _binary_error() -> JSONParseError:
    return JSONParseError(
        "Binary frames are not part of this binding; send one JSON-RPC object per text frame"
    )


class _RefusedAtAccept(Protocol):
    """Writes a refusal as soon as the connection is made, then closes."""

    def __init__(self, response: bytes) -> None:
        self._response = response

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self._response)
        self.transport.loseConnection()

    def dataReceived(self, data: bytes) -> None:
        """Nothing is read."""


class WebSocketFactory(WebSocketServerFactory):
    """
    The binding's autobahn factory: one per Beacon, shared by the resource
    on the public listeners and by any C{--ws} listener. A L{Site} does not
    start or stop a factory inside a resource: L{WebSocketService} does.

    @ivar open_connections: Connections counted against C{max_connections}:
        on a C{--ws} listener from accept, at C{/a2a/ws} from the upgrade
        (until then the HTTP listener counts them).
    @ivar connections_by_source: Upgraded (or upgrading, once accepted)
        connections by source, for C{max_connections_per_source}.
    @ivar connections: The open connections, to close on stop.
    @ivar events: The refusals and autobahn events logged (the first of
        each kind) and counted (all of them); see L{LogSummary}.
    """

    protocol = WebSocketA2AProtocol  # type: ignore[assignment]

    def __init__(
        self,
        dispatcher: Dispatcher,
        limits: TransportLimits,
        clock: IReactorTime,
        options: WebSocketOptions = WebSocketOptions(),
        *,
        extensions: frozenset[str] = frozenset(),
    ) -> None:
        """
        @param dispatcher: The same dispatcher (and so policy) as the
            JSON-RPC binding.
        @param limits: The public doors' limits (rate, body cap, sources,
            credentials), shared with HTTP.
        @param clock: Every timeout of the binding runs on it.
        @param options: C{[websocket]}.
        @param extensions: The extension URIs the binding supports.
        """
        super().__init__(server=None, reactor=clock)
        self._batched_timer = _ClockTimer(clock)
        self.dispatcher = dispatcher
        self.limits = limits
        self.clock = clock
        self.options = options
        self.extensions = extensions
        self.allowed_origins = frozenset(ascii_lower(o) for o in options.allowed_origins)
        self.open_connections = 0
        self.connections_by_source: dict[str, int] = {}
        self.connections: set[WebSocketA2AProtocol] = set()
        self.events = LogSummary(clock)
        self.noisy = False
        self.setProtocolOptions(
            versions=[_VERSION],
            webStatus=False,
            maxFramePayloadSize=options.max_message,
            maxMessagePayloadSize=options.max_message,
            openHandshakeTimeout=options.handshake_timeout,
            # A message over the cap is answered with close 1009, not a
            # silent drop, so that the peer can tell why.
            failByDrop=False,
        )

    def buildProtocol(self, addr: Any) -> Protocol | None:
        """
        A connection accepted on a listener of the binding's own: counted
        against C{max_connections} from now on, or, over it, answered 503
        at once and closed.
        """
        cap = self.options.max_connections
        if cap and self.open_connections >= cap:
            self.refused(_TOO_MANY_CONNECTIONS, _peer_host(addr))
            return _RefusedAtAccept(_TOO_MANY_CONNECTIONS.response())
        protocol = self.connection(addr)
        protocol.count_from_accept()
        return protocol

    def connection(self, addr: Any) -> WebSocketA2AProtocol:
        """A protocol for a connection someone else accepted and counts."""
        protocol = super().buildProtocol(addr)
        assert isinstance(protocol, WebSocketA2AProtocol)
        return protocol

    def refused(self, refusal: Refusal, source: str) -> None:
        """Count a refused upgrade; log it unless a line of its kind is recent."""
        reason = refusal.reason or "PERMISSION_DENIED"
        self.events.note(
            "ws.refused",
            f"{refusal.code} {reason}",
            lambda: log.info(
                "ws.refused: upgrade from {source} refused with {code} {reason}",
                source=source,
                code=refusal.code,
                reason=reason,
            ),
        )

    def stopFactory(self) -> None:
        """The last listener stopped: log what the summary holds."""
        self.events.stop()
        super().stopFactory()

    def close_all(self, code: int = 1001, reason: str = "going away") -> None:
        """Close every open connection (Beacon is stopping)."""
        for connection in list(self.connections):
            if connection.state == WebSocketProtocol.STATE_OPEN:
                # sendClose allows applications 1000 and 3000-4999 only.
                connection.sendCloseFrame(code, reason.encode("utf-8"))


class WebSocketService(Service):
    """
    Starts and stops a L{WebSocketFactory} that serves inside a L{Site}
    (which starts only its own factory); on stop, open connections are
    closed with 1001 (going away).
    """

    def __init__(self, factory: WebSocketFactory) -> None:
        self.factory = factory

    def startService(self) -> None:
        super().startService()
        self.factory.doStart()

    def stopService(self) -> None:
        super().stopService()
        self.factory.close_all()
        self.factory.doStop()


@implementer(IResource)
class WebSocketResource:
    """
    The binding as a leaf L{IResource} in a L{Site}: it takes the request's
    connection over and hands it to a L{WebSocketA2AProtocol}, replaying the
    request head line by line (so that repeated headers stay separate lines
    for the service parameters).
    """

    isLeaf = True

    def __init__(self, factory: WebSocketFactory) -> None:
        """
        @param factory: Builds the connection's protocol.
        """
        self._factory = factory

    def getChildWithDefault(self, name: bytes, request: server.Request) -> IResource:
        raise NotImplementedError("a leaf resource has no children")

    def putChild(self, path: bytes, child: IResource) -> None:
        raise NotImplementedError("a leaf resource has no children")

    def render(self, request: server.Request) -> bytes | int:
        """
        Hand the connection to the WebSocket protocol, or refuse.
        """
        if request.postpath and request.postpath != [b""]:
            return refuse(request, 404, "not_found", "no such resource")
        transport: Any = request.channel.transport
        if transport is None or request.method != b"GET":
            # Only a GET can be an upgrade (and HTTP/2 cannot be upgraded).
            request.setResponseCode(_INVALID_UPGRADE.code)
            request.setHeader(b"Content-Type", b"application/json")
            return b"" if request.method == b"HEAD" else dumps(_INVALID_UPGRADE.body())
        protocol = self._factory.connection(transport.getPeer())
        # The HTTP channel registered itself as the transport's producer and
        # may have paused it; from here on the WebSocket protocol is both.
        transport.unregisterProducer()
        release = getattr(request.channel, "release_connection", None)
        if release is not None:
            release()  # The WebSocket factory counts it from here on.
        request.channel.transport = None
        wrapper = getattr(transport, "wrappedProtocol", None)
        if wrapper is not None:  # TLS: the transport wraps the channel.
            transport.wrappedProtocol = protocol
        else:
            transport.protocol = protocol
        protocol.makeConnection(transport)
        producer = _network_producer(transport)
        if producer is not None:
            producer.resumeProducing()
        head = [request.method + b" " + request.uri + b" HTTP/1.1"]
        for name, values in request.requestHeaders.getAllRawHeaders():
            head.extend(name + b": " + value for value in values)
        body = request.content.read() if request.content is not None else b""
        protocol.dataReceived(b"\r\n".join(head) + b"\r\n\r\n" + body)
        return NOT_DONE_YET


def websocket_url(http_url: str) -> str:
    """The C{ws://} or C{wss://} form of an C{http://} or C{https://} URL."""
    if http_url.startswith("https://"):
        return "wss://" + http_url[len("https://") :]
    if http_url.startswith("http://"):
        return "ws://" + http_url[len("http://") :]
    raise ValueError(f"not an http(s) URL: {http_url!r}")


__all__ = [
    "BEACON_DOMAIN",
    "BINDING_DOMAIN",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_MESSAGE",
    "DEFAULT_STREAM_QUEUE",
    "RATE_LIMITED_CODE",
    "STREAM_COMPLETE",
    "TOO_LARGE_CODE",
    "WEBSOCKET_BINDING",
    "FrameTooLargeError",
    "InFlightLimitError",
    "RateLimitedError",
    "Refusal",
    "StreamLaggedError",
    "UnauthenticatedError",
    "WebSocketA2AProtocol",
    "WebSocketFactory",
    "WebSocketOptions",
    "WebSocketResource",
    "WebSocketService",
    "ascii_lower",
    "header_lines",
    "service_parameters",
    "websocket_url",
]
