"""The node agent's metrics: state read at scrape time, phase seconds per pod."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rlix.agent.metrics import AgentMetrics, PhaseTimes
from rlix.agent.parking_state import Manifest, ParkedEntry, SuspendedPod
from rlix.agent.simulated_gpus import SimulatedBackend
from rlix.core.agent_protocol import Location, Place
from rlix.core.phases import Phase


def samples(metrics: AgentMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, frozenset(labels.items())))


def test_phase_seconds_add_up_per_phase_including_the_open_one() -> None:
    now = [100.0]
    times = PhaseTimes(clock=lambda: now[0])
    times.enter("u1", "team-a", "rollout-0", Phase.ROLLOUT)
    now[0] = 130.0
    times.enter("u1", "team-a", "rollout-0", Phase.ROLLOUT)  # same phase: no new interval
    times.enter("u1", "team-a", "rollout-0", Phase.TRAINING)
    now[0] = 140.0
    times.enter("u1", "team-a", "rollout-0", Phase.ROLLOUT)
    now[0] = 145.0
    ((namespace, name, current, seconds),) = times.snapshot()
    assert (namespace, name, current) == ("team-a", "rollout-0", Phase.ROLLOUT)
    assert seconds == {Phase.ROLLOUT: 35.0, Phase.TRAINING: 10.0}


def test_gpu_memory_idle_and_parked_bytes_are_read_at_each_scrape() -> None:
    backend = SimulatedBackend(gpu_count=2, memory_mib=1000)
    suspended: dict[str, SuspendedPod] = {}
    metrics = AgentMetrics("node-a")
    metrics.watch(backend.gpus, lambda: list(suspended.values()))
    gpu0 = {"node": "node-a", "gpu": "0"}
    assert value(metrics, "rlix_agent_gpu_memory_total_bytes", **gpu0) == 1000 * 2**20
    assert value(metrics, "rlix_agent_gpu_memory_used_bytes", **gpu0) == 0
    assert value(metrics, "rlix_agent_gpu_idle", **gpu0) == 1

    backend.report_usage(4242, 0, 300, 0.75)
    assert value(metrics, "rlix_agent_gpu_memory_used_bytes", **gpu0) == 300 * 2**20
    assert value(metrics, "rlix_agent_gpu_utilization", **gpu0) == 0.75
    assert value(metrics, "rlix_agent_gpu_idle", **gpu0) == 0
    assert value(metrics, "rlix_agent_gpu_idle", node="node-a", gpu="1") == 1

    entries = (ParkedEntry("w", 1024, "c"), ParkedEntry("m", 2048, "d"))
    rec = SuspendedPod("u1", "team-a", "rollout-0", "2026-01-01T00:00:00Z")
    rec.processes[1] = Manifest(Location(Place.HOST), entries)
    rec.processes[2] = Manifest(Location(Place.GPU, 3), entries[:1])
    suspended["u1"] = rec
    pod = {"node": "node-a", "namespace": "team-a", "pod": "rollout-0"}
    assert value(metrics, "rlix_agent_parked_bytes", **pod, place="host") == 3072
    assert value(metrics, "rlix_agent_parked_bytes", **pod, place="gpu:3") == 1024
    del suspended["u1"]
    assert value(metrics, "rlix_agent_parked_bytes", **pod, place="host") is None


def test_current_phase_is_one_series_per_pod() -> None:
    metrics = AgentMetrics("node-a")
    metrics.watch(list, list)
    metrics.phases.enter("u1", "team-a", "rollout-0", Phase.ROLLOUT)
    metrics.phases.enter("u1", "team-a", "rollout-0", Phase.SCORING)
    pod = {"node": "node-a", "namespace": "team-a", "pod": "rollout-0"}
    assert value(metrics, "rlix_agent_pod_phase", **pod, phase="scoring") == 1
    assert value(metrics, "rlix_agent_pod_phase", **pod, phase="rollout") is None
    rollout = value(metrics, "rlix_agent_pod_phase_seconds_total", **pod, phase="rollout")
    assert rollout is not None and rollout >= 0
