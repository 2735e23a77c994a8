"""
Beacon's public agent card (A2A 1.0 AgentCard, ProtoJSON).

Every URL on the card comes from configuration (the public URL), never from a
request's Host header.
"""

from __future__ import annotations

from typing import Any

from beacon import __version__
from beacon.config import CardText, ConfigError
from beacon.signing import KeyFileError, SigningKey, load_signing_key, sign_card
from beacon.protocol import (
    API_KEY_HEADER,
    GRPC_BINDING,
    HTTP_JSON_BINDING,
    JSONRPC_BINDING,
    PROTOCOL_VERSION,
    WEBSOCKET_BINDING,
    websocket_url,
)

#: The card states this literally (Beacon's public policy).
IDENTITY_STATEMENT = (
    "Cryptographic identity does not establish autonomy, consciousness or personhood."
)

#: Where the A2A JSON-RPC endpoint lives, relative to the public URL.
JSONRPC_PATH = "/a2a/v1"
#: Where the A2A HTTP+JSON interface lives (its routes are relative to
#: it), on the public listeners and on the operator's doors alike.
REST_PATH = "/a2a/rest"
#: Where the A2A WebSocket binding lives on the public listeners.
WEBSOCKET_PATH = "/a2a/ws"
#: Beacon's own discovery document (Beacon's public policy), linked from the card.
AUTONOMOUS_AGENT_PATH = "/.well-known/autonomous-agent"
#: Where the card itself lives.
AGENT_CARD_PATH = "/.well-known/agent-card.json"


def public_card(
    text: CardText,
    public_url: str,
    *,
    websocket: bool = False,
    api_keys: bool = False,
    bearer: bool = False,
    grpc: tuple[str, ...] | list[str] = (),
) -> dict[str, Any]:
    """
    Build the public AgentCard.

    @param text: The operator's card text.
    @param public_url: The base URL the card advertises (no trailing slash).
    @param websocket: Whether the WebSocket binding is served (at
        L{WEBSOCKET_PATH}, listed after the JSON-RPC and HTTP+JSON
        interfaces, which are always served).
    @param api_keys: Whether submitter API keys are required (declared as an
        C{apiKeySecurityScheme} in the L{API_KEY_HEADER} header).
    @param bearer: Whether bearer tokens are accepted (declared as an
        C{httpAuthSecurityScheme}). With either, the card carries
        C{securityRequirements}: any one declared scheme suffices.
    @param grpc: The gRPC binding's bound listeners, C{host:port} each (the
        proto's form of its URL), listed after HTTP+JSON and before the
        WebSocket binding; none when it is off.
    """
    description = text.description.strip()
    if IDENTITY_STATEMENT not in description:
        description = f"{description} {IDENTITY_STATEMENT}".strip()
    discovery = public_url + AUTONOMOUS_AGENT_PATH
    card: dict[str, Any] = {
        "name": text.name,
        "description": description,
        "supportedInterfaces": [
            {
                "url": public_url + JSONRPC_PATH,
                "protocolBinding": JSONRPC_BINDING,
                "protocolVersion": PROTOCOL_VERSION,
            },
            {
                "url": public_url + REST_PATH,
                "protocolBinding": HTTP_JSON_BINDING,
                "protocolVersion": PROTOCOL_VERSION,
            },
        ],
        "version": __version__,
        "capabilities": {
            "streaming": False,
            "pushNotifications": False,
            "extendedAgentCard": False,
            "extensions": [
                {
                    "uri": discovery,
                    "description": (
                        "Beacon's own discovery document: its policy in "
                        "machine-readable form and the native beacon/0.1 "
                        "protocol. Linked, not required."
                    ),
                    "required": False,
                    "params": {"href": discovery, "protocol": "beacon/0.1"},
                }
            ],
        },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": [
            {
                "id": "submit",
                "name": "Submit a message for human review",
                "description": (
                    "Send a message (text, or one data part valid against "
                    "Beacon's message schema). It is stored append-only and "
                    "answered with a receipt: a Task in TASK_STATE_SUBMITTED "
                    "whose id is the receipt id. GetTask on that id shows its "
                    "state once a person has decided. No reply is promised, "
                    "no action is automatic, and file parts are refused."
                ),
                "tags": ["inbox", "submission", "human-review"],
                "examples": [
                    "Hello, I maintain a crawler and would like to ask about your robots policy.",
                ],
                "inputModes": ["text/plain", "application/json"],
                "outputModes": ["application/json"],
            }
        ],
    }
    for address in grpc:
        card["supportedInterfaces"].append(
            {"url": address, "protocolBinding": GRPC_BINDING, "protocolVersion": PROTOCOL_VERSION}
        )
    if websocket:
        card["supportedInterfaces"].append(
            {
                "url": websocket_url(public_url) + WEBSOCKET_PATH,
                "protocolBinding": WEBSOCKET_BINDING,
                "protocolVersion": PROTOCOL_VERSION,
            }
        )
    if text.provider_organization:
        card["provider"] = {
            "organization": text.provider_organization,
            "url": text.provider_url,
        }
    if text.documentation_url:
        card["documentationUrl"] = text.documentation_url
    schemes: dict[str, Any] = {}
    if api_keys:
        schemes["apiKey"] = {
            "apiKeySecurityScheme": {
                "description": "A submitter API key issued by this Beacon's operator.",
                "location": "header",
                "name": API_KEY_HEADER,
            }
        }
    if bearer:
        schemes["bearer"] = {
            "httpAuthSecurityScheme": {
                "description": "A submitter token issued by this Beacon's operator.",
                "scheme": "Bearer",
            }
        }
    if schemes:
        card["securitySchemes"] = schemes
        # Several requirements are alternatives: any one scheme suffices.
        card["securityRequirements"] = [
            {"schemes": {name: {"list": []}}} for name in schemes
        ]
    return card


def card_signing_keys(text: CardText) -> tuple[SigningKey, ...]:
    """
    Read the keys that sign the public card (C{[card] signing_key}, or
    C{[[card.signing]]}): at start-up, once, before anything listens.

    @raise ConfigError: A key file cannot be read, is not a PEM private
        key, or is of a kind Beacon does not sign with; two keys share a kid.
    """
    keys: list[SigningKey] = []
    for options in text.signing_keys:
        where = "[card] signing_key" if options.key in text.signing_key else "[[card.signing]] key"
        try:
            key = load_signing_key(options.key, options.kid or None, options.jku or None)
        except KeyFileError as e:
            raise ConfigError(f"{where}: {e}") from None
        if any(other.kid == key.kid for other in keys):
            raise ConfigError(f"{where}: {options.key}: kid {key.kid!r} names another key too")
        keys.append(key)
    return tuple(keys)


def signed_card(card: dict[str, Any], keys: tuple[SigningKey, ...]) -> dict[str, Any]:
    """C{card} with its C{signatures} (one per key), computed now; C{card} as is without keys."""
    if not keys:
        return card
    return {**card, "signatures": sign_card(card, keys)}


#: Where the native protocol lives, relative to the public URL.
NATIVE_PATH = "/beacon/0.1"
#: The native submission endpoint, under L{NATIVE_PATH}.
SUBMISSIONS_PATH = NATIVE_PATH + "/submissions"
#: Where the structured-message schema is served.
SCHEMA_PATH = NATIVE_PATH + "/message.schema.json"


def discovery_document(
    text: CardText, public_url: str, limits: dict[str, Any]
) -> dict[str, Any]:
    """
    Beacon's own discovery document, served at
    C{/.well-known/autonomous-agent} (see C{docs/explanation/protocol-0.1.rst}).

    @param text: The operator's card text (name and description).
    @param public_url: The base URL (no trailing slash).
    @param limits: The limits in force: C{maxBodyBytes}, C{ratePerSecond},
        C{burst}.
    """
    return {
        "protocol": "beacon/0.1",
        "name": text.name,
        "description": text.description.strip(),
        "statement": IDENTITY_STATEMENT,
        "policy": {
            "storesForHumanReview": True,
            "initiatesContact": False,
            "resolvesSubmittedUrls": False,
            "echoesContent": False,
            "promisesReply": False,
            "limits": limits,
        },
        "endpoints": {
            "submit": public_url + SUBMISSIONS_PATH,
            "status": public_url + SUBMISSIONS_PATH + "/{id}",
            "schema": public_url + SCHEMA_PATH,
            "a2aAgentCard": public_url + AGENT_CARD_PATH,
        },
    }


def operator_card(
    text: CardText,
    interfaces: list[dict[str, str]],
    extensions: list[dict[str, Any]],
    *,
    bearer: bool = False,
) -> dict[str, Any]:
    """
    The operator's card: the same Beacon, seen through the operator's door.

    @param interfaces: The door's AgentInterfaces (the unix socket binding
        with its C{unix:///} URL; or JSONRPC at the bearer door's URL, then
        HTTP+JSON at L{REST_PATH} under it).
    @param extensions: The AgentExtension entries of the operator policy.
    @param bearer: Whether the door needs a bearer token (it is then
        declared as the card's security scheme; the socket declares none).
    """
    card: dict[str, Any] = {
        "name": f"{text.name} (operator)",
        "description": (
            "The operator's door to this Beacon's inbox: list and read every "
            "submission, decide on them, and follow the inbox live. "
            + IDENTITY_STATEMENT
        ),
        "supportedInterfaces": interfaces,
        "version": __version__,
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "extendedAgentCard": False,
            "extensions": extensions,
        },
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json", "text/plain"],
        "skills": [
            {
                "id": "review",
                "name": "Review submissions",
                "description": (
                    "ListTasks and GetTask show every submission in full; "
                    "beacon.review.Decide accepts or rejects one; "
                    "beacon.inbox.Follow and SubscribeToTask stream changes."
                ),
                "tags": ["inbox", "review", "operator"],
            }
        ],
    }
    if bearer:
        card["securitySchemes"] = {
            "operatorToken": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "The per-boot token in the operator discovery file.",
                }
            }
        }
        card["securityRequirements"] = [{"schemes": {"operatorToken": {"list": []}}}]
    return card
