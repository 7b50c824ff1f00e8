"""Aging on a real cluster: a sized job that waited long goes first in its class.

The shared e2e cluster (4 nodes x 8 GPUs x 81920 MiB) and the real operator
given ``--aging 0.01`` (docs/rljob.md, "Aging"), with the extender so pods bind.

A filler holds every GPU. ``long`` (32 GPUs x 10 iterations of 360 s: 3,600 s
alone) waits; least work first would put ``short`` (32 GPUs x 9 iterations:
3,240 s alone) ahead of it. By the backlog (6,840 s on 32 GPUs) neither sets
the finish. After 36 s waited (a hundredth of its length) ``long`` has aged:
it goes first in its class, so when the filler goes it is admitted and
``short``, created after it aged and not aged itself until 32 s after its
creation, waits. Both need the whole cluster, so neither fits until the
filler is gone and one admission pass decides between them (as in
``test_operator_queue``). Without aging ``short`` would be admitted first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import apply, rljob_manifest, rljob_state, trainer_role, wait_for, wait_for_condition

PROFILE = {"rollout": 300, "training": 60}  # 360 s per iteration


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(
        cluster, tmp_path_factory.mktemp("operator"), extra_args=("--aging", "0.01")
    )


def sized(name: str, *, replicas: int, gpus: int, iterations: int) -> dict[str, Any]:
    job = rljob_manifest(name, trainer_role(replicas=replicas, gpus=gpus, mib=60000))
    job["spec"] |= {"iterations": iterations, "phaseProfile": PROFILE}
    return job


def test_a_job_that_waited_its_aging_is_admitted_before_a_smaller_one(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    apply(cluster, namespace, rljob_manifest("filler", trainer_role(replicas=4, gpus=8, mib=80000)))
    # The earlier modules' jobs may still be going with their namespaces.
    wait_for(
        "filler Running",
        lambda: rljob_state(cluster, namespace, "filler") == "Running",
        timeout_s=120,
    )
    apply(cluster, namespace, sized("long", replicas=4, gpus=8, iterations=10))
    aged = wait_for_condition(
        cluster,
        namespace,
        "long",
        "Admitted",
        lambda c: c["status"] == "False" and "aged at" in c["message"],
        what="long says it has aged",
        timeout_s=90,
    )
    assert "it goes first in its class" in aged["message"], aged
    described = cluster.kubectl("describe", "rlj", "long", "-n", namespace).stdout
    assert "aged at" in described
    apply(cluster, namespace, sized("short", replicas=4, gpus=8, iterations=9))
    wait_for("short waits", lambda: rljob_state(cluster, namespace, "short") == "Queued")
    cluster.kubectl("delete", "rlj", "filler", "-n", namespace)
    wait_for(
        "long admitted first",
        lambda: rljob_state(cluster, namespace, "long") in ("Admitted", "Running"),
        timeout_s=90,
    )
    assert rljob_state(cluster, namespace, "short") == "Queued"
    short = wait_for_condition(
        cluster,
        namespace,
        "short",
        "Admitted",
        lambda c: c["status"] == "False",
        what="short waits with a reason",
    )
    assert "aged at" not in short["message"], short
