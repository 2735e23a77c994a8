"""
How every instance hears of every committed write: PostgreSQL's C{LISTEN}
and C{NOTIFY} on L{CHANNEL}, and the store's listening thread.

Every write transaction sends, in its batch's order, one C{NOTIFY
beacon_events} per stored submission or decision (L{notification_payload});
PostgreSQL delivers them at commit, to every instance, in commit order.
The payload carries ids only: C{"<kind> <seq> <task id>"}. The listening
thread (L{ListeningThread}), with a connection of its own that listens on
L{CHANNEL}, hands them to the reactor thread (C{callFromThread}), which
tells the store's listeners. An instance's own writes come back the same
way: there is one path for every event, so local listeners hear their
instance's writes exactly once and in the same order as every other
instance's. The thread remembers the highest C{seq} it delivered; an event
at or below it is a duplicate and dropped. After the listening connection
is lost and made again it reads every submission and decision with a
higher C{seq} (a catch-up read) before it takes notifications again, so
nothing committed in between is missed.

C{NOTIFY} reaches every session of the database, whatever its
C{search_path}: give each Beacon deployment a database of its own.
"""

from __future__ import annotations

import os
import selectors
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger

from beacon.store._interface import StoreError, StoreEvent
from beacon.store._postgres_connect import describe, session

#: The channel every instance listens on and notifies.
CHANNEL = "beacon_events"

#: The listening thread's waits between attempts to connect again, in
#: seconds: the first, and the longest (each wait doubles).
LISTEN_RETRY_FIRST = 0.1
LISTEN_RETRY_MAX = 2.0

#: The longest the listening thread sleeps without looking at its
#: connection, in seconds (data libpq or TLS buffered is then read anyway).
LISTEN_POLL_INTERVAL = 5.0

#: How many rows one catch-up read fetches at a time.
CATCH_UP_CHUNK = 1000

# The newest committed write; the listening thread starts after it.
_SELECT_LAST_SEQ = """
    SELECT GREATEST(
        (SELECT COALESCE(MAX(seq), 0) FROM submissions),
        (SELECT COALESCE(MAX(seq), 0) FROM events)
    )
"""

# What was committed after a given seq, in commit order (see
# L{beacon.store._postgres_schema.WRITE_LOCK}).
_SELECT_COMMITTED_AFTER = """
    SELECT kind, seq, task_id FROM (
        SELECT 'submitted' AS kind, seq, id AS task_id
        FROM submissions WHERE seq > %(after)s
        UNION ALL
        SELECT 'decided' AS kind, seq, submission_id AS task_id
        FROM events WHERE seq > %(after)s
    ) AS committed
    ORDER BY seq
    LIMIT %(limit)s
"""

_EVENT_KINDS = frozenset({"submitted", "decided"})


def notification_payload(kind: str, seq: int, task_id: str) -> str:
    """
    The payload that tells every instance of a committed write: its kind
    (C{"submitted"} or C{"decided"}), its seq and its task's id (what
    L{ListeningThread} reads back).
    """
    return f"{kind} {seq} {task_id}"


def _listen(connection: psycopg.Connection[Any]) -> None:
    """
    A listening connection's session settings: read-only, listening on
    L{CHANNEL}.
    """
    connection.execute("SET default_transaction_read_only = on")
    connection.execute(f"LISTEN {CHANNEL}")


class ListeningThread:
    """
    A store's listening thread: it delivers, on the reactor thread and in
    commit order, every submission and decision committed to the database
    by any instance, exactly once.

    @ivar caught_up: The number of events delivered from catch-up reads
        rather than from notifications.
    @ivar backend_pid: The server process of the listening connection (for
        C{pg_stat_activity}), or L{None} while it has none.
    """

    def __init__(
        self,
        reactor: IReactorFromThreads,
        conninfo: str,
        url: str,
        deliver: Callable[[list[StoreEvent]], None],
        log: Logger,
    ) -> None:
        """
        @param reactor: Where events are delivered (C{callFromThread}).
        @param conninfo: The libpq connection string to listen with.
        @param url: The database, without its password (safe to log).
        @param deliver: Called on the reactor thread with each run of
            events, in order.
        @param log: Where the thread logs (the store's log).
        """
        self._reactor = reactor
        self._conninfo = conninfo
        self._url = url
        self._deliver = deliver
        self._log = log
        self.caught_up = 0
        self.backend_pid: int | None = None
        # _seen (the highest seq delivered) is only touched by the thread
        # once it runs.
        self._thread: threading.Thread | None = None
        self._connection: psycopg.Connection[Any] | None = None
        self._stop = threading.Event()
        self._wake: tuple[int, int] | None = None
        self._stopped: Deferred[None] | None = None
        self._seen = 0

    def connect(self) -> None:
        """
        At start-up, on the calling thread: open the listening connection,
        then read where delivery starts (listening first, so that nothing
        committed in between falls through).

        @raises StoreError: If the database cannot be reached or read.
        """
        try:
            listening = self._open()
        except psycopg.Error as e:
            raise StoreError(
                f"cannot connect to the database {self._url}: {describe(e)}"
            ) from None
        try:
            self._seen = self._last_seq(listening)
        except psycopg.Error as e:
            listening.close()
            raise StoreError(
                f"cannot read the database {self._url}: {describe(e)}"
            ) from e
        self._connection = listening
        self.backend_pid = listening.info.backend_pid

    def start(self) -> None:
        """
        Start the thread, on the connection L{connect} opened.
        """
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        self._wake = (read_end, write_end)
        self._stop.clear()
        self._stopped = Deferred()
        self._thread = threading.Thread(
            target=self._run, name="beacon-store-listen", daemon=True
        )
        self._thread.start()

    def stop(self) -> Deferred[None]:
        """
        Ask the thread to deliver what is left and end.

        @return: A L{Deferred} that fires once it has.
        """
        stopped = self._stopped
        if stopped is None:
            return succeed(None)
        self._stop.set()
        if self._wake is not None:
            try:
                os.write(self._wake[1], b"\0")
            except OSError:
                pass  # A wake-up is waiting already, or the thread ended.
        return stopped

    def close(self) -> None:
        """
        Once the thread has ended: forget it and its wake-up pipe.
        """
        if self._wake is not None:
            os.close(self._wake[1])
            self._wake = None
        self._thread = None
        self._stopped = None

    # Everything below runs on the listening thread (or, for the first
    # connection, once at start-up).

    def _open(self) -> psycopg.Connection[Any]:
        """
        Open a listening connection.

        @raises psycopg.Error: If it cannot be opened.
        """
        return session(self._conninfo, _listen)

    @staticmethod
    def _last_seq(connection: psycopg.Connection[Any]) -> int:
        """
        The seq of the newest committed submission or decision (0: none).
        """
        row = connection.execute(_SELECT_LAST_SEQ).fetchone()
        return int(row[0]) if row else 0

    def _run(self) -> None:
        """
        The listening thread: deliver notifications as they come; after a
        lost connection, connect again (waiting longer each time, up to
        L{LISTEN_RETRY_MAX}) and catch up; when asked to stop, catch up one
        last time and end.
        """
        connection = self._connection
        self._connection = None
        delay = LISTEN_RETRY_FIRST
        failing = False
        try:
            while True:
                if connection is None:
                    if self._stop.is_set():
                        return
                    try:
                        connection = self._open()
                        self.backend_pid = connection.info.backend_pid
                        caught = self._catch_up(connection)
                    except psycopg.Error as e:
                        if connection is not None:
                            connection.close()
                            connection = None
                        if not failing:
                            failing = True
                            self._log.warn(
                                "store.listen_failed: cannot listen on {url}"
                                " again yet ({reason}); retrying",
                                url=self._url,
                                reason=describe(e),
                            )
                        self._stop.wait(delay)
                        delay = min(delay * 2, LISTEN_RETRY_MAX)
                        continue
                    failing = False
                    delay = LISTEN_RETRY_FIRST
                    self._log.info(
                        "store.listen_reconnected: listening on {url} again;"
                        " {count} events committed meanwhile were caught up",
                        url=self._url,
                        count=caught,
                    )
                try:
                    self._take_notifications(connection)
                    if self._stop.is_set():
                        self._catch_up(connection)
                        return
                    self._wait(connection)
                except psycopg.Error as e:
                    try:
                        connection.close()
                    except psycopg.Error:
                        pass
                    connection = None
                    self.backend_pid = None
                    if not self._stop.is_set():
                        self._log.warn(
                            "store.listen_lost: the listening connection to"
                            " {url} broke ({reason}); connecting again",
                            url=self._url,
                            reason=describe(e),
                        )
        except BaseException:
            # Nothing else may end this thread quietly: say so, then end.
            self._log.failure("store.listen_crashed: the listening thread failed")
        finally:
            if connection is not None:
                try:
                    connection.close()
                except psycopg.Error:
                    pass
            if self._wake is not None:
                os.close(self._wake[0])
            stopped = self._stopped
            if stopped is not None:
                self._reactor.callFromThread(stopped.callback, None)

    def _wait(self, connection: psycopg.Connection[Any]) -> None:
        """
        Block until the listening connection has something to read or the
        store asks this thread to stop.
        """
        assert self._wake is not None
        with selectors.DefaultSelector() as selector:
            selector.register(connection.fileno(), selectors.EVENT_READ)
            selector.register(self._wake[0], selectors.EVENT_READ)
            selector.select(LISTEN_POLL_INTERVAL)
        try:
            os.read(self._wake[0], 64)
        except BlockingIOError:
            pass

    def _take_notifications(self, connection: psycopg.Connection[Any]) -> None:
        """
        Deliver the notifications that have arrived, dropping those at or
        below the last delivered seq (already caught up).
        """
        events: list[StoreEvent] = []
        for notification in connection.notifies(timeout=0):
            if notification.channel != CHANNEL:
                continue
            parsed = self._parse(notification.payload)
            if parsed is None:
                continue
            kind, seq, task_id = parsed
            if seq <= self._seen:
                continue
            self._seen = seq
            events.append(StoreEvent(kind, task_id))
        if events:
            self._reactor.callFromThread(self._deliver, events)

    def _parse(self, payload: str) -> tuple[str, int, str] | None:
        """
        C{"<kind> <seq> <task id>"}, or L{None} (logged, without the
        payload) for anything else on the channel.
        """
        kind, _, rest = payload.partition(" ")
        seq_text, _, task_id = rest.partition(" ")
        if kind in _EVENT_KINDS and seq_text.isdigit() and task_id:
            return kind, int(seq_text), task_id
        self._log.warn(
            "store.notification_ignored: a notification on {channel} that"
            " Beacon did not send",
            channel=CHANNEL,
        )
        return None

    def _catch_up(self, connection: psycopg.Connection[Any]) -> int:
        """
        Deliver every submission and decision committed after the last
        delivered seq, in commit order.

        @return: How many events that was.
        """
        count = 0
        while True:
            rows = connection.execute(
                _SELECT_COMMITTED_AFTER,
                {"after": self._seen, "limit": CATCH_UP_CHUNK},
            ).fetchall()
            if not rows:
                break
            events = [StoreEvent(kind, task_id) for kind, _, task_id in rows]
            self._seen = int(rows[-1][1])
            count += len(events)
            self._reactor.callFromThread(self._deliver, events)
            if len(rows) < CATCH_UP_CHUNK:
                break
        self.caught_up += count
        return count
