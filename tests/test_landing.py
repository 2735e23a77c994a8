"""
The landing page at C{/} on the public listeners
(L{beacon.bindings.http._landing}): JSON to a client, HTML to a browser,
both made from the published card, cacheable as the card is, public as the
card is, and the same bytes on the direct channel and on twisted.web
(C{make test} runs this file both ways: C{--http-path=twisted.web}).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from beacon.bindings.admission import Container, credential_digest
from beacon.bindings.http import BeaconSite
from beacon.bindings.http._direct import DirectChannel
from beacon.bindings.http._landing import accept_quality, prefers_html
from beacon.config import build_config
from beacon.service import BeaconResources, beacon_resources
from beacon.testing import MemoryStore
from raw_http import Answer

PEER = IPv4Address("TCP", "192.0.2.7", 4321)
PUBLIC = "https://inbox.example"
#: What a browser sends (Firefox's, Chromium's is alike).
BROWSER = b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
#: A card name a hostile operator (or a careless one) could configure.
HOSTILE = "</title><script>alert(1)</script> & \"quoted\" 'single' <b>"


class Public:
    """Beacon's public tree (as makeService mounts it) on a BeaconSite, read over a StringTransport."""

    def __init__(self, publish: bool = True, **settings: Any) -> None:
        self.clock = Clock()
        self.clock.advance(1_800_000_000)
        self.resources: BeaconResources = beacon_resources(
            build_config({"limits": {"rate": 0}, **settings}), MemoryStore(), self.clock
        )
        if publish:
            self.resources.publish(PUBLIC)
        self.site = BeaconSite(
            self.resources.mount(Container()),
            clock=self.clock,
            idle_timeout=None,
            header_timeout=None,
            body_timeout=None,
        )
        self.channels: list[Any] = []

    def exchange(self, request: bytes) -> tuple[bytes, Any]:
        """Send C{request} on a new connection; the bytes answered and the channel."""
        channel = self.site.buildProtocol(PEER)
        transport = StringTransport(peerAddress=PEER)
        channel.makeConnection(transport)
        channel.dataReceived(request)
        raw = transport.value()
        channel.connectionLost(Failure(ConnectionDone()))
        self.channels.append(channel)
        return raw, channel

    def get(self, headers: dict[str, bytes] | None = None, method: bytes = b"GET", path: bytes = b"/") -> Answer:
        """One request for C{path}, its answer read."""
        lines = b"".join(
            name.encode("ascii") + b": " + value + b"\r\n" for name, value in (headers or {}).items()
        )
        raw, _ = self.exchange(method + b" " + path + b" HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n")
        return Answer(raw)


@pytest.fixture
def public() -> Public:
    return Public()


def card_of(public: Public) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(public.resources.a2a.card.body)
    return document


def test_json_by_default_names_the_card_and_its_interfaces(public: Public) -> None:
    """Without Accept: JSON, the card's name, where the card is, its interfaces as it lists them, and what the address is."""
    answer = public.get()
    assert answer.status == 200
    assert answer.header("Content-Type") == "application/json"
    document = json.loads(answer.body)
    card = card_of(public)
    assert document["name"] == card["name"] == "Beacon"
    assert document["agentCard"] == "/.well-known/agent-card.json"
    assert document["supportedInterfaces"] == [
        {key: entry[key] for key in ("url", "protocolBinding", "protocolVersion")}
        for entry in card["supportedInterfaces"]
    ]
    assert document["supportedInterfaces"][0]["url"] == PUBLIC + "/a2a/v1"
    assert "human-read inbox" in document["about"]
    assert answer.header("Content-Length") == str(len(answer.body))


def test_a_browser_gets_a_page_with_a_strict_policy(public: Public) -> None:
    """A browser's Accept gets HTML: no script, nothing loaded, its one inline style allowed by its hash."""
    answer = public.get({"Accept": BROWSER})
    assert answer.status == 200
    assert answer.header("Content-Type") == "text/html; charset=utf-8"
    assert answer.header("X-Content-Type-Options") == "nosniff"
    page = answer.body.decode("utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "<title>Beacon</title>" in page
    assert '<a href="/.well-known/agent-card.json">' in page
    for entry in card_of(public)["supportedInterfaces"]:
        assert f"<code>{entry['url']}</code>" in page
    assert "human-read inbox" in page
    assert "<script" not in page
    styles = re.findall(r"<style>(.*?)</style>", page, re.DOTALL)
    assert len(styles) == 1
    digest = base64.b64encode(hashlib.sha256(styles[0].encode("utf-8")).digest()).decode()
    policy = answer.header("Content-Security-Policy")
    assert policy is not None
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["style-src"] == f"'sha256-{digest}'"
    assert directives["frame-ancestors"] == "'none'"


@pytest.mark.parametrize(
    "accept, html",
    [
        (None, False),
        (b"*/*", False),
        (b"application/json", False),
        (b"text/html, application/json", False),
        (b"application/json;q=0.5, text/html", True),
        (BROWSER, True),
        (b"text/html", True),
        (b"text/*", True),
        (b"text/html;q=0, */*", False),
        (b"text/html;q=0.9, application/json;q=0.9", False),
        (b"text/html;q=nan, application/json;q=0.1", False),
        (b"text/html;q=1.5, application/json;q=0.1", False),
        (b"TEXT/HTML", True),
        (b"image/png", False),
    ],
)
def test_accept_decides_the_representation_and_ties_are_json(
    public: Public, accept: bytes | None, html: bool
) -> None:
    """HTML only when Accept prefers text/html to application/json (by the most specific range); anything else, a tie included, is JSON."""
    assert prefers_html([accept] if accept is not None else None) is html
    answer = public.get({"Accept": accept} if accept is not None else {})
    assert answer.status == 200
    assert answer.header("Content-Type") == ("text/html; charset=utf-8" if html else "application/json")
    assert answer.header("Vary") == "Accept"


def test_accept_lines_combine_and_the_most_specific_range_wins() -> None:
    """Accept's field lines are one list; a type overrides its range, a range */*."""
    assert accept_quality([b"text/*;q=0.3", b"text/html;q=0.7, */*;q=0.1"], b"text/html") == 0.7
    assert accept_quality([b"text/*;q=0.3, */*;q=0.9"], b"text/html") == 0.3
    assert accept_quality([b"*/*;q=0.2"], b"application/json") == 0.2
    assert accept_quality([b"text/plain"], b"application/json") == 0.0
    assert accept_quality(None, b"application/json") == 1.0


@pytest.mark.parametrize("accept", [None, BROWSER], ids=["json", "html"])
def test_cacheable_as_the_card_is(public: Public, accept: bytes | None) -> None:
    """Cache-Control as the card's, Vary: Accept, an ETag and Last-Modified; 304 on a match, with the same Vary."""
    headers = {"Accept": accept} if accept is not None else {}
    first = public.get(headers)
    card = public.get(path=b"/.well-known/agent-card.json")
    assert first.header("Cache-Control") == card.header("Cache-Control") == "public, max-age=300"
    assert first.header("Last-Modified") == card.header("Last-Modified")
    assert first.header("Vary") == "Accept"
    etag = first.header("ETag")
    assert etag is not None and etag != card.header("ETag")
    modified = first.header("Last-Modified")
    assert modified is not None
    for condition in ({"If-None-Match": etag.encode()}, {"If-Modified-Since": modified.encode()}):
        again = public.get({**headers, **condition})
        assert again.status == 304
        assert again.body == b""
        assert again.header("Vary") == "Accept"
        assert again.header("ETag") == etag


def test_each_representation_has_its_own_etag(public: Public) -> None:
    """The HTML page's ETag does not validate the JSON, nor the other way round."""
    page = public.get({"Accept": BROWSER})
    document = public.get()
    assert page.header("ETag") != document.header("ETag")
    crossed = public.get({"If-None-Match": (page.header("ETag") or "").encode()})
    assert crossed.status == 200
    assert crossed.header("Content-Type") == "application/json"


@pytest.mark.parametrize("accept", [None, BROWSER], ids=["json", "html"])
def test_head_answers_the_headers_without_the_body(public: Public, accept: bytes | None) -> None:
    """HEAD: GET's status and headers (its Content-Length too), no body."""
    headers = {"Accept": accept} if accept is not None else {}
    got = public.get(headers)
    head = public.get(headers, method=b"HEAD")
    assert head.status == 200
    assert head.body == b""
    drop = {"date"}
    assert {k: v for k, v in head.headers.items() if k not in drop} == {
        k: v for k, v in got.headers.items() if k not in drop
    }


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        b"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"OPTIONS / HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\n\r\n",
    ],
    ids=["POST", "PUT", "DELETE", "OPTIONS"],
)
def test_other_methods_are_405_as_on_the_card(public: Public, request_bytes: bytes) -> None:
    """Any other method: 405 with Allow and the JSON error, as the card answers it."""
    raw, _ = public.exchange(request_bytes)
    answer = Answer(raw)
    assert answer.status == 405
    assert answer.header("Allow") == "GET, HEAD"
    assert json.loads(answer.body)["error"]["code"] == "method_not_allowed"


def test_below_the_landing_page_is_nothing(public: Public) -> None:
    """A path under / that names nothing (an empty first segment) is 404, not the page."""
    answer = public.get(path=b"//a2a/v1")
    assert answer.status == 404
    assert json.loads(answer.body)["error"]["code"] == "not_found"


def test_a_hostile_card_name_is_escaped_in_the_page_and_exact_in_the_json() -> None:
    """The card's name comes from configuration: the page escapes it (title and heading), the JSON carries it as it is."""
    public = Public(card={"name": HOSTILE})
    page = public.get({"Accept": BROWSER}).body.decode("utf-8")
    escaped = "&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quoted&quot; &#x27;single&#x27; &lt;b&gt;"
    assert f"<title>{escaped}</title>" in page
    assert f"<h1>{escaped}</h1>" in page
    assert "<script" not in page
    assert "<b>" not in page
    assert page.count("</title>") == 1
    assert json.loads(public.get().body)["name"] == HOSTILE


def test_public_as_the_card_is() -> None:
    """With submitter credentials required and a rate of one a second, the page answers every request without a credential."""
    public = Public(
        limits={"rate": 1, "burst": 1},
        auth={"api_keys": [credential_digest("a-key")]},
    )
    for _ in range(5):
        assert public.get().status == 200
        assert public.get({"Accept": BROWSER}).status == 200


def test_unpublished_is_503_then_the_page_follows_the_card() -> None:
    """Before the card is published: 503, as the card; published again for another URL, the page says so (a new ETag)."""
    public = Public(publish=False)
    answer = public.get()
    assert answer.status == 503
    assert json.loads(answer.body)["error"]["code"] == "unavailable"
    public.resources.publish(PUBLIC)
    first = public.get()
    assert first.status == 200
    public.resources.publish("https://elsewhere.example")
    second = public.get()
    assert second.header("ETag") != first.header("ETag")
    assert json.loads(second.body)["supportedInterfaces"][0]["url"] == "https://elsewhere.example/a2a/v1"
    assert b"inbox.example" not in second.body


@pytest.mark.parametrize("accept", [None, BROWSER], ids=["json", "html"])
def test_answered_on_this_runs_path(public: Public, http_path: str, accept: bytes | None) -> None:
    """With the direct channel, it answers / itself; with --http-path=twisted.web, twisted.web does, with the same answer (tests/test_direct.py compares the bytes)."""
    lines = b"Accept: " + accept + b"\r\n" if accept is not None else b""
    raw, channel = public.exchange(b"GET / HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n")
    if http_path == "direct":
        assert isinstance(channel, DirectChannel) and channel.http is None
    else:
        assert not isinstance(channel, DirectChannel)
    assert Answer(raw).status == 200
