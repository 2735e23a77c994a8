"""
The PostgreSQL backend's own promises, beyond the shared behaviour suite of
C{test_store.py}: the schema (the same in meaning as SQLite's, append-only
in the database but for a purge, one decision per submission, versioned and
migrated under an advisory lock, migration 2 over a version 1 schema with
data, indexes the queries can use), group commit, a purge's VACUUM FULL, several
instances on one database (global seq, one decision wins, each submission
claimed once for notification, live events across instances exactly once,
catch-up after a lost listening connection), broken connections replaced, a
restart of the server (a cluster of the test's own), no password in any log line, and the store URLs
(C{beacon.store._url}) and operator migrations (C{beacon.store._migrate}).

Each test gets a fresh schema of this run's database (see
C{peers.postgres}); everything blocking (a raw connection, a thread
starting a migration, stopping and starting a server) is short or runs off
the reactor thread, and every wait is bounded.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import pytest_twisted
from peers.postgres import (  # noqa: F401 (fixtures)
    PrivateCluster,
    RunDatabase,
    pg_schema,
    pg_url,
    postgresql,
    private_cluster,
)
from store_support import (
    DECIDED_AT,
    T0,
    Heard,
    all_pages,
    assert_each_claimed_once,
    assert_one_decision_wins,
    hold_writer,
    ids,
    newest_first,
    structured,
    submission,
    text,
)
from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.logger import formatEvent

from beacon.store import (
    SORT_RECEIVED,
    SORT_UPDATED,
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    AlreadyDecided,
    PostgreSQLStore,
    StoreError,
    StoreEvent,
    TaskQuery,
    _sqlite,
    open_store,
    parse_store_url,
    schema_status,
    sqlite_url,
    status,
    upgrade,
)
from beacon.store._postgres_connect import redact
from beacon.store._postgres_schema import (
    MIGRATION_LOCK,
    MIGRATIONS,
    SCHEMA_VERSION,
    migrate,
)

reactor = IReactorFromThreads(_reactor)

#: What beacon_schema holds once every migration is applied.
ALL_VERSIONS = [(version,) for version in range(1, SCHEMA_VERSION + 1)]

_T = TypeVar("_T")

#: How long a test polls for something another thread or process does (a
#: safety net for a loaded machine), and how long the store may take to
#: write again once a restarted server accepts connections.
POLL_TIMEOUT = 60.0


def start(url: str, **kwargs: int) -> PostgreSQLStore:
    """A started PostgreSQLStore on C{url}."""
    store = PostgreSQLStore(url, reactor, **kwargs)
    store.startService()
    return store


async def poll(check: Callable[[], _T], what: str, timeout: float = POLL_TIMEOUT) -> _T:
    """
    Call C{check} every 50 ms, without blocking the reactor, until it
    returns something true; fail after C{timeout} seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await deferLater(_reactor, 0.05, lambda: None)


@pytest_twisted.async_yield_fixture
async def stores(pg_url: str) -> AsyncIterator[Callable[..., PostgreSQLStore]]:
    """
    Start PostgreSQLStores on this test's schema; stop whichever still run.
    """
    started: list[PostgreSQLStore] = []

    def make(url: str | None = None, **kwargs: int) -> PostgreSQLStore:
        store = start(url or pg_url, **kwargs)
        started.append(store)
        return store

    yield make
    for store in started:
        if store.running:
            await store.stopService()


# The schema.


def columns_sqlite(path: Path) -> dict[str, list[tuple[str, bool]]]:
    """
    Every table's (column, not null) in order, in a SQLite database, but
    for the full-text index and its watermark (SQLite's index is a table,
    caught up behind the commit; PostgreSQL's an index, kept in the
    inserting transaction).
    """
    connection = sqlite3.connect(str(path))
    try:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' AND name NOT LIKE ?"
                " AND name != ?",
                (f"{_sqlite.SEARCH_TABLE}%", _sqlite.SEARCH_WATERMARK),
            )
        ]
        return {
            table: [
                (row[1], bool(row[3]) or bool(row[5]))
                for row in connection.execute(f"PRAGMA table_info({table})")
            ]
            for table in tables
        }
    finally:
        connection.close()


def test_schema_matches_sqlite(
    postgresql: RunDatabase, pg_schema: tuple[str, str], tmp_path: Path
) -> None:
    """
    Both backends' migrations make the same tables with the same columns
    (in order, with the same NOT NULLs), the same indexes' meaning, and the
    same schema version.
    """
    schema, url = pg_schema
    assert SCHEMA_VERSION == _sqlite.SCHEMA_VERSION
    assert len(MIGRATIONS) == len(_sqlite.MIGRATIONS)
    upgrade(url)
    db = tmp_path / "beacon.sqlite3"
    upgrade(sqlite_url(str(db)))
    with postgresql.connect() as connection:
        rows = connection.execute(
            "SELECT table_name, column_name, is_nullable = 'NO'"
            " FROM information_schema.columns WHERE table_schema = %s"
            " ORDER BY table_name, ordinal_position",
            (schema,),
        ).fetchall()
        indexes = connection.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,)
        ).fetchall()
    pg_tables: dict[str, list[tuple[str, bool]]] = {}
    for table, column, not_null in rows:
        pg_tables.setdefault(table, []).append((column, bool(not_null)))
    # PostgreSQL keeps each submission's search vector in a generated
    # column; SQLite keeps it in its full-text table.
    assert pg_tables["submissions"][-1] == ("search", False)
    pg_tables["submissions"].pop()
    assert pg_tables == columns_sqlite(db)
    assert {"purges", "notify_cursors"} <= set(pg_tables)
    names = {name for (name,) in indexes}
    assert {
        "events_one_decision",
        "submissions_by_context",
        "submissions_by_received",
        "submissions_by_id_prefix",
        "submissions_search",
    } <= names
    sqlite_connection = sqlite3.connect(str(db))
    try:
        sqlite_indexes = {
            name
            for (name,) in sqlite_connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index'"
            )
        }
    finally:
        sqlite_connection.close()
    assert {"events_one_decision", "submissions_by_context", "submissions_by_received"} <= sqlite_indexes


@pytest_twisted.ensureDeferred
async def test_append_only_in_the_database(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    The database itself refuses DELETE and TRUNCATE on submissions, events
    and purges, even when no row matches, and every UPDATE of a row but
    the one a purge makes: a decided submission with a purges row may have
    its content emptied and its decision's note forgotten, and nothing
    else.
    """
    store = stores()
    stored, undecided = submission(1), submission(2)
    await store.append(stored)
    await store.append(undecided)
    await store.decide(stored.id, STATE_COMPLETED, DECIDED_AT, "a note")
    with postgresql.connect(pg_schema[0]) as connection:
        for statement in (
            "UPDATE submissions SET content = '\\x00'",
            "UPDATE submissions SET content = ''",
            "DELETE FROM submissions",
            "DELETE FROM submissions WHERE id = 'none'",
            "TRUNCATE submissions CASCADE",
            "UPDATE events SET state = 'TASK_STATE_SUBMITTED'",
            "UPDATE events SET note = NULL",
            "DELETE FROM events WHERE submission_id = 'none'",
            "TRUNCATE events",
            "DELETE FROM purges WHERE submission_id = 'none'",
            "TRUNCATE purges",
        ):
            with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
                connection.execute(statement)
        # A purges row, but no decision: still refused.
        connection.execute(
            "INSERT INTO purges (submission_id, at_ms) VALUES (%s, %s)",
            (undecided.id, DECIDED_AT + 1),
        )
        with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
            connection.execute(
                "UPDATE submissions SET content = '' WHERE id = %s", (undecided.id,)
            )
        connection.execute(
            "INSERT INTO purges (submission_id, at_ms) VALUES (%s, %s)",
            (stored.id, DECIDED_AT + 1),
        )
        for statement in (
            "UPDATE submissions SET content = '\\x00' WHERE id = %s",
            "UPDATE submissions SET content = '', door = 'x' WHERE id = %s",
            "UPDATE submissions SET sha256 = 'x' WHERE id = %s",
            "UPDATE submissions SET seq = 99 WHERE id = %s",
            "UPDATE events SET note = 'other' WHERE submission_id = %s",
            "UPDATE events SET note = NULL, at_ms = 1 WHERE submission_id = %s",
            "UPDATE purges SET at_ms = 1 WHERE submission_id = %s",
            "DELETE FROM purges WHERE submission_id = %s",
        ):
            with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
                connection.execute(statement, (stored.id,))
        connection.execute("UPDATE submissions SET content = '' WHERE id = %s", (stored.id,))
        connection.execute("UPDATE events SET note = NULL WHERE submission_id = %s", (stored.id,))
    task = await store.get(stored.id)
    assert task is not None
    assert (task.state, task.submission.content, task.note, task.purged_at_ms) == (
        STATE_COMPLETED,
        b"",
        None,
        DECIDED_AT + 1,
    )
    untouched = await store.get(undecided.id)
    assert untouched is not None and untouched.submission == undecided


@pytest_twisted.ensureDeferred
async def test_one_decision_enforced_by_database(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    A unique index on events(submission_id) refuses a second decision,
    whoever writes it, and the foreign key an unknown submission.
    """
    store = stores()
    stored = submission(1)
    await store.append(stored)
    await store.decide(stored.id, STATE_COMPLETED, DECIDED_AT, None)
    with postgresql.connect(pg_schema[0]) as connection:
        with pytest.raises(psycopg.errors.UniqueViolation):
            connection.execute(
                "INSERT INTO events (submission_id, at_ms, state) VALUES (%s, %s, %s)",
                (stored.id, DECIDED_AT + 1, STATE_REJECTED),
            )
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            connection.execute(
                "INSERT INTO events (submission_id, at_ms, state) VALUES (%s, %s, %s)",
                ("receipt-9999", DECIDED_AT, STATE_REJECTED),
            )
        (count,) = connection.execute("SELECT COUNT(*) FROM events").fetchone() or (0,)
    assert count == 1


@pytest_twisted.ensureDeferred
async def test_restart_keeps_data(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    A new store on the same database finds every acknowledged submission
    and decision (content byte for byte) and does not migrate again.
    """
    first = stores()
    stored = [submission(n, content=bytes(range(256)) * 3) for n in range(20)]
    await gatherResults([first.append(s) for s in stored])
    decided = await first.decide(stored[0].id, STATE_COMPLETED, DECIDED_AT, "kept")
    await first.stopService()
    second = stores()
    assert await second.get(stored[0].id) == decided
    got = await gatherResults([second.get(s.id) for s in stored])
    assert [task and task.submission for task in got] == stored
    with pytest.raises(AlreadyDecided):
        await second.decide(stored[0].id, STATE_REJECTED, DECIDED_AT + 1, None)
    with postgresql.connect(pg_schema[0]) as connection:
        versions = connection.execute("SELECT version FROM beacon_schema").fetchall()
    assert versions == ALL_VERSIONS


@pytest_twisted.ensureDeferred
async def test_newer_schema_refuses_start(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    A database whose schema is newer than the code refuses to start with a
    clear StoreError, and beacon db status says so.
    """
    await stores().stopService()
    schema, url = pg_schema
    with postgresql.connect(schema) as connection:
        connection.execute(
            "INSERT INTO beacon_schema VALUES (%s, 0)", (SCHEMA_VERSION + 1,)
        )
    newer = PostgreSQLStore(url, reactor)
    with pytest.raises(StoreError) as caught:
        newer.startService()
    assert str(caught.value).startswith(
        f"database schema version {SCHEMA_VERSION + 1} is newer than this"
        f" Beacon supports ({SCHEMA_VERSION})"
    )
    assert not newer.running
    assert "newer than this Beacon supports" in status(url)
    with pytest.raises(StoreError, match="newer"):
        upgrade(url)


@pytest_twisted.ensureDeferred
async def test_migration_waits_for_the_advisory_lock(
    postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    Start-up migrates under a session advisory lock: while another session
    holds it, the migration waits; once released, it runs, once.
    """
    schema, url = pg_schema
    with postgresql.connect(schema) as holder:
        holder.execute("SELECT pg_advisory_lock(%s, %s)", MIGRATION_LOCK)
        migrating = deferToThread(migrate, url, PostgreSQLStore.log)

        def waiting() -> bool:
            row = holder.execute(
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND NOT granted AND classid = %s AND objid = %s",
                MIGRATION_LOCK,
            ).fetchone()
            return bool(row and row[0])

        await poll(waiting, "the migration to wait for the lock")
        assert not migrating.called
        assert schema_status(url).current == 0
        holder.execute("SELECT pg_advisory_unlock(%s, %s)", MIGRATION_LOCK)
        assert await migrating == (0, SCHEMA_VERSION)
        versions = holder.execute("SELECT version FROM beacon_schema").fetchall()
    assert versions == ALL_VERSIONS


@pytest_twisted.ensureDeferred
async def test_instances_starting_at_once(
    postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    Four instances migrating one fresh database at once: all succeed, and
    each migration is applied and recorded once.
    """
    schema, url = pg_schema
    results = await gatherResults(
        [deferToThread(migrate, url, PostgreSQLStore.log) for _ in range(4)]
    )
    assert sorted(results) == [(0, SCHEMA_VERSION)] + [
        (SCHEMA_VERSION, SCHEMA_VERSION)
    ] * 3
    with postgresql.connect(schema) as connection:
        versions = connection.execute("SELECT version FROM beacon_schema").fetchall()
    assert versions == ALL_VERSIONS


def test_unreachable_database_fails_start() -> None:
    """
    A database that cannot be reached fails start-up with a StoreError
    naming it, without its password.
    """
    url = "postgresql://beacon:hunter2-secret@127.0.0.1:1/beacon?connect_timeout=3"
    store = PostgreSQLStore(url, reactor)
    with pytest.raises(StoreError) as caught:
        store.startService()
    assert "postgresql://beacon@127.0.0.1:1/beacon" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    assert not store.running


def test_bad_sizes() -> None:
    """max_batch and pool_size below one are refused."""
    with pytest.raises(ValueError):
        PostgreSQLStore("postgresql://u@h/db", reactor, max_batch=0)
    with pytest.raises(ValueError):
        PostgreSQLStore("postgresql://u@h/db", reactor, pool_size=0)


# Group commit.


@pytest_twisted.ensureDeferred
async def test_group_commit(stores: Any) -> None:
    """
    200 concurrent appends are committed in fewer transactions than
    appends, and no transaction holds more than max_batch writes.
    """
    store = stores()
    await gatherResults([store.append(submission(n)) for n in range(200)])
    assert 1 <= store.transactions < 200
    small = stores(max_batch=10)
    release = await hold_writer(small)
    appended = [small.append(submission(n + 1000)) for n in range(100)]
    release()
    await gatherResults(appended)
    assert small.transactions == 10


@pytest_twisted.ensureDeferred
async def test_batch_failure_stores_nothing(stores: Any) -> None:
    """
    When one submission of a batch cannot be written, every write of that
    batch fails with StoreError naming no content, none is stored, no
    listener hears of it, and the store keeps working.
    """
    store = stores()
    heard = Heard(store)
    secret = b'{"text":"do not log or echo me"}'
    await store.append(submission(0))
    release = await hold_writer(store)
    doomed = [
        store.append(submission(1, content=secret)),
        store.decide(submission(0).id, STATE_COMPLETED, DECIDED_AT, None),
        store.append(submission(2, id="receipt-0001")),  # the same id
    ]
    release()
    for answer in doomed:
        with pytest.raises(StoreError) as caught:
            await answer
        assert "do not log" not in str(caught.value)
    assert await store.get(submission(1).id) is None
    task = await store.get(submission(0).id)
    assert task is not None and task.state == STATE_SUBMITTED
    assert store.transactions == 1
    await store.append(submission(3))
    assert await heard.count(2) == [
        StoreEvent("submitted", submission(0).id),
        StoreEvent("submitted", submission(3).id),
    ]


@pytest_twisted.ensureDeferred
async def test_unstorable_text_fails_alone(stores: Any) -> None:
    """
    A submission whose message id holds a NUL character (which PostgreSQL's
    TEXT cannot hold) fails alone with StoreError; the writes around it are
    stored; ids no row can have are simply unknown.
    """
    store = stores()
    alone = store.append(submission(0))
    good = store.append(submission(1))
    bad = submission(2)
    bad = replace(bad, message_id="a\x00b")
    with pytest.raises(StoreError, match="message_id"):
        await store.append(bad)
    await alone
    await good
    assert await store.get(submission(1).id) is not None
    assert await store.get("a\x00b") is None
    assert await store.status("a\x00b") is None
    assert await store.decide("a\x00b", STATE_COMPLETED, DECIDED_AT, None) is None
    page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED, context_id="\x00"), limit=5)
    assert (page.tasks, page.total) == ([], 0)
    with pytest.raises(StoreError, match="note"):
        await store.decide(submission(1).id, STATE_COMPLETED, DECIDED_AT, "\x00")


# Several instances on one database.


@pytest_twisted.ensureDeferred
async def test_seq_is_global_across_instances(stores: Any) -> None:
    """
    Two instances appending in turn number their submissions from one
    database sequence: seqs are distinct and grow in commit order, and both
    list the same pages in the same order.
    """
    one, two = stores(), stores()
    appended = []
    for n in range(12):
        s = submission(n, received_at_ms=T0 + n // 4)
        await (one if n % 2 else two).append(s)
        appended.append(s)
    got = [await one.get(s.id) for s in appended]
    seqs = [task.seq for task in got if task is not None]
    assert seqs == sorted(seqs) and len(set(seqs)) == 12
    from_one, _ = await all_pages(one, 5)
    from_two, _ = await all_pages(two, 5)
    assert ids(from_one) == ids(from_two) == newest_first(appended, {})


@pytest_twisted.ensureDeferred
async def test_two_instances_decide_at_once(stores: Any) -> None:
    """
    Two instances deciding the same tasks at once: for each, exactly one
    wins, the other fails with AlreadyDecided, and both read the winner.
    """
    one, two = stores(), stores()
    for n in range(5):
        await one.append(submission(n))
    await assert_one_decision_wins(one, two)


@pytest_twisted.ensureDeferred
async def test_events_reach_every_instance_once(stores: Any) -> None:
    """
    Every instance's listeners hear every instance's commits, their own
    included, each exactly once, in one and the same commit order; a
    stopped store has delivered everything committed before it stopped.
    """
    one, two = stores(), stores()
    heard_one, heard_two = Heard(one), Heard(two)
    writes: list[Deferred[Any]] = []
    for n in range(10):
        writes.append((one if n % 3 else two).append(submission(n)))
    await gatherResults(writes)
    await one.decide(submission(4).id, STATE_REJECTED, DECIDED_AT, None)
    await two.decide(submission(5).id, STATE_COMPLETED, DECIDED_AT, None)
    await heard_one.count(12)
    await heard_two.count(12)
    await one.stopService()
    await two.stopService()
    assert heard_one.events == heard_two.events
    assert len(heard_one.events) == 12
    assert sorted(e.task_id for e in heard_one.events if e.kind == "submitted") == [
        submission(n).id for n in range(10)
    ]
    assert heard_one.events[-2:] == [
        StoreEvent("decided", submission(4).id),
        StoreEvent("decided", submission(5).id),
    ]


@pytest_twisted.ensureDeferred
async def test_stop_delivers_what_was_committed(stores: Any) -> None:
    """
    stopService fires only after every write made before it is committed
    and answered and its event delivered to the listeners.
    """
    store = stores()
    order: list[str] = []
    store.subscribe(lambda event: order.append(f"heard {event.kind}"))
    await store.append(submission(1))
    decided = store.decide(submission(1).id, STATE_COMPLETED, DECIDED_AT, None)
    decided.addCallback(lambda _: order.append("decided"))
    appended = store.append(submission(2))
    stopped = store.stopService()
    stopped.addCallback(lambda _: order.append("stopped"))
    await stopped
    await appended
    assert sorted(order[:-1]) == sorted(
        ["heard submitted", "decided", "heard decided", "heard submitted"]
    )
    assert order[-1] == "stopped"
    with pytest.raises(StoreError):
        await store.append(submission(3))
    with pytest.raises(StoreError):
        await store.get(submission(1).id)


@pytest_twisted.ensureDeferred
async def test_foreign_notification_ignored(
    stores: Any, postgresql: RunDatabase, logged_events: Any
) -> None:
    """
    A notification on beacon_events that Beacon did not send is logged
    (without its payload) and ignored; real events still arrive.
    """
    store = stores()
    heard = Heard(store)
    with postgresql.connect() as connection:
        connection.execute("SELECT pg_notify('beacon_events', 'drop table me')")
    await store.append(submission(1))
    assert await heard.count(1) == [StoreEvent("submitted", submission(1).id)]
    ignored = logged_events.named("store.notification_ignored")
    assert len(ignored) == 1
    assert "drop table" not in formatEvent(ignored[0])


@pytest_twisted.ensureDeferred
async def test_two_instances_claim_once(stores: Any) -> None:
    """
    Two instances claiming one notification channel at once: each
    submission is claimed, and finished, by exactly one of them, in seq
    order.
    """
    await assert_each_claimed_once(stores(), stores(), 12)


@pytest_twisted.ensureDeferred
async def test_claim_waits_for_a_concurrent_claim(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    A claim made while another session holds the channel's row waits for
    it and then sees that session's lease: the row lock, not luck, keeps
    two holders apart.
    """
    store = stores()
    assert await store.claim_notifications("command", "a", T0, 60_000, 10) is None
    await store.append(submission(1))
    with postgresql.connect(pg_schema[0]) as other:
        with other.transaction():
            other.execute(
                "SELECT 1 FROM notify_cursors WHERE channel = 'command' FOR UPDATE"
            )
            claiming = store.claim_notifications("command", "a", T0, 60_000, 10)

            def waiting() -> bool:
                row = other.execute(
                    "SELECT COUNT(*) FROM pg_locks WHERE NOT granted"
                    " AND locktype = 'transactionid'"
                ).fetchone()
                return bool(row and row[0])

            await poll(waiting, "the claim to wait for the row lock")
            assert not claiming.called
            other.execute(
                "UPDATE notify_cursors SET holder = 'b', lease_until_ms = %s"
                " WHERE channel = 'command'",
                (T0 + 60_000,),
            )
    assert await claiming is None


@pytest_twisted.ensureDeferred
async def test_purge_rewrites(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str], logged_events: Any
) -> None:
    """
    A purge (not a dry run, and only when it purged something) rewrites
    submissions and events afterwards (VACUUM FULL: each gets a new file,
    as do its TOAST relation and its indexes), and is logged with its
    count. (test_store_erasure.py reads the files.)
    """
    store = stores()
    for n in range(3):
        await store.append(submission(n))
    await store.decide(submission(0).id, STATE_COMPLETED, DECIDED_AT, "note")

    def files() -> list[str]:
        with postgresql.connect(pg_schema[0]) as connection:
            rows = connection.execute(
                "SELECT pg_relation_filepath(c.oid) FROM pg_class AS c"
                " WHERE c.oid IN ('submissions'::regclass, 'events'::regclass,"
                " 'submissions_search'::regclass)"
                " OR c.oid = (SELECT reltoastrelid FROM pg_class"
                " WHERE oid = 'submissions'::regclass)"
                " ORDER BY c.relname",
            ).fetchall()
        return [path for (path,) in rows]

    before = files()
    assert len(before) == 4
    assert await store.purge(DECIDED_AT + 1, DECIDED_AT + 2, dry_run=True) == 1
    assert await store.purge(DECIDED_AT, DECIDED_AT + 2) == 0
    assert files() == before
    assert [e["count"] for e in logged_events.named("store.purged")] == [0]
    assert await store.purge(DECIDED_AT + 1, DECIDED_AT + 2) == 1
    after = files()
    assert len(after) == 4 and not set(after) & set(before)
    assert [e["count"] for e in logged_events.named("store.purged")] == [0, 1]
    task = await store.get(submission(0).id)
    assert task is not None and (task.submission.content, task.note) == (b"", None)


@pytest_twisted.ensureDeferred
async def test_a_purge_whose_rewrite_fails_is_made_and_says_so(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    A rewrite that fails (here its connection is ended while VACUUM FULL
    waits for a reader's lock on events) fails the purge, saying that the
    purge was made, that the tables were not rewritten and what rewrites
    them; the purge stands, and the store goes on with a new connection.
    """
    store = stores()
    await store.append(submission(0))
    await store.decide(submission(0).id, STATE_COMPLETED, DECIDED_AT, "note")
    with postgresql.connect(pg_schema[0]) as other:
        with other.transaction():
            other.execute("LOCK TABLE events IN ACCESS SHARE MODE")
            purging = store.purge(DECIDED_AT + 1, DECIDED_AT + 2)

            def rewriting() -> int | None:
                # pg_locks, unlike pg_stat_activity, is read anew inside a transaction.
                row = other.execute(
                    "SELECT pid FROM pg_locks WHERE NOT granted"
                    " AND relation = 'events'::regclass AND mode = 'AccessExclusiveLock'"
                ).fetchone()
                return int(row[0]) if row else None

            pid = await poll(rewriting, "the rewrite to wait for the lock on events")
            assert not purging.called
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
            with pytest.raises(StoreError) as failed:
                await purging
    message = str(failed.value)
    assert message.startswith("purged 1 submission(s) in "), message
    assert "but could not rewrite its tables (VACUUM FULL): " in message, message
    assert message.endswith(
        "; the erased content stays in the table files until VACUUM FULL submissions, events is run"
    ), message
    task = await store.get(submission(0).id)
    assert task is not None and task.purged_at_ms == DECIDED_AT + 2
    assert (task.submission.content, task.note) == (b"", None)
    await store.append(submission(1))
    assert await store.get(submission(1).id) is not None


def version_1_schema(postgresql: RunDatabase, schema: str, appended: list[Any]) -> None:
    """
    A schema as a Beacon of schema version 1 left it: migration 1 only,
    C{appended} stored, the first one decided with a note.
    """
    with postgresql.connect(schema) as connection:
        with connection.transaction():
            connection.execute(
                "CREATE TABLE beacon_schema ("
                "version INTEGER NOT NULL, applied_at_ms BIGINT NOT NULL)"
            )
            for statement in MIGRATIONS[0]:
                connection.execute(statement)
            connection.execute("INSERT INTO beacon_schema VALUES (1, 0)")
            for s in appended:
                connection.execute(
                    "INSERT INTO submissions (id, context_id, received_at_ms, door,"
                    " source, kind, message_id, content, sha256)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (s.id, s.context_id, s.received_at_ms, s.door, s.source,
                     s.kind, s.message_id, s.content, s.sha256),
                )
            connection.execute(
                "INSERT INTO events (submission_id, state, at_ms, note)"
                " VALUES (%s, %s, %s, %s)",
                (appended[0].id, STATE_REJECTED, DECIDED_AT, "old note"),
            )


@pytest_twisted.ensureDeferred
async def test_upgrade_from_version_1(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    A version 1 schema with data (content that is no JSON, or no UTF-8,
    included) is migrated at start-up: the rows stored before are
    searchable, listed in the received order and purgeable, and the new
    guards hold.
    """
    schema, _ = pg_schema
    appended = [
        submission(0, content=text("an old oldword submission"), received_at_ms=T0 + 5),
        submission(1, content=structured("Old Sender", "Oldsubject", "old body"), received_at_ms=T0 + 9),
        submission(2, content=b"not json at all oldword", received_at_ms=T0 + 1),
        submission(3, content=bytes(range(256)), received_at_ms=T0 + 7),
        submission(4, content=b'["oldword"]', received_at_ms=T0 + 3),
    ]
    version_1_schema(postgresql, schema, appended)
    store = stores()
    a = [s.id for s in appended]
    assert ids((await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="oldword"), limit=10)).tasks) == [a[0]]
    assert ids((await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="sender oldsubject"), limit=10)).tasks) == [a[1]]
    received = await store.list_tasks(TaskQuery(sort=SORT_RECEIVED), limit=10)
    assert [t.submission for t in received.tasks] == [appended[i] for i in (1, 3, 0, 4, 2)]
    await store.append(submission(5, content=text("a new oldword")))
    assert (await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="oldword"), limit=10)).total == 2
    assert await store.purge(DECIDED_AT + 1, DECIDED_AT + 2) == 1
    task = await store.get(a[0])
    assert task is not None
    assert (task.submission.content, task.note, task.purged_at_ms) == (b"", None, DECIDED_AT + 2)
    assert ids((await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="oldword"), limit=10)).tasks) == [submission(5).id]
    with postgresql.connect(schema) as connection:
        assert connection.execute(
            "SELECT version FROM beacon_schema ORDER BY version"
        ).fetchall() == ALL_VERSIONS
        with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
            connection.execute("UPDATE submissions SET content = '' WHERE id = %s", (a[1],))
        # Migration 4: the status order's index, over the old decision too.
        assert connection.execute(
            "SELECT indexdef LIKE '%%(at_ms)' FROM pg_indexes"
            " WHERE indexname = 'events_by_time' AND schemaname = %s",
            (schema,),
        ).fetchall() == [(True,)]
    updated = await store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=10)
    assert [t.submission.id for t in updated.tasks][0] == a[0]


def test_queries_can_use_the_indexes(
    postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    The queries are spelled so that the indexes serve them: with sequential
    scans (and, for the received order, sorts) made as dear as PostgreSQL
    allows, the received order walks its index, an id prefix and a search
    use theirs.
    """
    from beacon.store._postgres import DIALECT
    from beacon.store._sql import PageRequest

    schema, url = pg_schema
    upgrade(url)

    def plan(request: PageRequest, count: bool = False) -> str:
        query, params = (
            DIALECT.count_query(request) if count else DIALECT.page_query(request)
        )
        with postgresql.connect(schema) as connection:
            connection.execute("SET enable_seqscan = off")
            if request.query.id_prefix is None and request.search is None:
                connection.execute("SET enable_sort = off")
            rows = connection.execute(f"EXPLAIN {query}", params).fetchall()
        return "\n".join(row[0] for row in rows)

    first = plan(PageRequest(TaskQuery(sort=SORT_RECEIVED), limit=50))
    assert "Index Scan Backward using submissions_by_received" in first, first
    after = plan(PageRequest(TaskQuery(sort=SORT_RECEIVED), limit=50, after=(T0, 5)))
    assert "submissions_by_received" in after and "Index Cond" in after, after
    for count in (False, True):
        prefix = plan(PageRequest(TaskQuery(sort=SORT_RECEIVED, id_prefix="0ab1c2"), limit=50), count)
        assert "submissions_by_id_prefix" in prefix, prefix
        search = plan(
            PageRequest(TaskQuery(sort=SORT_UPDATED, search="word"), limit=50, search="word"), count
        )
        assert "submissions_search" in search, search
    # The status order merges two index walks, the undecided down the
    # received index and the decisions down events_by_time (an
    # incremental sort of a decision time's ties only); a status keeps
    # the one it needs. Nothing sorts the whole table.
    for status in (None, STATE_SUBMITTED, STATE_REJECTED):
        for after in (None, (T0, 5)):
            updated = plan(PageRequest(TaskQuery(sort=SORT_UPDATED, status=status), limit=50, after=after))
            assert ("submissions_by_received" in updated) == (status != STATE_REJECTED), updated
            assert ("events_by_time" in updated) == (status != STATE_SUBMITTED), updated
            assert "Seq Scan" not in updated, updated
    for status in (STATE_SUBMITTED, STATE_REJECTED):
        received = plan(PageRequest(TaskQuery(sort=SORT_RECEIVED, status=status), limit=50))
        assert "Index Scan Backward using submissions_by_received" in received, received
    # The submitted state is having no decision (an anti join, which the
    # planner counts right, not a filter it takes for one row in 200); a
    # decided state's count reads the decisions alone.
    submitted = plan(PageRequest(TaskQuery(sort=SORT_RECEIVED, status=STATE_SUBMITTED), limit=50))
    assert "Anti Join" in submitted and "COALESCE" not in submitted, submitted
    rejected = plan(PageRequest(TaskQuery(status=STATE_REJECTED), limit=50, total_cap=10), True)
    assert "events" in rejected and "submissions" not in rejected, rejected


def test_search_never_runs_in_parallel_workers(
    postgresql: RunDatabase, pg_schema: tuple[str, str]
) -> None:
    """
    The search text function catches bad content in a subtransaction,
    which a parallel worker may not start: it is not parallel safe, so a
    search that reads every row (here the planner is pushed to a parallel
    sequential scan) still answers.
    """
    from beacon.store._postgres import DIALECT
    from beacon.store._sql import PageRequest

    schema, url = pg_schema
    upgrade(url)
    with postgresql.connect(schema) as connection:
        connection.execute(
            "INSERT INTO submissions (id, context_id, received_at_ms, door, source,"
            " kind, message_id, content, sha256)"
            " SELECT 'id' || n, 'c', n, 'd', 's', 'text', 'm',"
            " convert_to('{\"text\":\"word ' || n || '\"}', 'UTF8'), 'x'"
            " FROM generate_series(1, 2000) AS n"
        )
        connection.execute("ANALYZE submissions")
        for setting in (
            "parallel_setup_cost = 0",
            "parallel_tuple_cost = 0",
            "min_parallel_table_scan_size = 0",
            "max_parallel_workers_per_gather = 2",
            "enable_bitmapscan = off",
            "enable_indexscan = off",
        ):
            connection.execute(f"SET {setting}")
        query, params = DIALECT.count_query(
            PageRequest(TaskQuery(sort=SORT_UPDATED, search="word"), limit=1, search="word")
        )
        assert connection.execute(query, params).fetchone() == (2000,)
        (volatility, parallel, cost) = connection.execute(
            "SELECT provolatile, proparallel, procost FROM pg_proc"
            " WHERE proname = 'beacon_search_text'"
        ).fetchone() or (None, None, None)
    assert (volatility, parallel, cost) == ("i", "u", 1000)


def test_readers_plan_for_the_parameters(pg_url: str) -> None:
    """
    A reader session plans every statement for its own parameters, also
    one prepared and run again and again (as psycopg prepares a statement
    run five times): the best plan of a list depends on them (a word in
    most submissions, or in a few), which a plan made once for any
    parameters cannot tell apart.
    """
    import psycopg

    from beacon.store._postgres import DIALECT, _as_reader
    from beacon.store._postgres_connect import conninfo, session
    from beacon.store._sql import PageRequest

    upgrade(pg_url)
    query, params = DIALECT.count_query(
        PageRequest(TaskQuery(search="word"), limit=50, search="word", total_cap=10)
    )
    plans = "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
    planned = {}
    for name, setup in (("reader", _as_reader), ("default", lambda connection: None)):
        connection: psycopg.Connection[Any] = session(conninfo(pg_url), setup)
        try:
            for _ in range(12):
                assert connection.execute(query, params, prepare=True).fetchone() == (0,)
            [planned[name]] = connection.execute(plans).fetchall()
        finally:
            connection.close()
    # PostgreSQL's default would have planned it once for any parameters.
    assert planned["reader"] == (0, 12) and planned["default"][0] > 0, planned


# Lost connections and a lost server.


def terminate(run: RunDatabase, where: str, *args: object) -> int:
    """
    Terminate the server processes matching C{where} (on
    pg_stat_activity), waiting until they are gone; return how many.
    """
    with run.admin() as connection:
        rows = connection.execute(
            f"SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            f" WHERE pid <> pg_backend_pid() AND {where}",
            args,
        ).fetchall()
    return len(rows)


@pytest_twisted.ensureDeferred
async def test_broken_connections_are_replaced(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str], logged_events: Any
) -> None:
    """
    When the server ends every connection of a store, the next reads and
    writes succeed on new connections, the listening connection comes back
    and nothing committed is missed or heard twice.
    """
    store = stores()
    heard = Heard(store)
    await store.append(submission(1))
    assert await store.get(submission(1).id) is not None
    await heard.count(1)
    assert terminate(postgresql, "application_name = %s", pg_schema[0]) >= 3
    await store.append(submission(2))
    task = await store.get(submission(2).id)
    assert task is not None
    await store.decide(submission(2).id, STATE_COMPLETED, DECIDED_AT, None)
    await heard.count(3)
    await store.stopService()
    assert heard.events == [
        StoreEvent("submitted", submission(1).id),
        StoreEvent("submitted", submission(2).id),
        StoreEvent("decided", submission(2).id),
    ]
    assert logged_events.named("store.connection_lost")
    assert logged_events.named("store.reconnected")
    assert logged_events.named("store.listen_lost")
    assert logged_events.named("store.listen_reconnected")


@pytest_twisted.ensureDeferred
async def test_listen_catches_up_after_reconnecting(
    stores: Any, postgresql: RunDatabase, pg_schema: tuple[str, str], logged_events: Any
) -> None:
    """
    While an instance's listening connection is down (and cannot come
    back: the database refuses new connections), writes of that instance
    and of another commit without reaching its listeners; once it
    reconnects, a catch-up read delivers them, in commit order, once.
    """
    one, two = stores(), stores()
    heard = Heard(one)
    await one.append(submission(1))
    await two.append(submission(2))
    await heard.count(2)
    pid = one.listen_backend_pid
    assert pid is not None
    postgresql.set_connections_allowed(False)
    try:
        assert terminate(postgresql, "pid = %s", pid) == 1
        await one.append(submission(3))  # the writers' connections stay
        await two.append(submission(4))
        await two.decide(submission(1).id, STATE_REJECTED, DECIDED_AT, None)
        await poll(
            lambda: logged_events.named("store.listen_failed"),
            "the listening connection to fail to come back",
        )
        assert len(heard.events) == 2
        assert one.caught_up == 0
    finally:
        postgresql.set_connections_allowed(True)
    await heard.count(5)
    await one.stopService()
    assert heard.events == [
        StoreEvent("submitted", submission(1).id),
        StoreEvent("submitted", submission(2).id),
        StoreEvent("submitted", submission(3).id),
        StoreEvent("submitted", submission(4).id),
        StoreEvent("decided", submission(1).id),
    ]
    assert one.caught_up == 3
    [reconnected] = logged_events.named("store.listen_reconnected")
    assert reconnected["count"] == 3


@pytest_twisted.ensureDeferred
async def test_server_restart(
    stores: Any, private_cluster: PrivateCluster, logged_events: Any
) -> None:
    """
    PostgreSQL stopped and started again under a running store: every
    acknowledged submission survives; writes and reads while it is down
    fail with StoreError (no receipt); afterwards writes succeed and the
    listening connection recovers, delivering every commit exactly once.

    The server is a cluster of this test's own, so that stopping it ends
    no other test run's connections.
    """
    store = stores(private_cluster.url)
    heard = Heard(store)
    before = [submission(n) for n in range(5)]
    await gatherResults([store.append(s) for s in before])
    await heard.count(5)
    try:
        await deferToThread(private_cluster.stop)
        with pytest.raises(StoreError):
            await store.append(submission(5))
        with pytest.raises(StoreError):
            await store.get(before[0].id)
        with pytest.raises(StoreError):
            await store.decide(before[0].id, STATE_COMPLETED, DECIDED_AT, None)
    finally:
        await deferToThread(private_cluster.start)
    # start returned once the server accepts connections: the next append
    # opens a new connection and succeeds.
    after = submission(6)
    await store.append(after)
    got = await gatherResults([store.get(s.id) for s in before + [after]])
    assert [task and task.submission for task in got] == before + [after]
    assert await store.get(submission(5).id) is None
    await heard.count(6)
    await store.stopService()
    assert heard.events == [StoreEvent("submitted", s.id) for s in before + [after]]
    assert logged_events.named("store.listen_reconnected")


# Passwords.


@pytest_twisted.ensureDeferred
async def test_password_never_logged(
    postgresql: RunDatabase, pg_url: str, logged_events: Any
) -> None:
    """
    A password in the URL (trust authentication ignores it) appears in no
    log event, message or repr; the URL is logged without it.
    """
    secret = "s3cret-Pa55word"
    url = pg_url.replace("://postgres@", f"://postgres:{secret}@")
    assert secret in url
    store = start(url)
    await store.append(submission(1))
    await store.get(submission(1).id)
    await store.stopService()
    texts = [formatEvent(event) for event in logged_events.events]
    assert any(text.startswith("store.opened: ") for text in texts)
    assert not [text for text in texts if secret in text]
    assert secret not in repr(store) and secret not in store.url
    assert secret not in status(url) and secret not in upgrade(url)


@pytest.mark.parametrize(
    "url, shown",
    [
        (
            "postgresql://beacon:pw@db.example:5433/beacon",
            "postgresql://beacon@db.example:5433/beacon",
        ),
        (
            "postgres://beacon:p%40ss@h1:5432,h2:5432/beacon?sslmode=require",
            "postgres://beacon@h1:5432,h2:5432/beacon?sslmode=require",
        ),
        (
            "postgresql://beacon@h/db?password=pw&sslpassword=x&application_name=b",
            "postgresql://beacon@h/db?application_name=b",
        ),
        ("postgresql:///beacon", "postgresql:///beacon"),
        ("host=h user=beacon password=pw dbname=db", "user=beacon dbname=db host=h"),
    ],
)
def test_redact(url: str, shown: str) -> None:
    """redact removes every password from a URL or connection string."""
    assert redact(url) == shown


# Store URLs and operator migrations.


@pytest.mark.parametrize(
    "url, backend, location",
    [
        ("sqlite:///beacon-data/beacon.sqlite3", "sqlite", "beacon-data/beacon.sqlite3"),
        ("sqlite:////var/lib/beacon/db.sqlite3", "sqlite", "/var/lib/beacon/db.sqlite3"),
        ("postgresql://beacon@db:5432/beacon", "postgresql", "postgresql://beacon@db:5432/beacon"),
        ("postgres://beacon@db/beacon", "postgresql", "postgres://beacon@db/beacon"),
    ],
)
def test_parse_store_url(url: str, backend: str, location: str) -> None:
    """sqlite:/// URLs name a file (a fourth slash: absolute), postgresql:// a server."""
    parsed = parse_store_url(url)
    assert (parsed.backend, parsed.location) == (backend, location)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "beacon.sqlite3",
        "sqlite://beacon.sqlite3",
        "sqlite:///",
        "sqlite:///dir/",
        "mysql://beacon@db/beacon",
        "postgresql://beacon:pw-secret@db/beacon?nosuch=1",
        "postgresql://beacon:pw-secret@[::1/beacon",
        "postgresql://beacon@db/beacon?password=pw-secret&nosuch=1",
    ],
)
def test_bad_store_urls(url: str) -> None:
    """Anything else is a ValueError whose message holds no password."""
    with pytest.raises(ValueError) as caught:
        parse_store_url(url)
    assert "pw-secret" not in str(caught.value)


@pytest.mark.parametrize(
    "path", ["beacon.sqlite3", "/abs/b.sqlite3", "a dir/50%?#/b.sqlite3", "/x/%41"]
)
def test_sqlite_url_round_trip(path: str) -> None:
    """sqlite_url names any path, and parse_store_url gives it back."""
    assert parse_store_url(sqlite_url(path)).location == path


def test_open_store_picks_the_backend(tmp_path: Path) -> None:
    """open_store makes the store a URL names, not started."""
    sqlite_store = open_store(sqlite_url(str(tmp_path / "b.sqlite3")), reactor)
    assert isinstance(sqlite_store, _sqlite.SQLiteStore)
    assert sqlite_store.path == str(tmp_path / "b.sqlite3")
    pg_store = open_store("postgresql://beacon:pw@db/beacon", reactor)
    assert isinstance(pg_store, PostgreSQLStore)
    assert pg_store.url == "postgresql://beacon@db/beacon"
    assert not sqlite_store.running and not pg_store.running


def test_upgrade_and_status_sqlite(tmp_path: Path) -> None:
    """
    status reads a SQLite database without creating it; upgrade migrates
    it as start-up would, once.
    """
    path = tmp_path / "data" / "beacon.sqlite3"
    url = sqlite_url(str(path))
    assert status(url) == (
        f"{url}: schema version 0, {SCHEMA_VERSION} migration(s) to apply to"
        f" reach version {SCHEMA_VERSION} (beacon db upgrade, or any Beacon's"
        " start-up)"
    )
    assert not path.exists()
    assert upgrade(url) == f"{url}: schema version 0 -> {SCHEMA_VERSION}"
    assert upgrade(url) == f"{url}: schema version {SCHEMA_VERSION}, up to date"
    assert status(url) == f"{url}: schema version {SCHEMA_VERSION}, up to date"
    assert schema_status(url).pending == 0


def test_upgrade_and_status_postgresql(pg_url: str) -> None:
    """
    status reads a PostgreSQL database without changing it; upgrade
    migrates it once; both name it without a password.
    """
    shown = redact(pg_url)
    assert schema_status(pg_url).current == 0
    assert status(pg_url).startswith(
        f"{shown}: schema version 0, {SCHEMA_VERSION} migration(s)"
    )
    assert schema_status(pg_url).current == 0
    assert upgrade(pg_url) == f"{shown}: schema version 0 -> {SCHEMA_VERSION}"
    assert upgrade(pg_url) == f"{shown}: schema version {SCHEMA_VERSION}, up to date"
    assert status(pg_url) == f"{shown}: schema version {SCHEMA_VERSION}, up to date"


def test_upgrade_and_status_errors() -> None:
    """A bad URL or an unreachable database is a StoreError."""
    with pytest.raises(StoreError, match="a store URL is"):
        status("mysql://x@y/z")
    with pytest.raises(StoreError, match="cannot connect"):
        upgrade("postgresql://x:pw@127.0.0.1:1/z?connect_timeout=3")


def test_config_store_url(tmp_path: Path) -> None:
    """
    [store] url and --store reach the Config (the command line wins); a
    bad URL is a usage error before anything starts.
    """
    from twisted.python import usage

    from beacon.config import ConfigError, build_config
    from beacon.service import check_config, store_url
    from beacon.tap import Options

    config = build_config({"store": {"url": "postgresql://b@db/b"}}, data_dir="d")
    assert config.store_url == "postgresql://b@db/b"
    assert store_url(config) == "postgresql://b@db/b"
    default = build_config(data_dir=str(tmp_path))
    assert default.store_url is None
    assert store_url(default) == sqlite_url(str(tmp_path / "beacon.sqlite3"))
    with pytest.raises(ConfigError, match="store URL"):
        check_config(build_config({"store": {"url": "mysql://x"}}))
    with pytest.raises(ConfigError, match=r"\[store\] url must be a string, not a whole number"):
        build_config({"store": {"url": 5}})
    options = Options()
    config_file = tmp_path / "beacon.toml"
    config_file.write_text('[store]\nurl = "sqlite:///from-file.sqlite3"\n')
    options.parseOptions(
        ["--config", str(config_file), "--store", "postgresql://b:pw@db/b"]
    )
    assert options.config is not None
    assert options.config.store_url == "postgresql://b:pw@db/b"
    with pytest.raises(usage.UsageError) as caught:
        Options().parseOptions(["--store", "postgresql://b:pw-secret@[db/b"])
    assert "pw-secret" not in str(caught.value)
