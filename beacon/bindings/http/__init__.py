"""
The HTTP wing: the public HTTP bindings (the agent card, the A2A JSON-RPC
and HTTP+JSON resources, the native beacon/0.1 door), mountable in any
Twisted L{Site} (see L{PublicResources.mount}), and Beacon's own site
(L{BeaconSite}: twisted.web's channel and request, and the direct channel
that answers Beacon's own resources without twisted.web's per-request
machinery).

Its modules: C{_site} (the site, its channel and request), C{_direct}
(the direct channel) and C{_direct_request} (its request, and what it asks
of a resource), C{_jsonrpc} (the card's document resource and the JSON-RPC
resource), C{_landing} (the landing page at C{/}), C{_rest} (the HTTP+JSON binding's routes), C{_native} (the
native door), C{_public} (the public surface assembled).
"""

from beacon.bindings.admission import (
    API_KEY_HEADER,
    Container,
    SubmitterAuth,
    TransportLimits,
    credential_digest,
    error_body,
)
from beacon.bindings.http._direct_request import IDirectRequest, IDirectResource
from beacon.bindings.http._jsonrpc import DocumentResource, JSONRPCResource, PreparedDocument
from beacon.bindings.http._landing import LandingResource
from beacon.bindings.http._native import NativeResources, StatusResource, SubmissionsResource
from beacon.bindings.http._public import PublicResources, public_resources
from beacon.bindings.http._rest import A2A_JSON_TYPE, RESTResource
from beacon.bindings.http._site import BeaconSite, LimitedRequest
from beacon.config import DEFAULT_MAX_BODY

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
    "LandingResource",
    "LimitedRequest",
    "NativeResources",
    "PreparedDocument",
    "PublicResources",
    "RESTResource",
    "StatusResource",
    "SubmissionsResource",
    "SubmitterAuth",
    "TransportLimits",
    "credential_digest",
    "error_body",
    "public_resources",
]
