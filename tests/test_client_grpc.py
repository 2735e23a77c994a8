"""
The client's gRPC binding (C{beacon.client}, C{grpc}): against the a2a-sdk's
gRPC server (in a subprocess: no a2a-sdk import here), and against small
gRPC servers of the test's own (grpcio's, on loopback, with beacon.proto's
messages) for what it sends (metadata), how it reads statuses (an ErrorInfo
naming an A2A error is the same RPCError JSON-RPC raises), its limits, its
timeouts on an injected Clock and its cancellations; without grpcio (in a
subprocess that cannot import it) the other bindings work and this one says
which extra to install.

Network tests run on the real reactor with real loopback sockets; every
timeout under test runs on a L{Clock} that the test advances.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_twisted
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from twisted.internet import reactor
from twisted.internet.defer import CancelledError
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.threads import deferToThread

from beacon.client import (
    A2AClient,
    ClientError,
    GRPCStatusError,
    InvalidResponse,
    Limits,
    NoCompatibleInterface,
    RPCError,
    Timeout,
    Timeouts,
    TransportError,
    parse_card,
    select_interface,
    text_message,
)
from beacon.client._grpc import MAX_STREAMS, metadata_of, target_of
from beacon.client._stream import MAX_QUEUED_EVENTS
from beacon.proto import a2a_pb2
from peers.process import START_TIMEOUT, BeaconLauncher
from peers.sdk_agent import sdk_agent as start_sdk_agent

SERVICE = "lf.a2a.v1.A2AService"
#: A safety net for a wait on a gRPC server's thread (never expected).
WAIT = 30.0


def a_card(*interfaces: dict[str, Any]) -> dict[str, Any]:
    return {"name": "gRPC agent", "supportedInterfaces": list(interfaces), "capabilities": {"streaming": True}}


def grpc_interface(url: str) -> dict[str, Any]:
    return {"url": url, "protocolBinding": "GRPC", "protocolVersion": "1.0"}


def grpc_client(target: str, **kwargs: Any) -> A2AClient:
    client = A2AClient.for_card(reactor, parse_card(a_card(grpc_interface(target))), **kwargs)
    assert client.selected.kind == "grpc"
    return client


# 1. Targets, metadata, selection.


def test_targets() -> None:
    """A gRPC interface's url is host:port (plaintext), or an http(s) URL (https: TLS, port 443 by default); anything else is no target."""
    assert (target_of("127.0.0.1:50051").target, target_of("127.0.0.1:50051").tls) == ("127.0.0.1:50051", False)
    assert target_of("[::1]:7").target == "[::1]:7"
    assert target_of("agent.example:443").tls is False
    https = target_of("https://agent.example/a2a/grpc")
    assert (https.target, https.tls) == ("agent.example:443", True)
    assert (target_of("http://h:8").target, target_of("http://h:8").tls) == ("h:8", False)
    for bad in ("h", "h:1/x", "ws://h:1", "unix:///s", "a:b:c", "h:99999", "", "u@h:1", "http://h"):
        assert target_of(bad) is None, bad


def test_metadata() -> None:
    """The caller's headers go as metadata, names lower-cased; a name or value gRPC cannot carry is refused before anything is sent."""
    assert metadata_of({"Authorization": "Bearer t", "X-API-Key": "k"}) == (
        ("authorization", "Bearer t"), ("x-api-key", "k"),
    )
    for bad in ({"bad name": "x"}, {"grpc-timeout": "1"}, {"x-bin": "x"}, {"x": "line\nbreak"}, {"x": "é"}):
        with pytest.raises(ClientError, match="gRPC metadata"):
            metadata_of(bad)


def test_selection() -> None:
    """With grpcio installed, gRPC is chosen as any other binding: where the card lists it first (its order decides), or when asked for."""
    rpc = {"url": "https://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    both = parse_card(a_card(grpc_interface("127.0.0.1:1"), rpc))
    assert select_interface(both).kind == "grpc"
    assert select_interface(parse_card(a_card(rpc, grpc_interface("127.0.0.1:1")))).kind == "jsonrpc"
    assert select_interface(both, ["jsonrpc"]).kind == "jsonrpc"
    assert select_interface(both, ["grpc"]).interface.url == "127.0.0.1:1"
    assert select_interface(both, ["jsonrpc", "GRPC"]).kind == "jsonrpc"
    assert select_interface(parse_card(a_card(grpc_interface("https://a.example/grpc")))).kind == "grpc"
    with pytest.raises(NoCompatibleInterface, match="GRPC 1.0: not a host:port or http\\(s\\) URL"):
        select_interface(parse_card(a_card(grpc_interface("wss://a/ws"))))


# 2. Against the a2a-sdk's gRPC server.


@pytest.fixture(scope="module")
def sdk_agent() -> Iterator[str]:
    """The a2a-sdk test agent with its gRPC server (listed on its card); its base URL."""
    with start_sdk_agent(grpc=True) as url:
        yield url


@pytest_twisted.ensureDeferred
async def test_a2a_sdk_over_grpc(sdk_agent: str) -> None:
    """Against the a2a-sdk's gRPC server: its card lists gRPC last, so its first (HTTP+JSON) stays the default; asked for, gRPC carries SendMessage, GetTask, ListTasks, CancelTask and both streams, and answers as JSON-RPC does."""
    assert (await A2AClient.discover(reactor, sdk_agent)).selected.kind == "http+json"
    client = await A2AClient.discover(reactor, sdk_agent, preference=["grpc"])
    rpc = await A2AClient.discover(reactor, sdk_agent, preference=["jsonrpc"])
    try:
        assert client.selected.kind == "grpc" and client.address == client.selected.interface.url
        answer = await client.send_message(text_message("hi"))
        task_id = answer["task"]["id"]
        assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert answer["task"]["artifacts"][0]["parts"] == [{"text": "echo: hi"}]
        task = await client.get_task(task_id, history_length=1)
        assert task == await rpc.get_task(task_id, history_length=1)
        page = await client.list_tasks(pageSize=10, status="TASK_STATE_COMPLETED", includeArtifacts=True)
        assert task_id in [t["id"] for t in page["tasks"]]
        events = await client.send_streaming_message(text_message("streamed")).collect()
        assert list(events[0]) == ["task"]
        assert any("artifactUpdate" in e for e in events)
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        outcome = await client.send_text("yo")
        assert outcome.ok and outcome.text == "echo: yo"
        # Its refusals: the same RPCErrors (code and reason) as over JSON-RPC.
        for each in (client, rpc):
            with pytest.raises(RPCError) as unknown:
                await each.get_task("no-such-task")
            assert (unknown.value.code, unknown.value.reason) == (-32001, "TASK_NOT_FOUND")
            with pytest.raises(RPCError) as done:
                await each.cancel_task(task_id)
            assert (done.value.code, done.value.reason) == (-32002, "TASK_NOT_CANCELABLE")
            with pytest.raises(RPCError) as push:
                await each.get_task_push_notification_config(task_id, "c")
            assert push.value.code == -32003
        with pytest.raises(RPCError) as over_grpc:
            await client.get_task("no-such-task")
        assert over_grpc.value.status_name == "NOT_FOUND" and over_grpc.value.http_status is None
        with pytest.raises(RPCError) as subscribe:
            await client.subscribe_to_task(task_id).collect()
        assert subscribe.value.code in (-32004, -32001)
    finally:
        await client.close()
        await rpc.close()
    with pytest.raises(TransportError, match="the client is closed"):
        await client.get_task(task_id)


# 3. Servers of the test's own.


class Server:
    """
    A grpcio server on loopback answering the service's methods with the
    test's functions (C{unary[name](request, context)}, C{streams[name]}),
    recording the metadata of each call.
    """

    def __init__(
        self, unary: dict[str, Callable[..., Any]], streams: dict[str, Callable[..., Any]] | None = None,
        tls: tuple[bytes, bytes] | None = None, **options: Any,
    ) -> None:
        self.metadata: list[dict[str, str]] = []
        self.started = threading.Event()
        self.ended = threading.Event()
        self.release = threading.Event()
        handlers: dict[str, Any] = {}
        service = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]
        for name, answer in {**unary, **(streams or {})}.items():
            method = service.methods_by_name[name]
            request = getattr(a2a_pb2, method.input_type.name)
            response = getattr(a2a_pb2, method.output_type.name)
            make = grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
            handlers[name] = make(
                self._recording(answer), request_deserializer=request.FromString,
                response_serializer=response.SerializeToString,
            )
        self.server = grpc.server(ThreadPoolExecutor(max_workers=MAX_STREAMS + 4), options=list(options.items()))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        if tls is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self.server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([tls]))
        self.target = f"127.0.0.1:{self.port}"
        self.server.start()

    def _recording(self, answer: Callable[..., Any]) -> Callable[..., Any]:
        def handle(request: Any, context: Any) -> Any:
            self.metadata.append({k: v for k, v in context.invocation_metadata()})
            context.add_callback(self.ended.set)
            self.started.set()
            return answer(request, context)

        return handle

    def stop(self) -> None:
        self.release.set()
        self.server.stop(grace=None).wait(WAIT)


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(
        unary: dict[str, Callable[..., Any]], streams: dict[str, Callable[..., Any]] | None = None,
        tls: tuple[bytes, bytes] | None = None, **options: Any,
    ) -> Server:
        servers.append(Server(unary, streams, tls, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def submitted(request: Any, context: Any) -> Any:
    return a2a_pb2.SendMessageResponse(task=a2a_pb2.Task(id="t-1", status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_SUBMITTED)))


def refuse(code: grpc.StatusCode, message: str, reason: str | None = None, domain: str = "a2a-protocol.org", **metadata: str) -> Callable[..., Any]:
    """A handler that ends the call with C{code}, and a google.rpc.Status packing an ErrorInfo when C{reason} is given."""

    def answer(request: Any, context: Any) -> Any:
        if reason is not None:
            status = status_pb2.Status(code=code.value[0], message=message)
            info = any_pb2.Any()
            info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata))
            status.details.append(info)
            bad = any_pb2.Any()
            bad.Pack(error_details_pb2.BadRequest(field_violations=[error_details_pb2.BadRequest.FieldViolation(field="id", description="no")]))
            status.details.append(bad)
            context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(code, message)

    return answer


@pytest_twisted.ensureDeferred
async def test_metadata_sent(serve: Callable[..., Server]) -> None:
    """Every call carries a2a-version: 1.0; a2a-extensions when extensions are asked for; the caller's credentials as lower-case metadata."""
    server = serve({"SendMessage": submitted})
    client = grpc_client(server.target, headers={"Authorization": "Bearer secret", "X-API-Key": "k1"}, extensions=["urn:e1"])
    try:
        answer = await client.send_message(text_message("hi"), extensions=["urn:e2"])
        assert answer == {"task": {"id": "t-1", "status": {"state": "TASK_STATE_SUBMITTED"}}}
        await client.send_message(text_message("again"))
    finally:
        await client.close()
    first, second = server.metadata
    assert first["a2a-version"] == "1.0" and first["authorization"] == "Bearer secret" and first["x-api-key"] == "k1"
    assert first["a2a-extensions"] == "urn:e1, urn:e2" and second["a2a-extensions"] == "urn:e1"
    assert first["user-agent"].startswith("beacon/")


@pytest_twisted.ensureDeferred
async def test_statuses(serve: Callable[..., Server]) -> None:
    """An ErrorInfo with an A2A reason is that error's RPCError (its details as ProtoJSON); any other status is a GRPCStatusError with its reason, if any."""
    server = serve(
        {
            "GetTask": refuse(grpc.StatusCode.NOT_FOUND, "Task not found", "TASK_NOT_FOUND", taskId="t-9"),
            "ListTasks": refuse(grpc.StatusCode.INVALID_ARGUMENT, "bad", "INVALID_PARAMS"),
            "CancelTask": refuse(grpc.StatusCode.UNAUTHENTICATED, "who are you", "UNAUTHENTICATED", domain="beacon"),
            "SendMessage": refuse(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down"),
        }
    )
    client = grpc_client(server.target)
    try:
        with pytest.raises(RPCError) as unknown:
            await client.get_task("t-9")
        error = unknown.value
        assert (error.code, error.reason, error.metadata, error.status_name) == (-32001, "TASK_NOT_FOUND", {"taskId": "t-9"}, "NOT_FOUND")
        assert error.message == "Task not found"
        assert error.data[1] == {
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"field": "id", "description": "no"}],
        }
        with pytest.raises(RPCError) as invalid:
            await client.list_tasks()
        assert invalid.value.code == -32602
        with pytest.raises(GRPCStatusError) as unauthenticated:
            await client.cancel_task("t-1")
        assert (unauthenticated.value.status_name, unauthenticated.value.reason) == ("UNAUTHENTICATED", "UNAUTHENTICATED")
        assert str(unauthenticated.value) == "the server answered gRPC UNAUTHENTICATED: who are you (UNAUTHENTICATED)"
        with pytest.raises(GRPCStatusError) as exhausted:
            await client.send_message(text_message("x"))
        assert (exhausted.value.status_name, exhausted.value.reason, exhausted.value.message) == ("RESOURCE_EXHAUSTED", None, "slow down")
        # A method the server does not serve.
        with pytest.raises(GRPCStatusError) as unimplemented:
            await client.get_extended_agent_card()
        assert unimplemented.value.status_name == "UNIMPLEMENTED"
        # What gRPC cannot carry fails before anything is sent.
        with pytest.raises(ClientError, match="no method of lf.a2a.v1.A2AService"):
            await client.call("Follow", {})
        with pytest.raises(ClientError, match="cannot be sent over gRPC"):
            await client.call("GetTask", {"id": "t", "noSuchMember": 1})
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_limits(serve: Callable[..., Server]) -> None:
    """An answer over Limits.body is an InvalidResponse; a request over the server's limit is a GRPCStatusError with reason TOO_LARGE and the limit."""
    big = a2a_pb2.Task(id="t-1", metadata=None)
    big.metadata.update({"pad": "x" * 5000})
    server = serve({"GetTask": lambda request, context: big, "SendMessage": submitted}, **{"grpc.max_receive_message_length": 2000})
    client = grpc_client(server.target, limits=Limits(body=4096))
    try:
        with pytest.raises(InvalidResponse, match="larger than 4096 bytes"):
            await client.get_task("t-1")
        with pytest.raises(GRPCStatusError) as too_large:
            await client.send_message(text_message("y" * 3000))
        assert (too_large.value.reason, too_large.value.metadata) == ("TOO_LARGE", {"limit": "2000"})
        assert (await client.send_message(text_message("small")))["task"]["id"] == "t-1"
    finally:
        await client.close()


def loopback_certificate() -> tuple[bytes, bytes]:
    """A fresh self-signed key and certificate (PEM) for the IP address 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "grpc test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return pem_key, certificate.public_bytes(serialization.Encoding.PEM)


@pytest_twisted.ensureDeferred
async def test_tls(serve: Callable[..., Server]) -> None:
    """TLS with the credentials the client is given (whatever the url says); an https:// url is TLS with the default roots, which do not trust a self-signed certificate; plaintext to a TLS server is a TransportError."""
    key, certificate = loopback_certificate()
    server = serve({"SendMessage": submitted}, tls=(key, certificate))
    trusted = grpc_client(server.target, grpc_credentials=grpc.ssl_channel_credentials(root_certificates=certificate))
    untrusted = grpc_client(f"https://{server.target}")
    plaintext = grpc_client(server.target)
    try:
        assert (await trusted.send_message(text_message("hi")))["task"]["id"] == "t-1"
        with pytest.raises(TransportError) as refused:
            await untrusted.send_message(text_message("hi"))
        assert refused.value.reason.startswith("the TLS handshake failed"), refused.value.reason
        with pytest.raises(TransportError):
            await plaintext.send_message(text_message("hi"))
    finally:
        for client in (trusted, untrusted, plaintext):
            await client.close()
    assert len(server.metadata) == 1


@pytest_twisted.ensureDeferred
async def test_unreachable() -> None:
    """Nothing listening: a TransportError (UNAVAILABLE), saying connection refused."""
    free = Factory.forProtocol(Protocol)
    port = reactor.listenTCP(0, free, interface="127.0.0.1")
    number = port.getHost().port
    await port.stopListening()
    client = grpc_client(f"127.0.0.1:{number}")
    try:
        with pytest.raises(TransportError) as caught:
            await client.get_task("t")
        assert caught.value.reason == "connection refused" and caught.value.address == f"127.0.0.1:{number}"
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_silent_peer_times_out_on_the_clock() -> None:
    """A peer that accepts and never says a word: the call fails with Timeout once the response timeout passes on the injected Clock."""
    port = reactor.listenTCP(0, Factory.forProtocol(Protocol), interface="127.0.0.1")
    clock = Clock()
    client = grpc_client(f"127.0.0.1:{port.getHost().port}", clock=clock, timeouts=Timeouts(connect=60, response=5))
    try:
        call = client.get_task("t")
        clock.advance(4.9)
        assert not call.called
        clock.advance(0.1)
        with pytest.raises(Timeout) as caught:
            await call
        assert (caught.value.seconds, caught.value.phase) == (5, "answer")
        # Each connection attempt is bounded by the connect timeout (grpcio's
        # own clock: the response timeout on the Clock never passes here).
        connecting = grpc_client(f"127.0.0.1:{port.getHost().port}", clock=Clock(), timeouts=Timeouts(connect=0.5, response=60))
        try:
            with pytest.raises(Timeout) as attempt:
                await connecting.get_task("t")
            assert (attempt.value.seconds, attempt.value.phase) == (0.5, "connect")
        finally:
            await connecting.close()
    finally:
        await client.close()
        await port.stopListening()


def blocked(server_of: Callable[[], Server]) -> Callable[..., Any]:
    """A handler that answers only once the server is released (when the test ends)."""

    def answer(request: Any, context: Any) -> Any:
        server_of().release.wait(WAIT)
        context.abort(grpc.StatusCode.UNAVAILABLE, "released")

    return answer


@pytest_twisted.ensureDeferred
async def test_blocked_call_times_out_and_is_cancelled(serve: Callable[..., Server]) -> None:
    """A server that never answers: Timeout on the Clock, and the call is cancelled (the server sees it end); cancelling a call's Deferred cancels it too."""
    holder: list[Server] = []
    server = serve({"GetTask": blocked(lambda: holder[0]), "CancelTask": blocked(lambda: holder[0])})
    holder.append(server)
    clock = Clock()
    client = grpc_client(server.target, clock=clock, timeouts=Timeouts(response=5))
    try:
        call = client.get_task("t")
        assert await deferToThread(server.started.wait, WAIT)
        clock.advance(5)
        with pytest.raises(Timeout):
            await call
        assert await deferToThread(server.ended.wait, WAIT)
        server.started.clear()
        server.ended.clear()
        cancelled = client.cancel_task("t")
        assert await deferToThread(server.started.wait, WAIT)
        cancelled.cancel()
        with pytest.raises(CancelledError):
            await cancelled
        assert await deferToThread(server.ended.wait, WAIT)
    finally:
        await client.close()


def events_of(count: int) -> Callable[..., Any]:
    def answer(request: Any, context: Any) -> Iterator[Any]:
        for n in range(count):
            yield a2a_pb2.StreamResponse(status_update=a2a_pb2.TaskStatusUpdateEvent(task_id=f"t-{n}"))

    return answer


@pytest_twisted.ensureDeferred
async def test_streams(serve: Callable[..., Server]) -> None:
    """A stream's events arrive in order, more than the client queues before it holds the server back; an error status ends the stream with its RPCError."""
    count = 3 * MAX_QUEUED_EVENTS
    server = serve({}, {"SendStreamingMessage": events_of(count), "SubscribeToTask": refuse(grpc.StatusCode.NOT_FOUND, "gone", "TASK_NOT_FOUND")})
    client = grpc_client(server.target)
    try:
        events = await client.send_streaming_message(text_message("s")).collect()
        assert [e["statusUpdate"]["taskId"] for e in events] == [f"t-{n}" for n in range(count)]
        with pytest.raises(RPCError) as gone:
            await client.subscribe_to_task("t").collect()
        assert gone.value.code == -32001
        with pytest.raises(ClientError, match="does not stream"):
            await client.stream("GetTask", {"id": "t"}).collect()
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_stream_timeout_and_stream_limit(serve: Callable[..., Server]) -> None:
    """A silent stream fails with Timeout on the Clock and is cancelled; a client reads at most MAX_STREAMS streams at once (each on its thread), the next one fails at once."""
    holder: list[Server] = []

    def silent(request: Any, context: Any) -> Iterator[Any]:
        holder[0].release.wait(WAIT)
        yield from ()

    server = serve({}, {"SubscribeToTask": silent})
    holder.append(server)
    clock = Clock()
    client = grpc_client(server.target, clock=clock, timeouts=Timeouts(response=3, idle=7))
    try:
        stream = client.subscribe_to_task("t")
        assert await deferToThread(server.started.wait, WAIT)
        clock.advance(3)
        with pytest.raises(Timeout) as caught:
            await stream.collect()
        assert caught.value.phase == "answer"
        assert await deferToThread(server.ended.wait, WAIT)
        streams = [client.subscribe_to_task(f"t-{n}") for n in range(MAX_STREAMS)]
        with pytest.raises(ClientError, match=f"at most {MAX_STREAMS} gRPC streams"):
            await client.subscribe_to_task("one-too-many").collect()
        for each in streams:
            each.cancel()
            assert await each.collect() == []
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_close_ends_every_call(serve: Callable[..., Server]) -> None:
    """Closing the client ends a unary call in flight and its streams (a lagging consumer's too) with TransportError, and every stream's thread ends."""
    holder: list[Server] = []
    server = serve({"GetTask": blocked(lambda: holder[0])}, {"SendStreamingMessage": events_of(3 * MAX_QUEUED_EVENTS)})
    holder.append(server)
    client = grpc_client(server.target)
    call = client.get_task("t")
    assert await deferToThread(server.started.wait, WAIT)
    lagging = client.send_streaming_message(text_message("s"))
    await lagging.__anext__()
    await client.close()
    with pytest.raises(TransportError, match="closed"):
        await call
    with pytest.raises(TransportError, match="closed"):
        await lagging.collect()
    threads = [t for t in threading.enumerate() if t.name.startswith("beacon-grpc-stream-")]
    for thread in threads:
        await deferToThread(thread.join, WAIT)
        assert not thread.is_alive()


# 4. End to end: beacon send --binding grpc against twistd -n beacon.

SERVING = re.compile(r"a2a\.grpc\.serving: the gRPC binding at (\S+)")


def beacon_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run C{beacon ARGS} to the end (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "beacon.cli", *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )


def test_beacon_send_over_grpc(tmp_path: Path) -> None:
    """A Beacon with [grpc] listen lists GRPC on its card (JSON-RPC stays the default); beacon card, send and task with --binding grpc use it and print as over the other bindings, its refusals in the same one line."""
    config = tmp_path / "beacon.toml"
    config.write_text('[grpc]\nlisten = ["127.0.0.1:0"]\n')
    launcher = BeaconLauncher(tmp_path)
    try:
        beacon = launcher.start("--config", str(config))
        target = beacon.process.wait_for(SERVING, START_TIMEOUT).group(1)
        card = beacon_cli("card", beacon.public_url, "--binding", "grpc")
        assert card.returncode == 0, card.stderr
        assert f"GRPC 1.0  {target}" in card.stdout
        assert card.stdout.splitlines()[-1] == f"selected interface: GRPC 1.0  {target}"
        default = beacon_cli("card", beacon.public_url)
        assert default.stdout.splitlines()[-1] == f"selected interface: JSONRPC 1.0  {beacon.public_url}/a2a/v1"
        sent = beacon_cli("send", beacon.public_url, "hello over gRPC", "--binding", "grpc")
        assert sent.returncode == 0, sent.stderr
        word, task_id, state = sent.stdout.split()
        assert (word, state) == ("task", "TASK_STATE_SUBMITTED")
        got = beacon_cli("task", beacon.public_url, task_id, "--binding", "grpc")
        assert got.returncode == 0, got.stderr
        assert got.stdout == beacon_cli("task", beacon.public_url, task_id).stdout
        assert got.stdout.splitlines()[:2] == [f"task {task_id}", "state TASK_STATE_SUBMITTED"]
        unknown = beacon_cli("task", beacon.public_url, "no-such-task", "--binding", "grpc")
        assert unknown.returncode == 1 and "TASK_NOT_FOUND" in unknown.stderr
        assert unknown.stderr == beacon_cli("task", beacon.public_url, "no-such-task").stderr
        # Over its message limit ([limits] max_body and gRPC's framing): refused unread, said as on the other bindings.
        too_large = beacon_cli("send", beacon.public_url, "x" * 70000, "--binding", "grpc")
        assert too_large.returncode == 1
        assert too_large.stderr.startswith("beacon: the agent refused the message: too large: the limit is ")
    finally:
        launcher.close()


# 5. Without grpcio.

NO_GRPC = """
import sys
sys.modules["grpc"] = None  # grpcio is not installed
from twisted.internet import reactor
from beacon.client import A2AClient, ClientError, NoCompatibleInterface, parse_card, select_interface
from beacon.client._select import Selected
card = parse_card({"name": "a", "supportedInterfaces": [
    {"url": "127.0.0.1:1", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
    {"url": "http://127.0.0.1:1/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]})
print(A2AClient.for_card(reactor, card).selected.kind)
only = parse_card({"name": "a", "supportedInterfaces": [card.raw["supportedInterfaces"][0]]})
try:
    select_interface(only)
except NoCompatibleInterface as e:
    print(e)
try:
    A2AClient(reactor, Selected(only.supported_interfaces[0], "grpc", "127.0.0.1:1"))
except ClientError as e:
    print(e)
from beacon.cli import main
sys.argv = ["beacon", "send", "http://127.0.0.1:1", "hello", "--binding", "grpc"]
sys.exit(main())
"""


def test_without_grpcio() -> None:
    """Without grpcio, beacon.client imports and skips a gRPC interface the card lists first, choosing the next; a card with only gRPC, a gRPC client and beacon send --binding grpc each say, in one line, to pip install 'beacon-a2a[grpc]'."""
    done = subprocess.run(
        [sys.executable, "-c", NO_GRPC], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent
    )
    lines = done.stdout.splitlines()
    assert lines == [
        "jsonrpc",
        "no interface of the card can be used: GRPC 1.0: needs grpcio (pip install 'beacon-a2a[grpc]')",
        "the gRPC binding needs grpcio: pip install 'beacon-a2a[grpc]'",
    ], done.stdout + done.stderr
    assert done.stderr == "beacon: --binding grpc needs grpcio: pip install 'beacon-a2a[grpc]'\n"
    assert done.returncode == 1
