"""
The reactor Beacon runs on, as one interface: what its services, bindings,
store and client ask of the reactor they are given (the global one at the
twistd and CLI edges, a L{MemoryReactorClock} or L{Clock} in tests).
"""

from __future__ import annotations

from typing import cast

from twisted.internet.interfaces import (
    IReactorCore,
    IReactorFromThreads,
    IReactorSSL,
    IReactorTCP,
    IReactorTime,
    IReactorUNIX,
)


class IBeaconReactor(
    IReactorCore, IReactorTime, IReactorFromThreads, IReactorTCP, IReactorSSL, IReactorUNIX
):
    """
    Listening and connecting (TCP, TLS, unix sockets: every endpoint string
    Beacon accepts), time (every timeout), calls from the store's threads,
    and the reactor's start and shutdown events.
    """


def beacon_reactor(reactor: object) -> IBeaconReactor:
    """
    C{reactor}, once it is seen to provide every interface L{IBeaconReactor}
    joins (Twisted's reactors declare each, not the join).

    @raise TypeError: It lacks one.
    """
    missing = [
        joined.getName()
        for joined in IBeaconReactor.getBases()
        if not joined.providedBy(reactor)
    ]
    if missing:
        raise TypeError(f"{reactor!r} does not provide {', '.join(missing)}")
    return cast(IBeaconReactor, reactor)


__all__ = ["IBeaconReactor", "beacon_reactor"]
