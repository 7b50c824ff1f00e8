"""The placement memo keys hold every input of the answers they keep.

A ``PlacementView`` memoises per node load (rooms, verdicts, GPU groups,
score terms) under keys built from the pod. A pod field that changes an
answer but is missing from a key hands the next pod with the same key the
first one's answer: an e2e run found a pod that loads through the gate given
the cached refusal of one that does not. Here every pair of pods that differ
in one field is asked of one view, one after the other, and the second's
answers must be what a fresh view gives it.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from rlix.core.phases import Phase
from rlix.core.policy.placement import PlacementView, filter_nodes, score_nodes, score_values
from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.snapshot import ClusterSnapshot, PhaseLoad, Workload
from tests.builders.placement import cluster, node, pod

GiB = 1024
GPU = 80 * GiB
HALF = (PhaseLoad(Phase.TRAINING, 0.5, 1.0), PhaseLoad(Phase.IDLE, 0.5, 0.0))
BUSY = (PhaseLoad(Phase.TRAINING, 1.0, 1.0),)

# Three nodes: one whose two GPUs hold a disaggregated job's rollout and
# trainer pods (each idles half its cycle: a pod may join one only by turns
# where the gate parks), one with one such pod and an empty GPU, one empty.
SNAPSHOT: ClusterSnapshot = (
    cluster()
    .with_nodes(
        node("full").gpus(2, mib=GPU), node("half").gpus(2, mib=GPU), node("empty").gpus(2, mib=GPU)
    )
    .with_pods(
        pod("roll-0").job("a").role("rollout").memory(rollout=50 * GiB).phase("rollout")
        .load(("rollout", 0.5, 1.0), ("idle", 0.5, 0.0)).iteration(100.0)
        .loads_through_gate().on("full", 0),
        pod("train-0").job("a").role("trainer").memory(training=50 * GiB).phase("idle")
        .load(("training", 0.5, 1.0), ("idle", 0.5, 0.0)).iteration(100.0)
        .loads_through_gate().on("full", 1),
        pod("roll-1").job("c").role("rollout").memory(rollout=50 * GiB).phase("rollout")
        .load(("rollout", 0.5, 1.0), ("idle", 0.5, 0.0)).iteration(100.0)
        .loads_through_gate().on("half", 0),
    )
    .build()
)  # fmt: skip
NODES = ["full", "half", "empty"]

BASE: Workload = (
    pod("train-0").job("b").role("trainer").memory(training=60 * GiB).phase("training")
    .load(("training", 0.5, 1.0), ("idle", 0.5, 0.0)).iteration(100.0).loads_through_gate()
    .build()
)  # fmt: skip

# One other value per field that placement may read.
VARIANTS: dict[str, Any] = {
    "loads_through_gate": False,
    "memory_mib": {Phase.TRAINING: 20 * GiB},
    "priority": 100,
    "load_profile": BUSY,
    "iteration_s": 1000.0,
    "job": "default/a",
    "gpus": 2,
    "phase": Phase.IDLE,
    "preemptible": True,
    "gang_size": 2,
    "node_selector": (("zone", "x"),),
}

RULES = {
    "as built": SharingRules(),
    "parks at the gate": SharingRules(parks_at_gate=True),
    "no matrix": SharingRules(interference=None),
}


def answers(view: PlacementView, w: Workload) -> tuple[object, ...]:
    filtered = filter_nodes(view, w, NODES)
    scored = score_nodes(view, w, NODES)
    return (
        filtered.feasible,
        filtered.failed,
        filtered.unresolvable,
        {n: (s.score, s.gpus) for n, s in scored.items()},
        score_values(view, w, NODES),
    )


def pods() -> list[Workload]:
    return [BASE, *(replace(BASE, **{k: v}) for k, v in VARIANTS.items())]


@pytest.mark.parametrize("rules", RULES.values(), ids=RULES.keys())
def test_every_pod_gets_from_a_used_view_what_a_fresh_one_gives_it(rules: SharingRules) -> None:
    every = pods()
    fresh = [answers(PlacementView(SNAPSHOT, rules=rules), w) for w in every]
    # The variants do change answers somewhere (else this test could not fail).
    assert len({repr(a) for a in fresh}) > 3
    for i, j in itertools.permutations(range(len(every)), 2):
        view = PlacementView(SNAPSHOT, rules=rules)
        answers(view, every[i])
        assert answers(view, every[j]) == fresh[j], (every[i], every[j])
