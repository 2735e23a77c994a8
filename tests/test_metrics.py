"""
Prometheus metrics (issue 20).

    - makeService's tree on the real reactor (SQLite store, the operator
      socket, the bearer door and C{[metrics] listen}): after traffic
      through JSON-RPC and the native door, refusals of each kind, a 401 on
      the bearer door and decisions, a scrape of each metrics door gives
      the same counts, and the counts are those of the traffic;
    - the counting, on a Clock: refusals of the WebSocket binding, requests
      in flight, open connections, the pending gauge over a store that
      does not report its batches, two trees in one process that do not
      mix, notifier failures;
    - the store's batch reports and its count of undecided submissions
      (SQLite, and PostgreSQL when it can be reached);
    - C{[metrics]} in the configuration.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
import pytest_twisted
import treq
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, UNIXClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.web.client import HTTPConnectionPool

from beacon.client import OperatorClient, read_discovery_file
from beacon.config import ConfigError, build_config
from beacon.monitoring import METRICS_TYPE, Monitoring, PendingCount, Readiness
from beacon.service import Listeners, makeService
from beacon.store import (
    DECISION_ALREADY_MADE,
    DECISION_FAILED,
    DECISION_NOT_FOUND,
    STATE_COMPLETED,
    STATE_REJECTED,
    BatchReport,
    IMeasuredStore,
    SQLiteStore,
    StoreError,
)
from beacon.testing import MemoryStore

#: Seconds any one exchange with the running Beacon may take.
WAIT = 30.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


class _Collect(Protocol):
    def __init__(self, request: bytes, done: Deferred[bytes]) -> None:
        self._request = request
        self._done = done
        self._data: list[bytes] = []

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self._request)

    def dataReceived(self, data: bytes) -> None:
        self._data.append(data)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self._done.callback(b"".join(self._data))


async def http_get(endpoint: Any, path: bytes, headers: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """One GET on a fresh connection (closed after the answer): status, headers, body."""
    done: Deferred[bytes] = Deferred()
    request = b"GET " + path + b" HTTP/1.1\r\nHost: beacon\r\nConnection: close\r\n" + headers + b"\r\n"
    await endpoint.connect(Factory.forProtocol(lambda: _Collect(request, done)))
    raw = await done.addTimeout(WAIT, reactor)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), fields, body


class Running:
    """makeService's tree, started, and where its doors are."""

    def __init__(self, service: Any, data_dir: str, logged: Any) -> None:
        self.service = service
        self.socket = os.path.join(data_dir, "operator.sock")
        (started,) = logged.named("beacon.started")
        self.public = started["public_url"]
        self.discovery = read_discovery_file(os.path.join(data_dir, "operator-http.json"))
        (metrics,) = [s for s in service if isinstance(s, Listeners) and s._what == "metrics"]
        self.metrics_port = metrics.ports[0].getHost().port
        (self.pending,) = [s for s in service if isinstance(s, PendingCount)]
        (self.readiness,) = [s for s in service if isinstance(s, Readiness)]
        self.pool = HTTPConnectionPool(reactor, persistent=False)

    async def post(self, path: str, body: Any, **headers: str) -> Any:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", "A2A-Version": "1.0", **headers}
        response = await treq.post(
            self.public + path, data=data, headers=sent, pool=self.pool, timeout=WAIT
        )
        content = await response.content()
        return response.code, content

    def bearer(self) -> TCP4ClientEndpoint:
        port = int(self.discovery.url.rsplit(":", 1)[1].strip("/"))
        return TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=WAIT)


@pytest_twisted.async_yield_fixture
async def running(short_dir: str, logged_events: Any) -> AsyncIterator[Running]:
    """makeService's tree with every metrics door, on loopback ports, started and then stopped."""
    config = build_config(
        {
            "limits": {"rate": 0.001, "burst": 10, "max_body": 1024},
            "operator": {"http": "tcp:0:interface=127.0.0.1"},
            "metrics": {"listen": "tcp:0:interface=127.0.0.1"},
        },
        data_dir=short_dir,
        http=["tcp:0:interface=127.0.0.1"],
    )
    service = makeService(config, reactor)
    service.startService()
    try:
        yield Running(service, short_dir, logged_events)
    finally:
        await service.stopService()


def send(text: str | None = None, data: Any = None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    if data is not None:
        parts.append({"data": data, "mediaType": "application/json"})
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": parts}},
    }


STRUCTURED = {"from": {"name": "Ada"}, "subject": "A question", "body": "Is it open?"}


@pytest_twisted.ensureDeferred
async def test_a_scrape_of_each_door_counts_the_traffic(running: Running) -> None:
    """After submissions through JSON-RPC and the native door, a 413, a 415, a -32009, an invalid body, a 429, a 401 on the bearer door and decisions of each outcome, the unix socket, the bearer door and the [metrics] listener all give these counts."""
    assert await running.pending.recount() == 0
    ids = []
    for message in (send("one"), send("two"), send(data=STRUCTURED)):
        code, body = await running.post("/a2a/v1", message)
        assert code == 200
        ids.append(json.loads(body)["result"]["task"]["id"])
    for document in ({"text": "three"}, {"text": "four"}, {"message": STRUCTURED}):
        code, body = await running.post("/beacon/0.1/submissions", document)
        assert code == 201
        ids.append(json.loads(body)["receipt"]["id"])
    # Refusals: each takes a token of the source's 10 but the first.
    assert (await running.post("/beacon/0.1/submissions", b"x" * 2000))[0] == 413
    assert (await running.post("/a2a/v1", send("x"), **{"Content-Type": "text/plain"}))[0] == 415
    code, body = await running.post("/a2a/v1", send("x"), **{"A2A-Version": "0.3"})
    assert json.loads(body)["error"]["code"] == -32009
    assert (await running.post("/beacon/0.1/submissions", b"{nope"))[0] == 400
    code, body = await running.post("/a2a/v1", b"{nope")
    assert json.loads(body)["error"]["code"] == -32700
    assert (await running.post("/a2a/v1", send("over the burst")))[0] == 429
    # The bearer door without its token.
    status, _, _ = await http_get(running.bearer(), b"/metrics")
    assert status == 401
    # Decisions: accept, reject, again (already decided), an unknown id.
    operator = OperatorClient(reactor, socket_path=running.socket, timeout=WAIT)
    await operator.decide(ids[0], "accept")
    await operator.decide(ids[3], "reject", note="no")
    for task_id in (ids[0], "0" * 36):
        with pytest.raises(Exception):
            await operator.decide(task_id, "accept")

    token = b"Authorization: Bearer " + running.discovery.token.encode() + b"\r\n"
    scrapes = {
        "operator_socket": await http_get(UNIXClientEndpoint(reactor, running.socket, WAIT), b"/metrics"),
        "operator_http": await http_get(running.bearer(), b"/metrics", token),
        "metrics": await http_get(
            TCP4ClientEndpoint(reactor, "127.0.0.1", running.metrics_port, WAIT), b"/metrics"
        ),
    }
    for door, (status, headers, body) in scrapes.items():
        assert status == 200, door
        assert headers["content-type"] == METRICS_TYPE.decode()
        assert headers["cache-control"] == "no-store"
        found = samples(body.decode())
        stored = {
            (door_, kind): value(found, "beacon_submissions_stored_total", door=door_, kind=kind)
            for door_ in ("jsonrpc", "native")
            for kind in ("text", "structured")
        }
        assert stored == {
            ("jsonrpc", "text"): 2,
            ("jsonrpc", "structured"): 1,
            ("native", "text"): 2,
            ("native", "structured"): 1,
        }, door
        refused = {
            reason: value(found, "beacon_refusals_total", door="public", reason=reason)
            for reason in ("too_large", "unsupported_media_type", "version", "invalid", "rate_limited", "unauthenticated")
        }
        assert refused == {
            "too_large": 1,
            "unsupported_media_type": 1,
            "version": 1,
            "invalid": 2,
            "rate_limited": 1,
            "unauthenticated": 0,
        }, door
        assert value(found, "beacon_refusals_total", door="operator_http", reason="unauthenticated") == 1
        assert value(found, "beacon_refusals_total", door="operator_socket", reason="unauthenticated") == 0
        assert value(found, "beacon_rpc_errors_total", reason="VERSION_NOT_SUPPORTED") == 1
        assert value(found, "beacon_rpc_errors_total", reason="PARSE_ERROR") == 1
        decisions = {
            outcome: value(found, "beacon_decisions_total", outcome=outcome)
            for outcome in ("accepted", "rejected", "already_decided", "not_found", "failed")
        }
        assert decisions == {
            "accepted": 1, "rejected": 1, "already_decided": 1, "not_found": 1, "failed": 0
        }, door
        assert value(found, "beacon_pending_submissions") == 4
        # Six submissions and four decisions, in however many transactions.
        assert value(found, "beacon_store_batch_size_sum") == 10
        batches = value(found, "beacon_store_batch_size_count")
        assert 1 <= batches <= 10
        assert value(found, "beacon_store_commit_seconds_count") == batches
        assert value(found, "beacon_store_commit_seconds_bucket", le="+Inf") == batches
        assert value(found, "beacon_store_batches_failed_total") == 0
        assert value(found, "beacon_ready") == 1
        assert value(found, "beacon_open_connections", door=door) >= 1, "the scrape's own"
        assert value(found, "beacon_websocket_requests_in_flight") == 0
        assert value(found, "beacon_build_info", version=__import__("beacon").__version__) == 1
        assert value(found, "beacon_process_resident_memory_bytes") > 0
        assert not any(name.startswith("beacon_notify") for name, _ in found)
    # The store's own count agrees with the gauge kept from the batches.
    assert await running.pending.recount() == 4


@pytest_twisted.ensureDeferred
async def test_health_on_the_public_and_metrics_listeners(running: Running) -> None:
    """The public listener and the [metrics] listener answer /healthz and /readyz (the tree is ready once started); the public one serves no /metrics."""
    assert await running.readiness.check() == (True, None)
    public_port = int(running.public.rsplit(":", 1)[1])
    for port in (public_port, running.metrics_port):
        for path in (b"/healthz", b"/readyz"):
            status, headers, body = await http_get(
                TCP4ClientEndpoint(reactor, "127.0.0.1", port, WAIT), path
            )
            assert (status, body) == (200, b'{"status":"ok"}'), (port, path)
    status, _, _ = await http_get(TCP4ClientEndpoint(reactor, "127.0.0.1", public_port, WAIT), b"/metrics")
    assert status == 404


# Counting, on a Clock.


def _monitored(store: Any, clock: Clock, **settings: Any) -> tuple[Monitoring, Any]:
    from beacon.bindings.http import BeaconSite, Container
    from beacon.service import beacon_resources

    config = build_config(settings or {"limits": {"rate": 0}})
    resources = beacon_resources(config, store, clock)
    site = BeaconSite(resources.mount(Container()), clock=clock, **config.limits.site_options())
    monitoring = Monitoring(config, store, clock)  # type: ignore[arg-type]
    monitoring.public(site, resources.websocket)
    return monitoring, site


def scrape(monitoring: Monitoring) -> Samples:
    from prometheus_client import generate_latest

    return samples(generate_latest(monitoring.registry).decode())


def test_two_trees_do_not_mix() -> None:
    """Each tree has a registry of its own: a refusal counted in one is not in the other, and neither uses prometheus_client's global registry."""
    from prometheus_client import REGISTRY

    clock = Clock()
    first, first_site = _monitored(MemoryStore(), clock)
    second, _ = _monitored(MemoryStore(), clock)
    first_site.refusals["too_large"] += 1
    assert value(scrape(first), "beacon_refusals_total", door="public", reason="too_large") == 1
    assert value(scrape(second), "beacon_refusals_total", door="public", reason="too_large") == 0
    assert first.registry is not REGISTRY and second.registry is not first.registry
    assert not any(m.name.startswith("beacon") for m in REGISTRY.collect())


def test_the_public_site_and_its_limits_share_one_count() -> None:
    """A 413 refused by twisted.web's request (the site's count) and a 429 refused by the limits are one door's counts, each once."""
    clock = Clock()
    monitoring, site = _monitored(MemoryStore(), clock)
    assert site.refusals is monitoring.metrics.websocket.limits.refusals
    site.refusals["too_large"] += 1
    monitoring.metrics.websocket.limits.refusals["rate_limited"] += 1
    found = scrape(monitoring)
    assert value(found, "beacon_refusals_total", door="public", reason="too_large") == 1
    assert value(found, "beacon_refusals_total", door="public", reason="rate_limited") == 1


def test_pending_without_batch_reports_is_counted_by_the_store() -> None:
    """Over a store that reports no batches (MemoryStore), the pending gauge is the store's count, read every interval on the clock; no batch metrics are made up."""
    from beacon.store import STATE_COMPLETED
    from store_support import submission

    clock = Clock()
    store = MemoryStore()
    monitoring, _ = _monitored(store, clock)
    assert not IMeasuredStore.providedBy(store)
    monitoring.pending.startService()
    try:
        assert value(scrape(monitoring), "beacon_pending_submissions") == 0
        for n in range(3):
            store.append(submission(n))
        store.decide(submission(0).id, STATE_COMPLETED, 1, None)
        assert value(scrape(monitoring), "beacon_pending_submissions") == 0
        clock.advance(monitoring.pending.interval)
        found = scrape(monitoring)
        assert value(found, "beacon_pending_submissions") == 2
        assert not any(name.startswith("beacon_store_") for name, _ in found)
    finally:
        monitoring.pending.stopService()
    assert clock.getDelayedCalls() == []


def test_websocket_requests_in_flight_and_connections() -> None:
    """The gauges read the WebSocket factory's connections and each one's requests in progress, and the site's open connections."""
    clock = Clock()
    monitoring, site = _monitored(MemoryStore(), clock)

    class Connection:
        def __init__(self, n: int) -> None:
            self.requests_in_flight = n

    factory = monitoring.metrics.websocket
    factory.connections.update({Connection(3), Connection(2)})  # type: ignore[arg-type]
    factory.open_connections = 2
    site.open_connections = 5
    found = scrape(monitoring)
    assert value(found, "beacon_websocket_requests_in_flight") == 5
    assert value(found, "beacon_open_connections", door="websocket") == 2
    assert value(found, "beacon_open_connections", door="public") == 5
    factory.connections.clear()


def test_websocket_refusals_are_counted() -> None:
    """Frames refused by the WebSocket binding and refused upgrades count on the public door, by reason."""
    from beacon.bindings.admission._refusals import Refusals

    refusals = Refusals()
    for reason in ("RATE_LIMITED", "TOO_LARGE", "UNAUTHENTICATED", "PARSE_ERROR", "INVALID_REQUEST", "IN_FLIGHT_LIMIT", "TASK_NOT_FOUND"):
        refusals.error(reason)
    for status in (400, 403, 426, 429, 503, 101):
        refusals.upgrade(status)
    assert dict(refusals) == {
        "rate_limited": 2,
        "too_large": 1,
        "unauthenticated": 1,
        "invalid": 4,
        "in_flight_limit": 1,
        "forbidden_origin": 1,
        "too_many_connections": 1,
    }


def test_notifier_failures() -> None:
    """With notifiers, their failed deliveries and store reads are counted by channel."""
    clock = Clock()
    monitoring, _ = _monitored(MemoryStore(), clock)

    class Channel:
        name = "command"

    class Notifier:
        channel = Channel()
        failed_deliveries = 3
        store_failures = 1

    monitoring.notifier(Notifier())
    found = scrape(monitoring)
    assert value(found, "beacon_notify_failures_total", channel="command", stage="delivery") == 3
    assert value(found, "beacon_notify_failures_total", channel="command", stage="store") == 1


def test_batch_reports_make_the_store_metrics() -> None:
    """Batch reports: submissions by door and kind (an unknown door or kind is 'other', never its value), decisions by outcome, sizes, commit times, failed batches, and the pending gauge moved by each."""
    from store_support import submission

    clock = Clock()
    monitoring, _ = _monitored(MemoryStore(), clock)
    metrics = monitoring.metrics
    metrics.measured = True
    monitoring.pending.value = 10
    odd = replace(submission(9), door="x-peer-chosen", kind="weird")
    native = (submission(1, door="native"), submission(2, door="native"))
    metrics.batch(BatchReport(3, 0.004, True, (*native, odd), ()))
    metrics.batch(
        BatchReport(4, 0.2, True, (), (STATE_COMPLETED, STATE_REJECTED, DECISION_ALREADY_MADE, DECISION_NOT_FOUND))
    )
    metrics.batch(BatchReport(2, 12.0, False, (), (DECISION_FAILED,)))
    found = scrape(monitoring)
    assert value(found, "beacon_submissions_stored_total", door="native", kind="text") == 2
    assert value(found, "beacon_submissions_stored_total", door="other", kind="other") == 1
    assert not any("x-peer-chosen" in str(labels) for _, labels in found)
    assert value(found, "beacon_decisions_total", outcome="accepted") == 1
    assert value(found, "beacon_decisions_total", outcome="failed") == 1
    assert value(found, "beacon_store_batch_size_bucket", le="2.0") == 1
    assert value(found, "beacon_store_batch_size_bucket", le="4.0") == 3
    assert value(found, "beacon_store_batch_size_sum") == 9
    assert value(found, "beacon_store_commit_seconds_bucket", le="0.005") == 1
    assert value(found, "beacon_store_commit_seconds_bucket", le="10.0") == 2
    assert value(found, "beacon_store_commit_seconds_bucket", le="+Inf") == 3
    assert value(found, "beacon_store_batches_failed_total") == 1
    assert value(found, "beacon_pending_submissions") == 10 + 3 - 2


# The store's side.


@pytest_twisted.ensureDeferred
async def test_sqlite_reports_batches_and_counts_undecided(tmp_path: Any) -> None:
    """A SQLite store reports each batch (stored submissions, each decision's outcome, a failed batch) before answering its writes, and counts its undecided submissions."""
    from store_support import submission

    store = SQLiteStore(str(tmp_path / "b.sqlite3"), reactor)
    store.startService()
    reports: list[BatchReport] = []
    stop = store.observe_batches(reports.append)
    try:
        assert IMeasuredStore.providedBy(store)
        first = store.append(submission(1))
        first.addCallback(lambda _: reports.append("answered"))  # type: ignore[arg-type]
        await first
        assert reports[0].stored == (submission(1),) and reports[1] == "answered"
        assert reports[0].committed and reports[0].size == 1 and reports[0].seconds >= 0
        await store.append(submission(2))
        await store.decide(submission(1).id, STATE_COMPLETED, 5, None)
        with pytest.raises(Exception):
            await store.decide(submission(1).id, STATE_REJECTED, 6, None)
        assert await store.decide("0" * 36, STATE_REJECTED, 7, None) is None
        decisions = [d for r in reports if isinstance(r, BatchReport) for d in r.decisions]
        assert decisions == [STATE_COMPLETED, DECISION_ALREADY_MADE, DECISION_NOT_FOUND]
        assert await store.count_undecided() == 1
        stop()
        stop()
        await store.append(submission(3))
        assert len([r for r in reports if isinstance(r, BatchReport)]) == 5
    finally:
        await store.stopService()


@pytest_twisted.ensureDeferred
async def test_a_failed_batch_is_reported(tmp_path: Any, logged_events: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that fails is reported as not committed, its decisions failed."""
    from store_support import submission

    store = SQLiteStore(str(tmp_path / "b.sqlite3"), reactor)
    store.startService()
    reports: list[BatchReport] = []
    store.observe_batches(reports.append)
    try:
        await store.append(submission(1))

        def broken(writes: Any) -> Any:
            raise StoreError("disk full")

        monkeypatch.setattr(store, "_write_batch", broken)
        with pytest.raises(StoreError):
            await store.decide(submission(1).id, STATE_COMPLETED, 5, None)
        assert (reports[-1].committed, reports[-1].decisions, reports[-1].stored) == (False, (DECISION_FAILED,), ())
    finally:
        monkeypatch.undo()
        await store.stopService()


@pytest_twisted.ensureDeferred
async def test_postgresql_counts_undecided(request: pytest.FixtureRequest) -> None:
    """PostgreSQL counts its undecided submissions and reports its batches as SQLite does."""
    from beacon.store import PostgreSQLStore
    from store_support import submission
    from peers.postgres import run_database

    _, url = run_database(request.config).fresh_schema()
    store = PostgreSQLStore(url, reactor)
    store.startService()
    reports: list[BatchReport] = []
    store.observe_batches(reports.append)
    try:
        for n in range(3):
            await store.append(submission(n))
        await store.decide(submission(0).id, STATE_REJECTED, 5, None)
        assert await store.count_undecided() == 2
        assert sum(len(r.stored) for r in reports) == 3
        assert [d for r in reports for d in r.decisions] == [STATE_REJECTED]
    finally:
        await store.stopService()


# Configuration.


def test_metrics_listen_is_off_by_default_and_read_from_the_file() -> None:
    """[metrics] listen: empty by default (no listener); an endpoint string when set."""
    assert build_config().metrics_listen == ""
    config = build_config({"metrics": {"listen": "tcp:9464:interface=127.0.0.1"}})
    assert config.metrics_listen == "tcp:9464:interface=127.0.0.1"


@pytest.mark.parametrize(
    "values, message",
    [
        ({"listen": "nonsense:1"}, "[metrics] listen 'nonsense:1' is not an endpoint"),
        ({"listen": 9464}, "[metrics] listen must be a string"),
        ({"port": 9464}, "unknown key 'port' in [metrics]"),
    ],
)
def test_metrics_config_errors(values: dict[str, Any], message: str) -> None:
    """A [metrics] listen that is not an endpoint string, or another key, is a configuration error."""
    with pytest.raises(ConfigError) as caught:
        build_config({"metrics": values})
    assert message in str(caught.value)


def test_the_metrics_listener_is_in_the_tree_only_when_asked() -> None:
    """makeService adds a 'metrics' Listeners after the operator doors only with [metrics] listen."""
    from twisted.internet.testing import MemoryReactorClock

    def metrics_listeners(config: Any) -> list[Any]:
        return [s for s in makeService(config, MemoryReactorClock()) if isinstance(s, Listeners) and s._what == "metrics"]  # type: ignore[arg-type]

    assert metrics_listeners(build_config(public_url="https://b.example")) == []
    (found,) = metrics_listeners(
        build_config({"metrics": {"listen": "tcp:9464:interface=127.0.0.1"}}, public_url="https://b.example")
    )
    assert found._descriptions == ("tcp:9464:interface=127.0.0.1",)


# The HTTP refusals each site counts, on both HTTP paths.


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "twisted.web"])
def test_site_refusals_on_both_http_paths(direct: bool) -> None:
    """A connection over the cap, a head and a body too slow, a bad framing and a declared body over the cap each count once on the site, whichever path serves them."""
    from twisted.internet.address import IPv4Address
    from twisted.internet.error import ConnectionDone
    from twisted.internet.testing import StringTransport

    from beacon.bindings.http import BeaconSite, Container
    from beacon.service import beacon_resources

    clock = Clock()
    config = build_config({"limits": {"rate": 0, "max_connections_per_source": 3, "max_body": 1024}})
    resources = beacon_resources(config, MemoryStore(), clock)
    site = BeaconSite(
        resources.mount(Container()), clock=clock, direct=direct, **config.limits.site_options()
    )
    opened = []

    def connect(data: bytes = b"") -> StringTransport:
        channel = site.buildProtocol(IPv4Address("TCP", "192.0.2.7", 1000 + len(opened)))
        transport = StringTransport()
        channel.makeConnection(transport)
        opened.append(channel)
        if data:
            channel.dataReceived(data)
        return transport

    slow_head = connect(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    slow_body = connect(
        b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 10\r\n\r\n{"
    )
    framing = connect(b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n")
    assert framing.value().startswith(b"HTTP/1.1 400")
    refused = connect()
    assert refused.value().startswith(b"HTTP/1.1 503"), "the fourth connection of one source"
    for channel in opened[2:]:
        channel.connectionLost(Failure(ConnectionDone()))
    del opened[2:]
    # Its body follows: the direct channel drops it and keeps the connection
    # (no body deadline to miss), twisted.web has closed.
    large = connect(b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000)
    assert large.value().startswith(b"HTTP/1.1 413")
    clock.advance(31)
    assert slow_head.value().startswith(b"HTTP/1.1 408") and slow_body.value().startswith(b"HTTP/1.1 408")
    for channel in opened:
        channel.connectionLost(Failure(ConnectionDone()))
    assert dict(site.refusals) == {
        "request_timeout": 2,
        "invalid": 1,
        "too_many_connections": 1,
        "too_large": 1,
    }
