"""
The embedded submission store: SQLite in WAL mode, behind thread pools.

Every database call once the store is serving runs on one of two dedicated
L{ThreadPool}s, never on the reactor thread:

  - one writer thread, which owns the only connection that writes. Appends
    queue on the reactor side; whenever no write is in flight, everything
    pending (up to C{max_batch}) goes to the writer as one batch, written in
    one C{BEGIN IMMEDIATE ... COMMIT} transaction (group commit). With
    C{synchronous=FULL} a commit is synced, so durability costs one sync per
    batch, not one per request.
  - C{readers} reader threads, each with its own C{query_only} connection;
    WAL lets them read while the writer writes.

Opening the database and migrating its schema happen synchronously in
L{SQLiteStore.startService}, before any listener starts.

The schema is created and versioned here: C{beacon_schema} records every
applied migration, and L{MIGRATIONS} lists them in order (migration N brings
the database to version N). Triggers make C{submissions} and C{events}
append-only in the database as well as in this code.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import deque
from typing import Any, Callable, TypeVar, cast

from twisted.application.service import Service
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.filepath import FilePath
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from beacon.store._interface import (
    STATE_SUBMITTED,
    ISubmissionStore,
    StoreError,
    Submission,
    TaskStatusRecord,
)

_T = TypeVar("_T")

#: How long a connection waits for a lock held by another connection (or
#: another process on the same file) before failing, in milliseconds.
BUSY_TIMEOUT_MS = 5000

#: The schema migrations, in order. Migration N (1-based) brings the database
#: from version N-1 to version N; each is a sequence of single SQL statements
#: run in one transaction together with its C{beacon_schema} row. Never edit a
#: released migration: append a new one.
MIGRATIONS: list[tuple[str, ...]] = [
    # 1: submissions, their events, and the append-only guards.
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
        # The status query looks up the newest event of one submission.
        "CREATE INDEX events_by_submission ON events (submission_id, seq)",
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

# A task's state is the state of its newest event (by append order), or
# submitted as of its receipt when it has none.
_SELECT_STATUS = """
    SELECT s.id, s.context_id, s.received_at_ms, e.state, e.at_ms
    FROM submissions AS s
    LEFT JOIN events AS e ON e.seq = (
        SELECT MAX(seq) FROM events WHERE submission_id = s.id
    )
    WHERE s.id = ?
"""

_Row = tuple[str, str, int, str, str, str, str, bytes, str]


def _row(submission: Submission) -> _Row:
    """
    The C{submissions} row for C{submission}, in L{_INSERT_SUBMISSION} order.
    """
    return (
        submission.id,
        submission.context_id,
        submission.received_at_ms,
        submission.door,
        submission.source,
        submission.kind,
        submission.message_id,
        submission.content,
        submission.sha256,
    )


@implementer(ISubmissionStore)
class SQLiteStore(Service):
    """
    An L{ISubmissionStore} in one SQLite database file, as a service.

    Start it (directly or as a child of the service tree) before use; stop
    it to commit and answer every pending append and close the database.

    @ivar transactions: The number of write transactions this store has
        committed (one per batch, however many appends it held).
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
        @param max_batch: The most submissions written in one transaction.
        @param readers: The number of reader threads (and connections).
        @raises ValueError: If C{max_batch} or C{readers} is less than 1.
        """
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        if readers < 1:
            raise ValueError(f"readers must be at least 1, not {readers}")
        self.path: str = path.path if isinstance(path, FilePath) else path
        self._reactor = reactor
        self._max_batch = max_batch
        self._readers = readers
        self.transactions = 0
        # Reactor-thread state: appends waiting for the writer, whether a
        # batch is in flight, other calls in flight, and stopService's
        # waiters.
        self._pending: deque[tuple[Submission, Deferred[None]]] = deque()
        self._writing = False
        self._working = 0
        self._idle_waiters: list[Deferred[None]] = []
        self._closed_waiters: list[Deferred[None]] = []
        self._writer_pool: ThreadPool | None = None
        self._reader_pool: ThreadPool | None = None
        # Each pool thread opens its own connection on first use; all of them
        # are remembered so that stopService can close them.
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()

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
        self._prepare_file()
        try:
            connection = self._connect(query_only=False)
            try:
                version = self._migrate(connection)
            finally:
                connection.close()
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the database {self.path}: {e}") from e
        self._writer_pool = ThreadPool(1, 1, name="beacon-store-writer")
        self._reader_pool = ThreadPool(
            self._readers, self._readers, name="beacon-store-reader"
        )
        self._writer_pool.start()
        self._reader_pool.start()
        # Service's own methods are unannotated; all they do is flip running.
        cast(Callable[[], None], super().startService)()
        self.log.info(
            "store.opened: submission store {path} (schema version {version})",
            path=self.path,
            version=version,
        )

    def stopService(self) -> Deferred[None]:
        """
        Stop accepting work, then commit and answer every pending append,
        close the connections and stop the thread pools.

        @return: A L{Deferred} that fires when all of that is done.
        """
        cast(Callable[[], None], super().stopService)()
        idle: Deferred[None] = Deferred()
        self._idle_waiters.append(idle)
        self._check_idle()
        idle.addCallback(lambda _: self._shut_down())
        return idle

    def _shut_down(self) -> Deferred[None]:
        """
        Close every connection on the (idle) writer thread, so that the final
        WAL checkpoint stays off the reactor thread, then stop both pools.

        @return: A L{Deferred} that fires when the pools have stopped (also
            for a second stopService made while the first is closing).
        """
        if self._writer_pool is None or self._reader_pool is None:
            return succeed(None)
        closed: Deferred[None] = Deferred()
        self._closed_waiters.append(closed)
        if len(self._closed_waiters) == 1:
            closing = deferToThreadPool(
                self._reactor, self._writer_pool, self._close_all
            )
            closing.addBoth(self._stop_pools)
        return closed

    def _stop_pools(self, result: None | Failure) -> None:
        """
        Stop both (idle) pools once the connections are closed, and tell
        whoever waits for the store to stop.
        """
        if isinstance(result, Failure):
            self.log.failure(
                "store.close_failed: closing the submission store {path} failed",
                result,
                path=self.path,
            )
        assert self._writer_pool is not None and self._reader_pool is not None
        # Both pools are idle, so joining their threads does not wait.
        self._writer_pool.stop()
        self._reader_pool.stop()
        self._writer_pool = self._reader_pool = None
        self.log.info("store.closed: submission store {path}", path=self.path)
        waiters, self._closed_waiters = self._closed_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    # ISubmissionStore.

    def append(self, submission: Submission) -> Deferred[None]:
        """
        Queue C{submission} for the next batch.

        @return: A L{Deferred} that fires with L{None} once the batch holding
            C{submission} is committed, or fails with L{StoreError} (and
            then none of that batch was stored).
        """
        if not self.running:
            return fail(StoreError("the submission store is not running"))
        done: Deferred[None] = Deferred()
        self._pending.append((submission, done))
        self._flush()
        return done

    def status(self, receipt_id: str) -> Deferred[TaskStatusRecord | None]:
        """
        Derive the status of submission C{receipt_id} from its newest event.

        @return: A L{Deferred} that fires with the L{TaskStatusRecord}, or
            L{None} when no submission has that id, or fails with
            L{StoreError}.
        """
        return self._read(self._select_status, receipt_id)

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
            deferToThreadPool(self._reactor, self._writer_pool, self._read_pragmas)
        )

    # The reactor side of group commit.

    def _flush(self) -> None:
        """
        If no batch is in flight, hand everything pending (up to
        C{max_batch}) to the writer thread as one batch.
        """
        if self._writing:
            return
        if not self._pending:
            self._check_idle()
            return
        assert self._writer_pool is not None
        batch = [
            self._pending.popleft()
            for _ in range(min(self._max_batch, len(self._pending)))
        ]
        self._writing = True
        written = deferToThreadPool(
            self._reactor,
            self._writer_pool,
            self._write_batch,
            [_row(submission) for submission, _ in batch],
        )
        written.addBoth(self._batch_written, [done for _, done in batch])

    def _batch_written(
        self, result: None | Failure, answers: list[Deferred[None]]
    ) -> None:
        """
        Answer every append of a finished batch, then send the next batch.
        """
        if isinstance(result, Failure):
            if isinstance(result.value, StoreError):
                message = str(result.value)
                self.log.warn(
                    "store.batch_failed: a batch of {count} submissions was not stored: {message}",
                    count=len(answers),
                    message=message,
                )
            else:
                message = "the submission store failed unexpectedly"
                self.log.failure(
                    "store.batch_failed: writing a batch of {count} submissions failed",
                    result,
                    count=len(answers),
                )
            for done in answers:
                error = StoreError(message)
                error.__cause__ = result.value
                done.errback(error)
        else:
            self.transactions += 1
            for done in answers:
                done.callback(None)
        # Appends made by the callbacks above have queued; they go together.
        self._writing = False
        self._flush()

    def _read(
        self, f: Callable[[sqlite3.Connection, str], _T], arg: str
    ) -> Deferred[_T]:
        """
        Run C{f(connection, arg)} on a reader thread.
        """
        if not self.running or self._reader_pool is None:
            return fail(StoreError("the submission store is not running"))
        return self._counted(
            deferToThreadPool(
                self._reactor, self._reader_pool, self._on_reader, f, arg
            )
        )

    def _counted(self, work: Deferred[_T]) -> Deferred[_T]:
        """
        Count C{work} in flight until it fires, so that stopService waits
        for it before closing the connections.
        """
        self._working += 1

        def finished(result: _T) -> _T:
            self._working -= 1
            self._check_idle()
            return result

        return work.addBoth(finished)

    def _check_idle(self) -> None:
        """
        Fire stopService's waiters once the store is stopped and no write or
        read is pending or in flight.
        """
        if self.running or self._writing or self._pending or self._working:
            return
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    # Start-up, on the calling thread.

    def _prepare_file(self) -> None:
        """
        Create the database's directory (mode C{0700}) and the file itself
        (mode C{0600}, which SQLite copies to its WAL files) if missing.

        @raises StoreError: If either cannot be created.
        """
        directory = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            os.close(fd)
        except OSError as e:
            raise StoreError(
                f"cannot open or create the database {self.path}: {e.strerror}"
            ) from e

    def _migrate(self, connection: sqlite3.Connection) -> int:
        """
        Bring the schema to L{SCHEMA_VERSION}, one migration per transaction.

        @return: The schema version.
        @raises StoreError: If the database is newer than this code or not
            in WAL mode.
        """
        (mode,) = connection.execute("PRAGMA journal_mode=WAL").fetchone()
        if str(mode).lower() != "wal":
            raise StoreError(
                f"the database {self.path} cannot use WAL mode (it is {mode})"
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
                        f"this Beacon supports ({SCHEMA_VERSION}): {self.path}"
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
            self.log.info(
                "store.migrated: submission store {path} to schema version {version}",
                path=self.path,
                version=current + 1,
            )

    def _connect(self, *, query_only: bool) -> sqlite3.Connection:
        """
        Open a connection with Beacon's settings.

        The connection is in autocommit mode (transactions are explicit) and
        may be closed from another thread, once its own thread is idle.
        """
        connection = sqlite3.connect(
            self.path,
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

    # The thread side. Everything below runs on a pool thread.

    def _thread_connection(self, *, query_only: bool) -> sqlite3.Connection:
        """
        This thread's connection, opened on first use.
        """
        connection: sqlite3.Connection | None = getattr(
            self._local, "connection", None
        )
        if connection is None:
            connection = self._connect(query_only=query_only)
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def _write_batch(self, rows: list[_Row]) -> None:
        """
        Write C{rows} in one transaction, or none of them.

        @raises StoreError: If the transaction failed; its message names the
            SQLite error, never submitted content.
        """
        try:
            connection = self._thread_connection(query_only=False)
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.executemany(_INSERT_SUBMISSION, rows)
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise StoreError(
                f"could not store {len(rows)} submission(s) in {self.path}:"
                f" {type(e).__name__}: {e}"
            ) from e

    def _on_reader(
        self, f: Callable[[sqlite3.Connection, str], _T], arg: str
    ) -> _T:
        """
        Run C{f} with this reader thread's connection.

        @raises StoreError: If the read failed.
        """
        try:
            return f(self._thread_connection(query_only=True), arg)
        except sqlite3.Error as e:
            raise StoreError(
                f"could not read from {self.path}: {type(e).__name__}: {e}"
            ) from e

    @staticmethod
    def _select_status(
        connection: sqlite3.Connection, receipt_id: str
    ) -> TaskStatusRecord | None:
        """
        The status of C{receipt_id}, in one query.
        """
        row = connection.execute(_SELECT_STATUS, (receipt_id,)).fetchone()
        if row is None:
            return None
        id_, context_id, received_at_ms, state, at_ms = row
        if state is None:
            return TaskStatusRecord(
                id=id_,
                context_id=context_id,
                state=STATE_SUBMITTED,
                updated_at_ms=received_at_ms,
            )
        return TaskStatusRecord(
            id=id_, context_id=context_id, state=state, updated_at_ms=at_ms
        )

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

    def _close_all(self) -> None:
        """
        Close every connection the pool threads opened; they are all idle.
        """
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()
        self._local = threading.local()
