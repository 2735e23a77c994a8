"""
The SQL both thread-pool backends share, and the rows it reads and writes.

The task queries (one task, one task's status, a page of L{list_tasks}) are
written once, here; a backend's L{Dialect} says how its database spells
what differs (a parameter mark, an always-true condition...), and each
backend declares its own dialect once. The rows those queries read become
L{StoredTask}s, L{TaskStatusRecord}s and L{TaskPage}s here too, and a
L{Submission} becomes the row both backends insert.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from beacon.protocol import STATE_SUBMITTED
from beacon.store._interface import (
    StoredTask,
    Submission,
    TaskPage,
    TaskStatusRecord,
)

# Everything about a task, in the order L{task_of} reads it (both backends'
# SQL reads it so).
TASK_COLUMNS = """
    s.seq, s.id, s.context_id, s.received_at_ms, s.door, s.source, s.kind,
    s.message_id, s.content, s.sha256, e.state, e.at_ms, e.note
"""

# Every task's sort and filter keys, without its content: list_tasks filters,
# counts and orders these, then reads whole rows for one page only.
TASK_KEYS = f"""
    SELECT
        s.seq AS seq,
        s.context_id AS context_id,
        COALESCE(e.state, '{STATE_SUBMITTED}') AS state,
        COALESCE(e.at_ms, s.received_at_ms) AS updated_at_ms
    FROM submissions AS s
    LEFT JOIN events AS e ON e.submission_id = s.id
"""


@dataclass(frozen=True)
class Dialect:
    """
    How a backend's SQL spells what the shared queries need, and those
    queries written so.

    @ivar mark: The parameter mark (C{"?"}, C{"%s"}).
    @ivar true: The always-true condition.
    @ivar subquery_alias: What follows a subquery in C{FROM}: an alias, if
        the database needs one, or nothing.
    @ivar row_values: Whether "strictly after C{(updated_at_ms, seq)}" is
        written as a row-value comparison; if not, it is spelled out.
    """

    mark: str
    true: str
    subquery_alias: str
    row_values: bool

    @cached_property
    def select_task(self) -> str:
        """
        The query for everything about one task (L{TASK_COLUMNS}), its one
        parameter the task's id.
        """
        return f"""
    SELECT {TASK_COLUMNS}
    FROM submissions AS s
    LEFT JOIN events AS e ON e.submission_id = s.id
    WHERE s.id = {self.mark}
"""

    @cached_property
    def select_status(self) -> str:
        """
        The query for one task's status row (see L{status_of}), its one
        parameter the task's id. A task's state is the state of its
        decision, or submitted as of its receipt when it has none (the
        unique index allows at most one event).
        """
        return f"""
    SELECT s.id, s.context_id, s.received_at_ms, e.state, e.at_ms
    FROM submissions AS s
    LEFT JOIN events AS e ON e.submission_id = s.id
    WHERE s.id = {self.mark}
"""

    def after_cursor(self, after: tuple[int, int]) -> tuple[str, list[object]]:
        """
        The condition "strictly after C{after}", a C{(updated_at_ms, seq)}
        cursor, in the order C{updated_at_ms DESC, seq DESC}, and its
        parameters.
        """
        mark = self.mark
        updated_at_ms, seq = after
        if self.row_values:
            return f"(updated_at_ms, seq) < ({mark}, {mark})", [updated_at_ms, seq]
        return (
            f"(updated_at_ms < {mark} OR (updated_at_ms = {mark} AND seq < {mark}))",
            [updated_at_ms, updated_at_ms, seq],
        )

    def page_queries(
        self,
        limit: int,
        state: str | None,
        updated_after_ms: int | None,
        context_id: str | None,
        after: tuple[int, int] | None,
    ) -> tuple[str, list[object], str, list[object]]:
        """
        The queries of one page of L{list_tasks}: the count of every task
        the filters keep, and the page itself (one row more than asked for
        tells whether another page follows), each with its parameters.
        """
        mark = self.mark
        conditions: list[str] = []
        params: list[object] = []
        if state is not None:
            conditions.append(f"state = {mark}")
            params.append(state)
        if updated_after_ms is not None:
            conditions.append(f"updated_at_ms >= {mark}")
            params.append(updated_after_ms)
        if context_id is not None:
            conditions.append(f"context_id = {mark}")
            params.append(context_id)
        filters = " AND ".join(conditions) or self.true
        page_filters, page_params = filters, list(params)
        if after is not None:
            # Strictly after the cursor in (updated_at_ms DESC, seq DESC).
            condition, after_params = self.after_cursor(after)
            page_filters += f" AND {condition}"
            page_params += after_params
        keys = f"({TASK_KEYS}){self.subquery_alias}"
        count = f"SELECT COUNT(*) FROM {keys} WHERE {filters}"
        page = f"""
                WITH page AS (
                    SELECT seq, updated_at_ms FROM {keys}
                    WHERE {page_filters}
                    ORDER BY updated_at_ms DESC, seq DESC
                    LIMIT {mark}
                )
                SELECT {TASK_COLUMNS}
                FROM page
                JOIN submissions AS s ON s.seq = page.seq
                LEFT JOIN events AS e ON e.submission_id = s.id
                ORDER BY page.updated_at_ms DESC, page.seq DESC
                """
        return count, params, page, [*page_params, limit + 1]


#: A C{submissions} row as both backends insert it.
Row = tuple[str, str, int, str, str, str, str, bytes, str]


def row_of(submission: Submission) -> Row:
    """
    The C{submissions} row for C{submission}, in the order of the backends'
    C{_INSERT_SUBMISSION} columns.
    """
    return (
        submission.id,
        submission.context_id,
        submission.received_at_ms,
        submission.door,
        submission.source,
        submission.kind,
        submission.message_id,
        submission.content,
        submission.sha256,
    )


def task_of(row: tuple[Any, ...]) -> StoredTask:
    """
    The L{StoredTask} of a row of L{TASK_COLUMNS}.
    """
    (
        seq,
        id_,
        context_id,
        received_at_ms,
        door,
        source,
        kind,
        message_id,
        content,
        sha256,
        state,
        at_ms,
        note,
    ) = row
    submission = Submission(
        id=id_,
        context_id=context_id,
        received_at_ms=received_at_ms,
        door=door,
        source=source,
        kind=kind,
        message_id=message_id,
        content=bytes(content),
        sha256=sha256,
    )
    if state is None:
        return StoredTask(
            submission=submission,
            state=STATE_SUBMITTED,
            updated_at_ms=received_at_ms,
            note=None,
            seq=seq,
        )
    return StoredTask(
        submission=submission, state=state, updated_at_ms=at_ms, note=note, seq=seq
    )


def status_of(row: tuple[Any, ...]) -> TaskStatusRecord:
    """
    The L{TaskStatusRecord} of a row of C{(id, context_id, received_at_ms,
    state, at_ms)}, the last two L{None} for an undecided task.
    """
    id_, context_id, received_at_ms, state, at_ms = row
    if state is None:
        return TaskStatusRecord(
            id=id_,
            context_id=context_id,
            state=STATE_SUBMITTED,
            updated_at_ms=received_at_ms,
        )
    return TaskStatusRecord(
        id=id_, context_id=context_id, state=state, updated_at_ms=at_ms
    )


def page_of(rows: list[Any], limit: int, total: int) -> TaskPage:
    """
    The L{TaskPage} of up to C{limit + 1} rows of L{TASK_COLUMNS} (one more
    than asked for tells whether another page follows).
    """
    tasks = [task_of(row) for row in rows[:limit]]
    next_after = None
    if len(rows) > limit:
        next_after = (tasks[-1].updated_at_ms, tasks[-1].seq)
    return TaskPage(tasks=tasks, total=total, next_after=next_after)
