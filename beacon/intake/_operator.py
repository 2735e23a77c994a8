"""
The operator policy: what the people who read the inbox may do, through the
operator's kernel-authenticated door. Everything is visible; decisions are
appended; changes stream live.

  - ListTasks: every submission, newest status timestamp first, with the
    spec's filters and opaque keyset page tokens;
  - GetTask: the whole task: the submitted message in C{history}, the
    status, and a decision's note as the status message;
  - SubscribeToTask: the current Task, then its status changes, closing at a
    terminal state;
  - the review extension (L{REVIEW_EXTENSION}): C{beacon.review.Decide}
    appends a decision (accept or reject, with an optional note);
    C{beacon.review.List} finds submissions (sorted by receipt or status
    time; filtered by state, door, time of receipt, full-text search and
    id prefix); C{beacon.review.DecideMany} decides many at once, each
    decision still its own; C{beacon.review.Purge} erases the content of
    decided submissions, the one change to stored data, made by a person;
  - the inbox-events extension (L{INBOX_EVENTS_EXTENSION}):
    C{beacon.inbox.Follow} streams new submissions and decisions as they
    are committed.

Decisions are an extension method, not SendMessage on the task: a decision
is not a message in the task's conversation (the submitter never sees the
note), it must never be confused with a submission, and a method of its own
gets typed params and errors of its own.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from twisted.internet.defer import Deferred, gatherResults, inlineCallbacks, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.intake._public import receipt_of
from beacon.intake._never import NoPushNoExtendedCard
from beacon.protocol import (
    CallContext,
    EventStream,
    ExtensionMethod,
    IA2AHandler,
    InternalError,
    InvalidParamsError,
    Method,
    ParamsReader,
    STATE_UNSPECIFIED,
    TERMINAL_STATES,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    format_timestamp,
    params_parser,
)
from beacon.protocol import types
from beacon.protocol.query import SORT_UPDATED, TaskQuery, read_params
from beacon.store import (
    STATE_COMPLETED,
    STATE_REJECTED,
    AlreadyDecided,
    ISubmissionStore,
    StoredTask,
    StoreError,
    StoreEvent,
)

#: The review extension: decisions on submissions.
REVIEW_EXTENSION = "https://beacon.unownedminds.com/extensions/review/v1"
#: The inbox-events extension: a live stream of the inbox.
INBOX_EVENTS_EXTENSION = "https://beacon.unownedminds.com/extensions/inbox-events/v1"

DECISIONS = {"accept": STATE_COMPLETED, "reject": STATE_REJECTED}
#: Longest decision note accepted, in characters.
MAX_NOTE_LENGTH = 4000

DEFAULT_PAGE_SIZE = 50
#: The largest page C{ListTasks} and C{beacon.review.List} serve.
MAX_PAGE_SIZE = 100
#: The most ids one C{beacon.review.DecideMany} takes.
MAX_BULK_IDS = 1000
#: How far C{beacon.review.List} counts a total: beyond it, the answer says
#: C{totalMoreThan} (this number) instead of C{totalSize}, so that a first
#: page over a million submissions does not count every one.
TOTAL_CAP = 10_000
_TOKEN = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")


def _decision_and_note(reader: ParamsReader) -> tuple[str, str | None]:
    decision = reader.string("decision", required=True)
    if decision and decision not in DECISIONS:
        reader.fail("decision", 'must be "accept" or "reject"')
    return decision, reader.string("note", limit=MAX_NOTE_LENGTH) or None


def _decide_request(reader: ParamsReader) -> tuple[str, str, str | None]:
    task_id = reader.string("id", required=True, limit=types.MAX_ID_LENGTH)
    return (task_id, *_decision_and_note(reader))


def _follow_request(reader: ParamsReader) -> None:
    return None


@dataclass(frozen=True)
class ReviewListRequest:
    """
    The params of C{beacon.review.List}; see L{EXTENSION_DECLARATIONS}:
    the query (its params named as L{QUERY_KEYS} says) and its paging.
    """

    query: TaskQuery
    page_size: int
    page_token: str
    history_length: int | None
    include_total: bool


def _epoch_ms(when: datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def _list_request(reader: ParamsReader) -> ReviewListRequest:
    query = read_params(reader)
    page_size = reader.int32("pageSize")
    if page_size is not None and not (1 <= page_size <= MAX_PAGE_SIZE):
        reader.fail("pageSize", f"must be between 1 and {MAX_PAGE_SIZE}")
    include_total = reader.boolean("includeTotal")
    return ReviewListRequest(
        query=query,
        page_size=page_size or DEFAULT_PAGE_SIZE,
        page_token=reader.string("pageToken", limit=1024),
        history_length=reader.int32("historyLength", minimum=0),
        include_total=True if include_total is None else include_total,
    )


def _decide_many_request(reader: ParamsReader) -> tuple[tuple[str, ...], str, str | None]:
    ids = reader.strings("ids")
    if not ids:
        if not reader.violations or reader.violations[-1][0] != "ids":
            reader.fail("ids", "is required and must not be empty")
    elif len(ids) > MAX_BULK_IDS:
        reader.fail("ids", f"must hold at most {MAX_BULK_IDS} ids")
    elif any(not i or len(i) > types.MAX_ID_LENGTH or "\x00" in i for i in ids):
        reader.fail("ids", f"must be ids of 1 to {types.MAX_ID_LENGTH} characters")
    # Each id once, in the order given.
    return (tuple(dict.fromkeys(ids)), *_decision_and_note(reader))


def _purge_request(reader: ParamsReader) -> tuple[int, bool]:
    before = reader.timestamp("decidedBefore")
    if before is None and reader.raw("decidedBefore") is None:
        reader.fail("decidedBefore", "is required")
    dry_run = reader.boolean("dryRun")
    return _epoch_ms(before) or 0, bool(dry_run)


#: The operator policy's extension methods.
EXTENSION_METHODS = {
    "beacon.review.Decide": ExtensionMethod(
        REVIEW_EXTENSION, Method(params_parser(_decide_request), "decide")
    ),
    "beacon.review.List": ExtensionMethod(
        REVIEW_EXTENSION, Method(params_parser(_list_request), "review_list")
    ),
    "beacon.review.DecideMany": ExtensionMethod(
        REVIEW_EXTENSION, Method(params_parser(_decide_many_request), "decide_many")
    ),
    "beacon.review.Purge": ExtensionMethod(
        REVIEW_EXTENSION, Method(params_parser(_purge_request), "purge")
    ),
    "beacon.inbox.Follow": ExtensionMethod(
        INBOX_EVENTS_EXTENSION,
        Method(params_parser(_follow_request), "follow", streaming=True),
    ),
}


def encode_page_token(after: tuple[int, int]) -> str:
    """An opaque page token for the keyset position C{after}."""
    raw = f"{after[0]}.{after[1]}".encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_page_token(token: str) -> tuple[int, int]:
    """
    Read a page token.

    @raise InvalidParamsError: It is not one of ours.
    """
    bad = InvalidParamsError(field_violations=[("pageToken", "is not a valid page token")])
    if not _TOKEN.match(token):
        raise bad
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
        updated, seq = raw.split(".")
        if not (updated.isdigit() and seq.isdigit()):
            raise ValueError(raw)
        return int(updated), int(seq)
    except ValueError:
        raise bad from None


def encode_list_token(sort: str, after: tuple[int, int]) -> str:
    """
    An opaque C{beacon.review.List} page token for the keyset position
    C{after} in order C{sort} (a token is only good for the order it came
    from).
    """
    raw = f"{sort[0]}{after[0]}.{after[1]}".encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_list_token(sort: str, token: str) -> tuple[int, int]:
    """
    Read a C{beacon.review.List} page token made for order C{sort}.

    @raise InvalidParamsError: It is not one of ours, or was made for the
        other order.
    """
    bad = InvalidParamsError(
        field_violations=[("pageToken", "is not a valid page token for this sort")]
    )
    if not _TOKEN.match(token):
        raise bad
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
    except ValueError:
        raise bad from None
    if not raw.startswith(sort[0]):
        raise bad
    key, _, seq = raw[1:].partition(".")
    if not (key.isdigit() and seq.isdigit()):
        raise bad
    return int(key), int(seq)


def submitted_message(task: StoredTask) -> dict[str, Any]:
    """The submission as the A2A Message it was (or maps onto)."""
    submission = task.submission
    document = json.loads(submission.content)
    if "message" in document:
        part: dict[str, Any] = {"data": document["message"], "mediaType": "application/json"}
    else:
        part = {"text": document["text"]}
    return {
        "messageId": submission.message_id or submission.id,
        "role": "ROLE_USER",
        "contextId": submission.context_id,
        "taskId": submission.id,
        "parts": [part],
    }


def task_status(task: StoredTask) -> dict[str, Any]:
    """The TaskStatus, with a decision (and its note) as the status message."""
    status: dict[str, Any] = {
        "state": task.state,
        "timestamp": format_timestamp(task.updated_at_ms),
    }
    if task.state in (STATE_COMPLETED, STATE_REJECTED):
        decision = "accept" if task.state == STATE_COMPLETED else "reject"
        status["message"] = {
            "messageId": f"{task.submission.id}-decision",
            "role": "ROLE_AGENT",
            "contextId": task.submission.context_id,
            "taskId": task.submission.id,
            "parts": [{"text": task.note or ("accepted" if decision == "accept" else "rejected")}],
            "metadata": {REVIEW_EXTENSION: {"decision": decision, "hasNote": task.note is not None}},
            "extensions": [REVIEW_EXTENSION],
        }
    return status


def full_task(task: StoredTask, history_length: int | None = None) -> dict[str, Any]:
    """
    The operator's view of a task.

    @param history_length: As A2A's historyLength: None for all (the one
        submitted message), 0 for none.

    A purged task has no history (its content is gone); its metadata says
    when it was purged (C{purgedAt}).
    """
    submission = task.submission
    metadata: dict[str, Any] = {
        "receipt": receipt_of(submission),
        "door": submission.door,
        "source": submission.source,
        "kind": submission.kind,
        "size": len(submission.content),
    }
    result: dict[str, Any] = {
        "id": submission.id,
        "contextId": submission.context_id,
        "status": task_status(task),
        "metadata": metadata,
    }
    if task.purged_at_ms is not None:
        metadata["purgedAt"] = format_timestamp(task.purged_at_ms)
    elif history_length is None or history_length > 0:
        result["history"] = [submitted_message(task)]
    return result


def status_update(task: StoredTask) -> dict[str, Any]:
    """A StreamResponse carrying a TaskStatusUpdateEvent for C{task}."""
    return {
        "statusUpdate": {
            "taskId": task.submission.id,
            "contextId": task.submission.context_id,
            "status": task_status(task),
        }
    }


@implementer(IA2AHandler)
class OperatorPolicy(NoPushNoExtendedCard):
    """
    The operator's methods over a submission store.
    """

    log = Logger()

    def __init__(
        self,
        store: ISubmissionStore,
        clock: IReactorTime,
        total_cap: int | None = None,
    ) -> None:
        """
        @param store: The inbox.
        @param clock: Read for decision timestamps.
        @param total_cap: How far C{beacon.review.List} counts a total
            (L{None}: L{TOTAL_CAP}).
        """
        self._total_cap = total_cap
        self._store = store
        self._clock = clock
        self._streams: set[EventStream] = set()

    def _task(self, task_id: str) -> Deferred[StoredTask]:
        def found(task: StoredTask | None) -> StoredTask:
            if task is None:
                raise TaskNotFoundError()
            return task

        return self._store.get(task_id).addCallback(found)

    @inlineCallbacks
    def get_task(self, context: CallContext, request: types.GetTaskRequest) -> Any:
        """The whole task."""
        task = yield self._task(request.id)
        return full_task(task, request.history_length)

    @inlineCallbacks
    def list_tasks(self, context: CallContext, request: types.ListTasksRequest) -> Any:
        """Every submission, with the spec's filters and keyset paging."""
        after = decode_page_token(request.page_token) if request.page_token else None
        size = request.page_size or DEFAULT_PAGE_SIZE
        state = None if request.status == STATE_UNSPECIFIED else request.status
        updated_after = (
            int(request.status_timestamp_after.timestamp() * 1000)
            if request.status_timestamp_after is not None
            else None
        )
        query = TaskQuery(
            status=state,
            status_timestamp_after=updated_after,
            context_id=request.context_id or None,
            sort=SORT_UPDATED,
        )
        page = yield self._store.list_tasks(query, limit=size, after=after)
        return {
            "tasks": [full_task(t, request.history_length) for t in page.tasks],
            "nextPageToken": encode_page_token(page.next_after) if page.next_after else "",
            "pageSize": size,
            "totalSize": page.total,
        }

    @inlineCallbacks
    def cancel_task(self, context: CallContext, request: types.CancelTaskRequest) -> Any:
        """Refused: decide instead (the store is append-only)."""
        yield self._task(request.id)
        raise TaskNotCancelableError(
            "submissions cannot be canceled; accept or reject them with beacon.review.Decide"
        )

    def send_message(self, context: CallContext, request: Any) -> Any:
        """Refused: the operator door reads and decides; agents submit."""
        raise UnsupportedOperationError(
            "the operator door does not take submissions; use a public door"
        )

    def send_streaming_message(self, context: CallContext, request: Any) -> Any:
        """Refused, as SendMessage."""
        return self.send_message(context, request)

    @inlineCallbacks
    def decide(self, context: CallContext, request: tuple[str, str, str | None]) -> Any:
        """
        Append a decision; answer with the task in its new state.
        """
        task_id, decision, note = request
        now = int(self._clock.seconds() * 1000)
        try:
            task = yield self._store.decide(task_id, DECISIONS[decision], now, note)
        except AlreadyDecided:
            current = yield self._task(task_id)
            raise UnsupportedOperationError(
                f"this submission was already decided ({current.state}); "
                "decisions are final",
                metadata={"state": current.state},
            ) from None
        if task is None:
            raise TaskNotFoundError()
        self.log.info(
            "review.decided: {task_id} {decision} by {operator}",
            task_id=task_id,
            decision=decision,
            operator=context.source,
        )
        return full_task(task)

    @inlineCallbacks
    def review_list(self, context: CallContext, request: ReviewListRequest) -> Any:
        """
        Find submissions: C{beacon.review.List}, newest first by receipt
        (or status) time, with every filter of its L{TaskQuery}.
        """
        sort = request.query.sort
        after = decode_list_token(sort, request.page_token) if request.page_token else None
        page = yield self._store.list_tasks(
            request.query,
            limit=request.page_size,
            after=after,
            with_total=request.include_total,
            total_cap=TOTAL_CAP if self._total_cap is None else self._total_cap,
        )
        answer: dict[str, Any] = {
            "tasks": [full_task(t, request.history_length) for t in page.tasks],
            "nextPageToken": (
                encode_list_token(sort, page.next_after)
                if page.next_after
                else ""
            ),
            "pageSize": request.page_size,
        }
        if page.total_capped:
            answer["totalMoreThan"] = page.total
        elif page.total is not None:
            answer["totalSize"] = page.total
        return answer

    @inlineCallbacks
    def decide_many(
        self, context: CallContext, request: tuple[tuple[str, ...], str, str | None]
    ) -> Any:
        """
        Decide every submission of C{ids} the same way, with one note:
        C{beacon.review.DecideMany}. Each decision is its own, final and
        appended (and logged as C{review.decided}); they share the store's
        group commits. The answer says which were decided, which already
        had a decision (and which), which ids name nothing, and which could
        not be stored.
        """
        ids, decision, note = request
        now = int(self._clock.seconds() * 1000)
        state = DECISIONS[decision]
        outcomes = yield gatherResults(
            [
                self._store.decide(task_id, state, now, note).addCallbacks(
                    lambda task: ("decided" if task is not None else "notFound", task),
                    lambda reason: (self._bulk_failure(reason), None),
                )
                for task_id in ids
            ]
        )
        decided: list[str] = []
        already: list[str] = []
        not_found: list[str] = []
        failed: list[str] = []
        for task_id, (outcome, _) in zip(ids, outcomes):
            if outcome == "decided":
                decided.append(task_id)
                self.log.info(
                    "review.decided: {task_id} {decision} by {operator}",
                    task_id=task_id,
                    decision=decision,
                    operator=context.source,
                )
            else:
                {"already": already, "notFound": not_found, "failed": failed}[
                    outcome
                ].append(task_id)
        states = yield gatherResults([self._store.status(i) for i in already])
        return {
            "decision": decision,
            "decided": decided,
            "alreadyDecided": [
                {"id": task_id, "state": record.state if record else STATE_UNSPECIFIED}
                for task_id, record in zip(already, states)
            ],
            "notFound": not_found,
            "failed": failed,
        }

    def _bulk_failure(self, reason: Failure) -> str:
        """
        What a failed decision of a C{DecideMany} was: already decided, or
        not stored (logged).
        """
        if reason.check(AlreadyDecided):
            return "already"
        if not reason.check(StoreError):
            self.log.failure("review.decide_failed", reason)
        return "failed"

    @inlineCallbacks
    def purge(self, context: CallContext, request: tuple[int, bool]) -> Any:
        """
        Erase the content of every submission decided before the given
        time: C{beacon.review.Purge}. Logged as C{review.purged}, with the
        count only.
        """
        decided_before_ms, dry_run = request
        now = int(self._clock.seconds() * 1000)
        count = yield self._store.purge(decided_before_ms, now, dry_run=dry_run)
        if not dry_run:
            self.log.info(
                "review.purged: erased the content of {count} decided"
                " submissions (decided before {before}) by {operator}",
                count=count,
                before=format_timestamp(decided_before_ms),
                operator=context.source,
            )
        return {"purged": count, "dryRun": dry_run}

    @inlineCallbacks
    def subscribe_to_task(
        self, context: CallContext, request: types.SubscribeToTaskRequest
    ) -> Any:
        """
        The current Task, then its status changes; closes at a terminal state.
        """
        task = yield self._task(request.id)
        if task.state in TERMINAL_STATES:
            raise UnsupportedOperationError(
                "the task is in a terminal state; GetTask shows it"
            )
        stream = EventStream()

        def snapshot(current: StoredTask | None) -> None:
            if current is not None:
                stream.send({"task": full_task(current)})
                if current.state in TERMINAL_STATES:
                    stream.close()

        def changed(event: StoreEvent) -> Deferred[None] | None:
            if event.task_id != request.id or event.kind != "decided":
                return None
            return self._store.get(event.task_id).addCallback(relay)

        def relay(current: StoredTask | None) -> None:
            if current is not None:
                stream.send(status_update(current))
                if current.state in TERMINAL_STATES:
                    stream.close()

        # Subscribe first, then read the snapshot, so that no change falls
        # between the two.
        self._follow(stream, changed, lambda: self._store.get(task.submission.id).addCallback(snapshot))
        return stream

    def follow(self, context: CallContext, request: None) -> EventStream:
        """
        Stream the inbox live: each committed submission as a C{task}
        event (the whole task), each decision as a C{statusUpdate}.
        """
        stream = EventStream()

        def changed(event: StoreEvent) -> Deferred[None]:
            return self._store.get(event.task_id).addCallback(relay, event)

        def relay(task: StoredTask | None, event: StoreEvent) -> None:
            if task is None:
                return
            if event.kind == "submitted":
                stream.send({"task": full_task(task)})
            else:
                stream.send(status_update(task))

        self._follow(stream, changed)
        return stream

    def close_streams(self) -> None:
        """
        End every open stream normally (Beacon is stopping): followers see
        their stream end rather than their connection break.
        """
        for stream in list(self._streams):
            stream.close()

    def _follow(
        self,
        stream: EventStream,
        changed: Any,
        first: Callable[[], Deferred[Any]] | None = None,
    ) -> None:
        """
        Feed C{stream} from store events, one at a time, in commit order,
        until it ends; C{first}, if given, runs once subscribed and before
        any event is relayed.
        """
        tail: Deferred[Any] = succeed(None)

        def failed(reason: Failure) -> None:
            self.log.failure("operator.stream_failed", reason)
            stream.fail(InternalError("the stream broke; subscribe again"))

        def step(_: Any, event: StoreEvent) -> Any:
            return None if stream.finished else changed(event)

        def listener(event: StoreEvent) -> None:
            # One Deferred chain per stream: each event's read waits for the
            # previous one, so events leave in commit order.
            tail.addCallback(step, event).addErrback(failed)

        self._streams.add(stream)
        stream.on_cancel(lambda: self._streams.discard(stream))
        stream.on_cancel(self._store.subscribe(listener))
        if first is not None:
            tail.addCallback(lambda _: first()).addErrback(failed)


#: The operator card's AgentExtension entries.
EXTENSION_DECLARATIONS: list[dict[str, Any]] = [
    {
        "uri": REVIEW_EXTENSION,
        "description": (
            "Review decisions. Method beacon.review.Decide, params {id, "
            'decision: "accept" | "reject", note?}: appends a final decision '
            "and answers the Task (TASK_STATE_COMPLETED or TASK_STATE_REJECTED, "
            "the note as its status message). Submitters see the state only. "
            "Method beacon.review.List, params {sort?: \"received\" (default) | "
            "\"updated\", status?, door?, since?, until? (RFC 3339), search? "
            "(full-text: every word), idPrefix? (6+ characters), pageSize? "
            "(1-100), pageToken?, historyLength?, includeTotal? (default true)}: "
            "a page of Tasks, newest first, {tasks, nextPageToken, pageSize, "
            "totalSize? (how many match, counted up to 10000), totalMoreThan? "
            "(instead of totalSize when more than 10000 match: 10000)}. Method beacon.review.DecideMany, params {ids (up to "
            "1000), decision, note?}: decides each, answers {decided, "
            "alreadyDecided: [{id, state}], notFound, failed}. Method "
            "beacon.review.Purge, params {decidedBefore (RFC 3339), dryRun?}: "
            "erases the content and note of submissions decided before then, "
            "keeping receipt, times and state; answers {purged, dryRun}."
        ),
        "required": False,
    },
    {
        "uri": INBOX_EVENTS_EXTENSION,
        "description": (
            "Live inbox. Method beacon.inbox.Follow (no params) answers "
            "text/event-stream: a {task} event for each new submission and a "
            "{statusUpdate} event for each decision, in commit order."
        ),
        "required": False,
    },
]
