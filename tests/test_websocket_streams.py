"""
WebSocket streams (https://a2a-rust.com/bindings/websocket/v1 §4): events of many streams interleaved on one
connection, the stream_complete marker, a failing stream's error frame, a
stream in progress until it ends, a consumer that falls behind, answers
held while the transport is full, and a connection's streams cancelled
when it goes.
"""

from __future__ import annotations

from beacon.bindings.websocket import BEACON_DOMAIN, STREAM_COMPLETE, WebSocketOptions
from beacon.protocol import TaskNotFoundError
from websocket_support import (
    ERROR_INFO,
    HeldHandler,
    Server,
    call,
    get,
    send_message,
    status_event,
    stream_request,
)
from websocket_support import close_servers, frame_path, pytest_generate_tests  # noqa: F401 (fixtures)


# §4 Streaming.


def test_streams_interleave_and_end_with_the_marker() -> None:
    """Events of two streams interleave on one connection, in order within each, and each ends with stream_complete."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(stream_request("one", 1))
    connection.send(stream_request("two", 2))
    one, two = handler.streams["one"], handler.streams["two"]
    for n in range(3):
        one.send(status_event(n))
        two.send(status_event(10 + n))
    one.close()
    two.send(status_event(13))
    two.close()
    frames = connection.responses()
    assert [(f["id"], f["result"]) for f in frames] == [
        (1, status_event(0)),
        (2, status_event(10)),
        (1, status_event(1)),
        (2, status_event(11)),
        (1, status_event(2)),
        (2, status_event(12)),
        (1, STREAM_COMPLETE),
        (2, status_event(13)),
        (2, STREAM_COMPLETE),
    ]
    assert frames[6] == {"jsonrpc": "2.0", "id": 1, "result": {"status": "stream_complete"}}
    assert connection.server._in_flight == 0


def test_failing_stream_ends_with_an_error_and_no_marker() -> None:
    """A stream that fails ends with an error frame for its id, keeping its code and details, and no marker."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(call("SubscribeToTask", {"id": "t"}, 7))
    stream = handler.streams["t"]
    stream.send(status_event(1))
    stream.fail(TaskNotFoundError())
    frames = connection.responses()
    assert frames[0]["result"] == status_event(1)
    assert frames[1]["id"] == 7
    assert frames[1]["error"]["code"] == -32001
    assert frames[1]["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"
    assert len(frames) == 2


def test_stream_counts_as_in_progress_until_it_ends() -> None:
    """A stream holds its place under max_in_flight until it ends."""
    handler = HeldHandler()
    connection = Server(handler, options=WebSocketOptions(max_in_flight=2)).open()
    connection.send(stream_request("one"))
    connection.send(stream_request("two"))
    assert connection.rpc(get("x"))["error"]["code"] == -32603
    handler.streams["one"].close()
    assert connection.responses()[0]["result"] == STREAM_COMPLETE
    connection.send(get("y"))
    assert connection.responses() == []
    assert "y" in handler.held


def test_slow_consumer_is_ended_with_an_error_frame() -> None:
    """A stream whose peer stops reading is held up to stream_queue frames, then ended with STREAM_LAGGED; other streams go on."""
    handler = HeldHandler()
    server = Server(handler, options=WebSocketOptions(stream_queue=3))
    connection = server.open()
    connection.send(stream_request("slow", 1))
    stream = handler.streams["slow"]
    cancelled: list[bool] = []
    stream.on_cancel(lambda: cancelled.append(True))
    connection.server.pauseProducing()  # What the transport does when full.
    for n in range(5):
        stream.send(status_event(n))
    assert cancelled == [True]
    assert connection.responses() == []
    connection.server.resumeProducing()
    frames = connection.responses()
    assert [f.get("result") for f in frames[:3]] == [status_event(n) for n in range(3)]
    lagged = frames[3]
    assert lagged["id"] == 1
    assert lagged["error"]["code"] == -32603
    assert lagged["error"]["data"] == [
        {
            "@type": ERROR_INFO,
            "reason": "STREAM_LAGGED",
            "domain": BEACON_DOMAIN,
            "metadata": {"streamLagged": "true"},
        }
    ]
    assert len(frames) == 4
    assert connection.server._in_flight == 0
    assert "result" in connection.rpc(send_message())


def test_held_frames_are_sent_in_order_when_the_transport_drains() -> None:
    """Answers held while the transport is full are sent, in order, once it drains."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(get("a"))
    connection.send(stream_request("s", "s"))
    connection.server.pauseProducing()
    handler.release("a")
    handler.streams["s"].send(status_event(0))
    handler.streams["s"].close()
    assert connection.responses() == []
    connection.server.resumeProducing()
    assert [(f["id"], "result" in f) for f in connection.responses()] == [
        ("a", True),
        ("s", True),
        ("s", True),
    ]


def test_closing_the_connection_cancels_its_streams() -> None:
    """When the peer goes, its streams are cancelled and its slot freed."""
    handler = HeldHandler()
    server = Server(handler)
    connection = server.open()
    connection.send(stream_request("s"))
    cancelled: list[bool] = []
    handler.streams["s"].on_cancel(lambda: cancelled.append(True))
    connection.pump.clientIO.loseConnection()
    connection.pump.flush()
    assert cancelled == [True]
    assert server.factory.open_connections == 0


def test_answer_after_the_peer_left_is_dropped() -> None:
    """A request that finishes after its connection closed is not written anywhere."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(get("a"))
    connection.send(stream_request("late-stream"))
    connection.pump.clientIO.loseConnection()
    connection.pump.flush()
    handler.release("a")
    assert connection.responses() == []
