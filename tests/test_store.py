"""
The submission store: one behaviour suite over SQLiteStore, MemoryStore and
PostgreSQLStore (appends, status, the review surface's get, list_tasks in
both orders with every filter, search and id prefixes, decide, purge,
notification cursors, and listeners), and the SQLite backend's own promises
(group commit shared by appends and decisions, durability settings, schema
versioning and the upgrades from versions 1 and 2, append-only triggers but
for a purge, a purge leaving nothing in the file or its WAL, the query
plans, the search index caught up behind the commit (before every search,
in a purge, at start and stop, across two stores on one file), one decision
per submission in the database itself, orderly stop).

SQLiteStore and PostgreSQLStore run their threads against the real global
reactor that pytest-twisted runs; tests wait on Deferreds, never on time
(a wait for a listener gives up after L{HEARD_TIMEOUT}). PostgreSQL is
this run's database (see C{peers.postgres}), a fresh schema per test; the
PostgreSQL backend's own promises are in C{test_store_postgres.py}.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import stat
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import formatEvent
from twisted.python.filepath import FilePath
from twisted.python.threadable import isInIOThread
from zope.interface.verify import verifyObject

from beacon.store import (
    MIN_ID_PREFIX,
    SORT_RECEIVED,
    SORT_UPDATED,
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    AlreadyDecided,
    ISubmissionStore,
    PostgreSQLStore,
    SQLiteStore,
    StoredTask,
    StoreError,
    StoreEvent,
    Submission,
    TaskPage,
    TaskStatusRecord,
)
from beacon.store._sqlite import (
    CATCH_UP_THRESHOLD,
    SCHEMA_VERSION,
    SEARCH_TABLE,
    SEARCH_WATERMARK,
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
        page = await store.list_tasks(limit=limit, after=after, **filters)
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
async def test_state_from_decision(store: Store) -> None:
    """
    A decided task's state and update time come from its decision, and a
    task without one stays submitted as of its receipt.
    """
    decided, untouched = submission(1), submission(2)
    await store.append(decided)
    await store.append(untouched)
    await store.decide(decided.id, STATE_REJECTED, DECIDED_AT, "note")
    assert await store.status(decided.id) == TaskStatusRecord(
        id=decided.id,
        context_id=decided.context_id,
        state=STATE_REJECTED,
        updated_at_ms=DECIDED_AT,
    )
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


# The review surface: get, decide and list_tasks.


@pytest_twisted.ensureDeferred
async def test_get(store: Store) -> None:
    """
    get answers the submission exactly as stored, submitted as of its
    receipt, without a note; seq grows in arrival order; an unknown id is
    None.
    """
    first, second = submission(1), submission(2, received_at_ms=T0)
    await store.append(first)
    await store.append(second)
    got_first = await store.get(first.id)
    got_second = await store.get(second.id)
    assert got_first is not None and got_second is not None
    assert got_first == StoredTask(
        submission=first,
        state=STATE_SUBMITTED,
        updated_at_ms=first.received_at_ms,
        note=None,
        seq=got_first.seq,
    )
    assert got_second.submission == second
    assert got_second.seq > got_first.seq
    assert await store.get("receipt-9999") is None
    assert await store.get("") is None


@pytest_twisted.ensureDeferred
async def test_decide(store: Store) -> None:
    """
    decide answers the task in its new state, as of the decision, with its
    note; get and status agree afterwards; a None note stays None.
    """
    accepted, rejected = submission(1), submission(2)
    await store.append(accepted)
    await store.append(rejected)
    before = await store.get(accepted.id)
    assert before is not None
    decided = await store.decide(accepted.id, STATE_COMPLETED, DECIDED_AT, "looks good")
    assert decided == StoredTask(
        submission=accepted,
        state=STATE_COMPLETED,
        updated_at_ms=DECIDED_AT,
        note="looks good",
        seq=before.seq,
    )
    assert await store.get(accepted.id) == decided
    refused = await store.decide(rejected.id, STATE_REJECTED, DECIDED_AT + 5, None)
    assert refused is not None
    assert (refused.state, refused.updated_at_ms, refused.note) == (
        STATE_REJECTED,
        DECIDED_AT + 5,
        None,
    )
    status = await store.status(rejected.id)
    assert status is not None
    assert (status.state, status.updated_at_ms) == (STATE_REJECTED, DECIDED_AT + 5)


@pytest_twisted.ensureDeferred
async def test_decide_unknown_id(store: Store) -> None:
    """
    Deciding an id no submission has answers None and records nothing.
    """
    await store.append(submission(1))
    assert await store.decide("receipt-9999", STATE_COMPLETED, DECIDED_AT, "x") is None
    assert await store.get("receipt-9999") is None
    page = await store.list_tasks(limit=10)
    assert [task.state for task in page.tasks] == [STATE_SUBMITTED]


@pytest.mark.parametrize("second_state", [STATE_COMPLETED, STATE_REJECTED])
@pytest_twisted.ensureDeferred
async def test_decide_only_once(store: Store, second_state: str) -> None:
    """
    A second decision, even the same one, fails with AlreadyDecided and
    leaves the first in place.
    """
    stored = submission(1)
    await store.append(stored)
    first = await store.decide(stored.id, STATE_COMPLETED, DECIDED_AT, "first")
    with pytest.raises(AlreadyDecided):
        await store.decide(stored.id, second_state, DECIDED_AT + 1, "second")
    assert await store.get(stored.id) == first


@pytest.mark.parametrize(
    "state", [STATE_SUBMITTED, "TASK_STATE_WORKING", "completed", ""]
)
@pytest_twisted.ensureDeferred
async def test_decide_bad_state(store: Store, state: str) -> None:
    """
    A decision is completed or rejected; anything else fails with
    ValueError and records nothing.
    """
    stored = submission(1)
    await store.append(stored)
    with pytest.raises(ValueError):
        await store.decide(stored.id, state, DECIDED_AT, None)
    task = await store.get(stored.id)
    assert task is not None
    assert task.state == STATE_SUBMITTED
    await store.decide(stored.id, STATE_REJECTED, DECIDED_AT, None)


@pytest_twisted.ensureDeferred
async def test_list_empty(store: Store) -> None:
    """
    An empty store lists an empty last page.
    """
    assert await store.list_tasks(limit=5) == TaskPage(
        tasks=[], total=0, next_after=None
    )


@pytest_twisted.ensureDeferred
async def test_list_bad_limit(store: Store) -> None:
    """
    A page holds at least one task.
    """
    for limit in (0, -1):
        with pytest.raises(ValueError):
            await store.list_tasks(limit=limit)


@pytest_twisted.ensureDeferred
async def test_list_order(store: Store) -> None:
    """
    Tasks come newest status time first, a decision's time counting for a
    decided task, and ties in the same millisecond go newest arrival first.
    """
    appended = [
        submission(1, received_at_ms=T0 + 20),
        submission(2, received_at_ms=T0 + 10),
        submission(3, received_at_ms=T0 + 20),
        submission(4, received_at_ms=T0 + 30),
        submission(5, received_at_ms=T0 + 10),
        submission(6, received_at_ms=T0 + 5),
    ]
    for s in appended:
        await store.append(s)
    # Decided at the receipt time of two others: three-way tie at T0 + 20.
    await store.decide(appended[5].id, STATE_COMPLETED, T0 + 20, None)
    # Decided into the past relative to its receipt: it sorts by decision.
    await store.decide(appended[3].id, STATE_REJECTED, T0 + 1, None)
    page = await store.list_tasks(limit=10)
    assert ids(page.tasks) == [
        appended[5].id,  # T0 + 20, newest arrival of the tie
        appended[2].id,  # T0 + 20
        appended[0].id,  # T0 + 20, oldest arrival of the tie
        appended[4].id,  # T0 + 10
        appended[1].id,  # T0 + 10
        appended[3].id,  # T0 + 1 (decision)
    ]
    assert ids(page.tasks) == newest_first(
        appended, {appended[5].id: T0 + 20, appended[3].id: T0 + 1}
    )
    assert [task.updated_at_ms for task in page.tasks] == [
        T0 + 20,
        T0 + 20,
        T0 + 20,
        T0 + 10,
        T0 + 10,
        T0 + 1,
    ]
    assert (page.total, page.next_after) == (6, None)


@pytest_twisted.ensureDeferred
async def test_list_filters(store: Store) -> None:
    """
    state, updated_after_ms (inclusive) and context_id each filter, and
    combine with AND; total counts what matches, not the page.
    """
    appended = [submission(n, received_at_ms=T0 + 10 * n) for n in range(6)]
    for s in appended:
        await store.append(s)
    await store.decide(appended[0].id, STATE_COMPLETED, T0 + 100, None)
    await store.decide(appended[1].id, STATE_REJECTED, T0 + 25, None)
    await store.decide(appended[2].id, STATE_COMPLETED, T0 + 30, None)

    async def listed(**filters: Any) -> tuple[list[str], int]:
        page = await store.list_tasks(limit=100, **filters)
        return ids(page.tasks), page.total

    a = [s.id for s in appended]
    assert await listed(state=STATE_SUBMITTED) == ([a[5], a[4], a[3]], 3)
    assert await listed(state=STATE_COMPLETED) == ([a[0], a[2]], 2)
    assert await listed(state=STATE_REJECTED) == ([a[1]], 1)
    assert await listed(state="TASK_STATE_WORKING") == ([], 0)
    # updated_at: a0 100, a5 50, a4 40, a3 30, a2 30, a1 25.
    assert await listed(updated_after_ms=T0 + 30) == ([a[0], a[5], a[4], a[3], a[2]], 5)
    assert await listed(updated_after_ms=T0 + 31) == ([a[0], a[5], a[4]], 3)
    assert await listed(updated_after_ms=T0 + 101) == ([], 0)
    assert await listed(context_id=appended[4].context_id) == ([a[4]], 1)
    assert await listed(context_id="context-9999") == ([], 0)
    assert await listed(state=STATE_SUBMITTED, updated_after_ms=T0 + 40) == (
        [a[5], a[4]],
        2,
    )
    assert await listed(state=STATE_COMPLETED, updated_after_ms=T0 + 30) == (
        [a[0], a[2]],
        2,
    )
    assert await listed(state=STATE_COMPLETED, context_id=appended[4].context_id) == (
        [],
        0,
    )
    assert await listed(
        state=STATE_REJECTED,
        updated_after_ms=T0 + 25,
        context_id=appended[1].context_id,
    ) == ([a[1]], 1)
    first = await store.list_tasks(limit=2, state=STATE_SUBMITTED)
    assert (ids(first.tasks), first.total) == ([a[5], a[4]], 3)
    rest = await store.list_tasks(
        limit=2, state=STATE_SUBMITTED, after=first.next_after
    )
    assert (ids(rest.tasks), rest.total, rest.next_after) == ([a[3]], 3, None)


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 12, 13])
@pytest_twisted.ensureDeferred
async def test_paging_walks_everything_once(store: Store, limit: int) -> None:
    """
    Following next_after visits every task exactly once, in order, across
    ties in the same millisecond (page boundaries fall inside them); every
    page but the last is full and has a cursor, total is the same on every
    page, and the last page has no cursor even when it is exactly full.
    """
    shuffle = random.Random(limit)
    times = [T0 + t for t in (0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 5, 5)]
    shuffle.shuffle(times)
    appended = [submission(n, received_at_ms=t) for n, t in enumerate(times)]
    for s in appended:
        await store.append(s)
    # A decision landing in an existing tie.
    await store.decide(appended[0].id, STATE_COMPLETED, T0 + 2, None)
    tasks, pages = await all_pages(store, limit)
    assert ids(tasks) == newest_first(appended, {appended[0].id: T0 + 2})
    assert len(set(ids(tasks))) == 12
    assert [page.total for page in pages] == [12] * len(pages)
    assert len(pages) == -(-12 // limit)
    for page in pages[:-1]:
        assert len(page.tasks) == limit
        last = page.tasks[-1]
        assert page.next_after == (last.updated_at_ms, last.seq)
    assert pages[-1].next_after is None


@pytest_twisted.ensureDeferred
async def test_paging_stable_while_submissions_arrive(store: Store) -> None:
    """
    Submissions arriving between pages, newer than the cursor or in the
    cursor's very millisecond, sort before the cursor: later pages show
    exactly the tasks that followed it, none skipped, none repeated.
    """
    times = [T0 + t for t in (9, 9, 9, 8, 8, 7, 7, 7, 6, 5, 5, 5, 5, 4)]
    appended = [submission(n, received_at_ms=t) for n, t in enumerate(times)]
    for s in appended:
        await store.append(s)
    expected = newest_first(appended, {})
    seen: list[str] = []
    arrivals: list[Submission] = []
    after: tuple[int, int] | None = None
    n = 100
    while True:
        page = await store.list_tasks(limit=3, after=after)
        assert page.total == len(appended) + len(arrivals)
        seen.extend(ids(page.tasks))
        if page.next_after is None:
            break
        after = page.next_after
        # One newer than everything, one in the cursor's millisecond.
        for received_at_ms in (T0 + 50, after[0]):
            arrival = submission(n, received_at_ms=received_at_ms)
            n += 1
            await store.append(arrival)
            arrivals.append(arrival)
    assert seen == expected
    # The arrivals are all there, in their places, for the next reader.
    fresh, _ = await all_pages(store, 100)
    assert ids(fresh) == newest_first(appended + arrivals, {})
    assert len(arrivals) == 8


@pytest_twisted.ensureDeferred
async def test_paging_with_filters(store: Store) -> None:
    """
    Paging under a filter keeps to the filter and its total.
    """
    appended = [submission(n, received_at_ms=T0 + n // 3) for n in range(15)]
    for s in appended:
        await store.append(s)
    decided = {}
    for s in appended[::2]:
        await store.decide(s.id, STATE_REJECTED, T0 + 3, None)
        decided[s.id] = T0 + 3
    tasks, pages = await all_pages(store, 2, state=STATE_REJECTED)
    assert ids(tasks) == [
        id_ for id_ in newest_first(appended, decided) if id_ in decided
    ]
    assert {page.total for page in pages} == {8}
    tasks, pages = await all_pages(store, 2, updated_after_ms=T0 + 3)
    assert ids(tasks) == [
        id_
        for id_ in newest_first(appended, decided)
        if decided.get(id_) or int(id_[-4:]) // 3 >= 3
    ]
    assert {page.total for page in pages} == {len(tasks)}


# The reader's half: the received order, the new filters, search, id
# prefixes, purging and notification cursors.


def received_newest_first(appended: list[Submission]) -> list[str]:
    """
    The ids of C{appended} (in append order) as list_tasks(sort=received)
    must order them: by time of receipt, then by arrival, newest first.
    """
    keyed = [(s.received_at_ms, arrival, s.id) for arrival, s in enumerate(appended)]
    return [id_ for _, _, id_ in sorted(keyed, reverse=True)]


@pytest_twisted.ensureDeferred
async def test_list_received_order(store: Store) -> None:
    """
    sort=received orders by time of receipt, newest first, ties by arrival;
    a decision does not move a task; the cursor is (received_at_ms, seq).
    """
    appended = [
        submission(1, received_at_ms=T0 + 20),
        submission(2, received_at_ms=T0 + 10),
        submission(3, received_at_ms=T0 + 20),
        submission(4, received_at_ms=T0 + 30),
    ]
    for s in appended:
        await store.append(s)
    await store.decide(appended[1].id, STATE_COMPLETED, DECIDED_AT, None)
    page = await store.list_tasks(limit=3, sort=SORT_RECEIVED)
    assert ids(page.tasks) == [appended[3].id, appended[2].id, appended[0].id]
    assert page.total == 4
    last = page.tasks[-1]
    assert page.next_after == (last.submission.received_at_ms, last.seq)
    rest = await store.list_tasks(limit=3, sort=SORT_RECEIVED, after=page.next_after)
    assert ids(rest.tasks) == [appended[1].id]
    assert rest.tasks[0].state == STATE_COMPLETED
    assert (rest.total, rest.next_after) == (4, None)
    by_update = await store.list_tasks(limit=10, sort=SORT_UPDATED)
    assert ids(by_update.tasks)[0] == appended[1].id


@pytest_twisted.ensureDeferred
async def test_list_bad_sort(store: Store) -> None:
    """
    An order other than updated or received is a ValueError.
    """
    for sort in ("", "RECEIVED", "seq"):
        with pytest.raises(ValueError):
            await store.list_tasks(limit=1, sort=sort)


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 12, 13])
@pytest_twisted.ensureDeferred
async def test_paging_received_walks_everything_once(store: Store, limit: int) -> None:
    """
    Following next_after in the received order visits every task exactly
    once, across ties in the same millisecond and whatever was decided;
    total is the same on every page and only the last has no cursor.
    """
    shuffle = random.Random(limit)
    times = [T0 + t for t in (0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 5, 5)]
    shuffle.shuffle(times)
    appended = [submission(n, received_at_ms=t) for n, t in enumerate(times)]
    for s in appended:
        await store.append(s)
    await store.decide(appended[0].id, STATE_COMPLETED, T0 + 100, None)
    tasks, pages = await all_pages(store, limit, sort=SORT_RECEIVED)
    assert ids(tasks) == received_newest_first(appended)
    assert [page.total for page in pages] == [12] * len(pages)
    assert len(pages) == -(-12 // limit)
    for page in pages[:-1]:
        assert len(page.tasks) == limit
        last = page.tasks[-1]
        assert page.next_after == (last.submission.received_at_ms, last.seq)
    assert pages[-1].next_after is None


@pytest_twisted.ensureDeferred
async def test_paging_received_stable_while_submissions_arrive(store: Store) -> None:
    """
    In the received order too, submissions arriving between pages (newer
    than everything, or in the cursor's very millisecond) never appear on
    later pages, and nothing is skipped.
    """
    times = [T0 + t for t in (9, 9, 8, 8, 8, 7, 5, 5, 4)]
    appended = [submission(n, received_at_ms=t) for n, t in enumerate(times)]
    for s in appended:
        await store.append(s)
    seen: list[str] = []
    after: tuple[int, int] | None = None
    n = 100
    while True:
        page = await store.list_tasks(
            limit=2, sort=SORT_RECEIVED, after=after, with_total=False
        )
        assert page.total is None
        seen.extend(ids(page.tasks))
        if page.next_after is None:
            break
        after = page.next_after
        for received_at_ms in (T0 + 50, after[0]):
            await store.append(submission(n, received_at_ms=received_at_ms))
            n += 1
    assert seen == received_newest_first(appended)


@pytest_twisted.ensureDeferred
async def test_list_new_filters(store: Store) -> None:
    """
    door, received_since_ms (inclusive) and received_until_ms (exclusive)
    each filter, combine with each other and with the older filters, in
    both orders; total counts what matches.
    """
    appended = [
        submission(n, received_at_ms=T0 + 10 * n, door="native" if n % 2 else "a2a-jsonrpc")
        for n in range(8)
    ]
    for s in appended:
        await store.append(s)
    await store.decide(appended[1].id, STATE_COMPLETED, T0 + 5, None)
    await store.decide(appended[6].id, STATE_REJECTED, T0 + 500, None)
    a = [s.id for s in appended]

    async def listed(sort: str = SORT_RECEIVED, **filters: Any) -> tuple[list[str], int]:
        page = await store.list_tasks(limit=100, sort=sort, **filters)
        assert page.total is not None
        return ids(page.tasks), page.total

    assert await listed(door="native") == ([a[7], a[5], a[3], a[1]], 4)
    assert await listed(door="a2a-jsonrpc") == ([a[6], a[4], a[2], a[0]], 4)
    assert await listed(door="websocket") == ([], 0)
    assert await listed(received_since_ms=T0 + 50) == ([a[7], a[6], a[5]], 3)
    assert await listed(received_until_ms=T0 + 20) == ([a[1], a[0]], 2)
    assert await listed(received_since_ms=T0 + 20, received_until_ms=T0 + 40) == (
        [a[3], a[2]],
        2,
    )
    assert await listed(received_since_ms=T0 + 40, received_until_ms=T0 + 40) == ([], 0)
    assert await listed(door="native", received_since_ms=T0 + 10, received_until_ms=T0 + 70) == (
        [a[5], a[3], a[1]],
        3,
    )
    assert await listed(door="native", state=STATE_COMPLETED) == ([a[1]], 1)
    assert await listed(door="a2a-jsonrpc", state=STATE_SUBMITTED) == (
        [a[4], a[2], a[0]],
        3,
    )
    assert await listed(received_until_ms=T0 + 70, updated_after_ms=T0 + 40) == (
        [a[6], a[5], a[4]],
        3,
    )
    assert await listed(door="native", context_id=appended[3].context_id) == ([a[3]], 1)
    assert await listed(door="native", context_id=appended[2].context_id) == ([], 0)
    # The status order keeps the filters; a6 was decided last, a1 first.
    assert await listed(SORT_UPDATED, received_since_ms=T0 + 10) == (
        [a[6], a[7], a[5], a[4], a[3], a[2], a[1]],
        7,
    )
    assert await listed(SORT_UPDATED, door="native", received_until_ms=T0 + 40) == (
        [a[3], a[1]],
        2,
    )


@pytest_twisted.ensureDeferred
async def test_list_without_total(store: Store) -> None:
    """
    with_total=False answers the same tasks and cursor with total None.
    """
    for n in range(5):
        await store.append(submission(n))
    for sort in (SORT_UPDATED, SORT_RECEIVED):
        counted = await store.list_tasks(limit=3, sort=sort)
        uncounted = await store.list_tasks(limit=3, sort=sort, with_total=False)
        assert counted.total == 5
        assert uncounted == TaskPage(
            tasks=counted.tasks, total=None, next_after=counted.next_after
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
        page = await store.list_tasks(limit=10, search=search, **filters)
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
        page = await store.list_tasks(limit=10, search=search, sort=SORT_RECEIVED)
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
    assert await store.list_tasks(limit=5, search=search) == TaskPage(
        tasks=[], total=0, next_after=None
    )
    page = await store.list_tasks(limit=5, search=search, with_total=False)
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
        store, 2, search="common", door="native", state=STATE_SUBMITTED
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
        page = await store.list_tasks(limit=10, id_prefix=prefix, **filters)
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
    assert await found("0ab1c2", sort=SORT_RECEIVED, state=STATE_SUBMITTED) == (
        [a[1], a[0]],
        2,
    )
    await store.decide(a[0], STATE_COMPLETED, DECIDED_AT, None)
    assert await found("0ab1c2", state=STATE_COMPLETED) == ([a[0]], 1)
    for bad in ("", "0ab1c", "0AB1C2", "0ab1c-", "0ab1c2*", "0ab1c2%", "0ab1c_", "0ab1c2 ", "éab1c2"):
        with pytest.raises(ValueError):
            await store.list_tasks(limit=10, id_prefix=bad)


# Purging.


async def decided_tasks(store: Store) -> list[Submission]:
    """
    Four submissions (each with a word of its own), three decided at
    DECIDED_AT + 0, + 10 and + 20 with a note, one undecided.
    """
    appended = [
        submission(n, content=text(f"secret{n} shared words")) for n in range(4)
    ]
    for s in appended:
        await store.append(s)
    for n in range(3):
        state = STATE_COMPLETED if n % 2 else STATE_REJECTED
        await store.decide(appended[n].id, state, DECIDED_AT + 10 * n, f"note {n}")
    return appended


@pytest_twisted.ensureDeferred
async def test_purge(store: Store) -> None:
    """
    purge erases the content and the note of every decided submission
    decided strictly before the bound, and records when; everything else
    (status, receipt, times, state) stays; the undecided and the later
    decided are untouched.
    """
    appended = await decided_tasks(store)
    before = [await store.get(s.id) for s in appended]
    assert await store.purge(DECIDED_AT + 10, DECIDED_AT + 99) == 1
    purged = await store.get(appended[0].id)
    assert before[0] is not None
    assert purged == StoredTask(
        submission=replace(appended[0], content=b""),
        state=STATE_REJECTED,
        updated_at_ms=DECIDED_AT,
        note=None,
        seq=before[0].seq,
        purged_at_ms=DECIDED_AT + 99,
    )
    assert await store.status(appended[0].id) == TaskStatusRecord(
        id=appended[0].id,
        context_id=appended[0].context_id,
        state=STATE_REJECTED,
        updated_at_ms=DECIDED_AT,
    )
    for n in (1, 2, 3):
        assert await store.get(appended[n].id) == before[n]
        assert before[n] is not None and before[n].purged_at_ms is None
    # The bound is strict: the one decided at DECIDED_AT + 10 goes now.
    assert await store.purge(DECIDED_AT + 11, DECIDED_AT + 100) == 1
    task = await store.get(appended[1].id)
    assert task is not None
    assert (task.submission.content, task.note, task.purged_at_ms) == (
        b"",
        None,
        DECIDED_AT + 100,
    )
    assert task.submission.sha256 == appended[1].sha256
    # Listed as they are, purged or not.
    page = await store.list_tasks(limit=10, sort=SORT_RECEIVED)
    assert [t.purged_at_ms for t in page.tasks] == [None, None, DECIDED_AT + 100, DECIDED_AT + 99]
    # A purged task stays decided.
    with pytest.raises(AlreadyDecided):
        await store.decide(appended[0].id, STATE_COMPLETED, DECIDED_AT + 200, None)


@pytest_twisted.ensureDeferred
async def test_purge_counts_once(store: Store) -> None:
    """
    A dry run counts without changing anything; a purge counts what it
    purged; a second purge with the same bound purges nothing new; the
    undecided submission is never purged.
    """
    appended = await decided_tasks(store)
    before = [await store.get(s.id) for s in appended]
    assert await store.purge(DECIDED_AT + 1000, DECIDED_AT + 1, dry_run=True) == 3
    assert [await store.get(s.id) for s in appended] == before
    assert await store.purge(DECIDED_AT, DECIDED_AT + 1) == 0
    assert await store.purge(DECIDED_AT + 1000, DECIDED_AT + 1) == 3
    assert await store.purge(DECIDED_AT + 1000, DECIDED_AT + 2, dry_run=True) == 0
    assert await store.purge(DECIDED_AT + 1000, DECIDED_AT + 2) == 0
    tasks = [await store.get(s.id) for s in appended]
    assert [t and t.purged_at_ms for t in tasks] == [DECIDED_AT + 1] * 3 + [None]
    assert tasks[3] == before[3]


@pytest_twisted.ensureDeferred
async def test_purged_never_found_by_search(store: Store) -> None:
    """
    A purged task's words are no longer searchable; the others' still are.
    """
    appended = await decided_tasks(store)
    page = await store.list_tasks(limit=10, search="shared words")
    assert page.total == 4
    await store.purge(DECIDED_AT + 5, DECIDED_AT + 6)
    assert (await store.list_tasks(limit=10, search="secret0")).total == 0
    page = await store.list_tasks(limit=10, search="shared", sort=SORT_RECEIVED)
    assert ids(page.tasks) == [s.id for s in reversed(appended[1:])]
    assert page.total == 3
    assert (await store.list_tasks(limit=10, search="secret1")).total == 1


@pytest_twisted.ensureDeferred
async def test_purge_tells_no_listener(store: Store) -> None:
    """
    A purge makes no store event.
    """
    heard = Heard(store)
    await decided_tasks(store)
    await heard.count(7)
    assert await store.purge(DECIDED_AT + 1000, DECIDED_AT + 1) == 3
    await store.append(submission(9))
    events = await heard.count(8)
    assert events[7:] == [StoreEvent("submitted", submission(9).id)]


# Notification cursors.


@pytest_twisted.ensureDeferred
async def test_claim_first_time_has_no_backlog(store: Store) -> None:
    """
    A channel seen for the first time starts after the newest submission:
    its first claim answers None, and only later submissions come.
    """
    await store.append(submission(1))
    await store.append(submission(2))
    assert await store.claim_notifications("command", "a", T0, 1000, 10) is None
    assert await store.claim_notifications("command", "a", T0, 1000, 10) is None
    await store.append(submission(3))
    batch = await store.claim_notifications("command", "a", T0, 1000, 10)
    assert batch is not None
    assert ids(batch.tasks) == [submission(3).id]
    assert (batch.through_seq, batch.pending) == (batch.tasks[0].seq, 1)
    assert batch.tasks[0] == await store.get(submission(3).id)


@pytest_twisted.ensureDeferred
async def test_claim_on_an_empty_store(store: Store) -> None:
    """
    A channel created on an empty store gets the first submission.
    """
    assert await store.claim_notifications("command", "a", T0, 1000, 10) is None
    await store.append(submission(1))
    batch = await store.claim_notifications("command", "a", T0, 1000, 10)
    assert batch is not None and ids(batch.tasks) == [submission(1).id]


@pytest_twisted.ensureDeferred
async def test_claim_batches_in_seq_order(store: Store) -> None:
    """
    A batch holds up to limit tasks in arrival order (whatever their
    receipt times), says how many wait in all, and finishing it advances
    the cursor to the next ones; finishing with None delivers them again.
    """
    assert await store.claim_notifications("command", "a", T0, 1000, 2) is None
    appended = [submission(n, received_at_ms=T0 + 100 - n) for n in range(5)]
    for s in appended:
        await store.append(s)
    await store.decide(appended[1].id, STATE_COMPLETED, DECIDED_AT, "ok")
    first = await store.claim_notifications("command", "a", T0, 1000, 2)
    assert first is not None
    assert ids(first.tasks) == [appended[0].id, appended[1].id]
    assert first.tasks[1].state == STATE_COMPLETED and first.tasks[1].note == "ok"
    assert (first.through_seq, first.pending) == (first.tasks[1].seq, 5)
    await store.finish_notifications("command", "a", None)
    again = await store.claim_notifications("command", "a", T0 + 1, 1000, 2)
    assert again == first
    await store.finish_notifications("command", "a", again.through_seq)
    second = await store.claim_notifications("command", "a", T0 + 2, 1000, 2)
    assert second is not None
    assert ids(second.tasks) == [appended[2].id, appended[3].id]
    assert second.pending == 3
    await store.finish_notifications("command", "a", second.through_seq)
    third = await store.claim_notifications("command", "a", T0 + 3, 1000, 10)
    assert third is not None
    assert (ids(third.tasks), third.pending) == ([appended[4].id], 1)
    await store.finish_notifications("command", "a", third.through_seq)
    assert await store.claim_notifications("command", "a", T0 + 4, 1000, 10) is None


@pytest_twisted.ensureDeferred
async def test_claim_lease(store: Store) -> None:
    """
    While a holder's lease runs, another holder gets None; the holder
    itself gets its batch again (lease renewed); once the lease ran out
    another holder takes it over, and the first one's finish then does
    nothing.
    """
    assert await store.claim_notifications("command", "a", T0, 1000, 10) is None
    await store.append(submission(1))
    held = await store.claim_notifications("command", "a", T0, 1000, 10)
    assert held is not None
    assert await store.claim_notifications("command", "b", T0 + 999, 1000, 10) is None
    renewed = await store.claim_notifications("command", "a", T0 + 500, 1000, 10)
    assert renewed == held
    # Renewed until T0 + 1500.
    assert await store.claim_notifications("command", "b", T0 + 1499, 1000, 10) is None
    taken = await store.claim_notifications("command", "b", T0 + 1500, 1000, 10)
    assert taken == held
    await store.finish_notifications("command", "a", held.through_seq)
    assert await store.claim_notifications("command", "c", T0 + 1600, 1000, 10) is None
    assert await store.claim_notifications("command", "b", T0 + 1600, 1000, 10) == held
    await store.finish_notifications("command", "b", held.through_seq)
    assert await store.claim_notifications("command", "c", T0 + 1700, 1000, 10) is None
    await store.append(submission(2))
    batch = await store.claim_notifications("command", "c", T0 + 1700, 1000, 10)
    assert batch is not None and ids(batch.tasks) == [submission(2).id]


@pytest_twisted.ensureDeferred
async def test_claim_nothing_new_holds_no_lease(store: Store) -> None:
    """
    A claim that finds nothing new answers None and leaves no lease: the
    next submission can be claimed by any holder.
    """
    assert await store.claim_notifications("command", "a", T0, 1000, 10) is None
    assert await store.claim_notifications("command", "a", T0 + 1, 1000, 10) is None
    await store.append(submission(1))
    batch = await store.claim_notifications("command", "b", T0 + 2, 1000, 10)
    assert batch is not None and ids(batch.tasks) == [submission(1).id]


@pytest_twisted.ensureDeferred
async def test_claim_channels_are_independent(store: Store) -> None:
    """
    Each channel has its own cursor and lease; finishing with a stale or
    foreign holder changes nothing.
    """
    assert await store.claim_notifications("command", "a", T0, 1000, 10) is None
    assert await store.claim_notifications("webhook", "a", T0, 1000, 10) is None
    await store.append(submission(1))
    command = await store.claim_notifications("command", "a", T0, 1000, 10)
    webhook = await store.claim_notifications("webhook", "b", T0, 1000, 10)
    assert command is not None and webhook == command
    await store.finish_notifications("command", "b", command.through_seq)
    await store.finish_notifications("nosuch", "a", command.through_seq)
    await store.finish_notifications("command", "a", command.through_seq)
    assert await store.claim_notifications("command", "a", T0, 1000, 10) is None
    assert await store.claim_notifications("webhook", "b", T0, 1000, 10) == webhook


@pytest_twisted.ensureDeferred
async def test_claim_bad_arguments(store: Store) -> None:
    """
    A claim's limit and lease are at least 1.
    """
    for limit, lease_ms in ((0, 1000), (10, 0), (-1, -1)):
        with pytest.raises(ValueError):
            await store.claim_notifications("command", "a", T0, lease_ms, limit)


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


@pytest_twisted.ensureDeferred
async def test_two_sqlite_stores_claim_once(db: Path) -> None:
    """
    Two stores on one SQLite file claiming one channel: each submission is
    claimed once.
    """
    one, two = open_store(db), open_store(db)
    try:
        await assert_each_claimed_once(one, two, 10)
    finally:
        await one.stopService()
        await two.stopService()


# Listeners.


@pytest_twisted.ensureDeferred
async def test_listeners_hear_commits_in_order(store: Store) -> None:
    """
    Every stored submission and decision reaches every listener, in commit
    order; refused and failed writes make no event.
    """
    first_listener: list[StoreEvent] = []
    store.subscribe(first_listener.append)
    heard = Heard(store)
    first, second = submission(1), submission(2)
    await store.append(first)
    await store.append(second)
    await store.decide(second.id, STATE_REJECTED, DECIDED_AT, None)
    with pytest.raises(StoreError):
        await store.append(submission(3, id=first.id))
    with pytest.raises(AlreadyDecided):
        await store.decide(second.id, STATE_COMPLETED, DECIDED_AT, None)
    with pytest.raises(ValueError):
        await store.decide(first.id, STATE_SUBMITTED, DECIDED_AT, None)
    assert await store.decide("receipt-9999", STATE_COMPLETED, DECIDED_AT, None) is None
    await store.decide(first.id, STATE_COMPLETED, DECIDED_AT, None)
    assert await heard.count(4) == [
        StoreEvent("submitted", first.id),
        StoreEvent("submitted", second.id),
        StoreEvent("decided", second.id),
        StoreEvent("decided", first.id),
    ]
    assert first_listener == heard.events


@pytest_twisted.ensureDeferred
async def test_listener_sees_committed_task(store: Store) -> None:
    """
    When a listener hears of a write, it is already readable: the event
    carries the id and the listener reads the rest.
    """
    reads: list[Deferred[StoredTask | None]] = []
    store.subscribe(lambda event: reads.append(store.get(event.task_id)))
    heard = Heard(store)
    stored = submission(1)
    await store.append(stored)
    await store.decide(stored.id, STATE_COMPLETED, DECIDED_AT, "ok")
    await heard.count(2)
    tasks = await gatherResults(reads)
    assert [task and task.submission for task in tasks] == [stored, stored]
    assert tasks[1] is not None and tasks[1].state == STATE_COMPLETED


@pytest_twisted.ensureDeferred
async def test_unsubscribe(store: Store) -> None:
    """
    An unsubscribed listener hears nothing more; unsubscribing twice is
    harmless; each subscription of the same callable is its own.
    """
    mine: list[StoreEvent] = []
    unsubscribe = store.subscribe(mine.append)
    second_subscription = store.subscribe(mine.append)
    heard = Heard(store)
    await store.append(submission(1))
    await heard.count(1)
    assert len(mine) == 2
    unsubscribe()
    unsubscribe()
    await store.append(submission(2))
    await heard.count(2)
    assert mine[2:] == [StoreEvent("submitted", submission(2).id)]
    second_subscription()
    await store.append(submission(3))
    await heard.count(3)
    assert len(mine) == 3
    heard.unsubscribe()
    heard.unsubscribe()


@pytest_twisted.ensureDeferred
async def test_unsubscribe_while_notifying(store: Store) -> None:
    """
    A listener unsubscribed by an earlier listener is not called any more,
    not even for the event being delivered.
    """
    mine: list[StoreEvent] = []
    unsubscribe_later: list[Any] = []
    store.subscribe(lambda event: unsubscribe_later[0]())
    unsubscribe_later.append(store.subscribe(mine.append))
    heard = Heard(store)
    await store.append(submission(1))
    await heard.count(1)
    assert mine == []


@pytest_twisted.ensureDeferred
async def test_failing_listener_is_logged_and_contained(
    store: Store, logged_events: Any
) -> None:
    """
    A listener that raises is logged as store.listener_failed, without the
    task's id; the other listeners still hear every event and the store
    keeps working.
    """
    logged_events.expect_failures()

    def broken(event: StoreEvent) -> None:
        raise RuntimeError("listener bug")

    store.subscribe(broken)
    heard = Heard(store)
    stored = submission(1)
    await store.append(stored)
    await store.decide(stored.id, STATE_COMPLETED, DECIDED_AT, "secret note")
    await store.append(submission(2))
    events = await heard.count(3)
    assert [event.kind for event in events] == ["submitted", "decided", "submitted"]
    failures = logged_events.named("store.listener_failed")
    assert [event["kind"] for event in failures] == [
        "submitted",
        "decided",
        "submitted",
    ]
    for event in failures:
        assert event["log_failure"].check(RuntimeError)
        text = formatEvent(event)
        assert stored.id not in text and "secret note" not in text
    assert logged_events.failures() == failures
    assert await store.get(submission(2).id) is not None


@pytest_twisted.ensureDeferred
async def test_listener_writing_keeps_commit_order(store: Store) -> None:
    """
    A listener that writes (here: decides what was just submitted) does not
    reorder what the other listeners hear.
    """
    decisions: list[Deferred[StoredTask | None]] = []

    def reviewer(event: StoreEvent) -> None:
        if event.kind == "submitted":
            decisions.append(
                store.decide(event.task_id, STATE_COMPLETED, DECIDED_AT, None)
            )

    store.subscribe(reviewer)
    heard = Heard(store)
    await store.append(submission(1))
    await heard.count(1)
    await store.append(submission(2))
    assert await heard.count(4) == [
        StoreEvent("submitted", submission(1).id),
        StoreEvent("decided", submission(1).id),
        StoreEvent("submitted", submission(2).id),
        StoreEvent("decided", submission(2).id),
    ]
    await gatherResults(decisions)


# The fake's own hooks.


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


@pytest_twisted.ensureDeferred
async def test_memory_fail_appends_fails_decisions() -> None:
    """
    MemoryStore.fail_appends also makes decisions fail with StoreError,
    record nothing and tell no listener.
    """
    memory = MemoryStore()
    heard: list[StoreEvent] = []
    memory.subscribe(heard.append)
    await memory.append(submission(1))
    memory.fail_appends = True
    with pytest.raises(StoreError):
        await memory.decide(submission(1).id, STATE_COMPLETED, DECIDED_AT, None)
    task = await memory.get(submission(1).id)
    assert task is not None and task.state == STATE_SUBMITTED
    assert heard == [StoreEvent("submitted", submission(1).id)]
    memory.fail_appends = False
    await memory.decide(submission(1).id, STATE_COMPLETED, DECIDED_AT, None)
    assert heard[-1] == StoreEvent("decided", submission(1).id)


@pytest_twisted.ensureDeferred
async def test_memory_fail_appends_fails_purges_and_claims() -> None:
    """
    MemoryStore.fail_appends also makes purges and notification claims and
    finishes fail with StoreError and change nothing.
    """
    memory = MemoryStore()
    assert await memory.claim_notifications("command", "a", T0, 1000, 10) is None
    await memory.append(submission(1))
    await memory.decide(submission(1).id, STATE_COMPLETED, DECIDED_AT, "n")
    before = await memory.get(submission(1).id)
    memory.fail_appends = True
    with pytest.raises(StoreError):
        await memory.purge(DECIDED_AT + 1, DECIDED_AT + 1)
    with pytest.raises(StoreError):
        await memory.claim_notifications("command", "a", T0, 1000, 10)
    with pytest.raises(StoreError):
        await memory.finish_notifications("command", "a", 1)
    memory.fail_appends = False
    assert await memory.get(submission(1).id) == before
    batch = await memory.claim_notifications("command", "a", T0, 1000, 10)
    assert batch is not None and batch.tasks == [before]


def test_memory_listeners_are_synchronous() -> None:
    """
    MemoryStore tells its listeners before append returns.
    """
    memory = MemoryStore()
    heard: list[StoreEvent] = []
    memory.subscribe(heard.append)
    memory.append(submission(1))
    assert heard == [StoreEvent("submitted", submission(1).id)]


def test_memory_append_decision() -> None:
    """
    The synchronous append_decision helper decides, or raises: KeyError for
    an unknown id, AlreadyDecided for a decided one.
    """
    memory = MemoryStore()
    memory.append(submission(1))
    memory.append_decision(submission(1).id, STATE_REJECTED, DECIDED_AT, "n")
    decided: list[StoredTask | None] = []
    memory.get(submission(1).id).addCallback(decided.append)
    assert decided[0] is not None
    assert (decided[0].state, decided[0].note) == (STATE_REJECTED, "n")
    with pytest.raises(AlreadyDecided):
        memory.append_decision(submission(1).id, STATE_COMPLETED, DECIDED_AT)
    with pytest.raises(KeyError):
        memory.append_decision("receipt-9999", STATE_COMPLETED, DECIDED_AT)


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


@pytest_twisted.ensureDeferred
async def test_large_mixed_batch_is_stored_row_for_row(sqlite_store: SQLiteStore) -> None:
    """
    A batch of 80 submissions with a decision in the middle (several
    multi-row INSERTs around it) stores every submission exactly, in order,
    and the decision, in one transaction.
    """
    alone = sqlite_store.append(submission(0))  # in flight: the rest queue
    batch = [sqlite_store.append(submission(n)) for n in range(1, 41)]
    decided = sqlite_store.decide(submission(0).id, STATE_REJECTED, DECIDED_AT, "no")
    batch += [sqlite_store.append(submission(n)) for n in range(41, 81)]
    await alone
    await gatherResults(batch)
    task = await decided
    assert task is not None and task.state == STATE_REJECTED
    assert sqlite_store.transactions == 2
    for n in range(1, 81):
        stored = await sqlite_store.get(submission(n).id)
        assert stored is not None and stored.submission == submission(n)
    page = await sqlite_store.list_tasks(limit=100, state=STATE_SUBMITTED)
    assert [t.submission.id for t in page.tasks] == [submission(n).id for n in range(80, 0, -1)]


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
    await sqlite_store.list_tasks(limit=1, search="submission")
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


# SQLite: purging leaves nothing in the files.


def file_bytes(db: Path) -> bytes:
    """
    The database file and its WAL, as they are on disk.
    """
    wal = db.with_name(db.name + "-wal")
    return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


@pytest_twisted.ensureDeferred
async def test_purge_erases_from_the_files(db: Path) -> None:
    """
    After a purge, no byte of the purged content (a short text, a long
    structured message spilling onto overflow pages, a note) is left in
    the database file or its WAL, even after many batches let the
    full-text index merge its segments; the content of submissions not
    purged is still there.
    """
    store = open_store(db)
    try:
        long_body = " ".join(f"zqxpurgedlong{n:05d}" for n in range(2000))
        doomed = [
            submission(0, content=text("the word zqxpurgedshort is here")),
            submission(1, content=structured("Zqxpurgedname", "Zqxpurgedsubject", long_body)),
        ]
        kept = submission(2, content=text("the word zqxkeptword stays"))
        for s in [*doomed, kept]:
            await store.append(s)
        # Many one-submission batches, each searched for: every search's
        # catch-up writes a segment of the full-text index, which merges
        # them as they pile up.
        for n in range(3, 120):
            await store.append(submission(n, content=text(f"filler zqxpurgedshort {n}")))
            assert (await store.list_tasks(limit=1, search="filler")).total == n - 2
        for s in doomed:
            await store.decide(s.id, STATE_REJECTED, DECIDED_AT, "zqxpurgednote")
        for n in range(3, 120):
            await store.decide(submission(n).id, STATE_REJECTED, DECIDED_AT, None)
        before = file_bytes(db)
        for word in (b"zqxpurgedshort", b"zqxpurgedlong01999", b"Zqxpurgedname", b"zqxpurgednote"):
            assert word in before
        assert await store.purge(DECIDED_AT + 1, DECIDED_AT + 2) == 119
        after = file_bytes(db)
        for word in (b"zqxpurged", b"Zqxpurged", b"filler"):
            assert word not in after
        assert b"zqxkeptword" in after
        assert not db.with_name(db.name + "-wal").exists() or db.with_name(
            db.name + "-wal"
        ).stat().st_size == 0
        page = await store.list_tasks(limit=5, search="zqxkeptword")
        assert ids(page.tasks) == [kept.id]
        assert (await store.list_tasks(limit=5, search="zqxpurgedshort")).total == 0
        # The store keeps working, and its index stays sound.
        await store.append(submission(200, content=text("zqxpurgedshort again")))
        assert (await store.list_tasks(limit=5, search="zqxpurgedshort")).total == 1
    finally:
        await store.stopService()
    connection = raw(db)
    try:
        connection.execute(
            "INSERT INTO submissions_fts (submissions_fts, rank) VALUES ('integrity-check', 1)"
        )
    finally:
        connection.close()


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
    alone = sqlite_store.append(submission(0))  # in flight: the rest queue
    queued = [
        sqlite_store.append(submission(1)),
        sqlite_store.decide(submission(0).id, STATE_REJECTED, DECIDED_AT, None),
        sqlite_store.decide(submission(1).id, STATE_COMPLETED, DECIDED_AT, None),
        sqlite_store.decide(submission(1).id, STATE_REJECTED, DECIDED_AT, None),
        sqlite_store.decide("receipt-9999", STATE_REJECTED, DECIDED_AT, None),
        sqlite_store.append(submission(2)),
    ]
    await alone
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
    alone = sqlite_store.append(submission(0))  # in flight: the rest queue
    decided = sqlite_store.decide(submission(0).id, STATE_COMPLETED, DECIDED_AT, None)
    doomed = [sqlite_store.append(submission(2)), sqlite_store.append(submission(2))]
    await alone
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
    (the appender's own callbacks first), with the write committed.
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
    first = sqlite_store.append(submission(1))
    second = sqlite_store.append(submission(2))
    first.addCallback(lambda _: order.append("answered 1"))
    second.addCallback(lambda _: order.append("answered 2"))
    await heard.count(2)
    assert order == ["answered 1", "heard submitted", "answered 2", "heard submitted"]
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
        page = await store.list_tasks(limit=10, search="oldword")
        assert ids(page.tasks) == [a[0]]
        assert ids((await store.list_tasks(limit=10, search="sender oldsubject")).tasks) == [a[1]]
        received = await store.list_tasks(limit=10, sort=SORT_RECEIVED)
        assert ids(received.tasks) == [a[1], a[3], a[0], a[2]]
        assert [t.submission for t in received.tasks] == [appended[i] for i in (1, 3, 0, 2)]
        await store.append(submission(4, content=text("a new oldword")))
        assert (await store.list_tasks(limit=10, search="oldword")).total == 2
        assert await store.purge(DECIDED_AT + 1, DECIDED_AT + 2) == 1
        task = await store.get(a[0])
        assert task is not None
        assert (task.submission.content, task.note, task.purged_at_ms) == (b"", None, DECIDED_AT + 2)
        assert ids((await store.list_tasks(limit=10, search="oldword")).tasks) == [submission(4).id]
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
        "first": PageRequest(limit=50, sort=SORT_RECEIVED),
        "after": PageRequest(limit=50, sort=SORT_RECEIVED, after=(T0, 5)),
        "filtered": PageRequest(
            limit=50, sort=SORT_RECEIVED, state=STATE_SUBMITTED, door="native"
        ),
    }.items():
        plans[name] = query_plan(db, *DIALECT.page_query(request))
    for name, plan in plans.items():
        assert "submissions_by_received" in plan, (name, plan)
        assert "TEMP B-TREE" not in plan, (name, plan)
    assert "received_at_ms<?" in plans["after"], plans["after"]
    prefix = PageRequest(limit=50, sort=SORT_RECEIVED, id_prefix="0ab1c2")
    for query in (DIALECT.page_query(prefix), DIALECT.count_query(prefix)):
        assert "sqlite_autoindex_submissions_1 (id>? AND id<?)" in query_plan(db, *query)
    # A search in the received order walks the index too (stopping at the
    # page's end), testing each row against the search's rowids; its count
    # starts from them.
    search = PageRequest(limit=50, sort=SORT_RECEIVED, search='"word"')
    plan = query_plan(db, *DIALECT.page_query(search))
    assert "SCAN s USING INDEX submissions_by_received" in plan, plan
    assert "VIRTUAL TABLE INDEX" in plan and "TEMP B-TREE" not in plan, plan
    plan = query_plan(db, *DIALECT.count_query(search))
    assert "INTEGER PRIMARY KEY" in plan and "VIRTUAL TABLE INDEX" in plan, plan


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
    page = await sqlite_store.list_tasks(limit=10, search="zqxfresh")
    assert ids(page.tasks) == [s.id for s in reversed(few)]
    assert index_state(db) == (3, 3, 3)
    many = [
        submission(n, content=text(f"zqxmany {n}"))
        for n in range(3, 3 + 2 * CATCH_UP_THRESHOLD + 7)
    ]
    await gatherResults([sqlite_store.append(s) for s in many])
    pages = await gatherResults(
        [sqlite_store.list_tasks(limit=1, search="zqxmany") for _ in range(3)]
    )
    assert [page.total for page in pages] == [len(many)] * 3
    assert (await sqlite_store.list_tasks(limit=5, search="zqxfresh")).total == 3
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
    assert (await sqlite_store.list_tasks(limit=5, search="zqxfirst")).total == 1
    before = index_tables(db)
    await sqlite_store.append(submission(1, content=text("zqxsecond")))
    assert index_tables(db) == before
    assert index_state(db) == (1, 1, 2)
    assert (await sqlite_store.list_tasks(limit=5, search="zqxsecond")).total == 1
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
        assert (await sqlite_store.list_tasks(limit=5, search=f"zqxdoomed{n}")).total == 0
    page = await sqlite_store.list_tasks(limit=10, search="zqxshared")
    assert ids(page.tasks) == [s.id for s in reversed(kept)]
    assert (await sqlite_store.list_tasks(limit=10, search="zqxkept")).total == 3
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
        page = await store.list_tasks(limit=10, search="zqxold")
        assert ids(page.tasks) == [appended[0].id, appended[1].id]
        assert ids((await store.list_tasks(limit=10, search="sender")).tasks) == [
            appended[1].id
        ]
        await store.append(submission(3, content=text("a new zqxold")))
        assert (await store.list_tasks(limit=10, search="zqxold")).total == 3
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
        assert (await store.list_tasks(limit=10, search="zqxleft")).total == 5
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
        assert (await two.list_tasks(limit=5, search="zqxfromone")).total == 1
        await two.append(submission(1, content=text("zqxfromtwo")))
        await one.append(submission(2, content=text("zqxfromone again")))
        pages = await gatherResults(
            [
                one.list_tasks(limit=5, search="zqxfromtwo"),
                two.list_tasks(limit=5, search="zqxfromone"),
                one.list_tasks(limit=5, search="zqxfromone"),
                two.list_tasks(limit=5, search="zqxfromtwo"),
            ]
        )
        assert [page.total for page in pages] == [1, 2, 2, 1]
        assert index_state(db) == (3, 3, 3)
    finally:
        await one.stopService()
        await two.stopService()
    check_index(db)


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
        await sqlite_store.list_tasks(limit=1)


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
    listing = sqlite_store.list_tasks(limit=1)
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
