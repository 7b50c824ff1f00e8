"""Prometheus metrics the operator exposes (``--metrics-port``, ``--metrics-host``).

A private registry keeps tests that build several operators in one process
from colliding on metric names. Only the leader (see ``rlix.operator.leadership``)
admits, so the queue and admission series move on one replica; ``rlix_operator_leader``
says which, and standbys report an empty queue.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.queue_length = Gauge(
            "rlix_operator_queue_length",
            "RLJobs pending: waiting for admission (set by each admission pass)",
            registry=self.registry,
        )
        self.admitted_jobs = Gauge(
            "rlix_operator_admitted_jobs",
            "RLJobs holding an admission (ledger entries of jobs not yet finished)",
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "rlix_operator_queue_wait_seconds",
            "From an RLJob's creation to its admission",
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
            registry=self.registry,
        )
        self.leader = Gauge(
            "rlix_operator_leader",
            "1 while this replica holds the leader Lease (or runs without election), else 0",
            registry=self.registry,
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
        self.forgotten = Counter(
            "rlix_operator_relist_forgotten",
            "Objects a relist found gone whose deletion the watch never delivered",
            ["kind"],
            registry=self.registry,
        )

        # The conductor (docs/conductor.md): what was parked and brought back, why.
        self.suspensions = Counter(
            "rlix_conductor_suspensions",
            "Suspensions the node agents reported, by reason and outcome",
            ["reason", "outcome"],
            registry=self.registry,
        )
        self.resumes = Counter(
            "rlix_conductor_resumes",
            "Resumes the node agents reported, by reason and outcome",
            ["reason", "outcome"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "rlix_conductor_refusals",
            "Suspensions not asked for or not carried out, by why",
            ["reason"],
            registry=self.registry,
        )
        self.evictions = Counter(
            "rlix_conductor_eviction_fallbacks",
            "Times parking could not free enough and eviction was the only way left",
            registry=self.registry,
        )
        self.suspension_seconds = Histogram(
            "rlix_conductor_latency_seconds",
            "From the conductor's desired state to the agent's report, by action",
            ["action"],
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.parked_bytes = Gauge(
            "rlix_conductor_parked_bytes",
            "Device memory parked off the GPUs now, as the node agents reported it",
            registry=self.registry,
        )

    def serve(self, port: int, addr: str) -> None:
        start_http_server(port, addr=addr, registry=self.registry)
