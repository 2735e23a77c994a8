"""
list_tasks' queries against a model, property-based (Hypothesis): for
generated submissions (ties in time, two doors, ids sharing prefixes, words
in text and structured content, decisions, purges) and a generated request
(either order, every filter, any page size), following the pages visits
exactly the tasks the model keeps, in the model's order, each once, with
the model's total on every page.

The SQL runs synchronously on a connection of the test's own, through the
backends' own read function (C{_select_page}), so that Hypothesis can run
many examples without a reactor: SQLite in memory (a fresh database per
example), PostgreSQL in this test's schema (each example in a transaction
rolled back at its end). MemoryStore, whose Deferreds have fired when it
returns them, runs through list_tasks itself. The shared suite in
C{test_store.py} runs the same API through the running stores.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from peers.postgres import RunDatabase, pg_schema, postgresql  # noqa: F401 (fixtures)
from twisted.internet import reactor as _reactor
from twisted.internet.interfaces import IReactorFromThreads
from twisted.python.failure import Failure

from beacon.store import (
    SORT_RECEIVED,
    SORT_UPDATED,
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    PostgreSQLStore,
    SQLiteStore,
    Submission,
    TaskPage,
    TaskQuery,
    search_words,
    upgrade,
)
from beacon.store import _sqlite, _sqlite_schema
from beacon.store._sql import PageRequest
from beacon.testing import MemoryStore

reactor = IReactorFromThreads(_reactor)

T0 = 1_700_000_000_000

#: The words content is made of: several scripts and cases, a digit.
VOCABULARY = ["alpha", "Beta", "gamma", "délta", "ÉPSILON", "x1"]

PREFIXES = ["0ab1c2", "0ab1c3", "vvvvvv"]
DOORS = ["a2a-jsonrpc", "native"]


@dataclass(frozen=True)
class Stored:
    """
    One generated submission, with what happens to it.

    @ivar received: Its receipt time, in ms after T0.
    @ivar decided: Its decision (state, ms after T0), if any.
    """

    prefix: int
    door: int
    received: int
    structured: bool
    words: tuple[str, ...]
    decided: tuple[str, int] | None


@dataclass(frozen=True)
class Case:
    """
    A generated store and request.

    @ivar purge_before: Every submission decided before this (ms after T0)
        is purged, if not None.
    """

    stored: tuple[Stored, ...]
    purge_before: int | None
    sort: str
    limit: int
    filters: dict[str, Any] = field(default_factory=dict)


def submission_of(n: int, stored: Stored) -> Submission:
    """
    The submission numbered C{n} that C{stored} describes.
    """
    text = " ".join(stored.words)
    if stored.structured:
        document: dict[str, Any] = {
            "message": {"from": {"name": "Someone"}, "subject": text, "body": "."}
        }
    else:
        document = {"text": text}
    content = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    return Submission(
        id=f"{PREFIXES[stored.prefix]}{n:030d}",
        context_id=f"context-{n % 3}",
        received_at_ms=T0 + stored.received,
        door=DOORS[stored.door],
        source="192.0.2.1",
        kind="structured" if stored.structured else "text",
        message_id=f"m{n}",
        content=content,
        sha256=hashlib.sha256(content).hexdigest(),
    )


def expected(case: Case) -> list[str]:
    """
    The ids the model keeps, in the model's order.
    """
    f = case.filters
    kept = []
    for n, stored in enumerate(case.stored):
        s = submission_of(n, stored)
        state, updated = STATE_SUBMITTED, s.received_at_ms
        if stored.decided is not None:
            state, updated = stored.decided[0], T0 + stored.decided[1]
        purged = (
            stored.decided is not None
            and case.purge_before is not None
            and stored.decided[1] < case.purge_before
        )
        if f.get("status") is not None and state != f["status"]:
            continue
        if f.get("status_timestamp_after") is not None and updated < f["status_timestamp_after"]:
            continue
        if f.get("context_id") is not None and s.context_id != f["context_id"]:
            continue
        if f.get("door") is not None and s.door != f["door"]:
            continue
        if f.get("since") is not None and s.received_at_ms < f["since"]:
            continue
        if f.get("until") is not None and s.received_at_ms >= f["until"]:
            continue
        if f.get("id_prefix") is not None and not s.id.startswith(f["id_prefix"]):
            continue
        if f.get("search") is not None:
            have = set() if purged else {w.lower() for w in search_words(" ".join(stored.words))}
            if not {w.lower() for w in search_words(f["search"])} <= have:
                continue
        key = s.received_at_ms if case.sort == SORT_RECEIVED else updated
        kept.append((key, n, s.id))
    return [id_ for _, _, id_ in sorted(kept, reverse=True)]


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """
    C{strategy}'s values, or None.
    """
    return st.one_of(st.none(), strategy)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """
    A store of up to 14 submissions and one request.
    """
    stored = draw(
        st.lists(
            st.builds(
                Stored,
                prefix=st.integers(0, len(PREFIXES) - 1),
                door=st.integers(0, len(DOORS) - 1),
                received=st.integers(0, 5),
                structured=st.booleans(),
                words=st.lists(st.sampled_from(VOCABULARY), max_size=3).map(tuple),
                decided=optional(
                    st.tuples(st.sampled_from([STATE_COMPLETED, STATE_REJECTED]), st.integers(0, 8))
                ),
            ),
            max_size=14,
        )
    )
    search = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=2).map(
        lambda words: ", ".join(w.upper() if len(w) % 2 else w for w in words)
    )
    filters = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "status": st.sampled_from([STATE_SUBMITTED, STATE_COMPLETED, STATE_REJECTED]),
                "status_timestamp_after": st.integers(0, 9).map(lambda t: T0 + t),
                "context_id": st.sampled_from(["context-0", "context-1"]),
                "door": st.sampled_from(DOORS),
                "since": st.integers(0, 6).map(lambda t: T0 + t),
                "until": st.integers(0, 6).map(lambda t: T0 + t),
                "search": search,
                "id_prefix": st.sampled_from(PREFIXES + ["0ab1c2000"]),
            },
        )
    )
    return Case(
        stored=tuple(stored),
        purge_before=draw(optional(st.integers(0, 9))),
        sort=draw(st.sampled_from([SORT_UPDATED, SORT_RECEIVED])),
        limit=draw(st.integers(1, 5)),
        filters=filters,
    )


# Examples worth keeping whatever the search finds: ties at page
# boundaries in both orders, a search that only a purged task would match,
# every filter at once.
TIES = tuple(
    Stored(prefix=n % 2, door=n % 2, received=n // 3, structured=bool(n % 2),
           words=("alpha",), decided=None)
    for n in range(7)
)
EXAMPLES = [
    Case(stored=TIES, purge_before=None, sort=SORT_RECEIVED, limit=2),
    Case(stored=TIES, purge_before=None, sort=SORT_UPDATED, limit=3),
    Case(
        stored=(
            Stored(0, 0, 1, False, ("Beta", "gamma"), (STATE_COMPLETED, 1)),
            Stored(0, 1, 1, True, ("beta",), (STATE_REJECTED, 5)),
            Stored(1, 0, 2, False, ("BETA", "x1"), None),
        ),
        purge_before=3,
        sort=SORT_RECEIVED,
        limit=1,
        filters={"search": "beta"},
    ),
    Case(
        stored=TIES,
        purge_before=None,
        sort=SORT_UPDATED,
        limit=1,
        filters={
            "status": STATE_SUBMITTED,
            "status_timestamp_after": T0,
            "context_id": "context-1",
            "door": "native",
            "since": T0 + 1,
            "until": T0 + 3,
            "search": "ALPHA",
            "id_prefix": "0ab1c3",
        },
    ),
]


#: How a walk asks for its pages: with the total (counted exactly: the
#: stores then read a page of few tasks from all of them), without it
#: (a walk in the page's order), and with it capped at 1 (counted to 2,
#: so not exactly once more than one task matches).
COUNTS: tuple[dict[str, Any], ...] = (
    {"with_total": True, "total_cap": None},
    {"with_total": False, "total_cap": None},
    {"with_total": True, "total_cap": 1},
)


def check_walk(case: Case, read_page: Any) -> None:
    """
    Follow the pages C{read_page(after, counting)} answers, for each of
    L{COUNTS}, and compare them with the model.
    """
    want = expected(case)
    for counting in COUNTS:
        got: list[str] = []
        after: tuple[int, int] | None = None
        pages = 0
        cap = counting["total_cap"]
        while True:
            page: TaskPage = read_page(after, counting)
            pages += 1
            assert pages <= len(want) + 1, "the pages do not end"
            if not counting["with_total"]:
                assert page.total is None
            elif cap is None:
                assert page.total == len(want)
            else:
                assert (page.total, page.total_capped) == (min(len(want), cap), len(want) > cap)
            got += [task.submission.id for task in page.tasks]
            if page.next_after is None:
                break
            assert len(page.tasks) == case.limit
            last = page.tasks[-1]
            key = (
                last.submission.received_at_ms
                if case.sort == SORT_RECEIVED
                else last.updated_at_ms
            )
            assert page.next_after == (key, last.seq)
            after = page.next_after
        assert got == want, counting


def with_examples(test: Any) -> Any:
    """
    C{test} with every case of L{EXAMPLES} as an explicit example.
    """
    for case in EXAMPLES:
        test = example(case=case)(test)
    return test


# MemoryStore.


def fired(deferred: Any) -> Any:
    """
    What an already fired Deferred holds (MemoryStore's are).
    """
    results: list[Any] = []
    deferred.addBoth(results.append)
    assert results, "the Deferred has not fired"
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]


@settings(max_examples=150)
@with_examples
@given(case=cases())
def test_memory_store_pages_like_the_model(case: Case) -> None:
    """
    MemoryStore's list_tasks pages as the model says.
    """
    store = MemoryStore()
    for n, stored in enumerate(case.stored):
        fired(store.append(submission_of(n, stored)))
    for n, stored in enumerate(case.stored):
        if stored.decided is not None:
            fired(store.decide(submission_of(n, stored).id, stored.decided[0], T0 + stored.decided[1], "note"))
    if case.purge_before is not None:
        fired(store.purge(T0 + case.purge_before, T0 + 100))

    def read_page(after: tuple[int, int] | None, counting: dict[str, Any]) -> TaskPage:
        return fired(  # type: ignore[no-any-return]
            store.list_tasks(
                TaskQuery(sort=case.sort, **case.filters), limit=case.limit, after=after, **counting
            )
        )

    check_walk(case, read_page)


# SQLite, in memory.


@contextmanager
def sqlite_database() -> Iterator[sqlite3.Connection]:
    """
    A fresh database in memory, with Beacon's schema.
    """
    connection = _sqlite.connect(":memory:", query_only=False)
    try:
        connection.execute("BEGIN")
        for migration in _sqlite.MIGRATIONS:
            for statement in migration:
                connection.execute(statement)
        connection.execute("COMMIT")
        yield connection
    finally:
        connection.close()


def request_of(
    case: Case, dialect: Any, after: tuple[int, int] | None, counting: dict[str, Any]
) -> PageRequest:
    """
    The PageRequest list_tasks makes of C{case}'s request, counted as
    C{counting} says (see L{COUNTS}).
    """
    query = TaskQuery(sort=case.sort, **case.filters)
    search = None
    if query.search is not None:
        search = dialect.search_parameter(query.search)
        assert search is not None
    return PageRequest(query, limit=case.limit, after=after, search=search, **counting)


def store_rows(connection: Any, case: Case, mark: str) -> None:
    """
    Insert C{case}'s submissions and decisions as the stores do.
    """
    for n, stored in enumerate(case.stored):
        s = submission_of(n, stored)
        connection.execute(
            "INSERT INTO submissions (id, context_id, received_at_ms, door, source,"
            " kind, message_id, content, sha256)"
            f" VALUES ({', '.join([mark] * 9)})",
            (s.id, s.context_id, s.received_at_ms, s.door, s.source, s.kind,
             s.message_id, s.content, s.sha256),
        )
    for n, stored in enumerate(case.stored):
        if stored.decided is not None:
            connection.execute(
                f"INSERT INTO events (submission_id, state, at_ms, note) VALUES ({mark}, {mark}, {mark}, 'n')",
                (submission_of(n, stored).id, stored.decided[0], T0 + stored.decided[1]),
            )


@settings(max_examples=150)
@with_examples
@given(case=cases())
def test_sqlite_queries_page_like_the_model(case: Case) -> None:
    """
    SQLite's queries (its FTS5 search included) page as the model says.
    """
    store = SQLiteStore(":memory:", reactor)
    with sqlite_database() as connection:
        connection.execute("BEGIN")
        store_rows(connection, case, "?")
        if case.purge_before is not None:
            # The purge indexes the rows first, as it must.
            store._purge_rows(connection, T0 + case.purge_before, T0 + 100)
        # What a search's catch-up does before it reads.
        _sqlite_schema.index_pending(connection, None)
        connection.execute("COMMIT")

        def read_page(after: tuple[int, int] | None, counting: dict[str, Any]) -> TaskPage:
            return store._select_page(
                connection, request_of(case, _sqlite.DIALECT, after, counting)
            )

        check_walk(case, read_page)


# PostgreSQL, in this test's schema.


@pytest.fixture
def pg_connection(
    postgresql: RunDatabase, pg_schema: tuple[str, str]  # noqa: F811
) -> Iterator[psycopg.Connection[Any]]:
    """
    A connection to this test's schema, migrated.
    """
    schema, url = pg_schema
    upgrade(url)
    with postgresql.connect(schema) as connection:
        yield connection


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@with_examples
@given(case=cases())
def test_postgresql_queries_page_like_the_model(
    pg_connection: psycopg.Connection[Any], case: Case
) -> None:
    """
    PostgreSQL's queries (its tsvector search included) page as the model
    says.
    """
    from beacon.store._postgres import DIALECT

    store = PostgreSQLStore("postgresql://unused@127.0.0.1/unused", reactor)
    with pg_connection.transaction(force_rollback=True):
        store_rows(pg_connection, case, "%s")
        if case.purge_before is not None:
            store._purge_rows(pg_connection, T0 + case.purge_before, T0 + 100)

        def read_page(after: tuple[int, int] | None, counting: dict[str, Any]) -> TaskPage:
            return store._select_page(pg_connection, request_of(case, DIALECT, after, counting))

        check_walk(case, read_page)


def test_model_sanity() -> None:
    """
    The model itself: the first example's received order, ties by arrival.
    """
    ids = expected(EXAMPLES[0])
    assert ids[:3] == [submission_of(n, TIES[n]).id for n in (6, 5, 4)]
