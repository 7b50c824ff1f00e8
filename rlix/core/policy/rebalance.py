"""Whether splitting a GPU-sharing pair onto freed GPUs pays (simulator only).

When GPUs empty out and nothing waits for them, a pair formed under load
would keep sharing for the rest of both jobs. Moving one of the two (its
whole gang) onto empty GPUs makes both run at rate 1, but the mover waits
while its resident memory is copied out and back in. ``split_pair_gain``
weighs the two with plain numbers, so it is testable without a simulation:

* the pair would still overlap for ``W = min(R_m / r_m, R_p / r_p)`` wall
  seconds (``R`` alone-seconds left, ``r`` expected paired rate, from
  ``sharing.pair_rates``);
* over that span the mover saves ``W * (1 - r_m)`` seconds, the partner
  ``W * (1 - r_p)``; the mover pays ``copy_s`` (device-to-host plus
  host-to-device, plus node-to-node if it changes node);
* the move pays only when the mover's own saving is at least
  ``REBALANCE_MARGIN`` times its copy: the estimate is an expectation over
  phase mixes, a new arrival may want the GPUs back, and the mover must not
  lose even if the partner's saving is discounted entirely;
* and the move must leave at least ``REBALANCE_RESERVE`` times the mover's
  GPUs empty: a pair delivers more than one GPU's progress (rule 5), so the
  freed GPUs are worth more to the next arrival than to a split, and a split
  that takes the last empty GPUs makes that arrival pair (or wait) instead.
  Without the reserve the simulator's light-load run got worse (mean JCT
  746 -> 750 min, p95 1324 -> 1411 min; docs/simulator.md).

The cluster's conductor does not move pods between GPUs (a DRA claim pins a
pod's GPU); this rule is the simulator's RLix only, used where its sharing
rules carry an interference matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# The mover's expected saving must be at least this many times its copy.
REBALANCE_MARGIN: Final = 2.0
# Empty GPUs that must remain after the move, in multiples of the mover's GPUs.
REBALANCE_RESERVE: Final = 3


@dataclass(frozen=True)
class PairSplit:
    """One candidate move: the mover's and its partner's state and the copy."""

    mover_left_s: float  # alone-seconds the mover still has to run
    mover_rate: float  # its expected rate while paired (0 < r <= 1)
    partner_left_s: float
    partner_rate: float
    copy_s: float  # the mover's wait: out, (across nodes) over, and back in
    mover_gpus: int  # GPUs the mover's gang holds
    empty_gpus: int  # GPUs holding no pod in the cluster before the move


def split_pair_gain(
    c: PairSplit, margin: float = REBALANCE_MARGIN, reserve: int = REBALANCE_RESERVE
) -> float | None:
    """Wall seconds the pair saves together by the move, or None if it does not pay."""
    if c.mover_rate <= 0 or c.partner_rate <= 0:
        return None
    if c.empty_gpus - c.mover_gpus < reserve * c.mover_gpus:
        return None
    overlap = min(c.mover_left_s / c.mover_rate, c.partner_left_s / c.partner_rate)
    mover_saves = overlap * (1.0 - c.mover_rate)
    if mover_saves <= 0 or mover_saves < margin * c.copy_s:
        return None
    return mover_saves + overlap * (1.0 - c.partner_rate) - c.copy_s
