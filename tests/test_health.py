"""
Health checks (issue 20): C{/healthz} and C{/readyz} on the public site as
makeService wires it (L{Monitoring.public}), on both HTTP paths (the direct
channel and twisted.web, compared byte for byte), outside the rate limit;
readiness kept by a periodic store check on a L{Clock}, turning 503 when
the store fails or stops answering and back when it answers again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from beacon.bindings.http import BeaconSite, Container
from beacon.config import build_config
from beacon.monitoring import (
    CHECK_INTERVAL,
    PROBE_ID,
    STALE_AFTER,
    STARTING,
    STOPPING,
    STORE_FAILED,
    STORE_UNRESPONSIVE,
    Monitoring,
    Readiness,
)
from beacon.service import beacon_resources
from beacon.store import StoreError, TaskStatusRecord
from beacon.testing import MemoryStore

PEER = IPv4Address("TCP", "192.0.2.7", 4321)
START = 1_800_000_000.0
SEND = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
    }
).encode()


class FlakyStore(MemoryStore):
    """A MemoryStore whose status reads can fail, or hang, when asked to."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.hanging: list[Deferred[Any]] | None = None
        self.asked = 0

    def status(self, receipt_id: str) -> Deferred[TaskStatusRecord | None]:
        self.asked += 1
        if self.failing:
            return fail(StoreError("database is locked"))
        if self.hanging is not None:
            waiting: Deferred[TaskStatusRecord | None] = Deferred()
            self.hanging.append(waiting)
            return waiting
        return super().status(receipt_id)


def get(path: bytes, method: bytes = b"GET", headers: bytes = b"") -> bytes:
    return method + b" " + path + b" HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n"


def post(body: bytes, path: bytes = b"/a2a/v1") -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )


_open: list[tuple[Any, StringTransport]] = []


@pytest.fixture(autouse=True)
def lose_connections() -> Iterator[None]:
    """Every connection a test opened is lost at its end."""
    yield
    for channel, transport in _open:
        protocol = getattr(transport, "protocol", None) or channel
        protocol.connectionLost(Failure(ConnectionDone()))
    _open.clear()


class Beacon:
    """
    The public site of one Beacon with its health checks, as makeService
    wires them, on a Clock (started: its readiness check runs).
    """

    def __init__(self, direct: bool = True, store: MemoryStore | None = None, **settings: Any) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.store = store or MemoryStore()
        config = build_config(settings or {"limits": {"rate": 0}})
        resources = beacon_resources(config, self.store, self.clock)
        resources.publish("http://127.0.0.1:8080")
        self.site = BeaconSite(
            resources.mount(Container()), clock=self.clock, direct=direct,
            **config.limits.site_options(),
        )
        self.monitoring = Monitoring(config, self.store, self.clock)  # type: ignore[arg-type]
        self.monitoring.public(self.site, resources.websocket)
        self.monitoring.readiness.startService()

    def stop(self) -> None:
        if self.monitoring.readiness.running:
            self.monitoring.readiness.stopService()

    def exchange(self, *reads: bytes) -> tuple[bytes, Any]:
        channel = self.site.buildProtocol(PEER)
        transport = StringTransport(peerAddress=PEER)
        channel.makeConnection(transport)
        _open.append((channel, transport))
        for data in reads:
            channel.dataReceived(data)
        return transport.value(), channel

    def answers(self, *reads: bytes) -> list[tuple[int, dict[str, str], bytes]]:
        raw, _ = self.exchange(*reads)
        return parse(raw)


def parse(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The responses in C{raw}: status, headers (lower-cased names), body."""
    answers = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        answers.append((int(lines[0].split()[1]), headers, rest[:length]))
        raw = rest[length:]
    return answers


@pytest.fixture
def beacon() -> Iterator[Beacon]:
    made = Beacon()
    yield made
    made.stop()


def comparable(raw: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*", b"\r\nDate: -", raw)


CHECKS = {
    "healthz": get(b"/healthz"),
    "readyz": get(b"/readyz"),
    "healthz HEAD": get(b"/healthz", b"HEAD"),
    "readyz HEAD": get(b"/readyz", b"HEAD"),
    "readyz POST": post(b"{}", b"/readyz"),
    "healthz with a query": get(b"/healthz?probe=k8s"),
}


@pytest.mark.parametrize("request_bytes", CHECKS.values(), ids=CHECKS.keys())
def test_both_http_paths_answer_alike(request_bytes: bytes) -> None:
    """/healthz and /readyz are answered on the direct channel with the bytes twisted.web sends for them."""
    direct, web = Beacon(direct=True), Beacon(direct=False)
    try:
        raw_direct, channel = direct.exchange(request_bytes)
        raw_web, _ = web.exchange(request_bytes)
        if BeaconSite.direct_default:
            assert channel.http is None, "the direct channel handed a health check over"
        assert comparable(raw_direct) == comparable(raw_web)
    finally:
        direct.stop()
        web.stop()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "twisted.web"])
def test_ok_answers(direct: bool) -> None:
    """Both checks answer 200 {"status":"ok"}, JSON, not to be cached; HEAD the same head without a body."""
    beacon = Beacon(direct=direct)
    try:
        for path in (b"/healthz", b"/readyz"):
            ((status, headers, body),) = beacon.answers(get(path))
            assert (status, body) == (200, b'{"status":"ok"}')
            assert headers["content-type"] == "application/json"
            assert headers["cache-control"] == "no-store"
            raw, _ = beacon.exchange(get(path, b"HEAD"))
            assert raw.endswith(b"Content-Length: 15\r\n\r\n")
            assert b"no-store" in raw
    finally:
        beacon.stop()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "twisted.web"])
def test_other_methods_and_paths(direct: bool) -> None:
    """A POST is 405 with Allow: GET, HEAD; a path below a check is 404; both JSON."""
    beacon = Beacon(direct=direct)
    try:
        ((status, headers, body),) = beacon.answers(post(b"{}", b"/readyz"))
        assert status == 405 and headers["allow"] == "GET, HEAD"
        assert json.loads(body)["error"]["code"] == "method_not_allowed"
        ((status, _, body),) = beacon.answers(get(b"/healthz/more"))
        assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
    finally:
        beacon.stop()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "twisted.web"])
def test_checks_are_outside_the_rate_limit(direct: bool) -> None:
    """A source at its rate is still answered by both checks (100 of them), which take none of its tokens: its next RPC goes through, the one after is 429."""
    beacon = Beacon(direct=direct, limits={"rate": 1, "burst": 1})
    try:
        checks = [get(b"/healthz"), get(b"/readyz")] * 50
        answers = beacon.answers(*checks)
        assert [status for status, _, _ in answers] == [200] * 100
        statuses = [status for status, _, _ in beacon.answers(post(SEND), post(SEND))]
        assert statuses == [200, 429]
        assert beacon.site.refusals["rate_limited"] == 1
    finally:
        beacon.stop()


def test_readiness_follows_the_store_on_the_clock(logged_events: Any) -> None:
    """Ready once the store answers; 503 store_failed while its check fails and ready again once it answers, each change logged once; the check runs every CHECK_INTERVAL and asks for PROBE_ID only."""
    store = FlakyStore()
    beacon = Beacon(store=store)
    try:
        assert beacon.monitoring.readiness.state() == (True, None)
        asked = store.asked
        beacon.clock.advance(CHECK_INTERVAL)
        assert store.asked == asked + 1
        store.failing = True
        beacon.clock.advance(CHECK_INTERVAL)
        ((status, headers, body),) = beacon.answers(get(b"/readyz"))
        assert status == 503 and headers["cache-control"] == "no-store"
        assert json.loads(body) == {"status": "unavailable", "reason": STORE_FAILED}
        ((status, _, _),) = beacon.answers(get(b"/healthz"))
        assert status == 200, "alive is not ready: the reactor still answers"
        beacon.clock.advance(CHECK_INTERVAL * 3)
        store.failing = False
        beacon.clock.advance(CHECK_INTERVAL)
        ((status, _, body),) = beacon.answers(get(b"/readyz"))
        assert (status, body) == (200, b'{"status":"ok"}')
        changes = [e["log_format"].split(":")[0] for e in logged_events.named("health.")]
        assert changes == ["health.ready", "health.not_ready", "health.ready"]
        (failed,) = logged_events.named("health.not_ready")
        assert failed["error"] == "database is locked" and failed["reason"] == STORE_FAILED
    finally:
        beacon.stop()


def test_a_store_that_stops_answering_turns_unready(logged_events: Any) -> None:
    """A check without an answer is not repeated; once the last answer is older than STALE_AFTER, 503 store_unresponsive; the late answer makes it ready again."""
    store = FlakyStore()
    beacon = Beacon(store=store)
    try:
        store.hanging = []
        beacon.clock.advance(CHECK_INTERVAL)
        asked = store.asked
        beacon.clock.pump([CHECK_INTERVAL] * 3)
        assert store.asked == asked, "a second check was sent while one was unanswered"
        assert beacon.monitoring.readiness.state() == (True, None)
        beacon.clock.advance(STALE_AFTER)
        ((status, _, body),) = beacon.answers(get(b"/readyz"))
        assert status == 503
        assert json.loads(body)["reason"] == STORE_UNRESPONSIVE
        hanging, store.hanging = store.hanging, None
        hanging[0].callback(None)
        assert beacon.monitoring.readiness.state() == (True, None)
        assert [e["reason"] for e in logged_events.named("health.not_ready")] == [STORE_UNRESPONSIVE]
    finally:
        beacon.stop()


def test_starting_and_stopping() -> None:
    """Before it starts, and while the first check has no answer, not ready: starting; after it stops: stopping, with no timer left."""
    store = FlakyStore()
    clock = Clock()
    readiness = Readiness(store, clock)
    assert readiness.state() == (False, STARTING)
    store.hanging = []
    readiness.startService()
    assert store.hanging and readiness.state() == (False, STARTING)
    clock.advance(STALE_AFTER + 0.5)
    assert readiness.state() == (False, STORE_UNRESPONSIVE)
    store.hanging[0].callback(None)
    assert readiness.state() == (True, None)
    readiness.stopService()
    assert readiness.state() == (False, STOPPING)
    assert clock.getDelayedCalls() == []


def test_the_probe_is_no_receipt() -> None:
    """The id the check reads is a well-formed receipt id that no submission has."""
    assert re.fullmatch("[0-9a-v]{36}", PROBE_ID)
    store = MemoryStore()
    answers: list[Any] = []
    store.status(PROBE_ID).addCallback(answers.append)
    assert answers == [None]
