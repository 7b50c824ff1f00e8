"""Prometheus metrics the operator exposes (``--metrics-port``).

A private registry keeps tests that build several operators in one process
from colliding on metric names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.queue_length = Gauge(
            "rlix_operator_queue_length", "RLJobs waiting for admission", registry=self.registry
        )
        self.jobs = Gauge(
            "rlix_operator_jobs", "RLJobs by state", ["state"], registry=self.registry
        )
        self.admitted = Counter(
            "rlix_operator_admitted", "RLJobs admitted since start", registry=self.registry
        )
        self.pods_created = Counter(
            "rlix_operator_pods_created", "Role pods created", registry=self.registry
        )
        self.pod_failures = Counter(
            "rlix_operator_pod_failures", "Role pods seen Failed", registry=self.registry
        )
        self.replans = Counter(
            "rlix_operator_replans",
            "Admitted gangs released because a pod could not bind on its planned node",
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "rlix_operator_reconcile_seconds",
            "Time to reconcile one RLJob (status, pods)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.admission_seconds = Histogram(
            "rlix_operator_admission_pass_seconds",
            "Time for one admission pass over the whole queue",
            registry=self.registry,
        )

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
