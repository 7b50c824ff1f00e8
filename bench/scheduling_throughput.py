"""Scheduling throughput: the default kube-scheduler vs rlix-scheduler + the extender.

Starts its own local control plane (rlix.devcluster: kwokctl binary runtime)
with 1,000 kwok GPU nodes (8 x 80 GiB each) and the real extender
(``python -m rlix.extender``), then, in the same run, creates N identical pods
for each of three schedulers, one batch after the other so they do not compete
for the CPUs: the default scheduler, a baseline (rlix-scheduler's exact
configuration minus the extender: the fair yardstick, since kwokctl runs the
default scheduler at a lower client QPS) and ``rlix-scheduler``, which also
calls the extender (filter over HTTP; prioritize too if configured) for every pod. It measures
pods/s from the first pod created to the last pod bound; bind times come from
a pod watch (the time ``spec.nodeName`` first appears), not from polling.
Every scheduler runs ``--runs`` times (default 3) on the same cluster, and the
page reports medians with their spread. Target: rlix >= 0.8x the baseline,
live and drain.

Pods: 1 GPU, ``rlix.io/gpu-memory-mib: 20000``, jobs of 10 pods alternating
rollout and trainer roles (so the extender's complementarity, locality and
packing terms all have work to do). Writes bench/results/scheduling_throughput.md.
Run: .venv/bin/python bench/scheduling_throughput.py [--nodes 1000] [--pods 500] [--runs 3]
[--cluster-name NAME]
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
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from e2e._extender_process import ExtenderProcess
from rlix.core import names
from rlix.devcluster import manifests, processes
from rlix.devcluster.cluster import ClusterOptions, DevCluster
from rlix.devcluster.processes import free_port
from rlix.devcluster.scheduler import command as scheduler_command
from rlix.devcluster.toolchain import bin_dir

RESULTS = Path(__file__).parent / "results" / "scheduling_throughput.md"
TARGET_RATIO = 0.8
# A third scheduler: rlix-scheduler's exact configuration minus the extender.
BASELINE = "bench-baseline"


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) per thread of ``pid``, summed by thread name;
    the main thread is "main". {} when the process is gone."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended in between
        comm, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        name = "main" if tid == str(pid) else comm
        values = fields.split()
        out[name] = out.get(name, 0.0) + (int(values[11]) + int(values[12])) / tick
    return out


def cpu_since(pid: int, before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in thread_cpu_s(pid).items()}


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
    # CPU seconds over the batch (first create -> last bound): the scheduler
    # process, and the extender's per thread (rlix batches only).
    scheduler_cpu_s: float = 0.0
    extender_cpu_s: dict[str, float] = field(default_factory=dict)

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
    scheduler_pid: int,
    extender_pid: int | None,
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
    scheduler_cpu = sum(thread_cpu_s(scheduler_pid).values())
    extender_cpu = thread_cpu_s(extender_pid) if extender_pid else {}
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
    scheduler_cpu = sum(thread_cpu_s(scheduler_pid).values()) - scheduler_cpu
    extender_used = cpu_since(extender_pid, extender_cpu) if extender_pid else {}
    total_s = max(watch.bound.values()) - started
    progress(
        f"{label}: all bound {total_s:.1f} s after the clock started "
        f"({args.pods / total_s:.1f} pods/s; watch resumed {watch.restarts} times)"
    )
    return Batch(args.pods, created_s, total_s, watch.restarts, scheduler_cpu, extender_used)


def run_phase(
    api: Any,
    label: str,
    namespace: str,
    scheduler: str | None,
    args: argparse.Namespace,
    *,
    pid: int,
    extender_pid: int | None,
) -> Phase:
    pids: dict[str, Any] = {"scheduler_pid": pid, "extender_pid": extender_pid}
    live = _batch(api, label, namespace, scheduler, args, paused_pid=None, **pids)
    clear(api, namespace, args.timeout)
    drain = _batch(api, label, f"{namespace}-drain", scheduler, args, paused_pid=pid, **pids)
    clear(api, f"{namespace}-drain", args.timeout)
    return Phase(label, live, drain)


def clear(api: Any, namespace: str, timeout_s: float) -> None:
    """Delete a batch's pods and wait until they are gone, so every batch of every
    run schedules onto the same (empty) cluster and the extender's cache does not
    grow from run to run; the namespace itself is left to the cluster's teardown."""
    api.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    deadline = time.monotonic() + timeout_s
    while api.list_namespaced_pod(namespace, limit=1).items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods of {namespace} still there after {timeout_s:.0f}s")
        time.sleep(0.5)


def _pid_file(path: Path) -> int:
    return int(path.read_text().split()[0])


def start_baseline(cluster: DevCluster, workdir: Path) -> int:
    """kube-scheduler with rlix-scheduler's configuration (client QPS, plugins) and
    command line (feature gates, log verbosity) but no extender, serving
    ``bench-baseline``: the fair yardstick, since kwokctl's default scheduler runs
    with the client's default QPS (50) instead of rlix's 200."""
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
        scheduler_command(cluster.bin_dir, path, port), log=workdir / "baseline-scheduler.log"
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


def _median_spread(values: list[float]) -> str:
    """ "median (min-max)" of per-run values; just the value for one run."""
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _ratio_text(values: list[float]) -> str:
    mid = statistics.median(values)
    verdict = "meets" if mid >= TARGET_RATIO else "misses"
    spread = f", runs {min(values):.3f}-{max(values):.3f}" if len(values) > 1 else ""
    return f"{mid:.3f}x{spread} ({verdict} the >= {TARGET_RATIO}x target)"


@dataclass
class Measurement:
    setup_s: float
    runs: list[dict[str, Phase]]  # per run: scheduler label -> its live and drain batches
    calls: dict[str, float]  # extender requests and handler seconds, rlix batches only
    load: tuple[float, float, float]  # 1/5/15-minute load average at the end


def measure(args: argparse.Namespace) -> Measurement:
    """Bring a cluster up once, then run every scheduler ``args.runs`` times."""
    workdir = Path(tempfile.mkdtemp(prefix="rlix-bench-sched-"))
    options = ClusterOptions(
        name=args.cluster_name,
        nodes=args.nodes,
        extender_port=free_port(),
        workdir=workdir,
        timeout_s=900,
    )
    cluster = DevCluster(options, bin_dir())
    extender = ExtenderProcess(options.extender_port, cluster.kubeconfig, log=workdir / "ext.log")
    baseline_pid = 0
    runs: list[dict[str, Phase]] = []
    calls: dict[str, float] = {}
    try:
        setup = time.monotonic()
        progress(f"starting cluster {args.cluster_name!r} with {args.nodes} kwok GPU nodes")
        cluster.up()
        setup_s = time.monotonic() - setup
        progress(f"cluster ready in {setup_s:.1f} s; starting the extender")
        extender.start(timeout_s=300)
        wait_extender_nodes(extender, args.nodes)
        baseline_pid = start_baseline(cluster, workdir)
        api = core_api(cluster.kubeconfig)
        default_pid = _pid_file(cluster.dir / "pids" / "kube-scheduler.pid")
        rlix_pid = json.loads((cluster.dir / "rlix-state.json").read_text())["scheduler_pid"]
        assert extender.component is not None and extender.component.proc is not None
        ext_pid = extender.component.proc.pid
        schedulers = [
            ("default", None, default_pid),
            ("baseline", BASELINE, baseline_pid),
            ("rlix", names.SCHEDULER_NAME, rlix_pid),
        ]
        for r in range(args.runs):
            # Each run starts with a different scheduler, so none always goes first.
            order = schedulers[r % 3 :] + schedulers[: r % 3]
            progress(f"run {r + 1}/{args.runs}: {', '.join(o[0] for o in order)}")
            done: dict[str, Phase] = {}
            for label, scheduler, pid in order:
                extender_pid = ext_pid if label == "rlix" else None
                before = extender_calls(extender) if label == "rlix" else {}
                namespace = f"bench-{label}-r{r + 1}"
                done[label] = run_phase(
                    api, label, namespace, scheduler, args, pid=pid, extender_pid=extender_pid
                )
                if label == "rlix":
                    after = extender_calls(extender)
                    for k, v in after.items():
                        calls[k] = calls.get(k, 0.0) + v - before.get(k, 0.0)
            runs.append(done)
    finally:
        extender.stop()
        if baseline_pid:
            processes.stop_process_group(baseline_pid)
        cluster.down()
        shutil.rmtree(workdir, ignore_errors=True)
    return Measurement(setup_s, runs, calls, os.getloadavg())


def report(args: argparse.Namespace, m: Measurement) -> tuple[str, float]:
    """The results page and the headline ratio (rlix/baseline live, median)."""
    labels = ("default", "baseline", "rlix")
    rate = {
        (label, kind): [getattr(run[label], kind).pods_per_s for run in m.runs]
        for label in labels
        for kind in ("live", "drain")
    }
    created = {label: [run[label].live.created_s for run in m.runs] for label in labels}
    ratios = {
        (over, kind): [
            getattr(run["rlix"], kind).pods_per_s / getattr(run[over], kind).pods_per_s
            for run in m.runs
        ]
        for over in ("default", "baseline")
        for kind in ("live", "drain")
    }
    mean_ms = {
        verb: 1000 * m.calls.get(f"{verb}_seconds", 0.0) / m.calls[verb]
        for verb in ("filter", "prioritize")
        if m.calls.get(verb)
    }
    command = (
        f".venv/bin/python bench/scheduling_throughput.py --nodes {args.nodes} "
        f"--pods {args.pods} --workers {args.workers} --runs {args.runs}"
    )
    who = {
        "default": "default-scheduler (kwokctl's, client QPS 50)",
        "baseline": f"{BASELINE} (rlix-scheduler's config, no extender)",
        "rlix": f"{names.SCHEDULER_NAME} + extender",
    }
    rows = [
        (label, who[label], _median_spread(created[label]),
         _median_spread(rate[label, "live"]), _median_spread(rate[label, "drain"]))
        for label in labels
    ]  # fmt: skip
    per_run = [
        f"| {i + 1} | "
        + " | ".join(
            f"{run[label].live.pods_per_s:.1f} / {run[label].drain.pods_per_s:.1f}"
            for label in labels
        )
        + f" | {ratios['baseline', 'live'][i]:.3f} / {ratios['baseline', 'drain'][i]:.3f} |"
        for i, run in enumerate(m.runs)
    ]
    extender_line = ", ".join(
        f"{verb} {int(m.calls.get(verb, 0))} calls (mean {ms:.1f} ms in the handler)"
        for verb, ms in mean_ms.items()
    )
    restarts = "; ".join(
        "/".join(f"{run[label].live.watch_restarts}+{run[label].drain.watch_restarts}"
                 for label in labels)
        for run in m.runs
    )  # fmt: skip

    def cpu_ms(label: str, kind: str, pick: Callable[[Batch], float]) -> str:
        """Median over runs of CPU ms per pod in ``label``'s ``kind`` batches."""
        per_pod = [1000 * pick(getattr(run[label], kind)) / args.pods for run in m.runs]
        return f"{statistics.median(per_pod):.1f}"

    def scheduler_cpu(batch: Batch) -> float:
        return batch.scheduler_cpu_s

    def thread_cpu(thread: str) -> Callable[[Batch], float]:
        return lambda batch: batch.extender_cpu_s.get(thread, 0.0)

    cpu_rows = [
        f"| {label} | kube-scheduler | {cpu_ms(label, 'live', scheduler_cpu)} "
        f"| {cpu_ms(label, 'drain', scheduler_cpu)} |"
        for label in labels
    ]
    # CPython 3.11 does not name OS threads, so the main thread (the event loop:
    # HTTP and the verbs) is told apart by its id and the rest are the watches.
    threads = sorted({t for run in m.runs for t in run["rlix"].drain.extender_cpu_s})
    for thread in ["main", *(t for t in threads if t != "main")]:
        name = "event loop (HTTP, verbs)" if thread == "main" else f"thread {thread!r} (watches)"
        cpu_rows.append(
            f"| rlix | extender: {name} | {cpu_ms('rlix', 'live', thread_cpu(thread))} "
            f"| {cpu_ms('rlix', 'drain', thread_cpu(thread))} |"
        )
    headline = statistics.median(ratios["baseline", "live"])
    # Per-pod cost on a full queue: what the extender adds to each scheduling cycle
    # (kube-scheduler calls it synchronously, once per verb configured), and how
    # much of that is the policy itself rather than HTTP, JSON and sharing the CPUs.
    drain_rlix = statistics.median(rate["rlix", "drain"])
    drain_base = statistics.median(rate["baseline", "drain"])
    added_ms = 1000 / drain_rlix - 1000 / drain_base
    handler_ms = sum(mean_ms.values())
    # Both batches of every run went through the extender (live and drain).
    trips = sum(m.calls.get(verb, 0.0) for verb in mean_ms) / (2 * args.runs * args.pods)
    verbs_text = " + ".join(mean_ms) or "verb"
    runs_word = f"median of {args.runs} runs (min-max)" if args.runs > 1 else "one run"
    lines = [
        "# Scheduling throughput: default scheduler vs rlix-scheduler + extender",
        "",
        f"Command: `{command}`",
        "",
        f"{args.nodes} kwok nodes x 8 GPUs x 81920 MiB (cluster up in {m.setup_s:.0f} s); "
        f"{args.pods} pods per batch, 1 GPU + `rlix.io/gpu-memory-mib: 20000` each, "
        f"created by the Python client from {args.workers} threads. Measured on "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        "etcd, kube-apiserver, the schedulers, kwok, the extender and this script share "
        f"those CPUs (load average at the end: {m.load[0]:.1f} / {m.load[1]:.1f} / "
        f"{m.load[2]:.1f} over 1 / 5 / 15 minutes).",
        "",
        "* **live**: pods created while the scheduler runs; first create -> last bound "
        "(creating the pods is part of it, and on two shared CPUs often the limit).",
        "* **drain**: the scheduler process is paused (SIGSTOP) while the pods are created, "
        "then resumed; resume -> last bound: the scheduler's own rate on a full queue.",
        "",
        f"Each figure is the {runs_word}.",
        "",
        "| scheduler | configuration | live: created in (s) | live pods/s | drain pods/s |",
        "|---|---|---|---|---|",
        *(f"| {' | '.join(r)} |" for r in rows),
        "",
        f"**Ratio rlix/baseline, live: {_ratio_text(ratios['baseline', 'live'])}; "
        f"drain: {_ratio_text(ratios['baseline', 'drain'])}.** "
        "The ratio is taken per run (the same run's batches), then the median.",
        "",
        f"* rlix/default: live {_ratio_text(ratios['default', 'live'])}, "
        f"drain {_ratio_text(ratios['default', 'drain'])}",
        "",
        "Per run, pods/s live / drain:",
        "",
        "| run | default | baseline | rlix | rlix/baseline |",
        "|---|---|---|---|---|",
        *per_run,
        "",
        f"Extender during the rlix batches: {extender_line or 'no calls recorded'}.",
        "",
        "CPU per pod (ms; user + system from /proc, first create -> last bound, median "
        "over runs): where the extender's cost goes.",
        "",
        "| scheduler | process / thread | live | drain |",
        "|---|---|---|---|",
        *cpu_rows,
        "",
        f"Per pod on a full queue (medians), rlix-scheduler takes {added_ms:+.1f} ms against "
        f"the baseline; the extender's {verbs_text} handlers take {handler_ms:.1f} ms "
        f"of wall time per pod (mean), the rest of the difference is {trips:.1f} HTTP round "
        "trips per pod, JSON, and the extender process competing for the same two CPUs (its "
        "watches digest every pod event).",
        "",
        "Notes: one cluster serves every run; within a run the schedulers take turns (the "
        "first one rotates from run to run), each batch's pods are deleted before the next "
        "batch, so every batch schedules onto the same empty cluster. "
        "All three are the same kube-scheduler binary (hack/versions.env) with default plugins; "
        "rlix-scheduler and the baseline use rlix.devcluster's configuration (client QPS "
        "200/burst 400) and command line (feature gates, --v=2), kwokctl starts the "
        "default scheduler with flags only (client QPS "
        "50/burst 100). The baseline is the fair yardstick: the extender is the only "
        "difference. Bind-watch resumptions per run (live+drain, default/baseline/rlix): "
        f"{restarts}.",
        "",
    ]
    return "\n".join(lines), headline


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=500, help="pods per scheduler")
    parser.add_argument("--workers", type=int, default=8, help="client threads creating pods")
    parser.add_argument("--runs", type=int, default=3, help="runs of every scheduler (median)")
    parser.add_argument(
        "--cluster-name", default="rlix-bench", help="the kwokctl cluster (unique per user)"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per batch")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    if 8 * args.nodes < args.pods:  # one batch of 1-GPU pods at a time must fit
        parser.error(f"{args.pods} GPUs needed, {args.nodes} nodes have {8 * args.nodes}")
    # SIGTERM unwinds like Ctrl-C, so the cluster and the extender are torn down.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    table, _ = report(args, measure(args))
    print(table)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(table)
        progress(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
