"""
The WebSocket binding's refusals, as the metrics count them (issue 20): each
refused frame and upgrade counts once on the public limits' L{Refusals}, by
reason, on both frame paths (plain frames, autobahn's), and the requests in
progress on a connection are what the in-flight gauge reads.
"""

from __future__ import annotations

import json

from beacon.bindings.websocket import WebSocketOptions
from websocket_support import (  # noqa: F401 (fixtures)
    HeldHandler,
    Server,
    auth_server,
    close_servers,
    frame,
    frame_path,
    get,
    pytest_generate_tests,
    send_message,
)


def refused(server: Server) -> dict[str, int]:
    return {reason: count for reason, count in server.limits.refusals.items() if count}


def test_refused_frames_count_by_reason() -> None:
    """Too large, binary, not JSON, a batch, rate limited: one count each, by reason; answered frames count nothing."""
    server = Server(max_body=1024, rate=1.0, burst=6)
    connection = server.open()
    assert "result" in connection.rpc(send_message())
    assert refused(server) == {}
    connection.write(frame(0x1, b'{"id": 1, "x": "' + b"a" * 2000 + b'"}'))
    connection.write(frame(0x2, b"\x00\x01"))
    connection.write(frame(0x1, b"{nope"))
    connection.write(frame(0x1, b"[]"))
    connection.write(frame(0x1, json.dumps(send_message()).encode()))
    assert refused(server) == {"too_large": 1, "invalid": 3, "rate_limited": 1}
    codes = [r["error"]["code"] for r in connection.responses()]
    assert sorted(codes) == sorted([-31413, -32700, -32700, -32600, -31429])


def test_unauthenticated_frames_count() -> None:
    """A frame without a good credential counts as unauthenticated."""
    server = auth_server()
    connection = server.open()
    connection.rpc(send_message())
    assert refused(server) == {"unauthenticated": 1}


def test_refused_upgrades_count_by_status() -> None:
    """Refused upgrades: a wrong WebSocket version is invalid, over the source's rate is rate_limited, over a connection cap too_many_connections."""
    server = Server(options=WebSocketOptions(max_connections=1), rate=1.0, burst=2)
    assert server.open(version="8").client.status == 426
    assert server.open().client.status == 101
    assert server.open(peer="192.0.2.9").client.status == 503
    assert refused(server) == {"invalid": 1, "too_many_connections": 1}
    assert server.open().client.status == 429
    assert refused(server)["rate_limited"] == 1


def test_a_frame_timeout_counts() -> None:
    """A frame begun and not finished within the frame timeout counts as request_timeout."""
    server = Server()
    connection = server.open()
    connection.write(frame(0x1, json.dumps(send_message()).encode())[:10])
    server.clock.advance(31)
    assert connection.closes() == [1008]
    assert refused(server) == {"request_timeout": 1}


def test_requests_in_flight() -> None:
    """A connection's requests in flight count while they are answered and stop when they are; over max_in_flight the refusal counts."""
    handler = HeldHandler()
    server = Server(handler, options=WebSocketOptions(max_in_flight=2))
    connection = server.open()
    for n in range(3):
        connection.send(get(f"task-{n}", request_id=n))
    protocol = connection.server
    assert protocol.requests_in_flight == 2
    assert refused(server) == {"in_flight_limit": 1}
    handler.release("task-0")
    connection.pump.flush()
    assert protocol.requests_in_flight == 1
    handler.release("task-1")
    connection.pump.flush()
    assert protocol.requests_in_flight == 0
