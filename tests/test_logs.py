"""
beacon.logs: Twisted's classic text log format, the same text faster, and
how C{twistd beacon} takes it up.
"""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.application.service import Application
from twisted.logger import (
    FileLogObserver,
    ILogObserver,
    Logger,
    LogLevel,
    formatEventAsClassicLogText,
)
from twisted.internet.task import Clock
from twisted.python import threadable
from twisted.scripts.twistd import ServerOptions

from beacon import tap
from beacon.logs import (
    FLUSH_DELAY,
    TurnFlushedObserver,
    format_classic_text,
    text_file_observer,
    twistd_log_observer,
)

T0 = 1_764_480_000.0  # 2025-11-30T05:20:00Z


def events_of(emit: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    emit(Logger(namespace="beacon.test", observer=events.append))
    return events


def test_the_stored_event_reads_as_twisted_writes_it() -> None:
    """Beacon's busiest event comes out byte for byte as Twisted's formatter writes it."""
    (event,) = events_of(
        lambda log: log.info(
            "intake.stored: receipt {receipt} ({size} bytes, {kind}) via {door}",
            receipt="abc",
            size=12,
            kind="text",
            door="jsonrpc",
        )
    )
    assert format_classic_text(event) == formatEventAsClassicLogText(event)
    assert "[beacon.test#info] intake.stored: receipt abc (12 bytes, text) via jsonrpc\n" in (
        format_classic_text(event) or ""
    )


def _failing() -> None:
    raise ValueError("boom")


def unusual(log: Logger) -> None:
    log.warn("two\nlines {x!r} {y:>5} {z[0]} {w.real}", x="q", y=3, z=[1], w=2)
    log.info("call syntax {f()}", f=lambda: "called")
    log.info("positional {0}")
    log.info("missing {nothing}")
    log.info("")
    log.info("{empty}", empty="")
    log.info("braces {{literal}} {a}", a=1)
    log.emit(LogLevel.error, "own system {a}", log_system="the-system", a=1)
    log.emit(LogLevel.info, "bytes format", log_format=b"bytes {a}", a=1)
    try:
        _failing()
    except ValueError:
        log.failure("failed {a}", a=1)


def test_unusual_events_read_as_twisted_writes_them() -> None:
    """Call syntax, bad formats, empty text, a system, bytes and tracebacks: all as Twisted writes them."""
    for event in events_of(unusual):
        assert format_classic_text(event) == formatEventAsClassicLogText(event), event


def test_events_without_a_usable_time_read_as_twisted_writes_them() -> None:
    """No time, an integer time, a non-finite time: Twisted's own handling."""
    for when in (None, int(T0)):
        event = {"log_format": "x {a}", "a": 1, "log_time": when, "log_level": LogLevel.info}
        assert format_classic_text(event) == formatEventAsClassicLogText(event)
    event = {"log_format": "x", "log_time": float("nan"), "log_level": LogLevel.info}
    with pytest.raises(ValueError):
        formatEventAsClassicLogText(event)
    with pytest.raises(ValueError):
        format_classic_text(event)


def test_the_second_is_formatted_again_when_it_changes() -> None:
    """The cached second never leaks into the next one, forwards or backwards."""
    for when in (
        T0 + 0.1,
        T0 + 0.999,
        T0 + 1.0,
        T0 + 1.5,
        T0 - 0.5,
        T0 + 3600.25,
        1.9999995231628418,  # datetime rounds it up into the next second
        T0 + 2.9999996,
        T0 + 3.0000004,
        -1.5,
    ):
        event = {"log_format": "tick", "log_time": when, "log_level": LogLevel.info}
        assert format_classic_text(event) == formatEventAsClassicLogText(event)


_names = st.sampled_from(["a", "b", "receipt", "size"])
_values = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.text(),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
)
_fields = st.tuples(
    _names,
    st.sampled_from(["", "!r", "!s", "!a"]),
    st.sampled_from(["", ":>6", ":<3", ":^4"]),
).map(lambda f: "{" + f[0] + f[1] + f[2] + "}")
_literals = st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=12)


@settings(max_examples=1000, deadline=None)
@given(
    parts=st.lists(st.one_of(_literals, _fields), max_size=6),
    values=st.dictionaries(_names, _values),
    when=st.floats(min_value=0, max_value=4e9),
    system=st.one_of(st.none(), st.text(max_size=8)),
    level=st.sampled_from(list(LogLevel.iterconstants())),
)
def test_any_ordinary_event_reads_as_twisted_writes_it(
    parts: list[str], values: dict[str, Any], when: float, system: str | None, level: Any
) -> None:
    """Over generated formats, values, times, systems and levels, the text is Twisted's."""
    event: dict[str, Any] = dict(values)
    event.update(
        log_format="".join(parts),
        log_time=when,
        log_level=level,
        log_namespace="beacon.generated",
    )
    if system is not None:
        event["log_system"] = system
    assert format_classic_text(event) == formatEventAsClassicLogText(event)


def test_text_file_observer_writes_lines() -> None:
    """The observer writes (and flushes) one line per event."""
    out = io.StringIO()
    observer = text_file_observer(out)
    for event in events_of(lambda log: (log.info("one {a}", a=1), log.info("two"))):
        observer(event)
    lines = out.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["one 1", "two"]


def twistd_options(*argv: str, data: str = "beacon-data") -> ServerOptions:
    options = ServerOptions()
    options.parseOptions(
        [*argv, "beacon", "--data", data, "--http", "tcp:0:interface=127.0.0.1", "--operator", ""]
    )
    return options


@pytest.fixture
def sigusr1() -> Iterator[None]:
    """SIGUSR1's handler is put back after the test."""
    before = signal.getsignal(signal.SIGUSR1)
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, before)


def twistd_application(options: ServerOptions, monkeypatch: pytest.MonkeyPatch) -> Any:
    """
    What twistd does with C{twistd beacon}: make the plugin's service and
    add it to a new application, whose L{ILogObserver} component (if any)
    twistd then logs through.
    """
    monkeypatch.setattr(tap, "_keep_stderr", lambda: None)
    application = Application("beacon")
    tap.makeService(options.subOptions).setServiceParent(application)
    return application


def test_twistd_beacon_logs_through_the_fast_formatter(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, sigusr1: None
) -> None:
    """twistd -n --logfile PATH beacon: the application's log observer writes the fast formatter's lines to PATH."""
    path = tmp_path / "beacon.log"
    options = twistd_options("-n", "--logfile", str(path), data=str(tmp_path / "data"))
    observer = twistd_application(options, monkeypatch).getComponent(ILogObserver)
    assert options["logger"] is None
    assert isinstance(observer, TurnFlushedObserver)
    (event,) = events_of(lambda log: log.info("hello {who}", who="file"))
    observer(event)
    observer.flush()  # what the end of the reactor's turn does
    assert path.read_text() == formatEventAsClassicLogText(event)


def test_a_daemon_logs_to_twistd_log_rotated_on_sigusr1(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, sigusr1: None
) -> None:
    """Daemonized without --logfile: twistd.log in the current directory, rotated (through the reactor) on SIGUSR1, as twistd's own."""
    monkeypatch.chdir(tmp_path)
    observer = twistd_log_observer(twistd_options(), _CallNow())
    assert observer is not None
    (event,) = events_of(lambda log: log.info("before"))
    observer(event)
    os.kill(os.getpid(), signal.SIGUSR1)
    assert (tmp_path / "twistd.log.1").read_text() == formatEventAsClassicLogText(event)
    assert (tmp_path / "twistd.log").read_text() == ""


def test_a_handler_already_on_sigusr1_stays(
    tmp_path: Any, sigusr1: None
) -> None:
    """As twistd: SIGUSR1 rotates the log only if nothing else handles it."""
    mine = lambda signum, frame: None  # noqa: E731
    signal.signal(signal.SIGUSR1, mine)
    twistd_log_observer(twistd_options("--logfile", str(tmp_path / "l")), _CallNow())
    assert signal.getsignal(signal.SIGUSR1) is mine


@pytest.mark.parametrize("argv", [["-n"], ["-n", "--logfile", "-"]])
def test_twistd_beacon_keeps_standard_output_with_n(
    argv: list[str], capsys: pytest.CaptureFixture[str], sigusr1: None
) -> None:
    """With -n and no --logfile, or --logfile -, twistd's choice stands: standard output."""
    observer = twistd_log_observer(twistd_options(*argv), _CallNow())
    assert observer is not None
    (event,) = events_of(lambda log: log.info("to {where}", where="stdout"))
    observer(event)
    assert capsys.readouterr().out == formatEventAsClassicLogText(event)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


@pytest.mark.parametrize(
    "argv",
    [
        ["-n", "--logger", "twisted.logger.globalLogPublisher"],
        ["-n", "--syslog"],
        ["--logfile", "-"],  # a daemon on standard output: twistd refuses it
    ],
)
def test_an_explicit_logger_or_syslog_wins(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--logger and --syslog are the operator's, and what twistd refuses it refuses: the application gets no observer of Beacon's."""
    options = twistd_options(*argv)
    assert twistd_application(options, monkeypatch).getComponent(ILogObserver) is None
    if "--logger" in argv:
        from twisted.logger import globalLogPublisher

        assert options["logger"] is globalLogPublisher


def test_an_application_with_its_own_observer_keeps_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An application that already has a log observer keeps it."""
    options = twistd_options("-n", "--logfile", str(tmp_path / "unused"))
    monkeypatch.setattr(tap, "_keep_stderr", lambda: None)
    application = Application("beacon")
    theirs = FileLogObserver(io.StringIO(), str)
    application.setComponent(ILogObserver, theirs)
    tap.makeService(options.subOptions).setServiceParent(application)
    assert application.getComponent(ILogObserver) is theirs
    assert not (tmp_path / "unused").exists()


def test_beacon_options_alone_change_nothing() -> None:
    """Beacon's options parsed without twistd (no parent): no observer offered."""
    options = tap.Options()
    options.parseOptions(["--http", "tcp:0:interface=127.0.0.1", "--operator", ""])
    application = Application("beacon")
    tap.makeService(options).setServiceParent(application)
    assert application.getComponent(ILogObserver) is None


class _CallNow:
    """A reactor's callFromThread, called at once; not running."""

    running = False

    def callFromThread(self, f: Any, *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)


class _Flushes(io.StringIO):
    """A text file that counts its flushes and keeps what each one flushed."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


class _TurnReactor(Clock):
    """A Clock with the running flag and shutdown triggers of a reactor."""

    def __init__(self, running: bool = True) -> None:
        super().__init__()
        self.running = running
        self.triggers: list[tuple[str, str, Any]] = []

    def addSystemEventTrigger(self, phase: str, event: str, f: Any, *args: Any) -> None:
        self.triggers.append((phase, event, f))

    def callFromThread(self, f: Any, *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)


def test_the_lines_of_a_millisecond_are_flushed_together() -> None:
    """On the running reactor's thread, the lines logged within FLUSH_DELAY of the first go out in one flush, FLUSH_DELAY after it; the next line starts the next batch."""
    out, reactor = _Flushes(), _TurnReactor()
    observer = text_file_observer(out, reactor)
    events = events_of(lambda log: [log.info("line {n}", n=n) for n in range(4)])
    with _in_io_thread(True):
        observer(events[0])
        reactor.advance(FLUSH_DELAY / 2)
        observer(events[1])
        observer(events[2])
        assert out.flushed == []
        assert len(reactor.getDelayedCalls()) == 1
        reactor.advance(FLUSH_DELAY / 2)
        assert out.flushed == ["".join(format_classic_text(e) or "" for e in events[:3])]
        assert reactor.getDelayedCalls() == []
        observer(events[3])
        reactor.advance(FLUSH_DELAY)
    # (Each entry is what the file held at that flush.)
    assert out.flushed[1:] == ["".join(format_classic_text(e) or "" for e in events)]
    assert reactor.getDelayedCalls() == []


def test_lines_are_flushed_at_once_off_the_turn() -> None:
    """Before the reactor runs, or from another thread, every line is flushed as written (as FileLogObserver does)."""
    for running, io_thread in ((False, True), (True, False)):
        out, reactor = _Flushes(), _TurnReactor(running)
        observer = text_file_observer(out, reactor)
        (event,) = events_of(lambda log: log.info("now"))
        with _in_io_thread(io_thread):
            observer(event)
        assert out.flushed == [format_classic_text(event)]
        assert reactor.getDelayedCalls() == []


def test_what_is_buffered_is_flushed_after_shutdown() -> None:
    """A line of the turn the reactor stopped in is flushed by the after-shutdown trigger."""
    out, reactor = _Flushes(), _TurnReactor()
    observer = text_file_observer(out, reactor)
    (event,) = events_of(lambda log: log.info("last words"))
    with _in_io_thread(True):
        observer(event)
    ((phase, kind, flush),) = reactor.triggers
    assert (phase, kind) == ("after", "shutdown")
    flush()
    assert out.flushed == [format_classic_text(event)]
    for call in reactor.getDelayedCalls():  # a stopped reactor's turn never ends
        call.cancel()


class _SignalledWhileWriting(_Flushes):
    """
    A text file whose first write is interrupted by C{signum}, raised in
    this thread: its handler runs before the write goes on, as a signal
    arriving while twistd writes its log does.
    """

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = signum
        self.raised = False

    def write(self, text: str) -> int:
        if not self.raised:
            self.raised = True
            signal.raise_signal(self.signum)
        return super().write(text)


class _Deadlocked(Exception):
    """The watchdog's alarm: the observer waited for itself."""


def test_a_signal_handler_that_logs_while_lines_are_written_is_heard() -> None:
    """
    twistd's SIGTERM handler logs ("Received SIGTERM") from whatever the
    reactor's thread was doing, which may be writing the turn's lines: the
    handler's line is written by the next flush, and neither line is lost.
    (The observer's lock was not re-entrant: a busy twistd hung on SIGTERM,
    waiting for itself.) A watchdog alarm turns that hang into a failure.
    """
    out, reactor = _SignalledWhileWriting(signal.SIGUSR2), _TurnReactor()
    observer = text_file_observer(out, reactor)
    request, received = events_of(
        lambda log: [log.info("intake.stored: a line"), log.info("Received SIGTERM, shutting down.")]
    )

    def handler(signum: int, frame: Any) -> None:
        observer(received)

    def watchdog(signum: int, frame: Any) -> None:
        raise _Deadlocked()

    previous = signal.signal(signal.SIGUSR2, handler)
    previous_alarm = signal.signal(signal.SIGALRM, watchdog)
    signal.setitimer(signal.ITIMER_REAL, 5)
    try:
        with _in_io_thread(True):
            observer(request)
            # The batch's flush: its line written, the signal handled
            # meanwhile, and the handler's line in the next batch.
            reactor.advance(FLUSH_DELAY)
            reactor.advance(FLUSH_DELAY)
    except _Deadlocked:
        pytest.fail("the observer waited for its own lock in the signal handler")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_alarm)
        signal.signal(signal.SIGUSR2, previous)
    assert out.raised
    assert out.getvalue() == (format_classic_text(request) or "") + (
        format_classic_text(received) or ""
    )
    assert reactor.getDelayedCalls() == []


@contextmanager
def _in_io_thread(yes: bool) -> Iterator[None]:
    """Make twisted.python.threadable see this thread as the reactor's, or not."""
    saved = threadable.ioThread
    threadable.ioThread = threadable.getThreadID() if yes else -1
    try:
        yield
    finally:
        threadable.ioThread = saved
