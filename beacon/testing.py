"""
Fakes that implement the real interfaces, for tests and embedders.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.store import (
    SORT_RECEIVED,
    STATE_SUBMITTED,
    AlreadyDecided,
    ISubmissionStore,
    NotificationBatch,
    StoredTask,
    StoreError,
    StoreEvent,
    StoreListeners,
    Submission,
    TaskPage,
    TaskQuery,
    TaskStatusRecord,
    check_decision_state,
    check_lease,
    check_limit,
    search_words,
)

__all__ = ["MemoryStore"]


@implementer(ISubmissionStore)
class MemoryStore:
    """
    An L{ISubmissionStore} in memory, with the same semantics as
    L{beacon.store.SQLiteStore}, synchronously: every L{Deferred} it returns
    has already fired, and its listeners are called before L{append} or
    L{decide} returns (so before any callback the caller adds).

    @ivar submissions: Every stored submission by id, in append order (a
        purged one with its content emptied).
    @ivar fail_appends: Set to C{True} to make every write (L{append},
        L{decide}, L{purge}, L{claim_notifications},
        L{finish_notifications}) fail with L{StoreError} and change
        nothing, as a broken database would.
    """

    log = Logger()

    def __init__(self) -> None:
        self.submissions: dict[str, Submission] = {}
        self.fail_appends = False
        # Per submission id: its order of arrival, from 1, its decision as
        # (state, at_ms, note) once it has one, when it was purged, and the
        # words of its searchable text once a search needed them.
        self._seq: dict[str, int] = {}
        self._decisions: dict[str, tuple[str, int, str | None]] = {}
        self._purged: dict[str, int] = {}
        self._words: dict[str, frozenset[str]] = {}
        # Per notification channel: [through_seq, holder, lease_until_ms].
        self._cursors: dict[str, list[Any]] = {}
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
        if self._listeners.listening:
            # Made only for a listener, as the threaded stores make them.
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
        query: TaskQuery,
        *,
        limit: int,
        after: tuple[int, int] | None = None,
        with_total: bool = True,
        total_cap: int | None = None,
    ) -> Deferred[TaskPage]:
        """
        One page of the tasks C{query} matches, newest first by its sort,
        then highest C{seq} first; see L{ISubmissionStore.list_tasks}. A
        search matches whole words case-insensitively, as the SQLite
        store's does.

        @return: A fired L{Deferred}: the L{TaskPage}, or a L{ValueError}
            failure for a C{limit} below 1.
        """
        try:
            check_limit(limit)
        except ValueError:
            return fail()
        search, id_prefix = query.search, query.id_prefix
        since, until = query.since, query.until
        wanted: frozenset[str] | None = None
        if search is not None:
            wanted = frozenset(_folded(word) for word in search_words(search))
            if not wanted:
                return succeed(
                    TaskPage(tasks=[], total=0 if with_total else None, next_after=None)
                )
        matching: list[tuple[tuple[int, int], StoredTask]] = []
        for receipt_id, submission in self.submissions.items():
            if query.door is not None and submission.door != query.door:
                continue
            if query.context_id is not None and submission.context_id != query.context_id:
                continue
            if id_prefix is not None and not receipt_id.startswith(id_prefix):
                continue
            received = submission.received_at_ms
            if since is not None and received < since:
                continue
            if until is not None and received >= until:
                continue
            if wanted is not None and not wanted <= self._search_words(receipt_id):
                continue
            task = self._task(receipt_id)
            assert task is not None
            if query.status is not None and task.state != query.status:
                continue
            updated_after = query.status_timestamp_after
            if updated_after is not None and task.updated_at_ms < updated_after:
                continue
            key = received if query.sort == SORT_RECEIVED else task.updated_at_ms
            matching.append(((key, task.seq), task))
        matching.sort(key=lambda keyed: keyed[0], reverse=True)
        following = [
            (cursor, task)
            for cursor, task in matching
            if after is None or cursor < after
        ]
        page = following[:limit]
        next_after = page[-1][0] if len(following) > limit else None
        total = len(matching) if with_total else None
        capped = total is not None and total_cap is not None and total > total_cap
        return succeed(
            TaskPage(
                tasks=[task for _, task in page],
                total=total_cap if capped else total,
                next_after=next_after,
                total_capped=capped,
            )
        )

    def purge(
        self, decided_before_ms: int, at_ms: int, *, dry_run: bool = False
    ) -> Deferred[int]:
        """
        Erase the content and note of every decided, not yet purged
        submission decided strictly before C{decided_before_ms}; see
        L{ISubmissionStore.purge}. No listener hears of it.

        @return: A fired L{Deferred}: how many were (or, with C{dry_run},
            would be) purged, or a L{StoreError} failure if C{fail_appends}
            is set.
        """
        if self.fail_appends:
            return fail(StoreError("the memory store is set to fail writes"))
        purging = [
            receipt_id
            for receipt_id, (_, decided_at_ms, _) in self._decisions.items()
            if decided_at_ms < decided_before_ms and receipt_id not in self._purged
        ]
        if not dry_run:
            for receipt_id in purging:
                self.submissions[receipt_id] = replace(
                    self.submissions[receipt_id], content=b""
                )
                state, decided_at_ms, _ = self._decisions[receipt_id]
                self._decisions[receipt_id] = (state, decided_at_ms, None)
                self._purged[receipt_id] = at_ms
                self._words.pop(receipt_id, None)
        return succeed(len(purging))

    def claim_notifications(
        self, channel: str, holder: str, now_ms: int, lease_ms: int, limit: int
    ) -> Deferred[NotificationBatch | None]:
        """
        Take the lease of C{channel} and read what it has not been told of;
        see L{ISubmissionStore.claim_notifications}.

        @return: A fired L{Deferred}: the L{NotificationBatch}, or L{None};
            or a failure: L{ValueError} for a C{limit} or C{lease_ms} below
            1, L{StoreError} if C{fail_appends} is set.
        """
        try:
            check_limit(limit)
            check_lease(lease_ms)
        except ValueError:
            return fail()
        if self.fail_appends:
            return fail(StoreError("the memory store is set to fail writes"))
        cursor = self._cursors.get(channel)
        if cursor is None:
            self._cursors[channel] = [len(self._seq), None, 0]
            return succeed(None)
        through_seq, current_holder, lease_until_ms = cursor
        if lease_until_ms > now_ms and current_holder != holder:
            return succeed(None)
        pending = [
            receipt_id
            for receipt_id, seq in self._seq.items()
            if seq > through_seq
        ]
        if not pending:
            return succeed(None)
        cursor[1:] = [holder, now_ms + lease_ms]
        tasks = [self._task(receipt_id) for receipt_id in pending[:limit]]
        batch = [task for task in tasks if task is not None]
        return succeed(
            NotificationBatch(
                tasks=batch, through_seq=batch[-1].seq, pending=len(pending)
            )
        )

    def finish_notifications(
        self, channel: str, holder: str, through_seq: int | None
    ) -> Deferred[None]:
        """
        End C{holder}'s lease of C{channel}, advancing its cursor to
        C{through_seq} unless it is L{None}; see
        L{ISubmissionStore.finish_notifications}.

        @return: A fired L{Deferred}, or a L{StoreError} failure if
            C{fail_appends} is set.
        """
        if self.fail_appends:
            return fail(StoreError("the memory store is set to fail writes"))
        cursor = self._cursors.get(channel)
        if cursor is not None and cursor[1] == holder:
            if through_seq is not None:
                cursor[0] = max(cursor[0], through_seq)
            cursor[1:] = [None, 0]
        return succeed(None)

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
            purged_at_ms=self._purged.get(receipt_id),
        )

    def _search_words(self, receipt_id: str) -> frozenset[str]:
        """
        The words of C{receipt_id}'s searchable text, folded, read from its
        content on first use.
        """
        words = self._words.get(receipt_id)
        if words is None:
            text = _searchable_text(self.submissions[receipt_id])
            words = frozenset(_folded(word) for word in search_words(text))
            self._words[receipt_id] = words
        return words


def _folded(word: str) -> str:
    """
    A word as searches compare it: in lower case.
    """
    return word.lower()


def _searchable_text(submission: Submission) -> str:
    """
    The text a search looks in (see L{ISubmissionStore.list_tasks}): a
    text submission's text; a structured one's sender (name, agent,
    operator), subject and body. Content that is not such a document
    (or purged, empty content) has none.
    """
    try:
        document = json.loads(submission.content)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(document, dict):
        return ""
    if submission.kind == "text":
        texts = [document.get("text")]
    else:
        message = document.get("message")
        if not isinstance(message, dict):
            return ""
        sender = message.get("from")
        if not isinstance(sender, dict):
            sender = {}
        texts = [
            sender.get("name"),
            sender.get("agent"),
            sender.get("operator"),
            message.get("subject"),
            message.get("body"),
        ]
    return " ".join(text for text in texts if isinstance(text, str))
