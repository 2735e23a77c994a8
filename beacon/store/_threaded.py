"""
The reactor-side machinery the thread-pool backends share
(L{beacon.store.SQLiteStore} and L{beacon.store.PostgreSQLStore}).

Every database call of such a store runs on one of two dedicated sets of
threads (L{beacon.store._workers.Workers}), never on the reactor thread:

  - one writer thread, which owns the only connection this store writes on.
    Appends and review decisions queue together; whenever the writer is
    free, it takes everything queued (up to C{max_batch}) as one batch,
    written in order in one transaction (group commit). It takes the next
    batch as soon as it has committed one, while the reactor answers that
    one: it never waits for the reactor. Every write is answered only after
    its batch committed.
    Purges and notification claims go to the same thread, between batches,
    so every write this store makes is serialised on it.
  - reader threads, each with its own connection.

L{ThreadedStore} holds that queue, the read path and the stop sequence;
a backend supplies its connections, its SQL dialect (L{beacon.store._sql},
where the queries both backends share are written) and these hooks:

  - L{ThreadedStore._write_batch} (on the writer thread): write a batch in
    one transaction and say what became of each write;
  - L{ThreadedStore._on_writer} (on the writer thread): run a write
    function in one transaction on the writer's connection (notification
    cursors);
  - L{ThreadedStore._purge_now} (on the writer thread): purge, and make
    sure the erased content is gone from the database's files;
  - L{ThreadedStore._on_reader} (on a reader thread): run a read function
    with this thread's connection, and L{ThreadedStore._select_page} with
    it: one page and its total in one read transaction;
  - L{ThreadedStore._close_connection}: close one pool connection;
  - optionally the C{_refuse_*} and C{_unreadable} checks, the events of a
    committed batch (whether the batch tells the listeners itself,
    L{ThreadedStore._events_wanted}), what to queue on the writer thread
    behind a committed batch (L{ThreadedStore._batch_committed}), what a
    search needs done on the writer thread before it reads
    (L{ThreadedStore._search_preparation}: SQLite's full-text index is
    caught up behind the commit, PostgreSQL's is kept by the inserting
    transaction), and what happens before and after the pool connections
    are closed at stop.
"""

from __future__ import annotations

import threading
from collections import deque
from time import perf_counter
from typing import Any, Callable, ClassVar, NamedTuple, TypeVar, Union, cast

from twisted.application.service import Service
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.store._measured import (
    DECISION_ALREADY_MADE,
    DECISION_FAILED,
    DECISION_NOT_FOUND,
    BatchReport,
    IMeasuredStore,
)
from beacon.store._interface import (
    AlreadyDecided,
    NotificationBatch,
    StoredTask,
    StoreError,
    StoreEvent,
    Submission,
    TaskPage,
    TaskStatusRecord,
    check_decision_state,
    check_lease,
    check_limit,
)
from beacon.protocol.query import TaskQuery
from beacon.store._listeners import StoreListeners
from beacon.store._sql import Dialect, PageRequest, status_of, task_of
from beacon.store._workers import Workers

_T = TypeVar("_T")


class _Decision(NamedTuple):
    """
    A review decision waiting for the writer, in the order of the backends'
    statements that insert one (SQLite's and PostgreSQL's).
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


@implementer(IMeasuredStore)
class ThreadedStore(Service):
    """
    The shared core of an L{ISubmissionStore} whose database calls run on a
    writer thread and reader threads: group commit, reads, and stopping.
    Each batch is reported to its observers (L{IMeasuredStore}).

    A subclass opens its database in C{startService} and then calls
    L{_start_pools} and C{super().startService()}.

    @ivar transactions: The number of write transactions this store has
        committed (one per batch, however many appends and decisions it
        held).
    """

    log: ClassVar[Logger]

    #: The name under which log events carry L{_location} (C{"path"} or
    #: C{"url"}).
    _location_key: ClassVar[str]

    def __init__(
        self,
        reactor: IReactorFromThreads,
        *,
        dialect: Dialect,
        max_batch: int,
        readers: int,
        readers_name: str,
    ) -> None:
        """
        @param reactor: The reactor that receives the threads' results.
        @param dialect: How the backend's SQL spells the shared queries.
        @param max_batch: The most writes (submissions and decisions) in
            one transaction.
        @param readers: The number of reader threads (and connections).
        @param readers_name: The name of the C{readers} parameter, for the
            error message.
        @raises ValueError: If C{max_batch} or C{readers} is less than 1.
        """
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        if readers < 1:
            raise ValueError(f"{readers_name} must be at least 1, not {readers}")
        self._reactor = reactor
        self._dialect = dialect
        self._max_batch = max_batch
        self._readers = readers
        self.transactions = 0
        # Shared with the writer thread: the writes waiting for it (each with
        # the Deferred that answers it; the reactor appends, the writer
        # takes), and whether the writer is taking batches (set by the
        # reactor when it starts it, cleared by the writer when it finds
        # nothing queued, both under the lock).
        self._pending: deque[tuple[_Write, Deferred[Any]]] = deque()
        self._writer_lock = threading.Lock()
        self._writer_busy = False
        # Reactor-thread state: writes queued and not yet answered, other
        # calls in flight, stopService's waiters, and the listeners.
        self._unanswered = 0
        self._working = 0
        self._idle_waiters: list[Deferred[None]] = []
        self._closed_waiters: list[Deferred[None]] = []
        self._listeners = StoreListeners(self.log)
        self._batch_observers: list[Callable[[BatchReport], None]] = []
        self._writer_pool: Workers | None = None
        self._reader_pool: Workers | None = None
        # Each pool thread opens its own connection on first use (a backend
        # may open another later); all of them are remembered so that
        # stopService can close them.
        self._local = threading.local()
        self._connections: list[Any] = []
        self._connections_lock = threading.Lock()

    # The backend's hooks.

    @property
    def _location(self) -> str:
        """
        The database, as logged (never with a password).
        """
        raise NotImplementedError()

    def _write_batch(self, writes: list[_Write]) -> list[_Outcome]:
        """
        On the writer thread: write C{writes} in order in one transaction,
        or none of them.

        @return: What became of each write, in order (see L{_Outcome}).
        @raises StoreError: If the transaction failed.
        """
        raise NotImplementedError()

    def _on_writer(self, f: Callable[..., _T], *args: object) -> _T:
        """
        On the writer thread: run C{f(connection, *args)} in one write
        transaction on the writer's connection, committed if C{f} returns.

        @raises StoreError: If the transaction failed.
        """
        raise NotImplementedError()

    def _purge_now(self, decided_before_ms: int, at_ms: int, dry_run: bool) -> int:
        """
        On the writer thread: L{purge}, in one transaction, and then make
        sure what it erased is gone from the database's files as far as the
        backend can.

        @return: How many submissions were (or would be) purged.
        @raises StoreError: If the purge failed (then nothing was purged).
        """
        raise NotImplementedError()

    def _on_reader(self, f: Callable[..., _T], *args: object) -> _T:
        """
        On a reader thread: run C{f(connection, *args)} with this thread's
        connection.

        @raises StoreError: If the read failed.
        """
        raise NotImplementedError()

    def _close_connection(self, connection: Any) -> None:
        """
        Close one (idle) pool connection, at stop.
        """
        raise NotImplementedError()

    def _refuse_submission(self, submission: Submission) -> Deferred[None] | None:
        """
        What L{append} answers at once for a C{submission} this backend
        cannot store, or L{None} to queue it.
        """
        return None

    def _refuse_decision(
        self, receipt_id: str, note: str | None
    ) -> Deferred[StoredTask | None] | None:
        """
        What L{decide} answers at once for a decision this backend cannot
        store, or L{None} to queue it.
        """
        return None

    def _unreadable(self, *texts: str | None) -> bool:
        """
        Whether a read keyed on C{texts} is known to find nothing without
        asking the database.
        """
        return False

    def _events_wanted(self) -> bool:
        """
        Whether the listeners hear of a committed batch's writes from the
        batch itself: by default, when anyone listens.
        """
        return self._listeners.listening

    def _batch_committed(self, batch: list[tuple[_Write, Deferred[Any]]]) -> None:
        """
        On the reactor thread, once C{batch} is committed and before any of
        its writes is answered: queue what the backend does behind it on
        the writer thread, which then runs before the next batch (and
        before anything the answers queue). By default nothing.
        """

    def _search_preparation(self) -> Callable[[], object] | None:
        """
        On the reactor thread, for a search about to be read: what to run
        on the writer thread first, so that the search sees every write
        committed before it was asked for; L{None} (the default) when the
        backend's index is written by the inserting transaction itself.
        """
        return None

    def _before_close(self) -> Deferred[None]:
        """
        At stop, once no work is pending: what to finish before the pool
        connections are closed.
        """
        return succeed(None)

    def _after_close(self) -> None:
        """
        At stop, once the pool connections are closed, before the pools
        stop.
        """

    # Start and stop.

    def _start_pools(self) -> None:
        """
        Start the writer pool (one thread) and the reader pool.
        """
        self._writer_pool = Workers(self._reactor, 1, "beacon-store-writer")
        self._reader_pool = Workers(self._reactor, self._readers, "beacon-store-reader")
        self._writer_pool.start()
        self._reader_pool.start()

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
        Finish the backend's own work (L{_before_close}), then close every
        connection on the (idle) writer thread, so that closing stays off the
        reactor thread, then stop both pools.

        @return: A L{Deferred} that fires when the pools have stopped (also
            for a second stopService made while the first is closing).
        """
        if self._writer_pool is None or self._reader_pool is None:
            return succeed(None)
        closed: Deferred[None] = Deferred()
        self._closed_waiters.append(closed)
        if len(self._closed_waiters) == 1:
            closing = self._before_close()
            closing.addCallback(self._close_connections)
            closing.addBoth(self._stop_pools)
        return closed

    def _close_connections(self, _: None) -> Deferred[None]:
        """
        Close every pool connection on the (idle) writer thread.
        """
        assert self._writer_pool is not None
        return self._writer_pool.run(self._close_all)

    def _stop_pools(self, result: object) -> None:
        """
        Stop both (idle) pools once the connections are closed, and tell
        whoever waits for the store to stop.
        """
        if isinstance(result, Failure):
            self.log.failure(
                "store.close_failed: closing the submission store"
                f" {{{self._location_key}}} failed",
                result,
                **cast(dict[str, Any], {self._location_key: self._location}),
            )
        self._after_close()
        # Both pools are idle, so joining their threads does not wait.
        if self._writer_pool is not None:
            self._writer_pool.stop()
        if self._reader_pool is not None:
            self._reader_pool.stop()
        self._writer_pool = self._reader_pool = None
        self.log.info(
            f"store.closed: submission store {{{self._location_key}}}",
            **{self._location_key: self._location},
        )
        waiters, self._closed_waiters = self._closed_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    def _close_all(self) -> None:
        """
        Close every connection the pool threads opened; they are all idle.
        """
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            self._close_connection(connection)
        self._local = threading.local()

    # ISubmissionStore.

    def append(self, submission: Submission) -> Deferred[None]:
        """
        Queue C{submission} for the next batch.

        @return: A L{Deferred} that fires with L{None} once the batch holding
            C{submission} is committed, or fails with L{StoreError} (and
            then there is no receipt; see the backend for when it is
            unknown whether the batch was stored).
        """
        if not self.running:
            return fail(StoreError("the submission store is not running"))
        refused = self._refuse_submission(submission)
        if refused is not None:
            return refused
        done: Deferred[None] = Deferred()
        self._queue_write(submission, done)
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
            another on the same database), with L{StoreError} when its batch
            was not stored, and with L{ValueError} for any other C{state}.
        """
        try:
            check_decision_state(state)
        except ValueError:
            return fail()
        if not self.running:
            return fail(StoreError("the submission store is not running"))
        refused = self._refuse_decision(receipt_id, note)
        if refused is not None:
            return refused
        done: Deferred[StoredTask | None] = Deferred()
        self._queue_write(_Decision(receipt_id, state, at_ms, note), done)
        return done

    def subscribe(self, listener: Callable[[StoreEvent], None]) -> Callable[[], None]:
        """
        Call C{listener} on the reactor thread with a L{StoreEvent} for every
        committed submission and decision, in commit order (see the backend
        for which writes and when). Refused decisions (unknown id,
        L{AlreadyDecided}) and failed batches make no event. A listener that
        raises is logged (C{store.listener_failed}) and changes nothing else.

        @return: A function that unsubscribes; calling it again does nothing.
        """
        return self._listeners.subscribe(listener)

    def observe_batches(
        self, observer: Callable[[BatchReport], None]
    ) -> Callable[[], None]:
        """
        Call C{observer} with a L{BatchReport} of every batch finished from
        now on; see L{IMeasuredStore}.

        @return: A function that stops the observing.
        """
        self._batch_observers.append(observer)

        def stop() -> None:
            if observer in self._batch_observers:
                self._batch_observers.remove(observer)

        return stop

    def count_undecided(self) -> Deferred[int]:
        """
        How many submissions have no decision, on a reader thread: the
        submissions less the decisions (at most one per submission), two
        counts the database answers from an index; see L{IMeasuredStore}.

        @return: A L{Deferred} that fires with the count, or fails with
            L{StoreError}.
        """
        return self._read(self._count_undecided)

    def get(self, receipt_id: str) -> Deferred[StoredTask | None]:
        """
        Read submission C{receipt_id} and its decision, on a reader thread.

        @return: A L{Deferred} that fires with the L{StoredTask}, or L{None}
            when no submission has that id, or fails with L{StoreError}.
        """
        if self._unreadable(receipt_id):
            return succeed(None)
        return self._read(self._select_task, receipt_id)

    def list_tasks(
        self,
        query: TaskQuery,
        *,
        limit: int,
        after: tuple[int, int] | None = None,
        with_total: bool = True,
        total_cap: int | None = None,
    ) -> Deferred[TaskPage]:
        """
        Read one page of the tasks C{query} matches on a reader thread,
        newest first by its sort (C{updated_at_ms} or C{received_at_ms}),
        then highest C{seq} first; see L{ISubmissionStore.list_tasks}. The
        filters combine with AND; the page and its C{total} come from one
        read transaction, so they agree. A search first runs the backend's
        L{_search_preparation} on the writer thread, so that it finds every
        submission committed before it was asked for.

        @return: A L{Deferred} that fires with the L{TaskPage}, or fails with
            L{StoreError}, or with L{ValueError} for a C{limit} below 1.
        """
        try:
            check_limit(limit)
        except ValueError:
            return fail()
        nothing = TaskPage(tasks=[], total=0 if with_total else None, next_after=None)
        searched = None
        if query.search is not None:
            searched = self._dialect.search_parameter(query.search)
            if searched is None:
                return succeed(nothing)
        if self._unreadable(query.status, query.context_id, query.door):
            return succeed(nothing)
        request = PageRequest(
            query,
            limit=limit,
            after=after,
            with_total=with_total,
            search=searched,
            total_cap=total_cap,
        )
        if searched is not None:
            return self._read_prepared(self._select_page, request)
        return self._read(self._select_page, request)

    def purge(
        self, decided_before_ms: int, at_ms: int, *, dry_run: bool = False
    ) -> Deferred[int]:
        """
        Erase the content and note of every decided submission decided
        strictly before C{decided_before_ms} and not yet purged, on the
        writer thread (between batches); see L{ISubmissionStore.purge}.
        Listeners hear nothing of it. A purge is logged (C{store.purged},
        with the count, never content); a dry run is not.

        @return: A L{Deferred} that fires with how many submissions were
            (or would be) purged, or fails with L{StoreError} (then nothing
            was).
        """
        if not self.running or self._writer_pool is None:
            return fail(StoreError("the submission store is not running"))
        purged = self._counted(
            self._writer_pool.run(self._purge_now, decided_before_ms, at_ms, dry_run)
        )
        if not dry_run:

            def logged(count: int) -> int:
                self.log.info(
                    "store.purged: the content of {count} submission(s) decided"
                    " before {decided_before_ms} was erased",
                    count=count,
                    decided_before_ms=decided_before_ms,
                )
                return count

            purged.addCallback(logged)
        return purged

    def claim_notifications(
        self, channel: str, holder: str, now_ms: int, lease_ms: int, limit: int
    ) -> Deferred[NotificationBatch | None]:
        """
        Take the lease of notification channel C{channel} and read what it
        has not been told of, in one transaction on the writer thread; see
        L{ISubmissionStore.claim_notifications}.

        @return: A L{Deferred} that fires with the L{NotificationBatch} or
            L{None}, or fails with L{StoreError}, or with L{ValueError} for
            a C{limit} or C{lease_ms} below 1.
        """
        try:
            check_limit(limit)
            check_lease(lease_ms)
        except ValueError:
            return fail()
        return self._write(self._claim, channel, holder, now_ms, lease_ms, limit)

    def finish_notifications(
        self, channel: str, holder: str, through_seq: int | None
    ) -> Deferred[None]:
        """
        End C{holder}'s lease of C{channel}, advancing its cursor to
        C{through_seq} unless it is L{None}, on the writer thread; see
        L{ISubmissionStore.finish_notifications}.

        @return: A L{Deferred} that fires with L{None}, or fails with
            L{StoreError}.
        """
        return self._write(self._finish, channel, holder, through_seq)

    def status(self, receipt_id: str) -> Deferred[TaskStatusRecord | None]:
        """
        Derive the status of submission C{receipt_id} from its decision.

        @return: A L{Deferred} that fires with the L{TaskStatusRecord}, or
            L{None} when no submission has that id, or fails with
            L{StoreError}.
        """
        if self._unreadable(receipt_id):
            return succeed(None)
        return self._read(self._select_status, receipt_id)

    # The read functions (on a reader thread, given its connection).

    def _select_task(self, connection: Any, receipt_id: str) -> StoredTask | None:
        """
        Everything about C{receipt_id}, in one query.
        """
        row = connection.execute(self._dialect.select_task, (receipt_id,)).fetchone()
        return None if row is None else task_of(row)

    def _select_status(
        self, connection: Any, receipt_id: str
    ) -> TaskStatusRecord | None:
        """
        The status of C{receipt_id}, in one query.
        """
        row = connection.execute(self._dialect.select_status, (receipt_id,)).fetchone()
        return None if row is None else status_of(row)

    @staticmethod
    def _count_undecided(connection: Any) -> int:
        """
        The submissions less the decisions, in one query.
        """
        (count,) = connection.execute(
            "SELECT (SELECT COUNT(*) FROM submissions) - (SELECT COUNT(*) FROM events)"
        ).fetchone()
        return int(count)

    def _select_page(self, connection: Any, request: PageRequest) -> TaskPage:
        """
        One page of L{list_tasks} and, if asked for, its total, in one read
        transaction (see L{Dialect.page_query} and L{Dialect.count_query}).
        """
        raise NotImplementedError()

    # The write functions (on the writer thread, given its connection, in
    # a transaction: see _on_writer).

    def _claim(
        self,
        connection: Any,
        channel: str,
        holder: str,
        now_ms: int,
        lease_ms: int,
        limit: int,
    ) -> NotificationBatch | None:
        """
        L{claim_notifications}: create the channel's cursor after the
        newest submission if it has none (no batch), else, unless another
        holder's lease is current, read the next tasks and lease them.
        """
        dialect = self._dialect
        created = connection.execute(dialect.create_cursor, (channel,))
        if created.rowcount == 1:
            return None
        row = connection.execute(dialect.select_cursor, (channel,)).fetchone()
        through_seq, current_holder, lease_until_ms = row
        if lease_until_ms > now_ms and current_holder != holder:
            return None
        rows = connection.execute(
            dialect.select_after_seq, (through_seq, limit)
        ).fetchall()
        if not rows:
            return None
        (pending,) = connection.execute(
            dialect.count_after_seq, (through_seq,)
        ).fetchone()
        connection.execute(dialect.lease_cursor, (holder, now_ms + lease_ms, channel))
        tasks = [task_of(row) for row in rows]
        return NotificationBatch(
            tasks=tasks, through_seq=tasks[-1].seq, pending=int(pending)
        )

    def _finish(
        self, connection: Any, channel: str, holder: str, through_seq: int | None
    ) -> None:
        """
        L{finish_notifications}: if C{holder} holds C{channel}'s lease, end
        it, moving the cursor forward to C{through_seq} unless it is
        L{None}.
        """
        dialect = self._dialect
        if through_seq is None:
            connection.execute(dialect.release_cursor, (channel, holder))
        else:
            connection.execute(
                dialect.advance_cursor, (through_seq, through_seq, channel, holder)
            )

    # Group commit: the reactor queues writes, the writer takes them.

    def _queue_write(self, write: _Write, done: Deferred[Any]) -> None:
        """
        Queue C{write} for the writer, and start the writer taking batches
        unless it is.
        """
        self._unanswered += 1
        self._pending.append((write, done))
        with self._writer_lock:
            if self._writer_busy:
                return
            self._writer_busy = True
        assert self._writer_pool is not None
        self._writer_pool.call(self._write_next)

    def _write_next(self) -> None:
        """
        On the writer thread: take everything queued (up to C{max_batch})
        as one batch, write it, hand the outcome to the reactor, and queue
        this again, behind whatever else the writer was given meanwhile
        (purges, notification cursors, index catch-ups); or, with nothing
        queued, stop taking batches until L{_queue_write} starts it again.
        """
        pending = self._pending
        with self._writer_lock:
            count = min(self._max_batch, len(pending))
            if not count:
                self._writer_busy = False
                return
        # Only this thread takes from the queue, so the count stands.
        batch = [pending.popleft() for _ in range(count)]
        started = perf_counter()
        result: list[_Outcome] | Failure
        try:
            result = self._write_batch([write for write, _ in batch])
        except BaseException:
            result = Failure()
        self._reactor.callFromThread(self._batch_written, result, batch, started)
        assert self._writer_pool is not None
        self._writer_pool.call(self._write_next)

    def _batch_written(
        self,
        result: list[_Outcome] | Failure,
        batch: list[tuple[_Write, Deferred[Any]]],
        started: float,
    ) -> None:
        """
        On the reactor thread: report the batch, answer every write of it,
        and hand what it stored to the listeners. The writer has gone on to
        the next batch meanwhile.

        @param started: When the writer took the batch (L{perf_counter}).
        """
        self._unanswered -= len(batch)
        if self._batch_observers:
            self._report(result, batch, perf_counter() - started)
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
            self._batch_committed(batch)
            wanted = self._events_wanted()
            for (write, done), outcome in zip(batch, result):
                if isinstance(write, Submission):
                    done.callback(None)
                    if wanted:
                        events.append(StoreEvent("submitted", write.id))
                elif isinstance(outcome, AlreadyDecided):
                    done.errback(outcome)
                else:
                    done.callback(outcome)
                    if outcome is not None and wanted:
                        events.append(StoreEvent("decided", write.receipt_id))
            self._listeners.notify(events)
        self._check_idle()

    def _report(
        self,
        result: list[_Outcome] | Failure,
        batch: list[tuple[_Write, Deferred[Any]]],
        seconds: float,
    ) -> None:
        """
        Tell the batch observers what became of C{batch}.
        """
        committed = not isinstance(result, Failure)
        submissions = []
        for write, _ in batch:
            if type(write) is Submission:
                submissions.append(write)
        stored = tuple(submissions) if committed else ()
        decisions: tuple[str, ...] = ()
        if len(submissions) < len(batch):
            if isinstance(result, Failure):
                decisions = tuple(
                    DECISION_FAILED for write, _ in batch if isinstance(write, _Decision)
                )
            else:
                decisions = tuple(
                    DECISION_ALREADY_MADE
                    if isinstance(outcome, AlreadyDecided)
                    else DECISION_NOT_FOUND
                    if outcome is None
                    else outcome.state
                    for (write, _), outcome in zip(batch, result)
                    if isinstance(write, _Decision)
                )
        report = BatchReport(len(batch), seconds, committed, stored, decisions)
        for observer in list(self._batch_observers):
            try:
                observer(report)
            except Exception:
                self.log.failure("store.batch_observer_failed: a batch observer failed")

    # The read path, and writes outside the batches.

    def _write(self, f: Callable[..., _T], *args: object) -> Deferred[_T]:
        """
        Run C{f(connection, *args)} in one transaction on the writer thread
        (after the batches handed to it before).
        """
        if not self.running or self._writer_pool is None:
            return fail(StoreError("the submission store is not running"))
        return self._counted(self._writer_pool.run(self._on_writer, f, *args))

    def _read(self, f: Callable[..., _T], *args: object) -> Deferred[_T]:
        """
        Run C{f(connection, *args)} on a reader thread.
        """
        if not self.running or self._reader_pool is None:
            return fail(StoreError("the submission store is not running"))
        return self._counted(
            self._reader_pool.run(self._on_reader, f, *args)
        )

    def _read_prepared(self, f: Callable[..., _T], *args: object) -> Deferred[_T]:
        """
        Run the backend's L{_search_preparation} on the writer thread
        (after the work handed to it before), then C{f(connection, *args)}
        on a reader thread: counted as one piece of work, so that a stop
        waits for both.
        """
        if not self.running or self._writer_pool is None or self._reader_pool is None:
            return fail(StoreError("the submission store is not running"))
        prepare = self._search_preparation()
        if prepare is None:
            return self._read(f, *args)
        readers = self._reader_pool

        def read(_: object) -> Deferred[_T]:
            return readers.run(self._on_reader, f, *args)

        prepared: Deferred[Any] = self._writer_pool.run(prepare)
        return self._counted(prepared.addCallback(read))

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
        if self.running or self._unanswered or self._working:
            return
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            waiter.callback(None)
