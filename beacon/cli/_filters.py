"""
What the C{beacon review} commands that find submissions share: the
options of a L{TaskQuery} (one for each of its keys, named by
L{beacon.protocol.query.QUERY_KEYS}: C{--status}, C{--door}, C{--since},
C{--until}, C{--search}, C{--id-prefix}, C{--sort}), their one-line errors,
and turning a short id (a unique prefix of at least six characters) into the
whole one.

The values are read by L{beacon.protocol.query}, pages walked and short ids
looked up by L{beacon.client} (L{beacon.client.resolve},
L{beacon.client.every_task}), which the web console shares; this module
makes their errors the command line's.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from beacon.client import (
    MAX_PAGE,
    FilterError,
    LookupFailed,
    OperatorClient,
    every_task,
)
from beacon.client import parse_before as _parse_before
from beacon.client import resolve as _resolve
from beacon.protocol.query import (
    FILTER_KEYS,
    FILTER_STATES,
    QUERY_KEYS,
    TaskQuery,
    check_range,
)
from beacon.protocol.query import parse_state as _parse_state

#: How many characters of an id C{review list} shows by default.
SHORT_ID = 12

__all__ = [
    "FILTER_STATES",
    "MAX_PAGE",
    "SHORT_ID",
    "LookupFailed",
    "UsageError",
    "add_filter_options",
    "every_task",
    "filter_options",
    "has_filter",
    "parse_before",
    "parse_state",
    "query_of",
    "resolve",
]


class UsageError(Exception):
    """
    A value the command line gave cannot be used (exit code 2); the message
    is one line, without C{beacon:}.
    """


def _option_type(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """C{parse} as an argparse type: its L{FilterError} is argparse's error."""

    def read(text: str) -> Any:
        try:
            return parse(text)
        except FilterError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    read.__name__ = name
    read.__doc__ = parse.__doc__
    return read


parse_state = _option_type(_parse_state, "parse_state")
#: C{--decided-before}: a date is the start of that day.
parse_before = _option_type(_parse_before, "parse_before")


def add_filter_options(parser: argparse.ArgumentParser, *, sort: bool = True) -> None:
    """
    Add the options of a L{TaskQuery} (L{QUERY_KEYS <beacon.protocol.query.QUERY_KEYS>}:
    each key's option, its value read as the console reads its query key's)
    that C{review list}, C{export} and C{--matching} share; C{sort}:
    whether to add C{--sort}.
    """
    group = parser.add_argument_group("filters (they combine)")
    for key in QUERY_KEYS:
        if not key.filters and not sort:
            continue
        group.add_argument(
            key.option,
            dest=key.name,
            metavar=key.metavar,
            type=_option_type(key.read_text, key.read_text.__name__),
            default=None,
            help=key.help,
        )


def query_of(args: argparse.Namespace) -> TaskQuery:
    """
    The L{TaskQuery} the options give (the default order without
    C{--sort}), its range checked.

    @raise UsageError: C{--until} is not after C{--since}.
    """
    query = TaskQuery(
        **{
            key.name: getattr(args, key.name)
            for key in QUERY_KEYS
            if getattr(args, key.name, None) is not None
        }
    )
    try:
        check_range(query, lambda key: key.option)
    except FilterError as e:
        raise UsageError(str(e)) from None
    return query


def has_filter(args: argparse.Namespace, *, besides_status: bool = False) -> bool:
    """Whether any filter option (other than C{--status}, if so asked) was given."""
    return any(
        getattr(args, key.name, None) is not None
        for key in FILTER_KEYS
        if not (besides_status and key.name == "status")
    )


def filter_options() -> str:
    """The filter options, as a usage message lists them."""
    return ", ".join(key.option for key in FILTER_KEYS)


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
