"""kubectl's habits for choosing a cluster and a namespace: ``--kubeconfig``,
``--context``, ``-n/--namespace``, ``-A/--all-namespaces``.

Without ``-n`` or ``-A`` a command works in the namespace of the kubeconfig
context (``kubectl config set-context --current --namespace=...``), else in
``default``, exactly as kubectl does, so ``rlix`` and ``kubectl`` never
disagree about where they look.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_cluster_flags(parser: argparse.ArgumentParser, *, all_namespaces: bool) -> None:
    """Add ``--kubeconfig``, ``--context``, ``-n`` and, for listings, ``-A``."""
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        help="namespace (default: the kubeconfig context's namespace, else 'default')",
    )
    if all_namespaces:
        scope.add_argument(
            "-A",
            "--all-namespaces",
            action="store_true",
            help="every namespace",
        )


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace the kubeconfig's context names, or ``default``."""
    from kubernetes import config

    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    chosen: dict[str, Any] | None = active
    if context is not None:
        chosen = next((c for c in contexts if c.get("name") == context), None)
        if chosen is None:
            raise ValueError(f"context {context!r} not found in the kubeconfig")
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else "default"


def namespace_of(args: argparse.Namespace) -> str | None:
    """The namespace a command works in; None for ``-A`` (every namespace)."""
    if getattr(args, "all_namespaces", False):
        return None
    if args.namespace:
        return str(args.namespace)
    return context_namespace(args.kubeconfig, args.context)
