"""
The C{beacon} console script.

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

C{--socket PATH}, C{--data DIR} or C{--discovery FILE} (the bearer door's
file) say where Beacon is, anywhere after C{beacon review}; the default is
C{./beacon-data/operator.sock}, the socket C{twistd beacon} makes when
started in the current directory.

Exit codes: 0 success, 1 error (Beacon not reachable, an unknown id, a
refused decision), 2 usage. An error is one line on stderr, never a
traceback.

Everything printed that came from the server is made inert first: control
characters (ESC and the rest of C0 and C1), Unicode format characters (bidi
overrides, zero-width characters), line and paragraph separators and lone
surrogates are written as visible escapes, so a submission cannot drive the
terminal. Only the message body in C{show} keeps its newlines.

This is an edge: it may import the global reactor (inside L{main}).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import unicodedata
from collections.abc import Callable, Sequence
from typing import IO, Any

from twisted.internet.defer import Deferred

from beacon import __version__
from beacon.client import (
    DEFAULT_TIMEOUT,
    A2AClient,
    AgentCard,
    ClientError,
    Feed,
    HTTPStatusError,
    InvalidResponse,
    OperatorClient,
    RPCError,
    Timeout,
    Timeouts,
    TransportError,
    fetch_card,
    outcome_of,
    text_message,
)

#: Where C{twistd beacon} puts its operator socket when started here.
DEFAULT_SOCKET = os.path.join("beacon-data", "operator.sock")
#: How many tasks C{review list} shows by default.
DEFAULT_LIMIT = 50
#: The largest page C{ListTasks} serves.
MAX_PAGE = 100

SUBMITTED = "TASK_STATE_SUBMITTED"
COMPLETED = "TASK_STATE_COMPLETED"
REJECTED = "TASK_STATE_REJECTED"
#: Every A2A 1.0 TaskState a filter may name.
TASK_STATES = frozenset(
    {
        SUBMITTED,
        "TASK_STATE_WORKING",
        COMPLETED,
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_INPUT_REQUIRED",
        REJECTED,
        "TASK_STATE_AUTH_REQUIRED",
    }
)
_SHORT_STATES = {
    "submitted": SUBMITTED,
    "completed": COMPLETED,
    "accepted": COMPLETED,
    "rejected": REJECTED,
}
_STATE_WORDS = {SUBMITTED: "submitted", COMPLETED: "accepted", REJECTED: "rejected"}

#: Unicode categories never printed as they are: controls, format
#: characters (bidi overrides, zero-width), surrogates, line and paragraph
#: separators.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_TIMESTAMP = re.compile(r"\A(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?Z\Z")


# Making server text inert.


def _escape(character: str) -> str:
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def inert(value: Any, *, newlines: bool = False) -> str:
    """
    Server-supplied C{value} as text that cannot act on a terminal: every
    control, format or separator character written as a visible escape
    (C{\\x1b}); newlines kept only when C{newlines} is true. Non-strings
    are shown as JSON.
    """
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return "".join(
        c
        if (newlines and c == "\n") or unicodedata.category(c) not in _UNSAFE_CATEGORIES
        else _escape(c)
        for c in text
    )


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """
    C{value} as JSON that is safe on a terminal: ASCII only, every control
    character escaped (DEL too, which C{json} leaves alone).
    """
    separators = None if indent else (",", ":")
    text = json.dumps(value, ensure_ascii=True, indent=indent, separators=separators)
    return text.replace("\x7f", "\\u007f")


def _width(character: str) -> int:
    if unicodedata.combining(character):
        return 0
    return 2 if unicodedata.east_asian_width(character) in ("W", "F") else 1


def display_width(text: str) -> int:
    """How many terminal columns C{text} (already inert) takes."""
    return sum(_width(c) for c in text)


def truncate(text: str, columns: int) -> str:
    """C{text} cut to C{columns} terminal columns, with an ellipsis if cut."""
    if display_width(text) <= columns:
        return text
    kept: list[str] = []
    used = 0
    for c in text:
        w = _width(c)
        if used + w > columns - 1:
            break
        kept.append(c)
        used += w
    return "".join(kept) + "\u2026"


def pad(text: str, columns: int) -> str:
    """C{text} padded with spaces to C{columns} terminal columns."""
    return text + " " * max(0, columns - display_width(text))


# Reading tasks (defensively: a broken answer must not crash the CLI).


def _get(value: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, list) or len(value) <= key:
                return None
        elif not isinstance(value, dict):
            return None
        value = value[key] if isinstance(key, int) else value.get(key)
    return value


def when(timestamp: Any) -> str:
    """An RFC 3339 UTC timestamp as C{2026-11-30 04:29:55Z}."""
    if isinstance(timestamp, str):
        match = _TIMESTAMP.match(timestamp)
        if match:
            return f"{match.group(1)} {match.group(2)}Z"
    return inert(timestamp)


def state_word(state: Any) -> str:
    """C{TASK_STATE_COMPLETED} as C{accepted}, and so on."""
    if isinstance(state, str):
        if state in _STATE_WORDS:
            return _STATE_WORDS[state]
        if state.startswith("TASK_STATE_"):
            return inert(state[len("TASK_STATE_") :].lower().replace("_", "-"))
    return inert(state)


def _submitted_part(task: Any) -> Any:
    return _get(task, "history", 0, "parts", 0)


def summary(task: Any) -> str:
    """A task's subject, or the first non-empty line of its text."""
    part = _submitted_part(task)
    subject = _get(part, "data", "subject")
    if isinstance(subject, str):
        return inert(" ".join(subject.split()))
    text = _get(part, "text")
    if isinstance(text, str):
        for line in text.splitlines():
            if line.strip():
                return inert(" ".join(line.split()))
    return ""


def parse_state(text: str) -> str:
    """
    A C{--status} value as a TaskState name: C{submitted}, C{accepted} (or
    C{completed}), C{rejected}, or any C{TASK_STATE_*} name.

    @raise argparse.ArgumentTypeError: It names no state.
    """
    word = text.strip()
    if word.lower() in _SHORT_STATES:
        return _SHORT_STATES[word.lower()]
    name = word.upper().replace("-", "_")
    for candidate in (name, "TASK_STATE_" + name):
        if candidate in TASK_STATES:
            return candidate
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a task state (submitted, accepted, rejected or TASK_STATE_*)"
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


# Output.


def list_table(tasks: list[Any], columns: int) -> list[str]:
    """The lines of C{review list}'s table, fitted to C{columns}."""
    header = ["ID", "STATE", "RECEIVED", "DOOR", "KIND", "SUBJECT"]
    rows = [
        [
            inert(_get(t, "id")),
            state_word(_get(t, "status", "state")),
            when(_get(t, "metadata", "receipt", "receivedAt")),
            truncate(inert(_get(t, "metadata", "door")), 12),
            truncate(inert(_get(t, "metadata", "kind")), 10),
            summary(t),
        ]
        for t in tasks
    ]
    widths = [
        max(display_width(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)
    ]
    fixed = sum(widths) + 2 * (len(widths))
    room = max(20, columns - fixed)
    lines = []
    for row in [header, *rows]:
        cells = [pad(cell, widths[i]) for i, cell in enumerate(row[:-1])]
        cells.append(truncate(row[-1], room))
        lines.append("  ".join(cells).rstrip())
    return lines


def decision_note(status: Any) -> Any:
    """
    The note of the decision in a TaskStatus, or None when the decision has
    no note (its status message then only says accepted or rejected).
    """
    metadata = _get(status, "message", "metadata")
    if isinstance(metadata, dict) and any(
        _get(value, "hasNote") is True for value in metadata.values()
    ):
        return _get(status, "message", "parts", 0, "text")
    return None


def show_lines(task: Any) -> list[str]:
    """The lines of C{review show}: every field, then the message."""
    fields: list[tuple[str, str]] = []
    status = _get(task, "status")
    fields.append(("id", inert(_get(task, "id"))))
    state = _get(status, "state")
    fields.append(
        ("state", f"{state_word(state)} ({inert(state)}) since {when(_get(status, 'timestamp'))}")
    )
    note = decision_note(status)
    if note is not None:
        fields.append(("note", inert(note)))
    receipt = _get(task, "metadata", "receipt")
    fields.append(("received", when(_get(receipt, "receivedAt"))))
    fields.append(("door", inert(_get(task, "metadata", "door"))))
    fields.append(("source", inert(_get(task, "metadata", "source"))))
    fields.append(("kind", inert(_get(task, "metadata", "kind"))))
    fields.append(("sha256", inert(_get(receipt, "sha256"))))
    fields.append(("context", inert(_get(task, "contextId"))))
    body: str | None = None
    part = _submitted_part(task)
    data = _get(part, "data")
    if isinstance(data, dict):
        sender = _get(data, "from")
        name = inert(_get(sender, "name"))
        extras = [
            f"{label} {inert(_get(sender, key))}"
            for label, key in (("agent", "agent"), ("operator", "operator"))
            if _get(sender, key) is not None
        ]
        fields.append(("from", name + (f" ({', '.join(extras)})" if extras else "")))
        fields.append(("subject", inert(_get(data, "subject"))))
        if _get(data, "language") is not None:
            fields.append(("language", inert(_get(data, "language"))))
        contacts = _get(data, "contact")
        for index, contact in enumerate(contacts if isinstance(contacts, list) else []):
            fields.append(
                (
                    "contact" if index == 0 else "",
                    f"{inert(_get(contact, 'kind'))}: {inert(_get(contact, 'value'))}",
                )
            )
        body = _get(data, "body")
        if not isinstance(body, str):
            body = None
    elif isinstance(_get(part, "text"), str):
        body = _get(part, "text")
    elif part is not None:
        fields.append(("message", "(a part this command does not show; see --json)"))
    label_width = max(len(label) for label, _ in fields) + 2
    lines = [pad(f"{label}:" if label else "", label_width) + value for label, value in fields]
    if body is not None:
        lines.append("")
        lines.extend(inert(body, newlines=True).split("\n"))
    return lines


def event_line(event: Any, subject: str = "") -> str:
    """One line for one C{beacon.inbox.Follow} event."""
    task = _get(event, "task")
    if isinstance(task, dict):
        status = _get(task, "status")
        words = [
            when(_get(status, "timestamp")),
            "new",
            inert(_get(task, "id")),
            inert(_get(task, "metadata", "door")),
            inert(_get(task, "metadata", "kind")),
        ]
        line = "  ".join(words)
        return f"{line}  {subject}" if subject else line
    update = _get(event, "statusUpdate")
    if isinstance(update, dict):
        status = _get(update, "status")
        words = [
            when(_get(status, "timestamp")),
            state_word(_get(status, "state")),
            inert(_get(update, "taskId")),
        ]
        note = decision_note(status)
        if note is not None:
            words.append("note: " + inert(note))
        return "  ".join(words)
    return "event  " + inert(event)


# Errors, as one line.


def _violations(error: RPCError) -> str:
    found = []
    for detail in error.data if isinstance(error.data, list) else []:
        for violation in _get(detail, "fieldViolations") or []:
            field = _get(violation, "field")
            description = _get(violation, "description")
            if field is not None:
                found.append(f"{inert(field)} {inert(description)}")
    return "; ".join(found)


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
            details = _violations(error)
            return f"Beacon refused the request: {details or message}"
        return f"Beacon refused the request: {message} (error {error.code})"
    if isinstance(error, (HTTPStatusError, InvalidResponse)):
        return f"unexpected answer from Beacon: {inert(str(error))}"
    return inert(str(error))


# The commands.


class _Session:
    """One command's output streams and what Ctrl-C needs to know."""

    def __init__(self, out: IO[str], err: IO[str]) -> None:
        self.out = out
        self.err = err
        self.interrupted = False
        self.feed: Feed | None = None

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def flush(self) -> None:
        self.out.flush()

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
    state = _get(task, "status", "state")
    io.line(f"{state_word(state)} {inert(_get(task, 'id'))}")
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
    task = _get(event, "task")
    if isinstance(task, dict) and task.get("history"):
        return summary(task)
    task_id = _get(event, "statusUpdate", "taskId")
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


def make_client(reactor: Any, args: argparse.Namespace) -> OperatorClient:
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
    reactor: Any,
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


# Talking to other agents: beacon card, send, task.

#: How long a peer command may take by default, in seconds.
DEFAULT_PEER_TIMEOUT = 30.0
#: How long connecting may take by default, in seconds.
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Exit code of a command that ran out of time.
EXIT_TIMEOUT = 3


def describe_peer(error: ClientError) -> str:
    """One line saying what went wrong talking to an agent (without C{beacon:})."""
    if isinstance(error, TransportError):
        return f"cannot reach the agent at {inert(error.address)}: {inert(error.reason)}"
    if isinstance(error, RPCError):
        reason = f", {inert(error.reason)}" if error.reason else ""
        details = _violations(error)
        message = inert(error.message)
        if details:
            message += f": {details}"
        return f"the agent refused the request: {message} (error {error.code}{reason})"
    if isinstance(error, (HTTPStatusError, InvalidResponse)):
        return f"unexpected answer from the agent: {inert(str(error))}"
    return inert(str(error))


def card_lines(card: AgentCard) -> list[str]:
    """An agent card, readably."""
    yes = {True: "yes", False: "no"}
    lines = [f"{inert(card.name)}  (version {inert(card.version) or '?'})"]
    if card.description:
        lines.append(f"  {inert(card.description)}")
    if card.provider is not None:
        lines.append(f"provider: {inert(card.provider.organization)} {inert(card.provider.url)}".rstrip())
    if card.documentation_url:
        lines.append(f"documentation: {inert(card.documentation_url)}")
    lines.append("interfaces:")
    for interface in card.supported_interfaces:
        tenant = f"  tenant {inert(interface.tenant)}" if interface.tenant else ""
        lines.append(
            f"  {inert(interface.protocol_binding)} {inert(interface.protocol_version) or '?'}  "
            f"{inert(interface.url)}{tenant}"
        )
    caps = card.capabilities
    lines.append(
        f"capabilities: streaming {yes[caps.streaming]}, push notifications "
        f"{yes[caps.push_notifications]}, extended card {yes[caps.extended_agent_card]}"
    )
    if caps.extensions:
        lines.append("extensions:")
        for extension in caps.extensions:
            required = " (required)" if extension.required else ""
            about = f"  {inert(extension.description)}" if extension.description else ""
            lines.append(f"  {inert(extension.uri)}{required}{about}")
    lines.append(
        f"modes: in {', '.join(inert(m) for m in card.default_input_modes) or '-'}; "
        f"out {', '.join(inert(m) for m in card.default_output_modes) or '-'}"
    )
    lines.append("skills:" if card.skills else "skills: none")
    for skill in card.skills:
        tags = f"  [{', '.join(inert(t) for t in skill.tags)}]" if skill.tags else ""
        lines.append(f"  {inert(skill.id)}: {inert(skill.name)}{tags}")
        if skill.description:
            lines.append(f"      {inert(skill.description)}")
    if card.security_schemes:
        lines.append("security:")
        for name, scheme in card.security_schemes.items():
            lines.append(f"  {inert(name)}: {inert(scheme.summary())}")
    else:
        lines.append("security: none declared")
    return lines


def task_lines(task: Any) -> list[str]:
    """A task's id, state and last status message, readably."""
    lines = [f"task {inert(_get(task, 'id'))}", f"state {inert(_get(task, 'status', 'state'))}"]
    timestamp = _get(task, "status", "timestamp")
    if timestamp:
        lines.append(f"updated {when(timestamp)}")
    if _get(task, "contextId"):
        lines.append(f"context {inert(_get(task, 'contextId'))}")
    parts = _get(task, "status", "message", "parts")
    for part in parts if isinstance(parts, list) else []:
        if isinstance(_get(part, "text"), str):
            lines.append(inert(part["text"], newlines=True))
    for artifact in _get(task, "artifacts") or []:
        for part in _get(artifact, "parts") or []:
            if isinstance(_get(part, "text"), str):
                lines.append(inert(part["text"], newlines=True))
    return lines


def _peer_timeouts(args: argparse.Namespace) -> Timeouts:
    total = args.timeout
    return Timeouts(connect=min(args.connect_timeout, total), response=total, idle=total)


def _read_data(path: str) -> Any:
    """
    The JSON document in C{path} (for C{--data}).

    @raise ValueError: It cannot be read or is not JSON.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(16 * 1024 * 1024 + 1)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {(e.strerror or str(e)).lower()}") from None
    if len(raw) > 16 * 1024 * 1024:
        raise ValueError(f"{path} is larger than 16 MiB")
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError(f"{path} is not valid JSON") from None


async def _peer_card(reactor: Any, args: argparse.Namespace, io: _Session) -> int:
    # --socket only says which socket a unix:///path URL's card is read on.
    socket = args.socket if args.url.startswith("unix://") else None
    card = await fetch_card(reactor, args.url, timeouts=_peer_timeouts(args), socket_path=socket)
    if args.json:
        io.line(json_text(dict(card.raw)))
    else:
        for line in card_lines(card):
            io.line(line)
    return 0


async def _peer_client(reactor: Any, args: argparse.Namespace) -> A2AClient:
    preference = [args.binding] if args.binding else None
    return await A2AClient.discover(
        reactor,
        args.url,
        preference=preference,
        socket_path=args.socket,
        timeouts=_peer_timeouts(args),
    )


async def _peer_send(reactor: Any, args: argparse.Namespace, io: _Session) -> int:
    client = await _peer_client(reactor, args)
    try:
        result = await client.send_message(text_message(args.text, args.data_document))
    finally:
        await client.close()
    if args.json:
        io.line(json_text(result))
        return 0
    outcome = outcome_of(result)
    if outcome.task is not None:
        io.line(f"task {inert(_get(outcome.task, 'id'))} {inert(_get(outcome.task, 'status', 'state'))}")
        if outcome.text:
            io.line(inert(outcome.text, newlines=True))
    else:
        io.line(inert(outcome.text or "", newlines=True))
    return 0


async def _peer_task(reactor: Any, args: argparse.Namespace, io: _Session) -> int:
    client = await _peer_client(reactor, args)
    try:
        task = await client.get_task(args.id)
    finally:
        await client.close()
    if args.json:
        io.line(json_text(task))
    else:
        for line in task_lines(task):
            io.line(line)
    return 0


_PEER_COMMANDS: dict[str, Callable[..., Any]] = {
    "card": _peer_card,
    "send": _peer_send,
    "task": _peer_task,
}


async def run_peer(reactor: Any, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """
    Run one parsed C{beacon card|send|task} command, bounded as a whole by
    C{--timeout} on C{reactor}'s clock.

    @return: The exit code.
    """
    from beacon.client._transport import Deadline

    io = _Session(out, err)
    seconds = args.timeout
    command = Deferred.fromCoroutine(_PEER_COMMANDS[args.area](reactor, args, io))
    bounded = Deadline(
        reactor, seconds, lambda: Timeout(args.url, seconds, "command", "the agent")
    ).start(command)
    try:
        code: int = await bounded
        return code
    except BrokenPipeError:
        raise
    except Timeout as e:
        err.write(f"beacon: {describe_peer(e)}\n")
        return EXIT_TIMEOUT
    except ClientError as e:
        err.write(f"beacon: {describe_peer(e)}\n")
        return 1
    except Exception as e:
        err.write(f"beacon: internal error: {type(e).__name__}: {inert(str(e))}\n")
        return 1


def _peer_parsers(commands: Any) -> None:
    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "url", metavar="URL",
            help="the agent's base URL, its card's URL, or unix:///path (its socket)",
        )
        parser.add_argument(
            "--timeout", metavar="S", type=_seconds, default=DEFAULT_PEER_TIMEOUT,
            help=f"bound the whole command to S seconds [default: {DEFAULT_PEER_TIMEOUT:g}]",
        )
        parser.add_argument(
            "--connect-timeout", metavar="S", type=_seconds, default=DEFAULT_CONNECT_TIMEOUT,
            help=f"bound each connection attempt [default: {DEFAULT_CONNECT_TIMEOUT:g}]",
        )
        parser.add_argument(
            "--socket", metavar="PATH", default=None,
            help="dial this unix socket for an interface of the unix socket binding "
            "(never a path the card names)",
        )
        parser.add_argument("--json", action="store_true", help="print ProtoJSON")

    def calls(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--binding", choices=("jsonrpc", "websocket", "unix"), default=None,
            help="use only this binding [default: the card's first one this client implements]",
        )

    card = commands.add_parser(
        "card", help="show an A2A agent's card", description="Fetch and show an A2A agent's card."
    )
    common(card)
    send = commands.add_parser(
        "send", help="send a message to an A2A agent",
        description="Send a message to an A2A agent; print the task (id, state) or the reply's text.",
    )
    common(send)
    calls(send)
    send.add_argument("text", metavar="TEXT")
    send.add_argument("--data", metavar="FILE.json", default=None, help="add this JSON document as a data part")
    task = commands.add_parser(
        "task", help="get a task from an A2A agent", description="Get a task from an A2A agent."
    )
    common(task)
    calls(task)
    task.add_argument("id", metavar="ID")


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
        type=_seconds,
        default=argparse.SUPPRESS,
        help="how long to wait for an answer [default: 10]",
    )


def build_parser() -> argparse.ArgumentParser:
    """The C{beacon} argument parser."""
    parser = argparse.ArgumentParser(
        prog="beacon", description="Beacon: an A2A 1.0 front door for a human-read inbox."
    )
    parser.add_argument("--version", action="version", version=f"beacon {__version__}")
    commands = parser.add_subparsers(dest="area", metavar="COMMAND", required=True)
    review = commands.add_parser(
        "review",
        help="read and decide on submissions (through the operator socket)",
        description="Read and decide on submissions through Beacon's operator door.",
    )
    _connection_options(review)
    _peer_parsers(commands)
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
        "--limit", metavar="N", type=_positive, default=DEFAULT_LIMIT, help=f"show at most N [default: {DEFAULT_LIMIT}]"
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

    db = commands.add_parser(
        "db",
        help="the submission store's schema (migrate before deploying)",
        description="Show or apply the submission store's schema migrations.",
    )
    steps = db.add_subparsers(dest="command", metavar="ACTION", required=True)
    for name, help in (
        ("status", "show the schema version (exit 1 when behind or newer than this Beacon)"),
        ("upgrade", "apply every pending migration, as start-up would"),
    ):
        step = steps.add_parser(name, help=help, description=help)
        step.add_argument("--store", metavar="URL", help="sqlite:///PATH or postgresql://user@host:port/db")
        step.add_argument("--config", metavar="FILE", help="a configuration file, as for twistd beacon")
        step.add_argument("--data", metavar="DIR", help="the data directory (for the default SQLite store)")
    return parser


def database(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """
    Run C{beacon db status|upgrade}: the store is named as C{twistd beacon}
    names it (C{--store}, else C{--config}'s C{[store] url}, else the SQLite
    file in C{--data} or C{./beacon-data}).

    @return: The exit code.
    """
    from beacon.config import ConfigError, build_config, read_file
    from beacon.service import store_url
    from beacon.store import StoreError, schema_status, status, upgrade

    try:
        config = build_config(
            read_file(args.config) if args.config else {},
            data_dir=args.data,
            store_url=args.store,
        )
        url = store_url(config)
        if args.command == "upgrade":
            out.write(inert(upgrade(url)) + "\n")
            return 0
        out.write(inert(status(url)) + "\n")
        found = schema_status(url)
        return 0 if found.current == found.supported else 1
    except (ConfigError, StoreError) as e:
        err.write(f"beacon: {inert(str(e))}\n")
        return 1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """
    Parse and check the command line.

    @raise SystemExit: A usage error (code 2), or C{--help} (code 0).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    given = [
        name
        for name in ("socket", "data", "discovery")
        if args.area == "review" and hasattr(args, name)
    ]
    if len(given) > 1:
        parser.error(f"give one of --socket, --data and --discovery, not {' and '.join('--' + g for g in given)}")
    if args.area in _PEER_COMMANDS:
        args.command = args.area
        if getattr(args, "binding", None) == "unix" and args.socket is None and not args.url.startswith("unix://"):
            parser.error("--binding unix needs --socket PATH (or a unix:///path URL)")
        args.data_document = None
        if getattr(args, "data", None) is not None:
            try:
                args.data_document = _read_data(args.data)
            except ValueError as e:
                parser.error(f"--data: {e}")
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
        agent commands).
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
        return database(args, sys.stdout, sys.stderr)

    from twisted.internet import reactor
    from twisted.internet.task import react

    def start(reactor: Any) -> Deferred[None]:
        async def command() -> None:
            try:
                if args.area in _PEER_COMMANDS:
                    code = await run_peer(reactor, args, sys.stdout, sys.stderr)
                else:
                    code = await run(reactor, args, sys.stdout, sys.stderr)
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
        return 0 if args.command == "follow" else 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
