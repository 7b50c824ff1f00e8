"""``rlix describe rljob NAME``: everything about one job, kubectl-describe style."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rlix.cli import output, scope
from rlix.core import names
from rlix.core.objects import read_rljob
from rlix.core.phases import Phase
from rlix.views import rows as views

DESCRIPTION = """\
Describe one RLJob: its spec (roles, GPUs, memory per phase, priority), its
status (state, phase, iterations, time spent per phase), conditions that
explain any wait, its pods (node, phase, suspended) and recent events.
-o json|yaml prints the same as data: the RLJob object as the API server has
it, its pods (node, status, phase, suspended) and its events.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "describe",
        help="describe an RLJob (conditions, pods, phases, events)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("kind", choices=["rljob", "rljobs", "rlj"], help="what to describe")
    p.add_argument("name", help="the RLJob's name")
    scope.add_cluster_flags(p, all_namespaces=False)
    output.add_output_flag(p, ("json", "yaml"))
    p.set_defaults(run=run)


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    if not rows:
        return [f"{indent}<none>"]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def format_rljob(
    job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]
) -> str:
    """The text `rlix describe rljob` prints (pure, so tests pin it).

    The job's values come from the core reader, so an unset field shows the
    model's default (``preemptibleRollout`` is true unless said otherwise).
    """
    now = views.now_utc()
    facts = read_rljob(job)
    meta, spec, status = job["metadata"], job.get("spec", {}), job.get("status") or {}
    out = [
        f"Name:               {facts.name}",
        f"Namespace:          {facts.namespace}",
        f"Age:                {views.age(meta.get('creationTimestamp'), now)}",
        f"Algorithm:          {facts.algorithm}",
        f"Priority:           {facts.priority}",
        f"Preemptible rollout: {facts.preemptible_rollout}",
        f"State:              {facts.state or 'Pending'}",
        f"Phase:              {facts.phase.value if facts.phase else '-'}"
        + (f" (since {status['phaseSince']})" if status.get("phaseSince") else ""),
        f"GPUs:               {facts.gpus if facts.gpus is not None else '-'}",
        f"Iterations:         {facts.iterations}",
    ]
    out += [f"Unreadable:         {e.where}: {e.why}" for e in facts.errors]
    seconds = status.get("phaseSeconds") or {}
    if seconds:
        total = sum(seconds.values()) or 1.0
        parts = sorted(seconds.items(), key=lambda kv: views.phase_order(kv[0]))
        out.append(
            "Time per phase:     "
            + ", ".join(f"{k} {v:.0f}s ({100 * v / total:.0f}%)" for k, v in parts)
        )
    out.append("Roles:")
    role_status = {r.get("name"): r for r in status.get("roles") or []}
    rows = [
        [
            "NAME",
            "KIND",
            "REPLICAS",
            "GPUS/REPLICA",
            "MEMORY MiB/GPU",
            "PHASE",
            "BOUND",
            "READY",
            "RESTARTS",
            "WAITING TURN",
        ]
    ]
    for role in spec.get("roles", []):
        st = role_status.get(role.get("name"), {})
        memory = role.get("gpuMemoryMiB") or {}
        mem = ",".join(f"{k}={v}" for k, v in memory.items()) or "-"
        rows.append(
            [
                str(role.get("name")),
                str(role.get("kind")),
                str(role.get("replicas", 1)),
                str(role.get("gpusPerReplica", 1)),
                mem,
                str(st.get("phase") or "-"),
                str(st.get("bound", 0)),
                str(st.get("ready", 0)),
                str(st.get("restarts", 0)),
                str(st.get("waiting", 0)),
            ]
        )
    out += _table(rows)
    out.append("Conditions:")
    crow = [["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]]
    for c in status.get("conditions") or []:
        crow.append(
            [
                c.get("type", ""),
                c.get("status", ""),
                c.get("reason", ""),
                views.age(c.get("lastTransitionTime"), now),
                c.get("message", ""),
            ]
        )
    out += _table(crow if len(crow) > 1 else [])
    out.append("Pods:")
    prow = [["NAME", "NODE", "STATUS", "PHASE", "PHASE SINCE", "SUSPENDED"]]
    readable = [(views.pods_of([p]), p) for p in pods]
    for (read,), obj in sorted(
        ((f, o) for f, o in readable if f), key=lambda fo: fo[0][0].workload.name
    ):
        w = read.workload
        ann = obj["metadata"].get("annotations") or {}
        prow.append(
            [
                w.name.split("/", 1)[1],
                w.node or "<pending>",
                str((obj.get("status") or {}).get("phase", "")),
                _phase_cell(w.phase, _waiting_for_turn(ann)),
                str(ann.get(names.ANNOTATION_PHASE_SINCE, "-"))[:40],
                "yes" if w.suspended else "no",
            ]
        )
    out += _table(prow if len(prow) > 1 else [])
    out.append("Events:")
    erow = [["TYPE", "REASON", "AGE", "FROM", "MESSAGE"]]
    for e in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
        erow.append(
            [
                e.get("type", ""),
                e.get("reason", ""),
                views.age(e.get("lastTimestamp") or e.get("eventTime"), now),
                (e.get("source") or {}).get("component", "") or e.get("reportingComponent", ""),
                e.get("message", ""),
            ]
        )
    out += _table(erow if len(erow) > 1 else [])
    return "\n".join(out) + "\n"


def _waiting_for_turn(notes: Mapping[str, Any]) -> Phase | None:
    """The phase the pod waits at its node's phase gate to enter (None: it does
    not wait, or the annotation is not a phase)."""
    raw = notes.get(names.ANNOTATION_WAITING_FOR_TURN)
    return Phase.parse(raw) if isinstance(raw, str) else None


def _waiting_value(pod: Mapping[str, Any]) -> str | None:
    waiting = _waiting_for_turn(pod.get("metadata", {}).get("annotations") or {})
    return waiting.value if waiting else None


def _phase_cell(phase: Phase | None, waiting: Phase | None) -> str:
    """The pod's phase, and the one it waits its turn for: under the phase gate a
    trainer reads idle while it waits for a GPU it shares, not because it rests."""
    shown = phase.value if phase else "-"
    return f"{shown} (waits its turn for {waiting.value})" if waiting else shown


def describe_data(
    job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """What ``-o json|yaml`` prints: the object itself, its pods and its events."""
    pod_rows = []
    for (read,), obj in ((views.pods_of([p]), p) for p in pods if views.pods_of([p])):
        w = read.workload
        pod_rows.append(
            {
                "name": w.name.split("/", 1)[1],
                "node": w.node,
                "status": (obj.get("status") or {}).get("phase"),
                "phase": w.phase.value if w.phase else None,
                "waitingForTurn": _waiting_value(obj),
                "suspended": w.suspended,
            }
        )
    event_rows = [
        {
            "type": e.get("type"),
            "reason": e.get("reason"),
            "time": e.get("lastTimestamp") or e.get("eventTime"),
            "message": e.get("message"),
        }
        for e in events
    ]
    return {
        "rljob": dict(job),
        "pods": sorted(pod_rows, key=lambda p: str(p["name"])),
        "events": event_rows,
    }


def run(args: argparse.Namespace) -> int:
    from rlix.views.kube import Kube

    namespace = args.namespace or "?"
    try:
        namespace = scope.namespace_of(args) or "default"
        kube = Kube(args.kubeconfig, args.context)
        job = kube.rljob(namespace, args.name)
        pods = kube.rlix_pods(namespace, args.name)
        events = kube.events_for(namespace, job["metadata"]["uid"])
    except ModuleNotFoundError:
        raise
    except Exception as err:  # report any API problem readably
        reason = getattr(err, "reason", None) or err
        print(f"rlix describe: rljob {namespace}/{args.name}: {reason}", file=sys.stderr)
        return 1
    if args.output:
        output.emit(describe_data(job, pods, events), args.output)
        return 0
    sys.stdout.write(format_rljob(job, pods, events))
    return 0
