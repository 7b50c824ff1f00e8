"""bench/chaos.py's memory invariant: what it counts as a GPU promised too much.

The chaos run judges every sample by it, and RLix shares GPUs by memory, so
the check must pass two jobs that fit one GPU and fail two that do not, with
the admission ledger's planned pods counted beside the live ones.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rlix.core import names
from tests.builders.objects import node_object, pod_object
from tests.builders.placement import H100_MIB, node, pod
from tests.support.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


@pytest.fixture(scope="module")
def chaos() -> ModuleType:
    return load_script(SCRIPT, "bench_chaos")


NODES = [node_object(node("n1").gpus(2).build())]


def overcommitted(factor: str) -> list[dict[str, Any]]:
    """A node whose agent publishes its GPUs as DRA devices at ``factor`` x memory."""
    body = node_object(node("n1").gpus(2).build())
    body["metadata"]["annotations"][names.ANNOTATION_NODE_GPU_CLAIMS] = "true"
    body["metadata"]["annotations"][names.ANNOTATION_NODE_MEMORY_OVERCOMMIT] = factor
    return [body]


def resident(name: str, job: str, phase: str = "training", gpu: int = 0, **mib: int) -> Any:
    return pod(name).job(job).gpus(1).memory(**mib).phase(phase).on("n1", gpu)


def test_two_jobs_that_fit_one_gpu_are_sharing_not_over_promise(chaos: ModuleType) -> None:
    pods = [
        pod_object(resident("a-0", "a", training=40_000).build()),
        pod_object(resident("b-0", "b", training=40_000).build()),
    ]
    assert chaos.memory_over(NODES, pods, []) == ([], [])


def test_claims_above_the_published_memory_are_reported_by_gpu(chaos: ModuleType) -> None:
    pods = [
        pod_object(resident("a-0", "a", scoring=10_000, training=50_000).build()),
        pod_object(resident("b-0", "b", training=40_000).build()),
        pod_object(resident("c-0", "c", gpu=1, training=80_000).build()),
    ]
    [claims], [running] = chaos.memory_over(NODES, pods, [])
    assert claims.gpu == running.gpu == "n1/0"
    assert claims.detail.startswith(f"claims 90000 of {H100_MIB} MiB")
    assert claims.pods == running.pods == {"default/a-0", "default/b-0"}
    # In scoring, a-0 holds 10000: the claims are still over, the GPU is not.
    pods[0] = pod_object(resident("a-0", "a", "scoring", scoring=10_000, training=50_000).build())
    assert [len(found) for found in chaos.memory_over(NODES, pods, [])] == [1, 0]


def test_overcommit_publishes_more_for_claims_and_parked_pods_run_nothing(
    chaos: ModuleType,
) -> None:
    nodes = overcommitted("1.5")  # 122880 MiB published per GPU
    a = resident("a-0", "a", training=50_000)
    b = resident("b-0", "b", training=40_000)
    claims, running = chaos.memory_over(nodes, [pod_object(a.build()), pod_object(b.build())], [])
    assert claims == [] and [o.detail[:26] for o in running] == ["running 90000 of 81920 MiB"]
    parked = [pod_object(a.build()), pod_object(b.suspended().build())]
    assert chaos.memory_over(nodes, parked, []) == ([], [])
    third = resident("c-0", "c", training=40_000)
    claims, _ = chaos.memory_over(nodes, [*parked, pod_object(third.build())], [])
    assert [o.detail[:28] for o in claims] == ["claims 130000 of 122880 MiB "]


def test_a_planned_pod_claims_its_peak_and_a_created_one_is_not_counted_twice(
    chaos: ModuleType,
) -> None:
    live = [pod_object(resident("a-0", "a", training=50_000).build())]
    planned = resident("b-0", "b", training=40_000).phase(None).build()
    claims, running = chaos.memory_over(NODES, live, [planned])
    assert len(claims) == 1 and running == []  # a pod with no phase yet runs nothing
    same = resident("a-0", "a", training=50_000).phase(None).build()
    assert chaos.memory_over(NODES, live, [same]) == ([], [])


def test_the_ledger_places_only_pods_of_admitted_jobs_not_created_yet(chaos: ModuleType) -> None:
    job = chaos.chaos_jobs(1, random.Random(3))[0]
    body = job.manifest("ns")
    body["status"] = {"state": "Admitted"}
    pods = {f"ns/{job.name}-{r.name}-{i}" for r in job.roles for i in range(r.replicas)}
    ledger = {f"ns/{job.name}": {"pods": {name: ["n1", [0]] for name in pods}}}

    planned = chaos.ledger_planned([body], [], ledger)
    assert sorted(w.name for w in planned) == sorted(pods)
    assert all(w.node == "n1" and w.gpu_indices == (0,) for w in planned)

    created = pod_object(pod(sorted(w.name for w in planned)[0]).job(job.name).build())
    assert len(chaos.ledger_planned([body], [created], ledger)) == len(pods) - 1

    body["status"] = {"state": "Queued"}  # admitted after the view was listed
    assert chaos.ledger_planned([body], [], ledger) == []
