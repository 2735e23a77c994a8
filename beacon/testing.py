"""
Fakes that implement the real interfaces, for tests and embedders.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.store import (
    STATE_SUBMITTED,
    AlreadyDecided,
    ISubmissionStore,
    StoredTask,
    StoreError,
    StoreEvent,
    StoreListeners,
    Submission,
    TaskPage,
    TaskStatusRecord,
    check_decision_state,
    check_limit,
)

__all__ = ["MemoryStore"]


@implementer(ISubmissionStore)
class MemoryStore:
    """
    An L{ISubmissionStore} in memory, with the same semantics as
    L{beacon.store.SQLiteStore}, synchronously: every L{Deferred} it returns
    has already fired, and its listeners are called before L{append} or
    L{decide} returns (so before any callback the caller adds).

    @ivar submissions: Every stored submission by id, in append order.
    @ivar fail_appends: Set to C{True} to make every L{append} and L{decide}
        fail with L{StoreError} (and store nothing), as a broken database
        would.
    """

    log = Logger()

    def __init__(self) -> None:
        self.submissions: dict[str, Submission] = {}
        self.fail_appends = False
        # Per submission id: its order of arrival, from 1, and its decision
        # as (state, at_ms, note) once it has one.
        self._seq: dict[str, int] = {}
        self._decisions: dict[str, tuple[str, int, str | None]] = {}
        self._listeners = StoreListeners(self.log)

    def append(self, submission: Submission) -> Deferred[None]:
        """
        Store C{submission}, then tell the listeners.

        @return: A fired L{Deferred}: L{None}, or a L{StoreError} failure if
            C{fail_appends} is set or the id is already stored.
        """
        if self.fail_appends:
            return fail(StoreError("the memory store is set to fail appends"))
        if submission.id in self.submissions:
            return fail(StoreError("a submission with that id is stored"))
        self.submissions[submission.id] = submission
        self._seq[submission.id] = len(self._seq) + 1
        self._listeners.notify([StoreEvent("submitted", submission.id)])
        return succeed(None)

    def get(self, receipt_id: str) -> Deferred[StoredTask | None]:
        """
        Everything about C{receipt_id}.

        @return: A fired L{Deferred}: the L{StoredTask}, or L{None}.
        """
        return succeed(self._task(receipt_id))

    def list_tasks(
        self,
        *,
        limit: int,
        state: str | None = None,
        updated_after_ms: int | None = None,
        context_id: str | None = None,
        after: tuple[int, int] | None = None,
    ) -> Deferred[TaskPage]:
        """
        One page of tasks, newest C{updated_at_ms} first, then highest
        C{seq} first; see L{ISubmissionStore.list_tasks}.

        @return: A fired L{Deferred}: the L{TaskPage}, or a L{ValueError}
            failure if C{limit} is below 1.
        """
        try:
            check_limit(limit)
        except ValueError:
            return fail()
        matching: list[StoredTask] = []
        for receipt_id in self.submissions:
            task = self._task(receipt_id)
            assert task is not None
            if state is not None and task.state != state:
                continue
            if updated_after_ms is not None and task.updated_at_ms < updated_after_ms:
                continue
            if context_id is not None and task.submission.context_id != context_id:
                continue
            matching.append(task)
        matching.sort(key=lambda task: (task.updated_at_ms, task.seq), reverse=True)
        following = [
            task
            for task in matching
            if after is None or (task.updated_at_ms, task.seq) < after
        ]
        tasks = following[:limit]
        next_after = None
        if len(following) > limit:
            next_after = (tasks[-1].updated_at_ms, tasks[-1].seq)
        return succeed(
            TaskPage(tasks=tasks, total=len(matching), next_after=next_after)
        )

    def decide(
        self, receipt_id: str, state: str, at_ms: int, note: str | None
    ) -> Deferred[StoredTask | None]:
        """
        Record a review decision, then tell the listeners.

        @return: A fired L{Deferred}: the task in its new state, or L{None}
            for an unknown id; or a failure: L{ValueError} for a C{state}
            other than completed or rejected, L{StoreError} if
            C{fail_appends} is set, L{AlreadyDecided} if it has a decision.
        """
        try:
            check_decision_state(state)
        except ValueError:
            return fail()
        if self.fail_appends:
            return fail(StoreError("the memory store is set to fail appends"))
        if receipt_id not in self.submissions:
            return succeed(None)
        if receipt_id in self._decisions:
            return fail(AlreadyDecided("the submission already has a decision"))
        self._decisions[receipt_id] = (state, at_ms, note)
        self._listeners.notify([StoreEvent("decided", receipt_id)])
        return succeed(self._task(receipt_id))

    def subscribe(self, listener: Callable[[StoreEvent], None]) -> Callable[[], None]:
        """
        Call C{listener} with a L{StoreEvent} for every stored submission and
        decision, in order, before the L{append} or L{decide} that made it
        returns. A listener that raises is logged (C{store.listener_failed})
        and changes nothing else.

        @return: A function that unsubscribes; calling it again does nothing.
        """
        return self._listeners.subscribe(listener)

    def status(self, receipt_id: str) -> Deferred[TaskStatusRecord | None]:
        """
        Derive the status of C{receipt_id} from its decision.

        @return: A fired L{Deferred}: the L{TaskStatusRecord}, or L{None}.
        """
        task = self._task(receipt_id)
        if task is None:
            return succeed(None)
        return succeed(
            TaskStatusRecord(
                id=task.submission.id,
                context_id=task.submission.context_id,
                state=task.state,
                updated_at_ms=task.updated_at_ms,
            )
        )

    def append_decision(
        self, receipt_id: str, state: str, at_ms: int, note: str | None = None
    ) -> None:
        """
        Record a review decision synchronously: L{decide} for tests that
        set up a decided task.

        @raises KeyError: If no submission has that id.
        @raises AlreadyDecided: If it has a decision.
        @raises ValueError: If C{state} is not completed or rejected.
        @raises StoreError: If C{fail_appends} is set.
        """
        outcome: list[StoredTask | None] = []
        failures: list[Failure] = []
        self.decide(receipt_id, state, at_ms, note).addCallbacks(
            outcome.append, failures.append
        )
        if failures:
            failures[0].raiseException()
        if outcome == [None]:
            raise KeyError(receipt_id)

    def _task(self, receipt_id: str) -> StoredTask | None:
        """
        The L{StoredTask} of C{receipt_id}, or L{None}.
        """
        submission = self.submissions.get(receipt_id)
        if submission is None:
            return None
        decision = self._decisions.get(receipt_id)
        if decision is None:
            state, updated_at_ms, note = (
                STATE_SUBMITTED,
                submission.received_at_ms,
                None,
            )
        else:
            state, updated_at_ms, note = decision
        return StoredTask(
            submission=submission,
            state=state,
            updated_at_ms=updated_at_ms,
            note=note,
            seq=self._seq[receipt_id],
        )
