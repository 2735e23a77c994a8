"""
The embedded store's database: SQLite's schema, its migrations, the
full-text search index and the SQL that writes and indexes submissions, as
L{beacon.store._postgres_schema} is PostgreSQL's. L{beacon.store._sqlite}'s
L{SQLiteStore<beacon.store._sqlite.SQLiteStore>} runs them on its threads.

The schema is created and versioned here: C{beacon_schema} records every
applied migration, and L{MIGRATIONS} lists them in order (migration N brings
the database to version N). Triggers make C{submissions}, C{events} and
C{purges} append-only in the database as well as in this code, but for
what a purge does (a decided submission with a C{purges} row may have its
content emptied and its decision's note forgotten), and a unique index
allows at most one event (the review decision) per submission, so that two
Beacon instances deciding the same task at once cannot both win.

A search asks an FTS5 index (L{SEARCH_TABLE}) of each submission's
searchable text, filled behind the commit rather than inside it: a batch's
transaction only inserts rows, and a catch-up (L{catch_up_search}) indexes
every row past the index's watermark (L{SEARCH_WATERMARK}) in transactions
of its own, on the writer thread between batches. FTS5's cost is mostly per
transaction (a segment, its structure record, merge work): indexed a few
hundred at once, a row costs it a few microseconds, against some 60 for a
one-row batch that indexes its row itself, and a SendMessage's commit does
not pay even those. A catch-up runs behind the batch that brings the rows
written since the last one to L{CATCH_UP_THRESHOLD}; before every search,
so that a search sees every committed submission; inside a purge's
transaction, before it takes the purged text out of the index; and at start
and stop.

Several Beacon processes may share one database file: each writes in
C{BEGIN IMMEDIATE} transactions, which SQLite runs one at a time across
processes, and the watermark is in the database, so whichever process
catches up indexes every process's rows, once.
"""

from __future__ import annotations

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CATCH_UP_ROWS",
    "CATCH_UP_THRESHOLD",
    "DIALECT",
    "INSERT_DECISION",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SEARCH_TABLE",
    "SEARCH_WATERMARK",
    "catch_up_search",
    "connect",
    "index_pending",
    "insert_submissions",
    "migrate",
    "open_database",
    "schema_version",
    "searchable",
]

import os
import sqlite3
import time

from twisted.logger import Logger

from beacon.store._interface import StoreError
from beacon.store._sql import Dialect, Row

#: SQLite's spelling of the queries the backends share. A search is an FTS5
#: query of quoted words on L{SEARCH_TABLE}, whose rowid is the
#: submission's seq; an id prefix is a GLOB, which the unique index on ids
#: (binary collation) serves.
DIALECT = Dialect(
    mark="?",
    true="1",
    subquery_alias="",
    row_values=False,
    search_condition=(
        "{seq} IN (SELECT rowid FROM submissions_fts WHERE submissions_fts MATCH ?)"
    ),
    search_quotes_words=True,
    prefix_condition="s.id GLOB ?",
    prefix_wildcard="*",
    for_update="",
)

#: The full-text index of every submission's searchable text (an FTS5
#: table without content of its own: the text is in C{submissions}), up to
#: L{SEARCH_WATERMARK}.
SEARCH_TABLE = "submissions_fts"

#: The one-row table that says how far L{SEARCH_TABLE} has caught up: every
#: submission with a seq up to its C{through_seq} is indexed, none after it.
SEARCH_WATERMARK = "search_indexed"

#: How many submissions this store's batches may commit before a catch-up
#: is queued behind the batch that reached it. Indexed 256 at a time, a row
#: costs FTS5 about 3 microseconds of CPU (against some 60 when each one-row
#: batch indexed its own), and a search never has more than a few hundred
#: rows of this store's to index before it reads.
CATCH_UP_THRESHOLD = 256

#: The most submissions one catch-up transaction indexes: a catch-up of
#: more (after a crash, say) commits every this many, so that no one
#: transaction holds the write lock, or the WAL, for long.
CATCH_UP_ROWS = 4096


def searchable(content: str, kind: str) -> str:
    """
    The SQL expression of a submission's searchable text, from its
    C{content} and C{kind} columns: a text submission's C{text}; a
    structured one's sender (name, agent, operator), subject and body,
    separated by spaces; L{None} for content that is not JSON.

    The catch-up (L{index_pending}) indexes this text, as migration 2
    and its trigger did, and L{SQLiteStore.purge} takes exactly the same
    text out of the index again (an FTS5 table without content must be
    told the text it forgets): never change it without a migration that
    rebuilds L{SEARCH_TABLE}.
    """
    # SQLite 3.45 and later would read a BLOB as JSONB: read it as text.
    text = f"CAST({content} AS TEXT)"
    structured = " || ' ' || ".join(
        f"COALESCE(json_extract({text}, '$.message.{path}'), '')"
        for path in ("from.name", "from.agent", "from.operator", "subject", "body")
    )
    return f"""
        CASE WHEN json_valid({text}) THEN
            CASE {kind}
                WHEN 'text' THEN json_extract({text}, '$.text')
                WHEN 'structured' THEN {structured}
            END
        END
    """

#: How long a connection waits for a lock held by another connection (or
#: another process on the same file) before failing, in milliseconds.
BUSY_TIMEOUT_MS = 5000

#: The schema migrations, in order. Migration N (1-based) brings the database
#: from version N-1 to version N; each is a sequence of single SQL statements
#: run in one transaction together with its C{beacon_schema} row. Never edit a
#: released migration: append a new one.
MIGRATIONS: list[tuple[str, ...]] = [
    # 1: submissions, their events (at most one: the review decision), and
    # the append-only guards.
    (
        """
        CREATE TABLE submissions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            context_id TEXT NOT NULL,
            received_at_ms INTEGER NOT NULL,
            door TEXT NOT NULL,
            source TEXT NOT NULL,
            kind TEXT NOT NULL,
            message_id TEXT NOT NULL,
            content BLOB NOT NULL,
            sha256 TEXT NOT NULL
        )
        """,
        """
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            submission_id TEXT NOT NULL REFERENCES submissions(id),
            at_ms INTEGER NOT NULL,
            state TEXT NOT NULL,
            note TEXT
        )
        """,
        # At most one event, the review decision, per submission: enforced
        # here so that concurrent writers (several Beacon instances on one
        # file) cannot both decide. It also serves every join on events.
        "CREATE UNIQUE INDEX events_one_decision ON events (submission_id)",
        # list_tasks(context_id=...) looks a task up by its contextId.
        "CREATE INDEX submissions_by_context ON submissions (context_id)",
        """
        CREATE TRIGGER submissions_no_update BEFORE UPDATE ON submissions
        BEGIN SELECT RAISE(ABORT, 'submissions are append-only'); END
        """,
        """
        CREATE TRIGGER submissions_no_delete BEFORE DELETE ON submissions
        BEGIN SELECT RAISE(ABORT, 'submissions are append-only'); END
        """,
        """
        CREATE TRIGGER events_no_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END
        """,
        """
        CREATE TRIGGER events_no_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END
        """,
    ),
    # 2: the reader's half. The received order's index; the full-text index
    # of every submission (filled for the rows stored so far, then by a
    # trigger); purges, the one change the append-only guards now allow
    # (content emptied, the decision's note forgotten, for a decided
    # submission with a purges row); notification cursors (mutable).
    (
        "CREATE INDEX submissions_by_received ON submissions (received_at_ms, seq)",
        # No content of its own (content=''): the text stays in submissions.
        # No column sizes (columnsize=0): they serve ranking, which Beacon
        # does not use, and cost a row each. remove_diacritics 0: words
        # match as written, in any case, as on PostgreSQL's 'simple'
        # configuration.
        f"""
        CREATE VIRTUAL TABLE {SEARCH_TABLE} USING fts5(
            searchable,
            content = '',
            columnsize = 0,
            tokenize = 'unicode61 remove_diacritics 0'
        )
        """,
        f"""
        INSERT INTO {SEARCH_TABLE} (rowid, searchable)
        SELECT seq, {searchable("content", "kind")} FROM submissions
        """,
        f"""
        CREATE TRIGGER submissions_searchable AFTER INSERT ON submissions
        BEGIN
            INSERT INTO {SEARCH_TABLE} (rowid, searchable)
            VALUES (NEW.seq, {searchable("NEW.content", "NEW.kind")});
        END
        """,
        """
        CREATE TABLE purges (
            submission_id TEXT PRIMARY KEY REFERENCES submissions(id),
            at_ms INTEGER NOT NULL
        )
        """,
        """
        CREATE TRIGGER purges_no_update BEFORE UPDATE ON purges
        BEGIN SELECT RAISE(ABORT, 'purges are append-only'); END
        """,
        """
        CREATE TRIGGER purges_no_delete BEFORE DELETE ON purges
        BEGIN SELECT RAISE(ABORT, 'purges are append-only'); END
        """,
        "DROP TRIGGER submissions_no_update",
        """
        CREATE TRIGGER submissions_no_update BEFORE UPDATE ON submissions
        WHEN NOT (
            NEW.content IS x''
            AND NEW.seq IS OLD.seq
            AND NEW.id IS OLD.id
            AND NEW.context_id IS OLD.context_id
            AND NEW.received_at_ms IS OLD.received_at_ms
            AND NEW.door IS OLD.door
            AND NEW.source IS OLD.source
            AND NEW.kind IS OLD.kind
            AND NEW.message_id IS OLD.message_id
            AND NEW.sha256 IS OLD.sha256
            AND EXISTS (SELECT 1 FROM purges WHERE submission_id = OLD.id)
            AND EXISTS (SELECT 1 FROM events WHERE submission_id = OLD.id)
        )
        BEGIN SELECT RAISE(ABORT, 'submissions are append-only'); END
        """,
        "DROP TRIGGER events_no_update",
        """
        CREATE TRIGGER events_no_update BEFORE UPDATE ON events
        WHEN NOT (
            NEW.note IS NULL
            AND NEW.seq IS OLD.seq
            AND NEW.submission_id IS OLD.submission_id
            AND NEW.at_ms IS OLD.at_ms
            AND NEW.state IS OLD.state
            AND EXISTS (SELECT 1 FROM purges WHERE submission_id = OLD.submission_id)
        )
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END
        """,
        """
        CREATE TABLE notify_cursors (
            channel TEXT PRIMARY KEY,
            through_seq INTEGER NOT NULL,
            holder TEXT,
            lease_until_ms INTEGER NOT NULL DEFAULT 0
        )
        """,
    ),
    # 3: the full-text index is filled behind the commit, not inside it
    # (see the module's docstring). The trigger that indexed each insert in
    # the inserting transaction goes; the watermark starts at the newest
    # submission, since the trigger indexed every one so far, and two guards
    # keep it the one row the code reads and updates. A purges row
    # is refused for a submission not yet indexed: a purge takes the
    # submission's text out of the contentless index, and telling FTS5 to
    # forget text it was never given corrupts the index (the store catches
    # up first; a Beacon of schema 2 still running on the file would not).
    (
        "DROP TRIGGER submissions_searchable",
        f"CREATE TABLE {SEARCH_WATERMARK} (through_seq INTEGER NOT NULL)",
        f"""
        INSERT INTO {SEARCH_WATERMARK} (through_seq)
        SELECT COALESCE(MAX(seq), 0) FROM submissions
        """,
        f"""
        CREATE TRIGGER {SEARCH_WATERMARK}_one_row_kept BEFORE INSERT ON {SEARCH_WATERMARK}
        BEGIN SELECT RAISE(ABORT, '{SEARCH_WATERMARK} has one row'); END
        """,
        f"""
        CREATE TRIGGER {SEARCH_WATERMARK}_one_row_left BEFORE DELETE ON {SEARCH_WATERMARK}
        BEGIN SELECT RAISE(ABORT, '{SEARCH_WATERMARK} has one row'); END
        """,
        f"""
        CREATE TRIGGER purges_only_indexed BEFORE INSERT ON purges
        WHEN (SELECT seq FROM submissions WHERE id = NEW.submission_id)
            > (SELECT through_seq FROM {SEARCH_WATERMARK})
        BEGIN
            SELECT RAISE(ABORT, 'a submission is purged only once indexed for search');
        END
        """,
    ),
    # 4: the status order's index. A page in the status order (sort
    # "updated") walks the undecided submissions down
    # submissions_by_received and the decisions down this index, and
    # merges the two (see beacon.store._sql.Dialect._updated_page), so
    # that its first page reads about a page's rows, not every task.
    ("CREATE INDEX events_by_time ON events (at_ms)",),
]

#: The schema version this code creates and understands.
SCHEMA_VERSION = len(MIGRATIONS)

_INSERT_SUBMISSION = """
    INSERT INTO submissions
        (id, context_id, received_at_ms, door, source, kind, message_id,
         content, sha256)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

#: The most rows one INSERT statement carries (9 parameters each).
_ROWS_PER_INSERT = 32


def _insert_rows(count: int) -> str:
    """
    C{_INSERT_SUBMISSION} for C{count} rows at once.
    """
    return _INSERT_SUBMISSION + ", (?, ?, ?, ?, ?, ?, ?, ?, ?)" * (count - 1)


def insert_submissions(connection: sqlite3.Connection, rows: list[Row]) -> None:
    """
    Insert C{rows} (and empty the list) with as few statements as possible:
    every statement is a step on the writer thread that lets go of the GIL,
    and on a busy single core each of those costs the reactor a context
    switch.
    """
    for start in range(0, len(rows), _ROWS_PER_INSERT):
        chunk = rows[start : start + _ROWS_PER_INSERT]
        connection.execute(
            _insert_rows(len(chunk)), [value for row in chunk for value in row]
        )
    rows.clear()


INSERT_DECISION = """
    INSERT INTO events (submission_id, state, at_ms, note) VALUES (?, ?, ?, ?)
"""

#: How far the full-text index has caught up, and the newest submission.
_SEARCH_PROGRESS = f"""
    SELECT
        (SELECT through_seq FROM {SEARCH_WATERMARK}),
        (SELECT COALESCE(MAX(seq), 0) FROM submissions)
"""

#: How many of the submissions past a watermark (the first parameter) a
#: catch-up indexes, at most the second parameter (-1: all), and the last
#: one's seq.
_PENDING_SEARCH = """
    SELECT COUNT(*), MAX(seq) FROM (
        SELECT seq FROM submissions WHERE seq > ? ORDER BY seq LIMIT ?
    )
"""

#: Index the submissions with a seq in (first parameter, second parameter],
#: in seq order (FTS5 appends increasing rowids to its pending segment).
_INDEX_SEARCH = f"""
    INSERT INTO {SEARCH_TABLE} (rowid, searchable)
    SELECT seq, {searchable("content", "kind")} FROM submissions
    WHERE seq > ? AND seq <= ? ORDER BY seq
"""


def index_pending(connection: sqlite3.Connection, limit: int | None) -> tuple[int, int]:
    """
    Inside the open write transaction: index the submissions past the
    watermark (L{SEARCH_WATERMARK}), in seq order, at most C{limit} of them
    (all of them if L{None}), with the text L{searchable} makes, and move
    the watermark to the last one indexed.

    Seq order is commit order, so the watermark never passes a submission
    that is not indexed: SQLite runs one write transaction at a time, across
    every process on the file (this one holds the write lock), and
    C{AUTOINCREMENT} gives each new row a seq greater than every seq ever
    committed. Once a transaction has seen seq N committed, no row with a
    smaller seq can commit after it.

    @return: How many submissions were indexed, and the watermark.
    """
    (through_seq,) = connection.execute(
        f"SELECT through_seq FROM {SEARCH_WATERMARK}"
    ).fetchone()
    count, last = connection.execute(
        _PENDING_SEARCH, (through_seq, -1 if limit is None else limit)
    ).fetchone()
    if not count:
        return 0, int(through_seq)
    connection.execute(_INDEX_SEARCH, (through_seq, last))
    connection.execute(f"UPDATE {SEARCH_WATERMARK} SET through_seq = ?", (last,))
    return int(count), int(last)


def catch_up_search(connection: sqlite3.Connection) -> int:
    """
    Index every submission committed (by any process) and not yet indexed,
    in C{BEGIN IMMEDIATE} transactions of at most L{CATCH_UP_ROWS} rows
    each, until the watermark reaches the newest submission committed when
    this began. Several processes catching up at once take turns, and
    whoever comes second finds the rows indexed. When nothing is behind, it
    reads that (one statement, outside any transaction) and takes no write
    lock.

    The transactions are as durable as C{connection} makes them: the store
    catches up behind its batches on a connection with C{synchronous=NORMAL}
    (see L{SQLiteStore._catch_up_now}).

    @param connection: A connection in autocommit mode, outside a
        transaction.
    @return: How many submissions were indexed.
    @raises sqlite3.Error: If a transaction failed (the ones committed
        before it stay).
    """
    through_seq, newest = connection.execute(_SEARCH_PROGRESS).fetchone()
    total = 0
    while through_seq < newest:
        connection.execute("BEGIN IMMEDIATE")
        try:
            indexed, through_seq = index_pending(connection, CATCH_UP_ROWS)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        if not indexed:
            break
        total += indexed
    return total


def _prepare_file(path: str) -> None:
    """
    Create the database's directory (mode C{0700}) and the file itself
    (mode C{0600}, which SQLite copies to its WAL files) if missing.

    @raises StoreError: If either cannot be created.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
    except OSError as e:
        raise StoreError(
            f"cannot open or create the database {path}: {e.strerror}"
        ) from e


def _migrate(connection: sqlite3.Connection, path: str, log: Logger) -> int:
    """
    Bring the schema to L{SCHEMA_VERSION}, one migration per transaction.

    @return: The schema version.
    @raises StoreError: If the database is newer than this code or not
        in WAL mode.
    """
    (mode,) = connection.execute("PRAGMA journal_mode=WAL").fetchone()
    if str(mode).lower() != "wal":
        raise StoreError(
            f"the database {path} cannot use WAL mode (it is {mode})"
        )
    while True:
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS beacon_schema ("
                "version INTEGER NOT NULL, applied_at_ms INTEGER NOT NULL)"
            )
            (current,) = connection.execute(
                "SELECT COALESCE(MAX(version), 0) FROM beacon_schema"
            ).fetchone()
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"database schema version {current} is newer than "
                    f"this Beacon supports ({SCHEMA_VERSION}): {path}"
                )
            if current == SCHEMA_VERSION:
                connection.execute("COMMIT")
                return int(current)
            for statement in MIGRATIONS[current]:
                connection.execute(statement)
            connection.execute(
                "INSERT INTO beacon_schema (version, applied_at_ms)"
                " VALUES (?, ?)",
                (current + 1, int(time.time() * 1000)),
            )
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        log.info(
            "store.migrated: submission store {path} to schema version {version}",
            path=path,
            version=current + 1,
        )


def connect(
    path: str, *, query_only: bool, synchronous: str = "FULL"
) -> sqlite3.Connection:
    """
    Open a connection with Beacon's settings.

    The connection is in autocommit mode (transactions are explicit) and
    may be closed from another thread, once its own thread is idle.

    @param synchronous: Its C{synchronous} setting: C{"FULL"} (every commit
        synced) but for the connection that catches the search index up
        (C{"NORMAL"}, see L{SQLiteStore._catch_up_now}).
    """
    connection = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
    )
    try:
        # synchronous and the rest are per connection; WAL is per file.
        connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        connection.execute(f"PRAGMA synchronous={synchronous}")
        connection.execute("PRAGMA foreign_keys=ON")
        if query_only:
            connection.execute("PRAGMA query_only=ON")
    except BaseException:
        connection.close()
        raise
    return connection


def migrate(path: str, log: Logger) -> int:
    """
    Open the database at C{path} (creating it, and its directory, if
    missing) and bring its schema to L{SCHEMA_VERSION}: the store's
    start-up, and C{beacon db upgrade}'s.

    @param log: Where each applied migration is logged (C{store.migrated}).
    @return: The schema version.
    @raises StoreError: If the database cannot be opened or migrated, or
        its schema is newer than this code.
    """
    version, _ = open_database(path, log, catch_up=False)
    return version


def open_database(path: str, log: Logger, *, catch_up: bool) -> tuple[int, int]:
    """
    L{migrate} and then, if C{catch_up}, L{catch_up_search}, on one
    connection (synchronous FULL), closed before returning.

    @return: The schema version, and how many submissions were indexed.
    @raises StoreError: If the database cannot be opened, migrated or
        indexed, or its schema is newer than this code.
    """
    _prepare_file(path)
    try:
        connection = connect(path, query_only=False)
        try:
            version = _migrate(connection, path, log)
            return version, catch_up_search(connection) if catch_up else 0
        finally:
            connection.close()
    except sqlite3.Error as e:
        raise StoreError(f"cannot open the database {path}: {e}") from e


def schema_version(path: str) -> int:
    """
    The schema version of the SQLite database at C{path}, read-only; 0 if
    the file does not exist or Beacon never migrated it.

    @raises StoreError: If it cannot be read.
    """
    if not os.path.exists(path):
        return 0
    try:
        connection = sqlite3.connect(
            f"file:{os.path.abspath(path)}?mode=ro", uri=True, isolation_level=None
        )
    except sqlite3.Error as e:
        raise StoreError(f"cannot open the database {path}: {e}") from e
    try:
        exists = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table'"
            " AND name = 'beacon_schema'"
        ).fetchone()
        if exists is None:
            return 0
        (version,) = connection.execute(
            "SELECT COALESCE(MAX(version), 0) FROM beacon_schema"
        ).fetchone()
        return int(version)
    except sqlite3.Error as e:
        raise StoreError(f"cannot read the database {path}: {e}") from e
    finally:
        connection.close()
