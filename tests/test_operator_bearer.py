"""
The operator's loopback bearer-token door, for hosts without unix sockets:
its discovery file (0600, the door's URL and a token new each boot), the
401 it gives without the token, what it serves with it, and how a start-up
that fails undoes it.

Everything runs on the real reactor that pytest-twisted drives, in a short
directory under /tmp; tests wait on Deferreds, never on time.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.web.test.requesthelper import DummyRequest

from beacon.bindings.operator._doors import BearerGate, write_discovery_file
from beacon.intake._operator import INBOX_EVENTS_EXTENSION, REVIEW_EXTENSION
from beacon.service import Listeners, StartupError, makeService

from operator_support import (
    CARD_PATH,
    Hello,
    Running,
    beacon_config,
    list_tasks_body,
    mode_of,
    start_beacon,
    stop_beacon,
    tcp_client,
)


def bearer_config(
    data_dir: str,
    door: str = "tcp:0:interface=127.0.0.1",
    *,
    unix_socket: bool = True,
    store_url: str | None = None,
) -> Any:
    """
    A configuration with the bearer door on C{door} (and the operator socket
    unless C{unix_socket} is false), a public listener on a free loopback
    port, and the store in C{data_dir} unless C{store_url} says elsewhere.
    """
    operator = {"http": door} if unix_socket else {"socket": "", "http": door}
    return beacon_config(data_dir, file_values={"operator": operator}, store_url=store_url)


@pytest_twisted.async_yield_fixture
async def bearer_beacon(short_dir: str) -> AsyncIterator[Running]:
    """makeService's tree with the bearer door too, started and then stopped."""
    running = start_beacon(bearer_config(short_dir))
    yield running
    await stop_beacon(running)


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def discovery(running: Running) -> dict[str, Any]:
    """The bearer door's discovery file, parsed."""
    found: dict[str, Any] = read_json(
        os.path.join(running.data_dir, "operator-http.json")
    )
    return found


def bearer_ports(running: Running) -> list[Any]:
    doors = [
        s for s in running.service if isinstance(s, Listeners) and s._what == "operator"
    ]
    assert len(doors) == 1
    return doors[0].ports


@pytest_twisted.ensureDeferred
async def test_discovery_file_is_private_and_names_url_and_token(
    bearer_beacon: Running,
) -> None:
    """After start the discovery file is 0600 and holds exactly the door's URL and a token of at least 192 bits."""
    path = os.path.join(bearer_beacon.data_dir, "operator-http.json")
    info = os.lstat(path)
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.getuid()
    found = discovery(bearer_beacon)
    assert set(found) == {"url", "token"}
    (port,) = bearer_ports(bearer_beacon)
    assert found["url"] == f"http://127.0.0.1:{port.getHost().port}/"
    assert re.fullmatch(r"[A-Za-z0-9_-]{32,}", found["token"])
    assert not [
        n for n in os.listdir(bearer_beacon.data_dir) if n.startswith(".operator-http-")
    ]


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "TOKEN",
        "Bearer TOKENx",
        "TOKEN-as-is",
    ],
    ids=[
        "none",
        "wrong",
        "empty",
        "basic",
        "bare token",
        "token plus",
        "token no scheme",
    ],
)
@pytest.mark.parametrize(
    "method,path",
    [("GET", CARD_PATH), ("POST", "/"), ("GET", "/"), ("GET", "/nowhere")],
)
@pytest_twisted.ensureDeferred
async def test_bearer_door_refuses_without_the_token(
    bearer_beacon: Running, authorization: str | None, method: str, path: str
) -> None:
    """Without the right bearer token every request, the card included, is HTTP 401 with WWW-Authenticate: Bearer and a -31401 JSON-RPC error."""
    found = discovery(bearer_beacon)
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    if authorization is not None:
        if authorization == "TOKEN-as-is":
            headers["Authorization"] = found["token"]
        else:
            headers["Authorization"] = authorization.replace("TOKEN", found["token"])
    url = found["url"].rstrip("/") + path
    data = list_tasks_body() if method == "POST" else None
    response = await tcp_client().request(method, url, data=data, headers=headers)
    assert response.code == 401
    challenge = response.headers.getRawHeaders("WWW-Authenticate")
    assert challenge and challenge[0].startswith("Bearer")
    body = await response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == -31401


@pytest_twisted.ensureDeferred
async def test_bearer_door_serves_with_the_token(bearer_beacon: Running) -> None:
    """With the token the card names JSONRPC at the door's URL, then HTTP+JSON under it, and declares the bearer scheme, and ListTasks answers."""
    found = discovery(bearer_beacon)
    auth = {"Authorization": "Bearer " + found["token"]}
    client = tcp_client()
    response = await client.get(found["url"].rstrip("/") + CARD_PATH, headers=auth)
    assert response.code == 200
    card = await response.json()
    assert card["supportedInterfaces"] == [
        {"url": found["url"], "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": found["url"] + "a2a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]
    schemes = card["securitySchemes"]
    assert [s["httpAuthSecurityScheme"]["scheme"] for s in schemes.values()] == [
        "Bearer"
    ]
    assert card["securityRequirements"]
    assert card["capabilities"]["streaming"] is True
    uris = [e["uri"] for e in card["capabilities"]["extensions"]]
    assert REVIEW_EXTENSION in uris and INBOX_EVENTS_EXTENSION in uris
    response = await client.post(
        found["url"],
        data=list_tasks_body(),
        headers={**auth, "A2A-Version": "1.0", "Content-Type": "application/json"},
    )
    assert response.code == 200
    body = await response.json()
    assert "error" not in body, body
    assert body["result"]["tasks"] == []


@pytest_twisted.ensureDeferred
async def test_bearer_token_is_new_each_boot(short_dir: str) -> None:
    """A discovery file left by an earlier boot is replaced with a new token on start."""
    path = os.path.join(short_dir, "operator-http.json")
    write_discovery_file(path, "http://127.0.0.1:1/", "old")
    running = start_beacon(bearer_config(short_dir))
    try:
        found = read_json(path)
        assert found["token"] != "old"
        assert found["url"] != "http://127.0.0.1:1/"
        assert mode_of(path) == 0o600
    finally:
        await stop_beacon(running)


def test_bearer_gate_refuses_a_request_for_itself() -> None:
    """A request that reaches the gate itself, with no path below it, is refused like any other."""
    gate = BearerGate(Hello(), "secret")
    request = DummyRequest([])
    body = gate.render(request)
    assert request.responseCode == 401
    assert request.responseHeaders.getRawHeaders(b"WWW-Authenticate")[0].startswith(
        b"Bearer"
    )
    assert json.loads(body)["error"]["code"] == -31401


def test_failed_discovery_write_leaves_nothing(short_dir: str) -> None:
    """If the discovery file cannot be put in place, its temporary file is removed and the error is raised."""
    path = os.path.join(short_dir, "operator-http.json")
    os.mkdir(path)  # os.replace onto a directory fails
    with pytest.raises(OSError):
        write_discovery_file(path, "http://127.0.0.1:1/", "token")
    assert os.listdir(short_dir) == ["operator-http.json"]
    assert os.listdir(path) == []


@pytest_twisted.ensureDeferred
async def test_discovery_file_is_removed_on_stop(bearer_beacon: Running) -> None:
    """Stopping the tree removes the discovery file and closes the door."""
    path = os.path.join(bearer_beacon.data_dir, "operator-http.json")
    url = discovery(bearer_beacon)["url"]
    await bearer_beacon.service.stopService()
    assert not os.path.lexists(path)
    port = int(url.rsplit(":", 1)[1].rstrip("/"))
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    finally:
        probe.close()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds, listening."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        yield holder.getsockname()[1]
    finally:
        holder.close()


def closed(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:C{port}."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        return probe.connect_ex(("127.0.0.1", port)) != 0
    finally:
        probe.close()


def start_as_twistd(service: Any, start: str) -> None:
    """Start C{service} as twistd does (privileged, then normal) or with startService alone."""
    if start == "privilegedStartService":
        service.privilegedStartService()
    else:
        service.startService()


@pytest.mark.parametrize("start", ["privilegedStartService", "startService"])
@pytest_twisted.ensureDeferred
async def test_bearer_door_bind_failure_stops_startup(
    short_dir: str, busy_port: int, start: str
) -> None:
    """If the bearer door's port is taken, start-up fails with StartupError; what had started is undone: no operator socket, no discovery file, no public port left open, and the tree is not running."""
    config = bearer_config(short_dir, f"tcp:{busy_port}:interface=127.0.0.1")
    service = makeService(config, reactor)
    (public,) = [s for s in service if isinstance(s, Listeners) and s._what == "http"]
    bound: list[int] = []
    public._on_bound = lambda ports: bound.append(ports[0].getHost().port)
    with pytest.raises(StartupError) as caught:
        start_as_twistd(service, start)
    assert str(busy_port) in str(caught.value)
    assert "operator" in str(caught.value)
    assert not service.running
    assert not os.path.lexists(os.path.join(short_dir, "operator.sock"))
    assert not os.path.lexists(os.path.join(short_dir, "operator-http.json"))
    assert not [n for n in os.listdir(short_dir) if n.startswith(".operator")]
    assert service.undone is not None
    await service.undone
    assert bound and closed(bound[0])


@pytest_twisted.ensureDeferred
async def test_store_failure_after_binding_removes_the_operator_socket(
    short_dir: str,
) -> None:
    """As under twistd: the listeners bind (privilegedStartService), then the store cannot open (startService, before the socket binds): StoreError, and the socket, the discovery file and the ports are gone."""
    from beacon.store import StoreError

    os.mkdir(os.path.join(short_dir, "beacon.sqlite3"))  # not a database file
    config = bearer_config(short_dir)
    service = makeService(config, reactor)
    service.privilegedStartService()
    socket_path = os.path.join(short_dir, "operator.sock")
    assert not os.path.lexists(socket_path)
    ports = [
        p.getHost().port for s in service if isinstance(s, Listeners) for p in s.ports
    ]
    assert len(ports) == 2
    with pytest.raises(StoreError):
        service.startService()
    assert not service.running
    assert not os.path.lexists(socket_path)
    assert not os.path.lexists(os.path.join(short_dir, "operator-http.json"))
    assert service.undone is not None
    await service.undone
    assert all(closed(port) for port in ports)


@pytest.mark.parametrize("start", ["privilegedStartService", "startService"])
@pytest_twisted.ensureDeferred
async def test_bearer_door_alone_on_a_fresh_data_directory(
    short_dir: str, start: str
) -> None:
    """[operator] socket = "" with the bearer door, on a data directory that does not exist yet: Beacon starts, makes the directory 0700 and writes the discovery file 0600 in it."""
    data = os.path.join(short_dir, "new", "data")
    elsewhere = "sqlite:///" + os.path.join(short_dir, "elsewhere.sqlite3")
    config = bearer_config(data, unix_socket=False, store_url=elsewhere)
    service = makeService(config, reactor)
    start_as_twistd(service, start)
    if start == "privilegedStartService":
        service.startService()
    try:
        path = os.path.join(data, "operator-http.json")
        assert mode_of(path) == 0o600
        assert mode_of(data) == 0o700
        assert set(read_json(path)) == {"url", "token"}
    finally:
        await service.stopService()
    assert not os.path.lexists(path)


@pytest_twisted.ensureDeferred
async def test_failed_start_keeps_a_discovery_file_it_did_not_write(
    short_dir: str,
) -> None:
    """A start that fails before its bearer door has written anything (the store cannot open, after the ports bound) leaves alone a discovery file that is not its own: another Beacon's, on the same data directory."""
    from beacon.store import StoreError

    path = os.path.join(short_dir, "operator-http.json")
    write_discovery_file(path, "http://127.0.0.1:1/", "someone else's")
    os.mkdir(os.path.join(short_dir, "beacon.sqlite3"))  # not a database file
    config = bearer_config(short_dir, unix_socket=False)
    service = makeService(config, reactor)
    service.privilegedStartService()
    with pytest.raises(StoreError):
        service.startService()
    assert service.undone is not None
    await service.undone
    assert read_json(path)["token"] == "someone else's"


@pytest_twisted.ensureDeferred
async def test_discovery_file_that_cannot_be_written_stops_startup(short_dir: str) -> None:
    """If the discovery file cannot be written (its data directory is under a regular file), start-up fails with a StartupError naming the file, and the door's port is closed again."""
    blocker = os.path.join(short_dir, "a-file")
    with open(blocker, "w") as f:
        f.write("not a directory\n")
    data = os.path.join(blocker, "data")
    elsewhere = "sqlite:///" + os.path.join(short_dir, "elsewhere.sqlite3")
    config = bearer_config(data, unix_socket=False, store_url=elsewhere)
    service = makeService(config, reactor)
    service.privilegedStartService()
    door = [p.getHost().port for p in bearer_ports(Running(service, data, ""))]
    with pytest.raises(StartupError) as caught:
        service.startService()
    assert os.path.join(data, "operator-http.json") in str(caught.value)
    assert not service.running
    assert service.undone is not None
    await service.undone
    assert door and closed(door[0])
