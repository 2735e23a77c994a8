"""
Start-up failures of a real C{twistd beacon}, daemonized (no C{-n}, as
docs/reference/twistd.rst suggests) and in the foreground: a port in use, a missing
PostgreSQL database. twistd must exit non-zero promptly with the one-line
reason on standard error (as C{twistd web} exits 1 and says why), remove its
pidfile, and leave nothing behind: no process, no operator socket, no
discovery file. A start that succeeds returns at once and keeps nothing of
the caller's (its standard error) open.

Each test runs in its own temporary directory, binds 127.0.0.1 only, waits on
processes with a bounded timeout, and kills by pid every process whose
command line names that directory (a daemon is no child of the test).
"""

from __future__ import annotations

import os
import shutil
import select
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from twisted.application.service import Service

from beacon.service import StartupError
from beacon.tap import StartupFailed, _StartupGuard
from peers.postgres import ADMIN_URL, RunDatabase, postgresql, with_database  # noqa: F401
from peers.process import TWISTD, _die_with_parent

#: How long twistd may take to give up (or to daemonize) before a test
#: fails. Generous: the machine may be loaded; a hang is what is caught.
EXIT_TIMEOUT = 60.0


@dataclass
class Finished:
    """How a twistd command ended."""

    code: int
    stdout: str
    stderr: str
    log: str


class Twistd:
    """
    Runs C{twistd ... beacon ...} in one directory, and kills whatever it
    left running there.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.pidfile = directory / "twistd.pid"
        self.logfile = directory / "twistd.log"

    def run(
        self,
        *beacon_args: str,
        daemon: bool = True,
        twistd_args: tuple[str, ...] = (),
        tac: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Finished:
        """
        Run twistd with C{--pidfile} and C{--logfile} in the directory (and
        C{twistd_args}), C{beacon --data ...} or the C{.tac} file C{tac},
        and wait (bounded) for the command to return.
        """
        argv = [
            str(TWISTD),
            f"--pidfile={self.pidfile}",
            f"--logfile={self.logfile}",
            *twistd_args,
            *([] if daemon else ["-n"]),
            *(["-y", str(tac)] if tac else ["beacon", "--data", str(self.data), *beacon_args]),
        ]
        process = subprocess.Popen(
            argv,
            cwd=self.directory,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            preexec_fn=_die_with_parent,
        )
        try:
            stdout, stderr = process.communicate(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            raise AssertionError(
                f"twistd did not return within {EXIT_TIMEOUT} s; stderr {stderr!r};"
                f" the log:\n{self.log()}"
            ) from None
        return Finished(process.returncode, stdout, stderr, self.log())

    def log(self) -> str:
        """twistd's log file, if any."""
        try:
            return self.logfile.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def running(self) -> list[int]:
        """Every process (but this one) whose command line names the directory."""
        marker = os.fsencode(str(self.directory))
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker in f.read():
                        found.append(int(entry))
            except OSError:
                continue
        return found

    def wait_gone(self, timeout: float = EXIT_TIMEOUT) -> None:
        """
        Wait, bounded, until no process L{running} finds is left: each is
        waited for through a pidfd (readable once it has exited), so the
        wait ends when it does, without polling.
        """
        deadline = time.monotonic() + timeout
        for pid in self.running():
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            finally:
                os.close(fd)

    def kill_all(self) -> None:
        """SIGKILL every process L{running} finds."""
        for pid in self.running():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# The guard at twistd's edge, in process.


class _Failing(Service):
    """Fails to start, in the phase named, with the error given."""

    def __init__(self, phase: str, error: Exception) -> None:
        self.phase = phase
        self.error = error

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        if self.phase == "privilegedStartService":
            raise self.error

    def startService(self) -> None:
        super().startService()
        if self.phase == "startService":
            raise self.error


def guarded(child: Service) -> tuple[_StartupGuard, int]:
    """A guard over C{child} whose kept standard error is a pipe; returns the guard and the pipe's read end."""
    read, write = os.pipe()
    guard = _StartupGuard(write)
    child.setServiceParent(guard)
    return guard, read


def read_all(descriptor: int) -> bytes:
    """Everything in a pipe whose write end is closed (else this blocks: the guard must close it)."""
    data = b""
    try:
        while chunk := os.read(descriptor, 4096):
            data += chunk
    finally:
        os.close(descriptor)
    return data


@pytest.mark.parametrize("phase", ["privilegedStartService", "startService"])
def test_guard_turns_a_startup_error_into_exit_status_1_and_one_line(
    phase: str, logged_events: Any
) -> None:
    """A StartupError becomes StartupFailed: an Exception (twistd reports it and removes its pidfile) and a SystemExit with status 1 (no traceback); the one-line reason goes to the kept standard error, which is then closed, and to the log as beacon.start_failed."""
    guard, read = guarded(_Failing(phase, StartupError("cannot listen on 'x':\nbusy")))
    with pytest.raises(StartupFailed) as caught:
        getattr(guard, phase)()
    assert isinstance(caught.value, Exception)
    assert isinstance(caught.value, SystemExit)
    assert caught.value.code == 1
    assert str(caught.value) == "cannot listen on 'x': busy"
    assert read_all(read) == b"beacon: cannot start: cannot listen on 'x': busy\n"
    assert [e["reason"] for e in logged_events.named("beacon.start_failed")] == [
        "cannot listen on 'x': busy"
    ]
    assert not guard.running


def test_guard_lets_an_unexpected_error_through_and_says_so() -> None:
    """Any other exception (a bug) goes on unchanged, for twistd to log its traceback; the kept standard error gets one line naming it."""
    guard, read = guarded(_Failing("startService", RuntimeError("oops")))
    with pytest.raises(RuntimeError, match="oops"):
        guard.startService()
    assert read_all(read) == (
        b"beacon: cannot start: RuntimeError: oops (the traceback is in the log)\n"
    )


def test_guard_lets_standard_error_go_once_started() -> None:
    """A start that succeeds writes nothing and closes the kept standard error (a daemon must not hold its starter's stderr open)."""
    guard, read = guarded(Service())
    guard.privilegedStartService()
    guard.startService()
    assert read_all(read) == b""
    assert guard.running


# twistd beacon, for real.


@pytest.fixture
def twistd(tmp_path: Path) -> Iterator[Twistd]:
    runner = Twistd(tmp_path)
    try:
        yield runner
    finally:
        runner.kill_all()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds, listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


def reason_line(finished: Finished) -> str:
    """The first line twistd wrote on standard error."""
    lines = finished.stderr.splitlines()
    assert lines, f"nothing on stderr (exit code {finished.code}); the log:\n{finished.log}"
    return lines[0]


def assert_nothing_left(twistd: Twistd, finished: Finished) -> None:
    """No pidfile, no process, no operator socket or discovery file, no traceback in the log."""
    # The daemon, if there was one, is gone (bounded wait: it may be exiting;
    # it removes its pidfile after telling the parent, which exits at once).
    twistd.wait_gone()
    assert twistd.running() == []
    assert not twistd.pidfile.exists(), "the pidfile outlived a failed start"
    assert not (twistd.data / "operator.sock").exists(), "a failed start left operator.sock"
    assert not (twistd.data / "operator-http.json").exists()
    assert "Traceback" not in finished.log, finished.log


@pytest.mark.parametrize("daemon", [True, False], ids=["daemon", "foreground"])
def test_port_in_use_exits_1_with_the_reason_on_stderr(
    twistd: Twistd, busy_port: int, daemon: bool
) -> None:
    """twistd beacon on a port in use exits 1 promptly, daemonized or not, its first line on stderr the one-line reason; the log says it as beacon.start_failed."""
    endpoint = f"tcp:{busy_port}:interface=127.0.0.1"
    finished = twistd.run("--http", endpoint, daemon=daemon)
    assert finished.code == 1, finished
    assert reason_line(finished) == (
        f"beacon: cannot start: cannot listen on {endpoint!r} (http): Couldn't listen"
        f" on 127.0.0.1:{busy_port}: [Errno 98] Address already in use."
    )
    assert "beacon.start_failed: cannot listen on" in finished.log
    assert "beacon.started" not in finished.log
    assert_nothing_left(twistd, finished)


@pytest.mark.parametrize("daemon", [True, False], ids=["daemon", "foreground"])
def test_missing_postgresql_database_exits_1_with_the_reason_on_stderr(
    twistd: Twistd, postgresql: RunDatabase, daemon: bool  # noqa: F811
) -> None:
    """twistd beacon --store naming a database that does not exist exits 1 promptly with the reason on stderr, and leaves nothing behind (the operator socket is bound after the store opens)."""
    missing = f"beacon_missing_{uuid.uuid4().hex[:12]}"
    finished = twistd.run(
        "--http",
        "tcp:0:interface=127.0.0.1",
        "--store",
        with_database(ADMIN_URL, missing),
        daemon=daemon,
    )
    assert finished.code == 1, finished
    line = reason_line(finished)
    assert line.startswith("beacon: cannot start: cannot connect to the database "), line
    assert f'database "{missing}" does not exist' in line, line
    assert "a2a.unix.listening" not in finished.log
    assert_nothing_left(twistd, finished)


def test_bearer_door_port_in_use_stops_startup(twistd: Twistd, busy_port: int) -> None:
    """When the bearer door cannot bind (before anything is made in the data directory), twistd exits 1 with the reason and leaves nothing."""
    config = twistd.directory / "beacon.toml"
    config.write_text(f'[operator]\nhttp = "tcp:{busy_port}:interface=127.0.0.1"\n')
    finished = twistd.run("--config", str(config), "--http", "tcp:0:interface=127.0.0.1")
    assert finished.code == 1, finished
    assert "(operator)" in reason_line(finished)
    assert_nothing_left(twistd, finished)


def test_a_failure_after_the_operator_socket_removes_it(twistd: Twistd) -> None:
    """When the bearer door's discovery file cannot be written (a directory is in its place), the operator socket bound just before it is removed and twistd exits 1 with the reason."""
    config = twistd.directory / "beacon.toml"
    config.write_text('[operator]\nhttp = "tcp:0:interface=127.0.0.1"\n')
    (twistd.data / "operator-http.json").mkdir(parents=True)
    finished = twistd.run("--config", str(config), "--http", "tcp:0:interface=127.0.0.1")
    assert finished.code == 1, finished
    assert "operator-http.json" in reason_line(finished)
    assert "a2a.unix.listening" in finished.log
    assert not (twistd.data / "operator.sock").exists()


def test_bearer_door_alone_starts_on_a_fresh_data_directory(twistd: Twistd) -> None:
    """With the socket disabled and the bearer door on, a daemon on a data directory that does not exist yet starts, writes its discovery file (0600, in a 0700 directory), returns 0 at once, and removes the file on SIGTERM."""
    config = twistd.directory / "beacon.toml"
    config.write_text('[operator]\nsocket = ""\nhttp = "tcp:0:interface=127.0.0.1"\n')
    assert not twistd.data.exists()
    finished = twistd.run("--config", str(config), "--http", "tcp:0:interface=127.0.0.1")
    assert finished.code == 0, finished
    assert finished.stderr == ""
    pid = int(twistd.pidfile.read_text())
    discovery = twistd.data / "operator-http.json"
    assert discovery.stat().st_mode & 0o777 == 0o600
    assert twistd.data.stat().st_mode & 0o777 == 0o700
    assert not (twistd.data / "operator.sock").exists()
    os.kill(pid, signal.SIGTERM)
    twistd.wait_gone()
    assert pid not in twistd.running()
    assert not discovery.exists()
    assert "Traceback" not in twistd.log()


# The .tac file, and the data directory.

TAC = Path(__file__).resolve().parents[1] / "etc" / "beacon.tac"


@pytest.mark.parametrize("daemon", [True, False], ids=["daemon", "foreground"])
def test_tac_start_failure_is_reported_as_twistd_beacon_reports_it(
    twistd: Twistd, busy_port: int, daemon: bool
) -> None:
    """twistd -y etc/beacon.tac on a port in use: exit 1, the one-line reason on stderr, beacon.start_failed in the log, no traceback."""
    config = twistd.directory / "beacon.toml"
    config.write_text(
        f'[server]\ndata = "{twistd.data}"\nhttp = ["tcp:{busy_port}:interface=127.0.0.1"]\n'
    )
    finished = twistd.run(tac=TAC, daemon=daemon, env=dict(os.environ, BEACON_CONFIG=str(config)))
    assert finished.code == 1, finished
    assert reason_line(finished).startswith(
        f"beacon: cannot start: cannot listen on 'tcp:{busy_port}:interface=127.0.0.1' (http)"
    )
    assert "beacon.start_failed: cannot listen on" in finished.log
    assert_nothing_left(twistd, finished)


def test_tac_configuration_error_is_one_line(twistd: Twistd) -> None:
    """A .tac whose configuration is wrong exits 1 at once, naming the file and the key, no traceback."""
    config = twistd.directory / "beacon.toml"
    config.write_text("[limits]\nrate = -1\n")
    finished = twistd.run(tac=TAC, daemon=False, env=dict(os.environ, BEACON_CONFIG=str(config)))
    assert finished.code == 1, finished
    line = reason_line(finished)
    assert line.startswith(f"beacon: cannot start: {config}: "), line
    assert "rate" in line
    assert "Traceback" not in finished.stderr + finished.log


def test_data_naming_a_file_says_it_is_not_a_directory(twistd: Twistd) -> None:
    """--data naming a regular file: exit 1, the reason says it is not a directory (not "operator.sock: File exists")."""
    twistd.data.write_text("a file\n")
    finished = twistd.run("--http", "tcp:0:interface=127.0.0.1", daemon=False)
    assert finished.code == 1, finished
    assert reason_line(finished) == (
        f"beacon: cannot start: the data directory {twistd.data} is not a directory; give"
        " --data (or [server] data) a directory, or a path where one can be made"
    )
    assert twistd.data.read_text() == "a file\n"
    assert "Traceback" not in finished.log


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_uid_switch_on_a_fresh_data_directory(tmp_path: Path) -> None:
    """
    As root, twistd --uid/--gid on a data directory that does not exist yet:
    the directory and the operator socket belong to that user (who is served
    on the socket), and SIGTERM removes the socket.
    """
    import pwd

    nobody = pwd.getpwnam("nobody")
    # A place the switched user may make its data directory in.
    home = Path(tempfile.mkdtemp(prefix="beacon-uid-", dir="/tmp"))
    try:
        os.chown(home, nobody.pw_uid, nobody.pw_gid)
        runner = Twistd(home)
        runner.pidfile = tmp_path / "twistd.pid"
        runner.logfile = tmp_path / "twistd.log"
        try:
            started = runner.run(
                "--http",
                "tcp:0:interface=127.0.0.1",
                twistd_args=(f"--uid={nobody.pw_uid}", f"--gid={nobody.pw_gid}"),
            )
            assert started.code == 0, started
            sock = runner.data / "operator.sock"
            assert runner.data.stat().st_uid == nobody.pw_uid
            assert (sock.lstat().st_uid, sock.lstat().st_mode & 0o777) == (nobody.pw_uid, 0o600)
            served = subprocess.run(
                ["/usr/bin/python3", "-I", "-c", CARD_OVER_SOCKET, str(sock)],
                user=nobody.pw_uid,
                group=nobody.pw_gid,
                capture_output=True,
                text=True,
                timeout=EXIT_TIMEOUT,
            )
            assert served.stdout.startswith("HTTP/1.1 200 "), served
            pid = int(runner.pidfile.read_text())
            os.kill(pid, signal.SIGTERM)
            runner.wait_gone()
            assert runner.running() == []
            assert not sock.exists(), "the socket outlived the daemon"
            assert "Traceback" not in runner.log()
        finally:
            runner.kill_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


#: GETs the card over a unix socket and prints the status line.
CARD_OVER_SOCKET = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(sys.argv[1])
s.sendall(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print(data.split(b"\r\n", 1)[0].decode())
"""
