"""The comparison's baseline: the same jobs as plain pods, whole GPUs, default-scheduler.

This is what a cluster without RLix does with these jobs, and nothing less:

* each role replica is a plain Pod requesting ``nvidia.com/gpu`` (whole GPUs,
  counted by kube-scheduler as an extended resource; the demo's device-plugin
  stand-in picks the indices), ``schedulerName: default-scheduler``; no
  operator, extender, ResourceClaim or conductor runs, and the node agents run
  with ``--no-dra`` (they still report phases, which is all the record needs);
* pods are created job by job in the queue order RLix's operator uses
  (priority, then submission), so FIFO order in kube-scheduler's queue is the
  same priority order; no PriorityClass is made, because default preemption
  would delete pods that nothing here recreates;
* a job's processes start only once *every* pod of the job is bound, as a
  real RL job's workers block until the whole group has joined. kube-scheduler
  has no gang admission, so a partly bound job holds its GPUs while it waits:
  that is the cost this baseline honestly carries;
* a job is done when its trainer pods have succeeded; then its other pods
  (rollout servers, which serve until told to stop) are deleted, as a job
  controller would.
"""

from __future__ import annotations

import json
from typing import Any

from rlix.core import names
from rlix.demo.workload import DemoJob

DEFAULT_SCHEDULER = "default-scheduler"


def queue_order(jobs: list[DemoJob]) -> list[DemoJob]:
    """Priority first, then the list's (submission) order: the operator's queue order."""
    return sorted(jobs, key=lambda j: -j.priority)


def pod_manifests(job: DemoJob, namespace: str) -> list[dict[str, Any]]:
    out = []
    for role in job.roles:
        for i in range(role.replicas):
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{job.name}-{role.name}-{i}",
                        "namespace": namespace,
                        "labels": {
                            names.LABEL_JOB: job.name,
                            names.LABEL_ROLE: role.name,
                            names.LABEL_REPLICA_INDEX: str(i),
                            "app.kubernetes.io/part-of": "rlix-demo",
                        },
                        "annotations": {
                            names.ANNOTATION_PRIORITY: str(job.priority),
                            names.ANNOTATION_GPU_MEMORY_MIB: json.dumps(role.memory_mib),
                        },
                    },
                    "spec": {
                        "schedulerName": DEFAULT_SCHEDULER,
                        "restartPolicy": "Never",
                        "tolerations": [dict(names.GPU_TOLERATION)],
                        "containers": [
                            {
                                "name": role.name,
                                "image": "rlix-demo-trainer:local",
                                "command": ["python", "-m", "rlix.demo.trainer"],
                                "resources": {
                                    "limits": {names.GPU_RESOURCE: str(role.gpus)},
                                    "requests": {names.GPU_RESOURCE: str(role.gpus)},
                                },
                            }
                        ],
                    },
                }
            )
    return out


def gang_bound(job: DemoJob, pods: list[dict[str, Any]]) -> bool:
    """Whether every pod of ``job`` is bound and Running (its processes may start)."""
    mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(names.LABEL_JOB) == job.name]
    expected = sum(r.replicas for r in job.roles)
    return len(mine) == expected and all(
        (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
        for p in mine
    )


def job_state(job: DemoJob, pods: list[dict[str, Any]]) -> str | None:
    """Succeeded/Failed once every trainer pod of ``job`` finished; None before."""
    trainers = {r.name for r in job.roles if r.kind == "trainer"}
    phases = [
        (p.get("status") or {}).get("phase")
        for p in pods
        if (p["metadata"].get("labels") or {}).get(names.LABEL_JOB) == job.name
        and (p["metadata"].get("labels") or {}).get(names.LABEL_ROLE) in trainers
    ]
    expected = sum(r.replicas for r in job.roles if r.kind == "trainer")
    if len(phases) < expected or not all(ph in ("Succeeded", "Failed") for ph in phases):
        return None
    return "Succeeded" if all(ph == "Succeeded" for ph in phases) else "Failed"
