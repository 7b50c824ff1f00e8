"""A pod holding more device memory than it declared is reported: event and metric.

Real control plane, a simulated node agent on one of the session's kwok nodes
(the simulated backend's memory follows what the pod's process reports through
the real client library). Nothing is stopped: the owner learns of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.kube import apply, events_for, get_json, wait_for
from e2e.kwok_agent import agent_on_kwok_node
from rlix.agent.overruns import REASON_OVERRUN, REASON_WITHIN
from rlix.core import names
from rlix.devcluster import processes
from tests.components.pod_processes import close_process, spawn_in_pod
from tests.support.agent_fakes import AgentProcess

# Reports usage from each stdin line: "<MiB>" on GPU 0, answered with "ok". It
# waits for the agent first: a report made before the connection is dropped,
# which CI saw under load (no usage, so no overrun).
USER = """
import sys, time, rlix
sys.stdin.readline()
deadline = time.monotonic() + 60
while not rlix.agent_connected() and time.monotonic() < deadline:
    time.sleep(0.05)
print("connected" if rlix.agent_connected() else "not connected", flush=True)
for line in sys.stdin:
    rlix.report_usage(gpu=0, memory_mib=int(line), utilization=0.5)
    print("ok", flush=True)
"""


@pytest.fixture
def agent(cluster: Any, tmp_path: Path) -> Iterator[AgentProcess]:
    with agent_on_kwok_node(cluster, tmp_path / "agent", metrics_port=processes.free_port()) as a:
        yield a


def reasons(cluster: Any, namespace: str, pod: str) -> list[str]:
    return [e["reason"] for e in events_for(cluster, namespace, pod)]


def samples(agent: AgentProcess, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(agent.metrics())
        for sample in family.samples
        if sample.name == name
    ]


def overruns_counted(agent: AgentProcess, pod: str) -> float:
    found = samples(agent, "rlix_agent_memory_overruns_total")
    return sum(value for labels, value in found if labels["pod"] == pod)


def test_a_pod_over_its_declared_memory_gets_an_event_and_a_metric_until_it_is_back(
    cluster: Any, namespace: str, agent: AgentProcess
) -> None:
    budget = {"rollout": 20000, "training": 30000}  # peak 30000 MiB per GPU
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "greedy",
            "annotations": {names.ANNOTATION_GPU_MEMORY_MIB: json.dumps(budget)},
        },
        "spec": {
            "nodeName": agent.node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "main", "image": "example.com/trainer:1"}],
        },
    }
    apply(cluster, namespace, pod)
    uid = get_json(cluster, "pod", "greedy", "-n", namespace)["metadata"]["uid"]
    user = spawn_in_pod(agent, USER, uid=uid)
    try:
        assert user.stdout is not None
        assert user.stdout.readline().strip() == "connected", agent.log_text()

        def use(mib: int) -> None:
            assert user.stdin is not None and user.stdout is not None
            user.stdin.write(f"{mib}\n")
            user.stdin.flush()
            assert user.stdout.readline().strip() == "ok"

        use(25000)  # within its peak phase's budget
        use(36000)  # 6000 MiB over it
        event = wait_for(
            "the overrun event on the pod",
            lambda: next(
                (
                    e
                    for e in events_for(cluster, namespace, "greedy")
                    if e["reason"] == REASON_OVERRUN
                ),
                None,
            ),
        )
        assert event["type"] == "Warning"
        assert event["involvedObject"]["uid"] == uid
        assert "36000 MiB on GPU 0" in event["message"], event["message"]
        assert "6000 MiB over its budget of 30000 MiB" in event["message"], event["message"]
        assert overruns_counted(agent, "greedy") == 1
        labels = {"node": agent.node, "namespace": namespace, "pod": "greedy", "gpu": "0"}
        assert samples(agent, "rlix_agent_pod_memory_over_budget_bytes") == [(labels, 6000 * 2**20)]

        use(12000)  # back within
        wait_for(
            "the within-budget event",
            lambda: REASON_WITHIN in reasons(cluster, namespace, "greedy"),
        )
        assert reasons(cluster, namespace, "greedy").count(REASON_OVERRUN) == 1
        assert overruns_counted(agent, "greedy") == 1
        assert "rlix_agent_pod_memory_over_budget_bytes{" not in agent.metrics()
    finally:
        close_process(user)
