"""The simulator and the extender decide alike on identical snapshots.

The simulator records every admission with the exact snapshot it decided on.
Each recorded snapshot is fed to the extender as the watch would feed it (Node
and Pod objects into its cache), the pod is sent as kube-scheduler sends it
(ExtenderArgs over HTTP, through the ASGI app), and the extender's filter and
prioritize answers must lead to the node the simulator chose. A benchmark of
the simulator therefore measures the policy the extender ships.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import httpx

from rlix.core.sim.engine import DecisionRecord, simulate
from rlix.core.sim.mixes import make_mix
from rlix.core.sim.schedulers import rlix
from rlix.core.snapshot import ClusterSnapshot, Workload
from rlix.extender.app import create_app
from rlix.extender.cache import ADDED, ClusterCache
from tests.builders.objects import extender_args, node_object, pod_object


def _post(app: Any, verb: str, body: bytes) -> Any:
    async def go() -> Any:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return (await client.post(f"/{verb}", content=body)).json()

    return asyncio.run(go())


def _extender_choice(snapshot: ClusterSnapshot, pod: Workload) -> tuple[list[str], str | None]:
    cache = ClusterCache()
    for n in snapshot.nodes.values():
        cache.apply_node(ADDED, node_object(n))
    for w in snapshot.workloads:
        cache.apply_pod(ADDED, pod_object(w))
    cache.mark_synced("nodes")
    cache.mark_synced("pods")
    app = create_app(cache)
    pending = pod_object(replace(pod, node=None, gpu_indices=()))
    names = list(snapshot.nodes)
    filtered = _post(app, "filter", extender_args(pending, names))
    feasible = filtered["NodeNames"] or []
    if not feasible:
        return [], None
    scores = {
        h["Host"]: h["Score"] for h in _post(app, "prioritize", extender_args(pending, feasible))
    }
    # The simulator breaks ties by snapshot order (kube-scheduler at random).
    best = max(feasible, key=lambda n: (scores.get(n, 0), -names.index(n)))
    return feasible, best


def test_every_admission_of_a_simulated_run_is_what_the_extender_answers() -> None:
    records: list[DecisionRecord] = []
    simulate(make_mix("small-lab", seed=3, jobs=12), rlix(), trace=records.append)
    placed = [r for r in records if r.kind == "admit" and r.admission.admitted]
    assert len(placed) >= 5, "the run should admit several jobs"
    compared = 0
    for record in placed:
        # The first pod of each gang is decided on exactly the recorded snapshot.
        first = record.admission.placements[0]
        pod = next(p for p in record.request.pods if p.name == first.pod)
        feasible, best = _extender_choice(record.snapshot, pod)
        assert first.node in feasible, (record.time, json.dumps(feasible))
        assert best == first.node, (record.time, pod.name, best, first.node)
        compared += 1
    assert compared == len(placed)
