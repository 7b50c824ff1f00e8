"""The schedulers a run compares: policy + queue order + what preemption does.

The placement decisions all come from a ``PlacementPolicy``; what differs here
is what the *cluster* does around them, which is what separates the systems:

* ``kube-default`` -- arrival order, no preemption (what you get with the
  default scheduler and no PriorityClasses), exclusive GPUs, spread.
* ``gang-binpack`` -- priority order, bin-packing, preemption by *eviction*:
  the victim job dies, restarts from its last checkpoint and reloads it.
* ``rlix`` -- priority order, RLix's placement (GPUs shared by memory fit and
  phase complementarity), preemption by *suspension in place*: the victim's
  device memory is parked in host RAM and restored later; nothing is lost.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rlix.core.policy.port import PlacementPolicy
from rlix.core.sim.baselines import GANG_BINPACK, KUBE_DEFAULT


class QueueOrder(enum.Enum):
    FIFO = "fifo"  # arrival only
    PRIORITY = "priority"  # priority, then arrival


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


def rlix() -> Scheduler:
    from rlix.core.policy.rlix_policy import RLixPolicy

    return Scheduler("rlix", RLixPolicy(), QueueOrder.PRIORITY, Preemption.SUSPEND)


SCHEDULERS = {"kube-default": kube_default, "gang-binpack": gang_binpack, "rlix": rlix}
