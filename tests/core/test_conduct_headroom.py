"""Published headroom: a waiting job is admitted into memory parked for it.

One GPU of 81920 MiB on a gpu-claims node. With the memory published at 1.5x
(122880 MiB, what the claims may sum to) a low-priority rollout of 60000 MiB
is parked for a 50000 MiB higher-priority job, which is then admitted next to
the parked memory (110000 <= 122880) while what is resident stays within the
physical 81920; the rollout comes back when the job is gone. At 1x, parked
memory is owed as before and the job is not admitted into it.
"""

from __future__ import annotations

from dataclasses import replace

from rlix.core.policy.admission import GangRequest, place_gang
from rlix.core.policy.conduct import JobClock, Kind, decide
from rlix.core.policy.placement.loads import GPULoad, holdable_without, node_load, without
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.snapshot import GPU, ClusterSnapshot, Node, Workload
from rlix.core.suspension import Reason, Refusal
from tests.builders.placement import cluster, node, pod

POLICY = RLixPolicy()
MIB = 81920


def snapshot(*pods: Workload, overcommit: float) -> ClusterSnapshot:
    gpu_node = replace(
        node("n1").gpus(1, mib=MIB).build(), claims=True, memory_overcommit=overcommit
    )
    return cluster().with_nodes(gpu_node).with_pods(*pods).build()


LOW = (
    pod("low-0").job("low").role("rollout").memory(60000).phase("rollout").priority(1)
    .on("n1", 0).build()
)  # fmt: skip
HIGH = pod("high-0").job("high").role("trainer").memory(50000).priority(10).build()
WAITING = GangRequest("default/high", 10, 0.0, (HIGH,))
PARKED = replace(LOW, suspended=True)


def admitted(snap: ClusterSnapshot) -> bool:
    admission, _ = place_gang(snap, WAITING, POLICY)
    return admission.admitted


def test_resident_memory_keeps_the_job_out_whatever_is_published() -> None:
    assert not admitted(snapshot(LOW, overcommit=1.5))
    actions = decide(snapshot(LOW, overcommit=1.5), [WAITING], POLICY, clocks={}, now=0.0)
    assert [(a.kind, a.job, a.reason) for a in actions] == [
        (Kind.SUSPEND, "default/low", Reason.PRIORITY)
    ]


def test_where_parked_memory_stays_counted_nobody_is_parked_and_the_waiter_is_told() -> None:
    """At 1x (or on whole GPUs) parking ``low`` would cost it its progress and
    let nobody in; also when the parked memory would overrun what is published
    (60000 + 70000 > 122880 at 1.5x)."""
    bigger = GangRequest("default/high", 10, 0.0, (replace(HIGH, memory_mib={
        k: 70000 for k in HIGH.memory_mib}),))  # fmt: skip
    whole = snapshot(LOW, overcommit=1.5)
    whole = replace(whole, nodes={"n1": replace(whole.nodes["n1"], claims=False)})
    for snap, request, why in (
        (snapshot(LOW, overcommit=1.0), WAITING, "on n1 a parked pod's GPU memory stays"),
        (whole, WAITING, "--memory-overcommit"),
        (snapshot(LOW, overcommit=1.5), bigger, "published for parked memory (n1 1.5x)"),
    ):
        (action,) = decide(snap, [request], POLICY, clocks={}, now=0.0)
        assert (action.kind, action.job, action.pods) == (Kind.UNRESOLVED, "", ())
        assert (action.reason, action.requester) == (Refusal.FREES_NOTHING, "default/high")
        assert "parking default/low would not let default/high in: " in action.message
        assert why in action.message, action.message


def test_where_parked_memory_stays_counted_it_is_not_kept_for_a_waiting_job() -> None:
    """At 1x a job parked by another rule (here by hand, not held) comes back
    when its memory fits, whoever waits: the scheduler counts its claim, so
    no waiting job could be admitted into the memory it would keep."""
    clocks = {"default/low": JobClock(suspended_at=0.0)}
    actions = decide(snapshot(PARKED, overcommit=1.0), [WAITING], POLICY, clocks=clocks, now=5)
    assert [(a.kind, a.job, a.reason) for a in actions] == [
        (Kind.RESUME, "default/low", Reason.MEMORY_FREE)
    ]


def test_parked_memory_takes_headroom_only_where_it_is_published() -> None:
    assert admitted(snapshot(PARKED, overcommit=1.5))
    assert not admitted(snapshot(PARKED, overcommit=1.0)), "at 1x parked memory is owed"
    # The claims must still sum within the published memory: 60000 + 70000 > 122880.
    bigger = GangRequest("default/high", 10, 0.0, (replace(HIGH, memory_mib={
        k: 70000 for k in HIGH.memory_mib}),))  # fmt: skip
    admission, _ = place_gang(snapshot(PARKED, overcommit=1.5), bigger, POLICY)
    assert not admission.admitted


def test_the_load_keeps_parked_memory_apart_from_what_is_resident() -> None:
    snap = snapshot(PARKED, overcommit=1.5)
    (gpu,) = node_load(snap.nodes["n1"], snap.on_node("n1")).gpus
    assert (gpu.owed_mib, gpu.parked_mib, gpu.headroom_mib) == (0, 60000, 40960)
    flat = snapshot(PARKED, overcommit=1.0)
    (gpu,) = node_load(flat.nodes["n1"], flat.on_node("n1")).gpus
    assert (gpu.owed_mib, gpu.parked_mib, gpu.headroom_mib) == (60000, 0, 0)


def test_the_parked_rollout_waits_while_the_job_runs_and_comes_back_after() -> None:
    clocks = {"default/low": JobClock(suspended_at=0.0)}
    # Admitted, not yet bound: the parked memory is reserved for it.
    assert decide(snapshot(PARKED, overcommit=1.5), [WAITING], POLICY, clocks=clocks, now=5) == ()
    running = replace(HIGH, node="n1", gpu_indices=(0,), phase=None)
    snap = snapshot(PARKED, running, overcommit=1.5)
    assert decide(snap, [], POLICY, clocks=clocks, now=10.0) == (), "60000 + 50000 > 81920"
    actions = decide(snapshot(PARKED, overcommit=1.5), [], POLICY, clocks=clocks, now=20.0)
    assert [(a.kind, a.job, a.reason) for a in actions] == [
        (Kind.RESUME, "default/low", Reason.MEMORY_FREE)
    ]


def measured(snap: ClusterSnapshot, used_mib: int) -> ClusterSnapshot:
    """``snap`` with n1's agent reporting ``used_mib`` in use on its GPU."""
    n1 = snap.nodes["n1"]
    gpus = (GPU(index=0, memory_mib=MIB, used_mib=used_mib),)
    return replace(snap, nodes={"n1": replace(n1, gpus=gpus)})


def test_a_live_agents_measurement_of_the_victim_does_not_keep_its_memory_taken() -> None:
    # The agent measures the running rollout's 60000 MiB; parking it takes that
    # off the GPU, so the trial must not keep it as unexplained use (the demo's
    # urgent job waited, parking nothing, until this was so).
    snap = measured(snapshot(LOW, overcommit=1.5), 60000)
    actions = decide(snap, [WAITING], POLICY, clocks={}, now=0.0)
    assert [(a.kind, a.job, a.reason) for a in actions] == [
        (Kind.SUSPEND, "default/low", Reason.PRIORITY)
    ]
    # Memory nobody known explains stays taken: 60000 of it unexplained leaves
    # no room for the 50000 MiB job whatever is parked.
    other = measured(snapshot(LOW, overcommit=1.5), 120000)
    assert decide(other, [WAITING], POLICY, clocks={}, now=0.0) == ()


def test_trials_take_leaving_and_parked_memory_off_the_measurement() -> None:
    snap = measured(snapshot(LOW, overcommit=1.5), 65000)
    for trial in (snap.without([LOW.name]), snap.parking([LOW.name])):
        assert trial.nodes["n1"].gpus[0].used_mib == 5000
    assert snap.parking([LOW.name]).on_node("n1")[0].suspended
    # Already parked: its memory is not on the GPU, nothing comes off.
    parked = measured(snapshot(PARKED, overcommit=1.5), 5000)
    assert parked.without([LOW.name]).nodes["n1"].gpus[0].used_mib == 5000


def test_a_pod_read_as_parked_before_its_gpu_reads_freed_is_not_resumed() -> None:
    # The agent republishes its GPU and marks the pod parked; the operator may
    # see the pod first (two watches). Resumed then, the rollout would take
    # back the room it was parked to make: placement, which takes the
    # measurement as a floor, finds none for the waiter, and no victim is
    # left to name.
    clocks = {"default/low": JobClock(suspended_at=0.0)}
    for overcommit in (1.0, 1.5):
        stale = measured(snapshot(PARKED, overcommit=overcommit), 60000)
        assert decide(stale, [WAITING], POLICY, clocks=clocks, now=5.0) == ()
        assert decide(stale, [], POLICY, clocks=clocks, now=5.0) == ()
        # Once the GPU reads freed, it comes back where nothing waits for it.
        fresh = measured(snapshot(PARKED, overcommit=overcommit), 0)
        actions = decide(fresh, [], POLICY, clocks=clocks, now=5.0)
        assert [(a.kind, a.job, a.reason) for a in actions] == [
            (Kind.RESUME, "default/low", Reason.MEMORY_FREE)
        ]
    # Memory used outside any known pod keeps it parked too.
    other = measured(snapshot(PARKED, overcommit=1.5), 30000)
    assert decide(other, [], POLICY, clocks=clocks, now=5.0) == ()


# A trainer parked in scoring owes 24000 MiB there, but its claim keeps its
# peak, 44000 (the chaos run's rlix-gpu-3/2: 44000 + 36000 + 44000 claimed of
# 122880 published, bench/results/chaos.md).
TRAINER = {"scoring": 24000, "training": 44000, "weight-sync": 16000}
PARKED_TRAINER = (
    pod("low-0").job("low").role("trainer").memory(**TRAINER).phase("scoring").priority(1)
    .on("n1", 0).suspended().build()
)  # fmt: skip
ROLLOUT = pod("mid-0").job("mid").role("rollout").memory(36000).phase("rollout").on("n1", 0)


def gpu_of(snap: ClusterSnapshot) -> GPULoad:
    (gpu,) = node_load(snap.nodes["n1"], snap.on_node("n1")).gpus
    return gpu


def test_a_parked_pods_claim_keeps_its_peak_from_the_published_memory() -> None:
    gpu = gpu_of(snapshot(PARKED_TRAINER, ROLLOUT.build(), overcommit=1.5))
    assert (gpu.owed_mib, gpu.parked_mib, gpu.claimed_mib) == (36000, 24000, 80000)
    # 36000 resident + 44000 fits physical memory, and 36000 + 24000 + 44000
    # fits the published; the claims (80000 + 44000 > 122880) do not.
    assert not gpu.can_hold(44000)
    assert gpu.can_hold(42000), "80000 + 42000 <= 122880"
    # Without the parked trainer (a preemption trial), its claim goes too.
    load = node_load(*_n1(snapshot(PARKED_TRAINER, ROLLOUT.build(), overcommit=1.5)))
    assert holdable_without(load, {PARKED_TRAINER.name}, 44000) == 1
    assert without(load, {PARKED_TRAINER.name}).gpus[0].claimed_mib == 36000


def _n1(snap: ClusterSnapshot) -> tuple[Node, list[Workload]]:
    return snap.nodes["n1"], list(snap.on_node("n1"))


def test_a_running_pods_claim_is_its_peak_not_what_its_phases_owe_now() -> None:
    # In rollout (next scoring) it owes 10000; its claim holds its 50000 peak.
    light = {"rollout": 10000, "scoring": 10000, "training": 50000, "weight-sync": 10000}
    running = pod("low-0").job("low").memory(**light).phase("rollout").on("n1", 0).build()
    gpu = gpu_of(snapshot(running, overcommit=1.0))
    assert (gpu.owed_mib, gpu.claimed_mib) == (10000, 50000)
    assert not gpu.can_hold(40000), "50000 + 40000 > 81920"
    assert gpu.can_hold(30000)
    # Whole nvidia.com/gpu nodes hold no claims: what the phases owe decides.
    plain = cluster().with_nodes(node("n1").gpus(1, mib=MIB)).with_pods(running).build()
    gpu = gpu_of(plain)
    assert gpu.claimed_mib is None and gpu.can_hold(40000)
