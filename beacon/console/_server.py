"""
The console's web server: its guards, its sign-in, its routes, and the
relay of each API call to Beacon's operator door.

Every request crosses the guards first, in this order:

  1. C{Host} must name the address and port the console listens on (or
     C{localhost} and that port): a page of another origin that rebinds a
     name to 127.0.0.1 gets 403.
  2. A request that is not C{GET} or C{HEAD} must be a C{POST} carrying
     C{Origin: http://<its Host>}: another page's form or fetch gets 403.
  3. C{GET /?token=T} with an unspent token makes a session (303 to C{/}
     with its cookie), and every other request needs a session's cookie
     (401 otherwise): the page's own CSP reports too (a browser sends them
     with the page's Origin and cookie), so no other page can write the
     console's log.

Every answer, whatever it is, carries L{SECURITY_HEADERS}. A refusal is
logged (C{console.refused}) the first time of its reason, then at most
once a minute, counting those since: a page that floods the port cannot
drown the console's events.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import secrets
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import Resource

from beacon.capped import CappedRequest
from beacon.client import (
    ClientError,
    FilterError,
    HTTPStatusError,
    InvalidResponse,
    LookupFailed,
    OperatorClient,
    RPCError,
    Timeout,
    TransportError,
    every_task,
    resolve,
)
from beacon.console._events import EventRelay, EventStream
from beacon.protocol import (
    DOORS,
    STATE_COMPLETED,
    STATE_REJECTED,
    STATE_SUBMITTED,
    JSONParseError,
    loads,
)
from beacon.protocol.query import TaskQuery, read_text
from beacon.text import inert_text
from beacon.throttle import LogThrottle

log = Logger()

#: The session cookie's name.
COOKIE = b"beacon-console"
#: The largest request body read (a bulk decision of 100,000 ids fits).
MAX_BODY = 8 * 1024 * 1024
#: The largest CSP report read.
MAX_CSP_REPORT = 64 * 1024
#: The most ids one bulk decision (or one /api/matching answer) holds.
MAX_IDS = 100_000
#: How many ids one C{beacon.review.DecideMany} call carries.
BULK_CHUNK = 1000
#: The largest page of C{/api/tasks}.
MAX_PAGE_SIZE = 100
#: How many event streams may be open at once (a page holds one).
MAX_STREAMS = 32
#: How much of a refused request's path a log line keeps.
LOGGED_PATH = 200

CSP = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self';"
    b" img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self';"
    b" report-uri /csp-report"
)
#: The states a submission is in: undecided, accepted, rejected.
STATES = (STATE_SUBMITTED, STATE_COMPLETED, STATE_REJECTED)
#: What the page's filters offer (C{GET /api/choices}): Beacon's own lists,
#: so that the page holds no copy of its own.
CHOICES = {"doors": list(DOORS), "states": list(STATES)}

#: The headers on every answer.
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"Content-Security-Policy", CSP),
    (b"X-Content-Type-Options", b"nosniff"),
    (b"Referrer-Policy", b"no-referrer"),
    (b"X-Frame-Options", b"DENY"),
    (b"Cache-Control", b"no-store"),
)

#: The static files' types, by their name's ending.
STATIC_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
    ".png": b"image/png",
}
STATIC = Path(__file__).parent / "static"
_STATIC_NAME = re.compile(r"\A[A-Za-z0-9_-][A-Za-z0-9_.-]*\Z")

SIGN_IN_TEXT = (
    "This link has been used or is not valid. Run <code>beacon review web</code> for a new one."
)
SIGN_IN_PAGE = (
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>Beacon inbox</title>\n</head>\n<body>\n<h1>Beacon inbox</h1>\n"
    f"<p>{SIGN_IN_TEXT}</p>\n</body>\n</html>\n"
).encode("utf-8")

JSON_TYPE = b"application/json"


def _security_headers(request: server.Request) -> None:
    for name, value in SECURITY_HEADERS:
        request.responseHeaders.setRawHeaders(name, [value])


class ConsoleRequest(CappedRequest):
    """
    A request that never buffers more than L{MAX_BODY} bytes of body: over
    it, 413 at once (when the declared length is over, before reading the
    body) and the connection is closed.
    """

    def body_limit(self) -> int:
        """L{MAX_BODY}."""
        return MAX_BODY

    def refuse_too_large(self) -> None:
        """413 with the console's headers, then close."""
        body = _error_body(f"the request body exceeds {MAX_BODY} bytes", None)
        headers = b"".join(name + b": " + value + b"\r\n" for name, value in SECURITY_HEADERS)
        transport = self.channel.transport if self.channel is not None else None
        if transport is None:
            return
        transport.write(
            b"HTTP/1.1 413 Content Too Large\r\n"
            + headers
            + b"Content-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode("ascii") + b"\r\n"
            b"Connection: close\r\n\r\n" + body
        )
        self.channel.loseConnection()


class ConsoleSite(server.Site):
    """The console's site: its requests bounded, no access log."""

    requestFactory = ConsoleRequest
    displayTracebacks = False
    noisy = False

    def log(self, request: Any) -> None:
        """No access log: the console's requests are the reader's own."""


def _error_body(message: str, code: int | None) -> bytes:
    return json.dumps({"error": {"message": message, "code": code}}, ensure_ascii=True).encode(
        "ascii"
    )


class Problem(Exception):
    """An API request answered with an error: its status, message, code."""

    def __init__(self, status: int, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def problem_of(error: ClientError, address: str) -> Problem:
    """The answer to give for what Beacon (or reaching it) did."""
    if isinstance(error, TransportError):
        return Problem(
            503,
            f"cannot reach Beacon at {inert_text(error.address)}: {inert_text(error.reason)}",
        )
    if isinstance(error, Timeout):
        return Problem(
            503,
            f"cannot reach Beacon at {inert_text(error.address)}:"
            f" no answer within {error.seconds:g} s",
        )
    if isinstance(error, RPCError):
        message = inert_text(error.message)
        data = error.data if isinstance(getattr(error, "data", None), (dict, list)) else None
        if error.code == -32001:
            return Problem(404, message, error.code)
        if error.code == -32004:
            return Problem(409, message, error.code)
        if error.code in (-32602, -32600):
            details = _violations(data)
            return Problem(400, f"{message}: {details}" if details else message, error.code)
        return Problem(502, f"Beacon refused the request: {message}", error.code)
    if isinstance(error, (HTTPStatusError, InvalidResponse)):
        return Problem(502, f"unexpected answer from Beacon at {inert_text(address)}: "
                       f"{inert_text(str(error))}")
    return Problem(502, inert_text(str(error)))


def _violations(data: Any) -> str:
    """The field violations of an A2A error's details, as one line."""
    found: list[str] = []
    details = data if isinstance(data, list) else [data]
    for detail in details:
        if not isinstance(detail, dict):
            continue
        for violation in detail.get("fieldViolations") or ():
            if isinstance(violation, dict):
                found.append(
                    f"{inert_text(str(violation.get('field', '')))}"
                    f" {inert_text(str(violation.get('description', '')))}"
                )
    return "; ".join(found)


def _query_of(args: dict[str, str]) -> TaskQuery:
    """
    The L{TaskQuery} of a query string: each of its keys named as the
    operator API names its param (L{QueryKey.param
    <beacon.protocol.query.QueryKey.param>}: C{status}, C{door}, C{since},
    C{until}, C{search}, C{idPrefix}, C{sort}), or by an older name of the
    console's (C{state}, C{id}), its value read as the command line reads
    the option's.

    @raise Problem: A value that cannot be used (400).
    """
    try:
        return read_text(args, lambda key: key.param, old=True)
    except FilterError as e:
        raise Problem(400, str(e)) from None


class Console:
    """
    The web console: its one-time tokens and sessions, its resource tree
    (L{resource}, served by a L{ConsoleSite}), its event relay.

    Call L{listening} with the port's address once it listens: until then
    no C{Host} is right.

    @ivar csp_reports: How many CSP violation reports arrived.
    @ivar max_streams: How many event streams may be open at once.
    """

    def __init__(
        self,
        client: OperatorClient,
        clock: IReactorTime,
        *,
        static: Path = STATIC,
    ) -> None:
        """
        @param client: Relays the API calls (and follows the inbox).
        @param clock: Times the event relay's retries and keep-alives.
        @param static: Where the page's files are.
        """
        self.client = client
        self.clock = clock
        self.static = static
        self.csp_reports = 0
        self.max_streams = MAX_STREAMS
        self.hosts: frozenset[bytes] = frozenset()
        self.base_url = ""
        self._tokens: set[str] = set()
        self._spent: set[str] = set()
        self._sessions: set[str] = set()
        self.events = EventRelay(client.follow, clock, client.address)
        #: How often a refusal of each reason is logged.
        self.refusals = LogThrottle(clock, _refusals_summary)
        self.resource = _Root(self)

    def listening(self, address: IAddress) -> str:
        """
        The console listens at C{address} (a TCP address): accept the
        C{Host} names of it; log C{console.started}.

        @return: Its base URL (C{http://127.0.0.1:PORT/}).
        """
        host = str(getattr(address, "host", ""))
        port = int(getattr(address, "port", 0))
        named = f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
        self.hosts = frozenset({f"{named}:{port}".encode(), f"localhost:{port}".encode()})
        self.base_url = f"http://{named}:{port}/"
        log.info(
            "console.started: the web console listens at {url} (Beacon at {beacon})",
            url=self.base_url,
            beacon=self.client.address,
        )
        return self.base_url

    def new_token(self) -> str:
        """A fresh one-time token (256 random bits) for a sign-in URL."""
        token = secrets.token_urlsafe(32)
        self._tokens.add(token)
        return token

    def sign_in_url(self) -> str:
        """A URL with a fresh token (after L{listening})."""
        return f"{self.base_url}?token={self.new_token()}"

    def close(self) -> None:
        """End the event streams and the feed (the console is stopping)."""
        self.events.close()
        self.refusals.stop()

    # Sessions.

    def spend(self, token: str) -> str | None:
        """
        Exchange an unspent C{token} for a new session id; L{None} (and
        C{token} is no good any more, if it was) otherwise.
        """
        found = None
        for candidate in self._tokens:
            if hmac.compare_digest(candidate.encode(), token.encode()):
                found = candidate
        if found is None:
            return None
        self._tokens.discard(found)
        self._spent.add(found)
        session = secrets.token_urlsafe(32)
        self._sessions.add(session)
        log.info("console.login: a sign-in link made a session")
        return session

    def was_spent(self, token: str) -> bool:
        """Whether C{token} is one that was spent."""
        return any(hmac.compare_digest(t.encode(), token.encode()) for t in self._spent)

    def has_session(self, cookie: bytes | None) -> bool:
        """Whether C{cookie} is a session's id."""
        if not cookie:
            return False
        found = False
        for session in self._sessions:
            if hmac.compare_digest(session.encode(), cookie):
                found = True
        return found


def _refusals_summary(reason: str, held: Any) -> None:
    log.info(
        "console.refused: refused {count} more requests ({reason}) since the last line",
        count=sum(held.values()),
        reason=reason,
    )


def _query(request: server.Request) -> dict[str, str]:
    """The query's parameters (the first of each), as text."""
    args: dict[str, str] = {}
    for name, values in (request.args or {}).items():
        try:
            key = name.decode("utf-8")
            if key not in args and values:
                args[key] = values[0].decode("utf-8")
        except UnicodeDecodeError:
            raise Problem(400, "the query is not UTF-8") from None
    return args


def _refuse(request: server.Request, status: int, body: bytes, content_type: bytes) -> bytes:
    request.setResponseCode(status)
    request.responseHeaders.setRawHeaders(b"Content-Type", [content_type])
    return body


def _logged_path(request: server.Request) -> str:
    path = request.path.decode("latin-1")
    return inert_text(path[:LOGGED_PATH])


class _Root(Resource):
    """
    The console's whole tree: one leaf that checks the guards, then routes
    (so that nothing is answered without them).
    """

    isLeaf = True

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def render(self, request: server.Request) -> Any:  # type: ignore[override]
        """Cross the guards, then answer the route."""
        _security_headers(request)
        refused = self._guard(request)
        if refused is not None:
            return refused
        try:
            return self._route(request)
        except Problem as p:
            return _json_error(request, p)

    # The guards.

    def _refused(self, request: server.Request, reason: str) -> None:
        """Log a refusal: the first of its reason at once, then a count a minute."""
        self.console.refusals.note(
            reason,
            "",
            lambda: log.info(
                "console.refused: refused {method} {path}: {reason}",
                method=inert_text(request.method.decode("latin-1")),
                path=_logged_path(request),
                reason=reason,
            ),
        )

    def _guard(self, request: server.Request) -> bytes | None:
        hosts = request.requestHeaders.getRawHeaders(b"host") or []
        if len(hosts) != 1 or hosts[0].lower() not in self.console.hosts:
            self._refused(request, "wrong_host")
            return _refuse(request, 403, b"wrong Host\n", b"text/plain; charset=utf-8")
        host = hosts[0].lower()
        if request.method not in (b"GET", b"HEAD"):
            origins = request.requestHeaders.getRawHeaders(b"origin") or []
            if request.method != b"POST":
                self._refused(request, "bad_method")
                request.responseHeaders.setRawHeaders(b"Allow", [b"GET, HEAD, POST"])
                return _refuse(
                    request, 403, b"only GET, HEAD and POST\n", b"text/plain; charset=utf-8"
                )
            if origins != [b"http://" + host]:
                self._refused(request, "bad_origin")
                return _refuse(
                    request, 403, b"cross-origin request refused\n", b"text/plain; charset=utf-8"
                )
        if request.path == b"/" and b"token" in (request.args or {}):
            return self._sign_in(request)
        if not self.console.has_session(request.getCookie(COOKIE)):
            self._refused(request, "no_session")
            return _refuse(request, 401, SIGN_IN_PAGE, b"text/html; charset=utf-8")
        return None

    def _sign_in(self, request: server.Request) -> bytes:
        values = (request.args or {}).get(b"token") or [b""]
        token = values[0].decode("ascii", "replace")
        session = self.console.spend(token) if request.method == b"GET" else None
        if session is None:
            reason = "spent_token" if self.console.was_spent(token) else "bad_token"
            self._refused(request, reason)
            return _refuse(request, 401, SIGN_IN_PAGE, b"text/html; charset=utf-8")
        request.setResponseCode(303)
        request.responseHeaders.setRawHeaders(b"Location", [b"/"])
        request.responseHeaders.addRawHeader(
            b"Set-Cookie",
            COOKIE + b"=" + session.encode("ascii") + b"; HttpOnly; SameSite=Strict; Path=/",
        )
        return b""

    # The routes.

    def _route(self, request: server.Request) -> Any:
        path = request.path
        method = b"GET" if request.method == b"HEAD" else request.method
        if path == b"/csp-report":
            self._only(method, b"POST")
            return self._csp_report(request)
        if path == b"/":
            self._only(method, b"GET")
            return self._static(request, "index.html")
        if path.startswith(b"/static/"):
            self._only(method, b"GET")
            return self._static(request, unquote(path[len(b"/static/") :].decode("latin-1")))
        if path == b"/api/events":
            self._only(method, b"GET")
            return self._events(request)
        if path == b"/api/choices":
            self._only(method, b"GET")
            request.responseHeaders.setRawHeaders(b"Content-Type", [JSON_TYPE])
            return _json(CHOICES)
        if path == b"/api/tasks":
            self._only(method, b"GET")
            return self._async(request, lambda gone: self._list(_query(request)))
        if path == b"/api/matching":
            self._only(method, b"GET")
            return self._async(request, lambda gone: self._matching(gone, _query(request)))
        if path == b"/api/decide-many":
            self._only(method, b"POST")
            body = _json_body(request)
            return self._async(request, lambda gone: self._decide_many(body))
        if path.startswith(b"/api/tasks/"):
            parts = path[len(b"/api/tasks/") :].split(b"/")
            task = unquote(parts[0].decode("latin-1"))
            if len(parts) == 1 and task:
                self._only(method, b"GET")
                return self._async(request, lambda gone: self._task(task))
            if len(parts) == 2 and parts[1] == b"decide" and task:
                self._only(method, b"POST")
                body = _json_body(request)
                return self._async(request, lambda gone: self._decide(task, body))
        raise Problem(404, "no such page")

    @staticmethod
    def _only(method: bytes, allowed: bytes) -> None:
        if method != allowed:
            raise _MethodNotAllowed(allowed)

    def _static(self, request: server.Request, name: str) -> bytes:
        suffix = Path(name).suffix.lower()
        if not _STATIC_NAME.match(name) or suffix not in STATIC_TYPES:
            raise Problem(404, "no such file")
        try:
            content = (self.console.static / name).read_bytes()
        except OSError:
            raise Problem(404, "no such file") from None
        request.responseHeaders.setRawHeaders(b"Content-Type", [STATIC_TYPES[suffix]])
        return content

    def _csp_report(self, request: server.Request) -> bytes:
        assert request.content is not None
        body = request.content.read(MAX_CSP_REPORT + 1)
        if len(body) > MAX_CSP_REPORT:
            raise Problem(413, f"a CSP report is at most {MAX_CSP_REPORT} bytes")
        try:
            report = loads(body)
        except JSONParseError:
            raise Problem(400, "a CSP report is JSON") from None
        self.console.csp_reports += 1
        if isinstance(report, list) and report and isinstance(report[0], dict):
            report = report[0].get("body", report[0])
        details = report.get("csp-report", report) if isinstance(report, dict) else {}
        if not isinstance(details, dict):
            details = {}

        def field(*names: str) -> str:
            for name in names:
                value = details.get(name)
                if isinstance(value, str):
                    return inert_text(value[:LOGGED_PATH])
            return ""

        log.warn(
            "console.csp_violation: the page broke its Content-Security-Policy:"
            " {directive} blocked {blocked}",
            directive=field("violated-directive", "effectiveDirective", "effective-directive"),
            blocked=field("blocked-uri", "blockedURL"),
        )
        request.setResponseCode(204)
        return b""

    def _events(self, request: server.Request) -> Any:
        request.responseHeaders.setRawHeaders(b"Content-Type", [b"text/event-stream"])
        request.responseHeaders.setRawHeaders(b"X-Accel-Buffering", [b"no"])
        if request.method == b"HEAD":
            return b""
        relay = self.console.events
        if len(relay.streams) >= self.console.max_streams:
            raise Problem(503, f"too many event streams open (at most {self.console.max_streams})")
        request.setResponseCode(200)
        # The headers now: the page learns the stream is open.
        request.write(b": beacon\n\n")
        stream = EventStream(request)
        relay.subscribe(stream)

        def gone(result: Any) -> None:
            relay.unsubscribe(stream)

        request.notifyFinish().addBoth(gone)
        return server.NOT_DONE_YET

    # The relay.

    def _async(
        self,
        request: server.Request,
        answer: Callable[[list[bool]], Coroutine[Any, Any, Any]],
    ) -> Any:
        """
        Answer with what C{answer} (given a list that is not empty once
        the client went away) resolves to, as JSON, or with its error.
        """
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda f: gone.append(True))

        def done(result: Any) -> None:
            if gone:
                return
            request.setResponseCode(200)
            request.responseHeaders.setRawHeaders(b"Content-Type", [JSON_TYPE])
            request.write(_json(result))
            request.finish()

        def failed(failure: Failure) -> None:
            if gone:
                return
            error = failure.value
            if isinstance(error, ClientError):
                error = problem_of(error, self.console.client.address)
            elif isinstance(error, LookupFailed):
                error = Problem(409 if error.ambiguous else 404, str(error))
            elif isinstance(error, FilterError):
                error = Problem(400, str(error))
            if not isinstance(error, Problem):
                log.failure("console.internal_error: an API call failed", failure)
                error = Problem(500, "internal error (see the console's log)")
            request.write(_json_error(request, error))
            request.finish()

        Deferred.fromCoroutine(answer(gone)).addCallbacks(done, failed)
        return server.NOT_DONE_YET

    async def _list(self, args: dict[str, str]) -> Any:
        query = _query_of(args)
        size_text = args.get("pageSize") or "50"
        if not size_text.isdigit() or not 1 <= int(size_text) <= MAX_PAGE_SIZE:
            raise Problem(400, f"pageSize is a whole number from 1 to {MAX_PAGE_SIZE}")
        return await self.console.client.review_list(
            query,
            page_size=int(size_text),
            page_token=args.get("pageToken") or None,
            history_length=1,
            include_total=True,
        )

    async def _task(self, text: str) -> Any:
        client = self.console.client
        return await client.get_task(await resolve(client, text))

    async def _decide(self, text: str, body: Any) -> Any:
        decision, note = _decision(body)
        client = self.console.client
        return await client.decide(await resolve(client, text), decision, note)

    async def _matching(self, gone: list[bool], args: dict[str, str]) -> Any:
        query = _query_of(args)
        ids: list[str] = []
        complete = True
        async for task in every_task(self.console.client, query, history=False):
            if gone:
                break
            state = task.get("status", {}).get("state") if isinstance(task.get("status"), dict) else None
            if state == STATE_SUBMITTED and isinstance(task.get("id"), str):
                if len(ids) == MAX_IDS:
                    complete = False
                    break
                ids.append(task["id"])
        return {"ids": ids, "count": len(ids), "complete": complete}

    async def _decide_many(self, body: Any) -> Any:
        decision, note = _decision(body)
        ids = body.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise Problem(400, "ids is a list of task ids")
        if not ids:
            raise Problem(400, "ids holds no id")
        if len(ids) > MAX_IDS:
            raise Problem(400, f"ids holds at most {MAX_IDS:,} ids")
        unique = list(dict.fromkeys(ids))
        merged: dict[str, list[Any]] = {
            "decided": [], "alreadyDecided": [], "notFound": [], "failed": []
        }
        client = self.console.client
        for start in range(0, len(unique), BULK_CHUNK):
            answer = await client.decide_many(unique[start : start + BULK_CHUNK], decision, note)
            for key, values in merged.items():
                values.extend(answer[key])
        return merged


class _MethodNotAllowed(Problem):
    def __init__(self, allowed: bytes) -> None:
        super().__init__(405, f"use {allowed.decode()}")
        self.allowed = allowed


def _decision(body: Any) -> tuple[str, str | None]:
    if not isinstance(body, dict):
        raise Problem(400, "the body is a JSON object")
    decision = body.get("decision")
    if decision not in ("accept", "reject"):
        raise Problem(400, 'decision is "accept" or "reject"')
    note = body.get("note")
    if note is not None and not isinstance(note, str):
        raise Problem(400, "note is text")
    return decision, note or None


def _json_body(request: server.Request) -> Any:
    """
    The request's JSON body.

    @raise Problem: It is not C{application/json} (415) or not JSON (400).
    """
    content_type = request.getHeader(b"content-type") or b""
    if content_type.split(b";")[0].strip().lower() != JSON_TYPE:
        raise Problem(415, "the body must be application/json")
    assert request.content is not None
    try:
        return loads(request.content.read())
    except JSONParseError:
        raise Problem(400, "the body is not valid JSON") from None


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _json_error(request: server.Request, problem: Problem) -> bytes:
    request.setResponseCode(problem.status)
    request.responseHeaders.setRawHeaders(b"Content-Type", [JSON_TYPE])
    if isinstance(problem, _MethodNotAllowed):
        request.responseHeaders.setRawHeaders(b"Allow", [problem.allowed])
    return _error_body(problem.message, problem.code)
