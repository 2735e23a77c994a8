"""
What the C{beacon} commands print: server-supplied values made inert and
laid out as terminal lines (the review table, C{show}'s fields, C{follow}'s
event lines, an agent's card and task), read defensively, since a broken
answer must not crash the CLI.

Everything printed that came from the server goes through L{inert} or
L{json_text} first: control characters (ESC and the rest of C0 and C1),
Unicode format characters (bidi overrides, zero-width characters), line and
paragraph separators and lone surrogates are written as visible escapes, so
a submission cannot drive the terminal. Only a message body keeps its
newlines.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import IO, Any

from beacon.client import AgentCard, RPCError
from beacon.protocol import STATE_COMPLETED
from beacon.text import inert_text

#: The review commands' own words for a state, where they differ from its
#: name (C{TASK_STATE_SUBMITTED} reads as C{submitted}): accepting a
#: submission completes its task.
STATE_WORDS = {STATE_COMPLETED: "accepted"}

_TIMESTAMP = re.compile(r"\A(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?Z\Z")


class Output:
    """One command's output streams."""

    def __init__(self, out: IO[str], err: IO[str]) -> None:
        self.out = out
        self.err = err

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def flush(self) -> None:
        self.out.flush()


# Making server text inert.


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
    return inert_text(text, keep_lines=newlines)


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


# Reading answers (defensively: a broken answer must not crash the CLI).


def dig(value: Any, *path: str | int) -> Any:
    """
    What C{path} (keys and list indexes) leads to in the JSON C{value}, or
    None where it leads nowhere.
    """
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
        if state in STATE_WORDS:
            return STATE_WORDS[state]
        if state.startswith("TASK_STATE_"):
            return inert(state[len("TASK_STATE_") :].lower().replace("_", "-"))
    return inert(state)


def _submitted_part(task: Any) -> Any:
    return dig(task, "history", 0, "parts", 0)


def summary(task: Any) -> str:
    """
    A task's subject, or the first non-empty line of its text, or that its
    content was purged.
    """
    if dig(task, "metadata", "purgedAt") is not None:
        return "(content purged)"
    part = _submitted_part(task)
    subject = dig(part, "data", "subject")
    if isinstance(subject, str):
        return inert(" ".join(subject.split()))
    text = dig(part, "text")
    if isinstance(text, str):
        for line in text.splitlines():
            if line.strip():
                return inert(" ".join(line.split()))
    return ""


def sender(task: Any) -> str:
    """
    Who a structured submission says it is from (its C{from.name}, and
    C{from.operator} if given), as C{claims to be Ada \u00b7 Example Lab}:
    the sender's own words, since Beacon records no credential's name with
    a submission; C{""} for any other submission.
    """
    if dig(task, "metadata", "purgedAt") is not None:
        return ""
    data = dig(_submitted_part(task), "data")
    if not isinstance(data, dict):
        return ""
    words = [
        inert(" ".join(value.split()))
        for value in (dig(data, "from", "name"), dig(data, "from", "operator"))
        if isinstance(value, str) and value.strip()
    ]
    return "claims to be " + " \u00b7 ".join(words) if words else ""


def heading(task: Any) -> str:
    """
    A row's heading in C{review list}: L{summary} (the subject, or a text's
    first line), then who a structured submission claims to be from.
    """
    claim = sender(task)
    return f"{summary(task)} \u2014 {claim}" if claim else summary(task)


def decision_note(status: Any) -> Any:
    """
    The note of the decision in a TaskStatus, or None when the decision has
    no note (its status message then only says accepted or rejected).
    """
    metadata = dig(status, "message", "metadata")
    if isinstance(metadata, dict) and any(
        dig(value, "hasNote") is True for value in metadata.values()
    ):
        return dig(status, "message", "parts", 0, "text")
    return None


def violations(error: RPCError) -> str:
    """The field violations of an C{InvalidParams} error, on one line."""
    found = []
    for detail in error.data if isinstance(error.data, list) else []:
        for violation in dig(detail, "fieldViolations") or []:
            field = dig(violation, "field")
            description = dig(violation, "description")
            if field is not None:
                found.append(f"{inert(field)} {inert(description)}")
    return "; ".join(found)


# The review commands' lines.


def list_table(tasks: list[Any], columns: int, id_width: int | None = None) -> list[str]:
    """
    The lines of C{review list}'s table, fitted to C{columns}: the last
    column (C{SUBJECT}) is each row's L{heading}.

    @param id_width: Show this many characters of each id (a unique
        prefix the other commands take), or whole ids (L{None}).
    """
    header = ["ID", "STATE", "RECEIVED", "DOOR", "KIND", "SUBJECT"]
    rows = [
        [
            inert(dig(t, "id"))[:id_width],
            state_word(dig(t, "status", "state")),
            when(dig(t, "metadata", "receipt", "receivedAt")),
            truncate(inert(dig(t, "metadata", "door")), 12),
            truncate(inert(dig(t, "metadata", "kind")), 10),
            heading(t),
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


def show_lines(task: Any) -> list[str]:
    """The lines of C{review show}: every field, then the message."""
    fields: list[tuple[str, str]] = []
    status = dig(task, "status")
    fields.append(("id", inert(dig(task, "id"))))
    state = dig(status, "state")
    fields.append(
        ("state", f"{state_word(state)} ({inert(state)}) since {when(dig(status, 'timestamp'))}")
    )
    note = decision_note(status)
    if note is not None:
        fields.append(("note", inert(note)))
    receipt = dig(task, "metadata", "receipt")
    fields.append(("received", when(dig(receipt, "receivedAt"))))
    fields.append(("door", inert(dig(task, "metadata", "door"))))
    fields.append(("source", inert(dig(task, "metadata", "source"))))
    fields.append(("kind", inert(dig(task, "metadata", "kind"))))
    fields.append(("sha256", inert(dig(receipt, "sha256"))))
    fields.append(("context", inert(dig(task, "contextId"))))
    body: str | None = None
    part = _submitted_part(task)
    data = dig(part, "data")
    if isinstance(data, dict):
        sender = dig(data, "from")
        name = inert(dig(sender, "name"))
        extras = [
            f"{label} {inert(dig(sender, key))}"
            for label, key in (("agent", "agent"), ("operator", "operator"))
            if dig(sender, key) is not None
        ]
        fields.append(("from", name + (f" ({', '.join(extras)})" if extras else "")))
        fields.append(("subject", inert(dig(data, "subject"))))
        if dig(data, "language") is not None:
            fields.append(("language", inert(dig(data, "language"))))
        contacts = dig(data, "contact")
        for index, contact in enumerate(contacts if isinstance(contacts, list) else []):
            fields.append(
                (
                    "contact" if index == 0 else "",
                    f"{inert(dig(contact, 'kind'))}: {inert(dig(contact, 'value'))}",
                )
            )
        body = dig(data, "body")
        if not isinstance(body, str):
            body = None
    elif isinstance(dig(part, "text"), str):
        body = dig(part, "text")
    elif part is not None:
        fields.append(("message", "(a part this command does not show; see --json)"))
    purged = dig(task, "metadata", "purgedAt")
    if purged is not None:
        fields.append(("content", f"purged {when(purged)} (receipt, times and state kept)"))
    label_width = max(len(label) for label, _ in fields) + 2
    lines = [pad(f"{label}:" if label else "", label_width) + value for label, value in fields]
    if body is not None:
        lines.append("")
        lines.extend(inert(body, newlines=True).split("\n"))
    return lines


def event_line(event: Any, subject: str = "") -> str:
    """One line for one C{beacon.inbox.Follow} event."""
    task = dig(event, "task")
    if isinstance(task, dict):
        status = dig(task, "status")
        words = [
            when(dig(status, "timestamp")),
            "new",
            inert(dig(task, "id")),
            inert(dig(task, "metadata", "door")),
            inert(dig(task, "metadata", "kind")),
        ]
        line = "  ".join(words)
        return f"{line}  {subject}" if subject else line
    update = dig(event, "statusUpdate")
    if isinstance(update, dict):
        status = dig(update, "status")
        words = [
            when(dig(status, "timestamp")),
            state_word(dig(status, "state")),
            inert(dig(update, "taskId")),
        ]
        note = decision_note(status)
        if note is not None:
            words.append("note: " + inert(note))
        return "  ".join(words)
    return "event  " + inert(event)


# The peer commands' lines.


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
    lines = [f"task {inert(dig(task, 'id'))}", f"state {inert(dig(task, 'status', 'state'))}"]
    timestamp = dig(task, "status", "timestamp")
    if timestamp:
        lines.append(f"updated {when(timestamp)}")
    if dig(task, "contextId"):
        lines.append(f"context {inert(dig(task, 'contextId'))}")
    parts = dig(task, "status", "message", "parts")
    for part in parts if isinstance(parts, list) else []:
        if isinstance(dig(part, "text"), str):
            lines.append(inert(part["text"], newlines=True))
    for artifact in dig(task, "artifacts") or []:
        for part in dig(artifact, "parts") or []:
            if isinstance(dig(part, "text"), str):
                lines.append(inert(part["text"], newlines=True))
    return lines
