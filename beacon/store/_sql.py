"""
The SQL both thread-pool backends share, and the rows it reads and writes.

The task queries (one task, one task's status, a page of L{list_tasks} in
either order, a notification channel's cursor, what a purge erases) are
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
from beacon.protocol.query import SORT_RECEIVED, TaskQuery
from beacon.store._interface import (
    StoredTask,
    Submission,
    TaskPage,
    TaskStatusRecord,
    search_words,
)

# Everything about a task, in the order L{task_of} reads it (both backends'
# SQL reads it so), from C{submissions AS s} and L{TASK_JOINS}.
TASK_COLUMNS = """
    s.seq, s.id, s.context_id, s.received_at_ms, s.door, s.source, s.kind,
    s.message_id, s.content, s.sha256, e.state, e.at_ms, e.note, p.at_ms
"""

# What TASK_COLUMNS reads besides the submission: its decision and its purge
# (each at most one row: both are keyed by the submission's id).
TASK_JOINS = """
    LEFT JOIN events AS e ON e.submission_id = s.id
    LEFT JOIN purges AS p ON p.submission_id = s.id
"""

#: A page of at most this many tasks is read from all of them when they
#: were counted (L{Dialect.page_query}).
FEW_MATCHING = 1000

# A task's derived status time, from C{s} and C{e}.
UPDATED_AT_MS = "COALESCE(e.at_ms, s.received_at_ms)"


@dataclass(frozen=True)
class PageRequest:
    """
    One page of L{list_tasks <beacon.store.ISubmissionStore.list_tasks>} as
    asked for: its query and its paging.

    @ivar search: The query's search as the backend's dialect takes it
        (see L{Dialect.search_parameter}), or L{None}; the SQL reads this,
        not C{query.search}.
    @ivar total_cap: Count the total only up to this many tasks, one more
        meaning "more than this" (L{None}: count them all).
    """

    query: TaskQuery
    limit: int
    after: tuple[int, int] | None = None
    with_total: bool = True
    search: str | None = None
    total_cap: int | None = None

    @property
    def sort(self) -> str:
        """The query's order."""
        return self.query.sort


@dataclass(frozen=True)
class Dialect:
    """
    How a backend's SQL spells what the shared queries need, and those
    queries written so.

    @ivar mark: The parameter mark (C{"?"}, C{"%s"}).
    @ivar true: The always-true condition.
    @ivar subquery_alias: What follows a subquery in C{FROM}: an alias, if
        the database needs one, or nothing.
    @ivar row_values: Whether "strictly after C{(key, seq)}" is written as
        a row-value comparison; if not, it is spelled out.
    @ivar search_condition: The condition "submission C{s} matches the
        search", its one parameter what L{search_parameter} makes of it: a
        C{str.format} template, given C{seq}, the expression of C{s.seq}
        to test (see L{_submission_filters}).
    @ivar search_quotes_words: Whether that parameter is the search's words
        each in double quotes (SQLite's FTS5 C{MATCH}), or the search as
        given (PostgreSQL's C{plainto_tsquery}).
    @ivar prefix_condition: The condition "C{s.id} starts with", its one
        parameter the prefix followed by L{prefix_wildcard}.
    @ivar prefix_wildcard: What matches any rest of an id.
    @ivar for_update: What locks the rows a C{SELECT} reads until the
        transaction ends, where a write transaction does not already.
    """

    mark: str
    true: str
    subquery_alias: str
    row_values: bool
    search_condition: str
    search_quotes_words: bool
    prefix_condition: str
    prefix_wildcard: str
    for_update: str

    @cached_property
    def select_task(self) -> str:
        """
        The query for everything about one task (L{TASK_COLUMNS}), its one
        parameter the task's id.
        """
        return f"""
    SELECT {TASK_COLUMNS}
    FROM submissions AS s
    {TASK_JOINS}
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

    def search_parameter(self, search: str) -> str | None:
        """
        The parameter of L{search_condition} for C{search}, or L{None} when
        it has no word (L{search_words}) and so matches nothing. User text
        only ever reaches the database as this parameter: in FTS5's query
        language each word is a quoted string, so nothing in it is an
        operator.
        """
        words = search_words(search)
        if not words:
            return None
        if self.search_quotes_words:
            # A word holds letters and digits only: no quote to escape.
            return " ".join(f'"{word}"' for word in words)
        # What a text parameter cannot carry (NUL, a lone surrogate) is no
        # word anyway.
        return (
            search.encode("utf-8", "replace").decode("utf-8").replace("\x00", " ")
        )

    def after_cursor(
        self,
        key: str,
        seq: str,
        after: tuple[int, int],
        *,
        key_bound: bool = False,
    ) -> tuple[str, list[object]]:
        """
        The condition "strictly after C{after}", a C{(key, seq)} cursor, in
        the order C{key DESC, seq DESC}, and its parameters.

        @param key: The sort key's expression.
        @param seq: The C{seq} column's expression.
        @param key_bound: Whether to spell out, where row values are not
            used, that C{key} is at most the cursor's, so that an index on
            C{key} is walked from there.
        """
        mark = self.mark
        at, after_seq = after
        if self.row_values:
            return f"({key}, {seq}) < ({mark}, {mark})", [at, after_seq]
        if key_bound:
            return (
                f"{key} <= {mark} AND ({key} < {mark} OR {seq} < {mark})",
                [at, at, after_seq],
            )
        return (
            f"({key} < {mark} OR ({key} = {mark} AND {seq} < {mark}))",
            [at, at, after_seq],
        )

    def _submission_filters(
        self, request: PageRequest, *, walk: bool = False
    ) -> tuple[list[str], list[object]]:
        """
        The conditions on the submission C{s} itself that C{request} asks
        for, and their parameters.

        @param walk: Whether the query should walk an index of C{s} in its
            order and test each row against the search, rather than start
            from the rows the search finds (for SQLite, C{+s.seq}: the
            search's rowids are then a set looked up, not a way in). On a
            page in the received order that stops at the page's end
            however many tasks match, where starting from the search would
            read and sort every match.
        """
        mark = self.mark
        query = request.query
        conditions: list[str] = []
        params: list[object] = []
        if query.context_id is not None:
            conditions.append(f"s.context_id = {mark}")
            params.append(query.context_id)
        if query.door is not None:
            conditions.append(f"s.door = {mark}")
            params.append(query.door)
        if query.since is not None:
            conditions.append(f"s.received_at_ms >= {mark}")
            params.append(query.since)
        if query.until is not None:
            conditions.append(f"s.received_at_ms < {mark}")
            params.append(query.until)
        if query.id_prefix is not None:
            conditions.append(self.prefix_condition)
            params.append(query.id_prefix + self.prefix_wildcard)
        if request.search is not None:
            conditions.append(
                self.search_condition.format(seq="+s.seq" if walk else "s.seq")
            )
            params.append(request.search)
        return conditions, params

    def _decision_filters(
        self, request: PageRequest
    ) -> tuple[list[str], list[object], str]:
        """
        The conditions on the task's state and status time that C{request}
        asks for, their parameters, and the join of its decision C{e} to
        C{s} that they need (C{""} if none).

        Each is written so that the planner can tell how many tasks it
        keeps. A decided state keeps decided tasks only: the decision is
        joined, not left-joined, and its own state and time are tested.
        The submitted state is having no decision (a decision is accepted
        or rejected), its status time the receipt. Only a status time with
        no state tests the derived state's time (L{UPDATED_AT_MS}).
        PostgreSQL, given C{COALESCE(e.state, ...) = ...}, takes it for
        one task in 200 whatever the state: for the submitted state (nearly
        every task) it planned two parallel workers and a hash of every
        decision where a walk of one page's rows does.
        """
        mark = self.mark
        query = request.query
        conditions: list[str] = []
        params: list[object] = []
        join = ""
        if query.status == STATE_SUBMITTED:
            conditions.append(
                "NOT EXISTS (SELECT 1 FROM events AS e WHERE e.submission_id = s.id)"
            )
            updated_at_ms = "s.received_at_ms"
        elif query.status is not None:
            conditions.append(f"e.state = {mark}")
            params.append(query.status)
            join = "JOIN events AS e ON e.submission_id = s.id"
            updated_at_ms = "e.at_ms"
        else:
            join = "LEFT JOIN events AS e ON e.submission_id = s.id"
            updated_at_ms = UPDATED_AT_MS
        if query.status_timestamp_after is not None:
            conditions.append(f"{updated_at_ms} >= {mark}")
            params.append(query.status_timestamp_after)
        elif query.status is None:
            join = ""
        return conditions, params, join

    def count_query(self, request: PageRequest) -> tuple[str, list[object]]:
        """
        The query counting every task C{request}'s filters keep (whatever
        its order and cursor), and its parameters. A decided state's count
        with no condition on the submission reads the decisions alone (each
        is of a stored submission: its foreign key).
        """
        conditions, params = self._submission_filters(request)
        decided, decided_params, join = self._decision_filters(request)
        if join.startswith("JOIN") and not conditions:
            source = "events AS e"
        else:
            source = f"submissions AS s {join}"
        where = " AND ".join(conditions + decided) or self.true
        if request.total_cap is None:
            return (
                f"SELECT COUNT(*) FROM {source} WHERE {where}",
                params + decided_params,
            )
        # Counted up to one more than the cap: that many says "more".
        return (
            f"""SELECT COUNT(*) FROM (
                SELECT 1 FROM {source} WHERE {where}
                LIMIT {self.mark}
            ) AS counted""",
            [*params, *decided_params, request.total_cap + 1],
        )

    def page_query(
        self, request: PageRequest, matching: int | None = None
    ) -> tuple[str, list[object]]:
        """
        The query of one page of C{request} (one row more than asked for
        tells whether another page follows), and its parameters.

        @param matching: How many tasks C{request}'s filters keep, if
            counted exactly (in the same transaction): at most
            L{FEW_MATCHING}, the page is read from all of them (see
            L{_page_of_few}) instead of a walk in its order.
        """
        if matching is not None and matching <= FEW_MATCHING:
            return self._page_of_few(request)
        if request.sort == SORT_RECEIVED:
            return self._received_page(request)
        return self._updated_page(request)

    def _page_of_few(self, request: PageRequest) -> tuple[str, list[object]]:
        """
        A page read from every task the filters keep, found as cheaply as
        the planner can find them all (a fenced subquery: not a walk in
        the page's order, which stops at the page's end), their keys
        sorted, then the page's rows read.

        A walk in the page's order reads every row it passes until the
        page is full: when few tasks match, it may pass the whole table.
        The planners judge that from how many they expect, taking the
        filters as independent, and they are not: after a search's
        matches were all rejected, the search among submitted tasks
        matches none, where they expect one in a hundred of the search's
        matches to be undecided. PostgreSQL walked a million rows for it
        (1.4 s); from the search's index it is read in 15 ms.
        """
        mark = self.mark
        conditions, params = self._submission_filters(request)
        decided, decided_params, join = self._decision_filters(request)
        conditions += decided
        params += decided_params
        if request.sort == SORT_RECEIVED:
            key = "s.received_at_ms"
        elif request.query.status is None:
            join = "LEFT JOIN events AS e ON e.submission_id = s.id"
            key = UPDATED_AT_MS
        else:
            key = "s.received_at_ms" if request.query.status == STATE_SUBMITTED else "e.at_ms"
        if request.after is not None:
            condition, after_params = self.after_cursor(key, "s.seq", request.after)
            conditions.append(condition)
            params += after_params
        return (
            f"""
                WITH matching AS MATERIALIZED (
                    SELECT s.seq AS seq, {key} AS sort_key
                    FROM submissions AS s {join}
                    WHERE {" AND ".join(conditions) or self.true}
                ), page AS (
                    SELECT seq, sort_key FROM matching
                    ORDER BY sort_key DESC, seq DESC
                    LIMIT {mark}
                )
                SELECT {TASK_COLUMNS}
                FROM page
                JOIN submissions AS s ON s.seq = page.seq
                {TASK_JOINS}
                ORDER BY page.sort_key DESC, page.seq DESC
            """,
            [*params, request.limit + 1],
        )

    def received_walk(self, request: PageRequest) -> tuple[str, list[object], str]:
        """
        The condition on a walk down the received order's index (C{s},
        joined to its decision C{e} where needed) that C{request}'s filters
        and cursor make, the search's as walked (see L{_submission_filters})
        included, and its parameters.

        @return: The condition, its parameters, and the join of C{e} it
            needs (see L{_decision_filters}).
        """
        conditions, params = self._submission_filters(request, walk=True)
        decided, decided_params, join = self._decision_filters(request)
        conditions += decided
        params += decided_params
        if request.after is not None:
            condition, after_params = self.after_cursor(
                "s.received_at_ms", "s.seq", request.after, key_bound=True
            )
            conditions.append(condition)
            params += after_params
        return " AND ".join(conditions) or self.true, params, join

    def _received_page(self, request: PageRequest) -> tuple[str, list[object]]:
        """
        A page in the received order: a walk down the index on
        C{(received_at_ms, seq)} from the cursor, reading each task's
        decision on the way, until the page is full.
        """
        where, params, join = self.received_walk(request)
        joins = TASK_JOINS
        if join.startswith("JOIN"):
            joins = f"{join} LEFT JOIN purges AS p ON p.submission_id = s.id"
        return (
            f"""
                SELECT {TASK_COLUMNS}
                FROM submissions AS s
                {joins}
                WHERE {where}
                ORDER BY s.received_at_ms DESC, s.seq DESC
                LIMIT {self.mark}
            """,
            [*params, request.limit + 1],
        )

    def _updated_page(self, request: PageRequest) -> tuple[str, list[object]]:
        """
        A page in the status order, merged from two walks that each stop
        at a page's end: the undecided submissions down the received
        order's index (their status time is their receipt), and the
        decisions down C{events_by_time} (migration 4), each tie of
        decision times ordered by C{seq} (the keyset's tiebreak) among
        itself only. Whole rows are read for the merged page only.
        """
        query = request.query
        mark = self.mark
        size = request.limit + 1
        parts: list[str] = []
        params: list[object] = []
        if query.status in (None, STATE_SUBMITTED):
            conditions, part_params = self._submission_filters(request, walk=True)
            conditions.append(
                "NOT EXISTS (SELECT 1 FROM events AS e WHERE e.submission_id = s.id)"
            )
            if query.status_timestamp_after is not None:
                conditions.append(f"s.received_at_ms >= {mark}")
                part_params.append(query.status_timestamp_after)
            if request.after is not None:
                condition, after_params = self.after_cursor(
                    "s.received_at_ms", "s.seq", request.after, key_bound=True
                )
                conditions.append(condition)
                part_params += after_params
            parts.append(f"""
                SELECT seq, updated_at_ms FROM (
                    SELECT s.seq AS seq, s.received_at_ms AS updated_at_ms
                    FROM submissions AS s
                    WHERE {" AND ".join(conditions)}
                    ORDER BY s.received_at_ms DESC, s.seq DESC
                    LIMIT {mark}
                ) AS undecided""")
            params += [*part_params, size]
        if query.status != STATE_SUBMITTED:
            conditions, part_params = self._submission_filters(request, walk=True)
            if query.status is not None:
                conditions.append(f"e.state = {mark}")
                part_params.append(query.status)
            if query.status_timestamp_after is not None:
                conditions.append(f"e.at_ms >= {mark}")
                part_params.append(query.status_timestamp_after)
            if request.after is not None:
                condition, after_params = self.after_cursor(
                    "e.at_ms", "s.seq", request.after, key_bound=True
                )
                conditions.append(condition)
                part_params += after_params
            parts.append(f"""
                SELECT seq, updated_at_ms FROM (
                    SELECT s.seq AS seq, e.at_ms AS updated_at_ms
                    FROM events AS e
                    JOIN submissions AS s ON s.id = e.submission_id
                    WHERE {" AND ".join(conditions) or self.true}
                    ORDER BY e.at_ms DESC, s.seq DESC
                    LIMIT {mark}
                ) AS decided""")
            params += [*part_params, size]
        return (
            f"""
                WITH page AS (
                    SELECT seq, updated_at_ms FROM (
                        {" UNION ALL ".join(parts)}
                    ) AS merged
                    ORDER BY updated_at_ms DESC, seq DESC
                    LIMIT {mark}
                )
                SELECT {TASK_COLUMNS}
                FROM page
                JOIN submissions AS s ON s.seq = page.seq
                {TASK_JOINS}
                ORDER BY page.updated_at_ms DESC, page.seq DESC
            """,
            [*params, size],
        )

    # Notification cursors (see L{ThreadedStore
    # <beacon.store._threaded.ThreadedStore>}'s claim and finish).

    @cached_property
    def create_cursor(self) -> str:
        """
        Create channel C{mark}'s cursor after the newest submission, unless
        it exists (then change nothing: the row count is 0).
        """
        return f"""
    INSERT INTO notify_cursors (channel, through_seq)
    SELECT {self.mark}, COALESCE(MAX(seq), 0) FROM submissions WHERE {self.true}
    ON CONFLICT (channel) DO NOTHING
"""

    @cached_property
    def select_cursor(self) -> str:
        """
        A channel's C{(through_seq, holder, lease_until_ms)}, locked until
        the transaction ends.
        """
        return f"""
    SELECT through_seq, holder, lease_until_ms FROM notify_cursors
    WHERE channel = {self.mark}{self.for_update}
"""

    @cached_property
    def select_after_seq(self) -> str:
        """
        Up to C{limit} whole tasks after a C{seq}, in C{seq} order: the
        parameters are the C{seq} and the limit.
        """
        return f"""
    SELECT {TASK_COLUMNS}
    FROM submissions AS s
    {TASK_JOINS}
    WHERE s.seq > {self.mark}
    ORDER BY s.seq
    LIMIT {self.mark}
"""

    @cached_property
    def count_after_seq(self) -> str:
        """
        How many submissions have a C{seq} above the parameter.
        """
        return f"SELECT COUNT(*) FROM submissions WHERE seq > {self.mark}"

    @cached_property
    def lease_cursor(self) -> str:
        """
        Give a channel's lease to a holder until a time: the parameters are
        the holder, the time and the channel.
        """
        m = self.mark
        return f"""
    UPDATE notify_cursors SET holder = {m}, lease_until_ms = {m}
    WHERE channel = {m}
"""

    @cached_property
    def release_cursor(self) -> str:
        """
        End a holder's lease of a channel: the parameters are the channel
        and the holder.
        """
        m = self.mark
        return f"""
    UPDATE notify_cursors SET holder = NULL, lease_until_ms = 0
    WHERE channel = {m} AND holder = {m}
"""

    @cached_property
    def advance_cursor(self) -> str:
        """
        End a holder's lease of a channel and move its cursor forward (never
        back) to a C{seq}: the parameters are the C{seq} twice, the channel
        and the holder.
        """
        m = self.mark
        return f"""
    UPDATE notify_cursors SET
        holder = NULL,
        lease_until_ms = 0,
        through_seq = CASE WHEN through_seq < {m} THEN {m} ELSE through_seq END
    WHERE channel = {m} AND holder = {m}
"""

    # Purging.

    @cached_property
    def purgeable(self) -> str:
        """
        The decided submissions not yet purged whose decision was made
        before the parameter: their C{(seq, id)}, in C{seq} order.
        """
        return f"""
    SELECT s.seq, s.id
    FROM events AS e
    JOIN submissions AS s ON s.id = e.submission_id
    WHERE e.at_ms < {self.mark}
    AND NOT EXISTS (SELECT 1 FROM purges AS p WHERE p.submission_id = e.submission_id)
    ORDER BY s.seq
"""

    @cached_property
    def count_purgeable(self) -> str:
        """
        How many submissions L{purgeable} finds, for the same parameter.
        """
        return f"""
    SELECT COUNT(*) FROM events AS e
    WHERE e.at_ms < {self.mark}
    AND NOT EXISTS (SELECT 1 FROM purges AS p WHERE p.submission_id = e.submission_id)
"""


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
        purged_at_ms,
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
            purged_at_ms=purged_at_ms,
        )
    return StoredTask(
        submission=submission,
        state=state,
        updated_at_ms=at_ms,
        note=note,
        seq=seq,
        purged_at_ms=purged_at_ms,
    )


def status_of(row: tuple[Any, ...]) -> TaskStatusRecord:
    """
    The L{TaskStatusRecord} of a row of C{(id, context_id, received_at_ms,
    state, at_ms)}, the last two L{None} for an undecided task.
    """
    id_, context_id, received_at_ms, state, at_ms = row
    if state is None:
        return TaskStatusRecord(
            id=id_, context_id=context_id, state=STATE_SUBMITTED, updated_at_ms=received_at_ms
        )
    return TaskStatusRecord(id=id_, context_id=context_id, state=state, updated_at_ms=at_ms)


def counted_exactly(request: PageRequest, total: int | None) -> int | None:
    """
    How many tasks C{request}'s filters keep, if its C{total} (as counted,
    or L{None}) says exactly: not when it reached the cap.
    """
    if total is None or (request.total_cap is not None and total > request.total_cap):
        return None
    return total


def page_of(rows: list[Any], request: PageRequest, total: int | None) -> TaskPage:
    """
    The L{TaskPage} of up to C{limit + 1} rows of L{TASK_COLUMNS} (one more
    than asked for tells whether another page follows), in C{request}'s
    order, and its C{total} as counted: above C{request.total_cap}, the
    cap, marked capped.
    """
    capped = (
        total is not None
        and request.total_cap is not None
        and total > request.total_cap
    )
    if capped:
        total = request.total_cap
    tasks = [task_of(row) for row in rows[: request.limit]]
    next_after = None
    if len(rows) > request.limit:
        last = tasks[-1]
        if request.sort == SORT_RECEIVED:
            next_after = (last.submission.received_at_ms, last.seq)
        else:
            next_after = (last.updated_at_ms, last.seq)
    return TaskPage(
        tasks=tasks, total=total, next_after=next_after, total_capped=capped
    )
