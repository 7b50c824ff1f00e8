"""Each pod's declared cycle, for the phase gate: which pairs take turns.

The operator writes ``rlix.io/phase-seconds`` on a trainer or rollout pod (the
seconds of one iteration it spends in each phase, from the RLJob's
``phaseProfile``); the extender and the operator weigh pairs by it. The gate
needs it too: the simulator gates only pairs that take turns
(``sharing.takes_turns``: both idle part of their cycle, and turns beat
drifting side by side), and without a pod's cycle the gate cannot tell. The
agent's conducting loop lists this node's pods every pass anyway; this reads
their annotations from that listing, so no new call reaches the API server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from rlix.core import names
from rlix.core.objects import facts as f
from rlix.core.policy.placement.turns import Cycle
from rlix.core.snapshot import load_profile_of

if TYPE_CHECKING:
    from rlix.agent.conducting import NodePod

log = logging.getLogger(__name__)


class DeclaredCycles:
    """Pod uid -> the cycle it declares, from the node's pods as last listed."""

    def __init__(self) -> None:
        self._listing: Callable[[], Sequence[NodePod]] = tuple
        # The annotation's raw value -> its cycle (None: malformed), kept for
        # the values the node's pods carry now, so each is parsed once.
        self._parsed: dict[str, Cycle | None] = {}

    def follow(self, listing: Callable[[], Sequence[NodePod]]) -> None:
        """Read pods from ``listing`` (the conducting loop's last listing)."""
        self._listing = listing

    def __call__(self) -> Mapping[str, Cycle]:
        out: dict[str, Cycle] = {}
        parsed: dict[str, Cycle | None] = {}
        for pod in self._listing():
            raw = pod.annotations.get(names.ANNOTATION_PHASE_SECONDS)
            if raw is None:
                continue
            if raw in parsed:
                cycle = parsed[raw]
            elif raw in self._parsed:
                cycle = parsed[raw] = self._parsed[raw]
            else:
                cycle = parsed[raw] = self._parse(pod, raw)
            if cycle is not None:
                out[pod.uid] = cycle
        self._parsed = parsed
        return out

    @staticmethod
    def _parse(pod: NodePod, raw: str) -> Cycle | None:
        reading = f.Reading("Pod", f"{pod.namespace}/{pod.name}")
        seconds = reading.get(f.POD_PHASE_SECONDS, raw)
        for error in reading.errors:  # once per value: the gate treats it as undeclared
            log.warning("phase gate: %s; it takes turns at every meeting", error)
        if reading.errors:
            return None
        profile, iteration_s = load_profile_of(seconds)
        return (profile, iteration_s) if profile else None
