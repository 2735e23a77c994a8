"""
Fair turns: each connection does a bounded amount of work in one turn of
the reactor, then yields until a later turn, so that one connection's
flood cannot hold the reactor while everyone else waits.

The reactor serves connections one read at a time: one read of a flooding
connection (64 KiB: some 600 pipelined requests or 1,000 small WebSocket
frames) used to be worked through whole before any other connection was
read again. A connection now works through at most L{TURN_REQUESTS}
requests (HTTP, either path) or messages (WebSocket), and at most
L{TURN_BYTES} bytes of WebSocket frames, in one turn; then it stops
reading (its transport paused, what it has read and not yet worked
through kept, at most one read), and goes on in a later turn, after every
connection that is ready has been read once.

A connection alone is not slowed for nothing: the connections of one
Beacon share a L{Ledger} of their reads, and once no other connection has
read anything for L{QUIET_SECONDS}, a connection's turns grow, twice as
long at each yield, up to L{MAX_GROWTH} times; the first read of any other
connection brings them back to their length at once. A client that
pipelines alone so loses little; while anyone else is served (more often
than every L{QUIET_SECONDS}), every turn is short, and one who comes after
a quiet spell waits at most one long turn.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

#: HTTP requests one connection may begin in one turn of the reactor
#: before it yields.
TURN_REQUESTS = 3

#: Bytes of WebSocket frames one connection may give to the frame parser
#: in one turn of the reactor before it yields...
TURN_BYTES = 16384

#: ... and whole WebSocket messages (each counts TURN_BYTES / TURN_MESSAGES
#: beside its bytes). A message costs more than an HTTP request to refuse
#: (its id is read from its first bytes), so fewer fit in a turn.
TURN_MESSAGES = 2

#: Seconds without another connection's read before a connection's turns
#: grow.
QUIET_SECONDS = 0.01

#: How many times its length a connection's turn grows to at most while
#: no other connection reads.
MAX_GROWTH = 16


class Ledger:
    """
    The reads of every connection of one Beacon (or of one door, by
    default), so that a connection can tell, when its next turn comes,
    whether anyone else was served meanwhile.

    @ivar reads: How many reads the connections have made.
    """

    __slots__ = ("reads",)

    def __init__(self) -> None:
        self.reads = 0


class Turns:
    """
    One connection's share of the reactor's turns: a budget of work for
    the turn under way, and the call that starts its next turn once it has
    yielded.

    The connection calls L{start} when it reads from its transport (a new
    turn), L{spend} for each unit of work (a request, a message, bytes
    parsed), and once L{spend} says the budget is spent, L{pause}: it
    stops reading and keeps what it has read; C{resume} is then called in a
    later turn of C{clock}, with a fresh budget. L{stop} cancels a pending
    resume (the connection is gone).

    @ivar base: The units of work in one turn.
    @ivar budget: The units of work in one turn now: C{base}, or more while
        the connection is alone (see the module docstring).
    @ivar left: What is left of this turn's budget.
    @ivar paused: Whether the connection has yielded and waits for its next
        turn.
    @ivar ledger: The reads of the connections it shares the reactor with.
    @ivar reads: The connection's own reads since it last looked at the
        ledger (at its last yield's end).
    """

    __slots__ = (
        "_clock",
        "base",
        "budget",
        "left",
        "paused",
        "_call",
        "_resume",
        "ledger",
        "reads",
        "_checked",
        "_company",
    )

    def __init__(
        self,
        clock: IReactorTime,
        budget: int,
        resume: Callable[[], None],
        ledger: Ledger | None = None,
    ) -> None:
        """
        @param clock: Schedules the next turn (the reactor).
        @param budget: Units of work in one turn.
        @param resume: Called in a later turn once the connection has
            yielded (L{pause}); it goes on working with a fresh budget.
        @param ledger: The reads of the connections it shares the reactor
            with (by default, a ledger of its own: it is always alone).
        """
        self._clock = clock
        self.base = budget
        self.budget = budget
        self.left = budget
        self.paused = False
        self._call: IDelayedCall | None = None
        self._resume = resume
        self.ledger = ledger if ledger is not None else Ledger()
        self.reads = 0
        self._checked = self.ledger.reads
        #: When another connection's read was last seen.
        self._company = clock.seconds()

    def start(self) -> None:
        """
        A read: the connection's new turn, with the whole budget again
        (unless it has yielded), counted in the ledger. Longer turns end
        here if anyone else read since the last look.
        """
        if self.budget != self.base:
            self._look(grow=False)
        self.ledger.reads += 1
        self.reads += 1
        if not self.paused:
            self.left = self.budget

    def spend(self, units: int = 1) -> bool:
        """
        Count C{units} of work done in this turn.

        @return: Whether some of the budget is left for more.
        """
        self.left -= units
        return self.left > 0

    def pause(self) -> None:
        """The budget is spent: resume in a later turn."""
        if not self.paused:
            self.paused = True
            self._call = self._clock.callLater(0, self._next)

    def _next(self) -> None:
        self._call = None
        self.paused = False
        self._look(grow=True)
        self.left = self.budget
        self._resume()

    def _look(self, grow: bool) -> None:
        """
        Look at the ledger: if anyone else read since the last look, short
        turns again; if nobody has for L{QUIET_SECONDS}, and C{grow}, turns
        twice as long (at most L{MAX_GROWTH} times).
        """
        reads = self.ledger.reads
        others = reads - self._checked - self.reads
        self._checked = reads
        self.reads = 0
        if others:
            self._company = self._clock.seconds()
            self.budget = self.base
        elif grow and self.budget < self.base * MAX_GROWTH:
            if self._clock.seconds() - self._company >= QUIET_SECONDS:
                self.budget = min(self.budget * 2, self.base * MAX_GROWTH)

    def stop(self) -> None:
        """The connection is gone: no next turn."""
        call, self._call = self._call, None
        self.paused = False
        if call is not None and call.active():
            call.cancel()


__all__ = [
    "MAX_GROWTH",
    "QUIET_SECONDS",
    "TURN_BYTES",
    "TURN_MESSAGES",
    "TURN_REQUESTS",
    "Ledger",
    "Turns",
]
