"""
The garbage collector's view of start-up: a service that freezes the heap
start-up made, once the reactor runs.
"""

from __future__ import annotations

import gc

from twisted.application.service import Service

from beacon.interfaces import IBeaconReactor


class HeapFreeze(Service):
    """
    Once the reactor runs (every service started, signal handlers in place),
    moves every object start-up made (modules, configuration, connections)
    into the garbage collector's permanent generation (C{gc.freeze}): full
    collections then walk only what serving makes, and stop pausing the
    reactor for tens of milliseconds. It is a choice for the whole process:
    C{twistd beacon} and C{etc/beacon.tac} add it last; an application that
    embeds Beacon decides for itself.
    """

    def __init__(self, reactor: IBeaconReactor) -> None:
        """
        @param reactor: Says when it runs (C{callWhenRunning}).
        """
        self._reactor = reactor

    def startService(self) -> None:
        super().startService()
        self._reactor.callWhenRunning(self._freeze)

    def _freeze(self) -> None:
        if not self.running:
            return
        gc.collect()
        gc.freeze()


__all__ = ["HeapFreeze"]
