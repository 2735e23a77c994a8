"""
A WebSocket connection of the A2A binding once it is open: messages in
through autobahn's streaming callbacks (or the factory's plain-frame
reader), each text message one JSON-RPC request checked in the binding's
order and run by the dispatcher, answers and stream events out, the
transport's backpressure, and the frame, idle and close timers on the
factory's clock.
"""

from __future__ import annotations

from collections import deque
from typing import Any, cast

from autobahn.websocket.utf8validator import Utf8Validator
from twisted.internet.interfaces import IConsumer, IDelayedCall, IPushProducer
from twisted.logger import Logger
from zope.interface import implementer

from beacon.bindings.admission import Admission
from beacon.bindings.admission import TURN_BYTES, TURN_MESSAGES, Turns
from beacon.bindings.websocket._errors import (
    ID_PREFIX,
    FrameTooLargeError,
    InFlightLimitError,
    StreamLaggedError,
    UnauthenticatedError,
    binary_error,
    prefix_id,
    rate_error,
    rate_answer,
)
from beacon.bindings.websocket._frames import (
    AutobahnFrames,
    IFrameIO,
    Message,
    frame_head_size,
    frame_size,
)
from beacon.bindings.websocket._upgrade import UpgradeProtocol
from beacon.protocol import (
    A2AError,
    IStreamSink,
    JSONParseError,
    RequestId,
    StreamAnswer,
    dumps,
    failure,
    loads,
    parse_request,
    request_id_of,
    success,
    version_supported,
)

log = Logger()

#: The marker frame's result after a stream's last event.
STREAM_COMPLETE = {"status": "stream_complete"}

#: What one message costs of a connection's turn (L{TURN_BYTES} a turn),
#: beside its bytes: at most L{TURN_MESSAGES} messages a turn.
MESSAGE_COST = TURN_BYTES // TURN_MESSAGES

#: Seconds Beacon waits for the peer's close after sending its own
#: (autobahn's default close handshake timeout).
CLOSE_TIMEOUT = 1.0


def network_producer(transport: Any) -> IPushProducer | None:
    """
    What reads the connection's bytes: the transport itself, or the one
    under a TLS wrapper (which does not pause reading on its own).
    """
    while transport is not None and not IPushProducer.providedBy(transport):
        transport = getattr(transport, "transport", None)
    return transport


@implementer(IStreamSink)
class FrameSink:
    """
    Frames one stream's events on its connection, then the
    C{stream_complete} marker, or an error frame when it fails.
    """

    def __init__(self, connection: WebSocketA2AProtocol, request_id: RequestId) -> None:
        self.connection = connection
        self.id = request_id
        self.queued = 0
        self.done = False

    def event(self, result: Any) -> None:
        if not self.done:
            self.connection.send_frame(success(self.id, result), self)

    def end(self) -> None:
        if not self.done:
            self.connection.send_frame(success(self.id, STREAM_COMPLETE), self)
            self.connection.stream_ended(self)

    def fail(self, error: A2AError) -> None:
        if not self.done:
            self.connection.send_frame(failure(self.id, error), self)
            self.connection.stream_ended(self)


def invalid_utf8(connection: WebSocketA2AProtocol, payload: bytes) -> bool:
    """
    Whether a text message is not UTF-8; if so fail its connection with
    close 1007 (RFC 6455 8.1), saying so as autobahn says it when it
    checks a message itself.
    """
    valid, whole, _, index = Utf8Validator().validate(payload)
    if valid and whole:
        return False
    if valid:
        reason = f"UTF-8 text message payload ended within Unicode code point at payload octet index {index}"
    else:
        reason = f"encountered invalid UTF-8 while processing text message at payload octet index {index}"
    connection.log.warn('failing WebSocket connection (code={code}): "{reason}"', code=1007, reason=reason)
    connection.sendCloseFrame(1007, reason.encode("utf-8"))
    return True


@implementer(IPushProducer)
class WebSocketA2AProtocol(UpgradeProtocol):
    """
    One WebSocket connection of the A2A binding, once open (the upgrade is
    L{UpgradeProtocol}'s): each text message as one JSON-RPC request, the
    answers and stream events as text frames.

    Messages arrive through autobahn's streaming callbacks
    (L{onMessageBegin}, L{onMessageFrameBegin}, L{onMessageFrameData},
    L{onMessageFrameEnd}, L{onMessageEnd}), which tell a frame's length
    before its payload: a message is kept up to C{[limits] max_body}, past
    it only its first L{ID_PREFIX} bytes, so a connection never holds more
    than C{max_body} (and one read) of what it receives. Where autobahn
    holds nothing, the factory's L{IFrameIO} may read plain frames first;
    answers go out through it too.

    Autobahn's close handshake timeout, which would run on the global
    reactor, is off: a close sent (by Beacon or by autobahn) is timed on
    the factory's clock and ended as autobahn's timeout ends it
    (L{onCloseHandshakeTimeout}). A frame begun and not finished within
    C{frame_timeout} ends the connection (close 1008); so does an idle one
    (1000).

    It is its transport's push producer: when the transport's buffer is
    full it stops reading, holds what it had read but not yet given to
    autobahn (and the messages autobahn completed meanwhile), and holds
    outgoing frames (each stream's up to C{stream_queue}), so a peer that
    does not read costs bounded memory.

    It takes fair turns (L{beacon.bindings.admission._turns}): in one turn of the
    reactor it works through at most the factory's C{turn_bytes} of
    frames, each whole message counting L{MESSAGE_COST} beside its bytes;
    then it stops reading and holds the rest of the read (and the messages
    autobahn completed meanwhile) until a later turn.
    """

    def __init__(self) -> None:
        super().__init__()
        self._closing = False
        self._close_code: int | None = None
        self._in_flight = 0
        self._streams: dict[FrameSink, StreamAnswer] = {}
        self._paused = False
        self._pending: deque[tuple[FrameSink | None, bytes]] = deque()
        self._close_wait: IDelayedCall | None = None
        self._idle: IDelayedCall | None = None
        self._active_at = 0.0
        # What was read and not yet given to autobahn (C{_held}, from
        # C{_held_at} on), held while the transport is full or the
        # connection has yielded its turn; the messages autobahn completed
        # meanwhile.
        self._held = b""
        self._held_at = 0
        self._messages: deque[Message] = deque()
        self._frames: IFrameIO = AutobahnFrames()
        # Bytes given to autobahn that no frame has accounted for yet (a
        # frame head still arriving), whether a frame's payload or a
        # fragmented message is still arriving, and whether a frame
        # completed since the last read.
        self._unread = 0
        self._in_frame = False
        self._in_message = False
        self._progress = False
        # Where autobahn is in the frames given to it: the bytes of the
        # frame under way still to give, or the first bytes of a frame head
        # given (see L{_frame_piece}).
        self._frame_rest = 0
        self._head_part = b""
        self._arrival: IDelayedCall | None = None
        # The message arriving.
        self._binary = False
        self._size = 0
        self._wire = 0
        self._parts: list[bytes] = []
        self._kept = 0
        self._prefix: bytearray | None = None
        self._turns: Turns | None = None

    def connectionMade(self) -> None:
        """Connected: this connection's turns are timed on the factory's clock."""
        factory = self.factory
        self._turns = Turns(
            factory.clock, factory.turn_bytes, self._take_input, factory.ledger
        )
        super().connectionMade()

    def onOpen(self) -> None:
        """The upgrade succeeded: produce for the transport, start the idle timer."""
        super().onOpen()
        factory = self.factory
        self._frames = factory.frames
        factory.connections.add(self)
        cast(IConsumer, self.transport).registerProducer(self, True)
        supported = version_supported(self.parameters.get("a2a-version"))
        log.info(
            "ws.connected: {source} (A2A-Version {version})",
            source=self.source,
            version="1.0" if supported else "missing or unsupported",
        )
        timeout = factory.options.idle_timeout
        if timeout:
            self._active_at = factory.clock.seconds()
            self._idle = factory.clock.callLater(timeout, self._idle_check)

    # Frames.

    def frames_received(self, data: bytes) -> None:
        """
        Read what arrived (see L{_feed}) in this connection's new turn, or
        hold it while the transport is full or the connection has yielded.
        """
        turns = self._turns
        assert turns is not None
        if self._paused or self._held or turns.paused:
            self._hold(data, 0)
        else:
            turns.start()
            self._feed(data, 0)

    def _hold(self, data: bytes, at: int) -> None:
        """Keep C{data[at:]}, after what is held already, for later."""
        if self._held:
            self._held = self._held[self._held_at :] + data[at:]
            self._held_at = 0
        else:
            self._held, self._held_at = data, at

    def _feed(self, data: bytes, at: int) -> None:
        """
        Read C{data} until the transport is full or this turn's share is
        spent (the rest is held until it drains, or until a later turn):
        where autobahn holds nothing, the plain frames that the
        connection's L{IFrameIO} reads; anything else is given to autobahn
        a frame at a time (L{_frame_piece}), no more of it than the turn
        has left, so that autobahn completes at most one message or control
        frame before the turn's share is counted again. Then time a frame
        that is left incomplete.
        """
        size = len(data)
        frames = self._frames
        turns = self._turns
        assert turns is not None
        cap = min(self.factory.limits.max_body, self.factory.options.max_message)
        while at < size:
            if self._paused or turns.paused:
                self._hold(data, at)
                break
            if not (self._unread or self._in_frame or self._in_message or self._closing):
                found = frames.read_frame(data, at, cap)
                if found is not None:
                    message, at = found
                    self._progress = True
                    self._handle(message)
                    # L{_spend}, inline: a plain message's cost of the turn.
                    turns.left -= MESSAGE_COST + message.wire
                    if turns.left <= 0 and (at < size or self._messages or self._held):
                        self._yield_turn()
                    continue
            take = self._frame_piece(data, at)
            if not self._head_part:  # (a head is given whole, however little is left)
                take = min(take, max(turns.left, 1))
            piece = data[at : at + take] if at or size > take else data
            at += len(piece)
            self._unread += len(piece)
            if self._frame_rest:
                self._frame_rest -= len(piece)
            self.to_autobahn(piece)
            self._spend(len(piece), at < size)
        self._time_arrival()

    def _frame_piece(self, data: bytes, at: int) -> int:
        """
        How many of the bytes from C{data[at:]} belong to the frame
        autobahn is reading (or begins there): the rest of its size, as its
        head says (RFC 6455 5.2), or all of them while its head is not all
        there.
        """
        if self._frame_rest:
            return min(self._frame_rest, len(data) - at)
        part = self._head_part
        head = part + data[at : at + 14]
        whole = frame_size(head)
        if whole is None:
            self._head_part = head
            return len(data) - at
        self._head_part = b""
        self._frame_rest = whole - len(part)
        return min(self._frame_rest, len(data) - at)

    def _spend(self, cost: int, more: bool) -> None:
        """
        Count C{cost} against this turn's share; once it is spent and
        C{more} was read (or messages are held), yield: stop reading until
        a later turn (L{_take_input}).
        """
        turns = self._turns
        assert turns is not None
        if not turns.spend(cost) and (more or self._messages or self._held):
            self._yield_turn()

    def _yield_turn(self) -> None:
        """This turn's share is spent and more is waiting: stop reading until a later turn."""
        turns = self._turns
        assert turns is not None
        if not turns.paused:
            turns.pause()
            producer = network_producer(self.transport)
            if producer is not None:
                producer.pauseProducing()

    def onMessageBegin(self, isBinary: bool) -> None:
        """A message begins: nothing of it is kept yet."""
        super().onMessageBegin(isBinary)
        self._in_message = True
        self._binary = isBinary
        self._size = 0
        self._wire = 0
        self._parts = []
        self._kept = 0
        self._prefix = None

    def onMessageFrameBegin(self, length: int) -> None:
        """
        A frame of C{length} payload bytes begins (autobahn ends a message
        over C{max_message} here, with close 1009). Once the message is
        over C{max_body}, only its first L{ID_PREFIX} bytes are kept.
        """
        super().onMessageFrameBegin(length)
        head = frame_head_size(length)
        self._unread -= head
        self._wire += head + length
        self._in_frame = True
        if self._closing:
            return
        self._size += length
        if self._prefix is None and self._size > self.factory.limits.max_body:
            self._prefix = bytearray(b"".join(self._parts)[:ID_PREFIX])
            self._parts = []
            self._kept = len(self._prefix)

    def onMessageFrameData(self, payload: bytes) -> None:
        """Keep the payload up to max_body; past it, only the message's first bytes."""
        self._unread -= len(payload)
        if self._closing:
            return
        prefix = self._prefix
        if prefix is None:
            self._parts.append(payload)
            self._kept += len(payload)
        elif len(prefix) < ID_PREFIX:
            prefix += payload[: ID_PREFIX - len(prefix)]
            self._kept = len(prefix)

    def onMessageFrameEnd(self) -> None:
        """A frame is whole: the frame timer starts again from here."""
        self._in_frame = False
        self._progress = True

    def onMessageEnd(self) -> None:
        """
        The message is whole: handle it, or, while the transport is full,
        hold it until it drains.
        """
        message = Message(
            self._binary,
            b"".join(self._parts) if self._prefix is None else None,
            None if self._prefix is None else bytes(self._prefix),
            self._wire,
        )
        self._parts = []
        self._kept = 0
        self._prefix = None
        self._in_message = False
        if self._closing:
            return
        turns = self._turns
        assert turns is not None
        if self._paused or self._messages or turns.paused:
            self._messages.append(message)
            return
        self._handle(message)
        turns.spend(MESSAGE_COST)

    def onPing(self, payload: bytes) -> None:
        """A ping is whole (autobahn answers it)."""
        self._control_frame(payload)
        super().onPing(payload)

    def onPong(self, payload: bytes) -> None:
        """A pong is whole."""
        self._control_frame(payload)
        super().onPong(payload)

    def _control_frame(self, payload: bytes) -> None:
        self._unread -= frame_head_size(len(payload)) + len(payload)
        self._progress = True
        turns = self._turns
        assert turns is not None
        turns.spend(MESSAGE_COST)

    def _time_arrival(self) -> None:
        """
        Time a frame that a read left incomplete (not one held because the
        transport is full): from the first such read, reset whenever a
        frame completes.
        """
        waiting = (
            not self._paused and not self._closing and (self._unread > 0 or self._in_frame)
        )
        progress, self._progress = self._progress, False
        if not waiting:
            if self._arrival is not None:
                self._cancel_arrival()
            return
        timeout = self.factory.options.frame_timeout
        if not timeout:
            return
        if self._arrival is None:
            self._arrival = self.factory.clock.callLater(timeout, self._arrival_expired)
        elif progress:
            self._arrival.reset(timeout)

    def _cancel_arrival(self) -> None:
        self._cancel(self._arrival)
        self._arrival = None

    def _arrival_expired(self) -> None:
        self._arrival = None
        if not self._opened or self._closing:
            return
        seconds = self.factory.options.frame_timeout
        source = self.source
        self.factory.limits.refusals["request_timeout"] += 1
        self.factory.events.note(
            "ws.frame_timeout",
            "",
            lambda: log.info(
                "ws.frame_timeout: closed the connection of {source}: a frame "
                "took more than {seconds} s",
                source=source,
                seconds=seconds,
            ),
        )
        self.sendCloseFrame(1008, b"frame timeout")

    def sendCloseFrame(
        self, code: int | None = None, reasonUtf8: bytes | None = None, isReply: bool = False
    ) -> None:
        """
        Send a close frame (L{sendClose} allows applications only 1000 and
        3000-4999; Beacon also ends connections with 1001 and 1008, and
        autobahn with its protocol errors), then wait, on the clock, at
        most L{CLOSE_TIMEOUT} for the peer's own close before dropping the
        connection as autobahn's close handshake timeout would.
        """
        first = self._opened and not self._closing
        super().sendCloseFrame(code, reasonUtf8, isReply)
        if not first:
            return
        self._closing = True
        self._close_code = code
        self._cancel_arrival()
        if not isReply:
            self._close_wait = self.factory.clock.callLater(CLOSE_TIMEOUT, self._close_expired)

    def _close_expired(self) -> None:
        self._close_wait = None
        self.onCloseHandshakeTimeout()

    # Requests.

    def _handle(self, message: Message) -> None:
        """
        One whole message: the transport limits and the credential, refused
        without parsing it (the id is read from its first L{ID_PREFIX}
        bytes); then the envelope, the in-flight cap and the dispatcher.
        """
        if self._closing or not self._opened:
            return  # Beacon is closing it: nothing more is run.
        factory = self.factory
        self._active_at = factory.clock.seconds()  # (L{_touch})
        payload = message.payload
        limits = factory.limits
        admission = limits.rate.admit(self.source)
        if admission.retry_after:
            # Over the rate (L{_admit}'s log line), refused: a flood's
            # commonest refusal, from an answer made once per wait.
            if admission.first_refusal:
                self._log_rate_limited()
            limits.refusals["rate_limited"] += 1
            self.send_data(rate_answer(self._refused_id(message), admission.retry_after))
            return
        if payload is None or message.binary or limits.auth.enabled:
            error = self._check(admission, message.binary, payload is None)
            if error is not None:
                self._refuse(self._refused_id(message), error)
                return
        assert payload is not None
        self._request(payload)

    @staticmethod
    def _refused_id(message: Message) -> RequestId:
        """The id of a message refused unparsed, read from its first bytes (null for binary)."""
        payload = message.payload
        first = message.prefix if payload is None else payload[:ID_PREFIX]
        return None if message.binary or first is None else prefix_id(first)

    def _check(self, admission: Admission, binary: bool, too_large: bool) -> A2AError | None:
        """
        The refusal due before a message is parsed, in the binding's order:
        rate, binary, size, credential; None when it may be parsed.
        """
        if not admission.admitted:
            return rate_error(admission)
        if binary:
            return binary_error()
        if too_large:
            return self._too_large_error()
        auth = self.factory.limits.auth
        if auth.enabled and not auth.admits(
            self.parameters.get("authorization"), self.parameters.get("x-api-key")
        ):
            return UnauthenticatedError(metadata={"www-authenticate": auth.challenge()})
        return None

    def _request(self, payload: bytes) -> None:
        """
        A text message that passed L{_check}: parse it and run it. One whose
        payload is not UTF-8 fails the connection (close 1007, RFC 6455
        8.1), as autobahn would.
        """
        factory = self.factory
        try:
            request = parse_request(loads(payload))
        except A2AError as error:
            if isinstance(error, JSONParseError) and invalid_utf8(self, payload):
                return
            self._refuse(request_id_of(error), error)
            return
        answer_id = None if request.notification else request.id
        if self._in_flight >= factory.options.max_in_flight:
            self._refuse(
                answer_id,
                InFlightLimitError(
                    f"{factory.options.max_in_flight} requests are in progress on "
                    "this connection; wait for an answer"
                ),
            )
            return
        assert self._context is not None
        self._in_flight += 1
        factory.dispatcher.call(request, self._context, self._answered)

    def _too_large_error(self) -> FrameTooLargeError:
        limit = self.factory.limits.max_body
        source = self.source
        self.factory.events.note(
            "ws.too_large",
            "",
            lambda: log.warn(
                "ws.too_large: refused a frame over {limit} bytes from {source}",
                limit=limit,
                source=source,
            ),
        )
        return FrameTooLargeError(
            f"The request exceeds {limit} bytes", metadata={"limit": str(limit)}
        )

    def _refuse(self, request_id: RequestId, error: A2AError) -> None:
        self.factory.limits.refusals.error(error.reason)
        self.send_frame(failure(request_id, error))

    def _answered(self, response: dict[str, Any] | StreamAnswer | None) -> None:
        # Guarded here, not by an errback: one step less on every request's
        # way back (Dispatcher.call itself never fails).
        try:
            if isinstance(response, StreamAnswer):
                if not self._opened or self._closing:
                    response.stream.cancel()
                    self._finished()
                    return
                sink = FrameSink(self, response.id)
                self._streams[sink] = response
                response.stream.attach(sink)
                return
            if response is not None:
                self.send_data(dumps(response))  # (L{send_frame})
        except Exception:
            log.failure("ws.response_failed")
        self._in_flight -= 1  # (L{_finished})

    def _finished(self) -> None:
        self._in_flight -= 1

    @property
    def requests_in_flight(self) -> int:
        """The requests in progress on this connection (a stream until it ends)."""
        return self._in_flight

    # Outgoing frames and backpressure.

    def send_frame(self, response: dict[str, Any], sink: FrameSink | None = None) -> None:
        """
        Send one JSON-RPC response, or hold it while the transport is full.
        A stream with more than C{stream_queue} held frames is ended as
        lagged.
        """
        self.send_data(dumps(response), sink)

    def send_data(self, data: bytes, sink: FrameSink | None = None) -> None:
        """L{send_frame}, of a response already encoded."""
        if not self._opened or self._closing:
            return
        if not self._paused and not self._pending:
            self._frames.write_text(self, data)
            return
        if sink is not None:
            sink.queued += 1
            if sink.queued > self.factory.options.stream_queue:
                self._lagged(sink)
                return
        self._pending.append((sink, data))

    def _lagged(self, sink: FrameSink) -> None:
        # The frames already held are sent; nothing more of the stream is.
        log.warn(
            "ws.stream_lagged: ended a stream of {source} that fell {queued} "
            "frames behind",
            source=self.source,
            queued=sink.queued,
        )
        error = StreamLaggedError(metadata={"streamLagged": "true"})
        self._pending.append((None, dumps(failure(sink.id, error))))
        self.stream_ended(sink)

    def stream_ended(self, sink: FrameSink) -> None:
        """A stream is over (ended, failed, lagged): it is no longer in progress."""
        if sink.done:
            return
        sink.done = True
        answer = self._streams.pop(sink, None)
        if answer is not None:
            answer.stream.cancel()
        self._finished()

    def pauseProducing(self) -> None:
        """
        The transport is full: hold frames, stop reading the connection and
        stop giving autobahn what was read.
        """
        self._paused = True
        self._cancel_arrival()  # What is not read now is not the peer's delay.
        producer = network_producer(self.transport)
        if producer is not None:
            producer.pauseProducing()

    def resumeProducing(self) -> None:
        """
        The transport drained: send what was held, handle the messages
        held, give autobahn what was read, and read again, unless it
        filled again meanwhile.
        """
        self._paused = False
        while self._pending and not self._paused:
            sink, data = self._pending.popleft()
            if sink is not None:
                sink.queued -= 1
            if self._opened and not self._closing:
                self._frames.write_text(self, data)
        turns = self._turns
        assert turns is not None
        if not turns.paused:
            self._take_input()

    def _take_input(self) -> None:
        """
        Work through what was held (the messages autobahn completed, then
        the bytes read), as far as this turn's share goes; then read again,
        unless the transport filled or the turn's share was spent.
        """
        turns = self._turns
        assert turns is not None
        messages = self._messages
        while messages and not self._paused and not turns.paused:
            message = messages.popleft()
            self._handle(message)
            self._spend(MESSAGE_COST, False)
        if not self._paused and not turns.paused and self._held:
            data, at = self._held, self._held_at
            self._held, self._held_at = b"", 0
            self._feed(data, at)
        elif self._opened:
            self._time_arrival()
        if not self._paused and not turns.paused:
            producer = network_producer(self.transport)
            if producer is not None:
                producer.resumeProducing()

    def stopProducing(self) -> None:
        """The transport is going away; L{onClose} cleans up."""

    @property
    def held_input(self) -> int:
        """Bytes received and held, not yet answered: for the memory bound."""
        return (
            len(self._held)
            - self._held_at
            + max(self._unread, 0)
            + self._kept
            + sum(message.wire for message in self._messages)
        )

    @property
    def held_output(self) -> int:
        """Bytes of answers held while the transport is full."""
        return sum(len(data) for _, data in self._pending)

    # Idle timeout and the end.

    def _idle_check(self) -> None:
        self._idle = None
        if not self._opened or self._closing:
            return
        clock = self.factory.clock
        timeout = self.factory.options.idle_timeout
        quiet = clock.seconds() - self._active_at
        if self._in_flight or quiet < timeout:
            wait = timeout if self._in_flight else timeout - quiet
            self._idle = clock.callLater(wait, self._idle_check)
            return
        log.info("ws.idle_closed: closed the idle connection of {source}", source=self.source)
        self.sendClose(1000, "idle")

    def going_away(self, code: int = 1001, reason: str = "going away") -> None:
        """Close the connection, if it is open, with C{code} (Beacon is stopping)."""
        if self._opened and not self._closing:
            self.sendCloseFrame(code, reason.encode("utf-8"))

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        """
        The connection is gone: cancel its streams and timers, free its
        slot.
        """
        for call in (self._close_wait, self._idle):
            self._cancel(call)
        self._close_wait = self._idle = None
        if self._turns is not None:
            self._turns.stop()
        self._cancel_arrival()
        self._held, self._held_at = b"", 0
        self._messages.clear()
        self._parts = []
        self._kept = 0
        self._prefix = None
        for sink in list(self._streams):
            self.stream_ended(sink)
        self._pending.clear()
        super().onClose(wasClean, code, reason)
        self.factory.connections.discard(self)
        if self._opened:
            self._opened = False
            log.info(
                "ws.closed: {source} closed (code {code})",
                source=self.source,
                code=self._close_code or code or "none",
            )


__all__ = [
    "CLOSE_TIMEOUT",
    "STREAM_COMPLETE",
    "FrameSink",
    "WebSocketA2AProtocol",
    "network_producer",
]
