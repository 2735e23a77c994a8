"""
The WebSocket load client of the benchmark: SendMessage over the A2A
WebSocket binding (https://a2a-rust.com/bindings/websocket/v1),
pipelined: each connection keeps up to --depth requests in flight and
correlates the answers by id (they may come in any order).

Run by bench/run with the bench venv's Python (the standard library only):

    python ws_load.py --url ws://127.0.0.1:PORT/a2a/v1/ws --connections 1 \
        --depth 64 --duration 10

It opens every connection first (the upgrade carries A2A-Version: 1.0 and
its Sec-WebSocket-Accept is checked), then sends for --duration seconds,
then waits at most --grace seconds for the answers still in flight. It
prints one line:

    BENCH_RESULT {"requests":..,"duration_us":..,"bad":..,"timeout":..,
                  "p50_us":..,"p99_us":..,"max_us":..,"mean_us":..}

where requests counts the answers that arrived within --duration, bad the
answers that were not a Task in TASK_STATE_SUBMITTED (or any error frame),
and timeout the requests never answered (or lost with a connection).

With --expect-error CODE (the refusal rows of bench/run: one connection
flooding a Beacon whose [limits] rate is small, --expect-error -31429) the
right answer is instead a JSON-RPC error with that code; a Task (a request
the rate let through) is counted in "admitted", not in bad, and the line
gains "admitted":N.

It is written for the load it makes, as wrk is for HTTP: one asyncio
protocol per connection speaking RFC 6455 itself (client frames masked,
server frames read whole, fragments joined, pings answered), and each
answer's slot is refilled the moment the answer is read. A general-purpose
WebSocket library costs tens of microseconds of Python a message; at
Beacon's rates that made the client, not the server, set the pace (the
server sat idle about a tenth of the time while the client worked through a
window of answers), as would holding the refills until a whole read is
worked through.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import math
import os
import random
import re
import struct
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

TEXT = "Hello from the benchmark: a small text message."
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_HEAD = 64 * 1024
MAX_MESSAGE = 4 * 1024 * 1024


class LoadError(Exception):
    """The connection could not be opened as the binding specifies."""


@dataclass
class Stats:
    requests: int = 0
    bad: int = 0
    timeout: int = 0
    admitted: int = 0
    latencies: list[float] = field(default_factory=list)


def request_frame(request_id: int, tag: bytes) -> bytes:
    """The JSON-RPC text of one SendMessage (the bytes json.dumps would give)."""
    return REQUEST % (request_id, tag, request_id)


REQUEST = (
    b'{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":'
    b'{"messageId":"bench-%s-%d","role":"ROLE_USER","parts":[{"text":"'
    + TEXT.encode()
    + b'"}]}}}'
)

#: The answer's id (the JSON-RPC id: the only number that follows "id").
ANSWER_ID = re.compile(rb'"id"\s*:\s*(\d+)\s*[,}]')


def answer_ok(answer: bytes) -> bool:
    """As the wrk scripts check: the Task's state, and no error."""
    return b'"TASK_STATE_SUBMITTED"' in answer and b'"error"' not in answer


def refusal_kind(answer: bytes, code: int) -> str:
    """C{"refused"} (an error with C{code}), C{"admitted"} (a Task), else C{"bad"}."""
    if b'"error"' in answer:
        found = ERROR_CODE.search(answer)
        return "refused" if found and int(found.group(1)) == code else "bad"
    return "admitted" if answer_ok(answer) else "bad"


#: The error's code (the only "code" key of a JSON-RPC error answer).
ERROR_CODE = re.compile(rb'"code"\s*:\s*(-?\d+)')


def masked(opcode: int, payload: bytes, key: bytes) -> bytes:
    """A client frame (RFC 6455 5.2): final, masked with C{key}."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    if not size:
        return head + key
    mask = int.from_bytes((key * (size // 4 + 1))[:size], "big")
    return head + key + (int.from_bytes(payload, "big") ^ mask).to_bytes(size, "big")


class LoadProtocol(asyncio.Protocol):
    """
    One connection: the upgrade, then up to C{depth} SendMessages in flight
    until C{deadline}, then the answers still owed until C{done} fires.
    """

    def __init__(
        self, host: str, path: str, tag: bytes, depth: int, stats: Stats, expect_error: int | None = None
    ) -> None:
        self.host, self.path, self.tag, self.depth, self.stats = host, path, tag, depth, stats
        self.expect_error = expect_error
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.upgraded = False
        self.key = base64.b64encode(os.urandom(16))
        self.pending: dict[int, float] = {}
        self.sent = 0
        self.deadline = math.inf
        self.fragments: list[bytes] = []
        self.masks = random.Random(os.urandom(16))

    # Connection.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(
            b"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nA2A-Version: 1.0\r\n\r\n"
            % (self.path.encode(), self.host.encode(), self.key)
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(LoadError(f"connection lost during the upgrade: {exc}"))
        self.finish()

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def start(self, deadline: float) -> None:
        """Send the first window, in one write."""
        self.deadline = deadline
        self.send(self.depth, time.perf_counter())

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(masked(0x8, struct.pack("!H", 1000), self.masks.randbytes(4)))
            self.transport.close()

    # Sending.

    def send(self, count: int, now: float) -> None:
        if count <= 0 or time.monotonic() >= self.deadline or self.transport is None:
            return
        frames = []
        for _ in range(count):
            self.sent += 1
            self.pending[self.sent] = now
            frames.append(
                masked(0x1, request_frame(self.sent, self.tag), self.masks.randbytes(4))
            )
        self.transport.write(b"".join(frames))

    # Receiving.

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.upgraded:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD:
                    self.fail("the upgrade answer's head is too long")
                return
            head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            del self.buffer[: end + 4]
            accept = base64.b64encode(hashlib.sha1(self.key + GUID).digest()).decode()
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if not head[0].startswith("HTTP/1.1 101 ") or headers.get("sec-websocket-accept") != accept:
                self.fail(f"the upgrade was refused: {head[0]!r}")
                return
            self.upgraded = True
            self.opened.set_result(None)
        now = time.perf_counter()
        while True:
            message = self.next_frame()
            if message is None:
                break
            if self.answered(message, now):
                self.send(1, now)
        if time.monotonic() >= self.deadline and not self.pending:
            self.finish()

    def next_frame(self) -> bytes | None:
        """Take one whole frame off the buffer; a text message when it ends one."""
        while True:
            buffer = self.buffer
            if len(buffer) < 2:
                return None
            first, second = buffer[0], buffer[1]
            if second & 0x80:
                self.fail("a masked frame from the server")
                return None
            size, offset = second & 0x7F, 2
            if size == 126:
                if len(buffer) < 4:
                    return None
                size, offset = struct.unpack_from("!H", buffer, 2)[0], 4
            elif size == 127:
                if len(buffer) < 10:
                    return None
                size, offset = struct.unpack_from("!Q", buffer, 2)[0], 10
            if size > MAX_MESSAGE:
                self.fail("a frame over the client's limit")
                return None
            if len(buffer) < offset + size:
                return None
            payload = bytes(buffer[offset : offset + size])
            del buffer[: offset + size]
            opcode, final = first & 0x0F, first & 0x80
            if opcode == 0x9:
                assert self.transport is not None
                self.transport.write(masked(0xA, payload, self.masks.randbytes(4)))
                continue
            if opcode == 0xA:
                continue
            if opcode == 0x8:
                self.stats.bad += 0 if payload[:2] in (b"", b"\x03\xe8") else 1
                self.close()
                return None
            if opcode not in (0x0, 0x1):
                self.stats.bad += 1  # binary frames are not part of the binding
                continue
            self.fragments.append(payload)
            if final:
                message = b"".join(self.fragments)
                self.fragments = []
                return message

    def answered(self, message: bytes, now: float) -> int:
        found = ANSWER_ID.search(message)
        sent = self.pending.pop(int(found.group(1)), None) if found else None
        if sent is None:
            self.stats.bad += 1
            return 0
        if time.monotonic() <= self.deadline:
            self.stats.requests += 1
            self.stats.latencies.append(now - sent)
        if self.expect_error is not None:
            kind = refusal_kind(message, self.expect_error)
            if kind == "admitted":
                self.stats.admitted += 1
            elif kind == "bad":
                self.stats.bad += 1
        elif not answer_ok(message):
            self.stats.bad += 1
        return 1

    def fail(self, why: str) -> None:
        if not self.opened.done():
            self.opened.set_exception(LoadError(why))
        else:
            print(f"ws_load: {why}", file=sys.stderr)
        self.stats.bad += 1
        if self.transport is not None:
            self.transport.abort()
        self.finish()


async def main_async(args: argparse.Namespace) -> Stats:
    stats = Stats()
    url = urlsplit(args.url)
    if url.scheme != "ws" or not url.hostname:
        raise LoadError(f"a ws:// URL is needed, not {args.url!r}")
    port = url.port or 80
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    host = url.netloc
    loop = asyncio.get_running_loop()

    async def open_one(i: int) -> LoadProtocol:
        _, protocol = await loop.create_connection(
            lambda: LoadProtocol(host, path, f"{args.tag}-{i}".encode(), args.depth, stats, args.expect_error),
            url.hostname, port,
        )
        await protocol.opened
        return protocol

    connections = await asyncio.wait_for(
        asyncio.gather(*(open_one(i) for i in range(args.connections))), timeout=30
    )
    try:
        deadline = time.monotonic() + args.duration
        for protocol in connections:
            protocol.start(deadline)
        await asyncio.sleep(args.duration)
        for protocol in connections:
            if not protocol.pending:
                protocol.finish()
        await asyncio.wait([protocol.done for protocol in connections], timeout=args.grace)
    finally:
        for protocol in connections:
            stats.timeout += len(protocol.pending)
            protocol.close()
    return stats


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    rank = math.ceil(p / 100 * len(sorted_values))
    return sorted_values[min(len(sorted_values), max(1, rank)) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--depth", type=int, default=64, help="requests in flight per connection")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--tag", default=f"ws{os.getpid()}")
    parser.add_argument("--expect-error", type=int, default=None, metavar="CODE",
                        help="count JSON-RPC errors with this code as the right answer (refusal rows)")
    args = parser.parse_args()
    try:
        stats = asyncio.run(main_async(args))
    except (OSError, TimeoutError, LoadError) as e:
        print(f"ws_load: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    values = sorted(stats.latencies)
    mean = sum(values) / len(values) if values else 0.0
    result = {
        "requests": stats.requests,
        "duration_us": int(args.duration * 1e6),
        "bad": stats.bad,
        "connect": 0,
        "read": 0,
        "write": 0,
        "timeout": stats.timeout,
        "status": 0,
        "p50_us": int(percentile(values, 50) * 1e6),
        "p99_us": int(percentile(values, 99) * 1e6),
        "max_us": int((values[-1] if values else 0) * 1e6),
        "mean_us": int(mean * 1e6),
    }
    if args.expect_error is not None:
        result["admitted"] = stats.admitted
    print("BENCH_RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
