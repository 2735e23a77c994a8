"""
A stream of StreamResponse dicts, as the streaming methods
(C{SendStreamingMessage}, C{SubscribeToTask}) answer, whatever the
transport: an async iterator, bounded in time on the injected clock.

Two bounds: C{first} from the request to the first event, C{idle} between
one event and the next. When one passes the stream is cancelled (its
request aborted, or its WebSocket call forgotten) and the iteration raises
L{Timeout}.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from beacon.client._errors import ClientError, Timeout, TransportError

#: How many events wait for a slow consumer before the transport is paused
#: (HTTP), or the stream is ended as fallen behind (WebSocket, where one
#: connection carries other calls too).
MAX_QUEUED_EVENTS = 100


class ResponseStream:
    """
    The events of one streaming call. Iterate with C{async for}; call
    L{cancel} to stop early. The iteration ends when the peer ends the
    stream and raises a L{ClientError} when it fails (L{RPCError} for a
    JSON-RPC error, L{Timeout}, L{TransportError}, L{InvalidResponse}).
    """

    def __init__(
        self,
        clock: IReactorTime,
        address: str,
        first_timeout: float,
        idle_timeout: float,
        *,
        peer: str = "the agent",
        pause: Callable[[], None] | None = None,
        resume: Callable[[], None] | None = None,
    ) -> None:
        self._clock = clock
        self._address = address
        self._idle_timeout = idle_timeout
        self._peer = peer
        self._pause = pause
        self._resume = resume
        self._paused = False
        self._events: deque[dict[str, Any]] = deque()
        self._waiting: Deferred[None] | None = None
        self._end: Exception | None = None
        self._ended = False
        self._cancelled = False
        #: Called once when the stream is cancelled or times out: abort the
        #: request (set by the transport).
        self.on_cancel: Callable[[], None] | None = None
        self._timer: IDelayedCall | None = None
        self._arm(first_timeout, "answer")

    @property
    def ended(self) -> bool:
        """Whether the stream is over (ended, failed or cancelled)."""
        return self._ended

    def _arm(self, seconds: float, phase: str) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self._clock.callLater(seconds, self._expire, seconds, phase)

    def _disarm(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _expire(self, seconds: float, phase: str) -> None:
        self._timer = None
        self._fail_and_abort(Timeout(self._address, seconds, phase, self._peer))

    def _fail_and_abort(self, error: Exception) -> None:
        # End first, so that what the aborted request fails with is not
        # taken for the stream's end.
        callback = self.on_cancel
        self.end(error)
        if callback is not None:
            callback()

    def _abort(self) -> None:
        callback, self.on_cancel = self.on_cancel, None
        if callback is not None:
            callback()

    # What the transport calls.

    def push(self, event: dict[str, Any]) -> None:
        """One event arrived."""
        if self._ended:
            return
        self._arm(self._idle_timeout, "idle")
        self._events.append(event)
        if len(self._events) >= MAX_QUEUED_EVENTS and not self._paused:
            if self._pause is None:
                self._fail_and_abort(
                    TransportError(self._address, "the stream's consumer fell behind", self._peer)
                )
                return
            self._paused = True
            self._pause()
        self._wake()

    def end(self, error: Exception | Failure | None = None) -> None:
        """The stream is over: cleanly (C{error} None) or with C{error}."""
        if self._ended:
            return
        self._ended = True
        self._disarm()
        self.on_cancel = None
        if isinstance(error, Failure):
            value = error.value
            error = value if isinstance(value, Exception) else TransportError(
                self._address, "the stream broke", self._peer
            )
        if error is not None and not self._cancelled:
            if not isinstance(error, (ClientError, CancelledError)):
                error = TransportError(self._address, "the stream broke", self._peer)
            self._end = error
        self._wake()

    def _wake(self) -> None:
        if self._waiting is not None:
            waiting, self._waiting = self._waiting, None
            waiting.callback(None)

    # What the consumer calls.

    def cancel(self) -> None:
        """Stop: abort the request; the iteration ends without error."""
        if self._ended:
            return
        self._cancelled = True
        self._abort()
        self.end()

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while True:
            if self._events:
                event = self._events.popleft()
                if self._paused and len(self._events) <= MAX_QUEUED_EVENTS // 2:
                    self._paused = False
                    if self._resume is not None:
                        self._resume()
                return event
            if self._ended:
                if self._end is not None:
                    end, self._end = self._end, None
                    raise end
                raise StopAsyncIteration

            def cancelled(d: Deferred[None]) -> None:
                # The consumer gave up waiting: stop the stream.
                self._waiting = None
                self.cancel()

            self._waiting = Deferred(cancelled)
            await self._waiting

    async def collect(self) -> list[dict[str, Any]]:
        """Every event until the stream ends."""
        return [event async for event in self]
