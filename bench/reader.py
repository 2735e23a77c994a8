#!/usr/bin/env python3
"""
The reader's side of Beacon, timed (issue 18, item 7, and the export's
memory figures): a large inbox on SQLite and on PostgreSQL, read, searched,
decided in bulk, exported and purged through `beacon review`.

    make bench-reader                              # the whole run
    make bench-reader BENCH_ARGS="--out"           # ... and bench/results/<date>-reader.md
    .venv/bin/python bench/reader.py --quick       # a smoke run, about a minute
    .venv/bin/python bench/reader.py --stores sqlite --count 20000

For each store (SQLite in a temp data dir; PostgreSQL on 127.0.0.1:5432 as
user postgres, in a fresh database beacon_bench_<pid> dropped at the end):

  1. fill: N submissions (default 100,000) written through the store's own
     append (a child process running the store under a reactor, so that
     its group commit and its search indexing run as in service).
     The corpus is fixed by a seed: half text, half structured (from,
     subject, body), bodies of a few hundred bytes of words drawn from a
     fixed list (Zipf-like), exactly N/10 holding "buy now", exactly N/100
     holding the rare word "licence";
  2. start `twistd -n beacon` on it (loopback only, [limits] rate = 0);
  3. beacon.review.List, timed from this process over the operator unix
     socket (raw HTTP/1.1, a new connection per call, as the CLI makes
     them): the first page (received order, 50, with the total), a search
     for the rare word, a two-word search, --status submitted. Median, p95
     and max of --calls calls after --warmup calls;
  4. `beacon review list` and `beacon review list --search` as commands:
     wall time, Python's start-up included (and `--help` alone, the start-up
     without a call);
  5. `beacon review export --output FILE` of everything, jsonl then csv:
     wall time, the CLI's peak RSS (wait4's ru_maxrss of that child) and the
     server's peak RSS during the export (VmHWM, reset before it through
     /proc/<pid>/clear_refs);
  6. `beacon review reject --matching --search "buy now" --yes`: the N/10;
  7. `beacon review purge --decided-before <now> --yes` of those N/10;
then the same export on an inbox a tenth the size, to show whether the
CLI's and the server's peaks grow with the inbox.

The server runs on core 0, this process's timed calls and the commands on
core 1 (taskset / sched_setaffinity), when the machine has both; PostgreSQL's
own processes are not pinned. Every process started here is stopped by its
pid (SIGTERM, a bounded wait, SIGKILL), also on Ctrl-C or an error, and the
run stops itself at --time-limit.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import ctypes
import datetime as dt
import http.client
import itertools
import json
import math
import os
import platform
import random
import re
import select
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
#: The virtualenv whose python, twistd and beacon run here (a git worktree
#: without one of its own names another's: BEACON_BENCH_VENV=/path/.venv,
#: with PYTHONPATH naming the worktree, which every child inherits).
PROJECT_VENV = Path(os.environ.get("BEACON_BENCH_VENV") or ROOT / ".venv")
PYTHON = PROJECT_VENV / "bin" / "python"
TWISTD = PROJECT_VENV / "bin" / "twistd"
BEACON = PROJECT_VENV / "bin" / "beacon"

STORES = ("sqlite", "postgresql")
PG_URL = "postgresql://postgres@127.0.0.1:5432/{database}"

REVIEW_EXTENSION = "https://beacon.unownedminds.com/extensions/review/v1"

#: The issue's goals, in milliseconds (List) and seconds (bulk reject).
GOAL_FIRST_PAGE_MS = 50.0
GOAL_SEARCH_MS = 100.0
GOAL_BULK_S = 10.0

# -- the corpus ------------------------------------------------------------

SEED = 18
#: What the bulk rejection matches: in exactly count/10 submissions.
BULK_PHRASE = "buy now"
#: A word in exactly count/100 submissions (a search for it finds ~1%).
RARE_WORD = "licence"
#: The two-word searches: words of the list, each in a tenth to a fifth of
#: the submissions ("the" in nearly all), both in 2 to 16 % of them. Which
#: plan PostgreSQL picks for them depends on its statistics of the words.
PAIR_QUERIES = ("river garden", "garden spring", "the river")
#: Received times are spread over this many days before the fill.
SPAN_DAYS = 30

# A fixed list of words, most frequent first (drawn with Zipf-like weights).
# It holds neither "buy" nor "now" nor RARE_WORD, so that those match exactly
# the submissions they were put in.
VOCABULARY = """
the of and to a in is that for it as was with be by on not he this are or his
from at which but have an they you were her she there been one all we their
has would when if so no will more about out up into do any your what some can
only other time new could these two may first then over such like our also
river just garden most made after where years through much before good well
very even back between three many those both under last never however same
another while might great since against still part long own being public
later house world year water place small general around found because power
state high given least show large often although during form given order
every night system work local point high early group city number away far
form light side report team office support field plan paper price market
window answer letter question morning evening spring summer winter autumn
bridge station harbour island valley forest meadow mountain village street
corner kitchen table chair shelf drawer basket bottle candle mirror ladder
engine wheel signal pattern record archive dataset snapshot release version
schedule meeting project review request update message notice reply thanks
please kindly regarding concerning attached enclosed following previous
further detail details section chapter page pages link links broken missing
error issue problem solution change changes fix fixed test tests build
server client protocol format schema field value values list item items
cost costs budget invoice payment account balance transfer offer discount
free limited special exclusive deal deals order shipping delivery package
friend family neighbour colleague student teacher doctor writer reader
painter farmer sailor baker tailor singer player keeper builder driver
quiet gentle bright dark warm cold soft hard quick slow careful simple
clear plain open closed early late ready steady honest modest curious
blue green yellow orange purple silver golden grey brown white black red
apple pear plum cherry lemon bread cheese honey butter coffee tea soup
""".split()
# Each word once, in first-seen order.
VOCABULARY = list(dict.fromkeys(VOCABULARY))
_CUMULATIVE = list(itertools.accumulate(1.0 / (rank + 8) for rank in range(len(VOCABULARY))))

FIRST_NAMES = """Ada Alan Grace Edsger Barbara Donald Frances Ken Radia Margaret
Niklaus Tony Leslie Adele Fran John Jean Karen Hedy Annie Dennis Guido Sophie
Ivan Lynn Marvin Mary Claude Carol Butler""".split()
AGENTS = ("assistant", "crawler", "mailer", "scout", "relay", "helper", "courier")
OPERATORS = ("Example Lab", "North Reading Room", "Harbour Archive", "Valley Co-op",
             "Orchard Press", "Lantern Works")
DOORS = (("jsonrpc", 50), ("native", 20), ("websocket", 20), ("http+json", 10))


@dataclass(frozen=True)
class Doc:
    """One generated submission's content and provenance."""

    index: int
    document: dict[str, Any]
    door: str
    source: str


def _words(rng: random.Random, count: int) -> list[str]:
    return rng.choices(VOCABULARY, cum_weights=_CUMULATIVE, k=count)


def _sentences(words: list[str], rng: random.Random) -> str:
    out: list[str] = []
    start = 0
    while start < len(words):
        end = min(len(words), start + rng.randint(7, 14))
        sentence = " ".join(words[start:end])
        out.append(sentence[0].upper() + sentence[1:] + rng.choice((".", ".", ".", "?", "!")))
        start = end
    return " ".join(out)


def corpus(count: int, seed: int = SEED) -> Iterator[Doc]:
    """
    The submissions of a bench inbox of C{count}, always the same for the
    same C{count} and C{seed}: even indexes text, odd ones structured;
    exactly C{count // 10} bodies hold L{BULK_PHRASE} and exactly
    C{count // 100} hold L{RARE_WORD}.
    """
    rng = random.Random(seed)
    bulk = set(rng.sample(range(count), count // 10))
    rare = set(rng.sample(range(count), count // 100))
    door_names = [d for d, _ in DOORS]
    door_weights = list(itertools.accumulate(w for _, w in DOORS))
    for index in range(count):
        words = _words(rng, rng.randint(40, 80))
        if index in rare:
            words.insert(rng.randrange(len(words) + 1), RARE_WORD)
        if index in bulk:
            at = rng.randrange(len(words) + 1)
            words[at:at] = BULK_PHRASE.split()
        body = _sentences(words, rng)
        if index % 2 == 0:
            document: dict[str, Any] = {"text": body}
        else:
            name = rng.choice(FIRST_NAMES)
            sender: dict[str, Any] = {"name": name}
            if rng.random() < 0.6:
                sender["agent"] = f"{name.lower()}-{rng.choice(AGENTS)}/{rng.randint(1, 4)}.{rng.randint(0, 9)}"
            if rng.random() < 0.3:
                sender["operator"] = rng.choice(OPERATORS)
            subject = " ".join(_words(rng, rng.randint(3, 8)))
            message: dict[str, Any] = {
                "from": sender,
                "subject": subject[0].upper() + subject[1:],
                "body": body,
            }
            if rng.random() < 0.5:
                message["language"] = "en"
            if rng.random() < 0.3:
                message["contact"] = [{"kind": "email", "value": f"{name.lower()}@example.org"}]
            document = {"message": message}
        door = door_names[bisect.bisect_right(door_weights, rng.randrange(door_weights[-1]))]
        source = f"{rng.choice(('198.51.100', '203.0.113', '192.0.2'))}.{rng.randint(1, 254)}"
        yield Doc(index, document, door, source)


def searchable_words(document: dict[str, Any]) -> set[str]:
    """The lower-case words the store indexes of a content document."""
    if "text" in document:
        text = document["text"]
    else:
        message = document["message"]
        text = " ".join([*message["from"].values(), message["subject"], message["body"]])
    return set(re.findall(r"\w+", text.lower()))


_BASE32HEX = "0123456789abcdefghijklmnopqrstuv"


def bench_id(millisecond: int, rng: random.Random) -> str:
    """A receipt id as Beacon makes them (48 bits of time, 132 random; base32hex)."""
    bits = (millisecond << 132) | rng.getrandbits(132)
    return "".join(_BASE32HEX[(bits >> shift) & 31] for shift in range(175, -1, -5))


# -- the fill (a child process: python bench/reader.py --fill URL) ---------


def fill_main(args: argparse.Namespace) -> int:
    """Write the corpus through the store's append, under a reactor."""
    import hashlib

    from twisted.internet import defer, task

    from beacon.intake import content_of
    from beacon.store import PostgreSQLStore, SQLiteStore, Submission, parse_store_url

    count, window = args.count, args.window
    started = time.perf_counter()
    ids = random.Random(f"{SEED}-ids-{args.base_ms}")
    step_ms = SPAN_DAYS * 86_400_000 // max(count, 1)
    submissions = []
    for doc in corpus(count):
        content = content_of(doc.document)
        at = args.base_ms - SPAN_DAYS * 86_400_000 + doc.index * step_ms
        submissions.append(Submission(
            id=bench_id(at, ids), context_id=bench_id(at, ids), received_at_ms=at,
            door=doc.door, source=doc.source, kind=content.kind,
            message_id=f"bench-{doc.index}", content=content.canonical,
            sha256=hashlib.sha256(content.canonical).hexdigest(),
        ))
    generated = time.perf_counter() - started

    async def fill(reactor: Any) -> None:
        parsed = parse_store_url(args.fill)
        store: Any
        if parsed.backend == "sqlite":
            store = SQLiteStore(parsed.location, reactor, max_batch=args.max_batch)
        else:
            store = PostgreSQLStore(parsed.location, reactor, max_batch=args.max_batch)
        store.startService()
        try:
            begun = time.perf_counter()
            for start in range(0, count, window):
                await defer.gatherResults(
                    [store.append(s) for s in submissions[start:start + window]],
                    consumeErrors=True,
                )
            appended = time.perf_counter() - begun
        finally:
            await store.stopService()
        print("FILL_RESULT " + json.dumps({
            "count": count, "generate_s": generated, "append_s": appended,
            "bytes": sum(len(s.content) for s in submissions),
        }), flush=True)

    task.react(lambda reactor: defer.ensureDeferred(fill(reactor)))
    return 0  # not reached: react exits


# -- processes -------------------------------------------------------------


class Interrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived, or the time limit passed."""


class BenchError(Exception):
    """The run cannot go on; the message says why."""


def say(text: str = "") -> None:
    print(text, flush=True)


def _die_with_parent() -> None:
    """In the child: receive SIGTERM if bench/reader.py dies (Linux only)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Finished:
    """A child that ran to its end: how, how long, and its peak RSS."""

    code: int
    out: str
    err: str
    wall_s: float
    maxrss: int  # bytes


class Processes:
    """Every process started here, so that each is stopped by its pid."""

    def __init__(self, deadline: float) -> None:
        self._live: list[subprocess.Popen[Any]] = []
        self.deadline = deadline

    def bound(self, timeout: float) -> float:
        """C{timeout}, cut to what is left of the run."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Interrupted("the --time-limit passed")
        return min(timeout, left)

    def start(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (no threads here)
            **kwargs,
        )
        self._live.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[Any], wait: float = 15.0) -> None:
        """SIGTERM, wait up to C{wait} seconds, then SIGKILL."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        if proc in self._live:
            self._live.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self._live)):
            self.stop(proc)

    def run(self, argv: list[str], timeout: float, tmp: Path, **kwargs: Any) -> Finished:
        """
        Run C{argv} to its end (bounded by C{timeout} and the run's
        deadline) and reap it with wait4, for its own peak RSS.
        """
        out_path, err_path = tmp / "child.out", tmp / "child.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            started = time.perf_counter()
            proc = self.start(argv, stdout=out, stderr=err, **kwargs)
        try:
            status, usage = _wait4(proc.pid, self.bound(timeout))
            wall = time.perf_counter() - started
        except subprocess.TimeoutExpired:
            self.stop(proc, wait=2)
            raise BenchError(f"{' '.join(argv)} did not end within {timeout:.0f} s") from None
        proc.returncode = os.waitstatus_to_exitcode(status)
        self._live.remove(proc)
        return Finished(
            proc.returncode,
            out_path.read_text(errors="replace"),
            err_path.read_text(errors="replace"),
            wall,
            usage.ru_maxrss * 1024,
        )


def _wait4(pid: int, timeout: float) -> tuple[int, Any]:
    """Wait (bounded) for child C{pid} to end; its status and rusage."""
    if hasattr(os, "pidfd_open"):
        with contextlib.suppress(OSError):
            fd = os.pidfd_open(pid)
            try:
                ready, _, _ = select.select([fd], [], [], timeout)
            finally:
                os.close(fd)
            if not ready:
                raise subprocess.TimeoutExpired(str(pid), timeout)
            _, status, usage = os.wait4(pid, 0)
            return status, usage
    limit = time.monotonic() + timeout
    while True:
        reaped, status, usage = os.wait4(pid, os.WNOHANG)
        if reaped:
            return status, usage
        if time.monotonic() > limit:
            raise subprocess.TimeoutExpired(str(pid), timeout)
        time.sleep(0.001)


def _on_signal(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _on_alarm(signum: int, frame: Any) -> None:
    raise Interrupted("the --time-limit passed")


# -- the operator socket, spoken directly -----------------------------------


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix socket (the operator door)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def rpc(path: str, method: str, params: dict[str, Any], timeout: float = 60.0) -> tuple[float, Any]:
    """
    One JSON-RPC call over the operator socket, on a new connection: the
    seconds from connecting to the last byte of the answer, and its result.
    """
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "A2A-Version": "1.0",
        "A2A-Extensions": REVIEW_EXTENSION,
    }
    connection = UnixHTTPConnection(path, timeout)
    try:
        started = time.perf_counter()
        connection.request("POST", "/", body, headers)
        response = connection.getresponse()
        answer = response.read()
        elapsed = time.perf_counter() - started
    finally:
        connection.close()
    document = json.loads(answer)
    if response.status != 200 or "result" not in document:
        raise BenchError(f"{method} {params}: HTTP {response.status}: {answer[:400]!r}")
    return elapsed, document["result"]


def card_ready(path: str) -> bool:
    connection = UnixHTTPConnection(path, 2.0)
    try:
        connection.request("GET", "/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def read_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes (empty if it is gone)."""
    values = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def reset_peak(pid: int) -> bool:
    """Reset a process's VmHWM to its VmRSS (Linux 4.0+); whether it could."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# -- one store -------------------------------------------------------------


@dataclass
class Timing:
    """Calls of one List query: seconds each, and the total it answered."""

    seconds: list[float]
    total: int | None

    @property
    def median_ms(self) -> float:
        return statistics.median(self.seconds) * 1000

    @property
    def p95_ms(self) -> float:
        # Nearest rank: the smallest value at or above 95 % of the calls.
        ordered = sorted(self.seconds)
        return ordered[math.ceil(0.95 * len(ordered)) - 1] * 1000

    @property
    def max_ms(self) -> float:
        return max(self.seconds) * 1000


@dataclass
class Export:
    wall_s: float
    exported: int
    cli_rss: int
    server_before: int
    server_peak: int
    size: int


@dataclass
class StoreRun:
    """Every figure taken on one store."""

    store: str
    count: int
    fill: dict[str, Any] = field(default_factory=dict)
    lists: dict[str, Timing] = field(default_factory=dict)
    fresh: dict[str, Timing] = field(default_factory=dict)
    cli: dict[str, list[Finished]] = field(default_factory=dict)
    exports: dict[str, Export] = field(default_factory=dict)
    small_exports: dict[str, Export] = field(default_factory=dict)
    small_count: int = 0
    reject: Finished | None = None
    rejected: int | None = None
    purge: Finished | None = None
    purged: int | None = None
    size_before_purge: int | None = None
    size_after_purge: int | None = None
    after_purge_matches: int | None = None
    walk_s: float | None = None
    walk_pages: int = 0
    server_peak: int = 0
    failed: str | None = None
    load: tuple[float, float] = (0.0, 0.0)


#: How many calls of each search are timed first, on the server just started.
FRESH_CALLS = 4

#: The List queries timed: name -> (label, params).
QUERIES = {
    "first": ("first page (received order, 50, with total)", {}),
    "rare": (f'--search "{RARE_WORD}" (~1 %)', {"search": RARE_WORD}),
    **{
        f"pair{n}": (f'--search "{query}" (two words)', {"search": query})
        for n, query in enumerate(PAIR_QUERIES, 1)
    },
    "status": ("--status submitted", {"status": "TASK_STATE_SUBMITTED"}),
}


#: The --scale run's List queries (issue 42 item 6): name -> (label, params).
#: Each asks what `beacon review list` asks (50, content, the total: capped
#: at 10,000 by the server); "console" what the web console's first list
#: asks (historyLength 1).
SCALE_QUERIES = {
    "first": ("first page (received order)", {}),
    "rare": (f'--search "{RARE_WORD}" (1 %)', {"search": RARE_WORD}),
    "common": ('--search "river" (common word)', {"search": "river"}),
    "the": ('--search "the" (in nearly all)', {"search": "the"}),
    "status": ("--status submitted", {"status": "TASK_STATE_SUBMITTED"}),
    "updated": ("--sort updated", {"sort": "updated"}),
    "console": ("the console's first list (historyLength 1)", {"historyLength": 1}),
}
#: Timed again after the bulk rejection, when decisions exist.
SCALE_AFTER = {
    "updated": ("--sort updated, after the rejection", {"sort": "updated"}),
    "rejected": ("--status rejected --sort updated, after", {"sort": "updated", "status": "TASK_STATE_REJECTED"}),
    "rejected_received": ("--status rejected (received order), after", {"status": "TASK_STATE_REJECTED"}),
}
#: The --scale goals, p95 in ms: (SQLite, PostgreSQL).
SCALE_GOAL_MS = {"sqlite": 50.0, "postgresql": 100.0}
SCALE_GOAL_BULK_S = 3.0
SCALE_GOAL_CONSOLE_S = 1.0


@dataclass
class ScaleRun:
    """Every figure of one store's --scale run."""

    store: str
    count: int
    fill: dict[str, Any] = field(default_factory=dict)
    lists: dict[str, Timing] = field(default_factory=dict)
    capped: dict[str, bool] = field(default_factory=dict)
    after: dict[str, Timing] = field(default_factory=dict)
    reject: Finished | None = None
    rejected: int | None = None
    walk_s: float | None = None
    console_first_s: float | None = None
    console: Timing | None = None
    plans: dict[str, str] = field(default_factory=dict)
    failed: str | None = None
    load: tuple[float, float] = (0.0, 0.0)


class Bench:
    def __init__(self, args: argparse.Namespace, procs: Processes, tmp: Path,
                 pin_server: list[str], pin_client: list[str], client_cpu: int | None) -> None:
        self.args = args
        self.procs = procs
        self.tmp = tmp
        self.pin_server = pin_server
        self.pin_client = pin_client
        self.client_cpu = client_cpu
        self.databases: list[str] = []
        self.notes: list[str] = []
        self.base_ms = int(time.time() * 1000)

    # The store, and Beacon on it.

    def make_store(self, store: str, label: str) -> tuple[str, Path]:
        """A fresh, empty store: its URL and a data directory for Beacon."""
        data = self.tmp / label
        data.mkdir(mode=0o700)
        if store == "sqlite":
            from beacon.store import sqlite_url

            return sqlite_url(str(data / "beacon.sqlite3")), data
        database = f"beacon_bench_{os.getpid()}_{label.replace('-', '_')}"
        pg_admin(f'CREATE DATABASE "{database}"')
        self.databases.append(database)
        return PG_URL.format(database=database), data

    def fill(self, url: str, count: int) -> dict[str, Any]:
        argv = [str(PYTHON), str(Path(__file__).resolve()), "--fill", url, "--count", str(count),
                "--base-ms", str(self.base_ms), "--max-batch", str(self.args.max_batch),
                "--window", str(self.args.window)]
        done = self.procs.run(argv, timeout=3600, tmp=self.tmp)
        for line in done.out.splitlines():
            if line.startswith("FILL_RESULT "):
                result: dict[str, Any] = json.loads(line[len("FILL_RESULT "):])
                result["wall_s"] = done.wall_s
                result["rss"] = done.maxrss
                return result
        raise BenchError(f"the fill failed ({done.code}):\n{(done.out + done.err)[-3000:]}")

    def start_beacon(self, url: str, data: Path) -> subprocess.Popen[Any]:
        config = data / "beacon.toml"
        text = "# bench/reader.py: no rate limit\n[limits]\nrate = 0\n"
        if url.startswith("postgresql:"):
            text += f'[store]\nurl = "{url}"\n'
        config.write_text(text)
        port = free_port()
        log = data / "twistd.log"
        argv = self.pin_server + [
            str(TWISTD), "-n", "--pidfile", str(data / "twistd.pid"),
            "beacon", "--config", str(config), "--data", str(data),
            "--http", f"tcp:{port}:interface=127.0.0.1",
        ]
        with open(log, "ab") as out:
            proc = self.procs.start(argv, stdout=out, stderr=subprocess.STDOUT, cwd=data)
        socket_path = str(data / "operator.sock")
        limit = time.monotonic() + self.procs.bound(120)
        while not (os.path.exists(socket_path) and card_ready(socket_path)):
            if proc.poll() is not None:
                raise BenchError(f"twistd beacon exited at start-up ({proc.returncode}):\n{tail(log)}")
            if time.monotonic() > limit:
                raise BenchError(f"twistd beacon did not answer on {socket_path} within 120 s:\n{tail(log)}")
            time.sleep(0.1)
        return proc

    def stop_beacon(self, proc: subprocess.Popen[Any], result: StoreRun) -> None:
        result.server_peak = max(result.server_peak, read_status(proc.pid).get("VmHWM", 0))
        self.procs.stop(proc, wait=30)

    # The measurements.

    def time_list(self, socket_path: str, params: dict[str, Any], calls: int | None = None,
                  warmup: int | None = None) -> Timing:
        params = {"sort": "received", "pageSize": 50, "includeTotal": True, **params}
        calls = self.args.calls if calls is None else calls
        warmup = self.args.warmup if warmup is None else warmup
        seconds: list[float] = []
        total: int | None = None
        with self.on_client_core():
            for n in range(warmup + calls):
                if n % 10 == 0:
                    self.procs.bound(1)  # stop here if the time is up
                elapsed, result = rpc(socket_path, "beacon.review.List", params)
                if n >= warmup:
                    seconds.append(elapsed)
                total = result.get("totalSize")
        return Timing(seconds, total)

    def time_console(self, socket_path: str) -> tuple[float, Timing]:
        """
        The web console's list, as a browser gets it: `beacon review web`
        started on the server's socket, its sign-in link spent, then its
        C{GET /api/tasks} (what the page asks first: 50, historyLength 1,
        the total). The seconds from the sign-in to the first list's last
        byte (the console's first call to Beacon), and the timing of
        further lists (a new connection each).
        """
        proc = self.procs.start(
            self.pin_client + [str(BEACON), "review", "web", "--socket", socket_path,
                               "--no-browser"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        try:
            assert proc.stdout is not None
            line = b""
            limit = time.monotonic() + self.procs.bound(60)
            while not line.endswith(b"\n"):
                if not select.select([proc.stdout], [], [], max(0.0, limit - time.monotonic()))[0]:
                    raise BenchError("beacon review web printed no sign-in link within 60 s")
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    raise BenchError(f"beacon review web exited ({proc.wait()}) before its link")
                line += chunk
            found = re.search(rb"http://127\.0\.0\.1:(\d+)(/\?token=\S+)", line)
            if found is None:
                raise BenchError(f"beacon review web printed no link: {line[:200]!r}")
            port, sign_in = int(found.group(1)), found.group(2).decode()
            started = time.perf_counter()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            connection.request("GET", sign_in)
            response = connection.getresponse()
            response.read()
            connection.close()
            cookie = (response.getheader("Set-Cookie") or "").split(";", 1)[0]
            if response.status != 303 or not cookie:
                raise BenchError(f"the console's sign-in answered {response.status}")

            def listed() -> float:
                begun = time.perf_counter()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                try:
                    connection.request("GET", "/api/tasks?pageSize=50", headers={"Cookie": cookie})
                    response = connection.getresponse()
                    body = response.read()
                finally:
                    connection.close()
                if response.status != 200 or len(json.loads(body)["tasks"]) != 50:
                    raise BenchError(f"the console's list answered {response.status}: {body[:300]!r}")
                return time.perf_counter() - begun

            with self.on_client_core():
                listed()
                first = time.perf_counter() - started
                seconds = [listed() for _ in range(self.args.calls)]
            return first, Timing(seconds, None)
        finally:
            self.procs.stop(proc)

    def walk(self, socket_path: str, search: str) -> tuple[float, int]:
        """
        Page through every submission C{search} matches as C{--matching}
        does (100 a page, no content, no total): seconds and pages.
        """
        params: dict[str, Any] = {"sort": "received", "search": search, "pageSize": 100,
                                  "historyLength": 0, "includeTotal": False}
        pages, seconds = 0, 0.0
        with self.on_client_core():
            while True:
                self.procs.bound(1)
                elapsed, page = rpc(socket_path, "beacon.review.List", params)
                seconds += elapsed
                pages += 1
                if not page.get("nextPageToken") or not page["tasks"]:
                    return seconds, pages
                params["pageToken"] = page["nextPageToken"]

    @contextlib.contextmanager
    def on_client_core(self) -> Iterator[None]:
        if self.client_cpu is None:
            yield
            return
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {self.client_cpu})
        try:
            yield
        finally:
            os.sched_setaffinity(0, before)

    def beacon_cli(self, socket_path: str, *argv: str, timeout: float = 600) -> Finished:
        return self.procs.run(
            self.pin_client + [str(BEACON), "review", *argv, "--socket", socket_path],
            timeout=timeout, tmp=self.tmp,
        )

    def export(self, server: subprocess.Popen[Any], socket_path: str, fmt: str, label: str) -> Export:
        target = self.tmp / f"{label}.{fmt}"
        before = read_status(server.pid).get("VmRSS", 0)
        if not reset_peak(server.pid):
            self.note_once("The server's VmHWM could not be reset (/proc/PID/clear_refs): "
                           "its export peaks are its peaks since start-up.")
        done = self.beacon_cli(socket_path, "export", "--format", fmt, "--output", str(target),
                               "--timeout", "120")
        peak = read_status(server.pid).get("VmHWM", 0)
        if done.code != 0:
            raise BenchError(f"review export --format {fmt} failed ({done.code}): {done.err[-2000:]}")
        match = re.search(r"exported ([\d,]+) submission", done.err)
        exported = int(match.group(1).replace(",", "")) if match else -1
        size = target.stat().st_size
        target.unlink()
        return Export(done.wall_s, exported, done.maxrss, before, peak, size)

    def note_once(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def database_size(self, store: str, url: str) -> int | None:
        if store == "sqlite":
            from beacon.store import parse_store_url

            path = parse_store_url(url).location
            return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
        database = url.rsplit("/", 1)[1]
        rows = pg_admin(f"SELECT pg_database_size('{database}')", fetch=True)
        return int(rows[0][0]) if rows else None

    def run_store(self, store: str) -> StoreRun:
        args = self.args
        result = StoreRun(store, args.count, small_count=args.count // 10)
        server: subprocess.Popen[Any] | None = None
        load_before = os.getloadavg()[0]
        try:
            # The small inbox first: its export figures are the baseline.
            url, data = self.make_store(store, f"{store}-small")
            say(f"[{store}] filling a {result.small_count:,} inbox ...")
            self.fill(url, result.small_count)
            server = self.start_beacon(url, data)
            socket_path = str(data / "operator.sock")
            for fmt in ("jsonl", "csv"):
                result.small_exports[fmt] = self.export(server, socket_path, fmt, f"{store}-small")
            self.stop_beacon(server, StoreRun(store, 0))
            server = None

            url, data = self.make_store(store, f"{store}-full")
            say(f"[{store}] filling {args.count:,} submissions ...")
            result.fill = self.fill(url, args.count)
            if store == "postgresql":
                # What autovacuum does to any live database soon after a
                # fill: without statistics the planner's choices for a
                # search are not the ones it makes in service.
                started = time.perf_counter()
                pg_admin("VACUUM ANALYZE", database=url.rsplit("/", 1)[1])
                result.fill["vacuum_s"] = time.perf_counter() - started
            result.fill["size"] = self.database_size(store, url)
            say(f"[{store}]   {result.fill['append_s']:.1f} s "
                f"({args.count / result.fill['append_s']:,.0f} appends/s)")
            server = self.start_beacon(url, data)
            socket_path = str(data / "operator.sock")

            # A server just started: each search's first calls, before any
            # other search (PostgreSQL plans a statement for its parameters
            # until it has been run often enough on a connection to settle
            # on a generic plan).
            for name, (label, params) in QUERIES.items():
                if "search" in params:
                    timing = self.time_list(socket_path, params, calls=FRESH_CALLS, warmup=0)
                    result.fresh[name] = timing
                    say(f"[{store}] List {label}, fresh server: median {timing.median_ms:.1f} ms, "
                        f"max {timing.max_ms:.1f} ms")
            for name, (label, params) in QUERIES.items():
                timing = self.time_list(socket_path, params)
                result.lists[name] = timing
                say(f"[{store}] List {label}: median {timing.median_ms:.1f} ms, "
                    f"p95 {timing.p95_ms:.1f} ms, total {timing.total}")
            for name, argv in (("help", ("list", "--help")), ("list", ("list",)),
                               ("search", ("list", "--search", RARE_WORD))):
                runs = []
                for _ in range(args.cli_runs):
                    done = self.beacon_cli(socket_path, *argv, timeout=120)
                    if done.code != 0:
                        raise BenchError(f"beacon review {' '.join(argv)} failed ({done.code}): {done.err[-2000:]}")
                    runs.append(done)
                result.cli[name] = runs
                say(f"[{store}] beacon review {' '.join(argv)}: "
                    f"median {statistics.median(r.wall_s for r in runs) * 1000:.0f} ms")

            for fmt in ("jsonl", "csv"):
                exported = result.exports[fmt] = self.export(server, socket_path, fmt, f"{store}-full")
                say(f"[{store}] export {fmt}: {exported.wall_s:.1f} s, CLI peak "
                    f"{mib(exported.cli_rss)}, server peak {mib(exported.server_peak)}")

            result.walk_s, result.walk_pages = self.walk(socket_path, BULK_PHRASE)
            done = self.beacon_cli(socket_path, "reject", "--matching", "--search", BULK_PHRASE,
                                   "--yes", "--json", "--timeout", "600", timeout=1800)
            result.reject = done
            if done.code != 0:
                raise BenchError(f"review reject --matching failed ({done.code}): {done.err[-2000:]}")
            result.rejected = len(json.loads(done.out)["decided"])
            say(f"[{store}] reject --matching --search {BULK_PHRASE!r}: "
                f"{result.rejected:,} in {done.wall_s:.2f} s")

            result.size_before_purge = self.database_size(store, url)
            before = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
            when = before.strftime("%Y-%m-%dT%H:%M:%S.") + f"{before.microsecond // 1000:03d}Z"
            while dt.datetime.now(dt.timezone.utc) < before:
                time.sleep(0.05)
            done = self.beacon_cli(socket_path, "purge", "--decided-before", when, "--yes",
                                   "--json", "--timeout", "600", timeout=1800)
            result.purge = done
            if done.code != 0:
                raise BenchError(f"review purge failed ({done.code}): {done.err[-2000:]}")
            result.purged = json.loads(done.out)["purged"]
            result.size_after_purge = self.database_size(store, url)
            say(f"[{store}] purge: {result.purged:,} in {done.wall_s:.2f} s")
            _, page = rpc(socket_path, "beacon.review.List",
                          {"search": BULK_PHRASE, "pageSize": 1, "includeTotal": True})
            result.after_purge_matches = page.get("totalSize")
        except BenchError as e:
            result.failed = str(e).strip()
            say(f"[{store}] failed: {e}")
        finally:
            if server is not None:
                self.stop_beacon(server, result)
            result.load = (load_before, os.getloadavg()[0])
        return result

    def time_scale(self, socket_path: str, params: dict[str, Any]) -> tuple[Timing, bool]:
        """L{time_list}, and whether the answer's total was capped."""
        timing = self.time_list(socket_path, params)
        _, answer = rpc(socket_path, "beacon.review.List",
                        {"sort": "received", "pageSize": 50, "includeTotal": True, **params})
        if "totalMoreThan" in answer:
            timing.total = answer["totalMoreThan"]
            return timing, True
        return timing, False

    def run_scale(self, store: str) -> ScaleRun:
        """
        The --scale run: fill, the List queries, the bulk rejection of the
        rare word's matches (count/100) as `review reject --matching` makes
        it, and the status order again once decisions exist.
        """
        args = self.args
        result = ScaleRun(store, args.count)
        server: subprocess.Popen[Any] | None = None
        load_before = os.getloadavg()[0]
        try:
            url, data = self.make_store(store, f"{store}-scale")
            say(f"[{store}] filling {args.count:,} submissions ...")
            result.fill = self.fill(url, args.count)
            if store == "postgresql":
                started = time.perf_counter()
                pg_admin("VACUUM ANALYZE", database=url.rsplit("/", 1)[1])
                result.fill["vacuum_s"] = time.perf_counter() - started
            result.fill["size"] = self.database_size(store, url)
            say(f"[{store}]   {result.fill['append_s']:.1f} s "
                f"({args.count / result.fill['append_s']:,.0f} appends/s), "
                f"{mib(result.fill['size'])}")
            server = self.start_beacon(url, data)
            socket_path = str(data / "operator.sock")
            for name, (label, params) in SCALE_QUERIES.items():
                timing, capped = self.time_scale(socket_path, params)
                result.lists[name], result.capped[name] = timing, capped
                say(f"[{store}] List {label}: median {timing.median_ms:.1f} ms, "
                    f"p95 {timing.p95_ms:.1f} ms, total {'more than ' if capped else ''}{timing.total}")
            result.console_first_s, result.console = self.time_console(socket_path)
            say(f"[{store}] the console's first list: {result.console_first_s * 1000:.1f} ms from the "
                f"sign-in; then median {result.console.median_ms:.1f} ms, "
                f"p95 {result.console.p95_ms:.1f} ms")
            result.walk_s, _ = self.walk(socket_path, RARE_WORD)
            done = self.beacon_cli(socket_path, "reject", "--matching", "--search", RARE_WORD,
                                   "--yes", "--json", "--timeout", "600", timeout=1800)
            result.reject = done
            if done.code != 0:
                raise BenchError(f"review reject --matching failed ({done.code}): {done.err[-2000:]}")
            result.rejected = len(json.loads(done.out)["decided"])
            say(f"[{store}] reject --matching --search {RARE_WORD!r}: "
                f"{result.rejected:,} in {done.wall_s:.2f} s (finding them alone: {result.walk_s:.2f} s)")
            if store == "postgresql":
                pg_admin("ANALYZE", database=url.rsplit("/", 1)[1])
            for name, (label, params) in SCALE_AFTER.items():
                timing, capped = self.time_scale(socket_path, params)
                result.after[name], result.capped["after-" + name] = timing, capped
                say(f"[{store}] List {label}: median {timing.median_ms:.1f} ms, "
                    f"p95 {timing.p95_ms:.1f} ms, total {'more than ' if capped else ''}{timing.total}")
            result.fill["size_after"] = self.database_size(store, url)
        except BenchError as e:
            result.failed = str(e).strip()
            say(f"[{store}] failed: {e}")
        finally:
            if server is not None:
                self.procs.stop(server, wait=30)
            result.load = (load_before, os.getloadavg()[0])
        return result

    def drop_databases(self) -> None:
        """Drop every database made here, waiting (bounded) for PostgreSQL to answer."""
        limit = time.monotonic() + 60
        while self.databases:
            database = self.databases[0]
            try:
                pg_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
                self.databases.pop(0)
            except BenchError as e:
                if time.monotonic() > limit:
                    say(f"bench/reader.py: could not drop {', '.join(self.databases)}: {e}")
                    return
                time.sleep(1)


def pg_admin(sql: str, fetch: bool = False, database: str = "postgres") -> list[tuple[Any, ...]]:
    """Run one statement as postgres (on the maintenance database, or C{database})."""
    import psycopg

    url = PG_URL.format(database=database)
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as connection:
            cursor = connection.execute(sql)
            return cursor.fetchall() if fetch else []
    except psycopg.Error as e:
        raise BenchError(f"PostgreSQL: {sql}: {e}") from None


def postgres_version() -> str | None:
    try:
        rows = pg_admin("SHOW server_version", fetch=True)
    except Exception:
        return None
    return f"PostgreSQL {rows[0][0]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 25) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


# -- the report ------------------------------------------------------------


def mib(value: int | None) -> str:
    return "n/a" if not value else f"{value / 2**20:.1f} MiB"


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def report(runs: list[StoreRun], meta: dict[str, str], args: argparse.Namespace) -> str:
    smoke = args.quick or args.count != 100_000
    title = "Beacon benchmark: the reader's side"
    if smoke:
        title += f": SMOKE RUN ({args.count:,} submissions; figures not comparable)"
    lines = [f"# {title}", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items()]
    lines += [""]
    names = [r.store for r in runs]
    head = "| measurement | " + " | ".join(names) + " |"
    rule = "|---|" + "---:|" * len(names)

    def row(label: str, cell: Any) -> str:
        cells = []
        for r in runs:
            try:
                cells.append(cell(r))
            except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError,
                    statistics.StatisticsError):
                cells.append("n/a")
        return f"| {label} | " + " | ".join(cells) + " |"

    count = args.count
    lines += ["## Filling the store", "",
              (f"{count:,} submissions written through the store's append (group commit, "
               f"at most {args.max_batch} writes a transaction, {args.window} appends in flight), "
               "search-index triggers included; the child process generating them "
               "was not pinned."), "", head, rule]
    lines.append(row("append time", lambda r: f"{r.fill['append_s']:.1f} s"))
    lines.append(row("appends per second", lambda r: f"{r.count / r.fill['append_s']:,.0f}"))
    lines.append(row("content stored", lambda r: mib(r.fill["bytes"])))
    lines.append(row("database size after the fill", lambda r: mib(r.fill["size"])))
    lines.append(row("then VACUUM ANALYZE (PostgreSQL: what autovacuum does)",
                     lambda r: f"{r.fill['vacuum_s']:.1f} s" if "vacuum_s" in r.fill else "-"))
    lines.append("")

    lines += ["## beacon.review.List, the server's answer", "",
              (f"Timed by bench/reader.py over the operator socket: raw HTTP/1.1, a new connection "
               f"per call (as the CLI makes them), the answer read whole; {args.calls} calls after "
               f"{args.warmup} warm-up calls, one at a time; median / p95 / max in ms. Every call "
               "asks for 50 tasks in received order with their content and the total "
               "(what `beacon review list` asks). Before any decision: all are submitted. "
               f"\"fresh server\": the first {FRESH_CALLS} calls of each search, made first, in "
               "this order, on the server just started (median / max)."),
              "", head, rule]
    for name, (label, _) in QUERIES.items():
        lines.append(row(label, lambda r, n=name: (
            f"{ms(r.lists[n].median_ms)} / {ms(r.lists[n].p95_ms)} / {ms(r.lists[n].max_ms)}")))
        if name in next((r.fresh for r in runs if r.fresh), {}):
            lines.append(row("&nbsp;&nbsp;fresh server", lambda r, n=name: (
                f"{ms(r.fresh[n].median_ms)} / {ms(r.fresh[n].max_ms)}")))
        lines.append(row("&nbsp;&nbsp;matching (totalSize)", lambda r, n=name: f"{r.lists[n].total:,}"))
    lines.append("")

    lines += ["## The commands, wall time", "",
              (f"Each `beacon review ...` command from start to exit (Python's start-up and "
               f"imports included: see `list --help`), median of {args.cli_runs}, pinned to the "
               "client core."), "", head, rule]
    for name, label in (("help", "`review list --help` (start-up only, no call)"),
                        ("list", "`review list` (first page)"),
                        ("search", f"`review list --search {RARE_WORD}`")):
        lines.append(row(label, lambda r, n=name: f"{statistics.median(x.wall_s for x in r.cli[n]) * 1000:.0f} ms"))
    lines.append(row("&nbsp;&nbsp;the CLI's peak RSS (`review list`)",
                     lambda r: mib(max(x.maxrss for x in r.cli["list"]))))
    lines.append(row(f'`review reject --matching --search "{BULK_PHRASE}" --yes`',
                     lambda r: f"{r.reject.wall_s:.2f} s"))
    lines.append(row("&nbsp;&nbsp;rejected", lambda r: f"{r.rejected:,}"))
    lines.append(row("&nbsp;&nbsp;of which finding them: the same List calls, timed alone",
                     lambda r: f"{r.walk_s:.2f} s ({r.walk_pages} pages)"))
    lines.append(row("`review purge --decided-before <now> --yes`", lambda r: f"{r.purge.wall_s:.2f} s"))
    lines.append(row("&nbsp;&nbsp;purged", lambda r: f"{r.purged:,}"))
    lines.append(row(f'&nbsp;&nbsp;`--search "{BULK_PHRASE}"` matches after the purge',
                     lambda r: f"{r.after_purge_matches:,}"))
    lines.append(row("&nbsp;&nbsp;database size before / after the purge",
                     lambda r: f"{mib(r.size_before_purge)} / {mib(r.size_after_purge)}"))
    lines.append("")

    small = count // 10
    lines += ["## Export", "",
              (f"`beacon review export --format F --output FILE` of the whole inbox, on a {count:,} "
               f"inbox and on a {small:,} one. The CLI's peak RSS is its ru_maxrss (wait4); the "
               "server's peak is its VmHWM during the export (reset just before it through "
               "/proc/PID/clear_refs), with its RSS just before."), "", head, rule]
    for fmt in ("jsonl", "csv"):
        lines.append(row(f"{fmt}, {count:,}: wall time", lambda r, f=fmt: (
            f"{r.exports[f].wall_s:.1f} s ({r.exports[f].exported / r.exports[f].wall_s:,.0f}/s)")))
        lines.append(row("&nbsp;&nbsp;exported, file size",
                         lambda r, f=fmt: f"{r.exports[f].exported:,}, {mib(r.exports[f].size)}"))
        lines.append(row(f"&nbsp;&nbsp;CLI peak RSS: {count:,} / {small:,} inbox",
                         lambda r, f=fmt: f"{mib(r.exports[f].cli_rss)} / {mib(r.small_exports[f].cli_rss)}"))
        lines.append(row(f"&nbsp;&nbsp;server peak (RSS before): {count:,} / {small:,} inbox",
                         lambda r, f=fmt: (f"{mib(r.exports[f].server_peak)} ({mib(r.exports[f].server_before)}) / "
                                           f"{mib(r.small_exports[f].server_peak)} ({mib(r.small_exports[f].server_before)})")))
        lines.append(row(f"&nbsp;&nbsp;{small:,} inbox: wall time", lambda r, f=fmt: f"{r.small_exports[f].wall_s:.1f} s"))
    lines.append(row("server's peak RSS over the whole run (VmHWM at stop)", lambda r: mib(r.server_peak)))
    lines.append("")

    lines += goals(runs)
    notes = list(meta_notes(runs)) + args.notes
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


def scale_report(runs: list[ScaleRun], meta: dict[str, str], args: argparse.Namespace) -> str:
    """The --scale run's markdown."""
    counts = ", ".join(f"{r.store} {r.count:,}" for r in runs)
    lines = [f"# Beacon benchmark: the reader's side at scale ({counts})", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items()] + [""]
    names = [f"{r.store} ({r.count:,})" for r in runs]
    head = "| measurement | " + " | ".join(names) + " |"
    rule = "|---|" + "---:|" * len(names)

    def row(label: str, cell: Any) -> str:
        cells = []
        for r in runs:
            try:
                cells.append(cell(r))
            except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError):
                cells.append("n/a")
        return f"| {label} | " + " | ".join(cells) + " |"

    lines += ["## Filling the store", "",
              (f"Written through the store's own append (group commit, at most {args.max_batch} "
               f"writes a transaction, {args.window} appends in flight), as in service."),
              "", head, rule]
    lines.append(row("append time", lambda r: f"{r.fill['append_s']:.1f} s"))
    lines.append(row("appends per second", lambda r: f"{r.count / r.fill['append_s']:,.0f}"))
    lines.append(row("content stored", lambda r: mib(r.fill["bytes"])))
    lines.append(row("database size after the fill", lambda r: mib(r.fill["size"])))
    lines.append(row("&nbsp;&nbsp;bytes per submission", lambda r: f"{r.fill['size'] / r.count:,.0f}"))
    lines.append(row("&nbsp;&nbsp;of which content", lambda r: f"{r.fill['bytes'] / r.count:,.0f}"))
    lines.append(row("then VACUUM ANALYZE", lambda r: f"{r.fill['vacuum_s']:.1f} s" if "vacuum_s" in r.fill else "-"))
    lines.append("")
    lines += ["## beacon.review.List, the server's answer", "",
              (f"Over the operator socket, a new connection per call; {args.calls} calls after "
               f"{args.warmup} warm-up; median / p95 / max in ms; 50 tasks with content and the "
               "total (counted up to 10,000: \"> 10,000\" is totalMoreThan)."), "", head, rule]
    for name, (label, _) in SCALE_QUERIES.items():
        lines.append(row(label, lambda r, n=name: (
            f"{ms(r.lists[n].median_ms)} / {ms(r.lists[n].p95_ms)} / {ms(r.lists[n].max_ms)}")))
        lines.append(row("&nbsp;&nbsp;total", lambda r, n=name: (
            f"> {r.lists[n].total:,}" if r.capped[n] else f"{r.lists[n].total:,}")))
    lines.append(row("`beacon review web`: its first list (GET /api/tasks), from the sign-in",
                     lambda r: f"{r.console_first_s * 1000:.1f} ms"))
    lines.append(row("&nbsp;&nbsp;then each list (GET /api/tasks)", lambda r: (
        f"{ms(r.console.median_ms)} / {ms(r.console.p95_ms)} / {ms(r.console.max_ms)}")))
    lines.append(row(f'`review reject --matching --search {RARE_WORD} --yes` (wall)',
                     lambda r: f"{r.reject.wall_s:.2f} s"))
    lines.append(row("&nbsp;&nbsp;rejected", lambda r: f"{r.rejected:,}"))
    lines.append(row("&nbsp;&nbsp;of which finding them (the List pages alone)", lambda r: f"{r.walk_s:.2f} s"))
    for name, (label, _) in SCALE_AFTER.items():
        lines.append(row(label, lambda r, n=name: (
            f"{ms(r.after[n].median_ms)} / {ms(r.after[n].p95_ms)} / {ms(r.after[n].max_ms)}")))
        lines.append(row("&nbsp;&nbsp;total", lambda r, n=name: (
            f"> {r.after[n].total:,}" if r.capped["after-" + n] else f"{r.after[n].total:,}")))
    lines.append(row("database size at the end", lambda r: mib(r.fill["size_after"])))
    lines.append("")
    lines += ["## Goals (issue 42 item 6)", "", "| goal | store | figure | met |", "|---|---|---:|---|"]
    for r in runs:
        goal = SCALE_GOAL_MS[r.store]
        for name, (label, _) in SCALE_QUERIES.items():
            t = r.lists.get(name)
            if name == "console":
                target, shown = SCALE_GOAL_CONSOLE_S * 1000, f"< {SCALE_GOAL_CONSOLE_S:.0f} s"
            else:
                target, shown = goal, f"< {goal:.0f} ms"
            figure = f"p95 {t.p95_ms:.1f} ms" if t else "n/a"
            met = "n/a" if t is None else ("yes" if t.p95_ms < target else "**NO**")
            lines.append(f"| {label} {shown} | {r.store} ({r.count:,}) | {figure} | {met} |")
        first = r.console_first_s
        lines.append(f"| `beacon review web`'s first list, from the sign-in, < {SCALE_GOAL_CONSOLE_S:.0f} s | "
                     f"{r.store} ({r.count:,}) | "
                     + (f"{first * 1000:.1f} ms | {'yes' if first < SCALE_GOAL_CONSOLE_S else '**NO**'} |"
                        if first is not None else "n/a | n/a |"))
        for name, (label, _) in SCALE_AFTER.items():
            t = r.after.get(name)
            figure = f"p95 {t.p95_ms:.1f} ms" if t else "n/a"
            met = "n/a" if t is None else ("yes" if t.p95_ms < goal else "**NO**")
            lines.append(f"| {label} < {goal:.0f} ms | {r.store} ({r.count:,}) | {figure} | {met} |")
        bulk = r.reject.wall_s if r.reject and r.rejected else None
        lines.append(f"| bulk reject of {r.count // 100:,} < {SCALE_GOAL_BULK_S:.0f} s | {r.store} ({r.count:,}) | "
                     + (f"{bulk:.2f} s | {'yes' if bulk < SCALE_GOAL_BULK_S else '**NO**'} |" if bulk else "n/a | n/a |"))
    lines.append("")
    notes = [f"{r.store}: the run stopped early: {r.failed}" for r in runs if r.failed] + args.notes
    notes.append("One-minute load average at the start and end of each store's part: "
                 + "; ".join(f"{r.store} {r.load[0]:.2f} and {r.load[1]:.2f}" for r in runs) + ".")
    lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


def goals(runs: list[StoreRun]) -> list[str]:
    """Issue 18's goals, checked against this run's figures (p95 of the server's answer)."""
    lines = ["## Goals (issue 18)", "",
             ("List goals are judged on the p95 of the server's answer (its median beside it); "
              "on a fresh server, on the median of a search's first calls."), "",
             "| goal | store | figure | met |", "|---|---|---:|---|"]

    def check(goal: str, store: str, value: float | None, target: float, shown: str) -> None:
        if value is None:
            lines.append(f"| {goal} | {store} | n/a | n/a |")
        else:
            lines.append(f"| {goal} | {store} | {shown} | {'yes' if value < target else '**NO**'} |")

    for r in runs:
        checks = [("first", f"`review list` first page < {GOAL_FIRST_PAGE_MS:.0f} ms", GOAL_FIRST_PAGE_MS),
                  ("rare", f"`review list --search {RARE_WORD}` < {GOAL_SEARCH_MS:.0f} ms", GOAL_SEARCH_MS)]
        checks += [(f"pair{n}", f'`review list --search "{query}"` < {GOAL_SEARCH_MS:.0f} ms', GOAL_SEARCH_MS)
                   for n, query in enumerate(PAIR_QUERIES, 1)]
        for name, goal, target in checks:
            timing = r.lists.get(name)
            check(goal, r.store, timing.p95_ms if timing else None, target,
                  f"p95 {timing.p95_ms:.1f} ms (median {timing.median_ms:.1f})" if timing else "")
            fresh = r.fresh.get(name)
            if fresh is not None:
                check(goal + ", fresh server", r.store, fresh.median_ms, target,
                      f"median {fresh.median_ms:.1f} ms (max {fresh.max_ms:.1f})")
        check(f"bulk reject of {r.count // 10:,} < {GOAL_BULK_S:.0f} s", r.store,
              r.reject.wall_s if r.reject and r.rejected else None, GOAL_BULK_S,
              f"{r.reject.wall_s:.2f} s" if r.reject else "")
    lines.append("")
    return lines


def meta_notes(runs: list[StoreRun]) -> Iterator[str]:
    yield ("One-minute load average at the start and the end of each store's part (2 on two "
           "cores: something else is using the machine): "
           + "; ".join(f"{r.store} {r.load[0]:.2f} and {r.load[1]:.2f}" for r in runs) + ".")
    for r in runs:
        if r.failed:
            yield f"{r.store}: the run stopped early: {r.failed}"
        if r.rejected is not None and r.rejected != r.count // 10:
            yield f"{r.store}: {r.rejected:,} rejected, not {r.count // 10:,}"
        if r.purged is not None and r.purged != r.count // 10:
            yield f"{r.store}: {r.purged:,} purged, not {r.count // 10:,}"
        for fmt, e in list(r.exports.items()) + list(r.small_exports.items()):
            if e.exported not in (r.count, r.small_count):
                yield f"{r.store}: an {fmt} export wrote {e.exported:,} submissions"


# -- main ------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/reader.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stores", default=",".join(STORES), help="sqlite,postgresql [both]")
    parser.add_argument("--count", type=int, default=None, help="submissions in the inbox [100000]")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 5,000 submissions, 10 calls a query, 1 run a command")
    parser.add_argument("--calls", type=int, default=None, help="timed List calls per query [50]")
    parser.add_argument("--warmup", type=int, default=3, help="untimed List calls before them [3]")
    parser.add_argument("--cli-runs", type=int, default=None, help="runs of each timed `review list` [5]")
    parser.add_argument("--max-batch", type=int, default=2048, help="the fill's store max_batch [2048]")
    parser.add_argument("--window", type=int, default=8192, help="the fill's appends in flight [8192]")
    parser.add_argument("--time-limit", type=float, default=90.0, help="stop after this many minutes [90]")
    parser.add_argument("--out", nargs="?", const="", default=None, metavar="FILE",
                        help="write the table as markdown (default file: bench/results/<date>-reader.md)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin with taskset")
    parser.add_argument("--scale", action="store_true",
                        help="the large-inbox run (issue 42 item 6): fill, List queries, the web "
                             "console's list (`beacon review web`), bulk reject of count/100; no "
                             "export or purge")
    parser.add_argument("--pg-count", type=int, default=None,
                        help="with --scale: PostgreSQL's inbox size, if not --count")
    parser.add_argument("--keep", action="store_true",
                        help="keep the stores (temp dir, PostgreSQL databases) for a look afterwards")
    # The fill, run by the bench in a child process.
    parser.add_argument("--fill", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--base-ms", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.count is None:
        args.count = 5_000 if args.quick else 100_000
    if args.calls is None:
        args.calls = 10 if args.quick else 50
    if args.cli_runs is None:
        args.cli_runs = 1 if args.quick else 5
    args.store_list = [s.strip() for s in args.stores.split(",") if s.strip()]
    for store in args.store_list:
        if store not in STORES:
            parser.error(f"unknown store {store!r} (known: {', '.join(STORES)})")
    if args.count < 100 or args.calls < 1 or args.cli_runs < 1 or args.warmup < 0:
        parser.error("--count at least 100, --calls and --cli-runs at least 1")
    args.notes = []
    return args


def pinning(args: argparse.Namespace) -> tuple[list[str], list[str], int | None, str]:
    taskset = shutil.which("taskset")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    if args.no_pin:
        return [], [], None, "off (--no-pin)"
    if not taskset:
        args.notes.append("taskset not found: the server and the clients were not pinned to cores.")
        return [], [], None, "off (no taskset)"
    if len(cpus) < 2:
        args.notes.append("fewer than 2 usable cores: nothing was pinned.")
        return [], [], None, "off (one core)"
    server, client = cpus[0], cpus[1]
    return ([taskset, "-c", str(server)], [taskset, "-c", str(client)], client,
            f"twistd beacon on core {server}; the timed calls and the commands on core {client} "
            "(taskset); PostgreSQL and the fill not pinned")


def main(argv: list[str]) -> int:
    program_start = time.monotonic()
    args = parse_args(argv)
    if args.fill:
        return fill_main(args)
    for path in (PYTHON, TWISTD, BEACON):
        if not path.exists():
            say(f"bench/reader.py: {path} is missing: run `make install` first")
            return 1
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, args.time_limit * 60 + 30)  # the hard stop
    procs = Processes(time.monotonic() + args.time_limit * 60)
    tmp = Path(tempfile.mkdtemp(prefix="beacon-reader-"))
    bench: Bench | None = None
    try:
        pin_server, pin_client, client_cpu, pin_text = pinning(args)
        pg = postgres_version() if "postgresql" in args.store_list else None
        if "postgresql" in args.store_list and pg is None:
            args.notes.append("PostgreSQL does not answer on 127.0.0.1:5432 as user postgres "
                              "(`make postgres` starts a local cluster): not run.")
            args.store_list.remove("postgresql")
        bench = Bench(args, procs, tmp, pin_server, pin_client, client_cpu)
        say(f"bench/reader.py: {args.count:,} submissions on {', '.join(args.store_list)}; "
            f"pinning: {pin_text}")
        load_before = os.getloadavg()[0]
        scale_runs: list[ScaleRun] = []
        runs: list[StoreRun] = []
        if args.scale:
            count = args.count
            for store in args.store_list:
                args.count = args.pg_count if store == "postgresql" and args.pg_count else count
                scale_runs.append(bench.run_scale(store))
            args.count = count
        else:
            runs = [bench.run_store(store) for store in args.store_list]
        load_after = os.getloadavg()[0]
        args.notes.extend(bench.notes)
        import twisted

        import beacon

        meta = {
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} cores ({_cpu_model()}), {platform.system()} {platform.release()}; "
                       f"load average {load_before:.2f} at start, {load_after:.2f} at end",
            "pinning": pin_text,
            "time": f"{_span(time.monotonic() - program_start)} in all",
            "corpus": (f"{args.count:,} submissions, seed {SEED}: half text, half structured; "
                       f"{VOCABULARY.__len__()} words, Zipf-like; \"{BULK_PHRASE}\" in {args.count // 10:,}, "
                       f"\"{RARE_WORD}\" in {args.count // 100:,}; received over {SPAN_DAYS} days"),
            "beacon": (f"twistd -n beacon, [limits] rate = 0, default durability; beacon {beacon.__version__} "
                       f"on Twisted {twisted.__version__}, Python {platform.python_version()}"),
            "stores": "; ".join(
                ([f"SQLite {sqlite3.sqlite_version} (temp data dir)"] if "sqlite" in args.store_list else [])
                + ([f"{pg} on 127.0.0.1:5432 (its own settings), a fresh database"] if pg and "postgresql" in args.store_list else [])
            ),
        }
        if args.scale:
            meta["corpus"] = meta["corpus"].replace(f"{args.count:,} submissions, ", "")
        text = scale_report(scale_runs, meta, args) if args.scale else report(runs, meta, args)
        say("")
        say(text)
        if args.out is not None:
            path = Path(args.out) if args.out else BENCH / "results" / f"{dt.date.today().isoformat()}-reader.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")
            say(f"wrote {path}")
        return 1 if any(r.failed for r in [*runs, *scale_runs]) else 0
    except BenchError as e:
        say(f"bench/reader.py: {e}")
        return 1
    except (KeyboardInterrupt, Interrupted) as e:
        say(f"\nbench/reader.py: interrupted ({e or 'SIGINT'}); stopping everything it started")
        return 130
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        procs.stop_all()
        if args.keep:
            kept = ", ".join(bench.databases) if bench is not None else ""
            say(f"kept {tmp}" + (f" and the databases {kept}" if kept else ""))
        else:
            if bench is not None:
                bench.drop_databases()
            shutil.rmtree(tmp, ignore_errors=True)


def _span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
