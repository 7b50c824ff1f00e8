"""A Node object -> the core ``Node`` (with its per-object errors).

How many GPUs: the ``nvidia.com/gpu.count`` label first, then allocatable
``nvidia.com/gpu`` divided by ``nvidia.com/gpu.replicas``. Why the label wins:
``Node.gpu_count`` is the number of *physical* GPUs, each holding
``gpu_memory_mib``, and that is what RLix's memory model shares between pods.
Under NVIDIA time-slicing the device plugin advertises every GPU ``replicas``
times (8 GPUs x 4 replicas = 32 allocatable), while GPU feature discovery's
count label still says 8. Reading allocatable first would give that node 32
GPUs of full memory each, and admission would promise four times the memory
the node has. kube-scheduler keeps counting allocatable on its own, which is
what lets time-sliced pods share a GPU at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlix.core import names
from rlix.core.objects import facts as f
from rlix.core.objects.bounds import ObjectError
from rlix.core.objects.metadata import identity, part, strings
from rlix.core.snapshot import Node, Taint, Toleration

# The API server validates labels and taints (keys <= 317 characters, values <=
# 63); these caps only keep a hostile body from costing more than a real node.
MAX_LABELS = 512
MAX_TAINTS = 64
MAX_LABEL_CHARS = 512
# Effects that keep a pod off a node (PreferNoSchedule only scores).
KEEPS_OFF = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    node: Node
    errors: tuple[ObjectError, ...]


def read_node(obj: object) -> NodeFacts:
    """Read one Node object; ``ObjectError`` only if it has no usable name."""
    name = identity(obj, "Node", namespaced=False)
    reading = f.Reading("Node", name)
    labels, notes = strings(obj, "labels"), strings(obj, "annotations")
    status = part(obj, "status")
    count = reading.get(f.NODE_GPU_COUNT, labels.get(names.NODE_LABEL_GPU_COUNT))
    if count is None:
        offered = part(status, "allocatable").get(
            names.GPU_RESOURCE, part(status, "capacity").get(names.GPU_RESOURCE)
        )
        replicas = reading.get(f.NODE_GPU_REPLICAS, labels.get(names.NODE_LABEL_GPU_REPLICAS))
        count = reading.get(f.NODE_ALLOCATABLE, offered) // replicas
    node = Node(
        name=name,
        gpu_count=count,
        gpu_memory_mib=reading.get(f.NODE_GPU_MEMORY, labels.get(names.NODE_LABEL_GPU_MEMORY_MIB)),
        product=reading.get(f.NODE_GPU_PRODUCT, labels.get(names.NODE_LABEL_GPU_PRODUCT)),
        nvlink_domain=reading.get(f.NODE_NVLINK_DOMAIN, labels.get(names.LABEL_NVLINK_DOMAIN))
        or None,
        schedulable=not reading.get(f.NODE_UNSCHEDULABLE, part(obj, "spec").get("unschedulable")),
        gpus=reading.get(f.NODE_GPU_STATE, notes.get(names.ANNOTATION_NODE_GPUS)),
        claims=reading.get(f.NODE_GPU_CLAIMS, notes.get(names.ANNOTATION_NODE_GPU_CLAIMS)),
        memory_overcommit=reading.get(
            f.NODE_MEMORY_OVERCOMMIT, notes.get(names.ANNOTATION_NODE_MEMORY_OVERCOMMIT)
        ),
        labels=label_pairs(labels),
        taints=taints_of(part(obj, "spec").get("taints")),
    )
    return NodeFacts(node=node, errors=tuple(reading.errors))


def _short(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_LABEL_CHARS


def label_pairs(labels: object) -> tuple[tuple[str, str], ...]:
    """A node's (or a pod's nodeSelector's) string pairs, sorted; others skipped."""
    if not isinstance(labels, dict):
        return ()
    pairs = [(k, v) for k, v in list(labels.items())[:MAX_LABELS] if _short(k) and _short(v)]
    return tuple(sorted(pairs))


def taints_of(raw: object) -> tuple[Taint, ...]:
    """The taints that keep pods off (NoSchedule, NoExecute); malformed ones skipped."""
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw[:MAX_TAINTS]:
        if not isinstance(item, dict):
            continue
        key, value, effect = item.get("key"), item.get("value", ""), item.get("effect")
        if _short(key) and _short(value) and effect in KEEPS_OFF:
            out.append(Taint(key=str(key), value=str(value), effect=str(effect)))
    return tuple(out)


def tolerations_of(raw: object) -> tuple[Toleration, ...]:
    """A pod spec's tolerations (malformed ones skipped: they tolerate nothing)."""
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw[:MAX_TAINTS]:
        if not isinstance(item, dict):
            continue
        fields = [item.get(k) or "" for k in ("key", "operator", "value", "effect")]
        if all(_short(v) for v in fields):
            key, operator, value, effect = (str(v) for v in fields)
            out.append(Toleration(key, operator or "Equal", value, effect))
    return tuple(out)
