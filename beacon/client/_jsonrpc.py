"""
The A2A JSON-RPC binding (§9), client side, over HTTP(S) or over a unix
socket (agentd's unix-socket binding: the same binding carried as HTTP/1.1 on the socket).

Wire contract (what this client sends and accepts)::

    POST <interface url>               one JSON-RPC 2.0 request, a fresh id
    Content-Type: application/json
    Accept: application/json           (text/event-stream for streams)
    A2A-Version: 1.0                   on every request
    A2A-Extensions: <uri>, <uri>       when the caller asks for extensions

    answer: a JSON-RPC response with the request's id; a JSON-RPC error is
      read from the body whatever the HTTP status (a 401 carrying one is an
      RPCError); a non-200 without one is an HTTPStatusError.
    stream: 200 text/event-stream, each event's data one JSON-RPC response
      (a result: one StreamResponse; an error: the stream fails); the end
      of the body ends the stream.

The helpers at the top (request bodies, reading an answer) are shared with
the operator client and the WebSocket transport.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.iweb import IResponse

from beacon.client._errors import (
    HTTPStatusError,
    InvalidResponse,
    RequestTooLarge,
    RPCError,
)
from beacon.client._stream import ResponseStream
from beacon.client._transport import HTTPCalls, client_error, is_event_stream
from beacon.protocol import JSONParseError, dumps, loads

#: The A2A version this client speaks.
A2A_VERSION = "1.0"


# JSON-RPC messages.


def request_body(request_id: int, method: str, params: Any) -> bytes:
    """One JSON-RPC 2.0 request."""
    return dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def json_or_none(body: bytes) -> Any:
    """C{body} decoded as strict JSON, or None."""
    try:
        return loads(body)
    except JSONParseError:
        return None


def rpc_error(error: Any) -> RPCError | InvalidResponse:
    """The exception a JSON-RPC C{error} member stands for."""
    if not isinstance(error, dict):
        return InvalidResponse("the JSON-RPC error is not an object")
    code = error.get("code")
    message = error.get("message")
    if not isinstance(code, int) or isinstance(code, bool):
        return InvalidResponse("the JSON-RPC error has no integer code")
    return RPCError(code, message if isinstance(message, str) else "", error.get("data"))


def raise_rpc_error(document: Any) -> None:
    """Raise the error C{document} carries, if it is a JSON-RPC error response."""
    if isinstance(document, dict) and document.get("jsonrpc") == "2.0" and "error" in document:
        raise rpc_error(document["error"])


_BYTES = re.compile(r"\b([0-9]{1,12}) bytes\b")


def limit_of(document: Any) -> int | None:
    """
    The byte limit a 413's JSON body names (C{{"error": {"message": "...
    65536 bytes"}}}, Beacon's native error), if it names one.
    """
    error = document.get("error") if isinstance(document, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    found = _BYTES.search(message) if isinstance(message, str) else None
    return int(found.group(1)) if found else None


def phrase(response: IResponse) -> str:
    """The response's reason phrase, printable, short."""
    value = response.phrase
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return "".join(c for c in text if c.isprintable())[:80]


def result_of(document: Any, request_id: int) -> Any:
    """
    The result of a JSON-RPC response to C{request_id}.

    @raise RPCError: It is an error response.
    @raise InvalidResponse: It is not a response to that request.
    """
    raise_rpc_error(document)
    if not isinstance(document, dict) or document.get("jsonrpc") != "2.0" or "result" not in document:
        raise InvalidResponse("the answer is not a JSON-RPC response")
    if document.get("id") != request_id:
        raise InvalidResponse("the answer's id is not the request's")
    return document["result"]


def headers_for(extensions: tuple[str, ...], extra: dict[str, str], accept: bytes) -> Headers:
    """The headers of one request: the service parameters and C{extra}."""
    headers = Headers({b"A2A-Version": [A2A_VERSION.encode()], b"Accept": [accept]})
    for name, value in extra.items():
        headers.setRawHeaders(name.encode("ascii"), [value.encode("utf-8")])
    if extensions:
        headers.setRawHeaders(b"A2A-Extensions", [", ".join(extensions).encode("ascii")])
    return headers


class HTTPTransport(HTTPCalls):
    """
    JSON-RPC over HTTP: one POST per call to C{url}, through C{http} (a
    treq L{HTTPClient} whose agent dials what the caller configured).
    """

    def __init__(self, http: HTTPClient, url: str, *, unix: bool, **settings: Any) -> None:
        """
        @param unix: Whether C{http} dials a unix socket (for the errors'
            words).
        @param settings: L{HTTPCalls}' keyword arguments.
        """
        super().__init__(http, url, **settings)
        self._unix = unix

    async def _post(self, body: bytes, extensions: tuple[str, ...], accept: bytes) -> IResponse:
        headers = headers_for(extensions, self._headers, accept)
        headers.setRawHeaders(b"Content-Type", [b"application/json"])
        try:
            response: IResponse = await self._http.request(
                "POST", self._url, headers=headers, data=body,
                allow_redirects=False, unbuffered=True,
            )
        except Exception:
            raise client_error(Failure(), self.address, self._unix, self._peer) from None
        return response

    def _answer(self, response: IResponse, body: bytes, request_id: int) -> Any:
        document = json_or_none(body)
        raise_rpc_error(document)
        if response.code == 413:
            raise RequestTooLarge(limit_of(document), phrase(response))
        if response.code != 200:
            raise HTTPStatusError(response.code, phrase(response))
        return result_of(document, request_id)

    def call(
        self, request_id: int, method: str, params: Any, extensions: tuple[str, ...]
    ) -> Deferred[Any]:
        """One unary call, bounded by the response timeout."""

        async def call() -> Any:
            response = await self._post(
                request_body(request_id, method, params), extensions, b"application/json"
            )
            return self._answer(response, await self._read(response), request_id)

        return self._bounded(call())

    def stream(
        self, request_id: int, method: str, params: Any, extensions: tuple[str, ...]
    ) -> ResponseStream:
        """One streaming call; its events as they arrive."""

        def event(payload: bytes) -> dict[str, Any]:
            document = json_or_none(payload)
            if document is None:
                raise InvalidResponse("an event is not valid JSON")
            result = result_of(document, request_id)
            if not isinstance(result, dict):
                raise InvalidResponse("an event is not a StreamResponse")
            return result

        return self._event_stream(
            method,
            lambda: self._post(
                request_body(request_id, method, params), extensions, b"text/event-stream"
            ),
            is_event_stream,
            event,
            lambda response, body: self._answer(response, body, request_id),
        )


StreamFactory = Callable[[int, str, Any, tuple[str, ...]], ResponseStream]
