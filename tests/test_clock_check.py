"""
The clock check of C{conftest.py}: a test that ends with delayed calls still
active on a L{Clock} fails, listing them; calls that ran or were cancelled
are not counted; C{leaves_clock_calls} excuses a test, strictly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CASES = '''
import pytest
from twisted.internet.task import Clock, LoopingCall
from twisted.internet.testing import MemoryReactorClock

OLD = Clock()
OLD.callLater(5, print, "before any test")


def idle(x=None):
    pass


def test_left_on_a_clock():
    Clock().callLater(5, idle, 1)


def test_left_on_a_memory_reactor():
    MemoryReactorClock().callLater(7, idle, x=2)


def test_left_on_a_clock_made_before():
    OLD.callLater(9, idle)


def test_run_and_cancelled_are_not_pending():
    clock = Clock()
    clock.callLater(5, idle).cancel()
    clock.callLater(1, idle)
    clock.advance(1)
    loop = LoopingCall(idle)
    loop.clock = clock
    loop.start(1)
    clock.advance(3)
    loop.stop()


def test_calls_left_from_before_the_test_are_not_its_own():
    OLD.callLater(1, idle).cancel()


@pytest.mark.leaves_clock_calls("on purpose")
def test_marked():
    Clock().callLater(5, idle)


@pytest.mark.leaves_clock_calls("no longer true")
def test_marked_but_clean():
    pass


@pytest.mark.leaves_clock_calls()
def test_marked_without_a_reason():
    Clock().callLater(5, idle)


def test_failing_on_its_own():
    Clock().callLater(5, idle)
    assert False
'''


def test_the_check(pytester: pytest.Pytester) -> None:
    tests = Path(__file__).parent
    pytester.makeconftest((tests / "conftest.py").read_text())
    pytester.makepyprojecttoml((tests.parent / "pyproject.toml").read_text())
    pytester.makepyfile(test_cases=CASES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=8, failed=1, errors=5)
    outcomes = {
        line.split(" ", 1)[1].split(" ", 1)[0].split("::")[-1]: line.split(" ", 1)[0]
        for line in result.outlines
        if line.startswith(("PASSED ", "FAILED ", "ERROR "))
    }
    assert {name for name, outcome in outcomes.items() if outcome == "ERROR"} == {
        "test_left_on_a_clock",
        "test_left_on_a_memory_reactor",
        "test_left_on_a_clock_made_before",
        "test_marked_but_clean",
        "test_marked_without_a_reason",
    }
    assert outcomes["test_failing_on_its_own"] == "FAILED"
    result.stdout.fnmatch_lines(
        [
            "*1 delayed call(s) still active on a Clock*",
            "  test_cases.idle(1): due in 5s; scheduled at *test_cases.py:* in test_left_on_a_clock",
        ]
    )
    result.stdout.fnmatch_lines(["  test_cases.idle(x=2): due in 7s; *"])
    result.stdout.fnmatch_lines(["  test_cases.idle(): due in 9s; *"])
    result.stdout.fnmatch_lines(["*marked leaves_clock_calls('no longer true')*remove the marker*"])
    result.stdout.fnmatch_lines(["*leaves_clock_calls needs one reason*"])
