"""The demo's main loop: bring everything up, submit the jobs, watch, summarise."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from rlix.core import names
from rlix.core.crdgen import rljob_crd
from rlix.core.objects import ObjectError, read_pod
from rlix.demo.components import Components
from rlix.demo.pods import PodRuntime
from rlix.demo.workload import demo_jobs
from rlix.devcluster import scheduler
from rlix.devcluster.cluster import ClusterOptions, DevCluster, ExistingCluster
from rlix.devcluster.processes import free_port, stop_process_group
from rlix.devcluster.toolchain import bin_dir
from rlix.views import rows as views
from rlix.views.kube import Kube

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


class Demo:
    def __init__(self, options: DemoOptions, *, log: Log = _log) -> None:
        self.o = options
        self.log = log
        self.jobs = {j.name: j for j in demo_jobs()}
        self.tally = Tally()
        # A fresh namespace per run: an existing cluster may still hold (or be
        # deleting) the jobs of an earlier run under the same names.
        self.namespace = f"rlix-demo-{uuid.uuid4().hex[:6]}"

    def run(self) -> dict[str, Any]:
        workdir = self.o.workdir or Path(tempfile.mkdtemp(prefix="rlix-demo-"))
        tools = bin_dir()
        cluster: DevCluster | ExistingCluster
        if self.o.kubeconfig is not None:
            cluster = ExistingCluster(self.o.kubeconfig, tools)
        else:
            cluster = DevCluster(
                ClusterOptions(
                    name=self.o.cluster_name,
                    nodes=self.o.nodes,
                    gpus=self.o.gpus,
                    gpu_memory_mib=self.o.gpu_memory_mib,
                    extender_port=free_port(),
                ),
                tools,
            )
        components = Components(workdir, cluster.kubeconfig)
        runtime: PodRuntime | None = None
        scheduler_pid = 0
        try:
            extender_port, scheduler_pid = self._control_plane(cluster, tools, workdir)
            self.log("==> [2/5] RLJob CRD, extender, operator")
            cluster.apply([rljob_crd()])
            cluster.kubectl(
                "wait", "--for=condition=Established", "crd/rljobs.rlix.io", "--timeout=60s"
            )
            components.extender(extender_port)
            components.operator()
            kube = Kube(str(cluster.kubeconfig))
            nodes = self._gpu_nodes(kube)
            if not nodes:
                raise RuntimeError("the cluster has no node with nvidia.com/gpu allocatable")
            self.log(f"==> [3/5] node agents (simulated GPU backend) on {len(nodes)} GPU nodes")
            sockets = {
                name: components.agent(
                    name, gpus=gpus, gpu_memory_mib=memory, proc_root=workdir / "proc"
                )
                for name, (gpus, memory) in nodes.items()
            }
            runtime = PodRuntime(workdir, sockets, self.jobs, {n: g for n, (g, _) in nodes.items()})
            total = sum(g for g, _ in nodes.values())
            self.log(
                f"==> [4/5] submitting {len(self.jobs)} RLJobs "
                f"({sum(j.gpus for j in self.jobs.values())} GPUs of work for {total} GPUs)"
            )
            cluster.kubectl("create", "namespace", self.namespace, check=False)
            for job in self.jobs.values():
                cluster.apply([job.manifest(self.namespace)])
                self.tally.submitted_at[job.name] = time.monotonic() - self.tally.started
            self.log(f"==> [5/5] running (progress every 2 s; logs in {workdir / 'logs'})")
            self._watch(kube, runtime, components)
            return self._summary(kube)
        finally:
            if runtime is not None:
                runtime.stop_all()
            components.stop_all()
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

    def _watch(self, kube: Kube, runtime: PodRuntime, components: Components) -> None:
        deadline = time.monotonic() + self.o.timeout_s
        last_print = 0.0
        while time.monotonic() < deadline:
            for c in components.started:
                if not c.alive():
                    raise RuntimeError(f"{c.name} died:\n{c.tail()}")
            view = kube.view(self.namespace)
            self._step_pods(kube, runtime, view.pods)
            states = {
                j["metadata"]["name"]: (j.get("status") or {}).get("state") or "Pending"
                for j in view.rljobs
            }
            now = time.monotonic() - self.tally.started
            for name, state in states.items():
                if state in FINISHED and name not in self.tally.finished_at:
                    self.tally.finished_at[name] = now
            self._sample(view)
            if now - last_print >= 2.0:
                last_print = now
                self.log(self._progress_line(view, now))
            if states and all(s in FINISHED for s in states.values()):
                self.log(self._progress_line(view, now))
                return
            time.sleep(0.5)
        raise RuntimeError(f"demo did not finish within {self.o.timeout_s:.0f}s")

    def _step_pods(self, kube: Kube, runtime: PodRuntime, pods: list[dict[str, Any]]) -> None:
        present = set()
        for pod in pods:
            meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
            uid = meta["uid"]
            present.add(uid)
            try:
                facts = read_pod(pod)
            except ObjectError:
                continue
            if facts.workload.suspended:
                self.tally.suspended_seen.add(uid)
            if (
                uid in runtime.running
                or uid in runtime.finished
                or not spec.get("nodeName")
                or status.get("phase") != "Running"
                or meta.get("deletionTimestamp")
            ):
                continue
            started = runtime.start(pod, facts.workload)
            if started is not None:
                kube.patch_pod(
                    meta["namespace"],
                    meta["name"],
                    {
                        "metadata": {
                            "annotations": {
                                names.ANNOTATION_GPU_INDICES: ",".join(map(str, started.gpus))
                            }
                        }
                    },
                )
        for uid in [u for u in runtime.running if u not in present]:
            runtime.release(uid)  # the operator deleted the pod (job done): stop its process
        for ended, rc in runtime.exited():
            phase = "Succeeded" if rc == 0 else "Failed"
            kube.patch_pod_status(ended.namespace, ended.name, {"status": {"phase": phase}})

    def _sample(self, view: Any) -> None:
        rows = views.node_rows(view.nodes, view.pods)
        measured = [r for r in rows if r.idle_gpus is not None]
        total = sum(r.gpus for r in measured)
        if total:
            self.tally.idle_samples.append(sum(r.idle_gpus or 0 for r in measured) / total)

    def _progress_line(self, view: Any, now: float) -> str:
        jobs = views.job_rows(view.rljobs, view.pods, datetime.now(UTC))
        s = views.summary(jobs, views.node_rows(view.nodes, view.pods))
        states = " ".join(f"{k}={v}" for k, v in sorted(s.jobs_by_state.items()))
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
        ("demo wall time", f"{summary['wall_s']} s"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = ["", "RLix demo summary", "-" * (width + 20)]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    return "\n".join(lines) + "\n"


def dump(summary: dict[str, Any]) -> str:
    return yaml.safe_dump(summary, sort_keys=False)
