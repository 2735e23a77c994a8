"""
The client's one error family: every failure of a call is a L{ClientError},
and its subclass says which kind, so that a caller (the CLI) can say one
clear thing about it without reading tracebacks.
"""

from __future__ import annotations

from typing import Any

from beacon.protocol import ERROR_INFO_TYPE


class ClientError(Exception):
    """Base of every error a client call fails with."""


class TransportError(ClientError):
    """
    The server could not be reached, or the connection broke.

    @ivar address: What was dialled (a socket path or a URL).
    @ivar reason: What went wrong, in a few words (C{"no such socket"},
        C{"connection refused"}, C{"permission denied"} ...).
    """

    def __init__(self, address: str, reason: str, peer: str = "Beacon") -> None:
        self.address = address
        self.reason = reason
        super().__init__(f"cannot reach {peer} at {address}: {reason}")


class InvalidURL(ClientError, ValueError):
    """
    A URL given to the client names no place it speaks to: no scheme, or
    one it does not speak (only C{http}, C{https}, C{ws}, C{wss}, and
    C{unix:///path} where a socket's URL is taken), or no host. Raised
    before any connection is made: a near miss of C{https} is never
    dialled in clear text.

    @ivar url: The URL, as given.
    @ivar problem: What is wrong with it, in a few words.
    @ivar suggestion: The URL it most likely meant (C{https://...} for
        C{htps://...}, C{http://127.0.0.1:8080} for C{127.0.0.1:8080}),
        or None.
    """

    def __init__(self, url: str, problem: str, suggestion: str | None = None) -> None:
        self.url = url
        self.problem = problem
        self.suggestion = suggestion
        text = f"{url}: {problem}" if url else problem
        if suggestion is not None:
            text += f" (did you mean {suggestion}?)"
        super().__init__(text)


class Timeout(ClientError):
    """
    No answer came within the call's timeout.

    @ivar address: What was dialled.
    @ivar seconds: The timeout that passed.
    @ivar phase: Which bound passed: C{"connect"}, C{"answer"} (the first
        byte or event, or a whole unary answer), C{"idle"} (between stream
        events) or C{"command"} (a whole command's bound).
    """

    def __init__(
        self, address: str, seconds: float, phase: str = "answer", peer: str = "Beacon"
    ) -> None:
        self.address = address
        self.seconds = seconds
        self.phase = phase
        if phase == "connect":
            text = f"could not connect to {peer} at {address} within {seconds:g} s"
        elif phase == "idle":
            text = f"the stream from {peer} at {address} was silent for {seconds:g} s"
        else:
            text = f"no answer from {peer} at {address} within {seconds:g} s"
        super().__init__(text)


class HTTPStatusError(ClientError):
    """
    The server answered with an HTTP status that carries no A2A answer: no
    JSON-RPC response, or on the HTTP+JSON binding no result and no A2A
    error (a C{google.rpc.Status} whose reason is not an A2A error's, or
    a body that is no Status at all).

    @ivar status: The HTTP status code.
    @ivar status_name: The Status's C{status} (C{"RESOURCE_EXHAUSTED"} ...),
        when the body was a C{google.rpc.Status}.
    @ivar message: Its C{message} (server text: sanitise before printing).
    @ivar reason: Its C{google.rpc.ErrorInfo} reason, if it has one.
    @ivar details: Its C{details}, as sent.
    """

    def __init__(
        self,
        status: int,
        phrase: str = "",
        *,
        expected: str = "a JSON-RPC answer",
        status_name: str | None = None,
        message: str | None = None,
        reason: str | None = None,
        details: Any = None,
    ) -> None:
        self.status = status
        self.status_name = status_name
        self.message = message
        self.reason = reason
        self.details = details
        text = f"HTTP {status}"
        if phrase:
            text += f" {phrase}"
        if status_name is None and message is None:
            super().__init__(f"the server answered {text} without {expected}")
            return
        said = ", ".join(x for x in (status_name, reason) if x)
        super().__init__(
            f"the server answered {text}: {message or '(no message)'}" + (f" ({said})" if said else "")
        )


class RPCError(ClientError):
    """
    The server answered with an A2A error: a JSON-RPC error object, or on
    the HTTP+JSON binding a C{google.rpc.Status} whose ErrorInfo names an
    A2A error (read as the JSON-RPC error it stands for, so that callers
    see the same code whichever binding carried it).

    @ivar code: The JSON-RPC error code (C{-32001}: unknown task ...).
    @ivar message: The server's message (server text: sanitise before
        printing it).
    @ivar reason: The C{google.rpc.ErrorInfo} reason, if the error has one
        (C{"TASK_NOT_FOUND"} ...).
    @ivar metadata: The ErrorInfo's metadata (string values).
    @ivar data: The error's C{data} member (on HTTP+JSON, the Status's
        C{details}), as sent.
    @ivar http_status: On HTTP+JSON, the HTTP status it came with (the
        Status's C{code} for an error event of a stream); else None.
    @ivar status_name: On HTTP+JSON, the Status's C{status}; else None.
    """

    def __init__(
        self,
        code: int,
        message: str,
        data: Any = None,
        *,
        http_status: int | None = None,
        status_name: str | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status
        self.status_name = status_name
        self.reason: str | None = None
        self.metadata: dict[str, str] = {}
        for detail in data if isinstance(data, list) else []:
            if isinstance(detail, dict) and detail.get("@type") == ERROR_INFO_TYPE:
                reason = detail.get("reason")
                self.reason = reason if isinstance(reason, str) else None
                metadata = detail.get("metadata")
                if isinstance(metadata, dict):
                    self.metadata = {
                        k: v for k, v in metadata.items() if isinstance(v, str)
                    }
                break
        if http_status is None:
            super().__init__(f"{message} (JSON-RPC error {code})")
        else:
            super().__init__(f"{message} (A2A error {code}, HTTP {http_status})")


class GRPCStatusError(ClientError):
    """
    On the gRPC binding, the server answered a call with a status that
    names no A2A error (no C{google.rpc.ErrorInfo} with an A2A reason in
    C{grpc-status-details-bin}): C{UNAUTHENTICATED}, C{RESOURCE_EXHAUSTED},
    C{UNIMPLEMENTED} ... (C{UNAVAILABLE} and C{DEADLINE_EXCEEDED} are a
    L{TransportError} and a L{Timeout}).

    @ivar status_name: The gRPC status code's name (C{"UNAUTHENTICATED"} ...).
    @ivar message: The status's message (server text: sanitise before
        printing).
    @ivar reason: Its C{google.rpc.ErrorInfo} reason, if it has one
        (Beacon's C{RATE_LIMITED} ..., or C{TOO_LARGE} for a request over
        the server's message limit).
    @ivar metadata: The ErrorInfo's metadata (C{limit} for C{TOO_LARGE}).
    @ivar details: The status's details as ProtoJSON (C{@type} ...).
    """

    def __init__(
        self,
        status_name: str,
        message: str,
        *,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
        details: Any = None,
    ) -> None:
        self.status_name = status_name
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})
        self.details = details
        said = f" ({reason})" if reason else ""
        super().__init__(f"the server answered gRPC {status_name}: {message or '(no message)'}{said}")


class InvalidResponse(ClientError):
    """
    The server answered something that is not a valid answer to the call:
    not JSON, the wrong JSON-RPC id, too large, the wrong content type.
    """


class UnverifiedCard(ClientError):
    """
    The agent card carries no signature that one of the trusted keys
    verifies (it is unsigned, or signed by another key, or changed since).

    @ivar url: Where the card was read from.
    @ivar problem: What was found.
    """

    def __init__(self, url: str, problem: str) -> None:
        self.url = url
        self.problem = problem
        super().__init__(f"the card at {url} is not trusted: {problem}")


class InvalidCard(ClientError):
    """
    The agent card could not be used: not JSON, not an object, or missing
    (or mistyping) what A2A 1.0 requires of a card.

    @ivar url: Where the card was read from.
    """

    def __init__(self, url: str, problem: str) -> None:
        self.url = url
        self.problem = problem
        super().__init__(f"invalid agent card at {url}: {problem}")


class NoCompatibleInterface(ClientError):
    """
    No interface of the card is one this client can use (its binding is not
    implemented here, its protocolVersion is not 1.x, or a unix socket
    interface without a configured socket path).

    @ivar skipped: One line per interface, saying why it was skipped.
    """

    def __init__(self, skipped: list[str]) -> None:
        self.skipped = skipped
        why = "; ".join(skipped) if skipped else "the card lists no interfaces"
        super().__init__(f"no interface of the card can be used: {why}")


class RequestTooLarge(HTTPStatusError):
    """
    The server refused the request as too large (HTTP 413).

    @ivar limit: The largest request it takes, in bytes, when its answer
        said (Beacon's does: C{{"error": {"code": "too_large", ...}}}).
    """

    def __init__(self, limit: int | None, phrase: str = "") -> None:
        super().__init__(413, phrase)
        self.limit = limit
