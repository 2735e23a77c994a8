"""
The agent commands of the C{beacon} script (C{card}, C{send}, C{task}), end
to end: the real console script in a subprocess against Beacon started as
a user starts it (C{twistd -n beacon}), and against the official a2a-sdk's
JSON-RPC and HTTP+JSON servers. Every subprocess wait is bounded.
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
from peers.sdk_agent import sdk_agent as start_sdk_agent

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


@pytest.fixture
def sdk_agent() -> Iterator[str]:
    """The a2a-sdk test agent (HTTP+JSON listed first, then JSON-RPC) on loopback; its base URL."""
    with start_sdk_agent() as url:
        yield url


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
    """card shows the interfaces, send prints the new task's id and state, task gets it, over the three public bindings."""
    card = beacon_cli("card", beacon.public_url)
    assert card.returncode == 0, card.stderr
    assert "JSONRPC 1.0" in card.stdout and "https://a2a-rust.com/bindings/websocket/v1" in card.stdout
    assert f"HTTP+JSON 1.0  {beacon.public_url}/a2a/rest" in card.stdout
    assert "capabilities: streaming" in card.stdout
    assert card.stdout.splitlines()[-1] == f"selected interface: JSONRPC 1.0  {beacon.public_url}/a2a/v1"
    as_json = beacon_cli("card", beacon.public_url, "--json")
    assert json.loads(as_json.stdout)["supportedInterfaces"]
    rest = beacon_cli("card", beacon.public_url, "--binding", "http+json")
    assert rest.stdout.splitlines()[-1] == f"selected interface: HTTP+JSON 1.0  {beacon.public_url}/a2a/rest"
    for binding in ("jsonrpc", "http+json", "websocket"):
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
    for binding in ("http+json", "websocket"):
        # The same one line whichever binding carried the refusal.
        assert beacon_cli("task", beacon.public_url, "no-such-task", "--binding", binding).stderr == unknown.stderr
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    refused = beacon_cli("card", f"http://127.0.0.1:{port}")
    assert refused.returncode == 1
    assert refused.stderr.startswith("beacon: cannot reach the agent at ")
    assert len(refused.stderr.splitlines()) == 1
    assert beacon_cli("send", beacon.public_url).returncode == 2
    grpc = beacon_cli("send", beacon.public_url, "x", "--binding", "grpc")
    assert grpc.returncode == 1 and "GRPC" not in grpc.stderr and "no interface of the card can be used" in grpc.stderr
    pigeon = beacon_cli("send", beacon.public_url, "x", "--binding", "pigeon")
    assert pigeon.returncode == 2 and "unknown binding 'pigeon'" in pigeon.stderr
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


def test_binding_lists_and_spellings(beacon: Beacon) -> None:
    """--binding takes the card's spelling in any case, and a comma-separated order of preference; card --binding names the interface it would use, or exits 1 when none fits."""
    websocket_first = beacon_cli("card", beacon.public_url, "--binding", "websocket,jsonrpc")
    assert websocket_first.returncode == 0, websocket_first.stderr
    assert websocket_first.stdout.splitlines()[-1].startswith("selected interface: https://a2a-rust.com/bindings/websocket/v1 1.0  ws://")
    sent = beacon_cli("send", beacon.public_url, "spelled", "--binding", "JSONRPC")
    assert sent.returncode == 0, sent.stderr
    unix_only = beacon_cli("card", beacon.public_url, "--binding", "unix", "--socket", "/nonexistent.sock")
    assert unix_only.returncode == 1
    assert unix_only.stderr.startswith("beacon: no interface of the card can be used: ")


def test_http_json_against_the_a2a_sdk(sdk_agent: str) -> None:
    """Against the a2a-sdk's REST routes: card, send and task with --binding http+json; by default the card's first interface, HTTP+JSON; --binding jsonrpc overrides the card's order; an unknown task is the same one-line refusal over both."""
    card = beacon_cli("card", sdk_agent, "--binding", "http+json")
    assert card.returncode == 0, card.stderr
    assert card.stdout.splitlines()[-1] == f"selected interface: HTTP+JSON 1.0  {sdk_agent}/a2a/rest"
    default = beacon_cli("card", sdk_agent)
    assert default.stdout.splitlines()[-1] == f"selected interface: HTTP+JSON 1.0  {sdk_agent}/a2a/rest"
    overridden = beacon_cli("card", sdk_agent, "--binding", "jsonrpc")
    assert overridden.stdout.splitlines()[-1] == f"selected interface: JSONRPC 1.0  {sdk_agent}/a2a/v1"
    sent = beacon_cli("send", sdk_agent, "over REST", "--binding", "http+json")
    assert sent.returncode == 0, sent.stderr
    word, task_id, state = sent.stdout.split()[:3]
    assert (word, state) == ("task", "TASK_STATE_COMPLETED")
    assert sent.stdout.splitlines()[1] == "echo: over REST"
    for binding in ("http+json", "jsonrpc"):
        got = beacon_cli("task", sdk_agent, task_id, "--binding", binding)
        assert got.returncode == 0, got.stderr
        assert got.stdout.splitlines()[:2] == [f"task {task_id}", "state TASK_STATE_COMPLETED"]
    as_json = beacon_cli("task", sdk_agent, task_id, "--binding", "http+json", "--json")
    assert json.loads(as_json.stdout)["id"] == task_id
    refusals = [beacon_cli("task", sdk_agent, "no-such-task", "--binding", b) for b in ("http+json", "jsonrpc")]
    for refused in refusals:
        assert refused.returncode == 1
        assert refused.stderr == "beacon: the agent refused the request: Task not found (error -32001, TASK_NOT_FOUND)\n"
    websocket = beacon_cli("send", sdk_agent, "x", "--binding", "websocket")
    assert websocket.returncode == 1 and "not among the bindings asked for" in websocket.stderr


def test_describe_status_errors() -> None:
    """An HTTP+JSON refusal that names no A2A error is said with its HTTP status, Status and reason; a bare HTTP status stays an unexpected answer."""
    from beacon.cli._peer import describe_peer
    from beacon.client import HTTPStatusError

    limited = HTTPStatusError(
        429, "Too Many Requests", status_name="RESOURCE_EXHAUSTED", message="slow\x1b[31m down", reason="RATE_LIMITED"
    )
    assert describe_peer(limited) == (
        "the agent refused the request: slow\\x1b[31m down (HTTP 429 RESOURCE_EXHAUSTED, RATE_LIMITED)"
    )
    bare = HTTPStatusError(502, "Bad Gateway", expected="an HTTP+JSON answer")
    assert describe_peer(bare) == (
        "unexpected answer from the agent: the server answered HTTP 502 Bad Gateway without an HTTP+JSON answer"
    )
