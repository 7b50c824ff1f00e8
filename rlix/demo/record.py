"""What one demo run leaves on the cluster, written down as it happens.

The comparison (``rlix.demo.metrics``) is computed from this record only, and
the record holds only what the cluster said: when a pod was bound, which GPUs
it held (its ResourceClaim's allocation where it has one, else the
``rlix.io/gpu-indices`` the device-plugin stand-in wrote), the phases its node
agent reported (``rlix.io/phase`` and ``rlix.io/phase-since``), when it was
suspended, and when it stopped holding its GPUs (finished or deleted).

Bind and end are the times the demo's watch (every 0.5 s) first saw them: the
API server's own condition times have whole-second resolution, which would make
a pod bound the moment another finished look as if both held the GPU at once.
Phase changes carry the agent's own timestamp. Times are seconds since the
epoch (one machine's clock here).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlix.core import dra, names
from rlix.core.times import parse_rfc3339

_FINISHED = ("Succeeded", "Failed")


def epoch(raw: object) -> float | None:
    """An RFC 3339 timestamp from the API (or the agent) as epoch seconds; None if absent."""
    moment = parse_rfc3339(raw)
    return None if moment is None else moment.timestamp()


@dataclass
class PodRecord:
    name: str
    job: str
    role: str
    node: str = ""
    gpus: list[int] = field(default_factory=list)
    gpus_from: str = ""  # "claim" (the allocation) or "annotation" (rlix.io/gpu-indices)
    bound_at: float | None = None
    ended_at: float | None = None
    phases: list[tuple[float, str]] = field(default_factory=list)  # (since, phase)
    suspended: bool = False
    # [from, until] while the pod was seen suspended; until None while it still is.
    suspended_spans: list[list[float | None]] = field(default_factory=list)
    # Seen running again after its last suspension (not merely closed by the run's end).
    resumed: bool = False


@dataclass
class JobRecord:
    name: str
    submitted_at: float
    finished_at: float | None = None
    state: str = "Pending"


@dataclass
class RunRecord:
    """One run of the job list: ``mode`` is "exclusive" or "rlix"."""

    mode: str
    gpus_per_node: dict[str, int]
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)  # by pod uid

    def submitted(self, job: str, at: float) -> None:
        self.jobs[job] = JobRecord(job, at)

    def finished(self, job: str, state: str, at: float) -> None:
        record = self.jobs[job]
        if record.finished_at is None:
            record.finished_at, record.state = at, state

    def observe(self, pods: list[dict[str, Any]], claims: list[dict[str, Any]], now: float) -> None:
        """Fold one listing of the run's pods (and ResourceClaims) into the record."""
        allocations = {dra.claim_key(c): dra.read_allocation(c) for c in claims}
        present = set()
        for pod in pods:
            meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
            labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
            uid = meta["uid"]
            present.add(uid)
            rec = self.pods.get(uid)
            if rec is None:
                rec = self.pods[uid] = PodRecord(
                    meta["name"], labels.get(names.LABEL_JOB, ""), labels.get(names.LABEL_ROLE, "")
                )
            if spec.get("nodeName") and rec.bound_at is None:
                rec.node = spec["nodeName"]
                rec.bound_at = now
            self._gpus(rec, meta.get("namespace", ""), pod, notes, allocations)
            phase, since = (
                notes.get(names.ANNOTATION_PHASE),
                epoch(notes.get(names.ANNOTATION_PHASE_SINCE)),
            )
            if isinstance(phase, str) and since is not None and (since, phase) not in rec.phases:
                rec.phases.append((since, phase))
                rec.phases.sort()
            is_suspended = str(notes.get(names.ANNOTATION_SUSPENDED, "")).lower() == "true"
            open_span = rec.suspended_spans and rec.suspended_spans[-1][1] is None
            if is_suspended and not open_span:
                rec.suspended = True
                rec.resumed = False
                rec.suspended_spans.append([now, None])
            elif not is_suspended and open_span:
                rec.suspended_spans[-1][1] = now
                rec.resumed = True
            gone = status.get("phase") in _FINISHED or meta.get("deletionTimestamp")
            if gone and rec.bound_at is not None and rec.ended_at is None:
                rec.ended_at = now
        for uid, rec in self.pods.items():
            if uid not in present and rec.bound_at is not None and rec.ended_at is None:
                rec.ended_at = now

    @staticmethod
    def _gpus(
        rec: PodRecord,
        namespace: str,
        pod: dict[str, Any],
        notes: dict[str, Any],
        allocations: dict[str, dra.Allocation | None],
    ) -> None:
        for claim in dra.pod_claim_names(pod):
            found = allocations.get(f"{namespace}/{claim}")
            if found is not None:
                rec.node = rec.node or found.node
                rec.gpus, rec.gpus_from = sorted(found.gpus), "claim"
                return
        if rec.gpus_from == "claim":
            return  # the claim went (job done) before the pod: keep what it said
        raw = str(notes.get(names.ANNOTATION_GPU_INDICES, ""))
        indices = [int(x) for x in raw.split(",") if x.strip().isdigit()]
        if indices:
            rec.gpus, rec.gpus_from = indices, "annotation"

    def close(self, now: float) -> None:
        """The run is over: a pod still holding GPUs held them until now."""
        for rec in self.pods.values():
            if rec.bound_at is not None and rec.ended_at is None:
                rec.ended_at = now
            if rec.suspended_spans and rec.suspended_spans[-1][1] is None:
                rec.suspended_spans[-1][1] = now

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        run = cls(data["mode"], dict(data["gpus_per_node"]))
        run.jobs = {k: JobRecord(**v) for k, v in data["jobs"].items()}
        for uid, raw in data["pods"].items():
            pod = dict(raw)
            pod["phases"] = [(float(t), str(ph)) for t, ph in pod["phases"]]
            run.pods[uid] = PodRecord(**pod)
        return run


def save(runs: list[RunRecord], path: Path) -> None:
    path.write_text(json.dumps([r.to_json() for r in runs], indent=1) + "\n")


def load(path: Path) -> list[RunRecord]:
    return [RunRecord.from_json(d) for d in json.loads(path.read_text())]
