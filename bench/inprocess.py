#!/usr/bin/env python3
"""
The cost of one request through Beacon's public site, in process: no
sockets, no threads, no load generator, so that it does not move with the
machine's noise the way req/s does.

Beacon's site (BeaconSite, the A2A resources, the public policy) runs over
the in-memory store (beacon.testing.MemoryStore) on a Clock, logging as
`twistd beacon` does (beacon.logs' turn-flushed observer, to /dev/null: the
lines kept and written once a millisecond of the clock, a batch of three
requests at its pace). Requests go through one
channel on a StringTransport, one after another.

    .venv/bin/python bench/inprocess.py send           # CPU microseconds per request
    .venv/bin/python bench/inprocess.py send --callgrind   # instructions per request

Workloads: send (SendMessage with a small text message), get (GetTask of a
stored task), card (GET of the agent card), ws (SendMessage as one masked
text frame on a WebSocket connection of the A2A WebSocket binding),
rest-send and rest-get (SendMessage and GetTask over the HTTP+JSON binding:
POST /a2a/rest/message:send, GET /a2a/rest/tasks/{id}); grpc-send and
grpc-get (SendMessage and GetTask over the gRPC binding: one HTTP/2
connection, each call's HEADERS as grpc-python's HPACK encoder sends them
once it has indexed them, its DATA, and a WINDOW_UPDATE); and two refusals,
what a flooding source costs Beacon: limited (SendMessage from a source over
`[limits] rate = 1, burst = 1`: 429, but for the one request in 3,000 the
rate lets through at the clock's pace, answered 200 and counted; ws-limited,
the same as WebSocket frames: -31429) and
too-large (a POST declaring and
sending max_body + 1 bytes: 413; like any request longer than 64 KiB, it
arrives in reads of 64 KiB, as a TCP transport delivers it, so that dropping
the body's tail is counted too). A workload whose answer closes the
connection opens a new one for the next request, and that is counted too. --callgrind runs this script
twice under valgrind's callgrind, with 200 and 1,200 requests, and divides
the difference of the instruction counts by 1,000, with PYTHONHASHSEED=0
(str hashes salted alike): for the same code and Python, the same figure
within about 1 % on any run, whatever else the machine does (a random hash
seed moved it by up to 2 %). What it leaves out
(the store's threads, the sockets, the reactor's loop) is what bench/run
measures.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.internet.error import ConnectionDone
from twisted.logger import globalLogBeginner
from twisted.python.failure import Failure
from twisted.python.threadable import registerAsIOThread

from beacon.bindings.admission._edge import Container
from beacon.bindings.http._site import BeaconSite
from beacon.config import build_config
from beacon.logs import text_file_observer
from beacon.service import beacon_resources
from beacon.testing import MemoryStore

WARM_UP = 200
#: Seconds the clock moves on per request (3,000 requests a second).
STEP = 1 / 3000
CLOSED = Failure(ConnectionDone())
PEER = IPv4Address("TCP", "127.0.0.1", 40000)
HOST = IPv4Address("TCP", "127.0.0.1", 8080)
#: The most a TCP transport hands over in one dataReceived (Twisted reads
#: 64 KiB at a time): a longer request arrives in several.
READ = 65536


#: The header blocks grpc-python (grpc-core's HPACK encoder) sends, as read
#: off a real channel: a connection's first call (SendMessage), literals
#: with incremental indexing; a second call's (GetTask), its path new; and
#: then each call of the same method, every field indexed but the
#: a2a-version metadata.
_A2A_VERSION = bytes.fromhex("000b6132612d76657273696f6e03312e30")
GRPC_FIRST = bytes.fromhex(
    "40053a70617468212f6c662e6132612e76312e413241536572766963652f53656e644d65737361676540"
    "0a3a617574686f726974790f3132372e302e302e313a35303037328386400c636f6e74656e742d747970"
    "65106170706c69636174696f6e2f677270634002746508747261696c6572734014677270632d61636365"
    "70742d656e636f64696e67176964656e746974792c206465666c6174652c20677a6970400c677270632d"
    "74696d656f757403313053400a757365722d6167656e7438677270632d707974686f6e2d6173796e6369"
    "6f2f312e38352e3420677270632d632f35382e302e3020286c696e75783b2063687474703229"
) + _A2A_VERSION
GRPC_SEND = bytes.fromhex("c4c38386c2c1c0bfbe") + _A2A_VERSION
GRPC_GET_FIRST = (
    bytes.fromhex("40053a706174681d2f6c662e6132612e76312e413241536572766963652f4765745461736b")
    + bytes.fromhex("c48386c3c2c1c0bf")
    + _A2A_VERSION
)
GRPC_GET = bytes.fromhex("bec48386c3c2c1c0bf") + _A2A_VERSION


def grpc_call(stream: int, block: bytes, message: bytes) -> bytes:
    """One unary call as grpc-core sends it: HEADERS, then DATA ending the stream,
    and a WINDOW_UPDATE giving back what the last answer took."""
    from beacon.bindings.grpc._h2 import frame as h2_frame

    return (
        h2_frame(1, 0x4, stream, block)
        + h2_frame(0, 0x1, stream, b"\x00" + len(message).to_bytes(4, "big") + message)
        + h2_frame(8, 0, 0, (200).to_bytes(4, "big"))
    )


def grpc_message(n: int) -> bytes:
    """A SendMessageRequest as bench/grpc_load.py sends it: a small text message."""
    from beacon.proto import a2a_pb2

    request = a2a_pb2.SendMessageRequest()
    request.message.message_id = f"m-{n:08d}-0000-4000-8000-000000000000"
    request.message.role = a2a_pb2.ROLE_USER
    request.message.parts.add().text = "hello from the in-process benchmark"
    return request.SerializeToString()


def _first_message(data: bytes) -> bytes:
    """The first gRPC message in the DATA frames of C{data}."""
    position = 0
    while position + 9 <= len(data):
        length = int.from_bytes(data[position : position + 3], "big")
        kind = data[position + 3]
        payload = data[position + 9 : position + 9 + length]
        position += 9 + length
        if kind == 0 and payload:
            return payload[5 : 5 + int.from_bytes(payload[1:5], "big")]
    raise AssertionError(f"no message in {data[:200]!r}")


def post(body: bytes) -> bytes:
    return (
        b"POST /a2a/v1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
        b"Content-Type: application/json\r\nA2A-Version: 1.0\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body


def frame(payload: bytes) -> bytes:
    """A client's text frame: final, masked (with a zero key: RFC 6455 lets
    the server take any key, and the payload stays as it is)."""
    size = len(payload)
    if size < 126:
        head = bytes((0x81, 0x80 | size))
    else:
        head = bytes((0x81, 0x80 | 126)) + size.to_bytes(2, "big")
    return head + b"\0\0\0\0" + payload


def send_body(n: int) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":%s}' % (n, rest_body(n))
    )


def rest_body(n: int) -> bytes:
    """SendMessage's params: the HTTP+JSON binding's body."""
    return (
        b'{"message":{"messageId":"inprocess-%d","role":"ROLE_USER",'
        b'"parts":[{"text":"Hello from the benchmark: a small text message."}]}}' % n
    )


def rest_post(body: bytes) -> bytes:
    return (
        b"POST /a2a/rest/message:send HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
        b"Content-Type: application/json\r\nA2A-Version: 1.0\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body


class TurnClock(Clock):
    """
    A Clock that is a running reactor to L{beacon.logs.TurnFlushedObserver}:
    the log lines are kept and written once a millisecond of the clock
    (L{beacon.logs.FLUSH_DELAY}; C{advance(STEP)} after each request), as
    C{twistd beacon} writes them.
    Time moves on by C{STEP} a request, as a clock does under load: what is
    made once a millisecond or a second (ids, the Date header) costs what it
    costs in a server.
    """

    running = True

    def addSystemEventTrigger(self, phase: str, event: str, f: Any, *args: Any) -> None:
        pass

    def callFromThread(self, f: Any, *args: Any) -> None:
        f(*args)


def measure(workload: str, count: int, signing_key: str | None = None) -> float:
    """Run C{count} requests after a warm-up; CPU seconds per request."""
    devnull = open(os.devnull, "w")
    registerAsIOThread()
    clock = TurnClock()
    clock.advance(1_800_000_000)
    globalLogBeginner.beginLoggingTo([text_file_observer(devnull, clock)], redirectStandardIO=False)
    limited = workload in ("limited", "ws-limited")
    websocket = workload in ("ws", "ws-limited")
    limits = {"rate": 1, "burst": 1} if limited else {"rate": 0}
    # --signing-key: the card carries a signature (computed at publish).
    card = {"signing_key": signing_key} if signing_key else {}
    config = build_config({"limits": limits, "card": card})
    resources = beacon_resources(config, MemoryStore(), clock)
    resources.publish("http://127.0.0.1:8080")
    site = BeaconSite(resources.mount(Container()), clock=clock, **config.limits.site_options())
    grpc_door = workload.startswith("grpc-")
    if grpc_door:
        from beacon.bindings.grpc import GRPCCalls, GRPCServer
        from beacon.bindings.grpc._h2 import frame as h2_frame
        from beacon.proto import a2a_pb2

        grpc_server = GRPCServer(
            GRPCCalls(resources.websocket.dispatcher, resources.websocket.limits),
            clock,
            [],
            max_receive=config.grpc.max_receive_message_length(config.limits.max_body),
            max_calls_per_source=0,
            clock=clock,
        )

    def connect() -> tuple[Any, StringTransport]:
        if grpc_door:
            channel = grpc_server.factory.buildProtocol(PEER)
        elif websocket:
            channel = resources.websocket.buildProtocol(PEER)
        else:
            channel = site.buildProtocol(PEER)
        transport = StringTransport(peerAddress=PEER, hostAddress=HOST)
        channel.makeConnection(transport)
        return channel, transport

    # As twistd beacon does once start-up is over (beacon.heap.HeapFreeze):
    # what start-up made goes to the collector's permanent generation, so
    # that full collections walk only what serving makes, and where one
    # falls in the measured requests does not move the figure.
    gc.collect()
    gc.freeze()
    channel, transport = connect()
    if websocket:
        channel.dataReceived(
            b"GET /a2a/ws HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nA2A-Version: 1.0\r\n\r\n"
        )
        assert transport.value().startswith(b"HTTP/1.1 101 "), transport.value()
        transport.clear()

    if grpc_door:
        # The client's preface, its SETTINGS (windows opened wide, as
        # grpc-core's are) and the first call, which makes the task.
        channel.dataReceived(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            + h2_frame(4, 0, 0, (4).to_bytes(2, "big") + (4194304).to_bytes(4, "big"))
            + h2_frame(8, 0, 0, (2**30).to_bytes(4, "big"))
            + grpc_call(1, GRPC_FIRST, grpc_message(0))
        )
        made = transport.value()
        assert b"grpc-status\x010" in made, made
        task_id = a2a_pb2.SendMessageResponse.FromString(_first_message(made)).task.id
        transport.clear()
        if workload == "grpc-get":
            get = a2a_pb2.GetTaskRequest(id=task_id).SerializeToString()
            channel.dataReceived(grpc_call(3, GRPC_GET_FIRST, get))
            assert b"grpc-status\x010" in transport.value()
            transport.clear()

    task_id = "" if not grpc_door else task_id
    if workload in ("get", "rest-get"):
        channel.dataReceived(post(send_body(0)))
        found = re.search(rb'"task":\{"id":"([0-9a-v]{36})"', transport.value())
        assert found is not None, transport.value()
        task_id = found.group(1).decode()
        transport.clear()

    # One request's bytes for every 413: building 64 KiB for each request
    # would be counted with Beacon's work (callgrind counts every byte a
    # memset or memcpy of that size touches).
    too_large = post(b"x" * (config.limits.max_body + 1))
    split: dict[bytes, list[bytes]] = {}

    def reads(data: bytes) -> list[bytes]:
        # As a TCP transport delivers them: in reads of at most READ bytes
        # (the 413's bytes are split once, for the same reason).
        if len(data) <= READ:
            return [data]
        if data not in split:
            split[data] = [data[i : i + READ] for i in range(0, len(data), READ)]
        return split[data]

    def request(n: int) -> bytes:
        if workload == "grpc-send":
            return grpc_call(3 + 2 * n, GRPC_SEND, grpc_message(n + 1))
        if workload == "grpc-get":
            return grpc_call(5 + 2 * n, GRPC_GET, get)
        if websocket:
            return frame(send_body(n))
        if workload == "send":
            return post(send_body(n))
        if workload == "get":
            return post(
                b'{"jsonrpc":"2.0","id":%d,"method":"GetTask","params":{"id":"%s"}}'
                % (n, task_id.encode())
            )
        if workload == "limited":
            return post(send_body(n))
        if workload == "too-large":
            return too_large
        if workload == "rest-send":
            return rest_post(rest_body(n))
        if workload == "rest-get":
            return (
                b"GET /a2a/rest/tasks/%s HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                b"A2A-Version: 1.0\r\n\r\n" % task_id.encode()
            )
        return b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"

    # A flood over `rate = 1` is let through once a second of the clock (one
    # request in 3,000 at STEP): that one is answered, as in a real flood,
    # and counted in the figure, as refusal.lua counts it as admitted.
    expected: tuple[bytes, ...] = {
        "limited": (b"HTTP/1.1 429 ", b"HTTP/1.1 200 "),
        "too-large": (b"HTTP/1.1 413 ",),
    }.get(workload, (b"HTTP/1.1 200 ",))
    requests = [reads(request(n)) for n in range(WARM_UP + count)]
    for data in requests[:WARM_UP]:
        for chunk in data:
            channel.dataReceived(chunk)
        clock.advance(STEP)
        transport.clear()
        if transport.disconnecting:
            channel.connectionLost(CLOSED)
            channel, transport = connect()
    started = time.process_time()
    for data in requests[WARM_UP:]:
        for chunk in data:
            channel.dataReceived(chunk)
        clock.advance(STEP)
        answer = transport.value()
        if workload == "ws-limited":
            if b"-31429" not in answer and b"TASK_STATE_SUBMITTED" not in answer:
                raise SystemExit(f"unexpected answer: {answer[:200]!r}")
        elif workload == "ws":
            if b"TASK_STATE_SUBMITTED" not in answer:
                raise SystemExit(f"unexpected answer: {answer[:200]!r}")
        elif grpc_door:
            if not answer.endswith(b"grpc-status\x010"):
                raise SystemExit(f"unexpected answer: {answer[:200]!r}")
        elif not answer.startswith(expected):
            raise SystemExit(f"unexpected answer: {answer[:200]!r}")
        transport.clear()
        if transport.disconnecting:
            channel.connectionLost(CLOSED)
            channel, transport = connect()
    return (time.process_time() - started) / count


def callgrind(workload: str, signing_key: str | None = None) -> int:
    """Instructions per request, from two callgrind runs."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is missing: apt-get install valgrind")
    totals = []
    # str hashes are salted per process unless the seed is fixed.
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        for count in (200, 1200):
            out = Path(tmp) / f"callgrind.{count}"
            run = subprocess.run(
                [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}",
                 sys.executable, __file__, workload, "--count", str(count),
                 *(["--signing-key", signing_key] if signing_key else [])],
                capture_output=True, text=True, check=True, env=environment,
            )
            found = re.search(r"Collected : (\d+)", run.stderr)
            if found is None:
                raise SystemExit(f"no instruction count from callgrind:\n{run.stderr[-2000:]}")
            totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) // 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "workload",
        choices=(
            "send", "get", "card", "ws", "rest-send", "rest-get", "limited", "ws-limited",
            "too-large", "grpc-send", "grpc-get",
        ),
    )
    parser.add_argument("--count", type=int, default=5000, help="requests measured [5000]")
    parser.add_argument("--callgrind", action="store_true", help="instructions per request instead")
    parser.add_argument(
        "--signing-key", metavar="PEM", default=None,
        help="sign the card with this private key ([card] signing_key)",
    )
    args = parser.parse_args()
    if args.callgrind:
        print(f"{args.workload}: {callgrind(args.workload, args.signing_key):,} instructions per request")
    else:
        seconds = measure(args.workload, args.count, args.signing_key)
        print(f"{args.workload}: {seconds * 1e6:.1f} us of CPU per request")


if __name__ == "__main__":
    main()
