"""
The A2A WebSocket binding (seed 001) on autobahn: a resource to mount in a
L{Site} beside the HTTP binding, a factory for listeners of its own, and the
service that starts and stops that factory.
"""

from beacon.bindings._websocket import (
    BEACON_DOMAIN,
    BINDING_DOMAIN,
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_MESSAGE,
    DEFAULT_STREAM_QUEUE,
    RATE_LIMITED_CODE,
    STREAM_COMPLETE,
    TOO_LARGE_CODE,
    WEBSOCKET_BINDING,
    WebSocketA2AProtocol,
    WebSocketFactory,
    WebSocketOptions,
    WebSocketResource,
    WebSocketService,
    service_parameters,
    websocket_url,
)

__all__ = [
    "BEACON_DOMAIN",
    "BINDING_DOMAIN",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_MESSAGE",
    "DEFAULT_STREAM_QUEUE",
    "RATE_LIMITED_CODE",
    "STREAM_COMPLETE",
    "TOO_LARGE_CODE",
    "WEBSOCKET_BINDING",
    "WebSocketA2AProtocol",
    "WebSocketFactory",
    "WebSocketOptions",
    "WebSocketResource",
    "WebSocketService",
    "service_parameters",
    "websocket_url",
]
