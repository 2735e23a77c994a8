"""
The Beacon's public policy: what anonymous agents may do through the A2A
bindings.

  - SendMessage stores a submission and answers with a receipt, a Task in
    C{TASK_STATE_SUBMITTED} whose metadata carries the native receipt;
  - GetTask reveals status only (state and timestamp);
  - CancelTask is refused (the store is append-only);
  - ListTasks is always an empty page (an enumerable list would hand out other
    submitters' receipt ids);
  - streaming, push notifications and the extended card are not offered.

Nothing submitted is ever echoed back.
"""

from __future__ import annotations

import re
from typing import Any, Callable, TypeVar

from jsonschema import Draft202012Validator
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.interfaces import IReactorTime

from zope.interface import implementer

from beacon.intake._submission import Content, map_message, new_id, parse_native
from beacon.logs import InfoLogger
from beacon.intake._never import NoPushNoExtendedCard
from beacon.protocol import (
    CallContext,
    IA2AHandler,
    INativeHandler,
    InternalError,
    PreparedJSON,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    dumps,
    format_timestamp,
    prepared,
)
from beacon.protocol import types
from beacon.store import (
    STATE_SUBMITTED,
    ISubmissionStore,
    StoreError,
    Submission,
    TaskStatusRecord,
)

#: Default and largest ListTasks page size (A2A 1.0).
DEFAULT_PAGE_SIZE = 50


def receipt_of(submission: Submission) -> dict[str, str]:
    """
    The native receipt of a stored submission: id, received-at (RFC 3339 UTC,
    milliseconds) and the SHA-256 of the stored canonical content.
    """
    return {
        "id": submission.id,
        "receivedAt": format_timestamp(submission.received_at_ms),
        "sha256": submission.sha256,
    }


#: What an id, a timestamp and a SHA-256 digest are written with: nothing
#: that JSON escapes, so that each string's JSON text is itself in quotes.
_PLAIN = re.compile(r"[0-9A-Za-z:.\-]*")


def receipt_task(receipt: dict[str, str], context_id: str) -> PreparedJSON:
    """
    The answer to a SendMessage: the receipt Task, in
    C{TASK_STATE_SUBMITTED}, whose metadata carries the native C{receipt}.
    It is made with its JSON text (a L{PreparedJSON}), which the bindings
    write as it is: encoding the object again in its envelope cost 21,700
    instructions more per SendMessage (bench/inprocess.py send
    --callgrind: 449,537 per request against 427,787).
    """
    task_id, received_at, sha256 = receipt["id"], receipt["receivedAt"], receipt["sha256"]
    task = {
        "id": task_id,
        "contextId": context_id,
        "status": {"state": STATE_SUBMITTED, "timestamp": received_at},
        "metadata": {"receipt": receipt},
    }
    if _PLAIN.fullmatch(task_id + context_id + received_at + sha256) is None:
        return prepared({"task": task}, dumps({"task": task}).decode("utf-8"))
    text = (
        f'{{"task":{{"id":"{task_id}","contextId":"{context_id}",'
        f'"status":{{"state":"{STATE_SUBMITTED}","timestamp":"{received_at}"}},'
        f'"metadata":{{"receipt":{{"id":"{task_id}","receivedAt":"{received_at}",'
        f'"sha256":"{sha256}"}}}}}}}}'
    )
    return prepared({"task": task}, text)


def _found_status(record: TaskStatusRecord | None) -> dict[str, Any]:
    """The status-only Task of a record read for GetTask, or TaskNotFound."""
    if record is None:
        raise TaskNotFoundError()
    return status_task(record)


def status_task(record: TaskStatusRecord) -> dict[str, Any]:
    """
    A status-only Task: id, contextId and status (state and timestamp).
    """
    return {
        "id": record.id,
        "contextId": record.context_id,
        "status": {
            "state": record.state,
            "timestamp": format_timestamp(record.updated_at_ms),
        },
    }


def _not_continued(record: TaskStatusRecord | None) -> Any:
    """Refuse a message that names the task C{record} (None: no such task)."""
    if record is None:
        raise TaskNotFoundError()
    raise UnsupportedOperationError(
        "each submission opens a new task: taskId and contextId are not accepted"
    )


#: The policy's logger: one, where a class attribute would make a Logger per
#: event (the namespace is the class's all the same).
_log = InfoLogger(namespace=f"{__name__}.PublicPolicy")


_T = TypeVar("_T")


@implementer(IA2AHandler, INativeHandler)
class PublicPolicy(NoPushNoExtendedCard):
    """
    Beacon's public policy (docs/reference/jsonrpc.rst, "The public policy") over a submission
    store.
    """

    def __init__(
        self,
        store: ISubmissionStore,
        clock: IReactorTime,
        validator: Draft202012Validator,
    ) -> None:
        """
        @param store: Where submissions go.
        @param clock: Read for receipt timestamps.
        @param validator: Validates structured submissions.
        """
        self._store = store
        self._clock = clock
        self._validator = validator

    def submit(
        self,
        context: CallContext,
        content: Content,
        message_id: str,
        answer: Callable[[Submission], _T],
    ) -> Deferred[_T]:
        """
        Store already mapped content (see L{beacon.intake.map_message}) and
        return what C{answer} makes of the stored L{Submission} once it is
        committed.

        C{answer} is called in the callback that logs the submission stored,
        not added as a callback of its own: that saves ~8,300 instructions
        per submission (a second pass of Deferred._runCallbacks over the
        fired Deferred), 1.7 % of a SendMessage (501,611 instructions per
        request with the callback added, 492,837 without, bench/inprocess.py
        send --callgrind; 8,320 for the two forms alone, under callgrind).

        @raise InternalError: (asynchronously) the store failed; nothing was
            stored and no receipt may be given.
        """
        now = self._clock.seconds()
        submission = Submission(
            id=new_id(now),
            context_id=new_id(now),
            received_at_ms=int(now * 1000),
            door=context.binding,
            source=context.source,
            kind=content.kind,
            message_id=message_id,
            content=content.canonical,
            sha256=content.sha256,
        )

        def stored(_: None) -> _T:
            _log.info(
                "intake.stored: receipt {receipt} ({size} bytes, {kind}) via {door}",
                receipt=submission.id,
                size=len(submission.content),
                kind=submission.kind,
                door=submission.door,
            )
            return answer(submission)

        def failed(reason: Any) -> _T:
            reason.trap(StoreError)
            _log.error(
                "intake.store_failed: a submission via {door} was not stored: {error}",
                door=submission.door,
                error=reason.getErrorMessage(),
            )
            raise InternalError(
                "the submission could not be stored; it was not received, try again later"
            )

        return self._store.append(submission).addCallbacks(stored, failed)

    def submit_document(
        self, context: CallContext, document: Any
    ) -> Deferred[dict[str, str]]:
        """
        Store a native beacon/0.1 submission body (see
        L{beacon.intake.parse_native}); answer with its receipt.
        """
        content = parse_native(document, self._validator)
        return self.submit(context, content, "", receipt_of)

    def native_status(self, receipt_id: str) -> Deferred[dict[str, str] | None]:
        """
        The native status of a submission: id, state and updatedAt only.
        """

        def shape(record: TaskStatusRecord | None) -> dict[str, str] | None:
            if record is None:
                return None
            return {
                "id": record.id,
                "state": record.state,
                "updatedAt": format_timestamp(record.updated_at_ms),
            }

        return self._store.status(receipt_id).addCallback(shape)

    def send_message(
        self, context: CallContext, request: types.SendMessageRequest
    ) -> Deferred[dict[str, Any]]:
        """
        Store the message as a submission; answer with the receipt Task.
        """
        configuration = request.configuration
        if configuration and configuration.task_push_notification_config:
            raise PushNotificationNotSupportedError(
                "Beacon never initiates contact: push notifications are not offered"
            )
        if request.message.task_id:
            # A message's taskId must name a task (A2A 3.4.2): one that does
            # not is TaskNotFound; a submission's task is never continued.
            return self._store.status(request.message.task_id).addCallback(_not_continued)
        content = map_message(request.message, self._validator)

        def answer(submission: Submission) -> dict[str, Any]:
            return receipt_task(receipt_of(submission), submission.context_id)

        return self.submit(context, content, request.message.message_id, answer)

    def get_task(
        self, context: CallContext, request: types.GetTaskRequest
    ) -> Deferred[dict[str, Any]]:
        """
        Status only: state and timestamp, never history or artifacts.
        """
        return self._store.status(request.id).addCallback(_found_status)

    @inlineCallbacks
    def cancel_task(self, context: CallContext, request: types.CancelTaskRequest) -> Any:
        """
        Refused for every known task: the store is append-only.
        """
        record = yield self._store.status(request.id)
        if record is None:
            raise TaskNotFoundError()
        raise TaskNotCancelableError(
            "submissions are stored append-only and cannot be canceled"
        )

    def list_tasks(
        self, context: CallContext, request: types.ListTasksRequest
    ) -> dict[str, Any]:
        """
        Always an empty page: tasks are scoped to whoever holds their id.
        """
        return {
            "tasks": [],
            "nextPageToken": "",
            "pageSize": request.page_size or DEFAULT_PAGE_SIZE,
            "totalSize": 0,
        }

    def send_streaming_message(self, context: CallContext, request: Any) -> Any:
        """Refused: streaming is off by policy."""
        raise UnsupportedOperationError("streaming is not offered by this agent")

    def subscribe_to_task(self, context: CallContext, request: Any) -> Any:
        """Refused: streaming is off by policy."""
        raise UnsupportedOperationError("streaming is not offered by this agent")
