"""
C{beacon review export}'s records and their two formats: JSON Lines (one
object per submission, lossless) and CSV (one row per submission, the
structured fields in columns, cells a spreadsheet would run as a formula
defused).

A record holds everything about a submission: id, receipt, door, source,
kind, the content (as stored) and its structured fields, state, decision,
its note and time, and when the content was purged.
"""

from __future__ import annotations

import csv
import json
from typing import IO, Any

from beacon.cli._text import decision_note, dig
from beacon.protocol import STATE_COMPLETED, STATE_REJECTED

#: C{--format} values.
FORMATS = ("jsonl", "csv")

#: The CSV columns, in order.
CSV_COLUMNS = (
    "id",
    "received_at",
    "door",
    "source",
    "kind",
    "state",
    "decision",
    "decided_at",
    "note",
    "purged_at",
    "sha256",
    "from_name",
    "from_agent",
    "from_operator",
    "subject",
    "body",
    "text",
    "message",
)

_DECISIONS = {STATE_COMPLETED: "accept", STATE_REJECTED: "reject"}
# A cell whose first character other than white space is one of these runs
# as a formula in common spreadsheets (some imports trim leading white
# space); so does one that starts with a tab or a carriage return.
_FORMULA_STARTS = ("=", "+", "-", "@")
_CONTROL_STARTS = ("\t", "\r")


def record_of(task: dict[str, Any]) -> dict[str, Any]:
    """
    The export record of an operator Task (as C{beacon.review.List} answers
    it, with its history).
    """
    status = dig(task, "status")
    state = dig(status, "state")
    metadata = dig(task, "metadata")
    receipt = dig(metadata, "receipt")
    decision = _DECISIONS.get(state) if isinstance(state, str) else None
    part = dig(task, "history", 0, "parts", 0)
    content: dict[str, Any] | None = None
    if isinstance(dig(part, "text"), str):
        content = {"text": part["text"]}
    elif isinstance(dig(part, "data"), dict):
        content = {"message": part["data"]}
    return {
        "id": dig(task, "id"),
        "contextId": dig(task, "contextId"),
        "receivedAt": dig(receipt, "receivedAt"),
        "sha256": dig(receipt, "sha256"),
        "door": dig(metadata, "door"),
        "source": dig(metadata, "source"),
        "kind": dig(metadata, "kind"),
        "content": content,
        "state": state,
        "decision": decision,
        "decidedAt": dig(status, "timestamp") if decision else None,
        "note": decision_note(status) if decision else None,
        "purgedAt": dig(metadata, "purgedAt"),
    }


class JSONLinesWriter:
    """One JSON object per line (UTF-8, not ASCII-escaped)."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out

    def write(self, record: dict[str, Any]) -> None:
        self._out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
        self._out.write("\n")

    def close(self) -> None:
        """Nothing follows the last line."""


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if text.startswith(_CONTROL_STARTS) or text.lstrip().startswith(_FORMULA_STARTS):
        # Shown as text, not run: the content is a stranger's.
        return "'" + text
    return text


class CSVWriter:
    """
    RFC 4180 CSV with a header row: L{CSV_COLUMNS}. A structured
    submission's fields fill C{from_*}, C{subject} and C{body}, and the
    whole message is in C{message} as JSON; a text submission fills
    C{text}. A cell whose first character other than white space is C{=},
    C{+}, C{-} or C{@}, or that starts with a tab or a carriage return, is
    written with a leading C{'} (JSON Lines keep every value as it is).
    """

    def __init__(self, out: IO[str]) -> None:
        self._writer = csv.writer(out, lineterminator="\r\n")
        self._writer.writerow(CSV_COLUMNS)

    def write(self, record: dict[str, Any]) -> None:
        content = record.get("content") or {}
        message = content.get("message") if isinstance(content, dict) else None
        sender = dig(message, "from")
        row = {
            "id": record["id"],
            "received_at": record["receivedAt"],
            "door": record["door"],
            "source": record["source"],
            "kind": record["kind"],
            "state": record["state"],
            "decision": record["decision"],
            "decided_at": record["decidedAt"],
            "note": record["note"],
            "purged_at": record["purgedAt"],
            "sha256": record["sha256"],
            "from_name": dig(sender, "name"),
            "from_agent": dig(sender, "agent"),
            "from_operator": dig(sender, "operator"),
            "subject": dig(message, "subject"),
            "body": dig(message, "body"),
            "text": content.get("text") if isinstance(content, dict) else None,
            "message": message,
        }
        self._writer.writerow([_cell(row[column]) for column in CSV_COLUMNS])

    def close(self) -> None:
        """Nothing follows the last row."""


def writer_for(format: str, out: IO[str]) -> JSONLinesWriter | CSVWriter:
    """The writer of C{format} (one of L{FORMATS}) on C{out}."""
    return CSVWriter(out) if format == "csv" else JSONLinesWriter(out)
