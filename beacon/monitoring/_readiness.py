"""
Readiness: whether this Beacon should be sent traffic. It is kept in
memory by a periodic check on the injected clock, so that answering
C{/readyz} costs no store round trip, however often a load balancer asks.

Ready means: the service is running (its listeners bound: it starts after
them), and the store answered a trivial query (the status of an id no
submission has) within the last C{stale_after} seconds, the last one
without an error. One check is in flight at a time: a store that does not
answer is not asked again until it does, and turns unready once its last
answer is older than C{stale_after}.
"""

from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from beacon.store import ISubmissionStore

log = Logger()

#: Seconds between two checks of the store.
CHECK_INTERVAL = 2.0
#: Seconds after which the store's last answer is too old: not ready.
STALE_AFTER = 10.0
#: The receipt id the check asks the status of: well formed (36 base32hex
#: digits), and no submission's (its time and its 132 random bits are 0).
PROBE_ID = "0" * 36
#: The longest error text kept for the log.
_ERROR_KEPT = 200

#: Why Beacon is not ready (the C{reason} of a 503 from C{/readyz}).
STARTING = "starting"
STOPPING = "stopping"
STORE_FAILED = "store_failed"
STORE_UNRESPONSIVE = "store_unresponsive"


class Readiness(Service):
    """
    Checks the store every C{interval} seconds while running, and says
    whether Beacon is ready (L{state}).
    """

    def __init__(
        self,
        store: ISubmissionStore,
        clock: IReactorTime,
        *,
        interval: float = CHECK_INTERVAL,
        stale_after: float = STALE_AFTER,
    ) -> None:
        """
        @param store: What is checked.
        @param clock: Times the checks and the answers' age.
        @param interval: Seconds between checks.
        @param stale_after: Seconds after which the last answer is too old.
        """
        self._store = store
        self._clock = clock
        self.interval = interval
        self.stale_after = stale_after
        self._loop: LoopingCall | None = None
        self._started_at: float | None = None
        self._answered_at: float | None = None
        self._error: str | None = None
        self._asking = False
        self._waiting: list[Deferred[tuple[bool, str | None]]] = []
        self._reported: str | None = STARTING

    def startService(self) -> None:
        """Check now, then every C{interval} seconds."""
        super().startService()
        self._started_at = self._clock.seconds()
        self._answered_at = None
        self._error = None
        loop = LoopingCall(self._check)
        loop.clock = self._clock
        self._loop = loop
        loop.start(self.interval, now=True)

    def stopService(self) -> None:
        """Not ready from now on; no more checks."""
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def state(self) -> tuple[bool, str | None]:
        """
        Whether Beacon is ready, and if not why: L{STARTING}, L{STOPPING},
        L{STORE_FAILED} or L{STORE_UNRESPONSIVE}. Cheap: no I/O.
        """
        if not self.running:
            return False, STOPPING if self._started_at is not None else STARTING
        if self._error is not None:
            return False, STORE_FAILED
        now = self._clock.seconds()
        if self._answered_at is None:
            assert self._started_at is not None
            if now - self._started_at <= self.stale_after:
                return False, STARTING
            return False, STORE_UNRESPONSIVE
        if now - self._answered_at > self.stale_after:
            return False, STORE_UNRESPONSIVE
        return True, None

    def check(self) -> Deferred[tuple[bool, str | None]]:
        """
        Check the store now (or wait for the check in flight), for an
        embedder or a test that waits for readiness.

        @return: A L{Deferred} firing with L{state} once the store answered.
        """
        waiting: Deferred[tuple[bool, str | None]] = Deferred()
        self._waiting.append(waiting)
        self._check()
        return waiting

    def _check(self) -> None:
        """Ask the store, unless the last question is still unanswered."""
        self._report()
        if self._asking:
            return
        self._asking = True
        asked: Any = maybeDeferred(self._store.status, PROBE_ID)
        asked.addCallbacks(self._answered, self._failed).addCallback(self._tell)

    def _answered(self, _: object) -> None:
        self._asking = False
        self._answered_at = self._clock.seconds()
        self._error = None
        self._report()

    def _failed(self, failure: Failure) -> None:
        self._asking = False
        text = " ".join(failure.getErrorMessage().split())
        self._error = text[:_ERROR_KEPT] or type(failure.value).__name__
        self._report()

    def _tell(self, _: None) -> None:
        waiting, self._waiting = self._waiting, []
        state = self.state()
        for waiter in waiting:
            waiter.callback(state)

    def _report(self) -> None:
        """Log a change of readiness (not every check)."""
        if not self.running:
            return
        ready, reason = self.state()
        if reason == self._reported:
            return
        self._reported = reason
        if ready:
            log.info("health.ready: Beacon is ready (its store answers)")
        elif reason == STORE_FAILED:
            log.warn(
                "health.not_ready: the store check failed: {error}", reason=reason, error=self._error
            )
        else:
            log.warn(
                "health.not_ready: {reason} (the store's last answer is over {seconds} s old)",
                reason=reason,
                seconds=self.stale_after,
            )


__all__ = [
    "CHECK_INTERVAL",
    "PROBE_ID",
    "STALE_AFTER",
    "STARTING",
    "STOPPING",
    "STORE_FAILED",
    "STORE_UNRESPONSIVE",
    "Readiness",
]
