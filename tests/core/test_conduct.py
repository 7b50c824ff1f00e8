"""The conductor's decisions as scenario tables: snapshot in, actions out."""

from __future__ import annotations

from dataclasses import replace

from rlix.core.policy.admission import GangRequest
from rlix.core.policy.conduct import Action, ConductConfig, JobClock, Kind, decide
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.snapshot import ClusterSnapshot, Workload
from rlix.core.suspension import Reason, Refusal
from tests.builders.placement import cluster, node, pod

POLICY = RLixPolicy()
MIB = 81920


def one_node(*pods: object, gpus: int = 2, overcommit: float = 2.0) -> ClusterSnapshot:
    """One node whose GPUs RLix publishes with headroom for parked memory (at
    ``overcommit`` x physical), where parking can let a waiting job in."""
    gpu_node = node("n1").gpus(gpus, mib=MIB).headroom(overcommit)
    return cluster().with_nodes(gpu_node).with_pods(*pods).build()  # type: ignore[arg-type]


def waiting(job: str, priority: int, *pods: Workload) -> GangRequest:
    return GangRequest(f"default/{job}", priority, 0.0, tuple(pods))


def kinds(actions: tuple[Action, ...]) -> list[tuple[str, str, str]]:
    return [(a.kind.value, a.job, str(a.reason)) for a in actions]


def rollout(name: str, job: str, *, priority: int = 0, gpu: int = 0, mib: int = 60000) -> Workload:
    return (
        pod(name)
        .job(job)
        .role("rollout")
        .memory(mib)
        .phase("rollout")
        .priority(priority)
        .on("n1", gpu)
        .build()
    )


def training(name: str, job: str, *, priority: int, mib: int) -> Workload:
    """A job's trainer on GPU 0 of n1, in its training phase."""
    return (
        pod(name).job(job).role("trainer").memory(mib).phase("training")
        .priority(priority).on("n1", 0).build()
    )  # fmt: skip


def parked(name: str, job: str, *, priority: int = 1, mib: int) -> Workload:
    """A rollout on GPU 0 of n1, parked in place."""
    return replace(rollout(name, job, priority=priority, mib=mib), suspended=True)


def test_a_higher_priority_job_parks_the_least_harm_preemptible_rollout() -> None:
    low = rollout("low-0", "low", priority=1, gpu=0)
    other = replace(rollout("mid-0", "mid", priority=5, gpu=1), role="trainer", phase=None)
    snap = one_node(low, other)
    high = pod("high-0").job("high").memory(70000).priority(10).build()
    actions = decide(snap, [waiting("high", 10, high)], POLICY, clocks={}, now=0.0)
    assert kinds(actions) == [("suspend", "default/low", "Priority")]
    assert actions[0].pods == ("default/low-0",)
    assert actions[0].requester == "default/high"


def test_never_a_non_preemptible_pod_and_never_half_a_gang() -> None:
    pinned = replace(rollout("pin-0", "pin", priority=2, gpu=0), preemptible=False)
    gang = [
        replace(rollout(f"g-{i}", "g", priority=1, gpu=1, mib=30000), gang_size=2) for i in range(2)
    ]
    gang[1] = replace(gang[1], node="n2")  # the other half lives on another node
    snap = (
        cluster()
        .with_nodes(node("n1").gpus(2, mib=MIB), node("n2").gpus(1, mib=MIB))
        .with_pods(pinned, *gang)
        .build()
    )
    high = pod("high-0").job("high").memory(70000).priority(10).build()
    actions = decide(snap, [waiting("high", 10, high)], POLICY, clocks={}, now=0.0)
    # n1's GPU 0 is pinned, its GPU 1 holds half a gang whose other half is on
    # n2: nothing may be parked, so the high-priority job waits.
    assert actions == ()
    whole = decide(
        one_node(pinned, gang[0], replace(gang[1], node="n1")),
        [waiting("high", 10, high)],
        POLICY,
        clocks={},
        now=0.0,
    )
    assert kinds(whole) == [("suspend", "default/g", "Priority")]
    assert whole[0].pods == ("default/g-0", "default/g-1"), "the whole gang"


def test_a_fitting_job_parks_nobody() -> None:
    snap = one_node(rollout("low-0", "low", priority=1, gpu=0))
    high = pod("high-0").job("high").memory(10000).priority(10).build()
    assert decide(snap, [waiting("high", 10, high)], POLICY, clocks={}, now=0.0) == ()


def test_a_co_residents_phase_over_physical_hbm_parks_the_lower_priority_one() -> None:
    low = rollout("low-0", "low", priority=1, mib=40000)
    trainer = (
        pod("hi-0").job("hi").role("trainer").memory(training=50000, rollout=10000)
        .phase("training").priority(5).on("n1", 0).build()
    )  # fmt: skip
    actions = decide(one_node(low, trainer), [], POLICY, clocks={}, now=0.0)
    assert kinds(actions) == [("suspend", "default/low", "PhaseOverflow")]
    assert actions[0].requester == "default/hi"


def test_overflow_with_nothing_parkable_is_said() -> None:
    low = replace(rollout("low-0", "low", priority=1, mib=40000), preemptible=False)
    trainer = training("hi-0", "hi", priority=5, mib=50000)
    actions = decide(one_node(low, trainer), [], POLICY, clocks={}, now=0.0)
    assert [a.kind for a in actions] == [Kind.UNRESOLVED]
    assert actions[0].reason is Refusal.NOTHING_ELSE_WORKS
    assert "GPU 0 of n1" in actions[0].message


def test_a_parked_job_resumes_once_its_memory_fits_and_not_before() -> None:
    low = parked("low-0", "low", mib=40000)
    busy = training("mate-0", "mate", priority=1, mib=50000)
    clocks = {"default/low": JobClock(suspended_at=0.0)}
    assert decide(one_node(low, busy), [], POLICY, clocks=clocks, now=10.0) == ()
    calm = replace(busy, phase=None, memory_mib={k: 20000 for k in busy.memory_mib})
    actions = decide(one_node(low, calm), [], POLICY, clocks=clocks, now=10.0)
    assert kinds(actions) == [("resume", "default/low", "MemoryFree")]


def test_a_parked_job_waits_for_a_higher_class_beside_it_to_leave() -> None:
    """Memory alone would bring it back under the job admitted beside its
    parked memory, slowing that job (sharing rule 3: one class per GPU)."""
    low = parked("low-0", "low", mib=40000)
    high = training("hi-0", "hi", priority=5, mib=20000)
    clocks = {"default/low": JobClock(suspended_at=0.0)}
    assert decide(one_node(low, high), [], POLICY, clocks=clocks, now=10.0) == ()
    actions = decide(one_node(low), [], POLICY, clocks=clocks, now=10.0)
    assert kinds(actions) == [("resume", "default/low", "MemoryFree")]


def test_a_sized_park_holds_while_the_parked_memory_still_reads_on_its_gpu() -> None:
    """A sized job parks a far larger one of its own class; on the next pass,
    while the agent's measurement still reads the parked memory on its GPU,
    nobody else is parked for it and the victim does not come back (it came
    back in the e2e flake of the sized conductor test, 2026-12-06, on whole
    GPUs, where nobody is parked for a waiting job any more)."""
    trainer = replace(training("long-t", "long", priority=0, mib=60000), work_left=720000.0)
    running = replace(rollout("long-r", "long", gpu=1), preemptible=True, work_left=720000.0)
    small = pod("short-0").job("short").memory(70000).work_left(360.0).build()
    short = GangRequest("default/short", 0, 0.0, (small,), work_left=360.0)
    assert kinds(decide(one_node(trainer, running), [short], POLICY, clocks={}, now=0.0)) == [
        ("suspend", "default/long", "Priority")
    ]
    # GPU 2 holds another far larger job of the class, which short could displace
    # too: without the reservation it would be parked as well, for nothing.
    other = replace(rollout("other-r", "other", gpu=2), work_left=720000.0)
    stale = node("n1").gpus(3, mib=MIB).headroom(2.0).used(60000, 60000, 60000)
    pods = (trainer, replace(running, suspended=True), other)
    was_parked = cluster().with_nodes(stale).with_pods(*pods).build()
    clocks = {"default/long": JobClock(suspended_at=0.0)}
    assert decide(was_parked, [short], POLICY, clocks=clocks, now=5.0) == ()
    # Gone, the waiter leaves it nothing to wait for.
    caught_up = cluster().with_nodes(stale.used(60000, 0, 60000)).with_pods(*pods).build()
    assert kinds(decide(caught_up, [], POLICY, clocks=clocks, now=5.0)) == [
        ("resume", "default/long", "MemoryFree")
    ]


def test_a_parked_job_does_not_come_back_as_a_third_job_on_its_gpu() -> None:
    c = parked("c-0", "c", mib=20000)
    a = rollout("a-0", "a", priority=1, mib=20000)
    b = rollout("b-0", "b", priority=1, mib=20000)
    clocks = {"default/c": JobClock(suspended_at=0.0)}
    # 60000 of 81920 MiB: memory alone would let it in, as a third job.
    assert decide(one_node(c, a, b), [], POLICY, clocks=clocks, now=10.0) == ()
    actions = decide(one_node(c, a), [], POLICY, clocks=clocks, now=10.0)
    assert kinds(actions) == [("resume", "default/c", "MemoryFree")]


def test_a_job_parked_by_a_person_is_never_resumed_by_the_policy() -> None:
    low = parked("low-0", "low", mib=40000)
    clocks = {"default/low": JobClock(suspended_at=0.0)}
    actions = decide(
        one_node(low), [], POLICY, clocks=clocks, now=1e6, held=frozenset({"default/low"})
    )
    assert actions == ()


def test_bounded_suspension_an_aged_job_parks_lower_priority_work_to_come_back() -> None:
    old = parked("old-0", "old", mib=60000)
    newer = rollout("new-0", "new", priority=3, mib=60000)
    config = ConductConfig(max_suspended_s=100.0, aging_boost=1000, min_run_s=0.0)
    clocks = {"default/old": JobClock(suspended_at=0.0)}
    young = decide(one_node(old, newer), [], POLICY, clocks=clocks, now=50.0, config=config)
    assert young == (), "within the bound it waits"
    aged = decide(one_node(old, newer), [], POLICY, clocks=clocks, now=150.0, config=config)
    assert kinds(aged) == [("suspend", "default/new", "Aged"), ("resume", "default/old", "Aged")]


def test_a_job_just_resumed_is_no_victim_yet() -> None:
    low = rollout("low-0", "low", priority=1, gpu=0)
    snap = one_node(low, gpus=1)
    high = pod("high-0").job("high").memory(70000).priority(10).build()
    clocks = {"default/low": JobClock(resumed_at=95.0)}
    config = ConductConfig(min_run_s=10.0)
    request = [waiting("high", 10, high)]
    assert decide(snap, request, POLICY, clocks=clocks, now=100.0, config=config) == ()
    later = decide(snap, request, POLICY, clocks=clocks, now=200.0, config=config)
    assert kinds(later) == [("suspend", "default/low", str(Reason.PRIORITY))]


def test_only_the_preemptible_pods_of_a_victim_job_are_parked_and_kept_parked() -> None:
    # One gang (as the operator labels every job): its rollout is parked in
    # place, its protected trainer stays.
    roll = replace(rollout("low-roll-0", "low", priority=1, gpu=0), gang_size=2)
    trainer = replace(
        rollout("low-train-0", "low", priority=1, gpu=1, mib=20000),
        role="trainer",
        preemptible=False,
        gang_size=2,
    )
    snap = one_node(roll, trainer)
    high = pod("high-0").job("high").memory(70000).priority(10).build()
    request = [waiting("high", 10, high)]
    actions = decide(snap, request, POLICY, clocks={}, now=0.0)
    assert kinds(actions) == [("suspend", "default/low", "Priority")]
    assert actions[0].pods == ("default/low-roll-0",), "the trainer is never parked"
    # Next pass, the high job still waits (no headroom published yet): its
    # victim's parked memory stays reserved for it; nothing is resumed.
    parked = one_node(replace(roll, suspended=True), trainer)
    clocks = {"default/low": JobClock(suspended_at=0.0)}
    assert decide(parked, request, POLICY, clocks=clocks, now=5.0) == ()
    # Once it is gone (admitted elsewhere, or withdrawn) the rollout comes back.
    back = decide(parked, [], POLICY, clocks=clocks, now=6.0)
    assert kinds(back) == [("resume", "default/low", "MemoryFree")]


def test_a_lower_priority_non_preemptible_neighbour_does_not_hide_a_parking() -> None:
    # Six GPUs of non-preemptible work, a trainer and a preemptible rollout:
    # the rollout is parked, though the neighbour's name sorts first.
    big = replace(
        rollout("a-big-0", "a-big", priority=0, mib=60000),
        gpus=6,
        gpu_indices=tuple(range(6)),
        preemptible=False,
    )
    trainer = replace(rollout("low-t-0", "low", priority=0, gpu=6), preemptible=False)
    gen = rollout("low-gen-0", "low", priority=0, gpu=7)
    snap = one_node(big, trainer, gen, gpus=8)
    high = pod("high-0").job("high").memory(70000).priority(10).build()
    actions = decide(snap, [waiting("high", 10, high)], POLICY, clocks={}, now=0.0)
    assert kinds(actions) == [("suspend", "default/low", "Priority")]
    assert actions[0].pods == ("default/low-gen-0",)
