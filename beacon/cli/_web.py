"""
C{beacon review web}: the web console (L{beacon.console}) on loopback, in
this process, relaying to Beacon through the operator door the other review
commands use.

It prints one line, C{beacon review web: open http://127.0.0.1:PORT/?token=T}
(a one-time sign-in link), opens it in a browser unless C{--no-browser},
and serves until Ctrl-C or SIGTERM; then it stops listening, ends the event
streams and prints C{beacon review web: stopped}. The console's log events
(C{console.*}: sign-ins, refusals, CSP reports) go to stderr, a line each. It listens only on a
loopback interface: C{--listen} naming another is refused.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import threading
import webbrowser
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.error import CannotListenError
from twisted.logger import ILogObserver, LogEvent, formatEvent, globalLogPublisher
from zope.interface import implementer

from beacon.cli._text import Output, inert
from beacon.client import OperatorClient
from beacon.console import Console, ConsoleSite
from beacon.interfaces import IBeaconReactor

#: Where the console listens unless C{--listen} says: a port the kernel
#: picks on 127.0.0.1.
DEFAULT_LISTEN = "tcp:0:interface=127.0.0.1"

_SEPARATOR = re.compile(r"(?<!\\):")


class WebError(Exception):
    """The console cannot start (exit 1); one line, without C{beacon:}."""


def loopback_interface(description: str) -> str:
    """
    The interface a C{--listen} endpoint names, checked to be a loopback
    address.

    @raise WebError: Not a C{tcp:} or C{tcp6:} endpoint, or not on a
        loopback interface (none given is every interface).
    """
    fields = [re.sub(r"\\(.)", r"\1", f) for f in _SEPARATOR.split(description)]
    kind = fields[0].lower()
    if kind not in ("tcp", "tcp6"):
        raise WebError(
            f"--listen {inert(description)}: the console listens on a tcp: or tcp6:"
            " endpoint of a loopback interface (tcp:0:interface=127.0.0.1)"
        )
    interface = "" if kind == "tcp" else "::"
    for field in fields[1:]:
        name, equals, value = field.partition("=")
        if equals and name == "interface":
            interface = value
    try:
        loopback = ipaddress.ip_address(interface.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        shown = interface or "every interface"
        raise WebError(
            f"--listen {inert(description)}: refusing to listen on {inert(shown)},"
            " which is not a loopback address (use interface=127.0.0.1 or interface=\\:\\:1)"
        )
    return interface


def _open_in_browser(url: str, opener: Callable[[str], Any]) -> None:
    # A thread of its own, not the reactor's pool: a text browser may hold
    # it until it quits, and the reactor does not wait for it to stop.
    def run() -> None:
        try:
            opener(url)
        except Exception:
            pass

    threading.Thread(target=run, name="beacon-browser", daemon=True).start()


@implementer(ILogObserver)
class _ConsoleLog:
    """
    Writes the console's log events (C{console.*}: sign-ins, refusals, CSP
    reports) to stderr, one line each, made inert.
    """

    def __init__(self, io: Output) -> None:
        self.io = io

    def __call__(self, event: LogEvent) -> None:
        if not str(event.get("log_format") or "").startswith("console."):
            return
        self.io.err.write(f"beacon review web: {inert(formatEvent(event))}\n")
        self.io.err.flush()


async def serve(
    reactor: IBeaconReactor,
    client: OperatorClient,
    args: argparse.Namespace,
    io: Output,
    opener: Callable[[str], Any] = webbrowser.open,
) -> int:
    """
    Run the console until the reactor stops.

    @param opener: Opens the sign-in link in a browser (C{webbrowser.open}).
    @return: The exit code: 0 stopped, 1 could not start.
    """
    # Once the reactor runs, its signal handlers are in place: Ctrl-C
    # after the link is printed stops the reactor (before, it would raise
    # KeyboardInterrupt wherever the command was).
    running: Deferred[None] = Deferred()
    reactor.callWhenRunning(running.callback, None)
    await running
    description = args.listen
    try:
        loopback_interface(description)
        try:
            endpoint = serverFromString(reactor, description)
        except (ValueError, TypeError, KeyError) as e:
            raise WebError(f"--listen {inert(description)}: {inert(str(e))}") from None
        console = Console(client, reactor)
        try:
            port = await endpoint.listen(ConsoleSite(console.resource))
        except CannotListenError as e:
            reason = getattr(e.socketError, "strerror", None) or str(e.socketError)
            raise WebError(f"cannot listen on {inert(description)}: {inert(reason).lower()}") from None
    except WebError as e:
        io.err.write(f"beacon: {e}\n")
        return 1
    observer = _ConsoleLog(io)
    globalLogPublisher.addObserver(observer)
    console.listening(port.getHost())
    url = console.sign_in_url()
    io.line(f"beacon review web: open {url}")
    io.flush()
    if not args.no_browser:
        _open_in_browser(url, opener)
    stopped: Deferred[int] = Deferred()

    async def stop() -> None:
        console.close()
        await port.stopListening()
        globalLogPublisher.removeObserver(observer)
        io.line("beacon review web: stopped")
        io.flush()
        stopped.callback(0)

    reactor.addSystemEventTrigger("before", "shutdown", lambda: Deferred.fromCoroutine(stop()))
    return await stopped


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add C{review web}'s own options."""
    parser.add_argument(
        "--listen",
        metavar="ENDPOINT",
        default=DEFAULT_LISTEN,
        help=f"where to listen, on loopback only [default: {DEFAULT_LISTEN}]",
    )
    parser.add_argument(
        "--no-browser",
        action="store_true",
        help="print the sign-in link without opening a browser",
    )
