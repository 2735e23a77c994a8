"""
A2A 1.0 errors: one exception class per error the specification names, each
knowing its JSON-RPC code, its C{google.rpc.ErrorInfo} reason, its HTTP
status and its C{google.rpc.Code} (A2A §5.4), so that policies raise domain
errors and one place per binding turns them into wire objects: the JSON-RPC
error member (L{error_object}) or the HTTP+JSON binding's
C{google.rpc.Status} (L{status_object}).
"""

from __future__ import annotations

from typing import Any, ClassVar

#: The ErrorInfo domain of every error the A2A specification defines.
A2A_DOMAIN = "a2a-protocol.org"

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"


class A2AError(Exception):
    """
    Base of every protocol error a policy or the dispatcher may raise.

    @cvar code: The JSON-RPC error code.
    @cvar reason: The ErrorInfo reason (UPPER_SNAKE_CASE).
    @cvar http_status: The HTTP status the HTTP+JSON binding answers it
        with (A2A §5.4).
    @cvar grpc_status: Its C{google.rpc.Code} name, the C{status} of the
        HTTP+JSON binding's C{google.rpc.Status} (A2A §5.4, §11.6).
    @cvar default_message: The message used when none is given.
    """

    code: ClassVar[int] = -32603
    reason: ClassVar[str] = "INTERNAL_ERROR"
    http_status: ClassVar[int] = 500
    grpc_status: ClassVar[str] = "INTERNAL"
    default_message: ClassVar[str] = "Internal error"

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: dict[str, str] | None = None,
        field_violations: list[tuple[str, str]] | None = None,
    ) -> None:
        """
        @param message: A human-readable message. It must never quote
            submitted content.
        @param metadata: String key/values for the ErrorInfo.
        @param field_violations: C{(field, description)} pairs, sent as a
            C{google.rpc.BadRequest} detail.
        """
        self.message = message or self.default_message
        self.metadata = dict(metadata or {})
        self.field_violations = list(field_violations or [])
        super().__init__(self.message)

    def details(self) -> list[dict[str, Any]]:
        """
        The typed details of this error (ProtoJSON C{Any} objects).
        """
        info: dict[str, Any] = {
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason,
            "domain": A2A_DOMAIN,
        }
        if self.metadata:
            info["metadata"] = self.metadata
        details = [info]
        if self.field_violations:
            details.append(
                {
                    "@type": BAD_REQUEST_TYPE,
                    "fieldViolations": [
                        {"field": field, "description": description}
                        for field, description in self.field_violations
                    ],
                }
            )
        return details


class JSONParseError(A2AError):
    """The request body is not valid JSON."""

    code = -32700
    reason = "PARSE_ERROR"
    http_status = 400
    grpc_status = "INVALID_ARGUMENT"
    default_message = "Invalid JSON payload"


class InvalidRequestError(A2AError):
    """The body is JSON but not a valid JSON-RPC 2.0 request."""

    code = -32600
    reason = "INVALID_REQUEST"
    http_status = 400
    grpc_status = "INVALID_ARGUMENT"
    default_message = "Request payload validation error"


class MethodNotFoundError(A2AError):
    """The method is not one of the A2A 1.0 methods."""

    code = -32601
    reason = "METHOD_NOT_FOUND"
    http_status = 404
    grpc_status = "NOT_FOUND"
    default_message = "Method not found"


class InvalidParamsError(A2AError):
    """The params do not parse into the method's request message."""

    code = -32602
    reason = "INVALID_PARAMS"
    http_status = 400
    grpc_status = "INVALID_ARGUMENT"
    default_message = "Invalid parameters"


class InternalError(A2AError):
    """The server failed; nothing about the failure is disclosed."""


class TaskNotFoundError(A2AError):
    """No task with that id exists (or the caller may not see it)."""

    code = -32001
    reason = "TASK_NOT_FOUND"
    http_status = 404
    grpc_status = "NOT_FOUND"
    default_message = "Task not found"


class TaskNotCancelableError(A2AError):
    """The task cannot be canceled."""

    code = -32002
    reason = "TASK_NOT_CANCELABLE"
    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    default_message = "Task cannot be canceled"


class PushNotificationNotSupportedError(A2AError):
    """The agent does not send push notifications."""

    code = -32003
    reason = "PUSH_NOTIFICATION_NOT_SUPPORTED"
    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    default_message = "Push notifications are not supported"


class UnsupportedOperationError(A2AError):
    """The operation is not supported by this agent."""

    code = -32004
    reason = "UNSUPPORTED_OPERATION"
    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    default_message = "This operation is not supported"


class ContentTypeNotSupportedError(A2AError):
    """A part's content type is not accepted."""

    code = -32005
    reason = "CONTENT_TYPE_NOT_SUPPORTED"
    http_status = 400
    grpc_status = "INVALID_ARGUMENT"
    default_message = "Incompatible content types"


class InvalidAgentResponseError(A2AError):
    """The agent produced a response that does not follow the protocol."""

    code = -32006
    reason = "INVALID_AGENT_RESPONSE"
    http_status = 500
    grpc_status = "INTERNAL"
    default_message = "Invalid agent response"


class ExtendedAgentCardNotConfiguredError(A2AError):
    """No extended agent card is configured."""

    code = -32007
    reason = "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    default_message = "Extended agent card is not configured"


class ExtensionSupportRequiredError(A2AError):
    """A required extension was not activated by the client."""

    code = -32008
    reason = "EXTENSION_SUPPORT_REQUIRED"
    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    default_message = "A required extension was not requested"


class VersionNotSupportedError(A2AError):
    """The requested A2A version is not served by this interface."""

    code = -32009
    reason = "VERSION_NOT_SUPPORTED"
    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    default_message = "This interface speaks A2A 1.0 only; send A2A-Version: 1.0"


#: The JSON-RPC code of every A2A error, by its ErrorInfo reason: how a
#: client reading another binding's error (a google.rpc.Status) names it as
#: JSON-RPC does.
CODE_OF_REASON: dict[str, int] = {
    error.reason: error.code
    for error in (
        JSONParseError,
        InvalidRequestError,
        MethodNotFoundError,
        InvalidParamsError,
        InternalError,
        TaskNotFoundError,
        TaskNotCancelableError,
        PushNotificationNotSupportedError,
        UnsupportedOperationError,
        ContentTypeNotSupportedError,
        InvalidAgentResponseError,
        ExtendedAgentCardNotConfiguredError,
        ExtensionSupportRequiredError,
        VersionNotSupportedError,
    )
}


def error_object(error: A2AError) -> dict[str, Any]:
    """
    The JSON-RPC C{error} member for C{error}: code, message and
    C{data}, the list of typed details.
    """
    return {"code": error.code, "message": error.message, "data": error.details()}


def status_object(error: A2AError) -> dict[str, Any]:
    """
    The HTTP+JSON binding's error body for C{error}: a C{google.rpc.Status}
    as JSON (A2A §11.6, AIP-193), whose C{code} is the HTTP status it is
    answered with, and whose C{details} are the JSON-RPC error's C{data}
    (the ErrorInfo first).
    """
    return {
        "error": {
            "code": error.http_status,
            "status": error.grpc_status,
            "message": error.message,
            "details": error.details(),
        }
    }
