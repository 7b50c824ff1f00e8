"""Parking at the gate with real containers on the real node.

- The node agent runs as the chart's DaemonSet with ``nodeAgent.phaseGate``
  on and ``parkAtGate`` (simulated GPUs of the chart's default size).
- Two pods run the client library (e2e/probes/parking_trainer.py) in real
  containers, the socket directory mounted as the operator mounts it. Each
  declares a peak of 0.6 of the GPU (``rlix.io/gpu-memory-mib``, which the
  agent reads from its listing of the node's pods), holds its weights
  outside its phases and its peak inside them, and loops on training phases
  over the same window of wall-clock time.
- Their peaks do not fit the GPU together: each goes in only once the other,
  idle or waiting, is parked, and is brought back at its own turn. Their
  training phases never overlap, every report of a peak fits the simulated
  GPU, both are parked and restored, and each one's buffer is what it was.

Run with ``make test-node`` (marker ``realnode``; root).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.kube import apply, wait_for
from e2e.realnode_pods import advertised_gpus, agent_daemonset, real_pod
from rlix.core.names import ANNOTATION_GPU_MEMORY_MIB, ANNOTATION_SUSPENDED
from rlix.devcluster import realnode
from rlix.devcluster.cluster import DevCluster, ExistingCluster

pytestmark = pytest.mark.realnode

PROBE = Path(__file__).parent / "probes" / "parking_trainer.py"
SOCKET_DIR = "/run/rlix"  # the chart's nodeAgent.socketDir
MAX_WAIT_S = 120
START_DELAY_S, WINDOW_S = 15.0, 15.0  # as e2e/test_phase_gate_real_node.py, a little longer
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


def _trainer(node: realnode.RealNode, name: str, start_at: float) -> dict[str, Any]:
    pod = real_pod(node, name, ["python3", "-c", PROBE.read_text()])
    pod["metadata"]["annotations"] = {ANNOTATION_GPU_MEMORY_MIB: str(PEAK_MIB)}
    spec = pod["spec"]
    env = {
        "RLIX_AGENT_SOCKET": f"{SOCKET_DIR}/agent.sock",
        "START_AT": str(start_at),
        "END_AT": str(start_at + WINDOW_S),
        "PEAK_MIB": str(PEAK_MIB),
        "WEIGHTS_MIB": str(WEIGHTS_MIB),
    }
    spec["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec["containers"][0]["volumeMounts"] = [
        {"name": "rlix-agent", "mountPath": SOCKET_DIR, "readOnly": True}
    ]
    spec["volumes"] = [{"name": "rlix-agent", "hostPath": {"path": SOCKET_DIR}}]
    return pod


def _events(cluster: DevCluster, ns: str, pod: str) -> list[dict[str, Any]]:
    log = cluster.kubectl("logs", pod, "-n", ns, check=False).stdout
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def test_two_pods_whose_peaks_do_not_fit_one_gpu_take_turns_with_their_memory(
    dev: DevCluster, real_node: realnode.RealNode, agent: tuple[str, str]
) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    dev.kubectl("create", "namespace", ns)
    wait_for(
        f"the default ServiceAccount of {ns}",
        lambda: dev.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
    )
    pods = ("park-a", "park-b")
    start_at = time.time() + START_DELAY_S
    try:
        for name in pods:
            apply(dev, ns, _trainer(real_node, name, start_at))

        def finished() -> bool:
            return all(any(e["event"] == "done" for e in _events(dev, ns, p)) for p in pods)

        try:
            wait_for("both trainers to finish their phases", finished, timeout_s=240)
        except AssertionError as exc:
            logs = {p: _events(dev, ns, p) for p in pods}
            agent_log = dev.kubectl("logs", "-n", agent[0], agent[1], "--tail=40", check=False)
            raise AssertionError(f"{exc}\n{logs}\n--- agent ---\n{agent_log.stdout}") from None
        events = {p: _events(dev, ns, p) for p in pods}
        notes = {
            p: json.loads(dev.kubectl("get", "pod", p, "-n", ns, "-o", "json").stdout)[
                "metadata"
            ].get("annotations", {})
            for p in pods
        }
    finally:
        dev.kubectl("delete", "namespace", ns, "--wait=true", check=False)

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
