"""The conductor's rule 3 (physical HBM) played out: a GPU over its memory
parks a co-resident, as on a cluster.

Rules without an interference matrix (the cluster's ``DEFAULT_RULES``) let a
pod in beside a resident's current and next phase (``loads.owed_mib``), so
within one iteration a pair can meet both peaks on one GPU. A real GPU cannot
hold that: on a cluster the conductor parks the co-resident that harms least
(``conduct``, rule 3, reason ``PhaseOverflow``) and brings it back when its
memory fits again (rule 4). Until this module the engine only measured it
(``SimResult.over_memory``) and ran on as if the GPU were larger.

Here every phase change of a job that shares a GPU asks the conductor's own
``decide`` about the job's nodes, with nobody waiting, and carries out the
parking it names; a job resumed less than ``ConductConfig.min_run_s`` ago is
no victim (the conductor's guard against ping-pong), so a GPU can stay over
until it may be parked, and the recorder still counts that time. Parked jobs
come back the way every parked job does (``preempting.try_resume``: the
placement policy's filter on their own node, else elsewhere), retried at
least every ``RESUME_RETRY_S``, as the conductor reconciles.

Rules with a matrix ask that both peaks fit (rule 6), so nothing they admit
can overflow, and the engine does not check (``needed``).
"""

from __future__ import annotations

from rlix.core.policy.conduct import JobClock, Kind, decide
from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.sim.cluster import pods_of
from rlix.core.sim.preempting import Engine, suspend
from rlix.core.sim.runs import Run
from rlix.core.sim.schedulers import Preemption, Scheduler
from rlix.core.suspension import Reason


def needed(scheduler: Scheduler) -> bool:
    """Whether runs under ``scheduler`` can put two jobs' memory over a GPU: it
    shares GPUs, parks in place, and its rules do not ask both peaks to fit."""
    rules = getattr(scheduler.policy, "rules", None)
    by_peaks = isinstance(rules, SharingRules) and rules.interference is not None
    return (
        scheduler.policy.shares_gpus and scheduler.preemption is Preemption.SUSPEND and not by_peaks
    )


def keep_within_hbm(sim: Engine, run: Run, t: float) -> list[Run]:
    """Rule 3 on the nodes where ``run`` shares a GPU, as of ``t`` (``run`` has
    just entered a phase); parks what the conductor names and returns it."""
    nodes = _over(sim, run, t)
    if not nodes:
        return []
    snapshot = sim.cluster.snapshot(nodes, sim.runs, t)
    here = {sim.runs[j].spec.name: sim.runs[j] for n in nodes for j in sim.cluster.residents(n)}
    clocks = {
        name: JobClock(resumed_at=r.resumed_at)
        for name, r in here.items()
        if r.resumed_at is not None
    }
    parked: list[Run] = []
    for action in decide(snapshot, (), sim.policy, clocks=clocks, now=t):
        if action.kind is Kind.SUSPEND and action.reason is Reason.PHASE_OVERFLOW:
            victim = here[action.job]
            suspend(sim, victim, t)
            parked.append(victim)
    return parked


def _over(sim: Engine, run: Run, t: float) -> list[int]:
    """``run``'s nodes where a GPU it shares holds more than its memory, its
    residents each counted as the conductor counts them (``Workload.memory_in``
    their phase: the peak while loading); the cheap test before ``decide``."""
    cluster, found = sim.cluster, []
    for node, gpus in run.placements:
        shared = [g for g in gpus if len(set(cluster.res[node][g])) > 1]
        if not shared:
            continue
        name, held = cluster.names[node], dict.fromkeys(shared, 0)
        for j in cluster.residents(node):  # one pass over the node's pods
            for w in pods_of(sim.runs[j], t, cluster):
                if w.node == name:
                    for g in w.gpu_indices:
                        if g in held:
                            held[g] += w.memory_in(w.phase)
        if max(held.values()) > cluster.nodes[node].gpu_memory_mib:
            found.append(node)
    return found
