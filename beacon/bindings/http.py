"""
The public HTTP binding: agent card and A2A JSON-RPC resources, mountable in
any Twisted L{Site} (see L{PublicResources.mount}).
"""

from beacon.bindings._direct import IDirectRequest, IDirectResource
from beacon.bindings._edge import Container, error_body
from beacon.bindings._http import (
    DEFAULT_MAX_BODY,
    BeaconSite,
    DocumentResource,
    JSONRPCResource,
    LimitedRequest,
    PreparedDocument,
    PublicResources,
    TransportLimits,
    public_resources,
)

__all__ = [
    "DEFAULT_MAX_BODY",
    "BeaconSite",
    "Container",
    "DocumentResource",
    "IDirectRequest",
    "IDirectResource",
    "JSONRPCResource",
    "LimitedRequest",
    "PreparedDocument",
    "PublicResources",
    "TransportLimits",
    "error_body",
    "public_resources",
]
