"""
The landing page: what the public listeners answer at C{/}, for a person
who opens the address in a browser and for a client that asks what it is.

Wire contract::

    GET|HEAD /
        200, one of two representations of the same few facts, made from
        the published agent card (its name, its supportedInterfaces) and
        nothing else (never a submission):
          - text/html; charset=utf-8 when the request's Accept prefers
            text/html to application/json (a browser's does), with a
            Content-Security-Policy that allows nothing but the page's
            one inline style (by its hash);
          - application/json otherwise (no Accept, */*, application/json):
            {"name", "about", "agentCard", "supportedInterfaces"}.
        Vary: Accept, X-Content-Type-Options: nosniff, the card's
        Cache-Control max-age, an ETag per representation and the card's
        Last-Modified (304 on a matching If-None-Match or
        If-Modified-Since); 503 before the card is published; any other
        method: 405 with Allow, as the card answers.

Public like the card: no rate limit and no credential; the representations
are made once per publication of the card and served as prepared bytes.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twisted.web import server
from twisted.web.http import CACHED, NOT_MODIFIED
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer

from beacon.bindings.admission import JSON_TYPE, refuse
from beacon.bindings.http._direct_request import IDirectResource
from beacon.bindings.http._jsonrpc import MethodsResource, PreparedDocument
from beacon.protocol import dumps

#: Where the card is served, as the landing page names it.
CARD_PATH = "/.well-known/agent-card.json"
HTML_TYPE = b"text/html; charset=utf-8"

#: What the landing page says this address is (both representations).
ABOUT = (
    "This address is a Beacon: a human-read inbox. Agents submit messages "
    "to it over A2A 1.0; people read them and decide on them. Nothing "
    "submitted is ever shown here."
)

#: The page's one inline style, allowed by its hash (and nothing else is).
STYLE = (
    "body{font-family:system-ui,sans-serif;line-height:1.5;max-width:42em;"
    "margin:2em auto;padding:0 1em}code{overflow-wrap:anywhere}"
)
CSP = (
    "default-src 'none'; style-src 'sha256-"
    + base64.b64encode(hashlib.sha256(STYLE.encode("ascii")).digest()).decode("ascii")
    + "'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
).encode("ascii")

# An Accept member: a media range and its parameters (RFC 9110 12.5.1),
# and a qvalue (12.4.2).
_QVALUE = re.compile(rb"\A(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)\Z")


def accept_quality(values: Sequence[bytes] | None, media_type: bytes) -> float:
    """
    The quality C{Accept} (its field lines C{values}) gives C{media_type}
    (lower case, C{type/subtype}): that of its most specific matching
    range (the type itself, then C{type/*}, then C{*/*}), the highest of
    equally specific ones; 0 when none matches. A member whose C{q} is
    not a qvalue is left out. No C{Accept} at all accepts anything: 1.
    """
    if not values:
        return 1.0
    kind = media_type.split(b"/", 1)[0] + b"/*"
    best = (0, 0.0)
    for member in b",".join(values).split(b","):
        media, *parameters = member.split(b";")
        media = media.strip(b" \t").lower()
        specificity = 3 if media == media_type else 2 if media == kind else 1 if media == b"*/*" else 0
        if not specificity or specificity < best[0]:
            continue
        quality = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition(b"=")
            if name.strip(b" \t").lower() == b"q":
                value = value.strip(b" \t")
                quality = float(value) if _QVALUE.match(value) else -1.0
        if quality < 0:
            continue
        if specificity > best[0] or quality > best[1]:
            best = (specificity, quality)
    return best[1]


def prefers_html(values: Sequence[bytes] | None) -> bool:
    """
    Whether an C{Accept} (its field lines C{values}) prefers text/html to
    application/json: strictly, so that no C{Accept}, C{*/*} or a tie is
    JSON.
    """
    if not values:
        return False
    return accept_quality(values, b"text/html") > accept_quality(values, b"application/json")


@dataclass(frozen=True)
class Landing:
    """The two representations made for one publication of the card, and their validators."""

    card_etag: bytes
    modified: float
    html: bytes
    html_etag: bytes
    json: bytes
    json_etag: bytes


def _etag(body: bytes) -> bytes:
    return b'"' + hashlib.sha256(body).hexdigest()[:32].encode("ascii") + b'"'


def _facts(card: Any) -> tuple[str, list[dict[str, str]]]:
    """The card's name and its interfaces (their url, binding and version), as far as they are strings."""
    document = card if isinstance(card, dict) else {}
    name = document.get("name")
    interfaces: list[dict[str, str]] = []
    for entry in document.get("supportedInterfaces") or ():
        if not isinstance(entry, dict):
            continue
        kept = {
            key: entry[key]
            for key in ("url", "protocolBinding", "protocolVersion")
            if isinstance(entry.get(key), str)
        }
        if "url" in kept and "protocolBinding" in kept:
            interfaces.append(kept)
    return (name if isinstance(name, str) and name else "Beacon"), interfaces


def landing_json(card: Any) -> bytes:
    """The JSON representation for C{card} (the published card's JSON value)."""
    name, interfaces = _facts(card)
    return dumps(
        {"name": name, "about": ABOUT, "agentCard": CARD_PATH, "supportedInterfaces": interfaces}
    )


def landing_html(card: Any) -> bytes:
    """The HTML representation for C{card}: every text from the card escaped."""
    name, interfaces = _facts(card)
    title = html.escape(name, quote=True)
    items = "".join(
        "<li>{binding}{version}: <code>{url}</code></li>\n".format(
            binding=html.escape(interface["protocolBinding"], quote=True),
            version=html.escape(
                f" {interface['protocolVersion']}" if "protocolVersion" in interface else "",
                quote=True,
            ),
            url=html.escape(interface["url"], quote=True),
        )
        for interface in interfaces
    )
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{title}</h1>\n<p>{html.escape(ABOUT)}</p>\n"
        f'<p>Its agent card: <a href="{CARD_PATH}"><code>{CARD_PATH}</code></a></p>\n'
        "<p>An agent submits with A2A's <code>SendMessage</code> through one of "
        "the interfaces the card lists:</p>\n"
        f"<ul>\n{items}</ul>\n</body>\n</html>\n"
    )
    return page.encode("utf-8")


@implementer(IDirectResource)
class LandingResource(MethodsResource):
    """
    C{/} on the public listeners (see the module docstring): the landing
    page, made from the card a L{PreparedDocument} holds, again whenever
    it is published anew.
    """

    allowed = (b"GET", b"HEAD")

    def __init__(self, card: PreparedDocument, max_age: int = 300) -> None:
        """
        @param card: The published agent card.
        @param max_age: The Cache-Control max-age, in seconds (the card's).
        """
        super().__init__()
        self._card = card
        self._cache_control = f"public, max-age={max_age}".encode("ascii")
        self._landing: Landing | None = None

    def landing(self) -> Landing | None:
        """The representations for the card published now (None: none is)."""
        card = self._card
        if not card.published:
            return None
        landing = self._landing
        if landing is None or landing.card_etag != card.etag:
            document = json.loads(card.body)
            page, value = landing_html(document), landing_json(document)
            landing = self._landing = Landing(
                card.etag, card.modified, page, _etag(page), value, _etag(value)
            )
        return landing

    def render_GET(self, request: server.Request) -> bytes | int:
        landing = self.landing()
        if landing is None:
            return refuse(request, 503, "unavailable", "not published yet")
        as_html = prefers_html(request.requestHeaders.getRawHeaders(b"Accept"))
        request.setHeader(b"Content-Type", HTML_TYPE if as_html else JSON_TYPE)
        request.setHeader(b"Cache-Control", self._cache_control)
        request.setHeader(b"Vary", b"Accept")
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        if as_html:
            request.setHeader(b"Content-Security-Policy", CSP)
        cached = request.setETag(landing.html_etag if as_html else landing.json_etag)
        if request.setLastModified(landing.modified) == CACHED or cached == CACHED:
            # No Content-Length on a 304 (RFC 9110 8.6): finished, not rendered.
            request.setResponseCode(NOT_MODIFIED)
            request.finish()
            return NOT_DONE_YET
        return landing.html if as_html else landing.json

    render_HEAD = render_GET


__all__ = [
    "CSP",
    "LandingResource",
    "accept_quality",
    "landing_html",
    "landing_json",
    "prefers_html",
]
