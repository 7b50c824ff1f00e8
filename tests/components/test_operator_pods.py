"""Pod builder: names, labels, annotations and ownership the rest of RLix relies on."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rlix.core import names
from rlix.core.phases import Phase
from rlix.core.rljob import RLJob
from rlix.operator.pods import (
    ANNOTATION_ADMITTED_NODE,
    build_pod,
    desired_pod_names,
    planned_workloads,
)
from rlix.operator.snapshots import workload_from_pod

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def ppo() -> RLJob:
    raw = yaml.safe_load((EXAMPLES / "ppo-rllib.yaml").read_text())
    raw["metadata"].update(namespace="team-a", uid="uid-1")
    return RLJob.model_validate(raw)


def test_pod_names_are_deterministic_and_cover_every_replica() -> None:
    job = ppo()
    pods = desired_pod_names(job)
    assert len(pods) == 2 + 4 + 1 + 1 + 1
    assert "ppo-llama-helpful-learner-1" in pods and "ppo-llama-helpful-rollout-3" in pods
    assert desired_pod_names(job) == pods


def test_pod_carries_the_shared_contract() -> None:
    job = ppo()
    role = job.spec.roles[1]  # rollout, 1 GPU
    pod = build_pod(job, role, 2, owner_uid="uid-1", admitted_node="rlix-gpu-3")
    meta = pod["metadata"]
    assert meta["name"] == "ppo-llama-helpful-rollout-2"
    assert meta["namespace"] == "team-a"
    assert meta["labels"][names.LABEL_JOB] == "ppo-llama-helpful"
    assert meta["labels"][names.LABEL_ROLE] == "rollout"
    assert meta["labels"][names.LABEL_PREEMPTIBLE] == "true"
    assert json.loads(meta["annotations"][names.ANNOTATION_GPU_MEMORY_MIB]) == {
        "rollout": 60000,
        "idle": 18000,
    }
    assert meta["annotations"][names.ANNOTATION_PRIORITY] == "50"
    assert meta["annotations"][names.ANNOTATION_GANG_SIZE] == "9"
    assert meta["annotations"][ANNOTATION_ADMITTED_NODE] == "rlix-gpu-3"
    (owner,) = meta["ownerReferences"]
    assert owner == {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "name": "ppo-llama-helpful",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    spec = pod["spec"]
    assert spec["schedulerName"] == names.SCHEDULER_NAME
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["resources"]["limits"] == {names.GPU_RESOURCE: "1"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["RLIX_ROLE"] == "rollout" and env["RLIX_REPLICA_INDEX"] == "2"


def test_trainer_is_never_marked_preemptible() -> None:
    job = ppo()
    pod = build_pod(job, job.spec.roles[0], 0, owner_uid="u")
    assert pod["metadata"]["labels"][names.LABEL_PREEMPTIBLE] == "false"


def test_cpu_role_requests_no_gpu_and_declares_no_memory() -> None:
    raw = yaml.safe_load((EXAMPLES / "verl-colocated.yaml").read_text())
    job = RLJob.model_validate(raw)
    reward = job.spec.roles[1]
    pod = build_pod(job, reward, 0, owner_uid="u")
    assert "resources" not in pod["spec"]["containers"][0]
    assert names.ANNOTATION_GPU_MEMORY_MIB not in pod["metadata"]["annotations"]


def test_the_built_pod_reads_back_as_the_planned_workload() -> None:
    """Admission reasons about planned workloads; the pods must say the same."""
    job = ppo()
    planned = {w.name: w for w in planned_workloads(job)}
    for name, (role, index) in desired_pod_names(job).items():
        pod = build_pod(job, role, index, owner_uid="u")
        seen = workload_from_pod(pod)
        want = planned[f"team-a/{name}"]
        assert (seen.job, seen.role, seen.gpus, seen.priority) == (
            want.job,
            want.role,
            want.gpus,
            want.priority,
        )
        assert seen.memory_mib == want.memory_mib
        assert seen.preemptible == want.preemptible and seen.gang_size == want.gang_size
    assert planned["team-a/ppo-llama-helpful-critic-0"].memory_mib[Phase.TRAINING] == 70000
