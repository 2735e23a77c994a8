"""
The HTTP faces of health and metrics:

    GET|HEAD /healthz     200 {"status":"ok"}: the reactor answers
    GET|HEAD /readyz      200 {"status":"ok"}, or
                          503 {"status":"unavailable","reason":"..."}
    GET|HEAD /metrics     200, the Prometheus text format (0.0.4)

Every answer says C{Cache-Control: no-store}; any other method is 405 with
C{Allow}. The health resources are mounted on every public listener,
outside the rate limit, and answer from state kept in memory (no store
round trip per request); they provide L{IDirectResource}, so that the
direct channel answers them as twisted.web does, byte for byte.
"""

from __future__ import annotations

from typing import Any, Callable

from prometheus_client import CollectorRegistry, generate_latest
from twisted.web.resource import Resource
from zope.interface import implementer

from beacon.bindings.http import IDirectResource, error_body
from beacon.protocol import dumps

_ALLOWED = (b"GET", b"HEAD")
_NO_STORE = b"no-store"
_JSON = b"application/json"
#: The Prometheus text exposition format, which every scraper reads.
METRICS_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

#: A check: whether all is well, and if not, a word saying why.
Check = Callable[[], "tuple[bool, str | None]"]


class _Leaf(Resource):
    """A leaf answering GET and HEAD only; 404 below it, 405 otherwise."""

    isLeaf = True

    def render(self, request: Any) -> bytes:
        if request.postpath:
            request.setResponseCode(404)
            request.setHeader(b"Content-Type", _JSON)
            return self._bodiless(request, error_body("not_found", "no such resource"))
        if request.method not in _ALLOWED:
            request.setResponseCode(405)
            request.setHeader(b"Content-Type", _JSON)
            request.setHeader(b"Allow", b", ".join(_ALLOWED))
            return self._bodiless(
                request,
                error_body("method_not_allowed", "this resource does not answer that method"),
            )
        status, content_type, body = self.answer()
        request.setResponseCode(status)
        request.setHeader(b"Content-Type", content_type)
        request.setHeader(b"Cache-Control", _NO_STORE)
        return self._bodiless(request, body)

    @staticmethod
    def _bodiless(request: Any, body: bytes) -> bytes:
        """
        C{body}, or for HEAD its length alone: both HTTP paths then send the
        same head and no body.
        """
        if request.method == b"HEAD":
            request.setHeader(b"Content-Length", b"%d" % len(body))
            return b""
        return body

    def answer(self) -> tuple[int, bytes, bytes]:
        """The status, content type and body of a GET."""
        raise NotImplementedError()


@implementer(IDirectResource)
class HealthResource(_Leaf):
    """
    C{/healthz} or C{/readyz}: 200 C{{"status":"ok"}} while C{check} says
    all is well, else 503 C{{"status":"unavailable","reason":...}}.
    """

    _OK = dumps({"status": "ok"})

    def __init__(self, check: Check) -> None:
        """
        @param check: Asked on every request; it must be cheap (state kept
            in memory).
        """
        super().__init__()
        self._check = check
        self._refusals: dict[str | None, bytes] = {}

    def answer(self) -> tuple[int, bytes, bytes]:
        ok, reason = self._check()
        if ok:
            return 200, _JSON, self._OK
        body = self._refusals.get(reason)
        if body is None:
            body = self._refusals[reason] = dumps({"status": "unavailable", "reason": reason})
        return 503, _JSON, body


def alive() -> tuple[bool, str | None]:
    """C{/healthz}'s check: answering at all is being alive."""
    return True, None


@implementer(IDirectResource)
class MetricsResource(_Leaf):
    """
    C{/metrics}: C{registry} in the Prometheus text format, collected on the
    reactor thread at each scrape (prometheus_client's own Twisted resource
    imports the global reactor and collects on its thread pool).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()
        self._registry = registry

    def answer(self) -> tuple[int, bytes, bytes]:
        return 200, METRICS_TYPE, generate_latest(self._registry)


__all__ = ["Check", "HealthResource", "METRICS_TYPE", "MetricsResource", "alive"]
