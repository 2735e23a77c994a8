"""
The names an agent card gives Beacon's doors, shared by the card (intake),
the doors themselves (bindings) and the client that reads cards: the
protocol bindings, and the header that carries a submitter's API key.
"""

from __future__ import annotations

#: The A2A JSON-RPC binding's C{protocolBinding}.
JSONRPC_BINDING = "JSONRPC"
#: The A2A HTTP+JSON (REST) binding's C{protocolBinding}.
HTTP_JSON_BINDING = "HTTP+JSON"
#: The A2A gRPC binding's C{protocolBinding}.
GRPC_BINDING = "GRPC"
#: The WebSocket binding's C{protocolBinding}: a2a-rust's extension binding.
WEBSOCKET_BINDING = "https://a2a-rust.com/bindings/websocket/v1"
#: The JSON-RPC over unix socket binding's C{protocolBinding} (agentd's).
UNIX_BINDING = "https://agentd.dev/a2a/binding/jsonrpc-unix"
#: The header that carries a submitter's API key (its C{apiKeySecurityScheme}).
API_KEY_HEADER = "X-API-Key"
#: The doors a submission can come through, as a stored submission names
#: them (C{CallContext.binding}): the filter C{--door} takes and the label
#: the metrics give.
DOORS = ("jsonrpc", "http+json", "grpc", "websocket", "native")


def websocket_url(http_url: str) -> str:
    """The C{ws://} or C{wss://} form of an C{http://} or C{https://} URL."""
    if http_url.startswith("https://"):
        return "wss://" + http_url[len("https://") :]
    if http_url.startswith("http://"):
        return "ws://" + http_url[len("http://") :]
    raise ValueError(f"not an http(s) URL: {http_url!r}")


__all__ = [
    "DOORS",
    "API_KEY_HEADER",
    "GRPC_BINDING",
    "HTTP_JSON_BINDING",
    "JSONRPC_BINDING",
    "UNIX_BINDING",
    "WEBSOCKET_BINDING",
    "websocket_url",
]
