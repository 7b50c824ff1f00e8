"""RLix's sharing rules (``rlix.core.policy.placement.sharing``): who may share a GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlix.core.phases import Phase, Shape, shape_of
from rlix.core.policy.placement import PlacementView, filter_nodes, node_load, score_nodes
from rlix.core.policy.placement.fit import fit
from rlix.core.policy.placement.sharing import (
    ASSUMED_CELLS,
    DEFAULT_RULES,
    MEASURED_H200_CELLS,
    PAYING_PAIR,
    TIME_SLICING_CELLS,
    SharingRules,
    cells_of,
    expected_rates,
    joinable,
    kinds_may_pair,
    pair_kind,
)
from rlix.core.sim.interference import ASSUMED, MEASURED_H200
from rlix.core.sim.workload import JobSpec, profile_for
from rlix.core.snapshot import PhaseLoad, Workload, load_profile_of
from tests.builders.placement import cluster, node, pod

GiB = 1024

ASSUMED_RULES = SharingRules(ASSUMED_CELLS)
MEASURED_RULES = SharingRules(MEASURED_H200_CELLS)
# Rule 5 at a threshold of one GPU (a pair delivering more than running its jobs
# in turn): the tests of how a pair's progress is judged use it, since the
# default threshold (PAYING_PAIR, 4/3) refuses the light pairs they judge.
ASSUMED_AT_ONE = replace(ASSUMED_RULES, min_pair_progress=1.0)
MEASURED_AT_ONE = replace(MEASURED_RULES, min_pair_progress=1.0)


def _rollout(name: str, job: str, *gpus: int, priority: int = 0):  # type: ignore[no-untyped-def]
    return (
        pod(name)
        .job(job)
        .gpus(len(gpus))
        .priority(priority)
        .memory(rollout=20 * GiB, training=20 * GiB)
        .phase("rollout")
        .on("n", *gpus)
    )


def _newcomer(gpus: int = 1, priority: int = 0):  # type: ignore[no-untyped-def]
    return (
        pod("new")
        .job("new")
        .gpus(gpus)
        .priority(priority)
        .memory(rollout=20 * GiB, training=20 * GiB)
        .build()
    )


def test_a_gpu_holds_at_most_two_jobs_whatever_memory_is_left() -> None:
    c = cluster().with_nodes(node("n").gpus(1))
    two = c.with_pods(_rollout("a-0", "a", 0), _rollout("b-0", "b", 0)).build()
    assert filter_nodes(PlacementView(two), _newcomer(), ["n"]).feasible == []
    one = c.with_pods(_rollout("a-0", "a", 0)).build()
    assert filter_nodes(PlacementView(one), _newcomer(), ["n"]).feasible == ["n"]
    three = SharingRules(interference=None, max_jobs_per_gpu=3)
    assert filter_nodes(PlacementView(two, rules=three), _newcomer(), ["n"]).feasible == ["n"]


def test_jobs_of_different_priority_never_share_a_gpu() -> None:
    c = cluster().with_nodes(node("n").gpus(1)).with_pods(_rollout("a-0", "a", 0, priority=50))
    view = PlacementView(c.build())
    assert filter_nodes(view, _newcomer(priority=100), ["n"]).feasible == []
    assert filter_nodes(view, _newcomer(priority=0), ["n"]).feasible == []
    assert filter_nodes(view, _newcomer(priority=50), ["n"]).feasible == ["n"]


def test_a_pod_s_gpus_all_hold_the_same_partner() -> None:
    # a on GPUs 0-1, b on 2-3: a 2-GPU pod takes a's pair or b's, never one of each.
    c = (
        cluster()
        .with_nodes(node("n").gpus(4))
        .with_pods(_rollout("a-0", "a", 0, 1), _rollout("b-0", "b", 2, 3))
    )
    snap = c.build()
    load = node_load(snap.nodes["n"], snap.on_node("n"))
    assert fit(load, _newcomer(2)).ok
    chosen = score_nodes(PlacementView(snap), _newcomer(2), ["n"])["n"].gpus
    assert chosen in ((0, 1), (2, 3))
    assert not fit(load, _newcomer(3)).ok


def test_under_the_measured_h200_matrix_no_pair_of_busy_jobs_pays_so_nobody_shares() -> None:
    # Worst case over the phases of two RL jobs: a GEMV beside a GEMM delivers
    # 1/3.17 + 1/1.573 = 0.95 GPUs of progress, less than running them in turn.
    assert not MEASURED_RULES.shares_at_all(0)
    c = cluster().with_nodes(node("n").gpus(1)).with_pods(_rollout("a-0", "a", 0))
    view = PlacementView(c.build(), rules=MEASURED_RULES)
    outcome = filter_nodes(view, _newcomer(), ["n"])
    assert outcome.feasible == []
    assert "sharing rules" in outcome.failed["n"]


def test_under_the_assumed_matrix_pairs_pay_but_the_protected_class_stays_alone() -> None:
    # Same shape: 2 / (1 + 1.0) = 1.0, at a threshold of one GPU; compute/memory: 1.48.
    assert ASSUMED_AT_ONE.shares_at_all(0)
    assert ASSUMED_AT_ONE.shares_at_all(99)
    # The protected class (>= 100) would be slowed 2x by a same-shape partner.
    assert not ASSUMED_AT_ONE.shares_at_all(100)
    c = cluster().with_nodes(node("n").gpus(1))
    low = c.with_pods(_rollout("a-0", "a", 0)).build()
    assert filter_nodes(PlacementView(low, rules=ASSUMED_AT_ONE), _newcomer(), ["n"]).feasible
    top = c.with_pods(_rollout("a-0", "a", 0, priority=100)).build()
    view = PlacementView(top, rules=ASSUMED_AT_ONE)
    assert filter_nodes(view, _newcomer(priority=100), ["n"]).feasible == []


def test_a_pair_must_deliver_four_thirds_of_a_gpu_to_share_by_default() -> None:
    # Two jobs of lengths a <= b at a rate r each finish at a / r and
    # a / r + b - a; in turn at a and a + b. Sharing is sooner in sum only for
    # r > 2/3: a pair delivering more than 4/3 GPUs.
    a, b = 1.0, 3.0
    for r, sooner in ((0.6, False), (0.7, True)):
        assert (2 * a / r + b - a < 2 * a + b) is sooner
        assert (2 * r >= PAYING_PAIR) is sooner
    assert ASSUMED_RULES.min_pair_progress == MEASURED_RULES.min_pair_progress == PAYING_PAIR
    # Two same-shape rollouts under the assumed matrix deliver 1.0: not enough.
    c = cluster().with_nodes(node("n").gpus(1)).with_pods(_rollout("a-0", "a", 0)).build()
    assert filter_nodes(PlacementView(c, rules=ASSUMED_RULES), _newcomer(), ["n"]).feasible == []
    # A trainer beside a rollout (each declares only its one phase) delivers 1.48: it shares.
    trainer = pod("t-0").job("t").memory(training=20 * GiB).phase("training").on("n", 0)
    busy = cluster().with_nodes(node("n").gpus(1)).with_pods(trainer).build()
    rollout = pod("new").job("new").memory(rollout=20 * GiB).build()
    view = PlacementView(busy, rules=ASSUMED_RULES)
    assert filter_nodes(view, rollout, ["n"]).feasible == ["n"]


def test_the_simulator_measures_with_the_numbers_the_policy_decides_with() -> None:
    assert MEASURED_H200.cells == MEASURED_H200_CELLS
    assert ASSUMED.cells == ASSUMED_CELLS
    assert DEFAULT_RULES.interference is None  # the cluster components' default: rules 1-3


def test_rules_refuse_a_malformed_matrix_naming_what_is_missing() -> None:
    with pytest.raises(ValueError, match="max_jobs_per_gpu = 0"):
        SharingRules(max_jobs_per_gpu=0)
    partial = tuple(c for c in MEASURED_H200_CELLS if c[:2] != (Shape.MEMORY, Shape.COMPUTE))
    with pytest.raises(ValueError, match="memory/compute"):
        SharingRules(partial)


def test_a_job_parked_in_place_does_not_keep_its_preemptor_off_the_gpu() -> None:
    # The conductor parks a victim in place; the higher-priority preemptor then
    # runs there. Parked, the victim slows nobody, so rule 3 does not apply to it.
    parked = _rollout("a-0", "a", 0, priority=0).suspended()
    c = cluster().with_nodes(node("n").gpus(1)).with_pods(parked)
    view = PlacementView(c.build())
    assert filter_nodes(view, _newcomer(priority=10), ["n"]).feasible == ["n"]


# Rule 5's phase-load-aware form: a pair judged by its expected progress over
# the two cycles where both declare a load profile (docs/simulator.md).
_LIGHT = (("rollout", 0.8, 0.6), ("training", 0.2, 1.0))  # a rollout waiting on tools
_HEAVY = (("rollout", 0.5, 1.0), ("training", 0.5, 1.0))  # every phase at full pressure


def test_a_pair_that_presses_lightly_over_its_cycle_shares_under_the_measured_matrix() -> None:
    resident = _rollout("a-0", "a", 0).load(*_LIGHT)
    newcomer = pod("new").job("new").memory(rollout=20 * GiB, training=20 * GiB)
    snap = cluster().with_nodes(node("n").gpus(1)).with_pods(resident).build()
    view = PlacementView(snap, rules=MEASURED_AT_ONE)
    # Expected: 2 x 0.536 = 1.07 GPUs of progress; worst moment 0.95. Above
    # one GPU, so it shares at that threshold; below 4/3, so not by default.
    by_default = PlacementView(snap, rules=MEASURED_RULES)
    assert filter_nodes(by_default, newcomer.load(*_LIGHT).build(), ["n"]).feasible == []
    assert filter_nodes(view, newcomer.load(*_LIGHT).build(), ["n"]).feasible == ["n"]
    # Without a profile on either side the worst case decides, as before.
    assert filter_nodes(view, newcomer.build(), ["n"]).feasible == []
    heavy = PlacementView(
        cluster()
        .with_nodes(node("n").gpus(1))
        .with_pods(_rollout("a-0", "a", 0).load(*_HEAVY))
        .build(),
        rules=MEASURED_RULES,
    )
    assert filter_nodes(heavy, newcomer.load(*_HEAVY).build(), ["n"]).feasible == []


def test_under_the_time_slicing_bound_only_a_pair_that_idles_enough_shares() -> None:
    # Two busy phases split a time-sliced GPU: one GPU's progress together,
    # under 4/3 whatever the shapes, so undeclared and fully busy pairs stay
    # apart; pods busy a fifth of their cycle make 2 / 1.2 = 1.67 GPUs together.
    rules = SharingRules(TIME_SLICING_CELLS)
    assert not rules.shares_at_all(0)
    idle = (("rollout", 0.5, 0.2), ("training", 0.5, 0.2))
    newcomer = pod("new").job("new").memory(rollout=20 * GiB, training=20 * GiB)
    for profile, shares in ((None, False), (_HEAVY, False), (idle, True)):
        resident, arriving = _rollout("a-0", "a", 0), newcomer
        if profile is not None:
            resident, arriving = resident.load(*profile), newcomer.load(*profile)
        snap = cluster().with_nodes(node("n").gpus(1)).with_pods(resident).build()
        view = PlacementView(snap, rules=rules)
        assert filter_nodes(view, arriving.build(), ["n"]).feasible == (["n"] if shares else [])


def test_a_light_profile_never_loosens_the_protected_class_bound() -> None:
    # Under the assumed matrix the light pair's expected stretch is 1.52 and its
    # worst case 2.0: both over 1.2, so class 100 stays alone; class 0 shares.
    for priority, shares in ((100, False), (0, True)):
        resident = _rollout("a-0", "a", 0, priority=priority).load(*_LIGHT)
        snap = cluster().with_nodes(node("n").gpus(1)).with_pods(resident).build()
        newcomer = (
            pod("new")
            .job("new")
            .priority(priority)
            .memory(rollout=20 * GiB, training=20 * GiB)
            .load(*_LIGHT)
            .build()
        )
        feasible = filter_nodes(PlacementView(snap, rules=ASSUMED_AT_ONE), newcomer, ["n"]).feasible
        assert bool(feasible) is shares


def test_expected_rates_solve_the_drifting_cycles_fixed_point() -> None:
    one = (PhaseLoad(Phase.ROLLOUT, 1.0, 1.0),)
    other = (PhaseLoad(Phase.TRAINING, 1.0, 1.0),)
    # One segment each: the model's rate exactly, 1 / (1 + I).
    mem, comp = expected_rates(MEASURED_RULES, one, other)
    assert mem == pytest.approx(1 / (1 + MEASURED_RULES.slowdown(Shape.MEMORY, Shape.COMPUTE)))
    assert comp == pytest.approx(1 / (1 + MEASURED_RULES.slowdown(Shape.COMPUTE, Shape.MEMORY)))
    # Several segments: each job's wall shares and rate satisfy the equations.
    a = tuple(PhaseLoad(Phase(p), s, q) for p, s, q in _LIGHT)
    b = tuple(PhaseLoad(Phase(p), s, q) for p, s, q in _HEAVY)
    ra, rb = expected_rates(MEASURED_RULES, a, b)

    def slow(x: PhaseLoad, y: PhaseLoad) -> float:
        return y.pressure * MEASURED_RULES.slowdown(shape_of(x.phase), shape_of(y.phase))

    # wall shares: v = share x slowdown x rate; each job's rate = 1 / sum share x slowdown
    va = [x.share * ra for x in a]
    vb = [y.share * rb for y in b]
    for _ in range(200):  # solve independently, by plain substitution
        fa = [1 + sum(v * slow(x, y) for v, y in zip(vb, b, strict=True)) for x in a]
        fb = [1 + sum(v * slow(y, x) for v, x in zip(va, a, strict=True)) for y in b]
        ta = 1 / sum(x.share * f for x, f in zip(a, fa, strict=True))
        tb = 1 / sum(y.share * f for y, f in zip(b, fb, strict=True))
        va = [x.share * f * ta for x, f in zip(a, fa, strict=True)]
        vb = [y.share * f * tb for y, f in zip(b, fb, strict=True)]
    assert (ra, rb) == pytest.approx((ta, tb), rel=1e-9)
    # Idle segments press on nobody: a job idle half its cycle slows its partner less.
    idle = (PhaseLoad(Phase.IDLE, 0.5, 1.0), PhaseLoad(Phase.TRAINING, 0.5, 1.0))
    busy = 1 / (1 + MEASURED_RULES.slowdown(Shape.COMPUTE, Shape.COMPUTE))
    assert expected_rates(MEASURED_RULES, other, idle)[0] > busy
    assert expected_rates(MEASURED_RULES, other, other)[0] == pytest.approx(busy)


def test_the_simulator_declares_its_jobs_load_profiles() -> None:
    agentic = JobSpec("a", "7b", 8, 10, 0.0, prompts=64, response_median=3000,
                      response_sigma=1.5, max_response=32768, env_wait=0.35)  # fmt: skip
    plain = JobSpec("b", "7b", 8, 10, 0.0)
    for spec in (agentic, plain):
        profile = profile_for(spec).load_profile
        assert sum(s.share for s in profile) == pytest.approx(1.0)
        assert profile[0].pressure == pytest.approx(1.0 - spec.env_wait)  # bulk rollout
    rules = MEASURED_AT_ONE

    def as_pod(spec: JobSpec) -> Workload:
        return replace(
            pod(spec.name).job(spec.name).build(),
            memory_mib=profile_for(spec).memory_mib,
            load_profile=profile_for(spec).load_profile,
        )

    # Tool waits make a pair of agentic jobs pay in expectation; busy
    # small-lab-like jobs (tail pressure ~0.97) still do not.
    assert rules.may_share(as_pod(agentic), as_pod(replace(agentic, name="a2")))
    assert not rules.may_share(as_pod(plain), as_pod(replace(plain, name="b2")))
    # They pay by at most 10%, short of the 4/3 that would make them pay their
    # own mean JCT too: by default they do not share.
    assert not MEASURED_RULES.may_share(as_pod(agentic), as_pod(replace(agentic, name="a2")))


# Rule 5 on, scoring takes empty GPUs first and, where it must pair, the
# partner that pays most (docs/simulator.md, "RLix's sharing rules").
_IDLE_HALF = (("rollout", 0.5, 1.0), ("idle", 0.5, 0.0))  # a disaggregated rollout pod


def _resident(name: str, job: str, where: str, *gpus: int, load=_IDLE_HALF):  # type: ignore[no-untyped-def]
    return (
        pod(name)
        .job(job)
        .gpus(len(gpus))
        .memory(rollout=20 * GiB, training=20 * GiB)
        .phase("rollout")
        .load(*load)
        .on(where, *gpus)
    )


def _trainer(name: str = "new", job: str = "new"):  # type: ignore[no-untyped-def]
    # Training beside rollout: the complementary shape the pair terms favour.
    return (
        pod(name)
        .job(job)
        .memory(rollout=20 * GiB, training=20 * GiB)
        .phase("training")
        .load(*_IDLE_HALF)
    )


def test_with_a_matrix_a_pod_takes_an_empty_gpu_before_a_partner() -> None:
    snap = (
        cluster()
        .with_nodes(node("n").gpus(2), node("e").gpus(1), node("p").gpus(1))
        .with_pods(_resident("a-0", "a", "n", 0), _resident("b-0", "b", "p", 0))
        .build()
    )
    newcomer = _trainer().build()
    rules = SharingRules(ASSUMED_CELLS)
    # Within a node: the empty GPU 1, not GPU 0 beside a's rollout.
    assert score_nodes(PlacementView(snap, rules=rules), newcomer, ["n"])["n"].gpus == (1,)
    # Across nodes: the empty node outscores the node that only offers a pair.
    scores = score_nodes(PlacementView(snap, rules=rules), newcomer, ["e", "p"])
    assert scores["e"].score > scores["p"].score
    # The cluster's rules (no matrix) decide as before: the complementary partner.
    assert score_nodes(PlacementView(snap), newcomer, ["n"])["n"].gpus == (0,)
    default = score_nodes(PlacementView(snap), newcomer, ["e", "p"])
    assert default["p"].score > default["e"].score


def test_with_a_matrix_a_pod_that_must_pair_takes_the_partner_that_pays_most() -> None:
    # GPU 0: a partner busy all the time; GPU 1: one idle half its cycle.
    busy = (("rollout", 1.0, 1.0),)
    snap = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(_resident("a-0", "a", "n", 0, load=busy), _resident("b-0", "b", "n", 1))
        .build()
    )
    rules = SharingRules(ASSUMED_CELLS)
    newcomer = _trainer().build()
    mine = newcomer.load_profile
    a, b = snap.on_node("n")
    assert sum(expected_rates(rules, mine, b.load_profile)) > sum(
        expected_rates(rules, mine, a.load_profile)
    )
    assert score_nodes(PlacementView(snap, rules=rules), newcomer, ["n"])["n"].gpus == (1,)
    # Without a matrix the pair terms tie and the lower index wins, as before.
    assert score_nodes(PlacementView(snap), newcomer, ["n"])["n"].gpus == (0,)


def test_with_a_matrix_a_gang_s_next_pod_pairs_with_its_placed_pods_partner() -> None:
    # The gang's pod 0 shares with job a on node x; pod 1 prefers a on node y
    # over b on node z: the gang moves at its slowest GPU.
    placed = _trainer("new-0", "new").on("x", 0).build()
    snap = (
        cluster()
        .with_nodes(node("x").gpus(1), node("y").gpus(1), node("z").gpus(1))
        .with_pods(
            _resident("a-0", "a", "x", 0),
            _resident("a-1", "a", "y", 0),
            _resident("b-0", "b", "z", 0),
            placed,
        )
        .build()
    )
    second = _trainer("new-1", "new").build()
    scores = score_nodes(PlacementView(snap, rules=SharingRules(ASSUMED_CELLS)), second, ["z", "y"])
    assert scores["y"].score > scores["z"].score


def test_with_a_matrix_a_pod_wider_than_any_aligned_set_takes_one_partner_and_empty_gpus() -> None:
    # a on GPUs 0-1, GPUs 2-3 empty: a 4-GPU pod has no aligned set (all empty,
    # or all beside one partner) but one partner on some of its GPUs is still
    # one partner (docs/simulator.md, "Partial sets").
    snap = (
        cluster().with_nodes(node("n").gpus(4)).with_pods(_resident("a-0", "a", "n", 0, 1)).build()
    )
    load = node_load(snap.nodes["n"], snap.on_node("n"))
    rules = SharingRules(ASSUMED_CELLS)
    wide, narrow, three = (_trainer().gpus(n).build() for n in (4, 2, 3))
    assert fit(load, wide, rules).ok
    assert score_nodes(PlacementView(snap, rules=rules), wide, ["n"])["n"].gpus == (0, 1, 2, 3)
    # The partner's GPUs first, so the pod leaves an empty GPU where it can.
    assert score_nodes(PlacementView(snap, rules=rules), three, ["n"])["n"].gpus == (0, 1, 2)
    # An aligned set wide enough wins: the empty GPUs.
    assert score_nodes(PlacementView(snap, rules=rules), narrow, ["n"])["n"].gpus == (2, 3)
    # Without a matrix rule 2 is as before: all empty or all one partner.
    refused = fit(load, wide)
    assert not refused.ok
    assert "one partner job over all of a pod's GPUs" in refused.reason


def test_with_a_matrix_a_pod_never_takes_two_partners() -> None:
    # a on GPU 0, b on GPU 1, GPUs 2-3 empty: three GPUs hold a partner and the
    # empties, never four (that would be two partners, each with its worst moment).
    snap = (
        cluster()
        .with_nodes(node("n").gpus(4))
        .with_pods(_resident("a-0", "a", "n", 0), _resident("b-0", "b", "n", 1))
        .build()
    )
    load = node_load(snap.nodes["n"], snap.on_node("n"))
    rules = SharingRules(ASSUMED_CELLS)
    assert fit(load, _trainer().gpus(3).build(), rules).ok
    refused = fit(load, _trainer().gpus(4).build(), rules)
    assert not refused.ok
    assert "at most 3 of them together (one partner job over a pod's shared GPUs" in refused.reason


def test_two_jobs_are_partners_where_some_pods_of_each_may_share_a_gpu() -> None:
    free = SharingRules(cells_of({a: dict.fromkeys(Shape, 0.0) for a in Shape}))
    roll = pod("r").job("a").memory(60 * GiB).phase("rollout").build()
    train = pod("t").job("b").memory(70 * GiB).phase("training").build()
    big = pod("g").job("c").memory(90 * GiB).phase("training").build()
    mine, theirs = pair_kind([roll, roll]), pair_kind([train])
    assert mine == pair_kind([roll])  # a role's replicas are one entry
    assert kinds_may_pair(free, mine, theirs, gpu_mib=141 * GiB)
    assert not kinds_may_pair(free, mine, theirs, gpu_mib=129 * GiB)  # peaks do not fit
    # Either pod of a job may be the one that fits.
    assert kinds_may_pair(free, pair_kind([big, roll]), theirs, gpu_mib=141 * GiB)
    other_class = pair_kind([replace(train, priority=5)])
    assert not kinds_may_pair(free, mine, other_class, gpu_mib=141 * GiB)  # rule 3
    # Rule 5 under the H200 matrix: two training pods at full pressure pay less than 4/3.
    assert not kinds_may_pair(SharingRules(), theirs, theirs, gpu_mib=141 * GiB)
    # Without a matrix (the cluster's default) nobody is a partner: memory alone
    # would call partners that never pair. Nor with one job per GPU.
    assert not kinds_may_pair(DEFAULT_RULES, mine, theirs, gpu_mib=141 * GiB)
    one = replace(free, max_jobs_per_gpu=1)
    assert not kinds_may_pair(one, mine, theirs, gpu_mib=141 * GiB)


def test_with_a_matrix_a_pod_joins_only_where_both_peaks_fit_the_gpu() -> None:
    # The resident trains at 10 GiB and syncs weights at 10 GiB next, so the
    # filter's reservation (current and next phase) leaves room for a 50 GiB
    # pod; but it rolls out at 50 GiB once per iteration, and 50 + 50 is over
    # the 80 GiB GPU: the pair would overflow it within one iteration (the
    # disaggregated mix's colocated 14B job beside a 32B rollout pod, 1 MiB
    # over an H200, held up to 1.1% of the simulator's open GPU-time so).
    free = SharingRules(cells_of({a: dict.fromkeys(Shape, 0.0) for a in Shape}))
    resident = (
        pod("a-0")
        .job("a")
        .memory(training=10 * GiB, weight_sync=10 * GiB, rollout=50 * GiB)
        .phase("training")
        .on("n", 0)
    )
    snap = cluster().with_nodes(node("n").gpus(1, mib=80 * GiB)).with_pods(resident).build()

    def newcomer(peak_gib: int) -> Workload:
        return pod("new").job("new").memory(rollout=peak_gib * GiB).build()

    matrix = PlacementView(snap, rules=free)
    assert filter_nodes(matrix, newcomer(50), ["n"]).feasible == []
    assert filter_nodes(matrix, newcomer(30), ["n"]).feasible == ["n"]  # 50 + 30 fits
    # The cluster's rules (no matrix) keep phase complementarity: the pod is
    # let in on the reservation, and the conductor parks one of the two if
    # their peaks meet (its rule 3, physical HBM).
    assert filter_nodes(PlacementView(snap), newcomer(50), ["n"]).feasible == ["n"]
    # A parked resident holds no peak on the GPU.
    parked = cluster().with_nodes(node("n").gpus(1, mib=80 * GiB))
    parked = parked.with_pods(resident.suspended()).build()
    assert joinable(free, newcomer(50), parked.workloads, gpu_mib=80 * GiB)


def test_declared_seconds_become_shares_at_full_pressure_and_idle_at_none() -> None:
    assert load_profile_of({}) == ((), 0.0)
    assert load_profile_of({Phase.IDLE: 0}) == ((), 0.0)
    profile, total = load_profile_of({Phase.ROLLOUT: 240, Phase.WEIGHT_SYNC: 0, Phase.IDLE: 120})
    assert total == 360.0
    assert profile == (PhaseLoad(Phase.ROLLOUT, 240 / 360, 1.0), PhaseLoad(Phase.IDLE, 1 / 3, 0.0))
