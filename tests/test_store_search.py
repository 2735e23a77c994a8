"""
The store's search: full-text search and id prefixes on every backend
(SQLite, the in-memory fake, PostgreSQL), and SQLite's search index, caught
up behind the commit (before every search, in a purge, at start and stop,
across two stores on one file) and upgraded from schema version 2.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import gatherResults

from beacon.store import (
    MIN_ID_PREFIX,
    SORT_RECEIVED,
    SORT_UPDATED,
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    SQLiteStore,
    TaskPage,
    TaskQuery,
)
from beacon.store._sqlite import (
    CATCH_UP_THRESHOLD,
    SCHEMA_VERSION,
    SEARCH_TABLE,
    SEARCH_WATERMARK,
)
from store_support import (
    DECIDED_AT,
    T0,
    Store,
    all_pages,
    ids,
    insert_submissions,
    newest_first,
    old_database,
    open_store,
    raw,
    receipt_id,
    received_newest_first,
    structured,
    submission,
    text,
)
from store_support import (  # noqa: F401 (fixtures)
    backend,
    db,
    sqlite_store,
    store,
)


@pytest_twisted.ensureDeferred
async def test_search_text_and_structured(store: Store) -> None:
    """
    A search finds every word in a text submission's text and in a
    structured one's sender name, agent, operator, subject and body, and
    nowhere else (not the language, the contact, the ids or the door).
    """
    appended = [
        submission(0, content=text("The quick brown fox jumps over the lazy dog")),
        submission(
            1,
            content=structured(
                "Ada Lovelace",
                "Analytical engine notes",
                "Please review the attached bernoulli numbers.",
                agent="ada-assistant/2.1",
                operator="Example Lab",
                language="en",
                contact=[{"kind": "email", "value": "charles@example.org"}],
            ),
        ),
        submission(2, content=structured("crawler", "Broken link", "The fox page is gone.")),
        submission(3, content=text("nothing to see here")),
    ]
    for s in appended:
        await store.append(s)
    a = [s.id for s in appended]

    async def found(search: str, **filters: Any) -> list[str]:
        page = await store.list_tasks(TaskQuery(**{"sort": SORT_UPDATED, "search": search, **filters}), limit=10)
        assert page.total == len(page.tasks)
        return ids(page.tasks)

    assert await found("quick") == [a[0]]
    assert await found("fox") == [a[2], a[0]]
    assert await found("Lovelace") == [a[1]]
    assert await found("assistant") == [a[1]]  # from.agent
    assert await found("lab") == [a[1]]  # from.operator
    assert await found("engine") == [a[1]]  # subject
    assert await found("bernoulli") == [a[1]]  # body
    assert await found("crawler") == [a[2]]
    for elsewhere in ("charles", "email", "en", "receipt", "context", "jsonrpc", "message"):
        assert await found(elsewhere) == [], elsewhere


@pytest_twisted.ensureDeferred
async def test_search_words(store: Store) -> None:
    """
    Every word must be there, in any case and order, as a whole word (no
    substrings, no stems); punctuation in the search is not searched for;
    letters of any script count.
    """
    appended = [
        submission(0, content=text("Réunion à l'ÉCOLE demain: salle 12")),
        submission(1, content=text("Meeting at the school tomorrow, room 12")),
        submission(2, content=text("meetings and schools")),
    ]
    for s in appended:
        await store.append(s)
    a = [s.id for s in appended]

    async def found(search: str) -> list[str]:
        page = await store.list_tasks(TaskQuery(search=search, sort=SORT_RECEIVED), limit=10)
        return ids(page.tasks)

    assert await found("MEETING school") == [a[1]]
    assert await found("school meeting") == [a[1]]
    assert await found("meeting schools") == []
    assert await found("meet") == []
    assert await found("12") == [a[1], a[0]]
    assert await found("école") == [a[0]]
    assert await found("réunion DEMAIN") == [a[0]]
    assert await found('"school", (meeting)!') == [a[1]]
    assert await found("school -meeting") == [a[1]]
    assert await found("school OR schools") == []
    assert await found("school AND meeting") == []
    assert await found("NEAR(school meeting)") == []
    assert await found("sch*") == []
    assert await found("l'école") == [a[0]]
    # What no database text can hold is no word: the rest is searched.
    assert await found("school\x00meeting") == [a[1]]
    assert await found("school \ud800 meeting") == [a[1]]


@pytest.mark.parametrize("search", ["", " ", "!?", "_", "--", '"', "*", "()"])
@pytest_twisted.ensureDeferred
async def test_search_without_words(store: Store, search: str) -> None:
    """
    A search with no word in it matches nothing (and is no error).
    """
    await store.append(submission(1, content=text("anything _ -- at all")))
    assert await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search=search), limit=5) == TaskPage(
        tasks=[], total=0, next_after=None
    )
    page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search=search), limit=5, with_total=False)
    assert (page.tasks, page.total) == ([], None)


@pytest_twisted.ensureDeferred
async def test_search_with_filters_and_paging(store: Store) -> None:
    """
    A search combines with the other filters and pages in both orders.
    """
    appended = [
        submission(
            n,
            content=text(f"item {n} {'even' if n % 2 == 0 else 'odd'} common"),
            received_at_ms=T0 + n // 2,
            door="native" if n % 3 == 0 else "a2a-jsonrpc",
        )
        for n in range(15)
    ]
    for s in appended:
        await store.append(s)
    await store.decide(appended[4].id, STATE_REJECTED, T0 + 100, None)
    even = [s for n, s in enumerate(appended) if n % 2 == 0]
    tasks, pages = await all_pages(store, 2, search="even COMMON", sort=SORT_RECEIVED)
    assert ids(tasks) == received_newest_first(even)
    assert {page.total for page in pages} == {8}
    tasks, pages = await all_pages(store, 3, search="even")
    assert ids(tasks) == newest_first(even, {appended[4].id: T0 + 100})
    tasks, _ = await all_pages(
        store, 2, search="common", door="native", status=STATE_SUBMITTED
    )
    assert ids(tasks) == newest_first(
        [s for n, s in enumerate(appended) if n % 3 == 0 and n != 4], {}
    )


@pytest_twisted.ensureDeferred
async def test_id_prefix(store: Store) -> None:
    """
    id_prefix finds the task whose id starts with it (one, several or
    none); a prefix shorter than MIN_ID_PREFIX, or with anything but digits
    and lower-case letters, is a ValueError.
    """
    appended = [
        submission(0, id=receipt_id(10, "0ab1c2")),
        submission(1, id=receipt_id(20, "0ab1c2")),
        submission(2, id=receipt_id(3, "0ab1d0")),
        submission(3, id=receipt_id(4, "vvvvvv")),
    ]
    for s in appended:
        await store.append(s)
    a = [s.id for s in appended]

    async def found(prefix: str, **filters: Any) -> tuple[list[str], int | None]:
        page = await store.list_tasks(
            TaskQuery(**{"sort": SORT_UPDATED, "id_prefix": prefix, **filters}), limit=10
        )
        return ids(page.tasks), page.total

    assert MIN_ID_PREFIX == 6
    assert await found("0ab1c2") == ([a[1], a[0]], 2)
    assert await found("0ab1c20") == ([a[1], a[0]], 2)
    assert await found(a[1][:-1]) == ([a[1]], 1)
    assert await found(a[1]) == ([a[1]], 1)
    assert await found("0ab1d0") == ([a[2]], 1)
    assert await found("vvvvvv") == ([a[3]], 1)
    assert await found("0ab1c3") == ([], 0)
    assert await found("zzzzzz") == ([], 0)
    assert await found("0ab1c2", sort=SORT_RECEIVED, status=STATE_SUBMITTED) == (
        [a[1], a[0]],
        2,
    )
    await store.decide(a[0], STATE_COMPLETED, DECIDED_AT, None)
    assert await found("0ab1c2", status=STATE_COMPLETED) == ([a[0]], 1)
    for bad in ("", "0ab1c", "0AB1C2", "0ab1c-", "0ab1c2*", "0ab1c2%", "0ab1c_", "0ab1c2 ", "éab1c2"):
        with pytest.raises(ValueError):
            await store.list_tasks(TaskQuery(sort=SORT_UPDATED, id_prefix=bad), limit=10)


# SQLite: the search index, caught up behind the commit.


def fts_rows(connection: sqlite3.Connection) -> int:
    """
    How many rows the full-text index holds, as FTS5 itself counts them:
    the first varint of its averages record (row 1 of its data table: the
    row count, then each column's token count; empty before the first
    write). Every insert adds one and every delete takes one away, so a
    submission indexed twice counts twice (a search would not show it:
    FTS5 answers a rowid once).
    """
    row = connection.execute(
        f"SELECT block FROM {SEARCH_TABLE}_data WHERE id = 1"
    ).fetchone()
    if row is None or row[0] == b"":
        return 0
    value = 0
    for byte in row[0]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    raise AssertionError(f"a truncated FTS5 averages record: {row[0]!r}")


def index_state(db: Path) -> tuple[int, int, int]:
    """
    The full-text index of the database at C{db}, read beside the store:
    how many rows it holds (L{fts_rows}), how far its watermark says it
    has caught up (C{through_seq}), and the newest submission's seq.
    """
    connection = raw(db)
    try:
        (through_seq,) = connection.execute(
            f"SELECT through_seq FROM {SEARCH_WATERMARK}"
        ).fetchone()
        (newest,) = connection.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM submissions"
        ).fetchone()
        return fts_rows(connection), through_seq, newest
    finally:
        connection.close()


def check_index(db: Path) -> None:
    """
    FTS5's own integrity-check of the full-text index passes.
    """
    connection = raw(db)
    try:
        connection.execute(
            f"INSERT INTO {SEARCH_TABLE} ({SEARCH_TABLE}, rank)"
            " VALUES ('integrity-check', 1)"
        )
    finally:
        connection.close()


def index_tables(db: Path) -> list[tuple[Any, ...]]:
    """
    Every row of the full-text index's own tables (its segments and
    structure, the segments' index, its configuration) and of its
    watermark.
    """
    connection = raw(db)
    try:
        return [
            (table, *row)
            for table in (
                f"{SEARCH_TABLE}_data",
                f"{SEARCH_TABLE}_idx",
                f"{SEARCH_TABLE}_config",
                SEARCH_WATERMARK,
            )
            for row in connection.execute(f"SELECT * FROM {table} ORDER BY 1")
        ]
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_search_finds_what_was_just_appended(
    sqlite_store: SQLiteStore, db: Path
) -> None:
    """
    A search right after a few appends (far below CATCH_UP_THRESHOLD, so
    nothing indexed them behind their batches) finds them all, and so do
    searches after many more appends than the threshold, made at once;
    every submission is in the index once, however many searches and
    catch-ups ran.
    """
    few = [submission(n, content=text(f"zqxfresh {n}")) for n in range(3)]
    for s in few:
        await sqlite_store.append(s)
    assert index_state(db) == (0, 0, 3)
    page = await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxfresh"), limit=10)
    assert ids(page.tasks) == [s.id for s in reversed(few)]
    assert index_state(db) == (3, 3, 3)
    many = [
        submission(n, content=text(f"zqxmany {n}"))
        for n in range(3, 3 + 2 * CATCH_UP_THRESHOLD + 7)
    ]
    await gatherResults([sqlite_store.append(s) for s in many])
    pages = await gatherResults(
        [sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxmany"), limit=1) for _ in range(3)]
    )
    assert [page.total for page in pages] == [len(many)] * 3
    assert (await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxfresh"), limit=5)).total == 3
    everything = len(few) + len(many)
    assert index_state(db) == (everything, everything, everything)
    check_index(db)


@pytest_twisted.ensureDeferred
async def test_catch_up_behind_the_batch_that_crosses_the_threshold(db: Path) -> None:
    """
    Written rows are indexed behind the batches once CATCH_UP_THRESHOLD of
    them were written: not before (a writer call made after the batches
    finds nothing indexed), and right after the batch that reached it,
    before the writer's next call.
    """
    store = open_store(db)
    try:
        await gatherResults(
            [store.append(submission(n)) for n in range(CATCH_UP_THRESHOLD - 1)]
        )
        await store.pragmas()
        assert index_state(db) == (0, 0, CATCH_UP_THRESHOLD - 1)
        await store.append(submission(CATCH_UP_THRESHOLD - 1))
        await store.pragmas()
        assert index_state(db) == (CATCH_UP_THRESHOLD,) * 3
    finally:
        await store.stopService()
    check_index(db)


@pytest_twisted.ensureDeferred
async def test_a_batch_leaves_the_index_alone(sqlite_store: SQLiteStore, db: Path) -> None:
    """
    A batch's transaction writes nothing to the full-text index: after an
    append below the threshold, the index's tables and its watermark are
    as they were; the search after it indexes the new row.
    """
    await sqlite_store.append(submission(0, content=text("zqxfirst")))
    assert (await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxfirst"), limit=5)).total == 1
    before = index_tables(db)
    await sqlite_store.append(submission(1, content=text("zqxsecond")))
    assert index_tables(db) == before
    assert index_state(db) == (1, 1, 2)
    assert (await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxsecond"), limit=5)).total == 1
    assert index_state(db) == (2, 2, 2)


@pytest_twisted.ensureDeferred
async def test_purge_of_rows_never_indexed(sqlite_store: SQLiteStore, db: Path) -> None:
    """
    A purge of submissions that nothing has indexed yet indexes them in
    its own transaction before taking their words out again: the purged
    words are no longer found, the others are, and FTS5 finds its index
    sound. The database itself refuses a purges row for a submission not
    yet indexed (a contentless index must never be told to forget text it
    was not given).
    """
    doomed = [submission(n, content=text(f"zqxdoomed{n} zqxshared")) for n in range(3)]
    kept = [
        submission(n, content=structured("Zqxkept", f"subject {n}", "zqxshared"))
        for n in range(3, 6)
    ]
    for s in doomed + kept:
        await sqlite_store.append(s)
    for s in doomed:
        await sqlite_store.decide(s.id, STATE_REJECTED, DECIDED_AT, "zqxnote")
    assert index_state(db) == (0, 0, 6)
    connection = raw(db)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="indexed"):
            connection.execute(
                "INSERT INTO purges (submission_id, at_ms) VALUES (?, ?)",
                (doomed[0].id, DECIDED_AT + 1),
            )
    finally:
        connection.close()
    assert await sqlite_store.purge(DECIDED_AT + 1, DECIDED_AT + 2) == 3
    assert index_state(db) == (3, 6, 6)
    check_index(db)
    for n in range(3):
        assert (await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, search=f"zqxdoomed{n}"), limit=5)).total == 0
    page = await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxshared"), limit=10)
    assert ids(page.tasks) == [s.id for s in reversed(kept)]
    assert (await sqlite_store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxkept"), limit=10)).total == 3
    assert index_state(db) == (3, 6, 6)
    check_index(db)


@pytest_twisted.ensureDeferred
async def test_upgrade_from_version_2(db: Path) -> None:
    """
    A version 2 database (whose trigger indexed every row as it was
    inserted) is migrated at start-up: the trigger is gone, and the
    watermark (one row, kept so) starts at the newest row, so the old rows
    are searchable and indexed once, not again; new rows are searchable
    too.
    """
    appended = [
        submission(0, content=text("an old zqxold submission")),
        submission(1, content=structured("Old Sender", "Zqxold subject", "body")),
        submission(2, content=b"not json at all zqxold"),
    ]
    old_database(db, appended, 2)
    connection = raw(db)
    try:
        assert fts_rows(connection) == 3
    finally:
        connection.close()
    store = open_store(db)
    try:
        assert index_state(db) == (3, 3, 3)
        page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxold"), limit=10)
        assert ids(page.tasks) == [appended[0].id, appended[1].id]
        assert ids((await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="sender"), limit=10)).tasks) == [
            appended[1].id
        ]
        await store.append(submission(3, content=text("a new zqxold")))
        assert (await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxold"), limit=10)).total == 3
        assert index_state(db) == (4, 4, 4)
    finally:
        await store.stopService()
    connection = raw(db)
    try:
        versions = connection.execute("SELECT version FROM beacon_schema").fetchall()
        triggers = connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'"
            " AND tbl_name = 'submissions' AND sql LIKE ?",
            (f"%{SEARCH_TABLE}%",),
        ).fetchall()
        for statement in (
            f"INSERT INTO {SEARCH_WATERMARK} (through_seq) VALUES (0)",
            f"DELETE FROM {SEARCH_WATERMARK}",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="one row"):
                connection.execute(statement)
    finally:
        connection.close()
    assert versions == [(version,) for version in range(1, SCHEMA_VERSION + 1)]
    assert SCHEMA_VERSION >= 3
    assert triggers == []
    check_index(db)


@pytest_twisted.ensureDeferred
async def test_start_indexes_what_was_left_unindexed(db: Path, logged_events: Any) -> None:
    """
    Rows committed but never indexed (their process was gone before any
    catch-up) are indexed when a store starts on the file, before it
    serves anything, and the start-up says how many (store.search_indexed).
    """
    await open_store(db).stopService()
    left = [submission(n, content=text(f"zqxleft {n}")) for n in range(5)]
    connection = raw(db)
    try:
        insert_submissions(connection, left)
    finally:
        connection.close()
    assert index_state(db) == (0, 0, 5)
    store = open_store(db)
    try:
        assert index_state(db) == (5, 5, 5)
        assert [e["count"] for e in logged_events.named("store.search_indexed")] == [5]
        assert (await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxleft"), limit=10)).total == 5
    finally:
        await store.stopService()
    assert index_state(db) == (5, 5, 5)


@pytest_twisted.ensureDeferred
async def test_stop_leaves_the_file_indexed(db: Path) -> None:
    """
    Stopping a store indexes what its batches left unindexed, so that the
    file it leaves is caught up.
    """
    store = open_store(db)
    try:
        for n in range(4):
            await store.append(submission(n))
        assert index_state(db) == (0, 0, 4)
    finally:
        await store.stopService()
    assert index_state(db) == (4, 4, 4)
    check_index(db)


@pytest_twisted.ensureDeferred
async def test_two_stores_search_each_others_rows(db: Path) -> None:
    """
    Two stores on one file: a search through either finds what was just
    appended through the other (below the threshold, so only a search's
    catch-up indexed it), also with both searching at once, and every row
    is indexed once, whichever store indexed it.
    """
    one, two = open_store(db), open_store(db)
    try:
        await one.append(submission(0, content=text("zqxfromone")))
        assert (await two.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxfromone"), limit=5)).total == 1
        await two.append(submission(1, content=text("zqxfromtwo")))
        await one.append(submission(2, content=text("zqxfromone again")))
        pages = await gatherResults(
            [
                one.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxfromtwo"), limit=5),
                two.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxfromone"), limit=5),
                one.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxfromone"), limit=5),
                two.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxfromtwo"), limit=5),
            ]
        )
        assert [page.total for page in pages] == [1, 2, 2, 1]
        assert index_state(db) == (3, 3, 3)
    finally:
        await one.stopService()
        await two.stopService()
    check_index(db)


@pytest_twisted.ensureDeferred
async def test_windowed_search_pages_are_the_shared_pages(db: Path) -> None:
    """
    A search's page in the received order read from windows of the walk
    (L{beacon.store._sqlite_search}) is the shared query's page, row for
    row, page after page: whether the first window holds the page, a
    larger one does, the walk ends inside a window, or every window falls
    short and the shared query reads it; with other filters and a cursor;
    with receipt times in no relation to the order of insertion.
    """
    import random

    from beacon.store._sql import PageRequest, page_of
    from beacon.store._sqlite import DIALECT
    from beacon.store._sqlite_search import search_rows

    rng = random.Random(7)
    times = list(range(300))
    rng.shuffle(times)
    appended = []
    for n, at in enumerate(times):
        words = ["every"]
        if n % 2 == 0:
            words.append("half")
        if n % 10 == 0:
            words.append("tenth")
        if at < 12:
            words.append("oldest")
        appended.append(submission(
            n,
            content=text(" ".join(words)),
            received_at_ms=T0 + at // 2,
            door="native" if n % 3 == 0 else "a2a-jsonrpc",
        ))
    store = open_store(db)
    try:
        for s in appended:
            await store.append(s)
        for s in appended[::7]:
            await store.decide(s.id, STATE_REJECTED, DECIDED_AT, None)
    finally:
        await store.stopService()
    connection = raw(db)
    windowed = fallen_back = 0
    try:
        for search in ("every", "half", "tenth", "oldest", "every half"):
            for filters in (
                {},
                {"door": "native"},
                {"status": STATE_SUBMITTED},
                {"since": T0 + 20, "until": T0 + 130},
            ):
                for limit, rows_per_row, tries in ((1, 1, 3), (3, 2, 2), (7, 16, 3), (2, 1, 1)):
                    query = TaskQuery(sort=SORT_RECEIVED, search=search, **filters)
                    after = None
                    while True:
                        request = PageRequest(
                            query, limit=limit, after=after, with_total=False,
                            search=DIALECT.search_parameter(search),
                        )
                        page, params = DIALECT.page_query(request)
                        shared = connection.execute(page, params).fetchall()
                        rows = search_rows(
                            connection, request, None, sparse=0,
                            rows_per_row=rows_per_row, tries=tries,
                        )
                        if rows is None:
                            fallen_back += 1
                        else:
                            windowed += 1
                            assert rows == shared, (search, filters, limit, after)
                        after = page_of(shared, request, None).next_after
                        if after is None:
                            break
    finally:
        connection.close()
    assert windowed > 100 and fallen_back > 10, (windowed, fallen_back)


def test_windowed_search_plans(db: Path) -> None:
    """
    A window of the walk is read down the received order's index, and the
    full-text index is asked only from the window's smallest C{seq} up; a
    search that is the only filter is counted from the full-text index
    alone, up to the cap; with another filter, it is not.
    """
    from twisted.logger import Logger

    from beacon.store._sql import PageRequest
    from beacon.store._sqlite import migrate
    from beacon.store._sqlite_search import _windowed, search_count

    migrate(str(db), Logger())
    connection = raw(db)

    def plan(query: str, params: list[object]) -> str:
        rows = connection.execute(f"EXPLAIN QUERY PLAN {query}", params).fetchall()
        return "\n".join(row[-1] for row in rows)

    try:
        request = PageRequest(
            TaskQuery(sort=SORT_RECEIVED, search="word"), limit=50,
            after=(T0, 5), search='"word"', total_cap=10_000,
        )
        page, walked, params = _windowed(request)
        shown = plan(page, [*params, 800, '"word"', 51])
        assert "SEARCH s USING COVERING INDEX submissions_by_received (received_at_ms<?)" in shown, shown
        assert f"SCAN {SEARCH_TABLE} VIRTUAL TABLE INDEX 0:M1>" in shown, shown
        assert "SEARCH s USING INTEGER PRIMARY KEY (rowid=?)" in shown, shown
        shown = plan(walked, [*params, 800])
        assert "submissions_by_received" in shown and "TEMP B-TREE" not in shown, shown
        counted = search_count(request)
        assert counted is not None and counted[1] == ['"word"', 10_001]
        shown = plan(*counted)
        assert "submissions" not in shown.replace(SEARCH_TABLE, ""), shown
        assert search_count(
            PageRequest(TaskQuery(search="word", door="native"), limit=50, search='"word"')
        ) is None
        assert search_count(PageRequest(TaskQuery(), limit=50)) is None
        uncapped = search_count(PageRequest(TaskQuery(search="word"), limit=50, search='"word"'))
        assert uncapped is not None and "LIMIT" not in uncapped[0]
    finally:
        connection.close()
