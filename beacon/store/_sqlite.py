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
the database to version N). Triggers make C{submissions} and C{events}
append-only in the database as well as in this code, and a unique index
allows at most one event (the review decision) per submission, so that two
Beacon instances deciding the same task at once cannot both win.
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
from beacon.store._sql import Dialect, Row, page_of, row_of, task_of
from beacon.store._threaded import ThreadedStore, _Decision, _Outcome, _Write

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DIALECT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SQLiteStore",
    "connect",
    "migrate",
    "schema_version",
]

_T = TypeVar("_T")

#: SQLite's spelling of the queries the backends share.
DIALECT = Dialect(mark="?", true="1", subquery_alias="", row_values=False)

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
        try:
            connection = self._thread_connection(query_only=False)
            connection.execute("BEGIN IMMEDIATE")
            try:
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
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise StoreError(
                f"could not store {len(writes)} write(s) in {self.path}:"
                f" {type(e).__name__}: {e}"
            ) from e
        return outcomes

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
        self,
        connection: sqlite3.Connection,
        limit: int,
        state: str | None,
        updated_after_ms: int | None,
        context_id: str | None,
        after: tuple[int, int] | None,
    ) -> TaskPage:
        """
        One page of L{list_tasks} and its total, in one read transaction.
        """
        count, params, page, page_params = self._dialect.page_queries(
            limit, state, updated_after_ms, context_id, after
        )
        connection.execute("BEGIN")
        try:
            (total,) = connection.execute(count, params).fetchone()
            rows = connection.execute(page, page_params).fetchall()
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return page_of(rows, limit, total)

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

