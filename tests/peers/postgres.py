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

A test that stops, restarts, reconfigures or breaks its server uses a
cluster of its own instead (L{PrivateCluster}, the C{private_cluster}
fixture): initdb in a temporary directory, a free port of 127.0.0.1, run by
an unprivileged user. No test does any of that to the shared server; a test
that ends sessions there ends only its own (found by their
C{application_name}).
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
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


# A cluster of one test's own, to stop, start or break: a test never stops,
# restarts, reconfigures or ends others' sessions of the machine's server
# (ADMIN_URL), which other test runs and programs share.


def _binaries() -> str | None:
    """
    The directory of PostgreSQL's server programs (initdb, pg_ctl), if
    installed: Debian's newest /usr/lib/postgresql/<version>/bin, or the
    one on the PATH.
    """

    def version(pg_ctl: str) -> tuple[int, ...]:
        name = pg_ctl.split("/")[-3]
        return tuple(int(part) for part in name.split(".") if part.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=version)
    if found:
        return os.path.dirname(found[-1])
    pg_ctl = shutil.which("pg_ctl")
    return os.path.dirname(pg_ctl) if pg_ctl else None


def _server_user() -> tuple[list[str], str | None] | None:
    """
    How to run PostgreSQL's programs, which refuse to run as root: as
    ourselves when we are not root (the prefix is empty, no user to give
    the files to); as root, as the user C{postgres} (or C{nobody} where
    there is none) through C{runuser}. None when we cannot.
    """
    import pwd

    if os.geteuid() != 0:
        return [], None
    if shutil.which("runuser") is None:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"], name
    return None


def private_cluster_unavailable() -> str | None:
    """Why this process cannot run a L{PrivateCluster}, or None if it can."""
    if _binaries() is None:
        return "PostgreSQL's server programs (initdb, pg_ctl) are not installed"
    if _server_user() is None:
        return "running as root without runuser, or without a postgres or nobody user to run a server as"
    return None


def require_private_cluster() -> None:
    """
    Skip the calling test where no L{PrivateCluster} can run here; fail it
    instead when C{CI=true}, where these tests must run.
    """
    why = private_cluster_unavailable()
    if why is not None:
        if in_ci():
            pytest.fail(f"CI=true: {why}", pytrace=False)
        pytest.skip(why)


class PrivateCluster:
    """
    A PostgreSQL server of one test's own: a cluster made with C{initdb} in
    a temporary directory, listening on a free port of 127.0.0.1 and a
    socket directory of its own, with trust authentication for
    C{postgres}. A test may stop, start or reconfigure it without touching
    the machine's server, which other test runs share. As root, its
    programs run as an unprivileged user (L{_server_user}), who owns its
    files.

    Use it as a context manager: it is stopped and removed on exit.

    @ivar directory: The temporary directory: the cluster (C{data}), the
        server's socket and its log.
    @ivar port: Its TCP port on 127.0.0.1, chosen at the first L{start}.
    """

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        """
        Make the cluster (C{initdb}); it is not started.

        @param settings: Server settings for every start (C{postgres -c
            name=value}), beside the address, port and socket directory.
        """
        bindir = _binaries()
        user = _server_user()
        assert bindir is not None and user is not None, private_cluster_unavailable()
        self._bindir = bindir
        self._prefix, owner = user
        self._settings = dict(settings or {})
        self.directory = tempfile.mkdtemp(prefix="beacon-pg-")
        if owner is not None:
            import pwd

            entry = pwd.getpwnam(owner)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        os.chmod(self.directory, 0o700)
        self.data = os.path.join(self.directory, "data")
        self.port = 0
        made = self._run("initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        if made.returncode != 0:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise AssertionError(f"initdb failed: {made.stderr.strip()}")

    @property
    def url(self) -> str:
        """A superuser's URL to its C{postgres} database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._prefix, os.path.join(self._bindir, program), *args],
            capture_output=True, text=True, timeout=CLUSTER_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )

    def start(self) -> None:
        """
        Start the server and return once it accepts connections (C{pg_ctl
        -w} waits for the server to say so in its C{postmaster.pid}); the
        first start chooses a free port (another, should the port be taken
        in between), later ones keep it.

        @raises AssertionError: It did not start.
        """
        for _ in range(3):
            if not self.port:
                self.port = _free_port()
            settings = {
                "listen_addresses": "127.0.0.1",
                "port": str(self.port),
                "unix_socket_directories": self.directory,
                **self._settings,
            }
            options = " ".join(f"-c {name}={value}" for name, value in settings.items())
            done = self._run(
                "pg_ctl", "-D", self.data, "-l", os.path.join(self.directory, "log"),
                "-w", "-t", str(int(CLUSTER_TIMEOUT)), "-o", options, "start",
            )
            if done.returncode == 0:
                return
            log = self.log()
            if "could not bind" not in log and "Address already in use" not in log:
                break
            self.port = 0
        raise AssertionError(f"the private PostgreSQL did not start: {done.stderr.strip()}\n{self.log()}")

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended)."""
        done = self._run("pg_ctl", "-D", self.data, "-w", "-m", "fast", "stop")
        assert done.returncode == 0, f"pg_ctl stop: {done.stderr.strip()}"

    def log(self) -> str:
        """The server's log so far."""
        try:
            with open(os.path.join(self.directory, "log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def close(self) -> None:
        """Stop the server if it runs, and remove its files."""
        self._run("pg_ctl", "-D", self.data, "-w", "-m", "immediate", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PrivateCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@pytest.fixture
def private_cluster() -> Iterator[PrivateCluster]:
    """
    A started L{PrivateCluster}, removed afterwards; skips the test where
    none can run (fails it when C{CI=true}).
    """
    require_private_cluster()
    with PrivateCluster() as cluster:
        cluster.start()
        yield cluster


def _free_port() -> int:
    """A TCP port of 127.0.0.1 that no one listened on a moment ago."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
