"""
Notifications (beacon.notify, C{[notify]}): the summary, when the
L{Notifier} tells its channel (once per interval, a flood batched, failures
retried with backoff, a slow delivery abandoned, two instances on one store
telling of each submission once), the command channel against a real
program that records its standard input, the mail channel against an ESMTP
server started here from Twisted's own server classes (STARTTLS, TLS,
authentication), and receipts never waiting for either.

The injected L{Clock} decides when; the real reactor (pytest-twisted) runs
the processes and the connections, every wait on it bounded by L{WAIT}, a
safety net, never a measure.
"""

from __future__ import annotations

import base64
import email
import email.policy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.cred.checkers import InMemoryUsernamePasswordDatabaseDontUse
from twisted.cred.portal import IRealm, Portal
from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredQueue, fail, succeed
from twisted.internet.interfaces import IReactorProcess
from twisted.internet.ssl import Certificate, DefaultOpenSSLContextFactory
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import formatEvent, globalLogPublisher
from twisted.mail.imap4 import PLAINCredentials
from twisted.mail.smtp import (
    ESMTP,
    IMessage,
    IMessageDelivery,
    LOGINCredentials,
    SMTPFactory,
)
from twisted.python.failure import Failure
from zope.interface import implementer
from zope.interface.verify import verifyObject

from beacon.config import ConfigError, Notify, build_config
from beacon.intake import PublicPolicy, content_of, new_id, schema_validator
from beacon.notify import (
    CommandChannel,
    INotificationChannel,
    NotificationFailed,
    Notifier,
    SMTPChannel,
    STOP_TIMEOUT,
    digest_message,
    inert,
    summary_json,
    smtp_trust_root,
    summary_of,
)
from beacon.protocol import CallContext
from beacon.service import check_config, makeService, notifiers
from beacon.store import NotificationBatch, StoredTask, Submission
from beacon.testing import MemoryStore
from peers.postgres import pg_schema, pg_url, postgresql  # noqa: F401 (fixtures)

#: The longest a test waits for the real reactor, a process or a socket: a
#: safety net for a loaded machine, never what a test measures.
WAIT = 60.0

#: The Clock's time at the start of every test: 2025-11-30T04:29:55.125Z.
NOW = 1_764_476_995.125

#: Submitted text that a notification without content never carries.
SECRET = "zq-SECRET-4f9e1b"

STRUCTURED = {
    "from": {"name": "Ada", "agent": "ada-assistant/2.1", "operator": "Example Lab"},
    "subject": "Dataset licence question",
    "body": "Body " + SECRET + "\n.\nsecond line",
    "language": "en",
    "contact": [{"kind": "email", "value": "submitter@evil.example"}],
}


def within(d: Deferred[Any], seconds: float = WAIT) -> Deferred[Any]:
    """Bound a wait on the real reactor, so that a broken test fails, not hangs."""
    return d.addTimeout(seconds, reactor)


# The store the notifiers read.


def clock_at_now() -> Clock:
    clock = Clock()
    clock.advance(NOW)
    return clock


def submission(
    clock: Clock, text: str | None = None, message: dict[str, Any] | None = None, door: str = "native"
) -> Submission:
    """A submission received now, as the intake makes it."""
    document = {"message": message} if message is not None else {"text": text or "hello"}
    content = content_of(document)
    now = clock.seconds()
    return Submission(
        id=new_id(now),
        context_id=new_id(now),
        received_at_ms=int(now * 1000),
        door=door,
        source="192.0.2.1",
        kind=content.kind,
        message_id="",
        content=content.canonical,
        sha256=content.sha256,
    )


def submit(store: MemoryStore, clock: Clock, count: int = 1, **kwargs: Any) -> list[str]:
    """Append C{count} submissions; their ids."""
    ids = []
    for _ in range(count):
        stored = submission(clock, **kwargs)
        store.append(stored)
        ids.append(stored.id)
    return ids


# Channels made for the tests.


@implementer(INotificationChannel)
class FakeChannel:
    """
    Records each summary; answers as C{mode} says: C{"ok"} at once,
    C{"fail"} with L{NotificationFailed}, C{"hang"} never (until
    cancelled).
    """

    def __init__(self, name: str = "command", mode: str = "ok") -> None:
        self.name = name
        self.mode = mode
        self.summaries: list[dict[str, Any]] = []
        self.cancelled = 0
        self.stopped = 0

    def send(self, summary: dict[str, Any]) -> Deferred[None]:
        self.summaries.append(summary)
        if self.mode == "ok":
            return succeed(None)
        if self.mode == "fail":
            return fail(NotificationFailed("exit status 1"))

        def cancel(_: object) -> None:
            self.cancelled += 1

        return Deferred(cancel)

    def stop(self) -> Deferred[None]:
        self.stopped += 1
        return succeed(None)

    def ids(self) -> list[str]:
        return [i for summary in self.summaries for i in summary["ids"]]


@implementer(INotificationChannel)
class Watched:
    """
    A real channel whose every outcome the test can wait for: each send's
    result (C{"ok"} or C{"failed: <message>"}) is put on C{outcomes} on the
    real reactor's next turn, once the notifier has handled it.
    """

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.name = channel.name
        self.outcomes: DeferredQueue[str] = DeferredQueue()

    def send(self, summary: dict[str, Any]) -> Deferred[None]:
        sending: Deferred[None] = self.channel.send(summary)

        def done(outcome: object) -> object:
            word = "ok" if not isinstance(outcome, Failure) else f"failed: {outcome.getErrorMessage()}"
            reactor.callLater(0, self.outcomes.put, word)
            return outcome

        return sending.addBoth(done)

    def stop(self) -> Deferred[None]:
        stopped: Deferred[None] = self.channel.stop()
        return stopped

    def next(self) -> Deferred[str]:
        """The next send's outcome (bounded)."""
        return within(self.outcomes.get())


@pytest.fixture
def clock() -> Clock:
    return clock_at_now()


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


def started(notifier: Notifier) -> Notifier:
    notifier.startService()
    return notifier


def every_text(logged_events: Any) -> str:
    return "\n".join(formatEvent(e) + repr(e) for e in logged_events.events)


# The summary.


def test_the_summary_says_ids_times_doors_kinds_sizes_and_subjects(clock: Clock) -> None:
    """A summary has count, pending, ids and per submission id, received (as receipts say it), door, kind, size and the structured subject; no content unless asked."""
    text = submission(clock, text="Hello " + SECRET)
    clock.advance(1.5)
    structured = submission(clock, message=STRUCTURED, door="a2a-jsonrpc")
    tasks = [
        StoredTask(submission=s, state="TASK_STATE_SUBMITTED", updated_at_ms=s.received_at_ms, note=None, seq=n)
        for n, s in enumerate([text, structured], 1)
    ]
    batch = NotificationBatch(tasks=tasks, through_seq=2, pending=5)
    summary = summary_of(batch, include_content=False)
    assert summary == {
        "count": 2,
        "pending": 3,
        "ids": [text.id, structured.id],
        "submissions": [
            {
                "id": text.id,
                "received": "2025-11-30T04:29:55.125Z",
                "door": "native",
                "kind": "text",
                "size": len(text.content),
            },
            {
                "id": structured.id,
                "received": "2025-11-30T04:29:56.625Z",
                "door": "a2a-jsonrpc",
                "kind": "structured",
                "size": len(structured.content),
                "subject": "Dataset licence question",
            },
        ],
    }
    assert SECRET not in json.dumps(summary)
    with_content = summary_of(batch, include_content=True)
    assert [s["content"] for s in with_content["submissions"]] == [
        {"text": "Hello " + SECRET},
        {"message": STRUCTURED},
    ]
    line = summary_json(with_content)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == with_content


def test_inert_escapes_what_could_act() -> None:
    """Controls, bidi overrides, separators are shown as escapes; line feeds only when kept."""
    assert inert("a\x1b[31mb\r\nc\u202ed\u2028") == "a\\x1b[31mb\\x0d\\x0ac\\u202ed\\u2028"
    assert inert("a\nb\tc", keep_lines=True) == "a\nb\\x09c"
    assert inert("plain text") == "plain text"


# When the notifier tells: on the Clock, with a channel made for the test.


def test_a_new_channel_starts_after_the_newest_submission(store: MemoryStore, clock: Clock) -> None:
    """Submissions stored before a channel's first start are not notified (no backlog); the next one is."""
    submit(store, clock, 3)
    channel = FakeChannel()
    notifier = started(Notifier(store, clock, channel))
    clock.advance(3600)
    assert channel.summaries == []
    (new,) = submit(store, clock)
    clock.advance(0)
    assert channel.ids() == [new]
    notifier.stopService()


def test_a_submission_is_told_on_the_next_turn_never_during_its_append(
    store: MemoryStore, clock: Clock, logged_events: Any
) -> None:
    """The append returns before the notifier does anything; the next turn of the reactor tells; notify.sent says channel and count."""
    channel = FakeChannel()
    notifier = started(Notifier(store, clock, channel))
    (first,) = submit(store, clock)
    assert channel.summaries == []
    clock.advance(0)
    assert channel.ids() == [first]
    (sent,) = logged_events.named("notify.sent")
    assert (sent["channel"], sent["count"], sent["pending"]) == ("command", 1, 0)
    notifier.stopService()


def test_notifications_come_at_most_once_per_interval(store: MemoryStore, clock: Clock) -> None:
    """Submissions within the interval after a notification wait for it and come together; one after a quiet interval is told at once."""
    channel = FakeChannel()
    notifier = started(Notifier(store, clock, channel, interval=60))
    first = submit(store, clock)
    clock.advance(0)
    clock.advance(10)
    second = submit(store, clock)
    clock.advance(30)
    third = submit(store, clock)
    clock.advance(19.9)
    assert channel.ids() == first
    clock.advance(0.1)
    assert [s["ids"] for s in channel.summaries] == [first, second + third]
    clock.advance(500)
    fourth = submit(store, clock)
    clock.advance(0)
    assert [s["ids"] for s in channel.summaries] == [first, second + third, fourth]
    notifier.stopService()


def test_a_flood_is_batched_with_count_and_pending(store: MemoryStore, clock: Clock) -> None:
    """500 submissions at once come in three notifications of at most 200, each saying how many more wait, one interval apart, every id once and in order."""
    channel = FakeChannel()
    notifier = started(Notifier(store, clock, channel, interval=60))
    ids = submit(store, clock, 500)
    clock.advance(0)
    clock.advance(59.9)
    assert [(s["count"], s["pending"]) for s in channel.summaries] == [(200, 300)]
    clock.advance(0.1)
    clock.advance(60)
    assert [(s["count"], s["pending"]) for s in channel.summaries] == [
        (200, 300),
        (200, 100),
        (100, 0),
    ]
    assert channel.ids() == ids
    clock.advance(600)
    assert len(channel.summaries) == 3
    notifier.stopService()


def test_a_larger_batch_takes_a_flood_at_once(store: MemoryStore, clock: Clock) -> None:
    """With batch = 500 the flood is one notification."""
    channel = FakeChannel()
    notifier = started(Notifier(store, clock, channel, batch=500))
    ids = submit(store, clock, 500)
    clock.advance(0)
    assert [(s["count"], s["pending"]) for s in channel.summaries] == [(500, 0)]
    assert channel.ids() == ids
    notifier.stopService()


def test_a_failing_channel_is_retried_with_backoff_and_loses_nothing(
    store: MemoryStore, clock: Clock, logged_events: Any
) -> None:
    """A failure is logged as notify.failed (channel, attempt, reason, no content) and retried after the interval, then twice as long each time; the next success carries the failed submissions and the newer ones."""
    channel = FakeChannel(mode="fail")
    notifier = started(Notifier(store, clock, channel, interval=60))
    failed = submit(store, clock, text=SECRET)
    clock.advance(0)
    clock.advance(60)
    clock.advance(119.9)
    assert len(channel.summaries) == 2
    clock.advance(0.1)
    assert len(channel.summaries) == 3
    events = logged_events.named("notify.failed")
    assert [(e["channel"], e["attempt"], e["delay"], e["reason"]) for e in events] == [
        ("command", 1, 60, "exit status 1"),
        ("command", 2, 120, "exit status 1"),
        ("command", 3, 240, "exit status 1"),
    ]
    assert all(s["ids"] == failed for s in channel.summaries)
    channel.mode = "ok"
    newer = submit(store, clock)
    clock.advance(239.9)  # a new submission does not cut the backoff short
    assert len(channel.summaries) == 3
    clock.advance(0.1)
    assert channel.summaries[-1]["ids"] == failed + newer
    assert notifier.failures == 0
    assert SECRET not in every_text(logged_events)
    # Back to the interval.
    clock.advance(60)
    latest = submit(store, clock)
    clock.advance(0)
    assert channel.summaries[-1]["ids"] == latest
    notifier.stopService()


def test_the_backoff_is_capped(store: MemoryStore, clock: Clock, logged_events: Any) -> None:
    """The wait doubles from the interval up to max_backoff (an hour by default)."""
    channel = FakeChannel(mode="fail")
    notifier = started(Notifier(store, clock, channel, interval=1000))
    submit(store, clock)
    clock.advance(0)
    for _ in range(4):
        clock.advance(3600)
    assert [e["delay"] for e in logged_events.named("notify.failed")] == [1000, 2000, 3600, 3600, 3600]
    notifier.stopService()


def test_a_delivery_without_answer_is_abandoned_after_the_timeout(
    store: MemoryStore, clock: Clock, logged_events: Any
) -> None:
    """A send that does not end within timeout is cancelled, logged as notify.failed, and its submissions come again."""
    channel = FakeChannel(mode="hang")
    notifier = started(Notifier(store, clock, channel, interval=60, timeout=30))
    ids = submit(store, clock)
    clock.advance(0)
    clock.advance(29.9)
    assert channel.cancelled == 0
    clock.advance(0.1)
    assert channel.cancelled == 1
    (failed,) = logged_events.named("notify.failed")
    assert failed["reason"] == "no answer within 30 s; abandoned"
    channel.mode = "ok"
    clock.advance(60)
    assert [s["ids"] for s in channel.summaries] == [ids, ids]
    notifier.stopService()


def test_stop_abandons_a_delivery_and_a_restart_tells_it_again(
    store: MemoryStore, clock: Clock, logged_events: Any
) -> None:
    """stopService cancels the delivery (not logged as a failure), stops the channel and leaves no timer; the next start tells of the same submissions."""
    channel = FakeChannel(mode="hang")
    notifier = started(Notifier(store, clock, channel))
    ids = submit(store, clock)
    clock.advance(0)
    stopped = notifier.stopService()
    assert stopped.called
    assert (channel.cancelled, channel.stopped) == (1, 1)
    assert logged_events.named("notify.failed") == []
    again = FakeChannel()
    restarted = started(Notifier(store, clock, again))
    clock.advance(0)
    assert again.ids() == ids
    restarted.stopService()


class SlowClaims(MemoryStore):
    """A MemoryStore whose claims, once C{slow}, wait until the test answers them."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = False
        self.claims: list[tuple[Deferred[Any], tuple[Any, ...]]] = []

    def claim_notifications(self, *args: Any) -> Deferred[NotificationBatch | None]:
        if not self.slow:
            return super().claim_notifications(*args)
        waiting: Deferred[NotificationBatch | None] = Deferred()
        self.claims.append((waiting, args))
        return waiting

    def answer(self) -> None:
        waiting, args = self.claims.pop(0)
        super().claim_notifications(*args).chainDeferred(waiting)


def test_stop_waits_for_a_claim_in_flight_and_then_delivers_nothing(
    clock: Clock, logged_events: Any
) -> None:
    """A claim answered after stopService is given back unsent (the cursor stays); stopService's Deferred fires once it is; the next start tells of those submissions."""
    store = SlowClaims()
    channel = FakeChannel()
    notifier = started(Notifier(store, clock, channel))
    ids = submit(store, clock)
    store.slow = True
    clock.advance(0)
    stopped = notifier.stopService()
    assert not stopped.called
    store.answer()
    assert stopped.called
    assert channel.summaries == []
    store.slow = False
    again = FakeChannel()
    restarted = started(Notifier(store, clock, again))
    clock.advance(0)
    assert again.ids() == ids
    restarted.stopService()
    assert logged_events.named("notify.stop_timeout") == []


def test_stop_waits_a_bounded_time(clock: Clock, logged_events: Any) -> None:
    """A claim that never answers holds stopService for STOP_TIMEOUT seconds of the clock, then notify.stop_timeout says so."""
    store = SlowClaims()
    notifier = started(Notifier(store, clock, FakeChannel()))
    submit(store, clock)
    store.slow = True
    clock.advance(0)
    stopped = notifier.stopService()
    clock.advance(STOP_TIMEOUT - 0.1)
    assert not stopped.called
    clock.advance(0.1)
    assert stopped.called
    (event,) = logged_events.named("notify.stop_timeout")
    assert (event["channel"], event["seconds"]) == ("command", STOP_TIMEOUT)


def test_a_store_failure_is_logged_and_the_next_read_retries(
    store: MemoryStore, clock: Clock, logged_events: Any
) -> None:
    """A claim the store fails is notify.store_failed (no traceback); the periodic read an interval later tells of the submissions."""
    channel = FakeChannel()
    notifier = started(Notifier(store, clock, channel, interval=60))
    ids = submit(store, clock)
    store.fail_appends = True
    clock.advance(0)
    (event,) = logged_events.named("notify.store_failed")
    assert event["channel"] == "command"
    assert channel.summaries == []
    store.fail_appends = False
    clock.advance(60)
    assert channel.ids() == ids
    notifier.stopService()


def test_decisions_wake_nothing(store: MemoryStore, clock: Clock) -> None:
    """Only stored submissions are told of; a review decision is not a new submission."""
    ids = submit(store, clock)
    channel = FakeChannel()
    notifier = started(Notifier(store, clock, channel))
    store.append_decision(ids[0], "TASK_STATE_COMPLETED", int(clock.seconds() * 1000))
    clock.advance(3600)
    assert channel.summaries == []
    notifier.stopService()


def test_two_instances_on_one_store_tell_of_each_submission_once(
    store: MemoryStore, clock: Clock
) -> None:
    """Two notifiers (two holders) of one channel on one store: while one holds the lease the other reads nothing; each submission is told once, by one of them."""
    first, second = FakeChannel(), FakeChannel()
    a = started(Notifier(store, clock, first, holder="a"))
    b = started(Notifier(store, clock, second, holder="b"))
    ids: list[str] = []
    for round_ in range(20):
        ids += submit(store, clock, round_ % 4)
        clock.advance(7 * (round_ % 5))
    clock.advance(600)
    told = first.ids() + second.ids()
    assert sorted(told) == sorted(ids)
    assert len(set(told)) == len(told)
    a.stopService()
    b.stopService()


def test_a_lease_keeps_the_other_instance_out_until_its_holder_gives_up(
    store: MemoryStore, clock: Clock, logged_events: Any
) -> None:
    """While one notifier's delivery hangs, the other reads nothing of the channel; once the first gives up (timeout), the other's periodic read tells of those submissions, once."""
    hanging, working = FakeChannel(mode="hang"), FakeChannel()
    a = started(Notifier(store, clock, hanging, holder="a", interval=60, timeout=30))
    b = started(Notifier(store, clock, working, holder="b", interval=60, timeout=30))
    ids = submit(store, clock)
    clock.advance(0)
    assert [s["ids"] for s in hanging.summaries] == [ids]
    assert working.summaries == []
    clock.advance(30)
    assert hanging.cancelled == 1
    assert working.summaries == []
    clock.advance(30)  # b's periodic read; a retries only after its backoff
    assert working.ids() == ids
    clock.advance(600)
    assert [s["ids"] for s in hanging.summaries] == [ids]
    assert working.ids() == ids
    assert len(logged_events.named("notify.failed")) == 1
    a.stopService()
    b.stopService()


# Over the real stores: the cursor in the database.


async def append_all(stores: list[Any], clock: Clock, count: int) -> list[str]:
    """Append C{count} submissions, one store after the other; their ids."""
    ids = []
    for n in range(count):
        stored = submission(clock, text=f"number {n}")
        await within(stores[n % len(stores)].append(stored))
        ids.append(stored.id)
    return ids


async def settled(*notifiers: Notifier) -> None:
    """Wait (bounded) until no notifier has a read or delivery in progress."""
    for notifier in notifiers:
        await within(notifier.idle())


@pytest_twisted.ensureDeferred
async def test_the_cursor_outlives_a_restart_on_sqlite(tmp_path: Path, clock: Clock) -> None:
    """SQLite: what was told is not told again after a restart, and what arrived while Beacon was down is told at the next start."""
    from beacon.store import open_store, sqlite_url

    url = sqlite_url(str(tmp_path / "beacon.sqlite3"))
    store = open_store(url, reactor)
    store.startService()
    channel = FakeChannel()
    notifier = started(Notifier(store, clock, channel))
    await settled(notifier)
    told = await append_all([store], clock, 3)
    clock.advance(0)
    await settled(notifier)
    assert channel.ids() == told
    await within(notifier.stopService())
    while_down = await append_all([store], clock, 2)
    await within(store.stopService())

    reopened = open_store(url, reactor)
    reopened.startService()
    again = FakeChannel()
    restarted = started(Notifier(reopened, clock, again))
    await settled(restarted)
    assert again.ids() == while_down
    await within(restarted.stopService())
    await within(reopened.stopService())


@pytest_twisted.ensureDeferred
async def test_two_instances_on_postgresql_tell_of_each_submission_once(
    pg_url: str, clock: Clock
) -> None:
    """Two stores on one PostgreSQL database (two instances), each with its notifier of the same channel: every submission, through either, is told once, by one of them."""
    from beacon.store import open_store

    stores = [open_store(pg_url, reactor), open_store(pg_url, reactor)]
    for store in stores:
        store.startService()
    channels = [FakeChannel(), FakeChannel()]
    instances = [
        started(Notifier(store, clock, channel, holder=name, interval=60))
        for store, channel, name in zip(stores, channels, ["one", "two"])
    ]
    await settled(*instances)
    appended: list[str] = []
    for _ in range(3):
        appended += await append_all(stores, clock, 10)
        clock.advance(60)
        await settled(*instances)
    clock.advance(60)
    await settled(*instances)
    told = channels[0].ids() + channels[1].ids()
    assert sorted(told) == sorted(appended)
    assert len(set(told)) == len(told)
    # One notification a round: the instance that lost the race for the
    # lease found it held, or found nothing new once it was given back.
    assert len(channels[0].summaries) + len(channels[1].summaries) == 3
    for notifier in instances:
        await within(notifier.stopService())
    for store in stores:
        await within(store.stopService())


# The command: a real program recording its standard input.


RECORDER = r"""
import os, sys, time
directory = sys.argv[1]
data = sys.stdin.buffer.read()
if os.path.exists(os.path.join(directory, "fail")):
    sys.stderr.write("refused " + "x" * 5000 + " \x1b[31mthe fail file is there\n")
    sys.exit(1)
if os.path.exists(os.path.join(directory, "hang")):
    time.sleep(600)  # a slow command: the notifier kills it
runs = [name for name in os.listdir(directory) if name.startswith("run-")]
with open(os.path.join(directory, "run-%03d.json" % len(runs)), "wb") as f:
    f.write(data)
"""


class Recorder:
    """The recording command's directory and its runs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.argv = [sys.executable, "-c", RECORDER, str(directory)]

    def runs(self) -> list[dict[str, Any]]:
        return [
            json.loads(path.read_bytes())
            for path in sorted(self.directory.glob("run-*.json"))
        ]

    def set(self, flag: str, on: bool = True) -> None:
        path = self.directory / flag
        if on:
            path.touch()
        else:
            path.unlink()


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    return Recorder(tmp_path)


def command_notifier(
    store: MemoryStore, clock: Clock, recorder: Recorder, **options: Any
) -> tuple[Notifier, Watched]:
    channel = Watched(CommandChannel(reactor, recorder.argv))  # type: ignore[arg-type]
    return started(Notifier(store, clock, channel, **options)), channel


@pytest_twisted.ensureDeferred
async def test_the_command_gets_the_summary_on_stdin(
    store: MemoryStore, clock: Clock, recorder: Recorder, logged_events: Any
) -> None:
    """The program runs (no shell) with the JSON summary on its standard input; without include_content no content reaches it."""
    notifier, channel = command_notifier(store, clock, recorder)
    ids = submit(store, clock, text="text " + SECRET) + submit(store, clock, message=STRUCTURED)
    clock.advance(0)
    assert await channel.next() == "ok"
    (run,) = recorder.runs()
    assert run["count"] == 2 and run["pending"] == 0 and run["ids"] == ids
    assert [s.get("subject") for s in run["submissions"]] == [None, "Dataset licence question"]
    assert SECRET not in json.dumps(run)
    assert [e["count"] for e in logged_events.named("notify.sent")] == [2]
    await within(notifier.stopService())


@pytest_twisted.ensureDeferred
async def test_the_command_gets_content_when_asked(
    store: MemoryStore, clock: Clock, recorder: Recorder
) -> None:
    """include_content = true: each submission carries its stored content document."""
    notifier, channel = command_notifier(store, clock, recorder, include_content=True)
    submit(store, clock, text="text " + SECRET)
    submit(store, clock, message=STRUCTURED)
    clock.advance(0)
    assert await channel.next() == "ok"
    (run,) = recorder.runs()
    assert [s["content"] for s in run["submissions"]] == [
        {"text": "text " + SECRET},
        {"message": STRUCTURED},
    ]
    await within(notifier.stopService())


@pytest_twisted.ensureDeferred
async def test_a_flood_reaches_the_command_in_few_runs(
    store: MemoryStore, clock: Clock, recorder: Recorder
) -> None:
    """500 submissions at once: three runs of the command, 200, 200 and 100, each saying how many more wait; every id once, in order."""
    notifier, channel = command_notifier(store, clock, recorder)
    ids = submit(store, clock, 500)
    clock.advance(0)
    assert await channel.next() == "ok"
    for _ in range(2):
        clock.advance(60)
        assert await channel.next() == "ok"
    runs = recorder.runs()
    assert [(r["count"], r["pending"]) for r in runs] == [(200, 300), (200, 100), (100, 0)]
    assert [i for r in runs for i in r["ids"]] == ids
    await within(notifier.stopService())


@pytest_twisted.ensureDeferred
async def test_a_failing_command_is_retried_and_the_next_run_carries_its_submissions(
    store: MemoryStore, clock: Clock, recorder: Recorder, logged_events: Any
) -> None:
    """Exit status 1: notify.failed with the status and the end of standard error (bounded, inert); after the backoff the command, now working, gets the failed submissions and the newer ones."""
    notifier, channel = command_notifier(store, clock, recorder)
    recorder.set("fail")
    failed = submit(store, clock, text=SECRET)
    clock.advance(0)
    assert (await channel.next()).startswith("failed: exit status 1")
    (event,) = logged_events.named("notify.failed")
    assert event["attempt"] == 1
    assert event["reason"].startswith("exit status 1; standard error ends: ")
    assert event["reason"].endswith(" \\x1b[31mthe fail file is there")
    assert "\x1b" not in event["reason"] and "refused" not in event["reason"]
    assert len(event["reason"]) < 2200
    recorder.set("fail", False)
    newer = submit(store, clock)
    clock.advance(60)
    assert await channel.next() == "ok"
    (run,) = recorder.runs()
    assert run["ids"] == failed + newer
    assert SECRET not in every_text(logged_events)
    await within(notifier.stopService())


@pytest_twisted.ensureDeferred
async def test_a_slow_command_is_killed_after_the_timeout_and_retried(
    store: MemoryStore, clock: Clock, recorder: Recorder, logged_events: Any
) -> None:
    """A command still running at timeout (on the Clock) is killed and logged as notify.failed; the retry carries its submissions."""
    notifier, channel = command_notifier(store, clock, recorder, timeout=30)
    recorder.set("hang")
    ids = submit(store, clock)
    clock.advance(0)
    clock.advance(30)
    assert (await channel.next()).startswith("failed:")
    (event,) = logged_events.named("notify.failed")
    assert event["reason"] == "no answer within 30 s; abandoned"
    recorder.set("hang", False)
    clock.advance(60)
    assert await channel.next() == "ok"
    assert [r["ids"] for r in recorder.runs()] == [ids]
    await within(notifier.stopService())


@pytest_twisted.ensureDeferred
async def test_a_hanging_command_never_delays_a_receipt(
    store: MemoryStore, clock: Clock, recorder: Recorder
) -> None:
    """While the command hangs, every submission through the public policy gets its receipt at once; stopping kills the command and waits for it; the next start tells of everything."""
    notifier, channel = command_notifier(store, clock, recorder, timeout=3600)
    recorder.set("hang")
    policy = PublicPolicy(store, clock, schema_validator())
    context = CallContext(binding="native", source="192.0.2.1")
    receipts = []
    for n in range(21):
        answered = policy.submit_document(context, {"text": f"number {n}"})
        assert answered.called, "a receipt waited"
        receipts.append(answered.result["id"])
        clock.advance(0)  # the first one starts the (hanging) command
    await within(notifier.stopService())
    assert (await channel.next()).startswith("failed:")  # the killed run
    recorder.set("hang", False)
    restarted, again = command_notifier(store, clock, recorder)
    assert await again.next() == "ok"
    assert [i for r in recorder.runs() for i in r["ids"]] == receipts
    await within(restarted.stopService())


@pytest_twisted.ensureDeferred
async def test_beacon_runs_the_command_for_a_submission_through_its_door(
    tmp_path: Path, recorder: Recorder, logged_events: Any
) -> None:
    """makeService's tree on the real reactor, [notify] command set: a native submission's receipt comes back, and the command is told of it (the first submission after a quiet interval is told at once)."""
    from treq.client import HTTPClient
    from twisted.web.client import Agent, HTTPConnectionPool

    from beacon.listeners import Listeners

    data = tmp_path / "data"
    config = build_config(
        {"notify": {"command": recorder.argv}},
        data_dir=str(data),
        http=["tcp:0:interface=127.0.0.1"],
        public_url="http://127.0.0.1:1",
        operator_socket="",
    )
    told: Deferred[None] = Deferred()

    def watch(event: dict[str, Any]) -> None:
        if str(event.get("log_format", "")).startswith("notify.sent"):
            # On the next turn: not inside the notifier's own logging call.
            reactor.callLater(0, lambda: None if told.called else told.callback(None))

    globalLogPublisher.addObserver(watch)
    service = makeService(config, reactor)  # type: ignore[arg-type]
    service.startService()
    try:
        port = next(s for s in service if isinstance(s, Listeners)).ports[0].getHost().port
        client = HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))
        response = await within(
            client.post(
                f"http://127.0.0.1:{port}/beacon/0.1/submissions",
                json.dumps({"text": "hello " + SECRET}).encode(),
                headers={"Content-Type": ["application/json"]},
            )
        )
        receipt = (await within(response.json()))["receipt"]
        assert response.code == 201
        await within(told)
        (run,) = recorder.runs()
        assert run["ids"] == [receipt["id"]]
        assert run["submissions"][0]["received"] == receipt["receivedAt"]
        assert SECRET not in json.dumps(run)
    finally:
        globalLogPublisher.removeObserver(watch)
        await within(service.stopService())


def test_a_program_not_found_is_a_config_error() -> None:
    """
    A command whose program is not on PATH (or not executable) stops
    start-up with a config error naming it: beacon.notify's check, which
    check_config runs before anything starts (the configuration, plain
    data, reads it as given).
    """
    missing = build_config({"notify": {"command": ["no-such-program-beacon-test"]}})
    assert missing.notify.command == ("no-such-program-beacon-test",)
    with pytest.raises(ConfigError, match="not found on PATH"):
        check_config(missing)
    with pytest.raises(ConfigError, match="not an executable file"):
        check_config(build_config({"notify": {"command": ["/nonexistent/beacon-notify"]}}))


# The mail: Twisted's own ESMTP server, started here.


@implementer(IMessage)
class _Message:
    def __init__(self, inbox: "Inbox", recipient: str) -> None:
        self.inbox = inbox
        self.recipient = recipient
        self.lines: list[bytes] = []

    def lineReceived(self, line: bytes) -> None:
        self.lines.append(line)

    def eomReceived(self) -> Deferred[None]:
        self.inbox.messages.append((self.recipient, b"\n".join(self.lines)))
        return succeed(None)

    def connectionLost(self) -> None:
        pass


@implementer(IMessageDelivery)
class Inbox:
    """Every message the server accepted: (recipient, bytes), and the senders."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self.senders: list[str] = []

    def receivedHeader(self, helo: Any, origin: Any, recipients: Any) -> None:
        return None

    def validateFrom(self, helo: Any, origin: Any) -> Any:
        self.senders.append(str(origin))
        return origin

    def validateTo(self, user: Any) -> Any:
        return lambda: _Message(self, str(user.dest))


@implementer(IRealm)
class _Realm:
    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox

    def requestAvatar(self, avatar_id: Any, mind: Any, *interfaces: Any) -> Any:
        return IMessageDelivery, self.inbox, lambda: None


class MailServer(SMTPFactory):
    """An ESMTP server on 127.0.0.1, with STARTTLS and AUTH when asked."""

    protocol = ESMTP

    def __init__(self, inbox: Inbox, tls: Any = None, users: dict[bytes, bytes] | None = None) -> None:
        portal = None
        if users is not None:
            portal = Portal(_Realm(inbox), [InMemoryUsernamePasswordDatabaseDontUse(**{k.decode(): v for k, v in users.items()})])
        super().__init__(portal)
        self.inbox = inbox
        self.tls = tls
        self.servers: list[Any] = []

    def buildProtocol(self, addr: Any) -> Any:
        server = super().buildProtocol(addr)
        server.ctx = self.tls
        if self.portal is None:
            server.delivery = self.inbox
        else:
            server.challengers = {b"LOGIN": LOGINCredentials, b"PLAIN": PLAINCredentials}
        self.servers.append(server)
        return server


@pytest.fixture
def certificate(tmp_path: Path) -> Iterator[tuple[Any, Certificate]]:
    """Server TLS options for 127.0.0.1 and the certificate a client must trust."""
    from test_websocket import _certificate

    cert_path, key_path = _certificate(tmp_path)
    server = DefaultOpenSSLContextFactory(str(key_path), str(cert_path))
    yield server, Certificate.loadPEM(cert_path.read_bytes())


@pytest.fixture
def listening() -> Iterator[list[Any]]:
    """Ports a test listens on, closed at its end."""
    ports: list[Any] = []
    yield ports
    for port in ports:
        port.stopListening()


def mail_notifier(
    store: MemoryStore,
    clock: Clock,
    port: int,
    trust: Certificate | None = None,
    *,
    tls: bool = False,
    include_content: bool = False,
    **options: Any,
) -> tuple[Notifier, Watched]:
    channel = Watched(
        SMTPChannel(
            reactor,  # type: ignore[arg-type]
            clock,
            "127.0.0.1",
            port,
            tls=tls,
            mail_from="beacon@beacon.example",
            mail_to=["reader@inbox.example", "second@inbox.example"],
            trust_root=trust,
            **options,
        )
    )
    return started(Notifier(store, clock, channel, include_content=include_content)), channel


def parse(message: bytes) -> Any:
    return email.message_from_bytes(message, policy=email.policy.default)


@pytest_twisted.ensureDeferred
async def test_the_digest_mail_goes_to_the_configured_addresses_over_starttls(
    store: MemoryStore, clock: Clock, certificate: Any, listening: list[Any]
) -> None:
    """The server offers STARTTLS and the client uses it; the digest goes from mail_from to mail_to only (never a submitted contact), with Beacon's own headers, one line per submission, and no content."""
    server_tls, trust = certificate
    inbox = Inbox()
    factory = MailServer(inbox, tls=server_tls)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    listening.append(port)
    notifier, channel = mail_notifier(store, clock, port.getHost().port, trust)
    ids = submit(store, clock, message=STRUCTURED, door="a2a-jsonrpc") + submit(store, clock, text=SECRET)
    clock.advance(0)
    assert await channel.next() == "ok"
    assert factory.servers[-1].startedTLS
    assert inbox.senders == ["beacon@beacon.example"]
    assert sorted(r for r, _ in inbox.messages) == ["reader@inbox.example", "second@inbox.example"]
    raw = inbox.messages[0][1]
    assert b"evil.example" not in raw and SECRET.encode() not in raw
    message = parse(raw)
    assert message["From"] == "beacon@beacon.example"
    assert message["To"] == "reader@inbox.example, second@inbox.example"
    assert message["Subject"] == "Beacon: 2 new submissions"
    assert message["Date"] == "Sun, 30 Nov 2025 04:29:55 +0000"
    assert message["Message-ID"].endswith("@beacon.example>")
    assert message["Auto-Submitted"] == "auto-generated"
    assert message.get_content_type() == "text/plain"
    body = message.get_content()
    assert f"  {ids[0][:16]}  2025-11-30T04:29:55.125Z  a2a-jsonrpc  Dataset licence question" in body
    assert f"  {ids[1][:16]}  2025-11-30T04:29:55.125Z  native  (text, " in body
    assert SECRET not in body
    await within(notifier.stopService())


@pytest_twisted.ensureDeferred
async def test_the_digest_carries_content_when_asked(
    store: MemoryStore, clock: Clock, listening: list[Any]
) -> None:
    """include_content = true: the body shows each submission, every line indented and inert (a lone dot arrives as it was sent)."""
    inbox = Inbox()
    port = reactor.listenTCP(0, MailServer(inbox), interface="127.0.0.1")
    listening.append(port)
    notifier, channel = mail_notifier(store, clock, port.getHost().port, include_content=True)
    ids = submit(store, clock, message=STRUCTURED)
    clock.advance(0)
    assert await channel.next() == "ok"
    body = parse(inbox.messages[0][1]).get_content()
    assert f"Submission {ids[0]}:" in body
    assert f"    Body {SECRET}\n    .\n    second line" in body
    assert "    Contact (email): submitter@evil.example" in body
    await within(notifier.stopService())


@pytest_twisted.ensureDeferred
async def test_smtps_is_tls_from_the_first_byte(
    store: MemoryStore, clock: Clock, certificate: Any, listening: list[Any]
) -> None:
    """smtps://: the client speaks TLS at once (the server never offers STARTTLS on it)."""
    server_tls, trust = certificate
    inbox = Inbox()
    factory = MailServer(inbox)
    port = reactor.listenSSL(0, factory, server_tls, interface="127.0.0.1")
    listening.append(port)
    notifier, channel = mail_notifier(store, clock, port.getHost().port, trust, tls=True)
    submit(store, clock)
    clock.advance(0)
    assert await channel.next() == "ok"
    assert len(inbox.messages) == 2
    await within(notifier.stopService())


@pytest_twisted.ensureDeferred
async def test_an_untrusted_certificate_fails_the_mail(
    store: MemoryStore, clock: Clock, certificate: Any, listening: list[Any], logged_events: Any
) -> None:
    """A server whose certificate the client does not trust gets nothing: notify.failed, retried."""
    server_tls, _ = certificate
    inbox = Inbox()
    port = reactor.listenTCP(0, MailServer(inbox, tls=server_tls), interface="127.0.0.1")
    listening.append(port)
    notifier, channel = mail_notifier(store, clock, port.getHost().port)  # platform trust
    submit(store, clock)
    clock.advance(0)
    assert (await channel.next()).startswith("failed: mail not sent")
    assert inbox.messages == []
    assert len(logged_events.named("notify.failed")) == 1
    await within(notifier.stopService())


@pytest_twisted.ensureDeferred
async def test_the_mail_authenticates_when_configured(
    store: MemoryStore, clock: Clock, certificate: Any, listening: list[Any], logged_events: Any
) -> None:
    """With smtp_user and a password the client authenticates (after STARTTLS) and the server delivers; a wrong password is notify.failed, and the retry with the right one carries the submission."""
    server_tls, trust = certificate
    inbox = Inbox()
    factory = MailServer(inbox, tls=server_tls, users={b"beacon": b"right-password"})
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    listening.append(port)
    wrong, wrong_channel = mail_notifier(
        store, clock, port.getHost().port, trust, user="beacon", password="wrong-password"
    )
    ids = submit(store, clock)
    clock.advance(0)
    assert (await wrong_channel.next()).startswith("failed: mail not sent")
    assert inbox.messages == []
    await within(wrong.stopService())
    right, right_channel = mail_notifier(
        store, clock, port.getHost().port, trust, user="beacon", password="right-password"
    )
    assert await right_channel.next() == "ok"
    assert factory.servers[-1].authenticated and factory.servers[-1].startedTLS
    assert ids[0][:16].encode() in inbox.messages[0][1]
    (failed,) = logged_events.named("notify.failed")
    assert failed["reason"] == "mail not sent: 535 Authentication failed"
    logged = every_text(logged_events)
    for password in (b"right-password", b"wrong-password"):
        assert password.decode() not in logged
        assert base64.b64encode(password).decode() not in logged
    await within(right.stopService())


@pytest_twisted.ensureDeferred
async def test_no_mail_server_is_a_failure_not_a_hang(
    store: MemoryStore, clock: Clock, listening: list[Any], logged_events: Any
) -> None:
    """A refused connection is notify.failed at once."""
    port = reactor.listenTCP(0, MailServer(Inbox()), interface="127.0.0.1")
    number = port.getHost().port
    await port.stopListening()
    notifier, channel = mail_notifier(store, clock, number)
    submit(store, clock)
    clock.advance(0)
    assert (await channel.next()).startswith("failed: mail not sent")
    await within(notifier.stopService())


def test_a_submitted_subject_cannot_inject_a_header(clock: Clock) -> None:
    """Submitted text only ever reaches the body, inert: CR, LF and ESC in a subject are escapes on its line, and the headers are Beacon's own."""
    hostile = dict(STRUCTURED, subject="Hi\r\nBcc: victim@evil.example\x1b[2J")
    task = StoredTask(
        submission=submission(clock, message=hostile),
        state="TASK_STATE_SUBMITTED",
        updated_at_ms=0,
        note=None,
        seq=1,
    )
    summary = summary_of(NotificationBatch([task], 1, 1), include_content=True)
    message = parse(digest_message(summary, "beacon@beacon.example", ["reader@inbox.example"], NOW))
    assert message["Bcc"] is None
    assert sorted(message.keys()) == sorted(
        ["From", "To", "Subject", "Date", "Message-ID", "Auto-Submitted", "Content-Type",
         "Content-Transfer-Encoding", "MIME-Version"]
    )
    body = message.get_content()
    assert "Hi\\x0d\\x0aBcc: victim@evil.example\\x1b[2J" in body
    assert "\x1b" not in body and "\r" not in body
    for line in body.split("\n"):
        assert not line.startswith(".")


# Configuration and wiring.


def test_notify_is_off_by_default_and_every_key_reads() -> None:
    """No [notify]: no channel. Every key arrives typed; mail_to takes one address or a list."""
    assert not build_config().notify.enabled
    notify = build_config(
        {
            "notify": {
                "command": [sys.executable, "-c", "pass"],
                "interval": 5,
                "timeout": 2.5,
                "include_content": True,
                "smtp": "smtps://mail.example",
                "mail_from": "beacon@example.org",
                "mail_to": "reader@example.org",
            }
        }
    ).notify
    assert notify == Notify(
        command=(sys.executable, "-c", "pass"),
        interval=5.0,
        timeout=2.5,
        include_content=True,
        smtp="smtps://mail.example",
        mail_from="beacon@example.org",
        mail_to=("reader@example.org",),
    )
    assert notify.enabled
    assert notify.smtp_server == (True, "mail.example", 465)
    assert build_config(
        {"notify": {"smtp": "smtp://127.0.0.1:2525", "mail_from": "a@b.example", "mail_to": ["c@d.example", "e@f.example"]}}
    ).notify.smtp_server == (False, "127.0.0.1", 2525)


def test_the_password_file_is_read_and_never_shown(tmp_path: Path) -> None:
    """smtp_password_file's first line is the password (read when the config is validated); repr never shows it; an unreadable or empty file is a config error naming the key."""
    secret = tmp_path / "password"
    secret.write_text("pa ss\nignored\n")
    values = {
        "smtp": "smtp://mail.example:587",
        "mail_from": "beacon@example.org",
        "mail_to": "reader@example.org",
        "smtp_user": "beacon",
        "smtp_password_file": str(secret),
    }
    config = build_config({"notify": values})
    assert config.notify.smtp_password == "pa ss"
    assert "pa ss" not in repr(config)
    with pytest.raises(ConfigError, match=r"\[notify\] smtp_password_file: cannot read"):
        build_config({"notify": dict(values, smtp_password_file=str(tmp_path / "missing"))})
    (tmp_path / "empty").write_text("")
    with pytest.raises(ConfigError, match=r"\[notify\] smtp_password_file: .* first line"):
        build_config({"notify": dict(values, smtp_password_file=str(tmp_path / "empty"))})


@pytest.mark.parametrize(
    "values, message",
    [
        ({"command": "prog"}, "[notify] command must be a list of strings"),
        ({"command": []}, "[notify] command must be a list of strings"),
        ({"command": ["", "x"]}, "[notify] command must be a list of strings"),
        ({"command": [sys.executable, 1]}, "[notify] command must be a list of strings"),
        ({"interval": 0}, "[notify] interval must be above 0"),
        ({"interval": "60"}, "[notify] interval must be a number, not a string, for example: interval = 60.0"),
        ({"timeout": -1}, "[notify] timeout must be above 0"),
        ({"timeout": True}, "[notify] timeout must be a number, not a boolean, for example: timeout = 30.0"),
        ({"include_content": "yes"}, "[notify] include_content must be true or false, not a string"),
        ({"smtp": "http://mail.example"}, "[notify] smtp must be smtp://host[:port]"),
        ({"smtp": "smtp://"}, "[notify] smtp must be smtp://host[:port]"),
        ({"smtp": "smtp://mail.example:99999", "mail_from": "a@b.c", "mail_to": "d@e.f"}, "the port is not a number"),
        ({"smtp": "smtp://u:p@mail.example", "mail_from": "a@b.c", "mail_to": "d@e.f"}, "without credentials"),
        ({"smtp": "smtp://mail.example/path", "mail_from": "a@b.c", "mail_to": "d@e.f"}, "[notify] smtp must be"),
        ({"smtp": "smtp://mail.example", "mail_to": "d@e.f"}, "[notify] smtp needs mail_from"),
        ({"smtp": "smtp://mail.example", "mail_from": "a@b.c"}, "[notify] smtp needs mail_to"),
        ({"smtp": "smtp://mail.example", "mail_from": "a@b.c", "mail_to": []}, "[notify] smtp needs mail_to"),
        ({"smtp": "smtp://mail.example", "mail_from": "Ada <a@b.c>", "mail_to": "d@e.f"}, "[notify] mail_from: 'Ada <a@b.c>' is not a bare ASCII mail address"),
        ({"smtp": "smtp://mail.example", "mail_from": "a@b.c", "mail_to": ["d@e.f\r\nBcc: x@y.z"]}, "[notify] mail_to:"),
        ({"smtp": "smtp://mail.example", "mail_from": "a@b.c", "mail_to": [5]}, "[notify] mail_to must be a list of strings"),
        ({"smtp": "smtp://mail.example", "mail_from": "a@b.c", "mail_to": "d@bücher.example"}, "[notify] mail_to: 'd@bücher.example' is not a bare ASCII mail address"),
        ({"smtp": "smtp://mail.example", "mail_from": "a@b.c", "mail_to": "d@e.f", "smtp_user": "u"}, "smtp_user and smtp_password_file go together"),
        ({"mail_to": "d@e.f"}, "[notify] mail_to needs smtp"),
        ({"smtp_user": "u"}, "[notify] smtp_user needs smtp"),
        ({"nope": 1}, "unknown key 'nope' in [notify]"),
    ],
)
def test_invalid_notify_values_are_errors(values: dict[str, Any], message: str) -> None:
    """Each invalid [notify] value is a ConfigError naming its key."""
    with pytest.raises(ConfigError) as caught:
        build_config({"notify": values})
    assert message in str(caught.value)


@implementer(IReactorProcess)
class _ProcessReactor(MemoryReactorClock):
    """A MemoryReactorClock that would run processes (none is run here)."""

    def spawnProcess(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no process is run in this test")


def test_make_service_puts_the_notifiers_after_the_store(tmp_path: Path) -> None:
    """[notify] with a command and a mail server: two notifiers right after the store (so they stop before it), each with its channel; none without [notify]."""
    config = build_config(
        {
            "notify": {
                "command": [sys.executable, "-c", "pass"],
                "smtp": "smtp://127.0.0.1:2525",
                "mail_from": "beacon@example.org",
                "mail_to": "reader@example.org",
                "interval": 30,
            }
        },
        data_dir=str(tmp_path),
        public_url="https://beacon.example",
    )
    children = list(makeService(config, _ProcessReactor()))[1:]  # After the data directory's check.
    assert type(children[0]).__name__ == "SQLiteStore"
    assert [type(c) for c in children[1:3]] == [Notifier, Notifier]
    assert [c.channel.name for c in children[1:3]] == ["command", "smtp"]
    assert all(c.interval == 30 and c.store is children[0] for c in children[1:3])
    assert not any(isinstance(c, Notifier) for c in children[3:])
    plain = build_config(data_dir=str(tmp_path), public_url="https://beacon.example")
    assert not any(isinstance(c, Notifier) for c in makeService(plain, _ProcessReactor()))


def test_a_command_needs_a_reactor_that_runs_processes(tmp_path: Path) -> None:
    """A reactor without IReactorProcess cannot run the command: a start-up error that says so."""
    from beacon.errors import StartupError

    config = build_config({"notify": {"command": [sys.executable]}}, data_dir=str(tmp_path))
    with pytest.raises(StartupError, match="runs processes"):
        notifiers(config, MemoryStore(), MemoryReactorClock())  # type: ignore[arg-type]


def test_the_channels_provide_the_interface() -> None:
    """Both channels provide INotificationChannel."""
    verifyObject(INotificationChannel, CommandChannel(reactor, [sys.executable]))  # type: ignore[arg-type]
    verifyObject(
        INotificationChannel,
        SMTPChannel(reactor, Clock(), "127.0.0.1", 25, tls=False, mail_from="a@b.c", mail_to=["d@e.f"]),  # type: ignore[arg-type]
    )


def test_smtp_ca_file(tmp_path: Path) -> None:
    """[notify] smtp_ca_file: PEM certificates read at validation; clear errors otherwise."""
    from test_websocket import _certificate

    cert_path, _ = _certificate(tmp_path)
    values = {
        "smtp": "smtp://mail.example:587",
        "mail_from": "beacon@example.org",
        "mail_to": "reader@example.org",
        "smtp_ca_file": str(cert_path),
    }
    notify = build_config({"notify": values}).notify
    assert notify.smtp_ca == (cert_path.read_bytes().strip(),)
    assert smtp_trust_root(notify.smtp_ca) is not None
    assert smtp_trust_root(()) is None
    with pytest.raises(ConfigError, match=r"\[notify\] smtp_ca_file: cannot read"):
        build_config({"notify": dict(values, smtp_ca_file=str(tmp_path / "missing"))})
    (tmp_path / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ConfigError, match=r"\[notify\] smtp_ca_file: .* must hold PEM certificates"):
        build_config({"notify": dict(values, smtp_ca_file=str(tmp_path / "key.pem"))})
    (tmp_path / "bad.pem").write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    with pytest.raises(ConfigError, match=r"\[notify\] smtp_ca_file: .*not a PEM certificate"):
        check_config(build_config({"notify": dict(values, smtp_ca_file=str(tmp_path / "bad.pem"))}))
    with pytest.raises(ConfigError, match=r"smtp_ca_file needs smtp"):
        build_config({"notify": {"command": [sys.executable], "smtp_ca_file": str(cert_path)}})


@pytest_twisted.ensureDeferred
async def test_a_mail_server_trusted_through_smtp_ca_file(
    store: MemoryStore, clock: Clock, certificate: Any, listening: list[Any], tmp_path: Path
) -> None:
    """The trust root smtp_ca_file gives lets STARTTLS to a self-signed server succeed."""
    server_tls, trusted = certificate
    inbox = Inbox()
    port = reactor.listenTCP(0, MailServer(inbox, tls=server_tls), interface="127.0.0.1")
    listening.append(port)
    root = smtp_trust_root([trusted.dumpPEM()])
    notifier, channel = mail_notifier(store, clock, port.getHost().port, root)
    submit(store, clock)
    clock.advance(0)
    assert (await channel.next()) == "ok"
    assert sorted(r for r, _ in inbox.messages) == ["reader@inbox.example", "second@inbox.example"]
    await within(notifier.stopService())
