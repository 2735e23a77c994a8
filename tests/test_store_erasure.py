"""
Erasure checked in PostgreSQL's files: a purged submission's words (a short
text, a long structured message that PostgreSQL keeps in the table's TOAST
relation, a decision's note) are searched for, as plain bytes, in every file
of the server's data directory: the database's tables, TOAST relations and
indexes (the full-text GIN index holds each word as a key) under
C{base/<oid>/}, and the write-ahead log's segments under C{pg_wal/}.

Each test runs on a cluster of its own (L{PrivateCluster}), whose files it
can read and on which it may switch the WAL and make checkpoints without
touching the machine's server. Every word is random, so no other file holds
it by chance; the long message's body is random text, which PostgreSQL's
TOAST compression (pglz) cannot shrink, so its words stay readable bytes.

SQLite's files (the database and its WAL) are checked in
C{test_store_purge.py}.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_twisted
from peers.postgres import (  # noqa: F401 (fixtures)
    PrivateCluster,
    private_cluster,
    require_private_cluster,
)
from store_support import DECIDED_AT, structured, submission, text
from twisted.internet import reactor as _reactor
from twisted.internet.interfaces import IReactorFromThreads

from beacon.store import (
    SORT_UPDATED,
    STATE_REJECTED,
    PostgreSQLStore,
    StoreError,
    TaskQuery,
)

reactor = IReactorFromThreads(_reactor)

DATABASE = "beacon_erasure"


def canary(label: str) -> str:
    """A word no file holds by chance, lower case (as the search's lexemes are)."""
    return f"zqx{label}{secrets.token_hex(10)}"


def random_words(size: int) -> str:
    """
    About C{size} characters of random words: text pglz cannot compress,
    so that what PostgreSQL stores of it is the text itself.
    """
    words: list[str] = []
    length = 0
    while length < size:
        word = secrets.token_urlsafe(9)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def holding(root: Path, words: list[str]) -> dict[str, list[str]]:
    """
    For each word, the files under C{root} (relative paths, sorted) whose
    bytes hold it.
    """
    needles = {word: word.encode() for word in words}
    found: dict[str, list[str]] = {word: [] for word in words}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue  # removed while we walked (a WAL segment, a temporary file)
            for word, needle in needles.items():
                if needle in data:
                    found[word].append(str(path.relative_to(root)))
    return {word: sorted(paths) for word, paths in found.items()}


def named(cluster: PrivateCluster, found: dict[str, list[str]]) -> dict[str, list[str]]:
    """
    C{found}, each file of a relation named by its relation (C{submissions},
    C{pg_toast_16390}, C{submissions_search}), for a failing test's message.
    """
    with admin(cluster) as connection:
        names = dict(
            connection.execute(
                "SELECT pg_relation_filepath(oid), relname FROM pg_class"
                " WHERE pg_relation_filepath(oid) IS NOT NULL"
            ).fetchall()
        )
    return {
        word: [names.get(p.split(".")[0].split("_")[0], p) for p in paths]
        for word, paths in found.items()
    }


def outside_wal(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """C{found}, without the files of C{pg_wal}."""
    return {
        word: [p for p in paths if not p.startswith("pg_wal/")]
        for word, paths in found.items()
    }


def in_wal(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """C{found}, only the files of C{pg_wal}."""
    return {
        word: [p for p in paths if p.startswith("pg_wal/")]
        for word, paths in found.items()
    }


@pytest.fixture(params=["on", "off"], ids=["wal_recycle=on", "wal_recycle=off"])
def cluster(request: pytest.FixtureRequest) -> Iterator[PrivateCluster]:
    """
    A started cluster of this test's own, with C{wal_recycle} as the
    parameter says (C{on} is PostgreSQL's default), and Beacon's database
    in it; skipped where none can run (failed when C{CI=true}).
    """
    require_private_cluster()
    with PrivateCluster(settings={"wal_recycle": request.param}) as cluster:
        cluster.start()
        with psycopg.connect(cluster.url, autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {DATABASE}")
        yield cluster


def database_url(cluster: PrivateCluster) -> str:
    """The URL of Beacon's database in C{cluster}, as its superuser."""
    return cluster.url.rsplit("/", 1)[0] + "/" + DATABASE


def admin(cluster: PrivateCluster) -> psycopg.Connection[Any]:
    """A superuser's autocommit connection to Beacon's database."""
    return psycopg.connect(database_url(cluster), autocommit=True)


@pytest_twisted.ensureDeferred
async def test_purge_erases_from_the_files(cluster: PrivateCluster) -> None:
    """
    Before the purge, the database's files (once checkpointed) hold every
    word, each in its table, TOAST relation or index; right after it, no
    file of the data directory outside C{pg_wal} holds a purged word, and
    the words of a submission not purged are still there. The WAL still
    holds the purged words (the manual says so); after C{pg_switch_wal()}
    and a C{CHECKPOINT}, PostgreSQL removes the segments that held them
    when C{wal_recycle} is off, and keeps them, renamed for reuse, when it
    is on (their bytes stay until new WAL overwrites them).
    """
    short, long, name, note, kept = (
        canary(label) for label in ("short", "long", "name", "note", "kept")
    )
    doomed = [
        submission(0, content=text(f"the word {short} is here")),
        submission(
            1,
            content=structured(name, "a long one", f"{long} {random_words(12_000)}"),
        ),
    ]
    others = [
        submission(2, content=text(f"the word {kept} stays")),
        submission(3, content=text("undecided, stays")),
    ]
    purged_words = [short, long, name, note]
    words = [*purged_words, kept]
    data = Path(cluster.data)
    store = PostgreSQLStore(database_url(cluster), reactor)
    store.startService()
    try:
        for s in [*doomed, *others]:
            await store.append(s)
        for s in doomed:
            await store.decide(s.id, STATE_REJECTED, DECIDED_AT, note)
        await store.decide(others[0].id, STATE_REJECTED, DECIDED_AT + 10, None)
        with admin(cluster) as connection:
            connection.execute("CHECKPOINT")
            (oid,) = connection.execute(
                "SELECT oid FROM pg_database WHERE datname = current_database()"
            ).fetchone() or (None,)
            toast = connection.execute(
                "SELECT pg_relation_filepath(reltoastrelid) FROM pg_class"
                " WHERE relname = 'submissions'"
            ).fetchone()
            index = connection.execute(
                "SELECT pg_relation_filepath('submissions_search')"
            ).fetchone()
        assert toast is not None and index is not None
        before = holding(data, words)
        tables = outside_wal(before)
        assert all(tables[word] for word in words), tables
        assert all(p.startswith(f"base/{oid}/") for w in words for p in tables[w]), tables
        # The long message is in the TOAST relation; every word is a key
        # of the full-text index.
        assert toast[0] in tables[long], tables
        assert all(index[0] in tables[w] for w in (short, long, name, kept)), tables

        assert await store.purge(DECIDED_AT + 1, DECIDED_AT + 2) == 2

        left = outside_wal(holding(data, purged_words))
        assert all(not left[word] for word in purged_words), named(cluster, left)
        with admin(cluster) as connection:
            connection.execute("CHECKPOINT")
        after = holding(data, words)
        left = outside_wal(after)
        assert all(not left[word] for word in purged_words), named(cluster, left)
        assert left[kept], named(cluster, left)
        # The write-ahead log holds what was written to it: the purged
        # words are still in its segments.
        wal = in_wal(after)
        assert wal[short] and wal[note], wal
        # The store goes on: its search finds the kept word only.
        page = await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search=kept), limit=5)
        assert [t.submission.id for t in page.tasks] == [others[0].id]
        assert (
            await store.list_tasks(TaskQuery(sort=SORT_UPDATED, search=short), limit=5)
        ).total == 0
    finally:
        await store.stopService()

    # What the manual tells an operator to do about the WAL.
    with admin(cluster) as connection:
        connection.execute("SELECT pg_switch_wal()")
        connection.execute("CHECKPOINT")
        (recycle,) = connection.execute("SHOW wal_recycle").fetchone() or (None,)
    wal = in_wal(holding(data, purged_words))
    if recycle == "off":
        assert all(not wal[word] for word in purged_words), wal
    else:
        assert wal[short] and wal[note], wal


@pytest_twisted.ensureDeferred
async def test_purge_by_a_role_that_may_not_rewrite(
    private_cluster: PrivateCluster, logged_events: Any
) -> None:
    """
    A store whose role may write but does not own the tables (so that
    VACUUM FULL would skip them with a warning only) purges, then fails the
    purge saying that the erased content stays in the table files until
    their owner rewrites them, and that the purge itself was made.
    """
    with psycopg.connect(private_cluster.url, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {DATABASE}")
    owner_url = database_url(private_cluster)
    owner = PostgreSQLStore(owner_url, reactor)
    owner.startService()
    await owner.append(submission(0, content=text("a word")))
    await owner.decide(submission(0).id, STATE_REJECTED, DECIDED_AT, None)
    await owner.stopService()
    with admin(private_cluster) as connection:
        for statement in (
            "CREATE ROLE writer LOGIN",
            # Start-up's migration runs CREATE TABLE IF NOT EXISTS.
            "GRANT CREATE ON SCHEMA public TO writer",
            "GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO writer",
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO writer",
        ):
            connection.execute(statement)
    writer = PostgreSQLStore(owner_url.replace("//postgres@", "//writer@"), reactor)
    writer.startService()
    try:
        with pytest.raises(StoreError) as failed:
            await writer.purge(DECIDED_AT + 1, DECIDED_AT + 2)
        message = str(failed.value)
        assert "purged 1 submission(s)" in message, message
        assert "may not rewrite events, submissions (VACUUM FULL)" in message, message
        task = await writer.get(submission(0).id)
        assert task is not None and task.purged_at_ms == DECIDED_AT + 2
    finally:
        await writer.stopService()
