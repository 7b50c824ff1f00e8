"""Splitting a GPU-sharing pair onto freed GPUs (simulator's RLix with a matrix)."""

from __future__ import annotations

import pytest

from rlix.core.policy.rebalance import (
    REBALANCE_MARGIN,
    REBALANCE_RESERVE,
    PairSplit,
    split_pair_gain,
)
from rlix.core.sim import hardware as hw
from rlix.core.sim.engine import DecisionRecord, SimConfig, Simulation, simulate
from rlix.core.sim.runs import Run
from rlix.core.sim.schedulers import rlix
from rlix.core.sim.workload import JobProfile
from tests.core.test_sim_disaggregated import PAYS
from tests.core.test_sim_helpers import mix_of, spec

# Three nodes. t/a takes GPUs 0-3 of node 0; two short 32B jobs fill nodes 1
# and 2; t/x takes GPUs 4-7 of node 0; t/b finds no empty GPU and pairs with
# t/a (a pair pays under PAYS; the 32B jobs leave it no room). When the 32B
# jobs end, 16 GPUs are empty: enough for a split (REBALANCE_RESERVE).
A = spec("t/a", 0, gpus=4, iterations=40)
Y = spec("t/y", 1, arrival=0.5, gpus=8, iterations=2, model="32b")
Z = spec("t/z", 2, arrival=0.6, gpus=8, iterations=2, model="32b")
X = spec("t/x", 3, arrival=1.0, gpus=4, iterations=4)
B = spec("t/b", 4, arrival=2.0, gpus=4, iterations=40)
JOBS = (A, Y, Z, X, B)


class Watched(Simulation):
    """Records every running job's (rate, stepping) whenever a job becomes ready."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.readies: list[tuple[float, str, dict[str, tuple[float, bool]]]] = []

    def _ready(self, run: Run, t: float) -> None:
        super()._ready(run, t)
        rates = {r.spec.name: (r.rate, r.stepping) for r in self.runs if r.state.value == "running"}
        self.readies.append((t, run.spec.name, rates))


def test_a_pair_splits_onto_freed_gpus_pays_the_copy_and_both_run_alone() -> None:
    records: list[DecisionRecord] = []
    mix = mix_of(*JOBS, nodes=3)
    sim = Watched(mix, rlix(PAYS), SimConfig(interference=PAYS), records.append)
    result = sim.run()
    assert result.jobs == 5 and result.rebalances == 1
    (move,) = [r for r in records if r.kind == "rebalance"]
    admitted = {r.request.job: r.admission.placements[0] for r in records if r.kind == "admit"}
    assert (admitted["t/b"].node, admitted["t/b"].gpus) == ("node-0000", (0, 1, 2, 3))
    assert move.request.job in ("t/a", "t/b")  # one of the pair, whole gang
    (dest,) = move.admission.placements
    assert dest.node in ("node-0001", "node-0002")  # the 32B jobs' freed node
    assert move.time == pytest.approx(max(result.jct_s[1] + 0.5, result.jct_s[2] + 0.6))
    # The mover waits for its copy out, over to the other node, and back in.
    mover = move.request.job
    (t_ready, _, rates) = next(r for r in sim.readies if r[1] == mover and r[0] > move.time)
    per_gpu = [m * hw.MIB for m in JobProfile(A).memory_mib.values()]
    copies = [
        b / hw.PCIE_D2H_BYTES_PER_S
        + b / hw.PCIE_H2D_BYTES_PER_S
        + 4 * b / hw.NODE_TO_NODE_BYTES_PER_S
        for b in per_gpu
    ]
    assert any(t_ready - move.time == pytest.approx(c) for c in copies)
    # Then both run alone (t/x is still on node 0, on its own GPUs).
    assert rates["t/a"] == rates["t/b"] == (1.0, False)


def test_no_split_while_a_job_waits_for_gpus() -> None:
    # t/w needs all three nodes: it waits from t = 3 until the pair is gone,
    # so the GPUs the 32B jobs free must not go to a move.
    w = spec("t/w", 5, arrival=3.0, gpus=24, iterations=2)
    result = simulate(mix_of(*JOBS, w, nodes=3), rlix(PAYS), SimConfig(interference=PAYS))
    assert result.jobs == 6
    assert result.rebalances == 0


def test_no_split_under_the_cluster_default_rules() -> None:
    # No matrix (the extender's and conductor's rules): nothing moves.
    result = simulate(mix_of(*JOBS, nodes=3), rlix(), SimConfig(interference=PAYS))
    assert result.rebalances == 0


def test_a_split_must_pay_for_its_copy() -> None:
    # Paired at 0.75 each; copying takes 10 s; 4 GPUs move, 16 are empty.
    # With 600 alone-seconds left the pair overlaps 800 s and the mover
    # saves 200 s >= 2 x 10 s: it pays.
    long = PairSplit(600.0, 0.75, 900.0, 0.75, 10.0, 4, 16)
    assert split_pair_gain(long) == pytest.approx(200.0 + 200.0 - 10.0)
    # 45 alone-seconds left: it saves 15 s < 2 x 10 s of copy: no move.
    short = PairSplit(45.0, 0.75, 900.0, 0.75, 10.0, 4, 16)
    assert REBALANCE_MARGIN * 10.0 > 15.0
    assert split_pair_gain(short) is None
    # The partner about to finish bounds the overlap the same way.
    assert split_pair_gain(PairSplit(600.0, 0.75, 30.0, 0.75, 10.0, 4, 16)) is None
    # Nothing to win from a pair that does not slow the mover.
    assert split_pair_gain(PairSplit(600.0, 1.0, 900.0, 0.75, 0.0, 4, 16)) is None


def test_a_split_leaves_empty_gpus_for_the_next_arrival() -> None:
    # 4 GPUs move: at least 4 + 3 x 4 = 16 must be empty before the move.
    assert REBALANCE_RESERVE == 3
    assert split_pair_gain(PairSplit(600.0, 0.75, 900.0, 0.75, 10.0, 4, 15)) is None
    assert split_pair_gain(PairSplit(600.0, 0.75, 900.0, 0.75, 10.0, 4, 16)) is not None
