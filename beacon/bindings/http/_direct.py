"""
The direct channel: Beacon's own HTTP/1.1 connection handler for the
requests that make up nearly all of its traffic, in front of twisted.web.

A L{BeaconSite} connection starts as a L{DirectChannel}. For each request
it reads the head at once (one search for the blank line, two regular
expressions over the header block, whose reading is kept for the next
request with the same head: L{read_head}), and when the request is
I{plain} it renders the addressed resource itself, with a
L{DirectRequest}:

    - the request line is C{GET}, C{HEAD} or C{POST}, an origin-form path
      without percent-escapes or empty segments (C{/} itself aside), and
      C{HTTP/1.1};
    - every header line is a token, a colon and a value of visible
      characters (no obs-fold, no control characters), at most
      C{MAX_HEADERS} lines and C{MAX_HEAD} bytes in all;
    - there is exactly one C{Host} line and no C{Transfer-Encoding},
      C{Expect} or C{Upgrade}; a POST declares one C{Content-Length}
      within the site's C{max_body}, a GET or HEAD none (or 0); a
      declared length over C{max_body} is refused first (see below);
    - the path leads through Beacon's own L{Container}s (whose children
      are in C{children} and nowhere else) to a resource that provides
      L{IDirectResource}: one whose C{render} takes any L{IDirectRequest};
      a leaf takes the rest of the path as its C{postpath}, as twisted.web
      gives it (the HTTP+JSON binding's routes under C{/a2a/rest}).

Anything else, from the first request that is not plain onwards, is
handed over: the connection's bytes go to twisted.web's L{HTTPChannel}
(with L{BeaconSite}'s limits and deadlines), which decides and answers as
it always has: every request whose framing headers are missing, repeated
or unusual is decided there, by one code path. The hand-over waits for a
request in flight, so answers keep their order. What the direct channel
answers is what twisted.web would answer for the same request, header for
header (the C{Date} excepted, which it takes from the site's clock): a test
sends the same requests both ways and compares the bytes, and the HTTP and
WebSocket test suites run once with the direct channel and once without
(C{pytest --http-path=twisted.web}). It is switched off with C{[server]
direct = false} (or C{BeaconSite(direct=False)}).

One answer differs, on purpose. A C{GET}, C{HEAD} or C{POST} whose request
line and head are plain as above and whose declared C{Content-Length} is
over C{max_body} by at most L{DISCARD_MAX} is refused here, whatever its
path (the site's cap is decided before any resource, as twisted.web's
request decides it): 413 C{too_large} at once, before any of the body,
with the body twisted.web's request would send (in the shape of the door
the path belongs to; none to a C{HEAD}) but a direct answer's headers
(C{Server}, C{Date}, no C{Connection: close} unless the request asked to
close), counted and logged as twisted.web's refusal is; then the declared
body is read and dropped as it arrives, never buffered, and the connection
serves the next request. A 413 costs no new connection, as Go's net/http
and nginx drop an unread body to keep theirs. A longer declared body, a
body without a declared length (chunked) that grows over the cap, and any
request on twisted.web's path (C{direct = false}, or a connection already
handed over) are answered 413 by twisted.web's request, which closes the
connection.

Its own limits are the site's: the head must arrive within
C{header_timeout} of its first byte and the body within C{body_timeout}
of the head (408 and close otherwise; a refused body being dropped is
closed without a second answer); a silent connection is closed after
the idle timeout; while a request is in flight at most C{MAX_HEAD} +
C{max_body} bytes more are buffered before reading pauses; while the peer
does not read its answers, no further request is read.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Protocol as TypingProtocol

from twisted.internet.interfaces import IPushProducer, IReactorTime, ITCPTransport
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from beacon.bindings.http._direct_request import (
    DirectRequest,
    HeadAnswer,
    IHeadGate,
    direct_resource,
    http_date,
)
from beacon.bindings.admission import (
    JSON_TYPE,
    MAX_HEAD,
    MAX_HEADERS,
    connection_tokens,
    field_lines,
    log_slow,
    refusal_body,
    refusal_shape,
    refuse_slow,
)
from beacon.bindings.admission import TURN_REQUESTS, Turns


log = Logger()

#: Seconds a closing connection may take to drain before it is aborted.
ABORT_TIMEOUT = 15.0

#: The most bytes of a declared body over C{max_body} that the direct
#: channel reads and drops, after answering 413, to keep the connection
#: (256 KiB, as Go's net/http reads of an unread body to reuse its
#: connection; nginx drops refused bodies likewise). A body declared longer
#: is refused by twisted.web, which closes the connection.
DISCARD_MAX = 262144

_REQUEST_LINE = re.compile(
    rb"(GET|HEAD|POST) (/[^ ?#%\x00-\x20\x7f-\xff]*)(\?[^ #\x00-\x20\x7f-\xff]*)? HTTP/1\.1"
)
#: The first bytes of the request lines the direct channel answers.
_METHOD_STARTS = frozenset((b"G", b"H", b"P"))
#: Request headers whose presence hands a request to twisted.web.
_HANDED_OVER = frozenset((b"transfer-encoding", b"expect", b"upgrade"))


class DirectSite(TypingProtocol):
    """
    What a L{DirectChannel} reads of its site (a L{BeaconSite}): the
    resource tree, the clock and the limits.
    """

    resource: Any
    reactor: IReactorTime
    max_body: int
    timeOut: float | None
    header_timeout: float | None
    body_timeout: float | None
    refusals: Any
    turn_requests: int
    ledger: Any
    direct_caches: DirectCaches


_JSON_CONTENT = ((b"Content-Type", JSON_TYPE),)

#: How many whole answers of L{IHeadGate}s (and 413s) the direct channels
#: of a site keep made (each for the second of its C{Date}: a few per answer
#: a flood repeats).
MAX_ANSWERS = 64


#: A request head's field lines as the direct channel reads them: the
#: headers (lower-cased names, each with its values in order), the declared
#: C{Content-Length} (None: none) and whether C{Connection} asks to close.
Head = tuple[dict[bytes, tuple[bytes, ...]], int | None, bool]

#: The longest field block whose reading is kept (L{read_head}), and how
#: many are kept: at most 256 KiB in all.
HEAD_KEPT_SIZE = 1024
MAX_HEADS = 256


class DirectCaches:
    """
    What the direct channels of one site keep made, each bounded: the
    reading of the request heads their clients send again and again
    (L{head}), and the whole answers given from a head (L{answers},
    L{keep_answer}). A
    L{BeaconSite<beacon.bindings.http._site.BeaconSite>} owns one, which its
    channels share.

    @ivar heads: Field blocks and their reading (L{read_head}).
    @ivar answers: The bytes of answers given from a head, by what makes
        them (status, headers, body, the second's C{Date}, closing or not,
        the method; a 413's by the second, path, method and closing).
    """

    def __init__(self) -> None:
        self.heads: dict[bytes, Head | None] = {}
        self.answers: dict[tuple[Any, ...], bytes] = {}

    def head(self, block: bytes) -> Head | None:
        """
        L{read_head}C{(block)}, kept: a client sends the same head, or a
        few, again and again (its C{Content-Length} aside), so the reading
        of a block of at most L{HEAD_KEPT_SIZE} bytes is kept, for at most
        L{MAX_HEADS} blocks, and read again only once the blocks kept are
        forgotten. The values are tuples, shared by every request with
        that head.
        """
        heads = self.heads
        kept = heads.get(block, heads)
        if kept is not heads:
            return kept  # type: ignore[return-value]
        head = read_head(block)
        if len(block) <= HEAD_KEPT_SIZE:
            if len(heads) >= MAX_HEADS:
                heads.clear()
            heads[block] = head
        return head

    def keep_answer(self, key: tuple[Any, ...], response: bytes) -> bytes:
        """Keep C{response} as the answer C{key} names (at most L{MAX_ANSWERS} are kept); return it."""
        answers = self.answers
        if len(answers) >= MAX_ANSWERS:
            answers.clear()
        answers[key] = response
        return response


def read_head(block: bytes) -> Head | None:
    """
    The field lines C{block} of a request head (after the request line's
    line end, up to and including the last line's), when the direct channel
    may answer a request with them: plain lines (L{field_lines}, strict), at
    most L{MAX_HEADERS}, exactly one C{Host}, no C{Transfer-Encoding},
    C{Expect} or C{Upgrade}, at most one C{Content-Length} of digits only;
    otherwise None (the request is handed over). Read every time: the
    channels read through their site's L{DirectCaches.head}.
    """
    lines = field_lines(block, strict=True)
    if lines is None or len(lines) > MAX_HEADERS:
        return None
    gathered: dict[bytes, list[bytes]] = {}
    for name, value in lines:
        name = name.lower()
        if name in gathered:
            gathered[name].append(value)
        else:
            gathered[name] = [value]
    declared = gathered.get(b"content-length")
    hosts = gathered.get(b"host")
    if (
        hosts is None
        or len(hosts) != 1
        or not _HANDED_OVER.isdisjoint(gathered)
        or (declared is not None and (len(declared) != 1 or not declared[0].isdigit()))
    ):
        return None
    close = b"close" in connection_tokens(gathered.get(b"connection"))
    headers = {name: tuple(values) for name, values in gathered.items()}
    return headers, None if declared is None else int(declared[0]), close


@implementer(IPushProducer)
class DirectChannel(Protocol):
    """
    A L{BeaconSite} connection: plain requests to direct resources are
    answered here, and the connection is handed to twisted.web's channel at
    the first request that is not (see the module docstring).
    """

    #: A stream transport (TCP, TLS or unix): a producer's consumer too.
    transport: Any

    def __init__(
        self,
        site: DirectSite,
        fallback: Callable[[], Any],
        release: Callable[[], None],
    ) -> None:
        """
        @param site: The site (its resource tree, clock and limits).
        @param fallback: Builds the twisted.web channel for a hand-over.
        @param release: Called when the connection ends: the site counts it
            no longer.
        """
        self._site = site
        self._caches = site.direct_caches
        self._release = release
        self._clock = site.reactor
        self._fallback = fallback
        self.http: Any = None
        #: What was read and not yet worked through: C{_buffer} from
        #: C{_at} on (a request read moves C{_at}, not the bytes after it;
        #: both are emptied once it is all read).
        self._buffer = b""
        self._at = 0
        self._current: DirectRequest | None = None
        self._parsing = False
        self._hand_over_pending = False
        self._write_paused = False
        self._reading_paused = False
        self._closing = False
        #: The arrival deadline (see L{_arm}): the phase that must end
        #: (None: disarmed), when it is due, and the timer.
        self._phase: str | None = None
        self._due = 0.0
        self._deadline: Any = None
        self._idle: Any = None
        self._abort: Any = None
        self._last_activity = 0.0
        #: Bytes of a refused body still to read and drop.
        self._discard = 0
        #: This connection's share of the reactor's turns: at most
        #: C{turn_requests} requests read in one turn (see L{_read_requests}).
        self._turns = Turns(
            self._clock,
            getattr(site, "turn_requests", TURN_REQUESTS),
            self._next_turn,
            getattr(site, "ledger", None),
        )
        #: The peer's address (the transport's, read once: every request
        #: asks for it, and a transport makes a new address object each
        #: time), and its host as refusals name their source.
        self.peer: Any = None
        self._source = "unknown"

    # Connection events.

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.peer = self.transport.getPeer()
        self._source = str(getattr(self.peer, "host", "unknown"))
        if ITCPTransport.providedBy(self.transport):
            # One write per answer: Nagle's algorithm would only delay it.
            self.transport.setTcpNoDelay(True)
        self.transport.registerProducer(self, True)
        self._last_activity = self._clock.seconds()
        if self._site.timeOut:
            self._idle = self._clock.callLater(self._site.timeOut, self._idle_check)

    def dataReceived(self, data: bytes) -> None:
        if self.http is not None:
            self.http.dataReceived(data)
            return
        if self._closing:
            return
        self._last_activity = self._clock.seconds()
        turns = self._turns
        if turns.budget != turns.base:
            turns.start()
        else:  # Turns.start, inline: this connection's new turn.
            turns.ledger.reads += 1
            turns.reads += 1
            if not turns.paused:
                turns.left = turns.budget
        if self._discard:
            # A refused body: dropped as it comes (nothing is buffered
            # meanwhile); what follows it is the next request.
            dropped = min(self._discard, len(data))
            self._discard -= dropped
            if self._discard:
                return
            self._phase = None  # The body's deadline: disarmed.
            if dropped == len(data):
                # Nothing after the body: no request to read (nothing is
                # buffered while a body is dropped), only reading to go on
                # if it was paused (what L{_read_requests} would do).
                if turns.paused or self._reading_paused:
                    self._set_reading()
                return
            data = data[dropped:]
        if self._buffer:
            self._buffer = self._buffer[self._at :] + data
            self._at = 0
        else:
            self._buffer = data
        if self._current is None:
            self._read_requests()
        elif len(self._buffer) - self._at > MAX_HEAD + self._site.max_body:
            self._set_reading()

    def _consumed(self, end: int) -> None:
        """The buffer is read up to C{end}."""
        if end >= len(self._buffer):
            self._buffer = b""
            self._at = 0
        else:
            self._at = end

    def connectionLost(self, reason: Failure | None = None) -> None:
        self._release()
        self._stop_timers()
        if self._abort is not None and self._abort.active():
            self._abort.cancel()
        self._buffer = b""
        self._at = 0
        self._discard = 0
        if self.http is not None:
            self.http.connectionLost(reason)
            return
        current, self._current = self._current, None
        if current is not None:
            current.connection_lost(reason or Failure(ConnectionError("connection lost")))

    # IPushProducer, for the transport's write buffer.

    def pauseProducing(self) -> None:
        """The peer is not reading its answers: read no further request."""
        self._write_paused = True
        self._set_reading()

    def resumeProducing(self) -> None:
        """The answers drained: go on."""
        self._write_paused = False
        self._set_reading()
        if self._current is None and self.http is None:
            self._read_requests()

    def stopProducing(self) -> None:
        """The transport is going away."""

    # Reading requests.

    def _read_requests(self) -> None:
        """
        Read and start the requests the buffer holds, one after another
        while each is answered at once, up to this turn's share (see
        L{beacon.bindings.admission._turns}): then yield, reading nothing more,
        and go on in a later turn of the reactor (L{_next_turn}).
        """
        if self._parsing:
            return
        self._parsing = True
        turns = self._turns
        try:
            while (
                self._buffer
                and self._current is None
                and self.http is None
                and not self._write_paused
                and not self._closing
                and not turns.paused
            ):
                if not self._read_one():
                    break
                turns.left -= 1
                if turns.left <= 0 and self._buffer and self._current is None:
                    turns.pause()
                    break
        finally:
            self._parsing = False
        if self.http is None and not self._closing:
            if self._current is None and not turns.paused:
                self._time_arrival()
            if turns.paused or self._reading_paused:
                # Yielded (reading stops), or reading may go on again.
                self._set_reading()

    def _next_turn(self) -> None:
        """A later turn of the reactor, after this connection yielded: go on."""
        if self.http is not None or self._closing or self.transport is None:
            return
        self._read_requests()

    def _read_one(self) -> bool:
        """
        Read and start the request at the head of the buffer.

        @return: Whether one was started (False: it has not all arrived,
            or the connection was handed over).
        """
        buffer = self._buffer
        at = self._at
        if buffer[at : at + 1] not in _METHOD_STARTS:
            # Not GET, HEAD or POST (a TLS handshake, another method): not
            # plain, whatever follows, so handed over without waiting for
            # the rest of its head.
            self._hand_over()
            return False
        end = buffer.find(b"\r\n\r\n", at, at + MAX_HEAD + 4)
        if end < 0:
            if len(buffer) - at > MAX_HEAD:
                self._hand_over()
            return False
        line_end = buffer.find(b"\r\n", at)
        line = _REQUEST_LINE.fullmatch(buffer, at, line_end)
        if line is None:
            self._hand_over()
            return False
        head = self._caches.head(buffer[line_end + 2 : end + 2])
        if head is None:
            self._hand_over()
            return False
        headers, declared, close = head
        method = line.group(1)
        path = line.group(2)
        length = declared or 0
        max_body = self._site.max_body
        start = end + 4
        if length > max_body:
            # The site's cap, decided before any resource, as twisted.web's
            # request decides it: refused here whatever the path and method,
            # unless the body is too long to drop (twisted.web answers).
            if length > max_body + DISCARD_MAX:
                self._hand_over()
                return False
            return self._refuse_too_large(method, path, close, buffer, start, length)
        # A POST without a declared length, or a GET or HEAD with a body:
        # twisted.web answers.
        unusual = declared is None if method == b"POST" else length != 0
        if unusual:
            self._hand_over()
            return False
        target = direct_resource(self._site.resource, path)
        if target is None:
            self._hand_over()
            return False
        if len(buffer) < start + length:
            return False
        found, postpath = target
        admitted = None
        if IHeadGate.providedBy(found):
            answer = found.answer_head(method, postpath, self.peer)
            if isinstance(answer, str):
                admitted = answer
            elif answer is not None:
                self._consumed(start + length)
                self._cancel_deadline()
                self.write(self._head_answer(method, close, answer))
                if close:
                    self.close()
                    return False
                return True
        body = buffer[start : start + length]
        end = start + length
        if end < len(buffer):
            self._at = end
        else:
            self._buffer = b""
            self._at = 0
        query = line.group(3)
        uri = path + query if query else path
        request = DirectRequest(
            self, method, uri, path, query[1:] if query else None, headers, body, close, postpath
        )
        request.admitted_source = admitted
        self._current = request
        self._cancel_deadline()
        request.render(found)
        return True

    def _refuse_too_large(
        self,
        method: bytes,
        path: bytes,
        close: bool,
        buffer: bytes,
        start: int,
        length: int,
    ) -> bool:
        """
        Answer 413 at once to a request whose declared body of C{length}
        bytes (from C{start} in C{buffer}) is over the cap, count and log
        it; then close if it asked to (C{close}), or drop its body as it
        arrives.

        @return: Whether the body is all dropped already (the next request
            may be read).
        """
        site = self._site
        limit = site.max_body
        site.refusals.too_large(self._source, limit, self._clock)
        # The whole answer, made once a second for each path, method and
        # close (a flood of 413s repeats one): a dictionary look-up.
        caches = self._caches
        key = (int(self._clock.seconds()), path, method, close)
        response = caches.answers.get(key)
        if response is None:
            body = refusal_body(
                refusal_shape(site.resource, path),
                413,
                "too_large",
                f"the request body exceeds {limit} bytes",
            )
            response = caches.keep_answer(
                key, self._make_answer(method, close, (413, _JSON_CONTENT, body))
            )
        self.transport.write(response)
        self._phase = None  # (L{_cancel_deadline})
        if close:
            self._consumed(len(buffer))
            self.close()
            return False
        arrived = len(buffer) - start
        if arrived >= length:
            self._consumed(start + length)
            return True
        self._buffer = b""
        self._at = 0
        self._discard = length - arrived
        # The rest of the body is due within the body's timeout (armed here,
        # as L{_time_arrival} would once this read is worked through).
        seconds = getattr(site, "body_timeout", None)
        if seconds:
            self._arm("body", seconds)
        return False

    def _head_answer(self, method: bytes, close: bool, answer: HeadAnswer) -> bytes:
        """
        The bytes of an answer given from the head (an L{IHeadGate}'s), made
        once a second and kept.
        """
        code, headers, body = answer
        key = (code, headers, body, self.date(), close, method)
        response = self._caches.answers.get(key)
        if response is None:
            response = self._caches.keep_answer(key, self._make_answer(method, close, answer))
        return response

    def _make_answer(self, method: bytes, close: bool, answer: HeadAnswer) -> bytes:
        """The bytes of an answer given from the head, made anew."""
        made = DirectRequest(self, method, b"", b"", None, {}, b"", close, [])
        return made.response(*answer)

    def request_done(self, request: DirectRequest, close: bool) -> None:
        """C{request}'s response is complete: read the next, or close."""
        if request is not self._current:
            return
        self._current = None
        self._last_activity = self._clock.seconds()
        if close:
            self.close()
            return
        if self._hand_over_pending:
            self._hand_over()
            return
        if self._parsing:
            return  # Answered at once: L{_read_requests} reads on.
        # Answered in a later turn than it was read in (the store's
        # commit): a new turn for this connection.
        self._turns.start()
        self._read_requests()

    # Writing and closing.

    def date(self) -> bytes:
        """The C{Date} header's value: now, on the site's clock."""
        return http_date(int(self._clock.seconds()))

    def write(self, data: bytes) -> None:
        """Write C{data} to the peer."""
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        """Close once the answers are written; abort if they do not drain."""
        if self._closing:
            return
        self._closing = True
        self._stop_timers()
        assert self.transport is not None
        self.transport.loseConnection()
        self._abort = self._clock.callLater(ABORT_TIMEOUT, self._abort_now)

    loseConnection = close

    def _abort_now(self) -> None:
        self._abort = None
        assert self.transport is not None
        self.transport.abortConnection()

    # The hand-over to twisted.web.

    def _hand_over(self) -> None:
        """From now on, twisted.web's channel serves this connection."""
        if self._current is not None:
            self._hand_over_pending = True
            return
        self._hand_over_pending = False
        self._stop_timers()
        assert self.transport is not None
        self.transport.unregisterProducer()
        if self._reading_paused:
            self._reading_paused = False
            self.transport.resumeProducing()
        channel = self._fallback()
        self.http = channel
        channel.makeConnection(self.transport)
        data = self._buffer[self._at :]
        self._consumed(len(self._buffer))
        if data:
            channel.dataReceived(data)

    # Flow control and time.

    def _set_reading(self) -> None:
        """Read from the peer unless its answers or its requests back up."""
        if self.transport is None or self.http is not None:
            return
        pause = (
            self._write_paused
            or self._turns.paused
            or (
                self._current is not None
                and len(self._buffer) - self._at > MAX_HEAD + self._site.max_body
            )
        )
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                self.transport.pauseProducing()
            else:
                self.transport.resumeProducing()

    def _time_arrival(self) -> None:
        """Start the deadline of what the buffer holds half-arrived (or of a body being dropped)."""
        if self._discard:
            phase = "body"
        elif not self._buffer:
            self._cancel_deadline()
            return
        else:
            at = self._at
            whole_head = self._buffer.find(b"\r\n\r\n", at, at + MAX_HEAD + 4) >= 0
            phase = "body" if whole_head else "headers"
        if phase == self._phase:
            return
        self._cancel_deadline()
        seconds = self._timeout(phase)
        if seconds:
            self._arm(phase, seconds)

    def _timeout(self, phase: str) -> float | None:
        """The site's seconds for C{phase} (C{"headers"} or C{"body"}), or None."""
        setting = "body_timeout" if phase == "body" else "header_timeout"
        seconds: float | None = getattr(self._site, setting, None)
        return seconds

    # The arrival deadline: one timer for the connection. Arming it sets
    # when the phase must end; disarming forgets that. The timer is made
    # only when none is pending, moved sooner when the deadline is sooner
    # than it, and otherwise left to run: when it comes it checks the
    # deadline of the moment, and waits again for a later one. A flood of
    # requests that each arrive in two reads (a 413's dropped body) so
    # costs a few attribute writes each, not a DelayedCall made and
    # cancelled per request.

    def _arm(self, phase: str, seconds: float) -> None:
        """The C{phase} (C{"headers"} or C{"body"}) must end within C{seconds}."""
        due = self._clock.seconds() + seconds
        self._phase = phase
        self._due = due
        timer = self._deadline
        if timer is None:
            self._deadline = self._clock.callLater(seconds, self._deadline_reached, due)
        elif timer.getTime() > due:
            timer.reset(seconds)

    def _deadline_reached(self, due: float) -> None:
        """The timer set for C{due} came: time out, or wait for a later deadline."""
        self._deadline = None
        phase = self._phase
        if phase is None:
            return
        now = self._clock.seconds()
        if due < self._due and now < self._due:
            # Armed again since the timer was set: wait for the new deadline
            # (unless the reactor comes so late that it is past too).
            self._deadline = self._clock.callLater(
                self._due - now, self._deadline_reached, self._due
            )
            return
        self._too_slow(phase, self._timeout(phase) or 0.0)

    def _too_slow(self, what: str, seconds: float) -> None:
        self._phase = None
        self._site.refusals["request_timeout"] += 1
        if self._discard:
            # A refused body that did not come: its 413 is sent, so no
            # second answer, only the close.
            self._discard = 0
            log_slow(self, what, seconds)
            self.close()
            return
        refuse_slow(self, what, seconds)

    def _cancel_deadline(self) -> None:
        """Disarm the deadline (its timer, if any, is left to run out)."""
        self._phase = None

    def _idle_check(self) -> None:
        timeout: float = self._site.timeOut or 0.0
        now = self._clock.seconds()
        if self._current is None and now - self._last_activity >= timeout:
            self._idle = None
            assert self.transport is not None
            log.info(
                "http.idle_timeout: closed a connection from {source} silent for {seconds} s",
                source=getattr(self.peer, "host", "unknown"),
                seconds=timeout,
            )
            self.close()
            return
        wait = timeout if self._current is not None else self._last_activity + timeout - now
        self._idle = self._clock.callLater(wait, self._idle_check)

    def _stop_timers(self) -> None:
        self._phase = None
        self._turns.stop()
        if self._deadline is not None:
            if self._deadline.active():
                self._deadline.cancel()
            self._deadline = None
        if self._idle is not None:
            if self._idle.active():
                self._idle.cancel()
            self._idle = None


__all__ = ["DISCARD_MAX", "DirectCaches", "DirectChannel", "read_head"]
