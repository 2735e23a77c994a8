"""
Beacon's outbound client. For now: the operator client, which reads and
decides on submissions through the operator's unix socket (or its loopback
bearer door), as the C{beacon review} commands do.

Every call is bounded by a timeout on the injected clock and fails with one
of the L{ClientError} family.
"""

from beacon.client._errors import (
    ClientError,
    HTTPStatusError,
    InvalidResponse,
    RPCError,
    Timeout,
    TransportError,
)
from beacon.client._operator import (
    A2A_VERSION,
    DEFAULT_MAX_RESPONSE,
    DEFAULT_TIMEOUT,
    INBOX_EVENTS_EXTENSION,
    REVIEW_EXTENSION,
    Discovery,
    Feed,
    OperatorClient,
    read_discovery_file,
)
from beacon.client._sse import DEFAULT_MAX_EVENT, EventTooLarge, SSEReader

__all__ = [
    "A2A_VERSION",
    "ClientError",
    "DEFAULT_MAX_EVENT",
    "DEFAULT_MAX_RESPONSE",
    "DEFAULT_TIMEOUT",
    "Discovery",
    "EventTooLarge",
    "Feed",
    "HTTPStatusError",
    "INBOX_EVENTS_EXTENSION",
    "InvalidResponse",
    "OperatorClient",
    "REVIEW_EXTENSION",
    "RPCError",
    "SSEReader",
    "Timeout",
    "TransportError",
    "read_discovery_file",
]
