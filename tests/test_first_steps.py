"""
First steps that must not trip: what a newcomer meets in their first
minutes, end to end through the real commands (C{beacon} and C{twistd
beacon} run as subprocesses, every wait bounded).

- Versions: C{beacon --version} and C{twistd beacon --version} print
  Beacon's; importing C{beacon.cli} imports nothing heavy, so that the
  first answers at once (how fast is measured, not asserted: bench/results/).
- Mistakes on the command line or in the configuration: the one-line error
  comes first, with the near option, key or command for a misspelt one and
  the expected type with an example for a wrong type, never after twistd's
  thirty lines of usage.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from beacon import __version__
from peers.postgres import ADMIN_URL, RunDatabase, postgresql, with_database  # noqa: F401
from peers.process import (
    LOOPBACK_HTTP,
    STARTED,
    TWISTD,
    Beacon,
    BeaconLauncher,
    TwistdProcess,
    _die_with_parent,
)

#: The longest one command may take here: a safety net, never a measure.
COMMAND_TIMEOUT = 60.0


def run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command to its end (bounded), capturing both outputs."""
    try:
        return subprocess.run(
            argv,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(argv)} did not finish within {COMMAND_TIMEOUT} s: {e}")


def beacon(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the C{beacon} console script."""
    return run([sys.executable, "-m", "beacon.cli", *args], cwd)


def twistd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run C{twistd ARGS} (its pidfile and log, if any, in C{cwd})."""
    return run([str(TWISTD), *args], cwd)


# Versions, and a light import.


def test_beacon_version() -> None:
    """beacon --version prints Beacon's version, and nothing else."""
    done = beacon("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"beacon {__version__}\n"
    assert done.stderr == ""


def test_twistd_beacon_version(tmp_path: Path) -> None:
    """twistd beacon --version prints Beacon's version (and Twisted's), not only Twisted's."""
    done = twistd("beacon", "--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"beacon {__version__} (Twisted ")
    assert not (tmp_path / "twistd.pid").exists()


#: What `import beacon.cli` must not import: the reactor, the client and
#: its HTTP stack, the store, the schema validator.
HEAVY = (
    "twisted.internet.reactor",
    "twisted.internet.defer",
    "twisted.web",
    "treq",
    "autobahn",
    "jsonschema",
    "psycopg",
    "sqlite3",
    "beacon.client",
    "beacon.store",
    "beacon.config",
)


def test_importing_the_cli_is_light() -> None:
    """In a fresh interpreter, importing beacon.cli (what the console script does first) imports none of the heavy modules: each command imports what it needs when it runs."""
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "import beacon.cli\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = run([sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout)
    heavy = [m for m in imported if m.startswith(HEAVY)]
    assert heavy == [], heavy
    assert "beacon.cli" in imported


# Mistakes on twistd's command line and in the configuration.


def assert_one_line_first(done: subprocess.CompletedProcess[str], expected: str) -> None:
    """twistd refused its command line: exit 1, the first line of stderr is C{expected}, no usage printed."""
    assert done.returncode == 1, done
    lines = done.stderr.splitlines()
    assert lines and lines[0] == expected, done.stderr
    assert len(lines) <= 2, done.stderr
    assert "Usage:" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--dta", "d"], "twistd beacon: option --dta not recognized (did you mean --data?)"),
        (
            ["--opertor", "s"],
            "twistd beacon: option --opertor not recognized (did you mean --operator?)",
        ),
        (
            ["-n"],
            "twistd beacon: option -n not recognized: -n is an option of twistd's own;"
            " give it before beacon (twistd -n beacon ...)",
        ),
        (
            ["--pidfile=x.pid"],
            "twistd beacon: option --pidfile not recognized: --pidfile is an option of"
            " twistd's own; give it before beacon (twistd --pidfile=... beacon ...)",
        ),
        (
            ["--http", "nonsense:1"],
            None,
        ),
    ],
    ids=["near-option", "near-option-2", "twistd-short", "twistd-long", "bad-endpoint"],
)
def test_twistd_option_mistakes_come_first_in_one_line(
    tmp_path: Path, args: list[str], expected: str | None
) -> None:
    """A mistake on twistd beacon's command line is one line on stderr, first, naming the near option or where twistd's own goes; then a pointer to --help; no usage, exit 1, nothing started."""
    done = twistd("beacon", *args, cwd=tmp_path)
    if expected is None:
        expected = done.stderr.splitlines()[0] if done.stderr else ""
        assert expected.startswith("twistd beacon: --http 'nonsense:1' is not a server endpoint")
    assert_one_line_first(done, expected)
    assert done.stderr.splitlines()[1] == "(twistd beacon --help lists the options)"
    assert not (tmp_path / "twistd.pid").exists()
    assert not (tmp_path / "beacon-data").exists()


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            "[server]\nacces_log = true\n",
            "unknown key 'acces_log' in [server] (did you mean 'access_log'?)",
        ),
        ("[limit]\nrate = 1\n", "unknown section [limit] (did you mean [limits]?)"),
        ("[server]\nrate = 1\n", "unknown key 'rate' in [server]: it belongs in [limits]"),
        (
            '[limits]\nmax_body = "64k"\n',
            "[limits] max_body must be a whole number, not a string,"
            " for example: max_body = 65536",
        ),
        (
            '[websocket]\nrequire_origin = "yes"\n',
            "[websocket] require_origin must be true or false, not a string,"
            " for example: require_origin = false",
        ),
    ],
    ids=["near-key", "near-section", "key-elsewhere", "wrong-type-int", "wrong-type-bool"],
)
def test_twistd_configuration_mistakes_come_first_in_one_line(
    tmp_path: Path, toml: str, expected: str
) -> None:
    """A mistake in the --config file is one line, first: the near key or section, the section a key belongs in, or the type expected with an example."""
    config = tmp_path / "beacon.toml"
    config.write_text(toml)
    done = twistd("beacon", "--config", str(config), cwd=tmp_path)
    assert_one_line_first(done, f"twistd beacon: {expected}")


# Mistakes on beacon's command line.


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["review", "list", "--lmit", "3"],
            "beacon review list: error: unrecognized arguments: --lmit 3 (did you mean --limit?)",
        ),
        (
            ["db", "status", "--stroe", "sqlite:///x"],
            "beacon db status: error: unrecognized arguments: --stroe sqlite:///x"
            " (did you mean --store?)",
        ),
        (["sned", "http://x", "hi"], "(did you mean send?)"),
        (["review", "lst"], "(did you mean list?)"),
        (
            ["review", "list", "--limit", "none"],
            "beacon review list: error: argument --limit: 'none' is not a positive whole number",
        ),
    ],
    ids=["near-option", "db-near-option", "near-command", "near-action", "wrong-value"],
)
def test_beacon_option_mistakes_come_first_in_one_line(args: list[str], expected: str) -> None:
    """A mistake on beacon's command line: exit 2, the one-line error first (with the near option, command or action), then the command's usage."""
    done = beacon(*args)
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert lines[0] == expected or (expected.startswith("(") and lines[0].endswith(expected)), lines
    assert lines[1].startswith("usage: beacon"), lines
    assert done.stdout == ""


# Two Beacons on one host.


def test_second_beacon_on_the_same_data_directory_is_told_which_to_use(tmp_path: Path) -> None:
    """A second twistd beacon on the data directory of one that runs (its own pidfile given) exits 1, its first line naming the socket answered and a data directory to use instead; started with that directory and a pidfile of its own, it runs beside the first."""
    launcher = BeaconLauncher(tmp_path)
    try:
        first = launcher.start()
        data = launcher.data
        done = twistd(
            "-n", "--pidfile=second.pid", "--logfile=second.log",
            "beacon", "--data", str(data), "--http", LOOPBACK_HTTP,
            cwd=tmp_path,
        )
        assert done.returncode == 1, done
        line = done.stderr.splitlines()[0]
        other = f"{data}-2"
        assert line == (
            f"beacon: cannot start: operator socket: another process (another Beacon?) is"
            f" answering on {data / 'operator.sock'}; to run a second Beacon on this host,"
            f" give it a data directory of its own, for example --data {other}"
            f" (and twistd --pidfile={other}.pid), or another --operator socket"
        ), line
        assert not (tmp_path / "second.pid").exists()
        beside = TwistdProcess(
            ["--data", other, "--http", LOOPBACK_HTTP],
            tmp_path,
            wrap=lambda argv: [argv[0], f"--pidfile={other}.pid", *argv[1:]],
        )
        launcher.processes.append(beside)
        beside.wait_for(STARTED, COMMAND_TIMEOUT)
        assert Path(f"{other}.pid").exists()
        assert first.process.process.poll() is None
    finally:
        launcher.close()


# beacon db: what it will do, then what it did; what to create.


def test_db_commands_say_what_they_will_do_first(tmp_path: Path) -> None:
    """beacon db status says which database it reads (changing nothing) before reading it; beacon db upgrade says which migrations it will apply before applying them, then what it did."""
    status = beacon("db", "status", cwd=tmp_path)
    assert status.returncode == 1, status.stderr
    first, second = status.stdout.splitlines()
    assert first == "reading the schema version of sqlite:///beacon-data/beacon.sqlite3 (changing nothing) ..."
    assert second.startswith("sqlite:///beacon-data/beacon.sqlite3: schema version 0, ")
    assert not (tmp_path / "beacon-data").exists()
    upgrade = beacon("db", "upgrade", cwd=tmp_path)
    assert upgrade.returncode == 0, upgrade.stderr
    lines = upgrade.stdout.splitlines()
    assert lines[0] == "reading the schema version of sqlite:///beacon-data/beacon.sqlite3 ..."
    assert lines[1].startswith("applying ") and lines[1].endswith(" ...")
    assert lines[2].startswith("sqlite:///beacon-data/beacon.sqlite3: schema version 0 -> ")
    again = beacon("db", "upgrade", cwd=tmp_path)
    assert again.stdout.splitlines()[1].endswith(", up to date")


def test_missing_postgresql_database_or_role_names_the_command_to_run(
    postgresql: RunDatabase,  # noqa: F811
) -> None:
    """A PostgreSQL database or role that does not exist is one line on stderr (exit 1) ending with the createdb or createuser command that makes it."""
    parts = urlsplit(ADMIN_URL)
    host, port = parts.hostname, parts.port or 5432
    missing = f"beacon_missing_{uuid.uuid4().hex[:8]}"
    database = beacon("db", "status", "--store", with_database(ADMIN_URL, missing))
    assert database.returncode == 1
    (line,) = database.stderr.splitlines()
    assert f'database "{missing}" does not exist' in line
    assert line.endswith(
        f"; create it (as a PostgreSQL superuser): createdb -h {host} -p {port}"
        f" -O {parts.username} {missing}"
    ), line
    role = f"beacon_role_{uuid.uuid4().hex[:8]}"
    url = urlunsplit((parts.scheme, f"{role}@{host}:{port}", "/beacon", "", ""))
    refused = beacon("db", "upgrade", "--store", url)
    assert refused.returncode == 1
    (line,) = refused.stderr.splitlines()
    assert f'role "{role}" does not exist' in line
    assert line.endswith(
        f"; create the role (as a PostgreSQL superuser): createuser -h {host} -p {port} {role},"
        f" then, if the database is missing too: createdb -h {host} -p {port} -O {role} beacon"
    ), line


# beacon send: an endpoint's URL, data that is not structured, too much.


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Beacon]:
    """A Beacon on a free loopback port, its data in tmp_path/data; stopped afterwards."""
    launcher = BeaconLauncher(tmp_path)
    try:
        yield launcher.start()
    finally:
        launcher.close()


def inbox(tmp_path: Path) -> list[Any]:
    """The tasks in the running Beacon's inbox (beacon review list --json)."""
    listed = beacon("review", "list", "--data", str(tmp_path / "data"), "--json")
    assert listed.returncode == 0, listed.stderr
    tasks: list[Any] = json.loads(listed.stdout).get("tasks", [])
    return tasks


def test_send_to_an_endpoint_url_finds_the_card_at_the_origin(running: Beacon) -> None:
    """beacon send, card and task given the JSON-RPC endpoint's URL instead of the base URL find the card at the URL's origin, and say so in one line on stderr; the command then does what it was asked."""
    endpoint = f"{running.public_url}/a2a/v1"
    note = (
        f"beacon: no agent card at {endpoint}/.well-known/agent-card.json (HTTP 404);"
        f" using the card at the URL's origin, {running.public_url}/.well-known/agent-card.json"
        f" (give the agent's base URL, {running.public_url})"
    )
    sent = beacon("send", endpoint, "sent to the endpoint's URL")
    assert sent.returncode == 0, sent.stderr
    assert sent.stderr.splitlines() == [note]
    word, task_id, state = sent.stdout.split()[:3]
    assert (word, state) == ("task", "TASK_STATE_SUBMITTED")
    got = beacon("task", endpoint, task_id)
    assert got.returncode == 0 and got.stderr.splitlines() == [note]
    card = beacon("card", endpoint)
    assert card.returncode == 0 and card.stderr.splitlines() == [note]


def test_no_card_at_the_url_nor_its_origin(tmp_path: Path) -> None:
    """When neither the URL nor its origin has a card, one line says both (exit 1)."""

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_error(404)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        done = beacon("send", f"{base}/a2a/v1", "hello")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(COMMAND_TIMEOUT)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"beacon: no agent card at {base}/a2a/v1/.well-known/agent-card.json (HTTP 404),"
        " nor at the URL's origin: unexpected answer from the agent: the server answered HTTP 404"
    ), line


@pytest.mark.parametrize(
    ("document", "problems"),
    [
        (
            {"subject": "s", "body": "b", "sender": "Ada"},
            "the property from is missing; the property sender is not allowed",
        ),
        (
            {"from": {"nam": "Ada"}, "subject": "s", "body": "b"},
            "the property from.name is missing; the property from.nam is not allowed",
        ),
        ({"from": {"name": "Ada"}, "subject": "", "body": "b"}, "subject: '' should be non-empty"),
    ],
    ids=["missing-and-extra", "nested", "empty"],
)
def test_send_data_that_beacon_would_not_take_is_not_sent(
    running: Beacon, tmp_path: Path, document: dict[str, Any], problems: str
) -> None:
    """beacon send --data FILE whose document fails Beacon's message schema is refused before sending (exit 1), naming each missing or extra property; nothing is sent, not even the text."""
    data = tmp_path / "message.json"
    data.write_text(json.dumps(document))
    done = beacon("send", running.public_url, "and some text", "--data", str(data))
    assert done.returncode == 1, done.stdout
    assert done.stderr.splitlines() == [
        f"beacon: not sent: Beacon refuses --data {data} as structured data"
        f" (its message schema): {problems}"
    ]
    assert inbox(tmp_path) == []
    valid = tmp_path / "valid.json"
    valid.write_text(json.dumps({"from": {"name": "Ada"}, "subject": "s", "body": "b"}))
    sent = beacon("send", running.public_url, "", "--data", str(valid))
    assert sent.returncode == 0, sent.stderr
    assert len(inbox(tmp_path)) == 1


@pytest.mark.parametrize("binding", ["jsonrpc", "websocket"])
def test_send_too_large_names_the_limit(running: Beacon, binding: str) -> None:
    """A message over Beacon's body limit is refused as too large, naming the limit, on either binding."""
    done = beacon("send", running.public_url, "x" * 70_000, "--binding", binding)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "beacon: the agent refused the message: too large: the limit is 65536 bytes"
    ]


# The words a newcomer reads.

#: How text points outside the project: a sibling directory of the
#: checkout, a machine's work directory, the design notes it came from.
OUTSIDE = re.compile(r"\.\./shared|(?<![\w.])/work/|\bseeds? 0\d\d\b", re.IGNORECASE)


def ci_names_the_kit(path: Path, line: str) -> bool:
    """CI's script is the one place that says where CI's checkout of the conformance kit is."""
    return path.parts[-2:] == (".ci", "run") and re.fullmatch(r"make conformance A2A_TCK_DIR=\S+", line.strip()) is not None


def test_text_names_no_file_outside_the_project() -> None:
    """README, docs, etc/ and every comment and docstring of the code, tests and benchmarks name no file outside the project (they link the specifications instead)."""
    root = Path(__file__).parent.parent
    paths = [root / "README.rst", root / "Makefile", root / "Dockerfile"]
    for folder, pattern in (("docs", "*"), ("etc", "*"), ("beacon", "*.py"), ("tests", "*.py"), ("bench", "*.py"), (".ci", "*")):
        paths += [p for p in (root / folder).rglob(pattern) if p.is_file()]
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in paths
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line) and path.name != "test_first_steps.py" and not ci_names_the_kit(path, line)
    ]
    assert found == []
    readme = (root / "README.rst").read_text()
    assert "https://a2a-protocol.org/latest/specification/" in readme
    assert "Cryptographic identity does not establish autonomy, consciousness or" in readme
