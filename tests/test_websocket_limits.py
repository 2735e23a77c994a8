"""
One client must not stall or bloat Beacon through the WebSocket door
(issue 15, items 1-5): refusals that cost no parsing, connection caps and
timeouts by default, memory bounded whatever a source sends, a peer that
does not read stops being read, and the log bounded against what the peer
chooses. Every limit is crossed here, on the injected clock; what it costs
in CPU and RSS is measured by bench/ws_abuse.py, not here.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.logger import formatEvent

import beacon.bindings.websocket._protocol as ws
from beacon.bindings.websocket._errors import ID_PREFIX, prefix_id
from beacon.bindings.websocket._log import LOG_TEXT_LIMIT, clip
from beacon.bindings.websocket._protocol import WebSocketA2AProtocol
from beacon.bindings.websocket import WebSocketOptions
from beacon.config import build_config
from turns import run_turns
from websocket_support import (  # noqa: F401 (fixtures)
    TOKEN,
    VERSION,
    Connection,
    HeldHandler,
    Server,
    _sync,
    auth_server,
    call,
    close_servers,
    frame,
    frame_path,
    get,
    opened_on,
    pytest_generate_tests,
    send_message,
    upgrade_request,
)

MIB = 1024 * 1024


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The sizes of the payloads the binding hands to the JSON parser."""
    sizes: list[int] = []
    real = ws.loads

    def counting(payload: bytes) -> Any:
        sizes.append(len(payload))
        return real(payload)

    monkeypatch.setattr(ws, "loads", counting)
    yield sizes


def padded(request_id: Any, size: int, *, tail: bytes = b"") -> bytes:
    """A JSON-RPC request C{size} bytes long: its id first, then padding, then C{tail}."""
    head = json.dumps(send_message("x", request_id)).encode()[:-1] + b',"pad":"'
    body = head + b"a" * (size - len(head) - 2 - len(tail)) + b'"}'
    return body[: len(body) - 2] + tail + body[len(body) - 2 :] if tail else body


def answers(connection: Connection) -> list[dict[str, Any]]:
    return connection.responses()


# Item 1: a refusal costs no more than the limit it enforces.


def test_rate_limited_frame_is_answered_without_parsing(parsed: list[int]) -> None:
    """A frame over the source's rate is refused -31429 with the id from its first bytes; it is never parsed."""
    server = Server(rate=1.0, burst=2)
    connection = server.open()
    assert "result" in connection.rpc(send_message(request_id=1))
    parsed.clear()
    connection.write(frame(0x1, padded("r-1", 60_000)))
    [answer] = answers(connection)
    assert answer["id"] == "r-1"
    assert answer["error"]["code"] == -31429
    assert parsed == []


def test_rate_limited_frame_need_not_be_json(parsed: list[int]) -> None:
    """What follows the id of a rate-limited frame is not looked at: invalid JSON (and UTF-8) there changes nothing."""
    server = Server(rate=1.0, burst=1)
    connection = server.open()
    connection.write(frame(0x1, padded(7, 60_000, tail=b'\xff"]]]')))
    [answer] = answers(connection)
    assert (answer["id"], answer["error"]["code"]) == (7, -31429)
    assert parsed == []
    assert connection.closes() == []


def test_frame_over_max_body_is_dropped_unread(parsed: list[int]) -> None:
    """A frame over max_body is answered -31413 with the id from its first bytes; its payload is neither kept, checked nor parsed, and the connection stays open."""
    server = Server(max_body=1024)
    connection = server.open()
    connection.write(frame(0x1, padded("big", 200_000, tail=b"\xff\xfe not even UTF-8")))
    [answer] = answers(connection)
    assert (answer["id"], answer["error"]["code"]) == ("big", -31413)
    assert parsed == []
    assert connection.closes() == []
    assert "result" in connection.rpc(send_message("small"))


def test_frame_over_max_body_arriving_in_pieces_is_not_held(parsed: list[int]) -> None:
    """A 4 MiB frame arriving 64 KiB at a time is never held: only its first ID_PREFIX bytes are kept."""
    server = Server()
    connection = server.open()
    data = frame(0x1, padded("piecewise", 4 * MIB))
    for at in range(0, len(data), 65536):
        connection.write(data[at : at + 65536])
        assert connection.server.held_input <= ID_PREFIX
    [answer] = answers(connection)
    assert (answer["id"], answer["error"]["code"]) == ("piecewise", -31413)
    assert parsed == []


def test_fragmented_message_over_max_body_is_dropped(parsed: list[int]) -> None:
    """A message of many fragments is kept up to max_body only; past it, it is dropped and refused -31413."""
    server = Server(max_body=1024)
    connection = server.open()
    payload = padded("frag", 40_000)
    pieces = [payload[at : at + 4000] for at in range(0, len(payload), 4000)]
    for index, piece in enumerate(pieces):
        opcode = 0x1 if index == 0 else 0x0
        connection.write(frame(opcode, piece, fin=index == len(pieces) - 1))
        assert connection.server.held_input <= 1024
    [answer] = answers(connection)
    assert (answer["id"], answer["error"]["code"]) == ("frag", -31413)
    assert parsed == []


def test_unauthenticated_frame_is_answered_without_parsing(parsed: list[int]) -> None:
    """Without a credential a frame is refused UNAUTHENTICATED with the id from its first bytes, unparsed; a notification's refusal has a null id."""
    connection = auth_server().open()
    connection.write(frame(0x1, padded("u-1", 60_000, tail=b"]]] not json")))
    [answer] = answers(connection)
    assert (answer["id"], answer["error"]["data"][0]["reason"]) == ("u-1", "UNAUTHENTICATED")
    notification = send_message()
    del notification["id"]
    assert connection.rpc(notification)["id"] is None
    assert parsed == []


def test_a_flood_of_refused_frames_reaches_no_parser_and_others_are_served(parsed: list[int]) -> None:
    """
    While one source floods oversized, rate-limited and unauthenticated
    frames, none of them is parsed, and other sources' requests, over HTTP
    and WebSocket, are all answered.
    """
    server = auth_server(rate=1.0, burst=5, max_body=1024)
    flood = server.open(peer="192.0.2.1")
    other = server.open(VERSION + [("Authorization", "Bearer " + TOKEN)], peer="192.0.2.2")
    big = frame(0x1, padded("big", 8_000))
    small = frame(0x1, padded("small", 900))
    for round_ in range(20):
        flood.write(big + small * 5)
        assert _http_list_tasks(server) == 200
        assert "result" in other.rpc(send_message(request_id=round_))
        server.clock.advance(1)
    refused = answers(flood)
    assert len(refused) == 120
    assert {a["error"]["code"] for a in refused} <= {-31413, -31429, -32600}
    assert len(parsed) == 20  # the other source's requests only


def _http_list_tasks(server: Server) -> int:
    response = _sync.successResultOf(
        server.treq.post(
            "http://beacon.example/a2a/v1",
            data=json.dumps(call("ListTasks", {})).encode(),
            headers={
                "A2A-Version": "1.0",
                "Content-Type": "application/json",
                "Authorization": "Bearer " + TOKEN,
            },
        )
    )
    _sync.successResultOf(response.content())
    return int(response.code)


@pytest.mark.parametrize(
    "prefix, expected",
    [
        (b'{"jsonrpc":"2.0","id":"a","method":"X"}', "a"),
        (b' \r\n{ "id" : 42 , "method":"X"}', 42),
        (b'{"jsonrpc":"2.0","method":"X","params":{"a":[1,{"b":null}]},"id":"late"}', "late"),
        (b'{"jsonrpc":"2.0","method":"X"}', None),  # a notification
        (b'{"jsonrpc":"2.0","id":12', None),  # the number may go on
        (b'{"jsonrpc":"2.0","id":"cut', None),
        (b'{"id":true,"x":1}', None),
        (b'{"id":1.5,"x":1}', None),
        (b'{"id":9007199254740993,"x":1}', None),
        (b'{"id":"' + b"x" * 129 + b'","x":1}', None),
        (b'{"id":"' + b"x" * 128 + b'","x":1}', "x" * 128),
        (b'[{"id":1}]', None),
        (b'{"pad":"' + b"a" * 300 + b'","id":1}', None),  # past the prefix
        (b'{"id":"\xc3\xa9t\xc3\xa9","x":"\xe2\x82', "\u00e9t\u00e9"),  # a code point cut at the end
        (b'{"id":"\xff","x":1}', None),
        (b"", None),
        (b"not json", None),
    ],
)
def test_prefix_id(prefix: bytes, expected: Any) -> None:
    """The id of a frame refused unparsed is a top-level member within its first bytes that JSON-RPC may echo, else null."""
    assert prefix_id(prefix) == expected


@settings(max_examples=200, deadline=None)
@given(
    request_id=st.one_of(st.none(), st.integers(-(2**53), 2**53), st.text(max_size=128)),
    retry_after=st.floats(0, 3600),
)
def test_the_rate_answer_is_the_error_encoded(request_id: Any, retry_after: float) -> None:
    """The -31429 answer made from its parts is, to the byte, the encoded JSON-RPC error."""
    from beacon.bindings.websocket._errors import rate_answer, rate_error
    from beacon.protocol import dumps, failure

    assert rate_answer(request_id, retry_after) == dumps(failure(request_id, rate_error(retry_after)))


_IDS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**60), 2**60), st.floats(allow_nan=False),
    st.text(max_size=140), st.lists(st.integers(), max_size=2),
)


@settings(max_examples=400, deadline=None)
@given(
    members=st.permutations(["jsonrpc", "id", "method"]),
    request_id=_IDS,
    spaces=st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]),
    ascii_only=st.booleans(),
    cut=st.integers(0, 300),
)
def test_prefix_id_reads_plain_prefixes_as_member_by_member(
    members: list[str], request_id: Any, spaces: tuple[str, str], ascii_only: bool, cut: int
) -> None:
    """The quick reading of the commonest prefixes gives what reading them member by member gives."""
    from beacon.bindings.websocket._errors import _read_id

    body = {name: {"jsonrpc": "2.0", "id": request_id, "method": "SendMessage"}[name] for name in members}
    data = json.dumps(body, separators=spaces, ensure_ascii=ascii_only).encode("utf-8")
    for prefix in (data, data[:cut], b" \r\n" + data):
        assert prefix_id(prefix) == _read_id(prefix[:ID_PREFIX]), prefix


# Item 2: connections are capped and timed out by default.


def test_defaults() -> None:
    """The binding's caps and timeouts are on by default."""
    options = WebSocketOptions()
    assert options.max_connections == 1024
    assert options.max_connections_per_source == 16
    assert options.idle_timeout == 300.0
    assert options.frame_timeout == 30.0
    assert build_config().websocket == options
    assert build_config({"limits": {"body_timeout": 5}}).websocket.frame_timeout == 5.0


@pytest.mark.parametrize("mounted", [True, False])
def test_per_source_cap(mounted: bool, logged_events: Any) -> None:
    """A source holds 16 connections by default; the 17th is refused 503 TOO_MANY_CONNECTIONS, another source is not, and a close frees a place."""
    server = Server(mounted=mounted)
    held = [server.open(peer="192.0.2.1") for _ in range(16)]
    assert [c.client.status for c in held] == [101] * 16
    refused = [server.open(peer="192.0.2.1") for _ in range(10)]
    assert {c.client.status for c in refused} == {503}
    error = refused[0].client.refusal()["error"]
    assert (error["status"], error["details"][0]["reason"]) == ("UNAVAILABLE", "TOO_MANY_CONNECTIONS")
    # When to try again: Retry-After, and the RetryInfo detail beside it.
    assert refused[0].client.headers["retry-after"] == ["1"]
    assert error["details"][1] == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}
    assert server.open(peer="192.0.2.2").client.status == 101
    held[0].write(frame(0x8, struct.pack("!H", 1000)))
    assert server.open(peer="192.0.2.1").client.status == 101
    assert len(logged_events.named("ws.refused")) == 1


def test_per_source_cap_counts_the_forwarded_source() -> None:
    """Behind a trusted proxy, the cap counts the X-Forwarded-For source, not the proxy."""
    from beacon.bindings.http import TransportLimits
    from beacon.bindings.admission import RateLimiter, SourceResolver
    import ipaddress

    server = Server(options=WebSocketOptions(max_connections_per_source=2))
    resolver = SourceResolver([ipaddress.ip_network("127.0.0.0/8")])
    server.factory.limits = TransportLimits(
        server.limits.max_body, RateLimiter(0, 1, server.clock), resolver
    )

    def via_proxy(client: str) -> int:
        connection = server.open(VERSION + [("X-Forwarded-For", client)])
        assert connection.client.status is not None
        return connection.client.status

    assert [via_proxy("203.0.113.1") for _ in range(3)] == [101, 101, 503]
    assert via_proxy("203.0.113.2") == 101


def test_process_cap() -> None:
    """Over max_connections an upgrade from any source is refused 503."""
    server = Server(options=WebSocketOptions(max_connections=3))
    statuses = [server.open(peer=f"192.0.2.{n}").client.status for n in range(1, 5)]
    assert statuses == [101, 101, 101, 503]


def test_own_listener_counts_from_accept() -> None:
    """On a listener of the binding's own a connection counts from accept: over the cap it is answered 503 at once, before it sends anything."""
    server = Server(mounted=False, options=WebSocketOptions(max_connections=1))
    silent = server.connect()
    refused = server.connect()
    refused.pump.flush()
    assert refused.client.status == 503
    assert refused.transport.disconnecting
    assert not silent.transport.disconnecting
    silent.write(upgrade_request("/", VERSION))
    assert silent.client.status == 101


def test_idle_timeout_by_default() -> None:
    """A connection with no frame and nothing in progress is closed after 300 s by default."""
    server = Server()
    connection = server.open()
    server.clock.advance(200)
    assert "result" in connection.rpc(send_message())
    server.clock.advance(299)
    assert connection.closes() == []
    server.clock.advance(2)
    assert connection.closes() == [1000]


def _partial(server: Server, data: bytes, cut: int) -> Connection:
    connection = server.open()
    connection.write(data[:cut])
    return connection


@pytest.mark.parametrize(
    "case",
    ["small frame", "frame over max_body", "fragment over max_body", "header"],
)
def test_frame_timeout(case: str) -> None:
    """A frame begun but not complete within body_timeout (30 s) ends the connection with close 1008."""
    server = Server(max_body=1024)
    if case == "small frame":
        data, cut = frame(0x1, json.dumps(send_message()).encode()), 40
    elif case == "frame over max_body":
        data, cut = frame(0x1, padded("x", 100_000)), 50_000
    elif case == "fragment over max_body":
        data, cut = frame(0x1, padded("x", 100_000), fin=False), 50_000
    else:
        data, cut = frame(0x1, b"x" * 70_000), 3
    connection = _partial(server, data, cut)
    server.clock.advance(29.9)
    assert connection.closes() == []
    server.clock.advance(0.2)
    assert connection.closes() == [1008]
    server.clock.advance(1)  # autobahn's close handshake timeout
    assert connection.transport.disconnecting


def test_frames_that_keep_completing_are_not_timed_out() -> None:
    """Frames that straddle reads but keep completing are not cut off; a frame completed in time leaves no timer."""
    server = Server()
    connection = server.open()
    data = b"".join(frame(0x1, json.dumps(send_message(request_id=n)).encode()) for n in range(40))
    step = 97  # never a frame boundary
    for at in range(0, len(data), step):
        connection.write(data[at : at + step])
        server.clock.advance(2)
    assert connection.closes() == []
    assert len(answers(connection)) == 40
    assert len(server.clock.getDelayedCalls()) == 1  # the idle timer only


def test_no_frame_timeout_while_beacon_is_not_reading() -> None:
    """A frame held because the transport is full is not the peer's delay: it is timed again only once Beacon reads again."""
    server = Server()
    connection = server.open()
    connection.server.pauseProducing()
    connection.write(frame(0x1, json.dumps(send_message()).encode())[:40])
    server.clock.advance(60)
    assert connection.closes() == []
    connection.server.resumeProducing()
    server.clock.advance(29)
    assert connection.closes() == []
    server.clock.advance(2)
    assert connection.closes() == [1008]


# Item 3: memory is bounded whatever one source sends.


def test_one_source_holds_at_most_max_body_per_connection() -> None:
    """A source's 16 connections, each in the middle of a 4 MiB frame or a frame just under max_body, hold no more than max_body each; a 17th is refused."""
    server = Server()
    connections = []
    for n in range(16):
        connection = server.open()
        if n % 2:
            connection.write(frame(0x1, padded(n, 4 * MIB))[: MIB])
        else:
            connection.write(frame(0x1, padded(n, 65_000))[:64_000])
        connections.append(connection)
    assert server.open().client.status == 503
    held = [c.server.held_input for c in connections]
    assert max(held[1::2]) <= ID_PREFIX
    assert max(held[0::2]) <= 65_536
    assert sum(held) <= 16 * 65_536


# Item 4: a peer that does not read stops being read.


class UnreadTransport(StringTransport):
    """
    A transport to a peer that never reads: like Twisted's, it pauses its
    producer once 64 KiB wait to be written, and never drains by itself.
    """

    limit = 65536

    def __init__(self) -> None:
        super().__init__(
            hostAddress=IPv4Address("TCP", "127.0.0.1", 8080),
            peerAddress=IPv4Address("TCP", "192.0.2.9", 40000),
        )
        self.full = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if not self.full and self.producer is not None and len(self.value()) > self.limit:
            self.full = True
            self.producer.pauseProducing()

    def drain(self) -> None:
        self.clear()
        self.full = False
        assert self.producer is not None
        self.producer.resumeProducing()


def _stalled_connection(server: Server) -> tuple[WebSocketA2AProtocol, UnreadTransport]:
    transport = UnreadTransport()
    protocol = opened_on(server, transport)
    assert isinstance(protocol, WebSocketA2AProtocol)
    return protocol, transport


def test_a_peer_that_does_not_read_is_not_read() -> None:
    """
    Empty frames from a peer that never reads: once its transport is full
    Beacon stops splitting frames and stops reading the socket; what was
    read waits, no answer piles up, and reading resumes when it drains.
    """
    server = Server(mounted=False, rate=1.0, burst=1)
    protocol, transport = _stalled_connection(server)
    empty = frame(0x1, b"")
    read = empty * 10_922  # one 64 KiB read
    protocol.dataReceived(read)
    run_turns(server.clock)  # Its share of each turn, until the transport is full.
    written = len(transport.value())
    assert transport.producerState == "paused"
    # Answered until the transport was full, and no further.
    answered = transport.value().count(b'"jsonrpc"')
    assert written <= transport.limit + 1024
    assert protocol.held_output == 0
    assert protocol.held_input == len(read) - answered * len(empty)
    # A read that still arrives (TLS delivers what it had) is held, not answered.
    protocol.dataReceived(empty * 100)
    assert len(transport.value()) == written
    assert protocol.held_input == len(read) + 100 * len(empty) - answered * len(empty)
    # A turn of the reactor meanwhile changes nothing.
    assert run_turns(server.clock) == 0
    assert len(transport.value()) == written
    # Once it drains, reading goes on, up to the next time it is full.
    transport.drain()
    run_turns(server.clock)
    assert transport.value().count(b'"jsonrpc"') > 0
    assert transport.full
    assert transport.producerState == "paused"
    assert len(transport.value()) <= transport.limit + 1024


def test_held_answers_are_bounded_by_the_requests_in_progress() -> None:
    """While the transport is full only answers of requests already in progress are held: at most max_in_flight of them."""
    handler = HeldHandler()
    server = Server(handler, mounted=False, options=WebSocketOptions(max_in_flight=4))
    protocol, transport = _stalled_connection(server)
    protocol.dataReceived(b"".join(frame(0x1, json.dumps(get(f"t{n}")).encode()) for n in range(4)))
    run_turns(server.clock)  # All four begin (a turn's share at a time).
    protocol.pauseProducing()
    protocol.dataReceived(frame(0x1, b"") * 1000)
    for n in range(4):
        handler.release(f"t{n}")
    assert len(protocol._pending) == 4
    assert protocol.held_input == 6 * 1000


# Item 5: the log is bounded against what the peer chooses.


def _host_upgrade(host: bytes, path: str = "/a2a/ws") -> bytes:
    return upgrade_request(path, VERSION).replace(b"Host: beacon.example", b"Host: " + host)


@pytest.mark.parametrize("mounted", [True, False])
def test_rate_limited_upgrade_is_refused_before_it_is_parsed(mounted: bool) -> None:
    """An upgrade from a source over its rate is refused 429 even when its head is one autobahn would refuse 400."""
    server = Server(mounted=mounted, rate=1.0, burst=1)
    path = "/a2a/ws" if mounted else "/"
    assert server.open().client.status == 101
    connection = server.connect()
    connection.write(_host_upgrade(b"h" * 15_000 + b":port", path))
    assert connection.client.status == 429


def _peer_text_runs(events: list[dict[str, Any]]) -> int:
    """The longest run of the peer's 'h' padding in any formatted event."""
    texts = [formatEvent(e) + json.dumps(e, default=repr) for e in events]
    return max((len(m) for t in texts for m in re.findall(r"h{10,}", t)), default=0)


@pytest.mark.parametrize("mounted", [True, False])
def test_refused_upgrades_log_little_and_no_long_peer_text(mounted: bool, logged_events: Any) -> None:
    """100 upgrades whose Host autobahn quotes in its refusal: one ws.refused line, then one summary; no event carries more than 200 characters of the peer's text."""
    server = Server(mounted=mounted)
    path = "/a2a/ws" if mounted else "/"
    for _ in range(100):
        connection = server.connect()
        connection.write(_host_upgrade(b"h" * 15_000 + b":port", path))
        assert connection.client.status == 400
    assert len(logged_events.named("ws.refused")) == 1
    assert server.factory.events.counts["ws.refused"] == 100
    server.clock.advance(60)
    [summary] = logged_events.named("ws.summary")
    assert summary["count"] == 99
    assert summary["kind"] == "ws.refused"
    assert _peer_text_runs(logged_events.events) <= LOG_TEXT_LIMIT
    assert server.clock.getDelayedCalls() == []


def test_autobahn_events_are_clipped_and_summarised(logged_events: Any) -> None:
    """What autobahn logs for a connection becomes ws.autobahn events with every value clipped, one line a minute per kind."""
    server = Server()
    connection = server.open()
    for _ in range(5):
        connection.server.log.warn("something about {peer}: {reason}", peer="p", reason="h" * 5000)
    connection.server.log.debug("never {x}", x="h" * 5000)
    [event] = logged_events.named("ws.autobahn")
    assert "...[4800 more characters]" in formatEvent(event)
    assert _peer_text_runs([event]) <= LOG_TEXT_LIMIT
    server.clock.advance(60)
    [summary] = logged_events.named("ws.summary")
    assert summary["count"] == 4


def test_frame_refusals_are_summarised(logged_events: Any) -> None:
    """A flood of oversized frames logs one ws.too_large line a minute, with the rest counted."""
    server = Server(max_body=1024)
    connection = server.open()
    for _ in range(50):
        connection.write(frame(0x1, padded(1, 2000)))
    assert len(answers(connection)) == 50
    assert len(logged_events.named("ws.too_large")) == 1
    server.clock.advance(60)
    assert [e["count"] for e in logged_events.named("ws.summary")] == [49]
    for _ in range(3):
        connection.write(frame(0x1, padded(1, 2000)))
    server.clock.advance(60)
    assert [e["count"] for e in logged_events.named("ws.summary")] == [49, 3]
    assert len(logged_events.named("ws.too_large")) == 1


def test_clip() -> None:
    """Text over the limit is cut and the cut is marked with what was left out."""
    assert clip("short") == "short"
    assert clip("x" * 250) == "x" * 200 + "...[50 more characters]"


def test_stopping_the_factory_logs_what_is_counted(logged_events: Any) -> None:
    """On stop the summary of what was counted is logged at once and no timer is left."""
    server = Server(options=WebSocketOptions(max_connections_per_source=1))
    server.open()
    for _ in range(3):
        server.open()
    timers = len(server.clock.getDelayedCalls())
    server.factory.doStop()
    assert [e["count"] for e in logged_events.named("ws.summary")] == [2]
    assert len(server.clock.getDelayedCalls()) == timers - 1


# The binding's own reading of plain frames answers as autobahn alone does.

_JSON_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@st.composite
def _messages(draw: st.DrawFn) -> list[bytes]:
    """One message as frames: whole or fragmented, text or binary, small or over max_body, with pings between fragments."""
    size = draw(st.sampled_from([0, 50, 400, 600, 3000]))
    request_id = draw(st.one_of(st.integers(0, 99), _JSON_TEXT))
    payload = padded(request_id, max(size, 120)) if draw(st.booleans()) else b'{"x":' + b"1" * size + b"}"
    opcode = draw(st.sampled_from([0x1, 0x1, 0x2]))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(payload) - 1)), max_size=3)))
    pieces = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)])]
    frames = []
    for index, piece in enumerate(pieces):
        frames.append(frame(opcode if index == 0 else 0x0, piece, fin=index == len(pieces) - 1))
        if index < len(pieces) - 1 and draw(st.booleans()):
            frames.append(frame(0x9, b"p" * draw(st.integers(0, 125))))
    return frames


def _answered(data: bytes, writes: list[int], *, direct: bool) -> list[tuple[int, bytes]]:
    server = Server(
        mounted=False, options=WebSocketOptions(max_message=4096), max_body=512, direct=direct
    )
    connection = server.open()
    connection.responses()
    at = 0
    for cut in [*writes, len(data)]:
        connection.write(data[at:cut])
        at = cut
    connection.pump.flush()
    return [
        (opcode, re.sub(rb"[0-9a-v]{36}", b"<id>", payload))
        for opcode, payload in connection.client.frames[connection.read :]
    ]


@settings(max_examples=150, deadline=None)
@given(messages=st.lists(_messages(), min_size=1, max_size=5), data=st.data())
def test_split_frames_answer_as_autobahn_does(messages: list[list[bytes]], data: st.DataObject) -> None:
    """Any mix of whole and fragmented, text and binary, small and oversized messages, with pings, cut anywhere, gets autobahn's answers."""
    stream = b"".join(b"".join(m) for m in messages)
    writes = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=8)))
    assert _answered(stream, writes, direct=True) == _answered(stream, [], direct=False)
