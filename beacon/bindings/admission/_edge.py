"""
The transport edge: what every HTTP-speaking binding (the direct channel,
twisted.web's channel, the WebSocket upgrade, the operator doors) says
before a request reaches a policy, said once.

    - the limits of a request head (L{MAX_HEAD}, L{MAX_HEADERS}) and the
      RFC rules Beacon reads it by (L{connection_tokens},
      L{framing_problem}, L{is_json_media_type});
    - reason phrases (L{reason_phrase}, RFC 9110's);
    - the one JSON shape of a refusal (L{error_body}), encoded once
      (L{refusal_body}) and written on a request (L{refuse}) or straight
      on a connection whose request is still arriving
      (L{refuse_connection}, L{refuse_slow}, L{log_slow},
      L{ConnectionRefusal}); a door may spell its refusals its own way
      (L{RefusalShape}: the HTTP+JSON binding's are google.rpc.Status,
      the JSON-RPC endpoint's 415 a JSON-RPC error response),
      found for a path before any resource is reached by
      L{refusal_shape};
    - the resources that answer only refusals: L{Container} and
      L{NotFound} (404); the HTTP wing's leaves answer 405 themselves
      (C{MethodsResource}).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Mapping, Protocol as TypingProtocol, Sequence

from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.web import server
from twisted.web.http import RESPONSES
from twisted.web.resource import Resource
from zope.interface import Interface

from beacon.protocol import dumps

log = Logger()

#: The longest request head the direct channel reads itself, in bytes;
#: a longer one is handed to twisted.web (which refuses over 16 KiB).
MAX_HEAD = 16384
#: The most header lines the direct channel reads itself.
MAX_HEADERS = 100
#: Reason phrases: RFC 9110's where twisted.web has none or an older one.
REASONS: dict[int, bytes] = {
    **RESPONSES,
    408: b"Request Timeout",
    413: b"Content Too Large",
    426: b"Upgrade Required",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
}


def reason_phrase(code: int) -> bytes:
    """The reason phrase of status C{code} (RFC 9110 15)."""
    return REASONS.get(code, b"Unknown Status")


def connection_tokens(values: Sequence[bytes] | None) -> list[bytes]:
    """
    The options of a request's C{Connection} field lines, lower-cased: a
    list whose lines combine, comma-separated (RFC 9110 5.3, 7.6.1), so
    that C{close} on any line or in any place means close.
    """
    if not values:
        return []
    return [
        token.strip(b" \t").lower() for value in values for token in value.split(b",")
    ]


def error_body(code: str, message: str) -> bytes:
    """
    The one JSON shape of a transport-level refusal (the native vocabulary
    of docs/explanation/protocol-0.1.rst): C{{"error": {"code": ..., "message": ...}}}.
    """
    return dumps({"error": {"code": code, "message": message}})


class RefusalShape(TypingProtocol):
    """
    How a door spells the body of a transport refusal: its HTTP status,
    its code in the native vocabulary (C{too_large}, C{rate_limited}...),
    a message, and the headers it goes with (C{Retry-After}...).
    """

    def __call__(
        self, status: int, code: str, message: str, headers: Mapping[bytes, bytes]
    ) -> bytes: ...


def native_refusal(
    status: int, code: str, message: str, headers: Mapping[bytes, bytes]
) -> bytes:
    """
    The transport's own shape, L{error_body}'s: every door's but
    HTTP+JSON's, and the JSON-RPC endpoint's but for its 415.
    """
    return error_body(code, message)


def refusal_shape(root: Any, path: bytes) -> RefusalShape:
    """
    The shape of a refusal of a request for C{path} (its query aside) under
    C{root}, for a refusal made before the request reaches a resource (a
    body over the cap): the C{refusal_shape} of the first resource on the
    way there through static C{children} that has one, else the native
    shape.
    """
    found = root
    for segment in path.split(b"?", 1)[0][1:].split(b"/"):
        shape: RefusalShape | None = getattr(found, "refusal_shape", None)
        if shape is not None:
            return shape
        children = getattr(found, "children", None)
        found = children.get(segment) if children else None
        if found is None:
            return native_refusal
    return getattr(found, "refusal_shape", None) or native_refusal


def refuse_slow(channel: Any, what: str, seconds: float) -> None:
    """
    Answer 408 on C{channel} and close it: C{what} (the C{"request
    line"}, the C{"headers"} or the C{"body"}) took longer than
    C{seconds}.
    """
    log_slow(channel, what, seconds)
    subject = "the request line" if what == "request line" else f"the request's {what}"
    refuse_connection(
        channel,
        b"408 Request Timeout",
        error_body("request_timeout", f"{subject} took longer than {seconds} s"),
    )


def log_slow(channel: Any, what: str, seconds: float) -> None:
    """
    Log C{http.request_timeout}: the C{what} on C{channel} took longer than
    C{seconds} (L{refuse_slow} answers too; a channel that has answered
    already only closes).
    """
    transport = channel.transport
    peer = transport.getPeer() if transport is not None else None
    log.warn(
        "http.request_timeout: the {what} from {source} took longer than {seconds} s",
        what=what,
        source=str(getattr(peer, "host", "unknown")),
        seconds=seconds,
    )


def refuse_connection(channel: Any, status: bytes, body: bytes) -> None:
    """
    Answer C{status} with a JSON C{body} straight on the transport, while
    the request is still arriving, and close the connection.
    """
    assert channel.transport is not None
    channel.transport.write(
        b"HTTP/1.1 " + status + b"\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode("ascii") + b"\r\n"
        b"Connection: close\r\n\r\n" + body
    )
    channel.loseConnection()


JSON_TYPE = b"application/json"

#: A whole answer given without rendering: the status code, the headers
#: (canonical names, in order) and the body.
HeadAnswer = tuple[int, tuple[tuple[bytes, bytes], ...], bytes]
#: The ErrorInfo domain of every reason Beacon itself defines (its
#: bindings' refusals: TOO_LARGE, RATE_LIMITED...).
BEACON_DOMAIN = "beacon.unownedminds.com"
#: The request headers a browser may send cross-origin to an RPC endpoint
#: (for the origins of C{[server] cors_origins}).
CORS_REQUEST_HEADERS = b"Content-Type, A2A-Version, A2A-Extensions, Authorization, X-API-Key"
#: The response headers such a browser may read.
CORS_EXPOSED_HEADERS = b"A2A-Extensions, Retry-After, WWW-Authenticate"
#: Seconds a browser may cache a preflight's answer.
CORS_MAX_AGE = b"600"


# Read once per value: a client sends the same Content-Type again and again
# (a look-up saves ~4,300 instructions a request, bench/inprocess.py send).
@lru_cache(maxsize=64)
def is_json_media_type(
    content_type: bytes | None, types: tuple[bytes, ...] = (JSON_TYPE,)
) -> bool:
    """
    Whether a request's C{Content-Type} is one of C{types}
    (C{application/json} by default): the media type compared
    case-insensitively, parameters allowed, a C{charset} only when it is
    UTF-8.
    """
    if content_type is None:
        return False
    media, _, params = content_type.partition(b";")
    if media.strip(b" \t").lower() not in types:
        return False
    for param in params.split(b";"):
        name, _, value = param.partition(b"=")
        if name.strip(b" \t").lower() == b"charset" and value.strip(b" \t").strip(b'"').lower() != b"utf-8":
            return False
    return True


def framing_problem(headers: Any, version: bytes) -> str | None:
    """
    What is wrong with a request's framing headers (RFC 9112 3.2, 6.1), or
    None: an HTTP/1.1 request has exactly one C{Host}, any request at most
    one; a C{Transfer-Encoding} is C{chunked} alone (the one coding Beacon
    decodes, and the final one a request must have).

    @param headers: The request's L{Headers} (or anything with
        C{getRawHeaders}).
    @param version: The request line's version (C{b"HTTP/1.1"}).
    """
    hosts = headers.getRawHeaders(b"Host")
    if hosts is None:
        if version == b"HTTP/1.1":
            return "an HTTP/1.1 request must carry one Host header"
    elif len(hosts) > 1:
        return "a request must carry one Host header, not several"
    codings = headers.getRawHeaders(b"Transfer-Encoding")
    if codings is not None and connection_tokens(codings) != [b"chunked"]:
        return "Transfer-Encoding must be chunked, once and alone"
    return None


class IPreflight(Interface):
    """Answers CORS preflights for a resource."""

    def preflight(request: server.Request, allowed: tuple[bytes, ...]) -> bool:
        """
        Answer C{request}, a preflight, when its origin may use one of the
        C{allowed} methods; return whether it was answered.
        """


class ConnectionRefusal(Protocol):
    """Answers 503 too_many_connections at once and closes."""

    def connectionMade(self) -> None:
        body = error_body("too_many_connections", "too many open connections; retry later")
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\n"
            b"Content-Type: application/json\r\n"
            b"Retry-After: 1\r\n"
            b"Content-Length: " + str(len(body)).encode("ascii") + b"\r\n"
            b"Connection: close\r\n\r\n" + body
        )
        self.transport.loseConnection()


def refuse(
    request: server.Request,
    status: int,
    code: str,
    message: str,
    headers: dict[bytes, bytes] | None = None,
    shape: RefusalShape = native_refusal,
) -> bytes:
    """
    Answer C{request} with a refusal: its status, C{headers} and a JSON
    body in C{shape}; return the body.
    """
    request.setResponseCode(status, reason_phrase(status))
    request.setHeader(b"Content-Type", JSON_TYPE)
    if headers:
        for name, value in headers.items():
            request.setHeader(name, value)
    return refusal_body(shape, status, code, message, headers)


def refusal_body(
    shape: RefusalShape,
    status: int,
    code: str,
    message: str,
    headers: Mapping[bytes, bytes] | None = None,
) -> bytes:
    """
    The JSON body of a refusal in C{shape} (see L{refuse}), made once and
    kept (at most L{MAX_REFUSAL_BODIES} of them).
    """
    if headers:
        key: tuple[Any, ...] = (shape, status, code, message, *headers.items())
    else:
        key = (shape, status, code, message)
    body = _refusal_bodies.get(key)
    if body is None:
        if len(_refusal_bodies) >= MAX_REFUSAL_BODIES:
            _refusal_bodies.clear()
        body = _refusal_bodies[key] = shape(status, code, message, headers or {})
    return body


#: How many refusal bodies L{refuse} keeps made: a flood of one refusal (a
#: source over its rate, answered 429 with the same few Retry-After values)
#: is answered with bytes made once, not encoded again for each request.
MAX_REFUSAL_BODIES = 256
_refusal_bodies: dict[tuple[Any, ...], bytes] = {}


class Container(Resource):
    """A plain, non-leaf resource that only holds children."""

    def render(self, request: server.Request) -> bytes:
        return refuse(request, 404, "not_found", "no such resource")

    def getChild(self, path: bytes, request: server.Request) -> Resource:
        return NotFound()


class NotFound(Resource):
    isLeaf = True

    def render(self, request: server.Request) -> bytes:
        return refuse(request, 404, "not_found", "no such resource")


def container(parent: Resource, name: bytes) -> Resource:
    child = parent.children.get(name)
    if child is None:
        child = Container()
        parent.putChild(name, child)
    return child


__all__ = [
    "BEACON_DOMAIN",
    "CORS_EXPOSED_HEADERS",
    "CORS_MAX_AGE",
    "CORS_REQUEST_HEADERS",
    "JSON_TYPE",
    "MAX_HEAD",
    "MAX_HEADERS",
    "REASONS",
    "ConnectionRefusal",
    "Container",
    "IPreflight",
    "NotFound",
    "RefusalShape",
    "connection_tokens",
    "container",
    "error_body",
    "field_lines",
    "framing_problem",
    "is_json_media_type",
    "log_slow",
    "native_refusal",
    "reason_phrase",
    "refusal_body",
    "refusal_shape",
    "refuse",
    "refuse_connection",
    "refuse_slow",
]


# The one reading of a request head's field lines (RFC 9112 5), for the
# direct channel (strict) and the WebSocket upgrade's service parameters
# (lenient).

_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_VALUE = rb"[^\x00-\x08\x0a-\x1f\x7f]*"
_FIELD_BLOCK = re.compile(rb"(?:" + _TOKEN + rb":" + _VALUE + rb"\r\n)*")
_FIELD_LINE = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(" + _VALUE + rb"?)[ \t]*\r\n")
_FIELD_NAME = re.compile(_TOKEN)
_LINE_END = re.compile(rb"\r?\n")


def field_lines(block: bytes, *, strict: bool = False) -> list[tuple[bytes, bytes]] | None:
    """
    The C{(name, value)} field lines of a request head, in order, each value
    without the spaces and tabs around it.

    @param block: The head after its request line's line end, up to and
        including the last field line's line end (without the blank line).
    @param strict: Read only a block of plain lines: each a token, a colon
        and a value without control characters (but tabs), ended by CRLF;
        any other block is None (the direct channel hands it to
        twisted.web).
        Otherwise (the WebSocket upgrade) a line may also end with a bare
        LF, an obsolete folded line (one starting with a space or a tab)
        continues the previous value after one space, and a line that is
        not C{name: value} with a token name is left out.
    """
    if _FIELD_BLOCK.fullmatch(block) is not None:
        lines: list[tuple[bytes, bytes]] = _FIELD_LINE.findall(block)
        return lines
    if strict:
        return None
    lines = []
    for line in _LINE_END.split(block):
        if not line:
            continue
        if line[:1] in (b" ", b"\t"):
            if lines:
                name, value = lines[-1]
                lines[-1] = (name, value + b" " + line.strip(b" \t"))
            continue
        name, colon, value = line.partition(b":")
        if colon and _FIELD_NAME.fullmatch(name):
            lines.append((name, value.strip(b" \t")))
    return lines
