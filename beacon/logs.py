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
"""

from __future__ import annotations

import math
import signal
import sys
from typing import Any, Callable, Mapping, TextIO

from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import (
    FileLogObserver,
    ILogObserver,
    LogEvent,
    formatEventAsClassicLogText,
    formatTime,
)
from twisted.python.components import Componentized
from twisted.python.logfile import LogFile


#: The last second formatted, and its text (one tuple, read and replaced
#: whole, so that a thread logging at the same time sees a consistent pair).
_second: tuple[float, str] = (math.nan, "")


def _timestamp(when: float) -> str:
    """
    Twisted's L{formatTime} of C{when}, formatted once per second: the text
    depends on the second only (the format has no fraction, and a time zone
    offset changes on a whole second). The second is the one C{datetime}
    gives C{when}: it rounds the fraction to microseconds, half to even, so
    C{1.9999996} is in second 2.
    """
    global _second
    second = math.floor(when)
    if round((when - second) * 1e6) >= 1_000_000:
        second += 1
    cached = _second
    if cached[0] == second:
        return cached[1]
    text = formatTime(second)
    _second = (second, text)
    return text


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
        or not math.isfinite(when)
        or when < 0
    ):
        return formatEventAsClassicLogText(event)
    try:
        text = log_format.format_map(event)
        if not text:
            return None
        system = event.get("log_system")
        if system is None:
            level = event.get("log_level")
            level_name = "-" if level is None else level.name
            system = f"{event.get('log_namespace', '-')}#{level_name}"
        else:
            system = str(system)
        line = f"{_timestamp(when)} [{system}] {text}"
    except Exception:
        # Whatever failed, Twisted's formatter says it its own way.
        return formatEventAsClassicLogText(event)
    return line.replace("\n", "\n\t") + "\n"


def text_file_observer(out_file: TextIO) -> ILogObserver:
    """
    A L{FileLogObserver} writing L{format_classic_text} lines to C{out_file}.
    """
    observer: ILogObserver = FileLogObserver(out_file, format_classic_text)
    return observer


def twistd_log_observer(
    options: Mapping[str, Any], reactor: IReactorFromThreads
) -> ILogObserver | None:
    """
    An observer for the log twistd's own options ask for, writing
    L{format_classic_text}: the file named by C{--logfile}; standard output
    with C{--logfile -} or with C{-n} and no C{--logfile}; otherwise
    C{twistd.log}. A file is rotated on C{SIGUSR1} (through C{reactor}),
    as twistd rotates its own, unless that signal already has a handler.

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
        return text_file_observer(sys.stdout) if foreground else None
    log_file = LogFile.fromFullPath(path or "twistd.log")
    if not signal.getsignal(signal.SIGUSR1):

        def rotate(signum: int, frame: Any) -> None:
            reactor.callFromThread(log_file.rotate)

        signal.signal(signal.SIGUSR1, rotate)
    return text_file_observer(log_file)


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


__all__ = [
    "format_classic_text",
    "offer_log_observer",
    "text_file_observer",
    "twistd_log_observer",
]
