"""
The A2A gRPC binding: L{GRPCCalls} (the reactor side of each call: rate
limit, the dispatcher; credentials and the door's counts), L{GRPCDoor}
(gRPC over HTTP/2 on the reactor: each call's admission, its request
message, its answer) and L{GRPCServer} (the listeners). Importing this
module imports grpcio (for its status codes) and the generated protobuf
modules: import it only where gRPC is configured
(C{pip install 'beacon-a2a[grpc]'}).
"""

from beacon.bindings.grpc._calls import (
    METHODS,
    SERVICE_NAME,
    UNAUTHENTICATED,
    GRPCCalls,
    Refused,
    event_of,
    internal_status,
    message_of,
    params_of,
    refusal_status,
    status_of,
)
from beacon.bindings.grpc._door import (
    CALLS_PER_WORKER,
    EXPIRY_INTERVAL,
    KEEPALIVE_TIMEOUT,
    MAX_PENDING,
    MAX_STREAMS,
    GRPCDoor,
)
from beacon.bindings.grpc._server import GRPCServer, tls_options

__all__ = [
    "CALLS_PER_WORKER",
    "EXPIRY_INTERVAL",
    "GRPCCalls",
    "GRPCDoor",
    "GRPCServer",
    "KEEPALIVE_TIMEOUT",
    "MAX_PENDING",
    "MAX_STREAMS",
    "METHODS",
    "Refused",
    "SERVICE_NAME",
    "UNAUTHENTICATED",
    "event_of",
    "internal_status",
    "message_of",
    "params_of",
    "refusal_status",
    "status_of",
    "tls_options",
]
