"""
The admission every binding shares, on the floor below the wings: what
is checked before a request is parsed and how it is refused.

  - the transport limits (L{TransportLimits}: the body cap, the
    per-source rate, the source's name, the submitter's credentials,
    the web origins allowed), over L{RateLimiter} and L{SourceResolver};
  - the submitters' credentials (L{SubmitterAuth});
  - each connection's fair share of the reactor's turns (L{Ledger},
    L{Turns});
  - the refusals, counted by reason (L{Refusals}), and the transport
    edge every door refuses with: head limits and the RFCs' readings,
    reason phrases, the JSON refusal body and a door's own refusal
    shape, the 404 and 405 resources.

The wings above (C{http}, C{websocket}, C{grpc}, C{operator}) import this
face, never each other's private modules.
"""

from beacon.bindings.admission._auth import (
    API_KEY_HEADER,
    SubmitterAuth,
    credential_digest,
)
from beacon.bindings.admission._edge import (
    BEACON_DOMAIN,
    CORS_EXPOSED_HEADERS,
    CORS_MAX_AGE,
    CORS_REQUEST_HEADERS,
    ConnectionRefusal,
    Container,
    HeadAnswer,
    IPreflight,
    JSON_TYPE,
    MAX_HEAD,
    MAX_HEADERS,
    NotFound,
    RefusalShape,
    connection_tokens,
    container,
    error_body,
    field_lines,
    framing_problem,
    is_json_media_type,
    log_slow,
    native_refusal,
    reason_phrase,
    refusal_body,
    refusal_shape,
    refuse,
    refuse_connection,
    refuse_slow,
)
from beacon.bindings.admission._limits import (
    Admission,
    RateLimiter,
    SourceResolver,
)
from beacon.bindings.admission._refusals import (
    REASONS,
    Refusals,
)
from beacon.bindings.admission._transport import (
    TransportLimits,
    header_value,
)
from beacon.bindings.admission._turns import (
    Ledger,
    MAX_GROWTH,
    QUIET_SECONDS,
    TURN_BYTES,
    TURN_MESSAGES,
    TURN_REQUESTS,
    Turns,
)

__all__ = [
    "API_KEY_HEADER",
    "BEACON_DOMAIN",
    "CORS_EXPOSED_HEADERS",
    "CORS_MAX_AGE",
    "CORS_REQUEST_HEADERS",
    "JSON_TYPE",
    "MAX_GROWTH",
    "MAX_HEAD",
    "MAX_HEADERS",
    "QUIET_SECONDS",
    "REASONS",
    "TURN_BYTES",
    "TURN_MESSAGES",
    "TURN_REQUESTS",
    "Admission",
    "ConnectionRefusal",
    "Container",
    "HeadAnswer",
    "IPreflight",
    "Ledger",
    "NotFound",
    "RateLimiter",
    "RefusalShape",
    "Refusals",
    "SourceResolver",
    "SubmitterAuth",
    "TransportLimits",
    "Turns",
    "connection_tokens",
    "container",
    "credential_digest",
    "error_body",
    "field_lines",
    "framing_problem",
    "header_value",
    "is_json_media_type",
    "log_slow",
    "native_refusal",
    "reason_phrase",
    "refusal_body",
    "refusal_shape",
    "refuse",
    "refuse_connection",
    "refuse_slow",
]
