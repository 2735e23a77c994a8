"""
What every reader of Beacon's review extension needs to find submissions
(the C{beacon review} commands, the web console): the filter values of
C{beacon.review.List} read from text, walking every page of it, and turning
a short id (a unique prefix of at least six characters) into the whole one.

Pure: no command line, no web; errors are L{FilterError} and L{LookupFailed},
each a one-line message (server text in it made inert).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from beacon.client._operator import OperatorClient
from beacon.protocol import DOORS, STATE_COMPLETED, STATE_UNSPECIFIED, TASK_STATES
from beacon.text import inert_text

#: The fewest characters a short id may have.
MIN_PREFIX = 6
#: How long a whole receipt id is.
ID_LENGTH = 36
#: The largest page C{beacon.review.List} serves.
MAX_PAGE = 100
#: How many candidates an ambiguous short id lists.
MAX_CANDIDATES = 10

#: Every TaskState a status filter may name: all but proto3's zero value,
#: which filters nothing.
FILTER_STATES = frozenset(TASK_STATES) - {STATE_UNSPECIFIED}
#: The words for states whose names say something else to a reader.
_WORD_STATES = {"accepted": STATE_COMPLETED}
_ID_DIGITS = re.compile(r"\A[0-9a-v]+\Z")
_DATE = re.compile(r"\A\d{4}-\d\d-\d\d\Z")


class FilterError(ValueError):
    """A filter value (or a short id) that cannot be used; one line."""


class LookupFailed(Exception):
    """
    A short id names no submission, or several (C{ambiguous}); one line.
    """

    def __init__(self, message: str, *, ambiguous: bool = False) -> None:
        super().__init__(message)
        self.ambiguous = ambiguous


def _shown(text: str) -> str:
    return inert_text(text)


def parse_state(text: str) -> str:
    """
    A status filter as a TaskState name: C{submitted}, C{accepted} (or
    C{completed}), C{rejected}, or any C{TASK_STATE_*} name.

    @raise FilterError: It names no state.
    """
    word = text.strip()
    if word.lower() in _WORD_STATES:
        return _WORD_STATES[word.lower()]
    name = word.upper().replace("-", "_")
    for candidate in (name, "TASK_STATE_" + name):
        if candidate in FILTER_STATES:
            return candidate
    raise FilterError(
        f"{_shown(text)!r} is not a task state (submitted, accepted, rejected or TASK_STATE_*)"
    )


def parse_door(text: str) -> str:
    """
    A door filter: one of L{DOORS}.

    @raise FilterError: It names no door.
    """
    door = text.strip().lower()
    if door in DOORS:
        return door
    raise FilterError(f"{_shown(text)!r} is not a door ({', '.join(DOORS)})")


def parse_search(text: str) -> str:
    """
    A search: text holding at least one word.

    @raise FilterError: It holds no word.
    """
    if not re.search(r"\w", text):
        raise FilterError("the search holds no word to look for")
    return text


def _moment(text: str, *, end_of_day: bool) -> datetime:
    """
    An ISO 8601 date or date and time as an aware UTC datetime. A date
    alone is the start of that day, or with C{end_of_day} the start of the
    next; a time without an offset is UTC (as Beacon shows times).
    """
    value = text.strip()
    if _DATE.match(value):
        day = datetime.fromisoformat(value).replace(tzinfo=timezone.utc)
        return day + timedelta(days=1) if end_of_day else day
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    moment = datetime.fromisoformat(value.replace(" ", "T", 1))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def _instant(end_of_day: bool) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            moment = _moment(text, end_of_day=end_of_day)
        except (ValueError, OverflowError):
            raise FilterError(
                f"{_shown(text)!r} is not an ISO 8601 date or time"
                " (2026-12-01, 2026-12-01T09:30 or 2026-12-01T09:30:00+01:00)"
            ) from None
        if not 1970 <= moment.year <= 9999:
            raise FilterError(f"{_shown(text)!r} is out of range")
        return rfc3339(moment)

    return parse


def rfc3339(moment: datetime) -> str:
    """An aware datetime as the RFC 3339 UTC text Beacon reads."""
    utc = moment.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


#: A "since" filter: a date is the start of that day.
parse_since = _instant(end_of_day=False)
#: An "until" filter: a date is the end of that day (the start of the next).
parse_until = _instant(end_of_day=True)
#: A "decided before" bound: a date is the start of that day.
parse_before = _instant(end_of_day=False)


def check_range(since: str | None, until: str | None, names: tuple[str, str]) -> None:
    """
    Refuse an empty time range (C{names}: how the two bounds are called).

    @raise FilterError: C{until} is not after C{since}.
    """
    if since is not None and until is not None and until <= since:
        raise FilterError(f"{names[1]} must be later than {names[0]}")


async def every_task(
    client: OperatorClient,
    filters: dict[str, Any],
    *,
    sort: str = "received",
    history: bool = True,
) -> AsyncIterator[dict[str, Any]]:
    """
    Every submission the filters (C{beacon.review.List} params) match,
    newest first, one page (at most L{MAX_PAGE}) in memory at a time.

    @param history: Whether each task carries its message (its content).
    """
    token: str | None = None
    while True:
        page = await client.review_list(
            sort=sort,
            page_size=MAX_PAGE,
            page_token=token,
            history_length=None if history else 0,
            include_total=False,
            **filters,
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
        id_prefix=prefix,
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
