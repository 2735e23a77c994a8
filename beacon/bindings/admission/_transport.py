"""
What every public binding enforces before it parses a request
(L{TransportLimits}): the body cap, the per-source rate, how the source
is named, the submitter's credentials and the web origins allowed, with
the refusal each gives; and a request header's value as every binding
reads it (L{header_value}).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from twisted.logger import Logger
from twisted.web import server
from twisted.web.http import NO_CONTENT
from zope.interface import implementer

from beacon.bindings.admission._auth import SubmitterAuth
from beacon.bindings.admission._edge import (
    CORS_EXPOSED_HEADERS,
    CORS_MAX_AGE,
    CORS_REQUEST_HEADERS,
    JSON_TYPE,
    HeadAnswer,
    IPreflight,
    RefusalShape,
    is_json_media_type,
    native_refusal,
    refusal_body,
    refuse,
)
from beacon.bindings.admission._limits import RateLimiter, SourceResolver
from beacon.bindings.admission._refusals import Refusals

log = Logger()


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

    def answer_head(
        self, peer: Any, shape: RefusalShape = native_refusal
    ) -> HeadAnswer | str | None:
        """
        For a door's L{IHeadGate}, on the direct channel, before a request
        from C{peer} is made or rendered: the rate, checked once. A source
        over its rate gets the 429 that L{refusal} would give; a source
        under it is admitted (its token taken) and named, so that the
        rendering checks the rest (L{refusal} with C{rated}). A request
        whose rendering adds to a refusal (the CORS headers of a listed
        origin) or names its source from its headers (trusted proxies) is
        left to the rendering, as is every request when there is no rate.

        @return: The answer, the source admitted, or None.
        """
        if self.cors_origins or self.sources.trusts_proxies or self.rate.rate <= 0:
            return None
        source = self.sources.resolve(peer, None)
        retry = self.rate.refusal(source, self.refusals, log, _RATE_LIMITED)
        if retry is None:
            return source
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
        rated: bool = False,
    ) -> bytes | None:
        """
        Apply the rate limit, the media type (with C{json_body}: 415 unless
        C{Content-Type} is one of C{media}), the credential check (HTTP
        401 with C{WWW-Authenticate}) and the body cap to C{request}, in that
        order. A request from one of C{cors_origins} gets its CORS headers
        first, so that its page can read a refusal too.

        @param shape: How the door spells a refusal's body.
        @param rated: The rate was checked already, and the token taken
            (L{answer_head}): check the rest.
        @return: The refusal body (status and headers already set), or None
            when the request may go on.
        """
        if self.cors_origins and self.allow_origin(request):
            request.setHeader(b"Access-Control-Expose-Headers", CORS_EXPOSED_HEADERS)
        retry = None if rated else self.rate.refusal(source, self.refusals, log, _RATE_LIMITED)
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
            header_value(request, b"Authorization"), header_value(request, b"X-API-Key")
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


def header_value(request: server.Request, name: bytes) -> str | None:
    """
    The value of request header C{name}: its field lines joined with
    C{", "}, as the WebSocket binding reads its service parameters (RFC
    9110 5.3), so that a version or a credential sent on two lines comes
    to the same outcome on every binding (none of them reads as one).
    """
    values = request.requestHeaders.getRawHeaders(name)
    return b", ".join(values).decode("latin-1") if values else None


__all__ = ["TransportLimits", "header_value"]
