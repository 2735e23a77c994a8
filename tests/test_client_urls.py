"""
The URLs the outbound client (C{beacon.client}) and the C{beacon card},
C{send} and C{task} commands take: only the schemes Beacon speaks, refused
before anything is dialled (a misspelt C{https} never goes out in clear
text), with the URL most likely meant; and what a TLS mismatch is said to
be, against real loopback listeners: C{https://} to a plain port (a small
Twisted server, and Beacon's own site, which answers a TLS handshake at
once), C{http://} to a TLS port, and a certificate that is not trusted.

Network tests run on the real reactor and loopback; nothing sleeps, every
wait on the reactor is bounded.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.web.client import Agent
from twisted.web.resource import Resource
from twisted.web.server import Site

from beacon import cli
from beacon.bindings.admission import Container
from beacon.bindings.http import BeaconSite
from beacon.client import (
    A2AClient,
    ClientError,
    InvalidURL,
    Timeouts,
    TransportError,
    check_url,
    fetch_card,
)
from beacon.client._transport import DialFactory
from beacon.config import build_config
from beacon.service import beacon_resources
from beacon.testing import MemoryStore
from test_websocket import _certificate

#: A safety net on every wait on the real reactor, never what a test measures.
WAIT = 60.0
#: Bounds on the client under test: far above what loopback takes.
TIMEOUTS = Timeouts(connect=WAIT, response=WAIT, idle=WAIT)


def within(d: Deferred[Any]) -> Deferred[Any]:
    return d.addTimeout(WAIT, reactor)


@pytest.mark.parametrize(
    "url, checked",
    [
        ("https://example.org", "https://example.org"),
        ("HTTPS://Example.org/a", "https://Example.org/a"),
        ("http://127.0.0.1:8080/.well-known/agent-card.json", "http://127.0.0.1:8080/.well-known/agent-card.json"),
        ("ws://127.0.0.1:8080/a2a/ws", "ws://127.0.0.1:8080/a2a/ws"),
        ("wss://[::1]:8443", "wss://[::1]:8443"),
        ("unix:///run/beacon/operator.sock", "unix:///run/beacon/operator.sock"),
    ],
)
def test_the_schemes_beacon_speaks_pass(url: str, checked: str) -> None:
    """http, https, ws, wss (in any case) with a host, and unix:///path, pass; the scheme comes back in lower case."""
    assert check_url(url) == checked


@pytest.mark.parametrize(
    "url, problem, suggestion",
    [
        # A near miss of a scheme: the one meant, the TLS one on a tie.
        ("htps://example.org", "not htps://", "https://example.org"),
        ("htp://example.org/a2a", "not htp://", "http://example.org/a2a"),
        ("hptts://example.org", "not hptts://", "https://example.org"),
        ("httpd://example.org", "not httpd://", "https://example.org"),
        ("wws://example.org", "not wws://", "wss://example.org"),
        ("unx:///tmp/s.sock", "not unx://", "unix:///tmp/s.sock"),
        # Another scheme: no guess.
        ("ftp://example.org", "not ftp://", None),
        ("grpc://example.org:50051", "not grpc://", None),
        # A known scheme without its ://.
        ("http:/example.org", "no :// after the scheme http", "http://example.org"),
        ("https:example.org", "no :// after the scheme https", "https://example.org"),
        ("https//example.org", "no :// after the scheme https", "https://example.org"),
        ("unix:/tmp/s.sock", "no :// after the scheme unix", "unix:///tmp/s.sock"),
        # No scheme: http for loopback or an address with a port, else https.
        ("127.0.0.1:8080", "no scheme", "http://127.0.0.1:8080"),
        ("localhost:8080/a2a/v1", "no scheme", "http://localhost:8080/a2a/v1"),
        ("[::1]:8080", "no scheme", "http://[::1]:8080"),
        ("192.0.2.7:8080", "no scheme", "http://192.0.2.7:8080"),
        ("example.org", "no scheme", "https://example.org"),
        ("example.org:8443", "no scheme", "https://example.org:8443"),
        ("/run/beacon/operator.sock", "no scheme", "unix:///run/beacon/operator.sock"),
        # No host, or a socket URL of another shape.
        ("https://", "no host after the scheme", None),
        ("http:///example.org", "no host after the scheme", "http://example.org"),
        ("unix://run/operator.sock", "a unix socket's URL is unix:///path", "unix:///run/operator.sock"),
        ("", "no URL given", None),
        ("mailto:someone@example.org", "not a URL Beacon speaks", None),
    ],
)
def test_what_will_not_do_is_refused_with_what_was_meant(url: str, problem: str, suggestion: str | None) -> None:
    """Each URL Beacon does not speak to is an InvalidURL naming it, its problem, and the URL most likely meant."""
    with pytest.raises(InvalidURL) as caught:
        check_url(url)
    error = caught.value
    assert isinstance(error, ClientError) and isinstance(error, ValueError)
    assert (error.url, error.suggestion) == (url, suggestion)
    assert problem in error.problem
    assert str(error).startswith(f"{url}: " if url else problem)
    if suggestion is not None:
        assert str(error).endswith(f" (did you mean {suggestion}?)")
        assert check_url(suggestion)


def test_unix_is_taken_only_where_asked() -> None:
    """check_url(unix=False): unix:///path will not do either."""
    with pytest.raises(InvalidURL, match="not unix://"):
        check_url("unix:///tmp/s.sock", unix=False)


class Counting(Factory):
    """Counts the connections it is offered, and closes each."""

    def __init__(self) -> None:
        self.connections = 0

    def buildProtocol(self, addr: Any) -> Protocol:
        self.connections += 1
        return Protocol()


@pytest_twisted.async_yield_fixture
async def listen() -> AsyncIterator[Callable[[Factory], int]]:
    """Listens with a factory on a free loopback port; every port is closed afterwards."""
    ports: list[Any] = []

    def start(factory: Factory) -> int:
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        ports.append(port)
        return int(port.getHost().port)

    yield start
    for port in ports:
        await within(port.stopListening())


@pytest_twisted.ensureDeferred
async def test_a_misspelt_scheme_is_never_dialled(listen: Callable[[Factory], int]) -> None:
    """htps://, htp://, ftp:// and a URL without a scheme raise InvalidURL before any connection: the listener is never reached."""
    counting = Counting()
    port = listen(counting)
    for url in (f"htps://127.0.0.1:{port}", f"htp://127.0.0.1:{port}", f"ftp://127.0.0.1:{port}", f"127.0.0.1:{port}"):
        with pytest.raises(InvalidURL):
            fetch_card(reactor, url, timeouts=TIMEOUTS)
        with pytest.raises(InvalidURL):
            A2AClient.discover(reactor, url, timeouts=TIMEOUTS)
    assert counting.connections == 0


@pytest_twisted.ensureDeferred
async def test_the_dialler_refuses_any_other_scheme(listen: Callable[[Factory], int]) -> None:
    """The last line: an Agent on the client's dialler fails a request for another scheme with InvalidURL, and dials nothing; https in capitals is TLS."""
    counting = Counting()
    port = listen(counting)
    dial = DialFactory(reactor, Clock(), WAIT)
    for scheme in (b"htps", b"ftp", b"httpx"):
        with pytest.raises(InvalidURL, match="not " + scheme.decode() + "://"):
            dial.endpoint(scheme, b"127.0.0.1", port)
    http = HTTPClient(Agent.usingEndpointFactory(reactor, dial))
    with pytest.raises(InvalidURL):
        await within(http.get(f"htps://127.0.0.1:{port}/"))
    assert counting.connections == 0
    assert dial.endpoint(b"HTTPS", b"127.0.0.1", port) is not None


class PlainAnswer(Protocol):
    """A plain HTTP server's answer to whatever arrives (a TLS ClientHello too): 400, then close."""

    def dataReceived(self, data: bytes) -> None:
        self.transport.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        self.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_https_to_a_plain_port_says_the_server_did_not_answer_tls(listen: Callable[[Factory], int]) -> None:
    """https:// (and wss://) to a plain-text server: a TransportError saying so in words, with the http:// URL to try."""
    port = listen(Factory.forProtocol(PlainAnswer))
    for scheme, plain in (("https", "http"), ("wss", "ws")):
        with pytest.raises(TransportError) as caught:
            await within(fetch_card(reactor, f"{scheme}://127.0.0.1:{port}", timeouts=TIMEOUTS))
        assert caught.value.reason == (
            f"the server did not answer TLS (a plain-text port? try {plain}://127.0.0.1:{port})"
        )


@pytest_twisted.async_yield_fixture
async def beacon_port(http_path: str) -> AsyncIterator[int]:
    """Beacon's public site (on this run's HTTP path) on a free loopback port, plain HTTP."""
    resources = beacon_resources(build_config({"limits": {"rate": 0}}), MemoryStore(), reactor)
    site = BeaconSite(resources.mount(Container()), clock=reactor)
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    resources.publish(f"http://127.0.0.1:{port.getHost().port}")
    yield port.getHost().port
    await within(port.stopListening())


@pytest_twisted.ensureDeferred
async def test_https_to_beacons_plain_port_is_said_at_once(beacon_port: int) -> None:
    """Beacon's plain port answers a TLS handshake at once (400, not when its head timeout passes): the client says the server did not answer TLS; http:// reads the card."""
    with pytest.raises(TransportError, match="the server did not answer TLS"):
        await within(fetch_card(reactor, f"https://127.0.0.1:{beacon_port}", timeouts=TIMEOUTS))
    card = await within(fetch_card(reactor, f"http://127.0.0.1:{beacon_port}", timeouts=TIMEOUTS))
    assert card.name == "Beacon"


@pytest_twisted.ensureDeferred
async def test_the_commands_say_it_in_one_line(beacon_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    """beacon card https:// to a plain port: exit 1, one line; htps:// and a URL without a scheme: exit 2 (usage), naming the URL meant, nothing dialled."""
    out, err = io.StringIO(), io.StringIO()
    args = cli.parse_args(["card", f"https://127.0.0.1:{beacon_port}", "--timeout", str(WAIT)])
    code = await within(Deferred.fromCoroutine(cli.run_peer(reactor, args, out, err)))
    assert code == 1
    assert err.getvalue() == (
        f"beacon: cannot reach the agent at https://127.0.0.1:{beacon_port}/.well-known/agent-card.json:"
        f" the server did not answer TLS (a plain-text port? try http://127.0.0.1:{beacon_port})\n"
    )
    for command, url, meant in (
        ("card", f"htps://127.0.0.1:{beacon_port}", f"https://127.0.0.1:{beacon_port}"),
        ("send", f"127.0.0.1:{beacon_port}", f"http://127.0.0.1:{beacon_port}"),
        ("task", "example.org", "https://example.org"),
    ):
        argv = [command, url, "hello"] if command != "card" else [command, url]
        assert cli.main(argv) == 2
        first = capsys.readouterr().err.splitlines()[0]
        assert first.startswith(f"beacon: error: {url}: ")
        assert first.endswith(f" (did you mean {meant}?)")
    assert cli.main(["card", "ftp://example.org"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "beacon: error: ftp://example.org: Beacon speaks http://, https://, ws://, wss://"
        " or unix:///path, not ftp://"
    )


@pytest_twisted.async_yield_fixture
async def tls_port(tmp_path: Path) -> AsyncIterator[int]:
    """A TLS server (a self-signed certificate for 127.0.0.1) on a free loopback port."""
    cert, key = _certificate(tmp_path)
    endpoint = serverFromString(reactor, f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}")
    port = await within(endpoint.listen(Site(Resource())))
    yield port.getHost().port
    await within(port.stopListening())


@pytest_twisted.ensureDeferred
async def test_http_to_a_tls_port_and_an_untrusted_certificate(tls_port: int) -> None:
    """http:// to a TLS port: the connection closes unanswered, and the error says to try https://; https:// to a certificate no root signed: the handshake failed, and why."""
    with pytest.raises(TransportError) as plain:
        await within(fetch_card(reactor, f"http://127.0.0.1:{tls_port}", timeouts=TIMEOUTS))
    assert plain.value.reason == (
        f"the connection was closed before an answer (if the server speaks TLS, try https://127.0.0.1:{tls_port})"
    )
    with pytest.raises(TransportError) as untrusted:
        await within(fetch_card(reactor, f"https://127.0.0.1:{tls_port}", timeouts=TIMEOUTS))
    assert untrusted.value.reason.startswith("the TLS handshake failed (")
    assert "certificate verify failed" in untrusted.value.reason
