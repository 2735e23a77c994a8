"""
Twisted's classic text log format, written faster.

C{twistd} writes every event as C{"<time> [<namespace>#<level>] <message>"}
through L{twisted.logger.formatEventAsClassicLogText}, which formats the
time zone and the timestamp from scratch and the message through the
pure-Python L{string.Formatter} for each event. On Beacon's request path
that was a sixth of the CPU spent on a stored submission.

L{format_classic_text} produces exactly the same text: the timestamp is
formatted once per second (by Twisted's own L{formatTime}), and an ordinary
message (a C{str} format without Twisted's C{{name()}} call syntax) is
formatted by L{str.format_map}. Anything else (a failure's traceback, a
flattened event, the call syntax, a format that fails) goes to Twisted's
own formatter, so unusual events read exactly as Twisted writes them.

C{twistd beacon} uses it for the log twistd's options choose: its service
gives twistd's application an L{ILogObserver} component
(L{offer_log_observer}, L{twistd_log_observer}), which twistd logs through,
as it does for a C{.tac} file's; C{--logger} and C{--syslog} still take
precedence.

For log shippers, C{twistd --logger beacon.logs.json} writes one JSON
object per line to standard output instead (L{json}, L{format_json}): the
event's time (RFC 3339, UTC), level, namespace, stable name, formatted
message, and its own fields.
"""

from __future__ import annotations

import json as jsonlib
import math
import re
import signal
import sys
import threading
from collections import deque
from threading import get_ident
from datetime import datetime, timezone
from time import time
from typing import Any, Callable, Mapping, Protocol, TextIO, cast

from twisted.logger import (
    FileLogObserver,
    ILogObserver,
    LogEvent,
    LogLevel,
    Logger,
    formatEvent,
    formatEventAsClassicLogText,
    formatTime,
)
from twisted.python.components import Componentized
from twisted.python.logfile import LogFile
from twisted.python import threadable
from zope.interface import implementer


#: The last second formatted, and its text (one tuple, read and replaced
#: whole, so that a thread logging at the same time sees a consistent pair).
_second: tuple[float, str] = (math.nan, "")

#: How long L{TurnFlushedObserver} keeps the first line of a batch before
#: it writes and flushes the batch: a crash loses at most this much of the
#: log, and a busy reactor writes at most a thousand times a second.
FLUSH_DELAY = 0.001


def _timestamp(when: float) -> str:
    """
    Twisted's L{formatTime} of C{when}, formatted once per second: the text
    depends on the second only (the format has no fraction, and a time zone
    offset changes on a whole second). The second is the one C{datetime}
    gives C{when}: it rounds the fraction to microseconds, half to even, so
    C{1.9999996} is in second 2.
    """
    global _second
    cached = _second
    # Well inside the second last formatted: no rounding can move it.
    if cached[0] + 1e-6 <= when < cached[0] + 0.999999:
        return cached[1]
    second = math.floor(when)
    if round((when - second) * 1e6) >= 1_000_000:
        second += 1
    if cached[0] == second:
        return cached[1]
    text = formatTime(second)
    _second = (second, text)
    return text


#: The C{namespace#level} of events without C{log_system}, by namespace
#: and level, made once for each (at most L{MAX_SYSTEMS}).
_systems: dict[tuple[Any, Any], str] = {}
MAX_SYSTEMS = 256


def _system(namespace: Any, level: Any) -> str:
    """The C{[namespace#level]} of an event without C{log_system}."""
    system = f"{namespace}#{'-' if level is None else level.name}"
    if len(_systems) < MAX_SYSTEMS:
        _systems[namespace, level] = system
    return system


def format_classic_text(event: LogEvent) -> str | None:
    """
    Format C{event} exactly as L{formatEventAsClassicLogText} does with its
    default time format.

    @return: The line (newline-terminated; continuation lines indented by a
        tab), or None when the event has no text.
    """
    log_format = event.get("log_format")
    when = event.get("log_time")
    if (
        type(log_format) is not str
        or "()" in log_format
        or "log_failure" in event
        or "log_flattened" in event
        or type(when) is not float
        # Not finite, or negative (a NaN fails both comparisons).
        or not 0.0 <= when < math.inf
    ):
        return formatEventAsClassicLogText(event)
    try:
        text = log_format.format_map(event)
        if not text:
            return None
        system = event.get("log_system")
        if system is None:
            namespace, level = event.get("log_namespace", "-"), event.get("log_level")
            system = _systems.get((namespace, level)) or _system(namespace, level)
        else:
            system = str(system)
        cached = _second
        if cached[0] + 1e-6 <= when < cached[0] + 0.999999:
            stamp = cached[1]  # _timestamp's first answer, without the call
        else:
            stamp = _timestamp(when)
        line = f"{stamp} [{system}] {text}\n"
        if "\n" in text or "\n" in system:
            line = line[:-1].replace("\n", "\n\t") + "\n"
    except Exception:
        # Whatever failed, Twisted's formatter says it its own way.
        return formatEventAsClassicLogText(event)
    return line


_INFO = LogLevel.info


class InfoLogger(Logger):
    """
    A L{Logger} whose C{info} hands its observer the event L{Logger.emit}
    makes (the same keys and values: the fields given, C{log_logger},
    C{log_level}, C{log_namespace}, C{log_source}, C{log_format},
    C{log_time}; C{log_trace} followed), built in the one dict of its
    keyword arguments. C{emit} checks its level against every L{LogLevel}
    (a sort of the levels, every event) and copies the arguments again;
    C{info}'s level is always one. For the lines logged on every request
    (C{intake.stored}).
    """

    def info(self, format: str | None = None, **kwargs: object) -> None:
        kwargs["log_logger"] = self
        kwargs["log_level"] = _INFO
        kwargs["log_namespace"] = self.namespace
        kwargs["log_source"] = self.source
        kwargs["log_format"] = format
        kwargs["log_time"] = time()
        if "log_trace" in kwargs:
            cast(list[tuple[Logger, ILogObserver]], kwargs["log_trace"]).append((self, self.observer))
        self.observer(kwargs)


class TurnReactor(Protocol):
    """What L{TurnFlushedObserver} asks of the reactor (any of Twisted's)."""

    running: bool

    def callLater(self, delay: float, callable: Callable[..., Any], *args: Any) -> Any: ...

    def addSystemEventTrigger(
        self, phase: str, eventType: str, callable: Callable[..., Any], *args: Any
    ) -> Any: ...

    def callFromThread(self, callable: Callable[..., Any], *args: Any) -> None: ...


def text_file_observer(out_file: TextIO, reactor: TurnReactor | None = None) -> ILogObserver:
    """
    An observer writing L{format_classic_text} lines to C{out_file}.

    @param reactor: Without one, a L{FileLogObserver}: every line is flushed
        as it is written. With one, a L{TurnFlushedObserver}: the lines of
        one turn of the running reactor are flushed together.
    """
    if reactor is None:
        observer: ILogObserver = FileLogObserver(out_file, format_classic_text)
        return observer
    return TurnFlushedObserver(out_file, reactor)


@implementer(ILogObserver)
class TurnFlushedObserver:
    """
    Writes L{format_classic_text} lines to a file at most once a
    millisecond (L{FLUSH_DELAY}), not once per line.

    A stored submission logs a line (C{intake.stored}); written one by one,
    each costs Beacon a C{write} system call on the request path (whatever
    the file's own buffering: C{PYTHONUNBUFFERED} makes standard output
    write every line through). Here a line logged on the reactor's thread
    while it runs is kept, and one call L{FLUSH_DELAY} after the first of
    them (C{callLater}) writes and flushes every line kept by then at once:
    the lines of that turn and of the turns in that millisecond. A line
    logged anywhere else (another thread, or before the reactor runs or
    after it stopped) is written and flushed at once, after the lines kept
    before it, as L{FileLogObserver} would; whatever is kept is written
    after the reactor's shutdown.

    What a crash can cost: a process killed outright loses the lines of its
    last millisecond or so, never an older line.

    A signal handler may log while the reactor's thread is writing lines
    (twistd's SIGTERM handler does, from wherever the thread was): the
    reactor's thread keeps a line without taking the lock, a write takes
    out only the lines it finds, and the lock (for the other threads) is
    re-entrant, so the handler's line is written by this write or the
    next, not waited for (a plain lock hung the process) nor lost.
    """

    def __init__(self, out_file: TextIO, reactor: TurnReactor) -> None:
        self._out = out_file
        self._reactor = reactor
        # A deque: the reactor's thread appends without the lock (a
        # deque's append is atomic), and a write takes out only what it
        # finds, so nothing appended meanwhile is lost.
        self._kept: deque[str] = deque()
        self._lock = threading.RLock()
        self._trigger = False
        self._scheduled = False

    def __call__(self, event: LogEvent) -> None:
        text = format_classic_text(event)
        if not text:
            return
        reactor = self._reactor
        self._kept.append(text)
        # isInIOThread(), with the C function for the thread's id.
        if reactor.running and threadable.ioThread == get_ident():
            if self._scheduled:
                return
            self._scheduled = True
            if not self._trigger:
                self._trigger = True
                reactor.addSystemEventTrigger("after", "shutdown", self.flush)
            reactor.callLater(FLUSH_DELAY, self.flush)
        else:
            with self._lock:
                self._write()

    def flush(self) -> None:
        """Write and flush every line kept so far."""
        # Cleared first: a line logged from here on (by a signal handler,
        # during the write) asks for a flush of its own, if this one does
        # not take it.
        self._scheduled = False
        with self._lock:
            self._write()

    def _write(self) -> None:
        kept = self._kept
        lines = []
        while kept:
            lines.append(kept.popleft())
        if lines:
            self._out.write("".join(lines))
        self._out.flush()


def twistd_log_observer(
    options: Mapping[str, Any], reactor: TurnReactor
) -> ILogObserver | None:
    """
    An observer for the log twistd's own options ask for, writing
    L{format_classic_text}: the file named by C{--logfile}; standard output
    with C{--logfile -} or with C{-n} and no C{--logfile}; otherwise
    C{twistd.log}. A file is rotated on C{SIGUSR1} (through C{reactor}),
    as twistd rotates its own, unless that signal already has a handler.
    Lines are flushed once per turn of C{reactor} (L{TurnFlushedObserver}).

    @param options: twistd's options (C{ServerOptions}, the parent of
        Beacon's).

    @return: None where twistd's own choice must stand: C{--logger} or
        C{--syslog} is given, or C{--logfile -} without C{-n} (which twistd
        refuses).
    """
    if options.get("logger") or options.get("syslog"):
        return None
    path = options.get("logfile") or ""
    foreground = bool(options.get("nodaemon"))
    if path == "-" or (foreground and not path):
        return text_file_observer(sys.stdout, reactor) if foreground else None
    log_file = LogFile.fromFullPath(path or "twistd.log")
    if not signal.getsignal(signal.SIGUSR1):

        def rotate(signum: int, frame: Any) -> None:
            reactor.callFromThread(log_file.rotate)

        signal.signal(signal.SIGUSR1, rotate)
    return text_file_observer(log_file, reactor)


def offer_log_observer(
    application: object, observer: Callable[[], ILogObserver | None]
) -> None:
    """
    Give twistd's application the observer C{observer()} makes, as its
    L{ILogObserver} component: twistd logs through that component unless
    C{--logger} names a factory (see L{twisted.application.app.AppLogger}).

    Nothing happens when C{application} is not a L{Componentized} (not
    twistd's application), already has an observer, or C{observer()}
    returns None.
    """
    if not isinstance(application, Componentized):
        return
    if application.getComponent(ILogObserver) is not None:
        return
    made = observer()
    if made is not None:
        application.setComponent(ILogObserver, made)


#: A stable event name: lower-case dotted words (C{http.too_large}).
_EVENT_NAME = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)+\Z")
#: The keys of an event logged through twisted.python.log that the JSON
#: line already says otherwise (as time, message, failure).
_LEGACY_KEYS = frozenset({"message", "isError", "system", "time", "format", "failure", "why"})
#: How deep a field's value is written as JSON; deeper, its repr.
_JSON_DEPTH = 4


def event_name(event: LogEvent) -> str | None:
    """
    The stable name of C{event}: the text of its format before the first
    C{:} (or the whole format, when it has none), as Beacon's events are
    written (C{"http.too_large: refused ..."}), its fields filled in
    (C{"{what}.listening: ..."} is C{http.listening}); None when that is not
    lower-case dotted words (Twisted's own events, for one).
    """
    log_format = event.get("log_format")
    if type(log_format) is not str:
        return None
    head = log_format.partition(":")[0]
    if "{" in head:
        try:
            head = head.format_map(event)
        except Exception:
            return None
    return head if _EVENT_NAME.match(head) else None


def _json_safe(value: Any, depth: int = 0) -> Any:
    """C{value} as JSON can hold it: its repr where it cannot."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth < _JSON_DEPTH:
        if isinstance(value, (list, tuple)):
            return [_json_safe(v, depth + 1) for v in value]
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: _json_safe(v, depth + 1) for k, v in value.items()}
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _rfc3339(when: float) -> str:
    """C{when} as RFC 3339 UTC with microseconds (C{2026-12-01T18:59:29.123456Z})."""
    return datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_json(event: LogEvent) -> str | None:
    """
    C{event} as one line of JSON (newline-terminated), for log shippers::

        {"time": "2026-12-01T18:59:29.123456Z", "level": "warn",
         "namespace": "beacon.bindings.http._jsonrpc", "event": "http.too_large",
         "message": "http.too_large: refused a request body over 65536 bytes from 192.0.2.7",
         "fields": {"limit": 65536, "source": "192.0.2.7"}}

    C{event} is the stable name (see L{event_name}; null for events
    without one), C{fields} the event's own (never Twisted's C{log_*}),
    JSON values where they are JSON-safe and their repr otherwise. A
    failure adds C{error} (its type and message) and C{traceback}, each one
    string. Non-ASCII text is escaped, so every line is ASCII.

    @return: The line, or None for an event with neither text nor a
        failure.
    """
    log_format = event.get("log_format")
    failure = event.get("log_failure")
    legacy = "isError" in event and isinstance(event.get("message"), tuple)
    if failure is None and legacy:
        failure = event.get("failure")
    message: str
    if type(log_format) is str and "()" not in log_format:
        try:
            message = log_format.format_map(event)
        except Exception:
            message = formatEvent(event)
    else:
        message = formatEvent(event)
    if not message and failure is None:
        return None
    when = event.get("log_time")
    level = event.get("log_level")
    line: dict[str, Any] = {
        "time": _rfc3339(when) if type(when) is float and math.isfinite(when) else None,
        "level": getattr(level, "name", None),
        "namespace": event.get("log_namespace"),
        "event": event_name(event),
        "message": message,
        "fields": {
            key: _json_safe(value)
            for key, value in event.items()
            if not key.startswith("log_") and not (legacy and key in _LEGACY_KEYS)
        },
    }
    if failure is not None:
        try:
            line["error"] = f"{type(failure.value).__name__}: {failure.getErrorMessage()}"
            line["traceback"] = failure.getTraceback()
        except Exception:
            line["error"] = repr(failure)
    return jsonlib.dumps(line, separators=(",", ":")) + "\n"


def json_file_observer(out_file: TextIO) -> ILogObserver:
    """A L{FileLogObserver} writing L{format_json} lines to C{out_file}."""
    observer: ILogObserver = FileLogObserver(out_file, format_json)
    return observer


def json() -> ILogObserver:
    """
    C{twistd --logger beacon.logs.json}: one JSON object per event and line
    (L{format_json}) on standard output, for journald or a log shipper (run
    C{twistd -n}: a daemon's standard output goes nowhere).
    """
    return json_file_observer(sys.stdout)


__all__ = [
    "FLUSH_DELAY",
    "InfoLogger",
    "event_name",
    "format_classic_text",
    "format_json",
    "json",
    "json_file_observer",
    "offer_log_observer",
    "text_file_observer",
    "twistd_log_observer",
]
