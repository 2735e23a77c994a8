"""
Fakes that implement the real interfaces, for tests and embedders.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from beacon.store._interface import (
    STATE_SUBMITTED,
    ISubmissionStore,
    StoreError,
    Submission,
    TaskStatusRecord,
)

__all__ = ["MemoryStore"]


@implementer(ISubmissionStore)
class MemoryStore:
    """
    An L{ISubmissionStore} in memory. Every L{Deferred} it returns has
    already fired.

    @ivar submissions: Every stored submission by id, in append order.
    @ivar fail_appends: Set to C{True} to make every L{append} fail with
        L{StoreError} (and store nothing), as a broken database would.
    """

    def __init__(self) -> None:
        self.submissions: dict[str, Submission] = {}
        self.fail_appends = False
        # Per submission id: its events as (state, at_ms, note), oldest first.
        self._events: dict[str, list[tuple[str, int, str | None]]] = {}

    def append(self, submission: Submission) -> Deferred[None]:
        """
        Store C{submission}.

        @return: A fired L{Deferred}: L{None}, or a L{StoreError} failure if
            C{fail_appends} is set or the id is already stored.
        """
        if self.fail_appends:
            return fail(StoreError("the memory store is set to fail appends"))
        if submission.id in self.submissions:
            return fail(StoreError("a submission with that id is stored"))
        self.submissions[submission.id] = submission
        return succeed(None)

    def status(self, receipt_id: str) -> Deferred[TaskStatusRecord | None]:
        """
        Derive the status of C{receipt_id} from its newest event.

        @return: A fired L{Deferred}: the L{TaskStatusRecord}, or L{None}.
        """
        submission = self.submissions.get(receipt_id)
        if submission is None:
            return succeed(None)
        events = self._events.get(receipt_id)
        if events:
            state, updated_at_ms, _ = events[-1]
        else:
            state, updated_at_ms = STATE_SUBMITTED, submission.received_at_ms
        return succeed(
            TaskStatusRecord(
                id=submission.id,
                context_id=submission.context_id,
                state=state,
                updated_at_ms=updated_at_ms,
            )
        )

    def append_decision(
        self, receipt_id: str, state: str, at_ms: int, note: str | None = None
    ) -> None:
        """
        Append a review event to a stored submission (until the store
        interface has a way to record decisions).

        @raises KeyError: If no submission has that id.
        """
        if receipt_id not in self.submissions:
            raise KeyError(receipt_id)
        self._events.setdefault(receipt_id, []).append((state, at_ms, note))
