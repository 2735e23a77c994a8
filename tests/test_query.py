"""
Tests for L{beacon.protocol.query}: the one query of the review surfaces,
its checks, and the one table naming its keys on every surface.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from beacon.cli._filters import UsageError, add_filter_options, query_of
from beacon.console._server import Problem, _query_of
from beacon.intake._operator import EXTENSION_DECLARATIONS, REVIEW_EXTENSION, _list_request
from beacon.protocol import InvalidParamsError, ParamsReader, params_parser
from beacon.protocol.query import (
    FILTER_KEYS,
    QUERY_KEYS,
    SORT_RECEIVED,
    SORT_UPDATED,
    FilterError,
    TaskQuery,
    params_of,
    read_params,
    read_text,
)
from beacon.store import ISubmissionStore

#: 2026-12-01T00:00:00Z and the next day, in milliseconds.
DAY = 1_796_083_200_000
NEXT_DAY = DAY + 86_400_000


def test_query_is_frozen_keyword_only_with_defaults() -> None:
    """A TaskQuery is a value: frozen, keyword-only; by default everything, newest received first."""
    query = TaskQuery()
    assert query.sort == SORT_RECEIVED and not query.filtered()
    with pytest.raises(dataclasses.FrozenInstanceError):
        query.door = "native"  # type: ignore[misc]
    with pytest.raises(TypeError):
        TaskQuery("TASK_STATE_SUBMITTED")  # type: ignore[misc]
    assert TaskQuery(door="native") == TaskQuery(door="native")
    assert hash(TaskQuery(door="native")) == hash(TaskQuery(door="native"))
    assert TaskQuery(sort=SORT_UPDATED, door="native").filtered()
    assert not hasattr(query, "__dict__")


@pytest.mark.parametrize(
    "values",
    [
        {"sort": "size"},
        {"id_prefix": "0ab1c"},
        {"id_prefix": "0AB1C2"},
        {"id_prefix": "0ab1c2*"},
        {"id_prefix": ""},
    ],
)
def test_query_checks_itself(values: dict[str, Any]) -> None:
    """An unknown order or a bad id prefix is no query (checked once, by the value)."""
    with pytest.raises(ValueError):
        TaskQuery(**values)


def test_one_table_names_every_key() -> None:
    """
    Each field a review surface carries has one name: the store's, its
    camelCase the operator API's param and the console's key, its
    kebab-case the option; filters are all of them but sort.
    """
    names = [(k.name, k.param, k.option) for k in QUERY_KEYS]
    assert names == [
        ("status", "status", "--status"),
        ("door", "door", "--door"),
        ("since", "since", "--since"),
        ("until", "until", "--until"),
        ("search", "search", "--search"),
        ("id_prefix", "idPrefix", "--id-prefix"),
        ("sort", "sort", "--sort"),
    ]
    assert [k.name for k in FILTER_KEYS] == [n for n, _, _ in names if n != "sort"]
    fields = {f.name for f in dataclasses.fields(TaskQuery)}
    assert {k.name for k in QUERY_KEYS} == fields - {"context_id", "status_timestamp_after"}
    assert {old: k.param for k in QUERY_KEYS for old in k.old_keys} == {
        "state": "status",
        "id": "idPrefix",
    }
    # The store is asked the same value.
    assert "query" in ISubmissionStore["list_tasks"].getSignatureInfo()["positional"]
    # The card's description of beacon.review.List names every param.
    (review,) = [e for e in EXTENSION_DECLARATIONS if e["uri"] == REVIEW_EXTENSION]
    for key in QUERY_KEYS:
        assert f"{key.param}?" in review["description"], key.param


#: One query, as each surface spells it.
QUERY = TaskQuery(
    status="TASK_STATE_SUBMITTED",
    door="native",
    since=DAY,
    until=NEXT_DAY,
    search="lighthouse keeper",
    id_prefix="0ab1c2",
    sort=SORT_UPDATED,
)
PARAMS = {
    "status": "TASK_STATE_SUBMITTED",
    "door": "native",
    "since": "2026-12-01T00:00:00.000Z",
    "until": "2026-12-02T00:00:00.000Z",
    "search": "lighthouse keeper",
    "idPrefix": "0ab1c2",
    "sort": "updated",
}
ARGV = [
    "--status", "submitted",
    "--door", "native",
    "--since", "2026-12-01",
    "--until", "2026-12-01",
    "--search", "lighthouse keeper",
    "--id-prefix", "0AB1C2",
    "--sort", "updated",
]
CONSOLE = {
    "status": "submitted",
    "door": "native",
    "since": "2026-12-01",
    "until": "2026-12-01",
    "search": "lighthouse keeper",
    "idPrefix": "0AB1C2",
    "sort": "updated",
}


def _wire(params: dict[str, Any]) -> TaskQuery:
    request = params_parser(_list_request)(params)
    query: TaskQuery = request.query
    return query


def _cli(argv: list[str]) -> TaskQuery:
    parser = argparse.ArgumentParser()
    add_filter_options(parser)
    return query_of(parser.parse_args(argv))


def test_every_surface_reads_the_same_query() -> None:
    """
    The command line's options, the console's query string and the
    operator API's params give the same TaskQuery; the client's params of
    it are the API's.
    """
    assert _wire(PARAMS) == QUERY
    assert _cli(ARGV) == QUERY
    assert _query_of(CONSOLE) == QUERY
    assert params_of(QUERY) == PARAMS
    assert _wire(params_of(QUERY)) == QUERY
    assert params_of(TaskQuery()) == {"sort": SORT_RECEIVED}
    assert _wire({}) == _cli([]) == _query_of({}) == TaskQuery()


def test_older_console_keys_still_read() -> None:
    """The console still reads state= and id= (bookmarks, an older page)."""
    older = dict(CONSOLE, state=CONSOLE["status"], id=CONSOLE["idPrefix"])
    del older["status"], older["idPrefix"]
    assert _query_of(older) == QUERY
    assert _query_of({"state": "accepted", "status": "rejected"}).status == "TASK_STATE_REJECTED"


def test_operator_params_unchanged() -> None:
    """
    beacon.review.List's params keep the names clients already send
    (status, since, until, idPrefix...), and the camelCase API's
    snake_case spellings still read.
    """
    assert _wire({"status": "TASK_STATE_COMPLETED", "idPrefix": "0ab1c2"}) == TaskQuery(
        status="TASK_STATE_COMPLETED", id_prefix="0ab1c2"
    )
    assert _wire({"id_prefix": "0ab1c2"}) == TaskQuery(id_prefix="0ab1c2")
    assert _wire({"status": "TASK_STATE_UNSPECIFIED"}) == TaskQuery()


@pytest.mark.parametrize(
    "params, field",
    [
        ({"sort": "size"}, "sort"),
        ({"search": "  "}, "search"),
        ({"idPrefix": "zzzzzzzz"}, "idPrefix"),
        ({"door": "Not A Door"}, "door"),
        ({"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "until"),
        ({"status": "TASK_STATE_NOPE"}, "status"),
    ],
)
def test_params_refused_name_the_param(params: dict[str, Any], field: str) -> None:
    """A bad param is a violation naming it, as the API spells it."""
    reader = ParamsReader(params, "")
    read_params(reader)
    assert [name for name, _ in reader.violations] == [field]
    with pytest.raises(InvalidParamsError):
        _wire(params)


@pytest.mark.parametrize(
    "texts, message",
    [
        ({"status": "bogus"}, "is not a task state"),
        ({"door": "smoke"}, "is not a door"),
        ({"since": "yesterday"}, "is not an ISO 8601 date or time"),
        ({"since": "2026-12-02", "until": "2026-12-01"}, "until must be later than since"),
        ({"search": "!!"}, "the search holds no word"),
        ({"idPrefix": "abc"}, "is not an id prefix"),
        ({"sort": "random"}, "sort is received or updated"),
    ],
)
def test_text_refused(texts: dict[str, str], message: str) -> None:
    """Text that gives no value is one line, on the console a 400."""
    with pytest.raises(FilterError, match=message):
        read_text(texts, lambda key: key.param)
    with pytest.raises(Problem) as caught:
        _query_of(texts)
    assert caught.value.status == 400 and message in caught.value.message


def test_cli_range_names_the_options() -> None:
    """The command line's empty range names its options."""
    parser = argparse.ArgumentParser()
    add_filter_options(parser)
    args = parser.parse_args(["--since", "2026-12-02", "--until", "2026-12-01"])
    with pytest.raises(UsageError, match="--until must be later than --since"):
        query_of(args)


def test_params_of_refuses_what_review_list_does_not_take() -> None:
    """A contextId or statusTimestampAfter is A2A ListTasks's, not beacon.review.List's."""
    with pytest.raises(ValueError):
        params_of(TaskQuery(context_id="c"))
    with pytest.raises(ValueError):
        params_of(TaskQuery(status_timestamp_after=DAY))
