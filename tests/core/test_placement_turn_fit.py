"""Rule 6 by turns (``SharingRules.parks_at_gate``): where the node agents park
the pod that does not work at the gate, two pods that take turns need the
larger peak and a CUDA context on their GPU, not both peaks, where both
load through the gate (``rlix.loading()``, the role's ``loadsThroughGate``).
The placement (filter, partner test) and the conductor's rule 3 count them
so; pods that do not take turns or load elsewhere, and the rules without
it, count every peak as before."""

from __future__ import annotations

from dataclasses import replace

from rlix.core.policy.conduct import Kind, decide
from rlix.core.policy.placement import PlacementView, filter_nodes, score_nodes
from rlix.core.policy.placement.documents import rules_from_doc, rules_to_doc
from rlix.core.policy.placement.sharing import (
    CONTEXT_MIB,
    SharingRules,
    joinable,
    kinds_may_pair,
    needed_mib,
    pair_kind,
    resident_mib,
)
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.snapshot import ClusterSnapshot
from rlix.core.suspension import Reason
from tests.builders.placement import NodeBuilder, PodBuilder, cluster, node, pod

GiB = 1024
GPU = 80 * GiB
AS_BUILT = SharingRules()  # the measured H200 matrix, rule 6 by both peaks
BY_TURNS = SharingRules(parks_at_gate=True)

# A disaggregated pair: each pod holds its memory in every phase and idles
# half of its 100 s iteration while the other pool works; both allocate
# first inside rlix.loading(), so their loads wait at the gate too.
HALF = (("idle", 0.5, 0.0),)


def rollout_pod(name: str = "roll-0", job: str = "a", mib: int = 50 * GiB) -> PodBuilder:
    return (
        pod(name).job(job).role("rollout").memory(rollout=mib).phase("rollout")
        .load(("rollout", 0.5, 1.0), *HALF).iteration(100.0).loads_through_gate()
    )  # fmt: skip


def trainer_pod(name: str = "train-0", job: str = "new", mib: int = 60 * GiB) -> PodBuilder:
    return (
        pod(name).job(job).role("trainer").memory(training=mib).phase("training")
        .load(("training", 0.5, 1.0), *HALF).iteration(100.0).loads_through_gate()
    )  # fmt: skip


def never_idles(b: PodBuilder) -> PodBuilder:
    """The same pod busy its whole iteration: it leaves no turn to take."""
    phase = next(iter(b.w.memory_mib)).value
    return b.load((phase, 1.0, 1.0))


def gpu_node(b: NodeBuilder | None = None) -> NodeBuilder:
    return b or node("n").gpus(1, mib=GPU)


def snapshot(*pods: PodBuilder, on: NodeBuilder | None = None) -> ClusterSnapshot:
    return cluster().with_nodes(gpu_node(on)).with_pods(*pods).build()


def test_pods_that_take_turns_need_the_larger_peak_and_a_context() -> None:
    a, b = rollout_pod().build(), trainer_pod().build()
    assert needed_mib(AS_BUILT, [a, b]) == 110 * GiB
    assert needed_mib(BY_TURNS, [a, b]) == 60 * GiB + CONTEXT_MIB
    assert needed_mib(BY_TURNS, [a]) == 50 * GiB
    # A pod that never idles takes no turns: both peaks, parking or not.
    busy = never_idles(trainer_pod()).build()
    assert needed_mib(BY_TURNS, [a, busy]) == 110 * GiB
    # Without a matrix no pair takes turns (nor does rule 6 apply).
    assert needed_mib(replace(BY_TURNS, interference=None), [a, b]) == 110 * GiB
    # What they hold now, each in its phase: the same count.
    assert resident_mib(AS_BUILT, [a, b]) == 110 * GiB
    assert resident_mib(BY_TURNS, [a, b]) == 60 * GiB + CONTEXT_MIB


def test_a_pod_joins_a_partner_it_takes_turns_with_where_only_the_larger_peak_fits() -> None:
    snap = snapshot(rollout_pod().on("n", 0))
    newcomer = trainer_pod().build()
    assert filter_nodes(PlacementView(snap, rules=AS_BUILT), newcomer, ["n"]).feasible == []
    gated = PlacementView(snap, rules=BY_TURNS)
    assert filter_nodes(gated, newcomer, ["n"]).feasible == ["n"]
    assert score_nodes(gated, newcomer, ["n"])["n"].gpus == (0,)
    assert joinable(BY_TURNS, newcomer, snap.workloads, gpu_mib=GPU)
    assert not joinable(AS_BUILT, newcomer, snap.workloads, gpu_mib=GPU)


def test_by_turns_still_needs_the_larger_peak_and_what_stays_put() -> None:
    too_big = trainer_pod(mib=GPU - CONTEXT_MIB + 1).build()
    snap = snapshot(rollout_pod().on("n", 0))
    assert filter_nodes(PlacementView(snap, rules=BY_TURNS), too_big, ["n"]).feasible == []
    # A parked resident's memory stays owed (it must be able to come back):
    # 15 GiB of it leaves room for 61, 25 does not.
    light = pod("p-0").job("p").memory(rollout=15 * GiB).phase("rollout").suspended().on("n", 0)
    roomy = snapshot(rollout_pod().on("n", 0), light)
    assert filter_nodes(
        PlacementView(roomy, rules=BY_TURNS), trainer_pod().build(), ["n"]
    ).feasible == ["n"]
    parked = pod("p-0").job("p").memory(rollout=25 * GiB).phase("rollout").suspended().on("n", 0)
    crowded = snapshot(rollout_pod().on("n", 0), parked)
    assert (
        filter_nodes(PlacementView(crowded, rules=BY_TURNS), trainer_pod().build(), ["n"]).feasible
        == []
    )
    # Memory no known pod explains is taken too.
    measured = snapshot(rollout_pod().on("n", 0), on=node("n").gpus(1, mib=GPU).used(75 * GiB))
    assert (
        filter_nodes(PlacementView(measured, rules=BY_TURNS), trainer_pod().build(), ["n"]).feasible
        == []
    )


def test_a_pod_that_takes_no_turns_needs_every_peak_even_where_the_gate_parks() -> None:
    snap = snapshot(rollout_pod().on("n", 0))
    busy = never_idles(trainer_pod()).build()
    assert filter_nodes(PlacementView(snap, rules=BY_TURNS), busy, ["n"]).feasible == []


def loads_outside_the_gate(b: PodBuilder) -> PodBuilder:
    """The same pod, its first allocation made where the gate is not asked
    (a TRL or RLlib trainer that loads before it attaches, an engine server)."""
    return PodBuilder(replace(b.w, loads_through_gate=False))


def test_a_pod_that_loads_outside_the_gate_needs_every_peak_even_where_the_gate_parks() -> None:
    # Either side: the newcomer's load would land in memory its working
    # partner holds, and a resident restarted later loads again the same way.
    elsewhere = loads_outside_the_gate(trainer_pod()).build()
    assert needed_mib(BY_TURNS, [rollout_pod().build(), elsewhere]) == 110 * GiB
    snap = snapshot(rollout_pod().on("n", 0))
    refused = filter_nodes(PlacementView(snap, rules=BY_TURNS), elsewhere, ["n"])
    assert refused.feasible == [] and "loadsThroughGate" in refused.failed["n"]
    resident = snapshot(loads_outside_the_gate(rollout_pod()).on("n", 0))
    gated = trainer_pod().build()
    assert filter_nodes(PlacementView(resident, rules=BY_TURNS), gated, ["n"]).feasible == []
    # The placement memo tells the two apart (the same load, asked of both:
    # an e2e run found the gated pod given the other's cached refusal).
    view = PlacementView(snap, rules=BY_TURNS)
    assert filter_nodes(view, elsewhere, ["n"]).feasible == []
    assert filter_nodes(view, trainer_pod().build(), ["n"]).feasible == ["n"]
    assert score_nodes(view, trainer_pod().build(), ["n"])["n"].gpus == (0,)
    mine, theirs = pair_kind([elsewhere]), pair_kind([rollout_pod().build()])
    assert not kinds_may_pair(BY_TURNS, mine, theirs, gpu_mib=GPU)
    # The conductor's rule 3 counts such a pair at both peaks too.
    both = snapshot(rollout_pod().on("n", 0), loads_outside_the_gate(trainer_pod()).on("n", 0))
    actions = decide(both, [], RLixPolicy(rules=BY_TURNS), clocks={}, now=0.0)
    assert [(a.kind, a.reason) for a in actions] == [(Kind.SUSPEND, Reason.PHASE_OVERFLOW)]


def test_claims_still_ask_every_peak_of_the_published_memory() -> None:
    # A gpu-claims node publishes its memory to kube-scheduler's DRA allocator,
    # which sums the claims' peaks: by turns needs published headroom there.
    newcomer = trainer_pod().build()
    flat = snapshot(rollout_pod().on("n", 0), on=node("n").gpus(1, mib=GPU).headroom(1.0))
    assert filter_nodes(PlacementView(flat, rules=BY_TURNS), newcomer, ["n"]).feasible == []
    roomy = snapshot(rollout_pod().on("n", 0), on=node("n").gpus(1, mib=GPU).headroom(1.5))
    assert filter_nodes(PlacementView(roomy, rules=BY_TURNS), newcomer, ["n"]).feasible == ["n"]


def test_two_jobs_are_partners_by_turns_where_the_gate_parks() -> None:
    mine, theirs = pair_kind([trainer_pod().build()]), pair_kind([rollout_pod().build()])
    assert not kinds_may_pair(AS_BUILT, mine, theirs, gpu_mib=GPU)
    assert kinds_may_pair(BY_TURNS, mine, theirs, gpu_mib=GPU)
    busy = pair_kind([never_idles(trainer_pod()).build()])
    assert not kinds_may_pair(BY_TURNS, busy, theirs, gpu_mib=GPU)


def test_the_conductor_parks_no_pair_the_gate_keeps_within_the_gpu() -> None:
    snap = snapshot(rollout_pod().on("n", 0), trainer_pod().on("n", 0))
    overflow = decide(snap, [], RLixPolicy(rules=AS_BUILT), clocks={}, now=0.0)
    assert [(a.kind, a.reason) for a in overflow] == [(Kind.SUSPEND, Reason.PHASE_OVERFLOW)]
    assert decide(snap, [], RLixPolicy(rules=BY_TURNS), clocks={}, now=0.0) == ()
    # A pair that takes no turns still overflows the GPU: rule 3 parks one.
    busy = snapshot(rollout_pod().on("n", 0), never_idles(trainer_pod()).on("n", 0))
    actions = decide(busy, [], RLixPolicy(rules=BY_TURNS), clocks={}, now=0.0)
    assert [(a.kind, a.reason) for a in actions] == [(Kind.SUSPEND, Reason.PHASE_OVERFLOW)]


def test_the_rules_document_says_whether_the_nodes_park_at_the_gate() -> None:
    doc = rules_to_doc(BY_TURNS)
    assert doc["parksAtGate"] is True
    assert rules_from_doc(doc) == BY_TURNS
    assert rules_from_doc({k: v for k, v in doc.items() if k != "parksAtGate"}) == AS_BUILT
