"""
The C{beacon} console script: L{main}, and the parsed-command runners it
uses (L{run}, L{run_peer}, L{database}) for running a command in-process.

Its rooms: C{_main} the entry point (the parser, L{main}); C{_review} the
review commands; C{_peer} the commands against other agents; C{_db} the
schema commands; C{_text} what is printed, made inert; C{_options} the
option value types the commands share.

Talk to any A2A 1.0 agent (Beacon, the a2a-sdk's, any other)::

    beacon card URL [--json]
    beacon send URL TEXT [--data FILE.json] [--binding jsonrpc|websocket|unix]
                         [--socket PATH] [--json]
    beacon task URL ID [--json]

C{URL} is the agent's base URL (its card is C{URL/.well-known/agent-card.json}),
the card's own URL, or C{unix:///path} (the card on that socket, which is
then dialled). Each takes C{--timeout S}, which bounds the whole command
(default 30), and C{--connect-timeout S}. Exit codes: 0 success, 1 the agent
could not be reached, refused or answered nonsense, 2 usage, 3 timeout.

Read and decide on submissions through Beacon's operator door::

    beacon review list [--status S] [--limit N] [--json]
    beacon review show ID [--json]
    beacon review accept ID [--note TEXT]
    beacon review reject ID [--note TEXT]
    beacon review follow [--json]
    beacon review web [--listen ENDPOINT] [--no-browser]

C{--socket PATH}, C{--data DIR} or C{--discovery FILE} (the bearer door's
file) say where Beacon is, anywhere after C{beacon review}; without them,
the socket C{$BEACON_SOCKET} names, else C{./beacon-data/operator.sock},
the socket C{twistd beacon} makes when started in the current directory.

Exit codes: 0 success, 1 error (Beacon not reachable, an unknown id, a
refused decision), 2 usage. An error is one line on stderr, never a
traceback.

Everything printed that came from the server is made inert first: control
characters (ESC and the rest of C0 and C1), Unicode format characters (bidi
overrides, zero-width characters), line and paragraph separators and lone
surrogates are written as visible escapes, so a submission cannot drive the
terminal. Only the message body in C{show} keeps its newlines.
"""

from __future__ import annotations

import sys
from collections.abc import Coroutine, Sequence
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from beacon.interfaces import IBeaconReactor

# Importing this package imports nothing heavy (no Twisted, no client, no
# store): `beacon --version` answers at once, and each command imports what
# it needs when it runs.


def main(argv: Sequence[str] | None = None) -> int:
    """
    The C{beacon} console script.

    @return: The exit code: 0 success, 1 error, 2 usage, 3 timeout (the
        agent commands).
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--version"]:
        from beacon import __version__

        sys.stdout.write(f"beacon {__version__}\n")
        return 0
    from beacon.cli._main import main as run_main

    return run_main(args)


def build_parser() -> argparse.ArgumentParser:
    """The C{beacon} argument parser."""
    from beacon.cli._main import build_parser as build

    return build()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """
    Parse and check the command line.

    @raise SystemExit: A usage error (code 2), or C{--help} (code 0).
    """
    from beacon.cli._main import parse_args as parse

    return parse(argv)


def database(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Run a parsed C{beacon db} command; return its exit code."""
    from beacon.cli._db import database as run_database

    return run_database(args, out, err)


def run(
    reactor: IBeaconReactor, args: argparse.Namespace, out: IO[str], err: IO[str],
    *more: Any, **options: Any,
) -> Coroutine[Any, Any, int]:
    """
    Run a parsed C{beacon review} command (a coroutine of its exit code;
    see L{beacon.cli._review.run} for C{more} and C{options}).
    """
    from beacon.cli._review import run as run_review

    return run_review(reactor, args, out, err, *more, **options)


def run_peer(
    reactor: IBeaconReactor, args: argparse.Namespace, out: IO[str], err: IO[str],
    *more: Any, **options: Any,
) -> Coroutine[Any, Any, int]:
    """Run a parsed C{beacon card|send|task} command (a coroutine of its exit code)."""
    from beacon.cli._peer import run_peer as run_peer_command

    return run_peer_command(reactor, args, out, err, *more, **options)


__all__ = [
    "build_parser",
    "database",
    "main",
    "parse_args",
    "run",
    "run_peer",
]
