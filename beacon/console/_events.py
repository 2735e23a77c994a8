"""
The console's live events: one C{beacon.inbox.Follow} feed shared by every
open C{/api/events} stream, relayed to each as server-sent events.

The feed is opened when the first stream subscribes and closed when the last
one leaves. When it ends or cannot be opened, every stream is told
(C{event: down}) and the relay tries again on its clock, after 1 s, then
doubling up to 10 s; once the feed is open again, C{event: ready}. Every
stream gets a C{: keep-alive} comment every 15 s.

Each stream's queue is bounded: while its connection cannot take more (its
transport paused it), events wait, up to L{MAX_PENDING_BYTES}; a reader
that falls further behind is cut off, not buffered for.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.web.server import Request
from zope.interface import implementer

from beacon.client import ClientError, Timeout, TransportError
from beacon.text import inert_text

log = Logger()

#: The first wait before following again, and the longest (seconds).
FIRST_RETRY = 1.0
LAST_RETRY = 10.0
#: Seconds between keep-alive comments.
KEEP_ALIVE = 15.0
#: Bytes of events a stream may have waiting for its reader before it is
#: cut off.
MAX_PENDING_BYTES = 4 * 1024 * 1024


class FollowFeed(Protocol):
    """What L{beacon.client.OperatorClient.follow} fires with (a L{Feed})."""

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]: ...

    def cancel(self) -> None: ...


def down_message(error: Exception | None, address: str) -> str:
    """What C{event: down} says: why Beacon cannot be followed."""
    if isinstance(error, TransportError):
        return f"cannot reach Beacon at {inert_text(error.address)}: {inert_text(error.reason)}"
    if isinstance(error, Timeout):
        return f"cannot reach Beacon at {inert_text(error.address)}: no answer within {error.seconds:g} s"
    if isinstance(error, ClientError):
        return f"cannot reach Beacon at {inert_text(address)}: {inert_text(str(error))}"
    return f"cannot reach Beacon at {inert_text(address)}: it ended the stream"


def frame(event: str | None, data: Any = None) -> bytes:
    """One server-sent event (C{event} L{None}: a keep-alive comment)."""
    if event is None:
        return b": keep-alive\n\n"
    # ASCII JSON holds no line break: one data line.
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return f"event: {event}\ndata: {text}\n\n".encode("ascii")


@implementer(IPushProducer)
class EventStream:
    """
    One open C{/api/events} response: writes events while its connection
    takes them, holds them while it is paused, and cuts the connection
    when more than C{max_pending} bytes wait.
    """

    def __init__(self, request: Request, max_pending: int = MAX_PENDING_BYTES) -> None:
        self.request = request
        self.max_pending = max_pending
        self.closed = False
        self.cut = False
        self._paused = False
        self._pending: deque[bytes] = deque()
        self._pending_bytes = 0
        request.registerProducer(self, True)

    def send(self, data: bytes) -> None:
        """Write C{data}, or hold it while the connection is paused."""
        if self.closed:
            return
        if not self._paused:
            self.request.write(data)
            return
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes > self.max_pending:
            self._cut_off()

    def pauseProducing(self) -> None:
        """The connection's buffer is full: hold events."""
        self._paused = True

    def resumeProducing(self) -> None:
        """The connection drained: write what waits."""
        self._paused = False
        while self._pending and not self._paused and not self.closed:
            data = self._pending.popleft()
            self._pending_bytes -= len(data)
            self.request.write(data)

    def stopProducing(self) -> None:
        """The connection is going away."""
        self._forget()

    def _forget(self) -> None:
        self.closed = True
        self._pending.clear()
        self._pending_bytes = 0

    def _cut_off(self) -> None:
        log.warn(
            "console.slow_stream: cut off an event stream whose reader fell"
            " {pending} bytes behind",
            pending=self._pending_bytes,
        )
        self.cut = True
        self._forget()
        transport = self.request.transport
        if transport is not None:
            abort = getattr(transport, "abortConnection", None)
            if abort is not None:
                abort()
            else:
                transport.loseConnection()

    def finish(self) -> None:
        """End the stream (the console is stopping)."""
        if self.closed:
            return
        self._forget()
        self.request.unregisterProducer()
        self.request.finish()


class EventRelay:
    """
    The shared follow feed and the streams it is relayed to.

    @ivar state: C{"idle"} (no stream), C{"opening"}, C{"ready"} or
        C{"down"} (waiting to try again).
    """

    def __init__(
        self,
        follow: Callable[[], Deferred[Any]],
        clock: IReactorTime,
        address: str,
    ) -> None:
        """
        @param follow: Opens the feed (L{OperatorClient.follow}).
        @param clock: Times the retries and the keep-alives.
        @param address: Where Beacon is, for C{down} messages.
        """
        self._follow = follow
        self._clock = clock
        self._address = address
        self.streams: set[EventStream] = set()
        self.state = "idle"
        self._down_data: dict[str, str] = {}
        self._delay = FIRST_RETRY
        self._retry: IDelayedCall | None = None
        self._feed: FollowFeed | None = None
        self._opening: Deferred[Any] | None = None
        # Each run of the feed has a number; a run that is over (the last
        # stream left) says nothing when its feed ends.
        self._generation = 0
        self._keep_alive = LoopingCall(self._beat)
        self._keep_alive.clock = clock

    def subscribe(self, stream: EventStream) -> None:
        """Relay to C{stream}; open the feed if it is the first."""
        self.streams.add(stream)
        if self.state == "ready":
            stream.send(frame("ready", {}))
        elif self.state == "down":
            stream.send(frame("down", self._down_data))
        if len(self.streams) == 1 and self.state == "idle":
            self._keep_alive.start(KEEP_ALIVE, now=False)
            self._open()

    def unsubscribe(self, stream: EventStream) -> None:
        """Stop relaying to C{stream}; close the feed if it was the last."""
        self.streams.discard(stream)
        if not self.streams and self.state != "idle":
            self._stop()

    def close(self) -> None:
        """End every stream and the feed (the console is stopping)."""
        for stream in list(self.streams):
            stream.finish()
        self.streams.clear()
        if self.state != "idle":
            self._stop()

    def _stop(self) -> None:
        self._generation += 1
        self.state = "idle"
        self._delay = FIRST_RETRY
        if self._keep_alive.running:
            self._keep_alive.stop()
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None
        if self._opening is not None:
            opening, self._opening = self._opening, None
            opening.cancel()
        if self._feed is not None:
            feed, self._feed = self._feed, None
            feed.cancel()

    def _broadcast(self, data: bytes) -> None:
        for stream in list(self.streams):
            if stream.closed:
                self.streams.discard(stream)
                continue
            stream.send(data)

    def _beat(self) -> None:
        self._broadcast(frame(None))

    def _open(self) -> None:
        self._retry = None
        self.state = "opening"
        generation = self._generation
        Deferred.fromCoroutine(self._run(generation)).addErrback(
            lambda f: log.failure("console.relay_failed: the event relay failed", f)
        )

    async def _run(self, generation: int) -> None:
        error: Exception | None = None
        try:
            self._opening = self._follow()
            feed = await self._opening
            self._opening = None
            if generation != self._generation:
                feed.cancel()
                return
            self._feed = feed
            self.state = "ready"
            self._delay = FIRST_RETRY
            self._broadcast(frame("ready", {}))
            async for event in feed:
                if generation != self._generation:
                    return
                self._broadcast(frame("task", event))
        except ClientError as e:
            error = e
        except Exception as e:
            if generation != self._generation:
                return
            error = e
        if generation != self._generation:
            return
        self._opening = None
        self._feed = None
        self.state = "down"
        self._down_data = {"message": down_message(error, self._address)}
        self._broadcast(frame("down", self._down_data))
        delay, self._delay = self._delay, min(self._delay * 2, LAST_RETRY)
        self._retry = self._clock.callLater(delay, self._open)
