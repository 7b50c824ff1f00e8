"""One hostile pod cannot blind the real extender (issue 18, item 1; tier 3).

Before the core reader bounded every value, a plain pod anywhere carrying
``rlix.io/gang-size`` with a 5,000-digit number made the extender's watch
restart every two seconds with an empty cache (bound workloads 2 -> 0), and a
restarted extender never became ready while the pod existed. Here that pod sits
beside two RLix pods on the real API server: the cache keeps both, reports the
intruder as one per-object error, kube-scheduler still places a new pod through
the extender, and an extender started while the pod exists becomes ready with
the same view.
"""

from __future__ import annotations

from typing import Any

from e2e._extender_process import ExtenderProcess, running_extender
from e2e.kube import apply, get_json, wait_for
from e2e.test_extender_placement import NODES, _running_on, extender, rlix_pod
from rlix.core import names
from rlix.devcluster.cluster import DevCluster

__all__ = ["extender"]  # the fixture, re-used

HUGE = "9" * 5000


def intruder() -> dict[str, Any]:
    """Anybody's pod: no RLix labels, default scheduler bypassed, hostile annotations."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "intruder",
            "annotations": {
                names.ANNOTATION_GANG_SIZE: HUGE,
                names.ANNOTATION_GPU_MEMORY_MIB: "["
                * 50_000,  # with kubectl's last-applied copy, under 256 KiB
            },
        },
        "spec": {
            "nodeName": NODES[2],
            "containers": [{"name": "main", "image": "pause:3.10"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def test_a_hostile_pod_leaves_placement_and_readiness_alone(
    local_cluster: DevCluster, namespace: str, extender: ExtenderProcess
) -> None:
    apply(
        local_cluster,
        namespace,
        rlix_pod("a", job="alpha", role="trainer", phase="training",
                 gpus=2, memory_mib=40000, node=NODES[0]),
        rlix_pod("b", job="beta", role="rollout", phase="rollout",
                 gpus=2, memory_mib=40000, node=NODES[1]),
        intruder(),
    )  # fmt: skip
    key = f"Pod {namespace}/intruder"
    doc = extender.wait_for_cache(
        "the intruder's error beside both pods",
        lambda d: (
            key in d.get("objectErrors", {})
            and {f"{namespace}/a", f"{namespace}/b"} <= {w["name"] for w in d["workloads"]}
        ),
    )
    assert any(names.ANNOTATION_GANG_SIZE in e for e in doc["objectErrors"][key])
    assert len(doc["objectErrors"]) == 1, doc["objectErrors"]

    # The API server's Priority admission filled spec.priority on every pod:
    # the reason rlix.io/priority must win over it (docs/objects.md).
    pod_a = get_json(local_cluster, "pod", "a", "-n", namespace)
    assert pod_a["spec"].get("priority") == 0

    new = rlix_pod("new", job="gamma", role="rollout", phase="rollout", gpus=1, memory_mib=20000)
    apply(local_cluster, namespace, new)
    node = wait_for(
        "the new pod to run", lambda: _running_on(local_cluster, namespace, "new"), timeout_s=90
    )
    assert node in NODES

    # A restart while the pod exists: ready (start() waits for /readyz) and whole.
    extender.stop()
    with running_extender(local_cluster) as again:
        again.wait_for_pods(namespace, "a", "b", "new")
        assert list(again.snapshot()["objectErrors"]) == [key]
