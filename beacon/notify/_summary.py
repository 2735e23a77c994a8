"""
What a notification says: the summary of one batch of submissions, the one
model every channel renders (the command gets it as JSON, the mail as a
digest), and the escaping that keeps submitted text inert wherever it is
shown.

The summary (JSON, UTF-8, on the command's standard input)::

    {"count": 2,
     "pending": 0,
     "ids": ["<id>", "<id>"],
     "submissions": [
        {"id": "<id>", "received": "2026-12-01T18:59:29.123Z",
         "door": "native", "kind": "text", "size": 27},
        {"id": "<id>", "received": "2026-12-01T18:59:30.004Z",
         "door": "jsonrpc", "kind": "structured", "size": 211,
         "subject": "Dataset licence question"}]}

C{count} is how many submissions this notification carries (the length of
C{ids} and C{submissions}, oldest first); C{pending} how many more were
waiting when it was made (they come in the next notification); C{size} the
bytes of the stored canonical content; C{subject} is present for structured
submissions only; C{content} (the stored content document, C{{"text": ...}}
or C{{"message": ...}}) only when C{include_content} is on.
"""

from __future__ import annotations

import json
from typing import Any

from beacon.protocol import format_timestamp
from beacon.text import inert_text
from beacon.store import NotificationBatch, StoredTask

def inert(text: str, *, keep_lines: bool = False) -> str:
    """
    C{text} made inert (see L{beacon.text.inert_text}): one line, unless
    C{keep_lines}.
    """
    return inert_text(text, keep_lines=keep_lines)


def content_document(task: StoredTask) -> dict[str, Any] | None:
    """
    The stored content document of C{task} (C{{"text": ...}} or
    C{{"message": ...}}), or None when there is none to read (purged).
    """
    if not task.submission.content:
        return None
    try:
        document = json.loads(task.submission.content)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def subject_of(document: dict[str, Any] | None) -> str | None:
    """The structured message's C{subject}, or None."""
    if document is None:
        return None
    message = document.get("message")
    if isinstance(message, dict) and isinstance(message.get("subject"), str):
        subject: str = message["subject"]
        return subject
    return None


def summary_of(batch: NotificationBatch, *, include_content: bool) -> dict[str, Any]:
    """
    The summary of C{batch} (see the module docstring): ids, times, doors,
    kinds, sizes and structured subjects; the content documents only with
    C{include_content}.
    """
    submissions = []
    for task in batch.tasks:
        submission = task.submission
        document = content_document(task)
        entry: dict[str, Any] = {
            "id": submission.id,
            "received": format_timestamp(submission.received_at_ms),
            "door": submission.door,
            "kind": submission.kind,
            "size": len(submission.content),
        }
        subject = subject_of(document)
        if subject is not None:
            entry["subject"] = subject
        if include_content and document is not None:
            entry["content"] = document
        submissions.append(entry)
    return {
        "count": len(submissions),
        "pending": max(0, batch.pending - len(submissions)),
        "ids": [entry["id"] for entry in submissions],
        "submissions": submissions,
    }


def summary_json(summary: dict[str, Any]) -> bytes:
    """The summary as the command reads it: one line of UTF-8 JSON."""
    return (json.dumps(summary, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
        "utf-8"
    )
