"""
The A2A HTTP+JSON binding (A2A §11, the REST binding): routes over the same
dispatcher, policy and transport limits as the JSON-RPC binding, so that
every method answers as it does there, in this binding's own shapes.

Wire contract (routes relative to the interface URL: C{<public URL>/a2a/rest}
on the public listeners, C{/a2a/rest} on the operator's doors)::

    POST   message:send               SendMessage         body SendMessageRequest
    POST   message:stream             SendStreamingMessage  (SSE)
    GET    tasks/{id}                 GetTask             ?historyLength=
    GET    tasks                      ListTasks           ?contextId= &status= &pageSize=
                                                          &pageToken= &historyLength=
                                                          &statusTimestampAfter=
                                                          &includeArtifacts=
    POST   tasks/{id}:cancel          CancelTask          body CancelTaskRequest, or none
    POST   tasks/{id}:subscribe       SubscribeToTask     no body (SSE); GET too (the
                                                          proto's verb)
    POST   tasks/{taskId}/pushNotificationConfigs       CreateTaskPushNotificationConfig
    GET    tasks/{taskId}/pushNotificationConfigs       ListTaskPushNotificationConfigs
                                                          ?pageSize= &pageToken=
    GET    tasks/{taskId}/pushNotificationConfigs/{id}  GetTaskPushNotificationConfig
    DELETE tasks/{taskId}/pushNotificationConfigs/{id}  DeleteTaskPushNotificationConfig
    GET    extendedAgentCard          GetExtendedAgentCard
    POST   extensions/{method}        an extension method of the policy, by its name;
                                      body its params (SSE for a streaming one)
    POST   tasks/{id}:{verb}          an extension method the door names for the verb
                                      (the operator's doors: decide, for
                                      beacon.review.Decide); body its other params

    Every route is also served under {tenant}/ (A2A §5.3; the proto's
    additional bindings): the tenant becomes the request's tenant member,
    which Beacon's policies ignore, as they do on JSON-RPC. The interface
    URL with a slash after it (C{/a2a/rest/}, C{/a2a/rest//tasks}: a client
    that joins paths as C{<url>/} and C{/route}) is the same.

    Path members are percent-decoded UTF-8 (an id holding / or : travels
    escaped); a last segment ending in :cancel, :subscribe or a door's verb
    names that method, any other colon belongs to the id. The members a GET
    (or DELETE) does not carry in its path come as query parameters (A2A
    §11.5): camelCase names (snake_case too), true/false, decimal numbers,
    enum names, RFC 3339 timestamps, a repeated member as repeated names or
    a comma list; a single member named twice is refused. A POST's members
    come in its JSON object body; the path's members win over the body's.

    A2A-Version: 1.0 as a header or ?A2A-Version=1.0 (the header wins);
    without 1.0 every route is 400 VERSION_NOT_SUPPORTED. A2A-Extensions as
    on JSON-RPC: an extension method, by either route, exists only for a
    caller that activates its extension; activated ones are echoed.

    -> 200 application/a2a+json, the result (an empty result: {})
    -> 200 text/event-stream for a stream: "data: <StreamResponse>" per
       event, keepalive comments; a stream that fails ends with
       "event: error" and "data: <google.rpc.Status>"
    -> an A2A error: its HTTP status and google.rpc code (A2A §5.4:
       TaskNotFound and an unknown method 404 NOT_FOUND, validation 400
       INVALID_ARGUMENT, the other A2A errors 400 FAILED_PRECONDITION,
       internal 500), application/json, a google.rpc.Status:
       {"error": {"code": <HTTP status>, "status": <google.rpc code>,
        "message": ..., "details": [ErrorInfo, BadRequest...]}}
    -> 404 METHOD_NOT_FOUND (domain a2a-protocol.org) for a path no route
       has; 405 METHOD_NOT_ALLOWED (+ Allow) for a route's other verbs
    Transport refusals, before any JSON is parsed, are the JSON-RPC
    endpoint's (the same order, limits and log events) as google.rpc.Status
    with an ErrorInfo of Beacon's domain: 413 TOO_LARGE, 429 RATE_LIMITED
    (+ Retry-After and a RetryInfo), 415 UNSUPPORTED_MEDIA_TYPE (a POST with
    a body, or a Content-Type, must be application/json or
    application/a2a+json; a POST without either is admitted), 401
    UNAUTHENTICATED (+ WWW-Authenticate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import unquote_to_bytes

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from zope.interface import alsoProvides

from beacon.bindings.http._direct_request import IDirectResource, peer_gone
from beacon.bindings.admission import BEACON_DOMAIN, JSON_TYPE, TransportLimits, refuse
from beacon.bindings.http._jsonrpc import (
    call_context,
    echo_extensions,
    stream_events,
    write_json,
)
from beacon.protocol import (
    ERROR_INFO_TYPE,
    RETRY_INFO_TYPE,
    A2AError,
    CallContext,
    Dispatcher,
    EventStream,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    QueryText,
    dumps,
    loads,
    status_object,
)

log = Logger()

#: The media type of the binding's answers (A2A §11: SHOULD).
A2A_JSON_TYPE = b"application/a2a+json"
#: The media types a request body may be sent as.
REQUEST_TYPES = (JSON_TYPE, A2A_JSON_TYPE)
#: The google.rpc code of each HTTP status a transport refusal has.
_GRPC_CODES = {
    401: "UNAUTHENTICATED",
    405: "UNIMPLEMENTED",
    413: "RESOURCE_EXHAUSTED",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
}


def status_refusal(status: int, code: str, message: str, headers: Mapping[bytes, bytes]) -> bytes:
    """
    A transport refusal as this binding spells it (a L{RefusalShape}): a
    google.rpc.Status whose ErrorInfo reason is the refusal's code in upper
    case (C{TOO_LARGE}, C{RATE_LIMITED}...), in Beacon's domain, with a
    RetryInfo when the refusal says when to retry.
    """
    details: list[dict[str, Any]] = [
        {"@type": ERROR_INFO_TYPE, "reason": code.upper(), "domain": BEACON_DOMAIN}
    ]
    retry = headers.get(b"Retry-After")
    if retry is not None:
        details.append({"@type": RETRY_INFO_TYPE, "retryDelay": retry.decode("ascii") + "s"})
    error = {
        "code": status,
        "status": _GRPC_CODES.get(status, "UNKNOWN"),
        "message": message,
        "details": details,
    }
    return dumps({"error": error})


@dataclass(frozen=True)
class Route:
    """
    What a route runs.

    @ivar method: The method's name; empty for the extension route, whose
        path names it.
    @ivar body: Whether the request's members come in a JSON body (else in
        the query).
    @ivar extension: Whether the method is an extension method (looked up
        among the policy's extension methods only).
    """

    method: str
    body: bool = False
    extension: bool = False


_SEND = {b"POST": Route("SendMessage", body=True)}
_STREAM = {b"POST": Route("SendStreamingMessage", body=True)}
_LIST = {b"GET": Route("ListTasks")}
_GET = {b"GET": Route("GetTask")}
_CARD = {b"GET": Route("GetExtendedAgentCard")}
_EXTENSION = {b"POST": Route("", body=True, extension=True)}
_CONFIGS = {
    b"POST": Route("CreateTaskPushNotificationConfig", body=True),
    b"GET": Route("ListTaskPushNotificationConfigs"),
}
_CONFIG = {
    b"GET": Route("GetTaskPushNotificationConfig"),
    b"DELETE": Route("DeleteTaskPushNotificationConfig"),
}
#: The methods on one task: tasks/{id}:<verb>.
_TASK_VERBS: dict[bytes, dict[bytes, Route]] = {
    b"cancel": {b"POST": Route("CancelTask", body=True)},
    b"subscribe": {b"POST": Route("SubscribeToTask", body=True), b"GET": Route("SubscribeToTask")},
}

#: A matched path: its routes by verb, the members its path carries, and
#: the extension method it names (the extension route).
_Match = tuple[Mapping[bytes, Route], dict[str, bytes], bytes]


def _match(segments: list[bytes], verbs: Mapping[bytes, dict[bytes, Route]]) -> _Match | None:
    """The routes of the path made of C{segments}; None when none has it."""
    count = len(segments)
    first = segments[0]
    if count == 1:
        if first == b"message:send":
            return _SEND, {}, b""
        if first == b"tasks":
            return _LIST, {}, b""
        if first == b"message:stream":
            return _STREAM, {}, b""
        if first == b"extendedAgentCard":
            return _CARD, {}, b""
        return None
    if first == b"tasks":
        task = segments[1]
        if count == 2:
            head, colon, verb = task.rpartition(b":")
            if colon and verb in verbs:
                return verbs[verb], {"id": head}, b""
            return _GET, {"id": task}, b""
        if segments[2] == b"pushNotificationConfigs":
            if count == 3:
                return _CONFIGS, {"taskId": task}, b""
            if count == 4:
                return _CONFIG, {"taskId": task, "id": segments[3]}, b""
        return None
    if first == b"extensions" and count == 2:
        return _EXTENSION, {}, segments[1]
    return None


def _text(raw: bytes, name: str) -> str:
    """A path member, percent-decoded as UTF-8."""
    try:
        if b"%" in raw:
            raw = unquote_to_bytes(raw)
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidParamsError(
            field_violations=[(name, "must be percent-encoded UTF-8")]
        ) from None


def _query(args: Mapping[bytes, list[bytes]]) -> dict[str, Any]:
    """The members a request's query carries (A2A §11.5), as L{QueryText}s."""
    members: dict[str, Any] = {}
    for name, values in args.items():
        if name == b"A2A-Version":
            continue  # a service parameter, not a member
        try:
            key = name.decode("utf-8")
            texts = [QueryText(value.decode("utf-8")) for value in values]
        except UnicodeDecodeError:
            raise InvalidParamsError(
                "query parameters must be UTF-8",
                field_violations=[(name.decode("latin-1"), "must be UTF-8")],
            ) from None
        members[key] = texts[0] if len(texts) == 1 else texts
    return members


class RESTResource(Resource):
    """
    The A2A HTTP+JSON binding at one interface URL: a leaf that routes the
    rest of the path itself (see the module's wire contract).
    """

    isLeaf = True
    #: Its transport refusals are google.rpc.Status (see L{refusal_shape}
    #: in the transport edge): a body over the cap too, refused before the
    #: request reaches this resource.
    refusal_shape = staticmethod(status_refusal)

    def __init__(
        self,
        dispatcher: Dispatcher,
        limits: TransportLimits | None,
        *,
        binding: str = "http+json",
        extensions: frozenset[str] = frozenset(),
        task_verbs: Mapping[str, str] | None = None,
        clock: IReactorTime | None = None,
        keepalive: float = 15.0,
        source: Callable[[server.Request], str] | None = None,
    ) -> None:
        """
        @param dispatcher: Runs requests against the policy.
        @param limits: Applied before anything is parsed; None where the
            transport itself decides who may speak (the operator's doors).
        @param binding: The binding name recorded in each call's context
            (and so in a stored submission's door).
        @param extensions: The extension URIs this interface supports; those
            a caller activates are echoed in C{A2A-Extensions}.
        @param task_verbs: Extension methods served as
            C{POST tasks/{id}:<verb>}, by verb (the task's id becomes their
            C{id} param).
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
        self._verbs = dict(_TASK_VERBS)
        for verb, method in (task_verbs or {}).items():
            self._verbs[verb.encode("ascii")] = {
                b"POST": Route(method, body=True, extension=True)
            }
        if source is None:
            # Its render reads no more of a request than the direct channel
            # offers (a source callable may read anything).
            alsoProvides(self, IDirectResource)

    def render(self, request: server.Request) -> bytes | int:
        segments = request.postpath
        assert segments is not None
        while segments and not segments[0]:
            # The interface URL with a slash after it is the same.
            segments = segments[1:]
        method = request.method
        plain = _match(segments, self._verbs) if segments else None
        tenant = b""
        if plain is not None and method in plain[0]:
            found = plain
        else:
            tenanted = _match(segments[1:], self._verbs) if len(segments) > 1 else None
            if tenanted is None or method not in tenanted[0]:
                return self._unrouted(request, plain or tenanted)
            found, tenant = tenanted, segments[0]
        routes, members, name = found
        route = routes[method]

        if self._limits is not None:
            source = self._limits.source_of(request)
            content = request.content
            assert content is not None
            has_body = bool(content.seek(0, 2))
            content.seek(0)
            refusal = self._limits.refusal(
                request,
                source,
                json_body=route.body
                and (has_body or request.getHeader(b"Content-Type") is not None),
                media=REQUEST_TYPES,
                shape=status_refusal,
            )
            if refusal is not None:
                return refusal
        else:
            source = self._source(request) if self._source else "local"
        context = call_context(request, self._binding, source, self._extensions)
        try:
            params = self._params(request, route, members, tenant)
            target = _text(name, "method") if route.extension and name else route.method
        except A2AError as error:
            self._refused(request, context, error)
            return NOT_DONE_YET
        gone = peer_gone(request)

        # Each guarded itself, not by an errback: one step less on every
        # request's way back.
        def answered(result: Any) -> None:
            try:
                if gone():
                    if isinstance(result, EventStream):
                        result.cancel()
                    return  # The peer went away; nothing to answer.
                echo_extensions(request, context)
                if isinstance(result, EventStream):
                    stream_events(
                        request, result, self._clock, self._keepalive, _event, _error_event
                    )
                else:
                    write_json(request, A2A_JSON_TYPE, dumps({} if result is None else result))
            except Exception:
                log.failure("http.response_failed")

        def refused(reason: Failure) -> None:
            try:
                # Dispatcher.run fails with A2AErrors only.
                error = reason.value
                assert isinstance(error, A2AError)
                if not gone():
                    self._refused(request, context, error)
            except Exception:
                log.failure("http.response_failed")

        self._dispatcher.run(target, params, context, extension=route.extension).addCallbacks(
            answered, refused
        )
        return NOT_DONE_YET

    def _params(
        self, request: server.Request, route: Route, members: dict[str, bytes], tenant: bytes
    ) -> Any:
        """The method's params: the body's or the query's members, then the path's."""
        if route.body:
            assert request.content is not None
            body = request.content.read()
            params: Any = loads(body) if body else {}
            if not isinstance(params, dict):
                raise InvalidRequestError("the request body must be a JSON object")
        else:
            params = _query(request.args)
        for member, raw in members.items():
            params[member] = _text(raw, member)
        if tenant:
            params["tenant"] = _text(tenant, "tenant")
        return params

    def _refused(self, request: server.Request, context: CallContext, error: A2AError) -> None:
        """Answer an A2A error: its HTTP status and google.rpc.Status."""
        echo_extensions(request, context)
        request.setResponseCode(error.http_status)
        write_json(request, JSON_TYPE, dumps(status_object(error)))

    def _unrouted(self, request: server.Request, found: _Match | None) -> bytes | int:
        """
        A path no route has (404, as an unknown method), or a verb its
        routes lack (405 with Allow; a CORS preflight for one of them is
        answered 204).
        """
        if found is None:
            error = MethodNotFoundError("no route of this binding has this path")
            request.setResponseCode(error.http_status)
            request.setHeader(b"Content-Type", JSON_TYPE)
            return dumps(status_object(error))
        allowed = tuple(found[0])
        if (
            request.method == b"OPTIONS"
            and self._limits is not None
            and self._limits.preflight(request, allowed)
        ):
            request.finish()
            return NOT_DONE_YET
        return refuse(
            request,
            405,
            "method_not_allowed",
            "this route does not answer that method",
            {b"Allow": b", ".join(allowed)},
            status_refusal,
        )


def _event(result: Any) -> bytes:
    """One event of a stream: the bare StreamResponse."""
    return b"data: " + dumps(result) + b"\n\n"


def _error_event(error: A2AError) -> bytes:
    """A stream's end in error: an C{error} event holding a google.rpc.Status."""
    return b"event: error\ndata: " + dumps(status_object(error)) + b"\n\n"


__all__ = ["A2A_JSON_TYPE", "REQUEST_TYPES", "RESTResource", "Route", "status_refusal"]
