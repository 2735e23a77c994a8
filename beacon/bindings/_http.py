"""
The public HTTP surface: discovery documents and the A2A JSON-RPC binding.

Wire contract (A2A 1.0 JSON-RPC binding, Beacon's public policy)::

    GET|HEAD /.well-known/agent-card.json
        200 application/json, prepared bytes; Cache-Control max-age,
        ETag and Last-Modified (304 on a matching If-None-Match or
        If-Modified-Since); any other method: 405 with Allow.

    POST /a2a/v1            (JSON-RPC 2.0, one request per body; /a2a/v1/ too)
        A2A-Version: 1.0    header, or ?A2A-Version=1.0 (the header wins)
        A2A-Extensions: ... optional; activated ones are echoed
        -> 200 application/json {"jsonrpc":"2.0","id":...,"result"|"error"}
        -> 204 (no body) for a notification (no "id")
        Transport refusals, before any JSON is parsed:
        -> 413 {"error":{"code":"too_large","message":...}}
           body over [limits] max_body (inclusive cap); a declared
           Content-Length over the cap is refused at once, before the
           body: on the direct channel, when it is over by at most
           DISCARD_MAX (256 KiB), the body is then read and dropped and
           the connection kept; otherwise (longer, or on twisted.web's
           path) the connection is closed without reading the body
        -> 429 {"error":{"code":"rate_limited","message":...}} + Retry-After
        -> 401 {"error":{"code":"unauthenticated","message":...}} +
           WWW-Authenticate, when [auth] is configured and neither
           Authorization: Bearer nor X-API-Key carries a known credential
        -> 405 {"error":{"code":"method_not_allowed",...}} + Allow

The body cap is enforced while the body arrives (L{LimitedRequest}), so no
more than C{max_body} bytes are ever buffered, chunked bodies included; the
resource checks again so that it holds when mounted in a foreign L{Site}.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, NamedTuple

from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, server
# Bound once: attribute reads on twisted.web.http go through its deprecation proxy.
from twisted.web.http import CACHED, NO_CONTENT, NOT_MODIFIED
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET
from zope.interface import alsoProvides, implementer

from beacon.bindings._auth import SubmitterAuth
from beacon.bindings._direct import (
    DirectChannel,
    HeadAnswer,
    IDirectRequest,
    IDirectResource,
    IHeadGate,
)
from beacon.bindings._edge import (
    CORS_EXPOSED_HEADERS,
    CORS_MAX_AGE,
    CORS_REQUEST_HEADERS,
    JSON_TYPE,
    MAX_HEADERS,
    ConnectionRefusal,
    IPreflight,
    MethodsResource,
    RefusalShape,
    connection_tokens,
    error_body,
    framing_problem,
    is_json_media_type,
    native_refusal,
    refusal_body,
    refusal_shape,
    refuse,
    reason_phrase,
    refuse_connection,
    refuse_slow,
)
from beacon.bindings._limits import RateLimiter, SourceResolver
from beacon.bindings.refusals import Refusals
from beacon.capped import CappedRequest
from beacon.config import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY,
)
from beacon.protocol import (
    A2AError,
    CallContext,
    Dispatcher,
    EventStream,
    IStreamSink,
    StreamAnswer,
    dumps,
    failure,
    parse_extensions,
    success,
)

log = Logger()


@implementer(IDirectRequest)
class LimitedRequest(CappedRequest):
    """
    A request that never buffers more than its site's C{max_body} bytes of
    body. Over the cap it answers 413 at once and closes the connection:
    when the declared Content-Length is over, before reading the body; when a
    chunked or streamed body grows over, as soon as it does. (The direct
    channel answers a declared length over the cap by at most its
    C{DISCARD_MAX} itself and keeps the connection; this request, on
    twisted.web's path, always closes it.)

    Its site also bounds its time (see L{BeaconSite}): the request line and
    headers must arrive within C{header_timeout} of their first byte, and
    the body within C{body_timeout} of the headers; otherwise 408 and the
    connection is closed (a peer that sends one byte a second is cut off,
    not served). This request says which phase it is in.
    """

    #: The request line's target, as sent (set by L{BeaconHTTPChannel}
    #: when the line arrives), for refusals before the request is whole.
    target = b""
    #: Whether the request is still arriving (not yet whole, not refused).
    receiving = True
    #: The phase still arriving: its timeout setting, and its name.
    phase = ("header_timeout", "headers")

    def _site_value(self, name: str, default: Any) -> Any:
        site = getattr(self.channel, "site", None)
        return getattr(site, name, default)

    def body_limit(self) -> int:
        """The site's C{max_body}."""
        return int(self._site_value("max_body", DEFAULT_MAX_BODY))

    def body_expected(self) -> None:
        """The body's phase (and its timeout) begins."""
        self.phase = ("body_timeout", "body")

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        """
        Process the request, unless it was already refused or its framing
        headers are wrong (see L{framing_problem}): then 400 and close.
        """
        self.receiving = False
        if self.refused:
            return
        problem = framing_problem(self.requestHeaders, version)
        if problem is not None:
            log.info(
                "http.bad_request: refused a request from {source}: {problem}",
                source=self._peer_host(),
                problem=problem,
            )
            self._count_refusal("invalid")
            self._refuse_raw(b"400 Bad Request", error_body("bad_request", problem))
            return
        super().requestReceived(command, path, version)

    def setLastModified(self, when: float) -> object:
        """
        Set C{Last-Modified}; L{CACHED} when C{If-Modified-Since} holds. An
        C{If-Modified-Since} that is not a date is no condition (RFC 9110
        13.1.3), an empty one too (twisted.web's date parser raises
        IndexError on it).
        """
        try:
            cached: object = super().setLastModified(when)
        except IndexError:
            return None
        return cached

    def setResponseCode(self, code: int, message: bytes | None = None) -> None:
        """Set the status, with RFC 9110's reason phrase unless one is given."""
        super().setResponseCode(code, reason_phrase(code) if message is None else message)

    def connectionLost(self, reason: Any) -> None:
        """The connection went away: nothing more arrives."""
        self.receiving = False
        super().connectionLost(reason)

    def _peer_host(self) -> str:
        transport = self.channel.transport if self.channel else None
        peer = transport.getPeer() if transport else None
        return str(getattr(peer, "host", "unknown"))

    def _refuse_raw(self, status: bytes, body: bytes) -> None:
        """
        Answer before the request is complete, then close: the channel is
        still reading this request, so the answer goes straight to the
        transport.
        """
        self.stop_reading()
        refuse_connection(self.channel, status, body)

    def stop_reading(self) -> None:
        """Refuse the rest, which is no longer arriving."""
        super().stop_reading()
        self.receiving = False

    def _count_refusal(self, reason: str) -> None:
        refusals = self._site_value("refusals", None)
        if refusals is not None:
            refusals[reason] += 1

    def refuse_too_large(self) -> None:
        """
        413 in the shape of the request's door, counted and logged (through
        the site's L{Refusals.too_large}: a line per source an interval at
        most), then close.
        """
        limit = self.body_limit()
        refusals = self._site_value("refusals", None)
        clock = self._site_value("reactor", None)
        if refusals is not None and clock is not None:
            refusals.too_large(self._peer_host(), limit, clock)
        else:
            log.warn(
                "http.too_large: refused a request body over {limit} bytes from {source}",
                limit=limit,
                source=self._peer_host(),
            )
        # In the shape of the door the request was for (its resource is not
        # reached: the request is not whole).
        shape = refusal_shape(self._site_value("resource", None), self.target)
        body = shape(413, "too_large", f"the request body exceeds {limit} bytes", {})
        self._refuse_raw(b"413 Content Too Large", body)

    def refuse_slow(self, what: str, seconds: float) -> None:
        """
        Answer 408 and close: the phase C{what} took over C{seconds}.
        """
        self._count_refusal("request_timeout")
        self.stop_reading()
        refuse_slow(self.channel, what, seconds)


class BeaconHTTPChannel(http.HTTPChannel):
    """
    twisted.web's HTTP/1.1 channel, as L{BeaconSite} serves it:

        - C{Connection} is read as RFC 9110 7.6.1 reads it: its field lines
          combine into one comma-separated list, and C{close} anywhere in
          it closes the connection after the answer (twisted.web reads the
          first line only, split at spaces);
        - at most L{MAX_HEADERS} header lines, as on the direct channel;
        - the arrival deadlines: a request line and headers have the site's
          C{header_timeout} from their first byte, a body C{body_timeout}
          from the end of the headers (408 and close otherwise). They are
          checked after each read, and nothing is scheduled while nothing
          is half-arrived, so a request that comes whole in one read, the
          usual case, costs no timer.

    @ivar release_connection: Called once when the connection ends, or
        when a binding takes it over (the WebSocket upgrade): from then on
        the site does not count it.
    """

    maxHeaders = MAX_HEADERS
    #: Set by the site that builds the channel.
    site: BeaconSite

    def __init__(self) -> None:
        super().__init__()
        self.release_connection: Callable[[], None] = lambda: None
        self._deadline: Any = None
        self._phase: tuple[str, str] | None = None
        # Bytes read, and bytes the line parser has passed on (as lines or
        # raw data): the difference is a line still arriving.
        self._received = 0
        self._consumed = 0

    def checkPersistence(self, request: http.Request, version: bytes) -> bool:
        """
        Whether the connection stays open after C{request}'s answer: for
        HTTP/1.1, unless its C{Connection} options hold C{close} (then the
        answer says C{Connection: close}); never for older versions.
        """
        if version != b"HTTP/1.1":
            return False
        if b"close" in connection_tokens(request.requestHeaders.getRawHeaders(b"Connection")):
            request.responseHeaders.setRawHeaders(b"Connection", [b"close"])
            return False
        return True

    def lineReceived(self, line: bytes) -> None:
        """A line of a request head (counted, then parsed)."""
        self._consumed += len(line) + 2
        requests = len(self.requests)
        super().lineReceived(line)
        if len(self.requests) > requests:
            # A request line: the new request learns its target, for the
            # shape of a refusal before it is whole.
            parts = line.split(b" ")
            self.requests[-1].target = parts[1] if len(parts) == 3 else b""

    def rawDataReceived(self, data: bytes) -> None:
        """Body bytes, or bytes held while a request is answered (counted, then read)."""
        self._consumed += len(data)
        super().rawDataReceived(data)

    def dataReceived(self, data: bytes) -> None:
        """Read C{data}, then time whatever it left half-arrived."""
        self._received += len(data)
        super().dataReceived(data)
        partial_line = self._received != self._consumed
        if not partial_line:
            self._received = self._consumed = 0
        requests = self.requests
        request = requests[-1] if requests else None
        phase: tuple[str, str] | None = None
        if request is not None and getattr(request, "receiving", False):
            phase = request.phase
        elif (request is None or request.finished) and partial_line:
            # Between requests, a line without its end: a request line is
            # arriving.
            phase = ("header_timeout", "headers")
        if phase != self._phase:
            self._cancel_deadline()
            if phase is not None:
                seconds = getattr(self.site, phase[0], None)
                if seconds:
                    self._phase = phase
                    self._deadline = self.site.reactor.callLater(seconds, self._expired)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """The connection is gone: the site counts it no longer."""
        self.release_connection()
        self._cancel_deadline()
        super().connectionLost(reason)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = self._phase = None

    def _expired(self) -> None:
        assert self._phase is not None
        setting, what = self._phase
        seconds = getattr(self.site, setting)
        self._deadline = self._phase = None
        requests = self.requests
        request = requests[-1] if requests else None
        if request is not None and getattr(request, "receiving", False):
            request.refuse_slow(what, seconds)
            return
        self.site.refusals["request_timeout"] += 1
        refuse_slow(self, "request line", seconds)


class BeaconSite(server.Site):
    """
    A L{Site} whose requests are L{LimitedRequest}s, which never shows a
    traceback to a peer, never parses bodies as HTML forms (Beacon speaks
    JSON; form parsing would also cost a MIME parse of every POST's
    Content-Type), and writes a per-request access log line only when asked.
    """

    protocol = BeaconHTTPChannel  # type: ignore[assignment]
    requestFactory = LimitedRequest
    displayTracebacks = False
    #: The process-wide off switch of the direct channel: False, and no
    #: site answers on it, whatever it was built with (the test suite's
    #: C{--http-path=twisted.web} run sets it).
    direct_default = True

    def __init__(
        self,
        resource: IResource,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        access_log: bool = False,
        clock: IReactorTime | None = None,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        header_timeout: float | None = DEFAULT_HEADER_TIMEOUT,
        body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
        max_connections: int = 0,
        max_connections_per_source: int = 0,
        direct: bool = True,
        **kw: Any,
    ) -> None:
        """
        @param resource: The root resource.
        @param max_body: The body cap, in bytes (inclusive).
        @param access_log: Whether to log a combined-format line for every
            request (Beacon's own events already record every refusal and
            every stored submission).
        @param clock: Times every timeout (the reactor; a Clock in tests).
        @param idle_timeout: Seconds a connection may stay silent; None: no
            limit.
        @param header_timeout: Seconds from a request line to the end of its
            headers; None: no limit.
        @param body_timeout: Seconds from the headers to the end of the
            body; None: no limit.
        @param max_connections: Open connections this listener holds at
            most; 0: no cap.
        @param max_connections_per_source: Open connections one source
            address holds at most; 0: no cap.
        @param direct: Whether connections start on the direct channel
            (L{beacon.bindings._direct}), which answers plain requests to
            Beacon's resources itself and hands anything else to
            twisted.web; False: twisted.web serves every request. With
            C{access_log}, twisted.web serves every request, so that every
            request has its line.
        """
        super().__init__(
            resource,
            parsePOSTFormSubmission=False,
            reactor=clock,
            timeout=idle_timeout,
            **kw,
        )
        self.max_body = max_body
        self.access_log = access_log
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_connections = max_connections
        self.max_connections_per_source = max_connections_per_source
        self.open_connections = 0
        self._by_source: dict[str, int] = {}
        self._refusing: set[str] = set()
        self.direct = direct and self.direct_default and not access_log
        #: This listener's refusals (the public site shares its
        #: L{TransportLimits}' when Beacon's metrics are on).
        self.refusals = Refusals()

    def stopFactory(self) -> None:
        """No longer listening: log what the throttled refusal lines have counted."""
        super().stopFactory()
        self.refusals.stop_logging()

    def log(self, request: http.Request) -> None:
        """Write the access log line, if access logging is on."""
        if self.access_log:
            super().log(request)

    def buildProtocol(self, addr: Any) -> Any:
        """
        A channel for a new connection, unless the listener or the source is
        at its connection cap: then a refusal that answers 503
        C{too_many_connections} and closes, so the service keeps answering
        everyone else.
        """
        source = str(getattr(addr, "host", "unix"))
        held = self._by_source.get(source, 0)
        if (self.max_connections and self.open_connections >= self.max_connections) or (
            self.max_connections_per_source and held >= self.max_connections_per_source
        ):
            self.refusals["too_many_connections"] += 1
            if source not in self._refusing:
                self._refusing.add(source)
                log.warn(
                    "http.connection_refused: {source} holds {held} connections, "
                    "the listener {open} (caps {per_source} and {total})",
                    source=source,
                    held=held,
                    open=self.open_connections,
                    per_source=self.max_connections_per_source,
                    total=self.max_connections,
                )
            return ConnectionRefusal()
        self.open_connections += 1
        self._by_source[source] = held + 1
        released: list[bool] = []

        def release() -> None:
            if released:
                return
            released.append(True)
            self.open_connections -= 1
            remaining = self._by_source[source] - 1
            if remaining:
                self._by_source[source] = remaining
            else:
                del self._by_source[source]
            self._refusing.discard(source)

        if self.direct:
            return DirectChannel(self, lambda: self._http_channel(addr, release), release)
        return self._http_channel(addr, release)

    def _http_channel(self, addr: Any, release: Callable[[], None]) -> Any:
        """
        twisted.web's channel for a connection (a L{BeaconHTTPChannel}),
        which calls C{release} when the connection ends or is taken over.
        """
        channel = super().buildProtocol(addr)
        channel.release_connection = release
        return channel


class PreparedDocument:
    """
    A JSON document served as prepared bytes, with its validators (ETag,
    Last-Modified). It is published once the public URL is known.
    """

    def __init__(self) -> None:
        self.body = b""
        self.etag = b""
        self.modified = 0.0

    def publish(self, document: Any, modified: float) -> None:
        """
        Replace the served document.

        @param document: The JSON value.
        @param modified: Its modification time (seconds since the epoch).
        """
        self.body = dumps(document)
        self.etag = b'"' + hashlib.sha256(self.body).hexdigest()[:32].encode() + b'"'
        self.modified = float(math.floor(modified))

    @property
    def published(self) -> bool:
        """Whether there is a document to serve."""
        return bool(self.body)


@implementer(IDirectResource)
class DocumentResource(MethodsResource):
    """
    Serves a L{PreparedDocument} on GET and HEAD, with cache validators.
    """

    allowed = (b"GET", b"HEAD")

    def __init__(self, document: PreparedDocument, max_age: int = 300) -> None:
        """
        @param document: What to serve.
        @param max_age: The Cache-Control max-age, in seconds.
        """
        super().__init__()
        self._document = document
        self._cache_control = f"public, max-age={max_age}".encode("ascii")

    def render_GET(self, request: server.Request) -> bytes | int:
        document = self._document
        if not document.published:
            return refuse(request, 503, "unavailable", "not published yet")
        request.setHeader(b"Content-Type", JSON_TYPE)
        request.setHeader(b"Cache-Control", self._cache_control)
        request.setHeader(b"Access-Control-Allow-Origin", b"*")
        cached = request.setETag(document.etag)
        if request.setLastModified(document.modified) == CACHED or cached == CACHED:
            # No Content-Length on a 304 (RFC 9110 8.6): finished, not rendered.
            request.setResponseCode(NOT_MODIFIED)
            request.finish()
            return NOT_DONE_YET
        return document.body

    render_HEAD = render_GET


@implementer(IPreflight)
@dataclass(frozen=True)
class TransportLimits:
    """
    What every public binding enforces before parsing: the body cap, the
    per-source rate, how the source is named and, when configured, the
    submitter's credentials.
    """

    max_body: int
    rate: RateLimiter
    sources: SourceResolver
    auth: SubmitterAuth = SubmitterAuth()
    #: The web origins (C{scheme://host[:port]}, lower case) whose pages may
    #: call the RPC endpoints (C{[server] cors_origins}); empty: none.
    cors_origins: frozenset[str] = frozenset()
    #: The refusals made under these limits, by reason.
    refusals: Refusals = field(default_factory=Refusals, compare=False)

    def allow_origin(self, request: server.Request) -> bool:
        """
        When C{request}'s C{Origin} is one of C{cors_origins}, say so in the
        response's CORS headers.

        @return: Whether it is.
        """
        if not self.cors_origins:
            return False
        origin = request.getHeader(b"Origin")
        if origin is None or origin.decode("latin-1").lower() not in self.cors_origins:
            return False
        request.setHeader(b"Access-Control-Allow-Origin", origin)
        request.setHeader(b"Vary", b"Origin")
        return True

    def preflight(self, request: server.Request, allowed: tuple[bytes, ...]) -> bool:
        """
        Answer a CORS preflight (204 with the allowed method and headers)
        when its origin is listed and it asks for a method in C{allowed}.

        @return: Whether it was answered; otherwise nothing is set.
        """
        method = request.getHeader(b"Access-Control-Request-Method")
        if method is None or method not in allowed or not self.allow_origin(request):
            return False
        request.setResponseCode(NO_CONTENT)
        request.setHeader(b"Access-Control-Allow-Methods", b", ".join(allowed))
        request.setHeader(b"Access-Control-Allow-Headers", CORS_REQUEST_HEADERS)
        request.setHeader(b"Access-Control-Max-Age", CORS_MAX_AGE)
        return True

    def answer_head(self, peer: Any, shape: RefusalShape = native_refusal) -> HeadAnswer | None:
        """
        For a door's L{IHeadGate}, on the direct channel, before a request
        from C{peer} is made or rendered: the 429 that L{refusal} would give
        when the source is over its rate. Nothing else is decided, and no
        token taken (the rendering's L{refusal} takes it). A request whose
        rendering adds to a refusal (the CORS headers of a listed origin) or
        names its source from its headers (trusted proxies) is left to the
        rendering.

        @return: The answer, or None.
        """
        if self.cors_origins or self.sources.trusts_proxies or self.rate.rate <= 0:
            return None
        source = self.sources.resolve(peer, None)
        retry = self.rate.refusal(source, self.refusals, log, _RATE_LIMITED, take=False)
        if retry is None:
            return None
        limited = _rate_limited(retry)
        return (
            429,
            limited.answer_headers,
            refusal_body(shape, 429, "rate_limited", limited.message, limited.headers),
        )

    def source_of(self, request: server.Request) -> str:
        """The source of C{request} (see L{SourceResolver})."""
        sources = self.sources
        return sources.resolve(
            request.getClientAddress(),
            (
                request.requestHeaders.getRawHeaders(b"X-Forwarded-For")
                if sources.trusts_proxies
                else None
            ),
        )

    def refusal(
        self,
        request: server.Request,
        source: str,
        *,
        json_body: bool = False,
        media: tuple[bytes, ...] = (JSON_TYPE,),
        shape: RefusalShape = native_refusal,
    ) -> bytes | None:
        """
        Apply the rate limit, the media type (with C{json_body}: 415 unless
        C{Content-Type} is one of C{media}), the credential check (HTTP
        401 with C{WWW-Authenticate}) and the body cap to C{request}, in that
        order. A request from one of C{cors_origins} gets its CORS headers
        first, so that its page can read a refusal too.

        @param shape: How the door spells a refusal's body.
        @return: The refusal body (status and headers already set), or None
            when the request may go on.
        """
        if self.cors_origins and self.allow_origin(request):
            request.setHeader(b"Access-Control-Expose-Headers", CORS_EXPOSED_HEADERS)
        retry = self.rate.refusal(source, self.refusals, log, _RATE_LIMITED)
        if retry is not None:
            limited = _rate_limited(retry)
            return refuse(request, 429, "rate_limited", limited.message, limited.headers, shape)
        if json_body and not is_json_media_type(request.getHeader(b"Content-Type"), media):
            self.refusals["unsupported_media_type"] += 1
            return refuse(
                request,
                415,
                "unsupported_media_type",
                "send Content-Type: " + " or ".join(m.decode("ascii") for m in media),
                None,
                shape,
            )
        if self.auth.enabled and not self.auth.admits(
            _header(request, b"Authorization"), _header(request, b"X-API-Key")
        ):
            self.refusals.unauthenticated(source, self.rate.clock, "http")
            return refuse(
                request,
                401,
                "unauthenticated",
                "this Beacon admits submitters with a credential only; see the "
                "agent card's securitySchemes",
                {b"WWW-Authenticate": self.auth.challenge().encode("ascii")},
                shape,
            )
        content = request.content
        assert content is not None
        size = content.seek(0, 2)
        content.seek(0)
        if size > self.max_body:
            # Counted and logged as the sites' refusals are (one throttle).
            self.refusals.too_large(source, self.max_body, self.rate.clock)
            return refuse(
                request,
                413,
                "too_large",
                f"the request body exceeds {self.max_body} bytes",
                None,
                shape,
            )
        return None


#: What a door warns when a source starts being refused over its rate.
_RATE_LIMITED = (
    "http.rate_limited: source {source} is over {rate}/s (burst {burst}); "
    "refusing until it slows down"
)


class _RateLimited(NamedTuple):
    """A 429's message, its headers for L{refuse}, and all its headers in order."""

    message: str
    headers: dict[bytes, bytes]
    answer_headers: tuple[tuple[bytes, bytes], ...]


@lru_cache(maxsize=64)
def _rate_limited(retry: int) -> _RateLimited:
    """
    What a 429 naming C{retry} seconds says: made once per value, as a
    flooding source is refused with the same few.
    """
    headers = {b"Retry-After": str(retry).encode("ascii")}
    return _RateLimited(
        f"too many requests from this source; retry after {retry} s",
        headers,
        ((b"Content-Type", JSON_TYPE), *headers.items()),
    )


def _header(request: server.Request, name: bytes) -> str | None:
    """
    The value of request header C{name}: its field lines joined with
    C{", "}, as the WebSocket binding reads its service parameters (RFC
    9110 5.3), so that a version or a credential sent on two lines comes
    to the same outcome on every binding (none of them reads as one).
    """
    values = request.requestHeaders.getRawHeaders(name)
    return b", ".join(values).decode("latin-1") if values else None


def call_context(
    request: server.Request, binding: str, source: str, supported: frozenset[str]
) -> CallContext:
    """
    The context of a call over HTTP: C{A2A-Version} from its header, or
    without one (or an empty one) from the C{A2A-Version} query parameter;
    the extensions of C{A2A-Extensions} among those C{supported}.
    """
    version = _header(request, b"A2A-Version")
    if not (version or "").strip():
        # An empty header carries no version: the query may.
        values = request.args.get(b"A2A-Version")
        version = values[0].decode("latin-1") if values else None
    named = request.requestHeaders.getRawHeaders(b"A2A-Extensions")
    activated = (
        parse_extensions([v.decode("latin-1") for v in named]) & supported
        if named
        else _NONE
    )
    # Positional (binding, source, version, extensions): see RPCRequest.
    return CallContext(binding, source, version, activated)


#: The extensions of a call that names none (nearly every call).
_NONE: frozenset[str] = frozenset()


def echo_extensions(request: server.Request, context: CallContext) -> None:
    """Name the extensions the call activated in the answer's C{A2A-Extensions}."""
    if context.extensions:
        request.setHeader(b"A2A-Extensions", ", ".join(sorted(context.extensions)).encode())


def write_json(request: server.Request, content_type: bytes, body: bytes) -> None:
    """Write a whole JSON answer (status and headers set) and finish it."""
    request.setHeader(b"Content-Type", content_type)
    # A known length: one write, no chunked framing.
    request.setHeader(b"Content-Length", b"%d" % len(body))
    request.write(body)
    request.finish()


class JSONRPCResource(MethodsResource):
    """
    The A2A JSON-RPC binding: one POSTed request, one JSON response. Its
    path with a slash after it is the same endpoint (clients that join
    paths to the interface URL POST to C{/a2a/v1/}).
    """

    allowed = (b"POST",)
    trailing_slash = True

    def __init__(
        self,
        dispatcher: Dispatcher,
        limits: TransportLimits | None,
        *,
        binding: str = "jsonrpc",
        extensions: frozenset[str] = frozenset(),
        clock: IReactorTime | None = None,
        keepalive: float = 15.0,
        source: Callable[[server.Request], str] | None = None,
    ) -> None:
        """
        @param dispatcher: Runs requests against the policy.
        @param limits: Applied before anything is parsed; None where the
            transport itself decides who may speak (the operator socket).
        @param binding: The binding name recorded in each call's context.
        @param extensions: The extension URIs this endpoint supports; those a
            caller activates are echoed in C{A2A-Extensions}.
        @param clock: Times the keepalive comments of event streams (needed
            when the policy streams).
        @param keepalive: Seconds between keepalive comments on an idle
            event stream.
        @param source: Names the caller when there are no limits.
        """
        super().__init__()
        self._dispatcher = dispatcher
        self._limits = limits
        self._binding = binding
        self._extensions = extensions
        self._clock = clock
        self._keepalive = keepalive
        self._source = source
        self.cors = limits
        if source is None:
            # Its render reads no more of a request than the direct channel
            # offers (a source callable may read anything); with a rate
            # limit, the direct channel may have it refuse a source over its
            # rate from the request's head.
            gated = limits is not None and limits.rate.rate > 0
            alsoProvides(self, IHeadGate if gated else IDirectResource)

    def answer_head(self, method: bytes, postpath: list[bytes], peer: Any) -> HeadAnswer | None:
        """
        L{IHeadGate}: a POST to this endpoint from a source over its rate
        is answered 429 from its head (L{TransportLimits.answer_head}).
        """
        if method != b"POST" or (postpath and postpath != [b""]):
            return None
        assert self._limits is not None
        return self._limits.answer_head(peer)

    def render_POST(self, request: server.Request) -> bytes | int:
        if self._limits is not None:
            source = self._limits.source_of(request)
            refusal = self._limits.refusal(request, source, json_body=True)
            if refusal is not None:
                return refusal
        else:
            source = self._source(request) if self._source else "local"
        assert request.content is not None
        body = request.content.read()
        context = call_context(request, self._binding, source, self._extensions)
        finished: list[Failure | None] = []
        request.notifyFinish().addBoth(finished.append)

        def respond(response: dict[str, Any] | StreamAnswer | None) -> None:
            # Guarded here, not by an errback: one step less on every
            # request's way back (dispatch itself never fails).
            try:
                if finished:
                    if isinstance(response, StreamAnswer):
                        response.stream.cancel()
                    return  # The peer went away; nothing to answer.
                echo_extensions(request, context)
                if isinstance(response, StreamAnswer):
                    request_id = response.id
                    stream_events(
                        request,
                        response.stream,
                        self._clock,
                        self._keepalive,
                        lambda result: b"data: " + dumps(success(request_id, result)) + b"\n\n",
                        lambda error: b"data: " + dumps(failure(request_id, error)) + b"\n\n",
                    )
                elif response is None:
                    request.setResponseCode(NO_CONTENT)
                    request.finish()
                else:
                    write_json(request, JSON_TYPE, dumps(response))
            except Exception:
                log.failure("http.response_failed")

        self._dispatcher.dispatch(body, context).addCallback(respond)
        return NOT_DONE_YET


def stream_events(
    request: server.Request,
    stream: EventStream,
    clock: IReactorTime | None,
    keepalive: float,
    event: Callable[[Any], bytes],
    error: Callable[[A2AError], bytes],
) -> None:
    """
    Answer C{request} with C{stream} as Server-Sent Events (L{SSESink}),
    each event and a stream error framed by the binding (C{event},
    C{error}); a peer that goes away cancels the stream.
    """
    if clock is None:
        raise RuntimeError("a streaming policy needs a clock")
    sink = SSESink(request, clock, keepalive, event, error)
    request.notifyFinish().addBoth(lambda _: stream.cancel())
    stream.attach(sink)


@implementer(IStreamSink)
class SSESink:
    """
    Frames a stream's events as Server-Sent Events on an HTTP response:
    each event and a stream error as the binding frames them (JSON-RPC: a
    C{data:} line holding the whole JSON-RPC response; HTTP+JSON: the bare
    StreamResponse, and an C{error} event holding a google.rpc.Status); a
    comment line every C{keepalive} seconds while idle; the response ends
    with the stream.
    """

    def __init__(
        self,
        request: server.Request,
        clock: IReactorTime,
        keepalive: float,
        event: Callable[[Any], bytes],
        error: Callable[[A2AError], bytes],
    ) -> None:
        self._request = request
        self._clock = clock
        self._keepalive = keepalive
        self._frame = event
        self._frame_error = error
        self._done = False
        request.setHeader(b"Content-Type", b"text/event-stream")
        request.setHeader(b"Cache-Control", b"no-store")
        request.write(b": stream open\n\n")
        self._timer = clock.callLater(keepalive, self._ping)
        request.notifyFinish().addBoth(self._closed)

    def _ping(self) -> None:
        self._request.write(b": keepalive\n\n")
        self._timer = self._clock.callLater(self._keepalive, self._ping)

    def _closed(self, _: Any) -> None:
        self._done = True
        if self._timer.active():
            self._timer.cancel()

    def _write(self, frame: bytes) -> None:
        if self._done:
            return
        self._request.write(frame)
        self._timer.reset(self._keepalive)

    def event(self, result: Any) -> None:
        self._write(self._frame(result))

    def end(self) -> None:
        if not self._done:
            self._request.finish()

    def fail(self, error: A2AError) -> None:
        self._write(self._frame_error(error))
        self.end()


__all__ = [
    "BeaconHTTPChannel",
    "BeaconSite",
    "DocumentResource",
    "JSONRPCResource",
    "LimitedRequest",
    "PreparedDocument",
    "SSESink",
    "TransportLimits",
    "call_context",
    "echo_extensions",
    "stream_events",
    "write_json",
]
