"""
The gRPC load client of the benchmark: SendMessage (or, with --method get,
GetTask) over the A2A gRPC binding (service lf.a2a.v1.A2AService), closed
loop: each of --connections channels (one HTTP/2 connection each) keeps
--depth calls in flight (default 1) and sends the next the moment an
answer is read.

Run with the project's Python (it needs beacon.proto and grpcio, the
``grpc`` extra; never the a2a-sdk, whose proto module cannot share a
process with Beacon's):

    .venv/bin/python bench/grpc_load.py --target 127.0.0.1:50051 \\
        --connections 4 --duration 10 [--warmup 2] [--api-key K] [--method get] --json

Each call is a small text message with a fresh messageId and the metadata
``a2a-version: 1.0`` (and ``x-api-key`` with --api-key); every answer must
be a Task in --expect-state (default TASK_STATE_SUBMITTED, what Beacon
answers), anything else (another answer, an error status, a call over
--call-timeout) is an error. With --method get, one SendMessage first
makes the task, and every call is a GetTask of its id (with the same
metadata), whose answer must be that Task in --expect-state. Calls that end during --warmup are not
counted; the measured window is the --duration after it. It prints one
JSON object on standard output (with --json; else the same as a line of
words):

    {"requests": int, "errors": int, "seconds": float, "rps": float,
     "p50_ms": float, "p99_ms": float, "client_cpu_seconds": float}

where requests counts the right answers ended within the window, errors
the wrong ones (by kind on standard error), rps is requests / seconds, the percentiles are of the
right answers' latencies, and client_cpu_seconds is this process's own
CPU time over the window (requests / client_cpu_seconds is the most this
client can drive on one core). Exit codes: 0 (measured), 1 (the target
never became reachable within --connect-timeout, or, with --method get,
the task could not be made), 2 (usage, or grpcio missing: one line saying
so).

grpc.aio on one asyncio loop (the standard one) in one process: one
channel per connection, each made at the start and ready before the
measured window, and the call objects made once per channel; the load
client is a process of its own, not Beacon's code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # beacon.proto from this checkout, installed or not.
    sys.path.insert(0, str(ROOT))

TEXT = "Hello from the benchmark: a small text message."
SEND_MESSAGE = "/lf.a2a.v1.A2AService/SendMessage"
GET_TASK = "/lf.a2a.v1.A2AService/GetTask"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    def positive(kind: Any) -> Any:
        def parse(text: str) -> Any:
            value = kind(text)
            if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
                raise argparse.ArgumentTypeError(f"{text} is not a positive number")
            return value

        return parse

    def not_negative(text: str) -> float:
        value = float(text)
        if not value >= 0 or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a number >= 0")
        return value

    parser = argparse.ArgumentParser(description="SendMessage load over the A2A gRPC binding.")
    parser.add_argument("--target", required=True, help="the gRPC listener, HOST:PORT ([v6]:PORT)")
    parser.add_argument("--connections", type=positive(int), default=1, help="channels (HTTP/2 connections)")
    parser.add_argument("--depth", type=positive(int), default=1, help="calls in flight per channel")
    parser.add_argument("--duration", type=positive(float), required=True, help="measured seconds")
    parser.add_argument("--warmup", type=not_negative, default=0.0, help="seconds sent but not counted first")
    parser.add_argument("--api-key", default=None, help="sent as x-api-key metadata")
    parser.add_argument(
        "--method", choices=("send", "get"), default="send", help="SendMessage, or GetTask of one task made at the start"
    )
    parser.add_argument("--expect-state", default="TASK_STATE_SUBMITTED", help="the state every Task must be in")
    parser.add_argument("--call-timeout", type=positive(float), default=10.0, help="each call's gRPC deadline")
    parser.add_argument("--connect-timeout", type=positive(float), default=10.0, help="wait for every channel this long")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    if args.connections * args.depth > 10000:
        parser.error("--connections x --depth is at most 10000")
    if args.duration + args.warmup > 3600:
        parser.error("--warmup + --duration is at most 3600 seconds")
    return args


def percentile(ordered: list[float], fraction: float) -> float:
    """The nearest-rank percentile of sorted C{ordered} (0.0 when empty)."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


class Load:
    """The counts of one run."""

    def __init__(self, start: float, end: float) -> None:
        self.start = start
        self.end = end
        self.requests = 0
        self.errors = 0
        self.latencies: list[float] = []
        #: The errors by kind (a status code's name, or the wrong answer).
        self.kinds: dict[str, int] = {}

    def ended(self, began: float, now: float, error: str | None) -> None:
        if not self.start <= now <= self.end:
            return
        if error is None:
            self.requests += 1
            self.latencies.append(now - began)
        else:
            self.errors += 1
            self.kinds[error] = self.kinds.get(error, 0) + 1

    def result(self, client: str, cpu_seconds: float) -> dict[str, Any]:
        """The run's JSON object; the errors by kind said on standard error as C{client}."""
        if self.kinds:
            kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.kinds.items()))
            print(f"{client}: {self.errors} errors: {kinds}", file=sys.stderr)
        seconds = self.end - self.start
        ordered = sorted(self.latencies)
        return {
            "requests": self.requests,
            "errors": self.errors,
            "seconds": round(seconds, 6),
            "rps": round(self.requests / seconds, 3),
            "p50_ms": round(percentile(ordered, 0.50) * 1000, 3),
            "p99_ms": round(percentile(ordered, 0.99) * 1000, 3),
            "client_cpu_seconds": round(cpu_seconds, 3),
        }


def send_request(a2a_pb2: Any) -> Any:
    """A SendMessage request: the small text message, a fresh messageId."""
    return a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=TEXT)])
    )


async def drive(args: argparse.Namespace, grpc: Any, a2a_pb2: Any) -> dict[str, Any]:
    metadata: tuple[tuple[str, str], ...] = (("a2a-version", "1.0"),)
    if args.api_key:
        metadata += (("x-api-key", args.api_key),)
    expected = a2a_pb2.TaskState.Value(args.expect_state)
    channels = [grpc.aio.insecure_channel(args.target) for _ in range(args.connections)]
    try:
        ready = [asyncio.wait_for(channel.channel_ready(), args.connect_timeout) for channel in channels]
        try:
            await asyncio.gather(*ready)
        except asyncio.TimeoutError:
            raise SystemExit(f"grpc_load: {args.target} not reachable within {args.connect_timeout:g} s") from None
        sends = [
            channel.unary_unary(
                SEND_MESSAGE,
                request_serializer=a2a_pb2.SendMessageRequest.SerializeToString,
                response_deserializer=a2a_pb2.SendMessageResponse.FromString,
            )
            for channel in channels
        ]
        gets = [
            channel.unary_unary(
                GET_TASK,
                request_serializer=a2a_pb2.GetTaskRequest.SerializeToString,
                response_deserializer=a2a_pb2.Task.FromString,
            )
            for channel in channels
        ]
        task_id = ""
        if args.method == "get":
            try:
                made = await sends[0](send_request(a2a_pb2), metadata=metadata, timeout=args.call_timeout)
            except grpc.RpcError as e:
                raise SystemExit(f"grpc_load: the SendMessage that makes the task failed: {e.code()}") from None
            task_id = made.task.id if made.WhichOneof("payload") == "task" else ""
            if not task_id:
                raise SystemExit("grpc_load: the SendMessage that makes the task answered no Task")
        clock = time.perf_counter
        begin = clock()
        load = Load(begin + args.warmup, begin + args.warmup + args.duration)
        cpu: dict[str, float] = {}

        async def mark_cpu() -> None:
            await asyncio.sleep(max(0.0, load.start - clock()))
            cpu["start"] = time.process_time()
            await asyncio.sleep(max(0.0, load.end - clock()))
            cpu["end"] = time.process_time()

        async def worker(send: Any, get: Any) -> None:
            while clock() < load.end:
                began = clock()
                error: str | None = None
                try:
                    if task_id:
                        task = await get(a2a_pb2.GetTaskRequest(id=task_id), metadata=metadata, timeout=args.call_timeout)
                        if task.id != task_id or task.status.state != expected:
                            error = "wrong answer"
                    else:
                        answer = await send(send_request(a2a_pb2), metadata=metadata, timeout=args.call_timeout)
                        if answer.WhichOneof("payload") != "task" or answer.task.status.state != expected:
                            error = "wrong answer"
                except grpc.RpcError as e:
                    code = e.code()
                    error = code.name if code is not None else "UNKNOWN"
                load.ended(began, clock(), error)

        await asyncio.gather(
            mark_cpu(), *(worker(send, get) for send, get in zip(sends, gets) for _ in range(args.depth))
        )
    finally:
        await asyncio.gather(*(channel.close() for channel in channels))
    return load.result("grpc_load", cpu.get("end", 0.0) - cpu.get("start", 0.0))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import grpc
        import grpc.aio

        from beacon.proto import a2a_pb2
    except ImportError as e:
        print(f"grpc_load: grpcio and protobuf are needed (pip install 'beacon-a2a[grpc]'): {e}", file=sys.stderr)
        return 2
    return run(args, drive(args, grpc, a2a_pb2))


def run(args: argparse.Namespace, driven: Any) -> int:
    """Run the coroutine C{driven} and print its result (exit 0), or why it could not (exit 1)."""
    try:
        result = asyncio.run(driven)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        print(" ".join(f"{key} {value}" for key, value in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
