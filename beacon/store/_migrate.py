"""
Schema migrations as operators run them.

L{upgrade} and L{status} are what C{beacon db upgrade} and C{beacon db
status} print: they migrate (or read the schema version of) the database a
store URL (L{beacon.store._url}) names before any Beacon is started on it,
with the same migrations, lock and refusals as the stores' start-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from beacon.store import _postgres_schema, _sqlite
from beacon.store._interface import StoreError
from beacon.store._postgres import PostgreSQLStore
from beacon.store._sqlite import SQLiteStore
from beacon.store._url import StoreURL, parse_store_url

@dataclass(frozen=True)
class SchemaStatus:
    """
    Where a database's schema stands.

    @ivar display: The database, without any password.
    @ivar current: Its schema version (0: Beacon never migrated it).
    @ivar supported: The version this code creates and understands.
    """

    display: str
    current: int
    supported: int

    @property
    def pending(self) -> int:
        """How many migrations this code would apply (0 when newer)."""
        return max(0, self.supported - self.current)

    @property
    def newer(self) -> bool:
        """Whether the database is newer than this code (it cannot start)."""
        return self.current > self.supported


def schema_status(url: str) -> SchemaStatus:
    """
    Read the schema version of the database C{url} names, changing
    nothing (a missing SQLite file is version 0 and is not created).

    @raises StoreError: If the URL is invalid or the database cannot be
        read.
    """
    parsed = _parsed(url)
    if parsed.backend == "sqlite":
        return SchemaStatus(
            parsed.display,
            _sqlite.schema_version(parsed.location),
            _sqlite.SCHEMA_VERSION,
        )
    return SchemaStatus(
        parsed.display,
        _postgres_schema.schema_version(parsed.location),
        _postgres_schema.SCHEMA_VERSION,
    )


def status(url: str) -> str:
    """
    What C{beacon db status} prints: the database, its schema version, and
    whether it is current, behind (and by how many migrations) or newer
    than this code.

    @raises StoreError: If the URL is invalid or the database cannot be
        read.
    """
    found = schema_status(url)
    if found.newer:
        verdict = (
            f"newer than this Beacon supports ({found.supported}): upgrade"
            " Beacon before starting it on this database"
        )
    elif found.pending:
        verdict = (
            f"{found.pending} migration(s) to apply to reach version"
            f" {found.supported} (beacon db upgrade, or any Beacon's start-up)"
        )
    else:
        verdict = "up to date"
    return f"{found.display}: schema version {found.current}, {verdict}"


def upgrade(url: str) -> str:
    """
    Migrate the database C{url} names to this code's schema version, as
    start-up would (for PostgreSQL under the same advisory lock, so that it
    is safe while Beacons start), and say what was done: what
    C{beacon db upgrade} prints.

    @raises StoreError: If the URL is invalid, the database cannot be
        reached or migrated, or it is newer than this code.
    """
    parsed = _parsed(url)
    if parsed.backend == "sqlite":
        before = _sqlite.schema_version(parsed.location)
        after = _sqlite.migrate(parsed.location, SQLiteStore.log)
    else:
        before, after = _postgres_schema.migrate(parsed.location, PostgreSQLStore.log)
    if before == after:
        return f"{parsed.display}: schema version {after}, up to date"
    return f"{parsed.display}: schema version {before} -> {after}"


def _parsed(url: str) -> StoreURL:
    """
    L{parse_store_url}, failing with L{StoreError}.
    """
    try:
        return parse_store_url(url)
    except ValueError as e:
        raise StoreError(str(e)) from None
