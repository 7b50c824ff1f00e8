"""Run only by test_real_node.py in a child pytest: holds a cluster whose real
node runs a container, then waits to be killed.

The parent SIGKILLs this session (no teardown runs) and proves that the next
session's reaper removes the node's processes, cgroups, interfaces and mounts.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from e2e.kube import apply, get_json, wait_for
from e2e.realnode_pods import real_pod


def test_hold_real_node(cluster: Any, real_node: Any, namespace: str) -> None:
    apply(cluster, namespace, real_pod(real_node, "sleeper", ["sleep", "3600"]))
    wait_for(
        "the sleeper to run",
        lambda: (
            get_json(cluster, "pod", "sleeper", "-n", namespace)["status"].get("phase") == "Running"
        ),
        timeout_s=120,
    )
    out = Path(os.environ["RLIX_PROBE_OUT"])
    out.write_text(json.dumps({"name": cluster.options.name, "dir": str(cluster.dir)}))
    time.sleep(600)
