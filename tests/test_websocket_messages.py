"""
WebSocket messages (https://a2a-rust.com/bindings/websocket/v1 §3, §5, §6): one JSON-RPC request per text
frame, answered as the HTTP JSON-RPC binding answers it (one behaviour
suite over both), the in-flight cap, the limits on each frame (size, rate),
the errors' details and the upgrade's credential checked on every request.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from beacon.bindings.websocket import BEACON_DOMAIN
from websocket_support import (
    API_KEY,
    ERROR_INFO,
    RETRY_INFO,
    TOKEN,
    VERSION,
    Connection,
    HeldHandler,
    Server,
    _sync,
    auth_server,
    call,
    frame,
    get,
    send_message,
    server,
    stream_request,
)
from websocket_support import close_servers, frame_path, pytest_generate_tests  # noqa: F401 (fixtures)


# One behaviour suite over both bindings: every method answers the same.


class HTTPDoor:
    """The JSON-RPC binding, through StubTreq over the same resources."""

    door = "jsonrpc"

    def __init__(self, server: Server) -> None:
        self.server = server

    def rpc(self, request: Any, version: str | None = "1.0") -> dict[str, Any] | None:
        """POST one request; None for a 204 (a notification)."""
        headers = {"Content-Type": "application/json"}
        if version is not None:
            headers["A2A-Version"] = version
        response = _sync.successResultOf(
            self.server.treq.post(
                "http://beacon.example/a2a/v1", data=json.dumps(request).encode(), headers=headers
            )
        )
        body = _sync.successResultOf(response.content())
        if response.code == 204:
            return None
        assert response.code == 200
        answer: dict[str, Any] = json.loads(body)
        return answer


class WebSocketDoor:
    """The WebSocket binding, one connection per A2A-Version value."""

    door = "websocket"

    def __init__(self, server: Server) -> None:
        self.server = server
        self.connections: dict[str | None, Connection] = {}

    def rpc(self, request: Any, version: str | None = "1.0") -> dict[str, Any] | None:
        """Send one request frame; None when no frame answers it."""
        if version not in self.connections:
            headers = [] if version is None else [("A2A-Version", version)]
            self.connections[version] = self.server.open(headers)
        connection = self.connections[version]
        connection.send(request)
        answers = connection.responses()
        assert len(answers) <= 1, answers
        return answers[0] if answers else None


@pytest.fixture(params=["http", "websocket"])
def door(request: pytest.FixtureRequest) -> HTTPDoor | WebSocketDoor:
    """Each binding in turn, over a public policy and a MemoryStore."""
    server = Server()
    return HTTPDoor(server) if request.param == "http" else WebSocketDoor(server)


def _reasons(answer: dict[str, Any]) -> tuple[int, list[str]]:
    error = answer["error"]
    return error["code"], [d.get("reason", d["@type"]) for d in error["data"]]


BAD_PARAMS = "type.googleapis.com/google.rpc.BadRequest"

#: Requests that fail, with the code and detail reasons both bindings answer.
REFUSALS: list[tuple[str, Any, tuple[int, list[str]]]] = [
    ("unknown task", get("nope"), (-32001, ["TASK_NOT_FOUND"])),
    ("cancel", call("CancelTask", {"id": "nope"}), (-32001, ["TASK_NOT_FOUND"])),
    ("streaming", stream_request("s"), (-32004, ["UNSUPPORTED_OPERATION"])),
    ("subscribe", call("SubscribeToTask", {"id": "t"}), (-32004, ["UNSUPPORTED_OPERATION"])),
    (
        "push config",
        call("CreateTaskPushNotificationConfig", {"taskId": "t", "url": "https://x.example/h"}),
        (-32003, ["PUSH_NOTIFICATION_NOT_SUPPORTED"]),
    ),
    (
        "list push configs",
        call("ListTaskPushNotificationConfigs", {"taskId": "t"}),
        (-32003, ["PUSH_NOTIFICATION_NOT_SUPPORTED"]),
    ),
    ("extended card", call("GetExtendedAgentCard", {}), (-32007, ["EXTENDED_AGENT_CARD_NOT_CONFIGURED"])),
    ("v0.3 name", call("message/send", {}), (-32601, ["METHOD_NOT_FOUND"])),
    ("unknown method", call("Nope", {}), (-32601, ["METHOD_NOT_FOUND"])),
    ("bad params", call("SendMessage", {"message": {}}), (-32602, ["INVALID_PARAMS", BAD_PARAMS])),
    ("bad envelope", {"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, (-32600, ["INVALID_REQUEST"])),
    ("batch", [get("a")], (-32600, ["INVALID_REQUEST"])),
]


@pytest.mark.parametrize("name, request_, expected", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_are_the_same_on_both_bindings(
    door: HTTPDoor | WebSocketDoor, name: str, request_: Any, expected: tuple[int, list[str]]
) -> None:
    """Each refused request gets the same JSON-RPC error code and typed details on either binding."""
    answer = door.rpc(request_)
    assert answer is not None
    assert _reasons(answer) == expected


def test_send_then_get_on_both_bindings(door: HTTPDoor | WebSocketDoor) -> None:
    """SendMessage stores a submission (recorded with its door) and GetTask then shows its status only."""
    sent = door.rpc(send_message("behaviour"))
    assert sent is not None
    task = sent["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert set(task["metadata"]["receipt"]) == {"id", "receivedAt", "sha256"}
    assert door.server.store.submissions[task["id"]].door == door.door
    got = door.rpc(get(task["id"], "g"))
    assert got == {
        "jsonrpc": "2.0",
        "id": "g",
        "result": {"id": task["id"], "contextId": task["contextId"], "status": task["status"]},
    }


def test_list_tasks_is_empty_on_both_bindings(door: HTTPDoor | WebSocketDoor) -> None:
    """ListTasks is an empty page on either binding, even after a submission."""
    door.rpc(send_message())
    answer = door.rpc(call("ListTasks", {}))
    assert answer is not None
    assert answer["result"]["tasks"] == []


@pytest.mark.parametrize("version", [None, "0.3", "2.0"])
def test_version_refusal_on_both_bindings(door: HTTPDoor | WebSocketDoor, version: str | None) -> None:
    """Without A2A-Version 1.0 every method is -32009 on either binding, and nothing is stored."""
    answer = door.rpc(send_message(), version)
    assert answer is not None
    assert _reasons(answer) == (-32009, ["VERSION_NOT_SUPPORTED"])
    assert door.server.store.submissions == {}


def test_notification_on_both_bindings(door: HTTPDoor | WebSocketDoor) -> None:
    """A notification is run and not answered on either binding."""
    request = send_message()
    del request["id"]
    assert door.rpc(request) is None
    assert len(door.server.store.submissions) == 1


def test_both_bindings_answer_identically() -> None:
    """Over one store, every request of the suite gets the same answer from both bindings (ids and times aside)."""
    server = Server()
    http_door, ws_door = HTTPDoor(server), WebSocketDoor(server)
    sent = http_door.rpc(send_message())
    assert sent is not None
    task_id = sent["result"]["task"]["id"]
    requests = [r for _, r, _ in REFUSALS] + [get(task_id), call("ListTasks", {})]
    for request in requests:
        assert http_door.rpc(request) == ws_door.rpc(request), request


# §3 Messages.


def test_binary_frame_is_32700_with_null_id(server: Server) -> None:
    """A binary frame is answered -32700 with "id": null."""
    connection = server.open()
    connection.write(frame(0x2, json.dumps(send_message()).encode()))
    [answer] = connection.responses()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32700
    assert server.store.submissions == {}


def test_batch_is_32600(server: Server) -> None:
    """An array (a JSON-RPC batch) is answered -32600."""
    connection = server.open()
    answer = connection.rpc([send_message()])
    assert answer["id"] is None
    assert answer["error"]["code"] == -32600


def test_v03_names_are_32601(server: Server) -> None:
    """The v0.3 method names are answered -32601, as over HTTP."""
    connection = server.open()
    assert connection.rpc(call("message/send", {}, "x"))["error"]["code"] == -32601


def test_bad_json_is_32700(server: Server) -> None:
    """A text frame that is not strict JSON is -32700."""
    connection = server.open()
    assert connection.rpc('{"jsonrpc": "2.0", "id": 1,')["error"]["code"] == -32700


def test_fragmented_message_is_one_request(server: Server) -> None:
    """A message sent in several frames is read as the one request it is."""
    connection = server.open()
    payload = json.dumps(send_message()).encode()
    connection.write(frame(0x1, payload[:10], fin=False) + frame(0x0, payload[10:]))
    [answer] = connection.responses()
    assert "result" in answer


def test_notification_is_run_and_never_answered(server: Server) -> None:
    """A notification (no id) is run, and no frame answers it, success or error."""
    connection = server.open()
    request = send_message()
    del request["id"]
    connection.send(request)
    connection.send(call("GetTask", {"id": "nope"}, ...))
    assert connection.responses() == []
    assert len(server.store.submissions) == 1


def test_sixty_fifth_request_is_refused() -> None:
    """With 64 requests in progress the 65th is refused -32603 with its id; it is not run."""
    handler = HeldHandler()
    server = Server(handler)
    connection = server.open()
    for n in range(64):
        connection.send(get(f"t{n}"))
    assert connection.responses() == []
    answer = connection.rpc(get("t64"))
    assert answer["id"] == "t64"
    assert answer["error"]["code"] == -32603
    assert answer["error"]["data"] == [
        {"@type": ERROR_INFO, "reason": "IN_FLIGHT_LIMIT", "domain": BEACON_DOMAIN}
    ]
    assert handler.calls.count("get_task") == 64
    handler.release("t3")
    assert [a["id"] for a in connection.responses()] == ["t3"]
    connection.send(get("t65"))
    assert connection.responses() == []
    assert handler.calls.count("get_task") == 65


def test_notification_at_the_cap_is_refused_with_null_id() -> None:
    """A notification read while 64 requests are in progress is not run and is refused -32603 with a null id."""
    handler = HeldHandler()
    server = Server(handler)
    connection = server.open()
    for n in range(64):
        connection.send(get(f"t{n}"))
    connection.send(call("SendMessage", send_message()["params"], ...))
    [answer] = connection.responses()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32603
    assert "send_message" not in handler.calls


def test_answers_in_any_order_correlated_by_id() -> None:
    """Answers come as their requests finish, each with its own id."""
    handler = HeldHandler()
    connection = Server(handler).open()
    for name in ("a", "b", "c"):
        connection.send(get(name))
    for name in ("c", "a", "b"):
        handler.release(name)
    assert [a["id"] for a in connection.responses()] == ["c", "a", "b"]


def test_streaming_method_as_notification_is_not_run() -> None:
    """SendStreamingMessage and SubscribeToTask sent as notifications are not run and not answered."""
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(stream_request("s", ...))
    connection.send(call("SubscribeToTask", {"id": "t"}, ...))
    assert connection.responses() == []
    assert handler.calls == []
    assert connection.server._in_flight == 0


# Beacon's own limits per frame.


def test_frame_over_max_body_is_31413_and_the_connection_stays() -> None:
    """A frame over [limits] max_body is answered -31413 TOO_LARGE with its id; the connection stays open."""
    server = Server(max_body=1024)
    connection = server.open()
    answer = connection.rpc(send_message("x" * 2000, request_id="big"))
    assert answer["id"] == "big"
    assert answer["error"]["code"] == -31413
    assert answer["error"]["data"] == [
        {
            "@type": ERROR_INFO,
            "reason": "TOO_LARGE",
            "domain": BEACON_DOMAIN,
            "metadata": {"limit": "1024"},
        }
    ]
    assert "result" in connection.rpc(send_message("small"))


def test_message_over_4_mib_ends_the_connection(server: Server) -> None:
    """A message of exactly 4 MiB is answered -31413; one byte more ends the connection (close 1009)."""
    connection = server.open()
    request = json.dumps(send_message("", request_id="x")).encode()
    padded = request[:-1] + b" " * (4 * 1024 * 1024 - len(request)) + b"}"
    assert len(padded) == 4 * 1024 * 1024
    connection.write(frame(0x1, padded))
    [answer] = connection.responses()
    assert answer["error"]["code"] == -31413
    assert answer["id"] == "x"
    connection.write(frame(0x1, padded + b" "))
    assert connection.closes() == [1009]
    # The peer does not answer the close: it is dropped after autobahn's
    # close handshake timeout, on the injected clock.
    server.clock.advance(1)
    assert connection.transport.disconnecting


def test_every_frame_counts_against_the_rate() -> None:
    """The upgrade and every frame draw on the source's bucket; over it: -31429 with RATE_LIMITED and RetryInfo."""
    server = Server(rate=1.0, burst=3)
    connection = server.open()
    assert "result" in connection.rpc(send_message(request_id=1))
    assert "result" in connection.rpc(send_message(request_id=2))
    answer = connection.rpc(send_message(request_id=3))
    assert answer["id"] == 3
    assert answer["error"]["code"] == -31429
    assert answer["error"]["data"] == [
        {"@type": ERROR_INFO, "reason": "RATE_LIMITED", "domain": BEACON_DOMAIN},
        {"@type": RETRY_INFO, "retryDelay": "1s"},
    ]
    connection.write(frame(0x2, b"\x00"))
    assert connection.responses()[0]["error"]["code"] == -31429
    server.clock.advance(1)
    assert "result" in connection.rpc(send_message(request_id=4))
    assert len(server.store.submissions) == 3


def test_rate_is_shared_with_http() -> None:
    """A source's HTTP requests and WebSocket frames draw on one bucket."""
    server = Server(rate=1.0, burst=2)
    response = _sync.successResultOf(
        server.treq.post(
            "http://beacon.example/a2a/v1",
            data=json.dumps(send_message()).encode(),
            headers={"A2A-Version": "1.0", "Content-Type": "application/json"},
        )
    )
    assert response.code == 200
    connection = server.open()
    assert connection.client.status == 101
    assert connection.rpc(send_message())["error"]["code"] == -31429


def test_refused_upgrade_for_rate_is_429() -> None:
    """An upgrade over the source's rate is refused 429 with Retry-After and the §1 body with RetryInfo."""
    server = Server(rate=0.5, burst=1)
    assert server.open().client.status == 101
    refused = server.open()
    assert refused.client.status == 429
    assert refused.client.headers["retry-after"] == ["2"]
    error = refused.client.refusal()["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert error["details"] == [
        {"@type": ERROR_INFO, "reason": "RATE_LIMITED", "domain": BEACON_DOMAIN},
        {"@type": RETRY_INFO, "retryDelay": "2s"},
    ]


# §5 Errors.


def test_bad_params_carry_bad_request_details(server: Server) -> None:
    """Params that do not parse are -32602 with ErrorInfo then BadRequest field violations."""
    connection = server.open()
    error = connection.rpc(call("SendMessage", {"message": {"role": "ROLE_USER"}}, 1))["error"]
    assert error["code"] == -32602
    types = [detail["@type"] for detail in error["data"]]
    assert types == [ERROR_INFO, "type.googleapis.com/google.rpc.BadRequest"]


# §6 Authentication.


def test_unauthenticated_frame_is_exactly_as_section_6() -> None:
    """Without a credential every request is answered -32600 with the a2a-rust.com UNAUTHENTICATED ErrorInfo and the challenge."""
    server = auth_server()
    connection = server.open()
    assert connection.client.status == 101
    for request_id in ("1", "2"):
        assert connection.rpc(send_message(request_id=request_id)) == {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {
                "code": -32600,
                "message": "authentication required",
                "data": [
                    {
                        "@type": ERROR_INFO,
                        "reason": "UNAUTHENTICATED",
                        "domain": "a2a-rust.com",
                        "metadata": {
                            "www-authenticate": 'Bearer realm="beacon", ApiKey realm="beacon", header="X-API-Key"'
                        },
                    }
                ],
            },
        }
    assert server.store.submissions == {}


@pytest.mark.parametrize(
    "credential",
    [("Authorization", "Bearer " + TOKEN), ("Authorization", "bearer " + TOKEN), ("X-API-Key", API_KEY)],
)
def test_credentials_of_the_upgrade_are_checked_on_every_request(credential: tuple[str, str]) -> None:
    """A bearer token (any scheme case) or API key in the upgrade admits every request on the connection."""
    connection = auth_server().open(VERSION + [credential])
    assert "result" in connection.rpc(send_message(request_id=1))
    assert "result" in connection.rpc(send_message(request_id=2))


def test_wrong_credential_is_unauthenticated() -> None:
    """A credential that matches no digest is refused like a missing one."""
    connection = auth_server().open(VERSION + [("Authorization", "Bearer wrong")])
    assert connection.rpc(send_message())["error"]["data"][0]["reason"] == "UNAUTHENTICATED"


def test_unauthenticated_notification_is_not_run() -> None:
    """A notification without a credential is not run; its refusal carries a null id."""
    server = auth_server()
    connection = server.open()
    request = send_message()
    del request["id"]
    answer = connection.rpc(request)
    assert answer["id"] is None
    assert server.store.submissions == {}


def test_logs_carry_no_credentials_or_content(logged_events: Any) -> None:
    """What the binding logs names events and sources, never a credential or submitted text."""
    server = auth_server(rate=1, burst=2)
    connection = server.open(VERSION + [("Authorization", "Bearer " + TOKEN)])
    connection.rpc(send_message("very private words"))
    connection.rpc(send_message("more private words"))
    connection.write(frame(0x8, struct.pack("!H", 1000)))
    formatted = [json.dumps(e, default=repr) for e in logged_events.events]
    assert not any(TOKEN in text or "private words" in text for text in formatted)
    names = [str(e.get("log_format", "")).split(":")[0] for e in logged_events.named("ws.")]
    assert names == ["ws.connected", "ws.rate_limited", "ws.closed"]


def test_an_answer_that_cannot_be_written_is_logged(logged_events: Any) -> None:
    """
    An answer that fails on its way out is logged as ws.response_failed,
    once; the request no longer counts as in progress, and the connection
    goes on answering.
    """
    logged_events.expect_failures()
    handler = HeldHandler()
    connection = Server(handler).open()
    connection.send(get("bad"))
    assert connection.server.requests_in_flight == 1
    handler.held["bad"].callback({"task": object()})
    (failed,) = logged_events.failures()
    assert failed["log_format"] == "ws.response_failed"
    assert failed["log_failure"].check(TypeError)
    assert connection.server.requests_in_flight == 0
    connection.send(get("good"))
    handler.held["good"].callback({"id": "good"})
    assert [answer["id"] for answer in connection.responses()] == ["good"]
