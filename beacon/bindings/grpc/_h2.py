"""
HTTP/2 (RFC 9113) for the gRPC door: the server side of one connection, on
the reactor thread, framing and flow control only; what a stream means is
its L{IStreams}' (L{beacon.bindings.grpc._door}).

What it speaks. The client's preface and SETTINGS first (anything else is
a PROTOCOL_ERROR GOAWAY); HEADERS and CONTINUATION into one header block
(HPACK, L{beacon.bindings.grpc._hpack}), DATA, RST_STREAM, SETTINGS, PING,
GOAWAY, WINDOW_UPDATE and PRIORITY (read and ignored); unknown frame types
are ignored, as RFC 9113 says; a client's PUSH_PROMISE is a
PROTOCOL_ERROR. Beacon never pushes and opens no stream.

What it bounds, so that no peer can hold it:

    - a frame over our SETTINGS_MAX_FRAME_SIZE (16 KiB): FRAME_SIZE_ERROR;
    - a header block over L{MAX_HEADER_BLOCK} bytes, HEADERS and its
      CONTINUATIONs together: ENHANCE_YOUR_CALM (a decoded list over
      SETTINGS_MAX_HEADER_LIST_SIZE is the stream's refusal, see the door);
    - streams open at once: SETTINGS_MAX_CONCURRENT_STREAMS, beyond which a
      new stream is refused (RST_STREAM REFUSED_STREAM);
    - the bytes a peer may send: a stream's window is one request message
      and its framing (never opened wider), the connection's
      L{CONNECTION_WINDOW}, given back only as the door consumes what it
      holds (a stream's message read, a stream closed);
    - control frames (PING, SETTINGS, RST_STREAM, PRIORITY, WINDOW_UPDATE
      and empty DATA) beyond L{MAX_CONTROL} in one tick of the door's
      sweep, and L{CONTROL_PER_STREAM} more for each stream begun:
      ENHANCE_YOUR_CALM (a ping, settings or window flood);
    - what waits to be sent: the transport's buffer pauses the reading of
      new frames (a peer that does not read gets no more work done), and a
      stream's output waits for its window, bounded by the door.

Every protocol error ends the connection with a GOAWAY naming it (and what
was wrong, as its debug data), then closes it; a stream error resets that
stream only.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol as TypingProtocol, cast

from twisted.internet.interfaces import IPushProducer, IReactorTime, ITCPTransport
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.bindings.admission import TURN_REQUESTS, Ledger, Turns
from beacon.bindings.grpc._hpack import Decoder, HeaderListTooLarge, HPACKError

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (RFC 9113 §6).
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9

# Flags.
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# Error codes (RFC 9113 §7).
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB

# Settings (RFC 9113 §6.5.2).
SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535
#: The largest frame payload a peer may send us (SETTINGS_MAX_FRAME_SIZE:
#: the protocol's default, which every peer must accept).
MAX_FRAME = 16384
#: Our SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table a peer may use.
HEADER_TABLE_SIZE = 4096
#: Our SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 §6.5.2's size: names,
#: values and 32 bytes a field).
MAX_HEADER_LIST = 16384
#: A header block's bytes (HEADERS and CONTINUATIONs) beyond which the
#: connection is ended: decoding stays bounded.
MAX_HEADER_BLOCK = 2 * MAX_HEADER_LIST
#: The bytes of DATA a connection may have sent that the door has not
#: consumed (its receive window; the protocol's default is 65,535).
CONNECTION_WINDOW = 1 << 20
#: Streams reset by us whose late HEADERS are ignored, the latest ones.
RESETS_KEPT = 128
#: Bytes read and kept while the transport's buffer is full (the peer does
#: not read what it is sent) before the reading pauses too.
MAX_UNREAD = 1 << 16
#: Control frames a connection may send in one tick of the door's sweep
#: (a second), beyond L{CONTROL_PER_STREAM} for each stream it begins,
#: before it is ended ENHANCE_YOUR_CALM.
MAX_CONTROL = 200
CONTROL_PER_STREAM = 4

_HEAD = struct.Struct(">HBBBL")
_SETTING = struct.Struct(">HL")
_U32 = struct.Struct(">L")
_GOAWAY = struct.Struct(">LL")


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame's bytes."""
    n = len(payload)
    return _HEAD.pack(n >> 8, n & 0xFF, kind, flags, stream) + payload


class Broken(Exception):
    """
    The peer broke HTTP/2 (a connection error): its code, and what was
    wrong (the GOAWAY's debug data).
    """

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code
        self.why = why


class Stream:
    """
    One stream of a connection: its header block decoded, the flow
    control of what is sent on it, and the door's call (C{call}).

    @ivar id: The stream's identifier.
    @ivar headers: Its request headers, as decoded.
    @ivar window: What we may still send on it (its send window).
    @ivar consumed: DATA bytes received and not yet given back to the
        connection's window.
    @ivar received: DATA bytes received in all (against its receive
        window).
    @ivar remote_closed: The peer has ended its side (END_STREAM).
    @ivar closed: The stream is over (both sides, or reset).
    @ivar headers_sent: Our response headers went out.
    @ivar pending: DATA waiting for window, in order.
    @ivar trailers: The trailers block waiting behind C{pending}, if any.
    @ivar stalled: Since when its output has waited for the peer's window (0: it has not).
    @ivar call: The door's state of the call on this stream.
    """

    __slots__ = (
        "id",
        "headers",
        "window",
        "consumed",
        "received",
        "remote_closed",
        "closed",
        "headers_sent",
        "pending",
        "pending_bytes",
        "trailers",
        "stalled",
        "call",
    )

    def __init__(self, id: int, window: int) -> None:
        self.id = id
        self.headers: Sequence[tuple[bytes, bytes]] = ()
        self.window = window
        self.consumed = 0
        self.received = 0
        self.remote_closed = False
        self.closed = False
        self.headers_sent = False
        self.pending: deque[bytes] | None = None
        self.pending_bytes = 0
        self.trailers: bytes | None = None
        self.stalled = 0.0
        self.call: Any = None


class IStreams(TypingProtocol):
    """What the door does with a connection's streams (L{H2Connection} calls it)."""

    def opened(self, connection: "H2Connection") -> bool:
        """A connection has begun; False: refuse it (it is closed)."""

    def begin(self, connection: "H2Connection", stream: Stream, too_large: bool) -> None:
        """A stream's request headers have come (C{too_large}: over the list's limit)."""

    def data(self, connection: "H2Connection", stream: Stream, data: bytes, end: bool) -> None:
        """DATA on a stream the door has begun (C{end}: the peer's side is over)."""

    def ended(self, connection: "H2Connection", stream: Stream) -> None:
        """The stream is over: answered, reset by either side, or its connection gone."""

    def closed(self, connection: "H2Connection") -> None:
        """The connection has ended."""

    def broken(self, connection: "H2Connection", code: int, why: str) -> None:
        """The peer broke HTTP/2 (C{code}, C{why}): the connection is being ended."""


@implementer(IPushProducer)
class H2Connection(Protocol):
    """
    The server side of one HTTP/2 connection (see the module docstring).

    @ivar streams: The open streams, by identifier.
    @ivar last_stream: The highest stream the peer has opened.
    @ivar going_away: A GOAWAY has been sent: no new stream is begun.
    @ivar control: Control frames counted in the sweep's current tick.
    @ivar heard: Frames have come since the sweep last looked.
    @ivar began: A stream has begun since the sweep last looked.
    @ivar blocked: The streams whose DATA waits for a window, by identifier.
    @ivar ping_pending: The opaque data of our keepalive PING awaiting its ACK.
    """

    def __init__(
        self,
        door: IStreams,
        *,
        max_streams: int,
        stream_window: int,
        clock: IReactorTime | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        """
        @param door: What the streams mean.
        @param clock: Schedules this connection's turns (each stream begun
            spends one of L{TURN_REQUESTS}, see
            L{beacon.bindings.admission._turns}); None: no turns.
        @param ledger: The reads of the connections it shares the reactor with.
        @param max_streams: Our SETTINGS_MAX_CONCURRENT_STREAMS.
        @param stream_window: Our SETTINGS_INITIAL_WINDOW_SIZE: what a peer
            may send on one stream (one request message and its framing).
        """
        self._door = door
        self._turns = (
            Turns(clock, TURN_REQUESTS, self._resume, ledger) if clock is not None else None
        )
        self.max_streams = max_streams
        self.stream_window = min(stream_window, MAX_WINDOW)
        self.streams: dict[int, Stream] = {}
        self.last_stream = 0
        self.going_away = False
        self.control = 0
        self.heard = True
        self.began = False
        self._out: Any = None
        #: The peer's address (once connected).
        self.peer: Any = None
        self._buffer = bytearray()
        self._preface = False
        self._settled = False
        self._block: bytearray | None = None
        self._block_stream = 0
        self._block_flags = 0
        self._decoder = Decoder(max_table_size=HEADER_TABLE_SIZE, max_header_list_size=MAX_HEADER_LIST)
        self._send_window = DEFAULT_WINDOW
        self._peer_window = DEFAULT_WINDOW
        self._peer_frame = MAX_FRAME
        self._unacknowledged = 0
        self.blocked: dict[int, Stream] = {}
        #: The streams we reset lately (their late frames are ignored).
        self._reset: deque[int] = deque(maxlen=RESETS_KEPT)
        self._paused = False
        self._reading_paused = False
        self._ended = False
        self.ping_pending: bytes | None = None

    # The transport.

    def connectionMade(self) -> None:
        self._out = out = cast(Any, self.transport)
        self.peer = out.getPeer()
        if not self._door.opened(self):
            out.abortConnection()
            return
        if ITCPTransport.providedBy(out):
            # Each answer is one write: Nagle's algorithm would only delay it.
            out.setTcpNoDelay(True)
        out.registerProducer(self, True)
        settings = b"".join(
            (
                _SETTING.pack(SETTINGS_HEADER_TABLE_SIZE, HEADER_TABLE_SIZE),
                _SETTING.pack(SETTINGS_ENABLE_PUSH, 0),
                _SETTING.pack(SETTINGS_MAX_CONCURRENT_STREAMS, self.max_streams),
                _SETTING.pack(SETTINGS_INITIAL_WINDOW_SIZE, self.stream_window),
                _SETTING.pack(SETTINGS_MAX_FRAME_SIZE, MAX_FRAME),
                _SETTING.pack(SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST),
            )
        )
        self._out.write(
            frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, _U32.pack(CONNECTION_WINDOW - DEFAULT_WINDOW))
        )
        self._receive_window = CONNECTION_WINDOW

    def dataReceived(self, data: bytes) -> None:
        if self._ended:
            return
        self.heard = True
        buffer = self._buffer
        buffer += data
        if self._paused:
            # The transport's buffer is full: no more work until it drains;
            # what is read meanwhile is kept, up to a bound.
            if len(buffer) > MAX_UNREAD:
                self._pause_reading()
            return
        turns = self._turns
        if turns is not None:
            turns.start()
            if turns.paused:
                return
        self._work()

    def _resume(self) -> None:
        """A later turn: go on with what was read."""
        if self._ended or self._paused:
            return
        self._work()
        if self._reading_paused and not self._paused and not (
            self._turns is not None and self._turns.paused
        ):
            self._reading_paused = False
            self._out.resumeProducing()

    def _work(self) -> None:
        try:
            self._frames()
        except Broken as e:
            self._door.broken(self, e.code, e.why)
            self.goaway(e.code, e.why)

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:
        self._ended = True
        if self._turns is not None:
            self._turns.stop()
        streams, self.streams = self.streams, {}
        self.blocked.clear()
        for stream in streams.values():
            if not stream.closed:
                stream.closed = True
                self._door.ended(self, stream)
        self._door.closed(self)

    # IPushProducer: the transport's buffer is full, or has room again. The
    # reading goes on (a TLS handshake pauses its producer until it is done,
    # and needs to read to get there); the frames wait.

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        if self._ended:
            return
        self._resume()

    def stopProducing(self) -> None:
        self._out.abortConnection()

    # Frames in.

    def _frames(self) -> None:
        buffer = self._buffer
        if not self._preface:
            if len(buffer) < len(PREFACE):
                if not PREFACE.startswith(bytes(buffer)):
                    raise Broken(PROTOCOL_ERROR, "not the HTTP/2 client preface")
                return
            if buffer[: len(PREFACE)] != PREFACE:
                raise Broken(PROTOCOL_ERROR, "not the HTTP/2 client preface")
            del buffer[: len(PREFACE)]
            self._preface = True
        position = 0
        size = len(buffer)
        turns = self._turns
        try:
            while size - position >= 9 and not self._ended and not self._paused:
                length = (buffer[position] << 16) | (buffer[position + 1] << 8) | buffer[position + 2]
                if length > MAX_FRAME:
                    raise Broken(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
                end = position + 9 + length
                if end > size:
                    break
                kind = buffer[position + 3]
                flags = buffer[position + 4]
                stream = _U32.unpack_from(buffer, position + 5)[0] & 0x7FFFFFFF
                payload = bytes(buffer[position + 9 : end])
                position = end
                if not self._settled:
                    if kind != SETTINGS or flags & ACK:
                        raise Broken(PROTOCOL_ERROR, "the preface's SETTINGS must come first")
                    self._settled = True
                if self._block is not None and kind != CONTINUATION:
                    raise Broken(PROTOCOL_ERROR, "a header block was interrupted")
                if kind == DATA:
                    self._data(stream, flags, payload)
                elif kind == HEADERS:
                    if self._headers(stream, flags, payload) and turns is not None:
                        if not turns.spend():
                            turns.pause()
                            self._pause_reading()
                            break
                elif kind == CONTINUATION:
                    if self._continuation(stream, flags, payload) and turns is not None:
                        if not turns.spend():
                            turns.pause()
                            self._pause_reading()
                            break
                elif kind == WINDOW_UPDATE:
                    self._window_update(stream, payload)
                elif kind == SETTINGS:
                    self._settings(stream, flags, payload)
                elif kind == PING:
                    self._ping(stream, flags, payload)
                elif kind == RST_STREAM:
                    self._rst_stream(stream, payload)
                elif kind == PRIORITY:
                    self._priority(stream, payload)
                elif kind == GOAWAY:
                    self._goaway(stream, payload)
                elif kind == PUSH_PROMISE:
                    raise Broken(PROTOCOL_ERROR, "a client may not push")
                # Any other type is ignored (RFC 9113 §4.1).
        finally:
            del buffer[:position]
        if self.control > MAX_CONTROL:
            raise Broken(ENHANCE_YOUR_CALM, "too many control frames")

    def _pause_reading(self) -> None:
        """This turn is spent: read nothing more until the next (L{_resume})."""
        if not self._reading_paused:
            self._reading_paused = True
            self._out.pauseProducing()

    def _data(self, id: int, flags: int, payload: bytes) -> None:
        if id == 0:
            raise Broken(PROTOCOL_ERROR, "DATA on stream 0")
        length = len(payload)
        self._receive_window -= length
        if self._receive_window < 0:
            raise Broken(FLOW_CONTROL_ERROR, "DATA beyond the connection's window")
        if flags & PADDED:
            payload = self._unpad(payload)
        stream = self.streams.get(id)
        if stream is None or stream.remote_closed:
            if id > self.last_stream:
                raise Broken(PROTOCOL_ERROR, "DATA on an idle stream")
            if stream is not None:
                self.reset(stream, STREAM_CLOSED)
            # A stream we have closed: its bytes are given back at once.
            self.give_back(length)
            return
        stream.received += length
        if stream.received > self.stream_window:
            self.give_back(length)
            self.reset(stream, FLOW_CONTROL_ERROR)
            return
        stream.consumed += length
        end = bool(flags & END_STREAM)
        if not payload and not end:
            self.control += 1
        if end:
            stream.remote_closed = True
        self._door.data(self, stream, payload, end)

    def _unpad(self, payload: bytes) -> bytes:
        if not payload or payload[0] >= len(payload):
            raise Broken(PROTOCOL_ERROR, "padding longer than the frame")
        return payload[1 : len(payload) - payload[0]]

    def _headers(self, id: int, flags: int, payload: bytes) -> bool:
        if id == 0:
            raise Broken(PROTOCOL_ERROR, "HEADERS on stream 0")
        if flags & PADDED:
            payload = self._unpad(payload)
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise Broken(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            if _U32.unpack_from(payload)[0] & 0x7FFFFFFF == id:
                raise Broken(PROTOCOL_ERROR, "a stream depends on itself")
            payload = payload[5:]
        if not flags & END_HEADERS:
            self._block = bytearray(payload)
            self._block_stream = id
            self._block_flags = flags
            if len(payload) > MAX_HEADER_BLOCK:
                raise Broken(ENHANCE_YOUR_CALM, "a header block too large")
            return False
        return self._header_block(id, flags, payload)

    def _continuation(self, id: int, flags: int, payload: bytes) -> bool:
        block = self._block
        if block is None or id != self._block_stream:
            raise Broken(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        block += payload
        if len(block) > MAX_HEADER_BLOCK:
            raise Broken(ENHANCE_YOUR_CALM, "a header block too large")
        if not flags & END_HEADERS:
            return False
        self._block = None
        return self._header_block(id, self._block_flags, bytes(block))

    def _header_block(self, id: int, flags: int, block: bytes) -> bool:
        """A whole header block: a new stream's request, or a stream's trailers."""
        too_large = False
        try:
            headers = self._decoder.decode(block)
        except HeaderListTooLarge:
            headers = []
            too_large = True
        except HPACKError as e:
            raise Broken(COMPRESSION_ERROR, f"a header block HPACK cannot read ({e})") from None
        if id <= self.last_stream:
            stream = self.streams.get(id)
            if stream is None:
                if id in self._reset:
                    # A stream we reset: the peer may have sent this before
                    # it read our RST_STREAM, so it is ignored (RFC 9113
                    # §5.1); the block was decoded, so HPACK stays in step.
                    return False
                raise Broken(STREAM_CLOSED, "HEADERS on a closed stream")
            if stream.remote_closed:
                self.reset(stream, STREAM_CLOSED)
                return False
            # Trailers: they must end the stream; the door reads none.
            if not flags & END_STREAM:
                raise Broken(PROTOCOL_ERROR, "trailers without END_STREAM")
            stream.remote_closed = True
            self._door.data(self, stream, b"", True)
            return False
        if not id & 1:
            raise Broken(PROTOCOL_ERROR, "a client's stream must be odd")
        self.last_stream = id
        if self.going_away:
            # Past our GOAWAY: not begun (the peer retries it elsewhere).
            self._out.write(frame(RST_STREAM, 0, id, _U32.pack(REFUSED_STREAM)))
            return False
        if len(self.streams) >= self.max_streams:
            self._out.write(frame(RST_STREAM, 0, id, _U32.pack(REFUSED_STREAM)))
            return False
        stream = Stream(id, self._peer_window)
        stream.headers = headers
        self.streams[id] = stream
        self.began = True
        # A call earns the control frames that come with it (the peer's
        # window updates and pings for what we answer).
        self.control -= CONTROL_PER_STREAM
        if flags & END_STREAM:
            stream.remote_closed = True
        self._door.begin(self, stream, too_large)
        if flags & END_STREAM and not stream.closed:
            self._door.data(self, stream, b"", True)
        return True

    def _window_update(self, id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise Broken(FRAME_SIZE_ERROR, "WINDOW_UPDATE of another length than 4")
        self.control += 1
        increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
        if id == 0:
            if not increment:
                raise Broken(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise Broken(FLOW_CONTROL_ERROR, "the connection's window overflows")
            if self.blocked:
                for waiting in list(self.blocked.values()):
                    self._flush(waiting)
                    if self._send_window <= 0:
                        break
            return
        stream = self.streams.get(id)
        if stream is None:
            if id > self.last_stream:
                raise Broken(PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream")
            return
        if not increment:
            self.reset(stream, PROTOCOL_ERROR)
            return
        stream.window += increment
        if stream.window > MAX_WINDOW:
            self.reset(stream, FLOW_CONTROL_ERROR)
            return
        if stream.pending:
            self._flush(stream)

    def _settings(self, id: int, flags: int, payload: bytes) -> None:
        if id != 0:
            raise Broken(PROTOCOL_ERROR, "SETTINGS on a stream")
        self.control += 1
        if flags & ACK:
            if payload:
                raise Broken(FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise Broken(FRAME_SIZE_ERROR, "SETTINGS of a length not a multiple of 6")
        for offset in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, offset)
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise Broken(FLOW_CONTROL_ERROR, "an initial window over 2^31-1")
                delta = value - self._peer_window
                self._peer_window = value
                for stream in self.streams.values():
                    stream.window += delta
                    if stream.window > MAX_WINDOW:
                        raise Broken(FLOW_CONTROL_ERROR, "a stream's window overflows")
                if delta > 0:
                    for stream in list(self.blocked.values()):
                        self._flush(stream)
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not MAX_FRAME <= value <= 2**24 - 1:
                    raise Broken(PROTOCOL_ERROR, "a max frame size out of range")
                self._peer_frame = value
            elif key == SETTINGS_ENABLE_PUSH:
                if value > 1:
                    raise Broken(PROTOCOL_ERROR, "ENABLE_PUSH other than 0 or 1")
            # The others bind what we send: our header blocks use no
            # dynamic table and stay small, and we open no stream.
        self._out.write(frame(SETTINGS, ACK, 0))

    def _ping(self, id: int, flags: int, payload: bytes) -> None:
        if id != 0:
            raise Broken(PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise Broken(FRAME_SIZE_ERROR, "PING of another length than 8")
        if flags & ACK:
            if payload == self.ping_pending:
                self.ping_pending = None
            return
        self.control += 1
        self._out.write(frame(PING, ACK, 0, payload))

    def _rst_stream(self, id: int, payload: bytes) -> None:
        if id == 0:
            raise Broken(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise Broken(FRAME_SIZE_ERROR, "RST_STREAM of another length than 4")
        if id > self.last_stream:
            raise Broken(PROTOCOL_ERROR, "RST_STREAM on an idle stream")
        self.control += 1
        stream = self.streams.get(id)
        if stream is not None:
            self._close(stream)

    def _priority(self, id: int, payload: bytes) -> None:
        if id == 0:
            raise Broken(PROTOCOL_ERROR, "PRIORITY on stream 0")
        self.control += 1
        if len(payload) != 5:
            self._out.write(frame(RST_STREAM, 0, id, _U32.pack(FRAME_SIZE_ERROR)))
            return
        if _U32.unpack_from(payload)[0] & 0x7FFFFFFF == id:
            self._out.write(frame(RST_STREAM, 0, id, _U32.pack(PROTOCOL_ERROR)))

    def _goaway(self, id: int, payload: bytes) -> None:
        if id != 0:
            raise Broken(PROTOCOL_ERROR, "GOAWAY on a stream")
        if len(payload) < 8:
            raise Broken(FRAME_SIZE_ERROR, "GOAWAY shorter than 8")
        # The peer opens no more streams; those open are answered, then it
        # closes (or we do once none is left).
        self.going_away = True
        if not self.streams:
            self._out.loseConnection()

    # Flow control of what the door has consumed.

    def give_back(self, length: int) -> None:
        """C{length} bytes of DATA have been consumed: open the connection's window again."""
        if length <= 0 or self._ended:
            return
        self._unacknowledged += length
        if self._unacknowledged >= CONNECTION_WINDOW // 4:
            self._out.write(frame(WINDOW_UPDATE, 0, 0, _U32.pack(self._unacknowledged)))
            self._receive_window += self._unacknowledged
            self._unacknowledged = 0

    # Frames out, for the door.

    def send(self, stream: Stream, headers: bytes | None, data: bytes, trailers: bytes | None) -> None:
        """
        Send on C{stream}: its response headers (once), DATA, and trailers
        that end it. DATA waits for the stream's and the connection's
        windows; the trailers wait behind it.
        """
        if stream.closed or self._ended:
            return
        out = []
        if headers is not None and not stream.headers_sent:
            stream.headers_sent = True
            if not data and trailers is None:
                out.append(frame(HEADERS, END_HEADERS, stream.id, headers))
            elif not data and trailers is not None and not stream.pending:
                # Trailers only: one HEADERS block ends the stream.
                self._out.write(
                    frame(HEADERS, END_HEADERS | END_STREAM, stream.id, headers + trailers)
                )
                self._finished(stream)
                return
            else:
                out.append(frame(HEADERS, END_HEADERS, stream.id, headers))
        if data:
            length = len(data)
            if (
                not stream.pending
                and length <= stream.window
                and length <= self._send_window
                and length <= self._peer_frame
            ):
                stream.window -= length
                self._send_window -= length
                out.append(frame(DATA, 0, stream.id, data))
            else:
                if stream.pending is None:
                    stream.pending = deque()
                stream.pending.append(data)
                stream.pending_bytes += length
        if trailers is not None:
            if stream.pending:
                stream.trailers = trailers
            else:
                out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream.id, trailers))
                self._out.write(b"".join(out))
                self._finished(stream)
                return
        if out:
            self._out.write(b"".join(out))
        if stream.pending:
            self.blocked[stream.id] = stream
            self._flush(stream)

    def _flush(self, stream: Stream) -> None:
        """Send what waits on C{stream} as far as the windows let it."""
        pending = stream.pending
        out = []
        while pending and stream.window > 0 and self._send_window > 0:
            data = pending[0]
            room = min(stream.window, self._send_window, self._peer_frame)
            if len(data) > room:
                pending[0] = data[room:]
                data = data[:room]
            else:
                pending.popleft()
            stream.window -= len(data)
            self._send_window -= len(data)
            stream.pending_bytes -= len(data)
            out.append(frame(DATA, 0, stream.id, data))
            stream.stalled = 0.0
        finished = False
        if not pending:
            self.blocked.pop(stream.id, None)
            if stream.trailers is not None:
                out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream.id, stream.trailers))
                stream.trailers = None
                finished = True
        if out:
            self._out.write(b"".join(out))
        if finished:
            self._finished(stream)

    def _finished(self, stream: Stream) -> None:
        """Our side is over: the stream closes (told to stop sending, if it has not)."""
        if not stream.remote_closed:
            # Answered before the request ended (a refusal): the peer need
            # send no more (RFC 9113 §8.1).
            self._out.write(frame(RST_STREAM, 0, stream.id, _U32.pack(NO_ERROR)))
            self._reset.append(stream.id)
        self._close(stream)

    def reset(self, stream: Stream, code: int) -> None:
        """End C{stream} with RST_STREAM C{code}."""
        if stream.closed or self._ended:
            return
        self._out.write(frame(RST_STREAM, 0, stream.id, _U32.pack(code)))
        self._reset.append(stream.id)
        self._close(stream)

    def _close(self, stream: Stream) -> None:
        if stream.closed:
            return
        stream.closed = True
        self.streams.pop(stream.id, None)
        self.blocked.pop(stream.id, None)
        self.give_back(stream.consumed)
        stream.consumed = 0
        self._door.ended(self, stream)
        if self.going_away and not self.streams and not self._ended:
            self._out.loseConnection()

    def goaway(self, code: int, why: str = "") -> None:
        """
        Send GOAWAY: with NO_ERROR, streams open are still answered and the
        connection closes once none is left; with an error, it closes now.
        """
        if self._ended:
            return
        debug = why.encode("utf-8", "replace")[:256] if code != NO_ERROR else b""
        if not self.going_away or code != NO_ERROR:
            self._out.write(frame(GOAWAY, 0, 0, _GOAWAY.pack(self.last_stream, code) + debug))
        self.going_away = True
        if code != NO_ERROR or not self.streams:
            self._ended = True
            self._out.loseConnection()

    def ping(self, opaque: bytes) -> None:
        """Send a keepalive PING; its ACK clears L{ping_pending}."""
        if not self._ended:
            self.ping_pending = opaque
            self._out.write(frame(PING, 0, 0, opaque))

    def abort(self) -> None:
        """Close the connection now, whatever is in flight."""
        self._ended = True
        self._out.abortConnection()


__all__ = [
    "CONNECTION_WINDOW",
    "H2Connection",
    "IStreams",
    "MAX_CONTROL",
    "MAX_FRAME",
    "MAX_HEADER_BLOCK",
    "MAX_HEADER_LIST",
    "PREFACE",
    "Stream",
    "frame",
]
