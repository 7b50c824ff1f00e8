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

Why the largest first: each park costs a copy out and one back (seconds at
PCIe speed, both ways), so fewer, larger parks cost fewer copies for the
same room. Ties go by name, so the same state always parks the same pods.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

# GPU index -> MiB a pod holds there while its memory is on the GPUs.
Footprint = Mapping[int, int]


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
) -> Room | None:
    """The pods to park so that ``entrant`` fits on every GPU it holds memory on.

    ``footprints``: every pod's memory per GPU (the entrant's included, also
    where it is parked now and would come back); ``resident``: the pods whose
    memory is on the GPUs now (the entrant counts whether or not it is among
    them); ``working``: pods inside a busy phase, which are never parked here;
    ``capacity``: each GPU's usable MiB (a GPU not named is not limited here);
    ``movable``: the pods that can be parked at all (None: every pod; on a node,
    those whose processes all registered hooks and ask the gate while parked).
    None: the pods that work, or cannot be moved, leave too little room.
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
                and pod not in working
                and (movable is None or pod in movable)
                and pod not in park
                and footprints.get(pod, {}).get(gpu, 0) > 0
            ]
            if not candidates:
                return None
            _, pod = min(candidates, key=lambda mib_pod: (-mib_pod[0], mib_pod[1]))
            park.append(pod)
            for g, mib in footprints[pod].items():
                if g in held:
                    held[g] -= mib
    return Room(tuple(park))
