"""
The A2A HTTP+JSON binding (§11, the REST binding), client side, over HTTP
or HTTPS.

Wire contract (what this client sends and accepts)::

    <verb> <interface url>/<route>     routes relative to the interface URL
                                       (with or without its trailing /)
    Content-Type: application/a2a+json on a request with a body
    Accept: application/a2a+json, application/json
                                       (text/event-stream for streams)
    A2A-Version: 1.0                   on every request
    A2A-Extensions: <uri>, <uri>       when the caller asks for extensions

    POST message:send                  body SendMessageRequest
    POST message:stream                body SendMessageRequest; SSE
    GET  tasks/{id}?historyLength=
    GET  tasks?contextId=&status=&pageSize=&pageToken=&historyLength=
             &statusTimestampAfter=&includeArtifacts=
    POST tasks/{id}:cancel             body CancelTaskRequest without id
    POST tasks/{id}:subscribe          no body; SSE
    POST tasks/{taskId}/pushNotificationConfigs
                                       body TaskPushNotificationConfig
                                       without taskId
    GET  tasks/{taskId}/pushNotificationConfigs/{id}
    GET  tasks/{taskId}/pushNotificationConfigs?pageSize=&pageToken=
    DELETE tasks/{taskId}/pushNotificationConfigs/{id}
    GET  extendedAgentCard

    A tenant (the interface's, or the call's) is the route's first path
    segment: {tenant}/tasks/{id}. Path parameters are percent-encoded
    whole (a / or : in an id stays inside its segment); the members a
    route does not carry in its path or body go in the query (§11.5:
    camelCase names, true/false, decimal numbers, enum names and
    timestamps as sent, a list as a repeated name; no objects).

    answer: any 2xx with a JSON body is the result (an empty body is
      None; a JSON-RPC error response is that RPCError); the body's media
      type is not checked. Anything else is read
      as a google.rpc.Status, {"error": {"code", "status", "message",
      "details": [ErrorInfo, ...]}}: an ErrorInfo whose reason is an A2A
      error's (domain a2a-protocol.org) is the RPCError that error is on
      JSON-RPC (TASK_NOT_FOUND: -32001 ...); an error object with a
      JSON-RPC code is that RPCError; any other answer is an
      HTTPStatusError (carrying the Status's fields, if it was one).
    stream: 2xx text/event-stream, each event's data one bare
      StreamResponse; an event whose data is {"error": {...}} fails the
      stream with that error; the end of the body ends the stream.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.web.iweb import IResponse

from beacon.client._errors import (
    ClientError,
    HTTPStatusError,
    InvalidResponse,
    RequestTooLarge,
    RPCError,
)
from beacon.client._jsonrpc import headers_for, json_or_none, limit_of, phrase, rpc_error
from beacon.client._stream import ResponseStream
from beacon.client._transport import HTTPCalls, client_error, is_event_stream
from beacon.protocol import A2A_DOMAIN, CODE_OF_REASON, ERROR_INFO_TYPE, dumps

#: The media type of HTTP+JSON bodies (§11: SHOULD).
A2A_JSON = b"application/a2a+json"
#: What a unary call accepts: the binding's type, and plain JSON, which
#: servers send too (the a2a-sdk's errors).
ACCEPT_JSON = b"application/a2a+json, application/json"

#: The members of a StreamResponse (one of them per event).
_STREAM_MEMBERS = frozenset({"task", "message", "statusUpdate", "artifactUpdate"})


@dataclass(frozen=True)
class Route:
    """
    Where a method goes: its verb, its path (C{{name}}: a member of the
    request, percent-encoded), and whether the rest of the request is the
    body (else the query).
    """

    verb: str
    path: str
    body: bool = False

    def names(self) -> list[str]:
        """The members the path carries."""
        return [part.split("}")[0] for part in self.path.split("{")[1:]]


#: The routes of the eleven methods (§11.3, the proto's google.api.http).
ROUTES: Mapping[str, Route] = {
    "SendMessage": Route("POST", "message:send", body=True),
    "SendStreamingMessage": Route("POST", "message:stream", body=True),
    "GetTask": Route("GET", "tasks/{id}"),
    "ListTasks": Route("GET", "tasks"),
    "CancelTask": Route("POST", "tasks/{id}:cancel", body=True),
    "SubscribeToTask": Route("POST", "tasks/{id}:subscribe"),
    "CreateTaskPushNotificationConfig": Route("POST", "tasks/{taskId}/pushNotificationConfigs", body=True),
    "GetTaskPushNotificationConfig": Route("GET", "tasks/{taskId}/pushNotificationConfigs/{id}"),
    "ListTaskPushNotificationConfigs": Route("GET", "tasks/{taskId}/pushNotificationConfigs"),
    "DeleteTaskPushNotificationConfig": Route("DELETE", "tasks/{taskId}/pushNotificationConfigs/{id}"),
    "GetExtendedAgentCard": Route("GET", "extendedAgentCard"),
}


def join_url(base: str, path: str, query: str = "") -> str:
    """
    C{path} below the interface URL C{base}, whether or not C{base} ends
    in C{/}; C{query} after the base's own query, if it has one.
    """
    parts = urlsplit(base)
    joined = parts.path.rstrip("/") + "/" + path
    queries = "&".join(q for q in (parts.query, query) if q)
    return urlunsplit((parts.scheme, parts.netloc, joined, queries, ""))


def _query_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ClientError(f"{name} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return value
    raise ClientError(f"{name} cannot be sent in a query (HTTP+JSON query parameters are scalars)")


def query_string(params: Mapping[str, Any]) -> str:
    """
    The query of C{params} (§11.5): each member by its name, booleans as
    C{true}/C{false}, numbers in decimal, strings (enum names, timestamps)
    as they are, a list as its name repeated; None is left out. Everything
    is percent-encoded (a space is C{%20}).

    @raise ClientError: A member is an object, or a list holds one.
    """
    pairs: list[tuple[str, str]] = []
    for name, value in params.items():
        if value is None:
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            pairs.append((name, _query_value(name, item)))
    return urlencode(pairs, quote_via=quote, safe="")


def request_of(method: str, params: Mapping[str, Any]) -> tuple[Route, str, bytes | None]:
    """
    The route, the URL path and query (relative to the interface URL) and
    the body of a call of C{method} with C{params}.

    @raise ClientError: The method has no HTTP+JSON route, or a member its
        path needs is not a non-empty string.
    """
    route = ROUTES.get(method)
    if route is None:
        raise ClientError(f"{method} has no route on the HTTP+JSON binding")
    rest = dict(params)
    tenant = rest.pop("tenant", None)
    path = route.path
    for name in route.names():
        value = rest.pop(name, None)
        if not isinstance(value, str) or not value:
            raise ClientError(f"{method} needs {name} (a non-empty string) for its HTTP+JSON route")
        path = path.replace("{" + name + "}", quote(value, safe=""))
    if isinstance(tenant, str) and tenant:
        path = quote(tenant, safe="") + "/" + path
    if route.body:
        return route, path, dumps(rest)
    query = query_string(rest)
    return route, path + ("?" + query if query else ""), None


def _error_info(details: Any) -> tuple[str | None, str | None]:
    """The reason and domain of the first ErrorInfo among C{details}."""
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and detail.get("@type") == ERROR_INFO_TYPE:
            reason = detail.get("reason")
            domain = detail.get("domain")
            return (
                reason if isinstance(reason, str) else None,
                domain if isinstance(domain, str) else None,
            )
    return None, None


def _code(value: Any) -> int | None:
    """C{value} if it is an integer (not a boolean), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _with_status(error: RPCError | InvalidResponse, status: int) -> ClientError:
    if isinstance(error, RPCError):
        return RPCError(error.code, error.message, error.data, http_status=status)
    return error


def is_jsonrpc_error(document: Any) -> bool:
    """Whether C{document} is a JSON-RPC error response."""
    return isinstance(document, dict) and document.get("jsonrpc") == "2.0" and "error" in document


def error_of(document: Any, status: int, reason_phrase: str = "") -> ClientError:
    """
    The error an answer that is not a result stands for (see the wire
    contract above): C{document} is its decoded body (None if not JSON),
    C{status} its HTTP status.
    """
    if is_jsonrpc_error(document):
        # A JSON-RPC error response (a JSON-RPC endpoint listed as HTTP+JSON).
        return _with_status(rpc_error(document["error"]), status)
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict):
        code = _code(error.get("code"))
        message = error.get("message")
        text = message if isinstance(message, str) else ""
        if code is not None and code < 0:
            # A JSON-RPC error object where a Status was expected (some
            # servers answer their REST routes so): its code says which.
            return RPCError(code, text, error.get("data"), http_status=status)
        status_name = error.get("status")
        name = status_name if isinstance(status_name, str) else None
        details = error.get("details")
        reason, domain = _error_info(details)
        if reason is not None and reason in CODE_OF_REASON and domain in (A2A_DOMAIN, None):
            return RPCError(CODE_OF_REASON[reason], text, details, http_status=status, status_name=name)
        if status == 413:
            # Too large, as the JSON-RPC transport says it (with the limit
            # when the answer names one, as Beacon's does).
            return RequestTooLarge(limit_of(document), reason_phrase)
        if code is not None or name is not None or message is not None:
            return HTTPStatusError(
                status, reason_phrase, status_name=name, message=text, reason=reason, details=details
            )
    bare = _code(document.get("code")) if isinstance(document, dict) else None
    if bare is not None and bare < 0:
        # A bare JSON-RPC error object (an older server's REST errors).
        return _with_status(rpc_error(document), status)
    return HTTPStatusError(status, reason_phrase, expected="an HTTP+JSON answer")


class RESTTransport(HTTPCalls):
    """
    The HTTP+JSON binding: one request per call to its route below C{url},
    through C{http} (a treq L{HTTPClient} whose agent dials what the caller
    configured); L{HTTPCalls}' keyword arguments.
    """

    async def _send(
        self, method: str, params: Any, extensions: tuple[str, ...], accept: bytes
    ) -> IResponse:
        route, path, body = request_of(method, params if isinstance(params, dict) else {})
        headers = headers_for(extensions, self._headers, accept)
        if body is not None:
            headers.setRawHeaders(b"Content-Type", [A2A_JSON])
        try:
            response: IResponse = await self._http.request(
                route.verb, join_url(self._url, path), headers=headers, data=body,
                allow_redirects=False, unbuffered=True,
            )
        except Exception:
            raise client_error(Failure(), self.address, False, self._peer) from None
        return response

    def _answer(self, response: IResponse, body: bytes) -> Any:
        if not 200 <= response.code < 300:
            raise error_of(json_or_none(body), response.code, phrase(response))
        if not body.strip():
            return None
        document = json_or_none(body)
        if document is None:
            raise InvalidResponse("the answer is not valid JSON")
        if is_jsonrpc_error(document):
            raise error_of(document, response.code, phrase(response))
        return document

    def call(
        self, request_id: int, method: str, params: Any, extensions: tuple[str, ...]
    ) -> Deferred[Any]:
        """One unary call, bounded by the response timeout (C{request_id} is not sent)."""

        async def call() -> Any:
            response = await self._send(method, params, extensions, ACCEPT_JSON)
            return self._answer(response, await self._read(response))

        return self._bounded(call())

    def stream(
        self, request_id: int, method: str, params: Any, extensions: tuple[str, ...]
    ) -> ResponseStream:
        """One streaming call; its events as they arrive."""

        def event(payload: bytes) -> dict[str, Any]:
            document = json_or_none(payload)
            if not isinstance(document, dict):
                raise InvalidResponse("an event is not a JSON object")
            if "error" in document and not _STREAM_MEMBERS.intersection(document):
                error = document["error"]
                code = _code(error.get("code")) if isinstance(error, dict) else None
                raise error_of(document, code if code is not None and code > 0 else 200)
            return document

        return self._event_stream(
            method,
            lambda: self._send(method, params, extensions, b"text/event-stream"),
            lambda response: is_event_stream(response, range(200, 300)),
            event,
            self._answer,
        )
