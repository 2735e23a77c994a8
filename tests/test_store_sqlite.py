"""
The SQLite backend's own promises: durability settings and group commit
shared by appends and decisions, append-only triggers but for a purge, one
decision per submission in the database itself, schema versioning and the
upgrade from version 1, the query plans, start-up errors, and an orderly
stop that waits for what is in flight.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import gatherResults
from twisted.python.filepath import FilePath
from twisted.python.threadable import isInIOThread

from beacon.store import (
    SORT_RECEIVED,
    SORT_UPDATED,
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    AlreadyDecided,
    SQLiteStore,
    StoreError,
    StoreEvent,
    StoredTask,
    TaskQuery,
)
from beacon.store._sqlite import SCHEMA_VERSION
from store_support import (
    DECIDED_AT,
    T0,
    Heard,
    all_pages,
    assert_one_decision_wins,
    hold_writer,
    ids,
    newest_first,
    old_database,
    open_store,
    raw,
    reactor,
    structured,
    submission,
    text,
)
from store_support import (  # noqa: F401 (fixtures)
    db,
    sqlite_store,
)


# SQLite: durability and group commit.


@pytest_twisted.ensureDeferred
async def test_restart_keeps_data(db: Path) -> None:
    """
    A new SQLiteStore on the same file finds every acknowledged submission
    and decision, and does not migrate again.
    """
    first = open_store(db)
    stored = [submission(n) for n in range(20)]
    await gatherResults([first.append(s) for s in stored])
    decided = await first.decide(stored[0].id, STATE_COMPLETED, DECIDED_AT, "kept")
    await first.stopService()

    second = SQLiteStore(FilePath(str(db)), reactor)
    second.startService()
    try:
        statuses = await gatherResults([second.status(s.id) for s in stored])
        assert [status and status.context_id for status in statuses] == [
            s.context_id for s in stored
        ]
        assert statuses[0] is not None
        assert statuses[0].state == STATE_COMPLETED
        assert await second.get(stored[0].id) == decided
        with pytest.raises(AlreadyDecided):
            await second.decide(stored[0].id, STATE_REJECTED, DECIDED_AT + 1, None)
    finally:
        await second.stopService()
    connection = raw(db)
    try:
        rows = connection.execute("SELECT version FROM beacon_schema").fetchall()
        content = connection.execute(
            "SELECT content, sha256 FROM submissions WHERE id = ?", (stored[3].id,)
        ).fetchone()
    finally:
        connection.close()
    assert rows == [(version,) for version in range(1, SCHEMA_VERSION + 1)]
    assert content == (stored[3].content, stored[3].sha256)


@pytest_twisted.ensureDeferred
async def test_group_commit(sqlite_store: SQLiteStore) -> None:
    """
    200 concurrent appends are committed in fewer transactions than appends.
    """
    await gatherResults([sqlite_store.append(submission(n)) for n in range(200)])
    assert 1 <= sqlite_store.transactions < 200


class _Watched(SQLiteStore):
    """
    A SQLiteStore that tells a queue, from its writer thread, the size of
    each batch it has written.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path, reactor)
        self.written: queue.SimpleQueue[int] = queue.SimpleQueue()

    def _write_batch(self, writes: list[Any]) -> list[Any]:
        outcomes = super()._write_batch(writes)
        self.written.put(len(writes))
        return outcomes


@pytest_twisted.ensureDeferred
async def test_writer_goes_on_while_the_reactor_answers(db: Path) -> None:
    """
    The writer takes the next batch as soon as it has committed one, before
    the reactor has answered that one: here the test holds the reactor
    thread while the writer commits a first submission, queues a second,
    and the writer commits it too, with neither answered yet.
    """
    store = _Watched(str(db))
    store.startService()
    try:
        first = store.append(submission(1))
        assert store.written.get(timeout=30) == 1
        second = store.append(submission(2))
        # A writer that waited for the reactor to answer the first batch
        # would never take this one while the reactor is held: get times
        # out.
        assert store.written.get(timeout=30) == 1
        assert not first.called and not second.called
        await gatherResults([first, second])
        assert store.transactions == 2
    finally:
        await store.stopService()


@pytest_twisted.ensureDeferred
async def test_large_mixed_batch_is_stored_row_for_row(sqlite_store: SQLiteStore) -> None:
    """
    A batch of 80 submissions with a decision in the middle (several
    multi-row INSERTs around it) stores every submission exactly, in order,
    and the decision, in one transaction.
    """
    await sqlite_store.append(submission(0))
    release = await hold_writer(sqlite_store)
    batch = [sqlite_store.append(submission(n)) for n in range(1, 41)]
    decided = sqlite_store.decide(submission(0).id, STATE_REJECTED, DECIDED_AT, "no")
    batch += [sqlite_store.append(submission(n)) for n in range(41, 81)]
    release()
    await gatherResults(batch)
    task = await decided
    assert task is not None and task.state == STATE_REJECTED
    assert sqlite_store.transactions == 2
    for n in range(1, 81):
        stored = await sqlite_store.get(submission(n).id)
        assert stored is not None and stored.submission == submission(n)
    page = await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, status=STATE_SUBMITTED), limit=100)
    assert [t.submission.id for t in page.tasks] == [submission(n).id for n in range(80, 0, -1)]


@pytest_twisted.ensureDeferred
async def test_max_batch(db: Path) -> None:
    """
    No transaction holds more than max_batch submissions: 100 queued while
    the writer is busy go ten at a time.
    """
    small = open_store(db, max_batch=10)
    try:
        release = await hold_writer(small)
        appended = [small.append(submission(n)) for n in range(100)]
        release()
        await gatherResults(appended)
        assert small.transactions == 10
    finally:
        await small.stopService()


@pytest_twisted.ensureDeferred
async def test_durability_settings(sqlite_store: SQLiteStore, db: Path) -> None:
    """
    The writer runs in WAL mode with synchronous FULL, foreign keys and a
    busy timeout; WAL mode is recorded in the file itself.
    """
    pragmas = await sqlite_store.pragmas()
    assert pragmas["journal_mode"] == "wal"
    assert pragmas["synchronous"] == 2  # FULL
    assert pragmas["foreign_keys"] == 1
    assert pragmas["busy_timeout"] > 0
    connection = raw(db)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_batch_failure_stores_nothing(sqlite_store: SQLiteStore) -> None:
    """
    When one submission of a batch cannot be written, every append of that
    batch fails with StoreError naming no content, none of them is stored,
    and the store keeps working.
    """
    secret = b'{"text":"do not log or echo me"}'
    await sqlite_store.append(submission(0))
    doomed = [
        submission(1, content=secret),
        submission(1, id="receipt-0001"),  # the same id: the batch fails
        submission(2),
    ]
    release = await hold_writer(sqlite_store)
    answers = [sqlite_store.append(s) for s in doomed]
    release()
    for answer in answers:
        with pytest.raises(StoreError) as caught:
            await answer
        assert "do not log" not in str(caught.value)
    for s in doomed:
        assert await sqlite_store.status(s.id) is None
    assert sqlite_store.transactions == 1
    await sqlite_store.append(submission(3))
    assert await sqlite_store.status(submission(3).id) is not None


@pytest_twisted.ensureDeferred
async def test_append_only_triggers(sqlite_store: SQLiteStore, db: Path) -> None:
    """
    The database itself refuses UPDATE and DELETE on submissions, events
    and purges, but for the one change a purge makes: a decided submission
    with a purges row may have its content emptied and its decision's note
    forgotten, and nothing else.
    """
    stored, undecided = submission(1), submission(2)
    await sqlite_store.append(stored)
    await sqlite_store.append(undecided)
    await sqlite_store.decide(stored.id, STATE_COMPLETED, DECIDED_AT, "a note")
    # A purges row needs its submission indexed for search: a search
    # indexes both.
    await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="submission"), limit=1)
    connection = raw(db)
    try:
        refused = (
            "UPDATE submissions SET content = x'00'",
            "UPDATE submissions SET content = x''",
            "DELETE FROM submissions",
            "UPDATE events SET state = 'TASK_STATE_SUBMITTED'",
            "UPDATE events SET note = NULL",
            "DELETE FROM events",
        )
        for statement in refused:
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                connection.execute(statement)
        # A purges row, but no decision: still refused.
        connection.execute(
            "INSERT INTO purges (submission_id, at_ms) VALUES (?, ?)",
            (undecided.id, DECIDED_AT + 1),
        )
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            connection.execute(
                "UPDATE submissions SET content = x'' WHERE id = ?", (undecided.id,)
            )
        connection.execute(
            "INSERT INTO purges (submission_id, at_ms) VALUES (?, ?)",
            (stored.id, DECIDED_AT + 1),
        )
        for statement in (
            "UPDATE submissions SET content = x'00' WHERE id = ?",
            "UPDATE submissions SET content = '' WHERE id = ?",
            "UPDATE submissions SET content = x'', door = 'x' WHERE id = ?",
            "UPDATE submissions SET sha256 = 'x' WHERE id = ?",
            "UPDATE submissions SET seq = 99 WHERE id = ?",
            "DELETE FROM submissions WHERE id = ?",
            "UPDATE events SET note = 'other' WHERE submission_id = ?",
            "UPDATE events SET note = NULL, at_ms = 1 WHERE submission_id = ?",
            "UPDATE purges SET at_ms = 1 WHERE submission_id = ?",
            "DELETE FROM purges WHERE submission_id = ?",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                connection.execute(statement, (stored.id,))
        connection.execute("UPDATE submissions SET content = x'' WHERE id = ?", (stored.id,))
        connection.execute("UPDATE events SET note = NULL WHERE submission_id = ?", (stored.id,))
    finally:
        connection.close()
    task = await sqlite_store.get(stored.id)
    assert task is not None
    assert (task.state, task.submission.content, task.note, task.purged_at_ms) == (
        STATE_COMPLETED,
        b"",
        None,
        DECIDED_AT + 1,
    )
    untouched = await sqlite_store.get(undecided.id)
    assert untouched is not None
    assert (untouched.submission, untouched.state) == (undecided, STATE_SUBMITTED)


# SQLite: decisions.


@pytest_twisted.ensureDeferred
async def test_one_decision_enforced_by_database(
    sqlite_store: SQLiteStore, db: Path
) -> None:
    """
    Migration 1 creates a unique index on events(submission_id): the
    database itself refuses a second decision, whoever writes it.
    """
    stored = submission(1)
    await sqlite_store.append(stored)
    await sqlite_store.decide(stored.id, STATE_COMPLETED, DECIDED_AT, None)
    connection = raw(db)
    try:
        (sql,) = connection.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index'"
            " AND tbl_name = 'events' AND name = 'events_one_decision'"
        ).fetchone()
        assert "UNIQUE" in sql.upper()
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            connection.execute(
                "INSERT INTO events (submission_id, at_ms, state, note)"
                " VALUES (?, ?, ?, NULL)",
                (stored.id, DECIDED_AT + 1, STATE_REJECTED),
            )
        (count,) = connection.execute("SELECT COUNT(*) FROM events").fetchone()
        (version,) = connection.execute(
            "SELECT MAX(version) FROM beacon_schema"
        ).fetchone()
    finally:
        connection.close()
    assert count == 1
    assert version == SCHEMA_VERSION


@pytest_twisted.ensureDeferred
async def test_two_stores_decide_at_once(db: Path) -> None:
    """
    Two stores on one file (two Beacon instances) deciding the same task at
    once: exactly one wins, the other fails with AlreadyDecided, and both
    then read the winner's decision.
    """
    one, two = open_store(db), open_store(db)
    try:
        for n in range(5):
            await one.append(submission(n))
        await assert_one_decision_wins(one, two)
    finally:
        await one.stopService()
        await two.stopService()


@pytest_twisted.ensureDeferred
async def test_decisions_share_group_commit(sqlite_store: SQLiteStore) -> None:
    """
    Decisions queue with appends and are written with them in one
    transaction, in order: a decision may follow its submission's append
    in the same batch, and listeners hear the batch in its order.
    """
    heard = Heard(sqlite_store)
    await sqlite_store.append(submission(0))
    release = await hold_writer(sqlite_store)
    queued = [
        sqlite_store.append(submission(1)),
        sqlite_store.decide(submission(0).id, STATE_REJECTED, DECIDED_AT, None),
        sqlite_store.decide(submission(1).id, STATE_COMPLETED, DECIDED_AT, None),
        sqlite_store.decide(submission(1).id, STATE_REJECTED, DECIDED_AT, None),
        sqlite_store.decide("receipt-9999", STATE_REJECTED, DECIDED_AT, None),
        sqlite_store.append(submission(2)),
    ]
    release()
    results: list[object] = []
    for answer in queued:
        try:
            results.append(await answer)
        except AlreadyDecided as e:
            results.append(e)
    assert sqlite_store.transactions == 2
    assert results[0] is None
    assert isinstance(results[1], StoredTask) and results[1].state == STATE_REJECTED
    assert isinstance(results[2], StoredTask) and results[2].state == STATE_COMPLETED
    assert isinstance(results[3], AlreadyDecided)
    assert results[4:] == [None, None]
    assert await heard.count(5) == [
        StoreEvent("submitted", submission(0).id),
        StoreEvent("submitted", submission(1).id),
        StoreEvent("decided", submission(0).id),
        StoreEvent("decided", submission(1).id),
        StoreEvent("submitted", submission(2).id),
    ]


@pytest_twisted.ensureDeferred
async def test_decision_answered_after_commit(
    sqlite_store: SQLiteStore, db: Path
) -> None:
    """
    A decision is answered only once it is committed: another connection
    already reads it then.
    """
    stored = submission(1)
    await sqlite_store.append(stored)
    seen: list[object] = []

    def committed(task: StoredTask | None) -> StoredTask | None:
        connection = raw(db)
        try:
            seen.append(
                connection.execute(
                    "SELECT state, at_ms, note FROM events WHERE submission_id = ?",
                    (stored.id,),
                ).fetchone()
            )
        finally:
            connection.close()
        return task

    decided = sqlite_store.decide(stored.id, STATE_REJECTED, DECIDED_AT, "why")
    assert not decided.called
    decided.addCallback(committed)
    await decided
    assert seen == [(STATE_REJECTED, DECIDED_AT, "why")]


@pytest_twisted.ensureDeferred
async def test_decision_in_failed_batch(sqlite_store: SQLiteStore) -> None:
    """
    A decision in a batch that fails is not stored and fails with
    StoreError; no listener hears of it; it can be made again.
    """
    heard = Heard(sqlite_store)
    await sqlite_store.append(submission(0))
    release = await hold_writer(sqlite_store)
    decided = sqlite_store.decide(submission(0).id, STATE_COMPLETED, DECIDED_AT, None)
    doomed = [sqlite_store.append(submission(2)), sqlite_store.append(submission(2))]
    release()
    for answer in [decided, *doomed]:
        with pytest.raises(StoreError):
            await answer
    task = await sqlite_store.get(submission(0).id)
    assert task is not None and task.state == STATE_SUBMITTED
    assert sqlite_store.transactions == 1
    await sqlite_store.decide(submission(0).id, STATE_REJECTED, DECIDED_AT, None)
    assert await heard.count(2) == [
        StoreEvent("submitted", submission(0).id),
        StoreEvent("decided", submission(0).id),
    ]


@pytest_twisted.ensureDeferred
async def test_listeners_after_answers_on_reactor_thread(
    sqlite_store: SQLiteStore, db: Path
) -> None:
    """
    Listeners run on the reactor thread, after the batch's Deferreds fired
    (the appenders' own callbacks first), with the write committed.
    """
    order: list[str] = []
    threads: list[bool] = []
    stored: list[object] = []

    def listener(event: StoreEvent) -> None:
        order.append(f"heard {event.kind}")
        threads.append(isInIOThread())
        connection = raw(db)
        try:
            stored.append(
                connection.execute(
                    "SELECT COUNT(*) FROM submissions WHERE id = ?", (event.task_id,)
                ).fetchone()
            )
        finally:
            connection.close()

    sqlite_store.subscribe(listener)
    heard = Heard(sqlite_store)
    release = await hold_writer(sqlite_store)
    first = sqlite_store.append(submission(1))
    second = sqlite_store.append(submission(2))
    first.addCallback(lambda _: order.append("answered 1"))
    second.addCallback(lambda _: order.append("answered 2"))
    release()
    await heard.count(2)
    assert order == ["answered 1", "answered 2", "heard submitted", "heard submitted"]
    assert threads == [True, True]
    assert stored == [(1,), (1,)]


@pytest_twisted.ensureDeferred
async def test_reads_see_many_tasks(sqlite_store: SQLiteStore) -> None:
    """
    list_tasks over a few hundred tasks, in group-committed batches, pages
    through all of them once each, and get finds each.
    """
    appended = [submission(n, received_at_ms=T0 + n // 7) for n in range(300)]
    await gatherResults([sqlite_store.append(s) for s in appended])
    tasks, pages = await all_pages(sqlite_store, 50)
    assert ids(tasks) == newest_first(appended, {})
    assert len(pages) == 6
    got = await gatherResults([sqlite_store.get(s.id) for s in appended[::37]])
    assert [task and task.submission for task in got] == appended[::37]


# SQLite: migration 2 and the query plans.


@pytest_twisted.ensureDeferred
async def test_upgrade_from_version_1(db: Path) -> None:
    """
    A version 1 database with data is migrated at start-up: the rows
    stored before are searchable, listed in the received order, purgeable
    (and then unsearchable), and the new guards hold.
    """
    appended = [
        submission(0, content=text("an old oldword submission"), received_at_ms=T0 + 5),
        submission(1, content=structured("Old Sender", "Oldsubject", "old body"), received_at_ms=T0 + 9),
        submission(2, content=b"not json at all oldword", received_at_ms=T0 + 1),
        submission(3, content=bytes(range(256)), received_at_ms=T0 + 7),
    ]
    old_database(db, appended, 1)
    store = open_store(db)
    try:
        a = [s.id for s in appended]
        page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="oldword"), limit=10)
        assert ids(page.tasks) == [a[0]]
        assert ids((await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="sender oldsubject"), limit=10)).tasks) == [a[1]]
        received = await store.list_tasks(TaskQuery(sort=SORT_RECEIVED), limit=10)
        assert ids(received.tasks) == [a[1], a[3], a[0], a[2]]
        assert [t.submission for t in received.tasks] == [appended[i] for i in (1, 3, 0, 2)]
        await store.append(submission(4, content=text("a new oldword")))
        assert (await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="oldword"), limit=10)).total == 2
        assert await store.purge(DECIDED_AT + 1, DECIDED_AT + 2) == 1
        task = await store.get(a[0])
        assert task is not None
        assert (task.submission.content, task.note, task.purged_at_ms) == (b"", None, DECIDED_AT + 2)
        assert ids((await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="oldword"), limit=10)).tasks) == [submission(4).id]
    finally:
        await store.stopService()
    connection = raw(db)
    try:
        assert connection.execute("SELECT version FROM beacon_schema ORDER BY version").fetchall() == [
            (version,) for version in range(1, SCHEMA_VERSION + 1)
        ]
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            connection.execute("UPDATE submissions SET content = x'' WHERE id = ?", (a[1],))
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_upgrade_from_version_3(db: Path) -> None:
    """
    A version 3 database with data gains the status order's index
    (migration 4) and keeps its rows, listed in the status order.
    """
    appended = [submission(n, received_at_ms=T0 + n) for n in range(3)]
    old_database(db, appended, 3)
    store = open_store(db)
    try:
        page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=10)
        assert [t.submission for t in page.tasks] == [appended[0], appended[2], appended[1]]
        assert (page.tasks[0].state, page.tasks[0].note) == (STATE_REJECTED, "old note")
    finally:
        await store.stopService()
    connection = raw(db)
    try:
        assert connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'events_by_time'"
        ).fetchone() == ("CREATE INDEX events_by_time ON events (at_ms)",)
        assert connection.execute("SELECT MAX(version) FROM beacon_schema").fetchone() == (4,)
    finally:
        connection.close()


def query_plan(db: Path, query: str, params: list[object]) -> str:
    """
    SQLite's EXPLAIN QUERY PLAN of C{query}, one step a line.
    """
    connection = raw(db)
    try:
        rows = connection.execute(f"EXPLAIN QUERY PLAN {query}", params).fetchall()
    finally:
        connection.close()
    return "\n".join(row[-1] for row in rows)


@pytest_twisted.ensureDeferred
async def test_query_plans_use_the_indexes(sqlite_store: SQLiteStore, db: Path) -> None:
    """
    The received order walks its index (no sorting), from the cursor on,
    also under a search; an id prefix looks ids up in their unique index;
    a search asks the full-text index.
    """
    from beacon.store._sql import PageRequest
    from beacon.store._sqlite import DIALECT

    await sqlite_store.append(submission(1))
    plans = {}
    for name, request in {
        "first": PageRequest(TaskQuery(sort=SORT_RECEIVED), limit=50),
        "after": PageRequest(TaskQuery(sort=SORT_RECEIVED), limit=50, after=(T0, 5)),
        "filtered": PageRequest(
            TaskQuery(sort=SORT_RECEIVED, status=STATE_SUBMITTED, door="native"), limit=50
        ),
    }.items():
        plans[name] = query_plan(db, *DIALECT.page_query(request))
    for name, plan in plans.items():
        assert "submissions_by_received" in plan, (name, plan)
        assert "TEMP B-TREE" not in plan, (name, plan)
    assert "received_at_ms<?" in plans["after"], plans["after"]
    prefix = PageRequest(TaskQuery(sort=SORT_RECEIVED, id_prefix="0ab1c2"), limit=50)
    for query in (DIALECT.page_query(prefix), DIALECT.count_query(prefix)):
        assert "sqlite_autoindex_submissions_1 (id>? AND id<?)" in query_plan(db, *query)
    # A search in the received order walks the index too (stopping at the
    # page's end), testing each row against the search's rowids; its count
    # starts from them.
    search = PageRequest(
        TaskQuery(sort=SORT_RECEIVED, search="word"), limit=50, search='"word"'
    )
    plan = query_plan(db, *DIALECT.page_query(search))
    assert "SCAN s USING INDEX submissions_by_received" in plan, plan
    assert "VIRTUAL TABLE INDEX" in plan and "TEMP B-TREE" not in plan, plan
    plan = query_plan(db, *DIALECT.count_query(search))
    assert "INTEGER PRIMARY KEY" in plan and "VIRTUAL TABLE INDEX" in plan, plan
    # The status order merges two walks, each stopping at a page's end:
    # the undecided down the received index, the decisions down
    # events_by_time (sorting only ties of a decision time); a status
    # keeps the one walk it needs. Nothing sorts the whole table.
    for status in (None, STATE_SUBMITTED, STATE_REJECTED):
        for after in (None, (T0, 5)):
            request = PageRequest(TaskQuery(sort=SORT_UPDATED, status=status), limit=50, after=after)
            plan = query_plan(db, *DIALECT.page_query(request))
            walks = [line for line in plan.splitlines() if line.startswith(("SCAN", "SEARCH"))]
            assert all(
                "USING" in line or line in ("SCAN undecided", "SCAN decided", "SCAN page")
                for line in walks
            ), plan
            assert ("submissions_by_received" in plan) == (status != STATE_REJECTED), plan
            assert ("events_by_time" in plan) == (status != STATE_SUBMITTED), plan
    # The received order under a status walks its index as well.
    for status in (STATE_SUBMITTED, STATE_REJECTED):
        plan = query_plan(db, *DIALECT.page_query(
            PageRequest(TaskQuery(sort=SORT_RECEIVED, status=status), limit=50)))
        assert "SCAN s USING INDEX submissions_by_received" in plan and "TEMP B-TREE" not in plan, plan
    # A decided state's count reads the decisions alone; the submitted
    # state is having no decision, looked up per row of the walk.
    query, params = DIALECT.count_query(
        PageRequest(TaskQuery(status=STATE_REJECTED), limit=50, total_cap=10))
    assert "submissions" not in query and query_plan(db, query, params).endswith("SCAN e\nSCAN counted")
    plan = query_plan(db, *DIALECT.page_query(
        PageRequest(TaskQuery(sort=SORT_RECEIVED, status=STATE_SUBMITTED), limit=50)))
    assert "SEARCH e USING COVERING INDEX events_one_decision (submission_id=?)" in plan, plan
    # A capped count stops at the cap.
    capped = PageRequest(TaskQuery(sort=SORT_RECEIVED), limit=50, total_cap=10)
    query, params = DIALECT.count_query(capped)
    assert "LIMIT ?" in query and params[-1] == 11


# SQLite: start-up.


@pytest_twisted.ensureDeferred
async def test_newer_schema_refuses_start(db: Path) -> None:
    """
    A database whose schema is newer than the code refuses to start.
    """
    await open_store(db).stopService()
    connection = raw(db)
    try:
        connection.execute(
            "INSERT INTO beacon_schema VALUES (?, 0)", (SCHEMA_VERSION + 1,)
        )
    finally:
        connection.close()
    newer = SQLiteStore(str(db), reactor)
    with pytest.raises(StoreError) as caught:
        newer.startService()
    assert str(caught.value).startswith(
        f"database schema version {SCHEMA_VERSION + 1} is newer than this"
        f" Beacon supports ({SCHEMA_VERSION})"
    )
    assert not newer.running


def test_unopenable_path_names_it(tmp_path: Path) -> None:
    """
    A database path that cannot be created fails start-up with a StoreError
    naming it.
    """
    (tmp_path / "a-file").write_bytes(b"")
    path = tmp_path / "a-file" / "beacon.sqlite"
    store = SQLiteStore(str(path), reactor)
    with pytest.raises(StoreError, match=str(path)):
        store.startService()
    assert not store.running


def test_not_a_database_names_it(db: Path) -> None:
    """
    A file that is not a SQLite database fails start-up with a StoreError
    naming it.
    """
    db.parent.mkdir()
    db.write_bytes(b"this is not a database, it is a text file" * 100)
    store = SQLiteStore(str(db), reactor)
    with pytest.raises(StoreError, match=str(db)):
        store.startService()
    assert not store.running


@pytest_twisted.ensureDeferred
async def test_creates_private_directory_and_file(tmp_path: Path) -> None:
    """
    A missing data directory is created with mode 0700, and the database
    file with mode 0600.
    """
    db = tmp_path / "missing" / "beacon.sqlite"
    created = open_store(db)
    try:
        assert stat.S_IMODE(os.stat(db.parent).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    finally:
        await created.stopService()


def test_bad_sizes() -> None:
    """
    max_batch and readers below one are refused.
    """
    with pytest.raises(ValueError):
        SQLiteStore("unused.sqlite", reactor, max_batch=0)
    with pytest.raises(ValueError):
        SQLiteStore("unused.sqlite", reactor, readers=0)


# SQLite: stopping.


@pytest_twisted.ensureDeferred
async def test_stop_waits_for_in_flight_appends(db: Path) -> None:
    """
    stopService fires only after every append made before it is committed
    and answered; appends made after it fail, and a restart finds exactly
    the acknowledged ones.
    """
    stopping = open_store(db)
    order: list[str] = []

    def answered(_: None, n: int) -> None:
        order.append(f"append {n}")

    answers = [stopping.append(submission(n)) for n in range(3)]
    for n, answer in enumerate(answers):
        answer.addCallback(answered, n)
    stopped = stopping.stopService()
    stopped.addCallback(lambda _: order.append("stopped"))
    assert not any(answer.called for answer in answers)
    with pytest.raises(StoreError):
        await stopping.append(submission(9))
    await stopped
    assert order == ["append 0", "append 1", "append 2", "stopped"]

    again = open_store(db)
    try:
        for n in range(3):
            assert await again.status(submission(n).id) is not None
        assert await again.status(submission(9).id) is None
    finally:
        await again.stopService()


@pytest_twisted.ensureDeferred
async def test_append_and_status_after_stop_fail(sqlite_store: SQLiteStore) -> None:
    """
    A stopped store refuses appends, decisions and reads with StoreError.
    """
    await sqlite_store.append(submission(1))
    await sqlite_store.stopService()
    with pytest.raises(StoreError):
        await sqlite_store.append(submission(2))
    with pytest.raises(StoreError):
        await sqlite_store.decide(submission(1).id, STATE_COMPLETED, DECIDED_AT, None)
    with pytest.raises(StoreError):
        await sqlite_store.status(submission(1).id)
    with pytest.raises(StoreError):
        await sqlite_store.get(submission(1).id)
    with pytest.raises(StoreError):
        await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=1)


@pytest_twisted.ensureDeferred
async def test_stop_waits_for_decisions(db: Path) -> None:
    """
    stopService fires only after a decision made before it is committed,
    answered and heard by the listeners.
    """
    stopping = open_store(db)
    order: list[str] = []
    stopping.subscribe(lambda event: order.append(f"heard {event.kind}"))
    await stopping.append(submission(1))
    decided = stopping.decide(submission(1).id, STATE_COMPLETED, DECIDED_AT, None)
    decided.addCallback(lambda _: order.append("decided"))
    stopped = stopping.stopService()
    stopped.addCallback(lambda _: order.append("stopped"))
    await stopped
    # The listeners hear of the append after this coroutine resumed from it.
    assert order == ["heard submitted", "decided", "heard decided", "stopped"]
    again = open_store(db)
    try:
        task = await again.get(submission(1).id)
        assert task is not None and task.state == STATE_COMPLETED
    finally:
        await again.stopService()


@pytest_twisted.ensureDeferred
async def test_stop_waits_for_reads(sqlite_store: SQLiteStore) -> None:
    """
    Reads in flight when stopService is called still get their answers.
    """
    await sqlite_store.append(submission(1))
    reading = sqlite_store.status(submission(1).id)
    getting = sqlite_store.get(submission(1).id)
    listing = sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=1)
    await sqlite_store.stopService()
    assert reading.called and getting.called and listing.called
    status = await reading
    assert status is not None
    assert await getting is not None
    assert (await listing).total == 1


@pytest_twisted.ensureDeferred
async def test_second_stop_waits_too(sqlite_store: SQLiteStore) -> None:
    """
    A second stopService made while the first is still closing fires only
    once the store is closed, like the first.
    """
    await sqlite_store.append(submission(1))
    first = sqlite_store.stopService()
    second = sqlite_store.stopService()
    await second
    assert first.called
    await first


def test_listening_follows_subscriptions() -> None:
    """
    A store's listeners say whether anyone listens (a batch makes no events
    for nobody), through every subscribe and unsubscribe.
    """
    from twisted.logger import Logger

    from beacon.store import StoreListeners

    listeners = StoreListeners(Logger())
    assert not listeners.listening
    first = listeners.subscribe(lambda event: None)
    second = listeners.subscribe(lambda event: None)
    assert listeners.listening
    first()
    assert listeners.listening
    second()
    assert not listeners.listening
