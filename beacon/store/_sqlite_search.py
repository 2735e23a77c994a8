"""
How the SQLite store reads a search's page and its total, so that neither
reads every match of a common word.

FTS5 gives a search's matches as rowids (the submissions' C{seq}) in rowid
order, and the received order is not rowid order. The shared query
(L{beacon.store._sql.Dialect.page_query}) walks the received order's index
and tests each row against the set of the search's rowids: SQLite builds
that set first, from every match. For a word in a few thousand
submissions that is cheap; for one in nearly all of a million it reads
and sorts a million rowids (some 120 ms) to fill a page of 50. Asking
FTS5 about each walked row instead (a correlated C{EXISTS}) costs tens of
microseconds a row: cheap for a common word, where a page is found within
its first hundred rows, ruinous for a rare one.

So a search in the received order first counts its matches, up to
L{SPARSE_MATCHES} (FTS5 streams them: well under a millisecond). A search
with no more reads them whole, as the shared query does. A search with
more reads the page from a window: the first rows of the walk, the
search's other filters and cursor applied, and among them the ones whose
rowid is in the search's matches from the window's smallest C{seq} up.
Since a submission's C{seq} follows its receipt closely, those matches
are about as many as the window's matches, not all of them. If the window
holds a full page of matches, the page is theirs: the window is the
walk's beginning. If the window holds every row the walk would visit,
its matches are the whole page. Otherwise a window L{WINDOW_GROWTH} times
larger is read, up to L{WINDOW_TRIES} windows, and then the whole set
after all. However the C{seq}s fall, the page is the same; only its cost
depends on them.

A search's total, when the search is the query's only filter, is counted
from FTS5 alone (every indexed rowid is a stored submission, and a purge
takes its text out of the index), up to the cap, without reading a
submission. With other filters it is the shared count.
"""

from __future__ import annotations

__all__ = ["SPARSE_MATCHES", "WINDOW_GROWTH", "WINDOW_TRIES", "search_count", "search_rows"]

import sqlite3
from dataclasses import replace
from typing import Any

from beacon.protocol import STATE_SUBMITTED
from beacon.protocol.query import SORT_RECEIVED
from beacon.store._sql import TASK_COLUMNS, TASK_JOINS, PageRequest
from beacon.store._sqlite_schema import DIALECT, SEARCH_TABLE

#: A search with at most this many matches has its received-order page
#: read from all of them (materialised, a few milliseconds at most).
SPARSE_MATCHES = 10_000

#: The first window of a search with more matches, in rows walked per row
#: of the page (so some 800 for a page of 50): enough for a word in one
#: submission in ten.
WINDOW_ROWS_PER_ROW = 16

#: How much larger each further window is than the one before.
WINDOW_GROWTH = 8

#: How many windows are read before the page is read from every match.
WINDOW_TRIES = 3

_MATCHES = f"SELECT rowid FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH ?"


def _search_only(request: PageRequest) -> bool:
    """
    Whether the search is C{request}'s only filter.
    """
    return not replace(request.query, search=None).filtered()


def search_count(request: PageRequest) -> tuple[str, list[object]] | None:
    """
    The count of C{request}'s total from the full-text index alone, if the
    search is its only filter, and its parameters; else L{None} (the
    shared count then).
    """
    if request.search is None or not _search_only(request):
        return None
    if request.total_cap is None:
        return f"SELECT COUNT(*) FROM ({_MATCHES})", [request.search]
    return (
        f"SELECT COUNT(*) FROM ({_MATCHES} LIMIT ?)",
        [request.search, request.total_cap + 1],
    )


def _windowed(request: PageRequest) -> tuple[str, str, list[object]]:
    """
    The query of C{request}'s page from a window of the walk (its
    parameters: the window's size, then the page's size), the query of the
    window's size alone (its parameter: the window's size), and the other
    parameters, which both take first.
    """
    where, params, join = DIALECT.received_walk(replace(request, search=None))
    walk = f"""
        SELECT s.seq AS seq, s.received_at_ms AS received_at_ms
        FROM submissions AS s {join}
        WHERE {where}
        ORDER BY s.received_at_ms DESC, s.seq DESC
        LIMIT ?
    """
    page = f"""
        WITH walked AS ({walk})
        SELECT {TASK_COLUMNS}
        FROM walked AS w
        JOIN submissions AS s ON s.seq = w.seq
        {TASK_JOINS}
        WHERE w.seq IN (
            {_MATCHES} AND rowid >= (SELECT MIN(seq) FROM walked)
        )
        ORDER BY w.received_at_ms DESC, w.seq DESC
        LIMIT ?
    """
    return page, f"SELECT COUNT(*) FROM ({walk})", params


def search_rows(
    connection: sqlite3.Connection,
    request: PageRequest,
    matches: int | None,
    *,
    sparse: int = SPARSE_MATCHES,
    rows_per_row: int = WINDOW_ROWS_PER_ROW,
    tries: int = WINDOW_TRIES,
) -> list[Any] | None:
    """
    In the open read transaction: the rows of C{request}'s page (of
    L{TASK_COLUMNS}, one more than the page when another follows), if it
    is a search in the received order, read as the module says; else
    L{None} (the shared page query then).

    @param matches: How many submissions match the search, if known
        (counted up to at least C{sparse}, one more meaning "more"), from
        L{search_count}.
    @param sparse: L{SPARSE_MATCHES}.
    @param rows_per_row: L{WINDOW_ROWS_PER_ROW}.
    @param tries: L{WINDOW_TRIES}.
    """
    query = request.query
    if (
        request.search is None
        or request.sort != SORT_RECEIVED
        or query.status not in (None, STATE_SUBMITTED)
    ):
        return None
    if matches is None:
        (matches,) = connection.execute(
            f"SELECT COUNT(*) FROM ({_MATCHES} LIMIT ?)", (request.search, sparse + 1)
        ).fetchone()
    if matches <= sparse:
        return None
    page, walked, params = _windowed(request)
    size = request.limit + 1
    window = rows_per_row * size
    for _ in range(tries):
        rows = connection.execute(page, [*params, window, request.search, size]).fetchall()
        if len(rows) == size:
            return rows
        (visited,) = connection.execute(walked, [*params, window]).fetchone()
        if visited < window:
            return rows
        window *= WINDOW_GROWTH
    return None
