"""
What the C{beacon review} commands that find submissions share: the filter
options (C{--status}, C{--door}, C{--since}, C{--until}, C{--search},
C{--sort}), their value types and their one-line errors, and turning a
short id (a unique prefix of at least six characters) into the whole one.

The values are read, pages walked and short ids looked up by
L{beacon.client} (L{beacon.client.resolve}, L{beacon.client.every_task}),
which the web console shares; this module makes their errors the command
line's.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from beacon.client import (
    FILTER_STATES,
    MAX_PAGE,
    FilterError,
    LookupFailed,
    OperatorClient,
    check_range,
    every_task,
)
from beacon.client import parse_before as _parse_before
from beacon.client import parse_door as _parse_door
from beacon.client import parse_search as _parse_search
from beacon.client import parse_since as _parse_since
from beacon.client import parse_state as _parse_state
from beacon.client import parse_until as _parse_until
from beacon.client import resolve as _resolve
from beacon.protocol import DOORS

#: How many characters of an id C{review list} shows by default.
SHORT_ID = 12

__all__ = [
    "FILTER_STATES",
    "MAX_PAGE",
    "SHORT_ID",
    "LookupFailed",
    "UsageError",
    "add_filter_options",
    "check_filters",
    "every_task",
    "filters_of",
    "has_filter",
    "parse_before",
    "parse_state",
    "resolve",
]


class UsageError(Exception):
    """
    A value the command line gave cannot be used (exit code 2); the message
    is one line, without C{beacon:}.
    """


def _option_type(parse: Callable[[str], str], name: str) -> Callable[[str], str]:
    """C{parse} as an argparse type: its L{FilterError} is argparse's error."""

    def read(text: str) -> str:
        try:
            return parse(text)
        except FilterError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    read.__name__ = name
    read.__doc__ = parse.__doc__
    return read


parse_state = _option_type(_parse_state, "parse_state")
parse_door = _option_type(_parse_door, "parse_door")
parse_search = _option_type(_parse_search, "parse_search")
#: C{--since}: a date is the start of that day.
parse_since = _option_type(_parse_since, "parse_since")
#: C{--until}: a date is the end of that day (the start of the next).
parse_until = _option_type(_parse_until, "parse_until")
#: C{--decided-before}: a date is the start of that day.
parse_before = _option_type(_parse_before, "parse_before")


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
    try:
        check_range(args.since, args.until, ("--since", "--until"))
    except FilterError as e:
        raise UsageError(str(e)) from None


async def resolve(client: OperatorClient, text: str) -> str:
    """
    The whole id C{text} names (see L{beacon.client.resolve}).

    @raise UsageError: A short id of fewer than six characters.
    @raise LookupFailed: No submission, or several, start with it.
    """
    try:
        return await _resolve(client, text)
    except FilterError as e:
        raise UsageError(str(e)) from None
