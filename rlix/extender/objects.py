"""Kubernetes Pod and Node objects (as JSON dicts) -> core Workload and Node.

This is where RLix's annotations are read (see docs/extender.md):

* ``rlix.io/gpu-memory-mib``: per-GPU memory, either one integer (MiB in every
  phase) or a JSON object ``{"rollout": 60000, "training": 72000}``; a phase not
  listed costs the pod's peak. Undeclared means "the whole GPU".
* ``rlix.io/priority``: an integer, used when ``spec.priority`` is not set.
* ``rlix.io/preemptible`` (label or annotation): ``"false"`` protects the pod
  from preemption; absent means Kubernetes' own rule (lower priority may go).
* ``rlix.io/gang-size``: pods of the job that must run together (default 1).
* ``rlix.io/suspended``: ``"true"`` while the pod's memory is parked off-GPU.
* ``rlix.io/gpu-indices``: ``"0,3"``, the GPUs the device plugin gave the pod.
* labels ``rlix.io/job``, ``rlix.io/role``; annotation ``rlix.io/phase``.

Two modes, because the input has two owners. The pod being scheduled is the
user's: a garbage annotation there is an error the user must see (``strict``).
Pods already running were admitted long ago; a bad annotation on one must not
wedge scheduling for everyone, so it degrades to the safe reading (the whole
GPU, not preemptible).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rlix.core import names
from rlix.core.phases import Phase
from rlix.core.snapshot import GPU, Node, Workload

_INTEGER = re.compile(r"[+-]?[0-9]+")


class ObjectError(ValueError):
    """A Pod or Node object (or one of its RLix annotations) cannot be read."""


def _map(obj: Any, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _str_map(obj: Any, key: str) -> Mapping[str, str]:
    return {k: v for k, v in _map(obj, key).items() if isinstance(v, str)}


def _int(raw: Any, what: str, *, minimum: int = 0) -> int:
    if isinstance(raw, bool):
        raise ObjectError(f"{what} must be an integer, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
        value = int(raw.strip())
    else:
        raise ObjectError(f"{what} must be an integer, got {raw!r}")
    if value < minimum:
        raise ObjectError(f"{what} must be >= {minimum}, got {value}")
    return value


def pod_name(pod: Any) -> str:
    meta = _map(pod, "metadata")
    ns, name = meta.get("namespace") or "default", meta.get("name")
    if not isinstance(name, str) or not name or not isinstance(ns, str):
        raise ObjectError("pod has no metadata.name")
    return f"{ns}/{name}"


def pod_uid(pod: Any) -> str:
    uid = _map(pod, "metadata").get("uid")
    return uid if isinstance(uid, str) else ""


def _container_gpus(container: Any, where: str) -> int:
    resources = _map(container, "resources")
    found = [
        _int(_map(resources, part)[names.GPU_RESOURCE], f"{where} {part} {names.GPU_RESOURCE}")
        for part in ("limits", "requests")
        if names.GPU_RESOURCE in _map(resources, part)
    ]
    return max(found, default=0)


def pod_gpus(pod: Any) -> int:
    """GPUs the pod requests, the way the scheduler counts an extended resource.

    Effective request = max(sum over containers, largest init container).
    """
    spec = _map(pod, "spec")
    containers = spec.get("containers")
    inits = spec.get("initContainers")
    main = sum(
        _container_gpus(c, f"container {i}")
        for i, c in enumerate(containers if isinstance(containers, list) else [])
    )
    init = max(
        (
            _container_gpus(c, f"init container {i}")
            for i, c in enumerate(inits if isinstance(inits, list) else [])
        ),
        default=0,
    )
    return max(main, init)


def parse_memory(raw: str) -> dict[Phase, int]:
    """Read ``rlix.io/gpu-memory-mib``: one integer, or a JSON object {phase: MiB}."""
    what = f"annotation {names.ANNOTATION_GPU_MEMORY_MIB}"
    text = raw.strip()
    try:
        value = json.loads(text)
    except ValueError:
        raise ObjectError(
            f'{what} must be an integer MiB or JSON like {{"rollout": 60000}}, got {raw!r}'
        ) from None
    if isinstance(value, int | str) and not isinstance(value, bool):
        mib = _int(value, what, minimum=1)
        return {phase: mib for phase in Phase if phase is not Phase.IDLE}
    if not isinstance(value, dict) or not value:
        raise ObjectError(f"{what} must be an integer or a non-empty JSON object, got {raw!r}")
    out: dict[Phase, int] = {}
    for key, mib in value.items():
        phase = Phase.parse(key)
        if phase is None:
            known = ", ".join(p.value for p in Phase)
            raise ObjectError(f"{what}: unknown phase {key!r} (known: {known})")
        out[phase] = _int(mib, f"{what}[{key!r}]", minimum=0)
    return out


def _flag(raw: str | None, what: str) -> bool | None:
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in ("true", "yes", "1"):
        return True
    if value in ("false", "no", "0"):
        return False
    raise ObjectError(f'{what} must be "true" or "false", got {raw!r}')


def _indices(raw: str) -> tuple[int, ...]:
    what = f"annotation {names.ANNOTATION_GPU_INDICES}"
    return tuple(_int(part, what) for part in raw.split(",") if part.strip())


def _attempt(strict: bool, fn: Any, fallback: Any) -> Any:
    if strict:
        return fn()
    try:
        return fn()
    except ObjectError:
        return fallback


def pod_to_workload(pod: Any, *, strict: bool) -> Workload:
    """The Workload a pod object describes (see the module docstring for ``strict``)."""
    if not isinstance(pod, Mapping):
        raise ObjectError("Pod must be a JSON object")
    name = pod_name(pod)
    ns = name.split("/", 1)[0]
    labels = _str_map(pod.get("metadata"), "labels")
    notes = _str_map(pod.get("metadata"), "annotations")
    spec = _map(pod, "spec")
    job = labels.get(names.LABEL_JOB, "")

    raw_memory = notes.get(names.ANNOTATION_GPU_MEMORY_MIB)
    memory = _attempt(strict, lambda: parse_memory(raw_memory), {}) if raw_memory else {}

    priority = spec.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool):
        raw = notes.get(names.ANNOTATION_PRIORITY)
        what = f"annotation {names.ANNOTATION_PRIORITY}"
        priority = _attempt(strict, lambda: _int(raw, what, minimum=-(2**31)), 0) if raw else 0

    raw_pre = labels.get(names.LABEL_PREEMPTIBLE, notes.get(names.LABEL_PREEMPTIBLE))
    what = f"{names.LABEL_PREEMPTIBLE}"
    preemptible = _attempt(strict, lambda: _flag(raw_pre, what), False)

    raw_gang = notes.get(names.ANNOTATION_GANG_SIZE)
    what_gang = f"annotation {names.ANNOTATION_GANG_SIZE}"
    gang = _attempt(strict, lambda: _int(raw_gang, what_gang, minimum=1), 1) if raw_gang else 1

    raw_susp = notes.get(names.ANNOTATION_SUSPENDED)
    what_susp = f"annotation {names.ANNOTATION_SUSPENDED}"
    suspended = _attempt(strict, lambda: _flag(raw_susp, what_susp), False)

    raw_idx = notes.get(names.ANNOTATION_GPU_INDICES)
    indices = _attempt(strict, lambda: _indices(raw_idx), ()) if raw_idx else ()

    gpus = _attempt(strict, lambda: pod_gpus(pod), 0)
    node = spec.get("nodeName")
    return Workload(
        name=name,
        job=f"{ns}/{job}" if job else "",
        role=labels.get(names.LABEL_ROLE, ""),
        gpus=gpus,
        memory_mib=memory,
        priority=priority,
        preemptible=True if preemptible is None else preemptible,
        phase=Phase.parse(notes.get(names.ANNOTATION_PHASE)),
        node=node if isinstance(node, str) and node else None,
        gpu_indices=indices,
        suspended=bool(suspended),
        gang_size=gang,
    )


def _node_gpus(raw: str) -> tuple[GPU, ...]:
    what = f"node annotation {names.ANNOTATION_NODE_GPUS}"
    try:
        value = json.loads(raw)
    except ValueError:
        raise ObjectError(f"{what} is not JSON") from None
    if not isinstance(value, list):
        raise ObjectError(f"{what} must be a JSON list")
    gpus = []
    for i, g in enumerate(value):
        if not isinstance(g, Mapping):
            raise ObjectError(f"{what}[{i}] must be an object")
        util = g.get("utilization", 0.0)
        gpus.append(
            GPU(
                index=_int(g.get("index"), f"{what}[{i}].index"),
                memory_mib=_int(g.get("memoryMiB"), f"{what}[{i}].memoryMiB"),
                used_mib=_int(g.get("usedMiB", 0), f"{what}[{i}].usedMiB"),
                utilization=float(util) if isinstance(util, int | float) else 0.0,
            )
        )
    return tuple(gpus)


def node_from_object(obj: Any) -> Node:
    """The Node a Kubernetes Node object describes; bad labels degrade to "no GPUs"."""
    if not isinstance(obj, Mapping):
        raise ObjectError("Node must be a JSON object")
    meta = _map(obj, "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ObjectError("node has no metadata.name")
    labels = _str_map(meta, "labels")
    notes = _str_map(meta, "annotations")
    status = _map(obj, "status")
    count_raw = labels.get(
        names.NODE_LABEL_GPU_COUNT,
        _map(status, "allocatable").get(
            names.GPU_RESOURCE, _map(status, "capacity").get(names.GPU_RESOURCE, 0)
        ),
    )
    count = _attempt(False, lambda: _int(count_raw, "gpu count"), 0)
    memory = _attempt(
        False, lambda: _int(labels.get(names.NODE_LABEL_GPU_MEMORY_MIB, 0), "gpu memory"), 0
    )
    raw_gpus = notes.get(names.ANNOTATION_NODE_GPUS)
    gpus = _attempt(False, lambda: _node_gpus(raw_gpus), ()) if raw_gpus else ()
    return Node(
        name=name,
        gpu_count=count,
        gpu_memory_mib=memory,
        product=labels.get(names.NODE_LABEL_GPU_PRODUCT, ""),
        nvlink_domain=labels.get(names.LABEL_NVLINK_DOMAIN) or None,
        schedulable=not bool(_map(obj, "spec").get("unschedulable")),
        gpus=gpus,
    )
