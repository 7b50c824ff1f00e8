"""``rlix-operator``: run the RLJob operator against a cluster.

Examples:
  rlix-operator --kubeconfig ~/.kube/config            # cluster-wide, webhook on 127.0.0.1:9443
  rlix-operator --no-webhook --metrics-port 9090        # no admission webhook
  rlix-operator --namespace team-a --namespace team-b   # watch only these namespaces
  rlix-operator --leader-elect --ledger-namespace rlix-system   # one of several replicas
  rlix-operator --interference gpu_interference.json     # share only where the matrix pays

The CRD (crds/rlix.io_rljobs.yaml) must be installed first. The webhook
registers itself (ValidatingWebhookConfiguration "rlix.io", url-based
clientConfig), which suits an API server that can reach this process, such as
the local development cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import kopf

from rlix.core import names
from rlix.core.agent_protocol import SELF, Location, ProtocolError, parse_target
from rlix.core.policy.conduct import ConductConfig
from rlix.core.policy.ordering import CLASS_GRACE, TOP_GRACE, Grace, parse_share
from rlix.core.policy.placement import rules_file
from rlix.core.policy.placement.sharing import DEFAULT_RULES
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.operator import leadership, webhook
from rlix.operator.admitting import DEFAULT_WINDOW, Admitter
from rlix.operator.certificates import make_certificates
from rlix.operator.conducting import Conductor
from rlix.operator.handlers import Options, Runtime, build_registry
from rlix.operator.kube import Kube, api_client
from rlix.operator.metrics import Metrics
from rlix.operator.queueing import RLixAdmission
from rlix.operator.reconciling import Reconciler
from rlix.operator.recording import Recorder
from rlix.operator.replanning import DEFAULT_AFTER_S as DEFAULT_REPLAN_AFTER_S
from rlix.operator.store import Store


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rlix-operator",
        description="Queue, gang-admit and run RLJobs (RL post-training jobs) phase-aware.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", help="kubeconfig to use (default: $KUBECONFIG)")
    parser.add_argument(
        "--namespace", action="append", default=[], help="watch only this namespace (repeatable)"
    )
    hook = parser.add_argument_group("admission webhook")
    hook.add_argument("--no-webhook", action="store_true", help="do not serve the webhook")
    hook.add_argument("--webhook-host", default="127.0.0.1", help="address to listen on")
    hook.add_argument(
        "--webhook-advertise-host",
        help="name the API server calls the webhook by, put in its URL and certificate, "
        "e.g. rlix-operator.rlix-system.svc in a cluster (default: --webhook-host)",
    )
    hook.add_argument("--webhook-port", type=int, default=9443, help="HTTPS port (default 9443)")
    hook.add_argument("--cert-dir", type=Path, help="where to write the self-signed certificates")
    hook.add_argument(
        "--webhook-timeout-seconds",
        type=int,
        default=webhook.DEFAULT_TIMEOUT_S,
        help="how long the API server waits for the webhook before skipping it "
        "(failurePolicy Ignore; 1..30, default %(default)s)",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="serve Prometheus metrics here (0: off)"
    )
    parser.add_argument(
        "--metrics-host",
        default="0.0.0.0" if "KUBERNETES_SERVICE_HOST" in os.environ else "127.0.0.1",
        help="address the metrics server listens on (default: 0.0.0.0 in a pod, so the "
        "chart's Service reaches it; 127.0.0.1 elsewhere)",
    )
    parser.add_argument(
        "--scheduler-name",
        default=os.environ.get("RLIX_SCHEDULER_NAME", names.SCHEDULER_NAME),
        help="schedulerName of every role pod: the profile of the second kube-scheduler "
        "(the chart's scheduler.name) (default: $RLIX_SCHEDULER_NAME or %(default)s)",
    )
    election = parser.add_argument_group(
        "leader election",
        "With several replicas, only the holder of a coordination.k8s.io Lease admits, "
        "creates pods and writes status; the others watch and take over when its lease "
        "runs out (client-go's algorithm and defaults).",
    )
    election.add_argument(
        "--leader-elect", action="store_true", help="campaign for the Lease before acting"
    )
    election.add_argument(
        "--leader-election-namespace",
        help="namespace of the Lease (default: --ledger-namespace)",
    )
    election.add_argument(
        "--leader-election-lease-name",
        default=leadership.DEFAULT_LEASE,
        help="name of the Lease (default %(default)s)",
    )
    election.add_argument(
        "--leader-election-lease-duration",
        type=int,
        default=15,
        help="seconds a standby waits after it last saw the Lease renewed before taking "
        "it: the worst-case takeover time after a leader dies (default %(default)s)",
    )
    election.add_argument(
        "--leader-election-renew-deadline",
        type=int,
        default=10,
        help="seconds the leader keeps retrying a failed renewal before it exits "
        "(default %(default)s)",
    )
    election.add_argument(
        "--leader-election-retry-period",
        type=int,
        default=2,
        help="seconds between renewals, and between a standby's tries (default %(default)s)",
    )
    parser.add_argument("--liveness", help="e.g. http://127.0.0.1:8080/healthz")
    parser.add_argument(
        "--backoff-base-seconds",
        type=float,
        default=1.0,
        help="first restart delay of a failed pod; doubles per failure (default 1)",
    )
    parser.add_argument(
        "--replan-after-seconds",
        type=float,
        default=DEFAULT_REPLAN_AFTER_S,
        help="an admitted pod unschedulable on its planned node this long releases its "
        "gang to be admitted again (default %(default)s)",
    )
    parser.add_argument(
        "--admission-window",
        type=int,
        default=DEFAULT_WINDOW,
        help="queued jobs (in queue order) the policy considers per pass (default %(default)s)",
    )
    queue = parser.add_argument_group(
        "grace before precedence, and aging (docs/rljob.md)",
        "A waiting job of a class above the lowest that declares its size\n"
        "(spec.iterations) queues among the lowest class, least work first, for a\n"
        "share of its expected length alone; then its own class applies.\n"
        "--top-grace 0 --class-grace 0 makes priority classes strict.\n"
        "--aging puts a sized job that has waited long first in its class.",
    )
    queue.add_argument(
        "--top-grace",
        type=parse_share,
        default=TOP_GRACE,
        metavar="SHARE",
        help="the highest class's share (default %(default)s: a job expected to run "
        "10 hours queues with the lowest class for its first hour)",
    )
    queue.add_argument(
        "--class-grace",
        type=parse_share,
        default=CLASS_GRACE,
        metavar="SHARE",
        help="the share of every class between the highest and the lowest (default %(default)s)",
    )
    queue.add_argument(
        "--aging",
        type=parse_share,
        default=0.0,
        metavar="SHARE",
        help="a waiting sized job that has waited this share of its expected length alone "
        "goes first in its class and, once running, is not parked by it, so least work "
        "first does not starve the longest jobs; it costs some mean JCT (default "
        "%(default)s: never; 2 puts a job expected to run 10 hours first after 20 hours "
        "waiting)",
    )
    parser.add_argument(
        "--ledger-namespace",
        default="default",
        help="namespace of the admission ledger ConfigMap (rlix-admission-ledger); every "
        "operator of one cluster must name the same one (default %(default)s)",
    )
    parser.add_argument(
        "--agent-socket-dir",
        default=names.AGENT_SOCKET_DIR,
        help="host directory the node agent serves its socket in; mounted into every "
        "role pod, which gets RLIX_AGENT_SOCKET=<dir>/agent.sock (the chart passes "
        "nodeAgent.socketDir; default %(default)s)",
    )
    conduct = parser.add_argument_group("conductor (in-place suspension, docs/conductor.md)")
    conduct.add_argument(
        "--no-conductor",
        action="store_true",
        help="decide no suspension or resume (people's requests are not carried out either)",
    )
    conduct.add_argument(
        "--max-suspended-seconds",
        type=float,
        default=ConductConfig().max_suspended_s,
        help="a job parked longer is aged: it comes back first, parking lower-priority "
        "work if it must (default %(default)s)",
    )
    conduct.add_argument(
        "--suspend-target",
        default=str(SELF),
        type=_target,
        help="where parked memory goes: 'self' (the pod's own pinned host pool), 'host' "
        "(host memory the node agent holds) or 'gpu:<i>' (default %(default)s)",
    )
    rules_file.add_arguments(
        parser.add_argument_group("sharing rules (docs/extender.md, 'Sharing rules')"),
        "two jobs are admitted onto one GPU, and a parked job resumed beside another, only "
        "where the matrix says sharing pays, and a sized job that would outlast the jobs it "
        "may share with goes first in its class; give the extender the same file (default: "
        "no matrix, any two jobs of one priority may share)",
    )
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(argv)


def _target(value: str) -> Location:
    try:
        return parse_target(value)
    except ProtocolError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _webhook(args: argparse.Namespace, kube: Kube) -> Options:
    if args.no_webhook:
        return Options()
    directory = args.cert_dir or Path(tempfile.mkdtemp(prefix="rlix-operator-certs-"))
    # Listening on 0.0.0.0 in a pod is fine, but the URL the API server gets must
    # name something it can reach: the advertised host.
    advertised = args.webhook_advertise_host or args.webhook_host
    certs = make_certificates(directory, [advertised, "localhost"])
    server = kopf.WebhookServer(
        addr=args.webhook_host,
        port=args.webhook_port,
        host=advertised,
        certfile=str(certs.cert),
        pkeyfile=str(certs.key),
        cafile=str(certs.ca),
    )
    body = webhook.configuration(
        f"https://{advertised}:{args.webhook_port}",
        certs.ca.read_bytes(),
        timeout_s=args.webhook_timeout_seconds,
    )

    async def register() -> None:
        await kube.put_webhook_configuration(body)

    return Options(webhook_server=server, register_webhook=register)


def election_settings(args: argparse.Namespace) -> leadership.ElectionSettings | None:
    """The Lease settings, or None without --leader-elect; bad timing exits with the rule."""
    if not args.leader_elect:
        return None
    settings = leadership.ElectionSettings(
        namespace=args.leader_election_namespace or args.ledger_namespace,
        name=args.leader_election_lease_name,
        lease_duration_s=args.leader_election_lease_duration,
        renew_deadline_s=args.leader_election_renew_deadline,
        retry_period_s=args.leader_election_retry_period,
    )
    errors = settings.errors()
    if errors:
        raise SystemExit("rlix-operator: " + "; ".join(errors))
    return settings


def build_runtime(args: argparse.Namespace) -> Runtime:
    def clock() -> datetime:
        return datetime.now(UTC)

    settings = election_settings(args)
    try:
        rules = rules_file.from_args(args, default=DEFAULT_RULES)
    except ValueError as exc:
        raise SystemExit(f"rlix-operator: {exc}") from None
    store = Store()
    api = api_client(args.kubeconfig)
    kube = Kube(api)
    metrics = Metrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.metrics_host)
    recorder = Recorder(store, kube, clock)
    admitter = Admitter(
        store,
        recorder,
        RLixAdmission(rules),
        metrics,
        clock,
        kube,
        ledger_namespace=args.ledger_namespace,
        window=args.admission_window,
        grace=Grace(args.top_grace, args.class_grace, args.aging),
        namespaces=tuple(args.namespace),
    )
    reconciler = Reconciler(
        store,
        kube,
        recorder,
        admitter,
        metrics,
        clock,
        backoff_base_s=args.backoff_base_seconds,
        replan_after_s=args.replan_after_seconds,
        agent_socket_dir=args.agent_socket_dir,
        scheduler_name=args.scheduler_name,
    )
    elected = leadership.Leadership(settings, api) if settings is not None else None
    conductor = None
    if not args.no_conductor:
        conductor = Conductor(
            store,
            kube,
            recorder,
            metrics,
            clock,
            policy=RLixPolicy(rules=rules),
            config=ConductConfig(max_suspended_s=args.max_suspended_seconds),
            target=args.suspend_target,
            admitter=admitter,
        )
    return Runtime(store, admitter, reconciler, _webhook(args, kube), elected, conductor)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.kubeconfig:
        # kopf's login reads $KUBECONFIG; this process is its only reader.
        os.environ["KUBECONFIG"] = str(args.kubeconfig)
    kopf.configure(verbose=args.verbose)
    if not args.verbose:
        # kopf logs every handler call at INFO; at a thousand jobs that is the
        # operator's main CPU cost and buries the lines that matter.
        for name in ("kopf.objects", "aiohttp.access"):
            logging.getLogger(name).setLevel(logging.WARNING)
    runtime = build_runtime(args)
    registry = build_registry(runtime)
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            standalone=True,
            liveness_endpoint=args.liveness,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
