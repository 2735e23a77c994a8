"""
A request the direct channel (L{beacon.bindings.http._direct}) reads, and what
it asks of the resources it renders: L{IDirectRequest}, the part of
twisted.web's request that Beacon's resources use, and L{DirectRequest},
which provides it with twisted.web's behaviour (default headers,
C{Content-Type} default, chunked framing when no length is set, no body
for C{HEAD}, 204 and 304, conditional requests); L{IDirectResource}, a
resource that takes any L{IDirectRequest}, and L{IHeadGate}, one that may
answer from a request's head alone; L{direct_resource}, which finds the
resource a path addresses through Beacon's own containers.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from io import BytesIO
from collections.abc import Callable
from typing import Any, Protocol as TypingProtocol
from urllib.parse import parse_qs

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import (
    CACHED,
    INTERNAL_SERVER_ERROR,
    NO_BODY_CODES,
    NO_CONTENT,
    NOT_MODIFIED,
    OK,
    PRECONDITION_FAILED,
    datetimeToString,
    stringToDatetime,
)
from twisted.web.http_headers import Headers
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET
from zope.interface import Attribute, Interface, implementer

from beacon.bindings.admission import Container, HeadAnswer, reason_phrase
from beacon.capped import SERVER

log = Logger()


class RequestChannel(TypingProtocol):
    """
    What a L{DirectRequest} uses of the connection that read it (a
    L{beacon.bindings.http._direct.DirectChannel}).
    """

    peer: Any

    def date(self) -> bytes:
        """The C{Date} header's value: now."""

    def write(self, data: bytes) -> None:
        """Write C{data} to the peer."""

    def close(self) -> None:
        """Close once the answers are written."""

    def request_done(self, request: DirectRequest, close: bool) -> None:
        """C{request}'s response is complete: read the next, or close."""


class IDirectRequest(Interface):
    """
    The part of twisted.web's L{IRequest} that Beacon's resources use, and
    all of it that a L{DirectRequest} offers: a resource that needs no more
    of its request may be rendered by the direct channel (see
    L{IDirectResource}). twisted.web's L{Request} provides it too.
    """

    method = Attribute("The request method (C{b'GET'}, C{b'HEAD'}, C{b'POST'}).")
    uri = Attribute("The request target as sent: path and query.")
    path = Attribute("The path, without the query.")
    args = Attribute("The query's arguments: a dict of bytes to lists of bytes.")
    content = Attribute("The body, a file-like object positioned at its start.")
    postpath = Attribute("The path segments after the resource rendering it.")
    requestHeaders = Attribute(
        "The request headers: C{getRawHeaders(name, default=None)} (a "
        "sequence of values, not to be changed) and C{hasHeader(name)}."
    )
    admitted_source = Attribute(
        "The request's source when its door admitted it from its head "
        "(L{IHeadGate.answer_head}: its rate checked, its token taken), so "
        "that its rendering checks the rest and not the rate again; None "
        "otherwise."
    )

    def getHeader(name: bytes) -> bytes | None:
        """The last value of request header C{name}, or None."""

    def getClientAddress() -> Any:
        """The peer's address."""

    def setResponseCode(code: int, message: bytes | None = None) -> None:
        """Set the status code, and its reason phrase unless given."""

    def setHeader(name: bytes | str, value: bytes | str) -> None:
        """Set response header C{name} to C{value}, replacing any other."""

    def setETag(etag: bytes) -> object:
        """Set C{ETag}; L{CACHED} when C{If-None-Match} names it."""

    def setLastModified(when: float) -> object:
        """Set C{Last-Modified}; L{CACHED} when C{If-Modified-Since} holds."""

    def write(data: bytes) -> None:
        """Write part of the body; the first write sends the head too."""

    def finish() -> None:
        """The response is complete."""

    def notifyFinish() -> Deferred[None]:
        """Fires when the response is complete, or fails when the peer goes."""


class IDirectResource(IResource):
    """
    A resource whose C{render} takes any L{IDirectRequest}, so that the
    direct channel may render it (a L{DirectRequest} in place of
    twisted.web's request). Its C{render} returns the whole body, or
    L{NOT_DONE_YET} and later writes and finishes the request.
    """




class IHeadGate(IDirectResource):
    """
    A direct resource that may answer some requests without being rendered:
    a door refusing a source over its rate answers from the request's head
    and its peer, at the cost of a few lookups. Only the direct channel
    asks (once the request has all arrived, before anything else is made
    for it); twisted.web renders every request, and the answer must be the
    one rendering would give.
    """

    def answer_head(method: bytes, postpath: list[bytes], peer: Any) -> HeadAnswer | str | None:
        """
        The whole answer to a request for C{method} with C{postpath} from
        C{peer} (the transport's peer address); or its source, admitted
        (the rate checked and its token taken: the channel sets the
        request's C{admitted_source} to it, and the rendering checks the
        rest); or None (having changed nothing) to have it rendered and
        checked there. The channel writes an answer with the headers
        every answer carries (C{Server}, C{Date}, C{Connection: close} when
        asked for) and C{Content-Length}, its bytes made once a second and
        kept (at most L{MAX_ANSWERS}).
        """


def direct_resource(root: Any, path: bytes) -> tuple[Any, list[bytes]] | None:
    """
    The resource that C{path} addresses under C{root}, and the segments left
    for it (its C{postpath}), when the way there goes through Beacon's own
    L{Container}s only (whose children are found in C{children} and nowhere
    else) and it provides L{IDirectResource}; otherwise None. As twisted.web
    traverses, a leaf resource takes the rest of the path, a trailing empty
    segment too (C{/a2a/v1/}); the first segment may be empty (C{/}: the
    root's child C{b""}, as twisted.web finds it), no other.
    """
    found = root
    segments = path[1:].split(b"/")
    for index, segment in enumerate(segments):
        if type(found) is not Container:
            if getattr(found, "isLeaf", False) and IDirectResource.providedBy(found):
                return found, segments[index:]
            return None
        if not segment and index:
            # An empty segment after the first: handed over. (The first
            # names the root's child b"": the landing page at /.)
            return None
        found = found.children.get(segment)
        if found is None:
            return None
    return (found, []) if IDirectResource.providedBy(found) else None


#: A line break in a header value (replaced by a space, as twisted.web does).
_LINE_BREAK = re.compile(rb"[\r\n]")


@lru_cache(maxsize=256)
def _canonical(name: bytes) -> bytes:
    """The spelling twisted.web gives a header name (C{ETag}, C{Content-Type})."""
    return next(iter(Headers({name: [b""]}).getAllRawHeaders()))[0]


@lru_cache(maxsize=64)
def http_date(seconds: int) -> bytes:
    """An HTTP-date (C{Date}, C{Last-Modified}), formatted once per value."""
    formatted: bytes = datetimeToString(seconds)
    return formatted


class _RequestHeaders:
    """
    The request headers, read-only, as twisted.web's L{Headers} reads them
    (but each name's values are a tuple, shared with the other requests
    of the same head: see L{read_head}).
    """

    __slots__ = ("_headers",)

    def __init__(self, headers: dict[bytes, tuple[bytes, ...]]) -> None:
        self._headers = headers

    def getRawHeaders(self, name: bytes | str, default: Any = None) -> Any:
        if isinstance(name, str):
            name = name.encode("latin-1")
        return self._headers.get(name.lower(), default)

    def hasHeader(self, name: bytes | str) -> bool:
        return self.getRawHeaders(name) is not None


@implementer(IDirectRequest)
class DirectRequest:
    """
    One request read by a L{DirectChannel}: the part of twisted.web's
    L{IRequest} that L{IDirectResource}s use, with twisted.web's behaviour
    (default headers, C{Content-Type} default, chunked framing when no
    length is set, no body for C{HEAD}, 204 and 304, conditional
    requests).
    """

    defaultContentType = b"text/html"

    def __init__(
        self,
        channel: RequestChannel,
        method: bytes,
        uri: bytes,
        path: bytes,
        query: bytes | None,
        headers: dict[bytes, tuple[bytes, ...]],
        body: bytes,
        close: bool,
        postpath: list[bytes],
    ) -> None:
        self.channel = channel
        self.postpath = postpath
        self.method = method
        self.uri = uri
        self.path = path
        self.clientproto = b"HTTP/1.1"
        self.requestHeaders = _RequestHeaders(headers)
        self.admitted_source: str | None = None
        self.content = BytesIO(body)
        self.code = OK
        self.code_message = b"OK"
        self.etag: bytes | None = None
        self.lastModified: int | None = None
        self.startedWriting = False
        self.finished = False
        self.sentLength = 0
        self._query = query
        self._args: dict[bytes, list[bytes]] | None = None
        self._close = close
        self._chunked = False
        self._bodiless = False
        self._disconnected = False
        self._notifications: list[Deferred[None]] = []
        self._answering: list[bytes] | None = None
        out: dict[bytes, bytes] = {}
        if close:
            out[b"Connection"] = b"close"
        out[b"Server"] = SERVER
        out[b"Date"] = channel.date()
        self._out = out

    # Reading the request.

    @property
    def args(self) -> dict[bytes, list[bytes]]:
        """The query's arguments (parsed when first asked for)."""
        if self._args is None:
            self._args = parse_qs(self._query, keep_blank_values=True) if self._query else {}
        return self._args

    def getHeader(self, name: bytes | str) -> bytes | None:
        """The last value of request header C{name}, or None."""
        values = self.requestHeaders.getRawHeaders(name)
        return values[-1] if values else None

    def getClientAddress(self) -> Any:
        """The peer's address."""
        return self.channel.peer

    # Writing the response.

    def setResponseCode(self, code: int, message: bytes | None = None) -> None:
        """Set the status code (and its phrase)."""
        self.code = code
        self.code_message = message or reason_phrase(code)

    def setHeader(self, name: bytes | str, value: bytes | str) -> None:
        """Set response header C{name} to C{value}, replacing any other."""
        if isinstance(name, str):
            name = name.encode("latin-1")
        if isinstance(value, str):
            value = value.encode("utf-8")
        # A search, not `b"\r" in value`: bytes' `in` first tries its
        # operand as an int and formats the TypeError it catches (~2,100
        # instructions each, two per header; bench/inprocess.py send).
        if _LINE_BREAK.search(value) is not None:
            value = value.replace(b"\r\n", b" ").replace(b"\r", b" ").replace(b"\n", b" ")
        self._out[_canonical(name)] = value

    def setLastModified(self, when: float) -> object:
        """Set C{Last-Modified}; L{CACHED} when If-Modified-Since holds."""
        when = int(math.ceil(when))
        if not self.lastModified or self.lastModified < when:
            self.lastModified = when
        since = self.getHeader(b"If-Modified-Since")
        if since:
            try:
                modified = stringToDatetime(since.split(b";", 1)[0])
            except (ValueError, IndexError):
                # Not a date (an empty one raises IndexError): no condition.
                return None
            if modified >= self.lastModified:
                self.setResponseCode(NOT_MODIFIED)
                return CACHED
        return None

    def setETag(self, etag: bytes) -> object:
        """Set C{ETag}; L{CACHED} when If-None-Match names it."""
        if etag:
            self.etag = etag
        tags = self.getHeader(b"If-None-Match")
        if tags:
            listed = tags.split()
            if etag in listed or b"*" in listed:
                self.setResponseCode(
                    NOT_MODIFIED
                    if self.method in (b"HEAD", b"GET")
                    else PRECONDITION_FAILED
                )
                return CACHED
        return None

    def write(self, data: bytes) -> None:
        """Write part of the body; the first write sends the head too."""
        if self.finished:
            raise RuntimeError("DirectRequest.write called after finish")
        if self._disconnected:
            return
        if self.startedWriting:
            if data and not self._bodiless:
                self.sentLength += len(data)
                self.channel.write(_chunk(data) if self._chunked else data)
            return
        self.startedWriting = True
        out = self._out
        code = self.code
        bodiless = self.method == b"HEAD" or code in NO_BODY_CODES
        if (
            code not in (NOT_MODIFIED, NO_CONTENT)
            and b"Content-Type" not in out
            and out.get(b"Content-Length") != b"0"
        ):
            out[b"Content-Type"] = self.defaultContentType
        if b"Content-Length" not in out and not bodiless:
            out[b"Transfer-Encoding"] = b"chunked"
            self._chunked = True
        if self.lastModified is not None and b"Last-Modified" not in out:
            out[b"Last-Modified"] = http_date(self.lastModified)
        if self.etag is not None:
            out[b"ETag"] = self.etag
        head = [b"HTTP/1.1 %d %s\r\n" % (code, self.code_message)]
        head += [b"%s: %s\r\n" % item for item in out.items()]
        head.append(b"\r\n")
        self._bodiless = bodiless
        if data and not bodiless:
            self.sentLength += len(data)
            head.append(_chunk(data) if self._chunked else data)
        if self._answering is not None:
            self._answering += head
            return
        self.channel.write(b"".join(head))

    def finish(self) -> None:
        """The response is complete."""
        if self._disconnected:
            raise RuntimeError(
                "DirectRequest.finish called after its connection was lost; "
                "use notifyFinish to keep track of this"
            )
        if self.finished:
            return
        if not self.startedWriting:
            self.write(b"")
        if self._chunked:
            self.channel.write(b"0\r\n\r\n")
        self.finished = True
        notifications, self._notifications = self._notifications, []
        for notification in notifications:
            notification.callback(None)
        self.channel.request_done(self, self._close)

    def response(
        self, code: int, headers: tuple[tuple[bytes, bytes], ...], body: bytes
    ) -> bytes:
        """
        The bytes of the whole answer C{code}, C{headers} and C{body}, as
        rendering would write them (C{setResponseCode}, C{setHeader} for
        each, C{body} returned from C{render}), without writing them: for a
        request nothing has been set on, which is then done with.
        """
        for name, value in headers:
            self.setHeader(name, value)
        self.setResponseCode(code)
        self.setHeader(b"Content-Length", b"%d" % len(body))
        self._answering = []
        self.write(body)
        response = b"".join(self._answering)
        self._answering = None
        return response

    def notifyFinish(self) -> Deferred[None]:
        """Fires with None when the response is complete, or fails when the peer goes."""
        notification: Deferred[None] = Deferred()
        self._notifications.append(notification)
        return notification

    def gone(self) -> bool:
        """Whether the peer went away before the response was complete."""
        return self._disconnected

    def connection_lost(self, reason: Failure) -> None:
        """The peer went away before the response was complete."""
        self._disconnected = True
        notifications, self._notifications = self._notifications, []
        for notification in notifications:
            notification.errback(reason)

    # Rendering.

    def render(self, found: Any) -> None:
        """Render C{found}, as twisted.web's L{server.Request.render} does."""
        try:
            body = found.render(self)
        except Exception:
            self._failed(Failure())
            return
        if body is NOT_DONE_YET:
            return
        if not isinstance(body, bytes):
            self._failed(Failure(TypeError(f"{found!r} rendered {type(body).__name__}, not bytes")))
            return
        if self.method == b"HEAD":
            if body:
                self.setHeader(b"Content-Length", b"%d" % len(body))
            self.write(b"")
        else:
            self.setHeader(b"Content-Length", b"%d" % len(body))
            self.write(body)
        self.finish()

    def _failed(self, reason: Failure) -> None:
        log.failure(
            "http.render_failed: {method} {path}",
            reason,
            method=self.method.decode("ascii"),
            path=self.path.decode("ascii"),
        )
        if self.startedWriting:
            self.channel.close()
            return
        body = (
            b"<html><head><title>Processing Failed</title></head><body>"
            b"<b>Processing Failed</b></body></html>"
        )
        self.setResponseCode(INTERNAL_SERVER_ERROR)
        self.setHeader(b"Content-Type", b"text/html")
        self.setHeader(b"Content-Length", b"%d" % len(body))
        self.write(body)
        self.finish()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def peer_gone(request: Any) -> Callable[[], bool]:
    """
    A check, for an answer made later, of whether C{request}'s peer went
    away meanwhile: a L{DirectRequest} knows it (L{DirectRequest.gone});
    twisted.web's request is asked through C{notifyFinish}, which costs a
    Deferred and its callbacks on every request.
    """
    if type(request) is DirectRequest:
        return request.gone
    finished: list[object] = []
    request.notifyFinish().addBoth(finished.append)
    return lambda: bool(finished)


__all__ = [
    "DirectRequest",
    "HeadAnswer",
    "IDirectRequest",
    "IDirectResource",
    "IHeadGate",
    "RequestChannel",
    "direct_resource",
    "http_date",
    "peer_gone",
]
