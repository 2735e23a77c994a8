#!/usr/bin/env python3
"""
What one hostile client costs Beacon through the WebSocket door (issue 15):
the figures of items 1-5, measured on a real `twistd -n beacon` over
loopback. Not a test: it times things, on a shared machine; run it by hand,
before and after a change, and compare.

    .venv/bin/python bench/ws_abuse.py              # every scenario, ~1 min
    .venv/bin/python bench/ws_abuse.py big rss      # some of them

Each scenario starts its own Beacon (a temporary data directory, a config
file of its own, port 0 on 127.0.0.1), stops it by its pid when done, and
is bounded in time and count. The attacker is 127.0.0.1; a second source
(127.0.0.2, 127.0.0.3: other loopback addresses are other sources) probes
or compares. CPU is the reactor thread's (the twistd process's main thread,
/proc/PID/task/PID/schedstat); RSS is /proc/PID/status VmRSS.

Scenarios:
  big     item 1: 4 MiB frames (over [limits] max_body), 2 a second for 3 s,
          then as fast as the server reads them for 3 s, while another
          process GETs the card from 127.0.0.2 in a loop: reactor ms per
          frame, card GET/s unloaded and in each phase (Beacon pinned to one
          CPU, the clients to the other).
  small   item 1: 300 rate-limited 64 KiB frames against 300 rate-limited
          64 KiB POSTs from another source: reactor ms per refusal.
  unauth  item 1: 300 unauthenticated 64 KiB frames ([auth] configured,
          rate off): reactor ms per refusal.
  conns   item 2: 300 idle connections from one source (rate off): how many
          are upgraded, how many refused.
  rss     item 3: 20 connections each holding an unfinished 4 MiB frame
          (rate off): RSS growth, and after they close; then one source's
          mix: 20 WebSocket frames and 256 HTTP bodies, all unfinished.
  noread  item 4: 20 connections (small receive buffers) sending empty
          frames for a few seconds and never reading: frames the server
          read, RSS growth.
  logs    item 5: 100 upgrades with a 15 KB Host header from a source
          already over its rate: bytes of log written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from peers.process import BeaconLauncher  # noqa: E402

MASK = b"\x11\x22\x33\x44"
CARD = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def masked(payload: bytes, opcode: int = 1) -> bytes:
    """A client frame: final, masked with MASK."""
    size = len(payload)
    if size < 126:
        head = bytes((0x80 | opcode, 0x80 | size))
    elif size < 1 << 16:
        head = bytes((0x80 | opcode, 0x80 | 126)) + struct.pack("!H", size)
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + struct.pack("!Q", size)
    key = (MASK * (size // 4 + 1))[:size]
    body = (int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")).to_bytes(
        size, "little"
    ) if size else b""
    return head + MASK + body


def expensive_json(size: int, request_id: str = "big") -> bytes:
    """A SendMessage about C{size} bytes long made of many small parts (slow to parse)."""
    start = b'{"jsonrpc":"2.0","id":"%s","method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[' % request_id.encode()
    part = b'{"text":"x"},'
    count = max(1, (size - len(start) - 4) // len(part))
    body = start + part * count
    body = body[:-1] + b"]}}}"
    return body + b" " * max(0, size - len(body))


def connect(port: int, source: str, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def read_head(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    return status, rest


def upgrade(port: int, source: str = "127.0.0.1", host: bytes = b"127.0.0.1", rcvbuf: int | None = None) -> tuple[socket.socket, int]:
    sock = connect(port, source, rcvbuf)
    key = base64.b64encode(os.urandom(16))
    sock.sendall(
        b"GET /a2a/ws HTTP/1.1\r\nHost: " + host + b"\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\n"
        b"Sec-WebSocket-Version: 13\r\nA2A-Version: 1.0\r\n\r\n"
    )
    status, _ = read_head(sock)
    return sock, status


def reactor_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Reader(threading.Thread):
    """Reads and counts a WebSocket connection's frames until told to stop."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.frames = 0
        self.closes: list[int] = []
        self.buffer = b""
        self.done = False

    def run(self) -> None:
        self.sock.settimeout(0.2)
        while not self.done:
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                return
            self.buffer += chunk
            while len(self.buffer) >= 2:
                length = self.buffer[1] & 0x7F
                at = 2
                if length == 126:
                    if len(self.buffer) < 4:
                        break
                    length = struct.unpack("!H", self.buffer[2:4])[0]
                    at = 4
                elif length == 127:
                    if len(self.buffer) < 10:
                        break
                    length = struct.unpack("!Q", self.buffer[2:10])[0]
                    at = 10
                if len(self.buffer) < at + length:
                    break
                if self.buffer[0] & 0x0F == 8 and length >= 2:
                    self.closes.append(struct.unpack("!H", self.buffer[at : at + 2])[0])
                self.frames += 1
                self.buffer = self.buffer[at + length :]


class CardProbe(threading.Thread):
    """GETs the card in a loop on one keep-alive connection from another source."""

    def __init__(self, port: int, source: str = "127.0.0.2") -> None:
        super().__init__(daemon=True)
        self.port = port
        self.source = source
        self.count = 0
        self.done = False

    def run(self) -> None:
        sock = connect(self.port, self.source)
        buffer = b""
        while not self.done:
            sock.sendall(CARD)
            while True:
                head_end = buffer.find(b"\r\n\r\n")
                if head_end >= 0:
                    head = buffer[:head_end].lower()
                    length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
                    if len(buffer) >= head_end + 4 + length:
                        buffer = buffer[head_end + 4 + length :]
                        break
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            self.count += 1
        sock.close()

    def rate(self, seconds: float) -> float:
        start = self.count
        time.sleep(seconds)
        return (self.count - start) / seconds


def start(launcher: BeaconLauncher, config: str) -> object:
    path = launcher.cwd / f"beacon-{len(launcher.processes)}.toml"
    path.write_text(config)
    return launcher.start("--config", str(path))


def _probe_main(port: int, seconds: float) -> None:
    """In a process of its own: GET the card for C{seconds}; print (time, count) samples."""
    probe = CardProbe(port)
    probe.start()
    samples = []
    began = time.time()
    while time.time() - began < seconds:
        samples.append((time.time(), probe.count))
        time.sleep(0.05)
    probe.done = True
    print(json.dumps(samples), flush=True)


def _rate_between(samples: list[list[float]], start: float, end: float) -> float:
    inside = [(t, n) for t, n in samples if start <= t <= end]
    if len(inside) < 2:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def _attack(pid: int, port: int, frame: bytes, pace: float, seconds: float) -> tuple[int, float, float, float]:
    """
    Send C{frame} on a new connection every C{pace} seconds (0: as fast as
    Beacon reads) for C{seconds}; return the frames answered, the reactor
    ms used, and the window's start and end.
    """
    sock, status = upgrade(port)
    assert status == 101, status
    reader = Reader(sock.dup())
    reader.start()
    sock.settimeout(60)
    cpu = reactor_ns(pid)
    began = time.time()
    sent = 0
    while time.time() - began < seconds and sent < 2000:
        sock.sendall(frame)
        sent += 1
        if pace:
            time.sleep(max(0.0, began + sent * pace - time.time()))
    deadline = time.monotonic() + 20
    while reader.frames < sent and time.monotonic() < deadline:
        time.sleep(0.01)
    ended = time.time()
    used = (reactor_ns(pid) - cpu) / 1e6
    reader.done = True
    sock.close()
    return reader.frames, used, began, ended


def scenario_big(launcher: BeaconLauncher) -> dict[str, object]:
    """
    4 MiB frames from one source, at 2 a second (what the rate allows) and
    as fast as Beacon reads them: first alone, for the reactor's time per
    frame; then while another process GETs the card from another source.
    Each phase on a fresh Beacon, so that each starts with a full bucket
    (20 frames admitted, the rest rate-limited). Beacon and the probe share
    CPU 0, the attacker has CPU 1 (on loopback the kernel's work of
    sending, which a real network does elsewhere, is charged to the
    sender's CPU): the probe's rate then falls only as far as Beacon's
    reactor is kept busy.
    """
    import subprocess

    frame = masked(expensive_json(4 * 1024 * 1024))
    cpus = sorted(os.sched_getaffinity(0))
    result: dict[str, object] = {}
    for name, pace, seconds in (("paced_2_per_s", 0.5, 3.0), ("flood", 0.0, 3.0)):
        beacon = start(launcher, "")
        pid, port = beacon.process.pid, beacon.port  # type: ignore[attr-defined]
        if len(cpus) > 1:
            os.sched_setaffinity(pid, {cpus[0]})
            os.sched_setaffinity(0, set(cpus[1:]))
        frames, used, began, ended = _attack(pid, port, frame, pace, seconds)
        phase: dict[str, object] = {
            "frames": frames,
            "seconds": round(ended - began, 2),
            "reactor_ms_per_frame": round(used / max(1, frames), 2),
        }
        launcher.close()
        beacon = start(launcher, "")
        pid, port = beacon.process.pid, beacon.port  # type: ignore[attr-defined]
        probe = subprocess.Popen(
            [sys.executable, __file__, "--probe", str(port), "7"],
            stdout=subprocess.PIPE,
            text=True,
        )
        if len(cpus) > 1:
            os.sched_setaffinity(pid, {cpus[0]})
            os.sched_setaffinity(probe.pid, {cpus[0]})
        try:
            time.sleep(0.5)
            unloaded_window = (time.time(), time.time() + 2.0)
            time.sleep(2.0)
            _, _, began, ended = _attack(pid, port, frame, pace, seconds)
            out, _ = probe.communicate(timeout=30)
        finally:
            if probe.poll() is None:
                probe.kill()
                probe.wait()
        launcher.close()
        samples = json.loads(out.strip().splitlines()[-1])
        unloaded = _rate_between(samples, *unloaded_window)
        loaded = _rate_between(samples, began, ended)
        phase["card_get_per_s_unloaded"] = round(unloaded)
        phase["card_get_per_s_loaded"] = round(loaded)
        phase["card_share"] = round(loaded / unloaded, 2) if unloaded else None
        result[name] = phase
    return result


def _drain_bucket(sock: socket.socket, reader: Reader, count: int = 25) -> None:
    small = masked(b'{"jsonrpc":"2.0","id":0,"method":"ListTasks","params":{}}')
    before = reader.frames
    sock.sendall(small * count)
    deadline = time.monotonic() + 10
    while reader.frames < before + count and time.monotonic() < deadline:
        time.sleep(0.01)


def _http_refusals(pid: int, port: int, body: bytes, count: int, source: str, headers: bytes = b"") -> float:
    """Reactor ms per POST of C{body} once C{source}'s bucket is empty."""
    request = (
        b"POST /a2a/v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"A2A-Version: 1.0\r\n" + headers + b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body
    sock = connect(port, source)

    def exchange(n: int) -> None:
        sock.sendall(request * n)
        answered = 0
        buffer = b""
        while answered < n:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError("closed")
            buffer += chunk
            while True:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = buffer[:end].lower()
                length = int(head.split(b"content-length:")[1].split(b"\r\n")[0]) if b"content-length:" in head else 0
                if len(buffer) < end + 4 + length:
                    break
                buffer = buffer[end + 4 + length :]
                answered += 1

    exchange(25)  # the bucket is empty from here on
    cpu = reactor_ns(pid)
    exchange(count)
    used = (reactor_ns(pid) - cpu) / 1e6
    sock.close()
    return used / count


def scenario_small(launcher: BeaconLauncher) -> dict[str, object]:
    beacon = start(launcher, "")
    pid, port = beacon.process.pid, beacon.port  # type: ignore[attr-defined]
    body = expensive_json(65000, "r")
    sock, status = upgrade(port)
    assert status == 101, status
    reader = Reader(sock.dup())
    sock.settimeout(120)
    reader.start()
    _drain_bucket(sock, reader)
    frames = masked(body) * 300
    before = reader.frames
    cpu = reactor_ns(pid)
    sock.sendall(frames)
    deadline = time.monotonic() + 30
    while reader.frames < before + 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    ws_ms = (reactor_ns(pid) - cpu) / 1e6 / 300
    answered = reader.frames - before
    reader.done = True
    sock.close()
    http_ms = _http_refusals(pid, port, body, 300, "127.0.0.3")
    return {
        "ws_frames_answered": answered,
        "ws_reactor_ms_per_refusal": round(ws_ms, 3),
        "http_reactor_ms_per_429": round(http_ms, 3),
        "ratio": round(ws_ms / http_ms, 2) if http_ms else None,
    }


def scenario_unauth(launcher: BeaconLauncher) -> dict[str, object]:
    digest = hashlib.sha256(b"a-token").hexdigest()
    beacon = start(launcher, f'[limits]\nrate = 0\n[auth]\nbearer_tokens = ["{digest}"]\n')
    pid, port = beacon.process.pid, beacon.port  # type: ignore[attr-defined]
    body = expensive_json(65000, "u")
    sock, status = upgrade(port)
    assert status == 101, status
    reader = Reader(sock.dup())
    sock.settimeout(120)
    reader.start()
    cpu = reactor_ns(pid)
    sock.sendall(masked(body) * 300)
    deadline = time.monotonic() + 30
    while reader.frames < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    ws_ms = (reactor_ns(pid) - cpu) / 1e6 / 300
    answered = reader.frames
    reader.done = True
    sock.close()
    http_ms = _http_refusals(pid, port, body, 300, "127.0.0.3")
    return {
        "ws_frames_answered": answered,
        "ws_reactor_ms_per_refusal": round(ws_ms, 3),
        "http_reactor_ms_per_401": round(http_ms, 3),
    }


def scenario_conns(launcher: BeaconLauncher) -> dict[str, object]:
    beacon = start(launcher, "[limits]\nrate = 0\n")
    port = beacon.port  # type: ignore[attr-defined]
    statuses: dict[int, int] = {}
    held = []
    for _ in range(300):
        sock, status = upgrade(port)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 101:
            held.append(sock)
        else:
            sock.close()
    time.sleep(1.0)
    still_open = 0
    for sock in held:
        sock.setblocking(False)
        try:
            still_open += sock.recv(1) != b""
        except BlockingIOError:
            still_open += 1
        except OSError:
            pass
    for sock in held:
        sock.close()
    return {"upgrades_by_status": statuses, "open_after_1s": still_open}


def _unfinished_frame(port: int, source: str = "127.0.0.1") -> socket.socket | None:
    sock, status = upgrade(port, source)
    if status != 101:
        sock.close()
        return None
    size = 4 * 1024 * 1024
    head = bytes((0x81, 0x80 | 127)) + struct.pack("!Q", size) + MASK
    sock.sendall(head + b"\x20" * (size - 1))
    return sock


def _unfinished_body(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = connect(port, source)
    sock.sendall(
        b"POST /a2a/v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"A2A-Version: 1.0\r\nContent-Length: 65536\r\n\r\n" + b" " * 65535
    )
    return sock


def scenario_rss(launcher: BeaconLauncher) -> dict[str, object]:
    beacon = start(launcher, "[limits]\nrate = 0\n")
    pid, port = beacon.process.pid, beacon.port  # type: ignore[attr-defined]
    time.sleep(0.5)
    base = rss_kib(pid)
    socks = [s for s in (_unfinished_frame(port) for _ in range(20)) if s is not None]
    time.sleep(1.5)
    held = rss_kib(pid)
    for sock in socks:
        sock.close()
    time.sleep(1.5)
    after = rss_kib(pid)
    launcher.close()
    # One source's mix, on a fresh Beacon with the defaults but the rate.
    beacon = start(launcher, "[limits]\nrate = 0\n")
    pid, port = beacon.process.pid, beacon.port  # type: ignore[attr-defined]
    time.sleep(0.5)
    mix_base = rss_kib(pid)
    # The WebSocket connections first: until upgraded they count against
    # the HTTP listener's per-source cap (256), which the bodies then fill.
    frames = [s for s in (_unfinished_frame(port) for _ in range(20)) if s is not None]
    mix: list[socket.socket] = []
    for _ in range(256):
        try:
            mix.append(_unfinished_body(port))
        except OSError:
            break
    time.sleep(2.0)
    mix_held = rss_kib(pid)
    for sock in mix + frames:
        sock.close()
    return {
        "ws_frames_held": len(socks),
        "rss_growth_mib_holding": round((held - base) / 1024, 1),
        "rss_growth_mib_after_close": round((after - base) / 1024, 1),
        "mix_http_bodies": len(mix),
        "mix_ws_frames": len(frames),
        "mix_rss_growth_mib": round((mix_held - mix_base) / 1024, 1),
    }


def scenario_noread(launcher: BeaconLauncher) -> dict[str, object]:
    beacon = start(launcher, "")
    pid, port = beacon.process.pid, beacon.port  # type: ignore[attr-defined]
    time.sleep(0.5)
    base = rss_kib(pid)
    empty = masked(b"") * 10_000
    socks = []
    for n in range(20):
        sock, status = upgrade(port, f"127.0.1.{n + 1}", rcvbuf=4096)
        if status == 101:
            sock.setblocking(False)
            socks.append(sock)
    sent = [0] * len(socks)
    cpu = reactor_ns(pid)
    began = time.monotonic()
    while time.monotonic() - began < 5.0:
        progress = False
        for index, sock in enumerate(socks):
            try:
                n = sock.send(empty)
            except BlockingIOError:
                continue
            except OSError:
                continue
            sent[index] += n
            progress = progress or n > 0
        if not progress:
            time.sleep(0.05)
    time.sleep(1.0)
    held = rss_kib(pid)
    cpu_ms = (reactor_ns(pid) - cpu) / 1e6
    for sock in socks:
        sock.close()
    total = sum(sent)
    return {
        "connections": len(socks),
        "empty_frames_into_kernel_buffers": total // 6,
        "rss_growth_mib": round((held - base) / 1024, 1),
        "reactor_ms": round(cpu_ms),
    }


def scenario_logs(launcher: BeaconLauncher) -> dict[str, object]:
    beacon = start(launcher, "")
    port = beacon.port  # type: ignore[attr-defined]
    process = beacon.process  # type: ignore[attr-defined]
    for _ in range(25):  # empty the source's bucket
        sock, _status = upgrade(port)
        sock.close()
    time.sleep(0.5)
    before = len(process.output)
    statuses: dict[int, int] = {}
    began = time.monotonic()
    host = b"h" * 15_000 + b":x"
    for _ in range(100):
        sock, status = upgrade(port, host=host)
        statuses[status] = statuses.get(status, 0) + 1
        sock.close()
    elapsed = time.monotonic() - began
    time.sleep(1.0)
    logged = process.output[before:]
    longest = max((len(line) for line in logged.splitlines()), default=0)
    return {
        "upgrades_by_status": statuses,
        "seconds": round(elapsed, 2),
        "log_bytes": len(logged.encode()),
        "log_lines": logged.count("\n"),
        "longest_line": longest,
    }


SCENARIOS = {
    "big": scenario_big,
    "small": scenario_small,
    "unauth": scenario_unauth,
    "conns": scenario_conns,
    "rss": scenario_rss,
    "noread": scenario_noread,
    "logs": scenario_logs,
}


def main(names: list[str]) -> None:
    if names[:1] == ["--probe"]:
        _probe_main(int(names[1]), float(names[2]))
        return
    for name in names or list(SCENARIOS):
        with tempfile.TemporaryDirectory(prefix="ws-abuse-") as tmp:
            launcher = BeaconLauncher(Path(tmp))
            try:
                result = SCENARIOS[name](launcher)
            finally:
                launcher.close()
        print(name, json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
