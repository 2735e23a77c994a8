"""
The reader's half of C{beacon review}: finding (filters, sorts, full-text
search, keyset pages), short ids, bulk decisions, export and purge, through
the operator door's review extension methods (C{beacon.review.List},
C{DecideMany}, C{Purge}), on both stores: each test runs against an
in-process Beacon on SQLite and on PostgreSQL. The commands run in-process
(L{cli.run}); C{test_review_end_to_end} runs the real C{beacon} command
against a real C{twistd beacon}.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from beacon import cli
from beacon.cli import _export, _review
from beacon.client import REVIEW_EXTENSION, RPCError
from peers.postgres import pg_schema, pg_url, postgresql  # noqa: F401 (fixtures)
from peers.process import BeaconLauncher
from test_cli import (  # noqa: F401 (fixtures)
    STRUCTURED,
    InProcessBeacon,
    launcher,
    post_text,
    start_beacon,
    within,
)

#: The console script of the interpreter running the tests.
BEACON = Path(sys.executable).parent / "beacon"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_values(request: pytest.FixtureRequest) -> dict[str, Any] | None:
    """The configuration of each store the review suite runs on."""
    if request.param == "sqlite":
        return None
    return {"store": {"url": request.getfixturevalue("pg_url")}}


@pytest.fixture
def inbox(
    start_beacon: Callable[..., InProcessBeacon], store_values: dict[str, Any] | None
) -> InProcessBeacon:
    """A running in-process Beacon with an empty inbox, on each store."""
    return start_beacon(store_values)


class Result:
    """What one in-process command wrote, and its exit code."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err

    def __repr__(self) -> str:
        return f"<Result {self.code} out={self.out!r} err={self.err!r}>"


async def review(
    beacon: InProcessBeacon, *argv: str, answer: bool | None = None, columns: int = 200
) -> Result:
    """
    Run C{beacon review *argv --socket <beacon's>} in-process; a question
    is answered C{answer} (L{None}: there is no terminal).
    """
    out, err = io.StringIO(), io.StringIO()
    asked: list[str] = []

    def ask(question: str) -> bool | None:
        asked.append(question)
        return answer

    args = cli.parse_args(["review", *argv, "--socket", beacon.socket])
    code = await within(
        Deferred.fromCoroutine(_review.run(reactor, args, out, err, columns, ask=ask))
    )
    result = Result(code, out.getvalue(), err.getvalue())
    result.asked = asked  # type: ignore[attr-defined]
    return result


def listed_ids(result: Result) -> list[str]:
    """The ids (as shown) of a C{review list} table, top to bottom."""
    assert result.code == 0, result
    lines = result.out.splitlines()
    assert lines[0].split()[0] == "ID", result.out
    return [line.split()[0] for line in lines[1:] if not line.startswith("(")]


async def listed(beacon: InProcessBeacon, *argv: str) -> list[str]:
    """The whole ids C{review list --json *argv} lists, in order."""
    result = await review(beacon, "list", "--json", "--limit", "500", *argv)
    assert result.code == 0, result
    return [task["id"] for task in json.loads(result.out)["tasks"]]


def message(subject: str, body: str = "Hello.", name: str = "Ada") -> dict[str, Any]:
    """A structured message."""
    return {"from": {"name": name}, "subject": subject, "body": body}


# Finding.


@pytest_twisted.ensureDeferred
async def test_list_sorts_by_receipt_by_default(inbox: InProcessBeacon) -> None:
    """Deciding an old submission does not move it to the top; --sort updated does."""
    first = await inbox.submit_text("first")
    second = await inbox.submit_text("second")
    assert await listed(inbox) == [second, first]
    assert (await review(inbox, "accept", first)).code == 0
    assert await listed(inbox) == [second, first]
    assert await listed(inbox, "--sort", "updated") == [first, second]


@pytest_twisted.ensureDeferred
async def test_list_shows_short_ids(inbox: InProcessBeacon) -> None:
    """The table shows 12-character ids; --full-ids the whole ones."""
    task_id = await inbox.submit_text("hello")
    assert listed_ids(await review(inbox, "list")) == [task_id[:12]]
    assert listed_ids(await review(inbox, "list", "--full-ids")) == [task_id]


@pytest_twisted.ensureDeferred
async def test_search(inbox: InProcessBeacon) -> None:
    """--search finds every word, in text parts and the structured from, subject and body."""
    spam = await inbox.submit_text("BUY NOW: cheap watches")
    spam_too = await inbox.submit_structured(message("Offer", "Buy our stuff now!"))
    by_name = await inbox.submit_structured(message("Hi", name="Grace Hopper"))
    by_subject = await inbox.submit_structured(message("Licence question"))
    await inbox.submit_text("buy a cake later")
    assert await listed(inbox, "--search", "buy now") == [spam_too, spam]
    assert await listed(inbox, "--search", "hopper") == [by_name]
    assert await listed(inbox, "--search", "LICENCE") == [by_subject]
    assert await listed(inbox, "--search", "nothing-like-this") == []
    empty = await review(inbox, "list", "--search", "unmatched")
    assert (empty.code, empty.out) == (0, "No submissions match.\n")


@pytest_twisted.ensureDeferred
async def test_filters_combine(inbox: InProcessBeacon) -> None:
    """--status, --door, --since/--until and --search combine (AND)."""
    a = await inbox.submit_text("alpha report")
    b = await inbox.submit_text("alpha digest")
    c = await inbox.submit_text("beta report")
    await review(inbox, "reject", b)
    assert await listed(inbox, "--search", "alpha", "--status", "submitted") == [a]
    assert await listed(inbox, "--search", "report", "--door", "jsonrpc") == [c, a]
    assert await listed(inbox, "--door", "native") == []
    assert await listed(inbox, "--since", "1970-01-02", "--until", "9999-01-01") == [c, b, a]
    assert await listed(inbox, "--until", "2001-01-01") == []
    assert await listed(inbox, "--since", "9000-01-01T00:00:00+02:00") == []


@pytest_twisted.ensureDeferred
async def test_pages_with_keyset_tokens(inbox: InProcessBeacon) -> None:
    """--limit cuts a listing and says how to go on; --page-token goes on, in --json too."""
    ids = [await inbox.submit_text(f"message {n}") for n in range(5)]
    ids.reverse()
    first = await review(inbox, "list", "--limit", "2", "--json", "--search", "message")
    page = json.loads(first.out)
    assert [t["id"] for t in page["tasks"]] == ids[:2]
    assert page["totalSize"] == 5 and page["nextPageToken"]
    rest = await listed(inbox, "--search", "message", "--page-token", page["nextPageToken"])
    assert rest == ids[2:]
    table = await review(inbox, "list", "--limit", "2")
    assert f"(2 of 5 shown; --limit N shows more, --page-token " in table.out
    wrong = await review(inbox, "list", "--sort", "updated", "--page-token", page["nextPageToken"])
    assert wrong.code == 1 and "pageToken" in wrong.err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["list", "--since", "yesterday"], "is not an ISO 8601 date or time"),
        (["list", "--until", "2026-13-01"], "is not an ISO 8601 date or time"),
        (["list", "--door", "smtp"], "is not a door"),
        (["list", "--search", ""], "holds no word"),
        (["list", "--search", "  !! "], "holds no word"),
        (["reject", "--matching"], "--matching needs at least one filter"),
        (["reject"], "give the ids to reject"),
        (["reject", "abcdefabcdef", "--matching", "--search", "x"], "not both"),
        (["accept", "abcdefabcdef", "--search", "x"], "only with --matching"),
        (["show", "abc"], "too short"),
        (["list", "--since", "2026-12-02", "--until", "2026-12-01"], "later than --since"),
        (["purge"], "--decided-before"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_bad_input_exits_2(
    start_beacon: Callable[..., InProcessBeacon], argv: list[str], message: str
) -> None:
    """Bad input is one clear line on stderr and exit 2, before anything is decided."""
    beacon = start_beacon()
    err = io.StringIO()
    try:
        args = cli.parse_args(["review", *argv, "--socket", beacon.socket])
    except SystemExit as e:
        code = e.code
    else:
        out = io.StringIO()
        code = await within(
            Deferred.fromCoroutine(_review.run(reactor, args, out, err, 100, ask=lambda q: True))
        )
    assert code == 2
    # argparse wrote its own message to the real stderr; ours is checked here.
    if err.getvalue():
        assert message in err.getvalue() and err.getvalue().count("\n") == 1


def test_bad_input_messages_from_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse's refusals name the value and what it should be."""
    for argv, message in (
        (["list", "--since", "yesterday"], "'yesterday' is not an ISO 8601 date or time"),
        (["list", "--door", "smtp"], "'smtp' is not a door"),
        (["list", "--search", ""], "the search holds no word"),
        (["purge"], "--decided-before"),
    ):
        with pytest.raises(SystemExit) as exit:
            cli.parse_args(["review", *argv])
        assert exit.value.code == 2
        assert message in capsys.readouterr().err


# Short ids.


@pytest_twisted.ensureDeferred
async def test_short_ids(inbox: InProcessBeacon) -> None:
    """show, accept and reject take a unique prefix of 6+ characters, in any case."""
    task_id = await inbox.submit_text("short")
    shown = await review(inbox, "show", task_id[:12].upper())
    assert shown.code == 0 and task_id in shown.out
    accepted = await review(inbox, "accept", task_id[:8])
    assert (accepted.code, accepted.out) == (0, f"accepted {task_id}\n")
    missing = await review(inbox, "show", "vvvvvvvv")
    assert (missing.code, missing.err) == (1, "beacon: no submission with id vvvvvvvv\n")


@pytest_twisted.ensureDeferred
async def test_ambiguous_short_id(inbox: InProcessBeacon) -> None:
    """A prefix two ids share exits 1 and lists the candidates."""
    ids = [await inbox.submit_text(f"n{n}") for n in range(3)]
    # Ids begin with their millisecond of receipt: the first six digits
    # (about 17 minutes) are shared by submissions made together.
    common = os.path.commonprefix(ids)
    assert len(common) >= 6
    result = await review(inbox, "show", common[:6])
    assert result.code == 1
    assert "is ambiguous: it starts 3 ids:" in result.err
    for task_id in ids:
        assert task_id in result.err


# Bulk decisions.


@pytest_twisted.ensureDeferred
async def test_reject_several_ids(inbox: InProcessBeacon) -> None:
    """Several ids are decided with one note after a yes; the answer names the decided ones."""
    ids = [await inbox.submit_text(f"junk {n}") for n in range(3)]
    await review(inbox, "accept", ids[0])
    declined = await review(inbox, "reject", *ids, answer=False)
    assert declined.code == 1 and declined.out == "Nothing decided.\n"
    assert declined.asked == ["Reject 3 submissions?"]  # type: ignore[attr-defined]
    result = await review(inbox, "reject", *[i[:10] for i in ids], "--note", "flood", answer=True)
    assert result.code == 0, result
    assert result.out.splitlines() == [
        "rejected 2 submissions",
        f"1 already decided: {ids[0][:12]} (accepted)",
    ]
    for task_id in ids[1:]:
        shown = json.loads((await review(inbox, "show", task_id, "--json")).out)
        assert shown["status"]["state"] == "TASK_STATE_REJECTED"
        assert shown["status"]["message"]["parts"][0]["text"] == "flood"


@pytest_twisted.ensureDeferred
async def test_reject_matching(inbox: InProcessBeacon) -> None:
    """reject --matching decides the undecided matches only, after saying how many."""
    spam = [await inbox.submit_text(f"buy now offer {n}") for n in range(4)]
    keep = await inbox.submit_text("a real question")
    await review(inbox, "accept", spam[0])
    result = await review(inbox, "reject", "--matching", "--search", "buy now", "--json", answer=True)
    assert result.code == 0, result
    assert result.asked == [  # type: ignore[attr-defined]
        "Reject 3 undecided submissions of 4 matching (1 already decided)?"
    ]
    answer = json.loads(result.out)
    assert sorted(answer["decided"]) == sorted(spam[1:])
    assert answer["alreadyDecided"] == [{"id": spam[0], "state": "TASK_STATE_COMPLETED"}]
    assert await listed(inbox, "--status", "submitted") == [keep]
    again = await review(inbox, "reject", "--matching", "--search", "buy now", answer=True)
    assert (again.code, again.out) == (0, "4 submissions match; none is undecided. Nothing decided.\n")


@pytest_twisted.ensureDeferred
async def test_bulk_without_terminal_refuses(inbox: InProcessBeacon) -> None:
    """With no terminal and no --yes, a bulk decision exits 2 and decides nothing; --yes decides."""
    ids = [await inbox.submit_text(f"x {n}") for n in range(2)]
    refused = await review(inbox, "reject", "--matching", "--status", "submitted", answer=None)
    assert refused.code == 2
    assert "refusing without --yes (no terminal to ask on)" in refused.err
    assert await listed(inbox, "--status", "submitted") == ids[::-1]
    done = await review(inbox, "reject", "--matching", "--status", "submitted", "--yes", answer=None)
    assert (done.code, done.out) == (0, "rejected 2 submissions\n")
    assert done.asked == []  # type: ignore[attr-defined]


@pytest_twisted.ensureDeferred
async def test_decide_many_method(inbox: InProcessBeacon) -> None:
    """DecideMany answers decided, alreadyDecided, notFound; refuses more than 1,000 ids."""
    client = inbox.client()
    task_id = await inbox.submit_text("one")
    answer = await client.decide_many([task_id, "0" * 36, task_id], "reject", "n")
    assert answer == {
        "decision": "reject",
        "decided": [task_id],
        "alreadyDecided": [],
        "notFound": ["0" * 36],
        "failed": [],
    }
    again = await client.decide_many([task_id], "accept")
    assert again["alreadyDecided"] == [{"id": task_id, "state": "TASK_STATE_REJECTED"}]
    with pytest.raises(RPCError) as caught:
        await client.decide_many(["x"] * 1001, "accept")
    assert caught.value.code == -32602


# Export.


@pytest_twisted.ensureDeferred
async def test_export_jsonl(inbox: InProcessBeacon, tmp_path: Path) -> None:
    """Every matching submission in full, one JSON object per line, to a 0600 file."""
    text_id = await inbox.submit_text("plain words")
    data_id = await inbox.submit_structured(STRUCTURED)
    await review(inbox, "reject", text_id, "--note", "not for us")
    target = tmp_path / "inbox.jsonl"
    result = await review(inbox, "export", "--output", str(target))
    assert (result.code, result.out, result.err) == (0, "", "exported 2 submissions\n")
    assert os.stat(target).st_mode & 0o777 == 0o600
    assert not (tmp_path / "inbox.jsonl.partial").exists()
    structured, text = [json.loads(line) for line in target.read_text().splitlines()]
    assert structured["id"] == data_id and structured["content"] == {"message": STRUCTURED}
    assert structured["state"] == "TASK_STATE_SUBMITTED" and structured["decision"] is None
    assert text["id"] == text_id and text["content"] == {"text": "plain words"}
    assert (text["decision"], text["note"]) == ("reject", "not for us")
    assert text["decidedAt"].endswith("Z") and text["receivedAt"].endswith("Z")
    assert text["door"] == "jsonrpc" and len(text["sha256"]) == 64
    only = await review(inbox, "export", "--search", "plain")
    assert [json.loads(line)["id"] for line in only.out.splitlines()] == [text_id]


@pytest_twisted.ensureDeferred
async def test_export_csv(inbox: InProcessBeacon) -> None:
    """CSV has a header, the structured fields in columns, and formulas defused."""
    data_id = await inbox.submit_structured(message("=HYPERLINK(\"x\")", "body, with \"quotes\"\nand lines"))
    result = await review(inbox, "export", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert len(rows) == 1
    row = rows[0]
    assert row["id"] == data_id and row["from_name"] == "Ada"
    assert row["subject"] == "'=HYPERLINK(\"x\")"
    assert row["body"] == "body, with \"quotes\"\nand lines"
    assert json.loads(row["message"])["from"] == {"name": "Ada"}


@pytest.mark.parametrize(
    "text, defused",
    [
        ("=1+1", True),
        ("+1", True),
        ("-1", True),
        ("@SUM(A1)", True),
        (" =1+1", True),
        ("\n=1+1", True),
        ("  \n @x", True),
        ("\u00a0=1+1", True),
        ("\t1", True),
        ("\r1", True),
        ("a=1+1", False),
        (" plain", False),
        ("\nplain", False),
        ("", False),
    ],
)
def test_csv_cells_that_a_spreadsheet_would_run(text: str, defused: bool) -> None:
    """
    A cell whose first character other than white space starts a formula,
    or that starts with a tab or CR, gets a leading quote; any other is
    written as it is.
    """
    out = io.StringIO()
    writer = _export.writer_for("csv", out)
    record = dict.fromkeys(
        ("id", "receivedAt", "door", "source", "kind", "state", "decision", "decidedAt", "note",
         "purgedAt", "sha256"),
        "x",
    )
    writer.write({**record, "content": {"text": text}})
    [row] = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert row["text"] == ("'" + text if defused else text)


# Purge.


@pytest_twisted.ensureDeferred
async def test_purge(inbox: InProcessBeacon) -> None:
    """purge erases decided content and notes; status, receipt and state stay."""
    old = await inbox.submit_text("secret words to forget")
    undecided = await inbox.submit_text("secret words to keep")
    await review(inbox, "reject", old, "--note", "private note")
    refused = await review(inbox, "purge", "--decided-before", "9999-01-01", answer=None)
    assert refused.code == 2 and "refusing without --yes" in refused.err
    none = await review(inbox, "purge", "--decided-before", "2000-01-01", "--yes")
    assert none.code == 0 and "Nothing purged." in none.out
    done = await review(inbox, "purge", "--decided-before", "9999-01-01", answer=True)
    assert done.code == 0, done
    assert done.out == "purged the content of 1 submission (receipts, times and states kept)\n"
    assert done.asked == [  # type: ignore[attr-defined]
        "Erase the content and notes of 1 submission decided before 9999-01-01 00:00:00Z?"
        " This cannot be undone?"
    ]
    shown = await review(inbox, "show", old)
    assert "secret" not in shown.out and "private note" not in shown.out
    assert "content:" in shown.out and "purged" in shown.out
    task = json.loads((await review(inbox, "show", old, "--json")).out)
    assert task["status"]["state"] == "TASK_STATE_REJECTED" and "history" not in task
    assert "purgedAt" in task["metadata"] and task["metadata"]["receipt"]["sha256"]
    assert await listed(inbox, "--search", "secret") == [undecided]
    exported = json.loads((await review(inbox, "export", "--search", "secret")).out)
    assert exported["id"] == undecided
    again = await review(inbox, "purge", "--decided-before", "9999-01-01", "--yes")
    assert "Nothing purged." in again.out


# The real command against a real twistd beacon.


def test_review_end_to_end(launcher: BeaconLauncher, tmp_path: Path) -> None:
    """
    As an operator runs it: submit, find with --search, reject --matching
    --yes, export to a file, purge; a bulk decision without --yes and
    without a terminal exits 2.
    """
    beacon = launcher.start()
    for text in ("buy now cheap", "buy now cheaper", "a question"):
        post_text(beacon.port, text)
    data = str(launcher.data)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BEACON), "review", *argv, "--data", data],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )

    found = run("list", "--search", "buy now")
    assert found.returncode == 0, found.stderr
    assert len(found.stdout.splitlines()) == 3
    refused = run("reject", "--matching", "--search", "buy now")
    assert refused.returncode == 2 and "refusing without --yes" in refused.stderr
    rejected = run("reject", "--matching", "--search", "buy now", "--yes")
    assert (rejected.returncode, rejected.stdout) == (0, "rejected 2 submissions\n")
    target = tmp_path / "export.jsonl"
    exported = run("export", "--output", str(target))
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["decision"] for r in records] == [None, "reject", "reject"]
    purged = run("purge", "--decided-before", "9999-01-01", "--yes")
    assert purged.returncode == 0 and "2 submissions" in purged.stdout, purged
    left = run("list", "--search", "buy")
    assert (left.returncode, left.stdout) == (0, "No submissions match.\n")


# The methods' params.


@pytest.mark.parametrize(
    "params, field",
    [
        ({"sort": "size"}, "sort"),
        ({"search": "  "}, "search"),
        ({"search": "x" * 1001}, "search"),
        ({"idPrefix": "abc"}, "idPrefix"),
        ({"idPrefix": "ABCDEFGH"}, "idPrefix"),
        ({"idPrefix": "zzzzzzzz"}, "idPrefix"),
        ({"door": "Not A Door"}, "door"),
        ({"since": "2026-12-01"}, "since"),
        ({"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "until"),
        ({"pageSize": 101}, "pageSize"),
        ({"pageToken": "bm90LWEtdG9rZW4"}, "pageToken"),
        ({"status": "TASK_STATE_NOPE"}, "status"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_list_params_refused(
    start_beacon: Callable[..., InProcessBeacon], params: dict[str, Any], field: str
) -> None:
    """beacon.review.List refuses bad params with -32602 naming the field."""
    beacon = start_beacon()
    client = beacon.client()
    with pytest.raises(RPCError) as caught:
        await client._call("beacon.review.List", params, REVIEW_EXTENSION)
    assert caught.value.code == -32602
    assert field in json.dumps(caught.value.data)


@pytest.mark.parametrize(
    "method, params, field",
    [
        ("beacon.review.DecideMany", {"decision": "accept"}, "ids"),
        ("beacon.review.DecideMany", {"ids": [], "decision": "accept"}, "ids"),
        ("beacon.review.DecideMany", {"ids": [""], "decision": "accept"}, "ids"),
        ("beacon.review.DecideMany", {"ids": ["a"], "decision": "maybe"}, "decision"),
        ("beacon.review.DecideMany", {"ids": ["a"] * 1001, "decision": "accept"}, "ids"),
        ("beacon.review.Purge", {}, "decidedBefore"),
        ("beacon.review.Purge", {"decidedBefore": "soon"}, "decidedBefore"),
        ("beacon.review.Purge", {"decidedBefore": "2026-01-01T00:00:00Z", "dryRun": "yes"}, "dryRun"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_bulk_and_purge_params_refused(
    start_beacon: Callable[..., InProcessBeacon], method: str, params: dict[str, Any], field: str
) -> None:
    """DecideMany and Purge refuse bad params with -32602 naming the field."""
    beacon = start_beacon()
    with pytest.raises(RPCError) as caught:
        await beacon.client()._call(method, params, REVIEW_EXTENSION)
    assert caught.value.code == -32602
    assert field in json.dumps(caught.value.data)


@pytest_twisted.ensureDeferred
async def test_methods_need_the_extension(start_beacon: Callable[..., InProcessBeacon]) -> None:
    """Without A2A-Extensions naming the review extension, the methods do not exist."""
    beacon = start_beacon()
    for method in ("beacon.review.List", "beacon.review.DecideMany", "beacon.review.Purge"):
        with pytest.raises(RPCError) as caught:
            await beacon.client()._call(method, {})
        assert caught.value.code == -32601
