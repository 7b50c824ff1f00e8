"""Elastic rollout: the conductor lends replicas above a job's minimum, and only those."""

from __future__ import annotations

from dataclasses import replace

from rlix.core.policy.admission import GangRequest
from rlix.core.policy.conduct import Action, ElasticRollout, JobClock, decide
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.snapshot import ClusterSnapshot, Workload
from tests.builders.placement import cluster, node, pod

POLICY = RLixPolicy()
MIB = 81920
ELASTIC = {"default/el": ElasticRollout(role="rollout", min_replicas=1)}


def elastic_job(*, replicas: int = 3, priority: int = 1, node_name: str = "n1") -> list[Workload]:
    """A trainer on GPU 0 (not preemptible) and ``replicas`` rollout replicas on GPUs 1.."""
    trainer = (
        pod("el-policy-0").job("el").role("policy").memory(60000).phase("training")
        .priority(priority).preemptible(False).on(node_name, 0).build()
    )  # fmt: skip
    replicas_ = [
        pod(f"el-rollout-{i}").job("el").role("rollout").memory(60000).phase("rollout")
        .priority(priority).on(node_name, i + 1).build()
        for i in range(replicas)
    ]  # fmt: skip
    return [trainer, *replicas_]


def snapshot(*pods: Workload, gpus: int = 4, overcommit: float = 2.0) -> ClusterSnapshot:
    """One node with headroom for parked memory, where a lent replica makes room."""
    gpu_node = node("n1").gpus(gpus, mib=MIB).headroom(overcommit)
    return cluster().with_nodes(gpu_node).with_pods(*pods).build()


def high(gpus: int = 1, priority: int = 10) -> GangRequest:
    pods = tuple(
        pod(f"high-{i}").job("high").memory(70000).priority(priority).build() for i in range(gpus)
    )
    return GangRequest("default/high", priority, 0.0, pods)


def summary(actions: tuple[Action, ...]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    return [(a.kind.value, a.job, str(a.reason), a.pods) for a in actions]


def test_a_waiting_job_borrows_the_elastic_tail_and_nothing_more() -> None:
    actions = decide(
        snapshot(*elastic_job()), [high()], POLICY, clocks={}, now=0.0, elastic=ELASTIC
    )
    assert summary(actions) == [("suspend", "default/el", "Lend", ("default/el-rollout-2",))]
    assert actions[0].requester == "default/high"


def test_where_lent_memory_stays_counted_nothing_is_lent() -> None:
    """At 1x a lent replica's GPU stays counted: nothing is lent, nobody parked."""
    actions = decide(
        snapshot(*elastic_job(), overcommit=1.0), [high()], POLICY, clocks={}, now=0.0,
        elastic=ELASTIC,
    )  # fmt: skip
    assert summary(actions) == [("unresolved", "", "ParkingFreesNothing", ())]


def test_lending_takes_the_tail_first_and_never_below_the_minimum() -> None:
    two = decide(snapshot(*elastic_job()), [high(2)], POLICY, clocks={}, now=0.0, elastic=ELASTIC)
    assert summary(two) == [
        ("suspend", "default/el", "Lend", ("default/el-rollout-1", "default/el-rollout-2"))
    ]
    # Three GPUs would leave no replica: lending cannot do it, so the whole
    # preemptible unit is parked for priority (the rule every job has).
    three = decide(snapshot(*elastic_job()), [high(3)], POLICY, clocks={}, now=0.0, elastic=ELASTIC)
    assert [(a.job, str(a.reason)) for a in three] == [("default/el", "Priority")]
    assert len(three[0].pods) == 3
    # A minimum of 3 leaves nothing to lend.
    strict = {"default/el": ElasticRollout(role="rollout", min_replicas=3)}
    actions = decide(snapshot(*elastic_job()), [high()], POLICY, clocks={}, now=0.0, elastic=strict)
    assert [str(a.reason) for a in actions] == ["Priority"]


def test_a_replica_already_lent_counts_against_the_minimum() -> None:
    pods = elastic_job()
    pods[3] = replace(pods[3], suspended=True)  # el-rollout-2 is lent already
    busy = pod("other-0").job("other").memory(60000).priority(20).preemptible(False).on("n1", 3)
    # GPU 3 now holds another job's pod (the one el-rollout-2 was lent to):
    # one more GPU may still come from el (replica 1), never replica 0.
    snap = snapshot(*pods[:3], busy.build())
    actions = decide(snap, [high()], POLICY, clocks={}, now=0.0, elastic=ELASTIC)
    assert summary(actions) == [("suspend", "default/el", "Lend", ("default/el-rollout-1",))]


def test_no_lending_to_an_equal_or_lower_priority_nor_without_the_declaration() -> None:
    pods = elastic_job(priority=10)
    assert decide(snapshot(*pods), [high()], POLICY, clocks={}, now=0.0, elastic=ELASTIC) == ()
    plain = decide(snapshot(*elastic_job()), [high()], POLICY, clocks={}, now=0.0)
    assert [str(a.reason) for a in plain] == ["Priority"], "not elastic: the whole unit"


def test_a_job_just_resumed_lends_nothing_yet() -> None:
    clocks = {"default/el": JobClock(resumed_at=100.0)}
    actions = decide(
        snapshot(*elastic_job()), [high()], POLICY, clocks=clocks, now=110.0, elastic=ELASTIC
    )
    assert actions == ()


def test_lent_memory_stays_reserved_while_the_borrower_waits_and_comes_back_after() -> None:
    pods = elastic_job()
    pods[3] = replace(pods[3], suspended=True)  # lent by an earlier pass
    clocks = {"default/el": JobClock(suspended_at=0.0)}
    again = decide(snapshot(*pods), [high()], POLICY, clocks=clocks, now=5.0, elastic=ELASTIC)
    assert again == (), "the borrower is admitted into the lent memory: nothing more is lent"
    gone = decide(snapshot(*pods), [], POLICY, clocks=clocks, now=6.0, elastic=ELASTIC)
    assert summary(gone) == [("resume", "default/el", "MemoryFree", ("default/el-rollout-2",))]


def test_a_tail_the_borrower_cannot_use_is_given_back() -> None:
    """The lowest-priority lender's tail is on GPUs too small for the borrower."""
    small = (
        pod("lo-rollout-1").job("lo").role("rollout").memory(30000).phase("rollout")
        .priority(0).on("n2", 0).build()
    )  # fmt: skip
    keep = replace(small, name="default/lo-rollout-0", gpu_indices=(1,))
    snap = (
        cluster()
        .with_nodes(node("n1").gpus(4, mib=MIB).headroom(2.0), node("n2").gpus(2, mib=40000))
        .with_pods(*elastic_job(), small, keep)
        .build()
    )
    elastic = {**ELASTIC, "default/lo": ElasticRollout(role="rollout", min_replicas=1)}
    actions = decide(snap, [high()], POLICY, clocks={}, now=0.0, elastic=elastic)
    assert summary(actions) == [("suspend", "default/el", "Lend", ("default/el-rollout-2",))], (
        "lo's tail was tried first (lowest priority) and given back: it frees nothing usable"
    )
