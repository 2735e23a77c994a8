"""
The public HTTP binding: agent card and A2A JSON-RPC resources, mountable in
any Twisted L{Site} (see L{PublicResources.mount}).
"""

from beacon.bindings._auth import API_KEY_HEADER, SubmitterAuth, credential_digest
from beacon.bindings._direct import IDirectRequest, IDirectResource
from beacon.bindings._edge import Container, error_body
from beacon.config import DEFAULT_MAX_BODY
from beacon.bindings._http import (
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
    "API_KEY_HEADER",
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
    "SubmitterAuth",
    "TransportLimits",
    "credential_digest",
    "error_body",
    "public_resources",
]
