"""
The A2A gRPC binding (C{beacon.bindings.grpc}, C{[grpc]}): Beacon's gRPC
door on 127.0.0.1:0, started inside the test's running reactor (as
makeService wires it, or a L{GRPCServer} over a policy of the test's),
against grpcio's own client. Every call from the test goes through a
grpcio channel on a thread (C{deferToThread}), so the reactor keeps running
and answers it.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_twisted
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread

from beacon.bindings.grpc import GRPCCalls, GRPCServer
from beacon.bindings.http import SubmitterAuth, TransportLimits, credential_digest
from beacon.bindings.admission import RateLimiter, SourceResolver
from beacon.config import ConfigError, build_config
from beacon.errors import StartupError
from beacon.proto import a2a_pb2, a2a_pb2_grpc
from beacon.protocol import Dispatcher, EventStream, InternalError, TaskNotFoundError
from beacon.service import GRPCService, makeService

V1 = (("a2a-version", "1.0"),)
A2A = "a2a-protocol.org"
BEACON = "beacon.unownedminds.com"


def text_request(text: str = "hello over gRPC", message_id: str = "m-1") -> Any:
    return a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(
            message_id=message_id, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)]
        )
    )


def refusal(error: grpc.RpcError) -> dict[str, Any]:
    """An RPC error's code, message and decoded details."""
    decoded: dict[str, Any] = {"code": error.code(), "message": error.details()}
    status = rpc_status.from_call(error)
    if status is not None:
        assert status.code == error.code().value[0]
        for detail in status.details:
            for kind, name in (
                (error_details_pb2.ErrorInfo, "info"),
                (error_details_pb2.BadRequest, "bad_request"),
                (error_details_pb2.RetryInfo, "retry"),
            ):
                if detail.Is(kind.DESCRIPTOR):
                    message = kind()
                    detail.Unpack(message)
                    decoded[name] = message
    return decoded


def rpc(
    target: str,
    method: str,
    request: Any,
    metadata: Any = V1,
    *,
    credentials: Any = None,
    options: Any = (),
    compression: Any = None,
) -> Deferred[Any]:
    """Call C{method} on a channel of its own, on a thread: its answer, or its decoded refusal."""

    def call() -> Any:
        if credentials is None:
            channel = grpc.insecure_channel(target, compression=compression)
        else:
            channel = grpc.secure_channel(target, credentials, options=options, compression=compression)
        with channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            try:
                answer = getattr(stub, method)(request, metadata=metadata, timeout=30)
                if method in ("SendStreamingMessage", "SubscribeToTask"):
                    return list(answer)
                return answer
            except grpc.RpcError as error:
                return refusal(error)

    return deferToThread(call)


class Running:
    """A Beacon of makeService's, started on the test's reactor."""

    def __init__(self, tmp_path: Any, values: dict[str, Any]) -> None:
        values = {
            "server": {"data": str(tmp_path / "data"), "http": ["tcp:0:interface=127.0.0.1"]},
            "operator": {"socket": ""},
            **values,
        }
        values.setdefault("grpc", {}).setdefault("listen", ["127.0.0.1:0"])
        self.config = build_config(values)
        self.service = makeService(self.config, reactor)

    def start(self) -> None:
        self.service.privilegedStartService()
        self.service.startService()
        grpc_service = next(s for s in self.service if isinstance(s, GRPCService))
        self.target = grpc_service.server.urls[0]


@pytest.fixture
def beacon_factory(tmp_path: Any) -> Any:
    started: list[Running] = []

    def make(values: dict[str, Any] | None = None) -> Running:
        running = Running(tmp_path, values or {})
        running.start()
        started.append(running)
        return running

    yield make
    for running in started:
        if running.service.running:
            pytest_twisted.blockon(running.service.stopService())


@pytest_twisted.async_yield_fixture
async def beacon(beacon_factory: Any) -> AsyncIterator[Running]:
    yield beacon_factory()


@pytest_twisted.ensureDeferred
async def test_send_then_get_the_receipt(beacon: Running) -> None:
    sent = await rpc(beacon.target, "SendMessage", text_request())
    assert sent.WhichOneof("payload") == "task"
    assert sent.task.status.state == a2a_pb2.TASK_STATE_SUBMITTED
    got = await rpc(beacon.target, "GetTask", a2a_pb2.GetTaskRequest(id=sent.task.id))
    assert got.id == sent.task.id
    assert got.status.state == a2a_pb2.TASK_STATE_SUBMITTED
    listed = await rpc(beacon.target, "ListTasks", a2a_pb2.ListTasksRequest())
    assert isinstance(listed, a2a_pb2.ListTasksResponse)


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
@pytest_twisted.ensureDeferred
async def test_a_client_that_compresses_is_read(beacon: Running, compression: Any) -> None:
    sent = await rpc(beacon.target, "SendMessage", text_request("squeezed " * 200), compression=compression)
    assert sent.task.status.state == a2a_pb2.TASK_STATE_SUBMITTED
    got = await rpc(beacon.target, "GetTask", a2a_pb2.GetTaskRequest(id=sent.task.id), compression=compression)
    assert got.id == sent.task.id


#: Every other method and what Beacon's public policy answers it with, as
#: on JSON-RPC: (method, request, gRPC code, ErrorInfo reason).
REFUSED = [
    ("GetTask", a2a_pb2.GetTaskRequest(id="no-such-task"), grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
    ("CancelTask", "receipt", grpc.StatusCode.FAILED_PRECONDITION, "TASK_NOT_CANCELABLE"),
    ("SendStreamingMessage", text_request(), grpc.StatusCode.FAILED_PRECONDITION, "UNSUPPORTED_OPERATION"),
    ("SubscribeToTask", "receipt", grpc.StatusCode.FAILED_PRECONDITION, "UNSUPPORTED_OPERATION"),
    (
        "CreateTaskPushNotificationConfig",
        a2a_pb2.TaskPushNotificationConfig(task_id="t", url="https://example.com/hook"),
        grpc.StatusCode.FAILED_PRECONDITION,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    (
        "GetTaskPushNotificationConfig",
        a2a_pb2.GetTaskPushNotificationConfigRequest(task_id="t", id="c"),
        grpc.StatusCode.FAILED_PRECONDITION,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    (
        "ListTaskPushNotificationConfigs",
        a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id="t"),
        grpc.StatusCode.FAILED_PRECONDITION,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    (
        "DeleteTaskPushNotificationConfig",
        a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id="t", id="c"),
        grpc.StatusCode.FAILED_PRECONDITION,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    (
        "GetExtendedAgentCard",
        a2a_pb2.GetExtendedAgentCardRequest(),
        grpc.StatusCode.FAILED_PRECONDITION,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    ),
]


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize(("method", "request_", "code", "reason"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_every_other_method_maps_its_a2a_error(beacon: Running, method: str, request_: Any, code: grpc.StatusCode, reason: str) -> None:
    if request_ == "receipt":
        sent = await rpc(beacon.target, "SendMessage", text_request())
        kind = a2a_pb2.CancelTaskRequest if method == "CancelTask" else a2a_pb2.SubscribeToTaskRequest
        request_ = kind(id=sent.task.id)
    answer = await rpc(beacon.target, method, request_)
    assert answer["code"] == code
    assert answer["info"].reason == reason and answer["info"].domain == A2A
    assert "Traceback" not in answer["message"]


@pytest_twisted.ensureDeferred
async def test_invalid_params_carry_a_bad_request(beacon: Running) -> None:
    answer = await rpc(beacon.target, "SendMessage", a2a_pb2.SendMessageRequest())
    assert answer["code"] == grpc.StatusCode.INVALID_ARGUMENT
    assert (answer["info"].reason, answer["info"].domain) == ("INVALID_PARAMS", A2A)
    violations = [(v.field, v.description) for v in answer["bad_request"].field_violations]
    assert violations == [("message", "is required")]


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize("metadata", [(), (("a2a-version", "0.3"),), (("a2a-version", ""),)])
async def test_version_missing_or_wrong(beacon: Running, metadata: Any) -> None:
    answer = await rpc(beacon.target, "SendMessage", text_request(), metadata)
    assert answer["code"] == grpc.StatusCode.FAILED_PRECONDITION
    assert answer["info"].reason == "VERSION_NOT_SUPPORTED"
    patch = await rpc(beacon.target, "GetTask", a2a_pb2.GetTaskRequest(id="x"), (("a2a-version", "1.0.3"),))
    assert patch["info"].reason == "TASK_NOT_FOUND"


@pytest_twisted.ensureDeferred
async def test_oversized_message_is_resource_exhausted(beacon: Running) -> None:
    limit = beacon.config.limits.max_body
    fits = await rpc(beacon.target, "SendMessage", text_request("x" * (limit - 200)))
    # A message a JSON body of max_body carries fits (the policy may refuse
    # its text for its own reasons, but grpcio reads it).
    assert not isinstance(fits, dict) or fits["code"] != grpc.StatusCode.RESOURCE_EXHAUSTED
    over = await rpc(beacon.target, "SendMessage", text_request("x" * (limit + 2048)))
    assert over["code"] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in over["message"]


@pytest_twisted.ensureDeferred
async def test_rate_limit_is_resource_exhausted_with_retry_info(beacon_factory: Any) -> None:
    running = beacon_factory({"limits": {"rate": 0.01, "burst": 2}})
    for _ in range(2):
        sent = await rpc(running.target, "GetTask", a2a_pb2.GetTaskRequest(id="x"))
        assert sent["info"].reason == "TASK_NOT_FOUND"
    limited = await rpc(running.target, "GetTask", a2a_pb2.GetTaskRequest(id="x"))
    assert limited["code"] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (limited["info"].reason, limited["info"].domain) == ("RATE_LIMITED", BEACON)
    assert limited["retry"].retry_delay.seconds >= 1


@pytest_twisted.ensureDeferred
async def test_submitter_credentials(beacon_factory: Any) -> None:
    running = beacon_factory(
        {"auth": {"api_keys": [credential_digest("key-1")], "bearer_tokens": [credential_digest("token-1")]}}
    )
    request = a2a_pb2.GetTaskRequest(id="x")
    for metadata in (V1, V1 + (("authorization", "Bearer wrong"),), V1 + (("x-api-key", "wrong"),)):
        refused = await rpc(running.target, "GetTask", request, metadata)
        assert refused["code"] == grpc.StatusCode.UNAUTHENTICATED
        assert (refused["info"].reason, refused["info"].domain) == ("UNAUTHENTICATED", BEACON)
    for metadata in (V1 + (("authorization", "Bearer token-1"),), V1 + (("x-api-key", "key-1"),)):
        admitted = await rpc(running.target, "GetTask", request, metadata)
        assert admitted["info"].reason == "TASK_NOT_FOUND"


def _self_signed(tmp_path: Any) -> tuple[str, str, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_path, certificate_path = tmp_path / "key.pem", tmp_path / "cert.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    certificate_path.write_bytes(pem)
    return str(key_path), str(certificate_path), pem


@pytest_twisted.ensureDeferred
async def test_tls(beacon_factory: Any, tmp_path: Any) -> None:
    key, certificate, pem = _self_signed(tmp_path)
    running = beacon_factory({"grpc": {"private_key": key, "certificate": certificate}})
    sent = await rpc(
        running.target,
        "SendMessage",
        text_request(),
        credentials=grpc.ssl_channel_credentials(root_certificates=pem),
        options=(("grpc.ssl_target_name_override", "localhost"),),
    )
    assert sent.task.status.state == a2a_pb2.TASK_STATE_SUBMITTED
    plaintext = await rpc(running.target, "GetTask", a2a_pb2.GetTaskRequest(id="x"))
    assert plaintext["code"] == grpc.StatusCode.UNAVAILABLE


def test_config_errors(tmp_path: Any) -> None:
    key, certificate, _ = _self_signed(tmp_path)
    for values, message in [
        ({"listen": ["nowhere"]}, "is not a gRPC address"),
        ({"listen": ["127.0.0.1:70000"]}, "is not a gRPC address"),
        ({"listen": "127.0.0.1:1"}, None),
        ({"listen": ["1", ":1"]}, "names one address twice"),
        ({"private_key": key}, "go together"),
        ({"private_key": certificate, "certificate": certificate}, "must be a PEM file"),
        ({"private_key": key, "certificate": str(tmp_path / "missing.pem")}, "cannot read"),
        ({"workers": 0}, "workers must be between 1 and 1000"),
        ({"grace": -1}, "grace must be between 0 and 3600"),
        ({"grace": "5"}, "grace must be a number"),
        ({"listn": []}, "did you mean 'listen'"),
    ]:
        if message is None:
            assert build_config({"grpc": values}).grpc.listen == ("127.0.0.1:1",)
            continue
        with pytest.raises(ConfigError, match=message):
            build_config({"grpc": values})
    config = build_config({"grpc": {"listen": ["50151", ":50152", "[::1]:0", "localhost:9"]}})
    assert config.grpc.listen == ("127.0.0.1:50151", "127.0.0.1:50152", "[::1]:0", "localhost:9")
    assert config.grpc.max_receive_message_length(config.limits.max_body) == 64 * 1024 + 1024


@pytest_twisted.ensureDeferred
async def test_the_card_lists_the_bound_listener(beacon: Running) -> None:
    import treq

    http = next(s for s in beacon.service if type(s).__name__ == "Listeners")
    port = http.ports[0].getHost().port
    response = await treq.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json")
    card = json.loads(await response.content())
    bindings = [(i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]]
    assert [b for b, _ in bindings][:3] == ["JSONRPC", "HTTP+JSON", "GRPC"]
    assert bindings[2][1] == beacon.target


@pytest_twisted.ensureDeferred
async def test_port_in_use_fails_the_start_and_frees_what_started(beacon: Running, tmp_path: Any) -> None:
    second = Running(tmp_path / "second", {"grpc": {"listen": [beacon.target]}})
    with pytest.raises(StartupError, match=r"\[grpc\] listen 127\.0\.0\.1:\d+: cannot listen"):
        second.start()
    assert second.service.undone is not None
    await second.service.undone
    # The first still answers.
    answer = await rpc(beacon.target, "GetTask", a2a_pb2.GetTaskRequest(id="x"))
    assert answer["info"].reason == "TASK_NOT_FOUND"


def test_without_grpcio_a_listener_is_a_startup_error(tmp_path: Any) -> None:
    script = (
        "import sys\n"
        "sys.modules['grpc'] = None\n"
        "from twisted.internet import reactor\n"
        "from beacon.config import build_config\n"
        "from beacon.errors import StartupError\n"
        "from beacon.service import makeService\n"
        f"config = build_config({{'server': {{'data': {str(tmp_path)!r}}}, 'operator': {{'socket': ''}},"
        " 'grpc': {'listen': ['127.0.0.1:0']}})\n"
        "try:\n"
        "    makeService(config, reactor)\n"
        "except StartupError as e:\n"
        "    print(e)\n"
        "import beacon.service\n"
        "makeService(build_config({'server': {'data': %r}, 'operator': {'socket': ''}}), reactor)\n"
        "print('without [grpc] it starts')\n" % str(tmp_path)
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("[grpc] listen needs the grpc extra: pip install 'beacon-a2a[grpc]'")
    assert lines[1] == "without [grpc] it starts"


class SlowPolicy:
    """Answers GetTask when the test says; anything else fails unexpectedly."""

    def __init__(self) -> None:
        self.asked: Deferred[None] = Deferred()
        self.answer: Deferred[Any] = Deferred()

    def get_task(self, context: Any, request: Any) -> Deferred[Any]:
        self.asked.callback(None)
        return self.answer

    def list_tasks(self, context: Any, request: Any) -> Any:
        raise RuntimeError("secret internal detail")

    def cancel_task(self, context: Any, request: Any) -> Any:
        return {"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}, "notAField": 1}


def _server(policy: Any, grace: float = 5.0, **options: Any) -> GRPCServer:
    limits = TransportLimits(
        max_body=65536, rate=RateLimiter(0, 1, reactor), sources=SourceResolver(), auth=SubmitterAuth()
    )
    options.setdefault("workers", 4)
    server = GRPCServer(GRPCCalls(Dispatcher(policy), limits), reactor, ["127.0.0.1:0"], max_receive=66560, grace=grace, **options)
    server.start()
    return server


@pytest_twisted.ensureDeferred
async def test_graceful_stop_answers_a_call_in_flight() -> None:
    policy = SlowPolicy()
    server = _server(policy)
    target = server.urls[0]
    call = rpc(target, "GetTask", a2a_pb2.GetTaskRequest(id="t"))
    await policy.asked
    stopping = server.stop()
    assert not stopping.called
    refused = await rpc(target, "GetTask", a2a_pb2.GetTaskRequest(id="t"))
    assert refused["code"] == grpc.StatusCode.UNAVAILABLE
    policy.answer.callback({"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}})
    answer = await call
    assert answer.id == "t"
    await stopping


@pytest_twisted.ensureDeferred
async def test_stop_past_the_grace_ends_the_call_and_frees_its_thread() -> None:
    policy = SlowPolicy()
    server = _server(policy, grace=0.2)
    call = rpc(server.urls[0], "GetTask", a2a_pb2.GetTaskRequest(id="t"))
    await policy.asked
    await server.stop()  # its worker threads joined: none waits for the policy
    answer = await call
    assert answer["code"] in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
    policy.answer.callback({"id": "t"})


@pytest_twisted.ensureDeferred
async def test_unexpected_failures_are_internal_and_logged(logged_events: Any) -> None:
    logged_events.expect_failures()
    server = _server(SlowPolicy())
    try:
        failed = await rpc(server.urls[0], "ListTasks", a2a_pb2.ListTasksRequest())
        wrong = await rpc(server.urls[0], "CancelTask", a2a_pb2.CancelTaskRequest(id="t"))
    finally:
        await server.stop()
    for answer in (failed, wrong):
        assert answer["code"] == grpc.StatusCode.INTERNAL
        assert answer["message"] == InternalError.default_message
        assert answer["info"].reason == "INTERNAL_ERROR"
        assert "secret" not in answer["message"]
    assert logged_events.named("a2a.internal_error")
    assert logged_events.named("a2a.grpc.internal_error")


@pytest_twisted.ensureDeferred
async def test_a_cancelled_call_frees_its_thread() -> None:
    policy = SlowPolicy()
    server = _server(policy)
    channel = grpc.insecure_channel(server.urls[0])
    future = a2a_pb2_grpc.A2AServiceStub(channel).GetTask.future(a2a_pb2.GetTaskRequest(id="t"), metadata=V1)
    await policy.asked
    future.cancel()
    channel.close()
    # The server's thread is free: the stop needs no grace to end.
    stopping = server.stop()
    await stopping
    policy.answer.callback({"id": "t"})


class StreamingPolicy:
    """Streams what the test says: SendStreamingMessage's stream is kept here."""

    def __init__(self) -> None:
        self.streams: list[EventStream] = []
        self.opened: Deferred[EventStream] = Deferred()
        #: Fires when the stream SendStreamingMessage opened has ended.
        self.ended: Deferred[None] = Deferred()

    def send_streaming_message(self, context: Any, request: Any) -> EventStream:
        stream = EventStream()
        stream.send({"task": {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_SUBMITTED"}}})
        self.streams.append(stream)
        stream.on_cancel(lambda: self.ended.callback(None))
        self.opened.callback(stream)
        return stream

    def subscribe_to_task(self, context: Any, request: Any) -> EventStream:
        stream = EventStream()
        stream.send({"statusUpdate": {"taskId": request.id, "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"}}})
        stream.fail(TaskNotFoundError("gone while streaming"))
        return stream


def _read_stream(target: str, method: str, request: Any, take: int | None = None) -> Deferred[Any]:
    """Read a stream's events on a thread (C{take}: that many, then cancel)."""

    def read() -> Any:
        with grpc.insecure_channel(target) as channel:
            call = getattr(a2a_pb2_grpc.A2AServiceStub(channel), method)(request, metadata=V1, timeout=30)
            events: list[Any] = []
            try:
                for event in call:
                    events.append(event)
                    if take is not None and len(events) == take:
                        call.cancel()
                        break
            except grpc.RpcError as error:
                return events, refusal(error)
            return events, None

    return deferToThread(read)


@pytest_twisted.ensureDeferred
async def test_a_stream_sends_each_event_then_ends() -> None:
    policy = StreamingPolicy()
    server = _server(policy)
    try:
        reading = _read_stream(server.urls[0], "SendStreamingMessage", text_request())
        stream = await policy.opened
        stream.send({"statusUpdate": {"taskId": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"}}})
        stream.close()
        events, failed = await reading
    finally:
        await server.stop()
    assert failed is None
    assert [e.WhichOneof("payload") for e in events] == ["task", "status_update"]
    assert events[1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED


@pytest_twisted.ensureDeferred
async def test_a_failed_stream_ends_with_its_status() -> None:
    server = _server(StreamingPolicy())
    try:
        events, failed = await _read_stream(server.urls[0], "SubscribeToTask", a2a_pb2.SubscribeToTaskRequest(id="t-9"))
    finally:
        await server.stop()
    assert [e.status_update.task_id for e in events] == ["t-9"]
    assert failed["code"] == grpc.StatusCode.NOT_FOUND
    assert failed["info"].reason == "TASK_NOT_FOUND" and failed["message"] == "gone while streaming"


@pytest_twisted.ensureDeferred
async def test_a_stream_its_peer_cancels_is_cancelled() -> None:
    policy = StreamingPolicy()
    server = _server(policy)
    try:
        events, failed = await _read_stream(server.urls[0], "SendStreamingMessage", text_request(), take=1)
        assert len(events) == 1 and failed is None
        (stream,) = policy.streams
        # The door ends the stream when the peer's RST_STREAM arrives (the
        # 30 s are a safety net, not a wait).
        await policy.ended.addTimeout(30, reactor)
        assert stream.finished
    finally:
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_refusals_are_counted_under_the_door_grpc(beacon_factory: Any) -> None:
    import treq

    running = beacon_factory({"limits": {"rate": 0.01, "burst": 1}, "metrics": {"listen": "tcp:0:interface=127.0.0.1"}})
    for _ in range(3):
        await rpc(running.target, "GetTask", a2a_pb2.GetTaskRequest(id="x"))
    metrics = [s for s in running.service if type(s).__name__ == "Listeners"][-1]
    port = metrics.ports[0].getHost().port
    response = await treq.get(f"http://127.0.0.1:{port}/metrics")
    text = (await response.content()).decode()
    assert 'beacon_refusals_total{door="grpc",reason="rate_limited"} 2.0' in text
    # The door's open connections (the clients' may still be closing: how
    # many is tests/test_h2_door.py's).
    assert 'beacon_open_connections{door="grpc"} ' in text


def test_twistd_option_grpc_replaces_the_files_listen(tmp_path: Any) -> None:
    from beacon.tap import Options

    config_file = tmp_path / "beacon.toml"
    config_file.write_text('[grpc]\nlisten = ["50051"]\nworkers = 4\n')
    options = Options()
    options.parseOptions(["--config", str(config_file), "--grpc", "50151", "--grpc", "[::1]:50152"])
    assert options.config is not None
    assert options.config.grpc.listen == ("127.0.0.1:50151", "[::1]:50152")
    assert options.config.grpc.workers == 4
    with pytest.raises(Exception, match="is not a gRPC address"):
        Options().parseOptions(["--grpc", "somewhere"])


@pytest_twisted.ensureDeferred
async def test_calls_beyond_the_cap_are_resource_exhausted() -> None:
    policy = SlowPolicy()
    server = _server(policy, workers=1, max_calls=1)
    try:
        first = rpc(server.urls[0], "GetTask", a2a_pb2.GetTaskRequest(id="t"))
        await policy.asked
        over = await rpc(server.urls[0], "GetTask", a2a_pb2.GetTaskRequest(id="t"))
        assert over["code"] == grpc.StatusCode.RESOURCE_EXHAUSTED
        policy.answer.callback({"id": "t"})
        assert (await first).id == "t"
    finally:
        await server.stop()


class TaskPolicy:
    """Answers GetTask with a task at once."""

    def get_task(self, context: Any, request: Any) -> Any:
        return {"id": request.id, "status": {"state": "TASK_STATE_SUBMITTED"}}
