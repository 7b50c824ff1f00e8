"""``rlix agent``: talk to the node agent on this node (status, suspend, resume)."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

from rlix.cli import output
from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_PHASE_SECONDS

DESCRIPTION = """\
Talk to the RLix node agent of this node over its unix socket: show what it
sees (GPUs, connected trainer processes, suspended pods), or suspend and
resume a pod in place.

Control requests are accepted from host processes running as root or as the
agent's user, and from inside the agent's own pod, so on a cluster run them
through the DaemonSet pod of the node you mean:

  kubectl -n <rlix namespace> exec <node-agent pod on that node> -- \\
      rlix agent suspend team-a/grpo-rollout-0 --target host

Targets of a suspend:
  self      the pod's processes park their memory in their own pinned pool
            (default; fastest, the pod's memory limit must hold the copy)
  host      the agent takes the memory into host memory it owns (a tmpfs
            park file): the pod's processes keep nothing
  gpu:<i>   like host, and the agent also holds a copy in spare HBM of GPU i,
            from which a resume copies back over NVLink/PCIe peer-to-peer
"""

EPILOG = """\
examples:
  rlix agent status
  rlix agent suspend team-a/grpo-rollout-0 --target gpu:3
  rlix agent resume team-a/grpo-rollout-0
  rlix agent status -o json | jq .suspended
"""

_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "agent",
        help="node agent on this node: status, suspend, resume",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--socket",
        default=os.environ.get("RLIX_AGENT_SOCKET", "/run/rlix/agent.sock"),
        help="the agent's socket (default: $RLIX_AGENT_SOCKET or %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds to wait for the agent (a suspend waits for phase boundaries)",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    status = actions.add_parser("status", help="GPUs, connected processes, suspended pods")
    status.add_argument(
        "-o",
        "--output",
        choices=("json", "yaml"),
        help="the agent's raw status document as json or yaml",
    )
    status.add_argument(
        "--json", dest="output", action="store_const", const="json", help="same as -o json"
    )
    suspend = actions.add_parser("suspend", help="suspend a pod in place")
    suspend.add_argument("pod", help="namespace/name or pod UID")
    suspend.add_argument(
        "--target",
        type=_target,
        default=proto.SELF,
        help="self (default), host or gpu:<index>; see `rlix agent --help`",
    )
    resume = actions.add_parser("resume", help="resume a suspended pod")
    resume.add_argument("pod", help="namespace/name or pod UID")
    for action in (suspend, resume):
        action.add_argument(
            "--reason",
            choices=[r.value for r in proto.Reason],
            default=proto.Reason.MANUAL.value,
            help="why, as the agent's metrics count it (default: %(default)s)",
        )
    p.set_defaults(run=run, action=None)


def run(args: argparse.Namespace) -> int:
    if args.action is None:
        print("rlix agent: say status, suspend or resume (see --help)", file=sys.stderr)
        return 2
    try:
        status = _call(args, proto.OP_STATUS)
        if args.action == "status":
            if args.output == "json":
                print(json.dumps(status, indent=2, sort_keys=True))
            elif args.output == "yaml":
                output.emit(status, "yaml")
            else:
                print(render_status(status))
            return 0
        uid = resolve_pod(args.pod, status)
        if args.action == "suspend":
            body = _call(
                args,
                proto.OP_SUSPEND_POD,
                pod_uid=uid,
                target=str(args.target),
                reason=args.reason,
            )
            where = ", ".join(f"pid {pid} -> {w}" for pid, w in sorted(body["parked"].items()))
            print(f"suspended {args.pod}: {where or 'nothing to park'}")
        else:
            body = _call(args, proto.OP_RESUME_POD, pod_uid=uid, reason=args.reason)
            pids = ", ".join(str(p) for p in body["resumed"])
            print(f"resumed {args.pod}: pid {pids}")
        return 0
    except AgentError as exc:
        print(f"rlix agent: {exc}", file=sys.stderr)
        return 1
    except proto.ProtocolError as exc:
        print(f"rlix agent: {exc.message}", file=sys.stderr)
        return 2


def _target(value: str) -> proto.Location:
    """``--target``: the protocol's own parse, so the CLI accepts what the agent does."""
    try:
        return proto.parse_target(value)
    except proto.ProtocolError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


class AgentError(Exception):
    """The agent could not be reached, or refused the request (message says why)."""


def _call(args: argparse.Namespace, op: str, **fields: Any) -> dict[str, Any]:
    path = Path(args.socket)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(args.timeout)
            sock.connect(str(path))
            sock.sendall(proto.encode_request(1, op, **fields))
            with sock.makefile("rb") as reader:
                line = reader.readline(proto.MAX_LINE_BYTES + 1)
    except FileNotFoundError:
        raise AgentError(f"no agent socket at {path} (is rlix-node-agent running here?)") from None
    except PermissionError:
        raise AgentError(f"no permission to open {path}") from None
    except TimeoutError:
        raise AgentError(f"the agent did not answer within {args.timeout:g}s") from None
    except OSError as exc:
        raise AgentError(f"cannot talk to the agent at {path}: {exc}") from None
    if not line:
        raise AgentError("the agent closed the connection without answering")
    reply = proto.decode(line)
    if not isinstance(reply, proto.Reply):
        raise AgentError(f"unexpected message from the agent: {line[:200]!r}")
    if not reply.ok:
        raise AgentError(f"{reply.error_code}: {reply.error_message}")
    return dict(reply.body)


def resolve_pod(ref: str, status: dict[str, Any]) -> str:
    """A pod UID from a UID or namespace/name the agent knows on this node."""
    if _UID.match(ref):
        return ref
    pods: dict[str, str] = status.get("pods", {})
    for uid, key in pods.items():
        if key == ref:
            return uid
    known = ", ".join(sorted(pods.values())) or "none"
    raise AgentError(
        f"pod {ref!r} has no process connected to the agent on node "
        f"{status.get('node', '?')} (pods it knows: {known})"
    )


def render_status(status: dict[str, Any]) -> str:
    lines = [f"node {status.get('node', '?')} (backend {status.get('backend', '?')})", ""]
    lines.append("GPU  memory used / total   utilisation")
    for g in status.get("gpus", []):
        lines.append(
            f"{g['index']:>3}  {g['usedMiB']:>8} / {g['memoryMiB']:<8} MiB  "
            f"{g['utilization'] * 100:>5.1f}%"
        )
    pods: dict[str, str] = status.get("pods", {})
    phases: dict[str, Any] = status.get("phases", {})
    connected: dict[str, dict[str, list[str]]] = status.get("connected", {})
    suspended: dict[str, dict[str, Any]] = status.get("suspended", {})
    gate: dict[str, Any] | None = status.get("phaseGate")
    waiting: dict[str, float] = gate.get("waitingS", {}) if gate else {}
    at_gate = set(gate.get("gateParked", [])) if gate else set()
    if gate:
        lines += [
            "",
            f"phase gate on: busy phases take turns on shared GPUs "
            f"(a wait lasts at most {gate['maxWaitS']:g} s)",
        ]
        if gate.get("parksAtGate"):
            lines.append(
                "parking at the gate: a pod goes in where its memory fits; partners that do "
                "not work are parked first and brought back at their turn"
            )
        declared: dict[str, float] = gate.get("declaredCycles") or {}
        if declared:
            named = ", ".join(f"{pods.get(u, u)} {s:g} s" for u, s in sorted(declared.items()))
            lines.append(
                f"cycles declared ({ANNOTATION_PHASE_SECONDS}): {named}; two of these take turns "
                "only where both idle part of their cycle and turns pay"
            )
    lines += ["", "POD                                   PHASE         PROCESSES  STATE"]
    for uid in sorted(set(connected) | set(suspended), key=lambda u: pods.get(u, u)):
        phase = phases.get(uid, {}).get("phase", "-")
        procs = len(set(connected.get(uid, {})) | set(suspended.get(uid, {})))
        if uid in suspended:
            where = sorted({m["where"] for m in suspended[uid].values()})
            nbytes = sum(e["nbytes"] for m in suspended[uid].values() for e in m["entries"])
            what = "parked at the phase gate" if uid in at_gate else "suspended"
            state = f"{what} ({', '.join(where)}, {nbytes / (1 << 20):.1f} MiB parked)"
        elif uid in waiting:
            state = f"waiting at the phase gate ({waiting[uid]:.0f} s)"
        else:
            state = "running"
        lines.append(f"{pods.get(uid, uid):<37} {phase:<13} {procs:>9}  {state}")
    if not connected and not suspended:
        lines.append("(no trainer process is connected)")
    for problem in status.get("stateProblems", []):
        lines.append(f"state problem: {problem}")
    return "\n".join(lines)
