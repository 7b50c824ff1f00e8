"""``rlix cluster``: a local control plane with fake GPU nodes (kwokctl, binary runtime)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

DESCRIPTION = """\
Start, inspect or stop a local Kubernetes cluster for RLix development:
etcd, kube-apiserver, kube-controller-manager and the default kube-scheduler
(via kwokctl, binary runtime, bound to 127.0.0.1), a second kube-scheduler
serving schedulerName rlix-scheduler that calls the extender, and kwok nodes
that advertise nvidia.com/gpu like NVIDIA's device plugin does.

The binaries come from `make toolchain` (built from the Go module proxy and
cached under ~/.cache/rlix). Re-running `up` is safe: a healthy cluster is
reused and reshaped, a broken one recreated.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "cluster",
        help="start/stop a local cluster with fake GPU nodes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    up = verbs.add_parser("up", help="create or reconcile the cluster")
    _common(up)
    up.add_argument("--nodes", type=int, default=4, help="fake GPU nodes (default: 4)")
    up.add_argument("--gpus", type=int, default=8, help="GPUs per node (default: 8)")
    up.add_argument(
        "--gpu-memory-mib", type=int, default=81920, help="memory per GPU in MiB (default: 81920)"
    )
    up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        choices=(0, 1),
        help="real kubelet nodes (containerd, runc, locally built images) beside the fake "
        "ones; needs root and hack/node-deps.sh (default: 0)",
    )
    up.add_argument(
        "--extender-port",
        type=int,
        default=18787,
        help="port on 127.0.0.1 where rlix-scheduler expects the extender (default: 18787)",
    )
    up.set_defaults(run=_up)

    down = verbs.add_parser("down", help="stop the cluster and delete its state")
    _common(down)
    down.set_defaults(run=_down)

    status = verbs.add_parser("status", help="show whether the cluster runs and how to use it")
    _common(status)
    status.set_defaults(run=_status)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="rlix-dev", help="cluster name (default: rlix-dev)")


def _cluster(args: argparse.Namespace) -> Any:
    from rlix.devcluster.cluster import ClusterOptions, DevCluster
    from rlix.devcluster.toolchain import ToolchainMissingError, bin_dir

    fields: dict[str, Any] = {"name": args.name}
    for key in ("nodes", "gpus", "gpu_memory_mib", "extender_port", "real_nodes"):
        if hasattr(args, key):
            fields[key] = getattr(args, key)
    try:
        return DevCluster(ClusterOptions(**fields), bin_dir())
    except ToolchainMissingError as err:
        print(f"rlix cluster: {err}", file=sys.stderr)
        return None


def _up(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if cluster is None:
        return 1
    try:
        cluster.up()
    except RuntimeError as err:
        print(f"rlix cluster up: {err}", file=sys.stderr)
        return 1
    _print_usage(cluster)
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if cluster is None:
        return 1
    cluster.down()
    print(f"cluster {args.name!r} is down")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if cluster is None:
        return 1
    if not cluster.api_healthy():
        print(f"cluster {args.name!r} is not running (start it with `make cluster-up`)")
        return 1
    sched = "running" if cluster.scheduler_healthy() else "NOT running (re-run `make cluster-up`)"
    print(f"cluster {args.name!r}: API server ready; rlix-scheduler {sched}")
    _print_usage(cluster)
    return 0


def _print_usage(cluster: Any) -> None:
    print(
        f"""
kubeconfig:  {cluster.kubeconfig}
extender:    rlix-scheduler calls {cluster.options.extender_url} (start the extender there)

  export KUBECONFIG={cluster.kubeconfig}
  export PATH={cluster.bin_dir}:$PATH   # kubectl matching the server
  kubectl get nodes -o wide
  kubectl get nodes -o custom-columns=NAME:.metadata.name,GPUS:.status.allocatable.nvidia\\.com/gpu

Stop it with `make cluster-down`."""
    )
