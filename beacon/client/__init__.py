"""
Beacon's outbound clients.

  - L{A2AClient} talks to any A2A 1.0 agent: L{fetch_card} reads its card
    (typed: L{AgentCard}), L{select_interface} chooses an interface it
    implements (JSON-RPC over HTTP(S), HTTP+JSON over HTTP(S), the
    WebSocket binding, JSON-RPC on a unix socket the caller configured,
    gRPC with grpcio installed; by default the card's first of them, in
    the card's order, or the first the caller's own order names), and
    the client calls the eleven methods (with C{verify=} keys read by
    L{load_verification_keys}, only once the card's signature is checked:
    L{check_card_signature}); L{A2AClient.send_text} resolves to an L{Outcome} and never
    fails.
  - L{OperatorClient} reads and decides on submissions through Beacon's
    own operator socket (or its loopback bearer door), as the
    C{beacon review} commands and the web console do; L{resolve},
    L{every_task} (for a L{TaskQuery <beacon.protocol.query.TaskQuery>}) are
    what both share.

Every call is bounded by timeouts on the injected clock and fails with one
of the L{ClientError} family. A URL given to the client is checked before
anything is dialled (L{check_url}): only C{http}, C{https}, C{ws}, C{wss}
and C{unix:///path}, else L{InvalidURL}, which names the URL it most
likely meant.
"""

from beacon.client._a2a import (
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CARD,
    IDEMPOTENT,
    A2AClient,
    Limits,
    Outcome,
    Timeouts,
    fetch_card,
    outcome_of,
    text_message,
)
from beacon.client._card import (
    WELL_KNOWN_CARD,
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    SecurityScheme,
    card_url,
    check_card_signature,
    parse_card,
)
from beacon.client._errors import (
    ClientError,
    GRPCStatusError,
    HTTPStatusError,
    InvalidCard,
    InvalidResponse,
    InvalidURL,
    NoCompatibleInterface,
    RequestTooLarge,
    RPCError,
    Timeout,
    TransportError,
    UnverifiedCard,
)
from beacon.client._grpc import GRPC_EXTRA, GRPCMissing
from beacon.client._jsonrpc import A2A_VERSION
from beacon.client._operator import (
    DEFAULT_MAX_RESPONSE,
    DEFAULT_TIMEOUT,
    INBOX_EVENTS_EXTENSION,
    REVIEW_EXTENSION,
    Discovery,
    Feed,
    OperatorClient,
    read_discovery_file,
)
from beacon.client._review import (
    MAX_PAGE,
    MIN_PREFIX,
    LookupFailed,
    every_task,
    is_short,
    parse_before,
    resolve,
    rfc3339,
)
from beacon.protocol import UNIX_BINDING, WEBSOCKET_BINDING
from beacon.signing import KeyFileError, VerificationKey, load_verification_keys
from beacon.protocol.query import FilterError
from beacon.client._select import (
    BINDINGS,
    DEFAULT_PREFERENCE,
    GRPC,
    HTTP_JSON,
    JSONRPC,
    LEGACY_WEBSOCKET,
    Selected,
    grpc_installed,
    select_interface,
)
from beacon.client._sse import DEFAULT_MAX_EVENT, EventTooLarge, SSEReader
from beacon.client._stream import ResponseStream
from beacon.client._transport import Deadline
from beacon.client._url import check_url
from beacon.client._websocket import DEFAULT_MAX_MESSAGE

__all__ = [
    "A2A_VERSION",
    "BINDINGS",
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_CARD",
    "DEFAULT_MAX_EVENT",
    "DEFAULT_MAX_MESSAGE",
    "DEFAULT_MAX_RESPONSE",
    "DEFAULT_PREFERENCE",
    "DEFAULT_TIMEOUT",
    "GRPC",
    "GRPC_EXTRA",
    "HTTP_JSON",
    "IDEMPOTENT",
    "INBOX_EVENTS_EXTENSION",
    "JSONRPC",
    "LEGACY_WEBSOCKET",
    "MAX_PAGE",
    "MIN_PREFIX",
    "REVIEW_EXTENSION",
    "UNIX_BINDING",
    "WEBSOCKET_BINDING",
    "WELL_KNOWN_CARD",
    "A2AClient",
    "AgentCapabilities",
    "AgentCard",
    "AgentExtension",
    "AgentInterface",
    "AgentProvider",
    "AgentSkill",
    "ClientError",
    "Deadline",
    "Discovery",
    "EventTooLarge",
    "Feed",
    "FilterError",
    "GRPCMissing",
    "GRPCStatusError",
    "HTTPStatusError",
    "InvalidCard",
    "InvalidResponse",
    "InvalidURL",
    "Limits",
    "LookupFailed",
    "NoCompatibleInterface",
    "OperatorClient",
    "Outcome",
    "RPCError",
    "RequestTooLarge",
    "ResponseStream",
    "SSEReader",
    "SecurityScheme",
    "Selected",
    "Timeout",
    "Timeouts",
    "TransportError",
    "UnverifiedCard",
    "VerificationKey",
    "KeyFileError",
    "load_verification_keys",
    "check_card_signature",
    "check_url",
    "card_url",
    "every_task",
    "fetch_card",
    "grpc_installed",
    "is_short",
    "outcome_of",
    "parse_before",
    "parse_card",
    "read_discovery_file",
    "resolve",
    "rfc3339",
    "select_interface",
    "text_message",
]
