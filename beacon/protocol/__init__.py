"""
The A2A 1.0 protocol core, free of I/O: ProtoJSON request types, errors with
their ErrorInfo, JSON-RPC 2.0 envelopes, service parameters and the method
table. It imports nothing else of Beacon.
"""

from beacon.protocol._dispatch import (
    METHODS,
    PROTOCOL_VERSION,
    CallContext,
    Dispatcher,
    ExtensionMethod,
    StreamAnswer,
    IA2AHandler,
    Method,
    parse_extensions,
    version_supported,
)
from beacon.protocol._errors import (
    A2A_DOMAIN,
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
    error_object,
)
from beacon.protocol._native import INativeHandler
from beacon.protocol._stream import CollectingSink, EventStream, IStreamSink
from beacon.protocol._jsonrpc import RPCRequest, dumps, loads, parse_request
from beacon.protocol._types import (
    Message,
    Part,
    TASK_STATES,
    SendMessageRequest,
    format_timestamp,
    parse_timestamp,
)

__all__ = [
    "A2A_DOMAIN",
    "A2AError",
    "CallContext",
    "CollectingSink",
    "EventStream",
    "ExtensionMethod",
    "IStreamSink",
    "StreamAnswer",
    "ContentTypeNotSupportedError",
    "Dispatcher",
    "ExtendedAgentCardNotConfiguredError",
    "ExtensionSupportRequiredError",
    "IA2AHandler",
    "INativeHandler",
    "InternalError",
    "InvalidAgentResponseError",
    "InvalidParamsError",
    "InvalidRequestError",
    "JSONParseError",
    "METHODS",
    "Message",
    "Method",
    "MethodNotFoundError",
    "PROTOCOL_VERSION",
    "Part",
    "PushNotificationNotSupportedError",
    "RPCRequest",
    "SendMessageRequest",
    "TASK_STATES",
    "TaskNotCancelableError",
    "TaskNotFoundError",
    "UnsupportedOperationError",
    "VersionNotSupportedError",
    "dumps",
    "error_object",
    "format_timestamp",
    "loads",
    "parse_extensions",
    "parse_request",
    "parse_timestamp",
    "version_supported",
]
