"""``rlix-operator``: run the RLJob operator against a cluster.

Examples:
  rlix-operator --kubeconfig ~/.kube/config            # cluster-wide, webhook on 127.0.0.1:9443
  rlix-operator --no-webhook --metrics-port 9090        # no admission webhook
  rlix-operator --namespace team-a --namespace team-b   # watch only these namespaces

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
from rlix.operator import webhook
from rlix.operator.admitting import DEFAULT_WINDOW, Admitter
from rlix.operator.certificates import make_certificates
from rlix.operator.handlers import Options, Runtime, build_registry
from rlix.operator.kube import Kube, api_client
from rlix.operator.metrics import Metrics
from rlix.operator.queueing import RLixAdmission
from rlix.operator.reconciling import Reconciler
from rlix.operator.recording import Recorder
from rlix.operator.replanning import DEFAULT_REPLAN_AFTER_S
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
        help="an admitted gang with a pod unschedulable this long is planned again "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--admission-window",
        type=int,
        default=DEFAULT_WINDOW,
        help="queued jobs (in queue order) the policy considers per pass (default %(default)s)",
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
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(argv)


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


def build_runtime(args: argparse.Namespace) -> Runtime:
    def clock() -> datetime:
        return datetime.now(UTC)

    store = Store()
    kube = Kube(api_client(args.kubeconfig))
    metrics = Metrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    recorder = Recorder(store, kube, clock)
    admitter = Admitter(
        store,
        recorder,
        RLixAdmission(),
        metrics,
        clock,
        kube,
        ledger_namespace=args.ledger_namespace,
        window=args.admission_window,
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
        agent_socket_dir=args.agent_socket_dir,
        replan_after_s=args.replan_after_seconds,
    )
    return Runtime(store, admitter, reconciler, _webhook(args, kube))


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
