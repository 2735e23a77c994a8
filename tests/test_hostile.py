"""
Hostile input, property-based (hypothesis, bounded examples): arbitrary bytes
and arbitrary JSON as JSON-RPC bodies and as native submissions never give a
500, a traceback, an unspecified error or a half-stored record; each answer
is one of the specified ones.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource

from beacon.config import build_config
from beacon.protocol import METHODS
from beacon.service import beacon_resources
from beacon.testing import MemoryStore
from test_websocket import VERSION, Server, frame

_sync = SynchronousTestCase()
PUBLIC = "https://beacon.example"
SPECIFIED_RPC = {-32700, -32600, -32601, -32602, -32001, -32002, -32003, -32004, -32005, -32007, -32009}
HOSTILE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=30,
)


class Door:
    """Beacon's public resources over a MemoryStore, with the rate limit off."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        config = build_config({"limits": {"rate": 0}}, public_url=PUBLIC)
        self.treq = StubTreq(beacon_resources(config, self.store, Clock()).mount(Resource()))

    def post(self, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
        """POST C{body}; the status and the body of the answer."""
        response = _sync.successResultOf(
            self.treq.post(
                PUBLIC + path,
                data=body,
                headers={"A2A-Version": "1.0", "Content-Type": content_type},
            )
        )
        return response.code, _sync.successResultOf(response.content())

    def check_store(self) -> None:
        """Every stored record is whole: content parses and has one known member."""
        for submission in self.store.submissions.values():
            document = json.loads(submission.content)
            assert set(document) in ({"text"}, {"message"})
            assert len(submission.sha256) == 64


def check_rpc_answer(status: int, body: bytes) -> None:
    """A JSON-RPC answer: 200 with a specified error or a result, or 204."""
    assert status in (200, 204), status
    if status == 204:
        assert body == b""
        return
    answer = json.loads(body)
    assert b"Traceback" not in body
    if "error" in answer:
        assert answer["error"]["code"] in SPECIFIED_RPC, answer
        assert answer["error"]["data"][0]["@type"].endswith("ErrorInfo")
    else:
        assert "result" in answer


@HOSTILE
@given(body=st.binary(max_size=2048))
def test_arbitrary_bytes_as_jsonrpc(body: bytes) -> None:
    """Any bytes POSTed to /a2a/v1 get a specified answer and store nothing half-made."""
    door = Door()
    check_rpc_answer(*door.post("/a2a/v1", body))
    door.check_store()


@HOSTILE
@given(
    method=st.sampled_from(sorted(METHODS) + ["message/send", "Nope"]),
    params=json_values,
    request_id=st.one_of(st.none(), st.integers(), st.text(max_size=200), st.booleans(), st.floats()),
)
def test_arbitrary_params_for_every_method(method: str, params: Any, request_id: Any) -> None:
    """Any params, for any method, with any id, get a specified JSON-RPC answer."""
    door = Door()
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
    check_rpc_answer(*door.post("/a2a/v1", body))
    door.check_store()


@HOSTILE
@given(
    message=st.fixed_dictionaries(
        {
            "messageId": st.text(max_size=30),
            "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", 1, 0, "x"]),
            "parts": st.lists(
                st.dictionaries(st.sampled_from(["text", "data", "raw", "url", "mediaType"]), json_values, max_size=3),
                max_size=4,
            ),
        },
        optional={"taskId": st.text(max_size=5), "contextId": st.text(max_size=5)},
    )
)
def test_arbitrary_messages(message: dict[str, Any]) -> None:
    """Any message shape sent with SendMessage gets a receipt or a specified error."""
    door = Door()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}).encode()
    check_rpc_answer(*door.post("/a2a/v1", body))
    door.check_store()


@HOSTILE
@given(body=st.one_of(st.binary(max_size=2048), json_values.map(lambda v: json.dumps(v).encode())))
def test_arbitrary_native_submissions(body: bytes) -> None:
    """Any native body gets 201 or a specified 4xx with the one error shape."""
    door = Door()
    status, answer = door.post("/beacon/0.1/submissions", body)
    assert status in (201, 400), (status, answer)
    document = json.loads(answer)
    if status == 201:
        assert set(document["receipt"]) == {"id", "receivedAt", "sha256"}
    else:
        assert document["error"]["code"] in ("invalid_json", "invalid_submission")
    door.check_store()


@HOSTILE
@given(size=st.sampled_from([65535, 65536, 65537, 1024 * 1024]))
def test_sizes_around_and_far_over_the_cap(size: int) -> None:
    """Bodies just under, at, just over and far over the cap: read, or 413 too_large."""
    door = Door()
    prefix = b'{"text":"'
    body = prefix + b"a" * (size - len(prefix) - 2) + b'"}'
    status, answer = door.post("/beacon/0.1/submissions", body)
    if size <= 65536:
        assert status == 201
    else:
        assert status == 413
        assert json.loads(answer)["error"]["code"] == "too_large"
    door.check_store()


WS_SPECIFIED = SPECIFIED_RPC | {-31413, -31429, -32603}


@HOSTILE
@given(
    payloads=st.lists(
        st.one_of(
            st.binary(max_size=512).map(lambda b: (0x2, b)),
            st.text(max_size=512).map(lambda t: (0x1, t.encode("utf-8"))),
            json_values.map(lambda v: (0x1, json.dumps(v).encode())),
            st.fixed_dictionaries(
                {"jsonrpc": st.just("2.0"), "id": st.integers(0, 9), "method": st.sampled_from(sorted(METHODS)), "params": json_values}
            ).map(lambda v: (0x1, json.dumps(v).encode())),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_arbitrary_websocket_frames(payloads: list[tuple[int, bytes]]) -> None:
    """Any text or binary frames get only specified answers, and the connection stays open for the next request."""
    server = Server()
    connection = server.open(VERSION)
    assert connection.client.status == 101
    for opcode, payload in payloads:
        connection.write(frame(opcode, payload))
    for answer in connection.responses():
        assert answer.get("jsonrpc") == "2.0"
        if "error" in answer:
            assert answer["error"]["code"] in WS_SPECIFIED, answer
            assert answer["error"]["data"][0]["@type"].endswith("ErrorInfo")
        else:
            assert "result" in answer
    assert connection.closes() == []
    probe = {"jsonrpc": "2.0", "id": "probe", "method": "ListTasks", "params": {}}
    connection.write(frame(0x1, json.dumps(probe).encode()))
    assert [a["id"] for a in connection.responses()] == ["probe"]
    for submission in server.store.submissions.values():
        assert set(json.loads(submission.content)) in ({"text"}, {"message"})
    # The peer goes away: the connection's timers go with it.
    connection.pump.clientIO.loseConnection()
    connection.pump.flush()
