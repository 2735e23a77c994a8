"""
The public HTTP surface: discovery documents and the A2A JSON-RPC binding.

Wire contract (A2A 1.0 JSON-RPC binding, Beacon's public policy)::

    GET|HEAD /.well-known/agent-card.json
        200 application/json, prepared bytes; Cache-Control max-age,
        ETag and Last-Modified (304 on a matching If-None-Match or
        If-Modified-Since); any other method: 405 with Allow.

    POST /a2a/v1            (JSON-RPC 2.0, one request per body; /a2a/v1/ too)
        A2A-Version: 1.0    header, or ?A2A-Version=1.0 (the header wins)
        A2A-Extensions: ... optional; activated ones are echoed
        -> 200 application/json {"jsonrpc":"2.0","id":...,"result"|"error"}
        -> 204 (no body) for a notification (no "id")
        Transport refusals, before any JSON is parsed:
        -> 413 {"error":{"code":"too_large","message":...}}
           body over [limits] max_body (inclusive cap); a declared
           Content-Length over the cap is refused at once, before the
           body: on the direct channel, when it is over by at most
           DISCARD_MAX (256 KiB), the body is then read and dropped and
           the connection kept; otherwise (longer, or on twisted.web's
           path) the connection is closed without reading the body
        -> 429 {"error":{"code":"rate_limited","message":...}} + Retry-After
        -> 415 {"jsonrpc":"2.0","id":null,"error":{"code":-32005,
           "message":...,"data":[ErrorInfo CONTENT_TYPE_NOT_SUPPORTED,
           domain a2a-protocol.org]}}: a Content-Type that is not
           application/json (any case, parameters allowed, a charset only
           UTF-8); the body is never read, hence the null id
        -> 401 {"error":{"code":"unauthenticated","message":...}} +
           WWW-Authenticate, when [auth] is configured and neither
           Authorization: Bearer nor X-API-Key carries a known credential
        -> 405 {"error":{"code":"method_not_allowed",...}} + Allow
        The 415 alone is a JSON-RPC error response (L{jsonrpc_refusal}):
        A2A names that error (ContentTypeNotSupportedError), and a
        JSON-RPC client reads it as it reads any other. The 413 and the
        429 keep the transport's shape, the same on every door: the
        channel may give them from the request's head, before the request
        reaches this resource (a declared Content-Length over the cap; a
        source over its rate), and A2A names no error for either; the 401
        is HTTP authentication's, with its WWW-Authenticate.

The body cap is enforced while the body arrives (L{LimitedRequest}), so no
more than C{max_body} bytes are ever buffered, chunked bodies included; the
resource checks again so that it holds when mounted in a foreign L{Site}.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, Mapping

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web import server
from twisted.web.resource import Resource
# Bound once: attribute reads on twisted.web.http go through its deprecation proxy.
from twisted.web.http import CACHED, NO_CONTENT, NOT_MODIFIED
from twisted.web.server import NOT_DONE_YET
from zope.interface import alsoProvides, implementer

from beacon.bindings.admission import (
    JSON_TYPE,
    HeadAnswer,
    IPreflight,
    TransportLimits,
    header_value,
    native_refusal,
    refuse,
)
from beacon.bindings.http._direct_request import IDirectResource, IHeadGate, peer_gone
from beacon.protocol import (
    A2AError,
    CallContext,
    ContentTypeNotSupportedError,
    Dispatcher,
    EventStream,
    IStreamSink,
    StreamAnswer,
    dumps,
    failure,
    parse_extensions,
    success,
)

log = Logger()


class MethodsResource(Resource):
    """
    A leaf that answers 405, as JSON with C{Allow}, for methods it lacks,
    and a CORS preflight (C{OPTIONS}) from an origin its C{cors} lists.
    """

    isLeaf = True
    allowed: tuple[bytes, ...] = ()
    #: Who answers a CORS preflight (C{OPTIONS}); None: nobody.
    cors: IPreflight | None = None
    #: Whether the path with a slash after it names this resource too (an
    #: RPC endpoint a client may address as C{<interface URL>/}).
    trailing_slash = False

    def render(self, request: server.Request) -> bytes | int:
        if request.postpath and not (self.trailing_slash and request.postpath == [b""]):
            answer = refuse(request, 404, "not_found", "no such resource")
        elif (
            request.method == b"OPTIONS"
            and self.cors is not None
            and self.cors.preflight(request, self.allowed)
        ):
            request.finish()
            return NOT_DONE_YET
        elif request.method not in self.allowed:
            answer = refuse(
                request,
                405,
                "method_not_allowed",
                "this resource does not answer that method",
                {b"Allow": b", ".join(self.allowed)},
            )
        else:
            rendered: bytes | int = super().render(request)
            return rendered
        return b"" if request.method == b"HEAD" else answer



class PreparedDocument:
    """
    A JSON document served as prepared bytes, with its validators (ETag,
    Last-Modified). It is published once the public URL is known.
    """

    def __init__(self) -> None:
        self.body = b""
        self.etag = b""
        self.modified = 0.0

    def publish(self, document: Any, modified: float) -> None:
        """
        Replace the served document.

        @param document: The JSON value.
        @param modified: Its modification time (seconds since the epoch).
        """
        self.body = dumps(document)
        self.etag = b'"' + hashlib.sha256(self.body).hexdigest()[:32].encode() + b'"'
        self.modified = float(math.floor(modified))

    @property
    def published(self) -> bool:
        """Whether there is a document to serve."""
        return bool(self.body)


@implementer(IDirectResource)
class DocumentResource(MethodsResource):
    """
    Serves a L{PreparedDocument} on GET and HEAD, with cache validators.
    """

    allowed = (b"GET", b"HEAD")

    def __init__(self, document: PreparedDocument, max_age: int = 300) -> None:
        """
        @param document: What to serve.
        @param max_age: The Cache-Control max-age, in seconds.
        """
        super().__init__()
        self._document = document
        self._cache_control = f"public, max-age={max_age}".encode("ascii")

    def render_GET(self, request: server.Request) -> bytes | int:
        document = self._document
        if not document.published:
            return refuse(request, 503, "unavailable", "not published yet")
        request.setHeader(b"Content-Type", JSON_TYPE)
        request.setHeader(b"Cache-Control", self._cache_control)
        request.setHeader(b"Access-Control-Allow-Origin", b"*")
        cached = request.setETag(document.etag)
        if request.setLastModified(document.modified) == CACHED or cached == CACHED:
            # No Content-Length on a 304 (RFC 9110 8.6): finished, not rendered.
            request.setResponseCode(NOT_MODIFIED)
            request.finish()
            return NOT_DONE_YET
        return document.body

    render_HEAD = render_GET


def call_context(
    request: server.Request, binding: str, source: str, supported: frozenset[str]
) -> CallContext:
    """
    The context of a call over HTTP: C{A2A-Version} from its header, or
    without one (or an empty one) from the C{A2A-Version} query parameter;
    the extensions of C{A2A-Extensions} among those C{supported}.
    """
    version = header_value(request, b"A2A-Version")
    if not (version or "").strip():
        # An empty header carries no version: the query may.
        values = request.args.get(b"A2A-Version")
        version = values[0].decode("latin-1") if values else None
    named = request.requestHeaders.getRawHeaders(b"A2A-Extensions")
    activated = (
        parse_extensions([v.decode("latin-1") for v in named]) & supported
        if named
        else _NONE
    )
    # Positional (binding, source, version, extensions): see RPCRequest.
    return CallContext(binding, source, version, activated)


#: The extensions of a call that names none (nearly every call).
_NONE: frozenset[str] = frozenset()


def echo_extensions(request: server.Request, context: CallContext) -> None:
    """Name the extensions the call activated in the answer's C{A2A-Extensions}."""
    if context.extensions:
        request.setHeader(b"A2A-Extensions", ", ".join(sorted(context.extensions)).encode())


def write_json(request: server.Request, content_type: bytes, body: bytes) -> None:
    """Write a whole JSON answer (status and headers set) and finish it."""
    request.setHeader(b"Content-Type", content_type)
    # A known length: one write, no chunked framing.
    request.setHeader(b"Content-Length", b"%d" % len(body))
    request.write(body)
    request.finish()


def jsonrpc_refusal(
    status: int, code: str, message: str, headers: Mapping[bytes, bytes]
) -> bytes:
    """
    The JSON-RPC endpoint's transport refusals (a
    L{beacon.bindings.admission.RefusalShape}): a 415
    is a JSON-RPC error response, A2A's C{ContentTypeNotSupportedError}
    (-32005, C{id} null: the body is never read), as a JSON-RPC client
    reads the answer to a POST it made with the wrong C{Content-Type};
    every other refusal (413, 429, 401) is the native shape, answered
    before the request is known to be JSON-RPC at all (by its head, the
    body still arriving or left unread) and alike on every door.
    """
    if status == 415:
        return dumps(failure(None, ContentTypeNotSupportedError(message)))
    return native_refusal(status, code, message, headers)


class JSONRPCResource(MethodsResource):
    """
    The A2A JSON-RPC binding: one POSTed request, one JSON response. Its
    path with a slash after it is the same endpoint (clients that join
    paths to the interface URL POST to C{/a2a/v1/}).
    """

    allowed = (b"POST",)
    trailing_slash = True

    def __init__(
        self,
        dispatcher: Dispatcher,
        limits: TransportLimits | None,
        *,
        binding: str = "jsonrpc",
        extensions: frozenset[str] = frozenset(),
        clock: IReactorTime | None = None,
        keepalive: float = 15.0,
        source: Callable[[server.Request], str] | None = None,
    ) -> None:
        """
        @param dispatcher: Runs requests against the policy.
        @param limits: Applied before anything is parsed; None where the
            transport itself decides who may speak (the operator socket).
        @param binding: The binding name recorded in each call's context.
        @param extensions: The extension URIs this endpoint supports; those a
            caller activates are echoed in C{A2A-Extensions}.
        @param clock: Times the keepalive comments of event streams (needed
            when the policy streams).
        @param keepalive: Seconds between keepalive comments on an idle
            event stream.
        @param source: Names the caller when there are no limits.
        """
        super().__init__()
        self._dispatcher = dispatcher
        self._limits = limits
        self._binding = binding
        self._extensions = extensions
        self._clock = clock
        self._keepalive = keepalive
        self._source = source
        self.cors = limits
        if source is None:
            # Its render reads no more of a request than the direct channel
            # offers (a source callable may read anything); with a rate
            # limit, the direct channel may have it refuse a source over its
            # rate from the request's head.
            gated = limits is not None and limits.rate.rate > 0
            alsoProvides(self, IHeadGate if gated else IDirectResource)

    def answer_head(
        self, method: bytes, postpath: list[bytes], peer: Any
    ) -> HeadAnswer | str | None:
        """
        L{IHeadGate}: a POST to this endpoint has its source's rate checked
        from its head (L{TransportLimits.answer_head}): over it, answered
        429 there; under it, admitted, and the rendering checks the rest.
        """
        if method != b"POST" or (postpath and postpath != [b""]):
            return None
        assert self._limits is not None
        return self._limits.answer_head(peer)

    def render_POST(self, request: server.Request) -> bytes | int:
        limits = self._limits
        if limits is not None:
            # (A request of a foreign site has no admitted_source: None.)
            admitted: str | None = getattr(request, "admitted_source", None)
            source = limits.source_of(request) if admitted is None else admitted
            refusal = limits.refusal(
                request, source, json_body=True, shape=jsonrpc_refusal, rated=admitted is not None
            )
            if refusal is not None:
                return refusal
        else:
            source = self._source(request) if self._source else "local"
        assert request.content is not None
        body = request.content.read()
        context = call_context(request, self._binding, source, self._extensions)
        gone = peer_gone(request)

        def respond(response: dict[str, Any] | StreamAnswer | None) -> None:
            # Guarded here, not by an errback: one step less on every
            # request's way back (dispatch itself never fails).
            try:
                if gone():
                    if isinstance(response, StreamAnswer):
                        response.stream.cancel()
                    return  # The peer went away; nothing to answer.
                echo_extensions(request, context)
                if isinstance(response, StreamAnswer):
                    request_id = response.id
                    stream_events(
                        request,
                        response.stream,
                        self._clock,
                        self._keepalive,
                        lambda result: b"data: " + dumps(success(request_id, result)) + b"\n\n",
                        lambda error: b"data: " + dumps(failure(request_id, error)) + b"\n\n",
                    )
                elif response is None:
                    request.setResponseCode(NO_CONTENT)
                    request.finish()
                else:
                    write_json(request, JSON_TYPE, dumps(response))
            except Exception:
                log.failure("http.response_failed")

        self._dispatcher.dispatch(body, context, respond)
        return NOT_DONE_YET


def stream_events(
    request: server.Request,
    stream: EventStream,
    clock: IReactorTime | None,
    keepalive: float,
    event: Callable[[Any], bytes],
    error: Callable[[A2AError], bytes],
) -> None:
    """
    Answer C{request} with C{stream} as Server-Sent Events (L{SSESink}),
    each event and a stream error framed by the binding (C{event},
    C{error}); a peer that goes away cancels the stream.
    """
    if clock is None:
        raise RuntimeError("a streaming policy needs a clock")
    sink = SSESink(request, clock, keepalive, event, error)
    request.notifyFinish().addBoth(lambda _: stream.cancel())
    stream.attach(sink)


@implementer(IStreamSink)
class SSESink:
    """
    Frames a stream's events as Server-Sent Events on an HTTP response:
    each event and a stream error as the binding frames them (JSON-RPC: a
    C{data:} line holding the whole JSON-RPC response; HTTP+JSON: the bare
    StreamResponse, and an C{error} event holding a google.rpc.Status); a
    comment line every C{keepalive} seconds while idle; the response ends
    with the stream.
    """

    def __init__(
        self,
        request: server.Request,
        clock: IReactorTime,
        keepalive: float,
        event: Callable[[Any], bytes],
        error: Callable[[A2AError], bytes],
    ) -> None:
        self._request = request
        self._clock = clock
        self._keepalive = keepalive
        self._frame = event
        self._frame_error = error
        self._done = False
        request.setHeader(b"Content-Type", b"text/event-stream")
        request.setHeader(b"Cache-Control", b"no-store")
        request.write(b": stream open\n\n")
        self._timer = clock.callLater(keepalive, self._ping)
        request.notifyFinish().addBoth(self._closed)

    def _ping(self) -> None:
        self._request.write(b": keepalive\n\n")
        self._timer = self._clock.callLater(self._keepalive, self._ping)

    def _closed(self, _: Any) -> None:
        self._done = True
        if self._timer.active():
            self._timer.cancel()

    def _write(self, frame: bytes) -> None:
        if self._done:
            return
        self._request.write(frame)
        self._timer.reset(self._keepalive)

    def event(self, result: Any) -> None:
        self._write(self._frame(result))

    def end(self) -> None:
        if not self._done:
            self._request.finish()

    def fail(self, error: A2AError) -> None:
        self._write(self._frame_error(error))
        self.end()


__all__ = [
    "DocumentResource",
    "JSONRPCResource",
    "MethodsResource",
    "PreparedDocument",
    "SSESink",
    "call_context",
    "echo_extensions",
    "jsonrpc_refusal",
    "stream_events",
    "write_json",
]
