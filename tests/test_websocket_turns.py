"""
Fair turns on the WebSocket door (L{beacon.bindings.admission._turns}): one
connection works through at most C{TURN_MESSAGES} messages and
C{TURN_BYTES} bytes of frames in one turn of the reactor, then stops
reading until a later turn; what it read meanwhile is kept, answered in
order. Every test runs with plain frames and with autobahn reading every
frame. The reactor's turns are the server's L{Clock}: C{advance(0)} is one
turn.
"""

from __future__ import annotations

import json

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from beacon.bindings.admission import TURN_BYTES, TURN_MESSAGES
from beacon.bindings.websocket import WebSocketOptions
from turns import TurnClock, due, run_turns
from websocket_support import (  # noqa: F401 (fixtures)
    Server,
    close_servers,
    frame,
    frame_path,
    opened_on,
    pytest_generate_tests,
)


def opened(server: Server, peer: str = "192.0.2.9") -> tuple[Any, StringTransport]:
    """An upgraded connection of the binding's own listener, on a StringTransport."""
    transport = StringTransport(
        hostAddress=IPv4Address("TCP", "127.0.0.1", 8080),
        peerAddress=IPv4Address("TCP", peer, 40000),
    )
    return opened_on(server, transport, peer), transport


def answered(transport: StringTransport) -> int:
    return transport.value().count(b'"jsonrpc"')


def refusal(n: int) -> bytes:
    """A request frame a rate-limited source sends: answered -31429."""
    body = {"jsonrpc": "2.0", "id": n, "method": "GetTask", "params": {"id": "t"}}
    return frame(0x1, json.dumps(body).encode())


def test_a_connection_works_through_a_turns_share_then_yields() -> None:
    """Twenty frames in one read: TURN_MESSAGES answered a turn, reading paused between, all in order."""
    server = Server(mounted=False, rate=1.0, burst=1, clock=TurnClock())
    protocol, transport = opened(server)
    protocol.dataReceived(b"".join(refusal(n) for n in range(20)))
    assert answered(transport) == TURN_MESSAGES
    assert transport.producerState == "paused"
    seen = [answered(transport)]
    while due(server.clock):
        server.clock.advance(0)
        seen.append(answered(transport))
    assert seen == [min(20, TURN_MESSAGES * n) for n in range(1, len(seen) + 1)]
    assert seen[-1] == 20
    assert transport.producerState == "producing"
    ids = [json.loads(line)["id"] for line in _payloads(transport.value())]
    assert ids == list(range(20))


def test_another_connection_is_served_between_turns() -> None:
    """While one connection floods 1,000 frames, another's message is answered in its own turn."""
    server = Server(mounted=False, rate=1.0, burst=1, clock=TurnClock())
    flood, flooded = opened(server, "192.0.2.9")
    flood.dataReceived(b"".join(refusal(n) for n in range(1000)))
    assert answered(flooded) == TURN_MESSAGES
    victim, served = opened(server, "192.0.2.10")
    victim.dataReceived(refusal(1))
    assert answered(served) == 1
    assert answered(flooded) == TURN_MESSAGES
    run_turns(server.clock)
    assert answered(flooded) == 1000


def test_a_large_frame_is_read_a_share_of_bytes_a_turn() -> None:
    """
    A frame over max_body (refused unread) arrives in one 64 KiB read: its
    bytes go to the parser TURN_BYTES a turn, and its refusal comes once
    they are all read.
    """
    server = Server(
        mounted=False, max_body=1024, options=WebSocketOptions(max_message=1 << 20), clock=TurnClock()
    )
    protocol, transport = opened(server)
    big = frame(0x1, b" " * 60000)
    protocol.dataReceived(big[:65536])
    turns = run_turns(server.clock)
    assert turns >= len(big) // TURN_BYTES - 1
    assert answered(transport) == 1
    assert b"-31413" in transport.value()


def _payloads(data: bytes) -> list[bytes]:
    """The payloads of a server's (unmasked) frames."""
    found = []
    at = 0
    while at < len(data):
        length = data[at + 1] & 0x7F
        head = 2
        if length == 126:
            length = int.from_bytes(data[at + 2 : at + 4], "big")
            head = 4
        found.append(data[at + head : at + head + length])
        at += head + length
    return found
