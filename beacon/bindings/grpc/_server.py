"""
The gRPC binding's listeners: L{GRPCServer} binds each C{[grpc] listen}
address on the reactor (plain HTTP/2, or TLS with ALPN C{h2}), serves its
connections with one L{GRPCDoor}, runs the door's sweep, and stops
gracefully (GOAWAY, then C{grace} seconds for the calls in flight).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Sequence
from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IReactorTime
from twisted.internet.ssl import Certificate, CertificateOptions, PrivateCertificate
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from beacon.bindings.admission import Ledger
from beacon.bindings.grpc._calls import GRPCCalls
from beacon.bindings.grpc._door import CALLS_PER_WORKER, EXPIRY_INTERVAL, GRPCDoor, _Factory
from beacon.errors import StartupError

log = Logger()

_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL
)


def _host_port(address: str) -> tuple[str, int]:
    """C{host:port} or C{[v6]:port} as the interface to bind and the port."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host == "localhost":
        host = "127.0.0.1"
    elif host and not re.fullmatch(r"[0-9a-fA-F:.]+", host):
        # A name: the first address it stands for (bound once, at start).
        host = str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    return host, int(port)


def _bound_url(address: str, port: int) -> str:
    """The C{host:port} a listener configured as C{address} is reached at."""
    host = address.rpartition(":")[0]
    return f"{host}:{port}"


def tls_options(key_pem: bytes, certificate_pem: bytes) -> CertificateOptions:
    """
    The TLS of a gRPC listener: the key, its certificate and the chain
    after it, ALPN C{h2} (gRPC clients require it).
    """
    certificates = _PEM_CERTIFICATE.findall(certificate_pem)
    if not certificates:
        raise StartupError("[grpc] certificate: no PEM certificate in the file")
    private = PrivateCertificate.loadPEM(certificates[0] + b"\n" + key_pem)
    chain = [Certificate.loadPEM(pem).original for pem in certificates[1:]]
    return CertificateOptions(
        privateKey=private.privateKey.original,
        certificate=private.original,
        extraCertChain=chain,
        acceptableProtocols=[b"h2"],
    )


class GRPCServer:
    """
    The gRPC binding's server for one L{GRPCCalls}: bound and started by
    L{start}, stopped gracefully by L{stop}.

    @ivar urls: The C{host:port} of each listener, once bound.
    """

    def __init__(
        self,
        calls: GRPCCalls,
        reactor: Any,
        listen: Sequence[str],
        *,
        max_receive: int,
        workers: int = 32,
        max_calls: int | None = None,
        max_calls_per_source: int = 16,
        message_timeout: float | None = 30.0,
        idle_timeout: float | None = 60.0,
        max_connection_age: float | None = 3600.0,
        keepalive: float | None = 60.0,
        grace: float = 5.0,
        key_pem: bytes = b"",
        certificate_pem: bytes = b"",
        max_connections: int = 0,
        max_connections_per_source: int = 0,
        clock: IReactorTime | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        """
        @param reactor: Listens (C{IReactorTCP}, C{IReactorSSL}) and times.
        @param listen: gRPC addresses, C{host:port} (port 0: any free one).
        @param max_receive: The largest request message, in bytes.
        @param workers: The calls in progress at once, in units of
            L{CALLS_PER_WORKER} (C{[grpc] workers}; by default 32, 256 calls).
        @param max_calls: Calls in progress at once, those waiting for their
            request message included (RESOURCE_EXHAUSTED beyond); by default
            C{workers} x L{CALLS_PER_WORKER}.
        @param max_calls_per_source: Calls one source may have in progress
            (RESOURCE_EXHAUSTED beyond); 0: no cap.
        @param message_timeout: Seconds a call may wait for its request
            message before it is cancelled; None: no limit.
        @param idle_timeout: Seconds a connection without calls is kept
            (then GOAWAY); None: no limit.
        @param max_connection_age: Seconds a connection is kept at most
            (then GOAWAY, and C{grace} seconds for its calls); None: no limit.
        @param keepalive: Seconds of silence after which a connection is
            pinged (one unanswered for 20 s closes it); None: no pings.
        @param grace: Seconds in-flight calls get at L{stop} (and after a
            connection's GOAWAY at its age).
        @param key_pem: With C{certificate_pem}: every listener speaks TLS.
        @param max_connections: Open connections all listeners hold at
            most (C{[limits] max_connections}); 0: no cap.
        @param max_connections_per_source: Open connections one address
            holds at most; 0: no cap.
        @param clock: Times the sweep (the reactor by default; the turns are
            the reactor's).
        @param ledger: The reads of the connections of every door of this
            Beacon (fair turns).
        """
        self._calls = calls
        self._reactor = reactor
        self._clock: IReactorTime = clock if clock is not None else cast(IReactorTime, reactor)
        self._listen = tuple(listen)
        self._grace = grace
        self._key = key_pem
        self._certificate = certificate_pem
        self._ledger = ledger if ledger is not None else Ledger()
        self._max_receive = max_receive
        self.door = GRPCDoor(
            calls,
            self._clock,
            max_receive=max_receive,
            max_calls=max_calls if max_calls is not None else workers * CALLS_PER_WORKER,
            max_calls_per_source=max_calls_per_source,
            message_timeout=message_timeout,
            idle_timeout=idle_timeout,
            max_connection_age=max_connection_age,
            keepalive=keepalive,
            grace=grace,
            max_connections=max_connections,
            max_connections_per_source=max_connections_per_source,
        )
        #: Builds each listener's connections. A request message and its
        #: framing fit in a stream's window.
        self.factory = _Factory(
            self.door, cast(IReactorTime, reactor), self._ledger, max_receive + 5
        )
        self._ports: list[IListeningPort] = []
        self._sweep: LoopingCall | None = None
        self._stopped: Deferred[None] | None = None
        self._deadline: IDelayedCall | None = None
        self.urls: list[str] = []

    @property
    def waiting(self) -> int:
        """How many calls wait for their request message."""
        return self.door.waiting

    @property
    def max_calls_per_source(self) -> int:
        """Calls one source may have in progress (0: no cap)."""
        return self.door.max_per_source

    @property
    def max_calls(self) -> int:
        """Calls in progress at once."""
        return self.door.max_calls

    @property
    def message_timeout(self) -> float | None:
        """Seconds a call may wait for its request message."""
        return self.door.message_timeout

    @property
    def tls(self) -> bool:
        """Whether the listeners speak TLS."""
        return bool(self._key)

    def start(self) -> None:
        """
        Bind every listener, then start serving; all or nothing.

        @raise StartupError: A listener cannot bind.
        """
        factory = self.factory
        options = tls_options(self._key, self._certificate) if self._key else None
        ports: list[IListeningPort] = []
        urls = []
        for address in self._listen:
            try:
                host, port = _host_port(address)
                if options is not None:
                    listening = self._reactor.listenSSL(port, factory, options, interface=host)
                else:
                    listening = self._reactor.listenTCP(port, factory, interface=host)
            except (CannotListenError, OSError, ValueError):
                for bound in ports:
                    bound.stopListening()
                raise StartupError(
                    f"[grpc] listen {address}: cannot listen there (the address is in use,"
                    " or not this host's)"
                ) from None
            ports.append(listening)
            urls.append(_bound_url(address, listening.getHost().port))
        self._ports = ports
        self.urls = urls
        sweep = LoopingCall(self.door.sweep)
        sweep.clock = self._clock
        sweep.start(EXPIRY_INTERVAL, now=False)
        self._sweep = sweep
        for url in urls:
            log.info(
                "a2a.grpc.serving: the gRPC binding at {url}{tls}",
                url=url,
                tls=" (TLS)" if self._key else "",
            )

    def stop(self) -> Deferred[None]:
        """
        Stop accepting connections and calls; those in flight have C{grace}
        seconds to be answered before their connections are closed.

        @return: A Deferred that fires once every connection has closed.
        """
        if self._stopped is not None:
            return self._stopped
        done: Deferred[None] = Deferred()
        self._stopped = done
        ports, self._ports = self._ports, []
        for port in ports:
            port.stopListening()
        door = self.door

        def all_closed() -> None:
            deadline, self._deadline = self._deadline, None
            if deadline is not None and deadline.active():
                deadline.cancel()
            sweep, self._sweep = self._sweep, None
            if sweep is not None and sweep.running:
                sweep.stop()
            # Log what the throttled refusal lines have counted.
            self._calls.refusals.stop_logging()
            log.info("a2a.grpc.stopped: the gRPC binding stopped")
            done.callback(None)

        door.all_closed = all_closed
        door.stop()
        if not door.connections:
            all_closed()
        else:
            self._deadline = self._clock.callLater(self._grace, door.abort)
        return done


__all__ = ["GRPCServer", "tls_options"]
