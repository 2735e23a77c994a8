"""
The service parameters of a WebSocket upgrade (https://a2a-rust.com/bindings/websocket/v1 §2): the header
lines read once (by the transport edge's one head reader, L{field_lines}),
lower-cased, joined, filtered, and the A2A-Version query fallback.
"""

from __future__ import annotations

import pytest

from beacon.bindings.admission._edge import field_lines
from beacon.bindings.websocket._parameters import upgrade_lines
from beacon.bindings.websocket import service_parameters
from websocket_support import VERSION, Server, send_message, server
from websocket_support import close_servers, frame_path, pytest_generate_tests  # noqa: F401 (fixtures)


def test_header_folding_and_non_ascii_drop(server: Server) -> None:
    """Names are lower-cased, repeated lines joined (", ", "; " for Cookie), non-visible-ASCII lines and Last-Event-ID dropped, and :source added."""
    connection = server.open(
        [
            ("A2A-Version", "1.0"),
            ("X-Multi", "one"),
            ("X-Multi", "two"),
            ("X-Name", "caf\u00e9".encode("utf-8")),
            ("X-Name", "plain"),
            ("X-Only-Utf8", "\u00fcber".encode("utf-8")),
            ("Cookie", "a=1"),
            ("Cookie", "b=2"),
            ("Last-Event-ID", "42"),
            ("X-Tab", "a\tb"),
        ]
    )
    assert connection.client.status == 101
    parameters = connection.server.parameters
    assert parameters["x-multi"] == "one, two"
    assert parameters["x-name"] == "plain"
    assert "x-only-utf8" not in parameters
    assert parameters["cookie"] == "a=1; b=2"
    assert parameters["x-tab"] == "a\tb"
    assert "last-event-id" not in parameters
    assert parameters[":source"] == "127.0.0.1"
    assert all(name == name.lower() for name in parameters)


def test_service_parameters_reserved_names_cannot_be_sent() -> None:
    """A header line whose name is not a token (such as one starting with a colon) is not a parameter."""
    head = b"GET / HTTP/1.1\r\n:source: forged\r\nX A: 2\r\nX-A: 1\r\n\r\n"
    assert service_parameters(upgrade_lines(head), {}) == {"x-a": "1"}


PLAIN_BLOCK = b"Host: beacon.example\r\nX-A:  one two \t\r\nX-A:\r\nX-B: caf\xc3\xa9\r\n"


def test_field_lines_of_a_plain_block() -> None:
    """A block of plain lines reads the same strictly and leniently: names as sent, values without the blanks around them."""
    expected = [(b"Host", b"beacon.example"), (b"X-A", b"one two"), (b"X-A", b""), (b"X-B", b"caf\xc3\xa9")]
    assert field_lines(PLAIN_BLOCK, strict=True) == field_lines(PLAIN_BLOCK) == expected
    assert field_lines(b"", strict=True) == []


@pytest.mark.parametrize(
    "block, lenient",
    [
        (b"X-A: 1\r\n folded\r\n", [(b"X-A", b"1 folded")]),
        (b"X-A: 1\nX-B: 2\n", [(b"X-A", b"1"), (b"X-B", b"2")]),
        (b"X A: 1\r\n:x: 2\r\nno colon\r\nX-B: 3\r\n", [(b"X-B", b"3")]),
        (b"X-A: a\x01b\r\n", [(b"X-A", b"a\x01b")]),
        (b"\tleading fold\r\nX-A: 1\r\n", [(b"X-A", b"1")]),
    ],
    ids=["obs-fold", "bare LF", "not name: value", "control character", "fold without a line"],
)
def test_field_lines_of_an_irregular_block(block: bytes, lenient: list[tuple[bytes, bytes]]) -> None:
    """The direct channel reads no irregular block (it hands it over); the upgrade reads it leniently."""
    assert field_lines(block, strict=True) is None
    assert field_lines(block) == lenient


def test_version_from_the_query(server: Server) -> None:
    """Without the header, A2A-Version comes from the upgrade URL's query."""
    where = "/a2a/ws" if server.mounted else "/"
    connection = server.open([], path=where + "?A2A-Version=1.0")
    assert "result" in connection.rpc(send_message())


def test_version_header_wins_over_query(server: Server) -> None:
    """When both are present the header decides: 0.3 in the header is refused with -32009."""
    where = "/a2a/ws" if server.mounted else "/"
    connection = server.open([("A2A-Version", "0.3")], path=where + "?A2A-Version=1.0")
    assert connection.rpc(send_message())["error"]["code"] == -32009


def test_no_other_query_fallback(server: Server) -> None:
    """Only A2A-Version has a query fallback; A2A-Extensions in the query is ignored."""
    where = "/a2a/ws" if server.mounted else "/"
    connection = server.open(VERSION, path=where + "?A2A-Extensions=urn:x")
    assert "a2a-extensions" not in connection.server.parameters


def test_missing_version_answers_every_request_with_32009(server: Server) -> None:
    """Without a version, each request is answered -32009, and the connection stays usable."""
    connection = server.open([])
    for request_id in (1, 2):
        error = connection.rpc(send_message(request_id=request_id))["error"]
        assert error["code"] == -32009
        assert error["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert server.store.submissions == {}


def test_parameters_are_captured_once(server: Server) -> None:
    """Every request on the connection sees the upgrade's parameters: the stored source is the caller."""
    connection = server.open()
    task_id = connection.rpc(send_message())["result"]["task"]["id"]
    stored = server.store.submissions[task_id]
    assert (stored.door, stored.source) == ("websocket", "127.0.0.1")
