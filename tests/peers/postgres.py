"""
A real PostgreSQL for the tests, on 127.0.0.1:5432 as user C{postgres}
with trust authentication (what C{.ci/ensure-postgres} makes sure of), or
wherever C{BEACON_TEST_POSTGRES} (an admin URL) points.

Each test run creates one fresh database, C{beacon_test_<random>}, and drops
it at the end of the run; each test gets a fresh schema in it (through the
URL's C{search_path}), so tests never see each other's rows. When PostgreSQL
cannot be reached the tests that need it are skipped, except when
C{CI=true}: then they fail.

Import the fixtures into a test module to use them::

    from peers.postgres import pg_url, postgresql  # noqa: F401
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest

#: Where the tests find PostgreSQL: a superuser's URL to an existing database.
ADMIN_URL = os.environ.get(
    "BEACON_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)

#: How long the tests wait for PostgreSQL to answer a connection attempt: a
#: safety net for a loaded machine (a local connection takes milliseconds;
#: one that timed out would skip, or under CI=true fail, the whole run's
#: PostgreSQL tests).
CONNECT_TIMEOUT = 30

#: How long a cluster stop, start or restart may take.
CLUSTER_TIMEOUT = 60.0


def in_ci() -> bool:
    """Whether this run is CI's, where a missing PostgreSQL is a failure."""
    return os.environ.get("CI", "").lower() == "true"


def with_database(url: str, database: str) -> str:
    """C{url} with its path naming C{database}."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, ""))


class RunDatabase:
    """
    This run's fresh database.

    @ivar name: Its name.
    @ivar url: Its URL (as the admin user).
    """

    def __init__(self, admin_url: str) -> None:
        self._admin_url = admin_url
        self.name = f"beacon_test_{uuid.uuid4().hex[:12]}"
        self.url = with_database(admin_url, self.name)
        self._schemas = itertools.count(1)
        with self.admin() as admin:
            admin.execute(f'CREATE DATABASE "{self.name}"')

    @contextmanager
    def admin(self) -> Iterator[psycopg.Connection[Any]]:
        """
        A plain autocommit connection to the admin URL's database (another
        database than this one: it works while this one refuses
        connections).
        """
        connection = psycopg.connect(
            self._admin_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        )
        try:
            yield connection
        finally:
            connection.close()

    @contextmanager
    def connect(self, schema: str | None = None) -> Iterator[psycopg.Connection[Any]]:
        """
        A plain autocommit connection to this database (bypassing any
        store), with C{schema} first on its search path.
        """
        connection = psycopg.connect(
            self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        )
        try:
            if schema is not None:
                connection.execute(f'SET search_path TO "{schema}"')
            yield connection
        finally:
            connection.close()

    def fresh_schema(self) -> tuple[str, str]:
        """
        Create an empty schema for one test.

        @return: Its name, and a store URL whose connections use it (and
            carry it as their application_name, so that a test can find
            them in pg_stat_activity).
        """
        schema = f"t_{next(self._schemas):04d}_{uuid.uuid4().hex[:6]}"
        with self.connect() as connection:
            connection.execute(f'CREATE SCHEMA "{schema}"')
        options = quote(f"-csearch_path={schema}", safe="")
        return schema, f"{self.url}?options={options}&application_name={schema}"

    def set_connections_allowed(self, allowed: bool) -> None:
        """
        Let new connections into this database, or refuse them (existing
        ones stay).
        """
        with self.admin() as admin:
            admin.execute(
                f'ALTER DATABASE "{self.name}" WITH ALLOW_CONNECTIONS'
                f" {'true' if allowed else 'false'}"
            )

    def drop(self) -> None:
        """Drop this database, whoever is still connected."""
        try:
            with self.admin() as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        except psycopg.Error:
            pass  # The server went away: nothing left to drop here.


_run: RunDatabase | None = None
_unreachable: str | None = None


def run_database(config: pytest.Config) -> RunDatabase:
    """
    This run's database, created on first use and dropped when the run
    ends; skips the calling test (fails it when C{CI=true}) if PostgreSQL
    cannot be reached.
    """
    global _run, _unreachable
    if _run is None and _unreachable is None:
        try:
            _run = RunDatabase(ADMIN_URL)
        except psycopg.Error as e:
            _unreachable = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        else:
            config.add_cleanup(_drop_run)
    if _run is None:
        message = (
            f"PostgreSQL is not reachable at {ADMIN_URL} ({_unreachable});"
            " run .ci/ensure-postgres"
        )
        if in_ci():
            pytest.fail(f"CI=true: {message}", pytrace=False)
        pytest.skip(message)
    return _run


def _drop_run() -> None:
    global _run
    if _run is not None:
        _run.drop()
        _run = None


@pytest.fixture(scope="session")
def postgresql(request: pytest.FixtureRequest) -> RunDatabase:
    """This run's PostgreSQL database (skips, or fails under CI=true)."""
    return run_database(request.config)


@pytest.fixture
def pg_schema(postgresql: RunDatabase) -> tuple[str, str]:
    """A fresh schema for this test, and the store URL that uses it."""
    return postgresql.fresh_schema()


@pytest.fixture
def pg_url(pg_schema: tuple[str, str]) -> str:
    """A store URL to a fresh, empty schema of this run's database."""
    return pg_schema[1]


# Stopping and starting the local cluster.


def local_cluster() -> tuple[str, str] | None:
    """
    The (version, name) of the local Debian-style cluster that serves
    127.0.0.1:5432, if this process may restart it: pg_ctlcluster exists,
    one version is installed, and we are root or postgres. Else None.
    """
    if shutil.which("pg_ctlcluster") is None:
        return None
    if urlsplit(ADMIN_URL).hostname not in ("127.0.0.1", "localhost"):
        return None
    versions = sorted(os.path.basename(p) for p in glob.glob("/etc/postgresql/*"))
    if len(versions) != 1 or not os.path.isdir(f"/etc/postgresql/{versions[0]}/main"):
        return None
    if os.geteuid() != 0:
        try:
            import pwd

            if pwd.getpwuid(os.geteuid()).pw_name != "postgres":
                return None
        except KeyError:
            return None
    return versions[0], "main"


def pg_ctlcluster(action: str) -> None:
    """
    Run C{pg_ctlcluster <version> main <action>} (blocking, bounded).

    @raises AssertionError: If it fails or there is no local cluster.
    """
    cluster = local_cluster()
    assert cluster is not None, "no local cluster to control"
    done = subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, action],
        capture_output=True,
        text=True,
        timeout=CLUSTER_TIMEOUT,
    )
    assert done.returncode == 0, f"pg_ctlcluster {action}: {done.stderr.strip()}"


def wait_until_ready(timeout: float = CLUSTER_TIMEOUT) -> None:
    """
    Poll (bounded, short intervals) until PostgreSQL accepts a connection.

    @raises AssertionError: If it does not within C{timeout} seconds.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            psycopg.connect(ADMIN_URL, connect_timeout=2).close()
            return
        except psycopg.Error as e:
            last = e
            time.sleep(0.1)
    raise AssertionError(f"PostgreSQL did not come back within {timeout}s: {last}")
