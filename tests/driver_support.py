"""
What every driver of the behaviour suite (C{tests/bindings.py}) stands
on: the suite's names for the bindings and its fixed addresses, the
L{Answer} and L{Stream} a driver returns, the L{Driver} each binding's
driver is, and the A2A errors by the reason their ErrorInfo names.

The drivers themselves, and the L{bindings.World} they drive, are in
C{tests/bindings.py} (and the gRPC driver in C{tests/grpc_driver.py}).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from beacon.protocol import (
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)

if TYPE_CHECKING:
    from bindings import World

#: The clock's time when a world is made (2027-01-15T08:00:00Z).
START = 1_800_000_000
PUBLIC_URL = "https://beacon.example"
#: The public peers' address, on every public binding.
PEER = "192.0.2.7"
#: Where the operator socket would be; only named, never bound.
SOCKET_PATH = "/run/beacon-behaviour/operator.sock"

PUBLIC_BINDINGS = ("jsonrpc", "rest", "websocket", "websocket-listener", "grpc")
OPERATOR_BINDINGS = ("unix", "bearer", "rest-unix", "rest-bearer")
ALL_BINDINGS = PUBLIC_BINDINGS + OPERATOR_BINDINGS
#: The bindings of JSON-RPC envelopes (ids, notifications, batches).
ENVELOPE_BINDINGS = tuple(b for b in ALL_BINDINGS if not b.startswith("rest") and b != "grpc")

Headers = Sequence[tuple[str, str]]


@dataclass
class Answer:
    """
    What a binding answered to one request.

    @ivar response: The JSON-RPC response object; None when nothing
        answered (a notification), or when the transport refused the
        request before JSON-RPC (then see C{refusal}).
    @ivar echoed: The extension URIs the binding echoed in
        C{A2A-Extensions}.
    @ivar refusal: An HTTP transport refusal: its status and JSON body
        (401 without a good credential, say); None otherwise.
    """

    response: Any
    echoed: frozenset[str] = frozenset()
    refusal: tuple[int, Any] | None = None


class Stream(ABC):
    """
    A streaming request's answer: its events as JSON-RPC responses, until
    it ends (or fails with an error response).
    """

    echoed: frozenset[str]

    @abstractmethod
    def events(self) -> list[Any]:
        """The JSON-RPC responses that arrived since the last call."""

    @property
    @abstractmethod
    def ended(self) -> bool:
        """Whether the stream has ended (normally or with an error)."""

    @abstractmethod
    def close(self) -> None:
        """The client goes away."""


def body_of(request: Any) -> bytes:
    """What a driver sends for C{request}: bytes as they are, a JSON value as UTF-8 JSON."""
    return request if isinstance(request, bytes) else json.dumps(request).encode("utf-8")


class Driver(ABC):
    """
    One binding, driven from its wire format.

    @cvar name: The binding's name in the suite.
    @cvar policy: C{"public"} or C{"operator"}: the policy behind it.
    @cvar door: The binding name recorded in a call's context (and so in a
        stored submission's C{door}).
    """

    name: ClassVar[str]
    policy: ClassVar[str]
    door: ClassVar[str]

    def __init__(self, world: World) -> None:
        self.world = world

    @abstractmethod
    def call(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        query_version: str | None = None,
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Answer:
        """
        Send one request (a JSON value, or raw bytes sent as they are) with
        these service parameters; return what answered it.
        """

    @abstractmethod
    def stream(
        self,
        request: Any,
        *,
        version: str | None = "1.0",
        extensions: Iterable[str] = (),
        headers: Headers = (),
    ) -> Stream | Answer:
        """
        Send a streaming request; return its L{Stream}, or the L{Answer}
        when it was answered without one (an error).
        """

    @property
    def source(self) -> str:
        """The caller's name as the binding's context records it."""
        return PEER

    def expresses(self, request: Any) -> bool:
        """Whether this binding can say C{request} at all (see L{RESTDriver})."""
        return True


#: Each A2A error by its ErrorInfo reason: its JSON-RPC code, HTTP status
#: and google.rpc code.
A2A_ERRORS: dict[str, tuple[int, int, str]] = {
    cls.reason: (cls.code, cls.http_status, cls.grpc_status)
    for cls in (
        JSONParseError,
        InvalidRequestError,
        MethodNotFoundError,
        InvalidParamsError,
        InternalError,
        TaskNotFoundError,
        TaskNotCancelableError,
        PushNotificationNotSupportedError,
        UnsupportedOperationError,
        ContentTypeNotSupportedError,
        ExtendedAgentCardNotConfiguredError,
        VersionNotSupportedError,
    )
}
