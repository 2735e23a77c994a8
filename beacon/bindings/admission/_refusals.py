"""
Refusals counted where they are made: each L{BeaconSite} and each
L{TransportLimits} holds a L{Refusals}, a plain count of its refusals by
reason, which the metrics (C{beacon.monitoring}) read when they are
scraped. Counting is one dictionary increment on the refusal's own path;
an admitted request counts nothing.

The reasons are Beacon's own words, never anything a peer sent:

    too_large               a body or message over C{[limits] max_body}
    rate_limited            a source over its rate (HTTP 429, WebSocket
                            -31429 and refused upgrades)
    unauthenticated         no good credential (C{[auth]}; the bearer door)
    invalid                 a request Beacon cannot read: framing (400), a
                            native body that is not JSON or not a
                            submission, a WebSocket frame that is not one
                            JSON-RPC object, a refused WebSocket upgrade
                            (400, 426); the JSON-RPC parse, envelope and
                            params errors are counted by the dispatcher
    version                 counted by the dispatcher (-32009)
    unsupported_media_type  a POST body that is not C{application/json}
    too_many_connections    a connection cap (503, HTTP and WebSocket)
    request_timeout         a head, body or WebSocket frame too slow (408,
                            close 1008)
    in_flight_limit         a WebSocket request over C{max_in_flight}
    forbidden_origin        a WebSocket upgrade from an origin not allowed

A body over the cap refused by an HTTP door (the direct channel, twisted.web's
request, the limits' own check) is counted and logged by
L{Refusals.too_large}: an C{http.too_large} line for a source's first
refusal, then at most one line per source every L{SUMMARY_INTERVAL}
seconds with the number refused since its last line, so that a flood of
413s is not a flood of log lines. A request or call refused for want of a
credential (C{http.unauthenticated}, C{a2a.grpc.unauthenticated}) is
logged the same way, by L{Refusals.unauthenticated}.
"""

from __future__ import annotations

from collections import Counter

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from beacon.throttle import SUMMARY_INTERVAL, LogThrottle, Summarise

log = Logger()

#: The most sources whose refusal lines (C{http.too_large}, the
#: C{unauthenticated} ones) are throttled one by one; beyond, those of new
#: sources share one line an interval.
MAX_LOGGED_SOURCES = 10_000

#: Every reason a L{Refusals} counts, in the order the metrics list them.
REASONS = (
    "too_large",
    "rate_limited",
    "unauthenticated",
    "invalid",
    "version",
    "unsupported_media_type",
    "too_many_connections",
    "request_timeout",
    "in_flight_limit",
    "forbidden_origin",
)

#: The refusal reason of each error a binding answers a WebSocket frame
#: with before the dispatcher (its ErrorInfo reason).
_BY_ERROR = {
    "RATE_LIMITED": "rate_limited",
    "TOO_LARGE": "too_large",
    "UNAUTHENTICATED": "unauthenticated",
    "PARSE_ERROR": "invalid",
    "INVALID_REQUEST": "invalid",
    "IN_FLIGHT_LIMIT": "in_flight_limit",
}

#: The refusal reason of each status a WebSocket upgrade is refused with.
_BY_UPGRADE_STATUS = {
    400: "invalid",
    403: "forbidden_origin",
    426: "invalid",
    429: "rate_limited",
    503: "too_many_connections",
}


class Refusals(Counter[str]):
    """
    How many refusals of each reason (see L{REASONS}) one door made:
    C{refusals["too_large"] += 1}. Read on the reactor thread, as it is
    written.
    """

    #: The throttles of the logged refusals, by what they log (made at the
    #: first).
    _throttles: dict[str, LogThrottle] | None = None
    #: The throttle of the C{http.too_large} lines (one of L{_throttles}).
    _too_large: LogThrottle | None = None

    def too_large(self, source: str, limit: int, clock: IReactorTime) -> None:
        """
        Count a request body over C{limit} bytes refused from C{source}, and
        log it: the source's first refusal at once, the next ones within
        L{SUMMARY_INTERVAL} seconds of its last line counted and logged
        as one line when the interval ends (timed on C{clock}).
        """
        self["too_large"] += 1
        throttle = self._too_large
        if throttle is None:
            throttle = self._too_large = self._throttle(
                "http.too_large", clock, _too_large_summary
            )
        detail = str(limit)
        if throttle.count(source, detail):
            return  # Counted for the source's next summary line.
        throttle.note(
            source,
            detail,
            lambda: log.warn(
                "http.too_large: refused a request body over {limit} bytes from {source}",
                limit=limit,
                source=source,
            ),
        )

    def unauthenticated(self, source: str, clock: IReactorTime, door: str) -> None:
        """
        Count a request or call refused from C{source} for want of a good
        credential, and log it, throttled per source as L{too_large} is, as
        C{door}'s event (L{UNAUTHENTICATED}: C{"http"}, C{"grpc"}).
        """
        self["unauthenticated"] += 1
        said, summarise = _UNAUTHENTICATED_LINES[door]
        self._throttle("unauthenticated " + door, clock, summarise).note(
            source, "", lambda: log.info(said, source=source)
        )

    def throttled(
        self,
        reason: str,
        source: str,
        clock: IReactorTime,
        said: str,
        summary: str,
        **fields: object,
    ) -> None:
        """
        Count a refusal of C{reason} from C{source}, and log it, throttled
        per source as L{too_large} is: C{said} (with C{source} and
        C{fields}) for a source's first, then at most one line an interval,
        C{summary} (with C{count} and C{source}), for those since.
        """
        self[reason] += 1
        self._throttle(said, clock, _summary(summary)).note(
            source, "", lambda: log.info(said, source=source, **fields)
        )

    def _throttle(self, event: str, clock: IReactorTime, summarise: Summarise) -> LogThrottle:
        throttles = self._throttles
        if throttles is None:
            throttles = self._throttles = {}
        throttle = throttles.get(event)
        if throttle is None:
            throttle = throttles[event] = LogThrottle(
                clock, summarise, max_kinds=MAX_LOGGED_SOURCES
            )
        return throttle

    def stop_logging(self) -> None:
        """Log what the throttled lines have counted now, and stop their timers."""
        for throttle in (self._throttles or {}).values():
            throttle.stop()

    def error(self, reason: str) -> None:
        """Count a WebSocket frame refused with the ErrorInfo C{reason}."""
        counted = _BY_ERROR.get(reason)
        if counted is not None:
            self[counted] += 1

    def upgrade(self, status: int) -> None:
        """Count a WebSocket upgrade refused with HTTP C{status}."""
        counted = _BY_UPGRADE_STATUS.get(status)
        if counted is not None:
            self[counted] += 1


#: What each door logs of a refusal for want of a credential: the line of a
#: source's first, and of the ones counted since.
UNAUTHENTICATED = {
    "http": (
        "http.unauthenticated: refused a request from {source}",
        "http.unauthenticated: refused {count} more requests from {source} since the last line",
    ),
    "grpc": (
        "a2a.grpc.unauthenticated: refused a call from {source}",
        "a2a.grpc.unauthenticated: refused {count} more calls from {source} since the last line",
    ),
}


def _summary(said: str) -> Summarise:
    """What logs C{said}, a summary line, with its source's count."""

    def summarise(source: str, held: Counter[str]) -> None:
        log.info(said, count=sum(held.values()), source=source or "other sources")

    return summarise


#: Per door: its first line, and the function that logs its summary.
_UNAUTHENTICATED_LINES = {
    door: (said, _summary(summary)) for door, (said, summary) in UNAUTHENTICATED.items()
}


def _too_large_summary(source: str, held: Counter[str]) -> None:
    limit, _ = held.most_common(1)[0]
    log.warn(
        "http.too_large: refused {count} more request bodies over {limit} bytes from "
        "{source} since the last line",
        count=sum(held.values()),
        limit=int(limit),
        source=source or "other sources",
    )


__all__ = ["MAX_LOGGED_SOURCES", "REASONS", "Refusals"]
