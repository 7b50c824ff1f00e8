"""What a run is configured with, and what it records per decision."""

from __future__ import annotations

from dataclasses import dataclass

from rlix.core.policy.admission import Admission, GangRequest
from rlix.core.policy.ordering import DEFAULT_GRACE, Grace
from rlix.core.sim import hardware as hw
from rlix.core.sim.interference import DEFAULT, Interference
from rlix.core.snapshot import ClusterSnapshot

RESUME_RETRY_S = 60.0  # how often a parked job re-checks its node without a departure


@dataclass(frozen=True)
class SimConfig:
    seed: int = 0
    candidates: int = 32  # nodes per pool shown to the policy for one pod
    sample_s: float = 300.0  # metric sampling interval (simulated seconds)
    suspend_bytes_per_s: float = hw.PCIE_D2H_BYTES_PER_S
    restore_bytes_per_s: float = hw.PCIE_H2D_BYTES_PER_S
    memory_mib: int = hw.H200_MEMORY_MIB
    interference: Interference = DEFAULT  # I[victim][co-runner]; see interference.py
    # A parked job whose own node stays full may resume on other nodes, its
    # host copy moved there first at this speed (0: only on its own node).
    relocate_bytes_per_s: float = hw.NODE_TO_NODE_BYTES_PER_S
    # Sized ordering: how long a job of a higher class queues among the lowest
    # (the operator's --top-grace / --class-grace; ``ordering.STRICT``: not at all).
    grace: Grace = DEFAULT_GRACE


@dataclass(frozen=True)
class DecisionRecord:
    """One decision and the exact input it was made on (for replay tests)."""

    time: float
    kind: str  # "admit" | "preempt" | "resume" | "relocate" | "rebalance"
    snapshot: ClusterSnapshot
    request: GangRequest
    admission: Admission
    victims: tuple[str, ...] = ()
