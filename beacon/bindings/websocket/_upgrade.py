"""
A WebSocket connection until it is open: the upgrade's head gathered and
checked against the source's rate before autobahn parses any of it, the
origin and connection caps, the service parameters, the refusals with the
HTTP+JSON body, and the handshake timed on the factory's clock.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Protocol

from autobahn.twisted.websocket import WebSocketServerProtocol
from autobahn.websocket.types import ConnectionDeny, ConnectionRequest
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from beacon.bindings.admission import MAX_HEAD
from beacon.bindings.admission import TransportLimits
from beacon.bindings.admission import Admission
from beacon.bindings.websocket._errors import (
    INVALID_UPGRADE,
    ORIGIN_REFUSED,
    TOO_MANY_CONNECTIONS,
    UNSUPPORTED_VERSION,
    Refusal,
    rate_refusal,
)
from beacon.bindings.websocket._frames import IFrameIO
from beacon.bindings.websocket._log import AutobahnLog, LogSummary
from beacon.bindings.websocket._parameters import ascii_lower, service_parameters, upgrade_lines
from beacon.config import WebSocketOptions
from beacon.protocol import CallContext, Dispatcher, parse_extensions

log = Logger()


class ConnectionFactory(Protocol):
    """
    What a connection uses of the factory that made it (a
    L{WebSocketFactory}): its options and limits, the clock, the counts
    under the connection caps, the summary of refusals, the dispatcher.
    """

    options: WebSocketOptions
    limits: TransportLimits
    clock: IReactorTime
    dispatcher: Dispatcher
    extensions: frozenset[str]
    allowed_origins: frozenset[str]
    frames: IFrameIO
    events: LogSummary
    turn_bytes: int
    ledger: Any
    open_connections: int
    connections_by_source: dict[str, int]
    connections: set[Any]

    def refused(self, refusal: Refusal, source: str) -> None:
        """Count a refused upgrade, and log it unless one of its kind was just logged."""


def peer_host(address: Any) -> str:
    """The host of an IP address, for the log; "unknown" for any other."""
    if isinstance(address, (IPv4Address, IPv6Address)):
        return address.host
    return "unknown"


class UpgradeProtocol(WebSocketServerProtocol):
    """
    The part of a binding connection that comes before it is open. The
    upgrade's head is gathered here and given to autobahn whole, once it
    is within L{MAX_HEAD} and the source is within its rate; autobahn
    parses it and calls L{onConnect}, where the binding's checks are
    made and its service parameters captured. Autobahn's opening
    handshake timeout, which would run on the global reactor, is off; the
    handshake is timed on the factory's clock and ended as autobahn's
    timeout ends it (L{onOpenHandshakeTimeout}).

    Once open, what is read goes to L{frames_received}.

    @ivar parameters: The upgrade's service parameters (see L{service_parameters}).
    @ivar source: The caller, as the factory's L{SourceResolver} names it.
    """

    factory: ConnectionFactory

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
        self._handshake: IDelayedCall | None = None

    @cached_property
    def log(self) -> AutobahnLog:  # type: ignore[override]
        """What autobahn logs about this connection (see L{AutobahnLog})."""
        return AutobahnLog(self)

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
        L{frames_received}.
        """
        if self._opened:
            self.frames_received(data)
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
            self._refuse_upgrade(rate_refusal(admission.retry_after))
            return
        self._upgrade = head
        self.to_autobahn(head)
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
                self._deny(ORIGIN_REFUSED)
        elif factory.allowed_origins and ascii_lower(origin.strip()) not in factory.allowed_origins:
            self._deny(ORIGIN_REFUSED)
        held = factory.connections_by_source.get(self.source, 0)
        if options.max_connections_per_source and held >= options.max_connections_per_source:
            self._deny(TOO_MANY_CONNECTIONS)
        if not self._counted:
            if options.max_connections and factory.open_connections >= options.max_connections:
                self._deny(TOO_MANY_CONNECTIONS)

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
            self._log_rate_limited()
        return admission

    def _log_rate_limited(self) -> None:
        """The first message refused in a run of refusals: C{ws.rate_limited}, throttled."""
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

    def _peer(self) -> Any:
        return self.transport.getPeer() if self.transport is not None else None

    def _deny(self, refusal: Refusal) -> None:
        self._refusal = refusal
        raise ConnectionDeny(refusal.code, refusal.message)

    def failHandshake(
        self, reason: str, code: int = 400, responseHeaders: Any = None
    ) -> None:
        """
        Refuse the upgrade with the HTTP+JSON error body (A2A 11.6)
        instead of autobahn's bare status line: autobahn's own refusals
        become 400 (or 426 for an unsupported version), without echoing
        anything the peer sent.
        """
        refusal, self._refusal = self._refusal, None
        if refusal is None:
            headers = dict(responseHeaders or ())
            unsupported = "Sec-WebSocket-Version" in headers
            refusal = UNSUPPORTED_VERSION if unsupported else INVALID_UPGRADE
        self._refuse_upgrade(refusal)

    def _refuse_upgrade(self, refusal: Refusal) -> None:
        """
        Write C{refusal} and close once it is written; the connection reads
        nothing more. Counted, and logged through the factory's summary.
        """
        self._refused = True
        self.factory.refused(refusal, self.source or peer_host(self._peer()))
        transport = self.transport
        if transport is not None:
            transport.write(refusal.response())
            transport.loseConnection()

    def onOpen(self) -> None:
        """The upgrade succeeded: the handshake's clock stops."""
        self._opened = True
        self._cancel(self._handshake)
        self._handshake = None

    def frames_received(self, data: bytes) -> None:
        """What is read once the connection is open."""
        raise NotImplementedError()

    def to_autobahn(self, data: bytes) -> None:
        """Give autobahn bytes read (its own C{dataReceived})."""
        super().dataReceived(data)

    @staticmethod
    def _cancel(call: IDelayedCall | None) -> None:
        if call is not None and call.active():
            call.cancel()

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        """The connection is gone: its place under the caps is free."""
        self._cancel(self._handshake)
        self._handshake = None
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


__all__ = ["ConnectionFactory", "UpgradeProtocol", "peer_host"]
