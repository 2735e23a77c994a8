"""
Start and stop Beacon as a real C{twistd -n --logfile=- beacon} process.

A reader thread drains the process's output (stdout and stderr, merged) as it
comes, so that the pipe never fills and tests can wait on log lines: every
wait is on an event (a line appearing, the process exiting) and is bounded.
Every process started here is stopped by pid: SIGTERM, a bounded wait, then
SIGKILL.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: The twistd script of the interpreter running the tests (the venv's).
TWISTD = Path(sys.executable).parent / "twistd"

#: Where the stdout of C{twistd -n --logfile=-} says the HTTP port was bound.
LISTENING = re.compile(r"http\.listening: (\S+) on 127\.0\.0\.1:(\d+)")
#: The last line of a successful start-up.
STARTED = re.compile(r"beacon\.started: public URL (\S+),")

#: How long start-up may take before a test gives up. Safety nets, not
#: expectations: an idle machine starts and stops Beacon in about a second,
#: a loaded CI machine may take 5-10 times longer (and compiles every module
#: on a fresh checkout); only a hung Beacon should reach them.
START_TIMEOUT = 60.0
#: How long a SIGTERMed Beacon may take to stop before it is killed.
STOP_TIMEOUT = 60.0

LOOPBACK_HTTP = "tcp:0:interface=127.0.0.1"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """
    In the child, before exec: ask Linux to SIGTERM it when the test process
    dies, so that even a SIGKILLed pytest leaves no Beacon behind.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class BeaconFailed(AssertionError):
    """Beacon did not do what a test waited for; the message holds its log."""


class TwistdProcess:
    """
    One C{twistd -n --logfile=- beacon ...} process and its collected output.
    """

    def __init__(
        self,
        args: Sequence[str],
        cwd: Path,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> None:
        """
        Start the process.

        @param args: The arguments after C{beacon}.
        @param cwd: Its working directory (C{twistd.pid} lands there).
        @param wrap: Turns the twistd command line into the one to run (for
            example, inside a mount namespace); it must exec twistd, so that
            the pid stays twistd's.
        """
        self.args = [str(TWISTD), "-n", "--logfile=-", "beacon", *args]
        if wrap is not None:
            self.args = wrap(self.args)
        self.cwd = cwd
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._eof = False
        self.process = subprocess.Popen(
            self.args,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        self._reader = threading.Thread(
            target=self._read, name=f"twistd-{self.process.pid}-output", daemon=True
        )
        self._reader.start()

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    @property
    def output(self) -> str:
        """Everything the process has written so far."""
        with self._changed:
            return "".join(self._lines)

    def wait_for(self, pattern: re.Pattern[str] | str, timeout: float) -> re.Match[str]:
        """
        Wait until a line of output matches C{pattern}.

        @return: The match.
        @raise BeaconFailed: The output ended, or C{timeout} seconds passed,
            without a matching line.
        """
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self._lines[seen:]:
                    match = regex.search(line)
                    if match is not None:
                        return match
                seen = len(self._lines)
                if self._eof:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
        raise BeaconFailed(
            f"no line matching {regex.pattern!r} within {timeout} s "
            f"(exit code {self.process.poll()}); the log:\n{self.output}"
        )

    def wait_exit(self, timeout: float) -> int:
        """
        Wait for the process to exit and for its output to be read.

        @return: The exit code.
        @raise BeaconFailed: It did not exit within C{timeout} seconds.
        """
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise BeaconFailed(
                f"twistd (pid {self.pid}) did not exit within {timeout} s; "
                f"the log:\n{self.output}"
            ) from None
        self._reader.join(timeout)
        return code

    def terminate(self, timeout: float = STOP_TIMEOUT) -> int:
        """
        Stop the process the way an init system does: SIGTERM, then wait.

        @return: The exit code.
        @raise BeaconFailed: It did not stop within C{timeout} seconds (it
            is then killed).
        """
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        try:
            return self.wait_exit(timeout)
        except BeaconFailed:
            self.kill()
            raise

    def stop_cleanly(self) -> None:
        """
        SIGTERM the process and check that it shut down cleanly: the store
        closed, twistd's last line written, and the exit status that twistd
        gives a SIGTERM (it re-raises the signal after a clean shutdown, so
        the status is -SIGTERM; 0 is accepted too).

        @raise BeaconFailed: It did not.
        """
        code = self.terminate()
        log = self.output
        if code not in (0, -signal.SIGTERM) or "Server Shut Down" not in log:
            raise BeaconFailed(
                f"twistd (pid {self.pid}) did not shut down cleanly on SIGTERM "
                f"(exit code {code}); the log:\n{log}"
            )
        if "store.closed" not in log:
            raise BeaconFailed(f"the store was not closed on SIGTERM; the log:\n{log}")

    def kill(self) -> None:
        """SIGKILL the process if it still runs, and reap it."""
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:  # pragma: no cover - the kernel failed us
            pass
        self._reader.join(STOP_TIMEOUT)

    def close(self) -> None:
        """
        Make sure the process is gone: SIGTERM with a bounded wait, SIGKILL
        if it does not stop. Safe to call more than once.
        """
        try:
            if self.process.poll() is None:
                self.terminate()
        except BeaconFailed:
            pass
        finally:
            self.kill()
            if self.process.stdout is not None:
                self.process.stdout.close()


class Beacon:
    """
    A running Beacon: its process, the bound port and the base URL.
    """

    def __init__(self, process: TwistdProcess, port: int, public_url: str) -> None:
        self.process = process
        self.port = port
        self.public_url = public_url

    @property
    def log(self) -> str:
        """The twistd log so far."""
        return self.process.output


class BeaconLauncher:
    """
    Starts Beacons in one working directory and stops every one of them on
    L{close}.
    """

    def __init__(self, cwd: Path) -> None:
        """
        @param cwd: The working directory of every process (a C{tmp_path}).
        """
        self.cwd = cwd
        self.data = cwd / "data"
        self.processes: list[TwistdProcess] = []

    def spawn(self, *args: str) -> TwistdProcess:
        """
        Start C{twistd -n --logfile=- beacon *args}, without waiting.
        """
        process = TwistdProcess(args, self.cwd)
        self.processes.append(process)
        return process

    def start(self, *extra: str, data: Path | None = None) -> Beacon:
        """
        Start Beacon on a free loopback port with the data directory
        C{data} (default: C{cwd/data}) and wait until it has started.

        @param extra: More options (C{--config FILE} ...).
        @raise BeaconFailed: It did not start within L{START_TIMEOUT}.
        """
        process = self.spawn(
            "--data", str(data or self.data), "--http", LOOPBACK_HTTP, *extra
        )
        try:
            listening = process.wait_for(LISTENING, START_TIMEOUT)
            started = process.wait_for(STARTED, START_TIMEOUT)
        except BeaconFailed:
            process.close()
            raise
        return Beacon(process, int(listening.group(2)), started.group(1))

    def close(self) -> None:
        """Stop every process started here."""
        for process in reversed(self.processes):
            process.close()
