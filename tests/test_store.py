"""
The submission store: one behaviour suite over SQLiteStore and MemoryStore,
and the SQLite backend's own promises (group commit, durability settings,
schema versioning, append-only triggers, orderly stop).

SQLiteStore runs its thread pools against the real global reactor that
pytest-twisted runs; tests wait on Deferreds, never on time.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor as _reactor
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.defer import gatherResults
from twisted.python.filepath import FilePath
from zope.interface.verify import verifyObject

from beacon.store import (
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    ISubmissionStore,
    SQLiteStore,
    StoreError,
    Submission,
    TaskStatusRecord,
)
from beacon.store._sqlite import SCHEMA_VERSION
from beacon.testing import MemoryStore

reactor = IReactorFromThreads(_reactor)

Store = SQLiteStore | MemoryStore


def submission(
    n: int, *, id: str | None = None, content: bytes | None = None
) -> Submission:
    """
    A distinct, well-formed submission numbered C{n}.
    """
    if content is None:
        content = b'{"text":"submission %d"}' % (n,)
    return Submission(
        id=id if id is not None else f"receipt-{n:04d}",
        context_id=f"context-{n:04d}",
        received_at_ms=1_700_000_000_000 + n,
        door="a2a-jsonrpc",
        source="192.0.2.1",
        kind="text",
        message_id=f"message-{n}",
        content=content,
        sha256=hashlib.sha256(content).hexdigest(),
    )


def open_store(path: Path, **kwargs: int) -> SQLiteStore:
    """
    A started SQLiteStore on C{path}.
    """
    store = SQLiteStore(str(path), reactor, **kwargs)
    store.startService()
    return store


def raw(path: Path) -> sqlite3.Connection:
    """
    A plain connection to the database, bypassing the store.
    """
    return sqlite3.connect(str(path), isolation_level=None)


def record_decision(
    store: Store, db: Path, receipt_id: str, state: str, at_ms: int
) -> None:
    """
    Append a review event the way each backend keeps them (the store
    interface cannot record decisions yet).
    """
    if isinstance(store, MemoryStore):
        store.append_decision(receipt_id, state, at_ms, "note")
        return
    connection = raw(db)
    try:
        connection.execute(
            "INSERT INTO events (submission_id, at_ms, state, note)"
            " VALUES (?, ?, ?, ?)",
            (receipt_id, at_ms, state, "note"),
        )
    finally:
        connection.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """
    Where the SQLite database lives.
    """
    return tmp_path / "data" / "beacon.sqlite"


@pytest_twisted.async_yield_fixture(params=["sqlite", "memory"])
async def store(request: pytest.FixtureRequest, db: Path) -> AsyncIterator[Store]:
    """
    Each backend, started; SQLite is stopped afterwards.
    """
    if request.param == "memory":
        yield MemoryStore()
        return
    sqlite_store = open_store(db)
    yield sqlite_store
    if sqlite_store.running:
        await sqlite_store.stopService()


@pytest_twisted.async_yield_fixture
async def sqlite_store(db: Path) -> AsyncIterator[SQLiteStore]:
    """
    A started SQLiteStore, stopped afterwards.
    """
    started = open_store(db)
    yield started
    if started.running:
        await started.stopService()


# The behaviour every backend shares.


def test_provides_interface(store: Store) -> None:
    """
    Every backend provides ISubmissionStore.
    """
    assert verifyObject(ISubmissionStore, store)


@pytest_twisted.ensureDeferred
async def test_append_then_status(store: Store) -> None:
    """
    A stored submission is submitted, as of its receipt, with its context.
    """
    stored = submission(1)
    await store.append(stored)
    assert await store.status(stored.id) == TaskStatusRecord(
        id=stored.id,
        context_id=stored.context_id,
        state=STATE_SUBMITTED,
        updated_at_ms=stored.received_at_ms,
    )


@pytest_twisted.ensureDeferred
async def test_unknown_id(store: Store) -> None:
    """
    An id no submission has has no status.
    """
    await store.append(submission(1))
    assert await store.status("receipt-9999") is None
    assert await store.status("") is None


@pytest_twisted.ensureDeferred
async def test_state_from_newest_event(store: Store, db: Path) -> None:
    """
    A task's state and update time come from its newest event, and a task
    without events stays submitted.
    """
    decided, untouched = submission(1), submission(2)
    await store.append(decided)
    await store.append(untouched)
    record_decision(store, db, decided.id, STATE_REJECTED, 1_800_000_000_000)
    record_decision(store, db, decided.id, STATE_COMPLETED, 1_800_000_000_500)
    status = await store.status(decided.id)
    assert status is not None
    assert (status.state, status.updated_at_ms) == (STATE_COMPLETED, 1_800_000_000_500)
    status = await store.status(untouched.id)
    assert status is not None
    assert (status.state, status.updated_at_ms) == (
        STATE_SUBMITTED,
        untouched.received_at_ms,
    )


@pytest_twisted.ensureDeferred
async def test_duplicate_id_fails(store: Store) -> None:
    """
    A second submission with a stored id fails with StoreError and leaves
    the first one as it was.
    """
    first = submission(1)
    await store.append(first)
    with pytest.raises(StoreError):
        await store.append(submission(2, id=first.id))
    status = await store.status(first.id)
    assert status is not None
    assert status.context_id == first.context_id


@pytest_twisted.ensureDeferred
async def test_many_appends_all_stored(store: Store) -> None:
    """
    200 appends made at once are all acknowledged and all found.
    """
    batch = [submission(n) for n in range(200)]
    results = await gatherResults([store.append(s) for s in batch])
    assert results == [None] * 200
    statuses = await gatherResults([store.status(s.id) for s in batch])
    assert [status and status.id for status in statuses] == [s.id for s in batch]


# The fake's own hook.


@pytest_twisted.ensureDeferred
async def test_memory_fail_appends() -> None:
    """
    MemoryStore.fail_appends makes appends fail with StoreError and store
    nothing, until it is cleared.
    """
    memory = MemoryStore()
    memory.fail_appends = True
    with pytest.raises(StoreError):
        await memory.append(submission(1))
    assert await memory.status(submission(1).id) is None
    memory.fail_appends = False
    await memory.append(submission(1))
    assert memory.submissions == {submission(1).id: submission(1)}


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
    await first.stopService()
    record_decision(first, db, stored[0].id, STATE_COMPLETED, 1_800_000_000_000)

    second = SQLiteStore(FilePath(str(db)), reactor)
    second.startService()
    try:
        statuses = await gatherResults([second.status(s.id) for s in stored])
        assert [status and status.context_id for status in statuses] == [
            s.context_id for s in stored
        ]
        assert statuses[0] is not None
        assert statuses[0].state == STATE_COMPLETED
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
    assert rows == [(SCHEMA_VERSION,)]
    assert content == (stored[3].content, stored[3].sha256)


@pytest_twisted.ensureDeferred
async def test_group_commit(sqlite_store: SQLiteStore) -> None:
    """
    200 concurrent appends are committed in fewer transactions than appends.
    """
    await gatherResults([sqlite_store.append(submission(n)) for n in range(200)])
    assert 1 <= sqlite_store.transactions < 200


@pytest_twisted.ensureDeferred
async def test_max_batch(db: Path) -> None:
    """
    No transaction holds more than max_batch submissions: the first append
    goes alone, the 99 queued behind it go ten at a time.
    """
    small = open_store(db, max_batch=10)
    try:
        await gatherResults([small.append(submission(n)) for n in range(100)])
        assert small.transactions == 1 + 10
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
    alone = sqlite_store.append(submission(0))  # in flight: the rest queue
    doomed = [
        submission(1, content=secret),
        submission(1, id="receipt-0001"),  # the same id: the batch fails
        submission(2),
    ]
    answers = [sqlite_store.append(s) for s in doomed]
    await alone
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
    The database itself refuses UPDATE and DELETE on submissions and events.
    """
    stored = submission(1)
    await sqlite_store.append(stored)
    record_decision(sqlite_store, db, stored.id, STATE_COMPLETED, 1_800_000_000_000)
    connection = raw(db)
    try:
        for statement in (
            "UPDATE submissions SET content = x'00'",
            "DELETE FROM submissions",
            "UPDATE events SET state = 'TASK_STATE_SUBMITTED'",
            "DELETE FROM events",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                connection.execute(statement)
    finally:
        connection.close()
    status = await sqlite_store.status(stored.id)
    assert status is not None
    assert status.state == STATE_COMPLETED


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
    A stopped store refuses appends and reads with StoreError.
    """
    await sqlite_store.append(submission(1))
    await sqlite_store.stopService()
    with pytest.raises(StoreError):
        await sqlite_store.append(submission(2))
    with pytest.raises(StoreError):
        await sqlite_store.status(submission(1).id)


@pytest_twisted.ensureDeferred
async def test_stop_waits_for_reads(sqlite_store: SQLiteStore) -> None:
    """
    A status read in flight when stopService is called still gets its answer.
    """
    await sqlite_store.append(submission(1))
    reading = sqlite_store.status(submission(1).id)
    await sqlite_store.stopService()
    assert reading.called
    status = await reading
    assert status is not None


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
