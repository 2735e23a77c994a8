"""
The store's purge: on every backend (SQLite, the in-memory fake,
PostgreSQL), what a purge takes and counts, that search never finds a purged
submission, that no listener hears of it; and on SQLite, that a purged text
is left nowhere in the database file or its WAL.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import pytest_twisted

from beacon.store import (
    SORT_RECEIVED,
    SORT_UPDATED,
    STATE_COMPLETED,
    STATE_REJECTED,
    AlreadyDecided,
    StoreEvent,
    StoredTask,
    Submission,
    TaskQuery,
    TaskStatusRecord,
)
from store_support import (
    DECIDED_AT,
    Heard,
    Store,
    ids,
    open_store,
    raw,
    structured,
    submission,
    text,
)
from store_support import (  # noqa: F401 (fixtures)
    backend,
    db,
    store,
)


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
    page = await store.list_tasks(TaskQuery(sort=SORT_RECEIVED), limit=10)
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
    page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="shared words"), limit=10)
    assert page.total == 4
    await store.purge(DECIDED_AT + 5, DECIDED_AT + 6)
    assert (await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="secret0"), limit=10)).total == 0
    page = await store.list_tasks(TaskQuery(search="shared", sort=SORT_RECEIVED), limit=10)
    assert ids(page.tasks) == [s.id for s in reversed(appended[1:])]
    assert page.total == 3
    assert (await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="secret1"), limit=10)).total == 1


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
            assert (await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="filler"), limit=1)).total == n - 2
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
        page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxkeptword"), limit=5)
        assert ids(page.tasks) == [kept.id]
        assert (await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxpurgedshort"), limit=5)).total == 0
        # The store keeps working, and its index stays sound.
        await store.append(submission(200, content=text("zqxpurgedshort again")))
        assert (await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search="zqxpurgedshort"), limit=5)).total == 1
    finally:
        await store.stopService()
    connection = raw(db)
    try:
        connection.execute(
            "INSERT INTO submissions_fts (submissions_fts, rank) VALUES ('integrity-check', 1)"
        )
    finally:
        connection.close()
