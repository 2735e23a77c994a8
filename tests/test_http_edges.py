"""
The edges of HTTP/1.1 that both of Beacon's HTTP paths (the direct channel
and twisted.web behind it) must answer alike and as the RFCs say: list
headers whose field lines combine, framing headers missing or repeated,
header lines counted, reason phrases, 304 without a length, the media type
of RPC bodies and CORS for the origins configured.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

# lose_connections is test_direct's autouse fixture: every connection a test
# opens is lost at its end, as its peer would, for the clock check.
from test_direct import REST_SEND, SEND, Server, comparable, lose_connections  # noqa: F401

BOTH = pytest.mark.parametrize("direct", [True, False], ids=["direct", "twisted.web"])
CARD = b"/.well-known/agent-card.json"


def request(method: bytes, path: bytes, lines: bytes, body: bytes = b"") -> bytes:
    head = method + b" " + path + b" HTTP/1.1\r\n" + lines
    if method == b"POST":
        head += b"Content-Length: %d\r\n" % len(body)
    return head + b"\r\n" + body


def rpc(lines: bytes = b"", body: bytes = SEND, path: bytes = b"/a2a/v1") -> bytes:
    return request(
        b"POST",
        path,
        b"Host: x\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n" + lines,
        body,
    )


def status(raw: bytes) -> tuple[int, bytes]:
    line = raw.split(b"\r\n", 1)[0]
    _, code, phrase = line.split(b" ", 2)
    return int(code), phrase


def headers_of(raw: bytes) -> dict[bytes, list[bytes]]:
    head = raw.split(b"\r\n\r\n", 1)[0]
    found: dict[bytes, list[bytes]] = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        found.setdefault(name.strip().lower(), []).append(value.strip())
    return found


def body_of(raw: bytes) -> bytes:
    """The first answer's body, its chunked framing undone."""
    body = raw.split(b"\r\n\r\n", 1)[1]
    if headers_of(raw).get(b"transfer-encoding") != [b"chunked"]:
        return body
    whole = b""
    while True:
        size, _, body = body.partition(b"\r\n")
        length = int(size, 16)
        if not length:
            return whole
        whole, body = whole + body[:length], body[length + 2 :]


def both(data: bytes, **config: Any) -> tuple[bytes, bool]:
    """The answer and whether the connection closes: the same on both paths."""
    answers = []
    for direct in (True, False):
        raw, _, transport = Server(direct=direct, **config).exchange(data)
        answers.append((comparable(raw), transport.disconnecting))
    assert answers[0] == answers[1]
    return answers[0]


@pytest.mark.parametrize(
    "lines",
    [
        b"Connection: 1.0\r\nConnection: close\r\n",
        b"Connection: keep-alive,close\r\n",
        b"Connection: x\r\nConnection: Close \r\n",
        b"Connection: upgrade, CLOSE, te\r\n",
    ],
)
def test_close_anywhere_in_connection_closes(lines: bytes) -> None:
    """Connection's field lines combine into one list (RFC 9110 7.6.1): close in any place closes, on both paths."""
    raw, closing = both(request(b"GET", CARD, b"Host: x\r\n" + lines))
    assert status(raw)[0] == 200
    assert headers_of(raw)[b"connection"] == [b"close"]
    assert closing


@pytest.mark.parametrize("lines", [b"", b"Connection: keep-alive\r\n", b"Connection: x, y\r\nConnection: z\r\n"])
def test_without_close_the_connection_stays(lines: bytes) -> None:
    """No close option: the connection stays open and the answer says nothing of it."""
    raw, closing = both(request(b"GET", CARD, b"Host: x\r\n" + lines))
    assert status(raw)[0] == 200
    assert b"connection" not in headers_of(raw)
    assert not closing


@pytest.mark.parametrize(
    "lines",
    [
        b"",
        b"Host: x\r\nHost: x\r\n",
        b"Host: x\r\nHost: y\r\n",
    ],
    ids=["no Host", "two equal Hosts", "two Hosts"],
)
@pytest.mark.parametrize("method", [b"GET", b"POST"])
def test_host_missing_or_repeated_is_400(lines: bytes, method: bytes) -> None:
    """An HTTP/1.1 request without exactly one Host is 400 bad_request and the connection closes (RFC 9112 3.2)."""
    head = lines + b"A2A-Version: 1.0\r\nContent-Type: application/json\r\n"
    raw, closing = both(request(method, b"/a2a/v1" if method == b"POST" else CARD, head, SEND))
    assert status(raw) == (400, b"Bad Request")
    assert json.loads(raw.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "bad_request"
    assert closing


def test_http_1_0_without_host_is_served() -> None:
    """HTTP/1.0 has no Host requirement: served (and closed, as HTTP/1.0 is)."""
    raw, closing = both(b"GET " + CARD + b" HTTP/1.0\r\n\r\n")
    assert status(raw)[0] == 200
    assert closing


@pytest.mark.parametrize(
    "coding",
    [
        b"Transfer-Encoding: identity\r\n",
        b"Transfer-Encoding: chunked, identity\r\n",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
        b"Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: gzip, chunked\r\n",
    ],
)
def test_transfer_encoding_other_than_chunked_alone_is_400(coding: bytes) -> None:
    """A Transfer-Encoding whose codings are not chunked alone is 400 and closes (RFC 9112 6.3), on both paths, and nothing is stored."""
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(SEND), SEND)
    data = (
        b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        b"Content-Type: application/json\r\n" + coding + b"\r\n" + chunked
    )
    for direct in (True, False):
        server = Server(direct=direct)
        raw, _, transport = server.exchange(data)
        assert status(raw)[0] == 400, raw
        assert transport.disconnecting
        assert server.store.submissions == {}


def test_chunked_alone_is_served() -> None:
    """Transfer-Encoding: chunked is read and served, on both paths alike."""
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(SEND), SEND)
    data = (
        b"POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: Chunked\r\n\r\n" + chunked
    )
    raw, closing = both(data)
    assert status(raw)[0] == 200
    assert b"TASK_STATE_SUBMITTED" in raw
    assert not closing


@pytest.mark.parametrize("extra, code", [(99, 200), (100, 400), (600, 400)])
def test_header_lines_are_counted_not_names(extra: int, code: int) -> None:
    """Up to 100 header lines (Host included), however many share a name; more is 400 on both paths."""
    lines = b"Host: x\r\n" + b"X: a\r\n" * extra
    raw, _ = both(request(b"GET", CARD, lines))
    assert status(raw)[0] == code


def test_429_says_too_many_requests() -> None:
    """A rate-limited answer reads 429 Too Many Requests, on both paths."""
    raw, _ = both(rpc() + rpc(), limits={"rate": 1, "burst": 1})
    answers = re.findall(rb"HTTP/1.1 (\d+) ([^\r]*)\r\n", raw)
    assert answers == [(b"200", b"OK"), (b"429", b"Too Many Requests")]


@pytest.mark.parametrize(
    "data",
    [
        rpc(),
        rpc(body=b"{nope"),
        # Over the direct channel's DISCARD_MAX too: refused alike on both
        # paths (within it, the direct channel keeps the connection; its 413
        # is compared in test_direct's REFUSED_DIRECTLY).
        rpc(lines=b"", body=b"x" * 400_000),
        rpc().replace(b"application/json", b"text/plain"),
        request(b"GET", b"/a2a/v1", b"Host: x\r\n"),
        request(b"GET", b"/nowhere", b"Host: x\r\n"),
        request(b"GET", CARD, b"Host: x\r\nIf-None-Match: *\r\n"),
        request(b"POST", CARD, b"Host: x\r\n", b"{}"),
        request(b"GET", CARD, b""),
        rpc(path=b"/beacon/0.1/submissions", body=b'{"text":"hi"}'),
        rpc(path=b"/beacon/0.1/submissions", body=b'{"text":""}'),
    ],
)
def test_every_status_has_its_reason_phrase(data: bytes) -> None:
    """No answer Beacon sends reads "Unknown Status"; each phrase is RFC 9110's."""
    raw, _ = both(data)
    code, phrase = status(raw)
    expected = {
        200: b"OK", 201: b"Created", 304: b"Not Modified", 400: b"Bad Request",
        404: b"Not Found", 405: b"Method Not Allowed", 413: b"Content Too Large",
        415: b"Unsupported Media Type",
    }
    assert phrase == expected[code]


@pytest.mark.parametrize("validator", [b"If-None-Match: *\r\n", b"If-Modified-Since: Sun, 17 Jan 2077 08:00:00 GMT\r\n"])
def test_304_carries_no_content_length(validator: bytes) -> None:
    """A 304 has no Content-Length (RFC 9110 8.6) and no body, on both paths."""
    raw, closing = both(request(b"GET", CARD, b"Host: x\r\n" + validator))
    assert status(raw) == (304, b"Not Modified")
    headers = headers_of(raw)
    assert b"content-length" not in headers
    assert b"transfer-encoding" not in headers
    assert raw.endswith(b"\r\n\r\n")
    assert not closing


@pytest.mark.parametrize(
    "content_type",
    [None, b"text/plain", b"application/x-www-form-urlencoded", b"multipart/form-data; boundary=x",
     b"application/json; charset=latin-1", b"application/jsonx"],
)
@pytest.mark.parametrize("path", [b"/a2a/v1", b"/beacon/0.1/submissions"])
def test_rpc_bodies_must_be_application_json(content_type: bytes | None, path: bytes) -> None:
    """
    POSTs whose Content-Type is not application/json are 415, nothing
    stored, on both paths: the native door's is unsupported_media_type, the
    JSON-RPC endpoint's a JSON-RPC error response (-32005).
    """
    lines = b"Host: x\r\nA2A-Version: 1.0\r\n"
    if content_type is not None:
        lines += b"Content-Type: " + content_type + b"\r\n"
    body = SEND if path == b"/a2a/v1" else b'{"text":"hi"}'
    for direct in (True, False):
        server = Server(direct=direct)
        raw, _, _ = server.exchange(request(b"POST", path, lines, body))
        assert status(raw) == (415, b"Unsupported Media Type")
        error = json.loads(raw.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["code"] == (-32005 if path == b"/a2a/v1" else "unsupported_media_type")
        assert server.store.submissions == {}


#: The JSON-RPC endpoint's 415: a JSON-RPC error response (id null, as for
#: a request whose id could not be read), A2A's ContentTypeNotSupportedError.
JSONRPC_415 = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32005,'
    b'"message":"send Content-Type: application/json","data":[{"@type":'
    b'"type.googleapis.com/google.rpc.ErrorInfo","reason":"CONTENT_TYPE_NOT_SUPPORTED",'
    b'"domain":"a2a-protocol.org"}]}}'
)
#: The HTTP+JSON binding's 415: a google.rpc.Status in Beacon's domain.
REST_415 = (
    b'{"error":{"code":415,"status":"INVALID_ARGUMENT",'
    b'"message":"send Content-Type: application/json or application/a2a+json",'
    b'"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",'
    b'"reason":"UNSUPPORTED_MEDIA_TYPE","domain":"beacon.unownedminds.com"}]}}'
)


@pytest.mark.parametrize("body", [SEND, b"{nope"], ids=["SendMessage", "unparsable"])
@pytest.mark.parametrize(
    ("path", "expected"),
    [(b"/a2a/v1", JSONRPC_415), (b"/a2a/v1/", JSONRPC_415), (b"/a2a/rest/message:send", REST_415)],
    ids=["JSON-RPC", "JSON-RPC with a slash", "HTTP+JSON"],
)
def test_the_415_of_each_a2a_binding_is_in_its_shape(path: bytes, expected: bytes, body: bytes) -> None:
    """
    A POST to the JSON-RPC endpoint whose Content-Type is not JSON is
    answered 415 with a JSON-RPC error response (-32005, an ErrorInfo
    CONTENT_TYPE_NOT_SUPPORTED of A2A's domain), its body never parsed (an
    unparsable one too: not -32700); the HTTP+JSON binding's 415 stays a
    google.rpc.Status. The same bytes on both paths; counted as before.
    """
    if path == b"/a2a/rest/message:send" and body == SEND:
        body = REST_SEND
    data = rpc(path=path, body=body).replace(b"application/json", b"text/plain")
    raw, closing = both(data)
    assert status(raw) == (415, b"Unsupported Media Type")
    assert headers_of(raw)[b"content-type"] == [b"application/json"]
    assert body_of(raw) == expected
    assert not closing
    server = Server(direct=True)
    server.exchange(data)
    assert server.store.submissions == {}
    assert server.limits.refusals["unsupported_media_type"] == 1


def test_the_jsonrpc_endpoints_413_keeps_the_native_shape() -> None:
    """Only the 415 is a JSON-RPC error: a body over the cap is 413 too_large as before."""
    raw, _ = both(rpc(body=b"x" * 2048), limits={"rate": 0, "max_body": 1024})
    assert status(raw) == (413, b"Content Too Large")
    assert json.loads(body_of(raw))["error"]["code"] == "too_large"


@pytest.mark.parametrize("content_type", [b"application/json", b"Application/JSON; charset=UTF-8", b"application/json;charset=\"utf-8\""])
def test_application_json_with_parameters_is_served(content_type: bytes) -> None:
    """application/json, any case, with parameters (a charset only UTF-8): served."""
    data = rpc().replace(b"Content-Type: application/json", b"Content-Type: " + content_type)
    raw, _ = both(data)
    assert status(raw)[0] == 200
    assert b"TASK_STATE_SUBMITTED" in raw


def preflight(origin: bytes, path: bytes = b"/a2a/v1", method: bytes = b"POST") -> bytes:
    return request(
        b"OPTIONS",
        path,
        b"Host: x\r\nOrigin: " + origin + b"\r\nAccess-Control-Request-Method: " + method +
        b"\r\nAccess-Control-Request-Headers: content-type, a2a-version\r\n",
    )


@pytest.mark.parametrize("path", [b"/a2a/v1", b"/beacon/0.1/submissions"])
def test_no_cors_on_rpc_endpoints_by_default(path: bytes) -> None:
    """Without [server] cors_origins a preflight is 405 and no answer allows an origin; the card keeps its *."""
    raw, _ = both(preflight(b"https://evil.example", path))
    assert status(raw)[0] == 405
    assert b"access-control-allow-origin" not in headers_of(raw)
    body = SEND if path == b"/a2a/v1" else b'{"text":"hi"}'
    raw, _ = both(rpc(lines=b"Origin: https://evil.example\r\n", body=body, path=path))
    assert b"access-control-allow-origin" not in headers_of(raw)
    raw, _ = both(request(b"GET", CARD, b"Host: x\r\nOrigin: https://evil.example\r\n"))
    assert headers_of(raw)[b"access-control-allow-origin"] == [b"*"]


@pytest.mark.parametrize("path", [b"/a2a/v1", b"/beacon/0.1/submissions"])
def test_cors_for_the_configured_origins(path: bytes) -> None:
    """With cors_origins, a listed origin's preflight is 204 with the allowed method and headers, its POST answers name it; others get nothing."""
    config = {"server": {"cors_origins": ["https://App.example"]}}
    raw, _ = both(preflight(b"https://app.example", path), **config)
    assert status(raw) == (204, b"No Content")
    headers = headers_of(raw)
    assert headers[b"access-control-allow-origin"] == [b"https://app.example"]
    assert headers[b"access-control-allow-methods"] == [b"POST"]
    assert b"Content-Type" in headers[b"access-control-allow-headers"][0]
    assert headers[b"vary"] == [b"Origin"]
    assert b"content-length" not in headers
    raw, _ = both(preflight(b"https://other.example", path), **config)
    assert status(raw)[0] == 405
    assert b"access-control-allow-origin" not in headers_of(raw)
    raw, _ = both(preflight(b"https://app.example", path, method=b"DELETE"), **config)
    assert status(raw)[0] == 405
    body = SEND if path == b"/a2a/v1" else b'{"text":"hi"}'
    raw, _ = both(rpc(lines=b"Origin: https://app.example\r\n", body=body, path=path), **config)
    assert status(raw)[0] in (200, 201)
    assert headers_of(raw)[b"access-control-allow-origin"] == [b"https://app.example"]
    raw, _ = both(rpc(lines=b"Origin: https://other.example\r\n", body=body, path=path), **config)
    assert b"access-control-allow-origin" not in headers_of(raw)


def send_with(part: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [part]}},
        }
    ).encode()


STRUCTURED = {"subject": "s", "body": "b", "from": {"name": "n"}}


@pytest.mark.parametrize(
    "part",
    [
        {"text": "a\u0000b"},
        {"data": {**STRUCTURED, "subject": "a\u0000b"}},
        {"data": {**STRUCTURED, "from": {"name": "\u0000"}}},
    ],
    ids=["text", "structured subject", "structured from.name"],
)
def test_nul_in_a_message_is_refused_with_32602(part: dict[str, Any]) -> None:
    """A text part or a structured field holding NUL is -32602, naming where, and nothing is stored."""
    server = Server(direct=True)
    raw, _, _ = server.exchange(rpc(body=send_with(part)))
    error = json.loads(raw.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == -32602
    assert "NUL" in json.dumps(error)
    assert "\\u0000" not in json.dumps(error)  # the value is never echoed
    assert server.store.submissions == {}


@pytest.mark.parametrize(
    "document",
    [{"text": "a\u0000b"}, {"message": {**STRUCTURED, "body": "\u0000"}}],
    ids=["text", "structured body"],
)
def test_nul_in_a_native_submission_is_invalid_submission(document: dict[str, Any]) -> None:
    """The native door refuses NUL alike: 400 invalid_submission naming where, nothing stored."""
    server = Server(direct=True)
    raw, _, _ = server.exchange(rpc(path=b"/beacon/0.1/submissions", body=json.dumps(document).encode()))
    assert status(raw)[0] == 400
    error = json.loads(body_of(raw))["error"]
    assert error["code"] == "invalid_submission"
    assert "must not contain NUL" in error["message"]
    assert server.store.submissions == {}


def test_websocket_refusals_have_their_reason_phrases() -> None:
    """Every status a refused upgrade is answered with reads RFC 9110's phrase (426 Upgrade Required, 429 Too Many Requests)."""
    from beacon.bindings.websocket._errors import STATUS, Refusal

    phrases = {
        400: b"Bad Request", 403: b"Forbidden", 426: b"Upgrade Required",
        429: b"Too Many Requests", 503: b"Service Unavailable",
    }
    assert set(STATUS) == set(phrases)
    for code, phrase in phrases.items():
        assert Refusal(code, "m").response().startswith(b"HTTP/1.1 %d %s\r\n" % (code, phrase))


@BOTH
def test_a_request_line_arriving_behind_an_answered_request_is_timed(direct: bool) -> None:
    """A whole request, then the start of another in the same read: the second's head has header_timeout (10 s) to arrive, then 408 and close; a whole request alone leaves no deadline behind."""
    server = Server(direct=direct)
    channel, transport = server.connect()
    channel.dataReceived(request(b"GET", CARD, b"Host: x\r\n"))
    assert [c for c in server.clock.getDelayedCalls() if c.getTime() - server.clock.seconds() == 10] == []
    channel.dataReceived(request(b"GET", CARD, b"Host: x\r\n") + b"GET /.well-kn")
    assert status(transport.value())[0] == 200
    server.clock.advance(9.9)
    assert not transport.disconnecting
    server.clock.advance(0.2)
    answers = re.findall(rb"HTTP/1.1 (\d+)", transport.value())
    assert answers == [b"200", b"200", b"408"]
    assert transport.disconnecting


@pytest.mark.direct_channel
def test_both_requests_provide_the_direct_request_interface() -> None:
    """What a direct resource's render gets provides IDirectRequest, on either path: the interface is checked, not a marker."""
    from twisted.web.resource import Resource
    from zope.interface import implementer
    from zope.interface.verify import verifyObject

    from beacon.bindings.admission._edge import Container
    from beacon.bindings.http import BeaconSite, IDirectRequest, IDirectResource

    seen: list[Any] = []

    @implementer(IDirectResource)
    class Recording(Resource):
        isLeaf = True

        def render_GET(self, request: Any) -> bytes:
            seen.append(request)
            return b"ok"

    from twisted.internet.task import Clock

    from test_direct import connect

    for direct in (True, False):
        root = Container()
        root.putChild(b"r", Recording())
        site = BeaconSite(root, clock=Clock(), direct=direct)
        channel, _ = connect(site)
        channel.dataReceived(b"GET /r?a=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert len(seen) == 2
    assert type(seen[0]).__name__ == "DirectRequest"
    assert type(seen[1]).__name__ == "LimitedRequest"
    for request in seen:
        assert verifyObject(IDirectRequest, request)
        assert request.args == {b"a": [b"1"]}


@pytest.mark.parametrize("value", [b";", b"", b" ", b"never", b"; x", b"Thu"])
def test_if_modified_since_that_is_no_date_is_no_condition(value: bytes) -> None:
    """An If-Modified-Since that is not a date (empty, ';', a word) is ignored: 200 with the card, on both paths, no failure logged."""
    raw, closing = both(request(b"GET", CARD, b"Host: x\r\nIf-Modified-Since: " + value + b"\r\n"))
    assert status(raw) == (200, b"OK")
    assert not closing


def test_a_refusal_body_is_made_once_and_the_memo_stays_bounded() -> None:
    """
    refuse() answers a repeated refusal with the bytes it made the first time
    (a flood of 429s is not encoded again for each request), the same bytes a
    fresh encoding gives; its memo never holds more than MAX_REFUSAL_BODIES.
    """
    from twisted.web.test.requesthelper import DummyRequest

    from beacon.bindings.admission import _edge

    def refused(message: str) -> bytes:
        return _edge.refuse(
            DummyRequest([b""]), 429, "rate_limited", message, {b"Retry-After": b"1"}
        )

    first = refused("too many requests from this source; retry after 1 s")
    assert refused("too many requests from this source; retry after 1 s") is first
    assert first == _edge.native_refusal(
        429, "rate_limited", "too many requests from this source; retry after 1 s", {}
    )
    for n in range(_edge.MAX_REFUSAL_BODIES * 2 + 1):
        assert json.loads(refused(f"retry after {n} s"))["error"]["message"] == f"retry after {n} s"
        assert len(_edge._refusal_bodies) <= _edge.MAX_REFUSAL_BODIES


@BOTH
@pytest.mark.parametrize(
    "data",
    [
        request(b"GET", CARD, b"Host: x\r\n"),
        request(b"HEAD", CARD, b"Host: x\r\n"),
        request(b"GET", b"/nowhere", b"Host: x\r\n"),
        request(b"DELETE", CARD, b"Host: x\r\n"),
        rpc(),
        rpc(b"Content-Type: text/plain\r\n"),
    ],
    ids=["card", "card HEAD", "404", "405", "SendMessage", "415"],
)
def test_the_server_names_itself_without_a_version(direct: bool, data: bytes) -> None:
    """Every answer says Server: Beacon, on both paths: no twisted.web, no version."""
    raw, _, _ = Server(direct=direct).exchange(data)
    assert headers_of(raw)[b"server"] == [b"Beacon"], raw
    assert b"Twisted" not in raw
