"""
Faults and floods against a real `twistd beacon`. Nothing acknowledged is
lost: several clients submit continuously while it is killed (SIGKILL, at
several points of the load) or stopped (SIGTERM, which must drain); after a
restart every receipt any client received answers, and SQLite's integrity
check passes. A full disk refuses submissions without receipts and Beacon
recovers; slow headers are cut off; a flood of maximum-size bodies keeps
memory bounded.

End to end on loopback; every wait is bounded, every process stopped.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from peers.process import BeaconLauncher

CLIENTS = 4
TIMEOUT = 60.0


@pytest.fixture
def launcher(tmp_path: Path) -> Any:
    """Starts Beacons in tmp_path and stops them all afterwards."""
    beacons = BeaconLauncher(tmp_path)
    (tmp_path / "beacon.toml").write_text("[limits]\nrate = 0\n")
    yield beacons
    beacons.close()


def submit_until_stopped(port: int, stop: threading.Event, receipts: list[str], errors: list[str]) -> None:
    """Submit over one keep-alive connection until told to stop or the server goes."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    n = 0
    try:
        while not stop.is_set():
            n += 1
            body = json.dumps({"text": f"load {threading.get_ident()} {n}"})
            connection.request(
                "POST", "/beacon/0.1/submissions", body, {"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            answer = response.read()
            if response.status == 201:
                receipts.append(json.loads(answer)["receipt"]["id"])
            else:
                errors.append(f"{response.status} {answer[:100]!r}")
    except (OSError, http.client.HTTPException):
        return  # The server went away mid-request: that request was not acknowledged.
    finally:
        connection.close()


def load(port: int, seconds: float, stop_server: Any) -> tuple[list[str], list[str]]:
    """
    Run CLIENTS submitters until the first receipt (a safety-net deadline),
    then for C{seconds} more, then C{stop_server()} while they run.
    """
    stop = threading.Event()
    receipts: list[str] = []
    errors: list[str] = []
    threads = [
        threading.Thread(target=submit_until_stopped, args=(port, stop, receipts, errors))
        for _ in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + TIMEOUT
    while not receipts and not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(seconds)
    stop_server()
    stop.set()
    for thread in threads:
        thread.join(TIMEOUT + 5)
        assert not thread.is_alive()
    return receipts, errors


def status_of(port: int, receipt: str) -> int:
    """The HTTP status of the native status lookup of C{receipt}."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        connection.request("GET", f"/beacon/0.1/submissions/{receipt}")
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def check_all_present(launcher: BeaconLauncher, receipts: list[str]) -> None:
    """Restart on the same data; every receipt answers, and the database is whole."""
    beacon = launcher.start("--config", str(launcher.cwd / "beacon.toml"))
    try:
        missing = [r for r in receipts if status_of(beacon.port, r) != 200]
        assert missing == []
    finally:
        beacon.process.stop_cleanly()
    database = sqlite3.connect(launcher.data / "beacon.sqlite3")
    try:
        assert database.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        count = database.execute("SELECT count(*) FROM submissions").fetchone()[0]
        assert count >= len(receipts)
    finally:
        database.close()


@pytest.mark.parametrize("seconds", [0.05, 0.6, 1.5])
def test_sigkill_under_load_loses_no_receipt(launcher: BeaconLauncher, seconds: float) -> None:
    """SIGKILL at several points of a continuous load: every receipt given out is stored."""
    beacon = launcher.start("--config", str(launcher.cwd / "beacon.toml"))
    receipts, errors = load(beacon.port, seconds, lambda: beacon.process.process.send_signal(signal.SIGKILL))
    assert beacon.process.wait_exit(TIMEOUT) == -signal.SIGKILL
    assert errors == []
    check_all_present(launcher, receipts)


def test_sigterm_drains_under_load(launcher: BeaconLauncher) -> None:
    """SIGTERM under load: in-flight submissions are answered, the socket removed, nothing lost."""
    beacon = launcher.start("--config", str(launcher.cwd / "beacon.toml"))
    receipts, errors = load(beacon.port, 1.0, lambda: beacon.process.process.send_signal(signal.SIGTERM))
    beacon.process.wait_exit(TIMEOUT)
    assert "store.closed" in beacon.log
    assert not (launcher.data / "operator.sock").exists()
    # A request that arrives on a kept-alive connection after the store has
    # closed is refused as unavailable (no receipt); nothing else may fail.
    assert all(e.startswith("503 ") and "unavailable" in e for e in errors), errors
    assert receipts
    check_all_present(launcher, receipts)


def test_slow_headers_are_cut_off_for_real(launcher: BeaconLauncher) -> None:
    """For real, on the reactor's clock: headers trickled past header_timeout get 408 and a closed connection, and others are still served."""
    import socket

    config = launcher.cwd / "slow.toml"
    config.write_text("[limits]\nrate = 0\nheader_timeout = 0.5\n")
    beacon = launcher.start("--config", str(config))
    slow = socket.create_connection(("127.0.0.1", beacon.port), timeout=TIMEOUT)
    try:
        slow.sendall(b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\n")
        received = b""
        # A byte a tenth of a second until Beacon answers and closes; the
        # deadline is a safety net for a loaded machine, not the check.
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                slow.sendall(b"X")
            except OSError:
                break
            slow.settimeout(0.1)
            try:
                chunk = slow.recv(4096)
            except socket.timeout:
                continue
            if not chunk:
                break
            received += chunk
    finally:
        slow.close()
    # Cut off by the header timeout (the log says which), not by the
    # idle timeout or the body timeout.
    assert received.startswith(b"HTTP/1.1 408")
    assert b'"request_timeout"' in received
    assert status_of(beacon.port, "a" * 32) == 404
    beacon.process.wait_for(
        re.escape("http.request_timeout: the headers from 127.0.0.1 took longer than 0.5 s"), TIMEOUT
    )


def rss_kib(pid: int) -> int:
    """The resident set size of process C{pid}, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


#: What the manual's "Limits and guarantees" (docs/reference/limits.rst) promises for a flood of
#: maximum-size requests.
FLOOD_RSS_BOUND_MIB = 64


def test_memory_stays_bounded_under_a_flood_of_maximum_size_requests(launcher: BeaconLauncher) -> None:
    """A flood of maximum-size bodies, over and at the cap, grows RSS by less than the bound the manual states."""
    beacon = launcher.start("--config", str(launcher.cwd / "beacon.toml"))
    pid = beacon.process.pid
    at_cap = b'{"text":"' + b"a" * (65536 - 12) + b'"}'
    at_cap += b" "
    over_cap = at_cap + b" "
    assert (len(at_cap), len(over_cap)) == (65536, 65537)

    def flood(body: bytes, count: int, statuses: list[int]) -> None:
        for _ in range(count):
            connection = http.client.HTTPConnection("127.0.0.1", beacon.port, timeout=TIMEOUT)
            try:
                connection.request(
                    "POST", "/beacon/0.1/submissions", body, {"Content-Type": "application/json"}
                )
                response = connection.getresponse()
                response.read()
                statuses.append(response.status)
            except (OSError, http.client.HTTPException):
                statuses.append(0)
            finally:
                connection.close()

    warm: list[int] = []
    flood(at_cap, 20, warm)
    before = rss_kib(pid)
    statuses: list[int] = []
    threads = [
        threading.Thread(target=flood, args=(body, 100, statuses))
        for body in (at_cap, over_cap, at_cap, over_cap)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive()
    after = rss_kib(pid)
    assert statuses.count(201) == 200
    assert set(statuses) <= {201, 413, 0}
    assert statuses.count(413) + statuses.count(0) == 200
    assert (after - before) / 1024 < FLOOD_RSS_BOUND_MIB


def test_full_disk_refuses_without_receipt_and_recovers(tmp_path: Path) -> None:
    """With the data directory's disk full, submissions get 503 and no receipt, reads keep working, and Beacon recovers when space returns."""
    import os
    import shlex
    import shutil
    import subprocess

    from peers.process import LISTENING, TwistdProcess

    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("needs root, unshare and nsenter to mount a small private tmpfs")
    data = tmp_path / "data"
    data.mkdir()

    def in_private_tmpfs(argv: list[str]) -> list[str]:
        mount = f"mount -t tmpfs -o size=4m,mode=0700 beacon-test {shlex.quote(str(data))}"
        return ["unshare", "-m", "sh", "-c", f"{mount} && exec {shlex.join(argv)}"]

    (tmp_path / "c.toml").write_text("[limits]\nrate = 0\n")
    process = TwistdProcess(
        ["--data", str(data), "--http", "tcp:0:interface=127.0.0.1", "--config", str(tmp_path / "c.toml")],
        tmp_path,
        wrap=in_private_tmpfs,
    )
    try:
        port = int(process.wait_for(LISTENING, TIMEOUT).group(2))

        def submit(text: str) -> tuple[int, dict[str, Any]]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
            try:
                connection.request(
                    "POST", "/beacon/0.1/submissions", json.dumps({"text": text}), {"Content-Type": "application/json"}
                )
                response = connection.getresponse()
                return response.status, json.loads(response.read())
            finally:
                connection.close()

        def in_namespace(*command: str) -> None:
            subprocess.run(["nsenter", "-t", str(process.pid), "-m", *command], check=False, capture_output=True, timeout=TIMEOUT)

        status, before = submit("before the disk filled")
        assert status == 201
        filler = str(data / "filler")
        in_namespace("dd", "if=/dev/zero", f"of={filler}", "bs=64k")
        for n in range(3):
            status, answer = submit(f"while full {n} " + "x" * 3000)
            assert status == 503
            assert answer["error"]["code"] == "unavailable"
            assert "receipt" not in answer
        assert status_of(port, before["receipt"]["id"]) == 200
        in_namespace("rm", "-f", filler)
        status, after = submit("after space returned")
        assert status == 201
        assert status_of(port, after["receipt"]["id"]) == 200
        assert re.search(r"intake\.store_failed: .*disk is full", process.output)
    finally:
        process.close()


def test_a_flooding_source_is_refused_while_another_is_served(launcher: BeaconLauncher) -> None:
    """One source flooding gets 429s while a second source (127.0.0.2) is still served, during the flood; the refusals are logged once.

    The bucket refills one token per 1,000 s, so what each source may send
    does not depend on how fast the machine runs: five each, then 429s.
    """
    config = launcher.cwd / "flood.toml"
    config.write_text("[limits]\nrate = 0.001\nburst = 5\n")
    beacon = launcher.start("--config", str(config))
    stop = threading.Event()
    flood_statuses: list[int] = []

    def flood() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", beacon.port, timeout=TIMEOUT)
        try:
            while not stop.is_set():
                connection.request(
                    "POST",
                    "/a2a/v1",
                    b"{}",
                    {"A2A-Version": "1.0", "Content-Type": "application/json"},
                )
                response = connection.getresponse()
                response.read()
                flood_statuses.append(response.status)
        finally:
            connection.close()

    flooders = [threading.Thread(target=flood) for _ in range(3)]
    for thread in flooders:
        thread.start()
    quiet_statuses: list[int] = []
    flood_seen: list[int] = []
    try:
        # The flood is under way: well past its five tokens (a safety-net
        # deadline, not a check).
        deadline = time.monotonic() + TIMEOUT
        while flood_statuses.count(429) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        for n in range(6):
            flood_seen.append(len(flood_statuses))
            connection = http.client.HTTPConnection(
                "127.0.0.1", beacon.port, timeout=TIMEOUT, source_address=("127.0.0.2", 0)
            )
            connection.request(
                "POST", "/beacon/0.1/submissions", json.dumps({"text": f"quiet {n}"}), {"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            response.read()
            quiet_statuses.append(response.status)
            connection.close()
        # Still flooding once the quiet source has been answered.
        deadline = time.monotonic() + TIMEOUT
        while len(flood_statuses) <= flood_seen[-1] + 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        flood_seen.append(len(flood_statuses))
    finally:
        stop.set()
        for thread in flooders:
            thread.join(TIMEOUT + 5)
    assert flood_statuses.count(200) == 5
    assert flood_statuses.count(429) == len(flood_statuses) - 5
    # The other source has its own bucket: five served, then refused, all
    # while the flood went on.
    assert quiet_statuses == [201] * 5 + [429]
    assert flood_seen == sorted(flood_seen) and flood_seen[-1] > flood_seen[0]
    # One run of refusals, logged once, never once per refused request.
    assert beacon.log.count("http.rate_limited: source 127.0.0.1") == 1
