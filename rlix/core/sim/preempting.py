"""Preemption and its two flavours, and bringing parked jobs back.

Eviction (baseline b) kills the victim: it restarts from its last checkpoint.
Suspension (RLix) parks the victim's device memory in host RAM and restores it
later; nothing is lost, but the victim can only come back where its memory is
(host RAM is node-local). Victims are chosen by the scheduler's policy, never
here: this module only carries the decision out and accounts for the bytes.

It sees the simulation only through ``Engine``, the few things it may read and
change, so it does not import the engine (which imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import fields
from typing import Protocol

from rlix.core.policy.admission import Admission, GangRequest, bind, place_gang, place_pod
from rlix.core.policy.conduct import plan_preemption
from rlix.core.policy.ordering import displaces
from rlix.core.policy.port import PlacementPolicy
from rlix.core.sim import hardware as hw
from rlix.core.sim.cluster import Cluster
from rlix.core.sim.metrics import Recorder
from rlix.core.sim.records import RESUME_RETRY_S, DecisionRecord, SimConfig
from rlix.core.sim.runs import Run, State
from rlix.core.sim.schedulers import Preemption, Scheduler
from rlix.core.sim.workload import SEGMENTS_PER_ITERATION
from rlix.core.snapshot import ClusterSnapshot


class Engine(Protocol):
    """What preempting and resuming read and change in a running simulation."""

    runs: list[Run]
    cluster: Cluster
    config: SimConfig
    policy: PlacementPolicy
    scheduler: Scheduler
    trace: Callable[[DecisionRecord], None] | None
    recorder: Recorder
    queue: dict[int, None]  # waiting to be placed, in insertion order
    suspended: dict[int, None]  # parked, waiting to come back
    # job -> (its nodes' release counters, time) of its last failed resume
    resume_failed_at: dict[int, tuple[tuple[int, ...], float]]

    def fit_floor(self, run: Run) -> int: ...

    def queue_key(self, run: Run) -> tuple[object, ...]:
        """The order in which waiting (and parked) jobs are considered."""
        ...

    def request(self, run: Run, t: float) -> GangRequest:
        """The gang request ``run`` makes at ``t`` (its placements forgotten)."""
        ...

    def start(self, run: Run, admission: Admission, t: float) -> None:
        """Put ``run`` on the GPUs ``admission`` chose; it loads, then runs."""
        ...

    def stop(self, run: Run, t: float) -> None:
        """Take ``run`` off its GPUs as of ``t`` and re-plan its neighbours."""
        ...


def evict(sim: Engine, run: Run, t: float) -> None:
    """Kill the job; it restarts from its last checkpoint (baseline b)."""
    assert run.timeline is not None
    was_running = run.state is State.RUNNING
    sim.stop(run, t)
    if was_running:
        iteration = min(int(run.segment_at(t) // SEGMENTS_PER_ITERATION), run.spec.iterations - 1)
        kept = run.timeline.iteration_start(iteration // run.spec.ckpt_every * run.spec.ckpt_every)
        run.lost_s += run.progress - kept
        run.progress = kept
    slowest, total = run.profile.restart_bytes
    run.delay = hw.RESTART_FIXED_S + slowest / hw.CHECKPOINT_READ_BYTES_PER_S
    sim.recorder.bytes_moved += total
    run.placements = []
    run.state = State.QUEUED
    sim.queue[run.id] = None


def suspend(sim: Engine, run: Run, t: float) -> float:
    """Park the job's device memory in host RAM; returns the copy time."""
    phase = run.phase_at(t) if run.state is State.RUNNING else None
    per_gpu = run.profile.memory_mib[phase] if phase else max(run.profile.memory_mib.values())
    nbytes = per_gpu * hw.MIB
    parked = nbytes * run.spec.gpus
    if run.spec.disaggregated:  # each pod parks what it holds (constant per role)
        mib = run.profile.role_memory_mib
        pods = zip(run.spec.pod_roles, run.spec.pod_gpus, strict=True)
        parked = sum(mib[r] * hw.MIB * n for r, n in pods)
    sim.stop(run, t)
    run.state, run.suspended_at = State.SUSPENDED, t
    run.parked_bytes = parked
    run.delay = nbytes / sim.config.restore_bytes_per_s
    sim.recorder.bytes_moved += run.parked_bytes
    sim.suspended[run.id] = None
    return nbytes / sim.config.suspend_bytes_per_s


def try_resume(sim: Engine, t: float) -> None:
    """Bring parked jobs back on their own node(s), where the policy finds room,
    else (``SimConfig.relocate_bytes_per_s`` > 0) on other nodes (``_relocate``).

    Host memory is node-local, so a parked pod returns to the node it left;
    which GPUs there is the policy's choice (restoring into other GPUs of
    the node costs the same host-to-device copy). Retried when something
    left one of its nodes, and at least every ``RESUME_RETRY_S`` (residents'
    phase changes also free memory, and an operator reconciles periodically).
    """
    order = sorted(sim.suspended, key=lambda i: sim.queue_key(sim.runs[i]))
    # Name-blind requests whose relocation failed in this pass: nothing has
    # changed since, so a job of the same shape fails too (``_shape``).
    unplaceable: set[Hashable] = set()
    for jid in order:
        run = sim.runs[jid]
        homes = [node for node, _ in run.placements]
        epoch = tuple(sim.cluster.released[h] for h in homes)
        last = sim.resume_failed_at.get(jid)
        if last is not None and last[0] == epoch and t - last[1] < RESUME_RETRY_S:
            continue
        snapshot = sim.cluster.snapshot(homes, sim.runs, t)
        request = sim.request(run, t)
        trial, placed = snapshot, []
        for pod, home in zip(request.pods, homes, strict=True):
            name = sim.cluster.names[home]
            only = ClusterSnapshot({name: trial.nodes[name]}, trial.workloads)
            placement, _ = place_pod(only, pod, sim.policy)
            if placement is None:
                break
            placed.append(placement)
            trial = trial.with_workload(bind(pod, placement))
        if len(placed) < len(request.pods):
            admission = _relocate_unless_known(sim, run, request, t, unplaceable)
            if admission is None:
                run.placements = [(h, ()) for h in homes]
                sim.resume_failed_at[jid] = (epoch, t)
                continue
        else:
            admission = Admission(run.spec.name, True, tuple(placed))
            if sim.trace is not None:
                sim.trace(DecisionRecord(t, "resume", snapshot, request, admission))
        del sim.suspended[jid]
        run.suspended_s += t - run.suspended_at
        run.resumed_at = t
        sim.recorder.bytes_moved += run.parked_bytes
        sim.start(run, admission, t)
        unplaceable.clear()  # the cluster changed


def _relocate_unless_known(
    sim: Engine, run: Run, request: GangRequest, t: float, unplaceable: set[Hashable]
) -> Admission | None:
    """``_relocate``, where relocation is on and no job of the same shape failed
    to relocate earlier in this pass; a failure is remembered in ``unplaceable``."""
    if sim.config.relocate_bytes_per_s <= 0:
        return None
    shape = _shape(run, request)
    if shape in unplaceable:
        return None
    admission = _relocate(sim, run, t)
    if admission is None:
        unplaceable.add(shape)
    return admission


# What a relocation's outcome does not depend on: the job's and pods' names
# (the job holds no GPU while parked, so no resident is its own) and the work
# left (only victim choices read it; a relocation takes none).
_NAME_BLIND = frozenset({"name", "job", "work_left"})


def _shape(run: Run, request: GangRequest) -> Hashable:
    """Everything a relocation's outcome depends on besides the cluster: which
    nodes are candidates (GPUs per pod, smallest-phase memory) and the pods,
    names left out. Two parked jobs of one shape in one pass, with nothing
    started between, get the same answer: on mixed-tenants' closed batch 96%
    of the relocation attempts were such repeats (74,482 of 77,594, seed 0)."""
    pods = tuple(
        tuple(
            (f.name, _hashable(getattr(pod, f.name)))
            for f in fields(pod)
            if f.name not in _NAME_BLIND
        )
        for pod in request.pods
    )
    return (run.spec.gpus_per_pod, run.profile.min_mib, request.priority, pods)


def _hashable(value: object) -> Hashable:
    if isinstance(value, Mapping):
        return tuple(sorted(value.items()))
    assert isinstance(value, Hashable), value
    return value


def _relocate(sim: Engine, run: Run, t: float) -> Admission | None:
    """Place a parked job on other nodes, as a waiting job is placed; None if no room.

    Its host copy must travel first: each pod's parked bytes cross one host
    NIC (``SimConfig.relocate_bytes_per_s``), then go host-to-device as at
    home. Tried only after its own nodes had no room, so it never costs a
    job that could come back in place. The decision goes through the same
    ``place_gang`` as an admission (recorded as "relocate").
    """
    low = sim.fit_floor(run)
    nodes = sim.cluster.candidates(run.spec.gpus_per_pod, low, sim.config.candidates)
    if not nodes:
        return None
    snapshot = sim.cluster.snapshot(nodes, sim.runs, t)
    request = sim.request(run, t)
    admission, _ = place_gang(snapshot, request, sim.policy)
    if not admission.admitted:
        return None
    if sim.trace is not None:
        sim.trace(DecisionRecord(t, "relocate", snapshot, request, admission))
    per_pod = run.parked_bytes / max(run.spec.pods, 1)
    run.delay += per_pod / sim.config.relocate_bytes_per_s
    return admission


def try_preempt(sim: Engine, run: Run, t: float) -> bool:
    """Place the gang after taking lower-priority jobs (or, sized, far larger
    jobs of its own priority: ``ordering.displaces``) off some nodes."""
    low = sim.fit_floor(run)
    limit = sim.config.candidates
    nodes = dict.fromkeys(sim.cluster.candidates(run.spec.gpus_per_pod, low, limit))
    lower = sorted(
        (r for r in sim.runs if r.state in (State.RUNNING, State.LOADING)),
        key=lambda r: (r.spec.priority, r.id),
    )
    mine, left = run.spec.priority, run.work_left()
    for r in lower:
        if r.spec.priority > mine or len(nodes) >= 2 * limit:
            break
        if r.spec.preemptible and displaces(mine, left, r.spec.priority, r.reported_left()):
            nodes.update(dict.fromkeys(n for n, _ in r.placements))
    snapshot = sim.cluster.snapshot(nodes, sim.runs, t)
    request = sim.request(run, t)
    # The conductor's own choice (rlix.core.policy.conduct), as on a cluster.
    plan = plan_preemption(snapshot, request, sim.policy)
    if plan is None:
        return False
    admission, victims = plan.admission, set(plan.victims)
    if sim.trace is not None:
        sim.trace(
            DecisionRecord(t, "preempt", snapshot, request, admission, tuple(sorted(victims)))
        )
    by_name = {r.spec.name: r for r in sim.runs if r.state in (State.RUNNING, State.LOADING)}
    wait = 0.0
    for name in sorted(victims):
        victim = by_name[name]
        sim.recorder.preemptions += 1
        if sim.scheduler.preemption is Preemption.SUSPEND and victim.spec.preemptible:
            wait = max(wait, suspend(sim, victim, t))
        else:
            evict(sim, victim, t)
    run.delay += wait
    sim.start(run, admission, t)
    return True
