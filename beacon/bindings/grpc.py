"""
The A2A gRPC binding: L{GRPCCalls} (the reactor side of each call: rate
limit, credentials, the dispatcher) and L{GRPCServer} (grpcio's server over
it). Importing this module imports grpcio and the generated protobuf
modules: import it only where gRPC is configured (C{pip install
'beacon[grpc]'}).
"""

from beacon.bindings._grpc import (
    CALLS_PER_WORKER,
    METHODS,
    SERVICE_NAME,
    GRPCCalls,
    GRPCServer,
    Refused,
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
    "GRPCCalls",
    "GRPCServer",
    "METHODS",
    "Refused",
    "SERVICE_NAME",
    "event_of",
    "internal_status",
    "message_of",
    "params_of",
    "peer_address",
    "refusal_status",
    "status_of",
]
