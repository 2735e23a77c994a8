"""
The agent commands of the C{beacon} script (C{card}, C{send}, C{task}), end
to end: the real console script in a subprocess against Beacon started as
a user starts it (C{twistd -n beacon}). Every subprocess wait is bounded.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from peers.process import Beacon, BeaconLauncher

#: The most any one command may take here (its own --timeout is less).
COMMAND_TIMEOUT = 60.0


@pytest.fixture
def beacon(tmp_path: Path) -> Iterator[Beacon]:
    """A Beacon on a free loopback port; stopped afterwards."""
    launcher = BeaconLauncher(tmp_path)
    try:
        yield launcher.start()
    finally:
        launcher.close()


def beacon_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run C{beacon ARGS} to the end (bounded)."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "beacon.cli", *args],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"beacon {' '.join(args)} did not finish within {COMMAND_TIMEOUT} s: {e}")


def test_card_send_task(beacon: Beacon) -> None:
    """card shows the interfaces, send prints the new task's id and state, task gets it, over both public bindings."""
    card = beacon_cli("card", beacon.public_url)
    assert card.returncode == 0, card.stderr
    assert "JSONRPC 1.0" in card.stdout and "https://a2a-rust.com/bindings/websocket/v1" in card.stdout
    assert "capabilities: streaming" in card.stdout
    as_json = beacon_cli("card", beacon.public_url, "--json")
    assert json.loads(as_json.stdout)["supportedInterfaces"]
    for binding in ("jsonrpc", "websocket"):
        sent = beacon_cli("send", beacon.public_url, "hello from the CLI", "--binding", binding)
        assert sent.returncode == 0, sent.stderr
        word, task_id, state = sent.stdout.split()[:3]
        assert (word, state) == ("task", "TASK_STATE_SUBMITTED")
        got = beacon_cli("task", beacon.public_url, task_id, "--binding", binding)
        assert got.returncode == 0, got.stderr
        assert got.stdout.splitlines()[:2] == [f"task {task_id}", "state TASK_STATE_SUBMITTED"]
    sent_json = beacon_cli("send", beacon.public_url, "as json", "--json")
    assert json.loads(sent_json.stdout)["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_send_with_data(beacon: Beacon, tmp_path: Path) -> None:
    """--data adds a JSON data part; an unreadable --data file is a usage error (2)."""
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"subject": "s", "body": "b"}))
    sent = beacon_cli("send", beacon.public_url, "", "--data", str(data))
    # Beacon checks structured data against its schema: either it is
    # accepted, or refused as the agent's one-line error.
    assert sent.returncode in (0, 1)
    assert "Traceback" not in sent.stderr
    missing = beacon_cli("send", beacon.public_url, "x", "--data", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "--data" in missing.stderr


def test_errors_and_exit_codes(beacon: Beacon, tmp_path: Path) -> None:
    """An unknown task and an unreachable agent exit 1 with one line; usage errors exit 2."""
    unknown = beacon_cli("task", beacon.public_url, "no-such-task")
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("beacon: the agent refused the request: ")
    assert "TASK_NOT_FOUND" in unknown.stderr and len(unknown.stderr.splitlines()) == 1
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    refused = beacon_cli("card", f"http://127.0.0.1:{port}")
    assert refused.returncode == 1
    assert refused.stderr.startswith("beacon: cannot reach the agent at ")
    assert len(refused.stderr.splitlines()) == 1
    assert beacon_cli("send", beacon.public_url).returncode == 2
    assert beacon_cli("send", beacon.public_url, "x", "--binding", "grpc").returncode == 2
    no_socket = beacon_cli("send", beacon.public_url, "x", "--binding", "unix")
    assert no_socket.returncode == 2 and "--socket" in no_socket.stderr
    none_fit = beacon_cli("send", beacon.public_url, "x", "--binding", "unix", "--socket", str(tmp_path / "s"))
    assert none_fit.returncode == 1 and "no interface of the card can be used" in none_fit.stderr


def test_operator_socket_task(beacon: Beacon, tmp_path: Path) -> None:
    """beacon task unix:///path reads a task over the operator socket (the unix binding)."""
    sent = beacon_cli("send", beacon.public_url, "for the operator")
    task_id = sent.stdout.split()[1]
    sock = tmp_path / "data" / "operator.sock"
    got = beacon_cli("task", f"unix://{sock}", task_id)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[0] == f"task {task_id}"


def test_timeout_exit_code() -> None:
    """A peer that accepts and never answers: --timeout bounds the command, which exits 3."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        port = silent.getsockname()[1]
        result = beacon_cli("card", f"http://127.0.0.1:{port}", "--timeout", "1")
    finally:
        silent.close()
    assert result.returncode == 3
    assert result.stderr.startswith("beacon: no answer from the agent at ")
