"""
The operator's doors: the unix socket whose peers the kernel names
(SO_PEERCRED) and the loopback bearer-token door, with their discovery
helpers.
"""

from beacon.bindings.operator._doors import (
    BearerGate,
    OperatorSocket,
    PeerCheckedFactory,
    RootEndpoint,
    new_token,
    operator_of,
    socket_url,
    write_discovery_file,
)
from beacon.protocol import UNIX_BINDING

__all__ = [
    "UNIX_BINDING",
    "BearerGate",
    "OperatorSocket",
    "PeerCheckedFactory",
    "RootEndpoint",
    "new_token",
    "operator_of",
    "socket_url",
    "write_discovery_file",
]
