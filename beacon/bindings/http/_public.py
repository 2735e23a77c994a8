"""
The public A2A surface as resources, ready to mount into any root: the agent
card, the JSON-RPC endpoint and the HTTP+JSON interface, over one
dispatcher and one set of transport limits; and the landing page made from
the card, for a root of Beacon's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from twisted.web.resource import Resource

from beacon.bindings.admission import TransportLimits, container
from beacon.bindings.http._jsonrpc import (
    DocumentResource,
    JSONRPCResource,
    PreparedDocument,
)
from beacon.bindings.http._landing import LandingResource
from beacon.bindings.http._rest import RESTResource
from beacon.protocol import Dispatcher


@dataclass
class PublicResources:
    """
    The public surface as resources: the agent card, the JSON-RPC endpoint
    and the HTTP+JSON interface; and the landing page, which L{mount} leaves
    out (it would take C{/} from the root it is given: Beacon's own site
    mounts it, C{root.putChild(b"", resources.landing)}).
    """

    card: PreparedDocument
    card_resource: DocumentResource
    jsonrpc: JSONRPCResource
    rest: RESTResource
    landing: LandingResource

    def mount(self, root: Resource) -> Resource:
        """
        Put Beacon's resources into C{root}, beside whatever it already
        holds: C{/.well-known/agent-card.json}, C{/a2a/v1} and
        C{/a2a/rest}.

        @return: C{root}.
        """
        container(root, b".well-known").putChild(b"agent-card.json", self.card_resource)
        a2a = container(root, b"a2a")
        a2a.putChild(b"v1", self.jsonrpc)
        a2a.putChild(b"rest", self.rest)
        return root


def public_resources(
    dispatcher: Dispatcher,
    limits: TransportLimits,
    *,
    extensions: frozenset[str] = frozenset(),
    card_max_age: int = 300,
) -> PublicResources:
    """
    Build the public resources. The card is published separately, with
    C{resources.card.publish(...)}, once the public URL is known.
    """
    card = PreparedDocument()
    return PublicResources(
        card=card,
        card_resource=DocumentResource(card, max_age=card_max_age),
        jsonrpc=JSONRPCResource(dispatcher, limits, extensions=extensions),
        rest=RESTResource(dispatcher, limits, extensions=extensions),
        landing=LandingResource(card, max_age=card_max_age),
    )


__all__ = ["PublicResources", "public_resources"]
