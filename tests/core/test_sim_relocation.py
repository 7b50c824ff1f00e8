"""A parked job whose own node stays full resumes on another node, paying the move."""

from __future__ import annotations

from dataclasses import replace

from rlix.core.sim.engine import DecisionRecord, SimConfig, simulate
from rlix.core.sim.schedulers import rlix
from tests.core.test_sim_helpers import mix_of, spec


def _run(config: SimConfig) -> list[DecisionRecord]:
    # Two nodes: a long and a short low-priority job, then a long high-priority
    # one that parks one of them; the short one's node frees long before the
    # high one ends.
    jobs = (
        spec("t/long", 0, priority=0, iterations=60),
        spec("t/short", 1, priority=0, iterations=12),
        spec("t/high", 2, arrival=600.0, priority=10, iterations=60),
    )
    records: list[DecisionRecord] = []
    result = simulate(mix_of(*jobs, nodes=2), rlix(), config, trace=records.append)
    assert result.preemptions == 1 and result.lost_work_gpu_h == 0
    return records


def test_a_parked_job_moves_to_a_freed_node_instead_of_waiting_for_its_own() -> None:
    moved = _run(SimConfig())
    kinds = [r.kind for r in moved]
    assert "relocate" in kinds and "resume" not in kinds
    relocation = next(r for r in moved if r.kind == "relocate")
    parked_home = next(r for r in moved if r.kind == "preempt").admission.placements[0].node
    assert relocation.admission.placements[0].node != parked_home

    stays = _run(replace(SimConfig(), relocate_bytes_per_s=0.0))
    assert "relocate" not in [r.kind for r in stays]
    # Without the move the parked job waits for its own node: it resumes later.
    back = next(r for r in stays if r.kind == "resume")
    assert back.time > relocation.time
