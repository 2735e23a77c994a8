"""
Streaming answers, transport-neutral.

A policy answers a streaming method (SendStreamingMessage, SubscribeToTask,
extension streams) with an L{EventStream}: it pushes ProtoJSON results into
the stream and closes it, or ends it with an error. A binding attaches an
L{IStreamSink} and frames each event its own way (SSE on HTTP and unix,
JSON-RPC frames on WebSocket). Events sent before the sink attaches are
queued, up to a bound; a stream that would queue more is ended with an error,
so a stalled consumer costs bounded memory.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from zope.interface import Interface, implementer

from beacon.protocol._errors import A2AError, InternalError

#: How many events a stream holds for a consumer that has not taken them.
DEFAULT_MAX_QUEUED = 1000


class IStreamSink(Interface):
    """Where a binding receives a stream's events."""

    def event(result: Any) -> None:
        """One event: a ProtoJSON result (a StreamResponse)."""

    def end() -> None:
        """The stream is over (normally)."""

    def fail(error: A2AError) -> None:
        """The stream ended with an error; no more events follow."""


class EventStream:
    """
    One streaming answer. The producing side calls L{send}, L{close} or
    L{fail}; the consuming side calls L{attach} once and L{cancel} when its
    peer goes away.
    """

    def __init__(self, max_queued: int = DEFAULT_MAX_QUEUED) -> None:
        """
        @param max_queued: How many events may wait for the consumer.
        """
        self._queue: deque[tuple[str, Any]] = deque()
        self._max_queued = max_queued
        self._sink: IStreamSink | None = None
        self._finished = False
        self._on_cancel: list[Callable[[], None]] = []

    @property
    def finished(self) -> bool:
        """Whether the stream has ended (closed, failed or cancelled)."""
        return self._finished

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """
        Call C{callback} once when the stream ends for any reason, so the
        producer can let go of what feeds it.
        """
        if self._finished:
            callback()
        else:
            self._on_cancel.append(callback)

    def attach(self, sink: IStreamSink) -> None:
        """
        Start delivering to C{sink}: queued events first, then live ones.
        """
        self._sink = sink
        while self._queue:
            kind, value = self._queue.popleft()
            self._deliver(kind, value)

    def send(self, result: Any) -> None:
        """Push one event."""
        if self._finished:
            return
        if self._sink is None:
            if len(self._queue) >= self._max_queued:
                self.fail(InternalError("the stream's consumer fell too far behind"))
                return
            self._queue.append(("event", result))
        else:
            self._sink.event(result)

    def close(self) -> None:
        """End the stream normally."""
        self._end("end", None)

    def fail(self, error: A2AError) -> None:
        """End the stream with C{error}."""
        self._end("fail", error)

    def cancel(self) -> None:
        """The consumer went away: end without delivering anything more."""
        if not self._finished:
            self._finished = True
            self._queue.clear()
            self._run_cancel()

    def _end(self, kind: str, value: Any) -> None:
        if self._finished:
            return
        if self._sink is None:
            self._queue.append((kind, value))
        else:
            self._deliver(kind, value)
        self._finished = True
        self._run_cancel()

    def _deliver(self, kind: str, value: Any) -> None:
        assert self._sink is not None
        if kind == "event":
            self._sink.event(value)
        elif kind == "end":
            self._sink.end()
        else:
            self._sink.fail(value)

    def _run_cancel(self) -> None:
        callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            callback()


@implementer(IStreamSink)
class CollectingSink:
    """
    A sink that keeps what it receives: for tests, and for callers that
    want a stream's events as a list.
    """

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.ended = False
        self.error: A2AError | None = None

    def event(self, result: Any) -> None:
        self.events.append(result)

    def end(self) -> None:
        self.ended = True

    def fail(self, error: A2AError) -> None:
        self.error = error
