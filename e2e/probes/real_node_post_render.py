"""Helm post-renderer for the chart on the test's real node (e2e/test_helm_real_node.py).

Two departures from a real cluster, both because the test node runs no
kube-proxy, and nothing else:

- every container names the API server ``kubernetes.default.svc:443``: the
  node's CoreDNS resolves it to the ``kubernetes`` Service's ClusterIP, which
  the node's namespace holds and forwards to the API server
  (rlix.devcluster.netns_forward), and the API server's certificate carries
  that name (as in e2e/test_real_containers.py);
- the extender's and the operator's Services are headless, so the scheduler's
  ``http://<extender>.<namespace>.svc`` and a scraper's
  ``http://<operator>.<namespace>.svc:<metrics port>/metrics`` resolve to the
  pods' own IPs instead of a ClusterIP nothing would route (the node agent's
  Service is headless in the chart already, one endpoint per node). Their
  ports equal their target ports, so the pod IP answers on the Service's port.

Reads the rendered manifests on stdin, writes them on stdout (helm's contract).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

API_SERVER_ENV = [
    {"name": "KUBERNETES_SERVICE_HOST", "value": "kubernetes.default.svc"},
    {"name": "KUBERNETES_SERVICE_PORT", "value": "443"},
]

# The components whose Service gets a ClusterIP in the chart (see the docstring).
HEADLESS = ("extender", "operator")


def render(obj: dict[str, Any]) -> dict[str, Any]:
    kind = obj.get("kind")
    if kind in ("Deployment", "DaemonSet"):
        for container in obj["spec"]["template"]["spec"]["containers"]:
            container["env"] = [*container.get("env", []), *API_SERVER_ENV]
    labels = obj.get("metadata", {}).get("labels", {})
    if kind == "Service" and labels.get("app.kubernetes.io/component") in HEADLESS:
        obj["spec"]["clusterIP"] = "None"
    return obj


def main() -> int:
    objects = [o for o in yaml.safe_load_all(sys.stdin) if o]
    yaml.safe_dump_all([render(o) for o in objects], sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
