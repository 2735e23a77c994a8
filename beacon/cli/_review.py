"""
The C{beacon review} commands: read and decide on submissions through
Beacon's operator door (C{list}, C{show}, C{accept}, C{reject},
C{follow}), their options and their one-line errors.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Callable
from typing import IO, Any

from beacon.interfaces import IBeaconReactor
from beacon.cli._options import count, duration
from beacon.cli._text import (
    STATE_WORDS,
    Output,
    dig,
    event_line,
    inert,
    json_text,
    list_table,
    show_lines,
    state_word,
    summary,
    violations,
)
from beacon.client import (
    DEFAULT_TIMEOUT,
    ClientError,
    Feed,
    HTTPStatusError,
    InvalidResponse,
    OperatorClient,
    RPCError,
    Timeout,
    TransportError,
)
from beacon.protocol import STATE_UNSPECIFIED, TASK_STATES

#: Where C{twistd beacon} puts its operator socket when started here.
DEFAULT_SOCKET = os.path.join("beacon-data", "operator.sock")
#: How many tasks C{review list} shows by default.
DEFAULT_LIMIT = 50
#: The largest page C{ListTasks} serves.
MAX_PAGE = 100

#: Every TaskState a C{--status} filter may name: all but proto3's zero
#: value, which filters nothing.
FILTER_STATES = frozenset(TASK_STATES) - {STATE_UNSPECIFIED}
_WORD_STATES = {word: state for state, word in STATE_WORDS.items()}


def parse_state(text: str) -> str:
    """
    A C{--status} value as a TaskState name: C{submitted}, C{accepted} (or
    C{completed}), C{rejected}, or any C{TASK_STATE_*} name.

    @raise argparse.ArgumentTypeError: It names no state.
    """
    word = text.strip()
    if word.lower() in _WORD_STATES:
        return _WORD_STATES[word.lower()]
    name = word.upper().replace("-", "_")
    for candidate in (name, "TASK_STATE_" + name):
        if candidate in FILTER_STATES:
            return candidate
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a task state (submitted, accepted, rejected or TASK_STATE_*)"
    )


def describe(error: ClientError, args: argparse.Namespace) -> str:
    """One line saying what went wrong, for stderr (without C{beacon:})."""
    task_id = inert(getattr(args, "id", None))
    if isinstance(error, TransportError):
        reason = inert(error.reason)
        hint = ""
        if reason == "no such socket" or reason.startswith("connection refused"):
            hint = " (is twistd beacon running?)"
        return f"cannot reach Beacon at {inert(error.address)}: {reason}{hint}"
    if isinstance(error, Timeout):
        return (
            f"no answer from Beacon at {inert(error.address)} within {error.seconds:g} s"
        )
    if isinstance(error, RPCError):
        message = inert(error.message)
        if error.code == -32001:
            return f"no submission with id {task_id}" if task_id else message
        if error.code == -31401:
            return f"the operator door refused the request: {message}"
        if error.code == -32004 and args.command in ("accept", "reject"):
            return f"cannot {args.command} {task_id}: {message}"
        if error.code == -32602:
            details = violations(error)
            return f"Beacon refused the request: {details or message}"
        return f"Beacon refused the request: {message} (error {error.code})"
    if isinstance(error, (HTTPStatusError, InvalidResponse)):
        return f"unexpected answer from Beacon: {inert(str(error))}"
    return inert(str(error))


# The commands.


class _Session(Output):
    """One command's output streams and what Ctrl-C needs to know."""

    def __init__(self, out: IO[str], err: IO[str]) -> None:
        super().__init__(out, err)
        self.interrupted = False
        self.feed: Feed | None = None

    def interrupt(self) -> None:
        """The reactor is stopping (Ctrl-C, SIGTERM): close a live stream."""
        self.interrupted = True
        if self.feed is not None:
            self.feed.cancel()


async def _list(client: OperatorClient, args: argparse.Namespace, io: _Session, columns: int) -> int:
    tasks: list[Any] = []
    token = ""
    total: Any = None
    while len(tasks) < args.limit:
        page = await client.list_tasks(
            status=args.status,
            page_size=min(MAX_PAGE, args.limit - len(tasks)),
            page_token=token or None,
        )
        tasks.extend(page["tasks"][: args.limit - len(tasks)])
        total = page.get("totalSize")
        token = page.get("nextPageToken") or ""
        if not token or not page["tasks"]:
            break
    if args.json:
        answer: dict[str, Any] = {"tasks": tasks, "nextPageToken": token}
        if total is not None:
            answer["totalSize"] = total
        io.line(json_text(answer))
        return 0
    if not tasks:
        where = f" {state_word(args.status)}" if args.status else ""
        io.line(f"No{where} submissions.")
        return 0
    for line in list_table(tasks, columns):
        io.line(line)
    if isinstance(total, int) and total > len(tasks):
        io.line(f"({len(tasks)} of {total} shown; --limit N shows more)")
    return 0


async def _show(client: OperatorClient, args: argparse.Namespace, io: _Session, columns: int) -> int:
    task = await client.get_task(args.id)
    if args.json:
        io.line(json_text(task))
    else:
        for line in show_lines(task):
            io.line(line)
    return 0


async def _decide(client: OperatorClient, args: argparse.Namespace, io: _Session, columns: int) -> int:
    task = await client.decide(args.id, args.command, args.note)
    if args.json:
        io.line(json_text(task))
        return 0
    state = dig(task, "status", "state")
    io.line(f"{state_word(state)} {inert(dig(task, 'id'))}")
    return 0


async def _follow(client: OperatorClient, args: argparse.Namespace, io: _Session, columns: int) -> int:
    feed = io.feed = await client.follow()
    io.err.write(f"following the inbox at {inert(client.address)} (Ctrl-C stops)\n")
    io.err.flush()
    try:
        async for event in feed:
            if args.json:
                io.line(json_text(event, indent=None))
            else:
                io.line(event_line(event, await _subject_of(client, event)))
            io.flush()
    except TransportError:
        if io.interrupted:
            return 0
        io.err.write(
            f"beacon: lost the stream from Beacon at {inert(client.address)} (did Beacon stop?)\n"
        )
        return 1
    if io.interrupted:
        return 0
    io.err.write(
        f"beacon: Beacon at {inert(client.address)} ended the stream (is it stopping?)\n"
    )
    return 1


async def _subject_of(client: OperatorClient, event: Any) -> str:
    """
    A new submission's subject, from the event's task (which carries its
    history); a decision's subject is looked up.
    """
    task = dig(event, "task")
    if isinstance(task, dict) and task.get("history"):
        return summary(task)
    task_id = dig(event, "statusUpdate", "taskId")
    if not isinstance(task_id, str):
        return ""
    try:
        return summary(await client.get_task(task_id))
    except ClientError:
        return ""


_COMMANDS: dict[str, Callable[..., Any]] = {
    "list": _list,
    "show": _show,
    "accept": _decide,
    "reject": _decide,
    "follow": _follow,
}


def make_client(reactor: IBeaconReactor, args: argparse.Namespace) -> OperatorClient:
    """
    The client the options ask for.

    @raise ClientError: The options name nothing usable (an unreadable
        discovery file, an impossible socket path).
    """
    timeout = getattr(args, "timeout", DEFAULT_TIMEOUT)
    discovery = getattr(args, "discovery", None)
    if discovery is not None:
        return OperatorClient.from_discovery(reactor, discovery, timeout=timeout)
    socket = getattr(args, "socket", None)
    data = getattr(args, "data", None)
    if socket is None:
        socket = os.path.join(data, "operator.sock") if data is not None else DEFAULT_SOCKET
    return OperatorClient(reactor, socket_path=socket, timeout=timeout)


async def run(
    reactor: IBeaconReactor,
    args: argparse.Namespace,
    out: IO[str],
    err: IO[str],
    columns: int | None = None,
) -> int:
    """
    Run one parsed C{beacon review} command.

    @return: The exit code.
    """
    io = _Session(out, err)
    if columns is None:
        columns = shutil.get_terminal_size((100, 24)).columns
    trigger = reactor.addSystemEventTrigger("before", "shutdown", io.interrupt)
    try:
        client = make_client(reactor, args)
        code: int = await _COMMANDS[args.command](client, args, io, columns)
        return code
    except BrokenPipeError:
        raise
    except Exception as e:
        if io.interrupted:
            # Stopped by Ctrl-C: no error to report.
            return 0 if args.command == "follow" else 130
        if isinstance(e, ClientError):
            err.write(f"beacon: {describe(e, args)}\n")
        else:
            err.write(f"beacon: internal error: {type(e).__name__}: {inert(str(e))}\n")
        return 1
    finally:
        reactor.removeSystemEventTrigger(trigger)


# The command line.


def _connection_options(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's parser must not overwrite what was given
    # before the subcommand with its own defaults.
    group = parser.add_argument_group("where Beacon is (one of)")
    group.add_argument(
        "--socket",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help=f"the operator socket [default: ./{DEFAULT_SOCKET}]",
    )
    group.add_argument(
        "--data",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="Beacon's data directory (its socket is DIR/operator.sock)",
    )
    group.add_argument(
        "--discovery",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="the bearer door's discovery file (DIR/operator-http.json)",
    )
    group.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=duration,
        default=argparse.SUPPRESS,
        help="how long to wait for an answer [default: 10]",
    )


def add_parser(commands: Any) -> None:
    """Add C{review} and its actions to C{commands} (C{beacon}'s subparsers)."""
    review: argparse.ArgumentParser = commands.add_parser(
        "review",
        help="read and decide on submissions (through the operator socket)",
        description="Read and decide on submissions through Beacon's operator door.",
    )
    _connection_options(review)
    actions = review.add_subparsers(dest="command", metavar="ACTION", required=True)

    def action(name: str, help: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, description=help)
        _connection_options(sub)
        return sub

    listing = action("list", "list submissions, newest first")
    listing.add_argument(
        "--status",
        metavar="S",
        type=parse_state,
        default=None,
        help="only submissions in this state: submitted, accepted, rejected or TASK_STATE_*",
    )
    listing.add_argument(
        "--limit", metavar="N", type=count, default=DEFAULT_LIMIT, help=f"show at most N [default: {DEFAULT_LIMIT}]"
    )
    listing.add_argument("--json", action="store_true", help="print ProtoJSON")
    show = action("show", "show one submission in full")
    show.add_argument("id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print the Task as ProtoJSON")
    for name, verb in (("accept", "accept"), ("reject", "reject")):
        decide = action(name, f"{verb} a submission (decisions are final)")
        decide.add_argument("id", metavar="ID")
        decide.add_argument("--note", metavar="TEXT", default=None, help="a note for the record")
        decide.add_argument("--json", action="store_true", help="print the Task as ProtoJSON")
    follow = action("follow", "print new submissions and decisions as they happen, until Ctrl-C")
    follow.add_argument("--json", action="store_true", help="print each event as one JSON line")


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """
    Refuse what argparse cannot: more than one of C{--socket}, C{--data}
    and C{--discovery}.

    @raise SystemExit: A usage error (code 2).
    """
    given = [
        name
        for name in ("socket", "data", "discovery")
        if args.area == "review" and hasattr(args, name)
    ]
    if len(given) > 1:
        parser.error(f"give one of --socket, --data and --discovery, not {' and '.join('--' + g for g in given)}")
