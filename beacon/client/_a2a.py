"""
The outbound A2A 1.0 client: discover an agent's card, choose an
interface, and call the eleven methods over JSON-RPC (HTTP or HTTPS),
HTTP+JSON (HTTP or HTTPS), the WebSocket binding, a unix socket or gRPC
(with grpcio installed: the C{grpc} extra).

    card = await fetch_card(reactor, "https://agent.example")
    client = A2AClient.for_card(reactor, card)
    task = await client.get_task("t-1")
    async for event in client.send_streaming_message(message):
        ...
    outcome = await client.send_text("hello")   # never fails

Time (defaults in L{Timeouts}, all on the injected clock): C{connect}
bounds a connection (TCP, TLS, the WebSocket handshake); C{response} a
unary call from the call to its whole answer, and a stream from the call
to its first event; C{idle} the gap between two events of a stream.
Cancelling a call's Deferred (or a stream) aborts its request. Nothing is
retried unless C{retries} is set, and then only the idempotent reads
(GetTask, ListTasks, the push config reads, GetExtendedAgentCard, the card)
and only after a connection failure or a timeout.

Every failure is a L{ClientError}; results are the ProtoJSON dicts the
agent sent (its text: sanitise before showing it).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.client import Agent
from twisted.web.iweb import IAgent, IPolicyForHTTPS

from beacon.interfaces import IBeaconReactor
from beacon.client._card import AgentCard, card_url, check_card_signature, parse_card
from beacon.client._errors import (
    ClientError,
    HTTPStatusError,
    InvalidCard,
    InvalidResponse,
    Timeout,
    TransportError,
)
from beacon.client._grpc import GRPCTransport
from beacon.signing import VerificationKey
from beacon.client._jsonrpc import (
    HTTPTransport,
    headers_for,
    json_or_none,
    phrase,
    raise_rpc_error,
)
from beacon.client._rest import RESTTransport
from beacon.client._select import Selected, select_interface
from beacon.client._sse import DEFAULT_MAX_EVENT
from beacon.client._stream import ResponseStream
from beacon.client._url import check_url
from beacon.client._transport import (
    Deadline,
    DialFactory,
    FixedEndpointFactory,
    TimedEndpoint,
    check_socket_path,
    client_error,
    read_body,
    unix_endpoint,
)
from beacon.client._websocket import DEFAULT_MAX_MESSAGE, WebSocketTransport
T = TypeVar("T")

#: The largest agent card read: 1 MiB.
DEFAULT_MAX_CARD = 1024 * 1024
#: The largest unary answer read: 16 MiB.
DEFAULT_MAX_BODY = 16 * 1024 * 1024
#: The URL of requests over a unix socket (its host means nothing there).
SOCKET_URL = "http://localhost/"

#: The methods that only read, and so may be retried.
IDEMPOTENT = frozenset(
    {
        "GetTask",
        "ListTasks",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "GetExtendedAgentCard",
    }
)


@dataclass(frozen=True)
class Timeouts:
    """
    The client's time bounds, in seconds.

    @ivar connect: Opening a connection (TCP or unix, TLS, the WebSocket
        handshake). Default 10.
    @ivar response: A unary call, from the call to its whole answer; a
        stream, from the call to its first event. Default 30.
    @ivar idle: Between two events of a stream. Default 60.
    """

    connect: float = 10.0
    response: float = 30.0
    idle: float = 60.0

    def __post_init__(self) -> None:
        for name in ("connect", "response", "idle"):
            if not getattr(self, name) > 0:
                raise ValueError(f"the {name} timeout must be positive")


@dataclass(frozen=True)
class Limits:
    """
    The most the client reads, in bytes: a card, a unary answer, one SSE
    event, one WebSocket message.
    """

    card: int = DEFAULT_MAX_CARD
    body: int = DEFAULT_MAX_BODY
    event: int = DEFAULT_MAX_EVENT
    message: int = DEFAULT_MAX_MESSAGE


@dataclass(frozen=True)
class Outcome:
    """
    What L{A2AClient.send_text} came to. C{ok}: the agent answered, with a
    C{message} (whose text parts are in C{text}) or a C{task} (and C{text}
    holds the text of its status message and artifacts, if any). Not
    C{ok}: C{error} says why.
    """

    ok: bool
    text: str | None = None
    task: Mapping[str, Any] | None = None
    message: Mapping[str, Any] | None = None
    error: ClientError | None = None


def text_message(text: str, data: Any = None, *, context_id: str | None = None, task_id: str | None = None) -> dict[str, Any]:
    """A user Message with one text part (and one data part, if C{data} is given)."""
    parts: list[dict[str, Any]] = []
    if text:
        parts.append({"text": text})
    if data is not None:
        parts.append({"data": data, "mediaType": "application/json"})
    message: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
    if context_id:
        message["contextId"] = context_id
    if task_id:
        message["taskId"] = task_id
    return message


def texts(parts: Any) -> list[str]:
    """The text parts among C{parts}."""
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)] if isinstance(parts, list) else []


def outcome_of(result: Any) -> Outcome:
    """The L{Outcome} of a SendMessage result."""
    if isinstance(result, dict) and isinstance(result.get("message"), dict):
        message = result["message"]
        return Outcome(True, text="\n".join(texts(message.get("parts"))), message=message)
    if isinstance(result, dict) and isinstance(result.get("task"), dict):
        task = result["task"]
        found: list[str] = []
        status = task.get("status")
        if isinstance(status, dict) and isinstance(status.get("message"), dict):
            found += texts(status["message"].get("parts"))
        for artifact in task.get("artifacts") or []:
            if isinstance(artifact, dict):
                found += texts(artifact.get("parts"))
        return Outcome(True, text="\n".join(found) if found else None, task=task)
    return Outcome(False, error=InvalidResponse("SendMessage answered neither a task nor a message"))


def _reactor_clock(reactor: IBeaconReactor, clock: IReactorTime | None) -> IReactorTime:
    return clock if clock is not None else reactor


def _socket_of(url: str) -> str | None:
    """The path of a C{unix:///path} URL, else None."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    return None


def _http_client(
    reactor: IBeaconReactor,
    clock: IReactorTime,
    timeouts: Timeouts,
    socket_path: str | None,
    tls_policy: IPolicyForHTTPS | None,
    agent: IAgent | None,
) -> HTTPClient:
    if agent is not None:
        return HTTPClient(agent)
    if socket_path is not None:
        endpoint = unix_endpoint(reactor, socket_path, timeouts.connect)
        factory = FixedEndpointFactory(
            lambda: TimedEndpoint(endpoint(), clock, timeouts.connect, socket_path)
        )
        return HTTPClient(Agent.usingEndpointFactory(reactor, factory))
    return HTTPClient(
        Agent.usingEndpointFactory(reactor, DialFactory(reactor, clock, timeouts.connect, tls_policy))
    )


async def _retrying(attempt: Callable[[], Deferred[T]], retries: int) -> T:
    for remaining in range(retries, -1, -1):
        try:
            return await attempt()
        except (TransportError, Timeout):
            if remaining == 0:
                raise
    raise AssertionError("unreachable")


def fetch_card(
    reactor: IBeaconReactor,
    url: str,
    *,
    clock: IReactorTime | None = None,
    timeouts: Timeouts = Timeouts(),
    max_card: int = DEFAULT_MAX_CARD,
    socket_path: str | None = None,
    headers: Mapping[str, str] | None = None,
    tls_policy: IPolicyForHTTPS | None = None,
    agent: IAgent | None = None,
    retries: int = 0,
    verify: Sequence[VerificationKey] | None = None,
) -> Deferred[AgentCard]:
    """
    Fetch and parse an agent's card.

    @param url: The agent's base URL (the card is its
        C{/.well-known/agent-card.json}), the card's own URL (ending in
        C{.json}), or C{unix:///path} (the card on that socket): its
        scheme is C{http}, C{https}, C{ws} or C{wss} (C{https} and C{wss}
        over TLS), or C{unix}.
    @param socket_path: Fetch over this unix socket (the URL's host then
        means nothing).
    @raise InvalidURL: C{url} is none of those (raised at once, before any
        connection: see L{check_url}).
    @raise HTTPStatusError: The card was answered with another status than 200.
    @param verify: When given, the card must be signed by one of these
        keys (L{check_card_signature}).
    @raise InvalidCard: It is not JSON, not an object, or not a 1.0 card.
    @raise UnverifiedCard: C{verify} is given and no signature of the card
        is valid under its keys.
    @raise Timeout, TransportError: As for every call.
    """
    url = check_url(url)
    clock = _reactor_clock(reactor, clock)
    unix = _socket_of(url)
    if unix is not None:
        socket_path = socket_path or unix
        url = SOCKET_URL
    if socket_path is not None:
        socket_path = os.path.abspath(socket_path)
        check_socket_path(socket_path)
    target = card_url(url)
    address = socket_path or target
    http = _http_client(reactor, clock, timeouts, socket_path, tls_policy, agent)

    async def fetch() -> AgentCard:
        request_headers = headers_for((), dict(headers or {}), b"application/json")
        try:
            response = await http.request(
                "GET", target, headers=request_headers, allow_redirects=False, unbuffered=True
            )
        except Exception:
            raise client_error(Failure(), address, socket_path is not None, "the agent") from None
        chunks: list[bytes] = []
        try:
            await read_body(response, chunks.append, max_card, address).done
        except InvalidResponse:
            raise InvalidCard(address, f"the card is larger than {max_card} bytes") from None
        body = b"".join(chunks)
        document = json_or_none(body)
        if response.code != 200:
            raise_rpc_error(document)
            raise HTTPStatusError(response.code, phrase(response))
        if document is None:
            raise InvalidCard(address, "the card is not valid JSON")
        card = parse_card(document, address)
        if verify is not None:
            check_card_signature(card, verify, address)
        return card

    def attempt() -> Deferred[AgentCard]:
        return Deadline(
            clock, timeouts.response, lambda: Timeout(address, timeouts.response, "answer", "the agent")
        ).start(Deferred.fromCoroutine(fetch()))

    return Deferred.fromCoroutine(_retrying(attempt, retries))


class A2AClient:
    """
    Calls one agent over one chosen interface. Make it with L{for_card}
    (from a card already fetched) or L{discover} (fetch, then choose).

    Each method returns a L{Deferred} (or, for the two streaming methods,
    an L{ResponseStream}) that fails only with a L{ClientError}; cancelling it
    aborts the request.
    """

    def __init__(
        self,
        reactor: IBeaconReactor,
        selected: Selected,
        *,
        card: AgentCard | None = None,
        clock: IReactorTime | None = None,
        timeouts: Timeouts = Timeouts(),
        limits: Limits = Limits(),
        extensions: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        retries: int = 0,
        tls_policy: IPolicyForHTTPS | None = None,
        agent: IAgent | None = None,
        grpc_credentials: Any = None,
    ) -> None:
        """
        @param reactor: Connects (and, unless C{clock} is given, times).
        @param selected: The interface (see L{select_interface}).
        @param card: The card it came from.
        @param extensions: Extension URIs asked for on every call
            (C{A2A-Extensions}).
        @param headers: More headers on every request (C{Authorization} ...).
        @param retries: How many times an idempotent read is tried again
            after a connection failure or a timeout (default: never).
        @param tls_policy: How HTTPS and WSS are verified (default:
            L{BrowserLikePolicyForHTTPS}, as treq's own agent).
        @param agent: An L{IAgent} for the HTTP bindings (tests, embedders);
            default: one that dials the interface (or the configured socket).
        @param grpc_credentials: For the gRPC binding, the
            C{grpc.ChannelCredentials} to dial with (TLS whatever the url
            says); default: TLS with the platform's trust roots for an
            C{https://} url, plaintext for C{host:port} or C{http://}.
        @raise ClientError: The gRPC binding without grpcio installed (the
            error names the extra to install).
        """
        if retries < 0:
            raise ValueError("retries must not be negative")
        self.card = card
        self.selected = selected
        self.address = selected.address
        self._clock = _reactor_clock(reactor, clock)
        self._timeouts = timeouts
        self._extensions = tuple(extensions)
        self._retries = retries
        self._ids = itertools.count(1)
        extra = dict(headers or {})
        self._transport: HTTPTransport | RESTTransport | WebSocketTransport | GRPCTransport
        if selected.kind == "grpc":
            # grpcio is imported now (it is optional: GRPCTransport says
            # which extra to install when it is missing).
            self._transport = GRPCTransport(
                reactor,
                selected.interface.url,
                clock=self._clock,
                address=self.address,
                connect_timeout=timeouts.connect,
                response_timeout=timeouts.response,
                idle_timeout=timeouts.idle,
                max_response=limits.body,
                headers=extra,
                credentials=grpc_credentials,
            )
        elif selected.kind == "http+json":
            self._transport = RESTTransport(
                _http_client(reactor, self._clock, timeouts, None, tls_policy, agent),
                selected.interface.url,
                clock=self._clock,
                address=self.address,
                response_timeout=timeouts.response,
                idle_timeout=timeouts.idle,
                max_response=limits.body,
                max_event=limits.event,
                headers=extra,
            )
        elif selected.kind == "websocket":
            self._transport = WebSocketTransport(
                reactor,
                selected.interface.url,
                clock=self._clock,
                dial=DialFactory(reactor, self._clock, timeouts.connect, tls_policy),
                connect_timeout=timeouts.connect,
                response_timeout=timeouts.response,
                idle_timeout=timeouts.idle,
                max_message=limits.message,
                headers=extra,
            )
        else:
            unix = selected.kind == "unix"
            socket_path = None
            if unix:
                socket_path = os.path.abspath(selected.address)
                check_socket_path(socket_path)
                self.address = socket_path
            http = _http_client(reactor, self._clock, timeouts, socket_path, tls_policy, agent)
            self._transport = HTTPTransport(
                http,
                SOCKET_URL if unix else selected.interface.url,
                clock=self._clock,
                address=self.address,
                unix=unix,
                response_timeout=timeouts.response,
                idle_timeout=timeouts.idle,
                max_response=limits.body,
                max_event=limits.event,
                headers=extra,
            )

    @classmethod
    def for_card(
        cls,
        reactor: IBeaconReactor,
        card: AgentCard,
        *,
        preference: Sequence[str] | None = None,
        socket_path: str | None = None,
        **kwargs: Any,
    ) -> A2AClient:
        """
        A client of the interface of C{card} that L{select_interface}
        chooses.

        @param preference: The bindings to consider, in order of
            preference (C{["http+json", "jsonrpc"]} ...), over the card's
            order; default: the card's first interface this client can use
            (of any binding; unix only with C{socket_path}, gRPC only with
            grpcio installed).
        @raise NoCompatibleInterface: None can be used.
        @raise ValueError: C{preference} names a binding this client does
            not implement.
        """
        selected = select_interface(card, preference, socket_path=socket_path)
        return cls(reactor, selected, card=card, **kwargs)

    @classmethod
    def discover(
        cls,
        reactor: IBeaconReactor,
        url: str,
        *,
        preference: Sequence[str] | None = None,
        socket_path: str | None = None,
        **kwargs: Any,
    ) -> Deferred[A2AClient]:
        """
        Fetch the card at C{url} (see L{fetch_card}: a C{unix:///path} URL
        fetches it over that socket, which is then the configured socket),
        then choose an interface (C{preference}: as for L{for_card}).
        With C{verify} (trusted keys), the card must be signed by one of
        them, else L{UnverifiedCard} and nothing is sent.

        @raise InvalidURL: C{url} is not one the client speaks to (at once,
            before any connection).
        """
        url = check_url(url)
        if socket_path is None:
            socket_path = _socket_of(url)
        card_kwargs: dict[str, Any] = {
            k: kwargs[k] for k in ("clock", "timeouts", "headers", "tls_policy", "agent", "retries") if k in kwargs
        }
        card_kwargs["verify"] = kwargs.pop("verify", None)
        if "limits" in kwargs:
            card_kwargs["max_card"] = kwargs["limits"].card
        card_socket = socket_path if _socket_of(url) is not None else None

        async def discover() -> A2AClient:
            card = await fetch_card(reactor, url, socket_path=card_socket, **card_kwargs)
            return cls.for_card(reactor, card, preference=preference, socket_path=socket_path, **kwargs)

        return Deferred.fromCoroutine(discover())

    # The plumbing.

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        tenant = self.selected.tenant
        if tenant and "tenant" not in params:
            params = {"tenant": tenant, **params}
        return params

    def _extensions_for(self, extensions: Sequence[str] | None) -> tuple[str, ...]:
        if not extensions:
            return self._extensions
        return tuple(dict.fromkeys((*self._extensions, *extensions)))

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        extensions: Sequence[str] | None = None,
        check: Callable[[Any], bool] | None = None,
    ) -> Deferred[Any]:
        """
        Call C{method} (any unary method, an extension's too) with C{params}.

        @return: Its result, as sent.
        """
        wanted = self._extensions_for(extensions)
        body = self._params(dict(params or {}))

        def attempt() -> Deferred[Any]:
            return self._transport.call(next(self._ids), method, body, wanted)

        retries = self._retries if method in IDEMPOTENT else 0

        async def call() -> Any:
            result = await _retrying(attempt, retries)
            if check is not None and not check(result):
                raise InvalidResponse(f"the result of {method} is not what the method answers")
            return result

        return Deferred.fromCoroutine(call())

    def stream(
        self, method: str, params: dict[str, Any], *, extensions: Sequence[str] | None = None
    ) -> ResponseStream:
        """Call a streaming method; its StreamResponse events."""
        return self._transport.stream(
            next(self._ids), method, self._params(dict(params)), self._extensions_for(extensions)
        )

    def close(self) -> Deferred[None]:
        """Close what stays open (a WebSocket connection, a gRPC channel)."""
        return self._transport.close()

    # The eleven methods.

    def send_message(
        self,
        message: Mapping[str, Any],
        configuration: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        extensions: Sequence[str] | None = None,
    ) -> Deferred[dict[str, Any]]:
        """C{SendMessage}: a SendMessageResponse, C{{"task": ...}} or C{{"message": ...}}."""
        return self.call(
            "SendMessage", _send_params(message, configuration, metadata),
            extensions=extensions, check=_is_send_response,
        )

    def send_streaming_message(
        self,
        message: Mapping[str, Any],
        configuration: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        extensions: Sequence[str] | None = None,
    ) -> ResponseStream:
        """C{SendStreamingMessage}: StreamResponse events."""
        return self.stream(
            "SendStreamingMessage", _send_params(message, configuration, metadata), extensions=extensions
        )

    def get_task(
        self, task_id: str, history_length: int | None = None, *, extensions: Sequence[str] | None = None
    ) -> Deferred[dict[str, Any]]:
        """C{GetTask}: the Task."""
        params: dict[str, Any] = {"id": task_id}
        if history_length is not None:
            params["historyLength"] = history_length
        return self.call("GetTask", params, extensions=extensions, check=_is_task)

    def list_tasks(self, *, extensions: Sequence[str] | None = None, **filters: Any) -> Deferred[dict[str, Any]]:
        """
        C{ListTasks}: one page. C{filters} are the request's camelCase
        members (C{contextId}, C{status}, C{pageSize}, C{pageToken},
        C{historyLength}, C{statusTimestampAfter}, C{includeArtifacts}).
        """
        params = {k: v for k, v in filters.items() if v is not None}
        return self.call("ListTasks", params, extensions=extensions, check=_is_page)

    def cancel_task(
        self, task_id: str, metadata: Mapping[str, Any] | None = None, *, extensions: Sequence[str] | None = None
    ) -> Deferred[dict[str, Any]]:
        """C{CancelTask}: the Task in its new state."""
        params: dict[str, Any] = {"id": task_id}
        if metadata is not None:
            params["metadata"] = dict(metadata)
        return self.call("CancelTask", params, extensions=extensions, check=_is_task)

    def subscribe_to_task(self, task_id: str, *, extensions: Sequence[str] | None = None) -> ResponseStream:
        """C{SubscribeToTask}: the Task's snapshot, then its updates."""
        return self.stream("SubscribeToTask", {"id": task_id}, extensions=extensions)

    def create_task_push_notification_config(
        self, config: Mapping[str, Any], *, extensions: Sequence[str] | None = None
    ) -> Deferred[dict[str, Any]]:
        """C{CreateTaskPushNotificationConfig}: C{config} is a TaskPushNotificationConfig."""
        return self.call("CreateTaskPushNotificationConfig", dict(config), extensions=extensions, check=_is_object)

    def get_task_push_notification_config(
        self, task_id: str, config_id: str, *, extensions: Sequence[str] | None = None
    ) -> Deferred[dict[str, Any]]:
        """C{GetTaskPushNotificationConfig}."""
        return self.call(
            "GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id},
            extensions=extensions, check=_is_object,
        )

    def list_task_push_notification_configs(
        self,
        task_id: str,
        page_size: int | None = None,
        page_token: str | None = None,
        *,
        extensions: Sequence[str] | None = None,
    ) -> Deferred[dict[str, Any]]:
        """C{ListTaskPushNotificationConfigs}."""
        params: dict[str, Any] = {"taskId": task_id}
        if page_size is not None:
            params["pageSize"] = page_size
        if page_token is not None:
            params["pageToken"] = page_token
        return self.call("ListTaskPushNotificationConfigs", params, extensions=extensions, check=_is_object)

    def delete_task_push_notification_config(
        self, task_id: str, config_id: str, *, extensions: Sequence[str] | None = None
    ) -> Deferred[Any]:
        """C{DeleteTaskPushNotificationConfig}: fires with None (or C{{}})."""
        return self.call(
            "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config_id}, extensions=extensions
        )

    def get_extended_agent_card(self, *, extensions: Sequence[str] | None = None) -> Deferred[AgentCard]:
        """C{GetExtendedAgentCard}, parsed as a card."""

        async def get() -> AgentCard:
            document = await self.call("GetExtendedAgentCard", {}, extensions=extensions)
            return parse_card(document, f"{self.address} (GetExtendedAgentCard)")

        return Deferred.fromCoroutine(get())

    # Convenience.

    def send_text(
        self,
        text: str,
        *,
        data: Any = None,
        configuration: Mapping[str, Any] | None = None,
        extensions: Sequence[str] | None = None,
    ) -> Deferred[Outcome]:
        """
        Send C{text} (and a data part, if C{data} is given) as a user
        message. Never fails: the L{Outcome} says what happened.
        """

        async def send() -> Outcome:
            if not text and data is None:
                return Outcome(False, error=ClientError("there is nothing to send"))
            try:
                result = await self.send_message(
                    text_message(text, data), configuration, extensions=extensions
                )
            except ClientError as e:
                return Outcome(False, error=e)
            except Exception as e:  # noqa: BLE001 - the promise is: never errback
                return Outcome(False, error=ClientError(f"internal error: {type(e).__name__}: {e}"))
            return outcome_of(result)

        return Deferred.fromCoroutine(send())


def _send_params(
    message: Mapping[str, Any], configuration: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None
) -> dict[str, Any]:
    params: dict[str, Any] = {"message": dict(message)}
    if configuration is not None:
        params["configuration"] = dict(configuration)
    if metadata is not None:
        params["metadata"] = dict(metadata)
    return params


def _is_object(result: Any) -> bool:
    return isinstance(result, dict)


def _is_task(result: Any) -> bool:
    return isinstance(result, dict) and isinstance(result.get("id"), str)


def _is_page(result: Any) -> bool:
    return isinstance(result, dict) and isinstance(result.get("tasks", []), list)


def _is_send_response(result: Any) -> bool:
    return isinstance(result, dict) and (
        isinstance(result.get("task"), dict) or isinstance(result.get("message"), dict)
    )

