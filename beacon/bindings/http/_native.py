"""
The native beacon/0.1 protocol (normative text: C{docs/explanation/protocol-0.1.rst}).

Wire contract::

    POST /beacon/0.1/submissions
        Content-Type: application/json
        {"text": "..."}  or  {"message": {... valid message.schema.json ...}}
        -> 201 {"receipt": {"id": ..., "receivedAt": ..., "sha256": ...}}
           Location: submissions/<id>
    GET|HEAD /beacon/0.1/submissions/<id>
        -> 200 {"id": ..., "state": "TASK_STATE_...", "updatedAt": ...}
    GET|HEAD /beacon/0.1/message.schema.json     the schema, cacheable

    Errors, always {"error": {"code": ..., "message": ...}}:
        400 invalid_json, 400 invalid_submission (names a location, never a
        value), 401 unauthenticated (+ WWW-Authenticate; only when [auth]
        is configured), 404 not_found, 405 method_not_allowed (+ Allow),
        413 too_large, 415 unsupported_media_type,
        429 rate_limited (+ Retry-After), 503 unavailable (+ Retry-After:
        the store could not commit; nothing was stored)

The body cap, the per-source rate limit and the submitter credentials are
the A2A endpoint's (L{TransportLimits}), applied before any JSON is parsed; a
source's requests through either door draw on the same bucket.
"""

from __future__ import annotations

import re
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer

from beacon.bindings.http._direct_request import IDirectResource, peer_gone
from beacon.bindings.admission import JSON_TYPE, NotFound, TransportLimits, container, refuse
from beacon.bindings.http._jsonrpc import DocumentResource, MethodsResource, PreparedDocument
from beacon.protocol import (
    CallContext,
    INativeHandler,
    InternalError,
    InvalidParamsError,
    JSONParseError,
    dumps,
    loads,
)

log = Logger()

_RECEIPT_ID = re.compile(rb"\A[A-Za-z0-9]{1,256}\Z")
_NO_STORE = b"no-store"


class _Answering:
    """Writes a Deferred JSON answer, unless the peer has gone."""

    @staticmethod
    def answer(request: server.Request, result: Deferred[tuple[int, bytes, dict[bytes, bytes]]]) -> int:
        gone = peer_gone(request)

        def write(outcome: tuple[int, bytes, dict[bytes, bytes]]) -> None:
            if gone():
                return
            status, body, headers = outcome
            request.setResponseCode(status)
            request.setHeader(b"Content-Type", JSON_TYPE)
            request.setHeader(b"Cache-Control", _NO_STORE)
            for name, value in headers.items():
                request.setHeader(name, value)
            request.write(body)
            request.finish()

        result.addCallback(write).addErrback(
            lambda reason: log.failure("native.response_failed", reason)
        )
        return NOT_DONE_YET


def _error(status: int, code: str, message: str, headers: dict[bytes, bytes] | None = None) -> tuple[int, bytes, dict[bytes, bytes]]:
    return status, dumps({"error": {"code": code, "message": message}}), headers or {}


@implementer(IDirectResource)
class SubmissionsResource(MethodsResource, _Answering):
    """
    C{/beacon/0.1/submissions}: POST a submission; its children are the
    status of each receipt.
    """

    allowed = (b"POST",)
    isLeaf = False

    def __init__(self, handler: INativeHandler, limits: TransportLimits) -> None:
        """
        @param handler: The Beacon (see L{INativeHandler}).
        @param limits: Applied before anything is parsed.
        """
        super().__init__()
        self._handler = handler
        self._limits = limits
        self.cors = limits

    def getChild(self, path: bytes, request: server.Request) -> Resource:
        if path == b"":
            return self
        if _RECEIPT_ID.match(path) is None or request.postpath:
            return NotFound()
        return StatusResource(self._handler, self._limits, path.decode("ascii"))

    def render_POST(self, request: server.Request) -> bytes | int:
        source = self._limits.source_of(request)
        refusal = self._limits.refusal(request, source, json_body=True)
        if refusal is not None:
            return refusal
        assert request.content is not None
        try:
            document = loads(request.content.read())
        except JSONParseError:
            self._limits.refusals["invalid"] += 1
            return refuse(request, 400, "invalid_json", "the body is not strict JSON (UTF-8, no duplicate keys, no NaN)")
        context = CallContext(binding="native", source=source)
        result = maybeDeferred(self._handler.submit_document, context, document)

        def created(receipt: dict[str, str]) -> tuple[int, bytes, dict[bytes, bytes]]:
            location = b"submissions/" + receipt["id"].encode("ascii")
            return 201, dumps({"receipt": receipt}), {b"Location": location}

        def refused(reason: Failure) -> tuple[int, bytes, dict[bytes, bytes]]:
            if isinstance(reason.value, InvalidParamsError):
                self._limits.refusals["invalid"] += 1
                error = reason.value
                where = "; ".join(
                    f"{field or '(body)'}: {description}"
                    for field, description in error.field_violations
                )
                return _error(400, "invalid_submission", where or error.message)
            if not reason.check(InternalError):
                log.failure("native.submit_failed", reason)
            return _error(
                503,
                "unavailable",
                "the submission could not be stored; it was not received, try again later",
                {b"Retry-After": b"30"},
            )

        return self.answer(request, result.addCallbacks(created, refused))


class StatusResource(MethodsResource, _Answering):
    """
    C{/beacon/0.1/submissions/<id>}: state and timestamp, nothing else.
    """

    allowed = (b"GET", b"HEAD")

    def __init__(self, handler: INativeHandler, limits: TransportLimits, receipt_id: str) -> None:
        super().__init__()
        self._handler = handler
        self._limits = limits
        self._id = receipt_id

    def render_GET(self, request: server.Request) -> bytes | int:
        refusal = self._limits.refusal(request, self._limits.source_of(request))
        if refusal is not None:
            return refusal
        result = maybeDeferred(self._handler.native_status, self._id)

        def found(status: dict[str, str] | None) -> tuple[int, bytes, dict[bytes, bytes]]:
            if status is None:
                return _error(404, "not_found", "no submission has that receipt id")
            return 200, dumps(status), {}

        def failed(reason: Failure) -> tuple[int, bytes, dict[bytes, bytes]]:
            log.failure("native.status_failed", reason)
            return _error(503, "unavailable", "the status cannot be read now", {b"Retry-After": b"30"})

        return self.answer(request, result.addCallbacks(found, failed))

    render_HEAD = render_GET


class NativeResources:
    """
    The native protocol's resources and discovery documents, ready to mount.

    @ivar discovery: C{/.well-known/autonomous-agent}, published once the
        public URL is known.
    @ivar schema: C{message.schema.json}, published at construction.
    """

    def __init__(
        self,
        handler: INativeHandler,
        limits: TransportLimits,
        schema: dict[str, Any],
        modified: float,
        *,
        max_age: int = 300,
    ) -> None:
        self.discovery = PreparedDocument()
        self.schema = PreparedDocument()
        self.schema.publish(schema, modified)
        self._submissions = SubmissionsResource(handler, limits)
        self._discovery_resource = DocumentResource(self.discovery, max_age=max_age)
        self._schema_resource = DocumentResource(self.schema, max_age=max_age)

    def mount(self, root: Resource) -> Resource:
        """
        Put the native resources into C{root}: C{/beacon/0.1/submissions},
        C{/beacon/0.1/message.schema.json} and
        C{/.well-known/autonomous-agent}.
        """
        version = container(container(root, b"beacon"), b"0.1")
        version.putChild(b"submissions", self._submissions)
        version.putChild(b"message.schema.json", self._schema_resource)
        container(root, b".well-known").putChild(b"autonomous-agent", self._discovery_resource)
        return root
