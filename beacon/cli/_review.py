"""
The C{beacon review} commands: read and decide on submissions through
Beacon's operator door (C{list}, C{show}, C{accept}, C{reject}, C{export},
C{purge}, C{follow}, C{web}), their options and their one-line errors.

Every command taking an id takes a unique prefix of at least six of its
characters (L{beacon.cli._filters.resolve}). Commands that decide or erase
more than one submission ask first on a terminal, or need C{--yes}.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any

from beacon.interfaces import IBeaconReactor
from beacon.cli import _web
from beacon.cli._export import FORMATS, record_of, writer_for
from beacon.cli._filters import (
    FILTER_STATES,
    MAX_PAGE,
    SHORT_ID,
    LookupFailed,
    UsageError,
    add_filter_options,
    every_task,
    filter_options,
    has_filter,
    query_of,
    parse_before,
    parse_state,
    resolve,
)
from beacon.cli._options import count, duration
from beacon.cli._text import (
    Output,
    when,
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
from beacon.protocol import STATE_SUBMITTED
from beacon.protocol.query import TaskQuery

#: Where C{twistd beacon} puts its operator socket when started here.
DEFAULT_SOCKET = os.path.join("beacon-data", "operator.sock")
#: The environment variable naming the operator socket when neither
#: C{--socket} nor C{--data} (nor C{--discovery}) does.
SOCKET_VARIABLE = "BEACON_SOCKET"
#: How to point C{beacon review} at another Beacon, said when it finds none.
ELSEWHERE = f"point to its socket with --socket PATH, --data DIR or {SOCKET_VARIABLE}=PATH"
#: How many tasks C{review list} shows by default.
DEFAULT_LIMIT = 50
#: How many ids one C{beacon.review.DecideMany} call carries.
BULK_CHUNK = 1000
#: How many ids a bulk decision's answer lists before "and N more".
SHOW_IDS = 20

__all__ = ["FILTER_STATES", "parse_state", "run", "add_parser", "check_args"]


def describe(error: ClientError, args: argparse.Namespace) -> str:
    """One line saying what went wrong, for stderr (without C{beacon:})."""
    named = getattr(args, "id", None)
    if named is None and len(getattr(args, "ids", None) or ()) == 1:
        named = args.ids[0]
    task_id = inert(named)
    if isinstance(error, TransportError):
        reason = inert(error.reason)
        hint = ""
        source = getattr(args, "socket_source", None)
        if source is not None and (
            reason == "no such socket" or reason.startswith("connection refused")
        ):
            hint = f" (is twistd beacon running? {ELSEWHERE})"
        where = f" ({source})" if source in ("the default", f"from {SOCKET_VARIABLE}") else ""
        return f"cannot reach Beacon at {inert(error.address)}{where}: {reason}{hint}"
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
    """
    One command's output streams, how it asks the person at the terminal,
    and what Ctrl-C needs to know.
    """

    def __init__(self, out: IO[str], err: IO[str], ask: Callable[[str], bool | None]) -> None:
        super().__init__(out, err)
        self.ask = ask
        self.interrupted = False
        self.feed: Feed | None = None

    def interrupt(self) -> None:
        """The reactor is stopping (Ctrl-C, SIGTERM): close a live stream."""
        self.interrupted = True
        if self.feed is not None:
            self.feed.cancel()

    def confirm(self, question: str, args: argparse.Namespace) -> bool:
        """
        Whether to go on: yes with C{--yes}, else the answer to C{question}
        on the terminal.

        @raise UsageError: No C{--yes} and no terminal to ask on.
        """
        if getattr(args, "yes", False):
            return True
        answer = self.ask(question)
        if answer is None:
            raise UsageError(
                f"{question.rstrip('?')}: refusing without --yes (no terminal to ask on)"
            )
        return answer


def ask_terminal(question: str) -> bool | None:
    """
    Ask C{question} on the terminal (stderr) and read the answer (stdin):
    true only for y or yes; L{None} when stdin is no terminal.
    """
    if not sys.stdin.isatty():
        return None
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


async def _list(client: OperatorClient, args: argparse.Namespace, io: _Session, columns: int) -> int:
    query = query_of(args)
    tasks: list[Any] = []
    token = args.page_token or ""
    total: Any = None
    more_than: Any = None
    while len(tasks) < args.limit:
        page = await client.review_list(
            query,
            page_size=min(MAX_PAGE, args.limit - len(tasks)),
            page_token=token or None,
            include_total=total is None and more_than is None,
        )
        tasks.extend(page["tasks"][: args.limit - len(tasks)])
        if total is None and more_than is None:
            total = page.get("totalSize")
            more_than = page.get("totalMoreThan")
        token = page.get("nextPageToken") or ""
        if not token or not page["tasks"]:
            break
    if args.json:
        answer: dict[str, Any] = {"tasks": tasks, "nextPageToken": token}
        if total is not None:
            answer["totalSize"] = total
        if more_than is not None:
            answer["totalMoreThan"] = more_than
        io.line(json_text(answer))
        return 0
    if not tasks:
        if args.status is not None and not has_filter(args, besides_status=True):
            io.line(f"No {state_word(args.status)} submissions.")
        elif has_filter(args):
            io.line("No submissions match.")
        else:
            io.line("No submissions.")
        return 0
    for line in list_table(tasks, columns, None if args.full_ids else SHORT_ID):
        io.line(line)
    if token:
        if isinstance(total, int):
            shown = f"{len(tasks):,} of {total:,}"
        elif isinstance(more_than, int):
            shown = f"{len(tasks):,} of more than {more_than:,}"
        else:
            shown = f"{len(tasks):,}"
        io.line(f"({shown} shown; --limit N shows more, --page-token {token} the next page)")
    return 0


async def _show(client: OperatorClient, args: argparse.Namespace, io: _Session, columns: int) -> int:
    task = await client.get_task(await resolve(client, args.id))
    if args.json:
        io.line(json_text(task))
    else:
        for line in show_lines(task):
            io.line(line)
    return 0


async def _decide(client: OperatorClient, args: argparse.Namespace, io: _Session, columns: int) -> int:
    if args.matching:
        if args.ids:
            raise UsageError("give IDs or --matching with filters, not both")
        if not has_filter(args):
            raise UsageError(
                f"--matching needs at least one filter ({filter_options()})"
            )
        return await _decide_matching(client, args, io, query_of(args))
    if not args.ids:
        raise UsageError(f"give the ids to {args.command}, or --matching with filters")
    if has_filter(args):
        raise UsageError("filters select submissions only with --matching")
    ids = list(dict.fromkeys([await resolve(client, text) for text in args.ids]))
    if len(ids) == 1:
        args.id = ids[0]
        task = await client.decide(ids[0], args.command, args.note)
        if args.json:
            io.line(json_text(task))
            return 0
        state = dig(task, "status", "state")
        io.line(f"{state_word(state)} {inert(dig(task, 'id'))}")
        return 0
    verb = "accept" if args.command == "accept" else "reject"
    if not io.confirm(f"{verb.capitalize()} {_plural(len(ids), 'submission')}?", args):
        io.line("Nothing decided.")
        return 1
    return await _decide_ids(client, args, io, ids, [])


async def _decide_matching(
    client: OperatorClient, args: argparse.Namespace, io: _Session, query: TaskQuery
) -> int:
    """Decide every submission the filters match (the undecided ones)."""
    undecided: list[str] = []
    decided: list[dict[str, Any]] = []
    async for task in every_task(client, query, history=False):
        state = dig(task, "status", "state")
        if state == STATE_SUBMITTED:
            undecided.append(task["id"])
        else:
            decided.append({"id": task.get("id"), "state": state})
    verb = "accept" if args.command == "accept" else "reject"
    matched = len(undecided) + len(decided)
    if not undecided:
        if args.json:
            io.line(json_text(_bulk_answer(args.command, [], decided, [], [])))
        else:
            io.line(
                f"{_plural(matched, 'submission')} match; none is undecided. Nothing decided."
                if matched
                else "No submissions match. Nothing decided."
            )
        return 0
    already = f" ({len(decided):,} already decided)" if decided else ""
    question = (
        f"{verb.capitalize()} {_plural(len(undecided), 'undecided submission')}"
        f" of {matched:,} matching{already}?"
    )
    if not io.confirm(question, args):
        io.line("Nothing decided.")
        return 1
    return await _decide_ids(client, args, io, undecided, decided)


def _bulk_answer(
    decision: str,
    decided: list[str],
    already: list[dict[str, Any]],
    not_found: list[str],
    failed: list[str],
) -> dict[str, Any]:
    return {
        "decision": decision,
        "decided": decided,
        "alreadyDecided": already,
        "notFound": not_found,
        "failed": failed,
    }


async def _decide_ids(
    client: OperatorClient,
    args: argparse.Namespace,
    io: _Session,
    ids: list[str],
    already: list[dict[str, Any]],
) -> int:
    """
    Decide C{ids} in chunks of L{BULK_CHUNK} with one note, and say what
    became of them (C{already}: those known decided before asking).
    """
    decided: list[str] = []
    already = list(already)
    not_found: list[str] = []
    failed: list[str] = []
    for start in range(0, len(ids), BULK_CHUNK):
        answer = await client.decide_many(ids[start : start + BULK_CHUNK], args.command, args.note)
        decided.extend(answer["decided"])
        already.extend(answer["alreadyDecided"])
        not_found.extend(answer["notFound"])
        failed.extend(answer["failed"])
    if args.json:
        io.line(json_text(_bulk_answer(args.command, decided, already, not_found, failed)))
    else:
        word = "accepted" if args.command == "accept" else "rejected"
        io.line(f"{word} {_plural(len(decided), 'submission')}")
        if already:
            listed = ", ".join(
                f"{inert(dig(a, 'id'))[:SHORT_ID]} ({state_word(dig(a, 'state'))})"
                for a in already[:SHOW_IDS]
            )
            more = f" and {len(already) - SHOW_IDS:,} more" if len(already) > SHOW_IDS else ""
            io.line(f"{len(already):,} already decided: {listed}{more}")
        if not_found:
            io.line(f"{len(not_found):,} not found: {', '.join(inert(i) for i in not_found[:SHOW_IDS])}")
        if failed:
            io.line(f"{len(failed):,} not stored (see Beacon's log; run again): "
                    f"{', '.join(inert(i)[:SHORT_ID] for i in failed[:SHOW_IDS])}")
    return 1 if (not_found or failed) else 0


async def _export(client: OperatorClient, args: argparse.Namespace, io: _Session, columns: int) -> int:
    query = query_of(args)
    if args.output is None or args.output == "-":
        written = await _write_export(client, args, query, io.out)
        io.flush()
    else:
        # Written beside the target, then renamed: a failed export leaves
        # no half file under the name asked for. Mode 0600: the content is
        # the inbox's.
        partial = f"{args.output}.partial"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with open(fd, "w", encoding="utf-8", newline="") as f:
                written = await _write_export(client, args, query, f)
            os.replace(partial, args.output)
        except BaseException:
            try:
                os.unlink(partial)
            except OSError:
                pass
            raise
    io.err.write(f"exported {_plural(written, 'submission')}\n")
    return 0


async def _write_export(
    client: OperatorClient, args: argparse.Namespace, query: TaskQuery, out: IO[str]
) -> int:
    writer = writer_for(args.format, out)
    written = 0
    async for task in every_task(client, query):
        writer.write(record_of(task))
        written += 1
    writer.close()
    return written


async def _purge(client: OperatorClient, args: argparse.Namespace, io: _Session, columns: int) -> int:
    before = args.decided_before
    counted = await client.purge(before, dry_run=True)
    n = counted["purged"]
    if n == 0:
        if args.json:
            io.line(json_text({"purged": 0, "dryRun": False}))
        else:
            io.line(f"No decided submission with content was decided before {when(before)}. Nothing purged.")
        return 0
    question = (
        f"Erase the content and notes of {_plural(n, 'submission')} decided before"
        f" {when(before)}? This cannot be undone"
    )
    if not io.confirm(question + "?", args):
        io.line("Nothing purged.")
        return 1
    answer = await client.purge(before)
    if args.json:
        io.line(json_text(answer))
    else:
        io.line(
            f"purged the content of {_plural(answer['purged'], 'submission')}"
            " (receipts, times and states kept)"
        )
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
    "export": _export,
    "purge": _purge,
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
    socket, args.socket_source = socket_path(args)
    return OperatorClient(reactor, socket_path=socket, timeout=timeout)


def socket_path(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> tuple[str, str]:
    """
    The operator socket the options name, and where it came from: the
    first of C{--socket PATH}, C{--data DIR} (C{DIR/operator.sock}),
    C{$BEACON_SOCKET} (unless empty) and L{DEFAULT_SOCKET}.

    @return: The path, and C{"--socket"}, C{"--data"}, C{"from
        BEACON_SOCKET"} or C{"the default"}.
    """
    socket = getattr(args, "socket", None)
    if socket is not None:
        return socket, "--socket"
    data = getattr(args, "data", None)
    if data is not None:
        return os.path.join(data, "operator.sock"), "--data"
    variable = environ.get(SOCKET_VARIABLE)
    if variable:
        return variable, f"from {SOCKET_VARIABLE}"
    return DEFAULT_SOCKET, "the default"


async def run(
    reactor: IBeaconReactor,
    args: argparse.Namespace,
    out: IO[str],
    err: IO[str],
    columns: int | None = None,
    ask: Callable[[str], bool | None] = ask_terminal,
) -> int:
    """
    Run one parsed C{beacon review} command.

    @param ask: How to ask the person at the terminal a yes-or-no
        question: true for yes, L{None} when there is no terminal.
    @return: The exit code: 0 done, 1 failed (or declined), 2 a value
        of the command line that cannot be used.
    """
    io = _Session(out, err, ask)
    if columns is None:
        columns = shutil.get_terminal_size((100, 24)).columns
    trigger = reactor.addSystemEventTrigger("before", "shutdown", io.interrupt)
    try:
        client = make_client(reactor, args)
        if args.command == "web":
            return await _web.serve(reactor, client, args, io)
        code: int = await _COMMANDS[args.command](client, args, io, columns)
        return code
    except BrokenPipeError:
        raise
    except Exception as e:
        if io.interrupted:
            # Stopped by Ctrl-C: no error to report.
            return 0 if args.command in ("follow", "web") else 130
        if isinstance(e, UsageError):
            err.write(f"beacon: {e}\n")
            return 2
        if isinstance(e, LookupFailed):
            err.write(f"beacon: {e}\n")
            return 1
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
        help=f"the operator socket [default: ${SOCKET_VARIABLE}, else ./{DEFAULT_SOCKET}]",
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
        epilog="The operator socket is the first of: --socket PATH; --data DIR\n"
        f"(DIR/operator.sock); the environment variable {SOCKET_VARIABLE};\n"
        f"./{DEFAULT_SOCKET} (where twistd beacon started in this directory\n"
        "puts it). --discovery FILE talks to the bearer door instead.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _connection_options(review)
    actions = review.add_subparsers(dest="command", metavar="ACTION", required=True)

    def action(name: str, help: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, description=help)
        _connection_options(sub)
        return sub

    listing = action("list", "list submissions, newest received first")
    add_filter_options(listing)
    listing.add_argument(
        "--limit", metavar="N", type=count, default=DEFAULT_LIMIT, help=f"show at most N [default: {DEFAULT_LIMIT}]"
    )
    listing.add_argument(
        "--page-token", metavar="TOKEN", default=None, help="go on from where a listing stopped (same filters and sort)"
    )
    listing.add_argument("--full-ids", action="store_true", help=f"show whole ids, not their first {SHORT_ID} characters")
    listing.add_argument("--json", action="store_true", help="print ProtoJSON")
    show = action("show", "show one submission in full")
    show.add_argument("id", metavar="ID", help="an id, or a unique prefix of 6 or more of its characters")
    show.add_argument("--json", action="store_true", help="print the Task as ProtoJSON")
    for name, verb in (("accept", "accept"), ("reject", "reject")):
        decide = action(name, f"{verb} submissions (decisions are final)")
        decide.add_argument(
            "ids", metavar="ID", nargs="*", help="ids, or unique prefixes of 6 or more characters"
        )
        decide.add_argument(
            "--matching", action="store_true", help=f"{verb} every undecided submission the filters match"
        )
        add_filter_options(decide, sort=False)
        decide.add_argument("--note", metavar="TEXT", default=None, help="a note for the record (one for all)")
        decide.add_argument("--yes", action="store_true", help="do not ask before deciding more than one")
        decide.add_argument("--json", action="store_true", help="print the answer as JSON")
    export = action("export", "write every matching submission in full (JSON Lines or CSV)")
    add_filter_options(export)
    export.add_argument("--format", choices=FORMATS, default="jsonl", help="jsonl (default, lossless) or csv")
    export.add_argument(
        "--output", metavar="FILE", default=None, help="write to FILE (mode 0600) instead of standard output"
    )
    purge = action("purge", "erase the content of decided submissions (keeps receipts, times, states)")
    purge.add_argument(
        "--decided-before",
        metavar="WHEN",
        type=parse_before,
        required=True,
        help="purge submissions decided before WHEN (ISO 8601 date or time; UTC unless it says)",
    )
    purge.add_argument("--yes", action="store_true", help="do not ask first")
    purge.add_argument("--json", action="store_true", help="print the answer as JSON")
    follow = action("follow", "print new submissions and decisions as they happen, until Ctrl-C")
    follow.add_argument("--json", action="store_true", help="print each event as one JSON line")
    _web.add_arguments(action("web", "read and decide in a browser: a console on loopback, until Ctrl-C"))


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
