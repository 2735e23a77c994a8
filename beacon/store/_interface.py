"""
The submission store's contract: what every backend (SQLite, PostgreSQL, the
in-memory fake in L{beacon.testing}) promises.

The store is append-only. A submission row is written once and never changed;
facts about it (review decisions) are appended as events, and a task's state is
derived from its newest event. Every method returns a L{Deferred}; no backend
may block the reactor thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from twisted.internet.defer import Deferred
from zope.interface import Interface

#: Task states a stored submission can be in, as A2A TaskState names.
STATE_SUBMITTED = "TASK_STATE_SUBMITTED"
STATE_COMPLETED = "TASK_STATE_COMPLETED"
STATE_REJECTED = "TASK_STATE_REJECTED"


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

    def status(receipt_id: str) -> Deferred[TaskStatusRecord | None]:
        """
        Derive the current status of a stored submission.

        @return: A L{Deferred} that fires with the L{TaskStatusRecord}, or
            with L{None} when no submission has that id.
        """
