"""``rlix suspend|resume rljob NAME``: ask the conductor, through the API server.

The request is an annotation on the RLJob (``rlix.io/suspension-request``,
docs/conductor.md); the operator's conductor turns it into desired state on the
job's rollout pods, the node agents carry it out, and the job's ``Suspended``
condition and events say what came of it, or why it was refused. The CLI never
talks to a node agent: the path is the same one the conductor's own decisions
take.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from typing import Any

from rlix.core.rljob import CONDITION_SUCCEEDED
from rlix.core.suspension import ANNOTATION_REQUEST, CONDITION_SUSPENDED, State, SuspensionRequest

DESCRIPTION = {
    "suspend": """\
Ask RLix to suspend an RLJob's rollout pods in place: their GPU memory is parked
(the pods are not deleted and keep their UIDs) until `rlix resume rljob NAME`.
Refused, with an event and the job's Suspended condition saying why, when the
job is not preemptible, a pod's node agent is down, or no process of the pod
registered its memory with the agent.
""",
    "resume": """\
Ask RLix to resume an RLJob suspended with `rlix suspend rljob NAME`: its parked
memory is restored (checked against the checksums taken when it was parked).
""",
}


def add_parser(sub: Any) -> None:
    for verb in ("suspend", "resume"):
        p = sub.add_parser(
            verb,
            help=f"{verb} an RLJob's rollout pods in place",
            description=DESCRIPTION[verb],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("kind", choices=["rljob", "rljobs", "rlj"], help="what to " + verb)
        p.add_argument("name", help="the RLJob's name")
        p.add_argument("-n", "--namespace", default="default", help="namespace (default: default)")
        p.add_argument(
            "--wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="wait up to this long for the job's Suspended condition to say it is done "
            "(exit 1 if it says why not, or time runs out); default: do not wait",
        )
        p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG)")
        p.add_argument("--context", help="kubeconfig context")
        p.set_defaults(run=run, state=State.SUSPENDED if verb == "suspend" else State.RUNNING)


def request_patch(state: State, nonce: str) -> dict[str, Any]:
    """The merge patch a request is (pure, so tests pin it)."""
    request = SuspensionRequest(state=state, nonce=nonce)
    return {"metadata": {"annotations": {ANNOTATION_REQUEST: request.to_json()}}}


def run(args: argparse.Namespace) -> int:
    from rlix.views.kube import Kube

    kube = Kube(args.kubeconfig, args.context)
    nonce = uuid.uuid4().hex[:12]
    try:
        kube.patch_rljob(args.namespace, args.name, request_patch(args.state, nonce))
    except Exception as exc:
        status = getattr(exc, "status", None)
        what = "not found" if status == 404 else str(exc)
        print(f"rlix: rljob {args.namespace}/{args.name}: {what}", file=sys.stderr)
        return 1
    verb = "suspend" if args.state is State.SUSPENDED else "resume"
    print(f"rljob {args.namespace}/{args.name}: {verb} requested (request {nonce})")
    if args.wait <= 0:
        return 0
    return _wait(kube, args, deadline=time.monotonic() + args.wait)


def _wait(kube: Any, args: argparse.Namespace, *, deadline: float) -> int:
    want = args.state is State.SUSPENDED
    while True:
        job = kube.rljob(args.namespace, args.name)
        conditions = {c.get("type"): c for c in (job.get("status") or {}).get("conditions", [])}
        cond = conditions.get(CONDITION_SUSPENDED)
        if cond is not None:
            done = (cond.get("status") == "True") == want
            waiting = "waiting for the agent" in str(cond.get("message", ""))
            if done and not waiting:
                print(f"{CONDITION_SUSPENDED}={cond['status']}: {cond.get('message', '')}")
                return 0
            if want and cond.get("status") == "False" and cond.get("reason") != "Running":
                print(f"refused ({cond.get('reason')}): {cond.get('message', '')}", file=sys.stderr)
                return 1
        if CONDITION_SUCCEEDED in conditions and not want:
            return 0
        if time.monotonic() > deadline:
            print(json.dumps(cond or {}, indent=2), file=sys.stderr)
            print(f"rlix: gave up waiting after {args.wait}s", file=sys.stderr)
            return 1
        time.sleep(0.5)
