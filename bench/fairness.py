#!/usr/bin/env python3
"""
Fair turns: what one flooding connection leaves to everyone else, measured
on a real `twistd -n beacon` over loopback.

    .venv/bin/python bench/fairness.py                  # everything, ~15 min
    .venv/bin/python bench/fairness.py ws-429 http-card --seconds 2 --rounds 1
    .venv/bin/python bench/fairness.py --out bench/results/DATE-fairness.md

For each flood kind a fresh Beacon (a temporary data directory, a config
file of its own, port 0 on 127.0.0.1) runs pinned on core 0; on core 1, wrk
GETs the agent card from 127.0.0.1 (the victim) with 1 and then 8
keep-alive connections, in three cells of --seconds each: alone, while one
connection from 127.0.0.2 floods (a process of this script, started half a
second before the cell and stopped after it), alone again. The figures are
the victim's req/s during the flood over the mean of the two cells around
it (its share, goal at least 0.5) and its p99 during the flood minus the
mean p99 around it (goal under 5 ms), each the median of --rounds rounds;
the flood's own answers per second are shown beside them, and, first, its
answers per second alone (no victim): what one pipelining client gets.

Flood kinds (one connection each, unpaced, reading every answer):
  ws-429        WebSocket text frames (a small SendMessage) over the source's
                rate ([limits] rate = 1, burst = 5): each answered -31429
  http-429      pipelined POST /a2a/v1 SendMessage over the rate: 429s
  http-healthz  pipelined GET /healthz
  http-card     pipelined GET of the agent card
  ws-64k        WebSocket frames of 65,537 bytes (max_body + 1, rate off):
                each answered -31413
  ws-4m         WebSocket frames of 4 MiB (rate off): each answered -31413

And the gRPC door (the kind grpc-stall): one source opens 16,
64 and then 256 SendMessage calls on one HTTP/2 connection whose request
message never comes, without a credential (Beacon has [auth]) and then
with one, while another source (a trusted proxy's X-Forwarded-For) makes
authenticated SendMessage calls, one at a time, each with a 2 s deadline,
for --seconds: its calls per second answered and failed, alone and during
the stall, and how the stalled calls ended ([limits] body_timeout = 3 s).

Every process started here is stopped by its pid and bounded in time; the
whole run takes about (3 cells x 2 victim counts x rounds x seconds + 5 s)
per kind, and 6 x (3 x seconds + 4 s) for the gRPC door.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from peers.process import BeaconLauncher  # noqa: E402
from ws_abuse import masked  # noqa: E402 (a client frame, masked)

CARD_PATH = "/.well-known/agent-card.json"
ATTACKER = "127.0.0.2"
SEND = (
    b'{"jsonrpc":"2.0","id":"f","method":"SendMessage","params":{"message":'
    b'{"messageId":"m","role":"ROLE_USER","parts":[{"text":"flood"}]}}}'
)

#: Flood kind: (title, [limits] rate, WebSocket or not).
KINDS: dict[str, tuple[str, float, bool]] = {
    "ws-429": ("WebSocket frames over the rate (answered -31429)", 1.0, True),
    "http-429": ("HTTP pipelined requests answered 429", 1.0, False),
    "http-healthz": ("HTTP pipelined /healthz", 0.0, False),
    "http-card": ("HTTP pipelined card GETs", 0.0, False),
    "ws-64k": ("WebSocket 65,537-byte frames", 0.0, True),
    "ws-4m": ("WebSocket 4 MiB frames", 0.0, True),
}


def flood_bytes(kind: str) -> bytes:
    """What the flooding connection sends over and over (at least 64 KiB)."""
    if kind == "ws-429":
        unit = masked(SEND)
    elif kind == "ws-64k":
        unit = masked(b" " * 65537)
    elif kind == "ws-4m":
        return masked(b" " * (4 * 1024 * 1024))
    elif kind == "http-429":
        unit = (
            b"POST /a2a/v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"A2A-Version: 1.0\r\nContent-Length: %d\r\n\r\n" % len(SEND)
        ) + SEND
    elif kind == "http-healthz":
        unit = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    elif kind == "http-card":
        unit = b"GET " + CARD_PATH.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    else:
        raise SystemExit(f"unknown flood kind {kind!r}")
    return unit * max(1, 65536 // len(unit) + 1)


class Answers(threading.Thread):
    """Reads the flooding connection's answers as they come and counts them."""

    def __init__(self, sock: socket.socket, websocket: bool) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.websocket = websocket
        self.count = 0

    def run(self) -> None:
        buffer = b""
        at = 0
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                return
            if not chunk:
                return
            if not self.websocket:
                # Each answer starts with its status line; keep a tail in
                # case one is split between two reads.
                buffer = buffer[-16:] + chunk
                self.count += buffer.count(b"HTTP/1.1 ") - buffer[:16].count(b"HTTP/1.1 ")
                continue
            buffer = buffer[at:] + chunk
            at = 0
            size = len(buffer)
            while size - at >= 2:
                length = buffer[at + 1] & 0x7F
                head = 2
                if length == 126:
                    if size - at < 4:
                        break
                    length = struct.unpack_from("!H", buffer, at + 2)[0]
                    head = 4
                elif length == 127:
                    if size - at < 10:
                        break
                    length = struct.unpack_from("!Q", buffer, at + 2)[0]
                    head = 10
                if size - at < head + length:
                    break
                at += head + length
                self.count += 1


def attack(kind: str, port: int, seconds: float) -> None:
    """In a process of its own: flood for C{seconds}, then print the answers' count and rate."""
    _, _, websocket = KINDS[kind]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((ATTACKER, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    if websocket:
        key = base64.b64encode(os.urandom(16))
        sock.sendall(
            b"GET /a2a/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\n"
            b"Sec-WebSocket-Version: 13\r\nA2A-Version: 1.0\r\n\r\n"
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise SystemExit("the upgrade was not answered")
            head += chunk
        if not head.startswith(b"HTTP/1.1 101"):
            raise SystemExit(f"the upgrade was refused: {head[:40]!r}")
    data = flood_bytes(kind)
    answers = Answers(sock.dup(), websocket)
    answers.start()
    sock.settimeout(0.5)
    began = time.monotonic()
    first = answers.count
    while time.monotonic() - began < seconds:
        try:
            sock.sendall(data)
        except socket.timeout:
            continue
        except OSError:
            break
    elapsed = time.monotonic() - began
    count = answers.count - first
    sock.close()
    print(json.dumps({"answers": count, "per_second": count / elapsed}), flush=True)


_LATENCY = re.compile(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", re.M)
_RATE = re.compile(r"^Requests/sec:\s+([\d.]+)", re.M)
_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def wrk(port: int, connections: int, seconds: float, cpu: set[int] | None) -> dict[str, float]:
    """The victim: wrk GETting the card; its req/s and p99 in ms."""
    argv = [
        shutil.which("wrk") or "wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s",
        "--latency", "--timeout", "5s", f"http://127.0.0.1:{port}{CARD_PATH}",
    ]
    out = subprocess.run(
        argv, capture_output=True, text=True, timeout=seconds + 30,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpu)) if cpu else None,
    ).stdout
    rate, p99 = _RATE.search(out), _LATENCY.search(out)
    if rate is None or p99 is None:
        raise SystemExit(f"wrk printed no figures:\n{out}")
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"the victim saw errors:\n{out}")
    return {"rps": float(rate.group(1)), "p99": float(p99.group(1)) * _UNIT[p99.group(2)]}


def start_flood(kind: str, port: int, seconds: float, cpu: set[int] | None) -> subprocess.Popen[str]:
    """The flooding connection, in a process of its own."""
    return subprocess.Popen(
        [sys.executable, __file__, "--attack", kind, str(port), str(seconds)],
        stdout=subprocess.PIPE, text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpu)) if cpu else None,
    )


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def flood(kind: str, port: int, seconds: float, cpu: set[int] | None) -> float:
    """The flood alone, no victim: its answers per second."""
    process = start_flood(kind, port, seconds, cpu)
    try:
        out, _ = process.communicate(timeout=seconds + 30)
    finally:
        stop(process)
    return float(json.loads(out.strip().splitlines()[-1])["per_second"])


def cell(kind: str, port: int, count: int, seconds: float, cpu: set[int] | None) -> dict[str, float]:
    """The victim alone, during the flood, and alone again: its share and p99 growth."""
    before = wrk(port, count, seconds, cpu)
    attacker = start_flood(kind, port, seconds + 1.0, cpu)
    try:
        time.sleep(0.5)
        during = wrk(port, count, seconds, cpu)
        out, _ = attacker.communicate(timeout=seconds + 30)
    finally:
        stop(attacker)
    flooding = json.loads(out.strip().splitlines()[-1])
    after = wrk(port, count, seconds, cpu)
    alone_rps = (before["rps"] + after["rps"]) / 2
    alone_p99 = (before["p99"] + after["p99"]) / 2
    return {
        "alone_rps": alone_rps,
        "flood_rps": during["rps"],
        "share": during["rps"] / alone_rps if alone_rps else 0.0,
        "alone_p99": alone_p99,
        "flood_p99": during["p99"],
        "p99_growth": during["p99"] - alone_p99,
        "flood_answers_per_s": flooding["per_second"],
    }


GRPC_TOKEN = "fairness-bench"
GRPC_SERVING = re.compile(r"a2a\.grpc\.serving: the gRPC binding at (\S+)")
SEND_PATH = "/lf.a2a.v1.A2AService/SendMessage"


def grpc_config() -> str:
    import hashlib

    digest = hashlib.sha256(GRPC_TOKEN.encode()).hexdigest()
    return (
        "[limits]\nrate = 0\nbody_timeout = 3\ntrusted_proxies = [\"127.0.0.1\"]\n"
        f"[auth]\nbearer_tokens = [\"{digest}\"]\n"
        "[grpc]\nlisten = [\"127.0.0.1:0\"]\n"
    )


def grpc_victim(target: str, seconds: float) -> dict[str, float]:
    """Authenticated SendMessage calls from another source, one at a time, for C{seconds}."""
    import grpc

    from beacon.proto import a2a_pb2, a2a_pb2_grpc

    metadata = (
        ("a2a-version", "1.0"),
        ("authorization", f"Bearer {GRPC_TOKEN}"),
        ("x-forwarded-for", "203.0.113.9"),
    )
    answered = failed = 0
    with grpc.insecure_channel(target) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        began = time.monotonic()
        n = 0
        while time.monotonic() - began < seconds:
            n += 1
            message = a2a_pb2.Message(
                message_id=f"victim-{os.getpid()}-{n}",
                role=a2a_pb2.ROLE_USER,
                parts=[a2a_pb2.Part(text="still served?")],
            )
            try:
                stub.SendMessage(
                    a2a_pb2.SendMessageRequest(message=message), metadata=metadata, timeout=2
                )
                answered += 1
            except grpc.RpcError:
                failed += 1
        elapsed = time.monotonic() - began
    return {"answered_per_s": answered / elapsed, "failed": failed}


def grpc_stall(target: str, count: int, credential: bool, seconds: float) -> None:
    """
    In a process of its own: open C{count} calls whose message never
    comes, hold them for C{seconds}, then print how each had ended by then
    (status code names, or "open") and when.
    """
    import threading

    import grpc

    from beacon.proto import a2a_pb2

    metadata = (("authorization", f"Bearer {GRPC_TOKEN}"),) if credential else None
    released = threading.Event()
    began = time.monotonic()
    ended: list[float] = []

    def never() -> Any:
        released.wait(seconds + 30)
        return
        yield

    with grpc.insecure_channel(target) as channel:
        call = channel.stream_unary(
            SEND_PATH,
            request_serializer=a2a_pb2.SendMessageRequest.SerializeToString,
            response_deserializer=a2a_pb2.SendMessageResponse.FromString,
        )
        futures = [call.future(never(), metadata=metadata) for _ in range(count)]
        for future in futures:
            future.add_done_callback(lambda _: ended.append(time.monotonic() - began))
        time.sleep(seconds)
        codes: dict[str, int] = {}
        for future in futures:
            name = future.exception().code().name if future.done() and future.exception() else "open"
            codes[name] = codes.get(name, 0) + 1
        released.set()
        for future in futures:
            future.cancel()
    print(json.dumps({"codes": codes, "last_ended_s": max(ended) if ended else None}), flush=True)


def measure_grpc(seconds: float, workdir: Path) -> list[dict[str, Any]]:
    """The gRPC door against stalled calls: 16, 64 and 256, without and with a credential."""
    launcher = BeaconLauncher(workdir / "grpc")
    launcher.cwd.mkdir()
    path = launcher.cwd / "beacon.toml"
    path.write_text(grpc_config())
    cpus = sorted(os.sched_getaffinity(0))
    load_cpu = set(cpus[1:]) if len(cpus) > 1 else None
    rows = []
    try:
        beacon = launcher.start("--config", str(path))
        if len(cpus) > 1:
            os.sched_setaffinity(beacon.process.pid, {cpus[0]})
        target = beacon.process.wait_for(GRPC_SERVING, 30).group(1)
        if load_cpu:
            os.sched_setaffinity(0, load_cpu)
        grpc_victim(target, 1.0)  # warm-up
        for credential in (False, True):
            for count in (16, 64, 256):
                alone = grpc_victim(target, seconds)
                stall = subprocess.Popen(
                    [sys.executable, __file__, "--stall", target, str(count),
                     "1" if credential else "0", str(seconds + 2.0)],
                    stdout=subprocess.PIPE, text=True,
                )
                try:
                    time.sleep(1.0)
                    during = grpc_victim(target, seconds)
                    out, _ = stall.communicate(timeout=seconds + 60)
                finally:
                    stop(stall)
                held = json.loads(out.strip().splitlines()[-1])
                rows.append({
                    "count": count,
                    "credential": credential,
                    "alone": alone["answered_per_s"],
                    "during": during["answered_per_s"],
                    "failed": during["failed"],
                    "codes": held["codes"],
                    "last_ended_s": held["last_ended_s"],
                })
                say(grpc_row_text(rows[-1]))
                time.sleep(4.0)  # The stalled calls of this cell are gone.
    finally:
        launcher.close()
    return rows


GRPC_HEADER = (
    "| stalled calls from one source | credential | victim calls/s alone | during the stall "
    "| victim calls failed | how the stalled calls stood after seconds + 2 s | last ended (s) |\n"
    "|---:|---|---:|---:|---:|---|---:|"
)


def grpc_row_text(row: dict[str, Any]) -> str:
    codes = ", ".join(f"{name} {n}" for name, n in sorted(row["codes"].items()))
    last = "-" if row["last_ended_s"] is None else f"{row['last_ended_s']:.1f}"
    return (
        f"| {row['count']} | {'yes' if row['credential'] else 'none'} | {row['alone']:.0f} "
        f"| {row['during']:.0f} | {row['failed']} | {codes} | {last} |"
    )


def config(rate: float) -> str:
    return (
        "[limits]\n"
        f"rate = {rate}\n"
        "burst = 5\n"
        "max_connections_per_source = 4096\n"
        "[websocket]\n"
        "max_connections_per_source = 0\n"
    )


def measure(
    kind: str, victims: list[int], seconds: float, workdir: Path, rounds: int = 1
) -> list[dict[str, Any]]:
    """
    Each victim count's three cells against one flood kind, on a fresh
    Beacon, C{rounds} times: the medians of the rounds' figures.
    """
    _, rate, _ = KINDS[kind]
    launcher = BeaconLauncher(workdir / kind)
    launcher.cwd.mkdir()
    path = launcher.cwd / "beacon.toml"
    path.write_text(config(rate))
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = {cpus[0]} if len(cpus) > 1 else None
    load_cpu = set(cpus[1:]) if len(cpus) > 1 else None
    rows = []
    try:
        beacon = launcher.start("--config", str(path))
        if server_cpu:
            os.sched_setaffinity(beacon.process.pid, server_cpu)
        wrk(beacon.port, 1, 1.0, load_cpu)  # warm-up
        alone = flood(kind, beacon.port, seconds, load_cpu)
        for count in victims:
            cells = [
                cell(kind, beacon.port, count, seconds, load_cpu) for _ in range(rounds)
            ]
            row = {
                key: statistics.median(c[key] for c in cells)
                for key in cells[0]
            }
            row.update(
                kind=kind,
                victims=count,
                alone_answers_per_s=alone,
                shares=[c["share"] for c in cells],
            )
            rows.append(row)
            say(row_text(row))
    finally:
        launcher.close()
    return rows


HEADER = (
    "| flood from one source, one connection | victim connections | victim req/s alone "
    "| during the flood | share (goal >= 0.5) | p99 ms alone | during | growth (goal < 5) "
    "| flood answers/s | flood alone answers/s | shares by round |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


def row_text(row: dict[str, Any]) -> str:
    return (
        f"| {KINDS[row['kind']][0]} | {row['victims']} | {row['alone_rps']:.0f} "
        f"| {row['flood_rps']:.0f} | {row['share']:.2f} | {row['alone_p99']:.2f} "
        f"| {row['flood_p99']:.2f} | {row['p99_growth']:.2f} | {row['flood_answers_per_s']:.0f} "
        f"| {row['alone_answers_per_s']:.0f} | {', '.join(f'{s:.2f}' for s in row['shares'])} |"
    )


def say(text: str) -> None:
    print(text, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kinds", nargs="*", help=f"flood kinds (default: all of {', '.join(KINDS)})")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per cell (default 3)")
    parser.add_argument("--victims", default="1,8", help="victim connection counts (default 1,8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per victim count; medians shown (default 3)")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument("--attack", nargs=3, metavar=("KIND", "PORT", "SECONDS"), help=argparse.SUPPRESS)
    parser.add_argument("--stall", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack:
        attack(args.attack[0], int(args.attack[1]), float(args.attack[2]))
        return
    if args.stall:
        target, count, credential, seconds = args.stall
        grpc_stall(target, int(count), credential == "1", float(seconds))
        return
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: install it (Debian: apt-get install wrk) and run again")
    kinds = args.kinds or [*KINDS, "grpc-stall"]
    for kind in kinds:
        if kind not in KINDS and kind != "grpc-stall":
            parser.error(f"unknown flood kind {kind!r}; choose from {', '.join(KINDS)}, grpc-stall")
    victims = [int(n) for n in args.victims.split(",")]
    say(HEADER)
    rows: list[dict[str, Any]] = []
    grpc_rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="beacon-fairness-") as tmp:
        for kind in kinds:
            if kind != "grpc-stall":
                rows += measure(kind, victims, args.seconds, Path(tmp), args.rounds)
        if "grpc-stall" in kinds:
            say(GRPC_HEADER)
            grpc_rows = measure_grpc(args.seconds, Path(tmp))
    if args.out:
        commit = subprocess.run(
            ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True,
        ).stdout.strip()
        lines = [
            "# Fair turns: one flooding connection against everyone else",
            "",
            f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; commit {commit}",
            f"- machine: {os.cpu_count()} cores, {platform.platform()}",
            f"- bench/fairness.py --seconds {args.seconds:g} --victims {args.victims} --rounds {args.rounds}: "
            "Beacon on core 0; "
            "wrk (the victim, GET of the agent card from 127.0.0.1) and the flooding connection "
            "(from 127.0.0.2) on core 1; each share is the victim's req/s during the flood over "
            "the mean of the cells before and after it",
            "",
            HEADER,
            *(row_text(row) for row in rows),
            "",
        ]
        if grpc_rows:
            lines += [
                "## The gRPC door against calls whose message never comes",
                "",
                "One source opens the calls on one connection; another (a trusted proxy's "
                "X-Forwarded-For) makes authenticated SendMessage calls one at a time, each with "
                "a 2 s deadline; `[limits] body_timeout = 3`, `[auth]` configured.",
                "",
                GRPC_HEADER,
                *(grpc_row_text(row) for row in grpc_rows),
                "",
            ]
        args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
