"""
The operator client: the A2A JSON-RPC binding over the operator's unix
socket (agentd's), or over the loopback bearer door, for the people who read
the inbox (and for the C{beacon review} commands).

Wire contract (what this client sends)::

    POST /  HTTP/1.1                   one JSON-RPC 2.0 request, a fresh id
    A2A-Version: 1.0                   on every request
    A2A-Extensions: <uri>              for the extension methods
    Authorization: Bearer <token>      on the bearer door only
    GET /.well-known/agent-card.json   the operator card

It dials only what it was configured with: the socket path, or the bearer
door's host and port. Every call is bounded by C{timeout} on the injected
clock (connection and whole answer; for L{OperatorClient.follow}, connection
and the stream's headers). A JSON-RPC error is read from the body whatever
the HTTP status, so a 401 with a JSON-RPC body is an L{RPCError} -31401.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from treq.client import HTTPClient
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.client import Agent
from twisted.web.http_headers import Headers
from twisted.web.iweb import IResponse

from beacon.interfaces import IBeaconReactor
from beacon.client._errors import (
    ClientError,
    HTTPStatusError,
    InvalidResponse,
    Timeout,
    TransportError,
)
from beacon.client._jsonrpc import A2A_VERSION
from beacon.client._jsonrpc import json_or_none as _json_or_none
from beacon.client._jsonrpc import phrase as _phrase
from beacon.client._jsonrpc import raise_rpc_error as _raise_rpc_error
from beacon.client._jsonrpc import request_body as _request_body
from beacon.client._jsonrpc import rpc_error as _rpc_error
from beacon.client._sse import DEFAULT_MAX_EVENT, SSEReader
from beacon.client._transport import (
    BodyReader,
    Deadline,
    FixedEndpointFactory,
    check_socket_path,
    read_body,
    tcp_endpoint,
    transport_error,
    unix_endpoint,
)
from beacon.protocol import JSONParseError, loads
from beacon.protocol.query import TaskQuery, params_of

T = TypeVar("T")

#: Beacon's review extension (C{beacon.review.Decide}).
REVIEW_EXTENSION = "https://beacon.unownedminds.com/extensions/review/v1"
#: Beacon's inbox-events extension (C{beacon.inbox.Follow}).
INBOX_EVENTS_EXTENSION = "https://beacon.unownedminds.com/extensions/inbox-events/v1"

#: Seconds a call may take (for a stream: until its headers) by default.
DEFAULT_TIMEOUT = 10.0
#: The largest non-streaming answer read: 32 MiB (a page of 100 tasks with
#: their messages fits).
DEFAULT_MAX_RESPONSE = 32 * 1024 * 1024
#: How many stream events wait for a slow consumer before reading pauses.
MAX_QUEUED_EVENTS = 100

#: The URL put on requests over the socket; its host means nothing there.
_SOCKET_URL = "http://localhost/"
_CARD_PATH = ".well-known/agent-card.json"
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain"}


@dataclass(frozen=True)
class Discovery:
    """
    The bearer door's discovery file: where the door is and its token.
    """

    url: str
    token: str


def read_discovery_file(path: str) -> Discovery:
    """
    Read the bearer door's discovery file (C{<data>/operator-http.json}).

    @raise TransportError: It cannot be read.
    @raise InvalidResponse: It does not hold C{{"url": ..., "token": ...}}.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(65536)
    except FileNotFoundError:
        raise TransportError(
            path, "no such discovery file (is [operator] http set and Beacon running?)"
        ) from None
    except PermissionError:
        raise TransportError(path, "permission denied") from None
    except OSError as e:
        raise TransportError(path, (e.strerror or str(e)).lower()) from None
    try:
        document = loads(raw)
    except JSONParseError:
        document = None
    if not (
        isinstance(document, dict)
        and isinstance(document.get("url"), str)
        and isinstance(document.get("token"), str)
    ):
        raise InvalidResponse(f"{path} is not a Beacon discovery file")
    return Discovery(document["url"], document["token"])


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _Bound(clock: IReactorTime, seconds: float, address: str) -> Deadline:
    """Bounds one call by C{seconds}; an expired call is a L{Timeout}."""
    return Deadline(clock, seconds, lambda: Timeout(address, seconds))


class Feed:
    """
    A live stream of StreamResponse dicts (C{{"task": ...}} or
    C{{"statusUpdate": ...}}), read incrementally. Iterate it with
    C{async for}; call L{cancel} to stop early (it closes the connection).

    The iteration ends when the server ends the stream; it raises
    L{RPCError} when the stream ends with a JSON-RPC error,
    L{InvalidResponse} for an event that is not valid (or too large), and
    L{TransportError} when the connection breaks.
    """

    def __init__(self, request_id: int, address: str, max_event: int = DEFAULT_MAX_EVENT) -> None:
        self._id = request_id
        self._address = address
        self._max_event = max_event
        self._events: deque[dict[str, Any]] = deque()
        self._waiting: Deferred[dict[str, Any] | None] | None = None
        self._reader: BodyReader | None = None
        self._end: Failure | None = None
        self._ended = False
        self._cancelled = False
        self._paused = False

    def _attach(self, response: IResponse) -> None:
        sse = SSEReader(self._data, self._max_event)
        self._reader = read_body(response, sse.feed, None, self._address)
        self._reader.done.addBoth(self._finished)

    @property
    def ended(self) -> bool:
        """Whether the stream is over (ended, broken or cancelled)."""
        return self._ended

    def cancel(self) -> None:
        """Stop following: close the connection; the iteration ends."""
        self._cancelled = True
        if self._reader is not None and not self._reader.done.called:
            self._reader.done.cancel()

    def _data(self, data: bytes) -> None:
        try:
            document = loads(data)
        except JSONParseError:
            raise InvalidResponse("an event is not valid JSON") from None
        if not isinstance(document, dict) or document.get("jsonrpc") != "2.0":
            raise InvalidResponse("an event is not a JSON-RPC response")
        if "error" in document:
            raise _rpc_error(document["error"])
        result = document.get("result")
        if document.get("id") != self._id or not isinstance(result, dict):
            raise InvalidResponse("an event is not an answer to this stream's request")
        self._push(result)

    def _push(self, event: dict[str, Any]) -> None:
        if self._waiting is not None:
            waiting, self._waiting = self._waiting, None
            waiting.callback(event)
            return
        self._events.append(event)
        if len(self._events) >= MAX_QUEUED_EVENTS and not self._paused and self._reader:
            self._paused = True
            self._reader.pause()

    def _finished(self, result: None | Failure) -> None:
        self._ended = True
        if isinstance(result, Failure) and not self._cancelled:
            self._end = result
        if self._waiting is not None:
            waiting, self._waiting = self._waiting, None
            waiting.callback(None)

    def __aiter__(self) -> Feed:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._events:
            event = self._events.popleft()
            if self._paused and len(self._events) <= MAX_QUEUED_EVENTS // 2 and self._reader:
                self._paused = False
                self._reader.resume()
            return event
        if not self._ended:

            def cancelled(d: Deferred[Any]) -> None:
                # The consumer gave up waiting: close the stream, and let
                # the wait fail with CancelledError.
                self._waiting = None
                self.cancel()

            self._waiting = Deferred(cancelled)
            delivered = await self._waiting
            if delivered is not None:
                return delivered
        if self._end is not None and not self._cancelled:
            end, self._end = self._end, None
            if isinstance(end.value, (ClientError, CancelledError)):
                raise end.value
            raise TransportError(self._address, "the stream broke")
        raise StopAsyncIteration


class OperatorClient:
    """
    Talks to Beacon's operator door: over its unix socket (C{socket_path}),
    or over the loopback bearer door (C{url} and C{token}, see
    L{read_discovery_file}).

    Results are ProtoJSON dicts, exactly as the server sent them (server
    text: sanitise before showing it). Every method returns a L{Deferred}
    that fails with a L{ClientError}.
    """

    def __init__(
        self,
        reactor: IBeaconReactor,
        *,
        socket_path: str | None = None,
        url: str | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        clock: IReactorTime | None = None,
        max_response: int = DEFAULT_MAX_RESPONSE,
        max_event: int = DEFAULT_MAX_EVENT,
    ) -> None:
        """
        @param reactor: Connects (L{IReactorUNIX} or L{IReactorTCP}) and,
            unless C{clock} is given, times the calls.
        @param socket_path: The operator socket to dial.
        @param url: The bearer door's URL (C{http://} on a loopback
            address), instead of a socket.
        @param token: The bearer door's token.
        @param timeout: Seconds each call may take (a stream: until its
            headers arrive).
        @param clock: Times the calls (default: C{reactor}).
        @param max_response: The largest answer read, in bytes.
        @param max_event: The largest stream event read, in bytes.
        @raise ValueError: Not exactly one of C{socket_path} and C{url}, or a
            URL this client will not send a token to.
        @raise TransportError: C{socket_path} cannot name a socket.
        """
        if (socket_path is None) == (url is None):
            raise ValueError("give exactly one of socket_path and url")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._clock: IReactorTime = clock if clock is not None else reactor
        self._timeout = timeout
        self._max_response = max_response
        self._max_event = max_event
        self._ids = itertools.count(1)
        self._token = token
        if socket_path is not None:
            self.address = os.path.abspath(socket_path)
            self._unix = True
            check_socket_path(self.address)
            endpoint = unix_endpoint(reactor, self.address, timeout)
            self._rpc_url = _SOCKET_URL
        else:
            assert url is not None
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError("the operator door's URL must be an http:// URL")
            if not _is_loopback(parts.hostname):
                raise ValueError(
                    "refusing to send the operator token in clear text "
                    f"to {parts.hostname}, which is not a loopback address"
                )
            self.address = url
            self._unix = False
            endpoint = tcp_endpoint(reactor, parts.hostname, parts.port or 80, timeout)
            self._rpc_url = parts._replace(path=parts.path or "/", query="", fragment="").geturl()
        base = self._rpc_url if self._rpc_url.endswith("/") else self._rpc_url + "/"
        self._card_url = base + _CARD_PATH
        self._http = HTTPClient(Agent.usingEndpointFactory(reactor, FixedEndpointFactory(endpoint)))

    @classmethod
    def from_discovery(cls, reactor: IBeaconReactor, path: str, **kwargs: Any) -> OperatorClient:
        """
        A client of the bearer door named in the discovery file C{path}.

        @raise TransportError: The file cannot be read.
        @raise InvalidResponse: It is not a discovery file.
        """
        discovery = read_discovery_file(path)
        try:
            return cls(reactor, url=discovery.url, token=discovery.token, **kwargs)
        except ValueError as e:
            raise InvalidResponse(f"{path}: {e}") from None

    # The calls.

    def list_tasks(
        self,
        *,
        status: str | None = None,
        status_timestamp_after: str | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
        history_length: int | None = None,
        context_id: str | None = None,
    ) -> Deferred[dict[str, Any]]:
        """
        C{ListTasks}: one page of tasks, newest status first.

        @param status: Only tasks in this TaskState (C{TASK_STATE_*}).
        @param status_timestamp_after: Only tasks whose status changed at or
            after this RFC 3339 time.
        @param page_size: 1 to 100 (the server's default is 50).
        @param page_token: The previous page's C{nextPageToken}.
        @param history_length: How many history messages each task carries.
        @param context_id: Only the task with this contextId.
        @return: The ListTasksResponse: C{tasks}, C{nextPageToken} (empty on
            the last page), C{pageSize}, C{totalSize}.
        """
        params: dict[str, Any] = {}
        for name, value in (
            ("status", status),
            ("statusTimestampAfter", status_timestamp_after),
            ("pageSize", page_size),
            ("pageToken", page_token),
            ("historyLength", history_length),
            ("contextId", context_id),
        ):
            if value is not None:
                params[name] = value
        return self._call("ListTasks", params, check=_is_page)

    def get_task(self, task_id: str, history_length: int | None = None) -> Deferred[dict[str, Any]]:
        """
        C{GetTask}: the whole task (the submitted message in C{history}).
        """
        params: dict[str, Any] = {"id": task_id}
        if history_length is not None:
            params["historyLength"] = history_length
        return self._call("GetTask", params, check=_is_task)

    def decide(
        self, task_id: str, decision: str, note: str | None = None
    ) -> Deferred[dict[str, Any]]:
        """
        C{beacon.review.Decide}: accept or reject a submission, once.

        @param decision: C{"accept"} or C{"reject"}.
        @return: The task in its new state.
        @raise ValueError: Another C{decision}.
        """
        if decision not in ("accept", "reject"):
            raise ValueError('decision must be "accept" or "reject"')
        params: dict[str, Any] = {"id": task_id, "decision": decision}
        if note is not None:
            params["note"] = note
        return self._call("beacon.review.Decide", params, REVIEW_EXTENSION, check=_is_task)

    def review_list(
        self,
        query: TaskQuery | None = None,
        *,
        page_size: int | None = None,
        page_token: str | None = None,
        history_length: int | None = None,
        include_total: bool | None = None,
    ) -> Deferred[dict[str, Any]]:
        """
        C{beacon.review.List}: one page of the submissions C{query}
        matches (all of them without one), newest first in its order.
        The query travels as the params L{params_of
        <beacon.protocol.query.params_of>} names.

        @param page_size: 1 to 100 (the server's default is 50).
        @param page_token: The previous page's C{nextPageToken} (same
            query).
        @param history_length: 0 leaves each task's message out.
        @param include_total: False spares the server counting.
        @return: C{tasks}, C{nextPageToken} (empty on the last page),
            C{pageSize} and, unless C{include_total} is false,
            C{totalSize}.
        @raise ValueError: C{query} sets what C{beacon.review.List} does
            not take (a contextId or statusTimestampAfter).
        """
        params = params_of(query or TaskQuery())
        for name, value in (
            ("pageSize", page_size),
            ("pageToken", page_token),
            ("historyLength", history_length),
            ("includeTotal", include_total),
        ):
            if value is not None:
                params[name] = value
        return self._call("beacon.review.List", params, REVIEW_EXTENSION, check=_is_page)

    def decide_many(
        self, task_ids: list[str], decision: str, note: str | None = None
    ) -> Deferred[dict[str, Any]]:
        """
        C{beacon.review.DecideMany}: accept or reject up to 1,000
        submissions with one note, each decision final.

        @return: C{decided} (ids), C{alreadyDecided} (C{{id, state}}),
            C{notFound} and C{failed} (ids).
        @raise ValueError: Another C{decision}.
        """
        if decision not in ("accept", "reject"):
            raise ValueError('decision must be "accept" or "reject"')
        params: dict[str, Any] = {"ids": list(task_ids), "decision": decision}
        if note is not None:
            params["note"] = note
        return self._call(
            "beacon.review.DecideMany", params, REVIEW_EXTENSION, check=_is_bulk
        )

    def purge(self, decided_before: str, *, dry_run: bool = False) -> Deferred[dict[str, Any]]:
        """
        C{beacon.review.Purge}: erase the content of every submission
        decided before C{decided_before} (RFC 3339), or with C{dry_run}
        count them.

        @return: C{{"purged": N, "dryRun": bool}}.
        """
        params = {"decidedBefore": decided_before, "dryRun": dry_run}
        return self._call(
            "beacon.review.Purge", params, REVIEW_EXTENSION, check=_is_purge
        )

    def card(self) -> Deferred[dict[str, Any]]:
        """The operator card (C{GET /.well-known/agent-card.json})."""

        async def fetch() -> dict[str, Any]:
            response, body = await self._exchange("GET", self._card_url, self._headers(), None)
            document = _json_or_none(body)
            if response.code == 200 and isinstance(document, dict):
                if "jsonrpc" not in document:
                    return document
            _raise_rpc_error(document)
            if response.code != 200:
                raise HTTPStatusError(response.code, _phrase(response))
            raise InvalidResponse("the card is not a JSON object")

        return self._bounded(fetch())

    def follow(self) -> Deferred[Feed]:
        """
        C{beacon.inbox.Follow}: the inbox, live. Fires with a L{Feed} once
        the stream's headers have arrived (the subscription is then in
        place); the timeout bounds that wait, not the stream.
        """

        async def start() -> Feed:
            request_id = next(self._ids)
            body = _request_body(request_id, "beacon.inbox.Follow", {})
            headers = self._headers(INBOX_EVENTS_EXTENSION, accept=b"text/event-stream")
            response = await self._request("POST", self._rpc_url, headers, body)
            content_type = (response.headers.getRawHeaders(b"content-type") or [b""])[0]
            if response.code == 200 and content_type.split(b";")[0].strip() == b"text/event-stream":
                feed = Feed(request_id, self.address, self._max_event)
                feed._attach(response)
                return feed
            answer = await self._read(response)
            self._answer(response, answer, request_id)
            raise InvalidResponse("the server answered beacon.inbox.Follow without a stream")

        return self._bounded(start())

    # The plumbing.

    def _headers(self, extension: str | None = None, accept: bytes = b"application/json") -> Headers:
        headers = Headers({b"A2A-Version": [A2A_VERSION.encode()], b"Accept": [accept]})
        if extension is not None:
            headers.setRawHeaders(b"A2A-Extensions", [extension.encode()])
        if self._token is not None:
            headers.setRawHeaders(b"Authorization", [b"Bearer " + self._token.encode("utf-8")])
        return headers

    def _bounded(self, coroutine: Coroutine[Any, Any, T]) -> Deferred[T]:
        d: Deferred[T] = Deferred.fromCoroutine(coroutine)
        return _Bound(self._clock, self._timeout, self.address).start(d)

    async def _request(
        self, method: str, url: str, headers: Headers, body: bytes | None
    ) -> IResponse:
        if body is not None:
            headers.setRawHeaders(b"Content-Type", [b"application/json"])
        try:
            response: IResponse = await self._http.request(
                method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                unbuffered=True,
            )
        except Exception:
            failure = Failure()
            error = transport_error(failure, self.address, self._unix)
            if error is not None:
                raise error from None
            failure.raiseException()
        return response

    async def _read(self, response: IResponse) -> bytes:
        chunks: list[bytes] = []
        await read_body(response, chunks.append, self._max_response, self.address).done
        return b"".join(chunks)

    async def _exchange(
        self, method: str, url: str, headers: Headers, body: bytes | None
    ) -> tuple[IResponse, bytes]:
        response = await self._request(method, url, headers, body)
        return response, await self._read(response)

    def _call(
        self,
        method: str,
        params: dict[str, Any],
        extension: str | None = None,
        *,
        check: Any = None,
    ) -> Deferred[Any]:
        async def call() -> Any:
            request_id = next(self._ids)
            response, answer = await self._exchange(
                "POST",
                self._rpc_url,
                self._headers(extension),
                _request_body(request_id, method, params),
            )
            result = self._answer(response, answer, request_id)
            if check is not None and not check(result):
                raise InvalidResponse(f"the result of {method} is not what the method answers")
            return result

        return self._bounded(call())

    def _answer(self, response: IResponse, body: bytes, request_id: int) -> Any:
        """The result of a JSON-RPC answer, or the error it carries."""
        document = _json_or_none(body)
        _raise_rpc_error(document)
        if response.code != 200:
            raise HTTPStatusError(response.code, _phrase(response))
        if not isinstance(document, dict) or document.get("jsonrpc") != "2.0" or "result" not in document:
            raise InvalidResponse("the answer is not a JSON-RPC response")
        if document.get("id") != request_id:
            raise InvalidResponse("the answer's id is not the request's")
        return document["result"]


def _is_task(result: Any) -> bool:
    return isinstance(result, dict) and isinstance(result.get("id"), str)


def _is_page(result: Any) -> bool:
    return isinstance(result, dict) and isinstance(result.get("tasks"), list)


def _is_bulk(result: Any) -> bool:
    return isinstance(result, dict) and all(
        isinstance(result.get(key), list)
        for key in ("decided", "alreadyDecided", "notFound", "failed")
    )


def _is_purge(result: Any) -> bool:
    return (
        isinstance(result, dict)
        and isinstance(result.get("purged"), int)
        and not isinstance(result.get("purged"), bool)
    )
