"""
The command channel: the operator's program, run without a shell for each
notification, with the summary as JSON on its standard input.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IReactorProcess
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.python.procutils import which
from zope.interface import implementer

from beacon.errors import StartupError
from beacon.notify._channel import INotificationChannel, NotificationFailed
from beacon.notify._summary import inert, summary_json

#: The bytes of the command's standard error kept for the log line (the
#: last ones: where a program says why it failed).
STDERR_KEPT = 2048


def resolve_program(program: str) -> str:
    """
    The file C{program} names: itself when it holds a slash, else the first
    executable of that name on C{PATH} (as a shell would find it).

    @raise StartupError: There is none.
    """
    if os.sep in program:
        if not os.access(program, os.X_OK) or os.path.isdir(program):
            raise StartupError(f"[notify] command: {program!r} is not an executable file")
        return program
    found: list[str] = which(program)
    if not found:
        raise StartupError(f"[notify] command: {program!r} is not found on PATH")
    return found[0]


class _Run(ProcessProtocol):
    """
    One run of the command: writes the summary and closes standard input,
    discards standard output, keeps the tail of standard error.

    @ivar done: Fires (once the process has ended) with None for exit
        status 0, or fails with L{NotificationFailed}.
    @ivar ended: Fires with None once the process has ended, however.
    """

    def __init__(self, stdin: bytes) -> None:
        self.stdin = stdin
        self.stderr = b""
        self.done: Deferred[None] = Deferred(self.kill)
        self.ended: Deferred[None] = Deferred()
        self.killed = False

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self.stdin)
        self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        """Standard output is read and dropped."""

    def errReceived(self, data: bytes) -> None:
        self.stderr = (self.stderr + data)[-STDERR_KEPT:]

    def kill(self, _: object = None) -> None:
        """Kill the process (the canceller of L{done})."""
        self.killed = True
        if self.transport is not None:
            try:
                self.transport.signalProcess("KILL")
            except Exception:
                pass  # it has already ended

    def processEnded(self, reason: Failure) -> None:
        self.ended.callback(None)
        if self.done.called:
            return  # cancelled (timed out, or stopping)
        if reason.check(ProcessDone):
            self.done.callback(None)
            return
        value = reason.value
        if isinstance(value, ProcessTerminated) and value.exitCode is not None:
            why = f"exit status {value.exitCode}"
        elif isinstance(value, ProcessTerminated) and value.signal is not None:
            why = f"killed by signal {value.signal}"
        else:
            why = f"ended: {reason.getErrorMessage()}"
        errors = inert(self.stderr.decode("utf-8", "replace").strip())
        if errors:
            why += f"; standard error ends: {errors}"
        self.done.errback(NotificationFailed(why))


@implementer(INotificationChannel)
class CommandChannel:
    """
    Runs C{argv} (no shell) once per notification, the summary as JSON on
    its standard input; it succeeds when the command exits with status 0.
    Its environment is Beacon's.
    """

    name = "command"

    def __init__(self, reactor: IReactorProcess, argv: Sequence[str]) -> None:
        """
        @param reactor: Spawns the process.
        @param argv: The program and its arguments; the program is looked
            up on C{PATH} now (L{resolve_program}) unless it holds a slash.

        @raise StartupError: The program is not found.
        """
        if not argv:
            raise StartupError("[notify] command names no program")
        self._reactor = reactor
        self._argv = list(argv)
        self._executable = resolve_program(argv[0])
        self._runs: set[_Run] = set()

    def send(self, summary: dict[str, Any]) -> Deferred[None]:
        """
        Run the command with C{summary} on its standard input.

        @return: Fires with None on exit status 0; fails with
            L{NotificationFailed} otherwise. Cancelling it kills the
            process.
        """
        run = _Run(summary_json(summary))
        self._runs.add(run)
        run.ended.addBoth(lambda _: self._runs.discard(run))
        try:
            self._reactor.spawnProcess(run, self._executable, self._argv, env=None)
        except OSError as e:
            self._runs.discard(run)
            return fail(NotificationFailed(f"cannot run {self._argv[0]!r}: {e.strerror or e}"))
        return run.done

    def stop(self) -> Deferred[None]:
        """
        Kill every run still going and fire once each has ended.
        """
        runs = list(self._runs)
        if not runs:
            return succeed(None)
        for run in runs:
            run.kill()
        return DeferredList([run.ended for run in runs]).addCallback(lambda _: None)
