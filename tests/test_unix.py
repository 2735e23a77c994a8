"""
The operator's doors (the unix socket binding,
https://agentd.dev/a2a/binding/jsonrpc-unix): the
JSON-RPC over unix socket binding, whose peer is authenticated by the kernel
(a socket born 0600 that listens only then, SO_PEERCRED on every
connection). The loopback bearer-token door for hosts without sockets is
tests/test_operator_bearer.py's.

Everything runs on the real reactor that pytest-twisted drives; sockets live
in a short directory under /tmp (sun_path holds 107 bytes), and tests wait on
Deferreds or on a child process's exit, never on time.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_twisted
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.address import UNIXAddress
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Factory, ProcessProtocol, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import IAgentEndpointFactory
from twisted.web.resource import Resource
from twisted.web.server import Site
from zope.interface import implementer

from beacon.bindings.operator import _doors as _unix
from beacon.bindings.http import BeaconSite
from beacon.bindings.operator._doors import (
    MAX_SOCKET_PATH,
    OperatorSocket,
    PeerCheckedFactory,
    peer_credentials,
    socket_url,
)
from beacon.config import ConfigError, build_config
from beacon.protocol import UNIX_BINDING
from beacon.intake._operator import INBOX_EVENTS_EXTENSION, REVIEW_EXTENSION
from beacon.service import StartupError, makeService

from operator_support import (
    CARD_PATH,
    Hello,
    Running,
    assert_no_unhandled_errors,
    beacon_config,
    list_tasks_body,
    mode_of,
    start_beacon,
    stop_beacon,
)

#: The uid and gid of the intruder (nobody).
NOBODY = 65534

#: A python that user nobody can execute (the venv's lives under /root).
SYSTEM_PYTHON = "/usr/bin/python3"

#: What the intruder runs: connect, send a request, read to EOF, tell.
INTRUDER = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(sys.argv[1])
end = "eof"
data = b""
try:
    s.sendall(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n")
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except ConnectionResetError:
    end = "reset"
except BrokenPipeError:
    end = "pipe"
except socket.timeout:
    end = "timeout"
print(os.getuid())
print(repr(data))
print(end)
"""


# Helpers and fixtures.


def identity(path: str) -> tuple[int, int]:
    """The (device, inode) of C{path} itself."""
    info = os.lstat(path)
    return info.st_dev, info.st_ino


def stale_socket(path: str) -> None:
    """Leave a socket file at C{path} that nothing listens on."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()


def live_socket(path: str) -> socket.socket:
    """A socket listening at C{path} (the caller closes it)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(8)
    return s


def answers(path: str) -> bool:
    """Whether something accepts connections at C{path}."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def hello_factory(path: str) -> PeerCheckedFactory:
    """A peer-checked Site that answers every request with C{hello}."""
    site = Site(Hello())
    site.noisy = False
    return PeerCheckedFactory(site, path)


@implementer(IAgentEndpointFactory)
class _DialSocket:
    """Dials one unix socket whatever the URL says."""

    def __init__(self, path: str) -> None:
        self._path = path

    def endpointForURI(self, uri: Any) -> UNIXClientEndpoint:
        return UNIXClientEndpoint(reactor, self._path)


def unix_client(path: str) -> HTTPClient:
    """A treq client whose every request goes over the socket at C{path}."""
    pool = HTTPConnectionPool(reactor, persistent=False)
    return HTTPClient(Agent.usingEndpointFactory(reactor, _DialSocket(path), pool=pool))


@pytest_twisted.async_yield_fixture
async def serve() -> AsyncIterator[Callable[..., OperatorSocket]]:
    """
    Start OperatorSockets on the real reactor; stop whichever still run.
    """
    started: list[OperatorSocket] = []

    def start(path: str, factory: Any = None) -> OperatorSocket:
        service = OperatorSocket(reactor, path, factory or hello_factory(path))
        started.append(service)
        service.startService()
        return service

    yield start
    for service in started:
        if service.running:
            await service.stopService()


@pytest_twisted.async_yield_fixture
async def beacon(short_dir: str) -> AsyncIterator[Running]:
    """makeService's tree with the default operator socket, started and then stopped."""
    running = start_beacon(beacon_config(short_dir))
    yield running
    await stop_beacon(running)


# 1. Creating and removing the socket.


@pytest_twisted.ensureDeferred
async def test_socket_is_private_from_the_start(
    short_dir: str, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket is born 0600 at its path, owned by the daemon, and nothing can connect to it before it is; nothing ever widens it, and the umask is put back."""
    path = os.path.join(short_dir, "op.sock")
    at_chmod: list[dict[str, Any]] = []
    real_chmod = os.chmod

    def chmod(target: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        if os.path.lexists(target) and stat.S_ISSOCK(os.lstat(target).st_mode):
            at_chmod.append(
                {
                    "target": os.fsdecode(target),
                    "mode": mode,
                    "mode_before": mode_of(target),
                    "answered_before": answers(os.fsdecode(target)),
                }
            )
        real_chmod(target, mode, *args, **kwargs)

    monkeypatch.setattr(_unix.os, "chmod", chmod)
    umask = os.umask(0o022)
    os.umask(umask)

    serve(path)

    # Born 0600 (by umask), not narrowed afterwards, and not listening
    # until then.
    assert [c["target"] for c in at_chmod] == [path]
    assert at_chmod[0]["mode"] == 0o600
    assert at_chmod[0]["mode_before"] == 0o600
    assert not at_chmod[0]["answered_before"]
    info = os.lstat(path)
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.getuid()
    assert answers(path)
    assert os.listdir(short_dir) == ["op.sock"]
    assert os.umask(umask) == umask


@pytest_twisted.ensureDeferred
async def test_socket_answers_after_start(short_dir: str, serve: Any) -> None:
    """The socket put in place is the one the service listens on: an HTTP GET over it is answered."""
    path = os.path.join(short_dir, "op.sock")
    serve(path)
    response = await unix_client(path).get("http://ignored/")
    assert response.code == 200
    assert await response.content() == b"hello"


@pytest_twisted.ensureDeferred
async def test_socket_is_removed_on_stop(short_dir: str, serve: Any) -> None:
    """stopService stops listening and removes the socket it made."""
    path = os.path.join(short_dir, "op.sock")
    service = serve(path)
    await service.stopService()
    assert not os.path.lexists(path)
    assert os.listdir(short_dir) == []


@pytest_twisted.ensureDeferred
async def test_socket_can_be_served_again_after_stop(
    short_dir: str, serve: Any
) -> None:
    """A stopped OperatorSocket starts again on the same path (twistd's privileged start binds nothing: the socket is bound once the user is switched, by start)."""
    path = os.path.join(short_dir, "op.sock")
    service = OperatorSocket(reactor, path, hello_factory(path))
    service.privilegedStartService()
    assert not os.path.lexists(path)
    service.startService()
    first = identity(path)
    service.startService()
    assert identity(path) == first
    await service.stopService()
    service.startService()
    try:
        response = await unix_client(path).get("http://x/")
        assert await response.content() == b"hello"
    finally:
        await service.stopService()
    assert not os.path.lexists(path)


@pytest_twisted.ensureDeferred
async def test_replaced_socket_is_not_removed_on_stop(
    short_dir: str, serve: Any
) -> None:
    """A socket that someone else put at the path after start-up is left in place by stopService."""
    path = os.path.join(short_dir, "op.sock")
    service = serve(path)
    os.unlink(path)
    other = live_socket(path)
    try:
        theirs = identity(path)
        await service.stopService()
        assert os.path.lexists(path), "stopService removed someone else's socket"
        assert identity(path) == theirs
        assert answers(path)
    finally:
        other.close()


@pytest_twisted.ensureDeferred
async def test_socket_removed_by_someone_else_stops_quietly(
    short_dir: str, serve: Any
) -> None:
    """When the socket file is already gone at stop, stopService still succeeds."""
    path = os.path.join(short_dir, "op.sock")
    service = serve(path)
    os.unlink(path)
    await service.stopService()
    assert not os.path.lexists(path)


def test_bind_never_replaces_what_appeared_meanwhile(
    short_dir: str, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If something appears at the path between the check and the bind, start-up fails naming the path, it is untouched, and the umask is put back."""
    path = os.path.join(short_dir, "op.sock")
    real_check = _unix._check_path

    def check(target: str) -> None:
        real_check(target)
        with open(target, "w") as f:
            f.write("arrived meanwhile")

    monkeypatch.setattr(_unix, "_check_path", check)
    umask = os.umask(0o022)
    os.umask(umask)
    with pytest.raises(StartupError) as caught:
        serve(path)
    assert path in str(caught.value)
    with open(path) as f:
        assert f.read() == "arrived meanwhile"
    assert os.listdir(short_dir) == ["op.sock"]
    assert os.umask(umask) == umask


@pytest_twisted.ensureDeferred
async def test_socket_takes_a_107_byte_path_and_refuses_108(
    short_dir: str, serve: Any
) -> None:
    """A socket path of exactly 107 bytes is served; a longer one stops start-up (ENAMETOOLONG's reason), and nothing is made."""
    prefix = short_dir + "/"
    longest = prefix + "s" * (MAX_SOCKET_PATH - len(prefix))
    assert len(longest) == 107
    service = serve(longest)
    assert answers(longest)
    await service.stopService()
    assert os.listdir(short_dir) == []
    with pytest.raises(StartupError) as caught:
        serve(longest + "s")
    assert f"longer than {MAX_SOCKET_PATH} bytes" in str(caught.value)
    assert os.listdir(short_dir) == []


# 2. What may already be at the path.


@pytest_twisted.ensureDeferred
async def test_stale_socket_is_replaced(
    short_dir: str, serve: Any, logged_events: Any
) -> None:
    """A socket file that nothing listens on is removed and replaced by a live one."""
    path = os.path.join(short_dir, "op.sock")
    stale_socket(path)
    assert not answers(path)
    serve(path)
    # (Not compared by inode: the stale one's, freed, may be the new one's.)
    assert answers(path)
    assert mode_of(path) == 0o600
    response = await unix_client(path).get("http://ignored/")
    assert await response.content() == b"hello"
    assert [e["path"] for e in logged_events.named("a2a.unix.stale_removed")] == [path]


def test_live_socket_stops_startup(short_dir: str, serve: Any) -> None:
    """A socket another listener answers on stops start-up with a StartupError naming the path, and is left in place."""
    path = os.path.join(short_dir, "op.sock")
    other = live_socket(path)
    try:
        theirs = identity(path)
        with pytest.raises(StartupError) as caught:
            serve(path)
        assert path in str(caught.value)
        assert identity(path) == theirs
        assert answers(path)
        assert os.listdir(short_dir) == ["op.sock"]
    finally:
        other.close()


def test_regular_file_is_never_replaced(short_dir: str, serve: Any) -> None:
    """A regular file at the path stops start-up with a clear message and keeps its content."""
    path = os.path.join(short_dir, "op.sock")
    with open(path, "w") as f:
        f.write("precious")
    with pytest.raises(StartupError) as caught:
        serve(path)
    assert path in str(caught.value)
    assert "not a socket" in str(caught.value)
    assert stat.S_ISREG(os.lstat(path).st_mode)
    with open(path) as f:
        assert f.read() == "precious"
    assert os.listdir(short_dir) == ["op.sock"]


def test_directory_is_never_replaced(short_dir: str, serve: Any) -> None:
    """A directory at the path stops start-up with a clear message and keeps what it holds."""
    path = os.path.join(short_dir, "op.sock")
    os.mkdir(path)
    with open(os.path.join(path, "inside"), "w") as f:
        f.write("kept")
    with pytest.raises(StartupError) as caught:
        serve(path)
    assert path in str(caught.value)
    assert "not a socket" in str(caught.value)
    assert os.listdir(path) == ["inside"]
    assert os.listdir(short_dir) == ["op.sock"]


def test_symlink_to_a_file_is_never_followed(short_dir: str, serve: Any) -> None:
    """A symlink to a file stops start-up naming it a symbolic link; the link and its target's content stay."""
    path = os.path.join(short_dir, "op.sock")
    target = os.path.join(short_dir, "target")
    with open(target, "w") as f:
        f.write("target content")
    os.symlink(target, path)
    with pytest.raises(StartupError) as caught:
        serve(path)
    assert path in str(caught.value)
    assert "symbolic link" in str(caught.value)
    assert os.readlink(path) == target
    with open(target) as f:
        assert f.read() == "target content"
    assert sorted(os.listdir(short_dir)) == ["op.sock", "target"]


def test_symlink_to_a_live_socket_is_never_followed(short_dir: str, serve: Any) -> None:
    """A symlink to a live socket stops start-up naming it a symbolic link; the link and the socket stay."""
    path = os.path.join(short_dir, "op.sock")
    target = os.path.join(short_dir, "real.sock")
    other = live_socket(target)
    try:
        theirs = identity(target)
        os.symlink(target, path)
        with pytest.raises(StartupError) as caught:
            serve(path)
        assert "symbolic link" in str(caught.value)
        assert os.readlink(path) == target
        assert identity(target) == theirs
        assert answers(target)
    finally:
        other.close()


def test_dangling_symlink_is_never_replaced(short_dir: str, serve: Any) -> None:
    """A symlink to nothing stops start-up too, and nothing is created at its target."""
    path = os.path.join(short_dir, "op.sock")
    target = os.path.join(short_dir, "nowhere")
    os.symlink(target, path)
    with pytest.raises(StartupError) as caught:
        serve(path)
    assert "symbolic link" in str(caught.value)
    assert os.readlink(path) == target
    assert not os.path.lexists(target)


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.EAGAIN, "Resource temporarily unavailable"),
        TimeoutError("timed out"),
    ],
    ids=["EAGAIN", "timeout"],
)
def test_socket_that_cannot_be_probed_stops_startup(
    short_dir: str, serve: Any, monkeypatch: pytest.MonkeyPatch, error: OSError
) -> None:
    """A socket whose probe fails otherwise than refused (a full backlog, a hung listener) is left alone and start-up fails with a readable reason."""
    path = os.path.join(short_dir, "op.sock")
    stale_socket(path)
    before = identity(path)
    real_socket = socket.socket

    class Probe:
        def __init__(self, *args: Any) -> None:
            self._real = real_socket(*args)

        def settimeout(self, value: float) -> None:
            pass

        def connect(self, address: Any) -> None:
            raise error

        def close(self) -> None:
            self._real.close()

    monkeypatch.setattr(_unix.socket, "socket", Probe)
    with pytest.raises(_unix.SocketInUse) as caught:
        _unix._check_path(path)
    monkeypatch.undo()
    message = str(caught.value)
    assert path in message
    assert "None" not in message, message
    assert identity(path) == before


# 3. SO_PEERCRED: the kernel says who the peer is.


class _Collect(ProcessProtocol):
    """Collects a child's output; C{ended} fires with (stdout, stderr, status)."""

    def __init__(self) -> None:
        self.out = b""
        self.err = b""
        self.ended: Deferred[tuple[bytes, bytes, Any]] = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        self.ended.callback((self.out, self.err, reason.value))


@pytest_twisted.ensureDeferred
async def test_another_uid_is_closed_before_any_http(
    beacon: Running, logged_events: Any
) -> None:
    """A connection from uid 65534 to a (mistakenly) world-writable socket reads EOF without a byte of HTTP and is logged as a2a.unix.denied with its uid and pid."""
    # Simulate a permission mistake, so that only SO_PEERCRED stands between
    # the intruder and the operator.
    os.chmod(beacon.data_dir, 0o755)
    os.chmod(beacon.socket_path, 0o777)
    collector = _Collect()
    child = reactor.spawnProcess(
        collector,
        SYSTEM_PYTHON,
        [SYSTEM_PYTHON, "-I", "-c", INTRUDER, beacon.socket_path],
        env={},
        path="/",
        uid=NOBODY,
        gid=NOBODY,
    )
    pid = child.pid
    out, err, _ = await collector.ended
    assert_no_unhandled_errors(logged_events)
    lines = out.decode().splitlines()
    assert len(lines) == 3, (out, err)
    uid, data, end = lines
    assert uid == str(NOBODY)
    assert data == "b''"  # no HTTP byte at all
    # Closed by the server, not timed out: EOF, or, when the server closed
    # before (pipe) or with (reset) the unread request, the kernel's error.
    assert end in ("eof", "reset", "pipe"), end
    denied = logged_events.named("a2a.unix.denied")
    assert [(e["uid"], e["pid"], e["path"]) for e in denied] == [
        (NOBODY, pid, beacon.socket_path)
    ]
    # The owner (root, this test) is still served on the same socket.
    response = await unix_client(beacon.socket_path).get("http://x" + CARD_PATH)
    assert response.code == 200
    assert (await response.json())["supportedInterfaces"][0][
        "protocolBinding"
    ] == UNIX_BINDING


@pytest_twisted.ensureDeferred
async def test_owner_is_served_on_peer_checked_socket(
    short_dir: str, serve: Any, logged_events: Any
) -> None:
    """A connection from root (this test) passes the SO_PEERCRED check and is answered, with nothing denied."""
    path = os.path.join(short_dir, "op.sock")
    serve(path)
    response = await unix_client(path).get("http://x/")
    assert response.code == 200
    assert await response.content() == b"hello"
    assert logged_events.named("a2a.unix.denied") == []


class _Recorder(Protocol):
    """Records what a wrapped protocol was shown."""

    def __init__(self) -> None:
        self.made = False
        self.received: list[bytes] = []
        self.lost = False

    def connectionMade(self) -> None:
        self.made = True

    def dataReceived(self, data: bytes) -> None:
        self.received.append(data)

    def connectionLost(self, reason: Any) -> None:
        self.lost = True


class _Recorders(Factory):
    """Builds L{_Recorder}s and keeps them in C{built}."""

    def __init__(self) -> None:
        self.built: list[_Recorder] = []

    def buildProtocol(self, addr: Any) -> _Recorder:
        recorder = _Recorder()
        self.built.append(recorder)
        return recorder


def checked(
    credentials: Any, allowed_uids: frozenset[int] | None = None
) -> tuple[PeerCheckedFactory, Any, StringTransport]:
    """A PeerCheckedFactory over a L{_Recorders} with injected credentials, one connection made over a StringTransport."""
    factory = PeerCheckedFactory(
        _Recorders(),
        "/run/op.sock",
        allowed_uids,
        credentials=lambda t: credentials,
    )
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return factory, protocol, transport


def test_denied_peer_never_reaches_the_wrapped_protocol(logged_events: Any) -> None:
    """A peer of another uid is closed at once; no wrapped protocol is built for it, so nothing sees the connection or its bytes, and the denial is logged."""
    factory, protocol, transport = checked((4321, NOBODY, NOBODY))
    protocol.dataReceived(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.disconnecting
    assert transport.value() == b""
    assert factory.wrappedFactory.built == []
    assert [
        (e["uid"], e["pid"], e["path"]) for e in logged_events.named("a2a.unix.denied")
    ] == [(NOBODY, 4321, "/run/op.sock")]


def test_denied_connection_loss_is_quiet() -> None:
    """When a denied connection is lost, the wrapper neither raises nor builds a wrapped protocol to tell, and the factory tracks nothing."""
    factory, protocol, _ = checked((4321, NOBODY, NOBODY))
    protocol.connectionLost(Failure(ConnectionDone()))
    assert factory.wrappedFactory.built == []
    assert factory.protocols == {}


def test_unknown_peer_is_denied(logged_events: Any) -> None:
    """A transport whose credentials cannot be read is denied and logged with uid -1."""
    factory, protocol, transport = checked(None)
    protocol.dataReceived(b"GET / HTTP/1.1\r\n\r\n")
    assert transport.disconnecting
    assert factory.wrappedFactory.built == []
    assert [e["uid"] for e in logged_events.named("a2a.unix.denied")] == [-1]


@pytest.mark.parametrize("uid", [0, os.getuid()], ids=["root", "own uid"])
def test_root_and_own_uid_are_served(uid: int, logged_events: Any) -> None:
    """Root and the daemon's own uid reach the wrapped protocol, which sees every byte."""
    factory, protocol, transport = checked((99, uid, uid))
    protocol.dataReceived(b"hello")
    (inner,) = factory.wrappedFactory.built
    assert protocol.wrappedProtocol is inner
    assert inner.made
    assert inner.received == [b"hello"]
    assert not transport.disconnecting
    assert protocol.peer_uid == uid
    protocol.connectionLost(Failure(ConnectionDone()))
    assert inner.lost
    assert factory.protocols == {}
    assert logged_events.named("a2a.unix.denied") == []


def test_explicit_allowed_uids_are_the_only_ones() -> None:
    """With an explicit set of uids, any other uid (root included) is denied."""
    factory, protocol, transport = checked((99, 0, 0), allowed_uids=frozenset({1000}))
    assert transport.disconnecting
    assert factory.wrappedFactory.built == []
    factory, protocol, transport = checked((99, 1000, 1000), allowed_uids=frozenset({1000}))
    assert [r.made for r in factory.wrappedFactory.built] == [True]


#: What a flood of intruders runs: connect N times, each read to EOF; tell how each ended.
FLOOD = r"""
import json, os, socket, sys
path, count = sys.argv[1], int(sys.argv[2])
ends = {}
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    end = "eof"
    try:
        s.connect(path)
        s.sendall(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n")
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            end = "data"
    except (ConnectionResetError, BrokenPipeError):
        end = "reset"
    except socket.timeout:
        end = "timeout"
    finally:
        s.close()
    ends[end] = ends.get(end, 0) + 1
print(os.getuid())
print(json.dumps(ends))
"""


def test_wrapped_factory_refusing_a_served_peer_closes_it() -> None:
    """If the wrapped factory builds nothing for an allowed peer (None: refused), the connection is closed and nothing is registered."""
    refusing = Factory()
    refusing.buildProtocol = lambda addr: None  # type: ignore[method-assign]
    factory = PeerCheckedFactory(
        refusing, "/run/op.sock", credentials=lambda t: (1, os.getuid(), 1)
    )
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    assert transport.disconnecting
    protocol.dataReceived(b"GET / HTTP/1.1\r\n\r\n")
    protocol.connectionLost(Failure(ConnectionDone()))
    assert factory.protocols == {}


def test_many_denied_peers_do_not_lock_the_operator_out(logged_events: Any) -> None:
    """Hundreds of denied connections (more than the per-source cap, all from "unix") leave the operator Site's connection count at zero; the owner who comes next is served, not answered 503."""
    limits = build_config(data_dir="/tmp/d").limits
    assert limits.max_connections_per_source < 300
    site = BeaconSite(Hello(), clock=Clock(), **limits.site_options())
    site.noisy = False
    peers = iter([NOBODY] * 300 + [os.getuid()])
    factory = PeerCheckedFactory(
        site, "/run/op.sock", credentials=lambda t: (1, next(peers), 1)
    )
    for _ in range(300):
        protocol = factory.buildProtocol(UNIXAddress(None))
        transport = StringTransport()
        protocol.makeConnection(transport)
        assert transport.disconnecting
        protocol.connectionLost(Failure(ConnectionDone()))
    assert site.open_connections == 0
    protocol = factory.buildProtocol(UNIXAddress(None))
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 200 "), transport.value()[:200]
    assert transport.value().endswith(b"hello")
    assert site.open_connections == 1
    # The uid's first denial is a line; the others are counted, and said at stop.
    assert [e["uid"] for e in logged_events.named("a2a.unix.denied")] == [NOBODY]
    assert logged_events.named("http.connection_refused") == []
    protocol.connectionLost(Failure(ConnectionDone()))
    factory.doStop()
    assert [e.get("count") for e in logged_events.named("a2a.unix.denied")] == [None, 299]


@pytest_twisted.ensureDeferred
async def test_flood_of_another_uid_then_the_owner_is_served(
    beacon: Running, logged_events: Any
) -> None:
    """For real, through SO_PEERCRED on makeService's socket: uid 65534 connects 300 times (past the 256-per-source cap) and is closed unread each time; then the owner is served the card."""
    os.chmod(beacon.data_dir, 0o755)
    os.chmod(beacon.socket_path, 0o777)
    collector = _Collect()
    reactor.spawnProcess(
        collector,
        SYSTEM_PYTHON,
        [SYSTEM_PYTHON, "-I", "-c", FLOOD, beacon.socket_path, "300"],
        env={},
        path="/",
        uid=NOBODY,
        gid=NOBODY,
    )
    out, err, _ = await collector.ended
    assert_no_unhandled_errors(logged_events)
    lines = out.decode().splitlines()
    assert len(lines) == 2, (out, err)
    assert lines[0] == str(NOBODY)
    ends = json.loads(lines[1])  # how each connection ended: {"eof": n, ...}
    assert sum(ends.values()) == 300
    assert set(ends) <= {"eof", "reset"}, ends  # never data, never a timeout
    # One line for the uid's first; the 299 since are counted in one line a minute.
    assert [e["uid"] for e in logged_events.named("a2a.unix.denied")] == [NOBODY]
    response = await unix_client(beacon.socket_path).get("http://x" + CARD_PATH)
    assert response.code == 200
    assert (await response.json())["supportedInterfaces"][0]["protocolBinding"] == UNIX_BINDING
    assert logged_events.named("http.connection_refused") == []


def test_peer_credentials_reads_so_peercred() -> None:
    """peer_credentials gives (pid, uid, gid) of a unix stream peer, and None for a transport without a unix socket."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:

        class Handle:
            def __init__(self, handle: Any) -> None:
                self._handle = handle

            def getHandle(self) -> Any:
                return self._handle

        assert peer_credentials(Handle(left)) == (os.getpid(), os.getuid(), os.getgid())
        assert peer_credentials(Handle(tcp)) is None
        assert peer_credentials(StringTransport()) is None
    finally:
        left.close()
        right.close()
        tcp.close()


# 4. The operator card and JSON-RPC on the socket (makeService's tree).


@pytest_twisted.ensureDeferred
async def test_operator_card_on_the_socket(beacon: Running) -> None:
    """The socket's card names this binding at the unix:// URL of the absolute socket path, streams, lists both operator extensions, and declares no security scheme."""
    info = os.lstat(beacon.socket_path)
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.getuid()
    response = await unix_client(beacon.socket_path).get("http://anything" + CARD_PATH)
    assert response.code == 200
    card = await response.json()
    assert card["supportedInterfaces"][0] == {
        "url": "unix://" + os.path.abspath(beacon.socket_path),
        "protocolBinding": "https://agentd.dev/a2a/binding/jsonrpc-unix",
        "protocolVersion": "1.0",
    }
    assert card["supportedInterfaces"][0]["url"] == socket_url(beacon.socket_path)
    assert card["capabilities"]["streaming"] is True
    uris = [e["uri"] for e in card["capabilities"]["extensions"]]
    assert REVIEW_EXTENSION in uris
    assert INBOX_EVENTS_EXTENSION in uris
    assert "securitySchemes" not in card
    assert "securityRequirements" not in card


@pytest_twisted.ensureDeferred
async def test_list_tasks_on_the_socket(beacon: Running) -> None:
    """ListTasks over the socket answers a JSON-RPC result, whatever the Host header says."""
    response = await unix_client(beacon.socket_path).post(
        "http://evil.example/",
        data=list_tasks_body(),
        headers={"A2A-Version": "1.0", "Content-Type": "application/json"},
    )
    assert response.code == 200
    body = await response.json()
    assert body["id"] == 7
    assert "error" not in body, body
    assert body["result"]["tasks"] == []


@pytest_twisted.ensureDeferred
async def test_authorization_header_changes_nothing_on_the_socket(
    beacon: Running,
) -> None:
    """An Authorization header, right or wrong, neither blocks nor changes what the socket serves."""
    client = unix_client(beacon.socket_path)
    plain = await (await client.get("http://x" + CARD_PATH)).json()
    headers = {"Authorization": "Bearer not-a-token"}
    response = await client.get("http://x" + CARD_PATH, headers=headers)
    assert response.code == 200
    assert await response.json() == plain
    response = await client.post(
        "http://x/",
        data=list_tasks_body(),
        headers={**headers, "A2A-Version": "1.0", "Content-Type": "application/json"},
    )
    assert response.code == 200
    assert (await response.json())["result"]["tasks"] == []


@pytest_twisted.ensureDeferred
async def test_unknown_path_on_the_socket_is_json_404(beacon: Running) -> None:
    """A path other than / and the card is a JSON 404 on the socket."""
    response = await unix_client(beacon.socket_path).get("http://x/nowhere")
    assert response.code == 404
    assert response.headers.getRawHeaders("Content-Type") == ["application/json"]
    assert (await response.json())["error"]["code"] == "not_found"


@pytest_twisted.ensureDeferred
async def test_makeservice_socket_is_removed_on_stop(short_dir: str) -> None:
    """Stopping makeService's tree removes the operator socket."""
    running = start_beacon(beacon_config(short_dir))
    assert stat.S_ISSOCK(os.lstat(running.socket_path).st_mode)
    await running.service.stopService()
    assert not os.path.lexists(running.socket_path)


# 5. Configuration.


@pytest_twisted.ensureDeferred
async def test_empty_operator_socket_disables_it(short_dir: str) -> None:
    """--operator "" disables the socket: no OperatorSocket in the tree, no socket file made."""
    config = beacon_config(short_dir, operator_socket="")
    assert config.socket_path is None
    service = makeService(config, reactor)
    assert not [s for s in service if isinstance(s, OperatorSocket)]
    service.startService()
    try:
        assert not os.path.lexists(os.path.join(short_dir, "operator.sock"))
        assert not [n for n in os.listdir(short_dir) if n.startswith(".operator")]
    finally:
        await service.stopService()


def test_default_socket_is_in_the_data_directory(short_dir: str) -> None:
    """Without --operator the socket is <data>/operator.sock, and the tree holds an OperatorSocket for its absolute path."""
    config = beacon_config(short_dir)
    assert config.socket_path == os.path.join(short_dir, "operator.sock")
    service = makeService(config, reactor)
    (socket_service,) = [s for s in service if isinstance(s, OperatorSocket)]
    assert socket_service.path == os.path.join(short_dir, "operator.sock")


def test_socket_path_length_limit(short_dir: str) -> None:
    """An operator socket path of 107 bytes is accepted and one of 108 is a ConfigError."""
    prefix = short_dir + "/"
    longest = prefix + "s" * (107 - len(prefix))
    assert (
        build_config(
            data_dir=short_dir, http=["tcp:0"], operator_socket=longest
        ).socket_path
        == longest
    )
    with pytest.raises(ConfigError, match="107"):
        build_config(data_dir=short_dir, http=["tcp:0"], operator_socket=longest + "s")


def test_relative_socket_path_is_measured_absolute(
    short_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative socket path counts with the directory it resolves in."""
    deep = os.path.join(short_dir, "d" * 90)
    os.mkdir(deep)
    monkeypatch.chdir(deep)
    with pytest.raises(ConfigError, match="107"):
        build_config(data_dir=short_dir, http=["tcp:0"], operator_socket="o" * 20)


@pytest.mark.parametrize(
    "value",
    [
        "ssl:/run/op.sock",
        "ssl:8443:privateKey=k.pem",
        "tls:/x",
        "unix:/run/op.sock",
        "tcp:8080",
    ],
)
def test_socket_value_that_is_an_endpoint_is_refused(value: str) -> None:
    """An endpoint description (ssl:, tls:, unix:, tcp:) is not a socket path: ConfigError."""
    with pytest.raises(ConfigError, match="path"):
        build_config(data_dir="/tmp/d", http=["tcp:0"], operator_socket=value)
    with pytest.raises(ConfigError):
        build_config({"operator": {"socket": value}}, data_dir="/tmp/d", http=["tcp:0"])


@pytest.mark.parametrize(
    "value",
    [
        "tcp:0:interface=0.0.0.0",
        "tcp:0:interface=\\:\\:",
        "tcp:0",
        "tcp:0:interface=192.0.2.1",
        "ssl:0:interface=127.0.0.1",
        "unix:/run/op.sock",
        "tcp:0:interface=127.0.0.1:interface=0.0.0.0",
    ],
    ids=[
        "0.0.0.0",
        "::",
        "no interface",
        "public address",
        "ssl",
        "unix",
        "interface repeated",
    ],
)
def test_operator_http_must_be_loopback_tcp(value: str) -> None:
    """[operator] http is refused unless the endpoint that will listen is tcp on a loopback interface."""
    with pytest.raises(ConfigError):
        build_config({"operator": {"http": value}}, data_dir="/tmp/d", http=["tcp:0"])


@pytest.mark.parametrize(
    "value",
    [
        "tcp:0:interface=127.0.0.1",
        "tcp:0:interface=\\:\\:1",
        "tcp:8080:interface=localhost",
    ],
)
def test_operator_http_on_loopback_is_accepted(value: str) -> None:
    """A tcp endpoint on 127.0.0.1, ::1 or localhost is a valid [operator] http."""
    config = build_config(
        {"operator": {"http": value}}, data_dir="/tmp/d", http=["tcp:0"]
    )
    assert config.operator_http == value
    assert config.operator_discovery_file == "/tmp/d/operator-http.json"


@pytest_twisted.ensureDeferred
async def test_socket_that_cannot_be_removed_still_stops_listening(
    short_dir: str, serve: Any, monkeypatch: pytest.MonkeyPatch, logged_events: Any
) -> None:
    """If the socket cannot be unlinked on stop (as after twistd --uid shed the rights to its directory), the port still closes and a2a.unix.remove_failed says why, instead of an error that leaves it listening."""
    path = os.path.join(short_dir, "op.sock")
    service = serve(path)
    real_unlink = os.unlink

    def unlink(target: Any, *args: Any, **kwargs: Any) -> None:
        if os.fspath(target) == path:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        real_unlink(target, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    await service.stopService()
    monkeypatch.undo()
    assert os.path.lexists(path)
    assert not answers(path)
    (event,) = logged_events.named("a2a.unix.remove_failed")
    assert event["path"] == path
    assert event["reason"] == "Permission denied"


def test_an_operator_door_serves_through_twisted_web_from_the_first_byte() -> None:
    """The operator doors' sites skip the direct channel (it would only hand each connection over): a connection is twisted.web's channel."""
    from twisted.internet.address import UNIXAddress
    from twisted.internet.task import Clock

    from beacon.bindings.http import BeaconSite
    from beacon.bindings.http._site import BeaconHTTPChannel
    from beacon.config import build_config
    from beacon.service import operator_site

    site = operator_site(Resource(), build_config({}), Clock())
    assert isinstance(site, BeaconSite) and not site.noisy
    channel = site.buildProtocol(UNIXAddress("/tmp/operator.sock"))
    assert type(channel) is BeaconHTTPChannel
    public = BeaconSite(Resource(), clock=Clock()).buildProtocol(UNIXAddress("/tmp/operator.sock"))
    assert type(public) is not BeaconHTTPChannel
