"""Pods for the real node: our own image, never pulled, tolerating the node's taint."""

from __future__ import annotations

from typing import Any

from rlix.devcluster import realnode


def real_pod(node: realnode.RealNode, name: str, command: list[str]) -> dict[str, Any]:
    """A pod that runs ``command`` in the node image on the real node, once."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {realnode.NODE_LABEL: "true"},
            "tolerations": [{"key": realnode.TAINT_KEY, "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": node.node_image,
                    "imagePullPolicy": "Never",
                    "command": command,
                }
            ],
        },
    }
