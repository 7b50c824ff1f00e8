"""ClusterSnapshot <-> plain JSON, for /debug/snapshot and offline replay.

A captured snapshot is a bug report: it must round-trip exactly, and reading one
that was hand-edited must fail with a message naming the bad field rather than a
KeyError from deep inside the policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlix.core.phases import Phase
from rlix.core.policy.placement.sharing import BUSY_SHAPES, DEFAULT_RULES, SharingRules
from rlix.core.snapshot import GPU, ClusterSnapshot, Node, PhaseLoad, Workload

FORMAT_VERSION = 1


class SnapshotDocumentError(ValueError):
    """A snapshot document is not in the shape ``snapshot_to_doc`` writes."""


def node_to_doc(node: Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "gpuCount": node.gpu_count,
        "gpuMemoryMiB": node.gpu_memory_mib,
        "product": node.product,
        "nvlinkDomain": node.nvlink_domain,
        "schedulable": node.schedulable,
        "gpuClaims": node.claims,
        "gpus": [
            {
                "index": g.index,
                "memoryMiB": g.memory_mib,
                "usedMiB": g.used_mib,
                "utilization": g.utilization,
            }
            for g in node.gpus
        ],
    }


def workload_to_doc(w: Workload) -> dict[str, Any]:
    return {
        "name": w.name,
        "job": w.job,
        "role": w.role,
        "gpus": w.gpus,
        "memoryMiB": {p.value: mib for p, mib in w.memory_mib.items()},
        "priority": w.priority,
        "preemptible": w.preemptible,
        "phase": w.phase.value if w.phase is not None else None,
        "node": w.node,
        "gpuIndices": list(w.gpu_indices),
        "suspended": w.suspended,
        "gangSize": w.gang_size,
        "loadsThroughGate": w.loads_through_gate,
        "loadProfile": [
            {"phase": s.phase.value, "share": s.share, "pressure": s.pressure}
            for s in w.load_profile
        ],
        "iterationSeconds": w.iteration_s,
    }


def snapshot_to_doc(snapshot: ClusterSnapshot) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "nodes": [node_to_doc(n) for n in snapshot.nodes.values()],
        "workloads": [workload_to_doc(w) for w in snapshot.workloads],
    }


def _get(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise SnapshotDocumentError(f"{where}: missing field {key!r}")
    value = doc[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float)):
        raise SnapshotDocumentError(f"{where}: field {key!r} has the wrong type ({value!r})")
    return value


def _opt(
    doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: str
) -> Any:
    return _get(doc, key, kind, where) if doc.get(key) is not None else default


def node_from_doc(doc: Any) -> Node:
    if not isinstance(doc, Mapping):
        raise SnapshotDocumentError(f"node entry must be an object, got {doc!r}")
    name = _get(doc, "name", str, "node")
    where = f"node {name!r}"
    gpus = []
    for i, g in enumerate(_opt(doc, "gpus", list, [], where)):
        if not isinstance(g, Mapping):
            raise SnapshotDocumentError(f"{where}: gpus[{i}] must be an object")
        gw = f"{where} gpus[{i}]"
        gpus.append(
            GPU(
                index=_get(g, "index", int, gw),
                memory_mib=_get(g, "memoryMiB", int, gw),
                used_mib=_opt(g, "usedMiB", int, 0, gw),
                utilization=float(_opt(g, "utilization", (int, float), 0.0, gw)),
            )
        )
    return Node(
        name=name,
        gpu_count=_get(doc, "gpuCount", int, where),
        gpu_memory_mib=_get(doc, "gpuMemoryMiB", int, where),
        product=_opt(doc, "product", str, "", where),
        claims=_opt(doc, "gpuClaims", bool, False, where),
        nvlink_domain=_opt(doc, "nvlinkDomain", str, None, where),
        schedulable=_opt(doc, "schedulable", bool, True, where),
        gpus=tuple(gpus),
    )


def _phase(raw: Any, where: str) -> Phase:
    phase = Phase.parse(raw) if isinstance(raw, str) else None
    if phase is None:
        raise SnapshotDocumentError(f"{where}: unknown phase {raw!r}")
    return phase


def workload_from_doc(doc: Any) -> Workload:
    if not isinstance(doc, Mapping):
        raise SnapshotDocumentError(f"workload entry must be an object, got {doc!r}")
    name = _get(doc, "name", str, "workload")
    where = f"workload {name!r}"
    memory = _opt(doc, "memoryMiB", Mapping, {}, where)
    for key, mib in memory.items():
        if not isinstance(mib, int) or isinstance(mib, bool) or mib < 0:
            raise SnapshotDocumentError(f"{where}: memoryMiB[{key!r}] must be MiB >= 0")
    raw_phase = doc.get("phase")
    return Workload(
        name=name,
        job=_opt(doc, "job", str, "", where),
        role=_opt(doc, "role", str, "", where),
        gpus=_get(doc, "gpus", int, where),
        memory_mib={_phase(k, where): v for k, v in memory.items()},
        priority=_opt(doc, "priority", int, 0, where),
        preemptible=_opt(doc, "preemptible", bool, False, where),
        phase=_phase(raw_phase, where) if raw_phase is not None else None,
        node=_opt(doc, "node", str, None, where),
        gpu_indices=tuple(_opt(doc, "gpuIndices", list, [], where)),
        suspended=_opt(doc, "suspended", bool, False, where),
        gang_size=_opt(doc, "gangSize", int, 1, where),
        loads_through_gate=_opt(doc, "loadsThroughGate", bool, False, where),
        load_profile=_load_profile(_opt(doc, "loadProfile", list, [], where), where),
        iteration_s=_seconds(doc.get("iterationSeconds", 0.0), where),
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _seconds(raw: Any, where: str) -> float:
    value = _number(raw)
    if value is None or not value >= 0 or value == float("inf"):
        raise SnapshotDocumentError(f"{where}: iterationSeconds must be seconds >= 0")
    return value


def _load_profile(raw: list[Any], where: str) -> tuple[PhaseLoad, ...]:
    out = []
    for entry in raw:
        if not isinstance(entry, Mapping):
            raise SnapshotDocumentError(f"{where}: loadProfile entries must be objects")
        share, pressure = _number(entry.get("share")), _number(entry.get("pressure", 1.0))
        if share is None or pressure is None:
            raise SnapshotDocumentError(f"{where}: loadProfile share/pressure must be numbers")
        try:
            out.append(PhaseLoad(_phase(entry.get("phase"), where), share, pressure))
        except ValueError as e:
            raise SnapshotDocumentError(f"{where}: {e}") from None
    return tuple(out)


def snapshot_from_doc(doc: Any) -> ClusterSnapshot:
    """Rebuild a snapshot written by ``snapshot_to_doc`` (clear errors otherwise)."""
    if not isinstance(doc, Mapping):
        raise SnapshotDocumentError("a snapshot document must be a JSON object")
    version = doc.get("version")
    if version != FORMAT_VERSION:
        raise SnapshotDocumentError(
            f"snapshot format version {version!r} is not supported (expected {FORMAT_VERSION})"
        )
    nodes = _get(doc, "nodes", list, "snapshot")
    workloads = _get(doc, "workloads", list, "snapshot")
    return ClusterSnapshot.of(
        (node_from_doc(n) for n in nodes), (workload_from_doc(w) for w in workloads)
    )


def rules_to_doc(rules: SharingRules) -> dict[str, Any]:
    """The sharing rules a component decides with, beside its snapshot: a replay
    that judges with other rules answers a different question."""
    matrix = None
    if rules.interference is not None:
        matrix = {
            a.value: {b.value: rules.slowdown(a, b) for b in BUSY_SHAPES} for a in BUSY_SHAPES
        }
    return {
        "interference": matrix,
        "maxJobsPerGpu": rules.max_jobs_per_gpu,
        "minPairProgress": rules.min_pair_progress,
        "protectedPriority": rules.protected_priority,
        "maxProtectedStretch": rules.max_protected_stretch,
        "phaseGate": rules.phase_gate,
        "parksAtGate": rules.parks_at_gate,
    }


def rules_from_doc(doc: Any) -> SharingRules:
    """Rules written by ``rules_to_doc``; a field left out keeps ``DEFAULT_RULES``'."""
    where = "sharingRules"
    if not isinstance(doc, Mapping):
        raise SnapshotDocumentError(f"{where} must be an object, got {doc!r}")
    number = (int, float)
    cells = None
    matrix = _opt(doc, "interference", Mapping, None, where)
    if matrix is not None:
        found = []
        for a in BUSY_SHAPES:
            row = _get(matrix, a.value, Mapping, f"{where}.interference")
            for b in BUSY_SHAPES:
                value = float(_get(row, b.value, number, f"{where}.interference.{a.value}"))
                if value < 0:
                    raise SnapshotDocumentError(
                        f"{where}.interference.{a.value}.{b.value} = {value} < 0"
                    )
                found.append((a, b, value))
        cells = tuple(found)
    d = DEFAULT_RULES
    try:
        return SharingRules(
            interference=cells,
            max_jobs_per_gpu=_opt(doc, "maxJobsPerGpu", int, d.max_jobs_per_gpu, where),
            min_pair_progress=float(
                _opt(doc, "minPairProgress", number, d.min_pair_progress, where)
            ),
            protected_priority=_opt(doc, "protectedPriority", int, d.protected_priority, where),
            max_protected_stretch=float(
                _opt(doc, "maxProtectedStretch", number, d.max_protected_stretch, where)
            ),
            phase_gate=_opt(doc, "phaseGate", bool, d.phase_gate, where),
            parks_at_gate=_opt(doc, "parksAtGate", bool, d.parks_at_gate, where),
        )
    except ValueError as exc:
        raise SnapshotDocumentError(f"{where}: {exc}") from None
