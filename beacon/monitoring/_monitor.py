"""
Health and metrics wired into one service tree: L{Monitoring} is made over
the store, handed each door as the tree is built, and attached last (after
every listener, so that being ready includes being bound).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from twisted.application.service import IServiceCollection
from twisted.web.resource import Resource

from beacon.bindings.http import BeaconSite, Container
from beacon.config import Config
from beacon.interfaces import IBeaconReactor
from beacon.listeners import Listeners
from beacon.monitoring._metrics import BeaconMetrics, PendingCount
from beacon.monitoring._readiness import Readiness
from beacon.monitoring._resources import HealthResource, MetricsResource, alive
from beacon.store import IMeasuredStore, ISubmissionStore

#: Where the health checks and the metrics are served.
HEALTHZ = b"healthz"
READYZ = b"readyz"
METRICS = b"metrics"


class Monitoring:
    """
    One service tree's health checks and Prometheus metrics:

        - C{/healthz} and C{/readyz} on every public listener
          (L{public}) and on the C{[metrics]} listener;
        - C{/metrics} on the operator doors (L{operator}: the bearer door
          asks for its token, as for every request) and on the optional
          C{[metrics] listen} endpoint, a site of its own;
        - the metrics in a registry of this tree's own (L{registry}).

    @ivar registry: The tree's Prometheus registry: Beacon's metrics and
        the process's (C{beacon_process_*}).
    @ivar readiness: The store check behind C{/readyz}.
    @ivar metrics: The collector, to which each door is handed.
    """

    def __init__(self, config: Config, store: ISubmissionStore, reactor: IBeaconReactor) -> None:
        self._config = config
        self._reactor = reactor
        self.readiness = Readiness(store, reactor)
        self.pending = PendingCount(store, reactor)
        self.metrics = BeaconMetrics(self.pending, self.readiness)
        if IMeasuredStore.providedBy(store):
            store.observe_batches(self.metrics.batch)
            self.metrics.measured = True
        self.registry = CollectorRegistry()
        self.registry.register(self.metrics)
        ProcessCollector(namespace="beacon", registry=self.registry)

    def health_resources(self, root: Resource) -> Resource:
        """Put C{/healthz} and C{/readyz} into C{root}."""
        root.putChild(HEALTHZ, HealthResource(alive))
        root.putChild(READYZ, HealthResource(self.readiness.state))
        return root

    def public(self, site: BeaconSite, websocket: Any) -> None:
        """
        The public listeners' C{site} (whose root is a L{Container}) and
        the WebSocket binding's factory: health resources mounted, their
        refusals (the site's and the shared limits', one count), open
        connections and requests in flight counted.
        """
        limits = websocket.limits
        site.refusals = limits.refusals
        self.health_resources(site.resource)
        self.metrics.doors["public"] = site
        self.metrics.websocket = websocket
        self.metrics.dispatcher = websocket.dispatcher

    def grpc(self, calls: Any) -> None:
        """
        The gRPC binding's calls (L{beacon.bindings.grpc.GRPCCalls}): its
        refusals counted under the door C{grpc}, its calls in progress as
        its open connections (grpcio does not show its connections).
        """
        self.metrics.doors["grpc"] = calls

    def operator(self, door: str, site: BeaconSite, root: Resource) -> None:
        """
        An operator door (C{"operator_socket"}, C{"operator_http"}):
        C{/metrics} mounted in its C{root}, its refusals and connections
        counted.
        """
        root.putChild(METRICS, MetricsResource(self.registry))
        self.metrics.doors[door] = site

    def notifier(self, notifier: Any) -> None:
        """A notifier whose failures are counted."""
        self.metrics.notifiers.append(notifier)

    def attach(self, parent: IServiceCollection) -> None:
        """
        Add the readiness check, the pending count and the C{[metrics]}
        listener (if configured) to C{parent}, after every other listener.
        """
        self.readiness.setServiceParent(parent)
        self.pending.setServiceParent(parent)
        listen = self._config.metrics_listen
        if listen:
            root = self.health_resources(Container())
            root.putChild(METRICS, MetricsResource(self.registry))
            site = BeaconSite(root, clock=self._reactor, **self._config.limits.site_options())
            site.noisy = False
            self.metrics.doors["metrics"] = site
            Listeners(self._reactor, (listen,), site, "metrics").setServiceParent(parent)


__all__ = ["HEALTHZ", "METRICS", "READYZ", "Monitoring"]
