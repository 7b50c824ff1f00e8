"""One hostile object in the cluster must not blind the extender (issue 18, item 1).

A plain pod in any namespace carrying ``rlix.io/gang-size`` with a 5,000-digit
number used to raise out of the pod reader: the watch restarted every two
seconds, each relist cleared the cache first and died on that pod, so every
bound workload vanished (2 -> 0) and a restarted extender never became ready.
These feed the cache exactly what the watcher feeds it (a LIST, then events).
"""

from __future__ import annotations

from typing import Any

import pytest

from rlix.extender.cache import ADDED, MODIFIED, ClusterCache

HUGE = "9" * 5000


def pod(name: str, *, node: str | None = "n0", ns: str = "team", **notes: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}",
            "labels": {"rlix.io/job": "j", "rlix.io/role": "rollout"},
            "annotations": {"rlix.io/gpu-memory-mib": "20000", **notes},
        },
        "spec": spec,
        "status": {"phase": "Running"},
    }


NODE = {
    "metadata": {
        "name": "n0",
        "labels": {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559"},
    },
    "status": {"allocatable": {"nvidia.com/gpu": "8"}},
}

HOSTILE = [
    {"rlix.io/gang-size": HUGE},
    {"rlix.io/priority": HUGE},
    {"rlix.io/gpu-memory-mib": HUGE},
    {"rlix.io/gpu-memory-mib": "[" * 100_000},
    {"rlix.io/gpu-memory-mib": '{"rollout": ' + HUGE + "}"},
    {"rlix.io/gpu-indices": ",".join(["1"] * 50_000)},
    {"rlix.io/phase": "x" * 100_000},
    {"rlix.io/phase-seconds": "[" * 100_000},
    {"rlix.io/phase-seconds": '{"rollout": ' + HUGE + "}"},
    {"rlix.io/phase-seconds": '{"rollout": NaN, "idle": 1}'},
]


def plain(notes: dict[str, str]) -> dict[str, Any]:
    """Anybody's pod, in another namespace, bound to the same node."""
    obj = pod("intruder", ns="elsewhere", **notes)
    del obj["metadata"]["labels"]
    return obj


@pytest.mark.parametrize("notes", HOSTILE, ids=lambda n: next(iter(n)))
def test_a_hostile_pod_event_leaves_the_other_workloads_alone(notes: dict[str, str]) -> None:
    cache = ClusterCache()
    cache.replace_nodes([NODE])
    cache.replace_pods([pod("a"), pod("b")])
    assert cache.counts() == (1, 2)
    cache.apply_pod(ADDED, plain(notes))
    cache.apply_pod(MODIFIED, plain(notes))
    assert {w.name for w in cache.view().snapshot.workloads} >= {"team/a", "team/b"}
    assert cache.ready


@pytest.mark.parametrize("notes", HOSTILE, ids=lambda n: next(iter(n)))
def test_a_relist_with_a_hostile_pod_in_it_keeps_everyone_and_becomes_ready(
    notes: dict[str, str],
) -> None:
    cache = ClusterCache()  # a restarted extender: its first LIST holds the pod
    cache.replace_nodes([NODE])
    cache.replace_pods([pod("a"), plain(notes), pod("b")])
    assert cache.ready
    names = {w.name for w in cache.view().snapshot.workloads}
    assert {"team/a", "team/b"} <= names
    # The intruder is bound, so it still holds its GPU (read with safe values),
    # and its error is kept, per object, for logs and metrics.
    assert "elsewhere/intruder" in names
    errors = cache.object_errors()
    assert list(errors) == ["Pod elsewhere/intruder"]
    (message,) = errors["Pod elsewhere/intruder"]
    assert next(iter(notes)) in message
    assert HUGE not in message and "[" * 100 not in message  # the value is described, not echoed
