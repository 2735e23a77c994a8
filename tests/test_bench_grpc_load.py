"""
The benchmark's gRPC load client (bench/grpc_load.py): run for about a
second against a real Beacon's gRPC listener (C{twistd -n beacon} with
C{[grpc] listen}), it prints the contract's JSON object with every answer
counted right; without grpcio it says so and exits 2; a target that never
answers is exit 1, bounded by its connect timeout.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from peers.process import START_TIMEOUT, BeaconLauncher

GRPC_LOAD = Path(__file__).resolve().parent.parent / "bench" / "grpc_load.py"
#: The raw HTTP/2 client, which keeps grpc_load.py's command line and exit codes.
H2_LOAD = GRPC_LOAD.parent / "h2_load.py"
#: Where Beacon's log says a gRPC listener is bound.
SERVING = re.compile(r"a2a\.grpc\.serving: the gRPC binding at (\S+)")
#: The most one run may take here (its own bounds are far less).
RUN_TIMEOUT = 120.0


@pytest.fixture
def grpc_target(tmp_path: Path) -> Iterator[str]:
    """A Beacon with a gRPC listener on loopback and no rate limit; its host:port."""
    config = tmp_path / "beacon.toml"
    config.write_text('[grpc]\nlisten = ["127.0.0.1:0"]\n\n[limits]\nrate = 0\n')
    launcher = BeaconLauncher(tmp_path)
    try:
        beacon = launcher.start("--config", str(config))
        yield beacon.process.wait_for(SERVING, START_TIMEOUT).group(1)
    finally:
        launcher.close()


def run_client(script: Path, *args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """Run a load client with C{args}, after C{prelude} (Python run first, in the same process)."""
    code = f"{prelude}\nimport runpy, sys\nsys.argv = [{script.name!r}, *{list(args)!r}]\nrunpy.run_path({str(script)!r}, run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL
    )


def run(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    return run_client(GRPC_LOAD, *args, prelude=prelude)


def test_load_against_beacon(grpc_target: str) -> None:
    """Two channels for a second (after a short warm-up): one JSON object, every answer a submitted Task, exit 0."""
    done = run("--target", grpc_target, "--connections", "2", "--duration", "1", "--warmup", "0.2", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"requests", "errors", "seconds", "rps", "p50_ms", "p99_ms", "client_cpu_seconds"}
    assert result["requests"] > 0 and result["errors"] == 0, done.stderr
    assert result["seconds"] == pytest.approx(1.0)
    assert result["rps"] == pytest.approx(result["requests"] / result["seconds"], rel=1e-3)
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    # Any other state expected: every answer is an error, counted by kind.
    wrong = run("--target", grpc_target, "--duration", "0.3", "--expect-state", "TASK_STATE_COMPLETED", "--json")
    assert wrong.returncode == 0 and json.loads(wrong.stdout)["requests"] == 0
    assert json.loads(wrong.stdout)["errors"] > 0 and "wrong answer" in wrong.stderr


def test_get_task_load_against_beacon(grpc_target: str) -> None:
    """--method get: one SendMessage makes the task, then every call is its GetTask, answered right."""
    done = run("--target", grpc_target, "--method", "get", "--connections", "2", "--duration", "0.5", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["requests"] > 0 and result["errors"] == 0, done.stderr
    wrong = run("--target", grpc_target, "--method", "get", "--duration", "0.3",
                "--expect-state", "TASK_STATE_COMPLETED", "--json")
    assert wrong.returncode == 0 and json.loads(wrong.stdout)["requests"] == 0
    assert "wrong answer" in wrong.stderr


def test_without_grpcio() -> None:
    """No grpcio: one line, exit 2."""
    missing = run("--target", "127.0.0.1:1", "--duration", "1", "--json", prelude="import sys; sys.modules['grpc'] = None")
    assert missing.returncode == 2 and missing.stdout == ""
    assert len(missing.stderr.splitlines()) == 1 and "pip install 'beacon-a2a[grpc]'" in missing.stderr


@pytest.mark.parametrize("script", [GRPC_LOAD, H2_LOAD], ids=["grpc_load", "h2_load"])
def test_unreachable_and_usage(script: Path) -> None:
    """Both clients: nothing answering, exit 1 once --connect-timeout passes; bad arguments, exit 2."""
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    unreachable = run_client(script, "--target", f"127.0.0.1:{port}", "--duration", "1", "--connect-timeout", "0.5", "--json")
    assert unreachable.returncode == 1 and unreachable.stdout == ""
    assert "not reachable within 0.5 s" in unreachable.stderr
    assert run_client(script, "--target", "x:1", "--duration", "0").returncode == 2
    assert run_client(script, "--target", "x:1", "--duration", "1", "--connections", "0").returncode == 2
