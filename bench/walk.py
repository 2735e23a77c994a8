"""
The walk of one request through Beacon: every function of Beacon's that
runs for it, in order, as Python's profiler sees them (a call, or a
generator or coroutine resumed), with the files it crosses.

    .venv/bin/python bench/walk.py send          # one SendMessage over HTTP
    .venv/bin/python bench/walk.py review-list   # one `beacon review list`
    .venv/bin/python bench/walk.py send --steps  # the counts only
    .venv/bin/python bench/walk.py send --files  # a line for each run of steps in one file
    .venv/bin/python bench/walk.py send --update-docs  # write it into docs/explanation/architecture.rst

send: one JSON-RPC SendMessage on a kept-alive connection to Beacon's
public site (BeaconSite, the direct channel, the public policy over the
in-memory store), from the bytes arriving to the receipt written, after
one request to warm the caches up, as ``bench/inprocess.py send`` runs it.

review-list: the ``beacon review list`` command, from its parsed command
line to the table printed, against an operator door on a unix socket in the
same process (the reactor's, over the in-memory store with one
submission): the command line's side and the door's, in the order they run.

A step is one entry into a function of ``beacon/`` (a comprehension's
frame is its function's, not a step); the figures printed
after the walk are the steps (and those before the first step into
``beacon/protocol``, the core), the files they cross (a change of file from
one step to the next) and the files and packages they touch.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any, Callable

import beacon

ROOT = str(Path(beacon.__file__).parent) + os.sep
#: The frames of comprehensions and generator expressions: a function's
#: own expressions, not steps of the walk.
COMPREHENSIONS = frozenset({"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"})


class Recorder:
    """The steps: (depth, file, function) of each entry into Beacon's code."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, str, str]] = []
        self._depth = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self._depth += 1
            filename = frame.f_code.co_filename
            if filename.startswith(ROOT) and frame.f_code.co_name not in COMPREHENSIONS:
                self.steps.append((self._depth, filename[len(ROOT):], frame.f_code.co_qualname))
        elif event == "return":
            self._depth -= 1

    def start(self) -> None:
        self._depth = 0
        sys.setprofile(self)

    def stop(self) -> None:
        sys.setprofile(None)


def summary(steps: list[tuple[int, str, str]]) -> dict[str, int]:
    files = [f for _, f, _ in steps]
    crossings = sum(1 for a, b in zip(files, files[1:]) if a != b)
    core = next((n for n, f in enumerate(files) if f.startswith("protocol" + os.sep)), len(files))
    before = files[:core]
    return {
        "steps": len(steps),
        "steps before the protocol core": core,
        "file crossings before it": sum(1 for a, b in zip(before, before[1:]) if a != b),
        "file crossings": crossings,
        "files": len(set(files)),
        "packages": len({f.rpartition(os.sep)[0] or f for f in files}),
    }


def runs(steps: list[tuple[int, str, str]]) -> list[tuple[str, list[str]]]:
    """The walk as runs of steps in one file: (file, its functions in order)."""
    found: list[tuple[str, list[str]]] = []
    for _, filename, function in steps:
        if found and found[-1][0] == filename:
            if function not in found[-1][1]:
                found[-1][1].append(function)
        else:
            found.append((filename, [function]))
    return found


def show(steps: list[tuple[int, str, str]], counts_only: bool, by_file: bool = False) -> None:
    if by_file:
        for number, (filename, functions) in enumerate(runs(steps), 1):
            print(f"{number:3} {filename}: {', '.join(functions)}")
        print()
    elif not counts_only:
        low = min((d for d, _, _ in steps), default=0)
        for number, (depth, filename, function) in enumerate(steps, 1):
            print(f"{number:4} {'  ' * min(depth - low, 30)}beacon/{filename}:{function}")
        print()
    for name, value in summary(steps).items():
        print(f"{name}: {value}")
    if not counts_only and not by_file:
        counted = Counter(f for _, f, _ in steps)
        print("steps by file:", ", ".join(f"{f} {n}" for f, n in counted.most_common()))


def request(n: int) -> bytes:
    """A JSON-RPC SendMessage of a short text, numbered C{n}."""
    body = (
        b'{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":'
        b'{"messageId":"walk-%d","role":"ROLE_USER","parts":[{"text":"Hello."}]}}}' % (n, n)
    )
    return (
        b"POST /a2a/v1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
        b"Content-Type: application/json\r\nA2A-Version: 1.0\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body


def public_channel(store: Any, clock: Any) -> tuple[Any, Any]:
    """A connection to Beacon's public site over C{store}, and its transport."""
    from twisted.internet.address import IPv4Address
    from twisted.internet.testing import StringTransport

    from beacon.bindings.http import BeaconSite, Container
    from beacon.config import build_config
    from beacon.service import beacon_resources

    config = build_config({})
    resources = beacon_resources(config, store, clock)
    resources.publish("http://127.0.0.1:8080")
    site = BeaconSite(resources.mount(Container()), clock=clock, **config.limits.site_options())
    peer = IPv4Address("TCP", "127.0.0.1", 40000)
    channel = site.buildProtocol(peer)
    transport = StringTransport(peerAddress=peer, hostAddress=IPv4Address("TCP", "127.0.0.1", 8080))
    channel.makeConnection(transport)
    return channel, transport


def walk_send() -> list[tuple[int, str, str]]:
    from twisted.internet.error import ConnectionDone
    from twisted.internet.task import Clock
    from twisted.python.failure import Failure

    from beacon.testing import MemoryStore

    clock = Clock()
    clock.advance(1_800_000_000)
    channel, transport = public_channel(MemoryStore(), clock)
    channel.dataReceived(request(0))
    clock.advance(0.001)
    transport.clear()
    recorder = Recorder()
    recorder.start()
    channel.dataReceived(request(1))
    clock.advance(0.001)
    recorder.stop()
    assert b"TASK_STATE_SUBMITTED" in transport.value(), transport.value()
    channel.connectionLost(Failure(ConnectionDone()))
    return recorder.steps


def walk_review_list() -> list[tuple[int, str, str]]:
    from twisted.internet import reactor
    from twisted.internet.defer import Deferred

    from beacon.bindings.operator import PeerCheckedFactory
    from beacon.cli import parse_args
    from beacon.cli._review import run
    from beacon.intake import OperatorPolicy
    from beacon.config import build_config
    from beacon.service import operator_door, operator_site
    from beacon.testing import MemoryStore

    recorder = Recorder()
    store = MemoryStore()
    channel, transport = public_channel(store, reactor)
    channel.dataReceived(request(0))
    assert b"TASK_STATE_SUBMITTED" in transport.value(), transport.value()
    outcome: list[Any] = []

    async def main() -> None:
        door = operator_door(OperatorPolicy(store, reactor), reactor)
        site = operator_site(door.root, build_config({}), reactor)
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "operator.sock")
            port = reactor.listenUNIX(path, PeerCheckedFactory(site, path), mode=0o600)
            out, err = io.StringIO(), io.StringIO()
            args = parse_args(["review", "list", "--socket", path])
            recorder.start()
            try:
                code = await run(reactor, args, out, err, columns=100)
            finally:
                recorder.stop()
            await port.stopListening()
        assert code == 0 and "Hello." in out.getvalue(), (code, out.getvalue(), err.getvalue())

    def begin() -> None:
        done = Deferred.fromCoroutine(main())
        done.addBoth(outcome.append).addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(begin)
    reactor.run()
    if outcome and outcome[0] is not None:
        outcome[0].raiseException()
    return recorder.steps


WALKS: dict[str, Callable[[], list[tuple[int, str, str]]]] = {
    "send": walk_send,
    "review-list": walk_review_list,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("walk", choices=sorted(WALKS))
    parser.add_argument("--steps", action="store_true", help="print the counts only")
    parser.add_argument(
        "--files", action="store_true",
        help="print the walk by file: each run of steps in one file on a line",
    )
    parser.add_argument(
        "--update-docs", action="store_true",
        help="write the walk, as --files prints it, into docs/explanation/architecture.rst",
    )
    args = parser.parse_args()
    if args.update_docs:
        update_docs(args.walk)
    else:
        show(WALKS[args.walk](), args.steps, args.files)


def docs_block(walk: str, printed: str) -> str:
    """The walk's literal block in docs/explanation/architecture.rst: the command, then what it printed."""
    lines = [f"$ .venv/bin/python bench/walk.py {walk} --files", *printed.rstrip("\n").split("\n")]
    return "\n".join(("    " + line) if line else "" for line in lines) + "\n"


def update_docs(walk: str) -> None:
    """Replace the walk's block in docs/explanation/architecture.rst with what it prints now."""
    import contextlib
    import re

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        show(WALKS[walk](), False, True)
    docs = Path(__file__).resolve().parent.parent / "docs" / "explanation" / "architecture.rst"
    text = docs.read_text()
    block = re.compile(
        rf"    \$ \.venv/bin/python bench/walk\.py {re.escape(walk)} --files\n(?:(?:    .*)?\n)*?(?=\n\S)"
    )
    updated, count = block.subn(lambda _: docs_block(walk, printed.getvalue()), text)
    if count != 1:
        raise SystemExit(f"no block of the {walk} walk in {docs}")
    docs.write_text(updated)


if __name__ == "__main__":
    main()
