"""
The notifier: when to tell one channel of new submissions, and what to do
when telling fails.

It is not on the submission path. A stored submission reaches it as a store
event (L{ISubmissionStore.subscribe}), which only sets a timer; the
submissions themselves are read back from the store's per-channel cursor
(L{ISubmissionStore.claim_notifications}) and the cursor advanced once the
channel has them (L{ISubmissionStore.finish_notifications}). So delivery is
at least once, once per database however many instances share it (the
claim is a lease), and nothing is lost across a restart or a failure; the
notifier holds at most one batch in memory.
"""

from __future__ import annotations

import secrets
from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet.defer import (
    CancelledError,
    Deferred,
    DeferredList,
    TimeoutError,
    maybeDeferred,
)
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from beacon.config import DEFAULT_NOTIFY_INTERVAL, DEFAULT_NOTIFY_TIMEOUT
from beacon.notify._channel import INotificationChannel, NotificationFailed
from beacon.notify._summary import inert, summary_of
from beacon.store import ISubmissionStore, NotificationBatch, StoreError, StoreEvent

#: Defaults of C{[notify]}: at most one notification per C{interval}
#: seconds; a delivery abandoned (a command killed) after C{timeout}.
DEFAULT_INTERVAL = DEFAULT_NOTIFY_INTERVAL
DEFAULT_TIMEOUT = DEFAULT_NOTIFY_TIMEOUT
#: The most submissions one notification carries; the summary says how many
#: more wait (they come in the next one).
DEFAULT_BATCH = 200
#: Failed deliveries are retried after C{interval}, then twice as long each
#: time, up to this (or C{interval}, if longer).
MAX_BACKOFF = 3600.0
#: A claim's lease outlasts the delivery's timeout by this, for the store's
#: round trips; another instance takes the channel over once it expires.
LEASE_MARGIN = 60.0
#: Seconds L{Notifier.stopService} waits for a delivery it abandoned to end.
STOP_TIMEOUT = 10.0
#: The longest reason of an unexpected failure kept for the log.
REASON_KEPT = 300

log = Logger()


def _reason(failure: Failure, timeout: float) -> str:
    """Why a delivery failed, in words that carry no submitted content."""
    if failure.check(TimeoutError):
        return f"no answer within {timeout:g} s; abandoned"
    if failure.check(NotificationFailed):
        return inert(str(failure.value))
    text = inert(" ".join(failure.getErrorMessage().split()))
    if len(text) > REASON_KEPT:
        text = text[: REASON_KEPT - 3] + "..."
    return f"{type(failure.value).__name__}: {text}"


class Notifier(Service):
    """
    Tells one channel of new submissions: at most once per C{interval}
    seconds, with a summary of the submissions stored since it last did.

    A submission stored when the last notification is more than
    C{interval} old is notified on the next turn of the reactor; otherwise
    when C{interval} has passed since it. Besides, the store is read every
    C{interval} (another instance's submissions, a lease that expired). A
    notification that fails or takes longer than C{timeout} is logged as
    C{notify.failed} and its submissions come again after a backoff:
    C{interval}, then doubling up to L{MAX_BACKOFF}. Each success is logged
    as C{notify.sent}.

    @ivar holder: The name this notifier's leases are taken under.
    @ivar failures: The failed deliveries since the last success.
    @ivar failed_deliveries: Every failed delivery since the start (for
        the metrics).
    @ivar store_failures: Every failed read or advance of the channel's
        cursor since the start (C{notify.store_failed}).
    """

    def __init__(
        self,
        store: ISubmissionStore,
        clock: IReactorTime,
        channel: INotificationChannel,
        *,
        interval: float = DEFAULT_INTERVAL,
        timeout: float = DEFAULT_TIMEOUT,
        include_content: bool = False,
        batch: int = DEFAULT_BATCH,
        max_backoff: float = MAX_BACKOFF,
        holder: str | None = None,
    ) -> None:
        """
        @param store: Where the submissions and the channel's cursor are.
        @param clock: Every interval, backoff and timeout runs on it.
        @param channel: Where to tell (a L{CommandChannel
            <beacon.notify.CommandChannel>}, an L{SMTPChannel
            <beacon.notify.SMTPChannel>}).
        @param interval: The fewest seconds between two notifications
            (above 0).
        @param timeout: Seconds a delivery may take before it is abandoned
            (above 0).
        @param include_content: Whether the summary carries each
            submission's stored content.
        @param batch: The most submissions one notification carries.
        @param max_backoff: The longest wait before a retry.
        @param holder: The lease holder's name: unique to this notifier (a
            random one by default).
        """
        if interval <= 0 or timeout <= 0 or batch < 1:
            raise ValueError("interval and timeout must be above 0, batch at least 1")
        self.store = store
        self.clock = clock
        self.channel = channel
        self.interval = float(interval)
        self.timeout = float(timeout)
        self.include_content = include_content
        self.batch = batch
        self.max_backoff = max(float(max_backoff), self.interval)
        self.holder = holder or secrets.token_hex(16)
        self.failures = 0
        self.failed_deliveries = 0
        self.store_failures = 0
        self._lease_ms = int((self.timeout + LEASE_MARGIN) * 1000)
        self._timer: IDelayedCall | None = None
        self._busy = False
        self._again = False
        self._not_before = float("-inf")
        self._delivery: Deferred[None] | None = None
        self._idle: list[Deferred[None]] = []
        self._unsubscribe: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"<Notifier {self.channel.name}>"

    def startService(self) -> None:
        """
        Listen to the store and read the channel's cursor once now (the
        first read of a new channel starts it after the newest submission:
        no backlog is notified).
        """
        super().startService()
        self._unsubscribe = self.store.subscribe(self._heard)
        log.info(
            "notify.watching: new submissions go to {channel} at most every {interval} s",
            channel=self.channel.name,
            interval=self.interval,
        )
        self._run()

    def stopService(self) -> Deferred[None]:
        """
        Stop listening and cancel the timers; abandon a delivery in progress
        (a command is killed; its submissions come again at the next start)
        and wait, at most L{STOP_TIMEOUT} seconds, for it to end.
        """
        super().stopService()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        if self._delivery is not None:
            self._delivery.cancel()
        waits: list[Deferred[Any]] = [maybeDeferred(self.channel.stop), self.idle()]
        stopped: Deferred[None] = Deferred()
        DeferredList(waits, consumeErrors=True).addCallback(
            lambda _: None if stopped.called else stopped.callback(None)
        )

        def too_long(failure: Failure) -> None:
            failure.trap(TimeoutError)
            log.warn(
                "notify.stop_timeout: {channel} did not end within {seconds} s",
                channel=self.channel.name,
                seconds=STOP_TIMEOUT,
            )

        return stopped.addTimeout(STOP_TIMEOUT, self.clock).addErrback(too_long)

    def idle(self) -> Deferred[None]:
        """
        Fire once no read or delivery is in progress: at once when none is,
        else when the current one has ended (for embedders and tests that
        wait for the notifier to settle; it starts nothing).
        """
        waiter: Deferred[None] = Deferred()
        if self._busy:
            self._idle.append(waiter)
        else:
            waiter.callback(None)
        return waiter

    def _heard(self, event: StoreEvent) -> None:
        """A store event: a stored submission brings the next run closer."""
        if event.kind != "submitted" or not self.running:
            return
        if self._busy:
            self._again = True
        else:
            self._schedule(self.clock.seconds())

    def _schedule(self, at: float) -> None:
        """
        Run at C{at}, or when the interval or backoff allows, if later;
        keep an earlier run already scheduled.
        """
        at = max(at, self._not_before)
        delay = max(0.0, at - self.clock.seconds())
        timer = self._timer
        if timer is not None and timer.active():
            if timer.getTime() > at:
                timer.reset(delay)
            return
        self._timer = self.clock.callLater(delay, self._run)

    def _run(self) -> None:
        """Claim the channel's new submissions and deliver them."""
        self._timer = None
        if not self.running or self._busy:
            return
        self._busy = True
        self._again = False
        started = self.clock.seconds()
        claimed: Deferred[Any] = maybeDeferred(
            self._claim, int(started * 1000)
        )
        claimed.addCallback(self._deliver, started)
        claimed.addErrback(self._cycle_failed)
        claimed.addCallback(self._cycle_done)

    def _claim(self, now_ms: int) -> Deferred[NotificationBatch | None]:
        """Take the channel's lease and read what it has not been told of."""
        claimed: Deferred[NotificationBatch | None] = self.store.claim_notifications(
            self.channel.name, self.holder, now_ms, self._lease_ms, self.batch
        )
        return claimed

    def _deliver(self, batch: NotificationBatch | None, started: float) -> Any:
        """
        Deliver C{batch}, if any; fires with whether more submissions wait.
        """
        if batch is None:
            return False  # nothing new, or another holder has the channel
        if not self.running:
            return self._finish(None, False)
        delivery: Deferred[None] = maybeDeferred(self._send, batch)
        delivery.addTimeout(self.timeout, self.clock)
        self._delivery = delivery
        return delivery.addCallbacks(
            self._sent,
            self._failed,
            callbackArgs=(batch, started),
            errbackArgs=(batch, started),
        )

    def _send(self, batch: NotificationBatch) -> Deferred[None]:
        """Hand the channel C{batch}'s summary."""
        sending: Deferred[None] = self.channel.send(
            summary_of(batch, include_content=self.include_content)
        )
        return sending

    def _sent(self, _: None, batch: NotificationBatch, started: float) -> Deferred[bool]:
        self._delivery = None
        self.failures = 0
        self._not_before = started + self.interval
        log.info(
            "notify.sent: {channel} told of {count} submission(s), {pending} more waiting",
            channel=self.channel.name,
            count=len(batch.tasks),
            pending=max(0, batch.pending - len(batch.tasks)),
        )
        return self._finish(batch.through_seq, batch.pending > len(batch.tasks))

    def _failed(self, failure: Failure, batch: NotificationBatch, started: float) -> Deferred[bool]:
        self._delivery = None
        if failure.check(CancelledError) and not self.running:
            return self._finish(None, False)  # abandoned by stopService
        self.failures += 1
        self.failed_deliveries += 1
        delay = min(self.interval * 2 ** min(self.failures - 1, 62), self.max_backoff)
        self._not_before = self.clock.seconds() + delay
        log.warn(
            "notify.failed: {channel} was not told of {count} submission(s)"
            " (attempt {attempt}): {reason}; next attempt in {delay} s",
            channel=self.channel.name,
            count=len(batch.tasks),
            attempt=self.failures,
            reason=_reason(failure, self.timeout),
            delay=delay,
        )
        return self._finish(None, False)

    def _finish(self, through_seq: int | None, more: bool) -> Deferred[bool]:
        """End the lease: advance the cursor to C{through_seq}, or not."""
        finished: Deferred[None] = maybeDeferred(
            self.store.finish_notifications, self.channel.name, self.holder, through_seq
        )
        return finished.addCallback(lambda _: more)

    def _cycle_failed(self, failure: Failure) -> bool:
        """The store failed (or a bug): log it; the next run tries again."""
        self._delivery = None
        if failure.check(StoreError):
            self.store_failures += 1
            log.warn(
                "notify.store_failed: {channel} cannot read or advance its cursor: {error}",
                channel=self.channel.name,
                error=failure.getErrorMessage(),
            )
        else:
            log.failure(
                "notify.cycle_failed: {channel}", failure, channel=self.channel.name
            )
        return False

    def _cycle_done(self, more: bool) -> None:
        """Schedule the next run: soon if more wait, else the periodic read."""
        self._busy = False
        idle, self._idle = self._idle, []
        for waiter in idle:
            waiter.callback(None)
        if not self.running:
            return
        now = self.clock.seconds()
        self._schedule(now if (more or self._again) else now + self.interval)
