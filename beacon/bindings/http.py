"""
The public HTTP bindings: the agent card, the A2A JSON-RPC and HTTP+JSON
resources, mountable in any Twisted L{Site} (see L{PublicResources.mount}).
"""

from beacon.bindings._auth import API_KEY_HEADER, SubmitterAuth, credential_digest
from beacon.bindings._direct_request import IDirectRequest, IDirectResource
from beacon.bindings._edge import Container, error_body
from beacon.config import DEFAULT_MAX_BODY
from beacon.bindings._http import (
    DocumentResource,
    JSONRPCResource,
    PreparedDocument,
    TransportLimits,
)
from beacon.bindings._site import BeaconSite, LimitedRequest
from beacon.bindings._public import PublicResources, public_resources
from beacon.bindings._rest import A2A_JSON_TYPE, RESTResource

__all__ = [
    "A2A_JSON_TYPE",
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
    "RESTResource",
    "SubmitterAuth",
    "TransportLimits",
    "credential_digest",
    "error_body",
    "public_resources",
]
