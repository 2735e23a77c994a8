"""
The WebSocket binding as Beacon serves it: the autobahn factory shared by
every door (L{WebSocketFactory}: the connection caps, the refusals'
summary, the protocol options), the resource that takes an HTTP
connection over at C{/a2a/ws} (L{WebSocketResource}), the service that
starts and stops the factory (L{WebSocketService}), and the binding's URI
and URLs for the agent card.
"""

from __future__ import annotations

from typing import Any, ClassVar

from autobahn.twisted.websocket import WebSocketServerFactory
from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.web import server
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer

from beacon.bindings.admission import refuse
from beacon.bindings.admission import TransportLimits
from beacon.bindings.websocket._errors import INVALID_UPGRADE, TOO_MANY_CONNECTIONS, VERSION, Refusal
from beacon.bindings.admission import TURN_BYTES, Ledger
from beacon.bindings.websocket._frames import AutobahnFrames, IFrameIO, PlainFrames
from beacon.bindings.websocket._log import LogSummary
from beacon.bindings.websocket._parameters import ascii_lower
from beacon.bindings.websocket._protocol import WebSocketA2AProtocol, network_producer
from beacon.bindings.websocket._upgrade import peer_host
from beacon.config import WebSocketOptions
from beacon.protocol import Dispatcher, dumps

log = Logger()



class RefusedAtAccept(Protocol):
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
        #: Bytes of frames one connection works through in one turn of the
        #: reactor, a whole message counting a share of them too (see
        #: L{beacon.bindings.admission._turns}).
        self.turn_bytes = TURN_BYTES
        #: The reads of the binding's connections (the service gives every
        #: door of a Beacon one ledger).
        self.ledger = Ledger()
        self.noisy = False
        self.setProtocolOptions(
            versions=[VERSION],
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
            self.refused(TOO_MANY_CONNECTIONS, peer_host(addr))
            return RefusedAtAccept(TOO_MANY_CONNECTIONS.response())
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
        self.limits.refusals.upgrade(refusal.code)
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
            request.setResponseCode(INVALID_UPGRADE.code)
            request.setHeader(b"Content-Type", b"application/json")
            return b"" if request.method == b"HEAD" else dumps(INVALID_UPGRADE.body())
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
        producer = network_producer(transport)
        if producer is not None:
            producer.resumeProducing()
        head = [request.method + b" " + request.uri + b" HTTP/1.1"]
        for name, values in request.requestHeaders.getAllRawHeaders():
            head.extend(name + b": " + value for value in values)
        body = request.content.read() if request.content is not None else b""
        protocol.dataReceived(b"\r\n".join(head) + b"\r\n\r\n" + body)
        return NOT_DONE_YET


__all__ = [
    "WebSocketFactory",
    "WebSocketResource",
    "WebSocketService",
]
