"""
How the operator client reaches Beacon: an L{IAgentEndpointFactory} that
dials one configured place whatever URL a request names, and a response body
reader with a size cap that a cancellation (or a timeout) aborts.

The dial target is fixed when the client is made: the operator socket's
path, or the host and port of the bearer door's URL (from its discovery
file). A URL that a server names (in a card, a redirect, an answer) never
changes where the client connects (seed 000: "the dial always goes to the
configured path, never to a URL the card names").
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Callable, cast

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint, UNIXClientEndpoint
from twisted.internet.error import ConnectError, ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IPushProducer, IStreamClientEndpoint
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import (
    RequestTransmissionFailed,
    ResponseDone,
    ResponseFailed,
    ResponseNeverReceived,
)
from twisted.web.http import PotentialDataLoss
from twisted.web.iweb import IAgentEndpointFactory, IResponse
from zope.interface import implementer

from beacon.client._errors import InvalidResponse, TransportError

#: The longest unix socket path the kernel accepts (sun_path, with its NUL).
MAX_SOCKET_PATH = 107


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


def unix_endpoint(reactor: Any, path: str, timeout: float) -> Callable[[], IStreamClientEndpoint]:
    """Dial the unix socket at C{path}."""
    return lambda: UNIXClientEndpoint(reactor, path, timeout=max(1, int(timeout + 0.999)))


def tcp_endpoint(reactor: Any, host: str, port: int, timeout: float) -> Callable[[], IStreamClientEndpoint]:
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


def transport_error(failure: Failure, address: str, unix: bool) -> TransportError | None:
    """
    Say what a connection failure was, in a few words; None when
    C{failure} is not a connection failure.
    """
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
    if isinstance(value, (ConnectionDone, ConnectionLost)):
        text = "the connection was closed before an answer"
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
