"""
What Beacon keeps in a PostgreSQL database, and bringing a database there:
the schema's migrations and version, the names every instance shares in it
(the sequence that numbers every write, the advisory lock keys), and
migrating under the migration lock.

The schema is migrated (L{migrate}) synchronously at start-up, before any
listener starts, or by C{beacon db upgrade}, under a session-level advisory
lock (L{MIGRATION_LOCK}), so two instances starting at once migrate one
after the other. Migration 2 builds its indexes (the full-text one
included) over the rows already stored, in its transaction: on a large
database, that start-up takes as long as the index builds. L{MIGRATIONS} matches the SQLite store's migrations in
meaning (the same tables, columns and constraints, in PostgreSQL types, but
for the full-text index: SQLite's is an FTS5 table with a watermark, caught
up behind the commit since its migration 3, which changes nothing here) and
C{beacon_schema} records them the same way.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from twisted.logger import Logger

from beacon.store._interface import StoreError
from beacon.store._postgres_connect import (
    broken,
    conninfo,
    connect_or_fail,
    describe,
    redact,
)

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

#: A submission's full-text search vector, from its C{content}: migration 2
#: stores it in the generated column C{submissions.search} (kept by
#: PostgreSQL itself on insert and on a purge's update) and indexes that
#: column, so that a search tests a stored vector, never recomputes one.
SEARCH_VECTOR = "to_tsvector('simple', beacon_search_text(content))"

#: How long start-up waits for another instance's migration before failing.
MIGRATION_LOCK_TIMEOUT = "60s"

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
    # 2: the reader's half. The received order's index; ids by prefix; the
    # full-text index of every submission (an expression index: built for
    # the rows stored so far, kept by every insert); purges, the one change
    # the append-only guards now allow (content emptied, the decision's note
    # forgotten, for a decided submission with a purges row); notification
    # cursors (mutable).
    (
        "CREATE INDEX submissions_by_received ON submissions (received_at_ms, seq)",
        "CREATE INDEX submissions_by_id_prefix ON submissions (id text_pattern_ops)",
        # The searchable text of a stored content (see beacon.intake): a
        # text submission's text; a structured one's sender (name, agent,
        # operator), subject and body; nothing for anything else. It must
        # never fail an insert, whatever bytes the content holds: a content
        # that is not UTF-8 JSON has no text (caught in a subtransaction,
        # which a parallel worker may not start: PARALLEL UNSAFE, the
        # default). IMMUTABLE, as an index expression must be (it reads
        # nothing but its argument). COST 1000 (tens of microseconds a
        # row, measured) keeps the planner from testing every row against
        # a search rather than asking the index.
        """
        CREATE FUNCTION beacon_search_text(content bytea) RETURNS text
        LANGUAGE plpgsql IMMUTABLE STRICT COST 1000 AS $$
        DECLARE
            document jsonb;
        BEGIN
            IF length(content) = 0 THEN
                RETURN '';
            END IF;
            BEGIN
                document := convert_from(content, 'UTF8')::jsonb;
            EXCEPTION WHEN OTHERS THEN
                RETURN '';
            END;
            IF jsonb_typeof(document) <> 'object' THEN
                RETURN '';
            END IF;
            RETURN concat_ws(
                ' ',
                document ->> 'text',
                document #>> '{message,from,name}',
                document #>> '{message,from,agent}',
                document #>> '{message,from,operator}',
                document #>> '{message,subject}',
                document #>> '{message,body}'
            );
        END
        $$
        """,
        # Stored, not only indexed: a plan that walks the receipt-order
        # index and tests each row against a search then reads the vector
        # (about a microsecond) instead of computing it from the content
        # (tens of microseconds); measured 43 ms -> 1.1 ms for a two-word
        # search over 100,000 submissions.
        f"""
        ALTER TABLE submissions
        ADD COLUMN search tsvector GENERATED ALWAYS AS ({SEARCH_VECTOR}) STORED
        """,
        "CREATE INDEX submissions_search ON submissions USING GIN (search)",
        """
        CREATE TABLE purges (
            submission_id TEXT PRIMARY KEY REFERENCES submissions(id),
            at_ms BIGINT NOT NULL
        )
        """,
        """
        CREATE TRIGGER purges_append_only
        BEFORE UPDATE OR DELETE OR TRUNCATE ON purges
        FOR EACH STATEMENT EXECUTE FUNCTION beacon_append_only()
        """,
        # UPDATE is judged row by row now: the statement-level guard stays
        # for DELETE and TRUNCATE.
        "DROP TRIGGER submissions_append_only ON submissions",
        """
        CREATE TRIGGER submissions_append_only
        BEFORE DELETE OR TRUNCATE ON submissions
        FOR EACH STATEMENT EXECUTE FUNCTION beacon_append_only()
        """,
        "DROP TRIGGER events_append_only ON events",
        """
        CREATE TRIGGER events_append_only
        BEFORE DELETE OR TRUNCATE ON events
        FOR EACH STATEMENT EXECUTE FUNCTION beacon_append_only()
        """,
        # The one update allowed on submissions: emptying the content of a
        # decided submission with a purges row, changing nothing else.
        """
        CREATE FUNCTION beacon_submission_purged() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF octet_length(NEW.content) = 0
                AND (NEW.seq, NEW.id, NEW.context_id, NEW.received_at_ms,
                     NEW.door, NEW.source, NEW.kind, NEW.message_id,
                     NEW.sha256)
                    IS NOT DISTINCT FROM
                    (OLD.seq, OLD.id, OLD.context_id, OLD.received_at_ms,
                     OLD.door, OLD.source, OLD.kind, OLD.message_id,
                     OLD.sha256)
                AND EXISTS (SELECT 1 FROM purges WHERE submission_id = OLD.id)
                AND EXISTS (SELECT 1 FROM events WHERE submission_id = OLD.id)
            THEN
                RETURN NEW;
            END IF;
            RAISE EXCEPTION USING
                MESSAGE = 'submissions are append-only',
                ERRCODE = 'restrict_violation';
        END
        $$
        """,
        # The one update allowed on events: forgetting the note of a purged
        # submission's decision, changing nothing else.
        """
        CREATE FUNCTION beacon_event_purged() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.note IS NULL
                AND (NEW.seq, NEW.submission_id, NEW.at_ms, NEW.state)
                    IS NOT DISTINCT FROM
                    (OLD.seq, OLD.submission_id, OLD.at_ms, OLD.state)
                AND EXISTS (
                    SELECT 1 FROM purges WHERE submission_id = OLD.submission_id
                )
            THEN
                RETURN NEW;
            END IF;
            RAISE EXCEPTION USING
                MESSAGE = 'events are append-only',
                ERRCODE = 'restrict_violation';
        END
        $$
        """,
        """
        CREATE TRIGGER submissions_purge_only
        BEFORE UPDATE ON submissions
        FOR EACH ROW EXECUTE FUNCTION beacon_submission_purged()
        """,
        """
        CREATE TRIGGER events_purge_only
        BEFORE UPDATE ON events
        FOR EACH ROW EXECUTE FUNCTION beacon_event_purged()
        """,
        """
        CREATE TABLE notify_cursors (
            channel TEXT PRIMARY KEY,
            through_seq BIGINT NOT NULL,
            holder TEXT,
            lease_until_ms BIGINT NOT NULL DEFAULT 0
        )
        """,
    ),
    # 3: nothing to change. SQLite's migration 3 moves its full-text index
    # behind the commit (a trigger dropped, a watermark added); here the
    # search vector is a stored generated column, kept by the inserting
    # statement itself, and stays so. The migration is recorded all the
    # same, so that a schema version means the same on both backends.
    (),
    # 4: the status order's index, as SQLite's migration 4 (see there).
    ("CREATE INDEX events_by_time ON events (at_ms)",),
]

#: The schema version this code creates and understands.
SCHEMA_VERSION = len(MIGRATIONS)

_CREATE_SCHEMA_TABLE = """
    CREATE TABLE IF NOT EXISTS beacon_schema (
        version INTEGER NOT NULL,
        applied_at_ms BIGINT NOT NULL
    )
"""

def _migrate_locked(
    connection: psycopg.Connection[Any], display: str, log: Logger
) -> tuple[int, int]:
    """
    Bring the schema to L{SCHEMA_VERSION}, one migration per transaction,
    holding L{MIGRATION_LOCK}.

    @return: The schema versions before and after.
    @raises StoreError: If the database is newer than this code.
    @raises psycopg.Error: If a statement fails.
    """
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


def migrate(url: str, log: Logger) -> tuple[int, int]:
    """
    Migrate the database at C{url} to L{SCHEMA_VERSION}, under
    L{MIGRATION_LOCK} (another instance migrating meanwhile is waited for,
    up to L{MIGRATION_LOCK_TIMEOUT}). This blocks: call it at start-up or
    from a command, not from a serving reactor.

    @param log: Where each applied migration is logged
        (C{store.migrated}).
    @return: The schema versions before and after.
    @raises StoreError: If the database cannot be reached or migrated, or
        is newer than this code.
    """
    display = redact(url)
    connection = connect_or_fail(conninfo(url), display)
    try:
        connection.execute(f"SET lock_timeout = '{MIGRATION_LOCK_TIMEOUT}'")
        connection.execute("SELECT pg_advisory_lock(%s, %s)", MIGRATION_LOCK)
        try:
            return _migrate_locked(connection, display, log)
        finally:
            if not broken(connection):
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
    connection = connect_or_fail(conninfo(url), display)
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
