"""The phase gate's memory moves (``--park-at-gate``), made with this agent's
suspend and resume in place (``Preemption``).

A gate park is recorded like any suspension (bit-exact copies, a record that
survives an agent restart) but marked ``by`` the gate, with what the pod held
per GPU: it is a turn, not a suspension, so it is not published as
``rlix.io/suspended`` (a conductor would resume it into the memory its
working partner holds), and the gate takes any record that says so (made
before an agent restart, or by a reply that came after the park gave up)
back into its line, with the room its restore needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from rlix.agent.declared import Declared
from rlix.agent.overruns import budget_mib
from rlix.agent.parking_state import PARKED_BY_GATE
from rlix.agent.preemption import Preemption


class GateParking:
    """``phase_gate.Moves`` on this node's Preemption."""

    def __init__(self, preemption: Preemption) -> None:
        self._preemption = preemption

    def park(self, pod: str, held: Mapping[int, int]) -> None:
        self._preemption.suspend_pod(pod, by=PARKED_BY_GATE, held_mib=held)

    def restore(self, pod: str) -> None:
        self._preemption.resume_pod(pod)

    def parked(self) -> dict[str, dict[int, int]]:
        return self._preemption.parked_by_gate()


class DeclaredPeaks(Declared[int]):
    """Pod uid -> the per-GPU MiB it declares at its peak (``rlix.io/gpu-memory-mib``,
    its claim's), from the node's pods as the conducting loop last listed them:
    a pod going in may grow to it, so the gate makes room for that, not for
    what it holds now. Without an API server no pod declares any."""

    def __init__(self) -> None:
        # The peak is read with the pod's other declarations (one malformed
        # annotation makes it unreadable), so all its annotations are the key.
        super().__init__(lambda pod: frozenset(pod.annotations.items()), budget_mib)
