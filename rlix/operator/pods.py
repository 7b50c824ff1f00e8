"""Pure builders for the pods an RLJob runs, and their Workload twins.

Pod names are deterministic (``<job>-<role>-<index>``) so that creating a pod is
idempotent: an operator killed between "create" and "record" that starts again
gets 409 Conflict instead of a duplicate. The same description feeds the
admission policy (as ``Workload``) so what is admitted is what gets created.
"""

from __future__ import annotations

import json
from typing import Any

from rlix.core import dra, mps, names
from rlix.core.objects.nodes import label_pairs, tolerations_of
from rlix.core.rljob import RLJob, Role, RoleKind
from rlix.core.snapshot import PhaseLoad, Toleration, Workload, load_profile_of
from rlix.operator.peers import owner_reference, peer_env, service_name

LABEL_INDEX = names.LABEL_REPLICA_INDEX
# Where admission planned the pod: until it binds, the reservation is what keeps
# the next admission pass from promising the same GPUs twice (also after an
# operator restart). The pod's required node affinity (``pin_to_node``) makes the
# scheduler bind it there and nowhere else.
ANNOTATION_ADMITTED_NODE = names.ANNOTATION_ADMITTED_NODE


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role}-{index}"


def desired_pod_names(job: RLJob) -> dict[str, tuple[Role, int]]:
    """Every pod the job should have, by name."""
    return {
        pod_name(job.name, role.name, i): (role, i)
        for role in job.spec.roles
        for i in range(role.replicas)
    }


def gang_size(job: RLJob) -> int:
    return sum(role.replicas for role in job.spec.roles)


def preemptible(job: RLJob, role: Role) -> bool:
    # Only rollout is suspended in place: a trainer holds optimizer state that
    # the job cannot afford to lose mid-step.
    return job.spec.preemptible_rollout and role.kind is RoleKind.ROLLOUT


def _memory_annotation(role: Role) -> str | None:
    if role.gpu_memory is None:
        return None
    return json.dumps({p.value: mib for p, mib in role.gpu_memory.by_phase().items()})


def priority_class_name(job: RLJob) -> str:
    """The PriorityClass whose value is the job's priority (docs/rljob.md, "Priority")."""
    return f"{names.PRIORITY_CLASS_PREFIX}{job.spec.priority}"


def build_priority_class(priority: int) -> dict[str, Any]:
    """The PriorityClass for one RLJob priority value; the operator creates it if absent."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": f"{names.PRIORITY_CLASS_PREFIX}{priority}",
            "labels": {"app.kubernetes.io/managed-by": "rlix-operator"},
        },
        "value": priority,
        "globalDefault": False,
        "description": f"Pods of RLJobs with spec.priority {priority} (created by RLix).",
    }


def _with_rlix(
    container: dict[str, Any],
    env: list[dict[str, str]],
    socket_dir: str,
    gpus: int,
    first: bool,
    *,
    claimed: bool = False,
) -> dict[str, Any]:
    """One template container plus what RLix owns: env, the agent socket, GPUs."""
    out = dict(container)
    out["env"] = [*env, *(container.get("env") or [])]
    mount = {"name": names.AGENT_SOCKET_VOLUME, "mountPath": socket_dir, "readOnly": True}
    out["volumeMounts"] = [*(container.get("volumeMounts") or []), mount]
    if first and gpus and claimed:
        # The GPUs come from the pod's pinned claim, not from nvidia.com/gpu.
        resources = dict(container.get("resources") or {})
        resources["claims"] = [*(resources.get("claims") or []), {"name": dra.POD_CLAIM_NAME}]
        out["resources"] = resources
    elif first and gpus:
        # The first container is the role's worker; sidecars get no GPUs.
        resources = dict(container.get("resources") or {})
        count = str(gpus)
        resources["limits"] = {**(resources.get("limits") or {}), names.GPU_RESOURCE: count}
        resources["requests"] = {**(resources.get("requests") or {}), names.GPU_RESOURCE: count}
        out["resources"] = resources
    return out


def _with_mps(spec: dict[str, Any], role: Role) -> dict[str, Any]:
    """A GPU role under MPS: its worker is an MPS client of the node's control daemon.

    The nodeSelector keeps its pods on nodes whose agent runs the daemon (and
    admission reads it like any template selector); the pinned memory limit is
    the role's budget, so MPS enforces what the GPU claim promised.
    """
    assert role.mps is not None
    paths = mps.MpsPaths()
    budget = max(role.gpu_memory.by_phase().values(), default=0) if role.gpu_memory else 0
    env = mps.client_env(
        paths,
        gpus=role.gpus_per_replica,
        budget_mib=budget,
        active_thread_percentage=role.mps.active_thread_percentage,
    )
    volumes, mounts = mps.client_volumes(paths)
    worker, *sidecars = spec["containers"]
    worker = {
        **worker,
        "env": [*(worker.get("env") or []), *env],
        "volumeMounts": [*(worker.get("volumeMounts") or []), *mounts],
    }
    return {
        **spec,
        "containers": [worker, *sidecars],
        "volumes": [*(spec.get("volumes") or []), *volumes],
        "nodeSelector": {**(spec.get("nodeSelector") or {}), mps.NODE_LABEL_MPS: "true"},
    }


def pin_to_node(spec: dict[str, Any], node: str) -> dict[str, Any]:
    """``spec`` with a required node affinity for ``node`` added to the template's own.

    Why required affinity: admission promised this node's room to this pod and
    counts it there until it binds, but kube-scheduler binds. If it bound the
    pod elsewhere (its own scoring, the extender's, or no extender at all), the
    admitter would count the pod on its real node while the planned node looked
    free, and promise that room again. A required term is enforced by the
    scheduler itself, whatever the extender says or whether it answers at all.
    ``matchFields`` on ``metadata.name`` is what the DaemonSet controller pins
    with. The template's own terms are kept: terms are ORed, so the pin is ANDed
    into each of them.
    """
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = dict(spec.get("affinity") or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:
        term["matchFields"] = [*(term.get("matchFields") or []), pin]
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node_affinity
    return {**spec, "affinity": affinity}


def build_pod(
    job: RLJob,
    role: Role,
    index: int,
    *,
    owner_uid: str,
    admitted_node: str | None = None,
    agent_socket_dir: str = names.AGENT_SOCKET_DIR,
    scheduler_name: str = names.SCHEDULER_NAME,
    claim: dra.ClaimPlan | None = None,
) -> dict[str, Any]:
    """The Pod for replica ``index`` of ``role``: the role's template plus what RLix owns.

    ``scheduler_name`` is the profile the chart's second kube-scheduler serves
    (``scheduler.name``), handed to the operator as ``--scheduler-name``. With
    ``claim`` (a node RLix drives by DRA) the pod gets its GPUs through that
    pinned ResourceClaim instead of requesting ``nvidia.com/gpu``.

    The template was checked against RLix's fields (``rlix.core.validation``),
    so nothing here overwrites a value the user set; the user's own labels,
    annotations, env and volumes come through unchanged.
    """
    name = pod_name(job.name, role.name, index)
    template = role.pod_template()
    annotations = {
        **template.metadata.annotations,
        names.ANNOTATION_PRIORITY: str(job.spec.priority),
        names.ANNOTATION_GANG_SIZE: str(gang_size(job)),
    }
    if admitted_node:
        annotations[ANNOTATION_ADMITTED_NODE] = admitted_node
    if role.loads_through_gate:
        annotations[names.ANNOTATION_LOADS_THROUGH_GATE] = "true"
    memory = _memory_annotation(role)
    if memory is not None:
        annotations[names.ANNOTATION_GPU_MEMORY_MIB] = memory
    seconds = job.spec.pod_phase_seconds(role)
    if seconds:
        annotations[names.ANNOTATION_PHASE_SECONDS] = json.dumps(
            {phase.value: s for phase, s in seconds.items()}, separators=(",", ":")
        )
    socket = f"{agent_socket_dir.rstrip('/')}/{names.AGENT_SOCKET_FILE}"
    env = peer_env(job, role, index, socket_path=socket, claimed=claim is not None)
    spec = template.spec.body()
    spec["containers"] = [
        _with_rlix(
            c, env, agent_socket_dir, role.gpus_per_replica, i == 0, claimed=claim is not None
        )
        for i, c in enumerate(spec["containers"])
    ]
    if claim is not None and role.gpus_per_replica:
        ref = {"name": dra.POD_CLAIM_NAME, "resourceClaimName": claim.name}
        spec["resourceClaims"] = [*(spec.get("resourceClaims") or []), ref]
        annotations[names.ANNOTATION_CLAIMED_GPUS] = str(role.gpus_per_replica)
        # The plan, so admission counts the pinned GPUs (not a guess) until the
        # allocation, which the extender reads, says the same.
        annotations[names.ANNOTATION_GPU_INDICES] = ",".join(map(str, claim.gpus))
    # The socket only: the directory the agent serves in, nothing else of the host.
    socket_volume = {
        "name": names.AGENT_SOCKET_VOLUME,
        "hostPath": {"path": agent_socket_dir, "type": "DirectoryOrCreate"},
    }
    spec["volumes"] = [*(spec.get("volumes") or []), socket_volume]
    if role.mps is not None and role.gpus_per_replica:
        spec = _with_mps(spec, role)
    if admitted_node:
        spec = pin_to_node(spec, admitted_node)
    if role.gpus_per_replica:
        tolerations = list(spec.get("tolerations") or [])
        if names.GPU_TOLERATION not in tolerations:
            tolerations.append(dict(names.GPU_TOLERATION))
        spec["tolerations"] = tolerations
    spec.update(
        schedulerName=scheduler_name,
        # The operator restarts failed pods itself, with backoff and a limit
        # counted per job; a kubelet restart loop would hide failures from it.
        restartPolicy="Never",
        hostname=name,
        subdomain=service_name(job),
        priorityClassName=priority_class_name(job),
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": {
                **template.metadata.labels,
                names.LABEL_JOB: job.name,
                names.LABEL_ROLE: role.name,
                LABEL_INDEX: str(index),
                names.LABEL_PREEMPTIBLE: "true" if preemptible(job, role) else "false",
            },
            "annotations": annotations,
            "ownerReferences": [owner_reference(job, owner_uid)],
        },
        "spec": spec,
    }


def _placement_constraints(
    job: RLJob, role: Role, index: int
) -> tuple[tuple[tuple[str, str], ...], tuple[Toleration, ...]]:
    """The pod's nodeSelector and tolerations exactly as ``build_pod`` writes them
    (the role's template plus RLix's GPU toleration), for admission to plan with."""
    spec = build_pod(job, role, index, owner_uid="")["spec"]
    return label_pairs(spec.get("nodeSelector")), tolerations_of(spec.get("tolerations"))


def planned_workloads(job: RLJob) -> tuple[Workload, ...]:
    """The job's pods as the admission policy sees them before they exist."""
    size = gang_size(job)
    out = []
    # A role's replicas share its template's placement; building one pod per
    # role (not per replica) keeps an admission pass cheap for wide gangs.
    constraints: dict[str, tuple[tuple[tuple[str, str], ...], tuple[Toleration, ...]]] = {}
    profiles: dict[str, tuple[tuple[PhaseLoad, ...], float]] = {}
    for name, (role, index) in desired_pod_names(job).items():
        if role.name not in constraints:
            constraints[role.name] = _placement_constraints(job, role, index)
            profiles[role.name] = load_profile_of(job.spec.pod_phase_seconds(role))
        selector, tolerations = constraints[role.name]
        profile, iteration_s = profiles[role.name]
        out.append(
            Workload(
                name=f"{job.namespace}/{name}",
                job=job.key,
                role=role.name,
                gpus=role.gpus_per_replica,
                memory_mib=role.gpu_memory.by_phase() if role.gpu_memory else {},
                priority=job.spec.priority,
                preemptible=preemptible(job, role),
                gang_size=size,
                loads_through_gate=role.loads_through_gate,
                node_selector=selector,
                tolerations=tolerations,
                load_profile=profile,
                iteration_s=iteration_s,
            )
        )
    return tuple(out)
