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
      arrive. A text message that is parsed must be UTF-8 (else close
      1007); one refused unparsed is not looked at. A message over
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

The binding uses autobahn's documented surface only: its protocol options,
the connection callbacks (C{onConnect}, C{onOpen}, C{onClose}) and the
streaming ones (C{onMessageBegin} ... C{onMessageEnd}), C{sendMessage},
C{sendClose}; beside them it overrides C{failHandshake} (the refusal body)
and C{sendCloseFrame} (to know a close was sent, and to send 1001 and 1008).
Every timer (handshake, close handshake, frame, idle, log summaries) runs
on the injected clock: autobahn's own timers, which run on the global
reactor, are turned off through its options, and the connection ends a
late handshake as autobahn's timeouts would. Plain frames, nearly all of
the traffic, are read and written by Beacon itself (L{PlainFrames}); the
factory's C{direct=False} leaves every frame to autobahn.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, deque
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, ClassVar, Iterable, Mapping, NamedTuple, cast

from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.types import ConnectionDeny, ConnectionRequest
from autobahn.websocket.utf8validator import Utf8Validator
from twisted.application.service import Service
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IConsumer, IDelayedCall, IPushProducer, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET
from zope.interface import Interface, implementer

from beacon.bindings._edge import MAX_HEAD, field_lines, reason_phrase, refuse
from beacon.bindings._http import TransportLimits
from beacon.bindings._limits import Admission
from beacon.config import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_MESSAGE,
    DEFAULT_STREAM_QUEUE,
    WebSocketOptions,
)
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

_VISIBLE = re.compile(rb"\A[\t\x20-\x7e]*\Z")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """C{text} with only its ASCII letters lower-cased (origin comparison)."""
    return text.translate(_ASCII_LOWER)


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


def upgrade_lines(head: bytes) -> list[tuple[bytes, bytes]]:
    """
    The C{(name, value)} header lines of an upgrade's raw head (which ends
    with a blank line), in order, the request line left out: read as
    L{field_lines} reads a head leniently.
    """
    return field_lines(head[head.find(b"\n") + 1 : -2]) or []


def service_parameters(
    lines: Iterable[tuple[bytes, bytes]], query: Mapping[str, list[str]]
) -> dict[str, str]:
    """
    The service parameters of an upgrade (seed 001 §2).

    @param lines: Its header lines, in order (see L{upgrade_lines}).
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


# How an open connection's messages meet the wire.


class Message(NamedTuple):
    """
    A whole incoming message: its payload when within max_body, else the
    first L{ID_PREFIX} bytes of it; C{wire}: its frames' size on the wire.
    """

    binary: bool
    payload: bytes | None
    prefix: bytes | None
    wire: int


class IFrameIO(Interface):
    """
    How an open connection's messages meet the wire beside autobahn's
    callbacks. L{AutobahnFrames} leaves every frame to autobahn's public
    API; L{PlainFrames} reads and writes the plain frames that carry
    nearly all of the binding's traffic itself, and leaves the rest to
    autobahn (C{WebSocketFactory(direct=False)} turns it off).
    """

    def read_frame(data: bytes, at: int, cap: int) -> tuple[Message, int] | None:
        """
        The message that is one whole plain frame at C{data[at:]}, with the
        offset after that frame; None when there is none, and autobahn
        reads what is there.

        @param cap: The largest payload read here (max_body and
            max_message): a larger one is autobahn's to read.
        """

    def write_text(connection: WebSocketServerProtocol, payload: bytes) -> None:
        """Send C{payload} as one text message on C{connection}."""


@implementer(IFrameIO)
class AutobahnFrames:
    """Every frame read and written by autobahn, through its public API."""

    def read_frame(self, data: bytes, at: int, cap: int) -> tuple[Message, int] | None:
        """None: autobahn reads every frame."""
        return None

    def write_text(self, connection: WebSocketServerProtocol, payload: bytes) -> None:
        """Autobahn's L{sendMessage}."""
        connection.sendMessage(payload, isBinary=False)


@implementer(IFrameIO)
class PlainFrames:
    """
    Plain frames read and written by Beacon, as RFC 6455 5.2 lays them
    out, where autobahn would spend more building its debug log's
    arguments than the frame costs. A plain incoming frame is final,
    masked, text or binary, with no RSV bit and a minimally encoded length
    within the cap; a plain outgoing frame is a final, unmasked text frame
    within C{max_message} (the factory's protocol options never fragment,
    mask or compress what the server sends). Autobahn reads and writes
    every other frame, and what autobahn does after them is unchanged:
    it never holds a byte when a plain frame is read (the connection
    reads here only at a frame boundary outside a fragmented message),
    and writes its own frames (pongs, closes) straight to the transport,
    in order with these.
    """

    def __init__(self, max_message: int) -> None:
        """
        @param max_message: A larger answer goes to autobahn, which refuses
            it (L{PayloadExceededError}) as it always has.
        """
        self.max_message = max_message

    def read_frame(self, data: bytes, at: int, cap: int) -> tuple[Message, int] | None:
        """The whole plain frame at C{data[at:]}, unmasked, if there is one."""
        size = len(data)
        if size - at < 6:
            return None
        first = data[at]
        second = data[at + 1]
        opcode = first & 0x7F  # with the RSV bits, which must be clear
        if (opcode != 1 and opcode != 2) or not first & 0x80 or not second & 0x80:
            return None
        length = second & 0x7F
        if length < 126:
            start = at + 6
        elif length == 126:
            start = at + 8
            if start > size:
                return None
            length = (data[at + 2] << 8) | data[at + 3]
            if length < 126:
                return None
        else:
            start = at + 14
            if start > size:
                return None
            length = int.from_bytes(data[at + 2 : at + 10], "big")
            if length < 0x10000 or length >> 63:
                return None
        end = start + length
        if end > size or length > cap:
            return None
        payload = unmask(data[start:end], data[start - 4 : start])
        return Message(opcode == 2, payload, None, end - at), end

    def write_text(self, connection: WebSocketServerProtocol, payload: bytes) -> None:
        """One final text frame, written to the transport."""
        if len(payload) > self.max_message:
            connection.sendMessage(payload, isBinary=False)
            return
        transport = connection.transport
        assert transport is not None
        transport.write(text_frame(payload))


def unmask(masked: bytes, key: bytes) -> bytes:
    """C{masked} XORed with the 4-byte C{key} repeated (RFC 6455 5.3)."""
    count = len(masked)
    if not count:
        return b""
    repeated = (key * ((count >> 2) + 1))[:count]
    return (int.from_bytes(masked, "little") ^ int.from_bytes(repeated, "little")).to_bytes(
        count, "little"
    )


def text_frame(payload: bytes) -> bytes:
    """A server's text frame (RFC 6455 5.2): final, unmasked, C{payload} whole."""
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    if size < 0x10000:
        return bytes((0x81, 126)) + size.to_bytes(2, "big") + payload
    return bytes((0x81, 127)) + size.to_bytes(8, "big") + payload


#: The most bytes of one read given to autobahn at once: it stops between
#: two pieces when the transport fills, and the rest of the read waits.
FEED = 4096
#: Seconds Beacon waits for the peer's close after sending its own
#: (autobahn's default close handshake timeout).
CLOSE_TIMEOUT = 1.0


def _frame_head_size(length: int) -> int:
    """The size of a masked client frame's head for a payload of C{length} (RFC 6455 5.2)."""
    if length < 126:
        return 6
    return 8 if length < 0x10000 else 14


def _invalid_utf8(connection: WebSocketA2AProtocol, payload: bytes) -> bool:
    """
    Whether a text message is not UTF-8; if so fail its connection with
    close 1007 (RFC 6455 8.1), saying so as autobahn says it when it
    checks a message itself.
    """
    valid, whole, _, index = Utf8Validator().validate(payload)
    if valid and whole:
        return False
    if valid:
        reason = f"UTF-8 text message payload ended within Unicode code point at payload octet index {index}"
    else:
        reason = f"encountered invalid UTF-8 while processing text message at payload octet index {index}"
    connection.log.warn('failing WebSocket connection (code={code}): "{reason}"', code=1007, reason=reason)
    connection.sendCloseFrame(1007, reason.encode("utf-8"))
    return True


@implementer(IPushProducer)
class WebSocketA2AProtocol(WebSocketServerProtocol):
    """
    One WebSocket connection of the A2A binding: the upgrade's checks and
    service parameters, then each text message as one JSON-RPC request.

    Built on autobahn's documented surface only: the upgrade's head is
    gathered here and given to autobahn whole (so that its rate is checked
    before autobahn parses it); messages arrive through autobahn's
    streaming callbacks (L{onMessageBegin}, L{onMessageFrameBegin},
    L{onMessageFrameData}, L{onMessageFrameEnd}, L{onMessageEnd}), which
    tell a frame's length before its payload: a message is kept up to
    C{[limits] max_body}, past it only its first L{ID_PREFIX} bytes, so a
    connection never holds more than C{max_body} (and one read) of what it
    receives. Answers go out through L{sendMessage}.

    Autobahn's own timers would run on the global reactor: they are off
    (C{openHandshakeTimeout} and C{closeHandshakeTimeout} 0), and the
    handshake and close handshake are timed here, on the factory's clock,
    ending as autobahn's own timeouts end them (L{onOpenHandshakeTimeout},
    L{onCloseHandshakeTimeout}).

    It is its transport's push producer: when the transport's buffer is
    full it stops reading, holds what it had read but not yet given to
    autobahn (and the messages autobahn completed meanwhile), and holds
    outgoing frames (each stream's up to C{stream_queue}), so a peer that
    does not read costs bounded memory.
    """

    factory: WebSocketFactory

    def __init__(self) -> None:
        super().__init__()
        self.parameters: dict[str, str] = {}
        self.source = ""
        self._head = b""
        self._upgrade = b""
        self._context: CallContext | None = None
        self._refusal: Refusal | None = None
        self._refused = False
        self._counted = False
        self._source_counted = False
        self._opened = False
        self._closing = False
        self._close_code: int | None = None
        self._in_flight = 0
        self._streams: dict[_FrameSink, StreamAnswer] = {}
        self._paused = False
        self._pending: deque[tuple[_FrameSink | None, bytes]] = deque()
        self._handshake: IDelayedCall | None = None
        self._close_wait: IDelayedCall | None = None
        self._idle: IDelayedCall | None = None
        self._active_at = 0.0
        # What was read and not yet given to autobahn, held while the
        # transport is full; the messages autobahn completed meanwhile.
        self._unfed = bytearray()
        self._messages: deque[Message] = deque()
        self._frames: IFrameIO = AutobahnFrames()
        # Bytes given to autobahn that no frame has accounted for yet (a
        # frame head still arriving), whether a frame's payload or a
        # fragmented message is still arriving, and whether a frame
        # completed since the last read.
        self._unread = 0
        self._in_frame = False
        self._in_message = False
        self._progress = False
        self._arrival: IDelayedCall | None = None
        # The message arriving.
        self._binary = False
        self._size = 0
        self._wire = 0
        self._parts: list[bytes] = []
        self._kept = 0
        self._prefix: bytearray | None = None

    @cached_property
    def log(self) -> _AutobahnLog:  # type: ignore[override]
        """What autobahn logs about this connection (see L{_AutobahnLog})."""
        return _AutobahnLog(self)

    # The upgrade.

    def connectionMade(self) -> None:
        """Start the handshake's clock: the upgrade must be done within C{handshake_timeout}."""
        super().connectionMade()
        timeout = self.factory.options.handshake_timeout
        if timeout:
            self._handshake = self.factory.clock.callLater(timeout, self._handshake_expired)

    def _handshake_expired(self) -> None:
        self._handshake = None
        self.onOpenHandshakeTimeout()

    def dataReceived(self, data: bytes) -> None:
        """
        Before the upgrade: gather its head (see L{_read_head}). Once open:
        give autobahn what was read, unless the transport is full.
        """
        if self._opened:
            if self._paused or self._unfed:
                self._unfed += data
            else:
                self._feed(data)
        elif not self._refused:
            self._read_head(data)

    def _read_head(self, data: bytes) -> None:
        """
        Once the upgrade's head is complete, count it against the source's
        rate and refuse it (429) before autobahn parses any of it; refuse a
        head that grows past L{MAX_HEAD} bytes without ending. Bytes after
        the head are frames.
        """
        head = self._head + data
        end = head.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
        if end < 0:
            if len(head) > MAX_HEAD:
                self._head = b""
                self.failHandshake("the request head is too large")
            else:
                self._head = head
            return
        self._head = b""
        head, rest = head[: end + 4], head[end + 4 :]
        self.source = self._source_of(head)
        admission = self._admit(upgrade=True)
        if not admission.admitted:
            self._refuse_upgrade(_rate_refusal(admission.retry_after))
            return
        self._upgrade = head
        super().dataReceived(head)
        if rest and self._opened:
            self.dataReceived(rest)

    def _source_of(self, head: bytes) -> str:
        sources = self.factory.limits.sources
        forwarded: list[bytes] = []
        if sources.trusts_proxies:
            forwarded = [
                v for name, v in upgrade_lines(head) if name.lower() == b"x-forwarded-for"
            ]
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
        lines = upgrade_lines(self._upgrade)
        self._upgrade = b""
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
        """Count the upgrade or a message against the source's rate."""
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
        self._refuse_upgrade(refusal)

    def _refuse_upgrade(self, refusal: Refusal) -> None:
        """
        Write C{refusal} and close once it is written; the connection reads
        nothing more. Counted, and logged through the factory's summary.
        """
        self._refused = True
        self.factory.refused(refusal, self.source or _peer_host(self._peer()))
        transport = self.transport
        if transport is not None:
            transport.write(refusal.response())
            transport.loseConnection()

    def onOpen(self) -> None:
        """The upgrade succeeded: produce for the transport, start the idle timer."""
        self._opened = True
        self._cancel(self._handshake)
        self._handshake = None
        factory = self.factory
        self._frames = factory.frames
        factory.connections.add(self)
        cast(IConsumer, self.transport).registerProducer(self, True)
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

    def _feed(self, data: bytes) -> None:
        """
        Read C{data} until the transport is full (the rest is held until it
        drains): where autobahn holds nothing, the plain frames that the
        connection's L{IFrameIO} reads; anything else is given to autobahn,
        at most L{FEED} bytes at a time. Then time a frame that is left
        incomplete.
        """
        size = len(data)
        at = 0
        frames = self._frames
        cap = min(self.factory.limits.max_body, self.factory.options.max_message)
        while at < size:
            if self._paused:
                self._unfed += data[at:] if at else data
                break
            if not (self._unread or self._in_frame or self._in_message or self._closing):
                found = frames.read_frame(data, at, cap)
                if found is not None:
                    message, at = found
                    self._progress = True
                    self._handle(message)
                    continue
            piece = data[at : at + FEED] if at or size > FEED else data
            at += len(piece)
            self._unread += len(piece)
            super().dataReceived(piece)
        self._time_arrival()

    def onMessageBegin(self, isBinary: bool) -> None:
        """A message begins: nothing of it is kept yet."""
        super().onMessageBegin(isBinary)
        self._in_message = True
        self._binary = isBinary
        self._size = 0
        self._wire = 0
        self._parts = []
        self._kept = 0
        self._prefix = None

    def onMessageFrameBegin(self, length: int) -> None:
        """
        A frame of C{length} payload bytes begins (autobahn ends a message
        over C{max_message} here, with close 1009). Once the message is
        over C{max_body}, only its first L{ID_PREFIX} bytes are kept.
        """
        super().onMessageFrameBegin(length)
        head = _frame_head_size(length)
        self._unread -= head
        self._wire += head + length
        self._in_frame = True
        if self._closing:
            return
        self._size += length
        if self._prefix is None and self._size > self.factory.limits.max_body:
            self._prefix = bytearray(b"".join(self._parts)[:ID_PREFIX])
            self._parts = []
            self._kept = len(self._prefix)

    def onMessageFrameData(self, payload: bytes) -> None:
        """Keep the payload up to max_body; past it, only the message's first bytes."""
        self._unread -= len(payload)
        if self._closing:
            return
        prefix = self._prefix
        if prefix is None:
            self._parts.append(payload)
            self._kept += len(payload)
        elif len(prefix) < ID_PREFIX:
            prefix += payload[: ID_PREFIX - len(prefix)]
            self._kept = len(prefix)

    def onMessageFrameEnd(self) -> None:
        """A frame is whole: the frame timer starts again from here."""
        self._in_frame = False
        self._progress = True

    def onMessageEnd(self) -> None:
        """
        The message is whole: handle it, or, while the transport is full,
        hold it until it drains.
        """
        message = Message(
            self._binary,
            b"".join(self._parts) if self._prefix is None else None,
            None if self._prefix is None else bytes(self._prefix),
            self._wire,
        )
        self._parts = []
        self._kept = 0
        self._prefix = None
        self._in_message = False
        if self._closing:
            return
        if self._paused or self._messages:
            self._messages.append(message)
            return
        self._handle(message)

    def onPing(self, payload: bytes) -> None:
        """A ping is whole (autobahn answers it)."""
        self._control_frame(payload)
        super().onPing(payload)

    def onPong(self, payload: bytes) -> None:
        """A pong is whole."""
        self._control_frame(payload)
        super().onPong(payload)

    def _control_frame(self, payload: bytes) -> None:
        self._unread -= _frame_head_size(len(payload)) + len(payload)
        self._progress = True

    def _time_arrival(self) -> None:
        """
        Time a frame that a read left incomplete (not one held because the
        transport is full): from the first such read, reset whenever a
        frame completes.
        """
        waiting = (
            not self._paused and not self._closing and (self._unread > 0 or self._in_frame)
        )
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
        self._cancel(self._arrival)
        self._arrival = None

    def _arrival_expired(self) -> None:
        self._arrival = None
        if not self._opened or self._closing:
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

    def sendCloseFrame(
        self, code: int | None = None, reasonUtf8: bytes | None = None, isReply: bool = False
    ) -> None:
        """
        Send a close frame (L{sendClose} allows applications only 1000 and
        3000-4999; Beacon also ends connections with 1001 and 1008, and
        autobahn with its protocol errors), then wait, on the clock, at
        most L{CLOSE_TIMEOUT} for the peer's own close before dropping the
        connection as autobahn's close handshake timeout would.
        """
        first = self._opened and not self._closing
        super().sendCloseFrame(code, reasonUtf8, isReply)
        if not first:
            return
        self._closing = True
        self._close_code = code
        self._cancel_arrival()
        if not isReply:
            self._close_wait = self.factory.clock.callLater(CLOSE_TIMEOUT, self._close_expired)

    def _close_expired(self) -> None:
        self._close_wait = None
        self.onCloseHandshakeTimeout()

    # Requests.

    def _handle(self, message: Message) -> None:
        """
        One whole message: the transport limits and the credential, refused
        without parsing it (the id is read from its first L{ID_PREFIX}
        bytes); then the envelope, the in-flight cap and the dispatcher.
        """
        if self._closing or not self._opened:
            return  # Beacon is closing it: nothing more is run.
        self._touch()
        payload = message.payload
        error = self._check(self._admit(), message.binary, payload is None)
        if error is not None:
            first = message.prefix if payload is None else payload[:ID_PREFIX]
            self._refuse(None if message.binary or first is None else prefix_id(first), error)
            return
        assert payload is not None
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
        """
        A text message that passed L{_check}: parse it and run it. One whose
        payload is not UTF-8 fails the connection (close 1007, RFC 6455
        8.1), as autobahn would.
        """
        factory = self.factory
        try:
            request = parse_request(loads(payload))
        except A2AError as error:
            if isinstance(error, JSONParseError) and _invalid_utf8(self, payload):
                return
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
            if not self._opened or self._closing:
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
        if not self._opened or self._closing:
            return
        data = dumps(response)
        if not self._paused and not self._pending:
            self._frames.write_text(self, data)
            return
        if sink is not None:
            sink.queued += 1
            if sink.queued > self.factory.options.stream_queue:
                self._lagged(sink)
                return
        self._pending.append((sink, data))

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
        stop giving autobahn what was read.
        """
        self._paused = True
        self._cancel_arrival()  # What is not read now is not the peer's delay.
        producer = _network_producer(self.transport)
        if producer is not None:
            producer.pauseProducing()

    def resumeProducing(self) -> None:
        """
        The transport drained: send what was held, handle the messages
        held, give autobahn what was read, and read again, unless it
        filled again meanwhile.
        """
        self._paused = False
        while self._pending and not self._paused:
            sink, data = self._pending.popleft()
            if sink is not None:
                sink.queued -= 1
            if self._opened and not self._closing:
                self._frames.write_text(self, data)
        while self._messages and not self._paused:
            self._handle(self._messages.popleft())
        if not self._paused and self._unfed:
            data = bytes(self._unfed)
            self._unfed.clear()
            self._feed(data)
        elif self._opened:
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
        return (
            len(self._unfed)
            + max(self._unread, 0)
            + self._kept
            + sum(message.wire for message in self._messages)
        )

    @property
    def held_output(self) -> int:
        """Bytes of answers held while the transport is full."""
        return sum(len(data) for _, data in self._pending)

    # Idle timeout and the end.

    def _touch(self) -> None:
        self._active_at = self.factory.clock.seconds()

    def _idle_check(self) -> None:
        self._idle = None
        if not self._opened or self._closing:
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

    def going_away(self, code: int = 1001, reason: str = "going away") -> None:
        """Close the connection, if it is open, with C{code} (Beacon is stopping)."""
        if self._opened and not self._closing:
            self.sendCloseFrame(code, reason.encode("utf-8"))

    @staticmethod
    def _cancel(call: IDelayedCall | None) -> None:
        if call is not None and call.active():
            call.cancel()

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        """
        The connection is gone: cancel its streams and timers, free its
        slot.
        """
        for call in (self._handshake, self._close_wait, self._idle):
            self._cancel(call)
        self._handshake = self._close_wait = self._idle = None
        self._cancel_arrival()
        self._unfed.clear()
        self._messages.clear()
        self._parts = []
        self._kept = 0
        self._prefix = None
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
                code=self._close_code or code or "none",
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
    #: Whether connections read and write plain frames themselves
    #: (L{PlainFrames}) when the constructor does not say.
    direct_default: ClassVar[bool] = True

    def __init__(
        self,
        dispatcher: Dispatcher,
        limits: TransportLimits,
        clock: IReactorTime,
        options: WebSocketOptions = WebSocketOptions(),
        *,
        extensions: frozenset[str] = frozenset(),
        direct: bool | None = None,
    ) -> None:
        """
        @param dispatcher: The same dispatcher (and so policy) as the
            JSON-RPC binding.
        @param limits: The public doors' limits (rate, body cap, sources,
            credentials), shared with HTTP.
        @param clock: Every timeout of the binding runs on it.
        @param options: C{[websocket]}.
        @param extensions: The extension URIs the binding supports.
        @param direct: Whether connections read and write plain frames
            themselves (L{PlainFrames}, the shortcut) or leave every frame
            to autobahn (L{AutobahnFrames}: its off switch); None: as
            L{direct_default} says.
        """
        super().__init__(server=None, reactor=clock)
        if direct is None:
            direct = self.direct_default
        self.frames: IFrameIO = PlainFrames(options.max_message) if direct else AutobahnFrames()
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
            # autobahn's timers run on the global reactor: the protocol
            # times the handshakes on the clock instead.
            openHandshakeTimeout=0,
            closeHandshakeTimeout=0,
            # Beacon checks the UTF-8 of the messages it parses only: a
            # message refused unparsed is not looked at.
            utf8validateIncoming=False,
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
            connection.going_away(code, reason)


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
    "upgrade_lines",
    "service_parameters",
    "websocket_url",
]
