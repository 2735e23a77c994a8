"""
The benchmark's gRPC load client on HTTP/2 of its own: SendMessage (or,
with --method get, GetTask) over the A2A gRPC binding (service
lf.a2a.v1.A2AService), closed loop, with the command line, the JSON output
and the exit codes of bench/grpc_load.py (the grpcio-based client, kept as
the cross-check), but speaking HTTP/2 itself on asyncio Protocols, so that
the client, not grpc.aio's per-call machinery, stops being what bounds a
cell. Run with the project's Python (it needs beacon.proto, protobuf and
beacon.bindings.grpc._hpack, not grpcio):

    .venv/bin/python bench/h2_load.py --target 127.0.0.1:50051 \\
        --connections 4 --duration 10 [--warmup 2] [--api-key K] [--method get] --json

Each of --connections TCP connections keeps --depth calls in flight
(default 1) and sends the next the moment an answer ends. It prints
(with --json; else the same as a line of words)

    {"requests": int, "errors": int, "seconds": float, "rps": float,
     "p50_ms": float, "p99_ms": float, "client_cpu_seconds": float}

with grpc_load.py's meaning: requests counts the right answers ended within
the --duration after --warmup, errors the wrong ones (by kind on standard
error), the percentiles (nearest rank) are of the right answers' latencies
(time.perf_counter from the request's write to its answer's end), and
client_cpu_seconds is this process's CPU time over the window. Exit codes:
0 (measured), 1 (a connection did not become ready within
--connect-timeout, or, with --method get, the task could not be made), 2
(usage, or protobuf / beacon.proto missing: one line saying so).

The requests. Per connection: the client preface, SETTINGS (ENABLE_PUSH 0,
INITIAL_WINDOW_SIZE 2**24) and a connection WINDOW_UPDATE to 2**24; a
connection is ready once the server's SETTINGS came (and is ACKed). A call
is HEADERS (END_HEADERS) then DATA (END_STREAM) on stream 1, 3, 5, ...;
the header block (no Huffman) is :method POST and :scheme http from the
static table, then :path, :authority (--target as given), content-type
application/grpc, te trailers, user-agent, a2a-version 1.0 (and x-api-key
with --api-key) as literals with incremental indexing the first time and
indexed fields from then on (the client keeps its own copy of the dynamic
table it makes, so blocks are precomputed, and recomputed only when the
table changes), and grpc-timeout (--call-timeout) as a literal without
indexing. DATA is one gRPC message (0x00, 4-byte length, protobuf):
SendMessageRequest of grpc_load.py's small text message with a fresh
messageId each call (a UUID-shaped id, random per run, then a counter,
patched into precomputed bytes), or GetTaskRequest of the task's id.

What is checked, per call, when its stream ends (on the trailers, or a
trailers-only HEADERS): :status 200, grpc-status 0, exactly one
uncompressed message, parsed as SendMessageResponse (its payload a Task in
--expect-state) or Task (the task's id, in --expect-state); otherwise an
error of the kind: the grpc-status' name (as grpc_load.py), "wrong answer",
"HTTP status N", "not one message", "RST_STREAM n". Every header block the
server sends is decoded, in order, by Beacon's HPACK Decoder (one per
connection), so servers using the dynamic table and Huffman (grpcio) are
read right. The connection: SETTINGS ACKed, PINGs ACKed, a connection
WINDOW_UPDATE each time 1 MiB of DATA came since the last. What the client
sends honours the server's SETTINGS_MAX_FRAME_SIZE, SETTINGS_HEADER_TABLE_SIZE,
its initial stream window and the connection window (WINDOW_UPDATEs on
stream 0 counted): a request that would exceed one is not sent but counted
as an error ("send window"), which small requests never meet in practice.
A call past --call-timeout is an error (DEADLINE_EXCEEDED) and its stream
is reset (CANCEL). GOAWAY, a protocol error or the connection's loss: an
error for each call in flight, and a new connection in its place (as when
the stream ids would pass 2**31 - 1).

The standard asyncio loop, one process, writes of one data_received
batched into one transport.write; the load client is a process of its own,
not Beacon's code.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

# The same command line, counts and percentiles as the grpcio client (which
# also puts this checkout on sys.path, for beacon.proto).
from grpc_load import GET_TASK, SEND_MESSAGE, TEXT, Load, parse_args, run  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: Frame types (RFC 9113 §6).
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 5, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
#: Our receive windows, and when the connection's is topped up.
WINDOW = 2**24
WINDOW_REFILL = 2**20
MAX_STREAM_ID = 2**31 - 1
FRAME = struct.Struct(">BHBBI")
STATUS_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)
#: RFC 7541 Appendix A, the entries the requests use.
STATIC_FULL = {(b":method", b"POST"): 3, (b":scheme", b"http"): 6}
STATIC_NAMES = {b":authority": 1, b":path": 4, b"content-type": 31, b"user-agent": 58}


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame (Beacon's, imported here: beacon.bindings.grpc needs grpcio)."""
    from beacon.bindings.grpc._h2 import frame as make

    return make(kind, flags, stream, payload)


def integer(value: int, bits: int, prefix: int = 0) -> bytes:
    """An HPACK integer (Beacon's encoder, imported here: beacon.bindings.grpc needs grpcio)."""
    from beacon.bindings.grpc._hpack import integer as encode

    return encode(value, bits, prefix)


def _string(value: bytes) -> bytes:
    return integer(len(value), 7, 0) + value


class Encoder:
    """
    The client's HPACK encoder for its two requests: it keeps its own copy of
    the dynamic table it builds (RFC 7541 §4), so a block is computed once
    and reused until the table changes.
    """

    def __init__(self) -> None:
        self.table: list[tuple[bytes, bytes]] = []  # newest (index 62) first
        self.used = 0
        self.size = 4096
        self.limit = 4096  # the server's SETTINGS_HEADER_TABLE_SIZE
        self.generation = 0
        self._cache: dict[Any, tuple[int, bytes]] = {}

    def set_limit(self, limit: int) -> None:
        self.limit = limit

    def block(self, key: Any, indexed: list[tuple[bytes, bytes]], plain: list[tuple[bytes, bytes]]) -> bytes:
        cached = self._cache.get(key)
        if cached is not None and cached[0] == self.generation and self.size <= self.limit:
            return cached[1]
        generation = self.generation
        out = bytearray()
        if self.size > self.limit:
            self.size = min(4096, self.limit)
            out += integer(self.size, 5, 0x20)
            self._evict(self.size)
            self.generation += 1
        for field in indexed:
            if field in STATIC_FULL:
                out += integer(STATIC_FULL[field], 7, 0x80)
            elif field in self.table:
                out += integer(62 + self.table.index(field), 7, 0x80)
            else:
                name, value = field
                index = STATIC_NAMES.get(name, 0)
                out += integer(index, 6, 0x40) + (b"" if index else _string(name)) + _string(value)
                self._insert(field)
        for name, value in plain:
            index = STATIC_NAMES.get(name, 0)
            out += integer(index, 4, 0x00) + (b"" if index else _string(name)) + _string(value)
        block = bytes(out)
        if self.generation == generation:  # the block changed no table: the same next time
            self._cache[key] = (generation, block)
        return block

    def _evict(self, room: int) -> None:
        while self.used > room:
            name, value = self.table.pop()
            self.used -= len(name) + len(value) + 32

    def _insert(self, field: tuple[bytes, bytes]) -> None:
        size = len(field[0]) + len(field[1]) + 32
        self._evict(max(self.size - size, 0))
        if size <= self.size:
            self.table.insert(0, field)
            self.used += size
        self.generation += 1


def grpc_timeout(seconds: float) -> bytes:
    """--call-timeout as a grpc-timeout value (whole seconds, else milliseconds; at most 8 digits)."""
    if seconds == int(seconds) and seconds < 1e8:
        return b"%dS" % int(seconds)
    millis = round(seconds * 1000)
    if millis < 1e8:
        return b"%dm" % max(millis, 1)
    return b"%dS" % min(round(seconds), 99999999)


def message(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


class Requests:
    """The precomputed parts of the run's requests."""

    def __init__(self, args: Any, a2a_pb2: Any) -> None:
        common: list[tuple[bytes, bytes]] = [
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", b""),
            (b":authority", args.target.encode()), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
            (b"user-agent", b"beacon-h2-load/1.0"), (b"a2a-version", b"1.0"),
        ]
        if args.api_key:
            common.append((b"x-api-key", args.api_key.encode()))
        self.fields: dict[str, list[tuple[bytes, bytes]]] = {}
        for method, path in (("send", SEND_MESSAGE), ("get", GET_TASK)):
            fields = list(common)
            fields[2] = (b":path", path.encode())
            self.fields[method] = fields
        self.plain = [(b"grpc-timeout", grpc_timeout(args.call_timeout))]
        # A SendMessageRequest whose messageId is a placeholder of fixed
        # length, patched per call: a UUID-shaped id, random per run, then
        # a 12-digit hex counter.
        marker = "00000000-0000-4000-8000-000000000000"
        template = a2a_pb2.SendMessageRequest(
            message=a2a_pb2.Message(message_id=marker, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=TEXT)])
        ).SerializeToString()
        at = template.index(marker.encode())
        self.send_head = message(template)[: at + 5]
        self.send_tail = message(template)[at + 5 + len(marker):]
        r = os.urandom(10).hex()
        self.id_prefix = f"{r[:8]}-{r[8:12]}-4{r[12:15]}-8{r[15:18]}-".encode()
        self.counter = 0
        self.get_body = b""

    def send_body(self) -> bytes:
        self.counter += 1
        return self.send_head + self.id_prefix + b"%012x" % self.counter + self.send_tail


class Call:
    __slots__ = ("began", "method", "data", "headers")

    def __init__(self, began: float, method: str) -> None:
        self.began = began
        self.method = method
        self.data = b""
        self.headers: list[tuple[bytes, bytes]] | None = None


class Connection(asyncio.Protocol):
    """One HTTP/2 connection of the run, with --depth calls in flight."""

    def __init__(self, run: Run) -> None:
        from beacon.bindings.grpc._hpack import Decoder

        self.run = run
        self.clock = run.clock
        self.decoder = Decoder()
        self.encoder = Encoder()
        self.transport: Any = None
        self.buf = bytearray()
        self.streams: dict[int, Call] = {}
        self.next_id = 1
        self.ready = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(lambda ready: ready.cancelled() or ready.exception())
        self.closed = False
        self.retiring = False
        self.out: list[bytes] | None = None  # writes batched while reading
        self.received = 0  # DATA bytes since our last connection WINDOW_UPDATE
        self.send_window = 65535  # the connection's, for what we send
        self.stream_window = 65535  # the server's initial stream window
        self.max_frame = 16384
        self.continuing: tuple[int, int, bytearray] | None = None  # (stream, flags, block) of HEADERS + CONTINUATION
        self.on_end: Any = None  # a future for the one call of make_task

    # asyncio.Protocol

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        settings = struct.pack(">HIHI", 2, 0, 4, WINDOW)
        transport.write(
            PREFACE + frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", WINDOW - 65535))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail("connection lost")

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        self.out = out = []
        pos = 0
        end = len(buf)
        unpack = FRAME.unpack_from
        try:
            while end - pos >= 9:
                high, low, kind, flags, stream = unpack(buf, pos)
                length = high << 16 | low
                stop = pos + 9 + length
                if stop > end:
                    break
                payload = bytes(buf[pos + 9 : stop])
                pos = stop
                stream &= MAX_STREAM_ID
                if self.continuing is not None:
                    if kind != CONTINUATION or stream != self.continuing[0]:
                        raise ValueError("a frame inside a header block")
                    self.continuing[2].extend(payload)
                    if flags & END_HEADERS:
                        stream, first_flags, block = self.continuing
                        self.continuing = None
                        self.headers(stream, first_flags, bytes(block))
                elif kind == DATA:
                    self.received += length
                    call = self.streams.get(stream)
                    if flags & PADDED:
                        payload = payload[1 : len(payload) - payload[0]]
                    if call is not None:
                        call.data += payload
                        if flags & END_STREAM:
                            self.end(stream, call, "no trailers")
                elif kind == HEADERS:
                    if flags & PADDED:
                        payload = payload[1 : len(payload) - payload[0]]
                    if flags & PRIORITY:
                        payload = payload[5:]
                    if flags & END_HEADERS:
                        self.headers(stream, flags, payload)
                    else:
                        self.continuing = (stream, flags, bytearray(payload))
                elif kind == SETTINGS:
                    if not flags & ACK:
                        self.settings(payload)
                        out.append(frame(SETTINGS, ACK, 0))
                        if not self.ready.done():
                            self.ready.set_result(None)
                elif kind == PING:
                    if not flags & ACK:
                        out.append(frame(PING, ACK, 0, payload))
                elif kind == WINDOW_UPDATE:
                    if stream == 0:
                        self.send_window += int.from_bytes(payload[:4], "big") & MAX_STREAM_ID
                elif kind == RST_STREAM:
                    call = self.streams.get(stream)
                    if call is not None:
                        self.end(stream, call, f"RST_STREAM {int.from_bytes(payload[:4], 'big')}")
                elif kind == GOAWAY:
                    self.fail("GOAWAY")
                    break
                elif kind == PUSH_PROMISE:
                    raise ValueError("PUSH_PROMISE with push disabled")
                # PRIORITY and unknown frame types are ignored.
            del buf[:pos]
            if self.received >= WINDOW_REFILL:
                out.append(frame(WINDOW_UPDATE, 0, 0, self.received.to_bytes(4, "big")))
                self.received = 0
        except Exception as e:  # a protocol error: HPACK, frames, a bad answer's parsing
            self.out = None
            self.fail(f"protocol error ({type(e).__name__}: {e})")
            return
        self.out = None
        if out and not self.closed:
            self.transport.write(b"".join(out))

    # frames

    def settings(self, payload: bytes) -> None:
        for at in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, at)
            if key == 1:
                self.encoder.set_limit(value)
            elif key == 4:
                self.stream_window = value
            elif key == 5:
                self.max_frame = value

    def headers(self, stream: int, flags: int, block: bytes) -> None:
        # Every block is decoded, in order, whoever it is for.
        fields = self.decoder.decode(block)
        call = self.streams.get(stream)
        if call is None:
            return
        if call.headers is None:
            call.headers = fields
            if flags & END_STREAM:  # trailers-only
                self.end(stream, call, None, fields)
        elif flags & END_STREAM:
            self.end(stream, call, None, fields)

    def end(self, stream: int, call: Call, error: str | None, trailers: list[tuple[bytes, bytes]] | None = None) -> None:
        del self.streams[stream]
        if error is None:
            error = self.run.check(call, trailers)
        now = self.clock()
        if self.on_end is not None:
            self.on_end.set_result((error, call))
            return
        self.run.load.ended(call.began, now, error)
        if now < self.run.load.end and not self.closed:
            self.start(call.method)

    def fail(self, error: str) -> None:
        """The connection is done with: every call in flight an error, and another connection in its place."""
        if self.closed:
            return
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        now = self.clock()
        streams, self.streams = self.streams, {}
        for call in streams.values():
            if self.on_end is not None:
                self.on_end.set_result((error, call))
            else:
                self.run.load.ended(call.began, now, error)
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(error))
        self.run.replace(self)

    # calls

    def start(self, method: str) -> None:
        """Send one call: HEADERS, then DATA with its message."""
        stream = self.next_id
        if stream > MAX_STREAM_ID:
            self.retiring = True
            if not self.streams:
                self.fail("stream ids used up")
            return
        self.next_id = stream + 2
        run = self.run
        requests = run.requests
        block = self.encoder.block(method, requests.fields[method], requests.plain)
        body = requests.send_body() if method == "send" else requests.get_body
        call = Call(self.clock(), method)
        if len(block) > self.max_frame or len(body) > self.max_frame or len(body) > self.stream_window \
                or len(body) > self.send_window:
            # Not met with small requests: counted, not sent (no flow control).
            run.load.ended(call.began, call.began, "send window")
            return
        self.send_window -= len(body)
        sid = stream.to_bytes(4, "big")
        data = (
            len(block).to_bytes(3, "big") + b"\x01\x04" + sid + block
            + len(body).to_bytes(3, "big") + b"\x00\x01" + sid + body
        )
        self.streams[stream] = call
        if self.out is not None:
            self.out.append(data)
        else:
            self.transport.write(data)

    def expire(self, now: float, timeout: float) -> None:
        """Calls past --call-timeout: errors, their streams reset."""
        late = [stream for stream, call in self.streams.items() if now - call.began > timeout]
        if not late:
            return
        self.out = out = []
        for stream in late:
            call = self.streams[stream]
            out.append(frame(RST_STREAM, 0, stream, (8).to_bytes(4, "big")))
            self.end(stream, call, "DEADLINE_EXCEEDED")
        self.out = None
        if not self.closed:
            self.transport.write(b"".join(out))


class Run:
    """The run: its connections, its counts, the checks of every answer."""

    def __init__(self, args: Any, a2a_pb2: Any) -> None:
        self.args = args
        self.a2a_pb2 = a2a_pb2
        self.requests = Requests(args, a2a_pb2)
        self.expected = a2a_pb2.TaskState.Value(args.expect_state)
        self.task_id = ""
        self.clock = time.perf_counter
        self.load = Load(0.0, 0.0)
        self.method = args.method
        self.host, self.port = split_target(args.target)
        self.connections: list[Connection] = []
        self.stopping = False
        self.measuring = False

    def check(self, call: Call, trailers: list[tuple[bytes, bytes]] | None) -> str | None:
        """None if the call's answer is right, else its error's kind."""
        status = b""
        for name, value in call.headers or ():
            if name == b":status":
                status = value
                break
        if status != b"200":
            return f"HTTP status {status.decode(errors='replace') or 'none'}"
        code = None
        for name, value in trailers or ():
            if name == b"grpc-status":
                code = value
                break
        if code != b"0":
            if code is None:
                return "no grpc-status"
            number = int(code) if code.isdigit() else -1
            return STATUS_NAMES[number] if 0 <= number < len(STATUS_NAMES) else f"grpc-status {code.decode(errors='replace')}"
        data = call.data
        if len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
            return "not one message"
        try:
            if call.method == "send":
                answer = self.a2a_pb2.SendMessageResponse.FromString(data[5:])
                if answer.WhichOneof("payload") != "task" or answer.task.status.state != self.expected:
                    return "wrong answer"
                call.data = answer.task.id.encode()
            else:
                task = self.a2a_pb2.Task.FromString(data[5:])
                if task.id != self.task_id or task.status.state != self.expected:
                    return "wrong answer"
        except Exception:  # protobuf's DecodeError
            return "wrong answer"
        return None

    async def connect(self, deadline: float | None) -> Connection:
        """A ready connection (the server's SETTINGS came), retried until C{deadline}."""
        loop = asyncio.get_running_loop()

        def left() -> float | None:
            return None if deadline is None else max(deadline - self.clock(), 0.0)

        while True:
            connection: Connection | None = None
            try:
                _, made = await asyncio.wait_for(
                    loop.create_connection(lambda: Connection(self), self.host, self.port), left()
                )
                connection = made
                await asyncio.wait_for(asyncio.shield(made.ready), left())
                return made
            except (OSError, asyncio.TimeoutError, ConnectionError) as e:
                if connection is not None and not connection.closed:
                    connection.closed = True
                    connection.transport.abort()
                if self.stopping or (deadline is not None and self.clock() >= deadline):
                    raise TimeoutError from e
                await asyncio.sleep(0.05)

    def replace(self, old: Connection) -> None:
        """A connection failed or retired: another in its place, for the rest of the run."""
        if self.stopping or not self.measuring or old not in self.connections:
            return
        self.connections.remove(old)
        asyncio.get_running_loop().create_task(self.reconnect())

    async def reconnect(self) -> None:
        try:
            connection = await self.connect(self.load.end)
        except (TimeoutError, OSError, ConnectionError):
            return
        if self.stopping:
            connection.closed = True
            connection.transport.abort()
            return
        self.connections.append(connection)
        for _ in range(self.args.depth):
            connection.start(self.method)

    async def make_task(self, connection: Connection) -> str:
        """One SendMessage; the id of the Task it answers ('' if none)."""
        loop = asyncio.get_running_loop()
        connection.on_end = loop.create_future()
        connection.start("send")
        timer = loop.call_later(self.args.call_timeout, connection.expire, float("inf"), -1.0)
        try:
            error, call = await connection.on_end
        finally:
            timer.cancel()
            connection.on_end = None
        if error is not None:
            raise SystemExit(f"h2_load: the SendMessage that makes the task failed: {error}")
        return str(call.data.decode())

    async def drive(self) -> dict[str, Any]:
        args = self.args
        loop = asyncio.get_running_loop()
        deadline = self.clock() + args.connect_timeout
        try:
            self.connections = list(await asyncio.gather(*(self.connect(deadline) for _ in range(args.connections))))
        except TimeoutError:
            raise SystemExit(f"h2_load: {args.target} not reachable within {args.connect_timeout:g} s") from None
        try:
            if self.method == "get":
                self.task_id = await self.make_task(self.connections[0])
                if not self.task_id:
                    raise SystemExit("h2_load: the SendMessage that makes the task answered no Task")
                self.requests.get_body = message(self.a2a_pb2.GetTaskRequest(id=self.task_id).SerializeToString())
            begin = self.clock()
            self.load = load = Load(begin + args.warmup, begin + args.warmup + args.duration)
            self.measuring = True
            tick = min(max(args.call_timeout / 10, 0.01), 1.0)

            def sweep() -> None:
                now = self.clock()
                for connection in list(self.connections):
                    connection.expire(now, args.call_timeout)
                if now < load.end:
                    loop.call_at(loop.time() + tick, sweep)

            loop.call_at(loop.time() + tick, sweep)
            for connection in self.connections:
                for _ in range(args.depth):
                    connection.start(self.method)
            await asyncio.sleep(max(0.0, load.start - self.clock()))
            cpu_start = time.process_time()
            await asyncio.sleep(max(0.0, load.end - self.clock()))
            cpu_end = time.process_time()
        finally:
            self.stopping = True
            for connection in self.connections:
                connection.closed = True
                if connection.transport is not None:
                    connection.transport.abort()
        return load.result("h2_load", cpu_end - cpu_start)


def split_target(target: str) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        split_target(args.target)
    except ValueError:
        print(f"h2_load: --target {args.target} is not HOST:PORT", file=sys.stderr)
        return 2
    try:
        from beacon.bindings.grpc._hpack import Decoder  # noqa: F401
        from beacon.proto import a2a_pb2
    except ImportError as e:
        print(f"h2_load: protobuf and beacon.proto are needed (pip install 'beacon-a2a[grpc]'): {e}", file=sys.stderr)
        return 2
    return run(args, Run(args, a2a_pb2).drive())


if __name__ == "__main__":
    sys.exit(main())
