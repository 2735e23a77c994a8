"""
The submission store's contract: what every backend (SQLite, PostgreSQL, the
in-memory fake in L{beacon.testing}) promises.

The store is append-only. A submission row is written once and never changed;
facts about it (review decisions) are appended as events, and a task's state is
derived from its newest event. The one exception is L{ISubmissionStore.purge}:
a person may erase the content (and the decision's note) of decided
submissions, keeping everything else. Every method returns a L{Deferred}; no
backend may block the reactor thread. L{check_decision_state}, L{check_limit}
and L{check_lease} are the argument checks every backend makes (a
L{TaskQuery} checks its own values); L{search_words} says what the words of a
search are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from twisted.internet.defer import Deferred
from zope.interface import Interface

from beacon.protocol import STATE_COMPLETED, STATE_REJECTED
from beacon.protocol.query import TaskQuery

#: The states a review decision may set.
DECISION_STATES = frozenset({STATE_COMPLETED, STATE_REJECTED})


# Not frozen, as it is made for every request: see beacon.protocol.types.Part.
@dataclass(slots=True)
class Submission:
    """
    One stored submission, exactly as it is written.

    @ivar id: The receipt id (a capability: at least 128 random bits).
    @ivar context_id: The A2A contextId generated for it.
    @ivar received_at_ms: When Beacon received it, in milliseconds since the
        epoch (UTC).
    @ivar door: The binding it came through (C{"a2a-jsonrpc"}, C{"native"}...).
    @ivar source: The submitting peer's address as text (never content).
    @ivar kind: C{"structured"} or C{"text"}.
    @ivar message_id: The submitter's own message id (may be empty).
    @ivar content: The canonical stored content (UTF-8 JSON, see
        L{beacon.intake.canonical_content}).
    @ivar sha256: The SHA-256 of C{content}, 64 lowercase hex digits.
    """

    id: str
    context_id: str
    received_at_ms: int
    door: str
    source: str
    kind: str
    message_id: str
    content: bytes
    sha256: str


# Not frozen, as it is made for every request: see beacon.protocol.types.Part.
@dataclass(slots=True)
class TaskStatusRecord:
    """
    A submission's derived status: what the public GetTask may reveal.

    @ivar id: The receipt id.
    @ivar context_id: The contextId generated at submission.
    @ivar state: An A2A TaskState name (C{STATE_*}).
    @ivar updated_at_ms: When the state was last set (receipt or decision),
        in milliseconds since the epoch.
    """

    id: str
    context_id: str
    state: str
    updated_at_ms: int


@dataclass(frozen=True)
class StoredTask:
    """
    Everything the operator may see of one submission.

    @ivar submission: The submission as stored.
    @ivar state: Its derived A2A TaskState name.
    @ivar updated_at_ms: When the state was set (receipt or decision).
    @ivar note: The decision's note, if a decision with a note was made.
    @ivar seq: The store's own order of arrival (ties in C{updated_at_ms}
        are broken by it).
    @ivar purged_at_ms: When L{ISubmissionStore.purge} erased its content
        (then C{submission.content} is C{b""} and C{note} is L{None}), or
        L{None}.
    """

    submission: Submission
    state: str
    updated_at_ms: int
    note: str | None
    seq: int
    purged_at_ms: int | None = None


@dataclass(frozen=True)
class TaskPage:
    """
    One page of L{ISubmissionStore.list_tasks}.

    @ivar tasks: In the order asked for (C{SORT_UPDATED}: newest status
        timestamp first; C{SORT_RECEIVED}: newest receipt first; ties:
        highest C{seq} first).
    @ivar total: How many tasks match the filters, before paging, or
        L{None} when the caller did not ask (C{with_total=False}).
    @ivar next_after: The keyset cursor C{(key, seq)} of the last task on
        this page when more follow, else None; C{key} is the sort's
        timestamp (C{updated_at_ms} or C{received_at_ms}).
    @ivar total_capped: Whether more than C{total} tasks match: the caller
        capped the count (C{total_cap}) and it reached the cap, so C{total}
        is the cap, not the count.
    """

    tasks: list[StoredTask]
    total: int | None
    next_after: tuple[int, int] | None
    total_capped: bool = False


@dataclass(frozen=True)
class NotificationBatch:
    """
    What L{ISubmissionStore.claim_notifications} hands its caller: the
    submissions that channel has not yet been told of, oldest first.

    @ivar tasks: Up to C{limit} tasks, in C{seq} order.
    @ivar through_seq: The C{seq} of the last task in C{tasks}: what
        L{ISubmissionStore.finish_notifications} advances the channel to.
    @ivar pending: How many submissions were waiting in all (at least
        C{len(tasks)}; the rest come in later batches).
    """

    tasks: list[StoredTask]
    through_seq: int
    pending: int


@dataclass(frozen=True)
class StoreEvent:
    """
    Something was committed: a submission (C{kind="submitted"}) or a review
    decision (C{kind="decided"}). It carries ids only; listeners read the
    task.
    """

    kind: str
    task_id: str


class AlreadyDecided(Exception):
    """The submission already has a decision; decisions are never replaced."""


class StoreError(Exception):
    """
    The store could not do what was asked (disk full, database gone, schema
    newer than the code). A submission that met this error was not stored.
    """


class ISubmissionStore(Interface):
    """
    An append-only store of submissions.
    """

    def append(submission: Submission) -> Deferred[None]:
        """
        Store C{submission}.

        @return: A L{Deferred} that fires with L{None} only after the
            submission is committed and synced to stable storage, or fails
            with L{StoreError}. Concurrent appends may share one transaction.
        """

    def get(receipt_id: str) -> Deferred[StoredTask | None]:
        """
        Read everything about one submission.

        @return: A L{Deferred} that fires with the L{StoredTask}, or with
            L{None} when no submission has that id.
        """

    def list_tasks(
        query: TaskQuery,
        *,
        limit: int,
        after: tuple[int, int] | None = None,
        with_total: bool = True,
        total_cap: int | None = None,
    ) -> Deferred[TaskPage]:
        """
        List the submissions C{query} matches (its filters combine with
        AND), newest first in its order (ties: newest arrival first), with
        keyset paging.

        @param query: Which tasks, in which order (see L{TaskQuery}: its
            fields are the filters every backend applies, its values
            already checked).
        @param limit: The page size (at least 1).
        @param after: The cursor of the previous page (its C{next_after},
            with the same C{query.sort}): only tasks strictly after
            C{(key, seq)} in the order above.
        @param with_total: Whether to count the matching tasks
            (C{TaskPage.total}); a caller paging through everything asks
            once.
        @param total_cap: Count at most this many and one more: when more
            match, C{TaskPage.total} is C{total_cap} and
            C{TaskPage.total_capped} is true (L{None}: count every one).
        @raises ValueError: (as a failed Deferred) for a C{limit} below 1.
        """

    def purge(
        decided_before_ms: int, at_ms: int, *, dry_run: bool = False
    ) -> Deferred[int]:
        """
        Erase the content of every decided, not yet purged submission whose
        decision was made strictly before C{decided_before_ms}: its content
        (C{b""}), the decision's note, and its searchable text, from the
        database files too (SQLite: neither the file nor its WAL holds them
        afterwards; PostgreSQL: C{VACUUM FULL} rewrites the tables, so no
        file of the database's directory holds them, but the write-ahead
        log does until its segments are recycled and overwritten). The id,
        context, times, door, source, kind, message id, sha256 and state
        stay, so status and receipts still answer. The one change to stored
        data Beacon makes; made by a person. Listeners hear nothing of it.

        @param at_ms: When the purge was made (C{StoredTask.purged_at_ms}).
        @param dry_run: Count only; change nothing.
        @return: A L{Deferred} firing with how many submissions were (or,
            with C{dry_run}, would be) purged.
        """

    def claim_notifications(
        channel: str, holder: str, now_ms: int, lease_ms: int, limit: int
    ) -> Deferred[NotificationBatch | None]:
        """
        Take the lease of notification channel C{channel} (a name such as
        C{"command"}) for C{holder} until C{now_ms + lease_ms}, and read the
        submissions it has not yet been told of. The channel's cursor is
        kept in the database, so that several instances sharing it notify
        each submission once, and a restart neither repeats nor loses one.

        A channel seen for the first time starts after the newest
        submission stored (no backlog is notified).

        A holder that claims again while it holds the lease (before
        L{finish_notifications}) is given the same submissions again, and
        its lease is renewed. A lease that ran out may be taken by another
        holder, which is then given the submissions the first one did not
        finish: delivery is at least once when a holder outlives its lease.

        @param now_ms: The caller's clock, in milliseconds since the epoch.
        @param lease_ms: How long the lease lasts (at least 1).
        @param limit: The most tasks in one batch (at least 1).
        @return: A L{Deferred} firing with a L{NotificationBatch}, or with
            L{None} when the channel was seen for the first time, when
            another holder's lease is current or when nothing is new (then
            no lease is held), or failing with L{ValueError} for a
            C{limit} or C{lease_ms} below 1.
        """

    def finish_notifications(
        channel: str, holder: str, through_seq: int | None
    ) -> Deferred[None]:
        """
        End C{holder}'s lease of C{channel}: advance its cursor to
        C{through_seq} (the batch was delivered) or leave it (L{None}: it
        was not; the same submissions come again). Does nothing if
        C{holder} no longer holds the lease.
        """

    def decide(
        receipt_id: str, state: str, at_ms: int, note: str | None
    ) -> Deferred[StoredTask | None]:
        """
        Append a review decision: C{state} is L{STATE_COMPLETED} (accepted)
        or L{STATE_REJECTED}.

        @return: A L{Deferred} that fires, after the commit, with the task in
            its new state, or with None when no submission has that id; it
            fails with L{AlreadyDecided} when a decision exists.
        """

    def subscribe(listener: Callable[[StoreEvent], None]) -> Callable[[], None]:
        """
        Call C{listener} (on the reactor thread, in commit order) with a
        L{StoreEvent} after every committed submission or decision.

        @return: A function that unsubscribes.
        """

    def status(receipt_id: str) -> Deferred[TaskStatusRecord | None]:
        """
        Derive the current status of a stored submission.

        @return: A L{Deferred} that fires with the L{TaskStatusRecord}, or
            with L{None} when no submission has that id.
        """


def check_decision_state(state: str) -> None:
    """
    Refuse a decision state other than L{STATE_COMPLETED} or
    L{STATE_REJECTED}.

    @raises ValueError: If C{state} is any other value.
    """
    if state not in DECISION_STATES:
        raise ValueError(
            f"a decision is {STATE_COMPLETED} or {STATE_REJECTED}, not {state!r}"
        )


_WORD = re.compile(r"[^\W_]+")


def search_words(search: str) -> list[str]:
    """
    The words of a L{ISubmissionStore.list_tasks} C{search}: its runs of
    letters and digits (any script), as written. Anything else (spaces,
    punctuation, symbols, C{_}) separates words and is not searched for.
    """
    return _WORD.findall(search)


def check_lease(lease_ms: int) -> None:
    """
    Refuse a notification lease (L{ISubmissionStore.claim_notifications})
    shorter than a millisecond.

    @raises ValueError: If C{lease_ms} is less than 1.
    """
    if lease_ms < 1:
        raise ValueError(f"lease_ms must be at least 1, not {lease_ms}")


def check_limit(limit: int) -> None:
    """
    Refuse a page size below one.

    @raises ValueError: If C{limit} is less than 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
