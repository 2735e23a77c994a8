"""
An HTTP/1.1 answer as read off the wire, for tests that speak raw HTTP.
"""

from __future__ import annotations

import json
from typing import Any


class Answer:
    """One HTTP answer: status, headers (lower-case names, each a list), body (a chunked one decoded)."""

    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ")[1])
        self.headers: dict[str, list[str]] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers.setdefault(name.strip().lower(), []).append(value.strip())
        if self.headers.get("transfer-encoding") == ["chunked"]:
            self.body = _unchunk(self.body)

    def header(self, name: str) -> str | None:
        """The first value of the header C{name}, or None."""
        values = self.headers.get(name.lower())
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Answer {self.status} {self.headers} {self.body[:300]!r}>"


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += body[:size]
        body = body[size + 2 :]
    return out
