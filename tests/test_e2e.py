"""
End to end: Beacon started exactly as a user starts it, a real
C{twistd -n --logfile=- beacon} process on a free loopback port with its data
directory in C{tmp_path}, spoken to over real sockets.

The HTTP side is plain blocking C{http.client} and raw sockets, each with a
socket timeout: the server is another process, so nothing here needs the
reactor, and raw sockets are the only way to send just the headers of a
large body or a chunked body that never ends. Every wait is bounded and waits
on an event (a log line, a process exit, a socket read); every process is
stopped in the C{launcher} fixture's finaliser.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import re
import signal
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from peers.process import (
    LOOPBACK_HTTP,
    START_TIMEOUT,
    Beacon,
    BeaconLauncher,
    TwistdProcess,
)

#: The socket timeout of every HTTP exchange, and the bound of every wait
#: for a log line: a safety net against a hang on a loaded machine, never
#: what a test measures (no test reads the clock to judge speed).
HTTP_TIMEOUT = 60.0

#: Beacon's default body cap ([limits] max_body), inclusive.
MAX_BODY = 65_536

CARD_PATH = "/.well-known/agent-card.json"
JSONRPC_PATH = "/a2a/v1"


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[BeaconLauncher]:
    """Starts Beacons in C{tmp_path}; stops every one of them afterwards."""
    launcher = BeaconLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.fixture
def beacon(launcher: BeaconLauncher) -> Beacon:
    """A Beacon started with defaults, a fresh data directory and a free port."""
    return launcher.start()


@pytest.fixture
def beacon_on_path(launcher: BeaconLauncher, http_path: str) -> Beacon:
    """
    A Beacon answering on the run's C{--http-path}: the direct channel (the
    defaults), or twisted.web alone (C{[server] direct = false}).
    """
    if http_path == "direct":
        return launcher.start()
    config = launcher.cwd / "twisted-web.toml"
    config.write_text("[server]\ndirect = false\n", encoding="utf-8")
    return launcher.start("--config", str(config))


# HTTP, the plain way.


@dataclass
class Response:
    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    beacon: Beacon,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """One HTTP/1.1 exchange on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", beacon.port, timeout=HTTP_TIMEOUT)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return Response(response.status, response.headers, response.read())
    finally:
        connection.close()


def rpc_body(method: str, params: dict[str, Any], request_id: Any = 1) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    ).encode("utf-8")


def rpc(beacon: Beacon, body: bytes) -> Response:
    """POST a JSON-RPC body to Beacon's A2A endpoint with A2A-Version 1.0."""
    return request(
        beacon,
        "POST",
        JSONRPC_PATH,
        body,
        {"Content-Type": "application/json", "A2A-Version": "1.0"},
    )


def text_message(text: str) -> dict[str, Any]:
    return {
        "message": {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
    }


def send_text(beacon: Beacon, text: str) -> dict[str, Any]:
    """SendMessage C{text}; return the receipt Task."""
    response = rpc(beacon, rpc_body("SendMessage", text_message(text)))
    assert response.status == 200, response
    answer = response.json()
    assert "result" in answer, answer
    task: dict[str, Any] = answer["result"]["task"]
    return task


def get_task(beacon: Beacon, task_id: str) -> dict[str, Any]:
    """GetTask C{task_id}; return the Task."""
    response = rpc(beacon, rpc_body("GetTask", {"id": task_id}, "get"))
    assert response.status == 200, response
    answer = response.json()
    assert answer.get("id") == "get" and "result" in answer, answer
    task: dict[str, Any] = answer["result"]
    return task


# HTTP, byte by byte.


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes
    closed: bool
    send_error: str | None = None
    raw: bytes = field(default=b"", repr=False)

    def json(self) -> Any:
        return json.loads(self.body)


def raw_exchange(port: int, head: bytes, body_parts: Sequence[bytes] = ()) -> RawResponse:
    """
    Send C{head} and then C{body_parts} on a fresh connection, stopping
    quietly if the server has closed it, then read the answer until the
    server closes the connection (or the socket timeout passes).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=HTTP_TIMEOUT) as s:
        send_error = None
        try:
            s.sendall(head)
            for part in body_parts:
                s.sendall(part)
        except (BrokenPipeError, ConnectionResetError) as e:
            # The server may refuse and close before the body is all sent.
            send_error = type(e).__name__
        data = b""
        closed = False
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    closed = True
                    break
                data += chunk
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed = True
    return parse_raw(data, closed, send_error)


def read_answer(s: socket.socket) -> RawResponse | None:
    """One answer read from C{s} by its Content-Length; None if the server closed first."""
    data = b""
    while b"\r\n\r\n" not in data or len(data) < _answer_length(data):
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return None
        data += chunk
    return parse_raw(data, False, None)


def _answer_length(data: bytes) -> int:
    head = data.partition(b"\r\n\r\n")[0]
    length = re.search(rb"\r\ncontent-length: *([0-9]+)", head, re.I)
    return len(head) + 4 + (int(length.group(1)) if length else 0)


def refused_then_next(
    port: int, head: bytes, body: bytes, then: bytes
) -> tuple[RawResponse | None, RawResponse | None]:
    """
    On one connection: send C{head} and read its answer before any of the
    body is sent; then send C{body} and the request C{then}, and read the
    next answer (None where the server closed the connection instead).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=HTTP_TIMEOUT) as s:
        s.sendall(head)
        first = read_answer(s)
        try:
            s.sendall(body + then)
        except (BrokenPipeError, ConnectionResetError):
            return first, None
        return first, read_answer(s)


def parse_raw(data: bytes, closed: bool, send_error: str | None) -> RawResponse:
    head, separator, rest = data.partition(b"\r\n\r\n")
    assert separator, f"no complete HTTP response head in {data!r}"
    lines = head.decode("latin-1").split("\r\n")
    match = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    assert match, f"not an HTTP status line: {lines[0]!r}"
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    body = rest[: int(length)] if length is not None else rest
    return RawResponse(int(match.group(1)), headers, body, closed, send_error, data)


def post_head(length_header: str) -> bytes:
    return (
        "POST /a2a/v1 HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\n"
        "Content-Type: application/json\r\n"
        "A2A-Version: 1.0\r\n"
        f"{length_header}\r\n"
        "\r\n"
    ).encode("ascii")


def padded_send_message(size: int) -> bytes:
    """A valid SendMessage body padded with trailing white space to C{size} bytes."""
    body = rpc_body("SendMessage", text_message("padded to the cap"))
    assert len(body) <= size
    return body + b" " * (size - len(body))


def assert_too_large(response: RawResponse) -> None:
    assert response.status == 413, response
    assert response.headers.get("content-type", "").startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == "too_large", error
    assert isinstance(error.get("message"), str) and error["message"]


# Discovery.


def test_card_is_served_with_the_bound_port(beacon: Beacon) -> None:
    """GET on the agent card answers 200 JSON whose interface URLs (JSON-RPC, HTTP+JSON, WebSocket) name the port Beacon bound."""
    response = request(beacon, "GET", CARD_PATH)
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("application/json")
    card = response.json()
    base = f"http://127.0.0.1:{beacon.port}"
    assert beacon.public_url == base
    assert card["supportedInterfaces"] == [
        {"url": base + JSONRPC_PATH, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": base + "/a2a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {
            "url": f"ws://127.0.0.1:{beacon.port}/a2a/ws",
            "protocolBinding": "https://a2a-rust.com/bindings/websocket/v1",
            "protocolVersion": "1.0",
        },
    ]
    assert card["capabilities"]["streaming"] is False
    assert int(response.headers["Content-Length"]) == len(response.body)


def test_card_has_cache_headers(beacon: Beacon) -> None:
    """The card carries Cache-Control max-age, a quoted ETag and a Last-Modified not in the future."""
    before = time.time()
    response = request(beacon, "GET", CARD_PATH)
    assert response.status == 200
    match = re.search(r"(?:^|[ ,])max-age=(\d+)", response.headers["Cache-Control"])
    assert match and int(match.group(1)) > 0, response.headers["Cache-Control"]
    assert re.fullmatch(r'(W/)?"[^"]+"', response.headers["ETag"])
    modified = email.utils.parsedate_to_datetime(response.headers["Last-Modified"])
    assert modified.timestamp() <= before + 1


def test_card_head(beacon: Beacon) -> None:
    """HEAD on the card answers 200 with the GET headers and no body."""
    got = request(beacon, "GET", CARD_PATH)
    head = request(beacon, "HEAD", CARD_PATH)
    assert head.status == 200
    assert head.body == b""
    for name in ("Content-Type", "Cache-Control", "ETag", "Last-Modified"):
        assert head.headers[name] == got.headers[name], name
    assert head.headers["Content-Length"] == str(len(got.body))


def test_card_conditional_get(beacon: Beacon) -> None:
    """A GET with the card's ETag in If-None-Match, or its Last-Modified in If-Modified-Since, answers 304 with no body."""
    got = request(beacon, "GET", CARD_PATH)
    by_etag = request(beacon, "GET", CARD_PATH, headers={"If-None-Match": got.headers["ETag"]})
    assert by_etag.status == 304
    assert by_etag.body == b""
    assert by_etag.headers["ETag"] == got.headers["ETag"]
    by_date = request(
        beacon, "GET", CARD_PATH, headers={"If-Modified-Since": got.headers["Last-Modified"]}
    )
    assert by_date.status == 304
    assert by_date.body == b""
    other = request(beacon, "GET", CARD_PATH, headers={"If-None-Match": '"not-the-etag"'})
    assert other.status == 200
    assert other.body == got.body


def test_card_links_resolve(beacon: Beacon) -> None:
    """
    Every URL on the card that points at Beacon itself answers: the
    JSON-RPC endpoint with 405 to GET, the HTTP+JSON interface URL (the
    base of its routes, none of them) with its own 404 google.rpc.Status,
    documents with 200.
    """
    card = request(beacon, "GET", CARD_PATH).json()
    base = f"http://127.0.0.1:{beacon.port}"
    bindings = {i["url"]: i["protocolBinding"] for i in card["supportedInterfaces"]}
    linked = set(bindings) | {
        url
        for extension in card["capabilities"].get("extensions", [])
        for url in (extension.get("uri"), extension.get("params", {}).get("href"))
        if isinstance(url, str)
    }
    expected = {"JSONRPC": 405, "HTTP+JSON": 404}
    unanswered = {}
    for url in sorted(u for u in linked if u.startswith(base + "/")):
        response = request(beacon, "GET", url[len(base) :])
        if response.status != expected.get(bindings.get(url, ""), 200):
            unanswered[url] = response.status
        elif bindings.get(url) == "HTTP+JSON":
            assert response.json()["error"]["status"] == "NOT_FOUND"
    assert not unanswered, f"the card links to URLs Beacon does not serve: {unanswered}"


def test_card_post_is_405(beacon: Beacon) -> None:
    """POST on the card answers 405 with an Allow header naming GET and HEAD."""
    response = request(beacon, "POST", CARD_PATH, b"{}", {"Content-Type": "application/json"})
    assert response.status == 405
    allowed = {m.strip() for m in response.headers["Allow"].split(",")}
    assert allowed == {"GET", "HEAD"}
    assert response.json()["error"]["code"] == "method_not_allowed"


# A2A JSON-RPC.


def test_send_message_returns_submitted_task(beacon: Beacon) -> None:
    """SendMessage answers with a Task in TASK_STATE_SUBMITTED whose id is the receipt id."""
    task = send_text(beacon, "Hello from the end-to-end test.")
    assert re.fullmatch(r"[0-9a-v]{36}", task["id"]), task["id"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert task["metadata"]["receipt"]["id"] == task["id"]
    assert task["metadata"]["receipt"]["receivedAt"] == task["status"]["timestamp"]


def test_get_task_answers_status(beacon: Beacon) -> None:
    """GetTask on a fresh receipt answers the same id, context, state and timestamp."""
    sent = send_text(beacon, "Hello, then GetTask.")
    task = get_task(beacon, sent["id"])
    assert task["id"] == sent["id"]
    assert task["contextId"] == sent["contextId"]
    assert task["status"] == {
        "state": "TASK_STATE_SUBMITTED",
        "timestamp": sent["status"]["timestamp"],
    }


def test_receipt_survives_restart(launcher: BeaconLauncher) -> None:
    """After SIGTERM and a restart on the same data directory, GetTask on an old receipt answers TASK_STATE_SUBMITTED with the same timestamp."""
    first = launcher.start()
    sent = send_text(first, "Remember me across a restart.")
    before = get_task(first, sent["id"])
    first.process.stop_cleanly()

    second = launcher.start()
    after = get_task(second, sent["id"])
    assert after == before
    assert after["status"] == {
        "state": "TASK_STATE_SUBMITTED",
        "timestamp": sent["status"]["timestamp"],
    }


def test_receipt_survives_kill(launcher: BeaconLauncher) -> None:
    """A receipt once answered survives SIGKILL: Beacon restarts on the same data directory (stale socket and pid files included) and GetTask still finds it."""
    first = launcher.start()
    sent = send_text(first, "Acknowledged means committed.")
    first.process.kill()
    assert first.process.process.returncode == -signal.SIGKILL

    second = launcher.start()
    after = get_task(second, sent["id"])
    assert after["id"] == sent["id"]
    assert after["status"] == {
        "state": "TASK_STATE_SUBMITTED",
        "timestamp": sent["status"]["timestamp"],
    }


# The log.


def test_log_names_receipt_never_text(beacon: Beacon) -> None:
    """The twistd log has http.listening, beacon.started and an intake.stored line naming the receipt, and never the submitted text."""
    secret = f"do-not-log-{uuid.uuid4().hex}"
    task = send_text(beacon, f"The words {secret} must stay out of the log.")
    stored = beacon.process.wait_for(r"intake\.stored: .*", HTTP_TIMEOUT)
    assert task["id"] in stored.group(0)
    beacon.process.stop_cleanly()
    log = beacon.log
    assert re.search(
        rf"http\.listening: {re.escape(LOOPBACK_HTTP)} on 127\.0\.0\.1:{beacon.port}\b", log
    )
    assert f"beacon.started: public URL http://127.0.0.1:{beacon.port}," in log
    assert secret not in log
    assert "Traceback" not in log


# Start-up failures.


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port that this test is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def start_on_busy_port(launcher: BeaconLauncher, port: int) -> tuple[TwistdProcess, int, str]:
    endpoint = f"tcp:{port}:interface=127.0.0.1"
    process = launcher.spawn("--data", str(launcher.data), "--http", endpoint)
    code = process.wait_exit(START_TIMEOUT)
    return process, code, endpoint


def test_port_in_use_stops_startup(launcher: BeaconLauncher, busy_port: int) -> None:
    """A port already in use makes twistd exit non-zero with a message naming the endpoint and the reason."""
    process, code, endpoint = start_on_busy_port(launcher, busy_port)
    log = process.output
    assert code != 0, log
    assert re.search(
        rf"cannot listen on '?{re.escape(endpoint)}'?.*[Aa]ddress already in use", log
    ), log
    assert "beacon.started" not in log
    assert not (launcher.cwd / "twistd.pid").exists(), "the pidfile outlived a failed start"


def test_port_in_use_message_has_no_traceback(
    launcher: BeaconLauncher, busy_port: int
) -> None:
    """A port already in use is reported as a clear message, not a Python traceback."""
    process, code, _ = start_on_busy_port(launcher, busy_port)
    assert code != 0
    assert "Traceback" not in process.output, process.output


def test_unusable_data_directory_stops_startup(launcher: BeaconLauncher) -> None:
    """A data directory that cannot be created stops start-up with a clear message naming it, not a traceback."""
    (launcher.cwd / "a-file").write_text("not a directory\n", encoding="utf-8")
    data = launcher.cwd / "a-file" / "data"
    process = launcher.spawn("--data", str(data), "--http", LOOPBACK_HTTP)
    code = process.wait_exit(START_TIMEOUT)
    log = process.output
    assert code != 0, log
    assert str(data) in log
    assert "beacon.started" not in log
    assert "Traceback" not in log, log


@pytest.mark.parametrize(
    ("options", "config", "expected"),
    [
        pytest.param(
            ["--config", "beacon.toml"],
            "[limits]\nbogus = 1\n",
            "unknown key 'bogus' in [limits]",
            id="config-unknown-key",
        ),
        pytest.param(
            ["--config", "beacon.toml"],
            "[limits]\nburst = 0\n",
            "burst must be between 1",
            id="config-bad-value",
        ),
        pytest.param(
            ["--http", "nonsense:1"],
            None,
            "--http 'nonsense:1' is not a server endpoint",
            id="http-unknown-endpoint-type",
        ),
        pytest.param(
            ["--public-url", "ftp://example.org"],
            None,
            "public_url must be an absolute http:// or https:// URL",
            id="public-url-not-http",
        ),
    ],
)
def test_bad_option_is_usage_error(
    launcher: BeaconLauncher,
    options: list[str],
    config: str | None,
    expected: str,
) -> None:
    """A bad option value exits non-zero with its one-line message first (no twistd usage after it), no traceback, before the reactor runs or the data directory is made."""
    if config is not None:
        (launcher.cwd / "beacon.toml").write_text(config, encoding="utf-8")
    process = launcher.spawn("--data", str(launcher.data), *options)
    code = process.wait_exit(START_TIMEOUT)
    log = process.output
    assert code != 0, log
    assert expected in log.splitlines()[0], log
    assert log.splitlines()[0].startswith("twistd beacon: "), log
    assert "Usage:" not in log
    assert "Traceback" not in log
    assert "starting up" not in log  # twistd's first line once the reactor is set up
    assert not launcher.data.exists()


# Transport limits.


def test_body_at_cap_reaches_jsonrpc(beacon: Beacon) -> None:
    """A body of exactly 65,536 bytes passes the transport and is answered by JSON-RPC."""
    body = padded_send_message(MAX_BODY)
    assert len(body) == MAX_BODY
    response = rpc(beacon, body)
    assert response.status == 200, response
    answer = response.json()
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_long_text_at_cap_reaches_jsonrpc(beacon: Beacon) -> None:
    """A SendMessage whose long text makes the body exactly 65,536 bytes is stored and answered."""
    skeleton = rpc_body("SendMessage", text_message(""))
    body = rpc_body("SendMessage", text_message("x" * (MAX_BODY - len(skeleton))))
    # The message id is a fresh UUID each time, always 36 characters.
    assert len(body) == MAX_BODY
    response = rpc(beacon, body)
    assert response.status == 200, response
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_body_over_cap_is_413(beacon_on_path: Beacon, http_path: str) -> None:
    """
    A body of 65,537 bytes is refused with 413 and {"error":{"code":"too_large"}}
    before any of it is sent. On the direct channel the connection is kept:
    the body is read and dropped, and the next request on it is answered;
    on twisted.web's path the connection is closed.
    """
    beacon = beacon_on_path
    body = padded_send_message(MAX_BODY + 1)
    card = f"GET {CARD_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode("ascii")
    refused, following = refused_then_next(
        beacon.port, post_head(f"Content-Length: {len(body)}"), body, card
    )
    assert refused is not None
    assert_too_large(refused)
    if http_path == "direct":
        assert "connection" not in refused.headers
        assert following is not None and following.status == 200, following
        assert following.json()["supportedInterfaces"]
    else:
        assert refused.headers["connection"] == "close"
        assert following is None
    assert_refused_before_the_body(beacon)
    assert "intake.stored" not in beacon.log


def assert_refused_before_the_body(beacon: Beacon) -> None:
    """
    The log says Beacon refused a body over the cap (the early refusal) and
    never timed a request out: a 413 for a request whose body never came
    whole was sent without waiting for it. (Waiting would end in
    [limits] body_timeout's 408 and its http.request_timeout line.)
    """
    beacon.process.wait_for(r"http\.too_large: refused a request body over 65536 bytes", HTTP_TIMEOUT)
    assert "http.request_timeout" not in beacon.log, beacon.log


def test_declared_length_over_cap_is_413_at_once(beacon_on_path: Beacon) -> None:
    """A declared Content-Length of 10,000,000 (over the cap by more than the direct channel drops) with no body sent is answered 413 at once (before any of the body, no timeout) and the connection closed, on either HTTP path."""
    beacon = beacon_on_path
    response = raw_exchange(beacon.port, post_head("Content-Length: 10000000"))
    assert_too_large(response)
    assert response.closed, "the connection was left open"
    assert_refused_before_the_body(beacon)


def test_chunked_body_over_cap_is_413(beacon_on_path: Beacon) -> None:
    """A chunked body that grows past 65,536 bytes is answered 413 without waiting for its end, and the connection closed, on either HTTP path."""
    beacon = beacon_on_path
    chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"  # 16,384 bytes of body
    parts = [chunk] * (MAX_BODY // 0x4000 + 1)  # 81,920 bytes, never terminated
    response = raw_exchange(beacon.port, post_head("Transfer-Encoding: chunked"), parts)
    # The body never ends, so only the refusal as it grew over the cap can
    # have answered 413.
    assert_too_large(response)
    assert response.closed
    assert_refused_before_the_body(beacon)


def test_chunked_body_at_cap_reaches_jsonrpc(beacon: Beacon) -> None:
    """A chunked body of exactly 65,536 bytes passes the transport and is answered by JSON-RPC."""
    body = padded_send_message(MAX_BODY)
    parts = [
        b"%x\r\n" % len(piece) + piece + b"\r\n"
        for piece in (body[i : i + 0x4000] for i in range(0, len(body), 0x4000))
    ] + [b"0\r\n\r\n"]
    head = post_head("Transfer-Encoding: chunked").replace(
        b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"
    )
    response = raw_exchange(beacon.port, head, parts)
    assert response.status == 200, response
    # Beacon answers with a chunked body; the task is in it.
    assert b'"TASK_STATE_SUBMITTED"' in response.raw


def test_rate_limit(launcher: BeaconLauncher) -> None:
    """With [limits] burst = 3 and a rate of one request per 1,000 s, the 4th request gets 429, Retry-After and rate_limited, and the log says http.rate_limited."""
    # The bucket refills one token per 1,000 s: the four requests could only
    # all pass if they took that long, so the 4th is refused however slowly
    # the machine sends them.
    config = launcher.cwd / "beacon.toml"
    config.write_text("[limits]\nrate = 0.001\nburst = 3\n", encoding="utf-8")
    beacon = launcher.start("--config", str(config))
    body = rpc_body("ListTasks", {})
    answers = [rpc(beacon, body) for _ in range(4)]
    assert [a.status for a in answers[:3]] == [200, 200, 200], answers
    refused = answers[3]
    assert refused.status == 429, refused
    assert int(refused.headers["Retry-After"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "rate_limited"
    assert error["message"]
    beacon.process.wait_for(r"http\.rate_limited: source 127\.0\.0\.1", HTTP_TIMEOUT)


def test_the_tac_file_serves_the_same_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """twistd -ny etc/beacon.tac, configured by BEACON_CONFIG, serves the card and stores a submission."""
    from peers.process import LISTENING, STARTED

    config = tmp_path / "beacon.toml"
    config.write_text(
        f'[server]\ndata = "{tmp_path / "data"}"\nhttp = ["{LOOPBACK_HTTP}"]\n'
        '[operator]\nsocket = ""\n[limits]\nrate = 0\n'
    )
    monkeypatch.setenv("BEACON_CONFIG", str(config))
    tac = Path(__file__).resolve().parents[1] / "etc" / "beacon.tac"
    process = TwistdProcess(
        [], tmp_path, wrap=lambda argv: [argv[0], "-n", "--logfile=-", "-y", str(tac)]
    )
    try:
        port = int(process.wait_for(LISTENING, START_TIMEOUT).group(2))
        public_url = process.wait_for(STARTED, START_TIMEOUT).group(1)
        beacon = Beacon(process, port, public_url)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT)
        connection.request("GET", CARD_PATH)
        card = json.loads(connection.getresponse().read())
        connection.close()
        assert card["supportedInterfaces"][0]["url"].startswith(public_url)
        task = send_text(beacon, "Hello through the tac file.")
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
        process.wait_for(re.escape(f"intake.stored: receipt {task['id']}"), START_TIMEOUT)
    finally:
        process.close()
