"""
The submission store's contract: one behaviour suite over SQLiteStore,
MemoryStore and PostgreSQLStore (appends, status, the review surface's get,
list_tasks in both orders with every filter, decide, notification cursors
and listeners) and the in-memory fake's own hooks. Search and id prefixes
are in C{test_store_search.py}, purges in C{test_store_purge.py}, the
SQLite backend's own promises in C{test_store_sqlite.py}, PostgreSQL's in
C{test_store_postgres.py}; the fixtures and helpers they share in
C{store_support.py}.

SQLiteStore and PostgreSQLStore run their threads against the real global
reactor that pytest-twisted runs; tests wait on Deferreds, never on time
(a wait for a listener gives up after L{store_support.HEARD_TIMEOUT}).
PostgreSQL is this run's database (see C{peers.postgres}), a fresh schema
per test.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, gatherResults
from twisted.logger import formatEvent
from zope.interface.verify import verifyObject

from beacon.store import (
    SORT_RECEIVED,
    SORT_UPDATED,
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    AlreadyDecided,
    ISubmissionStore,
    StoreError,
    StoreEvent,
    StoredTask,
    Submission,
    TaskPage,
    TaskQuery,
    TaskStatusRecord,
)
from beacon.testing import MemoryStore
from store_support import (
    DECIDED_AT,
    T0,
    Heard,
    Store,
    all_pages,
    assert_each_claimed_once,
    ids,
    newest_first,
    open_store,
    received_newest_first,
    submission,
)
from store_support import (  # noqa: F401 (fixtures)
    backend,
    db,
    store,
)


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
    page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=10)
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
    assert await store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=5) == TaskPage(
        tasks=[], total=0, next_after=None
    )


@pytest_twisted.ensureDeferred
async def test_list_bad_limit(store: Store) -> None:
    """
    A page holds at least one task.
    """
    for limit in (0, -1):
        with pytest.raises(ValueError):
            await store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=limit)


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
    page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=10)
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
    status, status_timestamp_after (inclusive) and context_id each filter, and
    combine with AND; total counts what matches, not the page.
    """
    appended = [submission(n, received_at_ms=T0 + 10 * n) for n in range(6)]
    for s in appended:
        await store.append(s)
    await store.decide(appended[0].id, STATE_COMPLETED, T0 + 100, None)
    await store.decide(appended[1].id, STATE_REJECTED, T0 + 25, None)
    await store.decide(appended[2].id, STATE_COMPLETED, T0 + 30, None)

    async def listed(**filters: Any) -> tuple[list[str], int]:
        page = await store.list_tasks(TaskQuery(**{"sort": SORT_UPDATED, **filters}), limit=100)
        return ids(page.tasks), page.total

    a = [s.id for s in appended]
    assert await listed(status=STATE_SUBMITTED) == ([a[5], a[4], a[3]], 3)
    assert await listed(status=STATE_COMPLETED) == ([a[0], a[2]], 2)
    assert await listed(status=STATE_REJECTED) == ([a[1]], 1)
    assert await listed(status="TASK_STATE_WORKING") == ([], 0)
    # updated_at: a0 100, a5 50, a4 40, a3 30, a2 30, a1 25.
    assert await listed(status_timestamp_after=T0 + 30) == ([a[0], a[5], a[4], a[3], a[2]], 5)
    assert await listed(status_timestamp_after=T0 + 31) == ([a[0], a[5], a[4]], 3)
    assert await listed(status_timestamp_after=T0 + 101) == ([], 0)
    assert await listed(context_id=appended[4].context_id) == ([a[4]], 1)
    assert await listed(context_id="context-9999") == ([], 0)
    assert await listed(status=STATE_SUBMITTED, status_timestamp_after=T0 + 40) == (
        [a[5], a[4]],
        2,
    )
    assert await listed(status=STATE_COMPLETED, status_timestamp_after=T0 + 30) == (
        [a[0], a[2]],
        2,
    )
    assert await listed(status=STATE_COMPLETED, context_id=appended[4].context_id) == (
        [],
        0,
    )
    assert await listed(
        status=STATE_REJECTED,
        status_timestamp_after=T0 + 25,
        context_id=appended[1].context_id,
    ) == ([a[1]], 1)
    first = await store.list_tasks(TaskQuery(sort=SORT_UPDATED, status=STATE_SUBMITTED), limit=2)
    assert (ids(first.tasks), first.total) == ([a[5], a[4]], 3)
    rest = await store.list_tasks(TaskQuery(sort=SORT_UPDATED, status=STATE_SUBMITTED), limit=2, after=first.next_after)
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
        page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=3, after=after)
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
    tasks, pages = await all_pages(store, 2, status=STATE_REJECTED)
    assert ids(tasks) == [
        id_ for id_ in newest_first(appended, decided) if id_ in decided
    ]
    assert {page.total for page in pages} == {8}
    tasks, pages = await all_pages(store, 2, status_timestamp_after=T0 + 3)
    assert ids(tasks) == [
        id_
        for id_ in newest_first(appended, decided)
        if decided.get(id_) or int(id_[-4:]) // 3 >= 3
    ]
    assert {page.total for page in pages} == {len(tasks)}


# The reader's half: the received order, the new filters, search, id
# prefixes, purging and notification cursors.


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
    page = await store.list_tasks(TaskQuery(sort=SORT_RECEIVED), limit=3)
    assert ids(page.tasks) == [appended[3].id, appended[2].id, appended[0].id]
    assert page.total == 4
    last = page.tasks[-1]
    assert page.next_after == (last.submission.received_at_ms, last.seq)
    rest = await store.list_tasks(TaskQuery(sort=SORT_RECEIVED), limit=3, after=page.next_after)
    assert ids(rest.tasks) == [appended[1].id]
    assert rest.tasks[0].state == STATE_COMPLETED
    assert (rest.total, rest.next_after) == (4, None)
    by_update = await store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=10)
    assert ids(by_update.tasks)[0] == appended[1].id


@pytest_twisted.ensureDeferred
async def test_list_bad_sort(store: Store) -> None:
    """
    An order other than updated or received is a ValueError.
    """
    for sort in ("", "RECEIVED", "seq"):
        with pytest.raises(ValueError):
            await store.list_tasks(TaskQuery(sort=sort), limit=1)


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
        page = await store.list_tasks(TaskQuery(sort=SORT_RECEIVED), limit=2, after=after, with_total=False)
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
    door, since (inclusive) and until (exclusive)
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
        page = await store.list_tasks(TaskQuery(sort=sort, **filters), limit=100)
        assert page.total is not None
        return ids(page.tasks), page.total

    assert await listed(door="native") == ([a[7], a[5], a[3], a[1]], 4)
    assert await listed(door="a2a-jsonrpc") == ([a[6], a[4], a[2], a[0]], 4)
    assert await listed(door="websocket") == ([], 0)
    assert await listed(since=T0 + 50) == ([a[7], a[6], a[5]], 3)
    assert await listed(until=T0 + 20) == ([a[1], a[0]], 2)
    assert await listed(since=T0 + 20, until=T0 + 40) == (
        [a[3], a[2]],
        2,
    )
    assert await listed(since=T0 + 40, until=T0 + 40) == ([], 0)
    assert await listed(door="native", since=T0 + 10, until=T0 + 70) == (
        [a[5], a[3], a[1]],
        3,
    )
    assert await listed(door="native", status=STATE_COMPLETED) == ([a[1]], 1)
    assert await listed(door="a2a-jsonrpc", status=STATE_SUBMITTED) == (
        [a[4], a[2], a[0]],
        3,
    )
    assert await listed(until=T0 + 70, status_timestamp_after=T0 + 40) == (
        [a[6], a[5], a[4]],
        3,
    )
    assert await listed(door="native", context_id=appended[3].context_id) == ([a[3]], 1)
    assert await listed(door="native", context_id=appended[2].context_id) == ([], 0)
    # The status order keeps the filters; a6 was decided last, a1 first.
    assert await listed(SORT_UPDATED, since=T0 + 10) == (
        [a[6], a[7], a[5], a[4], a[3], a[2], a[1]],
        7,
    )
    assert await listed(SORT_UPDATED, door="native", until=T0 + 40) == (
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
        counted = await store.list_tasks(TaskQuery(sort=sort), limit=3)
        uncounted = await store.list_tasks(TaskQuery(sort=sort), limit=3, with_total=False)
        assert counted.total == 5
        assert uncounted == TaskPage(
            tasks=counted.tasks, total=None, next_after=counted.next_after
        )


@pytest_twisted.ensureDeferred
async def test_list_total_capped(store: Store) -> None:
    """
    With a total_cap, a total above it is the cap, marked capped; at or
    below it, the count, not marked; the page is the same either way.
    """
    for n in range(5):
        await store.append(submission(n))
    await store.decide(submission(1).id, STATE_REJECTED, DECIDED_AT, None)
    for sort in (SORT_UPDATED, SORT_RECEIVED):
        whole = await store.list_tasks(TaskQuery(sort=sort), limit=2)
        capped = await store.list_tasks(TaskQuery(sort=sort), limit=2, total_cap=4)
        assert (capped.total, capped.total_capped) == (4, True)
        assert (capped.tasks, capped.next_after) == (whole.tasks, whole.next_after)
        exact = await store.list_tasks(TaskQuery(sort=sort), limit=2, total_cap=5)
        assert (exact.total, exact.total_capped) == (5, False)
        status = TaskQuery(sort=sort, status=STATE_SUBMITTED)
        under = await store.list_tasks(status, limit=2, total_cap=3)
        assert (under.total, under.total_capped) == (3, True)
        assert (await store.list_tasks(status, limit=2, total_cap=4)).total_capped is False
        searched = TaskQuery(sort=sort, search="nothing-has-this")
        assert (await store.list_tasks(searched, limit=2, total_cap=0)).total == 0
        # A search alone, and a decided state alone, are counted on their
        # own (the full-text index; the decisions): capped alike.
        searched = TaskQuery(sort=sort, search="Submission")
        over = await store.list_tasks(searched, limit=2, total_cap=4)
        assert (over.total, over.total_capped, len(over.tasks)) == (4, True, 2)
        at = await store.list_tasks(searched, limit=2, total_cap=5)
        assert (at.total, at.total_capped, at.tasks) == (5, False, over.tasks)
        rejected = TaskQuery(sort=sort, status=STATE_REJECTED)
        over = await store.list_tasks(rejected, limit=2, total_cap=0)
        assert (over.total, over.total_capped, len(over.tasks)) == (0, True, 1)
        at = await store.list_tasks(rejected, limit=2, total_cap=1)
        assert (at.total, at.total_capped) == (1, False)


@pytest_twisted.ensureDeferred
async def test_decisions_in_one_batch(store: Store) -> None:
    """
    Decisions queued together (one batch: a set-based insert on
    PostgreSQL) each answer as when made alone: decided, unknown (None),
    already decided, also by an earlier decision of the same batch.
    """
    for n in range(4):
        await store.append(submission(n))
    a, b, c, d = (submission(n).id for n in range(4))
    await store.decide(d, STATE_COMPLETED, DECIDED_AT, "earlier")
    outcomes = await gatherResults(
        [
            store.decide(task_id, STATE_REJECTED, DECIDED_AT + 1, note).addCallbacks(
                lambda task: task and (task.submission.id, task.state, task.note),
                lambda failure: failure.trap(AlreadyDecided).__name__,
            )
            for task_id, note in (
                (a, None), (b, "bee"), ("receipt-9999", None), (b, "again"),
                (c, None), (d, None), (a, "again"),
            )
        ]
    )
    assert outcomes == [
        (a, STATE_REJECTED, None),
        (b, STATE_REJECTED, "bee"),
        None,
        "AlreadyDecided",
        (c, STATE_REJECTED, None),
        "AlreadyDecided",
        "AlreadyDecided",
    ]
    d_task = await store.get(d)
    assert d_task is not None and (d_task.state, d_task.note) == (STATE_COMPLETED, "earlier")
    page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED), limit=10)
    assert [t.submission.id for t in page.tasks] == [c, b, a, d]


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
