"""
The A2A gRPC binding: L{GRPCCalls} (the reactor side of each call: rate
limit, the dispatcher; credentials and the door's counts), and
L{GRPCServer} (grpcio's server over it, which checks a call's credential
and its source's calls in progress before a worker waits for its request
message, and bounds that wait). Importing this module imports grpcio and
the generated protobuf modules: import it only where gRPC is configured
(C{pip install 'beacon-a2a[grpc]'}).
"""

from beacon.bindings.grpc._server import (
    CALLS_PER_WORKER,
    EXPIRY_INTERVAL,
    METHODS,
    SERVICE_NAME,
    UNAUTHENTICATED,
    GRPCCalls,
    GRPCServer,
    Refused,
    connection_options,
    event_of,
    internal_status,
    message_of,
    params_of,
    peer_address,
    refusal_status,
    status_of,
)

__all__ = [
    "CALLS_PER_WORKER",
    "EXPIRY_INTERVAL",
    "GRPCCalls",
    "GRPCServer",
    "METHODS",
    "Refused",
    "SERVICE_NAME",
    "UNAUTHENTICATED",
    "connection_options",
    "event_of",
    "internal_status",
    "message_of",
    "params_of",
    "peer_address",
    "refusal_status",
    "status_of",
]
