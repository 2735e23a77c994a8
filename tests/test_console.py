"""
The web console's server (L{beacon.console}) and C{beacon review web}.

The console is served in-process on a loopback port of the real reactor,
relaying to a real Beacon served in-process (its operator socket in
C{tmp_path}), and spoken to over raw HTTP/1.1 so that every header (a
missing C{Host} too) is the test's. The event relay's retries and
keep-alives run on a L{Clock}. The command runs as a subprocess against a
real C{twistd -n beacon}. No browser: tests/test_web_console.py drives the
page in one.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import pytest_twisted
from twisted.application.service import MultiService
from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredQueue, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock, deferLater
from twisted.python.failure import Failure

from beacon.cli import _web
from beacon.client import OperatorClient
from beacon.config import build_config
from beacon.console import (
    CSP,
    FIRST_RETRY,
    KEEP_ALIVE,
    LAST_RETRY,
    MAX_BODY,
    MAX_CSP_REPORT,
    MAX_PENDING_BYTES,
    Console,
    ConsoleSite,
    EventRelay,
)
from beacon.protocol import DOORS
from beacon.protocol import STATE_COMPLETED as COMPLETED
from beacon.protocol import STATE_REJECTED as REJECTED
from beacon.protocol import STATE_SUBMITTED as SUBMITTED
from beacon.service import makeService
from peers.process import LOOPBACK_HTTP, BeaconLauncher
from raw_http import Answer
from test_cli import (  # noqa: F401 (fixtures)
    STRUCTURED,
    WAIT,
    InProcessBeacon,
    launcher,
    post_text,
    within,
)

BEACON_SCRIPT = Path(sys.executable).parent / "beacon"

SECURITY = {
    "content-security-policy": CSP.decode(),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


# Raw HTTP.


class Raw(Protocol):
    """Sends one request's bytes; collects everything until the connection ends."""

    def __init__(self, request: bytes, read: bool = True) -> None:
        self.request = request
        self.read = read
        self.data = b""
        self.closed: Deferred[bytes] = Deferred()
        self._waiting: list[tuple[bytes, int, Deferred[bytes]]] = []

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self.request)
        if not self.read:
            self.transport.pauseProducing()

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        for waiting in list(self._waiting):
            needle, count, d = waiting
            if self.data.count(needle) >= count:
                self._waiting.remove(waiting)
                d.callback(self.data)

    def until(self, needle: bytes, count: int = 1) -> Deferred[bytes]:
        """Fires once C{needle} arrived C{count} times."""
        if self.data.count(needle) >= count:
            return succeed(self.data)
        d: Deferred[bytes] = Deferred()
        self._waiting.append((needle, count, d))
        return within(d)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        for _, _, d in self._waiting:
            d.errback(AssertionError(f"closed before it came: {self.data[-500:]!r}"))
        self._waiting = []
        self.closed.callback(self.data)


async def connect(port: int, request: bytes, read: bool = True) -> Raw:
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=WAIT)
    protocol = Raw(request, read)
    await within(connectProtocol(endpoint, protocol))
    return protocol


def request_bytes(
    method: str,
    path: str,
    *,
    host: str | None,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1"]
    if host is not None:
        lines.append(f"Host: {host}")
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


# The console, in-process.


class Served:
    """A console listening on a loopback port, relaying to a Beacon."""

    def __init__(self, console: Console, port: IListeningPort) -> None:
        self.console = console
        self.port = port
        self.number: int = port.getHost().port
        self.host = f"127.0.0.1:{self.number}"
        self.origin = f"http://{self.host}"
        self.session: str | None = None

    async def send(
        self,
        method: str,
        path: str,
        *,
        host: str | None | type[Ellipsis] = ...,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        session: bool = True,
    ) -> Answer:
        given = dict(headers or {})
        if session and self.session is not None:
            given.setdefault("Cookie", f"beacon-console={self.session}")
        raw = request_bytes(
            method,
            path,
            host=self.host if host is ... else host,  # type: ignore[arg-type]
            headers=given,
            body=body,
        )
        protocol = await connect(self.number, raw)
        return Answer(await within(protocol.closed))

    async def get(self, path: str, **kwargs: Any) -> Answer:
        return await self.send("GET", path, **kwargs)

    async def post(self, path: str, document: Any, **kwargs: Any) -> Answer:
        headers = {"Origin": self.origin, "Content-Type": "application/json"}
        headers.update(kwargs.pop("headers", {}))
        body = json.dumps(document).encode()
        return await self.send("POST", path, headers=headers, body=body, **kwargs)

    async def sign_in(self) -> str:
        token = self.console.new_token()
        answer = await self.get(f"/?token={token}", session=False)
        assert answer.status == 303, answer
        cookie = answer.header("set-cookie")
        assert cookie is not None
        self.session = cookie.split(";")[0].split("=", 1)[1]
        return token

    def stream_request(self) -> bytes:
        return request_bytes(
            "GET",
            "/api/events",
            host=self.host,
            headers={"Cookie": f"beacon-console={self.session}", "Accept": "text/event-stream"},
        )


class Beacons:
    """Beacon service trees on one data directory, started and stopped at will."""

    def __init__(self, tmp_path: Path) -> None:
        self.data = tmp_path / "data"
        self.running: list[MultiService] = []
        self.current: InProcessBeacon | None = None

    def start(self) -> InProcessBeacon:
        config = build_config(
            None, data_dir=str(self.data), http=[LOOPBACK_HTTP], public_url="http://127.0.0.1:1"
        )
        service = makeService(config, reactor)
        service.startService()
        self.running.append(service)
        self.current = InProcessBeacon(service, self.data)
        return self.current

    async def stop(self) -> None:
        while self.running:
            await within(self.running.pop().stopService())


@pytest_twisted.async_yield_fixture
async def beacons(tmp_path: Path) -> AsyncIterator[Beacons]:
    started = Beacons(tmp_path)
    yield started
    await started.stop()


@pytest_twisted.async_yield_fixture
async def serve(
    beacons: Beacons,
) -> AsyncIterator[Callable[..., Served]]:
    """Serves consoles (on a Clock, unless told otherwise); stops them afterwards."""
    served: list[Served] = []

    def start(clock: Any = None, socket: str | None = None) -> Served:
        path = socket or str(beacons.data / "operator.sock")
        client = OperatorClient(reactor, socket_path=path, timeout=WAIT)
        console = Console(client, clock if clock is not None else Clock())
        port = reactor.listenTCP(0, ConsoleSite(console.resource), interface="127.0.0.1")
        console.listening(port.getHost())
        served.append(Served(console, port))
        return served[-1]

    yield start
    for one in served:
        one.console.close()
        await within(Deferred.fromCoroutine(_stop_listening(one.port)))


async def _stop_listening(port: IListeningPort) -> None:
    await port.stopListening()


@pytest.fixture
def beacon(beacons: Beacons) -> InProcessBeacon:
    return beacons.start()


async def eventually(predicate: Callable[[], bool]) -> None:
    """Wait (bounded, on the reactor) until C{predicate} holds."""
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "it never happened"
        await deferLater(reactor, 0.01, lambda: None)


def assert_secure(answer: Answer) -> None:
    for name, value in SECURITY.items():
        assert answer.headers.get(name) == [value], (name, answer)


# The guards.


@pytest_twisted.ensureDeferred
async def test_token_exchange(beacon: InProcessBeacon, serve: Callable[..., Served], logged_events: Any) -> None:
    """A token makes one session (303 to /, the cookie exact); used again, 401."""
    served = serve()
    token = served.console.new_token()
    assert len(token) >= 43  # 256 bits, URL-safe base64
    first = await served.get(f"/?token={token}")
    assert first.status == 303, first
    assert first.header("location") == "/"
    cookie = first.header("set-cookie")
    assert cookie is not None
    name, _, rest = cookie.partition("=")
    session, _, attributes = rest.partition(";")
    assert name == "beacon-console" and len(session) >= 43
    assert attributes == " HttpOnly; SameSite=Strict; Path=/"
    assert_secure(first)
    assert token not in json.dumps([e.get("log_format") for e in logged_events.events])
    assert logged_events.named("console.login")

    again = await served.get(f"/?token={token}")
    assert again.status == 401
    assert again.header("content-type") == "text/html; charset=utf-8"
    assert b"This link has been used or is not valid." in again.body
    assert b"beacon review web" in again.body
    assert_secure(again)
    wrong = await served.get("/?token=" + "A" * 43)
    assert wrong.status == 401 and b"has been used or is not valid" in wrong.body
    reasons = [e["reason"] for e in logged_events.named("console.refused")]
    assert reasons == ["spent_token", "bad_token"]

    served.session = session
    page = await served.get("/")
    assert page.status == 200, page
    assert page.header("content-type") == "text/html; charset=utf-8"
    assert_secure(page)


@pytest_twisted.ensureDeferred
async def test_no_session(beacon: InProcessBeacon, serve: Callable[..., Served], logged_events: Any) -> None:
    """Without the cookie (or with another), every route answers the 401 page."""
    served = serve()
    await served.sign_in()
    for path in ("/", "/api/tasks", "/static/app.js", "/api/events", "/nowhere"):
        answer = await served.get(path, session=False)
        assert answer.status == 401, (path, answer)
        assert b"Run <code>beacon review web</code> for a new one." in answer.body
        assert_secure(answer)
    forged = await served.get("/api/tasks", session=False, headers={"Cookie": "beacon-console=forged"})
    assert forged.status == 401
    posted = await served.post("/api/decide-many", {"ids": ["x"], "decision": "accept"}, session=False)
    assert posted.status == 401
    assert {e["reason"] for e in logged_events.named("console.refused")} == {"no_session"}


@pytest.mark.parametrize(
    "host",
    [None, "evil.example:{port}", "127.0.0.1", "127.0.0.1:1", "127.0.0.2:{port}", "[::1]:{port}"],
)
@pytest_twisted.ensureDeferred
async def test_wrong_host(
    beacon: InProcessBeacon, serve: Callable[..., Served], logged_events: Any, host: str | None
) -> None:
    """A Host other than the bound address or localhost with the port: 403 (DNS rebinding)."""
    served = serve()
    await served.sign_in()
    name = None if host is None else host.format(port=served.number)
    for path in ("/", "/api/tasks", f"/?token={served.console.new_token()}"):
        answer = await served.get(path, host=name)
        assert answer.status == 403, answer
        assert answer.body == b"wrong Host\n"
        assert_secure(answer)
    # The first refusal of a reason is logged; the next ones are counted.
    assert [e["reason"] for e in logged_events.named("console.refused")] == ["wrong_host"]
    assert (await served.get("/", host=f"localhost:{served.number}")).status == 200
    served.console.refusals.stop()
    [summary] = [e for e in logged_events.named("console.refused") if "count" in e]
    assert (summary["reason"], summary["count"]) == ("wrong_host", 2)


@pytest_twisted.ensureDeferred
async def test_origin_and_methods(beacon: InProcessBeacon, serve: Callable[..., Served], logged_events: Any) -> None:
    """A POST without the console's Origin is 403; so is PUT; a route answers its method only."""
    served = serve()
    await served.sign_in()
    body = {"ids": ["x"], "decision": "accept"}
    for origin in (None, "http://evil.example", f"https://{served.host}", "null"):
        headers = {"Content-Type": "application/json"}
        if origin is not None:
            headers["Origin"] = origin
        answer = await served.send(
            "POST", "/api/decide-many", headers=headers, body=json.dumps(body).encode()
        )
        assert answer.status == 403, answer
        assert answer.body == b"cross-origin request refused\n"
        assert_secure(answer)
    put = await served.send("PUT", "/api/tasks", headers={"Origin": served.origin}, body=b"{}")
    assert put.status == 403
    wrong_method = await served.get("/api/decide-many")
    assert wrong_method.status == 405 and wrong_method.header("allow") == "POST"
    assert wrong_method.json()["error"]["message"] == "use POST"
    assert_secure(wrong_method)
    posted_get = await served.post("/api/tasks", {})
    assert posted_get.status == 405 and posted_get.header("allow") == "GET"
    reasons = [e["reason"] for e in logged_events.named("console.refused")]
    assert reasons == ["bad_origin", "bad_method"]


@pytest_twisted.ensureDeferred
async def test_bodies(beacon: InProcessBeacon, serve: Callable[..., Served]) -> None:
    """8 MiB is read; one byte more is 413 before the body; not JSON 400; not application/json 415."""
    served = serve()
    await served.sign_in()
    headers = {"Origin": served.origin, "Content-Type": "application/json"}
    over = request_bytes(
        "POST", "/api/decide-many", host=served.host,
        headers={**headers, "Cookie": f"beacon-console={served.session}",
                 "Content-Length": str(MAX_BODY + 1)},
    )
    protocol = await connect(served.number, over)
    answer = Answer(await within(protocol.closed))
    assert answer.status == 413, answer
    assert answer.json() == {"error": {"message": f"the request body exceeds {MAX_BODY} bytes", "code": None}}
    assert_secure(answer)
    at_limit = await served.send("POST", "/api/decide-many", headers=headers, body=b" " * MAX_BODY)
    assert at_limit.status == 400, at_limit
    assert at_limit.json()["error"]["message"] == "the body is not valid JSON"
    not_json = await served.send("POST", "/api/decide-many", headers=headers, body=b"{ids")
    assert not_json.status == 400
    text = await served.send(
        "POST", "/api/decide-many", headers={**headers, "Content-Type": "text/plain"}, body=b"{}"
    )
    assert text.status == 415
    for document, message in (
        ([], "the body is a JSON object"),
        ({"ids": ["x"], "decision": "maybe"}, 'decision is "accept" or "reject"'),
        ({"ids": "x", "decision": "accept"}, "ids is a list of task ids"),
        ({"ids": [], "decision": "accept"}, "ids holds no id"),
        ({"ids": ["x"] * 100_001, "decision": "accept"}, "ids holds at most 100,000 ids"),
        ({"ids": ["x"], "decision": "accept", "note": 5}, "note is text"),
    ):
        refused = await served.post("/api/decide-many", document)
        assert (refused.status, refused.json()["error"]["message"]) == (400, message)


@pytest_twisted.ensureDeferred
async def test_static_and_not_found(beacon: InProcessBeacon, serve: Callable[..., Served], tmp_path: Path) -> None:
    """Static files by type; unknown types, names and paths are 404 (with the headers)."""
    static = tmp_path / "static"
    static.mkdir()
    for name in ("index.html", "app.js", "app.css", "icon.svg", "shot.png", "notes.txt"):
        (static / name).write_bytes(b"x")
    served = serve()
    served.console.static = static
    await served.sign_in()
    for path, content_type in (
        ("/", "text/html; charset=utf-8"),
        ("/static/app.js", "text/javascript; charset=utf-8"),
        ("/static/app.css", "text/css; charset=utf-8"),
        ("/static/icon.svg", "image/svg+xml"),
        ("/static/shot.png", "image/png"),
    ):
        answer = await served.get(path)
        assert (answer.status, answer.header("content-type")) == (200, content_type), path
        assert_secure(answer)
    for path in ("/static/notes.txt", "/static/missing.js", "/static/../_server.py",
                 "/static/%2e%2e%2f__init__.py", "/static/.hidden.js", "/index.html", "/api/nowhere"):
        answer = await served.get(path)
        assert answer.status == 404, (path, answer)
        assert_secure(answer)


@pytest_twisted.ensureDeferred
async def test_csp_report(beacon: InProcessBeacon, serve: Callable[..., Served], logged_events: Any) -> None:
    """
    The page's CSP report (its Origin, its session's cookie): 204, logged
    and counted; 64 KiB at most.
    """
    served = serve()
    await served.sign_in()
    report = {"csp-report": {"violated-directive": "script-src", "blocked-uri": "inline\u202e"}}
    headers = {"Content-Type": "application/csp-report", "Origin": served.origin}
    answer = await served.send("POST", "/csp-report", headers=headers, body=json.dumps(report).encode())
    assert answer.status == 204, answer
    assert_secure(answer)
    assert served.console.csp_reports == 1
    [logged] = logged_events.named("console.csp_violation")
    assert (logged["directive"], logged["blocked"]) == ("script-src", "inline\\u202e")
    big = json.dumps({"csp-report": {"x": "y" * MAX_CSP_REPORT}}).encode()
    assert (await served.send("POST", "/csp-report", headers=headers, body=big)).status == 413
    wrong_host = await served.send(
        "POST", "/csp-report", host="evil.example", headers=headers, body=json.dumps(report).encode()
    )
    assert wrong_host.status == 403
    assert served.console.csp_reports == 1


@pytest_twisted.ensureDeferred
async def test_foreign_csp_reports_are_refused_without_a_line_each(
    beacon: InProcessBeacon, serve: Callable[..., Served], logged_events: Any
) -> None:
    """
    Reports from another origin, or without the session's cookie, are
    refused (403, 401) unread: none is a csp_violation line, and the
    refusals are one line of each reason, then a count.
    """
    served = serve()
    await served.sign_in()
    report = json.dumps({"csp-report": {"violated-directive": "x" * 200, "blocked-uri": "y" * 200}}).encode()
    for _ in range(250):
        foreign = await served.send(
            "POST",
            "/csp-report",
            session=False,
            headers={"Content-Type": "text/plain", "Origin": "http://evil.example"},
            body=report,
        )
        assert foreign.status == 403
        anonymous = await served.send(
            "POST",
            "/csp-report",
            session=False,
            headers={"Content-Type": "application/csp-report", "Origin": served.origin},
            body=report,
        )
        assert anonymous.status == 401
    assert served.console.csp_reports == 0
    assert logged_events.named("console.csp_violation") == []
    assert [e["reason"] for e in logged_events.named("console.refused")] == ["bad_origin", "no_session"]
    served.console.refusals.stop()
    summaries = {e["reason"]: e["count"] for e in logged_events.named("console.refused") if "count" in e}
    assert summaries == {"bad_origin": 249, "no_session": 249}


# The API, against a real Beacon.


@pytest_twisted.ensureDeferred
async def test_list_and_filters(beacon: InProcessBeacon, serve: Callable[..., Served]) -> None:
    """/api/tasks is review.List's page (messages included); filters, sort and page bounds."""
    served = serve()
    await served.sign_in()
    first = await beacon.submit({"data": STRUCTURED})
    second = await beacon.submit_text("a note about lighthouses")
    page = (await served.get("/api/tasks?pageSize=1")).json()
    assert [t["id"] for t in page["tasks"]] == [second]
    assert page["totalSize"] == 2 and page["nextPageToken"]
    assert page["tasks"][0]["history"][0]["parts"][0]["text"] == "a note about lighthouses"
    rest = (await served.get(f"/api/tasks?pageSize=1&pageToken={page['nextPageToken']}")).json()
    assert [t["id"] for t in rest["tasks"]] == [first]
    found = (await served.get("/api/tasks?search=lighthouses")).json()
    assert [t["id"] for t in found["tasks"]] == [second]
    by_id = (await served.get(f"/api/tasks?id={first[:30].upper()}")).json()
    assert [t["id"] for t in by_id["tasks"]] == [first]
    assert (await served.get("/api/tasks?state=accepted")).json()["tasks"] == []
    assert len((await served.get("/api/tasks?state=submitted&door=jsonrpc&since=2000-01-01")).json()["tasks"]) == 2
    assert len((await served.get("/api/tasks?sort=updated&pageSize=100")).json()["tasks"]) == 2
    for query, words in (
        ("state=bogus", "is not a task state"),
        ("door=smoke", "is not a door"),
        ("since=yesterday", "is not an ISO 8601 date or time"),
        ("since=2026-12-02&until=2026-12-01", "until must be later than since"),
        ("search=%21%21", "the search holds no word"),
        ("sort=random", "sort is received or updated"),
        ("pageSize=0", "pageSize is a whole number from 1 to 100"),
        ("pageSize=101", "pageSize is a whole number from 1 to 100"),
        ("pageToken=garbage", "pageToken"),
    ):
        answer = await served.get(f"/api/tasks?{query}")
        assert answer.status == 400, (query, answer)
        assert words in answer.json()["error"]["message"], (query, answer)
        assert_secure(answer)


@pytest_twisted.ensureDeferred
async def test_choices_are_beacons_own_lists(beacon: InProcessBeacon, serve: Callable[..., Served]) -> None:
    """/api/choices offers every door of DOORS (grpc too) and the three states; each one filters."""
    served = serve()
    answer = await served.get("/api/choices", session=False)
    assert answer.status == 401
    await served.sign_in()
    answer = await served.get("/api/choices")
    assert answer.status == 200
    assert_secure(answer)
    choices = answer.json()
    assert choices == {"doors": list(DOORS), "states": [SUBMITTED, COMPLETED, REJECTED]}
    assert "grpc" in choices["doors"]
    for door in choices["doors"]:
        assert (await served.get(f"/api/tasks?door={quote(door)}")).status == 200, door
    for state in choices["states"]:
        assert (await served.get(f"/api/tasks?status={state}")).status == 200, state
    assert (await served.post("/api/choices", {})).status == 405


@pytest_twisted.ensureDeferred
async def test_one_task_and_decide(beacon: InProcessBeacon, serve: Callable[..., Served]) -> None:
    """A task by id or prefix; unknown 404, ambiguous 409, too short 400; decide once (409 after)."""
    served = serve()
    await served.sign_in()
    ids = [await beacon.submit_text(f"n{n}") for n in range(3)]
    common = os.path.commonprefix(ids)
    assert len(common) >= 6
    whole = await served.get(f"/api/tasks/{ids[0]}")
    assert whole.status == 200 and whole.json()["history"][0]["parts"][0]["text"] == "n0"
    short = await served.get(f"/api/tasks/{ids[1][:12]}")
    assert short.json()["id"] == ids[1]
    unknown = await served.get("/api/tasks/vvvvvvvv")
    assert unknown.status == 404 and unknown.json()["error"]["message"] == "no submission with id vvvvvvvv"
    unknown_whole = await served.get("/api/tasks/" + "v" * 36)
    assert (unknown_whole.status, unknown_whole.json()["error"]["code"]) == (404, -32001)
    ambiguous = await served.get(f"/api/tasks/{common[:6]}")
    assert ambiguous.status == 409 and "is ambiguous" in ambiguous.json()["error"]["message"]
    assert (await served.get("/api/tasks/abc")).status == 400
    decided = await served.post(f"/api/tasks/{ids[0][:10]}/decide", {"decision": "reject", "note": "spam"})
    assert decided.status == 200, decided
    assert decided.json()["status"]["state"] == "TASK_STATE_REJECTED"
    again = await served.post(f"/api/tasks/{ids[0]}/decide", {"decision": "accept"})
    assert (again.status, again.json()["error"]["code"]) == (409, -32004)
    bad = await served.post(f"/api/tasks/{ids[1]}/decide", {"decision": "maybe"})
    assert bad.status == 400
    assert_secure(again)


@pytest_twisted.ensureDeferred
async def test_matching_and_decide_many(beacon: InProcessBeacon, serve: Callable[..., Served]) -> None:
    """/api/matching lists the undecided matches; /api/decide-many decides them, merged."""
    served = serve()
    await served.sign_in()
    ids = [await beacon.submit_text(f"bulk item {n}") for n in range(5)]
    other = await beacon.submit_text("something else")
    await within(beacon.client().decide(ids[0], "accept"))
    matching = (await served.get("/api/matching?search=bulk")).json()
    assert matching == {"ids": list(reversed(ids[1:])), "count": 4, "complete": True}
    everything = (await served.get("/api/matching")).json()
    assert set(everything["ids"]) == set(ids[1:]) | {other}
    assert (await served.get("/api/matching?until=yesterday")).status == 400
    answer = await served.post(
        "/api/decide-many",
        {"ids": [*matching["ids"], ids[0], "v" * 36, ids[1]], "decision": "reject", "note": "bulk"},
    )
    assert answer.status == 200, answer
    assert answer.json() == {
        "decided": matching["ids"],
        "alreadyDecided": [{"id": ids[0], "state": "TASK_STATE_COMPLETED"}],
        "notFound": ["v" * 36],
        "failed": [],
    }
    assert (await served.get("/api/matching?search=bulk")).json()["count"] == 0


@pytest_twisted.ensureDeferred
async def test_beacon_unreachable(beacons: Beacons, serve: Callable[..., Served], tmp_path: Path) -> None:
    """Beacon not there: 503 saying where it was looked for."""
    served = serve(socket=str(tmp_path / "nobody.sock"))
    await served.sign_in()
    for path in ("/api/tasks", "/api/tasks/abcdefgh", "/api/matching"):
        answer = await served.get(path)
        assert answer.status == 503, answer
        message = answer.json()["error"]["message"]
        assert message.startswith(f"cannot reach Beacon at {tmp_path / 'nobody.sock'}: ")


# The event relay.


@pytest_twisted.ensureDeferred
async def test_events_relay(beacons: Beacons, serve: Callable[..., Served]) -> None:
    """
    ready, a task event after a submission, down when Beacon stops, retries
    on the clock (1 s, doubling, at most 10 s), ready again when it is back;
    keep-alives every 15 s.
    """
    beacon = beacons.start()
    clock = Clock()
    served = serve(clock)
    await served.sign_in()
    stream = await connect(served.number, served.stream_request())
    head = await stream.until(b"event: ready\ndata: {}\n\n")
    assert b"HTTP/1.1 200" in head and b"Content-Type: text/event-stream" in head
    assert b"X-Content-Type-Options: nosniff" in head
    task_id = await beacon.submit_text("live")
    data = await stream.until(task_id.encode())
    event = data[data.rindex(b"event: task") :].split(b"\n")
    assert event[0] == b"event: task" and event[1].startswith(b"data: ")
    assert json.loads(event[1][6:])["task"]["id"] == task_id
    clock.advance(KEEP_ALIVE)
    await stream.until(b": keep-alive\n\n")

    await beacons.stop()
    data = await stream.until(b"event: down")
    down = json.loads(data[data.index(b"event: down") :].split(b"\n")[1][6:])
    assert down["message"].startswith(f"cannot reach Beacon at {beacon.socket}")
    # Retries: 1 s, 2 s, 4 s, 8 s, then every 10 s; each failure says down.
    for n, delay in enumerate([FIRST_RETRY, 2.0, 4.0, 8.0, LAST_RETRY, LAST_RETRY], start=2):
        [retry] = [c for c in clock.getDelayedCalls() if c.func == served.console.events._open]
        assert retry.getTime() - clock.seconds() == delay
        clock.advance(delay)
        await stream.until(b"event: down", n)
    beacons.start()
    clock.advance(LAST_RETRY)
    await stream.until(b"event: ready", 2)
    # Another stream shares the feed, and is told at once.
    second = await connect(served.number, served.stream_request())
    await second.until(b"event: ready")
    again = await beacons.current.submit_text("back")  # type: ignore[union-attr]
    await stream.until(again.encode())
    await second.until(again.encode())
    served.console.close()
    await within(stream.closed)
    await within(second.closed)
    assert served.console.events.state == "idle"


class FakeFeed:
    """A follow feed the test pushes events into."""

    def __init__(self) -> None:
        self.queue: DeferredQueue[Any] = DeferredQueue()
        self.cancelled = False

    def __aiter__(self) -> FakeFeed:
        return self

    async def __anext__(self) -> Any:
        event = await self.queue.get()
        if event is None:
            raise StopAsyncIteration
        return event

    def cancel(self) -> None:
        self.cancelled = True
        self.queue.put(None)


@pytest_twisted.ensureDeferred
async def test_feed_shared_and_closed_with_the_last_stream(
    beacon: InProcessBeacon, serve: Callable[..., Served]
) -> None:
    """
    One feed for every stream, opened by the first, closed when the last
    leaves; at most max_streams streams.
    """
    feeds: list[FakeFeed] = []

    def follow() -> Deferred[Any]:
        feeds.append(FakeFeed())
        return succeed(feeds[-1])

    served = serve()
    served.console.events = EventRelay(follow, Clock(), "fake")
    await served.sign_in()
    streams = [await connect(served.number, served.stream_request()) for _ in range(3)]
    for stream in streams:
        await stream.until(b"event: ready")
    assert len(feeds) == 1
    feeds[0].queue.put({"task": {"id": "t1"}})
    for stream in streams:
        await stream.until(b'data: {"task":{"id":"t1"}}\n\n')
    for stream in streams:
        assert stream.transport is not None
        stream.transport.loseConnection()
        await within(stream.closed)
    await eventually(lambda: not served.console.events.streams)
    assert feeds[0].cancelled and served.console.events.state == "idle"
    fresh = await connect(served.number, served.stream_request())
    await fresh.until(b"event: ready")
    assert len(feeds) == 2
    # At most max_streams at once: one more is 503.
    served.console.max_streams = 2
    other = await connect(served.number, served.stream_request())
    await other.until(b"event: ready")
    refused = await served.get("/api/events")
    assert refused.status == 503, refused
    assert refused.json()["error"]["message"] == "too many event streams open (at most 2)"
    assert_secure(refused)


@pytest_twisted.ensureDeferred
async def test_slow_reader_cut_off(
    beacon: InProcessBeacon, serve: Callable[..., Served], logged_events: Any
) -> None:
    """A stream whose reader stops reading is cut off once its queue passes the bound."""
    feed = FakeFeed()
    served = serve()
    served.console.events = EventRelay(lambda: succeed(feed), Clock(), "fake")
    await served.sign_in()
    reader = await connect(served.number, served.stream_request())
    await reader.until(b"event: ready")
    sleeper = await connect(served.number, served.stream_request(), read=False)
    relay = served.console.events
    await eventually(lambda: len(relay.streams) == 2)
    [slow] = [s for s in relay.streams if s.request.transport.getPeer().port == sleeper.transport.getHost().port]  # type: ignore[union-attr]
    event = {"task": {"id": "big", "note": "x" * 65536}}
    sent = 0
    # A bound on the test's own work: the kernel's socket buffers and the
    # queue hold far less than this.
    while not slow.cut and sent < 2000:
        feed.queue.put(event)
        sent += 1
        await within(deferLater(reactor, 0, lambda: None))
    assert slow.cut, sent
    assert slow not in relay.streams or slow.closed
    [logged] = logged_events.named("console.slow_stream")
    assert logged["pending"] > MAX_PENDING_BYTES
    # The reader that reads got every event.
    await reader.until(b'"id":"big"', sent)
    assert relay.state == "ready"


# The command.


def test_listen_must_be_loopback() -> None:
    """--listen: only tcp/tcp6 on a loopback interface."""
    assert _web.loopback_interface("tcp:0:interface=127.0.0.1") == "127.0.0.1"
    assert _web.loopback_interface("tcp6:port=0:interface=\\:\\:1") == "::1"
    assert _web.loopback_interface("tcp:8000:interface=127.0.0.5") == "127.0.0.5"
    for refused in ("tcp:0", "tcp:0:interface=0.0.0.0", "tcp6:0", "tcp:0:interface=192.168.1.4",
                    "unix:/tmp/x.sock", "ssl:0:interface=127.0.0.1", "tcp:0:interface=localhost"):
        with pytest.raises(_web.WebError):
            _web.loopback_interface(refused)


def test_web_refuses_non_loopback(tmp_path: Path) -> None:
    """beacon review web --listen on every interface: one line, exit 1, nothing listens."""
    result = subprocess.run(
        [str(BEACON_SCRIPT), "review", "web", "--no-browser", "--socket", str(tmp_path / "s.sock"),
         "--listen", "tcp:0:interface=0.0.0.0"],
        capture_output=True, text=True, timeout=WAIT, cwd=tmp_path,
    )
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert result.stderr == (
        "beacon: --listen tcp:0:interface=0.0.0.0: refusing to listen on 0.0.0.0, which is not"
        " a loopback address (use interface=127.0.0.1 or interface=\\:\\:1)\n"
    )


def _first_line(process: subprocess.Popen[str], deadline: float) -> str:
    assert process.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], deadline - time.monotonic())
        if ready:
            return process.stdout.readline()
    raise AssertionError("beacon review web printed nothing")


def test_web_command(launcher: BeaconLauncher, tmp_path: Path) -> None:
    """
    Against twistd: prints the link, serves the page through it, logs on
    stderr, a port in use is one error line, and SIGINT stops it (exit 0,
    "stopped").
    """
    process = launcher.start()
    command = [str(BEACON_SCRIPT), "review", "web", "--no-browser", "--data", str(launcher.data)]
    web = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        line = _first_line(web, time.monotonic() + WAIT)
        prefix = "beacon review web: open http://127.0.0.1:"
        assert line.startswith(prefix) and "/?token=" in line, line
        port = int(line[len(prefix) :].split("/")[0])
        token = line.strip().split("?token=")[1]
        assert len(token) >= 43
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        connection.request("GET", f"/?token={token}")
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 303
        session = answer.getheader("Set-Cookie").split(";")[0]
        task_id = post_text(process.port, "hello console")
        connection.request("GET", "/api/tasks", headers={"Cookie": session})
        listed = connection.getresponse()
        assert listed.status == 200
        assert json.loads(listed.read())["tasks"][0]["id"] == task_id
        connection.request("GET", "/", headers={"Cookie": session})
        page = connection.getresponse()
        page.read()
        assert page.status == 200 and page.getheader("Content-Type") == "text/html; charset=utf-8"
        connection.close()

        taken = subprocess.run(
            [*command, "--listen", f"tcp:{port}:interface=127.0.0.1"],
            capture_output=True, text=True, timeout=WAIT, cwd=tmp_path,
        )
        assert taken.returncode == 1
        assert taken.stderr == (
            f"beacon: cannot listen on tcp:{port}:interface=127.0.0.1: address already in use\n"
        )
        web.send_signal(signal.SIGINT)
        out, err = web.communicate(timeout=WAIT)
    finally:
        if web.poll() is None:
            web.kill()
            web.wait(WAIT)
    assert web.returncode == 0, err
    assert out == "beacon review web: stopped\n"
    # The console's log, on stderr: never the token.
    assert err.splitlines() == [
        f"beacon review web: console.started: the web console listens at http://127.0.0.1:{port}/"
        f" (Beacon at {launcher.data / 'operator.sock'})",
        "beacon review web: console.login: a sign-in link made a session",
    ]
