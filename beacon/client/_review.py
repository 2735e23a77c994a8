"""
What every reader of Beacon's review extension needs to find submissions
(the C{beacon review} commands, the web console): walking every page of
C{beacon.review.List} for a L{TaskQuery}, and turning a short id (a unique
prefix of at least six characters) into the whole one. The query's values
are read from text by L{beacon.protocol.query} (L{read_text
<beacon.protocol.query.read_text>}).

Pure: no command line, no web; errors are L{FilterError} and L{LookupFailed},
each a one-line message (server text in it made inert).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from beacon.client._operator import OperatorClient
from beacon.protocol import format_timestamp
from beacon.protocol.query import MIN_ID_PREFIX, FilterError, TaskQuery, parse_moment
from beacon.text import inert_text

#: The fewest characters a short id may have.
MIN_PREFIX = MIN_ID_PREFIX
#: How long a whole receipt id is.
ID_LENGTH = 36
#: The largest page C{beacon.review.List} serves.
MAX_PAGE = 100
#: How many candidates an ambiguous short id lists.
MAX_CANDIDATES = 10

_ID_DIGITS = re.compile(r"\A[0-9a-v]+\Z")


class LookupFailed(Exception):
    """
    A short id names no submission, or several (C{ambiguous}); one line.
    """

    def __init__(self, message: str, *, ambiguous: bool = False) -> None:
        super().__init__(message)
        self.ambiguous = ambiguous


def _shown(text: str) -> str:
    return inert_text(text)


def rfc3339(moment: datetime) -> str:
    """An aware datetime as the RFC 3339 UTC text Beacon reads."""
    utc = moment.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_before(text: str) -> str:
    """
    A "decided before" bound (C{beacon.review.Purge}'s C{decidedBefore}),
    as RFC 3339 text: a date is the start of that day.

    @raise FilterError: It is no ISO 8601 date or time.
    """
    return format_timestamp(parse_moment(text, end_of_day=False))


async def every_task(
    client: OperatorClient,
    query: TaskQuery,
    *,
    history: bool = True,
) -> AsyncIterator[dict[str, Any]]:
    """
    Every submission C{query} matches, newest first in its order, one page
    (at most L{MAX_PAGE}) in memory at a time.

    @param history: Whether each task carries its message (its content).
    """
    token: str | None = None
    while True:
        page = await client.review_list(
            query,
            page_size=MAX_PAGE,
            page_token=token,
            history_length=None if history else 0,
            include_total=False,
        )
        for task in page["tasks"]:
            yield task
        token = page.get("nextPageToken") or None
        if token is None or not page["tasks"]:
            return


def is_short(text: str) -> bool:
    """Whether C{text} is a short id (a prefix to look up), not a whole id."""
    return len(text) < ID_LENGTH and bool(_ID_DIGITS.match(text.lower()))


async def resolve(client: OperatorClient, text: str) -> str:
    """
    The whole id C{text} names: itself when it is a whole id (or no id of
    Beacon's form), else the one submission whose id starts with it.

    @raise FilterError: A short id of fewer than L{MIN_PREFIX} characters.
    @raise LookupFailed: No submission, or several, start with it.
    """
    if not is_short(text):
        return text
    prefix = text.lower()
    if len(prefix) < MIN_PREFIX:
        raise FilterError(
            f"{_shown(text)!r} is too short: give at least {MIN_PREFIX} characters of an id"
        )
    page = await client.review_list(
        TaskQuery(id_prefix=prefix),
        page_size=MAX_CANDIDATES + 1,
        history_length=0,
        include_total=True,
    )
    tasks = page["tasks"]
    if not tasks:
        raise LookupFailed(f"no submission with id {_shown(text)}")
    if len(tasks) == 1:
        found = tasks[0].get("id")
        if isinstance(found, str):
            return found
    total = page.get("totalSize", len(tasks))
    shown = [_shown(str(t.get("id"))) for t in tasks[:MAX_CANDIDATES]]
    more = f" and {total - len(shown)} more" if isinstance(total, int) and total > len(shown) else ""
    raise LookupFailed(
        f"{_shown(text)} is ambiguous: it starts {total} ids: {', '.join(shown)}{more}",
        ambiguous=True,
    )
