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
    database sequence, L{SEQUENCE}, numbers submissions and decisions alike)
    is the commit order. Every write is answered only after its batch
    committed.
  - C{pool_size} reader threads, each with its own connection.
  - One listening thread with its own connection, C{LISTEN beacon_events}.
    Every write transaction sends, in its batch's order, one C{NOTIFY
    beacon_events} per stored submission or decision; PostgreSQL delivers
    them at commit, to every instance, in commit order. The payload carries
    ids only: C{"<kind> <seq> <task id>"}. The listening thread hands them
    to the reactor thread (C{callFromThread}), which tells the store's
    listeners. This instance's own writes come back the same way: there is
    one path for every event, so local listeners hear their instance's
    writes exactly once and in the same order as every other instance's.
    The thread remembers the highest C{seq} it delivered; an event at or
    below it is a duplicate and dropped. After the listening connection is
    lost and made again it reads every submission and decision with a
    higher C{seq} (a catch-up read) before it takes notifications again, so
    nothing committed in between is missed.

A connection found broken (the server restarted, the network failed) is
closed and replaced on next use. A read meeting a broken connection that
had been idle is retried once on a new one; a write batch is retried once
only when it failed before its C{COMMIT} was sent (so nothing of it can
have been stored). A batch whose C{COMMIT} met a broken connection fails
with L{StoreError}: its outcome is unknown, so nobody gets a receipt for it.

Opening the database and migrating its schema happen synchronously in
L{PostgreSQLStore.startService}, before any listener starts, under a
session-level advisory lock (L{MIGRATION_LOCK}), so two instances starting
at once migrate one after the other. L{MIGRATIONS} matches the SQLite
store's migrations in meaning (the same tables, columns and constraints,
in PostgreSQL types) and C{beacon_schema} records them the same way.

The password comes from the URL, C{PGPASSWORD} or a passfile, as libpq
finds it; it is never logged (see L{redact}).

C{NOTIFY} reaches every session of the database, whatever its
C{search_path}: give each Beacon deployment a database of its own.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl, unquote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from zope.interface import implementer

from beacon.store._interface import (
    AlreadyDecided,
    ISubmissionStore,
    StoredTask,
    StoreError,
    StoreEvent,
    Submission,
    TaskPage,
)
from beacon.store._sql import Dialect, page_of, row_of, task_of
from beacon.store._threaded import ThreadedStore, _Decision, _Outcome, _Write

_T = TypeVar("_T")

#: PostgreSQL's spelling of the queries the backends share.
DIALECT = Dialect(mark="%s", true="TRUE", subquery_alias=" AS keys", row_values=True)

#: The channel every instance listens on and notifies.
CHANNEL = "beacon_events"

#: The sequence that numbers submissions and decisions alike.
SEQUENCE = "beacon_seq"

#: The advisory lock keys (two 32-bit integers) Beacon takes: the first is
#: Beacon's own ("beac"), the second says what for.
_LOCK_SPACE = 0x62656163
#: Held (per session) while the schema is migrated.
MIGRATION_LOCK = (_LOCK_SPACE, 1)
#: Held (per transaction) by every write transaction, so that the writers of
#: all instances commit one at a time, in C{seq} order.
WRITE_LOCK = (_LOCK_SPACE, 2)

#: How long start-up waits for another instance's migration, and a write
#: for another instance's write transaction, before failing.
MIGRATION_LOCK_TIMEOUT = "60s"
WRITE_LOCK_TIMEOUT = "30s"

#: libpq settings used unless the URL (or, for the first, PGCONNECT_TIMEOUT)
#: says otherwise: a bounded connection attempt, a name in
#: C{pg_stat_activity}, and TCP keepalives so that a vanished server or
#: network is noticed on an idle connection within about a minute.
CONNECT_DEFAULTS = {
    "connect_timeout": "10",
    "application_name": "beacon",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}

#: The listening thread's waits between attempts to connect again, in
#: seconds: the first, and the longest (each wait doubles).
LISTEN_RETRY_FIRST = 0.1
LISTEN_RETRY_MAX = 2.0

#: The longest the listening thread sleeps without looking at its
#: connection, in seconds (data libpq or TLS buffered is then read anyway).
LISTEN_POLL_INTERVAL = 5.0

#: How many rows one catch-up read fetches at a time.
CATCH_UP_CHUNK = 1000

#: The schema migrations, in order; migration N brings the database from
#: version N-1 to N, in one transaction with its C{beacon_schema} row. They
#: match L{beacon.store._sqlite.MIGRATIONS} in meaning. Never edit a
#: released migration: append a new one (to both lists).
MIGRATIONS: list[tuple[str, ...]] = [
    # 1: submissions, their events (at most one: the review decision), and
    # the append-only guards. One sequence numbers both tables, so that
    # C{seq} orders every committed write (see WRITE_LOCK).
    (
        f"CREATE SEQUENCE {SEQUENCE} AS BIGINT",
        f"""
        CREATE TABLE submissions (
            seq BIGINT PRIMARY KEY DEFAULT nextval('{SEQUENCE}'),
            id TEXT NOT NULL UNIQUE,
            context_id TEXT NOT NULL,
            received_at_ms BIGINT NOT NULL,
            door TEXT NOT NULL,
            source TEXT NOT NULL,
            kind TEXT NOT NULL,
            message_id TEXT NOT NULL,
            content BYTEA NOT NULL,
            sha256 TEXT NOT NULL
        )
        """,
        f"""
        CREATE TABLE events (
            seq BIGINT PRIMARY KEY DEFAULT nextval('{SEQUENCE}'),
            submission_id TEXT NOT NULL REFERENCES submissions(id),
            at_ms BIGINT NOT NULL,
            state TEXT NOT NULL,
            note TEXT
        )
        """,
        # At most one event, the review decision, per submission: enforced
        # here so that instances deciding at once cannot both win.
        "CREATE UNIQUE INDEX events_one_decision ON events (submission_id)",
        "CREATE INDEX submissions_by_context ON submissions (context_id)",
        """
        CREATE FUNCTION beacon_append_only() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION USING
                MESSAGE = TG_TABLE_NAME || ' are append-only',
                ERRCODE = 'restrict_violation';
        END
        $$
        """,
        # Statement-level, so that even an UPDATE or DELETE matching no row,
        # and TRUNCATE (which row triggers do not see), are refused.
        """
        CREATE TRIGGER submissions_append_only
        BEFORE UPDATE OR DELETE OR TRUNCATE ON submissions
        FOR EACH STATEMENT EXECUTE FUNCTION beacon_append_only()
        """,
        """
        CREATE TRIGGER events_append_only
        BEFORE UPDATE OR DELETE OR TRUNCATE ON events
        FOR EACH STATEMENT EXECUTE FUNCTION beacon_append_only()
        """,
    ),
]

#: The schema version this code creates and understands.
SCHEMA_VERSION = len(MIGRATIONS)

_CREATE_SCHEMA_TABLE = """
    CREATE TABLE IF NOT EXISTS beacon_schema (
        version INTEGER NOT NULL,
        applied_at_ms BIGINT NOT NULL
    )
"""

_INSERT_SUBMISSION = """
    INSERT INTO submissions
        (id, context_id, received_at_ms, door, source, kind, message_id,
         content, sha256)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
    RETURNING seq
"""

# The database decides, without an error that would abort the transaction:
# nothing is inserted for an unknown id or a decided submission.
_INSERT_DECISION = """
    INSERT INTO events (submission_id, state, at_ms, note)
    SELECT %(id)s, %(state)s, %(at_ms)s, %(note)s
    WHERE EXISTS (SELECT 1 FROM submissions WHERE id = %(id)s)
    ON CONFLICT (submission_id) DO NOTHING
    RETURNING seq
"""

# The newest committed write; the listening thread starts after it.
_SELECT_LAST_SEQ = """
    SELECT GREATEST(
        (SELECT COALESCE(MAX(seq), 0) FROM submissions),
        (SELECT COALESCE(MAX(seq), 0) FROM events)
    )
"""

# What was committed after a given seq, in commit order (see WRITE_LOCK).
_SELECT_COMMITTED_AFTER = """
    SELECT kind, seq, task_id FROM (
        SELECT 'submitted' AS kind, seq, id AS task_id
        FROM submissions WHERE seq > %(after)s
        UNION ALL
        SELECT 'decided' AS kind, seq, submission_id AS task_id
        FROM events WHERE seq > %(after)s
    ) AS committed
    ORDER BY seq
    LIMIT %(limit)s
"""

_EVENT_KINDS = frozenset({"submitted", "decided"})


class _CommitUnknown(Exception):
    """
    The connection broke while a C{COMMIT} was on its way: the batch may or
    may not be stored.
    """


_SECRET_KEYS = frozenset({"password", "sslpassword"})


def _split_url(url: str) -> tuple[str, str | None, str, str, str, str]:
    """
    Split a libpq URL into scheme, user info (L{None} without C{@}),
    hosts, path, query and fragment, without judging them (libpq does).
    """
    scheme, _, rest = url.partition("://")
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    slash = rest.find("/")
    netloc, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    userinfo, at, hosts = netloc.rpartition("@")
    return scheme, (userinfo if at else None), hosts, path, query, fragment


def _secrets(url: str) -> set[str]:
    """Every password in C{url}, as written and percent-decoded."""
    found: set[str] = set()
    if "://" in url:
        _, userinfo, _, _, query, _ = _split_url(url)
        if userinfo is not None and ":" in userinfo:
            found.add(userinfo.partition(":")[2])
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key in _SECRET_KEYS:
                found.add(value)
    else:
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error:
            params = {}
        found.update(str(v) for k, v in params.items() if k in _SECRET_KEYS)
    return {s for s in found | {unquote(s) for s in found} if s}


def redact(url: str) -> str:
    """
    C{url} (a libpq URL or C{key=value} connection string) without its
    password, for logs and messages.
    """
    if "://" not in url:
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error:
            return "<an unreadable connection string>"
        return make_conninfo(
            "", **{k: v for k, v in params.items() if k not in _SECRET_KEYS}
        )
    scheme, userinfo, hosts, path, query, fragment = _split_url(url)
    shown = f"{scheme}://"
    if userinfo is not None:
        shown += f"{userinfo.partition(':')[0]}@"
    shown += hosts + path
    kept = [
        (k, v)
        for k, v in parse_qsl(query, keep_blank_values=True)
        if k not in _SECRET_KEYS
    ]
    if kept:
        shown += f"?{urlencode(kept)}"
    if fragment:
        shown += f"#{fragment}"
    return shown


def scrub(text: str, url: str) -> str:
    """
    C{text} (an error message about C{url}) with C{url} shown as
    L{redact} shows it and its password, if any, masked wherever else it
    appears (libpq quotes a URL it cannot read whole).
    """
    text = text.replace(url, redact(url))
    for secret in _secrets(url):
        text = text.replace(secret, "****")
    return text


def conninfo(url: str) -> str:
    """
    The libpq connection string Beacon connects with: C{url} with
    L{CONNECT_DEFAULTS} for whatever it does not set.

    @raises StoreError: If C{url} is not a valid libpq URL or string.
    """
    try:
        given = conninfo_to_dict(url)
    except psycopg.Error as e:
        raise StoreError(
            f"not a PostgreSQL URL: {redact(url)}: {scrub(describe(e), url)}"
        ) from None
    defaults = {k: v for k, v in CONNECT_DEFAULTS.items() if k not in given}
    if "PGCONNECT_TIMEOUT" in os.environ:
        defaults.pop("connect_timeout", None)
    if "PGAPPNAME" in os.environ:
        defaults.pop("application_name", None)
    return make_conninfo(url, **defaults)


def describe(error: BaseException) -> str:
    """
    A one-line account of a database error: its class and PostgreSQL's
    primary message, never the detail (which can quote a row's values).
    """
    primary: str | None = None
    if isinstance(error, psycopg.Error):
        primary = error.diag.message_primary
    if not primary:
        lines = str(error).strip().splitlines()
        primary = lines[0] if lines else ""
    return f"{type(error).__name__}: {primary}"


def _broken(connection: psycopg.Connection[Any]) -> bool:
    """Whether C{connection} can no longer be used."""
    return bool(connection.closed or connection.broken)


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


def _migrate_locked(connection: psycopg.Connection[Any], display: str) -> tuple[int, int]:
    """
    Bring the schema to L{SCHEMA_VERSION}, one migration per transaction,
    holding L{MIGRATION_LOCK}.

    @return: The schema versions before and after.
    @raises StoreError: If the database is newer than this code.
    @raises psycopg.Error: If a statement fails.
    """
    log = PostgreSQLStore.log
    with connection.transaction():
        connection.execute(_CREATE_SCHEMA_TABLE)
    before: int | None = None
    while True:
        with connection.transaction():
            row = connection.execute(
                "SELECT COALESCE(MAX(version), 0) FROM beacon_schema"
            ).fetchone()
            current = int(row[0]) if row else 0
            if before is None:
                before = current
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"database schema version {current} is newer than "
                    f"this Beacon supports ({SCHEMA_VERSION}): {display}"
                )
            if current == SCHEMA_VERSION:
                return before, current
            for statement in MIGRATIONS[current]:
                connection.execute(statement)
            connection.execute(
                "INSERT INTO beacon_schema (version, applied_at_ms)"
                " VALUES (%s, %s)",
                (current + 1, int(time.time() * 1000)),
            )
        log.info(
            "store.migrated: submission store {url} to schema version {version}",
            url=display,
            version=current + 1,
        )


def migrate(url: str) -> tuple[int, int]:
    """
    Migrate the database at C{url} to L{SCHEMA_VERSION}, under
    L{MIGRATION_LOCK} (another instance migrating meanwhile is waited for,
    up to L{MIGRATION_LOCK_TIMEOUT}). This blocks: call it at start-up or
    from a command, not from a serving reactor.

    @return: The schema versions before and after.
    @raises StoreError: If the database cannot be reached or migrated, or
        is newer than this code.
    """
    display = redact(url)
    connection = _connect_or_fail(conninfo(url), display)
    try:
        connection.execute(f"SET lock_timeout = '{MIGRATION_LOCK_TIMEOUT}'")
        connection.execute("SELECT pg_advisory_lock(%s, %s)", MIGRATION_LOCK)
        try:
            return _migrate_locked(connection, display)
        finally:
            if not _broken(connection):
                connection.execute("SELECT pg_advisory_unlock(%s, %s)", MIGRATION_LOCK)
    except psycopg.errors.LockNotAvailable:
        raise StoreError(
            f"another Beacon has been migrating {display} for longer than"
            f" {MIGRATION_LOCK_TIMEOUT}; try again"
        ) from None
    except psycopg.Error as e:
        raise StoreError(f"cannot migrate the database {display}: {describe(e)}") from e
    finally:
        connection.close()


def schema_version(url: str) -> int:
    """
    Read the schema version of the database at C{url} without changing it:
    0 when Beacon never migrated it.

    @raises StoreError: If the database cannot be reached or read.
    """
    display = redact(url)
    connection = _connect_or_fail(conninfo(url), display)
    try:
        row = connection.execute("SELECT to_regclass('beacon_schema')").fetchone()
        if row is None or row[0] is None:
            return 0
        row = connection.execute(
            "SELECT COALESCE(MAX(version), 0) FROM beacon_schema"
        ).fetchone()
        return int(row[0]) if row else 0
    except psycopg.Error as e:
        raise StoreError(f"cannot read the database {display}: {describe(e)}") from e
    finally:
        connection.close()


def _connect_or_fail(info: str, display: str) -> psycopg.Connection[Any]:
    """
    An autocommit connection to C{info}.

    @raises StoreError: If it cannot be made; the message names the
        database by C{display} and never holds a password.
    """
    try:
        return psycopg.connect(info, autocommit=True)
    except psycopg.Error as e:
        raise StoreError(
            f"cannot connect to the database {display}: {describe(e)}"
        ) from None


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
    @ivar caught_up: The number of events the listening thread delivered
        from catch-up reads rather than from notifications.
    @ivar listen_backend_pid: The server process of the listening
        connection (for C{pg_stat_activity}), or L{None} while it has none.
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
        self.caught_up = 0
        # The listening thread's state; _seen (the highest seq delivered) is
        # only touched by that thread once it runs.
        self._listen_thread: threading.Thread | None = None
        self._listen_connection: psycopg.Connection[Any] | None = None
        self._listen_stop = threading.Event()
        self._wake: tuple[int, int] | None = None
        self._listen_stopped: Deferred[None] | None = None
        self._seen = 0
        self.listen_backend_pid: int | None = None

    def __repr__(self) -> str:
        return f"<PostgreSQLStore {self.url!r}>"

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
        _, version = migrate(self._given_url)
        # Listen before reading where to start, so that nothing committed
        # in between falls through.
        try:
            listening = self._open("listener")
        except psycopg.Error as e:
            raise StoreError(
                f"cannot connect to the database {self.url}: {describe(e)}"
            ) from None
        try:
            self._seen = self._last_seq(listening)
        except psycopg.Error as e:
            listening.close()
            raise StoreError(
                f"cannot read the database {self.url}: {describe(e)}"
            ) from e
        self._listen_connection = listening
        self.listen_backend_pid = listening.info.backend_pid
        self._start_pools()
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        self._wake = (read_end, write_end)
        self._listen_stop.clear()
        self._listen_stopped = Deferred()
        self._listen_thread = threading.Thread(
            target=self._listen, name="beacon-store-listen", daemon=True
        )
        self._listen_thread.start()
        cast(Callable[[], None], super().startService)()
        self.log.info(
            "store.opened: submission store {url} (schema version {version})",
            url=self.url,
            version=version,
        )

    def _stop_listening(self) -> Deferred[None]:
        """
        Ask the listening thread to deliver what is left and end.

        @return: A L{Deferred} that fires once it has.
        """
        stopped = self._listen_stopped
        if stopped is None:
            return succeed(None)
        self._listen_stop.set()
        if self._wake is not None:
            try:
                os.write(self._wake[1], b"\0")
            except OSError:
                pass  # A wake-up is waiting already, or the thread ended.
        return stopped

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
        return self._stop_listening()

    def _after_close(self) -> None:
        """
        At stop, once the connections are closed: forget the listening
        thread and its wake-up pipe.
        """
        if self._wake is not None:
            os.close(self._wake[1])
            self._wake = None
        self._listen_thread = None
        self._listen_stopped = None

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
        listening thread (L{_deliver}), like every other instance's writes.
        """
        return False

    # The listening thread's events, on the reactor thread.

    def _deliver(self, events: list[StoreEvent]) -> None:
        """
        On the reactor thread: tell the listeners of C{events}, in order.
        """
        self._listeners.notify(events)

    # Connections. Everything below runs on a store thread (or, for the
    # listening connection, once at start-up).

    def _open(self, role: str) -> psycopg.Connection[Any]:
        """
        Open an autocommit connection with Beacon's session settings.

        @param role: C{"reader"} (read-only by default; its explicit
            transactions are C{REPEATABLE READ}), C{"listener"} (read-only,
            listening on L{CHANNEL}) or C{"writer"}.
        @raises psycopg.Error: If it cannot be opened.
        """
        connection = psycopg.connect(self._conninfo, autocommit=True)
        try:
            if role == "reader":
                connection.execute("SET default_transaction_read_only = on")
                connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            elif role == "listener":
                connection.execute("SET default_transaction_read_only = on")
                connection.execute(f"LISTEN {CHANNEL}")
            else:
                connection.execute(f"SET lock_timeout = '{WRITE_LOCK_TIMEOUT}'")
                # A receipt promises a synced commit: keep the server's
                # setting unless it switches syncing off.
                row = connection.execute("SHOW synchronous_commit").fetchone()
                if row is not None and row[0] == "off":
                    connection.execute("SET synchronous_commit = on")
        except BaseException:
            connection.close()
            raise
        return connection

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
        if connection is not None and not _broken(connection):
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
                    if not _broken(connection):
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
                for write in writes:
                    if isinstance(write, Submission):
                        row = connection.execute(
                            _INSERT_SUBMISSION,
                            row_of(write),
                        ).fetchone()
                        assert row is not None
                        payloads.append(f"submitted {row[0]} {write.id}")
                        outcomes.append(None)
                    else:
                        outcome, seq = self._insert_decision(connection, write)
                        if seq is not None:
                            payloads.append(f"decided {seq} {write.receipt_id}")
                        outcomes.append(outcome)
                if payloads:
                    with connection.cursor() as cursor:
                        cursor.executemany(
                            "SELECT pg_notify(%s, %s)",
                            [(CHANNEL, payload) for payload in payloads],
                        )
                committing = True
        except psycopg.Error as e:
            if committing and _broken(connection):
                raise _CommitUnknown() from e
            raise
        return outcomes

    @staticmethod
    def _insert_decision(
        connection: psycopg.Connection[Any], decision: _Decision
    ) -> tuple[_Outcome, int | None]:
        """
        Insert C{decision} inside the open transaction, unless its
        submission is unknown or already decided (the unique index decides,
        also against other instances).

        @return: The outcome, and the decision's seq when it was stored.
        """
        row = connection.execute(
            _INSERT_DECISION,
            {
                "id": decision.receipt_id,
                "state": decision.state,
                "at_ms": decision.at_ms,
                "note": decision.note,
            },
        ).fetchone()
        if row is None:
            decided = connection.execute(
                "SELECT EXISTS (SELECT 1 FROM events WHERE submission_id = %s)",
                (decision.receipt_id,),
            ).fetchone()
            if decided is not None and decided[0]:
                return AlreadyDecided("the submission already has a decision"), None
            return None, None
        task = connection.execute(
            DIALECT.select_task, (decision.receipt_id,)
        ).fetchone()
        assert task is not None
        return task_of(task), int(row[0])

    # The reader threads.

    def _on_reader(self, f: Callable[..., _T], *args: object) -> _T:
        """
        Run C{f} with this reader thread's connection; if a connection that
        had been idle turns out broken, once more on a new one.

        @raises StoreError: If the read failed.
        """
        try:
            for attempt in (1, 2):
                connection, fresh = self._thread_connection("reader")
                try:
                    return f(connection, *args)
                except psycopg.Error:
                    if not _broken(connection):
                        raise
                    self._discard(connection)
                    if fresh or attempt == 2:
                        raise
        except psycopg.Error as e:
            raise StoreError(f"could not read from {self.url}: {describe(e)}") from e
        raise AssertionError("unreachable")  # pragma: no cover

    def _select_page(
        self,
        connection: psycopg.Connection[Any],
        limit: int,
        state: str | None,
        updated_after_ms: int | None,
        context_id: str | None,
        after: tuple[int, int] | None,
    ) -> TaskPage:
        """
        One page of L{list_tasks} and its total, in one C{REPEATABLE READ}
        transaction (the reader connections' isolation), so they agree.
        """
        count, params, page, page_params = self._dialect.page_queries(
            limit, state, updated_after_ms, context_id, after
        )
        with connection.transaction():
            counted = connection.execute(count, params).fetchone()
            rows = connection.execute(page, page_params).fetchall()
        total = int(counted[0]) if counted else 0
        return page_of(rows, limit, total)

    # The listening thread.

    @staticmethod
    def _last_seq(connection: psycopg.Connection[Any]) -> int:
        """
        The seq of the newest committed submission or decision (0: none).
        """
        row = connection.execute(_SELECT_LAST_SEQ).fetchone()
        return int(row[0]) if row else 0

    def _listen(self) -> None:
        """
        The listening thread: deliver notifications as they come; after a
        lost connection, connect again (waiting longer each time, up to
        L{LISTEN_RETRY_MAX}) and catch up; when asked to stop, catch up one
        last time and end.
        """
        connection = self._listen_connection
        self._listen_connection = None
        delay = LISTEN_RETRY_FIRST
        failing = False
        try:
            while True:
                if connection is None:
                    if self._listen_stop.is_set():
                        return
                    try:
                        connection = self._open("listener")
                        self.listen_backend_pid = connection.info.backend_pid
                        caught = self._catch_up(connection)
                    except psycopg.Error as e:
                        if connection is not None:
                            connection.close()
                            connection = None
                        if not failing:
                            failing = True
                            self.log.warn(
                                "store.listen_failed: cannot listen on {url}"
                                " again yet ({reason}); retrying",
                                url=self.url,
                                reason=describe(e),
                            )
                        self._listen_stop.wait(delay)
                        delay = min(delay * 2, LISTEN_RETRY_MAX)
                        continue
                    failing = False
                    delay = LISTEN_RETRY_FIRST
                    self.log.info(
                        "store.listen_reconnected: listening on {url} again;"
                        " {count} events committed meanwhile were caught up",
                        url=self.url,
                        count=caught,
                    )
                try:
                    self._take_notifications(connection)
                    if self._listen_stop.is_set():
                        self._catch_up(connection)
                        return
                    self._wait(connection)
                except psycopg.Error as e:
                    try:
                        connection.close()
                    except psycopg.Error:
                        pass
                    connection = None
                    self.listen_backend_pid = None
                    if not self._listen_stop.is_set():
                        self.log.warn(
                            "store.listen_lost: the listening connection to"
                            " {url} broke ({reason}); connecting again",
                            url=self.url,
                            reason=describe(e),
                        )
        except BaseException:
            # Nothing else may end this thread quietly: say so, then end.
            self.log.failure("store.listen_crashed: the listening thread failed")
        finally:
            if connection is not None:
                try:
                    connection.close()
                except psycopg.Error:
                    pass
            if self._wake is not None:
                os.close(self._wake[0])
            stopped = self._listen_stopped
            if stopped is not None:
                self._reactor.callFromThread(stopped.callback, None)

    def _wait(self, connection: psycopg.Connection[Any]) -> None:
        """
        Block until the listening connection has something to read or the
        store asks this thread to stop.
        """
        assert self._wake is not None
        with selectors.DefaultSelector() as selector:
            selector.register(connection.fileno(), selectors.EVENT_READ)
            selector.register(self._wake[0], selectors.EVENT_READ)
            selector.select(LISTEN_POLL_INTERVAL)
        try:
            os.read(self._wake[0], 64)
        except BlockingIOError:
            pass

    def _take_notifications(self, connection: psycopg.Connection[Any]) -> None:
        """
        Deliver the notifications that have arrived, dropping those at or
        below the last delivered seq (already caught up).
        """
        events: list[StoreEvent] = []
        for notification in connection.notifies(timeout=0):
            if notification.channel != CHANNEL:
                continue
            parsed = self._parse(notification.payload)
            if parsed is None:
                continue
            kind, seq, task_id = parsed
            if seq <= self._seen:
                continue
            self._seen = seq
            events.append(StoreEvent(kind, task_id))
        if events:
            self._reactor.callFromThread(self._deliver, events)

    def _parse(self, payload: str) -> tuple[str, int, str] | None:
        """
        C{"<kind> <seq> <task id>"}, or L{None} (logged, without the
        payload) for anything else on the channel.
        """
        kind, _, rest = payload.partition(" ")
        seq_text, _, task_id = rest.partition(" ")
        if kind in _EVENT_KINDS and seq_text.isdigit() and task_id:
            return kind, int(seq_text), task_id
        self.log.warn(
            "store.notification_ignored: a notification on {channel} that"
            " Beacon did not send",
            channel=CHANNEL,
        )
        return None

    def _catch_up(self, connection: psycopg.Connection[Any]) -> int:
        """
        Deliver every submission and decision committed after the last
        delivered seq, in commit order.

        @return: How many events that was.
        """
        count = 0
        while True:
            rows = connection.execute(
                _SELECT_COMMITTED_AFTER,
                {"after": self._seen, "limit": CATCH_UP_CHUNK},
            ).fetchall()
            if not rows:
                break
            events = [StoreEvent(kind, task_id) for kind, _, task_id in rows]
            self._seen = int(rows[-1][1])
            count += len(events)
            self._reactor.callFromThread(self._deliver, events)
            if len(rows) < CATCH_UP_CHUNK:
                break
        self.caught_up += count
        return count
