"""The comparison's numbers, computed from a run's record alone (``rlix.demo.record``).

Every number is defined over the run's window: from the first job's submission
to the last end of a job or pod (a finished job's leftover pods count until
they are deleted). A GPU is ``(node, index)``; a pod *holds* its GPUs from its
bind to the moment it finished or was deleted; it is *active* on them while its
agent-reported phase is rollout, scoring, training or weight-sync and it is not
suspended. docs/demo.md states the same definitions for users.

* ``gpu_idle_pct``: GPU-seconds with no active pod, over all GPU-seconds.
* ``jobs_per_hour``: jobs succeeded / window length.
* ``mean_latency_s``: mean over succeeded jobs of end - submission.
* ``fragmentation_pct``: GPU-seconds in which a GPU was held by no pod while
  some job was waiting to start (not yet every pod bound), over all GPU-seconds
  in which some job was waiting; 0 when no job ever waited.
* ``gpus_shared``: GPUs that pods of two or more jobs held at the same time.
* ``preemptions``: pods ever suspended in place.
* ``resumed``: of those, pods seen running again after their last suspension
  (a suspension still open when the run ends is not counted as resumed).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from rlix.demo.record import PodRecord, RunRecord

Interval = tuple[float, float]
ACTIVE = ("rollout", "scoring", "training", "weight-sync")


def union(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def length(intervals: Iterable[Interval]) -> float:
    return sum(end - start for start, end in union(intervals))


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    out = []
    for s1, e1 in union(a):
        for s2, e2 in union(b):
            lo, hi = max(s1, s2), min(e1, e2)
            if hi > lo:
                out.append((lo, hi))
    return union(out)


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """``a`` without ``b`` (both already unions)."""
    out = []
    for start, end in a:
        cursor = start
        for s, e in b:
            if e <= cursor or s >= end:
                continue
            if s > cursor:
                out.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < end:
            out.append((cursor, end))
    return out


def held(pod: PodRecord) -> Interval | None:
    if pod.bound_at is None or pod.ended_at is None or not pod.gpus:
        return None
    return (pod.bound_at, pod.ended_at)


def phase_spans(pod: PodRecord) -> list[tuple[float, float, str]]:
    """(from, until, phase) of each active phase while the pod held its GPUs, not suspended."""
    span = held(pod)
    if span is None:
        return []
    parked = union(
        (s, e if e is not None else span[1]) for s, e in pod.suspended_spans if s is not None
    )
    out = []
    for i, (since, phase) in enumerate(pod.phases):
        until = pod.phases[i + 1][0] if i + 1 < len(pod.phases) else span[1]
        if phase in ACTIVE:
            piece = union([(max(since, span[0]), min(until, span[1]))])
            out += [(s, e, phase) for s, e in subtract(piece, parked)]
    return out


def active(pod: PodRecord) -> list[Interval]:
    return union((s, e) for s, e, _ in phase_spans(pod))


def window(run: RunRecord) -> Interval:
    start = min((j.submitted_at for j in run.jobs.values()), default=0.0)
    ends = [j.finished_at for j in run.jobs.values() if j.finished_at is not None]
    ends += [p.ended_at for p in run.pods.values() if p.ended_at is not None]
    return (start, max(ends, default=start))


def waiting(run: RunRecord) -> list[Interval]:
    """When at least one job had been submitted but not every pod of it was bound yet."""
    spans = []
    for job in run.jobs.values():
        pods = [p for p in run.pods.values() if p.job == job.name]
        bound = [p.bound_at for p in pods]
        if pods and all(b is not None for b in bound):
            started = max(b for b in bound if b is not None)
        else:
            started = job.finished_at or window(run)[1]
        spans.append((job.submitted_at, started))
    return union(spans)


def by_gpu(run: RunRecord) -> dict[tuple[str, int], list[PodRecord]]:
    out: dict[tuple[str, int], list[PodRecord]] = defaultdict(list)
    for pod in run.pods.values():
        for gpu in pod.gpus:
            out[(pod.node, gpu)].append(pod)
    return out


def gpus_shared(run: RunRecord) -> int:
    shared = 0
    for pods in by_gpu(run).values():
        spans = [(held(p), p.job) for p in pods]
        if any(
            a is not None and b is not None and ja != jb and min(a[1], b[1]) > max(a[0], b[0])
            for i, (a, ja) in enumerate(spans)
            for b, jb in spans[i + 1 :]
        ):
            shared += 1
    return shared


def compute(run: RunRecord) -> dict[str, float | int | None]:
    start, end = window(run)
    total_gpus = sum(run.gpus_per_node.values())
    gpu_seconds = total_gpus * (end - start)
    pods = by_gpu(run)
    busy = sum(
        length(
            intersect(
                [i for p in pods.get((n, g), []) for i in active(p)],
                [(start, end)],
            )
        )
        for n, count in run.gpus_per_node.items()
        for g in range(count)
    )
    waits = intersect(waiting(run), [(start, end)])
    empty_while_waiting = 0.0
    for n, count in run.gpus_per_node.items():
        for g in range(count):
            holding = union(s for p in pods.get((n, g), []) if (s := held(p)) is not None)
            empty_while_waiting += length(waits) - length(intersect(holding, waits))
    succeeded = [j for j in run.jobs.values() if j.state == "Succeeded" and j.finished_at]
    latency = [j.finished_at - j.submitted_at for j in succeeded if j.finished_at is not None]
    wait_gpu_seconds = total_gpus * length(waits)
    return {
        "jobs": len(run.jobs),
        "jobs_succeeded": len(succeeded),
        "window_s": round(end - start, 1),
        "gpu_idle_pct": round(100 * (1 - busy / gpu_seconds), 1) if gpu_seconds > 0 else None,
        "jobs_per_hour": round(3600 * len(succeeded) / (end - start), 1) if end > start else None,
        "mean_latency_s": round(sum(latency) / len(latency), 1) if latency else None,
        "fragmentation_pct": (
            round(100 * empty_while_waiting / wait_gpu_seconds, 1) if wait_gpu_seconds else 0.0
        ),
        "gpus_shared": gpus_shared(run),
        "preemptions": sum(1 for p in run.pods.values() if p.suspended),
        "resumed": sum(1 for p in run.pods.values() if p.suspended and p.resumed),
    }


ROWS = (
    ("gpu_idle_pct", "GPU idle (%)"),
    ("jobs_per_hour", "jobs/h"),
    ("mean_latency_s", "mean latency (s)"),
    ("fragmentation_pct", "fragmentation (%)"),
    ("gpus_shared", "GPUs shared"),
    ("preemptions", "preemptions"),
    ("resumed", "resumed in place"),
    ("jobs_succeeded", "jobs succeeded"),
    ("window_s", "window (s)"),
)


def ratio(rlix: float | int | None, exclusive: float | int | None) -> str:
    if rlix is None or exclusive is None or exclusive == 0:
        return "-"
    return f"{rlix / exclusive:.2f}x"


def format_table(
    exclusive: Mapping[str, float | int | None], rlix: Mapping[str, float | int | None]
) -> str:
    rows = [("", "exclusive", "RLix", "RLix/excl.")]
    rows += [
        (
            label,
            str(exclusive.get(key)),
            str(rlix.get(key)),
            ratio(rlix.get(key), exclusive.get(key)),
        )
        for key, label in ROWS
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["", "RLix demo: the same jobs, exclusive default scheduling vs RLix"]
    for i, row in enumerate(rows):
        lines.append(
            "  ".join(
                [row[0].ljust(widths[0])]
                + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
            )
        )
        if i == 0:
            lines.append("-" * (sum(widths) + 6))
    return "\n".join(lines) + "\n"
