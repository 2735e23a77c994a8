"""
Health checks and Prometheus metrics (issue 20).

The rooms inside:

  - C{_resources}: C{/healthz}, C{/readyz} and C{/metrics} as resources
    (L{HealthResource}, L{MetricsResource});
  - C{_readiness}: whether Beacon is ready, kept by a periodic store check
    on the injected clock (L{Readiness});
  - C{_metrics}: the metrics, counted where things happen and read at each
    scrape (L{BeaconMetrics}), and the pending submissions' count
    (L{PendingCount});
  - C{_monitor}: all of it wired into one service tree (L{Monitoring}).
"""

from beacon.monitoring._metrics import (
    BATCH_BUCKETS,
    COMMIT_BUCKETS,
    PENDING_INTERVAL,
    BeaconMetrics,
    Histogram,
    PendingCount,
)
from beacon.monitoring._monitor import HEALTHZ, METRICS, READYZ, Monitoring
from beacon.monitoring._readiness import (
    CHECK_INTERVAL,
    PROBE_ID,
    STALE_AFTER,
    STARTING,
    STOPPING,
    STORE_FAILED,
    STORE_UNRESPONSIVE,
    Readiness,
)
from beacon.monitoring._resources import METRICS_TYPE, HealthResource, MetricsResource, alive

__all__ = [
    "BATCH_BUCKETS",
    "CHECK_INTERVAL",
    "COMMIT_BUCKETS",
    "HEALTHZ",
    "METRICS",
    "METRICS_TYPE",
    "PENDING_INTERVAL",
    "PROBE_ID",
    "READYZ",
    "STALE_AFTER",
    "STARTING",
    "STOPPING",
    "STORE_FAILED",
    "STORE_UNRESPONSIVE",
    "BeaconMetrics",
    "HealthResource",
    "Histogram",
    "MetricsResource",
    "Monitoring",
    "PendingCount",
    "Readiness",
    "alive",
]
