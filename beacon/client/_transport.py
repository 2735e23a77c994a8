"""
How the clients reach a server over HTTP: an L{IAgentEndpointFactory} that
dials one configured place whatever URL a request names, a response body
reader with a size cap that a cancellation (or a timeout) aborts, and
L{HTTPCalls}, what the JSON-RPC and HTTP+JSON transports share.

The dial target is fixed when the client is made: the operator socket's
path, or the host and port of the bearer door's URL (from its discovery
file). A URL that a server names (in a card, a redirect, an answer) never
changes where the client connects (agentd's unix-socket binding: "the dial always goes to the
configured path, never to a URL the card names").
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Coroutine
from typing import Any, Callable, TypeVar, cast
from urllib.parse import urlsplit

from OpenSSL import SSL
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    UNIXClientEndpoint,
    wrapClientTLS,
)
from twisted.internet.error import ConnectError, ConnectionDone, ConnectionLost
from twisted.internet.interfaces import (
    IDelayedCall,
    IPushProducer,
    IReactorTime,
    IStreamClientEndpoint,
)
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import (
    BrowserLikePolicyForHTTPS,
    RequestTransmissionFailed,
    ResponseDone,
    ResponseFailed,
    ResponseNeverReceived,
)
from twisted.web.http import PotentialDataLoss
from twisted.web.iweb import IAgentEndpointFactory, IPolicyForHTTPS, IResponse
from zope.interface import implementer

from beacon.interfaces import IBeaconReactor
from beacon.client._errors import ClientError, InvalidResponse, InvalidURL, Timeout, TransportError
from beacon.client._sse import SSEReader
from beacon.client._stream import ResponseStream
from beacon.client._url import SPOKEN

T = TypeVar("T")

#: The longest unix socket path the kernel accepts (sun_path, with its NUL).
MAX_SOCKET_PATH = 107
#: The schemes L{DialFactory} dials (C{https} and C{wss} over TLS).
_DIALLED = frozenset((b"http", b"https", b"ws", b"wss"))


@implementer(IAgentEndpointFactory)
class FixedEndpointFactory:
    """
    Gives an L{Agent} the same endpoint for every URI: the one this client
    was configured to dial.
    """

    def __init__(self, endpoint: Callable[[], IStreamClientEndpoint]) -> None:
        """
        @param endpoint: Makes the endpoint to dial (a fresh one per
            connection).
        """
        self._endpoint = endpoint

    def endpointForURI(self, uri: Any) -> IStreamClientEndpoint:
        """The configured endpoint; C{uri} does not choose it."""
        return self._endpoint()


class Deadline:
    """
    Bounds one Deferred by a timeout on a clock: when it passes, the
    Deferred is cancelled (which aborts its request) and fails with the
    error C{expired} makes, whatever the cancellation failed with.
    """

    def __init__(
        self, clock: IReactorTime, seconds: float, expired: Callable[[], Exception]
    ) -> None:
        self._clock = clock
        self._seconds = seconds
        self._expired = expired
        self.expired = False
        self._call: IDelayedCall | None = None

    def start(self, d: Deferred[T]) -> Deferred[T]:
        """Arm the timer; return C{d}, which now fails on expiry."""

        def expire() -> None:
            self.expired = True
            d.cancel()

        self._call = self._clock.callLater(self._seconds, expire)
        return d.addErrback(self._translate).addBoth(self._stop)

    def _stop(self, result: Any) -> Any:
        if self._call is not None and self._call.active():
            self._call.cancel()
        return result

    def _translate(self, failure: Failure) -> Any:
        # Whatever a cancelled request fails with (CancelledError, or the
        # Agent's ResponseNeverReceived around one), an expired bound is
        # the error it was made with.
        if self.expired:
            raise self._expired()
        return failure


@implementer(IStreamClientEndpoint)
class TimedEndpoint:
    """
    An endpoint whose C{connect} (TCP, and TLS or the WebSocket handshake
    where the caller waits for them) is bounded on the injected clock.
    """

    def __init__(
        self, endpoint: IStreamClientEndpoint, clock: IReactorTime, seconds: float, address: str,
        peer: str = "the agent",
    ) -> None:
        self._endpoint = endpoint
        self._clock = clock
        self._seconds = seconds
        self._address = address
        self._peer = peer

    def connect(self, factory: Any) -> Deferred[Any]:
        """Connect, or fail with L{Timeout} (phase C{connect})."""
        d = self._endpoint.connect(factory)
        return Deadline(
            self._clock,
            self._seconds,
            lambda: Timeout(self._address, self._seconds, "connect", self._peer),
        ).start(d)


@implementer(IAgentEndpointFactory)
class DialFactory:
    """
    The endpoints of an L{Agent} for C{http://} and C{https://} URLs, as
    treq's default agent makes them (HTTPS verified with
    L{BrowserLikePolicyForHTTPS}: the platform's trust roots and
    service_identity), with the connect bounded on the injected clock.
    """

    def __init__(
        self,
        reactor: IBeaconReactor,
        clock: IReactorTime,
        connect_timeout: float,
        tls_policy: IPolicyForHTTPS | None = None,
    ) -> None:
        self._reactor = reactor
        self._clock = clock
        self._connect_timeout = connect_timeout
        self._tls = tls_policy if tls_policy is not None else BrowserLikePolicyForHTTPS()

    def endpoint(self, scheme: bytes, host: bytes, port: int) -> IStreamClientEndpoint:
        """
        The endpoint for C{scheme://host:port} (C{https}/C{wss}: TLS).

        @raise InvalidURL: C{scheme} is not C{http}, C{https}, C{ws} or
            C{wss} (in any case): nothing else is dialled, least of all a
            misspelt C{https} in clear text.
        """
        scheme = scheme.lower()
        if scheme not in _DIALLED:
            text = scheme.decode("ascii", "replace")
            raise InvalidURL(
                f"{text}://{host.decode('ascii', 'replace')}:{port}",
                f"Beacon speaks {SPOKEN}, not {text}://",
            )
        name = host.decode("ascii")
        endpoint: IStreamClientEndpoint = HostnameEndpoint(
            self._reactor, name, port, timeout=max(1, int(self._connect_timeout + 0.999))
        )
        if scheme in (b"https", b"wss"):
            endpoint = wrapClientTLS(self._tls.creatorForNetloc(host, port), endpoint)
        address = f"{scheme.decode('ascii')}://{name}:{port}"
        return TimedEndpoint(endpoint, self._clock, self._connect_timeout, address)

    def endpointForURI(self, uri: Any) -> IStreamClientEndpoint:
        """The endpoint for an Agent's request URI."""
        return self.endpoint(uri.scheme, uri.host, uri.port)


def unix_endpoint(reactor: IBeaconReactor, path: str, timeout: float) -> Callable[[], IStreamClientEndpoint]:
    """Dial the unix socket at C{path}."""
    return lambda: UNIXClientEndpoint(reactor, path, timeout=max(1, int(timeout + 0.999)))


def tcp_endpoint(reactor: IBeaconReactor, host: str, port: int, timeout: float) -> Callable[[], IStreamClientEndpoint]:
    """Dial C{host} (an IP address or a name) and C{port} over plain TCP."""
    kind = TCP6ClientEndpoint if ":" in host else TCP4ClientEndpoint
    seconds = max(1, int(timeout + 0.999))
    return lambda: kind(reactor, host, port, timeout=seconds)


def _first_reason(failure: Failure) -> Failure:
    """The underlying reason of an Agent's wrapped failure."""
    while failure.check(ResponseNeverReceived, ResponseFailed, RequestTransmissionFailed):
        reasons = getattr(failure.value, "reasons", None)
        if not reasons:
            break
        failure = reasons[0]
    return failure


def transport_error(
    failure: Failure, address: str, unix: bool, peer: str = "Beacon"
) -> TransportError | None:
    """
    Say what a connection failure was, in a few words; None when
    C{failure} is not a connection failure.
    """
    error = _transport_error(failure, address, unix)
    if error is not None and peer != "Beacon":
        return TransportError(error.address, error.reason, peer)
    return error


def client_error(failure: Failure, address: str, unix: bool, peer: str) -> Exception:
    """
    The L{ClientError} (or L{CancelledError}) a failed request raises: a
    connection failure said in a few words, and no raw transport exception.
    An C{http://} or C{ws://} connection closed before any answer may have
    reached a TLS port: the error says what to try.
    """
    reason = _first_reason(failure)
    if isinstance(reason.value, (ClientError, CancelledError)):
        return reason.value
    error = transport_error(failure, address, unix, peer)
    if error is not None:
        if error.reason == CLOSED and not unix:
            secure = _other_scheme(address, {"http": "https", "ws": "wss"})
            if secure is not None:
                error = TransportError(
                    address, f"{CLOSED} (if the server speaks TLS, try {secure})", peer
                )
        return error
    return TransportError(address, f"the request failed ({type(reason.value).__name__})", peer)


#: A connection that ended before any answer.
CLOSED = "the connection was closed before an answer"
#: What OpenSSL says when the server's first bytes are no TLS record: a
#: plain-text answer (an HTTP status line), read as a TLS record's header.
_NOT_TLS = frozenset(
    ("wrong version number", "packet length too long", "record layer failure", "unknown protocol")
)


def _other_scheme(address: str, other: dict[str, str]) -> str | None:
    """C{address}'s origin with its scheme as C{other} maps it (C{https://host:port} for C{http://...}), or None."""
    parts = urlsplit(address)
    scheme = other.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        return None
    return f"{scheme}://{parts.netloc}"


def _tls_failure(address: str, error: SSL.Error) -> TransportError:
    """
    A TLS connection that failed in OpenSSL: the server answered something
    other than TLS (a plain-text port), or the handshake failed (a
    certificate, a protocol version), said in words.
    """
    reasons = [
        str(entry[2])
        for entry in (error.args[0] if error.args and isinstance(error.args[0], list) else [])
        if isinstance(entry, tuple) and len(entry) == 3 and entry[2]
    ]
    if _NOT_TLS.intersection(reasons):
        plain = _other_scheme(address, {"https": "http", "wss": "ws"})
        hint = f" (a plain-text port? try {plain})" if plain else ""
        return TransportError(address, f"the server did not answer TLS{hint}")
    return TransportError(
        address, f"the TLS handshake failed ({', '.join(reasons) or 'no reason given'})"
    )


def _transport_error(failure: Failure, address: str, unix: bool) -> TransportError | None:
    reason = _first_reason(failure)
    value = reason.value
    if isinstance(value, ConnectError):
        number = getattr(value, "osError", None)
        if isinstance(number, int):
            if number == errno.ENOENT:
                what = "no such socket" if unix else "no such address"
                return TransportError(address, what)
            if number == errno.ECONNREFUSED:
                if not unix:
                    return TransportError(address, "connection refused")
                if not _is_socket(address):
                    return TransportError(address, "not a socket")
                return TransportError(
                    address, "connection refused (nothing is listening on that socket)"
                )
            if number in (errno.EACCES, errno.EPERM):
                return TransportError(address, "permission denied")
            return TransportError(address, os.strerror(number).lower())
        return TransportError(address, str(value) or "cannot connect")
    if isinstance(value, SSL.Error):
        return _tls_failure(address, value)
    if isinstance(value, (ConnectionDone, ConnectionLost)):
        text = CLOSED
        if unix:
            text += " (is this user allowed on the socket?)"
        return TransportError(address, text)
    if isinstance(value, OSError):
        return TransportError(address, (value.strerror or str(value)).lower())
    return None


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return True  # Say no more than the kernel did.


def check_socket_path(path: str) -> None:
    """
    @raise TransportError: The path cannot name a unix socket.
    """
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise TransportError(path, f"the socket path is longer than {MAX_SOCKET_PATH} bytes")


class BodyReader(Protocol):
    """
    Hands a response body to C{feed}, chunk by chunk, up to C{limit} bytes
    in all (None: no limit); C{done} fires when the body ends. Cancelling
    C{done} (a timeout does) aborts the connection.
    """

    def __init__(self, feed: Callable[[bytes], None], limit: int | None, address: str) -> None:
        self._feed = feed
        self._limit = limit
        self._address = address
        self._received = 0
        self.done: Deferred[None] = Deferred(lambda _: self.abort())

    @property
    def _producer(self) -> IPushProducer | None:
        # A response body's transport is a producer proxy for the
        # connection (IResponse.deliverBody).
        return cast(IPushProducer | None, self.transport)

    def abort(self) -> None:
        """Close the connection now (stopping the proxy closes it)."""
        if self._producer is not None:
            self._producer.stopProducing()

    def pause(self) -> None:
        """Stop reading from the connection for now."""
        if self._producer is not None:
            self._producer.pauseProducing()

    def resume(self) -> None:
        """Read from the connection again."""
        if self._producer is not None:
            self._producer.resumeProducing()

    def dataReceived(self, data: bytes) -> None:
        if self.done.called:
            return
        self._received += len(data)
        try:
            if self._limit is not None and self._received > self._limit:
                raise InvalidResponse(f"the answer is larger than {self._limit} bytes")
            self._feed(data)
        except Exception:
            failure = Failure()
            self.abort()
            if not self.done.called:
                self.done.errback(failure)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.done.called:
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(None)
        else:
            self.done.errback(
                TransportError(self._address, "the connection broke during the answer")
            )


def read_body(
    response: IResponse, feed: Callable[[bytes], None], limit: int | None, address: str
) -> BodyReader:
    """Start delivering C{response}'s body to a L{BodyReader}."""
    reader = BodyReader(feed, limit, address)
    if response.length == 0:
        reader.done.callback(None)
    else:
        response.deliverBody(reader)
    return reader


class HTTPCalls:
    """
    What the two HTTP bindings' transports (JSON-RPC and HTTP+JSON) share:
    their settings, a bounded body read, a unary call bounded by the
    response timeout, and a C{text/event-stream} answer read as a
    L{ResponseStream} (paused while its consumer lags). A subclass says how
    a request is sent and how an answer or an event is read.
    """

    def __init__(
        self,
        http: Any,
        url: str,
        *,
        clock: IReactorTime,
        address: str,
        response_timeout: float,
        idle_timeout: float,
        max_response: int,
        max_event: int,
        headers: dict[str, str] | None = None,
        peer: str = "the agent",
    ) -> None:
        """
        @param http: A treq C{HTTPClient} whose agent dials what the
            caller configured.
        """
        self._http = http
        self._url = url
        self._clock = clock
        self.address = address
        self._response_timeout = response_timeout
        self._idle_timeout = idle_timeout
        self._max_response = max_response
        self._max_event = max_event
        self._headers = dict(headers or {})
        self._peer = peer

    def _timeout(self) -> Timeout:
        return Timeout(self.address, self._response_timeout, "answer", self._peer)

    async def _read(self, response: IResponse) -> bytes:
        chunks: list[bytes] = []
        await read_body(response, chunks.append, self._max_response, self.address).done
        return b"".join(chunks)

    def _bounded(self, call: Coroutine[Any, Any, T]) -> Deferred[T]:
        """C{call}, bounded by the response timeout."""
        return Deadline(self._clock, self._response_timeout, self._timeout).start(
            Deferred.fromCoroutine(call)
        )

    def _event_stream(
        self,
        method: str,
        send: Callable[[], Coroutine[Any, Any, IResponse]],
        streaming: Callable[[IResponse], bool],
        event: Callable[[bytes], dict[str, Any]],
        refused: Callable[[IResponse, bytes], object],
    ) -> ResponseStream:
        """
        One streaming call: C{send} the request; an answer that
        C{streaming} accepts is read as server-sent events, each data
        payload made a StreamResponse by C{event} (which raises a
        L{ClientError} for an error event); any other answer is read whole
        and given to C{refused}, which raises the error it stands for.
        """
        holder: dict[str, Any] = {}

        def pause() -> None:
            if "reader" in holder:
                holder["reader"].pause()

        def resume() -> None:
            if "reader" in holder:
                holder["reader"].resume()

        events = ResponseStream(
            self._clock, self.address, self._response_timeout, self._idle_timeout,
            peer=self._peer, pause=pause, resume=resume,
        )

        async def start() -> None:
            response = await send()
            if streaming(response):
                sse = SSEReader(lambda payload: events.push(event(payload)), self._max_event)
                reader = holder["reader"] = read_body(response, sse.feed, None, self.address)
                events.on_cancel = lambda: reader.done.cancel()
                await reader.done
                return
            refused(response, await self._read(response))
            raise InvalidResponse(f"the agent answered {method} without a stream")

        d = Deferred.fromCoroutine(start())
        events.on_cancel = d.cancel
        d.addCallbacks(lambda _: events.end(), events.end)
        return events

    def close(self) -> Deferred[None]:
        """Nothing stays open between calls."""
        return succeed(None)


def is_event_stream(response: IResponse, statuses: range = range(200, 201)) -> bool:
    """Whether C{response} has one of C{statuses} and is C{text/event-stream}."""
    content_type = (response.headers.getRawHeaders(b"content-type") or [b""])[0]
    media = content_type.split(b";")[0].strip().lower()
    return response.code in statuses and media == b"text/event-stream"
