"""
The submission store's contract: what every backend (SQLite, PostgreSQL, the
in-memory fake in L{beacon.testing}) promises.

The store is append-only. A submission row is written once and never changed;
facts about it (review decisions) are appended as events, and a task's state is
derived from its newest event. Every method returns a L{Deferred}; no backend
may block the reactor thread. L{check_decision_state} and L{check_limit} are
the argument checks every backend makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from twisted.internet.defer import Deferred
from zope.interface import Interface

from beacon.protocol import STATE_COMPLETED, STATE_REJECTED

#: The states a review decision may set.
DECISION_STATES = frozenset({STATE_COMPLETED, STATE_REJECTED})


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
    """

    submission: Submission
    state: str
    updated_at_ms: int
    note: str | None
    seq: int


@dataclass(frozen=True)
class TaskPage:
    """
    One page of L{ISubmissionStore.list_tasks}.

    @ivar tasks: Newest status timestamp first (then highest C{seq} first).
    @ivar total: How many tasks match the filters, before paging.
    @ivar next_after: The keyset cursor C{(updated_at_ms, seq)} of the last
        task on this page when more follow, else None.
    """

    tasks: list[StoredTask]
    total: int
    next_after: tuple[int, int] | None


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
        *,
        limit: int,
        state: str | None = None,
        updated_after_ms: int | None = None,
        context_id: str | None = None,
        after: tuple[int, int] | None = None,
    ) -> Deferred[TaskPage]:
        """
        List submissions, newest status timestamp first (ties: newest
        arrival first), with keyset paging.

        @param limit: The page size (at least 1).
        @param state: Only tasks in this TaskState.
        @param updated_after_ms: Only tasks whose status timestamp is at or
            after this time.
        @param context_id: Only the task with this contextId.
        @param after: The cursor of the previous page: only tasks strictly
            after C{(updated_at_ms, seq)} in the order above.
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


def check_limit(limit: int) -> None:
    """
    Refuse a page size below one.

    @raises ValueError: If C{limit} is less than 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
