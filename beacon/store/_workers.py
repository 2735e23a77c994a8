"""
The store's threads: a fixed set of threads that run blocking database
calls for the reactor and answer with L{Deferred}s.

They do what C{deferToThreadPool} does with less on the way: a call is
handed over through one C-implemented queue and answered with one
C{callFromThread}. On Linux each thread also asks to be scheduled as batch
work (C{SCHED_BATCH}): when a commit finishes, the writer does not preempt
the reactor thread, it runs when the reactor waits or its time slice ends.
On a busy core that keeps the reactor serving instead of switching back and
forth with the store on every commit, and lets more writes gather in the
next batch. Where the policy cannot be set, the threads run as usual.
"""

from __future__ import annotations

import os
import threading
from queue import SimpleQueue
from typing import Any, Callable, TypeVar, Union

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from twisted.python.failure import Failure

_T = TypeVar("_T")

#: A call, and the Deferred that answers it (L{None}: no answer).
_Call = tuple[Callable[..., Any], tuple[object, ...], Union[Deferred[Any], None]]


def _as_batch_work() -> None:
    """
    Schedule the calling thread as batch work, where Linux offers it.
    """
    setscheduler = getattr(os, "sched_setscheduler", None)
    policy = getattr(os, "SCHED_BATCH", None)
    if setscheduler is None or policy is None:
        return
    try:
        setscheduler(0, policy, os.sched_param(0))
    except OSError:
        pass


class Workers:
    """
    C{count} threads taking calls from one queue, in order of arrival.
    """

    log = Logger()

    def __init__(self, reactor: IReactorFromThreads, count: int, name: str) -> None:
        """
        @param reactor: Receives every answer, on its own thread.
        @param count: The number of threads (at least 1).
        @param name: The threads' name (numbered when there are several).
        """
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        self._reactor = reactor
        self._queue: SimpleQueue[_Call | None] = SimpleQueue()
        self._threads = [
            threading.Thread(
                target=self._work,
                name=name if count == 1 else f"{name}-{n}",
                daemon=True,
            )
            for n in range(count)
        ]

    def start(self) -> None:
        """
        Start the threads.
        """
        for thread in self._threads:
            thread.start()

    def run(self, f: Callable[..., _T], *args: object) -> Deferred[_T]:
        """
        Run C{f(*args)} on one of the threads.

        @return: A L{Deferred} that fires on the reactor thread with what
            C{f} returned, or fails with what it raised.
        """
        answer: Deferred[_T] = Deferred()
        self._queue.put((f, args, answer))
        return answer

    def call(self, f: Callable[..., object], *args: object) -> None:
        """
        Run C{f(*args)} on one of the threads, with no answer: C{f} tells
        the reactor what it needs to know itself. It may be called from any
        thread, one of these included (the call queues behind the others).
        Should C{f} raise all the same, the failure is logged on the reactor
        thread (C{store.call_failed}) and the thread goes on.
        """
        self._queue.put((f, args, None))

    def stop(self) -> None:
        """
        Let every thread finish the calls queued before this one, then end,
        and wait for them (call it once they are idle, so that it does not
        wait).
        """
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def _call_failed(self, failure: Failure, f: Callable[..., object]) -> None:
        self.log.failure(
            "store.call_failed: {call} raised on the store's thread",
            failure,
            call=getattr(f, "__qualname__", repr(f)),
        )

    def _work(self) -> None:
        _as_batch_work()
        call_from_thread = self._reactor.callFromThread
        while True:
            item = self._queue.get()
            if item is None:
                return
            f, args, answer = item
            try:
                result = f(*args)
            except BaseException:
                failure = Failure()
                if answer is None:
                    call_from_thread(self._call_failed, failure, f)
                else:
                    call_from_thread(answer.errback, failure)
            else:
                if answer is not None:
                    call_from_thread(answer.callback, result)
            del item, f, args, answer


__all__ = ["Workers"]
