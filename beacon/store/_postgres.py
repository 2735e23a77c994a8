"""
The shared submission store: PostgreSQL through psycopg 3 (its synchronous
API), for several Beacon instances behind one load balancer.

It keeps the thread-bridge design of L{beacon.store.SQLiteStore}: once the
store is serving, every database call runs on a thread of its own, never on
the reactor thread.

  - One writer thread, with the only connection this instance writes on.
    Appends and review decisions queue together on the reactor side;
    whenever no write is in flight, everything pending (up to C{max_batch})
    goes to the writer as one batch, written in order in one transaction
    (group commit). Each write transaction first takes a transaction-level
    advisory lock shared by every instance (L{WRITE_LOCK}), so the writers
    of all instances commit one at a time and the order of C{seq} (one
    database sequence numbers submissions and decisions alike)
    is the commit order. It notifies every instance of each write it stored
    (L{beacon.store._postgres_listen}). Every write is answered only after
    its batch committed.
    Purges (which take L{WRITE_LOCK} too) and notification claims run on
    the same thread, between batches.
  - C{pool_size} reader threads, each with its own connection.
  - One listening thread with its own connection (L{ListeningThread}), by
    which the store's listeners hear of every instance's committed writes,
    this one's included.

Notification cursors (L{claim_notifications
<beacon.store.ISubmissionStore.claim_notifications>}) are rows every
instance shares. A claim locks its channel's row (C{SELECT ... FOR
UPDATE}; a channel's first claim creates it with C{ON CONFLICT DO
NOTHING}, which waits for a concurrent creator), so instances claiming at
once take turns and each sees the lease the one before took. Reading
"every submission after the cursor" never skips one that commits later:
every write transaction draws its seqs while it holds L{WRITE_LOCK} and
commits before the next one may draw, so once a seq is visible every
lower one is committed or never will be. Each submission is therefore
claimed once while leases are honoured, and again only after a holder's
lease ran out before it finished.

A connection found broken (the server restarted, the network failed) is
closed and replaced on next use. A read meeting a broken connection that
had been idle is retried once on a new one; a write batch is retried once
only when it failed before its C{COMMIT} was sent (so nothing of it can
have been stored). A batch whose C{COMMIT} met a broken connection fails
with L{StoreError}: its outcome is unknown, so nobody gets a receipt for it.

Opening the database and migrating its schema
(L{beacon.store._postgres_schema}) happen synchronously in
L{PostgreSQLStore.startService}, before any listener starts. How the
database is reached and named in logs is L{beacon.store._postgres_connect}'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import psycopg
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from zope.interface import implementer

from beacon.store._interface import (
    AlreadyDecided,
    ISubmissionStore,
    StoredTask,
    StoreError,
    Submission,
    TaskPage,
)
from beacon.store._postgres_connect import (
    broken,
    conninfo,
    describe,
    redact,
    session,
)
from beacon.store._postgres_listen import (
    CHANNEL,
    ListeningThread,
    notification_payload,
)
from beacon.store._postgres_schema import WRITE_LOCK, migrate
from beacon.store._sql import (
    Dialect,
    PageRequest,
    counted_exactly,
    page_of,
    row_of,
    task_of,
)
from beacon.store._threaded import ThreadedStore, _Decision, _Outcome, _Write

_T = TypeVar("_T")

#: PostgreSQL's spelling of the queries the backends share. A search is the
#: stored search vector (C{submissions.search}, indexed: see
#: L{beacon.store._postgres_schema}'s migration 2) against
#: C{plainto_tsquery} of the search, in the C{simple}
#: configuration (every word as written, lower-cased; no stemming); an id
#: prefix is a C{LIKE}, which the C{text_pattern_ops} index on ids serves.
DIALECT = Dialect(
    mark="%s",
    true="TRUE",
    subquery_alias=" AS keys",
    row_values=True,
    search_condition="s.search @@ plainto_tsquery('simple', %s)",
    search_quotes_words=False,
    prefix_condition="s.id LIKE %s",
    prefix_wildcard="%",
    for_update=" FOR UPDATE",
)

#: How long a write waits for another instance's write transaction
#: (L{WRITE_LOCK}) before failing.
WRITE_LOCK_TIMEOUT = "30s"

_INSERT_SUBMISSION = """
    INSERT INTO submissions
        (id, context_id, received_at_ms, door, source, kind, message_id,
         content, sha256)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
    RETURNING seq
"""

#: Insert a run of a batch's decisions (distinct ids; one or thousands) and
#: read their decided tasks back, in one statement, set-based, in their
#: order so that their seqs follow it. The database decides, without an
#: error that would abort the transaction: nothing is inserted for an
#: unknown id or a decided submission (the unique index decides, also
#: against other instances). The statement's own snapshot does not see the
#: rows it inserts, so a decision's columns come from RETURNING, the rest
#: from the tables. The parameters are four arrays, of ids, states, times
#: and notes; each row is one decision stored, with its task.
_INSERT_DECISIONS = """
    WITH wanted AS (
        SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::text[])
            WITH ORDINALITY AS w(submission_id, state, at_ms, note, n)
    ), decided AS (
        INSERT INTO events (submission_id, state, at_ms, note)
        SELECT w.submission_id, w.state, w.at_ms, w.note
        FROM wanted AS w
        WHERE EXISTS (SELECT 1 FROM submissions WHERE id = w.submission_id)
        ORDER BY w.n
        ON CONFLICT (submission_id) DO NOTHING
        RETURNING seq, submission_id, state, at_ms, note
    )
    SELECT decided.seq,
        s.seq, s.id, s.context_id, s.received_at_ms, s.door, s.source, s.kind,
        s.message_id, s.content, s.sha256, decided.state, decided.at_ms,
        decided.note, p.at_ms
    FROM decided
    JOIN submissions AS s ON s.id = decided.submission_id
    LEFT JOIN purges AS p ON p.submission_id = s.id
"""

#: Of the ids in the parameter (an array), those with a decision.
_DECIDED_AMONG = "SELECT submission_id FROM events WHERE submission_id = ANY(%s::text[])"

#: Send a notification on L{CHANNEL} (the first parameter) for each payload
#: of the second (an array), in its order, in one statement.
_NOTIFY_ALL = "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload"


def _runs(writes: list[_Write]) -> list[list[_Write]]:
    """
    C{writes} cut, in order, into runs that are each a single submission or
    decisions with distinct ids (a repeated id starts a new run, so that
    the first decision of an id is judged before the second).
    """
    runs: list[list[_Write]] = []
    ids: set[str] = set()
    for write in writes:
        if isinstance(write, Submission):
            runs.append([write])
            ids = set()
            continue
        last = runs[-1] if runs else None
        if last is None or isinstance(last[0], Submission) or write.receipt_id in ids:
            runs.append([write])
            ids = {write.receipt_id}
        else:
            last.append(write)
            ids.add(write.receipt_id)
    return runs


class _CommitUnknown(Exception):
    """
    The connection broke while a C{COMMIT} was on its way: the batch may or
    may not be stored.
    """


def _storable(text: str) -> bool:
    """
    Whether PostgreSQL's C{TEXT} can hold C{text}: it takes no NUL
    character, and the encoding no lone surrogate.
    """
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeError:
        return False
    return True


def _unstorable_field(submission: Submission) -> str | None:
    """
    The name of the first text field of C{submission} that PostgreSQL
    cannot hold, or L{None}.
    """
    for name in (
        "id",
        "context_id",
        "door",
        "source",
        "kind",
        "message_id",
        "sha256",
    ):
        if not _storable(cast(str, getattr(submission, name))):
            return name
    return None


def _as_reader(connection: psycopg.Connection[Any]) -> None:
    """
    A reader connection's session settings: read-only by default, its
    explicit transactions C{REPEATABLE READ}, and every statement planned
    for its own parameters.

    psycopg prepares a statement run five times on a connection, and after
    five more PostgreSQL may plan a prepared statement once for any
    parameters (a generic plan). A list's best plan depends on them: a
    search for a word in most submissions is counted by a scan that stops
    at the cap, one for a rare word through the full-text index; the
    generic plan, which cannot tell them apart, takes the index for both
    and reads every match of a common word (at 1,000,000 submissions, a
    capped count of "the" went from 25 ms to 300 ms on the eleventh call).
    """
    connection.execute("SET default_transaction_read_only = on")
    connection.execute("SET plan_cache_mode = force_custom_plan")
    connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ


def _as_writer(connection: psycopg.Connection[Any]) -> None:
    """
    The writer connection's session settings: a bound on waiting for
    L{WRITE_LOCK}, and synced commits.
    """
    connection.execute(f"SET lock_timeout = '{WRITE_LOCK_TIMEOUT}'")
    # A receipt promises a synced commit: keep the server's setting unless
    # it switches syncing off.
    row = connection.execute("SHOW synchronous_commit").fetchone()
    if row is not None and row[0] == "off":
        connection.execute("SET synchronous_commit = on")


@implementer(ISubmissionStore)
class PostgreSQLStore(ThreadedStore):
    """
    An L{ISubmissionStore} in a PostgreSQL database that several Beacon
    instances share, as a service.

    Start it (directly or as a child of the service tree) before use; stop
    it to commit and answer every pending write, deliver every committed
    event to the listeners and close the connections.

    @ivar url: The database, without its password (safe to log).
    @ivar transactions: The number of write transactions this store has
        committed (one per batch).
    """

    log = Logger()

    def __init__(
        self,
        url: str,
        reactor: IReactorFromThreads,
        *,
        max_batch: int = 512,
        pool_size: int = 4,
    ) -> None:
        """
        @param url: A libpq URL, C{postgresql://user@host:port/db}; the
            password may be in it, in C{PGPASSWORD} or in a passfile.
        @param reactor: The reactor that receives the threads' results.
        @param max_batch: The most writes (submissions and decisions) in
            one transaction.
        @param pool_size: The number of reader threads (each with its own
            connection). The writer and the listening thread have one more
            connection each.
        @raises ValueError: If C{max_batch} or C{pool_size} is less than 1.
        @raises StoreError: If C{url} is not a libpq URL.
        """
        super().__init__(
            reactor,
            dialect=DIALECT,
            max_batch=max_batch,
            readers=pool_size,
            readers_name="pool_size",
        )
        self.url = redact(url)
        self._conninfo = conninfo(url)
        self._given_url = url
        self._listening = ListeningThread(
            reactor, self._conninfo, self.url, self._listeners.notify, self.log
        )

    def __repr__(self) -> str:
        return f"<PostgreSQLStore {self.url!r}>"

    @property
    def caught_up(self) -> int:
        """
        The number of events the listening thread delivered from catch-up
        reads rather than from notifications.
        """
        return self._listening.caught_up

    @property
    def listen_backend_pid(self) -> int | None:
        """
        The server process of the listening connection (for
        C{pg_stat_activity}), or L{None} while it has none.
        """
        return self._listening.backend_pid

    # Start and stop.

    def startService(self) -> None:
        """
        Migrate the schema, open the listening connection and start the
        threads.

        This runs synchronously on the calling thread: it is start-up,
        before any listener accepts a request.

        @raises StoreError: If the database cannot be reached or migrated,
            or its schema is newer than this code.
        """
        _, version = migrate(self._given_url, PostgreSQLStore.log)
        self._listening.connect()
        self._start_pools()
        self._listening.start()
        cast(Callable[[], None], super().startService)()
        self.log.info(
            "store.opened: submission store {url} (schema version {version})",
            url=self.url,
            version=version,
        )

    # ThreadedStore's hooks not defined further down.

    _location_key = "url"

    @property
    def _location(self) -> str:
        return self.url

    def _before_close(self) -> Deferred[None]:
        """
        At stop: let the listening thread deliver everything committed so
        far (after its last catch-up) before the pool connections close.
        """
        return self._listening.stop()

    def _after_close(self) -> None:
        """
        At stop, once the connections are closed: forget the listening
        thread and its wake-up pipe.
        """
        self._listening.close()

    def _close_connection(self, connection: psycopg.Connection[Any]) -> None:
        try:
            connection.close()
        except psycopg.Error:
            pass

    def _refuse_submission(self, submission: Submission) -> Deferred[None] | None:
        """
        A submission with a text field that PostgreSQL cannot hold (a NUL
        character) fails alone, at once.
        """
        field = _unstorable_field(submission)
        if field is not None:
            return fail(
                StoreError(f"the submission's {field} cannot be stored in PostgreSQL")
            )
        return None

    def _refuse_decision(
        self, receipt_id: str, note: str | None
    ) -> Deferred[StoredTask | None] | None:
        """
        No stored submission has an id PostgreSQL cannot hold; a note it
        cannot hold fails at once.
        """
        if not _storable(receipt_id):
            return succeed(None)  # No stored submission has such an id.
        if note is not None and not _storable(note):
            return fail(StoreError("the decision's note cannot be stored in PostgreSQL"))
        return None

    def _unreadable(self, *texts: str | None) -> bool:
        """
        A running store finds nothing for a key PostgreSQL cannot hold.
        """
        return any(
            text is not None and not _storable(text) and self.running
            for text in texts
        )

    def _events_wanted(self) -> bool:
        """
        Never: the listeners hear of what a batch stored through the
        listening thread, like every other instance's writes.
        """
        return False

    # Connections. Everything below runs on a store thread.

    def _open(self, role: str) -> psycopg.Connection[Any]:
        """
        Open an autocommit connection with Beacon's session settings.

        @param role: C{"reader"} (read-only by default; its explicit
            transactions are C{REPEATABLE READ}) or C{"writer"}.
        @raises psycopg.Error: If it cannot be opened.
        """
        return session(self._conninfo, _as_reader if role == "reader" else _as_writer)

    def _thread_connection(self, role: str) -> tuple[psycopg.Connection[Any], bool]:
        """
        This thread's connection, opened on first use and after the last
        one was found broken.

        @return: The connection, and whether it was opened just now.
        @raises psycopg.Error: If a new connection cannot be opened.
        """
        connection: psycopg.Connection[Any] | None = getattr(
            self._local, "connection", None
        )
        if connection is not None and not broken(connection):
            return connection, False
        if connection is not None:
            self._discard(connection)
        connection = self._open(role)
        self._local.connection = connection
        with self._connections_lock:
            self._connections.append(connection)
        if getattr(self._local, "lost", False):
            self._local.lost = False
            self.log.info(
                "store.reconnected: a {role} connection to {url} is open again",
                role=role,
                url=self.url,
            )
        return connection, True

    def _discard(self, connection: psycopg.Connection[Any]) -> None:
        """
        Close this thread's broken C{connection}; the next use opens another.
        """
        if getattr(self._local, "connection", None) is connection:
            self._local.connection = None
        if not getattr(self._local, "lost", False):
            self._local.lost = True
            self.log.warn(
                "store.connection_lost: a connection to {url} broke; it is"
                " replaced on next use",
                url=self.url,
            )
        with self._connections_lock:
            if connection in self._connections:
                self._connections.remove(connection)
        try:
            connection.close()
        except psycopg.Error:
            pass

    # The writer thread.

    def _write_batch(self, writes: list[_Write]) -> list[_Outcome]:
        """
        Write C{writes} in order in one transaction, or none of them; a
        connection that had been idle and is found broken before anything
        was sent is replaced and the batch tried once more.

        @return: What became of each write, in order (see L{_Outcome}).
        @raises StoreError: If the transaction failed; its message names the
            database error, never submitted content.
        """
        try:
            for attempt in (1, 2):
                connection, fresh = self._thread_connection("writer")
                try:
                    return self._write_in(connection, writes)
                except _CommitUnknown as e:
                    self._discard(connection)
                    raise StoreError(
                        f"the connection to {self.url} broke while committing"
                        f" {len(writes)} write(s); they may not be stored:"
                        f" {describe(cast(BaseException, e.__cause__))}"
                    ) from e.__cause__
                except psycopg.Error:
                    if not broken(connection):
                        raise
                    self._discard(connection)
                    if fresh or attempt == 2:
                        raise
        except psycopg.Error as e:
            raise StoreError(
                f"could not store {len(writes)} write(s) in {self.url}: {describe(e)}"
            ) from e
        except UnicodeError as e:
            raise StoreError(
                f"could not store {len(writes)} write(s) in {self.url}:"
                f" {type(e).__name__}"
            ) from e
        raise AssertionError("unreachable")  # pragma: no cover

    def _write_in(
        self, connection: psycopg.Connection[Any], writes: list[_Write]
    ) -> list[_Outcome]:
        """
        One write transaction: take L{WRITE_LOCK}, insert in order, notify
        L{CHANNEL} of every stored write, commit.

        @raises _CommitUnknown: If the connection broke during C{COMMIT}.
        @raises psycopg.Error: For any failure before it (nothing stored).
        """
        outcomes: list[_Outcome] = []
        payloads: list[str] = []
        committing = False
        try:
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s, %s)", WRITE_LOCK)
                for run in _runs(writes):
                    write = run[0]
                    if isinstance(write, Submission):
                        row = connection.execute(
                            _INSERT_SUBMISSION,
                            row_of(write),
                        ).fetchone()
                        assert row is not None
                        payloads.append(
                            notification_payload("submitted", row[0], write.id)
                        )
                        outcomes.append(None)
                        continue
                    decisions = cast(list[_Decision], run)
                    inserted = self._insert_decisions(connection, decisions)
                    for decision, (outcome, seq) in zip(decisions, inserted):
                        if seq is not None:
                            payloads.append(
                                notification_payload(
                                    "decided", seq, decision.receipt_id
                                )
                            )
                        outcomes.append(outcome)
                if payloads:
                    connection.execute(_NOTIFY_ALL, (CHANNEL, payloads))
                committing = True
        except psycopg.Error as e:
            if committing and broken(connection):
                raise _CommitUnknown() from e
            raise
        return outcomes

    @staticmethod
    def _insert_decisions(
        connection: psycopg.Connection[Any], decisions: list[_Decision]
    ) -> list[tuple[_Outcome, int | None]]:
        """
        Insert C{decisions} (distinct ids) inside the open transaction,
        each unless its submission is unknown or already decided, in two
        statements whatever their number: the insert (L{_INSERT_DECISIONS}),
        then, for those not stored, which were decided.

        @return: Each decision's outcome, and its seq when it was stored.
        """
        rows = connection.execute(
            _INSERT_DECISIONS,
            (
                [d.receipt_id for d in decisions],
                [d.state for d in decisions],
                [d.at_ms for d in decisions],
                [d.note for d in decisions],
            ),
        ).fetchall()
        stored = {row[2]: row for row in rows}
        missing = [d.receipt_id for d in decisions if d.receipt_id not in stored]
        decided: set[str] = set()
        if missing:
            decided = {
                row[0]
                for row in connection.execute(_DECIDED_AMONG, (missing,)).fetchall()
            }
        outcomes: list[tuple[_Outcome, int | None]] = []
        for decision in decisions:
            row = stored.get(decision.receipt_id)
            if row is not None:
                outcomes.append((task_of(row[1:]), int(row[0])))
            elif decision.receipt_id in decided:
                outcomes.append(
                    (AlreadyDecided("the submission already has a decision"), None)
                )
            else:
                outcomes.append((None, None))
        return outcomes

    # The writer thread, outside the batches.

    def _on_writer(self, f: Callable[..., _T], *args: object) -> _T:
        """
        Run C{f} with the writer's connection in one transaction, committed
        if it returns; if a connection that had been idle turns out broken
        before anything was stored, once more on a new one.

        @raises StoreError: If the transaction failed.
        """
        def transaction(connection: psycopg.Connection[Any]) -> _T:
            with connection.transaction():
                return f(connection, *args)

        return self._retried("writer", "write to", transaction)

    def _purge_now(self, decided_before_ms: int, at_ms: int, dry_run: bool) -> int:
        """
        Purge in one transaction holding L{WRITE_LOCK} (one instance's
        writes at a time, as for every batch), then rewrite the two tables
        (L{_rewrite}): the old row versions still hold the erased content,
        in the tables, their TOAST relations and the full-text index (a
        plain C{VACUUM} marks their space free without overwriting it, and
        never takes a word out of a GIN index's keys).

        @raises StoreError: If the purge failed (then nothing was purged),
            or the rewrite (then it was).
        """
        if dry_run:
            return self._on_writer(self._count_purgeable, decided_before_ms)
        count = self._on_writer(self._purge_rows, decided_before_ms, at_ms)
        if count:
            connection, _ = self._write_connection()
            try:
                refused = self._rewrite(connection)
            except psycopg.Error as e:
                if broken(connection):
                    self._discard(connection)
                raise StoreError(
                    f"purged {count} submission(s) in {self.url}, but could not"
                    f" rewrite its tables (VACUUM FULL): {describe(e)}; the"
                    " erased content stays in the table files until VACUUM FULL"
                    " submissions, events is run"
                ) from e
            if refused:
                raise StoreError(
                    f"purged {count} submission(s) in {self.url}, but its role"
                    f" may not rewrite {', '.join(refused)} (VACUUM FULL): the"
                    " erased content stays in the table files until their owner"
                    " runs VACUUM FULL submissions, events"
                )
        return count

    @staticmethod
    def _rewrite(connection: psycopg.Connection[Any]) -> list[str]:
        """
        C{VACUUM FULL submissions, events}: write each table, its TOAST
        relation and its indexes anew, with the live row versions only, and
        drop the old files (PostgreSQL truncates them when the rewrite
        commits), so that no byte of a purged content or note is left in
        the database's files. Each table is locked (C{ACCESS EXCLUSIVE}:
        no read, no write) while it is rewritten; the wait for the lock is
        bounded by the writer's C{lock_timeout}.

        @return: The tables this connection's role may not vacuum (not
            their owner's, nor the database owner's, nor, from PostgreSQL
            17, granted C{MAINTAIN}; C{VACUUM} would skip them with a
            warning only): none, or the rewrite was not attempted.
        """
        maintain = (
            " OR has_table_privilege(c.oid, 'MAINTAIN')"
            if connection.info.server_version >= 170000
            else ""
        )
        refused = [
            str(name)
            for (name,) in connection.execute(
                "SELECT c.relname FROM pg_class AS c"
                " WHERE c.oid IN ('submissions'::regclass, 'events'::regclass)"
                " AND NOT (pg_has_role(c.relowner, 'USAGE') OR pg_has_role(("
                "SELECT datdba FROM pg_database WHERE datname = current_database()"
                f"), 'USAGE'){maintain})"
                " ORDER BY c.relname"
            ).fetchall()
        ]
        if not refused:
            connection.execute("VACUUM FULL submissions, events")
        return refused

    def _write_connection(self) -> tuple[psycopg.Connection[Any], bool]:
        """
        The writer thread's connection.

        @raises StoreError: If a new one cannot be opened.
        """
        try:
            return self._thread_connection("writer")
        except psycopg.Error as e:
            raise StoreError(f"could not connect to {self.url}: {describe(e)}") from e

    @staticmethod
    def _count_purgeable(
        connection: psycopg.Connection[Any], decided_before_ms: int
    ) -> int:
        """
        How many submissions a purge with C{decided_before_ms} would purge.
        """
        row = connection.execute(DIALECT.count_purgeable, (decided_before_ms,)).fetchone()
        return int(row[0]) if row else 0

    @staticmethod
    def _purge_rows(
        connection: psycopg.Connection[Any], decided_before_ms: int, at_ms: int
    ) -> int:
        """
        Inside the open transaction, once L{WRITE_LOCK} is held: record
        each purge (which lets the append-only guards allow the rest),
        empty its content and forget its note.

        @return: How many submissions were purged.
        """
        connection.execute("SELECT pg_advisory_xact_lock(%s, %s)", WRITE_LOCK)
        rows = connection.execute(DIALECT.purgeable, (decided_before_ms,)).fetchall()
        if not rows:
            return 0
        purged = [id_ for _, id_ in rows]
        connection.execute(
            "INSERT INTO purges (submission_id, at_ms)"
            " SELECT unnest(%s::text[]), %s",
            (purged, at_ms),
        )
        connection.execute(
            "UPDATE submissions SET content = '' WHERE id = ANY(%s)", (purged,)
        )
        connection.execute(
            "UPDATE events SET note = NULL WHERE submission_id = ANY(%s)"
            " AND note IS NOT NULL",
            (purged,),
        )
        return len(purged)

    # The reader threads.

    def _on_reader(self, f: Callable[..., _T], *args: object) -> _T:
        """
        Run C{f} with this reader thread's connection; if a connection that
        had been idle turns out broken, once more on a new one.

        @raises StoreError: If the read failed.
        """
        return self._retried("reader", "read from", lambda connection: f(connection, *args))

    def _retried(
        self, role: str, doing: str, f: Callable[[psycopg.Connection[Any]], _T]
    ) -> _T:
        """
        Run C{f} with this thread's connection for C{role}; if a connection
        that had been idle turns out broken, once more on a new one.

        @param doing: What failed, for the error (C{"read from"}).
        @raises StoreError: If it failed.
        """
        try:
            for attempt in (1, 2):
                connection, fresh = self._thread_connection(role)
                try:
                    return f(connection)
                except psycopg.Error:
                    if not broken(connection):
                        raise
                    self._discard(connection)
                    if fresh or attempt == 2:
                        raise
        except psycopg.Error as e:
            raise StoreError(f"could not {doing} {self.url}: {describe(e)}") from e
        raise AssertionError("unreachable")  # pragma: no cover

    def _select_page(
        self, connection: psycopg.Connection[Any], request: PageRequest
    ) -> TaskPage:
        """
        One page of L{list_tasks} and, if asked for, its total, in one
        C{REPEATABLE READ} transaction (the reader connections' isolation),
        so they agree. A page of no task is not read; one of few is read
        from all of them (see L{Dialect.page_query
        <beacon.store._sql.Dialect.page_query>}).
        """
        total: int | None = None
        rows: list[Any] = []
        with connection.transaction():
            if request.with_total:
                count, params = self._dialect.count_query(request)
                counted = connection.execute(count, params).fetchone()
                total = int(counted[0]) if counted else 0
            matching = counted_exactly(request, total)
            if matching != 0:
                page, page_params = self._dialect.page_query(request, matching)
                rows = connection.execute(page, page_params).fetchall()
        return page_of(rows, request, total)
