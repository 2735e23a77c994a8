"""
Shared fixtures. pytest has no dirty-reactor check, so every test runs with
an observer that fails it when Twisted logged a failure it did not expect;
tests that provoke a logged failure on purpose say so through the
C{logged_events} fixture's C{expect_failures()}.

Every test also runs with a check of the L{Clock}s it injected (a
C{MemoryReactorClock} is one): a delayed call still active when the test ends
is a timer left running (an idle timeout, a keepalive, a deadline), either
because the test did not close what it opened or because Beacon did not
cancel it on close or stop. The test fails, listing each call, when it is due
and where it was scheduled. A test that leaves calls on purpose says why with
C{@pytest.mark.leaves_clock_calls("...")} (a reason starting "BUG:" marks a
timer Beacon should have cancelled); the marker is strict: a marked test that
leaves nothing fails too, so that the marker goes once it is no longer true.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import weakref
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from twisted.internet.base import DelayedCall
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher

# grpcio's fork handlers (on by default) run in every child this process
# forks once a gRPC channel or server has been used here (tests/test_grpc.py,
# the client's gRPC tests): a child of subprocess.Popen(preexec_fn=...) then
# restarts grpcio's poller, closes its descriptors before exec, and now and
# then aborts (SIGABRT, "epoll_wait error: Bad file descriptor"): a twistd
# that never starts. No child of the test process uses gRPC before exec.
# Read when grpc is first imported, which is after this.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

# Tests that stop a `beacon review follow` or `review web` child with SIGINT
# play the person pressing Ctrl-C at a terminal, where SIGINT is never
# ignored. A shell starting the suite in the background without job control
# (`make test &` in a script, nohup) starts it with SIGINT ignored, which its
# children inherit, and Twisted leaves an ignored SIGINT alone: those
# children would not stop. The suite's process handles SIGINT as an
# interactive one does, so that its children start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Hypothesis: in CI (CI=true) every run draws the same examples (derandomized,
# no example database), so that a run passes or fails by the code alone, and
# no health check times the machine. Local runs keep searching with random
# seeds and keep their example database: what a search finds is pinned in its
# test with @example.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev")
)


class LoggedEvents:
    """
    The twisted.logger events emitted during one test.
    """

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.failures_expected = False

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def expect_failures(self) -> None:
        """This test logs failures on purpose."""
        self.failures_expected = True

    def named(self, prefix: str) -> list[dict[str, Any]]:
        """The events whose format starts with the stable name C{prefix}."""
        return [
            e for e in self.events if str(e.get("log_format") or "").startswith(prefix)
        ]

    def failures(self) -> list[dict[str, Any]]:
        """
        The events that carry a failure: logged with twisted.logger, or the
        legacy way (the reactor's "Unhandled Error" is one of those).
        """
        return [
            e
            for e in self.events
            if "log_failure" in e or (e.get("isError") and e.get("failure") is not None)
        ]


@pytest.fixture(autouse=True)
def logged_events() -> Iterator[LoggedEvents]:
    """
    Collect log events; fail the test if a failure was logged unexpectedly.
    """
    observer = LoggedEvents()
    globalLogPublisher.addObserver(observer)
    try:
        yield observer
    finally:
        globalLogPublisher.removeObserver(observer)
    if not observer.failures_expected:
        unexpected = observer.failures()
        if unexpected:
            first = unexpected[0].get("log_failure") or unexpected[0]["failure"]
            pytest.fail(
                f"{len(unexpected)} failure(s) logged during the test; first:\n"
                f"{first.getTraceback()}"
            )


@pytest.fixture
def short_dir() -> Iterator[str]:
    """
    A fresh 0700 directory with a short path under /tmp, removed afterwards:
    a unix socket's path must fit in sun_path (107 bytes), which pytest's
    C{tmp_path} does not promise.
    """
    directory = tempfile.mkdtemp(prefix="b-", dir="/tmp")
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--http-path",
        choices=("direct", "twisted.web"),
        default="direct",
        help="the path BeaconSites answer plain requests on: the direct channel "
        "(the default, as Beacon runs) or twisted.web alone (its off switch); "
        "make test runs the HTTP and WebSocket suites both ways",
    )


@pytest.fixture(autouse=True)
def http_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """
    The --http-path of this run: with twisted.web, no BeaconSite answers
    directly, and a test marked C{direct_channel} (one of the direct channel
    itself, which needs it) is skipped.
    """
    path: str = request.config.getoption("--http-path")
    if path == "twisted.web":
        if request.node.get_closest_marker("direct_channel") is not None:
            pytest.skip("a test of the direct channel itself: --http-path=twisted.web takes it away")
        from beacon.bindings.http import BeaconSite

        monkeypatch.setattr(BeaconSite, "direct_default", False)
    return path


@pytest.fixture(autouse=True)
def no_beacon_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    No test (nor a command it runs) finds the operator socket through the
    environment of the person running the suite: BEACON_SOCKET is unset,
    unless the test sets it.
    """
    monkeypatch.delenv("BEACON_SOCKET", raising=False)


#: The project's root: where a delayed call was scheduled is told relative to it.
_ROOT = Path(__file__).resolve().parent.parent
_PROJECT = (str(_ROOT / "beacon") + os.sep, str(_ROOT / "tests") + os.sep)
_CALL_OUTCOME = pytest.StashKey[pytest.TestReport]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep the outcome of a test's call phase, for the clock check."""
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[_CALL_OUTCOME] = report
    return report


def _where(frame: Any) -> str:
    """
    Where a call was scheduled: the nearest frame in Beacon or its tests,
    and the direct caller of C{callLater} when that is elsewhere (Twisted).
    """
    direct = None
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__:
            place = f"{_relative(name)}:{frame.f_lineno} in {frame.f_code.co_name}"
            if name.startswith(_PROJECT):
                return place if direct is None else f"{place} (via {direct})"
            direct = direct or place
        frame = frame.f_back
    return direct or "?"


def _relative(name: str) -> str:
    marker = os.sep + "site-packages" + os.sep
    if marker in name:
        return name.rsplit(marker, 1)[-1]
    try:
        return str(Path(name).relative_to(_ROOT))
    except ValueError:
        return name


def _describe(call: IDelayedCall) -> str:
    """The function a call runs and its arguments."""
    func = getattr(call, "func", None)
    name = getattr(func, "__qualname__", None) or repr(func)
    module = getattr(func, "__module__", None)
    args = ", ".join(
        [repr(a) for a in getattr(call, "args", ())]
        + [f"{k}={v!r}" for k, v in getattr(call, "kw", {}).items()]
    )
    if len(args) > 60:
        args = args[:57] + "..."
    return f"{module + '.' if module else ''}{name}({args})"


class ClockCalls:
    """
    The L{Clock}s a test used: those created during it, and those it
    scheduled a call on. Pending means active (neither run nor cancelled).
    """

    def __init__(self) -> None:
        self.created: list[Clock] = []
        self.used: dict[int, Clock] = {}
        self.where: weakref.WeakKeyDictionary[DelayedCall, str] = weakref.WeakKeyDictionary()

    def pending(self) -> list[tuple[int, str]]:
        """
        The active calls scheduled during the test or on a clock it created,
        one line for each function and place: how many, how long until the
        first is due on its clock, and where they were scheduled.
        """
        created = {id(clock) for clock in self.created}
        clocks = {**{id(clock): clock for clock in self.created}, **self.used}
        found: dict[tuple[str, str], list[float]] = {}
        for clock in clocks.values():
            for call in clock.getDelayedCalls():
                if not call.active():
                    continue
                where = self.where.get(call)  # type: ignore[call-overload]
                if where is None and id(clock) not in created:
                    continue  # scheduled before this test, on a clock it did not create
                key = (_describe(call), where or "? (not through callLater)")
                found.setdefault(key, []).append(call.getTime() - clock.seconds())
        return [
            (
                len(due),
                f"  {what}{f' x{len(due)}' if len(due) > 1 else ''}: due in {min(due):g}s; "
                f"scheduled at {where}",
            )
            for (what, where), due in found.items()
        ]


@pytest.fixture(autouse=True)
def clock_calls(request: pytest.FixtureRequest) -> Iterator[ClockCalls]:
    """
    Track every L{Clock} of the test; fail the test if one ends with delayed
    calls still active, unless it is marked C{leaves_clock_calls(reason)}.
    """
    tracker = ClockCalls()
    original_init = Clock.__init__
    original_call_later = Clock.callLater

    def init(self: Clock) -> None:
        original_init(self)
        tracker.created.append(self)

    def call_later(
        self: Clock, delay: float, f: Callable[..., object], /, *args: object, **kw: object
    ) -> IDelayedCall:
        call = original_call_later(self, delay, f, *args, **kw)
        tracker.used[id(self)] = self
        tracker.where[call] = _where(sys._getframe(1))  # type: ignore[index]
        return call

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Clock, "__init__", init)
        patch.setattr(Clock, "callLater", call_later)
        yield tracker
    outcome = request.node.stash.get(_CALL_OUTCOME, None)
    if outcome is None or not outcome.passed:
        return  # failed, skipped or xfailed: its own report says what went wrong
    marker = request.node.get_closest_marker("leaves_clock_calls")
    if marker is not None and not (
        len(marker.args) == 1 and isinstance(marker.args[0], str) and marker.args[0].strip()
    ):
        pytest.fail(
            "leaves_clock_calls needs one reason: @pytest.mark.leaves_clock_calls(\"why\")",
            pytrace=False,
        )
    pending = tracker.pending()
    if pending and marker is None:
        pytest.fail(
            f"{sum(count for count, _ in pending)} delayed call(s) still active on a Clock "
            "when the test ended (close what the test opened, or mark it "
            "leaves_clock_calls(\"why\")):\n"
            + "\n".join(line for _, line in pending),
            pytrace=False,
        )
    if not pending and marker is not None:
        pytest.fail(
            f"marked leaves_clock_calls({marker.args[0]!r}) but no delayed call was left "
            "active on a Clock: remove the marker",
            pytrace=False,
        )
