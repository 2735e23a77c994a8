"""
The public HTTP binding over its Resource tree: the agent card's caching and
methods, the JSON-RPC endpoint's transport refusals (body cap, rate limit)
before any JSON is parsed, and the byte-level body cap of L{LimitedRequest}
on a real channel. What JSON-RPC answers over it (methods, errors, version
negotiation by header and query, notifications, extensions, and the
binding's framing of each answer) is the behaviour suite's, run over every
binding: tests/test_behaviour.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from treq.testing import StubTreq
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import Site

from beacon.bindings.http import (
    BeaconSite,
    TransportLimits,
    public_resources,
)
from beacon.bindings.http._direct import DirectChannel
from beacon.bindings.admission import RateLimiter, SourceResolver
from beacon.intake import CardText, PublicPolicy, public_card, schema_validator
from beacon.protocol import Dispatcher
from beacon.testing import MemoryStore

_sync = SynchronousTestCase()
PUBLIC = "https://beacon.example"
CAP = 65536


def send_message(text: str = "hello", request_id: Any = 1) -> dict[str, Any]:
    """A SendMessage request carrying one text part."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]}
        },
    }


def raw_post(body: bytes) -> bytes:
    """A whole SendMessage-style POST to /a2a/v1 carrying C{body}, as bytes on the wire."""
    return (
        b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


class Beacon:
    """A public resource tree over a MemoryStore, a Clock and a StubTreq."""

    def __init__(self, *, rate: float = 0, burst: int = 1, max_body: int = CAP) -> None:
        self.clock = Clock()
        self.clock.advance(1_800_000_000)
        self.store = MemoryStore()
        policy = PublicPolicy(self.store, self.clock, schema_validator())
        self.limits = TransportLimits(
            max_body=max_body,
            rate=RateLimiter(rate, burst, self.clock),
            sources=SourceResolver(),
        )
        self.resources = public_resources(Dispatcher(policy), self.limits)
        self.resources.card.publish(public_card(CardText(), PUBLIC), self.clock.seconds())
        self.root = self.resources.mount(Resource())
        self.treq = StubTreq(self.root)

    def post(self, body: bytes, headers: dict[str, str] | None = None, path: str = "/a2a/v1") -> tuple[Any, bytes]:
        """POST C{body}; return the response and its body."""
        all_headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}
        all_headers.update(headers or {})
        response = _sync.successResultOf(
            self.treq.post("http://beacon.example" + path, data=body, headers=all_headers)
        )
        return response, _sync.successResultOf(response.content())


@pytest.fixture
def beacon() -> Beacon:
    """A Beacon with the rate limit off."""
    return Beacon()


def test_card_is_served_with_cache_validators(beacon: Beacon) -> None:
    """GET of the card answers the prepared JSON with Cache-Control, ETag and Last-Modified."""
    response = _sync.successResultOf(beacon.treq.get(PUBLIC + "/.well-known/agent-card.json"))
    body = _sync.successResultOf(response.content())
    assert response.code == 200
    card = json.loads(body)
    assert card["supportedInterfaces"][0]["url"] == PUBLIC + "/a2a/v1"
    assert response.headers.getRawHeaders("Cache-Control") == ["public, max-age=300"]
    assert response.headers.getRawHeaders("ETag")
    assert response.headers.getRawHeaders("Last-Modified")
    assert response.headers.getRawHeaders("Content-Type") == ["application/json"]


def test_card_urls_ignore_the_host_header(beacon: Beacon) -> None:
    """The card's URLs come from configuration, whatever Host the request names."""
    response = _sync.successResultOf(
        beacon.treq.get("http://evil.example/.well-known/agent-card.json", headers={"Host": "evil.example"})
    )
    body = _sync.successResultOf(response.content())
    assert b"evil.example" not in body
    assert PUBLIC.encode() in body


def test_card_revalidation_answers_304(beacon: Beacon) -> None:
    """A matching If-None-Match or If-Modified-Since gets 304 without a body."""
    first = _sync.successResultOf(beacon.treq.get(PUBLIC + "/.well-known/agent-card.json"))
    etag = first.headers.getRawHeaders("ETag")[0]
    modified = first.headers.getRawHeaders("Last-Modified")[0]
    for headers in ({"If-None-Match": etag}, {"If-Modified-Since": modified}):
        again = _sync.successResultOf(
            beacon.treq.get(PUBLIC + "/.well-known/agent-card.json", headers=headers)
        )
        assert again.code == 304
        assert _sync.successResultOf(again.content()) == b""


def test_card_head_has_no_body(beacon: Beacon) -> None:
    """HEAD on the card answers 200 with the headers and no body."""
    response = _sync.successResultOf(beacon.treq.head(PUBLIC + "/.well-known/agent-card.json"))
    assert response.code == 200
    assert _sync.successResultOf(response.content()) == b""


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("POST", "/.well-known/agent-card.json", "GET, HEAD"),
        ("PUT", "/.well-known/agent-card.json", "GET, HEAD"),
        ("DELETE", "/.well-known/agent-card.json", "GET, HEAD"),
        ("GET", "/a2a/v1", "POST"),
        ("PUT", "/a2a/v1", "POST"),
    ],
)
def test_other_methods_are_405(beacon: Beacon, method: str, path: str, allow: str) -> None:
    """Methods a resource does not answer get 405 with Allow and the JSON error shape."""
    response = _sync.successResultOf(beacon.treq.request(method, PUBLIC + path))
    body = json.loads(_sync.successResultOf(response.content()))
    assert response.code == 405
    assert response.headers.getRawHeaders("Allow") == [allow]
    assert body["error"]["code"] == "method_not_allowed"


def test_unknown_paths_are_404_json(beacon: Beacon) -> None:
    """Paths Beacon does not serve under its containers answer 404 with the JSON shape."""
    response = _sync.successResultOf(beacon.treq.get(PUBLIC + "/a2a/v2"))
    assert response.code == 404
    assert json.loads(_sync.successResultOf(response.content()))["error"]["code"] == "not_found"


def test_body_at_the_cap_is_accepted(beacon: Beacon) -> None:
    """A body of exactly max_body bytes reaches JSON-RPC (the cap is inclusive)."""
    body = json.dumps(send_message()).encode()
    body = body + b" " * (CAP - len(body))
    assert len(body) == CAP
    response, answer = beacon.post(body)
    assert response.code == 200
    assert "result" in json.loads(answer)


def test_body_over_the_cap_is_413(beacon: Beacon, logged_events: Any) -> None:
    """One byte over max_body is HTTP 413 too_large, nothing parsed or stored."""
    body = json.dumps(send_message()).encode()
    body = body + b" " * (CAP + 1 - len(body))
    response, answer = beacon.post(body)
    assert response.code == 413
    assert json.loads(answer)["error"]["code"] == "too_large"
    assert beacon.store.submissions == {}
    assert logged_events.named("http.too_large")


def test_a_flood_of_bodies_over_the_cap_logs_a_line_per_source_and_interval(beacon: Beacon, logged_events: Any) -> None:
    """The limits' own check of the body cap logs through the refusals' throttle: the first at once, the rest of the interval as one line with their number."""
    body = b" " * (CAP + 1)
    for _ in range(20):
        assert beacon.post(body)[0].code == 413
    [first] = logged_events.named("http.too_large")
    assert first["limit"] == CAP and "count" not in first
    beacon.clock.advance(60)
    [_, summary] = logged_events.named("http.too_large")
    assert (summary["count"], summary["limit"], summary["source"]) == (19, CAP, first["source"])
    assert beacon.limits.refusals["too_large"] == 20


def test_rate_limit_refuses_with_retry_after(logged_events: Any) -> None:
    """Past the burst a source gets 429 rate_limited with Retry-After, logged once."""
    beacon = Beacon(rate=1, burst=3)
    body = json.dumps(send_message()).encode()
    codes = [beacon.post(body)[0].code for _ in range(3)]
    assert codes == [200, 200, 200]
    response, answer = beacon.post(body)
    assert response.code == 429
    assert response.headers.getRawHeaders("Retry-After") == ["1"]
    assert json.loads(answer)["error"]["code"] == "rate_limited"
    beacon.post(body)
    assert len(logged_events.named("http.rate_limited")) == 1
    assert len(beacon.store.submissions) == 3


def test_rate_limit_refills_on_the_clock() -> None:
    """After waiting the advertised Retry-After the source is served again."""
    beacon = Beacon(rate=0.5, burst=1)
    body = json.dumps(send_message()).encode()
    assert beacon.post(body)[0].code == 200
    refused = beacon.post(body)[0]
    assert refused.code == 429
    assert refused.headers.getRawHeaders("Retry-After") == ["2"]
    beacon.clock.advance(2)
    assert beacon.post(body)[0].code == 200


def test_rate_limit_applies_before_parsing() -> None:
    """A rate-limited source is refused even when its body is not JSON."""
    beacon = Beacon(rate=1, burst=1)
    assert beacon.post(b"garbage")[0].code == 200
    assert beacon.post(b"garbage")[0].code == 429


def test_embedding_in_an_existing_site() -> None:
    """Beacon's resources mount beside an application's own, which keep working."""
    existing = Resource()
    hello = Resource()
    hello.isLeaf = True
    hello.render_GET = lambda request: b"hello"  # type: ignore[attr-defined]
    existing.putChild(b"hello", hello)
    well_known = Resource()
    existing.putChild(b".well-known", well_known)
    other = Resource()
    other.isLeaf = True
    other.render_GET = lambda request: b"other"  # type: ignore[attr-defined]
    well_known.putChild(b"other.txt", other)

    beacon = Beacon()
    beacon.resources.mount(existing)
    client = StubTreq(existing)
    site_check = Site(existing)
    assert site_check.resource is existing
    for path, expected in [("/hello", b"hello"), ("/.well-known/other.txt", b"other")]:
        response = _sync.successResultOf(client.get(PUBLIC + path))
        assert _sync.successResultOf(response.content()) == expected
    card = _sync.successResultOf(client.get(PUBLIC + "/.well-known/agent-card.json"))
    assert json.loads(_sync.successResultOf(card.content()))["name"] == "Beacon"
    response = _sync.successResultOf(
        client.post(
            PUBLIC + "/a2a/v1",
            data=json.dumps(send_message()).encode(),
            headers={"A2A-Version": "1.0", "Content-Type": "application/json"},
        )
    )
    answer = json.loads(_sync.successResultOf(response.content()))
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


# Byte-level: the body cap holds while the body arrives.


def connect(beacon: Beacon, max_body: int = CAP) -> tuple[Any, StringTransport]:
    """A channel of a BeaconSite over the beacon's tree, on a StringTransport."""
    site = BeaconSite(beacon.root, max_body=max_body, clock=beacon.clock)
    channel = site.buildProtocol(IPv4Address("TCP", "192.0.2.7", 4321))
    transport = StringTransport(peerAddress=IPv4Address("TCP", "192.0.2.7", 4321))
    channel.makeConnection(transport)
    return channel, transport


def status_of(raw: bytes) -> int:
    """The status code of the first response in C{raw}."""
    return int(raw.split(b"\r\n", 1)[0].split(b" ")[1])


def test_declared_length_over_cap_refused_before_the_body(beacon: Beacon, logged_events: Any) -> None:
    """A Content-Length over the cap is answered 413 at once, the connection closed, no body read."""
    channel, transport = connect(beacon)
    channel.dataReceived(
        b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        b"Expect: 100-continue\r\nContent-Length: 10000000\r\n\r\n"
    )
    raw = transport.value()
    assert status_of(raw) == 413
    assert b"100 Continue" not in raw
    assert b'"too_large"' in raw
    assert transport.disconnecting
    assert logged_events.named("http.too_large")
    channel.connectionLost(Failure(ConnectionDone()))


def test_declared_length_at_cap_is_read(beacon: Beacon) -> None:
    """A Content-Length of exactly the cap is read and answered by JSON-RPC."""
    body = json.dumps(send_message()).encode()
    body += b" " * (CAP - len(body))
    channel, transport = connect(beacon)
    channel.dataReceived(raw_post(body))
    raw = transport.value()
    assert status_of(raw) == 200
    assert b"TASK_STATE_SUBMITTED" in raw
    channel.connectionLost(None)


def test_chunked_body_over_cap_is_refused_while_it_arrives(beacon: Beacon) -> None:
    """A chunked body is cut off with 413 as soon as it passes the cap, never buffered beyond it."""
    channel, transport = connect(beacon, max_body=2048)
    channel.dataReceived(
        b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"a" * 1000
    for _ in range(2):
        channel.dataReceived(b"3e8\r\n" + chunk + b"\r\n")
    assert transport.value() == b""
    # On the direct channel, handed over at the chunked request.
    web = channel.http if isinstance(channel, DirectChannel) else channel
    request = web.requests[-1]
    channel.dataReceived(b"3e8\r\n" + chunk + b"\r\n" + b"0\r\n\r\n")
    raw = transport.value()
    assert status_of(raw) == 413
    assert request.content.getvalue() == b""
    assert transport.disconnecting
    assert beacon.store.submissions == {}


def test_chunked_body_within_cap_is_served(beacon: Beacon) -> None:
    """A chunked body under the cap is reassembled and served."""
    body = json.dumps(send_message()).encode()
    channel, transport = connect(beacon)
    channel.dataReceived(
        b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    )
    assert status_of(transport.value()) == 200
    assert len(beacon.store.submissions) == 1
    channel.connectionLost(None)


def test_site_shows_no_tracebacks() -> None:
    """Beacon's Site never renders a traceback to a peer."""
    assert BeaconSite(Resource()).displayTracebacks is False


@pytest.mark.parametrize(
    "path", ["/.well-known/agent-card.json/extra", "/a2a/v1/extra", "/.well-known/agent-card.json/"]
)
def test_leaf_resources_have_no_sub_paths(beacon: Beacon, path: str) -> None:
    """A path below a leaf (the card, the endpoint) is 404, not the leaf again."""
    response = _sync.successResultOf(beacon.treq.get(PUBLIC + path))
    assert response.code == 404


#: The start of a TLS 1.2/1.3 ClientHello: a handshake record, as a client
#: given https:// sends it first to a plain HTTP port.
CLIENT_HELLO = bytes.fromhex("16030100f8010000f40303") + bytes(32)


@pytest.mark.parametrize("after", [b"", raw_post(b"{}")], ids=["first", "after a request"])
def test_a_tls_handshake_is_answered_400_at_once(beacon: Beacon, logged_events: Any, after: bytes) -> None:
    """A TLS ClientHello on the plain port (on a new connection, or after a request) is answered 400 at once and the connection closed, not left to its header timeout: a TLS client learns at once the port is no TLS one."""
    channel, transport = connect(beacon)
    if after:
        channel.dataReceived(after)
        transport.clear()
    channel.dataReceived(CLIENT_HELLO)
    raw = transport.value()
    assert status_of(raw) == 400
    assert raw.endswith(b'"this port speaks plain HTTP, not TLS: use http://"}}')
    assert transport.disconnecting
    assert [e["problem"] for e in logged_events.named("http.bad_request")] == [
        "a TLS handshake on a plain HTTP port"
    ]
    channel.connectionLost(Failure(ConnectionDone()))


def test_head_refusal_has_no_body(beacon: Beacon, logged_events: Any) -> None:
    """HEAD on the endpoint is 405 with an empty body, so Twisted has nothing to eat."""
    response = _sync.successResultOf(beacon.treq.head(PUBLIC + "/a2a/v1"))
    assert response.code == 405
    assert _sync.successResultOf(response.content()) == b""
    assert not [e for e in logged_events.events if "eat it" in str(e.get("log_format", ""))]


def test_access_log_only_when_asked() -> None:
    """BeaconSite writes no per-request access line unless access_log is set."""
    lines: list[str] = []

    class Lines:
        def write(self, line: str) -> None:
            lines.append(line)

    for enabled in (False, True):
        site = BeaconSite(Resource(), access_log=enabled)
        site._logFile = Lines()  # type: ignore[attr-defined]
        site._logDateTime = "now"  # type: ignore[attr-defined]
        site._logFormatter = lambda when, request: f"{when} request"  # type: ignore[attr-defined]
        site.log(object())  # type: ignore[arg-type]
    assert lines == ["now request\n"]


def test_forms_are_never_parsed() -> None:
    """A POST with a form Content-Type is not parsed into args (Beacon speaks JSON)."""
    site = BeaconSite(Resource())
    assert site._parsePOSTFormSubmission is False


# Slow peers: every timeout on the injected clock.


def slow_site(beacon: Beacon) -> tuple[Any, StringTransport]:
    """A channel of a BeaconSite with short timeouts on the beacon's Clock."""
    site = BeaconSite(
        beacon.root, clock=beacon.clock, idle_timeout=60, header_timeout=10, body_timeout=30
    )
    channel = site.buildProtocol(IPv4Address("TCP", "192.0.2.7", 4321))
    transport = StringTransport(peerAddress=IPv4Address("TCP", "192.0.2.7", 4321))
    channel.makeConnection(transport)
    return channel, transport


@pytest.mark.parametrize(
    ("sent", "trickled"),
    [
        (b"POST /a2a/v1 HTTP/1.1\r\n", b"X-Slow: " + b"a" * 20),
        (b"", b"POST /a2a/v1/and/a/long/path HTTP/1.1"),
    ],
    ids=["headers", "request line"],
)
def test_trickled_head_is_cut_off_at_the_header_timeout(
    beacon: Beacon, logged_events: Any, sent: bytes, trickled: bytes
) -> None:
    """
    A peer sending its headers, or its request line itself, one byte a
    second (each byte resets the idle timeout) is answered 408 and cut off
    at the header timeout from the request's first byte.
    """
    channel, transport = slow_site(beacon)
    if sent:
        channel.dataReceived(sent)
    for byte in trickled:
        channel.dataReceived(bytes([byte]))
        beacon.clock.advance(1)
        if transport.disconnecting:
            break
    raw = transport.value()
    assert status_of(raw) == 408
    assert b'"request_timeout"' in raw
    assert transport.disconnecting
    assert logged_events.named("http.request_timeout")
    assert beacon.clock.seconds() - 1_800_000_000 == pytest.approx(10)
    channel.connectionLost(Failure(ConnectionDone()))
    assert [c for c in beacon.clock.getDelayedCalls() if c.active()] == []


def test_line_and_headers_share_the_header_timeout(beacon: Beacon) -> None:
    """The header timeout counts from the request line's first byte, not from its end."""
    channel, transport = slow_site(beacon)
    channel.dataReceived(b"POST /a2a/v1 HTT")
    beacon.clock.advance(6)
    channel.dataReceived(b"P/1.1\r\nHost: x\r\n")
    beacon.clock.advance(3.9)
    assert transport.value() == b""
    beacon.clock.advance(0.1)
    assert status_of(transport.value()) == 408
    assert transport.disconnecting
    channel.connectionLost(Failure(ConnectionDone()))


def test_stalled_body_gets_408_at_the_body_timeout(beacon: Beacon) -> None:
    """A body that stalls is answered 408 at the body timeout; nothing is stored."""
    channel, transport = slow_site(beacon)
    channel.dataReceived(
        b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\""
    )
    beacon.clock.advance(29)
    assert transport.value() == b""
    beacon.clock.advance(1)
    assert status_of(transport.value()) == 408
    assert transport.disconnecting
    assert beacon.store.submissions == {}
    channel.connectionLost(Failure(ConnectionDone()))


def test_slow_headers_then_body_get_each_their_own_timeout(beacon: Beacon) -> None:
    """
    Headers that take 9 s are within their 10 s; the body then has its own
    30 s from the end of the headers, and is served when it comes in time.
    """
    body = json.dumps(send_message()).encode()
    channel, transport = slow_site(beacon)
    channel.dataReceived(b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\n")
    beacon.clock.advance(9)
    channel.dataReceived(
        b"A2A-Version: 1.0\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    beacon.clock.advance(29)
    assert transport.value() == b""
    channel.dataReceived(body)
    assert status_of(transport.value()) == 200
    assert len(beacon.clock.getDelayedCalls()) == 1  # the connection's idle timeout
    channel.connectionLost(Failure(ConnectionDone()))


def test_a_whole_request_schedules_no_deadline(beacon: Beacon) -> None:
    """A request that arrives in one read never sets a deadline timer."""
    body = json.dumps(send_message()).encode()
    channel, transport = slow_site(beacon)
    scheduled: list[Any] = []
    call_later = beacon.clock.callLater
    beacon.clock.callLater = lambda *a, **k: scheduled.append(a) or call_later(*a, **k)  # type: ignore[method-assign]
    channel.dataReceived(raw_post(body))
    assert status_of(transport.value()) == 200
    assert [a for a in scheduled if a[0] in (10, 30)] == []
    channel.connectionLost(Failure(ConnectionDone()))


def test_prompt_request_leaves_no_timer_behind(beacon: Beacon) -> None:
    """A complete request cancels its deadlines; only the idle timeout remains until it closes."""
    body = json.dumps(send_message()).encode()
    channel, transport = slow_site(beacon)
    channel.dataReceived(raw_post(body))
    assert status_of(transport.value()) == 200
    assert len(beacon.clock.getDelayedCalls()) == 1  # the connection's idle timeout
    beacon.clock.advance(60)
    assert transport.disconnecting or transport.disconnected
    channel.connectionLost(Failure(ConnectionDone()))
    assert [c for c in beacon.clock.getDelayedCalls() if c.active()] == []


def test_idle_connection_is_closed(beacon: Beacon) -> None:
    """A connection that never says anything is closed at the idle timeout."""
    channel, transport = slow_site(beacon)
    beacon.clock.advance(59)
    assert not transport.disconnecting
    beacon.clock.advance(1)
    assert transport.disconnecting or transport.disconnected
    channel.connectionLost(Failure(ConnectionDone()))


def test_connection_caps_refuse_the_next_connection_cleanly(beacon: Beacon, logged_events: Any) -> None:
    """Over the per-source or total cap the next connection gets 503 too_many_connections; others are served; closing frees a place."""
    site = BeaconSite(beacon.root, clock=beacon.clock, max_connections=3, max_connections_per_source=2)

    opened: list[Any] = []

    def connect_from(host: str) -> tuple[Any, StringTransport]:
        address = IPv4Address("TCP", host, 1000)
        protocol = site.buildProtocol(address)
        transport = StringTransport(peerAddress=address)
        protocol.makeConnection(transport)
        opened.append(protocol)
        return protocol, transport

    first, _ = connect_from("192.0.2.1")
    connect_from("192.0.2.1")
    _, refused = connect_from("192.0.2.1")
    assert status_of(refused.value()) == 503
    assert b'"too_many_connections"' in refused.value()
    assert refused.disconnecting
    other, other_transport = connect_from("198.51.100.9")
    body = json.dumps(send_message()).encode()
    other.dataReceived(raw_post(body))
    assert status_of(other_transport.value()) == 200
    _, full = connect_from("203.0.113.5")
    assert status_of(full.value()) == 503
    assert site.open_connections == 3
    first.connectionLost(Failure(ConnectionDone()))
    assert site.open_connections == 2
    _, admitted = connect_from("192.0.2.1")
    assert admitted.value() == b""
    assert len(logged_events.named("http.connection_refused")) == 2
    for protocol in opened:
        if protocol is not first:
            protocol.connectionLost(Failure(ConnectionDone()))
    assert site.open_connections == 0


class _Unencodable(PublicPolicy):
    """A policy whose ListTasks answer cannot be written as JSON."""

    def list_tasks(self, context: Any, request: Any) -> dict[str, Any]:
        return {"tasks": object()}


def test_an_answer_that_cannot_be_written_is_logged(logged_events: Any) -> None:
    """
    A JSON-RPC answer that fails on its way out is logged as
    http.response_failed, once, and nothing else goes wrong (no unhandled
    error in a Deferred); the other requests are answered.
    """
    logged_events.expect_failures()
    clock = Clock()
    clock.advance(1_800_000_000)
    limits = TransportLimits(max_body=CAP, rate=RateLimiter(0, 1, clock), sources=SourceResolver())
    policy = _Unencodable(MemoryStore(), clock, schema_validator())
    root = public_resources(Dispatcher(policy), limits).mount(Resource())
    treq = StubTreq(root)
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
    treq.post("http://beacon.example/a2a/v1", data=body.encode(), headers=headers)
    treq.flush()
    (failed,) = logged_events.failures()
    assert failed["log_format"] == "http.response_failed"
    assert failed["log_failure"].check(TypeError)
    response = _sync.successResultOf(
        treq.post("http://beacon.example/a2a/v1", data=json.dumps(send_message()).encode(), headers=headers)
    )
    assert response.code == 200
