"""
What a store tells whoever measures it (Beacon's metrics): each batch of
writes it finished (L{BatchReport}s), and how many submissions are
undecided, counted cheaply (L{IMeasuredStore}).

A thread-pool store (L{beacon.store.SQLiteStore},
L{beacon.store.PostgreSQLStore}) writes submissions and decisions in
batches, one transaction each (group commit). Reports are made only while
someone observes, once per batch, on the reactor thread, before the batch's
writes are answered: a submitter that has its receipt finds its submission
counted.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from twisted.internet.defer import Deferred
from zope.interface import Interface

from beacon.store._interface import Submission

#: What became of a decision in a committed batch when it set no state:
#: the submission already had a decision, or there is no such submission.
DECISION_ALREADY_MADE = "already_decided"
DECISION_NOT_FOUND = "not_found"
#: A decision in a batch that was not committed.
DECISION_FAILED = "failed"


class BatchReport(NamedTuple):
    """
    One batch the store's writer finished (a named tuple: made once per
    batch on the reactor thread, it costs little).

    @ivar size: The writes in it (submissions and decisions).
    @ivar seconds: From the writer thread's taking the batch until its
        outcome was back on the reactor thread: the transaction, its commit
        and sync to disk, and the hand-off to the reactor.
    @ivar committed: Whether it was committed (otherwise nothing of it was
        stored, and every write in it failed).
    @ivar stored: The submissions it stored, in order (none when it was
        not committed).
    @ivar decisions: What became of each decision in it, in order: the
        state it set (C{STATE_COMPLETED}, C{STATE_REJECTED}),
        L{DECISION_ALREADY_MADE}, L{DECISION_NOT_FOUND}, or
        L{DECISION_FAILED} when the batch was not committed.
    """

    size: int
    seconds: float
    committed: bool
    stored: tuple[Submission, ...]
    decisions: tuple[str, ...]


class IMeasuredStore(Interface):
    """
    A store that reports each batch of writes it finishes, and counts its
    undecided submissions without reading them.
    """

    def count_undecided() -> Deferred[int]:
        """
        How many submissions have no decision yet, counted by the database
        (its submissions less its decisions: two index counts, not a join):
        a read of its own, for a periodic gauge rather than every request.

        @return: A L{Deferred} firing with the count, or failing with
            L{StoreError <beacon.store.StoreError>}.
        """

    def observe_batches(observer: Callable[[BatchReport], None]) -> Callable[[], None]:
        """
        Call C{observer} (on the reactor thread) with a L{BatchReport} for
        every batch finished from now on, committed or not, before the
        batch's writes are answered. An observer that raises is logged and
        changes nothing else.

        @return: A function that stops the observing; calling it again
            does nothing.
        """


__all__ = [
    "BatchReport",
    "DECISION_ALREADY_MADE",
    "DECISION_FAILED",
    "DECISION_NOT_FOUND",
    "IMeasuredStore",
]
