"""``rlix replay``: what the extender's filter and prioritize say about a pod, offline.

When a pod lands somewhere surprising (or nowhere), capture the extender's
cache (``GET /debug/snapshot``) and the pod (``kubectl get pod -o yaml``), and
this command replays them through the same policy functions the live extender
runs (``rlix.extender.replay``): every rejected node with its reason, and the
feasible nodes ranked with the four terms their score came from.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlix.core.policy.placement import rules_file

DESCRIPTION = """\
Replay a captured extender snapshot and a pod through the RLix placement
policy (the same filter and prioritize code the extender serves) and print
why each node was rejected and how the feasible nodes rank.

  rlix replay snapshot.json pod.yaml
  curl -s 127.0.0.1:8888/debug/snapshot | rlix replay - pod.yaml
  rlix replay --from-url http://127.0.0.1:8888 pod.yaml --json
  rlix replay snapshot.json pod.yaml --interference gpu_interference.json
  rlix replay snapshot.json pod.yaml --interference time-slicing

The pod is a Pod object (JSON or YAML, as `kubectl get pod -o yaml` writes it)
or a workload entry of a snapshot. A pod already bound in the snapshot is
replayed as if it were still pending (its own entry is left out). The
sharing rules are the ones the snapshot says its extender decided with;
--interference asks what an extender given that matrix (or the built-in
time-slicing bound) would have said.
"""

USAGE = (
    "rlix replay [-h] [--json] [--nodes N1,N2] [--interference FILE] "
    "(SNAPSHOT | --from-url URL) POD"
)


class ReplayInputError(ValueError):
    """An input file or URL could not be read; the message says which and why."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="replay a captured /debug/snapshot and a pod through the placement policy",
        description=DESCRIPTION,
        usage=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="SNAPSHOT POD",
        help="the snapshot JSON file ('-' for stdin) and the pod file; only POD with --from-url",
    )
    p.add_argument(
        "--from-url",
        metavar="URL",
        help="fetch the snapshot from a running extender (http://HOST:PORT)",
    )
    p.add_argument("--nodes", help="comma-separated node names to replay (default: all)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    rules_file.add_arguments(
        p,
        "judge sharing with this matrix instead of the rules the snapshot says its "
        "extender decided with",
    )
    p.set_defaults(run=run)


def _read_text(source: str, what: str) -> str:
    try:
        return sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        raise ReplayInputError(f"cannot read {what} {source!r}: {exc.strerror or exc}") from None


def snapshot_url(base: str) -> str:
    """``http://host:port`` -> ``http://host:port/debug/snapshot`` (a full URL is kept)."""
    url = base if "://" in base else f"http://{base}"
    return (
        url if url.rstrip("/").endswith("/debug/snapshot") else f"{url.rstrip('/')}/debug/snapshot"
    )


def load_snapshot(source: str | None, url: str | None) -> Any:
    if url is not None:
        full = snapshot_url(url)
        try:
            with urllib.request.urlopen(full, timeout=10) as response:
                text = response.read().decode()
        except OSError as exc:
            raise ReplayInputError(f"cannot fetch {full}: {exc}") from None
        where = full
    else:
        assert source is not None
        text = _read_text(source, "snapshot")
        where = "stdin" if source == "-" else source
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ReplayInputError(f"snapshot from {where} is not JSON: {exc}") from None


def load_pod(source: str) -> Any:
    """One Pod (or workload entry) from a JSON or YAML file."""
    import yaml

    text = _read_text(source, "pod")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]  # YAML reads JSON too
    except yaml.YAMLError as exc:
        raise ReplayInputError(f"pod file {source!r} is neither JSON nor YAML: {exc}") from None
    if len(docs) == 1 and isinstance(docs[0], Mapping) and docs[0].get("kind") == "List":
        docs = list(docs[0].get("items") or [])
    if len(docs) != 1 or not isinstance(docs[0], Mapping):
        raise ReplayInputError(
            f"pod file {source!r} must hold exactly one object, found {len(docs)}"
        )
    return docs[0]


def _pod_key(pod: Mapping[str, Any]) -> str | None:
    meta = pod.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("name"), str):
        return f"{meta.get('namespace') or 'default'}/{meta['name']}"
    name = pod.get("name")
    return name if isinstance(name, str) else None


def without_pod(doc: Any, pod: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The snapshot minus the pod's own entry, and the node it was bound to (if it was)."""
    key = _pod_key(pod)
    workloads = doc.get("workloads") if isinstance(doc, Mapping) else None
    if key is None or not isinstance(workloads, list):
        return doc, None
    own = [w for w in workloads if isinstance(w, Mapping) and w.get("name") == key]
    if not own:
        return doc, None
    kept = [w for w in workloads if not (isinstance(w, Mapping) and w.get("name") == key)]
    node = own[0].get("node")
    return {**doc, "workloads": kept}, node if isinstance(node, str) else "?"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in (header, *rows)
    ]


def _rules_line(rules: Mapping[str, Any]) -> str:
    per_gpu = f"at most {rules['maxJobsPerGpu']} jobs per GPU"
    if rules["interference"] is None:
        return f"1-3, no interference matrix (any two jobs of one priority, {per_gpu})"
    return (
        f"1-5 with an interference matrix (a pair shares where it delivers >= "
        f"{rules['minPairProgress']:.2f} GPUs of progress; {per_gpu})"
    )


def format_report(report: Mapping[str, Any], *, bound_to: str | None = None) -> str:
    """The text ``rlix replay`` prints (pure, so tests pin it)."""
    ranking: list[Mapping[str, Any]] = list(report["ranking"])
    failed: Mapping[str, str] = report["failed"]
    unresolvable: Mapping[str, str] = report["unresolvable"]
    total = len(ranking) + len(failed) + len(unresolvable)
    out = [f"Pod {report['pod']}: {len(ranking)} of {total} nodes feasible"]
    if bound_to is not None:
        out.append(f"  (bound to {bound_to} in the snapshot; replayed as if still pending)")
    if ranking:
        best = ranking[0]
        out.append(f"Best node: {best['node']} (score {best['score']}/10)")
    rules = report.get("sharingRules")
    if rules is not None:
        out.append(f"Sharing rules: {_rules_line(rules)}")
    out += ["", "Ranking (score 0..10 = 3 x complement + 2 x interleave + 3 x locality "
            "+ 2 x packing):"]  # fmt: skip
    if ranking:
        rows = [
            [
                str(i),
                r["node"],
                str(r["score"]),
                f"{r['complement']:.2f}",
                f"{r['interleave']:.2f}",
                f"{r['locality']:.2f}",
                f"{r['packing']:.2f}",
                ",".join(str(g) for g in r["gpus"]) or "-",
            ]
            for i, r in enumerate(ranking, 1)
        ]
        header = ["RANK", "NODE", "SCORE", "COMPLEMENT", "INTERLEAVE", "LOCALITY", "PACKING"]
        out += _table([*header, "GPUS"], rows)
    else:
        out.append("  <no feasible node>")
    out += ["", "Rejected by filter:"]
    rejected = [[n, "preemption may help", reason] for n, reason in sorted(failed.items())] + [
        [n, "unresolvable", reason] for n, reason in sorted(unresolvable.items())
    ]
    out += _table(["NODE", "VERDICT", "REASON"], rejected) if rejected else ["  <none>"]
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    from rlix.core.policy.placement.documents import rules_from_doc
    from rlix.core.policy.placement.sharing import DEFAULT_RULES
    from rlix.extender.replay import replay

    inputs: list[str] = args.inputs
    wanted = 1 if args.from_url else 2
    if len(inputs) != wanted:
        print(f"usage: {USAGE}", file=sys.stderr)
        shape = "POD with --from-url" if args.from_url else "SNAPSHOT and POD"
        print(f"rlix replay: expected {shape}, got {len(inputs)} argument(s)", file=sys.stderr)
        return 2
    snapshot_source = None if args.from_url else inputs[0]
    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()] if args.nodes else None
    try:
        doc = load_snapshot(snapshot_source, args.from_url)
        pod = load_pod(inputs[-1])
        doc, bound_to = without_pod(doc, pod)
        rules = None
        if args.interference is not None or args.park_at_gate or args.no_phase_gate:
            said = doc.get("sharingRules") if isinstance(doc, Mapping) else None
            default = DEFAULT_RULES if said is None else rules_from_doc(said)
            rules = rules_file.with_gate_flags(
                rules_file.rules_from(args.interference, args.interference_mode, default=default),
                args,
            )
        report = replay(doc, pod, nodes, rules)
    except ValueError as exc:  # bad files, SnapshotDocumentError, ObjectError: all readable
        print(f"rlix replay: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**report, "boundTo": bound_to}, indent=2))
    else:
        print(format_report(report, bound_to=bound_to))
    return 0
