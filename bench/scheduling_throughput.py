"""Scheduling throughput: the default kube-scheduler vs rlix-scheduler + the extender.

Starts its own local control plane (rlix.devcluster: kwokctl binary runtime)
with 1,000 kwok GPU nodes (8 x 80 GiB each) and the real extender
(``python -m rlix.extender``), then, in the same run, creates N identical pods
for each of three schedulers, one batch after the other so they do not compete
for the CPUs: the default scheduler, a baseline (rlix-scheduler's exact
configuration minus the extender: the fair yardstick, since kwokctl runs the
default scheduler at a lower client QPS) and ``rlix-scheduler``, which also
calls the extender (filter + prioritize over HTTP) for every pod. It measures
pods/s from the first pod created to the last pod bound; bind times come from
a pod watch (the time ``spec.nodeName`` first appears), not from polling.
Target: rlix >= 0.8x default.

Pods: 1 GPU, ``rlix.io/gpu-memory-mib: 20000``, jobs of 10 pods alternating
rollout and trainer roles (so the extender's complementarity, locality and
packing terms all have work to do). Writes bench/results/scheduling_throughput.md.
Run: .venv/bin/python bench/scheduling_throughput.py [--nodes 1000] [--pods 500]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from e2e._extender_process import ExtenderProcess
from rlix.core import names
from rlix.devcluster import manifests, processes
from rlix.devcluster.cluster import ClusterOptions, DevCluster
from rlix.devcluster.processes import free_port
from rlix.devcluster.toolchain import bin_dir

RESULTS = Path(__file__).parent / "results" / "scheduling_throughput.md"
TARGET_RATIO = 0.8
# A third scheduler: rlix-scheduler's exact configuration minus the extender.
BASELINE = "bench-baseline"


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def pod_manifest(i: int, scheduler: str | None) -> dict[str, Any]:
    """Pod ``i``: the same shape for both schedulers (only schedulerName differs)."""
    role = "rollout" if i % 2 else "trainer"
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "pause:3.10",
                "resources": {"limits": {names.GPU_RESOURCE: "1"}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p-{i:05d}",
            "labels": {names.LABEL_JOB: f"job-{i // 10:04d}", names.LABEL_ROLE: role},
            "annotations": {
                names.ANNOTATION_PHASE: "rollout" if role == "rollout" else "training",
                names.ANNOTATION_GPU_MEMORY_MIB: "20000",
            },
        },
        "spec": spec,
    }


def core_api(kubeconfig: Path) -> Any:
    import kubernetes

    k8s: Any = kubernetes  # untyped client
    api_client = k8s.config.new_client_from_config(config_file=str(kubeconfig))
    # Threads below share one client; its pool must hold them all.
    api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = 32
    return k8s.client.CoreV1Api(api_client)


class BindWatch:
    """Record when each pod of a namespace is first seen with a node (monotonic s).

    Only bound pods are watched (field selector), which keeps the stream small.
    The API server closes watchers that fall behind (this script shares two
    CPUs with the control plane), so a closed stream is resumed from the last
    resourceVersion, or re-listed when that is gone; a pod first seen bound on a
    re-list is timed then, which can only understate throughput.
    """

    def __init__(self, api: Any, namespace: str) -> None:
        self._api, self._ns = api, namespace
        self.bound: dict[str, float] = {}
        self.restarts = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def _record(self, obj: dict[str, Any]) -> None:
        if (obj.get("spec") or {}).get("nodeName"):
            with self._lock:
                self.bound.setdefault(obj["metadata"]["name"], time.monotonic())

    def _run(self) -> None:
        import kubernetes

        k8s: Any = kubernetes  # untyped client
        version: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if version is None:  # (re-)list: the current state, then watch from it
                    listed = self._api.list_namespaced_pod(
                        self._ns, field_selector="spec.nodeName!=", _preload_content=False
                    )
                    doc = json.loads(listed.data)
                    for obj in doc.get("items") or []:
                        self._record(obj)
                    version = doc["metadata"]["resourceVersion"]
                self._watch = k8s.watch.Watch()
                for event in self._watch.stream(
                    self._api.list_namespaced_pod,
                    namespace=self._ns,
                    field_selector="spec.nodeName!=",
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=600,
                    _request_timeout=660,
                    deserialize=False,
                ):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":  # 410 Gone: re-list
                        version = None
                        break
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._record(obj)
                failures = 0
            except Exception as exc:  # reported by the caller if it keeps failing
                failures += 1
                version = None
                if failures >= 5:
                    self.error = exc
                    return
                time.sleep(0.5)
            if not self._stop.is_set():
                self.restarts += 1

    def count(self) -> int:
        with self._lock:
            return len(self.bound)

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()


@dataclass
class Batch:
    pods: int
    created_s: float  # first create -> last create returned
    total_s: float  # start of the clock -> last bound
    watch_restarts: int = 0

    @property
    def pods_per_s(self) -> float:
        return self.pods / self.total_s


@dataclass
class Phase:
    """One scheduler: a batch created while it runs, and one it drains after a pause."""

    label: str
    live: Batch
    drain: Batch


def _batch(
    api: Any,
    label: str,
    namespace: str,
    scheduler: str | None,
    args: argparse.Namespace,
    *,
    paused_pid: int | None,
) -> Batch:
    """Create ``args.pods`` pods and time them until all are bound.

    Live (``paused_pid`` None): the clock starts at the first create, so on two
    shared CPUs creating the pods may be what limits the rate. Drain: the
    scheduler process is paused (SIGSTOP) while the pods are created and the
    clock starts when it is resumed: the scheduler's own rate on a full queue.
    """
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    watch = BindWatch(api, namespace)
    watch.start()
    time.sleep(1.0)  # let the watch connect (a pod bound before it would be on its list)
    manifests = [pod_manifest(i, scheduler) for i in range(args.pods)]
    mode = "paused scheduler" if paused_pid else "running scheduler"
    progress(f"{label}: creating {args.pods} pods for the {mode} ({args.workers} threads)")
    if paused_pid:
        os.kill(paused_pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(args.workers) as pool:
            for _ in pool.map(lambda m: api.create_namespaced_pod(namespace, m), manifests):
                pass
        created_s = time.monotonic() - started
    finally:
        if paused_pid:
            started = time.monotonic()
            os.kill(paused_pid, signal.SIGCONT)
    progress(f"{label}: all {args.pods} pods created in {created_s:.1f} s")
    last_report = 0.0
    try:
        while watch.count() < args.pods:
            now = time.monotonic() - started
            if watch.error is not None:
                raise RuntimeError(f"{label}: pod watch failed: {watch.error!r}")
            if now > args.timeout:
                raise RuntimeError(f"{label}: {watch.count()}/{args.pods} bound after {now:.0f}s")
            if now - last_report >= 2:
                progress(f"{label}: {watch.count()}/{args.pods} bound after {now:.1f} s")
                last_report = now
            time.sleep(0.1)
    finally:
        watch.stop()
    total_s = max(watch.bound.values()) - started
    progress(
        f"{label}: all bound {total_s:.1f} s after the clock started "
        f"({args.pods / total_s:.1f} pods/s; watch resumed {watch.restarts} times)"
    )
    return Batch(args.pods, created_s, total_s, watch.restarts)


def run_phase(
    api: Any,
    label: str,
    namespace: str,
    scheduler: str | None,
    args: argparse.Namespace,
    *,
    pid: int,
) -> Phase:
    live = _batch(api, label, namespace, scheduler, args, paused_pid=None)
    drain = _batch(api, label, f"{namespace}-drain", scheduler, args, paused_pid=pid)
    return Phase(label, live, drain)


def _pid_file(path: Path) -> int:
    return int(path.read_text().split()[0])


def start_baseline(cluster: DevCluster, workdir: Path) -> int:
    """kube-scheduler with rlix-scheduler's configuration (client QPS, plugins) but no
    extender, serving ``bench-baseline``: the fair yardstick, since kwokctl's default
    scheduler runs with the client's default QPS (50) instead of rlix's 200."""
    import yaml

    config = manifests.rlix_scheduler_config(
        kubeconfig=str(cluster.kubeconfig), extender_url="http://127.0.0.1:1"
    )
    config.pop("extenders")
    config["profiles"] = [{"schedulerName": BASELINE}]
    config["leaderElection"] = {"leaderElect": False}
    path = workdir / "baseline-scheduler.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    pid = processes.spawn_detached(
        [
            str(cluster.bin_dir / "kube-scheduler"),
            f"--config={path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        ],
        log=workdir / "baseline-scheduler.log",
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if processes.url_ok(f"https://127.0.0.1:{port}/healthz"):
            return pid
        if not processes.pid_alive(pid):
            break
        time.sleep(0.2)
    processes.stop_process_group(pid)
    log = (workdir / "baseline-scheduler.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"baseline scheduler did not become healthy:\n{log}")


def extender_calls(extender: ExtenderProcess) -> dict[str, float]:
    """requests_total per verb and latency sum, from the extender's /metrics."""
    with urllib.request.urlopen(f"{extender.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("rlix_extender_requests_total{"):
            verb = line.split('verb="')[1].split('"')[0]
            out[verb] = out.get(verb, 0.0) + float(line.split()[-1])
        elif line.startswith("rlix_extender_request_seconds_sum{"):
            verb = line.split('verb="')[1].split('"')[0]
            out[f"{verb}_seconds"] = float(line.split()[-1])
    return out


def wait_extender_nodes(extender: ExtenderProcess, nodes: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(extender.snapshot()["nodes"]) >= nodes:
            return
        time.sleep(1)
    raise RuntimeError(f"extender cache has not seen {nodes} nodes after {timeout_s}s")


def run(args: argparse.Namespace) -> tuple[str, float]:
    workdir = Path(tempfile.mkdtemp(prefix="rlix-bench-sched-"))
    options = ClusterOptions(
        name="rlix-bench",
        nodes=args.nodes,
        extender_port=free_port(),
        workdir=workdir,
        timeout_s=900,
    )
    cluster = DevCluster(options, bin_dir())
    extender = ExtenderProcess(options.extender_port, cluster.kubeconfig, log=workdir / "ext.log")
    baseline_pid = 0
    try:
        setup = time.monotonic()
        progress(f"starting a local cluster with {args.nodes} kwok GPU nodes")
        cluster.up()
        setup_s = time.monotonic() - setup
        progress(f"cluster ready in {setup_s:.1f} s; starting the extender")
        extender.start(timeout_s=300)
        wait_extender_nodes(extender, args.nodes)
        baseline_pid = start_baseline(cluster, workdir)
        api = core_api(cluster.kubeconfig)
        default_pid = _pid_file(cluster.dir / "pids" / "kube-scheduler.pid")
        rlix_pid = json.loads((cluster.dir / "rlix-state.json").read_text())["scheduler_pid"]
        default = run_phase(api, "default", "bench-default", None, args, pid=default_pid)
        baseline = run_phase(api, "baseline", "bench-baseline", BASELINE, args, pid=baseline_pid)
        before = extender_calls(extender)
        rlix = run_phase(api, "rlix", "bench-rlix", names.SCHEDULER_NAME, args, pid=rlix_pid)
        after = extender_calls(extender)
    finally:
        extender.stop()
        if baseline_pid:
            processes.stop_process_group(baseline_pid)
        cluster.down()
        shutil.rmtree(workdir, ignore_errors=True)

    calls = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    mean_ms = {
        verb: 1000 * calls.get(f"{verb}_seconds", 0.0) / calls[verb]
        for verb in ("filter", "prioritize")
        if calls.get(verb)
    }
    load = os.getloadavg()[0]
    command = (
        f".venv/bin/python bench/scheduling_throughput.py --nodes {args.nodes} "
        f"--pods {args.pods} --workers {args.workers}"
    )
    who = {
        "default": "default-scheduler (kwokctl's, client QPS 50)",
        "baseline": f"{BASELINE} (rlix-scheduler's config, no extender)",
        "rlix": f"{names.SCHEDULER_NAME} + extender",
    }
    phases = (default, baseline, rlix)
    rows = [
        (p.label, who[p.label], f"{p.live.created_s:.1f}", f"{p.live.total_s:.1f}",
         f"{p.live.pods_per_s:.1f}", f"{p.drain.total_s:.1f}", f"{p.drain.pods_per_s:.1f}")
        for p in phases
    ]  # fmt: skip

    def ratio(over: Phase, kind: str) -> str:
        mine = getattr(rlix, kind).pods_per_s / getattr(over, kind).pods_per_s
        verdict = "meets" if mine >= TARGET_RATIO else "misses"
        return f"{mine:.3f}x ({verdict} the >= {TARGET_RATIO}x target)"

    extender_line = ", ".join(
        f"{verb} {int(calls.get(verb, 0))} calls (mean {ms:.1f} ms in the handler)"
        for verb, ms in mean_ms.items()
    )
    restarts = "/".join(f"{p.live.watch_restarts}+{p.drain.watch_restarts}" for p in phases)
    headline = rlix.live.pods_per_s / default.live.pods_per_s
    # Per-pod cost on a full queue: what the extender adds to each scheduling cycle
    # (kube-scheduler calls it synchronously, twice per pod), and how much of that
    # is the policy itself rather than HTTP, JSON and sharing the CPUs.
    added_ms = 1000 / rlix.drain.pods_per_s - 1000 / baseline.drain.pods_per_s
    handler_ms = sum(mean_ms.values())
    lines = [
        "# Scheduling throughput: default scheduler vs rlix-scheduler + extender",
        "",
        f"Command: `{command}`",
        "",
        f"{args.nodes} kwok nodes x 8 GPUs x 81920 MiB (cluster up in {setup_s:.0f} s); "
        f"{args.pods} pods per batch, 1 GPU + `rlix.io/gpu-memory-mib: 20000` each, "
        f"created by the Python client from {args.workers} threads. Measured on "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        "etcd, kube-apiserver, the schedulers, kwok, the extender and this script share "
        f"those CPUs (1-minute load at the end: {load:.1f}).",
        "",
        "* **live**: pods created while the scheduler runs; first create -> last bound "
        "(creating the pods is part of it, and on two shared CPUs often the limit).",
        "* **drain**: the scheduler process is paused (SIGSTOP) while the pods are created, "
        "then resumed; resume -> last bound: the scheduler's own rate on a full queue.",
        "",
        "| scheduler | configuration | live: created in (s) | live: create -> last bound (s) "
        "| live pods/s | drain: resume -> last bound (s) | drain pods/s |",
        "|---|---|---|---|---|---|---|",
        *(f"| {' | '.join(r)} |" for r in rows),
        "",
        f"**Ratio rlix/default, live (first creation to last bound): {headline:.3f}x** "
        f"(target >= {TARGET_RATIO}x: {'met' if headline >= TARGET_RATIO else 'missed'}).",
        "",
        f"* live: rlix/default {ratio(default, 'live')}, rlix/baseline {ratio(baseline, 'live')}",
        f"* drain: rlix/default {ratio(default, 'drain')}, "
        f"rlix/baseline {ratio(baseline, 'drain')}",
        "",
        f"Extender during the rlix batches: {extender_line or 'no calls recorded'}.",
        "",
        f"Per pod on a full queue, rlix-scheduler spends {added_ms:.1f} ms more than the "
        f"baseline; {handler_ms:.1f} ms of it is the extender's filter + prioritize "
        "handlers, the rest is two HTTP round trips, JSON, and the extender process "
        "competing for the same two CPUs (its watch also digests every bind).",
        "",
        "Notes: batches run one after another (default, baseline, rlix; live then drain), "
        "so each later batch schedules onto a cluster holding the earlier batches' pods. "
        "All three are the same kube-scheduler binary (hack/versions.env) with default plugins; "
        "rlix-scheduler and the baseline use rlix.devcluster's configuration (client QPS "
        "200/burst 400), kwokctl starts the default scheduler with flags only (client QPS "
        "50/burst 100). The baseline is the fair yardstick: the extender is the only "
        "difference. Bind-watch resumptions (live+drain, default/baseline/rlix): "
        f"{restarts}.",
        "",
    ]
    return "\n".join(lines), headline


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=500, help="pods per scheduler")
    parser.add_argument("--workers", type=int, default=8, help="client threads creating pods")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per batch")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if 6 * args.pods > 8 * args.nodes:  # six batches of 1-GPU pods must all fit
        parser.error(f"{6 * args.pods} GPUs needed, {args.nodes} nodes have {8 * args.nodes}")
    # SIGTERM unwinds like Ctrl-C, so the cluster and the extender are torn down.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    table, _ = run(args)
    print(table)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(table)
        progress(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
