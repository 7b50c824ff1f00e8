"""The API server's own pod validation, at apply time: a dry run of each role's pod.

A role's pod template passes unknown fields through the CRD schema (see
``rlix.core.rljob.PodSpec``), so the schema alone cannot say that a container
mounts a volume the template does not define, or that a quantity is not one.
The webhook therefore asks the API server to create replica 0 of each
templated role with ``dryRun=All``: it runs the full Pod validation and admission
chain and stores nothing. Only "invalid" answers (400/422) refuse the RLJob; a
quota or policy refusal (403) may change before the pods are created, and an
unreachable API server must never block writes, so both pass.

The dry-run pod is the one the operator would create, minus what only exists
once the job does: its owner reference (the job has no UID yet) and its
PriorityClass (created by the operator before the pods). A short-form role is
fully typed by the schema and needs no dry run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from rlix.core.validation import parse, spec_errors
from rlix.operator.kube import Kube, KubeError
from rlix.operator.pods import build_pod

INVALID = (400, 422)


def dry_run_pods(
    manifest: Mapping[str, Any], *, agent_socket_dir: str, scheduler_name: str
) -> list[tuple[int, dict[str, Any]]]:
    """(role index, pod) for replica 0 of every templated role of a valid manifest."""
    job, errors = parse(manifest)
    if job is None or errors or spec_errors(job.spec):
        return []  # the other rules already refuse it, and name the field better
    out = []
    for i, role in enumerate(job.spec.roles):
        if role.template is None:
            continue
        pod = build_pod(
            job,
            role,
            0,
            owner_uid="",
            agent_socket_dir=agent_socket_dir,
            scheduler_name=scheduler_name,
        )
        del pod["metadata"]["ownerReferences"]
        del pod["spec"]["priorityClassName"]
        out.append((i, pod))
    return out


async def template_errors(
    kube: Kube, manifest: Mapping[str, Any], *, agent_socket_dir: str, scheduler_name: str
) -> list[str]:
    """What the API server finds wrong with each templated role's pods, by role."""
    pods = dry_run_pods(manifest, agent_socket_dir=agent_socket_dir, scheduler_name=scheduler_name)

    async def one(index: int, pod: dict[str, Any]) -> str | None:
        namespace = pod["metadata"]["namespace"]
        try:
            await kube.create(f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod)
        except KubeError as exc:
            if exc.status in INVALID:
                return (
                    f"spec.roles[{index}].template: the API server refuses its pods: {exc.message}"
                )
        return None

    found = await asyncio.gather(*(one(i, p) for i, p in pods))
    return [e for e in found if e is not None]
