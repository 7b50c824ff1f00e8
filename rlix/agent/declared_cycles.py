"""Each pod's declared cycle, for the phase gate: which pairs take turns.

The operator writes ``rlix.io/phase-seconds`` on a trainer or rollout pod (the
seconds of one iteration it spends in each phase, from the RLJob's
``phaseProfile``); the extender and the operator weigh pairs by it. The gate
needs it too: the simulator gates only pairs that take turns
(``sharing.takes_turns``: both idle part of their cycle, and turns beat
drifting side by side), and without a pod's cycle the gate cannot tell. The
agent's conducting loop lists this node's pods every pass anyway; this reads
their annotations from that listing (``rlix.agent.declared``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rlix.agent.declared import Declared
from rlix.core import names
from rlix.core.objects import facts as f
from rlix.core.policy.placement.turns import Cycle
from rlix.core.snapshot import load_profile_of

if TYPE_CHECKING:
    from rlix.agent.conducting import NodePod

log = logging.getLogger(__name__)


class DeclaredCycles(Declared[Cycle]):
    """Pod uid -> the cycle it declares, from the node's pods as last listed."""

    def __init__(self) -> None:
        super().__init__(lambda pod: pod.annotations.get(names.ANNOTATION_PHASE_SECONDS), _parse)


def _parse(pod: NodePod) -> Cycle | None:
    reading = f.Reading("Pod", f"{pod.namespace}/{pod.name}")
    seconds = reading.get(f.POD_PHASE_SECONDS, pod.annotations[names.ANNOTATION_PHASE_SECONDS])
    for error in reading.errors:  # once per value: the gate treats it as undeclared
        log.warning("phase gate: %s; it takes turns at every meeting", error)
    if reading.errors:
        return None
    profile, iteration_s = load_profile_of(seconds)
    return (profile, iteration_s) if profile else None
