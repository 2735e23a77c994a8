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
         503 UNAVAILABLE           [websocket] max_connections reached
                                                            ErrorInfo TOO_MANY_CONNECTIONS

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
        frame over [limits] max_body                      -31413 TOO_LARGE
        not one strict JSON-RPC object (batch: -32600)    -32700 / -32600
        [websocket] max_in_flight requests in progress    -32603 IN_FLIGHT_LIMIT
        [auth] credential of the upgrade refused          -32600 UNAUTHENTICATED
      then the dispatcher: the same methods, policy and errors as the HTTP
      JSON-RPC binding (-32009 on each request without A2A-Version 1.0).
      A frame over [websocket] max_message (4 MiB) ends the connection
      (close 1009). A refusal carries the request's id; null for a
      notification, for a frame whose id cannot be read, and for a
      rate-limited frame that is binary or over max_body (it is not
      parsed). A notification that runs is never answered.

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

Every timer (handshake, idle, autobahn's own close handshake) runs on the
injected clock: the factory replaces autobahn's batched timer, which would
otherwise use the global reactor.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, cast

from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.protocol import WebSocketProtocol
from autobahn.websocket.types import ConnectionDeny, ConnectionRequest
from twisted.application.service import Service
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IConsumer, IDelayedCall, IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, server
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer

from beacon.bindings._http import TransportLimits, _refuse
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
from beacon.protocol._jsonrpc import RequestId, failure, request_id_of, success

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

#: Defaults of C{[websocket]} (seed 001 §7).
DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024
DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
#: How many frames of one stream may wait for a consumer that does not read.
DEFAULT_STREAM_QUEUE = 256

#: The longest upgrade request head read, in bytes.
MAX_HEAD = 16 * 1024
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
    @ivar max_connections: Open WebSocket connections per Beacon; 0: no cap.
    @ivar idle_timeout: Seconds without a data frame, while nothing is in
        progress, before the connection is closed; 0: never.
    @ivar stream_queue: Frames of one stream held for a peer that does not
        read, before the stream is ended as lagged.
    """

    allowed_origins: tuple[str, ...] = ()
    require_origin: bool = False
    max_message: int = DEFAULT_MAX_MESSAGE
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    max_connections: int = 0
    idle_timeout: float = 0.0
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
        phrase = http.RESPONSES.get(self.code, b"Error")
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

    It is its transport's push producer: when the transport's buffer is
    full it stops reading requests and holds outgoing frames, each stream's
    up to C{stream_queue}, so a peer that does not read costs bounded memory.
    """

    factory: WebSocketFactory
    # Set on each connection by autobahn, from the factory's protocol options.
    maskServerFrames: bool
    autoFragmentSize: int
    maxMessagePayloadSize: int
    logFrames: bool
    logOctets: bool

    def __init__(self) -> None:
        super().__init__()
        self.parameters: dict[str, str] = {}
        self.source = ""
        self._context: CallContext | None = None
        self._refusal: Refusal | None = None
        self._counted = False
        self._opened = False
        self._in_flight = 0
        self._streams: dict[_FrameSink, StreamAnswer] = {}
        self._paused = False
        self._pending: deque[tuple[_FrameSink | None, bytes]] = deque()
        self._idle: IDelayedCall | None = None

    # The upgrade.

    def processHandshake(self) -> None:
        """
        Read the upgrade request, refusing one whose head grows past
        L{MAX_HEAD} bytes without ending.
        """
        if len(self.data) > MAX_HEAD and b"\r\n\r\n" not in self.data[: MAX_HEAD + 4]:
            self.data = b""
            self.failHandshake("the request head is too large")
            return
        super().processHandshake()

    def onConnect(self, request: ConnectionRequest) -> tuple[None, dict[str, str]]:
        """
        Check the upgrade (rate, origin, connection cap) and capture its
        service parameters.

        @raise ConnectionDeny: The upgrade is refused (L{failHandshake}
            writes the refusal).
        """
        factory = self.factory
        options = factory.options
        lines = header_lines(self.http_request_data)
        self.source = factory.limits.sources.resolve(
            self._peer(),
            [value for name, value in lines if name.lower() == b"x-forwarded-for"],
        )
        admission = self._admit()
        if not admission.admitted:
            self._deny(_rate_refusal(admission.retry_after))
        origin = request.origin  # autobahn: "" when the upgrade has none
        if not origin:
            if options.require_origin:
                self._deny(_ORIGIN_REFUSED)
        elif factory.allowed_origins and ascii_lower(origin.strip()) not in factory.allowed_origins:
            self._deny(_ORIGIN_REFUSED)
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
        factory.open_connections += 1
        self._counted = True
        headers: dict[str, str] = {}
        if self._context.extensions:
            headers["A2A-Extensions"] = ", ".join(sorted(self._context.extensions))
        return None, headers

    def _admit(self) -> Admission:
        """Count the upgrade or a frame against the source's rate."""
        admission = self.factory.limits.rate.admit(self.source)
        if admission.first_refusal:
            log.warn(
                "ws.rate_limited: source {source} is over its rate; refusing "
                "upgrades and frames until it slows down",
                source=self.source,
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
        self.wasNotCleanReason = reason
        log.info(
            "ws.refused: upgrade from {source} refused with {code} {reason}",
            source=self.source or _peer_host(self._peer()),
            code=refusal.code,
            reason=refusal.reason or "PERMISSION_DENIED",
        )
        self.sendData(refusal.response())
        self.dropConnection(abort=False)

    def onOpen(self) -> None:
        """The upgrade succeeded: produce for the transport, start the idle timer."""
        self._opened = True
        self.factory.connections.add(self)
        cast(IConsumer, self.transport).registerProducer(self, True)
        supported = version_supported(self.parameters.get("a2a-version"))
        log.info(
            "ws.connected: {source} (A2A-Version {version})",
            source=self.source,
            version="1.0" if supported else "missing or unsupported",
        )
        self._touch()

    # Frames.

    def dataReceived(self, data: bytes) -> None:
        """
        Read the simple frames at the front of C{data} here, and the rest
        (from the first frame that is not simple on) through autobahn.

        A simple frame is a whole, final, masked text frame with no RSV bits,
        its length in 7 or minimal 16 bits and within the size caps, whose
        payload is valid UTF-8: nearly every request of this binding. It is
        read only while autobahn holds nothing half-read (no buffered bytes,
        no frame or fragmented message begun) and uses none of its per-frame
        options that Beacon leaves off (compression, frame and octet
        logging, timings, automatic pings). What autobahn would do with it
        is what happens: its traffic counters move the same, and
        L{onMessage} gets the unmasked payload. Anything else (control
        frames, fragments, a frame cut by the read, an oversized or invalid
        one) goes to autobahn, which answers it as it always does. Reading
        them here costs about a tenth of autobahn's per-frame path.
        """
        if (
            self.state == WebSocketProtocol.STATE_OPEN
            and not self.data
            and self.current_frame is None
            and not self.inside_message
            and self._perMessageCompress is None
            and not self.logOctets
            and not self.logFrames
            and self.trackedTimings is None
            and self.autoPingTimeoutCall is None
        ):
            data = self._read_simple_frames(data)
            if not data:
                return
        super().dataReceived(data)

    def _read_simple_frames(self, data: bytes) -> bytes:
        """
        Deliver the simple frames at the front of C{data}; return the rest.
        """
        size = len(data)
        caps = [
            cap
            for cap in (
                getattr(self, "maxFramePayloadSize", 0),
                getattr(self, "maxMessagePayloadSize", 0),
            )
            if cap > 0
        ]
        cap = min(caps) if caps else None
        stats = self.trafficStats
        at = 0
        while self.state == WebSocketProtocol.STATE_OPEN and size - at >= 6:
            if data[at] != 0x81 or not data[at + 1] & 0x80:
                break  # not a final text frame, or not masked
            length = data[at + 1] & 0x7F
            if length < 126:
                start = at + 6
            elif length == 126 and size - at >= 8:
                length = (data[at + 2] << 8) | data[at + 3]
                if length < 126:
                    break  # not the minimal encoding: autobahn refuses it
                start = at + 8
            else:
                break
            end = start + length
            if end > size or (cap is not None and length > cap):
                break
            payload = _unmask(data[start:end], data[start - 4 : start])
            try:
                payload.decode("utf-8")
            except UnicodeDecodeError:
                break
            stats.incomingOctetsWireLevel += end - at
            stats.incomingOctetsWebSocketLevel += length
            stats.incomingOctetsAppLevel += length
            stats.incomingWebSocketFrames += 1
            stats.incomingWebSocketMessages += 1
            at = end
            self.onMessage(payload, False)
        return data[at:] if at else data

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        """
        One frame: the transport limits, the envelope, the in-flight cap and
        the credential, then the dispatcher.
        """
        self._touch()
        factory = self.factory
        limits = factory.limits
        admission = self._admit()
        if not admission.admitted:
            small = not isBinary and len(payload) <= limits.max_body
            self._refuse(
                _peek_id(payload) if small else None,
                RateLimitedError(
                    f"Too many requests from this source; retry after "
                    f"{retry_seconds(admission.retry_after)} s",
                    extra=[retry_info(admission.retry_after)],
                ),
            )
            return
        if isBinary:
            self._refuse(
                None,
                JSONParseError(
                    "Binary frames are not part of this binding; send one "
                    "JSON-RPC object per text frame"
                ),
            )
            return
        if len(payload) > limits.max_body:
            log.warn(
                "ws.too_large: refused a frame over {limit} bytes from {source}",
                limit=limits.max_body,
                source=self.source,
            )
            self._refuse(
                _peek_id(payload),
                FrameTooLargeError(
                    f"The request exceeds {limits.max_body} bytes",
                    metadata={"limit": str(limits.max_body)},
                ),
            )
            return
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
        auth = limits.auth
        if not auth.admits(self.parameters.get("authorization"), self.parameters.get("x-api-key")):
            self._refuse(
                answer_id,
                UnauthenticatedError(metadata={"www-authenticate": auth.challenge()}),
            )
            return
        assert self._context is not None
        self._in_flight += 1
        factory.dispatcher.call(request, self._context).addCallback(
            self._answered
        ).addErrback(self._answer_failed)

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
        plain frame (no compression, fragmentation, masking, timings, frame
        or octet logging, queued writes, and within its message cap), the
        frame is written here, with autobahn's traffic counters moved as it
        moves them; otherwise autobahn's L{sendMessage} sends it. Autobahn
        builds debug-log arguments for every frame it writes, which cost
        more than the frame.
        """
        size = len(data)
        if (
            self._perMessageCompress is not None
            or self.trackedTimings
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
        """The transport is full: hold frames and stop reading requests."""
        self._paused = True
        producer = _network_producer(self.transport)
        if producer is not None:
            producer.pauseProducing()

    def resumeProducing(self) -> None:
        """The transport drained: send what was held, read again."""
        self._paused = False
        while self._pending and not self._paused:
            sink, data = self._pending.popleft()
            if sink is not None:
                sink.queued -= 1
            if self.state == WebSocketProtocol.STATE_OPEN:
                self._send_text(data)
        if not self._paused:
            producer = _network_producer(self.transport)
            if producer is not None:
                producer.resumeProducing()

    def stopProducing(self) -> None:
        """The transport is going away; L{onClose} cleans up."""

    # Idle timeout and the end.

    def _touch(self) -> None:
        timeout = self.factory.options.idle_timeout
        if not timeout or not self._opened:
            return
        if self._idle is not None and self._idle.active():
            self._idle.reset(timeout)
        else:
            self._idle = self.factory.clock.callLater(timeout, self._idle_expired)

    def _idle_expired(self) -> None:
        self._idle = None
        if self._in_flight:
            self._touch()
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
        for sink in list(self._streams):
            self.stream_ended(sink)
        self._pending.clear()
        if self._counted:
            self._counted = False
            self.factory.open_connections -= 1
        self.factory.connections.discard(self)
        if self._opened:
            self._opened = False
            log.info(
                "ws.closed: {source} closed (code {code})",
                source=self.source,
                code=self.localCloseCode or self.remoteCloseCode or code or "none",
            )


def _peek_id(payload: bytes) -> RequestId:
    """The id of a request refused before it is read, or null."""
    try:
        return parse_request(loads(payload)).id
    except A2AError as error:
        return request_id_of(error)


class WebSocketFactory(WebSocketServerFactory):
    """
    The binding's autobahn factory: one per Beacon, shared by the resource
    on the public listeners and by any C{--ws} listener. A L{Site} does not
    start or stop a factory inside a resource: L{WebSocketService} does.

    @ivar open_connections: Upgraded (or upgrading, once accepted)
        connections, for C{max_connections}.
    @ivar connections: The open connections, to close on stop.
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
        self.connections: set[WebSocketA2AProtocol] = set()
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
            return _refuse(request, 404, "not_found", "no such resource")
        transport: Any = request.channel.transport
        if transport is None or request.method != b"GET":
            # Only a GET can be an upgrade (and HTTP/2 cannot be upgraded).
            request.setResponseCode(_INVALID_UPGRADE.code)
            request.setHeader(b"Content-Type", b"application/json")
            return b"" if request.method == b"HEAD" else dumps(_INVALID_UPGRADE.body())
        protocol = self._factory.buildProtocol(transport.getPeer())
        assert isinstance(protocol, WebSocketA2AProtocol)
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
