"""
The client's one error family: every failure of a call is a L{ClientError},
and its subclass says which kind, so that a caller (the CLI) can say one
clear thing about it without reading tracebacks.
"""

from __future__ import annotations

from typing import Any

#: The C{@type} of a C{google.rpc.ErrorInfo} detail.
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"


class ClientError(Exception):
    """Base of every error an operator client call fails with."""


class TransportError(ClientError):
    """
    The server could not be reached, or the connection broke.

    @ivar address: What was dialled (a socket path or a URL).
    @ivar reason: What went wrong, in a few words (C{"no such socket"},
        C{"connection refused"}, C{"permission denied"} ...).
    """

    def __init__(self, address: str, reason: str) -> None:
        self.address = address
        self.reason = reason
        super().__init__(f"cannot reach Beacon at {address}: {reason}")


class Timeout(ClientError):
    """
    No answer came within the call's timeout.

    @ivar address: What was dialled.
    @ivar seconds: The timeout that passed.
    """

    def __init__(self, address: str, seconds: float) -> None:
        self.address = address
        self.seconds = seconds
        super().__init__(f"no answer from Beacon at {address} within {seconds:g} s")


class HTTPStatusError(ClientError):
    """
    The server answered with an HTTP status that carries no JSON-RPC answer.

    @ivar status: The HTTP status code.
    """

    def __init__(self, status: int, phrase: str = "") -> None:
        self.status = status
        text = f"HTTP {status}"
        if phrase:
            text += f" {phrase}"
        super().__init__(f"the server answered {text} without a JSON-RPC answer")


class RPCError(ClientError):
    """
    The server answered with a JSON-RPC error object.

    @ivar code: The JSON-RPC error code (C{-32001}: unknown task ...).
    @ivar message: The server's message (server text: sanitise before
        printing it).
    @ivar reason: The C{google.rpc.ErrorInfo} reason, if the error has one
        (C{"TASK_NOT_FOUND"} ...).
    @ivar metadata: The ErrorInfo's metadata (string values).
    @ivar data: The error's C{data} member, as sent.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code = code
        self.message = message
        self.data = data
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
        super().__init__(f"{message} (JSON-RPC error {code})")


class InvalidResponse(ClientError):
    """
    The server answered something that is not a valid answer to the call:
    not JSON, the wrong JSON-RPC id, too large, the wrong content type.
    """
