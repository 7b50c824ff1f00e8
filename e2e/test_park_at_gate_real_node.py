"""Parking at the gate with real containers on the real node.

- The node agent runs as the chart's DaemonSet with ``nodeAgent.phaseGate``
  on and ``parkAtGate`` (simulated GPUs of the chart's default size).
- Two pods run the client library (e2e/probes/parking_trainer.py) in real
  containers, the socket directory mounted as the operator mounts it. Each
  declares a peak of 0.6 of the GPU (``rlix.io/gpu-memory-mib``, which the
  agent reads from its listing of the node's pods) and GPU 0
  (``rlix.io/gpu-indices``), loads at its peak inside ``rlix.loading()`` at
  the same moment as the other (the second load waits for the first's, and
  the two never overlap), holds its weights outside its phases and its peak
  inside them, and loops on training phases over the same window of
  wall-clock time.
- Their peaks do not fit the GPU together: each goes in only once the other,
  idle or waiting, is parked, and is brought back at its own turn. Their
  training phases never overlap, every report of a peak fits the simulated
  GPU, both are parked and restored, and each one's buffer is what it was.
- Both pods say they load through the gate (``rlix.io/loads-through-gate``,
  a role's ``loadsThroughGate``), as does a third on GPU 1 that holds its
  weights without asking the gate (``ROLE`` eager): the agent reports that
  one, and only it, with a ``LoadedOutsideGate`` event.
- A trainer that stops at safe points (``safe_points=True``) beside a pod that
  syncs weights (the same probe, ``ROLE`` trainer and syncer): each sync that
  does not fit parks the trainer inside its training phase, and the agent
  brings it back there.

Run with ``make test-node`` (marker ``realnode``; root).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.realnode_pods import advertised_gpus, agent_daemonset, probe_pod, run_until_done
from rlix.core.names import (
    ANNOTATION_GPU_INDICES,
    ANNOTATION_GPU_MEMORY_MIB,
    ANNOTATION_LOADS_THROUGH_GATE,
    ANNOTATION_PHASE_SECONDS,
    ANNOTATION_SUSPENDED,
)
from rlix.devcluster import realnode
from rlix.devcluster.cluster import DevCluster, ExistingCluster

pytestmark = pytest.mark.realnode

PROBE = Path(__file__).parent / "probes" / "parking_trainer.py"
MAX_WAIT_S = 120
START_DELAY_S, WINDOW_S = 15.0, 15.0  # as e2e/test_phase_gate_real_node.py, a little longer
LOAD_BEFORE_S = 7.0  # both load this long before their phases start (each load: 2 s)
GPUS, GPU_MIB = 8, 143_771  # the simulated backend's defaults (the chart changes neither)
PEAK_MIB, WEIGHTS_MIB = GPU_MIB * 6 // 10, GPU_MIB // 4  # two peaks: 1.2 GPUs


@pytest.fixture(scope="module")
def dev(cluster: DevCluster | ExistingCluster, real_node: realnode.RealNode) -> DevCluster:
    """The session's local cluster (``real_node`` has skipped on any other)."""
    assert isinstance(cluster, DevCluster)
    return cluster


@pytest.fixture(scope="module")
def agent(dev: DevCluster, real_node: realnode.RealNode) -> Iterator[tuple[str, str]]:
    """The node agent's DaemonSet pod, parking at its phase gate: (namespace, pod)."""
    values = {"phaseGate": {"enabled": True, "maxWaitSeconds": MAX_WAIT_S, "parkAtGate": True}}
    with (
        advertised_gpus(dev, gpus=GPUS, memory_mib=GPU_MIB),
        agent_daemonset(dev, real_node, "rlix-park", values) as agent,
    ):
        yield agent


def test_two_pods_whose_peaks_do_not_fit_one_gpu_take_turns_with_their_memory(
    dev: DevCluster, real_node: realnode.RealNode, agent: tuple[str, str]
) -> None:
    start_at = time.time() + START_DELAY_S
    env = {
        "LOAD_AT": str(start_at - LOAD_BEFORE_S),
        "START_AT": str(start_at),
        "END_AT": str(start_at + WINDOW_S),
        "PEAK_MIB": str(PEAK_MIB),
        "WEIGHTS_MIB": str(WEIGHTS_MIB),
    }
    declared = {
        ANNOTATION_GPU_MEMORY_MIB: str(PEAK_MIB),
        ANNOTATION_GPU_INDICES: "0",
        ANNOTATION_LOADS_THROUGH_GATE: "true",
    }
    pods = ("park-a", "park-b")
    # Listed by the agent (every second) and seen holding nothing (every 5 s,
    # --overrun-interval) well before START_AT, when it loads outside the gate.
    eager = probe_pod(
        real_node,
        "park-eager",
        PROBE,
        env={**env, "ROLE": "eager", "GPU": "1"},
        annotations={**declared, ANNOTATION_GPU_INDICES: "1"},
    )
    reasons: dict[str, list[str]] = {}
    events, notes = run_until_done(
        dev,
        agent,
        [*(probe_pod(real_node, p, PROBE, env=env, annotations=declared) for p in pods), eager],
        reasons=reasons,
    )

    def of(pod: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in events[pod] if e["event"] == kind]

    for p in pods:  # what each did (shown with -s or on failure)
        waits = [e["entered"] - e["asked"] for e in of(p, "phase")]
        print(
            f"{p}: {len(of(p, 'phase'))} phases, {len(of(p, 'parked'))} parked, "
            f"{len(of(p, 'restored'))} restored, longest wait {max(waits, default=0):.2f} s"
        )
    # Told by the agent they reached through the mounted socket that its gate parks.
    assert all(of(p, "ready")[0]["parks"] for p in pods), events
    # Each loaded at its peak, one after the other: the second waited at the
    # gate for room on the GPU its pod declares (it held nothing there yet).
    (load_a,), (load_b,) = (of(p, "loaded") for p in pods)
    overlap = min(load_a["left"], load_b["left"]) - max(load_a["entered"], load_b["entered"])
    assert overlap <= 0, f"loads overlap by {overlap:.3f} s: {events}"
    a, b = (of(p, "phase") for p in pods)
    assert len(a) >= 3 and len(b) >= 3, events
    overlaps = [min(x["left"], y["left"]) - max(x["entered"], y["entered"]) for x in a for y in b]
    assert max(overlaps) <= 0, f"training phases overlap by {max(overlaps):.3f} s: {events}"
    # Every peak fitted the GPU: each went in only once the other's memory had left.
    assert not [e for p in pods for e in of(p, "refused")], events
    for p in pods:
        assert of(p, "parked") and of(p, "restored"), (p, events[p])
        assert of(p, "done")[0]["same"], f"{p}'s memory did not come back as it was"
        # Turns, not suspensions: nothing tells a conductor they are suspended.
        assert ANNOTATION_SUSPENDED not in notes[p], notes[p]
    # Each pod promised to load through the gate; only the eager one broke it.
    outside = {p: r.count("LoadedOutsideGate") for p, r in reasons.items()}
    assert outside == {"park-a": 0, "park-b": 0, "park-eager": 1}, reasons


def test_a_weight_sync_parks_a_trainer_mid_phase_at_its_safe_points(
    dev: DevCluster, real_node: realnode.RealNode, agent: tuple[str, str]
) -> None:
    """A trainer in 12 s training phases that calls ``rlix.safe_point()`` and
    says so (``safe_points=True``), beside a pod that syncs weights every 2 s;
    their peaks do not fit the GPU together. Each sync parks the trainer at a
    safe point inside its phase instead of waiting for the phase to end, and
    the agent brings it back, its buffer intact, once the sync has left."""
    start_at = time.time() + START_DELAY_S
    common = {
        "LOAD_AT": str(start_at - LOAD_BEFORE_S),
        "START_AT": str(start_at),
        "END_AT": str(start_at + 2 * WINDOW_S),
        "PEAK_MIB": str(PEAK_MIB),
        "WEIGHTS_MIB": str(WEIGHTS_MIB),
    }
    # Their cycles (as the operator writes them from a job's phaseProfile):
    # the gate stops the trainer only with enough of its phase left to pay.
    cycles = {"trainer": {"training": 12, "idle": 0.3}, "syncer": {"weight-sync": 0.5, "idle": 1.5}}
    roles = {"stop-trainer": "trainer", "stop-syncer": "syncer"}
    events, notes = run_until_done(
        dev,
        agent,
        [
            probe_pod(
                real_node,
                p,
                PROBE,
                env={**common, "ROLE": r},
                annotations={
                    ANNOTATION_GPU_MEMORY_MIB: str(PEAK_MIB),
                    ANNOTATION_GPU_INDICES: "0",
                    ANNOTATION_PHASE_SECONDS: json.dumps(cycles[r]),
                },
            )
            for p, r in roles.items()
        ],
    )

    def of(pod: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in events[pod] if e["event"] == kind]

    trainer, syncer = of("stop-trainer", "phase"), of("stop-syncer", "phase")
    # Inside a phase block a park lands only at rlix.safe_point(): a park
    # whose hook ran between the start and the end of a training phase is a
    # stop for a sync (between phases the trainer may be parked idle too).
    mid = [
        e
        for e in of("stop-trainer", "parked")
        if any(ph["entered"] < e["at"] < ph["left"] for ph in trainer)
    ]
    parks = len(of("stop-trainer", "parked"))
    print(f"trainer: {len(trainer)} phases, parked {parks} times, {len(mid)} mid-phase")
    assert all(of(p, "ready")[0]["stops"] for p in roles), events
    assert len(trainer) >= 2 and len(syncer) >= 3, events
    assert mid, f"no sync parked the trainer mid-phase: {events}"
    # Memory fit throughout: no report of a peak was refused.
    assert not [e for p in roles for e in of(p, "refused")], events
    for p in roles:
        assert of(p, "done")[0]["same"], f"{p}'s memory did not come back as it was"
        assert ANNOTATION_SUSPENDED not in notes[p], notes[p]
