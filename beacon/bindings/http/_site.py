"""
twisted.web's side of Beacon's HTTP listeners: the request twisted.web
builds for each request (L{LimitedRequest}: the body cap while it arrives,
the arrival deadlines, the refusals in the shape of the door the request
was for), the channel (L{BeaconHTTPChannel}: list headers as RFC 9110
reads them, the header line count, the deadlines, fair turns), and the
site (L{BeaconSite}: its limits, its connection caps, and the direct
channel every connection starts on, L{beacon.bindings.http._direct}).
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, server
from twisted.web.resource import IResource
from zope.interface import implementer

from beacon.bindings.http._direct import DirectCaches, DirectChannel
from beacon.bindings.http._direct_request import IDirectRequest
from beacon.bindings.admission import (
    MAX_HEADERS,
    ConnectionRefusal,
    connection_tokens,
    error_body,
    framing_problem,
    reason_phrase,
    refusal_shape,
    refuse_connection,
    refuse_slow,
)
from beacon.bindings.admission import TURN_REQUESTS, Ledger, Turns
from beacon.bindings.admission import Refusals
from beacon.capped import CappedRequest
from beacon.config import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY,
)

log = Logger()

#: The first byte of a TLS record carrying a handshake (a ClientHello): no
#: HTTP request begins with it.
TLS_HANDSHAKE = b"\x16"


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
    #: See L{IDirectRequest}: twisted.web's path has no head gate, so its
    #: rendering checks the rate.
    admitted_source: str | None = None

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
          usual case, costs no timer;
        - fair turns (L{beacon.bindings.admission._turns}): once the site's
          C{turn_requests} requests are answered in one turn of the reactor,
          the line parser stops (L{LineReceiver}'s C{paused}) and the
          channel reads no more, as while its transport is full
          (L{http.HTTPChannel.pauseProducing}); both go on in a later turn.

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
        # This connection's share of the reactor's turns (made with the
        # site's clock once connected), whether the transport has paused
        # it for a full write buffer, and whether it is inside a read.
        self._turns: Turns | None = None
        self._transport_full = False
        self._reading = False

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

    def connectionMade(self) -> None:
        """Connected: this connection's turns are timed on the site's clock."""
        self._turns = Turns(
            self.site.reactor,
            getattr(self.site, "turn_requests", TURN_REQUESTS),
            self._next_turn,
            getattr(self.site, "ledger", None),
        )
        super().connectionMade()

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

    def requestDone(self, request: http.Request) -> None:
        """
        C{request} is answered: counted against this turn's share (answered
        in a later turn than it was read in, the store's commit, it begins
        the connection's new turn). Once the share is spent, the parser
        stops here, with the rest of what was read kept, and reads nothing
        more (as while the transport is full) until a later turn.
        """
        turns = self._turns
        if turns is None:
            super().requestDone(request)
            return
        if not self._reading:
            turns.start()
        super().requestDone(request)
        if (
            not turns.spend()
            and self._reading
            and not self.paused
            and self.persistent
            and self._received != self._consumed  # More was read than parsed.
        ):
            self.paused = True
            turns.pause()
            if not self._transport_full:
                super().pauseProducing()

    def _next_turn(self) -> None:
        """
        A later turn of the reactor, after this connection yielded: go on
        parsing, and once it has not yielded again, read again (unless the
        transport is full).
        """
        if self.transport is None:
            return
        self.paused = False
        self.dataReceived(b"")
        if not self.paused and not self._transport_full and self.transport is not None:
            super().resumeProducing()

    def pauseProducing(self) -> None:
        """The transport's write buffer is full (see L{http.HTTPChannel.pauseProducing})."""
        self._transport_full = True
        if not self.paused:
            super().pauseProducing()

    def resumeProducing(self) -> None:
        """
        The transport's write buffer drained: go on as twisted.web's channel
        does, unless this connection has yielded its turn (it goes on in its
        next one).
        """
        self._transport_full = False
        if not self.paused:
            super().resumeProducing()

    def rawDataReceived(self, data: bytes) -> None:
        """Body bytes, or bytes held while a request is answered (counted, then read)."""
        self._consumed += len(data)
        super().rawDataReceived(data)

    def dataReceived(self, data: bytes) -> None:
        """
        Read C{data} (in this connection's turn), then time whatever it left
        half-arrived. A request that begins with a TLS handshake record (a
        client speaking TLS to a plain HTTP port) is answered 400 and the
        connection closed at once, rather than when its head times out:
        the client learns at once that the port is not a TLS one.
        """
        if (
            data[:1] == TLS_HANDSHAKE
            and not self.requests
            and self._received == self._consumed
            and not self.paused
        ):
            self._refuse_tls()
            return
        self._received += len(data)
        turns = self._turns
        reading = self._reading  # Within a read already (a request answered re-reads).
        if turns is not None and not reading:
            turns.start()
        self._reading = True
        try:
            super().dataReceived(data)
        finally:
            self._reading = reading
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

    def _refuse_tls(self) -> None:
        """Answer a TLS handshake on this plain HTTP port: 400, then close."""
        peer = self.transport.getPeer() if self.transport is not None else None
        log.info(
            "http.bad_request: refused a request from {source}: {problem}",
            source=str(getattr(peer, "host", "unknown")),
            problem="a TLS handshake on a plain HTTP port",
        )
        self.site.refusals["invalid"] += 1
        self.paused = True  # Nothing more is read.
        refuse_connection(
            self,
            b"400 Bad Request",
            error_body("bad_request", "this port speaks plain HTTP, not TLS: use http://"),
        )

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """The connection is gone: the site counts it no longer."""
        self.release_connection()
        self._cancel_deadline()
        if self._turns is not None:
            self._turns.stop()
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
            (L{beacon.bindings.http._direct}), which answers plain requests to
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
        #: Requests one connection may begin in one turn of the reactor
        #: (see L{beacon.bindings.admission._turns}).
        self.turn_requests = TURN_REQUESTS
        #: The reads of this listener's connections (the service gives every
        #: door of a Beacon one ledger): see L{beacon.bindings.admission._turns}.
        self.ledger = Ledger()
        self.open_connections = 0
        self._by_source: dict[str, int] = {}
        self._refusing: set[str] = set()
        self.direct = direct and self.direct_default and not access_log
        #: What this site's direct channels keep made (heads read, answers
        #: given from a head).
        self.direct_caches = DirectCaches()
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


__all__ = ["BeaconHTTPChannel", "BeaconSite", "LimitedRequest"]
