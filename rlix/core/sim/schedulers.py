"""The schedulers a run compares: policy + queue order + what preemption does.

The placement decisions all come from a ``PlacementPolicy``; what differs here
is what the *cluster* does around them, which is what separates the systems:

* ``kube-default`` -- arrival order, no preemption (what you get with the
  default scheduler and no PriorityClasses), exclusive GPUs, spread.
* ``gang-binpack`` -- priority order, bin-packing, preemption by *eviction*:
  the victim job dies, restarts from its last checkpoint and reloads it.
* ``rlix`` -- priority order, and inside a priority the least expected work
  left first (``rlix.core.policy.ordering``), RLix's placement (GPUs shared by memory fit,
  phase complementarity and the sharing rules of
  ``rlix.core.policy.placement.sharing``, judged with the run's interference
  matrix), preemption by *suspension in place*: the victim's device memory is
  parked in host RAM and restored later, on another node if its own stays
  full; nothing is lost. Because parking loses nothing, a waiting job may
  also park a running job of its own priority that has more than twice its
  work left.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from rlix.core.policy.port import PlacementPolicy
from rlix.core.sim.baselines import GANG_BINPACK, KUBE_DEFAULT
from rlix.core.sim.interference import Interference


class QueueOrder(enum.Enum):
    FIFO = "fifo"  # arrival only
    PRIORITY = "priority"  # priority, then arrival
    # priority, then inside it the job that would set the finish, then the
    # least expected work left (``rlix.core.policy.ordering``); a far smaller
    # job may park a running one of its class
    SHORTEST = "shortest"


class Preemption(enum.Enum):
    NONE = "none"
    EVICT = "evict"
    SUSPEND = "suspend"


@dataclass(frozen=True)
class Scheduler:
    name: str
    policy: PlacementPolicy
    order: QueueOrder
    preemption: Preemption


def kube_default() -> Scheduler:
    return Scheduler("kube-default", KUBE_DEFAULT, QueueOrder.FIFO, Preemption.NONE)


def gang_binpack() -> Scheduler:
    return Scheduler("gang-binpack", GANG_BINPACK, QueueOrder.PRIORITY, Preemption.EVICT)


def rlix(
    interference: Interference | None = None,
    *,
    parks_at_gate: bool = False,
    phase_gate: bool = True,
) -> Scheduler:
    """RLix's policy; with ``interference``, its sharing rules decide with that model
    (``rlix.core.policy.placement.sharing``, rules 4-6), else with the cluster
    components' default rules (no model: rules 1-3 only). ``parks_at_gate``:
    the nodes park at the phase gate (the agent's ``--park-at-gate``), so pairs
    that take turns need the larger peak, not both (rule 6 by turns), and the
    engine plays the parking out (``engine``: the room test at the gate, each
    turn's copies charged). ``phase_gate=False``: the nodes run no phase gate
    (the chart's ``nodeAgent.phaseGate.enabled: false``, the components'
    ``--no-phase-gate``), so rule 5 judges pods that idle part of their cycle
    as they drift and the engine lets every phase in at once."""
    from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules
    from rlix.core.policy.rlix_policy import RLixPolicy

    if parks_at_gate and interference is None:
        raise ValueError("parking at the gate needs rules with an interference matrix")
    if parks_at_gate and not phase_gate:
        raise ValueError("parking at the gate needs the nodes' phase gate")
    rules = DEFAULT_RULES if interference is None else SharingRules(interference.cells)
    if parks_at_gate:
        rules = replace(rules, parks_at_gate=True)
    if not phase_gate:
        rules = replace(rules, phase_gate=False)
    return Scheduler("rlix", RLixPolicy(rules=rules), QueueOrder.SHORTEST, Preemption.SUSPEND)


SCHEDULERS = {"kube-default": kube_default, "gang-binpack": gang_binpack, "rlix": rlix}


def scheduler(name: str, interference: Interference) -> Scheduler:
    """The named scheduler as the benchmark runs it: RLix decides with the
    interference model the run is measured under (the baselines ignore it)."""
    if name not in SCHEDULERS:
        raise KeyError(f"unknown scheduler {name!r}; known: {', '.join(SCHEDULERS)}")
    return rlix(interference) if name == "rlix" else SCHEDULERS[name]()
