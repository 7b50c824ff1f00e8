"""Prometheus metrics of the extender, on a registry of its own.

A private registry (not the process-global default) lets tests and the
benchmark build many apps in one process without "duplicated timeseries".
Buckets start at 100 us because the handlers are meant to take a few ms: the
default buckets (5 ms and up) would hide exactly the regressions we care about.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip


class ExtenderMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.latency = Histogram(
            "rlix_extender_request_seconds",
            "Time to answer one extender call, by verb",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "rlix_extender_requests",
            "Extender calls by verb and outcome (ok, bad_request, pod_error, internal)",
            ["verb", "outcome"],
            registry=self.registry,
        )
        self.nodes = Gauge(
            "rlix_extender_cache_nodes", "Nodes in the extender cache", registry=self.registry
        )
        self.pods = Gauge(
            "rlix_extender_cache_pods", "Bound pods in the extender cache", registry=self.registry
        )
        self.objects_with_errors = Gauge(
            "rlix_extender_objects_with_errors",
            "Cached objects with a malformed RLix value, read with safe values (see the log)",
            ["kind"],
            registry=self.registry,
        )
        self.rejected_objects = Gauge(
            "rlix_extender_rejected_objects",
            "Watched objects ignored since start because they had no usable name",
            registry=self.registry,
        )
