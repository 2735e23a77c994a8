"""
The WebSocket binding's errors and refusals: the JSON-RPC errors it answers
frames with beside the dispatcher's (their ErrorInfo in L{BEACON_DOMAIN},
or L{BINDING_DOMAIN} for UNAUTHENTICATED as the WebSocket binding §6 shows it), the
refused upgrades with their HTTP+JSON body (A2A §11.6, the WebSocket binding §1), and
the id a frame refused unparsed is answered with (L{prefix_id}).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Iterable

from beacon.bindings.admission import BEACON_DOMAIN, reason_phrase
from beacon.bindings.admission import Admission
from beacon.protocol import (
    ERROR_INFO_TYPE,
    MAX_NUMERIC_ID,
    MAX_REQUEST_ID_LENGTH,
    RETRY_INFO_TYPE,
    A2AError,
    InvalidRequestError,
    JSONParseError,
    RequestId,
    dumps,
    failure,
)

#: The ErrorInfo domain of the binding's own refusals (the WebSocket binding §6).
BINDING_DOMAIN = "a2a-rust.com"
#: The JSON-RPC code of a request frame over C{[limits] max_body}.
TOO_LARGE_CODE = -31413
#: The JSON-RPC code of a request frame over the per-source rate.
RATE_LIMITED_CODE = -31429
#: How much of a frame refused unparsed is read for its id, in bytes.
ID_PREFIX = 256
#: The only WebSocket version served (RFC 6455).
VERSION = 13


# Errors frames are answered with.


class BindingError(A2AError):
    """
    An error whose ErrorInfo is not in the A2A domain, with more typed
    details after it.
    """

    domain: ClassVar[str] = BEACON_DOMAIN

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: dict[str, str] | None = None,
        extra: Iterable[dict[str, Any]] = (),
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.extra = list(extra)

    def details(self) -> list[dict[str, Any]]:
        info: dict[str, Any] = {
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason,
            "domain": self.domain,
        }
        if self.metadata:
            info["metadata"] = self.metadata
        return [info, *self.extra]


class FrameTooLargeError(BindingError):
    """A request frame is over C{[limits] max_body}."""

    code = TOO_LARGE_CODE
    reason = "TOO_LARGE"
    http_status = 413
    default_message = "The request is too large"


class RateLimitedError(BindingError):
    """The source sends faster than C{[limits] rate} allows."""

    code = RATE_LIMITED_CODE
    reason = "RATE_LIMITED"
    http_status = 429
    default_message = "Too many requests from this source"


class InFlightLimitError(BindingError):
    """The connection has C{max_in_flight} requests in progress already."""

    code = -32603
    reason = "IN_FLIGHT_LIMIT"
    default_message = "Too many requests in progress on this connection"


class StreamLaggedError(BindingError):
    """A stream's consumer fell further behind than the stream queue."""

    code = -32603
    reason = "STREAM_LAGGED"
    default_message = "The stream's consumer fell too far behind; subscribe again"


class UnauthenticatedError(BindingError):
    """The upgrade's credentials are missing or not accepted (the WebSocket binding §6)."""

    code = InvalidRequestError.code
    reason = "UNAUTHENTICATED"
    http_status = 401
    default_message = "authentication required"
    domain = BINDING_DOMAIN


def retry_info(seconds: float) -> dict[str, Any]:
    """A C{google.rpc.RetryInfo} detail: whole seconds, at least one."""
    return {"@type": RETRY_INFO_TYPE, "retryDelay": f"{retry_seconds(seconds)}s"}


def retry_seconds(seconds: float) -> int:
    """A retry delay in whole seconds, rounded up, at least one."""
    return max(1, math.ceil(seconds))


def rate_error(retry_after: float | Admission) -> RateLimitedError:
    """A frame over the source's rate: -31429 with when to retry (seconds, or the admission's)."""
    if isinstance(retry_after, Admission):
        retry_after = retry_after.retry_after
    return RateLimitedError(
        f"Too many requests from this source; retry after {retry_seconds(retry_after)} s",
        extra=[retry_info(retry_after)],
    )


def rate_answer(request_id: RequestId, retry_after: float) -> bytes:
    """
    The encoded answer (C{dumps(failure(request_id, rate_error(...)))}, to
    the byte) to request C{request_id} of a source over its rate, which may
    retry after C{retry_after} seconds: a flood's commonest answer, made
    once per number of seconds, the id's JSON put in.
    """
    head, tail = _rate_answer_around(retry_seconds(retry_after))
    return head + dumps(request_id) + tail


@lru_cache(maxsize=64)
def _rate_answer_around(seconds: int) -> tuple[bytes, bytes]:
    """The -31429 answer asking to wait C{seconds}, before and after its request id."""
    whole = dumps(failure(None, rate_error(seconds)))
    at = whole.index(b'"id":null') + len(b'"id":')
    return whole[:at], whole[at + len(b"null") :]


def binary_error() -> JSONParseError:
    """A binary frame: -32700 (the binding speaks text frames only)."""
    return JSONParseError(
        "Binary frames are not part of this binding; send one JSON-RPC object per text frame"
    )


# Refused upgrades.

#: The google.rpc status named in the body of a refusal with each HTTP status.
STATUS = {
    400: "FAILED_PRECONDITION",
    403: "PERMISSION_DENIED",
    426: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}


@dataclass(frozen=True)
class Refusal:
    """
    A refused upgrade: an HTTP status with the HTTP+JSON error body of A2A
    §11.6 (the WebSocket binding §1).
    """

    code: int
    message: str
    reason: str | None = None
    extra: tuple[dict[str, Any], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()

    def body(self) -> dict[str, Any]:
        """The C{{"error": {...}}} document (no details on a 403)."""
        error: dict[str, Any] = {
            "code": self.code,
            "status": STATUS.get(self.code, "FAILED_PRECONDITION"),
            "message": self.message,
        }
        if self.reason is not None:
            error["details"] = [
                {"@type": ERROR_INFO_TYPE, "reason": self.reason, "domain": BEACON_DOMAIN},
                *self.extra,
            ]
        return {"error": error}

    def response(self) -> bytes:
        """The whole HTTP/1.1 response; the connection closes after it."""
        body = dumps(self.body())
        phrase = reason_phrase(self.code)
        lines = [b"HTTP/1.1 %d %s" % (self.code, phrase)]
        lines.append(b"Content-Type: application/json")
        lines.append(b"Content-Length: %d" % len(body))
        lines.append(b"Cache-Control: no-store")
        lines.append(b"Connection: close")
        for name, value in self.headers:
            lines.append(f"{name}: {value}".encode("ascii"))
        return b"\r\n".join(lines) + b"\r\n\r\n" + body


INVALID_UPGRADE = Refusal(
    400,
    "This URL speaks the A2A WebSocket binding only: send an RFC 6455 upgrade "
    "(GET, Upgrade: websocket, Sec-WebSocket-Version: 13)",
    "INVALID_UPGRADE",
)
UNSUPPORTED_VERSION = Refusal(
    426,
    f"Only WebSocket version {VERSION} (RFC 6455) is served",
    "UNSUPPORTED_WEBSOCKET_VERSION",
    headers=(("Sec-WebSocket-Version", str(VERSION)),),
)
ORIGIN_REFUSED = Refusal(403, "Connections from this origin are not allowed")
#: Seconds a client refused for too many connections is asked to wait (as
#: the HTTP listeners' own 503 asks).
CONNECTIONS_RETRY_AFTER = 1

TOO_MANY_CONNECTIONS = Refusal(
    503,
    "Too many WebSocket connections are open; try again later",
    "TOO_MANY_CONNECTIONS",
    extra=(retry_info(CONNECTIONS_RETRY_AFTER),),
    headers=(("Retry-After", str(CONNECTIONS_RETRY_AFTER)),),
)


def rate_refusal(retry_after: float) -> Refusal:
    """An upgrade over the source's rate: 429 with Retry-After and RetryInfo."""
    retry = retry_seconds(retry_after)
    return Refusal(
        429,
        f"Too many requests from this source; retry after {retry} s",
        "RATE_LIMITED",
        extra=(retry_info(retry_after),),
        headers=(("Retry-After", str(retry)),),
    )


# A refused frame's id, read from its first bytes only.

_ID_READER = json.JSONDecoder(parse_constant=lambda name: None)
_SPACE = " \t\r\n"


#: The commonest prefixes, read at once: C{"id"} first, or right after
#: C{"jsonrpc":"2.0"}, a string without escapes or an integer, then a comma
#: or the end of the object. Anything else is read member by member.
_PLAIN_ID = re.compile(
    rb'[ \t\r\n]*\{[ \t\r\n]*(?:"jsonrpc"[ \t\r\n]*:[ \t\r\n]*"2\.0"[ \t\r\n]*,[ \t\r\n]*)?'
    rb'"id"[ \t\r\n]*:[ \t\r\n]*(?:"([^"\\\x00-\x1f]{0,%d})"|(-?(?:0|[1-9][0-9]{0,15})))'
    rb"[ \t\r\n]*[,}]" % MAX_REQUEST_ID_LENGTH
)


def prefix_id(prefix: bytes) -> RequestId:
    """
    The request id of a frame refused without parsing it, read from
    C{prefix}, the frame's first bytes (at most L{ID_PREFIX}): the value of
    a top-level C{"id"} member that lies whole within them and is a request
    id JSON-RPC echoes (a string of at most 128 characters, an integer
    within 2**53); otherwise null.
    """
    prefix = prefix[:ID_PREFIX]
    plain = _PLAIN_ID.match(prefix)
    if plain is not None:
        text, number = plain.groups()
        if number is not None:
            return _echoable(int(number))
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError:
            pass  # Read member by member, as any other.
    return _read_id(prefix)


def _read_id(prefix: bytes) -> RequestId:
    """L{prefix_id}, member by member."""
    try:
        text = prefix.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(prefix) - 3:
            return None  # not UTF-8 (a code point cut at the end is)
        text = prefix[: error.start].decode("utf-8")
    read = _ID_READER.raw_decode
    try:
        at = len(text) - len(text.lstrip(_SPACE))
        if text[at] != "{":
            return None
        at += 1
        while True:
            at = _skip_space(text, at)
            if text[at] != '"':
                return None
            key, at = read(text, at)
            at = _skip_space(text, at)
            if text[at] != ":":
                return None
            at = _skip_space(text, at + 1)
            value, at = read(text, at)
            if key == "id":
                if at >= len(text):
                    return None  # it may go on past the prefix
                return _echoable(value)
            at = _skip_space(text, at)
            if text[at] != ",":
                return None
            at += 1
    except (ValueError, IndexError, RecursionError):
        return None


def _skip_space(text: str, at: int) -> int:
    while text[at] in _SPACE:
        at += 1
    return at


def _echoable(value: Any) -> RequestId:
    if isinstance(value, str) and len(value) <= MAX_REQUEST_ID_LENGTH:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_NUMERIC_ID:
        return value
    return None


__all__ = [
    "BEACON_DOMAIN",
    "BINDING_DOMAIN",
    "ID_PREFIX",
    "INVALID_UPGRADE",
    "ORIGIN_REFUSED",
    "RATE_LIMITED_CODE",
    "STATUS",
    "TOO_LARGE_CODE",
    "TOO_MANY_CONNECTIONS",
    "UNSUPPORTED_VERSION",
    "VERSION",
    "BindingError",
    "FrameTooLargeError",
    "InFlightLimitError",
    "RateLimitedError",
    "Refusal",
    "StreamLaggedError",
    "UnauthenticatedError",
    "binary_error",
    "prefix_id",
    "rate_answer",
    "rate_error",
    "rate_refusal",
    "retry_info",
    "retry_seconds",
]
