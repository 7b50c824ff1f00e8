"""Room at the phase gate: which partners must leave a GPU before a pod may work on it.

Two pods that take turns (``turns``; ``sharing.takes_turns``) never work at
the same time, yet each holds its memory through the other's turn: a
disaggregated job's pods hold their weights, optimizer state or KV cache in
every phase, idle ones included. So a pair that takes turns on a GPU needs
both peaks to fit it, though only one of them works at any moment. A pod
that does not work is at a safe point (waiting at the gate, or outside every
phase block), where its memory can be parked bit for bit and brought back
(the node agent's suspend in place, docs/node-agent.md). Parked there, the
pair needs the larger peak, not both (docs/simulator.md, "Memory, not
order"). This module decides which pods to park so that one pod may go in.

Why only pods that do not work: a pod inside a busy phase has kernels in
flight; it is parked only at its next phase boundary, which may be minutes
away, so it cannot make room now. Where working pods alone leave too little,
the entrant waits, whatever its wait's bound says (going in would run the
GPU out of memory, which loses more than any wait).

The one exception is a weight sync (``parks_working_for``): a job's sync
holds up both of its pools, every GPU of the job, for seconds, while a
partner's training runs for minutes. A pod whose process promised to stop
at safe points inside its phase (the client's ``rlix.phase(...,
safe_points=True)``, with ``rlix.safe_point()`` between steps) can be
parked within a step, so a sync that does not fit may park it
(``interruptible``) rather than wait for its phase to end; the gate brings
it back once the sync has left (``turns``). Pods that do not work are
parked first. It pays only where the pod's phase has longer left than the
stop costs it (``worth_stopping``): stopping a phase about to end delays
the partner by the sync and the copies for nothing, and knocks two jobs
that took turns in step out of it. Measured in the simulator
(docs/simulator.md, "A sync that parks a working trainer").

Why the largest first: each park costs a copy out and one back (seconds at
PCIe speed, both ways), so fewer, larger parks cost fewer copies for the
same room. Ties go by name, so the same state always parks the same pods.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from rlix.core.phases import Phase

# GPU index -> MiB a pod holds there while its memory is on the GPUs.
Footprint = Mapping[int, int]


# Memory a stopped pod sends out and takes back, per MiB, at the host link's
# floors (PCIe Gen5 x16, pinned: 53 GB/s out, 40 GB/s back; the simulator's
# ``hardware``, which a test keeps equal). A node that copies slower stops
# pods a little more often than pays.
_MIB = 1 << 20
ROUND_TRIP_S_PER_MIB = _MIB / 53e9 + _MIB / 40e9


def parks_working_for(phase: Phase) -> bool:
    """Whether a pod entering ``phase`` may park working pods that stop at
    safe points (module docstring): a weight sync only."""
    return phase is Phase.WEIGHT_SYNC


def worth_stopping(left_s: float | None, sync_s: float, held_mib: int) -> bool:
    """Whether a sync of ``sync_s`` seconds should park a working pod that
    holds ``held_mib`` per GPU and has ``left_s`` of its phase left, rather
    than wait for that phase to end. Waiting costs the syncing job the time
    left, on every GPU it holds (both its pools wait on the sync); stopping
    costs the pod's job the sync and the pod's memory out and back. Unknown
    time left (no declared cycle): wait, as without stopping."""
    return left_s is not None and left_s > sync_s + held_mib * ROUND_TRIP_S_PER_MIB


@dataclass(frozen=True, slots=True)
class Room:
    """The entrant fits once ``park`` (pods, largest first) have left."""

    park: tuple[str, ...] = ()


def room_for(
    entrant: str,
    footprints: Mapping[str, Footprint],
    resident: Collection[str],
    working: Collection[str],
    capacity: Mapping[int, int],
    *,
    movable: Collection[str] | None = None,
    interruptible: Collection[str] = (),
) -> Room | None:
    """The pods to park so that ``entrant`` fits on every GPU it holds memory on.

    ``footprints``: every pod's memory per GPU (the entrant's included, also
    where it is parked now and would come back); ``resident``: the pods whose
    memory is on the GPUs now (the entrant counts whether or not it is among
    them); ``working``: pods inside a busy phase, which are never parked here;
    ``capacity``: each GPU's usable MiB (a GPU not named is not limited here);
    ``movable``: the pods that can be parked at all (None: every pod; on a node,
    those whose processes all registered hooks and ask the gate while parked);
    ``interruptible``: pods that work but may be parked all the same, after
    every pod that does not work (``parks_working_for``). None: the pods that
    work, or cannot be moved, leave too little room.
    """
    mine = footprints.get(entrant, {})
    on_gpus = set(resident) | {entrant}
    held = {gpu: sum(footprints.get(pod, {}).get(gpu, 0) for pod in on_gpus) for gpu in capacity}
    park: list[str] = []
    for gpu in sorted(g for g in mine if g in capacity):
        while held[gpu] > capacity[gpu]:
            candidates = [
                (footprints[pod].get(gpu, 0), pod)
                for pod in on_gpus
                if pod != entrant
                and (pod not in working or pod in interruptible)
                and (movable is None or pod in movable)
                and pod not in park
                and footprints.get(pod, {}).get(gpu, 0) > 0
            ]
            if not candidates:
                return None
            _, pod = min(candidates, key=lambda c: (c[1] in working, -c[0], c[1]))
            park.append(pod)
            for g, mib in footprints[pod].items():
                if g in held:
                    held[g] -= mib
    return Room(tuple(park))
