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

A search asks an FTS5 index (L{SEARCH_TABLE}) that a trigger fills on every
insert with the submission's searchable text. Purges and notification
claims run on the writer thread too, between batches.
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
    "DIALECT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SEARCH_TABLE",
    "SQLiteStore",
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
#: table without content of its own: the text is in C{submissions}).
SEARCH_TABLE = "submissions_fts"


def _searchable(content: str, kind: str) -> str:
    """
    The SQL expression of a submission's searchable text, from its
    C{content} and C{kind} columns: a text submission's C{text}; a
    structured one's sender (name, agent, operator), subject and body,
    separated by spaces; L{None} for content that is not JSON.

    Migration 2 indexes this text and L{SQLiteStore.purge} takes exactly
    the same text out of the index again (an FTS5 table without content
    must be told the text it forgets): never change it without a migration
    that rebuilds L{SEARCH_TABLE}.
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


def connect(path: str, *, query_only: bool) -> sqlite3.Connection:
    """
    Open a connection with Beacon's settings.

    The connection is in autocommit mode (transactions are explicit) and
    may be closed from another thread, once its own thread is idle.
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
        connection.execute("PRAGMA synchronous=FULL")
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
    _prepare_file(path)
    try:
        connection = connect(path, query_only=False)
        try:
            return _migrate(connection, path, log)
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

    def __repr__(self) -> str:
        return f"<SQLiteStore {self.path!r}>"

    # Start and stop.

    def startService(self) -> None:
        """
        Open the database, migrate its schema and start the thread pools.

        This runs synchronously on the calling thread: it is start-up, before
        any listener accepts a request.

        @raises StoreError: If the database cannot be opened or migrated, or
            its schema is newer than this code.
        """
        version = migrate(self.path, self.log)
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
        was purged, merge the full-text index.

        @return: How many submissions were purged.
        """
        rows = connection.execute(DIALECT.purgeable, (decided_before_ms,)).fetchall()
        if not rows:
            return 0
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

