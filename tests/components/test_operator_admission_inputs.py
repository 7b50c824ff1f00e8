"""What the operator feeds the admission policy: snapshot, gang requests, queue order."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from rlix.core import names
from rlix.core.phases import Shape
from rlix.core.policy.admission import admit, queue_order
from rlix.core.policy.ordering import DEFAULT_GRACE, STRICT, TOP_GRACE, Grace
from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules, cells_of
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.rljob import RLJob
from rlix.core.snapshot import Node
from rlix.operator.pods import (
    ANNOTATION_ADMITTED_NODE,
    build_pod,
    desired_pod_names,
    planned_workloads,
)
from rlix.operator.queueing import RLixAdmission, Size, gang_request, sizes
from rlix.operator.snapshots import build_snapshot, node_from_body
from rlix.operator.store import Store


def node(name: str, gpus: int = 8, mib: int = 81920, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": {
                names.NODE_LABEL_GPU_MEMORY_MIB: str(mib),
                names.NODE_LABEL_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3",
            },
        },
        "spec": spec,
        "status": {"allocatable": {names.GPU_RESOURCE: str(gpus)}},
    }


def job(name: str, *, gpus: int, replicas: int = 1, priority: int = 0, created: str = "") -> RLJob:
    return RLJob.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "creationTimestamp": created or "2026-01-01T00:00:00Z",
            },
            "spec": {
                "priority": priority,
                "roles": [
                    {
                        "name": "t",
                        "kind": "trainer",
                        "replicas": replicas,
                        "gpusPerReplica": gpus,
                        "image": "x",
                        "gpuMemoryMiB": {"training": 70000},
                    }
                ],
            },
        }
    )


def test_node_body_becomes_a_snapshot_node() -> None:
    assert node_from_body(node("a")) == Node(
        "a",
        gpu_count=8,
        gpu_memory_mib=81920,
        product="NVIDIA-H100-80GB-HBM3",
        # Kept for admission's nodeSelector check (the plan is pinned).
        labels=(
            ("nvidia.com/gpu.memory", "81920"),
            ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
        ),
    )
    assert not node_from_body(node("b", unschedulable=True)).schedulable


def test_unbound_pod_counts_at_its_admitted_node_and_finished_pods_free_gpus() -> None:
    j = job("a", gpus=8)
    (name, (role, index)), *_ = desired_pod_names(j).items()
    pod = build_pod(j, role, index, owner_uid="u", admitted_node="n1")
    done = build_pod(j, role, index, owner_uid="u") | {"status": {"phase": "Succeeded"}}
    snapshot = build_snapshot([node("n1")], [pod, done])
    (workload,) = snapshot.workloads
    assert workload.node == "n1" and workload.gpus == 8
    assert pod["metadata"]["annotations"][ANNOTATION_ADMITTED_NODE] == "n1"
    assert name == "a-t-0"


def test_a_pod_counts_once_at_its_admitted_node_until_bound_then_at_its_bound_node() -> None:
    """Ledger twin, unbound pod, bound pod: never two of them, never two nodes."""
    j = job("a", gpus=8)
    (planned,) = planned_workloads(j)
    twin = replace(planned, node="n1", gpu_indices=tuple(range(8)))
    (_, (role, index)), *_ = desired_pod_names(j).items()
    pod = build_pod(j, role, index, owner_uid="u", admitted_node="n1")
    nodes = [node("n1"), node("n2")]

    def where(pods: list[dict[str, Any]]) -> list[str | None]:
        return [w.node for w in build_snapshot(nodes, pods, [twin]).workloads]

    assert where([]) == ["n1"]  # only the ledger says so
    assert where([pod]) == ["n1"]  # created, not bound: its admitted node
    bound = pod | {"spec": {**pod["spec"], "nodeName": "n1"}}
    assert where([bound]) == ["n1"]
    # Bound (by anything) elsewhere: counted where it is, and nowhere else.
    off = pod | {"spec": {**pod["spec"], "nodeName": "n2"}}
    assert where([off]) == ["n2"]


def test_gang_requests_order_by_priority_then_arrival() -> None:
    early = gang_request(job("early", gpus=1, created="2026-01-01T00:00:00Z"))
    late = gang_request(job("late", gpus=1, created="2026-01-01T00:00:05Z"))
    urgent = gang_request(job("urgent", gpus=1, priority=9, created="2026-01-01T00:01:00Z"))
    assert [r.job for r in queue_order([late, urgent, early])] == [
        "ns/urgent",
        "ns/early",
        "ns/late",
    ]


def sized(name: str, planned: int, created: str, **status: Any) -> RLJob:
    body = job(name, gpus=4, created=created).model_dump(by_alias=True, exclude_none=True)
    body["spec"] |= {"iterations": planned, "phaseProfile": {"rollout": 50, "training": 10}}
    body["status"] = status
    return RLJob.model_validate(body)


def test_inside_a_priority_a_planned_job_is_sized_and_the_smaller_goes_first() -> None:
    long = gang_request(sized("long", 1000, "2026-01-01T00:00:00Z"))
    short = gang_request(sized("short", 10, "2026-01-01T00:00:05Z"))
    plain = gang_request(job("plain", gpus=1, created="2026-01-01T00:00:09Z"))
    # GPUs x iterations x the profile's 60 s per iteration.
    assert long.work_left == 4 * 1000 * 60 and short.work_left == 4 * 10 * 60
    assert plain.work_left == 0.0
    # Unsized first (declaring a size delays nobody who did not), then smallest.
    assert [r.job for r in queue_order([long, short, plain])] == [
        "ns/plain",
        "ns/short",
        "ns/long",
    ]
    # Measured: 990 done in 990 x 20 s of working phases (idle not counted),
    # so 10 left at 20 s: smaller than "short" (10 left at 60 s) now.
    seconds = {"rollout": 16800.0, "training": 3000.0, "idle": 99999.0}
    ran = gang_request(
        sized("long", 1000, "2026-01-01T00:00:00Z", iterations=990, phaseSeconds=seconds)
    )
    assert ran.work_left == 4 * 10 * 20
    assert [r.job for r in queue_order([short, ran])] == ["ns/long", "ns/short"]


def test_the_job_that_would_set_the_finish_goes_first_and_reports_no_size() -> None:
    long, short = (
        sized("long", 1000, "2026-01-01T00:00:00Z"),
        sized("short", 10, "2026-01-01T00:00:05Z"),
    )
    # 4 x 60,000 + 4 x 600 GPU-s of backlog. On 8 GPUs it drains in 30,300 s,
    # less than the long job's own 60,000: it would set the finish, so it goes
    # first and its pods report no size (its class never parks it).
    size = sizes([long, short], 8)
    assert size["ns/long"] == Size(4 * 1000 * 60, critical=True) and size["ns/long"].reported == 0
    assert size["ns/short"] == Size(4 * 10 * 60) and size["ns/short"].reported == 4 * 10 * 60
    requests = [gang_request(j, size[j.key]) for j in (short, long)]
    assert [r.job for r in queue_order(requests)] == ["ns/long", "ns/short"]
    assert all(p.work_left == r.work_left for r in requests for p in r.pods)
    # On 4 GPUs the backlog takes 60,600 s: nobody sets the finish, smallest first.
    size = sizes([long, short], 4)
    assert not any(s.critical for s in size.values())
    requests = [gang_request(j, size[j.key]) for j in (short, long)]
    assert [r.job for r in queue_order(requests)] == ["ns/short", "ns/long"]


def test_with_a_matrix_a_job_that_would_outlast_its_partners_goes_first() -> None:
    def lean(name: str, planned: int, mib: int) -> RLJob:
        body = sized(name, planned, "2026-01-01T00:00:00Z").model_dump(
            by_alias=True, exclude_none=True
        )
        body["spec"]["roles"][0]["gpuMemoryMiB"] = {"training": mib}
        return RLJob.model_validate(body)

    # 4 GPUs of 80 GiB. "long" and "short" fit two to a GPU, "other" beside
    # nobody. The backlog (482,400 GPU-s) drains in 120,600 s, longer than
    # any job alone (60,000 s): by the backlog nobody sets the finish.
    long, short, other = (
        lean("long", 1000, 30000),
        lean("short", 10, 30000),
        lean("other", 1000, 70000),
    )
    free = SharingRules(cells_of({a: dict.fromkeys(Shape, 0.0) for a in Shape}))
    assert not any(s.critical for s in sizes([long, short, other], 4).values())
    assert not any(
        s.critical
        for s in sizes([long, short, other], 4, rules=DEFAULT_RULES, gpu_mib=81920).values()
    )
    # With a matrix under which they pair, "long" outlasts its one partner
    # (2,400 GPU-s, 600 s on 4 GPUs): it goes first and reports no size.
    size = sizes([long, short, other], 4, rules=free, gpu_mib=81920)
    assert {k for k, s in size.items() if s.critical} == {"ns/long"}
    assert size["ns/long"].reported == 0
    requests = [gang_request(j, size[j.key]) for j in (short, other, long)]
    assert [r.job for r in queue_order(requests)] == ["ns/long", "ns/short", "ns/other"]


def test_a_sized_job_of_a_higher_class_queues_with_the_lowest_until_its_grace_ends() -> None:
    body = sized("top", 100, "2026-01-01T00:00:00Z").model_dump(by_alias=True, exclude_none=True)
    body["spec"]["priority"] = 9
    top = RLJob.model_validate(body)  # 4 GPUs x 100 x 60 s: 6,000 s alone
    low = sized("low", 10, "2026-01-01T00:00:00Z")
    created = datetime(2026, 1, 1, tzinfo=UTC)
    grace = TOP_GRACE * 6000.0
    early = sizes([top, low], 64, created + timedelta(seconds=grace - 1), ["ns/top", "ns/low"])
    assert early["ns/top"].waiting_as == 0
    assert early["ns/top"].grace_until == created + timedelta(seconds=grace)
    assert early["ns/low"].waiting_as is None  # the lowest class has no grace
    request = gang_request(top, early["ns/top"])
    # Its place in the queue comes from the lowest class, least work first ...
    assert request.priority == 0
    assert [r.job for r in queue_order([request, gang_request(low, early["ns/low"])])] == [
        "ns/low",
        "ns/top",
    ]
    # ... while its pods keep their own class (sharing and victims judge by it).
    assert {p.priority for p in request.pods} == {9}
    late = sizes([top, low], 64, created + timedelta(seconds=grace), ["ns/top", "ns/low"])
    assert late["ns/top"].waiting_as is None and gang_request(top, late["ns/top"]).priority == 9
    # Only a waiting job has a grace; an unsized one and a class alone have none.
    assert sizes([top, low], 64, created, ["ns/low"])["ns/top"].waiting_as is None
    unsized = job("unsized", gpus=1, priority=9, created="2026-01-01T00:00:00Z")
    assert sizes([unsized, low], 64, created, ["ns/unsized"])["ns/unsized"].waiting_as is None
    assert sizes([top], 64, created, ["ns/top"])["ns/top"].waiting_as is None
    # Without a clock (the caller keeps strict classes) nobody has one.
    assert sizes([top, low], 64)["ns/top"].waiting_as is None


def test_the_operators_grace_shares_set_the_grace_and_strict_has_none() -> None:
    body = sized("top", 100, "2026-01-01T00:00:00Z").model_dump(by_alias=True, exclude_none=True)
    body["spec"]["priority"] = 9
    top = RLJob.model_validate(body)  # 6,000 s alone
    low = sized("low", 10, "2026-01-01T00:00:00Z")
    created = datetime(2026, 1, 1, tzinfo=UTC)
    waiting = ["ns/top", "ns/low"]
    now = created + timedelta(seconds=1000)
    # Past the default grace (600 s), inside a grace of half its length (3,000 s).
    assert sizes([top, low], 64, now, waiting)["ns/top"].waiting_as is None
    half = sizes([top, low], 64, now, waiting, Grace(top=0.5))["ns/top"]
    assert half.waiting_as == 0 and half.grace_until == created + timedelta(seconds=3000)
    assert sizes([top, low], 64, created, waiting, STRICT)["ns/top"].waiting_as is None


def test_a_sized_job_that_waited_its_aging_goes_first_and_once_admitted_its_class_spares_it() -> (
    None
):
    # "long": 4 GPUs x 1000 x 60 s = 60,000 s alone; "short": 600 s, created
    # 15 minutes before "long" has waited twice its length (so not aged
    # itself). On 4 GPUs nobody sets the finish: least work first.
    long, short = (
        sized("long", 1000, "2026-01-01T00:00:00Z"),
        sized("short", 10, "2026-01-02T09:05:00Z"),
    )
    created = datetime(2026, 1, 1, tzinfo=UTC)
    aging = Grace(aging=2.0)
    waiting = ["ns/long", "ns/short"]

    def order(now: datetime, shares: Grace) -> list[str]:
        size = sizes([long, short], 4, now, waiting, shares)
        return [r.job for r in queue_order([gang_request(j, size[j.key]) for j in (short, long)])]

    before = created + timedelta(seconds=119_999)
    assert sizes([long, short], 4, before, waiting, aging)["ns/long"].aged_at is None
    assert order(before, aging) == ["ns/short", "ns/long"]
    # Twice its length waited: it goes first in its class, as a critical job.
    at = created + timedelta(seconds=120_000)
    size = sizes([long, short], 4, at, waiting, aging)
    assert size["ns/long"].aged_at == at and size["ns/short"].aged_at is None
    assert not size["ns/long"].critical and size["ns/long"].waiting_as is None
    assert order(at, aging) == ["ns/long", "ns/short"]
    # Off by default.
    assert order(at, DEFAULT_GRACE) == ["ns/short", "ns/long"]
    # Admitted after it aged, its pods report no size, so its class does not
    # park it; admitted sooner, they report its size as before.
    for admitted, spared in (("2026-01-02T09:20:00Z", True), ("2026-01-02T09:19:59Z", False)):
        running = sized("long", 1000, "2026-01-01T00:00:00Z", admittedAt=admitted)
        got = sizes([running, short], 4, at, ["ns/short"], aging)["ns/long"]
        assert (got.aged_at is not None, got.reported == 0) == (spared, spared)


def test_shipped_policy_admits_a_whole_gang_or_nothing() -> None:
    snapshot = build_snapshot([node("n0"), node("n1")], [])
    fits = gang_request(job("fits", gpus=8, replicas=2))
    too_big = gang_request(job("big", gpus=8, replicas=3, priority=5))
    decisions = {d.job: d for d in RLixAdmission()(snapshot, [fits, too_big])}
    assert decisions["ns/fits"].admitted
    assert not decisions["ns/big"].admitted and "fits nowhere" in decisions["ns/big"].message
    assert decisions == {d.job: d for d in admit(snapshot, [fits, too_big], RLixPolicy())}


def test_store_ignores_watch_events_older_than_what_it_holds() -> None:
    store = Store()
    body = {"metadata": {"name": "j", "namespace": "ns", "resourceVersion": "10"}, "spec": {}}
    store.put_job(body)
    store.put_job({**body, "metadata": {**body["metadata"], "resourceVersion": "9"}})
    assert store.jobs["ns/j"]["metadata"]["resourceVersion"] == "10"
    assert store.dirty == {"ns/j"} and store.queue_changed


def test_store_reports_an_invalid_spec_with_its_field() -> None:
    store = Store()
    store.put_job(
        {
            "metadata": {"name": "j", "namespace": "ns", "resourceVersion": "1", "generation": 1},
            "spec": {"roles": [{"name": "r", "kind": "rollout", "image": "x"}]},
        }
    )
    parsed, errors = store.job("ns/j")
    assert parsed is not None
    assert {e.path for e in errors} >= {"spec.roles", "spec.roles[0].gpuMemoryMiB"}


def test_node_heartbeats_do_not_trigger_admission() -> None:
    store = Store()
    store.put_node(node("n0"))
    store.queue_changed = False
    beat = node("n0")
    beat["metadata"]["resourceVersion"] = "2"
    store.put_node(beat)
    assert not store.queue_changed
    resized = node("n0", gpus=4)
    resized["metadata"]["resourceVersion"] = "3"
    store.put_node(resized)
    assert store.queue_changed


PHASE_PROFILE = {"rollout": 240, "scoring": 20, "training": 90, "weight-sync": 10}


def _pools(name: str, *, profile: bool) -> RLJob:
    """A disaggregated job: one trainer GPU, one rollout GPU, 30000 MiB each."""
    role = {"replicas": 1, "gpusPerReplica": 1, "image": "x"}
    return RLJob.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {
                **({"phaseProfile": PHASE_PROFILE} if profile else {}),
                "roles": [
                    {**role, "name": "t", "kind": "trainer",
                     "gpuMemoryMiB": {"training": 30000, "idle": 30000}},
                    {**role, "name": "r", "kind": "rollout",
                     "gpuMemoryMiB": {"rollout": 30000, "idle": 30000}},
                ],
            },
        }
    )  # fmt: skip


def test_with_the_matrix_a_job_is_admitted_beside_another_only_where_both_say_their_seconds() -> (
    None
):
    """Job ``a`` holds both GPUs of a 2-GPU node, its trainer on one, its rollout
    pool on the other. Under the H200 matrix (``SharingRules()``) ``b``'s pools
    may go beside ``a``'s when both jobs declare phaseProfile (each pool waits
    through the other's phases, so at the phase gate a pair expects more than
    4/3 of a GPU's progress); without it the worst case (0.95) refuses them
    and ``b`` waits, saying the sharing rules did. Rules 1-3 (no matrix) let
    ``b`` in either way."""
    from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules

    for profile, rules, admitted in (
        (True, SharingRules(), True),
        (False, SharingRules(), False),
        (False, DEFAULT_RULES, True),
    ):
        a, b = _pools("a", profile=profile), _pools("b", profile=profile)
        pods = []
        for index, (_, (role, replica)) in enumerate(desired_pod_names(a).items()):
            pod = build_pod(a, role, replica, owner_uid="u")
            pod["spec"]["nodeName"] = "n1"
            pod["metadata"]["annotations"][names.ANNOTATION_GPU_INDICES] = str(index)
            pods.append(pod)
        snapshot = build_snapshot([node("n1", gpus=2)], pods)
        (decision,) = RLixAdmission(rules)(snapshot, [gang_request(b)])
        assert decision.admitted is admitted, (profile, rules, decision)
        if not admitted:
            assert "the sharing rules let it take at most 0" in decision.message, decision
        else:
            assert {p.node for p in decision.placements} == {"n1"}
