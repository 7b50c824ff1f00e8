"""Order inside a priority: the job that sets the finish, then the least work left;
and the grace a waiting job spends at the lowest class's place before its own applies."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlix.core.policy.admission import GangRequest, queue_order
from rlix.core.policy.ordering import (
    CLASS_GRACE,
    DEFAULT_GRACE,
    DISPLACE_RATIO,
    STRICT,
    TOP_GRACE,
    Grace,
    Partners,
    aging_s,
    critical_jobs,
    displaces,
    grace_s,
    is_aged,
    is_critical,
    parse_share,
    planned_work_left,
    precedence,
)
from rlix.core.policy.placement import PlacementView, choose_victims_on
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.sim.engine import SimConfig, simulate
from rlix.core.sim.mixes import expected_gpu_s
from rlix.core.sim.schedulers import QueueOrder
from rlix.core.sim.schedulers import rlix as rlix_scheduler
from tests.builders.placement import cluster, node, pod
from tests.core.test_sim_helpers import mix_of, spec

GiB = 1024


def req(
    job: str, priority: int = 0, arrival: float = 0.0, left: float = 0.0, critical: bool = False
) -> GangRequest:
    return GangRequest(job, priority, arrival, (), left, critical)


def names(requests: list[GangRequest]) -> list[str]:
    return [r.job for r in queue_order(requests)]


def test_unsized_jobs_keep_arrival_order_as_before() -> None:
    assert names([req("b", arrival=2), req("a", arrival=1), req("c", 5, arrival=3)]) == [
        "c",
        "a",
        "b",
    ]


def test_inside_a_priority_the_least_work_left_goes_first() -> None:
    got = names(
        [
            req("big", arrival=1, left=900),
            req("small", arrival=2, left=100),
            req("mid", arrival=3, left=400),
        ]
    )
    assert got == ["small", "mid", "big"]


def test_priority_still_comes_before_size() -> None:
    assert names([req("small", 0, left=1), req("big", 5, left=10**9)]) == ["big", "small"]


def test_a_critical_job_goes_first_in_its_class_and_unsized_ones_before_sized() -> None:
    got = names(
        [req("small", left=10), req("long", left=10**6, critical=True), req("unsized", arrival=9)]
    )
    assert got == ["long", "unsized", "small"]


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        ((5, 0.0), (1, 0.0), True),  # a lower class, whatever the sizes
        ((1, 10.0), (5, 10**9), False),  # never a higher class
        ((3, 100.0), (3, 100.0 * DISPLACE_RATIO + 1), True),  # far larger, same class
        ((3, 100.0), (3, 100.0 * DISPLACE_RATIO), False),  # not more than the ratio
        ((3, 0.0), (3, 10**9), False),  # my size unknown
        ((3, 100.0), (3, 0.0), False),  # theirs unknown (or critical: withheld)
    ],
)
def test_displaces(mine: tuple[int, float], theirs: tuple[int, float], expected: bool) -> None:
    assert displaces(*mine, *theirs) is expected


def test_a_job_as_long_as_the_backlog_drain_is_critical() -> None:
    # 64 GPUs drain 6400 GPU-s in 100 s at best.
    assert is_critical(100.0, 6400.0, 64)
    assert not is_critical(99.0, 6400.0, 64)
    assert not is_critical(0.0, 0.0, 64)  # nothing known, nothing critical


def test_a_job_that_would_outlast_its_partners_goes_first() -> None:
    # 8 GPUs. "big" (100 s alone) may share GPUs only with the S jobs, "x"
    # with nobody. The whole backlog drains in 1,190 s, longer than anyone:
    # by the backlog alone nobody sets the finish.
    work = {"big": (800.0, 8), "s1": (400.0, 8), "s2": (320.0, 8), "x": (8000.0, 8)}
    kinds = {"big": "B", "s1": "S", "s2": "S", "x": "X"}
    partners = Partners(kinds, lambda a, b: {a, b} == {"B", "S"})
    assert critical_jobs(work, 8) == frozenset()
    # Its partners' 720 GPU-s drain in 90 s: started later, "big" runs alone.
    # The S jobs' partner ("big") outlasts them; "x" has no partner to lose.
    assert critical_jobs(work, 8, partners) == {"big"}
    assert critical_jobs({**work, "s2": (480.0, 8)}, 8, partners) == frozenset()  # 110 s
    # A job of unknown size (0) is nobody's backlog and never critical.
    assert critical_jobs({**work, "big": (0.0, 8)}, 8, partners) == frozenset()
    # Jobs of one kind may be each other's partners, never their own.
    same = Partners({"a": "S", "b": "S"}, lambda a, b: True)
    assert critical_jobs({"a": (800.0, 8), "b": (100.0, 8)}, 8, same) == {"a"}


def _one_gpu(resident_left: float):  # type: ignore[no-untyped-def]
    roll = pod("roll").job("b").memory(70 * GiB).phase("rollout").priority(3).preemptible()
    return (
        cluster().with_nodes(node("n").gpus(1)).with_pods(roll.work_left(resident_left).on("n", 0))
    )


SMALL = (
    pod("vip")
    .job("vip")
    .gpus(1)
    .memory(60 * GiB)
    .phase("rollout")
    .priority(3)
    .work_left(100)
    .build()
)


def test_in_place_a_small_job_parks_a_far_larger_one_of_its_class() -> None:
    snapshot = _one_gpu(1000).build()
    assert RLixPolicy().victims(snapshot, SMALL, "n") == tuple(
        w for w in snapshot.workloads if w.name == "default/roll"
    )
    # Not when the resident has at most twice as much left, nor for an unsized job.
    assert RLixPolicy().victims(_one_gpu(200).build(), SMALL, "n") is None
    assert RLixPolicy().victims(snapshot, replace(SMALL, work_left=0.0), "n") is None


def test_kube_scheduler_never_deletes_a_pod_of_the_same_class() -> None:
    view = PlacementView(_one_gpu(1000).build())
    assert choose_victims_on(view, SMALL, "n", ["default/roll"]) is None
    assert choose_victims_on(view, SMALL, "n", ["default/roll"], in_place=True) == ("default/roll",)


def _long_then_short():  # type: ignore[no-untyped-def]
    # One 8-GPU node: a long job starts, a short one of the same priority arrives;
    # 32B jobs do not fit two to a GPU, so only parking makes room.
    return mix_of(
        spec("t/long", 0, model="32b", iterations=200),
        spec("t/short", 1, arrival=600.0, model="32b"),
    )


def test_the_simulated_short_job_parks_the_long_one_and_finishes_sooner() -> None:
    sized = simulate(_long_then_short(), rlix_scheduler())
    fifo = simulate(_long_then_short(), replace(rlix_scheduler(), order=QueueOrder.PRIORITY))
    assert sized.preemptions == 1 and fifo.preemptions == 0
    assert sized.jct_mean_s < fifo.jct_mean_s
    assert max(sized.jct_s) >= max(fifo.jct_s)  # the long job paid for it


@pytest.mark.parametrize(("other_iterations", "parked"), [(40, 0), (400, 1)])
def test_a_job_that_sets_the_finish_is_never_parked_for_its_class(
    other_iterations: int, parked: int
) -> None:
    # Two nodes: the long job on one, a protected job on the other, and a short
    # one arrives. Beside a 40-iteration neighbour the long job's own length is
    # more than the backlog's drain time (critical: it stays); beside a
    # 400-iteration one it is not, and the short job parks it.
    mix = mix_of(
        spec("t/long", 0, model="32b", iterations=200),
        spec("t/other", 1, model="32b", iterations=other_iterations, preemptible=False),
        spec("t/short", 2, arrival=600.0, model="32b"),
        nodes=2,
    )
    assert simulate(mix, rlix_scheduler()).preemptions == parked


def test_planned_work_left_uses_the_measured_iteration_once_there_is_one() -> None:
    # 8 GPUs, 100 planned: declared 60 s per iteration before any is done ...
    assert planned_work_left(8, 100, 0, 0.0, 60.0) == 8 * 100 * 60
    # ... then its own: 10 done in 1,200 s of reported phases is 120 s each.
    assert planned_work_left(8, 100, 10, 1200.0, 60.0) == 8 * 90 * 120
    # At or past its plan a running job still has its current iteration.
    assert planned_work_left(8, 100, 100, 12000.0, 60.0) == 8 * 1 * 120
    # Nothing declared and nothing measured: unknown, so arrival order.
    assert planned_work_left(8, 100, 0, 0.0, 0.0) == 0.0
    assert planned_work_left(8, 0, 0, 0.0, 60.0) == 0.0


def test_critical_jobs_judge_each_against_the_whole_backlog() -> None:
    # 16 GPUs; backlog 16 x 1000 GPU-s drains in 1000 s. "wide" has 1000 s
    # left on its own (critical); "narrow" 500 s; unsized adds nothing.
    work = {
        "wide": (8 * 1000.0, 8),
        "narrow": (8 * 500.0, 8),
        "unsized": (0.0, 8),
        "x": (4000.0, 0),
    }
    assert critical_jobs(work, 16) == {"wide"}
    assert critical_jobs(work, 0) == frozenset()
    assert critical_jobs({}, 16) == frozenset()


@pytest.mark.parametrize(
    ("priority", "alone_s", "grace"),
    [
        (9, 1000.0, TOP_GRACE * 1000.0),  # the top class: a tenth of its length
        (5, 1000.0, CLASS_GRACE * 1000.0),  # a class between
        (0, 1000.0, 0.0),  # the lowest class is there already
        (9, 0.0, 0.0),  # unknown length: its class applies at once
    ],
)
def test_grace_by_class(priority: int, alone_s: float, grace: float) -> None:
    assert grace_s(priority, 9, 0, alone_s) == grace


def test_a_waiting_job_takes_its_class_when_its_grace_ends() -> None:
    grace = TOP_GRACE * 1000.0
    assert precedence(9, 9, 0, grace - 1.0, 1000.0) == 0
    assert precedence(9, 9, 0, grace, 1000.0) == 9
    assert precedence(9, 9, 0, 0.0, 0.0) == 9  # unsized: no grace
    # Inside its grace a job sorts with the lowest class, by size.
    inside = req("top", precedence(9, 9, 0, 0.0, 1000.0), left=8000.0)
    assert names([inside, req("short", 0, left=800.0)]) == ["short", "top"]


def test_the_shares_are_settings_and_strict_means_no_grace() -> None:
    wider = Grace(top=0.5, between=1.0)
    assert grace_s(9, 9, 0, 1000.0, shares=wider) == 500.0
    assert grace_s(5, 9, 0, 1000.0, shares=wider) == 1000.0
    assert precedence(9, 9, 0, 499.0, 1000.0, shares=wider) == 0
    # Strict classes: every class applies from the first second.
    assert grace_s(9, 9, 0, 1000.0, shares=STRICT) == 0.0
    assert precedence(9, 9, 0, 0.0, 1000.0, shares=STRICT) == 9
    assert precedence(5, 9, 0, 0.0, 1000.0, shares=STRICT) == 5


def test_a_share_on_a_command_line_is_a_number_at_least_zero() -> None:
    assert parse_share("0.1") == 0.1 and parse_share("0") == 0.0
    for bad in ("-1", "nan", "inf", "a tenth"):
        with pytest.raises(ValueError, match=f"'{bad}' is not a share: give a number >= 0"):
            parse_share(bad)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_a_grace_share_that_is_not_a_number_at_least_zero_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="top share must be a number >= 0"):
        Grace(top=bad)
    with pytest.raises(ValueError, match="between share must be a number >= 0"):
        Grace(between=bad)


def test_a_job_ages_after_waiting_its_share_of_its_expected_length() -> None:
    aging = Grace(aging=2.0)
    assert aging_s(1000.0, shares=aging) == 2000.0
    assert not is_aged(1999.0, 1000.0, shares=aging)
    assert is_aged(2000.0, 1000.0, shares=aging)
    # Off by default, and a job of unknown length never ages.
    assert aging_s(1000.0) == 0.0 and not is_aged(1e9, 1000.0)
    assert not is_aged(1e9, 0.0, shares=aging)
    # Aging leaves the classes alone (an aged job is ordered as a critical one).
    assert precedence(0, 9, 0, 1e9, 1000.0, shares=aging) == 0


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_an_aging_share_that_is_not_a_number_at_least_zero_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="aging share must be a number >= 0"):
        Grace(aging=bad)


def _long_behind_a_stream() -> tuple[float, float, int]:
    """One node, jobs that cannot share it: one three times as long as the
    others arrives behind the first of ten short ones, each of which arrives
    just before the one in front ends (so none of them waits long). Least work
    first runs the long one last."""
    shorts = [spec(f"t/s{i}", i, arrival=6000.0 * i, model="32b") for i in range(10)]
    long = spec("t/long", 10, arrival=0.5, model="32b", iterations=60)
    return mix_of(*shorts, long), expected_gpu_s(long) / long.gpus


@pytest.mark.parametrize("aging", [1.0, 2.0])
def test_an_aged_job_goes_first_in_its_class_and_is_not_parked_by_it(aging: float) -> None:
    mix, length = _long_behind_a_stream()
    plain = simulate(mix, rlix_scheduler())
    aged = simulate(mix, rlix_scheduler(), SimConfig(grace=Grace(aging=aging)))
    waited = {
        k: (r.jct_s[-1] - r.alone_s[-1]) / length for k, r in (("plain", plain), ("aged", aged))
    }
    assert plain.preemptions == 0 and waited["plain"] > 3.0  # behind all ten
    # It goes next once aged, after at most the short job then running (a
    # third of its length), parking nobody; and the short jobs arriving while
    # it runs (a third of its work, so ``displaces`` would let them) do not park it.
    assert aged.preemptions == 0
    assert aging <= waited["aged"] < aging + 0.5
    assert aged.jct_mean_s > plain.jct_mean_s  # the price: the short ones wait


def _top_arrives_behind(low_iterations: int):  # type: ignore[no-untyped-def]
    # One 8-GPU node: a preemptible priority-0 job runs; a long top-class job
    # arrives 600 s later. 32B jobs do not fit two to a GPU: the top job either
    # waits or parks the other.
    return mix_of(
        spec("t/low", 0, model="32b", iterations=low_iterations),
        spec("t/top", 1, arrival=600.0, model="32b", iterations=200, priority=5),
    )


def _top_wait(
    low_iterations: int, order: QueueOrder = QueueOrder.SHORTEST, grace: Grace = DEFAULT_GRACE
) -> tuple[float, int]:
    """The top job's wait as a share of its expected length (the grace's unit),
    and the preemptions."""
    mix = _top_arrives_behind(low_iterations)
    result = simulate(mix, replace(rlix_scheduler(), order=order), SimConfig(grace=grace))
    (i,) = (k for k, p in enumerate(result.priorities) if p == 5)
    top = mix.jobs[1]
    expected_s = expected_gpu_s(top) / top.gpus
    return (result.jct_s[i] - result.alone_s[i]) / expected_s, result.preemptions


def test_a_top_job_lets_a_job_that_ends_within_its_grace_finish() -> None:
    wait, parked = _top_wait(10)
    assert parked == 0
    assert 0.0 < wait < TOP_GRACE
    # Strict classes (arrival order inside a class: no sizes, no grace) park it at once.
    strict, parked = _top_wait(10, QueueOrder.PRIORITY)
    assert parked == 1 and strict < wait
    # So do sizes without a grace (the operator's --top-grace 0).
    no_grace, parked = _top_wait(10, grace=STRICT)
    assert parked == 1 and no_grace < wait


def test_a_top_job_parks_a_longer_one_when_its_grace_ends() -> None:
    wait, parked = _top_wait(400)
    assert parked == 1
    # It waited its grace, then the park (seconds against hours).
    assert TOP_GRACE <= wait < TOP_GRACE + 0.01
