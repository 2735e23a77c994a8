"""
Fixtures and helpers of the store's test suites (C{test_store*.py}):
distinct submissions, the C{store} fixture over every backend (SQLite, the
in-memory fake, a fresh PostgreSQL schema), a started SQLite store, a
listener that lets a test wait for what it hears, and the helpers of
SQLite's files and schema that several suites read.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Callable

import pytest
import pytest_twisted
from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.internet.interfaces import IReactorFromThreads

from beacon.store import (
    SORT_UPDATED,
    STATE_COMPLETED,
    STATE_REJECTED,
    AlreadyDecided,
    PostgreSQLStore,
    SQLiteStore,
    StoreEvent,
    StoredTask,
    Submission,
    TaskPage,
    TaskQuery,
)
from beacon.testing import MemoryStore
from peers.postgres import run_database

reactor = IReactorFromThreads(_reactor)

Store = SQLiteStore | MemoryStore | PostgreSQLStore

#: How long a test waits for a listener to hear of a write, in seconds.
HEARD_TIMEOUT = 60.0


#: Submission n is received at T0 + n unless told otherwise.
T0 = 1_700_000_000_000

#: A decision time after every receipt.
DECIDED_AT = 1_800_000_000_000


def submission(
    n: int,
    *,
    id: str | None = None,
    content: bytes | None = None,
    received_at_ms: int | None = None,
    door: str = "a2a-jsonrpc",
    kind: str | None = None,
) -> Submission:
    """
    A distinct, well-formed submission numbered C{n}: a text submission
    unless C{kind} (or C{content} made by L{structured}) says otherwise.
    """
    if content is None:
        content = b'{"text":"submission %d"}' % (n,)
    if kind is None:
        kind = "structured" if content.startswith(b'{"message":') else "text"
    return Submission(
        id=id if id is not None else f"receipt-{n:04d}",
        context_id=f"context-{n:04d}",
        received_at_ms=T0 + n if received_at_ms is None else received_at_ms,
        door=door,
        source="192.0.2.1",
        kind=kind,
        message_id=f"message-{n}",
        content=content,
        sha256=hashlib.sha256(content).hexdigest(),
    )


def canonical(document: dict[str, Any]) -> bytes:
    """
    C{document} as Beacon stores content (see beacon.intake).
    """
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def text(words: str) -> bytes:
    """
    The stored content of a text submission.
    """
    return canonical({"text": words})


def structured(
    name: str,
    subject: str,
    body: str,
    *,
    agent: str | None = None,
    operator: str | None = None,
    **more: Any,
) -> bytes:
    """
    The stored content of a structured submission.
    """
    sender = {"name": name}
    if agent is not None:
        sender["agent"] = agent
    if operator is not None:
        sender["operator"] = operator
    return canonical(
        {"message": {"from": sender, "subject": subject, "body": body, **more}}
    )


def receipt_id(n: int, prefix: str = "0ab1c2d3") -> str:
    """
    An id shaped as Beacon's are (36 lower-case base32hex digits), starting
    with C{prefix}.
    """
    return prefix + f"{n:0{36 - len(prefix)}d}"


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


async def hold_writer(store: Any) -> Callable[[], None]:
    """
    Hold C{store}'s writer thread (an L{SQLiteStore} or a
    L{PostgreSQLStore}) once it has done everything it was given before,
    until the returned function is called. The writes queued meanwhile are
    all waiting when it lets go, so the writer takes them as one batch (up
    to C{max_batch}): batches are made of what waits, which only a held
    writer makes certain.
    """
    gate = threading.Event()
    holding: Deferred[None] = Deferred()

    def hold() -> None:
        reactor.callFromThread(holding.callback, None)
        # Bounded, so that a test that fails before letting go cannot hang
        # the store's stop for ever.
        gate.wait(60)

    store._writer_pool.call(hold)
    await holding
    return gate.set


async def all_pages(
    store: Store, limit: int, **filters: Any
) -> tuple[list[StoredTask], list[TaskPage]]:
    """
    Every task matching C{filters}, page by page.
    """
    tasks: list[StoredTask] = []
    pages: list[TaskPage] = []
    after: tuple[int, int] | None = None
    while True:
        page = await store.list_tasks(
            TaskQuery(**{"sort": SORT_UPDATED, **filters}), limit=limit, after=after
        )
        pages.append(page)
        tasks.extend(page.tasks)
        if page.next_after is None:
            return tasks, pages
        after = page.next_after


class Heard:
    """
    A store listener that records events and lets a test wait for them.

    SQLiteStore tells its listeners right after the Deferreds of a batch
    fired, so a test awaiting a write resumes before the listeners ran;
    C{await heard.count(n)} waits for the n-th event instead. Subscribe it
    last: when it hears an event, every other listener already has.
    """

    def __init__(self, store: Store) -> None:
        self.events: list[StoreEvent] = []
        self._waiting: list[tuple[int, Deferred[list[StoreEvent]]]] = []
        self.unsubscribe = store.subscribe(self)

    def __call__(self, event: StoreEvent) -> None:
        self.events.append(event)
        ready = [w for w in self._waiting if w[0] <= len(self.events)]
        self._waiting = [w for w in self._waiting if w[0] > len(self.events)]
        for _, waiter in ready:
            waiter.callback(list(self.events))

    def count(self, n: int) -> Deferred[list[StoreEvent]]:
        """
        Fire with every event heard once there are at least C{n}.
        """
        if len(self.events) >= n:
            return succeed(list(self.events))
        waiter: Deferred[list[StoreEvent]] = Deferred()
        self._waiting.append((n, waiter))
        # Bounded: a listener that never hears fails the test, not hangs it.
        return waiter.addTimeout(HEARD_TIMEOUT, _reactor)


def ids(tasks: list[StoredTask]) -> list[str]:
    """
    The receipt ids of C{tasks}, in order.
    """
    return [task.submission.id for task in tasks]


def newest_first(appended: list[Submission], decided: dict[str, int]) -> list[str]:
    """
    The ids of C{appended} (in append order) as list_tasks must order them:
    by status time (the decision's when decided), then by arrival, newest
    first.
    """
    keyed = [
        (decided.get(s.id, s.received_at_ms), arrival, s.id)
        for arrival, s in enumerate(appended)
    ]
    return [id_ for _, _, id_ in sorted(keyed, reverse=True)]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """
    Where the SQLite database lives.
    """
    return tmp_path / "data" / "beacon.sqlite"


@pytest.fixture(params=["sqlite", "memory", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """
    Which backend the shared suite runs on: C{"sqlite"}, C{"memory"}, or
    for PostgreSQL the URL of a fresh schema of this run's database (the
    test is skipped when PostgreSQL cannot be reached, failed when also
    CI=true). Synchronous, so that a skip happens before any reactor work.
    """
    if request.param == "postgresql":
        _, url = run_database(request.config).fresh_schema()
        return url
    name: str = request.param
    return name


@pytest_twisted.async_yield_fixture
async def store(backend: str, db: Path) -> AsyncIterator[Store]:
    """
    Each backend, started; SQLite and PostgreSQL are stopped afterwards.
    """
    if backend == "memory":
        yield MemoryStore()
        return
    started: SQLiteStore | PostgreSQLStore
    if backend == "sqlite":
        started = open_store(db)
    else:
        started = PostgreSQLStore(backend, reactor)
        started.startService()
    yield started
    if started.running:
        await started.stopService()


@pytest_twisted.async_yield_fixture
async def sqlite_store(db: Path) -> AsyncIterator[SQLiteStore]:
    """
    A started SQLiteStore, stopped afterwards.
    """
    started = open_store(db)
    yield started
    if started.running:
        await started.stopService()



def received_newest_first(appended: list[Submission]) -> list[str]:
    """
    The ids of C{appended} (in append order) as list_tasks(sort=received)
    must order them: by time of receipt, then by arrival, newest first.
    """
    keyed = [(s.received_at_ms, arrival, s.id) for arrival, s in enumerate(appended)]
    return [id_ for _, _, id_ in sorted(keyed, reverse=True)]


def insert_submissions(connection: sqlite3.Connection, appended: list[Submission]) -> None:
    """
    Insert C{appended} as a batch does, bypassing the store.
    """
    for s in appended:
        connection.execute(
            "INSERT INTO submissions (id, context_id, received_at_ms, door,"
            " source, kind, message_id, content, sha256)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (s.id, s.context_id, s.received_at_ms, s.door, s.source, s.kind,
             s.message_id, s.content, s.sha256),
        )


def old_database(path: Path, appended: list[Submission], version: int) -> None:
    """
    A database as a Beacon of schema C{version} left it: the migrations up
    to C{version} only, C{appended} stored (as that Beacon's batches
    inserted them), the first one decided with a note.
    """
    from beacon.store._sqlite import MIGRATIONS, connect

    path.parent.mkdir(parents=True, exist_ok=True)
    connection = connect(str(path), query_only=False)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            "CREATE TABLE beacon_schema ("
            "version INTEGER NOT NULL, applied_at_ms INTEGER NOT NULL)"
        )
        for applied in range(1, version + 1):
            for statement in MIGRATIONS[applied - 1]:
                connection.execute(statement)
            connection.execute("INSERT INTO beacon_schema VALUES (?, 0)", (applied,))
        insert_submissions(connection, appended)
        connection.execute(
            "INSERT INTO events (submission_id, state, at_ms, note) VALUES (?, ?, ?, ?)",
            (appended[0].id, STATE_REJECTED, DECIDED_AT, "old note"),
        )
        connection.execute("COMMIT")
    finally:
        connection.close()


async def assert_each_claimed_once(one: Any, two: Any, appended: int) -> None:
    """
    Two stores on one database claim the same channel at once, as two
    holders, until everything is delivered: each of the C{appended}
    submissions made after the channel was created is claimed, and
    finished, by exactly one of them, in seq order.
    """
    assert await one.claim_notifications("command", "one", T0, 60_000, 3) is None
    for n in range(appended):
        await (one if n % 2 else two).append(submission(n))
    delivered: list[tuple[str, int]] = []
    rounds = 0
    while True:
        rounds += 1
        assert rounds < 10 * appended, "the claims did not finish"
        claims = await gatherResults(
            [
                one.claim_notifications("command", "one", T0 + rounds, 60_000, 3),
                two.claim_notifications("command", "two", T0 + rounds, 60_000, 3),
            ]
        )
        if claims == [None, None]:
            break
        assert None in claims, "both holders held the lease at once"
        for holder, store, batch in zip(("one", "two"), (one, two), claims):
            if batch is not None:
                delivered += [(task.submission.id, task.seq) for task in batch.tasks]
                await store.finish_notifications("command", holder, batch.through_seq)
    assert [id_ for id_, _ in delivered] == [submission(n).id for n in range(appended)]
    assert [seq for _, seq in delivered] == sorted(seq for _, seq in delivered)


async def assert_one_decision_wins(one: Any, two: Any) -> None:
    """
    Two stores on one database decide submissions 0..4 at once, one
    accepting and one rejecting each: exactly one decision wins per task,
    the other gets AlreadyDecided, and both stores read the winner.
    """
    attempts = []
    for n in range(5):
        id_ = submission(n).id
        attempts.append(one.decide(id_, STATE_COMPLETED, DECIDED_AT, "one"))
        attempts.append(two.decide(id_, STATE_REJECTED, DECIDED_AT, "two"))
    outcomes: list[StoredTask | Exception] = []
    for attempt in attempts:
        try:
            outcomes.append(await attempt)
        except AlreadyDecided as e:
            outcomes.append(e)
    for n in range(5):
        pair = outcomes[2 * n : 2 * n + 2]
        winners = [o for o in pair if isinstance(o, StoredTask)]
        assert len(winners) == 1, pair
        assert sum(isinstance(o, AlreadyDecided) for o in pair) == 1
        assert await one.get(submission(n).id) == winners[0]
        assert await two.get(submission(n).id) == winners[0]
