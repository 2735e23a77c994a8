"""
The A2A WebSocket binding (https://a2a-rust.com/bindings/websocket/v1): a connection's upgrade (§1) and its
refusals, its timers and its end (§7), wss over a real loopback TLS socket
with a certificate made in the test, the wiring (card, service,
configuration), and the C{websockets} client from PyPI against a real
Beacon process. The other concerns have modules of their own:
C{test_websocket_parameters} (§2), C{test_websocket_messages} (§3, §5, §6
and the limits per frame, over both bindings), C{test_websocket_streams}
(§4), C{test_websocket_frames} (plain frames read and written by Beacon or
by autobahn), C{test_websocket_limits} (one hostile client); their shared
client and server are in C{websocket_support}.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import ssl
import struct
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.test import iosim

from beacon.bindings.http import TransportLimits
from beacon.bindings.admission import RateLimiter, SourceResolver
from beacon.bindings.websocket import (
    BEACON_DOMAIN,
    WEBSOCKET_BINDING,
    WebSocketFactory,
    WebSocketOptions,
    WebSocketResource,
    WebSocketService,
    websocket_url,
)
from beacon.config import build_config
from beacon.intake import PublicPolicy, schema_validator
from beacon.protocol import Dispatcher
from beacon.service import beacon_resources, makeService
from beacon.testing import MemoryStore
from websocket_support import (
    CAP,
    ERROR_INFO,
    KEY,
    VERSION,
    HeldHandler,
    Server,
    _sync,
    call,
    frame,
    get,
    send_message,
    server,
    upgrade_request,
)
from websocket_support import close_servers, frame_path, pytest_generate_tests  # noqa: F401 (fixtures)
from websocket_support import wss_send


# §1 Connection.


def test_upgrade_selects_no_subprotocol(server: Server) -> None:
    """The upgrade answers 101 and selects no subprotocol, even when the client offers one."""
    connection = server.open(VERSION + [("Sec-WebSocket-Protocol", "a2a, jsonrpc")])
    assert connection.client.status == 101
    assert "sec-websocket-protocol" not in connection.client.headers
    assert connection.rpc(send_message())["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_not_an_upgrade_is_refused_with_the_json_body(server: Server) -> None:
    """A plain GET is refused with 400 and the HTTP+JSON error body (code = status, FAILED_PRECONDITION, ErrorInfo)."""
    connection = server.connect()
    where = "/a2a/ws" if server.mounted else "/"
    connection.write(f"GET {where} HTTP/1.1\r\nHost: beacon.example\r\n\r\n".encode())
    assert connection.client.status == 400
    assert connection.client.headers["content-type"] == ["application/json"]
    error = connection.client.refusal()["error"]
    assert error["code"] == 400
    assert error["status"] == "FAILED_PRECONDITION"
    assert error["message"]
    assert error["details"] == [
        {"@type": ERROR_INFO, "reason": "INVALID_UPGRADE", "domain": BEACON_DOMAIN}
    ]
    assert connection.transport.disconnecting


def test_unsupported_websocket_version_is_426(server: Server) -> None:
    """A Sec-WebSocket-Version other than 13 is refused 426 naming version 13, with the §1 body."""
    connection = server.open(version="8")
    assert connection.client.status == 426
    assert connection.client.headers["sec-websocket-version"] == ["13"]
    error = connection.client.refusal()["error"]
    assert (error["code"], error["status"]) == (426, "FAILED_PRECONDITION")
    assert error["details"][0]["reason"] == "UNSUPPORTED_WEBSOCKET_VERSION"


def test_refusal_does_not_echo_the_request() -> None:
    """A refused upgrade's status line and body quote nothing the client sent."""
    server = Server(mounted=False)
    connection = server.connect()
    connection.write(
        upgrade_request("/", VERSION).replace(KEY.encode(), b"secret-looking-key-123==")
    )
    assert connection.client.status == 400
    assert b"secret" not in connection.client.body
    assert all("secret" not in v for vs in connection.client.headers.values() for v in vs)


def test_origin_refusal_is_403_without_details() -> None:
    """An Origin not in allowed_origins is refused 403 PERMISSION_DENIED with no details."""
    server = Server(options=WebSocketOptions(allowed_origins=("https://app.example",)))
    connection = server.open(VERSION + [("Origin", "https://evil.example")])
    assert connection.client.status == 403
    assert connection.client.refusal() == {
        "error": {
            "code": 403,
            "status": "PERMISSION_DENIED",
            "message": "Connections from this origin are not allowed",
        }
    }


@pytest.mark.parametrize("origin", ["https://app.example", "HTTPS://APP.Example"])
def test_allowed_origin_compared_whole_ignoring_ascii_case(origin: str) -> None:
    """An allowed origin is accepted in any ASCII case; a longer one is not."""
    server = Server(options=WebSocketOptions(allowed_origins=("https://app.example",)))
    assert server.open(VERSION + [("Origin", origin)]).client.status == 101
    longer = server.open(VERSION + [("Origin", "https://app.example.evil")])
    assert longer.client.status == 403


def test_no_origin_is_accepted_unless_required() -> None:
    """An upgrade without Origin (a non-browser client) is accepted, unless require_origin is set."""
    allowed = WebSocketOptions(allowed_origins=("https://app.example",))
    assert Server(options=allowed).open().client.status == 101
    required = Server(options=WebSocketOptions(require_origin=True))
    assert required.open().client.status == 403
    assert required.open(VERSION + [("Origin", "https://any.example")]).client.status == 101


def test_any_origin_by_default() -> None:
    """With no allowed_origins, any Origin may connect."""
    assert Server().open(VERSION + [("Origin", "https://any.example")]).client.status == 101


def test_max_connections() -> None:
    """Over max_connections an upgrade is refused 503; a closed connection frees its place."""
    server = Server(options=WebSocketOptions(max_connections=1))
    first = server.open()
    assert first.client.status == 101
    second = server.open()
    assert second.client.status == 503
    assert second.client.refusal()["error"]["status"] == "UNAVAILABLE"
    first.write(frame(0x8, struct.pack("!H", 1000)))
    assert server.factory.open_connections == 0
    assert server.open().client.status == 101


def test_handshake_timeout_on_the_clock() -> None:
    """A peer that does not finish the upgrade within handshake_timeout is dropped, on the injected clock."""
    server = Server(mounted=False, options=WebSocketOptions(handshake_timeout=5))
    connection = server.connect()
    connection.write(b"GET / HTTP/1.1\r\nHost: beacon.example\r\n")
    server.clock.advance(4.9)
    assert not connection.transport.disconnecting
    server.clock.advance(0.2)
    connection.pump.flush()
    assert connection.transport.disconnecting
    assert server.clock.getDelayedCalls() == []


@pytest.mark.parametrize("method", [b"POST", b"HEAD"])
def test_other_methods_are_refused_at_the_mount(method: bytes) -> None:
    """At /a2a/ws a request that is not a GET is refused 400 with the §1 body (none for HEAD)."""
    server = Server()
    response = _sync.successResultOf(
        server.treq.request(method.decode(), "http://beacon.example/a2a/ws")
    )
    body = _sync.successResultOf(response.content())
    assert response.code == 400
    if method == b"HEAD":
        assert body == b""
    else:
        assert json.loads(body)["error"]["status"] == "FAILED_PRECONDITION"


def test_below_the_mount_is_404() -> None:
    """A path below /a2a/ws is not the binding: 404."""
    response = _sync.successResultOf(Server().treq.get("http://beacon.example/a2a/ws/more"))
    assert response.code == 404


def test_oversized_upgrade_head_is_refused() -> None:
    """An upgrade head that grows past 16 KiB without ending is refused, not buffered."""
    server = Server(mounted=False)
    connection = server.connect()
    connection.write(b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 20_000)
    assert connection.client.status == 400


def test_upgraded_connections_leave_the_http_count() -> None:
    """A connection upgraded at /a2a/ws stops counting against the HTTP listener's caps, and its close frees no second place."""
    server = Server()
    server.site.max_connections_per_source = 1
    first = server.open()
    assert first.client.status == 101
    assert server.site.open_connections == 0
    second = server.open()
    assert second.client.status == 101
    first.write(frame(0x8, struct.pack("!H", 1000)))
    assert server.site.open_connections == 0
    assert server.factory.open_connections == 1




# §7 Security: timers, idle, stop.


def test_idle_timeout_on_the_clock() -> None:
    """With idle_timeout, a connection without frames is closed; a frame or a request in progress keeps it."""
    handler = HeldHandler()
    server = Server(handler, options=WebSocketOptions(idle_timeout=30))
    connection = server.open()
    server.clock.advance(29)
    connection.send(get("a"))
    server.clock.advance(29)
    assert connection.closes() == []
    server.clock.advance(60)
    assert connection.closes() == []  # GetTask is still in progress.
    handler.release("a")
    server.clock.advance(30)
    connection.pump.flush()
    assert connection.closes() == [1000]


def test_no_timer_outlives_a_closed_connection() -> None:
    """Once a connection has closed no delayed call of it remains on the clock."""
    server = Server(mounted=False, options=WebSocketOptions(idle_timeout=30))
    connection = server.open()
    connection.write(frame(0x8, struct.pack("!H", 1000)))
    connection.pump.flush()
    assert connection.transport.disconnecting
    server.clock.advance(5)
    assert server.clock.getDelayedCalls() == []


def test_service_closes_connections_on_stop() -> None:
    """Stopping the WebSocketService closes every open connection with 1001 (going away)."""
    server = Server()
    service = WebSocketService(server.factory)
    service.startService()
    connection = server.open()
    service.stopService()
    connection.pump.flush()
    assert connection.closes() == [1001]


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made now."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path = tmp_path / "cert.pem"
    key_path = tmp_path / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_tls_handshake_is_bounded_by_the_handshake_timeout(tmp_path: Path) -> None:
    """On a TLS listener a peer that never completes the TLS handshake is dropped after handshake_timeout, on the clock."""
    from twisted.internet.ssl import DefaultOpenSSLContextFactory
    from twisted.protocols.tls import TLSMemoryBIOFactory

    cert_path, key_path = _certificate(tmp_path)
    options = DefaultOpenSSLContextFactory(str(key_path), str(cert_path))
    server = Server(mounted=False, options=WebSocketOptions(handshake_timeout=3))
    tls = TLSMemoryBIOFactory(options, False, server.factory)
    address = IPv4Address("TCP", "127.0.0.1", 1)
    protocol = tls.buildProtocol(address)
    transport = iosim.FakeTransport(protocol, True, address, address)
    protocol.makeConnection(transport)
    server.clock.advance(2.9)
    assert not transport.disconnecting
    server.clock.advance(0.2)
    assert transport.disconnecting or transport.disconnected


@pytest_twisted.ensureDeferred
async def test_wss_on_an_ssl_endpoint(tmp_path: Path) -> None:
    """On an ssl: endpoint the binding is wss://: a client trusting the test's self-signed certificate calls SendMessage."""
    from twisted.internet import reactor, threads
    from twisted.internet.endpoints import serverFromString

    cert_path, key_path = _certificate(tmp_path)
    store = MemoryStore()
    limits = TransportLimits(CAP, RateLimiter(0, 1, reactor), SourceResolver())
    factory = WebSocketFactory(
        Dispatcher(PublicPolicy(store, reactor, schema_validator())),
        limits,
        reactor,
        # From accept, the TLS handshake included, on the real reactor: far
        # above the client's safety net, so a slow machine never trips it.
        WebSocketOptions(handshake_timeout=600),
    )
    endpoint = serverFromString(
        reactor, f"ssl:0:interface=127.0.0.1:privateKey={key_path}:certKey={cert_path}"
    )
    port = await endpoint.listen(factory)
    try:
        context = ssl.create_default_context(cafile=str(cert_path))
        # One thread owns the SSL socket (see wss_send).
        status, raw = await threads.deferToThread(
            wss_send,
            port.getHost().port,
            context,
            json.dumps(send_message("over tls")).encode(),
            path="/",
        )
        answer: dict[str, Any] = json.loads(raw)
    finally:
        await port.stopListening()
    assert status == 101
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert len(store.submissions) == 1


# The card and the wiring.


def test_websocket_url() -> None:
    """http becomes ws and https wss."""
    assert websocket_url("http://127.0.0.1:8080") == "ws://127.0.0.1:8080"
    assert websocket_url("https://beacon.example/base") == "wss://beacon.example/base"


def test_card_lists_the_binding_after_jsonrpc(tmp_path: Path) -> None:
    """The public card lists the WebSocket interface after JSONRPC and HTTP+JSON, wss:// for an https public URL."""
    config = build_config(data_dir=str(tmp_path), public_url="https://beacon.example")
    resources = beacon_resources(config, MemoryStore(), Clock())
    card = json.loads(resources.a2a.card.body)
    assert card["supportedInterfaces"] == [
        {"url": "https://beacon.example/a2a/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "https://beacon.example/a2a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {
            "url": "wss://beacon.example/a2a/ws",
            "protocolBinding": WEBSOCKET_BINDING,
            "protocolVersion": "1.0",
        },
    ]
    assert "securitySchemes" not in card


def test_make_service_mounts_and_listens(tmp_path: Path) -> None:
    """makeService serves /a2a/ws on the HTTP listeners and the binding's factory on each --ws listener."""
    reactor = MemoryReactorClock()
    config = build_config(
        data_dir=str(tmp_path / "data"),
        http=["tcp:8080:interface=127.0.0.1"],
        ws=["tcp:8090:interface=127.0.0.1"],
        public_url="http://beacon.example",
        operator_socket="",
    )
    root = makeService(config, reactor)
    services = list(root)
    for service in services[1:]:
        service.privilegedStartService()
    servers = {port: factory for port, factory, _, _ in reactor.tcpServers}
    assert isinstance(servers[8090], WebSocketFactory)
    site = servers[8080]
    assert isinstance(site.resource.children[b"a2a"].children[b"ws"], WebSocketResource)
    assert site.resource.children[b"a2a"].children[b"ws"]._factory is servers[8090]
    ws_service = [s for s in services if isinstance(s, WebSocketService)]
    assert len(ws_service) == 1
    for service in services[1:]:
        service.stopService()


def test_config_reads_websocket_and_auth() -> None:
    """[websocket] and [auth] are read and checked; --ws overrides listen."""
    digest = hashlib.sha256(b"t").hexdigest()
    config = build_config(
        {
            "websocket": {
                "listen": ["tcp:9000"],
                "allowed_origins": ["https://app.example"],
                "require_origin": True,
                "max_message": 8192,
                "max_in_flight": 8,
                "handshake_timeout": 2,
                "max_connections": 10,
                "max_connections_per_source": 3,
                "idle_timeout": 60,
            },
            "auth": {"bearer_tokens": [digest.upper()]},
        }
    )
    assert config.ws == ("tcp:9000",)
    assert config.websocket == WebSocketOptions(
        allowed_origins=("https://app.example",),
        require_origin=True,
        max_message=8192,
        max_in_flight=8,
        handshake_timeout=2.0,
        max_connections=10,
        max_connections_per_source=3,
        idle_timeout=60.0,
    )
    assert config.auth.bearer_tokens == (digest,)
    assert build_config({"websocket": {"listen": ["tcp:9000"]}}, ws=["tcp:9001"]).ws == ("tcp:9001",)


@pytest.mark.parametrize(
    "section",
    [
        {"websocket": {"allowed_origins": ["https://app.example/path"]}},
        {"websocket": {"allowed_origins": "https://app.example"}},
        {"websocket": {"require_origin": "yes"}},
        {"websocket": {"max_message": 10}},
        {"websocket": {"max_in_flight": 0}},
        {"websocket": {"handshake_timeout": 0}},
        {"websocket": {"max_connections": -1}},
        {"websocket": {"max_connections_per_source": -1}},
        {"websocket": {"max_connections_per_source": 1.5}},
        {"websocket": {"idle_timeout": -1}},
        {"websocket": {"subprotocol": "x"}},
        {"auth": {"bearer_tokens": ["the-token-itself"]}},
        {"auth": {"api_keys": "x"}},
    ],
)
def test_config_refuses_bad_websocket_and_auth_values(section: dict[str, Any]) -> None:
    """Bad [websocket] and [auth] values are ConfigErrors."""
    from beacon.config import ConfigError

    with pytest.raises(ConfigError):
        build_config(section)


# Interop: a WebSocket client that is not ours, against a real Beacon.


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Any]:
    """Starts Beacons in C{tmp_path}; stops every one afterwards."""
    from peers.process import BeaconLauncher

    launcher = BeaconLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def test_websockets_client_interop(launcher: Any) -> None:
    """The websockets client from PyPI speaks raw frames to a twistd Beacon: at /a2a/ws and on a --ws listener."""
    from websockets.exceptions import ConnectionClosedError
    from websockets.sync.client import connect

    beacon = launcher.start("--ws", "tcp:0:interface=127.0.0.1")
    listener = beacon.process.wait_for(r"ws\.serving: the WebSocket binding at (\S+)", 60.0).group(1)
    with urllib.request.urlopen(beacon.public_url + "/.well-known/agent-card.json", timeout=60) as got:
        card = json.loads(got.read())
    (mounted,) = [
        i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == WEBSOCKET_BINDING
    ]
    assert mounted == beacon.public_url.replace("http://", "ws://") + "/a2a/ws"
    for url in (mounted + "?A2A-Version=1.0", listener):
        with connect(url, additional_headers={"A2A-Version": "1.0"}, open_timeout=60) as ws:
            ws.send(json.dumps(send_message("interop", request_id="s")))
            sent = json.loads(ws.recv(timeout=60))
            task_id = sent["result"]["task"]["id"]
            ws.send(json.dumps(get(task_id, "g")))
            ws.send(json.dumps(call("SendStreamingMessage", send_message()["params"], "st")))
            answers = {a["id"]: a for a in (json.loads(ws.recv(timeout=60)) for _ in range(2))}
            assert answers["g"]["result"]["status"]["state"] == "TASK_STATE_SUBMITTED"
            assert answers["st"]["error"]["code"] == -32004
            ws.send(b"\x01\x02")
            assert json.loads(ws.recv(timeout=60))["error"]["code"] == -32700
            ws.ping()
    with connect(listener, additional_headers={"A2A-Version": "1.0"}, open_timeout=60) as ws:
        ws.send("x" * (4 * 1024 * 1024 + 1))
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv(timeout=60)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
