"""In-place preemption that frees schedulable room: the whole loop, for real.

A control plane of its own with one kwok node of two 81920 MiB GPUs that reach
the scheduler only as the ``gpu.rlix.io`` ResourceSlice a real node agent
(simulated backend) publishes, at 1.5x memory overcommit (122880 MiB per GPU
for the claims to sum to); the real operator with its conductor, extender and
rlix-scheduler. The numbers:

* job ``low`` (priority 0): its trainer holds 70000 MiB of GPU 0 (not
  preemptible), its rollout ``gen`` 60000 MiB of GPU 1 (preemptible); a real
  trainer process with torch tensors stands in for ``gen``'s container;
* job ``high`` (priority 10) needs 40000 MiB of one GPU: no GPU has it free
  (70000 + 40000 and 60000 + 40000 both exceed 81920 physical).

The conductor parks ``gen`` in place (same pod, its bytes in host memory); the
operator admits ``high`` next to the parked memory (claims 60000 + 40000 <=
122880 published, resident 40000 <= 81920 physical) and kube-scheduler's DRA
allocator agrees: ``high`` runs while ``low``'s pods all still exist. When
``high`` is done, ``gen`` comes back with every byte as it was and ``low``
finishes. On whole GPUs (``e2e/test_conductor.py``) the same arrival parks
nobody: it could not be admitted into the parked memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import apply, get_json, new_namespace, rljob_state, wait_for
from e2e.own_cluster import headroom_agent_cluster
from e2e.suspensions import condition, finish, observed, pod_suspension
from rlix.core import dra
from rlix.devcluster.cluster import DevCluster
from tests.components.pod_processes import Trainer, wait_connected
from tests.support.agent_fakes import AgentProcess

pytest.importorskip("torch")

NODE = "rlix-headroom-gpu-0"
GPU_MIB = 81920
OVERCOMMIT = "1.5"


@pytest.fixture(scope="module")
def headroom_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DevCluster, AgentProcess]]:
    """Its own control plane (named for the e2e reaper), one DRA node, its agent."""
    root = tmp_path_factory.mktemp("agent")
    with headroom_agent_cluster(
        "headroom", NODE, root, gpus=2, gpu_mib=GPU_MIB, overcommit=OVERCOMMIT
    ) as both:
        yield both


@pytest.fixture(scope="module")
def operator(
    headroom_cluster: tuple[DevCluster, AgentProcess], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    cluster, _ = headroom_cluster
    yield from operator_with_extender(cluster, tmp_path_factory.mktemp("operator"))


def role(name: str, kind: str, phase: str, mib: int) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "gpusPerReplica": 1,
        "image": "example.com/rl:1",
        "gpuMemoryMiB": {phase: mib},
    }


def rljob(name: str, priority: int, *roles: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rlix.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {"algorithm": "GRPO", "priority": priority, "roles": list(roles)},
    }


def allocation(cluster: DevCluster, namespace: str, pod: str) -> dra.Allocation | None:
    return dra.read_allocation(get_json(cluster, "resourceclaim", pod, "-n", namespace))


def test_a_higher_priority_job_runs_in_memory_parked_for_it_and_the_victim_comes_back_whole(
    headroom_cluster: tuple[DevCluster, AgentProcess], operator: OperatorProcess
) -> None:
    cluster, agent = headroom_cluster
    ns = new_namespace(cluster)
    low = rljob(
        "low",
        0,
        role("policy", "trainer", "training", 70000),
        role("gen", "rollout", "rollout", 60000),
    )
    apply(cluster, ns, low)
    wait_for("low Running", lambda: rljob_state(cluster, ns, "low") == "Running", timeout_s=120)
    gen = get_json(cluster, "pod", "low-gen-0", "-n", ns)
    uid = gen["metadata"]["uid"]
    gen_gpu = allocation(cluster, ns, "low-gen-0")
    assert gen_gpu is not None and gen_gpu.node == NODE
    trainer = Trainer(agent, uid)
    try:
        wait_connected(agent, trainer.proc.pid, uid=uid)
        before = trainer.ready["digest"]

        apply(cluster, ns, rljob("high", 10, role("policy", "trainer", "training", 40000)))
        seen = observed(cluster, ns, "low-gen-0", "Suspended")
        desired, _, same_uid = pod_suspension(cluster, ns, "low-gen-0")
        assert same_uid == uid, "parked in place, not deleted"
        assert desired is not None and desired.reason == "Priority"
        assert desired.requester == f"{ns}/high"
        assert seen.parked_bytes > 0 and trainer.ask("live")["live"] == 0
        condition(cluster, ns, "low", "True", "Priority", says=f"for {ns}/high")

        # Admitted into the parked memory: it runs while low's pods all exist.
        wait_for("high Running", lambda: rljob_state(cluster, ns, "high") == "Running")
        high = allocation(cluster, ns, "high-policy-0")
        assert high is not None and (high.node, high.gpus) == (NODE, gen_gpu.gpus)
        assert high.consumed_mib == (40000,)
        published = dra.published_gpus(get_json(cluster, "resourceslice", dra.slice_name(NODE)))
        (gpu,) = high.gpus
        assert published[gpu].memory_mib == int(GPU_MIB * float(OVERCOMMIT))
        # The scheduler counts both claims; what is resident stays within physical memory.
        assert high.consumed_mib[0] + gen_gpu.consumed_mib[0] <= published[gpu].memory_mib
        assert high.consumed_mib[0] + gen_gpu.consumed_mib[0] > GPU_MIB
        assert {p["metadata"]["name"] for p in get_json(cluster, "pods", "-n", ns)["items"]} == {
            "low-policy-0",
            "low-gen-0",
            "high-policy-0",
        }
        assert rljob_state(cluster, ns, "low") == "Running"

        finish(cluster, ns, "high")
        observed(cluster, ns, "low-gen-0", "Resumed")
        desired, _, same_uid = pod_suspension(cluster, ns, "low-gen-0")
        assert desired is not None and desired.reason == "MemoryFree" and same_uid == uid
        assert desired.generation == 2, "parked once, resumed once: after high finished"
        assert trainer.ask("digest")["digest"] == before, "every parked byte came back"
        condition(cluster, ns, "low", "False", "Running")
    finally:
        trainer.close()
    finish(cluster, ns, "low")
    cluster.kubectl("delete", "namespace", ns, "--wait=false")
