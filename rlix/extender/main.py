"""``rlix-extender``: serve the kube-scheduler extender for the rlix-scheduler profile."""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Sequence

from rlix.core.names import SCHEDULER_NAME
from rlix.core.policy.placement import rules_file
from rlix.core.policy.placement.sharing import DEFAULT_RULES

DESCRIPTION = f"""\
Serve the RLix scheduler extender (filter, prioritize, preempt) for the
'{SCHEDULER_NAME}' kube-scheduler profile. Point a KubeSchedulerConfiguration
extender at http://HOST:PORT with filterVerb "filter", preemptVerb "preempt",
nodeCacheCapable: true and managedResources nvidia.com/gpu (see
docs/extender.md). The filter answers with the nodes RLix scores best, so no
prioritizeVerb is needed (prioritize is still served, for replay and old configs).

Also serves /healthz, /readyz (ready once nodes and pods were listed),
/metrics (Prometheus) and /debug/snapshot (the cache and the sharing rules,
for `rlix replay`).

Sharing: any two jobs of one priority may share a GPU where memory allows (at
most two jobs per GPU, one partner over all of a pod's GPUs). With
--interference, a pair shares only where the measured matrix says it delivers
at least 4/3 of one GPU's progress, and a top-priority job only where its
stretch stays within 1.2; give the operator the same file, so admission and
placement agree (docs/extender.md, "Sharing rules").
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlix-extender",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    parser.add_argument(
        "--port", type=int, default=8888, help="port to listen on (default: %(default)s)"
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig of the cluster to watch (default: in-cluster, then ~/.kube/config)",
    )
    parser.add_argument(
        "--no-watch",
        action="store_true",
        help="do not watch the API server; the cache stays empty and /readyz reports "
        "ready (for tests that feed the app directly)",
    )
    rules_file.add_arguments(
        parser,
        "a pair of jobs shares a GPU only where the matrix says sharing pays (default: "
        "no matrix, any two jobs of one priority may share)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default: %(default)s)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.port < 65536:
        build_parser().error(f"--port must be 1..65535, got {args.port}")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        rules = rules_file.from_args(args, default=DEFAULT_RULES)
    except ValueError as exc:
        build_parser().exit(2, f"rlix-extender: {exc}\n")

    import uvicorn

    from rlix.extender.app import create_app
    from rlix.extender.cache import ClusterCache
    from rlix.extender.watcher import start_watching

    cache = ClusterCache(rules)
    stop = threading.Event()
    if args.no_watch:
        cache.mark_synced("nodes")
        cache.mark_synced("pods")
    else:
        try:
            start_watching(cache, args.kubeconfig, stop)
        except Exception as exc:  # no kubeconfig, unreadable file, bad context...
            build_parser().exit(1, f"rlix-extender: cannot watch the cluster: {exc}\n")
    try:
        uvicorn.run(
            create_app(cache, freeze_gc=True),
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=False,
        )
    finally:
        stop.set()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
