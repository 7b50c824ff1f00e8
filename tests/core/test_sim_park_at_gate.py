"""Parking at the gate, played out by the engine (``SharingRules.parks_at_gate``).

Two identical disaggregated jobs, pinned so that each pool shares its GPUs
with the other job's same pool, on GPUs that hold the larger of two pods'
peaks and a CUDA context but not both peaks. Under the gate with parking the
engine lets a pod into a busy phase only where its peak fits beside the pods
that work (the room test), every GPU holds within its memory (the recorder
counts the parked at a context), and each turn's copies are charged to the
pod's busy segments; with memory to spare nothing is charged. A weight sync
parks a working trainer pod (it stops at safe points) where enough of its
phase is left, and pays that pod's copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import pytest

from rlix.core.policy.placement.sharing import CONTEXT_MIB, SharingRules
from rlix.core.sim import engine
from rlix.core.sim import hardware as hw
from rlix.core.sim.engine import SimConfig, Simulation, simulate
from rlix.core.sim.interference import DEFAULT
from rlix.core.sim.metrics import SimResult
from rlix.core.sim.schedulers import Preemption, QueueOrder, Scheduler, rlix
from rlix.core.sim.workload import JobProfile
from rlix.core.snapshot import ClusterSnapshot, Workload
from tests.core.test_sim_disaggregated import PinnedRules, disagg
from tests.core.test_sim_helpers import mix_of

A, B = disagg("t/a", 0), disagg("t/b", 1)
PROFILE = JobProfile(A)
ROLLOUT, TRAINER = (PROFILE.role_memory_mib[r] for r in ("rollout", "actor"))
# Either pair's larger peak and a context fit; neither pair's two peaks do.
TIGHT = max(ROLLOUT, TRAINER) + CONTEXT_MIB
WHERE = (("t/a/p0", (0, 1)), ("t/b/p0", (0, 1)), ("t/a/p1", (2, 3, 4, 5)),
         ("t/b/p1", (2, 3, 4, 5)))  # fmt: skip


@dataclass(frozen=True)
class Forced(PinnedRules):
    """Pinned with the rules the engine follows, whatever memory the filter
    would ask for: the placement the rules by turns make, forced here."""

    def filter(self, snapshot: ClusterSnapshot, pod: Workload) -> Mapping[str, str | None]:
        return dict.fromkeys(snapshot.nodes)


class Checked(Simulation):
    """The engine, asserting after every re-plan that on each GPU the pods
    that work hold their peaks and every other pod a context, within memory."""

    worst = 0
    check_loads = False  # loading pods count at their peak too

    def _refresh(self, ids: set[int], t: float) -> None:
        super()._refresh(ids, t)
        for node, gpus in enumerate(self.cluster.res):
            for g, holders in enumerate(gpus):
                held = 0
                for j in dict.fromkeys(holders):
                    run = self.runs[j]
                    for q in run.pods_on(node, g):
                        works = self.pod_pressure_phase(run, q) is not None
                        if self.check_loads:
                            works = works or self.loading(run, q, t)
                        held += self._pod_peak(run, q) if works else CONTEXT_MIB
                Checked.worst = max(Checked.worst, held)


def run(*, parks: bool, memory_mib: int) -> tuple[SimResult, int]:
    rules = SharingRules(parks_at_gate=parks)
    pinned = Scheduler("p", Forced(where=WHERE, rules=rules), QueueOrder.FIFO, Preemption.NONE)
    Checked.worst = 0
    result = Checked(mix_of(A, B), pinned, SimConfig(memory_mib=memory_mib)).run()
    return result, Checked.worst


def test_the_pair_holds_within_the_gpu_by_turns() -> None:
    assert ROLLOUT + TRAINER > TIGHT and 2 * min(ROLLOUT, TRAINER) > TIGHT  # both pairs over
    parked, worst = run(parks=True, memory_mib=TIGHT)
    assert worst <= TIGHT  # the room test: never two peaks at work on one GPU
    assert parked.over_memory == 0.0
    assert parked.host_parked_peak_mib > 0  # the pod not working waits in host memory
    # The two ran side by side (neither had the GPUs to itself first).
    alone = PROFILE.first_load_s + PROFILE.timeline(0).total_s
    assert min(parked.jct_s) > 1.2 * alone
    # Without parking the same placement runs over memory: the gate lets a
    # pod's weight sync in beside its partner's training (copies beside a
    # kernel gain), both peaks resident.
    over, worst_unparked = run(parks=False, memory_mib=TIGHT)
    assert over.over_memory > 0.0 and worst_unparked > TIGHT
    assert over.host_parked_peak_mib == 0
    # Under parking that weight sync parks the partner's trainer pod at its
    # safe points where enough of its phase is left (``worth_stopping``),
    # and is charged its copies: slower than over memory, faster than one
    # job after the other.
    assert over.makespan_s < parked.makespan_s < 2 * alone


def test_a_sync_that_may_not_park_a_working_trainer_waits_for_its_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Where no pod stops at safe points, the sync waits for the partner's
    # phase to end: here that costs more than one job after the other.
    alone = PROFILE.first_load_s + PROFILE.timeline(0).total_s
    stopping, _ = run(parks=True, memory_mib=TIGHT)
    monkeypatch.setattr(engine, "_stops_at_safe_points", lambda run, pod: False)
    waiting, worst = run(parks=True, memory_mib=TIGHT)
    assert worst <= TIGHT and waiting.over_memory == 0.0
    assert waiting.makespan_s > 2 * alone > stopping.makespan_s
    # The stop is charged: the stopped pod's memory out and back, at the
    # PCIe floors, lengthens the sync that made it.
    monkeypatch.undo()
    monkeypatch.setattr(Checked, "_stop_charge", lambda self, run: 1.0)
    assert run(parks=True, memory_mib=TIGHT)[0].makespan_s < stopping.makespan_s


def test_each_turn_pays_its_copies_and_only_where_both_peaks_do_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ample = 2 * max(ROLLOUT, TRAINER)
    assert run(parks=True, memory_mib=ample)[0] == run(parks=False, memory_mib=ample)[0]
    charged = run(parks=True, memory_mib=TIGHT)[0]
    monkeypatch.setattr(Checked, "_turn_charge", lambda self, run, pod, others: 1.0)
    free = run(parks=True, memory_mib=TIGHT)[0]
    assert charged.makespan_s > free.makespan_s
    # At most every busy second of the slower pool at the share of its rate a
    # turn leaves it: its partner's memory out at the D2H floor and its own
    # back at H2D, once per iteration.
    busy = {
        role: PROFILE.iteration_s
        * sum(s.share for s in PROFILE.pod_load_profile(role) if s.phase.value != "idle")
        for role in ("rollout", "actor")
    }
    copies = {
        role: mib * hw.MIB / hw.PCIE_D2H_BYTES_PER_S + mib * hw.MIB / hw.PCIE_H2D_BYTES_PER_S
        for role, mib in (("rollout", ROLLOUT), ("actor", TRAINER))
    }
    keep = min(busy[r] / (busy[r] + copies[r]) for r in busy)
    assert keep < 1.0
    assert charged.makespan_s <= free.makespan_s / keep


def test_rlix_pairs_two_jobs_whose_pods_fit_a_gpu_only_by_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two 14B disaggregated jobs of one node each: 71,886 and 72,289 MiB pods,
    # two of which are 1 MiB over an H200 at both peaks. As built the second
    # waits for the first; parking at the gate, its rollout pods take turns
    # with the first's trainer pods and the other way round, within memory.
    # The engine's candidate index (room after residents' smallest phase)
    # must not rule such a node out before the policy is asked.
    a, b = (disagg(f"t/{n}", i, model="14b", gpus=8, rollout_gpus=4) for i, n in enumerate("ab"))
    alone = JobProfile(a).first_load_s + JobProfile(a).timeline(0).total_s
    built = simulate(mix_of(a, b), rlix(DEFAULT))
    assert max(built.jct_s) > 1.9 * alone
    parked = simulate(mix_of(a, b), rlix(DEFAULT, parks_at_gate=True))
    assert parked.over_memory == 0.0 and parked.by_turns > 0.5
    # Each pod's load goes in only where its peak fits: the second job's wait
    # for the first's, then for the first's busy pools, so it starts out of
    # step (its rollout ends as the first's begins), and the gate's turns do
    # not bring it back in step: both take about twice their length alone,
    # no better than one after the other.
    assert 1.9 * alone < min(parked.jct_s) and max(parked.jct_s) < 2.1 * alone
    # Let every load in at once (over memory while they load, as the engine
    # did before 2026-12-07), and the two start in step and stay there.
    monkeypatch.setattr(engine.Simulation, "holds_peak", lambda self, run, pod, t: False)
    in_step = simulate(mix_of(a, b), rlix(DEFAULT, parks_at_gate=True))
    assert max(in_step.jct_s) < 1.1 * alone


def test_without_parking_the_rules_and_the_engine_are_as_built() -> None:
    built = run(parks=False, memory_mib=2 * max(ROLLOUT, TRAINER))[0]
    again = run(parks=False, memory_mib=2 * max(ROLLOUT, TRAINER))[0]
    assert built.makespan_s == again.makespan_s
    assert replace(SharingRules(), parks_at_gate=False) == SharingRules()
    with pytest.raises(ValueError, match="needs rules with an interference matrix"):
        rlix(None, parks_at_gate=True)


def test_a_pod_loads_only_where_its_peak_fits_beside_the_pods_that_work_or_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both jobs are placed at 0 s, and each pod's load (its checkpoint) fills
    # its peak: on each pair of GPUs the second pod's load waits for the
    # first's, and for its partner's busy phases, as a trainer's
    # rlix.loading() waits at the agent's gate; a pod that waits holds nothing.
    monkeypatch.setattr(Checked, "check_loads", True)
    gated, worst = run(parks=True, memory_mib=TIGHT)
    assert worst <= TIGHT and gated.over_memory == 0.0
    alone = PROFILE.first_load_s + PROFILE.timeline(0).total_s
    assert gated.makespan_s < 2 * alone
    # Every pod's load let in at once (counted at a context, as before
    # 2026-12-07): two peaks load on one GPU.
    monkeypatch.setattr(Checked, "holds_peak", lambda self, run, pod, t: False)
    _, worst_ungated = run(parks=True, memory_mib=TIGHT)
    assert worst_ungated > TIGHT
