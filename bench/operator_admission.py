"""Operator at scale: 1,000 RLJobs on a local control plane.

Measures the operator that ships (``python -m rlix.operator``, webhook on) on a
real kube-apiserver with kwok GPU nodes:

* time from the first ``kubectl create`` to every job Admitted, and to every
  role pod created (the jobs are created in one ``kubectl create`` call);
* the operator's memory (RSS now and peak, from /proc) with all jobs loaded;
* reconcile latency: the operator's own histogram (p50/p99 from its buckets),
  and end to end: a pod's ``rlix.io/phase`` annotation written -> the change
  visible in the RLJob's status, p50/p99 over a sample of pods.

Pods stay unbound (no extender listens): binding is the scheduler's cost, not
the operator's. Writes bench/results/operator_admission.md and prints it.
Run: .venv/bin/python bench/operator_admission.py [--jobs 1000] [--nodes 32] [--samples 100]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from e2e._operator_process import CRD, OperatorProcess
from rlix.core import names
from rlix.devcluster.cluster import ClusterOptions, DevCluster, wait_established
from rlix.devcluster.processes import free_port
from rlix.devcluster.toolchain import bin_dir

RESULTS = Path(__file__).parent / "results" / "operator_admission.md"
NAMESPACE = "bench"


def rljob(i: int) -> dict[str, Any]:
    """A small GRPO job: trainer + rollout, one GPU each; ~10 fit on a GPU by memory."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": f"job-{i:04d}", "namespace": NAMESPACE},
        "spec": {
            "algorithm": "GRPO",
            "priority": i % 5,
            "roles": [
                {
                    "name": "policy",
                    "kind": "trainer",
                    "image": "example.com/trainer:1",
                    "gpuMemoryMiB": {"training": 7000, "rollout": 3000},
                },
                {
                    "name": "rollout",
                    "kind": "rollout",
                    "image": "example.com/vllm:1",
                    "gpuMemoryMiB": {"rollout": 6000},
                },
            ],
        },
    }


def states(cluster: DevCluster) -> list[str]:
    out = cluster.kubectl(
        "get", "rlj", "-n", NAMESPACE, "-o",
        'jsonpath={range .items[*]}{.status.state}{"\\n"}{end}', timeout_s=120,
    ).stdout  # fmt: skip
    return out.split("\n")[:-1] if out else []


def pod_count(cluster: DevCluster) -> int:
    out = cluster.kubectl(
        "get", "pods", "-n", NAMESPACE, "-l", names.LABEL_JOB, "-o", "name", timeout_s=120
    ).stdout
    return len(out.split())


def memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def histogram_quantiles(metrics: str, name: str) -> tuple[float, float, int]:
    """p50 and p99 upper bounds from a Prometheus histogram's cumulative buckets."""
    buckets: list[tuple[float, float]] = []
    for line in metrics.splitlines():
        if line.startswith(f"{name}_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
    total = buckets[-1][1] if buckets else 0.0

    def q(fraction: float) -> float:
        return next((le for le, count in buckets if count >= fraction * total), float("nan"))

    return q(0.5), q(0.99), int(total)


def end_to_end(cluster: DevCluster, samples: int) -> list[float]:
    """Seconds from writing a phase annotation to seeing it in the job's status."""
    out: list[float] = []
    for i in range(samples):
        job = f"job-{i:04d}"
        phase = ("rollout", "training")[i % 2]
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        started = time.perf_counter()
        cluster.kubectl(
            "annotate", "pod", f"{job}-policy-0", "-n", NAMESPACE, "--overwrite",
            f"{names.ANNOTATION_PHASE}={phase}", f"{names.ANNOTATION_PHASE_SINCE}={stamp}",
        )  # fmt: skip
        while True:
            got = cluster.kubectl(
                "get", "rlj", job, "-n", NAMESPACE, "-o", "jsonpath={.status.phase}"
            ).stdout
            if got == phase:
                out.append(time.perf_counter() - started)
                break
            if time.perf_counter() - started > 30:
                raise RuntimeError(f"{job}: status never showed {phase}")
            time.sleep(0.01)
    return out


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="rlix-bench-operator-"))
    options = ClusterOptions(
        name=f"rlix-bench-op-{os.getpid()}",
        nodes=args.nodes,
        extender_port=free_port(),
        workdir=workdir,
    )
    cluster = DevCluster(options, bin_dir())
    cluster.up()
    operator: OperatorProcess | None = None
    try:
        cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        wait_established(cluster.kubectl, "rljobs.rlix.io")
        cluster.kubectl("create", "namespace", NAMESPACE)
        operator = OperatorProcess(cluster, workdir)
        operator.start()
        assert operator.component is not None and operator.component.proc is not None
        pid = operator.component.proc.pid
        idle = memory_kib(pid)
        manifest = workdir / "jobs.yaml"
        manifest.write_text(yaml.safe_dump_all([rljob(i) for i in range(args.jobs)]))

        started = time.monotonic()
        cluster.kubectl("create", "-f", str(manifest), timeout_s=900)
        created_s = time.monotonic() - started
        admitted_s = pods_s = None
        while time.monotonic() - started < args.timeout:
            now = states(cluster)
            done = sum(1 for s in now if s in ("Admitted", "Running"))
            if admitted_s is None and done == args.jobs:
                admitted_s = time.monotonic() - started
            if admitted_s is not None and pod_count(cluster) == 2 * args.jobs:
                pods_s = time.monotonic() - started
                break
            time.sleep(0.5)
        if admitted_s is None or pods_s is None:
            raise RuntimeError(f"not all admitted after {args.timeout}s:\n{operator.tail()}")
        loaded = memory_kib(pid)
        latencies = end_to_end(cluster, args.samples)
        metrics = operator.metrics()
        r50, r99, reconciles = histogram_quantiles(metrics, "rlix_operator_reconcile_seconds")
        a50, a99, passes = histogram_quantiles(metrics, "rlix_operator_admission_pass_seconds")
    finally:
        if operator is not None:
            operator.stop()
        cluster.down()
        shutil.rmtree(workdir, ignore_errors=True)

    load = os.getloadavg()[0]
    rows = [
        ("RLJobs created (one `kubectl create`, webhook on)", f"{args.jobs} in {created_s:.1f} s"),
        ("first create -> all Admitted", f"{admitted_s:.1f} s"),
        ("first create -> all role pods created", f"{pods_s:.1f} s ({2 * args.jobs} pods)"),
        ("operator RSS idle / loaded / peak", (
            f"{idle['VmRSS'] / 1024:.0f} / {loaded['VmRSS'] / 1024:.0f} / "
            f"{loaded['VmHWM'] / 1024:.0f} MiB"
        )),
        ("reconcile (one job), p50 / p99 (histogram bucket bound)",
         f"<= {r50 * 1000:.1f} / <= {r99 * 1000:.1f} ms over {reconciles} reconciles"),
        ("admission pass (policy over <= 32 queued jobs), p50 / p99 (bucket bound)",
         f"<= {a50 * 1000:.0f} / <= {a99 * 1000:.0f} ms over {passes} passes"),
        (f"phase annotation -> RLJob status, p50 / p99 (n={len(latencies)})",
         f"{pct(latencies, 0.5) * 1000:.0f} / {pct(latencies, 0.99) * 1000:.0f} ms "
         f"(mean {statistics.mean(latencies) * 1000:.0f}; includes two kubectl runs)"),
    ]  # fmt: skip
    lines = [
        "# Operator admission at scale",
        "",
        f"Measured by `bench/operator_admission.py` (jobs={args.jobs}, nodes={args.nodes} x 8 "
        f"GPUs, samples={args.samples}) on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; the API server, etcd, kwok, kube-scheduler and "
        f"the operator share those CPUs. 1-minute load average at the end: {load:.1f}.",
        "",
        "Each job: a trainer and a rollout pod, 1 GPU each; pods are not bound (no extender).",
        "",
        "| measure | result |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in rows),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    # ~13 GB per job: 1,000 jobs need ~21 nodes of 8 x 80 GB; 32 leaves headroom
    # so the run measures admission, not a queue that can never drain.
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the cluster and the operator are torn down.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    table = run(args)
    print(table)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(table)
    print(json.dumps({"results": str(RESULTS)}))


if __name__ == "__main__":
    main()
