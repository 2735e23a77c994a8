"""
The WebSocket load client of the benchmark: SendMessage over the A2A
WebSocket binding (seed 001, https://a2a-rust.com/bindings/websocket/v1),
pipelined: each connection keeps up to --depth requests in flight and
correlates the answers by id (they may come in any order).

Run by bench/run with the bench venv's Python (the `websockets` package):

    python ws_load.py --url ws://127.0.0.1:PORT/a2a/v1/ws --connections 1 \
        --depth 64 --duration 10

It connects every connection first (the upgrade carries A2A-Version: 1.0),
then sends for --duration seconds, then waits at most --grace seconds for
the answers still in flight. It prints one line:

    BENCH_RESULT {"requests":..,"duration_us":..,"bad":..,"timeout":..,
                  "p50_us":..,"p99_us":..,"max_us":..,"mean_us":..}

where requests counts the answers that arrived within --duration, bad the
answers that were not a Task in TASK_STATE_SUBMITTED (or any error frame),
and timeout the requests never answered (or lost with a connection).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

TEXT = "Hello from the benchmark: a small text message."


@dataclass
class Stats:
    requests: int = 0
    bad: int = 0
    timeout: int = 0
    latencies: list[float] = field(default_factory=list)


def request_frame(request_id: int, tag: str) -> str:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": f"bench-{tag}-{request_id}",
                    "role": "ROLE_USER",
                    "parts": [{"text": TEXT}],
                }
            },
        },
        separators=(",", ":"),
    )


def answer_ok(answer: dict) -> bool:
    if "error" in answer:
        return False
    result = answer.get("result")
    if not isinstance(result, dict):
        return False
    task = result.get("task")
    return isinstance(task, dict) and task.get("status", {}).get("state") == "TASK_STATE_SUBMITTED"


async def drive(
    ws: ClientConnection,
    tag: str,
    depth: int,
    start: float,
    deadline: float,
    grace: float,
    stats: Stats,
) -> None:
    """Keep up to depth requests in flight on ws until deadline."""
    pending: dict[int, float] = {}
    slots = asyncio.Semaphore(depth)
    sending_done = asyncio.Event()

    async def sender() -> None:
        n = 0
        try:
            while True:
                await slots.acquire()
                if time.monotonic() >= deadline:
                    break
                n += 1
                pending[n] = time.perf_counter()
                await ws.send(request_frame(n, tag))
        finally:
            sending_done.set()

    async def receiver() -> None:
        async for frame in ws:
            now = time.perf_counter()
            try:
                answer = json.loads(frame)
                sent = pending.pop(answer.get("id"), None)
            except (ValueError, AttributeError, TypeError):
                answer, sent = {}, None
            if sent is None:
                stats.bad += 1
                continue
            slots.release()
            if time.monotonic() <= deadline:
                stats.requests += 1
                stats.latencies.append(now - sent)
            if not answer_ok(answer):
                stats.bad += 1
            if sending_done.is_set() and not pending:
                return

    receiving = asyncio.ensure_future(receiver())
    sending = asyncio.ensure_future(sender())
    try:
        await asyncio.wait_for(asyncio.shield(sending), timeout=deadline - time.monotonic() + grace)
        if pending:
            await asyncio.wait_for(receiving, timeout=max(0.1, deadline + grace - time.monotonic()))
    except (TimeoutError, ConnectionClosed, OSError):
        pass  # what is still pending is counted as timed out below
    finally:
        for task in (sending, receiving):
            task.cancel()
        await asyncio.gather(sending, receiving, return_exceptions=True)
        stats.timeout += len(pending)


async def main_async(args: argparse.Namespace) -> Stats:
    stats = Stats()
    headers = {"A2A-Version": "1.0"}
    connections = await asyncio.wait_for(
        asyncio.gather(
            *(
                connect(
                    args.url,
                    additional_headers=headers,
                    compression=None,
                    open_timeout=10,
                    max_size=4 * 1024 * 1024,
                    ping_interval=None,
                )
                for _ in range(args.connections)
            )
        ),
        timeout=30,
    )
    try:
        start = time.monotonic()
        deadline = start + args.duration
        await asyncio.gather(
            *(
                drive(ws, f"{args.tag}-{i}", args.depth, start, deadline, args.grace, stats)
                for i, ws in enumerate(connections)
            )
        )
    finally:
        await asyncio.gather(*(ws.close() for ws in connections), return_exceptions=True)
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
    args = parser.parse_args()
    try:
        stats = asyncio.run(main_async(args))
    except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as e:
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
    print("BENCH_RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
