"""A parked job whose own node stays full resumes on another node, paying the move."""

from __future__ import annotations

from dataclasses import replace
from itertools import count

import pytest

from rlix.core.sim import preempting
from rlix.core.sim.engine import DecisionRecord, SimConfig, simulate
from rlix.core.sim.metrics import SimResult
from rlix.core.sim.mixes import closed_batch, make_mix
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


def test_a_relocation_that_failed_is_not_retried_for_the_same_shape_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Mixed-tenants' first 40 jobs on 8 nodes, all at once: dozens of parked
    # jobs, many of one shape (a sweep's), retried together.
    base = make_mix("mixed-tenants", seed=0)
    mix = closed_batch(replace(base, nodes=8, jobs=base.jobs[:40]))
    relocate = preempting._relocate

    def run() -> tuple[SimResult, int]:
        tried = 0

        def counted(sim: preempting.Engine, run: object, t: float) -> object:
            nonlocal tried
            tried += 1
            return relocate(sim, run, t)  # type: ignore[arg-type]

        with monkeypatch.context() as m:
            m.setattr(preempting, "_relocate", counted)
            return simulate(mix, rlix()), tried

    remembered, tried = run()
    # Every job its own shape: each is tried, as before the memo.
    unique = count()
    monkeypatch.setattr(preempting, "_shape", lambda run, request: next(unique))
    each, tried_each = run()
    assert remembered.preemptions > 10
    assert tried < tried_each / 2
    # The same decisions: a shape's failure answers for its twins.
    assert remembered.jct_s == each.jct_s and remembered.events == each.events
