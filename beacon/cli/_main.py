"""
The C{beacon} console script's entry point: the argument parser (each
command's module adds its own), the checks argparse cannot make, and
L{main}, which runs one command and turns its outcome into an exit code.

This is an edge: it may import the global reactor (inside L{main}).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from twisted.internet.defer import Deferred

from beacon.interfaces import IBeaconReactor
from beacon import __version__
from beacon.cli import _db, _keygen, _peer, _review
from beacon.cli._options import Parser


def build_parser() -> argparse.ArgumentParser:
    """The C{beacon} argument parser."""
    parser = Parser(
        prog="beacon",
        description="Beacon: an A2A 1.0 front door for a human-read inbox.",
        epilog="These commands talk to a running Beacon, or to other agents. Start\n"
        "Beacon itself with: twistd -n beacon (its options: twistd beacon --help),\n"
        "or make run in a source checkout. The manual is docs/ in Beacon's source\n"
        "(make docs builds it).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"beacon {__version__}")
    commands = parser.add_subparsers(dest="area", metavar="COMMAND", required=True)
    _review.add_parser(commands)
    _peer.add_parsers(commands)
    _db.add_parser(commands)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """
    Parse and check the command line.

    @raise SystemExit: A usage error (code 2), or C{--help} (code 0).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["card", "keygen"]:
        # A command of its own: beacon card's URL is never "keygen".
        args = _keygen.keygen_parser().parse_args(argv[2:])
        args.area = args.command = "card keygen"
        return args
    parser = build_parser()
    args = parser.parse_args(argv)
    _review.check_args(parser, args)
    if args.area in _peer.COMMANDS:
        _peer.check_args(parser, args)
    return args


def _exit_code(exit: SystemExit) -> int:
    code = exit.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _quiet_broken_pipe() -> None:
    # The reader went away (`beacon review list | head`): stop writing, and
    # let the interpreter's final flush go nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """
    The C{beacon} console script.

    @return: The exit code: 0 success, 1 error, 2 usage, 3 timeout (the
        agent commands), 4 the card's signature not verified (C{--verify}).
    """
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return _exit_code(e)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    if args.area == "db":
        return _db.database(args, sys.stdout, sys.stderr)
    if args.area == "card keygen":
        return _keygen.keygen(args, sys.stdout, sys.stderr)

    from twisted.internet import reactor
    from twisted.internet.task import react

    def start(reactor: IBeaconReactor) -> Deferred[None]:
        async def command() -> None:
            try:
                if args.area in _peer.COMMANDS:
                    code = await _peer.run_peer(reactor, args, sys.stdout, sys.stderr)
                else:
                    code = await _review.run(reactor, args, sys.stdout, sys.stderr)
            except BrokenPipeError:
                _quiet_broken_pipe()
                code = 0
            if code:
                raise SystemExit(code)

        return Deferred.fromCoroutine(command())

    try:
        react(start, (), reactor)
    except SystemExit as e:
        return _exit_code(e)
    except KeyboardInterrupt:
        return 0 if args.command in ("follow", "web") else 130
    return 0
