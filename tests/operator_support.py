"""
What the operator doors' two test modules share (tests/test_unix.py, the unix
socket; tests/test_operator_bearer.py, the loopback bearer-token door): a
check, at a point of a test, that nothing was logged through the legacy
C{log.err}; makeService's configuration, and its tree started and stopped
on the real reactor; a treq client that keeps no connection; and a resource
that answers C{hello}.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from typing import Any

import pytest
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.resource import Resource

from beacon.config import build_config
from beacon.service import makeService

CARD_PATH = "/.well-known/agent-card.json"


def assert_no_unhandled_errors(logged_events: Any) -> None:
    """
    Fail now if a failure was logged through the legacy C{log.err} (the
    reactor's "Unhandled Error", whose events carry C{failure}): the
    conftest's check fails the test too, but only once it has ended, after
    whatever the failure went on to break. Reported once.
    """
    if logged_events.failures_expected:
        return
    legacy = [e for e in logged_events.events if e.get("failure") is not None]
    if legacy:
        logged_events.failures_expected = True  # reported here, not again
        pytest.fail(
            f"{len(legacy)} unhandled error(s) logged during the test; first:\n"
            f"{legacy[0]['failure'].getTraceback()}"
        )


def mode_of(path: str) -> int:
    """The permission bits of C{path} itself (not following a symlink)."""
    return stat.S_IMODE(os.lstat(path).st_mode)


class Hello(Resource):
    """Answers every request with C{hello}."""

    isLeaf = True

    def render(self, request: Any) -> bytes:
        return b"hello"


def tcp_client() -> HTTPClient:
    """A treq client that keeps no connection open after a response."""
    return HTTPClient(
        Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False))
    )


def list_tasks_body() -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {}}
    ).encode()


@dataclass
class Running:
    """A started makeService tree and where to reach it."""

    service: Any
    data_dir: str
    socket_path: str


def beacon_config(data_dir: str, **kwargs: Any) -> Any:
    """
    makeService's configuration with its data in C{data_dir}, the public
    listener on a free loopback port, and C{kwargs} (L{build_config}'s).
    """
    return build_config(
        data_dir=data_dir,
        http=["tcp:0:interface=127.0.0.1"],
        public_url="http://127.0.0.1:1",
        **kwargs,
    )


def start_beacon(config: Any) -> Running:
    """makeService's tree for C{config}, started on the real reactor."""
    service = makeService(config, reactor)
    service.startService()
    return Running(service, config.data_dir, os.path.join(config.data_dir, "operator.sock"))


async def stop_beacon(running: Running) -> None:
    """Stop what L{start_beacon} started, unless the test stopped it already."""
    if running.service.running:
        await running.service.stopService()
