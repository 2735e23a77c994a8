"""
The embedded submission store: SQLite in WAL mode, behind thread pools.

Every database call once the store is serving runs on one of two dedicated
L{ThreadPool}s, never on the reactor thread:

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

import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, Callable, NamedTuple, TypeVar, Union, cast

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
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    AlreadyDecided,
    ISubmissionStore,
    StoredTask,
    StoreError,
    StoreEvent,
    Submission,
    TaskPage,
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

_INSERT_DECISION = """
    INSERT INTO events (submission_id, state, at_ms, note) VALUES (?, ?, ?, ?)
"""

# A task's state is the state of its decision, or submitted as of its
# receipt when it has none (the unique index allows at most one event).
_SELECT_STATUS = """
    SELECT s.id, s.context_id, s.received_at_ms, e.state, e.at_ms
    FROM submissions AS s
    LEFT JOIN events AS e ON e.submission_id = s.id
    WHERE s.id = ?
"""

# Everything about a task, in the order L{_task} reads it.
_TASK_COLUMNS = """
    s.seq, s.id, s.context_id, s.received_at_ms, s.door, s.source, s.kind,
    s.message_id, s.content, s.sha256, e.state, e.at_ms, e.note
"""

_SELECT_TASK = f"""
    SELECT {_TASK_COLUMNS}
    FROM submissions AS s
    LEFT JOIN events AS e ON e.submission_id = s.id
    WHERE s.id = ?
"""

# Every task's sort and filter keys, without its content: list_tasks filters,
# counts and orders these, then reads whole rows for one page only.
_TASK_KEYS = f"""
    SELECT
        s.seq AS seq,
        s.context_id AS context_id,
        COALESCE(e.state, '{STATE_SUBMITTED}') AS state,
        COALESCE(e.at_ms, s.received_at_ms) AS updated_at_ms
    FROM submissions AS s
    LEFT JOIN events AS e ON e.submission_id = s.id
"""

#: The states a review decision may set.
DECISION_STATES = frozenset({STATE_COMPLETED, STATE_REJECTED})

_Row = tuple[str, str, int, str, str, str, str, bytes, str]


class _Decision(NamedTuple):
    """
    A review decision waiting for the writer, in L{_INSERT_DECISION} order.
    """

    receipt_id: str
    state: str
    at_ms: int
    note: str | None


#: One write of a batch, and what the writer thread made of it: L{None} for
#: a stored submission; for a decision, the decided task, L{None} for an
#: unknown id, or L{AlreadyDecided}.
_Write = Union[Submission, _Decision]
_Outcome = Union[StoredTask, AlreadyDecided, None]


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


def _task(row: tuple[Any, ...]) -> StoredTask:
    """
    The L{StoredTask} of a row of L{_TASK_COLUMNS}.
    """
    (
        seq,
        id_,
        context_id,
        received_at_ms,
        door,
        source,
        kind,
        message_id,
        content,
        sha256,
        state,
        at_ms,
        note,
    ) = row
    submission = Submission(
        id=id_,
        context_id=context_id,
        received_at_ms=received_at_ms,
        door=door,
        source=source,
        kind=kind,
        message_id=message_id,
        content=bytes(content),
        sha256=sha256,
    )
    if state is None:
        return StoredTask(
            submission=submission,
            state=STATE_SUBMITTED,
            updated_at_ms=received_at_ms,
            note=None,
            seq=seq,
        )
    return StoredTask(
        submission=submission, state=state, updated_at_ms=at_ms, note=note, seq=seq
    )


def check_decision_state(state: str) -> None:
    """
    Refuse a decision state other than L{STATE_COMPLETED} or
    L{STATE_REJECTED}.

    @raises ValueError: If C{state} is any other value.
    """
    if state not in DECISION_STATES:
        raise ValueError(
            f"a decision is {STATE_COMPLETED} or {STATE_REJECTED}, not {state!r}"
        )


def check_limit(limit: int) -> None:
    """
    Refuse a page size below one.

    @raises ValueError: If C{limit} is less than 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")


class Listeners:
    """
    A store's listeners (L{ISubmissionStore.subscribe}), shared by the
    backends.

    Events are delivered one at a time, in the order they were handed to
    L{notify}, to every listener in subscription order. An event handed over
    while listeners are being called (a listener wrote to a store that
    answers synchronously) waits for the events before it, so commit order
    holds. A listener that raises is logged as C{store.listener_failed} and
    the others are still called.
    """

    def __init__(self, log: Logger) -> None:
        """
        @param log: Where listener failures are logged.
        """
        self._log = log
        self._listeners: dict[object, Callable[[StoreEvent], None]] = {}
        self._queue: deque[StoreEvent] = deque()
        self._notifying = False

    def subscribe(self, listener: Callable[[StoreEvent], None]) -> Callable[[], None]:
        """
        Add C{listener}; the same callable subscribed twice is called twice.

        @return: A function that removes this subscription; calling it again
            does nothing.
        """
        key = object()
        self._listeners[key] = listener

        def unsubscribe() -> None:
            self._listeners.pop(key, None)

        return unsubscribe

    def notify(self, events: Iterable[StoreEvent]) -> None:
        """
        Call every listener with each of C{events}, in order.
        """
        self._queue.extend(events)
        if self._notifying:
            return
        self._notifying = True
        try:
            while self._queue:
                event = self._queue.popleft()
                for key, listener in list(self._listeners.items()):
                    # An earlier listener may have unsubscribed this one.
                    if key not in self._listeners:
                        continue
                    try:
                        listener(event)
                    except Exception:
                        self._log.failure(
                            "store.listener_failed: a store listener failed"
                            " on a {kind} event",
                            kind=event.kind,
                        )
        finally:
            self._notifying = False


@implementer(ISubmissionStore)
class SQLiteStore(Service):
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
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        if readers < 1:
            raise ValueError(f"readers must be at least 1, not {readers}")
        self.path: str = path.path if isinstance(path, FilePath) else path
        self._reactor = reactor
        self._max_batch = max_batch
        self._readers = readers
        self.transactions = 0
        # Reactor-thread state: writes waiting for the writer (each with the
        # Deferred that answers it), whether a batch is in flight, other
        # calls in flight, stopService's waiters, and the listeners.
        self._pending: deque[tuple[_Write, Deferred[Any]]] = deque()
        self._writing = False
        self._working = 0
        self._idle_waiters: list[Deferred[None]] = []
        self._closed_waiters: list[Deferred[None]] = []
        self._listeners = Listeners(self.log)
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
        Stop accepting work, then commit and answer every pending write,
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

    def decide(
        self, receipt_id: str, state: str, at_ms: int, note: str | None
    ) -> Deferred[StoredTask | None]:
        """
        Queue a review decision for the next batch.

        @param state: L{STATE_COMPLETED} (accepted) or L{STATE_REJECTED}.
        @param at_ms: When it was decided, in milliseconds since the epoch.
        @param note: The reviewer's note, or L{None}.
        @return: A L{Deferred} that fires once the batch holding the decision
            is committed, with the task in its new state, or with L{None}
            when no submission has that id. It fails with L{AlreadyDecided}
            when the submission has a decision (made by this store or
            another on the same file), with L{StoreError} when its batch was
            not stored, and with L{ValueError} for any other C{state}.
        """
        try:
            check_decision_state(state)
        except ValueError:
            return fail()
        if not self.running:
            return fail(StoreError("the submission store is not running"))
        done: Deferred[StoredTask | None] = Deferred()
        self._pending.append((_Decision(receipt_id, state, at_ms, note), done))
        self._flush()
        return done

    def subscribe(self, listener: Callable[[StoreEvent], None]) -> Callable[[], None]:
        """
        Call C{listener} on the reactor thread with a L{StoreEvent} for every
        committed submission and decision, in commit order: right after the
        Deferreds of a committed batch have fired, one event per stored
        submission or decision of that batch, in the batch's order. Refused
        decisions (unknown id, L{AlreadyDecided}) and failed batches make no
        event. A listener that raises is logged (C{store.listener_failed})
        and changes nothing else.

        @return: A function that unsubscribes; calling it again does nothing.
        """
        return self._listeners.subscribe(listener)

    def get(self, receipt_id: str) -> Deferred[StoredTask | None]:
        """
        Read submission C{receipt_id} and its decision, on a reader thread.

        @return: A L{Deferred} that fires with the L{StoredTask}, or L{None}
            when no submission has that id, or fails with L{StoreError}.
        """
        return self._read(self._select_task, receipt_id)

    def list_tasks(
        self,
        *,
        limit: int,
        state: str | None = None,
        updated_after_ms: int | None = None,
        context_id: str | None = None,
        after: tuple[int, int] | None = None,
    ) -> Deferred[TaskPage]:
        """
        Read one page of tasks on a reader thread, newest C{updated_at_ms}
        first, then highest C{seq} first. The filters combine with AND; the
        page and its C{total} come from one read transaction, so they agree.

        @param limit: The page size (at least 1).
        @param state: Only tasks in this TaskState.
        @param updated_after_ms: Only tasks with C{updated_at_ms} at or after
            this time.
        @param context_id: Only the task with this contextId.
        @param after: A previous page's C{next_after}: only tasks strictly
            after C{(updated_at_ms, seq)} in this order.
        @return: A L{Deferred} that fires with the L{TaskPage}, or fails with
            L{StoreError}, or with L{ValueError} if C{limit} is below 1.
        """
        try:
            check_limit(limit)
        except ValueError:
            return fail()
        return self._read(
            self._select_page, limit, state, updated_after_ms, context_id, after
        )

    def status(self, receipt_id: str) -> Deferred[TaskStatusRecord | None]:
        """
        Derive the status of submission C{receipt_id} from its decision.

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
            [write for write, _ in batch],
        )
        written.addBoth(self._batch_written, batch)

    def _batch_written(
        self,
        result: list[_Outcome] | Failure,
        batch: list[tuple[_Write, Deferred[Any]]],
    ) -> None:
        """
        Answer every write of a finished batch, tell the listeners what it
        stored, then send the next batch.
        """
        events: list[StoreEvent] = []
        if isinstance(result, Failure):
            if isinstance(result.value, StoreError):
                message = str(result.value)
                self.log.warn(
                    "store.batch_failed: a batch of {count} writes was not"
                    " stored: {message}",
                    count=len(batch),
                    message=message,
                )
            else:
                message = "the submission store failed unexpectedly"
                self.log.failure(
                    "store.batch_failed: writing a batch of {count} writes failed",
                    result,
                    count=len(batch),
                )
            for _, done in batch:
                error = StoreError(message)
                error.__cause__ = result.value
                done.errback(error)
        else:
            self.transactions += 1
            for (write, done), outcome in zip(batch, result):
                if isinstance(write, Submission):
                    done.callback(None)
                    events.append(StoreEvent("submitted", write.id))
                elif isinstance(outcome, AlreadyDecided):
                    done.errback(outcome)
                else:
                    done.callback(outcome)
                    if outcome is not None:
                        events.append(StoreEvent("decided", write.receipt_id))
        # Writes made by the callbacks above (or the listeners below) have
        # queued behind this batch; they go together, in the next one.
        self._listeners.notify(events)
        self._writing = False
        self._flush()

    def _read(self, f: Callable[..., _T], *args: object) -> Deferred[_T]:
        """
        Run C{f(connection, *args)} on a reader thread.
        """
        if not self.running or self._reader_pool is None:
            return fail(StoreError("the submission store is not running"))
        return self._counted(
            deferToThreadPool(
                self._reactor, self._reader_pool, self._on_reader, f, *args
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
                for write in writes:
                    if isinstance(write, Submission):
                        connection.execute(_INSERT_SUBMISSION, _row(write))
                        outcomes.append(None)
                    else:
                        outcomes.append(self._insert_decision(connection, write))
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
        row = connection.execute(_SELECT_TASK, (decision.receipt_id,)).fetchone()
        return _task(row)

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

    @staticmethod
    def _select_task(
        connection: sqlite3.Connection, receipt_id: str
    ) -> StoredTask | None:
        """
        Everything about C{receipt_id}, in one query.
        """
        row = connection.execute(_SELECT_TASK, (receipt_id,)).fetchone()
        return None if row is None else _task(row)

    @staticmethod
    def _select_page(
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
        conditions: list[str] = []
        params: list[object] = []
        if state is not None:
            conditions.append("state = ?")
            params.append(state)
        if updated_after_ms is not None:
            conditions.append("updated_at_ms >= ?")
            params.append(updated_after_ms)
        if context_id is not None:
            conditions.append("context_id = ?")
            params.append(context_id)
        filters = " AND ".join(conditions) or "1"
        page_filters, page_params = filters, list(params)
        if after is not None:
            # Strictly after the cursor in (updated_at_ms DESC, seq DESC).
            page_filters += (
                " AND (updated_at_ms < ? OR (updated_at_ms = ? AND seq < ?))"
            )
            page_params += [after[0], after[0], after[1]]
        connection.execute("BEGIN")
        try:
            (total,) = connection.execute(
                f"SELECT COUNT(*) FROM ({_TASK_KEYS}) WHERE {filters}", params
            ).fetchone()
            # One more than asked for tells whether another page follows.
            rows = connection.execute(
                f"""
                WITH page AS (
                    SELECT seq, updated_at_ms FROM ({_TASK_KEYS})
                    WHERE {page_filters}
                    ORDER BY updated_at_ms DESC, seq DESC
                    LIMIT ?
                )
                SELECT {_TASK_COLUMNS}
                FROM page
                JOIN submissions AS s ON s.seq = page.seq
                LEFT JOIN events AS e ON e.submission_id = s.id
                ORDER BY page.updated_at_ms DESC, page.seq DESC
                """,
                [*page_params, limit + 1],
            ).fetchall()
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        tasks = [_task(row) for row in rows[:limit]]
        next_after = None
        if len(rows) > limit:
            next_after = (tasks[-1].updated_at_ms, tasks[-1].seq)
        return TaskPage(tasks=tasks, total=total, next_after=next_after)

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
