"""
What the WebSocket binding lets reach the log, and how often: anything the
peer chose is clipped (L{clip}), one line of each kind of event a minute
with the rest counted and summarised (L{LogSummary}), and autobahn's own
lines for a connection made C{ws.autobahn} events the same way
(L{AutobahnLog}).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Protocol

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from beacon.throttle import SUMMARY_INTERVAL, LogThrottle

log = Logger()

#: The most characters of anything the peer chose that a log event carries.
LOG_TEXT_LIMIT = 200


def clip(text: str, limit: int = LOG_TEXT_LIMIT) -> str:
    """
    C{text} cut to C{limit} characters, the cut marked with how much was
    left out: for anything the peer chose that goes into a log event.
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more characters]"


class LogSummary(LogThrottle):
    """
    Logs the first event of each kind at once, then counts that kind's
    events for L{SUMMARY_INTERVAL} seconds and logs one C{ws.summary} line
    for them: a flood of refusals writes a line a minute, not a line per
    refusal. A timer runs only while something is counted (see
    L{LogThrottle}).

    @ivar counts: Every event noted, by kind, since the start.
    """

    def __init__(self, clock: IReactorTime, interval: float = SUMMARY_INTERVAL) -> None:
        super().__init__(clock, _ws_summary, interval)
        self.counts: Counter[str] = Counter()

    def note(self, kind: str, detail: str, emit: Callable[[], None]) -> None:
        """
        One event of C{kind}: logged now by C{emit} when no line of its kind
        was logged within the interval, otherwise counted under C{detail}
        (a word from a small, fixed set) for the next summary.
        """
        self.counts[kind] += 1
        super().note(kind, detail, emit)


def _ws_summary(kind: str, held: Counter[str]) -> None:
    log.info(
        "ws.summary: {count} more {kind} events since the last line ({details})",
        kind=kind,
        count=sum(held.values()),
        details=", ".join(f"{detail or kind}: {n}" for detail, n in held.most_common()),
    )


def _log_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return clip(value if isinstance(value, str) else str(value))


class _Summarised(Protocol):
    """A connection whose factory, once it has one, summarises its events."""

    @property
    def factory(self) -> Any: ...


class AutobahnLog:
    """
    What autobahn logs for one connection (its C{self.log}): debug and
    trace dropped (as autobahn's default level does), anything else a
    C{ws.autobahn} event through the factory's L{LogSummary}, every value
    clipped: autobahn quotes the peer's Host, URI and close reasons.
    """

    def __init__(self, connection: _Summarised) -> None:
        self._connection = connection

    def trace(self, *args: Any, **kwargs: Any) -> None:
        """Dropped."""

    debug = trace

    def _emit(self, level: LogLevel, fmt: str, kwargs: dict[str, Any]) -> None:
        values = {name: _log_value(value) for name, value in kwargs.items()}
        try:
            message = fmt.format(**values) if len(fmt) <= LOG_TEXT_LIMIT else clip(fmt)
        except (KeyError, IndexError, ValueError, AttributeError):
            message = clip(fmt)
        factory = getattr(self._connection, "factory", None)

        def emit() -> None:
            log.emit(level, "ws.autobahn: {message}", message=clip(message, 2 * LOG_TEXT_LIMIT))

        if factory is None:
            emit()
        else:
            factory.events.note("ws.autobahn", clip(fmt, 60), emit)

    def info(self, fmt: str = "", **kwargs: Any) -> None:
        self._emit(LogLevel.info, fmt, kwargs)

    def warn(self, fmt: str = "", **kwargs: Any) -> None:
        self._emit(LogLevel.warn, fmt, kwargs)

    def error(self, fmt: str = "", **kwargs: Any) -> None:
        self._emit(LogLevel.error, fmt, kwargs)

    def critical(self, fmt: str = "", **kwargs: Any) -> None:
        self._emit(LogLevel.critical, fmt, kwargs)

    def failure(self, fmt: str = "", failure: Failure | None = None, **kwargs: Any) -> None:
        log.failure(
            "ws.autobahn: {message}",
            failure,
            message=clip(fmt),
        )


__all__ = ["LOG_TEXT_LIMIT", "SUMMARY_INTERVAL", "AutobahnLog", "LogSummary", "clip"]
