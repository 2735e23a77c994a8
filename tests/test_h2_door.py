"""
The gRPC door (C{beacon.bindings.grpc._door}) at the protocol level, in
memory with the raw client of C{tests/h2_raw.py}: gRPC's framing and
refusals, the once-a-second sweep (message waits, deadlines, keepalive,
idle and aged connections, stalled answers), the connection caps, the
peer's GOAWAY and the server's stop. The HTTP/2 framing and its limits are
C{tests/test_h2.py}'s.
"""

from __future__ import annotations

import zlib

from collections.abc import Callable

import pytest
from google.rpc import error_details_pb2

from beacon.bindings.grpc import EXPIRY_INTERVAL, KEEPALIVE_TIMEOUT
from beacon.bindings.grpc._door import grpc_message as encoded_message
from beacon.proto import a2a_pb2
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from tests.h2_raw import (
    CANCEL,
    DEADLINE_EXCEEDED,
    END_STREAM,
    GOAWAY,
    HEADERS,
    INTERNAL,
    INVALID_ARGUMENT,
    NO_ERROR,
    NOT_FOUND,
    OK,
    PEER,
    PING,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    RESOURCE_EXHAUSTED,
    RST_STREAM,
    SETTINGS_INITIAL_WINDOW_SIZE,
    UNIMPLEMENTED,
    UNKNOWN,
    Connection,
    Door,
    conn,  # a fixture
    door,  # a fixture
    make_door,  # a fixture
    call,
    data,
    frame,
    get_task,
    grpc_message,
    headers,
    ping,
    request_fields,
    send_request,
    settings,
    sized_send_request,
    window_update,
)


def connected(door: Door, *settings: tuple[int, int], peer: IPv4Address = PEER) -> Connection:
    connection = door.connect(peer)
    connection.open(*settings)
    return connection


def at(door: Door, seconds: float) -> None:
    """Move the door's clock on to C{seconds}, sweep after sweep."""
    while door.clock.seconds() + EXPIRY_INTERVAL <= seconds:
        door.sweeps()
    assert door.clock.seconds() == seconds


# Request messages.


def test_a_message_over_max_receive_is_refused_from_its_prefix(conn: Connection, door: Door) -> None:
    limit = door.server.door.max_receive
    got = conn.send(headers(1) + data(1, (limit + 1).to_bytes(5, "big"), end=False))
    answer = conn.answer(1, got)
    assert answer.status == RESOURCE_EXHAUSTED
    assert answer.message == f"Received message larger than max ({limit + 1} vs. {limit})"
    # Trailers only, then RST_STREAM NO_ERROR: the request had not ended.
    assert [(f.kind, f.flags & END_STREAM) for f in got] == [(HEADERS, END_STREAM), (RST_STREAM, 0)]
    assert answer.reset == NO_ERROR
    assert door.calls.refusals["too_large"] == 1
    # The body, already on its way, is taken in silence.
    assert conn.send(data(1, b"x" * 1000)) == []
    conn.send(call(3))
    assert conn.answer(3).status == OK


def test_a_message_of_max_receive_is_read(conn: Connection, door: Door) -> None:
    limit = door.server.door.max_receive
    conn.send(call(1, message=sized_send_request(limit)))
    assert conn.answer(1).status == OK


def test_a_compressed_message_without_an_encoding_is_internal(conn: Connection) -> None:
    conn.send(headers(1) + data(1, grpc_message(send_request(), compressed=True)))
    answer = conn.answer(1)
    assert answer.status == INTERNAL
    assert "compressed" in answer.message


def test_an_encoding_not_read_is_unimplemented(conn: Connection) -> None:
    conn.send(call(1, extra=[(b"grpc-encoding", b"snappy")]))
    answer = conn.answer(1)
    assert answer.status == UNIMPLEMENTED
    assert answer.field(b"grpc-accept-encoding") == b"identity, deflate, gzip"
    conn.send(call(3, extra=[(b"grpc-encoding", b"identity")]))
    assert conn.answer(3).status == OK


def _compressed(payload: bytes, encoding: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=31 if encoding == b"gzip" else 15)
    return compressor.compress(payload) + compressor.flush()


@pytest.mark.parametrize("encoding", [b"gzip", b"deflate"])
def test_a_compressed_message_is_read(conn: Connection, encoding: bytes) -> None:
    """gzip, and deflate's zlib format, as grpcio's server read them."""
    fields = request_fields("SendMessage", extra=[(b"grpc-encoding", encoding)])
    squeezed = _compressed(send_request(message_id="m-squeezed"), encoding)
    conn.send(headers(1, fields) + data(1, grpc_message(squeezed, compressed=True)))
    answer = conn.answer(1)
    assert answer.status == OK, answer
    # An uncompressed message under the same header is read too (its flag says so).
    conn.send(headers(3, fields) + data(3, grpc_message(send_request(message_id="m-plain"))))
    assert conn.answer(3).status == OK


def test_a_message_inflating_past_max_receive_is_refused(conn: Connection, door: Door) -> None:
    limit = door.server.door.max_receive
    fields = request_fields("SendMessage", extra=[(b"grpc-encoding", b"gzip")])
    # A bomb: far under the limit on the wire, one byte over it inflated.
    bomb = _compressed(b"\0" * (limit + 1), b"gzip")
    assert len(bomb) < limit // 100
    conn.send(headers(1, fields) + data(1, grpc_message(bomb, compressed=True)))
    answer = conn.answer(1)
    assert answer.status == RESOURCE_EXHAUSTED
    assert answer.message == f"Received message larger than max (over {limit} inflated)"
    assert door.calls.refusals["too_large"] == 1
    # At the line: inflated to exactly the limit, it is read (and refused by
    # protobuf, as any such bytes would be, not by the door's size).
    at_line = _compressed(b"\0" * limit, b"gzip")
    conn.send(headers(3, fields) + data(3, grpc_message(at_line, compressed=True)))
    assert conn.answer(3).status == INVALID_ARGUMENT


@pytest.mark.parametrize(
    "payload",
    [b"not gzip at all", _compressed(b"x" * 100, b"gzip")[:-4], _compressed(b"x", b"gzip") + b"tail"],
    ids=["not-gzip", "cut-short", "bytes-after-it"],
)
def test_a_message_that_does_not_inflate_is_internal(conn: Connection, payload: bytes) -> None:
    fields = request_fields("SendMessage", extra=[(b"grpc-encoding", b"gzip")])
    conn.send(headers(1, fields) + data(1, grpc_message(payload, compressed=True)))
    answer = conn.answer(1)
    assert answer.status == INTERNAL
    assert answer.message == "the message is not one whole gzip stream"


def test_a_flag_byte_other_than_0_or_1_is_internal(conn: Connection) -> None:
    conn.send(headers(1) + data(1, b"\x02" + grpc_message(send_request())[1:]))
    answer = conn.answer(1)
    assert answer.status == INTERNAL
    assert answer.message == "a message whose flag byte is 2 (0 or 1)"


def test_no_message_is_unimplemented(conn: Connection) -> None:
    conn.send(headers(1, end=True))
    answer = conn.answer(1)
    assert answer.status == UNIMPLEMENTED
    assert "exactly one request message" in answer.message
    # A message cut short is no message either.
    conn.send(headers(3) + data(3, grpc_message(send_request())[:-1]))
    assert conn.answer(3).status == UNIMPLEMENTED


def test_two_messages_are_unimplemented_before_the_request_ends(conn: Connection) -> None:
    message = grpc_message(send_request())
    got = conn.send(headers(1) + data(1, message + message[:6], end=False))
    answer = conn.answer(1, got)
    assert answer.status == UNIMPLEMENTED
    assert answer.reset == NO_ERROR


def test_an_undecodable_message_is_invalid_argument(conn: Connection) -> None:
    conn.send(call(1, message=b"\xff\xff\xff"))
    answer = conn.answer(1)
    assert answer.status == INVALID_ARGUMENT
    assert "lf.a2a.v1.SendMessageRequest" in answer.message


# Request headers.


def test_get_is_405(conn: Connection) -> None:
    conn.send(call(1, http_method=b"GET"))
    answer = conn.answer(1)
    assert answer.field(b":status") == b"405"
    assert answer.status == UNIMPLEMENTED


@pytest.mark.parametrize("content_type", [b"application/json", b"text/plain", b""])
def test_a_content_type_not_grpc_is_415(conn: Connection, content_type: bytes) -> None:
    conn.send(call(1, content_type=content_type))
    answer = conn.answer(1)
    assert answer.field(b":status") == b"415"
    assert answer.status == UNKNOWN


def test_grpc_content_types_with_a_suffix_are_taken(conn: Connection) -> None:
    conn.send(call(1, content_type=b"application/grpc+proto"))
    assert conn.answer(1).status == OK


@pytest.mark.parametrize(
    "path",
    [b"/lf.a2a.v1.A2AService/NoSuchMethod", b"/other.Service/SendMessage", b"/", b"SendMessage"],
)
def test_an_unknown_method_is_unimplemented(conn: Connection, path: bytes) -> None:
    conn.send(call(1, path=path))
    answer = conn.answer(1)
    assert answer.field(b":status") == b"200"
    assert answer.status == UNIMPLEMENTED
    assert answer.message.startswith("Method not found: ")


@pytest.mark.parametrize(
    "field",
    [
        (b"X-Upper", b"1"),
        (b"connection", b"keep-alive"),
        (b"keep-alive", b"5"),
        (b"transfer-encoding", b"chunked"),
        (b"upgrade", b"h2c"),
        (b"proxy-connection", b"close"),
    ],
)
def test_an_uppercase_or_connection_header_resets_the_stream(conn: Connection, field: tuple[bytes, bytes]) -> None:
    got = conn.send(call(1, extra=[field]))
    assert [(f.kind, f.stream, f.code) for f in got] == [(RST_STREAM, 1, PROTOCOL_ERROR)]
    conn.send(call(3))
    assert conn.answer(3).status == OK


def test_an_a2a_error_carries_its_status_details(conn: Connection) -> None:
    conn.send(call(1, "GetTask", get_task("no-such-task")))
    answer = conn.answer(1)
    assert answer.status == NOT_FOUND
    details = answer.details
    assert details.code == NOT_FOUND
    assert details.message == answer.message
    info = error_details_pb2.ErrorInfo()
    assert details.details[0].Unpack(info)
    assert (info.reason, info.domain) == ("TASK_NOT_FOUND", "a2a-protocol.org")


def test_a_message_not_ascii_is_percent_encoded(conn: Connection) -> None:
    conn.send(call(1, "GetTask", get_task("unicode")))
    answer = conn.answer(1)
    raw = answer.field(b"grpc-message")
    assert raw is not None
    assert all(0x20 <= b < 0x7F for b in raw)
    assert b"%C3%A2" in raw and b"%25" in raw and b"%C2%AB" in raw
    assert answer.message == "pas de tâche « unicode » (100 % sûr)"
    assert answer.details.message == answer.message
    # Plain ASCII goes as it is.
    assert encoded_message("Deadline Exceeded") == b"Deadline Exceeded"
    assert encoded_message("100%") == b"100%25"


def test_a_response_message_parses(conn: Connection) -> None:
    conn.send(call(1))
    answer = conn.answer(1)
    assert answer.blocks[0] == [(b":status", b"200"), (b"content-type", b"application/grpc")]
    assert answer.blocks[-1] == [(b"grpc-status", b"0")]
    (message,) = answer.messages()
    assert a2a_pb2.SendMessageResponse.FromString(message).task.id


# The sweep: message waits and deadlines.


def test_a_call_whose_message_never_comes_is_cancelled_at_the_bound(make_door: Callable[..., Door]) -> None:
    door = make_door(message_timeout=5.0)
    conn = connected(door)
    conn.send(headers(1))
    assert door.server.waiting == 1
    at(door, 4.0)
    assert conn.answer(1).reset is None
    at(door, 5.0)
    answer = conn.answer(1)
    assert answer.reset == CANCEL and answer.blocks == []
    assert door.calls.refusals["request_timeout"] == 1
    assert door.server.waiting == 0
    assert door.server.door.in_progress == 0
    conn.send(call(3))
    assert conn.answer(3).status == OK


def test_a_message_that_comes_in_time_is_answered(make_door: Callable[..., Door]) -> None:
    door = make_door(message_timeout=5.0)
    conn = connected(door)
    conn.send(headers(1))
    at(door, 4.0)
    conn.send(data(1, grpc_message(send_request())))
    at(door, 10.0)
    assert conn.answer(1).status == OK and conn.answer(1).reset is None
    assert door.calls.refusals["request_timeout"] == 0


def test_a_call_past_its_deadline_is_deadline_exceeded(make_door: Callable[..., Door]) -> None:
    door = make_door(message_timeout=None)
    conn = connected(door)
    conn.send(call(1, "GetTask", get_task("held-1"), extra=[(b"grpc-timeout", b"3S")]))
    assert len(door.policy.held) == 1
    at(door, 2.0)
    assert conn.answer(1).blocks == []
    at(door, 3.0)
    answer = conn.answer(1)
    assert answer.status == DEADLINE_EXCEEDED
    assert answer.message == "Deadline Exceeded"
    assert answer.reset is None  # The request had ended: no RST_STREAM.
    # The late answer goes nowhere.
    door.policy.held[0].callback({"id": "held-1", "status": {"state": "TASK_STATE_SUBMITTED"}})
    assert conn.frames() == []
    assert door.server.door.in_progress == 0


@pytest.mark.parametrize(
    ("timeout", "fired"),
    [(b"100m", 1.0), (b"2000000u", 2.0), (b"1M", 60.0), (b"99999999n", 1.0)],
)
def test_deadlines_in_every_unit(make_door: Callable[..., Door], timeout: bytes, fired: float) -> None:
    door = make_door(message_timeout=None, keepalive=None, idle_timeout=None)
    conn = connected(door)
    conn.send(call(1, "GetTask", get_task("held-1"), extra=[(b"grpc-timeout", timeout)]))
    at(door, fired - 1.0)
    assert conn.answer(1).status is None
    at(door, fired)
    assert conn.answer(1).status == DEADLINE_EXCEEDED


@pytest.mark.parametrize("timeout", [b"3", b"S", b"123456789S", b"5000000000n", b"3s", b"-3S", b"3 S"])
def test_a_malformed_grpc_timeout_sets_no_deadline(make_door: Callable[..., Door], timeout: bytes) -> None:
    door = make_door(message_timeout=None, keepalive=None, idle_timeout=None)
    conn = connected(door)
    conn.send(call(1, "GetTask", get_task("held-1"), extra=[(b"grpc-timeout", timeout)]))
    at(door, 30.0)
    assert conn.answer(1).blocks == []


# The sweep: idle connections, keepalive, age.


def test_an_idle_connection_is_sent_goaway(make_door: Callable[..., Door]) -> None:
    door = make_door(idle_timeout=10.0, keepalive=None)
    conn = connected(door)
    at(door, 9.0)
    assert conn.goaway() is None and not conn.lost
    at(door, 10.0)
    goaway = conn.goaway()
    assert goaway is not None and goaway.code == NO_ERROR and goaway.debug == b""
    assert conn.lost


def test_a_connection_with_a_call_open_is_not_idle(make_door: Callable[..., Door]) -> None:
    door = make_door(idle_timeout=10.0, keepalive=None, message_timeout=None)
    conn = connected(door)
    conn.send(headers(1))
    at(door, 30.0)
    assert not conn.lost
    conn.send(data(1, grpc_message(send_request())))
    assert conn.answer(1).status == OK
    at(door, 39.0)
    assert not conn.lost
    at(door, 40.0)
    assert conn.lost


def test_a_connection_making_calls_is_not_idle(make_door: Callable[..., Door]) -> None:
    """Calls answered between two sweeps keep their connection busy too."""
    door = make_door(idle_timeout=10.0, keepalive=None)
    conn = connected(door)
    stream = 1
    for second in range(1, 40):
        door.advance(0.5)
        if second % 5 == 0:
            conn.send(call(stream))
            assert conn.answer(stream).status == OK
            stream += 2
        door.advance(0.5)
        assert not conn.lost, second
    assert conn.goaway() is None


def test_a_silent_connection_is_pinged_and_kept_if_it_answers(make_door: Callable[..., Door]) -> None:
    door = make_door(keepalive=5.0, idle_timeout=None)
    conn = connected(door)
    conn.frames()
    # Not pinged before it has been silent for keepalive seconds; pinged
    # within one sweep after.
    at(door, 5.0)
    assert conn.frames() == []
    at(door, 5.0 + EXPIRY_INTERVAL)
    (pinged,) = conn.frames()
    assert (pinged.kind, pinged.flags, pinged.stream) == (PING, 0, 0)
    # A wrong ACK is no answer; the right one is.
    conn.send(ping(b"whatever", ack=True))
    at(door, 20.0)
    conn.send(ping(pinged.payload, ack=True))
    at(door, 6.0 + KEEPALIVE_TIMEOUT + 5.0)
    assert not conn.lost
    assert [f.kind for f in conn.frames()] == [PING]  # Silent again: pinged again.


def test_a_ping_unanswered_closes_the_connection(make_door: Callable[..., Door]) -> None:
    door = make_door(keepalive=5.0, idle_timeout=None)
    conn = connected(door)
    at(door, 6.0)
    assert [f.kind for f in conn.frames()][-1:] == [PING]
    # Other frames are no answer to it.
    conn.send(ping(b"other---"))
    at(door, 6.0 + KEEPALIVE_TIMEOUT - 1.0)
    assert not conn.lost
    at(door, 6.0 + KEEPALIVE_TIMEOUT)
    assert conn.lost and conn.transport.disconnected


def test_a_connection_that_talks_is_not_pinged(make_door: Callable[..., Door]) -> None:
    door = make_door(keepalive=5.0, idle_timeout=None)
    conn = connected(door)
    for second in range(30):
        conn.send(call(1 + 2 * second))
        door.sweeps()
    assert PING not in [f.kind for f in conn.received]


def test_an_aged_connection_is_drained_then_closed(make_door: Callable[..., Door]) -> None:
    door = make_door(max_connection_age=10.0, grace=3.0, keepalive=None, idle_timeout=None, message_timeout=None)
    conn = connected(door)
    conn.send(headers(1))
    at(door, 9.0)
    assert conn.goaway() is None
    at(door, 10.0)
    goaway = conn.goaway()
    assert goaway is not None and (goaway.code, goaway.last_stream) == (NO_ERROR, 1)
    assert not conn.lost
    got = conn.send(call(3))
    assert [(f.kind, f.stream, f.code) for f in got] == [(RST_STREAM, 3, REFUSED_STREAM)]
    at(door, 12.0)
    assert not conn.lost
    at(door, 13.0)
    assert conn.lost and conn.transport.disconnected


def test_an_aged_connection_closes_once_its_calls_are_answered(make_door: Callable[..., Door]) -> None:
    door = make_door(max_connection_age=10.0, grace=3.0, keepalive=None, idle_timeout=None, message_timeout=None)
    conn = connected(door)
    idle = connected(door, peer=IPv4Address("TCP", "127.0.0.1", 40001))
    conn.send(headers(1))
    at(door, 10.0)
    assert idle.lost and idle.goaway() is not None
    assert not conn.lost
    conn.send(data(1, grpc_message(send_request())))
    assert conn.answer(1).status == OK
    assert conn.lost and not conn.transport.disconnected


# Answers stalled by the peer's window.


def test_an_answer_stalled_by_a_zero_window_is_reset(make_door: Callable[..., Door]) -> None:
    door = make_door(message_timeout=5.0, keepalive=None, idle_timeout=None)
    conn = connected(door, (SETTINGS_INITIAL_WINDOW_SIZE, 0))
    got = conn.send(call(1))
    assert [f.kind for f in got] == [HEADERS]
    # Reset once it has waited the bound, counted from the sweep that saw it wait.
    at(door, 5.0)
    assert conn.answer(1).reset is None
    at(door, 6.0)
    answer = conn.answer(1)
    assert answer.reset == CANCEL and answer.data == b""
    conn.send(settings_window(1 << 16))
    conn.send(call(3))
    assert conn.answer(3).status == OK


def settings_window(size: int) -> bytes:
    return settings((SETTINGS_INITIAL_WINDOW_SIZE, size))


def test_a_stalled_answer_is_sent_once_the_window_opens(make_door: Callable[..., Door]) -> None:
    door = make_door(message_timeout=5.0, keepalive=None, idle_timeout=None)
    conn = connected(door, (SETTINGS_INITIAL_WINDOW_SIZE, 0))
    conn.send(call(1) + call(3))
    at(door, 5.0)
    # One stream's window, then every stream's through the setting.
    got = conn.send(window_update(1, 1 << 16))
    assert conn.answer(1, got).status == OK
    got = conn.send(settings_window(1 << 16))
    assert conn.answer(3, got).status == OK
    at(door, 20.0)
    assert conn.answer(1).reset is None and conn.answer(3).reset is None


# Connection caps.


def test_connections_over_max_connections_are_closed_at_once(make_door: Callable[..., Door]) -> None:
    door = make_door(max_connections=2)
    first = connected(door, peer=IPv4Address("TCP", "127.0.0.1", 40001))
    second = connected(door, peer=IPv4Address("TCP", "127.0.0.2", 40002))
    third = door.connect(IPv4Address("TCP", "127.0.0.3", 40003))
    assert third.lost and third.transport.disconnected
    assert third.transport.value() == b""
    assert door.calls.refusals["too_many_connections"] == 1
    assert door.calls.connections == 2
    # One closes: there is room again.
    first.send(frame(GOAWAY, 0, 0, b"\0" * 8))
    assert first.lost
    fourth = connected(door, peer=IPv4Address("TCP", "127.0.0.3", 40004))
    fourth.send(call(1))
    second.send(call(1))
    assert fourth.answer(1).status == OK and second.answer(1).status == OK
    assert door.calls.refusals["too_many_connections"] == 1


def test_connections_over_max_connections_per_source_are_closed_at_once(make_door: Callable[..., Door]) -> None:
    door = make_door(max_connections_per_source=2)
    mine = [connected(door, peer=IPv4Address("TCP", "127.0.0.1", 40001 + i)) for i in range(2)]
    beyond = door.connect(IPv4Address("TCP", "127.0.0.1", 40009))
    assert beyond.lost and beyond.transport.disconnected
    assert door.calls.refusals["too_many_connections"] == 1
    other = connected(door, peer=IPv4Address("TCP", "127.0.0.2", 40001))
    other.send(call(1))
    assert other.answer(1).status == OK
    for connection in mine:
        assert not connection.lost


# The peer's GOAWAY.


def test_the_peers_goaway_lets_open_streams_finish(conn: Connection) -> None:
    conn.send(headers(1) + headers(3))
    assert conn.send(frame(GOAWAY, 0, 0, b"\0" * 8)) == []
    assert not conn.lost
    conn.send(data(1, grpc_message(send_request())))
    assert conn.answer(1).status == OK
    assert not conn.lost
    conn.send(data(3, grpc_message(send_request(message_id="m-3"))))
    assert conn.answer(3).status == OK
    assert conn.lost and conn.goaway() is None


def test_the_peers_goaway_without_streams_closes_at_once(conn: Connection) -> None:
    conn.send(frame(GOAWAY, 0, 0, b"\0\0\0\0\0\0\0\x02debug data"))
    assert conn.lost


# stop().


def test_stop_sends_goaway_and_answers_calls_in_flight(door: Door) -> None:
    busy = connected(door)
    idle = connected(door, peer=IPv4Address("TCP", "127.0.0.1", 40001))
    busy.send(headers(1))
    stopped = door.stop()
    for connection in (busy, idle):
        goaway = connection.goaway()
        assert goaway is not None and goaway.code == NO_ERROR
    assert idle.lost and not busy.lost
    assert not stopped.called
    # No new connection.
    late = door.connect(IPv4Address("TCP", "127.0.0.1", 40002))
    assert late.lost and late.transport.value() == b""
    busy.send(data(1, grpc_message(send_request())))
    assert busy.answer(1).status == OK
    assert busy.lost
    assert stopped.called
    assert door.clock.getDelayedCalls() == []


def test_stop_closes_what_is_not_answered_within_grace(door: Door) -> None:
    conn = connected(door)
    conn.send(call(1, "GetTask", get_task("held-1")))
    stopped = door.stop()
    assert conn.goaway() is not None
    door.advance(door.grace - 0.5)
    assert not conn.lost and not stopped.called
    door.advance(0.5)
    assert conn.lost and conn.transport.disconnected
    assert stopped.called
    door.policy.held[0].callback({"id": "held-1", "status": {"state": "TASK_STATE_SUBMITTED"}})
    assert door.clock.getDelayedCalls() == []


def test_stop_without_connections_is_at_once(door: Door) -> None:
    assert door.stop().called
    assert door.clock.getDelayedCalls() == []


def test_open_connections_are_the_doors(door: Door) -> None:
    """What the metrics show as the grpc door's open connections."""
    assert door.calls.open_connections == 0
    first = door.connect()
    first.open()
    second = door.connect()
    second.open()
    assert door.calls.open_connections == 2
    first.protocol.connectionLost(Failure(ConnectionDone()))
    first.lost = True
    assert door.calls.open_connections == 1
