"""The demo's main loop: bring everything up, submit the jobs, watch, summarise."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from rlix.core import names
from rlix.core.crdgen import rljob_crd
from rlix.core.objects import ObjectError, read_pod
from rlix.core.policy.placement import rules_file
from rlix.core.policy.placement.rules_file import Source
from rlix.core.policy.placement.sharing import DEFAULT_RULES
from rlix.core.suspension import PodSuspension
from rlix.demo import exclusive, metrics
from rlix.demo.components import Components, rules_args
from rlix.demo.pods import PodRuntime
from rlix.demo.record import RunRecord
from rlix.demo.workload import MEMORY_OVERCOMMIT, DemoJob, demo_jobs
from rlix.devcluster import scheduler
from rlix.devcluster.cluster import ClusterOptions, DevCluster, ExistingCluster, wait_established
from rlix.devcluster.processes import free_port, stop_process_group
from rlix.devcluster.toolchain import bin_dir
from rlix.views import rows as views
from rlix.views.kube import ClusterView, Kube

Log = Callable[[str], None]
FINISHED = ("Succeeded", "Failed")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Tally:
    """What the summary reports, accumulated while the demo runs."""

    started: float = field(default_factory=time.monotonic)
    idle_samples: list[float] = field(default_factory=list)  # share of idle GPUs per sample
    suspended_seen: set[str] = field(default_factory=set)  # pod uids ever suspended
    parked_now: set[str] = field(default_factory=set)  # pod uids suspended when last seen
    finished_at: dict[str, float] = field(default_factory=dict)  # job -> seconds since start
    submitted_at: dict[str, float] = field(default_factory=dict)


@dataclass
class DemoOptions:
    nodes: int = 4
    gpus: int = 8
    gpu_memory_mib: int = 81920
    timeout_s: float = 900.0
    keep: bool = False
    workdir: Path | None = None
    # An existing cluster (kind, ...) instead of the embedded one: RLix's
    # scheduler, extender, operator and simulated agents run here against it.
    kubeconfig: Path | None = None
    # The embedded cluster's name: a second run (make chaos beside make demo)
    # needs its own, or one would tear down the other's.
    cluster_name: str = "rlix-demo"
    # The matrix the extender and the operator decide sharing with: the
    # chart's default (sharing.builtinMatrix), so the demo shows what a
    # `helm install` runs; None: rules 1-3 (memory alone).
    interference: Source | None = "time-slicing"


def sharing_rules(interference: Source | None) -> str:
    """The line the extender and the operator log at start for the flags the
    demo gives them (``components.rules_args``, read by the components' own
    ``rules_file`` parser); ValueError naming a matrix file that cannot be read."""
    parser = argparse.ArgumentParser()
    rules_file.add_arguments(parser, "")
    args = parser.parse_args(rules_args(interference))
    rules = rules_file.rules_from(args.interference, args.interference_mode, default=DEFAULT_RULES)
    return rules_file.describe(
        rules_file.with_gate_flags(rules, args), args.interference, args.interference_mode
    )


class Demo:
    def __init__(
        self, options: DemoOptions, *, log: Log = _log, jobs: list[DemoJob] | None = None
    ) -> None:
        self.o = options
        # The line the extender and the operator will log; reading a matrix
        # file here refuses a bad one (ValueError) before anything starts.
        self.sharing = sharing_rules(options.interference)
        self.log = log
        self.jobs = {j.name: j for j in (jobs if jobs is not None else demo_jobs())}
        self.tally = Tally()
        # A fresh namespace per run: an existing cluster may still hold (or be
        # deleting) the jobs of an earlier run under the same names.
        self.namespace = f"rlix-demo-{uuid.uuid4().hex[:6]}"
        self.record = RunRecord("rlix", {})

    def _cluster(self, tools: Path) -> DevCluster | ExistingCluster:
        if self.o.kubeconfig is not None:
            return ExistingCluster(self.o.kubeconfig, tools)
        return DevCluster(
            ClusterOptions(
                name=self.o.cluster_name,
                nodes=self.o.nodes,
                gpus=self.o.gpus,
                gpu_memory_mib=self.o.gpu_memory_mib,
                extender_port=free_port(),
            ),
            tools,
        )

    def run(self) -> dict[str, Any]:
        """One run with RLix; the summary (``format_summary``)."""
        workdir = self.o.workdir or Path(tempfile.mkdtemp(prefix="rlix-demo-"))
        tools = bin_dir()
        cluster = self._cluster(tools)
        scheduler_pid = 0
        try:
            extender_port, scheduler_pid = self._control_plane(cluster, tools, workdir)
            self._run_rlix(cluster, workdir, extender_port)
            return self._summary(Kube(str(cluster.kubeconfig)))
        finally:
            self._teardown(cluster, scheduler_pid, workdir)

    def compare(self) -> list[RunRecord]:
        """The job list twice on one cluster: exclusive default scheduling, then RLix.

        The exclusive run goes first, so nothing RLix leaves on a node (its DRA
        slices, the gpu-claims annotation) can be there for the baseline; its
        namespace is deleted, and its pods gone, before RLix's run starts.
        """
        workdir = self.o.workdir or Path(tempfile.mkdtemp(prefix="rlix-demo-"))
        tools = bin_dir()
        cluster = self._cluster(tools)
        scheduler_pid = 0
        runs = []
        log = self.log
        base = Demo(self.o, log=lambda m: log(f"(exclusive) {m}"), jobs=list(self.jobs.values()))
        try:
            extender_port, scheduler_pid = self._control_plane(cluster, tools, workdir)
            base._run_exclusive(cluster, workdir / "exclusive")
            runs.append(base.record)
            log(f"==> exclusive run done; deleting namespace {base.namespace}")
            self.log = lambda m: log(f"(RLix) {m}")
            cluster.kubectl(
                "delete", "namespace", base.namespace, "--wait=true", "--timeout=180s", check=False
            )
            self._run_rlix(cluster, workdir / "rlix", extender_port)
            runs.append(self.record)
            return runs
        finally:
            if isinstance(cluster, ExistingCluster):  # a baseline that stopped half way
                cluster.kubectl("delete", "namespace", base.namespace, "--wait=false", check=False)
            self._teardown(cluster, scheduler_pid, workdir)

    def _teardown(
        self, cluster: DevCluster | ExistingCluster, scheduler_pid: int, workdir: Path
    ) -> None:
        if scheduler_pid:
            stop_process_group(scheduler_pid)
        if isinstance(cluster, ExistingCluster):
            cluster.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
        elif not self.o.keep:
            cluster.down()
        else:
            self.log(f"cluster kept: export KUBECONFIG={cluster.kubeconfig}")
        if self.o.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    def _agents(
        self, components: Components, kube: Kube, workdir: Path, *, dra: bool
    ) -> PodRuntime:
        nodes = self._gpu_nodes(kube)
        if not nodes:
            raise RuntimeError("the cluster has no node with nvidia.com/gpu allocatable")
        self.log(f"==> [3/5] node agents (simulated GPU backend) on {len(nodes)} GPU nodes")
        sockets = {
            name: components.agent(
                name,
                gpus=gpus,
                gpu_memory_mib=memory,
                proc_root=workdir / "proc",
                dra=dra,
                overcommit=MEMORY_OVERCOMMIT,
            )
            for name, (gpus, memory) in nodes.items()
        }
        gpus_per_node = {n: g for n, (g, _) in nodes.items()}
        self.record.gpus_per_node = dict(gpus_per_node)
        return PodRuntime(workdir, sockets, self.jobs, gpus_per_node)

    def _run_rlix(
        self, cluster: DevCluster | ExistingCluster, workdir: Path, extender_port: int
    ) -> None:
        self.record = RunRecord("rlix", {})
        self.tally = Tally()
        components = Components(workdir, cluster.kubeconfig)
        runtime: PodRuntime | None = None
        try:
            self.log("==> [2/5] RLJob CRD, extender, operator")
            self.log(f"    {self.sharing}")
            cluster.apply([rljob_crd()])
            wait_established(cluster.kubectl, "rljobs.rlix.io")
            components.extender(extender_port, self.o.interference)
            components.operator(self.o.interference)
            kube = Kube(str(cluster.kubeconfig))
            runtime = self._agents(components, kube, workdir, dra=True)
            self._await_claims(kube, runtime.gpus_per_node)
            total = sum(runtime.gpus_per_node.values())
            self.log(
                f"==> [4/5] submitting {len(self.jobs)} RLJobs "
                f"({sum(j.gpus for j in self.jobs.values())} GPUs of work for {total} GPUs)"
            )
            cluster.kubectl("create", "namespace", self.namespace, check=False)

            # Through the API, as the baseline creates its pods: a kubectl process
            # per job would spread the submissions over seconds on a loaded machine.
            def submit(job: DemoJob) -> None:
                kube.create_rljob(job.manifest(self.namespace))

            self._start_arrivals(list(self.jobs.values()), submit)
            self.log(f"==> [5/5] running (progress every 2 s; logs in {workdir / 'logs'})")
            self._watch(kube, runtime, components)
        finally:
            if runtime is not None:
                runtime.stop_all()
            components.stop_all()

    def _run_exclusive(self, cluster: DevCluster | ExistingCluster, workdir: Path) -> None:
        """The baseline (``rlix.demo.exclusive``): plain pods, default-scheduler, whole GPUs."""
        self.record = RunRecord("exclusive", {})
        components = Components(workdir, cluster.kubeconfig)
        runtime: PodRuntime | None = None
        try:
            kube = Kube(str(cluster.kubeconfig))
            runtime = self._agents(components, kube, workdir, dra=False)
            self.log(
                f"==> [4/5] exclusive run: {len(self.jobs)} jobs as plain pods "
                "(whole GPUs, default-scheduler, no RLix)"
            )
            cluster.kubectl("create", "namespace", self.namespace, check=False)

            def submit(job: DemoJob) -> None:
                for pod in exclusive.pod_manifests(job, self.namespace):
                    kube.create_pod(pod)

            self._start_arrivals(exclusive.queue_order(list(self.jobs.values())), submit)
            self.log(f"==> [5/5] running (progress every 2 s; logs in {workdir / 'logs'})")
            self._watch(kube, runtime, components, baseline=True)
        finally:
            if runtime is not None:
                runtime.stop_all()
            components.stop_all()

    def _control_plane(
        self, cluster: DevCluster | ExistingCluster, tools: Path, workdir: Path
    ) -> tuple[int, int]:
        """Bring up (or attach to) the cluster; return (extender port, our scheduler's pid)."""
        if isinstance(cluster, DevCluster):
            self.log(
                "==> [1/5] local control plane (etcd, kube-apiserver, controller-manager, "
                "kube-scheduler, rlix-scheduler, kwok GPU nodes)"
            )
            cluster.up()
            return cluster.extender_port, 0
        self.log(f"==> [1/5] existing cluster ({cluster.kubeconfig}); starting rlix-scheduler here")
        port = free_port()
        pid, _ = scheduler.start(
            bin_dir=tools,
            kubeconfig=cluster.kubeconfig,
            extender_url=f"http://127.0.0.1:{port}",
            workdir=workdir / "scheduler",
            leader_elect=False,
        )
        return port, pid

    @staticmethod
    def _gpu_nodes(kube: Kube) -> dict[str, tuple[int, int]]:
        """GPU nodes of the cluster: name -> (GPUs, MiB per GPU)."""
        found = {}
        for row in views.node_rows(kube.gpu_nodes(), []):
            if row.gpus > 0:
                found[row.name] = (row.gpus, row.memory_mib // row.gpus or 81920)
        return found

    def _start_arrivals(self, jobs: list[DemoJob], submit: Callable[[DemoJob], None]) -> None:
        """Submit the jobs due now (in the given order); ``_watch`` submits the later ones."""
        self._arrivals = sorted(jobs, key=lambda j: j.arrive_s)  # stable: order kept per time
        self._submit = submit
        self._first_submit = time.monotonic()
        self._submit_due()

    def _submit_due(self) -> None:
        elapsed = time.monotonic() - self._first_submit
        while self._arrivals and self._arrivals[0].arrive_s <= elapsed:
            job = self._arrivals.pop(0)
            if job.arrive_s > 0:
                self.log(f"    {job.name} arrives (priority {job.priority}, {job.gpus} GPUs)")
            self._submit(job)
            self.tally.submitted_at[job.name] = time.monotonic() - self.tally.started
            self.record.submitted(job.name, time.time())

    def _await_claims(self, kube: Kube, nodes: Iterable[str]) -> None:
        """Wait until every GPU node's agent publishes its GPUs as shareable devices.

        Submitted earlier, a job would be admitted onto whole GPUs (the operator
        reads a node without the mark as a device-plugin node) and share nothing.
        """
        wanted = set(nodes)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            marked = {
                n["metadata"]["name"]
                for n in kube.gpu_nodes()
                if (n["metadata"].get("annotations") or {}).get(names.ANNOTATION_NODE_GPU_CLAIMS)
                == "true"
            }
            if wanted <= marked:
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"node agents did not publish their GPUs as {names.ANNOTATION_NODE_GPU_CLAIMS} "
            f"devices within 120 s: {sorted(wanted - marked)}"
        )

    def _watch(
        self, kube: Kube, runtime: PodRuntime, components: Components, *, baseline: bool = False
    ) -> None:
        deadline = time.monotonic() + self.o.timeout_s
        last_print = 0.0
        while time.monotonic() < deadline:
            self._submit_due()
            for c in components.started:
                if not c.alive():
                    raise RuntimeError(f"{c.name} died:\n{c.tail()}")
            # The baseline runs before the RLJob CRD exists: it reads pods and nodes only.
            view = (
                ClusterView([], kube.rlix_pods(self.namespace), kube.gpu_nodes())
                if baseline
                else kube.view(self.namespace)
            )
            self.record.observe(view.pods, kube.resource_claims(self.namespace), time.time())
            self._step_pods(kube, runtime, view.pods, baseline=baseline)
            states = (
                self._baseline_states(kube, view.pods)
                if baseline
                else {
                    j["metadata"]["name"]: (j.get("status") or {}).get("state") or "Pending"
                    for j in view.rljobs
                }
            )
            now = time.monotonic() - self.tally.started
            for name, state in states.items():
                if state in FINISHED and name not in self.tally.finished_at:
                    self.tally.finished_at[name] = now
                    self.record.finished(name, state, time.time())
            self._sample(view)
            if now - last_print >= 2.0:
                last_print = now
                self.log(self._progress_line(view, now, states if baseline else None))
            done = all(s in FINISHED for s in states.values())
            if states and done and not self._arrivals and len(states) == len(self.jobs):
                self.log(self._progress_line(view, now, states if baseline else None))
                self.record.observe(
                    kube.rlix_pods(self.namespace),
                    kube.resource_claims(self.namespace),
                    time.time(),
                )
                self.record.close(time.time())
                return
            time.sleep(0.5)
        raise RuntimeError(f"demo did not finish within {self.o.timeout_s:.0f}s")

    def _baseline_states(self, kube: Kube, pods: list[dict[str, Any]]) -> dict[str, str]:
        """Each baseline job's state from its pods; a finished job's pods are deleted."""
        states = {}
        for job in self.jobs.values():
            done = exclusive.job_state(job, pods)
            if done is not None and job.name not in self.tally.finished_at:
                kube.delete_pods(self.namespace, f"{names.LABEL_JOB}={job.name}")
            if done is None and job.name in self.tally.finished_at:
                done = self.record.jobs[job.name].state  # its pods are gone now
            running = exclusive.gang_bound(job, pods)
            states[job.name] = done or ("Running" if running else "Queued")
        return states

    def _step_pods(
        self, kube: Kube, runtime: PodRuntime, pods: list[dict[str, Any]], *, baseline: bool
    ) -> None:
        # Pods deleted (job done) first: their GPUs are free for pods bound since.
        present = {pod["metadata"]["uid"] for pod in pods}
        for uid in [u for u in [*runtime.running, *runtime.reserved] if u not in present]:
            runtime.release(uid)  # stop its process, free its GPUs
        # Baseline jobs start only as whole gangs (rlix.demo.exclusive); RLix's
        # operator admits whole gangs itself.
        startable = {
            name
            for name, job in self.jobs.items()
            if not baseline or exclusive.gang_bound(job, pods)
        }
        for pod in pods:
            meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
            uid = meta["uid"]
            try:
                facts = read_pod(pod)
            except ObjectError:
                continue
            self._note_suspension(pod, facts.workload.suspended)
            if (
                uid in runtime.running
                or uid in runtime.finished
                or not spec.get("nodeName")
                or status.get("phase") != "Running"
                or meta.get("deletionTimestamp")
            ):
                continue
            if facts.workload.job.split("/", 1)[-1] not in startable:
                # Bound, waiting for its gang: a device plugin hands out the GPUs
                # when the pod is admitted on its node, not when its job starts.
                if not facts.workload.gpu_indices and uid not in runtime.reserved:
                    self._note_gpus(kube, meta, runtime.reserve(uid, facts.workload))
                continue
            started = runtime.start(pod, facts.workload)
            if started is not None:
                self._note_gpus(kube, meta, started.gpus)
        for ended, rc in runtime.exited():
            phase = "Succeeded" if rc == 0 else "Failed"
            kube.patch_pod_status(ended.namespace, ended.name, {"status": {"phase": phase}})

    def _note_suspension(self, pod: dict[str, Any], suspended: bool) -> None:
        """Say when a pod is parked in place (for whom, why) and when it comes back."""
        meta = pod["metadata"]
        uid, name = meta["uid"], meta["name"]
        if suspended and uid not in self.tally.parked_now:
            self.tally.parked_now.add(uid)
            self.tally.suspended_seen.add(uid)
            desired = PodSuspension.of(meta.get("annotations") or {}).desired
            why = (
                f" for {desired.requester.split('/', 1)[-1]} ({desired.reason})"
                if desired is not None and desired.requester
                else ""
            )
            self.log(f"    {name} parked in place{why}")
        elif not suspended and uid in self.tally.parked_now:
            self.tally.parked_now.discard(uid)
            self.log(f"    {name} resumed in place")

    @staticmethod
    def _note_gpus(kube: Kube, meta: dict[str, Any], gpus: list[int] | None) -> None:
        """Write the GPUs the device-plugin stand-in gave the pod (rlix.io/gpu-indices)."""
        if gpus:
            value = ",".join(map(str, gpus))
            body = {"metadata": {"annotations": {names.ANNOTATION_GPU_INDICES: value}}}
            # False: deleted since it was listed (its job done or re-planned);
            # the next step releases its GPUs.
            kube.patch_pod(meta["namespace"], meta["name"], body)

    def _sample(self, view: Any) -> None:
        rows = views.node_rows(view.nodes, view.pods)
        measured = [r for r in rows if r.idle_gpus is not None]
        total = sum(r.gpus for r in measured)
        if total:
            self.tally.idle_samples.append(sum(r.idle_gpus or 0 for r in measured) / total)

    def _progress_line(self, view: Any, now: float, baseline: dict[str, str] | None) -> str:
        jobs = views.job_rows(view.rljobs, view.pods, datetime.now(UTC))
        s = views.summary(jobs, views.node_rows(view.nodes, view.pods))
        by_state = s.jobs_by_state
        if baseline is not None:
            by_state = {}
            for state in baseline.values():
                by_state[state] = by_state.get(state, 0) + 1
        states = " ".join(f"{k}={v}" for k, v in sorted(by_state.items()))
        phases = " ".join(f"{j.name}:{j.phase}" for j in jobs if j.state == "Running")
        idle = f"{s.idle_pct:.0f}%" if s.idle_pct is not None else "n/a"
        return (
            f"  [{now:5.0f}s] {states} | GPUs {s.allocated}/{s.gpus} alloc, idle {idle} | "
            f"suspended now {s.suspended_pods} | {phases}"
        )

    def _summary(self, kube: Kube) -> dict[str, Any]:
        jobs = kube.rljobs(self.namespace)
        done = [j for j in jobs if (j.get("status") or {}).get("state") == "Succeeded"]
        jct = [
            self.tally.finished_at[n] - self.tally.submitted_at.get(n, 0.0)
            for n in self.tally.finished_at
        ]
        samples = self.tally.idle_samples
        return {
            "jobs": len(jobs),
            "jobs_succeeded": len(done),
            "jobs_failed": sum(1 for j in jobs if (j.get("status") or {}).get("state") == "Failed"),
            "wall_s": round(time.monotonic() - self.tally.started, 1),
            "mean_jct_s": round(sum(jct) / len(jct), 1) if jct else None,
            "gpu_idle_pct": round(100 * sum(samples) / len(samples), 1) if samples else None,
            "preemptions": len(self.tally.suspended_seen),
            # Of those, seen running again (none may be left parked: nothing is lost).
            "resumed": len(self.tally.suspended_seen - self.tally.parked_now),
            # GPUs that pods of two or more jobs held at once (claims' allocations).
            "gpus_shared": metrics.gpus_shared(self.record),
            "iterations": sum(int((j.get("status") or {}).get("iterations") or 0) for j in jobs),
        }


def format_summary(summary: dict[str, Any]) -> str:
    rows = [
        (
            "jobs done",
            f"{summary['jobs_succeeded']}/{summary['jobs']}"
            + (f" ({summary['jobs_failed']} failed)" if summary["jobs_failed"] else ""),
        ),
        ("RL iterations", str(summary["iterations"])),
        ("mean job completion", f"{summary['mean_jct_s']} s"),
        ("GPU idle (time-averaged)", f"{summary['gpu_idle_pct']}%"),
        ("preemptions (pods suspended in place)", str(summary["preemptions"])),
        ("resumed in place", str(summary.get("resumed", "-"))),
        ("GPUs shared (2+ jobs at once)", str(summary.get("gpus_shared", "-"))),
        ("demo wall time", f"{summary['wall_s']} s"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = ["", "RLix demo summary", "-" * (width + 20)]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    return "\n".join(lines) + "\n"


def dump(summary: dict[str, Any]) -> str:
    return yaml.safe_dump(summary, sort_keys=False)
