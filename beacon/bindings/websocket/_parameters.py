"""
The service parameters of a WebSocket upgrade (the binding's A2A service parameters): its header
lines, read once by the transport edge's one head reader, made into the
lower-cased parameters every request on the connection carries.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from beacon.bindings.admission import field_lines

_VISIBLE = re.compile(rb"\A[\t\x20-\x7e]*\Z")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """C{text} with only its ASCII letters lower-cased (origin comparison)."""
    return text.translate(_ASCII_LOWER)


def upgrade_lines(head: bytes) -> list[tuple[bytes, bytes]]:
    """
    The C{(name, value)} header lines of an upgrade's raw head (which ends
    with a blank line), in order, the request line left out: read as
    L{field_lines} reads a head leniently.
    """
    return field_lines(head[head.find(b"\n") + 1 : -2]) or []


def service_parameters(
    lines: Iterable[tuple[bytes, bytes]], query: Mapping[str, list[str]]
) -> dict[str, str]:
    """
    The service parameters of an upgrade.

    @param lines: Its header lines, in order (see L{upgrade_lines}).
    @param query: Its query parameters (only C{A2A-Version} is read).
    @return: Lower-cased names to values: lines whose value is not visible
        ASCII left out, a name's remaining lines joined with C{", "}
        (C{"; "} for C{cookie}), C{last-event-id} dropped. An
        C{a2a-version} missing or empty in the headers is taken from the
        C{A2A-Version} query parameter.
    """
    collected: dict[str, list[str]] = {}
    for name, value in lines:
        if _VISIBLE.match(value) is None:
            continue
        key = name.decode("ascii").lower()
        if key == "last-event-id":
            continue
        collected.setdefault(key, []).append(value.decode("ascii"))
    parameters = {
        key: ("; " if key == "cookie" else ", ").join(values)
        for key, values in collected.items()
    }
    if not parameters.get("a2a-version", "").strip(" \t"):
        parameters.pop("a2a-version", None)
        for given in query.get("A2A-Version", [])[:1]:
            if _VISIBLE.match(given.encode("utf-8")) is not None:
                parameters["a2a-version"] = given
    return parameters


__all__ = ["ascii_lower", "service_parameters", "upgrade_lines"]
