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
        -> 401 {"error":{"code":"unauthenticated","message":...}} +
           WWW-Authenticate, when [auth] is configured and neither
           Authorization: Bearer nor X-API-Key carries a known credential
        -> 405 {"error":{"code":"method_not_allowed",...}} + Allow

The body cap is enforced while the body arrives (L{LimitedRequest}), so no
more than C{max_body} bytes are ever buffered, chunked bodies included; the
resource checks again so that it holds when mounted in a foreign L{Site}.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, NamedTuple

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server
# Bound once: attribute reads on twisted.web.http go through its deprecation proxy.
from twisted.web.http import CACHED, NO_CONTENT, NOT_MODIFIED
from twisted.web.server import NOT_DONE_YET
from zope.interface import alsoProvides, implementer

from beacon.bindings._auth import SubmitterAuth
from beacon.bindings._direct_request import HeadAnswer, IDirectResource, IHeadGate
from beacon.bindings._edge import (
    CORS_EXPOSED_HEADERS,
    CORS_MAX_AGE,
    CORS_REQUEST_HEADERS,
    JSON_TYPE,
    IPreflight,
    MethodsResource,
    RefusalShape,
    is_json_media_type,
    native_refusal,
    refusal_body,
    refuse,
)
from beacon.bindings._limits import RateLimiter, SourceResolver
from beacon.bindings.refusals import Refusals
from beacon.protocol import (
    A2AError,
    CallContext,
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


@implementer(IPreflight)
@dataclass(frozen=True)
class TransportLimits:
    """
    What every public binding enforces before parsing: the body cap, the
    per-source rate, how the source is named and, when configured, the
    submitter's credentials.
    """

    max_body: int
    rate: RateLimiter
    sources: SourceResolver
    auth: SubmitterAuth = SubmitterAuth()
    #: The web origins (C{scheme://host[:port]}, lower case) whose pages may
    #: call the RPC endpoints (C{[server] cors_origins}); empty: none.
    cors_origins: frozenset[str] = frozenset()
    #: The refusals made under these limits, by reason.
    refusals: Refusals = field(default_factory=Refusals, compare=False)

    def allow_origin(self, request: server.Request) -> bool:
        """
        When C{request}'s C{Origin} is one of C{cors_origins}, say so in the
        response's CORS headers.

        @return: Whether it is.
        """
        if not self.cors_origins:
            return False
        origin = request.getHeader(b"Origin")
        if origin is None or origin.decode("latin-1").lower() not in self.cors_origins:
            return False
        request.setHeader(b"Access-Control-Allow-Origin", origin)
        request.setHeader(b"Vary", b"Origin")
        return True

    def preflight(self, request: server.Request, allowed: tuple[bytes, ...]) -> bool:
        """
        Answer a CORS preflight (204 with the allowed method and headers)
        when its origin is listed and it asks for a method in C{allowed}.

        @return: Whether it was answered; otherwise nothing is set.
        """
        method = request.getHeader(b"Access-Control-Request-Method")
        if method is None or method not in allowed or not self.allow_origin(request):
            return False
        request.setResponseCode(NO_CONTENT)
        request.setHeader(b"Access-Control-Allow-Methods", b", ".join(allowed))
        request.setHeader(b"Access-Control-Allow-Headers", CORS_REQUEST_HEADERS)
        request.setHeader(b"Access-Control-Max-Age", CORS_MAX_AGE)
        return True

    def answer_head(self, peer: Any, shape: RefusalShape = native_refusal) -> HeadAnswer | None:
        """
        For a door's L{IHeadGate}, on the direct channel, before a request
        from C{peer} is made or rendered: the 429 that L{refusal} would give
        when the source is over its rate. Nothing else is decided, and no
        token taken (the rendering's L{refusal} takes it). A request whose
        rendering adds to a refusal (the CORS headers of a listed origin) or
        names its source from its headers (trusted proxies) is left to the
        rendering.

        @return: The answer, or None.
        """
        if self.cors_origins or self.sources.trusts_proxies or self.rate.rate <= 0:
            return None
        source = self.sources.resolve(peer, None)
        retry = self.rate.refusal(source, self.refusals, log, _RATE_LIMITED, take=False)
        if retry is None:
            return None
        limited = _rate_limited(retry)
        return (
            429,
            limited.answer_headers,
            refusal_body(shape, 429, "rate_limited", limited.message, limited.headers),
        )

    def source_of(self, request: server.Request) -> str:
        """The source of C{request} (see L{SourceResolver})."""
        sources = self.sources
        return sources.resolve(
            request.getClientAddress(),
            (
                request.requestHeaders.getRawHeaders(b"X-Forwarded-For")
                if sources.trusts_proxies
                else None
            ),
        )

    def refusal(
        self,
        request: server.Request,
        source: str,
        *,
        json_body: bool = False,
        media: tuple[bytes, ...] = (JSON_TYPE,),
        shape: RefusalShape = native_refusal,
    ) -> bytes | None:
        """
        Apply the rate limit, the media type (with C{json_body}: 415 unless
        C{Content-Type} is one of C{media}), the credential check (HTTP
        401 with C{WWW-Authenticate}) and the body cap to C{request}, in that
        order. A request from one of C{cors_origins} gets its CORS headers
        first, so that its page can read a refusal too.

        @param shape: How the door spells a refusal's body.
        @return: The refusal body (status and headers already set), or None
            when the request may go on.
        """
        if self.cors_origins and self.allow_origin(request):
            request.setHeader(b"Access-Control-Expose-Headers", CORS_EXPOSED_HEADERS)
        retry = self.rate.refusal(source, self.refusals, log, _RATE_LIMITED)
        if retry is not None:
            limited = _rate_limited(retry)
            return refuse(request, 429, "rate_limited", limited.message, limited.headers, shape)
        if json_body and not is_json_media_type(request.getHeader(b"Content-Type"), media):
            self.refusals["unsupported_media_type"] += 1
            return refuse(
                request,
                415,
                "unsupported_media_type",
                "send Content-Type: " + " or ".join(m.decode("ascii") for m in media),
                None,
                shape,
            )
        if self.auth.enabled and not self.auth.admits(
            _header(request, b"Authorization"), _header(request, b"X-API-Key")
        ):
            self.refusals.unauthenticated(source, self.rate.clock, "http")
            return refuse(
                request,
                401,
                "unauthenticated",
                "this Beacon admits submitters with a credential only; see the "
                "agent card's securitySchemes",
                {b"WWW-Authenticate": self.auth.challenge().encode("ascii")},
                shape,
            )
        content = request.content
        assert content is not None
        size = content.seek(0, 2)
        content.seek(0)
        if size > self.max_body:
            # Counted and logged as the sites' refusals are (one throttle).
            self.refusals.too_large(source, self.max_body, self.rate.clock)
            return refuse(
                request,
                413,
                "too_large",
                f"the request body exceeds {self.max_body} bytes",
                None,
                shape,
            )
        return None


#: What a door warns when a source starts being refused over its rate.
_RATE_LIMITED = (
    "http.rate_limited: source {source} is over {rate}/s (burst {burst}); "
    "refusing until it slows down"
)


class _RateLimited(NamedTuple):
    """A 429's message, its headers for L{refuse}, and all its headers in order."""

    message: str
    headers: dict[bytes, bytes]
    answer_headers: tuple[tuple[bytes, bytes], ...]


@lru_cache(maxsize=64)
def _rate_limited(retry: int) -> _RateLimited:
    """
    What a 429 naming C{retry} seconds says: made once per value, as a
    flooding source is refused with the same few.
    """
    headers = {b"Retry-After": str(retry).encode("ascii")}
    return _RateLimited(
        f"too many requests from this source; retry after {retry} s",
        headers,
        ((b"Content-Type", JSON_TYPE), *headers.items()),
    )


def _header(request: server.Request, name: bytes) -> str | None:
    """
    The value of request header C{name}: its field lines joined with
    C{", "}, as the WebSocket binding reads its service parameters (RFC
    9110 5.3), so that a version or a credential sent on two lines comes
    to the same outcome on every binding (none of them reads as one).
    """
    values = request.requestHeaders.getRawHeaders(name)
    return b", ".join(values).decode("latin-1") if values else None


def call_context(
    request: server.Request, binding: str, source: str, supported: frozenset[str]
) -> CallContext:
    """
    The context of a call over HTTP: C{A2A-Version} from its header, or
    without one (or an empty one) from the C{A2A-Version} query parameter;
    the extensions of C{A2A-Extensions} among those C{supported}.
    """
    version = _header(request, b"A2A-Version")
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

    def answer_head(self, method: bytes, postpath: list[bytes], peer: Any) -> HeadAnswer | None:
        """
        L{IHeadGate}: a POST to this endpoint from a source over its rate
        is answered 429 from its head (L{TransportLimits.answer_head}).
        """
        if method != b"POST" or (postpath and postpath != [b""]):
            return None
        assert self._limits is not None
        return self._limits.answer_head(peer)

    def render_POST(self, request: server.Request) -> bytes | int:
        if self._limits is not None:
            source = self._limits.source_of(request)
            refusal = self._limits.refusal(request, source, json_body=True)
            if refusal is not None:
                return refusal
        else:
            source = self._source(request) if self._source else "local"
        assert request.content is not None
        body = request.content.read()
        context = call_context(request, self._binding, source, self._extensions)
        finished: list[Failure | None] = []
        request.notifyFinish().addBoth(finished.append)

        def respond(response: dict[str, Any] | StreamAnswer | None) -> None:
            # Guarded here, not by an errback: one step less on every
            # request's way back (dispatch itself never fails).
            try:
                if finished:
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

        self._dispatcher.dispatch(body, context).addCallback(respond)
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
    "PreparedDocument",
    "SSESink",
    "TransportLimits",
    "call_context",
    "echo_extensions",
    "stream_events",
    "write_json",
]
