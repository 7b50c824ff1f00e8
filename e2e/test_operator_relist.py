"""A relist forgets what the watch kept after missing its deletion.

A watch that misses a DELETED event leaves the object in the operator's store
for good: a job that keeps its admission, a pod that keeps its GPUs, so what
waits never fits again until a restart. The operator therefore lists now and
then (``Admitter.relist``) and drops what the API server no longer shows. Here
the operator's own ``Admitter`` and store run against the real API server with
no watch at all, which is exactly a watch that missed every event: objects are
deleted with kubectl and only the relist can tell.
"""

from __future__ import annotations

import asyncio
from typing import Any

from e2e._operator_process import CRD
from e2e.kube import apply, pod, rljob_manifest, trainer_role
from e2e.test_admission_ledger import admitter
from rlix.core import names
from rlix.devcluster.cluster import wait_established
from rlix.operator.admitting import Admitter
from rlix.operator.kube import Kube, api_client


def role_pod(name: str, job: str) -> dict[str, Any]:
    # No scheduler of this name runs: the pod stays Pending and deletes at once.
    return pod(name, scheduler="nobody", labels={names.LABEL_JOB: job})


def forgotten(admit: Admitter, kind: str) -> float:
    value = admit.metrics.registry.get_sample_value(
        "rlix_operator_relist_forgotten_total", {"kind": kind}
    )
    return value or 0.0


def test_a_relist_forgets_the_jobs_and_pods_deleted_behind_the_watchs_back(
    cluster: Any, namespace: str
) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(cluster.kubectl, "rljobs.rlix.io")
    apply(
        cluster,
        namespace,
        rljob_manifest("kept", trainer_role()),
        rljob_manifest("vanished", trainer_role()),
        role_pod("kept-policy-0", "kept"),
        role_pod("vanished-policy-0", "vanished"),
    )
    admit = admitter(Kube(api_client(str(cluster.kubeconfig))), namespace)
    store = admit.store
    try:
        asyncio.run(admit.relist())
        assert {f"{namespace}/kept", f"{namespace}/vanished"} <= set(store.jobs)
        pods = {p["metadata"]["name"] for p in store.all_pods()}
        assert pods == {"kept-policy-0", "vanished-policy-0"}
        nodes = set(store.nodes)
        assert nodes, "the cluster's nodes were listed"

        cluster.kubectl("delete", "-n", namespace, "rlj/vanished", "pod/vanished-policy-0")
        # Nothing told the store: it still holds both, as after a missed event.
        assert f"{namespace}/vanished" in store.jobs

        asyncio.run(admit.relist())
        assert f"{namespace}/vanished" not in store.jobs
        assert f"{namespace}/kept" in store.jobs
        assert {p["metadata"]["name"] for p in store.all_pods()} == {"kept-policy-0"}
        assert set(store.nodes) == nodes
        assert (forgotten(admit, "jobs"), forgotten(admit, "pods")) == (1.0, 1.0)
        assert forgotten(admit, "nodes") == 0.0

        # A relist with nothing gone forgets nothing.
        asyncio.run(admit.relist())
        assert (forgotten(admit, "jobs"), forgotten(admit, "pods")) == (1.0, 1.0)
    finally:
        admit.kube.close()
