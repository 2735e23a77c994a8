"""
The benchmark's gRPC load client on HTTP/2 of its own (bench/h2_load.py),
with grpc_load.py's command line and JSON: run for well under a second
against a tiny grpcio server in this process (canned Tasks; what it answers
chosen by the x-api-key the client sends) and against a real Beacon's gRPC
listener, it counts right answers as requests, and a wrong grpc-status, a
wrong state or a call past --call-timeout as errors by kind; a target that
never answers is exit 1, bounded by its connect timeout; usage is exit 2.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest
from test_bench_grpc_load import H2_LOAD, run_client
from test_bench_grpc_load import grpc_target  # noqa: F401  (a fixture: a Beacon with a gRPC listener)

from beacon.proto import a2a_pb2

grpc = pytest.importorskip("grpc")

#: The most one run may take here (its own bounds are far less).
RUN_TIMEOUT = 120.0
FIELDS = {"requests", "errors", "seconds", "rps", "p50_ms", "p99_ms", "client_cpu_seconds"}
TASK_ID = "canned-task"


def canned(key: str, state: int = a2a_pb2.TASK_STATE_SUBMITTED) -> Any:
    """The canned Task, or what the x-api-key asks for instead."""
    if key == "working":
        state = a2a_pb2.TASK_STATE_WORKING
    return a2a_pb2.Task(id=TASK_ID, context_id="c", status=a2a_pb2.TaskStatus(state=state))


def behave(context: Any) -> None:
    """x-api-key 'denied': PERMISSION_DENIED; 'hang': no answer until the call ends (its deadline)."""
    key = dict(context.invocation_metadata()).get("x-api-key", "")
    if key == "denied":
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "denied")
    if key == "hang":
        ended = threading.Event()
        context.add_callback(ended.set)
        ended.wait()
        context.abort(grpc.StatusCode.CANCELLED, "ended")


def send_message(request: Any, context: Any) -> Any:
    behave(context)
    assert request.message.message_id and request.message.parts[0].text
    key = dict(context.invocation_metadata()).get("x-api-key", "")
    return a2a_pb2.SendMessageResponse(task=canned(key))


def get_task(request: Any, context: Any) -> Any:
    behave(context)
    key = dict(context.invocation_metadata()).get("x-api-key", "")
    task = canned(key)
    if key == "other":
        task.id = "another-task"
    assert request.id == TASK_ID
    return task


@pytest.fixture
def canned_target() -> Iterator[str]:
    """A grpcio server on loopback answering SendMessage and GetTask with the canned Task; its host:port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handlers = {
        "SendMessage": grpc.unary_unary_rpc_method_handler(
            send_message, a2a_pb2.SendMessageRequest.FromString, a2a_pb2.SendMessageResponse.SerializeToString
        ),
        "GetTask": grpc.unary_unary_rpc_method_handler(
            get_task, a2a_pb2.GetTaskRequest.FromString, a2a_pb2.Task.SerializeToString
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("lf.a2a.v1.A2AService", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def run(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    return run_client(H2_LOAD, *args, prelude=prelude)


def measured(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert set(result) == FIELDS
    if "errors:" not in done.stderr:
        assert result["errors"] == 0, done.stderr
    return result


def test_right_answers_counted(canned_target: str) -> None:
    """Two connections, two calls in flight each: one JSON object, every answer right, exit 0; both methods."""
    result = measured(run("--target", canned_target, "--connections", "2", "--depth", "2", "--duration", "0.5",
                          "--warmup", "0.1", "--api-key", "right", "--json"))
    assert result["requests"] > 0 and result["errors"] == 0
    assert result["seconds"] == pytest.approx(0.5)
    assert result["rps"] == pytest.approx(result["requests"] / result["seconds"], rel=1e-3)
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    got = measured(run("--target", canned_target, "--method", "get", "--duration", "0.3", "--json"))
    assert got["requests"] > 0 and got["errors"] == 0, got


def test_wrong_answers_counted_as_errors(canned_target: str) -> None:
    """A grpc-status other than 0, a Task in another state, another task: errors by kind, no requests."""
    denied = run("--target", canned_target, "--duration", "0.3", "--api-key", "denied", "--json")
    assert measured(denied)["requests"] == 0 and measured(denied)["errors"] > 0
    assert "PERMISSION_DENIED" in denied.stderr
    working = run("--target", canned_target, "--duration", "0.3", "--api-key", "working", "--json")
    assert measured(working)["requests"] == 0 and "wrong answer" in working.stderr
    expected = run("--target", canned_target, "--duration", "0.3", "--expect-state", "TASK_STATE_WORKING", "--json")
    assert measured(expected)["requests"] == 0 and "wrong answer" in expected.stderr
    other = run("--target", canned_target, "--method", "get", "--duration", "0.3", "--api-key", "other", "--json")
    assert measured(other)["requests"] == 0 and "wrong answer" in other.stderr
    # With --method get, the SendMessage that makes the task failing: exit 1.
    unmade = run("--target", canned_target, "--method", "get", "--duration", "0.3", "--api-key", "denied", "--json")
    assert unmade.returncode == 1 and unmade.stdout == "" and "PERMISSION_DENIED" in unmade.stderr


def test_call_timeout(canned_target: str) -> None:
    """Calls never answered within --call-timeout: DEADLINE_EXCEEDED errors, and the client goes on calling."""
    late = run("--target", canned_target, "--duration", "1", "--call-timeout", "0.05", "--api-key", "hang", "--json")
    result = measured(late)
    assert result["requests"] == 0 and result["errors"] > 1 and "DEADLINE_EXCEEDED" in late.stderr


def test_against_beacon(grpc_target: str) -> None:  # noqa: F811
    """A real Beacon (its own gRPC door, its own HPACK encoding): every answer right, for both methods."""
    sent = measured(run("--target", grpc_target, "--connections", "2", "--duration", "0.5", "--json"))
    assert sent["requests"] > 0 and sent["errors"] == 0
    got = measured(run("--target", grpc_target, "--method", "get", "--duration", "0.3", "--json"))
    assert got["requests"] > 0 and got["errors"] == 0, got


def test_usage_of_its_own() -> None:
    """A target without a port: exit 2 (grpc_load.py would try it). No protobuf: one line, exit 2.
    (Nothing answering, and the arguments both clients refuse: test_bench_grpc_load.py.)"""
    assert run("--target", "nowhere", "--duration", "1").returncode == 2
    missing = run("--target", "127.0.0.1:1", "--duration", "1", prelude="import sys; sys.modules['google.protobuf'] = None")
    assert missing.returncode == 2 and missing.stdout == "" and len(missing.stderr.splitlines()) == 1


def test_encoder_in_step_with_a_decoder() -> None:
    """The client's header blocks, both methods interleaved, as Beacon's HPACK Decoder reads them: the fields
    sent; literals with incremental indexing the first time, then indexed fields (and the grpc-timeout literal)."""
    import runpy
    from types import SimpleNamespace

    from beacon.bindings.grpc._hpack import Decoder

    h2_load = runpy.run_path(str(H2_LOAD))
    requests = h2_load["Requests"](SimpleNamespace(target="127.0.0.1:1", api_key="k", call_timeout=0.25), a2a_pb2)
    encoder, decoder = h2_load["Encoder"](), Decoder()
    sizes = []
    for method in ("send", "send", "get", "send", "get", "get", "send"):
        block = encoder.block(method, requests.fields[method], requests.plain)
        assert list(decoder.decode(block)) == [*requests.fields[method], (b"grpc-timeout", b"250m")]
        sizes.append(len(block))
    # The first of each method inserts; from then on each block is 8 indexed fields and the literal.
    assert sizes[0] > sizes[2] > sizes[1] == sizes[3] == sizes[4] == sizes[6] == 9 + 2 + 12 + 5
    assert len(decoder.dynamic_table) == 8
