"""
How often a kind of event may reach the log (L{LogThrottle}): its first
line at once, then at most one line an interval, which counts what was
left out. The WebSocket binding's summaries, the doors' refusal lines per
source (C{http.too_large}, C{http.unauthenticated}, the C{a2a.grpc.*}
refusals), the operator socket's C{a2a.unix.denied} and the web console's
C{console.refused} are made by it.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

#: Seconds between two lines of one kind of event: the rest are counted
#: and summarised.
SUMMARY_INTERVAL = 60.0

#: Logs the summary of one kind: its name and what was counted of it since
#: its last line, by detail.
Summarise = Callable[[str, Counter[str]], None]


class LogThrottle:
    """
    Logs the first event of each kind at once, then counts that kind's
    events for L{interval} seconds and has one summary line logged for them
    (by C{summarise}): a flood of refusals writes a line an interval, not a
    line per refusal. A timer runs only while something is counted.

    With C{max_kinds}, at most that many kinds are remembered: kinds whose
    last line is an interval old and that count nothing are forgotten first,
    and while the table is still full, the events of a new kind are those
    of the kind C{overflow} (one line an interval for all of them), so that
    a flood from many sources costs bounded memory and lines.
    """

    def __init__(
        self,
        clock: IReactorTime,
        summarise: Summarise,
        interval: float = SUMMARY_INTERVAL,
        *,
        max_kinds: int | None = None,
        overflow: str = "",
    ) -> None:
        self._clock = clock
        self._summarise_kind = summarise
        self.interval = interval
        self.max_kinds = max_kinds
        self.overflow = overflow
        self._logged_at: dict[str, float] = {}
        self._held: dict[str, Counter[str]] = {}
        self._call: IDelayedCall | None = None

    def __len__(self) -> int:
        """How many kinds are remembered."""
        return len(self._logged_at)

    def note(self, kind: str, detail: str, emit: Callable[[], None]) -> None:
        """
        One event of C{kind}: logged now by C{emit} when no line of its kind
        was logged within the interval, otherwise counted under C{detail}
        (a word from a small, fixed set) for the next summary.
        """
        now = self._clock.seconds()
        logged_at = self._logged_at.get(kind)
        if logged_at is None and self.max_kinds is not None and len(self._logged_at) >= self.max_kinds:
            self._forget(now)
            if len(self._logged_at) >= self.max_kinds:
                kind = self.overflow
                logged_at = self._logged_at.get(kind)
        if logged_at is None or (now - logged_at >= self.interval and kind not in self._held):
            self._logged_at[kind] = now
            emit()
            return
        held = self._held.get(kind)
        if held is None:
            held = self._held[kind] = Counter()
        held[detail] += 1
        if self._call is None:
            self._call = self._clock.callLater(
                max(0.0, logged_at + self.interval - now), self._summarise
            )

    def count(self, kind: str, detail: str) -> bool:
        """
        L{note} for an event of C{kind} while that kind's events are being
        counted for its next summary (its line logged within the interval):
        count it under C{detail} and return True. Otherwise (the event may
        be due a line of its own) do nothing and return False: the caller
        calls L{note}. A flood's events after its first two cost one
        look-up each, and no C{emit} made for nothing.
        """
        held = self._held.get(kind)
        if held is None:
            return False
        held[detail] += 1
        return True

    def _forget(self, now: float) -> None:
        """Forget the kinds whose last line is an interval old and that count nothing."""
        for kind, logged_at in list(self._logged_at.items()):
            if now - logged_at >= self.interval and kind not in self._held:
                del self._logged_at[kind]

    def _summarise(self, final: bool = False) -> None:
        self._call = None
        now = self._clock.seconds()
        due: float | None = None
        for kind in list(self._held):
            ends = self._logged_at[kind] + self.interval
            if ends > now and not final:
                due = ends if due is None else min(due, ends)
                continue
            held = self._held.pop(kind)
            self._logged_at[kind] = now
            self._summarise_kind(kind, held)
        if due is not None:
            self._call = self._clock.callLater(due - now, self._summarise)

    def stop(self) -> None:
        """Log what is counted now, and stop the timer."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._summarise(final=True)


__all__ = ["SUMMARY_INTERVAL", "LogThrottle", "Summarise"]
