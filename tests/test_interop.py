"""
Interop: a real peer from PyPI, the official C{a2a-sdk} client (run as its own
process by C{tests/peers/a2a_sdk_client.py}), against Beacon started as a
user starts it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from peers.process import Beacon, BeaconLauncher

CLIENT = Path(__file__).parent / "peers" / "a2a_sdk_client.py"

#: The whole peer run (its imports, then card, SendMessage, GetTask, the
#: GetTask of no task) is bounded by this: a safety net, above the peer's
#: own bound on its run (four times its per-step TIMEOUT), so that a slow
#: machine fails with the peer's own message if at all.
PEER_TIMEOUT = 300.0
#: How long the test waits for a log line of Beacon's (a safety net).
LOG_TIMEOUT = 60.0


@pytest.fixture
def beacon(tmp_path: Path) -> Iterator[Beacon]:
    """A Beacon on a free loopback port, with a gRPC listener on another; stopped afterwards."""
    config = tmp_path / "grpc.toml"
    config.write_text('[grpc]\nlisten = ["127.0.0.1:0"]\n')
    launcher = BeaconLauncher(tmp_path)
    try:
        yield launcher.start("--config", str(config))
    finally:
        launcher.close()


def run_sdk_client(base_url: str, text: str, binding: str) -> dict[str, dict[str, Any]]:
    """
    Run the a2a-sdk peer against C{base_url} over C{binding}; return its
    output records by step (C{card}, C{send}, C{get}, C{error}).
    """
    try:
        result = subprocess.run(
            [sys.executable, str(CLIENT), base_url, text, binding],
            capture_output=True,
            text=True,
            timeout=PEER_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:  # run() has killed it already
        pytest.fail(f"the a2a-sdk client did not finish within {PEER_TIMEOUT} s: {e}")
    assert result.returncode == 0, (
        f"the a2a-sdk client failed ({result.returncode}):\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return {record["step"]: record for record in records}


@pytest.mark.parametrize(
    "binding, path",
    [("JSONRPC", "/a2a/v1"), ("HTTP+JSON", "/a2a/rest"), ("GRPC", "")],
    ids=["jsonrpc", "http+json", "grpc"],
)
def test_a2a_sdk_client_submits_and_gets_task(beacon: Beacon, binding: str, path: str) -> None:
    """
    The official a2a-sdk client resolves Beacon's card, selects the
    interface of its binding (JSONRPC, HTTP+JSON with the SDK's REST
    transport, or GRPC with its gRPC transport at the card's host:port), gets a TASK_STATE_SUBMITTED Task from SendMessage, the same
    Task again from GetTask, and its own TaskNotFoundError for a task that
    does not exist.
    """
    text = f"Hello from the a2a-sdk interop test {uuid.uuid4().hex}."
    steps = run_sdk_client(beacon.public_url, text, binding)

    card = steps["card"]
    base = f"http://127.0.0.1:{beacon.port}"
    grpc_url = card["interfaces"][2]["url"]
    assert re.fullmatch(r"127\.0\.0\.1:[0-9]+", grpc_url), grpc_url
    url = base + path if binding != "GRPC" else grpc_url + "/lf.a2a.v1.A2AService/"
    assert card["name"] == "Beacon"
    assert card["streaming"] is False
    assert card["interfaces"] == [
        {"url": base + "/a2a/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": base + "/a2a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": grpc_url, "protocolBinding": "GRPC", "protocolVersion": "1.0"},
        {
            "url": f"ws://127.0.0.1:{beacon.port}/a2a/ws",
            "protocolBinding": "https://a2a-rust.com/bindings/websocket/v1",
            "protocolVersion": "1.0",
        },
    ]

    sent = steps["send"]
    # The interface of the binding was the one used.
    assert sent["url"] == {
        "JSONRPC": url,
        "HTTP+JSON": url + "/message:send",
        "GRPC": url + "SendMessage",
    }[binding]
    assert sent["a2aVersion"] == "1.0"
    assert sent["state"] == "TASK_STATE_SUBMITTED"
    assert sent["id"]
    assert sent["timestamp"]

    got = steps["get"]
    assert got["url"].startswith(url)
    assert (got["id"], got["contextId"], got["state"], got["timestamp"]) == (
        sent["id"],
        sent["contextId"],
        sent["state"],
        sent["timestamp"],
    )

    refused = steps["error"]
    assert refused["error"] == "TaskNotFoundError", refused
    assert refused["url"].startswith(url)

    stored = beacon.process.wait_for(r"intake\.stored: receipt (\S+) .* via (\S+)", LOG_TIMEOUT)
    assert stored.group(1) == sent["id"]
    assert stored.group(2) == {"JSONRPC": "jsonrpc", "HTTP+JSON": "http+json", "GRPC": "grpc"}[binding]
    assert text not in beacon.log
