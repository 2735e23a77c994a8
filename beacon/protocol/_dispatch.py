"""
The transport-neutral A2A core: service parameters, the method table and the
dispatcher that turns one JSON-RPC request body into one response.

Bindings take bytes off a transport, enforce their transport limits, build a
L{CallContext} and call L{Dispatcher.dispatch}. The dispatcher parses the
envelope, checks the version, validates params into typed requests and calls the
policy (an L{IA2AHandler}). Policies raise L{A2AError}s; this module is the one
place that turns them, and any unexpected failure, into JSON-RPC error objects.
Nothing about an unexpected failure reaches the peer.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet.defer import Deferred, fail, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface

from beacon.protocol import types
from beacon.protocol._stream import EventStream
from beacon.protocol._errors import (
    A2AError,
    InternalError,
    MethodNotFoundError,
    VersionNotSupportedError,
)
from beacon.protocol._jsonrpc import (
    RequestId,
    RPCRequest,
    failure,
    loads,
    parse_request,
    request_id_of,
    success,
)

#: The A2A protocol version every Beacon interface speaks.
PROTOCOL_VERSION = "1.0"

_VERSION = re.compile(r"\A([0-9]{1,4})\.([0-9]{1,4})(?:\.[0-9]{1,4})?\Z")


def version_supported(value: str | None) -> bool:
    """
    Whether an C{A2A-Version} value names 1.0. Patch numbers are ignored, as
    the specification says; an absent or empty value means 0.3.
    """
    if value == PROTOCOL_VERSION:
        return True  # what nearly every request sends
    if not value:
        return False
    match = _VERSION.match(value.strip(" \t"))
    return match is not None and (int(match.group(1)), int(match.group(2))) == (1, 0)


def parse_extensions(values: list[str] | None) -> frozenset[str]:
    """
    The extension URIs named by C{A2A-Extensions} values (comma separated,
    possibly repeated).
    """
    uris: set[str] = set()
    for value in values or ():
        uris.update(part.strip() for part in value.split(",") if part.strip())
    return frozenset(uris)


# Not frozen, as it is made for every request: see beacon.protocol.types.Part.
@dataclass(slots=True)
class CallContext:
    """
    Who is calling, through what, with which service parameters.

    @ivar binding: The binding name (C{"jsonrpc"}, C{"native"}, ...).
    @ivar source: The caller: a peer address, or the operator's uid.
    @ivar version: The C{A2A-Version} value sent, or None.
    @ivar extensions: The extension URIs the caller asked to activate.
    """

    binding: str
    source: str
    version: str | None = None
    extensions: frozenset[str] = field(default_factory=frozenset)


class IA2AHandler(Interface):
    """
    A policy: one method per A2A operation. Each takes the L{CallContext} and
    the typed request and returns the ProtoJSON result (or a Deferred of it),
    or raises an L{A2AError}.
    """

    def send_message(context: CallContext, request: types.SendMessageRequest) -> Any:
        """SendMessage: a C{{"task": ...}} or C{{"message": ...}} result."""

    def send_streaming_message(
        context: CallContext, request: types.SendMessageRequest
    ) -> Any:
        """SendStreamingMessage."""

    def get_task(context: CallContext, request: types.GetTaskRequest) -> Any:
        """GetTask: a Task."""

    def list_tasks(context: CallContext, request: types.ListTasksRequest) -> Any:
        """ListTasks: a ListTasksResponse."""

    def cancel_task(context: CallContext, request: types.CancelTaskRequest) -> Any:
        """CancelTask: a Task."""

    def subscribe_to_task(
        context: CallContext, request: types.SubscribeToTaskRequest
    ) -> Any:
        """SubscribeToTask."""

    def create_push_config(
        context: CallContext, request: types.TaskPushNotificationConfig
    ) -> Any:
        """CreateTaskPushNotificationConfig."""

    def get_push_config(
        context: CallContext, request: types.TaskPushNotificationConfigRequest
    ) -> Any:
        """GetTaskPushNotificationConfig."""

    def list_push_configs(
        context: CallContext, request: types.ListTaskPushNotificationConfigsRequest
    ) -> Any:
        """ListTaskPushNotificationConfigs."""

    def delete_push_config(
        context: CallContext, request: types.TaskPushNotificationConfigRequest
    ) -> Any:
        """DeleteTaskPushNotificationConfig."""

    def get_extended_card(
        context: CallContext, request: types.GetExtendedAgentCardRequest
    ) -> Any:
        """GetExtendedAgentCard."""


@dataclass(frozen=True)
class Method:
    """
    One row of the method table.

    @ivar parse: Validates params into the typed request.
    @ivar handler: The name of the L{IA2AHandler} method that serves it.
    @ivar streaming: Whether the method answers with a stream.
    """

    parse: Callable[[Any], Any]
    handler: str
    streaming: bool = False


#: The eleven A2A 1.0 JSON-RPC methods. Anything else, the v0.3 names
#: (C{message/send}, ...) included, is -32601 (L{method_not_found}).
METHODS: dict[str, Method] = {
    "SendMessage": Method(types.parse_send_message, "send_message"),
    "SendStreamingMessage": Method(
        types.parse_send_message, "send_streaming_message", streaming=True
    ),
    "GetTask": Method(types.parse_get_task, "get_task"),
    "ListTasks": Method(types.parse_list_tasks, "list_tasks"),
    "CancelTask": Method(types.parse_cancel_task, "cancel_task"),
    "SubscribeToTask": Method(
        types.parse_subscribe_to_task, "subscribe_to_task", streaming=True
    ),
    "CreateTaskPushNotificationConfig": Method(
        types.parse_push_config, "create_push_config"
    ),
    "GetTaskPushNotificationConfig": Method(
        types.parse_push_config_ref, "get_push_config"
    ),
    "ListTaskPushNotificationConfigs": Method(
        types.parse_list_push_configs, "list_push_configs"
    ),
    "DeleteTaskPushNotificationConfig": Method(
        types.parse_push_config_ref, "delete_push_config"
    ),
    "GetExtendedAgentCard": Method(types.parse_get_extended_card, "get_extended_card"),
}


#: The A2A 0.3 method names and the 1.0 method that replaced each: a 0.3
#: client is told which to use (still -32601: 0.3 is not served).
V03_METHODS: dict[str, str] = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/list": "ListTasks",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}


def method_not_found(method: str) -> MethodNotFoundError:
    """
    The -32601 for C{method}, which is not served: for an A2A 0.3 name, its
    message names the 1.0 method to use (from L{V03_METHODS}, never the
    caller's text).
    """
    replacement = V03_METHODS.get(method)
    if replacement is None:
        return MethodNotFoundError()
    return MethodNotFoundError(
        f"Method not found: {method} is A2A 0.3; this server speaks A2A 1.0:"
        f" use {replacement} (with A2A-Version: 1.0)"
    )


@dataclass(frozen=True)
class ExtensionMethod:
    """
    A method an extension adds: served only to callers that activated the
    extension (C{A2A-Extensions}); to others it does not exist.

    @ivar uri: The extension's URI.
    @ivar method: How it is parsed and which handler method serves it.
    """

    uri: str
    method: Method


@dataclass(frozen=True)
class StreamAnswer:
    """
    The answer to a streaming request: the request id and the stream of
    results, for the binding to frame.
    """

    id: RequestId
    stream: EventStream


#: What a JSON-RPC request is answered with: the response object, None for
#: a notification, or a L{StreamAnswer}.
Response = dict[str, Any] | StreamAnswer | None


class Dispatcher:
    """
    Runs JSON-RPC request bodies against one policy.

    @ivar errors: How many error answers it made, by ErrorInfo reason
        (C{"PARSE_ERROR"}, C{"VERSION_NOT_SUPPORTED"}, ...), for the
        metrics.
    """

    log = Logger()

    def __init__(
        self,
        handler: Any,
        extension_methods: dict[str, ExtensionMethod] | None = None,
    ) -> None:
        """
        @param handler: The policy that serves every method (an
            L{IA2AHandler}, plus the handler methods its extension methods
            name).
        @param extension_methods: Extension methods by JSON-RPC name.
        """
        self._handler = handler
        self._extension_methods = dict(extension_methods or {})
        self.errors: Counter[str] = Counter()

    def dispatch(
        self, body: bytes, context: CallContext, then: Callable[[Response], Any] | None = None
    ) -> Deferred[Any]:
        """
        Answer one request body.

        @param then: Called with the response in the callback that makes
            it (or at once, for a body that is not a request), and the
            Deferred fires with what it returns: a binding's answer is then
            no callback of its own (see L{call}).
        @return: A Deferred that fires with the JSON-RPC response object, or
            with None for a notification (which is run but never answered),
            or with a L{StreamAnswer} for a streaming method (given to
            C{then} when there is one). It never fails.
        """
        try:
            request = parse_request(loads(body))
        except A2AError as error:
            self.errors[error.reason] += 1
            response = failure(request_id_of(error), error)
            return _fired(response if then is None else then(response))
        return self.call(request, context, then)

    def call(
        self,
        request: RPCRequest,
        context: CallContext,
        then: Callable[[Response], Any] | None = None,
    ) -> Deferred[Any]:
        """
        Run an already parsed request; see L{dispatch}. C{then} is called in
        the callback that makes the response, not added as one: that saves
        a pass of Deferred._runCallbacks per request where the answer has
        fired already, ~7,500 instructions (bench/inprocess.py send
        --callgrind), and a callback's turn in the loop where it has not.
        """
        result = maybeDeferred(
            self._run, request.method, request.params, context, request.notification
        )

        def answered(value: Any) -> Any:
            response: Response
            if isinstance(value, EventStream):
                if request.notification:
                    value.cancel()
                    response = None
                else:
                    response = StreamAnswer(request.id, value)
            elif request.notification:
                response = None
            else:
                response = success(request.id, value)
            return response if then is None else then(response)

        def refused(reason: Failure) -> Any:
            error = self._error_of(reason, request.method)
            response = None if request.notification else failure(request.id, error)
            return response if then is None else then(response)

        return result.addCallbacks(answered, refused)

    def run(
        self, method: str, params: Any, context: CallContext, *, extension: bool = False
    ) -> Deferred[Any]:
        """
        Run one method by name, for a binding without JSON-RPC envelopes
        (HTTP+JSON): looked up, its version checked and its params parsed
        as L{call} does.

        @param extension: Serve an extension method only (a core method's
            name is then unknown): the binding's route for extension
            methods names them.
        @return: A Deferred that fires with the result (an L{EventStream}
            for a streaming method), or fails with an L{A2AError}, never
            anything else (an unexpected failure is logged as
            C{a2a.internal_error} and becomes L{InternalError}).
        """
        if extension and method in METHODS:
            return fail(MethodNotFoundError())

        def refused(reason: Failure) -> Any:
            raise self._error_of(reason, method)

        return maybeDeferred(self._run, method, params, context, False).addErrback(refused)

    def _error_of(self, reason: Failure, method: str) -> A2AError:
        """
        The A2AError to answer C{reason} with (counted in L{errors} by its
        reason); anything else is logged and answered as L{InternalError}.
        """
        error: A2AError
        if isinstance(reason.value, A2AError):
            error = reason.value
        else:
            self.log.failure("a2a.internal_error: {method} failed", reason, method=method)
            error = InternalError()
        self.errors[error.reason] += 1
        return error

    def _run(self, name: str, params: Any, context: CallContext, notification: bool) -> Any:
        method = METHODS.get(name)
        if method is None:
            extension = self._extension_methods.get(name)
            if extension is None:
                raise method_not_found(name)
            if extension.uri not in context.extensions:
                raise MethodNotFoundError(
                    f"{name} belongs to an extension; activate it "
                    f"with A2A-Extensions: {extension.uri}"
                )
            method = extension.method
        if not version_supported(context.version):
            raise VersionNotSupportedError()
        typed = method.parse(params)
        if method.streaming and notification:
            # A stream nobody will read is not started.
            return None
        return getattr(self._handler, method.handler)(context, typed)


def _fired(value: Any) -> Deferred[Any]:
    d: Deferred[Any] = Deferred()
    d.callback(value)
    return d
