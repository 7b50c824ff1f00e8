"""Two admitters interleaved on the real API server: the ledger's fence decides.

Two operator processes rarely pass over the queue at the same instant, so a
test with processes cannot show that the fence holds. Here two real
``Admitter`` objects (the operator's own code, each with its own client and
store) run one pass each against the real API server, and a barrier holds both
between reading the ledger and writing it: both decide on the same ledger
version. They decide differently, because each view lags (its watch has not
delivered the other's job yet), so without the fence each would admit a
different whole-cluster job. No operator process runs in this module: only
these two decide.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from e2e._operator_process import CRD
from e2e.kube import apply, get_json, rljob_manifest, trainer_role
from rlix.devcluster.cluster import wait_established
from rlix.operator.admitting import Admitter
from rlix.operator.kube import Kube, api_client
from rlix.operator.ledger import Ledger
from rlix.operator.metrics import Metrics
from rlix.operator.queueing import RLixAdmission
from rlix.operator.recording import Recorder
from rlix.operator.store import Store

NODES, GPUS = 4, 8


def whole_cluster(name: str) -> dict[str, Any]:
    """Every GPU at 60000 of 81920 MiB: two of these can never run together."""
    return rljob_manifest(name, trainer_role(replicas=NODES, gpus=GPUS, mib=60000))


class GatedKube(Kube):
    """The real client; its first ledger read waits until the other admitter has read too."""

    def __init__(self, api: Any, barrier: asyncio.Barrier) -> None:
        super().__init__(api)
        self._barrier: asyncio.Barrier | None = barrier

    async def read_ledger(self, namespace: str) -> Ledger:
        book = await super().read_ledger(namespace)
        if self._barrier is not None:
            barrier, self._barrier = self._barrier, None
            await barrier.wait()
        return book


def admitter(kube: Kube, namespace: str) -> Admitter:
    store = Store()

    def clock() -> datetime:
        return datetime.now(UTC)

    recorder = Recorder(store, kube, clock)
    return Admitter(
        store,
        recorder,
        RLixAdmission(),
        Metrics(),
        clock,
        kube,
        ledger_namespace=namespace,
        namespaces=(namespace,),
    )


async def interleave(kubeconfig: str, namespace: str, *, ledger_exists: bool) -> None:
    barrier = asyncio.Barrier(2)
    ahead = admitter(GatedKube(api_client(kubeconfig), barrier), namespace)
    behind = admitter(GatedKube(api_client(kubeconfig), barrier), namespace)
    try:
        if ledger_exists:
            assert await ahead.kube.write_ledger(namespace, {}, None)
        await ahead.relist()
        await behind.relist()
        # Watches that have not delivered every job yet: each sees one, so
        # without the fence each would admit its own.
        ahead.store.drop_job(f"{namespace}/j1")
        behind.store.drop_job(f"{namespace}/j0")
        # Both read the same ledger version, then each writes its own decision.
        await asyncio.gather(ahead.run(), behind.run())
        # The loser decides again, now from the winner's entry.
        await ahead.run()
        await behind.run()
    finally:
        ahead.kube.close()
        behind.kube.close()


@pytest.mark.parametrize("ledger_exists", [False, True], ids=["create-race", "update-race"])
def test_two_interleaved_admitters_never_promise_the_same_gpus_twice(
    cluster: Any, namespace: str, ledger_exists: bool
) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(cluster.kubectl, "rljobs.rlix.io")
    apply(cluster, namespace, whole_cluster("j0"))
    apply(cluster, namespace, whole_cluster("j1"))

    asyncio.run(interleave(str(cluster.kubeconfig), namespace, ledger_exists=ledger_exists))

    states = {
        j: get_json(cluster, "rlj", j, "-n", namespace).get("status", {}).get("state")
        for j in ("j0", "j1")
    }
    assert sorted(states.values(), key=str) == ["Admitted", "Queued"], states
