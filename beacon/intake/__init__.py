"""
The Beacon itself: the public policy, the mapping of messages onto stored
submissions, receipts, the structured-message schema and the agent card. It
knows the protocol core and the store, and no binding.
"""

from beacon.config import CardText
from beacon.intake._card import (
    AGENT_CARD_PATH,
    AUTONOMOUS_AGENT_PATH,
    IDENTITY_STATEMENT,
    JSONRPC_PATH,
    NATIVE_PATH,
    REST_PATH,
    SCHEMA_PATH,
    SUBMISSIONS_PATH,
    WEBSOCKET_PATH,
    discovery_document,
    card_signing_keys,
    operator_card,
    public_card,
    signed_card,
)
from beacon.intake._operator import (
    EXTENSION_DECLARATIONS,
    EXTENSION_METHODS,
    INBOX_EVENTS_EXTENSION,
    REVIEW_EXTENSION,
    OperatorPolicy,
)
from beacon.intake._public import PublicPolicy, receipt_of, status_task
from beacon.intake._submission import (
    KIND_STRUCTURED,
    KIND_TEXT,
    Content,
    canonical_content,
    content_of,
    load_schema,
    map_message,
    new_id,
    parse_native,
    schema_validator,
    schema_violations,
)

__all__ = [
    "AGENT_CARD_PATH",
    "AUTONOMOUS_AGENT_PATH",
    "CardText",
    "Content",
    "IDENTITY_STATEMENT",
    "JSONRPC_PATH",
    "NATIVE_PATH",
    "REST_PATH",
    "SCHEMA_PATH",
    "SUBMISSIONS_PATH",
    "WEBSOCKET_PATH",
    "KIND_STRUCTURED",
    "KIND_TEXT",
    "PublicPolicy",
    "canonical_content",
    "content_of",
    "discovery_document",
    "card_signing_keys",
    "operator_card",
    "EXTENSION_DECLARATIONS",
    "EXTENSION_METHODS",
    "INBOX_EVENTS_EXTENSION",
    "REVIEW_EXTENSION",
    "OperatorPolicy",
    "load_schema",
    "map_message",
    "new_id",
    "parse_native",
    "public_card",
    "signed_card",
    "receipt_of",
    "schema_validator",
    "schema_violations",
    "status_task",
]
