"""Disaggregated jobs (separate rollout and trainer pools) in the simulator (issue 16)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from rlix.core.phases import Phase
from rlix.core.policy.placement.gating import gated_rates
from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.sim import engine, metrics, overflow
from rlix.core.sim import hardware as hw
from rlix.core.sim.engine import DecisionRecord, SimConfig, Simulation, _dominates, simulate
from rlix.core.sim.interference import DEFAULT, SHAPES, Interference
from rlix.core.sim.metrics import SimResult, pair_ceiling
from rlix.core.sim.mixes import closed_batch, make_mix
from rlix.core.sim.runs import Run, State
from rlix.core.sim.schedulers import (
    Preemption,
    QueueOrder,
    Scheduler,
    gang_binpack,
    kube_default,
)
from rlix.core.sim.schedulers import rlix as rlix_scheduler
from rlix.core.sim.workload import MODELS, JobProfile, JobSpec, Timeline, profile_for
from rlix.core.snapshot import ClusterSnapshot, PhaseLoad, Workload, load_profile_of
from tests.core.test_sim_helpers import MemoryShare, mix_of, spec


def load_s(job: JobSpec) -> float:
    return JobProfile(job).first_load_s


# A matrix under which a pair pays: two co-runners at full pressure make
# 2 / 1.5 = 1.33 GPUs of progress whatever their shapes.
PAYS = Interference("pays", "test", tuple((a, b, 0.5) for a in SHAPES for b in SHAPES))
DOCS = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"
MEASURED_RULES = SharingRules()


def disagg(name: str, index: int, arrival: float = 0.0, **kw: object) -> JobSpec:
    """A 7B job of 6 GPUs: a 2-GPU rollout pool and a 4-GPU trainer pool."""
    base: dict[str, object] = {"gpus": 6, "rollout_gpus": 2}
    base.update(kw)
    return spec(name, index, arrival, **base)


@dataclass(frozen=True)
class Pinned(MemoryShare):
    """MemoryShare, but each pod goes to the GPUs named for it."""

    where: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def gpus(self, snapshot: ClusterSnapshot, pod: Workload, node: str) -> tuple[int, ...]:
        return dict(self.where)[pod.name]


# -- the spec ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"rollout_gpus": 8}, "job 't/x': rollout_gpus 8 must lie in"),
        ({"rollout_gpus": -1}, "job 't/x': rollout_gpus -1 must lie in"),
        ({"model": "14b", "rollout_gpus": 3}, "rollout_gpus 3 is not a multiple of model 14b"),
        ({"gpus": 19, "rollout_gpus": 9}, "rollout_gpus 9 does not split into equal pods"),
        ({"gpus": 19, "rollout_gpus": 8}, "gpus - rollout_gpus 11 does not split"),
    ],
)
def test_bad_layouts_are_refused_naming_job_and_field(kw: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        spec("t/x", 0, **kw)


def test_colocated_is_the_default_layout() -> None:
    s = spec("t/a", 0, gpus=16)
    assert not s.disaggregated
    assert s.pod_roles == ("actor-rollout-ref",) * 2 and s.pod_gpus == (8, 8)
    s = disagg("t/a", 0, gpus=24, rollout_gpus=16)
    assert s.pod_roles == ("rollout", "rollout", "actor") and s.pod_gpus == (8, 8, 8)


def test_colocated_timelines_are_unchanged() -> None:
    # Pinned from the model before disaggregated jobs existed (commit d27cd00).
    assert JobProfile(spec("t/a", 0)).timeline(0).total_s == 1676.2830832014292
    big = JobProfile(JobSpec("t/b", "32b", 16, 7, 0.0, index=3))
    assert big.timeline(0).total_s == 2683.9118533252145
    assert big.memory_mib == {
        Phase.ROLLOUT: 71886,
        Phase.SCORING: 27776,
        Phase.TRAINING: 51022,
        Phase.WEIGHT_SYNC: 20326,
    }


def test_pools_take_their_durations_and_memory_from_their_own_gpus() -> None:
    p = profile_for(disagg("t/a", 0))
    decoder = profile_for(spec("t/r", 0, gpus=2))  # a colocated job as big as the pool
    trainer = profile_for(spec("t/t", 0, gpus=4))
    assert p.replicas == 2
    longest = p.length_quantile(0.5)
    assert p.rollout_segments(longest) == decoder.rollout_segments(longest)
    assert p.scoring_s == trainer.scoring_s and p.training_s == trainer.training_s
    weights = MODELS["7b"].params * 2
    assert p.weight_sync_s == pytest.approx(1.0 + weights / hw.NODE_TO_NODE_BYTES_PER_S)
    # Resident in every phase: the rollout engine, and the training state.
    assert p.role_memory_mib == {
        "rollout": decoder.memory_mib[Phase.ROLLOUT],
        "actor": trainer.memory_mib[Phase.TRAINING],
    }
    assert p.active_gpus == (2, 2, 4, 4, 6)
    # First start: a rollout GPU reads all of 7B's bf16 weights (TP 1), the
    # slowest of the two pools; an eviction restart also the trainer's state.
    assert p.first_load_s == hw.RESTART_FIXED_S + weights / hw.CHECKPOINT_READ_BYTES_PER_S
    ckpt = MODELS["7b"].params * 16 / 4
    assert p.restart_bytes == (ckpt, ckpt * 4 + weights * 2)


def test_each_pod_declares_its_role_memory_and_idle_segments() -> None:
    job = disagg("t/a", 0)
    seen: list[DecisionRecord] = []
    simulate(mix_of(job), kube_default(), trace=seen.append)
    rollout, actor = seen[0].request.pods
    p = profile_for(job)
    assert (rollout.role, rollout.gpus, actor.role, actor.gpus) == ("rollout", 2, "actor", 4)
    assert set(rollout.memory_mib.values()) == {p.role_memory_mib["rollout"]}
    assert set(actor.memory_mib.values()) == {p.role_memory_mib["actor"]}
    assert Phase.TRAINING not in rollout.memory_mib and Phase.ROLLOUT not in actor.memory_mib
    r_phases = [s.phase for s in rollout.load_profile]
    a_phases = [s.phase for s in actor.load_profile]
    assert r_phases == [Phase.ROLLOUT, Phase.ROLLOUT, Phase.IDLE, Phase.IDLE, Phase.WEIGHT_SYNC]
    assert a_phases == [Phase.IDLE, Phase.IDLE, Phase.SCORING, Phase.TRAINING, Phase.WEIGHT_SYNC]
    idle = [s for s in (*rollout.load_profile, *actor.load_profile) if s.phase is Phase.IDLE]
    assert all(s.pressure == 0.0 for s in idle)
    shares = [s.share for s in p.load_profile]
    assert (
        [s.share for s in rollout.load_profile] == shares == [s.share for s in actor.load_profile]
    )


# -- running -------------------------------------------------------------------


@pytest.mark.parametrize("make", [kube_default, lambda: rlix_scheduler(DEFAULT)])
def test_a_disaggregated_job_alone_runs_its_alone_duration(make: object) -> None:
    job = disagg("t/a", 0)
    result = simulate(mix_of(job), make())  # type: ignore[operator]
    timeline = JobProfile(job).timeline(0)
    assert result.makespan_s == pytest.approx(load_s(job) + timeline.total_s)
    # Capacity: alone-seconds x GPUs over held GPU-seconds -- 1.0 up to the load.
    assert result.capacity == pytest.approx(timeline.total_s / (timeline.total_s + load_s(job)))
    # Pool idle: the trainer pool (4 GPUs) in rollout, the rollout pool (2) in
    # scoring and training, as shares of the cluster's 8 GPUs x makespan.
    idle = sum(d * (4, 4, 2, 2, 0)[i % 5] for i, d in enumerate(timeline.durations))
    categories = result.categories()
    assert categories["pool idle"] == pytest.approx(idle / (8 * result.makespan_s))
    assert sum(categories.values()) == pytest.approx(1.0)
    work = sum(
        d * w * (2, 2, 4, 4, 6)[i % 5]
        for i, (d, w) in enumerate(zip(timeline.durations, timeline.demands, strict=True))
    )
    assert categories["useful"] == pytest.approx(work / (8 * result.makespan_s))


def _two_pinned(*where: tuple[str, tuple[int, ...]]) -> tuple[JobSpec, SimResult, Timeline]:
    """Two identical disaggregated jobs (same arrival: lock-step) on pinned GPUs of
    one node, under the matrix where pairs pay: job a, the run, a's timeline."""
    a, b = disagg("t/a", 0), disagg("t/b", 1)
    pinned = Scheduler("pinned", Pinned(where=where), QueueOrder.FIFO, Preemption.NONE)
    result = simulate(mix_of(a, b), pinned, SimConfig(interference=PAYS))
    return a, result, JobProfile(a).timeline(0)


def test_trainer_pods_sharing_gpus_slow_each_other_only_while_both_train() -> None:
    # A and B: rollout pools on GPUs 0-1 and 2-3, both trainer pools on 4-7.
    # Same arrival, same job: lock-step. Rollout segments run at full speed
    # (the trainer pools idle, press on nobody); scoring and training are
    # slowed by the other trainer (I[compute][compute]), weight sync by the
    # other's sync on the trainer GPUs.
    a, result, timeline = _two_pinned(
        ("t/a/p0", (0, 1)),
        ("t/b/p0", (2, 3)),
        ("t/a/p1", (4, 5, 6, 7)),
        ("t/b/p1", (4, 5, 6, 7)),
    )
    expected = load_s(a)
    for i, (d, p) in enumerate(zip(timeline.durations, timeline.pressures, strict=True)):
        phase = (None, None, Phase.SCORING, Phase.TRAINING, Phase.WEIGHT_SYNC)[i % 5]
        expected += d if phase is None else d * (1 + p * PAYS.slowdown(phase, phase))
    assert result.jct_s == pytest.approx((expected, expected), rel=1e-6)
    # Capacity counts each job's alone-seconds x its 6 GPUs over the 8 held:
    # the trainer GPUs pay in training (1.33 GPUs) and the rollouts overlap.
    alone = timeline.total_s
    assert result.capacity == pytest.approx(2 * alone * 6 / (8 * result.makespan_s), rel=1e-6)
    assert result.capacity > 1.0
    # The same under job-level loads would have slowed the rollouts too.
    assert result.makespan_s < load_s(a) + sum(
        d * (1 + p * 0.5) for d, p in zip(timeline.durations, timeline.pressures, strict=True)
    )


def test_one_jobs_rollout_pool_fills_the_others_idle_trainer_gpus() -> None:
    # Crossed: A's rollout pool shares GPUs 0-1 with B's trainer pool, B's
    # rollout pool GPUs 4-5 with A's trainer pool. In lock-step each pool's
    # partner idles whenever it works, so only weight sync (both pools busy)
    # is slowed. Reading a job's own idle pods, or a partner's idle pod as
    # pressing, would slow rollouts or training too.
    a, result, timeline = _two_pinned(
        ("t/a/p0", (0, 1)),
        ("t/a/p1", (4, 5, 6, 7)),
        ("t/b/p0", (4, 5)),
        ("t/b/p1", (0, 1, 2, 3)),
    )
    expected = load_s(a)
    for i, (d, p) in enumerate(zip(timeline.durations, timeline.pressures, strict=True)):
        expected += d * (1 + p * 0.5) if i % 5 == 4 else d
    assert result.jct_s == pytest.approx((expected, expected), rel=1e-6)
    assert result.capacity == pytest.approx(12 * timeline.total_s / (8 * expected), rel=1e-6)


@dataclass(frozen=True)
class PinnedRules(Pinned):
    """Pinned, deciding with RLix's sharing rules: the engine's phase gate follows them."""

    rules: SharingRules = MEASURED_RULES


def _pinned_pair(gate: bool) -> tuple[JobProfile, SimResult]:
    # Two identical jobs, rollout pools on GPUs 0-1, trainer pools on 2-5, under
    # the measured matrix (two busy phases on a GPU: 0.90-0.95 GPUs).
    a, b = disagg("t/a", 0), disagg("t/b", 1)
    where = (("t/a/p0", (0, 1)), ("t/b/p0", (0, 1)), ("t/a/p1", (2, 3, 4, 5)),
             ("t/b/p1", (2, 3, 4, 5)))  # fmt: skip
    pinned = PinnedRules(where=where, rules=SharingRules(phase_gate=gate))
    run = simulate(mix_of(a, b), Scheduler("p", pinned, QueueOrder.FIFO, Preemption.NONE))
    return JobProfile(a), run


def test_the_gate_makes_pods_of_a_pool_take_turns() -> None:
    profile, gated = _pinned_pair(gate=True)
    _, drifting = _pinned_pair(gate=False)
    # Side by side the trainer pools meet in training at 1 / 2.157 each; gated,
    # one trains while the other scores or waits, so both finish sooner.
    assert gated.makespan_s < 0.8 * drifting.makespan_s
    assert gated.capacity > drifting.capacity
    # The engine plays out what the rules' estimate says of the trainer pods
    # (the busier pool, 82% of the cycle, sets the pace).
    trainer = profile.pod_load_profile("actor")
    rate = min(gated_rates(SharingRules(), trainer, trainer, *(profile.iteration_s,) * 2))
    alone = profile.timeline(0).total_s
    assert gated.makespan_s == pytest.approx(profile.first_load_s + alone / rate, rel=0.05)


def test_rlix_without_the_nodes_gate_judges_pairs_as_they_drift_and_runs_them_so() -> None:
    # bench/sharing_rules.py's "no gate" column: the chart's install with
    # nodeAgent.phaseGate.enabled false (the components' --no-phase-gate).
    gated, drifting = rlix_scheduler(DEFAULT), rlix_scheduler(DEFAULT, phase_gate=False)
    assert drifting.policy.rules == replace(gated.policy.rules, phase_gate=False)
    mix = mix_of(disagg("t/a", 0), disagg("t/b", 1))
    assert Simulation(mix, gated, SimConfig()).gate_rules is not None
    assert Simulation(mix, drifting, SimConfig()).gate_rules is None
    with pytest.raises(ValueError, match="needs the nodes' phase gate"):
        rlix_scheduler(DEFAULT, parks_at_gate=True, phase_gate=False)


def test_pair_ceiling_judges_pods_not_jobs() -> None:
    # Colocated 7B jobs pair at ~0.91 under the measured matrix (ceiling 1);
    # two disaggregated ones have idle pools to fill.
    assert pair_ceiling([spec("t/a", 0), spec("t/b", 1)], DEFAULT) == 1.0
    two = [disagg("t/a", 0, gpus=8, rollout_gpus=4), disagg("t/b", 1, gpus=8, rollout_gpus=4)]
    assert pair_ceiling(two, DEFAULT) > 1.3


def test_small_lab_seed_0_is_unchanged() -> None:
    # Read before disaggregated jobs existed (commit d27cd00), rlix, open arrivals,
    # in the queue order RLix had then (priority, arrival; ordering by size came later).
    fifo = replace(rlix_scheduler(DEFAULT), order=QueueOrder.PRIORITY)
    result = simulate(make_mix("small-lab", seed=0), fifo)
    assert result.makespan_s == pytest.approx(329009.8416985172, rel=1e-12)
    assert result.jct_mean_s == pytest.approx(37995.52160326645, rel=1e-12)
    assert "pool idle" not in result.categories()


def test_pool_idle_is_defined_where_the_docs_say() -> None:
    result = simulate(mix_of(disagg("t/a", 0)), kube_default())
    doc = metrics.__doc__ or ""
    text = DOCS.read_text(encoding="utf-8")
    for category in result.categories():
        name = category.split(",")[0]
        assert name in doc, category
        assert name in text, category
    assert "**pool idle**" in text


def test_a_failed_gang_blocks_only_gangs_that_need_at_least_as_much_pod_by_pod() -> None:
    assert _dominates(((8, 8), 100), ((8, 8, 8), 100))  # colocated: more pods
    assert not _dominates(((8, 8), 100), ((8, 8), 99))  # less memory
    # 6 + 2 GPUs failing says nothing about 3 + 3 (no pod as large as 6) ...
    assert not _dominates(((6, 2), 100), ((3, 3), 100))
    # ... but does about 6 + 4 and 8 + 2 + 1.
    assert _dominates(((6, 2), 100), ((6, 4), 100))
    assert _dominates(((6, 2), 100), ((8, 2, 1), 100))
    assert not _dominates(((6, 2), 100), ((8,), 100))


def _declared(profile: tuple[PhaseLoad, ...], iteration_s: float) -> tuple[PhaseLoad, ...]:
    """What a pod of the cluster says of the same cycle: seconds per phase
    (``rlix.io/phase-seconds``), read back at full pressure while busy."""
    seconds: dict[Phase, float] = {}
    for seg in profile:
        seconds[seg.phase] = seconds.get(seg.phase, 0.0) + seg.share * iteration_s
    declared, total = load_profile_of(seconds)
    assert total == pytest.approx(iteration_s)
    return declared


def test_what_a_cluster_can_declare_never_shares_a_pair_the_model_refuses() -> None:
    """The cluster's pods say how long each phase lasts, not how hard a
    rollout tail or a tool wait presses (docs/rljob.md), so they are judged at
    full pressure while busy. On the disaggregated mix under the H200 matrix
    that never lets a pair of pod shapes share where the modelled pressures
    refuse it, and refuses one the model allows: a 32B rollout pool beside a
    colocated 14B job, whose rollout tail presses at 0.984 (a pair at the
    threshold). Whole runs, seeds 0-2, gave identical tables both ways; on
    the agentic mix no pair shares either way."""
    rules = SharingRules()
    pods: dict[tuple[object, ...], tuple[Workload, Workload]] = {}
    for job in make_mix("disaggregated", seed=0).jobs:
        p = profile_for(job)
        for role in dict.fromkeys(job.pod_roles):
            memory, profile = p.pod_memory_mib(role), p.pod_load_profile(role)
            key = (tuple(memory.items()), profile, p.iteration_s)
            if key in pods:
                continue
            modelled = Workload(
                name=f"{job.name}/{role}", job="", role=role, gpus=1, memory_mib=memory,
                priority=job.priority, load_profile=profile, iteration_s=p.iteration_s,
            )  # fmt: skip
            said = replace(modelled, load_profile=_declared(profile, p.iteration_s))
            pods[key] = (modelled, said)
    shapes = list(pods.values())
    allowed, differ = 0, []
    for i, (mine, mine_said) in enumerate(shapes):
        for theirs, theirs_said in shapes[i:]:
            pair = (replace(mine, job="a"), replace(theirs, job="b"))
            said = (replace(mine_said, job="a"), replace(theirs_said, job="b"))
            model, cluster = rules.may_share(*pair), rules.may_share(*said)
            allowed += model
            if model != cluster:
                differ.append((mine.name, theirs.name, model))
    assert allowed > 0, "no pair shares at all: the comparison would say nothing"
    assert all(model for _, _, model in differ), differ  # never more permissive
    assert len(differ) == 1, differ


def test_with_a_matrix_the_jobs_that_would_outlast_their_partners_go_first() -> None:
    # Seed 0's closed batch: 116 h of backlog on 128 GPUs, so by the backlog
    # alone nobody sets the finish at t = 0. Under the measured matrix the
    # colocated 14B jobs (14 h alone) may share GPUs only with the 2-GPU 1.5B
    # jobs (memory and rule 5 rule out the rest), whose work the cluster
    # drains in under 2 h: started later, they would run alone.
    batch = closed_batch(make_mix("disaggregated", 0))
    sim = Simulation(batch, rlix_scheduler(DEFAULT))
    sim._mark_critical(0.0)
    kinds = {(r.spec.model, r.spec.rollout_gpus) for r in sim.runs if r.critical}
    assert kinds == {("14b", 0)}
    assert sum(r.critical for r in sim.runs) == 12
    # Without a matrix (the cluster's default rules) nobody is a partner.
    plain = Simulation(batch, rlix_scheduler(None))
    assert plain.partners is None
    plain._mark_critical(0.0)
    assert not any(r.critical for r in plain.runs)


def test_a_pair_that_outgrows_a_gpu_is_parked_as_the_conductor_parks_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The cluster's rules (no matrix) let a pod in on a resident's current and
    # next phase, so the pair may meet both peaks later. On a cluster the
    # conductor's rule 3 then parks one of them; the engine plays that out
    # (sim.overflow) and the recorder sees no GPU over its memory. The rules
    # with a matrix ask that both peaks fit ("sharing.joinable", rule 6), so
    # they admit no such pair and the engine does not check. The first 20
    # jobs of the disaggregated mix, seed 0.
    mix = make_mix("disaggregated", seed=0)
    mix = replace(mix, jobs=mix.jobs[:20])
    parks: list[tuple[list[int], list[int], list[State]]] = []
    real = engine.keep_within_hbm

    def watching(sim: Any, run: Run, t: float) -> list[Run]:
        before = overflow._over(sim, run, t)
        parked = real(sim, run, t)
        if parked:
            parks.append((before, overflow._over(sim, run, t), [r.state for r in parked]))
        return parked

    monkeypatch.setattr(engine, "keep_within_hbm", watching)
    policed = Simulation(mix, rlix_scheduler(None), SimConfig(seed=0))
    assert policed.polices_hbm
    by_phase = policed.run()
    assert by_phase.jobs == 20
    assert by_phase.overflow_parks == len(parks) >= 1
    for before, after, states in parks:  # over before the park, within after
        assert before and not after and set(states) == {State.SUSPENDED}
    assert by_phase.over_memory == 0.0
    # Without the parking the same run holds GPUs over their memory.
    unpoliced = Simulation(mix, rlix_scheduler(None), SimConfig(seed=0))
    unpoliced.polices_hbm = False
    ran_over = unpoliced.run()
    assert ran_over.over_memory > 0.005 and ran_over.overflow_parks == 0
    by_peaks = Simulation(mix, rlix_scheduler(DEFAULT), SimConfig(seed=0))
    assert not by_peaks.polices_hbm
    result = by_peaks.run()
    assert result.jobs == 20 and result.over_memory == 0.0 and result.overflow_parks == 0
    # Schedulers that never share a GPU, or evict, have nothing to park.
    assert not overflow.needed(kube_default()) and not overflow.needed(gang_binpack())
