"""
The gRPC door's HTTP/2 (C{beacon.bindings.grpc._h2}) held to RFC 9113 and
to its own limits, byte for byte, in memory: a raw client
(C{tests/h2_raw.py}) on a L{StringTransport}, the clock a L{Clock}. Each
limit is crossed, and met at its line. The gRPC side and the sweep are
C{tests/test_h2_door.py}'s.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest

from beacon.bindings.admission import TURN_REQUESTS
from beacon.bindings.grpc import MAX_STREAMS
from beacon.bindings.grpc import _h2 as h2
from beacon.bindings.grpc._hpack import integer
from beacon.proto import a2a_pb2
from tests.h2_raw import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    INVALID_ARGUMENT,
    OK,
    PADDED,
    PING,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RESOURCE_EXHAUSTED,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    Connection,
    Door,
    conn,  # a fixture
    door,  # a fixture
    make_door,  # a fixture
    Frame,
    block,
    call,
    data,
    frame,
    get_task,
    grpc_message,
    headers,
    list_size,
    ping,
    request_fields,
    settings,
    sized_send_request,
    window_update,
)


def ended(connection: Connection, frames: list[Frame], code: int) -> Frame:
    """The connection was ended with a GOAWAY of C{code}, then closed."""
    goaway = connection.goaway(frames)
    assert goaway is not None, frames
    assert goaway.code == code, (goaway, goaway.debug)
    assert connection.lost
    # Counted among the door's refusals (and logged, throttled).
    assert connection.door.calls.refusals["invalid"] >= 1
    return goaway


def test_a_broken_connection_is_logged_with_its_reason(door: Door, logged_events: Any) -> None:
    connection = door.connect()
    connection.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert connection.lost
    (event,) = logged_events.named("a2a.grpc.protocol_error")
    assert event["why"] == "not the HTTP/2 client preface"
    assert event["source"] == "127.0.0.1"
    assert door.calls.refusals["invalid"] == 1


def alive(connection: Connection, stream: int) -> None:
    """The connection still answers a call, on C{stream}."""
    assert not connection.lost
    connection.send(call(stream))
    answer = connection.answer(stream)
    assert answer.status == OK, answer


# The preface and the first frame.


@pytest.mark.parametrize(
    "opening",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSX\r\n\r\n",
        # No preface at all: the client's SETTINGS straight away.
        settings(),
    ],
)
def test_a_wrong_or_missing_preface_ends_the_connection(door: Door, opening: bytes) -> None:
    connection = door.connect()
    connection.frames()
    goaway = ended(connection, connection.send(opening), PROTOCOL_ERROR)
    assert goaway.last_stream == 0
    assert b"preface" in goaway.debug


def test_a_preface_in_pieces_is_waited_for(door: Door) -> None:
    connection = door.connect()
    connection.frames()
    for i in range(0, len(h2.PREFACE), 5):
        assert connection.send(h2.PREFACE[i : i + 5]) == []
    connection.send(settings())
    assert not connection.lost
    alive(connection, 1)


@pytest.mark.parametrize(
    "first", [ping(), frame(SETTINGS, ACK, 0), headers(1), window_update(0, 1)]
)
def test_the_first_frame_must_be_settings(door: Door, first: bytes) -> None:
    connection = door.connect()
    connection.frames()
    ended(connection, connection.send(h2.PREFACE + first), PROTOCOL_ERROR)


# Frame sizes.


def test_a_frame_over_16384_bytes_ends_the_connection(conn: Connection) -> None:
    conn.send(headers(1))
    # Its head alone is enough: the payload is never waited for.
    head = frame(DATA, 0, 1, b"\0" * (h2.MAX_FRAME + 1))[:9]
    goaway = ended(conn, conn.send(head), FRAME_SIZE_ERROR)
    assert goaway.last_stream == 1


def test_a_frame_of_16384_bytes_is_read(make_door: Callable[..., Door]) -> None:
    door = make_door(max_receive=20000)
    conn = door.connect()
    conn.open()
    message = grpc_message(sized_send_request(20000))
    first = frame(DATA, 0, 1, message[: h2.MAX_FRAME])
    assert len(first) == 9 + h2.MAX_FRAME
    conn.send(headers(1) + first + frame(DATA, END_STREAM, 1, message[h2.MAX_FRAME :]))
    # An unknown frame type of the largest size is read and ignored.
    conn.send(frame(0xFA, 0, 0, b"\0" * h2.MAX_FRAME))
    assert conn.answer(1).status == OK
    alive(conn, 3)


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(frame(PING, 0, 0, b"1234567"), id="ping-7"),
        pytest.param(frame(PING, 0, 0, b"123456789"), id="ping-9"),
        pytest.param(frame(PING, ACK, 0, b"1234"), id="ping-ack-4"),
        pytest.param(frame(SETTINGS, 0, 0, b"\0" * 5), id="settings-5"),
        pytest.param(frame(SETTINGS, ACK, 0, b"\0" * 6), id="settings-ack-6"),
        pytest.param(frame(WINDOW_UPDATE, 0, 0, b"\0\0\1"), id="window-update-3"),
        pytest.param(frame(WINDOW_UPDATE, 0, 1, b"\0\0\0\0\1"), id="window-update-5"),
        pytest.param(frame(RST_STREAM, 0, 1, b"\0\0\0\0\0"), id="rst-stream-5"),
        pytest.param(frame(GOAWAY, 0, 0, b"\0" * 7), id="goaway-7"),
    ],
)
def test_a_control_frame_of_a_wrong_length_ends_the_connection(conn: Connection, sent: bytes) -> None:
    conn.send(headers(1))
    ended(conn, conn.send(sent), FRAME_SIZE_ERROR)


def test_a_priority_frame_of_a_wrong_length_resets_its_stream(conn: Connection) -> None:
    conn.send(headers(1))
    got = conn.send(frame(PRIORITY, 0, 1, b"\0" * 4))
    assert conn.answer(1, got).reset == FRAME_SIZE_ERROR
    alive(conn, 3)


def test_control_frames_of_their_length_are_answered(conn: Connection) -> None:
    got = conn.send(ping(b"abcdefgh") + settings((SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)))
    assert [(f.kind, f.flags, f.payload) for f in got] == [
        (PING, ACK, b"abcdefgh"),
        (SETTINGS, ACK, b""),
    ]
    # A PING's ACK and a SETTINGS ACK are taken in silence.
    assert conn.send(ping(b"abcdefgh", ack=True) + frame(SETTINGS, ACK, 0)) == []
    alive(conn, 1)


# Frames on the wrong stream.


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(frame(DATA, END_STREAM, 0, b"x"), id="data-on-0"),
        pytest.param(frame(HEADERS, END_HEADERS, 0, block(request_fields())), id="headers-on-0"),
        pytest.param(frame(SETTINGS, 0, 1), id="settings-on-1"),
        pytest.param(frame(PING, 0, 1, b"12345678"), id="ping-on-1"),
        pytest.param(frame(RST_STREAM, 0, 0, b"\0\0\0\0"), id="rst-stream-on-0"),
        pytest.param(frame(GOAWAY, 0, 1, b"\0" * 8), id="goaway-on-1"),
        pytest.param(frame(PRIORITY, 0, 0, b"\0\0\0\1\0"), id="priority-on-0"),
        pytest.param(frame(DATA, END_STREAM, 5, b"x"), id="data-on-idle"),
        pytest.param(window_update(5, 1), id="window-update-on-idle"),
        pytest.param(frame(RST_STREAM, 0, 5, b"\0\0\0\0"), id="rst-stream-on-idle"),
        pytest.param(headers(4), id="even-stream"),
        pytest.param(frame(PUSH_PROMISE, END_HEADERS, 1, b"\0\0\0\2"), id="push-promise"),
    ],
)
def test_a_frame_on_the_wrong_stream_ends_the_connection(conn: Connection, sent: bytes) -> None:
    conn.send(headers(1))
    goaway = ended(conn, conn.send(sent), PROTOCOL_ERROR)
    assert goaway.last_stream == 1


def test_headers_on_a_closed_stream_end_the_connection(conn: Connection) -> None:
    conn.send(call(1) + call(5))
    assert conn.answer(5).status == OK
    ended(conn, conn.send(headers(1)), STREAM_CLOSED)


def test_headers_on_a_stream_we_reset_are_ignored(conn: Connection) -> None:
    """Sent before the peer read our RST_STREAM (RFC 9113 §5.1): decoded, then dropped."""
    over = b"\0" + (conn.door.server.door.max_receive + 1).to_bytes(4, "big")
    got = conn.send(headers(1) + data(1, over, end=False))
    assert [f.kind for f in got if f.stream == 1][-1] == RST_STREAM
    assert conn.send(headers(1, end=True)) == []
    alive(conn, 3)


def test_a_lower_stream_than_the_last_ends_the_connection(conn: Connection) -> None:
    conn.send(call(5))
    ended(conn, conn.send(headers(3)), STREAM_CLOSED)


def test_frames_on_a_closed_stream_are_taken(conn: Connection) -> None:
    """The peer may have sent them before it read our RST_STREAM (§5.1)."""
    conn.send(headers(1) + data(1, b"\0\0\0\0\0", end=False))
    got = conn.send(frame(RST_STREAM, 0, 1, b"\0\0\0\x08"))
    assert got == []
    got = conn.send(frame(DATA, 0, 1, b"late") + window_update(1, 10) + frame(RST_STREAM, 0, 1, b"\0\0\0\0"))
    assert got == []
    alive(conn, 3)


def test_data_after_end_stream_resets_the_stream(door: Door) -> None:
    conn = door.connect()
    conn.open()
    conn.send(call(1, "GetTask", get_task("held-1")))
    got = conn.send(frame(DATA, 0, 1, b"more"))
    assert conn.answer(1, got).reset == STREAM_CLOSED
    alive(conn, 3)


# Header blocks: CONTINUATION, padding, priority.


def test_continuation_without_headers_ends_the_connection(conn: Connection) -> None:
    ended(conn, conn.send(frame(CONTINUATION, END_HEADERS, 1, block(request_fields()))), PROTOCOL_ERROR)


def test_an_interrupted_header_block_ends_the_connection(conn: Connection) -> None:
    whole = block(request_fields())
    conn.send(frame(HEADERS, 0, 1, whole[:10]))
    ended(conn, conn.send(ping()), PROTOCOL_ERROR)


def test_a_continuation_on_another_stream_ends_the_connection(conn: Connection) -> None:
    whole = block(request_fields())
    conn.send(frame(HEADERS, 0, 1, whole[:10]))
    ended(conn, conn.send(frame(CONTINUATION, END_HEADERS, 3, whole[10:])), PROTOCOL_ERROR)


def test_a_header_block_in_continuations_is_read(conn: Connection) -> None:
    whole = block(request_fields())
    conn.send(
        frame(HEADERS, 0, 1, whole[:3])
        + frame(CONTINUATION, 0, 1, whole[3:20])
        + frame(CONTINUATION, 0, 1, b"")
        + frame(CONTINUATION, END_HEADERS, 1, whole[20:])
        + data(1, grpc_message(sized_send_request(100)))
    )
    assert conn.answer(1).status == OK


def padded(payload: bytes, padding: int) -> bytes:
    return bytes((padding,)) + payload + b"\0" * padding


def test_padding_as_long_as_the_frame_allows_is_read(conn: Connection) -> None:
    message = grpc_message(sized_send_request(100))
    conn.send(
        frame(HEADERS, END_HEADERS | PADDED, 1, padded(block(request_fields()), 255))
        + frame(DATA, END_STREAM | PADDED, 1, padded(message, 200))
    )
    assert conn.answer(1).status == OK
    # Padding alone: the pad length is the payload's length less one.
    conn.send(headers(3) + frame(DATA, PADDED, 3, b"\x04" + b"\0" * 4) + data(3, message))
    assert conn.answer(3).status == OK


@pytest.mark.parametrize("kind", [DATA, HEADERS])
def test_padding_longer_than_the_frame_ends_the_connection(conn: Connection, kind: int) -> None:
    if kind == DATA:
        conn.send(headers(1))
        sent = frame(DATA, PADDED, 1, b"\x05" + b"\0" * 4)
    else:
        fields = block(request_fields())
        sent = frame(HEADERS, END_HEADERS | PADDED, 1, bytes((len(fields) + 1,)) + fields)
    ended(conn, conn.send(sent), PROTOCOL_ERROR)


def test_an_empty_padded_frame_ends_the_connection(conn: Connection) -> None:
    conn.send(headers(1))
    ended(conn, conn.send(frame(DATA, PADDED, 1, b"")), PROTOCOL_ERROR)


def test_a_stream_depending_on_itself(conn: Connection) -> None:
    # PRIORITY on its own: that stream is reset; HEADERS's priority: the connection ends.
    conn.send(headers(1))
    got = conn.send(frame(PRIORITY, 0, 1, struct.pack(">LB", 1, 16)))
    assert conn.answer(1, got).reset == PROTOCOL_ERROR
    priority = struct.pack(">LB", 3, 16)
    ended(conn, conn.send(frame(HEADERS, END_HEADERS | PRIORITY_FLAG, 3, priority + block(request_fields()))), PROTOCOL_ERROR)


def test_priorities_on_other_streams_are_ignored(conn: Connection) -> None:
    priority = struct.pack(">LB", 0x80000001, 16)
    conn.send(
        frame(PRIORITY, 0, 7, struct.pack(">LB", 1, 1))
        + frame(HEADERS, END_HEADERS | PRIORITY_FLAG, 9, priority + block(request_fields()))
        + data(9, grpc_message(sized_send_request(100)))
    )
    assert conn.answer(9).status == OK
    assert conn.answer(7).reset is None


def test_a_client_may_not_push(conn: Connection) -> None:
    ended(conn, conn.send(frame(PUSH_PROMISE, END_HEADERS, 1, b"\0\0\0\2" + block(request_fields()))), PROTOCOL_ERROR)


def test_unknown_frame_types_are_ignored(conn: Connection) -> None:
    assert conn.send(frame(0x20, 0xFF, 0, b"what") + frame(0x21, 0, 1, b"")) == []
    alive(conn, 1)


# Header block and list sizes, HPACK.


def padded_fields(target: int, measure: object) -> list[tuple[bytes, bytes]]:
    """Request fields with an x-pad value making C{measure(fields)} exactly C{target}."""
    size = 0
    while True:
        fields = request_fields(extra=[(b"x-pad", b"p" * size)])
        have = measure(fields)  # type: ignore[operator]
        if have == target:
            return fields
        assert have < target or size, (have, target)
        size += target - have if have < target else -1


def in_frames(stream: int, whole: bytes, end: bool = False) -> bytes:
    """A header block as HEADERS and CONTINUATIONs of at most 16 KiB each."""
    pieces = [whole[i : i + h2.MAX_FRAME] for i in range(0, len(whole), h2.MAX_FRAME)]
    out = b""
    for i, piece in enumerate(pieces):
        flags = END_HEADERS if i == len(pieces) - 1 else 0
        if i == 0:
            out += frame(HEADERS, flags | (END_STREAM if end else 0), stream, piece)
        else:
            out += frame(CONTINUATION, flags, stream, piece)
    return out


def test_a_header_block_over_its_bound_ends_the_connection(conn: Connection) -> None:
    fields = padded_fields(h2.MAX_HEADER_BLOCK + 1, lambda f: len(block(f)))
    goaway = ended(conn, conn.send(in_frames(1, block(fields))), ENHANCE_YOUR_CALM)
    assert goaway.last_stream == 0


def test_a_header_block_at_its_bound_is_decoded(conn: Connection) -> None:
    # Read whole (its list, over the list's limit, refuses the stream only).
    fields = padded_fields(h2.MAX_HEADER_BLOCK, lambda f: len(block(f)))
    conn.send(in_frames(1, block(fields)))
    answer = conn.answer(1)
    assert answer.status == RESOURCE_EXHAUSTED
    assert answer.reset == 0  # The request had not ended: no more of it is wanted.
    alive(conn, 3)


def test_a_header_list_over_its_limit_refuses_the_stream(conn: Connection) -> None:
    fields = padded_fields(h2.MAX_HEADER_LIST + 1, list_size)
    conn.send(in_frames(1, block(fields)) + data(1, grpc_message(sized_send_request(100))))
    answer = conn.answer(1)
    assert answer.status == RESOURCE_EXHAUSTED
    assert str(h2.MAX_HEADER_LIST) in answer.message
    assert answer.blocks[0][0] == (b":status", b"200")
    alive(conn, 3)


def test_a_header_list_at_its_limit_is_taken(conn: Connection) -> None:
    fields = padded_fields(h2.MAX_HEADER_LIST, list_size)
    conn.send(in_frames(1, block(fields)) + data(1, grpc_message(sized_send_request(100))))
    assert conn.answer(1).status == OK


def test_a_refused_header_list_keeps_the_table_in_step(conn: Connection) -> None:
    """A list over the limit is decoded whole: what it indexed, the next block uses."""
    indexed_literal = b"\x40" + integer(len(b"x-kept"), 7) + b"x-kept" + integer(3, 7) + b"yes"
    fields = padded_fields(h2.MAX_HEADER_LIST + 100, list_size)
    conn.send(in_frames(1, block(fields) + indexed_literal))
    assert conn.answer(1).status == RESOURCE_EXHAUSTED
    # Index 62: the newest entry of the dynamic table.
    conn.send(
        frame(HEADERS, END_HEADERS, 3, block(request_fields()) + bytes((0x80 | 62,)))
        + data(3, grpc_message(sized_send_request(100)))
    )
    assert conn.answer(3).status == OK


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(b"\x80", id="index-0"),
        pytest.param(b"\xff\x80\x80\x80\x80\x80\x01", id="integer-too-long"),
        pytest.param(b"\xbf", id="index-past-the-tables"),
        pytest.param(b"\x00\x05ab", id="truncated-string"),
        pytest.param(b"\x3f\xe2\x1f", id="table-size-over-ours"),
        pytest.param(b"\x82\x20", id="table-size-update-after-a-field"),
    ],
)
def test_broken_hpack_ends_the_connection(conn: Connection, broken: bytes) -> None:
    ended(conn, conn.send(frame(HEADERS, END_HEADERS, 1, broken)), COMPRESSION_ERROR)


# Concurrent streams.


def test_streams_beyond_max_streams_are_refused(make_door: Callable[..., Door]) -> None:
    door = make_door(max_calls_per_source=0)
    conn = door.connect()
    got = conn.open()
    assert struct.pack(">HL", h2.SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS) in got[0].payload
    opened = b"".join(headers(1 + 2 * i) for i in range(MAX_STREAMS))
    got = conn.send(opened)
    assert got == []
    assert len(conn.protocol.streams) == MAX_STREAMS
    beyond = 1 + 2 * MAX_STREAMS
    got = conn.send(headers(beyond))
    assert [(f.kind, f.stream, f.code) for f in got] == [(RST_STREAM, beyond, REFUSED_STREAM)]
    # Its DATA, already on its way, is taken in silence.
    assert conn.send(data(beyond, grpc_message(b""))) == []
    # One ends: there is room for one more.
    conn.send(frame(RST_STREAM, 0, 1, b"\0\0\0\x08"))
    conn.send(call(beyond + 2))
    assert conn.answer(beyond + 2).status == OK


# Flow control of what the peer sends.


def test_data_up_to_a_streams_window_is_taken(conn: Connection, door: Door) -> None:
    message = grpc_message(sized_send_request(door.server.door.max_receive))
    window = struct.pack(">HL", h2.SETTINGS_INITIAL_WINDOW_SIZE, len(message))
    assert window in conn.received[0].payload
    conn.send(headers(1) + data(1, message, end=False) + data(1, b""))
    assert conn.answer(1).status == OK


def test_data_beyond_a_streams_window_resets_it(conn: Connection, door: Door) -> None:
    message = grpc_message(sized_send_request(door.server.door.max_receive))
    conn.send(headers(1) + data(1, message, end=False))
    got = conn.send(frame(DATA, END_STREAM, 1, b"x"))
    assert conn.answer(1, got).reset == FLOW_CONTROL_ERROR
    alive(conn, 3)


def partial(stream: int, size: int) -> bytes:
    """A call whose one message of C{size} bytes comes but for its last byte."""
    return headers(stream) + data(stream, grpc_message(b"\x01" * size)[:-1], end=False)


def test_data_beyond_the_connections_window_ends_it(make_door: Callable[..., Door]) -> None:
    # 16 streams of 64 KiB (their window) fill the connection's window exactly.
    door = make_door(max_receive=65532, max_calls_per_source=0)
    conn = door.connect()
    conn.open()
    streams = h2.CONNECTION_WINDOW // 65536
    assert streams * 65536 == h2.CONNECTION_WINDOW
    got = conn.send(b"".join(partial(1 + 2 * i, 65532) for i in range(streams)))
    assert got == [] and not conn.lost
    got = conn.send(headers(99) + frame(DATA, 0, 99, b"\0"))
    ended(conn, got, FLOW_CONTROL_ERROR)


def test_the_connections_window_is_given_back_as_messages_are_read(make_door: Callable[..., Door]) -> None:
    door = make_door(max_receive=65531, max_calls_per_source=0)
    conn = door.connect()
    conn.open()
    undecodable = grpc_message(b"\xff" * 65531)
    quarter = h2.CONNECTION_WINDOW // 4 // len(undecodable)
    for i in range(quarter - 1):
        conn.send(headers(1 + 2 * i) + data(1 + 2 * i, undecodable))
        assert conn.answer(1 + 2 * i).status == INVALID_ARGUMENT
    assert not [f for f in conn.received if f.kind == WINDOW_UPDATE and f.stream == 0][1:]
    last = 1 + 2 * (quarter - 1)
    got = conn.send(headers(last) + data(last, undecodable))
    given = [f for f in got if f.kind == WINDOW_UPDATE]
    assert [(f.stream, int.from_bytes(f.payload, "big")) for f in given] == [
        (0, quarter * len(undecodable))
    ]
    # The whole window is open again: 16 more streams of 64 KiB are taken.
    first = last + 2
    got = conn.send(b"".join(partial(first + 2 * i, 65531) for i in range(16)))
    assert not conn.lost and conn.goaway() is None


@pytest.mark.parametrize(
    ("sent", "code"),
    [
        pytest.param(window_update(0, 0), PROTOCOL_ERROR, id="zero-on-the-connection"),
        pytest.param(window_update(0, 2**31 - 1), FLOW_CONTROL_ERROR, id="connection-overflow"),
        pytest.param(settings((SETTINGS_INITIAL_WINDOW_SIZE, 2**31)), FLOW_CONTROL_ERROR, id="initial-window-over"),
        pytest.param(settings((h2.SETTINGS_MAX_FRAME_SIZE, 16383)), PROTOCOL_ERROR, id="max-frame-under"),
        pytest.param(settings((h2.SETTINGS_MAX_FRAME_SIZE, 2**24)), PROTOCOL_ERROR, id="max-frame-over"),
        pytest.param(settings((h2.SETTINGS_ENABLE_PUSH, 2)), PROTOCOL_ERROR, id="enable-push-2"),
    ],
)
def test_window_and_settings_errors_end_the_connection(conn: Connection, sent: bytes, code: int) -> None:
    ended(conn, conn.send(sent), code)


@pytest.mark.parametrize(
    ("increment", "code"), [(0, PROTOCOL_ERROR), (2**31 - 1, FLOW_CONTROL_ERROR)]
)
def test_a_streams_window_error_resets_it(conn: Connection, increment: int, code: int) -> None:
    conn.send(headers(1))
    got = conn.send(window_update(1, increment))
    assert conn.answer(1, got).reset == code
    alive(conn, 3)


def test_settings_at_their_bounds_are_taken(conn: Connection) -> None:
    got = conn.send(
        settings(
            (SETTINGS_INITIAL_WINDOW_SIZE, 2**31 - 1),
            (h2.SETTINGS_MAX_FRAME_SIZE, 2**24 - 1),
            (h2.SETTINGS_ENABLE_PUSH, 1),
            (0x99, 7),  # Unknown: ignored.
        )
        + window_update(0, 2**31 - 1 - 65535)
    )
    assert [(f.kind, f.flags) for f in got] == [(SETTINGS, ACK)]
    alive(conn, 1)


# Control frames.


FLOODS = {
    "ping": ping(),
    "settings": settings(),
    "window-update": window_update(0, 1),
}


@pytest.mark.parametrize("kind", sorted(FLOODS))
def test_max_control_frames_in_a_tick_are_answered(conn: Connection, door: Door, kind: str) -> None:
    door.sweeps()  # A new tick: the opening SETTINGS no longer counts.
    conn.send(FLOODS[kind] * h2.MAX_CONTROL)
    assert conn.goaway() is None and not conn.lost
    ended(conn, conn.send(FLOODS[kind]), ENHANCE_YOUR_CALM)


def test_one_read_over_max_control_ends_the_connection(conn: Connection, door: Door) -> None:
    door.sweeps()
    got = conn.send(ping() * (h2.MAX_CONTROL + 1))
    ended(conn, got, ENHANCE_YOUR_CALM)


def test_empty_data_frames_count_as_control(conn: Connection, door: Door) -> None:
    conn.send(headers(1))
    door.sweeps()
    conn.send(frame(DATA, 0, 1, b"") * (h2.MAX_CONTROL - 1))
    assert not conn.lost
    ended(conn, conn.send(frame(DATA, 0, 1, b"") * 2), ENHANCE_YOUR_CALM)


def test_the_sweep_resets_the_control_count(conn: Connection, door: Door) -> None:
    door.sweeps()
    for _ in range(3):
        conn.send(ping() * h2.MAX_CONTROL)
        door.sweeps()
    assert not conn.lost
    alive(conn, 1)


def test_streams_begun_earn_control_frames(make_door: Callable[..., Door]) -> None:
    door = make_door(max_calls_per_source=0)
    conn = door.connect()
    conn.open()
    door.sweeps()
    conn.send(call(1) + call(3))
    earned = h2.MAX_CONTROL + 2 * h2.CONTROL_PER_STREAM
    conn.send(ping() * earned)
    assert not conn.lost
    ended(conn, conn.send(ping()), ENHANCE_YOUR_CALM)


# Flow control of what the server sends.


def test_a_large_answer_waits_for_the_peers_window(make_door: Callable[..., Door]) -> None:
    door = make_door()
    conn = door.connect()
    conn.open((SETTINGS_INITIAL_WINDOW_SIZE, 40))
    got = conn.send(call(1))
    assert [(f.kind, len(f.payload)) for f in got] == [(HEADERS, len(got[0].payload)), (DATA, 40)]
    pieces = [got[1].payload]
    trailers = []
    for _ in range(100):
        got = conn.send(window_update(1, 40))
        pieces += [f.payload for f in got if f.kind == DATA]
        trailers += [f for f in got if f.kind == HEADERS]
        assert all(len(f.payload) <= 40 for f in got if f.kind == DATA)
        if trailers:
            # Trailers after the last piece, in the same write.
            assert got[-1].kind == HEADERS and got[-1].flags & END_STREAM
            break
    assert len(pieces) > 3
    answer = conn.answer(1)
    assert answer.status == OK
    assert answer.data == b"".join(pieces)
    assert a2a_pb2.SendMessageResponse.FromString(answer.messages()[0]).task.id


def test_the_connections_send_window_holds_answers_too(conn: Connection) -> None:
    # Calls until one's answer no longer fits in the connection's window (65,535).
    stream = 1
    while conn.answer(stream - 2).ended or stream == 1:
        conn.send(call(stream))
        stream += 2
    blocked = stream - 2
    sent = sum(len(f.payload) for f in conn.received if f.kind == DATA)
    assert sent == 65535
    assert conn.answer(blocked).data and conn.answer(blocked).status is None
    conn.send(window_update(0, 1000))
    assert conn.answer(blocked).status == OK


# Fair turns.


def test_one_read_begins_turn_requests_calls_then_yields(conn: Connection, door: Door) -> None:
    calls = 3 * TURN_REQUESTS + 1
    got = conn.send(b"".join(call(1 + 2 * i) for i in range(calls)), turns=False)
    begun = sorted(set(conn.protocol.streams) | {f.stream for f in got if f.stream})
    assert begun == [1 + 2 * i for i in range(TURN_REQUESTS)]
    assert conn.transport.producerState == "paused"
    door.clock.advance(0)
    for i in range(calls):
        assert conn.answer(1 + 2 * i).status == OK
    assert conn.transport.producerState == "producing"


def test_a_read_within_its_turn_is_done_at_once(conn: Connection) -> None:
    calls = TURN_REQUESTS - 1
    conn.send(b"".join(call(1 + 2 * i) for i in range(calls)), turns=False)
    for i in range(calls):
        assert conn.answer(1 + 2 * i).status == OK
    assert conn.transport.producerState == "producing"


# A transport that cannot take more.


def test_a_full_transport_pauses_the_work_then_the_reading(conn: Connection) -> None:
    conn.protocol.pauseProducing()
    conn.send(call(1))
    assert conn.answer(1).blocks == []
    assert conn.transport.producerState == "producing"
    conn.send(frame(0xFA, 0, 0, b"\0" * h2.MAX_FRAME) * 4)
    assert conn.transport.producerState == "paused"
    conn.protocol.resumeProducing()
    assert conn.answer(1).status == OK
    assert conn.transport.producerState == "producing"
