"""
Start and stop the a2a-sdk test agent (C{a2a_sdk_agent.py}) as a
subprocess on a loopback socket bound here, so that no port is guessed.
Every wait is bounded; the agent is stopped by pid. With C{grpc=True} it
also serves the SDK's gRPC server (on a loopback port it binds itself and
lists on its card: L{grpc_target} reads it there).
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

AGENT = Path(__file__).parent / "a2a_sdk_agent.py"
#: How long the agent may take to serve its card, and to stop: safety nets
#: for a loaded machine (it starts in about a second idle).
START_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0


class AgentFailed(AssertionError):
    """The agent did not serve its card."""


@contextmanager
def sdk_agent(grpc: bool = False) -> Iterator[str]:
    """
    Run the agent until the block ends; its base URL. It has served its
    card (waited for, blocking and bounded) before the block starts, so
    that a client under test, whose own timeouts run on the real reactor,
    never waits for the agent's start-up.

    @param grpc: Also serve the SDK's gRPC service (listed on the card).
    """
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(16)
    port = listening.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(AGENT), "--fd", str(listening.fileno()), "--port", str(port)]
        + (["--grpc"] if grpc else []),
        pass_fds=[listening.fileno()],
        stdin=subprocess.DEVNULL,
    )
    listening.close()
    try:
        ready = http.client.HTTPConnection("127.0.0.1", port, timeout=START_TIMEOUT)
        try:
            ready.request("GET", "/.well-known/agent-card.json")
            status = ready.getresponse().status
        except OSError as e:
            raise AgentFailed(f"the a2a-sdk agent did not serve (exit code {process.poll()}): {e!r}") from None
        finally:
            ready.close()
        if status != 200:
            raise AgentFailed(f"the a2a-sdk agent answered its card with {status}")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT)


def grpc_target(url: str) -> str:
    """The C{host:port} of the GRPC interface on the card of the agent at C{url} (bounded)."""
    host, _, port = url.removeprefix("http://").partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=START_TIMEOUT)
    try:
        connection.request("GET", "/.well-known/agent-card.json")
        card = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    for interface in card.get("supportedInterfaces", []):
        if interface.get("protocolBinding") == "GRPC":
            return str(interface["url"])
    raise AgentFailed(f"the agent's card lists no GRPC interface: {card}")
