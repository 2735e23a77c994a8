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

C{twistd beacon} uses it for the log file twistd chooses (see
L{twistd_observer}); C{--logger} and C{--syslog} still take precedence.
"""

from __future__ import annotations

import math
from typing import Any, TextIO

from twisted.logger import (
    FileLogObserver,
    ILogObserver,
    LogEvent,
    formatEventAsClassicLogText,
    formatTime,
)


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


#: twistd's own options, recorded by L{use_fast_text_log} for
#: L{twistd_observer} (twistd names its C{--logger} factory by a dotted name
#: and calls it without arguments).
_twistd_options: Any = None


def twistd_observer() -> ILogObserver:
    """
    The C{--logger} factory for C{twistd}: the observer twistd itself would
    make from its options (C{--logfile}, C{-n}, log rotation on SIGUSR1),
    with its formatter replaced by L{format_classic_text} when it writes
    Twisted's classic text to a file. Without recorded options (named with
    C{--logger} by hand), it logs to standard output.
    """
    from twisted.scripts._twistd_unix import UnixAppLogger

    options = _twistd_options if _twistd_options is not None else {"nodaemon": True}
    observer: ILogObserver = UnixAppLogger(options)._getLogObserver()
    if isinstance(observer, FileLogObserver):
        observer.formatEvent = format_classic_text  # type: ignore[method-assign]
    return observer


def use_fast_text_log(options: Any) -> None:
    """
    Make twistd log through L{twistd_observer}, unless its options already
    name a C{--logger} or C{--syslog}.

    @param options: twistd's own options (the parent of Beacon's); nothing
        happens for anything else (Beacon's options parsed on their own).
    """
    global _twistd_options
    if options is None or not hasattr(options, "get"):
        return
    if options.get("logger") or options.get("syslog"):
        return
    try:
        from twisted.scripts._twistd_unix import UnixAppLogger
    except ImportError:  # pragma: no cover - not a POSIX twistd
        return
    if not hasattr(UnixAppLogger, "_getLogObserver"):  # pragma: no cover
        return
    _twistd_options = options
    options["logger"] = f"{__name__}.twistd_observer"


__all__ = [
    "format_classic_text",
    "text_file_observer",
    "twistd_observer",
    "use_fast_text_log",
]
