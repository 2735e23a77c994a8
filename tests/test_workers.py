"""
The store's threads (beacon.store._workers.Workers).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import gatherResults

from beacon.store._workers import Workers


@pytest.fixture
def workers() -> Any:
    pool = Workers(reactor, 2, "test-workers")
    pool.start()
    yield pool
    pool.stop()


@pytest_twisted.ensureDeferred
async def test_answers_arrive_on_the_reactor_thread(workers: Workers) -> None:
    """A call runs off the reactor thread; its answer fires on the reactor thread."""
    ran_on: list[str] = []
    answered_on: list[str] = []

    def call(x: int) -> int:
        ran_on.append(threading.current_thread().name)
        return x * 2

    answer = workers.run(call, 21)
    answer.addCallback(lambda v: answered_on.append(threading.current_thread().name) or v)
    assert await answer == 42
    assert ran_on[0].startswith("test-workers-")
    assert answered_on == [threading.main_thread().name]


@pytest_twisted.ensureDeferred
async def test_a_raised_exception_fails_the_answer(workers: Workers) -> None:
    """What the call raises is what the Deferred fails with; the thread goes on."""

    def boom() -> None:
        raise LookupError("nope")

    with pytest.raises(LookupError, match="nope"):
        await workers.run(boom)
    assert await workers.run(lambda: "still here") == "still here"


@pytest_twisted.ensureDeferred
async def test_one_thread_keeps_the_order_of_calls() -> None:
    """With one thread, calls run in the order they were handed over."""
    single = Workers(reactor, 1, "test-writer")
    single.start()
    try:
        seen: list[int] = []
        await gatherResults([single.run(seen.append, n) for n in range(50)])
        assert seen == list(range(50))
    finally:
        single.stop()


@pytest_twisted.ensureDeferred
async def test_a_call_without_an_answer_may_come_from_a_thread() -> None:
    """
    call() runs a function with no answer; one of the threads may queue
    another behind the calls already queued, which keep their order.
    """
    single = Workers(reactor, 1, "test-writer")
    single.start()
    try:
        seen: list[str] = []

        def first() -> None:
            seen.append(threading.current_thread().name)
            single.call(seen.append, "again, from the thread")

        single.call(first)
        queued = single.run(seen.append, "queued before")
        await queued
        await single.run(lambda: None)
        assert seen == ["test-writer", "queued before", "again, from the thread"]
    finally:
        single.stop()


@pytest_twisted.ensureDeferred
async def test_a_call_that_raises_is_logged(logged_events: Any) -> None:
    """
    What a call without an answer raises is logged on the reactor thread as
    store.call_failed, naming the call; the thread goes on.
    """
    logged_events.expect_failures()

    def boom() -> None:
        raise LookupError("nope")

    single = Workers(reactor, 1, "test-writer")
    single.start()
    try:
        single.call(boom)
        assert await single.run(lambda: "still here") == "still here"
    finally:
        single.stop()
    [event] = logged_events.named("store.call_failed")
    assert event["call"].endswith("boom")
    assert event["log_failure"].check(LookupError)


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policy")
@pytest_twisted.ensureDeferred
async def test_threads_are_scheduled_as_batch_work(workers: Workers) -> None:
    """On Linux the threads run under SCHED_BATCH; the reactor thread keeps its policy."""
    policy = await workers.run(os.sched_getscheduler, 0)
    assert policy == os.SCHED_BATCH
    assert os.sched_getscheduler(0) != os.SCHED_BATCH


def test_stop_ends_every_thread() -> None:
    """stop() lets the threads finish and waits for them."""
    pool = Workers(reactor, 3, "test-stop")
    pool.start()
    pool.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("test-stop")]


def test_at_least_one_thread() -> None:
    """Zero threads is refused."""
    with pytest.raises(ValueError):
        Workers(reactor, 0, "none")
