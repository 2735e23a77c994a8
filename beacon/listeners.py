"""
Listening on Twisted server endpoint strings, all or nothing, and naming
the public URL of a bound listener when none is configured.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.defer import Deferred, gatherResults, maybeDeferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort, IProtocolFactory
from twisted.logger import Logger
from twisted.python.failure import Failure

from beacon.interfaces import IBeaconReactor
from beacon.errors import StartupError

log = Logger()


class Listeners(Service):
    """
    Listens on a list of server endpoint strings, all or nothing: if one
    cannot bind, the ones already bound are closed and start-up fails with
    L{StartupError}.
    """

    def __init__(
        self,
        reactor: IBeaconReactor,
        descriptions: tuple[str, ...],
        factory: IProtocolFactory,
        name: str,
        on_bound: Callable[[list[IListeningPort]], None] | None = None,
    ) -> None:
        """
        @param reactor: Where to listen.
        @param descriptions: Server endpoint strings.
        @param factory: The protocol factory for every port.
        @param name: What these listeners are, for messages (C{"http"}).
        @param on_bound: Called with the ports once all are bound.
        """
        self._reactor = reactor
        self._descriptions = descriptions
        self._factory = factory
        self._what = name
        self._on_bound = on_bound
        self.ports: list[IListeningPort] = []
        self._bound = False

    def privilegedStartService(self) -> None:
        """
        Bind every listener now (before any privileges are shed).

        @raise StartupError: One of them cannot bind.
        """
        super().privilegedStartService()
        if self._bound:
            return
        self._bound = True
        for description in self._descriptions:
            outcome: list[Any] = []
            try:
                endpoint = serverFromString(self._reactor, description)
                endpoint.listen(self._factory).addBoth(outcome.append)
            except Exception as e:
                outcome.append(Failure(e))
            if not outcome or isinstance(outcome[0], Failure):
                for port in self.ports:
                    port.stopListening()
                self.ports = []
                reason = outcome[0].getErrorMessage() if outcome else "did not bind at once"
                log.critical(
                    "{what}.listen_failed: cannot listen on {endpoint}: {reason}",
                    what=self._what,
                    endpoint=description,
                    reason=reason,
                )
                raise StartupError(
                    f"cannot listen on {description!r} ({self._what}): {reason}"
                )
            port = outcome[0]
            self.ports.append(port)
            log.info(
                "{what}.listening: {endpoint} on {address}",
                what=self._what,
                endpoint=description,
                address=_address_text(port),
            )
        if self._on_bound is not None:
            try:
                self._on_bound(self.ports)
            except BaseException:
                for port in self.ports:
                    port.stopListening()
                self.ports = []
                raise

    def startService(self) -> None:
        """Bind, unless L{privilegedStartService} did already."""
        super().startService()
        self.privilegedStartService()

    def stopService(self) -> Deferred[Any]:
        """Close every listener."""
        super().stopService()
        ports, self.ports = self.ports, []
        self._bound = False
        return gatherResults([maybeDeferred(p.stopListening) for p in ports])


def _address_text(port: IListeningPort) -> str:
    host = port.getHost()
    if isinstance(host, (IPv4Address, IPv6Address)):
        address = f"[{host.host}]" if isinstance(host, IPv6Address) else host.host
        return f"{address}:{host.port}"
    return str(getattr(host, "name", host))


def derive_public_url(description: str, port: IListeningPort) -> str:
    """
    The base URL of a bound listener, for when no public URL is configured:
    C{https} for C{ssl:} endpoints, C{http} otherwise; an unspecified address
    (C{0.0.0.0}, C{::}) becomes C{localhost}.

    @raise StartupError: The listener has no host and port (a unix socket).
    """
    host = port.getHost()
    if not isinstance(host, (IPv4Address, IPv6Address)):
        raise StartupError(
            f"cannot derive a public URL from {description!r}: set --public-url"
        )
    scheme = "https" if description.split(":", 1)[0] in ("ssl", "tls") else "http"
    name = host.host
    if name in ("0.0.0.0", "::"):
        name = "localhost"
    elif isinstance(host, IPv6Address):
        name = f"[{name}]"
    default = 443 if scheme == "https" else 80
    suffix = "" if host.port == default else f":{host.port}"
    return f"{scheme}://{name}{suffix}"


__all__ = ["Listeners", "derive_public_url"]
