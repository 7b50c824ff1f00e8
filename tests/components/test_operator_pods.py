"""Pod builder: names, labels, annotations and ownership the rest of RLix relies on."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rlix.core import names
from rlix.core.phases import Phase
from rlix.core.rljob import RLJob
from rlix.core.snapshot import Taint, Toleration
from rlix.operator.pods import (
    ANNOTATION_ADMITTED_NODE,
    build_pod,
    desired_pod_names,
    pin_to_node,
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
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"}}
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
        assert (seen.node_selector, seen.tolerations) == (want.node_selector, want.tolerations)
        assert (seen.load_profile, seen.iteration_s) == ((), 0.0)  # no phaseProfile
        assert (want.load_profile, want.iteration_s) == ((), 0.0)
    assert planned["team-a/ppo-llama-helpful-critic-0"].memory_mib[Phase.TRAINING] == 70000


def test_a_role_that_loads_through_the_gate_says_so_on_its_pods_and_as_planned() -> None:
    """``loadsThroughGate``: the extender and admission pair such pods by
    turns where the nodes park at the gate; both read it the same way."""
    raw = yaml.safe_load((EXAMPLES / "grpo-trl.yaml").read_text())
    raw["metadata"].update(namespace="team-a", uid="uid-1")
    raw["spec"]["roles"][1]["loadsThroughGate"] = True
    job = RLJob.model_validate(raw)
    planned = {w.role: w for w in planned_workloads(job)}
    assert (planned["policy"].loads_through_gate, planned["rollout"].loads_through_gate) == (
        False,
        True,
    )
    for role in job.spec.roles:
        pod = build_pod(job, role, 0, owner_uid="u")
        notes = pod["metadata"]["annotations"]
        said = notes.get(names.ANNOTATION_LOADS_THROUGH_GATE)
        assert said == ("true" if role.name == "rollout" else None)
        assert workload_from_pod(pod).loads_through_gate == planned[role.name].loads_through_gate


def test_each_pod_says_how_its_iteration_is_spent_and_reads_back_as_planned() -> None:
    """grpo-trl.yaml declares phaseProfile rollout 240, scoring 20, training 90,
    weight sync 10 s, with a rollout role: disaggregated. Its rollout pod
    works 240 + 10 s and waits 110; its trainer pod works 20 + 90 + 10 and
    waits the 240 of rollout. Admission weighs the planned pods by it; the
    extender reads the same off the pods."""
    raw = yaml.safe_load((EXAMPLES / "grpo-trl.yaml").read_text())
    raw["metadata"].update(namespace="team-a", uid="uid-1")
    job = RLJob.model_validate(raw)
    planned = {w.role: w for w in planned_workloads(job)}
    expected = {
        "policy": {"scoring": 20, "training": 90, "weight-sync": 10, "idle": 240},
        "rollout": {"rollout": 240, "weight-sync": 10, "idle": 110},
    }
    for role in job.spec.roles:
        pod = build_pod(job, role, 0, owner_uid="u")
        said = json.loads(pod["metadata"]["annotations"][names.ANNOTATION_PHASE_SECONDS])
        assert said == expected[role.name]
        seen = workload_from_pod(pod)
        assert seen.iteration_s == planned[role.name].iteration_s == 360.0
        assert seen.load_profile == planned[role.name].load_profile
    shares = {(s.phase, round(s.share, 4), s.pressure) for s in planned["rollout"].load_profile}
    assert shares == {
        (Phase.ROLLOUT, round(240 / 360, 4), 1.0),
        (Phase.WEIGHT_SYNC, round(10 / 360, 4), 1.0),
        (Phase.IDLE, round(110 / 360, 4), 0.0),
    }


def test_planned_pods_carry_the_templates_selector_and_rlixs_gpu_toleration() -> None:
    """Admission plans where kube-scheduler would bind (the plan is pinned)."""
    job = grpo()
    (first, *_) = planned_workloads(job)
    assert first.node_selector == ((names.NODE_LABEL_GPU_PRODUCT, "NVIDIA-H100-80GB-HBM3"),)
    gpu = Toleration(names.GPU_RESOURCE, "Exists", "", "NoSchedule")
    assert gpu in first.tolerations
    assert gpu.tolerates(Taint(names.GPU_RESOURCE, "present", "NoSchedule"))


def grpo() -> RLJob:
    raw = yaml.safe_load((EXAMPLES / "grpo-trl.yaml").read_text())
    raw["metadata"].update(namespace="team-a", uid="uid-1")
    return RLJob.model_validate(raw)


def test_template_pod_keeps_the_users_fields_and_adds_rlixs() -> None:
    job = grpo()
    policy = job.spec.roles[0]
    pod = build_pod(job, policy, 0, owner_uid="uid-1", agent_socket_dir="/var/run/rlix")
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "math" and meta["labels"][names.LABEL_ROLE] == "policy"
    assert spec["nodeSelector"] == {names.NODE_LABEL_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    (container,) = spec["containers"]
    assert container["name"] == "trainer" and container["image"] == "huggingface/trl:0.19.0"
    assert container["resources"]["requests"] == {
        "cpu": "16",
        "memory": "128Gi",
        names.GPU_RESOURCE: "4",
    }
    assert container["resources"]["limits"] == {names.GPU_RESOURCE: "4"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    assert volumes[names.AGENT_SOCKET_VOLUME]["hostPath"]["path"] == "/var/run/rlix"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["shm"]["mountPath"] == "/dev/shm"
    assert mounts[names.AGENT_SOCKET_VOLUME] == {
        "name": names.AGENT_SOCKET_VOLUME,
        "mountPath": "/var/run/rlix",
        "readOnly": True,
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["RLIX_AGENT_SOCKET"] == "/var/run/rlix/agent.sock"
    assert env["WANDB_PROJECT"] == "grpo-math"  # the user's own env stays
    assert spec["hostname"] == "grpo-qwen-math-policy-0" and spec["subdomain"] == "grpo-qwen-math"
    assert spec["priorityClassName"] == "rlix-priority-100"
    assert spec["tolerations"] == [names.GPU_TOLERATION]
    # The template itself is not changed by building a pod from it.
    assert "volumeMounts" in policy.template.spec.containers[0].model_dump(by_alias=True)  # type: ignore[union-attr]
    assert len(policy.pod_template().spec.body()["volumes"]) == 1


def test_short_form_is_one_container_named_main() -> None:
    job = ppo()
    pod = build_pod(job, job.spec.roles[0], 0, owner_uid="u")
    (container,) = pod["spec"]["containers"]
    assert container["name"] == "main"
    assert container["command"] == ["python", "-m", "rlhf.ppo_learner"]
    env = [e["name"] for e in container["env"]]
    assert env[: len(names.OWNED_ENV)] == list(names.OWNED_ENV)
    assert env[-1] == "RAY_ADDRESS"  # after RLIX_HEAD_ADDR, so $(RLIX_HEAD_ADDR) expands


def test_cpu_role_keeps_its_own_tolerations_and_gets_no_gpu_one() -> None:
    job = RLJob.model_validate(yaml.safe_load((EXAMPLES / "verl-colocated.yaml").read_text()))
    pod = build_pod(job, job.spec.roles[1], 0, owner_uid="u")
    assert pod["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "rl", "effect": "NoSchedule"}
    ]


def test_gpu_toleration_is_not_added_twice() -> None:
    raw = yaml.safe_load((EXAMPLES / "grpo-trl.yaml").read_text())
    raw["spec"]["roles"][0]["template"]["spec"]["tolerations"] = [dict(names.GPU_TOLERATION)]
    job = RLJob.model_validate(raw)
    pod = build_pod(job, job.spec.roles[0], 0, owner_uid="u")
    assert pod["spec"]["tolerations"] == [names.GPU_TOLERATION]


def test_sidecars_get_env_and_socket_but_no_gpus() -> None:
    raw = yaml.safe_load((EXAMPLES / "grpo-trl.yaml").read_text())
    containers = raw["spec"]["roles"][0]["template"]["spec"]["containers"]
    containers.append({"name": "logs", "image": "busybox:1.36"})
    job = RLJob.model_validate(raw)
    pod = build_pod(job, job.spec.roles[0], 0, owner_uid="u")
    sidecar = pod["spec"]["containers"][1]
    assert "resources" not in sidecar
    assert any(e["name"] == "RLIX_AGENT_SOCKET" for e in sidecar["env"])
    assert sidecar["volumeMounts"][0]["name"] == names.AGENT_SOCKET_VOLUME


PIN_KEY = "requiredDuringSchedulingIgnoredDuringExecution"


def test_admitted_pod_is_pinned_to_its_node_by_required_affinity() -> None:
    job = ppo()
    pod = build_pod(job, job.spec.roles[1], 0, owner_uid="uid-1", admitted_node="rlix-gpu-3")
    terms = pod["spec"]["affinity"]["nodeAffinity"][PIN_KEY]["nodeSelectorTerms"]
    pin = {"key": "metadata.name", "operator": "In", "values": ["rlix-gpu-3"]}
    assert terms == [{"matchFields": [pin]}]
    unplanned = build_pod(job, job.spec.roles[1], 0, owner_uid="uid-1")
    assert "affinity" not in unplanned["spec"]


def test_pin_is_anded_into_every_term_of_the_templates_own_affinity() -> None:
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    rack = {"key": "rack", "operator": "In", "values": ["r1"]}
    spec = {
        "containers": [],
        "affinity": {
            "nodeAffinity": {
                PIN_KEY: {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [zone]},
                        {"matchExpressions": [rack]},
                    ]
                }
            },
            "podAntiAffinity": {"x": 1},
        },
    }
    out = pin_to_node(spec, "n1")
    pin = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    assert out["affinity"]["nodeAffinity"][PIN_KEY]["nodeSelectorTerms"] == [
        {"matchExpressions": [zone], "matchFields": [pin]},
        {"matchExpressions": [rack], "matchFields": [pin]},
    ]
    assert out["affinity"]["podAntiAffinity"] == {"x": 1}
    # The template itself is not changed (it is shared by every replica).
    assert spec["affinity"]["nodeAffinity"][PIN_KEY]["nodeSelectorTerms"][0] == {
        "matchExpressions": [zone]
    }


def test_a_pod_with_a_pinned_claim_requests_no_nvidia_gpu() -> None:
    from rlix.core import dra

    job = ppo()
    role = job.spec.roles[1]  # rollout, 1 GPU
    plan = dra.ClaimPlan("team-a", "ppo-llama-helpful-rollout-0", ("GPU-3",), 60000, (3,))
    pod = build_pod(job, role, 0, owner_uid="uid-1", admitted_node="n1", claim=plan)
    spec = pod["spec"]
    assert spec["resourceClaims"] == [
        {"name": dra.POD_CLAIM_NAME, "resourceClaimName": "ppo-llama-helpful-rollout-0"}
    ]
    main = spec["containers"][0]
    assert names.GPU_RESOURCE not in json.dumps(main.get("resources"))
    assert main["resources"]["claims"] == [{"name": dra.POD_CLAIM_NAME}]
    notes = pod["metadata"]["annotations"]
    assert notes[names.ANNOTATION_CLAIMED_GPUS] == "1"
    assert notes[names.ANNOTATION_GPU_INDICES] == "3"
    # Admission keeps counting the pinned GPU: the reader sees 1 GPU, GPU 3.
    workload = workload_from_pod(pod)
    assert workload is not None
    assert (workload.gpus, workload.gpu_indices, workload.node) == (1, (3,), "n1")
    # The budget comes from the claim's CDI spec (per GPU), not a second source.
    assert all(e["name"] != names.ENV_GPU_MEMORY_MIB for e in main["env"])
    # Without a claim: whole GPUs, as before, and the operator states the budget.
    plain = build_pod(job, role, 0, owner_uid="uid-1")
    assert "resourceClaims" not in plain["spec"]
    assert plain["spec"]["containers"][0]["resources"]["limits"][names.GPU_RESOURCE] == "1"
    assert any(e["name"] == names.ENV_GPU_MEMORY_MIB for e in plain["spec"]["containers"][0]["env"])


def test_a_role_that_declares_memory_gets_its_peak_as_the_budget_env() -> None:
    job = RLJob.model_validate(yaml.safe_load((EXAMPLES / "grpo-trl.yaml").read_text()))
    budgets = {}
    for role in job.spec.roles:
        (container, *_) = build_pod(job, role, 0, owner_uid="u")["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        budgets[role.name] = env.get(names.ENV_GPU_MEMORY_MIB)
    assert budgets == {"policy": "76000", "rollout": "69000"}
    # A role without declared memory has no budget to keep.
    cpu = RLJob.model_validate(yaml.safe_load((EXAMPLES / "verl-colocated.yaml").read_text()))
    pod = build_pod(cpu, cpu.spec.roles[1], 0, owner_uid="u")
    assert all(
        e["name"] != names.ENV_GPU_MEMORY_MIB for c in pod["spec"]["containers"] for e in c["env"]
    )


def test_an_mps_role_is_an_mps_client_on_nodes_running_the_daemon() -> None:
    from rlix.core import mps

    raw = yaml.safe_load((EXAMPLES / "grpo-trl.yaml").read_text())
    rollout = next(r for r in raw["spec"]["roles"] if r["name"] == "rollout")
    rollout["mps"] = {"activeThreadPercentage": 50}
    job = RLJob.model_validate(raw)
    role = next(r for r in job.spec.roles if r.name == "rollout")
    pod = build_pod(job, role, 0, owner_uid="u")
    spec = pod["spec"]
    worker, *sidecars = spec["containers"]
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert env[mps.ENV_PIPE] == "/run/rlix/mps/pipe"
    assert env[mps.ENV_MEMORY_LIMIT] == "0=69000M,1=69000M"  # its peak, on each of its 2 GPUs
    assert env[mps.ENV_THREADS] == "50"
    mounts = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
    assert mounts[mps.VOLUME_SHM] == "/dev/shm" and mounts[mps.VOLUME_PIPE] == env[mps.ENV_PIPE]
    volumes = {v["name"] for v in spec["volumes"]}
    assert {mps.VOLUME_PIPE, mps.VOLUME_SHM} <= volumes
    assert spec["nodeSelector"][mps.NODE_LABEL_MPS] == "true"
    for sidecar in sidecars:  # no GPU, no MPS
        assert all(e["name"] not in mps.OWNED_ENV for e in sidecar.get("env") or [])
    # Admission plans with the same selector, so it never plans a node without the daemon.
    planned = [w for w in planned_workloads(job) if w.role == "rollout"]
    assert planned and all((mps.NODE_LABEL_MPS, "true") in w.node_selector for w in planned)
    # The other roles are untouched.
    policy = build_pod(job, job.spec.roles[0], 0, owner_uid="u")
    assert mps.NODE_LABEL_MPS not in (policy["spec"].get("nodeSelector") or {})
