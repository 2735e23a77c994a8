"""
The one query of the review surfaces: L{TaskQuery}, which the command line
(C{beacon review}) and the web console make, the operator client sends as
the params of C{beacon.review.List}, the operator policy reads back, and the
store answers (L{beacon.store.ISubmissionStore.list_tasks}).

Each filter is named once, by its field of L{TaskQuery}: the field's name is
the store's; its camelCase is the C{beacon.review.List} param and the
console's query key; its kebab-case, after C{--}, is the command line's
option. L{QUERY_KEYS} is that table, derived from the fields; each field's
metadata (a L{QueryKey}) says how its value is read from the wire and from
text, and which older spellings the console still reads. Adding a filter is
adding a field here, and its condition to each store.

Pure: no I/O, nothing of Beacon above the protocol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping

from beacon.protocol._bindings import DOORS
from beacon.protocol.types import (
    STATE_COMPLETED,
    STATE_UNSPECIFIED,
    TASK_STATES,
    MAX_ID_LENGTH,
    ParamsReader,
    format_timestamp,
)
from beacon.text import inert_text

#: The orders of a query: by status timestamp (the A2A ListTasks order) or
#: by time of receipt (the review surfaces' default).
SORT_UPDATED = "updated"
SORT_RECEIVED = "received"
SORTS = frozenset({SORT_UPDATED, SORT_RECEIVED})

#: The fewest characters an id prefix filter may have.
MIN_ID_PREFIX = 6
#: The longest C{search} the operator API accepts, in characters.
MAX_SEARCH_LENGTH = 1000
#: The longest C{door} filter the operator API accepts, in characters.
MAX_DOOR_LENGTH = 64

#: Every TaskState a status filter may name: all but proto3's zero value,
#: which filters nothing.
FILTER_STATES = frozenset(TASK_STATES) - {STATE_UNSPECIFIED}

_STORED_ID_PREFIX = re.compile("[0-9a-z]+")
#: An id prefix on the wire: receipt ids are lower-case base32hex digits.
_WIRE_ID_PREFIX = re.compile(r"\A[0-9a-v]+\Z")
#: A search must hold at least one word (what full-text search matches).
_WORD = re.compile(r"\w", re.UNICODE)
#: A door filter on the wire: a binding name as C{CallContext.binding}
#: spells it.
_DOOR = re.compile(r"\A[a-z0-9][a-z0-9+._-]*\Z")
_DATE = re.compile(r"\A\d{4}-\d\d-\d\d\Z")
#: The words for states whose names say something else to a reader.
_WORD_STATES = {"accepted": STATE_COMPLETED}


class FilterError(ValueError):
    """A query value, read from text, that cannot be used; one line."""


def check_sort(sort: str) -> None:
    """
    Refuse an order other than L{SORT_UPDATED} or L{SORT_RECEIVED}.

    @raises ValueError: If C{sort} is any other value.
    """
    if sort not in SORTS:
        raise ValueError(
            f"sort is {SORT_UPDATED!r} or {SORT_RECEIVED!r}, not {sort!r}"
        )


def check_id_prefix(id_prefix: str) -> None:
    """
    Refuse an id prefix shorter than L{MIN_ID_PREFIX}, or holding anything
    but digits and lower-case ASCII letters.

    @raises ValueError: If C{id_prefix} is such a prefix.
    """
    if len(id_prefix) < MIN_ID_PREFIX:
        raise ValueError(
            f"an id prefix has at least {MIN_ID_PREFIX} characters,"
            f" not {len(id_prefix)}"
        )
    if _STORED_ID_PREFIX.fullmatch(id_prefix) is None:
        raise ValueError(
            "an id prefix holds digits and lower-case letters a-z only"
        )


# Reading values from the wire (the params of beacon.review.List): each
# records its violations on the reader and returns what it could read.


def _wire_status(reader: ParamsReader, name: str) -> str | None:
    status = reader.enum(name, TASK_STATES)
    return None if status == STATE_UNSPECIFIED else status


def _wire_door(reader: ParamsReader, name: str) -> str | None:
    door = reader.string(name, limit=MAX_DOOR_LENGTH) or None
    if door is not None and not _DOOR.match(door):
        reader.fail(name, "is not a door name")
    return door


def _wire_time(reader: ParamsReader, name: str) -> int | None:
    when = reader.timestamp(name)
    return None if when is None else int(when.timestamp() * 1000)


def _wire_search(reader: ParamsReader, name: str) -> str | None:
    if reader.raw(name) is None:
        return None
    search = reader.string(name, limit=MAX_SEARCH_LENGTH)
    if not _WORD.search(search):
        reader.fail(name, "must hold at least one word")
    return search


def _wire_id_prefix(reader: ParamsReader, name: str) -> str | None:
    id_prefix = reader.string(name, limit=MAX_ID_LENGTH) or None
    if id_prefix is not None and (
        len(id_prefix) < MIN_ID_PREFIX or not _WIRE_ID_PREFIX.match(id_prefix)
    ):
        reader.fail(
            name,
            f"must be at least {MIN_ID_PREFIX} lower-case id characters (0-9, a-v)",
        )
        return None
    return id_prefix


def _wire_sort(reader: ParamsReader, name: str) -> str:
    sort = reader.string(name) or SORT_RECEIVED
    if sort not in SORTS:
        reader.fail(name, f'must be "{SORT_RECEIVED}" or "{SORT_UPDATED}"')
        return SORT_RECEIVED
    return sort


# Reading values from text (the command line's options, the console's
# query string): forgiving, and each error a FilterError of one line.


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
    if not _WORD.search(text):
        raise FilterError("the search holds no word to look for")
    return text


def parse_id_prefix(text: str) -> str:
    """
    An id prefix: at least L{MIN_ID_PREFIX} characters of an id, in either
    case.

    @raise FilterError: It is too short, or holds what no id holds.
    """
    prefix = text.strip().lower()
    if len(prefix) < MIN_ID_PREFIX or not _WIRE_ID_PREFIX.match(prefix):
        raise FilterError(
            f"{_shown(text)!r} is not an id prefix: give at least"
            f" {MIN_ID_PREFIX} characters of an id (0-9, a-v)"
        )
    return prefix


def parse_sort(text: str) -> str:
    """
    An order: C{received} or C{updated}.

    @raise FilterError: It is neither.
    """
    sort = text.strip().lower()
    if sort not in SORTS:
        raise FilterError(f"sort is {SORT_RECEIVED} or {SORT_UPDATED}")
    return sort


def parse_moment(text: str, *, end_of_day: bool) -> int:
    """
    An ISO 8601 date, or date and time, in milliseconds since the epoch. A
    date alone is the start of that day, or with C{end_of_day} the start
    of the next; a time without an offset is UTC (as Beacon shows times).

    @raise FilterError: It is no such date or time, or is before 1970 or
        after 9999.
    """
    try:
        moment = _moment(text, end_of_day=end_of_day)
    except (ValueError, OverflowError):
        raise FilterError(
            f"{_shown(text)!r} is not an ISO 8601 date or time"
            " (2026-12-01, 2026-12-01T09:30 or 2026-12-01T09:30:00+01:00)"
        ) from None
    if not 1970 <= moment.year <= 9999:
        raise FilterError(f"{_shown(text)!r} is out of range")
    return (moment - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _moment(text: str, *, end_of_day: bool) -> datetime:
    value = text.strip()
    if _DATE.match(value):
        day = datetime.fromisoformat(value).replace(tzinfo=timezone.utc)
        return day + timedelta(days=1) if end_of_day else day
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    moment = datetime.fromisoformat(value.replace(" ", "T", 1))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    # Milliseconds, as the wire carries them.
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    return moment.astimezone(timezone.utc)


def parse_since(text: str) -> int:
    """A C{since} bound: a date is the start of that day."""
    return parse_moment(text, end_of_day=False)


def parse_until(text: str) -> int:
    """An C{until} bound: a date is the end of that day (the start of the next)."""
    return parse_moment(text, end_of_day=True)


@dataclass(frozen=True, slots=True)
class QueryKey:
    """
    How the review surfaces name and read one field of L{TaskQuery} (the
    field's metadata; L{QUERY_KEYS} lists them with the field's name).

    @ivar name: The field's name: the store's (C{id_prefix}).
    @ivar param: The C{beacon.review.List} param and the console's query
        key: the name in camelCase (C{idPrefix}).
    @ivar option: The command line's option: C{--} and the name in
        kebab-case (C{--id-prefix}).
    @ivar old_keys: Older console query keys still read (bookmarks, pages
        of an older console).
    @ivar metavar: The option's value, as its help shows it.
    @ivar help: The option's help.
    @ivar read_param: Reads the value from the params of
        C{beacon.review.List} (with the param's name), recording its
        violations on the reader.
    @ivar write_param: The value as the params carry it.
    @ivar read_text: Reads the value from an option's or a query key's
        text.
    @ivar filters: Whether it filters (C{sort} only orders).
    """

    read_param: Callable[[ParamsReader, str], Any]
    write_param: Callable[[Any], Any]
    read_text: Callable[[str], Any]
    metavar: str
    help: str
    old_keys: tuple[str, ...] = ()
    filters: bool = True
    name: str = ""
    param: str = ""
    option: str = ""


def _key(**spec: Any) -> Any:
    """The metadata of a field of L{TaskQuery} the review surfaces carry."""
    return {"key": QueryKey(**spec)}


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskQuery:
    """
    Which submissions, in which order: what C{beacon review list}, the
    console's list, C{beacon.review.List} and A2A ListTasks ask the store
    (L{beacon.store.ISubmissionStore.list_tasks}). The filters combine with
    AND; L{None} filters nothing. Times are milliseconds since the epoch
    (UTC). Paging (page size, cursor, whether to count) travels beside it.

    @ivar status: Only tasks in this TaskState (a C{TASK_STATE_*} name).
    @ivar door: Only tasks received through this door (C{Submission.door}).
    @ivar since: Only tasks received at or after this time.
    @ivar until: Only tasks received strictly before this time.
    @ivar search: Only tasks whose searchable text (text parts; the
        structured C{from}, C{subject} and C{body}) holds every word of it,
        case-insensitively (full-text search: whole words, no stemming;
        purged tasks have no text). A search with no word matches nothing.
    @ivar id_prefix: Only tasks whose id starts with this: at least
        L{MIN_ID_PREFIX} characters, each a digit or a lower-case ASCII
        letter.
    @ivar sort: L{SORT_RECEIVED} (newest receipt first, the default) or
        L{SORT_UPDATED} (newest status timestamp first); ties: newest
        arrival first.
    @ivar context_id: Only the task with this contextId (A2A ListTasks's
        C{contextId}; not a review filter).
    @ivar status_timestamp_after: Only tasks whose status timestamp is at
        or after this time (A2A ListTasks's C{statusTimestampAfter}; not a
        review filter).
    @raise ValueError: An unknown C{sort}, or an C{id_prefix} that
        L{check_id_prefix} refuses.
    """

    status: str | None = field(
        default=None,
        metadata=_key(
            read_param=_wire_status,
            write_param=_same,
            read_text=parse_state,
            metavar="S",
            help="only submissions in this state: submitted, accepted, rejected or TASK_STATE_*",
            old_keys=("state",),
        ),
    )
    door: str | None = field(
        default=None,
        metadata=_key(
            read_param=_wire_door,
            write_param=_same,
            read_text=parse_door,
            metavar="DOOR",
            help=f"only submissions that came through this door ({', '.join(DOORS)})",
        ),
    )
    since: int | None = field(
        default=None,
        metadata=_key(
            read_param=_wire_time,
            write_param=format_timestamp,
            read_text=parse_since,
            metavar="WHEN",
            help="only submissions received at or after WHEN (ISO 8601 date or time; UTC unless it says)",
        ),
    )
    until: int | None = field(
        default=None,
        metadata=_key(
            read_param=_wire_time,
            write_param=format_timestamp,
            read_text=parse_until,
            metavar="WHEN",
            help="only submissions received before WHEN (a date alone includes that day)",
        ),
    )
    search: str | None = field(
        default=None,
        metadata=_key(
            read_param=_wire_search,
            write_param=_same,
            read_text=parse_search,
            metavar="TEXT",
            help="only submissions holding every word of TEXT (text, from, subject, body)",
        ),
    )
    id_prefix: str | None = field(
        default=None,
        metadata=_key(
            read_param=_wire_id_prefix,
            write_param=_same,
            read_text=parse_id_prefix,
            metavar="PREFIX",
            help=f"only submissions whose id starts with PREFIX ({MIN_ID_PREFIX} or more characters)",
            old_keys=("id",),
        ),
    )
    sort: str = field(
        default=SORT_RECEIVED,
        metadata=_key(
            read_param=_wire_sort,
            write_param=_same,
            read_text=parse_sort,
            metavar="ORDER",
            help="newest received first (received, the default), or newest decision or receipt first (updated)",
            filters=False,
        ),
    )
    context_id: str | None = None
    status_timestamp_after: int | None = None

    def __post_init__(self) -> None:
        check_sort(self.sort)
        if self.id_prefix is not None:
            check_id_prefix(self.id_prefix)

    def filtered(self) -> bool:
        """Whether any filter (not the order) is set."""
        return any(
            getattr(self, f.name) is not None for f in fields(self) if f.name != "sort"
        )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _query_keys() -> tuple[QueryKey, ...]:
    return tuple(
        replace(
            f.metadata["key"],
            name=f.name,
            param=_camel(f.name),
            option="--" + f.name.replace("_", "-"),
        )
        for f in fields(TaskQuery)
        if "key" in f.metadata
    )


#: The review surfaces' names of L{TaskQuery}'s fields, in field order: the
#: one table of them.
QUERY_KEYS: tuple[QueryKey, ...] = _query_keys()
#: Those that filter (all but C{sort}).
FILTER_KEYS: tuple[QueryKey, ...] = tuple(k for k in QUERY_KEYS if k.filters)


def check_range(query: TaskQuery, name: Callable[[QueryKey], str]) -> None:
    """
    Refuse an empty range of receipt times, as the review surfaces do.

    @param name: How a surface calls a key (its option, its param...).
    @raise FilterError: C{until} is not after C{since}.
    """
    if query.since is not None and query.until is not None and query.until <= query.since:
        since, until = (k for k in QUERY_KEYS if k.name in ("since", "until"))
        raise FilterError(f"{name(until)} must be later than {name(since)}")


def read_params(reader: ParamsReader) -> TaskQuery:
    """
    The query of the params of C{beacon.review.List} (the params named by
    L{QueryKey.param}); its violations recorded on C{reader}.
    """
    values = {key.name: key.read_param(reader, key.param) for key in QUERY_KEYS}
    since, until = values["since"], values["until"]
    if since is not None and until is not None and until <= since:
        reader.fail("until", "must be later than since")
    # What the params could not give is None: the query is only used
    # without violations, and every value read without one is good.
    return TaskQuery(**values)


def params_of(query: TaskQuery) -> dict[str, Any]:
    """
    The params of C{beacon.review.List} that carry C{query} (the filters
    set, and the order).

    @raise ValueError: C{query} sets what C{beacon.review.List} does not
        take (C{context_id}, C{status_timestamp_after}).
    """
    if query.context_id is not None or query.status_timestamp_after is not None:
        raise ValueError("beacon.review.List takes neither a contextId nor a statusTimestampAfter")
    params: dict[str, Any] = {}
    for key in QUERY_KEYS:
        value = getattr(query, key.name)
        if value is not None:
            params[key.param] = key.write_param(value)
    return params


def read_text(
    texts: Mapping[str, str | None], name: Callable[[QueryKey], str], *, old: bool = False
) -> TaskQuery:
    """
    The query of texts by name (an option's value, a query key's), each
    read by its key's L{QueryKey.read_text}; an empty or missing text is no
    filter.

    @param name: The name C{texts} gives a key (L{QueryKey.param} for the
        console's query string, L{QueryKey.name} for parsed options).
    @param old: Whether to read a key's L{QueryKey.old_keys} too, where its
        name is missing.
    @raise FilterError: A value that cannot be used, or an empty range.
    """
    values: dict[str, Any] = {}
    for key in QUERY_KEYS:
        names = (name(key), *key.old_keys) if old else (name(key),)
        text = next((t for t in map(texts.get, names) if t), None)
        if text is not None:
            values[key.name] = key.read_text(text)
    query = TaskQuery(**values)
    check_range(query, name)
    return query


__all__ = [
    "FILTER_KEYS",
    "FILTER_STATES",
    "MAX_DOOR_LENGTH",
    "MAX_SEARCH_LENGTH",
    "MIN_ID_PREFIX",
    "QUERY_KEYS",
    "SORTS",
    "SORT_RECEIVED",
    "SORT_UPDATED",
    "FilterError",
    "QueryKey",
    "TaskQuery",
    "check_id_prefix",
    "check_range",
    "check_sort",
    "params_of",
    "parse_door",
    "parse_id_prefix",
    "parse_moment",
    "parse_search",
    "parse_since",
    "parse_sort",
    "parse_state",
    "parse_until",
    "read_params",
    "read_text",
]
