"""
What the C{beacon review} commands that find submissions share: the filter
options (C{--status}, C{--door}, C{--since}, C{--until}, C{--search},
C{--sort}), their value types and their one-line errors, walking every page
of C{beacon.review.List}, and turning a short id (a unique prefix of at
least six characters) into the whole one.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

from beacon.cli._text import STATE_WORDS, inert
from beacon.client import OperatorClient
from beacon.protocol import DOORS, STATE_UNSPECIFIED, TASK_STATES

#: The fewest characters a short id may have.
MIN_PREFIX = 6
#: How long a whole receipt id is.
ID_LENGTH = 36
#: How many characters of an id C{review list} shows by default.
SHORT_ID = 12
#: The largest page C{beacon.review.List} serves.
MAX_PAGE = 100
#: How many candidates an ambiguous short id lists.
MAX_CANDIDATES = 10

#: Every TaskState a C{--status} filter may name: all but proto3's zero
#: value, which filters nothing.
FILTER_STATES = frozenset(TASK_STATES) - {STATE_UNSPECIFIED}
_WORD_STATES = {word: state for state, word in STATE_WORDS.items()}
_ID_DIGITS = re.compile(r"\A[0-9a-v]+\Z")
_DATE = re.compile(r"\A\d{4}-\d\d-\d\d\Z")


class UsageError(Exception):
    """
    A value the command line gave cannot be used (exit code 2); the message
    is one line, without C{beacon:}.
    """


class LookupFailed(Exception):
    """
    A short id names no submission, or several (exit code 1); the message
    is one line, without C{beacon:}.
    """


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
        f"{inert(text)!r} is not a task state (submitted, accepted, rejected or TASK_STATE_*)"
    )


def parse_door(text: str) -> str:
    """
    A C{--door} value: one of L{DOORS}.

    @raise argparse.ArgumentTypeError: It names no door.
    """
    door = text.strip().lower()
    if door in DOORS:
        return door
    raise argparse.ArgumentTypeError(
        f"{inert(text)!r} is not a door ({', '.join(DOORS)})"
    )


def parse_search(text: str) -> str:
    """
    A C{--search} value: text holding at least one word.

    @raise argparse.ArgumentTypeError: It holds no word.
    """
    if not re.search(r"\w", text):
        raise argparse.ArgumentTypeError("the search holds no word to look for")
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


def _instant(end_of_day: bool) -> Any:
    def parse(text: str) -> str:
        try:
            moment = _moment(text, end_of_day=end_of_day)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{inert(text)!r} is not an ISO 8601 date or time"
                " (2026-12-01, 2026-12-01T09:30 or 2026-12-01T09:30:00+01:00)"
            ) from None
        if not 1970 <= moment.year <= 9999:
            raise argparse.ArgumentTypeError(f"{inert(text)!r} is out of range")
        return rfc3339(moment)

    return parse


def rfc3339(moment: datetime) -> str:
    """An aware datetime as the RFC 3339 UTC text Beacon reads."""
    utc = moment.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


#: C{--since}: a date is the start of that day.
parse_since = _instant(end_of_day=False)
#: C{--until}: a date is the end of that day (the start of the next).
parse_until = _instant(end_of_day=True)
#: C{--decided-before}: a date is the start of that day.
parse_before = _instant(end_of_day=False)


def add_filter_options(parser: argparse.ArgumentParser, *, sort: bool = True) -> None:
    """Add the filters C{review list}, C{export} and C{--matching} share."""
    group = parser.add_argument_group("filters (they combine)")
    group.add_argument(
        "--status",
        metavar="S",
        type=parse_state,
        default=None,
        help="only submissions in this state: submitted, accepted, rejected or TASK_STATE_*",
    )
    group.add_argument(
        "--door",
        metavar="DOOR",
        type=parse_door,
        default=None,
        help=f"only submissions that came through this door ({', '.join(DOORS)})",
    )
    group.add_argument(
        "--since",
        metavar="WHEN",
        type=parse_since,
        default=None,
        help="only submissions received at or after WHEN (ISO 8601 date or time; UTC unless it says)",
    )
    group.add_argument(
        "--until",
        metavar="WHEN",
        type=parse_until,
        default=None,
        help="only submissions received before WHEN (a date alone includes that day)",
    )
    group.add_argument(
        "--search",
        metavar="TEXT",
        type=parse_search,
        default=None,
        help="only submissions holding every word of TEXT (text, from, subject, body)",
    )
    if sort:
        group.add_argument(
            "--sort",
            choices=("received", "updated"),
            default="received",
            help="newest received first (default), or newest decision or receipt first",
        )


def filters_of(args: argparse.Namespace) -> dict[str, Any]:
    """The C{beacon.review.List} params the filter options give."""
    return {
        "status": args.status,
        "door": args.door,
        "since": args.since,
        "until": args.until,
        "search": args.search,
    }


def has_filter(args: argparse.Namespace, *, besides_status: bool = False) -> bool:
    """Whether any filter option (other than C{--status}, if so asked) was given."""
    return any(
        value is not None
        for name, value in filters_of(args).items()
        if not (besides_status and name == "status")
    )


def check_filters(args: argparse.Namespace) -> None:
    """
    Refuse filters that contradict each other.

    @raise UsageError: C{--until} is not after C{--since}.
    """
    if args.since is not None and args.until is not None and args.until <= args.since:
        raise UsageError("--until must be later than --since")


async def every_task(
    client: OperatorClient,
    filters: dict[str, Any],
    *,
    sort: str = "received",
    history: bool = True,
) -> AsyncIterator[dict[str, Any]]:
    """
    Every submission the filters match, newest first, one page (at most
    L{MAX_PAGE}) in memory at a time.

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

    @raise UsageError: A short id of fewer than L{MIN_PREFIX} characters.
    @raise LookupFailed: No submission, or several, start with it.
    """
    if not is_short(text):
        return text
    prefix = text.lower()
    if len(prefix) < MIN_PREFIX:
        raise UsageError(
            f"{inert(text)!r} is too short: give at least {MIN_PREFIX} characters of an id"
        )
    page = await client.review_list(
        id_prefix=prefix,
        page_size=MAX_CANDIDATES + 1,
        history_length=0,
        include_total=True,
    )
    tasks = page["tasks"]
    if not tasks:
        raise LookupFailed(f"no submission with id {inert(text)}")
    if len(tasks) == 1:
        found = tasks[0].get("id")
        if isinstance(found, str):
            return found
    total = page.get("totalSize", len(tasks))
    shown = [inert(t.get("id")) for t in tasks[:MAX_CANDIDATES]]
    more = f" and {total - len(shown)} more" if isinstance(total, int) and total > len(shown) else ""
    raise LookupFailed(
        f"{inert(text)} is ambiguous: it starts {total} ids: {', '.join(shown)}{more}"
    )
