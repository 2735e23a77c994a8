"""
Fair turns on the HTTP doors (L{beacon.bindings.admission._turns}): a connection
begins at most C{TURN_REQUESTS} requests in one turn of the reactor, then
stops reading until a later turn, on the direct channel and on twisted.web's
path alike; every other connection is served in between; a connection alone
gets longer turns once nobody else has read for C{QUIET_SECONDS}, and short
ones again as soon as anyone does. The reactor's turns are a L{Clock}'s:
C{advance(0)} is one turn.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from beacon.bindings.http import BeaconSite, Container
from beacon.bindings.admission import MAX_GROWTH, QUIET_SECONDS, TURN_REQUESTS, Ledger, Turns
from beacon.config import build_config
from beacon.service import beacon_resources
from beacon.testing import MemoryStore
from test_direct import lose_connections  # noqa: F401 (fixture: connections lost at the end)
from turns import TurnClock, due, run_turns

BOTH = pytest.mark.parametrize("direct", [True, False], ids=["direct", "twisted.web"])
CARD = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n"
RATE_LIMITED = (
    b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\n\r\n{}"
)


class Beacon:
    """Beacon's public tree on one BeaconSite, its turns on a Clock."""

    def __init__(self, direct: bool, **limits: Any) -> None:
        self.clock = TurnClock()
        self.clock.advance(1_800_000_000)
        config = build_config({"limits": {"rate": 0, **limits}})
        resources = beacon_resources(config, MemoryStore(), self.clock)
        resources.publish("http://127.0.0.1:8080")
        self.site = BeaconSite(resources.mount(Container()), clock=self.clock, direct=direct)
        self._port = 40000

    def connect(self, host: str = "192.0.2.1") -> tuple[Any, StringTransport]:
        self._port += 1
        peer = IPv4Address("TCP", host, self._port)
        channel = self.site.buildProtocol(peer)
        transport = StringTransport(peerAddress=peer)
        channel.makeConnection(transport)
        from test_direct import _opened

        _opened[id(channel)] = channel, transport
        return channel, transport


def answers(transport: StringTransport) -> int:
    return transport.value().count(b"HTTP/1.1 ")


@BOTH
def test_a_connection_begins_a_turns_share_then_yields(direct: bool) -> None:
    """
    Twenty pipelined requests in one read: TURN_REQUESTS are answered in
    that turn, and the connection stops reading; each later turn answers as
    many more; once all are answered it reads again.
    """
    beacon = Beacon(direct)
    channel, transport = beacon.connect()
    channel.dataReceived(CARD * 20)
    assert answers(transport) == TURN_REQUESTS
    assert transport.producerState == "paused"
    assert due(beacon.clock)
    seen = [answers(transport)]
    while due(beacon.clock):
        beacon.clock.advance(0)
        seen.append(answers(transport))
    assert seen == [min(20, TURN_REQUESTS * n) for n in range(1, len(seen) + 1)]
    assert seen[-1] == 20 and seen[-2] < 20
    assert transport.producerState == "producing"
    assert transport.value().count(b"HTTP/1.1 200 OK") == 20


@BOTH
def test_another_connection_is_served_between_turns(direct: bool) -> None:
    """
    While one connection works through a read of 600 pipelined refusals a
    share a turn, another connection's request is answered at once, in its
    own turn, not after the 600.
    """
    beacon = Beacon(direct, rate=1, burst=1)
    flood, flooded = beacon.connect("192.0.2.1")
    flood.dataReceived(RATE_LIMITED * 600)
    assert answers(flooded) == TURN_REQUESTS
    victim, served = beacon.connect("192.0.2.2")
    victim.dataReceived(CARD)
    assert served.value().startswith(b"HTTP/1.1 200 OK")
    assert answers(flooded) == TURN_REQUESTS
    assert run_turns(beacon.clock) == -(-600 // TURN_REQUESTS) - 1
    assert answers(flooded) == 600
    assert flooded.value().count(b"HTTP/1.1 429 ") == 599


@BOTH
def test_what_a_yielded_connection_holds_is_one_read(direct: bool) -> None:
    """
    A connection that has yielded reads nothing more (its transport is
    paused); a read that arrives anyway (TLS hands over what it had) is kept
    and answered in later turns, in order.
    """
    beacon = Beacon(direct)
    channel, transport = beacon.connect()
    channel.dataReceived(CARD * 10)
    channel.dataReceived(CARD.replace(b"agent-card", b"nowhere") * 2)
    assert answers(transport) == TURN_REQUESTS
    run_turns(beacon.clock)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", transport.value())
    assert statuses == [b"200"] * 10 + [b"404"] * 2


def test_turns_grow_while_alone_and_shrink_when_anyone_reads() -> None:
    """
    With nobody else reading for QUIET_SECONDS, each yield doubles the
    turn, up to MAX_GROWTH times; the first read of another connection on
    the same ledger brings it back to TURN_REQUESTS.
    """
    clock = TurnClock()
    ledger = Ledger()
    resumed: list[int] = []
    turns = Turns(clock, TURN_REQUESTS, lambda: resumed.append(turns.budget), ledger)
    other = Turns(clock, TURN_REQUESTS, lambda: None, ledger)
    turns.start()
    budgets = []
    for _ in range(8):
        turns.pause()
        clock.advance(QUIET_SECONDS)
        budgets.append(turns.budget)
    top = TURN_REQUESTS * MAX_GROWTH
    assert budgets == [min(TURN_REQUESTS << n, top) for n in range(1, 9)]
    assert max(budgets) == TURN_REQUESTS * MAX_GROWTH
    other.start()  # Someone else reads.
    turns.start()
    assert turns.budget == TURN_REQUESTS
    # Another read within QUIET_SECONDS of that one: still short turns.
    turns.pause()
    clock.advance(QUIET_SECONDS / 2)
    assert turns.budget == TURN_REQUESTS
    turns.stop()


def test_turns_stay_short_while_others_read() -> None:
    """A connection that sees another's read at each look never grows, however long it runs."""
    clock = TurnClock()
    ledger = Ledger()
    turns = Turns(clock, TURN_REQUESTS, lambda: None, ledger)
    other = Turns(clock, TURN_REQUESTS, lambda: None, ledger)
    for _ in range(50):
        turns.start()
        turns.pause()
        other.start()
        clock.advance(QUIET_SECONDS)
        assert turns.budget == TURN_REQUESTS


@BOTH
def test_a_lone_pipelining_connection_gets_longer_turns(direct: bool) -> None:
    """
    A client pipelining alone: once the clock has passed QUIET_SECONDS,
    its turns answer TURN_REQUESTS * MAX_GROWTH requests; another
    connection's request shortens them again at the next look.
    """
    beacon = Beacon(direct)
    channel, transport = beacon.connect()
    channel.dataReceived(CARD * 1000)
    assert answers(transport) == TURN_REQUESTS
    beacon.clock.advance(QUIET_SECONDS * 2)
    done = [answers(transport)]
    assert done == [TURN_REQUESTS + 2 * TURN_REQUESTS]
    while due(beacon.clock) and len(done) < 8:
        beacon.clock.advance(0)
        done.append(answers(transport))
    steps = [b - a for a, b in zip(done, done[1:])]
    assert steps[:4] == [min(TURN_REQUESTS << n, TURN_REQUESTS * MAX_GROWTH) for n in (2, 3, 4, 5)], steps
    assert max(steps) == TURN_REQUESTS * MAX_GROWTH
    victim, _ = beacon.connect("192.0.2.2")
    victim.dataReceived(CARD)
    before = answers(transport)
    beacon.clock.advance(0)
    assert answers(transport) - before == TURN_REQUESTS
    run_turns(beacon.clock)
    assert answers(transport) == 1000


def test_the_doors_of_a_beacon_share_one_ledger(tmp_path: Any) -> None:
    """makeService gives the public site, the WebSocket binding and the operator doors one ledger."""
    from twisted.internet import reactor

    from beacon.bindings.http import BeaconSite as Site
    from beacon.bindings.operator import PeerCheckedFactory
    from beacon.bindings.websocket import WebSocketService
    from beacon.listeners import Listeners
    from beacon.service import makeService

    config = build_config(
        {
            "server": {"data": str(tmp_path), "http": ["tcp:0:interface=127.0.0.1"]},
            "operator": {"http": "tcp:0:interface=127.0.0.1"},
        }
    )
    service = makeService(config, reactor)
    factories = [s._factory for s in service if isinstance(s, Listeners)]  # noqa: SLF001
    sites = [f for f in factories if isinstance(f, Site)]
    sites += [
        s._factory.wrappedFactory  # noqa: SLF001
        for s in service
        if isinstance(getattr(s, "_factory", None), PeerCheckedFactory)
    ]
    websocket = next(s for s in service if isinstance(s, WebSocketService))
    ledgers = {id(site.ledger) for site in sites} | {id(websocket.factory.ledger)}
    assert len(sites) == 3
    assert len(ledgers) == 1
