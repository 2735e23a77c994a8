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
L{SQLiteStore.startService}, before any listener starts. The schema, its
migrations, the search index and the SQL that writes are in
L{beacon.store._sqlite_schema}, whose public names this module gives too.
Purges and notification claims run on the writer thread, between batches,
as the search index's catch-ups do.
"""

from __future__ import annotations

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

import sqlite3
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
from beacon.store._sql import (
    FEW_MATCHING,
    PageRequest,
    Row,
    counted_exactly,
    page_of,
    row_of,
    task_of,
)
from beacon.store._sqlite_schema import (
    BUSY_TIMEOUT_MS,
    CATCH_UP_ROWS,
    CATCH_UP_THRESHOLD,
    DIALECT,
    INSERT_DECISION,
    MIGRATIONS,
    SCHEMA_VERSION,
    SEARCH_TABLE,
    SEARCH_WATERMARK,
    catch_up_search,
    connect,
    index_pending,
    insert_submissions,
    migrate,
    open_database,
    schema_version,
    searchable,
)
from beacon.store._sqlite_search import SPARSE_MATCHES, search_count, search_rows
from beacon.store._threaded import ThreadedStore, _Decision, _Outcome, _Write

_T = TypeVar("_T")

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
        version, indexed = open_database(self.path, self.log, catch_up=True)
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
                    insert_submissions(connection, rows)
                    outcomes.append(self._insert_decision(connection, write))
            insert_submissions(connection, rows)
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
            connection.execute(INSERT_DECISION, decision)
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
        transaction; a search's as L{beacon.store._sqlite_search} reads
        them. A page of no task is not read; one of few is read from all
        of them (see L{Dialect.page_query <beacon.store._sql.Dialect.page_query>}).
        """
        total: int | None = None
        matches: int | None = None
        connection.execute("BEGIN")
        try:
            if request.with_total:
                counted = search_count(request)
                count, params = counted or self._dialect.count_query(request)
                (total,) = connection.execute(count, params).fetchone()
                if counted is not None and (
                    request.total_cap is None or request.total_cap >= SPARSE_MATCHES
                ):
                    matches = total
            matching = counted_exactly(request, total)
            rows: list[Any] | None = None
            if matching == 0:
                rows = []
            elif matching is None or matching > FEW_MATCHING:
                rows = search_rows(connection, request, matches)
            if rows is None:
                page, page_params = self._dialect.page_query(request, matching)
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
        index_pending(connection, None)
        connection.executemany(
            "INSERT INTO purges (submission_id, at_ms) VALUES (?, ?)",
            [(id_, at_ms) for _, id_ in rows],
        )
        connection.executemany(
            f"""
            INSERT INTO {SEARCH_TABLE} ({SEARCH_TABLE}, rowid, searchable)
            SELECT 'delete', seq, {searchable("content", "kind")}
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
