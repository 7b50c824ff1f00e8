"""Extender latency per verb at 100, 1,000 and 5,000 nodes.

kube-scheduler calls the extender on every scheduling cycle; extenders that
took tens of ms per call capped clusters at under 10 pods/s (kubernetes#72634).
This measures the code that ships, through the ASGI app in-process (request
parsing, policy, JSON framing; no sockets) and, with --uvicorn, over loopback.

Two regimes per verb:
* warm: no watch event between calls, the memoised view is reused;
* churn: one pod changes phase before every call (what a busy RL cluster does:
  phases flip every few seconds), so the cache must refresh between calls.

A second table runs filter and prioritize on one cluster twice, side by side:
with the sharing rules a cluster gets by default (no interference matrix) and
with the H200 matrix (``--interference``, rules 4-6 on), its pods saying how
they spend an iteration (``rlix.io/phase-seconds``), so rule 5 weighs pairs by
their expected progress and rule 6 checks that both peaks fit the GPU: what
giving the extender a matrix costs per call.

Writes bench/results/extender_latency.md and prints the same tables.
Run: .venv/bin/python bench/extender_latency.py [--sizes 100 1000 5000] [--repeat 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules
from rlix.core.snapshot import ClusterSnapshot
from rlix.extender.app import create_app
from rlix.extender.cache import MODIFIED, ClusterCache

# The scenario and object builders live with the tests (they never ship).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.builders.objects import (
    extender_args,
    node_object,
    pod_object,
    preemption_args,
    uid_for,
)
from tests.builders.placement import cluster, node, pod

PHASES = ["rollout", "scoring", "training", "weight-sync"]
RESULTS = Path(__file__).parent / "results" / "extender_latency.md"


def feasible_nodes_to_find(n: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind with percentageOfNodesToScore unset
    (pkg/scheduler/schedule_one.go): 50 % minus 1 % per 125 nodes, at least 5 %
    and at least 100 nodes."""
    if n < 100:
        return n
    percentage = max(50 - n // 125, 5)
    return max(n * percentage // 100, 100)


# How pods spend a 360 s iteration (grpo-trl.yaml's pools, verl's colocated
# trainer): what the operator writes from phaseProfile.
CYCLES = (
    (("rollout", 250 / 360, 1.0), ("idle", 110 / 360, 0.0)),
    (("scoring", 20 / 360, 1.0), ("training", 100 / 360, 1.0), ("idle", 240 / 360, 0.0)),
    (("rollout", 240 / 360, 1.0), ("scoring", 20 / 360, 1.0), ("training", 100 / 360, 1.0)),
)


def build_cluster(n_nodes: int, seed: int = 7, *, cycles: bool = False) -> ClusterSnapshot:
    """8 x H100 per node, racks of 18 nodes (NVLink domains), ~70 % of nodes busy
    with a mix of RL jobs: 8-GPU training gangs and 1-2 GPU rollout workers.
    ``cycles``: each pod also says how it spends an iteration (``CYCLES``)."""
    rng = random.Random(seed)
    c = cluster().with_nodes(
        *[node(f"node-{i:05d}").gpus(8).domain(f"rack-{i // 18}") for i in range(n_nodes)]
    )
    pods = []
    for i in range(n_nodes):
        if rng.random() > 0.7:
            continue
        name = f"node-{i:05d}"
        job = f"job-{rng.randrange(max(n_nodes // 4, 1))}"
        gpu = 0
        while gpu < 8:
            width = rng.choice([1, 1, 2, 4])
            width = min(width, 8 - gpu)
            phase = rng.choice(PHASES)
            built = (
                pod(f"{job}-{name}-{gpu}")
                .job(job)
                .role(rng.choice(["rollout", "trainer", "reward"]))
                .gpus(width)
                .memory(rollout=rng.randrange(20, 40) * 1024, training=rng.randrange(30, 60) * 1024)
                .phase(phase)
                .priority(rng.choice([0, 0, 10, 100]))
                .on(name, *range(gpu, gpu + width))
            )
            if cycles:
                built = built.load(*rng.choice(CYCLES)).iteration(360)
            pods.append(built)
            gpu += width
    return c.with_pods(*pods).build()


def fed_cache(snap: ClusterSnapshot, rules: SharingRules = DEFAULT_RULES) -> ClusterCache:
    cache = ClusterCache(rules)
    cache.replace_nodes(node_object(n) for n in snap.nodes.values())
    cache.replace_pods(pod_object(w) for w in snap.workloads)
    return cache


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    send: Callable[[str, bytes], Any],
    verb: str,
    body: bytes,
    repeat: int,
    before: Callable[[], None],
) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU milliseconds per call. The app runs in this thread, so
    thread CPU time is the request's own cost, whatever else the host runs."""
    wall, cpu = [], []
    for _ in range(repeat):
        before()
        start, start_cpu = time.perf_counter(), time.thread_time()
        r = await send(verb, body)
        cpu.append((time.thread_time() - start_cpu) * 1000)
        wall.append((time.perf_counter() - start) * 1000)
        assert r.status_code == 200, r.text
    return wall, cpu


async def run_size(
    n: int,
    repeat: int,
    client: httpx.AsyncClient,
    cache: ClusterCache,
    regimes: tuple[str, ...] = ("warm", "churn"),
    *,
    verbs: tuple[str, ...] = ("filter", "prioritize", "preempt"),
    cycle: bool = False,
) -> list[dict[str, Any]]:
    snap = cache.view().snapshot
    names = list(snap.nodes)
    pending_pod = pod("pending-rollout").job("job-1").role("rollout").gpus(1)
    pending_pod = pending_pod.memory(rollout=30 * 1024)
    if cycle:
        pending_pod = pending_pod.load(*CYCLES[0]).iteration(360)
    pending = pod_object(pending_pod.build())
    filt = extender_args(pending, names)
    feasible = (await client.post("/filter", content=filt)).json()["NodeNames"]
    prio = extender_args(pending, feasible)
    # Preemption: the scheduler sends max(100, 10 %) candidate nodes, a victim or two each.
    vip = pod_object(pod("vip").job("vip").gpus(8).memory(60 * 1024).priority(1000).build())
    busy = [w for w in snap.workloads if w.priority < 1000]
    by_node: dict[str, list[str]] = {}
    for w in busy:
        by_node.setdefault(w.node or "", []).append(uid_for(w.name))
    cand = list(by_node.items())[: max(100, n // 10)]
    pre = preemption_args(vip, dict(cand))

    flip_target = snap.workloads[0]
    flip_obj = pod_object(flip_target)
    state = {"i": 0}

    def churn() -> None:
        state["i"] += 1
        flip_obj["metadata"]["annotations"]["rlix.io/phase"] = PHASES[state["i"] % 4]
        cache.apply_pod(MODIFIED, flip_obj)

    async def send(verb: str, body: bytes) -> Any:
        return await client.post(f"/{verb}", content=body)

    # What kube-scheduler sends with its default percentageOfNodesToScore: it
    # stops looking once it has found this many feasible nodes.
    sample = feasible[: feasible_nodes_to_find(n)]
    sampled = (
        ("filter", extender_args(pending, sample), len(sample)),
        ("prioritize", extender_args(pending, sample), len(sample)),
    )

    rows = []
    for verb, body, count, regime_names in (
        ("filter", filt, n, ("warm", "churn")),
        ("prioritize", prio, len(feasible), ("warm", "churn")),
        ("preempt", pre, len(cand), ("warm", "churn")),
        *((v, b, c, ("default-sample",)) for v, b, c in sampled),
    ):
        for regime, before in (
            ("warm", lambda: None),
            ("churn", churn),
            ("default-sample", lambda: None),
        ):
            if regime not in regime_names or (regime != "default-sample" and regime not in regimes):
                continue
            if verb not in verbs:
                continue
            await measure(send, verb, body, 5, before)  # warm-up
            samples, cpu = await measure(send, verb, body, repeat, before)
            rows.append(
                {
                    "nodes": n,
                    "verb": verb,
                    "regime": regime,
                    "names_sent": count,
                    "p50": statistics.median(samples),
                    "p99": pct(samples, 0.99),
                    "max": max(samples),
                    "cpu_p50": statistics.median(cpu),
                    "cpu_p99": pct(cpu, 0.99),
                }
            )
    return rows


async def run_asgi(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        cache = fed_cache(build_cluster(n))
        app = create_app(cache, freeze_gc=True)  # as rlix-extender runs it
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
            for r in await run_size(n, repeat, client, cache):
                rows.append({"transport": "asgi", **r})
    return rows


async def run_rules(n: int, repeat: int) -> list[dict[str, Any]]:
    """Filter and prioritize at ``n`` nodes whose pods say their cycles, without
    and with the H200 matrix, alternating per verb so drift hits both alike."""
    snap = build_cluster(n, cycles=True)
    rows = []
    for rules, label in ((DEFAULT_RULES, "none (rules 1-3)"), (SharingRules(), "H200 (rules 1-6)")):
        cache = fed_cache(snap, rules)
        transport = httpx.ASGITransport(app=create_app(cache, freeze_gc=True))
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
            for r in await run_size(
                n, repeat, client, cache, verbs=("filter", "prioritize"), cycle=True
            ):
                rows.append({"transport": "asgi", "matrix": label, **r})
    return rows


def rules_table(rows: list[dict[str, Any]]) -> str:
    """The two rule sets side by side per (verb, regime), with the ratio."""
    by = {(r["matrix"], r["verb"], r["regime"]): r for r in rows}
    labels = list(dict.fromkeys(r["matrix"] for r in rows))
    lines = [
        f"| nodes | verb | regime | names sent | p50 ms {labels[0]} | p50 ms {labels[1]} "
        f"| ratio | CPU p99 ms {labels[0]} | CPU p99 ms {labels[1]} |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (matrix, verb, regime), base in by.items():
        if matrix != labels[0]:
            continue
        other = by[(labels[1], verb, regime)]
        sent = {base["names_sent"], other["names_sent"]}
        names = " / ".join(str(c) for c in (base["names_sent"], other["names_sent"]))
        lines.append(
            f"| {base['nodes']} | {verb} | {regime} | {names if len(sent) > 1 else sent.pop()} "
            f"| {base['p50']:.2f} | {other['p50']:.2f} | {other['p50'] / base['p50']:.2f}x "
            f"| {_ms(base.get('cpu_p99'))} | {_ms(other.get('cpu_p99'))} |"
        )
    return "\n".join(lines)


def serve(n: int, port: int, http: str = "auto") -> None:
    """Child-process mode for --uvicorn: serve an n-node cluster on loopback."""
    import uvicorn

    cache = fed_cache(build_cluster(n))
    uvicorn.run(
        create_app(cache, freeze_gc=True),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        http=http,
    )


async def run_uvicorn(sizes: list[int], repeat: int, http: str = "auto") -> list[dict[str, Any]]:
    """The same calls over loopback HTTP to uvicorn in a separate process (so the
    client does not share the server's GIL). Warm regime only: the churn regime
    needs to feed the server's cache, which lives in the other process."""
    import socket
    import subprocess

    rows = []
    for n in sizes:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(n), "--port", str(port), "--http", http]
        )
        try:
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                for _ in range(600):
                    try:
                        if (await client.get("/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
                local = fed_cache(build_cluster(n))  # same seed: same requests as in-process
                for r in await run_size(n, repeat, client, local, regimes=("warm",)):
                    # The client's CPU time says nothing about the server: wall only.
                    kept = {k: v for k, v in r.items() if not k.startswith("cpu")}
                    rows.append({"transport": f"uvicorn ({http})", **kept})
        finally:
            child.terminate()
            child.wait(timeout=30)
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| transport | nodes | verb | regime | names sent | p50 ms | p99 ms | max ms "
        "| CPU p50 ms | CPU p99 ms |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['transport']} | {r['nodes']} | {r['verb']} | {r['regime']} | {r['names_sent']} "
            f"| {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.2f} "
            f"| {_ms(r.get('cpu_p50'))} | {_ms(r.get('cpu_p99'))} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--uvicorn", action="store_true", help="also measure over loopback HTTP (uvicorn)"
    )
    parser.add_argument(
        "--http",
        default="auto",
        choices=["auto", "h11", "httptools"],
        help="uvicorn's HTTP parser for --uvicorn (default: auto = httptools when installed)",
    )
    parser.add_argument(
        "--no-asgi", action="store_true", help="skip the in-process ASGI measurements"
    )
    parser.add_argument(
        "--rules-size",
        type=int,
        default=1000,
        help="nodes for the with/without interference matrix table (0: skip it)",
    )
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.http)
        return 0
    load_before = os.getloadavg()[0]
    rows = [] if args.no_asgi else asyncio.run(run_asgi(args.sizes, args.repeat))
    if args.uvicorn:
        rows += asyncio.run(run_uvicorn(args.sizes, args.repeat, args.http))
    text = table(rows)
    if args.rules_size:
        compared = rules_table(asyncio.run(run_rules(args.rules_size, args.repeat)))
        text += (
            "\n\n## With an interference matrix\n\n"
            f"The same {args.rules_size}-node cluster, its pods saying how they spend a "
            "360 s iteration (rlix.io/phase-seconds: a rollout pool, a trainer pool or a "
            "colocated trainer, at random), asked by a pending rollout pool's pod, once "
            "with the rules a cluster gets by default and once with `--interference "
            "bench/results/gpu_interference.json` (rules 4-5 weigh each pair by its "
            "expected progress, rule 6 checks that both peaks fit the GPU). Same "
            "process, one after the other; ratio = with / without.\n\n" + compared
        )
    print(text)
    header = (
        "# Extender latency\n\n"
        f"Measured by `bench/extender_latency.py` (repeat={args.repeat}) on "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; "
        f"1-minute load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after "
        "(wall-clock numbers include waiting for a CPU on a shared host; CPU columns are "
        "the request's own thread time, in-process only).\n"
        "Target: p99 prioritize <= 5 ms at 1,000 nodes.\n\n"
        "Cluster: 8 x H100 per node, racks of 18 nodes, ~70 % of nodes busy with RL pods "
        "(1-4 GPUs each, random phases and priorities). filter gets every node; prioritize "
        "the nodes filter kept; preempt max(100, 10 %) candidate nodes with all their pods "
        "proposed, for an 8-GPU preemptor. warm: no watch event between calls; churn: one "
        "pod changes phase before every call; default-sample: as many nodes as "
        "kube-scheduler sends with its default percentageOfNodesToScore (it stops "
        "searching after max(100, (50 - n/125) %) feasible nodes). uvicorn rows: "
        "loopback HTTP to rlix's app in a separate uvicorn process; the httpx client "
        "shares the host's CPUs with it.\n\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(header + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
