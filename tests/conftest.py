"""
Shared fixtures. pytest has no dirty-reactor check, so every test runs with
an observer that fails it when Twisted logged a failure it did not expect;
tests that provoke a logged failure on purpose say so through the
C{logged_events} fixture's C{expect_failures()}.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from twisted.logger import globalLogPublisher

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
    """The --http-path of this run: with twisted.web, no BeaconSite answers directly."""
    path: str = request.config.getoption("--http-path")
    if path == "twisted.web":
        from beacon.bindings.http import BeaconSite

        monkeypatch.setattr(BeaconSite, "direct_default", False)
    return path
