"""
Turning a L{Clock} as a reactor turns: the calls due now (a connection's
next turn, C{callLater(0, ...)}) run, then those they schedule for now, one
turn after another.
"""

from __future__ import annotations

from twisted.internet.task import Clock


def due(clock: Clock) -> bool:
    """Whether C{clock} has a call due now."""
    now = clock.seconds()
    return any(call.getTime() <= now for call in clock.getDelayedCalls())


def run_turns(clock: Clock, limit: int = 100_000) -> int:
    """
    Run the turns C{clock} has due now until none is left, as a reactor
    would one after another.

    @return: How many turns ran.
    @raise AssertionError: More than C{limit} (a connection never stops).
    """
    turns = 0
    while due(clock):
        clock.advance(0)
        turns += 1
        assert turns <= limit, f"still turning after {limit} turns"
    return turns


class TurnClock(Clock):
    """
    A L{Clock} whose C{advance} is one turn of a reactor: it runs the calls
    due when it begins, not those they schedule for now (a reactor's
    C{runUntilCurrent} leaves those to its next turn; L{Clock.advance} would
    run them at once, every turn of a yielding connection in one).
    """

    def advance(self, amount: float) -> None:
        self.rightNow += amount
        now = self.seconds()
        for call in [c for c in self.calls if c.getTime() <= now]:
            if call in self.calls:  # Not cancelled by an earlier one.
                self.calls.remove(call)
                call.called = 1
                call.func(*call.args, **call.kw)
