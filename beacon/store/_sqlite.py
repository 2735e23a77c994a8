"""
The embedded submission store: SQLite in WAL mode, behind thread pools.

Every database call once the store is serving runs on one of two dedicated
sets of threads (L{beacon.store._workers.Workers}), never on the reactor
thread:

  - one writer thread, which owns the only connection that writes. Appends
    and review decisions queue together on the reactor side; whenever no
    write is in flight, everything pending (up to C{max_batch}) goes to the
    writer as one batch, written in order in one C{BEGIN IMMEDIATE ...
    COMMIT} transaction (group commit). With C{synchronous=FULL} a commit is
    synced, so durability costs one sync per batch, not one per request.
    Every write is answered only after its batch committed; then the store's
    listeners hear of it, in the batch's order.
  - C{readers} reader threads, each with its own C{query_only} connection;
    WAL lets them read while the writer writes.

Opening the database and migrating its schema happen synchronously in
L{SQLiteStore.startService}, before any listener starts.

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
and stop. Purges and notification claims run on the writer thread too,
between batches.

Several Beacon processes may share one database file: each writes in
C{BEGIN IMMEDIATE} transactions, which SQLite runs one at a time across
processes, and the watermark is in the database, so whichever process
catches up indexes every process's rows, once.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from typing import Any, Callable, TypeVar, cast

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.filepath import FilePath
from zope.interface import implementer

from beacon.store._interface import (
    AlreadyDecided,
    ISubmissionStore,
    StoreError,
    Submission,
    TaskPage,
)
from beacon.store._sql import Dialect, PageRequest, Row, page_of, row_of, task_of
from beacon.store._threaded import ThreadedStore, _Decision, _Outcome, _Write

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CATCH_UP_ROWS",
    "CATCH_UP_THRESHOLD",
    "DIALECT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SEARCH_TABLE",
    "SEARCH_WATERMARK",
    "SQLiteStore",
    "catch_up_search",
    "connect",
    "migrate",
    "schema_version",
]

_T = TypeVar("_T")

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


def _searchable(content: str, kind: str) -> str:
    """
    The SQL expression of a submission's searchable text, from its
    C{content} and C{kind} columns: a text submission's C{text}; a
    structured one's sender (name, agent, operator), subject and body,
    separated by spaces; L{None} for content that is not JSON.

    The catch-up (L{_index_pending}) indexes this text, as migration 2
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
        SELECT seq, {_searchable("content", "kind")} FROM submissions
        """,
        f"""
        CREATE TRIGGER submissions_searchable AFTER INSERT ON submissions
        BEGIN
            INSERT INTO {SEARCH_TABLE} (rowid, searchable)
            VALUES (NEW.seq, {_searchable("NEW.content", "NEW.kind")});
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


@functools.cache
def _insert_rows(count: int) -> str:
    """
    C{_INSERT_SUBMISSION} for C{count} rows at once.
    """
    return _INSERT_SUBMISSION + ", (?, ?, ?, ?, ?, ?, ?, ?, ?)" * (count - 1)


def _insert_submissions(connection: sqlite3.Connection, rows: list[Row]) -> None:
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


_INSERT_DECISION = """
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
    SELECT seq, {_searchable("content", "kind")} FROM submissions
    WHERE seq > ? AND seq <= ? ORDER BY seq
"""


def _index_pending(connection: sqlite3.Connection, limit: int | None) -> tuple[int, int]:
    """
    Inside the open write transaction: index the submissions past the
    watermark (L{SEARCH_WATERMARK}), in seq order, at most C{limit} of them
    (all of them if L{None}), with the text L{_searchable} makes, and move
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
            indexed, through_seq = _index_pending(connection, CATCH_UP_ROWS)
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
    version, _ = _open(path, log, catch_up=False)
    return version


def _open(path: str, log: Logger, *, catch_up: bool) -> tuple[int, int]:
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


@implementer(ISubmissionStore)
class SQLiteStore(ThreadedStore):
    """
    An L{ISubmissionStore} in one SQLite database file, as a service.

    Start it (directly or as a child of the service tree) before use; stop
    it to commit and answer every pending write and close the database.

    @ivar transactions: The number of write transactions this store has
        committed (one per batch, however many appends and decisions it
        held).
    """

    log = Logger()

    def __init__(
        self,
        path: FilePath[str] | str,
        reactor: IReactorFromThreads,
        *,
        max_batch: int = 512,
        readers: int = 2,
    ) -> None:
        """
        @param path: The database file. Its directory is created (mode
            C{0700}) if missing; the file is created (mode C{0600}) if
            missing.
        @param reactor: The reactor that receives the threads' results.
        @param max_batch: The most writes (submissions and decisions) in
            one transaction.
        @param readers: The number of reader threads (and connections).
        @raises ValueError: If C{max_batch} or C{readers} is less than 1.
        """
        super().__init__(
            reactor,
            dialect=DIALECT,
            max_batch=max_batch,
            readers=readers,
            readers_name="readers",
        )
        self.path: str = path.path if isinstance(path, FilePath) else path
        # Reactor-thread state: how many submissions this store's batches
        # committed since it last queued a catch-up of the search index.
        self._unindexed = 0

    def __repr__(self) -> str:
        return f"<SQLiteStore {self.path!r}>"

    # Start and stop.

    def startService(self) -> None:
        """
        Open the database, migrate its schema, index for search what a
        crash (or another process that stopped without catching up) left
        unindexed, and start the thread pools.

        This runs synchronously on the calling thread: it is start-up, before
        any listener accepts a request.

        @raises StoreError: If the database cannot be opened, migrated or
            indexed, or its schema is newer than this code.
        """
        version, indexed = _open(self.path, self.log, catch_up=True)
        if indexed:
            self.log.info(
                "store.search_indexed: {count} submission(s) in {path} left"
                " unindexed for search were indexed",
                count=indexed,
                path=self.path,
            )
        self._start_pools()
        # Service's own methods are unannotated; all they do is flip running.
        cast(Callable[[], None], super().startService)()
        self.log.info(
            "store.opened: submission store {path} (schema version {version})",
            path=self.path,
            version=version,
        )

    # ThreadedStore's hooks not defined further down.

    _location_key = "path"

    @property
    def _location(self) -> str:
        return self.path

    def _close_connection(self, connection: sqlite3.Connection) -> None:
        connection.close()

    def _batch_committed(self, batch: list[tuple[_Write, Deferred[Any]]]) -> None:
        """
        Count the batch's submissions; once this store's batches have
        committed L{CATCH_UP_THRESHOLD} of them since the last catch-up,
        queue one behind this batch.
        """
        self._unindexed += sum(type(write) is Submission for write, _ in batch)
        if self._unindexed >= CATCH_UP_THRESHOLD:
            self._unindexed = 0
            assert self._writer_pool is not None
            caught_up = self._counted(self._writer_pool.run(self._catch_up_now))
            caught_up.addErrback(self._catch_up_failed)

    def _search_preparation(self) -> Callable[[], object]:
        """
        Before a search reads: catch the index up with every submission
        committed so far, by any process (which restarts the count towards
        L{CATCH_UP_THRESHOLD}).
        """
        self._unindexed = 0
        return self._catch_up_now

    def _before_close(self) -> Deferred[None]:
        """
        At stop: catch the index up, synced, so that the file left behind
        is indexed. A failure is logged and does not keep the connections
        open (the next start catches up).
        """
        assert self._writer_pool is not None
        caught_up = self._writer_pool.run(self._catch_up_now, True)
        return caught_up.addCallbacks(lambda _: None, self._catch_up_failed)

    def _catch_up_failed(self, failure: Failure) -> None:
        """
        Log a catch-up behind the batches (or at stop) that failed: the
        rows stay unindexed until the next one, which every search makes.
        """
        if isinstance(failure.value, StoreError):
            self.log.warn(
                "store.search_index_failed: submissions in {path} were not"
                " indexed for search yet: {message}",
                path=self.path,
                message=str(failure.value),
            )
        else:
            self.log.failure(
                "store.search_index_failed: indexing submissions in {path}"
                " for search failed",
                failure,
                path=self.path,
            )

    # Diagnostics.

    def pragmas(self) -> Deferred[dict[str, Any]]:
        """
        Read the settings the writer connection actually runs with.

        @return: A L{Deferred} firing with a L{dict} of C{journal_mode}
            (C{"wal"}), C{synchronous} (C{2}, FULL), C{foreign_keys} (C{1})
            and C{busy_timeout} (milliseconds).
        """
        if not self.running or self._writer_pool is None:
            return fail(StoreError("the submission store is not running"))
        return self._counted(
            self._writer_pool.run(self._read_pragmas)
        )

    # The thread side. Everything below runs on a pool thread.

    def _thread_connection(self, *, query_only: bool) -> sqlite3.Connection:
        """
        This thread's connection, opened on first use.
        """
        connection: sqlite3.Connection | None = getattr(
            self._local, "connection", None
        )
        if connection is None:
            connection = connect(self.path, query_only=query_only)
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def _catch_up_now(self, synced: bool = False) -> int:
        """
        Catch the search index up (L{catch_up_search}) on the writer thread.

        Behind the batches and before searches it runs on a connection of
        its own with C{synchronous=NORMAL}: its commits are not synced, so
        that catching up costs no sync. That is safe in WAL mode: the WAL is
        one log, replayed after a crash only up to the first frame that is
        missing or does not check out, and every sync of it (the next
        batch's commit, the next checkpoint) makes all it holds durable,
        these commits included. So a catch-up lost in a crash takes with it
        only what came after it and was not synced either, never an
        acknowledged write; its watermark is lost with its index rows, and
        the next catch-up (at the latest the next start) indexes them
        again. The batches' own connection stays C{FULL}, never switched.

        @param synced: Whether to catch up on the batches' connection
            (C{FULL}) instead, as a stop does, so that the file left behind
            is indexed whatever happens next.
        @return: How many submissions were indexed.
        @raises StoreError: If a catch-up transaction failed.
        """
        try:
            if synced:
                connection = self._thread_connection(query_only=False)
            else:
                connection = self._indexer_connection()
            return catch_up_search(connection)
        except sqlite3.Error as e:
            raise StoreError(
                f"could not index submissions for search in {self.path}:"
                f" {type(e).__name__}: {e}"
            ) from e

    def _indexer_connection(self) -> sqlite3.Connection:
        """
        The writer thread's connection for catching up (C{synchronous=NORMAL},
        see L{_catch_up_now}), opened on first use.
        """
        connection: sqlite3.Connection | None = getattr(
            self._local, "indexer", None
        )
        if connection is None:
            connection = connect(self.path, query_only=False, synchronous="NORMAL")
            self._local.indexer = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def _write_batch(self, writes: list[_Write]) -> list[_Outcome]:
        """
        Write C{writes} in order in one transaction, or none of them.

        A decision refused for an unknown id or an existing decision fails
        alone and does not stop the batch; any other error does.

        @return: What became of each write, in order (see L{_Outcome}).
        @raises StoreError: If the transaction failed; its message names the
            SQLite error, never submitted content.
        """
        def batch(connection: sqlite3.Connection) -> list[_Outcome]:
            outcomes: list[_Outcome] = []
            rows: list[Row] = []
            for write in writes:
                if isinstance(write, Submission):
                    rows.append(row_of(write))
                    outcomes.append(None)
                else:
                    _insert_submissions(connection, rows)
                    outcomes.append(self._insert_decision(connection, write))
            _insert_submissions(connection, rows)
            return outcomes

        return self._transaction(batch, f"store {len(writes)} write(s) in")

    @staticmethod
    def _insert_decision(
        connection: sqlite3.Connection, decision: _Decision
    ) -> _Outcome:
        """
        Insert C{decision} inside the open transaction. The database decides:
        the foreign key refuses an unknown id and the unique index a second
        decision; either failure undoes this statement only.

        @return: The decided task, L{None} for an unknown id, or an
            L{AlreadyDecided} (returned, not raised) for a decided one.
        @raises sqlite3.Error: For any other failure.
        """
        try:
            connection.execute(_INSERT_DECISION, decision)
        except sqlite3.IntegrityError:
            (decided,) = connection.execute(
                "SELECT EXISTS (SELECT 1 FROM events WHERE submission_id = ?)",
                (decision.receipt_id,),
            ).fetchone()
            if decided:
                return AlreadyDecided("the submission already has a decision")
            (known,) = connection.execute(
                "SELECT EXISTS (SELECT 1 FROM submissions WHERE id = ?)",
                (decision.receipt_id,),
            ).fetchone()
            if not known:
                return None
            raise
        row = connection.execute(
            DIALECT.select_task, (decision.receipt_id,)
        ).fetchone()
        return task_of(row)

    def _on_reader(self, f: Callable[..., _T], *args: object) -> _T:
        """
        Run C{f} with this reader thread's connection.

        @raises StoreError: If the read failed.
        """
        try:
            return f(self._thread_connection(query_only=True), *args)
        except sqlite3.Error as e:
            raise StoreError(
                f"could not read from {self.path}: {type(e).__name__}: {e}"
            ) from e

    def _select_page(
        self, connection: sqlite3.Connection, request: PageRequest
    ) -> TaskPage:
        """
        One page of L{list_tasks} and, if asked for, its total, in one read
        transaction.
        """
        page, page_params = self._dialect.page_query(request)
        total: int | None = None
        connection.execute("BEGIN")
        try:
            if request.with_total:
                count, params = self._dialect.count_query(request)
                (total,) = connection.execute(count, params).fetchone()
            rows = connection.execute(page, page_params).fetchall()
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return page_of(rows, request, total)

    # The writer thread, outside the batches.

    def _on_writer(self, f: Callable[..., _T], *args: object) -> _T:
        """
        Run C{f} with the writer's connection in one C{BEGIN IMMEDIATE}
        transaction, committed if it returns.

        @raises StoreError: If the transaction failed.
        """
        return self._transaction(lambda connection: f(connection, *args), "write to")

    def _transaction(self, f: Callable[[sqlite3.Connection], _T], doing: str) -> _T:
        """
        Run C{f} with the writer's connection in one C{BEGIN IMMEDIATE}
        transaction, committed if it returns, rolled back if it raises.

        @param doing: What failed, for the error (C{"write to"}).
        @raises StoreError: If the transaction failed; its message names the
            SQLite error, never submitted content.
        """
        try:
            connection = self._thread_connection(query_only=False)
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = f(connection)
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise StoreError(
                f"could not {doing} {self.path}: {type(e).__name__}: {e}"
            ) from e
        return result

    def _purge_now(self, decided_before_ms: int, at_ms: int, dry_run: bool) -> int:
        """
        Purge in one transaction, with C{secure_delete} on so that SQLite
        overwrites what it frees with zeros; merge the full-text index into
        one segment (C{optimize}), so that the purged words' old segments
        are freed (and zeroed) too; then copy the WAL into the database and
        truncate it (C{wal_checkpoint(TRUNCATE)}), so that neither file
        keeps the erased bytes.

        @raises StoreError: If the purge failed (then nothing was purged).
        """
        if dry_run:
            return self._on_writer(self._count_purgeable, decided_before_ms)
        try:
            connection = self._thread_connection(query_only=False)
            connection.execute("PRAGMA secure_delete=ON")
            try:
                count = self._on_writer(self._purge_rows, decided_before_ms, at_ms)
            finally:
                connection.execute("PRAGMA secure_delete=OFF")
        except sqlite3.Error as e:
            raise StoreError(
                f"could not purge in {self.path}: {type(e).__name__}: {e}"
            ) from e
        try:
            busy, _, _ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            reason = "readers kept it from being truncated" if busy else None
        except sqlite3.Error as e:
            reason = f"{type(e).__name__}: {e}"
        if reason is not None:
            self.log.warn(
                "store.purge_checkpoint_failed: the purge is committed, but the"
                " WAL of {path} was not emptied ({reason}); the erased content"
                " leaves it at a later checkpoint",
                path=self.path,
                reason=reason,
            )
        return count

    @staticmethod
    def _count_purgeable(connection: sqlite3.Connection, decided_before_ms: int) -> int:
        """
        How many submissions a purge with C{decided_before_ms} would purge.
        """
        (count,) = connection.execute(
            DIALECT.count_purgeable, (decided_before_ms,)
        ).fetchone()
        return int(count)

    @staticmethod
    def _purge_rows(
        connection: sqlite3.Connection, decided_before_ms: int, at_ms: int
    ) -> int:
        """
        Inside the open transaction: record each purge (which lets the
        append-only guards allow the rest), take its text out of the
        full-text index (while the content it was read from is still
        there), empty its content and forget its note; then, if anything
        was purged, merge the full-text index. Everything committed is
        indexed first, in the same transaction, so that the index is told
        to forget only text it was given.

        @return: How many submissions were purged.
        """
        rows = connection.execute(DIALECT.purgeable, (decided_before_ms,)).fetchall()
        if not rows:
            return 0
        _index_pending(connection, None)
        connection.executemany(
            "INSERT INTO purges (submission_id, at_ms) VALUES (?, ?)",
            [(id_, at_ms) for _, id_ in rows],
        )
        connection.executemany(
            f"""
            INSERT INTO {SEARCH_TABLE} ({SEARCH_TABLE}, rowid, searchable)
            SELECT 'delete', seq, {_searchable("content", "kind")}
            FROM submissions WHERE seq = ?
            """,
            [(seq,) for seq, _ in rows],
        )
        connection.executemany(
            "UPDATE submissions SET content = x'' WHERE seq = ?",
            [(seq,) for seq, _ in rows],
        )
        connection.executemany(
            "UPDATE events SET note = NULL WHERE submission_id = ? AND note IS NOT NULL",
            [(id_,) for _, id_ in rows],
        )
        connection.execute(
            f"INSERT INTO {SEARCH_TABLE} ({SEARCH_TABLE}) VALUES ('optimize')"
        )
        return len(rows)

    def _read_pragmas(self) -> dict[str, Any]:
        """
        The writer connection's effective settings.
        """
        connection = self._thread_connection(query_only=False)
        return {
            name: connection.execute(f"PRAGMA {name}").fetchone()[0]
            for name in (
                "journal_mode",
                "synchronous",
                "foreign_keys",
                "busy_timeout",
            )
        }

