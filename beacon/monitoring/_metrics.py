"""
Beacon's Prometheus metrics, one L{BeaconMetrics} per service tree (in a
registry of the tree's own, never prometheus_client's global one, so that
two trees in one process do not mix).

How things are counted: where they happen, as plain integers on the objects
each tree already has, and read only when the metrics are scraped (a
custom collector, on the reactor thread):

    - every refusal on its door: each L{BeaconSite} and the public
      L{TransportLimits} keep a L{Refusals} (too large, rate limited, ...),
      and the public dispatcher counts its error answers by ErrorInfo
      reason (C{Dispatcher.errors}: invalid requests, the wrong version);
    - open connections: each site's C{open_connections}, the WebSocket
      factory's, and the requests in progress on each WebSocket
      connection;
    - what the store wrote: a store that reports its batches
      (L{IMeasuredStore}) tells, once per batch, its size, how long its
      commit took, what it stored (door and kind) and what became of each
      decision;
    - pending (undecided) submissions: counted by the store every
      C{interval} seconds (two index counts, not a join), kept current in
      between from the batch reports; never counted per scrape;
    - each notifier's failed deliveries and store reads.

No label carries anything a submitter chose: doors, kinds, reasons and
outcomes are Beacon's own words (a door or kind Beacon does not know is
C{other}).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import Any, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from twisted.application.service import Service
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from beacon import __version__
from beacon.bindings.admission import REASONS
from beacon.protocol import DOORS
from beacon.store import (
    TaskQuery,
    DECISION_ALREADY_MADE,
    DECISION_FAILED,
    DECISION_NOT_FOUND,
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    BatchReport,
    IMeasuredStore,
    ISubmissionStore,
)

log = Logger()

#: A submission's kinds (its doors: L{beacon.protocol.DOORS}).
KINDS = ("text", "structured")
#: Decisions by outcome: the store's word for each, and the metric's.
OUTCOMES = {
    STATE_COMPLETED: "accepted",
    STATE_REJECTED: "rejected",
    DECISION_ALREADY_MADE: "already_decided",
    DECISION_NOT_FOUND: "not_found",
    DECISION_FAILED: "failed",
}
#: The dispatcher's error answers that are refusals, by ErrorInfo reason.
RPC_REFUSALS = {
    "PARSE_ERROR": "invalid",
    "INVALID_REQUEST": "invalid",
    "METHOD_NOT_FOUND": "invalid",
    "INVALID_PARAMS": "invalid",
    "VERSION_NOT_SUPPORTED": "version",
}
#: Writes in one batch (at most the store's max_batch, 512 by default).
BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)
#: Seconds from a batch's hand-off to the writer until it was answered.
COMMIT_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
#: Seconds between two counts of the pending submissions by the store.
PENDING_INTERVAL = 60.0


class Histogram:
    """
    A histogram kept as plain numbers (one bucket index found and one
    increment per observation), exported as a Prometheus histogram.
    """

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count C{value} in the first bucket at or above it."""
        self.counts[bisect_left(self.buckets, value)] += 1
        self.sum += value

    def family(self, name: str, documentation: str) -> HistogramMetricFamily:
        """The Prometheus histogram C{name}: cumulative buckets, sum, count."""
        cumulative = []
        total = 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts):
            total += count
            cumulative.append((floatToGoString(bound), total))
        return HistogramMetricFamily(
            name, documentation, buckets=cumulative, sum_value=self.sum
        )


class PendingCount(Service):
    """
    The number of undecided submissions: counted by the store every
    C{interval} seconds, and moved by each batch report in between (a
    submission stored adds one, a decision made takes one away).

    Writes the count does not see and the reports saw before it answered
    may be missed until the next count, as may another instance's writes
    to a shared database: the gauge is that much behind, never drifting
    further than one interval.

    @ivar value: The count, or None until the store first answered.
    """

    def __init__(
        self, store: ISubmissionStore, clock: IReactorTime, interval: float = PENDING_INTERVAL
    ) -> None:
        self._store = store
        self._clock = clock
        self.interval = interval
        self.value: int | None = None
        self._loop: LoopingCall | None = None
        self._counting = False
        self._waiting: list[Deferred[int | None]] = []

    def startService(self) -> None:
        super().startService()
        loop = LoopingCall(self._tick)
        loop.clock = self._clock
        self._loop = loop
        loop.start(self.interval, now=True)

    def stopService(self) -> None:
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def _tick(self) -> None:
        self.recount()

    def recount(self) -> Deferred[int | None]:
        """
        Ask the store for the count (unless a count is in flight: then
        wait for that one).

        @return: A L{Deferred} firing with the count, or None when the store
            failed (logged; the gauge keeps its value).
        """
        waiting: Deferred[int | None] = Deferred()
        self._waiting.append(waiting)
        if not self._counting:
            self._counting = True
            counted = maybeDeferred(self._count).addCallbacks(self._counted, self._failed)
            counted.addCallback(self._done)
        return waiting

    def _done(self, count: int | None) -> None:
        self._counting = False
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            waiter.callback(count)

    def _count(self) -> Deferred[int]:
        if IMeasuredStore.providedBy(self._store):
            counted: Deferred[int] = self._store.count_undecided()
            return counted
        page = self._store.list_tasks(TaskQuery(status=STATE_SUBMITTED), limit=1)
        return page.addCallback(lambda page: int(page.total or 0))

    def _counted(self, count: int) -> int:
        self.value = count
        return count

    def _failed(self, failure: Failure) -> None:
        log.warn(
            "metrics.pending_count_failed: the undecided submissions could not be"
            " counted: {error}",
            error=" ".join(failure.getErrorMessage().split())[:200],
        )

    def moved(self, by: int) -> None:
        """A batch stored or decided C{by} (net) undecided submissions."""
        if self.value is not None:
            self.value = max(0, self.value + by)


def _label(value: str, known: tuple[str, ...]) -> str:
    return value if value in known else "other"


#: Every (door, kind) a submission is counted under as it is.
_KEYS = frozenset((door, kind) for door in DOORS for kind in KINDS)


class BeaconMetrics(Collector):
    """
    One service tree's metrics, as a prometheus_client collector: the
    tallies kept here from the store's batch reports, and what the doors
    and notifiers the tree hands it count themselves, read at each scrape.
    """

    def __init__(self, pending: PendingCount, ready: Any = None) -> None:
        """
        @param pending: The pending submissions' count.
        @param ready: Says whether the tree is ready (a C{state()} giving
            C{(ready, reason)}), or None.
        """
        self.pending = pending
        self.ready = ready
        self.stored: Counter[tuple[str, str]] = Counter()
        self.decisions: Counter[str] = Counter()
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.commit_seconds = Histogram(COMMIT_BUCKETS)
        self.failed_batches = 0
        self.measured = False
        #: Each door's site (C{open_connections}, C{refusals}), by name.
        self.doors: dict[str, Any] = {}
        #: More refusal counts of a door (the public limits', if not its site's).
        self.extra_refusals: dict[str, list[Counter[str]]] = {}
        self.websocket: Any = None
        self.dispatcher: Any = None
        self.notifiers: list[Any] = []

    def batch(self, report: BatchReport) -> None:
        """
        A batch report of the store (L{IMeasuredStore.observe_batches}):
        once per transaction, on the reactor thread, so it is kept short.
        """
        size, seconds, committed, submissions, decisions = report
        # Histogram.observe, inlined: this runs once per transaction.
        histogram = self.batch_size
        histogram.counts[bisect_left(histogram.buckets, size)] += 1
        histogram.sum += size
        histogram = self.commit_seconds
        histogram.counts[bisect_left(histogram.buckets, seconds)] += 1
        histogram.sum += seconds
        if not committed:
            self.failed_batches += 1
        stored = self.stored
        for submission in submissions:
            key = (submission.door, submission.kind)
            if key not in _KEYS:
                key = (_label(key[0], DOORS), _label(key[1], KINDS))
            stored[key] += 1
        moved = len(submissions)
        for outcome in decisions:
            self.decisions[OUTCOMES.get(outcome, "other")] += 1
            if outcome == STATE_COMPLETED or outcome == STATE_REJECTED:
                moved -= 1
        if moved and self.pending.value is not None:
            self.pending.moved(moved)

    def collect(self) -> Iterator[Any]:
        """Every metric, read now."""
        info = GaugeMetricFamily(
            "beacon_build_info", "Beacon's version (always 1)", labels=["version"]
        )
        info.add_metric([__version__], 1)
        yield info
        if self.ready is not None:
            ready, _ = self.ready.state()
            yield GaugeMetricFamily(
                "beacon_ready", "1 when /readyz answers 200, else 0", value=1 if ready else 0
            )
        yield from self._submissions()
        yield from self._doors()
        if self.pending.value is not None:
            yield GaugeMetricFamily(
                "beacon_pending_submissions",
                "Submissions not yet decided (counted by the store every"
                f" {self.pending.interval:g} s, moved by each write in between)",
                value=self.pending.value,
            )
        yield from self._notifiers()

    def _submissions(self) -> Iterator[Any]:
        if not self.measured:
            return
        stored = CounterMetricFamily(
            "beacon_submissions_stored",
            "Submissions committed by this process, by door and kind",
            labels=["door", "kind"],
        )
        counts = Counter({(door, kind): 0 for door in DOORS for kind in KINDS})
        counts.update(self.stored)
        for (door, kind), count in sorted(counts.items()):
            stored.add_metric([door, kind], count)
        yield stored
        decisions = CounterMetricFamily(
            "beacon_decisions",
            "Review decisions this process wrote, by outcome",
            labels=["outcome"],
        )
        outcomes = Counter({outcome: 0 for outcome in OUTCOMES.values()})
        outcomes.update(self.decisions)
        for outcome, count in outcomes.items():
            decisions.add_metric([outcome], count)
        yield decisions
        yield self.batch_size.family(
            "beacon_store_batch_size", "Writes (submissions and decisions) per store transaction"
        )
        yield self.commit_seconds.family(
            "beacon_store_commit_seconds",
            "Seconds from the store's writer taking a batch until it was"
            " committed (synced) and answered",
        )
        yield CounterMetricFamily(
            "beacon_store_batches_failed",
            "Store transactions that failed (their writes were not stored)",
            value=self.failed_batches,
        )

    def _doors(self) -> Iterator[Any]:
        refusals = CounterMetricFamily(
            "beacon_refusals",
            "Requests, frames and connections refused, by door and reason",
            labels=["door", "reason"],
        )
        connections = GaugeMetricFamily(
            "beacon_open_connections",
            "Open connections, by door (websocket: upgraded connections; grpc: calls in progress)",
            labels=["door"],
        )
        for door, site in self.doors.items():
            counts: Counter[str] = Counter()
            seen: list[Any] = []
            for tally in [site.refusals, *self.extra_refusals.get(door, [])]:
                if not any(tally is s for s in seen):
                    seen.append(tally)
                    counts.update(tally)
            if door == "public" and self.dispatcher is not None:
                for reason, count in self.dispatcher.errors.items():
                    refusal = RPC_REFUSALS.get(reason)
                    if refusal is not None:
                        counts[refusal] += count
            for reason in REASONS:
                refusals.add_metric([door, reason], counts[reason])
            connections.add_metric([door], site.open_connections)
        if self.websocket is not None:
            connections.add_metric(["websocket"], self.websocket.open_connections)
        yield refusals
        yield connections
        if self.websocket is not None:
            yield GaugeMetricFamily(
                "beacon_websocket_requests_in_flight",
                "WebSocket requests in progress (a stream until it ends)",
                value=sum(c.requests_in_flight for c in list(self.websocket.connections)),
            )
        if self.dispatcher is not None:
            errors = CounterMetricFamily(
                "beacon_rpc_errors",
                "JSON-RPC error answers of the public doors, by ErrorInfo reason",
                labels=["reason"],
            )
            for reason, count in sorted(self.dispatcher.errors.items()):
                errors.add_metric([reason], count)
            yield errors

    def _notifiers(self) -> Iterator[Any]:
        if not self.notifiers:
            return
        failures = CounterMetricFamily(
            "beacon_notify_failures",
            "Failed notifications, by channel and stage (delivery: the channel"
            " was not told; store: its cursor could not be read or advanced)",
            labels=["channel", "stage"],
        )
        for notifier in self.notifiers:
            name = notifier.channel.name
            failures.add_metric([name, "delivery"], notifier.failed_deliveries)
            failures.add_metric([name, "store"], notifier.store_failures)
        yield failures


__all__ = [
    "BATCH_BUCKETS",
    "COMMIT_BUCKETS",
    "DOORS",
    "KINDS",
    "OUTCOMES",
    "PENDING_INTERVAL",
    "BeaconMetrics",
    "Histogram",
    "PendingCount",
]
