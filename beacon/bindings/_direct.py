"""
The direct channel: Beacon's own HTTP/1.1 connection handler for the
requests that make up nearly all of its traffic, in front of twisted.web.

A L{BeaconSite} connection starts as a L{DirectChannel}. For each request
it reads the head at once (one search for the blank line, two regular
expressions over the header block, whose reading is kept for the next
request with the same head: L{read_head}), and when the request is
I{plain} it renders the addressed resource itself, with a
L{DirectRequest}:

    - the request line is C{GET}, C{HEAD} or C{POST}, an origin-form path
      without percent-escapes or empty segments, and C{HTTP/1.1};
    - every header line is a token, a colon and a value of visible
      characters (no obs-fold, no control characters), at most
      C{MAX_HEADERS} lines and C{MAX_HEAD} bytes in all;
    - there is exactly one C{Host} line and no C{Transfer-Encoding},
      C{Expect} or C{Upgrade}; a POST declares one C{Content-Length}
      within the site's C{max_body}, a GET or HEAD none (or 0); a
      declared length over C{max_body} is refused first (see below);
    - the path leads through Beacon's own L{Container}s (whose children
      are in C{children} and nowhere else) to a resource that provides
      L{IDirectResource}: one whose C{render} takes any L{IDirectRequest};
      a leaf takes the rest of the path as its C{postpath}, as twisted.web
      gives it (the HTTP+JSON binding's routes under C{/a2a/rest}).

Anything else, from the first request that is not plain onwards, is
handed over: the connection's bytes go to twisted.web's L{HTTPChannel}
(with L{BeaconSite}'s limits and deadlines), which decides and answers as
it always has: every request whose framing headers are missing, repeated
or unusual is decided there, by one code path. The hand-over waits for a
request in flight, so answers keep their order. What the direct channel
answers is what twisted.web would answer for the same request, header for
header (the C{Date} excepted, which it takes from the site's clock): a test
sends the same requests both ways and compares the bytes, and the HTTP and
WebSocket test suites run once with the direct channel and once without
(C{pytest --http-path=twisted.web}). It is switched off with C{[server]
direct = false} (or C{BeaconSite(direct=False)}).

One answer differs, on purpose. A C{GET}, C{HEAD} or C{POST} whose request
line and head are plain as above and whose declared C{Content-Length} is
over C{max_body} by at most L{DISCARD_MAX} is refused here, whatever its
path (the site's cap is decided before any resource, as twisted.web's
request decides it): 413 C{too_large} at once, before any of the body,
with the body twisted.web's request would send (in the shape of the door
the path belongs to; none to a C{HEAD}) but a direct answer's headers
(C{Server}, C{Date}, no C{Connection: close} unless the request asked to
close), counted and logged as twisted.web's refusal is; then the declared
body is read and dropped as it arrives, never buffered, and the connection
serves the next request. A 413 costs no new connection, as Go's net/http
and nginx drop an unread body to keep theirs. A longer declared body, a
body without a declared length (chunked) that grows over the cap, and any
request on twisted.web's path (C{direct = false}, or a connection already
handed over) are answered 413 by twisted.web's request, which closes the
connection.

Its own limits are the site's: the head must arrive within
C{header_timeout} of its first byte and the body within C{body_timeout}
of the head (408 and close otherwise; a refused body being dropped is
closed without a second answer); a silent connection is closed after
the idle timeout; while a request is in flight at most C{MAX_HEAD} +
C{max_body} bytes more are buffered before reading pauses; while the peer
does not read its answers, no further request is read.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from io import BytesIO
from typing import Any, Callable, Protocol as TypingProtocol
from urllib.parse import parse_qs

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer, IReactorTime, ITCPTransport
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import (
    CACHED,
    INTERNAL_SERVER_ERROR,
    NO_BODY_CODES,
    NO_CONTENT,
    NOT_MODIFIED,
    OK,
    PRECONDITION_FAILED,
    datetimeToString,
    stringToDatetime,
)
from twisted.web.http_headers import Headers
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET
from twisted.web.server import version as _SERVER
from zope.interface import Attribute, Interface, implementer


from beacon.bindings._edge import (
    JSON_TYPE,
    MAX_HEAD,
    Container,
    MAX_HEADERS,
    connection_tokens,
    field_lines,
    log_slow,
    reason_phrase,
    refusal_body,
    refusal_shape,
    refuse_slow,
)


log = Logger()

#: Seconds a closing connection may take to drain before it is aborted.
ABORT_TIMEOUT = 15.0

#: The most bytes of a declared body over C{max_body} that the direct
#: channel reads and drops, after answering 413, to keep the connection
#: (256 KiB, as Go's net/http reads of an unread body to reuse its
#: connection; nginx drops refused bodies likewise). A body declared longer
#: is refused by twisted.web, which closes the connection.
DISCARD_MAX = 262144

_REQUEST_LINE = re.compile(
    rb"(GET|HEAD|POST) (/[^ ?#%\x00-\x20\x7f-\xff]*)(\?[^ #\x00-\x20\x7f-\xff]*)? HTTP/1\.1"
)
#: Request headers whose presence hands a request to twisted.web.
_HANDED_OVER = frozenset((b"transfer-encoding", b"expect", b"upgrade"))


class DirectSite(TypingProtocol):
    """
    What a L{DirectChannel} reads of its site (a L{BeaconSite}): the
    resource tree, the clock and the limits.
    """

    resource: Any
    reactor: IReactorTime
    max_body: int
    timeOut: float | None
    header_timeout: float | None
    body_timeout: float | None
    refusals: Any


class IDirectRequest(Interface):
    """
    The part of twisted.web's L{IRequest} that Beacon's resources use, and
    all of it that a L{DirectRequest} offers: a resource that needs no more
    of its request may be rendered by the direct channel (see
    L{IDirectResource}). twisted.web's L{Request} provides it too.
    """

    method = Attribute("The request method (C{b'GET'}, C{b'HEAD'}, C{b'POST'}).")
    uri = Attribute("The request target as sent: path and query.")
    path = Attribute("The path, without the query.")
    args = Attribute("The query's arguments: a dict of bytes to lists of bytes.")
    content = Attribute("The body, a file-like object positioned at its start.")
    postpath = Attribute("The path segments after the resource rendering it.")
    requestHeaders = Attribute(
        "The request headers: C{getRawHeaders(name, default=None)} (a "
        "sequence of values, not to be changed) and C{hasHeader(name)}."
    )

    def getHeader(name: bytes) -> bytes | None:
        """The last value of request header C{name}, or None."""

    def getClientAddress() -> Any:
        """The peer's address."""

    def setResponseCode(code: int, message: bytes | None = None) -> None:
        """Set the status code, and its reason phrase unless given."""

    def setHeader(name: bytes | str, value: bytes | str) -> None:
        """Set response header C{name} to C{value}, replacing any other."""

    def setETag(etag: bytes) -> object:
        """Set C{ETag}; L{CACHED} when C{If-None-Match} names it."""

    def setLastModified(when: float) -> object:
        """Set C{Last-Modified}; L{CACHED} when C{If-Modified-Since} holds."""

    def write(data: bytes) -> None:
        """Write part of the body; the first write sends the head too."""

    def finish() -> None:
        """The response is complete."""

    def notifyFinish() -> Deferred[None]:
        """Fires when the response is complete, or fails when the peer goes."""


class IDirectResource(IResource):
    """
    A resource whose C{render} takes any L{IDirectRequest}, so that the
    direct channel may render it (a L{DirectRequest} in place of
    twisted.web's request). Its C{render} returns the whole body, or
    L{NOT_DONE_YET} and later writes and finishes the request.
    """


#: A whole answer given without rendering: the status code, the headers
#: (canonical names, in order) and the body.
HeadAnswer = tuple[int, tuple[tuple[bytes, bytes], ...], bytes]


class IHeadGate(IDirectResource):
    """
    A direct resource that may answer some requests without being rendered:
    a door refusing a source over its rate answers from the request's head
    and its peer, at the cost of a few lookups. Only the direct channel
    asks (once the request has all arrived, before anything else is made
    for it); twisted.web renders every request, and the answer must be the
    one rendering would give.
    """

    def answer_head(method: bytes, postpath: list[bytes], peer: Any) -> HeadAnswer | None:
        """
        The whole answer to a request for C{method} with C{postpath} from
        C{peer} (the transport's peer address), or None (having changed
        nothing) to have it rendered. The channel writes it with the headers
        every answer carries (C{Server}, C{Date}, C{Connection: close} when
        asked for) and C{Content-Length}, its bytes made once a second and
        kept (at most L{MAX_ANSWERS}).
        """


def direct_resource(root: Any, path: bytes) -> tuple[Any, list[bytes]] | None:
    """
    The resource that C{path} addresses under C{root}, and the segments left
    for it (its C{postpath}), when the way there goes through Beacon's own
    L{Container}s only (whose children are found in C{children} and nowhere
    else) and it provides L{IDirectResource}; otherwise None. As twisted.web
    traverses, a leaf resource takes the rest of the path, a trailing empty
    segment too (C{/a2a/v1/}).
    """
    found = root
    segments = path[1:].split(b"/")
    for index, segment in enumerate(segments):
        if type(found) is not Container:
            if getattr(found, "isLeaf", False) and IDirectResource.providedBy(found):
                return found, segments[index:]
            return None
        if not segment:
            return None
        found = found.children.get(segment)
        if found is None:
            return None
    return (found, []) if IDirectResource.providedBy(found) else None


@lru_cache(maxsize=256)
def _canonical(name: bytes) -> bytes:
    """The spelling twisted.web gives a header name (C{ETag}, C{Content-Type})."""
    return next(iter(Headers({name: [b""]}).getAllRawHeaders()))[0]


@lru_cache(maxsize=64)
def http_date(seconds: int) -> bytes:
    """An HTTP-date (C{Date}, C{Last-Modified}), formatted once per value."""
    formatted: bytes = datetimeToString(seconds)
    return formatted


class _RequestHeaders:
    """
    The request headers, read-only, as twisted.web's L{Headers} reads them
    (but each name's values are a tuple, shared with the other requests
    of the same head: see L{read_head}).
    """

    __slots__ = ("_headers",)

    def __init__(self, headers: dict[bytes, tuple[bytes, ...]]) -> None:
        self._headers = headers

    def getRawHeaders(self, name: bytes | str, default: Any = None) -> Any:
        if isinstance(name, str):
            name = name.encode("latin-1")
        return self._headers.get(name.lower(), default)

    def hasHeader(self, name: bytes | str) -> bool:
        return self.getRawHeaders(name) is not None


@implementer(IDirectRequest)
class DirectRequest:
    """
    One request read by a L{DirectChannel}: the part of twisted.web's
    L{IRequest} that L{IDirectResource}s use, with twisted.web's behaviour
    (default headers, C{Content-Type} default, chunked framing when no
    length is set, no body for C{HEAD}, 204 and 304, conditional
    requests).
    """

    defaultContentType = b"text/html"

    def __init__(
        self,
        channel: DirectChannel,
        method: bytes,
        uri: bytes,
        path: bytes,
        query: bytes | None,
        headers: dict[bytes, tuple[bytes, ...]],
        body: bytes,
        close: bool,
        postpath: list[bytes],
    ) -> None:
        self.channel = channel
        self.postpath = postpath
        self.method = method
        self.uri = uri
        self.path = path
        self.clientproto = b"HTTP/1.1"
        self.requestHeaders = _RequestHeaders(headers)
        self.content = BytesIO(body)
        self.code = OK
        self.code_message = b"OK"
        self.etag: bytes | None = None
        self.lastModified: int | None = None
        self.startedWriting = False
        self.finished = False
        self.sentLength = 0
        self._query = query
        self._args: dict[bytes, list[bytes]] | None = None
        self._close = close
        self._chunked = False
        self._bodiless = False
        self._disconnected = False
        self._notifications: list[Deferred[None]] = []
        self._answering: list[bytes] | None = None
        out: dict[bytes, bytes] = {}
        if close:
            out[b"Connection"] = b"close"
        out[b"Server"] = _SERVER
        out[b"Date"] = channel.date()
        self._out = out

    # Reading the request.

    @property
    def args(self) -> dict[bytes, list[bytes]]:
        """The query's arguments (parsed when first asked for)."""
        if self._args is None:
            self._args = parse_qs(self._query, keep_blank_values=True) if self._query else {}
        return self._args

    def getHeader(self, name: bytes | str) -> bytes | None:
        """The last value of request header C{name}, or None."""
        values = self.requestHeaders.getRawHeaders(name)
        return values[-1] if values else None

    def getClientAddress(self) -> Any:
        """The peer's address."""
        return self.channel.peer

    # Writing the response.

    def setResponseCode(self, code: int, message: bytes | None = None) -> None:
        """Set the status code (and its phrase)."""
        self.code = code
        self.code_message = message or reason_phrase(code)

    def setHeader(self, name: bytes | str, value: bytes | str) -> None:
        """Set response header C{name} to C{value}, replacing any other."""
        if isinstance(name, str):
            name = name.encode("latin-1")
        if isinstance(value, str):
            value = value.encode("utf-8")
        if b"\r" in value or b"\n" in value:
            value = value.replace(b"\r\n", b" ").replace(b"\r", b" ").replace(b"\n", b" ")
        self._out[_canonical(name)] = value

    def setLastModified(self, when: float) -> object:
        """Set C{Last-Modified}; L{CACHED} when If-Modified-Since holds."""
        when = int(math.ceil(when))
        if not self.lastModified or self.lastModified < when:
            self.lastModified = when
        since = self.getHeader(b"If-Modified-Since")
        if since:
            try:
                modified = stringToDatetime(since.split(b";", 1)[0])
            except (ValueError, IndexError):
                # Not a date (an empty one raises IndexError): no condition.
                return None
            if modified >= self.lastModified:
                self.setResponseCode(NOT_MODIFIED)
                return CACHED
        return None

    def setETag(self, etag: bytes) -> object:
        """Set C{ETag}; L{CACHED} when If-None-Match names it."""
        if etag:
            self.etag = etag
        tags = self.getHeader(b"If-None-Match")
        if tags:
            listed = tags.split()
            if etag in listed or b"*" in listed:
                self.setResponseCode(
                    NOT_MODIFIED
                    if self.method in (b"HEAD", b"GET")
                    else PRECONDITION_FAILED
                )
                return CACHED
        return None

    def write(self, data: bytes) -> None:
        """Write part of the body; the first write sends the head too."""
        if self.finished:
            raise RuntimeError("DirectRequest.write called after finish")
        if self._disconnected:
            return
        if self.startedWriting:
            if data and not self._bodiless:
                self.sentLength += len(data)
                self.channel.write(_chunk(data) if self._chunked else data)
            return
        self.startedWriting = True
        out = self._out
        code = self.code
        bodiless = self.method == b"HEAD" or code in NO_BODY_CODES
        if (
            code not in (NOT_MODIFIED, NO_CONTENT)
            and b"Content-Type" not in out
            and out.get(b"Content-Length") != b"0"
        ):
            out[b"Content-Type"] = self.defaultContentType
        if b"Content-Length" not in out and not bodiless:
            out[b"Transfer-Encoding"] = b"chunked"
            self._chunked = True
        if self.lastModified is not None and b"Last-Modified" not in out:
            out[b"Last-Modified"] = http_date(self.lastModified)
        if self.etag is not None:
            out[b"ETag"] = self.etag
        head = [b"HTTP/1.1 %d %s\r\n" % (code, self.code_message)]
        head += [b"%s: %s\r\n" % item for item in out.items()]
        head.append(b"\r\n")
        self._bodiless = bodiless
        if data and not bodiless:
            self.sentLength += len(data)
            head.append(_chunk(data) if self._chunked else data)
        if self._answering is not None:
            self._answering += head
            return
        self.channel.write(b"".join(head))

    def finish(self) -> None:
        """The response is complete."""
        if self._disconnected:
            raise RuntimeError(
                "DirectRequest.finish called after its connection was lost; "
                "use notifyFinish to keep track of this"
            )
        if self.finished:
            return
        if not self.startedWriting:
            self.write(b"")
        if self._chunked:
            self.channel.write(b"0\r\n\r\n")
        self.finished = True
        notifications, self._notifications = self._notifications, []
        for notification in notifications:
            notification.callback(None)
        self.channel.request_done(self, self._close)

    def response(
        self, code: int, headers: tuple[tuple[bytes, bytes], ...], body: bytes
    ) -> bytes:
        """
        The bytes of the whole answer C{code}, C{headers} and C{body}, as
        rendering would write them (C{setResponseCode}, C{setHeader} for
        each, C{body} returned from C{render}), without writing them: for a
        request nothing has been set on, which is then done with.
        """
        for name, value in headers:
            self.setHeader(name, value)
        self.setResponseCode(code)
        self.setHeader(b"Content-Length", b"%d" % len(body))
        self._answering = []
        self.write(body)
        response = b"".join(self._answering)
        self._answering = None
        return response

    def notifyFinish(self) -> Deferred[None]:
        """Fires with None when the response is complete, or fails when the peer goes."""
        notification: Deferred[None] = Deferred()
        self._notifications.append(notification)
        return notification

    def connection_lost(self, reason: Failure) -> None:
        """The peer went away before the response was complete."""
        self._disconnected = True
        notifications, self._notifications = self._notifications, []
        for notification in notifications:
            notification.errback(reason)

    # Rendering.

    def render(self, found: Any) -> None:
        """Render C{found}, as twisted.web's L{server.Request.render} does."""
        try:
            body = found.render(self)
        except Exception:
            self._failed(Failure())
            return
        if body is NOT_DONE_YET:
            return
        if not isinstance(body, bytes):
            self._failed(Failure(TypeError(f"{found!r} rendered {type(body).__name__}, not bytes")))
            return
        if self.method == b"HEAD":
            if body:
                self.setHeader(b"Content-Length", b"%d" % len(body))
            self.write(b"")
        else:
            self.setHeader(b"Content-Length", b"%d" % len(body))
            self.write(body)
        self.finish()

    def _failed(self, reason: Failure) -> None:
        log.failure(
            "http.render_failed: {method} {path}",
            reason,
            method=self.method.decode("ascii"),
            path=self.path.decode("ascii"),
        )
        if self.startedWriting:
            self.channel.close()
            return
        body = (
            b"<html><head><title>Processing Failed</title></head><body>"
            b"<b>Processing Failed</b></body></html>"
        )
        self.setResponseCode(INTERNAL_SERVER_ERROR)
        self.setHeader(b"Content-Type", b"text/html")
        self.setHeader(b"Content-Length", b"%d" % len(body))
        self.write(body)
        self.finish()


_JSON_CONTENT = ((b"Content-Type", JSON_TYPE),)

#: How many whole answers of L{IHeadGate}s (and 413s) the direct channel keeps made
#: (each for the second of its C{Date}: a few per answer a flood repeats).
MAX_ANSWERS = 64
_answers: dict[tuple[Any, ...], bytes] = {}


#: A request head's field lines as the direct channel reads them: the
#: headers (lower-cased names, each with its values in order), the declared
#: C{Content-Length} (None: none) and whether C{Connection} asks to close.
Head = tuple[dict[bytes, tuple[bytes, ...]], int | None, bool]

#: The longest field block whose reading is kept (L{read_head}), and how
#: many are kept: at most 256 KiB in all.
HEAD_KEPT_SIZE = 1024
MAX_HEADS = 256
_heads: dict[bytes, Head | None] = {}


def read_head(block: bytes) -> Head | None:
    """
    The field lines C{block} of a request head (after the request line's
    line end, up to and including the last line's), when the direct channel
    may answer a request with them: plain lines (L{field_lines}, strict), at
    most L{MAX_HEADERS}, exactly one C{Host}, no C{Transfer-Encoding},
    C{Expect} or C{Upgrade}, at most one C{Content-Length} of digits only;
    otherwise None (the request is handed over).

    A client sends the same head, or a few, again and again (its
    C{Content-Length} aside): the reading of a block of at most
    L{HEAD_KEPT_SIZE} bytes is kept, for at most L{MAX_HEADS} blocks, and
    read again only once the blocks kept are forgotten. The values are
    tuples, shared by every request with that head.
    """
    kept = _heads.get(block, _heads)
    if kept is not _heads:
        return kept  # type: ignore[return-value]
    head = _read_head(block)
    if len(block) <= HEAD_KEPT_SIZE:
        if len(_heads) >= MAX_HEADS:
            _heads.clear()
        _heads[block] = head
    return head


def _read_head(block: bytes) -> Head | None:
    lines = field_lines(block, strict=True)
    if lines is None or len(lines) > MAX_HEADERS:
        return None
    gathered: dict[bytes, list[bytes]] = {}
    for name, value in lines:
        name = name.lower()
        if name in gathered:
            gathered[name].append(value)
        else:
            gathered[name] = [value]
    declared = gathered.get(b"content-length")
    hosts = gathered.get(b"host")
    if (
        hosts is None
        or len(hosts) != 1
        or not _HANDED_OVER.isdisjoint(gathered)
        or (declared is not None and (len(declared) != 1 or not declared[0].isdigit()))
    ):
        return None
    close = b"close" in connection_tokens(gathered.get(b"connection"))
    headers = {name: tuple(values) for name, values in gathered.items()}
    return headers, None if declared is None else int(declared[0]), close


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@implementer(IPushProducer)
class DirectChannel(Protocol):
    """
    A L{BeaconSite} connection: plain requests to direct resources are
    answered here, and the connection is handed to twisted.web's channel at
    the first request that is not (see the module docstring).
    """

    #: A stream transport (TCP, TLS or unix): a producer's consumer too.
    transport: Any

    def __init__(
        self,
        site: DirectSite,
        fallback: Callable[[], Any],
        release: Callable[[], None],
    ) -> None:
        """
        @param site: The site (its resource tree, clock and limits).
        @param fallback: Builds the twisted.web channel for a hand-over.
        @param release: Called when the connection ends: the site counts it
            no longer.
        """
        self._site = site
        self._release = release
        self._clock = site.reactor
        self._fallback = fallback
        self.http: Any = None
        self._buffer = b""
        self._current: DirectRequest | None = None
        self._parsing = False
        self._hand_over_pending = False
        self._write_paused = False
        self._reading_paused = False
        self._closing = False
        #: The arrival deadline (see L{_arm}): the phase that must end
        #: (None: disarmed), when it is due, and the timer.
        self._phase: str | None = None
        self._due = 0.0
        self._deadline: Any = None
        self._idle: Any = None
        self._abort: Any = None
        self._last_activity = 0.0
        #: Bytes of a refused body still to read and drop.
        self._discard = 0
        #: The peer's address (the transport's, read once: every request
        #: asks for it, and a transport makes a new address object each
        #: time).
        self.peer: Any = None

    # Connection events.

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.peer = self.transport.getPeer()
        if ITCPTransport.providedBy(self.transport):
            # One write per answer: Nagle's algorithm would only delay it.
            self.transport.setTcpNoDelay(True)
        self.transport.registerProducer(self, True)
        self._last_activity = self._clock.seconds()
        if self._site.timeOut:
            self._idle = self._clock.callLater(self._site.timeOut, self._idle_check)

    def dataReceived(self, data: bytes) -> None:
        if self.http is not None:
            self.http.dataReceived(data)
            return
        if self._closing:
            return
        self._last_activity = self._clock.seconds()
        if self._discard:
            # A refused body: dropped as it comes (nothing is buffered
            # meanwhile); what follows it is the next request.
            dropped = min(self._discard, len(data))
            self._discard -= dropped
            if self._discard:
                return
            self._cancel_deadline()
            data = data[dropped:]
            if not data:
                self._read_requests()
                return
        self._buffer = self._buffer + data if self._buffer else data
        if self._current is None:
            self._read_requests()
        elif len(self._buffer) > MAX_HEAD + self._site.max_body:
            self._set_reading()

    def connectionLost(self, reason: Failure | None = None) -> None:
        self._release()
        self._stop_timers()
        if self._abort is not None and self._abort.active():
            self._abort.cancel()
        self._buffer = b""
        self._discard = 0
        if self.http is not None:
            self.http.connectionLost(reason)
            return
        current, self._current = self._current, None
        if current is not None:
            current.connection_lost(reason or Failure(ConnectionError("connection lost")))

    # IPushProducer, for the transport's write buffer.

    def pauseProducing(self) -> None:
        """The peer is not reading its answers: read no further request."""
        self._write_paused = True
        self._set_reading()

    def resumeProducing(self) -> None:
        """The answers drained: go on."""
        self._write_paused = False
        self._set_reading()
        if self._current is None and self.http is None:
            self._read_requests()

    def stopProducing(self) -> None:
        """The transport is going away."""

    # Reading requests.

    def _read_requests(self) -> None:
        if self._parsing:
            return
        self._parsing = True
        try:
            while (
                self._buffer
                and self._current is None
                and self.http is None
                and not self._write_paused
                and not self._closing
            ):
                if not self._read_one():
                    break
        finally:
            self._parsing = False
        if self._current is None and self.http is None and not self._closing:
            self._time_arrival()

    def _read_one(self) -> bool:
        """
        Read and start the request at the head of the buffer.

        @return: Whether one was started (False: it has not all arrived,
            or the connection was handed over).
        """
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
        if end < 0:
            if len(buffer) > MAX_HEAD:
                self._hand_over()
            return False
        line_end = buffer.find(b"\r\n")
        line = _REQUEST_LINE.fullmatch(buffer, 0, line_end)
        if line is None:
            self._hand_over()
            return False
        head = read_head(buffer[line_end + 2 : end + 2])
        if head is None:
            self._hand_over()
            return False
        headers, declared, close = head
        method = line.group(1)
        path = line.group(2)
        length = declared or 0
        max_body = self._site.max_body
        start = end + 4
        if length > max_body:
            # The site's cap, decided before any resource, as twisted.web's
            # request decides it: refused here whatever the path and method,
            # unless the body is too long to drop (twisted.web answers).
            if length > max_body + DISCARD_MAX:
                self._hand_over()
                return False
            return self._refuse_too_large(method, path, close, buffer, start, length)
        # A POST without a declared length, or a GET or HEAD with a body:
        # twisted.web answers.
        unusual = declared is None if method == b"POST" else length != 0
        if unusual:
            self._hand_over()
            return False
        target = direct_resource(self._site.resource, path)
        if target is None:
            self._hand_over()
            return False
        if len(buffer) < start + length:
            return False
        found, postpath = target
        if IHeadGate.providedBy(found):
            answer = found.answer_head(method, postpath, self.peer)
            if answer is not None:
                self._buffer = buffer[start + length :]
                self._cancel_deadline()
                self.write(self._head_answer(method, close, answer))
                if close:
                    self.close()
                    return False
                return True
        body = buffer[start : start + length]
        self._buffer = buffer[start + length :]
        query = line.group(3)
        uri = path + query if query else path
        request = DirectRequest(
            self, method, uri, path, query[1:] if query else None, headers, body, close, postpath
        )
        self._current = request
        self._cancel_deadline()
        request.render(found)
        return True

    def _refuse_too_large(
        self,
        method: bytes,
        path: bytes,
        close: bool,
        buffer: bytes,
        start: int,
        length: int,
    ) -> bool:
        """
        Answer 413 at once to a request whose declared body of C{length}
        bytes (from C{start} in C{buffer}) is over the cap, count and log
        it; then close if it asked to (C{close}), or drop its body as it
        arrives.

        @return: Whether the body is all dropped already (the next request
            may be read).
        """
        site = self._site
        limit = site.max_body
        assert self.transport is not None
        source = str(getattr(self.peer, "host", "unknown"))
        site.refusals.too_large(source, limit, self._clock)
        body = refusal_body(
            refusal_shape(site.resource, path),
            413,
            "too_large",
            f"the request body exceeds {limit} bytes",
        )
        self.write(self._head_answer(method, close, (413, _JSON_CONTENT, body)))
        self._cancel_deadline()
        if close:
            self._buffer = b""
            self.close()
            return False
        arrived = len(buffer) - start
        if arrived >= length:
            self._buffer = buffer[start + length :]
            return True
        self._buffer = b""
        self._discard = length - arrived
        return False

    def _head_answer(self, method: bytes, close: bool, answer: HeadAnswer) -> bytes:
        """
        The bytes of an answer given from the head (an L{IHeadGate}'s, or a
        413 for a declared body over the cap), made once a second and kept.
        """
        code, headers, body = answer
        key = (code, headers, body, self.date(), close, method)
        response = _answers.get(key)
        if response is None:
            made = DirectRequest(self, method, b"", b"", None, {}, b"", close, [])
            response = made.response(code, headers, body)
            if len(_answers) >= MAX_ANSWERS:
                _answers.clear()
            _answers[key] = response
        return response

    def request_done(self, request: DirectRequest, close: bool) -> None:
        """C{request}'s response is complete: read the next, or close."""
        if request is not self._current:
            return
        self._current = None
        self._last_activity = self._clock.seconds()
        if close:
            self.close()
            return
        if self._hand_over_pending:
            self._hand_over()
            return
        self._set_reading()
        self._read_requests()

    # Writing and closing.

    def date(self) -> bytes:
        """The C{Date} header's value: now, on the site's clock."""
        return http_date(int(self._clock.seconds()))

    def write(self, data: bytes) -> None:
        """Write C{data} to the peer."""
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        """Close once the answers are written; abort if they do not drain."""
        if self._closing:
            return
        self._closing = True
        self._stop_timers()
        assert self.transport is not None
        self.transport.loseConnection()
        self._abort = self._clock.callLater(ABORT_TIMEOUT, self._abort_now)

    loseConnection = close

    def _abort_now(self) -> None:
        self._abort = None
        assert self.transport is not None
        self.transport.abortConnection()

    # The hand-over to twisted.web.

    def _hand_over(self) -> None:
        """From now on, twisted.web's channel serves this connection."""
        if self._current is not None:
            self._hand_over_pending = True
            return
        self._hand_over_pending = False
        self._stop_timers()
        assert self.transport is not None
        self.transport.unregisterProducer()
        if self._reading_paused:
            self._reading_paused = False
            self.transport.resumeProducing()
        channel = self._fallback()
        self.http = channel
        channel.makeConnection(self.transport)
        data, self._buffer = self._buffer, b""
        if data:
            channel.dataReceived(data)

    # Flow control and time.

    def _set_reading(self) -> None:
        """Read from the peer unless its answers or its requests back up."""
        if self.transport is None or self.http is not None:
            return
        pause = self._write_paused or (
            self._current is not None and len(self._buffer) > MAX_HEAD + self._site.max_body
        )
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                self.transport.pauseProducing()
            else:
                self.transport.resumeProducing()

    def _time_arrival(self) -> None:
        """Start the deadline of what the buffer holds half-arrived (or of a body being dropped)."""
        if self._discard:
            phase = "body"
        elif not self._buffer:
            self._cancel_deadline()
            return
        else:
            phase = "body" if b"\r\n\r\n" in self._buffer[: MAX_HEAD + 4] else "headers"
        if phase == self._phase:
            return
        self._cancel_deadline()
        seconds = self._timeout(phase)
        if seconds:
            self._arm(phase, seconds)

    def _timeout(self, phase: str) -> float | None:
        """The site's seconds for C{phase} (C{"headers"} or C{"body"}), or None."""
        setting = "body_timeout" if phase == "body" else "header_timeout"
        seconds: float | None = getattr(self._site, setting, None)
        return seconds

    # The arrival deadline: one timer for the connection. Arming it sets
    # when the phase must end; disarming forgets that. The timer is made
    # only when none is pending, moved sooner when the deadline is sooner
    # than it, and otherwise left to run: when it comes it checks the
    # deadline of the moment, and waits again for a later one. A flood of
    # requests that each arrive in two reads (a 413's dropped body) so
    # costs a few attribute writes each, not a DelayedCall made and
    # cancelled per request.

    def _arm(self, phase: str, seconds: float) -> None:
        """The C{phase} (C{"headers"} or C{"body"}) must end within C{seconds}."""
        due = self._clock.seconds() + seconds
        self._phase = phase
        self._due = due
        timer = self._deadline
        if timer is None:
            self._deadline = self._clock.callLater(seconds, self._deadline_reached, due)
        elif timer.getTime() > due:
            timer.reset(seconds)

    def _deadline_reached(self, due: float) -> None:
        """The timer set for C{due} came: time out, or wait for a later deadline."""
        self._deadline = None
        phase = self._phase
        if phase is None:
            return
        now = self._clock.seconds()
        if due < self._due and now < self._due:
            # Armed again since the timer was set: wait for the new deadline
            # (unless the reactor comes so late that it is past too).
            self._deadline = self._clock.callLater(
                self._due - now, self._deadline_reached, self._due
            )
            return
        self._too_slow(phase, self._timeout(phase) or 0.0)

    def _too_slow(self, what: str, seconds: float) -> None:
        self._phase = None
        self._site.refusals["request_timeout"] += 1
        if self._discard:
            # A refused body that did not come: its 413 is sent, so no
            # second answer, only the close.
            self._discard = 0
            log_slow(self, what, seconds)
            self.close()
            return
        refuse_slow(self, what, seconds)

    def _cancel_deadline(self) -> None:
        """Disarm the deadline (its timer, if any, is left to run out)."""
        self._phase = None

    def _idle_check(self) -> None:
        timeout: float = self._site.timeOut or 0.0
        now = self._clock.seconds()
        if self._current is None and now - self._last_activity >= timeout:
            self._idle = None
            assert self.transport is not None
            log.info(
                "http.idle_timeout: closed a connection from {source} silent for {seconds} s",
                source=getattr(self.peer, "host", "unknown"),
                seconds=timeout,
            )
            self.close()
            return
        wait = timeout if self._current is not None else self._last_activity + timeout - now
        self._idle = self._clock.callLater(wait, self._idle_check)

    def _stop_timers(self) -> None:
        self._phase = None
        if self._deadline is not None:
            if self._deadline.active():
                self._deadline.cancel()
            self._deadline = None
        if self._idle is not None:
            if self._idle.active():
                self._idle.cancel()
            self._idle = None


__all__ = [
    "DISCARD_MAX",
    "DirectChannel",
    "DirectRequest",
    "IDirectRequest",
    "HeadAnswer",
    "IHeadGate",
    "IDirectResource",
    "direct_resource",
    "read_head",
]
