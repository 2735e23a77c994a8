"""
A store's event listeners (L{ISubmissionStore.subscribe}): who hears of
committed writes, and in what order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Callable

from twisted.logger import Logger

from beacon.store._interface import StoreEvent


class StoreListeners:
    """
    A store's listeners (L{ISubmissionStore.subscribe}), shared by the
    backends and L{beacon.testing.MemoryStore}.

    Events are delivered one at a time, in the order they were handed to
    L{notify}, to every listener in subscription order. An event handed over
    while listeners are being called (a listener wrote to a store that
    answers synchronously) waits for the events before it, so commit order
    holds. A listener that raises is logged as C{store.listener_failed} and
    the others are still called.
    """

    def __init__(self, log: Logger) -> None:
        """
        @param log: Where listener failures are logged.
        """
        self._log = log
        self._listeners: dict[object, Callable[[StoreEvent], None]] = {}
        self._queue: deque[StoreEvent] = deque()
        self._notifying = False

    @property
    def listening(self) -> bool:
        """
        Whether anyone listens (events nobody hears need not be made).
        """
        return bool(self._listeners)

    def subscribe(self, listener: Callable[[StoreEvent], None]) -> Callable[[], None]:
        """
        Add C{listener}; the same callable subscribed twice is called twice.

        @return: A function that removes this subscription; calling it again
            does nothing.
        """
        key = object()
        self._listeners[key] = listener

        def unsubscribe() -> None:
            self._listeners.pop(key, None)

        return unsubscribe

    def notify(self, events: Iterable[StoreEvent]) -> None:
        """
        Call every listener with each of C{events}, in order.
        """
        self._queue.extend(events)
        if self._notifying:
            return
        self._notifying = True
        try:
            while self._queue:
                event = self._queue.popleft()
                for key, listener in list(self._listeners.items()):
                    # An earlier listener may have unsubscribed this one.
                    if key not in self._listeners:
                        continue
                    try:
                        listener(event)
                    except Exception:
                        self._log.failure(
                            "store.listener_failed: a store listener failed"
                            " on a {kind} event",
                            kind=event.kind,
                        )
        finally:
            self._notifying = False
